"""Herald runtime scheduling: location-aware batch assignment and on-demand synchronisation.

This module implements Herald (APNet'22) Algorithm 1 on top of a gmp
:class:`~gmp.placement.Placement`, and the replica state machine that both the
simulator (:mod:`gmp.simulate`) and the trainer's ``--schedule herald`` run,
so that the simulator's counts are the trainer's counts by construction.

The setting
-----------
Worker ``w`` holds its primaries and secondaries (placement) and a cache of at
most ``--cache-rows`` other rows (:mod:`gmp.train.cache`). The primary of a
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
``embedding_dim`` x 4 (float32), optimizer state not included. Every pull
carries ``ready``: the last iteration after which the primary holds the row's
latest version -- a pull for iteration t with ``ready < t - 1`` can be issued
at least one whole iteration early (cDLRM look-ahead prefetch); the simulator
reports that share as ``prefetchable_pulls``.

Performance: a step is four numba kernels (``nogil``, so the look-ahead
thread overlaps with training), at most 63 workers (int64 bit masks):

1. ``_assign_mark``: gathers the batch's ids from the dataset CSR into a
   reused buffer, runs Algorithm 1 and marks each row's writers, listing the
   batch's distinct rows (branch-free). Scores are computed 8 workers at a
   time (SWAR: one table lookup and one 64-bit add per id and byte of mask);
   the best worker is the largest of 8 packed keys (branch-free argmax).
2. ``_sync_rows``: one pass over the distinct rows in ascending id order:
   plan of t-1, reads (pulls, cache touches), updates. Data-dependent
   decisions are selects and conditional increments, not branches. Events
   are packed into one int64 each (global id, worker, kind bit) and the
   queue compaction a touch may need is done before the pass, so the loop
   holds few pointers and makes no calls.
3. ``_trim_all``: cache eviction; LRU is one inlined pass per worker over its
   queue (:func:`gmp.train.cache.cache_trim` for the look-ahead policy).
4. ``_assemble``: the exact-size event arrays of the ``BatchSchedule``
   (unpacking the events; it also counts stale and prefetchable pulls).

The work is dominated by random accesses to per-row state, so the state is
laid out by access pattern: the worker masks (valid, read for every id;
writers; local) are side by side in the narrowest integer type (uint8 for <= 8
workers: 3 bytes per row), and the rest of a row -- its cache stamps (int32),
meta and global id -- is one line-aligned 64-byte record (8 workers). Every
pass prefetches the lines it will need a few rows (ids, queue entries)
ahead (``prefetch`` of :mod:`gmp.partition._simd`), so the misses overlap
with the work on the current row; the eviction scan prefetches in two
stages (stamp line first, then the mask line only for live entries: most
scanned entries are dead). Indices the kernels know to be >= 0 are passed
as uint32 views or masked (``_nn``), which removes numba's negative-index
wraparound code from every access. Measured times:
``docs/herald.md`` (``bench/herald_bench.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numba
import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros  # llvm.cttz

from ..errors import TrainingError
from ..partition._simd import prefetch
from ..placement import Placement
from .cache import MAX_WORKERS, WorkerCaches, _compact, cache_trim, renumber_stamps, window_add

#: assignment strategies of the runtime scheduler
ASSIGNMENTS = ("naive", "herald")

#: event kinds (index into EVENT_NAMES)
PULL_MISS, PULL_STALE, PUSH_SYNC, PUSH_PLAN, PUSH_EVICT, PUSH_FLUSH = range(6)
EVENT_NAMES = ("pull_miss", "pull_stale", "push_sync", "push_plan", "push_evict", "push_flush")
PULL_KINDS = (PULL_MISS, PULL_STALE)
PUSH_KINDS = (PUSH_SYNC, PUSH_PLAN, PUSH_EVICT, PUSH_FLUSH)


# --------------------------------------------------------------------------- kernels


@numba.njit(cache=True, nogil=True)
def _gather(indptr, indices, samples):  # pragma: no cover - compiled
    m = samples.size
    b_indptr = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        s = samples[i]
        b_indptr[i + 1] = b_indptr[i] + (indptr[s + 1] - indptr[s])
    b_indices = np.empty(b_indptr[m], dtype=np.int64)
    for i in range(m):
        s = samples[i]
        o = b_indptr[i]
        for j in range(indptr[s], indptr[s + 1]):
            b_indices[o + j - indptr[s]] = indices[j]
    return b_indptr, b_indices


# Per-row state (compacted rows), split by how often the kernels touch it:
#   vw[r, 0]  (valid) workers holding the latest version; the primary's bit is always set
#             (a primary is current after at most a push, and always scores,
#             Algorithm 1 line 3). Read for every id of a batch, so the masks are
#             stored in the narrowest unsigned type that holds N bits (uint8 for
#             N <= 8: 8 MB for Criteo-Kaggle's 2.6M active rows, resident in L3).
#   vw[r, 1]  (writers) workers using the row in the batch being processed (0 between
#             batches); next to the validity mask, so marking a sample's rows hits L1
#   vw[r, 2]  (local) primary + secondaries (resident for good)
#   rb[r]     one line-aligned record per row (64 bytes for 5-8 workers, 32 for <= 4), read
#             once per distinct row of a batch and once per evicted cache entry:
#             the cache stamps of the N workers as int32 (``rb32[r, :N]``, which is
#             ``WorkerCaches.stamp``; renumbered before the clock overflows), then
#             rb[r, mc]     (meta) int64: primary | (dirty + 1) << 7 | (available + 1) << 14
#             rb[r, mc + 1] the row's global id (for the events)
#             (``self.rec`` is the [rows, 2] view of (meta, global id))


def _line_aligned_empty(shape, dtype, line: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a ``line``-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    buf = np.empty(nbytes + line, dtype=np.uint8)
    off = (-buf.ctypes.data) % line
    return buf[off: off + nbytes].view(dtype).reshape(shape)


def _mask_dtype(num_workers: int):
    """Narrowest dtype holding ``num_workers`` bits (bit masks are read as int64 in the kernels)."""
    for dt, bits in ((np.uint8, 8), (np.uint16, 16), (np.uint32, 32)):
        if num_workers <= bits:
            return dt
    return np.int64


_M7 = np.int64(127)


@numba.njit(cache=True, inline="always")  # no call: array arguments cost NRT refcounts
def _prim(meta):  # pragma: no cover - compiled
    return meta & _M7


@numba.njit(cache=True, inline="always")  # no call: array arguments cost NRT refcounts
def _dirty(meta):  # pragma: no cover - compiled
    return ((meta >> 7) & _M7) - 1


@numba.njit(cache=True, inline="always")  # no call: array arguments cost NRT refcounts
def _avail(meta):  # pragma: no cover - compiled
    return (meta >> 14) - 1


@numba.njit(cache=True, inline="always")  # no call: array arguments cost NRT refcounts
def _meta(p, d, a):  # pragma: no cover - compiled
    return np.int64(p) | (np.int64(d + 1) << 7) | (np.int64(a + 1) << 14)


_NN = np.int64(0x7FFFFFFFFFFFFFFF)


@numba.njit(cache=True, inline="always")
def _nn(x):  # pragma: no cover - compiled
    """``x`` with the sign bit cleared: for an index known to be >= 0, tells LLVM so, which drops
    numba's negative-index wraparound (a shift, an and and an add per array access)."""
    return np.int64(x) & _NN


