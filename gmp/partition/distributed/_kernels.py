"""Compiled kernels of the distributed hybrid (see :mod:`gmp.partition.distributed`).

Variants of :mod:`gmp.partition._hybrid_kernels` for a process that holds a
*shard* of the samples and *ghost* copies of the rows its shard touches:

``gcount``  int32 [ghosts, N]     count[x, w] of the ghost rows (the owners' values after the last exchange,
                                  plus this process's own moves since)
``gdrow``   float64 [ghosts, W]   df[gcount], padded to whole SIMD vectors
``gprim``   int32 [ghosts]        primary of the ghost rows
``load``    int64 [N]             the global sample (or primary) load at the start of the block
``net``     int64 [N]             this process's net arrivals on each worker during the block
``quota``   int64 [N]             this process's share of the room under the hard cap in the block

A move onto worker b is allowed while ``net[b] < quota[b]``; the quotas of
all processes sum to ``cap - load[b]``, so the cap holds globally whatever the
others do. The balance penalty reads ``load + net`` (the others' moves of the
same block are not seen: the staleness the small blocks bound). The balance penalty reads
``load + spread * net`` with ``spread = P``: every process sees the same imbalance and corrects it
at the same time, so each counts its own moves P times (without it, P processes overshoot a
correction P-fold and the loads oscillate between blocks: a 900-sample test graph with 3
processes went from 400 to 484 expected reads in two rounds).

Every kernel visits vertices in a fixed order, so the result depends only on
its inputs (deterministic for a given seed and process count).
"""

from __future__ import annotations

import numba
import numpy as np

from ...kernels.simd import LANES, weighted_row_sum
from .._hybrid_kernels import (add_traffic, balance_delta, best_carry_move, carry_rows, move_sample,
                               private_tally, sample_gains)


@numba.njit(cache=True, nogil=True)
def sweep_block(indptr, indices, num_private, rows, sw, gprim, gcount, gdrow, df, ceff, load, net, quota, alpha,
                primary_load, pnet, pquota, beta, spread, gain, tally, moves, carried):  # pragma: no cover
    """Algorithm 1 lines 3-5 over the block's samples ``rows`` (block-local ids), in that order (as
    ``_hybrid_kernels.sweep_samples``, with quotas instead of the caps).

    Sample i on worker a moves to the worker b != a minimising

        sum_x ceff[p_x, b] * df[c_xb] - sum_x ceff[p_x, a] * df[c_xa - 1]
      + alpha * ((load_b + P net_b) - (load_a + P net_a) + 1)             (Eq. 3-4)

    among workers with ``net_b < quota_b``, if negative. Moves update
    ``gcount``/``gdrow``/``sw``/``net`` in place and are recorded in
    ``moves`` as (block sample, from, to) rows (as many as it holds).

    **Private rows** (``num_private[i]``: the last entries of sample i, rows of
    global degree 1, so their ghost on this process is their only copy besides
    the owner's): the sample moves with them as the single process does
    (``_hybrid_kernels.best_carry_move``, the exact change of J), the Eq. 4
    primary term reading ``primary_load + P pnet`` and b's arrivals of
    primaries bounded by ``pquota_b - pnet_b`` (this process's share of the
    room under the primary cap). Their new primaries update ``gprim`` and
    ``pnet`` and are recorded in ``carried`` as (ghost row, primary) rows for
    the owners. Returns ``(moves, carried rows)``.
    """
    num_workers = load.size
    width = gdrow.shape[1]
    df0 = df[0]
    shared = np.empty(num_workers, dtype=np.float64)  # best_carry_move's scratch
    proom = np.empty(num_workers, dtype=np.int64)
    pload = np.empty(num_workers, dtype=np.float64)
    m = 0
    c = 0
    for t in range(rows.size):
        i = rows[t]
        k0 = indptr[i]
        k1 = indptr[i + 1]
        if k0 == k1:
            continue
        kp = k1 - num_private[i]  # [k0, kp): shared rows, [kp, k1): private rows
        npv = k1 - kp
        a = sw[i]
        stay = sample_gains(indices, k0, kp, gprim, gdrow, ceff, width, gain, gcount, df, a)
        for b in range(num_workers):
            if b == a:
                shared[b] = 0.0
            elif net[b] >= quota[b]:
                shared[b] = np.inf
            else:
                shared[b] = gain[b] - stay + balance_delta(alpha, load[b] + spread * net[b], load[a] + spread * net[a])
        if npv > 0:
            private_stay = private_tally(indices, kp, k1, gprim, ceff, a, df0, tally)
            for w in range(num_workers):
                proom[w] = pquota[w] - pnet[w]
                pload[w] = primary_load[w] + spread * pnet[w]
            best, carry = best_carry_move(shared, a, npv, tally, private_stay, pload, proom, beta, ceff, df0)
        else:
            best, carry = cheapest_move(shared, a), False
        if best != a:  # a private row's count goes from (a: 1, best: 0) to (a: 0, best: 1) either way
            move_sample(indices, k0, k1, a, best, gcount, gdrow, df)
            net[a] -= 1
            net[best] += 1
            sw[i] = best
            if m < moves.shape[0]:  # one process records nothing (no deltas to send)
                moves[m, 0] = i
                moves[m, 1] = a
                moves[m, 2] = best
            m += 1
        if carry:
            carry_rows(indices, kp, k1, best, gprim, pnet)
            for k in range(kp, k1):
                if c < carried.shape[0]:
                    carried[c, 0] = indices[k]
                    carried[c, 1] = best
                c += 1
    return m, c


