"""``gmp train --schedule herald``: the :class:`~gmp.train.schedule.Schedule` that runs the Herald engine.

Registered by name in :data:`gmp.train.registry.SCHEDULES` (no registration at import).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from ...errors import TrainingError
from ...placement import Placement
from ..schedule import NaiveSchedule, Schedule, ScheduleContext, Step
from .engine import RuntimeScheduler
from .events import BatchSchedule
from .options import HeraldOptions
from .prefetch import Prefetcher, plan_prefetch


class HeraldSchedule(Schedule):
    """The naive schedule's global batches, assigned by Herald's Algorithm 1.

    Every rank builds the same :class:`RuntimeScheduler` and runs it over the
    same global batches as :class:`gmp.train.schedule.NaiveSchedule` (same
    order, same ``array_split`` sizes), so the schedule is deterministic and
    needs no communication. ``options`` (:class:`HeraldOptions`) is the replica
    model the assignment scores with; its defaults describe the trainer's store
    (no cache, every non-primary update pushed at once, secondaries written
    through), so the scheduler's counts are exactly the trainer's
    ``remote_rows_read`` (``pull_miss``), ``staleness_refreshes`` (``pull_stale``,
    s = 0) and ``remote_rows_pushed`` (pushes). Other values change the
    assignment (and the counts) but not the model: at s = 0 any split of a
    global batch trains the same model (Herald 3.3). With ``lookahead > 0`` the
    scheduler runs that many batches ahead in a background thread
    (:class:`gmp.train.herald.prefetch.Prefetcher`; :meth:`prefetch_stats`); in the
    trainer in its input pipeline's thread instead (``steps(..., threaded=False)``).

    ``Step.info["herald"]`` holds the :class:`BatchSchedule` and, with a
    look-ahead, ``Step.info["prefetch"]`` the :class:`~gmp.train.herald.prefetch.PrefetchPlan`.
    The trainer's Herald protocol (:mod:`gmp.train.protocol_herald`) walks
    :meth:`batches` instead, which also gives the scheduler's caches.
    """

    def __init__(self, placement: Placement, indptr, indices, num_train: int, batch_size: int,
                 options: HeraldOptions, *, seed: int = 0, shuffle: str = "seeded") -> None:
        self._naive = NaiveSchedule(placement.num_workers, num_train, batch_size, seed=seed, shuffle=shuffle)
        self.num_workers = placement.num_workers
        self.placement = placement
        self.indptr, self.indices = indptr, indices
        self.batch_size = int(batch_size)
        self.options = options
        self.lookahead = options.lookahead
        self._engine: RuntimeScheduler | None = None
        self._position = (0, 0)  # (epoch, batches consumed in that epoch) of self._engine
        self._epoch_started = False
        self._prefetch_stats = {"items": 0, "produce_s": 0.0, "stall_s": 0.0}
        self._new_engine()  # validate the options now, not at the first step

    def _new_engine(self) -> RuntimeScheduler:
        self._engine = RuntimeScheduler(self.indptr, self.indices, self.placement, self.options,
                                        batch_size=self.batch_size, assignment="herald")
        self._position = (0, 0)
        self._epoch_started = False
        return self._engine

    def num_steps(self, epoch: int) -> int:
        return self._naive.num_steps(epoch)

    def _engine_at(self, epoch: int, start: int) -> RuntimeScheduler:
        """The engine positioned at step ``start`` of ``epoch`` (replays from scratch if needed)."""
        if self._engine is None or self._position != (epoch, start) or (start == 0 and self._epoch_started):
            eng = self._new_engine()
            for e in range(epoch):
                eng.start_epoch(self._naive.epoch_order(e))
                for _ in eng:
                    pass
            eng.start_epoch(self._naive.epoch_order(epoch))
            for _ in range(start):
                eng.next_batch()
            self._position = (epoch, start)
        elif start == 0:
            self._engine.start_epoch(self._naive.epoch_order(epoch))
        self._epoch_started = True
        return self._engine

    def batches(self, epoch: int, start: int = 0, *,
                cache_of: Sequence[int] = ()) -> Iterator[tuple[BatchSchedule, list[np.ndarray] | None]]:
        """The scheduled batches of ``epoch`` from ``start`` on, each with the global ids the
        scheduler's cache of each worker in ``cache_of`` holds right after it (ascending)."""
        eng = self._engine_at(epoch, start)
        done = start
        while (sched := eng.next_batch()) is not None:
            done += 1
            if self._engine is eng:  # a prefetch thread left behind must not move a newer engine's position
                self._position = (epoch, done)
            yield sched, [eng.cached_rows(w) for w in cache_of]
        if self._engine is eng:
            self._position = (epoch + 1, 0)
            self._epoch_started = False

    def discard_engine(self) -> None:
        """Forget the engine (a consumer stopped while a look-ahead thread ran ahead): the next
        call replays from scratch to the position asked for."""
        self._engine = None

    def add_prefetch_stats(self, stats: dict[str, float]) -> None:
        """Accumulate a :class:`Prefetcher`'s ``stats()`` into :meth:`prefetch_stats`."""
        for k in ("items", "produce_s", "stall_s"):
            self._prefetch_stats[k] += stats[k]

    def steps(self, epoch: int, start: int = 0, *, threaded: bool = True) -> Iterator[Step]:
        """The epoch's steps from ``start``; with ``lookahead > 0`` the scheduler runs ahead in a
        :class:`Prefetcher` thread unless ``threaded=False`` (the trainer, whose input pipeline runs
        it ahead in its own thread, :func:`gmp.train.prepare.pipeline_steps`)."""
        n = self.num_workers
        if self.lookahead > 0 and threaded:
            pf = Prefetcher((s for s, _ in self.batches(epoch, start)), self.lookahead,
                            prepare=lambda s: plan_prefetch(s, self.indptr, self.indices))
            completed = False
            try:
                for sched, plan in pf:
                    yield Step(sched.index_in_epoch, [sched.worker_samples(w) for w in range(n)],
                               info={"herald": sched, "prefetch": plan})
                completed = True
            finally:
                pf.close()
                self.add_prefetch_stats(pf.stats())
                if not completed:  # the thread ran ahead of the consumer: replay on the next call
                    self.discard_engine()
            return
        for sched, _ in self.batches(epoch, start):
            yield Step(sched.index_in_epoch, [sched.worker_samples(w) for w in range(n)], info={"herald": sched})

    def prefetch_stats(self) -> dict[str, float]:
        st = dict(self._prefetch_stats)
        st["overlap"] = max(0.0, 1.0 - st["stall_s"] / st["produce_s"]) if st["produce_s"] > 0 else 1.0
        return st


def make_herald_schedule(context: ScheduleContext) -> HeraldSchedule:
    """The ``herald`` entry of :data:`gmp.train.registry.SCHEDULES`."""
    ds = context.dataset
    if ds is None:
        raise TrainingError("The 'dataset' of the ScheduleContext is None; the herald schedule needs the "
                            "dataset's samples.")
    options: Any = context.herald if context.herald is not None else HeraldOptions.for_trainer()
    return HeraldSchedule(context.placement, np.asarray(ds.indptr), np.asarray(ds.indices), context.num_train,
                          context.batch_size, options, seed=context.seed, shuffle=context.shuffle)