@numba.njit(cache=True)
def _scores(b_indptr, b_indices, resident, num_workers):  # pragma: no cover - compiled
    m = b_indptr.size - 1
    out = np.zeros((m, num_workers), dtype=np.int32)
    for s in range(m):
        for j in range(b_indptr[s], b_indptr[s + 1]):
            mask = resident[b_indices[j]]
            for w in range(num_workers):
                out[s, w] += (mask >> w) & 1
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _best_worker(score, load, capacities):  # pragma: no cover - compiled
    """Algorithm 1 line 8: the worker with room and the highest score; ties to the lower load, then
    the lower id (-1 when every worker is full)."""
    best = -1
    for w in range(score.size):
        if load[w] >= capacities[w]:
            continue
        if best < 0 or score[w] > score[best] or (score[w] == score[best] and load[w] < load[best]):
            best = w
    return best


@numba.njit(cache=True, nogil=True)
def _assign_greedy(b_indptr, b_indices, resident, capacities):  # pragma: no cover - compiled
    """Herald Algorithm 1, lines 1-13 (see module docstring for the tie rule).

    ``resident[r]``: bit mask of workers where row r scores (primary or current copy).
    """
    m = b_indptr.size - 1
    n = capacities.size
    worker_of = np.empty(m, dtype=np.int32)
    load = np.zeros(n, dtype=np.int64)
    score = np.zeros(n, dtype=np.int64)
    for s in range(m):
        for w in range(n):
            score[w] = 0
        for j in range(b_indptr[s], b_indptr[s + 1]):
            # line 3: score(i, w) = |cache(w) ∩ embs(i)|, cache(w) = current copies + primaries
            mask = resident[b_indices[j]]
            for w in range(n):
                score[w] += (mask >> w) & 1
        best = _best_worker(score, load, capacities)  # line 8
        worker_of[s] = best  # line 9
        load[best] += 1  # lines 10-11: full workers drop out via the capacity test above
    return worker_of


@numba.njit(cache=True, nogil=True)
def _mark_used(indices, used):  # pragma: no cover - compiled
    for j in range(indices.size):
        used[indices[j]] = True


_CHUNK = 256  # rows whose state is loaded ahead (one burst of independent cache misses) per block
_SAMPLE_CHUNK = 32  # samples whose ids / rows are loaded ahead per block
_ROW_AHEAD = 8  # rows of the row pass prefetched ahead (measured: 8 beats 32 and block touching)
_ID_AHEAD = 64  # ids of the batch prefetched ahead in Algorithm 1 (64 = 160; block touching was slower)
_TRIM_AHEAD = 16  # queue entries of the eviction scan prefetched ahead (16 > 8)
_STAMP_MAX = np.iinfo(np.int32).max  # stamps are int32 (renumbered before they overflow)
_Q_AHEAD = 64  # queue entries prefetched ahead of the append position (measured: 64 = 128 > 32)
_LOAD_MAX = np.int64((1 << 34) - 1)  # bound on a worker's samples per batch (argmax key)


@numba.njit(cache=True, nogil=True)
def _trim_all(num_workers, capacity, lookahead_policy, window_count, rb32, stamp, q_row, q_stamp, head, tail,
              size, vw, rb, mc, t, buf, ev_w, ev_r):  # pragma: no cover - compiled
    """Step 3 (eviction): trim every cache; a victim loses its validity bit and, when its
    pending updates are the evicting worker's, is pushed (events to ``ev_w``/``ev_r``).
    Returns (number of pushes, a sum that keeps the prefetching loads alive).

    LRU: one pass per worker over its queue from the head (an inlined
    :func:`gmp.train.cache.cache_trim`, same victims in the same order), prefetching in two
    stages: the record line (stamps, meta) of the entry ``2 * _TRIM_AHEAD`` places on, and the
    mask line of the entry ``_TRIM_AHEAD`` places on only when that entry is live (most
    scanned entries are dead: they need only their stamp). The look-ahead policy calls
    ``cache_trim`` and then handles its victims."""
    ne = 0
    sink = np.int64(0)
    qlen = q_row.shape[1]
    rw = rb.shape[1]
    rw32 = rb32.shape[1]
    rbf = rb.reshape(rb.size)
    stf = rb32.reshape(rb32.size)
    qrf = q_row.reshape(q_row.size)
    qsf = q_stamp.reshape(q_stamp.size)
    for w in range(num_workers):
        bit = np.int64(1) << np.int64(w)
        if not lookahead_policy:
            need = size[w] - capacity
            if need <= 0:
                continue
            qb = w * qlen
            i = qb + _nn(head[w])
            end = qb + _nn(tail[w]) - 1  # the last entry (the queue holds at least `need` live ones)
            k = 0
            r = np.int64(qrf[i])
            while k < need:
                # two-stage prefetch: the stamp line of the entry 2D places on; for the entry D
                # places on (its stamp has arrived) the mask and record lines, only when it is
                # live (most scanned entries are dead: rows touched again since)
                prefetch(rb, np.int64(qrf[min(i + 2 * _TRIM_AHEAD, end)]))  # stamps and record
                j1 = min(i + _TRIM_AHEAD, end)
                r1 = np.int64(qrf[j1])
                prefetch(vw, r1 if stf[r1 * rw32 + w] == qsf[j1] else r)
                r = np.int64(qrf[i])
                if stf[r * rw32 + w] == qsf[i]:  # live (else a dead entry: the row was touched again)
                    stf[r * rw32 + w] = -1
                    vw[r, 0] = np.int64(vw[r, 0]) & ~bit
                    ro = r * rw + mc
                    mt = rbf[ro]
                    push = _dirty(mt) == w  # its pending updates go with it
                    ev_w[ne] = w
                    ev_r[ne] = rbf[ro + 1]
                    ne += push
                    rbf[ro] = _meta(_prim(mt), -1, t) if push else mt
                    k += 1
                i += 1
            head[w] = i - qb
            size[w] -= k
            if head[w] == tail[w]:
                head[w] = 0
                tail[w] = 0
            continue
        h = head[w]
        for i in range(h, min(h + size[w] - capacity, tail[w])):  # the LRU end's stamps, misses overlapping
            sink += stamp[q_row[w, i], w]
        k = cache_trim(w, capacity, lookahead_policy, window_count, stamp, q_row, q_stamp, head, tail, size, buf)
        for c0 in range(0, k, _CHUNK):
            c1 = min(c0 + _CHUNK, k)
            for i in range(c0, c1):  # touch the block's records first: their cache misses overlap
                sink += rb[buf[i], mc] + np.int64(vw[buf[i], 0])
            for i in range(c0, c1):
                r = buf[i]
                vw[r, 0] = np.int64(vw[r, 0]) & ~bit
                mt = rb[r, mc]
                push = _dirty(mt) == w  # its pending updates go with it (branch-free)
                ev_w[ne] = w
                ev_r[ne] = rb[r, mc + 1]
                ne += push
                rb[r, mc] = _meta(_prim(mt), -1, t) if push else mt
    return ne, sink


