"""Tiered tables in the trainer (``--table-location host|disk``, gmp.train.tiers): any tier and any
cache size trains the same model as the all-on-device table, bit for bit, with caches far smaller
than the table (evictions every step); the JSON log's ``tiers`` object; checkpoints of tiered runs."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gmp.comm.local import LocalEngine
from gmp.datasets.format import load_dataset
from gmp.errors import TrainingError
from train_data import random_placement
from gmp.train import TrainConfig, TrainData, Trainer
from gmp.train.herald import HeraldOptions
from gmp.train.tiers import TierOptions
from gmp.datasets.format import FieldInfo, write_dataset


@pytest.fixture(autouse=True)
def _deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def make_flat_dataset(out, *, num_samples=300, field_sizes=(60, 90, 40), seed=0):
    """Ids drawn uniformly in each field (many distinct rows per step: small caches must evict)."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(field_sizes)])
    indices = (offsets[:-1] + rng.integers(0, np.asarray(field_sizes), size=(num_samples, len(field_sizes))))
    fields = [FieldInfo("I0", "dense", 0, None, column=0)]
    fields += [FieldInfo(f"C{f}", "categorical", int(s), int(offsets[f])) for f, s in enumerate(field_sizes)]
    write_dataset(out, indptr=np.arange(num_samples + 1) * len(field_sizes), indices=indices.reshape(-1),
                  labels=(rng.random(num_samples) < 0.3).astype(np.float32),
                  dense=rng.normal(size=(num_samples, 1)).astype(np.float32), fields=fields,
                  num_embeddings=int(offsets[-1]), source={"format": "test"}, test_fraction=0.25)
    return out


@pytest.fixture(scope="module")
def ctr(tmp_path_factory):
    # 190 ids; a step of 3 x 8 samples touches ~50-70 of them
    path = make_flat_dataset(tmp_path_factory.mktemp("tiers") / "ds")
    return path, load_dataset(path)


placement = functools.partial(random_placement, seed=5)


def config(**kw):
    base = dict(model="wdl", embedding_dim=4, optimizer="adagrad", lr=0.1, batch_size=8, epochs=2,
                schedule="naive", hidden=(8,), seed=3)
    base.update(kw)
    return TrainConfig(**base)


def fit(ds, pl, cfg):
    tr = Trainer(TrainData(ds), pl, cfg, LocalEngine(pl.num_workers))
    records = tr.fit()
    table = tr.embedding_table()
    dense = [p.detach().clone() for p in tr.model.parameters()]
    return tr, records, table, dense


def assert_bit_equal(a, b):
    _, ra, ta, da = a
    _, rb, tb, db = b
    np.testing.assert_array_equal(ta, tb)
    for p, q in zip(da, db):
        assert torch.equal(p, q)
    for x, y in zip(ra, rb):
        assert x["train_loss"] == y["train_loss"] and x["test_auc"] == y["test_auc"]
        assert x["bytes"] == y["bytes"] and x["remote_rows_read"] == y["remote_rows_read"]


