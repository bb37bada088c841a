"""The start of the distributed hybrid: the multilevel start from shards, or a seeded random one.

**Choice.** The single-process default (``levels=2``, :mod:`gmp.partition._multilevel`) contracts
the samples into the co-occurrence graph of the *signal rows* (degree in a band ``[lo, hi]``,
at most ``coarse_vertices`` of them) built from a seeded subset of at most ``coarse_pairs`` row
pairs, partitions that graph with METIS and projects it. That graph is bounded by the two
options, not by the data: 100,000 vertices and 24M pairs at most, whatever the number of
samples. So the distributed start keeps it, and only the work that grows with the data is
sharded:

1. row degrees: each process counts its shard's rows, the owners sum them;
2. the band: a histogram of the owners' degrees, summed (the single-process formula);
3. pairs: each process draws its share ``coarse_pairs / P`` of pair budget from its own shard
   (seeded by seed, P and rank) and sends its distinct pair keys with their counts to rank 0;
4. rank 0 merges the keys (a few hundred MB at most), runs METIS on the bounded graph and
   broadcasts the signal rows' workers (``coarse_vertices`` ints);
5. projection, sharded: every process assigns its samples to the worker holding most of their
   signal rows within its share of the sample cap; counts go to the owners, who choose the
   primaries within their share of the primary cap.

As in the single-process scheme one candidate per band (``coarse_restarts``) is projected (the
lower J of :data:`METIS_SEEDS` METIS runs) and, on a flat topology, refined by the rounds before the
choice (:func:`multilevel_start`'s ``refine_bands``): the lowest refined J less the 2D step's savings
is kept (on a hierarchical one the lowest projected J, refined after). Small graphs get the single
process's *portfolio* instead (``refine``): more bands and seeds, each candidate refined by rounds
before the choice. ``levels=1`` (or no signal rows) starts from a seeded
random placement, balanced to within one sample (and one primary) per worker globally.

A random start + more rounds was the alternative; it loses the structure carried by rarely seen
rows that the flat sweep cannot find (criteo-1m: docs/hybrid.md, "Multilevel"), so it is only
the fallback.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable

import numpy as np
import scipy.sparse as sp

from .. import _multilevel as ML
from .._common import assign_by_majority, choose_primaries
from .._hybrid_kernels import count_samples
from .._multilevel import default_coarse_pairs
from . import _kernels as DK
from .state import DistState

log = logging.getLogger(__name__)

#: METIS runs (seeds) per candidate band, each projected; the lowest J is kept (the single-process start: 1).
#: The signal graph is bounded (coarse_vertices), so a run costs seconds whatever the data size.
METIS_SEEDS = 2

#: samples per block of the projection's visiting order (one block is read at a time when streamed)
PROJECT_BLOCK = 65536


def install_samples(state: DistState, sw: np.ndarray) -> None:
    """Samples of this shard on ``sw``; the owners' counts of the result (``state.count``)."""
    state.sw[:] = sw
    if state.shared:
        state.count[:] = 0
        target = state.count
    else:
        target = np.zeros_like(state.gcount)
    for first, indptr, indices in state.shard.chunks():
        count_samples(indptr, indices, state.sw[first:first + indptr.size - 1], target)
    if not state.shared:
        state.count[:] = state.owned.sum_received(state.ghosts.send_to_owners(target))
    state.sample_load = state.mesh.isum(np.bincount(state.sw, minlength=state.num_workers))


def install_primaries(state: DistState, prim: np.ndarray) -> None:
    state.prim[:] = prim
    state.refresh_ghosts(counts=True)
    state.primary_load = state.mesh.isum(np.bincount(state.prim, minlength=state.num_workers))
    state.mark_stale()


