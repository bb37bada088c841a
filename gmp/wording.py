"""How gmp's messages word a count: ``1 sample``, ``2 samples``, in one place."""

from __future__ import annotations

from typing import Any


def plural(noun: str, num: int, plural_form: str | None = None) -> str:
    """``noun`` as it reads after the number ``num``: singular for exactly 1, else ``plural_form``
    (default: ``noun`` + ``s``).

    >>> f"{1:,} {plural('sample', 1)}, {1200:,} {plural('sample', 1200)}, 0 {plural('entry', 0, 'entries')}"
    '1 sample, 1,200 samples, 0 entries'
    """
    return noun if num == 1 else plural_form or f"{noun}s"


def differing_parts(ours: dict, theirs: dict) -> tuple[str, bool, list[tuple[Any, Any, Any]]] | None:
    """The first setting (in key order) whose value differs between two dicts of settings: its key, whether it
    is a nested dict, and its differing parts ``[(name, ours, theirs)]`` (the setting itself for a plain value,
    each differing key of a nested dict). None when they are equal; a key one side lacks counts as None there.

    >>> differing_parts({"seed": 0, "herald": {"lookahead": 3}}, {"seed": 0, "herald": {"lookahead": 0}})
    ('herald', True, [('lookahead', 3, 0)])
    """
    for key in sorted(set(ours) | set(theirs), key=str):
        a, b = ours.get(key), theirs.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):  # the parts that differ, not two whole dicts
            names = sorted(set(a) | set(b), key=str)
            return key, True, [(p, a.get(p), b.get(p)) for p in names if a.get(p) != b.get(p)]
        return key, False, [(key, a, b)]
    return None


def first_difference(ours: dict, theirs: dict) -> tuple[str, str] | None:
    """:func:`differing_parts` worded both ways, ``("seed=0", "seed=7")``; a nested dict names only its
    differing parts (``herald.lookahead=3``). None when they are equal.

    >>> first_difference({"seed": 0, "herald": {"lookahead": 3}}, {"seed": 0, "herald": {"lookahead": 0}})
    ('herald.lookahead=3', 'herald.lookahead=0')
    """
    found = differing_parts(ours, theirs)
    if found is None:
        return None
    key, nested, parts = found
    name = (lambda p: f"{key}.{p}") if nested else str
    return (", ".join(f"{name(p)}={a!r}" for p, a, _ in parts), ", ".join(f"{name(p)}={b!r}" for p, _, b in parts))
