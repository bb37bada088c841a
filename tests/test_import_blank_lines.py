"""Blank lines in text inputs (empty, or only spaces, tabs and ``\\r``) are skipped and counted, in every
line-oriented importer; a file imports to the same dataset with or without them, and to the dataset it
imported to before blank lines were skipped (the hashes below were written by that gmp)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from gmp.datasets import load_dataset
from gmp.datasets.csvfmt import CsvOptions
from gmp.datasets.dispatch import import_dataset
from gmp.datasets.streaming import CommonOptions, iter_chunks
from gmp.errors import ImportDataError

from tests.test_importers import criteo_rows

FIX = Path(__file__).parent / "data" / "import"

#: name: (format, input, the file of it that gets blank lines, header lines, options, sha256 before the change)
CASES = {
    "criteo": ("criteo", "criteo_small.tsv", "criteo_small.tsv", 0, {},
               "f250559e764f009394f2d56106cce89e3d5d141322a1707ebbe45e76dc574c08"),
    "avazu": ("avazu", "avazu_small.csv", "avazu_small.csv", 1, {},
              "89c626aeec17d87a455e2dd501750eeaedbac68b8fc32ec5df0bbaccb1c5b761"),
    "csv": ("csv", "mixed_small.csv", "mixed_small.csv", 1,
            {"options": CsvOptions(label="income", label_positive=">50K", multi=["tags"], dense=["age", "hours"])},
            "b091f13a0af08bfa4ece4c8e398dae867f1008180c56b91c01dcb0b7afecff68"),
    "libsvm": ("libsvm", "small.libsvm", "small.libsvm", 0, {},
               "3708ecbe260535ab9c87354f4f632546888d2f9fab1fe779aee82bf17c1750f0"),
    "libffm": ("libffm", "small.libffm", "small.libffm", 0, {},
               "ee0e5b4c606ab0f992f1f444af7be3622737ff9821235bc618126f93616f0a21"),
    "movielens-classic": ("movielens", "ml_classic", "ml_classic/u.data", 0, {},
                          "108b686158666e7076fb675918ceae79c09e8ea262069bec18a7520fe4e19eac"),
    "movielens-atomic": ("movielens", "ml_atomic", "ml_atomic/ml.inter", 1, {},
                         "108b686158666e7076fb675918ceae79c09e8ea262069bec18a7520fe4e19eac"),
}
#: inserted after the first data line (4 blank lines) and before the last one (1); the two at the very end
#: are an editor's, dropped uncounted
BLANKS_AFTER_FIRST = ["\n", "   \n", "\t\r\n", "\r\n"]
NUM_BLANK = len(BLANKS_AFTER_FIRST) + 1


def with_blank_lines(text: str, header_lines: int) -> str:
    lines = text.splitlines(keepends=True)
    first = header_lines + 1
    return "".join(lines[:first] + BLANKS_AFTER_FIRST + lines[first:-1] + [" \n"] + lines[-1:] + ["\n", "\n"])


def run(fmt, inputs, out, options, **common):
    return import_dataset(fmt, inputs, out, common=CommonOptions(test_fraction=0.2, **common), **options)


def arrays(path):
    ds = load_dataset(path)
    dense = None if ds.dense is None else np.asarray(ds.dense)
    return np.asarray(ds.indptr), np.asarray(ds.indices), np.asarray(ds.labels), dense


@pytest.mark.parametrize("name", list(CASES))
def test_blank_lines_are_skipped_counted_and_change_nothing_else(tmp_path, name):
    fmt, src, blanked, header, options, before = CASES[name]
    plain = run(fmt, [FIX / src], tmp_path / "plain", options)
    assert plain["sha256"] == before and "num_blank_lines" not in plain["source"]  # as imported before
    copy = tmp_path / "in" / src
    if (FIX / src).is_dir():
        shutil.copytree(FIX / src, copy)
    else:
        copy.parent.mkdir()
        shutil.copy(FIX / src, copy)
    target = tmp_path / "in" / blanked
    target.write_text(with_blank_lines(target.read_text(), header))
    meta = run(fmt, [copy], tmp_path / "blank", options)  # strict: max_bad_lines 0
    assert meta["sha256"] == before and meta["num_bad_lines"] == 0
    assert meta["source"]["num_blank_lines"] == NUM_BLANK
    assert meta["source"]["num_lines"] == plain["source"]["num_lines"]
    for a, b in zip(arrays(tmp_path / "plain"), arrays(tmp_path / "blank")):
        np.testing.assert_array_equal(a, b)


def test_blank_lines_in_a_side_file_are_skipped_too(tmp_path):
    shutil.copytree(FIX / "ml_classic", tmp_path / "ml")
    user = tmp_path / "ml" / "u.user"
    user.write_text(with_blank_lines(user.read_text(), 0))
    meta = run("movielens", [tmp_path / "ml"], tmp_path / "o", {})
    assert meta["sha256"] == CASES["movielens-classic"][-1] and meta["source"]["num_blank_lines"] == NUM_BLANK


MALFORMED = {  # format: (good line, malformed line, reason, header)
    "criteo": ("0\t1" + "\t" * 12 + "\t68fd1e64" * 26, "0\t1\t2", "expected 40 tab-separated columns", ""),
    "csv": ("1,u1", "x,u2", "label column 'label' is not a number", "label,user\n"),
    "libfm": ("1 3:1", "1 3:x", "value of token 1 is not a number", ""),
    "libffm": ("1 0:3:1", "1 3:1", "token 1 .3:1. is not field:idx:val", ""),
}


@pytest.mark.parametrize("fmt", list(MALFORMED))
def test_a_malformed_line_after_blank_lines_keeps_its_number_and_max_bad_lines_counts_only_it(tmp_path, fmt):
    good, bad, reason, header = MALFORMED[fmt]
    p = tmp_path / "in.txt"
    # lines (after a header): 1 good, 2 blank, 3 blank, 4 malformed, 5 good
    p.write_text(header + f"{good}\n\n  \n{bad}\n{good}\n")
    options = {"options": CsvOptions(label="label")} if fmt == "csv" else {}
    line = 4 + bool(header)
    with pytest.raises(ImportDataError, match=rf"1 malformed line in the first 3 lines read, .*in.txt line {line}: "
                                              rf"{reason}"):
        run(fmt, [p], tmp_path / "strict", options)
    meta = run(fmt, [p], tmp_path / "o", options, max_bad_lines=1)
    assert meta["num_bad_lines"] == 1 and meta["bad_lines"][0]["line"] == line
    assert meta["num_samples"] == 2 and meta["source"]["num_blank_lines"] == 2


def test_an_input_of_blank_lines_is_empty(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("label,user\n\n \n\t\n\n")
    with pytest.raises(ImportDataError, match="the input is empty"):
        run("csv", [p], tmp_path / "o", {"options": CsvOptions(label="label")})


@pytest.mark.parametrize("chunk_bytes", [1, 3, 7, 4096])
def test_chunks_leave_blank_lines_out_and_number_the_others(tmp_path, chunk_bytes):
    p = tmp_path / "x.txt"
    p.write_bytes(b"h\na\n\nb\n \t\r\n\x0b\nc\r\n\n\n  \n")
    chunks = list(iter_chunks(p, chunk_bytes=chunk_bytes, skip_lines=1))
    got = [(int(c.line_of(k)), ln) for c in chunks for k, ln in enumerate(c.data.split(b"\n")[:-1])]
    assert got == [(2, b"a"), (4, b"b"), (7, b"c\r")]
    assert sum(c.num_blank for c in chunks) == 3  # those at the very end are not counted


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=criteo_rows(), where=st.lists(st.tuples(st.integers(0, 20), st.sampled_from(BLANKS_AFTER_FIRST)),
                                          max_size=6),
       chunk=st.integers(1, 400))
def test_criteo_with_blank_lines_anywhere_imports_as_without(tmp_path_factory, text, where, chunk):
    d = tmp_path_factory.mktemp("p")
    lines = text.splitlines(keepends=True)
    (d / "plain.tsv").write_text(text)
    blanked = list(lines)
    for at, blank in sorted(where, reverse=True):
        blanked.insert(min(at, len(lines) - 1), blank)  # before the last line at the latest: counted
    (d / "blank.tsv").write_text("".join(blanked))
    a = run("criteo", [d / "plain.tsv"], d / "a", {}, chunk_bytes=chunk)
    b = run("criteo", [d / "blank.tsv"], d / "b", {}, chunk_bytes=chunk)
    assert a["sha256"] == b["sha256"] and b["source"].get("num_blank_lines", 0) == len(where)
