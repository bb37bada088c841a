"""Issue 38: importers and readers that were silently wrong or ended in a traceback.

Each test failed on the code before the fix (named in its docstring); each now ends in a
correct dataset or one ``error:`` line.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import invoke, one_line_error
from gmp.datasets.format import load_dataset

FIX = Path(__file__).parent / "data" / "import"


@pytest.fixture
def ml(tmp_path) -> Path:
    return Path(shutil.copytree(FIX / "ml_atomic", tmp_path / "ml"))


# --------------------------------------------------------------------------- MovieLens (defect 5)
@pytest.mark.parametrize("kind", ["directory", "fifo", "broken-symlink", "symlink-loop"])
@pytest.mark.parametrize("side", ["ml.user", "ml.item"])
def test_movielens_side_file_that_is_not_a_file_is_refused(ml, tmp_path, kind, side):
    """Before: the side file was skipped (every user or item field dropped, exit 0, no word)."""
    target = ml / side
    target.unlink()
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "broken-symlink":
        target.symlink_to(tmp_path / "nowhere")
    else:
        target.symlink_to(target)
    out = tmp_path / "out"
    want = {"directory": "a directory", "fifo": "not a regular file", "broken-symlink": "a broken or looping symlink",
            "symlink-loop": "a broken or looping symlink"}[kind]
    one_line_error(invoke("data", "import", "movielens", ml / "ml.inter", "--out", out), rf"{side} is {want}")
    assert not out.exists()


def test_movielens_classic_side_directory_is_refused(tmp_path):
    ml = Path(shutil.copytree(FIX / "ml_classic", tmp_path / "ml"))
    (ml / "u.user").unlink()
    (ml / "u.user").mkdir()
    one_line_error(invoke("data", "import", "movielens", ml, "--out", tmp_path / "o"), r"u\.user is a directory")


def test_movielens_rating_token_is_the_label_not_a_feature(ml, tmp_path):
    """Before: a 'rating:token' header made the rating a categorical field (the label leaked into the input)."""
    inter = ml / "ml.inter"
    text = inter.read_text()
    inter.write_text(text.replace("rating:float", "rating:token", 1))
    res = invoke("data", "import", "movielens", inter, "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    ds = load_dataset(tmp_path / "o")
    names = [f.name for f in ds.fields]
    assert "rating" not in names and {"user_id", "item_id"} <= set(names)
    # the same fields as the float header gives
    res = invoke("data", "import", "movielens", FIX / "ml_atomic" / "ml.inter", "--out", tmp_path / "ref")
    assert res.exit_code == 0, res.output
    assert names == [f.name for f in load_dataset(tmp_path / "ref").fields]


def test_movielens_ignore_every_column_is_one_line(ml, tmp_path):
    """Before: a ValueError traceback from numpy ('need at least one array to stack')."""
    every = "user_id,item_id,age,gender,occupation,zip_code,movie_title,release_year,class,timestamp"
    one_line_error(invoke("data", "import", "movielens", ml / "ml.inter", "--out", tmp_path / "o", "--ignore", every),
                   r"leaves no feature column")


# --------------------------------------------------------------------------- symlink loops
LOOP_ARGS = {"criteo": [], "avazu": [], "csv": ["--label", "label"], "parquet": ["--label", "label"],
             "libsvm": [], "libffm": [], "libfm": [], "movielens": []}


@pytest.mark.parametrize("fmt", sorted(LOOP_ARGS))
def test_symlink_loop_input_is_one_line(tmp_path, fmt):
    """Before: RuntimeError('Symlink loop from ...') traceback (Path.resolve) for every format."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    one_line_error(invoke("data", "import", fmt, loop, "--out", tmp_path / "o", *LOOP_ARGS[fmt]),
                   r"loop is a symbolic link that points nowhere or loops")
    assert not (tmp_path / "o").exists()


def test_symlink_loop_out_is_one_line(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    src = FIX / "criteo_small.tsv"
    one_line_error(invoke("data", "import", "criteo", src, "--out", loop / "x"), r"--out .*loop.* is not a directory")
    one_line_error(invoke("data", "import", "criteo", src, "--out", loop), r"--out .*loop is a symbolic link")
    ds = tmp_path / "ds"
    assert invoke("data", "import", "criteo", src, "--out", ds).exit_code == 0
    one_line_error(invoke("partition", ds, "-w", 2, "-m", "random", "--out", loop / "x"), r"is not a directory")
    one_line_error(invoke("partition", loop / "x", "-w", 2, "-m", "random"), r"is not a directory")
    one_line_error(invoke("data", "import", "criteo", src, "--out", tmp_path / "o", "--extend", loop),
                   r"is not a directory")


# --------------------------------------------------------------------------- parquet nested columns
def _parquet(path: Path, column) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"label": [0, 1, 0, 1], "c": ["a", "b", "a", "c"], "x": column(pa)}), path)
    return path


