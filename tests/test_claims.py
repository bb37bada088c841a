"""Issue 38 defects 1-3: an output is claimed when its command starts and only what was claimed is replaced;
``--overwrite`` removes only what gmp wrote; ``gmp report --out`` does not replace files it did not write.

Races are made deterministic with hooks, not sleeps: the first writer runs in a child process that stops at
a known point (it prints ``PAUSED`` and waits for a line on stdin) while the test acts, then lets it go on.
Every test here failed on the main branch before the fix (the old code replaced whatever stood at ``--out``
at the end and never refused a second writer)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_helpers import invoke, one_line_error
from gmp import _io
from gmp.datasets import format as dataset_format
from gmp.datasets.format import DATASET_FILES, load_dataset
from gmp.errors import OutputError, TrainingError

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "data" / "import"


def no_leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name
                  or p.name.endswith(_io.LOCK_SUFFIX))


@pytest.fixture
def criteo_file(tmp_path) -> Path:
    p = tmp_path / "train.tsv"
    shutil.copy(FIX / "criteo_small.tsv", p)
    return p


@pytest.fixture
def dataset(tmp_path, criteo_file) -> Path:
    out = tmp_path / "dsx"
    res = invoke("data", "import", "criteo", criteo_file, "--out", out)
    assert res.exit_code == 0, res.output
    return out


def during_import(monkeypatch, action) -> None:
    """Run ``action()`` once, in the middle of the next import (at its first chunk)."""
    orig = dataset_format.DatasetWriter.add
    done = []

    def add(self, *args, **kwargs):
        if not done:
            done.append(True)
            action()
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(dataset_format.DatasetWriter, "add", add)


class Paused:
    """A child process running ``code`` that stops where the code calls ``pause()`` until :meth:`go`."""

    PRELUDE = textwrap.dedent("""
        import sys
        _STDIN, _STDOUT = sys.stdin, sys.stdout  # CliRunner swaps sys.stdin/stdout while a command runs
        def pause():
            print("PAUSED", file=_STDOUT, flush=True)
            _STDIN.readline()
    """)

    def __init__(self, code: str, cwd: Path):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-c", self.PRELUDE + textwrap.dedent(code)], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if line.strip() != "PAUSED":
            self.proc.kill()
            raise AssertionError(f"the child did not reach its pause: {line}{self.proc.communicate()[1]}")

    def go(self) -> tuple[int, str]:
        out, err = self.proc.communicate("go\n", timeout=300)
        return self.proc.returncode, out + err


# --------------------------------------------------------------------------- defect 1: claim, swap only that
def test_a_directory_made_at_out_during_an_import_survives_and_the_import_fails(tmp_path, criteo_file, monkeypatch):
    race = tmp_path / "race"

    def theirs():
        race.mkdir()
        (race / "thesis.tex").write_text("x")

    during_import(monkeypatch, theirs)
    res = invoke("data", "import", "criteo", criteo_file, "--out", race)
    one_line_error(res, r"--out .*race appeared while gmp was writing it .*left as it is")
    assert sorted(p.name for p in race.iterdir()) == ["thesis.tex"] and (race / "thesis.tex").read_text() == "x"
    assert no_leftovers(tmp_path) == []


def test_out_is_claimed_before_any_input_is_read(tmp_path, monkeypatch):
    """The race of issue 38 at its earliest: a movielens import reads its side files (users, items) whole
    before the writer opens. A directory made at --out then survives, the import fails in one line saying
    it appeared meanwhile, and during that reading --out is already claimed (another writer is refused)."""
    from gmp.datasets import movielens

    src = tmp_path / "ml"
    shutil.copytree(FIX / "ml_atomic", src)
    race = tmp_path / "race"
    seen = []
    orig = movielens._read_atomic_side

    def side(*args, **kwargs):
        if not seen:  # reading ml.user: no writer is open yet
            other = subprocess.run([sys.executable, "-c", f"from gmp import _io; _io.claim_output({str(race)!r})"],
                                   env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
            seen.append(other)
            race.mkdir()
            (race / "thesis.tex").write_text("x")
        return orig(*args, **kwargs)

    monkeypatch.setattr(movielens, "_read_atomic_side", side)
    res = invoke("data", "import", "movielens", src, "--out", race)
    assert seen and seen[0].returncode != 0 and f"is being written by another gmp run (pid {os.getpid()} " \
        in seen[0].stderr, seen[0].stderr
    one_line_error(res, r"--out .*race appeared while gmp was writing it .*left as it is")
    assert sorted(p.name for p in race.iterdir()) == ["thesis.tex"] and (race / "thesis.tex").read_text() == "x"
    assert no_leftovers(tmp_path) == []


def test_an_overwritten_dataset_that_gains_a_file_during_the_import_is_kept(tmp_path, criteo_file, dataset,
                                                                             monkeypatch):
    before = load_dataset(dataset).sha256
    during_import(monkeypatch, lambda: (dataset / "NOTES.md").write_text("mine"))
    res = invoke("data", "import", "criteo", criteo_file, "--out", dataset, "--overwrite", "--min-count", "1")
    one_line_error(res, r"holds NOTES\.md \(put there while gmp was writing it\), which gmp did not write")
    assert (dataset / "NOTES.md").read_text() == "mine" and load_dataset(dataset).sha256 == before
    assert no_leftovers(tmp_path) == []


@pytest.mark.parametrize("how", ["moved", "deleted"])
def test_a_directory_replaced_during_a_write_is_not_replaced_again(tmp_path, how):
    """The claim is the directory's (device, inode); one deleted and made again may get the same inode
    back, and is then caught by what it holds (``own``: only the names a gmp output writes)."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"format": "gmp.report"}))
    with pytest.raises(OutputError, match="was replaced while gmp|theirs.txt \\(put there while gmp was writing"):
        with _io.atomic_directory(out, overwrite=True, kind="gmp.report", own={"report.json"}) as tmp:
            (tmp / "report.json").write_text(json.dumps({"format": "gmp.report", "new": True}))
            if how == "moved":
                out.rename(tmp_path / "moved")
            else:
                shutil.rmtree(out)
            out.mkdir()  # someone else's directory now stands at the path
            (out / "theirs.txt").write_text("x")
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]
    assert no_leftovers(tmp_path) == []


