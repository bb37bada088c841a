"""Issue 37: distinct-value growth of the synthetic generator, the criteo-kaggle preset at Criteo's
vocabulary, and the curves across nested windows of ``gmp data stats``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gmp.datasets.stats import StatsOptions, distinct_growth, mi_growth
from gmp.datasets.synth import (
    CRITEO_KAGGLE_CARDINALITIES,
    CRITEO_KAGGLE_SAMPLES,
    SynthConfig,
    SyntheticCTR,
    preset_config,
)
from gmp.datasets.synth_fit import distinct_of_law, expected_distinct, fit_growth, rank_law
from gmp.errors import DatasetError


def _cfg(**kw):
    base = dict(cardinalities=(300, 40, 5000, 2000), num_samples=10, num_dense=0, model="entities",
                entity_counts=(3000,), entity_skew=1.0, field_entity=(0, 0, 0, -1), fidelity=1.0,
                skew=1.1, tail=0.2)
    base.update(kw)
    return SynthConfig(**base)


def test_distinct_of_a_uniform_law_by_hand():
    # 4 equally likely values, 2 draws: each value is missed with e^(-2/4) (Poisson form) -> 4 (1 - e^-0.5)
    p, mult = rank_law(4, 1.3, 1.0)
    assert distinct_of_law(p, mult, 2) == pytest.approx(4 * (1 - math.exp(-0.5)), rel=1e-12)
    # one value with all the mass: after any draw, one distinct value (up to e^-N)
    p, mult = rank_law(1, 1.0, 0.0)
    assert distinct_of_law(p, mult, 50) == pytest.approx(1.0)


def test_binned_law_matches_the_exact_sum():
    n, a, t = 60_000, 1.1, 0.3
    p, mult = rank_law(n, a, t)
    assert mult.sum() == n and float(np.sum(p * mult)) == pytest.approx(1.0, abs=1e-12)
    exact = np.arange(1, n + 1, dtype=np.float64) ** -a
    exact = (1 - t) * exact / exact.sum() + t / n
    for draws in (1_000, 1e6):
        assert distinct_of_law(p, mult, draws) == pytest.approx(float(np.sum(-np.expm1(-draws * exact))), rel=1e-6)


def test_expected_distinct_agrees_with_the_generator():
    # independent of the formula: count the distinct values the kernel actually draws
    cfg = _cfg(entity_tail=0.05, field_tails=(0.0, 0.0, 0.1, 0.2), field_fresh=(0.0, 0.3, 0.2, 0.0),
               segments=4, coherence=0.5, field_skews=(1.5, 1.2, 1.1, 0.9))
    ids = SyntheticCTR(cfg, calibrate=False).generate(0, 20_000).ids
    for n in (1_000, 20_000):
        got = [np.unique(ids[:n, f]).size for f in range(4)]
        want = [expected_distinct(cfg, f, n) for f in range(4)]
        assert got == pytest.approx(want, rel=0.06), (n, got, want)


def test_fresh_attribute_draws_are_uniform_and_independent_of_the_entity():
    cfg = _cfg(field_fresh=(0.0, 1.0, 0.0, 0.0))
    ids = SyntheticCTR(cfg, calibrate=False).generate(0, 40_000).ids[:, 1] - 300
    counts = np.bincount(ids, minlength=40)
    assert counts.min() > 850 and counts.max() < 1150  # 1,000 expected per value (sd ~31)
    # and the id-like field is unaffected by another field's fresh share: same bytes as without it
    base = SyntheticCTR(_cfg(), calibrate=False).generate(0, 2_000).ids
    fresh = SyntheticCTR(cfg, calibrate=False).generate(0, 2_000).ids
    assert np.array_equal(base[:, 0], fresh[:, 0])


def test_default_preset_reaches_criteo_vocabulary_at_full_size():
    cfg = preset_config("criteo-kaggle", num_samples=CRITEO_KAGGLE_SAMPLES)
    full = np.array([expected_distinct(cfg, f, CRITEO_KAGGLE_SAMPLES) for f in range(cfg.num_fields)])
    cards = np.array(CRITEO_KAGGLE_CARDINALITIES)
    assert cards.sum() == 33_762_577
    assert np.all(full >= 0.8 * cards) and np.all(full <= cards)
    assert 0.8 * cards.sum() <= full.sum() <= cards.sum()
    # the issue-13 model kept under its name stays at its 200,000-entity ceiling in C3
    old = preset_config("criteo-kaggle-entity", num_samples=CRITEO_KAGGLE_SAMPLES)
    assert expected_distinct(old, 2, CRITEO_KAGGLE_SAMPLES) <= 200_000


def test_fit_growth_recovers_a_fresh_share():
    truth = _cfg(field_fresh=(0.0, 0.0, 0.25, 0.0))
    wins = (100, 1_000, 10_000)
    curve = np.array([[expected_distinct(truth, f, w) for f in range(4)] for w in wins])
    full = [expected_distinct(truth, f, 1e6) for f in range(4)]
    got = fit_growth(_cfg(), wins, curve, 1_000_000, full)
    assert got.field_fresh[2] == pytest.approx(0.25, abs=0.01)


def test_fresh_is_refused_where_every_field_has_its_own():
    with pytest.raises(DatasetError, match="`fresh` .* criteo-kaggle-entity"):
        preset_config("criteo-kaggle", num_samples=10, fresh=0.3)
    with pytest.raises(DatasetError, match="field_fresh has 2 entries for 4 fields"):
        _cfg(field_fresh=(0.1, 0.2))


def test_distinct_and_mi_growth_by_hand():
    vals = np.array([[0, 5], [0, 6], [1, 5], [2, 7]])
    assert distinct_growth(vals, (2, 4)).tolist() == [[1, 2], [3, 3]]
    # a column copied: 2 values in the largest window -> kept in every window, also where it is constant
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 2000)
    a[:50] = 0
    fields, curve = mi_growth(np.stack([a, a, rng.integers(0, 600, 2000)], axis=1), ["A", "B", "C"], (50, 2000))
    assert fields == ("A", "B")  # C has > 500 values in 2,000 rows
    assert math.isnan(curve[0]) and curve[1] == pytest.approx(1.0, abs=0.02)


def test_stats_windows_must_increase():
    with pytest.raises(DatasetError, match="windows must be one or more increasing"):
        StatsOptions(windows=(500, 100))


def test_min_count_cuts_as_import_does(tmp_path):
    from gmp.datasets.format import load_dataset
    from gmp.datasets.synth import synthesize

    cfg = preset_config("tiny", num_samples=3000, seed=4)
    synthesize(cfg, tmp_path / "all")
    synthesize(cfg, tmp_path / "cut", min_count=3, chunk_samples=700)
    full, cut = load_dataset(tmp_path / "all"), load_dataset(tmp_path / "cut")
    ids = np.asarray(full.indices).reshape(3000, -1)
    new = np.asarray(cut.indices).reshape(3000, -1)
    assert np.array_equal(np.asarray(full.labels), np.asarray(cut.labels))
    for f, (fa, fc) in enumerate(zip(full.categorical_fields, cut.categorical_fields)):
        vals, counts = np.unique(ids[:, f], return_counts=True)
        kept = vals[counts >= 3]
        assert fc.num_values == kept.size + 1 and fc.rare_id == fc.offset
        count_of = dict(zip(vals.tolist(), counts.tolist()))
        rare = np.array([count_of[v] < 3 for v in ids[:, f]])
        assert np.all(new[rare, f] == fc.rare_id)
        # kept values: 1, 2, ... after the rare id, in the order of their old ids
        assert np.array_equal(new[~rare, f], fc.offset + 1 + np.searchsorted(kept, ids[~rare, f]))
    assert cut.num_embeddings == sum(f.num_values for f in cut.categorical_fields)
    assert cut.meta["synth"]["min_count"] == 3 and "min_count" not in full.meta["synth"]
    with pytest.raises(DatasetError, match="`min_count` must be an integer >= 1, got 0"):
        synthesize(cfg, tmp_path / "bad", min_count=0)


def test_a_cut_dataset_has_no_next_day(tmp_path):
    from gmp.datasets.synth import synthesize
    from gmp.datasets.synth_continue import continue_synth

    synthesize(preset_config("tiny", num_samples=500, seed=1), tmp_path / "cut", min_count=2)
    with pytest.raises(DatasetError, match="cut with `min_count`"):
        continue_synth(tmp_path / "cut", tmp_path / "next")