NESTED = {
    "struct": lambda pa: pa.array([{"u": 1, "v": "a"}] * 4),
    "map": lambda pa: pa.array([[("k", 1)]] * 4, type=pa.map_(pa.string(), pa.int64())),
    "list-of-lists": lambda pa: pa.array([[[1, 2], [3]]] * 4),
}


@pytest.mark.parametrize("kind", sorted(NESTED))
@pytest.mark.parametrize("role", [[], ["--multi", "x"], ["--dense", "x"]], ids=["cat", "multi", "dense"])
def test_parquet_nested_column_is_one_line(tmp_path, kind, role):
    """Before: pyarrow's ArrowNotImplementedError traceback (cast of a nested type to text)."""
    src = _parquet(tmp_path / "n.parquet", NESTED[kind])
    one_line_error(invoke("data", "import", "parquet", src, "--out", tmp_path / "o", "--label", "label", *role),
                   r"column 'x' \(--\w+\) has the nested Arrow type")
    res = invoke("data", "import", "parquet", src, "--out", tmp_path / "ok", "--label", "label", "--ignore", "x")
    assert res.exit_code == 0, res.output


def test_parquet_flat_list_as_categorical_says_multi(tmp_path):
    src = _parquet(tmp_path / "l.parquet", lambda pa: pa.array([[1, 2]] * 4))
    one_line_error(invoke("data", "import", "parquet", src, "--out", tmp_path / "o", "--label", "label"),
                   r"name it with --multi")
    res = invoke("data", "import", "parquet", src, "--out", tmp_path / "ok", "--label", "label", "--multi", "x")
    assert res.exit_code == 0, res.output


# --------------------------------------------------------------------------- corrupt vocab.npz under --extend
def _corrupt_zip(p: Path) -> None:
    p.write_bytes(b"PK\x03\x04garbage")


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _pickled(p: Path) -> None:
    np.savez(p, field_0=np.array([object()], dtype=object))


def _strings(p: Path) -> None:
    np.savez(p, field_0=np.array(["a", "b"]), field_1=np.zeros((2, 2)))


@pytest.mark.parametrize("damage, pattern", [
    (_corrupt_zip, r"vocab\.npz is corrupt: not a readable \.npz archive"),
    (_truncate, r"vocab\.npz is corrupt"),
    (_pickled, r"vocab\.npz is corrupt: it is not an archive of plain arrays"),
    (_strings, r"vocab\.npz entry 'field_0' is <U1 of shape \(2,\), expected a 1-d integer array"),
], ids=["not-zip", "truncated", "pickled", "strings"])
def test_extend_with_corrupt_vocab_is_one_line(tmp_path, damage, pattern):
    """Before: zipfile.BadZipFile / ValueError tracebacks (the pickled one quoting numpy's allow_pickle advice)."""
    prev = Path(shutil.copytree(Path(__file__).parent / "data" / "dataset_v3", tmp_path / "prev"))
    damage(prev / "vocab.npz")
    src = tmp_path / "day1.csv"
    src.write_text("label,user,item,price\n1,u1,i9,1.0\n0,u7,i1,2.0\n")
    err = one_line_error(invoke("data", "import", "csv", src, "--out", tmp_path / "o", "--label", "label", "--dense",
                                "price", "--extend", prev), pattern)
    assert "allow_pickle" not in err