def test_a_second_import_to_one_out_fails_in_one_line_and_the_first_completes(tmp_path, criteo_file):
    out = tmp_path / "both"
    first = Paused(f"""
        from gmp.datasets import format as F
        orig = F.DatasetWriter.add
        def add(self, *a, **k):
            if not getattr(F, "_paused", False):
                F._paused = True
                pause()
            return orig(self, *a, **k)
        F.DatasetWriter.add = add
        from typer.testing import CliRunner
        from cli.main import app
        res = CliRunner().invoke(app, ["data", "import", "criteo", {str(criteo_file)!r}, "--out", {str(out)!r}])
        print(res.output)
        sys.exit(res.exit_code)
    """, cwd=tmp_path)
    res = invoke("data", "import", "criteo", criteo_file, "--out", out, "--min-count", "3")
    one_line_error(res, rf"--out .*both is being written by another gmp run \(pid {first.proc.pid} ")
    code, output = first.go()
    assert code == 0, output
    ref = tmp_path / "ref"  # the first import, whole: what the same command writes alone
    assert invoke("data", "import", "criteo", criteo_file, "--out", ref).exit_code == 0
    assert load_dataset(out).sha256 == load_dataset(ref).sha256
    assert load_dataset(out).meta["source"]["options"]["min_count"] != 3
    assert no_leftovers(tmp_path) == []


def test_a_killed_writers_lock_does_not_block_the_next(tmp_path, criteo_file):
    out = tmp_path / "k"
    child = Paused(f"""
        from gmp import _io
        _io.claim_output({str(out)!r})
        pause()
    """, cwd=tmp_path)
    assert _io.lock_path(out).exists()
    child.proc.send_signal(signal.SIGKILL)
    child.proc.communicate()
    assert _io.lock_path(out).exists()  # left behind: the kernel released its flock, nothing removed the file
    res = invoke("data", "import", "criteo", criteo_file, "--out", out)
    assert res.exit_code == 0, res.output
    assert not _io.lock_path(out).exists()


