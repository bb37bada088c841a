"""The numba kernels of the Herald scheduler (one step = four kernels; specification:
:mod:`gmp.train.herald.reference`, the semantics: :mod:`gmp.train.herald.engine`).

The per-row state and the per-batch scratch buffers each travel as one
namedtuple (:class:`RowState`, :class:`BatchBuffers`) instead of 18-21
positional arrays; the kernels unpack the fields into locals on entry, so the
loops are the ones measured before the bundling (``bench/herald_bench.py``).
Layout and prefetching: module docstring of :mod:`gmp.train.herald.engine`.
"""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros  # llvm.cttz

from ...kernels.simd import prefetch
from .cache import cache_trim, compact_queue
from .events import PUSH_EVICT, PUSH_PLAN, PUSH_SYNC


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


#: The per-row state the kernels read and write (see the layout comment above); rebuilt by the
#: engine before each batch (the cache queues may have been reallocated).
RowState = namedtuple("RowState", ["vw", "rb", "rb32", "mc", "stamp", "q_row", "q_stamp", "head", "tail", "size",
                                   "clock", "window_count"])

#: The per-batch scratch buffers, reused across batches (``b_idx``/``touched`` as uint32 views).
BatchBuffers = namedtuple("BatchBuffers", ["b_ptr", "b_idx", "touched", "plan_e", "pull_e", "pull_a", "sync_e",
                                           "ev_w", "ev_r", "evicted", "out"])


