"""Issue 38: importers and readers that were silently wrong or ended in a traceback.

Each test failed on the code before the fix (named in its docstring); each now ends in a
correct dataset or one ``error:`` line.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.format import load_dataset

FIX = Path(__file__).parent / "data" / "import"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_line_error(res, pattern: str) -> str:
    assert res.exit_code == 2, (res.exit_code, res.output)
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in res.output, err
    assert re.search(pattern, err), err
    return err


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
