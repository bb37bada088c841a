"""Per-worker embedding-row caches for Herald-style runtime scheduling.

Each worker holds three kinds of embedding rows:

* its **primaries** (authoritative copy + optimizer state, from the placement),
* its **secondaries** (HET-GMP 2D replicas, from the placement; never evicted),
* a **cache** of at most ``capacity`` other rows, fetched on demand.

This module manages only the third kind: which rows each worker's cache holds,
their recency, and which rows to evict. Replica *validity* and the
pending-update ("dirty") holder of each row live in the scheduler's per-row
state (:mod:`gmp.train.herald.engine`, which also keeps the stamps below inside its
64-byte row records, as int32), whose compiled kernels touch the caches (an
inlined copy of :func:`cache_touch`), evict (an inlined LRU copy of
:func:`cache_trim`; the function itself for the look-ahead policy); for every victim the
scheduler clears the worker's validity bit and, when the victim's pending
updates are held by the evicting worker, pushes them (``push_evict``).

Design choices (where the papers leave room):

**Capacity is what a worker keeps between iterations.** During an iteration a
worker holds every row its samples need (cDLRM's victim buffer plays this role
when a batch alone exceeds the cache); at the end of the iteration, after the
updates, the cache is trimmed back to ``capacity`` rows. Rows just used are
therefore never evicted before they are used, and a ``capacity`` of 0 means
"nothing is kept across iterations" (every remote row is pulled each time it
is used and its update pushed right after — HET-GMP's uncached 1D behaviour).

**Recency is (iteration, row id).** The rows a worker touches in iteration
t become the most recently used, in ascending row id (the scheduler visits
a batch's rows in id order, which also makes its memory accesses one
ascending sweep), so the eviction order is fully deterministic.

**Policies.**

* ``lru``: evict the least recently used row.
* ``lookahead`` (Herald section 5, "optimization on cache replacement"; the
  window is cDLRM's look-ahead window, section 3.3): evict first, in LRU
  order, the rows that appear in none of the next ``lookahead`` *global*
  batches; only when every cached row is needed within the window fall back to
  plain LRU. "Needed" is judged on the global batches (known in advance, the
  sample order is seeded), not on the future per-worker assignments, which
  depend on the very cache state being decided. With ``lookahead = 0`` the
  policy is exactly LRU.

Storage: LRU with lazy deletion. Every touch stamps the row
(``stamp[row, worker]``, a global touch counter; -1 = not cached) and appends
``(row, stamp)`` to the worker's queue; an entry is *live* while the row's
stamp still equals it, so the live entries, head to tail, are the cached rows
from least to most recently used. Eviction pops from the head, skipping dead
entries; the queue is compacted in place when it fills. A touch costs one
random write and one sequential append (no pointer chasing), eviction is
sequential; the look-ahead scan walks the queue from its head until it has
found enough unneeded rows. The queue holds ``2 * (capacity + touches per
iteration)`` entries per worker, 8 bytes of stamp per row and worker (4 in
the scheduler, which renumbers them with :func:`renumber_stamps` before its
clock overflows: stamps are only compared for equality).
Workers: at most 64 (the scheduler's int64 worker masks).
"""

from __future__ import annotations

import numba
import numpy as np

from ...constants import MAX_WORKERS
from ...errors import TrainingError
from ..tiers.cache import CACHE_POLICIES  # noqa: F401 (one list for the device cache and its model here)


@numba.njit(cache=True)
def compact_queue(w, stamp, q_row, q_stamp, head, tail):  # pragma: no cover - compiled
    """Move the live entries of worker ``w``'s queue to its front, in order."""
    k = 0
    for i in range(head[w], tail[w]):
        r = q_row[w, i]
        if stamp[r, w] == q_stamp[w, i]:
            q_row[w, k] = r
            q_stamp[w, k] = q_stamp[w, i]
            k += 1
    head[w] = 0
    tail[w] = k


