"""Compiled kernels of the sampled plan (:mod:`gmp.partition._incremental_sampled`; used only by it).

The plan keeps no per-edge numbering of the new day: what a sample's placement needs of a row is
one **word** per id of the whole id space (int32 for up to 16 workers, int64 for up to 57), read
once per edge:

``word >= 0``  a placed row: bits ``[0, N)`` the workers holding it (primary and secondaries),
               bits ``[shift, shift + 6)`` its primary (``shift`` = 16 or 57)
``word < 0``   a row without a primary yet (a new id, or an old id created afresh): ``u = -word - 1``
               holds a running majority vote of the workers of its samples so far (Boyer-Moore:
               the candidate in bits ``[0, 6)``, its count above; ``u = 0``, i.e. ``word = -1``:
               no sample read it yet)

Every kernel is sequential in a fixed order, so results depend only on the inputs.
"""

from __future__ import annotations

import numba
import numpy as np

from ..kernels.simd import prefetch
from ._incremental_kernels import cheapest_below_cap

#: ``word`` of a row without a primary that no sample has read yet
UNSEEN = -1
#: the largest count a vote holds (int32 words: 25 bits above the 6 of the candidate)
MAX_VOTES = (1 << 24) - 1


@numba.njit(cache=True, nogil=True)
def fill_words(prim, sec_indptr, sec_workers, keep, has_keep, shift, word):  # pragma: no cover - compiled
    """word[x] for the old ids x < prim.size: holders and primary (module docstring) where ``keep[x]``
    (or every x when not ``has_keep``), :data:`UNSEEN` elsewhere; the caller sets the new ids."""
    one = word.dtype.type(1)
    for x in range(prim.size):
        if has_keep and not keep[x]:
            word[x] = UNSEEN
            continue
        p = prim[x]
        v = (word.dtype.type(p) << shift) | (one << p)
        for k in range(sec_indptr[x], sec_indptr[x + 1]):
            v |= one << sec_workers[k]
        word[x] = v


@numba.njit(cache=True, nogil=True)
def every_kth(indptr, indices, every):  # pragma: no cover - compiled
    """The CSR of samples 0, every, 2 * every, ... (their edges copied in order)."""
    num = (indptr.size - 2) // every + 1 if indptr.size > 1 else 0
    sub_indptr = np.zeros(num + 1, dtype=np.int64)
    for j in range(num):
        i = j * every
        sub_indptr[j + 1] = sub_indptr[j] + indptr[i + 1] - indptr[i]
    sub = np.empty(sub_indptr[num], dtype=indices.dtype)
    for j in range(num):
        i = j * every
        a = indptr[i]
        b = sub_indptr[j]
        for t in range(indptr[i + 1] - a):
            sub[b + t] = indices[a + t]
    return sub_indptr, sub


@numba.njit(cache=True, nogil=True)
def place_samples(indptr, indices, word, shift, cost, alpha, load, cap, out):  # pragma: no cover - compiled
    """Every sample once, in dataset order, to the worker w below ``cap`` minimising

        sum_x [w does not hold x] * cost[p_x, w]  +  alpha * load[w]          (Eq. 3 without the soft count, Eq. 4)

    ties to the lowest id. A row without a primary counts as if its primary were its vote's candidate
    (nothing while no sample read it); after the choice, each such row of the sample votes for the
    worker chosen. A row every worker holds adds the same to every worker and is skipped. While
    sample i is placed the words of sample i + 1's rows are prefetched (6.5M-sample Criteo day, 169M
    edges, 33.8M ids: 2.4 -> 1.2 s).
    """
    n = load.size
    full = (word.dtype.type(1) << n) - 1
    low = (word.dtype.type(1) << shift) - 1
    delta = np.empty(n)
    num = indptr.size - 1
    for i in range(num):
        if i + 1 < num:
            for k in range(indptr[i + 1], indptr[i + 2]):
                prefetch(word, indices[k])
        for w in range(n):
            delta[w] = alpha * load[w]
        votes = False
        for k in range(indptr[i], indptr[i + 1]):
            v = word[indices[k]]
            if v < 0:
                votes = True
            if v >= 0:
                holders = v & low
                if holders == full:
                    continue
                p = v >> shift
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
        if not votes:  # no row of the sample lacks a primary (1M drift day: 0.15 -> 0.12 s)
            continue
        for k in range(indptr[i], indptr[i + 1]):
            x = indices[k]
            v = word[x]
            if v < 0:  # a vote (Boyer-Moore majority of the workers of the row's samples)
                u = -v - 1
                count = u >> 6
                if count == 0:
                    u = (1 << 6) | best
                elif (u & 63) == best:
                    if count < MAX_VOTES:
                        u += 1 << 6
                else:
                    u -= 1 << 6
                word[x] = -u - 1


@numba.njit(cache=True, nogil=True)
def secondaries_of(word, ids, shift, out):  # pragma: no cover - compiled
    """out[j] = the secondary workers of placed row ``ids[j]`` as an int64 mask (holders less primary)."""
    one = np.int64(1)
    low = (word.dtype.type(1) << shift) - 1
    for j in range(ids.size):
        v = word[ids[j]]
        if v < 0:
            out[j] = 0
        else:
            p = np.int64(v >> shift)
            out[j] = np.int64(v & low) & ~(one << p)
