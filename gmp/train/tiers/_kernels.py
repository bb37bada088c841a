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


@numba.njit(cache=True, nogil=True)
def pick_victims(pins, row_of, last_use, window, use_window, need):  # pragma: no cover - compiled
    """The ``need`` unpinned resident slots to evict, in eviction order: rows outside the look-ahead
    window first (``use_window``), least recently used first within each group, lowest slot first
    among equals. Empty when fewer than ``need`` slots are evictable.

    A counting sort on the key ``(in window, last_use)``: ``last_use`` is the cache's admission
    clock, so the keys span a small range; two passes over the slots, no comparison sort.
    """
    lo = np.iinfo(np.int64).max
    hi = -1
    num = 0
    for s in range(pins.size):
        if pins[s] == 0 and row_of[s] >= 0:
            num += 1
            if last_use[s] < lo:
                lo = last_use[s]
            if last_use[s] > hi:
                hi = last_use[s]
    if num < need or need <= 0:
        return np.empty(0, dtype=np.int64)
    span = hi - lo + 1
    hist = np.zeros(2 * span, dtype=np.int64)
    for s in range(pins.size):
        if pins[s] == 0 and row_of[s] >= 0:
            f = 1 if use_window and window[row_of[s]] > 0 else 0
            hist[f * span + last_use[s] - lo] += 1
    acc = 0
    cut = 0
    for b in range(2 * span):
        if acc + hist[b] >= need:
            cut = b
            break
        acc += hist[b]
    start = np.empty(cut + 1, dtype=np.int64)
    run = 0
    for b in range(cut + 1):
        start[b] = run
        run += hist[b]
    left_at_cut = need - acc
    out = np.empty(need, dtype=np.int64)
    for s in range(pins.size):
        if pins[s] == 0 and row_of[s] >= 0:
            f = 1 if use_window and window[row_of[s]] > 0 else 0
            key = f * span + last_use[s] - lo
            if key < cut:
                out[start[key]] = s
                start[key] += 1
            elif key == cut and left_at_cut > 0:
                out[start[key]] = s
                start[key] += 1
                left_at_cut -= 1
    return out
