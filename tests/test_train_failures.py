"""Training-side failure behaviour (issue 17 items 8, 12, 13, 14, 16): each case failed before
(a traceback, a crash after a full epoch, or silent acceptance) and is now refused with one line
before training, or handled exactly."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cli.main import app
from gmp.comm.local import LocalEngine
from gmp.datasets.format import load_dataset
from gmp.errors import TrainingError
from gmp.placement import Placement
from gmp.train import TrainData, Trainer
from train_data import make_config, make_ctr_dataset

runner = CliRunner()


@pytest.fixture(scope="module")
def ctr(tmp_path_factory):
    path = make_ctr_dataset(tmp_path_factory.mktemp("ctr") / "ds", num_samples=80)
    return path, load_dataset(path)


def one_line_error(args, pattern):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and re.search(pattern, lines[0]), res.output
    return res


# ----------------------------------------------------------------------------- item 12
@pytest.mark.parametrize("schedule,options", [("static", {}), ("naive", {}),
                                              ("herald", dict(cache_rows=2, on_demand=True,
                                                              read_only_replicas=False))])
def test_a_worker_that_owns_no_rows_trains_the_single_worker_model(tmp_path, schedule, options):
    """3 embedding rows over 4 workers: worker 3 holds none (was an IndexError in _read_rows)."""
    torch.use_deterministic_algorithms(True)
    try:
        ds = load_dataset(make_ctr_dataset(tmp_path / "d", num_samples=40, field_sizes=(2, 1), multi=False))
        assert ds.num_embeddings == 3
        pl = Placement.edge_cut(4, np.arange(ds.num_samples) % 4, np.array([0, 1, 2], dtype=np.int32))
        assert pl.rows_held()[3] == 0
        kw = dict(batch_size=4, epochs=2, embedding_dim=3, hidden=(4,), dtype="float64", optimizer="adagrad",
                  lr=0.1)
        many = Trainer(TrainData(ds), pl, make_config(schedule=schedule, schedule_options=options, **kw),
                       LocalEngine(4))
        many.fit()
        if schedule == "static":  # the static schedule's batches depend on the placement: check it ran
            assert np.all(np.isfinite(many.embedding_table()))
            return
        one = Trainer(TrainData(ds), Placement.edge_cut(1, np.zeros(ds.num_samples, np.int32), np.zeros(3, np.int32)),
                      make_config(schedule="naive", **dict(kw, batch_size=16)), LocalEngine(1))
        one.fit()
        np.testing.assert_allclose(many.embedding_table(), one.embedding_table(), rtol=1e-9, atol=1e-12)
    finally:
        torch.use_deterministic_algorithms(False)


# ----------------------------------------------------------------------------- item 8
def test_a_non_finite_loss_is_refused_naming_the_step(ctr):
    _, ds = ctr
    data = TrainData(ds)
    data.dense = np.array(data.dense, dtype=np.float32)
    data.dense[3] = np.inf  # sample 3 is in the first global batch (dataset order)
    pl = Placement.edge_cut(2, np.arange(ds.num_samples) % 2, np.arange(ds.num_embeddings) % 2)
    tr = Trainer(data, pl, make_config(schedule="naive", shuffle="none", batch_size=4, embedding_dim=3, hidden=(4,)),
                 LocalEngine(2))
    with pytest.raises(TrainingError, match=r"The training loss is not finite at epoch 1 step 1; lower the learning"):
        tr.fit()


# ----------------------------------------------------------------------------- item 14 and 8: flags
@pytest.mark.parametrize("flags,pattern", [
    (("--seed", -1), r"^error: --seed must be an int >= 0, got -1\.$"),
    (("--log-every", -1), r"^error: --log-every must be an int >= 0, got -1\.$"),
    (("--lr", "inf"), r"^error: --lr must be a finite number > 0 and <= 1e\+06, got inf\.$"),
    (("--lr", "nan"), r"^error: --lr must be a finite number > 0 and <= 1e\+06, got nan\.$"),
    (("--batch-size", 0), r"^error: --batch-size must be an int >= 1, got 0\.$"),
])
def test_bad_numeric_train_flags_are_one_line_errors(ctr, flags, pattern):
    path, _ = ctr
    one_line_error(["train", "--dataset", path, *flags], pattern)


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_simulate_min_frequency_must_be_a_finite_number_at_least_0(ctr, value):
    path, _ = ctr
    one_line_error(["simulate", "--dataset", path, "--workers", 2, "--min-frequency", value],
                   rf"^error: --min-frequency must be a finite number >= 0, got {value}(\.0)?\.$")


def test_a_huge_embedding_dim_is_refused_against_the_available_memory(ctr, monkeypatch):
    import gmp.train.trainer as trainer_mod

    path, _ = ctr
    monkeypatch.setattr(trainer_mod, "available_memory", lambda device=None: 64 << 20)  # 64 MiB left
    # 31 rows x 100001 values x 4 bytes x 2 (Adagrad) = 24.8 MB, plus the first layer 3 x 1e5 x 128 x 4 x 4
    one_line_error(["train", "--dataset", path, "--embedding-dim", 100000],
                   r"^error: --embedding-dim 100000 needs about \d+\.\d GiB .* more than the 0\.1 GiB (of memory "
                   r"available(?: \(the memory cgroup .*\))?; lower it or use more workers|free on cuda:0; lower it, use more GPUs, or "
                   r"--table-location host)\.$")  # the host's memory, or the GPU's where the table goes there
    # a dimension that fits is not refused
    res = runner.invoke(app, ["train", "--dataset", str(path), "--embedding-dim", "4", "--epochs", "0"])
    assert res.exit_code == 0, res.output


def test_a_huge_batch_is_refused_naming_the_batch_and_the_largest_that_fits(ctr, monkeypatch):
    """``--batch-size 2147483647``: the batch's activations are the estimate, yet the refusal blamed
    --embedding-dim 16. It names --batch-size, what a sample costs, and the largest batch that fits (which the
    check then takes, one more it refuses)."""
    import gmp.train.trainer as trainer_mod
    from gmp.train import TrainConfig
    from train_data import random_placement

    path, ds = ctr
    monkeypatch.setattr(trainer_mod, "available_memory", lambda device=None: 64 << 20)  # 64 MiB left
    res = one_line_error(["train", "--dataset", path, "--batch-size", 2**31 - 1],
                         r"^error: --batch-size 2147483647 needs about \d+\.\d GiB \(a batch of 2,147,483,647 samples "
                         r"x \d+ values of deep input x 4 bytes x 5 activation copies of model 'wdl', plus 0\.0 GiB of "
                         r"embedding rows and the first dense layer\), more than the 0\.1 GiB (of memory available"
                         r"(?: \(the memory cgroup .*\))?|free on cuda:0); lower it to [\d,]+ or less\.$")
    assert "--embedding-dim" not in res.output
    fits = int(re.search(r"lower it to ([\d,]+) or less", res.output).group(1).replace(",", ""))
    pl = random_placement(ds, 1, seed=0)
    fields = len(ds.categorical_fields)
    trainer_mod.check_memory(pl, TrainConfig(batch_size=fits), [0], fields, num_dense=ds.num_dense)
    with pytest.raises(TrainingError, match=r"^The 'batch_size' parameter .* lower it to "):
        trainer_mod.check_memory(pl, TrainConfig(batch_size=fits + 1), [0], fields, num_dense=ds.num_dense)


def test_running_out_of_gpu_memory_is_one_line(ctr, monkeypatch):
    """torch's CUDA OutOfMemoryError (a RuntimeError, not a MemoryError) is said in one line."""
    import gmp.train.run as run_mod

    path, _ = ctr

    def no_room(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity "
                                     "of 79.10 GiB of which 256.00 MiB is free. Including non-PyTorch memory ...")

    monkeypatch.setattr(run_mod, "Trainer", no_room)
    one_line_error(["train", "--dataset", path],
                   r"^error: out of GPU memory \(CUDA out of memory\. Tried to allocate 1\.00 GiB\); lower "
                   r"--embedding-dim or --batch-size, use more GPUs, or keep the table in host memory "
                   r"\(--table-location host\)\.$")