@pytest.mark.parametrize("n, optimizer, schedule, location, lookahead, secondaries, staleness", [
    (1, "sgd", "naive", "host", 0, 0.0, 0.0),
    (1, "adagrad", "naive", "disk", 4, 0.0, 0.0),
    (3, "adagrad", "static", "host", 2, 0.0, 0.0),
    (3, "sgd", "naive", "disk", 0, 0.4, 0.0),
    (3, "adagrad", "naive", "disk", 8, 0.4, 0.0),
    (3, "adagrad", "static", "host", 3, 0.4, 2.0),  # s > 0 equals the device run with the same s
    (2, "sgd", "naive", "disk", 1, 0.4, float("inf")),
])
def test_tiered_run_equals_the_device_run_bit_for_bit(ctr, tmp_path, n, optimizer, schedule, location,
                                                      lookahead, secondaries, staleness):
    _, ds = ctr
    pl = placement(ds, n, secondaries=secondaries)
    dev = fit(ds, pl, config(optimizer=optimizer, schedule=schedule, staleness=staleness))
    num_primary = np.bincount(pl.embedding_primary, minlength=n)
    cache = 30 if n == 3 else 40  # far below the table (190 rows; ~63 primaries per worker of 3)
    tiers = TierOptions(table_location=location, cache_rows=cache, lookahead=lookahead,
                        tier_dir=str(tmp_path) if location == "disk" else None)
    tiered = fit(ds, pl, config(optimizer=optimizer, schedule=schedule, staleness=staleness, tiers=tiers))
    assert_bit_equal(tiered, dev)
    rec = tiered[1][-1]["tiers"]
    assert rec["table_location"] == location and rec["cache_rows"] == min(cache, int(num_primary.max()))
    assert rec["rows_written_back"] > 0 and rec["misses"] > rec["cache_rows"]  # it evicted, every epoch
    row_bytes = 4 * 5 * (2 if optimizer == "adagrad" else 1)  # wdl rows: dim 4 + the linear weight
    assert rec["bytes_loaded"] == (rec["rows_loaded"] + rec["victim_rows_read"]) * row_bytes
    assert rec["bytes_written_back"] == (rec["rows_written_back"] + rec["victim_rows_written"]) * row_bytes
    assert "tiers" not in dev[1][-1]
    if location == "disk":  # the files go with the trainer
        tiered[0].stores[0].close()


def test_herald_at_s0_with_a_tiered_table_equals_the_device_run(ctr, tmp_path):
    """Herald's copies (cache, pending updates, early fetch) stay on the device; its pushes of pending
    copies reach primaries outside the step's pinned rows (the victim path)."""
    _, ds = ctr
    pl = placement(ds, 3, secondaries=0.3)
    herald = HeraldOptions(on_demand=True, cache_rows=20, lookahead=2, read_only_replicas=False)
    dev = fit(ds, pl, config(schedule="herald", herald=herald))
    tiers = TierOptions(table_location="disk", cache_rows=30, lookahead=2, cache_policy="lru", tier_dir=str(tmp_path))
    tiered = fit(ds, pl, config(schedule="herald", herald=herald, tiers=tiers))
    assert_bit_equal(tiered, dev)
    assert tiered[1][-1]["herald"] == dev[1][-1]["herald"]
    assert tiered[1][-1]["tiers"]["victim_rows_written"] > 0
    # one device cache: Herald's copies are held in the tier's cache, beside the worker's own rows
    tr = tiered[0]
    for store in tr.stores:
        assert store.device_cache is store.tier.cache
        held = np.flatnonzero(store.device_cache.held)
        assert held.size == store.cached_ids().size <= 20  # the scheduler's cache after the last step
        assert held.size == 0 or not np.any(store.device_cache.row_of[held] >= 0)
    assert tiered[1][-1]["tiers"]["peak_held_rows"] > 0


def test_one_lookahead_thread_serves_herald_and_the_tier(ctr, tmp_path, monkeypatch):
    """Herald's run-ahead and the tier's prefetch are one thread (StepFeeder): count the threads
    started while training with both."""
    import threading

    _, ds = ctr
    pl = placement(ds, 2)
    started = []
    real = threading.Thread.start

    def start(self):
        started.append(self.name)
        return real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    herald = HeraldOptions(on_demand=True, cache_rows=10, lookahead=3, read_only_replicas=False)
    tiers = TierOptions(table_location="host", cache_rows=40, lookahead=3)
    fit(ds, pl, config(schedule="herald", herald=herald, tiers=tiers, epochs=1))
    assert started and set(started) == {"gmp-lookahead"} and len(started) == 1  # one epoch, one thread
    with pytest.raises(TrainingError, match="'lookahead'.*the same"):
        config(schedule="herald", herald=herald, tiers=TierOptions(table_location="host", lookahead=4))


