"""Issue 17 (and items 1 and 9 of issue 16): nothing lost, nothing run that shouldn't.

One test (or one parametrised family) per reproduced defect; each failed on the
main branch before the fix. Errors are checked the way a user meets them: one
``error: ...`` line on stderr, exit code 2, no traceback, inputs untouched and no
half-written output.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp import _io
from gmp.datasets.format import compute_sha256, load_dataset, seal_header
from gmp.errors import DatasetError, GmpError, ManifestError

FIX = Path(__file__).parent / "data" / "import"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_one_line_error(res, pattern: str = "") -> str:
    assert res.exit_code == 2, (res.exit_code, res.output)
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in res.output
    assert re.search(pattern, err), err
    return err


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


@pytest.fixture
def criteo_file(tmp_path) -> Path:
    p = tmp_path / "train.tsv"
    shutil.copy(FIX / "criteo_small.tsv", p)
    return p


def rehash(path: Path) -> None:
    """Rewrite dataset.json's sha256 after tampering with an array (so only validation can catch it)."""
    meta = json.loads((path / "dataset.json").read_text())
    arrays = [np.load(path / f"{n}.npy") for n in ("indptr", "indices", "labels")]
    dense = np.load(path / "dense.npy") if (path / "dense.npy").exists() else None
    meta["arrays_sha256"] = compute_sha256(*arrays, dense)
    meta["sha256"] = seal_header(meta)
    (path / "dataset.json").write_text(json.dumps(meta))


