"""The trainer follows a placement change (issue 18): resume on the next day's data and manifest.

The reference is plain PyTorch on one full table that trains day 0's global batches and
then day 1's (tests/train_data.py's loop, continued over two datasets): independent of the
checkpoint, migration, store and exchange code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gmp.comm.local import LocalEngine
from gmp.constants import ADAGRAD_EPS
from gmp.datasets.format import FieldInfo, load_dataset, write_dataset
from gmp.errors import TrainingError
from gmp.manifest import load_manifest
from gmp.partition.incremental import created_rows, moved_rows
from gmp.train import TrainConfig, TrainData, Trainer
from gmp.train.checkpoint import placement_sha256, save_checkpoint
from gmp.train.migrate import resume_training
from gmp.train.models import Batch, bce_sum, make_model
from gmp.train.run import train
from gmp.train.schedule import NaiveSchedule
from gmp.train.store import initial_rows
from train_data import make_ctr_dataset, random_placement

GLOBAL_BATCH = 24


@pytest.fixture(autouse=True)
def _deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def next_day(prev: Path, out: Path, *, new_per_field=(2, 3, 2), num_samples=150, seed=1) -> Path:
    """A dataset extending ``prev`` as ``gmp data import --extend`` would: every field keeps its ids and
    gains ``new_per_field`` ids after ``prev``'s ``num_embeddings``; header names ``prev`` as parent."""
    ds = load_dataset(prev)
    rng = np.random.default_rng(seed)
    start, fields, new_ranges, pools = ds.num_embeddings, [], [], []
    for f, k in zip(ds.categorical_fields, new_per_field):
        ranges = tuple(tuple(r) for r in f.id_ranges) + ((start, start + k),)
        new_ranges.append([start, start + k])
        start += k
        fields.append(FieldInfo(f.name, f.kind, f.num_values + k, f.offset, ranges=ranges))
        pools.append(np.concatenate([np.arange(a, b) for a, b in ranges]))
    rows = []
    for _ in range(num_samples):
        ids = []
        for f, pool in zip(fields, pools):
            m = 1 + (rng.integers(0, 3) if f.kind == "multi" else 0)
            ids.extend(int(x) for x in np.unique(pool[np.minimum(rng.zipf(1.5, m) - 1, pool.size - 1)]))
        rows.append(sorted(ids))
    dense_fields = [FieldInfo(f.name, "dense", 0, None, column=f.column) for f in ds.fields if f.kind == "dense"]
    write_dataset(out, indptr=np.cumsum([0] + [len(r) for r in rows]), indices=np.array([i for r in rows for i in r]),
                  labels=(rng.random(num_samples) < 0.3).astype(np.float32),
                  dense=rng.normal(size=(num_samples, ds.num_dense)).astype(np.float32),
                  fields=dense_fields + fields, num_embeddings=start, source={"format": "test"}, test_fraction=0.2,
                  extra={"parent": {"sha256": ds.sha256, "num_embeddings": ds.num_embeddings, "path": str(prev)},
                         "new_id_ranges": new_ranges})
    return out


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    root = tmp_path_factory.mktemp("days")
    d0 = make_ctr_dataset(root / "d0", num_samples=160)
    d1 = next_day(d0, root / "d1", seed=1)
    d2 = next_day(d1, root / "d2", seed=2, new_per_field=(1, 1, 1))
    return [d0, d1, d2]


def config(**kw):
    base = dict(model="wdl", embedding_dim=4, optimizer="adagrad", lr=0.1, batch_size=GLOBAL_BATCH, epochs=1,
                schedule="naive", dtype="float64", hidden=(8,), seed=3)
    base.update(kw)
    return TrainConfig(**base)




