"""``gmp simulate`` and ``gmp train --schedule herald``.

* the simulator on a tiny hand-checked epoch (the same epoch as
  tests/test_scheduler.py, through :func:`gmp.simulate.simulate`);
* the CLI (``--json`` keys, byte arithmetic, bad input);
* integration with the trainer: the simulator's counts equal the counts the
  trainer measures, and ``--schedule herald`` at s = 0 trains the same model
  as one worker (with and without the look-ahead prefetcher and the
  cache-aware assignment).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.format import load_dataset
from gmp.placement import Placement
from gmp.simulate import epoch_order, simulate
from train_data import make_config, simulate_with

TINY_PRIMARY = [0, 0, 1, 1]
TINY_ROWS = [[0, 2], [2, 3], [1, 2], [3], [2], [0], [3], [1], [0], [3]]


def _csr(rows):
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    return indptr, np.array([i for r in rows for i in r], dtype=np.int32)


@pytest.mark.parametrize("on_demand, pulls, pushes", [(True, 5, 5), (False, 5, 6)])
@pytest.mark.parametrize("walk", ["order", "shuffle-none"])
def test_tiny_epoch_by_hand(on_demand, pulls, pushes, walk):
    # derivation step by step: tests/test_scheduler.py::test_tiny_epoch_*_by_hand, which walks the
    # samples in file order: an explicit order 0..9, or the trainer's --shuffle none
    indptr, indices = _csr(TINY_ROWS)
    pl = Placement.edge_cut(2, np.zeros(10, dtype=np.int32), TINY_PRIMARY)
    how = {"order": np.arange(10)} if walk == "order" else {"shuffle": "none", "seed": 123}
    res = simulate_with(indptr, indices, pl, num_train=10, batch_size=1, schedule="naive", on_demand=on_demand,
                   cache_rows=1, embedding_dim=8, **how).to_json()
    assert (res["pulls"], res["pushes"]) == (pulls, pushes)
    assert res["rows_pulled_bytes"] == pulls * 8 * 4 and res["rows_pushed_bytes"] == pushes * 8 * 4
    assert res["batches"] == 5 and res["samples"] == 10


def test_herald_on_the_tiny_epoch_by_hand():
    # Algorithm 1 with 2 workers, B = 1, cache 1, on-demand:
    # t0 s0 [0,2] scores (w0 1: row 0; w1 1: row 2) tie -> w0; s1 [2,3] -> w1 (only one left)
    #    same as naive: pull (w0,2), shared write -> push; valid(2) = {w1}
    # t1 s2 [1,2]: w0 1 (row 1), w1 1 (row 2) tie -> w0; s3 [3] -> w1.   w0 re-pulls 2 (stale), dirty on w0
    # t2 s4 [2]: w0 holds the latest 2 -> score w0 1, w1 1 (primary) tie -> w0 (loads equal); s5 [0] -> w1: pull
    # t3 s6 [3]: w0 0, w1 1 -> w1; s7 [1] -> w0 (its primary, no pull)
    #    w1 {3} primary; w0 {1} primary: no transfer, no eviction
    # t4 s8 [0]: w0 0? row 0 is dirty on w1 -> w1 holds the latest: w1 1, w0 1 (primary) tie -> w0;
    #    then s9 [3] -> w1. Plan of t3: w1 must push row 0 (w0 reads it)
    # epoch end: row 2 still dirty on w0 -> flush
    indptr, indices = _csr(TINY_ROWS)
    pl = Placement.edge_cut(2, np.zeros(10, dtype=np.int32), TINY_PRIMARY)
    res = simulate_with(indptr, indices, pl, num_train=10, batch_size=1, schedule="herald", on_demand=True,
                   cache_rows=1, order=np.arange(10)).to_json()
    assert (res["pull_miss"], res["pull_stale"]) == (2, 1)
    assert (res["push_sync"], res["push_plan"], res["push_evict"], res["push_flush"]) == (1, 1, 0, 1)


# The static schedule by hand. Rows 0, 1 have their primary on w0, rows 2, 3 on w1; the
# placement gives samples 2 and 4 to w0 and 0, 1, 3 to w1.
STATIC_ROWS = [[2, 3], [0, 2], [0, 1], [3], [1]]
STATIC_OWNER = [1, 1, 0, 1, 0]
# The trainer's store: no cache, every non-primary update pushed at once, read-only replicas.
STORE = dict(on_demand=False, cache_rows=0, read_only_replicas=True)


def test_static_schedule_by_hand():
    # --shuffle none, B = 1: shards w0 [2, 4], w1 [0, 1, 3]
    # t0: w0 s2 [0, 1] both its primaries; w1 s0 [2, 3] both its primaries: nothing moves
    # t1: w0 s4 [1] local; w1 s1 [0, 2]: row 0 is w0's -> pull; w1 alone writes it -> push at once
    # t2: w0 has no sample left; w1 s3 [3] local
    # (the naive split of the same file order would give s0 to w0 at t0: 3 pulls, 3 pushes)
    indptr, indices = _csr(STATIC_ROWS)
    pl = Placement.edge_cut(2, STATIC_OWNER, TINY_PRIMARY)
    res = simulate_with(indptr, indices, pl, num_train=5, batch_size=1, schedule="static", shuffle="none",
                        **STORE).to_json()
    assert (res["pull_miss"], res["pull_stale"], res["push_sync"], res["pushes"]) == (1, 0, 1, 1)
    assert (res["batches"], res["samples"], res["schedule"], res["shuffle"]) == (3, 5, "static", "none")
    naive = simulate_with(indptr, indices, pl, num_train=5, batch_size=1, schedule="naive", shuffle="none",
                          **STORE).to_json()
    assert (naive["pull_miss"], naive["pushes"], naive["batches"]) == (3, 3, 3)


def test_static_order_pads_each_worker_to_the_batch():
    from gmp.simulate import static_order

    pl = Placement.edge_cut(2, [0, 1, 0, 0], [0])
    # shards w0 [0, 2, 3], w1 [1]; B = 2; pad id 9 (the docstring's example)
    assert static_order(pl, 4, 2, 9, shuffle="none").tolist() == [0, 2, 1, 9, 3, 9, 9, 9]
    # seeded: the trainer's StaticSchedule shards, step by step
    from gmp.train.schedule import StaticSchedule

    pl = Placement.edge_cut(3, np.arange(40) % 3, [0])
    got = static_order(pl, 40, 4, 99, seed=5, epoch=1).reshape(-1, 3, 4)
    want = list(StaticSchedule(pl, 40, 4, seed=5).steps(1))
    assert len(got) == len(want)
    for step, parts in zip(got, want):
        for w in range(3):
            assert step[w][step[w] != 99].tolist() == parts.samples[w].tolist()


def test_shuffle_none_walks_the_file_order_and_seeded_does_not():
    assert epoch_order(7, 3, 0, "none").tolist() == list(range(7))
    assert epoch_order(50, 3, 0, "seeded").tolist() != list(range(50))
    assert epoch_order(50, 3, 1, "seeded").tolist() == epoch_order(50, 3, 1).tolist()


def test_every_trainer_schedule_can_be_simulated():
    from gmp.simulate import SCHEDULES
    from gmp.train.registry import SCHEDULES as TRAIN_SCHEDULES

    assert set(SCHEDULES) == set(TRAIN_SCHEDULES)


def test_simulate_refuses_bad_schedule_shuffle_and_static_order():
    from gmp.errors import TrainingError

    indptr, indices = _csr(STATIC_ROWS)
    pl = Placement.edge_cut(2, STATIC_OWNER, TINY_PRIMARY)
    with pytest.raises(TrainingError, match="'shuffle' parameter"):
        simulate(indptr, indices, pl, num_train=5, batch_size=1, shuffle="random")
    with pytest.raises(TrainingError, match="'schedule' parameter"):
        simulate(indptr, indices, pl, num_train=5, batch_size=1, schedule="magic")
    with pytest.raises(TrainingError, match="Pass order=None"):
        simulate(indptr, indices, pl, num_train=5, batch_size=1, schedule="static", order=np.arange(5))


ORDER_IS = (r"The 'order' parameter must be a 1-D sequence of training sample ids \(integers in \[0, 10\), each "
            r"at most once\), got ")


@pytest.mark.parametrize("order, got", [
    ([1.7, 2.2], r"float64 values\.$"),  # was truncated to [1, 2]
    ([True, False], r"bool values\.$"),  # was read as [1, 0]
    ([0, 3, 0], r"sample 0 twice \(positions 0 and 2\)\.$"),  # an epoch visits a sample once
    ([[0, 1], [2, 3]], r"an array of shape \(2, 2\)\.$"),  # was a numba typing error
    ("abc", r"'abc'\.$"),  # was a ValueError from int()
    (3, r"3\.$"),
])
def test_simulate_refuses_an_order_that_is_not_training_sample_ids(order, got):
    from gmp.errors import TrainingError

    indptr, indices = _csr(TINY_ROWS)
    pl = Placement.edge_cut(2, np.zeros(10, dtype=np.int32), TINY_PRIMARY)
    with pytest.raises(TrainingError, match=ORDER_IS + got):
        simulate(indptr, indices, pl, num_train=10, batch_size=1, schedule="naive", order=order)


def test_an_order_may_be_any_subset_of_the_training_samples():
    """A prefix or subset is an order (docs/herald.md times one): its samples are counted, in its order."""
    indptr, indices = _csr(TINY_ROWS)
    pl = Placement.edge_cut(2, np.zeros(10, dtype=np.int32), TINY_PRIMARY)
    res = simulate(indptr, indices, pl, num_train=10, batch_size=1, schedule="naive", order=[9, 2, 4]).to_json()
    assert (res["samples"], res["batches"]) == (3, 2)
    assert simulate(indptr, indices, pl, num_train=10, batch_size=1, order=np.array([], dtype=np.int64)).to_json()[
        "samples"] == 0


def test_orders_and_placements_out_of_range_are_refused_not_a_crash(tiny_dataset):
    """``order=[num_train]`` and ``order=[-1]`` crashed the process (segmentation fault), ``[-20001]`` counted
    nothing; a placement with a worker id out of range reached the scheduler's kernels unchecked. Run in a child
    process, so that the old crash fails this test rather than the test run."""
    code = f"""
