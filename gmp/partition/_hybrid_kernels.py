"""Compiled kernels of the ``hybrid`` partitioner (see :mod:`gmp.partition.hybrid`).

Every kernel is sequential and visits vertices in a fixed order, so its result
depends only on its inputs: the partition is bit-identical for a given seed
whatever ``NUMBA_NUM_THREADS`` is (the authors' OpenMP sweeps race on shared
counters; these do not, and they implement Algorithm 1's sequential sweep
exactly). The state they share:

``count``   int32 [num_embeddings, N] — samples of worker w that use embedding x
``prim``    int32 [num_embeddings]    — primary worker of x
``sw``      int32 [num_samples]       — worker of every sample
``f``       float64 [cap + 2]         — the soft count f(c), c = 0 .. cap + 1
``ceff``    float64 [N, N]            — cost matrix, row p scaled by the traffic
                                        load factor of worker p (gamma term)

``f`` is concave and increasing with f(0) = 0, so ``df[c] = f[c + 1] - f[c]`` is
the marginal cost of one more user of an embedding on a worker.
"""

from __future__ import annotations

import numba
import numpy as np

from ..kernels.simd import LANES, gather_rows_dot, weighted_row_sum


@numba.njit(cache=True, nogil=True)
def count_samples(indptr, indices, sw, count):  # pragma: no cover - compiled
    """count[x, w] += 1 for every edge (i, x) with sw[i] = w."""
    for i in range(indptr.size - 1):
        w = sw[i]
        for k in range(indptr[i], indptr[i + 1]):
            count[indices[k], w] += 1


@numba.njit(cache=True, nogil=True)
def worker_loads(part, num_workers):  # pragma: no cover - compiled
    """int64 [num_workers]: how many entries of ``part`` hold each worker (entries < 0 are skipped).

    ``np.bincount`` would first copy an int32 array to intp: over criteo-1m's 33.8M primaries that
    copy and count took about 1 s of the 2D step; this pass reads the int32 array once."""
    out = np.zeros(num_workers, dtype=np.int64)
    for k in range(part.size):
        w = part[k]
        if w >= 0:
            out[w] += 1
    return out


@numba.njit(cache=True, nogil=True)
def remap(indices, local, out):  # pragma: no cover - compiled
    """out[k] = local[indices[k]] (embedding ids to their compact numbering)."""
    for k in range(indices.size):
        out[k] = local[indices[k]]


@numba.njit(cache=True, nogil=True, parallel=True)
def remap_parallel(indices, local, out):  # pragma: no cover - compiled
    """:func:`remap` on all threads (a pure map: the result does not depend on their number)."""
    for k in numba.prange(indices.size):
        out[k] = local[indices[k]]


@numba.njit(cache=True, nogil=True)
def used_ids_and_degree(indices, num_embeddings):  # pragma: no cover - compiled
    """``(ids, local, degree)``: the ids that occur (int32, ascending), ``local`` (int32 [num_embeddings],
    ``local[ids[j]] == j``, -1 elsewhere) and their degrees (int64 [len(ids)]), in one pass over the edges
    and one over the id space (``_common.compact_ids`` plus the degree it counts anyway)."""
    local = np.zeros(num_embeddings, dtype=np.int32)
    for k in range(indices.size):
        local[indices[k]] += 1
    n = 0
    for e in range(num_embeddings):
        if local[e] != 0:
            n += 1
    ids = np.empty(n, dtype=np.int32)
    degree = np.empty(n, dtype=np.int64)
    j = 0
    for e in range(num_embeddings):
        d = local[e]
        if d != 0:
            ids[j] = e
            degree[j] = d
            local[e] = j
            j += 1
        else:
            local[e] = -1
    return ids, local, degree


@numba.njit(cache=True, nogil=True)
def used_rows(count):  # pragma: no cover - compiled
    """bool [num_embeddings]: rows with any user."""
    out = np.zeros(count.shape[0], dtype=np.bool_)
    for x in range(count.shape[0]):
        for w in range(count.shape[1]):
            if count[x, w] != 0:
                out[x] = True
                break
    return out


@numba.njit(cache=True, nogil=True, parallel=True)
def fill_marginals(count, df, drow):  # pragma: no cover - compiled
    """drow[x, w] = df[count[x, w]] for the N real columns (padding columns stay as they are).

    A pure map on all threads (the result does not depend on their number); it also takes the
    first-touch page faults of the freshly allocated ``drow`` (criteo-1m: 180 MB, 0.5 s on one core)."""
    for x in numba.prange(count.shape[0]):
        for w in range(count.shape[1]):
            drow[x, w] = df[count[x, w]]