def test_one_worker_with_a_small_cache_moves_rows_and_holds_less_on_the_device(ctr):
    """cDLRM's single-device case: the device holds the cache, not the table."""
    _, ds = ctr
    pl = placement(ds, 1)
    tr, recs, _, _ = fit(ds, pl, config(epochs=1, tiers=TierOptions(table_location="host", cache_rows=50)))
    dev_tr, dev_recs, _, _ = fit(ds, pl, config(epochs=1))
    t = recs[0]["tiers"]
    assert t["hits"] + t["misses"] > 0 and 0 < t["hit_rate"] < 1
    row_bytes = 4 * 5 * 2
    assert t["peak_bytes"]["host"] == ds.num_embeddings * row_bytes
    mem, dev_mem = tr.memory()[0], dev_tr.memory()[0]
    assert mem["table_bytes"] == mem["optimizer_bytes"] == 0
    assert mem["tier"]["cache_bytes"] == 50 * row_bytes
    assert mem["total_bytes"] == dev_mem["total_bytes"] - (ds.num_embeddings - 50) * row_bytes


def test_a_step_larger_than_the_cache_is_refused_in_one_line(ctr):
    _, ds = ctr
    tr = Trainer(TrainData(ds), placement(ds, 1), config(tiers=TierOptions(table_location="host", cache_rows=5)),
                 LocalEngine(1))
    with pytest.raises(TrainingError, match=r"distinct rows but the cache holds 5; the largest step of the epoch "
                                            r"uses \d+: raise cache_rows"):
        tr.fit()


@pytest.mark.parametrize("kw, match", [
    (dict(table_location="ram"), r"The 'table_location' parameter must be one of"),
    (dict(cache_rows=10), r"The 'cache_rows' parameter applies to table_location='host' or 'disk' only"),
    (dict(table_location="host", cache_rows=10, cache_bytes=100), r"cannot be combined with `cache_rows`"),
    (dict(table_location="host", tier_dir="/tmp"), r"'tier_dir' parameter applies to table_location='disk'"),
    (dict(tier_dir="/tmp"), r"'tier_dir' parameter applies to table_location='disk' only, got table_location='dev"),
    (dict(table_location="disk", cache_rows=-1), r"The 'cache_rows' parameter must be an int >= 0"),
])
def test_tier_options_are_validated(kw, match):
    with pytest.raises(TrainingError, match=match):
        TierOptions(**kw)


def test_cache_bytes_and_the_default_cache():
    assert TierOptions(table_location="host", cache_bytes=1000).capacity(500, 40) == 25
    assert TierOptions(table_location="host").capacity(500, 40) == 50  # 10% of the primaries
    with pytest.raises(TrainingError, match="at least one row of 40 bytes"):
        TierOptions(table_location="host", cache_bytes=39).capacity(500, 40)


