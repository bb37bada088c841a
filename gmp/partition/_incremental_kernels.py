"""Compiled kernels of :mod:`gmp.partition.incremental` (used only by it).

Every kernel is sequential and visits vertices in a fixed order, so results
depend only on the inputs (bit-identical whatever ``NUMBA_NUM_THREADS`` is).
The state they share, over the *compact* ids (the ids the new data uses):

``count``  int32 [num_used, N]   samples of worker w that use embedding x
``prim``   int32 [num_used]      primary worker of x (-1: a new id not placed yet)
``sec``    int64 [num_used]      bit w set: worker w holds a secondary of x (N <= 64; int64, not
                                 uint64: numba mixes uint64 with int64 through float64, 10x slower)
``cost``   float64 [N, N]        the topology's cost of a row from primary p to reader w
``f``      float64 [cap + 2]     HET-GMP's soft count f(c) (Eq. 3 with batch de-duplication)
``df``     float64 [cap + 1]     df[c] = f(c + 1) - f(c), the marginal cost of one more user
``marg``   float64 [num_used, N] cost[p_x, w] * df[count[x, w]] where x is not local to w, else 0

A row x is *local* to worker w when ``prim[x] == w`` or bit w of ``sec[x]``
is set; a local row costs nothing (Eq. 3 counts remote users only).

The per-edge code is written inline, not through small helpers taking
arrays: with ``cache=True`` such a call is not inlined and costs reference
counting per call (measured: a helper made ``fill_marginals`` 20x slower).
"""

from __future__ import annotations

import numba
import numpy as np

from ..kernels.simd import popcount, prefetch
from ._hybrid_kernels import balance_delta, cheapest_sample_move
from ._hybrid_kernels import count_samples  # noqa: F401 - one kernel, used as K.count_samples

_ONE = np.int64(1)


@numba.njit(cache=True, nogil=True)
def _holds(mask, w):  # pragma: no cover - compiled
    return (mask >> w) & 1 != 0


@numba.njit(cache=True, nogil=True)
def fill_marginals(prim, sec, count, df, cost, marg):  # pragma: no cover - compiled
    """marg[x, w] = cost[p_x, w] * df[count[x, w]] when x is not local to w (else 0; 0 for new ids):
    the Eq. 3 cost one more sample of w adds by reading x. Kept in step with ``count`` by the
    sample kernels, so their hot loop is one contiguous row add per edge."""
    for x in range(prim.size):
        _fill_row(x, prim, sec, count, df, cost, marg)


@numba.njit(cache=True, nogil=True)
def refresh_marginals(rows, prim, sec, count, df, cost, marg):  # pragma: no cover - compiled
    """:func:`fill_marginals` for the rows with ``rows[x]`` set (their primary or secondaries changed)."""
    for x in range(prim.size):
        if rows[x]:
            _fill_row(x, prim, sec, count, df, cost, marg)


@numba.njit(cache=True, nogil=True, inline="always")
def _fill_row(x, prim, sec, count, df, cost, marg):  # pragma: no cover - compiled
    # per row, not per edge: inlined, so the call costs nothing
    p = prim[x]
    for w in range(count.shape[1]):
        if p < 0 or p == w or (sec[x] >> w) & 1 != 0:
            marg[x, w] = 0.0
        else:
            marg[x, w] = cost[p, w] * df[count[x, w]]


@numba.njit(cache=True, nogil=True)
def split_edges(indptr, cindices, flags, oindptr, out, num_private, sindptr, sout):  # pragma: no cover - compiled
    """Split every sample's entries into two CSRs: the rows that are not sealed (``flags[x] & 1`` clear:
    ``oindptr``, ``out``), the sample's carried rows (``flags[x] & 2``) last and counted in
    ``num_private``, and the sealed rows (``sindptr``, ``sout``); each group in its former order.
    ``out`` and ``sout`` have one spare entry each: the copies are branch-free.

    A sealed row is local to every worker (its primary and secondaries cover them all), so its
    marginal is 0 on every worker and the sample kernels need not sum it. The carried rows are the
    new ids the sweep moves with their sample (:func:`sweep_samples`); they are never sealed. Most
    samples carry none: they are copied in one pass, the others in two more. A sample's flags are
    gathered first (independent loads), so the position of the next write waits on no load."""
    longest = 0
    for i in range(indptr.size - 1):
        longest = max(longest, indptr[i + 1] - indptr[i])
    fl = np.empty(longest, dtype=np.uint8)
    k2 = 0
    s2 = 0
    oindptr[0] = 0
    sindptr[0] = 0
    for i in range(indptr.size - 1):
        k0 = indptr[i]
        deg = indptr[i + 1] - k0
        carried = 0
        for j in range(deg):
            fl[j] = flags[cindices[k0 + j]]
            carried |= fl[j]
        held = 0
        if carried & 2 == 0:
            for j in range(deg):
                x = cindices[k0 + j]
                out[k2] = x
                sout[s2] = x
                k2 += 1 - (fl[j] & 1)
                s2 += fl[j] & 1
        else:
            for j in range(deg):
                x = cindices[k0 + j]
                out[k2] = x
                sout[s2] = x
                k2 += 1 - min(fl[j], 1)
                s2 += fl[j] & 1
            for j in range(deg):
                c = fl[j] >> 1
                out[k2] = cindices[k0 + j]
                k2 += c
                held += c
        num_private[i] = held
        oindptr[i + 1] = k2
        sindptr[i + 1] = s2
    return k2


@numba.njit(cache=True, nogil=True, inline="always")
def cheapest_below_cap(delta, load, cap):  # pragma: no cover - compiled
    """The worker with the lowest ``delta`` among those with ``load < cap``, the lowest id on ties (-1: none);
    inlined (``inline="always"``), so the per-sample call costs nothing."""
    best = -1
    for w in range(load.size):
        if load[w] >= cap:
            continue
        if best < 0 or delta[w] < delta[best]:
            best = w
    return best


