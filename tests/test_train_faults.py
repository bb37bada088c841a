"""Distributed failures (issue 17 item 15), with real torchrun processes: a hung rank is named after
the collective timeout (``GMP_COLLECTIVE_TIMEOUT``), a dead peer is one gmp line, and an error
every rank finds is printed once. Before: a 600 s silent wait, a raw ``RuntimeError:
Connection closed by peer`` traceback, and one error line per rank."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gmp.datasets.format import load_dataset
from test_train_cli import manifest_for
from torchrun_helpers import torchrun
from train_data import make_ctr_dataset

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    path = make_ctr_dataset(root / "ds", num_samples=120)
    man, _ = manifest_for(root, load_dataset(path), 3)
    return path, man


def run(nproc, script_args, env_extra, timeout=200):
    return torchrun(nproc, script_args, timeout=timeout, env=env_extra)


def gmp_errors(res) -> list[str]:
    return [ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("error: ")]


def train_args(path, man):
    return ["--dataset", str(path), "--manifest", str(man), "--engine", "distributed", "--epochs", "1",
            "--batch-size", "8", "--embedding-dim", "4"]


def fault_run_with_checkpoints(setup, ck, fault: str):
    """``(args, result)``: 2 epochs on 3 ranks checkpointing in ``ck``, rank 1 given ``fault`` at step 2."""
    path, man = setup
    args = [*train_args(path, man), "--epochs", "2", "--checkpoint-dir", str(ck)]
    return args, run(3, [str(HERE / "dist_fault_worker.py"), *args],
                     {"GMP_TEST_FAULT": fault, "FAULT_RANK": "1", "FAULT_STEP": "2", "GMP_COLLECTIVE_TIMEOUT": "20"})


def latest_of_every_worker(ck) -> dict:
    """``ck``'s latest checkpoint head, checked to list the part of each of the 3 workers."""
    import json

    head = json.loads((ck / "latest" / "checkpoint.json").read_text())
    assert all(f"worker-{w:05d}.pt" in head["files"] for w in range(3)), head["files"]
    return head


def test_a_hung_rank_is_named_after_the_collective_timeout(setup):
    path, man = setup
    res = run(3, [str(HERE / "dist_fault_worker.py"), *train_args(path, man)],
              {"GMP_TEST_FAULT": "hang", "FAULT_RANK": "1", "FAULT_STEP": "2", "GMP_COLLECTIVE_TIMEOUT": "5"})
    assert res.returncode != 0
    errs = gmp_errors(res)
    # rank 0 names rank 1; rank 2, which rank 0 did not answer, says so once (rank 0 could be the stopped one)
    assert len(errs) == 2, res.stderr[-3000:]
    named = [e for e in errs if e.startswith("error: rank 0: the ")]
    assert len(named) == 1 and "rank(s) 1 did not reach it within the collective timeout of 5 s" in named[0] \
        and "GMP_COLLECTIVE_TIMEOUT" in named[0], errs
    assert "rank 0 did not answer the check of which ranks are missing" in next(e for e in errs if e not in named)
    assert "Traceback" not in "\n".join(ln for ln in res.stderr.splitlines() if "[rank0]" in ln)


def test_a_hung_rank_0_is_named_by_the_others(setup):
    """Rank 0 stopped: no process named anything (rank 0 speaks for all, and it was the stopped one); torchrun's
    report blamed rank 1. Now the other ranks say that rank 0 did not answer, once per machine."""
    path, man = setup
    res = run(3, [str(HERE / "dist_fault_worker.py"), *train_args(path, man)],
              {"GMP_TEST_FAULT": "hang", "FAULT_RANK": "0", "FAULT_STEP": "2", "GMP_COLLECTIVE_TIMEOUT": "5"})
    assert res.returncode != 0
    errs = gmp_errors(res)
    assert len(errs) == 1 and "rank 0 did not answer the check of which ranks are missing" in errs[0] \
        and "if rank 0 printed none, rank 0 is the stopped, hung or lost process" in errs[0], res.stderr[-3000:]


def test_a_dead_peer_is_one_gmp_line(setup):
    """torchrun's SIGTERM (it terminates the others when a peer dies) reaching rank 0 after its
    collective failed, while it closes the run and after, does not kill it before it says why (it
    did, now and then, on a loaded machine: gmp.train.run.SignalStop). Each SIGTERM alone failed the
    test before SignalStop."""
    path, man = setup
    res = run(3, [str(HERE / "dist_fault_worker.py"), *train_args(path, man)],
              {"GMP_TEST_FAULT": "die", "FAULT_RANK": "2", "FAULT_STEP": "1", "GMP_COLLECTIVE_TIMEOUT": "20",
               "TERM_RANK_0": "1"})
    assert res.returncode != 0
    errs = gmp_errors(res)
    assert len(errs) == 1, res.stderr[-3000:]
    assert errs[0].startswith("error: rank 0: the ") and ("collective failed: a peer process died" in errs[0]
                                                           or "rank(s) 2 left it (the process ended" in errs[0]), errs


