"""Compiled kernels of the one-pass plan (:mod:`gmp.partition._incremental_onepass`; used only by it).

The plan keeps no numbering of the new day's rows: its state is one **table** row per id of the whole
id space, int64 ``[num_embeddings, 1 + ceil(N / 4)]`` (24 bytes at 8 workers), read and written once per
edge:

``table[x, 0] >= 0``  a placed row: bits ``[0, N)`` the workers holding it (primary and secondaries),
                      bits ``[57, 63)`` its primary
``table[x, 0] < 0``   a row without a primary yet (a new id, or an old id created afresh):
                      ``u = -table[x, 0] - 1`` holds a running majority vote of the workers of its
                      samples so far (Boyer-Moore: the candidate in bits ``[0, 6)``, its count above;
                      ``u = 0``: no sample read it yet)
``table[x, 1:]``      the samples of each worker that read x: 16-bit lanes, worker w in column
                      ``1 + w // 4``, bits ``16 * (w % 4)``; a lane stops at 65535

Every kernel is sequential in a fixed order, so results depend only on the inputs.
"""

from __future__ import annotations

import numba
import numpy as np

from ..kernels.simd import prefetch
from ._incremental_kernels import cheapest_below_cap

#: bit of the primary in a word (57 holder bits below it)
SHIFT = 57
#: ``table[x, 0]`` of a row without a primary that no sample has read yet
UNSEEN = -1
#: the largest count a vote or a lane holds
MAX_VOTES = (1 << 50) - 1
MAX_LANE = 0xFFFF


@numba.njit(cache=True, nogil=True)
def fill_words(prim, sec_indptr, sec_workers, keep, has_keep, table):  # pragma: no cover - compiled
    """table[x, 0] for every id: holders and primary of the old ids x < prim.size where ``keep[x]`` (or every
    x when not ``has_keep``), :data:`UNSEEN` for the others and for the new ids (module docstring)."""
    one = np.int64(1)
    for x in range(table.shape[0]):
        if x >= prim.size or (has_keep and not keep[x]):
            table[x, 0] = UNSEEN
            continue
        p = np.int64(prim[x])
        v = (p << SHIFT) | (one << p)
        for k in range(sec_indptr[x], sec_indptr[x + 1]):
            v |= one << np.int64(sec_workers[k])
        table[x, 0] = v


@numba.njit(cache=True, nogil=True)
def place_and_count(indptr, indices, table, cost, alpha, load, cap, out):  # pragma: no cover - compiled
    """Every sample once, in dataset order, to the worker w below ``cap`` minimising

        sum_x [w does not hold x] * cost[p_x, w]  +  alpha * load[w]          (Eq. 3 without the soft count, Eq. 4)

    ties to the lowest id; then each of its rows counts the sample in w's lane. A row without a primary
    counts as if its primary were its vote's candidate (nothing while no sample read it) and votes for w.
    A row every worker holds adds the same to every worker and is skipped in the sum. While sample i is
    placed the table rows of sample i + 1 are prefetched (a cache miss per row otherwise: the table spans
    the id space).
    """
    n = load.size
    full = (np.int64(1) << n) - 1
    low = (np.int64(1) << SHIFT) - 1
    delta = np.empty(n)
    num = indptr.size - 1
    for i in range(num):
        if i + 1 < num:
            for k in range(indptr[i + 1], indptr[i + 2]):
                prefetch(table, indices[k])
        for w in range(n):
            delta[w] = alpha * load[w]
        for k in range(indptr[i], indptr[i + 1]):
            v = table[indices[k], 0]
            if v >= 0:
                holders = v & low
                if holders == full:
                    continue
                p = v >> SHIFT
                for w in range(n):  # branch-free: the compiler vectorises it
                    delta[w] += cost[p, w] * (1 - ((holders >> w) & 1))
            else:
                u = -v - 1
                if u >> 6 > 0:
                    p = u & 63
                    for w in range(n):
                        if w != p:
                            delta[w] += cost[p, w]
        best = cheapest_below_cap(delta, load, cap)
        out[i] = best
        load[best] += 1
        col = 1 + best // 4
        shift = 16 * (best % 4)
        for k in range(indptr[i], indptr[i + 1]):
            x = indices[k]
            if (table[x, col] >> shift) & MAX_LANE != MAX_LANE:
                table[x, col] += np.int64(1) << shift
            v = table[x, 0]
            if v < 0:  # a vote (Boyer-Moore majority of the workers of the row's samples)
                u = -v - 1
                votes = u >> 6
                if votes == 0:
                    u = (1 << 6) | best
                elif (u & 63) == best:
                    if votes < MAX_VOTES:
                        u += 1 << 6
                else:
                    u -= 1 << 6
                table[x, 0] = -u - 1


@numba.njit(cache=True, nogil=True)
def mark_read_rows(table, bits):  # pragma: no cover - compiled
    """Set bit x of ``bits`` (int64 words, zeroed) for every id some sample read (a lane above 0): one scan of
    the table; :func:`gmp.partition._incremental_kernels.rank_ids` then lists them."""
    for x in range(table.shape[0]):
        for c in range(1, table.shape[1]):
            if table[x, c] != 0:
                bits[x >> 6] |= np.int64(1) << (x & 63)
                break


@numba.njit(cache=True, nogil=True)
def unpack(table, rows, prim, sec, count):  # pragma: no cover - compiled
    """For each id ``rows[j]``: its primary (-1: none yet), its secondaries as an int64 mask and its
    per-worker sample counts (int32 [rows, N]) from the table."""
    n = count.shape[1]
    one = np.int64(1)
    low = (one << SHIFT) - 1
    for j in range(rows.size):
        x = rows[j]
        v = table[x, 0]
        if v < 0:
            prim[j] = -1
            sec[j] = 0
        else:
            p = v >> SHIFT
            prim[j] = p
            sec[j] = (v & low) & ~(one << p)
        for w in range(n):
            count[j, w] = (table[x, 1 + w // 4] >> (16 * (w % 4))) & MAX_LANE