@numba.njit(cache=True, nogil=True)
def stream_samples(indptr, cindices, order, prim, sec, count, marg, df, cost, load, cap, alpha,
                   out):  # pragma: no cover - compiled
    """Place every sample once, in ``order``, against fixed rows (one streaming pass).

    Sample i goes to the worker w below ``cap`` that minimises

        sum_x [x not local to w] * cost[p_x, w] * df[count[x, w]]     (Eq. 3, marginal soft count)
      + alpha * load[w]                                              (Eq. 4, samples)

    ties to the lowest id; then ``count``, ``marg`` and ``load`` are updated. A new id
    (``prim[x] < 0``) has no primary yet: it counts as if its primary were
    the worker holding most of its samples so far (lowest id on ties; where it will be
    placed), and costs nothing while it has no users. That virtual primary is tracked
    per row and its ``marg`` row refilled when it changes (only the chosen worker's
    count changes per sample), so every edge is the same contiguous row add.

    Only the edges of ``indptr``/``cindices`` are read; the caller passes the open edges
    (:func:`split_edges`: the rows not local to every worker, whose ``marg`` row is 0 and stays 0
    here) and counts the sealed rows' samples afterwards, in dataset order:
    counting them here, in the random stream order, cost as much as the rest of the pass.

    The stream order is random, so every sample's rows are cache misses: while sample t is
    placed, the ``marg`` and ``count`` rows of sample t + 1, the edge list of t + 2 and the
    ``indptr`` entry of t + 3 are prefetched (hints only: the result is the same; measured
    1.07 -> 0.71 s at 1M samples, 26M edges, 205k rows, 8 workers).
    """
    n = load.size
    delta = np.empty(n)
    vp = prim.copy()  # new ids: the worker with most users so far (-1: none yet)
    for t in range(order.size):
        i = order[t]
        if t + 3 < order.size:
            prefetch(indptr, order[t + 3])
        if t + 2 < order.size:
            prefetch(cindices, indptr[order[t + 2]])
        if t + 1 < order.size:
            j = order[t + 1]
            for k in range(indptr[j], indptr[j + 1]):
                prefetch(marg, cindices[k])
                prefetch(count, cindices[k])
        for w in range(n):
            delta[w] = alpha * load[w]
        for k in range(indptr[i], indptr[i + 1]):
            x = cindices[k]
            for w in range(n):
                delta[w] += marg[x, w]
        best = cheapest_below_cap(delta, load, cap)
        out[i] = best
        load[best] += 1
        for k in range(indptr[i], indptr[i + 1]):
            x = cindices[k]
            c = count[x, best] + 1
            count[x, best] = c
            p = vp[x]  # inline (a call per edge costs more than the work)
            if prim[x] < 0 and p != best and (p < 0 or c > count[x, p] or (c == count[x, p] and best < p)):
                vp[x] = best  # a new id's virtual primary moved: its whole row changes
                for w in range(n):
                    marg[x, w] = 0.0 if w == best else cost[best, w] * df[count[x, w]]
            elif p == best or (sec[x] >> best) & 1 != 0:
                marg[x, best] = 0.0
            else:
                marg[x, best] = cost[p, best] * df[c]


@numba.njit(cache=True, nogil=True)
def mark_samples(indptr, cindices, flags, out):  # pragma: no cover - compiled
    """out[i] |= the OR of ``flags[x]`` over the rows x of sample i in this CSR (one of the two halves of
    :func:`split_edges`: the caller zeroes ``out`` and marks from each half it needs)."""
    for i in range(indptr.size - 1):
        m = 0
        for k in range(indptr[i], indptr[i + 1]):
            m |= flags[cindices[k]]
        out[i] |= m


