"""``np.unique(values, return_inverse=True)`` for small non-negative integers, without the sort of
every value: the distinct rows of a batch and the distinct slots of a primary's gradients.

``np.unique`` with ``return_inverse`` sorts all ``n`` values (a stable argsort: 3.4 ms for the
53,248 ids of a 2,048-sample Criteo batch, 11,161 distinct). :class:`UniqueIndex` keeps a map
over the value range (int32, -1 = unseen) between calls: one pass marks the first occurrence of
each value, only the ``k`` distinct values are sorted, a second pass reads each value's
position, and the touched entries are reset (``O(n + k log k)``; 0.3 ms there). The result is
``np.unique``'s exactly: sorted distinct values (int64) and int64 positions.

The map is allocated at the first call (4 bytes per value of the range); ranges above
:data:`~gmp.train.slots.DENSE_MAP_MAX_IDS` fall back to ``np.unique``. One instance is not
thread-safe (the trainer calls it from its main thread only).
"""

from __future__ import annotations

import numba
import numpy as np

from .slots import DENSE_MAP_MAX_IDS


@numba.njit(cache=True, nogil=True)
def _unique_inverse(values, seen):  # pragma: no cover - compiled
    """(sorted distinct values, position of each value among them); ``seen`` all -1 before and after."""
    n = values.size
    first = np.empty(n, dtype=np.int64)
    k = 0
    for e in range(n):
        v = values[e]
        if seen[v] < 0:
            seen[v] = k
            first[k] = v
            k += 1
    uniq = np.sort(first[:k])
    for j in range(k):
        seen[uniq[j]] = j
    inv = np.empty(n, dtype=np.int64)
    for e in range(n):
        inv[e] = seen[values[e]]
    for j in range(k):
        seen[uniq[j]] = -1
    return uniq, inv


class UniqueIndex:
    """``np.unique(values, return_inverse=True)`` for int values in ``[0, size)`` (module docstring).

    >>> u, inv = UniqueIndex(10)(np.array([7, 2, 7, 5]))
    >>> u.tolist(), inv.tolist()
    ([2, 5, 7], [2, 0, 2, 1])
    """

    def __init__(self, size: int):
        self.size = int(size)
        self._seen: np.ndarray | None = None

    def __call__(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = np.asarray(values, dtype=np.int64)
        if self.size > DENSE_MAP_MAX_IDS or values.size == 0 or values.min() < 0 or values.max() >= self.size:
            # (out-of-range values: np.unique's answer, and the caller's own check refuses them)
            uniq, inv = np.unique(values, return_inverse=True)
            return uniq, inv.reshape(-1)
        if self._seen is None:
            self._seen = np.full(self.size, -1, dtype=np.int32)
        return _unique_inverse(values, self._seen)
