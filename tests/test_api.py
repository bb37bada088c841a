"""``import gmp``: the facade's names, their docs walkthrough (docs/python.md runs here), and readable reprs."""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gmp
from gmp import api

ROOT = Path(__file__).resolve().parents[1]
VERBS = ("import_dataset", "synthesize", "load_dataset", "partition_dataset", "repartition_dataset", "load_manifest",
         "make_report", "compare_partitioners", "train_model", "simulate_epoch", "export_torchrec")


def test_facade_exports_the_verbs():
    assert set(VERBS) <= set(gmp.__all__) and set(api.__all__) == set(VERBS)
    for name in VERBS:
        assert getattr(gmp, name) is getattr(api, name), name
        assert callable(getattr(gmp, name)) and getattr(gmp, name).__doc__, name


def all_submodules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(gmp.__path__, "gmp."))


def test_importing_any_submodule_never_rebinds_a_verb():
    """A submodule import binds ``gmp.<name>``; no verb may share a name with a submodule."""
    top_level = {name.split(".")[1] for name in all_submodules()}
    assert not top_level & set(VERBS), top_level & set(VERBS)
    # and in a fresh interpreter: import every submodule, the verbs are still the facade's functions
    code = ("import importlib, pkgutil, types, gmp\n"
            "from gmp import api\n"
            "for m in pkgutil.walk_packages(gmp.__path__, 'gmp.'):\n"
            "    try:\n"
            "        importlib.import_module(m.name)\n"
            "    except ImportError:\n"
            "        pass\n"
            f"bad = [n for n in {VERBS!r} if getattr(gmp, n) is not getattr(api, n) "
            "or isinstance(getattr(gmp, n), types.ModuleType)]\n"
            "print('rebound:', bad)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rebound: []" in proc.stdout


def test_import_gmp_is_cheap():
    proc = subprocess.run([sys.executable, "-c", "import sys, gmp; print(sorted(m for m in ('numba', 'torch', "
                           "'matplotlib', 'scipy') if m in sys.modules))"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_reprs_are_one_line_without_arrays(tiny_dataset, tmp_path):
    ds = gmp.load_dataset(tiny_dataset)
    m = gmp.partition_dataset(ds, "random", tmp_path / "m", workers=2, batch_size=2, plots=False)
    rep = gmp.make_report(m)
    for obj, start in ((ds, "<PreparedDataset 'tiny'"), (m, "<Manifest"), (m.placement, "<Placement random on 2"),
                       (rep, "<Report 'random on tiny, 2 workers:")):
        text = repr(obj)
        assert text.startswith(start), text
        assert "\n" not in text and len(text) < 300 and "memmap" not in text and "array(" not in text, text
    assert "6 samples (4 train)" in repr(ds) and "2 workers, 6 samples, 6 embeddings" in repr(m)


def test_partition_dataset_none_means_the_defaults(tiny_dataset, tmp_path, monkeypatch):
    """``partition_dataset(ds, "hybrid", None, ...)`` (a TypeError before: Path(None)) writes where
    ``gmp partition`` writes without --out, and None keywords take gmp partition's defaults."""
    monkeypatch.chdir(tmp_path)
    m = gmp.partition_dataset(tiny_dataset, "random", None, workers=2, seed=None, batch_size=None,
                              embedding_dim=None, inter_cost=None, plots=False)
    want = tmp_path / "placements" / f"{Path(tiny_dataset).resolve().name}.random.w2"
    assert Path(m.path).resolve() == want.resolve() and (want / "manifest.json").is_file()
    explicit = gmp.partition_dataset(tiny_dataset, "random", tmp_path / "explicit", workers=2, seed=0,
                                     batch_size=512, embedding_dim=16, plots=False)
    assert np.array_equal(m.placement.sample_worker, explicit.placement.sample_worker)
    assert m.meta["metrics"]["batch_size"] == 512 and m.meta["metrics"]["embedding_dim"] == 16


def test_facade_errors_name_the_parameter(tiny_dataset, tmp_path):
    from gmp.errors import GmpError, ImportDataError, OutputError, TrainingError

    with pytest.raises(ImportDataError, match="format 'tfrecord' is not one of criteo"):
        gmp.import_dataset("tfrecord", "x.tfrecord", tmp_path / "x")
    with pytest.raises(ImportDataError, match="format 'criteo' does not take sep"):
        gmp.import_dataset("criteo", "x.txt", tmp_path / "x", sep=",")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "f").write_text("x")
    with pytest.raises(OutputError, match="already exists and is not empty; choose another `out` or pass "
                                          "`overwrite=True`"):
        gmp.partition_dataset(tiny_dataset, "random", tmp_path / "taken", workers=2)
    with pytest.raises(TrainingError, match="unknown option\\(s\\) bogus"):
        gmp.train_model(tiny_dataset, None, bogus=1)
    with pytest.raises(TrainingError, match="The 'workers' parameter is required without a manifest"):
        gmp.simulate_epoch(tiny_dataset)
    assert issubclass(ImportDataError, GmpError)


def test_an_opened_manifest_is_checked_against_the_dataset(tiny_dataset, tmp_path):
    """A Manifest object is checked like a path: simulating, reporting or exporting it with another dataset is
    refused (simulate_epoch used to replay it silently)."""
    from gmp.errors import ManifestError

    m = gmp.load_manifest(gmp.partition_dataset(tiny_dataset, "random", tmp_path / "m", workers=2, batch_size=2,
                                                plots=False).path)
    other = gmp.synthesize(tmp_path / "other", preset="tiny", num_samples=300, seed=1)
    for call in (lambda: gmp.simulate_epoch(other, m, schedule="static"),
                 lambda: gmp.make_report(m, dataset=other),
                 lambda: gmp.export_torchrec(m, tmp_path / "x", dataset=other)):
        with pytest.raises(ManifestError, match="was made for dataset sha256"):
            call()
    assert gmp.simulate_epoch(tiny_dataset, m, schedule="static").totals  # its own dataset still works


def test_the_facade_takes_what_a_notebook_passes(tiny_dataset, tmp_path):
    """Comma strings where lists are expected (never split into characters), opened objects where paths are,
    the CLI's column ranges, and one-line errors for a stray options key or a workers of the wrong type."""
    from gmp.errors import PartitionError, TopologyError

    ds = gmp.load_dataset(tiny_dataset)
    res = gmp.compare_partitioners(ds, "random, greedy-stream", workers=2, batch_size=2, isolate=False)
    assert [r["method"] for r in res["rows"]] == ["random", "greedy-stream"]
    with pytest.raises(PartitionError, match="options has key\\(s\\) 'rounds', which are not among the methods"):
        gmp.compare_partitioners(ds, ["random"], workers=2, options={"rounds": 1})
    from gmp.errors import DatasetError, ManifestError, TrainingError

    with pytest.raises(ManifestError, match="manifest must be a placement manifest .* got PreparedDataset"):
        gmp.make_report(ds)
    with pytest.raises(DatasetError, match="unknown knob\\(s\\) skw; the knobs: .*skew"):
        gmp.synthesize(tmp_path / "s", num_samples=100, skw=1.0)
    with pytest.raises(TrainingError, match="unknown option\\(s\\) foo; it takes: .*schedule"):
        gmp.simulate_epoch(ds, workers=2, foo=1)
    for bad in ("2", 2.0, True):
        with pytest.raises(TopologyError, match="'workers' parameter must be an int >= 1"):
            gmp.partition_dataset(ds, "random", tmp_path / "w", workers=bad)
    m = gmp.partition_dataset(ds, "random", tmp_path / "m", workers=2, batch_size=2, plots=False)
    gmp.make_report(m, out=tmp_path / "r", formats="md", plots=False)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["report.md"]
    by_object = gmp.train_model(ds, m, epochs=1, batch_size=2, seed=0)
    by_path = gmp.train_model(tiny_dataset, m.path, epochs=1, batch_size=2, seed=0)
    assert [r["train_loss"] for r in by_object] == [r["train_loss"] for r in by_path]
    csv = tmp_path / "t.csv"
    csv.write_text("y,I1,I2,C1,C2\n" + "".join(f"{i % 2},{i},{i * 2},a{i % 3},b{i % 4}\n" for i in range(40)))
    ranged = gmp.import_dataset("csv", csv, tmp_path / "ranged", label="y", dense="I1..I2", categorical="C1..C2")
    listed = gmp.import_dataset("csv", csv, tmp_path / "listed", label="y", dense=["I1", "I2"],
                                categorical=["C1", "C2"])
    assert ranged.sha256 == listed.sha256 and [f.name for f in ranged.categorical_fields] == ["C1", "C2"]
    assert ranged.dense is not None and ranged.dense.shape[1] == 2


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The page's ```python blocks: (the line of the block's first line in the page, the block)."""
    text = path.read_text(encoding="utf-8")
    found = re.finditer(r"```python\n(.*?)```", text, flags=re.S)
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in found]


def run_cell(block: str, name: str, namespace: dict) -> list[tuple[int, list[str], list[str]]]:
    """Run ``block`` statement by statement as a notebook would; returns ``(line, shown, printed)`` for every
    run of ``# `` lines at the start of a line after a statement: what the page shows there, and what the
    statements since the last such run printed (a bare expression right before the comment: its repr)."""
    lines = block.splitlines()
    tree = ast.parse(block, name)
    checks, out = [], io.StringIO()
    for k, stmt in enumerate(tree.body):
        end = stmt.end_lineno  # the comment lines after the statement, up to the next one
        stop = tree.body[k + 1].lineno - 1 if k + 1 < len(tree.body) else len(lines)
        shown = [ln[2:] for ln in lines[end:stop] if ln.startswith("# ")]
        with contextlib.redirect_stdout(out):
            if isinstance(stmt, ast.Expr):
                value = eval(compile(ast.Expression(stmt.value), name, "eval"), namespace)
                if shown and value is not None:
                    print(repr(value))
            else:
                exec(compile(ast.Module([stmt], type_ignores=[]), name, "exec"), namespace)
        if shown:
            checks.append((end + 1, shown, out.getvalue().splitlines()))
            out = io.StringIO()
    return checks


def test_docs_python_md_runs(tmp_path, monkeypatch):
    """Every ```python block of docs/python.md, in order, in one namespace (a notebook run), prints what the
    page shows after it."""
    blocks = python_blocks(ROOT / "docs" / "python.md")
    assert len(blocks) >= 10
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace: dict = {"__name__": "__walkthrough__"}
    cwd = os.getcwd()
    differ, shown_lines = [], 0
    try:
        for i, (first, block) in enumerate(blocks):
            name = f"docs/python.md block {i + 1} (line {first})"
            try:
                checks = run_cell(block, name, namespace)
            except Exception as exc:  # name the block that failed
                raise AssertionError(f"{name} failed: {type(exc).__name__}: {exc}\n{block}")
            for line, shown, printed in checks:
                shown_lines += len(shown)
                if shown != printed:
                    differ.append(f"docs/python.md:{first + line - 1}: the page shows {shown}, the code printed "
                                  f"{printed}")
    finally:
        os.chdir(cwd)
    assert not differ, "docs/python.md is stale:\n" + "\n".join(differ)
    assert shown_lines >= 20  # the outputs were found and compared
    # what the walkthrough promises, checked on its own objects
    assert namespace["rep"].headline.startswith("hybrid on tiny, 4 workers: ")
    assert namespace["records"][-1]["kind"] == "epoch"
    assert namespace["plan"]["num_ranks"] == 4 and not Path(namespace["work"]).exists()


def criteo_lines(n: int, start: int = 0) -> str:
    rows = []
    for i in range(start, start + n):
        ints = [str((i * 7 + k) % 13) for k in range(13)]
        cats = [format((i * 31 + k * 17) % (5 + k), "08x") for k in range(26)]
        rows.append("\t".join([str(i % 2)] + ints + cats))
    return "\n".join(rows) + "\n"


def test_import_dataset_keeps_a_provided_split(tmp_path):
    (tmp_path / "train.txt").write_text(criteo_lines(30))
    (tmp_path / "test.txt").write_text(criteo_lines(7, start=30))
    ds = gmp.import_dataset("criteo", tmp_path / "train.txt", tmp_path / "d", test_paths=tmp_path / "test.txt")
    assert (ds.num_train, ds.num_test) == (30, 7) and ds.meta["split"]["method"] == "provided"
    csv = tmp_path / "x.csv"
    csv.write_text("label,a,b,n\n1,x,y,3\n0,z,y,4\n1,x,w,5\n")
    ds = gmp.import_dataset("csv", csv, tmp_path / "c", label="label", dense=["n"], test_fraction=0.0)
    assert ds.num_samples == 3 and [f.name for f in ds.categorical_fields] == ["a", "b"] and ds.num_dense == 1


def test_the_daily_loop_through_the_facade_equals_the_cli(tmp_path):
    # day 0 imported, day 1 imported with extend= (ids stable); repartition_dataset writes what
    # 'gmp partition DAY1 --from-manifest P0 --max-moved-rows 20%' writes (same arrays, same comparison)
    from typer.testing import CliRunner

    from cli.main import app
    from gmp.errors import GmpError

    (tmp_path / "day0.txt").write_text(criteo_lines(40))
    (tmp_path / "day1.txt").write_text(criteo_lines(40, start=20))
    d0 = gmp.import_dataset("criteo", tmp_path / "day0.txt", tmp_path / "d0", test_fraction=0.0)
    d1 = gmp.import_dataset("criteo", tmp_path / "day1.txt", tmp_path / "d1", test_fraction=0.0, extend=d0.path)
    assert d1.meta["parent"]["sha256"] == d0.sha256 and d1.num_embeddings >= d0.num_embeddings
    p0 = gmp.partition_dataset(d0, "random", tmp_path / "p0", workers=2, batch_size=8, plots=False)
    m = gmp.repartition_dataset(d1, p0.path, tmp_path / "api", max_moved_rows="20%", batch_size=8, plots=False)
    res = CliRunner().invoke(app, ["partition", str(d1.path), "--from-manifest", str(p0.path), "--max-moved-rows",
                                   "20%", "--batch-size", "8", "--no-plots", "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    cli = gmp.load_manifest(tmp_path / "cli", dataset=d1)
    for a, b in ((m.placement.sample_worker, cli.placement.sample_worker),
                 (m.placement.embedding_primary, cli.placement.embedding_primary),
                 (m.placement.secondary_workers, cli.placement.secondary_workers)):
        assert np.array_equal(a, b)
    ours, theirs = m.placement.info["comparison"], cli.placement.info["comparison"]
    assert {k: v for k, v in ours.items() if k not in ("seconds", "old_manifest")} == \
        {k: v for k, v in theirs.items() if k not in ("seconds", "old_manifest")}
    assert ours["moved_rows"]["total"] <= ours["max_moved_rows"]
    with pytest.raises(GmpError, match="option 'levels' is not an option of `from_manifest`"):
        gmp.repartition_dataset(d1, p0, tmp_path / "x", options={"levels": 3})
    with pytest.raises(GmpError, match="already exists"):
        gmp.repartition_dataset(d1, p0, tmp_path / "api")
    with pytest.raises(GmpError, match="`skew` does not apply to `continue_from`: the next day keeps"):
        gmp.synthesize(tmp_path / "s1", continue_from=d0.path, skew=1.2)


def test_train_model_takes_gmp_trains_herald_defaults(tmp_path):
    """gmp.train_model(schedule="herald", cache options) runs what `gmp train` with the same flags runs: the
    look-ahead cache policy (it took HeraldOptions' "lru", gmp simulate's, and moved other rows)."""
    import json

    from typer.testing import CliRunner

    from cli.main import app
    from gmp.datasets.format import load_dataset
    from test_train_cli import manifest_for
    from train_data import make_ctr_dataset

    path = make_ctr_dataset(tmp_path / "ds", num_samples=400, field_sizes=(40, 30, 20), seed=3)
    man, _ = manifest_for(tmp_path, load_dataset(path), 3)
    opts = dict(schedule="herald", on_demand=True, cache_rows=12, lookahead=2, read_only_replicas=False)
    api = gmp.train_model(path, man, epochs=1, batch_size=8, embedding_dim=4, seed=0, **opts)
    log = tmp_path / "cli.jsonl"
    res = CliRunner().invoke(app, ["train", "--dataset", str(path), "--manifest", str(man), "--epochs", "1",
                                   "--batch-size", "8", "--embedding-dim", "4", "--seed", "0", "--schedule", "herald",
                                   "--on-demand", "--cache-rows", "12", "--lookahead", "2", "--writable-replicas",
                                   "--log-json", str(log)])
    assert res.exit_code == 0, res.output
    cli = [json.loads(line) for line in log.read_text().splitlines()]
    assert api[-1]["herald"] == cli[-1]["herald"]
    lru = gmp.train_model(path, man, epochs=1, batch_size=8, embedding_dim=4, seed=0, cache_policy="lru", **opts)
    assert lru[-1]["herald"] != api[-1]["herald"]  # the policy matters here: the test can tell them apart


def test_a_failed_partition_or_repartition_releases_its_out(tiny_dataset, tmp_path):
    """Both claim ``out`` before the (long) partitioning; a call that fails after that must let it go (the
    lock file ``.NAME.gmp-lock`` beside it, held open until this process ended, refused any other writer)."""
    from gmp import _io
    from gmp.errors import GmpError

    p0 = gmp.partition_dataset(tiny_dataset, "random", tmp_path / "p0", workers=2, batch_size=2, plots=False)
    out = tmp_path / "x"
    with pytest.raises(GmpError, match="option 'levels' is not an option of `from_manifest`"):
        gmp.repartition_dataset(tiny_dataset, p0, out, options={"levels": 3}, plots=False)
    assert not _io.lock_path(out).exists() and not out.exists()
    with pytest.raises(GmpError, match="bogus"):
        gmp.partition_dataset(tiny_dataset, "random", out, workers=2, options={"bogus": 1}, plots=False)
    assert not _io.lock_path(out).exists() and not out.exists()
    m = gmp.partition_dataset(tiny_dataset, "random", out, workers=2, batch_size=2, plots=False)  # a fresh claim
    assert Path(m.path) == out and not _io.lock_path(out).exists()


def test_make_report_out_keeps_files_it_did_not_write(tiny_dataset, tmp_path):
    """``make_report(out=DIR)`` writes as ``gmp report --out`` does: a report.md of someone else's in DIR is
    replaced only with ``overwrite=True`` (it was overwritten silently), and the manifest's own report is never
    replaced by one for another batch size."""
    from gmp.errors import OutputError

    m = gmp.partition_dataset(tiny_dataset, "random", tmp_path / "m", workers=2, batch_size=2, plots=False)
    theirs = tmp_path / "notes"
    theirs.mkdir()
    (theirs / "report.md").write_text("my own notes\n")
    with pytest.raises(OutputError, match=r"^`out` \S*notes already holds report.md, which this report would "
                                          r"replace; pass `overwrite=True`"):
        gmp.make_report(m, out=theirs, formats="md", plots=False)
    assert (theirs / "report.md").read_text() == "my own notes\n"
    with pytest.raises(OutputError, match="already holds report.md"):  # the same refusal: the claim was released
        gmp.make_report(m, out=theirs, formats="md", plots=False)
    with pytest.raises(OutputError, match="is the manifest itself"):
        gmp.make_report(m, dataset=tiny_dataset, batch_size=3, out=m.path, formats="md", plots=False)
    rep = gmp.make_report(m, out=theirs, formats="md", plots=False, overwrite=True)
    assert (theirs / "report.md").read_text() == rep.markdown()
