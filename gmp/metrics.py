"""Placement quality metrics: pure functions of (graph, placement[, topology]).

Every partitioner is scored by this one module, so numbers in reports,
comparisons and the trainer's cross-checks mean the same thing everywhere.

Definitions
-----------
A row (embedding) ``e`` is *local* to worker ``w`` when ``w`` is its primary
or holds a secondary replica of it. Sample ``i`` runs on worker
``sample_worker[i]``; an edge ``(i, e)`` is *remote* when ``e`` is not local
to that worker. A remote row is always *served by its primary* (primaries are
the authoritative, always-current copy — HET-GMP section 5.3), so traffic is
attributed to ``(primary[e], reader)``.

``remote_accesses``
    Number of remote edges, i.e. HET-GMP Eq. 3 summed over workers (every
    (sample, embedding) access counted once, no de-duplication).
``remote_accesses_weighted``
    The same with each remote edge multiplied by ``topology.cost[primary[e],
    w]`` (the weighted edge cut of HET-GMP section 5.2). With a homogeneous
    topology it equals ``remote_accesses``.
``epoch_unique_remote``
    Sum over workers of the number of *distinct* non-local embeddings its
    samples use in the whole epoch (what a worker would fetch once per epoch
    with an unbounded cache).
``batch_remote_reads``
    Each worker's samples, in dataset order, cut into consecutive chunks of
    ``batch_size`` (the per-worker batch; the last chunk may be shorter).
    Per chunk the distinct non-local embeddings are counted; summed over
    chunks and workers. This is the number of rows a static-schedule training
    epoch pulls (traffic is de-duplicated within a batch).
``batch_remote_pushes``
    The same, counting distinct embeddings that are *not primary* on the
    worker (reads of a secondary are local, but its gradient is pushed to the
    primary).
``traffic_matrix``
    int64 ``[num_workers, num_workers]``; entry ``[i, j]`` = rows served by
    worker ``i`` (the primary) to worker ``j`` (the reader) per epoch, in
    ``batch_remote_reads`` terms. The diagonal is zero; the matrix sums to
    ``batch_remote_reads``. Row sums are the traffic *served*, column sums the
    traffic *received*.
``balance``
    max / mean over workers of: samples, edges (compute), rows held (primaries
    + secondaries), traffic served, traffic received. 1.0 is perfect balance;
    a quantity that is zero on every worker reports 1.0.
``replication_factor``
    (primaries + secondaries) / active embeddings, counted over *active*
    embeddings only (degree > 0). 1.0 means no replication (pure edge-cut);
    with ``k`` secondaries per active row on average it is ``1 + k``.

Embeddings of degree 0 (ids that never occur in the data) never count: they
generate no traffic, and rows held and the replication factor skip them.

The batch metrics accept ``num_train`` to restrict them to samples
``[0, num_train)`` (the training range the trainer walks); by default every
sample of the graph counts, which is what the partitioners optimise and
what the report shows.

Implementation: numba kernels over the CSR arrays with integer counters. One
pass (:func:`traffic`) visits each worker's samples in dataset order (a
counting sort of ``sample_worker``) and keeps, per embedding, an int32 "last
chunk" stamp and an int32 "last worker" stamp, so distinct-per-chunk and
distinct-per-epoch counting need O(num_embeddings) memory and no dense workers
x embeddings array; stamps are globally unique, so they are never reset.
With secondaries, where a row is held is one int64 per embedding, read once
per edge: bit w set when worker w holds it, the primary in the top bits (up
to :data:`PACKED_MAX_WORKERS` workers; beyond, the primary and a scan of the
embedding's slice of the secondary CSR: 1.4-1.6x slower, docs/report.md).
Workers are spread over numba threads (at most one per worker, each thread
with its own stamps, within :data:`STAMP_MEMORY_BYTES`); a worker writes only
its own column/row of the counts, so results do not depend on the thread
count. The training range's counts come from the same pass
(:func:`traffic_with_train`: the training samples are a prefix of every
worker's run, so its counts are taken as the run leaves the prefix).
Memory at full Criteo-Kaggle scale (45.8M samples, 33.8M embeddings,
1.19B edges): 270 MB of stamps per thread, the rows' holders (270 MB, with
secondaries), the sample order (366 MB) and the degree array (270 MB) on top
of the (memory-mapped) graph. Measured speed is in ``docs/report.md``.
"""