def test_checkpoint_of_a_tiered_run_resumes_exactly_and_into_another_location(ctr, tmp_path, monkeypatch):
    """Interrupt a disk run, resume it on the host tier (and a device run from the disk run's
    checkpoint): the same model as an uninterrupted device run. The checkpoint streams the master
    (cache flushed first) into worker-NNNNN.rows without materialising the table, and resuming
    streams it back; rows read by global id are the trainer's rows at the checkpoint."""
    from gmp.train import checkpoint as ck
    from gmp.train.tiers import TieredTable

    _, ds = ctr
    pl = placement(ds, 2, secondaries=0.3)
    dev = fit(ds, pl, config())
    disk = TierOptions(table_location="disk", cache_rows=40, lookahead=3, tier_dir=str(tmp_path / "t"))
    first = Trainer(TrainData(ds), pl, config(tiers=disk), LocalEngine(2))
    first.fit(stop_after_steps=11)
    assert first.interrupted
    at_interrupt = first.embedding_table()

    def no_materialising(self):
        raise AssertionError("a checkpoint must stream the tier, not read it whole")

    with monkeypatch.context() as m:
        m.setattr(TieredTable, "read_all", no_materialising)
        m.setattr(TieredTable, "write_all", no_materialising, raising=False)
        ck.save_checkpoint(first, tmp_path / "ck", dataset_sha256="d", placement_sha="p")
    path, head = ck.find_checkpoint(tmp_path / "ck")
    for w, store in enumerate(first.stores):
        obj, rows = ck.open_worker_rows(path, head, w)
        assert rows.num_rows == store.num_primary and rows.width == 2 * store.row_dim  # Adagrad: value + sum
        assert obj["store"]["table"].shape[0] == store.num_rows - store.num_primary and "opt_state" not in obj["store"]
        rows.close()
    gids = np.array([7, 0, ds.num_embeddings - 1, 3])
    values, state = ck.read_primary_rows(tmp_path / "ck", gids)
    np.testing.assert_array_equal(values.astype(np.float64), at_interrupt[gids])
    assert state.shape == values.shape and np.all(state >= 0)
    for tiers in (TierOptions(table_location="host", cache_rows=45), None):
        second = Trainer(TrainData(ds), pl, config(tiers=tiers), LocalEngine(2))
        with monkeypatch.context() as m:
            m.setattr(TieredTable, "read_all", no_materialising)
            ck.load_checkpoint(second, tmp_path / "ck", dataset_sha256="d", placement_sha="p")
        second.fit()
        np.testing.assert_array_equal(second.embedding_table(), dev[2])
        for p, q in zip(second.model.parameters(), dev[3]):
            assert torch.equal(p.detach(), q)


@pytest.mark.parametrize("schedule, lookahead", [("naive", 0), ("naive", 3), ("herald", 2)])
def test_an_interrupted_and_resumed_epoch_counts_as_the_uninterrupted_one(ctr, tmp_path, schedule, lookahead):
    """The epoch record of a run interrupted mid-epoch (checkpoint, new trainer, resume) carries the tier
    counters of the steps before the interrupt: every step's rows are looked up once (hits + misses as
    uninterrupted; steps loaded ahead but not trained are not counted twice), and Herald's early fetch
    of the first resumed step counts as in the uninterrupted run (transfers and bytes equal). With
    lookahead 0 the checkpoint's counters are exactly the uninterrupted run's after that step."""
    from gmp.train import checkpoint as ck

    _, ds = ctr
    pl = placement(ds, 2, secondaries=0.3)
    herald = (HeraldOptions(on_demand=True, cache_rows=20, lookahead=lookahead, read_only_replicas=False)
              if schedule == "herald" else None)

    def trainer(name):
        tiers = TierOptions(table_location="disk", cache_rows=40, lookahead=lookahead, tier_dir=str(tmp_path / name))
        return Trainer(TrainData(ds), pl, config(schedule=schedule, herald=herald, epochs=1, log_every=1, tiers=tiers),
                       LocalEngine(2))

    whole = trainer("u")
    steps: list = []
    uninterrupted = whole.fit(on_record=steps.append)[-1]
    first = trainer("i")
    first.fit(stop_after_steps=9)
    carried = [s.tier.cache.stats.to_json() for s in first.stores]
    ck.save_checkpoint(first, tmp_path / "ck", dataset_sha256="d", placement_sha="p")
    second = trainer("r")
    ck.load_checkpoint(second, tmp_path / "ck", dataset_sha256="d", placement_sha="p")
    resumed = second.fit()[-1]
    u, r = uninterrupted["tiers"], resumed["tiers"]
    assert r["hits"] + r["misses"] == u["hits"] + u["misses"] > 0
    assert resumed["bytes"] == uninterrupted["bytes"] and resumed["remote_rows_read"] == uninterrupted["remote_rows_read"]
    if herald is not None:
        assert resumed["herald"] == uninterrupted["herald"] and resumed["herald"]["prefetched_rows"] > 0
    # every distinct id of a step is looked up once, at its primary: the first 9 steps' lookups
    plain = Trainer(TrainData(ds), pl, config(schedule=schedule, herald=herald, epochs=1), LocalEngine(2))
    gen = plain.protocol.steps(0, 0)
    looked = sum(np.unique(plain.data.gather(np.concatenate([np.asarray(x) for x in step.samples]))[1]).size
                 for step, _ in zip(gen, range(9)))
    gen.close()
    assert sum(c["hits"] + c["misses"] for c in carried) == looked
    before = steps[8]["tiers"]  # the uninterrupted run after step 9
    if lookahead == 0:  # inline loads: deterministic, and the interrupted run's counters are the same
        for key in ("hits", "misses", "rows_loaded", "rows_written_back", "victim_rows_read"):
            assert sum(c[key] for c in carried) == before[key], key
    for t in (whole, first, second):
        t.close()


