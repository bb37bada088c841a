"""``gmp data import|info|fetch`` through typer's CliRunner: exit codes, the
one-line ``error: ...`` on stderr, no traceback, no output directory left."""

from __future__ import annotations

import gzip
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

FIX = Path(__file__).parent / "data" / "import"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["data", *map(str, args)])


def assert_clean_error(result, pattern: str) -> None:
    import re

    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in result.output
    assert re.search(pattern, err), err


def no_output(tmp_path: Path, name: str = "out") -> bool:
    return not any(p.name == name or p.name.startswith(f".{name}.tmp") for p in tmp_path.iterdir())


def test_import_criteo_then_info(tmp_path):
    out = tmp_path / "out"
    r = invoke("import", "criteo", FIX / "criteo_small.tsv", "--out", out, "--min-count", "2")
    assert r.exit_code == 0, r.output
    assert "imported 6 samples (1 test)" in r.stdout and "26 fields, 13 dense" in r.stdout
    r = invoke("info", out, "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["num_samples"] == 6 and info["num_dense"] == 13
    assert info["source"]["options"]["min_count"] == 2
    c1 = next(f for f in info["fields"] if f["name"] == "C1")
    # C1 with min-count 2: 68fd1e64 (x3) kept, three singletons rare -> missing, rare, 1 value
    assert (c1["num_values"], c1["num_active"], c1["rare_accesses"], c1["max_degree"]) == (3, 2, 3, 3)
    g = info["graph"]
    assert g["num_edges"] == 6 * 26 and g["max_sample_degree"] == 26
    assert 0 < g["top1pct_access_share"] <= 1
    r = invoke("info", out)
    assert r.exit_code == 0 and "skew: top 1% of used embeddings get" in r.stdout and "C26" in r.stdout


def test_import_json_and_options_recorded(tmp_path):
    r = invoke("import", "avazu", FIX / "avazu_small.csv", "--out", tmp_path / "o", "--no-split-hour",
               "--hash", "device_ip=8", "--test-fraction", "0.2", "--json")
    assert r.exit_code == 0, r.output
    meta = json.loads(r.stdout)
    assert meta["source"]["options"]["split_hour"] is False
    assert meta["source"]["options"]["hash"] == {"device_ip": 8}
    assert meta["split"]["num_test"] == 1
    ip = next(f for f in meta["fields"] if f["name"] == "device_ip")
    assert ip["hash_buckets"] == 8 and ip["num_values"] == 9


@pytest.mark.parametrize("fmt, inputs, extra", [
    ("movielens", ["ml_atomic"], []),
    ("movielens", ["ml_classic"], []),
    ("libsvm", ["small.libsvm"], []),
    ("libfm", ["small.libsvm"], []),
    ("libffm", ["small.libffm"], []),
    ("csv", ["mixed_small.csv"], ["--label", "income", "--label-positive", ">50K", "--dense", "age,hours",
                                  "--multi", "tags"]),
])
def test_import_every_format(tmp_path, fmt, inputs, extra):
    r = invoke("import", fmt, *[FIX / i for i in inputs], "--out", tmp_path / "out", *extra)
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert meta["source"]["format"] == fmt


def test_bad_lines_strict_then_skipped(tmp_path):
    r = invoke("import", "criteo", FIX / "criteo_bad.tsv", "--out", tmp_path / "out")
    assert_clean_error(r, r"4 malformed lines in the first 6 lines read, more than --max-bad-lines 0: "
                          r".*criteo_bad.tsv line 2: expected 40 tab-separated columns")
    assert no_output(tmp_path)
    r = invoke("import", "criteo", FIX / "criteo_bad.tsv", "--out", tmp_path / "out", "--max-bad-lines", "4")
    assert r.exit_code == 0 and "4 malformed lines skipped" in r.stdout
    meta = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert meta["num_bad_lines"] == 4 and meta["bad_lines"][0]["line"] == 2


def test_unknown_format(tmp_path):
    r = invoke("import", "orc", FIX / "criteo_small.tsv", "--out", tmp_path / "out")
    assert_clean_error(r, r"unknown format 'orc'; choose one of criteo, avazu, movielens, libsvm, libfm, libffm, csv, "
                          r"parquet")
    assert no_output(tmp_path)


def test_empty_input(tmp_path):
    p = tmp_path / "e.tsv"
    p.write_text("")
    r = invoke("import", "criteo", p, "--out", tmp_path / "out")
    assert_clean_error(r, r"e.tsv: the input is empty \(no data lines\)")
    assert no_output(tmp_path)


def test_truncated_gzip(tmp_path):
    data = gzip.compress((FIX / "criteo_small.tsv").read_bytes() * 100)
    p = tmp_path / "t.tsv.gz"
    p.write_bytes(data[:-40])
    r = invoke("import", "criteo", p, "--out", tmp_path / "out")
    assert_clean_error(r, r"t.tsv.gz: truncated gzip file")
    assert no_output(tmp_path)


def test_missing_path(tmp_path):
    r = invoke("import", "libsvm", tmp_path / "absent.txt", "--out", tmp_path / "out")
    assert_clean_error(r, r"absent.txt: no such file")
    assert no_output(tmp_path)


def test_option_for_another_format(tmp_path):
    r = invoke("import", "criteo", FIX / "criteo_small.tsv", "--out", tmp_path / "out", "--label", "x")
    assert_clean_error(r, r"--label does not apply to format 'criteo'")
    r = invoke("import", "criteo", FIX / "criteo_small.tsv", "--out", tmp_path / "out", "--hash", "C1")
    assert_clean_error(r, r"--hash 'C1': expected FIELD=SIZE")
    r = invoke("import", "criteo", FIX / "criteo_small.tsv", "--out", tmp_path / "out", "--hash", "C1=3",
               "--hash", "C1=5")  # the last one won silently
    assert_clean_error(r, r"--hash 'C1=5': field 'C1' is already hashed into 3 buckets; give one --hash per field")
    assert no_output(tmp_path)


def test_info_on_a_non_dataset(tmp_path):
    r = invoke("info", tmp_path)
    assert_clean_error(r, r"dataset.json not found")


def _fake_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for member in ("ml-100k.inter", "ml-100k.user", "ml-100k.item"):
            src = (FIX / "ml_atomic" / ("ml" + member[len("ml-100k"):])).read_bytes()
            z.writestr(f"recbole/dataset_example/ml-100k/{member}", src)
    return path


def test_fetch_from_a_wheel_then_import(tmp_path):
    whl = _fake_wheel(tmp_path / "recbole-1.2.1-py3-none-any.whl")
    raw = tmp_path / "raw"
    r = invoke("fetch", "movielens-100k", "--out", raw, "--wheel", whl)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in raw.iterdir()) == ["ml-100k.inter", "ml-100k.item", "ml-100k.user"]
    r = invoke("fetch", "movielens-100k", "--out", raw, "--wheel", whl)
    assert_clean_error(r, r"already holds ml-100k files; pass --overwrite")
    r = invoke("import", "movielens", raw, "--out", tmp_path / "ml")
    assert r.exit_code == 0 and "imported 7 samples" in r.stdout