@numba.njit(cache=True, nogil=True, inline="always")
def sample_gains(indices, k0, k1, prim, drow, ceff, width, gain, count, df, a):  # pragma: no cover - compiled
    """Eq. 3 of the sample with edges [k0, k1) on every worker into ``gain`` (all SIMD column
    blocks of ``drow``); returns its cost on its own worker ``a``."""
    stay = gather_rows_dot(indices, k0, k1, prim, drow, ceff, 0, gain, count, df, a)
    for col in range(LANES, width, LANES):  # N > 8 workers: the rest of the gains only
        gather_rows_dot(indices, k0, k1, prim, drow, ceff, col, gain, count, df, None)
    return stay


@numba.njit(cache=True, nogil=True, inline="always")
def move_sample(indices, k0, k1, a, b, count, drow, df):  # pragma: no cover - compiled
    """The sample with edges [k0, k1) leaves worker a for b: its rows' counts and marginals."""
    for k in range(k0, k1):
        x = indices[k]
        ca = count[x, a] - 1
        cb = count[x, b] + 1
        count[x, a] = ca
        count[x, b] = cb
        drow[x, a] = df[ca]
        drow[x, b] = df[cb]


#: samples per block of :func:`private_last` (each block reorders its samples with its own buffer)
PRIVATE_BLOCK = 4096


@numba.njit(cache=True, nogil=True, parallel=True)
def private_last(indptr, indices, private, num_private):  # pragma: no cover - compiled
    """Reorder every sample's entries in place: its shared rows first, then its *private* rows
    (``private[x]`` != 0: degree 1, no other sample uses them), each group in its former order;
    ``num_private[i]`` = private rows of i. Blocks of samples on all threads (each sample is reordered
    by one thread alone, so the result does not depend on their number).

    The sample sweep moves a sample together with its private rows (:func:`sweep_samples`), so it
    needs them apart from the rows whose marginals it sums."""
    num_samples = indptr.size - 1
    longest = 0
    for i in range(num_samples):
        longest = max(longest, indptr[i + 1] - indptr[i])
    num_blocks = (num_samples + PRIVATE_BLOCK - 1) // PRIVATE_BLOCK
    for blk in numba.prange(num_blocks):
        buf = np.empty(longest, dtype=indices.dtype)
        for i in range(blk * PRIVATE_BLOCK, min(num_samples, (blk + 1) * PRIVATE_BLOCK)):
            k0 = indptr[i]
            k1 = indptr[i + 1]
            shared = k0
            held = 0
            for k in range(k0, k1):
                x = indices[k]
                if private[x]:
                    buf[held] = x
                    held += 1
                else:
                    indices[shared] = x
                    shared += 1
            for t in range(held):
                indices[shared + t] = buf[t]
            num_private[i] = held


@numba.njit(cache=True, nogil=True, inline="always")
def balance_delta(weight, load_to, load_from):  # pragma: no cover - compiled
    """Eq. 4's change when one vertex moves from a partition of load ``load_from`` to one of load
    ``load_to``: ``weight * (load_to - load_from + 1)``, the change of ``weight / 2 * sum_i (load_i -
    mean)^2``. The one place the sample (``alpha``) and primary (``beta``) balance terms of the sweeps are
    written: hybrid's, the incremental plans' and the distributed run's kernels call it."""
    return weight * (load_to - load_from + 1)


@numba.njit(cache=True, nogil=True, inline="always")
def cheapest_sample_move(gain, stay, load, cap, alpha, a):  # pragma: no cover - compiled
    """The worker b != a below ``cap`` that minimises ``gain[b] - stay + alpha * (load_b - load_a + 1)`` (a
    sample's move from a, Eq. 3 + Eq. 4), if that is below -1e-9 (no float-noise ping-pong); else a. Ties go
    to the lowest b."""
    best = a
    best_delta = -1e-9
    for b in range(load.size):
        if b == a or load[b] >= cap:
            continue
        delta = gain[b] - stay + balance_delta(alpha, load[b], load[a])
        if delta < best_delta:
            best_delta = delta
            best = b
    return best


