"""Herald Algorithm 1, communication plans and the replica state machine.

Known answers are derived by hand in the comments; the engine is also checked
against the slow pure-Python replay of gmp.train.herald.reference and by an exact integer "toy trainer"
that replays the engine's transfers and must match single-worker training.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict

import numpy as np
import pytest

from train_data import runtime_scheduler
from gmp.errors import TrainingError
from gmp.placement import Placement
from gmp.train.herald.reference import replay_epoch
from gmp.train.herald import (
    EVENT_NAMES,
    PULL_MISS,
    PULL_STALE,
    PUSH_EVICT,
    PUSH_PLAN,
    PUSH_SYNC,
    RuntimeScheduler,
    batch_capacities,
    communication_plan,
    location_aware_assignment,
    naive_assignment,
    resident_masks,
    score_matrix,
)

# two workers, rows 0-2 primary on worker 0, rows 3-5 on worker 1
PRIMARY = [0, 0, 0, 1, 1, 1]


def test_scores_count_primaries_and_current_copies():
    # worker 1 holds a current copy of row 0 (cache); worker 0 of nothing extra
    batch = [[0, 1], [3, 4], [0, 3], [4, 5]]
    s = score_matrix(batch, PRIMARY, {1: [0]}, 2)
    # s0: w0 primaries 0,1 -> 2; w1 copy of 0 -> 1.  s2: w0 row 0 -> 1; w1 copy 0 + primary 3 -> 2
    assert s.tolist() == [[2, 1], [0, 2], [1, 2], [0, 2]]


def test_assignment_prefers_best_worker_under_exact_balance():
    batch = [[0, 1], [3, 4], [0, 3], [4, 5]]
    got = location_aware_assignment(batch, PRIMARY, {1: [0]}, [2, 2])
    # s0 -> w0 (2>1); s1 -> w1; s2 -> w1 (2>1), w1 now full; s3 prefers w1 (2 vs 0) but only w0 is left
    assert got.tolist() == [0, 1, 1, 0]
    assert np.bincount(got, minlength=2).tolist() == [2, 2]


@pytest.mark.parametrize("caps, expected", [([2, 2], [0, 1, 0, 1]), ([3, 1], [0, 1, 0, 0]), ([1, 3], [0, 1, 1, 1])])
def test_ties_go_to_the_less_loaded_then_lower_worker(caps, expected):
    # every sample scores 1 on both workers (row 0 primary on w0, row 3 on w1)
    got = location_aware_assignment([[0, 3]] * 4, PRIMARY, {}, caps)
    assert got.tolist() == expected


def test_assignment_is_exactly_balanced_on_random_batches():
    rng = np.random.default_rng(1)
    e, n = 200, 5
    primary = rng.integers(0, n, e)
    resident = rng.integers(0, 2 ** n, e).astype(np.int64)
    batch = [rng.choice(e, 6, replace=False).tolist() for _ in range(103)]
    caps = batch_capacities(103, n)
    assert caps.tolist() == [21, 21, 21, 20, 20]
    got = location_aware_assignment(batch, primary, resident, caps)
    assert np.bincount(got, minlength=n).tolist() == caps.tolist()
    # reference greedy in plain Python
    sc = score_matrix(batch, primary, resident, n)
    load = [0] * n
    for i in range(len(batch)):
        avail = [w for w in range(n) if load[w] < caps[w]]
        best = max(avail, key=lambda w: (sc[i, w], -load[w], -w))
        assert got[i] == best
        load[best] += 1
    assert got.tolist() == location_aware_assignment(batch, primary, resident, caps).tolist()  # deterministic


def test_capacities_must_cover_the_batch():
    with pytest.raises(TrainingError, match="capacities sum to 3"):
        location_aware_assignment([[0]] * 4, PRIMARY, {}, [2, 1])


def test_naive_assignment_is_consecutive():
    assert naive_assignment([2, 1, 1]).tolist() == [0, 0, 1, 2]


def test_communication_plan_by_hand():
    # pending updates: row 2 held by w1, row 4 by w0, row 5 by w1
    dirty = np.full(6, -1)
    dirty[[2, 4, 5]] = [1, 0, 1]
    batch = [[2, 0], [4], [5], [2]]
    worker_of = [0, 0, 1, 1]
    plan = communication_plan(batch, worker_of, dirty, 2)
    # row 2: w0 reads it (s0) -> holder w1 pushes; row 4 only read by its holder w0; row 5 by its holder w1
    assert [p.tolist() for p in plan] == [[], [2]]


def test_resident_masks():
    assert resident_masks(4, {0: [1], 2: [1, 3]}).tolist() == [0, 5, 0, 4]


# --------------------------------------------------------------------------- the engine on a hand-checked epoch

# rows 0,1 primary on w0; rows 2,3 on w1; B = 1, two workers, cache of 1 row
TINY_PRIMARY = [0, 0, 1, 1]
TINY_ROWS = [[0, 2], [2, 3], [1, 2], [3], [2], [0], [3], [1], [0], [3]]


def _engine(rows, primary, *, n, b=1, assignment="naive", on_demand=True, cap=1, policy="lru", k=0, sec=None):
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.array([i for r in rows for i in r], dtype=np.int32)
    pl = Placement.edge_cut(n, np.zeros(len(rows), dtype=np.int32), np.asarray(primary, dtype=np.int32))
    if sec is not None:
        pl = pl.with_secondaries(*sec)
    eng = runtime_scheduler(indptr, indices, pl, batch_size=b, assignment=assignment, on_demand=on_demand,
                           cache_rows=cap, cache_policy=policy, lookahead=k)
    return eng


def _events(s):
    return [(EVENT_NAMES[k], int(w), int(r)) for k, w, r in zip(s.event_kind, s.event_worker, s.event_row)]


def test_tiny_epoch_on_demand_by_hand():
    eng = _engine(TINY_ROWS, TINY_PRIMARY, n=2)
    eng.start_epoch(np.arange(10))
    got = [_events(s) for s in eng]
    assert got == [
        # t0: w0 {0,2}, w1 {2,3}: w0 pulls row 2; row 2 written by both -> w0 pushes at once
        [("pull_miss", 0, 2), ("push_sync", 0, 2)],
        # t1: w0 {1,2}: its cached copy of 2 was invalidated by w1 -> re-pull; w0 alone writes 2 -> dirty
        [("pull_stale", 0, 2)],
        # t2: w0 {2} hit (dirty, its own); w1 {0} pulls row 0 and keeps its update (dirty on w1)
        [("pull_miss", 1, 0)],
        # t3: w0 {3}, w1 {1} pull; caches overflow: w0 evicts dirty 2, w1 evicts dirty 0 -> pushes
        [("pull_miss", 1, 1), ("pull_miss", 0, 3), ("push_evict", 0, 2), ("push_evict", 1, 0)],
        # t4: w1 reads row 3 (its primary) while w0 holds its pending update -> plan of t3 pushes it
        [("push_plan", 0, 3)],
    ]
    assert eng.flush_rows(1).tolist() == [1] and eng.flush_rows(0).tolist() == []
    t = eng.totals.to_json()
    assert (t["pulls"], t["pushes"], t["push_flush"]) == (5, 5, 1)


def test_tiny_epoch_naive_sync_by_hand():
    eng = _engine(TINY_ROWS, TINY_PRIMARY, n=2, on_demand=False)
    eng.start_epoch(np.arange(10))
    got = [_events(s) for s in eng]
    assert got == [
        [("pull_miss", 0, 2), ("push_sync", 0, 2)],
        [("pull_stale", 0, 2), ("push_sync", 0, 2)],
        # w0's copy of 2 stayed current after its own push: hit
        [("pull_miss", 1, 0), ("push_sync", 1, 0), ("push_sync", 0, 2)],
        [("pull_miss", 1, 1), ("pull_miss", 0, 3), ("push_sync", 1, 1), ("push_sync", 0, 3)],
        [],
    ]
    t = eng.totals.to_json()
    assert (t["pulls"], t["pushes"]) == (5, 6)


def test_secondaries_are_refreshed_not_cached():
    # row 2 (primary w1) has a secondary on w0; w1 writes it, then w0 reads it
    rows = [[0], [2], [2], [3]]
    sec = (np.array([0, 0, 0, 1, 1]), np.array([0]))
    eng = _engine(rows, TINY_PRIMARY, n=2, cap=0, sec=sec)
    eng.start_epoch(np.arange(4))
    got = [_events(s) for s in eng]
    assert got == [[], [("pull_stale", 0, 2)]]
    assert eng.caches.size.tolist() == [0, 0]


def test_plan_push_precedes_another_workers_read():
    # w0 (non-primary) alone writes row 2 twice, then w1 and w0 both read it; cache large
    rows = [[2], [3], [2], [3], [2], [2]]  # w1 only uses row 3 (its primary) until t2
    eng = _engine(rows, TINY_PRIMARY, n=2, cap=10)
    eng.start_epoch(np.arange(6))
    got = [_events(s) for s in eng]
    assert got == [
        [("pull_miss", 0, 2)],
        [],  # w0's own pending update, no transfer
        # t2: the plan of t1 makes w0 push; w1 is the primary (no pull); both write -> w0 pushes again
        [("push_plan", 0, 2), ("push_sync", 0, 2)],
    ]


# --------------------------------------------------------------------------- reference implementation


def _random_case(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    e = int(rng.integers(8, 40))
    s = int(rng.integers(20, 80))
    rows = []
    for _ in range(s):
        d = int(rng.integers(1, 5))
        # skewed ids so rows are shared and reused
        ids = np.unique(np.minimum((rng.pareto(1.0, d) * 3).astype(int), e - 1))
        rows.append(ids.tolist())
    primary = rng.integers(0, n, e).tolist()
    sec = []
    for r in range(e):
        for w in range(n):
            if w != primary[r] and rng.random() < 0.1:
                sec.append((r, w))
    return rng, n, e, rows, primary, sec


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("assignment", ["naive", "herald"])
def test_engine_matches_reference(seed, assignment):
    rng, n, e, rows, primary, sec = _random_case(seed)
    b = int(rng.integers(1, 4))
    on_demand = bool(rng.integers(0, 2))
    cap = int(rng.integers(0, 6))
    policy = ["lru", "lookahead"][seed % 2]
    k = int(rng.integers(0, 4))
    order = rng.permutation(len(rows))
    secondaries = sorted(sec)
    indptr_s = np.zeros(e + 1, dtype=np.int64)
    np.add.at(indptr_s, np.array([r + 1 for r, _ in secondaries], dtype=np.int64), 1)
    sec_csr = (np.cumsum(indptr_s), np.array([w for _, w in secondaries], dtype=np.int32))
    eng = _engine(rows, primary, n=n, b=b, assignment=assignment, on_demand=on_demand, cap=cap, policy=policy, k=k,
                  sec=sec_csr)
    eng.start_epoch(order)
    assigned = [s.worker_of.tolist() for s in eng]
    want, want_assigned = replay_epoch(rows, primary, n, b, order.tolist(), assignment=assignment, on_demand=on_demand,
                                    cap=cap, policy=policy, k=k, secondaries=secondaries)
    got = {name: int(v) for name, v in zip(EVENT_NAMES, eng.totals.by_kind) if v}
    assert assigned == want_assigned
    assert got == {key: v for key, v in want.items() if v}


@pytest.mark.parametrize("seed", range(4))
def test_engine_matches_reference_at_64_workers(seed):
    """Worker 63 is the sign bit of the int64 worker masks: rows whose primary, secondaries and readers
    include it (half the primaries, most secondaries, a few rows held by every worker) must schedule
    exactly as the set-based reference does."""
    rng = np.random.default_rng(100 + seed)
    n, e = 64, 120
    rows = [np.unique(np.minimum((rng.pareto(1.0, int(rng.integers(1, 6))) * 5).astype(int), e - 1)).tolist()
            for _ in range(400)]
    primary = np.where(rng.random(e) < 0.5, n - 1, rng.integers(0, n, e)).tolist()
    sec = {(r, w) for r in range(e) for w in [n - 1, n - 2, *rng.integers(0, n, 3).tolist()]
           if w != primary[r] and rng.random() < 0.4}
    sec |= {(r, w) for r in range(3) for w in range(n) if w != primary[r]}  # sealed rows: mask -1
    secondaries = sorted(sec)
    indptr_s = np.zeros(e + 1, dtype=np.int64)
    np.add.at(indptr_s, np.array([r + 1 for r, _ in secondaries], dtype=np.int64), 1)
    sec_csr = (np.cumsum(indptr_s), np.array([w for _, w in secondaries], dtype=np.int32))
    kw = dict(b=int(rng.integers(1, 4)), on_demand=bool(seed % 2), cap=int(rng.integers(0, 6)),
              policy=["lru", "lookahead"][seed // 2], k=2)
    for assignment in ("naive", "herald"):
        order = rng.permutation(len(rows))
        eng = _engine(rows, primary, n=n, assignment=assignment, sec=sec_csr, **kw)
        eng.start_epoch(order)
        assigned = [s.worker_of.tolist() for s in eng]
        want, want_assigned = replay_epoch(rows, primary, n, kw["b"], order.tolist(), assignment=assignment,
                                        on_demand=kw["on_demand"], cap=kw["cap"], policy=kw["policy"], k=2,
                                        secondaries=secondaries)
        assert assigned == want_assigned
        assert {name: int(v) for name, v in zip(EVENT_NAMES, eng.totals.by_kind) if v} == \
            {key: v for key, v in want.items() if v}
        assert max(max(a) for a in assigned) == n - 1  # worker 63 did take samples


@pytest.mark.parametrize("seed", range(6))
def test_stamp_renumbering_changes_nothing(seed):
    """The engine keeps cache stamps as int32 and renumbers them before the clock overflows:
    forcing a renumbering before every batch must give the very same schedules and caches."""
    from gmp.train.herald.kernels import STAMP_MAX as _STAMP_MAX

    rng, n, e, rows, primary, sec = _random_case(seed)
    order = rng.permutation(len(rows))
    kw = dict(n=n, b=int(rng.integers(1, 4)), assignment="herald", on_demand=True, cap=int(rng.integers(1, 6)),
              policy=["lru", "lookahead"][seed % 2], k=2)
    plain, forced = _engine(rows, primary, **kw), _engine(rows, primary, **kw)
    for eng in (plain, forced):
        eng.start_epoch(order)
    renumbered = 0
    while True:
        forced.caches.clock[0] = _STAMP_MAX - 1  # jumping the clock forward is always allowed
        a, b = plain.next_batch(), forced.next_batch()
        if a is None:
            assert b is None
            break
        renumbered += int(forced.caches.clock[0] < _STAMP_MAX - 1)
        assert a.worker_of.tolist() == b.worker_of.tolist()
        assert _events(a) == _events(b)
        for w in range(n):
            assert plain.caches.rows(w).tolist() == forced.caches.rows(w).tolist()
    assert renumbered > 0
    assert np.array_equal(plain.flush, forced.flush)


# --------------------------------------------------------------------------- exactness at s = 0


def _toy_step(v, s):
    """An exact, non-linear integer 'gradient step' of row value v by sample s."""
    return (3 * v + 7 * s) % 11 + 1


def single_worker(rows, e, order, g):
    val = np.zeros(e, dtype=np.int64)
    for i in range(0, len(order), g):
        delta = np.zeros(e, dtype=np.int64)
        for s in order[i:i + g]:
            for r in rows[s]:
                delta[r] -= _toy_step(val[r], s)
        val += delta
    return val


def replay_distributed(eng, rows, e, order):
    """Apply the engine's transfers like a trainer would: copies, pending deltas, pushes, pulls."""
    n = eng.num_workers
    primary = eng.placement.embedding_primary
    ps = np.zeros(e, dtype=np.int64)  # the primaries' values
    copy = [dict() for _ in range(n)]  # non-primary copies (secondaries start as copies)
    for r in range(e):
        for w in eng.placement.secondaries_of(r).tolist():
            copy[w][r] = 0
    pending = [defaultdict(int) for _ in range(n)]

    def push(w, r):
        ps[r] += pending[w].pop(r, 0)

    eng.start_epoch(order)
    while (sch := eng.next_batch()) is not None:
        ev = list(zip(sch.event_kind.tolist(), sch.event_worker.tolist(), sch.event_row.tolist()))
        for kind, w, r in ev:  # end of the previous iteration: the communication plan
            if kind == PUSH_PLAN:
                push(w, r)
        for kind, w, r in ev:  # before forward: pulls
            if kind in (PULL_MISS, PULL_STALE):
                copy[w][r] = ps[r]
        grads = [defaultdict(int) for _ in range(n)]
        for w in range(n):
            for s in sch.worker_samples(w):
                for r in rows[s]:
                    v = ps[r] if w == primary[r] else copy[w][r]
                    grads[w][r] -= _toy_step(v, s)
        for w in range(n):
            for r, d in grads[w].items():
                if w == primary[r]:
                    ps[r] += d
                else:
                    copy[w][r] += d
                    pending[w][r] += d
        for kind, w, r in ev:  # after the update: sync pushes, then evictions
            if kind == PUSH_SYNC:
                push(w, r)
        for kind, w, r in ev:
            if kind == PUSH_EVICT:
                push(w, r)
        # a copy that was written by others after a push is stale; the engine pulls it again
        for w in range(n):
            for r in list(pending[w]):
                if pending[w][r] == 0:
                    del pending[w][r]
    for w in range(n):
        for r in eng.flush_rows(w).tolist():
            push(w, r)
    assert all(not p for p in pending)
    return ps


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("assignment", ["naive", "herald"])
@pytest.mark.parametrize("on_demand", [False, True])
def test_transfers_keep_training_exact(seed, assignment, on_demand):
    rng, n, e, rows, primary, sec = _random_case(100 + seed)
    b = int(rng.integers(1, 4))
    cap = int(rng.integers(0, 6))
    secondaries = sorted(sec)
    indptr_s = np.zeros(e + 1, dtype=np.int64)
    np.add.at(indptr_s, np.array([r + 1 for r, _ in secondaries], dtype=np.int64), 1)
    sec_csr = (np.cumsum(indptr_s), np.array([w for _, w in secondaries], dtype=np.int32))
    eng = _engine(rows, primary, n=n, b=b, assignment=assignment, on_demand=on_demand, cap=cap,
                  policy=["lru", "lookahead"][seed % 2], k=seed % 3, sec=sec_csr)
    order = rng.permutation(len(rows))
    want = single_worker(rows, e, order.tolist(), n * b)
    got = replay_distributed(eng, rows, e, order)
    assert got.tolist() == want.tolist()


