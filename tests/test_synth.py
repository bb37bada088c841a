"""Tests of the synthetic CTR generator (gmp.datasets.synth, gmp data synth)."""

from __future__ import annotations

import json

import numba
import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from gmp.datasets import load_dataset
from gmp.datasets.synth import (
    CRITEO_KAGGLE_CARDINALITIES,
    SynthConfig,
    SyntheticCTR,
    config_of,
    load_community,
    planted_placement,
    preset_config,
    roc_auc,
    synthesize,
)
from gmp.errors import DatasetError
from gmp.graph import build_graph


def _zipf_tail_pmf(n: int, a: float, t: float) -> np.ndarray:
    # Written out independently of gmp's rank_pmf: P(rank g) = (1-t) (g+1)^-a / H + t / n.
    w = np.array([(g + 1.0) ** (-a) for g in range(n)])
    return (1.0 - t) * w / w.sum() + t / n


def _arrays(path):
    ds = load_dataset(path)
    return ds, [np.asarray(x) for x in (ds.indptr, ds.indices, ds.labels, ds.dense)]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "tiny"
    synthesize(preset_config("tiny", num_samples=20_000, seed=3), out, chunk_samples=4096)
    return out


# -- format ---------------------------------------------------------------------


def test_tiny_dataset_layout(tiny_dir):
    ds, (indptr, indices, labels, dense) = _arrays(tiny_dir)
    cfg = config_of(ds)
    assert ds.num_samples == 20_000 and ds.num_dense == 13
    assert ds.num_embeddings == sum(cfg.cardinalities) == 102_365
    assert [f.name for f in ds.fields[:13]] == [f"I{j + 1}" for j in range(13)]
    cats = ds.categorical_fields
    assert [f.num_values for f in cats] == [3, 12, 50, 300, 2_000, 10_000, 30_000, 60_000]
    assert all(f.missing_id is None and f.rare_id is None for f in cats)
    # One id per field, inside the field's contiguous range (hence ascending).
    assert np.array_equal(indptr, np.arange(0, 8 * 20_000 + 1, 8))
    ids = indices.reshape(-1, 8)
    for j, f in enumerate(cats):
        assert ids[:, j].min() >= f.offset and ids[:, j].max() < f.offset + f.num_values
    assert set(np.unique(labels)) <= {0.0, 1.0}
    assert np.isfinite(dense).all() and dense.min() >= 0.0
    assert ds.num_test == 2_000
    assert cfg.local_fields == (False,) * 4 + (True,) * 4
    ds.verify_hash()


def test_criteo_preset_cardinalities_and_scale():
    cfg = preset_config("criteo-kaggle-independent", num_samples=10)
    assert cfg.cardinalities == CRITEO_KAGGLE_CARDINALITIES
    assert cfg.num_embeddings == 33_762_577
    local = [n for n, loc in zip(cfg.field_names, cfg.local_fields) if loc]
    assert local == ["C3", "C4", "C7", "C10", "C12", "C15", "C16", "C21", "C24", "C26"]
    small = preset_config("criteo-kaggle-independent", num_samples=10, scale=0.001)
    assert small.cardinalities[2] == 10131  # 10,131,227 * 0.001
    # the floor: a field keeps min(c, 100) values -- C9 (3) and C20 (4) unchanged, C1 (1460) 1.46 -> 100
    assert small.cardinalities[8] == 3 and small.cardinalities[19] == 4 and small.cardinalities[0] == 100
    assert min(small.cardinalities) > 1
    # C7 scales to 100 values (floor) < 2 * 64 communities: demoted to a global field.
    assert not small.local_fields[6] and small.local_fields[2]


# -- determinism ----------------------------------------------------------------------


def test_same_seed_same_data_any_chunk_size(tmp_path, tiny_dir):
    cfg = preset_config("tiny", num_samples=20_000, seed=3)
    meta = synthesize(cfg, tmp_path / "b", chunk_samples=7_777)
    ref, ref_arrays = _arrays(tiny_dir)
    _, arrays = _arrays(tmp_path / "b")
    assert meta["sha256"] == ref.sha256
    for a, b in zip(arrays, ref_arrays):
        assert np.array_equal(a, b)
    assert np.array_equal(np.load(tmp_path / "b" / "synth_ctr.npy"), np.load(tiny_dir / "synth_ctr.npy"))


