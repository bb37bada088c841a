"""Datasets that extend each other (``gmp data import --extend``) and the dataset schema v2 upgrade."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.format import SCHEMA_VERSION, load_dataset

runner = CliRunner()
GOLDEN = Path(__file__).parent / "data" / "dataset_v1"


def imp(tmp_path: Path, name: str, text: str, *extra: str) -> Path:
    src = tmp_path / f"{name}.csv"
    src.write_text(text)
    out = tmp_path / name
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--out", str(out), "--label", "label",
                              "--cat", "user,item", "--test-fraction", "0", *extra])
    assert res.exit_code == 0, res.output
    return out


DAY0 = "label,user,item\n1,u1,i1\n0,u2,i1\n1,u1,i2\n"
DAY1 = "label,user,item\n0,u3,i2\n1,u2,i3\n1,u3,i1\n0,u1,i3\n"


def rows(ds) -> list[list[int]]:
    ip, ix = np.asarray(ds.indptr), np.asarray(ds.indices)
    return [ix[ip[i]:ip[i + 1]].tolist() for i in range(ds.num_samples)]


def test_extend_keeps_ids_and_appends_new_values(tmp_path):
    d0 = load_dataset(imp(tmp_path, "d0", DAY0))
    # day 0: user = [missing 0, rare 1, u1 2, u2 3]; item = [missing 4, rare 5, i1 6, i2 7]
    assert rows(d0) == [[2, 6], [3, 6], [2, 7]] and d0.num_embeddings == 8
    assert d0.meta["parent"] is None and d0.meta["new_id_ranges"] is None
    d1 = load_dataset(imp(tmp_path, "d1", DAY1, "--extend", str(tmp_path / "d0")))
    # u1, u2, i1, i2 keep their ids; new u3 -> 8 (after day 0's 8 ids), new i3 -> 9; samples sorted
    assert rows(d1) == [[7, 8], [3, 9], [6, 8], [2, 9]]
    assert d1.num_embeddings == 10
    assert [f.id_ranges for f in d1.categorical_fields] == [((0, 4), (8, 9)), ((4, 8), (9, 10))]
    assert d1.meta["parent"]["sha256"] == d0.sha256 and d1.meta["parent"]["num_embeddings"] == 8
    assert d1.meta["new_id_ranges"] == [[8, 9], [9, 10]]
    assert d1.field_of_embedding().tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 0, 1]
    # a third day extends the second: every id seen so far is stable
    d2 = load_dataset(imp(tmp_path, "d2", "label,user,item\n1,u3,i3\n0,u9,i1\n1,u1,i9\n", "--extend",
                          str(tmp_path / "d1")))
    assert rows(d2) == [[8, 9], [6, 10], [2, 11]]
    assert [f.id_ranges for f in d2.categorical_fields] == [((0, 4), (8, 9), (10, 11)), ((4, 8), (9, 10), (11, 12))]


def test_extend_known_values_keep_their_id_even_when_rare(tmp_path):
    imp(tmp_path, "d0", DAY0)
    day1 = DAY1 + "0,u4,i1\n"
    d1 = load_dataset(imp(tmp_path, "d1", day1, "--extend", str(tmp_path / "d0"), "--min-count", "2"))
    # u2 and u1 are seen once today but were known: ids 3 and 2; u3 (twice) is new -> 8; u4 (once, unknown)
    # -> user's rare id 1; i3 (twice) new -> 9; i2 (once, known) -> 7
    assert rows(d1) == [[7, 8], [3, 9], [6, 8], [2, 9], [1, 6]]


def imp_sparse(tmp_path: Path, fmt: str, name: str, text: str, *extra: str):
    src = tmp_path / f"{name}.{fmt}"
    src.write_text(text)
    res = runner.invoke(app, ["data", "import", fmt, str(src), "--out", str(tmp_path / name), "--test-fraction", "0",
                              *extra])
    assert res.exit_code == 0, res.output
    return load_dataset(tmp_path / name)


def test_extend_libsvm_days_that_add_or_lack_fields(tmp_path):
    """libsvm's fields are token positions: a day with longer lines has new fields (all their ids new,
    after the old ones), a day with shorter lines lacks some (kept, with their ids). Both were refused."""
    d0 = imp_sparse(tmp_path, "libsvm", "d0", "1 3:1 5:1\n0 4:1 5:1\n")
    # f1 = [missing 0, rare 1, 3 -> 2, 4 -> 3]; f2 = [missing 4, rare 5, 5 -> 6]
    assert rows(d0) == [[2, 6], [3, 6]]
    d1 = imp_sparse(tmp_path, "libsvm", "d1", "1 3:1 5:1 7:1\n0 4:1 6:1\n", "--extend", str(tmp_path / "d0"))
    # f2's new 6 -> 7 (its ranges merge: 4..8); the new field f3 after it: [missing 8, rare 9, 7 -> 10]
    assert [(f.name, f.id_ranges) for f in d1.categorical_fields] == [("f1", ((0, 4),)), ("f2", ((4, 8),)),
                                                                      ("f3", ((8, 11),))]
    assert rows(d1) == [[2, 6, 10], [3, 7]] and d1.meta["new_id_ranges"] == [[7, 8], [8, 11]]
    d2 = imp_sparse(tmp_path, "libsvm", "d2", "1 3:1\n0 9:1\n", "--extend", str(tmp_path / "d1"))
    # only f1 today: 3 keeps 2, the new 9 -> 11; f2 and f3 keep their ids and gain none
    assert [(f.name, f.id_ranges) for f in d2.categorical_fields] == [
        ("f1", ((0, 4), (11, 12))), ("f2", ((4, 8),)), ("f3", ((8, 11),))]
    assert rows(d2) == [[2], [11]] and d2.num_embeddings == 12


@pytest.mark.parametrize("fmt, text", [("libsvm", "1 3:1 5:1\n0 4:1\n"), ("libffm", "1 0:3:1 1:5:1\n")])
def test_extend_a_dataset_that_shares_no_field_is_refused(tmp_path, fmt, text):
    """A libsvm/libffm day extending a csv dataset kept the parent's fields unused beside its own."""
    imp(tmp_path, "d0", DAY0)
    src = tmp_path / f"d1.{fmt}"
    src.write_text(text)
    res = runner.invoke(app, ["data", "import", fmt, str(src), "--out", str(tmp_path / "d1"), "--extend",
                              str(tmp_path / "d0")])
    assert res.exit_code == 2 and not (tmp_path / "d1").exists(), res.output
    names = "f1, f2" if fmt == "libsvm" else "f0, f1"
    assert res.stderr.strip() == (f"error: --extend: the previous dataset is a csv import and this input is {fmt}; "
                                  f"this input's 2 fields ({names}) share none with the previous "
                                  f"dataset's 2 fields (user, item); extend a dataset imported from the same source, "
                                  f"or import without --extend.")