def test_a_second_compare_to_one_file_is_refused(tmp_path, dataset):
    out = tmp_path / "cmp.json"
    holder = Paused(f"""
        from gmp import _io
        _io.check_output_file({str(out)!r})
        pause()
    """, cwd=tmp_path)
    res = invoke("compare", dataset, "-w", 2, "--methods", "random", "--no-isolate", "--out", out)
    one_line_error(res, "is being written by another gmp run")
    assert not out.exists()
    holder.go()


def test_a_file_made_at_compare_out_meanwhile_is_not_replaced(tmp_path):
    out = tmp_path / "cmp.md"
    _io.check_output_file(out)
    out.write_text("mine")
    with pytest.raises(OutputError, match="appeared while gmp was writing it"):
        _io.write_claimed_file(out, b"gmp's")
    assert out.read_text() == "mine" and no_leftovers(tmp_path) == []


# --------------------------------------------------------------------------- --checkpoint-dir: one run at a time
@pytest.fixture(scope="module")
def train_setup(tmp_path_factory):
    from train_data import make_two_worker_run

    return make_two_worker_run(tmp_path_factory.mktemp("claims"))


CFG = dict(model="wdl", batch_size=8, epochs=1, optimizer="adagrad", embedding_dim=2, hidden=(4,))


def test_two_runs_sharing_a_checkpoint_dir_one_fails_and_the_others_checkpoints_stay(tmp_path, train_setup):
    from gmp.train import TrainConfig
    from gmp.train.checkpoint import find_checkpoint
    from gmp.train.run import train

    path, man = train_setup
    ckdir = tmp_path / "ck"
    first = Paused(f"""
        from gmp.train import TrainConfig
        from gmp.train.run import train
        seen = []
        def on_record(rec):
            if not seen:
                seen.append(rec)
                pause()
        train({str(path)!r}, {str(man)!r}, TrainConfig(**{CFG!r}), checkpoint_dir={str(ckdir)!r},
              on_record=on_record)
    """, cwd=tmp_path)
    with pytest.raises(TrainingError) as exc:
        train(path, man, TrainConfig(**CFG), checkpoint_dir=ckdir)
    assert "\n" not in str(exc.value)
    assert re.search(rf"--checkpoint-dir .*ck is being written by another gmp run \(pid {first.proc.pid} ",
                     str(exc.value)), str(exc.value)
    code, output = first.go()
    assert code == 0, output
    ckpt, head = find_checkpoint(ckdir)  # the first run's, whole; its lock is gone with it (released at the end)
    assert head["epoch"] == 1 and sorted(p.name for p in ckdir.iterdir()) == ["ckpt-00001-00000000", "latest"]


# --------------------------------------------------------------------------- defect 2: --overwrite, own files only
def test_overwrite_refuses_a_dataset_holding_files_gmp_did_not_write(tmp_path, criteo_file, dataset):
    before = load_dataset(dataset).sha256
    (dataset / "NOTES.md").write_text("mine")
    (dataset / "raw_backup").mkdir()
    (dataset / "raw_backup" / "orig.tsv").write_text("raw")
    res = invoke("data", "import", "criteo", criteo_file, "--out", dataset, "--overwrite")
    one_line_error(res, r"holds NOTES\.md, raw_backup, which gmp did not write there; --overwrite only replaces "
                        r"the files of a gmp dataset")
    assert (dataset / "NOTES.md").read_text() == "mine" and (dataset / "raw_backup" / "orig.tsv").read_text() == "raw"
    assert load_dataset(dataset).sha256 == before
    (dataset / "NOTES.md").unlink()
    shutil.rmtree(dataset / "raw_backup")
    res = invoke("data", "import", "criteo", criteo_file, "--out", dataset, "--overwrite", "--min-count", "1")
    assert res.exit_code == 0, res.output  # its own files only: replaced


def test_the_dataset_file_names_are_what_importers_and_the_generator_write(tmp_path, dataset):
    assert {p.name for p in dataset.iterdir()} <= DATASET_FILES
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    for args in (["--preset", "tiny", "-n", 300, "--scale", 0.05, "-o", d0], ["--continue", d0, "-o", d1]):
        res = invoke("data", "synth", *args)
        assert res.exit_code == 0, res.output
    names = {p.name for p in d0.iterdir()} | {p.name for p in d1.iterdir()}
    assert names <= DATASET_FILES and {"synth_ctr.npy", "synth_ids.npz"} <= names


