"""How gmp's messages word a count: ``1 sample``, ``2 samples``, in one place."""

from __future__ import annotations


def plural(noun: str, num: int, plural_form: str | None = None) -> str:
    """``noun`` as it reads after the number ``num``: singular for exactly 1, else ``plural_form``
    (default: ``noun`` + ``s``).

    >>> f"{1:,} {plural('sample', 1)}, {1200:,} {plural('sample', 1200)}, 0 {plural('entry', 0, 'entries')}"
    '1 sample, 1,200 samples, 0 entries'
    """
    return noun if num == 1 else plural_form or f"{noun}s"
