"""The device tier: :class:`RowCache` (fully associative, write-back, eviction outside the
look-ahead window first then LRU, pinned rows never evicted) and its :class:`TierStats`.
See :mod:`gmp.train.tiers`."""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch

from ...errors import TrainingError
from ...params import check_choice
from ._kernels import add_to_window, finish_step, pin_hits, place_misses, swap_rows, take_victims, unpin_slots
from .rows import HostRows

#: names accepted by ``cache_policy`` (``--cache-policy``): the eviction order of the device cache
#: and of the Herald scheduler's model of it (:mod:`gmp.train.herald.cache`)
CACHE_POLICIES = ("lru", "lookahead")


@dataclass
class TierStats:
    """What moved between the tiers (rows and bytes each way), hits and misses, stalls."""

    hits: int = 0
    misses: int = 0
    rows_loaded: int = 0  # master -> cache
    rows_written_back: int = 0  # cache -> master (dirty evictions and flushes)
    bytes_loaded: int = 0
    bytes_written_back: int = 0
    victim_rows_read: int = 0  # rows a step read from the master without admitting them
    victim_rows_written: int = 0  # ... and wrote straight back
    prefetch_stall_seconds: float = 0.0  # the step waited for its rows
    peak_pinned_rows: int = 0
    peak_held_rows: int = 0  # Herald's copies of remote rows held in the same cache

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        total = self.hits + self.misses
        d["hit_rate"] = self.hits / total if total else 1.0
        return d

    def state_dict(self) -> dict:
        """The counters as a checkpoint holds them (a resumed epoch continues them)."""
        return dict(self.__dict__)

    @classmethod
    def from_state(cls, state: dict) -> "TierStats":
        known = cls.__dataclass_fields__
        return cls(**{k: type(known[k].default)(v) for k, v in state.items() if k in known})

    def add(self, moved: "TierStats", sign: int = 1) -> None:
        """Add an admission's counts (``moved``: what :meth:`RowCache.admit_counted` returned); ``sign=-1``
        takes them back."""
        for k in _ADMISSION_COUNTS:
            setattr(self, k, getattr(self, k) + sign * getattr(moved, k))


#: what one admission counts (hits/misses of its rows, its loads and its victims' write-backs)
_ADMISSION_COUNTS = ("hits", "misses", "rows_loaded", "rows_written_back", "bytes_loaded", "bytes_written_back")



def too_small(msg: str) -> TrainingError:
    """The error of a cache too small for a step; ``param`` names the setting its fix raises (the CLI
    words it as its flag)."""
    exc = TrainingError(msg)
    exc.param = "cache_bytes" if "raise cache_bytes" in msg else "cache_rows"
    return exc

