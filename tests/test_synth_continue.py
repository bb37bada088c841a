"""``gmp data synth --continue``: the next day of a synthetic dataset (issue 18)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.format import load_dataset
from gmp.datasets.synth import SyntheticCTR, config_of, preset_config, synthesize
from gmp.datasets.synth_continue import IDS_FILE, continue_synth, grown
from gmp.errors import DatasetError

runner = CliRunner()


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("chain")
    synthesize(preset_config("tiny", num_samples=3000, seed=4), root / "d0")
    continue_synth(root / "d0", root / "d1", growth=0.05)
    continue_synth(root / "d1", root / "d2", growth=0.05, num_samples=2000)
    return root, [load_dataset(root / f"d{i}") for i in range(3)]


def rows(ds):
    ip, ix = np.asarray(ds.indptr), np.asarray(ds.indices)
    return [sorted(ix[ip[i]:ip[i + 1]].tolist()) for i in range(ds.num_samples)]


def test_a_value_keeps_its_id(chain):
    """Regenerate day 1's samples from the generator (their stream indices) and map every value
    independently: a rank of day 0's universe has day 0's id (the first generator's permutation),
    a new rank has an id after day 0's; day 2 gives every rank day 1 gave an id to the same id."""
    root, (d0, d1, d2) = chain
    c0 = config_of(d0)
    perm0 = SyntheticCTR(c0, calibrate=False).perm
    meta = d1.meta["synth_continue"]
    c1 = grown(c0, 1, 0.05, d1.num_samples)
    assert list(c1.cardinalities) == meta["cardinalities"] and c1.cardinalities != c0.cardinalities
    gen1 = SyntheticCTR(c1)
    index = np.load(root / "d1" / "synth_index.npy")
    got = rows(d1)
    for k in range(0, d1.num_samples, 97):
        ch = gen1.generate(int(index[k]), int(index[k]) + 1)
        expect, new_ranks = [], []
        for f, (a1, n0, a0) in enumerate(zip(gen1.offset, c0.cardinalities, c0.offsets)):
            r = int(gen1.rank_of(f, ch.ids[0, f:f + 1] - a1)[0])
            if r < n0:
                expect.append(int(a0 + perm0[a0 + r]))
            else:
                new_ranks.append((f, r))
        ids = got[k]
        old = [x for x in ids if x < d0.num_embeddings]
        assert sorted(old) == sorted(expect)
        assert len(ids) - len(old) == len(new_ranks)
    with np.load(root / "d1" / IDS_FILE) as z1, np.load(root / "d2" / IDS_FILE) as z2:
        for f in range(c0.num_fields):
            m1, m2 = z1[f"field_{f}"], z2[f"field_{f}"]
            assert np.array_equal(m2[:m1.size][m1 >= 0], m1[m1 >= 0])  # day 2 keeps day 1's ids
            assert np.all(m1[:c0.cardinalities[f]] < d0.num_embeddings)
            assert np.all(m1[c0.cardinalities[f]:][m1[c0.cardinalities[f]:] >= 0] >= d0.num_embeddings)


def test_header_records_the_parent_and_the_new_ranges(chain):
    _, (d0, d1, d2) = chain
    for prev, ds in ((d0, d1), (d1, d2)):
        assert ds.meta["parent"]["sha256"] == prev.sha256
        assert ds.meta["parent"]["num_embeddings"] == prev.num_embeddings
        ranges = ds.meta["new_id_ranges"]
        assert ranges[0][0] == prev.num_embeddings and ranges[-1][1] == ds.num_embeddings
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        used = np.unique(np.asarray(ds.indices))
        assert np.array_equal(used[used >= prev.num_embeddings], np.arange(prev.num_embeddings, ds.num_embeddings))
        # the fields' ranges: the previous ones plus at most one new range each
        for fp, fn in zip(prev.categorical_fields, ds.categorical_fields):
            assert fn.id_ranges[:len(fp.id_ranges)] == fp.id_ranges and len(fn.id_ranges) - len(fp.id_ranges) <= 1
    assert d2.meta["synth_continue"]["day"] == 2 and d2.num_samples == 2000
    assert d2.meta["synth_continue"]["first_index"] == d1.meta["synth_continue"]["next_index"]


def test_communities_drift(chain):
    root, (d0, d1, d2) = chain
    hist = [np.bincount(np.load(root / f"d{i}" / "synth_community.npy"), minlength=64) / n
            for i, n in ((0, 3000), (1, 3000), (2, 2000))]
    w1 = np.exp(d1.meta["synth_continue"]["log_weights"])
    # day 1's community shares follow its weights (day 0: uniform)
    assert np.corrcoef(hist[1], w1 / w1.sum())[0, 1] > 0.8
    assert np.abs(hist[1] - hist[0]).sum() > 0.2


def test_same_seed_same_day_and_other_seed_other_day(chain, tmp_path):
    root, (_, d1, _) = chain
    again = continue_synth(root / "d0", tmp_path / "again", growth=0.05)
    other = continue_synth(root / "d0", tmp_path / "other", growth=0.05, seed=99)
    assert again["sha256"] == d1.sha256 and other["sha256"] != d1.sha256


def test_cli_continue_and_its_errors(chain, tmp_path):
    root, (_, _, d2) = chain
    res = runner.invoke(app, ["data", "synth", "--continue", str(root / "d2"), "-o", str(tmp_path / "d3"), "-n",
                              "500", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["day"] == 3 and out["parent"] == d2.sha256 and out["num_samples"] == 500
    plain = tmp_path / "plain.csv"
    plain.write_text("label,item\n1,a\n0,b\n")
    assert runner.invoke(app, ["data", "import", "csv", str(plain), "--out", str(tmp_path / "imp"), "--label",
                               "label", "--cat", "item", "--test-fraction", "0"]).exit_code == 0
    res = runner.invoke(app, ["data", "synth", "--continue", str(tmp_path / "imp"), "-o", str(tmp_path / "x")])
    assert res.exit_code == 2 and "not made by 'gmp data synth'" in res.output
    with pytest.raises(DatasetError, match="'drift' parameter"):
        continue_synth(root / "d0", tmp_path / "y", drift=-1)
    # the generator's knobs come from PREVIOUS: giving one with --continue is refused (it was ignored), and the
    # next-day knobs without --continue too
    res = runner.invoke(app, ["data", "synth", "--continue", str(root / "d2"), "-o", str(tmp_path / "z"), "--preset",
                              "tiny", "--skew", "1.3"])
    assert res.exit_code == 2 and "--preset, --skew do not apply to --continue" in res.output, res.output
    res = runner.invoke(app, ["data", "synth", "--preset", "tiny", "-n", "100", "-o", str(tmp_path / "z"),
                              "--drift", "0.9"])
    assert res.exit_code == 2 and "--growth and --drift apply to --continue (the next day" in res.output, res.output
    assert not (tmp_path / "z").exists()


def test_continue_and_extend_refuse_to_write_over_the_day_they_read(chain, tmp_path):
    # --out naming the previous day (with --overwrite) replaced it by its own child: refused before any work
    import shutil

    root, _ = chain
    prev = tmp_path / "prev"
    shutil.copytree(root / "d1", prev)
    before = (prev / "dataset.json").read_bytes()
    res = runner.invoke(app, ["data", "synth", "--continue", str(prev), "-n", "200", "-o", str(prev), "--overwrite"])
    assert res.exit_code == 2 and f"is the input {prev}" in res.output, res.output
    with pytest.raises(Exception, match="is the input"):
        continue_synth(prev, prev, num_samples=200, overwrite=True)
    src = tmp_path / "day.csv"
    src.write_text("label,a\n1,x\n0,y\n")
    plain = tmp_path / "plain"
    assert runner.invoke(app, ["data", "import", "csv", str(src), "--out", str(plain), "--label", "label", "--cat",
                               "a", "--test-fraction", "0"]).exit_code == 0
    plain_before = (plain / "dataset.json").read_bytes()
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--out", str(plain), "--label", "label", "--cat",
                              "a", "--test-fraction", "0", "--extend", str(plain), "--overwrite"])
    assert res.exit_code == 2 and f"is the input {plain}" in res.output, res.output
    assert (prev / "dataset.json").read_bytes() == before and (plain / "dataset.json").read_bytes() == plain_before
    res = runner.invoke(app, ["data", "synth", "--continue", str(prev), "-n", "200", "-o", str(tmp_path / "x"),
                              "--seed", "-3"])
    assert res.exit_code == 2 and "--seed must be an int in [0, 2^63)" in res.output and "Traceback" not in res.output


def test_a_parent_recorded_relative_to_another_directory_is_found(tmp_path, monkeypatch):
    """`--continue ds/d0 --out ds/d1` records the parent as "ds/d0", relative to where it ran: from any other
    directory --window and the lineage check said the parent (right beside d1) was missing."""
    from gmp.datasets.extend import ancestor_generations, parent_dataset
    from gmp.train.migrate import ancestor_size

    monkeypatch.chdir(tmp_path)
    synthesize(preset_config("tiny", num_samples=300, seed=1), "ds/d0")
    continue_synth("ds/d0", "ds/d1", growth=0.05)
    continue_synth("ds/d1", "ds/d2", growth=0.05)
    d1 = load_dataset(tmp_path / "ds" / "d1")
    assert d1.meta["parent"]["path"] == "ds/d0"   # what is recorded does not change (the format)
    sha0, sha1 = load_dataset(tmp_path / "ds" / "d0").sha256, d1.sha256
    (tmp_path / "elsewhere").mkdir()
    for cwd in (tmp_path / "elsewhere", tmp_path / "ds", "/"):
        monkeypatch.chdir(cwd)
        d2 = load_dataset(tmp_path / "ds" / "d2")
        assert parent_dataset(d2).sha256 == sha1
        assert ancestor_generations(d2, sha0) == 2
        # the trainer's walk to a checkpoint's dataset is the same function
        assert ancestor_size(d2, sha0, tmp_path / "ckpt") == (load_dataset(tmp_path / "ds" / "d0").num_embeddings, 2)


def test_a_parent_path_is_confirmed_by_its_sha256_not_taken_on_trust(tmp_path, monkeypatch):
    """Another dataset at the recorded relative path (here: under the current directory) is not the parent:
    the one whose sha256 was recorded, beside the child, is."""
    from gmp.datasets.extend import parent_dataset

    monkeypatch.chdir(tmp_path)
    synthesize(preset_config("tiny", num_samples=300, seed=1), "ds/d0")
    continue_synth("ds/d0", "ds/d1", growth=0.05)
    sha0 = load_dataset("ds/d0").sha256
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "run")
    synthesize(preset_config("tiny", num_samples=200, seed=2), "ds/d0")   # a decoy at the path as given
    assert parent_dataset(load_dataset(tmp_path / "ds" / "d1")).sha256 == sha0
    import shutil

    shutil.rmtree(tmp_path / "ds" / "d0")   # now only the decoy: named, not followed
    with pytest.raises(DatasetError, match=r"parent ds/d0 is not the dataset it was made from"):
        parent_dataset(load_dataset(tmp_path / "ds" / "d1"))