from __future__ import annotations

import logging
import math
import weakref
from typing import Any, NamedTuple

import numba
import numpy as np

from .constants import VALUE_BYTES
from .errors import PlacementError
from .graph import BipartiteGraph
from .placement import Placement
from .topology import Topology

log = logging.getLogger(__name__)

#: the metrics that have a "reduction vs random" (lower is better)
COMM_METRICS = (
    "remote_accesses",
    "remote_accesses_weighted",
    "epoch_unique_remote",
    "batch_remote_reads",
    "batch_remote_pushes",
)

BALANCE_KEYS = ("samples", "edges", "rows_held", "traffic_served", "traffic_received")


# --------------------------------------------------------------------------- kernels
@numba.njit(cache=True, nogil=True)
def _is_local(e, w, primary, sec_indptr, sec_workers):  # pragma: no cover - compiled
    if primary[e] == w:
        return True
    if sec_workers.size == 0:
        return False
    for k in range(sec_indptr[e], sec_indptr[e + 1]):
        if sec_workers[k] == w:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _edge_matrix(indptr, indices, sample_worker, primary, sec_indptr, sec_workers, num_workers):  # pragma: no cover
    # mat[server, reader]: remote edges (HET-GMP Eq. 3 counts, before weighting)
    mat = np.zeros((num_workers, num_workers), dtype=np.int64)
    for i in range(indptr.size - 1):
        w = sample_worker[i]
        for k in range(indptr[i], indptr[i + 1]):
            e = indices[k]
            if not _is_local(e, w, primary, sec_indptr, sec_workers):
                mat[primary[e], w] += 1
    return mat


@numba.njit(cache=True, nogil=True)
def _worker_order(sample_worker, num_workers, stop):  # pragma: no cover - compiled
    # counting sort: the samples [0, stop) of each worker, in dataset order
    starts = np.zeros(num_workers + 1, dtype=np.int64)
    for i in range(stop):
        starts[sample_worker[i] + 1] += 1
    for w in range(num_workers):
        starts[w + 1] += starts[w]
    pos = starts[:-1].copy()
    order = np.empty(stop, dtype=np.int64)
    for i in range(stop):
        w = sample_worker[i]
        order[pos[w]] = i
        pos[w] += 1
    return starts, order


#: workers up to which a row's holders and primary pack into one int64 (:func:`_holders`)
PACKED_MAX_WORKERS = 56
_ONE = np.int64(1)


@numba.njit(cache=True, nogil=True)
def _holders(primary, sec_indptr, sec_workers, out):  # pragma: no cover - compiled
    # out[e]: bit w set when worker w holds e (primary or secondary), the primary in bits 56-61
    # (num_workers <= PACKED_MAX_WORKERS): the traffic pass then looks up one word per edge, not
    # the primary, the secondary offsets and the secondaries (three cache misses on a cold row)
    for e in range(primary.size):
        m = _ONE << primary[e]
        for q in range(sec_indptr[e], sec_indptr[e + 1]):
            m |= _ONE << sec_workers[q]
        out[e] = m | (np.int64(primary[e]) << PACKED_MAX_WORKERS)