def reference_days(paths, *, optimizer, cfg):
    """Plain PyTorch: one table over the last day's ids, each day's naive global batches in order."""
    last = load_dataset(paths[-1])
    net = make_model(cfg.model, num_fields=len(last.categorical_fields), num_dense=last.num_dense,
                     embedding_dim=cfg.embedding_dim, hidden=cfg.hidden, seed=cfg.seed, dtype=torch.float64)
    table = torch.nn.Parameter(torch.as_tensor(initial_rows(np.arange(last.num_embeddings), net.row_dim, cfg.seed)))
    params = [table] + list(net.parameters())
    opt = (torch.optim.SGD(params, lr=cfg.lr) if optimizer == "sgd"
           else torch.optim.Adagrad(params, lr=cfg.lr, eps=ADAGRAD_EPS))
    for path in paths:
        ds = load_dataset(path)
        f_of = ds.field_of_embedding().astype(np.int64)
        nf = len(ds.categorical_fields)
        for step in NaiveSchedule(1, ds.num_train, GLOBAL_BATCH, seed=cfg.seed).steps(0):
            samples = step.samples[0]
            ids, seg = [], []
            for k, s in enumerate(samples):
                for e in ds.indices[ds.indptr[s]:ds.indptr[s + 1]]:
                    ids.append(int(e))
                    seg.append(k * nf + int(f_of[e]))
            batch = Batch(samples.size, torch.tensor(ids), torch.tensor(seg), torch.as_tensor(ds.dense[samples]),
                          torch.as_tensor(ds.labels[samples]))
            opt.zero_grad()
            # a partial last batch weighs each sample as a full one (gmp.train.steps.forward_backward)
            (bce_sum(net(table, batch), batch.labels) / max(samples.size, GLOBAL_BATCH)).backward()
            opt.step()
    return table.detach().cpu().numpy(), net