@numba.njit(cache=True, nogil=True)
def sweep_samples(oindptr, ocindices, num_private, sindptr, scindices, lost, marks, every, sw, prim, sec, count,
                  marg, df, cost, load, cap, alpha, pload, pcap, beta, sec_load):  # pragma: no cover - compiled
    """One sweep over the samples in id order, all of them (``every``) or those with bit 0 of ``marks``
    (Algorithm 1 lines 3-5 of HET-GMP, samples only).

    Sample i on worker a moves to the worker b != a below ``cap`` minimising

        sum_x [x not local to b] cost[p_x, b] df[c_xb]          (added on b: marg[x, b])
      - sum_x [x not local to a] cost[p_x, a] df[c_xa - 1]      (saved on a)
      + alpha * (load_b - load_a + 1)                            (Eq. 4)

    if that is negative (strictly: below -1e-9); ``count``, ``marg`` and ``load`` are
    updated before the next sample. Moving a sample moves no embedding row,
    so these moves are free for the migration budget. Returns the number moved.

    **Carried rows** (``num_private[i]`` > 0: the last entries of sample i, new ids no other
    sample uses; :func:`split_edges`) move *with* the sample, as
    ``hybrid``'s ``carry_private`` sweep does: the sums above run over the other rows, and the move
    to b also makes b the primary of the carried rows, which then cost nothing (before:
    ``cost[p_x, a] * df[0]`` each where not local to a). A new id is created, not moved, so this
    costs no migration budget. The change of Eq. 4's primary term ``beta/2 * sum_w pload_w^2`` is
    added exactly and b must stay within ``pcap``; b = a (the sample stays, its carried rows come
    home) is a candidate too; when the cap rules the compound move out the sample may still move
    alone (its carried rows then cost ``cost[p_x, b] * df[0]``). A secondary of a carried row on b
    is dropped (``sec_load``) when its primary arrives. Without carrying, a new id of degree 1 pins
    its sample (it would turn remote the moment the sample left). ``num_private`` all zero is the
    single-vertex sweep exactly.

    The sums run over the open edges (``oindptr``/``ocindices``, :func:`split_edges`; ``num_private``
    counts the carried rows at their end): a row local to every worker adds nothing to either side
    (its ``marg`` is 0 and it is local to ``a``). A sealed row that has lost a copy since the split
    (``lost[x]`` set: a row-move round evicted one of its secondaries) is summed from the sealed entries
    (``sindptr``/``scindices``) of the samples with bit 1 of ``marks`` (:func:`mark_samples`), so the
    edges need not be split again. ``count`` follows every edge of a moved sample. The full CSR as the
    open one, no sealed entries and no ``lost`` row: the sweep over every edge.

    No prefetching here (unlike :func:`stream_samples`): prefetching the next sample's rows made
    this sweep slower (0.44 -> 0.55 s at 1M samples; the samples are visited in id order).
    """
    n = load.size
    delta = np.empty(n)
    tally = np.zeros(n, dtype=np.int64)
    df0 = df[0]
    moved = 0
    for i in range(oindptr.size - 1):
        k0 = oindptr[i]
        k1 = oindptr[i + 1]
        if (k0 == k1 and sindptr[i] == sindptr[i + 1]) or not (every or marks[i] & 1):
            continue
        kp = k1 - num_private[i]  # [k0, kp): rows summed by marginals, [kp, k1): carried rows
        a = sw[i]
        stay = 0.0
        for w in range(n):
            delta[w] = 0.0
        for k in range(k0, kp):
            x = ocindices[k]
            for w in range(n):
                delta[w] += marg[x, w]
            if prim[x] != a and (sec[x] >> a) & 1 == 0:
                stay += cost[prim[x], a] * df[count[x, a] - 1]
        if marks[i] & 2:  # rows sealed when the edges were split that lost a copy since
            for k in range(sindptr[i], sindptr[i + 1]):
                x = scindices[k]
                if lost[x]:
                    for w in range(n):
                        delta[w] += marg[x, w]
                    if prim[x] != a and (sec[x] >> a) & 1 == 0:
                        stay += cost[prim[x], a] * df[count[x, a] - 1]
        carry = False
        npv = k1 - kp
        if npv == 0:
            best = cheapest_sample_move(delta, stay, load, cap, alpha, a)
        else:
            for w in range(n):
                tally[w] = 0
            private_stay = 0.0
            for k in range(kp, k1):
                x = ocindices[k]
                p = prim[x]
                tally[p] += 1
                if p != a and (sec[x] >> a) & 1 == 0:
                    private_stay += cost[p, a] * df0
            # beta/2 * (change of sum_w pload_w^2) when they all leave, (L - t)^2 - L^2 = t (t - 2 L) per worker:
            # the part that does not depend on b
            base = 0.0
            for w in range(n):
                base += tally[w] * (tally[w] - 2 * pload[w])
            best = a
            best_delta = -1e-9
            for b in range(n):
                if b != a and load[b] >= cap:
                    continue
                nb = pload[b] - tally[b] + npv
                shared = 0.0 if b == a else delta[b] - stay + balance_delta(alpha, load[b], load[a])
                if nb <= pcap:  # the compound move: the sample and its carried rows to b
                    d = shared - private_stay + beta / 2.0 * (base + nb * nb - (pload[b] - tally[b]) ** 2)
                    if d < best_delta:
                        best_delta = d
                        best = b
                        carry = True
                elif b != a:  # the sample alone; its carried rows stay
                    alone = 0.0
                    for k in range(kp, k1):
                        x = ocindices[k]
                        if prim[x] != b and (sec[x] >> b) & 1 == 0:
                            alone += cost[prim[x], b] * df0
                    d = shared + alone - private_stay
                    if d < best_delta:
                        best_delta = d
                        best = b
                        carry = False
        if best != a:
            for k in range(sindptr[i], sindptr[i + 1]):
                x = scindices[k]
                count[x, a] -= 1
                count[x, best] += 1
                if marks[i] & 2 and lost[x]:
                    _fill_row(x, prim, sec, count, df, cost, marg)
            for k in range(k0, k1):
                x = ocindices[k]
                count[x, a] -= 1
                count[x, best] += 1
                p = prim[x]  # inline _marginal (a call per edge costs more than the work)
                if p < 0 or p == a or (sec[x] >> a) & 1 != 0:
                    marg[x, a] = 0.0
                else:
                    marg[x, a] = cost[p, a] * df[count[x, a]]
                if p < 0 or p == best or (sec[x] >> best) & 1 != 0:
                    marg[x, best] = 0.0
                else:
                    marg[x, best] = cost[p, best] * df[count[x, best]]
            load[a] -= 1
            load[best] += 1
            sw[i] = best
            moved += 1
        if carry:  # the tally of the carried rows' primaries all moves to best
            for w in range(n):
                pload[w] -= tally[w]
            pload[best] += npv
            for k in range(kp, k1):
                x = ocindices[k]
                prim[x] = best
                if (sec[x] >> best) & 1 != 0:  # a secondary where the primary now is: dropped
                    sec[x] &= ~(_ONE << best)
                    sec_load[best] -= 1
                _fill_row(x, prim, sec, count, df, cost, marg)
    return moved


@numba.njit(cache=True, nogil=True)
def primary_candidates(prim, sec, count, f, cost, load, cap, beta, out_target, out_gain):  # pragma: no cover
    """For every row x, the best primary move p -> q (q below ``cap``):

        gain = R(x, p) - R(x, q) - beta * (load_q - load_p + 1)                          (Eq. 3 + Eq. 4)

    where R(x, r) = sum over readers w != r without a secondary of f(count[x, w]) * cost[r, w]
    is Eq. 3 for x with its primary on r (a secondary on q is dropped when the primary moves
    there, so q's own column never counts). ``out_target[x] = q`` and ``out_gain[x] = gain``
    when some move has gain > 1e-9, else ``out_target[x] = -1``. Rows' gains are independent
    of each other (only the balance term couples them), so a greedy pick by gain is exact for
    the communication part.
    """
    n = load.size
    fw = np.empty(n)
    for x in range(prim.size):
        out_target[x] = -1
        out_gain[x] = 0.0
        p = prim[x]
        mask = sec[x]
        for w in range(n):
            fw[w] = 0.0 if (mask >> w) & 1 != 0 else f[count[x, w]]
        here = 0.0
        for w in range(n):
            if w != p:
                here += fw[w] * cost[p, w]
        if here <= 0.0:
            continue
        best_gain = 1e-9
        for q in range(n):
            if q == p or load[q] >= cap:
                continue
            there = 0.0
            for w in range(n):
                if w != q:
                    there += fw[w] * cost[q, w]
            g = here - there - balance_delta(beta, load[q], load[p])
            if g > best_gain:
                best_gain = g
                out_target[x] = q
                out_gain[x] = g


@numba.njit(cache=True, nogil=True)
def secondary_scores(prim, sec, count, f, cost, w, old_prim, old_sec, is_old, fresh, fscore, ffree, inc,
                     iscore):  # pragma: no cover - compiled
    """Worker w's secondary candidates in one pass over the rows (ascending): Eq. 6's numerator
    ``f[count[x, w]] * cost[prim[x], w]`` of each row. ``fresh``/``fscore``/``ffree``: the rows w does not hold
    with a positive score, and whether a copy on w costs no row (a new id, or w held it in the old placement);
    ``inc``/``iscore``: the rows w holds a secondary of. Returns ``(fresh rows, incumbents)``."""
    nf = 0
    ni = 0
    for x in range(prim.size):
        score = f[count[x, w]] * cost[prim[x], w]
        if _holds(sec[x], w):
            inc[ni] = x
            iscore[ni] = score
            ni += 1
        elif prim[x] != w and score > 0:
            fresh[nf] = x
            fscore[nf] = score
            ffree[nf] = not is_old[x] or _was_held(x, w, old_prim, old_sec)
            nf += 1
    return nf, ni