def test_a_schema_2_checkpoint_resumes_into_a_tiered_run(ctr, tmp_path):
    """Schema 2 kept the primaries in worker-NNNNN.pt: rewrite a checkpoint that way by hand and
    resume it on the disk tier (the one-step upgrade): the uninterrupted run's model."""
    import json as _json

    from gmp.train import checkpoint as ck

    _, ds = ctr
    pl = placement(ds, 2, secondaries=0.3)
    dev = fit(ds, pl, config())
    first = Trainer(TrainData(ds), pl, config(), LocalEngine(2))
    first.fit(stop_after_steps=7)
    ck.save_checkpoint(first, tmp_path / "ck", dataset_sha256="d", placement_sha="p")
    path, head = ck.find_checkpoint(tmp_path / "ck")
    for w in range(2):
        obj, rows = ck.open_worker_rows(path, head, w)
        prim = torch.from_numpy(rows(0, rows.num_rows).copy())
        rows.close()
        store = dict(obj["store"])
        store["table"] = torch.cat([prim[:, :rows.row_dim], store["table"]])
        store["opt_state"] = prim[:, rows.row_dim:]
        obj = {k: v for k, v in obj.items() if k != "primary_rows"}
        obj["store"] = store
        torch.save(ck.to_safe(obj), path / f"worker-{w:05d}.pt")
        (path / f"worker-{w:05d}.rows").unlink()
    head = {**head, "schema_version": 2,
            "files": {n: (path / n).stat().st_size for n in head["files"] if not n.endswith(".rows")}}
    (path / "checkpoint.json").write_text(_json.dumps(head))
    disk = TierOptions(table_location="disk", cache_rows=40, tier_dir=str(tmp_path / "t"))
    second = Trainer(TrainData(ds), pl, config(tiers=disk), LocalEngine(2))
    assert ck.load_checkpoint(second, tmp_path / "ck", dataset_sha256="d", placement_sha="p")["schema_version"] == 2
    second.fit()
    np.testing.assert_array_equal(second.embedding_table(), dev[2])


def test_cli_table_location_flags(ctr, tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    path, _ = ctr
    args = ["train", "--dataset", str(path), "--batch-size", "8", "--epochs", "1", "--embedding-dim", "4"]
    dev = CliRunner().invoke(app, [*args, "--log-json", str(tmp_path / "d.jsonl")])
    assert dev.exit_code == 0, dev.output
    out = CliRunner().invoke(app, [*args, "--table-location", "disk", "--tier-dir", str(tmp_path / "tiers"),
                                   "--cache-bytes", "4000", "--lookahead", "8", "--log-json", str(tmp_path / "t.jsonl")])
    assert out.exit_code == 0, out.output
    d = json.loads((tmp_path / "d.jsonl").read_text().splitlines()[-1])  # the epoch line, after the settings
    t = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[-1])
    assert t["test_auc"] == d["test_auc"] and t["train_loss"] == d["train_loss"]
    assert t["tiers"]["cache_rows"] == 4000 // (4 * 5 * 2) and t["tiers"]["lookahead"] == 8
    assert not list((tmp_path / "tiers").glob("*.rows"))  # the disk tier's file is removed
    bad = CliRunner().invoke(app, [*args, "--cache-bytes", "4000"])
    assert bad.exit_code != 0
    assert "--cache-bytes applies to --table-location 'host' or 'disk' only" in bad.output
    bad = CliRunner().invoke(app, [*args, "--cache-rows", "40"])
    assert bad.exit_code != 0 and "Traceback" not in bad.output
    assert "--cache-rows drives the device cache of --table-location host|disk" in bad.output


