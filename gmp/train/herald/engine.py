"""The Herald engine: location-aware batch assignment and on-demand synchronisation.

:class:`RuntimeScheduler` implements Herald (APNet'22) Algorithm 1 on top of a gmp
:class:`~gmp.placement.Placement`, and the replica state machine that both the
simulator (:mod:`gmp.simulate`) and the trainer's ``--schedule herald`` run,
so that the simulator's counts are the trainer's counts by construction.

The setting
-----------
Worker ``w`` holds its primaries and secondaries (placement) and a cache of at
most ``--cache-rows`` other rows (:mod:`gmp.train.herald.cache`). The primary of a
row plays Herald's parameter server: pushes go to it, pulls come from it.
Training walks *global batches*: a seeded order over the training samples cut
into consecutive chunks of ``N * B`` samples (the last chunk may be shorter).

Assignment (which worker trains which sample of a global batch):

* ``naive``: the global batch is split into N consecutive parts of B samples
  (``np.array_split`` sizes for a short last batch).
* ``herald`` (Algorithm 1): ``score(i, w)`` = number of the sample's rows for
  which ``w`` is the primary or holds a copy *with the latest version*
  (Herald 3.2: "exist in the worker cache (with the latest version)"); a
  primary always counts, since making it current needs only the dirty
  holder's push, never a pull. Samples are visited in batch order and each
  goes to the available worker with the highest score (lines 7-13); a worker
  is unavailable once it has its B samples (line 10), so every worker gets
  exactly B. Ties: fewer samples assigned so far first, then lower worker id.

Replica state per row: ``valid`` (bit mask of workers holding the latest
version) and ``dirty`` (the one non-primary worker holding pending updates, or
-1). Per iteration t, after the assignment:

1. **Reads.** Worker w needs every row of its samples. It is served locally
   when w is the primary or holds a valid copy; otherwise it **pulls** the row
   from the primary (``pull_miss`` when w held no copy, ``pull_stale`` when a
   secondary/cached copy was invalidated). A pulled non-local row enters w's
   cache (or is refreshed there).
2. **Updates** (after backward). Let W be the workers that used the row.
   * One writer, the primary: the primary is current, every other copy stale.
   * One writer w, not the primary: with on-demand synchronisation w keeps
     the update (``dirty = w``; only w's copy is current); without it
     (naive synchronisation, Herald's baseline) w **pushes** it at once
     (``push_sync``) and both w and the primary are current (only the
     primary with ``read_only_replicas``, the trainer's store, where a
     worker never writes its copy of a row it is not primary of).
   * Several writers: their contributions must be combined, so every
     non-primary writer pushes (``push_sync``) and only the primary is current
     (in both modes; a pending update of a writer is part of its push).
3. **Eviction.** Each cache is trimmed to capacity; a victim with pending
   updates is pushed (``push_evict``).
4. **Communication plan** (Algorithm 1 line 15), computed once batch t+1 is
   assigned: every dirty row that a worker other than its holder uses in
   batch t+1 is pushed by the holder at the end of iteration t
   (``push_plan``); the holder stays current. Herald's plan also lists clean
   cached rows; those need no transfer, so they are dropped here.
5. **Epoch end:** every pending update is pushed (``push_flush``).

At staleness 0 this keeps training exactly equal to one worker (Herald 3.3):
a row updated in iteration t by A alone stays only on A until somebody else
reads it, and step 4 pushes it (and every other copy is already invalid)
before that read; a row updated by several workers is combined at its primary
before anyone reads it again. The engine *checks* this invariant on every
read and raises if it is ever violated. Only s = 0 is modelled (Herald's
setting): with a staleness bound s > 0 reads of slightly stale copies would be
allowed and fewer plan pushes needed; that is not simulated. A holder of
pending updates applies the row's optimizer step itself, so an implementation
moves the row's optimizer state (Adagrad's accumulator) with the row; its
bytes are not counted.

Counting: ``pulls`` = rows fetched from a primary into a worker, ``pushes`` =
rows whose accumulated updates are sent to their primary; bytes are rows x
``embedding_dim`` x ``VALUE_BYTES`` (float32, :mod:`gmp.constants`), optimizer state not included. Every pull
carries ``ready``: the last iteration after which the primary holds the row's
latest version -- a pull for iteration t with ``ready < t - 1`` can be issued
at least one whole iteration early (cDLRM look-ahead prefetch); the simulator
reports that share as ``prefetchable_pulls``.

Performance: a step is four numba kernels (``nogil``, so the look-ahead
thread overlaps with training; :mod:`gmp.train.herald.kernels`), at most 64 workers (int64 bit masks):

1. ``assign_mark``: gathers the batch's ids from the dataset CSR into a
   reused buffer, runs Algorithm 1 and marks each row's writers, listing the
   batch's distinct rows (branch-free). Scores are computed 8 workers at a
   time (SWAR: one table lookup and one 64-bit add per id and byte of mask);
   the best worker is the largest of 8 packed keys (branch-free argmax).
2. ``sync_rows``: one pass over the distinct rows in ascending id order:
   plan of t-1, reads (pulls, cache touches), updates. Data-dependent
   decisions are selects and conditional increments, not branches. Events
   are packed into one int64 each (global id, worker, kind bit) and the
   queue compaction a touch may need is done before the pass, so the loop
   holds few pointers and makes no calls.
3. ``trim_all``: cache eviction; LRU is one inlined pass per worker over its
   queue (:func:`gmp.train.herald.cache.cache_trim` for the look-ahead policy).
4. ``assemble``: the exact-size event arrays of the ``BatchSchedule``
   (unpacking the events; it also counts stale and prefetchable pulls).

The work is dominated by random accesses to per-row state, so the state is
laid out by access pattern: the worker masks (valid, read for every id;
writers; local) are side by side in the narrowest integer type (uint8 for <= 8
workers: 3 bytes per row), and the rest of a row -- its cache stamps (int32),
meta and global id -- is one line-aligned 64-byte record (8 workers). Every
pass prefetches the lines it will need a few rows (ids, queue entries)
ahead (``prefetch`` of :mod:`gmp.kernels.simd`), so the misses overlap
with the work on the current row; the eviction scan prefetches in two
stages (stamp line first, then the mask line only for live entries: most
scanned entries are dead). Indices the kernels know to be >= 0 are passed
as uint32 views or masked (``_nn``), which removes numba's negative-index
wraparound code from every access. Measured times:
``docs/herald.md`` (``bench/herald_bench.py``).
"""


