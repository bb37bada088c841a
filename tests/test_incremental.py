"""New data on an existing placement (gmp.partition.incremental): hand-computed graphs, the
migration budget as a property, and ``gmp partition --from-manifest`` through the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.format import FieldInfo, write_dataset
from gmp.errors import PartitionError
from gmp.graph import BipartiteGraph
from gmp.manifest import load_manifest
from gmp.metrics import batch_remote_reads
from gmp.partition.incremental import (DENSE_SETTINGS, SMALL_SETTINGS, SPARSE_SETTINGS, MovedRows, Options,
                                       created_rows, match_workers, migration_budget, moved_rows,
                                       place_and_repartition, place_new_data,
                                       repartition_incremental,
                                       repartition_toward, resolve_options, saturated_degree,
                                       saturated_row_fraction)
from gmp.partition.incremental import _compact
from gmp.placement import Placement
from gmp.topology import resolve_topology
from incremental_cases import density_case, draw_day, old_placement, reference_moved

# batch 1 makes the soft count the plain count until it saturates (f(c) = min(c, samples per worker)),
# alpha = beta = 0 removes the balance terms, order="dataset" makes the stream order the ids';
# target="none": the plan's own moves at the budget at once (what these known answers are for; target
# mode has its own tests in tests/test_incremental_target.py)
EXACT = dict(alpha=0.0, beta=0.0, batch_size=1, order="dataset", target="none")


def two() -> object:
    return resolve_topology(2, None, None)


def _plan(plan: str, **exact) -> dict:
    """Options of ``plan``: the exact plan's own options (``exact``) only for it."""
    return exact if plan == "exact" else {"plan": plan}


# --------------------------------------------------------------------------- placing new data
@pytest.mark.parametrize("plan", ["exact", "onepass"])
def test_place_new_data_hand_computed(plan):
    # old rows 0,1 on worker 0 and 2,3 on worker 1; ids 4, 5, 6 are new (6 unused)
    g = BipartiteGraph.from_lists([[0, 1], [0, 4], [2, 3], [3, 4, 5]], 7)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1, 1])
    p = place_new_data(g, old, two(), options=Options(max_imbalance=1.5, plan=plan, **EXACT))
    # cap = ceil(4 / 2 * 1.5) = 3; f(c) = min(c, 2), so df = 1, 1, 0, ... (the one-pass plan counts a row
    # remote on w as 1 whatever its users there, the same sums here; a new id is held by its vote's candidate)
    # s0 [0,1]: w0 costs 0, w1 2 -> w0.   s1 [0,4]: w0 0 (4 has no users yet), w1 1 -> w0.
    # s2 [2,3]: w0 2, w1 0 -> w1.         s3 [3,4,5]: w0 = 1 (row 3), w1 = 1 (id 4's users are on w0) -> tie -> w0.
    assert p.sample_worker.tolist() == [0, 0, 1, 0]
    # new ids 4 (users on w0 x2) and 5 (w0) -> w0 (new-id cap ceil(1 * 1.5) = 2); 6 unused -> least loaded w1
    assert p.embedding_primary.tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert p.method == "place-new" and p.info["num_new_ids"] == 3 and p.info["num_new_ids_used"] == 2
    assert moved_rows(old, p) == MovedRows(0, 0) and p.options["plan"] == plan


def test_untrained_old_ids_are_placed_like_new_ids():
    """The graph of the test above, with ids 4 and 5 old but never trained (the old data read none
    of them; the old placement put them on worker 1): given ``trained`` they are placed as the new
    ids 4 and 5 were there, and cost no moved row."""
    g = BipartiteGraph.from_lists([[0, 1], [0, 4], [2, 3], [3, 4, 5]], 7)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1, 1, 1, 1])
    trained = np.array([True, True, True, True, False, False])
    opts = Options(max_imbalance=1.5, **EXACT)
    p = place_new_data(g, old, two(), options=opts, trained=trained)
    assert p.sample_worker.tolist() == [0, 0, 1, 0]
    assert p.embedding_primary.tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert (p.info["num_created_rows"], p.info["num_new_ids_used"]) == (2, 0)
    created = created_rows(np.arange(6), old, trained)
    assert created.tolist() == [4, 5]
    assert moved_rows(old, p, created=created) == MovedRows(0, 0) and moved_rows(old, p) == MovedRows(2, 0)
    # without the history they are old rows: they stay on worker 1 and sample 3 follows them (w1: row 3 local too)
    q = place_new_data(g, old, two(), options=opts)
    assert q.embedding_primary.tolist()[:6] == [0, 0, 1, 1, 1, 1] and q.sample_worker.tolist() == [0, 0, 1, 1]
    # a row with a secondary in the old placement is never created (its copies may hold trained values)
    with_sec = old.with_secondaries([0, 0, 0, 0, 0, 1, 1], [0])
    assert created_rows(np.arange(6), with_sec, trained).tolist() == [5]
    # the whole-budget refinement counts them as free too
    r = repartition_incremental(g, old, two(), max_moved_rows=0, options=opts, trained=trained)
    assert r.info["moved_rows"]["total"] == 0 and r.embedding_primary[4] == 0


def test_place_new_data_counts_secondaries_as_local():
    g = BipartiteGraph.from_lists([[1]], 2)
    plain = Placement.edge_cut(2, [0], [0, 1])
    replicated = plain.with_secondaries([0, 0, 1], [0])  # row 1 also on worker 0
    opts = Options(**EXACT)
    assert place_new_data(g, plain, two(), options=opts).sample_worker.tolist() == [1]
    assert place_new_data(g, replicated, two(), options=opts).sample_worker.tolist() == [0]  # tie -> lowest id


def test_place_new_data_respects_the_sample_cap():
    # every sample wants worker 0 (all rows there), the cap ceil(6 / 2 * 1.0) = 3 sends half to worker 1
    g = BipartiteGraph.from_lists([[0, 1]] * 6, 2)
    old = Placement.edge_cut(2, [0], [0, 0])
    p = place_new_data(g, old, two(), options=Options(max_imbalance=1.0, **EXACT))
    assert np.bincount(p.sample_worker, minlength=2).tolist() == [3, 3]
    assert p.sample_worker.tolist() == [0, 0, 0, 1, 1, 1]


def test_project_start_hand_computed():
    # rows 0,1 on w0 and 2,3 on w1; id 4 is new. batch 1: saturated_degree = max(4, ceil(4 * 2 / 1)) = 8, every
    # row votes. s0 [0,1]: w0 2 votes -> w0.  s1 [0,2,3]: w0 1, w1 2 -> w1.  s2 [2,4]: w1 1 (id 4 has no
    # samples yet, no vote) -> w1; id 4's virtual primary is now w1.  s3 [0,4]: w0 1, w1 1 -> the less
    # loaded w0 (loads 1 and 2).
    g = BipartiteGraph.from_lists([[0, 1], [0, 2, 3], [2, 4], [0, 4]], 5)
    old = Placement.edge_cut(2, [0], [0, 0, 1, 1])
    p = place_new_data(g, old, two(), options=Options(max_imbalance=1.5, start="project", **EXACT))
    assert p.sample_worker.tolist() == [0, 1, 1, 0]
    assert p.embedding_primary[:4].tolist() == [0, 0, 1, 1] and moved_rows(old, p).total == 0


