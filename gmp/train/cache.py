"""Per-worker embedding-row caches for Herald-style runtime scheduling.

Each worker holds three kinds of embedding rows:

* its **primaries** (authoritative copy + optimizer state, from the placement),
* its **secondaries** (HET-GMP 2D replicas, from the placement; never evicted),
* a **cache** of at most ``capacity`` other rows, fetched on demand.

This module manages only the third kind: which rows each worker's cache holds,
their recency, and which rows to evict. Replica *validity* and pending updates
live with the scheduler state (:mod:`gmp.train.scheduler`), which calls
:func:`cache_touch` / :func:`cache_trim` from its compiled kernels; dirty
("pending-update") tracking is the ``dirty`` array passed to
:func:`cache_trim`: an evicted row whose pending updates are held by the
evicting worker must be pushed to its primary, and the trim reports it.

Design choices (where the papers leave room):

**Capacity is what a worker keeps between iterations.** During an iteration a
worker holds every row its samples need (cDLRM's victim buffer plays this role
when a batch alone exceeds the cache); at the end of the iteration, after the
updates, the cache is trimmed back to ``capacity`` rows. Rows just used are
therefore never evicted before they are used, and a ``capacity`` of 0 means
"nothing is kept across iterations" (every remote row is pulled each time it
is used and its update pushed right after — HET-GMP's uncached 1D behaviour).

**Recency is (iteration, first use in batch order).** A row touched in
iteration t is moved to the most-recently-used end in the order in which the
scheduler visits rows (first occurrence in the global batch, samples in batch
order, ids in CSR order), so the eviction order is fully deterministic.

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

Storage: a doubly linked list per worker threaded through dense
``int32 [num_workers, num_embeddings]`` ``prev``/``next`` arrays (8 bytes per
row per worker) plus a membership bit mask per row (``int64``, hence at most
63 workers); every operation is O(1) except the look-ahead scan, which walks
the list from its LRU end until it has found enough unneeded rows.
"""

from __future__ import annotations

import numba
import numpy as np

from ..errors import TrainingError

#: names accepted by ``--cache-policy``
CACHE_POLICIES = ("lru", "lookahead")

MAX_WORKERS = 63


@numba.njit(cache=True)
def _unlink(w, r, prev, nxt, head, tail):  # pragma: no cover - compiled
    p = prev[w, r]
    n = nxt[w, r]
    if p >= 0:
        nxt[w, p] = n
    else:
        head[w] = n
    if n >= 0:
        prev[w, n] = p
    else:
        tail[w] = p
    prev[w, r] = -1
    nxt[w, r] = -1


@numba.njit(cache=True)
def _append(w, r, prev, nxt, head, tail):  # pragma: no cover - compiled
    t = tail[w]
    prev[w, r] = t
    nxt[w, r] = -1
    if t >= 0:
        nxt[w, t] = r
    else:
        head[w] = r
    tail[w] = r


@numba.njit(cache=True)
def cache_touch(w, r, cached, prev, nxt, head, tail, size):  # pragma: no cover - compiled
    """Mark row ``r`` most recently used on worker ``w``; insert it if absent.

    Returns True when the row was inserted (it was not cached).
    """
    bit = np.int64(1) << np.int64(w)
    if cached[r] & bit:
        if tail[w] != r:
            _unlink(w, r, prev, nxt, head, tail)
            _append(w, r, prev, nxt, head, tail)
        return False
    cached[r] |= bit
    _append(w, r, prev, nxt, head, tail)
    size[w] += 1
    return True


@numba.njit(cache=True)
def cache_trim(w, capacity, lookahead_policy, window_count, cached, prev, nxt, head, tail, size, out):
    """Evict rows of worker ``w`` until it holds at most ``capacity``.

    Victims are written to ``out`` in eviction order; returns how many.
    ``lookahead_policy``: evict rows with ``window_count[r] == 0`` first (in
    LRU order), then plain LRU. The caller handles validity and dirty rows.
    """  # pragma: no cover - compiled
    need = size[w] - capacity
    k = 0
    if need <= 0:
        return 0
    bit = np.int64(1) << np.int64(w)
    if lookahead_policy:
        r = head[w]
        while r >= 0 and k < need:
            n = nxt[w, r]
            if window_count[r] == 0:
                _unlink(w, r, prev, nxt, head, tail)
                cached[r] &= ~bit
                out[k] = r
                k += 1
            r = n
    while k < need:
        r = head[w]
        _unlink(w, r, prev, nxt, head, tail)
        cached[r] &= ~bit
        out[k] = r
        k += 1
    size[w] -= k
    return k


