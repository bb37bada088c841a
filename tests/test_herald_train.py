"""``gmp train --schedule herald`` at s = 0 with the runtime scheduler driving the store:
per-worker cache, on-demand (deferred) pushes, early fetch of final rows.

Three properties, each checked against something derived independently:

* the model equals a single worker's (plain one-table training on the same
  global batches) for SGD and Adagrad, several N, placements with and
  without secondaries, every combination of cache / on-demand / writable
  replicas / look-ahead;
* the per-kind transfer counts the trainer measures equal ``gmp simulate``'s
  (the simulator never trains);
* pushes really are deferred: after every step, a row with pending updates
  on worker w has, on w, the single-worker model's value while its primary
  still holds an older one; every other row's primary is current.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.format import load_dataset
from gmp.errors import TrainingError
from gmp.simulate import simulate
from gmp.comm.local import LocalEngine
from gmp.train import TrainConfig, TrainData, Trainer
from gmp.train.store import EmbeddingStore
from test_train_equivalence import random_placement
from train_data import (assert_rank_rows_match, make_config, make_ctr_dataset, runtime_scheduler, save_placement_npz,
                        simulate_with)

KINDS = ("pull_miss", "pull_stale", "push_sync", "push_plan", "push_evict", "push_flush")


@pytest.fixture(scope="module")
def ctr(tmp_path_factory):
    path = make_ctr_dataset(tmp_path_factory.mktemp("ctr") / "ds")
    return path, load_dataset(path)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def _config(**kw):
    base = dict(model="wdl", embedding_dim=4, optimizer="sgd", lr=0.1, batch_size=12, epochs=2,
                schedule="herald", dtype="float64", hidden=(8,), seed=3)
    base.update(kw)
    return make_config(**base)


OPTIONS = [
    dict(on_demand=True, cache_rows=6, read_only_replicas=False, lookahead=0),
    dict(on_demand=True, cache_rows=0, read_only_replicas=True, lookahead=2),
    dict(on_demand=False, cache_rows=5, read_only_replicas=False, lookahead=2, cache_policy="lookahead"),
    dict(on_demand=True, cache_rows=1000, read_only_replicas=False, lookahead=1, cache_policy="lookahead"),
    dict(on_demand=False, cache_rows=4, read_only_replicas=True, lookahead=1),  # Adagrad sums stay home
]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("optimizer,num_workers,secondaries", [("sgd", 2, 0.0), ("adagrad", 3, 0.5),
                                                               ("sgd", 4, 0.3)])
def test_same_model_as_one_worker_and_counts_equal_the_simulator(ctr, options, optimizer, num_workers, secondaries):
    _, ds = ctr
    data = TrainData(ds)
    pl = random_placement(ds, num_workers, secondaries=secondaries)
    many = Trainer(data, pl, _config(optimizer=optimizer, schedule_options=options), LocalEngine(num_workers))
    recs = many.fit()
    one = Trainer(data, random_placement(ds, 1), _config(optimizer=optimizer, schedule="naive",
                                                         batch_size=12 * num_workers), LocalEngine(1))
    ones = one.fit()
    np.testing.assert_allclose(many.embedding_table(), one.embedding_table(), rtol=1e-9, atol=1e-12)
    for p, q in zip(many.model.parameters(), one.model.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-9, atol=1e-12)
    assert recs[-1]["train_loss"] == pytest.approx(ones[-1]["train_loss"], rel=1e-9)
    # epoch 1 (fresh caches) against the simulator's one-epoch replay
    sim = simulate_with(ds.indptr, ds.indices, pl, num_train=ds.num_train, batch_size=12, schedule="herald",
                   on_demand=options["on_demand"], cache_rows=options["cache_rows"],
                   cache_policy=options.get("cache_policy", "lookahead"), lookahead=options["lookahead"],
                   read_only_replicas=options["read_only_replicas"], seed=3).to_json()
    h = recs[0]["herald"]
    assert {k: h[k] for k in KINDS} == {k: sim[k] for k in KINDS}
    assert (h["pulls"], h["pushes"]) == (sim["pulls"], sim["pushes"]) and sim["pulls"] > 0
    assert recs[0]["remote_rows_read"] == sim["pull_miss"]
    assert recs[0]["staleness_refreshes"] == sim["pull_stale"]
    assert recs[0]["remote_rows_pushed"] == sim["pushes"]
    if options["lookahead"]:
        pf = recs[0]["prefetch"]
        assert pf["early_rows"] + pf["late_rows"] == sim["pulls"]
        # what the trainer fetched early is exactly what the scheduler marks prefetchable
        assert pf["early_rows"] == sim["prefetchable_pulls"] - _first_batch_prefetchable(ds, pl, options)
    # nothing left pending after an epoch, caches within capacity
    for store in many.stores:
        assert store.pending_slots().size == 0
        assert store.cached_ids().size <= options["cache_rows"]


def _first_batch_prefetchable(ds, pl, options, batch_size=12, seed=3):
    """Pulls of an epoch's first batch can't be fetched during a previous step of that epoch."""
    from gmp.simulate import epoch_order
    from gmp.train.herald import PULL_KINDS, RuntimeScheduler

    eng = runtime_scheduler(ds.indptr, ds.indices, pl, batch_size=batch_size, on_demand=options["on_demand"],
                           cache_rows=options["cache_rows"], cache_policy=options.get("cache_policy", "lookahead"),
                           lookahead=options["lookahead"], read_only_replicas=options["read_only_replicas"])
    eng.start_epoch(epoch_order(ds.num_train, seed))
    s = eng.next_batch()
    return int(np.count_nonzero(np.isin(s.event_kind, PULL_KINDS) & (s.event_ready < s.iteration - 1)))


def test_pushes_are_deferred_and_the_pending_copy_is_the_single_worker_value(ctr):
    _, ds = ctr
    n = 3
    data = TrainData(ds)
    pl = random_placement(ds, n, secondaries=0.3)
    opts = dict(on_demand=True, cache_rows=8, read_only_replicas=False, lookahead=0)
    many = Trainer(data, pl, _config(epochs=1, schedule_options=opts), LocalEngine(n))
    one = Trainer(data, random_placement(ds, 1), _config(epochs=1, schedule="naive", batch_size=12 * n),
                  LocalEngine(1))
    steps = many.schedule.num_steps(0)
    deferred = 0
    for _ in range(steps - 1):  # the last step is followed by the epoch-end flush
        many.fit(stop_after_steps=1)
        one.fit(stop_after_steps=1)
        ref = one.embedding_table()
        prim = many.embedding_table()
        pending = np.zeros(ds.num_embeddings, dtype=bool)
        for store in many.stores:
            for slot, gid in zip(store.pending_slots(), store.pending_ids()):
                assert not pending[gid], "two workers hold pending updates of one row"
                pending[gid] = True
                np.testing.assert_allclose(store.read(np.array([slot]))[0].cpu().numpy(), ref[gid], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(prim[~pending], ref[~pending], rtol=1e-9, atol=1e-12)
        assert np.all(np.abs(prim[pending] - ref[pending]).max(axis=1) > 0)  # the primary is behind
        deferred += int(pending.sum())
    assert deferred > 0
    many.fit()
    one.fit()
    np.testing.assert_allclose(many.embedding_table(), one.embedding_table(), rtol=1e-9, atol=1e-12)


def test_store_cache_by_hand():
    from gmp.placement import Placement

    pl = Placement.edge_cut(2, np.zeros(1, dtype=np.int32), np.array([0, 1, 1, 0, 1], dtype=np.int32))
    st = EmbeddingStore(0, pl, row_dim=2, optimizer="adagrad", lr=0.5)
    st.enable_cache()
    assert st.lookup(np.array([0, 1, 3])).tolist() == [0, -1, 1]
    slots = st.cache_insert(np.array([4, 1]))
    assert slots.tolist() == [2, 3] and st.lookup(np.array([1, 4])).tolist() == [3, 2]
    # a pulled row: value and the primary's Adagrad sum arrive together
    st.install_copies(slots, torch.tensor([[1.0, 2.0, 4.0, 0.0], [3.0, 4.0, 0.0, 0.0]]))
    st.apply_copy(np.array([2]), torch.tensor([[2.0, 0.0]]))
    # h = 4 + 4 = 8; x = 1 - 0.5 * 2 / sqrt(8); second coordinate: h = 0, g = 0 -> unchanged
    np.testing.assert_allclose(st.read(np.array([2]))[0].cpu().numpy(), [1 - 1 / np.sqrt(8), 2.0])
    # the copies live in the worker's one device cache, beside its tiered rows when it has them
    assert st.device_cache.tensor.shape[1] == 4 and int(st.device_cache.held.sum()) == 2
    np.testing.assert_allclose(st.read_payload(np.array([2]))[0, 2:].cpu().numpy(), [8.0, 0.0])
    st.mark_pending(np.array([2]))
    assert st.pending_ids().tolist() == [4]
    with pytest.raises(TrainingError, match="pending updates"):
        st.cache_drop(np.array([4]))
    st.mark_pending(np.array([2]), False)
    assert st.cache_drop(np.array([4, 2])) == 1  # 2 is not cached
    assert st.cached_ids().tolist() == [1]
    assert st.cache_insert(np.array([2])).tolist() == [2]  # the lowest free slot
    # a pushed copy overwrites the primary, state included
    st.overwrite_primary(np.array([1]), torch.tensor([[7.0, 8.0, 1.0, 2.0]]))
    np.testing.assert_allclose(st.read_payload(np.array([1]))[0].cpu().numpy(), [7, 8, 1, 2])
    with pytest.raises(TrainingError, match="not primary"):
        st.overwrite_primary(np.array([3]), torch.zeros(1, 4))


def test_cache_and_on_demand_need_staleness_zero(ctr):
    _, ds = ctr
    pl = random_placement(ds, 2)
    with pytest.raises(TrainingError, match="The 'staleness' parameter must be 0 with Herald's copies of remote rows \\(`cache_rows` > 0"):
        Trainer(TrainData(ds), pl, _config(staleness=5, schedule_options={"cache_rows": 4}), LocalEngine(2))
    # without them herald at s > 0 only assigns samples (the store's own consistency)
    Trainer(TrainData(ds), pl, _config(staleness=5), LocalEngine(2))


def test_cli_train_herald_with_cache_and_on_demand_equals_cli_simulate(ctr, tmp_path):
    from gmp.manifest import write_manifest
    from gmp.topology import homogeneous

    path, ds = ctr
    pl = random_placement(ds, 3, secondaries=0.3)
    m = write_manifest(tmp_path / "m", pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                       num_embeddings=ds.num_embeddings, topology=homogeneous(3))
    runner = CliRunner()
    common = ["--dataset", str(path), "--manifest", str(m), "--batch-size", "10", "--seed", "5",
              "--schedule", "herald", "--on-demand", "--cache-rows", "7", "--cache-policy", "lookahead",
              "--lookahead", "2"]
    r = runner.invoke(app, ["train", *common, "--epochs", "1", "--embedding-dim", "4", "--writable-replicas",
                            "--optimizer", "sgd", "--log-every", "5"])
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    rec = recs[-1]
    # a step line counts the scheduler's work ahead so far (it printed 0.0 until the epoch ended)
    step_lines = [x for x in recs if x["kind"] == "step"]
    assert step_lines and all(x["prefetch"]["scheduler_produce_s"] > 0 for x in step_lines)
    assert step_lines[-1]["prefetch"]["scheduler_produce_s"] <= rec["prefetch"]["scheduler_produce_s"]
    r = runner.invoke(app, ["simulate", *common, "--json"])
    assert r.exit_code == 0, r.output
    sim = json.loads(r.output)
    assert {k: rec["herald"][k] for k in KINDS} == {k: sim[k] for k in KINDS}
    assert sim["pushes"] > sim["push_sync"]  # some pushes were deferred (plan, eviction or flush)
    assert set(rec["prefetch"]) >= {"early_rows", "late_rows", "scheduler_stall_s", "scheduler_overlap"}
    # the cache flag needs a cache: herald's (remote rows) or a tiered table's (own rows)
    r = runner.invoke(app, ["train", "--dataset", str(path), "--manifest", str(m), "--schedule", "naive",
                            "--cache-rows", "3"])
    assert r.exit_code == 2 and "--cache-rows drives the device cache of --table-location host|disk" in r.output
    r = runner.invoke(app, ["train", "--dataset", str(path), "--manifest", str(m), "--schedule", "naive",
                            "--on-demand"])
    assert r.exit_code == 2 and "--on-demand/--no-on-demand applies to --schedule 'herald' only" in r.output


@pytest.mark.distributed
def test_distributed_engine_with_cache_and_on_demand(ctr, tmp_path):
    """torchrun, 3 gloo processes, SGD and Adagrad with cache + on-demand + early fetch:
    every rank's primaries equal a single worker's model; counts equal the simulator's."""
    from test_train_distributed import HERE, torchrun

    path, ds = ctr
    n = 3
    pl = random_placement(ds, n, secondaries=0.3, seed=4)
    save_placement_npz(tmp_path / "pl.npz", pl)
    opts = {"lookahead": 2, "cache_rows": 5, "on_demand": True, "read_only_replicas": False}
    base = dict(model="wdl", embedding_dim=4, lr=0.1, batch_size=10, epochs=2, schedule="herald",
                dtype="float64", hidden=[8], seed=4, schedule_options=opts)
    configs = [dict(base, optimizer="sgd"), dict(base, optimizer="adagrad", schedule_options=dict(opts, lookahead=0))]
    res = torchrun(n, [str(HERE / "dist_worker.py"), str(path), str(tmp_path / "pl.npz"), str(tmp_path),
                       json.dumps(configs)])
    assert res.returncode == 0, res.stderr[-3000:]
    for i, cfg in enumerate(configs):
        one = Trainer(TrainData(ds), random_placement(ds, 1),
                      make_config(**dict(cfg, schedule="naive", batch_size=10 * n, schedule_options={})),
                      LocalEngine(1))
        one.fit()
        assert_rank_rows_match(tmp_path / str(i), n, one.embedding_table(), ds.num_embeddings)
        o = cfg["schedule_options"]
        sim = simulate_with(ds.indptr, ds.indices, pl, num_train=ds.num_train, batch_size=10, schedule="herald",
                       on_demand=True, cache_rows=o["cache_rows"], lookahead=o["lookahead"],
                       cache_policy="lookahead", read_only_replicas=False, seed=4).to_json()
        rec = json.loads((tmp_path / str(i) / "records.json").read_text())[0]
        h = rec["herald"]
        assert {k: h[k] for k in KINDS} == {k: sim[k] for k in KINDS}
        if o["lookahead"]:  # the asynchronous early exchange delivered every prefetchable pull
            assert rec["prefetch"]["early_rows"] == h["prefetched_rows"] > 0
            assert h["prefetched_rows"] == sim["prefetchable_pulls"] - _first_batch_prefetchable(
                ds, pl, dict(o, on_demand=True, cache_rows=o["cache_rows"]), batch_size=10, seed=4)


@pytest.mark.parametrize("lookahead", [0, 2])
def test_herald_ids_travel_as_int32_as_the_hetgmp_paths_do(ctr, lookahead):
    """Herald's ids went out as int64 (8 bytes each) while the JSON log's table and the HET-GMP path use int32
    for datasets of fewer than 2^31 ids: one id per late pull (an early one needs none) and per push."""
    _, ds = ctr
    pl = random_placement(ds, 2)
    options = dict(on_demand=True, cache_rows=5, read_only_replicas=False, lookahead=lookahead)
    rec = Trainer(TrainData(ds), pl, _config(epochs=1, schedule_options=options), LocalEngine(2)).fit()[0]
    h = rec["herald"]
    assert h["pulls"] > h["prefetched_rows"] and h["pushes"] > 0 and (h["prefetched_rows"] > 0) == (lookahead > 0)
    assert rec["bytes"]["ids_clocks"] == 4 * (h["pulls"] - h["prefetched_rows"] + h["pushes"])
