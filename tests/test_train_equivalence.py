"""The central correctness property of the trainer: at staleness 0, N workers
take exactly the steps one process takes on the union of their batches.

The reference is plain PyTorch on one full embedding table (tests/train_data.py),
independent of the store/exchange/consistency machinery under test.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from gmp.datasets.format import load_dataset
from gmp.comm.local import LocalEngine
from gmp.train import TrainConfig, TrainData, Trainer
from gmp.train.protocol_pipeline import PipelinedStaleness
from gmp.train.schedule import NaiveSchedule, ReplaySchedule, StaticSchedule
from train_data import make_ctr_dataset, random_placement, reference_train


@pytest.fixture(autouse=True)
def _deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


@pytest.fixture(scope="module")
def ctr(tmp_path_factory):
    path = make_ctr_dataset(tmp_path_factory.mktemp("ctr") / "ds")
    return path, load_dataset(path)




def config(**kw):
    base = dict(model="wdl", embedding_dim=4, optimizer="sgd", lr=0.1, batch_size=24, epochs=2,
                schedule="naive", dtype="float64", hidden=(8,), seed=3)
    base.update(kw)
    return TrainConfig(**base)


def assert_same_model(trainer, ref_table, ref_net):
    np.testing.assert_allclose(trainer.embedding_table(), ref_table, rtol=1e-9, atol=1e-12)
    for (name, p), q in zip(trainer.model.named_parameters(), ref_net.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def assert_equals_reference(trainer, path, num_train, cfg, global_batch):
    """The trained model equals plain PyTorch on one table over the naive schedule's global batches."""
    one = NaiveSchedule(1, num_train, global_batch, seed=cfg.seed)
    batches = [[s.samples[0] for s in one.steps(e)] for e in range(cfg.epochs)]
    ref_table, ref_net = reference_train(path, batches, model=cfg.model, optimizer=cfg.optimizer, lr=cfg.lr,
                                         embedding_dim=cfg.embedding_dim, seed=cfg.seed, hidden=cfg.hidden,
                                         full_batch=global_batch)
    assert_same_model(trainer, ref_table, ref_net)


@pytest.mark.parametrize("model,optimizer,num_workers,secondaries", [
    ("wdl", "sgd", 1, 0.0), ("wdl", "sgd", 4, 0.0), ("wdl", "adagrad", 3, 0.5), ("dcn", "adagrad", 2, 0.0),
    ("dcn", "sgd", 3, 0.5), ("deepfm", "adagrad", 4, 0.0), ("deepfm", "sgd", 3, 0.5)])