def test_a_table_larger_than_the_gpu_is_refused_against_its_free_memory(ctr, monkeypatch):
    """On a CUDA device the table is checked against the device's free memory, not the host's."""
    import gmp.train.trainer as trainer_mod
    from gmp.datasets.format import load_dataset
    from gmp.train import TrainConfig
    from train_data import random_placement

    path, _ = ctr
    ds = load_dataset(path)
    pl = random_placement(ds, 2, seed=0)
    seen = []
    monkeypatch.setattr(trainer_mod, "available_memory",
                        lambda device=None: seen.append(device) or (1 << 20 if device is not None else 1 << 40))
    cfg = TrainConfig(embedding_dim=2000, hidden=(8,))
    with pytest.raises(TrainingError, match=r"more than the 0\.0 GiB free on cuda:0; lower it, use more GPUs, "
                                            r"or `table_location` host\."):
        trainer_mod.check_memory(pl, cfg, [0, 1], len(ds.categorical_fields), torch.device("cuda", 0))
    assert seen == [torch.device("cuda", 0)]
    trainer_mod.check_memory(pl, cfg, [0, 1], len(ds.categorical_fields), torch.device("cpu"))  # the host has room
    assert seen[-1] is None


# ----------------------------------------------------------------------------- item 13
def test_a_checkpoint_dir_that_is_a_file_is_refused_before_training(ctr, tmp_path, monkeypatch):
    import gmp.train.run as run_mod

    path, _ = ctr
    target = tmp_path / "ck"
    target.write_text("not a directory")
    monkeypatch.setattr(run_mod, "Trainer", lambda *a, **k: pytest.fail("training started"))
    one_line_error(["train", "--dataset", path, "--checkpoint-dir", target],
                   r"^error: --checkpoint-dir must be a directory \(created if missing\), got the existing file .*ck; "
                   r"pass a directory path\.$")
    assert target.read_text() == "not a directory"