#: ``_SPREAD[b]`` has byte k equal to bit k of ``b``: adding ``_SPREAD[mask byte]`` to one int64
#: accumulator scores 8 workers at once (SWAR; a sample has at most 255 ids, else the plain loop)
_SPREAD = np.array([sum(((b >> k) & 1) << (8 * k) for k in range(8)) for b in range(256)], dtype=np.uint64).view(np.int64)


@numba.njit(cache=True, nogil=True)
def _assign_mark(indptr, indices, samples, vw, capacities, greedy, swar, spread, worker_of, b_ptr, b_idx,
                 touched):  # pragma: no cover - compiled
    """Gather the batch's ids from the dataset CSR, run Algorithm 1 (lines 1-13, when
    ``greedy``; else ``worker_of`` is given) and mark each row's writers (``wr``), listing the
    batch's distinct rows in ``touched``. Returns (number of ids, number of distinct rows, a sum
    that keeps the prefetching loads alive).

    ``indices``, ``b_idx`` and ``touched`` are best passed as uint32 views (row ids are >= 0):
    unsigned indices need no negative-index wraparound."""
    m = samples.size
    n = capacities.size
    # gather: all bounds first (independent loads overlap), then the ids, contiguous
    b_ptr[0] = 0
    for i in range(m):
        s = _nn(samples[i])
        b_ptr[i + 1] = b_ptr[i] + (indptr[s + 1] - indptr[s])
    sink = np.int64(0)
    for c0 in range(0, m, _SAMPLE_CHUNK):
        c1 = min(c0 + _SAMPLE_CHUNK, m)
        for i in range(c0, c1):  # touch the block's id lists first: their cache misses overlap
            s = _nn(samples[i])
            j0 = _nn(indptr[s])
            j1 = _nn(indptr[s + 1])
            if j1 > j0:
                sink += indices[j0] + indices[j1 - 1]
        for i in range(c0, c1):
            s = _nn(samples[i])
            j0 = _nn(indptr[s])
            j1 = _nn(indptr[s + 1])
            o = _nn(b_ptr[i])
            for j in range(j1 - j0):
                b_idx[o + j] = indices[j0 + j]
    nb = (n + 7) >> 3
    acc = np.zeros(nb, dtype=np.int64)
    score = np.zeros(n, dtype=np.int64)
    load = np.zeros(n, dtype=np.int64)
    nt = 0
    last = _nn(b_ptr[m]) - 1
    for i in range(m):
        a = _nn(b_ptr[i])
        b = _nn(b_ptr[i + 1])
        if greedy:
            # line 3: score(i, w) = |cache(w) ∩ embs(i)|, cache(w) = current copies + primaries
            if swar and nb == 1:
                a0 = np.int64(0)
                for j in range(a, b):
                    prefetch(vw, np.int64(b_idx[min(j + _ID_AHEAD, last)]))
                    a0 += spread[np.int64(vw[np.int64(b_idx[j]), 0])]
                # line 8, branch-free: the largest key (score, then fewer samples so far, then
                # lower worker id) among the available workers; a full worker's key is -1
                bestkey = np.int64(-1)
                for w in range(n):
                    key = (((a0 >> (8 * w)) & 255) << 40) | ((_LOAD_MAX - load[w]) << 6) | (63 - w)
                    bestkey = max(bestkey, key if load[w] < capacities[w] else np.int64(-1))
                best = 63 - (bestkey & 63)
            else:
                if swar:
                    for k in range(nb):
                        acc[k] = 0
                    for j in range(a, b):
                        prefetch(vw, np.int64(b_idx[min(j + _ID_AHEAD, last)]))
                        mask = np.int64(vw[np.int64(b_idx[j]), 0])
                        for k in range(nb):
                            acc[k] += spread[(mask >> (8 * k)) & 255]
                    for w in range(n):
                        score[w] = (acc[w >> 3] >> (8 * (w & 7))) & 255
                else:
                    for w in range(n):
                        score[w] = 0
                    for j in range(a, b):
                        prefetch(vw, np.int64(b_idx[min(j + _ID_AHEAD, last)]))
                        mask = np.int64(vw[np.int64(b_idx[j]), 0])
                        for w in range(n):
                            score[w] += (mask >> w) & 1
                best = _best_worker(score, load, capacities)  # line 8
            worker_of[i] = best  # line 9
            load[best] += 1  # lines 10-11: full workers drop out via the capacity test
        bit = np.int64(1) << np.int64(worker_of[i])
        for j in range(a, b):  # the sample's rows are in L1 now (when greedy)
            if not greedy:
                prefetch(vw, np.int64(b_idx[min(j + _ID_AHEAD, last)]))
            r = np.int64(b_idx[j])
            x = np.int64(vw[r, 1])
            touched[_nn(nt)] = r  # kept only when the row is new to the batch (branch-free)
            nt += x == 0
            vw[r, 1] = x | bit
    return b_ptr[m], nt, sink


