"""The multilevel start of ``hybrid``: contract the samples, partition the signal values, project, refine.

HET-GMP (SIGMOD'22, section 5.2) sweeps single vertices from a random start.
That local search finds structure carried by frequently shared rows but not
structure carried by rarely seen ones (criteo-1m: the flat 1D step trails
METIS). The paper is silent on multilevel schemes; this module is our choice.

**Why the flat sweep stalls.** A sample moves to the worker holding most of
its rows' primaries. From a random start those primaries are independent
coin flips per row, and a Criteo-like sample has ~26 rows of which only the
few drawn from its community's values carry information; the rest vote at
random and outweigh them (measured on criteo-1m: a 2-way sweep from random
leaves every planted community split 53/47). What does identify a community
is that its values *co-occur* with each other much more than with others.

**The levels.**

* Level 0 -- the bipartite graph (samples, used rows), HET-GMP's graph.
* Level 1 -- samples contracted away: the *co-occurrence graph of the signal
  rows*, the rows whose degree lies in a band ``[lo, hi]``. Two rows are
  joined by an edge weighted by the number of (sampled) samples using both;
  a row's vertex weight is its degree (access load). Rows above ``hi`` are
  *saturated*: ``hi`` is a few times the per-worker batches ``m / b`` of the
  soft count, beyond which f(c) is flat, every worker fetches them anyway
  and the 2D step replicates them; they only add noise to the cut. Rows
  below ``lo`` (``lo`` is raised from 2 only as far as needed to keep at most
  ``max_vertices`` vertices) have so few users that they follow their
  samples. The graph is built from a seeded row sample holding at most
  ``max_pairs`` row pairs (as :mod:`gmp.partition.metis` does).
* Levels 2.. -- METIS's own multilevel k-way scheme on level 1 (heavy-edge
  matching down to a small graph, initial partitioning, projection and
  boundary refinement at every level), with ``ufactor`` from
  ``max_imbalance``, at most 1.05 (:data:`START_IMBALANCE`). On a hierarchical topology (machines x workers) it
  runs twice, recursively: the machines first, then each machine's rows
  into its workers, so co-accessed rows share a machine first.

**Projection and refinement at the bipartite level.** Samples go, in a
seeded order, to the worker holding most of their partitioned rows (hard
sample cap); every used row's primary to the worker holding most of its
users (hard primary cap). Then HET-GMP's topology-weighted soft-count
sweeps (Eq. 3-5) with the hard caps refine the bipartite graph for up to
``rounds`` rounds, and the 2D step (Eq. 6) follows as in the flat scheme.

The numbers behind these choices (and the two sample-clustering coarsenings
that were tried and dropped) are in docs/hybrid.md, "Multilevel".

**Memory.** A uint8 band mask per row and every sample's band degree (int64;
the band entries are copied for the sampled samples only), the pair keys of
those samples (int64 per pair, at most ``max_pairs``) and METIS's CSR (int64,
32 bytes per distinct pair); the projection's favourite masks (uint64 per
sample) and ``count`` (int32 [rows, N]), which is handed to the sweeps, which
would otherwise count the same placement again.

**Candidates.** ``hybrid`` projects one candidate per band (its option
``coarse_restarts``: upper bounds ``saturation`` x 1, 4, ...), each from its
own seeded generator and in parallel threads where memory allows, refines
each projection by the sweeps' rounds and keeps the lowest refined J less the
2D step's savings (on 19 large graphs measured it read less than the
projected choice on 14, the same on 5: docs/hybrid.md, "Session 28"). On small flat graphs
(``portfolio_edges``) it runs a *portfolio*: bands x seeds candidates, each
refined before the same choice (iPinYou: the projected J ranks the bands
backwards). On a hierarchical topology the projection with the lowest J is
chosen and refined after the choice (the projected choice recovers planted
machine/worker structure exactly).
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numba
import numpy as np
import scipy.sparse as sp

from .._memory import available_memory
from ..errors import PartitionError
from ..kernels.simd import padded_width
from ..kernels.threads import concurrent_launches_safe
from ..progress import stop_point, task
from ._common import (choose_primaries, is_hierarchical, machines_of_the_start, run_metis, sample_cap,
                      seeded_order)
from ._hybrid_kernels import count_samples
from ._objective import default_weights, soft_count_table, start_objective
from .metis import choose_rows_by_degree, cooccurrence_csr

log = logging.getLogger(__name__)

#: METIS refinement passes per uncoarsening level on the signal graph (METIS's default is 10). The sweeps
#: refine the projection anyway: on criteo-1m 3 passes halve METIS's time (1.6 -> 0.86 s CPU) and the batch
#: reads after the sweeps move by < 1 % either way (docs/hybrid.md, "Speed and memory of the multilevel default")
METIS_NITER = 3
#: the most imbalance METIS may give the signal graph's parts, whatever ``max_imbalance`` allows: the sweeps'
#: Eq. 4 balance term pulls the loads back towards even anyway, so a looser start only lost its communities on
#: the way (``--max-imbalance 2``: 46% more batch reads on a tiny-preset day, 18x on planted communities)
START_IMBALANCE = 1.05


def default_coarse_pairs(num_samples: int) -> int:
    """Row pairs the signal graph is built from when ``coarse_pairs`` is not given: 2 per sample, within
    [2M, 24M] (METIS's time grows with the pairs; 24M is the ``metis`` partitioner's own default)."""
    return int(min(24_000_000, max(2_000_000, 2 * num_samples)))


def signal_band(degree: np.ndarray, num_samples: int, num_workers: int, batch_size: int, *,
                saturation: float, max_vertices: int) -> tuple[int, int]:
    """``(lo, hi)``: the degree band of the rows that form the coarse graph.

    ``hi = ceil(saturation * m / b)`` with m = samples per worker and b = the soft count's batch
    (``min(batch_size, m)``), at least 4; ``lo`` the smallest degree >= 2 such that at most
    ``max_vertices`` rows have a degree in ``[lo, hi]``.

    Examples
    --------
    >>> signal_band(np.array([1, 2, 2, 3, 5, 900]), 8000, 8, 100, saturation=4.0, max_vertices=3)
    (3, 40)
    """
    m = max(num_samples / max(num_workers, 1), 1.0)
    b = min(float(batch_size), m)
    hi = max(4, int(math.ceil(saturation * m / b)))
    in_band = degree[(degree >= 2) & (degree <= hi)]
    if in_band.size <= max_vertices:
        return 2, hi
    # the max_vertices highest degrees of the band; lo = the smallest of them plus one if that ties over
    counts = np.bincount(in_band, minlength=hi + 1)
    above = np.cumsum(counts[::-1])[::-1]  # above[d] = rows of the band with degree >= d
    lo = int(np.argmax(above <= max_vertices))
    return max(lo, 2), hi


@numba.njit(cache=True, nogil=True)
def _band_degree(indptr, indices, in_band, out):  # pragma: no cover - compiled
    """out[i] = entries of sample i whose row is in the band (``in_band``: uint8 per row, cache-sized)."""
    for i in range(indptr.size - 1):
        d = 0
        for k in range(indptr[i], indptr[i + 1]):
            d += in_band[indices[k]]
        out[i] = d


@numba.njit(cache=True, nogil=True)
def _band_rows(indptr, indices, in_band, rows, out_indptr, out_indices):  # pragma: no cover - compiled
    """The CSR of the samples ``rows`` restricted to the band's rows (entries in CSR order)."""
    pos = 0
    for t in range(rows.size):
        i = rows[t]
        out_indptr[t] = pos
        for k in range(indptr[i], indptr[i + 1]):
            x = indices[k]
            if in_band[x]:
                out_indices[pos] = x
                pos += 1
    out_indptr[rows.size] = pos