def test_naive_equals_single_process(ctr, model, optimizer, num_workers, secondaries):
    path, ds = ctr
    global_batch = 48
    cfg = config(model=model, optimizer=optimizer, batch_size=global_batch // num_workers)
    tr = Trainer(TrainData(ds), random_placement(ds, num_workers, secondaries=secondaries), cfg,
                 LocalEngine(num_workers))
    tr.fit()
    assert_equals_reference(tr, path, ds.num_train, cfg, global_batch)


def test_naive_four_workers_equal_one_worker_with_four_times_the_batch(ctr):
    _, ds = ctr
    data = TrainData(ds)
    four = Trainer(data, random_placement(ds, 4, secondaries=0.3), config(batch_size=12, optimizer="adagrad"),
                   LocalEngine(4))
    one = Trainer(data, random_placement(ds, 1), config(batch_size=48, optimizer="adagrad"), LocalEngine(1))
    r4, r1 = four.fit(), one.fit()
    np.testing.assert_allclose(four.embedding_table(), one.embedding_table(), rtol=1e-9, atol=1e-12)
    assert r4[-1]["test_auc"] == pytest.approx(r1[-1]["test_auc"], abs=1e-12)
    assert r4[-1]["train_loss"] == pytest.approx(r1[-1]["train_loss"], rel=1e-9)
    assert r4[-1]["remote_rows_read"] > 0 and r1[-1]["remote_rows_read"] == 0


@pytest.mark.parametrize("num_workers,secondaries,shuffle", [(2, 0.0, "seeded"), (3, 0.4, "none"),
                                                             (4, 0.0, "seeded")])
def test_static_equals_replay_of_its_global_batches(ctr, num_workers, secondaries, shuffle):
    path, ds = ctr
    cfg = config(schedule="static", shuffle=shuffle, batch_size=10, optimizer="adagrad")
    pl = random_placement(ds, num_workers, secondaries=secondaries, seed=5)
    tr = Trainer(TrainData(ds), pl, cfg, LocalEngine(num_workers))
    tr.fit()
    static = StaticSchedule(pl, ds.num_train, cfg.batch_size, seed=cfg.seed, shuffle=shuffle)
    unions = [[np.concatenate(s.samples) for s in static.steps(e)] for e in range(cfg.epochs)]
    # the single-process replay through the trainer itself (a full step: N x B samples) ...
    replay = Trainer(TrainData(ds), random_placement(ds, 1), replace(cfg, batch_size=num_workers * cfg.batch_size),
                     LocalEngine(1), schedule=ReplaySchedule(lambda e: [[u] for u in unions[e]]))
    replay.fit()
    np.testing.assert_allclose(tr.embedding_table(), replay.embedding_table(), rtol=1e-9, atol=1e-12)
    # ... and through plain PyTorch
    ref_table, ref_net = reference_train(path, unions, optimizer="adagrad", lr=cfg.lr, seed=cfg.seed,
                                         embedding_dim=cfg.embedding_dim, hidden=cfg.hidden,
                                         full_batch=num_workers * cfg.batch_size)
    assert_same_model(tr, ref_table, ref_net)


def test_the_reference_is_sensitive_to_the_batches(ctr):
    """Guard: a different batch order gives a different model, so the equalities above mean something."""
    path, ds = ctr
    cfg = config(batch_size=48)
    tr = Trainer(TrainData(ds), random_placement(ds, 1), cfg, LocalEngine(1))
    tr.fit()
    other = NaiveSchedule(1, ds.num_train, 48, seed=cfg.seed + 1)
    ref_table, _ = reference_train(path, [[s.samples[0] for s in other.steps(e)] for e in range(2)], lr=cfg.lr,
                                   embedding_dim=cfg.embedding_dim, seed=cfg.seed, hidden=cfg.hidden)
    assert not np.allclose(tr.embedding_table(), ref_table, rtol=1e-6)


def test_one_id_per_field_fast_path_equals_the_reference(tmp_path):
    """Datasets with exactly one id per field skip pooling; the model must not change."""
    path = make_ctr_dataset(tmp_path / "onehot", multi=False)
    ds = load_dataset(path)
    cfg = config(model="dcn", optimizer="adagrad", batch_size=24)
    tr = Trainer(TrainData(ds), random_placement(ds, 2, secondaries=0.3), cfg, LocalEngine(2))
    tr.fit()
    assert_equals_reference(tr, path, ds.num_train, cfg, 48)


# ------------------------------------------------------------------ the pipelined step (s = 0)
def _records_without_time(records):
    drop = {"train_seconds", "samples_per_sec", "comm_seconds", "phase_seconds"}
    return [{k: v for k, v in r.items() if k not in drop} for r in records]


@pytest.mark.parametrize("model,optimizer,num_workers,secondaries,schedule", [
    ("wdl", "sgd", 2, 0.0, "static"), ("dcn", "adagrad", 3, 0.5, "static"), ("deepfm", "adagrad", 4, 0.3, "naive"),
    ("dcn", "sgd", 1, 0.0, "static")])
def test_pipelined_step_is_the_synchronous_step_bit_for_bit(ctr, model, optimizer, num_workers, secondaries,
                                                            schedule):
    """Reads overlapped with compute change nothing: the same table and dense weights bit for bit,
    the same losses, AUC, byte counts and counters (so the pipelined run is the single-worker
    run, by the tests above)."""
    _, ds = ctr
    pl = random_placement(ds, num_workers, secondaries=secondaries, seed=7)
    runs = {}
    for pipeline in (False, True):
        cfg = config(model=model, optimizer=optimizer, schedule=schedule, batch_size=12, pipeline=pipeline)
        tr = Trainer(TrainData(ds), pl, cfg, LocalEngine(num_workers))
        runs[pipeline] = (tr, tr.fit())
    (sync, rs), (pipe, rp) = runs[False], runs[True]
    assert np.array_equal(sync.embedding_table(), pipe.embedding_table())
    for p, q in zip(sync.model.parameters(), pipe.model.parameters()):
        assert torch.equal(p, q)
    assert isinstance(pipe.protocol, PipelinedStaleness) and not isinstance(sync.protocol, PipelinedStaleness)
    assert _records_without_time(rs) == _records_without_time(rp)
    if num_workers > 1:
        assert rp[-1]["remote_rows_read"] > 0 and rp[-1]["bytes"]["embedding_rows"] > 0
        assert sum(rp[-1]["phase_seconds"].values()) > 0


def test_pipelined_step_equals_the_reference(ctr):
    """Against plain PyTorch on one table (independent of the trainer's machinery)."""
    path, ds = ctr
    cfg = config(model="dcn", optimizer="adagrad", batch_size=16, pipeline=True)
    tr = Trainer(TrainData(ds), random_placement(ds, 3, secondaries=0.5), cfg, LocalEngine(3))
    tr.fit()
    assert_equals_reference(tr, path, ds.num_train, cfg, 48)


def test_pipelined_step_survives_a_stop_between_steps(ctr):
    """fit(stop_after_steps=k) leaves the next step's reads started; fit() again uses them (same
    trainer) and ends with the uninterrupted model."""
    _, ds = ctr
    pl = random_placement(ds, 2, secondaries=0.4, seed=9)
    cfg = config(model="wdl", optimizer="adagrad", schedule="static", batch_size=12, pipeline=True)
    whole = Trainer(TrainData(ds), pl, cfg, LocalEngine(2))
    whole.fit()
    parts = Trainer(TrainData(ds), pl, cfg, LocalEngine(2))
    parts.fit(stop_after_steps=3)
    parts.fit(stop_after_steps=1)
    parts.fit()
    assert np.array_equal(whole.embedding_table(), parts.embedding_table())


@pytest.mark.parametrize("comm_dtype", ["fp16", "bf16"])
def test_a_narrow_comm_dtype_on_one_worker_changes_nothing(ctr, comm_dtype):
    """One worker sends nothing, so there is no wire to narrow: the model equals the fp32 run's bit for bit
    (the dense gradients were rounded to 2 bytes anyway, and the losses moved)."""
    _, ds = ctr
    pl = random_placement(ds, 1, seed=4)
    out = {}
    for cd in (None, comm_dtype):
        cfg = config(model="dcn", optimizer="sgd", schedule="static", batch_size=12, dtype="float32", comm_dtype=cd)
        tr = Trainer(TrainData(ds), pl, cfg, LocalEngine(1))
        out[cd] = (tr, tr.fit()[-1])
    (full, rf), (half, rh) = out[None], out[comm_dtype]
    assert rh["train_loss"] == rf["train_loss"] and rh["bytes"] == rf["bytes"]
    np.testing.assert_array_equal(half.embedding_table(), full.embedding_table())
    for a, b in zip(half.model.parameters(), full.model.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("comm_dtype", ["bf16", "fp16"])
def test_narrow_comm_dtype_halves_the_row_bytes_and_stays_close(ctr, comm_dtype):
    """Rows and gradients travel at 2 bytes per value (dense all-reduce too); the model is close to,
    not equal to, the fp32 one (exactness is claimed for fp32 only)."""
    _, ds = ctr
    pl = random_placement(ds, 2, seed=4)
    out = {}
    for cd in (None, comm_dtype):
        cfg = config(model="dcn", optimizer="sgd", schedule="static", batch_size=12, dtype="float32",
                     comm_dtype=cd)
        tr = Trainer(TrainData(ds), pl, cfg, LocalEngine(2))
        out[cd] = (tr, tr.fit()[-1])
    (full, rf), (half, rh) = out[None], out[comm_dtype]
    for key in ("embedding_rows", "gradients", "dense_allreduce"):
        assert rh["bytes"][key] * 2 == rf["bytes"][key] > 0, key
    assert rh["bytes"]["ids_clocks"] == rf["bytes"]["ids_clocks"]
    assert not np.array_equal(full.embedding_table(), half.embedding_table())
    np.testing.assert_allclose(half.embedding_table(), full.embedding_table(), atol=2e-2)
