"""Issue 16 items 3, 4 and 6, as a user meets them: DATASET positional everywhere (``--dataset``
kept as an alias), global options after the command, flags shown without a type, ``--log-json``
appending with a run id per line, resuming a finished run said, a summary after training."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app, hoist_global_options
from train_data import make_ctr_dataset

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
TRAIN = ["--epochs", "1", "--batch-size", "32", "--embedding-dim", "2", "--model", "wdl"]


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "ds"
    make_ctr_dataset(path, num_samples=120)
    return path


def one_line_error(res, text):
    assert res.exit_code == 2, res.output
    err = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and text in err[0], res.stderr


def log_lines(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines()]


# ------------------------------------------------------------------ item 4: one grammar
def test_train_and_simulate_take_dataset_positionally(ds):
    res = runner.invoke(app, ["train", str(ds), *TRAIN])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["simulate", str(ds), "--workers", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["workers"] == 2


def test_dataset_option_stays_an_alias_and_is_not_given_twice(ds, tmp_path):
    assert runner.invoke(app, ["train", "--dataset", str(ds), *TRAIN]).exit_code == 0
    one_line_error(runner.invoke(app, ["train", str(ds), "--dataset", str(tmp_path), *TRAIN]), "given twice")
    one_line_error(runner.invoke(app, ["simulate", "--workers", "2"]), "missing DATASET")


def test_global_options_are_accepted_after_the_command(ds):
    assert hoist_global_options(["data", "info", "D", "-v"]) == ["-v", "data", "info", "D"]
    assert hoist_global_options(["train", "--", "-v"]) == ["train", "--", "-v"]
    res = subprocess.run([sys.executable, "-m", "cli.main", "data", "info", str(ds), "-v"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "samples" in res.stdout


def test_flags_show_no_type_in_help():
    res = subprocess.run([sys.executable, "-m", "cli.main", "train", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    resume = [line for line in res.stdout.splitlines() if "--resume" in line]
    assert resume and "<bool>" not in resume[0], resume
    batch = [line for line in res.stdout.splitlines() if "--batch-size" in line]
    assert batch and "<int>" in batch[0]  # options with a value keep their type


# ------------------------------------------------------------------ item 3: the JSON log
def epoch_lines(log):
    """The log's epoch records (each start of a run also writes a settings line)."""
    return [r for r in log_lines(log) if r["kind"] == "epoch"]


def test_log_json_appends_with_a_run_id_per_line(ds, tmp_path):
    log = tmp_path / "train.jsonl"
    for _ in range(2):
        assert runner.invoke(app, ["train", str(ds), *TRAIN, "--log-json", str(log)]).exit_code == 0
    lines = log_lines(log)  # each run: its settings line, then its epoch line
    assert [r["kind"] for r in lines] == ["settings", "epoch"] * 2
    assert all(isinstance(r["run"], str) and len(r["run"]) == 12 for r in lines)
    assert lines[0]["run"] == lines[1]["run"] != lines[2]["run"] == lines[3]["run"]


def test_resume_continues_the_last_run_and_keeps_the_others(ds, tmp_path):
    log, ck = tmp_path / "train.jsonl", tmp_path / "ck"
    assert runner.invoke(app, ["train", str(ds), *TRAIN, "--log-json", str(log)]).exit_code == 0  # another run
    args = ["train", str(ds), "--epochs", "2", "--batch-size", "32", "--embedding-dim", "2", "--log-json", str(log),
            "--checkpoint-dir", str(ck)]
    assert runner.invoke(app, args).exit_code == 0
    before = epoch_lines(log)
    # a crash after the last epoch's line but before its checkpoint: that line is written again on resume
    latest = ck / "latest"
    target = latest.resolve()
    previous = sorted(p for p in ck.iterdir() if p.name.startswith("ckpt-") and p != target)
    assert previous, list(ck.iterdir())
    latest.unlink()
    latest.symlink_to(previous[-1].name)
    res = runner.invoke(app, args + ["--resume"])
    assert res.exit_code == 0, res.output
    after = epoch_lines(log)
    assert len(after) == len(before) == 3
    assert after[0] == before[0]  # the other run's line is untouched
    assert {r["run"] for r in after[1:]} == {before[1]["run"]}  # the resumed run keeps its id
    assert [r["epoch"] for r in after[1:]] == [1, 2]


def test_resuming_a_finished_run_says_so(ds, tmp_path):
    ck = tmp_path / "ck"
    args = ["train", str(ds), *TRAIN, "--checkpoint-dir", str(ck)]
    assert runner.invoke(app, args).exit_code == 0
    res = runner.invoke(app, args + ["--resume"])
    assert res.exit_code == 0, res.output
    assert "nothing left to train" in res.stderr and "--epochs" in res.stderr
    res = runner.invoke(app, args + ["--resume", "--epochs", "0"])  # the checkpoint's epochs, not --epochs
    assert "already finished 1 epoch; pass --epochs 2 or more" in res.stderr, res.stderr
    res = runner.invoke(app, ["train", str(ds), *TRAIN, "--epochs", "0"])
    assert res.exit_code == 0 and "nothing trained: --epochs 0." in res.stderr


# ------------------------------------------------------------------ item 6: a human summary
def test_training_ends_with_a_summary_for_people(ds):
    res = runner.invoke(app, ["train", str(ds), *TRAIN])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout.strip().splitlines()[-1])  # stdout stays JSON lines
    summary = res.stderr.strip().splitlines()[-1]
    assert summary.startswith("trained epoch 1 in ") and f"test AUC {rec['test_auc']:.4f}" in summary
    assert "samples/s" in summary
    steps, nbytes = rec["steps"], rec["bytes"]
    assert (f"{sum(nbytes.values()) / steps / 1e6:.2f} MB per step (embedding "
            f"{rec['embedding_bytes_per_step'] / 1e6:.2f} MB, dense all-reduce "
            f"{nbytes['dense_allreduce'] / steps / 1e6:.2f} MB") in summary, summary