def test_fetch_offline_is_one_clear_line(tmp_path, monkeypatch):
    def offline(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version that satisfies the requirement")

    monkeypatch.setattr(subprocess, "run", offline)
    r = invoke("fetch", "movielens-100k", "--out", tmp_path / "raw")
    assert_clean_error(r, r"could not download recbole==1.2.1 from PyPI \(are you offline\?\)")
    assert not (tmp_path / "raw").exists()


@pytest.mark.parametrize("inner", ["", "raw"])
def test_fetch_refuses_out_inside_a_dataset_or_manifest_before_downloading(tmp_path, monkeypatch, inner):
    """docs/failure.md: no output may lie inside a dataset or a manifest (their directories hold only
    their own files); fetch refuses one before any download, and writes nothing there."""
    r = invoke("synth", "--preset", "tiny", "-n", "400", "-o", tmp_path / "d1")
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["partition", str(tmp_path / "d1"), "-w", "2", "-o", str(tmp_path / "m1"),
                            "--method", "random"])
    assert r.exit_code == 0, r.output
    before = {d: sorted(p.name for p in (tmp_path / d).iterdir()) for d in ("d1", "m1")}

    def no_download(cmd, **kw):
        raise AssertionError(f"downloaded: {cmd}")

    monkeypatch.setattr(subprocess, "run", no_download)
    whl = _fake_wheel(tmp_path / "recbole-1.2.1-py3-none-any.whl")
    for d, kind in (("d1", "a gmp dataset"), ("m1", "a placement manifest")):
        out = tmp_path / d / inner if inner else tmp_path / d
        for extra in ([], ["--overwrite"], ["--wheel", whl], ["--wheel", whl, "--overwrite"]):
            r = invoke("fetch", "movielens-100k", "--out", out, *extra)
            is_ = f"is inside {kind} \\({tmp_path / d}\\)" if inner else f"is {kind}"
            assert_clean_error(r, rf"--out {out} {is_}, whose directory holds only its own files .*outside it\.$")
        assert sorted(p.name for p in (tmp_path / d).iterdir()) == before[d]
    r = runner.invoke(app, ["partition", str(tmp_path / "d1"), "-w", "2", "-o", str(tmp_path / "m1"),
                            "--method", "random", "--overwrite"])
    assert r.exit_code == 0, r.output


def test_fetch_unknown_name(tmp_path):
    r = invoke("fetch", "criteo-1tb", "--out", tmp_path / "raw")
    assert_clean_error(r, r"unknown data set 'criteo-1tb'; gmp can fetch: movielens-100k")


def test_help_lists_commands():
    r = runner.invoke(app, ["data", "--help"])
    assert r.exit_code == 0
    for cmd in ("import", "info", "fetch"):
        assert cmd in r.stdout
    r = runner.invoke(app, ["data", "import", "--help"])
    assert r.exit_code == 0 and "--max-bad-lines" in r.stdout


def test_info_hand_checked_on_tiny_dataset(tiny_dataset):
    # rows [[0,1],[1,2],[0,2],[3,4],[4,5],[2,3]]; A = ids 0..2, B = ids 3..5
    r = invoke("info", tiny_dataset, "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    a, b = (f for f in info["fields"] if f["kind"] != "dense")
    # degrees: A = (2, 2, 3), B = (2, 2, 1); the top 1% of a field is its single busiest id
    assert (a["num_active"], a["max_degree"], a["top1pct_access_share"]) == (3, 3, pytest.approx(3 / 7))
    assert (b["num_active"], b["max_degree"], b["top1pct_access_share"]) == (3, 2, pytest.approx(2 / 5))
    assert a["missing_accesses"] is None and a["rare_accesses"] is None
    g = info["graph"]
    assert (g["num_edges"], g["max_embedding_degree"], g["top1pct_access_share"]) == (12, 3, pytest.approx(3 / 12))
    assert (info["num_train"], info["num_test"]) == (4, 2)


def test_synth_is_attached():
    r = runner.invoke(app, ["data", "synth", "--help"])
    assert r.exit_code == 0 and "--seed" in r.stdout
