"""Format recognition, provided train/test splits and Parquet input (issue 16, items 2 and 8).

The advice for a file of the wrong format is checked end to end: the command the
error suggests is run as printed and must import the file.
"""

from __future__ import annotations

import json
import re
import shlex

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets import load_dataset
from gmp.datasets.sniff import compress_names, expand_names, sniff_delimiter, sniff_lines

runner = CliRunner()
CRITEO_ROW = "\t".join(["1", "5", "", "3"] + ["7"] * 10 + ["68fd1e64", "80e26c9b"] + ["a73ee510"] * 24)
HEADER = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]


def invoke(*args):
    return runner.invoke(app, ["data", *map(str, args)])


def one_line_error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in result.output, err
    return err


def criteo_rows(n: int, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        label = str(int(rng.random() < 0.3))
        dense = [str(int(x)) if x >= 0 else "" for x in rng.integers(-1, 50, 13)]
        cats = [format(int(x), "08x") for x in rng.integers(0, 6, 26)]
        rows.append([label, *dense, *cats])
    return rows


# ---------------------------------------------------------------- pure sniffing
@pytest.mark.parametrize("lines, fmt", [
    ([CRITEO_ROW] * 5, "criteo"),
    (["1 3:1 17:1 120:0.5", "-1 5:1 17:1"], "libfm"),
    (["1 0:3:1 1:17:1", "0 0:5:1 2:9:1"], "libffm"),
    (["196\t242\t3\t881250949", "186\t302\t3\t891717742"], "movielens"),
    (["user_id:token\titem_id:token\trating:float", "1\t2\t3"], "movielens"),
    (["id,click,hour,C1", "1,0,14102100,1005", "2,1,14102100,1002"], "avazu"),
])
def test_sniff_recognises_formats(lines, fmt):
    assert sniff_lines(lines).format == fmt


def test_sniff_header_csv_suggests_label_and_dense_columns():
    rows = [",".join(HEADER)] + [",".join(r) for r in criteo_rows(20)]
    g = sniff_lines(rows)
    assert g.format == "csv" and g.sep == "," and g.header[0] == "label"
    assert g.args == ("--sep", ",", "--label", "label", "--dense", "I1..I13")
    assert g.command("x.csv") == "gmp data import csv x.csv --sep , --label label --dense I1..I13 --out OUT"


def test_delimiter_tolerates_rows_with_trailing_columns_dropped():
    lines = ["a\tb\tc\td"] * 6 + ["a\tb\tc"] * 3
    assert sniff_delimiter(lines) == "\t"
    assert sniff_delimiter(["a,b", "a;b;c", "x"]) is None


def test_name_ranges_round_trip():
    names = ["label", "I1", "I2", "I3", "x", "C7", "C8"]
    assert compress_names(names) == ["label", "I1..I3", "x", "C7", "C8"]
    assert expand_names(compress_names(names)) == names
    assert expand_names(["f2..4"]) == ["f2", "f3", "f4"]
    assert expand_names(["a1..b3"]) == ["a1..b3"]  # not a range: the prefixes differ


# ---------------------------------------------------------------- the CLI advice
def test_header_csv_imported_as_criteo_names_the_csv_command_that_works(tmp_path, monkeypatch):
    src = tmp_path / "sample.csv"
    src.write_text("\n".join([",".join(HEADER)] + [",".join(r) for r in criteo_rows(60)]) + "\n")
    err = one_line_error(invoke("import", "criteo", src, "--out", tmp_path / "bad"))
    assert err.count(str(src)) <= 2, err  # no list of identical per-line errors
    assert "--max-bad-lines" not in err
    cmd = re.search(r"Read it with: (gmp data import .*)$", err).group(1)
    args = shlex.split(cmd)[1:]  # drop 'gmp'
    args[args.index(str(tmp_path / "bad"))] = str(tmp_path / "good")  # the command names the --out given
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    ds = load_dataset(tmp_path / "good")
    assert ds.num_samples == 60 and ds.num_dense == 13 and len(ds.categorical_fields) == 26


def test_csv_with_a_word_label_names_label_positive_and_the_command_works(tmp_path):
    src = tmp_path / "yn.csv"
    src.write_text("label,a\nyes,x\nno,y\nno,x\n")
    err = one_line_error(invoke("import", "csv", src, "--label", "label", "--out", tmp_path / "bad"))
    assert "label column 'label' is not a number: 'yes'" in err
    cmd = re.search(r"Run: (gmp data import .*)$", err).group(1)
    assert "--label-positive yes" in cmd, cmd
    assert "the values in its first 3 rows are 'no', 'yes'" in err, err
    args = shlex.split(cmd)[1:]
    args[args.index(str(tmp_path / "bad"))] = str(tmp_path / "good")
    res = runner.invoke(app, [*args, "--test-fraction", "0"])
    assert res.exit_code == 0, res.output
    np.testing.assert_array_equal(np.asarray(load_dataset(tmp_path / "good").labels), [1, 0, 0])
    # a threshold label (UCI Adult): the upper side, quoted for the shell
    assert sniff_lines(["y,a", ">50K,x", "<=50K,y"]).args[-2:] == ("--label-positive", "'>50K'")
    # no word that means "positive" and no threshold: the first value in sorted order
    assert sniff_lines(["y,a", "cat,x", "dog,y"]).args[-2:] == ("--label-positive", "cat")
    assert "--label-positive" not in sniff_lines(["label,a", "1,x", "0,y"]).args  # numbers need no flag


def test_libfm_file_imported_as_libffm_points_to_libfm(tmp_path):
    src = tmp_path / "x.fm.txt"
    src.write_text("".join(f"{i % 2} {i % 7}:1 {100 + i % 5}:1\n" for i in range(40)))
    err = one_line_error(invoke("import", "libffm", src, "--out", tmp_path / "o"))
    assert re.search(r"looks like libfm.*gmp data import libfm", err), err


def test_headerless_file_given_to_csv_is_refused_before_reading(tmp_path):
    src = tmp_path / "train.txt"
    src.write_text("\n".join([CRITEO_ROW] * 5) + "\n")
    err = one_line_error(invoke("import", "csv", src, "--out", tmp_path / "o", "--label", "x"))
    assert "gmp data import criteo" in err and len(err) < 400, err


def test_csv_delimiter_comes_from_the_content_not_the_extension(tmp_path):
    src = tmp_path / "data.txt"  # .txt used to mean tab
    src.write_text("label,a,b\n1,x,y\n0,x,z\n1,w,y\n")
    res = invoke("import", "csv", src, "--out", tmp_path / "o", "--label", "label", "--test-fraction", "0")
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "o" / "dataset.json").read_text())
    assert [f["name"] for f in meta["fields"]] == ["a", "b"] and meta["num_samples"] == 3