# ----------------------------------------------------------------------------- item 16
def test_resume_after_a_crash_between_the_epoch_line_and_its_checkpoint_writes_each_line_once(ctr, tmp_path,
                                                                                            monkeypatch):
    import gmp.train.run as run_mod

    path, _ = ctr
    log, ck = tmp_path / "log.jsonl", tmp_path / "ck"
    common = ["train", "--dataset", str(path), "--epochs", "3", "--checkpoint-dir", str(ck), "--log-json", str(log),
              "--batch-size", "16", "--embedding-dim", "4", "--log-every", "2"]
    real_save = run_mod.save_checkpoint
    calls = {"n": 0}

    def save_then_die(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:  # killed after epoch 2's line, before its checkpoint
            raise KeyboardInterrupt
        return real_save(*a, **k)

    monkeypatch.setattr(run_mod, "save_checkpoint", save_then_die)
    res = runner.invoke(app, common)
    assert res.exit_code != 0 and calls["n"] == 2  # the "kill" (click turns it into exit code 130)
    before = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["epoch"] for r in before if r["kind"] == "epoch"] == [1, 2]
    monkeypatch.setattr(run_mod, "save_checkpoint", real_save)
    res = runner.invoke(app, common + ["--resume"])
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["epoch"] for r in recs if r["kind"] == "epoch"] == [1, 2, 3]
    steps = [(r["epoch"], r["step"]) for r in recs if r["kind"] == "step"]
    assert len(steps) == len(set(steps)) and steps == sorted(steps)