def train_day(path, placement, cfg, ckpt, *, resume, created=None):
    ds = load_dataset(path)
    n = placement.num_workers
    cfg = TrainConfig(**{**cfg.__dict__, "batch_size": GLOBAL_BATCH // n})
    tr = Trainer(TrainData(ds), placement, cfg, LocalEngine(n))
    summary = resume_training(tr, ckpt, dataset=ds, placement_sha=placement_sha256(placement),
                              created=created) if resume else None
    tr.fit()
    save_checkpoint(tr, ckpt, dataset_sha256=ds.sha256, placement_sha=placement_sha256(placement))
    return tr, summary


@pytest.mark.parametrize("optimizer,n_old,n_new,secondaries", [
    ("adagrad", 3, 3, 0.5), ("adagrad", 4, 2, 0.3), ("adagrad", 1, 1, 0.0), ("sgd", 2, 4, 0.5)])
def test_resume_on_new_placement_equals_one_worker_training_the_days_in_order(days, tmp_path, optimizer, n_old,
                                                                            n_new, secondaries):
    d0, d1 = load_dataset(days[0]), load_dataset(days[1])
    cfg = config(optimizer=optimizer)
    p0 = random_placement(d0, n_old, secondaries=secondaries, seed=11)
    p1 = random_placement(d1, n_new, secondaries=secondaries, seed=12)
    train_day(days[0], p0, cfg, tmp_path / "ckpt", resume=False)
    tr, summary = train_day(days[1], p1, cfg, tmp_path / "ckpt", resume=True)
    ref_table, ref_net = reference_days(days[:2], optimizer=optimizer, cfg=cfg)
    np.testing.assert_allclose(tr.embedding_table(), ref_table, rtol=1e-9, atol=1e-12)
    for (name, p), q in zip(tr.model.named_parameters(), ref_net.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    # the counts: gmp.partition.incremental.moved_rows' definition, bytes from the row width
    if n_old == n_new:
        expect = moved_rows(p0, p1)
        assert (summary["moved_rows"]["primaries"], summary["moved_rows"]["secondaries"]) == \
            (expect.primaries, expect.secondaries)
    m = summary["moved_rows"]
    assert m["new_ids"] == d1.num_embeddings - d0.num_embeddings == 7
    row_bytes = tr.row_dim * 8
    assert summary["bytes"]["values"] == (m["primaries"] + m["secondaries"]) * row_bytes
    assert summary["bytes"]["optimizer_state"] == (m["primaries"] * row_bytes if optimizer == "adagrad" else 0)
    assert summary["bytes"]["clocks"] == (m["primaries"] + m["secondaries"]) * 8
    assert (m["primaries"] > 0) == (n_old > 1 or n_new > 1)


@pytest.fixture(scope="module")
def sparse_days(tmp_path_factory):
    """Day 0 reads 34 of its 62 ids (a fixed vocabulary, as with hashed fields); day 1 reads 14 of the others."""
    root = tmp_path_factory.mktemp("sparse_days")
    d0 = make_ctr_dataset(root / "d0", num_samples=48, field_sizes=(7, 40, 15))
    return [d0, next_day(d0, root / "d1", seed=1)]


def _created(d0, d1, p0):
    """The rows day 1 creates: read by day 1, by no sample of day 0, no secondary in p0 (computed here)."""
    read0 = np.zeros(d0.num_embeddings, dtype=bool)
    read0[d0.indices] = True
    read1 = np.zeros(d0.num_embeddings, dtype=bool)
    read1[d1.indices[d1.indices < d0.num_embeddings]] = True
    no_sec = np.diff(np.asarray(p0.secondary_indptr)) == 0
    return np.flatnonzero(read1 & ~read0 & no_sec), read0


@pytest.mark.parametrize("optimizer", ["adagrad", "sgd"])
def test_created_rows_are_not_sent_and_the_run_stays_exact(sparse_days, tmp_path, optimizer):
    """Old ids no day-0 sample read are created at their initial values on day 1's workers: the run
    still equals the two-day reference, they are not counted or sent, and the other rows' counts are
    moved_rows' with ``created``."""
    d0, d1 = load_dataset(sparse_days[0]), load_dataset(sparse_days[1])
    cfg = config(optimizer=optimizer)
    p0 = random_placement(d0, 3, secondaries=0.5, seed=11)
    p1 = random_placement(d1, 3, secondaries=0.5, seed=12)
    created, read0 = _created(d0, d1, p0)
    assert created.tolist() == created_rows(np.unique(d1.indices), p0, read0).tolist()
    assert created.size >= 5 and np.any(p0.embedding_primary[created] != p1.embedding_primary[created])
    train_day(sparse_days[0], p0, cfg, tmp_path / "a", resume=False)
    train_day(sparse_days[0], p0, cfg, tmp_path / "b", resume=False)
    tr, summary = train_day(sparse_days[1], p1, cfg, tmp_path / "a", resume=True, created=created)
    _, plain = train_day(sparse_days[1], p1, cfg, tmp_path / "b", resume=True)  # every old id sent as before
    ref_table, _ = reference_days(sparse_days, optimizer=optimizer, cfg=cfg)
    np.testing.assert_allclose(tr.embedding_table(), ref_table, rtol=1e-9, atol=1e-12)
    m, expect = summary["moved_rows"], moved_rows(p0, p1, created=created)
    assert (m["primaries"], m["secondaries"], m["created_rows"]) == (expect.primaries, expect.secondaries, created.size)
    before = moved_rows(p0, p1)
    assert (plain["moved_rows"]["primaries"], plain["moved_rows"]["created_rows"]) == (before.primaries, 0)
    assert m["primaries"] < before.primaries and summary["bytes"]["total"] < plain["bytes"]["total"]
    assert summary["bytes"]["values"] == m["primaries"] * tr.row_dim * 8 + m["secondaries"] * tr.row_dim * 8


def test_a_created_row_the_checkpoint_trained_is_refused(sparse_days, tmp_path):
    """A history that calls a trained row untrained (a manifest placed from another chain) is refused
    before anything is sent."""
    d0, d1 = load_dataset(sparse_days[0]), load_dataset(sparse_days[1])
    p0 = random_placement(d0, 2, secondaries=0.0, seed=11)
    train_day(sparse_days[0], p0, config(), tmp_path / "c", resume=False)
    trained_id = int(d0.indices[0])  # read by the first training sample
    with pytest.raises(TrainingError, match=f"trained rows that the manifest's history says no earlier data read "
                                            f"\\(e.g. row {trained_id}\\)"):
        train_day(sparse_days[1], random_placement(d1, 2, seed=12), config(), tmp_path / "c", resume=True,
                  created=np.array([trained_id]))


def test_the_reference_needs_the_migrated_state(days, tmp_path):
    """Guard: day 1 trained from a fresh model (no resume) differs from the reference, so the
    equality above shows that the old rows and optimizer state arrived."""
    d1 = load_dataset(days[1])
    cfg = config()
    tr, _ = train_day(days[1], random_placement(d1, 2, seed=12), cfg, tmp_path / "c", resume=False)
    ref_table, _ = reference_days(days[:2], optimizer="adagrad", cfg=cfg)
    assert not np.allclose(tr.embedding_table(), ref_table, rtol=1e-6)


def test_a_chain_of_parents_is_followed(days, tmp_path):
    cfg = config()
    d0, d2 = load_dataset(days[0]), load_dataset(days[2])
    train_day(days[0], random_placement(d0, 3, secondaries=0.3, seed=1), cfg, tmp_path / "ckpt", resume=False)
    tr, summary = train_day(days[2], random_placement(d2, 3, secondaries=0.3, seed=2), cfg, tmp_path / "ckpt",
                            resume=True)
    assert summary["generations"] == 2 and summary["moved_rows"]["new_ids"] == d2.num_embeddings - d0.num_embeddings
    ref_table, _ = reference_days([days[0], days[2]], optimizer="adagrad", cfg=cfg)
    np.testing.assert_allclose(tr.embedding_table(), ref_table, rtol=1e-9, atol=1e-12)


def test_a_parent_replaced_since_is_named_not_followed(tmp_path):
    # day 1 re-made at its path after day 2 was imported from it: the chain from day 2 to the checkpoint's day 0
    # is broken there, and the error says so in one line (it walked a self-referencing chain 1000 times once)
    import shutil

    cfg = config()
    d0 = make_ctr_dataset(tmp_path / "d0", num_samples=160)
    d1 = next_day(d0, tmp_path / "d1", seed=1)
    d2 = next_day(d1, tmp_path / "d2", seed=2, new_per_field=(1, 1, 1))
    train_day(d0, random_placement(load_dataset(d0), 2, seed=1), cfg, tmp_path / "ckpt", resume=False)
    shutil.rmtree(d1)
    next_day(d0, d1, seed=7)
    with pytest.raises(TrainingError, match="parent .*d1 is not the dataset it was made from") as err:
        train_day(d2, random_placement(load_dataset(d2), 2, seed=2), cfg, tmp_path / "ckpt", resume=True)
    assert "<-" not in str(err.value) and len(str(err.value)) < 1000


def test_unrelated_data_and_mid_epoch_checkpoints_are_refused(days, tmp_path):
    cfg = config()
    d0, d1 = load_dataset(days[0]), load_dataset(days[1])
    other = load_dataset(make_ctr_dataset(tmp_path / "other", num_samples=100, seed=9))
    train_day(days[1], random_placement(d1, 2), cfg, tmp_path / "c1", resume=False)
    # a checkpoint of day 1 cannot continue on day 0 (its parent, not its child) nor on unrelated data
    for ds in (d0, other):
        tr = Trainer(TrainData(ds), random_placement(ds, 2), TrainConfig(**{**cfg.__dict__, "batch_size": 12}),
                     LocalEngine(2))
        with pytest.raises(TrainingError, match=r"neither .* nor one of its ancestors .* --extend"):
            resume_training(tr, tmp_path / "c1", dataset=ds, placement_sha="x")
    # the same dataset on another manifest is still the plain resume's refusal
    tr = Trainer(TrainData(d1), random_placement(d1, 2, seed=5), TrainConfig(**{**cfg.__dict__, "batch_size": 12}),
                 LocalEngine(2))
    with pytest.raises(TrainingError, match="another manifest"):
        resume_training(tr, tmp_path / "c1", dataset=d1, placement_sha=placement_sha256(tr.placement))
    # a checkpoint inside an epoch of the old data
    tr = Trainer(TrainData(d0), random_placement(d0, 2), TrainConfig(**{**cfg.__dict__, "batch_size": 12}),
                 LocalEngine(2))
    tr.fit(stop_after_steps=2)
    save_checkpoint(tr, tmp_path / "c2", dataset_sha256=d0.sha256, placement_sha="p")
    new = Trainer(TrainData(d1), random_placement(d1, 2), TrainConfig(**{**cfg.__dict__, "batch_size": 12}),
                  LocalEngine(2))
    with pytest.raises(TrainingError, match="stopped inside epoch 1 .*finish that epoch"):
        resume_training(new, tmp_path / "c2", dataset=d1, placement_sha="q")
    # other settings
    d2 = load_dataset(days[2])
    new = Trainer(TrainData(d2), random_placement(d2, 2), TrainConfig(**{**cfg.__dict__, "batch_size": 12,
                                                                          "embedding_dim": 5}), LocalEngine(2))
    with pytest.raises(TrainingError, match="embedding_dim=4, this run has embedding_dim=5"):
        resume_training(new, tmp_path / "c1", dataset=d2, placement_sha="q")


def test_train_logs_the_migration_and_a_second_resume_is_plain(days, tmp_path):
    """``gmp train``'s library call: day 0 on one worker (no manifest), day 1 with --resume from its
    checkpoint (the table grows by the new ids): one ``migration`` line in the JSON log, the day's
    epochs after it; resuming day 1's own checkpoint later is the ordinary resume."""
    cfg = config(optimizer="sgd")
    log = tmp_path / "log.jsonl"
    train(days[0], None, cfg, checkpoint_dir=tmp_path / "c", log_json=log)
    recs = train(days[1], None, TrainConfig(**{**cfg.__dict__, "epochs": 1}), checkpoint_dir=tmp_path / "c",
                 resume=True, log_json=log)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    kinds = [x["kind"] for x in lines]
    assert kinds == ["epoch", "migration", "epoch"]
    assert [r["kind"] for r in recs] == ["migration", "epoch"] and json.loads(json.dumps(recs[0])) == lines[1]
    mig = lines[1]
    assert mig["moved_rows"] == {"primaries": 0, "secondaries": 0, "total": 0, "new_ids": 7, "created_rows": 0,
                                "refreshed_secondaries": 0}
    assert mig["bytes"]["total"] == 0 and mig["old_num_embeddings"] == load_dataset(days[0]).num_embeddings
    assert lines[0]["run"] != mig["run"] == lines[2]["run"]
    # day 1's checkpoint now resumes normally (nothing left at 1 epoch; 2 epochs trains one more)
    more = train(days[1], None, TrainConfig(**{**cfg.__dict__, "epochs": 2}), checkpoint_dir=tmp_path / "c",
                 resume=True, log_json=log)
    assert len(more) == 1 and more[0]["epoch"] == 2


@pytest.mark.distributed
def test_migration_under_torchrun_equals_the_local_engine_and_the_reference(sparse_days, tmp_path):
    """2 gloo processes: day 0 on one placement, day 1 resumed on another (secondaries, Adagrad, created
    rows): every rank's primaries and the dense model equal the plain-PyTorch reference of the two days
    in order, and the migration's counts equal the local engine's. A history calling a trained row
    untrained is refused on both ranks (no rank is left waiting in a collective)."""
    from test_train_distributed import HERE, torchrun
    from train_data import assert_rank_rows_match, save_placement_npz

    days = sparse_days
    d0, d1 = load_dataset(days[0]), load_dataset(days[1])
    cfg = config()
    p0 = random_placement(d0, 2, secondaries=0.4, seed=21)
    p1 = random_placement(d1, 2, secondaries=0.4, seed=22)
    created, _ = _created(d0, d1, p0)
    save_placement_npz(tmp_path / "p0.npz", p0)
    save_placement_npz(tmp_path / "p1.npz", p1)
    np.save(tmp_path / "created.npy", created)
    np.save(tmp_path / "wrong.npy", np.array([int(d0.indices[0])]))  # read by day 0's first training sample
    cj = json.dumps({**cfg.to_json(), "batch_size": GLOBAL_BATCH // 2, "herald": None, "tiers": None})

    def launch(day, pl, *extra, out="out"):
        return torchrun(2, [str(HERE / "migrate_worker.py"), str(day), str(tmp_path / pl), str(tmp_path / "ckpt"),
                            str(tmp_path / out), cj, *extra], timeout=300)

    res = launch(days[0], "p0.npz")
    assert res.returncode == 0, res.stderr[-3000:]
    # one launch: the wrong history first (refused on every rank, each writes why), then the right one
    res = launch(days[1], "p1.npz", "resume", str(tmp_path / "created.npy"), str(tmp_path / "wrong.npy"))
    assert res.returncode == 0, res.stderr[-3000:]
    for r in range(2):
        assert "no earlier data read" in (tmp_path / "out" / f"refused{r}.txt").read_text()
    ref_table, ref_net = reference_days(days[:2], optimizer="adagrad", cfg=cfg)
    dense = torch.cat([q.detach().reshape(-1) for q in ref_net.parameters()]).cpu().numpy()
    assert_rank_rows_match(tmp_path / "out", 2, ref_table, d1.num_embeddings, dense=dense)
    _, local = train_day(days[1], p1, cfg, _local_day0(days[0], p0, cfg, tmp_path / "local"), resume=True,
                         created=created)
    dist = json.loads((tmp_path / "out" / "migration.json").read_text())
    assert dist["moved_rows"] == local["moved_rows"] and dist["bytes"] == local["bytes"]
    assert dist["moved_rows"]["primaries"] > 0 and dist["moved_rows"]["secondaries"] > 0
    assert dist["moved_rows"]["created_rows"] == created.size > 0


def _local_day0(path, placement, cfg, ckpt):
    train_day(path, placement, cfg, ckpt, resume=False)
    return ckpt


def test_day_to_day_through_the_cli(tmp_path):
    """synth -> synth --continue -> partition --from-manifest --max-moved-rows -> train -> train --resume:
    the trainer moves exactly the rows the partitioner's budget allowed, and creates the new ids."""
    from typer.testing import CliRunner

    from cli.main import app

    from incremental_cases import day_to_day_cli

    run = CliRunner().invoke
    d0, d1, p0, p1, res = day_to_day_cli(tmp_path, "5%")
    mig = next(json.loads(x) for x in res.output.splitlines() if x.startswith('{"kind": "migration"'))
    planned = json.loads((Path(p1) / "report.json").read_text())["incremental"]["moved_rows"]
    assert 0 < mig["moved_rows"]["total"] == planned["total"]
    assert mig["moved_rows"]["new_ids"] == load_dataset(d1).num_embeddings - load_dataset(d0).num_embeddings > 0
    # the ids day 0 never read that day 1 reads: created, as the manifest's history lists them
    hist = load_manifest(p1).history
    assert 0 < mig["moved_rows"]["created_rows"] == hist.created.size == \
        json.loads((Path(p1) / "report.json").read_text())["incremental"]["created_rows"]
    created, _ = _created(load_dataset(d0), load_dataset(d1), load_manifest(p0).placement)
    assert hist.created.tolist() == created.tolist()
    assert "warning" not in mig  # the checkpoint's placement is the one p1 was placed from
    # a checkpoint of another day-0 placement: the migration still works (from its own placement) but says that
    # its rows did not move within p1's budget
    p0r, ck2 = str(tmp_path / "p0r"), str(tmp_path / "ck2")
    for args in (["partition", d0, "-m", "random", "-w", "2", "-o", p0r, "--no-plots"],
                 ["train", "--dataset", d0, "--manifest", p0r, "--checkpoint-dir", ck2, "--batch-size", "256",
                  "--embedding-dim", "4"]):
        assert run(app, args).exit_code == 0
    res = run(app, ["train", "--dataset", d1, "--manifest", p1, "--checkpoint-dir", ck2, "--batch-size", "256",
                    "--embedding-dim", "4", "--resume"])
    assert res.exit_code == 0, res.output
    other = next(json.loads(x) for x in res.output.splitlines() if x.startswith('{"kind": "migration"'))
    p1_from = load_manifest(p1).meta["partitioner"]["info"]["comparison"]["old_placement_sha256"]
    assert other["from_placement_sha256"] != p1_from == load_manifest(p0).meta["placement_sha256"]
    assert f"{p1} was placed from {p1_from[:12]}" in other["warning"]
    assert other["moved_rows"]["total"] > planned["total"]


@pytest.mark.parametrize("options", [dict(on_demand=True, cache_rows=6, read_only_replicas=False, lookahead=0)])
def test_herald_schedule_resumes_exactly_too(days, tmp_path, options):
    """Herald's schedule at s = 0 takes naive's global batches: the migrated run (its caches dropped,
    its schedule started afresh) still equals the two-day reference."""
    from train_data import make_config

    d0, d1 = load_dataset(days[0]), load_dataset(days[1])
    cfg = make_config(model="wdl", embedding_dim=4, optimizer="adagrad", lr=0.1, batch_size=GLOBAL_BATCH, epochs=1,
                      schedule="herald", dtype="float64", hidden=(8,), seed=3, schedule_options=options)
    train_day(days[0], random_placement(d0, 3, secondaries=0.4, seed=31), cfg, tmp_path / "ck", resume=False)
    tr, _ = train_day(days[1], random_placement(d1, 3, secondaries=0.4, seed=32), cfg, tmp_path / "ck", resume=True)
    ref_table, _ = reference_days(days[:2], optimizer="adagrad", cfg=config())
    np.testing.assert_allclose(tr.embedding_table(), ref_table, rtol=1e-9, atol=1e-12)