import numpy as np
import gmp
from gmp.errors import GmpError
from gmp.placement import Placement
from gmp.simulate import simulate

ds = gmp.load_dataset({str(tiny_dataset)!r})  # 6 samples, 4 of them training samples
calls = [lambda: gmp.simulate_epoch(ds, workers=2, order=[ds.num_train]),
         lambda: gmp.simulate_epoch(ds, workers=2, order=[-1]),
         lambda: gmp.simulate_epoch(ds, workers=2, order=[-20001]),
         lambda: simulate(ds.indptr, ds.indices, Placement.edge_cut(2, np.zeros(6, np.int32), [0, 0, 1, 1, 9, 1]),
                          num_train=4, batch_size=1),
         lambda: simulate(ds.indptr, ds.indices, Placement.edge_cut(2, np.zeros(3, np.int32), np.zeros(6, np.int32)),
                          num_train=4, batch_size=1, schedule="static")]
for call in calls:
    try:
        call()
        print("accepted")
    except GmpError as exc:
        print(type(exc).__name__, exc)
"""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    order_is = ("TrainingError The 'order' parameter must be a 1-D sequence of training sample ids (integers in "
                "[0, 4), each at most once), got ")
    assert res.stdout.splitlines() == [
        order_is + "4 at position 0.",
        order_is + "-1 at position 0.",
        order_is + "-20001 at position 0.",
        "PlacementError embedding_primary holds worker ids outside [0, 2): [0, 9].",
        "PlacementError placement covers 3 samples, fewer than the 4 training samples; use the placement made for "
        "this dataset.",
    ]


@pytest.mark.parametrize("kw, message", [
    ({"epoch": -1}, r"The 'epoch' parameter must be an int >= 0, got -1\."),  # was numpy's ValueError
    ({"epoch": 1.5}, r"The 'epoch' parameter must be an int >= 0, got 1\.5\."),
    ({"parameter_server": "no"}, r"The 'parameter_server' parameter must be a bool, got 'no'\."),
    ({"min_frequency": 2}, r"The 'min_frequency' parameter must be a finite number >= 0 and < 1 \(a fraction of "
                           r"the training samples; Herald caches rows of frequency > 1e-5\), got 2\."),
    ({"min_frequency": 1.0}, r"finite number >= 0 and < 1 .*got 1\.0\."),
    ({"min_frequency": -0.1}, r"The 'min_frequency' parameter must be a finite number >= 0, got -0\.1\."),
    ({"lookahead": 3}, r"The 'lookahead' parameter has no effect under cache_policy=lru \(it is the window of "
                       r"cache_policy=lookahead\), got lookahead=3; pass cache_policy=lookahead, or lookahead=0\."),
])
def test_simulate_epoch_refuses_settings_in_one_line(tiny_dataset, kw, message):
    import gmp
    from gmp.errors import TrainingError

    with pytest.raises(TrainingError, match=message):
        gmp.simulate_epoch(tiny_dataset, workers=2, **kw)


def test_lookahead_is_taken_with_the_policy_that_reads_it(tiny_dataset):
    import gmp

    out = gmp.simulate_epoch(tiny_dataset, workers=2, batch_size=1, cache_policy="lookahead", lookahead=2).to_json()
    assert (out["cache_policy"], out["lookahead"]) == ("lookahead", 2)
    assert gmp.simulate_epoch(tiny_dataset, workers=2, lookahead=0).to_json()["lookahead"] == 0


def test_cli_refuses_lookahead_without_its_policy_and_min_frequency_beyond_1(tiny_dataset):
    """--lookahead under the default --cache-policy lru changed no count yet was echoed in --json; --min-frequency
    2 (a fraction) reported 0 pulls and 0 pushes."""
    runner = CliRunner()
    base = ["simulate", str(tiny_dataset), "--workers", "2", "--batch-size", "1", "--json"]
    r = runner.invoke(app, [*base, "--lookahead", "3"])
    assert r.exit_code == 2 and r.output == (
        "error: --lookahead has no effect under --cache-policy lru (it is the window of --cache-policy lookahead), "
        "got --lookahead 3; pass --cache-policy lookahead, or --lookahead 0.\n"), r.output
    r = runner.invoke(app, [*base, "--lookahead", "3", "--cache-policy", "lookahead"])
    assert r.exit_code == 0 and json.loads(r.output)["lookahead"] == 3, r.output
    r = runner.invoke(app, [*base, "--min-frequency", "2"])
    assert r.exit_code == 2 and r.output.startswith("error: --min-frequency must be a finite number >= 0 and < 1 (a "
                                                    "fraction of the training samples;"), r.output
    r = runner.invoke(app, [*base, "--min-frequency", "0.3"])
    assert r.exit_code == 0 and json.loads(r.output)["min_frequency"] == 0.3, r.output


# --------------------------------------------------------------------------- CLI


def test_cli_json(tiny_dataset):
    r = CliRunner().invoke(app, ["simulate", "--dataset", str(tiny_dataset), "--workers", "2", "--schedule", "herald",
                                 "--batch-size", "1", "--cache-rows", "2", "--embedding-dim", "3", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    for key in ("pulls", "pushes", "rows_pulled_bytes", "rows_pushed_bytes", "schedule_ms_per_batch"):
        assert key in out
    assert out["rows_pulled_bytes"] == out["pulls"] * 12 and out["rows_pushed_bytes"] == out["pushes"] * 12
    assert out["on_demand"] is True and out["batches"] == 2  # 4 training samples, global batch 2
    assert out["pulls"] == out["pull_miss"] + out["pull_stale"]
    assert out["pushes"] == sum(out[k] for k in ("push_sync", "push_plan", "push_evict", "push_flush"))


def test_cli_table_and_errors(tiny_dataset):
    runner = CliRunner()
    r = runner.invoke(app, ["simulate", "--dataset", str(tiny_dataset), "--workers", "2", "--schedule", "naive"])
    assert r.exit_code == 0, r.output
    assert "pulls" in r.output
    r = runner.invoke(app, ["simulate", "--dataset", str(tiny_dataset), "--workers", "2", "--schedule", "magic"])
    assert r.exit_code == 2 and "--schedule must be one of ['static', 'naive', 'herald'], got 'magic'" in r.output
    r = runner.invoke(app, ["simulate", "--dataset", str(tiny_dataset), "--workers", "2", "--shuffle", "random"])
    assert r.exit_code == 2 and "--shuffle must be one of ['seeded', 'none'], got 'random'" in r.output
    r = runner.invoke(app, ["simulate", "--dataset", str(tiny_dataset), "--schedule", "naive"])
    assert r.exit_code == 2 and "--workers is required" in r.output
    r = runner.invoke(app, ["simulate", "--dataset", str(tiny_dataset), "--workers", "2", "--cache-policy", "fifo"])
    assert r.exit_code == 2 and "--cache-policy must be one of ['lru', 'lookahead'], got 'fifo'" in r.output
    r = runner.invoke(app, ["simulate", "--dataset", str(tiny_dataset), "--workers", "2", "--seed", "-1"])
    assert r.exit_code == 2 and "--seed must be an int in [0, 2^63), got -1" in r.output  # was numpy's traceback
    r = runner.invoke(app, ["simulate", "--dataset", str(tiny_dataset), "--workers", "100000"])
    assert r.exit_code == 2 and "supports up to 64 workers" in r.output  # was "out of memory"
    for flag, read_only in (("--writable-replicas", False), ("--read-only-replicas", True)):  # gmp train's flags
        r = runner.invoke(app, ["simulate", "--dataset", str(tiny_dataset), "--workers", "2", flag, "--json"])
        assert r.exit_code == 0 and json.loads(r.output)["read_only_replicas"] is read_only, r.output


def test_cli_refuses_batch_size_0_before_the_plan_warning(tiny_dataset, tmp_path):
    """A bad --batch-size is one error line, without the 'optimised for another setting' warning first."""
    runner = CliRunner()
    m = tmp_path / "m"
    r = runner.invoke(app, ["partition", str(tiny_dataset), "-w", "2", "-m", "random", "--batch-size", "2",
                            "--no-plots", "--out", str(m)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["simulate", str(tiny_dataset), "--manifest", str(m), "--batch-size", "0"])
    assert r.exit_code == 2 and r.output == "error: --batch-size must be an int >= 1, got 0.\n", r.output
    r = runner.invoke(app, ["simulate", str(tiny_dataset), "--manifest", str(m), "--batch-size", "3"])
    assert r.exit_code == 0 and "optimised for another setting: batch_size 3 (planned 2)" in r.output  # still warns


def test_epoch_order_matches_the_trainers_naive_schedule():
    from gmp.train.schedule import NaiveSchedule

    assert epoch_order(50, 7, 2).tolist() == NaiveSchedule(3, 50, 4, seed=7).epoch_order(2).tolist()


# --------------------------------------------------------------------------- the trainer

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def ctr(tmp_path_factory):
    from train_data import make_config, make_ctr_dataset, simulate_with

    path = make_ctr_dataset(tmp_path_factory.mktemp("ctr") / "ds")
    return path, load_dataset(path)


def _placement(ds, n, secondaries=0.0, seed=1):
    from test_train_equivalence import random_placement

    return random_placement(ds, n, secondaries=secondaries, seed=seed)


def _config(**kw):
    from gmp.train import TrainConfig

    base = dict(model="wdl", embedding_dim=4, optimizer="adagrad", lr=0.1, batch_size=12, epochs=1,
                schedule="herald", dtype="float64", hidden=(8,), seed=3)
    base.update(kw)
    return make_config(**base)


@pytest.mark.parametrize("schedule", ["static", "naive", "herald"])
@pytest.mark.parametrize("shuffle", ["seeded", "none"])
@pytest.mark.parametrize("num_workers,secondaries", [(2, 0.0), (4, 0.0), (3, 0.5)])
def test_simulator_counts_equal_trainer_counts(ctr, schedule, shuffle, num_workers, secondaries):
    from gmp.comm.local import LocalEngine
    from gmp.train import TrainData, Trainer

    _, ds = ctr
    pl = _placement(ds, num_workers, secondaries)
    cfg = _config(schedule=schedule, shuffle=shuffle)
    rec = Trainer(TrainData(ds), pl, cfg, LocalEngine(num_workers)).fit()[-1]
    sim = simulate_with(ds.indptr, ds.indices, pl, num_train=ds.num_train, batch_size=cfg.batch_size, schedule=schedule,
                   on_demand=False, cache_rows=0, read_only_replicas=True, seed=cfg.seed, shuffle=shuffle).to_json()
    assert sim["samples"] == rec["samples"] == ds.num_train
    assert rec["remote_rows_read"] > 0
    assert sim["pull_miss"] == rec["remote_rows_read"]
    assert sim["pull_stale"] == rec["staleness_refreshes"]
    assert sim["pushes"] == rec["remote_rows_pushed"]


def test_herald_reads_fewer_remote_rows_than_naive(ctr):
    _, ds = ctr
    pl = _placement(ds, 4)
    kw = dict(num_train=ds.num_train, batch_size=12, on_demand=False, cache_rows=0, read_only_replicas=True)
    naive = simulate_with(ds.indptr, ds.indices, pl, schedule="naive", **kw).to_json()
    herald = simulate_with(ds.indptr, ds.indices, pl, schedule="herald", **kw).to_json()
    assert herald["pulls"] < naive["pulls"]


@pytest.mark.parametrize("options", [{}, {"lookahead": 2}, {"cache_rows": 5, "on_demand": True,
                                                            "read_only_replicas": False, "lookahead": 1}])
@pytest.mark.parametrize("num_workers,secondaries", [(2, 0.0), (3, 0.5)])
def test_herald_at_s0_equals_one_worker(ctr, options, num_workers, secondaries):
    from gmp.comm.local import LocalEngine
    from gmp.train import TrainData, Trainer

    torch.use_deterministic_algorithms(True)
    try:
        _, ds = ctr
        data = TrainData(ds)
        many = Trainer(data, _placement(ds, num_workers, secondaries),
                       _config(batch_size=12, epochs=2, schedule_options=options), LocalEngine(num_workers))
        one = Trainer(data, _placement(ds, 1), _config(batch_size=12 * num_workers, epochs=2, schedule="naive"),
                      LocalEngine(1))
        r_many, r_one = many.fit(), one.fit()
    finally:
        torch.use_deterministic_algorithms(False)
    np.testing.assert_allclose(many.embedding_table(), one.embedding_table(), rtol=1e-9, atol=1e-12)
    for p, q in zip(many.model.parameters(), one.model.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-9, atol=1e-12)
    assert r_many[-1]["train_loss"] == pytest.approx(r_one[-1]["train_loss"], rel=1e-9)
    # and the herald split really differs from the naive split somewhere
    assert many.schedule.__class__.__name__ == "HeraldSchedule"


def test_herald_schedule_resumes_mid_epoch(ctr):
    from gmp.train.herald import HeraldOptions
    from gmp.train.herald.schedule import HeraldSchedule

    _, ds = ctr
    pl = _placement(ds, 3)
    full = HeraldSchedule(pl, ds.indptr, ds.indices, ds.num_train, 8, HeraldOptions(cache_rows=4, on_demand=True),
                          seed=2)
    want = [[a.tolist() for a in s.samples] for e in range(2) for s in full.steps(e)]
    part = HeraldSchedule(pl, ds.indptr, ds.indices, ds.num_train, 8,
                          HeraldOptions(cache_rows=4, on_demand=True, lookahead=2, cache_policy="lru"), seed=2)
    got = []
    it = part.steps(0)
    for _ in range(3):
        got.append([a.tolist() for a in next(it).samples])
    it.close()  # interrupted: the prefetch thread ran ahead
    got += [[a.tolist() for a in s.samples] for s in part.steps(0, 3)]
    got += [[a.tolist() for a in s.samples] for s in part.steps(1)]
    assert got == want
    # every worker gets exactly B samples in full batches, every training sample once per epoch
    per_epoch = len(want) // 2
    assert sorted(i for s in want[:per_epoch] for a in s for i in a) == list(range(ds.num_train))
    assert part.prefetch_stats()["items"] > 0


def test_parameter_server_setting_counts_every_use_without_cache(ctr):
    # Herald's setting, no cache, naive sync: every distinct row a worker uses is pulled and pushed
    _, ds = ctr
    n, b = 3, 8
    pl = _placement(ds, n)
    res = simulate_with(ds.indptr, ds.indices, pl, num_train=ds.num_train, batch_size=b, schedule="naive",
                   on_demand=False, cache_rows=0, parameter_server=True, seed=4).to_json()
    order = epoch_order(ds.num_train, 4)
    want = 0
    for start in range(0, order.size, n * b):
        for part in np.array_split(order[start:start + n * b], n):
            rows = [ds.indices[ds.indptr[s]:ds.indptr[s + 1]] for s in part]
            want += np.unique(np.concatenate(rows)).size if rows else 0
    assert res["pulls"] == res["pull_miss"] == want
    assert res["pushes"] == res["push_sync"] == want
    assert res["workers"] == n and res["parameter_server"] is True


def test_hot_rows_only_by_hand():
    from gmp.simulate import hot_rows_only

    indptr, indices = _csr([[0, 1], [0, 2], [0, 3], [1], [2, 3]])  # the last sample is not training
    # training degrees: row 0: 3, row 1: 2, rows 2 and 3: 1; threshold 0.3 * 4 = 1.2 keeps rows 0 and 1
    ptr, idx = hot_rows_only(indptr, indices, 4, 0.3)
    assert ptr.tolist() == [0, 2, 3, 4, 5] and idx.tolist() == [0, 1, 0, 0, 1]


def test_cli_with_a_manifest(tiny_dataset, tmp_path):
    from gmp.manifest import write_manifest
    from gmp.topology import homogeneous

    ds = load_dataset(tiny_dataset)
    pl = Placement.edge_cut(2, [0, 1, 0, 1, 0, 1], [0, 0, 1, 1, 0, 1], method="random", seed=0)
    m = write_manifest(tmp_path / "m", pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                       num_embeddings=ds.num_embeddings, topology=homogeneous(2))
    runner = CliRunner()
    base = ["simulate", "--dataset", str(tiny_dataset), "--manifest", str(m), "--batch-size", "1", "--json",
            "--schedule", "naive", "--cache-rows", "0", "--no-on-demand"]
    r = runner.invoke(app, base)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    want = simulate_with(ds.indptr, ds.indices, pl, num_train=ds.num_train, batch_size=1, schedule="naive",
                    on_demand=False, cache_rows=0).to_json()
    assert (out["pulls"], out["pushes"], out["workers"]) == (want["pulls"], want["pushes"], 2)
    r = runner.invoke(app, base + ["--workers", "3"])
    assert r.exit_code == 2 and "--workers 3 does not match" in r.output


@pytest.mark.distributed
def test_herald_distributed_engine_equals_one_worker(ctr, tmp_path):
    """--schedule herald under torchrun (2 gloo processes), s = 0, with and without the
    look-ahead prefetch thread and cache-aware scoring: every rank's primaries equal a
    single worker's model, and the counters equal the local engine's."""
    from test_train_distributed import HERE, torchrun
    from train_data import assert_rank_rows_match, save_placement_npz

    from gmp.comm.local import LocalEngine
    from gmp.train import TrainConfig, TrainData, Trainer

    path, ds = ctr
    n = 2
    pl = _placement(ds, n, 0.5, seed=3)
    save_placement_npz(tmp_path / "pl.npz", pl)
    base = dict(model="wdl", embedding_dim=4, optimizer="adagrad", lr=0.1, batch_size=10, epochs=2,
                schedule="herald", dtype="float64", hidden=[8], seed=4)
    configs = [dict(base), dict(base, schedule_options={"lookahead": 2, "cache_rows": 6, "on_demand": True,
                                                         "read_only_replicas": False})]
    res = torchrun(n, [str(HERE / "dist_worker.py"), str(path), str(tmp_path / "pl.npz"), str(tmp_path),
                       json.dumps(configs)])
    assert res.returncode == 0, res.stderr[-3000:]
    torch.use_deterministic_algorithms(True)
    try:
        one = Trainer(TrainData(ds), _placement(ds, 1),
                      make_config(**dict(base, schedule="naive", batch_size=base["batch_size"] * n)), LocalEngine(1))
        one.fit()
        table = one.embedding_table()
        for i, cfg in enumerate(configs):
            assert_rank_rows_match(tmp_path / str(i), n, table, ds.num_embeddings)
            local = Trainer(TrainData(ds), pl, make_config(**cfg), LocalEngine(n))
            local_records = local.fit()
            dist_records = json.loads((tmp_path / str(i) / "records.json").read_text())
            for a, b in zip(dist_records, local_records):
                for key in ("remote_rows_read", "remote_rows_pushed", "staleness_refreshes", "samples"):
                    assert a[key] == b[key], key
    finally:
        torch.use_deterministic_algorithms(False)


def test_cli_train_herald_counts_equal_cli_simulate(tiny_dataset, tmp_path):
    """Both commands on the same manifest: gmp train --schedule herald --lookahead 2 measures
    exactly what gmp simulate predicts for the trainer's store."""
    from gmp.manifest import write_manifest
    from gmp.topology import homogeneous

    ds = load_dataset(tiny_dataset)
    pl = Placement.edge_cut(2, [0, 1, 0, 1, 0, 1], [0, 1, 1, 0, 0, 1], method="random", seed=0)
    m = write_manifest(tmp_path / "m", pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                       num_embeddings=ds.num_embeddings, topology=homogeneous(2))
    runner = CliRunner()
    common = ["--dataset", str(tiny_dataset), "--manifest", str(m), "--batch-size", "1", "--seed", "5"]
    r = runner.invoke(app, ["train", *common, "--schedule", "herald", "--lookahead", "2", "--epochs", "1",
                            "--embedding-dim", "4"])
    assert r.exit_code == 0, r.output
    rec = json.loads([line for line in r.output.splitlines() if line.startswith("{")][-1])
    r = runner.invoke(app, ["simulate", *common, "--schedule", "herald", "--cache-rows", "0", "--no-on-demand",
                            "--read-only-replicas", "--json"])
    assert r.exit_code == 0, r.output
    sim = json.loads(r.output)
    assert (sim["pull_miss"], sim["pushes"]) == (rec["remote_rows_read"], rec["remote_rows_pushed"])
    assert sim["pull_miss"] > 0


