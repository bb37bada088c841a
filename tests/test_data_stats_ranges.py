"""``gmp data stats`` and ``synth --like`` on extended datasets, whose fields hold several id ranges
(``gmp data synth --continue``, ``gmp data import --extend``): every id counts for its own field."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from gmp.datasets.format import FieldInfo, load_dataset, write_dataset
from gmp.datasets.stats import StatsOptions, dataset_stats, field_counts, field_values
from gmp.datasets.synth import preset_config, synthesize
from gmp.datasets.synth_continue import continue_synth

NUM_SAMPLES = 1500


@pytest.fixture(scope="module")
def day2(tmp_path_factory):
    """``tiny`` continued twice: its fields' ids are three ranges each (or fewer where nothing was new)."""
    root = tmp_path_factory.mktemp("days")
    synthesize(preset_config("tiny", num_samples=NUM_SAMPLES, seed=3), root / "d0")
    continue_synth(root / "d0", root / "d1", growth=0.05)
    continue_synth(root / "d1", root / "d2", growth=0.05)
    return load_dataset(root / "d2")


def _owner_of_ids(fields, num_embeddings):
    """Field index and local id of every global id, written out range by range (no searchsorted)."""
    owner = np.full(num_embeddings, -1, dtype=np.int64)
    local = np.full(num_embeddings, -1, dtype=np.int64)
    for i, f in enumerate(fields):
        k = 0
        for a, b in f.id_ranges:
            owner[a:b] = i
            local[a:b] = np.arange(k, k + b - a)
            k += b - a
    return owner, local


def test_the_fixture_has_fields_of_several_ranges(day2):
    assert sum(len(f.id_ranges) > 1 for f in day2.categorical_fields) >= 3


def test_every_sample_counts_once_per_single_valued_field(day2):
    """``tiny`` draws one value per field per sample, so each field has num_samples accesses."""
    stats = dataset_stats(day2, StatsOptions(mi_bootstrap=0))
    assert [f.accesses for f in stats.fields] == [day2.num_samples] * len(stats.fields)


def test_values_used_is_the_count_over_the_fields_ranges(day2):
    ids = np.asarray(day2.indices)
    used = np.zeros(day2.num_embeddings, dtype=bool)
    used[ids] = True
    expect = [int(sum(used[a:b].sum() for a, b in f.id_ranges)) for f in day2.categorical_fields]
    stats = dataset_stats(day2, StatsOptions(mi_bootstrap=0))
    assert [f.values_used for f in stats.fields] == expect
    counts = field_counts(day2)
    assert [c.size for c in counts] == [f.num_values for f in day2.categorical_fields]
    for f, c in zip(day2.categorical_fields, counts):
        assert c.tolist() == np.bincount(ids, minlength=day2.num_embeddings)[f.ids()].tolist()


def test_field_values_map_every_id_to_its_own_field(day2):
    owner, local = _owner_of_ids(day2.categorical_fields, day2.num_embeddings)
    ip, ix = np.asarray(day2.indptr), np.asarray(day2.indices)
    vals = field_values(day2)
    for s in range(day2.num_samples):
        row = ix[ip[s]:ip[s + 1]]
        expect = [-1] * len(day2.categorical_fields)
        for g in row:
            f = owner[g]
            expect[f] = local[g] if expect[f] < 0 else min(expect[f], local[g])
        assert vals[s].tolist() == expect


def test_field_values_by_hand_with_interleaved_ranges(tmp_path):
    """A: ids 0-1 and 4 (local 0, 1, 2); B: ids 2-3 (local 0, 1). A sample's A ids need not be adjacent."""
    fields = [FieldInfo("A", "categorical", 3, 0, ranges=((0, 2), (4, 5))),
              FieldInfo("B", "categorical", 2, 2, ranges=((2, 4),))]
    rows = [[1, 2, 4], [3, 4], [0, 1]]
    write_dataset(tmp_path / "d", indptr=np.cumsum([0] + [len(r) for r in rows]),
                  indices=np.array([i for r in rows for i in r], dtype=np.int64),
                  labels=np.zeros(len(rows), dtype=np.float32), dense=None, fields=fields, num_embeddings=5,
                  source={"format": "test"}, test_fraction=0.0)
    ds = load_dataset(tmp_path / "d")
    assert field_values(ds).tolist() == [[1, 0], [2, 1], [0, -1]]
    assert [c.tolist() for c in field_counts(ds)] == [[1, 2, 2], [1, 1]]


def test_cli_stats_agrees_with_info(day2):
    from cli.main import app

    runner = CliRunner()
    res = runner.invoke(app, ["data", "stats", str(day2.path), "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.output)
    res = runner.invoke(app, ["data", "info", str(day2.path), "--json"])
    assert res.exit_code == 0, res.output
    info = [f for f in json.loads(res.output)["fields"] if f["kind"] != "dense"]
    assert [f["values_used"] for f in stats["fields"]] == [f["num_active"] for f in info]
    assert {f["accesses"] for f in stats["fields"]} == {day2.num_samples}


def test_like_fits_one_field_per_field_with_the_values_it_uses(day2):
    """``synth --like`` sizes each synthetic field by the values the dataset uses in that field."""
    from gmp.datasets.synth_fit import like_config

    ids = np.asarray(day2.indices)
    used = np.zeros(day2.num_embeddings, dtype=bool)
    used[ids] = True
    expect = tuple(int(sum(used[a:b].sum() for a, b in f.id_ranges)) for f in day2.categorical_fields)
    fit = like_config(day2, num_samples=500, skew_rounds=0)
    assert fit.config.cardinalities == expect