def test_toy_replay_detects_a_missing_plan_push():
    # sanity of the exactness test itself: drop the plan pushes and the result must differ
    rows = [[2], [0], [2], [1], [0], [2], [2], [2]]
    eng = _engine(rows, TINY_PRIMARY, n=2, cap=10)
    order = np.arange(len(rows))
    want = single_worker(rows, 4, order.tolist(), 2)
    eng.start_epoch(order)
    orig = eng.next_batch

    def no_plan():
        s = orig()
        if s is not None:
            keep = s.event_kind != PUSH_PLAN
            s.event_kind, s.event_worker, s.event_row = s.event_kind[keep], s.event_worker[keep], s.event_row[keep]
        return s

    eng.next_batch = no_plan
    with pytest.raises((AssertionError, KeyError)):
        got = replay_distributed(eng, rows, 4, order)
        assert got.tolist() == want.tolist()


def test_unknown_assignment_and_too_many_workers():
    pl = Placement.edge_cut(2, [0], [0, 1])
    with pytest.raises(TrainingError, match="The .assignment. parameter must be one of"):
        runtime_scheduler(np.array([0, 1]), np.array([0]), pl, batch_size=1, assignment="magic")
    big = Placement.edge_cut(65, [0], [0, 1])
    with pytest.raises(TrainingError, match="up to 64 workers"):
        runtime_scheduler(np.array([0, 1]), np.array([0]), big, batch_size=1)


