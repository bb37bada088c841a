"""A process that refuses its input before the process group exists tells its peers (gmp/launch.py).

Two torchrun launches of one process each stand for two machines (torchrun on one machine stops the
other ranks itself). Before: the rank whose checks passed waited at the join for the whole collective
timeout (600 s by default), then blamed the rendezvous; here every run would end in the test's subprocess
timeout instead of its line. Also: flags given to some ranks only are named (which setting differs), and
SIGTERM ends ``gmp partition --distributed`` with the interrupted line and without its lock file."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gmp.datasets.format import load_dataset
from test_train_cli import manifest_for
from torchrun_helpers import ROOT, free_port, two_machines
from train_data import make_ctr_dataset

NO_TRACE = {"GMP_COLLECTIVE_TIMEOUT": "300"}  # a hang would show as the subprocess timeout (150 s), not as 300 s


def gmp_errors(res) -> list[str]:
    return [ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("error: ")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    path = make_ctr_dataset(root / "ds", num_samples=200)
    man, _ = manifest_for(root, load_dataset(path), 2)
    return root, path, man


def train_cmd(path, man, *extra):
    return ["-m", "cli.main", "train", "--dataset", str(path), "--manifest", str(man), "--epochs", "1",
            "--batch-size", "16", "--embedding-dim", "4", *extra]


def test_a_rank_missing_its_manifest_is_named_on_the_other_machine(setup):
    root, path, man = setup
    res = two_machines([train_cmd(path, man), train_cmd(path, root / "missing")], timeout=150, env=NO_TRACE)
    assert all(r.returncode != 0 for r in res)
    mine = gmp_errors(res[1])
    assert len(mine) == 1 and "missing is not a directory" in mine[0], res[1].stderr[-2000:]
    told = gmp_errors(res[0])
    # one host in a test: the line points at this machine's log instead of quoting it
    assert told == ["error: rank 1 refused its input before the process group formed (its error line is in this "
                    "machine's log); nothing was done here: fix that input and start every process again."], \
        res[0].stderr[-2000:]


def test_rank_0_refusing_its_output_is_named_on_the_other_machine(setup, tmp_path):
    root, path, man = setup
    out = tmp_path / "taken"
    out.mkdir()
    (out / "x").write_text("not a manifest")
    cmd = ["-m", "cli.main", "partition", str(path), "--distributed", "-w", "2", "--no-plots", "--out", str(out)]
    res = two_machines([cmd, cmd], timeout=150, env=NO_TRACE, cwd=ROOT)
    assert all(r.returncode != 0 for r in res)
    assert any("already exists and is not empty" in e for e in gmp_errors(res[0])), res[0].stderr[-2000:]
    assert [e for e in gmp_errors(res[1]) if "rank 0 refused its input before the process group formed" in e], \
        res[1].stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["x"]


def test_a_rank_with_a_damaged_dataset_is_named_in_partition(setup, tmp_path):
    root, path, man = setup
    bad = tmp_path / "bad"
    shutil.copytree(path, bad)
    ids = np.load(bad / "indices.npy")
    np.save(bad / "indices.npy", ids[:-3])
    cmd = ["-m", "cli.main", "partition", "--distributed", "-w", "2", "--no-plots", "--out", str(tmp_path / "m")]
    res = two_machines([[*cmd, str(path)], [*cmd, str(bad)]], timeout=150, env=NO_TRACE)
    assert all(r.returncode != 0 for r in res)
    assert any("indices.npy" in e for e in gmp_errors(res[1])), res[1].stderr[-2000:]
    assert [e for e in gmp_errors(res[0]) if e.startswith("error: rank 1 refused its input")], res[0].stderr[-2000:]
    assert not (tmp_path / "m").exists()


def test_a_json_log_given_to_one_rank_only_is_refused_and_named(setup, tmp_path):
    """--log-json on rank 1 alone was accepted and silently not written (rank 0 writes the log)."""
    root, path, man = setup
    log = tmp_path / "r1.jsonl"
    res = two_machines([train_cmd(path, man), train_cmd(path, man, "--log-json", str(log))], timeout=150,
                       env=NO_TRACE)
    assert all(r.returncode != 0 for r in res)
    said = gmp_errors(res[0])
    assert said == ["error: every process must get the same dataset, manifest and training flags, got rank(s) 1 "
                    "differing from rank 0 (log_json=True on rank 1, log_json=False on rank 0); launch every rank "
                    "with the same command."], res[0].stderr[-2000:]
    assert not log.exists()


def test_settings_unlike_rank0_names_the_first_difference():
    """The local engine (one process) never differs; the wording is first_difference's, both ways."""
    from gmp.comm import LocalEngine
    from gmp.wording import first_difference

    assert LocalEngine(3).settings_unlike_rank0({"seed": 1}) == ([], "")
    assert first_difference({"a": 1, "b": {"x": 1, "y": 2}}, {"a": 1, "b": {"x": 1, "y": 3}}) == ("b.y=2", "b.y=3")
    assert first_difference({"a": 1}, {"a": 1, "c": 0}) == ("c=None", "c=0")
    assert first_difference({"a": 1}, {"a": 1}) is None


def test_sigterm_ends_a_distributed_partition_in_one_line_without_its_lock(tmp_path):
    """SIGTERM (a scheduler's stop, which torchrun forwards) killed the ranks where they stood: no line, and
    the output's lock file left behind. One process of a launch (WORLD_SIZE 1) is enough to see it."""
    path = make_ctr_dataset(tmp_path / "ds", num_samples=60_000)
    out = tmp_path / "m"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "partition", str(path), "--distributed", "-w", "4",
                             "--no-plots", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)
    lock = tmp_path / ".m.gmp-lock"
    deadline = time.monotonic() + 120
    while not lock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lock.exists(), "the run ended (or never claimed its output) before the signal could be sent"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert [ln for ln in err.splitlines() if ln.startswith("error: ")] == ["error: interrupted; nothing written to m."]
    assert not lock.exists() and not out.exists()


def test_streamed_partition_refuses_starts_it_does_not_have_in_its_own_words(tmp_path):
    """`-O init=metis` with --chunk-samples listed 'bicut' and 'greedy-stream' as choices, which the next run
    refused; and a one-process chunked run printed a block-samples setting that does not apply to it."""
    from cli_helpers import invoke

    path = make_ctr_dataset(tmp_path / "ds", num_samples=300)
    res = invoke("partition", path, "--chunk-samples", 100, "-O", "init=metis", "-w", 2, "--out", tmp_path / "m")
    assert res.exit_code == 2
    assert "the streamed hybrid (--distributed, --chunk-samples) starts from" in res.output \
        and "init='metis' needs the whole graph" in res.output and "bicut" not in res.output, res.output
    res = invoke("partition", path, "--chunk-samples", 100, "-w", 2, "--no-plots", "--out", tmp_path / "m2")
    assert res.exit_code == 0, res.output
    assert "settings:" in res.output and "block_samples" not in res.output, res.output