@pytest.mark.parametrize("shuffle", ["seeded", "none"])
def test_cli_train_static_counts_equal_cli_simulate(tiny_dataset, tmp_path, shuffle):
    """gmp train's default schedule (static) on a manifest: its JSON log's counts are what
    gmp simulate --schedule static predicts for the trainer's store."""
    from gmp.manifest import write_manifest
    from gmp.topology import homogeneous

    ds = load_dataset(tiny_dataset)
    pl = Placement.edge_cut(2, [0, 0, 0, 1, 1, 1], [0, 1, 1, 0, 0, 1], method="random", seed=0)
    m = write_manifest(tmp_path / "m", pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                       num_embeddings=ds.num_embeddings, topology=homogeneous(2))
    runner = CliRunner()
    common = ["--dataset", str(tiny_dataset), "--manifest", str(m), "--batch-size", "1", "--seed", "5",
              "--shuffle", shuffle]
    r = runner.invoke(app, ["train", *common, "--epochs", "1", "--embedding-dim", "4"])
    assert r.exit_code == 0, r.output
    rec = json.loads([line for line in r.output.splitlines() if line.startswith("{")][-1])
    r = runner.invoke(app, ["simulate", *common, "--schedule", "static", "--cache-rows", "0", "--no-on-demand",
                            "--read-only-replicas", "--json"])
    assert r.exit_code == 0, r.output
    sim = json.loads(r.output)
    assert (sim["pull_miss"], sim["pull_stale"], sim["pushes"]) == (
        rec["remote_rows_read"], rec["staleness_refreshes"], rec["remote_rows_pushed"])
    assert sim["schedule"] == "static" and sim["shuffle"] == shuffle and sim["samples"] == 4
    assert sim["pull_miss"] > 0


