"""The line ``gmp data import`` prints when it has imported: counts in words that agree with them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.wording import plural

FIX = Path(__file__).parent / "data" / "import"
runner = CliRunner()


def imported(tmp_path, text: str, *flags: str) -> str:
    p = tmp_path / "x.csv"
    p.write_text(text)
    res = runner.invoke(app, ["data", "import", "csv", str(p), "--label", "label", "--out", str(tmp_path / "o"),
                              *flags])
    assert res.exit_code == 0, res.output
    (line,) = res.stdout.strip().splitlines()
    return line


def test_one_of_a_kind_is_said_in_the_singular(tmp_path):
    """'imported 1 samples (0 test), 3 embeddings in 1 fields'."""
    line = imported(tmp_path, "label,user\n1,u1\nx,u2\n", "--test-fraction", "0", "--max-bad-lines", "1")
    assert line == (f"imported 1 sample (0 test), 3 embeddings in 1 field, 0 dense, label rate 1.0000, 1 malformed "
                    f"line skipped -> {tmp_path / 'o'}")


def test_many_are_said_in_the_plural(tmp_path):
    line = imported(tmp_path, "label,user,item\n1,u1,i1\nx,u2,i2\n0,u3,i3\ny,u4,i4\n", "--test-fraction", "0",
                    "--max-bad-lines", "2")
    assert line.startswith("imported 2 samples (0 test), 8 embeddings in 2 fields, 0 dense, label rate 0.5000, "
                           "2 malformed lines skipped -> "), line


def test_the_summary_says_how_many_blank_lines_were_skipped(tmp_path):
    line = imported(tmp_path, "label,user\n1,u1\n\n0,u2\n \n\n1,u3\n")
    assert line.endswith(f"label rate 0.6667, 3 blank lines skipped -> {tmp_path / 'o'}"), line
    line = imported(tmp_path, "label,user\n1,u1\n\n0,u2\n", "--overwrite")
    assert line.endswith(f", 1 blank line skipped -> {tmp_path / 'o'}"), line
    assert "blank" not in imported(tmp_path, "label,user\n1,u1\n0,u2\n", "--overwrite")


@pytest.mark.parametrize("num, noun, form, said", [(0, "sample", None, "samples"), (1, "sample", None, "sample"),
                                                   (2, "sample", None, "samples"), (1, "entry", "entries", "entry"),
                                                   (3, "entry", "entries", "entries")])
def test_plural(num, noun, form, said):
    assert plural(noun, num, form) == said