def test_extend_libffm_field_becomes_multi_valued(tmp_path):
    imp_sparse(tmp_path, "libffm", "d0", "1 0:3:1 1:5:1\n0 0:4:1 1:5:1\n")
    d1 = imp_sparse(tmp_path, "libffm", "d1", "1 0:3:1 1:5:1 1:6:1\n0 0:4:1 2:6:1\n", "--extend",
                    str(tmp_path / "d0"))
    # f1 repeated on a line today: multi-valued, its ids kept (5 -> 6), 6 new -> 7; new field f2 [8, 9, 6 -> 10]
    assert [(f.name, f.kind) for f in d1.categorical_fields] == [("f0", "categorical"), ("f1", "multi"),
                                                                 ("f2", "categorical")]
    assert rows(d1) == [[2, 6, 7], [3, 10]]
    # the next day reads f1 once per line again: it stays multi-valued (as its parent's)
    d2 = imp_sparse(tmp_path, "libffm", "d2", "1 0:3:1 1:6:1\n", "--extend", str(tmp_path / "d1"))
    assert [(f.name, f.kind) for f in d2.categorical_fields][1] == ("f1", "multi") and rows(d2) == [[2, 7]]


def test_vocab_file_holds_the_kept_keys(tmp_path):
    out = imp(tmp_path, "d0", DAY0)
    with np.load(out / "vocab.npz") as z:
        assert sorted(z.files) == ["field_0", "field_1"]
        assert z["field_0"].dtype == np.uint64 and z["field_0"].size == 2  # u1, u2


