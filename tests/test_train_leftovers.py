"""What a `gmp train` run leaves behind after another run was killed or after it fails itself: the JSON log
a killed run tore, the checkpoint directory of a run that failed before its first checkpoint, and the hints
its errors give (each test failed before its fix)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import invoke, one_line_error
from gmp.errors import GmpError, TrainingError
from train_data import make_two_worker_run, train_two_worker_run as run

HERE = Path(__file__).parent
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_two_worker_run(tmp_path_factory.mktemp("leftovers"))


def records(log):
    return [json.loads(line) for line in log.read_text().splitlines()]


# --------------------------------------------------------------------------- the JSON log after a killed run
@pytest.mark.parametrize("cut", ["torn", "complete"])
def test_a_run_appending_to_a_killed_runs_log_starts_its_own_line_and_resumes_with_it(setup, tmp_path, cut):
    """A killed run's last line without its newline: a torn one is dropped, a complete one ended; the next
    run's first line was glued onto it, and its resume refused the log ("line 1 is not a gmp training record")."""
    full = tmp_path / "full.jsonl"
    run(setup, None, log_json=full, settings={"dataset": "ds"})
    text = full.read_text()
    log = tmp_path / "log.jsonl"
    kept = text[:-1] if cut == "complete" else text[:len(text.splitlines()[0]) + 30]
    log.write_text(kept)
    run(setup, tmp_path / "ck", log_json=log, settings={"dataset": "ds"})
    recs = records(log)  # every line is one JSON object
    old = [r for r in recs if r["run"] == json.loads(text.splitlines()[0])["run"]]
    assert len(old) == (len(text.splitlines()) if cut == "complete" else 1)
    run(setup, tmp_path / "ck", epochs=2, resume=True, log_json=log, settings={"dataset": "ds"})
    new = [(r["epoch"], r.get("kind")) for r in records(log) if r not in old]
    assert new == [(0, "settings"), (1, "epoch"), (1, "settings"), (2, "epoch")]


def test_a_torn_line_in_the_middle_of_a_log_is_named_on_resume(setup, tmp_path):
    """What an earlier gmp left (a run's first line appended onto a torn one): named as such, not as a foreign
    file, and the log is left as it is."""
    run(setup, tmp_path / "ck")
    log = tmp_path / "log.jsonl"
    log.write_text('{"epoch": 1, "kind": "st{"kind": "settings", "epoch": 0, "step": 0}\n{"epoch": 1}\n')
    before = log.read_text()
    with pytest.raises(TrainingError, match=r"line 1 is a torn record \(a run killed while writing it\) with later "
                                            r"lines after it; delete that line"):
        run(setup, tmp_path / "ck", epochs=2, resume=True, log_json=log)
    assert log.read_text() == before


# --------------------------------------------------------------------------- the log's version
def test_each_run_of_a_log_says_its_format_and_version_in_its_settings_line(setup, tmp_path):
    """Adversarial pass on formats, F6: gmp reads its logs back (a resume trims and rewrites them), and their
    lines changed shape, but no line said which version it was."""
    log = tmp_path / "log.jsonl"
    run(setup, tmp_path / "ck", log_json=log, settings={"dataset": "ds"})
    first = records(log)[0]
    assert (first["kind"], first["format"], first["schema_version"]) == ("settings", "gmp.train_log", 2)
    assert [r for r in records(log)[1:] if "schema_version" in r] == []  # a header per run, not per line


def test_a_version_1_log_is_resumed_and_a_newer_one_refused(setup, tmp_path):
    """Lines without a version (an older gmp's, or one without "run" at all, as the first versions wrote them)
    are read as before; a line of a newer schema_version is refused before the log is rewritten."""
    log = tmp_path / "log.jsonl"
    run(setup, tmp_path / "ck", log_json=log, settings={"dataset": "ds"})
    settings, epoch = records(log)
    old = {k: v for k, v in settings.items() if k not in ("format", "schema_version")}
    first = {k: v for k, v in epoch.items() if k != "run"}  # e4e78ab's shape: no run id
    lines = [json.dumps(first), json.dumps(old), json.dumps(epoch), json.dumps({**epoch, "epoch": 2})]
    log.write_text("\n".join(lines) + "\n")  # the last line: past the checkpoint, trimmed by the resume
    run(setup, tmp_path / "ck", epochs=2, resume=True, log_json=log, settings={"dataset": "ds"})
    got = records(log)
    assert got[:3] == [first, old, epoch]
    assert [(r["epoch"], r["kind"], r.get("schema_version")) for r in got[3:]] == [(1, "settings", 2),
                                                                                  (2, "epoch", None)]
    newer = tmp_path / "newer.jsonl"
    newer.write_text(json.dumps({**settings, "schema_version": 3}) + "\n" + json.dumps(epoch) + "\n")
    before = newer.read_text()
    for resume in (False, True):
        with pytest.raises(TrainingError) as err:
            run(setup, tmp_path / "ck" if resume else None, epochs=2, resume=resume, log_json=newer)
        assert str(err.value) == (f"`log_json` {newer}: line 1 has schema_version 3; this gmp reads up to 2. Upgrade "
                                  f"gmp or choose another file.")
    assert newer.read_text() == before


