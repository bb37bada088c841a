"""One setting, one value; no output replaced unasked; no edited file shown as validated; a path that is not a
file said as what it is (an adversarial tester's findings, session 30)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

import gmp
from cli_helpers import invoke, one_line_error
from gmp._io import check_output_file, file_kind
from gmp.errors import ManifestError, OutputError, PartitionError, TrainingError
from gmp.manifest import load_manifest
from gmp.report import report_from_manifest
from train_data import make_ctr_dataset


@pytest.fixture(scope="module")
def ctr(tmp_path_factory) -> Path:
    return make_ctr_dataset(tmp_path_factory.mktemp("cons") / "ds", num_samples=300, field_sizes=(30, 20, 10), seed=1)


@pytest.fixture(scope="module")
def hybrid_manifest(ctr, tmp_path_factory) -> Path:
    """A hybrid placement of ``ctr`` on 2 workers, batch 16 (its report.json moves fewer rows than random's)."""
    out = tmp_path_factory.mktemp("cons_m") / "m"
    res = invoke("partition", ctr, "-w", 2, "--batch-size", 16, "--no-plots", "-o", out)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture
def manifest_copy(hybrid_manifest, tmp_path) -> Path:
    out = tmp_path / "m"
    shutil.copytree(hybrid_manifest, out)
    return out


def edit_json(path: Path, edit) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj))


# ----------------------------------------------------------------- 1. -O of a flag's setting
@pytest.mark.parametrize("item,flag", [("batch_size=64", "--batch-size 64"), ("embedding_dim=32", "--embedding-dim 32"),
                                       ("workers=2", "--workers 2"), ("seed=3", "--seed 3")])
def test_an_option_that_is_a_flag_of_the_run_is_refused_naming_the_flag(ctr, tmp_path, item, flag):
    """-O batch_size=64 reached hybrid alone: it optimised for 64 while the plan said 512 (and gmp train used
    512, silently); -O embedding_dim=32 with a memory budget wrote plan 32 beside a top-level 8."""
    res = invoke("partition", ctr, "-w", 2, "-O", item, "--no-plots", "-o", tmp_path / "m")
    one_line_error(res, rf"^error: -O {item} sets {flag.split()[0]}, a setting of the whole run .*pass {flag} "
                        r"instead\.$")
    assert not (tmp_path / "m").exists()


def test_the_python_route_refuses_the_plan_inside_the_options_too(ctr, tmp_path):
    with pytest.raises(PartitionError, match=r"the partitioner's options give batch_size=64, which is the request's "
                                             r"own `batch_size`.*pass `batch_size=64`"):
        gmp.partition_dataset(ctr, "hybrid", tmp_path / "m", workers=2, options={"batch_size": 64})
    with pytest.raises(PartitionError, match=r"the options of 'hybrid' give embedding_dim=8"):
        gmp.compare_partitioners(ctr, ["random", "hybrid"], workers=2, options={"hybrid": {"embedding_dim": 8}},
                                 isolate=False)
    assert not (tmp_path / "m").exists()


def test_the_plan_the_manifest_records_is_the_one_hybrid_optimised_for(ctr, tmp_path):
    """With the flags (the one way left), the partitioner's recorded options and the plan agree."""
    res = invoke("partition", ctr, "-w", 2, "--batch-size", 64, "--embedding-dim", 8, "--memory-per-worker",
                 "1MiB", "--no-plots", "-o", tmp_path / "m")
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "m" / "manifest.json").read_text())
    opts = meta["partitioner"]["options"]
    assert (opts["batch_size"], opts["embedding_dim"]) == (64, 8)
    assert (meta["plan"]["batch_size"], meta["plan"]["embedding_dim"]) == (64, 8)
    assert (meta["batch_size"], meta["embedding_dim"]) == (64, 8)


# ----------------------------------------------------------------- 2. report -f html into the manifest
def test_an_html_report_for_another_batch_does_not_replace_the_manifests_own(manifest_copy, ctr, tmp_path):
    """Its default destination is MANIFEST/report.html: it said "Batch size 64" beside report.md's 16."""
    res = invoke("report", manifest_copy, "-f", "html", "-d", ctr, "--batch-size", 64)
    one_line_error(res, r"^error: --format html without --out writes .*report\.html, the manifest's own report, "
                        r"which would be replaced by one for batch_size 64 \(planned 16\); pass --out DIR")
    assert not (manifest_copy / "report.html").exists()
    res = invoke("report", manifest_copy, "-f", "html", "-d", ctr, "--batch-size", 16)  # the plan's own batch
    assert res.exit_code == 0 and (manifest_copy / "report.html").is_file(), res.output
    res = invoke("report", manifest_copy, "-f", "html", "-d", ctr, "--batch-size", 64, "--out", tmp_path / "r")
    assert res.exit_code == 0 and "Batch size 64" in (tmp_path / "r" / "report.html").read_text(), res.output


