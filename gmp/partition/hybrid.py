"""``hybrid``: HET-GMP's balanced hybrid graph partitioning (SIGMOD'22, section 5.2, Algorithm 1).

Two steps.

**Start (``levels``).** ``levels=2`` (the default) is the multilevel start of
:mod:`gmp.partition._multilevel` -- our choice, the paper is silent on it:
the samples are contracted into the co-occurrence graph of the *signal rows*
(degree between 2-ish and a few times the soft count's saturation ``m / b``),
METIS's multilevel k-way partitions that graph (machines first on a
hierarchical topology), samples and primaries are projected onto the
bipartite graph within the hard caps, and the sweeps below refine it.
``levels=1`` is Algorithm 1 line 1: a seeded random balanced start. The
flat sweep from a random start finds structure carried by frequently shared
rows only (criteo-1m, 1D only: 7.96M batch reads against METIS's 6.62M; the
multilevel start reaches about 5.7M; docs/hybrid.md, "Multilevel").

**1D step (edge-cut), up to ``rounds`` rounds.** Start from the placement
above (or the random one). Each round sweeps every
sample vertex in id order, then every embedding vertex in id order, and moves
it to the worker that minimises *marginal communication cost plus balance
penalties* (Algorithm 1, lines 3-5). The round is logged and the loop stops
early when it improved the objective by less than ``tol`` (relative).

The objective the sweeps descend is::

    J = sum_x sum_w f(count[x, w]) * C'[p(x), w]                  (Eq. 3, soft count)
      + alpha/2 * sum_i (samples_i    - samples/N)^2             (Eq. 4, compute)
      + beta/2  * sum_i (primaries_i  - primaries/N)^2           (Eq. 4, memory)
      + gamma/(2 d) * sum_i (served_i - d)^2                     (Eq. 5, hot spots)

(:mod:`._objective` holds J, its weights and :class:`Options`, which the incremental and
distributed partitionings share; :func:`._hybrid_kernels.balance_delta` the Eq. 4 marginal every
sweep uses; the multilevel start is :func:`._multilevel.multilevel_start`.)

* ``count[x, w]`` is the number of samples on worker w using embedding x, kept
  as a compact int32 [num_embeddings, N] array and updated incrementally when
  a sample moves. Traffic is de-duplicated within a batch, so the cost of c
  users is the *soft count* ``f(c) = (1 - (1 - c/m)^b) * m/b`` with m = samples
  per worker and b = ``batch_size`` (the expected number of a worker's batches
  that touch the embedding), not c; with m < b there is one batch of m samples
  (b is replaced by m). ``f`` is a lookup table, c = 0 .. cap + 1. Pushes of
  gradients follow the same path back, so reads and pushes share the weight.
* ``C[p, w]`` is the topology's cost of moving a row from primary p to worker
  w. ``C'`` scales row p by ``1 + gamma * (served_p / d - 1)`` where
  ``served_p`` is the weighted traffic worker p serves and d its mean: this
  is the gradient of the Eq. 5 term, linearised once per round (so the sweep
  stays a cheap table lookup), which makes overloaded servers look more
  expensive. gamma is therefore "relative to the communication term".
* The balance terms are quadratic so that their *marginal* cost is exactly
  Eq. 4: adding a vertex to partition i costs ``alpha * (|G_i| - |G|/N)``
  (plus 1/2); moving one from a to b costs ``alpha * (load_b - load_a + 1)``.

**Private rows** (``carry_private``, our choice). A row no other sample uses
costs nothing when its primary sits with its one user; in the single-vertex
sweep such rows pin their sample (moving it alone would turn each of them
remote until the embedding sweep). So a sample moves *with* its private rows:
the sweep scores the compound move by its exact change of J (communication,
Eq. 4's primary term, the primary cap) and makes it in one step
(:func:`._hybrid_kernels.sweep_samples`). Flat topologies only; with
``carry_private=False`` the sweep is Algorithm 1's.

Eq. 2 as printed, ``delta_g = delta_c - delta_b``, *subtracts* the balance
term, which would reward imbalance; we implement the intended
"communication plus imbalance".

Hard caps make balance a guarantee, not only a penalty: a vertex never moves
onto a worker holding ``sample_cap(samples, N, max_imbalance)`` samples (or
the same cap for primaries over the used embeddings). The random start is
balanced to within one, so every intermediate and the final placement
respect both caps.

Embedding ids no sample uses (degree 0) are not vertices of the graph: they
are excluded from the sweeps, the counts and the primary cap, and are
spread over the least-loaded workers at the end (they cost memory only).

**Start (``init``).** The default, ``"random"``, starts from the multilevel
placement (``levels=2``) or the paper's seeded random balanced start
(``levels=1``). ``init="bicut"`` / ``"greedy-stream"`` runs that registered
partitioner first (same seed, same ``max_imbalance``) and starts the sweeps
from its sample workers and primaries; an excess over the hard caps (their
caps are computed the same way, so normally none) is repaired by
``enforce_cap``. The greedy sweeps from a random start find the data's
communities only partly (criteo-1m: the 1D step alone trails METIS); a
graph-aware start lets the same sweeps go further (numbers in
docs/hybrid.md, "init"). Only on flat topologies: the machine-level pass of
a hierarchical topology starts at random, and a non-random ``init`` there is
refused with a PartitionError. ``info["init"]`` records the method and its
seconds (also counted in ``info["seconds"]`` and round 0's ``seconds``).

**2D step (vertex-cut replication, Eq. 6).** After the last 1D round, each
worker w receives as *secondaries* the non-local used embeddings with the
highest expected remote traffic to w, ``f(count[x, w]) * C[p(x), w]`` (Eq. 6's
numerator; its denominator is the same for every candidate of w and does not
change the order), until its budget: ``replication_budget`` x the number of
used embeddings, or with ``memory_per_worker`` the number of
``embedding_dim`` float32 rows that fit next to w's primaries. Never on the
primary's worker; ties go to the lower embedding id. Algorithm 1 repeats the
2D step inside the loop, but the next round's 1D step moves primaries and
recomputes everything, so only the last round's replicas survive; we run it
once at the end (same result, less work).

**Hierarchical topologies.** Nothing special is needed: with ``2x8`` the
inter-machine entries of C are 10x the intra-machine ones, so every marginal
cost prefers a worker on the machine that already holds the traffic, and the
result clusters traffic at machine level first, then at worker level.

**Determinism.** All sweeps are sequential in a fixed vertex order (the
paper's algorithm); the only randomness is the seeded start. Results are
bit-identical for a given seed regardless of the number of numba threads
(the authors' OpenMP code races on shared counters; this one does not).
A deterministic parallel variant (decide a block of samples in parallel
against a snapshot, apply in order) was tried and dropped: on dense graphs
the stale decisions overshoot (MovieLens-100K: 158K batch remote reads with
blocks of 4096 vs 83K sequential) and on this 2-core machine it gained
little. ``threads`` only bounds numba's thread pool for the duration of the
call (kept for interface stability; the kernels are single-threaded).

**Memory.** The partitioner works on the ids that occur: when some ids
never occur, the edge array is remapped once to a compact numbering (an
int32 copy of the edges) so that ``count`` (int32 [used ids, N]), the
primaries and the sweeps scale with the used ids (criteo-1m: 2.8M of 33.8M).
Beside ``count`` the sample sweep keeps ``drow = df[count]`` (float64 [used
ids, N padded to 8]) so that its hot loop reads one row per edge as a SIMD
vector (:mod:`gmp.kernels.simd`). The embedding->sample transpose is
never built. Measured at the full Criteo-Kaggle scale (45.8M samples, 1.19B
edges, 30.1M used ids, 8 workers): 13.3 GiB peak RSS for the whole ``gmp
partition`` command, 126 s for the partitioner on the shared 2-core machine
(docs/hybrid.md).

Per-round log (``placement.info["rounds"]``, also ``logging.info``): a list
of dicts, round 0 being the random start, with keys ``round``, ``objective``,
``comm_weighted`` (Eq. 3, soft count, cost-weighted), ``expected_remote_reads``
(the soft-count estimate of the report's ``batch_remote_reads``; within ~0.2%
of it on Criteo-like data), ``remote_accesses`` and ``epoch_unique_remote``
(exact, the report's definitions, without secondaries), ``sample_imbalance``,
``primary_imbalance``, ``traffic_imbalance`` (max/mean), ``moved_samples``,
``moved_embeddings``, ``seconds``. ``info["replication"]`` has the 2D step's
budgets, secondaries per worker and expected reads after replication. The
exact ``batch_remote_reads`` is left to the report (one more pass over all
edges: 40+ s at full scale, too costly to repeat per round).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import asdict
from typing import Iterator


import numba
import numpy as np

from ..errors import PartitionError
from ..graph import BipartiteGraph
from ..placement import Placement
from ..progress import task
from ..topology import Topology
from . import _hybrid_kernels as K
from ..kernels.simd import padded_width
from . import _multilevel as ML
from ._common import enforce_cap, expand_primaries, is_hierarchical, place_unused_embeddings, sample_cap
# Options and INIT_METHODS are hybrid's names too (gmp.partition.PARTITIONERS reads hybrid.Options)
from ._objective import (INIT_METHODS, Options, default_weights, replication_budgets,  # noqa: F401
                         soft_count_table, summarize)
from .random import balanced_random_assignment

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------
# pieces (public so tests can check them against slow references)
# --------------------------------------------------------------------------
@contextmanager
def _numba_threads(threads: int | None) -> Iterator[None]:
    if threads is None:
        yield
        return
    old = numba.get_num_threads()
    numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(old)


class _State:
    """The mutable 1D state of one level (machines or workers) and the objective bookkeeping.

    ``prim = None``: the used embeddings get a seeded random balanced
    placement (Algorithm 1 line 1); else ``prim`` (with ``-1`` on unused ids)
    is taken as the start.
    """

    def __init__(self, graph: BipartiteGraph, cost: np.ndarray, options: Options, sw: np.ndarray,
                 prim: np.ndarray | None, rng: np.random.Generator, *, batch_size: int,
                 count: np.ndarray | None = None, num_private: np.ndarray | None = None):
        self.indptr = np.asarray(graph.sample_indptr)
        self.indices = np.asarray(graph.sample_indices)
        # private rows last in every sample's entries (K.private_last), moved with their sample; None: none
        # (Algorithm 1's single-vertex sweep)
        self.num_private = (np.zeros(graph.num_samples, dtype=np.int32) if num_private is None else num_private)
        n = int(cost.shape[0])
        self.num_workers = n
        self.cost = np.ascontiguousarray(cost, dtype=np.float64)
        num_samples, num_embeddings = graph.num_samples, graph.num_embeddings

        self.sw = sw
        if count is None:
            count = np.zeros((num_embeddings, n), dtype=np.int32)
            K.count_samples(self.indptr, self.indices, self.sw, count)
        self.count = count  # given: the caller's count of this placement (the multilevel projection's)
        # used <=> degree > 0 <=> the embedding is a vertex of the graph (no phantom ids)
        self.active = K.used_rows(self.count)
        self.num_used = int(np.count_nonzero(self.active))
        if prim is None:
            prim = np.full(num_embeddings, -1, dtype=np.int32)
            used_ids = np.flatnonzero(self.active)
            prim[used_ids] = balanced_random_assignment(used_ids.size, n, rng)
            del used_ids
        self.prim = prim

        self.sample_cap = sample_cap(num_samples, n, options.max_imbalance)
        self.primary_cap = sample_cap(self.num_used, n, options.max_imbalance)
        self.sample_load = np.bincount(self.sw, minlength=n).astype(np.int64)
        self.primary_load = np.bincount(self.prim[self.active], minlength=n).astype(np.int64)

        a, b = default_weights(n, num_samples, self.num_used)
        self.alpha = float(options.alpha) if options.alpha is not None else a
        self.beta = float(options.beta) if options.beta is not None else b
        self.gamma = float(options.gamma)

        # count[x, w] never exceeds a worker's samples (<= cap); the sweep reads f[c + 1]
        self.f = soft_count_table(self.sample_cap, num_samples / n, batch_size)
        self.df = np.diff(self.f)
        # drow[x, w] = df[count[x, w]], rows padded to whole SIMD vectors: the sample sweep's hot loop
        # reads one row per edge instead of gathering df lane by lane (float64 [used, padded N])
        self.drow = np.zeros((num_embeddings, padded_width(n)), dtype=np.float64)
        K.fill_marginals(self.count, self.df, self.drow)

        self.served = np.zeros(n, dtype=np.float64)
        self.received = np.zeros(n, dtype=np.float64)
        self.width = self.drow.shape[1]
        self._gain = np.zeros(self.width, dtype=np.float64)
        self._tally = np.zeros(n, dtype=np.int64)
        self._fw = np.zeros(n, dtype=np.float64)
        self._total = np.zeros(self.width, dtype=np.float64)
        # (weighted, reads, remote, unique) of the current placement with served/received filled; None: stale
        self._traffic: tuple | None = None

    # -- objective ----------------------------------------------------------
    def summary(self) -> dict:
        """Objective terms and metrics of the current state (fills self.served)."""
        if self._traffic is None:
            self._traffic = K.traffic_summary(self.prim, self.count, self.active, self.f, self.cost, self.served,
                                              self.received)
        return summarize(self, self._traffic)

    def effective_cost(self) -> np.ndarray:
        """C' = C with row p scaled by 1 + gamma (served_p / mean - 1): Eq. 5 linearised at the round start."""
        d_mean = float(self.served.mean())
        if self.gamma == 0.0 or d_mean <= 0.0:
            return self.cost.copy()
        factor = 1.0 + self.gamma * (self.served / d_mean - 1.0)
        return np.ascontiguousarray(self.cost * factor[:, None])

    # -- sweeps ---------------------------------------------------------------
    def sweep_samples(self, ceff: np.ndarray) -> int:
        """Algorithm 1's sweep over the sample vertices with cost matrix ``ceff``; returns the number moved."""
        cpad = np.zeros((self.num_workers, self.drow.shape[1]), dtype=np.float64)
        cpad[:, :self.num_workers] = ceff
        self._traffic = None  # the counts change: the traffic totals are stale
        return int(K.sweep_samples(self.indptr, self.indices, self.num_private, self.sw, self.prim, self.count,
                                   self.drow, self.df, cpad, self.sample_load, np.int64(self.sample_cap), self.alpha,
                                   self.primary_load, np.int64(self.primary_cap), self.beta, self._gain,
                                   self._tally))

    def sweep_embeddings(self, ceff: np.ndarray) -> int:
        """Algorithm 1's sweep over the used embedding vertices; returns the number moved.

        The kernel also totals the traffic of the resulting placement (see
        :meth:`summary`), so the round's summary costs no extra pass.
        """
        n = self.num_workers
        ceff_t = np.zeros((n, self.width), dtype=np.float64)
        ceff_t[:, :n] = ceff.T
        moved, *traffic = K.sweep_embeddings(self.prim, self.count, self.active, self.f, ceff_t, self.primary_load,
                                             np.int64(self.primary_cap), self.beta, self._fw, self._total, self.cost,
                                             self.served, self.received)
        self._traffic = tuple(traffic)
        return int(moved)

    def sweep(self, ceff: np.ndarray) -> tuple[int, int]:
        return self.sweep_samples(ceff), self.sweep_embeddings(ceff)