from __future__ import annotations

import time
from typing import Iterator

import numpy as np

from ...constants import MAX_WORKERS
from ...errors import TrainingError
from ...kernels.csr import gather_csr
from ...params import check_choice, check_int
from ...placement import Placement
from .cache import WorkerCaches, renumber_stamps, window_add
from .events import PUSH_FLUSH, BatchSchedule, ScheduleTotals
from .kernels import (SPREAD, STAMP_MAX, BatchBuffers, RowState, assemble, assign_mark, flush_pending,
                      line_aligned_empty, mark_used, mask_dtype, sync_rows, trim_all)
from .options import ASSIGNMENTS, HeraldOptions
from .reference import batch_capacities, naive_assignment


def check_num_workers(n: int) -> int:
    """``n`` if the schedule engine takes that many workers (its worker masks are int64), else a TrainingError."""
    if n > MAX_WORKERS:
        raise TrainingError(f"The schedule engine (Herald's, which the static and naive schedules of gmp simulate "
                            f"use too) supports up to {MAX_WORKERS} workers (int64 worker masks), got {n}.")
    return n


class RuntimeScheduler:
    """Herald's data-loader-side scheduler: assigns global batches and tracks every replica.

    Parameters
    ----------
    indptr, indices : sample CSR of the whole dataset (``BipartiteGraph.sample_indptr/indices``)
    placement : Placement (primaries, secondaries)
    batch_size : int
        Samples per worker (B); global batches hold ``num_workers * batch_size``.
    options : HeraldOptions
        The replica model: on-demand synchronisation, caches (:mod:`gmp.train.herald.cache`;
        ``lookahead`` is the window of the ``lookahead`` policy in global batches) and
        ``read_only_replicas``, the trainer's store semantics (:mod:`gmp.train.consistency`):
        a non-primary copy is never written locally, so after a synchronous push only the
        primary is current (the writer refreshes on its next read); when False the writer's
        copy stays current (Herald's cache). Irrelevant to pending (on-demand) updates.
    assignment : {"naive", "herald"}

    Call :meth:`start_epoch` with the epoch's sample order, then
    :meth:`next_batch` until it returns None (which flushes pending updates;
    :attr:`flush` then holds the epoch-end pushes). Caches persist across epochs.
    """

    def __init__(self, indptr, indices, placement: Placement, options: HeraldOptions, *, batch_size: int,
                 assignment: str = "herald", num_trainers: int | None = None, check: bool = True) -> None:
        if not isinstance(options, HeraldOptions):
            raise TrainingError(f"The 'options' parameter must be a HeraldOptions, got {type(options).__name__}.")
        check_choice("assignment", assignment, ASSIGNMENTS, error=TrainingError)
        check_int("batch_size", batch_size, minimum=1, error=TrainingError)
        n = check_num_workers(placement.num_workers)
        self.options = options
        self.indptr = np.asarray(indptr)
        self.placement = placement
        self.num_workers = n
        self.num_trainers = n if num_trainers is None else int(num_trainers)
        if not 1 <= self.num_trainers <= n:
            raise TrainingError(f"num_trainers must be in [1, {n}], got {num_trainers}.")
        self.batch_size = int(batch_size)
        self.assignment = assignment
        self.on_demand = options.on_demand
        self.lookahead = options.lookahead
        self.read_only_replicas = options.read_only_replicas
        self.check = check
        # Compact the rows to those some sample uses: the per-row state (and the
        # caches' 8 bytes per row and worker) then scales with the active rows,
        # not with the id space (33.8M ids at Criteo-Kaggle scale).
        indices = np.asarray(indices)
        if indices.size and int(indices.max()) >= placement.num_embeddings:
            raise TrainingError(f"The samples use embedding id {int(indices.max())} but the placement has "
                                f"{placement.num_embeddings} rows; use the manifest made for this dataset.")
        used = np.zeros(placement.num_embeddings, dtype=np.bool_)
        mark_used(indices, used)
        self.row_ids = np.flatnonzero(used).astype(np.int64)  # compact row -> global id
        remap = np.full(placement.num_embeddings, -1, dtype=np.int32)
        remap[self.row_ids] = np.arange(self.row_ids.size, dtype=np.int32)
        self.indices = remap[indices]
        self.indices_u32 = self.indices.view(np.uint32)  # ids >= 0: no wraparound in the kernels
        e = int(self.row_ids.size)
        self.num_rows = e
        primary = np.asarray(placement.embedding_primary)[self.row_ids].astype(np.int64)
        local = np.left_shift(np.int64(1), primary)
        if placement.num_secondaries:
            emb = np.repeat(np.arange(placement.num_embeddings, dtype=np.int64), np.diff(placement.secondary_indptr))
            row = remap[emb]
            keep = row >= 0  # secondaries of rows no sample uses do not matter
            np.bitwise_or.at(local, row[keep],
                             np.left_shift(np.int64(1), np.asarray(placement.secondary_workers, dtype=np.int64)[keep]))
            del emb, row, keep
        del remap
        mt = mask_dtype(n)
        self.vw = np.zeros((e, 3), dtype=mt)  # (valid, writers, local) side by side: one line per row
        self.vw[:, 2] = local
        self.vw[:, 0] = local  # a secondary starts as a copy of its primary: current
        self.local = self.vw[:, 2]
        self.valid = self.vw[:, 0]
        # One record per row, line-aligned: the cache stamps of the n workers (int32), then
        # (meta, global id) as int64 -- 64 bytes for 5-8 workers (32 for <= 4), so the row pass
        # and the eviction read one cache line per row instead of two.
        self._mcol = (n + 1) // 2  # int64 column of meta (global id next to it)
        words = self._mcol + 2
        width = 4 if words <= 4 else -(-words // 8) * 8
        self._rb = line_aligned_empty((max(e, 1), width), np.int64)
        self._rb32 = self._rb.view(np.int32)  # [rows, 2 * width]: the stamps are its first n columns
        self._rb32[:, :n] = -1  # not cached
        self._rb[:e, self._mcol] = primary | (np.int64(0) << 7) | (np.int64(0) << 14)  # dirty -1, available -1
        self._rb[:e, self._mcol + 1] = self.row_ids
        self.rec = self._rb[:e, self._mcol: self._mcol + 2]  # (meta, global id) of each row
        self.meta = self.rec[:, 0]
        del local, primary
        self.caches = WorkerCaches(n, e, capacity=options.cache_rows, policy=options.cache_policy, stamp=self._rb32[:max(e, 1), :n])
        self.iteration = -1  # global iteration counter across epochs
        self.totals = ScheduleTotals()
        self.flush: np.ndarray | None = None
        self._order = np.zeros(0, dtype=np.int64)
        self._pos = 0
        self._window: list[tuple[np.ndarray, np.ndarray]] = []
        self.max_degree = int(np.diff(self.indptr).max()) if self.indptr.size > 1 else 0
        self.swar = self.max_degree <= 255  # per-sample scores fit a byte (see SPREAD)
        self._buf_ids = -1  # capacity (ids) of the per-batch buffers (_alloc_buffers), reused across batches
        self._b_ptr = np.empty(0, dtype=np.int64)
        self._evicted = np.empty(16, dtype=np.int64)

    # ---- epoch / batch stream

    @property
    def global_batch(self) -> int:
        return self.num_trainers * self.batch_size

    def num_batches(self, order_size: int | None = None) -> int:
        size = self._order.size if order_size is None else order_size
        return -(-size // self.global_batch)

    def start_epoch(self, order) -> None:
        """Begin an epoch over ``order`` (global sample ids in training order)."""
        self._order = np.ascontiguousarray(order, dtype=np.int64)
        self._pos = 0  # index of the next global batch in this epoch
        self._window = []
        self.flush = None
        if self.caches.lookahead_policy and self.lookahead > 0:
            self.caches.window_count[:] = 0
            # window = batches 0 .. K-1, shifted in next_batch; a window past the epoch's last batch holds
            # nothing more, so K larger than the epoch costs (and schedules) what K = its batches does
            for k in range(min(self.lookahead, self.num_batches())):
                self._window_push(k)

    @property
    def position(self) -> int:
        """Index (in the epoch) of the next global batch :meth:`next_batch` schedules."""
        return self._pos

    def batch_samples(self, k: int) -> np.ndarray:
        """Global sample ids of global batch ``k`` of the current epoch."""
        g = self.global_batch
        return self._order[k * g: (k + 1) * g]

    def _window_push(self, k: int) -> None:
        samples = self.batch_samples(k)
        if samples.size:
            _, idx = gather_csr(self.indptr, self.indices, samples)
            window_add(idx, 1, self.caches.window_count)
            self._window.append((np.int64(k), idx))

    def _window_shift(self, k: int) -> None:
        """Make the window batches k+1 .. k+K (called at iteration k before eviction)."""
        while self._window and self._window[0][0] <= k:
            _, idx = self._window.pop(0)
            window_add(idx, -1, self.caches.window_count)
        nxt = k + self.lookahead
        if not self._window or self._window[-1][0] < nxt:
            self._window_push(nxt)

    # ---- one batch

    def next_batch(self) -> BatchSchedule | None:
        """Schedule the next global batch of the epoch; None (after flushing) at the end."""
        k = self._pos
        samples = self.batch_samples(k)
        if samples.size == 0:
            self._finish_epoch()
            return None
        t0 = time.perf_counter()
        self.iteration += 1
        t = self.iteration
        n = self.num_workers
        caps = np.zeros(n, dtype=np.int64)
        caps[:self.num_trainers] = batch_capacities(samples.size, self.num_trainers)
        nnz = samples.size * self.max_degree  # bound on the batch's ids (buffers only)
        if self._buf_ids < nnz or self._b_ptr.size <= samples.size:
            self._alloc_buffers(samples.size, nnz)
        greedy = self.assignment == "herald"
        worker_of = np.empty(samples.size, dtype=np.int32) if greedy else naive_assignment(caps)
        c = self.caches
        _, nt, _ = assign_mark(self.kernel_state(), self.kernel_buffers(), self.indptr, self.indices_u32, samples,
                               caps, greedy, self.swar, SPREAD, worker_of)
        # Visit the batch's rows in ascending id order: it fixes the recency order
        # within an iteration (gmp.train.herald.cache) and turns the kernels' random
        # accesses into one ascending sweep (TLB- and prefetcher-friendly).
        touched = self._touched[:nt]
        touched.sort()
        c.reserve(nnz)  # may reallocate the queues: the state tuple is taken after it
        if c.clock[0] > STAMP_MAX - nnz:  # int32 stamps: at most nnz touches in this batch
            renumber_stamps(c.stamp, c.q_row, c.q_stamp, c.head, c.tail, c.clock)
        out = self._out
        state = self.kernel_state()
        sync_rows(state, self.kernel_buffers(), nt, self.on_demand, not self.read_only_replicas, t)
        n_plan, n_pull, n_sync, violations = (int(x) for x in out[:4])
        if violations and self.check:
            raise TrainingError(f"Herald scheduler invariant broken at iteration {t}: {violations} reads of rows "
                                "whose pending updates another worker still holds. This is a bug in gmp.")
        if c.lookahead_policy and self.lookahead > 0:
            self._window_shift(k)
        if self._evicted.size < int(c.size.max()):
            self._evicted = np.empty(2 * int(c.size.max()), dtype=np.int64)
        bufs = self.kernel_buffers()
        n_evict, _ = trim_all(state, bufs, n, c.capacity, c.lookahead_policy and self.lookahead > 0, t)
        kind, worker, row, ready = assemble(bufs, t, n_plan, n_pull, n_sync, n_evict)
        n_stale, n_early = int(out[4]), int(out[5])
        counts = np.array([n_pull - n_stale, n_stale, n_sync, n_plan, n_evict, 0], dtype=np.int64)
        self._pos += 1
        sched = BatchSchedule(t, samples, worker_of, n, kind, worker, row, ready, kind_counts=counts,
                              prefetchable=n_early)
        sched.schedule_s = time.perf_counter() - t0
        sched.index_in_epoch = k
        self.totals.add(sched)
        return sched

    def kernel_state(self) -> RowState:
        """The per-row state as the kernels take it (the cache's arrays as they are now; benchmarks
        of a single kernel use it, bench/herald_bench.py)."""
        c = self.caches
        return RowState(self.vw, self._rb, self._rb32, np.int64(self._mcol), c.stamp, c.q_row, c.q_stamp, c.head,
                        c.tail, c.size, c.clock, c.window_count)

    def kernel_buffers(self) -> BatchBuffers:
        """The per-batch scratch buffers as the kernels take them (row ids as uint32: no wraparound)."""
        return BatchBuffers(self._b_ptr, self._b_idx.view(np.uint32), self._touched.view(np.uint32), self._plan_e,
                            self._pull_e, self._pull_a, self._sync_e, self._ev_w, self._ev_r, self._evicted,
                            self._out)

    def _alloc_buffers(self, num_samples: int, nnz: int) -> None:
        """Per-batch scratch buffers for up to ``nnz`` ids (reused: no page faults per step)."""
        nnz = max(int(nnz), 1)
        self._buf_ids = nnz
        self._b_ptr = np.empty(num_samples + 1, dtype=np.int64)
        self._b_idx = np.empty(nnz, dtype=np.int32)
        self._touched = np.empty(nnz, dtype=np.int32)
        # packed events of sync_rows (global id << 8 | worker [<< 1 | stale]); pull_a: ready
        self._plan_e, self._pull_e = np.empty(nnz, dtype=np.int64), np.empty(nnz, dtype=np.int64)
        self._pull_a, self._sync_e = np.empty(nnz, dtype=np.int64), np.empty(nnz, dtype=np.int64)
        self._ev_w, self._ev_r = np.empty(nnz + 16, dtype=np.int32), np.empty(nnz + 16, dtype=np.int64)
        self._out = np.zeros(8, dtype=np.int64)

    def _finish_epoch(self) -> None:
        self.flush = flush_pending(self.kernel_state(), self.num_rows, self.iteration)
        self.totals.by_kind[PUSH_FLUSH] += self.flush.shape[1]

    @property
    def primary(self) -> np.ndarray:
        """int64 [num_rows] primary worker of each (compacted) row."""
        return self.meta & 127

    @property
    def dirty(self) -> np.ndarray:
        """int64 [num_rows] worker holding pending updates of each row, -1 if none."""
        return ((self.meta >> 7) & 127) - 1

    @property
    def epoch_size(self) -> int:
        """Samples of the current epoch's order."""
        return int(self._order.size)

    def cached_rows(self, worker: int) -> np.ndarray:
        """Global ids of the rows ``worker``'s cache holds now, ascending."""
        return np.sort(self.row_ids[self.caches.rows(worker)])

    def flush_rows(self, worker: int) -> np.ndarray:
        """Rows ``worker`` pushed at the end of the epoch (after :meth:`next_batch` returned None)."""
        if self.flush is None:
            return np.zeros(0, dtype=np.int64)
        return self.flush[1][self.flush[0] == worker]

    def __iter__(self) -> Iterator[BatchSchedule]:
        while (s := self.next_batch()) is not None:
            yield s

