"""How gmp's messages word a count: ``1 sample``, ``2 samples``, in one place."""

from __future__ import annotations


def plural(noun: str, num: int, plural_form: str | None = None) -> str:
    """``noun`` as it reads after the number ``num``: singular for exactly 1, else ``plural_form``
    (default: ``noun`` + ``s``).

    >>> f"{1:,} {plural('sample', 1)}, {1200:,} {plural('sample', 1200)}, 0 {plural('entry', 0, 'entries')}"
    '1 sample, 1,200 samples, 0 entries'
    """
    return noun if num == 1 else plural_form or f"{noun}s"


def first_difference(ours: dict, theirs: dict) -> tuple[str, str] | None:
    """The first setting (in key order) whose value differs between two dicts of settings, worded both
    ways, ``("seed=0", "seed=7")``; a nested dict names only its differing parts
    (``herald.lookahead=3``). None when they are equal. A key one side lacks counts as None there.

    >>> first_difference({"seed": 0, "herald": {"lookahead": 3}}, {"seed": 0, "herald": {"lookahead": 0}})
    ('herald.lookahead=3', 'herald.lookahead=0')
    """
    for key in sorted(set(ours) | set(theirs), key=str):
        a, b = ours.get(key), theirs.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):  # the parts that differ, not two whole dicts
            parts = sorted((p for p in set(a) | set(b) if a.get(p) != b.get(p)), key=str)
            return (", ".join(f"{key}.{p}={a.get(p)!r}" for p in parts),
                    ", ".join(f"{key}.{p}={b.get(p)!r}" for p in parts))
        return f"{key}={a!r}", f"{key}={b!r}"
    return None
