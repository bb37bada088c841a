"""The one-pass plan of the incremental re-partitioning (gmp.partition._incremental_onepass): hand-computed
graphs, its pass against a plain-Python reference, the migration budget as a property, the plan's options."""

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
from gmp.partition import _onepass_kernels as O
from gmp.partition.incremental import (Options, created_rows, moved_rows, place_and_repartition, place_new_data,
                                       repartition_incremental)
from gmp.placement import Placement
from gmp.topology import resolve_topology

from incremental_cases import density_case, draw_day, old_placement, reference_moved

# alpha = beta = 0 removes the balance terms, batch 1 makes the soft count of the moves the plain count until it
# saturates
ONEPASS = dict(plan="onepass", alpha=0.0, beta=0.0, batch_size=1)


def two():
    return resolve_topology(2, None, None)


# --------------------------------------------------------------------------- the pass
def test_votes_elect_the_majority_and_untrained_ids_are_created():
    # row 0 on w0, row 1 on w1; id 2 old but untrained (placed on w0 yesterday), so it votes:
    # s0 [1,2]: -> w1, 2 votes w1.  s1 [1,2]: w0 2 (row 1, id 2's candidate w1), w1 0 -> w1; votes w1 twice.
    # s2 [0,2]: w0 1 (id 2), w1 1 (row 0) -> tie, w0. id 2: 2 samples on w1, 1 on w0 -> w1, created.
    g = BipartiteGraph.from_lists([[1, 2], [1, 2], [0, 2]], 3)
    old = Placement.edge_cut(2, [0], [0, 1, 0])
    trained = np.array([True, True, False])
    p = place_new_data(g, old, two(), options=Options(max_imbalance=2.0, **ONEPASS), trained=trained)
    assert p.sample_worker.tolist() == [1, 1, 0]
    assert p.embedding_primary.tolist() == [0, 1, 1]
    assert p.info["num_created_rows"] == 1 and created_rows(np.arange(3), old, trained).tolist() == [2]
    assert moved_rows(old, p, created=[2]).total == 0


def test_a_full_lane_keeps_its_count():
    # a worker's count of a row at 65535 stays there (no carry into the next worker's lane)
    table = np.zeros((1, 2), dtype=np.int64)
    table[0, 0] = (1 << O.SHIFT) | 0b11  # primary 1, held by both workers
    table[0, 1] = O.MAX_LANE | (7 << 16)  # worker 0: 65535, worker 1: 7
    g = BipartiteGraph.from_lists([[0]], 1)
    out = np.empty(1, dtype=np.int32)
    O.place_and_count(np.asarray(g.sample_indptr), np.asarray(g.sample_indices), table, np.array([[0.0, 1.0], [1.0, 0.0]]),
                      0.0, np.zeros(2, dtype=np.int64), np.int64(1), out)
    assert out.tolist() == [0] and int(table[0, 1]) == O.MAX_LANE | (7 << 16)


def _reference_place(rows, words, n, cost, alpha, cap):
    """The pass the plain way (the rule of gmp.partition._onepass_kernels.place_and_count, written from its
    docstring): returns the workers, the words after the votes and the counts per (row, worker)."""
    word = [int(v) for v in words]
    count = [[0] * n for _ in word]
    load = [0] * n
    out = []
    for r in rows:
        delta = [alpha * load[w] for w in range(n)]
        for x in r:
            v = word[x]
            if v >= 0:
                holders = {w for w in range(n) if v >> w & 1}
                p = v >> O.SHIFT
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
            count[x][best] += 1
            if word[x] < 0:
                u = -word[x] - 1
                cand, votes = u & 63, u >> 6
                cand, votes = (best, 1) if votes == 0 else (cand, votes + 1) if cand == best else (cand, votes - 1)
                word[x] = -((votes << 6 | cand) + 1)
    return out, word, count


