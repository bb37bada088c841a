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
:class:`gmp.train.protocol_herald.HeraldProtocol`): the scheduler runs ``K``
batches ahead in this module's background thread, so at step ``t`` the
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

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

import numpy as np

from ...errors import TrainingError
from ...kernels.csr import gather_csr
from .events import PULL_STALE, BatchSchedule

T = TypeVar("T")
_DONE = object()


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
    """Iterate ``source`` in a background thread, ``lookahead`` items ahead.

    Parameters
    ----------
    source : iterable producing the items (e.g. a RuntimeScheduler)
    lookahead : int >= 1
        Items kept ready (the queue bound; cDLRM's look-ahead window).
    prepare : optional callable run on each item in the background thread
        (e.g. :func:`plan_prefetch`, or a function that fetches rows); its
        result is yielded as ``(item, prepared)``.

    Exceptions raised in the thread are re-raised in the consumer. Stop
    early with :meth:`close` (also on garbage collection of the generator).
    """

    def __init__(self, source: Iterable[T], lookahead: int, *, prepare: Callable[[T], Any] | None = None):
        if lookahead < 1:
            raise TrainingError(f"The 'lookahead' parameter must be an int >= 1 to prefetch, got {lookahead!r}.")
        self.lookahead = int(lookahead)
        self._source = source
        self._prepare = prepare
        self._queue: queue.Queue = queue.Queue(maxsize=self.lookahead)
        self._stop = threading.Event()
        self.produce_s = 0.0
        self.stall_s = 0.0
        self.items = 0
        self._thread = threading.Thread(target=self._run, name="gmp-prefetch", daemon=True)
        self._started = False

    def _put(self, obj) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(obj, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            it = iter(self._source)
            while not self._stop.is_set():
                t0 = time.perf_counter()
                try:
                    item = next(it)
                except StopIteration:
                    break
                prepared = self._prepare(item) if self._prepare is not None else None
                self.produce_s += time.perf_counter() - t0
                if not self._put((item, prepared)):
                    return
            self._put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(exc)

    def __iter__(self) -> Iterator[tuple[T, Any]]:
        if not self._started:
            self._started = True
            self._thread.start()
        try:
            while True:
                t0 = time.perf_counter()
                obj = self._queue.get()
                self.stall_s += time.perf_counter() - t0
                if obj is _DONE:
                    return
                if isinstance(obj, BaseException):
                    raise obj
                self.items += 1
                yield obj
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()
        if self._started and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def stats(self) -> dict[str, float]:
        overlap = 1.0 - self.stall_s / self.produce_s if self.produce_s > 0 else 1.0
        return {"items": self.items, "produce_s": self.produce_s, "stall_s": self.stall_s,
                "overlap": max(0.0, min(1.0, overlap))}