def test_a_worker_count_mismatch_is_printed_once(setup):
    """Printed once by whichever rank finds it first: rank 0 alone was stopped unheard by torchrun when a
    quiet rank exited first (a loaded machine: no line at all)."""
    path, man = setup
    res = run(2, ["-m", "cli.main", "train", *train_args(path, man)], {})
    assert res.returncode != 0
    errs = gmp_errors(res)
    assert errs == ["error: torchrun started 2 processes but the manifest places rows on 3 workers; "
                    "start 3 in all (torchrun --nnodes x --nproc-per-node = 3)."], res.stderr[-2000:]


def test_an_error_before_the_process_group_is_printed_once_per_launch(setup):
    """Every rank refuses --lr -1 before the process group exists: one line, not one per rank (3 were printed),
    and a second launch of the same command prints its own line (the first launch's mark does not silence it)."""
    path, man = setup
    for _ in range(2):
        res = run(3, ["-m", "cli.main", "train", *train_args(path, man), "--lr", "-1"], {})
        assert res.returncode != 0
        assert gmp_errors(res) == ["error: --lr must be a finite number > 0 and <= 1e+06, got -1.0."], res.stderr[-2000:]


def test_first_to_say_is_once_per_launch_and_line(tmp_path, monkeypatch):
    from cli import _common

    monkeypatch.setattr(_common, "SAID_DIR", tmp_path / "said")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert _common.first_to_say("a") and _common.first_to_say("a")  # not under torchrun: every process says it
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert _common.first_to_say("a") and _common.first_to_say("a")  # one process on this machine
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert [_common.first_to_say(x) for x in ("a", "a", "b", "a")] == [True, False, True, False]
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # torchrun restarted the ranks: a new launch
    assert [_common.first_to_say(x) for x in ("a", "a")] == [True, False]
    old = next((tmp_path / "said").iterdir())
    os.utime(old, (1, 1))  # a mark from long ago is removed by the next one written
    assert _common.first_to_say("c") and not old.exists()


def test_the_collective_timeout_is_validated():
    from gmp.comm.distributed import collective_timeout
    from gmp.errors import TrainingError

    assert collective_timeout(7) == 7.0
    os.environ["GMP_COLLECTIVE_TIMEOUT"] = "12.5"
    try:
        assert collective_timeout() == 12.5
        for text in ("soon", "0", "-1", "nan", "inf", "1e12", "0.0005"):  # named as the variable, not the flag
            os.environ["GMP_COLLECTIVE_TIMEOUT"] = text
            with pytest.raises(TrainingError) as exc:
                collective_timeout()
            assert str(exc.value) == (f"GMP_COLLECTIVE_TIMEOUT must be a number of seconds in [0.001, 1e+09], got "
                                      f"{text!r}; set another value or unset it for the default 600 s.")
    finally:
        del os.environ["GMP_COLLECTIVE_TIMEOUT"]
    assert collective_timeout() == 600.0
    with pytest.raises(TrainingError, match="The 'collective_timeout' parameter must be a finite number > 0"):
        collective_timeout(0)


def test_a_rank_that_cannot_write_its_part_leaves_latest_on_the_previous_checkpoint(setup, tmp_path):
    """Rank 1 cannot write its part of epoch 2's checkpoint: every rank fails there (rank 1 says why,
    rank 0 once for the others), latest still points to epoch 1's complete checkpoint, nothing
    half-written is left, and --resume continues from it. Before, a barrier let rank 0 commit a
    checkpoint without rank 1's files and point latest at it."""
    import json

    ck = tmp_path / "ck"
    args, res = fault_run_with_checkpoints(setup, ck, "save")
    assert res.returncode != 0
    errs = gmp_errors(res)
    assert any(e.startswith("error: cannot write a checkpoint in ") and "Permission denied" in e for e in errs), errs
    assert "error: another process could not write its part of the checkpoint; latest still points to the " \
           "previous checkpoint (its own error says why)." in errs, errs
    assert len(errs) == 2, errs
    head = latest_of_every_worker(ck)
    assert head["epoch"] == 1 and head["num_workers"] == 3
    assert sorted(p.name for p in ck.iterdir()) == ["ckpt-00001-00000000", "latest"]
    again = run(3, ["-m", "cli.main", "train", *args, "--resume"], {})
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((ck / "latest" / "checkpoint.json").read_text())["epoch"] == 2