@pytest.mark.parametrize("herald", [False, True])
def test_the_cache_rows_advice_is_a_value_that_runs(ctr, tmp_path, herald):
    """A cache smaller than the run's largest step is refused before training, naming a --cache-rows that
    passes: with Herald, whose copies keep --cache-rows // 2 of the cache, the own rows need 2 n - 1 for a
    step of n rows."""
    import re

    from typer.testing import CliRunner

    from cli.main import app

    path, _ = ctr
    args = ["train", "--dataset", str(path), "--batch-size", "8", "--epochs", "1", "--embedding-dim", "4",
            "--table-location", "host", "--lookahead", "2"]
    if herald:
        args += ["--schedule", "herald", "--on-demand"]
    small = CliRunner().invoke(app, [*args, "--cache-rows", "10"])
    assert small.exit_code != 0 and "Traceback" not in small.output
    found = re.search(r"--cache-rows leaves each worker's cache (\d+) rows for its own tiered rows, but the largest "
                      r"step of the run uses (\d+); raise --cache-rows to at least (\d+)", small.output)  # the flag
    assert found, small.output
    holds, largest, advised = map(int, found.groups())
    assert holds == (10 - 10 // 2 if herald else 10) < largest
    assert advised == (2 * largest - 1 if herald else largest)
    ok = CliRunner().invoke(app, [*args, "--cache-rows", str(advised)])
    assert ok.exit_code == 0, ok.output
    zero = CliRunner().invoke(app, [*args, "--cache-rows", "0"])  # not silently the default
    assert zero.exit_code != 0 and "Traceback" not in zero.output
    assert "cache" in zero.output and "got 0" in zero.output and "leave it out" in zero.output
    zero_bytes = CliRunner().invoke(app, [*args, "--cache-bytes", "0"])  # nor --cache-bytes 0
    assert zero_bytes.exit_code != 0 and "Traceback" not in zero_bytes.output
    assert "--cache-bytes" in zero_bytes.output and "got 0" in zero_bytes.output, zero_bytes.output


@pytest.mark.distributed
def test_tiered_runs_under_torchrun_equal_the_device_run(ctr, tmp_path):
    """3 gloo processes, secondaries, s = 0: host and disk tiers with small caches and a look-ahead
    give every rank the same primaries and dense model as the device run, bit for bit."""
    from test_train_distributed import HERE, torchrun
    from train_data import save_placement_npz

    path, ds = ctr
    pl = placement(ds, 3, secondaries=0.3)
    save_placement_npz(tmp_path / "pl.npz", pl)
    base = dict(model="wdl", embedding_dim=4, optimizer="adagrad", lr=0.1, batch_size=8, epochs=2,
                schedule="naive", hidden=[8], seed=3)
    configs = [base, {**base, "tiers": dict(table_location="host", cache_rows=30, lookahead=4)},
               {**base, "tiers": dict(table_location="disk", cache_rows=30, lookahead=0,
                                      tier_dir=str(tmp_path / "tiers"))},
               {**base, "optimizer": "sgd"},
               {**base, "optimizer": "sgd", "tiers": dict(table_location="disk", cache_rows=30, lookahead=16,
                                                          tier_dir=str(tmp_path / "tiers"))}]
    res = torchrun(3, [str(HERE / "dist_worker.py"), str(path), str(tmp_path / "pl.npz"), str(tmp_path),
                       json.dumps(configs)])
    assert res.returncode == 0, res.stderr[-3000:]
    for dev, tiered in ((0, 1), (0, 2), (3, 4)):
        for r in range(3):
            a = np.load(tmp_path / str(dev) / f"rank{r}.npz")
            b = np.load(tmp_path / str(tiered) / f"rank{r}.npz")
            for key in ("ids", "rows", "dense"):
                np.testing.assert_array_equal(a[key], b[key])
        ra = json.loads((tmp_path / str(dev) / "records.json").read_text())
        rb = json.loads((tmp_path / str(tiered) / "records.json").read_text())
        for x, y in zip(ra, rb):
            assert x["train_loss"] == y["train_loss"] and x["test_auc"] == y["test_auc"]
            assert y["tiers"]["rows_written_back"] > 0
    assert not list((tmp_path / "tiers").glob("*.rows"))


def test_a_missing_tier_dir_is_created_and_removed_with_the_run(ctr, tmp_path):
    """--tier-dir a/b/c: the run creates a, b and c and removes them when it ends, or fails; a directory
    that holds anything else (the user's file) is kept."""
    _, ds = ctr
    pl = placement(ds, 2)
    for cache_rows, fails in ((40, False), (5, True)):  # 5 rows: a step does not fit, the run fails
        tiers = TierOptions(table_location="disk", cache_rows=cache_rows, tier_dir=str(tmp_path / "a" / "b" / "c"))
        tr = Trainer(TrainData(ds), pl, config(epochs=1, tiers=tiers), LocalEngine(2))
        assert len(list((tmp_path / "a" / "b" / "c").glob("*.rows"))) == 2
        if fails:
            with pytest.raises(TrainingError, match="distinct rows but the cache holds"):
                tr.fit()
        else:
            tr.fit()
        tr.close()
        assert not (tmp_path / "a").exists()
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "mine.txt").write_text("keep")
    tr = Trainer(TrainData(ds), pl, config(epochs=1, tiers=TierOptions(table_location="disk", cache_rows=40,
                                                                       tier_dir=str(tmp_path / "a" / "b" / "c"))),
                 LocalEngine(2))
    tr.close()
    assert sorted(p.name for p in (tmp_path / "a").rglob("*")) == ["b", "mine.txt"]