# --------------------------------------------------------------------------- report.json shapes
REPORT_EDITS = {
    "per_worker-int": (("metrics", "per_worker", "samples"), 1),
    "per_worker-strings": (("metrics", "per_worker", "epoch_unique_remote"), ["x", "y"]),
    "per_worker-short": (("metrics", "per_worker", "batch_remote_reads"), [1]),
    "matrix-ragged": (("metrics", "traffic_matrix"), [[0, 1], [2]]),
    "count-list": (("metrics", "num_active_embeddings"), []),
    "seconds-text": (("metrics", "partition_seconds"), "x"),
    "train-text": (("metrics", "train"), "x"),
    "degrees-text": (("degree_distribution",), "x"),
    "degrees-counts": (("degree_distribution", "counts"), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
}


@pytest.mark.parametrize("name", sorted(REPORT_EDITS))
@pytest.mark.parametrize("fmt", ["md", "json"])
def test_report_json_shape_edit_is_one_line(tmp_path, name, fmt):
    """Before: TypeError/ValueError/KeyError/AttributeError tracebacks in the tables."""
    import json

    man = Path(shutil.copytree(Path(__file__).parent / "data" / "manifest_v3", tmp_path / "m"))
    report = json.loads((man / "report.json").read_text())
    path, value = REPORT_EDITS[name]
    target = report
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    (man / "report.json").write_text(json.dumps(report))
    key = ".".join(path[:2]) if path[0] == "metrics" else path[0]
    one_line_error(invoke("report", man, "--format", fmt), r"report\.json: " + re.escape(key))


# --------------------------------------------------------------------------- criteo int64
def test_criteo_int64_max_is_an_integer(tmp_path):
    """Before: 'column 2 (I1) is not an integer: 9223372036854775807' (the parser stopped at 18 digits)."""
    lines = (FIX / "criteo_small.tsv").read_text().splitlines()[:3]
    cols = lines[0].split("\t")
    cols[1] = "9223372036854775807"
    lines[0] = "\t".join(cols)
    src = tmp_path / "big.tsv"
    src.write_text("\n".join(lines) + "\n")
    res = invoke("data", "import", "criteo", src, "--out", tmp_path / "o", "--test-fraction", "0")
    assert res.exit_code == 0, res.output
    dense = np.load(tmp_path / "o" / "dense.npy")
    assert dense[0, 0] == np.float32(np.log1p(float(2**63 - 1)))
    cols[1] = "9223372036854775808"
    lines[0] = "\t".join(cols)
    src.write_text("\n".join(lines) + "\n")
    one_line_error(invoke("data", "import", "criteo", src, "--out", tmp_path / "o2"),
                   r"column 2 \(I1\) is an integer outside the 64-bit range: '9223372036854775808'")


# --------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A one-epoch run with a checkpoint (the schema-3 golden dataset, 4 training samples, batch 2)."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("ck")
    ds, man, ck = root / "ds", root / "man", root / "ck"
    shutil.copytree(Path(__file__).parent / "data" / "dataset_v3", ds)
    res = invoke("partition", ds, "-w", 2, "-m", "random", "--out", man, "--batch-size", 2, "--embedding-dim", 2,
                 "--no-plots")
    assert res.exit_code == 0, res.output
    res = invoke("train", "--dataset", ds, "--manifest", man, "--epochs", 1, "--batch-size", 2, "--embedding-dim", 2,
                 "--checkpoint-dir", ck)
    assert res.exit_code == 0, res.output
    return root, ds, man, ck


def _resume(root, ds, man, ck):
    return invoke("train", "--dataset", ds, "--manifest", man, "--epochs", 2, "--batch-size", 2, "--embedding-dim", 2,
                  "--checkpoint-dir", ck, "--resume")


def _latest(ck: Path) -> Path:
    return ck / os.readlink(ck / "latest")


def test_checkpoint_step_edit_is_refused(trained, tmp_path):
    """Before: checkpoint.json's step edited from 0 to 1 resumed, silently skipping a step."""
    import json

    root, ds, man, ck = trained
    case = Path(shutil.copytree(ck, tmp_path / "ck", symlinks=True))
    head_path = _latest(case) / "checkpoint.json"
    head = json.loads(head_path.read_text())
    assert (head["epoch"], head["step"]) == (1, 0)
    head["step"] = 1
    head_path.write_text(json.dumps(head))
    one_line_error(_resume(root, ds, man, case), r"says epoch 2 step 1 \(\"epoch\": 1, 0-based\), but the state in "
                                                 r"trainer\.pt was saved at epoch 2 step 0: the header was edited")


def test_refused_checkpoint_never_advises_weights_only_false(trained, tmp_path):
    """Before: the error quoted torch ('This file can still be loaded ... if you trust the source')."""
    import json

    import torch

    root, ds, man, ck = trained
    case = Path(shutil.copytree(ck, tmp_path / "ck", symlinks=True))
    latest = _latest(case)
    torch.save({"model": Path("x"), "dense_opt": {}, "history": [], "schedule": {}, "torch_rng": 0,
                "numpy_rng": 0}, latest / "trainer.pt")
    head = json.loads((latest / "checkpoint.json").read_text())
    head["files"]["trainer.pt"] = (latest / "trainer.pt").stat().st_size
    (latest / "checkpoint.json").write_text(json.dumps(head))
    err = one_line_error(_resume(root, ds, man, case), r"trainer\.pt is not a readable gmp checkpoint file \(it holds "
                                                       r"the pickled object pathlib\.\w+, which gmp never writes")
    assert "weights_only" not in err and "still be loaded" not in err and "trust" not in err