def signal_graph(indptr: np.ndarray, indices: np.ndarray, degree: np.ndarray, lo: int, hi: int,
                 rng: np.random.Generator, max_pairs: int):
    """Level 1: the weighted co-occurrence graph of the rows with degree in ``[lo, hi]``.

    Returns ``(xadj, adjncy, weights, vertex_row, rows_used)`` in METIS's CSR form (see
    :func:`gmp.partition.metis.cooccurrence_csr`); ``vertex_row`` are compact row ids.
    Only the band entries of the chosen samples are copied (one counting pass over the
    edges, no band CSR of all samples).
    """
    in_band = ((degree >= lo) & (degree <= hi)).astype(np.uint8)
    band_deg = np.empty(indptr.size - 1, dtype=np.int64)
    _band_degree(indptr, indices, in_band, band_deg)
    rows = choose_rows_by_degree(band_deg, rng, max_pairs=max_pairs)
    sub_indptr = np.empty(rows.size + 1, dtype=np.int64)
    sub_indices = np.empty(int(band_deg[rows].sum()), dtype=indices.dtype)
    del band_deg
    _band_rows(indptr, indices, in_band, rows, sub_indptr, sub_indices)
    xadj, adjncy, weights, vertex_row = cooccurrence_csr(sub_indptr, sub_indices,
                                                         np.arange(rows.size, dtype=np.int64), degree.size)
    return xadj, adjncy, weights, vertex_row, int(rows.size)