def test_generate_ranges_compose_and_threads_do_not_matter():
    gen = SyntheticCTR(preset_config("tiny", num_samples=10, seed=5))
    whole = gen.generate(0, 3_000)
    parts = [gen.generate(a, b) for a, b in ((0, 1), (1, 1_234), (1_234, 3_000))]
    assert np.array_equal(np.concatenate([p.ids for p in parts]), whole.ids)
    assert np.array_equal(np.concatenate([p.dense for p in parts]), whole.dense)
    assert np.array_equal(np.concatenate([p.labels for p in parts]), whole.labels)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        single = gen.generate(0, 3_000)
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(single.ids, whole.ids) and np.array_equal(single.ctr, whole.ctr)


def test_different_seed_different_data(tmp_path, tiny_dir):
    meta = synthesize(preset_config("tiny", num_samples=20_000, seed=4), tmp_path / "s4")
    _, a = _arrays(tmp_path / "s4")
    _, b = _arrays(tiny_dir)
    assert meta["sha256"] != load_dataset(tiny_dir).sha256
    assert np.mean(a[1] != b[1]) > 0.3 and not np.array_equal(a[3], b[3])


# -- skew ---------------------------------------------------------------------------------


@pytest.mark.parametrize("skew,tail", [(0.0, 0.0), (0.7, 0.0), (1.1, 0.0), (1.1, 0.3), (2.0, 0.0)])
def test_rank_distribution_matches_zipf_tail(skew, tail):
    n, num = 40, 200_000
    gen = SyntheticCTR(SynthConfig(cardinalities=(n,), num_samples=10, skew=skew, tail=tail, num_dense=0,
                                   num_communities=1))
    ranks = gen.rank_of(0, gen.generate(0, num).ids[:, 0])
    observed = np.bincount(ranks, minlength=n)
    expected = _zipf_tail_pmf(n, skew, tail) * num
    # Pearson chi-square, 39 degrees of freedom: the 99.9% quantile is 72.1.
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 72.1