@numba.njit(cache=True, nogil=True)
def _sync_rows(touched, nt, vw, rb, mc, on_demand, keep_written, t, rb32, stamp, q_row, q_stamp,
               head, tail, size, clock, plan_e, pull_e, pull_a, sync_e, out):  # pragma: no cover - compiled
    """Per distinct row of the batch, in one pass: the plan of t-1 (Algorithm 1 line 15),
    the reads of t (pulls, cache touches) and the updates of t (pushes, validity).

    Events are packed into one int64 each, ``global id << 8 | worker`` (plans, syncs) and
    ``global id << 8 | worker << 1 | stale`` (pulls, with the row's ``ready`` in ``pull_a``):
    fewer buffers keep the loop's pointers in registers; :func:`_assemble` unpacks them.
    ``touched`` is best a uint32 view. ``out`` receives (plans, pulls, syncs, violations).

    ``rb``: the per-row records (int64, line-aligned), meta in column ``mc`` and the global id
    in ``mc + 1``; ``rb32`` the same memory as int32, whose first columns are the cache stamps
    (``stamp`` is that strided view, for :func:`gmp.train.cache._compact`)."""
    n_plan = 0
    n_pull = 0
    n_sync = 0
    violations = 0
    nw = stamp.shape[1]
    qlen = q_row.shape[1]
    rw = rb.shape[1]
    rw32 = rb32.shape[1]
    rbf = rb.reshape(rb.size)  # flat views: one multiply per access, no wraparound
    stf = rb32.reshape(rb32.size)
    qrf = q_row.reshape(q_row.size)
    qsf = q_stamp.reshape(q_stamp.size)
    clk = clock[0]
    for w in range(nw):  # room for this batch's touches (at most nt per worker): the row pass
        if tail[w] + nt > qlen:  # never compacts, so no call (and no spills) in its loop
            _compact(w, stamp, q_row, q_stamp, head, tail)
    last = nt - 1
    for i in range(nt):
        # the row _ROW_AHEAD places on: its three cache lines arrive while this one is worked on
        ra = np.int64(touched[min(i + _ROW_AHEAD, last)])
        prefetch(rb, ra)
        prefetch(vw, ra)
        r = np.int64(touched[i])
        ro = r * rw + mc
        g8 = rbf[ro + 1] << 8  # global id, for the events
        m = np.int64(vw[r, 1])
        mt = rbf[ro]
        p = _prim(mt)
        d = _dirty(mt)
        av = _avail(mt)
        pbit = np.int64(1) << p
        # Mostly branch-free (select / conditional increment): the conditions below are
        # data-dependent coin flips, and mispredicted branches cost more than the misses.
        dbit = (np.int64(1) << np.int64(d)) if d >= 0 else np.int64(0)
        plan = on_demand & (d >= 0) & ((m & ~dbit) != 0)  # the communication plan
        plan_e[_nn(n_plan)] = g8 | d
        n_plan += plan
        d = -1 if plan else d
        av = (t - 1) if plan else av
        x = (m & ~dbit) if d >= 0 else np.int64(0)
        if x != 0:  # someone else holds pending updates: the plan failed (never, unless a bug)
            while x != 0:
                violations += 1
                x &= x - 1
        loc = np.int64(vw[r, 2])
        val = np.int64(vw[r, 0])
        mm = m & ~pbit  # reads by each non-primary worker using the row (ascending)
        sb = r * rw32
        while mm != 0:
            w = np.int64(trailing_zeros(mm))
            mm &= mm - 1
            bit = np.int64(1) << w
            sw = np.int64(stf[sb + w])
            lw = (loc & bit) != 0
            k = _nn(n_pull)
            pull_e[k] = g8 | (w << 1) | (lw | (sw >= 0))  # stale: held (secondary / cached) but invalid
            pull_a[k] = av
            n_pull += (val & bit) == 0
            if not lw:  # cache_touch, inlined (a call costs 5x here); the queue has room (above)
                tl = _nn(tail[w])
                qb = w * qlen
                if sw >= 0 and qrf[qb + tl - 1] == r and qsf[qb + tl - 1] == sw:
                    continue  # already the most recent entry
                size[w] += sw < 0
                clk += 1
                stf[sb + w] = clk
                qrf[qb + tl] = r
                qsf[qb + tl] = clk
                tail[w] = tl + 1
                prefetch(qrf, qb + tl + _Q_AHEAD)  # the queue's next lines: 16 sparse append streams
                prefetch(qsf, qb + tl + _Q_AHEAD)  # are too slow for the hardware prefetcher
        # updates: a single writer that is not the primary keeps its update (on-demand)
        # or pushes it; several writers all push (combined at the primary)
        single = (m & (m - 1)) == 0
        pushers = m & ~pbit
        hold = on_demand & single & (pushers != 0)
        w1 = np.int64(trailing_zeros(m))
        val = (m | pbit) if (single & (on_demand | keep_written)) else pbit
        d = w1 if hold else -1
        av = av if hold else t
        pushers = 0 if hold else pushers
        while pushers != 0:
            w = trailing_zeros(pushers)
            pushers &= pushers - 1
            sync_e[_nn(n_sync)] = g8 | w
            n_sync += 1
        vw[r, 0] = val
        rbf[ro] = _meta(p, d, av)
        vw[r, 1] = 0
    clock[0] = clk
    out[0] = n_plan
    out[1] = n_pull
    out[2] = n_sync
    out[3] = violations
    return n_plan


