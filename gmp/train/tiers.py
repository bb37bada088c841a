"""cDLRM's capability as a library: rows in host memory or on disk, a device cache that
steps compute on, and a look-ahead prefetcher that fills it (cDLRM, RecSys'21, sections
3-5; Algorithms 1 and 2).

Three pieces, each usable alone:

:class:`HostRows`, :class:`DiskRows` — the *master* tier
    ``num_rows x width`` float32 rows: a worker's rows and their optimizer state side
    by side (``width = row_dim`` for SGD, ``2 * row_dim`` with Adagrad's sum of
    squares). ``HostRows`` is one array (pinned when CUDA is used, so copies to the
    device can be asynchronous); ``DiskRows`` is a file read and written with
    ``os.preadv``/``os.pwritev`` on runs of consecutive rows — never memory-mapped,
    so the process's resident memory stays the cache plus one transfer buffer, not
    the file's pages (file-backed pages of a mapping count in RSS and in a cgroup's
    limit).

:class:`RowCache` — the device tier
    ``capacity`` rows in one tensor on the worker's device; steps compute on its
    slots only. Fully associative (a slot map over the master's rows) where cDLRM is
    set-associative with random ways (its choice for a parallel GPU fill; here the
    CPU manages the tags, as cDLRM's occupancy table does, and a full map loses no
    row to set conflicts — cDLRM's "conflict victims" cannot happen). A row is
    loaded on a miss and written back to the master when evicted dirty. Eviction
    order: rows no step of the look-ahead window uses first (cDLRM: a row is kept
    while the window needs it), least recently used among them, then LRU among
    window rows; a row pinned by the current or an in-flight step is never evicted.

:class:`LookaheadPrefetcher` — cDLRM Algorithm 1 as a rolling window
    Reads the steps' row lists ``lookahead`` steps ahead; for each step entering
    the window it loads the missing rows into the cache and pins them, in a
    background thread, while the current step trains. cDLRM loads a whole window
    of ``n`` batches at once every ``n`` steps (Algorithm 2, line 3); a rolling
    window does the same work in smaller pieces, so the cache holds the rows of at
    most ``lookahead + 1`` steps instead of up to ``2n`` (the reading chosen here:
    the paper's point is that the window's rows are resident before their step,
    which both satisfy). ``lookahead = 0`` loads each step's rows inline.

**Exactness.** Every value a step reads and every update it makes goes through the
cache, and a row's only current copy is either its cache slot (while cached) or its
master row (after write-back), so a run with any tier and any cache size performs
the same float operations on the same values as the all-on-device table: results
are identical bit for bit (tested against a plain table with eviction every step).

**GPU path.** With a CUDA cache the master is pinned host memory (or a disk file read
into a pinned staging buffer), loads are ``copy_(non_blocking=True)`` on a side stream
with an event the step waits on, write-backs synchronise that stream before reading.
Until ``scripts/gpu_smoke.sh`` has run on a GPU, that path is **unverified**.

**Status.** A library with its tests: ``gmp train``'s per-worker store does not use it
yet (``--table-location`` is the next step of issue 12).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from ..errors import TrainingError

FLOAT = np.float32
ROW_ITEM = np.dtype(FLOAT).itemsize


# ------------------------------------------------------------------------------ accounting
@dataclass
class TierStats:
    """What moved between the tiers (rows and bytes each way), hits and misses, stalls."""

    hits: int = 0
    misses: int = 0
    rows_loaded: int = 0  # master -> cache
    rows_written_back: int = 0  # cache -> master (dirty evictions and flushes)
    bytes_loaded: int = 0
    bytes_written_back: int = 0
    prefetch_stall_seconds: float = 0.0  # the step waited for its rows
    peak_pinned_rows: int = 0

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        total = self.hits + self.misses
        d["hit_rate"] = self.hits / total if total else 1.0
        return d


# ------------------------------------------------------------------------------ master tier
def _runs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and lengths of runs of consecutive values in sorted ``rows``."""
    if rows.size == 0:
        return rows[:0], rows[:0]
    brk = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [rows.size]])
    return rows[starts], ends - starts