@numba.njit(cache=True, nogil=True)
def _was_held(x, w, old_prim, old_sec):  # pragma: no cover - compiled
    return old_prim[x] == w or _holds(old_sec[x], w)


@numba.njit(cache=True, nogil=True)
def primary_move_cost(x, p, q, old_prim, old_sec, is_old, sec):  # pragma: no cover - compiled
    """Change of the moved-row count when row x's primary goes p -> q (dropping a secondary on q).

    Moved rows (see :func:`gmp.partition.incremental.moved_rows`): an old row whose primary
    differs from its old primary counts 1; a secondary (x, w) that the old placement did not
    hold on w counts 1. New ids never count.
    """
    if not is_old[x]:
        return 0
    d = (1 if q != old_prim[x] else 0) - (1 if p != old_prim[x] else 0)
    if _holds(sec[x], q) and not _was_held(x, q, old_prim, old_sec):
        d -= 1
    return d


@numba.njit(cache=True, nogil=True)
def secondary_add_cost(x, w, old_prim, old_sec, is_old):  # pragma: no cover - compiled
    """Moved rows added by a secondary of x on w (1 unless the old placement held x on w)."""
    if not is_old[x] or _was_held(x, w, old_prim, old_sec):
        return 0
    return 1


@numba.njit(cache=True, nogil=True)
def apply_moves(order, kind, row, target, evict, prim, sec, load, cap, sec_load, sec_cap, old_prim, old_sec,
                is_old, budget, spent):  # pragma: no cover - compiled
    """Apply candidate moves in ``order`` while the migration budget allows; returns the rows spent.

    ``kind[j]`` 0: move row ``row[j]``'s primary to ``target[j]``; 1: give row ``row[j]`` a
    secondary on worker ``target[j]``, evicting row ``evict[j]``'s secondary there
    (``-1``: a free slot). A move is skipped when it would exceed ``budget`` (the exact
    cost is recomputed here, so ``spent`` never exceeds it), when its gain is stale (a primary move
    of a row already changed in this batch; a secondary swap of a row whose primary moved in this
    batch: a secondary's gain on w depends on the row's count on w and its primary, not on its
    copies elsewhere, so a hot row may gain copies on several workers in one batch), or when a cap
    would be exceeded. Returns ``(spent, touched)``, ``touched`` marking the rows changed.
    """
    touched = np.zeros(prim.size, dtype=np.bool_)
    moved = np.zeros(prim.size, dtype=np.bool_)  # primary moved in this batch
    for t in range(order.size):
        j = order[t]
        x = row[j]
        w = target[j]
        if kind[j] == 0:
            p = prim[x]
            if touched[x] or w == p or load[w] >= cap:
                continue
            d = primary_move_cost(x, p, w, old_prim, old_sec, is_old, sec)
            if spent + d > budget:
                continue
            if _holds(sec[x], w):
                sec[x] &= ~(_ONE << w)
                sec_load[w] -= 1
            prim[x] = w
            load[p] -= 1
            load[w] += 1
            spent += d
            touched[x] = True
            moved[x] = True
        else:
            e = evict[j]
            if moved[x] or prim[x] == w or _holds(sec[x], w):
                continue
            if e >= 0:
                if moved[e] or not _holds(sec[e], w):
                    continue
            elif sec_load[w] >= sec_cap[w]:
                continue
            d = secondary_add_cost(x, w, old_prim, old_sec, is_old)
            if e >= 0:
                d -= secondary_add_cost(e, w, old_prim, old_sec, is_old)
            if spent + d > budget:
                continue
            sec[x] |= _ONE << w
            if e >= 0:
                sec[e] &= ~(_ONE << w)
                touched[e] = True
            else:
                sec_load[w] += 1
            spent += d
            touched[x] = True
    return spent, touched


@numba.njit(cache=True, nogil=True)
def masks_from_csr(indptr, workers, ids, out):  # pragma: no cover - compiled
    """out[j] = bitmask of the secondary workers of embedding ``ids[j]`` (CSR over all ids)."""
    for j in range(ids.size):
        e = ids[j]
        m = np.int64(0)
        for k in range(indptr[e], indptr[e + 1]):
            m |= _ONE << np.int64(workers[k])
        out[j] = m


@numba.njit(cache=True, nogil=True)
def csr_from_masks(old_indptr, old_workers, num_old, bits, sec, num_embeddings, num_workers):  # pragma: no cover
    """The secondary CSR over all ``num_embeddings`` ids: the used ids (bit e of ``bits`` set; their
    compact ids ascend with e) take their mask ``sec[j]``; other old rows (``e < num_old``) keep their
    old list; the rest have none. Workers ascending within a row."""
    indptr = np.zeros(num_embeddings + 1, dtype=np.int64)
    j = 0
    for e in range(num_embeddings):
        if (bits[e >> 6] >> (e & 63)) & 1:
            c = 0
            for w in range(num_workers):
                if _holds(sec[j], w):
                    c += 1
            j += 1
        elif e < num_old:
            c = old_indptr[e + 1] - old_indptr[e]
        else:
            c = 0
        indptr[e + 1] = indptr[e] + c
    workers = np.empty(indptr[num_embeddings], dtype=np.int32)
    j = 0
    for e in range(num_embeddings):
        k = indptr[e]
        if (bits[e >> 6] >> (e & 63)) & 1:
            for w in range(num_workers):
                if _holds(sec[j], w):
                    workers[k] = w
                    k += 1
            j += 1
        elif e < num_old:
            for kk in range(old_indptr[e], old_indptr[e + 1]):
                workers[k] = old_workers[kk]
                k += 1
    return indptr, workers