def test_no_manifest_or_checkpoint_dir_inside_a_dataset(tmp_path, dataset):
    from gmp.train.checkpoint_dir import check_checkpoint_dir

    res = invoke("partition", dataset, "-w", 2, "-m", "random", "--out", dataset / "man")
    one_line_error(res, r"--out .*dsx/man is inside a gmp dataset \(.*dsx\)")
    assert not (dataset / "man").exists()
    with pytest.raises(TrainingError, match=r"`checkpoint_dir` .*dsx/ckpt is inside a gmp dataset"):
        check_checkpoint_dir(dataset / "ckpt", resume=False)
    assert not (dataset / "ckpt").exists()


def test_no_output_inside_an_export_or_a_checkpoint_dir(tmp_path, dataset):
    """A gmp output inside a TorchRec export made the export's ``--overwrite`` blame the person ("holds inner,
    which gmp did not write there"), one inside a checkpoint directory its next save; both are refused up front
    as inside a dataset or manifest, and so is a report into (or inside) an export."""
    from gmp.train.checkpoint_dir import check_checkpoint_dir

    man, ex = tmp_path / "man", tmp_path / "ex"
    assert invoke("partition", dataset, "-w", 2, "-m", "random", "--no-plots", "--out", man).exit_code == 0
    assert invoke("export", "torchrec", man, "--dataset", dataset, "--out", ex).exit_code == 0
    (ex / "sub").mkdir()  # a directory inside the export (made by hand): a report there is inside it too
    for args, where in ((("partition", dataset, "-w", 2, "-m", "random", "--out", ex / "inner"), "ex/inner"),
                        (("data", "synth", "-n", 50, "--preset", "tiny", "--out", ex / "ds"), "ex/ds"),
                        (("compare", dataset, "-w", 2, "--methods", "random", "--out", ex / "c.md"), "ex/c.md"),
                        (("report", man, "--format", "json", "--out", ex), "ex"),
                        (("report", man, "--format", "json", "--out", ex / "sub"), "ex/sub")):
        one_line_error(invoke(*args), rf"--out .*{where} is (inside )?a TorchRec export")
    (ex / "sub").rmdir()
    res = invoke("export", "torchrec", man, "--dataset", dataset, "--out", ex, "--overwrite")
    assert res.exit_code == 0, res.output

    ckpt = tmp_path / "ck"  # a checkpoint directory as a run leaves it: its latest checkpoint's header marks it
    (ckpt / "ckpt-00001-00000000").mkdir(parents=True)
    (ckpt / "ckpt-00001-00000000" / "checkpoint.json").write_text('{"format": "gmp.checkpoint", "schema_version": 3}')
    os.symlink("ckpt-00001-00000000", ckpt / "latest")
    for out, inside in ((ckpt / "inner", ckpt), (ckpt / "latest" / "x", ckpt / "latest")):
        res = invoke("partition", dataset, "-w", 2, "-m", "random", "--out", out)
        one_line_error(res, rf"--out {re.escape(str(out))} is inside a gmp checkpoint directory "
                            rf"\({re.escape(str(inside))}\)")
    one_line_error(invoke("compare", dataset, "-w", 2, "--methods", "random", "--out", ckpt / "c.md"),
                   r"inside a gmp checkpoint directory")
    check_checkpoint_dir(ckpt, resume=True)  # nothing but checkpoints there: the run can go on
    assert sorted(p.name for p in ckpt.iterdir()) == ["ckpt-00001-00000000", "latest"]


def test_overwrite_of_a_manifest_keeps_its_report_and_plots_but_nothing_else(tmp_path, dataset):
    man = tmp_path / "m"
    assert invoke("partition", dataset, "-w", 2, "-m", "random", "--out", man).exit_code == 0
    assert invoke("report", man, "--format", "html").exit_code == 0  # report.html: the manifest's own
    res = invoke("partition", dataset, "-w", 2, "-m", "random", "--seed", 3, "--out", man, "--overwrite", "--no-plots")
    assert res.exit_code == 0, res.output
    (man / "notes.txt").write_text("mine")
    res = invoke("partition", dataset, "-w", 2, "-m", "random", "--out", man, "--overwrite", "--no-plots")
    one_line_error(res, r"holds notes\.txt, which gmp did not write there; --overwrite only replaces the files of "
                        r"a placement manifest")
    assert (man / "notes.txt").read_text() == "mine"


