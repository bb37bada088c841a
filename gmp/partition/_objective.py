"""The objective HET-GMP's hybrid partitioning descends (SIGMOD'22, Eqs. 3-5), in one place.

``hybrid`` (:mod:`gmp.partition.hybrid`), the incremental re-partitioning
(:mod:`gmp.partition.incremental` and its one-pass plan) and the distributed one
(:mod:`gmp.partition.distributed`) score placements with these pieces, and hybrid and the
distributed run share its :class:`Options` (the weights, the hard caps, the 2D step's budgets
(:func:`replication_budgets`) and the search settings)::

    J = sum_x sum_w f(count[x, w]) * C'[p(x), w]                  (Eq. 3, soft count f: soft_count_table)
      + alpha/2 * sum_i (samples_i    - samples/N)^2             (Eq. 4, compute; alpha: default_weights)
      + beta/2  * sum_i (primaries_i  - primaries/N)^2           (Eq. 4, memory;  beta:  default_weights)
      + gamma/(2 d) * sum_i (served_i - d)^2                     (Eq. 5, hot spots)

:func:`summarize` evaluates J and the round metrics of a level's state. The marginal costs the
sweeps use live in the kernel modules (``_hybrid_kernels.py``, ``_incremental_kernels.py``,
``distributed/_kernels.py``); the module docstring of :mod:`gmp.partition.hybrid` derives them.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..constants import VALUE_BYTES
from ..errors import PartitionError
from ..params import is_int, is_real
from ._common import check_max_imbalance
from ._hybrid_kernels import traffic_summary

log = logging.getLogger("gmp.partition.hybrid")  # its warnings are hybrid's (and the distributed run's)



def soft_count_table(max_count: int, samples_per_worker: float, batch_size: int) -> np.ndarray:
    """float64 [max_count + 2]: f(c) = (1 - (1 - c/m)^b) * m/b, the expected batches touching an
    embedding used by c of a worker's m samples (b = min(batch_size, m); f is clamped at m/b for c >= m).

    Examples
    --------
    >>> soft_count_table(3, 10.0, 1)      # b = 1: f(c) = c, the plain count of Eq. 3
    array([0., 1., 2., 3., 4.])
    """
    m = max(float(samples_per_worker), 1.0)
    b = float(min(batch_size, m))
    c = np.arange(max_count + 2, dtype=np.float64)
    base = np.clip(1.0 - c / m, 0.0, 1.0)
    return (1.0 - base**b) * (m / b)


def default_weights(num_workers: int, num_samples: int, num_used_embeddings: int) -> tuple[float, float]:
    """The paper's alpha = 100 N / |samples| and beta = 100 N / |embeddings| (used ones)."""
    return 100.0 * num_workers / max(num_samples, 1), 100.0 * num_workers / max(num_used_embeddings, 1)


def imbalance(load: np.ndarray) -> float:
    """max / mean of a load vector (1.0 when empty or all zero)."""
    load = np.asarray(load, dtype=np.float64)
    mean = load.mean() if load.size else 0.0
    return float(load.max() / mean) if mean > 0 else 1.0


def summarize(state, traffic: tuple) -> dict:
    """The objective J (module docstring) and the round metrics of a level's ``state`` (its ``served``,
    ``sample_load``, ``primary_load``, ``alpha``, ``beta``, ``gamma``, ``num_workers``) and its current
    ``traffic`` totals (weighted, reads, remote, unique); shared by the flat and coarse levels."""
    weighted, reads, remote, unique = traffic
    s_dev = state.sample_load - state.sample_load.mean()
    p_dev = state.primary_load - state.primary_load.mean()
    d_mean = float(state.served.mean())
    traffic_pen = ((state.gamma / (2.0 * d_mean)) * float(np.sum((state.served - d_mean) ** 2))
                   if d_mean > 0 else 0.0)
    obj = (float(weighted) + state.alpha / 2.0 * float(s_dev @ s_dev) + state.beta / 2.0 * float(p_dev @ p_dev)
           + traffic_pen)
    return {
        "objective": obj,
        "comm_weighted": float(weighted),
        "expected_remote_reads": float(reads),
        "remote_accesses": int(remote),
        "epoch_unique_remote": int(unique),
        "sample_imbalance": imbalance(state.sample_load),
        "primary_imbalance": imbalance(state.primary_load),
        "traffic_imbalance": imbalance(state.served) if state.num_workers > 1 else 1.0,
    }


