"""``metis``: METIS on the weighted embedding co-occurrence graph (HET-GMP Fig. 3).

HET-GMP's METIS baseline partitions the embeddings, not the samples: two
embeddings are joined by an edge weighted by the number of samples that use
both, METIS cuts that graph into ``num_workers`` parts, and the samples then
follow their embeddings. Steps:

1. **Rows.** The co-occurrence graph has ``d (d - 1) / 2`` pairs per sample
   (325 for Criteo's 26 fields, i.e. 3.25 billion pairs at 10M samples), so
   it is built on a seeded random subset of the samples holding at most
   ``max_pairs`` pairs (all samples when they fit; ``max_samples`` bounds the
   subset explicitly). Memory is about ``8 * max_pairs`` bytes for the pair
   keys plus ``32`` bytes per distinct pair for the CSR METIS reads, plus
   METIS's own working memory (the default keeps the whole run under about
   4 GiB at 10M x 26 samples, memory-mapped graph pages included).
2. **Graph.** Vertices are only the embeddings seen in those rows (no phantom
   vertices for ids that never occur); vertex weight = the embedding's degree
   in the *whole* graph, so METIS balances access traffic / compute rather
   than row counts; edge weight = co-occurrence count. Built in numba: pair
   keys ``lo << 32 | hi``, sorted in place, run-length counted.
3. **METIS** (``pymetis.part_graph``, k-way by default, ``metis_imbalance``
   -> METIS ``ufactor``; seeded from ``seed``) gives the primaries of the
   seen embeddings.
4. **Samples** go, in a seeded random order, to the worker holding most of
   their embeddings, at most ``ceil(num_samples / num_workers *
   max_imbalance)`` per worker (:func:`._common.assign_samples_by_majority`).
5. **Unseen embeddings** with samples (not in the subset) go to the worker
   holding most of their samples; embeddings no sample uses are spread over
   the least-loaded workers.

Reading of the paper: Fig. 3 only says "METIS on the co-occurrence graph";
weighting vertices by degree and building the graph on a row sample are our
choices (the full graph does not fit in memory past ~1M samples), written in
the manifest's options.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numba
import numpy as np

from ..errors import PartitionError
from ..params import is_int
from ..graph import BipartiteGraph
from ..placement import Placement
from ..progress import task
from ..topology import Topology
from ._common import (UNASSIGNED, assign_samples_by_majority, check_max_imbalance, choose_primaries,
                      compact_ids, count_embedding_workers, place_unused_embeddings, run_metis, sample_cap,
                      seeded_order)

PTYPES = ("kway", "recursive")


@dataclass(frozen=True)
class Options:
    """Options of ``metis``.

    Attributes
    ----------
    max_imbalance
        Hard cap on samples per worker, as max/mean (1.05 = at most 5% above
        the mean, rounded up).
    metis_imbalance
        METIS's own tolerance on the vertex-weight (embedding degree) balance,
        max/mean; passed as ``ufactor = 1000 * (metis_imbalance - 1)``.
    max_pairs
        Upper bound on co-occurrence pairs (before de-duplication) the graph
        is built from; bounds memory (about 8 bytes per pair plus 32 per
        distinct pair).
    max_samples
        Optional explicit bound on the number of rows sampled.
    ptype
        ``"kway"`` (METIS_PartGraphKway) or ``"recursive"``
        (METIS_PartGraphRecursive).
    ncuts
        METIS's ``ncuts``: partition that many times (METIS varies its own
        random choices) and keep the smallest cut. Default 1; time grows
        about linearly.
    """

    max_imbalance: float = 1.05
    metis_imbalance: float = 1.03
    max_pairs: int = 24_000_000
    max_samples: int | None = None
    ptype: str = "kway"
    ncuts: int = 1

    def __post_init__(self) -> None:
        check_max_imbalance(self.max_imbalance)
        check_max_imbalance(self.metis_imbalance, name="metis_imbalance")
        if not is_int(self.max_pairs) or self.max_pairs < 1:
            raise PartitionError(f"metis: max_pairs must be a positive integer, got {self.max_pairs!r}.")
        if self.max_samples is not None and (not is_int(self.max_samples) or self.max_samples < 1):
            raise PartitionError(f"metis: max_samples must be a positive integer or None, got {self.max_samples!r}.")
        if not is_int(self.ncuts) or self.ncuts < 1:
            raise PartitionError(f"metis: ncuts must be an integer >= 1, got {self.ncuts!r}.")
        if self.ptype not in PTYPES:
            raise PartitionError(f"metis: ptype must be one of {', '.join(PTYPES)}, got {self.ptype!r}.")


def partition(graph: BipartiteGraph, topology: Topology, *, seed: int, options: Options) -> Placement:
    """Partition the co-occurrence graph with METIS, then place samples by majority."""
    def cut(xadj, adjncy, num_parts, vertex_weights, edge_weights, tool_seed):
        return run_metis(xadj, adjncy, num_parts, vertex_weights=vertex_weights, edge_weights=edge_weights,
                         seed=tool_seed, imbalance=options.metis_imbalance, recursive=options.ptype == "recursive",
                         ncuts=options.ncuts)

    return partition_cooccurrence(graph, topology, seed=seed, options=options, name="metis", cut=cut)


def partition_cooccurrence(graph: BipartiteGraph, topology: Topology, *, seed: int, options, name: str,
                           cut) -> Placement:
    """The edge-cut baselines' common path: build the embeddings' co-occurrence graph (rows chosen by
    ``options.max_pairs`` / ``max_samples``), ``cut(xadj, adjncy, num_parts, vertex_weights,
    edge_weights, seed)`` it into primaries, place samples by majority within the hard cap, and give
    the embeddings the graph left out a primary where their samples went (``metis``, ``kaminpar``)."""
    rng = np.random.default_rng(seed)
    num_workers = topology.num_workers
    indptr = np.asarray(graph.sample_indptr)
    indices = np.asarray(graph.sample_indices)
    degree = np.bincount(indices, minlength=graph.num_embeddings).astype(np.int64)

    rows = choose_rows(indptr, rng, max_pairs=options.max_pairs, max_samples=options.max_samples)
    with task(f"{name}: building the co-occurrence graph"):
        xadj, adjncy, weights, vertex_embedding = cooccurrence_csr(indptr, indices, rows, graph.num_embeddings)
    tool_seed = int(rng.integers(0, 2**31 - 1))

    primary = np.full(graph.num_embeddings, UNASSIGNED, dtype=np.int32)
    if vertex_embedding.size:
        with task(f"{name}: partitioning {vertex_embedding.size} vertices, {adjncy.size // 2} edges"):
            primary[vertex_embedding] = cut(xadj, adjncy, num_workers, degree[vertex_embedding], weights, tool_seed)
    del xadj, adjncy, weights

    cap = sample_cap(graph.num_samples, num_workers, options.max_imbalance)
    with task(f"{name}: placing samples"):
        sample_worker = assign_samples_by_majority(indptr, indices, primary, num_workers, cap,
                                                   order=seeded_order(graph.num_samples, rng))
    unseen = np.flatnonzero((primary < 0) & (degree > 0)).astype(np.int32)
    if unseen.size:
        _, local = compact_ids(indices, graph.num_embeddings, select=unseen)
        counts = count_embedding_workers(indptr, indices, sample_worker, local, unseen.size, num_workers)
        del local
        placed = np.bincount(primary[primary >= 0], minlength=num_workers)
        primary[unseen] = choose_primaries(counts, initial_load=placed)
        del counts
    place_unused_embeddings(primary, num_workers)
    info = {"rows_in_cooccurrence_graph": int(rows.size), f"{name}_vertices": int(vertex_embedding.size),
            f"embeddings_placed_after_{name}": int(unseen.size)}
    return Placement.edge_cut(num_workers, sample_worker, primary, method=name, options=asdict(options),
                              seed=seed, info=info)


def choose_rows(indptr: np.ndarray, rng: np.random.Generator, *, max_pairs: int,
                max_samples: int | None = None) -> np.ndarray:
    """Sorted int64 sample ids: a seeded random subset whose pairs ``d (d - 1) / 2`` total at most ``max_pairs``.

    All samples when they fit. A seeded permutation is cut at the longest
    prefix within both bounds.
    """
    return choose_rows_by_degree(np.diff(indptr), rng, max_pairs=max_pairs, max_samples=max_samples)


def choose_rows_by_degree(deg: np.ndarray, rng: np.random.Generator, *, max_pairs: int,
                          max_samples: int | None = None) -> np.ndarray:
    """:func:`choose_rows` given the rows' degrees (entries counted) instead of the CSR's offsets."""
    n = deg.size
    deg = np.asarray(deg, dtype=np.int64)
    pairs = deg * (deg - 1) // 2
    limit = n if max_samples is None else min(n, int(max_samples))
    if limit == n and int(pairs.sum()) <= max_pairs:
        return np.arange(n, dtype=np.int64)
    perm = rng.permutation(n)
    cum = np.cumsum(pairs[perm])
    take = min(limit, int(np.searchsorted(cum, max_pairs, side="right")))
    return np.sort(perm[:take]).astype(np.int64)


def cooccurrence_csr(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, num_embeddings: int):
    """The weighted co-occurrence graph of ``rows`` in METIS's CSR form.

    Returns
    -------
    xadj : int64 [num_vertices + 1]
    adjncy : int64 [2 * num_pairs]
        Local vertex ids; both directions of every pair.
    weights : int64 [2 * num_pairs]
        Number of the rows using both embeddings.
    vertex_embedding : int32 [num_vertices]
        The embedding id of each local vertex (ascending): only embeddings the
        rows use.
    """
    seen = np.zeros(num_embeddings, dtype=np.bool_)
    _mark_seen(indptr, indices, rows, seen)
    vertex_embedding = np.flatnonzero(seen).astype(np.int32)
    del seen
    local = np.full(num_embeddings, -1, dtype=np.int32)
    local[vertex_embedding] = np.arange(vertex_embedding.size, dtype=np.int32)
    num_keys = _count_pairs(indptr, rows)
    keys = np.empty(num_keys, dtype=np.int64)
    filled = _fill_pair_keys(indptr, indices, rows, local, keys)
    del local
    keys = keys[:filled]
    keys.sort()
    counts = np.empty(_count_distinct(keys), dtype=np.int64)
    _run_length(keys, counts)  # compacts keys[:counts.size] to the distinct pairs
    uniq = keys[: counts.size]
    nv = vertex_embedding.size
    xadj = np.zeros(nv + 1, dtype=np.int64)
    adjncy = np.empty(2 * uniq.size, dtype=np.int64)
    weights = np.empty(2 * uniq.size, dtype=np.int64)
    _symmetric_csr(uniq, counts, xadj, adjncy, weights)
    return xadj, adjncy, weights, vertex_embedding


@numba.njit(cache=True, nogil=True)
def _mark_seen(indptr, indices, rows, seen):  # pragma: no cover - compiled
    for t in range(rows.size):
        i = rows[t]
        for k in range(indptr[i], indptr[i + 1]):
            seen[indices[k]] = True


@numba.njit(cache=True, nogil=True)
def _count_pairs(indptr, rows):  # pragma: no cover - compiled
    total = 0
    for t in range(rows.size):
        d = indptr[rows[t] + 1] - indptr[rows[t]]
        total += d * (d - 1) // 2
    return total


@numba.njit(cache=True, nogil=True)
def _fill_pair_keys(indptr, indices, rows, local, keys):  # pragma: no cover - compiled
    pos = 0
    for t in range(rows.size):
        i = rows[t]
        start, end = indptr[i], indptr[i + 1]
        for a in range(start, end):
            u = np.int64(local[indices[a]])
            for b in range(a + 1, end):
                v = np.int64(local[indices[b]])
                if u == v:  # a sample listing an id twice adds no self-loop
                    continue
                if u < v:
                    keys[pos] = (u << 32) | v
                else:
                    keys[pos] = (v << 32) | u
                pos += 1
    return pos


@numba.njit(cache=True, nogil=True)
def _count_distinct(keys):  # pragma: no cover - compiled
    m = 0
    for k in range(keys.size):
        if k == 0 or keys[k] != keys[k - 1]:
            m += 1
    return m


@numba.njit(cache=True, nogil=True)
def _run_length(keys, counts):  # pragma: no cover - compiled
    """Compact sorted ``keys`` in place to its distinct values; their multiplicities go to ``counts``."""
    n = keys.size
    m = 0
    k = 0
    while k < n:
        j = k
        while j < n and keys[j] == keys[k]:
            j += 1
        keys[m] = keys[k]
        counts[m] = j - k
        m += 1
        k = j


@numba.njit(cache=True, nogil=True)
def _symmetric_csr(uniq, counts, xadj, adjncy, weights):  # pragma: no cover - compiled
    mask = (np.int64(1) << 32) - 1
    nv = xadj.size - 1
    deg = np.zeros(nv, dtype=np.int64)
    for t in range(uniq.size):
        deg[uniq[t] >> 32] += 1
        deg[uniq[t] & mask] += 1
    for v in range(nv):
        xadj[v + 1] = xadj[v] + deg[v]
    pos = xadj[:-1].copy()
    for t in range(uniq.size):
        u = uniq[t] >> 32
        v = uniq[t] & mask
        adjncy[pos[u]] = v
        weights[pos[u]] = counts[t]
        pos[u] += 1
        adjncy[pos[v]] = u
        weights[pos[v]] = counts[t]
        pos[v] += 1