# --------------------------------------------------------------------------- defect 3: gmp report --out DIR
def test_report_out_refuses_to_replace_files_it_did_not_write(tmp_path, dataset):
    man = tmp_path / "m"
    assert invoke("partition", dataset, "-w", 2, "-m", "random", "--out", man).exit_code == 0
    web = tmp_path / "web"
    web.mkdir()
    (web / "report.html").write_text("my page")
    (web / "traffic.png").write_bytes(b"my png")
    (web / "index.html").write_text("home")
    res = invoke("report", man, "--format", "html", "--out", web, "--no-plots")
    one_line_error(res, r"--out .*web already holds report\.html, which this report would replace; pass --overwrite")
    res = invoke("report", man, "--format", "html", "--out", web)
    one_line_error(res, r"already holds report\.html, traffic\.png, which this report would replace")
    assert (web / "report.html").read_text() == "my page" and (web / "traffic.png").read_bytes() == b"my png"
    res = invoke("report", man, "--format", "html", "--out", web, "--no-plots", "--overwrite")
    assert res.exit_code == 0, res.output
    assert (web / "report.html").read_text() != "my page" and (web / "index.html").read_text() == "home"
    assert (web / "traffic.png").read_bytes() == b"my png"  # not written (--no-plots), so not touched


def test_report_out_into_a_new_directory_and_into_the_manifest_itself(tmp_path, dataset):
    man = tmp_path / "m"
    assert invoke("partition", dataset, "-w", 2, "-m", "random", "--out", man).exit_code == 0
    res = invoke("report", man, "--format", "md", "--out", tmp_path / "new" / "r", "--no-plots")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "new" / "r").iterdir()) == ["report.md"]
    res = invoke("report", man, "--format", "md", "--out", man, "--no-plots")  # its own report.md
    assert res.exit_code == 0, res.output
    assert no_leftovers(tmp_path) == [] and no_leftovers(tmp_path / "new") == []


def test_a_claim_is_exclusive_between_processes_and_reentrant_within_one(tmp_path):
    out = tmp_path / "x"
    a = _io.claim_output(out)
    assert _io.claim_output(out) is a  # a command checks early and writes late under one claim
    code = subprocess.run([sys.executable, "-c", f"from gmp import _io; _io.claim_output({str(out)!r})"],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert code.returncode != 0 and f"pid {os.getpid()} " in code.stderr and "OutputError" in code.stderr
    a.release()
    assert not _io.lock_path(out).exists() and not out.exists()


def test_a_library_call_that_fails_after_claiming_releases_its_claim(tmp_path, criteo_file, dataset):
    """A notebook that fixes its mistake and calls again must start from a fresh claim."""
    from gmp.datasets.streaming import CommonOptions
    from gmp.datasets.dispatch import import_dataset
    from gmp.errors import ImportDataError

    (dataset / "vocab.npz").unlink()  # --extend needs it: refused after the output was claimed
    out = tmp_path / "day2"
    with pytest.raises(ImportDataError, match="vocab.npz"):
        import_dataset("criteo", [criteo_file], out, common=CommonOptions(extend=str(dataset)))
    assert not _io.lock_path(out).exists()


def test_an_empty_out_that_gains_a_file_while_written_keeps_it(tmp_path):
    """An empty existing directory may be written without --overwrite; one that someone fills meanwhile
    is not replaced (the export's own files are all it may hold)."""
    from gmp.export.torchrec import EXPORT_FILES

    out = tmp_path / "exp"
    out.mkdir()
    with pytest.raises(OutputError, match=r"holds thesis\.tex \(put there while gmp was writing it\)"):
        with _io.atomic_directory(out, overwrite=True, own=EXPORT_FILES) as tmp:
            (tmp / "plan.json").write_text("{}")
            (out / "thesis.tex").write_text("x")
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"] and no_leftovers(tmp_path) == []
