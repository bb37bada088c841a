"""New data on an existing placement: place it, then re-partition incrementally under a migration budget.

CTR data arrives every day. A placement (:class:`~gmp.placement.Placement`)
is made for one dataset; the next day's dataset has new samples, some new
ids and drifting popularity. Two functions carry the old placement over
without starting from scratch. Both optimise HET-GMP's objective (SIGMOD'22,
section 5.2; :mod:`gmp.partition.hybrid` documents it):

    J = sum_x sum_{w not holding x} f(count[x, w]) * C[p(x), w]     (Eq. 3, soft count)
      + alpha/2 * sum_i (samples_i - samples/N)^2                   (Eq. 4, compute)
      + beta/2  * sum_i (primaries_i - primaries/N)^2               (Eq. 4, memory)

with the same hard caps (``sample_cap``: no worker above ``max_imbalance`` x
the mean). The traffic-balance term (Eq. 5, gamma) is left out: it is a
correction of the full sweeps, not needed to decide single moves.

**Ids.** Ids must be stable across datasets (``gmp data import --extend``
appends the new ids of each field after the previous vocabulary): ids below
the old placement's ``num_embeddings`` are the old rows, ids at or above it
are *new*. The new dataset may not have fewer ids than the old placement.

**Untrained old ids** (``trained``: the old manifest's history, :class:`gmp.manifest.RowHistory`).
On a fixed vocabulary (hashed fields, or days cut from one dataset) most ids the new data reads
may be ids no earlier data read: they sit wherever ``place_unused_embeddings`` put them, and
were never trained, so they still hold their initial values. Given ``trained`` (bool over the
old ids), an old id it leaves unmarked, that the new data reads and that has no secondary in
``old``, is placed like a new id (:func:`created_rows`; free: the trainer creates it at its
initial value, ``gmp.train.migrate``). Without ``trained`` every old id counts as trained.

:func:`place_new_data` — one streaming pass, nothing moves
----------------------------------------------------------
The old primaries and secondaries stay where they are. The new samples are
streamed once (seeded random order, or dataset order) and each goes to the
worker, below the sample cap, that minimises the *marginal* Eq. 3 + Eq. 4
cost against the rows as they are::

    sum_x [x not local to w] * C[p(x), w] * df(count[x, w])  +  alpha * load_w

where ``df(c) = f(c + 1) - f(c)`` is the soft count's marginal (a sample
reading a row that w's earlier samples already read costs little: the
batch de-duplicates it). A new id has no primary yet; it counts as if its
primary were the worker that holds most of its samples so far, which is
where it is then put: after the pass every used new id gets its primary on
the worker with most of its samples (:func:`~gmp.partition._common.choose_primaries`,
at most ``sample_cap(new used ids, N, max_imbalance)`` new ids per worker);
unused new ids go to the least-loaded workers. Cost: one pass over the
edges, ``O(edges * N)``, plus the ``count`` table (int32 [used ids, N]).
``Options(start="project")`` replaces the marginal cost by the majority of the
sample's unsaturated rows' primaries (:func:`saturated_degree`; a new id votes
for the worker with most of its samples so far): one lookup per edge, a worse
placement by itself but a better start for the sweep on MovieLens (the pass
herds: docs/incremental.md).

:func:`repartition_incremental` — sweeps that move at most ``max_moved_rows`` rows
--------------------------------------------------------------------------------
Starts from :func:`place_new_data`'s placement and runs ``rounds`` rounds of:

1. *Row moves* under the budget. Candidates are (a) for every used row, its
   best primary move ``p -> q`` with gain ``Eq.3(x on p) - Eq.3(x on q) -
   beta (load_q - load_p + 1)`` (rows' communication gains are independent
   of each other given the samples, so a greedy pick is exact for them), and
   (b) per worker w, secondary swaps: the rows w does not hold, by Eq. 6's
   numerator ``f(count[x, w]) * C[p(x), w]`` (descending), paired with w's
   current secondaries by the same score (ascending; free slots first, up to
   the worker's secondary capacity), gain = the difference. Every candidate
   moves at most one row, so "best gain per moved row" is the best gain:
   moves that cost no row (a new id, moving a row back to its old primary, a
   secondary the old placement already held there) go first, then the rest
   by gain. A move is applied only if its exact cost (recomputed when it is
   applied) still fits the budget. Every round may spend what is left of the
   budget (releasing it over the rounds, ``budget * r / rounds`` by round r, was
   measured: 1.250 -> 1.239 of the full re-partition's reads on the independent
   drift with 3 rounds, for 1.7x the time).
2. *Sample sweep*: samples move to their best worker (free: samples are
   data, not state). With ``sweep="changed"`` (the default on sparse graphs)
   a round sweeps only the samples that read a row changed in that round
   (the others' costs barely changed); ``sweep="all"`` sweeps every sample in
   round 1 (which also refines the one-pass placement: measured to buy
   nothing on the synthetic drifts, 1.448x -> 1.450x and 1.019x -> 1.018x of the
   full re-partition's reads, for 0.1-0.2 s of 1 s at 1M samples;
   docs/incremental.md). ``sweep="every"`` sweeps every sample in every round, and
   ``sweep_first`` adds a round 0 (row-free moves, a sweep of every sample)
   so the budgeted moves see settled samples: on dense data (MovieLens) the
   sample placement is most of the gap and these close it; on the synthetic
   drifts they change nothing (docs/incremental.md).
   With ``carry_private`` (default) a sample moves *with* the new ids only it
   reads (hybrid's ``carry_private``, restricted to rows whose move costs no
   budget: a new id is created, not moved), so those ids no longer pin it.

**The one-pass plan** (``Options(plan="onepass")``, :mod:`gmp.partition._incremental_onepass`): every
sample placed once, in dataset order, while its rows count it in one table row per id, then step 1's row
moves on those counts, without the sweeps: a fraction of the exact plan's time on large sparse days, for
a little more traffic (docs/incremental.md, "The one-pass plan").

:func:`place_and_repartition` returns both placements from one placement pass (what ``gmp partition
--from-manifest --max-moved-rows`` reports: the placed data and the refined placement).

**Target mode** (``Options(target="full")``, the exact plan's default; :func:`place_and_repartition`):
the sweep stops on a plateau of single-row moves that more budget does not pass. Target mode also runs
a full ``hybrid`` re-partition of the new data (the *target*, its workers renamed by
:func:`match_workers`) and keeps the candidate that reads least at the budget: the plan's moves made in
one chain through :func:`budget_ladder`'s budgets (every step scored), the longest prefix within the
budget of one ordered list of moves toward the target (with the target's samples fixed each row's batch
reads are its own, so each move's gain is exact), the target itself when it fits, and every move of
that list *re-fitted* when they fit (the target's samples swept onto those rows, then the exact plan's
moves within the same rows: 0.945x / 0.944x of the full re-partition's reads on the independent drift's
days 1 / 2, where the target reads 1.000x and all its ordered moves 0.984x / 0.977x). A larger budget's
candidates include a smaller one's: reads never rise with the budget, and a budget of every used row
reads at most the target. ``info["seconds_steps"]`` gives each step's seconds (the pass, the chain, the
target's re-partition, its ordered moves and its re-fit), ``info["sweep_steps"]`` the chain's steps.

Why no other candidate (issue 36, the independent-fields drift at 5%, where the kept candidate reads
1.21-1.39x the full re-partition): grouping the target's row moves by (old worker, target worker) and
taking whole groups, returning the least useful rows of a larger budget's chain down to the budget,
starting from the target's samples with the old rows kept, and remapping a 32-way re-partition onto the
old workers were each measured at or above the chain's reads (docs/incremental.md, "The independent
drift at 5%"): on that drift reads fall at a nearly constant rate per moved row whichever rows move, so
the budget, not the choice of rows, is what is missing. An oracle confirms it (``bench/incremental_oracle.py``):
the full re-partition's own row moves, ranked with hindsight (five ways, the best by their exact gain
with the target's samples) and the samples re-fitted, read 1.33-1.70x at 5% where the chain reads 1.21x;
``hybrid``'s sweeps started from the kept placement stop at 1.28x having moved 13% of the rows, so a
priced (Lagrangian) version of them was not built. Groups of co-used rows moved as one unit (session 20,
``bench/incremental_groups.py``) read 1.23-1.29x on day 1 and 1.45-1.49x on day 2, above the chain's
1.21x and 1.39x.

:func:`repartition_toward` — the budget's best moves toward a goal placement
----------------------------------------------------------------------------
A reference, not a fast path: given a goal (a full re-partition of the new data), it
moves the ``max_moved_rows`` old rows whose move to the goal's worker gains most under the
goal's samples, and fits the samples to the result (docs/incremental.md: what a budget can
reach on MovieLens).

**Moved rows** (:func:`moved_rows`) are counted against the *old* placement:
an old row whose primary changed counts 1 (its value and optimizer state
travel), and a secondary ``(x, w)`` counts 1 unless the old placement held
x on w (as primary or secondary). Dropping a secondary is free. New ids
never count (they are created, not moved). The final placement is checked
against the budget with that same function. Secondary capacity per worker
is the larger of its used-row secondaries now and ``replication_budget x
used rows`` (default: the old placement's own ``replication_budget`` option,
0 when it had none); rows no new sample uses keep their secondaries.

**Defaults by density** (:func:`resolve_options`): ``start``, ``sweep_first``, ``sweep`` and
``rounds`` left ``None`` are set per graph: the ``project`` start, ``sweep_first``, ``sweep="every"``
and 10 rounds when at least :data:`DENSE_SATURATED_ROWS` of the used rows are saturated (MovieLens),
else the pass and then, up to :data:`SMALL_EDGES` edges, 10 rounds sweeping every sample, beyond
one round and the changed-row sweep (docs/incremental.md, "Defaults by density").

Deterministic: the only randomness is the seeded stream order of the
placement pass; every kernel is sequential in a fixed order.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass, replace
from typing import Callable, NamedTuple, Sequence, TypeVar

import numpy as np

from .._memory import available_memory
from ..errors import PartitionError
from ..params import is_int, is_real
from ..graph import BipartiteGraph, transpose_csr
from ..kernels.threads import concurrent_launches_safe
from ..placement import Placement
from ..progress import stoppable, task
from ..topology import Topology
from . import _incremental_kernels as K
from . import _incremental_onepass as P
from ._common import (check_max_imbalance, choose_primaries, count_embedding_workers, place_unused_embeddings,
                      sample_cap, seeded_order)
from ._row_moves import move_rows, primary_pool, secondary_capacity
from ._objective import default_weights, soft_count_table

log = logging.getLogger(__name__)

#: bytes per embedding value (float32 rows)
VALUE_BYTES = 4

ORDERS = ("random", "dataset")
SWEEPS = ("all", "changed", "every")
STARTS = ("pass", "project")
PLANS = ("exact", "onepass")
#: ``Options.target``: ``"full"`` also moves toward the new data's full re-partition and keeps what reads
#: least (:func:`place_and_repartition`); ``"none"``: the plan's own moves only
TARGETS = ("full", "none")
#: the budgets (percent of the used rows) of the chain that target mode runs and ``--compare-full``'s curve
LADDER_PERCENT = (0.5, 1, 2, 5, 10, 20, 50, 100)
#: the options only the exact plan has (refused with plan="onepass")
EXACT_ONLY = ("start", "sweep", "rounds", "sweep_first")

#: rows read by more than this many per-worker batches (times m / b) are read everywhere anyway and do
#: not vote in the ``project`` start (hybrid's ``saturation``; :func:`gmp.partition._multilevel.signal_band`)
SATURATION = 4.0


def saturated_degree(num_samples: int, num_workers: int, batch_size: int) -> int:
    """The degree above which a row is saturated: ``ceil(SATURATION * m / b)``, m = samples per worker,
    b = ``min(batch_size, m)``, at least 4 (the upper end of :func:`gmp.partition._multilevel.signal_band`).

    Examples
    --------
    >>> saturated_degree(8000, 8, 100)
    40
    """
    m = max(num_samples / max(num_workers, 1), 1.0)
    return max(4, int(math.ceil(SATURATION * m / min(float(batch_size), m))))


@dataclass(frozen=True)
class Options:
    """Options of :func:`place_new_data` and :func:`repartition_incremental`.

    Parameters
    ----------
    max_imbalance
        Hard cap on samples per worker, and on the new ids' primaries per
        worker (max/mean). Default 1.05.
    batch_size
        Per-worker batch of the soft count (use the report's). Default 512.
    alpha, beta
        Weights of the sample and primary balance terms (Eq. 4); ``None``:
        HET-GMP's ``100 N / samples`` and ``100 N / used rows``. Defaults:
        alpha HET-GMP's, beta 0: the hard primary cap keeps the balance, and
        with HET-GMP's beta the primary loads the new data inherits (uneven
        over the rows it uses) priced most row moves out (MovieLens by time,
        5% budget: 56 of 91 rows spent, 10,026 reads; beta 0: 9,880; synthetic
        drift: 120,895 -> 117,594).
    order
        Order of the placement pass: ``"random"`` (seeded, default) or
        ``"dataset"`` (sequential reads).
    rounds
        Rounds of the incremental sweeps. Default 1 (more rounds save a
        little more traffic for proportionally more time: docs/incremental.md).
    replication_budget
        Secondary capacity per worker as a fraction of the used rows (the
        capacity is never below what the worker holds already). ``None``
        (default): the old placement's ``replication_budget`` option, 0
        when it has none.
    sweep
        ``"changed"`` (default on sparse graphs): every round visits only the
        samples that read a row changed in that round; ``"all"``: round 1's
        sample sweep visits every sample (refines the placement pass: the same
        traffic on the synthetic drifts, for more time);
        ``"every"``: every round visits every sample (a full sweep per round;
        MovieLens by time with ``start="project"``, ``sweep_first`` and 6 rounds:
        1.09x of the full re-partition's reads at 5%).
    start
        How the new samples are first placed. ``"pass"`` (default): the streaming pass on
        the marginal Eq. 3 + Eq. 4 cost. ``"project"``: each sample, in the same order, to
        the worker holding the primaries of most of its rows that are not saturated (degree
        at most :func:`saturated_degree`; a new id votes for the worker with most of its
        samples so far), within the sample cap: one table lookup per edge instead of a
        marginal row, and a less committed start for the sweep (MovieLens by time, 5% budget:
        1.61x -> 1.38x of the full re-partition's reads; the independent drift: 1.48x ->
        1.63x; docs/incremental.md).
    carry_private
        The sample sweep moves a sample together with the new ids no other sample reads (their primaries
        follow it; free: new ids never count as moved), scored by the exact change of the objective within
        the primary cap, as ``hybrid``'s ``carry_private``. Without it such an id pins its sample. Default
        True (independent drift, 5%: day 1 1.211x -> 1.198x of the full re-partition's reads;
        docs/incremental.md).
    plan
        ``"exact"`` (default): the streaming pass, the row moves and the sweeps below (``start``,
        ``sweep``, ``rounds``, ``sweep_first``, ``carry_private``, ``order`` are its options).
        ``"onepass"``: every sample placed once, in dataset order, while its rows count it, then the row
        moves on those counts; the samples are not swept after (:mod:`gmp.partition._incremental_onepass`),
        up to 57 workers, made for large sparse days. 5% budget, against a full ``hybrid``
        re-partition (docs/incremental.md, "The one-pass plan"): reads 1.061x on the 1M drift day,
        1.061x over 7 days of 1M samples with more ids per sample and 0.949x on the 6.5M Criteo-size day
        (exact plan: 1.053x, 1.039x, 0.941x) in 0.07-0.08x of its CPU time (exact plan: 0.25-0.33x).
    target
        ``"full"``: besides the plan's own moves, move toward the new data's full ``hybrid`` re-partition
        (its workers renamed to the old placement's, :func:`match_workers`) and keep, at the budget,
        the candidate that reads least: the plan's moves stepped through :func:`budget_ladder`'s budgets,
        the best prefix of one ordered list of row moves toward the target, the target itself when it
        fits the budget, and every move of that list re-fitted when they fit (:func:`place_and_repartition`).
        Costs one full re-partition more (and the re-fit's sweeps where its rows fit).
        ``"none"``: the plan's moves only, at the budget at once. ``None`` (default): ``"full"`` with the
        exact plan, ``"none"`` with ``plan="onepass"`` (which keeps its time target).
    sweep_first
        Run a round 0 before the budgeted rounds: only the moves that cost no row (new ids,
        secondaries the old placement held) and a sweep of every sample, so the rows move
        against the samples as they settle rather than as the start left them (one more
        sample sweep). MovieLens by time, 5%: with ``start="project"`` 1.375x -> 1.173x of the
        full re-partition's reads; no change with the pass start on the independent drift
        (docs/incremental.md). Default False.
    alongside
        Target mode: run the full re-partition on a thread of its own beside the sweep chain (the two do
        not depend on each other; the same placements either way). ``None`` (default): where the process
        may use two cores or more, numba's threading layer is not ``workqueue`` (:mod:`gmp.kernels.threads`)
        and the memory it adds fits (:func:`runs_alongside`). The call then takes about the longer of the
        two rather than their sum (a 1M-sample day on 2 cores: 4.4 s -> 3.2 s wall; CPU 4.9 -> 5.9 s, the
        two contending for the cores), and holds both parts' memory at once (that day's ``gmp partition
        --from-manifest``: peak RSS 0.89 -> 1.26 GB); ``False`` runs them one after the other.
    """

    max_imbalance: float = 1.05
    batch_size: int = 512
    alpha: float | None = None
    beta: float | None = 0.0
    order: str = "random"
    rounds: int | None = None
    replication_budget: float | None = None
    sweep: str | None = None
    start: str | None = None
    sweep_first: bool | None = None
    carry_private: bool = True
    plan: str = "exact"
    target: str | None = None
    alongside: bool | None = None

    def __post_init__(self) -> None:
        check_max_imbalance(self.max_imbalance)
        if not is_int(self.batch_size) or self.batch_size < 1:
            raise PartitionError(f"incremental: batch_size must be an integer >= 1, got {self.batch_size!r}.")
        for name in ("alpha", "beta"):
            v = getattr(self, name)
            if v is not None and (not is_real(v) or not math.isfinite(v) or v < 0):
                raise PartitionError(f"incremental: {name} must be a finite number >= 0 (or omitted), got {v!r}.")
        if self.order not in ORDERS:
            raise PartitionError(f"incremental: order must be one of {', '.join(ORDERS)}, got {self.order!r}.")
        for name in ("sweep_first", "carry_private", "alongside"):
            v = getattr(self, name)
            if not isinstance(v, bool) and not (name != "carry_private" and v is None):
                raise PartitionError(f"incremental: {name} must be true or false, got {v!r}.")
        if self.start is not None and self.start not in STARTS:
            raise PartitionError(f"incremental: start must be one of {', '.join(STARTS)}, got {self.start!r}.")
        if self.sweep is not None and self.sweep not in SWEEPS:
            raise PartitionError(f"incremental: sweep must be one of {', '.join(SWEEPS)}, got {self.sweep!r}.")
        if self.rounds is not None and (not is_int(self.rounds) or self.rounds < 0):
            raise PartitionError(f"incremental: rounds must be an integer >= 0, got {self.rounds!r}.")
        if self.plan not in PLANS:
            raise PartitionError(f"incremental: plan must be one of {', '.join(PLANS)}, got {self.plan!r}.")
        if self.target is not None and self.target not in TARGETS:
            raise PartitionError(f"incremental: target must be one of {', '.join(TARGETS)} (or omitted), got "
                                 f"{self.target!r}.")
        if self.plan == "onepass":
            given = [k for k in EXACT_ONLY if getattr(self, k) is not None]
            if given:
                raise PartitionError(f"incremental: {given[0]} is an option of the exact plan, not of plan='onepass'; "
                                     f"leave it out or use the exact plan.")
        rb = self.replication_budget
        if rb is not None and (not is_real(rb) or not 0.0 <= rb <= 1.0):
            raise PartitionError(f"incremental: replication_budget must be a fraction in [0, 1] (or omitted), "
                                 f"got {rb!r}.")


#: a graph is *dense* when at least this fraction of its used rows is saturated (:func:`saturated_degree`):
#: MovieLens-100K by time 0.43, the synthetic entity drift 0.08, the independent drift 0.02
DENSE_SATURATED_ROWS = 0.2
#: the settings ``None`` stands for, by density and size (docs/incremental.md, "Defaults by density")
SPARSE_SETTINGS = {"start": "pass", "sweep_first": False, "sweep": "changed", "rounds": 1}
SMALL_SETTINGS = {"start": "pass", "sweep_first": False, "sweep": "every", "rounds": 10}
DENSE_SETTINGS = {"start": "project", "sweep_first": True, "sweep": "every", "rounds": 10}
#: a sparse graph of at most this many edges takes SMALL_SETTINGS: where ``hybrid`` runs its portfolio
#: start (the same bound), ten sweeps of every sample cost little beside it (the synthetic 50k-sample
#: days: 0.01x -> 0.03-0.04x of its CPU) and the streaming pass alone can be far off (iPinYou, train
#: then test, 4 workers, 5%: 1.63x -> 0.84x of the full re-partition's reads)
SMALL_EDGES = 2_000_000


def saturated_row_fraction(graph: BipartiteGraph, num_workers: int, batch_size: int, *,
                           degree: np.ndarray | None = None) -> float:
    """The fraction of the used rows whose degree is above :func:`saturated_degree` (0.0 without edges).

    ``degree``: the rows' degrees when the caller has them (zeros of unused rows are ignored; the
    incremental functions pass their compact ids' degrees), else counted from the graph.
    """
    if degree is None:
        degree = np.bincount(np.asarray(graph.sample_indices), minlength=graph.num_embeddings)
    num_used = int(np.count_nonzero(degree))
    if num_used == 0:
        return 0.0
    limit = saturated_degree(graph.num_samples, num_workers, batch_size)
    return float(np.count_nonzero(degree > limit)) / num_used


def resolve_options(options: Options, graph: BipartiteGraph, num_workers: int, *,
                    degree: np.ndarray | None = None) -> tuple[Options, dict]:
    """``options`` with every ``None`` of ``start``, ``sweep_first``, ``sweep``, ``rounds`` set by the
    graph's density, and a record of the choice (``info["defaults"]``); ``degree`` as in
    :func:`saturated_row_fraction`.

    Dense (:func:`saturated_row_fraction` >= :data:`DENSE_SATURATED_ROWS`): most rows are read by every
    worker's batches whatever happens, so the placement of the samples is most of the gap to a full
    re-partition, and :data:`DENSE_SETTINGS` (the ``project`` start, ``sweep_first``, a sweep of every
    sample in each of 10 rounds) closes it (MovieLens by time, 5%: 1.70x -> 1.09x). Otherwise, on a
    graph of at most :data:`SMALL_EDGES` edges, :data:`SMALL_SETTINGS` (the streaming pass, then a sweep
    of every sample in each of 10 rounds); on a larger one :data:`SPARSE_SETTINGS` (one round sweeping
    the samples of the changed rows: the sweeps cost what the pass does there).
    """
    unset = [k for k in SPARSE_SETTINGS if getattr(options, k) is None]
    if not unset:
        return options, {"saturated_row_fraction": None, "dense": None, "small": None, "set": []}
    fraction = saturated_row_fraction(graph, num_workers, options.batch_size, degree=degree)
    dense = fraction >= DENSE_SATURATED_ROWS
    small = graph.num_edges <= SMALL_EDGES
    chosen = DENSE_SETTINGS if dense else SMALL_SETTINGS if small else SPARSE_SETTINGS
    resolved = replace(options, **{k: chosen[k] for k in unset})
    return resolved, {"saturated_row_fraction": round(fraction, 4), "dense": bool(dense), "small": small,
                      "set": unset}


class MovedRows(NamedTuple):
    """Rows a placement change transfers (see the module docstring)."""

    primaries: int
    secondaries: int

    @property
    def total(self) -> int:
        return self.primaries + self.secondaries

    def bytes(self, embedding_dim: int) -> int:
        """Bytes of float32 row values moved (optimizer state, when it travels too, multiplies this)."""
        return self.total * int(embedding_dim) * VALUE_BYTES


def moved_rows(old: Placement, new: Placement, *, rows: np.ndarray | None = None,
               created: np.ndarray | None = None) -> MovedRows:
    """Rows that move from ``old`` to ``new`` (ids below ``old.num_embeddings`` only).

    ``primaries``: old ids whose primary worker changed. ``secondaries``:
    secondaries ``(x, w)`` of ``new`` on a worker that held no copy of x
    (primary or secondary) in ``old``. ``rows`` (ids) restricts the count to
    those ids; ``created`` (ids, :func:`created_rows`: untrained rows the new
    placement creates afresh) are left out.

    Examples
    --------
    >>> old = Placement.edge_cut(2, [0], [0, 1])
    >>> new = Placement.edge_cut(2, [0], [1, 1, 0]).with_secondaries([0, 1, 1, 1], [0])
    >>> moved_rows(old, new)   # row 0 moved 0 -> 1; its secondary on 0 was already there; id 2 is new
    MovedRows(primaries=1, secondaries=0)
    """
    m = old.num_embeddings
    if new.num_embeddings < m:
        raise PartitionError(f"moved_rows: the new placement has {new.num_embeddings} rows, fewer than the old "
                             f"placement's {m}; ids must be stable (append new ids).")
    keep = np.ones(m, dtype=bool)
    if rows is not None:
        keep[:] = False
        r = np.asarray(rows, dtype=np.int64)
        keep[r[r < m]] = True
    if created is not None:
        keep[np.asarray(created, dtype=np.int64)] = False
    op = np.asarray(old.embedding_primary)
    npr = np.asarray(new.embedding_primary)[:m]
    primaries = int(np.count_nonzero((op != npr) & keep))
    secondaries = K.new_secondaries(np.asarray(new.secondary_indptr), np.asarray(new.secondary_workers), op,
                                    np.asarray(old.secondary_indptr), np.asarray(old.secondary_workers), keep)
    return MovedRows(primaries, int(secondaries))


def match_workers(old: Placement, new: Placement, *, topology: Topology | None = None,
                  rows: np.ndarray | None = None) -> Placement:
    """``new`` with its workers renamed to keep as many of ``old``'s primaries in place as possible.

    A full re-partition numbers its workers arbitrarily; before counting the
    rows it moves (:func:`moved_rows`), rename them by a maximum matching of
    the (old worker, new worker) primary overlap over the old ids (``rows``: over
    those ids only; Hungarian algorithm, :func:`scipy.optimize.linear_sum_assignment`).
    A renaming must change no cost: any one on a homogeneous topology (``topology``
    None or uniform); on a machines x GPUs topology (``topology.machine_of``, one
    intra-machine and one inter-machine cost, as many GPUs per machine) machines are
    matched to machines and the GPUs within them (the best GPU matching of every
    machine pair, then the best machine matching: exact). Another topology: ``new``
    is returned as it is (:func:`renames_workers` says which).
    """
    from scipy.optimize import linear_sum_assignment

    n = old.num_workers
    m = old.num_embeddings
    ids = np.arange(m) if rows is None else np.asarray(rows, dtype=np.int64)
    ids = ids[ids < m]
    overlap = np.zeros((n, n), dtype=np.int64)
    np.add.at(overlap, (np.asarray(old.embedding_primary)[ids], np.asarray(new.embedding_primary)[ids]), 1)
    if topology is None or topology.is_uniform:
        old_w, new_w = linear_sum_assignment(-overlap)
        rename = np.empty(n, dtype=np.int32)
        rename[new_w] = old_w
    elif renames_workers(topology):
        rename = _match_machines(overlap, np.asarray(topology.machine_of))
    else:
        return new
    return Placement(num_workers=n, sample_worker=rename[np.asarray(new.sample_worker)],
                     embedding_primary=rename[np.asarray(new.embedding_primary)],
                     secondary_indptr=np.asarray(new.secondary_indptr),
                     secondary_workers=rename[np.asarray(new.secondary_workers)], method=new.method,
                     options=new.options, seed=new.seed, info=new.info)


def renames_workers(topology: Topology) -> bool:
    """Whether :func:`match_workers` can rename ``topology``'s workers without changing a cost: uniform
    off-diagonal costs, or machines of equally many workers with one intra- and one inter-machine cost."""
    if topology.is_uniform:
        return True
    machine = np.asarray(topology.machine_of)
    sizes = np.bincount(machine)
    if sizes.size < 2 or np.any(sizes != sizes[0]):
        return False
    cost = topology.cost
    same = machine[:, None] == machine[None, :]
    off = ~np.eye(cost.shape[0], dtype=bool)
    intra, inter = cost[same & off], cost[~same]
    return bool((intra.size == 0 or np.all(intra == intra[0])) and np.all(inter == inter[0]))


def _match_machines(overlap: np.ndarray, machine: np.ndarray) -> np.ndarray:
    """rename[new worker] = old worker: machines to machines, GPUs to GPUs within them, most overlap."""
    from scipy.optimize import linear_sum_assignment

    k = int(machine.max()) + 1
    members = [np.flatnonzero(machine == c) for c in range(k)]
    value = np.zeros((k, k), dtype=np.int64)
    inner = {}
    for a in range(k):  # old machine a, new machine b
        for b in range(k):
            block = overlap[np.ix_(members[a], members[b])]
            r, c = linear_sum_assignment(-block)
            value[a, b] = int(block[r, c].sum())
            inner[a, b] = (members[a][r], members[b][c])
    rename = np.empty(machine.size, dtype=np.int32)
    for a, b in zip(*linear_sum_assignment(-value)):
        old_w, new_w = inner[a, b]
        rename[new_w] = old_w
    return rename


def migration_budget(value: int | str, num_rows: int, *, name: str = "max_moved_rows") -> int:
    """A budget of moved rows: an integer, or a percentage of ``num_rows`` (``"5%"``, floored).
    ``name``: how the errors call the value (``"--max-moved-rows"`` on the command line).

    Examples
    --------
    >>> migration_budget("5%", 1000), migration_budget("250", 1000), migration_budget(7, 1000)
    (50, 250, 7)
    """
    text = str(value).strip()
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*%", text)
    if m:
        pct = float(m.group(1))
        if pct > 100:
            raise PartitionError(f"{name} {text!r} is above 100%; give a percentage in [0, 100] or a number of rows.")
        return int(math.floor(pct / 100.0 * int(num_rows) + 1e-9))
    if re.fullmatch(r"[0-9]+", text):
        return _check_budget(int(text), name)
    raise PartitionError(f"{name} must be a number of rows (e.g. 5000) or a percentage (e.g. 5%), got {text!r}.")


# --------------------------------------------------------------------------- shared set-up
class _Compact(NamedTuple):
    used_ids: np.ndarray  # int32 [U] ascending
    bits: np.ndarray  # int64 [ceil(M / 64)]: bit e set for the used ids (compact id = rank of e)
    cindices: np.ndarray  # int32 [edges], the edges in compact ids
    degree: np.ndarray  # int32 [U], edges per compact id


def _compact(graph: BipartiteGraph) -> _Compact:
    """The used ids numbered densely in id order, through a bitmap and its rank (:func:`K.rank_ids`): at
    Criteo-Kaggle's 33.8M ids an int32 id table (135 MB) made both passes over the edges cache misses
    (6.5M-sample day: 3.8 s of the call)."""
    indices = np.asarray(graph.sample_indices)
    bits = np.zeros((graph.num_embeddings + 63) // 64, dtype=np.int64)
    K.mark_ids(indices, bits)
    rank = np.empty(bits.size, dtype=np.int64)
    used_ids = K.rank_ids(bits, rank)
    cindices = np.empty(graph.num_edges, dtype=np.int32)
    degree = np.zeros(used_ids.size, dtype=np.int32)
    K.remap(indices, bits, rank, cindices, degree)
    return _Compact(used_ids, bits, cindices, degree)


def _check_inputs(graph: BipartiteGraph, old: Placement, topology: Topology) -> None:
    n = topology.num_workers
    if old.num_workers != n:
        raise PartitionError(f"the old placement has {old.num_workers} workers, the topology {n}; use the old "
                             f"manifest's topology.")
    if n > 64:
        raise PartitionError(f"incremental placement supports up to 64 workers, got {n}.")
    if graph.num_embeddings < old.num_embeddings:
        raise PartitionError(
            f"the new dataset has {graph.num_embeddings} embedding ids, fewer than the old placement's "
            f"{old.num_embeddings}; ids must be stable across datasets: import the new data with "
            f"'gmp data import ... --extend OLD_DATASET'.")


class _Split(NamedTuple):
    """A sample's entries in two CSRs (:func:`_split_edges`): the ones the sample kernels sum and the sealed."""

    indptr: np.ndarray  # int64 [samples + 1]
    cindices: np.ndarray  # int32 [open edges + 1]: the edges of the rows not sealed, carried rows last
    num_private: np.ndarray  # int32 [samples]: the carried rows at the end of each sample's open entries
    sindptr: np.ndarray  # int64 [samples + 1]
    scindices: np.ndarray  # int32 [sealed edges + 1]: the edges of the sealed rows
    sealed: np.ndarray  # bool [U]: local to every worker and saturated when the split was made


def _all_local(prim: np.ndarray, sec: np.ndarray, n: int) -> np.ndarray:
    """bool [U]: rows held (primary or secondary) by every one of the ``n`` workers."""
    every = np.array((1 << n) - 1, dtype=np.uint64).view(np.int64)  # all n bits; -1 at n = 64 (int64 masks)
    held = sec | np.left_shift(np.int64(1), np.maximum(prim, 0).astype(np.int64))
    return (prim >= 0) & (held == every)


def _split_edges(comp: _Compact, indptr: np.ndarray, prim: np.ndarray, sec: np.ndarray, is_old: np.ndarray,
                 n: int, saturated: int, carry: bool) -> _Split:
    """The edges split by their row: *sealed* rows (local to every worker and saturated: degree above
    ``saturated``, :func:`saturated_degree`) and the others, each sample's carried rows last among them.

    A row every worker holds costs nothing wherever its samples go (Eq. 3 counts remote reads only),
    so the placement pass and the sweep sum only the other edges; the counts of every edge are still
    kept (the row-move candidates read them). Exact: the same placements as summing every edge. On
    the 1M-sample entity days the rows the 2D step replicated everywhere carry 66% of the edges
    (1,656 rows), the saturated ones among them 65% (1,353 rows). Only saturated rows are sealed
    because a row-move round may evict a secondary of a cooling row (31 rows of degree 479-658 there),
    and the sweep after it must then sum that row again: it does so from the sealed entries of the
    samples that read it (:func:`~gmp.partition._incremental_kernels.mark_samples`; 11 saturated rows
    of degree 1.9k-10k lose a copy there, swapped for rows of nearly the same score). The two CSRs
    hold the edges once: the caller drops the compact CSR they were split from.

    Carried rows (``carry``: ``Options.carry_private``): the new ids no other sample uses; the sweep
    moves them with their sample (:func:`~gmp.partition._incremental_kernels.sweep_samples`)."""
    sealed = _all_local(prim, sec, n) & (comp.degree > saturated)
    flags = sealed.astype(np.uint8)
    flags[(comp.degree == 1) & ~is_old & carry] = 2  # carried rows (never sealed: new ids)
    num_sealed = int(comp.degree[sealed].sum())
    oindptr = np.empty(indptr.size, dtype=np.int64)
    ocindices = np.empty(comp.cindices.size - num_sealed + 1, dtype=np.int32)
    sindptr = np.empty(indptr.size, dtype=np.int64)
    scindices = np.empty(num_sealed + 1, dtype=np.int32)
    num_private = np.empty(indptr.size - 1, dtype=np.int32)
    K.split_edges(indptr, comp.cindices, flags, oindptr, ocindices, num_private, sindptr, scindices)
    return _Split(oindptr, ocindices, num_private, sindptr, scindices, sealed)


def _old_rows(used: np.ndarray, old: Placement, trained: np.ndarray | None) -> np.ndarray:
    """bool [U]: the used ids that are old rows: below ``old.num_embeddings`` and not created afresh
    (:func:`created_rows`)."""
    is_old = used < old.num_embeddings
    if trained is not None:
        trained = np.asarray(trained, dtype=bool)
        if trained.shape != (old.num_embeddings,):
            raise PartitionError(f"trained must mark the old placement's {old.num_embeddings} ids, got shape "
                                 f"{trained.shape}; pass the old manifest's history.")
        ids = used[is_old]
        oip = np.asarray(old.secondary_indptr)
        is_old[np.flatnonzero(is_old)] = trained[ids] | (oip[ids + 1] > oip[ids])
    return is_old


def created_rows(used_ids: np.ndarray, old: Placement, trained: np.ndarray | None) -> np.ndarray:
    """int64 ids: the old ids the new data reads (``used_ids``, ascending) that ``trained`` (bool over
    ``old``'s ids; None: every id) leaves untrained and that have no secondary in ``old``.

    They hold their initial values wherever they are, so the new placement puts them like new ids
    and they never count as moved (:func:`moved_rows`' ``created``); the manifest records them
    (``history.created_rows``) so that the trainer creates them instead of sending them.

    Examples
    --------
    >>> old = Placement.edge_cut(2, [0], [0, 1, 1])
    >>> created_rows(np.array([0, 2, 3]), old, np.array([True, False, False])).tolist()   # 3 is new
    [2]
    """
    used = np.asarray(used_ids, dtype=np.int64)
    return used[(used < old.num_embeddings) & ~_old_rows(used, old, trained)]


def _secondary_masks(placement: Placement, ids: np.ndarray) -> np.ndarray:
    out = np.zeros(ids.size, dtype=np.int64)
    K.masks_from_csr(np.asarray(placement.secondary_indptr), np.asarray(placement.secondary_workers),
                     np.asarray(ids, dtype=np.int64), out)
    return out


def _soft_count(graph: BipartiteGraph, n: int, cap: int, options: Options) -> tuple[np.ndarray, np.ndarray]:
    """HET-GMP's soft count f (Eq. 3 with batch de-duplication) and its marginal df."""
    f = soft_count_table(cap, graph.num_samples / n, options.batch_size)
    return f, np.diff(f)


class _State(NamedTuple):
    """What the placement pass leaves warm for the refinement (over the compact ids)."""

    comp: _Compact
    is_old: np.ndarray  # bool [U]: old rows (trained ones only, :func:`_old_rows`)
    split: _Split | None  # the pass's split of the edges (None after the ``project`` start)
    prim: np.ndarray  # int32 [U]
    sec: np.ndarray  # int64 [U]
    count: np.ndarray  # int32 [U, N]
    options: Options  # resolved (:func:`resolve_options`)
    defaults: dict  # the record of that resolution


# --------------------------------------------------------------------------- step 1
def place_new_data(graph: BipartiteGraph, old: Placement, topology: Topology, *, seed: int = 0,
                   options: Options | None = None, trained: np.ndarray | None = None) -> Placement:
    """Place a new dataset's samples (and its new ids) on a fixed placement, in one streaming pass.

    Parameters
    ----------
    graph
        The new dataset's graph; ids below ``old.num_embeddings`` are the old rows.
    old
        The placement made for the previous data; its primaries and
        secondaries are kept as they are.
    topology
        The old placement's topology (same number of workers).
    seed
        Seeds the stream order (``options.order == "random"``).
    options
        :class:`Options`.
    trained
        bool [old.num_embeddings]: the old ids earlier data read (the old manifest's
        ``history.trained``); the others the new data reads are placed like new ids
        (:func:`created_rows`). None: every old id counts as trained.

    Returns
    -------
    Placement
        Over the new graph: every sample placed, old rows unchanged, new ids
        placed where their samples are; ``method = "place-new"``.
    """
    return _place_and_refine(graph, old, topology, None, seed, options or Options(), trained, placed=True)[0]


def _place(graph: BipartiteGraph, old: Placement, topology: Topology, *, seed: int,
           options: Options, trained: np.ndarray | None, comp: _Compact | None = None) -> tuple[Placement, _State]:
    """:func:`place_new_data` by the exact plan and the state it leaves (reused by :func:`repartition_incremental`).
    ``comp``: the graph's :func:`_compact`, where the caller made it (its edges are read, not changed)."""
    _check_inputs(graph, old, topology)
    t0 = time.perf_counter()
    n = topology.num_workers
    m_old, m = old.num_embeddings, graph.num_embeddings
    comp = comp if comp is not None else _compact(graph)
    options, defaults = resolve_options(options, graph, n, degree=comp.degree)
    used = comp.used_ids
    is_old = _old_rows(used, old, trained)
    prim, sec = old_holders(old, used, is_old)

    num_samples = graph.num_samples
    cap = sample_cap(num_samples, n, options.max_imbalance)
    f, df = _soft_count(graph, n, cap, options)
    alpha = options.alpha if options.alpha is not None else default_weights(n, num_samples, used.size)[0]
    rng = np.random.default_rng(seed)
    order = seeded_order(num_samples, rng) if options.order == "random" else np.arange(num_samples, dtype=np.int64)
    count = np.zeros((used.size, n), dtype=np.int32)
    cost = np.ascontiguousarray(topology.cost, dtype=np.float64)
    load = np.zeros(n, dtype=np.int64)
    sample_worker = np.empty(num_samples, dtype=np.int32)
    sample_indptr = np.ascontiguousarray(graph.sample_indptr)  # C layout: the pass prefetches by row
    split = None
    with task("Placing new samples on the fixed rows", total=num_samples) as advance:
        if options.start == "pass":
            split = _split_edges(comp, sample_indptr, prim, sec, is_old, n,
                                 saturated_degree(num_samples, n, options.batch_size), options.carry_private)
            comp = comp._replace(cindices=None)  # the split holds the edges now
            marg = np.empty((used.size, n), dtype=np.float64)
            K.fill_marginals(prim, sec, count, df, cost, marg)
            K.stream_samples(split.indptr, split.cindices, order, prim, sec, count, marg, df, cost, load,
                             np.int64(cap), float(alpha), sample_worker)
            del marg
            # the sealed rows' counts, in dataset order (in the pass's random order they cost as much as the pass)
            sealed = np.flatnonzero(split.sealed)
            rows = np.full(used.size, -1, dtype=np.int32)
            rows[sealed] = np.arange(sealed.size, dtype=np.int32)
            count[sealed] = count_embedding_workers(split.sindptr, split.scindices, sample_worker, rows, sealed.size,
                                                    n)
        else:  # "project": majority of the signal rows, then the counts of the result
            vote = comp.degree <= saturated_degree(num_samples, n, options.batch_size)
            K.stream_majority(sample_indptr, comp.cindices, order, prim, vote, count, load, np.int64(cap),
                              sample_worker)
            count[:] = 0
            K.count_samples(sample_indptr, comp.cindices, sample_worker, count)
        advance(num_samples)

    # new ids (and created old ids): primary where most of their samples are, at most new_cap per worker
    new_rows = np.flatnonzero(~is_old)
    new_cap = sample_cap(new_rows.size, n, options.max_imbalance)
    prim[new_rows] = choose_primaries(count[new_rows], cap=new_cap)
    primary = np.full(m, -1, dtype=np.int32)
    primary[:m_old] = old.embedding_primary
    primary[used] = prim
    place_unused_embeddings(primary, n)  # the new ids no sample uses (memory only)
    oip = np.asarray(old.secondary_indptr)  # the old secondaries, shared with ``old`` (not copied: M + 1 entries)
    indptr = oip if m == m_old else np.concatenate([oip, np.full(m - m_old, oip[-1], dtype=np.int64)])
    info = {
        "old_num_embeddings": int(m_old),
        "num_new_ids": int(m - m_old),
        "num_new_ids_used": int(np.count_nonzero(used[new_rows] >= m_old)),
        "num_created_rows": int(np.count_nonzero(used[new_rows] < m_old)),
        "num_used_embeddings": int(used.size),
        "sample_cap": int(cap),
        "new_id_cap": int(new_cap),
        "alpha": float(alpha),
        "defaults": defaults,
        "seconds": round(time.perf_counter() - t0, 4),
    }
    log.info("place-new: %d samples placed, %d new ids used (%d new in all), %.2f s", num_samples,
             new_rows.size, m - m_old, info["seconds"])
    placed = Placement(num_workers=n, sample_worker=sample_worker, embedding_primary=primary,
                       secondary_indptr=indptr, secondary_workers=np.asarray(old.secondary_workers, dtype=np.int32),
                       method="place-new", options=asdict(options), seed=seed, info=info)
    return placed, _State(comp, is_old, split, prim, sec, count, options, defaults)


def fit_samples_to_cap(graph: BipartiteGraph, placement: Placement, max_imbalance: float) -> int:
    """Move samples off workers above their cap (``sample_cap(samples, N, max_imbalance)``), each to the worker
    under the cap that holds most of its rows (primaries and secondaries), those that lose fewest local rows
    first; the rows stay. Returns how many samples moved; ``placement.sample_worker`` is changed in place (a
    placement within the cap is left as it is).

    For a placement made over more samples than it keeps: a ``--window`` re-partition caps the window's samples,
    and the new day's, which the manifest holds, could exceed their own cap (the adversarial pass of session 32:
    loads up to 1.09x the mean where ``max_imbalance`` said 1.05)."""
    sw = np.asarray(placement.sample_worker)
    n = placement.num_workers
    cap = sample_cap(sw.size, n, max_imbalance)
    if sw.size == 0 or np.bincount(sw, minlength=n).max() <= cap:
        return 0
    return int(K.fit_to_cap(np.asarray(graph.sample_indptr), np.asarray(graph.sample_indices), sw,
                            np.asarray(placement.embedding_primary), np.asarray(placement.secondary_indptr),
                            np.asarray(placement.secondary_workers), np.int64(n), np.int64(cap)))


# --------------------------------------------------------------------------- step 2
def repartition_incremental(graph: BipartiteGraph, old: Placement, topology: Topology, *, max_moved_rows: int,
                            seed: int = 0, options: Options | None = None,
                            start: Placement | None = None, trained: np.ndarray | None = None) -> Placement:
    """Refine the placement of new data, moving at most ``max_moved_rows`` rows of ``old``.

    Parameters
    ----------
    graph, old, topology, seed, options, trained
        As in :func:`place_new_data`.
    max_moved_rows
        The migration budget in rows (see :func:`moved_rows`;
        :func:`migration_budget` turns ``"5%"`` into rows).
    start
        :func:`place_new_data`'s result, when the caller has it already
        (else it is computed here), or any placement of the new graph: the
        rows it already moves against ``old`` count against the budget.

    Returns
    -------
    Placement
        ``method = "incremental"``; ``info`` holds the budget, the rows
        moved and a per-round log. ``moved_rows(old, result).total <=
        max_moved_rows`` always. Without ``start``, ``options.target`` applies:
        target mode (the exact plan's default) is :func:`place_and_repartition`'s
        second placement; with ``start``, the plan's moves only (``target="full"`` is refused).
    """
    if start is None:  # the exact pass's compact ids, counts and masks stay warm for the sweeps
        return _place_and_refine(graph, old, topology, _check_budget(max_moved_rows), seed, options or Options(),
                                 trained, placed=False)[1]
    budget = _check_budget(max_moved_rows)
    _check_inputs(graph, old, topology)
    if options is not None and options.plan == "onepass":
        raise PartitionError("incremental: plan='onepass' places the samples itself and takes no start placement; "
                             "leave start out or use the exact plan.")
    if options is not None and options.target == "full":
        raise PartitionError("incremental: target='full' chooses among placements from its own placement pass and "
                             "takes no start placement; leave start out or give target='none'.")
    t0 = time.perf_counter()
    comp = _compact(graph)
    options, defaults = resolve_options(replace(options or Options(), target="none"), graph, topology.num_workers,
                                        degree=comp.degree)
    return _refine(graph, old, topology, budget, seed, options, defaults, start, comp,
                   _old_rows(comp.used_ids, old, trained), None, t0)


def place_and_repartition(graph: BipartiteGraph, old: Placement, topology: Topology, *, max_moved_rows: int,
                          seed: int = 0, options: Options | None = None, trained: np.ndarray | None = None,
                          goal: Placement | Future | None = None, curve: bool = False) -> tuple[Placement, Placement]:
    """:func:`place_new_data`'s result and the re-partition within ``max_moved_rows`` from one placement pass.

    With ``Options.target="none"`` the re-partition is :func:`repartition_incremental`'s
    (``repartition_incremental(..., start=place_new_data(...))`` gives the same two placements but
    compacts the ids, counts the samples per row and worker and resolves the defaults twice: what
    ``gmp partition --from-manifest --max-moved-rows`` needs both for, the "no re-partition" line).

    **Target mode** (``target="full"``, the exact plan's default). Four kinds of candidates, and the
    one with the fewest ``batch_remote_reads`` (ties: fewer rows moved) is returned:

    * ``"sweep"``: the plan's own moves, made in one chain through :func:`budget_ladder`'s budgets
      (``rounds`` rounds at each; the one-pass plan: its row moves at each), every step scored; the
      start (the placed data, nothing moved) and every step within the budget are candidates.
    * ``"target"``: the *target* is ``goal`` (default: a ``hybrid`` re-partition of ``graph``, the
      same options' ``batch_size`` and ``max_imbalance``), its workers renamed to the old ones
      (:func:`match_workers`). With the target's samples fixed, a row's batch reads depend on that
      row's placement only (:func:`~gmp.partition._incremental_kernels.row_batches`), so every old row
      whose target placement (primary and secondaries) reads less has an exact gain; these moves are
      ordered once (the free ones first, then by gain per moved row) and taken in that order within
      the primary and secondary caps, whatever the budget; a budget takes the longest prefix that fits.
    * ``"full"``: the target itself on the rows ``graph`` uses, when its moved rows fit the budget.
    * ``"refit"``: a placement toward the target that does not depend on the budget, re-fitted
      (:func:`_refit`: the target's samples swept onto its rows, then the exact plan's moves within its
      own moved rows, which a re-fit never exceeds): every move of the ordered list (the target itself
      where the list is empty); a candidate where its rows fit the budget (at most the target's rows).
      Also the list's prefix at the ladder's 50% step (:data:`PREFIX_REFIT_PERCENT`), re-fitted
      within its own rows: each a candidate from its step on, computed only where the budget reaches it;
      the best re-fit that fits is the ``"refit"`` candidate.

    A larger budget's candidates include a smaller one's (the same chain's steps, a longer prefix whose
    every move reads less, the target and the re-fits once they fit: none depends on the budget), so
    the reads never rise with the budget, and every budget reads at most the placed data's;
    ``max_moved_rows`` of every used row reads at most the target. ``info["kept"]`` names the candidate
    kept, ``info["candidates"]`` the four at the budget (the re-fit's reads and rows ``None`` where none
    fits), ``info["seconds_sweep"]`` and ``info["seconds_target"]`` what each part cost
    (``info["seconds_steps"]``: the placement pass, the chain, the target's full re-partition, its ordered
    moves, the re-fit and the chain's wait for the target; ``info["sweep_steps"]`` the chain's steps)
    (the target's re-partition included unless ``goal`` was given), ``info["curve"]`` the same choice
    at every step of the ladder up to the budget (every step with ``curve=True``, the chain then run
    to 100%: ``--compare-full``'s table).

    ``goal`` may also be a :class:`~concurrent.futures.Future` of the target (:func:`in_background`: the
    caller's own full re-partition, running): the chain runs meanwhile, as it does beside the
    re-partition this call starts where ``goal`` is None (``info["target_alongside"]``).
    """
    return _place_and_refine(graph, old, topology, _check_budget(max_moved_rows), seed, options or Options(), trained,
                             placed=True, goal=goal, curve=curve)


def budget_ladder(num_used: int) -> list[tuple[float, int]]:
    """``(percent, rows)`` of :data:`LADDER_PERCENT` over ``num_used`` rows (floored as
    :func:`migration_budget`), ascending, rows distinct and above 0.

    Examples
    --------
    >>> budget_ladder(1000)[:3]
    [(0.5, 5), (1, 10), (2, 20)]
    """
    out: dict[int, float] = {}
    for p in LADDER_PERCENT:
        rows = int(math.floor(p / 100.0 * int(num_used) + 1e-9))
        if rows > 0 and rows not in out:
            out[rows] = p
    return [(p, rows) for rows, p in out.items()]


def _place_and_refine(graph: BipartiteGraph, old: Placement, topology: Topology, budget: int | None, seed: int,
                      options: Options, trained: np.ndarray | None, *, placed: bool,
                      goal: Placement | Future | None = None,
                      curve: bool = False) -> tuple[Placement | None, Placement | None]:
    """``(placed, refined)`` by the plan of ``options``: :func:`place_new_data`'s placement (None unless
    ``placed``; the exact plan makes it anyway) and the refined one (None without a ``budget``)."""
    _check_inputs(graph, old, topology)
    options = replace(options, target=options.target or ("full" if options.plan == "exact" else "none"))
    if budget is not None and options.target == "full":
        return _with_target(graph, old, topology, budget, seed, options, trained, goal, curve, placed)
    if options.plan == "onepass":
        return _onepass(graph, old, topology, budget, seed, options, trained, placed=placed)
    t0 = time.perf_counter()
    first, state = _place(graph, old, topology, seed=seed, options=options, trained=trained)
    if budget is None:
        return first, None
    return first, _refine(graph, old, topology, budget, seed, state.options, state.defaults, first, state.comp,
                          state.is_old, state, t0)


def _onepass(graph: BipartiteGraph, old: Placement, topology: Topology, budget: int | None, seed: int,
             options: Options, trained: np.ndarray | None, *, placed: bool, steps: list[int] | None = None,
             cindices: np.ndarray | None = None) -> tuple[Placement | None, Placement | None]:
    """The one-pass plan (:mod:`gmp.partition._incremental_onepass`): ``(placed, refined)`` from one pass, both
    checked and logged as the exact plan's. ``steps`` (with ``cindices``, the edges in compact ids): the moves
    made step by step and the step that reads least within the budget kept, as :func:`_refine`'s."""
    n = topology.num_workers
    if n > P.MAX_WORKERS:
        raise PartitionError(f"incremental: plan='onepass' supports up to {P.MAX_WORKERS} workers, got {n}; "
                             f"use the exact plan.")
    t0 = time.perf_counter()
    with task("Placing new samples on the fixed rows (one pass)", total=1) as advance:
        state = P.run_pass(graph, old, topology, options, trained)
        advance(1)
    m_old = old.num_embeddings
    voted = state.used_ids[~state.is_old]
    info = {"old_num_embeddings": int(m_old), "num_new_ids": int(graph.num_embeddings - m_old),
            "num_new_ids_used": int(np.count_nonzero(voted >= m_old)),
            "num_created_rows": int(np.count_nonzero(voted < m_old)), "num_used_embeddings": int(state.used_ids.size),
            "new_id_cap": state.new_id_cap, "stages": dict(state.seconds)}
    first = refined = None
    if placed:
        first = P.placement_of(graph, old, topology, seed, options, state, "place-new")
        first.info.update(info, seconds=round(time.perf_counter() - t0, 4))
        log.info("place-new (one pass): %d samples placed, %d new ids used, %.2f s", graph.num_samples,
                 info["num_new_ids_used"], first.info["seconds"])
    if budget is None:
        return first, None
    if steps is None:
        record = P.move(state, old, topology, budget, options, graph.num_samples)
    else:
        scored: list[dict] = []
        best: dict = {}
        none = np.zeros(0, dtype=np.int64)

        def score(allowed: int, spent: int) -> None:
            reads = int(K.batch_reads(np.asarray(graph.sample_indptr), cindices, none, none, state.sample_worker,
                                      state.prim, state.sec, np.int64(options.batch_size), n))
            scored.append({"budget": int(allowed), "batch_remote_reads": reads, "rows": int(spent)})
            if allowed <= budget and reads < best.get("reads", np.inf):
                best.update(reads=reads, prim=state.prim.copy(), sec=state.sec.copy())

        score(0, 0)
        # the chain's first step moves no row, as the exact plan's (_refine)
        record = P.move(state, old, topology, budget, options, graph.num_samples, steps=[0, *steps], score=score)
        state.prim[:], state.sec[:] = best["prim"], best["sec"]
        record["steps"] = scored
    refined = P.placement_of(graph, old, topology, seed, options, state, "incremental", state.bits)
    refined.info.update(info, max_moved_rows=int(budget), **record, seconds=round(time.perf_counter() - t0, 4))
    moved = moved_rows(old, refined, created=voted[voted < m_old])
    if moved.total > budget:  # apply_moves recomputes every move's cost; this would be a bug
        raise PartitionError(f"incremental: moved {moved.total} rows, above the budget {budget} (a gmp bug; "
                             f"please report it).")
    refined.info["moved_rows"] = {"primaries": moved.primaries, "secondaries": moved.secondaries, "total": moved.total}
    log.info("incremental (one pass): %d rows moved (%d primaries, %d secondaries) of a budget of %d, %.2f s",
             moved.total, moved.primaries, moved.secondaries, budget, refined.info["seconds"])
    return first, refined


# --------------------------------------------------------------------------- target mode
class _Toward(NamedTuple):
    """The ordered row moves toward the target (:func:`_toward_path`), over the compact ids."""

    prim: np.ndarray  # int32 [U]: the start: old rows where they are, the others on the target's workers
    sec: np.ndarray  # int64 [U]
    gprim: np.ndarray  # int32 [U]: the target's placement of every row
    gsec: np.ndarray  # int64 [U]
    rows: np.ndarray  # int64: the rows taken, in order (every budget takes a prefix)
    cum_rows: np.ndarray  # int64: moved rows after each
    cum_gain: np.ndarray  # int64: change of the reads after each (<= 0, non-increasing)
    start_reads: int
    full_rows: int  # moved rows of the whole target
    full_reads: int

    def at(self, budget: int) -> tuple[int, int, int]:
        """``(reads, moved rows, moves)`` of the longest prefix within ``budget``."""
        k = int(np.searchsorted(self.cum_rows, budget, side="right"))
        if k == 0:
            return self.start_reads, 0, 0
        return self.start_reads + int(self.cum_gain[k - 1]), int(self.cum_rows[k - 1]), k


def old_holders(old: Placement, used: np.ndarray, is_old: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(primary, secondary mask)`` of each compact id in ``old`` (int32 -1 / int64 0 where it is not old)."""
    oprim = np.full(used.size, -1, dtype=np.int32)
    oprim[is_old] = np.asarray(old.embedding_primary)[used[is_old]]
    osec = np.zeros(used.size, dtype=np.int64)
    osec[is_old] = _secondary_masks(old, used[is_old])
    return oprim, osec


def moved_per_row(oprim: np.ndarray, osec: np.ndarray, prim: np.ndarray, sec: np.ndarray,
                  is_old: np.ndarray) -> np.ndarray:
    """int64 [U]: :func:`moved_rows`' count of each row placed on ``prim``/``sec`` (compact ids), from its old
    holders (:func:`old_holders`): a new primary, and every secondary on a worker that held no copy; 0 for
    the ids that are not old."""
    held = osec | np.left_shift(np.int64(1), np.maximum(oprim, 0).astype(np.int64))
    fresh = np.bitwise_count((sec & ~held).view(np.uint64)).astype(np.int64)
    return np.where(is_old, (prim != oprim).astype(np.int64) + fresh, 0)


def _toward_path(graph: BipartiteGraph, old: Placement, goal: Placement, comp: _Compact, is_old: np.ndarray,
                 options: Options, n: int) -> _Toward:
    """Every old row whose target placement reads less under the target's samples, in one order taken
    within the caps (:func:`~gmp.partition._incremental_kernels.walk_toward`); new ids and created rows
    start on the target's workers (free)."""
    used = comp.used_ids
    gprim = np.asarray(goal.embedding_primary)[used].astype(np.int32)
    gsec = _secondary_masks(goal, used)
    oprim, osec = old_holders(old, used, is_old)
    prim = np.where(is_old, oprim, gprim).astype(np.int32)
    sec = np.where(is_old, osec, gsec).astype(np.int64)
    nb = np.zeros((used.size, n), dtype=np.int32)
    # a row every worker holds at the start and in the target reads nothing in either: its counts are not
    # needed (the hot rows: most of the edges on dense days)
    skip = _all_local(prim, sec, n) & _all_local(gprim, gsec, n)
    # after the target's re-partition: nothing runs beside this, so the workers are counted in parallel
    K.row_batches_parallel(np.asarray(graph.sample_indptr), comp.cindices,
                           np.asarray(goal.sample_worker, dtype=np.int32), np.int64(options.batch_size), nb, skip)
    here, there = np.empty(used.size, dtype=np.int64), np.empty(used.size, dtype=np.int64)
    K.row_reads(nb, prim, sec, here)
    K.row_reads(nb, gprim, gsec, there)
    del nb
    rows_of = moved_per_row(oprim, osec, gprim, gsec, is_old)
    gain = there - here
    cand = np.flatnonzero(is_old & (gain < 0) & ((gprim != prim) | (gsec != sec)))
    per_row = gain[cand] / np.maximum(rows_of[cand], 1)
    order = cand[np.lexsort((cand, per_row, rows_of[cand] > 0))].astype(np.int64)  # free first, then gain per row
    pload = np.bincount(prim, minlength=n).astype(np.int64)
    pcap = max(sample_cap(used.size, n, options.max_imbalance), int(pload.max(initial=0)),
               int(np.bincount(gprim, minlength=n).max(initial=0)))
    # secondaries: at most the start's and the target's together per worker (a tighter cap, the larger of
    # the two, blocked the hot rows whose old secondaries stay on the rows not moved: 2,376 -> 3,297 reads
    # against the target's 2,385 on a random 4-worker day)
    bits = np.arange(n, dtype=np.int64)
    sload = ((sec[:, None] >> bits) & 1).sum(axis=0).astype(np.int64)
    scap = (sload + ((gsec[:, None] >> bits) & 1).sum(axis=0)).astype(np.int64)
    taken = np.empty(order.size, dtype=np.int64)
    k = K.walk_toward(order, gprim, gsec, prim.copy(), sec.copy(), pload, np.int64(pcap), sload, scap, taken)
    taken = taken[:k]
    return _Toward(prim, sec, gprim, gsec, taken, np.cumsum(rows_of[taken]), np.cumsum(gain[taken]),
                   int(here.sum()), int(rows_of.sum()), int(there.sum()))


def _rows_placement(old: Placement, goal: Placement, comp: _Compact, prim: np.ndarray, sec: np.ndarray,
                    n: int, options: dict, seed: int, info: dict) -> Placement:
    """The target's samples on rows ``prim``/``sec`` (compact ids); unused old rows where they were,
    unused new ids where the target put them."""
    m_old, m = old.num_embeddings, goal.num_embeddings
    primary = np.array(goal.embedding_primary, dtype=np.int32)
    primary[:m_old] = old.embedding_primary
    primary[comp.used_ids] = prim
    s_indptr, s_workers = K.csr_from_masks(np.asarray(old.secondary_indptr), np.asarray(old.secondary_workers),
                                           np.int64(m_old), comp.bits, sec, np.int64(m), np.int64(n))
    return Placement(num_workers=n, sample_worker=np.array(goal.sample_worker, dtype=np.int32),
                     embedding_primary=primary, secondary_indptr=s_indptr, secondary_workers=s_workers,
                     method="incremental", options=options, seed=seed, info=info)


KINDS = ("sweep", "target", "full", "refit")
#: the re-fits (:func:`_refit`): sample sweeps from the target's samples, then this many rounds of the exact
#: plan's moves sweeping every sample, within the start's moved rows (docs/incremental.md)
REFIT_SWEEPS = 2
REFIT_ROUNDS = 3
#: the ladder's steps (percent of the used rows) at which the ordered moves' prefix is re-fitted too (session 27):
#: a candidate at every budget of at least the step's rows. Below the whole list's re-fit the curve is the
#: chain's, which plateaus where its single moves stop (a 1M-sample ``synth --continue`` entity day: 1.07x of
#: the full re-partition from 10% to 50%; the prefix re-fit 0.969x at 50%). Each step costs a re-fit (0.3-3 s
#: at 100k-1M samples) in every call that reaches it while the whole list needs more rows; at 20% the prefix
#: gained 0-2.5% on the days measured for 0.4-0.6x of the full re-partition's CPU in every call of 20-49%,
#: so only 50% is taken
PREFIX_REFIT_PERCENT = (50,)


class _Refit(NamedTuple):
    """A re-fitted start (:func:`_refit`): a candidate at every budget of at least ``need`` rows."""

    placement: Placement
    reads: int
    rows: int  # moved rows of the result (at most ``need``)
    need: int  # the start's moved rows: the re-fit's own budget
    prefix_percent: float | None = None  # the ladder step of a prefix re-fit (None: every ordered move)


def _best_refit(refits: Sequence[_Refit], budget: int) -> _Refit | None:
    """The re-fit that reads least (ties: fewer rows) among those that are candidates at ``budget`` (``need``
    within it), or None."""
    fit = [r for r in refits if r.need <= budget]
    return min(fit, key=lambda r: (r.reads, r.rows)) if fit else None


def _choose(budget: int, steps: list[dict], path: _Toward, refits: Sequence[_Refit] = ()) -> tuple[str, int, int]:
    """``(kind, reads, rows)`` of the candidate that reads least within ``budget`` (ties: fewer rows, then
    the order of :data:`KINDS`). A re-fit is a candidate wherever its ``need`` fits, whatever rows it ends
    up moving."""
    swept = min((s["batch_remote_reads"], s["rows"]) for s in steps if s["budget"] <= budget)
    reads, rows, _ = path.at(budget)
    cands = [(swept[0], swept[1], 0), (reads, rows, 1)]
    if path.full_rows <= budget:
        cands.append((path.full_reads, path.full_rows, 2))
    refit = _best_refit(refits, budget)
    if refit is not None:
        cands.append((refit.reads, refit.rows, 3))
    r, rows, kind = min(cands)
    return KINDS[kind], int(r), int(rows)


def _refit(graph: BipartiteGraph, old: Placement, topology: Topology, goal: Placement, comp: _Compact,
           is_old: np.ndarray, prim: np.ndarray, sec: np.ndarray, need: int, seed: int, options: Options,
           created: np.ndarray) -> _Refit:
    """Rows ``prim``/``sec`` (compact ids; ``need`` rows moved) re-fitted.

    The target's samples swept :data:`REFIT_SWEEPS` times onto these rows with the rows fixed, then
    :data:`REFIT_ROUNDS` rounds of the exact plan's row moves and sweeps of every sample within ``need``
    rows (:func:`repartition_incremental` from that start: it may trade the start's moves for others,
    never move more), then its exact moves within the same rows (as each step of the chain ends, session 27:
    0.1-0.8% fewer reads on the days measured, for one count of the rows' batches). Independent of the
    budget, so it is a candidate at every budget of at least ``need`` rows (reads never rise with the
    budget)."""
    n = topology.num_workers
    prim, sec = prim.copy(), sec.copy()
    sw = np.array(goal.sample_worker, dtype=np.int32)
    count = np.zeros((prim.size, n), dtype=np.int32)
    K.count_samples(np.asarray(graph.sample_indptr), comp.cindices, sw, count)
    cost = np.ascontiguousarray(topology.cost, dtype=np.float64)
    _sweep_from(graph, comp, sw, prim, sec, count, cost, options, sweeps=REFIT_SWEEPS)
    del count
    start = replace(_rows_placement(old, goal, comp, prim, sec, n, {}, seed, {}), sample_worker=sw)
    ropts, defaults = resolve_options(replace(options, plan="exact", target="none", start="pass", sweep_first=False,
                                              sweep="every", rounds=REFIT_ROUNDS), graph, n, degree=comp.degree)
    result = _refine(graph, old, topology, need, seed, ropts, defaults, start, comp, is_old, None,
                     time.perf_counter())
    used = comp.used_ids
    sw = np.asarray(result.sample_worker, dtype=np.int32)
    prim = np.asarray(result.embedding_primary)[used].astype(np.int32)
    sec = _secondary_masks(result, used)
    # its exact moves within the same rows (as each step of the chain ends: ``_refine``'s ``exact``)
    held = _all_local(prim, sec, n)
    nb = np.zeros((used.size, n), dtype=np.int32)
    K.row_batches_parallel(np.asarray(graph.sample_indptr), comp.cindices, sw, np.int64(options.batch_size), nb, held)
    oprim, osec = old_holders(old, used, is_old)
    spent = int(moved_per_row(oprim, osec, prim, sec, is_old).sum())
    changed = np.zeros(used.size, dtype=bool)
    _, _, reads = _exact_step(nb, cost, _uniform_cost(cost), prim, sec, oprim, osec, is_old, held,
                              np.bincount(prim, minlength=n).astype(np.int64),
                              sample_cap(used.size, n, options.max_imbalance), max(need, spent), spent, changed)
    if changed.any():
        primary = np.array(result.embedding_primary, dtype=np.int32)
        primary[used] = prim
        result = replace(result, embedding_primary=primary)
    return _Refit(result, reads, moved_rows(old, result, created=created).total, int(need))


def _exact_step(nb, cost, uniform, prim, sec, old_prim, old_sec, is_old, held, pload, pcap: int, budget: int,
                spent: int, changed) -> tuple[int, int, int]:
    """:func:`~gmp.partition._incremental_kernels.exact_moves` on the rows' batch counts ``nb`` (in place on
    ``prim``, ``pload``; ``changed`` marks the rows moved): ``(spent, reads before, reads after)``, the reads
    being batch reads whatever the moves' weights."""
    here = np.empty(prim.size, dtype=np.int64)
    K.row_reads(nb, prim, sec, here)
    before = int(here.sum())
    spent, _ = K.exact_moves(nb, cost, uniform, prim, sec, old_prim, old_sec, is_old, held, pload, np.int64(pcap),
                             np.int64(budget), np.int64(spent), changed)
    K.row_reads(nb, prim, sec, here)
    return int(spent), before, int(here.sum())


def _refit_toward(graph: BipartiteGraph, old: Placement, topology: Topology, goal: Placement, comp: _Compact,
                  is_old: np.ndarray, path: _Toward, top: int, seed: int, options: Options,
                  created: np.ndarray) -> _Refit | None:
    """The re-fit (None where its start does not fit ``top`` rows) of one budget-independent placement
    toward the target: every move of the ordered list, or the target itself where that list is
    empty. The list's re-fit was the better start on every day measured (day 1 of the independent, mix and
    entity drifts: 0.945x, 0.986x, 0.974x of the full re-partition's reads; the target's re-fit 0.970x,
    0.996x, 0.996x); the target's covers the days where no move of the list reads less under the target's
    samples (its samples, not its rows, are then what is off). One re-fit, not both: each costs about half
    a full re-partition at 100k samples."""
    if path.rows.size:
        prim, sec = path.prim.copy(), path.sec.copy()
        prim[path.rows], sec[path.rows] = path.gprim[path.rows], path.gsec[path.rows]
        need = int(path.cum_rows[-1])
    else:
        prim, sec, need = path.gprim, path.gsec, path.full_rows
    if need > top:
        return None
    return _refit(graph, old, topology, goal, comp, is_old, prim, sec, need, seed, options, created)


def _prefix_refits(graph: BipartiteGraph, old: Placement, topology: Topology, goal: Placement, comp: _Compact,
                   is_old: np.ndarray, path: _Toward, ladder: list[tuple[float, int]], top: int, seed: int,
                   options: Options, created: np.ndarray) -> list[_Refit]:
    """The ordered moves' prefix at each step of :data:`PREFIX_REFIT_PERCENT` within ``top`` rows, re-fitted
    (:func:`_refit`, within the prefix's rows), each a candidate at every budget of at least the step's rows
    (``need``: the step, so that a budget's candidates do not depend on ``top``). Left out where the prefix is
    empty or is the whole list (the re-fit of every move, :func:`_refit_toward`, is that candidate)."""
    out = []
    for percent, step in ladder:
        if percent not in PREFIX_REFIT_PERCENT or step > top:
            continue
        _, rows, k = path.at(step)
        if k == 0 or k == path.rows.size:
            continue
        prim, sec = path.prim.copy(), path.sec.copy()
        take = path.rows[:k]
        prim[take], sec[take] = path.gprim[take], path.gsec[take]
        r = _refit(graph, old, topology, goal, comp, is_old, prim, sec, rows, seed, options, created)
        out.append(r._replace(need=int(step), prefix_percent=percent))
    return out


def _refit_candidate(refits: list[_Refit], budget: int) -> dict:
    """``info["candidates"]["refit"]``: the best re-fit's reads and rows where one fits ``budget``, else None."""
    refit = _best_refit(refits, budget)
    fits = refit is not None
    return {"batch_remote_reads": refit.reads if fits else None, "rows": refit.rows if fits else None,
            "prefix_percent": refit.prefix_percent if fits else None,
            "fits": fits}


_T = TypeVar("_T")


class Background(Future):
    """The future of :func:`in_background`; :meth:`stop` asks its thread to end early."""

    def __init__(self) -> None:
        super().__init__()
        self.stop_requested = threading.Event()

    def stop(self) -> None:
        """Ask the thread to end at its next progress step (:func:`gmp.progress.stoppable`): its result is
        then :class:`gmp.progress.Stopped`. Compiled kernels and METIS cannot be interrupted, so it ends
        within one step: a ``hybrid`` round or a phase of a multilevel candidate (0.2-0.9 s after the request
        on a 1M-sample day whose ``hybrid`` run takes 2.1 s)."""
        self.stop_requested.set()


def in_background(fn: Callable[[], _T], name: str = "gmp-target") -> Background:
    """``fn()`` on a daemon thread of its own; its result (or its exception) through the returned future.

    A daemon thread, not an executor's: where the caller fails first (an error, Ctrl-C) the process
    does not wait for ``fn`` to end, and the caller that will not use the result calls
    :meth:`Background.stop` so that ``fn`` ends at its next progress step instead of computing on.
    Progress bars are shown from the main thread only (:func:`gmp.progress.task`), so ``fn``'s steps are
    logged, not drawn."""
    future = Background()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            with stoppable(future.stop_requested):
                result = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
            future.set_exception(e)
        else:
            future.set_result(result)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


#: what running the full re-partition beside the chain adds to the peak, per edge of the new data, rounded up
#: (``gmp partition --from-manifest`` on independent-drift days: +0.37 GB at 26M edges, +0.73 GB at 78M)
ALONGSIDE_BYTES_PER_EDGE = 16


def runs_alongside(options: Options, graph: BipartiteGraph) -> bool:
    """Whether target mode runs its full re-partition beside the sweep chain (``Options.alongside``).
    ``None``: where this process may use two cores or more, numba's threading layer takes parallel
    launches from several threads (:func:`~gmp.kernels.threads.concurrent_launches_safe`), and half the
    memory available now holds what running both at once adds (:data:`ALONGSIDE_BYTES_PER_EDGE` per edge
    of ``graph``, as ``hybrid``'s multilevel start sizes its threads)."""
    if options.alongside is not None:
        return options.alongside
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    fits = available_memory() // 2 >= ALONGSIDE_BYTES_PER_EDGE * graph.num_edges
    return cores > 1 and fits and concurrent_launches_safe()


def _with_target(graph: BipartiteGraph, old: Placement, topology: Topology, budget: int, seed: int, options: Options,
                 trained: np.ndarray | None, goal: Placement | Future | None, curve: bool,
                 placed: bool) -> tuple[Placement | None, Placement]:
    """Target mode of :func:`place_and_repartition`: ``(placed, the candidate that reads least)``.

    The target's full re-partition and the sweep chain do not depend on each other, so the
    re-partition (``goal`` None: run here; a :class:`~concurrent.futures.Future`: the caller's) runs
    on a thread of its own (:func:`in_background`) while this one runs the chain; the ordered moves
    and the re-fit then wait for it. Both are compiled kernels that release the GIL, and the chain
    launches no parallel kernel (numba's ``workqueue`` layer takes parallel launches from one thread
    at a time: :func:`runs_alongside`), so on two cores or more the call takes about the longer of the
    two instead of their sum (a 1M-sample day: 4.4 s -> 3.2 s wall), for the same placements."""
    t0 = time.perf_counter()
    n = topology.num_workers
    given = goal is not None and not isinstance(goal, Future)
    started = goal is None  # this call runs the full re-partition (a caller's future is the caller's to stop)
    t_full = 0.0  # the full re-partition's own time, where this call runs it
    if started:
        from . import run_partitioner

        def full() -> Placement:
            nonlocal t_full
            t = time.perf_counter()
            with task("Full re-partition (hybrid) as the target"):
                p = run_partitioner("hybrid", graph, topology, seed=seed,
                                    options={"batch_size": options.batch_size, "max_imbalance": options.max_imbalance})
            t_full = time.perf_counter() - t
            return p

        goal = in_background(full) if runs_alongside(options, graph) else full()
    alongside = isinstance(goal, Future)
    t1 = time.perf_counter()
    try:
        # after the re-partition has started: on a day where it is the longer part, this is on the call's wall
        comp = _compact(graph)
        used = comp.used_ids
        is_old = _old_rows(used, old, trained)
        ladder = budget_ladder(used.size)
        top = max(budget, ladder[-1][1] if curve and ladder else 0)
        steps = [rows for _, rows in ladder if rows <= top]
        if options.plan == "onepass":
            first, swept = _onepass(graph, old, topology, budget, seed, options, trained, placed=placed,
                                    steps=steps, cindices=comp.cindices)
        else:  # the pass splits the edges for the chain; comp keeps them for the moves toward the target
            first, state = _place(graph, old, topology, seed=seed, options=options, trained=trained, comp=comp)
            swept = _refine(graph, old, topology, budget, seed, state.options, state.defaults, first, state.comp,
                            state.is_old, state, t1, steps=steps)
            del state  # the chain's split of the edges, freed before the moves toward the target
            first = first if placed else None
    except BaseException:  # an error or Ctrl-C: the re-partition beside it would compute on for nothing
        if started and alongside:
            goal.stop()
        raise
    t_sweep = time.perf_counter() - t1
    t_w = time.perf_counter()
    goal = goal.result() if alongside else goal
    t_wait = time.perf_counter() - t_w
    if goal.num_samples != graph.num_samples or goal.num_embeddings != graph.num_embeddings \
            or goal.num_workers != n:
        raise PartitionError(f"incremental: the goal placement ({goal.num_samples} samples, {goal.num_embeddings} "
                             f"ids, {goal.num_workers} workers) is not a placement of this graph ({graph.num_samples} "
                             f"samples, {graph.num_embeddings} ids, {n} workers); re-partition the new data.")
    t2 = time.perf_counter()
    renamed = renames_workers(topology)
    goal = match_workers(old, goal, topology=topology, rows=used)
    path = _toward_path(graph, old, goal, comp, is_old, options, n)
    t_r = time.perf_counter()
    created = used[~is_old & (used < old.num_embeddings)]
    refit = _refit_toward(graph, old, topology, goal, comp, is_old, path, top, seed, options, created)
    refits = ([] if refit is None else [refit]) + _prefix_refits(graph, old, topology, goal, comp, is_old, path,
                                                                 ladder, top, seed, options, created)
    t_refit = time.perf_counter() - t_r
    t_moves = time.perf_counter() - t2 - t_refit
    t_target = t_full + t_moves + t_refit
    scored = swept.info["steps"]
    stages = swept.info.get("stages") or {}  # the one-pass plan: its pass (table, pass, rows)
    t_place = float(swept.info.get("place_seconds", sum(stages.values())))
    kind, reads, rows = _choose(budget, scored, path, refits)
    if kind == "sweep":
        result = swept
    elif kind == "refit":
        result = replace(_best_refit(refits, budget).placement, options=swept.options, info=dict(swept.info))
    else:
        prim, sec = path.prim.copy(), path.sec.copy()
        take = path.rows[:path.at(budget)[2]] if kind == "target" else np.flatnonzero(is_old)
        prim[take], sec[take] = path.gprim[take], path.gsec[take]
        result = _rows_placement(old, goal, comp, prim, sec, n, swept.options, seed, dict(swept.info))
    points = [(p, b) for p, b in ladder if b <= top]
    if not any(b == budget for _, b in points):
        points.append((None, budget))
    info = result.info
    info.update({
        "target": "full",
        "kept": kind,
        "candidates": {
            "sweep": dict(zip(("batch_remote_reads", "rows"),
                              min((s["batch_remote_reads"], s["rows"]) for s in scored if s["budget"] <= budget))),
            "target": dict(zip(("batch_remote_reads", "rows"), path.at(budget)[:2])),
            "full": {"batch_remote_reads": path.full_reads, "rows": path.full_rows,
                     "fits": path.full_rows <= budget},
            # the best re-fit whose start fits the budget (None where none does)
            "refit": _refit_candidate(refits, budget),
        },
        "workers_renamed": renamed,
        "target_given": given,
        "seconds_target": round(t_target, 4),
        "seconds_sweep": round(t_sweep, 4),
        # what each step cost: the placement pass, the chain's steps (rounds and a traffic count each), the
        # full re-partition (0 when the caller ran it) and the ordered moves toward it
        "seconds_steps": {"place": round(t_place, 4), "sweep_chain": round(max(t_sweep - t_place, 0.0), 4),
                          "target_full_repartition": round(t_full, 4),
                          "target_moves": round(t_moves, 4), "target_refit": round(t_refit, 4),
                          # how long the chain, done first, then waited for the target's re-partition
                          "wait_for_target": round(t_wait, 4)},
        # the full re-partition ran beside the chain (not after it): the parts above overlap in time
        "target_alongside": alongside,
        "sweep_steps": len(scored) - 1,  # the scored steps after the start: the free one and the ladder's
        "seconds": round(time.perf_counter() - t0, 4),
        "curve": [dict(zip(("percent", "budget", "kept", "batch_remote_reads", "rows"),
                           (p, b, *_choose(b, scored, path, refits))))
                  for p, b in sorted(points, key=lambda x: x[1])],
    })
    moved = moved_rows(old, result, created=created)
    if moved.total > budget or (kind != "sweep" and moved.total != rows):  # the same moves counted twice
        raise PartitionError(f"incremental: the {kind} candidate moves {moved.total} rows, counted {rows}, budget "
                             f"{budget} (a gmp bug; please report it).")
    info["moved_rows"] = {"primaries": moved.primaries, "secondaries": moved.secondaries, "total": moved.total}
    log.info("incremental (target mode): kept the %s candidate, %d reads, %d rows moved of a budget of %d; target "
             "%.2f s, sweep %.2f s", kind, reads, moved.total, budget, t_target, t_sweep)
    return first, result


def _uniform_cost(cost: np.ndarray) -> float:
    """The cost every remote read has where the topology's off-diagonal costs are all the same and positive
    (a flat topology: 1), else 0.0 (the exact moves then weigh each read by its cost)."""
    n = cost.shape[0]
    off = cost[~np.eye(n, dtype=bool)]
    if n < 2 or not np.all(np.diag(cost) == 0) or not np.all(off == off[0]) or off[0] <= 0:
        return 0.0
    return float(off[0])


def _check_budget(max_moved_rows, name: str = "max_moved_rows") -> int:
    if isinstance(max_moved_rows, (bool, np.bool_)) or not isinstance(max_moved_rows, (int, np.integer)) \
            or max_moved_rows < 0:
        raise PartitionError(f"{name} must be an integer >= 0, got {max_moved_rows!r}.")
    if max_moved_rows >= 2**63:  # the kernels count in int64
        raise PartitionError(f"{name} {max_moved_rows} is above 2^63 - 1; give 100% to allow every row to move.")
    return int(max_moved_rows)


def _refine(graph: BipartiteGraph, old: Placement, topology: Topology, budget: int, seed: int, options: Options,
            defaults: dict, start: Placement, comp: _Compact, is_old: np.ndarray, state: _State | None,
            t0: float, steps: list[int] | None = None) -> Placement:
    """:func:`repartition_incremental` from ``start`` (``state``: what the pass that made it left warm).

    ``steps`` (ascending budgets, :func:`budget_ladder`): instead of spending ``budget`` at once, run
    ``rounds`` rounds at each step's budget in turn (one chain, the same for every ``budget``: a
    step's state never depends on the steps after it), score every step's placement
    (``batch_remote_reads``), and return the
    one that reads least among the start and the steps within ``budget`` (``info["steps"]``: every
    step's reads and rows). The chain's first step moves no row (budget 0: new ids' copies, copies
    dropped, the samples; round 0 where ``sweep_first``), so that a budget below the ladder's first
    step gets those too (a 1M-sample independent day: 3.2% fewer reads than the placed data).

    Each step ends with its *exact moves* (:func:`~gmp.partition._incremental_kernels.exact_moves`, session 27):
    the round chose its moves by HET-GMP's soft count (Eq. 3); with the step's samples fixed, the rows' batch
    counts (:func:`~gmp.partition._incremental_kernels.row_batches`) give every primary move its exact gain in
    batch reads (weighted by the topology as Eq. 3 weighs a read: on a flat topology the reads themselves), and
    the step takes the free ones, spends what is left of its budget, then swaps moved rows whose move no longer
    pays (their samples left) for rows that stayed and would gain more (``info["sweeps"][k]["exact_moves"]``).
    The same counts score the step (their reads after the moves). On a 1M-sample day of ``gmp data synth
    --continue``'s entity drift the 5% step read 823,150 -> 810,636 (1.113x -> 1.096x of the full
    re-partition); on the independent drift, where a row's gains are 1-5 reads, little changes."""
    t_place = float(start.info.get("seconds", 0.0)) if start.info else 0.0
    t1 = time.perf_counter()
    n = topology.num_workers
    m_old, m = old.num_embeddings, graph.num_embeddings
    used = comp.used_ids
    num_used = used.size
    if state is not None:  # the pass moved no row and gave the new ones primaries only: the old holders are its
        prim, sec = state.prim, state.sec
        old_prim, old_sec = np.where(is_old, prim, -1).astype(np.int32), sec.copy()
    else:
        prim = np.array(np.asarray(start.embedding_primary)[used], dtype=np.int32)
        sec = _secondary_masks(start, used)
        old_prim, old_sec = old_holders(old, used, is_old)
    sw = np.array(start.sample_worker, dtype=np.int32)
    indptr = np.asarray(graph.sample_indptr)
    if state is not None:
        count = state.count
    else:
        count = np.zeros((num_used, n), dtype=np.int32)
        K.count_samples(indptr, comp.cindices, sw, count)
    cost = np.ascontiguousarray(topology.cost, dtype=np.float64)
    uniform = _uniform_cost(cost)

    num_samples = graph.num_samples
    cap = sample_cap(num_samples, n, options.max_imbalance)
    pcap = sample_cap(num_used, n, options.max_imbalance)
    f, df = _soft_count(graph, n, cap, options)
    alpha_d, beta_d = default_weights(n, num_samples, num_used)
    alpha = float(options.alpha if options.alpha is not None else alpha_d)
    beta = float(options.beta if options.beta is not None else beta_d)
    load = np.bincount(sw, minlength=n).astype(np.int64)
    pload = np.bincount(prim, minlength=n).astype(np.int64)
    sec_load, sec_cap = secondary_capacity(sec, n, options.replication_budget, old.options)

    marg = np.empty((num_used, n), dtype=np.float64)
    K.fill_marginals(prim, sec, count, df, cost, marg)
    saturated = saturated_degree(num_samples, n, options.batch_size)
    split = state.split if state is not None and state.split is not None else \
        _split_edges(comp, indptr, prim, sec, is_old, n, saturated, options.carry_private)
    comp = comp._replace(cindices=None)  # the split holds the edges now
    marks = np.zeros(num_samples, dtype=np.uint8)  # bit 0: reads a changed row, bit 1: reads a lost sealed row
    rounds: list[dict] = []
    # a start that already moved rows (e.g. an earlier incremental result) has spent them
    created = used[~is_old & (used < m_old)]
    spent = 0 if state is not None else moved_rows(old, start, created=created).total
    if spent > budget:
        raise PartitionError(f"incremental: the start placement already moves {spent} rows of the old placement, "
                             f"above max_moved_rows={budget}; give a larger budget or start from place_new_data's "
                             f"result.")
    first = 0 if options.sweep_first else 1  # round 0: the free moves and a sweep of every sample, no budget
    if steps is None:  # (round, allowed rows, score after it)
        schedule = [(r, budget if r > 0 else 0, False) for r in range(first, options.rounds + 1)]
    else:
        schedule = [(0, 0, True)] if options.sweep_first else [(1, 0, True)]  # the free step first
        schedule += [(r, b, r == options.rounds) for b in steps for r in range(1, options.rounds + 1)]
    scored: list[dict] = []
    best: dict = {}

    none = np.zeros(0, dtype=np.int64)
    pending = np.zeros(num_used, dtype=bool)  # rows the exact moves changed: the next round sweeps their samples
    nb = tindptr = tsamples = None
    if steps is not None:  # the exact moves' batch counts, from each open row's samples (the transposed split)
        nb = np.zeros((num_used, n), dtype=np.int32)
        tindptr, tsamples = transpose_csr(split.indptr, split.cindices, num_used)

    def exact(allowed: int, lost: bool) -> int:
        """The step's exact moves (:func:`~gmp.partition._incremental_kernels.exact_moves`): with the samples
        fixed, the rows' batch counts give every primary move its gain in batch reads; returns the reads after."""
        nonlocal spent
        # rows every worker holds read nothing and cannot move: not counted (the sealed ones among them are in
        # their own entries, read only once one lost a copy)
        held = _all_local(prim, sec, n)
        nb[:] = 0
        K.row_batches_by_row(tindptr, tsamples, sw, np.int64(options.batch_size), nb, held)
        if lost:
            K.row_batches(split.sindptr, split.scindices, sw, np.int64(options.batch_size), nb, held)
        spent, before, after = _exact_step(nb, cost, uniform, prim, sec, old_prim, old_sec, is_old, held, pload,
                                           pcap, allowed, spent, pending)
        rounds[-1]["exact_moves"] = {"rows_changed": int(np.count_nonzero(pending)), "reads_saved": before - after}
        return after

    def score(allowed: int, reads: int) -> None:  # a step's placement, kept when it reads least within the budget
        scored.append({"budget": int(allowed), "batch_remote_reads": reads, "rows": int(spent)})
        if allowed <= budget and reads < best.get("reads", np.inf):
            best.update(reads=reads, sw=sw.copy(), prim=prim.copy(), sec=sec.copy())

    if steps is not None:  # the start; the split was made from these rows, so every sealed row is held
        # everywhere and reads nothing: their entries (77% of the edges on a 1M-sample independent day) are left out
        score(0, int(K.batch_reads(split.indptr, split.cindices, none, none, sw, prim, sec,
                                   np.int64(options.batch_size), n)))
    with task("Incremental re-partitioning", total=len(schedule)) as advance:
        for r, allowed, last in schedule:
            t_r = time.perf_counter()
            before = spent
            spent, touched, num_candidates = move_rows(prim, sec, count, f, cost, pload, pcap, beta, sec_load,
                                                       sec_cap, old_prim, old_sec, is_old, allowed, spent)
            touched |= pending  # the step before's exact moves
            pending[:] = False
            # sealed rows that lost a copy (a swap evicted one of their secondaries): the sweep sums them from
            # the sealed entries of their samples (11 rows on the 1M-sample entity day 1)
            lost = split.sealed & ~_all_local(prim, sec, n)
            any_lost = bool(lost.any())
            flags = lost.view(np.uint8) << 1
            # round 1 sweeps every sample with sweep="all" (it also refines the one-pass placement), and so
            # does round 0; the other rounds only the samples that read a row changed in this round
            every = r == 0 or (r == 1 and options.sweep == "all") or options.sweep == "every"
            marks[:] = 0
            if not every:  # bit 0: reads a changed row (open or sealed)
                flags |= touched.view(np.uint8)
                K.mark_samples(split.indptr, split.cindices, flags, marks)
            if any_lost:  # bit 1: reads a lost row (sealed entries only); a sealed row that changed lost a copy
                # (all its workers hold it: a move takes one away), so without lost rows its entries mark nothing
                K.mark_samples(split.sindptr, split.scindices, flags, marks)
            swept = num_samples if every else int(np.count_nonzero(marks & 1))
            K.refresh_marginals(touched, prim, sec, count, df, cost, marg)
            moved_samples = K.sweep_samples(split.indptr, split.cindices, split.num_private, split.sindptr,
                                            split.scindices, flags, marks, every, sw, prim, sec, count, marg, df,
                                            cost, load, np.int64(cap), alpha, pload, np.int64(pcap), beta, sec_load)
            entry = {"round": r, "allowed_rows": int(allowed), "spent_rows": int(spent),
                     "rows_this_round": int(spent - before), "candidates": num_candidates, "swept_samples": swept,
                     "moved_samples": int(moved_samples), "seconds": round(time.perf_counter() - t_r, 4)}
            rounds.append(entry)
            log.info("incremental round %d: %d candidates, %d rows spent of %d allowed, %d samples moved, %.2f s",
                     r, num_candidates, spent, allowed, moved_samples, entry["seconds"])
            if last:
                score(allowed, exact(allowed, any_lost))
            advance(1)
    if best:  # the steps' best within the budget
        sw, prim, sec = best["sw"], best["prim"], best["sec"]

    primary = np.array(start.embedding_primary, dtype=np.int32)
    primary[used] = prim
    s_indptr, s_workers = K.csr_from_masks(np.asarray(start.secondary_indptr), np.asarray(start.secondary_workers),
                                           np.int64(m), comp.bits, sec, np.int64(m), np.int64(n))
    info = {
        "max_moved_rows": budget,
        "sweeps": rounds,
        "place_seconds": t_place,
        "seconds": round(time.perf_counter() - t1 + t_place, 4),
        "beta": beta,
        "alpha": alpha,
        "defaults": defaults,
        "primary_cap": int(pcap),
        "secondary_cap": sec_cap.tolist(),
    }
    if steps is not None:
        info["steps"] = scored
    result = Placement(num_workers=n, sample_worker=sw, embedding_primary=primary, secondary_indptr=s_indptr,
                       secondary_workers=s_workers, method="incremental", options=asdict(options), seed=seed,
                       info=info)
    moved = moved_rows(old, result, created=created)
    if moved.total > budget:  # the kernels recompute every move's cost; this would be a bug
        raise PartitionError(f"incremental: moved {moved.total} rows, above the budget {budget} (a gmp bug; "
                             f"please report it).")
    info["moved_rows"] = {"primaries": moved.primaries, "secondaries": moved.secondaries, "total": moved.total}
    log.info("incremental: %d rows moved (%d primaries, %d secondaries) of a budget of %d, %.2f s", moved.total,
             moved.primaries, moved.secondaries, budget, time.perf_counter() - t0)
    return result


def repartition_toward(graph: BipartiteGraph, old: Placement, goal: Placement, topology: Topology, *,
                       max_moved_rows: int, seed: int = 0, options: Options | None = None) -> Placement:
    """The ``max_moved_rows`` row moves of ``old`` toward ``goal`` with the best gain; samples re-placed.

    ``goal`` is a placement of the new data (e.g. a full re-partition, its workers renamed by
    :func:`match_workers`). Every old row whose primary differs from ``goal``'s is a candidate
    with gain ``Eq.3(x where it is) - Eq.3(x on goal's worker)`` counted over the *goal's*
    samples (a row's gain shows once the samples that read it have followed: what single-row
    moves from the old samples cannot see); new ids take ``goal``'s primaries (free). Moves are
    applied by gain while the budget lasts (exact costs, the primary cap as in
    :func:`repartition_incremental`); the old secondaries stay. Then the samples are placed
    to the resulting rows twice, keeping the lower Eq. 3 (soft count): afresh
    (:func:`repartition_incremental` with a budget of 0: the streaming pass and one sweep), and
    from the goal's samples with up to three sweeps. Costs the goal's computation on top: a
    reference for what a budget can reach (docs/incremental.md), not a fast path.
    """
    options = options or Options()
    _check_inputs(graph, old, topology)
    if goal.num_embeddings != graph.num_embeddings or goal.num_samples != graph.num_samples:
        raise PartitionError("repartition_toward: the goal placement is not a placement of this graph.")
    budget = int(max_moved_rows)
    n, m_old, m = topology.num_workers, old.num_embeddings, graph.num_embeddings
    comp = _compact(graph)
    used = comp.used_ids
    is_old = used < m_old
    gprim = np.asarray(goal.embedding_primary)[used].astype(np.int32)
    old_prim, old_sec = old_holders(old, used, is_old)
    prim = np.where(is_old, old_prim, gprim).astype(np.int32)
    sec = old_sec.copy()
    count = np.zeros((used.size, n), dtype=np.int32)
    K.count_samples(np.asarray(graph.sample_indptr), comp.cindices, np.asarray(goal.sample_worker, dtype=np.int32),
                    count)
    cost = np.ascontiguousarray(topology.cost, dtype=np.float64)
    gload = int(np.bincount(np.asarray(goal.sample_worker), minlength=n).max())
    f, _ = _soft_count(graph, n, max(sample_cap(graph.num_samples, n, options.max_imbalance), gload), options)
    target = np.empty(used.size, dtype=np.int32)
    gain = np.empty(used.size, dtype=np.float64)
    K.toward_gains(prim, sec, count, f, cost, gprim, target, gain)
    kind, row, tgt, evict, g, est = primary_pool(target, gain, prim, old_prim, is_old)
    order = np.lexsort((-g, est > 0)).astype(np.int64)
    pload = np.bincount(prim, minlength=n).astype(np.int64)
    pcap = max(sample_cap(used.size, n, options.max_imbalance), int(pload.max()))
    sec_load = np.zeros(n, dtype=np.int64)
    K.apply_moves(order, kind, row, tgt, evict, prim, sec, pload, np.int64(pcap), sec_load, sec_load.copy(), old_prim,
                  old_sec, is_old, np.int64(budget), np.int64(0))
    primary = np.array(goal.embedding_primary, dtype=np.int32)
    primary[:m_old] = old.embedding_primary
    primary[used] = prim
    s_indptr, s_workers = K.csr_from_masks(np.asarray(old.secondary_indptr), np.asarray(old.secondary_workers),
                                           np.int64(m_old), comp.bits, sec, np.int64(m), np.int64(n))
    rows = Placement(num_workers=n, sample_worker=np.zeros(graph.num_samples, dtype=np.int32),
                     embedding_primary=primary, secondary_indptr=s_indptr, secondary_workers=s_workers)
    # two ways to fit the samples to these rows; the one with the lower Eq. 3 (soft count) is kept
    replaced = repartition_incremental(graph, rows, topology, max_moved_rows=0, seed=seed,
                                       options=replace(options, rounds=1, replication_budget=0.0,
                                                                   target="none")).sample_worker
    swept = np.array(goal.sample_worker, dtype=np.int32)
    _sweep_from(graph, comp, swept, prim, sec, count, cost, options, sweeps=3)
    costs = [_eq3(graph, comp, sw, prim, sec, cost, f) for sw in (replaced, swept)]
    sample_worker = replaced if costs[0] <= costs[1] else swept
    result = Placement(num_workers=n, sample_worker=sample_worker, embedding_primary=primary,
                       secondary_indptr=s_indptr, secondary_workers=s_workers, method="incremental-toward",
                       options=asdict(options), seed=seed, info={"max_moved_rows": budget, "candidates": int(order.size)})
    moved = moved_rows(old, result)
    if moved.total > budget:
        raise PartitionError(f"repartition_toward: moved {moved.total} rows, above the budget {budget} (a gmp bug).")
    result.info["moved_rows"] = {"primaries": moved.primaries, "secondaries": moved.secondaries, "total": moved.total}
    return result


def _sweep_from(graph, comp, sw, prim, sec, count, cost, options, *, sweeps):
    """Up to ``sweeps`` sample sweeps of ``sw`` (in place; ``count`` are its counts) against fixed rows."""
    n = cost.shape[0]
    load = np.bincount(sw, minlength=n).astype(np.int64)
    cap = max(sample_cap(graph.num_samples, n, options.max_imbalance), int(load.max()))
    _, df = _soft_count(graph, n, cap, options)
    marg = np.empty(count.shape, dtype=np.float64)
    K.fill_marginals(prim, sec, count, df, cost, marg)
    alpha = float(options.alpha if options.alpha is not None else
                  default_weights(n, graph.num_samples, prim.size)[0])
    marks = np.zeros(graph.num_samples, dtype=np.uint8)  # every sample, no row sealed
    none = np.zeros(graph.num_samples, dtype=np.int32)  # rows fixed: nothing is carried
    pload = np.bincount(prim, minlength=n).astype(np.int64)
    sec_load = np.zeros(n, dtype=np.int64)
    indptr = np.asarray(graph.sample_indptr)
    no_sealed, no_lost = np.zeros(indptr.size, dtype=np.int64), np.zeros(prim.size, dtype=np.uint8)
    for _ in range(sweeps):
        if K.sweep_samples(indptr, comp.cindices, none, no_sealed, none[:1], no_lost, marks, True, sw, prim, sec,
                           count, marg, df, cost, load, np.int64(cap), alpha, pload, np.int64(prim.size), 0.0,
                           sec_load) == 0:
            break


def _eq3(graph, comp, sw, prim, sec, cost, f) -> float:
    """HET-GMP's Eq. 3 (soft count) of samples ``sw`` on rows ``prim``/``sec`` (compact ids)."""
    n = cost.shape[0]
    count = np.zeros((prim.size, n), dtype=np.int32)
    K.count_samples(np.asarray(graph.sample_indptr), comp.cindices, np.asarray(sw, dtype=np.int32), count)
    local = ((sec[:, None] >> np.arange(n, dtype=np.int64)[None, :]) & 1).astype(bool)
    local[np.arange(prim.size), prim] = True
    return float(np.sum(np.where(local, 0.0, f[np.minimum(count, f.size - 1)] * cost[prim])))
