"""Target mode of the incremental re-partition (``Options.target="full"``, the exact plan's default): the plan's
own moves stepped through a budget ladder, the ordered moves toward the relabelled full re-partition and the
full re-partition itself, the one that reads least kept; ``--compare-full``'s curve and ``--window``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.main import app
from gmp.graph import BipartiteGraph
from gmp.manifest import load_manifest
from gmp.metrics import batch_remote_reads
from gmp.partition import _incremental_kernels as K
from gmp.kernels.threads import concurrent_launches_safe
from gmp.partition import run_partitioner
from gmp.partition._common import sample_cap
from gmp.partition.incremental import (Options, budget_ladder, in_background, match_workers, place_and_repartition,
                                       place_new_data, renames_workers, repartition_incremental, runs_alongside)
from gmp.placement import Placement
from gmp.topology import Topology, hierarchical, resolve_topology

sys.path.insert(0, str(Path(__file__).parent))
from incremental_cases import day_to_day_cli, draw_day, old_placement, reference_moved  # noqa: E402

runner = CliRunner()


def two():
    return resolve_topology(2, None, None)


# --------------------------------------------------------------------------- known answers
# yesterday rows {0,1} were together on w0 and {2,3} on w1; today samples pair 0 with 2 and 1 with 3. Single-row
# moves stop at 2 reads whatever the budget (tests/test_incremental.py); the target (pairs {0,2} on w0 and
# {1,3} on w1, samples 0-1 on w0 and 2-3 on w1) needs rows 1 and 2 moved: with one of them 2 reads, with both 0.
PAIRS = [[0, 2], [0, 2], [1, 3], [1, 3]]


def _pairs():
    g = BipartiteGraph.from_lists(PAIRS, 4)
    old = Placement.edge_cut(2, [0, 0, 1, 1], [0, 0, 1, 1])
    goal = Placement.edge_cut(2, [1, 1, 0, 0], [1, 0, 1, 0])  # the target, its workers named the other way
    return g, old, goal


# budget 1 is below the ladder's first step here (50% of 4 rows): the sweep's candidate is the placed data
@pytest.mark.parametrize("budget, reads, kept", [(0, 4, "sweep"), (1, 2, "target"), (2, 0, "target"), (9, 0, "target")])
def test_target_mode_passes_the_single_move_plateau(budget, reads, kept):
    g, old, goal = _pairs()
    opts = Options(max_imbalance=1.5, alpha=0.0, beta=0.0, batch_size=1, order="dataset")
    p = place_and_repartition(g, old, two(), max_moved_rows=budget, options=opts, goal=goal)[1]
    p.check(num_samples=4, num_embeddings=4)
    assert batch_remote_reads(g, p, 1) == reads
    assert reference_moved(old, p) == p.info["moved_rows"]["total"] <= budget
    assert p.info["kept"] == kept and p.options["target"] == "full"
    # the target renamed to the old workers: rows 0 and 3 stay, 1 and 2 move (its own names would move all four)
    assert p.info["candidates"]["full"] == {"batch_remote_reads": 0, "rows": 2, "fits": budget >= 2}
    # the same call with target none stops on the plateau
    none = place_and_repartition(g, old, two(), max_moved_rows=budget, options=Options(
        max_imbalance=1.5, alpha=0.0, beta=0.0, batch_size=1, order="dataset", target="none", rounds=3))[1]
    assert batch_remote_reads(g, none, 1) == min(4, 2 if budget else 4)


# the same target rows with two samples on the wrong worker: the target reads 4, its rows with the samples re-fitted 0
# (at 1 row the single moves stop at the placed data, and the target's moves gain nothing under its samples)
@pytest.mark.parametrize("budget, reads, kept", [(1, 4, "sweep"), (2, 0, "refit"), (9, 0, "refit")])
def test_the_refitted_target_is_kept_where_it_reads_less(budget, reads, kept):
    g, old, _ = _pairs()
    goal = Placement.edge_cut(2, [1, 0, 1, 0], [1, 0, 1, 0])
    opts = Options(max_imbalance=1.5, alpha=0.0, beta=0.0, batch_size=1, order="dataset")
    p = place_and_repartition(g, old, two(), max_moved_rows=budget, options=opts, goal=goal)[1]
    p.check(num_samples=4, num_embeddings=4)
    assert batch_remote_reads(g, p, 1) == reads and p.info["kept"] == kept
    assert reference_moved(old, p) == p.info["moved_rows"]["total"] <= budget
    full, refit = p.info["candidates"]["full"], p.info["candidates"]["refit"]
    assert full == {"batch_remote_reads": 4, "rows": 2, "fits": budget >= 2}
    # computed only where the target fits; then within the target's rows
    assert refit == ({"batch_remote_reads": 0, "rows": 2, "prefix_percent": None, "fits": True} if budget >= 2 else
                     {"batch_remote_reads": None, "rows": None, "prefix_percent": None, "fits": False})
    assert p.options["target"] == "full" and p.info["seconds_steps"]["target_refit"] >= 0.0
    q = place_and_repartition(g, old, two(), max_moved_rows=budget, options=opts, goal=goal)[1]  # deterministic
    assert np.array_equal(p.sample_worker, q.sample_worker) and np.array_equal(p.embedding_primary,
                                                                               q.embedding_primary)


def test_a_prefix_refit_is_a_candidate_from_its_ladder_step(tmp_path, monkeypatch):
    # a tiny synthetic day 1 on hybrid's day 0 (2 workers): at 20% of the used rows the chain and the ordered
    # moves' prefix read more than that prefix re-fitted; the re-fit of the whole list needs more rows. The
    # shipped step is 50% (on days this small the whole list fits in it): the test takes 20%
    from gmp.datasets.format import load_dataset
    from gmp.graph import build_graph
    from gmp.partition import incremental as I

    d0, d1, p0 = (str(tmp_path / x) for x in ("s0", "s1", "p0"))
    for args in (["data", "synth", "--preset", "tiny", "-n", "2000", "--scale", "0.05", "--seed", "0", "-o", d0],
                 ["data", "synth", "--continue", d0, "-o", d1],
                 ["partition", d0, "-m", "hybrid", "-w", "2", "-o", p0, "--no-plots"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
    g, old = build_graph(load_dataset(d1)), load_manifest(p0)
    goal = run_partitioner("hybrid", g, old.topology, seed=0, options={"batch_size": 512})
    monkeypatch.setattr(I, "PREFIX_REFIT_PERCENT", (20,))
    used = int(np.count_nonzero(g.embedding_degree()))
    step = dict(budget_ladder(used))[20]

    def call(budget):
        return place_and_repartition(g, old.placement, old.topology, max_moved_rows=budget, goal=goal,
                                     trained=old.history.trained, options=Options(alongside=False))[1]

    p = call(step)
    assert p.info["kept"] == "refit" and p.info["moved_rows"]["total"] <= step
    assert batch_remote_reads(g, p, 512) == p.info["candidates"]["refit"]["batch_remote_reads"]
    assert p.info["candidates"]["refit"]["prefix_percent"] == 20
    assert not call(step - 1).info["candidates"]["refit"]["fits"]  # a candidate from its step on, not before
    monkeypatch.setattr(I, "PREFIX_REFIT_PERCENT", ())
    without = call(step)
    assert without.info["kept"] != "refit" and batch_remote_reads(g, without, 512) > batch_remote_reads(g, p, 512)


def test_the_chain_starts_with_a_step_that_moves_no_row():
    # 3 workers, groups {0,1,2}, {3,4,5}, {6,7,8} on w0, w1, w2; row 9 (on w0, read on w0 only) has copies on w1
    # and w2 that nobody there reads; id 10 is new and every sample reads it. The pass puts the samples on
    # [0, 1, 0, 1, 2, 2] and id 10 on w0: 10 reads at batch 1 (s1 and s2 read 3 rows of the other group's
    # worker, the four samples off w0 read id 10). With no row to move, the chain's first step swaps row 9's
    # two copies for id 10's (both free): 6 reads. Budget 0 keeps at most that (before: the placed data).
    rows = [[0, 1, 2, 9, 10], [0, 1, 2, 10], [3, 4, 5, 10], [3, 4, 5, 10], [6, 7, 8, 10], [6, 7, 8, 10]]
    g = BipartiteGraph.from_lists(rows, 11)
    old = Placement.edge_cut(3, [0, 0, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1, 2, 2, 2, 0]).with_secondaries(
        [0] * 9 + [0, 2], [1, 2])
    placed, p = place_and_repartition(g, old, resolve_topology(3, None, None), max_moved_rows=0,
                                      options=Options(batch_size=1))
    assert placed.sample_worker.tolist() == [0, 1, 0, 1, 2, 2] and batch_remote_reads(g, placed, 1) == 10
    assert p.info["steps"][:2] == [{"budget": 0, "batch_remote_reads": 10, "rows": 0},
                                   {"budget": 0, "batch_remote_reads": 6, "rows": 0}]
    assert batch_remote_reads(g, p, 1) <= 6 and p.info["moved_rows"]["total"] == 0


def test_budget_ladder_and_curve_are_the_same_choice():
    assert budget_ladder(1000) == [(0.5, 5), (1, 10), (2, 20), (5, 50), (10, 100), (20, 200), (50, 500),
                                   (100, 1000)]
    assert budget_ladder(4) == [(50, 2), (100, 4)]
    assert budget_ladder(0) == []
    g, old, goal = _pairs()
    opts = Options(max_imbalance=1.5, alpha=0.0, beta=0.0, batch_size=1, order="dataset")
    p = place_and_repartition(g, old, two(), max_moved_rows=1, options=opts, goal=goal, curve=True)[1]
    assert [(c["budget"], c["batch_remote_reads"], c["rows"]) for c in p.info["curve"]] == [(1, 2, 1), (2, 0, 2),
                                                                                           (4, 0, 2)]
    assert [c["percent"] for c in p.info["curve"]] == [None, 50, 100]
    # the cost of each step: the chain ran its free step and the ladder's two (50%, 100%: the curve runs it to
    # the end); the goal was given, so no full re-partition ran here
    cost = p.info["seconds_steps"]
    assert p.info["sweep_steps"] == 3 and cost["target_full_repartition"] == 0.0
    assert min(cost["place"], cost["sweep_chain"], cost["target_moves"]) >= 0.0
    assert place_and_repartition(g, old, two(), max_moved_rows=2, options=opts, goal=goal)[1].info[
        "sweep_steps"] == 2  # without the curve the chain stops at the budget's step (after its free one)


def _placements_equal(p, q):
    return all(np.array_equal(getattr(p, k), getattr(q, k)) for k in
               ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"))


def test_the_full_repartition_beside_the_sweep_changes_nothing_but_the_time():
    # a random day on a random old placement: the target's hybrid run on a thread of its own (alongside), after the
    # chain's own work (not), or the caller's run handed over as a future, all give the same placement and choice
    rng = np.random.default_rng(7)
    g = BipartiteGraph.from_lists([sorted(set(rng.integers(0, 300, size=8).tolist())) for _ in range(2000)], 300)
    topo = resolve_topology(4, None, None)
    old = _random_goal(rng, 4, 2000, 300)
    runs = {}
    for name, alongside in (("after", False), ("alongside", True)):
        runs[name] = place_and_repartition(g, old, topo, max_moved_rows=30,
                                           options=Options(batch_size=64, alongside=alongside))[1]
    goal = in_background(lambda: run_partitioner("hybrid", g, topo, seed=0, options={"batch_size": 64,
                                                                                     "max_imbalance": 1.05}))
    runs["future"] = place_and_repartition(g, old, topo, max_moved_rows=30, options=Options(batch_size=64),
                                           goal=goal)[1]
    after = runs["after"]
    for name, p in runs.items():
        assert _placements_equal(p, after), name
        assert (p.info["kept"], p.info["candidates"]) == (after.info["kept"], after.info["candidates"])
        assert p.info["target_alongside"] == (name != "after")
        assert p.info["target_given"] is False  # a future is the caller's run, not a finished placement
        assert p.info["seconds_steps"]["wait_for_target"] >= 0.0
    assert runs["future"].info["seconds_steps"]["target_full_repartition"] == 0.0  # timed by the caller
    assert after.info["seconds_steps"]["target_full_repartition"] > 0.0

    def fails():
        raise RuntimeError("the target's run failed")

    with pytest.raises(RuntimeError, match="the target's run failed"):  # handed to the caller, not lost
        place_and_repartition(g, old, topo, max_moved_rows=30, options=Options(batch_size=64),
                              goal=in_background(fails))


def test_alongside_option(monkeypatch):
    from gmp.partition import incremental

    with pytest.raises(Exception, match="alongside must be true or false"):
        Options(alongside="yes")
    g = BipartiteGraph.from_lists([[0, 1], [1, 2]], 3)  # 4 edges
    assert runs_alongside(Options(alongside=False), g) is False and runs_alongside(Options(alongside=True), g)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    assert runs_alongside(Options(), g) is (cores > 1 and concurrent_launches_safe())
    # the default declines where half the memory available does not hold what the two at once add
    need = incremental.ALONGSIDE_BYTES_PER_EDGE * 4
    monkeypatch.setattr(incremental, "available_memory", lambda: 2 * need - 2)
    assert runs_alongside(Options(), g) is False and runs_alongside(Options(alongside=True), g) is True
    monkeypatch.setattr(incremental, "available_memory", lambda: 2 * need)
    assert runs_alongside(Options(), g) is (cores > 1 and concurrent_launches_safe())


def test_progress_bars_are_drawn_from_the_main_thread_only(monkeypatch):
    import threading

    import rich.progress

    from gmp import progress

    drawn = []
    init = rich.progress.Progress.__init__

    def counting(self, *a, **k):
        drawn.append(threading.current_thread().name)
        init(self, *a, **k)

    monkeypatch.setattr(rich.progress.Progress, "__init__", counting)
    monkeypatch.setattr(progress, "_enabled", True)

    def beside():
        with progress.task("beside", total=1) as advance:
            advance(1)

    thread = threading.Thread(target=beside, name="beside")
    with progress.task("main", total=1) as advance:
        thread.start()
        thread.join()
        advance(1)
    assert drawn == [threading.main_thread().name]


def _steps_until_stopped(steps: list, started, limit: int = 1000):
    """A stand-in for a long re-partition: ``limit`` progress steps of 10 ms, counted in ``steps``."""
    import time

    from gmp import progress

    started.set()
    with progress.task("long", total=limit) as advance:
        for _ in range(limit):
            time.sleep(0.01)
            steps.append(1)
            advance(1)
    return "finished"


def test_a_background_run_stops_at_its_next_progress_step():
    import threading
    from concurrent.futures import wait

    from gmp.progress import Stopped, stop_point

    steps, started = [], threading.Event()
    future = in_background(lambda: _steps_until_stopped(steps, started))
    assert started.wait(10)
    future.stop()
    done, _ = wait([future], timeout=5)  # without the stop it runs 10 s
    assert done and isinstance(future.exception(), Stopped) and len(steps) < 1000
    finished = in_background(lambda: _steps_until_stopped([], threading.Event(), limit=3))
    assert finished.result(timeout=5) == "finished"  # not asked: runs to its end
    stop_point()()  # the main thread is never stoppable: a no-op


def _long_runs_recorded(monkeypatch) -> tuple[list, list]:
    """``in_background`` records the futures it returns, and the full re-partition is a long run of progress
    steps (:func:`_steps_until_stopped`): ``(futures, steps)``."""
    import threading

    from gmp.partition import incremental

    futures, steps = [], []

    def kept(fn, name="gmp-target"):
        futures.append(in_background(fn, name))
        return futures[-1]

    monkeypatch.setattr(incremental, "in_background", kept)
    monkeypatch.setattr("gmp.partition.run_partitioner",
                        lambda *a, **k: _steps_until_stopped(steps, threading.Event()))
    return futures, steps


def _fails(message: str):
    def fail(*a, **k):
        raise RuntimeError(message)
    return fail


def _assert_the_one_run_stopped(futures: list, steps: list) -> None:
    from concurrent.futures import wait

    from gmp.progress import Stopped

    done, _ = wait(futures, timeout=5)  # without the stop a run takes 10 s
    assert len(futures) == 1 and done and isinstance(futures[0].exception(), Stopped) and len(steps) < 1000


def test_target_mode_stops_its_full_repartition_when_the_chain_fails(monkeypatch):
    import threading

    from gmp.partition import incremental
    from gmp.progress import Stopped

    g, old, _ = _pairs()
    futures, steps = _long_runs_recorded(monkeypatch)
    monkeypatch.setattr(incremental, "_refine", _fails("the chain failed"))
    with pytest.raises(RuntimeError, match="the chain failed"):
        place_and_repartition(g, old, two(), max_moved_rows=1, options=Options(batch_size=2, alongside=True))
    _assert_the_one_run_stopped(futures, steps)

    # a caller's future is the caller's to stop
    caller = in_background(lambda: _steps_until_stopped(steps, threading.Event()))
    with pytest.raises(RuntimeError, match="the chain failed"):
        place_and_repartition(g, old, two(), max_moved_rows=1, options=Options(batch_size=2), goal=caller)
    assert not caller.done()
    caller.stop()
    assert isinstance(caller.exception(timeout=5), Stopped)


def test_the_command_stops_the_full_repartition_it_started_when_the_call_fails(tmp_path, monkeypatch):
    from gmp.partition import incremental

    d0, d1, p0 = (str(tmp_path / x) for x in ("s0", "s1", "p0"))
    for args in (["data", "synth", "--preset", "tiny", "-n", "600", "--scale", "0.05", "-o", d0],
                 ["data", "synth", "--continue", d0, "-o", d1],
                 ["partition", d0, "-m", "hybrid", "-w", "2", "-o", p0, "--no-plots"]):
        assert runner.invoke(app, args).exit_code == 0
    futures, steps = _long_runs_recorded(monkeypatch)
    monkeypatch.setattr(incremental, "runs_alongside", lambda *a: True)
    monkeypatch.setattr(incremental, "place_and_repartition", _fails("the call failed"))
    res = runner.invoke(app, ["partition", d1, "--from-manifest", p0, "--max-moved-rows", "5%",
                              "-o", str(tmp_path / "p1"), "--no-plots"])
    assert res.exit_code != 0 and "the call failed" in str(res.exception)
    _assert_the_one_run_stopped(futures, steps)


def test_target_none_and_the_start_placement():
    g, old, goal = _pairs()
    with pytest.raises(Exception, match="target must be one of full, none"):
        Options(target="half")
    placed = place_new_data(g, old, two())
    with pytest.raises(Exception, match="target='full' .* takes no start placement"):
        repartition_incremental(g, old, two(), max_moved_rows=1, start=placed, options=Options(target="full"))
    # the one-pass plan keeps its time target: no target step unless asked
    p = place_and_repartition(g, old, two(), max_moved_rows=2, options=Options(plan="onepass"))[1]
    assert p.options["target"] == "none" and "kept" not in p.info
    q = place_and_repartition(g, old, two(), max_moved_rows=2, options=Options(plan="onepass", target="full",
                                                                                 batch_size=1), goal=goal)[1]
    assert q.options["target"] == "full" and batch_remote_reads(g, q, 1) == 0


# --------------------------------------------------------------------------- the property
def _random_goal(rng, n, num_samples, m):
    """Any placement of the day (the property holds for every target, not only a good one)."""
    prim = rng.integers(0, n, size=m)
    secs = [sorted(set(rng.integers(0, n, size=int(rng.integers(0, 3))).tolist()) - {int(prim[e])})
            for e in range(m)]
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum([len(s) for s in secs], out=indptr[1:])
    return Placement.edge_cut(n, rng.integers(0, n, size=num_samples), prim).with_secondaries(
        indptr, [w for s in secs for w in s])


@st.composite
def days(draw):
    n, m_old, m, rows, prim, secs, trained = draw_day(draw, [2, 3, 4])
    budgets = sorted(draw(st.lists(st.integers(0, 14), min_size=2, max_size=4, unique=True)))
    bs = draw(st.sampled_from([1, 2, 512]))
    plan = draw(st.sampled_from(["exact", "onepass"]))
    return n, m_old, m, rows, prim, secs, trained, budgets, bs, plan, draw(st.integers(0, 2**16))


@settings(max_examples=40, deadline=None)
@given(days())
def test_budget_holds_reads_never_rise_and_unbounded_is_never_worse_than_the_target(case):
    n, m_old, m, rows, prim, secs, trained, budgets, bs, plan, seed = case
    g = BipartiteGraph.from_lists(rows, m)
    old = old_placement(n, prim, secs)
    topo = resolve_topology(n, None, None)
    goal = _random_goal(np.random.default_rng(seed), n, len(rows), m)
    opts = Options(batch_size=bs, plan=plan, target="full")
    used = np.unique(np.concatenate([np.array(r) for r in rows]))
    created = [] if trained is None else [e for e in used if e < m_old and not trained[e] and not secs[e]]
    placed = place_new_data(g, old, topo, options=Options(batch_size=bs, plan=plan), trained=trained)
    last = batch_remote_reads(g, placed, bs)
    for budget in budgets + [10**6]:
        p = place_and_repartition(g, old, topo, max_moved_rows=budget, options=opts, trained=trained, goal=goal)[1]
        p.check(num_samples=len(rows), num_embeddings=m)
        assert reference_moved(old, p, created) == p.info["moved_rows"]["total"] <= budget
        reads = batch_remote_reads(g, p, bs)
        assert reads == p.info["candidates"][p.info["kept"]]["batch_remote_reads"]  # the kernels count as metrics
        assert reads <= last  # never more than a smaller budget (and the placed data: budget 0's start)
        last = reads
    # unbounded: at most the target renamed to the old workers, and at most the target re-fitted, which moves
    # at most the target's rows
    assert last <= batch_remote_reads(g, match_workers(old, goal, topology=topo, rows=used), bs)
    full, refit = p.info["candidates"]["full"], p.info["candidates"]["refit"]
    assert full["fits"] and refit["rows"] <= full["rows"] and last <= refit["batch_remote_reads"]


def test_batch_kernels_count_as_the_metrics():
    rng = np.random.default_rng(4)
    rows = [sorted(set(rng.integers(0, 40, size=5).tolist())) for _ in range(300)]
    g = BipartiteGraph.from_lists(rows, 40)
    p = _random_goal(rng, 4, 300, 40)
    everywhere = {3, 17, 29}  # rows every worker holds: the kernels may skip their entries
    secs = [sorted(set(range(4)) - {int(p.embedding_primary[e])}) if e in everywhere
            else p.secondaries_of(e).tolist() for e in range(40)]
    indptr = np.zeros(41, dtype=np.int64)
    np.cumsum([len(x) for x in secs], out=indptr[1:])
    p = Placement.edge_cut(4, p.sample_worker, p.embedding_primary).with_secondaries(
        indptr, [w for x in secs for w in x])
    sec = np.zeros(40, dtype=np.int64)
    for e in range(40):
        for w in p.secondaries_of(e):
            sec[e] |= 1 << int(w)
    prim = np.asarray(p.embedding_primary, dtype=np.int32)
    sw = np.asarray(p.sample_worker, dtype=np.int32)
    none = np.zeros(0, dtype=np.int64)
    for bs in (1, 7, 512):
        want = batch_remote_reads(g, p, bs)
        ip, ix = np.asarray(g.sample_indptr), np.asarray(g.sample_indices).astype(np.int32)
        assert K.batch_reads(ip, ix, none, none, sw, prim, sec, np.int64(bs), 4) == want
        for skip in (np.zeros(40, dtype=bool), np.isin(np.arange(40), list(everywhere))):
            nb = np.zeros((40, 4), dtype=np.int32)
            K.row_batches(ip, ix, sw, np.int64(bs), nb, skip)
            assert not nb[skip].any()
            by_row = np.zeros((40, 4), dtype=np.int32)  # the same from each row's samples
            K.row_batches_by_row(np.asarray(g.emb_indptr), np.asarray(g.emb_indices), sw, np.int64(bs), by_row, skip)
            assert np.array_equal(by_row, nb)
            parallel = np.zeros((40, 4), dtype=np.int32)  # the same with the workers counted in parallel
            K.row_batches_parallel(ip, ix, sw, np.int64(bs), parallel, skip)
            assert np.array_equal(parallel, nb)
            per_row = np.empty(40, dtype=np.int64)
            K.row_reads(nb, prim, sec, per_row)
            assert per_row.sum() == want


def _exact_moves(nb, prim, old_prim, is_old, cap, budget, skip=None, sec=None, cost=None):
    """Run the kernel on copies (``cost``: the topology's, default flat); returns (prim after, loads after,
    spent before, spent after, saved)."""
    nb, prim = np.array(nb, dtype=np.int32), np.array(prim, dtype=np.int32)
    old_prim, is_old = np.array(old_prim, dtype=np.int32), np.array(is_old, dtype=bool)
    num, n = nb.shape
    sec = np.zeros(num, dtype=np.int64) if sec is None else np.array(sec, dtype=np.int64)
    skip = np.zeros(num, dtype=bool) if skip is None else np.array(skip, dtype=bool)
    load = np.bincount(prim, minlength=n).astype(np.int64)
    spent = int(np.count_nonzero(is_old & (prim != old_prim)))
    touched = np.zeros(num, dtype=bool)
    flat = cost is None
    cost = 1.0 - np.eye(n) if flat else np.asarray(cost, dtype=np.float64)
    after, saved = K.exact_moves(nb, cost, 1.0 if flat else 0.0, prim, sec, old_prim, sec.copy(), is_old, skip,
                                 load, np.int64(cap), np.int64(budget), np.int64(spent), touched)
    return prim, load, spent, int(after), float(saved)


def test_exact_moves_by_hand():
    # 3 workers, cap 4, budget 2 (rows 1 and 3 are moved already: spent 2), reads of row x on worker w: nb[x, w]
    nb = [[1, 3, 0],   # 0: a new id on w0: free to w1, gains 2
          [2, 2, 0],   # 1: moved 0 -> 1; back to w0 reads the same and frees a row of the budget
          [1, 0, 4],   # 2: on its old w0; to w2 gains 3 for a row
          [0, 3, 4],   # 3: moved 1 -> 2; back to w1 loses 1
          [0, 1, 6],   # 4: on its old w1; to w2 gains 5 for a row
          [0, 0, 0]]   # 5: every worker holds it (skipped)
    prim, load, spent, after, saved = _exact_moves(nb, [0, 1, 0, 2, 1, 0], [-1, 0, 0, 1, 1, 0],
                                                   [False, True, True, True, True, True], cap=4, budget=2,
                                                   skip=[False] * 5 + [True])
    # free moves: 0 -> w1 (+2), 1 back (+0, spent 1); the one paid move left: 4 -> w2 (+5); then 2 -> w2 (+3)
    # takes the place of row 3, which goes back to w1 (-1): 18 reads -> 9
    assert prim.tolist() == [1, 0, 2, 1, 2, 0] and (spent, after, saved) == (2, 2, 9.0)
    assert load.tolist() == [2, 2, 2]


def test_exact_moves_swap_out_of_a_full_worker():
    # cap 3: w2 is full. The cheapest return (row 0 out of w1, loses 1) leaves no room on w2 for row 2's move
    # (gains 5); row 1's return out of w2 (loses 2) does: 5 - 2 = 3 reads saved, the budget (2) stays spent
    nb = [[2, 3, 0], [2, 0, 4], [0, 1, 6], [0, 0, 5], [0, 0, 5]]
    prim, load, spent, after, saved = _exact_moves(nb, [1, 2, 1, 2, 2], [0, 0, 1, 2, 2], [True] * 5, cap=3,
                                                   budget=2)
    assert prim.tolist() == [1, 0, 2, 2, 2] and (spent, after, saved) == (2, 2, 3.0)
    assert load.tolist() == [1, 1, 3]


def test_exact_moves_weigh_reads_by_the_topology():
    # 2 machines x 2 GPUs (workers 0, 1 | 2, 3; a read across machines costs 10). A new id on w0 read by 2, 2
    # and 3 chunks of w0, w1, w2: on w2 it reads 4 times instead of 5, but 4 reads across machines (40)
    # instead of 2 within and 3 across (32); the flat topology moves it, machines x GPUs keeps it
    nb, args = [[2, 2, 3, 0]], dict(old_prim=[-1], is_old=[False], cap=9, budget=0)
    assert _exact_moves(nb, [0], **args)[0].tolist() == [2]
    prim, _, _, _, saved = _exact_moves(nb, [0], **args, cost=hierarchical(2, 2, inter_cost=10.0).cost)
    assert prim.tolist() == [0] and saved == 0.0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**16), st.booleans())
def test_exact_moves_keep_the_budget_and_count_their_gain(seed, machines):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5)) * (2 if machines else 1)
    # machines x GPUs: two machines, a read across them costs 10 (the gains are weighted by the cost)
    cost = hierarchical(2, n // 2, inter_cost=10.0).cost if machines else 1.0 - np.eye(n)
    num = int(rng.integers(1, 40))
    nb = rng.integers(0, 6, size=(num, n)) * (rng.random((num, n)) < 0.6)
    is_old = rng.random(num) < 0.8
    old_prim = np.where(is_old, rng.integers(0, n, num), -1)
    prim = np.where(is_old & (rng.random(num) < 0.3), rng.integers(0, n, num), old_prim)
    prim = np.where(prim < 0, rng.integers(0, n, num), prim)
    sec = np.array([sum(1 << int(w) for w in range(n) if w != prim[x] and rng.random() < 0.15)
                    for x in range(num)], dtype=np.int64)
    skip = rng.random(num) < 0.1
    cap = int(rng.integers(num // n + 1, num + 1))
    moved = int(np.count_nonzero(is_old & (prim != old_prim)))
    budget = moved + int(rng.integers(0, 4))
    before = np.bincount(prim, minlength=n)
    new, load, spent, after, saved = _exact_moves(nb, prim, old_prim, is_old, cap, budget, skip=skip, sec=sec,
                                                  cost=cost if machines else None)

    def reads(p):  # a row reads the chunks of the workers that hold no copy of it, each at the cost from its
        # primary (reference, not the kernel)
        return sum(nb[x, w] * cost[p[x], w] for x in range(num) for w in range(n)
                   if w != p[x] and not (sec[x] >> w) & 1)

    assert saved == pytest.approx(reads(prim) - reads(new)) and saved >= -1e-9
    assert after == int(np.count_nonzero(is_old & (new != old_prim))) <= budget
    assert np.array_equal(new[skip], prim[skip])
    assert all((sec[x] >> int(new[x])) & 1 == 0 for x in range(num))  # never onto a copy
    assert np.array_equal(load, np.bincount(new, minlength=n))
    assert all(load[w] <= max(before[w], cap) for w in range(n))  # no worker goes above the cap


# --------------------------------------------------------------------------- renaming on machines x GPUs
def test_match_workers_renames_machines_and_gpus():
    topo = hierarchical(2, 2, inter_cost=10.0)  # workers 0,1 on machine 0; 2,3 on machine 1
    old = Placement.edge_cut(4, [0, 1, 2, 3], [0, 0, 1, 1, 2, 2, 3, 3])
    perm = np.array([3, 2, 1, 0])  # machines swapped and GPUs swapped: costs unchanged
    new = Placement.edge_cut(4, perm[[0, 1, 2, 3]], perm[[0, 0, 1, 1, 2, 2, 3, 3]])
    back = match_workers(old, new, topology=topo)
    assert back.embedding_primary.tolist() == old.embedding_primary.tolist()
    assert back.sample_worker.tolist() == old.sample_worker.tolist()
    assert renames_workers(topo) and renames_workers(resolve_topology(3, None, None))
    # a rename that would pair a worker with the wrong machine mate is never made: 0 and 1 must stay together
    cross = Placement.edge_cut(4, [0, 2, 1, 3], [0, 0, 2, 2, 1, 1, 3, 3])
    got = match_workers(old, cross, topology=topo).embedding_primary
    machine = np.asarray(topo.machine_of)
    assert machine[got[0]] == machine[got[4]]  # cross's workers 0 and 1 (rows 0 and 4) share a machine
    # a topology whose costs no renaming keeps: the placement as it is
    odd = Topology(np.array([[0, 1, 2], [1, 0, 3], [2, 3, 0]], dtype=float))
    assert not renames_workers(odd)
    three = Placement.edge_cut(3, [2, 1, 0], [2, 1, 0])
    assert match_workers(Placement.edge_cut(3, [0, 1, 2], [0, 1, 2]), three, topology=odd) is three


# --------------------------------------------------------------------------- the command
def _synth_days(tmp_path, days):
    paths = [tmp_path / "d0"]
    res = runner.invoke(app, ["data", "synth", "--preset", "tiny", "-n", "600", "--seed", "1", "-o", str(paths[0])])
    assert res.exit_code == 0, res.output
    for d in range(1, days):
        paths.append(tmp_path / f"d{d}")
        res = runner.invoke(app, ["data", "synth", "--continue", str(paths[-2]), "-n", "600", "-o", str(paths[-1])])
        assert res.exit_code == 0, res.output
    return paths


def test_cli_compare_full_prints_the_curve_and_target_none_is_recorded(tmp_path):
    d0, d1 = _synth_days(tmp_path, 2)
    res = runner.invoke(app, ["partition", str(d0), "-w", "4", "-m", "hybrid", "--out", str(tmp_path / "p0"),
                              "--no-plots"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["partition", str(d1), "--from-manifest", str(tmp_path / "p0"), "--max-moved-rows", "5%",
                              "--compare-full", "--out", str(tmp_path / "p1"), "--no-plots"])
    assert res.exit_code == 0, res.output
    assert "kept: " in res.output and "cost: sweep " in res.output and "reads against rows moved" in res.output
    c = load_manifest(tmp_path / "p1").meta["partitioner"]["info"]["comparison"]
    curve = c["curve"]
    assert [p["percent"] for p in curve] == [p for p, _ in budget_ladder(c["num_used_rows"])]
    reads = [p["batch_remote_reads"] for p in curve]
    assert reads == sorted(reads, reverse=True) and all(p["rows"] <= p["budget"] for p in curve)
    assert reads[-1] <= c["batch_remote_reads"]["full_repartition"]  # 100%: at most the full re-partition
    this = [p for p in curve if p["budget"] == c["max_moved_rows"]][0]
    assert this["batch_remote_reads"] == c["batch_remote_reads"]["this"] and this["kept"] == c["kept"]
    assert set(c["seconds"]) >= {"this", "sweep", "target", "full_repartition"}
    # the cost of each step: the chain runs its free step and every ladder step (--compare-full: to 100%), the
    # target's full re-partition is the comparison's own run
    sec = c["seconds"]
    assert c["sweep_steps"] == len(curve) + 1
    assert sec["target_full_repartition"] == sec["full_repartition"]
    assert sec["place"] + sec["sweep_chain"] == pytest.approx(sec["sweep"], abs=2e-4)
    assert sec["target_full_repartition"] + sec["target_moves"] + sec["target_refit"] == pytest.approx(
        sec["target"], abs=3e-4)
    assert f"chain of {len(curve) + 1} steps" in res.output
    # the line under the curve names the budgets that read least and that send least in one epoch
    read = min(curve, key=lambda p: (p["batch_remote_reads"], p["budget"]))
    sent = min(curve, key=lambda p: (p["batch_remote_reads"] + p["rows"], p["budget"]))
    full_sent = c["batch_remote_reads"]["full_repartition"] + c["full_repartition_moved_rows"]["total"]
    sent_text = (f"{sent['percent']:g}% ({sent['batch_remote_reads'] + sent['rows']:,} rows)"
                 if sent["batch_remote_reads"] + sent["rows"] <= full_sent else f"the full re-partition ({full_sent:,} rows)")
    assert (f"least read: {read['percent']:g}% ({read['batch_remote_reads']:,}); least sent by a day trained one epoch "
            f"(reads + rows moved): {sent_text}") in " ".join(res.output.split())
    # the report's markdown shows the same curve, one line per budget of the ladder
    md = (tmp_path / "p1" / "report.md").read_text()
    assert "Reads against rows moved by budget" in md
    for p in curve:
        assert f"| {p['percent']:g}% | {p['budget']:,} | {p['batch_remote_reads']:,} |" in md
        # one epoch's reads plus the rows moved, the sum of the line's own two columns
        assert f"| {p['rows']:,} | {p['batch_remote_reads'] + p['rows']:,} | {p['kept']} |" in md
    assert f"least read: {read['percent']:g}% ({read['batch_remote_reads']:,}); least sent" in md  # the same line
    full_reads, full_rows = c["batch_remote_reads"]["full_repartition"], c["full_repartition_moved_rows"]["total"]
    assert (f"| full re-partition | - | {full_reads:,} | 1.000x | {full_rows:,} | {full_reads + full_rows:,} | - |"
            in md)
    res = runner.invoke(app, ["partition", str(d1), "--from-manifest", str(tmp_path / "p0"), "--max-moved-rows", "5%",
                              "-O", "target=none", "--out", str(tmp_path / "p2"), "--no-plots"])
    assert res.exit_code == 0, res.output
    m = load_manifest(tmp_path / "p2")
    assert m.placement.options["target"] == "none" and "kept" not in m.meta["partitioner"]["info"]["comparison"]
    assert "target none" in res.output


def test_cli_window_partitions_the_last_days(tmp_path):
    d0, d1, d2 = _synth_days(tmp_path, 3)
    res = runner.invoke(app, ["partition", str(d1), "-w", "2", "-m", "hybrid", "--out", str(tmp_path / "p1"),
                              "--no-plots"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["partition", str(d2), "--from-manifest", str(tmp_path / "p1"), "--max-moved-rows", "10%",
                              "--window", "3", "--out", str(tmp_path / "p2"), "--no-plots"])
    assert res.exit_code == 0, res.output
    m = load_manifest(tmp_path / "p2")
    w = m.meta["partitioner"]["info"]["comparison"]["window"]
    assert w["days"] == 3 and w["samples"] == 1800 and m.placement.num_samples == 600
    # the window's cap held over its 1,800 samples; the day's 600, the manifest's, hold their own
    loads = np.bincount(m.placement.sample_worker, minlength=2)
    assert loads.max() <= sample_cap(600, 2, m.placement.options["max_imbalance"]), loads
    assert "window: the last 3 days, 1,800 samples" in res.output
    res = runner.invoke(app, ["partition", str(d2), "--from-manifest", str(tmp_path / "p1"), "--window", "4",
                              "--out", str(tmp_path / "p3"), "--no-plots"])
    assert res.exit_code != 0 and "has 3 day(s) in its parent chain" in res.output
    res = runner.invoke(app, ["partition", str(d2), "-m", "hybrid", "-w", "2", "--window", "2", "--out",
                              str(tmp_path / "p4")])
    assert res.exit_code != 0 and "need --from-manifest" in res.output
    assert json.loads((tmp_path / "p2" / "report.json").read_text())["incremental"]["window"]["days"] == 3


def test_a_window_holds_the_new_days_own_sample_cap(tmp_path):
    """The window's cap is held over all its days; a small last day, the one the manifest keeps, exceeded its
    own (the adversarial pass: loads up to 1.09x the mean at max_imbalance 1.05). Its samples are now fitted."""
    d0, d1 = _synth_days(tmp_path, 2)
    d2 = tmp_path / "d2"
    assert runner.invoke(app, ["data", "synth", "--continue", str(d1), "-n", "150", "-o", str(d2)]).exit_code == 0
    res = runner.invoke(app, ["partition", str(d1), "-w", "4", "-m", "hybrid", "--out", str(tmp_path / "p1"),
                              "--no-plots"])
    assert res.exit_code == 0, res.output
    for seed in range(3):
        out = tmp_path / f"w{seed}"
        res = runner.invoke(app, ["partition", str(d2), "--from-manifest", str(tmp_path / "p1"), "--max-moved-rows",
                                  "5%", "--window", "3", "--seed", str(seed), "--out", str(out), "--no-plots"])
        assert res.exit_code == 0, res.output
        m = load_manifest(out)
        loads = np.bincount(m.placement.sample_worker, minlength=4)
        assert loads.sum() == 150 and loads.max() <= sample_cap(150, 4, 1.05), (seed, loads)


def test_fit_samples_to_cap_moves_the_samples_that_lose_least():
    """Hand-checked: 2 workers, cap 2 (4 samples, imbalance 1). Worker 0 holds samples 0, 1, 2; row 0 is on
    worker 0, row 1 on worker 1 (and a copy on 0). Sample 0 reads row 0 (loses 1 local row by moving), sample
    1 reads rows 0 and 1 (loses 1: row 1's copy is on both), sample 2 reads row 1 (loses 0): sample 2 moves."""
    from gmp.graph import BipartiteGraph
    from gmp.partition.incremental import fit_samples_to_cap
    from gmp.placement import Placement

    g = BipartiteGraph.from_lists([[0], [0, 1], [1], [1]], 2)
    p = Placement(num_workers=2, sample_worker=np.array([0, 0, 0, 1], dtype=np.int32),
                  embedding_primary=np.array([0, 1], dtype=np.int32), secondary_indptr=np.array([0, 0, 1]),
                  secondary_workers=np.array([0], dtype=np.int32), method="test")
    assert fit_samples_to_cap(g, p, 1.0) == 1
    assert p.sample_worker.tolist() == [0, 0, 1, 1]
    assert fit_samples_to_cap(g, p, 1.0) == 0  # within the cap: left as it is


def test_the_trainer_moves_the_rows_of_the_target_candidate(tmp_path):
    """At 100% the rows come from the target (its moves or itself): gmp train --resume moves exactly the rows
    the partitioner counted, as it does for the sweep's (tests/test_migrate.py)."""
    d0, d1, p0, p1, res = day_to_day_cli(tmp_path, "100%")
    c = json.loads((Path(p1) / "report.json").read_text())["incremental"]
    assert c["kept"] in ("target", "full")
    mig = next(json.loads(x) for x in res.output.splitlines() if x.startswith('{"kind": "migration"'))
    assert 0 < mig["moved_rows"]["total"] == c["moved_rows"]["total"]
    assert mig["moved_rows"]["created_rows"] == c["created_rows"]
