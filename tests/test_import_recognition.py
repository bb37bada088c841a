"""``gmp data import INPUT... --out DIR`` with FORMAT left out (issue 35, item 1).

For every format a small file is imported with no FORMAT and no options (only ``--label`` where two
columns could be the label), and the dataset must equal the one the explicit command writes (same
arrays hash, fields and recorded options). The explicit commands are written here by hand, not taken
from the printed line; the printed line is checked against them and run once as printed.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets import load_dataset

from tests.test_formats import HEADER, criteo_rows

runner = CliRunner()
FIX = Path(__file__).parent / "data" / "import"


def invoke(*args):
    return runner.invoke(app, ["data", "import", *map(str, args)])


def ok(result):
    assert result.exit_code == 0, result.output
    return result


def one_line_error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in result.output, err
    return err


def same_dataset(a, b) -> None:
    da, db = load_dataset(a), load_dataset(b)
    assert da.sha256 == db.sha256
    assert [f.to_json() for f in da.fields] == [f.to_json() for f in db.fields]
    assert da.meta["source"]["format"] == db.meta["source"]["format"]
    assert da.meta["source"]["options"] == db.meta["source"]["options"]


def running(result) -> str:
    """The command the import printed as the one it ran."""
    m = re.search(r"running: (gmp data import .*)$", result.stdout, flags=re.M)
    assert m, result.output
    return m.group(1)


# ---------------------------------------------------------------- sample files, one per format
def write_criteo(p):
    p.write_text("\n".join("\t".join(r) for r in criteo_rows(40)) + "\n")


def write_header_csv(p, sep=","):
    """A csv whose label is named 'click'; 'age' has many integer values, 'price' is fractional, 'code' has few."""
    rng = np.random.default_rng(3)
    lines = [sep.join(["click", "city", "age", "price", "code"])]
    for i in range(60):
        lines.append(sep.join([str(int(rng.random() < 0.3)), ["paris", "rome", "oslo"][i % 3],
                               str(int(rng.integers(18, 90))), f"{rng.random() * 10:.2f}", str(i % 3)]))
    p.write_text("\n".join(lines) + "\n")


def write_unnamed_label_tsv(p):
    """Tab-separated; the label is the only 0/1 column and has no label-like name."""
    rng = np.random.default_rng(4)
    lines = ["user\toutcome\tscore"]
    for i in range(50):
        lines.append(f"u{i % 7}\t{int(rng.random() < 0.5)}\t{rng.normal():.3f}")
    p.write_text("\n".join(lines) + "\n")


def write_ratings_csv(p):
    lines = ["user_id,item_id,rating"] + [f"{i % 9},{i % 13},{1 + i % 5}" for i in range(45)]
    p.write_text("\n".join(lines) + "\n")


def write_parquet(p):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    n = 70
    pq.write_table(pa.table({"city": [["paris", "rome", None][i % 3] for i in range(n)],
                             "y": rng.integers(0, 2, n).astype(np.int64),
                             "score": rng.normal(size=n), "slot": [i % 4 for i in range(n)]}), p)


def libfm(p):
    p.write_text("".join(f"{i % 2} {i % 7}:1 {100 + i % 5}:1\n" for i in range(30)))


CASES = {
    # name: (file name or fixture, writer or None, the explicit command's words after 'import')
    "criteo": ("train.txt", write_criteo, ["criteo", "{p}"]),
    "avazu": (FIX / "avazu_small.csv", None, ["avazu", "{p}"]),
    "libsvm": (FIX / "small.libsvm", None, ["libfm", "{p}"]),
    "libfm": ("x.fm.txt", libfm, ["libfm", "{p}"]),
    "libffm": (FIX / "small.libffm", None, ["libffm", "{p}"]),
    "movielens-classic-dir": (FIX / "ml_classic", None, ["movielens", "{p}"]),
    "movielens-classic-u.data": (FIX / "ml_classic" / "u.data", None, ["movielens", "{p}"]),
    "movielens-recbole-dir": (FIX / "ml_atomic", None, ["movielens", "{p}"]),
    "movielens-recbole-inter": (FIX / "ml_atomic" / "ml.inter", None, ["movielens", "{p}"]),
    "csv-named-label": ("t.csv", write_header_csv, ["csv", "{p}", "--label", "click", "--dense", "age,price"]),
    "csv-semicolon": ("t.txt", lambda p: write_header_csv(p, ";"),
                      ["csv", "{p}", "--label", "click", "--dense", "age,price"]),
    "tsv-0/1-label": ("t.tsv", write_unnamed_label_tsv, ["csv", "{p}", "--label", "outcome", "--dense", "score"]),
    "csv-star-ratings": ("r.csv", write_ratings_csv, ["csv", "{p}", "--label", "rating", "--label-threshold", "4"]),
    "parquet": ("t.parquet", write_parquet, ["parquet", "{p}", "--label", "y", "--dense", "score"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_no_format_no_options_gives_the_explicit_commands_dataset(tmp_path, name):
    where, write, explicit = CASES[name]
    p = where if write is None else tmp_path / where
    if write is not None:
        write(p)
    auto = ok(invoke(p, "--out", tmp_path / "auto"))
    ok(invoke(*[w.format(p=p) for w in explicit], "--out", tmp_path / "explicit"))
    same_dataset(tmp_path / "auto", tmp_path / "explicit")
    # the printed command is the explicit one (the delimiter is recognised, so it is named only when given)
    printed = shlex.split(running(auto))[3:]
    assert printed == [w.format(p=p) for w in explicit] + ["--out", str(tmp_path / "auto")]


def test_the_printed_command_runs_as_printed(tmp_path):
    p = tmp_path / "t.csv"
    write_header_csv(p)
    cmd = running(ok(invoke(p, "--out", tmp_path / "a", "--min-count", "2", "--test-fraction", "0.2")))
    assert cmd.endswith(f"--min-count 2 --test-fraction 0.2 --out {tmp_path / 'a'}"), cmd
    args = shlex.split(cmd)[1:]
    args[args.index(str(tmp_path / "a"))] = str(tmp_path / "b")
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and "running:" not in res.stdout, res.output  # explicit: nothing to recognise
    same_dataset(tmp_path / "a", tmp_path / "b")


# ---------------------------------------------------------------- --label needed, and only it
def write_two_flags_csv(p):
    lines = ["a,b,city"] + [f"{i % 2},{(i // 2) % 2},c{i % 5}" for i in range(40)]
    p.write_text("\n".join(lines) + "\n")


def test_two_binary_columns_need_only_label(tmp_path):
    p = tmp_path / "t.csv"
    write_two_flags_csv(p)
    err = one_line_error(invoke(p, "--out", tmp_path / "o"))
    assert "which column is the label? 2 columns hold only 0 and 1 (a, b)" in err, err
    assert err.endswith(f"Run: gmp data import csv {p} --label a --out {tmp_path / 'o'}"), err
    ok(invoke(p, "--label", "b", "--out", tmp_path / "auto"))
    ok(invoke("csv", p, "--label", "b", "--out", tmp_path / "explicit"))
    same_dataset(tmp_path / "auto", tmp_path / "explicit")
    assert [f.name for f in load_dataset(tmp_path / "auto").fields] == ["a", "city"]


def test_parquet_without_a_label_candidate_says_so(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"u": ["x", "y", "z", "x"], "v": [3, 4, 5, 3]}), tmp_path / "t.parquet")
    err = one_line_error(invoke(tmp_path / "t.parquet", "--out", tmp_path / "o"))
    assert "none is named label, click, target, y or rating" in err and "--label LABEL_COLUMN" in err, err
    assert "csv import needs --label" not in err


def _truncated(p):
    write_parquet(p.with_suffix(".ok"))
    p.write_bytes(p.with_suffix(".ok").read_bytes()[:400])


@pytest.mark.parametrize("fmt, make, says", [
    ([], _truncated, "not a readable Parquet file (Parquet magic bytes not found"),
    (["parquet"], _truncated, "not a readable Parquet file (Parquet magic bytes not found"),
    ([], lambda p: p.write_bytes(b"PAR1 and then no Parquet at all"), "not a readable Parquet file"),
    (["parquet"], lambda p: p.write_bytes(b"PAR1 and then no Parquet at all"), "not a readable Parquet file"),
    # too short to be recognised as Parquet: only the named format applies
    (["parquet"], lambda p: p.write_bytes(b"PAR"), "not a readable Parquet file"),
    (["parquet"], lambda p: p.write_bytes(b""), "not a readable Parquet file"),
])
def test_an_unreadable_parquet_file_gets_the_parquet_error_not_a_label_question(tmp_path, fmt, make, says):
    """A truncated or corrupt Parquet file, recognised or named, said 'csv import needs --label COLUMN'."""
    p = tmp_path / "t.parquet"
    make(p)
    err = one_line_error(invoke(*fmt, p, "--out", tmp_path / "o"))
    assert says in err and err == one_line_error(invoke(*fmt, p, "--label", "y", "--out", tmp_path / "o")), err
    assert "csv import" not in err


@pytest.mark.parametrize("fmt, make, says", [
    ("csv", lambda p: p.write_text(""), "the input is empty (no header line)"),
    ("csv", lambda p: p.write_text("\n \n"), "the input is empty (no header line)"),
    ("csv", lambda p: p.mkdir(), "is a directory"),
    ("parquet", lambda p: p.mkdir(), "is a directory"),
])
def test_an_input_without_columns_gets_the_importers_error_not_a_label_question(tmp_path, fmt, make, says):
    p = tmp_path / "t.in"
    make(p)
    err = one_line_error(invoke(fmt, p, "--out", tmp_path / "o"))
    assert says in err and "needs --label" not in err, err


# ---------------------------------------------------------------- text labels
@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_text_label_lists_its_values_and_label_positive(tmp_path, kind):
    labels = [">50K", "<=50K", "<=50K", ">50K", "<=50K"] * 6
    ages = [str(20 + 3 * i) for i in range(30)]
    if kind == "csv":
        p = tmp_path / "adult.csv"
        p.write_text("age,work,income\n" + "".join(f"{a},w{i % 4}, {y}\n" for i, (a, y) in enumerate(zip(ages, labels))))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        p = tmp_path / "adult.parquet"
        pq.write_table(pa.table({"age": [int(a) for a in ages], "work": [f"w{i % 4}" for i in range(30)],
                                 "income": labels}), p)
    err = one_line_error(invoke(p, "--out", tmp_path / "o"))
    assert "label column 'income' is not a number: '>50K'" in err, err
    assert "the values in its first 30 rows are '<=50K', '>50K'" in err, err
    assert "--max-bad-lines" not in err
    cmd = re.search(r"Run: (gmp data import .*)$", err).group(1)
    assert f"--label income --label-positive '>50K' --dense age --out {tmp_path / 'o'}" in cmd, cmd
    res = ok(runner.invoke(app, shlex.split(cmd)[1:] + ["--test-fraction", "0"]))
    assert "running:" not in res.stdout
    np.testing.assert_array_equal(np.asarray(load_dataset(tmp_path / "o").labels), [y == ">50K" for y in labels])


# ---------------------------------------------------------------- a FORMAT the file contradicts
def criteo_csv(p, n=40):
    p.write_text("\n".join([",".join(HEADER)] + [",".join(r) for r in criteo_rows(n)]) + "\n")


@pytest.mark.parametrize("fmt, make, says, right", [
    ("csv", libfm, "looks like libfm/libsvm lines", "gmp data import libfm {p} --out {o}"),
    ("libffm", libfm, "looks like libfm/libsvm lines", "gmp data import libfm {p} --out {o}"),
    ("avazu", criteo_csv, "looks like a comma-separated file with 40 columns",
     "gmp data import csv {p} --label label --dense I1..I13 --out {o}"),
    ("criteo", criteo_csv, "looks like a comma-separated file with 40 columns",
     "gmp data import csv {p} --label label --dense I1..I13 --out {o}"),
    ("parquet", write_criteo, "looks like Criteo TSV rows", "gmp data import criteo {p} --out {o}"),
    ("csv", write_parquet, "looks like a Parquet file", "gmp data import parquet {p} --label y --dense score --out {o}"),
    ("libfm", lambda p: p.write_text((FIX / "ml_classic" / "u.data").read_text()),
     "looks like MovieLens 'u.data' rows", "gmp data import movielens {p} --out {o}"),
])
def test_a_format_the_file_contradicts_names_the_file_and_the_command(tmp_path, fmt, make, says, right):
    p = tmp_path / "input.data"
    make(p)
    # a flag of the format given is not checked first: the file's format is what is wrong
    extra = ["--label", "x"] if fmt in ("csv", "parquet") else []
    err = one_line_error(invoke(fmt, p, "--out", tmp_path / "o", *extra))
    assert says in err and f"not {fmt} input" in err, err
    cmd = right.format(p=p, o=tmp_path / "o")
    assert err.endswith(f"Read it with: {cmd}"), err
    ok(runner.invoke(app, shlex.split(cmd)[1:]))  # and it reads the file


def test_flags_are_checked_against_the_recognised_format(tmp_path):
    p = tmp_path / "x.fm.txt"
    libfm(p)
    err = one_line_error(invoke(p, "--label", "y", "--out", tmp_path / "o"))
    assert "--label" in err and "'libfm'" in err, err


def test_headerless_csv_and_unknown_text_are_refused_with_what_to_do(tmp_path):
    p = tmp_path / "rows.csv"
    p.write_text("".join(f"{i % 2},{i},{i * 7}\n" for i in range(20)))
    err = one_line_error(invoke(p, "--out", tmp_path / "o"))
    assert "no header line" in err and "add a first line naming the columns" in err, err
    q = tmp_path / "notes.txt"
    q.write_text("hello world\nsomething else entirely here\n")
    err = one_line_error(invoke(q, "--out", tmp_path / "o"))
    assert "cannot tell its format" in err and "gmp data import FORMAT" in err, err


def test_a_lone_format_word_is_a_missing_input(tmp_path):
    err = one_line_error(invoke("criteo", "--out", tmp_path / "o"))
    assert "format 'criteo' given but no INPUT" in err, err


# ---------------------------------------------------------------- numeric columns kept categorical
def test_numeric_columns_imported_as_categorical_get_one_warning_line(tmp_path):
    p = tmp_path / "c.csv"
    criteo_csv(p, 80)
    rows = criteo_rows(80)
    res = ok(invoke("csv", p, "--label", "label", "--out", tmp_path / "o", "--json"))
    meta = json.loads(res.stdout)  # --json output stays one JSON object
    assert meta["num_dense"] == 0 and len(meta["fields"]) == 39
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, res.stderr
    distinct_i1 = len({r[1] for r in rows if r[1]})  # empty cells are the missing id, not a value
    assert warnings[0].startswith("warning: 13 numeric-looking columns imported as categorical"), warnings
    assert f"I1 ({distinct_i1:,} distinct values)" in warnings[0] and "--dense I1..I13" in warnings[0], warnings
    # the command it advises reads them as numbers, and warns no more
    res = ok(invoke("csv", p, "--label", "label", "--dense", "I1..I13", "--out", tmp_path / "d"))
    assert "warning" not in res.stderr and load_dataset(tmp_path / "d").num_dense == 13


def write_prices(p, n):
    """A csv with a label, a city and a price with about 200 distinct values (0.0 to 20.0)."""
    rng = np.random.default_rng(6)
    prices = [f"{x:.1f}" for x in rng.uniform(0, 20, n)]
    p.write_text("label,city,price\n" + "".join(f"{i % 2},c{i % 9},{x}\n" for i, x in enumerate(prices)))
    return prices


@pytest.mark.parametrize("num_rows", [1000, 3000])
def test_the_numeric_warning_under_min_count_gives_the_columns_distinct_values(tmp_path, num_rows):
    """With --min-count the warning gave the values kept, as 'distinct values' (0 for a price column whose
    ~200 values are each seen under 5 times in 1,000 rows)."""
    p = tmp_path / "t.csv"
    prices = write_prices(p, num_rows)
    res = ok(invoke("csv", p, "--label", "label", "--min-count", "5", "--out", tmp_path / "o"))
    counts = Counter(prices)
    kept = sum(c >= 5 for c in counts.values())
    if num_rows <= 2000:  # recognition read every row: the column's distinct values
        distinct = f"{len(counts):,} distinct values"
    else:
        distinct = f"{len(set(prices[:2000])):,} distinct values in the first 2,000 rows"
    warning = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert warning == [f"warning: 1 numeric-looking column imported as categorical (one id per value seen at least 5 "
                       f"times, one rare id for the others): price ({distinct}, {kept:,} kept); to read them as "
                       f"numbers pass --dense price."], res.stderr
    assert len(counts) > 150 and load_dataset(tmp_path / "o").fields[1].num_values == kept + 2
    res = ok(invoke("csv", p, "--label", "label", "--out", tmp_path / "all"))  # one id per value: all of them
    assert f"price ({len(counts):,} distinct values); to read them" in res.stderr, res.stderr


@pytest.mark.parametrize("fmt, name, write", [("csv", "t.csv", write_header_csv), ("parquet", "t.parquet", write_parquet)])
def test_an_explicit_format_without_label_takes_the_recognised_columns(tmp_path, fmt, name, write):
    """'gmp data import csv FILE' on a file with a 'click' column asked for --label; parquet said 'csv import
    needs --label COLUMN'."""
    p = tmp_path / name
    write(p)
    res = ok(invoke(fmt, p, "--out", tmp_path / "a"))
    explicit = CASES["csv-named-label" if fmt == "csv" else "parquet"][2]
    assert shlex.split(running(res))[3:-2] == [w.format(p=p) for w in explicit]
    ok(invoke(*[w.format(p=p) for w in explicit], "--out", tmp_path / "b"))
    same_dataset(tmp_path / "a", tmp_path / "b")


def test_the_printed_command_keeps_the_recognised_formats_own_flags(tmp_path):
    res = ok(invoke(FIX / "ml_atomic", "--rating-threshold", "3", "--ignore", "timestamp", "--min-count", "1",
                    "--out", tmp_path / "a"))
    assert running(res) == (f"gmp data import movielens {FIX / 'ml_atomic'} --rating-threshold 3 --ignore timestamp "
                            f"--out {tmp_path / 'a'}")
    ok(invoke("movielens", FIX / "ml_atomic", "--rating-threshold", "3", "--ignore", "timestamp",
              "--out", tmp_path / "b"))
    same_dataset(tmp_path / "a", tmp_path / "b")


def test_json_output_stays_one_object_and_the_command_goes_to_stderr(tmp_path):
    p = tmp_path / "t.csv"
    write_header_csv(p)
    res = ok(invoke(p, "--out", tmp_path / "a", "--json"))
    meta = json.loads(res.stdout)
    assert meta == json.loads((tmp_path / "a" / "dataset.json").read_text())
    assert f"running: gmp data import csv {p} --label click --dense age,price --out {tmp_path / 'a'}" in res.stderr