@numba.njit(cache=True, nogil=True)
def mark_ids(indices, bits):  # pragma: no cover - compiled
    """Set bit ``x`` of the bitmap ``bits`` (int64 words) for every id x in ``indices``: 1 bit per id of
    the id space (4 MB for Criteo-Kaggle's 33.8M ids) instead of an int32 table (135 MB), so the random
    writes stay in the cache."""
    for k in range(indices.size):
        x = indices[k]
        bits[x >> 6] |= _ONE << (x & 63)


@numba.njit(cache=True, nogil=True)
def rank_ids(bits, rank):  # pragma: no cover - compiled
    """``rank[w]`` = the set bits of ``bits[:w]``; returns the set ids ascending (int32): the compact
    numbering of the used ids is their rank, ``rank[x >> 6] + popcount(bits[x >> 6] & (2^(x & 63) - 1))``."""
    total = 0
    for w in range(bits.size):
        rank[w] = total
        total += popcount(bits[w])
    ids = np.empty(total, dtype=np.int32)
    j = 0
    for w in range(bits.size):
        b = bits[w]
        while b != 0:
            low = b & -b
            ids[j] = w * 64 + popcount(low - 1)
            j += 1
            b ^= low
    return ids


@numba.njit(cache=True, nogil=True)
def remap(indices, bits, rank, out, degree):  # pragma: no cover - compiled
    """out[k] = the compact id (rank, :func:`rank_ids`) of ``indices[k]``, then ``degree[j] +=`` the edges
    of compact id j (``degree`` zeroed by the caller): the one count of the rows' samples that the density
    default, the carried new ids and the ``project`` start read. Two loops, not one: with the count in
    the same loop each edge's increment waited on its rank lookup (6.5M-sample day, 169M edges: 3.1 s
    fused, 0.8 + 0.2 s apart)."""
    for k in range(indices.size):
        x = indices[k]
        w = x >> 6
        out[k] = rank[w] + popcount(bits[w] & ((_ONE << (x & 63)) - 1))
    for k in range(out.size):
        degree[out[k]] += 1


@numba.njit(cache=True, nogil=True)
def new_secondaries(new_indptr, new_workers, old_prim, old_indptr, old_workers, keep):  # pragma: no cover
    """Secondaries (x, w) of the new CSR, x < old_prim.size with ``keep[x]``, on a worker that
    held no copy of x in the old placement (its primary or one of its secondaries)."""
    num = 0
    for x in range(old_prim.size):
        if not keep[x]:
            continue
        for k in range(new_indptr[x], new_indptr[x + 1]):
            w = new_workers[k]
            if w == old_prim[x]:
                continue
            held = False
            for kk in range(old_indptr[x], old_indptr[x + 1]):
                if old_workers[kk] == w:
                    held = True
                    break
            if not held:
                num += 1
    return num


@numba.njit(cache=True, nogil=True)
def toward_gains(prim, sec, count, f, cost, goal, out_target, out_gain):  # pragma: no cover - compiled
    """For every row x whose ``goal[x]`` (>= 0) differs from its primary p: the gain of moving it there,

        gain = R(x, p) - R(x, q)        q = goal[x]                                  (Eq. 3)

    with R as in :func:`primary_candidates` (a secondary on q is dropped by the move).
    ``out_target[x] = q`` when the gain is > 1e-9 (else -1), ``out_gain[x]`` the gain."""
    n = count.shape[1]
    fw = np.empty(n)
    for x in range(prim.size):
        out_target[x] = -1
        out_gain[x] = 0.0
        p = prim[x]
        q = goal[x]
        if q < 0 or q == p:
            continue
        mask = sec[x]
        for w in range(n):
            fw[w] = 0.0 if (mask >> w) & 1 != 0 else f[count[x, w]]
        here = 0.0
        there = 0.0
        for w in range(n):
            if w != p:
                here += fw[w] * cost[p, w]
            if w != q:
                there += fw[w] * cost[q, w]
        if here - there > 1e-9:
            out_target[x] = q
            out_gain[x] = here - there


@numba.njit(cache=True, nogil=True)
def stream_majority(indptr, cindices, order, prim, vote, count, load, cap, out):  # pragma: no cover - compiled
    """Place every sample once, in ``order``, on the worker holding most of its voting rows (the
    ``project`` start of :func:`gmp.partition.incremental.place_new_data`).

    A row with ``vote[x]`` set votes for its primary; a new id (``prim[x] < 0``) for the worker
    holding most of its samples so far (lowest id on ties; none while it has no samples). The
    sample goes to the worker below ``cap`` with most votes, ties to the least loaded, then the
    lowest id (the rule of :func:`gmp.partition._multilevel.project`, which has no new ids).
    ``count`` is updated for the new ids only (what their virtual primaries need). One lookup
    per edge in a small table: no marginal rows are read, so it costs a fraction of
    :func:`stream_samples`.
    """
    n = load.size
    tally = np.zeros(n, dtype=np.int64)
    vp = prim.copy()
    for t in range(order.size):
        i = order[t]
        for k in range(indptr[i], indptr[i + 1]):
            x = cindices[k]
            if vote[x]:
                p = vp[x]
                if p >= 0:
                    tally[p] += 1
        best = -1
        for w in range(n):
            if load[w] >= cap:
                continue
            if best < 0 or tally[w] > tally[best] or (tally[w] == tally[best] and load[w] < load[best]):
                best = w
        for w in range(n):
            tally[w] = 0
        out[i] = best
        load[best] += 1
        for k in range(indptr[i], indptr[i + 1]):
            x = cindices[k]
            if prim[x] < 0:
                c = count[x, best] + 1
                count[x, best] = c
                p = vp[x]
                if p != best and (p < 0 or c > count[x, p] or (c == count[x, p] and best < p)):
                    vp[x] = best


@numba.njit(cache=True, nogil=True)
def _chunks(sw, n, batch_size):  # pragma: no cover - compiled
    """int32 [samples]: 1 + the chunk of ``batch_size`` that each sample falls in among its worker's samples
    in dataset order (``gmp.metrics``' batches)."""
    pos = np.zeros(n, dtype=np.int64)
    out = np.empty(sw.size, dtype=np.int32)
    for s in range(sw.size):
        w = sw[s]
        out[s] = pos[w] // batch_size + 1
        pos[w] += 1
    return out


