"""cDLRM-style look-ahead prefetching for the Herald scheduler.

cDLRM (RecSys'21, sections 4-5.1) runs a *prefetching process* a look-ahead
window of ``n`` batches ahead of training: for the upcoming batches it
computes the unique indices each table needs (its Algorithm 1,
``ComputeUniqueIndices``) and fetches those rows before the trainer needs
them, so that training never stalls on a lookup.

Here the prefetcher is a background thread that runs the Herald scheduler
(:class:`gmp.train.herald.engine.RuntimeScheduler`) over the batch stream and
keeps up to ``lookahead`` scheduled batches ready in a bounded queue; each is
annotated with a :class:`PrefetchPlan`: per worker, the unique ids of its
samples and the rows it must pull, split into

* ``early`` pulls -- the primary already held the latest version one whole
  iteration before this batch (``ready < t - 1``): these can be fetched
  while iteration ``t - 1`` computes;
* ``late`` pulls -- rows written in iteration ``t - 1`` (or pushed at its
  end by a communication plan): at staleness 0 they cannot be fetched before
  ``t - 1`` finishes, so they are on the critical path.

Unlike cDLRM, which tolerates rare stale prefetched rows (its section 5.3),
nothing here ever fetches a row before its last update has been pushed, so
``s = 0`` stays exact.

**In the trainer** (``gmp train --schedule herald --lookahead K``, s = 0,
:class:`gmp.train.protocol_herald.HeraldOnDemand`): the scheduler runs ``K``
batches ahead in the trainer's one input-pipeline thread
(:func:`gmp.train.prepare.pipeline_steps`; :class:`Prefetcher` is this
module's thread for :meth:`HeraldSchedule.steps
<gmp.train.herald.schedule.HeraldSchedule.steps>` used outside the trainer), so at step ``t`` the
trainer already has batch ``t + 1``'s schedule. Right after step ``t``'s own
pulls, every primary sends each worker the rows of its ``early`` pulls for
``t + 1`` -- unasked, since the schedule is global and deterministic, so no
ids travel -- in one all-to-all that runs *asynchronously* under torchrun
(``dist.all_to_all_single(..., async_op=True)``) while step ``t`` computes;
step ``t + 1`` waits for it, installs those rows and pulls only the ``late``
ones on demand. The rows are final when sent (no worker updates or pushes
them during step ``t``), so ``s = 0`` stays exact. The local engine hands
them over in memory at once (nothing to overlap). The JSON log's
``prefetch`` object reports ``early_rows``/``late_rows``,
``early_fetch_wait_s`` (time step ``t + 1`` waited for the early exchange:
the part not hidden behind compute) and the scheduler thread's
``scheduler_produce_s``/``scheduler_stall_s``/``scheduler_overlap``.

Measured (:meth:`Prefetcher.stats`): ``produce_s`` (time the background
thread spent scheduling), ``stall_s`` (time the consumer waited for a batch),
``overlap`` = ``1 - stall_s / produce_s`` (share of scheduling hidden behind
compute), and the early/late pull counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

import numpy as np

from ...errors import TrainingError
from ...kernels.csr import gather_csr
from ..tiers.prefetch import StepFeeder
from .events import PULL_STALE, BatchSchedule

T = TypeVar("T")


@dataclass
class PrefetchPlan:
    """Per-worker unique ids and early/late pulls of one scheduled batch."""

    unique_ids: list[np.ndarray]
    early_pulls: list[np.ndarray]
    late_pulls: list[np.ndarray]

    @property
    def num_late(self) -> int:
        return int(sum(a.size for a in self.late_pulls))


def plan_prefetch(sched: BatchSchedule, indptr, indices) -> PrefetchPlan:
    """cDLRM ``ComputeUniqueIndices`` per worker plus the early/late split of its pulls."""
    uniq, early, late = [], [], []
    is_early = sched.early_pulls()
    is_late = (sched.event_kind <= PULL_STALE) & ~is_early
    for w in range(sched.num_workers):
        _, ids = gather_csr(indptr, indices, sched.worker_samples(w))
        uniq.append(np.unique(ids))
        mine = sched.event_worker == w
        early.append(sched.event_row[is_early & mine])
        late.append(sched.event_row[is_late & mine])
    return PrefetchPlan(uniq, early, late)


class Prefetcher(Generic[T]):
    """Iterate ``source`` in a background thread, ``lookahead`` items ahead: the trainer's one
    look-ahead prefetcher (:class:`gmp.train.tiers.StepFeeder`) with no cache to fill.

    Parameters
    ----------
    source : iterable producing the items (e.g. a RuntimeScheduler)
    lookahead : int >= 1
        Items read ahead (cDLRM's look-ahead window).
    prepare : optional callable run on each item in the background thread
        (e.g. :func:`plan_prefetch`); its result is yielded as ``(item, prepared)``.

    Exceptions raised in the thread are re-raised in the consumer. Stop
    early with :meth:`close` (also on garbage collection of the generator).
    """

    def __init__(self, source: Iterable[T], lookahead: int, *, prepare: Callable[[T], Any] | None = None):
        if lookahead < 1:
            raise TrainingError(f"The 'lookahead' parameter must be an int >= 1 to prefetch, got {lookahead!r}.")
        self.lookahead = int(lookahead)
        pairs = ((item, prepare(item) if prepare is not None else None) for item in source)
        self._feeder = StepFeeder([], pairs, lambda _: [], lookahead=self.lookahead, prefetch_depth=1)
        self._gen = None

    def __iter__(self) -> Iterator[tuple[T, Any]]:
        self._gen = iter(self._feeder)
        try:
            for pair, _ in self._gen:
                yield pair
        finally:
            self.close()

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()

    def stats(self) -> dict[str, float]:
        return self._feeder.stats()