@numba.njit(cache=True, nogil=True, inline="always")
def cheapest_move(shared, a):  # pragma: no cover - compiled
    """The b minimising ``shared[b]`` if below -1e-9 (ties: the lowest b), else a."""
    best = a
    best_delta = -1e-9
    for b in range(shared.size):
        if b != a and shared[b] < best_delta:
            best_delta = shared[b]
            best = b
    return best


@numba.njit(cache=True, nogil=True)
def apply_deltas(rows, deltas, count):  # pragma: no cover - compiled
    """count[rows[t], deltas[t, 1]] += deltas[t, 2]."""
    for t in range(rows.size):
        count[rows[t], deltas[t, 1]] += deltas[t, 2]


@numba.njit(cache=True, nogil=True)
def overwrite_rows(pos, values, gcount, gdrow, df):  # pragma: no cover - compiled
    """Ghost rows ``pos`` take the owner's fresh counts ``values`` (int32 or int64 [m, N]; ``gcount`` itself
    recomputes drow alone); drow follows."""
    n = gcount.shape[1]
    for t in range(pos.size):
        g = pos[t]
        for w in range(n):
            c = values[t, w]
            gcount[g, w] = c
            gdrow[g, w] = df[c]


@numba.njit(cache=True, nogil=True)
def sweep_owned(x0, x1, prim, count, f, ceff_t, load, net, quota, beta, spread, fw, total, cost, served,
                received, sums, counts):  # pragma: no cover - compiled
    """Algorithm 1's embedding sweep over the owned rows [x0, x1) (global id order), with
    quotas; as ``_hybrid_kernels.sweep_embeddings`` it also totals the traffic of the result:
    ``sums`` = (weighted, expected reads), ``counts`` = (remote accesses, epoch-unique remote),
    ``served``/``received`` per worker. Returns the number moved."""
    num_workers = load.size
    width = ceff_t.shape[1]
    moved = 0
    for x in range(x0, x1):
        p = prim[x]
        for w in range(num_workers):
            fw[w] = f[count[x, w]]
        for col in range(0, width, LANES):
            weighted_row_sum(ceff_t, fw, num_workers, col, total)
        best = p
        best_delta = -1e-9
        for q in range(num_workers):
            if q == p or net[q] >= quota[q]:
                continue
            delta = total[q] - total[p] + balance_delta(beta, load[q] + spread * net[q], load[p] + spread * net[p])
            if delta < best_delta:
                best_delta = delta
                best = q
        if best != p:
            net[p] -= 1
            net[best] += 1
            prim[x] = best
            moved += 1
        add_traffic(x, prim[x], count, f, cost, served, received, sums, counts)
    return moved


@numba.njit(cache=True, nogil=True)
def owned_traffic(prim, count, f, cost, served, received, sums, counts):  # pragma: no cover - compiled
    """The traffic totals of :func:`sweep_owned` without moving anything."""
    for x in range(prim.size):
        add_traffic(x, prim[x], count, f, cost, served, received, sums, counts)


@numba.njit(cache=True, nogil=True)
def band_pair_keys(indptr, indices, rows, in_band, gids, keys):  # pragma: no cover - compiled
    """Pair keys ``(u << 32) | v`` (u < v global row ids) of the band rows of the shard samples ``rows``;
    returns the number written (``keys`` sized by :func:`band_pair_count`)."""
    pos = 0
    for t in range(rows.size):
        i = rows[t]
        for a in range(indptr[i], indptr[i + 1]):
            if not in_band[indices[a]]:
                continue
            u = np.int64(gids[indices[a]])
            for b in range(a + 1, indptr[i + 1]):
                if not in_band[indices[b]]:
                    continue
                v = np.int64(gids[indices[b]])
                if u == v:
                    continue
                keys[pos] = (u << 32) | v if u < v else (v << 32) | u
                pos += 1
    return pos


@numba.njit(cache=True, nogil=True)
def mark_band_rows(indptr, indices, rows, in_band, seen):  # pragma: no cover - compiled
    """seen[x] = True for every band row x of the shard samples ``rows``."""
    for t in range(rows.size):
        i = rows[t]
        for k in range(indptr[i], indptr[i + 1]):
            if in_band[indices[k]]:
                seen[indices[k]] = True


@numba.njit(cache=True, nogil=True)
def band_degrees(indptr, indices, in_band, out):  # pragma: no cover - compiled
    """out[i] = number of band rows of shard sample i."""
    for i in range(indptr.size - 1):
        d = 0
        for k in range(indptr[i], indptr[i + 1]):
            if in_band[indices[k]]:
                d += 1
        out[i] = d


@numba.njit(cache=True, nogil=True)
def ghost_deltas(indptr, indices, moves, num_moves, out):  # pragma: no cover - compiled
    """The count deltas of ``moves[:num_moves]`` as (ghost row, worker, +-1) rows of ``out`` (two per
    edge of each moved sample); returns the number written."""
    pos = 0
    for t in range(num_moves):
        i = moves[t, 0]
        for k in range(indptr[i], indptr[i + 1]):
            out[pos, 0] = indices[k]
            out[pos, 1] = moves[t, 1]
            out[pos, 2] = -1
            out[pos + 1, 0] = indices[k]
            out[pos + 1, 1] = moves[t, 2]
            out[pos + 1, 2] = 1
            pos += 2
    return pos


@numba.njit(cache=True, nogil=True)
def add_ghost_deltas(pos, deltas, gcount, gdrow, df):  # pragma: no cover - compiled
    """gcount[pos[t], deltas[t, 1]] += deltas[t, 2]; drow follows."""
    for t in range(pos.size):
        g = pos[t]
        w = deltas[t, 1]
        gcount[g, w] += deltas[t, 2]
        gdrow[g, w] = df[gcount[g, w]]