@numba.njit(cache=True)
def cache_remove(w, r, cached, prev, nxt, head, tail, size):  # pragma: no cover - compiled
    bit = np.int64(1) << np.int64(w)
    if cached[r] & bit:
        _unlink(w, r, prev, nxt, head, tail)
        cached[r] &= ~bit
        size[w] -= 1


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

    Examples
    --------
    >>> c = WorkerCaches(1, 10, capacity=2, policy="lru")
    >>> c.access(0, [1, 2, 3]).tolist()   # all three inserted
    [1, 2, 3]
    >>> c.trim(0).tolist()                # 1 is least recently used
    [1]
    """

    def __init__(self, num_workers: int, num_embeddings: int, *, capacity: int, policy: str = "lru") -> None:
        if not 1 <= num_workers <= MAX_WORKERS:
            raise TrainingError(f"The cache supports 1..{MAX_WORKERS} workers, got {num_workers}.")
        if capacity < 0:
            raise TrainingError(f"--cache-rows must be >= 0, got {capacity}.")
        if policy not in CACHE_POLICIES:
            raise TrainingError(f"Unknown cache policy {policy!r}; expected one of {', '.join(CACHE_POLICIES)}.")
        self.num_workers = int(num_workers)
        self.num_embeddings = int(num_embeddings)
        self.capacity = int(capacity)
        self.policy = policy
        e = max(int(num_embeddings), 1)
        self.cached = np.zeros(e, dtype=np.int64)  # bit w: row cached on worker w
        self.prev = np.full((num_workers, e), -1, dtype=np.int32)
        self.next = np.full((num_workers, e), -1, dtype=np.int32)
        self.head = np.full(num_workers, -1, dtype=np.int32)
        self.tail = np.full(num_workers, -1, dtype=np.int32)
        self.size = np.zeros(num_workers, dtype=np.int64)
        #: occurrences of each row in the look-ahead window (maintained by the owner)
        self.window_count = np.zeros(e, dtype=np.int32)

    @property
    def lookahead_policy(self) -> bool:
        return self.policy == "lookahead"

    def contains(self, worker: int, row: int) -> bool:
        return bool(self.cached[row] >> worker & 1)

    def rows(self, worker: int) -> np.ndarray:
        """Cached rows of ``worker`` from least to most recently used."""
        out = []
        r = int(self.head[worker])
        while r >= 0:
            out.append(r)
            r = int(self.next[worker, r])
        return np.asarray(out, dtype=np.int64)

    def access(self, worker: int, rows) -> np.ndarray:
        """Touch ``rows`` in order on ``worker``; returns the rows that were inserted (misses)."""
        missed = []
        for r in np.asarray(rows, dtype=np.int64).ravel():
            if cache_touch(worker, r, self.cached, self.prev, self.next, self.head, self.tail, self.size):
                missed.append(int(r))
        return np.asarray(missed, dtype=np.int64)

    def trim(self, worker: int) -> np.ndarray:
        """Evict down to ``capacity`` per the policy; returns the victims in eviction order."""
        out = np.empty(max(int(self.size[worker]), 1), dtype=np.int64)
        k = cache_trim(worker, self.capacity, self.lookahead_policy, self.window_count, self.cached,
                       self.prev, self.next, self.head, self.tail, self.size, out)
        return out[:k].copy()

    def set_window(self, batches) -> None:
        """Set the look-ahead window to the given global batches (iterables of row ids)."""
        self.window_count[:] = 0
        for b in batches:
            window_add(np.asarray(b, dtype=np.int64), 1, self.window_count)
