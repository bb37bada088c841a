"""Compiled helpers of :mod:`gmp.train.tiers` (used only by this package)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def step_primaries(indptr, indices, samples, slot_map, identity, num_primary, mark):  # pragma: no cover - compiled
    """Ascending distinct primary slots (``0 <= slot < num_primary``) of the ids of ``samples``.

    One pass over the samples' ids (``slot = id`` when ``identity``, else ``slot_map[id]``, -1 when
    not held) marking each slot once in ``mark`` (uint8, all 0 on entry and again on return), then a
    sort of the distinct ones: the work of gather + ``np.unique`` + lookup + filter without the
    intermediate arrays, and without the GIL (the prefetch thread runs beside the step).
    """
    total = 0
    for k in range(samples.size):
        s = samples[k]
        total += indptr[s + 1] - indptr[s]
    out = np.empty(total, dtype=np.int64)
    count = 0
    for k in range(samples.size):
        s = samples[k]
        for j in range(indptr[s], indptr[s + 1]):
            g = indices[j]
            sl = g if identity else slot_map[g]
            if sl >= 0 and sl < num_primary and mark[sl] == 0:
                mark[sl] = 1
                out[count] = sl
                count += 1
    res = radix_sort(out[:count], num_primary)
    for i in range(count):
        mark[res[i]] = 0
    return res


@numba.njit(cache=True, nogil=True)
def radix_sort(a, bound):  # pragma: no cover - compiled
    """``a`` (int64, ``0 <= a < bound``) sorted ascending: least significant digit first, 11 bits a
    pass (two passes below 2**22 rows) -- a step's ~10k slots in a quarter of np.sort's time."""
    bits = 1
    while (1 << bits) < bound:
        bits += 1
    src = a.copy()
    dst = np.empty_like(src)
    count = np.empty(2049, dtype=np.int64)
    shift = 0
    while shift < bits:
        count[:] = 0
        for i in range(src.size):
            count[((src[i] >> shift) & 2047) + 1] += 1
        for d in range(2048):
            count[d + 1] += count[d]
        for i in range(src.size):
            d = (src[i] >> shift) & 2047
            dst[count[d]] = src[i]
            count[d] += 1
        src, dst = dst, src
        shift += 11
    return src


# -- eviction order: two groups of doubly linked lists, one list per last-use clock -------------------
#
# The evictable slots (resident master rows that no step pins) of group 0 (rows the look-ahead window
# does not use; every evictable slot with the ``lru`` policy) and group 1 (rows the window uses) are
# kept in lists ``head[g, c] .. tail[g, c]`` by their last use ``c = key[slot]`` (the cache's admission
# clock), linked through ``nxt``/``prv``; ``grp[slot]`` is the slot's group (-1: in no list: pinned,
# free or held), ``cnt[g]`` the group's size and ``lo[g]`` a clock at or below its oldest non-empty
# list. Eviction takes from the oldest lists of group 0, then of group 1: cDLRM's order (rows outside
# the window first), least recently used first, in the order slots entered a list among equal clocks.
# Every change (a pin, an unpin, a row entering or leaving the window, an eviction) is O(1) per slot,
# where a scan of the cache per admission was O(capacity).


@numba.njit(inline="always")
def _unlink(s, key, nxt, prv, grp, head, tail, cnt):  # pragma: no cover - compiled
    g = grp[s]
    c = key[s]
    p = prv[s]
    n = nxt[s]
    if p >= 0:
        nxt[p] = n
    else:
        head[g, c] = n
    if n >= 0:
        prv[n] = p
    else:
        tail[g, c] = p
    grp[s] = -1
    cnt[g] -= 1


@numba.njit(inline="always")
def _link(s, g, key, nxt, prv, grp, head, tail, cnt, lo):  # pragma: no cover - compiled
    c = key[s]
    t = tail[g, c]
    prv[s] = t
    nxt[s] = -1
    if t >= 0:
        nxt[t] = s
    else:
        head[g, c] = s
    tail[g, c] = s
    grp[s] = g
    cnt[g] += 1
    if c < lo[g]:
        lo[g] = c


@numba.njit(cache=True, nogil=True)
def unpin_slots(slots, pins, row_of, window, use_window, key, nxt, prv, grp, head, tail, cnt,
                lo):  # pragma: no cover - compiled
    """Unpin ``slots`` once (a step finished): a slot no step pins any more becomes evictable, in
    group 1 when the window uses its row (``use_window``), else 0. Returns how many became unpinned."""
    freed = 0
    for i in range(slots.size):
        s = slots[i]
        pins[s] -= 1
        if pins[s] == 0:
            freed += 1
            r = row_of[s]
            if r >= 0:
                _link(s, 1 if use_window and window[r] > 0 else 0, key, nxt, prv, grp, head, tail, cnt, lo)
    return freed


@numba.njit(cache=True, nogil=True)
def finish_step(rows, slots, window, pins, use_window, key, nxt, prv, grp, head, tail, cnt,
                lo):  # pragma: no cover - compiled
    """A finished step (``rows`` distinct, ``slots`` their pinned slots): each row leaves the window
    once and its slot is unpinned once, in one pass (the slot is pinned by this step while its row's
    count drops, so it is in no list: no move between groups). Returns how many became unpinned."""
    freed = 0
    for i in range(rows.size):
        r = rows[i]
        s = slots[i]
        window[r] -= 1
        pins[s] -= 1
        if pins[s] == 0:
            freed += 1
            _link(s, 1 if use_window and window[r] > 0 else 0, key, nxt, prv, grp, head, tail, cnt, lo)
    return freed


@numba.njit(cache=True, nogil=True)
def add_to_window(rows, delta, window, slot_of, pins, use_window, key, nxt, prv, grp, head, tail, cnt,
                  lo):  # pragma: no cover - compiled
    """``window[rows] += delta`` (rows distinct); an evictable slot whose row enters (count 0 -> > 0) or
    leaves (> 0 -> 0) the window moves to group 1 or 0 with its last use (``use_window``)."""
    for i in range(rows.size):
        r = rows[i]
        old = window[r]
        new = old + delta
        window[r] = new
        if use_window and (old == 0) != (new == 0):
            s = slot_of[r]
            if s >= 0 and pins[s] == 0 and grp[s] >= 0:
                _unlink(s, key, nxt, prv, grp, head, tail, cnt)
                _link(s, 1 if new > 0 else 0, key, nxt, prv, grp, head, tail, cnt, lo)


@numba.njit(cache=True, nogil=True)
def take_victims(need, use_window, key, nxt, prv, grp, head, tail, cnt, lo):  # pragma: no cover - compiled
    """The ``need`` slots to evict, in eviction order, taken out of their lists; empty (and nothing
    taken) when fewer than ``need`` slots are evictable."""
    groups = 2 if use_window else 1
    avail = cnt[0] + (cnt[1] if use_window else 0)
    if need <= 0 or avail < need:
        return np.empty(0, dtype=np.int64)
    out = np.empty(need, dtype=np.int64)
    n = 0
    for g in range(groups):
        c = lo[g]
        while n < need and cnt[g] > 0:
            s = head[g, c]
            if s < 0:  # an empty list: no slot of this group was last used at clock c
                c += 1
                lo[g] = c
                continue
            _unlink(s, key, nxt, prv, grp, head, tail, cnt)
            out[n] = s
            n += 1
    return out


# -- admission (the rest of RowCache.admit, under its lock) ------------------------------------------


@numba.njit(cache=True, nogil=True)
def pin_hits(rows, slot_of, pins, key, nxt, prv, grp, head, tail, cnt):  # pragma: no cover - compiled
    """Slots of ``rows`` (-1 where not resident); the resident ones are pinned. Returns
    ``(slots, hits, newly pinned)``."""
    slots = np.empty(rows.size, dtype=np.int64)
    hits = 0
    newly = 0
    for i in range(rows.size):
        s = slot_of[rows[i]]
        slots[i] = s
        if s >= 0:
            hits += 1
            if pins[s] == 0:
                newly += 1
                if grp[s] >= 0:
                    _unlink(s, key, nxt, prv, grp, head, tail, cnt)
            pins[s] += 1
    return slots, hits, newly


@numba.njit(cache=True, nogil=True)
def place_misses(rows, slots, new_slots, clock, slot_of, row_of, pins, dirty, key):  # pragma: no cover - compiled
    """Give the rows whose ``slots`` are -1 the ``new_slots`` (free slots or victims, in order; a victim's
    old row is forgotten) and pin them; every slot of the step gets last use ``clock``. Returns the
    victims' slots and old rows that are dirty (to write back before the slot is refilled)."""
    wb_slots = np.empty(new_slots.size, dtype=np.int64)
    wb_rows = np.empty(new_slots.size, dtype=np.int64)
    nwb = 0
    j = 0
    for i in range(rows.size):
        if slots[i] < 0:
            s = new_slots[j]
            j += 1
            old = row_of[s]
            if old >= 0:
                slot_of[old] = -1
                if dirty[s]:
                    wb_slots[nwb] = s
                    wb_rows[nwb] = old
                    nwb += 1
            r = rows[i]
            row_of[s] = r
            slot_of[r] = s
            pins[s] += 1
            dirty[s] = False
            slots[i] = s
        key[slots[i]] = clock
    return wb_slots[:nwb], wb_rows[:nwb]


