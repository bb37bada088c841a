"""Absurd values and mistyped flags (issue 38): each was a traceback, a hang, typer's 6-line box or a generic
"out of memory" naming nothing, and is now one ``error:`` line naming the flag, or handled."""

from __future__ import annotations

import errno
import os
import re
import threading

import pytest
from typer.testing import CliRunner

from cli.main import app
from train_data import make_ctr_dataset

runner = CliRunner()


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_ctr_dataset(tmp_path_factory.mktemp("lim") / "ds", num_samples=60)


def one_line(args, pattern, *, env=None, code=2):
    res = runner.invoke(app, [str(a) for a in args], env=env)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]  # stdout may hold the records before it
    assert res.exit_code == code, (res.exit_code, res.output, res.exception)
    assert len(lines) == 1 and re.search(pattern, lines[0]), res.output
    assert "Traceback" not in res.output
    return lines[0]


@pytest.mark.parametrize("args,pattern", [
    (["train", "--lrr", "1"], r"^error: No such option: --lrr \(Possible options: --lr\) \(see '.* train --help'\)\.$"),
    (["trian"], r"^error: No such command 'trian'\. Did you mean 'train'\? \(see '.* --help'\)\.$"),
    (["partition"], r"^error: Missing argument 'dataset' \(see '.* partition --help'\)\.$"),
    (["train", "--batch-size", "abc"], r"^error: Invalid value for '--batch-size': .*integer"),
])
def test_a_usage_error_is_one_line_with_the_hint(args, pattern):
    """Was typer's boxed usage (6 lines); the did-you-mean hint is kept."""
    one_line(args, pattern)


def test_help_and_version_still_exit_0():
    assert runner.invoke(app, ["--version"]).exit_code == 0
    res = runner.invoke(app, ["train", "--help"])
    assert res.exit_code == 0 and "--embedding-dim" in res.output


@pytest.mark.parametrize("flags,pattern", [
    (["--lr", "1e308"], r"^error: --lr must be a finite number > 0 and <= 1e\+06, got 1e\+308\.$"),
    (["--batch-size", str(2**63)], rf"^error: --batch-size must be an int >= 1 and <= 2147483647, got {2**63}\.$"),
    (["--collective-timeout", "1e300"], r"^error: --collective-timeout must be a finite number > 0 and <= 1e\+09, "
                                        r"got 1e\+300\.$"),
    (["--collective-timeout", "1e-9"], r"^error: --collective-timeout must be at least 0\.001 s \(the collectives "
                                       r"count in milliseconds\), got 1e-09\.$"),
])
def test_absurd_training_values_are_refused_naming_the_flag(ds, flags, pattern):
    one_line(["train", "--dataset", ds, "--epochs", 0, *flags], pattern)


@pytest.mark.parametrize("value", ["-3", "0", "many"])
def test_a_bad_gmp_torch_threads_is_one_line(ds, value, monkeypatch):
    """``GMP_TORCH_THREADS=-3`` was torch's RuntimeError traceback at start."""
    monkeypatch.setenv("GMP_TORCH_THREADS", value)
    one_line(["train", "--dataset", ds, "--epochs", 0],
             rf"^error: GMP_TORCH_THREADS must be a positive integer .*, got '{value}'; set it to a number")


def test_a_cache_larger_than_the_rows_trains_like_one_holding_all(ds):
    """``--cache-rows 10**15`` sized the herald queues by the capacity: a generic out of memory. A cache never
    holds more rows than exist, so it trains as a cache of every row does."""
    runs = []
    for rows in ("1000000000000000", "100000"):
        res = runner.invoke(app, ["train", "--dataset", str(ds), "--schedule", "herald", "--cache-rows", rows,
                                  "--embedding-dim", "4", "--seed", "3"])
        assert res.exit_code == 0, res.output
        runs.append(re.search(r'"train_loss": ([\d.e-]+)', res.output).group(1))
    assert runs[0] == runs[1]