@numba.njit(cache=True, nogil=True)
def _assemble(t, plan_e, n_plan, pull_e, pull_a, n_pull, sync_e, n_sync, ev_w, ev_r, n_evict,
              out):  # pragma: no cover - compiled
    """The batch's event arrays (kind, worker, global row, ready): plan | pulls | sync | evictions,
    unpacked from :func:`_sync_rows`' packed events; ``out[4]``, ``out[5]`` receive the stale
    pulls and the pulls that are ready before ``t - 1`` (prefetchable)."""
    total = n_plan + n_pull + n_sync + n_evict
    kind = np.empty(total, dtype=np.int8)
    worker = np.empty(total, dtype=np.int32)
    row = np.empty(total, dtype=np.int64)
    ready = np.empty(total, dtype=np.int64)
    o = 0
    for i in range(n_plan):
        e = plan_e[i]
        kind[o] = PUSH_PLAN
        worker[o] = e & 255
        row[o] = e >> 8
        ready[o] = t - 1
        o += 1
    n_stale = 0
    n_early = 0
    for i in range(n_pull):
        e = pull_e[i]
        a = pull_a[i]
        stale = e & 1  # PULL_MISS = 0, PULL_STALE = 1
        kind[o] = stale
        worker[o] = (e >> 1) & 127
        row[o] = e >> 8
        ready[o] = a
        n_stale += stale
        n_early += a < t - 1
        o += 1
    for i in range(n_sync):
        e = sync_e[i]
        kind[o] = PUSH_SYNC
        worker[o] = e & 255
        row[o] = e >> 8
        ready[o] = t
        o += 1
    for i in range(n_evict):
        kind[o] = PUSH_EVICT
        worker[o] = ev_w[i]
        row[o] = ev_r[i]
        ready[o] = t
        o += 1
    out[4] = n_stale
    out[5] = n_early
    return kind, worker, row, ready


@numba.njit(cache=True, nogil=True)
def _flush_pending(rb, mc, num_rows, t):  # pragma: no cover - compiled
    """Epoch end (step 5): every pending update is pushed. Returns int64 [2, k] (holder, global
    id) of the rows with pending updates, ascending, and marks them clean, available after ``t``."""
    k = 0
    for r in range(num_rows):
        k += _dirty(rb[r, mc]) >= 0
    out = np.empty((2, k), dtype=np.int64)
    k = 0
    for r in range(num_rows):
        mt = rb[r, mc]
        d = _dirty(mt)
        if d >= 0:
            out[0, k] = d
            out[1, k] = rb[r, mc + 1]
            k += 1
            rb[r, mc] = _meta(_prim(mt), -1, t)
    return out


# --------------------------------------------------------------------------- pure functions


def _as_masks(resident, num_embeddings: int) -> np.ndarray:
    if isinstance(resident, np.ndarray) and resident.dtype == np.int64 and resident.ndim == 1:
        return resident
    return resident_masks(num_embeddings, resident)


def _with_primary(resident, primary) -> np.ndarray:
    primary = np.asarray(primary, dtype=np.int64)
    return _as_masks(resident, primary.size) | np.left_shift(np.int64(1), primary)


def resident_masks(num_embeddings: int, rows_by_worker) -> np.ndarray:
    """int64 [num_embeddings] bit masks from ``{worker: rows}`` (or a list indexed by worker)."""
    items = rows_by_worker.items() if hasattr(rows_by_worker, "items") else enumerate(rows_by_worker)
    out = np.zeros(num_embeddings, dtype=np.int64)
    for w, rows in items:
        rows = np.asarray(list(rows), dtype=np.int64)
        out[rows] |= np.int64(1) << np.int64(w)
    return out


def _csr(batch) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(batch, tuple) and len(batch) == 2:
        return np.asarray(batch[0], dtype=np.int64), np.asarray(batch[1], dtype=np.int64)
    indptr = np.zeros(len(batch) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(s) for s in batch])
    indices = np.asarray([r for s in batch for r in s], dtype=np.int64)
    return indptr, indices


def score_matrix(batch, primary, resident, num_workers: int) -> np.ndarray:
    """Algorithm 1 line 3: int32 [num_samples, num_workers] scores.

    Parameters
    ----------
    batch : list of row-id lists, or (indptr, indices)
    primary : int array [num_embeddings]
    resident : int64 bit masks [num_embeddings], or ``{worker: rows}`` of
        current non-primary copies (secondaries and cached rows).
    """
    indptr, indices = _csr(batch)
    return _scores(indptr, indices, _with_primary(resident, primary), int(num_workers))


def location_aware_assignment(batch, primary, resident, capacities) -> np.ndarray:
    """Herald Algorithm 1 (lines 1-13): int32 worker per sample, exactly ``capacities[w]`` each.

    Examples
    --------
    >>> location_aware_assignment([[0], [1], [0]], primary=[0, 1], resident={}, capacities=[2, 1]).tolist()
    [0, 1, 0]
    """
    primary = np.asarray(primary, dtype=np.int32)
    capacities = np.asarray(capacities, dtype=np.int64)
    indptr, indices = _csr(batch)
    if int(capacities.sum()) != indptr.size - 1:
        raise TrainingError(f"capacities sum to {int(capacities.sum())}, the batch has {indptr.size - 1} samples.")
    return _assign_greedy(indptr, indices, _with_primary(resident, primary), capacities)


def naive_assignment(capacities) -> np.ndarray:
    """Consecutive split: the first ``capacities[0]`` samples to worker 0, and so on."""
    capacities = np.asarray(capacities, dtype=np.int64)
    return np.repeat(np.arange(capacities.size, dtype=np.int32), capacities)


def communication_plan(batch, worker_of, dirty, num_workers: int) -> list[np.ndarray]:
    """Algorithm 1 line 15 restricted to rows with pending updates.

    For each worker A, the rows whose pending updates A holds (``dirty[r] == A``)
    and that some other worker uses in ``batch`` under ``worker_of``: A must push
    them before that batch is trained. Rows ascending.
    """
    indptr, indices = _csr(batch)
    worker_of = np.asarray(worker_of, dtype=np.int64)
    dirty = np.asarray(dirty, dtype=np.int64)
    sample_of_edge = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    users = worker_of[sample_of_edge]
    holders = dirty[indices]
    hit = (holders >= 0) & (users != holders)
    return [np.unique(indices[hit & (holders == a)]) for a in range(num_workers)]