def test_extend_errors(tmp_path):
    imp(tmp_path, "d0", DAY0)
    src = tmp_path / "other.csv"
    src.write_text("label,item\n1,i1\n")
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--out", str(tmp_path / "o"), "--label", "label",
                              "--cat", "item", "--test-fraction", "0", "--extend", str(tmp_path / "d0")])
    assert res.exit_code == 2 and "--extend: the previous dataset's categorical fields are" in res.output
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--out", str(tmp_path / "o"), "--label", "label",
                              "--cat", "item", "--test-fraction", "0", "--extend", str(GOLDEN)])
    assert res.exit_code == 2 and "has no vocab.npz" in res.output
    dense = tmp_path / "dense.csv"  # the same categorical fields plus a dense column the parent lacks
    dense.write_text("label,user,item,age\n1,u1,i1,3\n")
    res = runner.invoke(app, ["data", "import", "csv", str(dense), "--out", str(tmp_path / "o"), "--label", "label",
                              "--cat", "user,item", "--dense", "age", "--test-fraction", "0",
                              "--extend", str(tmp_path / "d0")])
    assert res.exit_code == 2 and "the previous dataset's dense columns are [], this input's ['age']" in res.output


def test_golden_v1_dataset_upgrades_to_v2():
    assert json.loads((GOLDEN / "dataset.json").read_text())["schema_version"] == 1
    ds = load_dataset(GOLDEN)
    assert ds.meta["schema_version"] == SCHEMA_VERSION == 3
    # tests/data/dataset_v1: two categorical fields of 3 and 4 values (tests/data/README.md)
    assert [f.id_ranges for f in ds.categorical_fields] == [((0, 3),), ((3, 7),)]
    assert ds.meta["parent"] is None and ds.meta["new_id_ranges"] is None
    assert ds.field_of_embedding().tolist() == [0, 0, 0, 1, 1, 1, 1]