def test_absurd_communities_are_refused(tmp_path):
    one_line(["data", "synth", "--out", tmp_path / "s", "--samples", 100, "--communities", 10**12],
             r"^error: synth: --communities must be at most 2,147,483,647, got 1,000,000,000,000\.$")
    one_line(["data", "synth", "--out", tmp_path / "s", "--samples", 100, "--communities", 2**31 - 1],
             r"^error: synth: --communities 2,147,483,647 \(per-community parameters\) needs about [\d.,]+ GiB of "
             r"memory")
    assert not (tmp_path / "s").exists()


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what a Python file's write raises (/dev/full)


def test_a_full_disk_at_a_checkpoint_names_the_directory(ds, tmp_path, monkeypatch):
    """torch's writer given a path says a full device with a RuntimeError ("unexpected pos 704 vs 598",
    observed writing to /dev/full): a traceback naming neither the file nor the cause. Given a Python file,
    the write fails with ENOSPC, said in one line naming --checkpoint-dir."""
    import gmp.train.checkpoint as ckpt

    def fake_save(obj, f):
        if isinstance(f, (str, os.PathLike)):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        _enospc()

    monkeypatch.setattr(ckpt.torch, "save", fake_save)
    line = one_line(["train", "--dataset", ds, "--epochs", 1, "--embedding-dim", 2, "--checkpoint-dir",
                     tmp_path / "ck"], r"^error: no space left on the device while writing ")
    assert str(tmp_path / "ck") in line and "--checkpoint-dir" in line, line


def test_a_full_disk_writing_the_log_names_the_log(ds, tmp_path, monkeypatch):
    """A file object's write error names no file: it said "no space left on the device writing a file"."""
    import gmp.train.run as run_mod

    class Full:
        write = flush = staticmethod(_enospc)

        def close(self):
            pass

    monkeypatch.setattr(run_mod, "open_log", lambda *a, **k: Full())
    log = tmp_path / "log.jsonl"
    line = one_line(["train", "--dataset", ds, "--epochs", 1, "--embedding-dim", 2, "--log-json", log],
                    r"^error: no space left on the device writing ")
    assert str(log) in line, line


class TwoRanks:
    """This process as rank ``rank`` of two; ``peer_given``: whether the other rank was given a directory."""

    world_size = 2

    def __init__(self, rank: int, *, peer_given: bool = True, token: str = "t0k"):
        self.rank, self.peer_given, self.token = rank, peer_given, token
        self.local_workers = [rank]
        self.is_main = rank == 0
        self.calls = 0

    def broadcast_object(self, obj):
        return obj if self.is_main else self.token

    def barrier(self):
        pass

    def ranks_unlike_rank0(self, fingerprint):
        self.calls += 1
        if self.calls == 1:  # "was a directory given": the peer's answer against rank 0's
            mine, peer = fingerprint, self.peer_given
            return [] if mine == peer else [1 - self.rank if self.is_main else self.rank]
        return [] if self.is_main or fingerprint else [self.rank]  # "does this rank see rank 0's probe"


def test_a_rank_given_another_checkpoint_dir_is_refused_before_training(tmp_path):
    """Rank 1 given another --checkpoint-dir passed the flag comparison and failed at the first save with
    "No such file or directory"; now it does not find rank 0's probe and every rank refuses at the start."""
    from gmp.errors import TrainingError
    from gmp.train.checkpoint_dir import check_shared_directory

    shared, other = tmp_path / "shared", tmp_path / "other"
    shared.mkdir()
    (shared / ".gmp-probe-t0k").touch()  # what rank 0 wrote in its directory
    check_shared_directory(TwoRanks(1), shared)  # the same directory: fine
    with pytest.raises(TrainingError, match=r"^The 'checkpoint_dir' parameter of rank\(s\) 1 is not the directory "
                                            r"rank 0 writes in \(.*other on this rank\)"):
        check_shared_directory(TwoRanks(1), other)
    with pytest.raises(TrainingError, match=r"must be given to every rank or to none; rank\(s\) 1 differ"):
        check_shared_directory(TwoRanks(1, peer_given=True), None)
    # rank 0 leaves nothing behind: its probe is removed, and a directory it created is too on a refusal
    check_shared_directory(TwoRanks(0), tmp_path / "made")
    assert (tmp_path / "made").is_dir() and list((tmp_path / "made").iterdir()) == []
