"""Signals during a run (gmp.train.run.SignalStop): Ctrl-C stops at the next step and leaves the
handlers as they were; under torchrun a run that ends with an error keeps SIGTERM ignored, so the
rank prints its line before torchrun's SIGTERM (it had killed rank 0 mid-report when a peer died:
test_train_faults.test_a_dead_peer_is_one_gmp_line, flaky on a loaded machine)."""

from __future__ import annotations

import json
import os
import re
import signal
from types import SimpleNamespace

import pytest

from gmp.errors import TrainingError, raise_terminated
from gmp.train import TrainConfig
from gmp.train.run import SignalStop, train
from test_train_cli import ctr, manifest_for  # noqa: F401 (a fixture)


@pytest.fixture
def terminal_sigint():
    """SIGINT as in a terminal (Python's handler), also when the suite runs in the background, where it is
    ignored (`cmd &`)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_stops_at_the_next_step_and_restores_the_handlers(ctr, tmp_path, terminal_sigint):
    root, path, ds = ctr
    man, _ = manifest_for(root, ds, 2)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    sent = []

    def on_record(rec):
        if rec.get("kind", "epoch") == "epoch" and not sent:
            sent.append(rec["epoch"])
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C at the end of the first epoch

    cfg = TrainConfig(model="wdl", batch_size=16, epochs=3, embedding_dim=4)
    with pytest.raises(TrainingError, match=r"interrupted at epoch 2 step \d+; checkpoint saved in"):
        train(path, man, cfg, checkpoint_dir=tmp_path / "ck", on_record=on_record)
    assert sent == [1]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert (tmp_path / "ck" / "latest" / "checkpoint.json").exists()


class _Trainer:
    def __init__(self, is_main):
        self.stops = 0
        self.ctx = SimpleNamespace(engine=SimpleNamespace(is_main=is_main))

    def context(self):
        return self.ctx

    def request_stop(self):
        self.stops += 1


@pytest.mark.parametrize("failed", [False, True])
def test_under_torchrun_sigterm_asks_for_a_stop_and_stays_ignored_after_an_error(failed, terminal_sigint):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    tr, stop = _Trainer(is_main=False), SignalStop(distributed=True)
    try:
        stop.start()  # the process group has started, the trainer not yet
        assert signal.getsignal(signal.SIGINT) == before[0]
        os.kill(os.getpid(), signal.SIGTERM)  # held: it neither kills this process nor is lost
        assert stop.pending
        stop.attach(tr)
        assert tr.stops == 1  # the held signal stops the trainer at its first step
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert tr.stops == 3
        stop.end(failed=failed)
        assert signal.getsignal(signal.SIGINT) == before[0]
        assert signal.getsignal(signal.SIGTERM) == (signal.SIG_IGN if failed else before[1])
        if failed:
            os.kill(os.getpid(), signal.SIGTERM)  # ignored: this test process lives on
            assert tr.stops == 3
    finally:
        signal.signal(signal.SIGTERM, before[1])


def test_a_local_run_leaves_sigterm_alone(terminal_sigint):
    before, before_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    tr, stop = _Trainer(is_main=True), SignalStop(distributed=False)
    stop.start()
    stop.attach(tr)
    assert signal.getsignal(signal.SIGTERM) == before and signal.getsignal(signal.SIGINT) != before_int
    os.kill(os.getpid(), signal.SIGINT)
    assert tr.stops == 1
    stop.end(failed=True)
    assert signal.getsignal(signal.SIGTERM) == before and signal.getsignal(signal.SIGINT) == before_int


def test_a_local_run_under_gmps_commands_holds_sigterm_as_ctrl_c(terminal_sigint):
    """`gmp train` (whose SIGTERM handler is gmp.errors.raise_terminated) stops at the next step on SIGTERM and
    checkpoints, as on Ctrl-C, also without torchrun; the command's handler is back after the run."""
    before = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        tr, stop = _Trainer(is_main=True), SignalStop(distributed=False)
        stop.start()
        stop.attach(tr)
        os.kill(os.getpid(), signal.SIGTERM)  # held: no Terminated raised here
        assert tr.stops == 1
        stop.end(failed=True)  # a local run that failed does not ignore SIGTERM after (torchrun's reason)
        assert signal.getsignal(signal.SIGTERM) is raise_terminated
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("distributed", [False, True])
def test_a_signal_ignored_at_start_stays_ignored(distributed):
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `gmp train ... &` from a script starts it
    try:
        tr, stop = _Trainer(is_main=True), SignalStop(distributed=distributed)
        stop.start()
        stop.attach(tr)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
        assert tr.stops == 0
        stop.end(failed=False)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_sigterm_stops_gmp_train_at_a_step_with_a_checkpoint_it_resumes_from(ctr, tmp_path):
    """SIGTERM (``kill``, a job scheduler's stop) killed a local `gmp train` where it stood; it now stops at
    the next step as Ctrl-C does, saves a checkpoint and says how to continue, and the resume finishes."""
    import subprocess
    import sys
    from pathlib import Path

    root, path, ds = ctr
    ck = tmp_path / "ck"
    cmd = [sys.executable, "-m", "cli.main", "train", str(path), "--checkpoint-dir", str(ck), "--schedule", "naive",
           "--batch-size", "16"]
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([*cmd, "--epochs", "100000"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        first = proc.stdout.readline()  # an epoch ended: the run is under way
        assert '"epoch": 1' in first and proc.poll() is None, first
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in err, err[-2000:]
    m = re.fullmatch(rf"error: interrupted at epoch (\d+) step \d+; checkpoint saved in {re.escape(str(ck))}, "
                     r"continue with the same command plus --resume\.", last)
    assert m, last
    res = subprocess.run([*cmd, "--epochs", m.group(1), "--resume"], cwd=repo, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["epoch"] == int(m.group(1))