def choose_secondaries(state: _State, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 6 greedy: per worker the top-``budget`` candidates by expected traffic, ties by lower id.

    Returns ``(indptr, workers)`` (CSR over embeddings, workers ascending) and
    ``(w_indptr, w_ids)`` (the same secondaries as a CSR over workers).
    """
    n = state.num_workers
    num_embeddings = state.prim.size
    per_worker = [chosen for chosen, _ in _top_candidates(state, budgets)]
    w_indptr = np.zeros(n + 1, dtype=np.int64)
    w_indptr[1:] = np.cumsum([c.size for c in per_worker])
    w_ids = np.concatenate(per_worker) if per_worker else np.zeros(0, dtype=np.int64)
    # transpose to a CSR over embeddings (workers ascending within a row: stable sort by embedding)
    w_of = np.repeat(np.arange(n, dtype=np.int32), np.diff(w_indptr))
    order = np.argsort(w_ids, kind="stable")
    indptr = np.zeros(num_embeddings + 1, dtype=np.int64)
    np.cumsum(np.bincount(w_ids, minlength=num_embeddings), out=indptr[1:])
    return indptr, w_of[order].astype(np.int32), w_indptr, w_ids


def replication_savings(state: _State, budgets: np.ndarray) -> float:
    """Cost-weighted expected traffic the 2D step would take off ``state`` (Eq. 6): per worker the sum of
    its top-``budget`` candidate scores (:func:`choose_secondaries` picks exactly those; ties do not change
    the sum). 0 when every budget is 0."""
    if int(np.sum(budgets)) <= 0:
        return 0.0
    total = 0.0
    for _, saved in _top_candidates(state, budgets, ids=False):
        total += saved
    return total


def score_after_2d(state: _State, rounds: list[dict], options: Options) -> float:
    """A refined placement's score where starts compete (the portfolio, :func:`_flat_beside`): J after the
    last of ``rounds`` less what the 2D step's secondaries will take off (:func:`replication_savings`);
    a start whose remote traffic sits on a few rows loses less to replication than J alone says."""
    budgets = replication_budgets(state.num_workers, state.num_used, state.primary_load, options)
    return rounds[-1]["objective"] - replication_savings(state, budgets)


def _top_candidates(state: _State, budgets: np.ndarray, *, ids: bool = True) -> list[tuple[np.ndarray | None, float]]:
    """Per worker w: its top-``budgets[w]`` replication candidates (ids ascending; ties in score go to the
    lower id; None unless ``ids``) and the sum of their scores (Eq. 6 numerators).

    The workers are independent: they run in up to ``numba.get_num_threads()`` threads (the scoring
    kernel and numpy's selection release the GIL), each thread with its own buffers (16 B per row);
    the result is the same for any number."""
    n = state.num_workers
    local = threading.local()

    def one(w: int) -> tuple[np.ndarray | None, float]:
        k = int(budgets[w])
        if k <= 0:
            return (np.zeros(0, dtype=np.int64) if ids else None), 0.0
        if not hasattr(local, "ids"):
            local.ids = np.empty(state.prim.size, dtype=np.int64)
            local.scores = np.empty(state.prim.size, dtype=np.float64)
        m = K.replication_scores(state.prim, state.count, state.active, state.f, state.cost, w, local.ids,
                                 local.scores)
        cand, scores = local.ids[:m], local.scores[:m]
        if m <= k:
            return (cand.copy() if ids else None), float(scores.sum())
        # k-th largest score t: take all > t, then the lowest ids among == t (ids are ascending)
        top = np.partition(scores, m - k)
        saved = float(top[m - k:].sum())
        if not ids:
            return None, saved
        t = top[m - k]
        above = cand[scores > t]
        at = cand[scores == t][: k - above.size]
        return np.sort(np.concatenate([above, at])), saved

    threads = max(1, min(n, numba.get_num_threads()))
    if threads == 1:
        return [one(w) for w in range(n)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, range(n)))


def partition(graph: BipartiteGraph, topology: Topology, *, seed: int, options: Options) -> Placement:
    """HET-GMP hybrid partitioning (Algorithm 1): T rounds of 1D sweeps, then the 2D replication step.

    Parameters
    ----------
    graph, topology
        The bipartite graph and the worker cost matrix (Eq. 3's weights).
    seed
        Seeds the random start (the only randomness).
    options
        :class:`Options`.

    Returns
    -------
    Placement
        ``info["rounds"]`` holds the per-round log, ``info["replication"]``
        the 2D step's summary.
    """
    with _numba_threads(options.threads):
        return _partition(graph, topology, seed=seed, options=options)


def machine_cost(topology: Topology) -> np.ndarray:
    """Machine x machine cost: the mean worker-to-worker cost between two machines (0 on the diagonal)."""
    mo = np.asarray(topology.machine_of)
    num_machines = int(mo.max()) + 1
    out = np.zeros((num_machines, num_machines))
    for i in range(num_machines):
        for j in range(num_machines):
            if i != j:
                out[i, j] = topology.cost[np.ix_(mo == i, mo == j)].mean()
    return out


def _spread_within_machines(machine_part: np.ndarray, machine_of: np.ndarray, rng: np.random.Generator,
                            skip: np.ndarray | None = None) -> np.ndarray:
    """Worker ids: the items of each machine dealt at random, balanced, over that machine's workers."""
    out = np.full(machine_part.size, -1, dtype=np.int32)
    for m in range(int(machine_of.max()) + 1):
        workers = np.flatnonzero(machine_of == m).astype(np.int32)
        mask = machine_part == m
        if skip is not None:
            mask &= ~skip
        ids = np.flatnonzero(mask)
        out[ids] = workers[balanced_random_assignment(ids.size, workers.size, rng)]
    return out


def _run_rounds(state: _State, options: Options, rounds: list[dict], level: str, t_start: float, *,
                max_rounds: int | None = None, show: bool = True) -> None:
    """Algorithm 1 lines 2-5 on one level: up to ``max_rounds`` (default ``options.rounds``) sweeps, logged
    into ``rounds``. ``show=False``: no progress bar and the rounds logged at DEBUG (a portfolio candidate's
    refinement, run in a worker thread)."""
    max_rounds = options.rounds if max_rounds is None else max_rounds
    level_no = logging.INFO if show else logging.DEBUG

    def record(r: int, seconds: float, moved: tuple[int, int]) -> dict:
        entry = {"round": r, "level": level, **state.summary()}
        entry["moved_samples"], entry["moved_embeddings"] = moved
        entry["seconds"] = round(seconds, 4)
        rounds.append(entry)
        log.log(level_no, "hybrid %s round %d: objective %.6g, expected batch remote reads %.6g, remote_accesses %d, "
                "epoch_unique_remote %d, imbalance samples %.4f primaries %.4f traffic %.4f, "
                "moved %d samples %d embeddings, %.2f s",
                level, r, entry["objective"], entry["expected_remote_reads"], entry["remote_accesses"],
                entry["epoch_unique_remote"], entry["sample_imbalance"], entry["primary_imbalance"],
                entry["traffic_imbalance"], entry["moved_samples"], entry["moved_embeddings"], seconds)
        return entry

    prev = record(0, time.perf_counter() - t_start, (0, 0))["objective"]
    bar = (task(f"Hybrid partitioning ({level} level, 1D rounds)", total=max_rounds) if show
           else nullcontext(lambda amount=1, status=None: None))
    with bar as advance:
        for r in range(1, max_rounds + 1):
            t_r = time.perf_counter()
            ceff = state.effective_cost()  # state.served is current: summary() ran last
            moved = state.sweep(ceff)
            obj = record(r, time.perf_counter() - t_r, moved)["objective"]
            advance(1)
            improvement = (prev - obj) / prev if prev > 0 else 0.0
            prev = obj
            if improvement < options.tol:
                log.log(level_no, "hybrid %s level: round %d improved the objective by %.3g < tol %.3g; stopping.",
                        level, r, improvement, options.tol)
                break


def _multilevel_start(graph: BipartiteGraph, topology: Topology, options: Options, rng: np.random.Generator,
                      degree: np.ndarray, num_private: np.ndarray | None) -> tuple[_State, list[dict] | None, dict] | None:
    """:func:`gmp.partition._multilevel.multilevel_start` with this module's sweeps."""
    def new_state(sw, prim, state_rng, count) -> _State:
        return _State(graph, topology.cost, options, sw, prim, state_rng, batch_size=options.batch_size,
                      count=count, num_private=num_private)

    def refine(state: _State, t_start: float, max_rounds: int) -> tuple[list[dict], float]:
        cand_rounds: list[dict] = []
        _run_rounds(state, options, cand_rounds, "worker", t_start, max_rounds=max_rounds, show=False)
        return cand_rounds, score_after_2d(state, cand_rounds, options)

    return ML.multilevel_start(graph, topology, options, rng, degree, new_state=new_state, refine=refine)


def _flat_beside(state: _State, graph: BipartiteGraph, topology: Topology, options: Options,
                 rng: np.random.Generator, rounds: list[dict], multilevel_info: dict,
                 num_private: np.ndarray | None) -> _State:
    """The refined multilevel ``state`` or the flat sweep's (a seeded random start and the same rounds),
    whichever has the lower objective less the 2D step's savings (``options.flat_beside_samples``).

    ``rounds`` (the multilevel round log) is replaced by the flat one's when that wins; the comparison
    goes to ``multilevel_info["flat_beside"]``. Memory: both states at once, less the multilevel one's
    marginals (``drow``), which the 2D step does not read."""
    n = topology.num_workers
    ml_score = score_after_2d(state, rounds, options)
    state.drow = None  # (memory: the 2D step reads count, prim and f only)
    flat_rounds: list[dict] = []
    flat = _State(graph, topology.cost, options, balanced_random_assignment(graph.num_samples, n, rng), None, rng,
                  batch_size=options.batch_size, num_private=num_private)
    _run_rounds(flat, options, flat_rounds, "worker (flat)", time.perf_counter())
    flat_score = score_after_2d(flat, flat_rounds, options)
    chosen = "flat" if flat_score < ml_score else "multilevel"
    multilevel_info["flat_beside"] = {"multilevel_score": ml_score, "flat_score": flat_score, "chosen": chosen,
                                      "multilevel_rounds": rounds[-1]["round"]}
    log.info("hybrid: after the 2D step's savings, multilevel %.6g against flat %.6g: %s kept", ml_score,
             flat_score, chosen)
    if chosen == "multilevel":
        return state
    rounds[:] = flat_rounds
    return flat


def _partition(graph: BipartiteGraph, topology: Topology, *, seed: int, options: Options) -> Placement:
    n = topology.num_workers
    if n > 64:
        raise PartitionError(f"hybrid supports up to 64 workers, got {n}; use fewer workers or another method.")
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    rounds: list[dict] = []
    full_graph = graph
    # work on the ids that occur: criteo-1m has a 33.8M id space but ~2M used ids; per-embedding state
    # and sweeps then scale with the used ids (phantom ids are never vertices)
    init_info = {"method": options.init, "seconds": 0.0}
    multilevel_info = None
    start: Placement | None = None
    if options.init != "random":
        if is_hierarchical(topology):
            raise PartitionError(f"hybrid: init={options.init!r} is supported on flat topologies only, got the "
                                 f"hierarchical topology {topology.name!r}; use init='random' there.")
        from . import run_partitioner  # late import: the registry imports this module

        t_init = time.perf_counter()
        start = run_partitioner(options.init, graph, topology, seed=seed,
                                options={"max_imbalance": options.max_imbalance})
        init_info["seconds"] = round(time.perf_counter() - t_init, 4)
        log.info("hybrid: start from %s (%.2f s)", options.init, init_info["seconds"])
    used_ids, local, degree = K.used_ids_and_degree(np.asarray(graph.sample_indices), np.int64(graph.num_embeddings))
    if used_ids.size < graph.num_embeddings:
        cindices = np.empty(graph.num_edges, dtype=np.int32)
        K.remap_parallel(np.asarray(graph.sample_indices), local, cindices)
        graph = BipartiteGraph(np.asarray(graph.sample_indptr), cindices, used_ids.size, check=False)
    del local
    num_private = None
    if options.carry_private and not is_hierarchical(topology):
        # every sample's private rows (used by no other sample) last in its entries, so the sample sweep can
        # move them with it (K.sweep_samples); reordered in place in our own copy of the entries
        if graph is full_graph:
            graph = BipartiteGraph(np.asarray(graph.sample_indptr), np.array(graph.sample_indices, copy=True),
                                   graph.num_embeddings, check=False)
        num_private = np.empty(graph.num_samples, dtype=np.int32)
        K.private_last(np.asarray(graph.sample_indptr), np.asarray(graph.sample_indices),
                       (degree == 1).view(np.uint8), num_private)
    ml = None
    if options.levels > 1 and start is None:  # multilevel start (._multilevel), any topology
        ml = _multilevel_start(graph, topology, options, rng, degree, num_private)
    if ml is not None:
        state, refined, multilevel_info = ml
        del ml
        if refined is None:  # a hierarchical topology: the projection chosen, refined here
            _run_rounds(state, options, rounds, "worker", time.perf_counter())
        else:  # the candidates were refined before the choice: the chosen one's round log
            rounds.extend(refined)
        if 0 < options.flat_beside_samples <= graph.num_samples and not is_hierarchical(topology):
            state = _flat_beside(state, graph, topology, options, rng, rounds, multilevel_info, num_private)
    elif is_hierarchical(topology):
        # machine level first: machines are the partitions, a machine's batch is its workers' batches
        mo = np.asarray(topology.machine_of, dtype=np.int32)
        num_machines = int(mo.max()) + 1
        per_machine = n // num_machines
        msw = balanced_random_assignment(graph.num_samples, num_machines, rng)
        mstate = _State(graph, machine_cost(topology), options, msw, None, rng,
                        batch_size=options.batch_size * max(per_machine, 1), num_private=num_private)
        _run_rounds(mstate, options, rounds, "machine", t0)
        t1 = time.perf_counter()
        # then worker level, starting from the machine-level placement spread inside each machine
        sw = _spread_within_machines(mstate.sw, mo, rng)
        prim = _spread_within_machines(mstate.prim, mo, rng, skip=~mstate.active)
        del mstate
        # the spread is balanced to within one per machine; repair the rare excess over the worker caps
        enforce_cap(sw, n, sample_cap(graph.num_samples, n, options.max_imbalance), rng)
        used = prim >= 0
        prim_used = prim[used]
        enforce_cap(prim_used, n, sample_cap(int(used.sum()), n, options.max_imbalance), rng)
        prim[used] = prim_used
        state = _State(graph, topology.cost, options, sw, prim, rng, batch_size=options.batch_size,
                       num_private=num_private)
        _run_rounds(state, options, rounds, "worker", t1)
    else:
        if start is None:  # Algorithm 1 line 1: seeded random balanced start
            sw, prim = balanced_random_assignment(graph.num_samples, n, rng), None
        else:  # graph-aware start: the init partitioner's samples and primaries of the used ids
            sw = np.array(start.sample_worker, dtype=np.int32)
            prim = np.array(np.asarray(start.embedding_primary)[used_ids], dtype=np.int32)
            # the caps are computed as _State computes them (used ids only); repair any excess
            enforce_cap(sw, n, sample_cap(graph.num_samples, n, options.max_imbalance), rng)
            enforce_cap(prim, n, sample_cap(used_ids.size, n, options.max_imbalance), rng)
            del start
        state = _State(graph, topology.cost, options, sw, prim, rng, batch_size=options.batch_size,
                       num_private=num_private)
        _run_rounds(state, options, rounds, "worker", t0)

    # 2D step (Eq. 6)
    t2 = time.perf_counter()
    num_embeddings = full_graph.num_embeddings
    if graph is full_graph:
        prim = place_unused_embeddings(state.prim, n)  # phantom ids: memory only, least-loaded workers
    else:
        prim = expand_primaries(used_ids, state.prim, num_embeddings, n)  # the same, in one pass
    # every primary row (phantoms too) occupies memory next to the secondaries
    budgets = replication_budgets(n, state.num_used, K.worker_loads(prim, np.int64(n)), options, warn=True)
    if int(budgets.sum()) > 0:
        indptr, workers, w_indptr, w_ids = choose_secondaries(state, budgets)
    else:
        indptr = np.zeros(graph.num_embeddings + 1, dtype=np.int64)
        workers = np.zeros(0, dtype=np.int32)
        w_indptr, w_ids = np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if graph is not full_graph:  # secondary CSR back to the full id space
        indptr = K.expand_indptr(indptr, used_ids, np.int64(num_embeddings))
    # expected batch reads once the secondaries serve locally (unweighted soft count)
    expected_1d = rounds[-1]["expected_remote_reads"]
    saved = 0.0
    for w in range(n):
        ids = w_ids[w_indptr[w]:w_indptr[w + 1]]
        saved += float(state.f[state.count[ids, w]].sum())
    replication = {
        "budget_per_worker": budgets.tolist(),
        "secondaries_per_worker": np.diff(w_indptr).tolist(),
        "num_secondaries": int(workers.size),
        "expected_remote_reads": expected_1d - saved,
        "expected_remote_pushes": expected_1d,
        "seconds": round(time.perf_counter() - t2, 4),
    }
    log.info("hybrid 2D step: %d secondaries, expected batch remote reads %.6g -> %.6g, %.2f s", workers.size,
             expected_1d, expected_1d - saved, replication["seconds"])

    info = {
        "rounds": rounds,
        "replication": replication,
        "alpha": state.alpha,
        "beta": state.beta,
        "gamma": state.gamma,
        "sample_cap": state.sample_cap,
        "primary_cap": state.primary_cap,
        "num_used_embeddings": state.num_used,
        "init": init_info,
        "multilevel": multilevel_info,
        "seconds": round(time.perf_counter() - t0, 4),
    }
    placement = Placement.edge_cut(n, state.sw, prim, method="hybrid", options=asdict(options), seed=seed, info=info)
    if workers.size:
        placement = placement.with_secondaries(indptr, workers)
    return placement


#: the process before any array (interpreter, numpy, numba, the CLI; measured 0.3-0.4 GiB) and the
#: compiled kernels, rounded up
BASE_BYTES = 1 << 29


def peak_memory_bytes(num_samples: int, num_edges: int, num_embeddings: int, num_workers: int,
                      options: Options | None = None, *, field_sizes: list[int] | None = None,
                      used_rows: int | None = None) -> int:
    """Peak resident memory of an in-memory ``gmp partition --method hybrid`` (partitioner and scoring),
    estimated from the dataset's header before any array is read: the larger of

    * the sweeps: the memory-mapped edges (int32, every page touched) and the working copy the sweeps
      reorder (int32), per sample its CSR pointer, worker, private count and load; per used row its
      ``count`` (int32 [rows, workers]), ``drow`` (float64 [rows, workers padded to 8]), primary and degree,
      and all but ``drow`` again when the flat sweep runs beside the multilevel start
      (``flat_beside_samples``: both states at once, less the first one's ``drow``); per id of the
      header the compaction map and the placement's arrays;
    * the multilevel start: the edges and samples as above and its candidates
      (``_multilevel.candidate_bytes``, two at once where numba has two threads), one finished
      candidate's placement kept beside them; a candidate holds first its signal graph (the row pairs),
      then, refined (``rounds`` > 0), a sweep state instead (its float64 marginals per used row): the
      larger of the two phases counts;
    * the scoring pass (:func:`gmp.metrics.evaluate`): the mapped edges, per id its degree, primary,
      secondary pointer and ``held`` word and the per-thread stamps (two threads' worth).

    ``used_rows``: the ids that occur, if counted (:func:`count_used_rows`). Else the header bounds them:
    ``min(num_embeddings, num_edges)`` and, where every sample has one value per categorical field
    (``field_sizes``: their ``num_values``, and ``num_edges`` = fields x samples), the sum over the fields
    of ``min(num_values, num_samples)``; tight where most of the vocabulary occurs (full-size
    ``criteo-kaggle``: 31.6M of 33.8M rows), about 2x the used rows on a 5M-sample draw. Calibrated on
    ``criteo-kaggle`` draws (docs/synth.md, "Memory pre-check"): with the used rows counted, 8% above the
    measured peak of the command at 1M samples, 18% at 5M, 13% at 10M and 10% at 20M; 4% above the 13.9 GiB
    measured at full size on the entity model (1.36M rows; docs/benchmarks.md)."""
    options = options or Options()
    s, e, v, n = int(num_samples), int(num_edges), int(num_embeddings), int(num_workers)
    used = min(v, e)
    if used_rows is not None:
        used = min(used, int(used_rows))
    elif field_sizes and len(field_sizes) * s == e:
        used = min(used, sum(min(int(k), s) for k in field_sizes))
    drow = 8 * padded_width(n)
    per_row = 4 * n + drow + 4 + 1 + 8  # count, drow, primary, active flag, degree
    beside = 0 < options.flat_beside_samples <= s and options.levels > 1  # a second count and primary
    partitioner = (8 * e + (8 + 4 + 4 + 8 + 8) * s + (per_row + (4 * n + 4 if beside else 0)) * used
                   + (4 + 8) * v)
    if options.levels > 1:  # the multilevel start: candidates at once (two bands, one per thread) + one kept
        at_once = max(1, min(2, numba.get_num_threads()))
        pairs = options.coarse_pairs or ML.default_coarse_pairs(s)
        # first each candidate holds its signal graph (the pairs); refined candidates (every flat topology;
        # the estimate does not know the topology, so whenever there are rounds) then free it and hold a sweep
        # state each (its marginals, a row per used id): whichever phase holds more
        candidates = at_once * ML.candidate_bytes(s, used, n, pairs)
        if options.rounds > 0:
            candidates = max(candidates, at_once * ML.candidate_bytes(s, used, n, 0, refined=True))
        multilevel = 8 * e + (8 + 4 + 8) * s + candidates + 4 * s + (4 + 4 * n) * used
        partitioner = max(partitioner, multilevel)
    scoring = 4 * e + (8 + 4) * s + (8 + 4 + 8 + 8) * v + 2 * 8 * v
    return BASE_BYTES + max(partitioner, scoring)


def count_used_rows(indices: np.ndarray, num_embeddings: int, *, block: int = 1 << 26) -> int:
    """The number of distinct ids in ``indices`` (a memory-mapped edge array, read in blocks): one pass,
    ``num_embeddings`` bytes of flags."""
    seen = np.zeros(int(num_embeddings), dtype=np.bool_)
    for start in range(0, indices.size, block):
        seen[indices[start:start + block]] = True
    return int(np.count_nonzero(seen))
