"""``gmp train`` end to end: JSON logs, bytes and row counters against gmp.metrics,
checkpoint/resume, and refusal of bad input before training."""

from __future__ import annotations

import re

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cli.main import app
from gmp import metrics
from gmp.datasets.format import load_dataset
from gmp.errors import TrainingError
from gmp.graph import build_graph
from gmp.manifest import write_manifest
from gmp.placement import Placement
from gmp.topology import homogeneous
from gmp.train import TrainConfig
from gmp.train.run import train
from gmp.train.schedule import StaticSchedule
from train_data import make_ctr_dataset

KEYS = {"epoch", "train_loss", "test_auc", "test_logloss", "samples_per_sec", "bytes", "remote_rows_read",
        "remote_rows_pushed", "staleness_refreshes"}
BYTE_KEYS = {"embedding_rows", "gradients", "ids_clocks", "dense_allreduce"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def ctr(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    path = make_ctr_dataset(root / "ds", num_samples=400, field_sizes=(9, 13, 6, 5))
    return root, path, load_dataset(path)


def manifest_for(root, ds, n, *, secondaries=0.0, seed=0, name=None):
    rng = np.random.default_rng(seed)
    pl = Placement.edge_cut(n, rng.integers(0, n, ds.num_samples), rng.integers(0, n, ds.num_embeddings),
                            method="test")
    if secondaries:
        sec = [[w for w in range(n) if w != pl.embedding_primary[e] and rng.random() < secondaries]
               for e in range(ds.num_embeddings)]
        pl = pl.with_secondaries(np.cumsum([0] + [len(s) for s in sec]),
                                 np.array([w for s in sec for w in s], dtype=np.int32))
    out = root / (name or f"m{n}-{secondaries}-{seed}")
    if not out.exists():
        write_manifest(out, pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                       num_embeddings=ds.num_embeddings, topology=homogeneous(n))
    return out, pl


def run_cli(*args):
    res = CliRunner().invoke(app, ["train", *map(str, args)])
    return res


def read_log(path, kind=None):
    """The JSON log's records (of ``kind`` only, if given: each start of a run also writes a settings line)."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return [r for r in records if kind is None or r["kind"] == kind]


def test_cli_writes_one_json_line_per_epoch_with_the_documented_keys(ctr, tmp_path):
    root, path, ds = ctr
    man, _ = manifest_for(root, ds, 2)
    res = run_cli("--dataset", path, "--manifest", man, "--epochs", 2, "--batch-size", 32, "--model", "dcn",
                  "--log-json", tmp_path / "log.jsonl", "--log-every", 4)
    assert res.exit_code == 0, res.output
    lines = read_log(tmp_path / "log.jsonl")
    epochs = [r for r in lines if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [1, 2]
    assert len([r for r in lines if r["kind"] == "step"]) == 2 * (-(-ds.num_train // 2 // 32) // 4)
    for r in epochs:
        assert KEYS <= set(r) and set(r["bytes"]) == BYTE_KEYS
        assert 0.0 <= r["test_auc"] <= 1.0 and r["test_logloss"] > 0
        assert r["samples"] == ds.num_train
        assert r["bytes"]["embedding_rows"] > 0 and r["bytes"]["dense_allreduce"] > 0
    # stdout carries the same lines
    out_lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert [r["test_auc"] for r in out_lines if r["kind"] == "epoch"] == [r["test_auc"] for r in epochs]


def test_a_terminal_reads_a_line_per_epoch_and_the_log_keeps_the_json(ctr, tmp_path):
    """stdout a terminal (a pseudo-terminal here): each epoch is one line to read, made from the same record
    the JSON log holds; a pipe gets the JSON (the test above)."""
    import pty
    import subprocess

    root, path, ds = ctr
    man, _ = manifest_for(root, ds, 2)
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = subprocess.run([sys.executable, "-m", "cli.main", "train", str(path), "--manifest", str(man), "--epochs",
                           "2", "--batch-size", "32", "--log-json", str(tmp_path / "log.jsonl")],
                          stdout=secondary, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        out += chunk
    os.close(primary)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln.strip() for ln in out.decode().splitlines() if ln.strip()]
    want = []
    for r in read_log(tmp_path / "log.jsonl", "epoch"):
        want.append(f"epoch {r['epoch']}: train loss {r['train_loss']:.4f}, test AUC {r['test_auc']:.4f}, "
                    f"logloss {r['test_logloss']:.4f}, {r['samples_per_sec']:,.0f} samples/s")
    assert lines == want and not any(ln.startswith("{") for ln in lines), (lines, want)


def test_a_line_said_while_a_bar_is_drawn_goes_above_the_bar(monkeypatch):
    """stdout and stderr one terminal (``--log-every`` in a terminal): a step line written to stdout landed on
    the bar's line and left a frozen copy of the bar before it; it now goes through the bar's console."""
    import io

    from gmp import progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out, err = Tty(), Tty()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(progress, "_enabled", True)
    with progress.task("epoch 1/1", total=4) as advance:
        advance(1, "loss 0.5000")
        progress.echo("epoch 1 step 1: train loss 0.5000")
        advance(1, "loss 0.4000")
    progress.echo("epoch 1: train loss 0.4000")  # no bar: stdout
    assert out.getvalue() == "epoch 1: train loss 0.4000\n"
    said = [ln for ln in err.getvalue().replace("\r", "\n").splitlines() if "step 1" in ln]
    assert len(said) == 1 and re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", said[0]) == "epoch 1 step 1: train loss 0.5000"


def test_record_line_of_a_step_and_a_migration():
    from cli.train import record_line

    assert record_line({"kind": "step", "epoch": 2, "step": 8, "train_loss": 0.5, "samples_per_sec": 1234.4,
                        "test_auc": float("nan")}) == "epoch 2 step 8: train loss 0.5000, 1,234 samples/s"
    assert record_line({"kind": "migration", "epoch": 0, "moved_rows": {"total": 9721},
                        "checkpoint": "ck/ckpt-1"}) == "migrated 9,721 rows from ck/ckpt-1"


@pytest.mark.parametrize("n,batch", [(2, 16), (3, 7)])
def test_remote_rows_equal_the_reports_batch_traffic(ctr, tmp_path, n, batch):
    """s = 0, static, --shuffle none, no secondaries: measured rows read/pushed per epoch
    equal gmp.metrics' batch_remote_reads / batch_remote_pushes, and bytes follow from them."""
    root, path, ds = ctr
    man, pl = manifest_for(root, ds, n, seed=n)
    log = tmp_path / "log.jsonl"
    res = run_cli("--dataset", path, "--manifest", man, "--schedule", "static", "--shuffle", "none",
                  "--batch-size", batch, "--epochs", 2, "--embedding-dim", 5, "--model", "wdl", "--log-json", log)
    assert res.exit_code == 0, res.output
    graph = build_graph(ds)
    reads = metrics.batch_remote_reads(graph, pl, batch, num_train=ds.num_train)
    pushes = metrics.batch_remote_pushes(graph, pl, batch, num_train=ds.num_train)
    assert reads > 0
    for r in read_log(log, kind="epoch"):
        assert r["remote_rows_read"] == reads
        assert r["remote_rows_pushed"] == pushes
        assert r["staleness_refreshes"] == 0
        row_bytes = (5 + 1) * 4  # wdl rows carry the wide weight; float32
        assert r["bytes"]["embedding_rows"] == reads * row_bytes
        assert r["bytes"]["gradients"] == pushes * row_bytes
        # request: id + clock; reply: clock (int32 each); a push carries no ids at s = 0 (the
        # primary knows them from the request, in the same order)
        assert r["bytes"]["ids_clocks"] == reads * 12


@pytest.mark.parametrize("step", [dict(staleness=2), dict(staleness=0, pipeline=True)])
def test_resume_after_an_interrupt_equals_an_uninterrupted_run(ctr, tmp_path, step):
    """Bytes included: the pipelined step had begun the next step's reads before the checkpoint and counted
    them; the resumed run began them again and counted them twice."""
    root, path, ds = ctr
    man, pl = manifest_for(root, ds, 3, secondaries=0.4)
    cfg = TrainConfig(model="deepfm", batch_size=16, epochs=3, optimizer="adagrad", schedule="static", lr=0.05,
                      **step)
    full = train(path, man, cfg, checkpoint_dir=tmp_path / "a")
    steps_per_epoch = StaticSchedule(pl, ds.num_train, 16).num_steps(0)
    with pytest.raises(TrainingError, match="interrupted at epoch 2 step 3; checkpoint saved.*`resume=True`"):
        train(path, man, cfg, checkpoint_dir=tmp_path / "b", stop_after_steps=steps_per_epoch + 3,
              log_json=tmp_path / "b.jsonl")
    head = json.loads((tmp_path / "b" / "latest" / "checkpoint.json").read_text())
    assert (head["epoch"], head["step"]) == (1, 3)
    resumed = train(path, man, cfg, checkpoint_dir=tmp_path / "b", resume=True, log_json=tmp_path / "b.jsonl")
    assert len(resumed) == 2  # epochs 2 and 3 were (re)run to their ends
    for a, b in zip(full[1:], resumed):
        for key in ("train_loss", "test_auc", "test_logloss", "bytes", "remote_rows_read", "remote_rows_pushed",
                    "staleness_refreshes", "samples", "steps"):
            assert a[key] == b[key], key
    for w in range(3):
        fa = torch.load(tmp_path / "a" / "latest" / f"worker-{w:05d}.pt", weights_only=False)["store"]
        fb = torch.load(tmp_path / "b" / "latest" / f"worker-{w:05d}.pt", weights_only=False)["store"]
        assert torch.equal(fa["table"], fb["table"]) and torch.equal(fa["local_state"], fb["local_state"])
        rows = f"worker-{w:05d}.rows"  # the primaries and their Adagrad sums (checkpoint schema 3)
        assert (tmp_path / "a" / "latest" / rows).read_bytes() == (tmp_path / "b" / "latest" / rows).read_bytes()
    assert [r["epoch"] for r in read_log(tmp_path / "b.jsonl")] == [1, 2, 3]


def test_resume_through_the_cli_extends_training(ctr, tmp_path):
    root, path, ds = ctr
    man, _ = manifest_for(root, ds, 2)
    common = ["--dataset", path, "--manifest", man, "--batch-size", 32, "--schedule", "naive"]
    assert run_cli(*common, "--epochs", 2, "--log-json", tmp_path / "full.jsonl").exit_code == 0
    assert run_cli(*common, "--epochs", 1, "--checkpoint-dir", tmp_path / "ck").exit_code == 0
    res = run_cli(*common, "--epochs", 2, "--checkpoint-dir", tmp_path / "ck", "--resume",
                  "--log-json", tmp_path / "res.jsonl")
    assert res.exit_code == 0, res.output
    full, resumed = read_log(tmp_path / "full.jsonl"), read_log(tmp_path / "res.jsonl")
    assert resumed[-1]["epoch"] == 2
    assert resumed[-1]["test_auc"] == full[-1]["test_auc"] and resumed[-1]["train_loss"] == full[-1]["train_loss"]
    bad = run_cli(*common, "--epochs", 2, "--checkpoint-dir", tmp_path / "ck", "--resume", "--lr", "0.5")
    assert bad.exit_code == 2 and "lr=0.01" in bad.output


def _one_line_error(res, pattern):
    assert res.exit_code == 2, res.output
    err = [x for x in res.output.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), res.output
    assert re.search(pattern, err[0]), err[0]


def test_a_damaged_manifest_or_checkpoint_is_the_only_line(ctr, tmp_path):
    """Adversarial pass on formats, F7: the "settings: ... (manifest plan)" line was printed before the refusal of
    a manifest whose arrays are damaged (its header is read first, its arrays when training opens it), and of a
    checkpoint. It is now said once the inputs are accepted."""
    from gmp._io import hash_arrays

    root, path, ds = ctr
    _, pl = manifest_for(root, ds, 2)
    planned = tmp_path / "planned"
    write_manifest(planned, pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                   num_embeddings=ds.num_embeddings, topology=homogeneous(2), metrics={"batch_size": 16})
    res = run_cli("--dataset", path, "--manifest", planned, "--epochs", 1, "--embedding-dim", 4, "--hidden", 4,
                  "--checkpoint-dir", tmp_path / "ck")
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == "settings: batch_size 16 (manifest plan)", res.stderr  # accepted: said
    damaged = tmp_path / "damaged"
    shutil.copytree(planned, damaged)
    sw = np.load(damaged / "sample_worker.npy")
    sw[3] = -1
    np.save(damaged / "sample_worker.npy", sw)
    meta = json.loads((damaged / "manifest.json").read_text())  # re-hashed: the range check is reached
    names = ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers")
    meta["placement_sha256"] = hash_arrays([(n, np.load(damaged / f"{n}.npy")) for n in names])
    (damaged / "manifest.json").write_text(json.dumps(meta))
    _one_line_error(run_cli("--dataset", path, "--manifest", damaged, "--epochs", 1),
                    r"sample_worker\.npy holds worker ids in \[-1, 1\], expected \[0, 2\)")
    head = tmp_path / "ck" / "latest" / "checkpoint.json"
    edited = json.loads(head.read_text())
    edited["placement_sha256"] = "0" * 64
    head.write_text(json.dumps(edited))
    _one_line_error(run_cli("--dataset", path, "--manifest", planned, "--epochs", 2, "--embedding-dim", 4,
                            "--hidden", 4, "--checkpoint-dir", tmp_path / "ck", "--resume"),
                    r"was made with another manifest")


def test_bad_input_is_refused_before_training(ctr, tmp_path):
    root, path, ds = ctr
    man, pl = manifest_for(root, ds, 2)
    other = make_ctr_dataset(tmp_path / "other", num_samples=400, field_sizes=(9, 13, 6, 5), seed=9)
    _one_line_error(run_cli("--dataset", other, "--manifest", man), "another dataset|sha256|hash")
    planned = tmp_path / "planned"  # a plan would be said first ("settings: batch_size 16 (manifest plan)")
    write_manifest(planned, pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                   num_embeddings=ds.num_embeddings, topology=homogeneous(2), metrics={"batch_size": 16})
    _one_line_error(run_cli("--dataset", other, "--manifest", planned), "was made for dataset sha256")
    _one_line_error(run_cli("--dataset", path, "--manifest", man, "--workers", 3), "--workers 3.*2 workers")
    _one_line_error(run_cli("--dataset", path, "--manifest", man, "--model", "xgboost"), "--model must be one of .*got 'xgboost'")
    _one_line_error(run_cli("--dataset", path, "--optimizer", "adam"), "--optimizer must be one of .*got 'adam'")
    _one_line_error(run_cli("--dataset", path, "--staleness", "-1"), "--staleness")
    _one_line_error(run_cli("--dataset", path, "--resume"), "--resume needs --checkpoint-dir")
    _one_line_error(run_cli("--dataset", path, "--seed", str(2**64)), r"--seed must be an int in \[0, 2\^63\)")
    _one_line_error(run_cli("--dataset", path, "--cache-policy", "lru"), "--cache-policy drives the device cache")
    for flag, value in (("--cache-policy", "lru"), ("--lookahead", "2"), ("--cache-rows", "5")):  # the fix names the flag
        _one_line_error(run_cli("--dataset", path, flag, value), f"add one of them or drop {flag}\\.$")
    _one_line_error(run_cli("--dataset", path, "--workers", "-1"), "--workers must be an int >= 1, got -1")
    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    np.save(broken / "labels.npy", np.zeros(3, dtype=np.float32))
    _one_line_error(run_cli("--dataset", broken), "labels.npy")
    corrupt = tmp_path / "corrupt"
    shutil.copytree(path, corrupt)
    labels = np.load(corrupt / "labels.npy")
    np.save(corrupt / "labels.npy", 1 - labels)
    _one_line_error(run_cli("--dataset", corrupt), "sha256")
    bad_man = tmp_path / "badman"
    shutil.copytree(man, bad_man)
    (bad_man / "embedding_primary.npy").write_bytes(b"garbage")
    _one_line_error(run_cli("--dataset", path, "--manifest", bad_man), "embedding_primary")


def test_distributed_world_size_must_match_the_manifest(ctr, monkeypatch):
    root, path, ds = ctr
    man, _ = manifest_for(root, ds, 2)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    _one_line_error(run_cli("--dataset", path, "--manifest", man, "--engine", "distributed"),
                    "torchrun started 3 processes.*2 workers")
    monkeypatch.delenv("RANK")
    _one_line_error(run_cli("--dataset", path, "--manifest", man, "--engine", "distributed"), "torchrun")


def test_the_manifests_plan_is_the_default_and_overriding_it_warns_once(ctr, tmp_path):
    """A manifest optimised for B = 16, dim 4 trains and simulates at 16 / 4 unless told otherwise;
    another value prints one warning line (issue 10)."""
    root, path, ds = ctr
    _, pl = manifest_for(root, ds, 2)
    man = tmp_path / "planned"
    write_manifest(man, pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples, num_embeddings=ds.num_embeddings,
                   topology=homogeneous(2), metrics={"batch_size": 16, "embedding_dim": 4})
    common = ["--dataset", path, "--manifest", man, "--schedule", "naive", "--epochs", 1]
    res = run_cli(*common)
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    assert rec["steps"] == -(-ds.num_train // (2 * 16))  # naive: ceil(num_train / (N * B))
    assert "warning" not in res.stderr
    res = run_cli(*common, "--batch-size", 8)
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    assert rec["steps"] == -(-ds.num_train // (2 * 8))
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "batch_size 8 (planned 16)" in warnings[0] and "embedding_dim" not in warnings[0]
    sim = CliRunner().invoke(app, ["simulate", "--dataset", str(path), "--manifest", str(man), "--json"])
    assert sim.exit_code == 0, sim.output
    out = json.loads(sim.stdout)
    assert (out["batch_size"], out["embedding_dim"]) == (16, 4)


@pytest.mark.parametrize("kw,match", [
    (dict(pipeline=True, staleness=5), "The 'pipeline' parameter needs staleness 0"),
    (dict(pipeline=True, schedule="herald"), "The 'pipeline' parameter needs a schedule other than herald"),
    (dict(pipeline=1), "The 'pipeline' parameter must be a bool"),
    (dict(comm_dtype="int8"), "The 'comm_dtype' parameter")])
def test_pipeline_and_comm_dtype_are_validated(kw, match):
    with pytest.raises(TrainingError, match=match):
        TrainConfig(**kw)


def test_comm_dtype_of_the_table_itself_is_the_default_on_resume():
    """--comm-dtype fp32 on a float32 table is the exact default: a resume with it was refused
    ("made with comm_dtype=None, this run has comm_dtype='fp32')."""
    from gmp.train.config import comparable_settings

    default = comparable_settings(TrainConfig().to_json())
    assert comparable_settings(TrainConfig(comm_dtype="fp32").to_json()) == default
    assert comparable_settings(TrainConfig(comm_dtype="bf16").to_json())["comm_dtype"] == "bf16"
    assert comparable_settings(TrainConfig(comm_dtype="fp32", dtype="float64").to_json())["comm_dtype"] == "fp32"


def test_cli_names_the_pipeline_flag(ctr):
    """The library's parameter name becomes the flag, one line, exit code 2."""
    _, path, _ = ctr
    res = run_cli("--dataset", path, "--pipeline", "--staleness", "3", "--epochs", 1)
    assert res.exit_code == 2, res.output
    assert "--pipeline needs staleness 0" in res.output and "Traceback" not in res.output
    res = run_cli("--dataset", path, "--comm-dtype", "fp8", "--epochs", 1)
    assert res.exit_code == 2 and "--comm-dtype" in res.output and "fp8" in res.output


def test_deterministic_algorithms_only_on_cuda_and_only_unless_turned_off(monkeypatch):
    """CUDA's scatter-adds are atomics: gmp train turns on the deterministic kernels there (a resumed
    run then equals an uninterrupted one, checked on a GPU by bench/gpu_check.sh), never on CPU."""
    import torch

    from gmp.train.run import deterministic_on_cuda

    before = torch.are_deterministic_algorithms_enabled()
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.delenv("GMP_DETERMINISTIC", raising=False)
    try:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        assert deterministic_on_cuda() is False and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setenv("GMP_DETERMINISTIC", "0")
        assert deterministic_on_cuda() is False and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        monkeypatch.delenv("GMP_DETERMINISTIC")
        assert deterministic_on_cuda() is True
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(before)


def test_summary_line_after_a_migration_and_with_one_class_test_labels():
    # a resume's first record is the migration (epoch 0): the line counts the epochs trained, not it; a test
    # set whose labels are one class has a logloss but no AUC, which is not "no test set"
    from cli.train import summary_line

    mig = {"kind": "migration", "epoch": 0, "step": 0, "moved_rows": {"total": 3}}
    ep = {"kind": "epoch", "epoch": 1, "train_seconds": 2.0, "samples": 100, "test_auc": float("nan"),
          "test_logloss": 0.65}
    line = summary_line([mig, ep])
    assert line.startswith("trained epoch 1 in 2.0 s: test AUC undefined (the test labels are all one class), "
                           "logloss 0.6500"), line
    assert "no test set" in summary_line([{**ep, "test_logloss": float("nan")}])
    assert "test AUC 0.7000" in summary_line([{**ep, "test_auc": 0.7}])