def test_top1pct_share_grows_with_skew_and_matches_analytic():
    n, num = 20_000, 300_000
    shares, graph_shares = [], []
    for skew in (0.6, 1.0, 1.4):
        gen = SyntheticCTR(SynthConfig(cardinalities=(n,), num_samples=10, skew=skew, tail=0.0, num_dense=0,
                                       num_communities=1))
        ids = gen.generate(0, num).ids[:, 0]
        ranks = gen.rank_of(0, ids)
        share = float(np.mean(ranks < n // 100))  # accesses to the analytically top 1% of values
        analytic = _zipf_tail_pmf(n, skew, 0.0)[: n // 100].sum()
        assert share == pytest.approx(analytic, abs=0.006)  # ~6 binomial standard deviations
        shares.append(share)
        from gmp.graph import BipartiteGraph

        g = BipartiteGraph.from_csr(np.arange(num + 1, dtype=np.int64), ids.astype(np.int32), n)
        graph_shares.append(g.stats().top1pct_access_share)
    assert shares[0] < shares[1] < shares[2]
    assert graph_shares[0] < graph_shares[1] < graph_shares[2]


# -- locality -----------------------------------------------------------------------------


@pytest.mark.parametrize("locality", [0.0, 0.5, 0.9])
def test_locality_share_of_own_slice(locality):
    n, k, num = 5_000, 16, 60_000
    cfg = SynthConfig(cardinalities=(7, n), num_samples=10, num_communities=k, locality=locality,
                      num_dense=0, skew=1.1, tail=0.3)
    assert cfg.local_fields == (False, True)
    gen = SyntheticCTR(cfg)
    ch = gen.generate(0, num)
    own = gen.owner_community(1, ch.ids[:, 1] - n * 0 - 7)
    frac = float(np.mean(own == ch.community))
    pmf = _zipf_tail_pmf(n, 1.1, 0.3)
    p_slice = np.array([pmf[c::k].sum() for c in range(k)])  # global draw landing in slice c
    expected = locality + (1.0 - locality) * float(p_slice[ch.community].mean())
    assert frac == pytest.approx(expected, abs=0.012)
    # Global fields have no owner.
    assert (gen.owner_community(0, ch.ids[:, 0]) == -1).all()
    # Communities are uniform.
    assert np.bincount(ch.community, minlength=k).min() > num / k * 0.85


@pytest.mark.parametrize("skew", [0.8, 1.3])
def test_marginal_with_locality_is_the_mixture(skew):
    # P(g) = (1 - L) P_n(g) + (L / K) P_{s_c}(g // K) with c = g mod K, s_c = ceil((n - c) / K).
    n, k, L, t, num = 50, 4, 0.6, 0.2, 200_000
    cfg = SynthConfig(cardinalities=(n,), num_samples=10, num_communities=k, locality=L, num_dense=0,
                      skew=skew, tail=t)
    gen = SyntheticCTR(cfg)
    ranks = gen.rank_of(0, gen.generate(0, num).ids[:, 0])
    pmf = (1.0 - L) * _zipf_tail_pmf(n, skew, t)
    for c in range(k):
        s_c = -(-(n - c) // k)
        pmf[c::k] += L / k * _zipf_tail_pmf(s_c, skew, t)
    assert pmf.sum() == pytest.approx(1.0)
    observed = np.bincount(ranks, minlength=n)
    chi2 = float(((observed - pmf * num) ** 2 / (pmf * num)).sum())
    assert chi2 < 86.7  # 99.9% quantile of chi-square with 49 degrees of freedom


def test_planted_placement_beats_random(tiny_dir):
    ds = load_dataset(tiny_dir)
    pl = planted_placement(ds, 4)
    comm = np.asarray(load_community(ds))
    assert np.array_equal(pl.sample_worker, comm % 4)
    ids = np.asarray(ds.indices).reshape(-1, 8)
    local_remote = pl.embedding_primary[ids[:, 4:]] != pl.sample_worker[:, None]
    # About (1 - L) * 3/4 = 0.225 instead of 0.75 for a random placement.
    assert 0.15 < local_remote.mean() < 0.3


# -- labels -------------------------------------------------------------------------------


def test_labels_learnable(tiny_dir):
    from scipy import sparse
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    ds, (indptr, indices, labels, dense) = _arrays(tiny_dir)
    ctr = np.load(tiny_dir / "synth_ctr.npy")
    n_train = ds.num_train
    bayes = roc_auc_score(labels[n_train:], ctr[n_train:])
    assert bayes > 0.7
    assert ds.meta["synth"]["bayes_auc"] == pytest.approx(bayes, abs=1e-9)
    assert roc_auc(labels, ctr) == pytest.approx(roc_auc_score(labels, ctr), abs=1e-9)
    assert 0.2 < labels.mean() < 0.32  # calibrated towards 0.256
    x = sparse.csr_matrix((np.ones(indices.size), indices, indptr), shape=(ds.num_samples, ds.num_embeddings))
    x = sparse.hstack([x, sparse.csr_matrix(dense / 5.0)]).tocsr()
    model = LogisticRegression(C=0.1, solver="liblinear").fit(x[:n_train], labels[:n_train])
    auc = roc_auc_score(labels[n_train:], model.predict_proba(x[n_train:])[:, 1])
    assert auc > 0.6


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_samples=-5), r"`num_samples` must be an integer >= 1, got -5"),
    (dict(num_samples=0), r"`num_samples` must be an integer >= 1"),
    (dict(locality=1.5), r"`locality` must be in \[0.0, 1.0\], got 1.5"),
    (dict(locality=-0.1), r"`locality` must be in"),
    (dict(skew=-1.0), r"`skew` must be in"),
    (dict(num_communities=0), r"`num_communities` must be an integer >= 1"),
    (dict(scale=0.0), r"`scale` must be in \(0.0"),
    (dict(seed=-1), r"`seed` must be an integer >= 0"),
    (dict(test_fraction=1.0), r"`test_fraction` must be in \[0, 1\)"),
])
def test_bad_knobs(kwargs, match):
    kw = dict(num_samples=100)
    kw.update(kwargs)
    with pytest.raises(DatasetError, match=match):
        preset_config("tiny", **kw)


def test_unknown_preset():
    with pytest.raises(DatasetError, match=r"unknown preset 'avazu'; choose one of \['criteo-kaggle', 'criteo-kaggle-entity', 'criteo-kaggle-independent', 'tiny'\]"):
        preset_config("avazu", num_samples=10)