def start_objective(sw, prim, count, active, f, cost, n, alpha, beta, gamma) -> float:
    """J of a start placement (sample workers ``sw``, primaries ``prim``, their ``count``; ``active``: the used
    rows), the value hybrid's round log reports as round 0."""
    served = np.zeros(n, dtype=np.float64)
    received = np.zeros(n, dtype=np.float64)
    traffic = traffic_summary(prim, count, active, f, cost, served, received)
    view = type("StartView", (), {})()
    view.served, view.num_workers = served, n
    view.sample_load = np.bincount(sw, minlength=n).astype(np.int64)
    view.primary_load = np.bincount(prim[active], minlength=n).astype(np.int64)
    view.alpha, view.beta, view.gamma = alpha, beta, float(gamma)
    return summarize(view, traffic)["objective"]


#: values of ``Options.init``: the paper's seeded random start, or a registered partitioner's placement
INIT_METHODS = ("random", "bicut", "greedy-stream")


@dataclass(frozen=True)
class Options:
    """Options of ``hybrid``.

    Parameters
    ----------
    rounds
        Maximum number of 1D rounds T (Algorithm 1). Default 5.
    tol
        Stop early when a round lowers the objective by less than this
        fraction of its previous value. Default 4e-3 (was 1e-3: on criteo-1m
        rounds 4 and 5 of the multilevel default gained 0.21 % and 0.12 % for
        0.6 s each; docs/hybrid.md, "Speed and memory of the multilevel default").
    alpha, beta
        Weights of the sample and primary balance terms (Eq. 4). ``None``:
        the paper's defaults ``100 N / |samples|`` and ``100 N / |used embeddings|``.
    gamma
        Weight of the traffic-served balance term (Eq. 5), relative to the
        communication term. Default 0.01.
    max_imbalance
        Hard cap: no worker holds more than ``max_imbalance`` x the mean
        number of samples, nor of primaries. Default 1.05.
    replication_budget
        2D step: secondaries per worker as a fraction of the used embeddings.
        Default 0.01 (the paper's "top 1%"); 0 disables the 2D step.
    memory_per_worker
        2D step alternative: bytes of embedding rows (primaries + secondaries)
        a worker may hold (at least 1); overrides ``replication_budget`` when given.
    embedding_dim
        Row width used with ``memory_per_worker`` (float32 values). Default 16.
    batch_size
        Per-worker batch B of the soft count (use the report's). Default 512.
    threads
        Bound numba's thread pool during the call (None: numba's default).
        The result does not depend on it.
    init
        Start of the 1D sweeps. ``"random"`` (default): the multilevel start
        (``levels=2``) or the seeded random balanced placement of Algorithm 1
        line 1 (``levels=1``). ``"bicut"`` or ``"greedy-stream"``: run that
        registered partitioner first (same seed, same ``max_imbalance``) and
        start the sweeps from its samples and primaries (``levels`` is then
        not used; docs/hybrid.md, "init"). Flat topologies only.
    levels
        2 (default): the multilevel start (:mod:`gmp.partition._multilevel`,
        docs/hybrid.md "Multilevel"); 1: the paper's flat sweep from a random
        start.
    coarse_pairs
        Row pairs the multilevel start's co-occurrence graph is built from
        (a seeded row subset). None: 2 per sample, within [2M, 24M].
    coarse_vertices
        At most this many signal rows (vertices of that graph): the lower
        degree bound rises from 2 until they fit. Default 100,000.
    saturation
        Upper degree bound of the signal rows, in units of the soft count's
        per-worker batches ``m / b``. Default 4.
    coarse_restarts
        Candidate bands of the multilevel start on large graphs: upper bounds
        ``saturation`` x 1, 4, 16, ...; the projection with the lowest
        objective is refined. Default 2 (each candidate costs one METIS run).
    portfolio_edges
        Graphs with at most this many edges (sample-row entries) get the
        *portfolio* multilevel start instead: ``portfolio_bands`` bands x
        ``portfolio_seeds`` seeds, each candidate refined by up to
        ``portfolio_rounds`` rounds, and the lowest objective after refinement
        (less what the 2D step's budget will save) kept (docs/hybrid.md, "iPinYou"). Flat topologies and ``rounds > 0``
        only. Default
        2,000,000 (MovieLens-100K, Frappe, iPinYou; not criteo-1m's 26M); 0
        disables it.
    portfolio_bands, portfolio_seeds, portfolio_rounds
        The portfolio: bands ``saturation`` x 1, 4, ... (default 5), seeds per
        band (default 4) and the round limit of every candidate, which replaces
        ``rounds`` there (default 20; ``tol`` still stops early).
    carry_private
        The sample sweep moves a sample *with its private rows* (rows no
        other sample uses) as one move, scored by its exact change of J
        (``_hybrid_kernels.sweep_samples``). Default True, on flat topologies
        (a hierarchical one keeps the single-vertex sweep). False: Algorithm
        1's single-vertex sweep, where those rows pin their sample (each would
        turn remote until the embedding sweep), the behaviour before; criteo-1m
        ``--locality 1.0``, 1D: 3,956,788 -> 3,946,380 batch reads
        (docs/hybrid.md, "Private rows").
    rebalance_clusters
        Multilevel start, flat topologies: when a worker's projected samples
        exceed the cap, move label-propagation clusters of the signal graph
        off it (:func:`._multilevel.rebalance_clusters`) and keep the result
        when its projected J is lower. Default False: it fixes the
        seed-sensitive community split of ``--locality 1.0`` (seeds 1-3) but
        costs up to a second per candidate and gains nothing on the other
        datasets (docs/hybrid.md, "Private rows").
    flat_beside_samples
        Multilevel start on a flat topology, graphs of at least this many
        samples (no portfolio): the flat sweep (random start, Algorithm 1) runs
        too, and the refined placement with the lower objective *less what the
        2D step's budget will save* (:func:`replication_savings`) is kept. On
        the entity preset at 10M samples and more the flat placement gains so
        much more from the 2D step that it ends ahead (10M: 7.03M against
        7.97M batch reads) although its 1D objective is higher; at 1M the
        multilevel one wins by far on every preset, so the check is skipped
        there (docs/hybrid.md, "Multilevel against the flat sweep after the
        2D step"). Default 5,000,000; 0 disables it.
    """

    rounds: int = 5
    tol: float = 4e-3
    alpha: float | None = None
    beta: float | None = None
    gamma: float = 0.01
    max_imbalance: float = 1.05
    replication_budget: float = 0.01
    memory_per_worker: int | None = None
    embedding_dim: int = 16
    batch_size: int = 512
    threads: int | None = None
    init: str = "random"
    levels: int = 2
    coarse_pairs: int | None = None
    coarse_vertices: int = 100_000
    saturation: float = 4.0
    coarse_restarts: int = 2
    portfolio_edges: int = 2_000_000
    portfolio_bands: int = 5
    portfolio_seeds: int = 4
    portfolio_rounds: int = 20
    carry_private: bool = True
    rebalance_clusters: bool = False
    flat_beside_samples: int = 5_000_000

    def __post_init__(self) -> None:
        if not is_int(self.rounds) or self.rounds < 0:
            raise PartitionError(f"hybrid: rounds must be an integer >= 0, got {self.rounds!r}.")
        for name in ("tol", "gamma"):
            v = getattr(self, name)
            if not is_real(v) or not math.isfinite(v) or v < 0:
                raise PartitionError(f"hybrid: {name} must be a finite number >= 0, got {v!r}.")
        for name in ("alpha", "beta"):
            v = getattr(self, name)
            if v is not None and (not is_real(v) or not math.isfinite(v) or v < 0):
                raise PartitionError(f"hybrid: {name} must be a finite number >= 0 (or omitted for the default), got {v!r}.")
        check_max_imbalance(self.max_imbalance)
        rb = self.replication_budget
        if not is_real(rb) or not (0.0 <= rb <= 1.0):
            raise PartitionError(f"hybrid: replication_budget must be a fraction in [0, 1], got {rb!r}.")
        mem = self.memory_per_worker  # the manifest's plan takes only a positive budget
        # below 2^63: the budgets are int64 rows (a larger value overflowed there: 99999999999999999999999GiB)
        if mem is not None and (not is_int(mem) or not 1 <= mem < 2**63):
            raise PartitionError(f"hybrid: memory_per_worker must be a number of bytes >= 1 and below 2^63 (or "
                                 f"omitted for replication_budget), got {mem!r}; replication_budget=0 disables the "
                                 f"2D step.")
        _check_count(self, "embedding_dim")
        _check_count(self, "batch_size")
        _check_count(self, "threads", " (or omitted)", optional=True)
        if self.threads is not None:  # the kernels are single-threaded: the option changes nothing
            warnings.warn("hybrid: the 'threads' option is deprecated and does nothing (the sweeps are "
                          "sequential); drop it. It will be removed in a later version.", FutureWarning,
                          stacklevel=3)
        if self.levels not in (1, 2) or isinstance(self.levels, bool):
            raise PartitionError(f"hybrid: levels must be 1 (the paper's flat sweep from a random start) or 2 "
                                 f"(the multilevel start, docs/hybrid.md), got {self.levels!r}.")
        _check_count(self, "coarse_pairs", " (or omitted for the default)", optional=True, word="a positive integer")
        _check_count(self, "coarse_vertices", word="a positive integer")
        _check_count(self, "coarse_restarts")
        _check_count(self, "portfolio_edges", " (0 disables the portfolio)", minimum=0)
        _check_count(self, "flat_beside_samples", " (0: never)", minimum=0)
        for name in ("portfolio_bands", "portfolio_seeds", "portfolio_rounds"):
            _check_count(self, name)
        if (not is_real(self.saturation) or not math.isfinite(self.saturation)
                or self.saturation <= 0):
            raise PartitionError(f"hybrid: saturation must be a finite number > 0, got {self.saturation!r}.")
        for name in ("carry_private", "rebalance_clusters"):
            if not isinstance(getattr(self, name), bool):
                raise PartitionError(f"hybrid: {name} must be true or false, got {getattr(self, name)!r}.")
        if self.init not in INIT_METHODS:
            raise PartitionError(f"hybrid: init must be one of {', '.join(repr(m) for m in INIT_METHODS)}, "
                                 f"got {self.init!r}.")


