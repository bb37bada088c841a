"""The sampled plan of the incremental re-partitioning (gmp.partition._incremental_sampled): hand-computed
graphs, its pass against a plain-Python reference, the migration budget as a property, and how the plan is
chosen."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.main import app
from gmp.errors import PartitionError
from gmp.graph import BipartiteGraph
from gmp.manifest import load_manifest
from gmp.metrics import batch_remote_reads
from gmp.partition import _sampled_kernels as S
from gmp.partition.incremental import (MovedRows, Options, created_rows, moved_rows, place_and_repartition,
                                       place_new_data, repartition_incremental)
from gmp.placement import Placement
from gmp.topology import resolve_topology

from incremental_cases import density_case, reference_moved

# alpha = beta = 0 removes the balance terms, batch 1 makes the sample's soft count the plain count until it
# saturates, order="dataset" makes the sample's stream order the ids', sample_every=1 samples every sample
SAMPLED = dict(plan="sampled", alpha=0.0, beta=0.0, batch_size=1, order="dataset", sample_every=1)


def two():
    return resolve_topology(2, None, None)


# --------------------------------------------------------------------------- step 4: every sample once
def test_place_hand_computed():
    # old rows 0,1 on worker 0 and 2,3 on worker 1; ids 4, 5, 6 are new (6 unused); cap ceil(4 / 2 * 1.5) = 3
    # s0 [0,1]: w0 0, w1 2 -> w0.   s1 [0,4]: w0 0, w1 1 (4 has no vote yet) -> w0; 4 votes w0.
    # s2 [2,3]: -> w1.              s3 [3,4,5]: w0 1 (row 3), w1 1 (4's candidate is w0) -> tie, w0; 4, 5 vote w0.
    g = BipartiteGraph.from_lists([[0, 1], [0, 4], [2, 3], [3, 4, 5]], 7)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1, 1])
    p = place_new_data(g, old, two(), options=Options(max_imbalance=1.5, **SAMPLED))
    assert p.sample_worker.tolist() == [0, 0, 1, 0]
    # new ids 4, 5 -> their candidate w0 (new-id cap ceil(2 / 2 * 1.5) = 2); 6 unused -> least loaded w1
    assert p.embedding_primary.tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert p.method == "place-new" and p.options["plan"] == "sampled"
    assert p.info["num_new_ids"] == 3 and p.info["num_new_ids_used"] == 2
    assert moved_rows(old, p) == MovedRows(0, 0)


def test_votes_elect_the_majority_and_untrained_ids_are_created():
    # row 0 on w0, row 1 on w1; id 2 old but untrained (placed on w0 yesterday), so it votes:
    # s0 [1,2]: -> w1, 2 votes w1.  s1 [1,2]: w0 2 (row 1, id 2's candidate w1), w1 0 -> w1; votes w1 twice.
    # s2 [0,2]: w0 1 (id 2), w1 1 (row 0) -> tie, w0; the vote drops to w1 once. id 2 -> w1, created.
    g = BipartiteGraph.from_lists([[1, 2], [1, 2], [0, 2]], 3)
    old = Placement.edge_cut(2, [0], [0, 1, 0])
    trained = np.array([True, True, False])
    p = place_new_data(g, old, two(), options=Options(max_imbalance=2.0, **SAMPLED), trained=trained)
    assert p.sample_worker.tolist() == [1, 1, 0]
    assert p.embedding_primary.tolist() == [0, 1, 1]
    assert p.info["num_created_rows"] == 1 and created_rows(np.arange(3), old, trained).tolist() == [2]
    assert moved_rows(old, p, created=[2]).total == 0


def test_a_full_vote_keeps_its_count():
    # a vote at its largest count stays there (no overflow into the candidate bits)
    word = np.array([-((S.MAX_VOTES << 6 | 1) + 1)], dtype=np.int32)
    g = BipartiteGraph.from_lists([[0]], 1)
    out = np.empty(1, dtype=np.int32)
    S.place_samples(np.asarray(g.sample_indptr), np.asarray(g.sample_indices), word, np.int64(16),
                    np.array([[0.0, 1.0], [1.0, 0.0]]), 0.0, np.zeros(2, dtype=np.int64), np.int64(1), out)
    assert out.tolist() == [1] and (-int(word[0]) - 1) == (S.MAX_VOTES << 6 | 1)


def _reference_place(rows, word, shift, n, cost, alpha, cap):
    """Step 4 the plain way (the rule of gmp.partition._sampled_kernels.place_samples, written from its
    docstring): returns the workers and the words after the votes."""
    word = [int(v) for v in word]
    load = [0] * n
    out = []
    for r in rows:
        delta = [alpha * load[w] for w in range(n)]
        for x in r:
            v = word[x]
            if v >= 0:
                holders = {w for w in range(n) if v >> w & 1}
                p = v >> shift
                for w in range(n):
                    if w not in holders:
                        delta[w] += cost[p][w]
            elif (-v - 1) >> 6 > 0:
                p = (-v - 1) & 63
                for w in range(n):
                    if w != p:
                        delta[w] += cost[p][w]
        best = min((w for w in range(n) if load[w] < cap), key=lambda w: (delta[w], w))
        out.append(best)
        load[best] += 1
        for x in r:
            if word[x] < 0:
                u = -word[x] - 1
                cand, votes = u & 63, u >> 6
                cand, votes = (best, 1) if votes == 0 else (cand, votes + 1) if cand == best else (cand, votes - 1)
                word[x] = -((votes << 6 | cand) + 1)
    return out, word


@pytest.mark.parametrize("seed, n, dtype, shift", [(0, 4, np.int32, 16), (1, 4, np.int64, 57), (2, 20, np.int64, 57),
                                                    (3, 16, np.int32, 16)])
def test_place_samples_against_a_python_reference(seed, n, dtype, shift):
    # random rows with secondaries, rows replicated everywhere, rows without a primary, a non-uniform cost and a
    # tight cap; both word widths
    rng = np.random.default_rng(seed)
    num_rows, num_samples = 40, 120
    rows = [sorted(set(rng.integers(0, num_rows, size=int(rng.integers(1, 7))).tolist())) for _ in range(num_samples)]
    word = np.empty(num_rows, dtype=dtype)
    for x in range(num_rows):
        kind = rng.random()
        if kind < 0.25:
            word[x] = S.UNSEEN
        else:
            p = int(rng.integers(0, n))
            holders = (1 << n) - 1 if kind > 0.9 else int(rng.integers(0, 1 << n)) | (1 << p)
            word[x] = (p << shift) | holders
    cost = rng.uniform(0.5, 2.0, size=(n, n))
    np.fill_diagonal(cost, 0.0)
    cap = -(-num_samples // n) + 2
    g = BipartiteGraph.from_lists(rows, num_rows)
    want_out, want_word = _reference_place(rows, word, shift, n, cost.tolist(), 0.03, cap)
    out = np.empty(num_samples, dtype=np.int32)
    S.place_samples(np.asarray(g.sample_indptr), np.asarray(g.sample_indices), word, np.int64(shift), cost, 0.03,
                    np.zeros(n, dtype=np.int64), np.int64(cap), out)
    assert out.tolist() == want_out
    assert word.tolist() == want_word
    assert np.bincount(out, minlength=n).max() <= cap


def test_words_hold_the_old_placement():
    from gmp.partition._incremental_sampled import words

    g = BipartiteGraph.from_lists([[0, 4]], 5)
    # row 0: primary 0, secondary on 1 (holders {0, 1}); rows 1, 2 no secondary; row 3 untrained, no secondary
    old = Placement.edge_cut(3, [0], [0, 2, 1, 1]).with_secondaries([0, 1, 1, 1, 1], [1])
    word, shift = words(g, old, np.array([True, True, True, False]))
    assert shift == 16 and word.dtype == np.int32
    assert word.tolist() == [(0 << 16) | 0b011, (2 << 16) | 0b100, (1 << 16) | 0b010, S.UNSEEN, S.UNSEEN]
    wide, shift = words(g, Placement.edge_cut(17, [0], [16, 0, 0, 0]), None)
    assert shift == 57 and wide.dtype == np.int64 and int(wide[0]) == (16 << 57) | (1 << 16)


# --------------------------------------------------------------------------- the whole plan
@pytest.mark.parametrize("budget, reads, moved", [(0, 4, 0), (1, 2, 1), (2, 2, 1)])
def test_sampled_plan_hand_computed_budgets(budget, reads, moved):
    # the exact plan's hand-computed budgets (tests/test_incremental.py): rows {0,1} on w0 and {2,3} on w1,
    # today's samples pair 0 with 2 and 1 with 3. Fixed rows: 4 reads wherever the samples go; one move
    # makes a pair local and step 4 puts its samples with it (2); a second single move gains nothing
    g = BipartiteGraph.from_lists([[0, 2], [0, 2], [1, 3], [1, 3]], 4)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1, 1])
    p = repartition_incremental(g, old, two(), max_moved_rows=budget, options=Options(max_imbalance=1.5, **SAMPLED))
    p.check(num_samples=4, num_embeddings=4)
    assert batch_remote_reads(g, p, 1) == reads
    assert moved_rows(old, p).total == reference_moved(old, p) == moved
    assert p.info["moved_rows"]["total"] == moved and p.info["plan"] == "sampled"


@pytest.mark.parametrize("budget, reads, secondaries", [(0, 2, [[], [1], []]), (1, 0, [[1], [], []])])
def test_sampled_plan_swaps_a_useless_secondary(budget, reads, secondaries):
    # row 1's secondary on w1 serves nobody; w1's samples read row 0 twice: one row of budget gives w1's slot
    # to row 0 (as the exact plan does)
    g = BipartiteGraph.from_lists([[0, 1], [0, 1], [0, 2], [0, 2]], 3)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1]).with_secondaries([0, 0, 1, 1], [1])
    p = repartition_incremental(g, old, two(), max_moved_rows=budget, options=Options(max_imbalance=1.0, **SAMPLED))
    assert p.sample_worker.tolist() == [0, 0, 1, 1]
    assert [p.secondaries_of(e).tolist() for e in range(3)] == secondaries
    assert batch_remote_reads(g, p, 1) == reads
    assert moved_rows(old, p) == MovedRows(0, budget)


@st.composite
def cases(draw):
    n = draw(st.sampled_from([2, 3, 4, 16, 17, 57]))  # 16: the widest int32 word, 17: int64, 57: the widest
    m_old = draw(st.integers(1, 10))
    m = m_old + draw(st.integers(0, 4))
    rows = draw(st.lists(st.sets(st.integers(0, m - 1), min_size=1, max_size=4), min_size=1, max_size=30))
    prim = draw(st.lists(st.integers(0, n - 1), min_size=m_old, max_size=m_old))
    secs = [sorted(draw(st.sets(st.integers(0, n - 1), max_size=2)) - {prim[e]}) for e in range(m_old)]
    budget = draw(st.integers(0, 12))
    rb = draw(st.sampled_from([None, 0.0, 0.3]))
    bs = draw(st.sampled_from([1, 4, 512]))
    every = draw(st.integers(1, 3))
    order = draw(st.sampled_from(["random", "dataset"]))
    trained = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=m_old, max_size=m_old)))
    return n, m_old, m, [sorted(r) for r in rows], prim, secs, budget, rb, bs, every, order, trained


@settings(max_examples=60, deadline=None)
@given(cases())
def test_sampled_plan_never_exceeds_the_budget(case):
    n, m_old, m, rows, prim, secs, budget, rb, bs, every, order, trained = case
    g = BipartiteGraph.from_lists(rows, m)
    indptr = np.zeros(m_old + 1, dtype=np.int64)
    np.cumsum([len(s) for s in secs], out=indptr[1:])
    old = Placement.edge_cut(n, [0], prim).with_secondaries(indptr, [w for s in secs for w in s])
    topo = resolve_topology(n, None, None)
    opts = Options(plan="sampled", replication_budget=rb, batch_size=bs, sample_every=every, order=order)
    used = np.unique(np.concatenate([np.array(r, dtype=np.int64) for r in rows]))
    created = [] if trained is None else [e for e in used if e < m_old and not trained[e] and not secs[e]]
    placed, p = place_and_repartition(g, old, topo, max_moved_rows=budget, options=opts, trained=trained)
    for q in (placed, p):
        q.check(num_samples=len(rows), num_embeddings=m)
        cap = int(np.ceil(len(rows) / n * 1.05 - 1e-9))
        assert np.bincount(q.sample_worker, minlength=n).max() <= cap
    kept = [e for e in range(m_old) if e not in created]
    assert placed.embedding_primary[kept].tolist() == [prim[e] for e in kept]  # nothing moves in step 4 alone
    assert [placed.secondaries_of(e).tolist() for e in range(m_old)] == secs
    assert reference_moved(old, placed, created) == 0
    assert reference_moved(old, p, created) == moved_rows(old, p, created=created).total <= budget
    alone = repartition_incremental(g, old, topo, max_moved_rows=budget, options=opts, trained=trained)
    assert np.array_equal(alone.sample_worker, p.sample_worker)
    assert np.array_equal(alone.embedding_primary, p.embedding_primary)
    assert np.array_equal(alone.secondary_workers, p.secondary_workers)


def test_same_seed_same_result_and_the_seed_orders_the_sample():
    rng = np.random.default_rng(0)
    rows = [sorted(set(rng.integers(0, 40, size=5).tolist())) for _ in range(400)]
    g = BipartiteGraph.from_lists(rows, 50)
    old = Placement.edge_cut(4, [0], rng.integers(0, 4, size=40))
    topo = resolve_topology(4, None, None)
    opts = Options(plan="sampled", sample_every=2)
    a, b = (repartition_incremental(g, old, topo, max_moved_rows=8, seed=7, options=opts) for _ in range(2))
    assert np.array_equal(a.sample_worker, b.sample_worker) and np.array_equal(a.embedding_primary, b.embedding_primary)
    assert a.info["sampled_samples"] == 200 and a.seed == 7


# --------------------------------------------------------------------------- which plan
def test_the_exact_plan_is_the_default_at_any_size(monkeypatch):
    import gmp.partition.incremental as incremental

    g, old = density_case(False)
    monkeypatch.setattr(incremental, "SMALL_EDGES", g.num_edges - 1)  # a "large" graph
    auto = repartition_incremental(g, old, two(), max_moved_rows=3)
    assert auto.options["plan"] == "exact" and "sweeps" in auto.info
    sampled = repartition_incremental(g, old, two(), max_moved_rows=3, options=Options(plan="sampled"))
    assert sampled.options["plan"] == "sampled" and sampled.info["plan"] == "sampled" and "sweeps" not in sampled.info
    assert sampled.info["sampled_samples"] == 25  # samples 0, 8, ..., 192 of 200


@pytest.mark.parametrize("options, message", [
    (dict(plan="fast"), "plan must be one of exact, sampled"),
    (dict(plan="sampled", rounds=2), "rounds is an option of plan='exact'"),
    (dict(plan="sampled", start="pass"), "start is an option of plan='exact'"),
    (dict(sample_every=0), "sample_every must be an integer >= 1"),
    (dict(sample_every=True), "sample_every must be an integer >= 1"),
])
def test_option_errors(options, message):
    with pytest.raises(PartitionError, match=message):
        Options(**options)


def test_plan_errors():
    g = BipartiteGraph.from_lists([[0, 1]], 2)
    old = Placement.edge_cut(2, [0], [0, 1])
    with pytest.raises(PartitionError, match="takes no start placement"):
        repartition_incremental(g, old, two(), max_moved_rows=1, options=Options(plan="sampled"), start=old)
    wide = Placement.edge_cut(58, [0], [0, 1])
    with pytest.raises(PartitionError, match="plan='sampled' supports up to 57 workers, got 58"):
        repartition_incremental(g, wide, resolve_topology(58, None, None), max_moved_rows=1,
                                options=Options(plan="sampled"))


def test_cli_takes_the_plan(tmp_path):
    from gmp.datasets.format import FieldInfo, write_dataset

    rng = np.random.default_rng(0)
    for d in range(2):
        rows = [sorted(set(rng.integers(0, 60, size=4).tolist())) for _ in range(300)]
        indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        write_dataset(tmp_path / f"day{d}", indptr=indptr, indices=np.concatenate(rows).astype(np.int32),
                      labels=np.zeros(300, dtype=np.float32), dense=None,
                      fields=[FieldInfo("ids", "categorical", 60, 0)], num_embeddings=60,
                      source={"kind": "test"}, test_fraction=0.0)
    runner = CliRunner()
    r = runner.invoke(app, ["partition", str(tmp_path / "day0"), "-m", "hybrid", "-w", "4", "--no-plots",
                            "-o", str(tmp_path / "p0")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["partition", str(tmp_path / "day1"), "--from-manifest", str(tmp_path / "p0"),
                            "--max-moved-rows", "10%", "-O", "plan=sampled", "-O", "sample_every=2", "--no-plots",
                            "-o", str(tmp_path / "p1")])
    assert r.exit_code == 0, r.output
    m = load_manifest(tmp_path / "p1")
    assert m.meta["partitioner"]["options"]["plan"] == "sampled"
    assert m.meta["partitioner"]["options"]["sample_every"] == 2
    comparison = json.loads((tmp_path / "p1" / "report.json").read_text())["incremental"]
    assert comparison["moved_rows"]["total"] <= comparison["max_moved_rows"]