def batch_capacities(num_samples: int, num_workers: int) -> np.ndarray:
    """Samples per worker of a global batch: ``np.array_split`` sizes (B each when full)."""
    base, extra = divmod(int(num_samples), int(num_workers))
    caps = np.full(num_workers, base, dtype=np.int64)
    caps[:extra] += 1
    return caps


# --------------------------------------------------------------------------- the engine


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
    _counts: np.ndarray | None = field(default=None, repr=False)
    _prefetchable: int | None = field(default=None, repr=False)

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

    def pushes_after(self, worker: int) -> np.ndarray:
        """Rows ``worker`` pushes right after this iteration's update (sync + evictions)."""
        return self.rows((PUSH_SYNC, PUSH_EVICT), worker)

    def counts(self) -> np.ndarray:
        """int64 [len(EVENT_NAMES)] events per kind."""
        if self._counts is None:
            self._counts = np.bincount(self.event_kind.astype(np.intp), minlength=len(EVENT_NAMES)).astype(np.int64)
        return self._counts


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
        if sched._prefetchable is not None:  # counted by the engine's kernel
            self.prefetchable_pulls += int(sched._prefetchable)
        else:
            is_pull = sched.event_kind <= PULL_STALE  # PULL_KINDS are the two lowest codes
            self.prefetchable_pulls += int(np.count_nonzero(is_pull & (sched.event_ready < sched.iteration - 1)))
        self.batches += 1
        self.schedule_s += sched.schedule_s
        if self.batches == 1:
            self.first_schedule_s = sched.schedule_s

    def to_json(self) -> dict:
        out = {name: int(v) for name, v in zip(EVENT_NAMES, self.by_kind)}
        out.update(pulls=self.pulls, pushes=self.pushes, prefetchable_pulls=self.prefetchable_pulls,
                   batches=self.batches)
        return out