def _check_count(options: Options, name: str, note: str = "", *, minimum: int = 1, optional: bool = False,
                 word: str | None = None) -> None:
    """Refuse an option that is not an integer >= ``minimum`` (None allowed when ``optional``)."""
    v = getattr(options, name)
    if optional and v is None:
        return
    if not is_int(v) or v < minimum:
        raise PartitionError(f"hybrid: {name} must be {word or f'an integer >= {minimum}'}{note}, got {v!r}.")


def replication_budgets(num_workers: int, num_used: int, primary_load: np.ndarray, options: Options, *,
                        warn: bool = False) -> np.ndarray:
    """Secondaries allowed per worker (int64 [N]).

    ``replication_budget * num_used`` (floored) each, or with
    ``memory_per_worker`` the rows that fit beside the worker's primaries:
    ``memory_per_worker // (embedding_dim * 4) - primaries``, at least 0.
    ``warn``: log when a worker's primaries alone exceed the memory; only the
    final 2D step asks, not the scoring of every round and start.
    """
    if options.memory_per_worker is not None:
        rows = options.memory_per_worker // (options.embedding_dim * VALUE_BYTES)
        budget = np.maximum(rows - np.asarray(primary_load, dtype=np.int64), 0)
        if warn and np.any(rows < primary_load):
            log.warning("hybrid: memory_per_worker=%d B holds %d rows, fewer than some worker's %d primaries; "
                        "no secondaries there.", options.memory_per_worker, rows, int(np.max(primary_load)))
        return budget.astype(np.int64)
    return np.full(num_workers, int(math.floor(options.replication_budget * num_used + 1e-9)), dtype=np.int64)