# --------------------------------------------------------------------------- look-ahead prefetch


def test_prefetch_plan_by_hand():
    from gmp.train.herald.prefetch import plan_prefetch

    eng = _engine(TINY_ROWS, TINY_PRIMARY, n=2)
    indptr = np.cumsum([0] + [len(r) for r in TINY_ROWS])
    indices = np.array([i for r in TINY_ROWS for i in r])
    eng.start_epoch(np.arange(10))
    plans = [plan_prefetch(s, indptr, indices) for s in eng]
    assert [u.tolist() for u in plans[0].unique_ids] == [[0, 2], [2, 3]]
    # t0 and t1: row 2 was written in the previous iteration (or there is none): on the critical path
    assert [p.num_late for p in plans] == [1, 1, 0, 0, 0]
    # t2: row 0 last written at t0 by its primary; t3: rows 3 and 1 last written at t0 / t1 -> fetchable early
    assert [[a.tolist() for a in p.early_pulls] for p in plans[2:4]] == [[[], [0]], [[3], [1]]]


def test_prefetcher_keeps_order_counts_and_reraises():
    from gmp.train.herald.prefetch import Prefetcher

    pf = Prefetcher(range(7), 3, prepare=lambda x: x * x)
    assert list(pf) == [(i, i * i) for i in range(7)]
    st = pf.stats()
    assert st["items"] == 7 and 0.0 <= st["overlap"] <= 1.0

    def boom():
        yield 1
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        list(Prefetcher(boom(), 2))
    with pytest.raises(TrainingError, match="The 'lookahead' parameter must be an int >= 1"):
        Prefetcher(range(3), 0)