def test_project_start_ignores_saturated_rows():
    # row 0 (w0) is in all 6 samples: degree 6 > saturated_degree(6, 2, 512) = max(4, ceil(4 * 3 / 3)) = 4,
    # so it does not vote; rows 1..6 (w1) do. Every sample wants w1; the cap (3) sends the last three to w0.
    # Had row 0 voted, s0 would tie 1-1 and go to the lowest id, w0.
    g = BipartiteGraph.from_lists([[0, k] for k in range(1, 7)], 7)
    old = Placement.edge_cut(2, [0], [0, 1, 1, 1, 1, 1, 1])
    opts = Options(max_imbalance=1.0, start="project", alpha=0.0, beta=0.0, order="dataset")
    assert saturated_degree(6, 2, 512) == 4
    assert place_new_data(g, old, two(), options=opts).sample_worker.tolist() == [1, 1, 1, 0, 0, 0]


# --------------------------------------------------------------------------- incremental with a budget
@pytest.mark.parametrize("plan", ["exact", "onepass"])
@pytest.mark.parametrize("budget, reads, moved", [(0, 4, 0), (1, 2, 1), (2, 2, 1)])
def test_incremental_hand_computed_budgets(budget, reads, moved, plan):
    # yesterday rows {0,1} were together on w0 and {2,3} on w1; today samples pair 0 with 2 and 1 with 3
    # (the one-pass plan: its pass puts s0, s1, s2 on w0 and s3 on w1, the moves are the same).
    # Fixed rows: every sample reads one remote row wherever it is (4). One move (row 2 -> w0 or the
    # like) makes one pair local (2 left, the best one move can do). Two moves could make both pairs
    # local (0), but from [0,2],[0,2],[1,3] on w0 and [1,3] on w1 no *single* move gains (row 1 has one
    # user on each worker; sample 2 gains on one side what it loses on the other): single-row greedy
    # stops at 2 with a budget of 2 -- the known limit of one-vertex moves (docs/incremental.md).
    g = BipartiteGraph.from_lists([[0, 2], [0, 2], [1, 3], [1, 3]], 4)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1, 1])
    p = repartition_incremental(g, old, two(), max_moved_rows=budget,
                                options=Options(max_imbalance=1.5, **EXACT, **_plan(plan, rounds=3)))
    p.check(num_samples=4, num_embeddings=4)
    assert batch_remote_reads(g, p, 1) == reads
    assert moved_rows(old, p).total == reference_moved(old, p) == moved
    assert p.info["moved_rows"]["total"] == moved and p.info["max_moved_rows"] == budget


@pytest.mark.parametrize("plan", ["exact", "onepass"])
@pytest.mark.parametrize("budget, reads, secondaries", [(0, 2, [[], [1], []]), (1, 0, [[1], [], []])])
def test_incremental_swaps_a_useless_secondary(budget, reads, secondaries, plan):
    # row 1's secondary on w1 serves nobody; w1's samples read row 0 twice: with one row of budget the
    # secondary slot of w1 (capacity 1: what it holds) goes to row 0
    g = BipartiteGraph.from_lists([[0, 1], [0, 1], [0, 2], [0, 2]], 3)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1]).with_secondaries([0, 0, 1, 1], [1])
    p = repartition_incremental(g, old, two(), max_moved_rows=budget,
                                options=Options(max_imbalance=1.0, **EXACT, **_plan(plan, rounds=1)))
    assert p.sample_worker.tolist() == [0, 0, 1, 1]
    assert [p.secondaries_of(e).tolist() for e in range(3)] == secondaries
    assert batch_remote_reads(g, p, 1) == reads
    assert moved_rows(old, p) == MovedRows(0, budget)


@pytest.mark.parametrize("allowed", [0, 1])
def test_a_hot_new_row_takes_every_free_slot_in_one_batch(allowed):
    # 3 workers. Row 0 (old, primary w0) has secondaries on w1 and w2 that no sample there reads; row 1 is a
    # new id (created: free) read by two samples on every worker, its primary on w0. One batch of moves swaps
    # both useless copies for row 1's, at no cost and with no budget left: a copy's gain on w depends on the
    # row's count on w and its primary, not on its copies elsewhere (one copy per row and batch before).
    from gmp.partition._row_moves import move_rows

    sec = np.array([0b110, 0], dtype=np.int64)
    prim, sec_load = np.zeros(2, dtype=np.int32), np.array([0, 1, 1], dtype=np.int64)
    spent, touched, _ = move_rows(prim, sec, np.array([[1, 0, 0], [2, 2, 2]], dtype=np.int32),
                                  np.array([0.0, 1.0, 2.0, 3.0]), 1.0 - np.eye(3), np.array([2, 0, 0], dtype=np.int64),
                                  2, 0.0, sec_load, sec_load.copy(), np.array([0, -1], dtype=np.int32),
                                  np.array([0b110, 0], dtype=np.int64), np.array([True, False]), allowed, 0)
    assert (spent, sec.tolist(), prim.tolist(), sec_load.tolist(), touched.tolist()) == \
        (0, [0, 0b110], [0, 0], [0, 1, 1], [True, True])


@pytest.mark.parametrize("budget, reads", [(0, 4), (1, 2), (2, 0)])
def test_toward_a_goal_passes_the_single_move_plateau(budget, reads):
    # the graph above, where single-row moves stop at 2 reads: with the goal's samples (pairs {0,2} on
    # w0, {1,3} on w1) rows 2 and 1 each gain on their own, so two moves reach 0 (the goal's reads)
    g = BipartiteGraph.from_lists([[0, 2], [0, 2], [1, 3], [1, 3]], 4)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1, 1])
    goal = Placement.edge_cut(2, [0, 0, 1, 1], [0, 1, 0, 1])
    p = repartition_toward(g, old, goal, two(), max_moved_rows=budget, options=Options(max_imbalance=1.5, **EXACT))
    p.check(num_samples=4, num_embeddings=4)
    assert batch_remote_reads(g, p, 1) == reads
    assert moved_rows(old, p).total == reference_moved(old, p) == budget
    assert p.info["moved_rows"]["total"] == budget
    with pytest.raises(PartitionError, match="not a placement of this graph"):
        repartition_toward(g, old, Placement.edge_cut(2, [0], [0, 1, 0, 1]), two(), max_moved_rows=1)


def _assert_same_placements(got, want):
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a.sample_worker, b.sample_worker)
        assert np.array_equal(a.embedding_primary, b.embedding_primary)
        assert np.array_equal(a.secondary_indptr, b.secondary_indptr)
        assert np.array_equal(a.secondary_workers, b.secondary_workers)