@numba.njit(cache=True, nogil=True)
def _traffic_part(indptr, indices, order, starts, primary, sec_indptr, sec_workers, held, num_embeddings,
                  batch_size, first, step, counts, train_stop, train):  # pragma: no cover - compiled
    # Workers first, first + step, ... in one pass over each one's samples in dataset order:
    #   counts[0] = edge[server, reader]   remote edges (HET-GMP Eq. 3 counts, before weighting)
    #   counts[1] = read[server, reader]   distinct non-local rows per chunk of batch_size
    #   counts[2] = push[pusher, primary]  distinct non-primary rows per chunk
    #   counts[3] = epoch[server, reader]  distinct non-local rows per worker over the epoch
    # Worker w only writes column w of edge/read/epoch and row w of push, so parts running
    # in parallel never write the same cell and the counts do not depend on the thread count.
    # ``train`` gets the same counts over the samples [0, train_stop) only: a worker's samples
    # are visited in dataset order, so those are a prefix of its run, and the counts as they
    # stand when the run first reaches a sample >= train_stop are exactly what a pass over the
    # prefix alone gives (the chunk the prefix ends in has counted the rows it reads so far).
    # ``held``: :func:`_holders`' words, or empty (more workers than a word holds: the primary
    # and a scan of the row's secondaries instead).
    num_workers = starts.size - 1
    packed = held.size > 0
    has_secondaries = sec_workers.size > 0
    edge, read, push, epoch = counts[0], counts[1], counts[2], counts[3]
    # stamps[2e]: last chunk that touched e, as (first position of the chunk in `order`) + 1,
    # unique over all workers; stamps[2e + 1]: last worker + 1. Interleaved so both share a
    # cache line (the loop is bound by cache misses). Never reset.
    stamps = np.zeros(2 * num_embeddings, dtype=np.int32)
    for w in range(first, num_workers, step):
        taken = False
        for p in range(starts[w], starts[w + 1]):
            chunk = starts[w] + ((p - starts[w]) // batch_size) * batch_size + 1
            i = order[p]
            if not taken and i >= train_stop:
                _take_worker(counts, train, w)
                taken = True
            for k in range(indptr[i], indptr[i + 1]):
                e = indices[k]
                if packed:
                    word = held[e]
                    pe = word >> PACKED_MAX_WORKERS
                    local = (word >> w) & 1 != 0
                else:
                    pe = primary[e]
                    local = pe == w
                    if has_secondaries and not local:
                        for q in range(sec_indptr[e], sec_indptr[e + 1]):
                            if sec_workers[q] == w:
                                local = True
                                break
                if pe == w:
                    continue
                if not local:
                    edge[pe, w] += 1
                    if stamps[2 * e + 1] != w + 1:
                        stamps[2 * e + 1] = w + 1
                        epoch[pe, w] += 1
                if stamps[2 * e] != chunk:
                    stamps[2 * e] = chunk
                    push[w, pe] += 1
                    if not local:
                        read[pe, w] += 1
        if not taken:
            _take_worker(counts, train, w)


@numba.njit(cache=True, nogil=True)
def _take_worker(counts, train, w):  # pragma: no cover - compiled
    # worker w's cells of the counts (column w of edge/read/epoch, row w of push) into ``train``
    for v in range(counts.shape[1]):
        train[0, v, w] = counts[0, v, w]
        train[1, v, w] = counts[1, v, w]
        train[2, w, v] = counts[2, w, v]
        train[3, v, w] = counts[3, v, w]


@numba.njit(cache=True, nogil=True, parallel=True)
def _traffic_parallel(indptr, indices, order, starts, primary, sec_indptr, sec_workers, held, num_embeddings,
                      batch_size, num_threads, counts, train_stop, train):  # pragma: no cover - compiled
    for t in numba.prange(num_threads):
        _traffic_part(indptr, indices, order, starts, primary, sec_indptr, sec_workers, held, num_embeddings,
                      batch_size, t, num_threads, counts, train_stop, train)


@numba.njit(cache=True, nogil=True)
def _degree(indices, num_embeddings):  # pragma: no cover - compiled
    deg = np.zeros(num_embeddings, dtype=np.int64)
    for e in indices:
        deg[e] += 1
    return deg


@numba.njit(cache=True, nogil=True)
def _worker_loads(indptr, sample_worker, num_workers):  # pragma: no cover - compiled
    samples = np.zeros(num_workers, dtype=np.int64)
    edges = np.zeros(num_workers, dtype=np.int64)
    for i in range(indptr.size - 1):
        w = sample_worker[i]
        samples[w] += 1
        edges[w] += indptr[i + 1] - indptr[i]
    return samples, edges


@numba.njit(cache=True, nogil=True)
def _rows_held(degree, primary, sec_indptr, sec_workers, num_workers):  # pragma: no cover - compiled
    prim = np.zeros(num_workers, dtype=np.int64)
    sec = np.zeros(num_workers, dtype=np.int64)
    active = 0
    for e in range(primary.size):
        if degree[e] == 0:
            continue
        active += 1
        prim[primary[e]] += 1
        for q in range(sec_indptr[e], sec_indptr[e + 1]):
            sec[sec_workers[q]] += 1
    return prim, sec, active


# --------------------------------------------------------------------------- helpers
def _arrays(graph: BipartiteGraph, placement: Placement):
    """The CSR and placement arrays the kernels read (``placement`` already validated against ``graph``)."""
    return (np.asarray(graph.sample_indptr), np.asarray(graph.sample_indices),
            np.asarray(placement.sample_worker), np.asarray(placement.embedding_primary),
            np.asarray(placement.secondary_indptr), np.asarray(placement.secondary_workers))


def _check_compatible(graph: BipartiteGraph, placement: Placement) -> None:
    if placement.num_samples != graph.num_samples or placement.num_embeddings != graph.num_embeddings:
        raise PlacementError(
            f"placement covers {placement.num_samples} samples x {placement.num_embeddings} embeddings, "
            f"the graph has {graph.num_samples} x {graph.num_embeddings}; use the placement made for this dataset."
        )


def _check_placement(graph: BipartiteGraph | None, placement: Placement) -> None:
    """Refuse a placement the kernels cannot read safely: one that does not cover ``graph`` (None: no graph to
    match), or whose worker ids, dtypes or secondary CSR are invalid (:meth:`Placement.check`). The kernels
    index per-worker arrays by these ids unchecked, so an id out of range is a wrong count or a crash.

    Called once by each public function: one vectorised pass plus the secondary CSR's (1 ms on 1M samples
    and 1M rows, 3-6 ms with 200k secondaries; a traffic pass over their 26M edges takes about 1 s), never by
    the kernels' callers inside this module, which hold a placement checked already."""
    if not isinstance(placement, Placement):
        raise PlacementError(f"placement must be a gmp.placement.Placement, got {type(placement).__name__}.")
    placement.check()
    if graph is not None:
        _check_compatible(graph, placement)


_DEGREE_CACHE: "weakref.WeakKeyDictionary[BipartiteGraph, np.ndarray]" = weakref.WeakKeyDictionary()


def embedding_degree(graph: BipartiteGraph) -> np.ndarray:
    """Samples per embedding, int64 [num_embeddings], without building the transpose (cached per graph)."""
    cached = graph.cached_embedding_degree()
    if cached is not None:
        return cached
    cached = _DEGREE_CACHE.get(graph)
    if cached is None:
        cached = _degree(np.asarray(graph.sample_indices), graph.num_embeddings)
        _DEGREE_CACHE[graph] = cached
    return cached


def edge_traffic_matrix(graph: BipartiteGraph, placement: Placement) -> np.ndarray:
    """int64 [N, N]: remote edges, entry [i, j] served by worker i to samples on worker j."""
    _check_placement(graph, placement)
    ip, ix, sw, pr, si, sws = _arrays(graph, placement)
    return _edge_matrix(ip, ix, sw, pr, si, sws, placement.num_workers)


class Traffic(NamedTuple):
    """The four int64 [N, N] traffic counts of one placement (see the module docstring).

    ``edge[i, j]``, ``read[i, j]``, ``epoch[i, j]``: served by primary ``i`` to
    reader ``j`` (remote edges; distinct rows per chunk; distinct rows per
    epoch). ``push[j, i]``: gradients worker ``j`` pushes to primary ``i``.
    """

    edge: np.ndarray
    read: np.ndarray
    push: np.ndarray
    epoch: np.ndarray


def traffic(graph: BipartiteGraph, placement: Placement, batch_size: int, *,
            num_train: int | None = None) -> Traffic:
    """All traffic counts in one pass over each worker's samples in dataset order.

    ``batch_size`` is the per-worker batch; ``num_train`` restricts the pass
    to samples ``[0, num_train)``.
    """
    return traffic_with_train(graph, placement, batch_size, stop=num_train)[0]


def traffic_with_train(graph: BipartiteGraph, placement: Placement, batch_size: int, *,
                       num_train: int | None = None, stop: int | None = None) -> tuple[Traffic, Traffic]:
    """``(counts, train)``: :func:`traffic` over the samples ``[0, stop)`` (default: all) and over the
    samples ``[0, num_train)`` (default: the same), from one pass (the train samples are a prefix of
    every worker's run: their counts are taken as the run leaves them)."""
    _check_placement(graph, placement)
    return _traffic_with_train(graph, placement, batch_size, num_train=num_train, stop=stop)


def _traffic_with_train(graph: BipartiteGraph, placement: Placement, batch_size: int, *,
                        num_train: int | None = None, stop: int | None = None) -> tuple[Traffic, Traffic]:
    """:func:`traffic_with_train` of a placement validated against ``graph`` already."""
    ip, ix, sw, pr, si, sws = _arrays(graph, placement)
    stop = graph.num_samples if stop is None else int(stop)
    train_stop = stop if num_train is None else int(num_train)
    if not 0 <= stop <= graph.num_samples:
        raise PlacementError(f"num_train must lie in [0, {graph.num_samples}], got {stop}.")
    if not 0 <= train_stop <= stop:
        raise PlacementError(f"num_train must lie in [0, {stop}], got {train_stop}.")
    if int(batch_size) < 1:
        raise PlacementError(f"batch_size must be >= 1, got {batch_size}.")
    n = placement.num_workers
    starts, order = _worker_order(sw, n, stop)
    counts = np.zeros((4, n, n), dtype=np.int64)
    train = np.zeros((4, n, n), dtype=np.int64)
    threads = _num_threads(n, graph.num_embeddings, graph.num_edges)
    # packed where there are secondaries to look up (without, the primary alone is one lookup already)
    held = np.empty(graph.num_embeddings if n <= PACKED_MAX_WORKERS and sws.size else 0, dtype=np.int64)
    if held.size:
        _holders(pr, si, sws, held)
    args = (ip, ix, order, starts, pr, si, sws, held, graph.num_embeddings, np.int64(batch_size))
    if threads == 1:
        _traffic_part(*args, 0, 1, counts, np.int64(train_stop), train)
    else:
        _traffic_parallel(*args, threads, counts, np.int64(train_stop), train)
    return Traffic(*counts), Traffic(*train)


#: stamp memory allowed for the parallel traffic pass (each thread holds 8 bytes per embedding)
STAMP_MEMORY_BYTES = 2 << 30


#: below this many edges the traffic pass runs on the calling thread (no pool start-up)
PARALLEL_MIN_EDGES = 1 << 20


def _num_threads(num_workers: int, num_embeddings: int, num_edges: int) -> int:
    """Threads for the traffic pass: numba's pool, at most one per worker, within STAMP_MEMORY_BYTES."""
    if num_edges < PARALLEL_MIN_EDGES:
        return 1
    by_memory = max(1, STAMP_MEMORY_BYTES // max(1, 8 * num_embeddings))
    return int(max(1, min(numba.get_num_threads(), num_workers, by_memory)))


def _ratio(values: np.ndarray) -> float:
    """max / mean over workers; 1.0 when everything is zero."""
    values = np.asarray(values, dtype=np.float64)
    mean = values.mean() if values.size else 0.0
    return float(values.max() / mean) if mean > 0 else 1.0


# --------------------------------------------------------------------------- public metrics
def remote_accesses(graph: BipartiteGraph, placement: Placement) -> int:
    """Remote (sample, embedding) edges: HET-GMP Eq. 3 summed over workers."""
    return int(edge_traffic_matrix(graph, placement).sum())


def remote_accesses_weighted(graph: BipartiteGraph, placement: Placement, topology: Topology) -> float:
    """Remote edges weighted by ``topology.cost[primary, reader]`` (weighted Eq. 3)."""
    return float((edge_traffic_matrix(graph, placement) * topology.cost).sum())


def epoch_unique_remote(graph: BipartiteGraph, placement: Placement, *, num_train: int | None = None) -> int:
    """Sum over workers of the distinct non-local embeddings its samples use."""
    return int(traffic(graph, placement, 1, num_train=num_train).epoch.sum())


def batch_remote_reads(graph: BipartiteGraph, placement: Placement, batch_size: int, *,
                       num_train: int | None = None) -> int:
    """Distinct non-local rows per per-worker chunk of ``batch_size``, summed (rows pulled per epoch)."""
    return int(traffic(graph, placement, batch_size, num_train=num_train).read.sum())


def batch_remote_pushes(graph: BipartiteGraph, placement: Placement, batch_size: int, *,
                        num_train: int | None = None) -> int:
    """Distinct non-primary rows per per-worker chunk of ``batch_size``, summed (gradients pushed per epoch)."""
    return int(traffic(graph, placement, batch_size, num_train=num_train).push.sum())


def traffic_matrix(graph: BipartiteGraph, placement: Placement, batch_size: int, *,
                   num_train: int | None = None) -> np.ndarray:
    """int64 [N, N]; ``[i, j]`` = rows served by worker i to worker j per epoch (batch_remote_reads terms)."""
    return traffic(graph, placement, batch_size, num_train=num_train).read


def replication_factor(placement: Placement, graph: BipartiteGraph | None = None) -> float:
    """(primaries + secondaries) / active embeddings.

    Active embeddings are those of degree > 0 in ``graph``; without a graph
    every embedding counts as active. 1.0 when there are none.
    """
    _check_placement(graph, placement)
    if graph is None:
        degree = np.ones(placement.num_embeddings, dtype=np.int64)
    else:
        degree = embedding_degree(graph)
    prim, sec, active = _rows_held(degree, np.asarray(placement.embedding_primary),
                                   np.asarray(placement.secondary_indptr),
                                   np.asarray(placement.secondary_workers), placement.num_workers)
    return float(prim.sum() + sec.sum()) / active if active else 1.0


def per_worker(graph: BipartiteGraph, placement: Placement, batch_size: int, *,
               counts: Traffic | None = None) -> dict[str, list[int]]:
    """Per-worker loads, int lists of length N.

    Keys: samples, edges, primaries, secondaries, rows_held (active rows
    only), remote_accesses, epoch_unique_remote, batch_remote_reads (received),
    batch_remote_pushes (sent), traffic_served (reads served as primary),
    traffic_received (= batch_remote_reads).
    """
    _check_placement(graph, placement)
    return _per_worker(graph, placement, batch_size, counts=counts)


def _per_worker(graph: BipartiteGraph, placement: Placement, batch_size: int, *,
                counts: Traffic | None = None) -> dict[str, list[int]]:
    """:func:`per_worker` of a placement validated against ``graph`` already."""
    n = placement.num_workers
    if counts is None:
        counts = _traffic_with_train(graph, placement, batch_size)[0]
    samples, edges = _worker_loads(np.asarray(graph.sample_indptr), np.asarray(placement.sample_worker), n)
    prim, sec, _ = _rows_held(embedding_degree(graph), np.asarray(placement.embedding_primary),
                              np.asarray(placement.secondary_indptr), np.asarray(placement.secondary_workers), n)
    out = {
        "samples": samples,
        "edges": edges,
        "primaries": prim,
        "secondaries": sec,
        "rows_held": prim + sec,
        "remote_accesses": counts.edge.sum(axis=0),
        "epoch_unique_remote": counts.epoch.sum(axis=0),
        "batch_remote_reads": counts.read.sum(axis=0),
        "batch_remote_pushes": counts.push.sum(axis=1),
        "traffic_served": counts.read.sum(axis=1),
        "traffic_received": counts.read.sum(axis=0),
    }
    return {k: [int(x) for x in v] for k, v in out.items()}


def balance(graph: BipartiteGraph, placement: Placement, batch_size: int, *,
            loads: dict[str, list[int]] | None = None) -> dict[str, float]:
    """max/mean over workers of samples, edges, rows_held, traffic_served, traffic_received."""
    if loads is None:
        loads = per_worker(graph, placement, batch_size)
    return {k: _ratio(np.asarray(loads[k])) for k in BALANCE_KEYS}


def reduction(value: float, reference: float) -> float:
    """``1 - value / reference`` (0.6 = 60% less than the reference; negative = worse); 0.0 if reference is 0."""
    return float(1.0 - value / reference) if reference > 0 else 0.0


def _comm_metrics(graph: BipartiteGraph, placement: Placement, topology: Topology,
                  batch_size: int, t: Traffic | None = None) -> tuple[dict[str, float], Traffic]:
    t = traffic(graph, placement, batch_size) if t is None else t
    values = {
        "remote_accesses": int(t.edge.sum()),
        "remote_accesses_weighted": float((t.edge * topology.cost).sum()),
        "epoch_unique_remote": int(t.epoch.sum()),
        "batch_remote_reads": int(t.read.sum()),
        "batch_remote_pushes": int(t.push.sum()),
    }
    return values, t


#: reference placement -> graph -> (batch_size, cost bytes) -> its communication metrics, so scoring
#: several placements against one reference (gmp compare) pays for the reference's pass once
_REFERENCE_CACHE: "weakref.WeakKeyDictionary[Placement, weakref.WeakKeyDictionary]" = weakref.WeakKeyDictionary()


def _reference_values(graph: BipartiteGraph, reference: Placement, topology: Topology,
                      batch_size: int) -> dict[str, float]:
    per_graph = _REFERENCE_CACHE.setdefault(reference, weakref.WeakKeyDictionary())
    per_settings = per_graph.setdefault(graph, {})
    key = (int(batch_size), topology.cost.tobytes())
    if key not in per_settings:
        per_settings[key] = _comm_metrics(graph, reference, topology, batch_size)[0]
    return dict(per_settings[key])


def compute_metrics(graph: BipartiteGraph, placement: Placement, topology: Topology, *,
                    batch_size: int = 512, embedding_dim: int = 16,
                    reference: Placement | None = None, seed: int | None = None,
                    partition_seconds: float | None = None,
                    peak_rss_bytes: int | None = None,
                    num_train: int | None = None) -> dict[str, Any]:
    """Every metric of the report, as the JSON-ready ``metrics`` object.

    Parameters
    ----------
    graph, placement, topology
        What to score. ``topology.num_workers`` must equal ``placement.num_workers``.
    batch_size
        Per-worker batch for the batch metrics.
    embedding_dim
        Row width for the ``*_bytes`` figures (float32 values).
    reference
        The placement the ``reduction_vs_random`` fractions compare against.
        ``None`` runs the registry's ``random`` partitioner on the same graph
        with ``seed`` (default: ``placement.seed``, else 0).
    partition_seconds, peak_rss_bytes
        Measured by the caller; copied into the result (``None`` if unknown).
    num_train
        When given, ``train`` holds the batch metrics over samples
        ``[0, num_train)`` only (the training range the trainer walks; one
        more pass), so a training epoch's logged counts can be checked
        against the report.

    Returns
    -------
    dict
        Keys: ``remote_accesses``, ``remote_accesses_weighted``,
        ``epoch_unique_remote``, ``batch_remote_reads``, ``batch_remote_pushes``
        (+ ``*_bytes`` and ``batch_remote_reads_weighted``), ``batch_size``,
        ``embedding_dim``, ``reduction_vs_random``, ``reference``,
        ``balance``, ``replication_factor``, ``traffic_matrix``,
        ``per_worker``, ``num_workers``, ``num_samples``, ``num_edges``,
        ``num_active_embeddings``, ``partition_seconds``, ``peak_rss_bytes``,
        and ``train`` (``None`` unless ``num_train`` is given).

    Examples
    --------
    >>> from gmp.graph import BipartiteGraph
    >>> from gmp.topology import homogeneous
    >>> g = BipartiteGraph.from_lists([[0, 1], [1, 2]], num_embeddings=3)
    >>> p = Placement.edge_cut(2, [0, 1], [0, 0, 1])
    >>> m = compute_metrics(g, p, homogeneous(2), batch_size=1, reference=p)
    >>> m["remote_accesses"], m["batch_remote_reads"], m["reduction_vs_random"]["remote_accesses"]
    (1, 1, 0.0)
    """
    _check_placement(graph, placement)  # once: the passes below read it unchecked
    if topology.num_workers != placement.num_workers:
        raise PlacementError(
            f"topology has {topology.num_workers} workers, the placement {placement.num_workers}; "
            "use the topology the placement was made for."
        )
    if int(batch_size) < 1 or int(embedding_dim) < 1:
        raise PlacementError(f"batch_size and embedding_dim must be >= 1, got {batch_size} and {embedding_dim}.")
    batch_size, embedding_dim = int(batch_size), int(embedding_dim)
    counts, train = _traffic_with_train(graph, placement, batch_size, num_train=num_train)  # one pass for both
    values, _ = _comm_metrics(graph, placement, topology, batch_size, counts)
    read = counts.read

    if reference is None:
        from .partition import run_partitioner

        ref_seed = seed if seed is not None else (placement.seed if placement.seed is not None else 0)
        reference = run_partitioner("random", graph, topology, seed=int(ref_seed))
        ref_name = f"random (seed {int(ref_seed)})"
    else:
        if isinstance(reference, Placement) and reference.num_workers != placement.num_workers:
            raise PlacementError(f"reference places rows on {reference.num_workers} workers, the placement on "
                                 f"{placement.num_workers}; compare placements over the same workers.")
        ref_name = f"{reference.method} (seed {reference.seed})"
    ref_values = _reference_values(graph, reference, topology, batch_size)

    loads = _per_worker(graph, placement, batch_size, counts=counts)
    degree = embedding_degree(graph)
    num_active = int(np.count_nonzero(degree))
    row_bytes = embedding_dim * VALUE_BYTES
    held = int(sum(loads["rows_held"]))
    metrics: dict[str, Any] = dict(values)
    metrics.update({
        "batch_remote_reads_weighted": float((read * topology.cost).sum()),
        "batch_size": batch_size,
        "embedding_dim": embedding_dim,
        "bytes_per_row": row_bytes,
        "remote_accesses_bytes": values["remote_accesses"] * row_bytes,
        "epoch_unique_remote_bytes": values["epoch_unique_remote"] * row_bytes,
        "batch_remote_reads_bytes": values["batch_remote_reads"] * row_bytes,
        "batch_remote_pushes_bytes": values["batch_remote_pushes"] * row_bytes,
        "reduction_vs_random": {k: reduction(values[k], ref_values[k]) for k in COMM_METRICS},
        "reference": {"placement": ref_name, **ref_values},
        "balance": {k: _ratio(np.asarray(loads[k])) for k in BALANCE_KEYS},
        "replication_factor": held / num_active if num_active else 1.0,
        "traffic_matrix": read.tolist(),
        "per_worker": loads,
        "num_workers": placement.num_workers,
        "num_samples": graph.num_samples,
        "num_edges": graph.num_edges,
        "num_active_embeddings": num_active,
        "num_secondaries": int(sum(loads["secondaries"])),
        "partition_seconds": None if partition_seconds is None else float(partition_seconds),
        "peak_rss_bytes": None if peak_rss_bytes is None else int(peak_rss_bytes),
        "train": None,
    })
    if num_train is not None:
        metrics["train"] = {
            "num_train": int(num_train),
            "remote_accesses": int(train.edge.sum()),
            "epoch_unique_remote": int(train.epoch.sum()),
            "batch_remote_reads": int(train.read.sum()),
            "batch_remote_pushes": int(train.push.sum()),
        }
    return metrics


def degree_distribution(graph: BipartiteGraph, *, num_bins: int = 40) -> dict[str, list]:
    """Log-binned embedding degree histogram of the active embeddings (for the log-log plot).

    Returns ``{"bin_edges": [...], "counts": [...]}``: ``counts[k]`` embeddings
    have degree in ``[bin_edges[k], bin_edges[k+1])``; edges are integers
    spaced geometrically from 1 to max degree + 1.
    """
    deg = embedding_degree(graph)
    deg = deg[deg > 0]
    if not deg.size:
        return {"bin_edges": [1, 2], "counts": [0]}
    top = int(deg.max()) + 1
    edges = np.unique(np.floor(np.logspace(0, math.log10(top), num_bins + 1)).astype(np.int64))
    if edges[-1] < top:  # float rounding in logspace; widen the last bin rather than add a 1-wide one
        edges[-1] = top
    if edges.size < 2:
        edges = np.array([1, top], dtype=np.int64)
    counts, _ = np.histogram(deg, bins=edges)
    return {"bin_edges": [int(x) for x in edges], "counts": [int(x) for x in counts]}