def random_start(state: DistState, rng: np.random.Generator) -> None:
    """Seeded random start, balanced to within one globally: the sample with global index j (and the
    used row with global rank j) is dealt worker ``j % N``, then shuffled within the shard (rows)."""
    n = state.num_workers
    sw = ((state.shard.start + np.arange(state.shard.num_samples)) % n).astype(np.int32)
    install_samples(state, sw[rng.permutation(sw.size)])
    sizes = state.mesh.isum(np.eye(state.mesh.size, dtype=np.int64)[state.mesh.rank] * state.owned.used.size)
    offset = int(sizes[:state.mesh.rank].sum())
    prim = ((offset + np.arange(state.owned.used.size)) % n).astype(np.int32)
    install_primaries(state, prim[rng.permutation(prim.size)])


def band_from_histogram(hist: np.ndarray, hi: int, max_vertices: int) -> int:
    """``lo`` of :func:`gmp.partition._multilevel.signal_band` from the degree histogram ``hist[d]``
    (d = 0 .. hi; degrees above hi need not be in it)."""
    counts = np.array(hist[:hi + 1], dtype=np.int64)
    counts[:2] = 0
    if int(counts.sum()) <= max_vertices:
        return 2
    above = np.cumsum(counts[::-1])[::-1]
    return max(int(np.argmax(above <= max_vertices)), 2)


def multilevel_start(state: DistState, owner_degree: np.ndarray, options, machine_of: np.ndarray,
                     rng: np.random.Generator, seed_rng: np.random.Generator,
                     refine: Callable[[DistState], tuple[float, list[dict]]] | None = None,
                     refine_bands: Callable[[DistState], tuple[float, list[dict]]] | None = None
                     ) -> tuple[dict, list[dict] | None] | None:
    """The distributed multilevel start (module docstring): ``(info, rounds)``, or None when no band has N
    signal rows.

    ``refine`` given: the *portfolio* (small graphs, as the single process's): ``portfolio_bands`` bands x
    ``portfolio_seeds`` METIS seeds, every projection refined by ``refine`` (the rounds, returning the
    score J less the 2D step's savings and the round log) and the lowest score kept; ``rounds`` is its
    round log. Else one candidate per band (``coarse_restarts``) x :data:`METIS_SEEDS`, the band's lower
    projected J kept; ``refine_bands`` given (large flat graphs, as the single process), each band's
    projection is then refined by it and the lowest score wins (``rounds``: its round log); else the lowest
    projected J wins and ``rounds`` is None."""
    t0 = time.perf_counter()
    mesh, n = state.mesh, state.num_workers
    num_bands, num_seeds = ((options.portfolio_bands, options.portfolio_seeds) if refine is not None else
                            (options.coarse_restarts, METIS_SEEDS))
    ghost_degree = owner_degree if state.shared else state.ghosts.receive_full(state.owned, owner_degree)[:, 0]
    m = max(state.w.num_samples / n, 1.0)
    b = min(float(options.batch_size), m)
    max_pairs = options.coarse_pairs or default_coarse_pairs(state.w.num_samples)
    my_pairs = int(mesh.split_room(np.array([max_pairs]), 0)[0])
    best, candidates, seen = None, [], set()
    for k in range(num_bands):
        hi = max(4, int(math.ceil(options.saturation * 4.0**k * m / b)))
        hist = mesh.isum(np.bincount(np.minimum(owner_degree, hi + 1), minlength=hi + 2))
        lo = band_from_histogram(hist, hi, options.coarse_vertices)
        if (lo, hi) in seen:
            continue
        seen.add((lo, hi))
        in_band = (ghost_degree >= lo) & (ghost_degree <= hi)
        vids, parts, cand = _partition_band(state, in_band, ghost_degree, my_pairs, options, machine_of, rng,
                                            seed_rng, num_seeds)
        cand["band"] = [lo, hi]
        candidates.append(cand)
        if vids is None:
            continue
        cand["objectives"] = []
        band_best = None  # refine_bands: (J, samples, primaries) of this band's lower projection
        for part in parts:  # one projection per METIS seed; the lowest J (portfolio: score) is kept
            _project(state, vids, part, rng)
            score, rounds = refine(state) if refine is not None else (state.summary()["objective"], None)
            cand["objectives"].append(score)
            log.info("distributed hybrid start: band [%d, %d], %d vertices: %s %.6g", lo, hi, cand["vertices"],
                     "refined score" if refine is not None else "objective", score)
            if refine_bands is not None:
                if band_best is None or score < band_best[0]:
                    band_best = (score, state.sw.copy(), state.prim.copy())
            elif best is None or score < best[0]:
                counts = state.count.copy() if refine is not None else None
                best = (score, state.sw.copy(), state.prim.copy(), len(candidates) - 1, counts, rounds)
        cand["objective"] = min(cand["objectives"])
        if band_best is not None:  # the band's projection refined, scored as the single process scores it
            if not (np.array_equal(band_best[1], state.sw) and np.array_equal(band_best[2], state.prim)):
                install_samples(state, band_best[1])
                install_primaries(state, band_best[2])
            del band_best
            score, rounds = refine_bands(state)
            cand["score"], cand["rounds"] = score, len(rounds) - 1
            if best is None or score < best[0]:  # no copy of the counts ([rows, N]): recounted if this one is
                # not the last band's (one pass over the shard, the same counts)
                best = (score, state.sw.copy(), state.prim.copy(), len(candidates) - 1, None, rounds)
    if best is None:
        return None
    _, sw, prim, chosen, counts, rounds = best
    if not (np.array_equal(sw, state.sw) and np.array_equal(prim, state.prim)):  # the best was not the last
        if counts is not None:
            state.set_start(sw, counts, prim)
        else:
            install_samples(state, sw)
            install_primaries(state, prim)
    info = {"candidates": candidates, "chosen": chosen, "max_pairs": max_pairs, "portfolio": refine is not None,
            "refined": refine is not None or refine_bands is not None, "seconds": round(time.perf_counter() - t0, 4)}
    return info, rounds