@st.composite
def cases(draw):
    n, m_old, m, rows, prim, secs, trained = draw_day(draw, [2, 3, 4, 64])  # 64: the widest int64 mask
    budget = draw(st.integers(0, 12))
    rounds = draw(st.integers(0, 3))
    rb = draw(st.sampled_from([None, 0.0, 0.3]))
    bs = draw(st.sampled_from([1, 4, 512]))
    start = draw(st.sampled_from(["pass", "project"]))
    first = draw(st.booleans())
    sweep = draw(st.sampled_from(["all", "changed", "every"]))
    return n, m_old, m, rows, prim, secs, budget, rounds, rb, bs, start, first, sweep, trained


@settings(max_examples=60, deadline=None)
@given(cases())
def test_budget_is_never_exceeded(case):
    n, m_old, m, rows, prim, secs, budget, rounds, rb, bs, start, first, sweep, trained = case
    g = BipartiteGraph.from_lists(rows, m)
    old = old_placement(n, prim, secs)
    topo = resolve_topology(n, None, None)
    opts = Options(rounds=rounds, replication_budget=rb, batch_size=bs, start=start, sweep_first=first, sweep=sweep,
                   target="none")
    used = np.unique(np.concatenate([np.array(r, dtype=np.int64) for r in rows]))
    # created: read now, untrained, no old secondary (computed here, not by gmp)
    created = [] if trained is None else [e for e in used if e < m_old and not trained[e] and not secs[e]]
    assert created_rows(used, old, trained).tolist() == created
    placed = place_new_data(g, old, topo, options=opts, trained=trained)
    placed.check(num_samples=len(rows), num_embeddings=m)
    kept = [e for e in range(m_old) if e not in created]
    assert placed.embedding_primary[kept].tolist() == [prim[e] for e in kept]  # old rows stay
    assert [placed.secondaries_of(e).tolist() for e in range(m_old)] == secs
    assert reference_moved(old, placed, created) == 0
    p = repartition_incremental(g, old, topo, max_moved_rows=budget, options=opts, start=placed, trained=trained)
    p.check(num_samples=len(rows), num_embeddings=m)
    assert reference_moved(old, p, created) == moved_rows(old, p, created=created).total <= budget
    # one pass for both (what the CLI calls): the same two placements as placing, then refining from the start
    both = place_and_repartition(g, old, topo, max_moved_rows=budget, options=opts, trained=trained)
    _assert_same_placements(both, (placed, p))
    goal = repartition_incremental(g, old, topo, max_moved_rows=3 * budget + 5, options=opts, start=placed,
                                   trained=trained)
    t = repartition_toward(g, old, goal, topo, max_moved_rows=budget, options=opts)
    t.check(num_samples=len(rows), num_embeddings=m)
    assert reference_moved(old, t) == moved_rows(old, t).total <= budget
    cap = -(-len(rows) // n)  # max_imbalance 1.05 of a small count rounds up
    assert np.bincount(p.sample_worker, minlength=n).max() <= max(cap, int(np.ceil(len(rows) / n * 1.05 - 1e-9)))


@pytest.mark.parametrize("carry, max_imbalance, worker, reads", [
    (True, 2.0, 1, 0),    # the sample goes to row 0 and takes its two new ids along: nothing remote
    (False, 2.0, 0, 1),   # alone, the move saves row 0 (1) but makes ids 1 and 2 remote (2): it stays
    (True, 1.05, 0, 1),   # w1 would hold 3 primaries, above the primary cap ceil(3 / 2 * 1.05) = 2: it stays
])
def test_the_sweep_carries_a_samples_private_new_ids(carry, max_imbalance, worker, reads):
    # old row 0 on w1; today one sample reads it and two new ids (1, 2) no other sample reads; the start puts
    # the sample and its new ids on w0. A budget of 0 allows no row of the old placement to move, but new ids
    # are created, not moved: carrying them is free (moved rows stay 0)
    g = BipartiteGraph.from_lists([[0, 1, 2]], 3)
    old = Placement.edge_cut(2, [1], [1])
    start = Placement.edge_cut(2, [0], [1, 0, 0])
    p = repartition_incremental(g, old, two(), max_moved_rows=0, start=start,
                                options=Options(max_imbalance=max_imbalance, carry_private=carry, sweep="all", **EXACT))
    assert p.sample_worker.tolist() == [worker]
    assert p.embedding_primary.tolist() == [1, worker, worker]
    assert batch_remote_reads(g, p, 1) == reads
    assert moved_rows(old, p).total == 0


@pytest.mark.parametrize("start", ["pass", "project"])
def test_sweep_first_is_a_free_round_then_the_budgeted_one(start):
    # sweep_first = a budget-0 run (free moves + a sweep of every sample) continued by the budgeted run from
    # its result: the two compositions must agree exactly (no secondaries, so no capacity differs)
    rng = np.random.default_rng(3)
    rows = [sorted(set(rng.integers(0, 60, size=4).tolist())) for _ in range(300)]
    g = BipartiteGraph.from_lists(rows, 70)  # ids 50..69 are new
    old = Placement.edge_cut(4, [0], rng.integers(0, 4, size=50))
    topo = resolve_topology(4, None, None)
    opts = Options(start=start, replication_budget=0.0, rounds=1, sweep="all", sweep_first=False, target="none")
    one = repartition_incremental(g, old, topo, max_moved_rows=6, options=replace(opts, sweep_first=True))
    free = repartition_incremental(g, old, topo, max_moved_rows=0, options=opts)
    two = repartition_incremental(g, old, topo, max_moved_rows=6, options=opts, start=free)
    assert moved_rows(old, free).total == 0
    assert np.array_equal(one.sample_worker, two.sample_worker)
    assert np.array_equal(one.embedding_primary, two.embedding_primary)
    assert reference_moved(old, one) == moved_rows(old, one).total <= 6
    assert [r["round"] for r in one.info["sweeps"]] == [0, 1]
    assert one.info["sweeps"][0]["allowed_rows"] == one.info["sweeps"][0]["spent_rows"] == 0
    assert one.info["sweeps"][0]["swept_samples"] == one.info["sweeps"][1]["swept_samples"] == 300


def test_sweep_every_sweeps_every_sample_every_round():
    rng = np.random.default_rng(4)
    g = BipartiteGraph.from_lists([sorted(set(rng.integers(0, 40, size=4).tolist())) for _ in range(120)], 45)
    old = Placement.edge_cut(3, [0], rng.integers(0, 3, size=40))
    topo = resolve_topology(3, None, None)
    every = repartition_incremental(g, old, topo, max_moved_rows=4,
                                   options=Options(rounds=3, sweep="every", sweep_first=False, target="none"))
    assert [r["swept_samples"] for r in every.info["sweeps"]] == [120, 120, 120]
    changed = repartition_incremental(g, old, topo, max_moved_rows=4,
                                     options=Options(rounds=3, sweep="changed", sweep_first=False, target="none"))
    assert all(r["swept_samples"] < 120 for r in changed.info["sweeps"])
    assert moved_rows(old, every).total <= 4 and moved_rows(old, changed).total <= 4


def _reference_pass(rows, prim, sec, cost, df, alpha, cap, order):
    """The placement pass (stream_samples) in plain Python: marginal Eq. 3 cost + alpha * load, ties to
    the lowest worker; a new id (prim -1) counts from the worker with most of its samples so far."""
    n = cost.shape[0]
    count = np.zeros((len(prim), n), dtype=np.int64)
    vp = list(prim)
    load = [0] * n
    out = [-1] * len(rows)
    for i in order:
        delta = [alpha * load[w] for w in range(n)]
        for x in rows[i]:
            for w in range(n):
                if vp[x] >= 0 and vp[x] != w and not (int(sec[x]) >> w) & 1:
                    delta[w] += cost[vp[x], w] * df[count[x, w]]
        best = min((w for w in range(n) if load[w] < cap), key=lambda w: (delta[w], w))
        out[i] = best
        load[best] += 1
        for x in rows[i]:
            count[x, best] += 1
            p = vp[x]
            if prim[x] < 0 and (p < 0 or count[x, best] > count[x, p] or (count[x, best] == count[x, p] and best < p)):
                vp[x] = best
    return out, count


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_placement_pass_against_a_python_reference(seed):
    # the compiled pass (with its prefetching) against the plain loop on a random graph: new ids, secondaries,
    # a non-uniform cost, a tight sample cap
    from gmp.partition import _incremental_kernels as K
    from gmp.partition.hybrid import soft_count_table

    rng = np.random.default_rng(seed)
    n, num_rows, num_samples = 4, 30, 80
    rows = [sorted(set(rng.integers(0, num_rows, size=int(rng.integers(1, 6))).tolist())) for _ in range(num_samples)]
    prim = rng.integers(0, n, size=num_rows).astype(np.int32)
    prim[rng.random(num_rows) < 0.3] = -1  # new ids
    sec = np.where(prim >= 0, rng.integers(0, 2**n, size=num_rows), 0).astype(np.int64)
    sec &= ~(np.int64(1) << np.maximum(prim, 0).astype(np.int64))  # no secondary where the primary is
    cost = rng.uniform(0.5, 2.0, size=(n, n))
    np.fill_diagonal(cost, 0.0)
    cap = 22
    f = soft_count_table(cap, num_samples / n, 4)
    df = np.diff(f)
    alpha = 0.05
    order = rng.permutation(num_samples).astype(np.int32)
    g = BipartiteGraph.from_lists(rows, num_rows)
    count = np.zeros((num_rows, n), dtype=np.int32)
    marg = np.empty((num_rows, n), dtype=np.float64)
    K.fill_marginals(prim, sec, count, df, cost, marg)
    out = np.empty(num_samples, dtype=np.int32)
    K.stream_samples(np.asarray(g.sample_indptr), np.asarray(g.sample_indices, dtype=np.int32), order, prim, sec,
                     count, marg, df, cost, np.zeros(n, dtype=np.int64), np.int64(cap), alpha, out)
    want_out, want_count = _reference_pass(rows, prim.tolist(), sec, cost, df, alpha, cap, order.tolist())
    assert out.tolist() == want_out
    assert np.array_equal(count, want_count)
    assert np.bincount(out, minlength=n).max() <= cap


def test_split_edges_set_sealed_rows_apart_and_put_carried_rows_last():
    # hand-computed: rows 1 and 3 sealed (set apart), rows 2 and 5 carried (moved last, in their order)
    from gmp.partition import _incremental_kernels as K

    indptr = np.array([0, 4, 6, 6, 9], dtype=np.int64)
    cindices = np.array([2, 1, 0, 5, 3, 4, 5, 1, 3], dtype=np.int32)
    flags = np.array([0, 1, 2, 1, 0, 2], dtype=np.uint8)  # 1: sealed, 2: carried
    oindptr = np.empty(5, dtype=np.int64)
    out = np.empty(6, dtype=np.int32)  # 5 open edges + the spare entry
    num_private = np.empty(4, dtype=np.int32)
    sindptr = np.empty(5, dtype=np.int64)
    sout = np.empty(5, dtype=np.int32)  # 4 sealed edges + the spare entry
    assert K.split_edges(indptr, cindices, flags, oindptr, out, num_private, sindptr, sout) == 5
    assert sindptr.tolist() == [0, 1, 2, 2, 4]
    assert sout[:4].tolist() == [1, 3, 1, 3]
    assert oindptr.tolist() == [0, 3, 4, 4, 5]
    assert out[:5].tolist() == [0, 2, 5, 4, 5]
    assert num_private.tolist() == [2, 0, 0, 1]


def _sealed_case():
    """Rows 0 and 1 held by all 4 workers; row 0 cools (8 readers, just above the saturated degree 7) while row 2, held by its primary
    only, is read by most samples: a secondary swap evicts row 0 from a worker (the sweep must then
    sum it again)."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(400):
        r = {1} | set(rng.integers(3, 70, size=3).tolist())
        if i < 300:
            r.add(2)
        if i % 50 == 0:
            r.add(0)
        rows.append(sorted(r))
    g = BipartiteGraph.from_lists(rows, 70)  # ids 60..69 are new
    prim = rng.integers(0, 4, size=60)
    secs = [sorted({0, 1, 2, 3} - {int(prim[e])}) if e < 2 else [] for e in range(60)]
    indptr = np.zeros(61, dtype=np.int64)
    np.cumsum([len(s) for s in secs], out=indptr[1:])
    old = Placement.edge_cut(4, [0], prim).with_secondaries(indptr, [w for s in secs for w in s])
    return g, old, resolve_topology(4, None, None)


@pytest.mark.parametrize("sweep", ["all", "changed"])
def test_sealed_rows_change_no_placement(monkeypatch, sweep):
    # the kernels skip the edges of rows every worker holds; the result must be the one of summing every edge
    # (reference: no row sealed), also when a row-move round evicts a copy of a sealed row
    import gmp.partition.incremental as I

    g, old, topo = _sealed_case()
    opts = Options(rounds=2, sweep=sweep, batch_size=64, target="none")
    splits = []
    real = I._split_edges
    monkeypatch.setattr(I, "_split_edges", lambda *a: splits.append(real(*a)) or splits[-1])
    got = place_and_repartition(g, old, topo, max_moved_rows=12, options=opts)
    assert splits[0].sealed.tolist()[:2] == [True, True] and not splits[0].sealed[2:].any()
    assert len(splits) == 1  # one split; row 0 then loses a copy and is summed from its samples' sealed entries
    assert got[1].embedding_primary[0] == old.embedding_primary[0] and len(got[1].secondaries_of(0)) < 3
    assert len(got[1].secondaries_of(1)) == 3
    assert moved_rows(old, got[1]).total <= 12
    monkeypatch.setattr(I, "_all_local", lambda prim, sec, n: np.zeros(prim.size, dtype=bool))
    want = place_and_repartition(g, old, topo, max_moved_rows=12, options=opts)
    _assert_same_placements(got, want)


def test_sweep_with_a_lost_sealed_row_equals_the_full_sweep_and_keeps_marginals_in_step():
    # kernel level: rows 0 and 1 were sealed when the edges were split; row 0 then lost its copy on worker 3.
    # The sweep over the open edges (+ row 0 from the sealed entries of its samples) must move the same samples
    # as the sweep over every edge, and leave marg = what fill_marginals computes from the final counts
    from gmp.partition import _incremental_kernels as K
    from gmp.partition.hybrid import soft_count_table
    import gmp.partition.incremental as I

    g, old, topo = _sealed_case()
    comp = _compact(g)
    indptr = np.asarray(g.sample_indptr)
    n, num = 4, comp.used_ids.size
    is_old = comp.used_ids < 60
    prim = np.full(num, -1, dtype=np.int32)
    prim[is_old] = np.asarray(old.embedding_primary)[comp.used_ids[is_old]]
    prim[~is_old] = np.arange(int((~is_old).sum())) % n
    sec = np.zeros(num, dtype=np.int64)
    sec[is_old] = I._secondary_masks(old, comp.used_ids[is_old])
    split = I._split_edges(comp, indptr, prim, sec, is_old, n, 7, False)
    assert split.sealed[:2].tolist() == [True, True]
    lost_worker = 3 if prim[0] != 3 else 2
    sec[0] &= ~(np.int64(1) << lost_worker)  # a swap evicted it
    lost = (split.sealed & ~I._all_local(prim, sec, n)).view(np.uint8) << 1
    assert lost.tolist()[:2] == [2, 0]
    cost = np.ones((n, n)) - np.eye(n)
    f = soft_count_table(120, 100.0, 64)
    df = np.diff(f)
    results = []
    for sealed in (True, False):
        sw = (np.arange(g.num_samples) * 7 % n).astype(np.int32)
        count = np.zeros((num, n), dtype=np.int32)
        K.count_samples(indptr, comp.cindices, sw, count)
        marg = np.empty((num, n))
        K.fill_marginals(prim, sec, count, df, cost, marg)
        marks = np.zeros(g.num_samples, dtype=np.uint8)
        args = (split.indptr, split.cindices, split.num_private, split.sindptr, split.scindices, lost) if sealed \
            else (indptr, comp.cindices, np.zeros(g.num_samples, dtype=np.int32), np.zeros(indptr.size, dtype=np.int64),
                  np.zeros(1, dtype=np.int32), np.zeros(num, dtype=np.uint8))
        if sealed:
            K.mark_samples(split.sindptr, split.scindices, lost, marks)
            assert int(np.count_nonzero(marks & 2)) == 8  # row 0's readers
        moved = K.sweep_samples(*args, marks, True, sw, prim.copy(), sec.copy(), count, marg,
                                df, cost, np.bincount(sw, minlength=n).astype(np.int64), np.int64(110), 0.01,
                                np.bincount(prim, minlength=n).astype(np.int64), np.int64(num), 0.0,
                                np.zeros(n, dtype=np.int64))
        want = np.empty_like(marg)
        K.fill_marginals(prim, sec, count, df, cost, want)
        assert np.allclose(marg, want, rtol=0, atol=1e-12)  # kept in step with count
        results.append((moved, sw))
    assert results[0][0] == results[1][0] > 0
    assert np.array_equal(results[0][1], results[1][1])


def test_compact_ids_and_degrees_against_numpy():
    # the remap kernel counts each compact id's edges in the same pass; reference: np.unique + np.bincount
    rng = np.random.default_rng(11)
    rows = [sorted(set(rng.integers(0, 300, size=int(rng.integers(0, 6))).tolist())) for _ in range(400)]
    g = BipartiteGraph.from_lists(rows, 320)  # ids 300..319 unused
    comp = _compact(g)
    ids = np.asarray(g.sample_indices)
    assert np.array_equal(comp.used_ids, np.unique(ids))
    assert np.array_equal(comp.used_ids[comp.cindices], ids)
    assert np.array_equal(comp.degree, np.bincount(ids, minlength=320)[np.unique(ids)])
    assert saturated_row_fraction(g, 2, 4, degree=comp.degree) == saturated_row_fraction(g, 2, 4)


def test_saturated_row_fraction_hand_computed():
    # 5 samples on 1 worker: m = b = 5, saturated above ceil(4 * 5 / 5) = 4; row 0 (degree 5) of 6 used rows
    g = BipartiteGraph.from_lists([[0, 1], [0, 2], [0, 3], [0, 4], [0, 5]], 7)  # id 6 unused
    assert saturated_row_fraction(g, 1, 512) == pytest.approx(1 / 6)
    assert saturated_row_fraction(BipartiteGraph.from_lists([[]], 2), 1, 512) == 0.0


@pytest.mark.parametrize("dense, small", [(True, True), (True, False), (False, True), (False, False)])
def test_defaults_follow_the_density(dense, small, monkeypatch):
    import gmp.partition.incremental as incremental

    g, old = density_case(dense)
    if not small:  # the bound above which a sparse graph takes one round of changed-row sweeps
        monkeypatch.setattr(incremental, "SMALL_EDGES", g.num_edges - 1)
    settings_ = DENSE_SETTINGS if dense else SMALL_SETTINGS if small else SPARSE_SETTINGS
    resolved, record = resolve_options(Options(), g, 2)
    assert {k: getattr(resolved, k) for k in settings_} == settings_
    assert record["dense"] is dense and record["small"] is small and set(record["set"]) == set(settings_)
    assert (record["saturated_row_fraction"] >= 0.2) is dense
    auto = repartition_incremental(g, old, two(), max_moved_rows=3, options=Options(target="none"))
    given = repartition_incremental(g, old, two(), max_moved_rows=3, options=Options(**settings_, target="none"))
    assert np.array_equal(auto.sample_worker, given.sample_worker)
    assert np.array_equal(auto.embedding_primary, given.embedding_primary)
    assert auto.options["start"] == settings_["start"] and auto.info["defaults"]["dense"] is dense
    assert len(auto.info["sweeps"]) == settings_["rounds"] + settings_["sweep_first"]
    # a value given is kept; the others still follow the density
    part, record = resolve_options(Options(rounds=2), g, 2)
    assert part.rounds == 2 and part.start == settings_["start"] and "rounds" not in record["set"]


def test_a_start_that_moved_rows_has_spent_them():
    # the graph of the hand-computed budgets: one move (1 row) reaches 2 reads; continuing from that result
    # with the same budget of 1 may not move another row (it would have moved 2 in all)
    g = BipartiteGraph.from_lists([[0, 2], [0, 2], [1, 3], [1, 3]], 4)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1, 1])
    opts = Options(max_imbalance=1.5, rounds=3, **EXACT)
    first = repartition_incremental(g, old, two(), max_moved_rows=1, options=opts)
    again = repartition_incremental(g, old, two(), max_moved_rows=1, options=opts, start=first)
    assert moved_rows(old, first).total == moved_rows(old, again).total == 1
    with pytest.raises(PartitionError, match="already moves 1 rows of the old placement, above max_moved_rows=0"):
        repartition_incremental(g, old, two(), max_moved_rows=0, options=opts, start=first)


@pytest.mark.parametrize("plan", ["exact", "onepass"])
def test_same_seed_same_result(plan):
    rng = np.random.default_rng(0)
    rows = [sorted(set(rng.integers(0, 40, size=5).tolist())) for _ in range(200)]
    g = BipartiteGraph.from_lists(rows, 50)
    old = Placement.edge_cut(4, [0], rng.integers(0, 4, size=40))
    topo = resolve_topology(4, None, None)
    a, b = (repartition_incremental(g, old, topo, max_moved_rows=5, seed=7, options=Options(plan=plan)) for _ in "ab")
    assert np.array_equal(a.sample_worker, b.sample_worker)
    assert np.array_equal(a.embedding_primary, b.embedding_primary)
    if plan == "onepass":  # no randomness at all (dataset order): another seed, the same placement
        c = repartition_incremental(g, old, topo, max_moved_rows=5, seed=8, options=Options(plan=plan))
        assert np.array_equal(a.sample_worker, c.sample_worker) and np.array_equal(a.embedding_primary,
                                                                                   c.embedding_primary)
        assert a.info["num_used_embeddings"] == len({x for r in rows for x in r})


# --------------------------------------------------------------------------- helpers and errors
def test_moved_rows_counts_and_bytes():
    old = Placement.edge_cut(3, [0], [0, 1, 2]).with_secondaries([0, 1, 1, 1], [1])
    # row 0: primary 0 -> 1, where it had a secondary (the primary counts, no secondary);
    # row 1: gains secondaries on 0 and 2 (both new); row 2 unchanged; id 3 is new
    new = Placement.edge_cut(3, [0], [1, 1, 2, 0]).with_secondaries([0, 0, 2, 2, 2], [0, 2])
    assert moved_rows(old, new) == MovedRows(1, 2)
    assert moved_rows(old, new).bytes(16) == 3 * 16 * 4
    assert moved_rows(old, new, rows=[0]) == MovedRows(1, 0)


def test_match_workers_renames_to_the_old_workers():
    old = Placement.edge_cut(3, [0, 1], [0, 0, 1, 2])
    new = Placement.edge_cut(3, [2, 0], [2, 2, 0, 1])  # the same placement, workers renamed
    m = match_workers(old, new)
    assert m.embedding_primary.tolist() == [0, 0, 1, 2] and m.sample_worker.tolist() == [0, 1]
    assert moved_rows(old, m).total == 0 and moved_rows(old, new).total == 4


@pytest.mark.parametrize("text, rows", [("5%", 50), ("0%", 0), ("100%", 1000), ("2.5%", 25), ("17", 17)])
def test_migration_budget(text, rows):
    assert migration_budget(text, 1000) == rows


@pytest.mark.parametrize("text", ["five", "-3", "120%", "1e3"])
def test_migration_budget_errors(text):
    with pytest.raises(PartitionError, match="max_moved_rows"):
        migration_budget(text, 1000)


def test_errors_name_the_problem():
    g = BipartiteGraph.from_lists([[0]], 2)
    old = Placement.edge_cut(2, [0], [0, 1, 1])
    with pytest.raises(PartitionError, match="fewer than the old placement's 3; ids must be stable"):
        place_new_data(g, old, two())
    with pytest.raises(PartitionError, match="the old placement has 2 workers, the topology 3"):
        place_new_data(BipartiteGraph.from_lists([[0]], 3), old, resolve_topology(3, None, None))
    with pytest.raises(PartitionError, match="max_moved_rows must be an integer >= 0, got -1"):
        repartition_incremental(BipartiteGraph.from_lists([[0]], 3), old, two(), max_moved_rows=-1)
    with pytest.raises(PartitionError, match="order must be one of"):
        Options(order="sorted")
    with pytest.raises(PartitionError, match="start must be one of pass, project, got 'random'"):
        Options(start="random")


@pytest.mark.parametrize("option, match", [
    ("max_imbalance", "max_imbalance must be a number >= 1.0"),
    ("rounds", "rounds must be an integer >= 0"),
    ("replication_budget", "replication_budget must be a fraction"),
    ("batch_size", "batch_size must be an integer >= 1"),
])
def test_a_bool_is_not_a_number(option, match):
    """-O rounds=true (JSON's true, a Python int) ran as 1 and the manifest recorded true."""
    with pytest.raises(PartitionError, match=match):
        Options(**{option: True})
    with pytest.raises(PartitionError, match="max_moved_rows must be an integer >= 0, got True"):
        repartition_incremental(BipartiteGraph.from_lists([[0]], 3), Placement.edge_cut(2, [0], [0, 1, 1]), two(),
                                max_moved_rows=True)


# --------------------------------------------------------------------------- CLI
runner = CliRunner()


def _dataset(path, rows, num_embeddings):
    indptr = np.cumsum([0] + [len(r) for r in rows])
    write_dataset(path, indptr=indptr, indices=np.array([i for r in rows for i in r]),
                  labels=np.zeros(len(rows), dtype=np.float32), dense=None,
                  fields=[FieldInfo("A", "categorical", num_embeddings, 0)], num_embeddings=num_embeddings,
                  source={"format": "test"}, test_fraction=0.0)
    return path


def test_cli_from_manifest(tmp_path):
    day0 = _dataset(tmp_path / "d0", [[0, 1], [0, 1], [2, 3], [2, 3]], 4)
    day1 = _dataset(tmp_path / "d1", [[0, 2], [0, 2], [1, 3], [1, 3], [4, 1]], 5)
    res = runner.invoke(app, ["partition", str(day0), "-w", "2", "-m", "hybrid", "--out", str(tmp_path / "p0")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["partition", str(day1), "--from-manifest", str(tmp_path / "p0"), "--max-moved-rows",
                              "50%", "--compare-full", "--out", str(tmp_path / "p1")])
    assert res.exit_code == 0, res.output
    assert "no re-partition (new data placed)" in res.output and "full re-partition (hybrid)" in res.output
    m = load_manifest(tmp_path / "p1")
    c = m.meta["partitioner"]["info"]["comparison"]
    assert m.method == "incremental" and c["max_moved_rows"] == 2  # 50% of the 5 used rows, floored
    assert c["moved_rows"]["total"] <= 2 and c["moved_rows"]["bytes"] == c["moved_rows"]["total"] * 16 * 4
    assert set(c["batch_remote_reads"]) == {"no_repartition", "this", "full_repartition"}
    assert json.loads((tmp_path / "p1" / "report.json").read_text())["incremental"]["max_moved_rows"] == 2
    # gmp report shows the comparison too (it dropped it once): the stored object, and a table in md
    res = runner.invoke(app, ["report", str(tmp_path / "p1"), "-f", "json"])
    assert res.exit_code == 0 and json.loads(res.output)["incremental"] == c
    md = (tmp_path / "p1" / "report.md").read_text()
    assert "## New data on an old placement" in md and "| incremental (budget 2 rows) |" in md
    assert "| no re-partition (new data placed) |" in md and "| full re-partition (hybrid) |" in md
    old = load_manifest(tmp_path / "p0").placement
    assert m.placement.embedding_primary[:4].tolist() != [] and m.num_embeddings == 5
    assert moved_rows(old, m.placement).total == c["moved_rows"]["total"]
    # the reads recounted here: the refined placement (the metrics' count) and the placed one
    g1 = BipartiteGraph.from_lists([[0, 2], [0, 2], [1, 3], [1, 3], [4, 1]], 5)
    reads = c["batch_remote_reads"]
    assert reads["this"] == batch_remote_reads(g1, m.placement, 512) == m.meta["metrics"]["batch_remote_reads"]
    assert reads["no_repartition"] == batch_remote_reads(g1, place_new_data(g1, old, two()), 512)
    res = runner.invoke(app, ["partition", str(day1), "--from-manifest", str(tmp_path / "p0"), "--out",
                              str(tmp_path / "p1-placed")])
    assert res.exit_code == 0, res.output
    placed = load_manifest(tmp_path / "p1-placed")
    reads = placed.meta["partitioner"]["info"]["comparison"]["batch_remote_reads"]
    assert reads["this"] == reads["no_repartition"] == batch_remote_reads(g1, placed.placement, 512)
    assert "│ place-new" in res.output and "no re-partition" not in res.output  # one row: the same placement


def test_cli_from_manifest_says_the_old_memory_plan_is_not_held(tmp_path):
    """A day-0 manifest made with --memory-per-worker: placing new data on it held no budget and the new plan
    dropped it without a word (the adversarial pass: 344-351 rows a worker against 340). It is said."""
    day0 = _dataset(tmp_path / "d0", [[0, 1], [0, 1], [2, 3], [2, 3]], 4)
    day1 = _dataset(tmp_path / "d1", [[0, 2], [0, 2], [1, 3], [1, 3], [4, 1]], 5)
    res = runner.invoke(app, ["partition", str(day0), "-w", "2", "-m", "hybrid", "--memory-per-worker", "256",
                              "--out", str(tmp_path / "p0")])
    assert res.exit_code == 0, res.output
    for budget in ([], ["--max-moved-rows", "50%"]):
        res = runner.invoke(app, ["partition", str(day1), "--from-manifest", str(tmp_path / "p0"), *budget,
                                  "--out", str(tmp_path / "p1"), "--overwrite"])
        assert res.exit_code == 0, res.output
        said = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
        assert said == [f"warning: {tmp_path / 'p0'} was made with a memory plan of 256 bytes per worker, which "
                        f"placing new data on it does not hold (the new ids' primaries and the copies are placed "
                        f"without it) and the new manifest does not record; to hold it, re-partition the new data "
                        f"from scratch with --memory-per-worker 256."], res.stderr
        assert load_manifest(tmp_path / "p1").plan.memory_per_worker is None


def test_cli_chains_the_row_history_and_reads_a_version_2_manifest(tmp_path):
    """Day 0 reads ids 0-3 of 6 (4 and 5 are a fixed vocabulary's unread ids); day 1 reads 4; day 2 reads 5.
    Each manifest's trained rows are its ancestors' and its own data's; an unread old id is created.
    A version 2 manifest (no history) counts every old id as trained and says so."""
    day0 = _dataset(tmp_path / "d0", [[0, 1], [0, 1], [2, 3], [2, 3]], 6)
    day1 = _dataset(tmp_path / "d1", [[0, 4], [0, 4], [2, 3], [2, 3]], 6)
    day2 = _dataset(tmp_path / "d2", [[0, 5], [0, 4], [2, 3], [5, 3]], 7)  # id 6: new, unread
    p0, p1, p2 = (str(tmp_path / x) for x in ("p0", "p1", "p2"))
    for args in (["partition", str(day0), "-w", "2", "-m", "hybrid", "--out", p0, "--no-plots"],
                 ["partition", str(day1), "--from-manifest", p0, "--max-moved-rows", "0", "--out", p1, "--no-plots"],
                 ["partition", str(day2), "--from-manifest", p1, "--max-moved-rows", "0", "--out", p2, "--no-plots"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
    h0, h1, h2 = (load_manifest(p).history for p in (p0, p1, p2))
    assert h0.trained.tolist() == [True] * 4 + [False] * 2 and h0.created.tolist() == []
    assert h1.trained.tolist() == [True] * 5 + [False] and h1.created.tolist() == [4]
    assert h2.trained.tolist() == [True] * 6 + [False] and h2.created.tolist() == [5]  # new id 6: unread
    assert "1 old ids no earlier data read were placed like new ids" in res.output
    assert json.loads((tmp_path / "p2" / "report.json").read_text())["incremental"]["created_rows"] == 1
    # the same step from a version 2 manifest: no history, nothing created, the new manifest marks every old id
    meta = json.loads((tmp_path / "p1" / "manifest.json").read_text())
    meta["schema_version"] = 2
    del meta["history"]
    (tmp_path / "p1" / "manifest.json").write_text(json.dumps(meta))
    res = runner.invoke(app, ["partition", str(day2), "--from-manifest", p1, "--max-moved-rows", "0", "--out",
                              str(tmp_path / "p2v2"), "--no-plots"])
    assert res.exit_code == 0, res.output
    assert "records no row history (made before manifest version 3)" in res.output
    h = load_manifest(tmp_path / "p2v2").history
    assert h.trained.tolist() == [True] * 6 + [False] and h.created.tolist() == []


def test_cli_from_manifest_takes_incremental_options(tmp_path):
    day0 = _dataset(tmp_path / "d0", [[0, 1], [0, 1], [2, 3], [2, 3]], 4)
    day1 = _dataset(tmp_path / "d1", [[0, 2], [0, 2], [1, 3], [1, 3], [4, 1]], 5)
    assert runner.invoke(app, ["partition", str(day0), "-w", "2", "-m", "hybrid", "--out", str(tmp_path / "p0")]).exit_code == 0
    res = runner.invoke(app, ["partition", str(day1), "--from-manifest", str(tmp_path / "p0"), "--max-moved-rows", "1",
                              "-O", "start=project", "-O", "rounds=2", "-O", "sweep_first=true", "-O", "sweep=every",
                              "--no-plots", "--out", str(tmp_path / "p1")])
    assert res.exit_code == 0, res.output
    m = load_manifest(tmp_path / "p1")
    opts = m.meta["partitioner"]["options"]
    assert (opts["start"], opts["rounds"], opts["sweep_first"], opts["sweep"]) == ("project", 2, True, "every")
    assert [r["round"] for r in m.meta["partitioner"]["info"]["sweeps"]] == [0, 1, 2]
    assert m.meta["partitioner"]["info"]["comparison"]["moved_rows"]["total"] <= 1


@pytest.mark.parametrize("extra, message", [
    (["-O", "levels=3"], "option 'levels' is not an option of --from-manifest (repartition_dataset); expected one"),
    (["-O", "start=sideways"], "start must be one of pass, project"),
    (["--method", "hybrid"], "--from-manifest keeps the old placement's workers"),
    (["--max-moved-rows", "lots"], "--max-moved-rows must be a number of rows"),
    (["--max-moved-rows", "101%"], "--max-moved-rows '101%' is above 100%"),
    (["--max-moved-rows", str(2**63)], "is above 2^63 - 1; give 100% to allow every row to move"),
    (["--seed", "-1"], "--seed must be an int in [0, 2^63)"),
    (["--tol", "0.1", "--inter-cost", "3"], "--inter-cost, --tol do not apply to --from-manifest"),
    (["--threads", "2"], "--threads does not apply to --from-manifest"),
    (["--rounds", "2", "-O", "rounds=3"], "rounds is given both as --rounds and as -O rounds=...; give it once"),
])
def test_cli_from_manifest_errors(tmp_path, extra, message):
    day0 = _dataset(tmp_path / "d0", [[0, 1], [2, 3]], 4)
    assert runner.invoke(app, ["partition", str(day0), "-w", "2", "-m", "random",
                               "--out", str(tmp_path / "p0")]).exit_code == 0
    res = runner.invoke(app, ["partition", str(day0), "--from-manifest", str(tmp_path / "p0"), *extra,
                              "--out", str(tmp_path / "p1")])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output


def test_cli_max_moved_rows_needs_from_manifest(tmp_path):
    day0 = _dataset(tmp_path / "d0", [[0, 1], [2, 3]], 4)
    res = runner.invoke(app, ["partition", str(day0), "-w", "2", "--max-moved-rows", "5"])
    assert res.exit_code == 2 and "--max-moved-rows, --compare-full and --window need --from-manifest" in res.output
    assert not (tmp_path / "placements").exists()


def test_cli_from_manifest_refuses_to_overwrite_its_inputs(tmp_path):
    # the old manifest and the new dataset are inputs: --out naming either is refused before any work,
    # --overwrite or not (gmp._io.check_output_dir), and both stay as they were
    day0 = _dataset(tmp_path / "d0", [[0, 1], [2, 3]], 4)
    assert runner.invoke(app, ["partition", str(day0), "-w", "2", "-m", "random",
                               "--out", str(tmp_path / "p0")]).exit_code == 0
    before = (tmp_path / "p0" / "manifest.json").read_bytes()
    for out, message in ((tmp_path / "p0", "is the input"), (day0, "is a gmp dataset, not a placement manifest")):
        res = runner.invoke(app, ["partition", str(day0), "--from-manifest", str(tmp_path / "p0"), "--out", str(out),
                                  "--overwrite"])
        assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
    assert (tmp_path / "p0" / "manifest.json").read_bytes() == before
    assert load_manifest(tmp_path / "p0").num_workers == 2


def test_sixty_four_workers_seal_the_rows_all_of_them_hold(monkeypatch):
    # int64 masks: worker 63 is the sign bit. Row 0 is held by all 64 workers (sealed); the result must be the one
    # of summing every edge, as in test_sealed_rows_change_no_placement (the all-workers mask overflowed here once)
    import gmp.partition.incremental as I

    n = 64
    rng = np.random.default_rng(3)
    rows = [sorted({0} | set(rng.integers(1, 400, size=4).tolist())) for _ in range(3000)]
    g = BipartiteGraph.from_lists(rows, 420)  # ids 400..419 are new
    prim = rng.integers(0, n, size=400)
    prim[0] = 63
    secs = [list(range(63)) if e == 0 else [] for e in range(400)]
    indptr = np.zeros(401, dtype=np.int64)
    np.cumsum([len(s) for s in secs], out=indptr[1:])
    old = Placement.edge_cut(n, [0], prim).with_secondaries(indptr, [w for s in secs for w in s])
    topo = resolve_topology(n, None, None)
    splits = []
    real = I._split_edges
    monkeypatch.setattr(I, "_split_edges", lambda *a: splits.append(real(*a)) or splits[-1])
    opts = Options(start="pass", sweep="all", rounds=1, target="none")
    got = place_and_repartition(g, old, topo, max_moved_rows=20, options=opts)
    assert splits[0].sealed[0] and not splits[0].sealed[1:].any()
    assert moved_rows(old, got[1]).total <= 20
    monkeypatch.setattr(I, "_all_local", lambda prim, sec, n: np.zeros(prim.size, dtype=bool))
    want = place_and_repartition(g, old, topo, max_moved_rows=20, options=opts)
    _assert_same_placements(got, want)


def test_cli_from_manifest_keeps_the_old_plan_and_takes_the_incremental_flags(tmp_path):
    # a day-0 placement planned for width 64 and batch 128: the next day's manifest keeps both unless given
    # (gmp train --resume on it then keeps the checkpoint's width), and the flags that are incremental options
    # (--alpha, --beta, --replication-budget) reach the partitioner instead of being dropped
    day0 = _dataset(tmp_path / "d0", [[0, 1], [0, 1], [2, 3], [2, 3]], 4)
    day1 = _dataset(tmp_path / "d1", [[0, 2], [0, 2], [1, 3], [1, 3], [4, 1]], 5)
    assert runner.invoke(app, ["partition", str(day0), "-w", "2", "-m", "hybrid", "--embedding-dim", "64",
                               "--batch-size", "128", "--no-plots", "--out", str(tmp_path / "p0")]).exit_code == 0
    res = runner.invoke(app, ["partition", str(day1), "--from-manifest", str(tmp_path / "p0"), "--max-moved-rows",
                              "1", "--alpha", "0.5", "--beta", "0.25", "--replication-budget", "0.3", "--no-plots",
                              "--out", str(tmp_path / "p1")])
    assert res.exit_code == 0, res.output
    m = load_manifest(tmp_path / "p1")
    assert (m.plan.batch_size, m.plan.embedding_dim) == (128, 64)
    c = m.meta["partitioner"]["info"]["comparison"]
    assert (c["batch_size"], c["embedding_dim"]) == (128, 64)
    assert c["moved_rows"]["bytes"] == c["moved_rows"]["total"] * 64 * 4
    opts = m.meta["partitioner"]["options"]
    assert (opts["alpha"], opts["beta"], opts["replication_budget"], opts["batch_size"]) == (0.5, 0.25, 0.3, 128)
    res = runner.invoke(app, ["partition", str(day1), "--from-manifest", str(tmp_path / "p0"), "--embedding-dim",
                              "32", "--no-plots", "--out", str(tmp_path / "p2")])
    assert res.exit_code == 0, res.output
    assert (load_manifest(tmp_path / "p2").plan.batch_size, load_manifest(tmp_path / "p2").plan.embedding_dim) == \
        (128, 32)