@numba.njit(cache=True)
def renumber_stamps(stamp, q_row, q_stamp, head, tail, clock):  # pragma: no cover - compiled
    """Compact every queue and give its live entries the stamps 0, 1, ... (queue order, worker
    by worker); ``clock`` becomes the next free stamp. Stamps are only ever compared for
    equality, so this changes nothing observable: it lets narrow (int32) stamps run forever."""
    c = 0
    for w in range(q_row.shape[0]):
        compact_queue(w, stamp, q_row, q_stamp, head, tail)
        for i in range(tail[w]):
            stamp[q_row[w, i], w] = c
            q_stamp[w, i] = c
            c += 1
    clock[0] = c


@numba.njit(cache=True, inline="always")  # no call: array arguments cost NRT refcounts
def cache_touch(w, r, stamp, q_row, q_stamp, head, tail, size, clock):  # pragma: no cover - compiled
    """Mark row ``r`` most recently used on worker ``w``; insert it if absent.

    ``clock`` is a 1-element int64 array (the global touch counter). Returns
    True when the row was inserted (it was not cached).
    """
    inserted = stamp[r, w] < 0
    if inserted:
        size[w] += 1
    elif q_row[w, tail[w] - 1] == r and q_stamp[w, tail[w] - 1] == stamp[r, w]:
        return False  # already the most recent entry
    if tail[w] == q_row.shape[1]:
        compact_queue(w, stamp, q_row, q_stamp, head, tail)
    clock[0] += 1
    stamp[r, w] = clock[0]
    q_row[w, tail[w]] = r
    q_stamp[w, tail[w]] = clock[0]
    tail[w] += 1
    return inserted


@numba.njit(cache=True)
def cache_trim(w, capacity, lookahead_policy, window_count, stamp, q_row, q_stamp, head, tail, size, out):
    """Evict rows of worker ``w`` until it holds at most ``capacity``.

    Victims are written to ``out`` in eviction order; returns how many.
    ``lookahead_policy``: evict rows with ``window_count[r] == 0`` first (in
    LRU order), then plain LRU. The caller handles validity and dirty rows.
    """  # pragma: no cover - compiled
    need = size[w] - capacity
    k = 0
    if need <= 0:
        return 0
    if lookahead_policy:
        for i in range(head[w], tail[w]):
            if k >= need:
                break
            r = q_row[w, i]
            if stamp[r, w] == q_stamp[w, i] and window_count[r] == 0:
                stamp[r, w] = -1
                out[k] = r
                k += 1
    i = head[w]
    while k < need:
        r = q_row[w, i]
        if stamp[r, w] == q_stamp[w, i]:
            stamp[r, w] = -1
            out[k] = r
            k += 1
        i += 1
    head[w] = i
    size[w] -= k
    if head[w] == tail[w]:
        head[w] = 0
        tail[w] = 0
    return k


@numba.njit(cache=True)
def window_add(indices, sign, window_count):  # pragma: no cover - compiled
    """Add ``sign`` (+1/-1) to ``window_count`` for every distinct id in ``indices``.

    Ids repeated inside one batch count once per occurrence; only ``> 0`` is
    ever tested, so that is harmless (add and remove use the same batch).
    """
    for i in range(indices.size):
        window_count[indices[i]] += sign