def test_prefetcher_runs_ahead_and_stops_when_closed():
    import threading
    import time as _time

    from gmp.train.herald.prefetch import Prefetcher

    produced = []

    def source():
        for i in range(100):
            produced.append(i)
            yield i

    pf = Prefetcher(source(), 4)
    it = iter(pf)
    assert next(it) == (0, None)
    deadline = _time.time() + 5
    while len(produced) < 5 and _time.time() < deadline:  # the thread fills the queue (4) + 1 in hand
        _time.sleep(0.01)
    assert 5 <= len(produced) <= 6
    it.close()
    assert not any(t.name == "gmp-lookahead" and t.is_alive() for t in threading.enumerate())


@pytest.mark.parametrize("policy, k, pulls", [("lru", 0, 3), ("lookahead", 1, 2), ("lookahead", 0, 3)])
def test_lookahead_policy_keeps_the_row_needed_next(policy, k, pulls):
    # one trainer (worker 0) and a parameter server (worker 1, primary of everything); cache of 1 row.
    # t0 pulls row 0; t1 pulls row 1 and must evict one: LRU drops 0 (re-pulled at t2),
    # the look-ahead policy sees row 0 in the next batch and drops 1 instead.
    rows = [[0], [1], [0]]
    indptr = np.array([0, 1, 2, 3])
    indices = np.array([0, 1, 0], dtype=np.int32)
    pl = Placement.edge_cut(2, np.zeros(3, dtype=np.int32), np.ones(2, dtype=np.int32))
    eng = runtime_scheduler(indptr, indices, pl, batch_size=1, assignment="naive", on_demand=False, cache_rows=1,
                           cache_policy=policy, lookahead=k, num_trainers=1)
    eng.start_epoch(np.arange(len(rows)))
    for _ in eng:
        pass
    assert eng.totals.pulls == pulls