def test_ranks_started_with_other_flags_are_refused_in_one_line(setup):
    """Rank 2 gets --lr 0.05 (a launch that differs by rank): refused before training, once, by rank 0.
    Before, the run trained silently with mixed learning rates. torchrun's SIGTERM, sent to rank 0 before
    and after the run closes, does not keep it from saying so (gmp.train.run.SignalStop)."""
    path, man = setup
    res = run(3, [str(HERE / "dist_fault_worker.py"), *train_args(path, man)],
              {"GMP_TEST_FAULT": "flags", "FAULT_RANK": "2", "FAULT_STEP": "0", "TERM_RANK_0": "1"})
    assert res.returncode != 0
    assert gmp_errors(res) == ["error: every process must get the same dataset, manifest and training flags, got "
                               "rank(s) 2 differing from rank 0 (lr=0.05 on rank 2, lr=0.01 on rank 0); launch every "
                               "rank with the same command."], \
        res.stderr[-3000:]
    assert '"kind": "epoch"' not in res.stdout


def test_a_process_that_cannot_join_the_group_is_one_line(setup):
    """RANK and WORLD_SIZE without a rendezvous address (torchrun not used): one line, no traceback."""
    path, man = setup
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update(RANK="1", WORLD_SIZE="3", LOCAL_RANK="1", PYTHONPATH=str(HERE.parent))
    res = subprocess.run([sys.executable, "-m", "cli.main", "train", *train_args(path, man)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert gmp_errors(res) == ["error: rank 1 of 3 could not join the process group at ?:? (Error initializing "
                               "torch.distributed using env:// rendezvous: environment variable MASTER_ADDR "
                               "expected, but not set): a peer did not arrive or left before the group formed (it "
                               "may have refused its own input: see that process's log, on its machine), or the "
                               "processes were not started by torchrun with the same rendezvous endpoint."], \
        res.stderr[-2000:]


def test_a_checkpoint_dir_is_locked_per_run_not_per_process(setup, tmp_path):
    """Issue 38: the three ranks of a run share one lock on --checkpoint-dir (rank 0 holds ``C/.gmp-lock``),
    so the run saves (shown by the three-rank --resume run above); while another run holds it (here this test
    process, as a run does), a run on the same
    directory is refused before training in one line, said once by rank 0, and writes nothing there."""
    from gmp import _io

    path, man = setup
    ck = tmp_path / "ck"
    args = ["-m", "cli.main", "train", *train_args(path, man), "--checkpoint-dir", str(ck)]
    ck.mkdir()
    other = _io.acquire_lock(ck / ".gmp-lock", busy=f"--checkpoint-dir {ck}")
    try:
        res = run(3, args, {})
    finally:
        other.release()
    assert res.returncode != 0
    errs = gmp_errors(res)
    assert len(errs) == 1 and re.match(rf"error: --checkpoint-dir \S*ck is being written by another gmp run "
                                       rf"\(pid {os.getpid()} ", errs[0]), res.stderr[-3000:]
    assert '"kind": "epoch"' not in res.stdout and sorted(p.name for p in ck.iterdir()) == []
    # the same run alone, its three ranks sharing the lock, saves: the --resume run of
    # test_a_rank_that_cannot_write_its_part_leaves_latest_on_the_previous_checkpoint shows it (one launch less)


def test_sigterm_on_one_rank_stops_every_rank_at_one_step_with_a_checkpoint(setup, tmp_path):
    """SIGTERM (what torchrun sends its workers on Ctrl-C) reaching rank 1 at step 2: every rank stops after
    the same step, the checkpoint holds every worker's part and rank 0 says so once (docs/train.md,
    "Checkpoints"; that a resume continues such a checkpoint is tested in test_train_cli.py)."""
    ck = tmp_path / "ck"
    _, res = fault_run_with_checkpoints(setup, ck, "term")
    assert res.returncode != 0
    errs = gmp_errors(res)
    assert len(errs) == 1 and re.fullmatch(rf"error: interrupted at epoch 1 step (\d+); checkpoint saved in "
                                           rf"{re.escape(str(ck))}, continue with the same command plus --resume\.",
                                           errs[0]), (errs, res.stderr[-3000:])
    step = int(re.search(r"step (\d+)", errs[0]).group(1))
    assert step >= 3  # stopped after the step the signal came in (agreed on at a later one)
    head = latest_of_every_worker(ck)
    assert (head["epoch"], head["num_workers"]) == (0, 3) and head["step"] == step, head