# --------------------------------------------------------------------------- 1. --overwrite
def test_out_dot_overwrite_refused_and_nothing_deleted(tmp_path, criteo_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = invoke("data", "import", "criteo", "train.tsv", "--out", ".", "--overwrite")
    assert_one_line_error(res, "working directory")
    assert criteo_file.is_file()
    res = invoke("data", "import", "criteo", "train.tsv", "--out", ".")
    assert_one_line_error(res, "working directory")


def test_out_ancestor_of_cwd_refused(tmp_path, criteo_file, monkeypatch):
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    res = invoke("data", "import", "criteo", criteo_file, "--out", tmp_path / "a", "--overwrite")
    assert_one_line_error(res, "working directory")
    assert (tmp_path / "a" / "b").is_dir() and criteo_file.is_file()


def test_out_containing_the_input_refused(tmp_path):
    raw = tmp_path / "B" / "raw"
    raw.mkdir(parents=True)
    shutil.copy(FIX / "criteo_small.tsv", raw / "x.tsv")
    res = invoke("data", "import", "criteo", raw / "x.tsv", "--out", raw, "--overwrite")
    assert_one_line_error(res, "contains the input")
    assert (raw / "x.tsv").is_file()
    res = invoke("data", "import", "criteo", raw / "x.tsv", "--out", tmp_path / "B", "--overwrite")
    assert_one_line_error(res, "contains the input")


def test_partition_over_a_dataset_refused(tiny_dataset):
    res = invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", tiny_dataset, "--overwrite")
    assert_one_line_error(res, "gmp dataset, not a placement manifest")
    load_dataset(tiny_dataset)  # still there, intact


def test_overwrite_of_a_foreign_directory_refused(tmp_path, criteo_file):
    foreign = tmp_path / "thesis"
    foreign.mkdir()
    (foreign / "chapter1.tex").write_text("irreplaceable")
    res = invoke("data", "import", "criteo", criteo_file, "--out", foreign, "--overwrite")
    assert_one_line_error(res, "not a gmp dataset")
    assert (foreign / "chapter1.tex").read_text() == "irreplaceable"


def test_overwrite_replaces_a_dataset_of_the_same_kind(tmp_path, criteo_file):
    out = tmp_path / "ds"
    assert invoke("data", "import", "criteo", criteo_file, "--out", out).exit_code == 0
    res = invoke("data", "import", "criteo", criteo_file, "--out", out, "--overwrite", "--min-count", 2)
    assert res.exit_code == 0, res.output
    assert load_dataset(out).meta["source"]["options"]["min_count"] == 2
    assert leftovers(tmp_path) == []


def test_out_symlink_overwrite_is_one_line(tmp_path, criteo_file):
    real = tmp_path / "real"
    assert invoke("data", "import", "criteo", criteo_file, "--out", real).exit_code == 0
    link = tmp_path / "link"
    link.symlink_to(real)
    res = invoke("data", "import", "criteo", criteo_file, "--out", link, "--overwrite")
    assert_one_line_error(res, "symbolic link")
    load_dataset(real)


# --------------------------------------------------------------------------- 2. crash windows
def _kill_on(monkeypatch, target, name, nth, when="before"):
    """Make ``target.name`` raise SystemExit (a kill) just before or just after its nth call."""
    real = getattr(target, name)
    calls = {"n": 0}

    def fake(*a, **k):
        calls["n"] += 1
        if calls["n"] == nth and when == "before":
            raise SystemExit("killed")
        out = real(*a, **k)
        if calls["n"] == nth:
            raise SystemExit("killed")
        return out

    monkeypatch.setattr(target, name, fake)
    return calls


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("point", [("os", "replace", 1), ("os", "replace", 2), ("os", "rename", 1),
                                   ("shutil", "rmtree", 1), ("shutil", "rmtree", 2), ("_io", "_exchange", 1)])
def test_atomic_directory_never_leaves_nothing(tmp_path, point, when):
    out = tmp_path / "out"
    with _io.atomic_directory(out, kind="gmp.dataset") as d:
        (d / "dataset.json").write_text('{"format": "gmp.dataset", "v": "old"}')
    mod = {"os": os, "shutil": shutil, "_io": _io}[point[0]]
    if not hasattr(mod, point[1]):
        pytest.skip("no such function")
    mp = pytest.MonkeyPatch()
    try:
        _kill_on(mp, mod, point[1], point[2], when)
        try:
            with _io.atomic_directory(out, overwrite=True, kind="gmp.dataset") as d:
                (d / "dataset.json").write_text('{"format": "gmp.dataset", "v": "new"}')
        except SystemExit:
            pass
    finally:
        mp.undo()
    assert json.loads((out / "dataset.json").read_text())["v"] in ("old", "new")


def test_leftover_temporaries_of_dead_runs_are_cleaned(tmp_path, criteo_file):
    out = tmp_path / "ds"
    host = _io._owner_tag().rsplit("-", 1)[0]
    dead = tmp_path / f".ds.tmp-{host}-{2**22 + 12345}-x1y2"  # a pid above Linux's pid_max: not running
    dead.mkdir()
    (dead / "_ids.bin").write_bytes(b"x" * 100)
    alive = tmp_path / f".ds.tmp-{host}-{os.getpid()}-a1b2"  # a run still writing: kept
    alive.mkdir()
    other = tmp_path / ".ds.tmp-otherhost-77-c3d4"  # another machine's: kept and reported
    other.mkdir()
    assert invoke("data", "import", "criteo", criteo_file, "--out", out).exit_code == 0
    assert not dead.exists() and alive.exists() and other.exists()
    load_dataset(out)


def test_killed_between_the_two_renames_is_restored(tmp_path, monkeypatch):
    """Without RENAME_EXCHANGE the old copy is moved aside first; a kill then leaves it, and the
    next run puts it back before doing anything else."""
    out = tmp_path / "out"
    with _io.atomic_directory(out, kind="gmp.dataset") as d:
        (d / "dataset.json").write_text('{"format": "gmp.dataset", "v": "old"}')
    monkeypatch.setattr(_io, "_exchange", lambda a, b: False)
    _kill_on(monkeypatch, os, "replace", 2)
    with pytest.raises(SystemExit):
        with _io.atomic_directory(out, overwrite=True, kind="gmp.dataset") as d:
            (d / "dataset.json").write_text('{"format": "gmp.dataset", "v": "new"}')
    monkeypatch.undo()
    assert not out.exists() and len(list(tmp_path.glob(".out.old-*"))) == 1
    # a later run (another process: the kill ended the first) restores the old copy first
    for p in tmp_path.glob(".out.old-*"):
        p.rename(tmp_path / p.name.replace(f"-{os.getpid()}-", f"-{2**22 + 1}-"))
    with pytest.raises(GmpError, match="already exists"):
        with _io.atomic_directory(out, kind="gmp.dataset"):
            pass
    assert json.loads((out / "dataset.json").read_text())["v"] == "old"


# --------------------------------------------------------------------------- 5. no final newline
def test_csv_last_line_empty_column_without_newline(tmp_path):
    src = tmp_path / "t.csv"
    src.write_bytes(b"a,b,label\nx,y,1\nx,,")
    res = invoke("data", "import", "csv", src, "--out", tmp_path / "o", "--label", "label", "--max-bad-lines", 1)
    assert res.exit_code == 0, res.output
    ds = load_dataset(tmp_path / "o")
    assert ds.num_samples == 1 and ds.meta["num_bad_lines"] == 1  # the empty label is malformed
    src.write_bytes(b"a,b,label\nx,y,1\nx,,0")
    assert invoke("data", "import", "csv", src, "--out", tmp_path / "o2", "--label", "label").exit_code == 0
    src.write_bytes(b"a,label,b\nx,1,y\nx,0,")
    assert invoke("data", "import", "csv", src, "--out", tmp_path / "o3", "--label", "label").exit_code == 0
    assert load_dataset(tmp_path / "o3").num_samples == 2


def test_criteo_empty_c26_at_eof_without_newline(tmp_path):
    line = "\t".join(["1"] + ["3"] * 13 + ["68fd1e64"] * 25 + [""])
    src = tmp_path / "c.tsv"
    src.write_text(line + "\n" + line)
    res = invoke("data", "import", "criteo", src, "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    assert load_dataset(tmp_path / "o").num_samples == 2


# --------------------------------------------------------------------------- 6. libsvm overflow
@pytest.mark.parametrize("fmt,line", [("libsvm", "1 18446744073709551616:1"), ("libffm", "1 0:18446744073709551616:1"),
                                      ("libffm", "1 99999999999999999999999:1:1")])
def test_libsvm_index_beyond_64_bits_is_a_malformed_line(tmp_path, fmt, line):
    src = tmp_path / f"x.{fmt}"
    src.write_text(f"1 {'0:' if fmt == 'libffm' else ''}3:1\n{line}\n")
    assert_one_line_error(invoke("data", "import", fmt, src, "--out", tmp_path / "o"), "line 2")
    res = invoke("data", "import", fmt, src, "--out", tmp_path / "o", "--max-bad-lines", 1)
    assert res.exit_code == 0, res.output


# --------------------------------------------------------------------------- 7. non-seekable input
def _fifo(tmp_path, data: bytes, name="pipe") -> Path:
    p = tmp_path / name
    os.mkfifo(p)

    def feed():
        with open(p, "wb") as f:
            f.write(data)

    threading.Thread(target=feed, daemon=True).start()
    return p


def test_criteo_from_a_pipe_is_streamed(tmp_path):
    data = (FIX / "criteo_small.tsv").read_bytes()
    res = invoke("data", "import", "criteo", _fifo(tmp_path, data), "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    ref = tmp_path / "ref.tsv"
    ref.write_bytes(data)
    assert invoke("data", "import", "criteo", ref, "--out", tmp_path / "r").exit_code == 0
    assert load_dataset(tmp_path / "o").sha256 == load_dataset(tmp_path / "r").sha256


def test_gzip_pipe_is_streamed(tmp_path):
    import gzip

    data = gzip.compress((FIX / "small.libsvm").read_bytes())
    res = invoke("data", "import", "libsvm", _fifo(tmp_path, data), "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output


def test_csv_from_a_pipe_is_one_line(tmp_path):
    p = _fifo(tmp_path, (FIX / "mixed_small.csv").read_bytes())
    res = invoke("data", "import", "csv", p, "--out", tmp_path / "o", "--label", "label")
    if res.exit_code != 0:
        assert_one_line_error(res, "not a regular file")
    with open(p, "rb") as f:  # let the feeder finish
        f.read()


# --------------------------------------------------------------------------- 8. non-finite values
@pytest.mark.parametrize("cell,transform", [("1e400", "log1p"), ("-1e400", "none"), ("1e300", "none"),
                                            ("1e39", "none")])
def test_csv_non_finite_dense_is_malformed(tmp_path, cell, transform):
    src = tmp_path / "t.csv"
    src.write_text(f"a,d,label\nx,1,1\ny,{cell},0\n")
    args = ["data", "import", "csv", src, "--label", "label", "--dense", "d", "--dense-transform", transform]
    assert_one_line_error(invoke(*args, "--out", tmp_path / "o"), "line 3.*not a finite number")
    res = invoke(*args, "--out", tmp_path / "o", "--max-bad-lines", 1)
    assert res.exit_code == 0, res.output
    ds = load_dataset(tmp_path / "o")
    assert ds.num_samples == 1 and np.isfinite(np.asarray(ds.dense)).all()


def test_csv_non_finite_label_is_malformed(tmp_path):
    src = tmp_path / "t.csv"
    src.write_text("a,label\nx,1\ny,1e400\n")
    assert_one_line_error(invoke("data", "import", "csv", src, "--label", "label", "--out", tmp_path / "o"), "line 3")


def test_writer_refuses_nan_labels_and_inf_dense(tmp_path):
    from gmp.datasets.format import FieldInfo, write_dataset

    fields = [FieldInfo("d", "dense", 0, None, column=0), FieldInfo("A", "categorical", 2, 0)]
    common = dict(indptr=[0, 1, 2], indices=[0, 1], fields=fields, num_embeddings=2, source={"format": "t"})
    with pytest.raises(DatasetError, match="labels.*finite"):
        write_dataset(tmp_path / "a", labels=[np.nan, 1], dense=np.zeros((2, 1)), **common)
    with pytest.raises(DatasetError, match="dense.*finite"):
        write_dataset(tmp_path / "b", labels=[0, 1], dense=np.array([[np.inf], [0]]), **common)
    assert leftovers(tmp_path) == [] and not (tmp_path / "a").exists()


def test_nan_labels_with_a_valid_hash_are_refused_when_read(tiny_dataset):
    labels = np.load(tiny_dataset / "labels.npy")
    labels[2] = np.nan
    np.save(tiny_dataset / "labels.npy", labels)
    rehash(tiny_dataset)
    with pytest.raises(DatasetError, match="labels.npy.*0 or 1"):
        load_dataset(tiny_dataset)
    assert_one_line_error(invoke("data", "info", tiny_dataset), "labels.npy")


def test_inf_dense_with_a_valid_hash_is_refused(tiny_dataset):
    dense = np.load(tiny_dataset / "dense.npy")
    dense[1, 0] = np.inf
    np.save(tiny_dataset / "dense.npy", dense)
    rehash(tiny_dataset)
    assert_one_line_error(invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out",
                                 tiny_dataset.parent / "m"), "dense.npy.*finite")


# --------------------------------------------------------------------------- 9. silent import problems
def test_avazu_bom_header(tmp_path):
    src = tmp_path / "a.csv"
    src.write_bytes(b"\xef\xbb\xbf" + (FIX / "avazu_small.csv").read_bytes())
    res = invoke("data", "import", "avazu", src, "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    names = [f["name"] for f in load_dataset(tmp_path / "o").meta["fields"]]
    assert "id" not in names and not any("\ufeff" in n for n in names)


def test_csv_bom_header(tmp_path):
    src = tmp_path / "t.csv"
    src.write_bytes(b"\xef\xbb\xbflabel,a\n1,x\n0,y\n")
    assert invoke("data", "import", "csv", src, "--label", "label", "--out", tmp_path / "o").exit_code == 0


def test_avazu_signed_hour_is_malformed(tmp_path):
    lines = (FIX / "avazu_small.csv").read_text().splitlines()
    cells = lines[1].split(",")
    cells[2] = "+4102100"
    src = tmp_path / "a.csv"
    src.write_text("\n".join([lines[0], ",".join(cells)] + lines[2:]) + "\n")
    assert_one_line_error(invoke("data", "import", "avazu", src, "--out", tmp_path / "o"), "line 2.*hour")


@pytest.mark.parametrize("rating", ["nan", "inf", "-inf", "NaN"])
def test_movielens_non_finite_rating_is_malformed(tmp_path, rating):
    src_dir = tmp_path / "ml"
    shutil.copytree(FIX / "ml_classic", src_dir)
    data = src_dir / "u.data"
    lines = data.read_text().splitlines()
    cells = lines[0].split("\t")
    cells[2] = rating
    data.write_text("\n".join(["\t".join(cells)] + lines[1:]) + "\n")
    assert_one_line_error(invoke("data", "import", "movielens", src_dir, "--out", tmp_path / "o"), "line 1.*rating")


def test_nan_thresholds_refused(tmp_path):
    res = invoke("data", "import", "movielens", FIX / "ml_classic", "--out", tmp_path / "o", "--rating-threshold", "nan")
    assert_one_line_error(res, "--rating-threshold")
    res = invoke("data", "import", "csv", FIX / "mixed_small.csv", "--out", tmp_path / "o", "--label", "label",
                 "--label-threshold", "nan")
    assert_one_line_error(res, "--label-threshold")
    assert not (tmp_path / "o").exists()


def test_test_fraction_that_leaves_no_training_samples_refused(tmp_path, criteo_file):
    res = invoke("data", "import", "criteo", criteo_file, "--out", tmp_path / "o", "--test-fraction", "0.999")
    assert_one_line_error(res, "no training samples")
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []


# --------------------------------------------------------------------------- 10. typed headers
def _mutate_json(path: Path, fn) -> None:
    obj = json.loads(path.read_text())
    fn(obj)
    path.write_text(json.dumps(obj))


DATASET_MUTATIONS = {
    "num_samples str": lambda m: m.update(num_samples="abc"),
    "num_samples null": lambda m: m.update(num_samples=None),
    "num_samples float": lambda m: m.update(num_samples=6.7),
    "num_samples bool": lambda m: m.update(num_samples=True),
    "num_embeddings str": lambda m: m.update(num_embeddings="6"),
    "num_dense str": lambda m: m.update(num_dense="1"),
    "fields int": lambda m: m.update(fields=3),
    "fields strings": lambda m: m.update(fields=["A", "B"]),
    "field without name": lambda m: m["fields"][1].pop("name"),
    "offset str": lambda m: m["fields"][1].update(offset="0"),
    "num_values negative": lambda m: m["fields"][2].update(num_values=-3),
    "split list": lambda m: m.update(split=[4, 2]),
    "split out of range": lambda m: m.update(split={"method": "tail", "test_fraction": 0.5, "num_train": 9,
                                                    "num_test": -3}),
    "sha256 int": lambda m: m.update(sha256=5),
    "deep nesting": lambda m: m.update(source=json.loads("[" * 5000 + "]" * 5000)),
    "missing_id str": lambda m: m["fields"][1].update(missing_id="x"),
    "column out of range": lambda m: m["fields"][0].update(column=7),
}


@pytest.mark.parametrize("name", sorted(DATASET_MUTATIONS))
def test_wrongly_typed_dataset_header_is_one_line_everywhere(tiny_dataset, tmp_path, name):
    path = tiny_dataset / "dataset.json"
    if name == "deep nesting":
        text = path.read_text().replace('"source": {', '"source": {"deep": ' + "[" * 100000 + "]" * 100000 + ",", 1)
        path.write_text(text)
    else:
        _mutate_json(path, DATASET_MUTATIONS[name])
    with pytest.raises(DatasetError) as exc:
        load_dataset(tiny_dataset)
    assert "\n" not in str(exc.value)
    assert_one_line_error(invoke("data", "info", tiny_dataset), "dataset.json")
    assert_one_line_error(invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", tmp_path / "m"),
                          "dataset.json")
    assert_one_line_error(invoke("simulate", "--dataset", tiny_dataset, "--workers", 2), "dataset.json")


@pytest.fixture
def tiny_manifest(tiny_dataset, tmp_path):
    out = tmp_path / "man"
    res = invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", out)
    assert res.exit_code == 0, res.output
    return out


MANIFEST_MUTATIONS = {
    "options str": lambda m: m["partitioner"].update(options="x"),
    "partitioner str": lambda m: m.update(partitioner="random"),
    "topology str": lambda m: m.update(topology="2"),
    "num_workers float": lambda m: m.update(num_workers=2.5),
    "num_samples float": lambda m: m.update(num_samples=6.7),
    "placement_sha256 missing": lambda m: m.pop("placement_sha256"),
    "dataset_sha256 int": lambda m: m.update(dataset_sha256=3),
    "info list": lambda m: m["partitioner"].update(info=[1]),
    "seed str": lambda m: m["partitioner"].update(seed="x"),
    "machine_of beyond int64": lambda m: m["topology"].update(machine_of=2**63),  # found by the fuzz harness
}


@pytest.mark.parametrize("name", sorted(MANIFEST_MUTATIONS))
def test_wrongly_typed_manifest_header_is_one_line(tiny_dataset, tiny_manifest, name):
    from gmp.manifest import load_manifest

    _mutate_json(tiny_manifest / "manifest.json", MANIFEST_MUTATIONS[name])
    with pytest.raises(ManifestError) as exc:
        load_manifest(tiny_manifest)
    assert "\n" not in str(exc.value)
    assert_one_line_error(invoke("report", tiny_manifest, "--dataset", tiny_dataset, "--format", "json"), "manifest")
    assert_one_line_error(invoke("simulate", "--dataset", tiny_dataset, "--manifest", tiny_manifest), "manifest")


def test_manifest_without_placement_hash_and_zero_sample_worker_refused(tiny_dataset, tiny_manifest):
    _mutate_json(tiny_manifest / "manifest.json", lambda m: m.pop("placement_sha256"))
    sw = np.load(tiny_manifest / "sample_worker.npy")
    np.save(tiny_manifest / "sample_worker.npy", np.zeros_like(sw))
    assert_one_line_error(invoke("report", tiny_manifest, "--format", "json"), "placement_sha256")


# --------------------------------------------------------------------------- 11. arrays and hashes
def test_negative_ids_refused_even_with_a_valid_hash(tiny_dataset):
    idx = np.load(tiny_dataset / "indices.npy")
    idx[3] = -1
    np.save(tiny_dataset / "indices.npy", idx)
    rehash(tiny_dataset)
    assert_one_line_error(invoke("simulate", "--dataset", tiny_dataset, "--workers", 2), "indices.npy.*-1")


def test_non_monotonic_indptr_refused_even_with_a_valid_hash(tiny_dataset):
    ip = np.load(tiny_dataset / "indptr.npy")
    ip[2], ip[3] = ip[3], ip[2]
    np.save(tiny_dataset / "indptr.npy", ip)
    rehash(tiny_dataset)
    assert_one_line_error(invoke("simulate", "--dataset", tiny_dataset, "--workers", 2), "indptr.npy.*decreas")


def test_swapped_arrays_caught_by_every_command(tiny_dataset, tiny_manifest, tmp_path):
    idx = np.load(tiny_dataset / "indices.npy")
    np.save(tiny_dataset / "indices.npy", idx[::-1].copy())  # same shape and dtype, other data
    assert_one_line_error(invoke("data", "info", tiny_dataset), "sha256")
    assert_one_line_error(invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", tmp_path / "m2"), "sha256")
    assert_one_line_error(invoke("report", tiny_manifest, "--dataset", tiny_dataset, "--format", "json"), "sha256")
    assert_one_line_error(invoke("simulate", "--dataset", tiny_dataset, "--workers", 2), "sha256")


def test_hash_opt_out_is_documented_and_works(tiny_dataset, monkeypatch):
    idx = np.load(tiny_dataset / "indices.npy")
    np.save(tiny_dataset / "indices.npy", idx[::-1].copy())
    monkeypatch.setenv("GMP_NO_VERIFY", "1")
    assert invoke("data", "info", tiny_dataset).exit_code == 0
    assert "GMP_NO_VERIFY" in (Path(__file__).parents[1] / "docs" / "failure.md").read_text()


def test_dataset_without_sha256_is_refused(tiny_dataset):
    _mutate_json(tiny_dataset / "dataset.json", lambda m: m.pop("sha256"))
    assert_one_line_error(invoke("data", "info", tiny_dataset), "sha256")


# --------------------------------------------------------------------------- 13. paths and full disks
def test_out_below_a_file_is_one_line(tmp_path, criteo_file):
    assert_one_line_error(invoke("data", "import", "criteo", criteo_file, "--out", criteo_file / "sub"),
                          "not a directory")


def test_report_out_existing_file_is_one_line(tiny_manifest, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert_one_line_error(invoke("report", tiny_manifest, "--out", f), "not a directory")
    assert f.read_text() == "x"


def test_full_disk_is_one_line_naming_the_path_and_leaves_nothing(tmp_path, criteo_file, monkeypatch):
    from gmp.datasets import format as fmt

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fmt.DatasetWriter, "add", full)
    err = assert_one_line_error(invoke("data", "import", "criteo", criteo_file, "--out", tmp_path / "o"),
                                "no space left")
    assert "cannot read" not in err and str(tmp_path / "o") in err and "free" in err
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []


def test_full_disk_in_partition_is_one_line(tiny_dataset, tmp_path, monkeypatch):
    import gmp.manifest as man

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "m" / "x.npy"))

    monkeypatch.setattr(man.np, "save", full)
    assert_one_line_error(invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", tmp_path / "m"),
                          "no space left")
    assert leftovers(tmp_path) == [] and not (tmp_path / "m").exists()


# --------------------------------------------------------------------------- 14. numeric flags
@pytest.mark.parametrize("args,pattern", [
    (["partition", "{ds}", "-w", "2", "-m", "random", "--seed", "-1", "--out", "{tmp}/m"], "--seed"),
    (["report", "{man}", "--dataset", "{ds}", "--batch-size", "0"], "--batch-size"),
    (["report", "{man}", "--dataset", "{ds}", "--embedding-dim", "0"], "--embedding-dim"),
    (["data", "synth", "--out", "{tmp}/s", "--scale", "inf"], "--scale"),
    (["data", "synth", "--out", "{tmp}/s", "--scale", "nan"], "--scale"),
    (["data", "synth", "--out", "{tmp}/s", "--samples", "99999999999999"], "--samples"),
    (["data", "synth", "--out", "{tmp}/s", "--preset", "tiny", "--samples", "100", "--seed", "-1"], "--seed"),
    (["data", "synth", "--out", "{tmp}/s", "--chunk-samples", "0"], "--chunk-samples"),
    (["data", "import", "criteo", "{criteo}", "--out", "{tmp}/o", "--chunk-mb", "99999999999999"], "--chunk-mb"),
    (["data", "import", "criteo", "{criteo}", "--out", "{tmp}/o", "--hash", "C3=1099511627776"], "--hash"),
    (["data", "import", "criteo", "{criteo}", "--out", "{tmp}/o", "--test-fraction", "nan"], "--test-fraction"),
    (["data", "import", "criteo", "{criteo}", "--out", "{tmp}/o", "--min-count", "-1"], "--min-count"),
])
def test_numeric_flags_refused_in_one_line(tiny_dataset, tiny_manifest, tmp_path, criteo_file, args, pattern):
    sub = {"ds": tiny_dataset, "man": tiny_manifest, "tmp": tmp_path, "criteo": criteo_file}
    res = invoke(*[a.format(**sub) for a in args])
    assert_one_line_error(res, re.escape(pattern))


# --------------------------------------------------------------------------- issue 16 items 1 and 9
def test_partition_checks_out_before_partitioning(tiny_dataset, tmp_path, monkeypatch):
    import gmp.partition as part

    out = tmp_path / "m"
    out.mkdir()
    (out / "something").write_text("x")

    def boom(*a, **k):
        raise AssertionError("partitioned before checking --out")

    monkeypatch.setattr(part, "run_partitioner", boom)
    assert_one_line_error(invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", out), "already exists")


def test_report_out_checked_before_work(tiny_manifest, tmp_path, criteo_file):
    assert_one_line_error(invoke("report", tiny_manifest, "--out", criteo_file / "x"), "not a directory")


def test_outputs_follow_the_umask(tmp_path, criteo_file, tiny_dataset):
    old = os.umask(0o022)
    try:
        out = tmp_path / "o"
        assert invoke("data", "import", "criteo", criteo_file, "--out", out).exit_code == 0
        m = tmp_path / "m"
        assert invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", m).exit_code == 0
    finally:
        os.umask(old)
    for d in (out, m):
        assert stat.S_IMODE(d.stat().st_mode) == 0o755, oct(d.stat().st_mode)
        for f in d.iterdir():
            assert stat.S_IMODE(f.stat().st_mode) == 0o644, (f, oct(f.stat().st_mode))
