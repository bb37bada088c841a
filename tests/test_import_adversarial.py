"""``gmp data import``: the findings of the session-33 adversarial pass on recognition and import
(A2, B1-B3, B5, C1-C4, C9-C12). Each expectation is worked out by hand for a tiny file: the ids,
labels and dense values, or the exact one-line message."""

from __future__ import annotations

import bz2
import logging
import lzma
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import cli_helpers
from gmp.datasets import load_dataset

from tests.test_formats import criteo_rows

FIX = Path(__file__).parent / "data" / "import"


def invoke(*args):
    """``gmp data import ARGS...`` in this process."""
    return cli_helpers.invoke("data", "import", *args)


def ok(result):
    assert result.exit_code == 0, result.output
    return result


def error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip().splitlines()[-1]
    assert err.startswith("error: ") and "Traceback" not in result.output, result.output
    return err


def sample_ids(ds, name):
    """The local id of field ``name`` in every sample (one id per sample)."""
    f = next(f for f in ds.fields if f.name == name)
    pos = [f2.name for f2 in ds.categorical_fields].index(name)
    return [int(ds.indices[ds.indptr[i] + pos]) - f.offset for i in range(ds.num_samples)]


# ---------------------------------------------------------------- A2, B5: Parquet uint64
@pytest.fixture
def u64_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    k = [0, 2**64 - 1, 5] * 10
    p = tmp_path / "u64.parquet"
    pq.write_table(pa.table({"label": pa.array([i % 2 for i in range(30)]),
                             "k": pa.array(k, type=pa.uint64())}), p)
    return p


def test_a_parquet_uint64_column_is_read_as_its_64_bit_keys(tmp_path, u64_parquet):
    ok(invoke(u64_parquet, "--out", tmp_path / "o"))  # recognised: label 'label', k categorical
    ds = load_dataset(tmp_path / "o")
    # equal counts: ids by first appearance, after 0 (missing) and 1 (rare)
    assert sample_ids(ds, "k") == [2, 3, 4] * 10
    keys = np.load(tmp_path / "o" / "vocab.npz")["field_0"]
    assert [int(x) for x in keys] == [0, 2**64 - 1, 5]