@numba.njit(cache=True, nogil=True, inline="always")
def private_tally(indices, kp, k1, prim, ceff, a, df0, tally):  # pragma: no cover - compiled
    """``tally[w]`` = the private rows [kp, k1) of a sample with primary w; returns what they cost with the
    sample on a (``ceff[p_x, a] * df[0]`` each: nothing once their primaries are home)."""
    tally[:] = 0
    private_stay = 0.0
    for k in range(kp, k1):
        p = prim[indices[k]]
        tally[p] += 1
        private_stay += ceff[p, a] * df0
    return private_stay


@numba.njit(cache=True, nogil=True, inline="always")
def best_carry_move(shared, a, npv, tally, private_stay, pload, proom, beta, ceff, df0):  # pragma: no cover
    """The best move of a sample on worker a with ``npv`` private rows (their primaries by worker in
    ``tally``, their cost on a ``private_stay``; :func:`private_tally`): ``(best, carry)``, b = a when
    nothing improves J by more than 1e-9. Ties go to the lowest b.

    ``shared[b]``: the change of J when the sample alone moves to b without its private rows (Eq. 3 over
    its shared rows + Eq. 4's sample term), 0 for b = a, +inf where b may not take it. ``pload``: the
    primary loads the Eq. 4 term reads; ``proom[b]``: how many more primaries b may take. Candidates:
    the sample *with* its private rows to b (b = a too: the private rows come home), scored by the exact
    change of ``beta/2 * sum_w pload_w^2``, while b's arrivals ``npv - tally[b]`` fit ``proom[b]``; else
    the sample alone (its private rows then cost ``ceff[p_x, b] * df[0]``)."""
    num_workers = shared.size
    # beta/2 * (change of sum_w load_w^2) when they all leave: the part that does not depend on b
    base = 0.0
    for w in range(num_workers):
        t = tally[w]
        if t:
            base += (pload[w] - t) ** 2 - pload[w] ** 2
    best = a
    best_delta = -1e-9  # strictly improving moves only (no float-noise ping-pong)
    carry = False
    for b in range(num_workers):
        if shared[b] == np.inf:
            continue
        nb = pload[b] - tally[b] + npv  # b's primaries if the private rows go there
        if npv - tally[b] <= proom[b]:  # the compound move: sample and private rows to b
            quad = base + nb * nb - (pload[b] - tally[b]) ** 2
            delta = shared[b] - private_stay + beta / 2.0 * quad
            if delta < best_delta:
                best_delta = delta
                best = b
                carry = True
        elif b != a:  # the sample alone; its private rows stay where they are
            alone = 0.0
            for w in range(num_workers):
                if tally[w]:
                    alone += tally[w] * ceff[w, b] * df0
            delta = shared[b] + alone - private_stay
            if delta < best_delta:
                best_delta = delta
                best = b
                carry = False
    return best, carry


@numba.njit(cache=True, nogil=True, inline="always")
def carry_rows(indices, kp, k1, best, prim, primary_load):  # pragma: no cover - compiled
    """The private rows [kp, k1) of a sample take ``best`` as their primary (``primary_load``: the loads,
    or a process's net arrivals, that follow)."""
    for k in range(kp, k1):
        x = indices[k]
        p = prim[x]
        if p != best:
            primary_load[p] -= 1
            primary_load[best] += 1
            prim[x] = best