def test_small_share_of_bad_lines_keeps_the_bad_line_message(tmp_path):
    src = tmp_path / "t.tsv"
    rows = [CRITEO_ROW] * 9 + ["2\t" + CRITEO_ROW.split("\t", 1)[1]]
    src.write_text("\n".join(rows) + "\n")
    err = one_line_error(invoke("import", "criteo", src, "--out", tmp_path / "o"))
    assert "label (column 1) is not 0 or 1" in err and "--max-bad-lines" in err


# ---------------------------------------------------------------- provided splits
def test_test_input_keeps_the_provided_split(tmp_path):
    train, test = tmp_path / "train.tsv", tmp_path / "test.tsv"
    tr, te = criteo_rows(30, seed=1), criteo_rows(12, seed=2)
    train.write_text("\n".join("\t".join(r) for r in tr) + "\n")
    test.write_text("\n".join("\t".join(r) for r in te) + "\n")
    res = invoke("import", "criteo", train, "--test-input", test, "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    ds = load_dataset(tmp_path / "o")
    assert ds.meta["split"]["method"] == "provided"
    assert (ds.num_train, ds.num_test) == (30, 12)
    np.testing.assert_array_equal(np.asarray(ds.labels[30:]), [float(r[0]) for r in te])
    assert ds.meta["source"]["options"]["test_inputs"] == [str(test)]


def test_test_input_refusals(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text(CRITEO_ROW + "\n")
    err = one_line_error(invoke("import", "criteo", train, "--test-input", train, "--out", tmp_path / "o"))
    assert "both as an input and as a test input" in err
    err = one_line_error(invoke("import", "criteo", train, "--test-input", train, "--test-fraction", "0.2",
                                "--out", tmp_path / "o"))
    assert "--test-fraction and --test-input" in err


# ---------------------------------------------------------------- parquet
def _table_rows(n, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        rows.append({"click": int(rng.random() < 0.4), "user": int(rng.integers(0, 7)),
                     "city": [None, "paris", "rome", "oslo"][int(rng.integers(0, 4))],
                     "tags": ["a", "b", "c"][: int(rng.integers(0, 4))],
                     "price": float(rng.integers(0, 100)) if i % 5 else None})
    return rows


def test_parquet_import_equals_the_csv_import_of_the_same_table(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _table_rows(80)
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    table = table.set_column(2, "city", table.column("city").dictionary_encode())
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=23)
    with open(tmp_path / "t.csv", "w") as f:
        f.write("click,user,city,tags,price\n")
        for r in rows:
            price = "" if r["price"] is None else f"{r['price']:.0f}"
            f.write(f"{r['click']},{r['user']},{r['city'] or ''},{'|'.join(r['tags'])},{price}\n")
    common = ["--label", "click", "--multi", "tags", "--dense", "price", "--test-fraction", "0.25"]
    assert invoke("import", "parquet", tmp_path / "t.parquet", "--out", tmp_path / "p", *common).exit_code == 0
    assert invoke("import", "csv", tmp_path / "t.csv", "--out", tmp_path / "c", *common).exit_code == 0
    p, c = load_dataset(tmp_path / "p"), load_dataset(tmp_path / "c")
    for name in ("indptr", "indices", "labels", "dense"):
        np.testing.assert_array_equal(np.asarray(getattr(p, name)), np.asarray(getattr(c, name)), err_msg=name)
    assert [f.to_json() for f in p.fields] == [f.to_json() for f in c.fields]


def test_parquet_empty_strings_and_a_numeric_label_positive_read_as_in_csv(tmp_path):
    """An empty string is the field's missing value (it got a real id), and --label-positive 1.0 matches a float
    label column's 1.0 (pyarrow's text of it is '1': every label was 0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"y": [1.0, 0.0, 1.0, 0.0], "a": ["x", "", "y", "x"]}), tmp_path / "t.parquet")
    (tmp_path / "t.csv").write_text("y,a\n1.0,x\n0.0,\n1.0,y\n0.0,x\n")
    common = ["--label", "y", "--label-positive", "1.0", "--test-fraction", "0"]
    assert invoke("import", "parquet", tmp_path / "t.parquet", "--out", tmp_path / "p", *common).exit_code == 0
    assert invoke("import", "csv", tmp_path / "t.csv", "--out", tmp_path / "c", *common).exit_code == 0
    p, c = load_dataset(tmp_path / "p"), load_dataset(tmp_path / "c")
    assert np.asarray(p.labels).tolist() == [1, 0, 1, 0]
    for name in ("indptr", "indices", "labels"):
        np.testing.assert_array_equal(np.asarray(getattr(p, name)), np.asarray(getattr(c, name)), err_msg=name)


def test_parquet_null_label_is_a_malformed_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"y": [1, None, 0, 1], "a": ["x", "y", "x", "z"]}), tmp_path / "t.parquet")
    err = one_line_error(invoke("import", "parquet", tmp_path / "t.parquet", "--out", tmp_path / "o",
                                "--label", "y"))
    assert "line 2" in err and "label column 'y' is null" in err
    res = invoke("import", "parquet", tmp_path / "t.parquet", "--out", tmp_path / "o", "--label", "y",
                 "--max-bad-lines", "1", "--test-fraction", "0")
    assert res.exit_code == 0, res.output
    assert load_dataset(tmp_path / "o").num_samples == 3


def test_a_csv_file_given_as_parquet_is_one_line(tmp_path):
    src = tmp_path / "t.parquet"
    src.write_text("a,b\n1,2\n")
    err = one_line_error(invoke("import", "parquet", src, "--out", tmp_path / "o", "--label", "a"))
    assert "looks like a comma-separated file" in err and "not parquet input" in err, err
    assert "Read it with: gmp data import csv" in err, err