def test_bad_chunk_size(tmp_path):
    with pytest.raises(DatasetError, match="`chunk_samples` must be an integer >= 1"):
        synthesize(preset_config("tiny", num_samples=10), tmp_path / "x", chunk_samples=0)
    assert not (tmp_path / "x").exists()


# -- CLI ----------------------------------------------------------------------------------


@pytest.fixture
def data_app():
    from cli.synth import register

    app = typer.Typer()
    data = typer.Typer()
    register(data)
    app.add_typer(data, name="data")
    return app


def test_cli_synth_speaks_to_people_unless_json(tmp_path, data_app):
    res = CliRunner().invoke(data_app, ["data", "synth", "--preset", "tiny", "--samples", "2000", "--out",
                                        str(tmp_path / "h")])
    assert res.exit_code == 0, res.output
    line = res.stdout.strip()
    assert "\n" not in line and line.startswith("generated 2,000 samples (200 test)") and "Bayes AUC" in line


def test_cli_synth(tmp_path, data_app):
    out = tmp_path / "cli"
    res = CliRunner().invoke(data_app, ["data", "synth", "--preset", "tiny", "--samples", "3000", "--seed", "1",
                                        "--locality", "0.5", "--communities", "8", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["num_samples"] == 3000 and summary["num_edges"] == 24_000
    ds = load_dataset(out)
    assert ds.meta["synth"]["locality"] == 0.5 and ds.meta["synth"]["num_communities"] == 8
    assert build_graph(ds).stats().num_edges == 24_000


@pytest.mark.parametrize("args,match", [
    (["--samples", "-3"], "--samples must be an integer >= 1, got -3"),
    (["--locality", "2"], r"--locality must be in \[0.0, 1.0\], got 2.0"),
    (["--preset", "nope"], "unknown preset 'nope'"),
])
def test_cli_errors(tmp_path, data_app, args, match):
    import re

    res = CliRunner().invoke(data_app, ["data", "synth", "--preset", "tiny", *args, "--out", str(tmp_path / "e")])
    assert res.exit_code == 2
    assert re.search(match, res.output) and "Traceback" not in res.output
    assert not (tmp_path / "e").exists()


def test_main_app_has_synth():
    from cli.main import app

    res = CliRunner().invoke(app, ["data", "synth", "--help"])
    assert res.exit_code == 0 and "--locality" in res.output


# -- the independent model is bit-identical to the generator before issue 13 -----------------

# sha256 of datasets made by the generator as it was before the latent-entity model
# (commit e73e909): the independent presets must keep giving these bytes.
GOLDEN_SHA256 = {
    ("criteo-kaggle-independent", 3000, 0.001, 5):
        "46699a88635744df36c881428257754933d80103927f23d41d8d4b171e73770a",
    ("tiny", 3000, 1.0, 7): "5c3439023ab3f24da965e9ad536820e26292441429ce82b1380e13409975028f",
}


@pytest.mark.parametrize("key", sorted(GOLDEN_SHA256))
def test_independent_presets_unchanged(tmp_path, key):
    preset, n, scale, seed = key
    meta = synthesize(preset_config(preset, num_samples=n, scale=scale, seed=seed), tmp_path / "g",
                      chunk_samples=1000)
    assert meta["arrays_sha256"] == GOLDEN_SHA256[key]  # the arrays (schema 2 called it sha256)
    assert "model" not in meta["synth"]  # dataset.json of the independent model is unchanged too


# -- the latent-entity model ----------------------------------------------------------------


def _entity_cfg(**kw):
    base = dict(cardinalities=(400, 50, 6, 400, 30), num_samples=10, num_dense=0, model="entities",
                entity_counts=(400, 100), entity_skew=1.0, field_entity=(0, 0, 0, 1, -1), fidelity=1.0,
                skew=1.1, tail=0.2)
    base.update(kw)
    return SynthConfig(**base)


def test_entity_id_field_is_the_entity_and_attributes_are_functions_of_it():
    gen = SyntheticCTR(_entity_cfg())
    ch = gen.generate(0, 50_000)
    ent = ch.entity
    # field 0 has as many values as type 0 has entities: it names the entity (rank = entity rank)
    assert np.array_equal(gen.rank_of(0, ch.ids[:, 0]), ent[:, 0])
    # fields 1 and 2 (fewer values than entities): one value per entity
    for f in (1, 2):
        pairs = np.unique(np.stack([ent[:, 0], ch.ids[:, f]], axis=1), axis=0)
        assert np.unique(pairs[:, 0]).size == pairs.shape[0]
    # entity popularity: (1 - tail) Zipf(entity_skew) + tail uniform (chi-square, 399 dof, 99.9%: 489)
    pmf = _zipf_tail_pmf(400, 1.0, 0.2)
    obs = np.bincount(ent[:, 0], minlength=400)
    assert float(((obs - pmf * 50_000) ** 2 / (pmf * 50_000)).sum()) < 489.0


@pytest.mark.parametrize("fidelity", [0.0, 0.4, 0.8])
def test_fidelity_share(fidelity):
    # field 3 (400 values) names type 1's entity (100 entities) when faithful; otherwise its rank is a
    # fresh draw that matches the entity rank with probability sum_g P_field(g) P_entity(g)
    gen = SyntheticCTR(_entity_cfg(fidelity=fidelity, entity_counts=(400, 400)))
    ch = gen.generate(0, 40_000)
    same = float(np.mean(gen.rank_of(3, ch.ids[:, 3] - 456) == ch.entity[:, 1]))
    p = _zipf_tail_pmf(400, 1.1, 0.2)
    q = _zipf_tail_pmf(400, 1.0, 0.2)
    expected = fidelity + (1 - fidelity) * float((p * q).sum())
    assert same == pytest.approx(expected, abs=0.012)


def test_entity_model_makes_fields_depend_on_each_other():
    from gmp.datasets.stats import mutual_information

    def mi(**kw):
        gen = SyntheticCTR(_entity_cfg(entity_counts=(300, 100), **kw), calibrate=False)
        vals = gen.generate(0, 1000).ids - gen.offset[None, :]
        return mutual_information(vals, list("abcde"), num_bootstrap=0).mean_bits

    assert abs(mi(fidelity=0.0)) < 0.03
    assert mi(fidelity=1.0) > 0.3


def test_entity_model_determinism_and_round_trip(tmp_path):
    cfg = preset_config("criteo-kaggle", num_samples=3000, scale=0.001, seed=2)
    a = synthesize(cfg, tmp_path / "a", chunk_samples=3000)
    b = synthesize(cfg, tmp_path / "b", chunk_samples=700)
    assert a["sha256"] == b["sha256"] and a["synth"]["model"] == "entities"
    assert config_of(load_dataset(tmp_path / "a")) == cfg
    with pytest.raises(DatasetError, match="plants no partition"):
        planted_placement(load_dataset(tmp_path / "a"), 8)
    c = synthesize(preset_config("criteo-kaggle", num_samples=3000, scale=0.001, seed=3), tmp_path / "c")
    assert c["sha256"] != a["sha256"]
    gen = SyntheticCTR(cfg)
    whole = gen.generate(0, 500)
    assert np.array_equal(np.concatenate([gen.generate(0, 200).ids, gen.generate(200, 500).ids]), whole.ids)


@pytest.mark.parametrize("fresh", [0.25, 0.6])
def test_fresh_tail_of_id_like_fields(fresh):
    # field 0 (1,000 values) names type 0's entity (400 entities): with probability fresh its rank is
    # instead uniform over ranks 400..999, which no entity names; field 3 (400 values, 100 entities)
    # likewise over 100..399. Non-id-like fields (1, 2) are untouched: still one value per entity.
    gen = SyntheticCTR(_entity_cfg(cardinalities=(1000, 50, 6, 400, 30), fresh=fresh))
    ch = gen.generate(0, 40_000)
    r0 = gen.rank_of(0, ch.ids[:, 0])
    is_fresh = r0 >= 400
    assert float(is_fresh.mean()) == pytest.approx(fresh, abs=0.012)
    assert np.array_equal(r0[~is_fresh], ch.entity[~is_fresh, 0])
    # uniform over the 600 other ranks (chi-square, 599 dof, 99.9%: 715)
    obs = np.bincount(r0[is_fresh] - 400, minlength=600)
    exp = is_fresh.sum() / 600
    assert float(((obs - exp) ** 2 / exp).sum()) < 715.0
    r3 = gen.rank_of(3, ch.ids[:, 3] - 1056)
    assert float((r3 >= 100).mean()) == pytest.approx(fresh, abs=0.012)
    for f in (1, 2):
        pairs = np.unique(np.stack([ch.entity[:, 0], ch.ids[:, f]], axis=1), axis=0)
        assert np.unique(pairs[:, 0]).size == pairs.shape[0]


# sha256 of the entity preset as the issue-13 generator made it before the --fresh knob (commit
# f7c316e): fresh = 0 (the preset's value) must keep giving these bytes.
ENTITY_GOLDEN_SHA256 = {("criteo-kaggle-entity", 3000, 0.001, 5):
                        "7a7385600ce969287323f1adeb5077be80503e4126e24f68dd1e9050afb46246"}


@pytest.mark.parametrize("key", sorted(ENTITY_GOLDEN_SHA256))
def test_entity_preset_unchanged(tmp_path, key):
    preset, n, scale, seed = key
    meta = synthesize(preset_config(preset, num_samples=n, scale=scale, seed=seed), tmp_path / "g",
                      chunk_samples=1000)
    assert meta["arrays_sha256"] == ENTITY_GOLDEN_SHA256[key]


def test_fresh_zero_keeps_the_data_and_the_header(tmp_path):
    cfg = preset_config("criteo-kaggle-entity", num_samples=2000, scale=0.001, seed=1)
    a = synthesize(cfg, tmp_path / "a")
    b = synthesize(preset_config("criteo-kaggle-entity", num_samples=2000, scale=0.001, seed=1, fresh=0.0), tmp_path / "b")
    c = synthesize(preset_config("criteo-kaggle-entity", num_samples=2000, scale=0.001, seed=1, fresh=0.3), tmp_path / "c")
    assert a["sha256"] == b["sha256"] != c["sha256"]
    assert "fresh" not in a["synth"] and c["synth"]["fresh"] == 0.3
    assert config_of(load_dataset(tmp_path / "c")) == preset_config("criteo-kaggle-entity", num_samples=2000, scale=0.001,
                                                                     seed=1, fresh=0.3)


def test_entity_knob_errors():
    with pytest.raises(DatasetError, match=r"`fresh` must be in \[0.0, 1.0\], got -0.1"):
        _entity_cfg(fresh=-0.1)
    with pytest.raises(DatasetError, match=r"`fidelity` must be in \[0.0, 1.0\], got 1.5"):
        _entity_cfg(fidelity=1.5)
    with pytest.raises(DatasetError, match="field_entity needs 5 entries"):
        _entity_cfg(field_entity=(0, 0))
    with pytest.raises(DatasetError, match="has no community locality"):
        preset_config("criteo-kaggle", num_samples=10, locality=0.5)


def test_cli_like(tmp_path, data_app):
    src = tmp_path / "src"
    synthesize(_entity_cfg(num_samples=4000, entity_counts=(400, 100)), src)
    out = tmp_path / "twin"
    res = CliRunner().invoke(data_app, ["data", "synth", "--like", str(src), "--samples", "6000", "--out", str(out)])
    assert res.exit_code == 0, res.output
    ds = load_dataset(out)
    cfg = config_of(ds)
    assert ds.num_samples == 6000 and cfg.model == "entities"
    assert [f.name for f in ds.categorical_fields] == ["C1", "C2", "C3", "C4", "C5"]
    # fields 0-2 depend on each other in the source, so they become one entity type
    assert cfg.field_entity[0] == cfg.field_entity[1] == cfg.field_entity[2] >= 0
    res = CliRunner().invoke(data_app, ["data", "synth", "--preset", "tiny", "--fidelity", "0.5",
                                        "--out", str(tmp_path / "e")])
    assert res.exit_code == 2 and "--fidelity applies to the latent-entity model" in res.output


def test_synth_is_one_request_from_python_and_the_cli(tmp_path, data_app):
    """``gmp.synthesize`` and ``gmp data synth`` resolve through one spec (issue 34): the Python verb
    takes ``like`` and ``min_count`` as the command does (before it had neither) and writes the same bytes;
    a plain preset with knobs too, and a setting the request cannot use is refused the same way."""
    import gmp

    src = tmp_path / "src"
    synthesize(_entity_cfg(num_samples=3000, entity_counts=(300, 80)), src)
    for name, flags, keywords in (
            ("like", ["--like", src, "--samples", 2500, "--min-count", 2, "--fidelity", 0.7],
             dict(like=src, num_samples=2500, min_count=2, fidelity=0.7)),
            ("tiny", ["--preset", "tiny", "--samples", 1500, "--skew", 1.3, "--seed", 4],
             dict(preset="tiny", num_samples=1500, skew=1.3, seed=4))):
        res = CliRunner().invoke(data_app, ["data", "synth", *map(str, flags), "--out", str(tmp_path / f"cli-{name}")])
        assert res.exit_code == 0, res.output
        api = gmp.synthesize(tmp_path / f"api-{name}", **keywords)
        assert api.sha256 == load_dataset(tmp_path / f"cli-{name}").sha256
    assert load_dataset(tmp_path / "api-like").meta["synth"]["min_count"] == 2
    with pytest.raises(DatasetError, match="`locality` and `local_min_values` do not apply to `like`"):
        gmp.synthesize(tmp_path / "bad", like=src, locality=0.5)
    assert not (tmp_path / "bad").exists()
    res = CliRunner().invoke(data_app, ["data", "synth", "--like", str(src), "--locality", "0.5",
                                        "--out", str(tmp_path / "bad")])
    assert res.exit_code == 2 and "--locality and --local-threshold do not apply to --like" in res.output


def test_sessions_and_coherent_segments():
    # session_share 1: every sample of a block of 10 takes the block's entity of type 0
    gen = SyntheticCTR(_entity_cfg(session_length=10, session_share=(1.0, 0.0)), calibrate=False)
    ent = gen.generate(0, 1000).entity
    blocks = ent[:, 0].reshape(100, 10)
    assert (blocks == blocks[:, :1]).all() and np.unique(blocks[:, 0]).size > 20
    assert not (ent[:, 1].reshape(100, 10) == ent[:, 1].reshape(100, 10)[:, :1]).all()
    # coherence 1 with 4 segments: an entity's attributes all lie in its segment's slice of ranks
    # (rank = r * 4 + segment), so fields 1 and 2 agree on rank mod 4 in every sample
    gen = SyntheticCTR(_entity_cfg(segments=4, coherence=1.0), calibrate=False)
    ch = gen.generate(0, 5000)
    r1 = gen.rank_of(1, ch.ids[:, 1] - 400)
    r2 = gen.rank_of(2, ch.ids[:, 2] - 450)
    assert np.array_equal(r1 % 4, r2 % 4)
    gen = SyntheticCTR(_entity_cfg(segments=4, coherence=0.0), calibrate=False)
    ch = gen.generate(0, 5000)
    assert np.mean(gen.rank_of(1, ch.ids[:, 1] - 400) % 4 == gen.rank_of(2, ch.ids[:, 2] - 450) % 4) < 0.5


def test_group_fields_by_hand():
    from gmp.datasets.synth_fit import group_fields, reduce_top

    m = np.zeros((5, 5))
    m[0, 1] = m[1, 0] = 1.0
    m[0, 2] = m[2, 0] = 0.4
    m[1, 2] = m[2, 1] = 0.2   # mean MI of {0,1} with 2 = 0.3 >= 0.15: joins
    m[3, 4] = m[4, 3] = 0.1   # below the threshold: both stay independent
    assert group_fields(m, 0.15) == (0, 0, 0, -1, -1)
    assert group_fields(m, 0.5) == (0, 0, -1, -1, -1)
    v = np.array([[5], [5], [5], [7], [7], [9]])
    assert reduce_top(v, top=1).ravel().tolist() == [0, 0, 0, 1, 1, 1]


def test_cli_fresh(tmp_path, data_app):
    out = tmp_path / "f"
    res = CliRunner().invoke(data_app, ["data", "synth", "--preset", "criteo-kaggle-entity", "--samples", "1500",
                                        "--scale", "0.001", "--fresh", "0.25", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert config_of(load_dataset(out)).fresh == 0.25
    res = CliRunner().invoke(data_app, ["data", "synth", "--preset", "tiny", "--fresh", "0.2",
                                        "--out", str(tmp_path / "t")])
    assert res.exit_code == 2 and "--fresh applies to the latent-entity model" in res.output