@numba.njit(cache=True, nogil=True)
def sweep_samples(indptr, indices, num_private, sw, prim, count, drow, df, ceff, load, cap, alpha, primary_load,
                  primary_cap, beta, gain, tally):  # pragma: no cover
    """One pass of Algorithm 1 lines 3-5 over the sample vertices, sequentially in id order.

    ``df[c] = f[c + 1] - f[c]``; ``drow[x, w] == df[count[x, w]]`` (kept in step
    with ``count``); ``ceff`` is the effective cost matrix padded with zero
    columns to ``drow``'s width (a multiple of ``_simd.LANES``). Sample i on
    worker a moves to the worker b != a that minimises

        sum_x ceff[p_x, b] * df[c_xb]                          (traffic added on b)
      - sum_x ceff[p_x, a] * df[c_xa - 1]                      (traffic saved on a)
      + alpha * (load_b - load_a + 1)                          (Eq. 4, samples)

    among workers below ``cap``, if that total is negative; otherwise it
    stays. Ties go to the lowest worker id. ``count``, ``drow`` and ``load``
    are updated in place before the next sample is decided, so every move
    lowers the objective exactly (gamma aside). Returns the number moved.

    **Private rows** (``num_private[i]`` > 0: the last entries of sample i,
    rows no other sample uses; :func:`private_last`) move *with* the sample:
    the sums above run over its shared rows only, and the move to b also
    makes b the primary of its private rows, which then cost nothing (before:
    ``ceff[p_x, a] * df[0]`` each). The change of the primary-balance term
    ``beta/2 * sum_w primary_load_w^2`` (Eq. 4) is added exactly, and b must
    stay within ``primary_cap`` after the move; b = a (the sample stays, its
    private rows come home) is a candidate too. When the primary cap rules
    the compound move out, the sample may still move alone (its private rows
    then cost ``ceff[p_x, b] * df[0]``). With Algorithm 1's single-vertex
    sweep a sample with many private rows never leaves its worker: each of
    them would become remote until the embedding sweep brings it along
    (docs/hybrid.md, "Private rows"). ``num_private`` all zero is that sweep
    exactly.

    The first sum, for all b at once, is the hot loop: one vector
    multiply-add per edge over the rows ``ceff[p_x]`` and ``drow[x]``
    (:func:`gmp.kernels.simd.gather_rows_dot`; the scalar form gathered
    ``df[count[x, b]]`` lane by lane and ran about 3x slower). The sums are
    taken in edge order either way, so the result is bit-identical to the
    scalar form.

    Why not in parallel: deciding a block of samples against one snapshot
    (then applying in order) is deterministic, but on dense graphs many
    samples of a block share embeddings and the stale decisions overshoot:
    on MovieLens-100K, blocks of 4096 left 158K batch remote reads where
    the sequential sweep reaches 83K.
    """
    num_workers = load.size
    width = drow.shape[1]
    df0 = df[0]
    shared = np.empty(num_workers, dtype=np.float64)  # best_carry_move's scratch
    proom = np.empty(num_workers, dtype=np.int64)
    moved = 0
    for i in range(indptr.size - 1):
        k0 = indptr[i]
        k1 = indptr[i + 1]
        if k0 == k1:
            continue
        kp = k1 - num_private[i]  # [k0, kp): shared rows, [kp, k1): private rows
        a = sw[i]
        stay = sample_gains(indices, k0, kp, prim, drow, ceff, width, gain, count, df, a)
        carry = False
        npv = k1 - kp
        if npv > 0:
            private_stay = private_tally(indices, kp, k1, prim, ceff, a, df0, tally)
            for b in range(num_workers):
                proom[b] = primary_cap - primary_load[b]
                if b == a:
                    shared[b] = 0.0
                elif load[b] >= cap:
                    shared[b] = np.inf
                else:
                    shared[b] = gain[b] - stay + balance_delta(alpha, load[b], load[a])
            best, carry = best_carry_move(shared, a, npv, tally, private_stay, primary_load, proom, beta, ceff,
                                          df0)
        else:
            best = cheapest_sample_move(gain, stay, load, cap, alpha, a)
        if best != a:  # a private row's count goes from (a: 1, best: 0) to (a: 0, best: 1) either way
            move_sample(indices, k0, k1, a, best, count, drow, df)
            load[a] -= 1
            load[best] += 1
            sw[i] = best
            moved += 1
        if carry:
            carry_rows(indices, kp, k1, best, prim, primary_load)
    return moved