def test_partition_new_day_on_old_manifest(tmp_path):
    d0 = imp(tmp_path, "d0", DAY0)
    d1 = imp(tmp_path, "d1", DAY1, "--extend", str(d0))
    res = runner.invoke(app, ["partition", str(d0), "-w", "2", "-m", "hybrid", "--out", str(tmp_path / "p0")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["partition", str(d1), "--from-manifest", str(tmp_path / "p0"), "--max-moved-rows", "1",
                              "--out", str(tmp_path / "p1")])
    assert res.exit_code == 0, res.output
    from gmp.manifest import load_manifest

    old, new = load_manifest(tmp_path / "p0").placement, load_manifest(tmp_path / "p1").placement
    assert new.num_embeddings == 10
    changed = int(np.count_nonzero(np.asarray(old.embedding_primary) != np.asarray(new.embedding_primary)[:8]))
    assert changed <= 1
    assert json.loads((tmp_path / "p1" / "report.json").read_text())["incremental"]["generations"] == 1


def test_the_lineage_of_a_new_day_is_followed_and_an_unrelated_one_named(tmp_path, caplog):
    # d2 <- d1 <- d0 by --extend; "other" is imported on its own (its ids only happen to cover d0's)
    from gmp.datasets.extend import ancestor_generations, parent_dataset
    from gmp.errors import DatasetError

    d0 = imp(tmp_path, "d0", DAY0)
    d1 = imp(tmp_path, "d1", DAY1, "--extend", str(d0))
    d2 = imp(tmp_path, "d2", DAY0 + "0,u4,i4\n", "--extend", str(d1))
    other = imp(tmp_path, "other", DAY1 + "1,u9,i9\n1,u8,i8\n1,u7,i7\n")
    sha0 = load_dataset(d0).sha256
    assert [ancestor_generations(load_dataset(d), sha0) for d in (d0, d1, d2, other)] == [0, 1, 2, None]
    assert parent_dataset(load_dataset(d2)).sha256 == load_dataset(d1).sha256 and parent_dataset(load_dataset(d0)) is None
    assert runner.invoke(app, ["partition", str(d0), "-w", "2", "-m", "random", "--no-plots", "--out",
                               str(tmp_path / "p0")]).exit_code == 0
    with caplog.at_level("WARNING", logger="gmp"):
        res = runner.invoke(app, ["partition", str(other), "--from-manifest", str(tmp_path / "p0"), "--no-plots",
                                  "--out", str(tmp_path / "po")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "po" / "report.json").read_text())["incremental"]["generations"] is None
    assert f"which is neither {other} nor one of its ancestors" in caplog.text
    # d1 re-imported at its path with other data: d2's chain is broken there, and that is said, not followed
    import shutil

    shutil.rmtree(d1)
    imp(tmp_path, "d1", DAY1 + "0,u5,i5\n", "--extend", str(d0))
    with pytest.raises(DatasetError, match="parent .*d1 is not the dataset it was made from"):
        ancestor_generations(load_dataset(d2), sha0)


@pytest.mark.parametrize("bad", [[[0, 2], [5, 4]], [[0, 1]]])
def test_field_ranges_are_checked(bad):
    from gmp.datasets.format import FieldInfo
    from gmp.errors import DatasetError

    with pytest.raises(DatasetError, match="ranges"):
        FieldInfo("A", "categorical", 3, 0, ranges=tuple(tuple(r) for r in bad))


def test_resume_on_a_day_with_a_new_field_says_why(tmp_path):
    """The model takes every field: a checkpoint of a 2-field day cannot continue on a 3-field day. The
    refusal names the field counts (it said only "Error(s) in loading state_dict")."""
    lines0 = "".join(f"{i % 2} {i % 7}:1 {i % 5}:1\n" for i in range(60))
    lines1 = "".join(f"{i % 2} {i % 7}:1 {i % 5}:1" + (" 9:1\n" if i % 4 == 0 else "\n") for i in range(60))
    imp_sparse(tmp_path, "libsvm", "d0", lines0)
    imp_sparse(tmp_path, "libsvm", "d1", lines1, "--extend", str(tmp_path / "d0"))
    for args in (["partition", str(tmp_path / "d0"), "-w", "2", "-m", "random", "--no-plots", "--out",
                  str(tmp_path / "p0")],
                 ["train", str(tmp_path / "d0"), "--manifest", str(tmp_path / "p0"), "--engine", "local",
                  "--epochs", "1", "--batch-size", "8", "--checkpoint-dir", str(tmp_path / "ck")],
                 ["partition", str(tmp_path / "d1"), "--from-manifest", str(tmp_path / "p0"), "--no-plots", "--out",
                  str(tmp_path / "p1")]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["train", str(tmp_path / "d1"), "--manifest", str(tmp_path / "p1"), "--engine", "local",
                              "--epochs", "1", "--batch-size", "8", "--checkpoint-dir", str(tmp_path / "ck"),
                              "--resume"])
    assert res.exit_code == 2 and "size mismatch" in res.output and ": 3 and 0)" in res.output, res.output
    assert "continues only with the checkpoint's fields" in res.output


@pytest.mark.parametrize("before, now, message", [
    (None, "item=3", "field 'item' is not hashed in the previous dataset (a vocabulary) and hashed into 3 buckets "
                     "here; drop --hash item=3."),
    ("item=3", None, "field 'item' is hashed into 3 buckets in the previous dataset and not hashed here (a "
                     "vocabulary); pass --hash item=3."),
    ("item=3", "item=5", "field 'item' is hashed into 3 buckets in the previous dataset and into 5 here; pass "
                         "--hash item=3."),
], ids=["vocabulary-then-hashed", "hashed-then-vocabulary", "other-size"])
def test_extend_hash_mismatch_names_the_flag_to_pass(tmp_path, before, now, message):
    """The refusal said 'hashed into None buckets' for the side that is not hashed."""
    imp(tmp_path, "d0", DAY0, *(("--hash", before) if before else ()))
    src = tmp_path / "d1.csv"
    src.write_text(DAY1)
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--out", str(tmp_path / "d1"), "--label", "label",
                              "--cat", "user,item", "--extend", str(tmp_path / "d0"),
                              *(("--hash", now) if now else ())])
    assert res.exit_code == 2 and not (tmp_path / "d1").exists(), res.output
    assert res.stderr.strip() == f"error: --extend: {message}"


