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