def line_aligned_empty(shape, dtype, line: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a ``line``-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    buf = np.empty(nbytes + line, dtype=np.uint8)
    off = (-buf.ctypes.data) % line
    return buf[off: off + nbytes].view(dtype).reshape(shape)


def mask_dtype(num_workers: int):
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


@numba.njit(cache=True, nogil=True, inline="always")
def best_worker(score, load, capacities):  # pragma: no cover - compiled
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
def mark_used(indices, used):  # pragma: no cover - compiled
    for j in range(indices.size):
        used[indices[j]] = True


_CHUNK = 256  # rows whose state is loaded ahead (one burst of independent cache misses) per block
_SAMPLE_CHUNK = 32  # samples whose ids / rows are loaded ahead per block
_ROW_AHEAD = 8  # rows of the row pass prefetched ahead (measured: 8 beats 32 and block touching)
_ID_AHEAD = 64  # ids of the batch prefetched ahead in Algorithm 1 (64 = 160; block touching was slower)
_TRIM_AHEAD = 16  # queue entries of the eviction scan prefetched ahead (16 > 8)
STAMP_MAX = np.iinfo(np.int32).max  # stamps are int32 (renumbered before they overflow)
_Q_AHEAD = 64  # queue entries prefetched ahead of the append position (measured: 64 = 128 > 32)
_LOAD_MAX = np.int64((1 << 34) - 1)  # bound on a worker's samples per batch (argmax key)


@numba.njit(cache=True, nogil=True)
def trim_all(st, bufs, num_workers, capacity, lookahead_policy, t):  # pragma: no cover - compiled
    """Step 3 (eviction): trim every cache; a victim loses its validity bit and, when its
    pending updates are the evicting worker's, is pushed (events to ``ev_w``/``ev_r``).
    Returns (number of pushes, a sum that keeps the prefetching loads alive).

    LRU: one pass per worker over its queue from the head (an inlined
    :func:`gmp.train.herald.cache.cache_trim`, same victims in the same order), prefetching in two
    stages: the record line (stamps, meta) of the entry ``2 * _TRIM_AHEAD`` places on, and the
    mask line of the entry ``_TRIM_AHEAD`` places on only when that entry is live (most
    scanned entries are dead: they need only their stamp). The look-ahead policy calls
    ``cache_trim`` and then handles its victims."""
    window_count, rb32, stamp, q_row, q_stamp = st.window_count, st.rb32, st.stamp, st.q_row, st.q_stamp
    head, tail, size, vw, rb, mc = st.head, st.tail, st.size, st.vw, st.rb, st.mc
    buf, ev_w, ev_r = bufs.evicted, bufs.ev_w, bufs.ev_r
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


#: ``SPREAD[b]`` has byte k equal to bit k of ``b``: adding ``SPREAD[mask byte]`` to one int64
#: accumulator scores 8 workers at once (SWAR; a sample has at most 255 ids, else the plain loop)
SPREAD = np.array([sum(((b >> k) & 1) << (8 * k) for k in range(8)) for b in range(256)], dtype=np.uint64).view(np.int64)


@numba.njit(cache=True, nogil=True)
def assign_mark(st, bufs, indptr, indices, samples, capacities, greedy, swar, spread,
                worker_of):  # pragma: no cover - compiled
    """Gather the batch's ids from the dataset CSR, run Algorithm 1 (lines 1-13, when
    ``greedy``; else ``worker_of`` is given) and mark each row's writers (``wr``), listing the
    batch's distinct rows in ``touched``. Returns (number of ids, number of distinct rows, a sum
    that keeps the prefetching loads alive).

    ``indices``, ``b_idx`` and ``touched`` are best passed as uint32 views (row ids are >= 0):
    unsigned indices need no negative-index wraparound."""
    vw = st.vw
    b_ptr, b_idx, touched = bufs.b_ptr, bufs.b_idx, bufs.touched
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
                best = best_worker(score, load, capacities)  # line 8
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


# long function: the row pass is one loop whose body must stay inline (a call costs 5x here,
# and its array arguments cost NRT refcounts), so it is not split into helpers
@numba.njit(cache=True, nogil=True)
def sync_rows(st, bufs, nt, on_demand, keep_written, t):  # pragma: no cover - compiled
    """Per distinct row of the batch, in one pass: the plan of t-1 (Algorithm 1 line 15),
    the reads of t (pulls, cache touches) and the updates of t (pushes, validity).

    Events are packed into one int64 each, ``global id << 8 | worker`` (plans, syncs) and
    ``global id << 8 | worker << 1 | stale`` (pulls, with the row's ``ready`` in ``pull_a``):
    fewer buffers keep the loop's pointers in registers; :func:`assemble` unpacks them.
    ``touched`` is best a uint32 view. ``out`` receives (plans, pulls, syncs, violations).

    ``rb``: the per-row records (int64, line-aligned), meta in column ``mc`` and the global id
    in ``mc + 1``; ``rb32`` the same memory as int32, whose first columns are the cache stamps
    (``stamp`` is that strided view, for :func:`gmp.train.herald.cache.compact_queue`)."""
    vw, rb, mc, rb32, stamp, q_row, q_stamp = st.vw, st.rb, st.mc, st.rb32, st.stamp, st.q_row, st.q_stamp
    head, tail, size, clock = st.head, st.tail, st.size, st.clock
    touched, plan_e, pull_e, pull_a, sync_e, out = bufs.touched, bufs.plan_e, bufs.pull_e, bufs.pull_a, bufs.sync_e, \
        bufs.out
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
            compact_queue(w, stamp, q_row, q_stamp, head, tail)
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
def assemble(bufs, t, n_plan, n_pull, n_sync, n_evict):  # pragma: no cover - compiled
    """The batch's event arrays (kind, worker, global row, ready): plan | pulls | sync | evictions,
    unpacked from :func:`_sync_rows`' packed events; ``out[4]``, ``out[5]`` receive the stale
    pulls and the pulls that are ready before ``t - 1`` (prefetchable)."""
    plan_e, pull_e, pull_a, sync_e, ev_w, ev_r, out = bufs.plan_e, bufs.pull_e, bufs.pull_a, bufs.sync_e, \
        bufs.ev_w, bufs.ev_r, bufs.out
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
def flush_pending(st, num_rows, t):  # pragma: no cover - compiled
    """Epoch end (step 5): every pending update is pushed. Returns int64 [2, k] (holder, global
    id) of the rows with pending updates, ascending, and marks them clean, available after ``t``."""
    rb, mc = st.rb, st.mc
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


