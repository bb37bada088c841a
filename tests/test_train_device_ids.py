"""The torch id path of the preparation (issue 33, item 1; gmp/train/device_ids.py): forced on the CPU
(``GMP_ID_PATH=torch``), every tensor and host field a prepared step holds equals the numpy path's,
and whole runs train the same model bit for bit; which cases take which path; the parts (the torch
gather, id -> slot on every kind of map, the host fields read on first use)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from gmp.comm.local import LocalEngine
from gmp.datasets.format import load_dataset
from gmp.errors import TrainingError
from gmp.train import TrainData, Trainer
from gmp.train import steps as steps_module
from gmp.train.device_ids import HostArray, HostCopies, id_path, takes_torch_path
from gmp.train.models import Batch
from gmp.train.slots import DENSE_MAP_MAX_IDS, SlotMap
from gmp.train.steps import Prepared, WorkerStep, prepare
from host_sync import step_window, watch_host_syncs
from train_data import make_config, make_ctr_dataset, random_placement

CONFIG = dict(model="wdl", embedding_dim=4, lr=0.1, batch_size=12, epochs=2, hidden=(8,), seed=3)
#: (workers, secondaries, settings): a world of one, and two workers with secondaries at s = 0 and s = 2
CASES = {
    "w1-sgd": (1, 0.0, dict(optimizer="sgd")),
    "w1-adagrad": (1, 0.0, dict(optimizer="adagrad")),
    "w2-s0-adagrad": (2, 0.4, dict(optimizer="adagrad", staleness=0)),
    "w2-s2-sgd": (2, 0.4, dict(optimizer="sgd", staleness=2.0)),
    "w2-s2-adagrad": (2, 0.4, dict(optimizer="adagrad", staleness=2.0)),
}


@pytest.fixture(scope="module")
def multi_hot(tmp_path_factory):
    return load_dataset(make_ctr_dataset(tmp_path_factory.mktemp("ids") / "ds"))


@pytest.fixture(scope="module")
def one_hot(tmp_path_factory):
    return load_dataset(make_ctr_dataset(tmp_path_factory.mktemp("ids1") / "ds", multi=False, seed=4))


def make_trainer(ds, case, device=None, **extra):
    num_workers, secondaries, settings = CASES[case]
    return Trainer(TrainData(ds), random_placement(ds, num_workers, secondaries=secondaries),
                   make_config(**dict(CONFIG, **settings, **extra)), LocalEngine(num_workers, device=device))


def as_array(value):
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def assert_same(a, b, what: str) -> None:
    """Equal type (tensor or not), dtype, shape and values."""
    assert isinstance(a, torch.Tensor) == isinstance(b, torch.Tensor), what
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.device == b.device, what
    else:
        assert as_array(a).dtype == as_array(b).dtype, what
    np.testing.assert_array_equal(as_array(a), as_array(b), err_msg=what)


def assert_same_worker_step(a: WorkerStep, b: WorkerStep) -> None:
    for name in ("samples", "ptr", "uniq", "inv", "slots", "is_primary", "is_secondary"):
        assert_same(getattr(a, name), getattr(b, name), name)
    fields_a, fields_b = vars(a.ready), vars(b.ready)
    assert sorted(k for k, v in fields_a.items() if v is not None) == \
        sorted(k for k, v in fields_b.items() if v is not None)
    for name, va in fields_a.items():
        vb = fields_b[name]
        if va is None:
            continue
        if isinstance(va, Batch):
            assert va.num_samples == vb.num_samples
            for part in ("entry_row", "entry_seg", "dense", "labels"):
                pa, pb = getattr(va, part), getattr(vb, part)
                assert (pa is None) == (pb is None), part
                if pa is not None:
                    assert_same(pa, pb, f"batch.{part}")
        elif isinstance(va, tuple):
            for i, (x, y) in enumerate(zip(va, vb, strict=True)):
                assert_same(x, y, f"{name}[{i}]")
        else:
            assert_same(getattr(a.ready, name), getattr(b.ready, name), name)


def prepared_both_ways(tr, step, monkeypatch, **kw) -> tuple[list, list]:
    out = []
    for path in ("numpy", "torch"):
        monkeypatch.setenv("GMP_ID_PATH", path)
        out.append([prepare(tr.ctx, li, step.samples[w], **kw) for li, w in enumerate(tr.ctx.engine.local_workers)])
    return out[0], out[1]


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("data", ["multi_hot", "one_hot"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_torch_path_prepares_every_tensor_of_the_numpy_path(case, data, device, request, monkeypatch):
    """Several steps of an epoch (their batches differ in size at the epoch's end), training and the
    evaluation's preparation: every field, tensor and batch part equal in dtype, device and value (on
    CUDA: the pinned uploads, the device maps and the host copies read on first use too)."""
    tr = make_trainer(request.getfixturevalue(data), case, device)
    used = []
    real = steps_module.prepare_on_device
    monkeypatch.setattr(steps_module, "prepare_on_device", lambda *a, **k: used.append(1) or real(*a, **k))
    steps = list(itertools.islice(tr.protocol.steps(0, 0), 6)) + list(tr.protocol.steps(1, 0))[-1:]
    for step in steps:
        for training in (True, False):
            numpy_ws, torch_ws = prepared_both_ways(tr, step, monkeypatch, training=training)
            for a, b in zip(numpy_ws, torch_ws, strict=True):
                assert_same_worker_step(a, b)
    assert len(used) == 2 * len(steps) * CASES[case][0]  # the torch path did run
    tr.close()


def trained(ds, case, path, monkeypatch):
    monkeypatch.setenv("GMP_ID_PATH", path)
    calls = []
    real = steps_module.prepare_on_device
    monkeypatch.setattr(steps_module, "prepare_on_device", lambda *a, **k: calls.append(1) or real(*a, **k))
    tr = make_trainer(ds, case)
    recs = tr.fit()
    out = (tr.embedding_table(), [p.detach().clone() for p in tr.model.parameters()], recs, len(calls))
    tr.close()
    return out


@pytest.mark.parametrize("case", ["w1-sgd", "w1-adagrad", "w2-s2-adagrad"])
def test_a_run_trains_the_same_model_by_either_path(multi_hot, case, monkeypatch):
    table_n, dense_n, recs_n, calls_n = trained(multi_hot, case, "numpy", monkeypatch)
    table_t, dense_t, recs_t, calls_t = trained(multi_hot, case, "torch", monkeypatch)
    assert calls_n == 0 and calls_t > 0
    np.testing.assert_array_equal(table_n, table_t)
    for a, b in zip(dense_n, dense_t, strict=True):
        assert torch.equal(a, b)
    assert [r["train_loss"] for r in recs_n] == [r["train_loss"] for r in recs_t]
    assert [r.get("test_auc") for r in recs_n] == [r.get("test_auc") for r in recs_t]


def test_which_cases_take_the_torch_path(multi_hot, monkeypatch):
    tr = make_trainer(multi_hot, "w1-adagrad")
    store = tr.ctx.stores[0]
    monkeypatch.delenv("GMP_ID_PATH", raising=False)
    assert id_path() == "auto"
    assert not takes_torch_path(store, 1)  # auto: numpy on the CPU

    class OnCuda:  # the same store as if it lived on CUDA (nothing is run on it)
        fixed_layout = True
        device = torch.device("cuda", 0)

    assert takes_torch_path(OnCuda, 1) and not takes_torch_path(OnCuda, 2)
    assert not takes_torch_path(OnCuda, 1, before_step=False)  # inside a step (--pipeline) or the evaluation
    assert not takes_torch_path(OnCuda, 1, resident=object())  # a tier's pinned rows: numpy
    monkeypatch.setenv("GMP_ID_PATH", "torch")
    assert takes_torch_path(store, 1) and takes_torch_path(store, 4)
    OnCuda.fixed_layout = False  # a tier or Herald's cache: numpy, even when forced
    assert not takes_torch_path(OnCuda, 1)
    monkeypatch.setenv("GMP_ID_PATH", "numpy")
    assert not takes_torch_path(store, 1)
    monkeypatch.setenv("GMP_ID_PATH", "gpu")
    with pytest.raises(TrainingError, match=r"GMP_ID_PATH is 'gpu'; expected auto, torch or numpy"):
        takes_torch_path(store, 1)
    tr.close()


@CUDA
def test_on_cuda_a_world_of_one_takes_the_torch_path_by_default(multi_hot, monkeypatch):
    monkeypatch.delenv("GMP_ID_PATH", raising=False)
    calls = []
    real = steps_module.prepare_on_device
    monkeypatch.setattr(steps_module, "prepare_on_device", lambda *a, **k: calls.append(1) or real(*a, **k))
    tr = make_trainer(multi_hot, "w1-adagrad", "cuda", epochs=1)
    recs = tr.fit()
    tr.close()
    assert calls and np.isfinite(recs[-1]["train_loss"])


def test_tiered_and_herald_stores_keep_the_numpy_path(multi_hot, monkeypatch):
    monkeypatch.setenv("GMP_ID_PATH", "torch")
    for extra in (dict(tiers=dict(table_location="host", cache_rows=30)),
                  dict(schedule="herald", schedule_options=dict(on_demand=True, cache_rows=6,
                                                                 read_only_replicas=False))):
        calls = []
        monkeypatch.setattr(steps_module, "prepare_on_device", lambda *a, **k: calls.append(1))
        tr = make_trainer(multi_hot, "w1-adagrad", epochs=1, **extra)
        tr.fit()
        tr.close()
        assert calls == []


def test_the_preparation_reads_no_tensor_on_the_host(multi_hot, monkeypatch):
    """A world of one: the torch path's tensor work calls none of .item/.tolist/.cpu/.numpy/float(t)...
    (the host fields are views made after it, by HostCopies; on CUDA pinned copies)."""
    monkeypatch.setenv("GMP_ID_PATH", "torch")
    tr = make_trainer(multi_hot, "w1-sgd")
    step = next(iter(tr.protocol.steps(0, 0)))
    from gmp.train.device_ids import prepare_tensors
    with watch_host_syncs() as syncs:
        with step_window(syncs, torch.device("cpu")):
            prepare_tensors(tr.ctx, 0, step.samples[0])
            views = HostCopies(torch.device("cpu")).add(torch.arange(3))  # the CPU's views: recorded
    assert [m for m, _ in syncs.sites] == ["numpy"] and views.tolist() == [0, 1, 2]
    tr.close()


def test_a_world_of_one_step_by_the_torch_path_waits_for_nothing(multi_hot, monkeypatch):
    """The step from a torch-prepared batch reads no tensor on the host and makes none of host data."""
    monkeypatch.setenv("GMP_ID_PATH", "torch")
    for case, staleness in (("w1-sgd", 0.0), ("w1-adagrad", 2.0), ("w1-sgd", math.inf)):
        tr = make_trainer(multi_hot, case, epochs=1, staleness=staleness)
        with watch_host_syncs() as syncs:
            step = tr.protocol.train_step

            def watched(s, step=step):
                with step_window(syncs, torch.device("cpu")):
                    return step(s)

            monkeypatch.setattr(tr.protocol, "train_step", watched)
            tr.fit()
        tr.close()
        assert not syncs.sites and not syncs.uploads, syncs.report() + syncs.report(uploads=True)


def test_slot_lookup_by_torch_equals_the_host_lookup():
    rng = np.random.default_rng(0)
    gids = np.unique(rng.integers(0, 5000, size=400))
    for num_embeddings, ids in ((5000, np.arange(5000)),  # identity
                                (5000, np.sort(rng.choice(5000, 700, replace=False))),  # dense map
                                (DENSE_MAP_MAX_IDS + 10, np.sort(rng.choice(5000, 700, replace=False))),  # sorted ids
                                (DENSE_MAP_MAX_IDS + 10, np.zeros(0, dtype=np.int64))):  # holds nothing
        m = SlotMap(ids, num_embeddings)
        got = m.lookup_tensor(torch.from_numpy(gids))
        assert got.dtype == torch.int64
        np.testing.assert_array_equal(got.numpy(), m.lookup(gids))
        assert (m.lookup(gids) >= 0).any() == (ids.size > 0)


def test_the_torch_gather_equals_the_host_gather(multi_hot, one_hot):
    for ds in (multi_hot, one_hot):
        data = TrainData(ds)
        samples = np.random.default_rng(1).permutation(ds.num_samples)[:37]
        ptr, ids = data.gather(samples)
        got = data.gather_tensor(samples, "cpu")
        np.testing.assert_array_equal(got.ptr, ptr)
        np.testing.assert_array_equal(got.ids.numpy(), ids)
        np.testing.assert_array_equal(got.labels.numpy(), data.labels[samples])
        np.testing.assert_array_equal(got.dense.numpy(), data.dense[samples])
        one = (got.entry_sample is None)
        assert one == (ds is one_hot)  # the one-hot dataset's batches need no pooling
        if not one:
            np.testing.assert_array_equal(got.entry_sample.numpy(), np.repeat(np.arange(37), np.diff(ptr)))
        assert data.gather_tensor(samples[:0], "cpu").ids.shape == (0,)


def test_an_id_outside_every_field_is_refused_by_the_torch_gather(multi_hot):
    data = TrainData(multi_hot)
    data.field_of = data.field_of.copy()
    data.field_of[data.indices[data.indptr[5]]] = -1  # sample 5's first id belongs to no field
    with pytest.raises(TrainingError, match="outside every field"):
        data.gather_tensor(np.array([2, 5]), "cpu")


def test_a_host_field_is_read_on_first_use():
    """On CUDA a prepared step's host fields are copies in flight, read when first used; assigning one
    replaces it (the CPU stand-in: a HostArray over an array, its wait a no-op)."""
    copies = HostCopies(torch.device("cpu"))
    waits = []
    copies.wait = lambda: waits.append(1)
    ws = WorkerStep(np.arange(2), np.array([0, 1, 2]), HostArray(np.array([4, 9]), copies), np.array([0, 1]),
                    np.array([0, 1]), np.ones(2, bool), np.zeros(2, bool), ready=Prepared(
                        grad_slots=HostArray(np.array([0, 1]), copies)))
    assert isinstance(vars(ws)["uniq"], HostArray) and not waits
    assert ws.uniq.tolist() == [4, 9] and waits == [1]
    assert isinstance(vars(ws)["uniq"], np.ndarray)  # read once
    assert ws.ready.grad_slots.tolist() == [0, 1] and len(waits) == 2
    ws.slots = np.array([7, 8])
    assert ws.slots.tolist() == [7, 8]