def test_a_parquet_uint64_column_given_as_dense_is_read_as_numbers(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    p = tmp_path / "u64d.parquet"
    pq.write_table(pa.table({"label": pa.array([1, 0, 1]), "u": pa.array(["a", "b", "a"]),
                             "k": pa.array([0, 2**64 - 1, 7], type=pa.uint64())}), p)
    ok(invoke("parquet", p, "--label", "label", "--dense", "k", "--out", tmp_path / "d"))
    ds = load_dataset(tmp_path / "d")
    want = np.log1p(np.array([0.0, float(2**64 - 1), 7.0])).astype(np.float32)
    np.testing.assert_allclose(np.asarray(ds.dense).reshape(-1), want, rtol=1e-6)
    assert ds.meta["num_bad_lines"] == 0


# ---------------------------------------------------------------- B1: several .inter files
def test_a_movielens_directory_with_two_inter_files_is_refused_naming_them(tmp_path):
    d = tmp_path / "rb"
    d.mkdir()
    lines = (FIX / "ml_atomic" / "ml.inter").read_text().splitlines()
    (d / "ml.train.inter").write_text("\n".join(lines[:6]) + "\n")
    (d / "ml.test.inter").write_text("\n".join([lines[0], *lines[6:]]) + "\n")
    err = error(invoke("movielens", d, "--out", tmp_path / "o"))
    assert err == (f"error: {d} holds 2 RecBole '*.inter' files (ml.test.inter, ml.train.inter); pass the one to "
                   f"import as INPUT, e.g. gmp data import movielens {d / 'ml.train.inter'} --out OUT.")


def test_recbole_split_files_join_the_datasets_user_and_item_files(tmp_path):
    d = tmp_path / "rb"
    d.mkdir()
    for side in ("ml.user", "ml.item"):
        shutil.copy(FIX / "ml_atomic" / side, d / side)
    shutil.copy(FIX / "ml_atomic" / "ml.inter", d / "ml.train.inter")
    ok(invoke("movielens", d / "ml.train.inter", "--out", tmp_path / "split"))
    ok(invoke("movielens", FIX / "ml_atomic" / "ml.inter", "--out", tmp_path / "whole"))
    a, b = load_dataset(tmp_path / "split"), load_dataset(tmp_path / "whole")
    assert [f.name for f in a.fields] == ["user_id", "item_id", "age", "gender", "occupation", "zip_code",
                                          "release_year", "class"]
    assert [f.to_json() for f in a.fields] == [f.to_json() for f in b.fields]
    assert a.meta["arrays_sha256"] == b.meta["arrays_sha256"]
    assert a.meta["source"]["options"]["users"] == str(d / "ml.user")


def test_an_inter_file_without_side_files_says_so(tmp_path, caplog):
    shutil.copy(FIX / "ml_atomic" / "ml.inter", tmp_path / "x.train.inter")
    with caplog.at_level(logging.WARNING):
        ok(invoke("movielens", tmp_path / "x.train.inter", "--out", tmp_path / "o"))
    assert (f"warning: no side files beside {tmp_path / 'x.train.inter'} (looked for x.train.user, x.train.item, "
            f"x.user, x.item); only the ratings file's columns are imported, without user or item features."
            in caplog.text)


# ---------------------------------------------------------------- B2: a numeric column with a NaN
def test_a_numeric_column_with_a_nan_is_proposed_as_dense_and_the_nan_line_named(tmp_path):
    p = tmp_path / "nan.csv"
    p.write_text("label,u,d\n" + "".join(f"{i % 2},u{i % 7},{'nan' if i == 3 else float(i)}\n" for i in range(50)))
    r = invoke(p, "--out", tmp_path / "o")
    assert f"running: gmp data import csv {p} --label label --dense d --out {tmp_path / 'o'}" in r.stdout
    assert error(r) == (f"error: {p}: 1 malformed line in the first 50 lines read, more than --max-bad-lines 0: "
                        f"{p} line 5: column 3 (d) is not a number: 'nan'; fix the input or pass --max-bad-lines N "
                        f"to skip up to N malformed lines.")
    ok(invoke(p, "--max-bad-lines", "1", "--out", tmp_path / "o"))
    ds = load_dataset(tmp_path / "o")
    assert ds.num_dense == 1 and ds.num_samples == 49
    want = np.log1p([float(i) for i in range(50) if i != 3]).astype(np.float32)
    np.testing.assert_allclose(np.asarray(ds.dense).reshape(-1), want, rtol=1e-6)


def test_a_parquet_float_column_with_an_inf_is_proposed_as_dense(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    p = tmp_path / "inf.parquet"
    pq.write_table(pa.table({"label": [i % 2 for i in range(40)], "u": [f"u{i % 5}" for i in range(40)],
                             "d": [math.inf if i == 7 else i / 2 for i in range(40)]}), p)
    r = invoke(p, "--max-bad-lines", "1", "--out", tmp_path / "o")
    ok(r)
    assert "--dense d" in r.stdout
    ds = load_dataset(tmp_path / "o")
    assert ds.num_dense == 1 and ds.num_samples == 39 and ds.meta["bad_lines"][0]["line"] == 8


# ---------------------------------------------------------------- B3: four integer columns
def test_four_integer_columns_are_not_u_data_without_ratings_and_timestamps(tmp_path):
    rng = np.random.default_rng(0)
    p = tmp_path / "four.tsv"
    p.write_text("".join(f"{rng.integers(0, 2)}\t{rng.integers(1, 101)}\t{rng.integers(1, 51)}\t{rng.integers(0, 10)}\n"
                         for _ in range(100)))
    assert error(invoke(p, "--out", tmp_path / "o")) == (
        f"error: {p} looks like a tab-separated file with 4 columns and no header line (the csv importer needs "
        f"one); add a first line naming the columns (one of them the label), then run: gmp data import csv {p} "
        f"--out {tmp_path / 'o'}")
    # ratings 1-5 and 9-digit timestamps are u.data (the classic fixture is)
    r = ok(invoke(FIX / "ml_classic" / "u.data", "--out", tmp_path / "ml"))
    assert "recognised MovieLens 'u.data' rows" in r.stdout


# ---------------------------------------------------------------- C1, C2: libsvm with bad lines
def test_a_libsvm_file_with_one_bad_line_is_still_recognised(tmp_path):
    rows = [f"{i % 2} 1:{i % 5} 2:{i % 3} 3:1" for i in range(40)]
    rows[10] = "1 1:3 2:nan 3:1"
    p = tmp_path / "one_bad.svm"
    p.write_text("\n".join(rows) + "\n")
    r = ok(invoke(p, "--max-bad-lines", "5", "--out", tmp_path / "o"))
    assert "recognised libfm/libsvm lines" in r.stdout
    ds = load_dataset(tmp_path / "o")
    assert ds.num_samples == 39 and ds.meta["bad_lines"][0]["line"] == 11
    assert list(np.asarray(ds.labels)) == [i % 2 for i in range(40) if i != 10]


def test_libsvm_that_fails_is_not_told_to_run_libfm(tmp_path):
    p = tmp_path / "bigval.svm"
    p.write_text("1 1:1 2:" + "1" * 500 + "\n")
    err = error(invoke("libsvm", p, "--out", tmp_path / "o"))
    assert "Read it with" not in err
    assert err.startswith(f"error: {p}: 1 malformed line in the first 1 line read, more than --max-bad-lines 0: "
                          f"{p} line 1: value of token 2 is not a finite number")


# ---------------------------------------------------------------- C3: header only
def test_a_header_only_csv_without_format_is_empty(tmp_path):
    p = tmp_path / "hdronly.csv"
    p.write_text("label,a,b\n")
    assert error(invoke(p, "--out", tmp_path / "o")) == (
        f"error: {p}: the input is empty (no data lines, only the header line); pass a non-empty csv file.")


# ---------------------------------------------------------------- C4: other compressions
@pytest.mark.parametrize("kind,tool,write", [
    ("bzip2", "bunzip2 -k", bz2.compress),
    ("xz", "unxz -k", lzma.compress),
    ("zstd", "unzstd", lambda b: b"\x28\xb5\x2f\xfd" + b"\x00" * 20),
])
@pytest.mark.parametrize("fmt", [None, "criteo"])
def test_bzip2_xz_zstd_inputs_are_named_as_compressed(tmp_path, kind, tool, write, fmt):
    p = tmp_path / "c.tsv.z"
    p.write_bytes(write(("\n".join("\t".join(r) for r in criteo_rows(20)) + "\n").encode()))
    err = error(invoke(*([fmt] if fmt else []), p, "--out", tmp_path / "o"))
    assert err == (f"error: {p} is {kind}-compressed, and gmp reads plain text and gzip only; decompress it "
                   f"({tool} {p}) or recompress it with gzip.")


# ---------------------------------------------------------------- C9: --ignore and another role
@pytest.fixture
def roles_csv(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("label,user,price\n" + "".join(f"{i % 2},u{i % 9},{i * 0.37:.2f}\n" for i in range(30)))
    return p


@pytest.mark.parametrize("flags,col,role", [
    (["--dense", "price", "--ignore", "price"], "price", "--dense"),
    (["--cat", "user", "--ignore", "user"], "user", "--cat"),
    (["--ignore", "label"], "label", "--label"),
])
def test_ignore_with_another_role_is_refused(tmp_path, roles_csv, flags, col, role):
    err = error(invoke("csv", roles_csv, "--label", "label", *flags, "--out", tmp_path / "o"))
    assert err == f"error: column {col!r} is named in both --ignore and {role}; give each column one role."


# ---------------------------------------------------------------- C10: the suggested --dense
def test_the_numeric_warning_suggests_the_given_dense_columns_too(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("label,a,b,c,city\n" + "".join(f"{i % 2},{i},{i * 3},{i * 7 % 61},x{i % 4}\n" for i in range(60)))
    r = ok(invoke("csv", p, "--label", "label", "--dense", "b", "--out", tmp_path / "o"))
    assert ("to read them as numbers pass --dense a,b,c." in r.stderr
            and "2 numeric-looking columns imported as categorical" in r.stderr), r.stderr


# ---------------------------------------------------------------- C11: movielens side file, threshold
@pytest.mark.parametrize("side,what,ratings", [
    ("ml_atomic/ml.user", "users", "ml_atomic/ml.inter"),
    ("ml_atomic/ml.item", "items", "ml_atomic/ml.inter"),
    ("ml_classic/u.user", "users", "ml_classic/u.data"),
])
def test_a_movielens_side_file_as_input_names_the_ratings_file(tmp_path, side, what, ratings):
    err = error(invoke("movielens", FIX / side, "--out", tmp_path / "o"))
    assert err == (f"error: {FIX / side} is a MovieLens side file ({what}), not the ratings; pass the ratings file "
                   f"({FIX / ratings}) or its directory, and the side files beside it are joined in.")


def test_a_rating_threshold_above_every_rating_warns(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        ok(invoke("movielens", FIX / "ml_atomic", "--rating-threshold", "100", "--out", tmp_path / "o"))
    assert ("warning: --rating-threshold 100 is above every rating (the highest is 5), so every label is 0; "
            "choose a threshold within the ratings" in caplog.text)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ok(invoke("movielens", FIX / "ml_atomic", "--rating-threshold", "5", "--out", tmp_path / "o5"))
    assert "rating-threshold" not in caplog.text


# ---------------------------------------------------------------- C12
def test_tsv_is_another_name_for_csv(tmp_path):
    p = tmp_path / "x.tsv"
    p.write_text("click\tcity\n" + "".join(f"{i % 2}\tc{i % 3}\n" for i in range(20)))
    r = ok(invoke("tsv", p, "--label", "click", "--out", tmp_path / "t"))
    ok(invoke("csv", p, "--label", "click", "--out", tmp_path / "c"))
    a, b = load_dataset(tmp_path / "t"), load_dataset(tmp_path / "c")
    assert a.sha256 == b.sha256 and a.meta["source"]["format"] == "csv"
    assert "Traceback" not in r.output


def test_a_criteo_file_with_a_header_line_is_told_so(tmp_path):
    p = tmp_path / "ch.tsv"
    header = "\t".join(["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))])
    p.write_text(header + "\n" + "\n".join("\t".join(r) for r in criteo_rows(20)) + "\n")
    assert error(invoke(p, "--out", tmp_path / "o")) == (
        f"error: {p}: line 1 looks like a header line (label, I1..I13, C1..C26), which Criteo files do not have; "
        f"remove it or pass --max-bad-lines 1 to skip it.")
    ok(invoke(p, "--max-bad-lines", "1", "--out", tmp_path / "o"))


def test_a_test_input_of_another_format_is_named_without_mixed_counts(tmp_path):
    train = tmp_path / "c.tsv"
    train.write_text("\n".join("\t".join(r) for r in criteo_rows(30)) + "\n")
    test = FIX / "small.libsvm"
    err = error(invoke("criteo", train, "--test-input", test, "--out", tmp_path / "o"))
    assert err == (f"error: {test} looks like libfm/libsvm lines ('label idx:val ...', one colon per token), not "
                   f"criteo input like the first input; give inputs and test inputs of one format (import the other "
                   f"one separately).")


def test_the_summary_counts_skipped_lines_with_thousands_separators(tmp_path):
    p = tmp_path / "many.csv"
    p.write_text("label,u,d\n" + "".join(f"{i % 2},u{i % 7},{'x' if i % 2 else i}\n" for i in range(2400)))
    r = ok(invoke("csv", p, "--label", "label", "--dense", "d", "--max-bad-lines", "5000", "--out", tmp_path / "o"))
    assert "1,200 malformed lines skipped" in r.stdout, r.stdout
