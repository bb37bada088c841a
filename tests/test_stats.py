"""Tests of gmp.datasets.stats (``gmp data stats``) on tiny datasets with answers computed by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gmp.datasets.format import FieldInfo, load_dataset, write_dataset
from gmp.datasets.stats import (
    StatsOptions,
    batch_reuse,
    compare_stats,
    cooccurrence_clustering,
    dataset_stats,
    field_values,
    mutual_information,
    plugin_mi,
    top_share,
    zipf_exponent,
)
from gmp.errors import DatasetError


def _write(path, rows, cards, names=None):
    """A dataset of categorical fields with the given cardinalities; rows hold global ids."""
    offsets = np.concatenate([[0], np.cumsum(cards)[:-1]])
    names = names or [f"F{i}" for i in range(len(cards))]
    fields = [FieldInfo(n, "categorical", int(c), int(o)) for n, c, o in zip(names, cards, offsets)]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.array([i for r in rows for i in sorted(r)], dtype=np.int64)
    write_dataset(path, indptr=indptr, indices=indices, labels=np.zeros(len(rows), dtype=np.float32), dense=None,
                  fields=fields, num_embeddings=int(sum(cards)), source={"format": "test"}, test_fraction=0.0)
    return path


# -- per field ---------------------------------------------------------------------


def test_field_values_takes_first_id_and_marks_missing(tmp_path):
    # fields A (ids 0-2), B (ids 3-5); sample 1 has two ids of A, sample 2 none of B
    path = _write(tmp_path / "d", [[0, 4], [1, 2, 3], [2]], [3, 3])
    vals = field_values(load_dataset(path))
    assert vals.tolist() == [[0, 1], [1, 0], [2, -1]]


def test_zipf_exponent_recovers_a_power_law():
    r = np.arange(1, 301)
    for a in (0.7, 1.0, 1.5):
        counts = np.round(1e6 * r ** -a)
        assert zipf_exponent(counts) == pytest.approx(a, abs=0.03)
    assert math.isnan(zipf_exponent(np.array([10, 10])))  # too few ranks


def test_top_share_by_hand():
    counts = np.array([100] + [1] * 99 + [0] * 50)  # 100 used values: the top 1% is one value
    assert top_share(counts) == pytest.approx(100 / 199)


# -- mutual information -------------------------------------------------------------


def test_plugin_mi_by_hand():
    a = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    c = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    assert plugin_mi(a, a) == pytest.approx(1.0)      # a copy of a fair bit: H = 1 bit
    assert plugin_mi(a, c) == pytest.approx(0.0)      # every (a, c) cell 1/8 = 1/2 * 1/4
    # x = y with P = (1/2, 1/4, 1/4): I = H(X) = 1.5 bits
    x = np.array([0, 0, 1, 2])
    assert plugin_mi(x, x) == pytest.approx(1.5)


def test_mutual_information_above_control():
    i = np.arange(1000)
    a = (i // 4) % 2
    values = np.stack([a, a, i % 4, np.zeros_like(i), i % 600], axis=1)  # A, copy of A, C, constant, 600 values
    mi = mutual_information(values, ["A", "B", "C", "K", "W"], num_bootstrap=20)
    assert mi.fields == ("A", "B", "C")  # constant and 600-valued fields dropped
    # raw: I(A;B) = 1 bit, I(A;C) = I(B;C) = 0 exactly (A, C independent on this table)
    assert mi.raw_mean_bits == pytest.approx(1 / 3)
    # the control's plug-in bias is about (|X|-1)(|Y|-1) / (2 n ln 2): 0.0007 and 0.0022 here
    assert mi.matrix[0, 1] == pytest.approx(1.0 - 1 / (2000 * math.log(2)), abs=0.003)
    assert mi.matrix[0, 2] == pytest.approx(-3 / (2000 * math.log(2)), abs=0.003)
    assert mi.mean_bits == pytest.approx(1 / 3, abs=0.005)
    assert np.isnan(mi.matrix[3]).all() and np.isnan(mi.matrix[:, 4]).all()
    assert 0 < mi.bootstrap_sd < 0.05
    # same seed, same numbers
    again = mutual_information(values, ["A", "B", "C", "K", "W"], num_bootstrap=20)
    assert again.bootstrap_sd == mi.bootstrap_sd and np.array_equal(again.matrix, mi.matrix, equal_nan=True)


def test_mutual_information_of_independent_fields_is_near_zero():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 20, size=(1000, 4))
    mi = mutual_information(values, list("abcd"), num_bootstrap=0)
    assert abs(mi.mean_bits) < 0.02 and math.isnan(mi.bootstrap_sd)


# -- clustering and reuse ----------------------------------------------------------


def test_clustering_two_triangles_and_bipartite():
    # 3 fields, samples (0,0,0) and (1,1,1): the co-occurrence graph is two triangles
    tri = np.array([[0, 0, 0], [1, 1, 1]] * 5)
    assert cooccurrence_clustering(tri, num_wedges=500).clustering == 1.0
    # 2 fields: edges only join the two fields, the graph is bipartite, no triangles
    rng = np.random.default_rng(0)
    two = rng.integers(0, 5, size=(100, 2))
    assert cooccurrence_clustering(two, num_wedges=500).clustering == 0.0


ROWS = [[0, 3], [1, 3], [0, 4], [2, 4], [0, 3], [1, 5]]


def test_batch_reuse_by_hand():
    indptr = np.arange(0, 13, 2)
    indices = np.array([i for r in ROWS for i in r])
    # batches of 2: {0,1,3}, {0,2,4}, {0,1,3,5}: reuse 1/3 then 1/4
    assert batch_reuse(indptr, indices, 2) == pytest.approx((1 / 3 + 1 / 4) / 2)
    # order 0,4,1,5,2,3: {0,3}, {1,3,5}, {0,2,4}: 1/3 then 0
    assert batch_reuse(indptr, indices, 2, order=np.array([0, 4, 1, 5, 2, 3])) == pytest.approx(1 / 6)
    assert batch_reuse(indptr, indices, 2, num_batches=1) == pytest.approx(1 / 3)
    assert math.isnan(batch_reuse(indptr, indices, 4))  # one full batch only


def test_dataset_stats_and_compare(tmp_path):
    path = _write(tmp_path / "d", ROWS, [3, 3], ["A", "B"])
    s = dataset_stats(load_dataset(path), StatsOptions(batch_size=2, mi_bootstrap=5))
    assert [f.values_used for f in s.fields] == [3, 3]
    assert [f.accesses for f in s.fields] == [6, 6]
    assert s.reuse.file_order == pytest.approx(7 / 24) and s.reuse.num_batches == 2
    # A = (0,1,0,2,0,1), B = (0,0,1,1,0,2): joint counts by hand
    a = np.array([0, 1, 0, 2, 0, 1])
    b = np.array([0, 0, 1, 1, 0, 2])
    assert s.mi.raw_mean_bits == pytest.approx(plugin_mi(a, b))
    js = s.to_json()
    assert js["format"] == "gmp.data-stats" and js["schema_version"] == 1
    json.dumps(js, allow_nan=False)  # plain JSON (an undefined number is null)
    rows = {r.name: r for r in compare_stats(s, s)}
    assert rows["MI above control, mean bits"].ratio == pytest.approx(1.0)


def test_options_are_validated():
    with pytest.raises(DatasetError, match="batch_size must be an integer >= 1, got 0"):
        StatsOptions(batch_size=0)


def test_cli_stats(tmp_path):
    from cli.main import app

    path = _write(tmp_path / "d", ROWS, [3, 3], ["A", "B"])
    runner = CliRunner()
    res = runner.invoke(app, ["data", "stats", str(path), "--batch-size", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["reuse"]["file_order"] == pytest.approx(7 / 24)
    res = runner.invoke(app, ["data", "stats", str(path), "--batch-size", "2", "--compare", str(path)])
    assert res.exit_code == 0 and "MI above control" in res.output
    res = runner.invoke(app, ["data", "stats", str(path), "--batch-size", "100", "--json"])  # > 6 samples
    assert res.exit_code == 0, res.output

    def refuse(name):
        raise AssertionError(f"{name} in the JSON output")

    assert json.loads(res.stdout, parse_constant=refuse)["reuse"]["file_order"] is None
    res = runner.invoke(app, ["data", "stats", str(path), "--batch-size", "0"])
    assert res.exit_code == 2 and "batch_size must be an integer >= 1" in res.output


def test_cli_stats_windows(tmp_path):
    from cli.main import app

    path = _write(tmp_path / "d", ROWS, [3, 3], ["A", "B"])
    runner = CliRunner()
    res = runner.invoke(app, ["data", "stats", str(path), "--windows", "2,4,100", "--json"])
    assert res.exit_code == 0, res.output
    growth = json.loads(res.stdout)["growth"]
    # A's values 0, 1, 0, 2 and B's 0, 0, 1, 1 (ids 3, 3, 4, 4): 2 and 1 distinct in the first 2 samples,
    # 3 and 2 in the first 4; window 100 > the 6 samples is left out, and said so
    assert growth["windows"] == [2, 4] and growth["distinct"] == [[2, 1], [3, 2]]
    assert growth["dropped_windows"] == [100]
    assert res.stderr == f"window 100 left out: {path} has 6 samples; the curve holds 2, 4.\n"
    res = runner.invoke(app, ["data", "stats", str(path), "--windows", "2,4,100"])
    assert res.exit_code == 0 and f"window 100 left out: {path} has 6 samples" in res.stdout
    # only windows above the size: refused (the curve asked for cannot be drawn)
    res = runner.invoke(app, ["data", "stats", str(path), "--windows", "50,100", "--json"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "no window of --windows 50,100 fits" in res.stderr
    assert "has 6 samples; give windows of at most 6 samples" in res.stderr
    # the default windows on a small dataset: the report, and a line saying why there is no curve
    res = runner.invoke(app, ["data", "stats", str(path)])
    assert res.exit_code == 0
    assert f"windows 100, 200, 500, 1,000 left out: {path} has 6 samples; no window is left" in res.stdout
    res = runner.invoke(app, ["data", "stats", str(path), "--windows", "2,4", "--compare", str(path)])
    assert res.exit_code == 0 and "first 4 (fixed fields)" in res.output and "distinct values, first 2" in res.output
    res = runner.invoke(app, ["data", "stats", str(path), "--windows", "4,2"])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "windows must be one or more increasing" in res.output
    res = runner.invoke(app, ["data", "stats", str(path), "--windows", "a,b"])
    assert res.exit_code == 2 and "comma-separated" in res.output


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_mi_invariant_under_relabelling_values_and_fields(seed):
    rng = np.random.default_rng(seed)
    n = 300
    base = rng.integers(0, 6, n)
    values = np.stack([base, (base + rng.integers(0, 2, n)) % 6, rng.integers(0, 4, n)], axis=1)
    mi = mutual_information(values, ["a", "b", "c"], num_bootstrap=0)
    # relabel every value by a random injective map: the plug-in MI cannot change
    relabelled = np.stack([rng.permutation(50)[values[:, j]] for j in range(3)], axis=1)
    again = mutual_information(relabelled, ["a", "b", "c"], num_bootstrap=0)
    assert again.raw_mean_bits == pytest.approx(mi.raw_mean_bits)
    m = mi.matrix
    assert np.allclose(m, m.T, equal_nan=True)
    # swapping two fields permutes the matrix
    swapped = mutual_information(values[:, [1, 0, 2]], ["b", "a", "c"], num_bootstrap=0)
    assert swapped.raw_mean_bits == pytest.approx(mi.raw_mean_bits)