@numba.njit(cache=True, nogil=True)
def batch_reads(indptr, cindices, sindptr, scindices, sw, prim, sec, batch_size, n):  # pragma: no cover
    """``gmp.metrics.batch_remote_reads`` over compact ids: each worker's samples in dataset order, in
    chunks of ``batch_size``; per chunk the distinct rows the worker does not hold (``prim``/``sec``).
    A sample's entries are its ``indptr`` ones and, when ``sindptr`` is not empty, its ``sindptr`` ones
    (the two CSRs of :class:`gmp.partition.incremental._Split`). In dataset order, a chunk stamp per
    row and worker (int32 [rows, N]): sequential reads of the edges."""
    chunk = _chunks(sw, n, batch_size)
    stamp = np.zeros((prim.size, n), dtype=np.int32)
    sealed = sindptr.size > 0
    total = np.int64(0)
    for s in range(sw.size):
        w = sw[s]
        c = chunk[s]
        total += _chunk_reads(cindices, indptr[s], indptr[s + 1], stamp, w, c, prim, sec)
        if sealed:
            total += _chunk_reads(scindices, sindptr[s], sindptr[s + 1], stamp, w, c, prim, sec)
    return total


@numba.njit(cache=True, nogil=True, inline="always")
def _chunk_reads(ids, lo, hi, stamp, w, c, prim, sec):  # pragma: no cover - compiled
    """Rows ``ids[lo:hi]`` that ``w`` does not hold and not yet stamped for chunk ``c`` of worker ``w``
    (stamped now): the chunk's new remote reads. The holder test comes first: a held row is never
    counted, so its stamp need not be read, and the rows every worker holds are few and hot (their
    ``prim``/``sec`` entries stay in cache) but carry most edges (77% on a 1M-sample independent-drift
    day): 35% less CPU than stamping every edge."""
    total = 0
    for k in range(lo, hi):
        x = ids[k]
        if prim[x] != w and (sec[x] >> w) & 1 == 0 and stamp[x, w] != c:
            stamp[x, w] = c
            total += 1
    return total