def test_extend_from_another_format_says_so_first(tmp_path):
    """A libsvm day extending a csv dataset with a dense column was told to pass --dense, which libsvm
    does not take; a libfm day extending a libsvm dataset is the same format (one importer)."""
    src = tmp_path / "d0.csv"
    src.write_text("label,user,age\n1,u1,3\n0,u2,4\n")
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--out", str(tmp_path / "d0"), "--label", "label",
                              "--cat", "user", "--dense", "age", "--test-fraction", "0"])
    assert res.exit_code == 0, res.output
    svm = tmp_path / "d1.libsvm"
    svm.write_text("1 3:1\n")
    res = runner.invoke(app, ["data", "import", "libsvm", str(svm), "--out", str(tmp_path / "d1"),
                              "--extend", str(tmp_path / "d0")])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == ("error: --extend: the previous dataset is a csv import and this input is libsvm: "
                                  "its dense columns are ['age'], this input's []; extend a dataset imported from "
                                  "libsvm, or import without --extend.")
    imp(tmp_path, "c0", DAY0)  # no dense column: the fields differ, said after the formats
    res = runner.invoke(app, ["data", "import", "libsvm", str(svm), "--out", str(tmp_path / "d1"),
                              "--extend", str(tmp_path / "c0")])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == ("error: --extend: the previous dataset is a csv import and this input is libsvm; "
                                  "this input's 1 field (f1) share none with the previous dataset's 2 fields (user, "
                                  "item); extend a dataset imported from the same source, or import without "
                                  "--extend.")
    imp_sparse(tmp_path, "libsvm", "s0", "1 3:1 5:1\n0 4:1\n")
    d1 = imp_sparse(tmp_path, "libfm", "s1", "1 3:1 6:1\n", "--extend", str(tmp_path / "s0"))
    assert d1.meta["parent"]["sha256"] == load_dataset(tmp_path / "s0").sha256


def _edit_vocab(out: Path, edit) -> None:
    with np.load(out / "vocab.npz") as z:
        members = {name: z[name].copy() for name in z.files}
    edit(members)
    np.savez(out / "vocab.npz", **members)


def _extend_day1(tmp_path: Path):
    src = tmp_path / "d1.csv"
    src.write_text(DAY1)
    return runner.invoke(app, ["data", "import", "csv", str(src), "--out", str(tmp_path / "d1"), "--label", "label",
                               "--cat", "user,item", "--test-fraction", "0", "--extend", str(tmp_path / "d0")])


def test_vocab_hash_is_recorded_outside_the_dataset_identity(tmp_path):
    """vocab.npz was covered by no hash; its keys' hash is recorded (an additive key), and the dataset's
    sha256 stays the hash of the arrays and the header's meaning (the vocabulary is not part of it)."""
    from gmp._io import hash_arrays
    from gmp.datasets.format import header_sha256

    out = imp(tmp_path, "d0", DAY0)
    meta = json.loads((out / "dataset.json").read_text())
    with np.load(out / "vocab.npz") as z:  # u1, u2 and i1, i2 as the csv importer keys them, in local-id order
        members = [(name, z[name]) for name in sorted(z.files)]
    assert meta["vocab_sha256"] == hash_arrays(members)
    ds = load_dataset(out)
    assert ds.sha256 == header_sha256(ds.meta, ds.fields) == meta["sha256"]
    d1 = load_dataset(imp(tmp_path, "d1", DAY1, "--extend", str(out)))
    with np.load(tmp_path / "d1" / "vocab.npz") as z:
        assert d1.meta["vocab_sha256"] == hash_arrays([(name, z[name]) for name in sorted(z.files)])


def test_extend_refuses_an_edited_vocabulary(tmp_path):
    """An edited vocab.npz (the keys of a field reversed) opened fine and an --extend import gave the
    previous values other ids, silently."""
    out = imp(tmp_path, "d0", DAY0)
    want = json.loads((out / "dataset.json").read_text())["vocab_sha256"]
    _edit_vocab(out, lambda z: z.update(field_0=z["field_0"][::-1].copy()))
    with np.load(out / "vocab.npz") as z:
        from gmp._io import hash_arrays
        got = hash_arrays([(name, z[name]) for name in sorted(z.files)])
    assert load_dataset(out).sha256  # the dataset itself still opens: its arrays and header are intact
    res = _extend_day1(tmp_path)
    assert res.exit_code == 2 and not (tmp_path / "d1").exists(), res.output
    assert res.stderr.strip() == (
        f"error: --extend {out}: vocab.npz is not the vocabulary the dataset was imported with (its keys hash to "
        f"{got[:12]}…, dataset.json's vocab_sha256 is {want[:12]}…), so its ids would not mean the dataset's; "
        f"restore its vocab.npz or re-import the previous dataset.")