def partition_signal_graph(xadj: np.ndarray, adjncy: np.ndarray, weights: np.ndarray, vertex_weight: np.ndarray,
                           machine_of: np.ndarray, *, seed: int, imbalance: float) -> np.ndarray:
    """Worker of every vertex of the signal graph (int32), by METIS k-way, the parts balanced within
    ``imbalance`` but never looser than :data:`START_IMBALANCE`.

    ``machine_of`` (int [N]): with several machines of equal size, the machines are
    partitioned first and then each machine's subgraph into its workers (recursive), so
    heavily co-accessed rows share a machine before they share a worker.
    """
    imbalance = min(imbalance, START_IMBALANCE)
    num_workers = int(machine_of.size)
    num_machines = int(machine_of.max()) + 1 if machine_of.size else 1
    if num_machines <= 1 or num_machines >= num_workers:
        return run_metis(xadj, adjncy, num_workers, vertex_weights=vertex_weight, edge_weights=weights,
                         seed=seed, imbalance=imbalance, recursive=False, niter=METIS_NITER)
    machine = run_metis(xadj, adjncy, num_machines, vertex_weights=vertex_weight, edge_weights=weights,
                        seed=seed, imbalance=imbalance, recursive=False, niter=METIS_NITER)
    graph = sp.csr_array((weights, adjncy, xadj), shape=(xadj.size - 1, xadj.size - 1))
    out = np.empty(xadj.size - 1, dtype=np.int32)
    for mach in range(num_machines):
        workers = np.flatnonzero(machine_of == mach).astype(np.int32)
        ids = np.flatnonzero(machine == mach)
        sub = graph[ids][:, ids].tocsr()
        sub.sort_indices()
        part = run_metis(sub.indptr.astype(np.int64), sub.indices.astype(np.int64), workers.size,
                         vertex_weights=vertex_weight[ids], edge_weights=sub.data.astype(np.int64),
                         seed=seed + 1 + mach, imbalance=imbalance, recursive=False,
                         niter=METIS_NITER)
        out[ids] = workers[part]
    return out


def favourite_workers(indptr: np.ndarray, indices: np.ndarray, row_worker: np.ndarray, num_workers: int) -> np.ndarray:
    """uint64 [samples]: bit w set <=> worker w holds the most of the sample's placed rows (``row_worker >= 0``,
    int8); all bits when none is placed. The first pass of :func:`project`."""
    favourites = np.empty(indptr.size - 1, dtype=np.uint64)
    _favourites(indptr, indices, row_worker, np.int64(num_workers), favourites)
    return favourites