def test_placement_too_small_for_the_samples_is_refused():
    pl = Placement.edge_cut(2, [0, 1], [0, 1])
    with pytest.raises(TrainingError, match="embedding id 5 but the placement has 2 rows"):
        runtime_scheduler(np.array([0, 1, 2]), np.array([0, 5]), pl, batch_size=1)


@pytest.mark.parametrize("seed", range(4))
def test_a_lookahead_past_the_epoch_schedules_as_the_whole_epoch(seed, monkeypatch):
    """K beyond the epoch's batches: the window holds the rest of the epoch, as with K = its batch count, and
    start_epoch reads only the epoch's batches (K = 10**20 used to loop over K slots before the first step)."""
    rng, n, e, rows, primary, sec = _random_case(seed)
    b = int(rng.integers(1, 4))
    order = rng.permutation(len(rows))
    num_batches = -(-len(rows) // (n * b))

    def epochs(k):
        eng = _engine(rows, primary, n=n, b=b, assignment="herald", cap=3, policy="lookahead", k=k)
        read = []
        batch_samples = eng.batch_samples

        def counted(i):
            read.append(i)
            if len(read) > 4 * num_batches:
                raise AssertionError(f"read {len(read)} batches of a {num_batches}-batch epoch")
            return batch_samples(i)

        monkeypatch.setattr(eng, "batch_samples", counted)
        out = []
        for _ in range(2):  # caches persist: the second epoch starts warm
            read.clear()
            eng.start_epoch(order)
            out += [(s.worker_of.tolist(), _events(s)) for s in eng]
        return out, eng.totals.by_kind.tolist()

    assert epochs(10 ** 20) == epochs(num_batches)