@numba.njit(cache=True, nogil=True)
def swap_rows(cache, master, wb_slots, wb_rows, load_slots, load_rows):  # pragma: no cover - compiled
    """Host master <-> CPU cache in place: the dirty victims' rows written back first, then the
    loaded rows copied into their slots (row copies, no temporary arrays)."""
    w = cache.shape[1]
    for i in range(wb_slots.size):
        s = wb_slots[i]
        r = wb_rows[i]
        for c in range(w):
            master[r, c] = cache[s, c]
    for i in range(load_slots.size):
        s = load_slots[i]
        r = load_rows[i]
        for c in range(w):
            cache[s, c] = master[r, c]


@numba.njit(cache=True)
def largest_step_primaries(indptr, indices, order, bounds, primary, num_workers, stamp, first):  # pragma: no cover - compiled
    """Per worker, the most distinct rows it is primary of that one step uses.

    Step ``t`` is the samples ``order[bounds[t]:bounds[t + 1]]`` (every worker's batch of the step
    together: :class:`gmp.train.tiers.TierFeed` pins a worker's primaries among all of them).
    ``primary[id]`` is the row's primary worker; ``stamp`` (int64, one per row, all -1 at first) marks
    a row seen by step ``first + t``: calls that number their steps on from the last call's share it.
    """
    most = np.zeros(num_workers, dtype=np.int64)
    count = np.zeros(num_workers, dtype=np.int64)
    for t in range(bounds.size - 1):
        count[:] = 0
        for k in range(bounds[t], bounds[t + 1]):
            s = order[k]
            for j in range(indptr[s], indptr[s + 1]):
                g = indices[j]
                if stamp[g] != first + t:
                    stamp[g] = first + t
                    w = primary[g]
                    if w >= 0:
                        count[w] += 1
        for w in range(num_workers):
            if count[w] > most[w]:
                most[w] = count[w]
    return most