class RuntimeScheduler:
    """Herald's data-loader-side scheduler: assigns global batches and tracks every replica.

    Parameters
    ----------
    indptr, indices : sample CSR of the whole dataset (``BipartiteGraph.sample_indptr/indices``)
    placement : Placement (primaries, secondaries)
    batch_size : int
        Samples per worker (B); global batches hold ``num_workers * batch_size``.
    assignment : {"naive", "herald"}
    on_demand : bool
        Herald's on-demand synchronisation (else naive: push every update at once).
    cache_rows, cache_policy, lookahead : cache configuration (:mod:`gmp.train.cache`);
        ``lookahead`` is the look-ahead window in global batches for the
        ``lookahead`` policy.
    read_only_replicas : bool
        The trainer's store semantics (:mod:`gmp.train.consistency`): a
        non-primary copy is never written locally, so after a synchronous
        push only the primary is current (the writer refreshes on its next
        read). Default False: the writer's copy stays current (Herald's
        cache). Irrelevant to pending (on-demand) updates.

    Call :meth:`start_epoch` with the epoch's sample order, then
    :meth:`next_batch` until it returns None (which flushes pending updates;
    :attr:`flush` then holds the epoch-end pushes). Caches persist across epochs.
    """

    def __init__(self, indptr, indices, placement: Placement, *, batch_size: int, assignment: str = "herald",
                 on_demand: bool = True, cache_rows: int = 0, cache_policy: str = "lru", lookahead: int = 0,
                 read_only_replicas: bool = False, num_trainers: int | None = None, check: bool = True) -> None:
        if assignment not in ASSIGNMENTS:
            raise TrainingError(f"Unknown schedule {assignment!r}; expected one of {', '.join(ASSIGNMENTS)}.")
        n = placement.num_workers
        if n > MAX_WORKERS:
            raise TrainingError(f"The Herald scheduler supports up to {MAX_WORKERS} workers, got {n}.")
        if batch_size < 1:
            raise TrainingError(f"--batch-size must be >= 1, got {batch_size}.")
        if lookahead < 0:
            raise TrainingError(f"--lookahead must be >= 0, got {lookahead}.")
        self.indptr = np.asarray(indptr)
        self.placement = placement
        self.num_workers = n
        self.num_trainers = n if num_trainers is None else int(num_trainers)
        if not 1 <= self.num_trainers <= n:
            raise TrainingError(f"num_trainers must be in [1, {n}], got {num_trainers}.")
        self.batch_size = int(batch_size)
        self.assignment = assignment
        self.on_demand = bool(on_demand)
        self.lookahead = int(lookahead)
        self.read_only_replicas = bool(read_only_replicas)
        self.check = check
        # Compact the rows to those some sample uses: the per-row state (and the
        # caches' 8 bytes per row and worker) then scales with the active rows,
        # not with the id space (33.8M ids at Criteo-Kaggle scale).
        indices = np.asarray(indices)
        if indices.size and int(indices.max()) >= placement.num_embeddings:
            raise TrainingError(f"The samples use embedding id {int(indices.max())} but the placement has "
                                f"{placement.num_embeddings} rows; use the manifest made for this dataset.")
        used = np.zeros(placement.num_embeddings, dtype=np.bool_)
        _mark_used(indices, used)
        self.row_ids = np.flatnonzero(used).astype(np.int64)  # compact row -> global id
        remap = np.full(placement.num_embeddings, -1, dtype=np.int32)
        remap[self.row_ids] = np.arange(self.row_ids.size, dtype=np.int32)
        self.indices = remap[indices]
        self._indices_u32 = self.indices.view(np.uint32)  # ids >= 0: no wraparound in the kernels
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
        mt = _mask_dtype(n)
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
        self._rb = _line_aligned_empty((max(e, 1), width), np.int64)
        self._rb32 = self._rb.view(np.int32)  # [rows, 2 * width]: the stamps are its first n columns
        self._rb32[:, :n] = -1  # not cached
        self._rb[:e, self._mcol] = primary | (np.int64(0) << 7) | (np.int64(0) << 14)  # dirty -1, available -1
        self._rb[:e, self._mcol + 1] = self.row_ids
        self.rec = self._rb[:e, self._mcol: self._mcol + 2]  # (meta, global id) of each row
        self.meta = self.rec[:, 0]
        del local, primary
        self.caches = WorkerCaches(n, e, capacity=cache_rows, policy=cache_policy, stamp=self._rb32[:max(e, 1), :n])
        self.iteration = -1  # global iteration counter across epochs
        self.totals = ScheduleTotals()
        self.flush: np.ndarray | None = None
        self._order = np.zeros(0, dtype=np.int64)
        self._pos = 0
        self._window: list[tuple[np.ndarray, np.ndarray]] = []
        self._max_degree = int(np.diff(self.indptr).max()) if self.indptr.size > 1 else 0
        self._swar = self._max_degree <= 255  # per-sample scores fit a byte (see _SPREAD)
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
            for k in range(self.lookahead):  # window = batches 0 .. K-1; shifted in next_batch
                self._window_push(k)

    def _batch_samples(self, k: int) -> np.ndarray:
        g = self.global_batch
        return self._order[k * g: (k + 1) * g]

    def _window_push(self, k: int) -> None:
        samples = self._batch_samples(k)
        if samples.size:
            _, idx = _gather(self.indptr, self.indices, samples)
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
        samples = self._batch_samples(k)
        if samples.size == 0:
            self._finish_epoch()
            return None
        t0 = time.perf_counter()
        self.iteration += 1
        t = self.iteration
        n = self.num_workers
        caps = np.zeros(n, dtype=np.int64)
        caps[:self.num_trainers] = batch_capacities(samples.size, self.num_trainers)
        nnz = samples.size * self._max_degree  # bound on the batch's ids (buffers only)
        if self._buf_ids < nnz or self._b_ptr.size <= samples.size:
            self._alloc_buffers(samples.size, nnz)
        greedy = self.assignment == "herald"
        worker_of = np.empty(samples.size, dtype=np.int32) if greedy else naive_assignment(caps)
        _, nt, _ = _assign_mark(self.indptr, self._indices_u32, samples, self.vw, caps, greedy, self._swar,
                                _SPREAD, worker_of, self._b_ptr, self._b_idx.view(np.uint32),
                                self._touched.view(np.uint32))
        # Visit the batch's rows in ascending id order: it fixes the recency order
        # within an iteration (gmp.train.cache) and turns the kernels' random
        # accesses into one ascending sweep (TLB- and prefetcher-friendly).
        touched = self._touched[:nt]
        touched.sort()
        c = self.caches
        c.reserve(nnz)
        if c.clock[0] > _STAMP_MAX - nnz:  # int32 stamps: at most nnz touches in this batch
            renumber_stamps(c.stamp, c.q_row, c.q_stamp, c.head, c.tail, c.clock)
        out = self._out
        _sync_rows(touched.view(np.uint32), nt, self.vw, self._rb, self._mcol, self.on_demand,
                   not self.read_only_replicas, t, self._rb32, c.stamp, c.q_row, c.q_stamp, c.head, c.tail, c.size,
                   c.clock, self._plan_e, self._pull_e, self._pull_a, self._sync_e, out)
        n_plan, n_pull, n_sync, violations = (int(x) for x in out[:4])
        if violations and self.check:
            raise TrainingError(f"Herald scheduler invariant broken at iteration {t}: {violations} reads of rows "
                                "whose pending updates another worker still holds. This is a bug in gmp.")
        if c.lookahead_policy and self.lookahead > 0:
            self._window_shift(k)
        if self._evicted.size < int(c.size.max()):
            self._evicted = np.empty(2 * int(c.size.max()), dtype=np.int64)
        n_evict, _ = _trim_all(n, c.capacity, c.lookahead_policy and self.lookahead > 0, c.window_count, self._rb32,
                               c.stamp, c.q_row, c.q_stamp, c.head, c.tail, c.size, self.vw, self._rb, self._mcol, t,
                               self._evicted, self._ev_w, self._ev_r)
        kind, worker, row, ready = _assemble(t, self._plan_e, n_plan, self._pull_e, self._pull_a, n_pull,
                                             self._sync_e, n_sync, self._ev_w, self._ev_r, n_evict, out)
        n_stale, n_early = int(out[4]), int(out[5])
        counts = np.array([n_pull - n_stale, n_stale, n_sync, n_plan, n_evict, 0], dtype=np.int64)
        self._pos += 1
        sched = BatchSchedule(t, samples, worker_of, n, kind, worker, row, ready, _counts=counts,
                              _prefetchable=n_early)
        sched.schedule_s = time.perf_counter() - t0
        sched.index_in_epoch = k
        self.totals.add(sched)
        return sched

    def _alloc_buffers(self, num_samples: int, nnz: int) -> None:
        """Per-batch scratch buffers for up to ``nnz`` ids (reused: no page faults per step)."""
        nnz = max(int(nnz), 1)
        self._buf_ids = nnz
        self._b_ptr = np.empty(num_samples + 1, dtype=np.int64)
        self._b_idx = np.empty(nnz, dtype=np.int32)
        self._touched = np.empty(nnz, dtype=np.int32)
        # packed events of _sync_rows (global id << 8 | worker [<< 1 | stale]); pull_a: ready
        self._plan_e, self._pull_e = np.empty(nnz, dtype=np.int64), np.empty(nnz, dtype=np.int64)
        self._pull_a, self._sync_e = np.empty(nnz, dtype=np.int64), np.empty(nnz, dtype=np.int64)
        self._ev_w, self._ev_r = np.empty(nnz + 16, dtype=np.int32), np.empty(nnz + 16, dtype=np.int64)
        self._out = np.zeros(8, dtype=np.int64)

    def _finish_epoch(self) -> None:
        self.flush = _flush_pending(self._rb, self._mcol, self.num_rows, self.iteration)
        self.totals.by_kind[PUSH_FLUSH] += self.flush.shape[1]

    @property
    def primary(self) -> np.ndarray:
        """int64 [num_rows] primary worker of each (compacted) row."""
        return self.meta & 127

    @property
    def dirty(self) -> np.ndarray:
        """int64 [num_rows] worker holding pending updates of each row, -1 if none."""
        return ((self.meta >> 7) & 127) - 1

    def flush_rows(self, worker: int) -> np.ndarray:
        """Rows ``worker`` pushed at the end of the epoch (after :meth:`next_batch` returned None)."""
        if self.flush is None:
            return np.zeros(0, dtype=np.int64)
        return self.flush[1][self.flush[0] == worker]

    def __iter__(self) -> Iterator[BatchSchedule]:
        while (s := self.next_batch()) is not None:
            yield s