def test_herald_interrupt_and_resume_equals_an_uninterrupted_run(ctr, tmp_path):
    from gmp.errors import TrainingError
    from gmp.manifest import write_manifest
    from gmp.topology import homogeneous
    from gmp.train import TrainConfig
    from gmp.train.run import train

    path, ds = ctr
    pl = _placement(ds, 3, 0.4)
    man = write_manifest(tmp_path / "m", pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                         num_embeddings=ds.num_embeddings, topology=homogeneous(3))
    cfg = make_config(model="wdl", batch_size=16, epochs=2, optimizer="adagrad", schedule="herald", lr=0.05,
                      embedding_dim=4, hidden=(8,),
                      schedule_options={"lookahead": 2, "cache_rows": 4, "on_demand": True})
    full = train(path, man, cfg, checkpoint_dir=tmp_path / "a")
    with pytest.raises(TrainingError, match="interrupted"):
        train(path, man, cfg, checkpoint_dir=tmp_path / "b", stop_after_steps=5)
    resumed = train(path, man, cfg, checkpoint_dir=tmp_path / "b", resume=True)
    assert len(full) == 2 and len(resumed) == 1  # 4 steps per epoch: interrupted in epoch 2
    for a, b in zip(full[1:], resumed):
        for key in ("train_loss", "test_auc", "remote_rows_read", "remote_rows_pushed", "samples", "steps"):
            assert a[key] == b[key], key
    for w in range(3):
        fa = torch.load(tmp_path / "a" / "latest" / f"worker-{w:05d}.pt", weights_only=False)["store"]
        fb = torch.load(tmp_path / "b" / "latest" / f"worker-{w:05d}.pt", weights_only=False)["store"]
        assert torch.equal(fa["table"], fb["table"])