@numba.njit(cache=True, nogil=True)
def sweep_embeddings(prim, count, active, f, ceff_t, load, cap, beta, fw, total, cost, served,
                     received):  # pragma: no cover - compiled
    """One pass of Algorithm 1 line 3-5 over the (used) embedding vertices, in id order.

    Embedding x with primary p moves to the worker q != p that minimises

        sum_w f(c_xw) * (ceff[q, w] - ceff[p, w])              (Eq. 3, soft count)
      + beta * (load_q - load_p + 1)                           (Eq. 4, primaries)

    if that is negative and ``load_q < cap``. Unused embeddings (``active`` is
    False) are never touched. ``ceff_t`` is ceff transposed and padded with
    zero columns to whole SIMD vectors (``ceff_t[w, q] = ceff[q, w]``), so the
    N sums above are one vector multiply-add per w.

    The counts do not change during this sweep, so x's traffic is final once
    x is decided: the pass also does :func:`traffic_summary`'s work (same
    order, same sums) and returns ``(moved, weighted, expected_reads,
    remote_accesses, epoch_unique_remote)`` with ``served``/``received``
    filled; that saves a separate pass per round.
    """
    num_workers = load.size
    width = ceff_t.shape[1]
    served[:] = 0.0
    received[:] = 0.0
    sums = np.zeros(2)  # weighted, reads
    counts = np.zeros(2, dtype=np.int64)  # remote, unique
    moved = 0
    for x in range(prim.size):
        if not active[x]:
            continue
        p = prim[x]
        for w in range(num_workers):
            fw[w] = f[count[x, w]]
        for col in range(0, width, LANES):
            weighted_row_sum(ceff_t, fw, num_workers, col, total)
        best = p
        best_delta = -1e-9
        for q in range(num_workers):
            if q == p or load[q] >= cap:
                continue
            delta = total[q] - total[p] + balance_delta(beta, load[q], load[p])
            if delta < best_delta:
                best_delta = delta
                best = q
        if best != p:
            load[p] -= 1
            load[best] += 1
            prim[x] = best
            moved += 1
        add_traffic(x, prim[x], count, f, cost, served, received, sums, counts)
    return moved, sums[0], sums[1], counts[0], counts[1]


@numba.njit(cache=True, nogil=True)
def traffic_summary(prim, count, active, f, cost, served, received):  # pragma: no cover - compiled
    """Soft-count traffic of the current placement.

    Fills ``served[p]`` (weighted expected fetches served by worker p, Eq. 5)
    and ``received[w]`` (weighted, received by w). Returns

    ``(weighted, expected_reads, remote_accesses, epoch_unique_remote)`` — Eq. 3
    with the soft count and cost matrix; the unweighted expected batch reads;
    the exact number of remote (sample, embedding) edges; the exact number of
    (embedding, worker) pairs with a remote user.
    """
    served[:] = 0.0
    received[:] = 0.0
    sums = np.zeros(2)  # weighted, reads
    counts = np.zeros(2, dtype=np.int64)  # remote, unique
    for x in range(prim.size):
        if active[x]:
            add_traffic(x, prim[x], count, f, cost, served, received, sums, counts)
    return sums[0], sums[1], counts[0], counts[1]


@numba.njit(cache=True, nogil=True, inline="always")
def add_traffic(x, p, count, f, cost, served, received, sums, counts):  # pragma: no cover - compiled
    """Add used embedding x (primary p) to the traffic totals: for every worker w != p with
    c = count[x, w] users, f(c) expected reads (``sums[1]``), weighted by cost[p, w]
    (``sums[0]``, ``served[p]``, ``received[w]``), c remote accesses (``counts[0]``) and
    one epoch-unique remote row (``counts[1]``)."""
    for w in range(served.size):
        if w == p:
            continue
        c = count[x, w]
        if c == 0:
            continue
        t = f[c]
        sums[1] += t
        counts[0] += c
        counts[1] += 1
        wt = t * cost[p, w]
        sums[0] += wt
        served[p] += wt
        received[w] += wt


@numba.njit(cache=True, nogil=True)
def replication_scores(prim, count, active, f, cost, w, out_ids, out_scores):  # pragma: no cover
    """Eq. 6 numerator for worker w: expected weighted traffic f(c_xw) * cost[p_x, w] of every used
    embedding not primary on w with c_xw > 0. Writes candidates in id order; returns their number."""
    n = 0
    for x in range(prim.size):
        if not active[x]:
            continue
        p = prim[x]
        if p == w:
            continue
        c = count[x, w]
        if c == 0:
            continue
        s = f[c] * cost[p, w]
        if s <= 0.0:
            continue
        out_ids[n] = x
        out_scores[n] = s
        n += 1
    return n


@numba.njit(cache=True, nogil=True)
def expand_indptr(indptr, ids, num_embeddings):  # pragma: no cover - compiled
    """A CSR row pointer over compact rows (row j = embedding ``ids[j]``, ids ascending) as one over
    all ``num_embeddings`` ids (empty rows for the ids not in ``ids``)."""
    out = np.empty(num_embeddings + 1, dtype=np.int64)
    out[0] = 0
    j = 0
    acc = np.int64(0)
    for e in range(num_embeddings):
        if j < ids.size and ids[j] == e:
            acc += indptr[j + 1] - indptr[j]
            j += 1
        out[e + 1] = acc
    return out