def test_tier_files_of_killed_runs_are_removed_on_start_and_nothing_else(ctr, tmp_path, caplog):
    """A run killed with kill -9 leaves worker-NNNNN-PID.rows; the next run in the folder removes the
    files of dead PIDs whose lock is free, names matching exactly, and says so in one line."""
    import fcntl
    import logging
    import subprocess

    _, ds = ctr
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    folder = tmp_path / "tiers"
    folder.mkdir()
    names = {f"worker-00000-{dead.pid}.rows": True, f"worker-00003-{dead.pid}.rows": True,  # stale
             f"worker-00001-{live.pid}.rows": False,  # a live run
             f"worker-00002-{dead.pid}.rows.bak": False, f"worker-0002-{dead.pid}.rows": False,  # other names
             f"xworker-00002-{dead.pid}.rows": False, "notes.txt": False,
             f"worker-00004-{dead.pid + 1_000_000_000}.rows": True}
    for name in names:
        (folder / name).write_bytes(b"x" * 100)
    held = f"worker-00005-{dead.pid}.rows"  # dead PID, but locked: a live run on another machine
    (folder / held).write_bytes(b"x")
    fd = os.open(folder / held, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    (folder / f"worker-00006-{dead.pid}.rows").symlink_to(folder / "notes.txt")
    try:
        with caplog.at_level(logging.WARNING, logger="gmp.train"):
            tr = Trainer(TrainData(ds), placement(ds, 1), config(epochs=1, tiers=TierOptions(
                table_location="disk", cache_rows=40, tier_dir=str(folder))), LocalEngine(1))
        left = {p.name for p in folder.iterdir()}
        assert left == {n for n, stale in names.items() if not stale} | {
            held, f"worker-00006-{dead.pid}.rows", f"worker-00000-{os.getpid()}.rows"}
        lines = [r.getMessage() for r in caplog.records if "killed runs" in r.getMessage()]
        assert lines == [f"removed 3 disk-tier files of killed runs (0.0 MB) from {folder}"]
        tr.close()
    finally:
        os.close(fd)
        live.kill()
        live.wait()


RELEASE_INSIDE_MAKE_DIRS = """
import sys
from pathlib import Path
from gmp.train.tiers import files

d = Path(sys.argv[1]) / "a" / "b"
files.make_dirs(d)  # the first tier's directories
real, fired = files._owned_above, []


def collector_here(directory):  # the garbage collector runs the first tier's finalizer on an allocation here
    if not fired:
        fired.append(1)
        files.release_dirs(d)
    return real(directory)


files._owned_above = collector_here
files.make_dirs(d)  # the second tier, in the same directory
files._owned_above = real
assert fired and d.is_dir(), "the second tier's directory was removed"
files.release_dirs(d)
assert not d.parent.exists(), "the last tier's close left its directories"
print("ok")
"""


def test_a_tier_released_by_the_garbage_collector_inside_make_dirs_does_not_deadlock(tmp_path):
    """A disk tier's finalizer (its table collected) runs wherever the garbage collector does, here inside
    make_dirs' critical section: it waited there for the lock its own thread held, forever (a test run hung
    in test_a_schema_2_checkpoint_resumes_into_a_tiered_run). In a process of its own, so that a hang fails
    this test by its timeout and leaves the suite's lock alone."""
    import subprocess

    res = subprocess.run([sys.executable, "-c", RELEASE_INSIDE_MAKE_DIRS, str(tmp_path)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_the_checkpoints_flush_counts_in_the_epoch_it_ends(ctr, tmp_path, monkeypatch):
    """The write-backs of an epoch-end checkpoint's flush were counted in no epoch: rows_written_back and
    bytes_written_back now count every row the caches write to the master (victim writes apart), the
    checkpoint's flush in the epoch it ends; measured here at the master itself (a disk file: every write to
    it goes through DiskRows.write)."""
    from gmp.manifest import write_manifest
    from gmp.topology import homogeneous
    from gmp.train.run import train
    from gmp.train.tiers import DiskRows

    path, ds = ctr
    man = tmp_path / "m2"
    write_manifest(man, placement(ds, 2), dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                   num_embeddings=ds.num_embeddings, topology=homogeneous(2), metrics={})
    written = []
    write = DiskRows.write

    def counted(self, rows, values):
        written.append((len(rows), values.nbytes))
        return write(self, rows, values)

    monkeypatch.setattr(DiskRows, "write", counted)
    cfg = config(epochs=3, tiers=TierOptions(table_location="disk", cache_rows=60, tier_dir=str(tmp_path / "t")))
    runs = {}
    for name, where in (("plain", None), ("saved", tmp_path / "ck")):
        written.clear()
        runs[name] = records = train(path, man, cfg, checkpoint_dir=where)
        rows = sum(r["tiers"]["rows_written_back"] + r["tiers"]["victim_rows_written"] for r in records)
        assert rows == sum(n for n, _ in written), name
        assert sum(r["tiers"]["bytes_written_back"] for r in records) <= sum(b for _, b in written)
    # epoch 1 alike up to its end, where the checkpoint's flush adds its write-backs
    first, plain = runs["saved"][0]["tiers"], runs["plain"][0]["tiers"]
    assert (first["hits"], first["misses"]) == (plain["hits"], plain["misses"])
    assert first["rows_written_back"] > plain["rows_written_back"]
    assert first["bytes_written_back"] - plain["bytes_written_back"] == \
        (first["rows_written_back"] - plain["rows_written_back"]) * (4 + 1) * 2 * 4  # wdl dim 4, Adagrad, float32