def test_extend_refuses_a_key_listed_twice_also_without_a_recorded_hash(tmp_path):
    """A dataset written before vocab_sha256 (no such key) still opens and extends; a vocabulary listing a
    key twice (imported 7,692 embeddings instead of 7,691) is refused."""
    out = imp(tmp_path, "d0", DAY0)
    meta = json.loads((out / "dataset.json").read_text())
    del meta["vocab_sha256"]  # as imported before the key existed: the same sha256 (not part of it)
    (out / "dataset.json").write_text(json.dumps(meta))
    assert load_dataset(out).sha256 == meta["sha256"]
    d1 = _extend_day1(tmp_path)
    assert d1.exit_code == 0, d1.output
    assert rows(load_dataset(tmp_path / "d1")) == [[7, 8], [3, 9], [6, 8], [2, 9]]
    import shutil
    shutil.rmtree(tmp_path / "d1")
    with np.load(out / "vocab.npz") as z:
        first = int(z["field_1"][0])
    _edit_vocab(out, lambda z: z["field_1"].__setitem__(1, z["field_1"][0]))
    res = _extend_day1(tmp_path)
    assert res.exit_code == 2 and not (tmp_path / "d1").exists(), res.output
    assert res.stderr.strip() == (f"error: --extend {out}: vocab.npz lists key {first} more than once in field "
                                  f"'item', so one value would have two ids; restore its vocab.npz or re-import "
                                  f"the previous dataset.")


def test_extend_keeps_a_hashed_fields_ids_without_listing_its_buckets(tmp_path):
    """A hashed field's ids come from its parent's ranges (its buckets are not listed one by one); a value
    lands in the bucket it had, the vocabulary field beside it grows after the parent's ids."""
    from gmp.datasets.streaming import hash_strings
    from gmp.datasets.vocab import PreviousField, Vocabulary

    d0 = load_dataset(imp(tmp_path, "d0", DAY0, "--hash", "item=3"))
    # user: missing 0, rare 1, u1 2, u2 3; item from 4: missing 4, buckets 5..7
    bucket = {v: 5 + int(k) % 3 for v, k in zip(("i1", "i2", "i3"), _mixed(hash_strings(["i1", "i2", "i3"])))}
    assert rows(d0) == [sorted([2, bucket["i1"]]), sorted([3, bucket["i1"]]), sorted([2, bucket["i2"]])]
    d1 = load_dataset(imp(tmp_path, "d1", DAY1, "--hash", "item=3", "--extend", str(tmp_path / "d0")))
    assert rows(d1) == [sorted([8, bucket["i2"]]), sorted([3, bucket["i3"]]), sorted([8, bucket["i1"]]),
                        sorted([2, bucket["i3"]])]
    assert [f.id_ranges for f in d1.categorical_fields] == [((0, 4), (8, 9)), ((4, 8),)]
    # a parent whose hashed field holds two ranges: local id k -> the k-th id along them
    v = Vocabulary(hash_sizes={"H": 4})
    h = v.add_field("H")
    pids = v.lookup(h, np.array([0, 0, 0, 0, 0], np.uint64), np.array([0, 1, 0, 0, 0], bool))
    prev = [PreviousField("H", "categorical", None, None, 4, ranges=((10, 12), (20, 23)))]
    fields, n, remap = v.finish(prev, 23)
    local = 1 + int(_mixed(np.array([0], np.uint64))[0]) % 4
    assert remap[pids].tolist() == [10, [10, 11, 20, 21, 22][local], 10, 10, 10]
    assert fields[0].id_ranges == ((10, 12), (20, 23)) and n == 23