@pytest.mark.parametrize("seed, n", [(0, 4), (1, 5), (2, 20), (3, 57)])
def test_pass_against_a_python_reference(seed, n):
    # random rows with secondaries, rows every worker holds, rows without a primary, a non-uniform cost and a
    # tight cap; worker counts that fill one and several lanes
    rng = np.random.default_rng(seed)
    num_rows, num_samples = 40, 120
    rows = [sorted(set(rng.integers(0, num_rows, size=int(rng.integers(1, 7))).tolist())) for _ in range(num_samples)]
    table = np.zeros((num_rows, 1 + (n + 3) // 4), dtype=np.int64)
    for x in range(num_rows):
        kind = rng.random()
        if kind < 0.25:
            table[x, 0] = O.UNSEEN
        else:
            p = int(rng.integers(0, n))
            holders = (1 << n) - 1 if kind > 0.9 else int(rng.integers(0, 1 << n)) | (1 << p)
            table[x, 0] = (p << O.SHIFT) | holders
    cost = rng.uniform(0.5, 2.0, size=(n, n))
    np.fill_diagonal(cost, 0.0)
    cap = -(-num_samples // n) + 2
    g = BipartiteGraph.from_lists(rows, num_rows)
    want_out, want_word, want_count = _reference_place(rows, table[:, 0], n, cost.tolist(), 0.03, cap)
    out = np.empty(num_samples, dtype=np.int32)
    O.place_and_count(np.asarray(g.sample_indptr), np.asarray(g.sample_indices), table, cost, 0.03,
                      np.zeros(n, dtype=np.int64), np.int64(cap), out)
    assert out.tolist() == want_out
    assert table[:, 0].tolist() == want_word
    bits = np.zeros(1, dtype=np.int64)
    O.mark_read_rows(table, bits)
    read = np.flatnonzero([(int(bits[0]) >> x) & 1 for x in range(num_rows)])
    assert read.tolist() == sorted({x for r in rows for x in r})
    prim, sec, count = np.empty(read.size, np.int32), np.empty(read.size, np.int64), np.empty((read.size, n), np.int32)
    O.unpack(table, read, prim, sec, count)
    assert count.tolist() == [want_count[x] for x in read]
    assert np.bincount(out, minlength=n).max() <= cap


def test_words_hold_the_old_placement():
    # row 0: primary 0, secondary on 1 (holders {0, 1}); rows 1, 2 no secondary; row 3 untrained, no secondary;
    # id 4 new
    old = Placement.edge_cut(3, [0], [0, 2, 1, 1]).with_secondaries([0, 1, 1, 1, 1], [1])
    table = np.zeros((5, 2), dtype=np.int64)
    keep = np.array([True, True, True, False])
    O.fill_words(np.asarray(old.embedding_primary), np.asarray(old.secondary_indptr),
                 np.asarray(old.secondary_workers), keep, True, table)
    s = O.SHIFT
    assert table[:, 0].tolist() == [(0 << s) | 0b011, (2 << s) | 0b100, (1 << s) | 0b010, O.UNSEEN, O.UNSEEN]


# --------------------------------------------------------------------------- the whole plan (and the hand-computed
# placements and budgets of tests/test_incremental.py, run for both plans)
@st.composite
def cases(draw):
    n, m_old, m, rows, prim, secs, trained = draw_day(draw, [2, 3, 4, 5, 8, 57])  # 4: one count column, 5: two
    budget = draw(st.integers(0, 12))
    rb = draw(st.sampled_from([None, 0.0, 0.3]))
    bs = draw(st.sampled_from([1, 4, 512]))
    return n, m_old, m, rows, prim, secs, budget, rb, bs, trained


@settings(max_examples=60, deadline=None)
@given(cases())
def test_onepass_plan_never_exceeds_the_budget(case):
    n, m_old, m, rows, prim, secs, budget, rb, bs, trained = case
    g = BipartiteGraph.from_lists(rows, m)
    old = old_placement(n, prim, secs)
    topo = resolve_topology(n, None, None)
    opts = Options(plan="onepass", replication_budget=rb, batch_size=bs)
    used = np.unique(np.concatenate([np.array(r, dtype=np.int64) for r in rows]))
    created = [] if trained is None else [e for e in used if e < m_old and not trained[e] and not secs[e]]
    placed, p = place_and_repartition(g, old, topo, max_moved_rows=budget, options=opts, trained=trained)
    for q in (placed, p):
        q.check(num_samples=len(rows), num_embeddings=m)
        cap = int(np.ceil(len(rows) / n * 1.05 - 1e-9))
        assert np.bincount(q.sample_worker, minlength=n).max() <= cap
    kept = [e for e in range(m_old) if e not in created]
    assert placed.embedding_primary[kept].tolist() == [prim[e] for e in kept]  # nothing moves in the pass alone
    assert np.array_equal(placed.sample_worker, p.sample_worker)  # the moves leave the samples where they are
    assert [placed.secondaries_of(e).tolist() for e in range(m_old)] == secs
    assert reference_moved(old, placed, created) == 0
    assert reference_moved(old, p, created) == moved_rows(old, p, created=created).total <= budget
    alone = repartition_incremental(g, old, topo, max_moved_rows=budget, options=opts, trained=trained)
    assert np.array_equal(alone.sample_worker, p.sample_worker)
    assert np.array_equal(alone.embedding_primary, p.embedding_primary)
    assert np.array_equal(alone.secondary_workers, p.secondary_workers)


# --------------------------------------------------------------------------- which plan
def test_the_exact_plan_is_the_default_at_any_size(monkeypatch):
    import gmp.partition.incremental as incremental

    g, old = density_case(False)
    monkeypatch.setattr(incremental, "SMALL_EDGES", g.num_edges - 1)  # a "large" graph
    auto = repartition_incremental(g, old, two(), max_moved_rows=3)
    assert auto.options["plan"] == "exact" and "sweeps" in auto.info
    one = repartition_incremental(g, old, two(), max_moved_rows=3, options=Options(plan="onepass"))
    assert one.options["plan"] == "onepass" and one.info["plan"] == "onepass" and "sweeps" not in one.info


@pytest.mark.parametrize("options, message", [
    (dict(plan="fast"), "plan must be one of exact, onepass"),
    (dict(plan="onepass", rounds=2), "rounds is an option of the exact plan, not of plan='onepass'"),
    (dict(plan="onepass", start="pass"), "start is an option of the exact plan"),
])
def test_option_errors(options, message):
    with pytest.raises(PartitionError, match=message):
        Options(**options)


def test_plan_errors():
    g = BipartiteGraph.from_lists([[0, 1]], 2)
    old = Placement.edge_cut(2, [0], [0, 1])
    with pytest.raises(PartitionError, match="takes no start placement"):
        repartition_incremental(g, old, two(), max_moved_rows=1, options=Options(plan="onepass"), start=old)
    wide = Placement.edge_cut(58, [0], [0, 1])
    with pytest.raises(PartitionError, match="plan='onepass' supports up to 57 workers, got 58"):
        repartition_incremental(g, wide, resolve_topology(58, None, None), max_moved_rows=1,
                                options=Options(plan="onepass"))


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    """Two days of 300 samples over 60 ids and day 0's hybrid placement on 4 workers: ``(day0, day1, p0)``."""
    from gmp.datasets.format import FieldInfo, write_dataset

    root = tmp_path_factory.mktemp("days")
    rng = np.random.default_rng(0)
    for d in range(2):
        rows = [sorted(set(rng.integers(0, 60, size=4).tolist())) for _ in range(300)]
        indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        write_dataset(root / f"day{d}", indptr=indptr, indices=np.concatenate(rows).astype(np.int32),
                      labels=np.zeros(300, dtype=np.float32), dense=None,
                      fields=[FieldInfo("ids", "categorical", 60, 0)], num_embeddings=60,
                      source={"kind": "test"}, test_fraction=0.0)
    r = CliRunner().invoke(app, ["partition", str(root / "day0"), "-m", "hybrid", "-w", "4", "--no-plots",
                                 "-o", str(root / "p0")])
    assert r.exit_code == 0, r.output
    return root / "day0", root / "day1", root / "p0"


def test_cli_takes_the_plan(days, tmp_path):
    _, day1, p0 = days
    r = CliRunner().invoke(app, ["partition", str(day1), "--from-manifest", str(p0),
                                 "--max-moved-rows", "10%", "-O", "plan=onepass", "--no-plots",
                                 "-o", str(tmp_path / "p1")])
    assert r.exit_code == 0, r.output
    m = load_manifest(tmp_path / "p1")
    assert m.meta["partitioner"]["options"]["plan"] == "onepass"
    comparison = json.loads((tmp_path / "p1" / "report.json").read_text())["incremental"]
    assert comparison["moved_rows"]["total"] <= comparison["max_moved_rows"]


#: a value of each option the one-pass plan never reads (gmp.specs.ONEPASS_UNREAD)
ONEPASS_UNREAD = {"order": "dataset", "start": "pass", "sweep": "all", "rounds": 2, "sweep_first": True}


@pytest.mark.parametrize("budget", [None, "10%"])
@pytest.mark.parametrize("key", sorted(ONEPASS_UNREAD))
def test_options_the_onepass_plan_never_reads_are_refused(days, tmp_path, key, budget):
    """``-O order=dataset`` with ``-O plan=onepass`` was taken and recorded in the manifest, yet the one pass is
    always in dataset order; it is refused (as the exact plan's start, sweep and rounds now are, before the data
    is read) in one message naming the option and the plan, by the Python verb and the command alike."""
    from gmp.api import repartition_dataset
    from gmp.specs import ONEPASS_UNREAD as unread

    assert set(unread) == set(ONEPASS_UNREAD)
    _, day1, p0 = days
    said = rf"^the incremental option '{key}' is not read by plan 'onepass', .*: drop it or use plan 'exact'\.$"
    with pytest.raises(PartitionError, match=said):
        repartition_dataset(day1, p0, tmp_path / "api", max_moved_rows=budget,
                            options={"plan": "onepass", key: ONEPASS_UNREAD[key]})
    value = str(ONEPASS_UNREAD[key]).lower()
    args = ["partition", str(day1), "--from-manifest", str(p0), "-O", "plan=onepass", "-O", f"{key}={value}",
            "--no-plots", "-o", str(tmp_path / "cli")] + ([] if budget is None else ["--max-moved-rows", budget])
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and not (tmp_path / "api").exists() and not (tmp_path / "cli").exists()
    assert r.stderr.strip() == (f"error: the incremental option '{key}' is not read by plan 'onepass', which places "
                                f"each sample once, in dataset order, and does not sweep the samples after: drop it "
                                f"or use plan 'exact'.")


def test_several_unread_options_are_named_together_and_the_exact_plan_takes_them(days, tmp_path):
    from gmp.specs import resolve_partition

    _, day1, p0 = days
    with pytest.raises(PartitionError, match=r"^the incremental options 'order' and 'rounds' are not read by plan "
                                             r"'onepass', .*: drop them or use plan 'exact'\.$"):
        resolve_partition(day1, from_manifest=p0, max_moved_rows=5, environ={},
                          options={"plan": "onepass", "rounds": 2, "order": "random"})
    resolve_partition(day1, from_manifest=p0, max_moved_rows=5, environ={},
                      options={"plan": "exact", "order": "dataset", "rounds": 2})
    # carry_private is read with the one-pass plan: target mode's re-fit runs the exact plan's rounds
    resolve_partition(day1, from_manifest=p0, max_moved_rows=5, environ={},
                      options={"plan": "onepass", "carry_private": False, "target": "full"})
    # ... and only there: without the target, or without a budget (no re-partition), nothing reads it
    said = r"^the incremental option 'carry_private' is read by plan 'onepass' only in target mode's re-fit"
    for budget, target in [(5, None), (5, "none"), (None, None)]:
        options = {"plan": "onepass", "carry_private": False} | ({} if target is None else {"target": target})
        with pytest.raises(PartitionError, match=said):
            resolve_partition(day1, from_manifest=p0, max_moved_rows=budget, environ={}, options=options)


@pytest.mark.parametrize("target", ["none", "full"])
def test_the_onepass_plan_reads_no_order(target):
    """The guard of the refusal above: the one-pass plan's placements are the same whatever ``order`` (should the
    plan start reading it, this fails and gmp.specs.ONEPASS_UNREAD must lose it)."""
    from gmp.partition.incremental import EXACT_ONLY
    from gmp.specs import ONEPASS_UNREAD as unread

    assert set(EXACT_ONLY) | {"order"} == set(unread)  # the rest are refused by Options itself
    g, old = density_case(False)
    made = [place_and_repartition(g, old, two(), max_moved_rows=3, seed=1,
                                  options=Options(plan="onepass", order=order, target=target))
            for order in ("random", "dataset")]
    (placed_a, moved_a), (placed_b, moved_b) = made
    for a, b in ((placed_a, placed_b), (moved_a, moved_b)):
        for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