# --------------------------------------------------------------------------- trainer integration


try:  # the trainer's Schedule interface (gmp.train.schedule)
    from .schedule import Schedule as _ScheduleBase
except ImportError:  # pragma: no cover - trainer not present in this checkout
    _ScheduleBase = object


class HeraldSchedule(_ScheduleBase):
    """``gmp train --schedule herald``: the naive schedule's global batches, assigned by Algorithm 1.

    Every rank builds the same :class:`RuntimeScheduler` and runs it over the
    same global batches as :class:`gmp.train.schedule.NaiveSchedule` (same
    order, same ``array_split`` sizes), so the schedule is deterministic and
    needs no communication. Options (``ScheduleContext.options``):

    * ``cache_rows`` (0), ``cache_policy`` ("lru"), ``on_demand`` (False),
      ``read_only_replicas`` (True): the replica model the assignment scores
      with. The defaults describe the trainer's store (no cache, every
      non-primary update pushed at once, secondaries written through), so
      the scheduler's counts are exactly the trainer's ``remote_rows_read``
      (``pull_miss``), ``staleness_refreshes`` (``pull_stale``, s = 0) and
      ``remote_rows_pushed`` (pushes). Other values change the assignment
      (and the simulated counts) but not the model: at s = 0 any split of a
      global batch trains the same model (Herald 3.3).
    * ``lookahead`` (0): when > 0 the scheduler runs that many batches ahead
      in a background thread (:class:`gmp.train.prefetch.Prefetcher`); its
      stall/overlap are in :meth:`prefetch_stats`.

    ``Step.info["herald"]`` holds the :class:`BatchSchedule` (assignment,
    pulls, communication plan) and, with a look-ahead, ``Step.info["prefetch"]``
    the :class:`gmp.train.prefetch.PrefetchPlan`.
    """

    def __init__(self, placement: Placement, indptr, indices, num_train: int, batch_size: int, *, seed: int = 0,
                 shuffle: str = "seeded", cache_rows: int = 0, cache_policy: str = "lru", on_demand: bool = False,
                 read_only_replicas: bool = True, lookahead: int = 0) -> None:
        from .schedule import NaiveSchedule

        self._naive = NaiveSchedule(placement.num_workers, num_train, batch_size, seed=seed, shuffle=shuffle)
        self.num_workers = placement.num_workers
        self.placement = placement
        self.indptr, self.indices = indptr, indices
        self.engine_options = dict(batch_size=batch_size, assignment="herald", on_demand=bool(on_demand),
                                   cache_rows=int(cache_rows), cache_policy=cache_policy, lookahead=int(lookahead),
                                   read_only_replicas=bool(read_only_replicas))
        self.lookahead = int(lookahead)
        self._engine: RuntimeScheduler | None = None
        self._position = (0, 0)  # (epoch, batches consumed in that epoch) of self._engine
        self._prefetch_stats = {"items": 0, "produce_s": 0.0, "stall_s": 0.0}
        self._new_engine()  # validate the options now, not at the first step

    def _new_engine(self) -> RuntimeScheduler:
        self._engine = RuntimeScheduler(self.indptr, self.indices, self.placement, **self.engine_options)
        self._position = (0, 0)
        self._epoch_started = False
        return self._engine

    def num_steps(self, epoch: int) -> int:
        return self._naive.num_steps(epoch)

    def bind(self, trainer) -> None:  # the Schedule hook; nothing to learn from the trainer
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None

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

    def _batches(self, epoch: int, start: int):
        eng = self._engine_at(epoch, start)
        done = start
        while (sched := eng.next_batch()) is not None:
            done += 1
            if self._engine is eng:  # a prefetch thread left behind must not move a newer engine's position
                self._position = (epoch, done)
            yield sched
        if self._engine is eng:
            self._position = (epoch + 1, 0)
            self._epoch_started = False

    def steps(self, epoch: int, start: int = 0):
        from .prefetch import Prefetcher, plan_prefetch
        from .schedule import Step

        n = self.num_workers
        if self.lookahead > 0:
            pf = Prefetcher(self._batches(epoch, start), self.lookahead,
                            prepare=lambda s: plan_prefetch(s, self.indptr, self.indices))
            completed = False
            try:
                for sched, plan in pf:
                    yield Step(sched.index_in_epoch, [sched.worker_samples(w) for w in range(n)],
                               info={"herald": sched, "prefetch": plan})
                completed = True
            finally:
                pf.close()
                st = pf.stats()
                for k in ("items", "produce_s", "stall_s"):
                    self._prefetch_stats[k] += st[k]
                if not completed:  # the thread ran ahead of the consumer: replay on the next call
                    self._engine = None
            return
        for sched in self._batches(epoch, start):
            yield Step(sched.index_in_epoch, [sched.worker_samples(w) for w in range(n)], info={"herald": sched})

    def prefetch_stats(self) -> dict[str, float]:
        st = dict(self._prefetch_stats)
        st["overlap"] = max(0.0, 1.0 - st["stall_s"] / st["produce_s"]) if st["produce_s"] > 0 else 1.0
        return st


def _herald_factory(context) -> HeraldSchedule:
    ds = context.dataset
    if ds is None:
        raise TrainingError("--schedule herald needs the dataset's samples (ScheduleContext.dataset is None).")
    opts = dict(context.options or {})
    known = {"cache_rows", "cache_policy", "on_demand", "read_only_replicas", "lookahead"}
    unknown = set(opts) - known
    if unknown:
        raise TrainingError(f"unknown option(s) for --schedule herald: {sorted(unknown)}; expected {sorted(known)}.")
    return HeraldSchedule(context.placement, np.asarray(ds.indptr), np.asarray(ds.indices), context.num_train,
                          context.batch_size, seed=context.seed, shuffle=context.shuffle, **opts)


def _register() -> None:
    try:
        from .schedule import register_schedule
    except ImportError:  # pragma: no cover - trainer not present in this checkout
        return
    register_schedule("herald", _herald_factory)


_register()