class RowCache:
    """``capacity`` rows of a master tier on ``device`` (see the module docstring).

    Bookkeeping is numpy on the host (cDLRM's occupancy table): ``slot_of[row]``
    (-1 when not cached), ``row_of[slot]`` (-1 when free), ``dirty``, ``pins`` (steps
    that hold the slot), ``last_use`` (LRU clock) and ``window`` (steps of the
    look-ahead window that use the row), and the evictable slots in eviction order
    (lists per group and last use, :mod:`._kernels`: kept up to date on every pin,
    unpin and window change, so choosing victims costs the victims, not a scan of the
    cache). All bookkeeping is under ``lock``; data copies into a slot happen after
    the slot is reserved, so a step never sees a slot being filled.
    """

    def __init__(self, master, capacity: int, *, device: torch.device | str = "cpu", policy: str = "lookahead"):
        if capacity < 1 and master.num_rows:
            raise TrainingError(f"cache_rows must be >= 1, got {capacity}.")
        check_choice("cache_policy", policy, CACHE_POLICIES, error=TrainingError)
        self.master = master
        self.policy = policy
        self.capacity = int(min(capacity, master.num_rows))  # slots for master rows
        self.device = torch.device(device)
        self.width = master.width
        self.tensor = torch.zeros(self.capacity, self.width, dtype=torch.from_numpy(np.zeros(0, master.dtype)).dtype,
                                  device=self.device)
        self.slot_of = np.full(master.num_rows, -1, dtype=np.int32 if self.capacity < 2**31 else np.int64)
        self.row_of = np.full(self.capacity, -1, dtype=np.int64)
        self.dirty = np.zeros(self.capacity, dtype=bool)
        self.pins = np.zeros(self.capacity, dtype=np.int32)
        self.last_use = np.zeros(self.capacity, dtype=np.int64)
        self.held = np.zeros(self.capacity, dtype=bool)  # slots of remote rows (hold/drop)
        self.window = np.zeros(master.num_rows, dtype=np.int32)
        self.clock = 0
        self.lock = threading.Condition()
        self.stats = TierStats()
        self._count_victims = True  # off while a resumed step redoes reads counted before the interrupt
        #: what to raise when a step's rows exceed the cache (``n`` rows needed); its owner knows the flag
        self.advice: Callable[[int], str] = lambda n: f"raise cache_rows to at least {n}"
        self._free = np.arange(self.capacity - 1, -1, -1, dtype=np.int64)  # a stack: the top is _free[_nfree - 1]
        self._nfree = self.capacity
        self._own = 0  # master rows resident
        self._num_pinned = 0  # slots with pins > 0
        self._num_held = 0
        self._busy = 0  # admissions whose copies (write-back, load) run outside the lock
        self._cuda = self.device.type == "cuda"
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None
        self._use_window = policy == "lookahead"
        # eviction lists (see _kernels): per slot next/previous/group, per (group, clock) head/tail
        self._nxt = np.full(self.capacity, -1, dtype=np.int64)
        self._prv = np.full(self.capacity, -1, dtype=np.int64)
        self._grp = np.full(self.capacity, -1, dtype=np.int8)
        self._head = np.full((2, 1024), -1, dtype=np.int64)
        self._tail = np.full((2, 1024), -1, dtype=np.int64)
        self._cnt = np.zeros(2, dtype=np.int64)
        self._lo = np.zeros(2, dtype=np.int64)
        self._finished: deque = deque()  # (rows, slots) of finished steps, applied at the next admission

    def _lists(self) -> tuple:
        return self.last_use, self._nxt, self._prv, self._grp, self._head, self._tail, self._cnt

    @classmethod
    def for_remote_rows(cls, width: int, *, dtype, device: torch.device | str = "cpu") -> "RowCache":
        """A cache without master rows here: only rows held for the Herald protocol (an untiered worker)."""
        return cls(HostRows(np.zeros((0, int(width)), dtype=dtype), dtype=dtype), 0, device=device)

    @property
    def num_slots(self) -> int:
        return int(self.row_of.size)

    # -- the window (counts of upcoming steps using a row) ------------------------------------
    def enter_window(self, rows: np.ndarray) -> None:
        self._add_to_window(rows, 1)

    def leave_window(self, rows: np.ndarray) -> None:
        self._add_to_window(rows, -1)

    def _add_to_window(self, rows: np.ndarray, delta: int) -> None:
        rows = np.asarray(rows, dtype=np.int64)  # distinct (a step's unique rows)
        with self.lock:
            add_to_window(rows, delta, self.window, self.slot_of, self.pins, self._use_window, *self._lists(),
                          self._lo)

    # -- admission ----------------------------------------------------------------------------
    def admit(self, rows: np.ndarray, *, wait: bool = True) -> tuple[np.ndarray, "torch.cuda.Event | None"]:
        """Make ``rows`` (unique) resident and pin them; returns their slots (and, on CUDA,
        an event the step must wait on). Blocks while every evictable slot is pinned by
        other steps (``wait``), and refuses when ``rows`` alone exceed the capacity."""
        slots, event, _ = self.admit_counted(rows, wait=wait)
        return slots, event

    def admit_counted(self, rows: np.ndarray, *, wait: bool = True) -> tuple[np.ndarray, "torch.cuda.Event | None",
                                                                            TierStats]:
        """:meth:`admit`, plus what this admission added to :attr:`stats` (a step admitted ahead but
        never trained, because of an interrupt, is taken back with :meth:`uncount`)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size > self.capacity:
            raise too_small(f"a step uses {rows.size} distinct rows but the cache holds {self.capacity}; "
                            f"{self.advice(int(rows.size))}.")
        with self.lock:
            self._drain()
            slots, hits, newly = pin_hits(rows, self.slot_of, self.pins, *self._lists())
            self._num_pinned += newly
            self.stats.hits += hits
            num_miss = rows.size - hits
            self.stats.misses += num_miss
            new_slots = self._reserve(num_miss, wait)
            self.clock += 1
            if self.clock >= self._head.shape[1]:  # one eviction list per clock value
                more = np.full((2, self._head.shape[1]), -1, dtype=np.int64)
                self._head = np.concatenate([self._head, more], axis=1)
                self._tail = np.concatenate([self._tail, more], axis=1)
            # victims' dirty values leave before the slots are refilled (below, outside the lock); every
            # slot is pinned, so in no eviction list: its last use may change
            wb_slots, wb_rows = place_misses(rows, slots, new_slots, self.clock, self.slot_of, self.row_of, self.pins,
                                             self.dirty, self.last_use)
            self._num_pinned += new_slots.size  # free slots or victims: none was pinned
            self.stats.peak_pinned_rows = max(self.stats.peak_pinned_rows, self._num_pinned)
            self._busy += 1
        try:
            miss_rows = self.row_of[new_slots]  # pinned: stable outside the lock
            moved = self._moves(int(wb_rows.size), int(miss_rows.size))
            moved.hits, moved.misses = hits, num_miss
            if not self._cuda and isinstance(self.master, HostRows):
                swap_rows(self.tensor.numpy(), self.master.data, wb_slots, wb_rows, new_slots, miss_rows)
                self._count_moves(wb_rows.size, miss_rows.size)
                event = None
            else:
                if wb_slots.size:
                    self._write_back(wb_slots, wb_rows)
                event = self._load(new_slots, miss_rows)
        finally:
            with self.lock:
                self._busy -= 1
                self.lock.notify_all()
        return slots, event, moved

    def uncount(self, moved: TierStats) -> None:
        """Take back the counts of an admission whose step never trained (an interrupt): a resumed
        run admits that step again, so the epoch's counters stay those of the steps trained."""
        with self.lock:
            self.stats.add(moved, -1)

    @contextlib.contextmanager
    def victims_not_counted(self) -> Iterator[None]:
        """Victim reads and writes in this block are not counted: a resumed step redoes what the
        interrupted run did (and counted, in the checkpoint's counters) before the interrupt."""
        old, self._count_victims = self._count_victims, False
        try:
            yield
        finally:
            self._count_victims = old

    def _moves(self, written: int, loaded: int) -> TierStats:
        """What writing ``written`` rows back and loading ``loaded`` rows count."""
        row_bytes = self.width * self.tensor.element_size()
        return TierStats(rows_written_back=written, bytes_written_back=written * row_bytes, rows_loaded=loaded,
                         bytes_loaded=loaded * row_bytes)

    def _count_moves(self, written: int, loaded: int) -> None:
        self.stats.add(self._moves(written, loaded))

    def _reserve(self, n: int, wait: bool) -> np.ndarray:
        """``n`` slots for master rows: free slots, then victims among the resident master rows (see
        the eviction order, taken out of the lists) while the master rows would exceed ``capacity``
        (there are enough free slots: :meth:`hold` keeps ``capacity`` slots beside the held ones).
        Under the lock."""
        need = max(0, self._own + n - self.capacity)
        victims = np.zeros(0, dtype=np.int64)
        while need:
            victims = take_victims(need, self._use_window, *self._lists(), self._lo)
            if victims.size:
                break
            if not wait:
                raise TrainingError("the cache is full of rows pinned by in-flight steps; raise cache_rows.")
            self.lock.wait()
            self._drain()
            need = max(0, self._own + n - self.capacity)
        slots = self._pop_free(n - victims.size)
        self._own += n - victims.size
        return np.concatenate([np.asarray(slots, dtype=np.int64), victims])

    # -- rows held for another owner (Herald's copies of remote rows) ---------------------------------
    def hold(self, n: int) -> np.ndarray:
        """``n`` slots for rows that have no master here (a Herald copy of a remote row): never
        evicted by this cache (their owner decides, :meth:`drop`) and not counted in ``capacity``
        -- the tensor grows so that ``capacity`` slots stay for master rows. Training thread only
        (growing replaces ``tensor``; no step may hold a view of it across the call)."""
        with self.lock:
            short = n - (self._nfree - (self.capacity - self._own))
            if short > 0:
                self._quiet()
                self._grow(max(self.num_slots, short, 16))
            slots = self._pop_free(n)
            self.held[slots] = True
            self._num_held += n
            self.stats.peak_held_rows = max(self.stats.peak_held_rows, self._num_held)
        return slots

    def drop(self, slots: np.ndarray) -> None:
        """Free held slots (their owner has forgotten the rows)."""
        slots = np.asarray(slots, dtype=np.int64)
        with self.lock:
            if not np.all(self.held[slots]):
                raise TrainingError("drop: a slot not held. This is a bug in gmp.")
            self.held[slots] = False
            self._num_held -= slots.size
            self._push_free(slots)
            self.lock.notify_all()

    def _pop_free(self, n: int) -> np.ndarray:
        """The top ``n`` free slots (last pushed first). Under the lock."""
        out = self._free[self._nfree - n:self._nfree][::-1].copy()
        self._nfree -= n
        return out

    def _push_free(self, slots: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64)
        if self._nfree + slots.size > self._free.size:
            self._free = np.concatenate([self._free[:self._nfree], np.zeros(max(self._free.size, slots.size),
                                                                             dtype=np.int64)])
        self._free[self._nfree:self._nfree + slots.size] = slots
        self._nfree += slots.size

    def _grow(self, add: int) -> None:
        """``add`` more slots (under the lock, no copy in flight)."""
        old = self.num_slots
        if self._cuda:
            self._stream.synchronize()  # a load's copy into the old tensor may still run on the side stream
        self.tensor = torch.cat([self.tensor, torch.zeros(add, self.width, dtype=self.tensor.dtype,
                                                          device=self.device)])
        self.row_of = np.concatenate([self.row_of, np.full(add, -1, dtype=np.int64)])
        for name in ("dirty", "pins", "last_use", "held"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.zeros(add, dtype=a.dtype)]))
        for name in ("_nxt", "_prv", "_grp"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.full(add, -1, dtype=a.dtype)]))
        self._push_free(np.arange(old + add - 1, old - 1, -1, dtype=np.int64))

    def _load(self, slots: np.ndarray, rows: np.ndarray):
        if rows.size == 0:
            return None
        values = self.master.read(rows)
        self.stats.rows_loaded += int(rows.size)
        self.stats.bytes_loaded += int(values.nbytes)
        if not self._cuda:
            self.tensor.numpy()[slots] = values  # numpy's row scatter: about twice torch's index_copy_ on CPU
            return None
        # the slots may be victims a finished step updated (queued on the compute stream) and whose
        # value was just written back: the side stream starts after everything queued there
        src = torch.from_numpy(values).pin_memory()  # the caching host allocator keeps it until the copy ends
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            idx = torch.as_tensor(slots).pin_memory().to(self.device, non_blocking=True)
            self.tensor.index_copy_(0, idx, src.to(self.device, non_blocking=True))
            # the tensor belongs to the compute stream's pool: freed (a cache dropped, or replaced by
            # _grow) while this copy is pending, its memory must not go to a new tensor before it ends
            self.tensor.record_stream(self._stream)
            event = torch.cuda.Event()
            event.record(self._stream)
        return event  # the step calls torch.cuda.current_stream().wait_event(event) before reading

    def _write_back(self, slots: np.ndarray, rows: np.ndarray) -> None:
        if self._cuda:
            self._stream.synchronize()
        if self._cuda:
            values = self.tensor.index_select(0, torch.as_tensor(slots, device=self.device)).cpu().numpy()
        else:
            values = np.take(self.tensor.numpy(), slots, axis=0)
        self.master.write(rows, values)
        self.stats.rows_written_back += int(rows.size)
        self.stats.bytes_written_back += int(values.nbytes)

    def finish(self, rows: np.ndarray, slots: np.ndarray) -> None:
        """A step has finished: its ``rows`` leave the window and its ``slots`` are unpinned -- at the
        next admission (in the prefetch thread, which needs them first), so the training thread only
        queues them."""
        with self.lock:
            self._finished.append((rows, slots))
            self.lock.notify_all()

    def _drain(self) -> None:
        """Apply the finished steps queued by :meth:`finish` (under the lock)."""
        while self._finished:
            rows, slots = self._finished.popleft()
            self._num_pinned -= finish_step(np.asarray(rows, dtype=np.int64), np.asarray(slots, dtype=np.int64),
                                            self.window, self.pins, self._use_window, *self._lists(), self._lo)

    def release(self, slots: np.ndarray) -> None:
        """Unpin a finished step's slots."""
        slots = np.asarray(slots, dtype=np.int64)  # a step's slots are distinct
        with self.lock:
            self._num_pinned -= unpin_slots(slots, self.pins, self.row_of, self.window, self._use_window,
                                            *self._lists(), self._lo)
            self.lock.notify_all()

    def mark_dirty(self, slots: np.ndarray) -> None:
        self.dirty[np.asarray(slots, dtype=np.int64)] = True

    # -- rows outside the step's pinned set (cDLRM's victim table, section 5.2.2) -------------------
    def _quiet(self) -> None:
        """Under the lock: wait until no admission copies data, so every row's current value is
        either in its slot (resident) or in the master (not resident), and stays there while the
        lock is held. On CUDA an admission's copy may still run on the side stream after it returned
        (its step waits on its event; a read or write queued here does not): the current stream waits
        for the side stream, so what it queues next reads and writes after every load (a GPU-side
        wait: the host does not block)."""
        while self._busy:
            self.lock.wait()
        if self._cuda:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)

    def gather(self, rows: np.ndarray) -> torch.Tensor:
        """Current values of ``rows`` ([k, width] on the cache's device, a copy): from their slot when
        resident, else read from the master without admitting them (cDLRM's victim rows: a step
        may touch rows the look-ahead did not load -- pushed copies, the next step's early pulls,
        evaluation)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = torch.empty(rows.size, self.width, dtype=self.tensor.dtype, device=self.device)
        if rows.size == 0:  # nothing to wait for: an admission in flight holds the lock
            return out
        with self.lock:
            self._quiet()
            slots = self.slot_of[rows].astype(np.int64)
            res = slots >= 0
            if res.any():
                out[torch.as_tensor(np.flatnonzero(res), device=self.device)] = \
                    self.tensor.index_select(0, torch.as_tensor(slots[res], device=self.device))
            miss = np.flatnonzero(~res)
            if miss.size:
                values = self.master.read(rows[miss])
                if self._count_victims:
                    self.stats.victim_rows_read += int(miss.size)
                    self.stats.bytes_loaded += int(values.nbytes)
                out[torch.as_tensor(miss, device=self.device)] = torch.from_numpy(values).to(self.device)
        return out

    def scatter(self, rows: np.ndarray, values: torch.Tensor) -> None:
        """Store new values of ``rows`` (distinct): into their slot when resident (marked dirty),
        else straight into the master (a victim row's write-back)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:  # nothing to wait for: an admission in flight holds the lock
            return
        with self.lock:
            self._quiet()
            slots = self.slot_of[rows].astype(np.int64)
            res = slots >= 0
            if res.any():
                self.tensor[torch.as_tensor(slots[res], device=self.device)] = \
                    values[torch.as_tensor(np.flatnonzero(res), device=values.device)].to(self.device)
                self.dirty[slots[res]] = True
            miss = np.flatnonzero(~res)
            if miss.size:
                vals = values[torch.as_tensor(miss, device=values.device)].cpu().numpy()
                self.master.write(rows[miss], vals)
                if self._count_victims:
                    self.stats.victim_rows_written += int(miss.size)
                    self.stats.bytes_written_back += int(vals.nbytes)

    def flush(self) -> None:
        """Write every dirty row back (a checkpoint, an evaluation on the master, the end)."""
        with self.lock:  # held throughout: no slot may be refilled while its old row is written back
            self._quiet()
            slots = np.flatnonzero(self.dirty & (self.row_of >= 0))
            if slots.size:
                self._write_back(slots, self.row_of[slots])
            self.dirty[slots] = False

    def clear(self) -> None:
        """Forget every cached row without writing it back (the master is about to be replaced)."""
        with self.lock:
            self._quiet()
            self._drain()
            if np.any(self.pins):
                raise TrainingError("cannot clear a cache while steps hold rows in it. This is a bug in gmp.")
            live = np.flatnonzero(self.row_of >= 0)
            self.slot_of[self.row_of[live]] = -1
            self.row_of[live] = -1
            self.dirty[live] = False
            self.window[:] = 0
            self._grp[:] = -1
            self._head[:] = -1
            self._tail[:] = -1
            self._cnt[:] = 0
            self._lo[:] = 0
            self._push_free(live)
            self._own = 0

    @property
    def nbytes(self) -> int:
        return int(self.tensor.numel() * self.tensor.element_size())

    def resident(self, rows: np.ndarray) -> np.ndarray:
        return self.slot_of[np.asarray(rows, dtype=np.int64)] >= 0