def _mixed(keys: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser of each key, in plain Python integers (derived apart from gmp's)."""
    m = (1 << 64) - 1
    out = []
    for k in (int(x) for x in keys):
        k = ((k ^ (k >> 30)) * 0xBF58476D1CE4E5B9) & m
        k = ((k ^ (k >> 27)) * 0x94D049BB133111EB) & m
        out.append(k ^ (k >> 31))
    return np.array(out, dtype=object)


# adversarial pass on formats, F4: an extension's recognition takes the roles of the dataset it extends
def _prices(n: int, seed: int) -> str:
    """label,user,item,price rows: price a number with many values and one 'nan' cell, which recognition
    now proposes as dense (a gmp before that read it as categorical)."""
    rng = np.random.default_rng(seed)
    lines = ["label,user,item,price"]
    for i in range(n):
        price = "nan" if i == 7 else f"{rng.uniform(0, 100):.2f}"
        lines.append(f"{i % 2},u{rng.integers(0, 5)},i{rng.integers(0, 6)},{price}")
    return "\n".join(lines) + "\n"


def test_recognition_extending_a_dataset_takes_its_dense_columns(tmp_path):
    """The parent read price as categorical; the recognised extension did --dense price, refused on the nan
    cell (and with --max-bad-lines, for dense columns the parent lacks)."""
    d0 = imp(tmp_path, "d0", _prices(40, 0), "--cat", "user,item,price")
    src = tmp_path / "d1.csv"
    src.write_text(_prices(30, 1))
    res = runner.invoke(app, ["data", "import", str(src), "--extend", str(d0), "--out", str(tmp_path / "d1")])
    assert res.exit_code == 0, res.output
    assert (f"running: gmp data import csv {src} --label label --extend {d0} --out {tmp_path / 'd1'}"
            in res.output), res.output
    assert "warning" not in res.output  # no advice to read price as numbers: the parent's roles hold
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--label", "label", "--extend", str(d0),
                              "--out", str(tmp_path / "explicit")])
    assert res.exit_code == 0, res.output
    got, want = load_dataset(tmp_path / "d1"), load_dataset(tmp_path / "explicit")
    assert [f.name for f in got.fields] == ["user", "item", "price"] and got.num_dense == 0
    assert rows(got) == rows(want) and got.num_embeddings == want.num_embeddings


def test_recognition_extending_a_dataset_takes_its_label_and_dense_columns(tmp_path):
    """The other way: the parent's dense column has few values here (recognition alone would make it
    categorical), and its label is not the column recognition would pick."""
    text0 = "click,target,user,age\n" + "".join(f"{i % 2},{(i // 2) % 2},u{i % 3},{i * 1.5}\n" for i in range(20))
    src0 = tmp_path / "d0.csv"
    src0.write_text(text0)
    res = runner.invoke(app, ["data", "import", "csv", str(src0), "--label", "target", "--cat", "click,user",
                              "--dense", "age", "--out", str(tmp_path / "d0")])
    assert res.exit_code == 0, res.output
    src1 = tmp_path / "d1.csv"
    src1.write_text("click,target,user,age\n1,0,u1,2\n0,1,u4,3\n1,1,u2,2\n")
    res = runner.invoke(app, ["data", "import", str(src1), "--extend", str(tmp_path / "d0"), "--out",
                              str(tmp_path / "d1")])
    assert res.exit_code == 0, res.output
    assert "--label target --dense age --extend" in res.output, res.output
    d1 = load_dataset(tmp_path / "d1")
    assert d1.num_dense == 1 and np.asarray(d1.labels).tolist() == [0.0, 1.0, 1.0]
    assert np.asarray(d1.dense)[:, 0].tolist() == pytest.approx(np.log1p([2, 3, 2]).tolist())


@pytest.mark.parametrize("given, parent_dense, fix", [
    (["--cat", "user,item", "--dense", "price"], None, "drop --dense."),
    (["--cat", "user,item"], "price", "pass --dense price."),
])
def test_an_extension_with_other_dense_columns_is_told_the_dense_to_pass(tmp_path, given, parent_dense, fix):
    """"extend with the same dense columns (--dense)" could not be followed for a parent without any: no
    --dense value says none."""
    text = "label,user,item,price\n" + "".join(f"{i % 2},u{i % 3},i{i % 4},{i * 2.5}\n" for i in range(12))
    if parent_dense:
        d0 = imp(tmp_path, "d0", text, "--dense", parent_dense)
    else:
        d0 = imp(tmp_path, "d0", text, "--cat", "user,item,price")
    src = tmp_path / "d1.csv"
    src.write_text(text)
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--label", "label", *given, "--extend", str(d0),
                              "--out", str(tmp_path / "d1")])
    assert res.exit_code == 2, res.output
    have = "['price']" if not parent_dense else "[]"
    assert res.stderr.strip() == (f"error: --extend: the previous dataset's dense columns are "
                                  f"{[parent_dense] if parent_dense else []}, this input's {have}; extend with "
                                  f"the same dense columns: {fix}")