# --------------------------------------------------------------------------- GMP_NO_VERIFY
def test_gmp_train_honours_gmp_no_verify(setup, tmp_path, monkeypatch):
    ds = tmp_path / "ds"
    shutil.copytree(setup[0], ds)
    dense = np.load(ds / "dense.npy")
    dense[0, 0] += 1
    np.save(ds / "dense.npy", dense)
    args = ("train", ds, "--engine", "local", "--epochs", 1, "--batch-size", 8, "--embedding-dim", 2)
    one_line_error(invoke(*args), r"arrays do not match the arrays_sha256 .* \(GMP_NO_VERIFY=1 skips this check\)")
    monkeypatch.setenv("GMP_NO_VERIFY", "1")
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    assert "trained epoch 1" in res.stderr


# --------------------------------------------------------------------------- no empty checkpoint directory
@pytest.fixture(scope="module")
def corrupt_manifest(setup, tmp_path_factory):
    man = tmp_path_factory.mktemp("bad") / "man"
    shutil.copytree(setup[1], man)
    primary = np.load(man / "embedding_primary.npy")
    primary[0] = 1 - primary[0]
    np.save(man / "embedding_primary.npy", primary)
    return man


@pytest.mark.parametrize("why, said", [("resume", "no checkpoint in"),
                                       ("manifest", "do not match placement_sha256"),
                                       ("log_json", "line 1 is not a gmp training record")])
@pytest.mark.parametrize("where", ["ck", "a/b/ck"])
def test_a_failed_run_leaves_no_checkpoint_dir_it_created(setup, corrupt_manifest, tmp_path, why, said, where):
    ckdir = tmp_path / "out" / where
    (tmp_path / "out").mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    kw = {"resume": dict(resume=True), "manifest": dict(manifest=corrupt_manifest), "log_json": dict(log_json=notes)}
    with pytest.raises(GmpError, match=said):
        run(setup, ckdir, **kw[why])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []  # its missing parents went too
    assert notes.read_text() == "my notes\n"


def test_a_failed_run_keeps_a_checkpoint_dir_that_existed(setup, tmp_path):
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    with pytest.raises(TrainingError, match="no checkpoint in"):
        run(setup, ckdir, resume=True)
    assert ckdir.is_dir() and list(ckdir.iterdir()) == []


def test_an_interrupted_run_keeps_its_checkpoint(setup, tmp_path):
    ckdir = tmp_path / "ck"
    with pytest.raises(TrainingError, match="interrupted at epoch 1"):
        run(setup, ckdir, stop_after_steps=2)
    assert (ckdir / "latest" / "checkpoint.json").is_file()


@pytest.mark.distributed
def test_a_failed_torchrun_leaves_no_checkpoint_dir(setup, corrupt_manifest, tmp_path):
    from test_train_distributed import torchrun

    ckdir = tmp_path / "ck"
    res = torchrun(2, ["--no-python", str(Path(sys.executable).parent / "gmp"), "train", str(setup[0]),
                       "--manifest", str(corrupt_manifest), "--epochs", "1", "--checkpoint-dir", str(ckdir)])
    assert res.returncode != 0
    assert "do not match placement_sha256" in res.stderr, res.stderr[-2000:]
    assert not ckdir.exists()


# --------------------------------------------------------------------------- the torchrun hint
def test_the_distributed_engine_outside_torchrun_suggests_the_readmes_command(setup, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    err = one_line_error(invoke("train", setup[0], "--manifest", setup[1], "--engine", "distributed"),
                         r"--engine distributed needs RANK and WORLD_SIZE")
    assert "'torchrun --standalone --nproc-per-node N --no-python gmp train DATASET --manifest M'" in err
    assert "cli.main" not in err
    assert "--nproc-per-node 8 --no-python gmp train" in (HERE.parent / "README.md").read_text()