@numba.njit(cache=True, nogil=True)
def row_batches(indptr, cindices, sw, batch_size, nb, skip):  # pragma: no cover - compiled
    """``nb[x, w]``: the chunks of ``batch_size`` of worker w's samples (dataset order) that read x, so that
    a placement of the rows with these samples reads ``sum over w not holding x of nb[x, w]`` (rows are
    independent once the samples are fixed). ``nb`` int32 [rows, N], zeros. Rows where ``skip`` (bool
    [rows]) is set are not counted (0): the caller's rows that read nothing in every placement it scores."""
    n = nb.shape[1]
    chunk = _chunks(sw, n, batch_size)
    stamp = np.zeros(nb.shape, dtype=np.int32)
    for s in range(sw.size):
        w = sw[s]
        c = chunk[s]
        for k in range(indptr[s], indptr[s + 1]):
            x = cindices[k]
            if not skip[x] and stamp[x, w] != c:
                stamp[x, w] = c
                nb[x, w] += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def row_batches_parallel(indptr, cindices, sw, batch_size, nb, skip):  # pragma: no cover - compiled
    """:func:`row_batches` with the workers in parallel: a worker's chunks and counts are its own (int32
    [N, rows] each, added into ``nb`` at the end), so the threads share nothing they write. For the calls
    that nothing runs beside (target mode's moves toward its target, once its re-partition has ended)."""
    n = nb.shape[1]
    rows = nb.shape[0]
    start = np.zeros(n + 1, dtype=np.int64)
    for s in range(sw.size):
        start[sw[s] + 1] += 1
    for w in range(n):
        start[w + 1] += start[w]
    order = np.empty(sw.size, dtype=np.int64)  # each worker's samples, in dataset order
    pos = start[:n].copy()
    for s in range(sw.size):
        order[pos[sw[s]]] = s
        pos[sw[s]] += 1
    counts = np.zeros((n, rows), dtype=np.int32)
    stamp = np.zeros((n, rows), dtype=np.int32)
    for w in numba.prange(n):
        for j in range(start[w], start[w + 1]):
            s = order[j]
            c = np.int32((j - start[w]) // batch_size + 1)
            for k in range(indptr[s], indptr[s + 1]):
                x = cindices[k]
                if not skip[x] and stamp[w, x] != c:
                    stamp[w, x] = c
                    counts[w, x] += 1
    for x in numba.prange(rows):
        for w in range(n):
            nb[x, w] += counts[w, x]


@numba.njit(cache=True, nogil=True)
def row_batches_by_row(tindptr, tsamples, sw, batch_size, nb, skip):  # pragma: no cover - compiled
    """:func:`row_batches` from the transposed edges (``tindptr``/``tsamples``: each row's samples, ascending):
    a row's chunks come in order on each worker, so the last chunk per worker is all it remembers. Rows where
    ``skip`` is set are not visited at all (the sample-major kernel still reads their entries): on a
    1M-sample independent day, 0.03 s against 0.10 s for the open edges of the chain's split."""
    n = nb.shape[1]
    chunk = _chunks(sw, n, batch_size)
    last = np.empty(n, dtype=np.int64)
    for x in range(nb.shape[0]):
        if skip[x]:
            continue
        last[:] = -1
        for k in range(tindptr[x], tindptr[x + 1]):
            s = tsamples[k]
            w = sw[s]
            if last[w] != chunk[s]:
                last[w] = chunk[s]
                nb[x, w] += 1


@numba.njit(cache=True, nogil=True)
def row_reads(nb, prim, sec, out):  # pragma: no cover - compiled
    """``out[x]``: the chunks that read x remotely with x on ``prim[x]`` and ``sec[x]`` (:func:`row_batches`)."""
    n = nb.shape[1]
    for x in range(prim.size):
        r = np.int64(0)
        for w in range(n):
            if prim[x] != w and (sec[x] >> w) & 1 == 0:
                r += nb[x, w]
        out[x] = r


@numba.njit(cache=True, nogil=True, inline="always")
def _weighted_reads(x, r, nb, cost, sec):  # pragma: no cover - compiled
    """Row x's batch reads with its primary on r, each weighted by the topology's ``cost[r, w]`` (Eq. 3's
    weight: a reader fetches from the primary): the workers w other than r that hold no copy."""
    total = 0.0
    for w in range(nb.shape[1]):
        if w != r and not _holds(sec[x], w):
            total += nb[x, w] * cost[r, w]
    return total


@numba.njit(cache=True, nogil=True, inline="always")
def _best_primary(x, nb, cost, uniform, prim, sec, old_prim, is_old, load, cap, want):  # pragma: no cover
    """Row x's best primary move p -> q (q holds no copy, ``load[q] < cap``) among the moves whose moved-row
    cost is ``want`` (:func:`primary_move_cost`; ``want`` 0 takes costs 0 and -1): ``(q, gain)`` with the
    gain in batch reads (:func:`row_batches`) weighted by the topology (:func:`_weighted_reads`) and its
    moved-row cost, or ``(-1, 0, 0)``. ``uniform`` > 0: every remote read costs that (a flat topology), so the
    gain is ``uniform * (nb[x, q] - nb[x, p])`` without the sums."""
    p = prim[x]
    best_q, best_g, best_d = -1, 0.0, 0
    here = 0.0 if uniform > 0.0 else _weighted_reads(x, p, nb, cost, sec)
    for q in range(nb.shape[1]):
        if q == p or _holds(sec[x], q) or load[q] >= cap:
            continue
        # primary_move_cost (q holds no copy), written out: a call per row and worker is not inlined
        d = 0 if not is_old[x] else (1 if q != old_prim[x] else 0) - (1 if p != old_prim[x] else 0)
        if (want == 0 and d > 0) or (want != 0 and d != want):
            continue
        if uniform > 0.0:
            g = uniform * (np.float64(nb[x, q]) - nb[x, p])
        else:
            g = here - _weighted_reads(x, q, nb, cost, sec)
        if best_q < 0 or g > best_g or (g == best_g and d < best_d):  # a tie: the move that frees a row
            best_q, best_g, best_d = q, g, d
    return best_q, best_g, best_d


@numba.njit(cache=True, nogil=True, inline="always")
def _move_primary(x, q, prim, load, touched):  # pragma: no cover - compiled
    load[prim[x]] -= 1
    load[q] += 1
    prim[x] = q
    touched[x] = True


@numba.njit(cache=True, nogil=True)
def _next_free(nxt, k):  # pragma: no cover - compiled
    """The first position from k not taken (``nxt[k] == k``: free), halving the path on the way."""
    while nxt[k] != k:
        nxt[k] = nxt[nxt[k]]
        k = nxt[k]
    return k


@numba.njit(cache=True, nogil=True)
def exact_moves(nb, cost, uniform, prim, sec, old_prim, old_sec, is_old, skip, load, cap, budget, spent,
                touched):  # pragma: no cover - compiled
    """Primary moves by their exact gain in batch reads, with the samples fixed (``nb``: :func:`row_batches`
    of them, so a row's reads depend on that row alone and the gains add up exactly), in place on ``prim``
    and ``load``; secondaries are left as they are. The gains are weighted by the topology as Eq. 3 weighs
    them (``cost[p, w]`` per read of w from the primary p; ``uniform`` > 0 where every remote read costs the
    same, as on a flat topology: then the gains are the batch reads themselves, times ``uniform``), so that on
    machines x GPUs the moves do not trade inter-machine reads for fewer intra-machine ones. Returns
    ``(spent, saved)``: the moved rows spent in all (never above ``budget``) and the weighted reads the moves
    saved.

    1. Moves that cost no row (new ids, a moved row to a better worker, a moved row back to its old primary
       when that reads no more), by gain, while they read less.
    2. Moves that cost one row, by gain, while the budget allows.
    3. Swaps, the moves by gain: each takes the place of the moved row whose return to its old primary loses
       least and fits the caps (a return out of a full worker makes room there), while the move gains more
       than the return loses; the budget spent stays where it is.

    Rows where ``skip`` is set (every worker holds them) are left alone; ``load[q] < cap`` holds for every
    move. The soft counts of the round before (Eq. 3) chose the moves at the step; this weighs them with
    the day's batches: on a 1M-sample entity-drift day (``gmp data synth --continue``), of the 5% budget's
    8,492 moved rows 162 read no less than where they were (their samples had left) and a tenth saved 8 reads
    or fewer, while 2,485 rows that stayed would save 10 or more each."""
    num = prim.size
    n = load.size
    saved = 0.0
    # candidates: rows, their targets and gains, sorted by gain (few rows gain: the sorts are short)
    rows = np.empty(num, dtype=np.int64)
    tq = np.empty(num, dtype=np.int32)
    tg = np.empty(num, dtype=np.float64)
    td = np.empty(num, dtype=np.int64)
    # 1. free moves: the best of each row, by gain (a return that frees a row also at no gain), where its
    # worker is below the cap
    m = 0
    for x in range(num):
        if skip[x]:
            continue
        q, g, d = _best_primary(x, nb, cost, uniform, prim, sec, old_prim, is_old, load, cap, 0)
        if q >= 0 and (g > 1e-9 or (g > -1e-9 and d < 0)):
            rows[m], tq[m], tg[m], td[m] = x, q, g, d
            m += 1
    for k in np.argsort(-tg[:m], kind="mergesort"):
        x, q = rows[k], tq[k]
        if load[q] < cap:
            spent += td[k]
            saved += tg[k]
            _move_primary(x, q, prim, load, touched)
    # 2. paid moves (old rows on their old primary) by gain, while the budget allows
    m = 0
    if spent < budget:
        for x in range(num):
            if not skip[x] and is_old[x] and prim[x] == old_prim[x]:
                q, g, _ = _best_primary(x, nb, cost, uniform, prim, sec, old_prim, is_old, load, cap, 1)
                if q >= 0 and g > 1e-9:
                    rows[m], tq[m], tg[m] = x, q, g
                    m += 1
    for k in np.argsort(-tg[:m], kind="mergesort"):
        if spent + 1 > budget:
            break
        x, q = rows[k], tq[k]
        if load[q] < cap:
            spent += 1
            saved += tg[k]
            _move_primary(x, q, prim, load, touched)
    # 3. swaps: a moved row back to its old primary frees its row of the budget for a move that gains more
    # than the return loses. The moves now also look at full workers: a return out of that worker makes room.
    unbounded = np.int64(num) + cap + 1
    m = 0
    num_out = 0
    out_rows = np.empty(num, dtype=np.int64)
    out_loss = np.empty(num, dtype=np.float64)
    for x in range(num):
        if skip[x] or not is_old[x]:
            continue
        p, o = prim[x], old_prim[x]
        if p == o:
            q, g, _ = _best_primary(x, nb, cost, uniform, prim, sec, old_prim, is_old, load, unbounded, 1)
            if q >= 0 and g > 1e-9:
                rows[m], tq[m], tg[m] = x, q, g
                m += 1
        elif not _holds(sec[x], o):
            if uniform > 0.0:
                lose = uniform * (np.float64(nb[x, p]) - nb[x, o])
            else:
                lose = _weighted_reads(x, o, nb, cost, sec) - _weighted_reads(x, p, nb, cost, sec)
            out_rows[num_out], out_loss[num_out] = x, lose
            num_out += 1
    by_loss = np.argsort(out_loss[:num_out], kind="mergesort")
    outs = out_rows[by_loss]
    loss = out_loss[by_loss]  # loss[k]: what returning outs[k] loses
    # the same returns by their current worker (each group by loss): the way out of a full worker
    by_src = np.argsort(prim[outs], kind="mergesort")
    start = np.zeros(n + 1, dtype=np.int64)
    for k in range(num_out):
        start[prim[outs[k]] + 1] += 1
    start = np.cumsum(start)
    # the returns taken are skipped through "next free" links (path halving): the scans below look at
    # returns not yet taken only; ``back[k]``: where return k (``outs``' order) sits in ``by_src``
    nxt = np.arange(num_out + 1)
    snxt = np.arange(num_out + 1)
    back = np.empty(num_out, dtype=np.int64)
    for k in range(num_out):
        back[by_src[k]] = k
    for t in np.argsort(-tg[:m], kind="mergesort"):
        x, q, g = rows[t], tq[t], tg[t]
        head = _next_free(nxt, 0)
        if head == num_out or loss[head] >= g - 1e-9:
            break  # gains fall, losses rise: no swap gains from here
        best, best_l = -1, g - 1e-9
        # the cheapest return after which q has room (the first few that fit: returns into full workers wait)
        k = head
        for _ in range(64):
            if k >= num_out or loss[k] >= best_l:
                break
            y = outs[k]
            o = old_prim[y]
            if load[o] < cap and load[q] + (o == q) - (prim[y] == q) < cap:
                best, best_l = k, loss[k]
                break
            k = _next_free(nxt, k + 1)
        # or the cheapest return out of q itself
        j = _next_free(snxt, start[q])
        for _ in range(64):
            if j >= start[q + 1] or loss[by_src[j]] >= best_l:
                break
            k = by_src[j]
            if load[old_prim[outs[k]]] < cap and load[q] - 1 < cap:
                best, best_l = k, loss[k]
                break
            j = _next_free(snxt, j + 1)
        if best < 0:
            continue
        nxt[best] = best + 1
        snxt[back[best]] = back[best] + 1
        y = outs[best]
        _move_primary(y, old_prim[y], prim, load, touched)
        _move_primary(x, q, prim, load, touched)
        saved += g - best_l
    return spent, saved


@numba.njit(cache=True, nogil=True)
def walk_toward(order, gprim, gsec, prim, sec, pload, pcap, sload, scap, out):  # pragma: no cover - compiled
    """Rows of ``order`` take their goal placement (``gprim``, ``gsec``) in that order, each unless it would
    put a worker above the primary cap ``pcap`` or its secondary cap ``scap[w]``; a second pass in the same
    order retries the rows the caps skipped. In place on ``prim``, ``sec``, ``pload``, ``sload``; writes the
    rows taken, in the order taken, to ``out`` and returns their number. Nothing here depends on a
    budget: every budget takes a prefix of the same sequence."""
    n = pload.size
    taken = np.zeros(order.size, dtype=np.bool_)
    k = 0
    for sweep in range(2):
        for i in range(order.size):
            if taken[i]:
                continue
            x = order[i]
            p, q = prim[x], gprim[x]
            if q != p and pload[q] + 1 > pcap:
                continue
            fits = True
            for w in range(n):
                if (gsec[x] >> w) & 1 != 0 and (sec[x] >> w) & 1 == 0 and sload[w] + 1 > scap[w]:
                    fits = False
                    break
            if not fits:
                continue
            pload[p] -= 1
            pload[q] += 1
            for w in range(n):
                sload[w] += ((gsec[x] >> w) & 1) - ((sec[x] >> w) & 1)
            prim[x] = q
            sec[x] = gsec[x]
            taken[i] = True
            out[k] = x
            k += 1
    return k


@numba.njit(cache=True, nogil=True)
def fit_to_cap(indptr, indices, sw, primary, sec_indptr, sec_workers, n, cap):  # pragma: no cover - compiled
    """The moves of :func:`gmp.partition.incremental.fit_samples_to_cap` (``sw`` changed in place); returns their
    number."""
    load = np.zeros(n, dtype=np.int64)
    for s in range(sw.size):
        load[sw[s]] += 1
    num = 0
    for s in range(sw.size):
        if load[sw[s]] > cap:
            num += 1
    cand = np.empty(num, dtype=np.int64)
    k = 0
    for s in range(sw.size):
        if load[sw[s]] > cap:
            cand[k] = s
            k += 1
    hold = np.zeros((num, n), dtype=np.int32)  # rows of each candidate held on each worker
    for k in range(num):
        s = cand[k]
        for e in range(indptr[s], indptr[s + 1]):
            r = indices[e]
            hold[k, primary[r]] += 1
            for j in range(sec_indptr[r], sec_indptr[r + 1]):
                hold[k, sec_workers[j]] += 1
    moved = 0
    best = np.empty(num, dtype=np.int64)
    loss = np.empty(num, dtype=np.int64)
    for _ in range(n):  # a pass per worker that may fill up: the moves it could not make go to the next best
        over = False
        for w in range(n):
            over = over or load[w] > cap
        if not over:
            break
        for k in range(num):
            w = sw[cand[k]]
            best[k] = -1
            loss[k] = np.iinfo(np.int64).max
            if load[w] <= cap:
                continue
            for v in range(n):
                if load[v] < cap and (best[k] < 0 or hold[k, v] > hold[k, best[k]]):
                    best[k] = v
            if best[k] >= 0:
                loss[k] = hold[k, w] - hold[k, best[k]]
        for k in np.argsort(loss, kind="mergesort"):
            s, d = cand[k], best[k]
            if d < 0:
                break
            w = sw[s]
            if load[w] > cap and load[d] < cap:
                sw[s] = d
                load[w] -= 1
                load[d] += 1
                moved += 1
    return moved