class HostRows:
    """Master rows in host memory (pinned when ``pin``: needed for asynchronous copies to CUDA)."""

    location = "host"

    def __init__(self, values: np.ndarray, *, pin: bool = False):
        values = np.asarray(values, dtype=FLOAT)
        if pin:
            t = torch.empty(values.shape, dtype=torch.float32, pin_memory=True)
            t.numpy()[...] = values
            self._tensor = t  # keeps the pinned buffer alive
            self.data = t.numpy()
        else:
            self.data = np.array(values, dtype=FLOAT, copy=True)
        self.num_rows, self.width = self.data.shape

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def read(self, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            return self.data[rows]
        np.take(self.data, rows, axis=0, out=out)
        return out

    def write(self, rows: np.ndarray, values: np.ndarray) -> None:
        self.data[rows] = values

    def close(self) -> None:
        pass


class DiskRows:
    """Master rows in a file (row ``r`` at byte ``r * width * 4``), read and written by
    ``preadv``/``pwritev`` on runs of consecutive rows; never memory-mapped.

    ``DiskRows.create(path, values_or_init, ...)`` writes the initial rows in blocks.
    """

    location = "disk"
    BLOCK_ROWS = 1 << 16

    def __init__(self, path: str | os.PathLike, num_rows: int, width: int):
        self.path = Path(path)
        self.num_rows, self.width = int(num_rows), int(width)
        self.row_bytes = self.width * ROW_ITEM
        try:
            self._fd = os.open(self.path, os.O_RDWR)
        except OSError as exc:
            raise TrainingError(f"cannot open the disk tier {self.path}: {exc.strerror}.") from None
        size = os.fstat(self._fd).st_size
        if size != self.num_rows * self.row_bytes:
            os.close(self._fd)
            raise TrainingError(f"{self.path}: {size} bytes, expected {self.num_rows} rows x {self.row_bytes} bytes; "
                                f"the tier file is from another run — delete it.")

    @classmethod
    def create(cls, path: str | os.PathLike, num_rows: int, width: int, init) -> "DiskRows":
        """A new file of ``num_rows`` rows; ``init(start, stop)`` gives rows ``[start, stop)``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            for a in range(0, num_rows, cls.BLOCK_ROWS):
                b = min(num_rows, a + cls.BLOCK_ROWS)
                block = np.ascontiguousarray(init(a, b), dtype=FLOAT)
                if block.shape != (b - a, width):
                    raise TrainingError(f"disk tier init gave shape {block.shape}, expected {(b - a, width)}.")
                f.write(block.tobytes())
        return cls(path, num_rows, width)

    @property
    def nbytes(self) -> int:
        return self.num_rows * self.row_bytes

    def read(self, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((rows.size, self.width), dtype=FLOAT) if out is None else out
        order = np.argsort(rows, kind="stable")
        srt = rows[order]
        buf = np.empty((rows.size, self.width), dtype=FLOAT)
        starts, lens = _runs(srt)
        pos = 0
        for s, n in zip(starts.tolist(), lens.tolist()):
            view = memoryview(buf[pos:pos + n]).cast("B")
            got = os.preadv(self._fd, [view], s * self.row_bytes)
            if got != n * self.row_bytes:
                raise TrainingError(f"{self.path}: short read at row {s} ({got} of {n * self.row_bytes} bytes).")
            pos += n
        out[order] = buf
        return out

    def write(self, rows: np.ndarray, values: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        srt = rows[order]
        vals = np.ascontiguousarray(np.asarray(values, dtype=FLOAT)[order])
        starts, lens = _runs(srt)
        pos = 0
        for s, n in zip(starts.tolist(), lens.tolist()):
            view = memoryview(vals[pos:pos + n]).cast("B")
            try:
                put = os.pwritev(self._fd, [view], s * self.row_bytes)
            except OSError as exc:
                raise TrainingError(f"cannot write the disk tier {self.path}: {exc.strerror}.") from None
            if put != n * self.row_bytes:
                raise TrainingError(f"{self.path}: short write at row {s}; is the disk full?")
            pos += n

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


# ------------------------------------------------------------------------------ device tier
class RowCache:
    """``capacity`` rows of a master tier on ``device`` (see the module docstring).

    Bookkeeping is numpy on the host (cDLRM's occupancy table): ``slot_of[row]``
    (-1 when not cached), ``row_of[slot]`` (-1 when free), ``dirty``, ``pins`` (steps
    that hold the slot), ``last_use`` (LRU clock) and ``window`` (steps of the
    look-ahead window that use the row). All bookkeeping is under ``lock``; data
    copies into a slot happen after the slot is reserved, so a step never sees a
    slot being filled.
    """

    def __init__(self, master, capacity: int, *, device: torch.device | str = "cpu"):
        if capacity < 1:
            raise TrainingError(f"cache_rows must be >= 1, got {capacity}.")
        self.master = master
        self.capacity = int(min(capacity, master.num_rows))
        self.device = torch.device(device)
        self.width = master.width
        self.tensor = torch.zeros(self.capacity, self.width, dtype=torch.float32, device=self.device)
        self.slot_of = np.full(master.num_rows, -1, dtype=np.int32 if self.capacity < 2**31 else np.int64)
        self.row_of = np.full(self.capacity, -1, dtype=np.int64)
        self.dirty = np.zeros(self.capacity, dtype=bool)
        self.pins = np.zeros(self.capacity, dtype=np.int32)
        self.last_use = np.zeros(self.capacity, dtype=np.int64)
        self.window = np.zeros(master.num_rows, dtype=np.int32)
        self.clock = 0
        self.lock = threading.Condition()
        self.stats = TierStats()
        self._free = list(range(self.capacity - 1, -1, -1))
        self._cuda = self.device.type == "cuda"
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None

    # -- the window (counts of upcoming steps using a row) ------------------------------------
    def enter_window(self, rows: np.ndarray) -> None:
        with self.lock:
            np.add.at(self.window, rows, 1)

    def leave_window(self, rows: np.ndarray) -> None:
        with self.lock:
            np.add.at(self.window, rows, -1)

    # -- admission ----------------------------------------------------------------------------
    def admit(self, rows: np.ndarray, *, wait: bool = True) -> tuple[np.ndarray, "torch.cuda.Event | None"]:
        """Make ``rows`` (unique) resident and pin them; returns their slots (and, on CUDA,
        an event the step must wait on). Blocks while every evictable slot is pinned by
        other steps (``wait``), and refuses when ``rows`` alone exceed the capacity."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size > self.capacity:
            raise TrainingError(f"a step uses {rows.size} distinct rows but the cache holds {self.capacity}; "
                                f"raise cache_rows to at least {rows.size}.")
        with self.lock:
            slots = self.slot_of[rows].astype(np.int64)
            hit = slots >= 0
            self.pins[slots[hit]] += 1
            self.stats.hits += int(hit.sum())
            miss_rows = rows[~hit]
            self.stats.misses += int(miss_rows.size)
            new_slots, victims, victim_rows = self._reserve(miss_rows.size, wait)
            # victims' dirty values leave before the slots are refilled (below, outside the lock)
            self.slot_of[victim_rows] = -1
            wb = victim_rows[self.dirty[victims]]
            wb_slots = victims[self.dirty[victims]]
            self.row_of[new_slots] = miss_rows
            self.slot_of[miss_rows] = new_slots
            self.pins[new_slots] += 1
            self.dirty[new_slots] = False
            slots[~hit] = new_slots
            self.clock += 1
            self.last_use[slots] = self.clock
            self.stats.peak_pinned_rows = max(self.stats.peak_pinned_rows, int((self.pins > 0).sum()))
        if wb.size:
            self._write_back(wb_slots, wb)
        event = self._load(new_slots, miss_rows)
        return slots, event

    def _reserve(self, n: int, wait: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` slots: free ones first, then victims (see the eviction order). Under the lock."""
        take = min(n, len(self._free))
        slots = [self._free.pop() for _ in range(take)]
        victims = np.zeros(0, dtype=np.int64)
        need = n - take
        while need:
            cand = np.flatnonzero((self.pins == 0) & (self.row_of >= 0))
            if cand.size >= need:
                used = self.window[self.row_of[cand]] > 0
                # not in the window first, then least recently used (cDLRM; LRU within each group)
                order = np.lexsort((self.last_use[cand], used))
                victims = cand[order[:need]]
                break
            if not wait:
                raise TrainingError("the cache is full of rows pinned by in-flight steps; raise cache_rows.")
            self.lock.wait()
        victim_rows = self.row_of[victims].copy()
        self.row_of[victims] = -1
        return np.concatenate([np.asarray(slots, dtype=np.int64), victims]), victims, victim_rows

    def _load(self, slots: np.ndarray, rows: np.ndarray):
        if rows.size == 0:
            return None
        values = self.master.read(rows)
        self.stats.rows_loaded += int(rows.size)
        self.stats.bytes_loaded += int(values.nbytes)
        if not self._cuda:
            self.tensor.index_copy_(0, torch.as_tensor(slots), torch.from_numpy(values))
            return None
        # the slots may be victims a finished step updated (queued on the compute stream) and whose
        # value was just written back: the side stream starts after everything queued there
        src = torch.from_numpy(values).pin_memory()  # the caching host allocator keeps it until the copy ends
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            idx = torch.as_tensor(slots).pin_memory().to(self.device, non_blocking=True)
            self.tensor.index_copy_(0, idx, src.to(self.device, non_blocking=True))
            event = torch.cuda.Event()
            event.record(self._stream)
        return event  # the step calls torch.cuda.current_stream().wait_event(event) before reading

    def _write_back(self, slots: np.ndarray, rows: np.ndarray) -> None:
        if self._cuda:
            self._stream.synchronize()
        values = self.tensor.index_select(0, torch.as_tensor(slots, device=self.device)).cpu().numpy()
        self.master.write(rows, values)
        self.stats.rows_written_back += int(rows.size)
        self.stats.bytes_written_back += int(values.nbytes)

    def release(self, slots: np.ndarray) -> None:
        """Unpin a finished step's slots."""
        with self.lock:
            np.subtract.at(self.pins, np.asarray(slots, dtype=np.int64), 1)
            self.lock.notify_all()

    def mark_dirty(self, slots: np.ndarray) -> None:
        self.dirty[np.asarray(slots, dtype=np.int64)] = True

    def flush(self) -> None:
        """Write every dirty row back (a checkpoint, an evaluation on the master, the end)."""
        with self.lock:  # held throughout: no slot may be refilled while its old row is written back
            slots = np.flatnonzero(self.dirty & (self.row_of >= 0))
            if slots.size:
                self._write_back(slots, self.row_of[slots])
            self.dirty[slots] = False

    @property
    def nbytes(self) -> int:
        return int(self.tensor.numel() * self.tensor.element_size())

    def resident(self, rows: np.ndarray) -> np.ndarray:
        return self.slot_of[np.asarray(rows, dtype=np.int64)] >= 0


# ------------------------------------------------------------------------------ prefetcher
@dataclass
class ReadyStep:
    index: int
    rows: np.ndarray  # unique master rows of the step
    slots: np.ndarray  # their cache slots (pinned)
    event: object = None  # CUDA event to wait on (None on CPU)


@dataclass
class LookaheadPrefetcher:
    """Feeds steps whose rows are resident (see the module docstring).

    ``steps`` yields each step's unique master rows (int64). Iterate over the
    prefetcher to get :class:`ReadyStep` s; call :meth:`done` after each step.

    Two depths: the *window* (``lookahead`` steps read ahead from the schedule; their
    rows rank last for eviction) and the *admission depth* (``prefetch_depth`` steps
    whose rows are loaded and pinned ahead of the training one, bounded by what the
    cache holds). cDLRM's windows are up to thousands of batches while its cache
    holds far fewer batches' rows: reading ahead is cheap (ids only), loading is not.
    """

    cache: RowCache
    steps: Iterable[np.ndarray]
    lookahead: int = 0
    prefetch_depth: int = 2
    _q: "queue.Queue" = field(init=False, repr=False)
    _thread: threading.Thread | None = field(init=False, default=None, repr=False)
    _error: BaseException | None = field(init=False, default=None, repr=False)
    _stop: threading.Event = field(init=False, default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        if self.lookahead < 0:
            raise TrainingError(f"lookahead must be >= 0, got {self.lookahead}.")
        if self.prefetch_depth < 1:
            raise TrainingError(f"prefetch_depth must be >= 1, got {self.prefetch_depth}.")

    def __iter__(self) -> Iterator[ReadyStep]:
        if self.lookahead == 0:
            for i, rows in enumerate(self.steps):
                rows = np.asarray(rows, dtype=np.int64)
                self.cache.enter_window(rows)
                slots, event = self.cache.admit(rows)
                yield ReadyStep(i, rows, slots, event)
            return
        self._q = queue.Queue(maxsize=max(1, min(self.prefetch_depth, self.lookahead)))
        self._thread = threading.Thread(target=self._run, name="gmp-lookahead", daemon=True)
        self._thread.start()
        try:
            while True:
                t0 = time.perf_counter()
                item = self._q.get()
                self.cache.stats.prefetch_stall_seconds += time.perf_counter() - t0
                if item is None:
                    if self._error is not None:
                        raise self._error
                    return
                yield item
        finally:
            self._stop.set()
            while self._thread.is_alive():  # unblock a producer waiting on a full queue
                try:
                    self._q.get_nowait()
                except queue.Empty:
                    pass
                self._thread.join(timeout=0.05)

    def _run(self) -> None:
        """cDLRM Algorithm 1 as a rolling window: read ahead, then load and pin in order."""
        try:
            it = iter(self.steps)
            ahead: deque = deque()
            exhausted, i = False, 0
            while not self._stop.is_set():
                while not exhausted and len(ahead) < self.lookahead:
                    try:
                        rows = np.asarray(next(it), dtype=np.int64)
                    except StopIteration:
                        exhausted = True
                        break
                    self.cache.enter_window(rows)  # ranks the rows last for eviction
                    ahead.append(rows)
                if not ahead:
                    return
                rows = ahead.popleft()
                slots, event = self.cache.admit(rows)
                self._q.put(ReadyStep(i, rows, slots, event))  # blocks at the admission depth
                i += 1
        except BaseException as exc:  # handed to the training thread
            self._error = exc
        finally:
            self._q.put(None)

    def done(self, step: ReadyStep) -> None:
        """The step has finished: its rows leave the window and are unpinned."""
        self.cache.leave_window(step.rows)
        self.cache.release(step.slots)