def test_herald_schedule_refuses_bad_options(ctr):
    from gmp.errors import TrainingError
    from gmp.train.herald import HeraldOptions
    from gmp.train.registry import make_schedule
    from gmp.train.schedule import ScheduleContext

    _, ds = ctr
    pl = _placement(ds, 2)
    with pytest.raises(TypeError, match="bogus"):
        HeraldOptions(bogus=1)
    with pytest.raises(TrainingError, match="needs the dataset's samples"):
        make_schedule("herald", ScheduleContext(pl, ds.num_train, 8))
    with pytest.raises(TrainingError, match=r"The 'cache_policy' parameter must be one of \['lru', 'lookahead'\]"):
        make_schedule("herald", ScheduleContext(pl, ds.num_train, 8, dataset=ds,
                                                herald=HeraldOptions(cache_policy="mru")))


def test_herald_options_validate_once_and_the_two_default_sets():
    """HeraldOptions: the trainer's defaults, the simulator's (Herald's paper), one wording for errors."""
    from gmp.errors import TrainingError
    from gmp.train.herald import HeraldOptions

    assert HeraldOptions() == HeraldOptions(on_demand=False, cache_rows=0, cache_policy="lookahead", lookahead=0,
                                            read_only_replicas=True)
    assert HeraldOptions.for_trainer(cache_rows=None, lookahead=3) == HeraldOptions(lookahead=3,
                                                                                      cache_policy="lookahead")
    assert HeraldOptions.for_simulator("herald", 1234).cache_policy == "lru"
    sim = HeraldOptions.for_simulator("herald", 1234)
    assert (sim.on_demand, sim.cache_rows, sim.read_only_replicas) == (True, 123, False)
    assert HeraldOptions.for_simulator("naive", 1234, cache_rows=7).on_demand is False
    assert HeraldOptions.for_simulator("naive", 1234, cache_rows=7).cache_rows == 7
    for kw, msg in ((dict(cache_rows=-1), r"The 'cache_rows' parameter must be an int >= 0, got -1\."),
                    (dict(lookahead=1.5), r"The 'lookahead' parameter must be an int >= 0, got 1\.5\."),
                    (dict(on_demand=1), r"The 'on_demand' parameter must be a bool, got 1\."),
                    (dict(cache_policy="mru"), r"The 'cache_policy' parameter must be one of \['lru', 'lookahead'\]")):
        with pytest.raises(TrainingError, match=msg):
            HeraldOptions(**kw)
    with pytest.raises(TrainingError, match=r"The 'schedule' parameter must be one of \['naive', 'herald'\]"):
        HeraldOptions.for_simulator("static", 10)
