"""The Herald scheduler's vocabulary: event kinds, one batch's decisions, totals over batches.

Imports nothing of the engine: the trainer's step protocol, the simulator and
the prefetcher read these types without loading the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

#: assignment strategies of the runtime scheduler
ASSIGNMENTS = ("naive", "herald")

#: event kinds (index into EVENT_NAMES)
PULL_MISS, PULL_STALE, PUSH_SYNC, PUSH_PLAN, PUSH_EVICT, PUSH_FLUSH = range(6)
EVENT_NAMES = ("pull_miss", "pull_stale", "push_sync", "push_plan", "push_evict", "push_flush")
PULL_KINDS = (PULL_MISS, PULL_STALE)
PUSH_KINDS = (PUSH_SYNC, PUSH_PLAN, PUSH_EVICT, PUSH_FLUSH)



@dataclass
class BatchSchedule:
    """What the scheduler decided for one global batch.

    ``events`` lists, in order, the transfers around this iteration:
    ``push_plan`` events belong to the *end of the previous iteration* (they
    need this batch's assignment), then this iteration's pulls (before
    forward), its ``push_sync`` pushes and ``push_evict`` pushes (after
    backward). ``event_ready[i]`` is, for a pull, the last iteration after
    which the primary holds the row's latest version.
    """

    iteration: int
    samples: np.ndarray  # int64 [m] global sample ids, batch order
    worker_of: np.ndarray  # int32 [m]
    num_workers: int
    event_kind: np.ndarray
    event_worker: np.ndarray
    event_row: np.ndarray
    event_ready: np.ndarray
    schedule_s: float = 0.0
    index_in_epoch: int = 0
    #: events per kind, when the engine's kernel counted them (else :meth:`counts` computes them)
    kind_counts: np.ndarray | None = field(default=None, repr=False)
    #: pulls ready before ``iteration - 1``, when the engine's kernel counted them
    prefetchable: int | None = field(default=None, repr=False)

    def worker_samples(self, worker: int) -> np.ndarray:
        """Global sample ids of ``worker`` in batch order."""
        return self.samples[self.worker_of == worker]

    def rows(self, kind: int | Sequence[int], worker: int | None = None) -> np.ndarray:
        kinds = (kind,) if isinstance(kind, int) else tuple(kind)
        sel = np.isin(self.event_kind, kinds)
        if worker is not None:
            sel &= self.event_worker == worker
        return self.event_row[sel]

    def pulls(self, worker: int) -> np.ndarray:
        """Rows ``worker`` fetches from their primaries before this iteration."""
        return self.rows(PULL_KINDS, worker)

    def plan(self, worker: int) -> np.ndarray:
        """Rows ``worker`` pushes at the end of the *previous* iteration (its communication plan)."""
        return self.rows(PUSH_PLAN, worker)

    def early_pulls(self) -> np.ndarray:
        """bool [events]: pulls whose row was final one whole iteration early (``ready < t - 1``)."""
        return (self.event_kind <= PULL_STALE) & (self.event_ready < self.iteration - 1)

    def counts(self) -> np.ndarray:
        """int64 [len(EVENT_NAMES)] events per kind."""
        if self.kind_counts is None:
            self.kind_counts = np.bincount(self.event_kind.astype(np.intp), minlength=len(EVENT_NAMES)).astype(np.int64)
        return self.kind_counts


@dataclass
class ScheduleTotals:
    """Event counts accumulated over batches."""

    by_kind: np.ndarray = field(default_factory=lambda: np.zeros(len(EVENT_NAMES), dtype=np.int64))
    prefetchable_pulls: int = 0
    batches: int = 0
    schedule_s: float = 0.0
    first_schedule_s: float = 0.0  # includes loading the compiled kernels

    def ms_per_batch(self) -> float:
        """Mean scheduler time per batch in ms, the first batch excluded when there are others."""
        if self.batches > 1:
            return 1000.0 * (self.schedule_s - self.first_schedule_s) / (self.batches - 1)
        return 1000.0 * self.schedule_s / max(self.batches, 1)

    @property
    def pulls(self) -> int:
        return int(self.by_kind[list(PULL_KINDS)].sum())

    @property
    def pushes(self) -> int:
        return int(self.by_kind[list(PUSH_KINDS)].sum())

    def add(self, sched: BatchSchedule) -> None:
        self.by_kind += sched.counts()
        if sched.prefetchable is not None:  # counted by the engine's kernel
            self.prefetchable_pulls += int(sched.prefetchable)
        else:
            self.prefetchable_pulls += int(np.count_nonzero(sched.early_pulls()))
        self.batches += 1
        self.schedule_s += sched.schedule_s
        if self.batches == 1:
            self.first_schedule_s = sched.schedule_s

    def to_json(self) -> dict:
        out = {name: int(v) for name, v in zip(EVENT_NAMES, self.by_kind)}
        out.update(pulls=self.pulls, pushes=self.pushes, prefetchable_pulls=self.prefetchable_pulls,
                   batches=self.batches)
        return out