def project(indptr: np.ndarray, indices: np.ndarray, row_worker: np.ndarray, num_workers: int, sample_cap: int,
            primary_cap: int, rng: np.random.Generator,
            favourites: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Level 1 -> level 0: samples to the worker holding most of their placed rows (``row_worker >= 0``),
    within ``sample_cap``; then every used row's primary to the worker holding most of its users,
    within ``primary_cap``. Returns ``(sample_worker, primary, count)``: int32 [samples], int32 [rows]
    and the int32 [rows, N] user counts the sweeps start from.

    The samples are decided in a seeded order; the rule (most placed rows, then the least loaded
    worker, then the lowest id, among workers below the cap) is
    :func:`gmp.partition._common.assign_samples_by_majority`'s, in two passes: the favourite
    workers of every sample in id order (a bit mask, streaming), then the capped assignment in
    the seeded order, which re-counts a sample only when all its favourites are full.
    ``favourites``: the first pass's result when the caller has it (:func:`favourite_workers`).
    """
    num_samples = indptr.size - 1
    num_rows = row_worker.size
    if int(sample_cap) * int(num_workers) < num_samples:
        raise PartitionError(f"sample cap {sample_cap} x {num_workers} workers cannot hold {num_samples} samples.")
    # int8 row workers: the lookup table stays in cache (N <= 64)
    rw = row_worker.astype(np.int8, copy=False)
    if favourites is None:
        favourites = favourite_workers(indptr, indices, rw, num_workers)
    sw = np.empty(num_samples, dtype=np.int32)
    _assign_capped(indptr, indices, rw, favourites, seeded_order(num_samples, rng), np.int64(num_workers),
                   np.int64(sample_cap), sw)
    del favourites, rw
    count = np.zeros((num_rows, num_workers), dtype=np.int32)
    count_samples(indptr, indices, sw, count)
    prim = choose_primaries(count, cap=primary_cap)
    return sw, prim, count


@numba.njit(cache=True, nogil=True)
def _favourites(indptr, indices, row_worker, num_workers, out):  # pragma: no cover - compiled
    """out[i]: bit w set <=> worker w holds the most of sample i's placed rows (all bits when none is placed)."""
    tally = np.zeros(num_workers, dtype=np.int64)
    for i in range(indptr.size - 1):
        for k in range(indptr[i], indptr[i + 1]):
            w = row_worker[indices[k]]
            if w >= 0:
                tally[w] += 1
        top = np.int64(0)
        mask = np.uint64(0)
        for w in range(num_workers):
            c = tally[w]
            if c > top:
                top = c
                mask = np.uint64(1) << np.uint64(w)
            elif c == top:
                mask |= np.uint64(1) << np.uint64(w)
            tally[w] = 0
        out[i] = mask


@numba.njit(cache=True, nogil=True)
def _assign_capped(indptr, indices, row_worker, favourites, order, num_workers, cap, out):  # pragma: no cover
    """Samples in ``order``: the least loaded favourite below ``cap`` (lowest id on ties); when every
    favourite is full, the best worker below the cap by (placed rows, least load, lowest id)."""
    load = np.zeros(num_workers, dtype=np.int64)
    tally = np.zeros(num_workers, dtype=np.int64)
    for t in range(order.size):
        i = order[t]
        mask = favourites[i]
        best = -1
        for w in range(num_workers):
            if (mask >> np.uint64(w)) & np.uint64(1) and load[w] < cap:
                if best < 0 or load[w] < load[best]:
                    best = w
        if best < 0:
            for k in range(indptr[i], indptr[i + 1]):
                w = row_worker[indices[k]]
                if w >= 0:
                    tally[w] += 1
            for w in range(num_workers):
                if load[w] >= cap:
                    continue
                if best < 0 or tally[w] > tally[best] or (tally[w] == tally[best] and load[w] < load[best]):
                    best = w
            tally[:] = 0
        out[i] = best
        load[best] += 1


# --------------------------------------------------------------------------
# rebalancing the signal graph's partition by the samples that follow it
# --------------------------------------------------------------------------
#: label-propagation passes that form the clusters of :func:`rebalance_clusters`
CLUSTER_PASSES = 5
#: at most this many cluster moves per rebalancing (each one fixes most of an overload on planted data)
MAX_CLUSTER_MOVES = 64


def rebalance_clusters(xadj: np.ndarray, adjncy: np.ndarray, weights: np.ndarray, part: np.ndarray,
                       favourites: np.ndarray, row_worker: np.ndarray, vertex_row: np.ndarray, indptr: np.ndarray,
                       indices: np.ndarray, num_workers: int, sample_cap: int) -> tuple[np.ndarray, dict]:
    """Move whole clusters of signal rows off the workers whose *samples* would exceed ``sample_cap``.

    METIS balances the signal graph's vertex weights (row degrees), but the projection balances
    samples, and the two differ: rows used by every community (hot-ish values of small fields) carry
    weight without pulling samples, so METIS can use them as filler and give one worker 9 of 64
    planted communities and another 7 (measured on criteo-1m ``--locality 1.0``: the projection then
    spills ~9 % of each of the 9 onto the light worker, and no sweep merges them again: the sweeps
    move one sample at a time). Here, with ``favourites`` the projection's favourite-worker masks
    (:func:`favourite_workers` of ``row_worker``, the rows' workers under ``part``):

    1. every sample counts on its favourite worker (the lowest one on ties); when no worker
       exceeds ``sample_cap``, ``part`` is returned as it is (the usual case, no extra pass);
    2. *clusters* of the overloaded workers' vertices: label propagation on the signal graph
       restricted to edges inside a worker (``CLUSTER_PASSES`` passes in vertex order; a vertex
       takes the label of most edge weight, the lower label on ties), so a cluster never straddles
       two workers;
    3. each sample of an overloaded worker counts on its cluster of most signal rows there;
    4. while some worker is over the cap: move the cluster of that worker, to a worker it fits on,
       that costs the least cut weight per useful sample moved (``min(cluster load, excess)``;
       cut-reducing moves first), until none fits or after ``MAX_CLUSTER_MOVES`` moves.

    Returns ``(part, info)``: the new partition (a copy when changed) and ``{"overloaded",
    "clusters", "moves", "samples_moved"}``; the caller recomputes the favourites when ``moves``.
    Deterministic (no randomness; sequential kernels).
    """
    fav = np.empty(favourites.size, dtype=np.int8)
    loads = _first_favourite(favourites, np.int64(num_workers), fav)
    info = {"overloaded": int(np.count_nonzero(loads > sample_cap)), "clusters": 0, "moves": 0, "samples_moved": 0}
    if not info["overloaded"]:
        return part, info
    over = (loads > sample_cap).astype(np.uint8)
    label = _label_clusters(xadj, adjncy, weights, part, over, np.int64(CLUSTER_PASSES))
    _, cluster = np.unique(label, return_inverse=True)
    cluster = cluster.astype(np.int32)
    del label
    num_clusters = int(cluster.max()) + 1
    row_cluster = np.full(row_worker.size, -1, dtype=np.int32)
    row_cluster[vertex_row] = cluster
    cluster_load = _cluster_loads(indptr, indices, row_worker, row_cluster, fav, over, np.int64(num_clusters))
    del row_cluster, fav
    cluster_part = np.zeros(num_clusters, dtype=np.int32)
    cluster_part[cluster] = part
    part = part.copy()
    info["clusters"] = int(np.unique(cluster[over[part] > 0]).size)  # those of the overloaded workers
    while info["moves"] < MAX_CLUSTER_MOVES:
        p = int(np.argmax(loads))
        excess = int(loads[p]) - sample_cap
        if excess <= 0:
            break
        between = _cluster_worker_weights(xadj, adjncy, weights, part, cluster, np.int64(p), np.int64(num_clusters),
                                          np.int64(num_workers))
        best = None
        for c in np.flatnonzero((cluster_part == p) & (cluster_load > 0)):
            load = int(cluster_load[c])
            useful = min(load, excess)
            for q in range(num_workers):
                if q == p or loads[q] + load > sample_cap:
                    continue
                key = ((between[c, p] - between[c, q]) / useful, -useful, int(c), q)
                if best is None or key < best:
                    best = key
        if best is None:
            break
        *_, c, q = best
        cluster_part[c] = q
        part[cluster == c] = q
        loads[p] -= cluster_load[c]
        loads[q] += cluster_load[c]
        info["moves"] += 1
        info["samples_moved"] += int(cluster_load[c])
    log.debug("hybrid multilevel: %d workers over the sample cap; %d clusters there, %d moved (%d samples)",
              info["overloaded"], info["clusters"], info["moves"], info["samples_moved"])
    return part, info


@numba.njit(cache=True, nogil=True)
def _first_favourite(favourites, num_workers, out):  # pragma: no cover - compiled
    """out[i] = the lowest favourite worker of sample i (from its bit mask), -1 when every worker is (no placed
    row: the projection gives those samples to the least loaded workers); returns the samples per worker."""
    loads = np.zeros(num_workers, dtype=np.int64)
    every = (np.uint64(1) << np.uint64(num_workers)) - np.uint64(1) if num_workers < 64 else ~np.uint64(0)
    for i in range(favourites.size):
        m = favourites[i]
        if m == every:
            out[i] = -1
            continue
        w = 0
        while w < num_workers - 1 and not (m >> np.uint64(w)) & np.uint64(1):
            w += 1
        out[i] = w
        loads[w] += 1
    return loads


@numba.njit(cache=True, nogil=True)
def _cluster_loads(indptr, indices, row_worker, row_cluster, fav, over, num_clusters):  # pragma: no cover
    """Samples per cluster: each sample whose favourite worker ``fav[i]`` is overloaded (``over``) counts on
    its cluster of most signal rows on that worker (the lowest cluster id on ties)."""
    cluster_load = np.zeros(num_clusters, dtype=np.int64)
    per_cluster = np.zeros(num_clusters, dtype=np.int64)
    for i in range(indptr.size - 1):
        w = fav[i]
        if w < 0 or not over[w]:
            continue
        top = -1
        for k in range(indptr[i], indptr[i + 1]):
            x = indices[k]
            if row_worker[x] == w:
                c = row_cluster[x]
                per_cluster[c] += 1
                if top < 0 or per_cluster[c] > per_cluster[top] or (per_cluster[c] == per_cluster[top] and c < top):
                    top = c
        for k in range(indptr[i], indptr[i + 1]):
            x = indices[k]
            if row_worker[x] == w:
                per_cluster[row_cluster[x]] = 0
        if top >= 0:
            cluster_load[top] += 1
    return cluster_load


@numba.njit(cache=True, nogil=True)
def _label_clusters(xadj, adjncy, weights, part, active, passes):  # pragma: no cover - compiled
    """Label propagation inside the workers of ``part`` with ``active[w]``: int64 label per vertex (a vertex
    id; the vertices of the other workers keep their own)."""
    nv = xadj.size - 1
    label = np.arange(nv).astype(np.int64)
    acc = np.zeros(nv, dtype=np.float64)
    touched = np.empty(nv, dtype=np.int64)
    for _ in range(passes):
        changed = 0
        for v in range(nv):
            if not active[part[v]]:
                continue
            nt = 0
            for k in range(xadj[v], xadj[v + 1]):
                u = adjncy[k]
                if part[u] != part[v]:
                    continue
                lab = label[u]
                if acc[lab] == 0.0:
                    touched[nt] = lab
                    nt += 1
                acc[lab] += weights[k]
            best = label[v]
            top = acc[best]
            for t in range(nt):
                lab = touched[t]
                if acc[lab] > top or (acc[lab] == top and lab < best):
                    top = acc[lab]
                    best = lab
            for t in range(nt):
                acc[touched[t]] = 0.0
            if best != label[v]:
                label[v] = best
                changed += 1
        if changed == 0:
            break
    return label


@numba.njit(cache=True, nogil=True)
def _cluster_worker_weights(xadj, adjncy, weights, part, cluster, worker, num_clusters,
                            num_workers):  # pragma: no cover
    """float64 [clusters, workers]: edge weight from each cluster of ``worker`` to the vertices of each worker
    (its own edges left out; the rows of the other workers' clusters stay 0)."""
    out = np.zeros((num_clusters, num_workers), dtype=np.float64)
    for v in range(xadj.size - 1):
        if part[v] != worker:
            continue
        c = cluster[v]
        for k in range(xadj[v], xadj[v + 1]):
            u = adjncy[k]
            if cluster[u] != c:
                out[c, part[u]] += weights[k]
    return out


# --------------------------------------------------------------------------
# the start hybrid runs (levels=2): candidates, projections, the choice
# --------------------------------------------------------------------------
def multilevel_start(graph, topology, options, rng: np.random.Generator, degree: np.ndarray, *,
                     new_state: Callable, refine: Callable) -> tuple[Any, list[dict] | None, dict] | None:
    """The multilevel start of ``hybrid`` (module docstring): ``(state, rounds, info)`` over the graph's (used)
    ids, or None when no row falls in the signal band (then the random start is used). ``graph``, ``topology``,
    ``options`` (:class:`gmp.partition._objective.Options`) and ``rng`` are hybrid's; ``degree`` the users of
    every row. The sweeps are hybrid's, handed in: ``new_state(sample_worker, primary, rng, count)`` builds
    its state of a start, ``refine(state, t_start, max_rounds)`` runs up to ``max_rounds`` rounds on it and
    returns ``(round log, score)`` (J less the 2D step's savings).

    Large graphs (more than ``portfolio_edges`` edges): one candidate per band, upper bounds
    ``saturation * 4**k`` (k < ``coarse_restarts``) times the soft count's ``m / b``; each is partitioned,
    projected and refined by up to ``rounds`` rounds, and the lowest refined J less the 2D step's savings
    wins, as in the portfolio (on 19 large graphs measured: fewer batch reads than the projected choice on
    14, the same on 5; a 10M-sample entity day 7,019,081 -> 5,716,992); ``rounds`` is the chosen candidate's
    round log. On a hierarchical topology (or with
    ``rounds=0``) the projection with the lowest J is kept and ``rounds`` is None (the caller runs the sweeps).

    Small graphs (the *portfolio*): ``portfolio_bands`` bands x ``portfolio_seeds`` seeds, and every
    candidate is refined by up to ``portfolio_rounds`` rounds before the choice, so the lowest J *after*
    the sweeps, less the traffic the 2D step's secondaries will save (``hybrid.replication_savings``), wins
    (the projected J predicts that poorly across bands: docs/hybrid.md, "iPinYou");
    ``rounds`` is the chosen candidate's round log.

    Every candidate has its own generator, seeded from ``rng`` before any runs, so the candidates are
    independent: they run in up to ``numba.get_num_threads()`` Python threads at once (their kernels and
    METIS release the GIL) and the result does not depend on how many. Ties go to the lower candidate.
    """
    t0 = time.perf_counter()
    n = topology.num_workers
    indptr = np.asarray(graph.sample_indptr)
    indices = np.asarray(graph.sample_indices)
    active = degree > 0  # degree: int64 [graph.num_embeddings], users of every row
    num_used = int(np.count_nonzero(active))
    scap = sample_cap(graph.num_samples, n, options.max_imbalance)
    pcap = sample_cap(num_used, n, options.max_imbalance)
    max_pairs = options.coarse_pairs or default_coarse_pairs(graph.num_samples)
    a, b = default_weights(n, graph.num_samples, num_used)
    weights_ab = (float(options.alpha) if options.alpha is not None else a,
                  float(options.beta) if options.beta is not None else b)
    f = soft_count_table(scap, graph.num_samples / n, options.batch_size)
    cost = np.ascontiguousarray(topology.cost, dtype=np.float64)
    machine_of = machines_of_the_start(topology)
    # the portfolio on flat topologies only: on a hierarchical one the refined J after the sweeps preferred
    # near-misses of the planted machine/worker structure that the projected choice recovers exactly
    # (tests/test_multilevel.py, two-level test)
    # (rounds=0 asks for the projection alone: nothing to refine, no portfolio)
    hierarchical = is_hierarchical(topology)
    portfolio = graph.num_edges <= options.portfolio_edges and not hierarchical and options.rounds > 0
    # large flat graphs: each band's projection is refined before the choice too, by the sweeps' own rounds (the
    # projected J predicts the refined result poorly across bands there as well: docs/hybrid.md, "Session 28")
    refined = not hierarchical and options.rounds > 0
    num_bands, num_seeds = (options.portfolio_bands, options.portfolio_seeds) if portfolio else (
        options.coarse_restarts, 1)
    max_rounds = options.portfolio_rounds if portfolio else options.rounds
    bands = []
    for k in range(num_bands):
        band = signal_band(degree, graph.num_samples, n, options.batch_size,
                              saturation=options.saturation * 4.0**k, max_vertices=options.coarse_vertices)
        if band not in bands:
            bands.append(band)
    jobs = [(band, t) for band in bands for t in range(num_seeds)]
    seeds = rng.integers(0, 2**63 - 1, size=len(jobs))
    lock = threading.Lock()
    best: list = []  # refined: [((score, k), candidate)] of the best refined candidate so far
    stop = stop_point()  # the pool's threads stop with this one (gmp.progress.stoppable)

    def candidate(k: int) -> dict:
        stop()
        t_c = time.perf_counter()
        (lo, hi), _ = jobs[k]
        crng = np.random.default_rng(int(seeds[k]))
        xadj, adjncy, weights, vertex_row, rows_used = signal_graph(indptr, indices, degree, lo, hi, crng,
                                                                      max_pairs)
        cand = {"band": [lo, hi], "vertices": int(vertex_row.size), "edges": int(adjncy.size // 2),
                "rows_sampled": rows_used}
        if vertex_row.size < n:
            return cand
        stop()
        part = partition_signal_graph(xadj, adjncy, weights, degree[vertex_row], machine_of,
                                         seed=int(crng.integers(0, 2**31 - 1)), imbalance=options.max_imbalance)
        row_worker = np.full(graph.num_embeddings, -1, dtype=np.int8)  # int8: a cache-sized table (N <= 64)
        row_worker[vertex_row] = part
        favourites = rebalanced = order_rng = None  # (without rebalancing the projection finds the favourites)
        if options.rebalance_clusters and not hierarchical:
            favourites = favourite_workers(indptr, indices, row_worker, n)
            rebalanced, cand["rebalance"] = rebalance_clusters(xadj, adjncy, weights, part, favourites, row_worker,
                                                                  vertex_row, indptr, indices, n, scap)
            order_rng = copy.deepcopy(crng)  # the rebalanced projection visits the samples in the same order
        del xadj, adjncy, weights  # (memory: before the projection's per-sample arrays, as before)
        stop()
        sw, prim, count = project(indptr, indices, row_worker, n, scap, pcap, crng, favourites=favourites)
        del favourites
        cand["projected_objective"] = start_objective(sw, prim, count, active, f, cost, n, *weights_ab,
                                                      options.gamma)
        if rebalanced is not None and cand["rebalance"]["moves"]:
            # kept only when its projection has the lower objective (on real data the clusters are no
            # communities and the moves can cost more than the spill they avoid: docs/hybrid.md)
            del count  # (memory: one count array at a time; recounted below if the first projection stays)
            row_worker[vertex_row] = rebalanced
            sw1, prim1, count = project(indptr, indices, row_worker, n, scap, pcap, order_rng)
            j1 = start_objective(sw1, prim1, count, active, f, cost, n, *weights_ab, options.gamma)
            cand["rebalance"]["projected_objective"] = j1
            cand["rebalance"]["kept"] = bool(j1 < cand["projected_objective"])
            if cand["rebalance"]["kept"]:
                sw, prim, cand["projected_objective"] = sw1, prim1, j1
            else:
                count = np.zeros((graph.num_embeddings, n), dtype=np.int32)
                count_samples(indptr, indices, sw, count)
            del sw1, prim1
        del row_worker, rebalanced
        stop()
        if refined:  # refine now; the choice is made on the refined objective
            state = new_state(sw, prim, crng, count)
            del count
            # scored as it will be used: J less what the 2D step's secondaries will save (a start whose
            # remote traffic sits on a few rows loses less to replication than J alone says)
            cand_rounds, cand["score"] = refine(state, t_c, max_rounds)
            cand["objective"] = cand_rounds[-1]["objective"]
            cand["rounds"] = len(cand_rounds) - 1
            cand["placement"] = (state, cand_rounds)
            # keep only the best refined state so far (memory: one state per running thread, plus the best);
            # (score, k) is a total order, so the survivor does not depend on the order threads finish
            with lock:
                key = (cand["score"], k)
                if best and best[0][0] <= key:
                    cand["placement"] = None
                else:
                    if best:
                        best[0][1]["placement"] = None
                    best[:] = [(key, cand)]
        else:
            cand["objective"] = cand["score"] = cand["projected_objective"]
            cand["placement"] = (sw, prim, count)
        cand["seconds"] = round(time.perf_counter() - t_c, 4)
        log.log(logging.DEBUG if portfolio else logging.INFO,
                "hybrid multilevel: rows of degree [%d, %d]: %d vertices, %d edges (%d sampled rows): projected "
                "objective %.6g, objective %.6g, %.2f s", lo, hi, cand["vertices"], cand["edges"], rows_used,
                cand["projected_objective"], cand["objective"], cand["seconds"])
        return cand

    threads = max(1, min(len(jobs), numba.get_num_threads(),
                         _candidates_that_fit(graph.num_samples, num_used, n, max_pairs, refined=refined)))
    if threads > 1 and not concurrent_launches_safe():  # numba's workqueue layer: one band at a time
        threads = 1
    kind = (f"{len(jobs)} refined candidates ({len(bands)} bands)" if portfolio else
            f"{len(jobs)} candidate bands, each refined" if refined else f"{len(jobs)} candidate bands")
    with task(f"Hybrid multilevel: {kind}, {threads} at a time"):
        if threads == 1:
            candidates = [candidate(k) for k in range(len(jobs))]
        else:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                candidates = list(pool.map(candidate, range(len(jobs))))
    placed = [k for k, c in enumerate(candidates) if "placement" in c]
    if not placed:
        log.info("hybrid multilevel: fewer signal rows than workers; random start.")
        return None
    chosen = min(placed, key=lambda k: (candidates[k]["score"], k))
    assert candidates[chosen]["placement"] is not None  # the refined choice kept exactly this one
    placement = candidates[chosen].pop("placement")
    for c in candidates:
        c.pop("placement", None)
    info = {"candidates": candidates, "chosen": chosen, "max_pairs": max_pairs, "portfolio": portfolio,
            "refined": refined, "seconds": round(time.perf_counter() - t0, 4)}
    log.info("hybrid multilevel: %s; chose band [%d, %d] (candidate %d), objective %.6g, %.2f s", kind,
             *candidates[chosen]["band"], chosen, candidates[chosen]["objective"], info["seconds"])
    if refined:
        state, cand_rounds = placement
        return state, cand_rounds, info
    sw, prim, count = placement
    del placement
    return new_state(sw, prim, rng, count), None, info


def candidate_bytes(num_samples: int, num_used: int, num_workers: int, max_pairs: int, *,
                    refined: bool = False) -> int:
    """Working memory of one multilevel candidate, estimated: per sample its band degree, favourite mask,
    seeded order and worker (24 B); per used row its count row, row worker (int32 + int8) and primary;
    about 40 B per row pair (the pair keys and METIS's CSR); ``refined``: also its sweep state's marginals
    (float64, a SIMD-padded row per used row) and per-sample order (8 B)."""
    state = (8 * padded_width(num_workers) * num_used + 8 * num_samples) if refined else 0
    return 24 * num_samples + (4 * num_workers + 13) * num_used + 40 * max_pairs + state


def _candidates_that_fit(num_samples: int, num_used: int, num_workers: int, max_pairs: int, *,
                         refined: bool = False) -> int:
    """How many candidates may run at once in the memory available now (at least 1). Only the number of
    threads depends on it, never the result (the candidates are independent)."""
    available = available_memory()  # the host's, capped by this process's memory cgroup
    # keep half of what is free for the sweeps' own arrays and everything else
    need = candidate_bytes(num_samples, num_used, num_workers, max_pairs, refined=refined)
    return max(1, int(available // 2 // max(need, 1)))
