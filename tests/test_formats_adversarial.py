"""Findings of the adversarial pass on file formats and their versions (F1-F10): each test fails on the code
before its fix. Helpers build small files; expectations are written out by hand, not computed by gmp."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gmp._io import read_versioned_json
from gmp.errors import DatasetError, GmpError, ManifestError, TrainingError


# ---------------------------------------------------------------- F10: header errors show JSON, not Python reprs
@pytest.mark.parametrize("text, said", [
    ('{"format": "gmp.dataset", "schema_version": true}', "has schema_version true, expected a positive integer"),
    ('{"format": "gmp.dataset", "schema_version": null}', "has schema_version null, expected a positive integer"),
    ('{"format": "gmp.dataset", "schema_version": "3"}', 'has schema_version "3", expected a positive integer'),
    ('{"format": "gmp.dataset", "schema_version": 3.0}', "has schema_version 3.0, expected a positive integer"),
    ('{"format": "gmp.dataset"}', "lacks the key 'schema_version' (a positive integer)"),
    ('{"schema_version": 3}', "lacks the key 'format' (\"gmp.dataset\")"),
    ('{"format": "gmp.placement", "schema_version": 3}', 'has format "gmp.placement", expected "gmp.dataset"'),
    ('{"format": null, "schema_version": 3}', 'has format null, expected "gmp.dataset"'),
    ("[1, 2]", 'holds a JSON array, expected an object with "format": "gmp.dataset"'),
    ('"gmp.dataset"', 'holds a JSON string, expected an object with "format": "gmp.dataset"'),
    ("7", 'holds a JSON number, expected an object with "format": "gmp.dataset"'),
    ("null", 'holds a JSON null, expected an object with "format": "gmp.dataset"'),
])
def test_a_bad_header_is_quoted_as_the_file_holds_it(tmp_path, text, said):
    path = tmp_path / "dataset.json"
    path.write_text(text)
    with pytest.raises(DatasetError) as err:
        read_versioned_json(path, fmt="gmp.dataset", max_version=3, error=DatasetError, fix="FIX.")
    assert str(err.value) == f"{path} {said}; FIX."


@pytest.mark.parametrize("kind", ["dataset", "manifest", "checkpoint"])
def test_every_reader_says_true_not_True(tiny_dataset, tmp_path, kind):
    """dataset.json, manifest.json and checkpoint.json are read by the same rule."""
    if kind == "dataset":
        from gmp.datasets.format import load_dataset as load

        path, error = Path(tiny_dataset), DatasetError
        header = path / "dataset.json"
    elif kind == "manifest":
        from gmp.manifest import load_manifest as load

        path, error = Path(__file__).parent / "data" / "manifest_v3", ManifestError
        path = _copy(path, tmp_path / "m")
        header = path / "manifest.json"
    else:
        from gmp.train.checkpoint import read_header as load

        path, error = tmp_path / "ckpt", TrainingError
        path.mkdir()
        header = path / "checkpoint.json"
        header.write_text(json.dumps({"format": "gmp.checkpoint", "schema_version": 3}))
    meta = json.loads(header.read_text())
    meta["schema_version"] = True
    header.write_text(json.dumps(meta))
    with pytest.raises(error, match=r"has schema_version true, expected a positive integer"):
        load(path)


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------- F1: partitioner.options / .info checked on read
GOLDEN = Path(__file__).parent / "data"


def _manifest(tmp_path: Path, version: int, edit) -> Path:
    out = _copy(GOLDEN / f"manifest_v{version}", tmp_path / f"m{version}")
    meta = json.loads((out / "manifest.json").read_text())
    edit(meta)
    (out / "manifest.json").write_text(json.dumps(meta))  # Python's json writes NaN / Infinity
    return out


def _set_option(key, value):
    return lambda meta: meta["partitioner"]["options"].__setitem__(key, value)


@pytest.mark.parametrize("version", [1, 3])
@pytest.mark.parametrize("edit, said", [
    (_set_option("memory_per_worker", "1GB"), 'partitioner.options.memory_per_worker must be a positive integer, '
                                              'got "1GB"'),
    (_set_option("memory_per_worker", float("nan")), "partitioner.options.memory_per_worker must be a positive "
                                                      "integer, got NaN"),
    (_set_option("memory_per_worker", True), "partitioner.options.memory_per_worker must be a positive integer, "
                                             "got true"),
    (_set_option("memory_per_worker", 1.5), "partitioner.options.memory_per_worker must be a positive integer, "
                                            "got 1.5"),
    (_set_option("embedding_dim", 0), "partitioner.options.embedding_dim must be a positive integer, got 0"),
    (_set_option("gamma", float("inf")), "partitioner.options.gamma must be a finite number, got Infinity"),
    (lambda meta: meta["partitioner"]["info"]["rounds"][0].__setitem__("objective", float("nan")),
     r"partitioner.info.rounds[0].objective must be a finite number, got NaN"),
    (lambda meta: meta["partitioner"]["info"].__setitem__("extra", [1.0, -float("inf")]),
     r"partitioner.info.extra[1] must be a finite number, got -Infinity"),
])
def test_a_manifest_with_a_bad_budget_or_a_non_finite_number_is_refused_on_read(tiny_dataset, tmp_path, version,
                                                                                 edit, said):
    from gmp.manifest import load_manifest, read_plan

    path = _manifest(tmp_path, version, edit)
    want = f"{path / 'manifest.json'}: {said}; re-create it with 'gmp partition'."
    for read in (load_manifest, read_plan):
        with pytest.raises(ManifestError) as err:
            read(path)
        assert str(err.value) == want


def test_train_and_report_json_refuse_them_in_one_line(tiny_dataset, tmp_path):
    """gmp train ended in int('1GB') (ValueError) and gmp report --format json in json.dumps(allow_nan=False)."""
    from cli_helpers import invoke, one_line_error

    budget = _manifest(tmp_path, 3, _set_option("memory_per_worker", "1GB"))
    one_line_error(invoke("train", tiny_dataset, "--manifest", budget, "--epochs", "1"),
                   r"partitioner\.options\.memory_per_worker must be a positive integer, got \"1GB\"")
    nan = _manifest(tmp_path, 1, lambda m: m["partitioner"]["info"]["rounds"][1].__setitem__("objective",
                                                                                             float("nan")))
    one_line_error(invoke("report", nan, "--format", "json"),
                   r"partitioner\.info\.rounds\[1\]\.objective must be a finite number, got NaN")


def test_a_valid_budget_still_reads(tiny_dataset, tmp_path):
    from gmp.manifest import load_manifest

    path = _manifest(tmp_path, 3, _set_option("memory_per_worker", 4096))
    assert load_manifest(path).placement.options["memory_per_worker"] == 4096


# ---------------------------------------------------------------- F5: docs/train.md describes the checkpoint written
def test_train_docs_describe_the_checkpoint_schema_the_code_writes():
    """docs/train.md's checkpoint paragraph said schema 2 (no worker-XXXXX.rows) while the code wrote 3."""
    from gmp.train.checkpoint import SCHEMA_VERSION
    from gmp.train.checkpoint_rows import rows_name

    text = (Path(__file__).parent.parent / "docs" / "train.md").read_text(encoding="utf-8")
    said = re.findall(r"\*\*Checkpoints\*\* \(`gmp/train/checkpoint\.py`, schema (\d+)\)(.{0,200})", text, re.S)
    assert [int(v) for v, _ in said] == [SCHEMA_VERSION]
    assert rows_name(0).replace("00000", "XXXXX") in said[0][1]  # worker-XXXXX.rows, in the layout it gives
