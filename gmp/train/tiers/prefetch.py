"""cDLRM Algorithm 1 as a rolling window: :class:`StepFeeder` (several caches, any step
iterator) and :class:`LookaheadPrefetcher` (one cache). See :mod:`gmp.train.tiers`.

:class:`StepFeeder` is also the thread of the trainer's one input pipeline
(:func:`gmp.train.prepare.pipeline_steps`): its ``prepare`` hook runs on each step right after
the step's rows are admitted (resident and pinned), in the same thread, so that the batch
preparation can translate the step's rows to the cache slots they were pinned in."""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, Iterator, Sequence, TypeVar

import numpy as np
import torch

from ...errors import TrainingError
from .cache import RowCache, TierStats, too_small

T = TypeVar("T")
#: steps read into the window per step admitted (the window reaches ``lookahead`` after lookahead / 7 steps)
READ_AHEAD_PER_STEP = 8


@dataclass
class ReadyStep:
    index: int
    rows: np.ndarray  # unique master rows of the step (ascending)
    slots: np.ndarray  # their cache slots (pinned)
    event: object = None  # CUDA event to wait on (None on CPU)
    moved: TierStats | None = None  # what its admission counted (taken back if it never trains)


class StepFeeder(Generic[T]):
    """cDLRM Algorithm 1 as a rolling window over any iterator of steps, for several caches.

    ``rows_of(item)`` gives, per cache, the unique master rows (ascending int64) the step
    computes on. Iterating yields ``(item, [ReadyStep per cache])`` with those rows resident
    and pinned; call :meth:`done` with the list after the step. With ``lookahead > 0`` a
    background thread reads the items ``lookahead`` steps ahead (their rows rank last for
    eviction) and loads and pins ``prefetch_depth`` steps ahead of the training one, while
    it trains; ``lookahead = 0`` loads each step inline. The item iterator itself is
    advanced in that thread (it must not need the training thread's state).

    ``prepare(item, ready)``, when given, runs right after a step's admission (in the thread
    with ``lookahead > 0``, else inline) and its result is yielded instead of ``item``: the rows
    stay pinned in ``ready``'s slots until :meth:`done`, so what it derives from them holds
    for the step. It must not change what a step reads (it runs while the earlier step trains).

    Two depths: the *window* (read ahead: ids only, cheap) and the *admission depth*
    (loaded and pinned: bounded by what the caches hold). cDLRM's windows are up to
    thousands of batches while its cache holds far fewer batches' rows.
    """

    def __init__(self, caches: Sequence[RowCache], items: Iterable[T], rows_of: Callable[[T], list],
                 *, lookahead: int = 0, prefetch_depth: int = 2,
                 prepare: Callable[[T, list[ReadyStep]], T] | None = None):
        if lookahead < 0:
            raise TrainingError(f"The 'lookahead' parameter must be an int >= 0, got {lookahead}.")
        if prefetch_depth < 1:
            raise TrainingError(f"The 'prefetch_depth' parameter must be an int >= 1, got {prefetch_depth}.")
        self.caches = list(caches)
        self.items = items
        self.rows_of = rows_of
        self.lookahead = int(lookahead)
        self.prefetch_depth = int(prefetch_depth)
        self.prepare = prepare
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.produce_s = 0.0  # seconds spent advancing ``items`` and computing their rows
        self.stall_s = 0.0  # seconds the training thread waited for a step (its rows included)
        self.num_items = 0
        self._largest = [0] * len(self.caches)  # rows of the largest step admitted, per cache

    def stats(self) -> dict[str, float]:
        """``items``, ``produce_s``, ``stall_s`` and ``overlap`` = 1 - stall / produce (the share of the
        read-ahead hidden behind training)."""
        overlap = 1.0 - self.stall_s / self.produce_s if self.produce_s > 0 else 1.0
        return {"items": self.num_items, "produce_s": self.produce_s, "stall_s": self.stall_s,
                "overlap": max(0.0, min(1.0, overlap))}

    def _next(self, it) -> tuple[T, list[np.ndarray]]:
        """The next item and its rows per cache (raises StopIteration)."""
        t0 = time.perf_counter()
        try:
            item = next(it)
            rows_list = [np.asarray(r, dtype=np.int64) for r in self.rows_of(item)] if self.caches else []
        finally:
            self.produce_s += time.perf_counter() - t0
        return item, rows_list

    def _fits(self, rows_list, rest: Callable[[], Iterator[list]]) -> None:
        """Refuse a step whose rows exceed a cache, naming a size that holds every step of the epoch:
        ``rest()`` gives the rows of its remaining steps (read only now, on the way to the error)."""
        if all(r.size <= c.capacity for c, r in zip(self.caches, rows_list)):
            for k, r in enumerate(rows_list):
                self._largest[k] = max(self._largest[k], int(r.size))
            return
        need = [max(a, int(r.size)) for a, r in zip(self._largest, rows_list)]
        for more in rest():
            need = [max(a, int(r.size)) for a, r in zip(need, more)]
        k = next(k for k, (c, r) in enumerate(zip(self.caches, rows_list)) if r.size > c.capacity)
        most = max(need)
        raise too_small(f"a step uses {rows_list[k].size} distinct rows but the cache holds "
                        f"{self.caches[k].capacity}; the largest step of the epoch uses {most}: "
                        f"{self.caches[k].advice(most)}.")

    def _rest(self, it, ahead=()) -> Callable[[], Iterator[list]]:
        def rows_lists():
            for _, rows_list in ahead:
                yield rows_list
            while True:
                try:
                    yield self._next(it)[1]
                except StopIteration:
                    return
        return rows_lists

    def _admit(self, i: int, rows_list) -> list[ReadyStep]:
        out = []
        for cache, rows in zip(self.caches, rows_list):
            slots, event, moved = cache.admit_counted(rows)
            out.append(ReadyStep(i, rows, slots, event, moved))
        return out

    def _prepared(self, item: T, ready: list[ReadyStep]) -> T:
        """``prepare(item, ready)`` (the step given back unpinned and uncounted if it raises)."""
        if self.prepare is None:
            return item
        t0 = time.perf_counter()
        try:
            return self.prepare(item, ready)
        except BaseException:
            self.discard(ready)
            raise
        finally:
            self.produce_s += time.perf_counter() - t0

    def __iter__(self) -> Iterator[tuple[T, list[ReadyStep]]]:
        if self.lookahead == 0:
            it = iter(self.items)
            i = -1
            while True:
                try:
                    item, rows_list = self._next(it)
                except StopIteration:
                    return
                i += 1
                self.num_items += 1
                for cache, rows in zip(self.caches, rows_list):
                    cache.enter_window(rows)
                self._fits(rows_list, self._rest(it))
                t0 = time.perf_counter()
                ready = self._admit(i, rows_list)  # inline: the whole load is a stall
                item = self._prepared(item, ready)
                self._add_stall(time.perf_counter() - t0)
                yield item, ready
            return
        self._q: queue.Queue = queue.Queue(maxsize=max(1, min(self.prefetch_depth, self.lookahead)))
        self._thread = threading.Thread(target=self._run, name="gmp-lookahead", daemon=True)
        self._thread.start()
        try:
            while True:
                t0 = time.perf_counter()
                got = self._q.get()
                self._add_stall(time.perf_counter() - t0)
                if got is None:
                    if self._error is not None:
                        raise self._error
                    return
                self.num_items += 1
                yield got
        finally:
            self._stop.set()
            while self._thread.is_alive():  # unblock a producer waiting on a full queue
                try:
                    got = self._q.get_nowait()
                    if got is not None:
                        self.discard(got[1])  # admitted ahead, never trained
                except queue.Empty:
                    pass
                self._thread.join(timeout=0.05)
            while True:
                try:
                    got = self._q.get_nowait()
                except queue.Empty:
                    break
                if got is not None:
                    self.discard(got[1])

    def _add_stall(self, seconds: float) -> None:
        self.stall_s += seconds
        if self.caches:
            self.caches[0].stats.prefetch_stall_seconds += seconds
            for c in self.caches[1:]:
                c.stats.prefetch_stall_seconds += seconds

    def _run(self) -> None:
        """Read ahead (window), then load and pin in order; hand steps over at the admission depth."""
        cuda = [c.device for c in self.caches if c.device.type == "cuda" and c.device.index is not None]
        if cuda:  # a new thread's current device is 0: another rank's GPU on a machine of several
            torch.cuda.set_device(cuda[0])
        ahead: deque = deque()
        it = iter(self.items)
        try:
            exhausted, i = False, 0
            while not self._stop.is_set():
                # the window fills READ_AHEAD_PER_STEP steps per admitted step, so the first step's rows
                # are loaded at once instead of after reading the whole window
                for _ in range(READ_AHEAD_PER_STEP):
                    if exhausted or len(ahead) >= self.lookahead:
                        break
                    try:
                        item, rows_list = self._next(it)
                    except StopIteration:
                        exhausted = True
                        break
                    for cache, rows in zip(self.caches, rows_list):
                        cache.enter_window(rows)  # ranks the rows last for eviction
                    ahead.append((item, rows_list))
                if not ahead:
                    return
                item, rows_list = ahead.popleft()
                self._fits(rows_list, self._rest(it, ahead))
                ready = self._admit(i, rows_list)
                item = self._prepared(item, ready)
                while not self._stop.is_set():
                    try:
                        self._q.put((item, ready), timeout=0.05)  # blocks at the admission depth
                        break
                    except queue.Full:
                        continue
                else:
                    self.discard(ready)
                i += 1
        except BaseException as exc:  # handed to the training thread
            self._error = exc
        finally:
            for _, rows_list in ahead:  # read ahead, never admitted
                for cache, rows in zip(self.caches, rows_list):
                    cache.leave_window(rows)
            close = getattr(it, "close", None)
            if close is not None:
                close()  # a generator's own clean-up (e.g. a scheduler that ran ahead) runs now
            while True:  # the end mark; once the training thread has left, it drains without waiting for it
                try:
                    self._q.put(None, timeout=0.05)
                    break
                except queue.Full:
                    if self._stop.is_set():
                        break

    def done(self, ready: list[ReadyStep]) -> None:
        """The step has finished: its rows leave the window and are unpinned (queued: applied by the
        next admission, in the prefetch thread when there is one)."""
        for cache, r in zip(self.caches, ready):
            cache.finish(r.rows, r.slots)

    def discard(self, ready: list[ReadyStep]) -> None:
        """A step admitted but never trained (an interrupt stopped the run before it): unpin it and
        take back its admission's counts, so that the caches' counters are those of the steps
        trained (what a checkpoint carries into the resumed run, which admits the step again)."""
        self.done(ready)
        for cache, r in zip(self.caches, ready):
            if r.moved is not None:
                cache.uncount(r.moved)


class LookaheadPrefetcher:
    """One cache fed by a :class:`StepFeeder`: ``steps`` yields each step's unique master rows.

    Iterate to get :class:`ReadyStep` s; call :meth:`done` after each step.
    """

    def __init__(self, cache: RowCache, steps: Iterable[np.ndarray], lookahead: int = 0, prefetch_depth: int = 2):
        self.cache = cache
        self._feeder = StepFeeder([cache], steps, lambda rows: [rows], lookahead=lookahead,
                                  prefetch_depth=prefetch_depth)

    def __iter__(self) -> Iterator[ReadyStep]:
        for _, (ready,) in self._feeder:
            yield ready

    def done(self, step: ReadyStep) -> None:
        self._feeder.done([step])