def _partition_band(state, in_band, ghost_degree, my_pairs, options, machine_of, rng, seed_rng, num_seeds):
    """Pairs of this shard's band rows to rank 0, METIS there (``num_seeds`` seeds), the signal rows'
    workers back."""
    mesh = state.mesh
    shard = state.shard
    bdeg = np.zeros(shard.num_samples, dtype=np.int32)
    for first, indptr, indices in shard.chunks():
        DK.band_degrees(indptr, indices, in_band, bdeg[first:first + indptr.size - 1])
    pairs = bdeg * (bdeg - 1) // 2
    if int(pairs.sum()) <= my_pairs:
        rows = np.arange(shard.num_samples, dtype=np.int64)
    else:
        perm = rng.permutation(shard.num_samples)
        take = int(np.searchsorted(np.cumsum(pairs[perm]), my_pairs, side="right"))
        rows = np.sort(perm[:take]).astype(np.int64)
    del bdeg
    keys, seen = [], np.zeros(state.ghosts.gids.size, dtype=np.bool_)
    for first, indptr, indices in shard.chunks():
        lo_, hi_ = np.searchsorted(rows, [first, first + indptr.size - 1])
        sel = rows[lo_:hi_] - first
        buf = np.empty(int(pairs[rows[lo_:hi_]].sum()), dtype=np.int64)
        keys.append(buf[:DK.band_pair_keys(indptr, indices, sel, in_band, state.ghosts.gids, buf)])
        DK.mark_band_rows(indptr, indices, sel, in_band, seen)
    # (memory: every array of the pair keys is dropped once the next is made; METIS runs beside none of them)
    all_keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    del keys
    uniq, cnt = np.unique(all_keys, return_counts=True)
    del all_keys
    vg = np.flatnonzero(seen)
    got = [mesh.to_root(a) for a in (uniq, cnt, state.ghosts.gids[vg], ghost_degree[vg])]
    del uniq, cnt
    cand = {"rows_sampled": int(mesh.isum(np.array([rows.size]))[0])}
    result = None
    if mesh.rank == 0:
        merged = [np.concatenate(g) for g in got]
        del got
        result = _root_partition(merged, machine_of, seed_rng, options, cand, num_seeds)
    vids, parts, info = mesh.broadcast((*result[:2], cand) if result is not None else None) or (None, None, cand)
    cand.update(info)
    return vids, parts, cand


