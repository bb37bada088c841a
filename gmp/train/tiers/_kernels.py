"""Compiled helpers of :mod:`gmp.train.tiers` (used only by this package)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def step_primaries(indptr, indices, samples, slot_map, identity, num_primary, mark):  # pragma: no cover - compiled
    """Ascending distinct primary slots (``0 <= slot < num_primary``) of the ids of ``samples``.

    One pass over the samples' ids (``slot = id`` when ``identity``, else ``slot_map[id]``, -1 when
    not held) marking each slot once in ``mark`` (uint8, all 0 on entry and again on return), then a
    sort of the distinct ones: the work of gather + ``np.unique`` + lookup + filter without the
    intermediate arrays, and without the GIL (the prefetch thread runs beside the step).
    """
    total = 0
    for k in range(samples.size):
        s = samples[k]
        total += indptr[s + 1] - indptr[s]
    out = np.empty(total, dtype=np.int64)
    count = 0
    for k in range(samples.size):
        s = samples[k]
        for j in range(indptr[s], indptr[s + 1]):
            g = indices[j]
            sl = g if identity else slot_map[g]
            if sl >= 0 and sl < num_primary and mark[sl] == 0:
                mark[sl] = 1
                out[count] = sl
                count += 1
    res = np.sort(out[:count])
    for i in range(count):
        mark[res[i]] = 0
    return res