# ----------------------------------------------------------------- 3. compare --overwrite
def test_compare_overwrite_keeps_a_file_gmp_did_not_write(tiny_dataset, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("notes\n")
    res = invoke("compare", tiny_dataset, "-w", 2, "--methods", "random", "--no-isolate", "-o", notes, "--overwrite")
    one_line_error(res, r"^error: --out .*notes\.md is not a file gmp wrote \(it has no gmp\.compare mark\); "
                        r"--overwrite only replaces a gmp\.compare file gmp wrote")
    assert notes.read_text() == "notes\n"


@pytest.mark.parametrize("suffix", [".md", ".html", ".json"])
def test_compare_overwrite_replaces_its_own_file(tiny_dataset, tmp_path, suffix):
    out = tmp_path / f"cmp{suffix}"
    for seed in (1, 2):  # written, then replaced (its seed is in every format)
        res = invoke("compare", tiny_dataset, "-w", 2, "--methods", "random", "--no-isolate", "--seed", seed,
                     "-o", out, "--overwrite")
        assert res.exit_code == 0, res.output
        assert file_kind(out) == "gmp.compare"
    assert "seed 2" in out.read_text() or json.loads(out.read_text())["settings"]["seed"] == 2


#: the first bytes of comparisons written before the mark (gmp before 2026-11-29), as their renderers began them
UNMARKED = {".md": "# Partitioner comparison: 3,000 samples, 1,234 embeddings, 9,000 edges, 2 workers\n\nPer-worker",
            ".html": "<!DOCTYPE html><html><head><meta charset='utf-8'>\n<title>Partitioner comparison — t0: 3,000 "
                     "samples</title><style>\nbody { }"}


@pytest.mark.parametrize("suffix", sorted(UNMARKED))
def test_compare_overwrite_replaces_a_comparison_written_before_the_mark(tiny_dataset, tmp_path, suffix):
    """The demo's runs/demo/compare.md from an earlier version is replaced on the next run, as before the mark;
    the same title further down (someone's notes quoting it) is not a comparison."""
    out = tmp_path / f"cmp{suffix}"
    out.write_text(UNMARKED[suffix])
    assert file_kind(out) == "gmp.compare"
    res = invoke("compare", tiny_dataset, "-w", 2, "--methods", "random", "--no-isolate", "-o", out, "--overwrite")
    assert res.exit_code == 0, res.output
    assert file_kind(out) == "gmp.compare" and out.read_text() != UNMARKED[suffix]
    quoted = tmp_path / f"notes{suffix}"
    quoted.write_text("my notes\n" + UNMARKED[suffix])
    assert file_kind(quoted) is None


def test_another_gmp_file_is_not_a_comparison(manifest_copy, tmp_path):
    """A report.json is gmp's, but not a comparison: --overwrite does not replace it either."""
    other = tmp_path / "report.json"
    shutil.copy(manifest_copy / "report.json", other)
    with pytest.raises(OutputError, match=r"is a gmp\.report file, not a gmp\.compare one"):
        check_output_file(other, overwrite=True, kind="gmp.compare", claim=False)


@pytest.mark.parametrize("text,kind", [
    ("notes\n", None),
    ('<!-- gmp {"format": "gmp.compare", "schema_version": 1} -->\n# x\n', "gmp.compare"),
    ('<!DOCTYPE html>\n<!-- gmp {"format": "gmp.compare", "schema_version": 1} -->\n<html>', "gmp.compare"),
    ('{"format": "gmp.report", "schema_version": 1}', "gmp.report"),
    ('{"format": "mine"}', None),
    ("<!-- gmp not json -->", None),
])
def test_file_kind(tmp_path, text, kind):
    (tmp_path / "f").write_text(text)
    assert file_kind(tmp_path / "f") == kind


# ----------------------------------------------------------------- 4. compare --inter-cost, --methods
@pytest.mark.parametrize("where", [["-w", "2"], ["--topology", "2"]])
def test_compare_refuses_an_inter_cost_without_machines(tiny_dataset, where):
    res = invoke("compare", tiny_dataset, *where, "--methods", "random", "--no-isolate", "--inter-cost", 5)
    one_line_error(res, r"^error: --inter-cost sets the cost between the machines of --topology MxG; it does not "
                        r"apply to --workers N")
    with pytest.raises(PartitionError, match=r"`inter_cost` sets the cost between the machines"):
        gmp.compare_partitioners(tiny_dataset, ["random"], workers=2, inter_cost=5, isolate=False)


def test_compare_takes_an_inter_cost_between_machines(tiny_dataset, tmp_path):
    out = tmp_path / "c.json"
    res = invoke("compare", tiny_dataset, "--topology", "1x2", "--methods", "random", "--no-isolate",
                 "--inter-cost", 5, "-o", out)
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["settings"]["topology"] == "1x2"


def test_compare_refuses_a_method_named_twice(tiny_dataset, tiny_graph):
    res = invoke("compare", tiny_dataset, "-w", 2, "--methods", "random,random", "--no-isolate")
    one_line_error(res, r"^error: --methods names 'random' more than once; name each method once\.$")
    from gmp.compare import compare
    from gmp.topology import homogeneous

    with pytest.raises(PartitionError, match="names random more than once"):
        compare(tiny_graph, homogeneous(2), ["random", "random"])


# ----------------------------------------------------------------- 5. train --collective-timeout
@pytest.mark.parametrize("engine", [["--engine", "local"], []])
def test_a_collective_timeout_on_the_local_engine_is_refused(ctr, engine):
    res = invoke("train", ctr, *engine, "--collective-timeout", 5, "--epochs", 0)
    how = "given" if engine else "the default outside torchrun"
    one_line_error(res, rf"^error: --collective-timeout bounds the collectives of the distributed engine .*; this "
                        rf"run is on engine 'local' \({how}\), which has none: drop --collective-timeout")
    from gmp.specs import resolve_train

    with pytest.raises(TrainingError, match="The 'collective_timeout' parameter bounds the collectives"):
        resolve_train(ctr, engine="local", collective_timeout=5, environ={})


# ----------------------------------------------------------------- 6. an edited report.json / manifest.json
@pytest.mark.parametrize("edit,key", [
    (lambda m: m["metrics"].__setitem__("batch_remote_reads", 1), r"metrics\.batch_remote_reads is 1, but .*"
                                                                  r"manifest\.json's metrics summary has"),
    (lambda m: m["metrics"]["reduction_vs_random"].__setitem__("batch_remote_pushes", 0.5),
     r"metrics\.reduction_vs_random\.batch_remote_pushes is 0\.5, but .*manifest\.json's metrics summary has"),
    (lambda m: m["metrics"].__setitem__("num_secondaries", 10**6), r"metrics\.num_secondaries is 1000000, but "
                                                                   r"secondary_workers\.npy holds only"),
    (lambda m: m["metrics"]["per_worker"]["primaries"].__setitem__(0, 10**6),
     r"metrics\.per_worker\.primaries is \[1000000, \d+\], but embedding_primary\.npy counts at most"),
    (lambda m: m["metrics"]["reference"].__setitem__("epoch_unique_remote", 10**6),
     r"metrics\.reduction_vs_random\.epoch_unique_remote is .*against the reference's 1000000"),
])
def test_an_edited_report_json_is_refused_naming_the_key(manifest_copy, edit, key):
    """A batch_remote_reads of 1 was shown as -100.0% inside the headline, "arrays re-validated"."""
    edit_json(manifest_copy / "report.json", edit)
    with pytest.raises(ManifestError, match=key):
        report_from_manifest(load_manifest(manifest_copy))
    res = invoke("report", manifest_copy)
    one_line_error(res, key)


def test_the_report_json_it_wrote_passes_every_check(manifest_copy):
    rep = report_from_manifest(load_manifest(manifest_copy))
    stored = json.loads((manifest_copy / "report.json").read_text())
    assert rep["metrics"] == stored["metrics"] and rep["source"] == "report.json (arrays re-validated)"


@pytest.mark.parametrize("edit,key", [
    (lambda m: m.__setitem__("num_secondaries", m["num_secondaries"] + 7),
     r"manifest\.json: num_secondaries is \d+, but secondary_workers\.npy holds"),
    (lambda m: m["arrays"]["sample_worker"].__setitem__("shape", [5]),
     r"manifest\.json: arrays\.sample_worker\.shape is \[5\], but the array sample_worker\.npy has \[300\]"),
    (lambda m: m["arrays"]["secondary_indptr"].__setitem__("dtype", "int32"),
     r"arrays\.secondary_indptr\.dtype is \"int32\", but the array secondary_indptr\.npy has \"int64\""),
])
def test_a_manifest_header_that_disagrees_with_its_arrays_is_refused(manifest_copy, ctr, edit, key):
    """The placement hash covers the arrays, not these: ``gmp report`` caught them, ``load_manifest`` (so
    ``gmp train``, ``--from-manifest``, the API) took them."""
    edit_json(manifest_copy / "manifest.json", edit)
    with pytest.raises(ManifestError, match=key):
        load_manifest(manifest_copy)
    from gmp.datasets.format import load_dataset

    with pytest.raises(ManifestError, match=key):
        load_manifest(manifest_copy, dataset=load_dataset(ctr))
    one_line_error(invoke("report", manifest_copy), key)
    res = invoke("train", ctr, "--manifest", manifest_copy, "--epochs", "1")  # after its settings line
    assert res.exit_code == 2 and re.search("^error: .*" + key, res.output, flags=re.M), res.output


# ----------------------------------------------------------------- 7. what a path is; the headline's words
def test_the_headline_is_the_same_without_report_json(manifest_copy):
    """Without report.json (no reference values) it headed on batch reads alone: "-x% batch reads vs random"."""
    from gmp.report.tables import headline

    with_json = headline(report_from_manifest(load_manifest(manifest_copy)))[0]
    (manifest_copy / "report.json").unlink()
    rep = report_from_manifest(load_manifest(manifest_copy))
    assert rep["source"].startswith("manifest summary")
    assert headline(rep)[0] == with_json and "bytes moved vs random (reads + pushes)" in with_json


def test_reference_total_recovers_random_from_the_changes():
    from gmp.report.tables import reference_total

    keys = ("batch_remote_reads", "batch_remote_pushes")
    metrics = {"batch_remote_reads": 25, "batch_remote_pushes": 60,
               "reduction_vs_random": {"batch_remote_reads": 0.75, "batch_remote_pushes": 0.4}}
    assert reference_total(metrics, keys) == pytest.approx(100 + 100)  # 25 / 0.25, 60 / 0.6
    metrics["reference"] = {"batch_remote_reads": 80, "batch_remote_pushes": 50}
    assert reference_total(metrics, keys) == 130  # the recorded values first
    assert reference_total({"batch_remote_reads": 0, "batch_remote_pushes": 1,
                            "reduction_vs_random": {"batch_remote_reads": 1.0, "batch_remote_pushes": 0.0}},
                           keys) is None  # -100%: random's count is not recoverable


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _directory(p: Path) -> None:
    p.mkdir()


def _dev_zero(p: Path) -> None:
    p.symlink_to("/dev/zero")


def _dangling(p: Path) -> None:
    p.symlink_to(p.parent / "nowhere")


@pytest.mark.parametrize("name", ["sample_worker.npy", "manifest.json"])
@pytest.mark.parametrize("make,said", [
    (_fifo, "is a named pipe (FIFO), not a regular file"),
    (_directory, "is a directory, not a regular file"),
    (_dev_zero, "is a character device, not a regular file"),
    (_dangling, "is a broken symbolic link (to "),
])
def test_a_path_that_is_not_a_file_is_said_as_what_it_is(manifest_copy, name, make, said):
    """Each was "not found"; a FIFO is not opened (that would block)."""
    (manifest_copy / name).unlink()
    make(manifest_copy / name)
    res = invoke("report", manifest_copy)
    err = one_line_error(res, "")
    assert f"{manifest_copy / name} {said}" in err and "not found" not in err, err


def test_a_missing_file_is_still_not_found(manifest_copy):
    (manifest_copy / "sample_worker.npy").unlink()
    one_line_error(invoke("report", manifest_copy), r"sample_worker\.npy not found;")


def test_a_read_only_file_system_is_said_so(tmp_path, monkeypatch):
    """It said "(permission denied)": the fix (choose another --out) is the same, the cause is not."""
    from gmp import _io

    parent = tmp_path / "ro"
    parent.mkdir()
    real_access = os.access

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(_io.os, "access", lambda p, mode: False if Path(p) == parent else real_access(p, mode))
    monkeypatch.setattr(_io.os, "statvfs", lambda p: ReadOnly())
    with pytest.raises(OutputError, match=r"cannot write in .*ro \(read-only file system\); choose another"):
        _io.check_output_dir(parent / "out", kind="gmp.placement", claim=False)
    monkeypatch.setattr(_io.os, "statvfs", lambda p: type("RW", (), {"f_flag": 0})())
    with pytest.raises(OutputError, match=r"cannot write in .*ro \(permission denied\)"):
        _io.check_output_dir(parent / "out", kind="gmp.placement", claim=False)