def _root_partition(got, machine_of, seed_rng, options, cand, num_seeds):
    """Rank 0: merge the pair keys, build the signal graph, METIS k-way; ``(vertex ids, parts)`` or None.
    ``got`` (keys, counts, vertex ids, degrees) is emptied: its arrays are freed before METIS runs."""
    keys, cnt, vids, vdeg = got
    got.clear()
    uniq, inv = np.unique(keys, return_inverse=True)
    weights = np.bincount(inv, weights=cnt).astype(np.int64)
    del keys, cnt, inv
    vids, first = np.unique(vids, return_index=True)
    vdeg = vdeg[first]
    cand["vertices"], cand["edges"] = int(vids.size), int(uniq.size)
    seed = int(seed_rng.integers(0, 2**31 - 1 - num_seeds))
    if vids.size < machine_of.size:
        return None
    u = np.searchsorted(vids, uniq >> 32)
    v = np.searchsorted(vids, uniq & ((1 << 32) - 1))
    a = sp.coo_array((np.concatenate([weights, weights]), (np.concatenate([u, v]), np.concatenate([v, u]))),
                     shape=(vids.size, vids.size)).tocsr()
    del u, v, weights, uniq
    a.sort_indices()
    xadj, adjncy, ew, vw = (a.indptr.astype(np.int64), a.indices.astype(np.int64), a.data.astype(np.int64),
                            np.maximum(vdeg, 1))
    del a
    parts = [ML.partition_signal_graph(xadj, adjncy, ew, vw, machine_of, seed=seed + t,
                                       imbalance=options.max_imbalance) for t in range(num_seeds)]
    return vids, parts


def _project(state: DistState, vids: np.ndarray, part: np.ndarray, rng: np.random.Generator) -> None:
    """Samples to the worker holding most of their signal rows (within this process's share of the
    sample cap); then owners choose primaries (within their share of the primary cap)."""
    n = state.num_workers
    gids = state.ghosts.gids
    row_worker = np.full(gids.size, -1, dtype=np.int32)
    pos = np.searchsorted(vids, gids)
    hit = (pos < vids.size) & (vids[np.minimum(pos, vids.size - 1)] == gids)
    row_worker[hit] = part[pos[hit]]
    cap = state.mesh.split_room(np.full(n, state.w.sample_cap, dtype=np.int64), 0)
    if int(cap.sum()) < state.shard.num_samples:  # tiny shards: the rounding of the shares
        cap = cap + -(-(state.shard.num_samples - int(cap.sum())) // n)
    load = np.zeros(n, dtype=np.int64)
    num = state.shard.num_samples
    sw = np.empty(num, dtype=np.int32)
    # the visiting order: the blocks of PROJECT_BLOCK samples in random order, each shuffled; fixed blocks,
    # so that streamed chunks (--chunk-samples) and the in-memory shard make the same placement
    for b in rng.permutation(-(-num // PROJECT_BLOCK)):
        i0, i1 = int(b) * PROJECT_BLOCK, min((int(b) + 1) * PROJECT_BLOCK, num)
        indptr, indices = state.shard.block(i0, i1)
        order = rng.permutation(i1 - i0).astype(np.int64)
        assign_by_majority(indptr, indices, row_worker, load, cap, order, sw[i0:i1])
    install_samples(state, sw)
    quota = state.mesh.split_room(np.full(n, state.w.primary_cap, dtype=np.int64), 0)
    prim = choose_primaries(state.count, cap=state.w.primary_cap, initial_load=state.w.primary_cap - quota)
    install_primaries(state, prim)