class WorkerCaches:
    """The caches of ``num_workers`` workers over ``num_embeddings`` rows.

    Parameters
    ----------
    num_workers, num_embeddings : int
    capacity : int
        Rows each worker keeps between iterations (``--cache-rows``).
    policy : {"lru", "lookahead"}
        Replacement policy (module docstring).
    stamp : optional storage for the stamps: an integer array ``[num_embeddings, num_workers]``
        of -1, possibly a strided view (the scheduler keeps them as int32 inside its per-row
        records, so one cache line holds a row's stamps and state). Its owner must keep
        ``clock`` below the dtype's maximum (:func:`renumber_stamps`).

    Examples
    --------
    >>> c = WorkerCaches(1, 10, capacity=2, policy="lru")
    >>> c.access(0, [1, 2, 3]).tolist()   # all three inserted
    [1, 2, 3]
    >>> c.trim(0).tolist()                # 1 is least recently used
    [1]
    """

    def __init__(self, num_workers: int, num_embeddings: int, *, capacity: int, policy: str = "lru",
                 stamp: np.ndarray | None = None) -> None:
        if not 1 <= num_workers <= MAX_WORKERS:
            raise TrainingError(f"The cache supports 1..{MAX_WORKERS} workers, got {num_workers}.")
        if capacity < 0:
            raise TrainingError(f"The 'cache_rows' parameter must be an int >= 0, got {capacity!r}.")
        if policy not in CACHE_POLICIES:
            raise TrainingError(f"The 'cache_policy' parameter must be one of {list(CACHE_POLICIES)}, got {policy!r}.")
        self.num_workers = int(num_workers)
        self.num_embeddings = int(num_embeddings)
        self.capacity = int(capacity)
        self.policy = policy
        e = max(int(num_embeddings), 1)
        if stamp is None:
            stamp = np.full((e, num_workers), -1, dtype=np.int64)  # last touch; -1: not cached
        elif stamp.shape != (e, num_workers) or stamp.dtype.kind != "i":
            raise TrainingError(f"stamp storage must be a ({e}, {num_workers}) integer array, got "
                                f"{stamp.dtype} {stamp.shape}.")
        self.stamp = stamp
        self.queue_len = 16
        self.q_row = np.zeros((num_workers, self.queue_len), dtype=np.int32)
        self.q_stamp = np.zeros((num_workers, self.queue_len), dtype=np.int64)
        self.head = np.zeros(num_workers, dtype=np.int64)
        self.tail = np.zeros(num_workers, dtype=np.int64)
        self.size = np.zeros(num_workers, dtype=np.int64)
        self.clock = np.zeros(1, dtype=np.int64)
        #: occurrences of each row in the look-ahead window (maintained by the owner)
        self.window_count = np.zeros(e, dtype=np.int32)

    def reserve(self, touches: int) -> None:
        """Make the queues hold ``2 * (capacity + touches)`` entries (call before an iteration)."""
        # a cache never holds more rows than exist: a capacity beyond them (cache_rows 10**15) must not size
        # the queues (it ran out of memory here)
        need = 2 * (min(self.capacity, self.num_embeddings) + int(touches)) + 16
        if need <= self.queue_len:
            return
        for w in range(self.num_workers):
            compact_queue(w, self.stamp, self.q_row, self.q_stamp, self.head, self.tail)
        q_row = np.zeros((self.num_workers, need), dtype=np.int32)
        q_stamp = np.zeros((self.num_workers, need), dtype=np.int64)
        q_row[:, :self.queue_len] = self.q_row
        q_stamp[:, :self.queue_len] = self.q_stamp
        self.q_row, self.q_stamp, self.queue_len = q_row, q_stamp, need

    @property
    def lookahead_policy(self) -> bool:
        return self.policy == "lookahead"

    def contains(self, worker: int, row: int) -> bool:
        return bool(self.stamp[row, worker] >= 0)

    def rows(self, worker: int) -> np.ndarray:
        """Cached rows of ``worker`` from least to most recently used."""
        w = worker
        sl = slice(int(self.head[w]), int(self.tail[w]))
        rows, stamps = self.q_row[w, sl], self.q_stamp[w, sl]
        live = self.stamp[rows, w] == stamps
        return rows[live].astype(np.int64)

    def access(self, worker: int, rows) -> np.ndarray:
        """Touch ``rows`` in order on ``worker``; returns the rows that were inserted (misses)."""
        rows = np.asarray(rows, dtype=np.int64).ravel()
        self.reserve(rows.size)
        missed = []
        for r in rows:
            if cache_touch(worker, r, self.stamp, self.q_row, self.q_stamp, self.head, self.tail, self.size,
                           self.clock):
                missed.append(int(r))
        return np.asarray(missed, dtype=np.int64)

    def trim(self, worker: int) -> np.ndarray:
        """Evict down to ``capacity`` per the policy; returns the victims in eviction order."""
        out = np.empty(max(int(self.size[worker]), 1), dtype=np.int64)
        k = cache_trim(worker, self.capacity, self.lookahead_policy, self.window_count, self.stamp,
                       self.q_row, self.q_stamp, self.head, self.tail, self.size, out)
        return out[:k].copy()

    def set_window(self, batches) -> None:
        """Set the look-ahead window to the given global batches (iterables of row ids)."""
        self.window_count[:] = 0
        for b in batches:
            window_add(np.asarray(b, dtype=np.int64), 1, self.window_count)
