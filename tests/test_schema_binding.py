"""Issue 38, defect 4: dataset.json's meaning is bound to its arrays (dataset schema 3).

Before schema 3 the dataset hash covered the arrays only: duplicated or overlapping field
ranges, shifted offsets and a swapped split were accepted, a manifest made for the original
still matched, and two ranks given datasets with different splits trained together. Each
test below failed on that code.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.extend import ancestor_generations
from gmp.datasets.format import check_header, compute_sha256, load_dataset, seal_header, write_dataset
from gmp.errors import DatasetError, ManifestError
from gmp.manifest import load_manifest

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def one_line_error(args, pattern):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 2, (res.exit_code, res.output)
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in res.output, err
    assert re.search(pattern, err), err


@pytest.fixture
def v3(tmp_path) -> Path:
    """A copy of the schema-3 golden dataset (6 samples: split 4 + 2, fields user [0, 5) and item [5, 10))."""
    return Path(shutil.copytree(DATA / "dataset_v3", tmp_path / "d"))


def edit(path: Path, change, *, reseal: bool = False) -> dict:
    meta = json.loads((path / "dataset.json").read_text())
    change(meta)
    if reseal:  # whoever edits also recomputes the hash: only the consistency checks are left to catch it
        meta["sha256"] = seal_header(meta)
    (path / "dataset.json").write_text(json.dumps(meta))
    return meta


def swap_split(meta):
    s = meta["split"]
    s["num_train"], s["num_test"] = s["num_test"], s["num_train"]


def shift_offset(meta):
    f = meta["fields"][2]  # item: [5, 10) -> [4, 9), a gap at 9 and an overlap at 4
    f["offset"], f["missing_id"], f["rare_id"], f["ranges"] = 4, 4, 5, [[4, 9]]


@pytest.mark.parametrize("change", [swap_split, shift_offset,
                                    lambda m: m["fields"].append(dict(m["fields"][1])),
                                    lambda m: m["fields"][1].update(name="renamed")],
                         ids=["split", "offset", "duplicate-field", "rename"])
def test_edited_header_is_refused_in_one_line(v3, change):
    edit(v3, change)
    with pytest.raises(DatasetError, match=r"dataset.json: (sha256 \w+… is not the hash of this header|.*overlap|"
                                           r"two fields are named)"):
        load_dataset(v3, verify=False)  # bound even without re-hashing the arrays
    one_line_error(["data", "info", v3], r"dataset\.json")


def test_resealed_split_swap_is_another_dataset(v3, tmp_path):
    """A split swapped and the hash recomputed is consistent, but it is another dataset: the manifest
    made for the original refuses it (before, it trained on the swapped split)."""
    man = tmp_path / "m"
    res = runner.invoke(app, ["partition", str(v3), "-w", "2", "-m", "random", "--out", str(man), "--no-plots"])
    assert res.exit_code == 0, res.output
    before = load_dataset(v3)
    edit(v3, swap_split, reseal=True)
    after = load_dataset(v3)
    assert (after.num_train, after.num_test) == (2, 4)
    assert after.meta["arrays_sha256"] == before.meta["arrays_sha256"] and after.sha256 != before.sha256
    with pytest.raises(ManifestError, match="was made for dataset sha256"):
        load_manifest(man, dataset=after)


def test_ranks_compare_the_split(tmp_path):
    """Ranks compare ``ds.sha256`` (gmp.train.run.check_same_launch): two datasets with the same
    arrays and another split must differ there."""
    kw = dict(indptr=np.arange(9) * 2, indices=np.tile([0, 3], 8), labels=np.tile([0.0, 1.0], 4), dense=None,
              fields=[], num_embeddings=4, source={"format": "test"})
    from gmp.datasets.format import FieldInfo

    kw["fields"] = [FieldInfo("a", "categorical", 2, 0), FieldInfo("b", "categorical", 2, 2)]
    a = write_dataset(tmp_path / "a", test_fraction=0.25, **kw)
    b = write_dataset(tmp_path / "b", test_fraction=0.5, **kw)
    assert a["arrays_sha256"] == b["arrays_sha256"]
    assert load_dataset(tmp_path / "a").sha256 != load_dataset(tmp_path / "b").sha256


@pytest.mark.parametrize("change, pattern", [
    (shift_offset, r"field 'item'.s ids \[4, 9\) overlap field 'user'.s"),
    (lambda m: m["fields"][2].update(offset=6, missing_id=6, rare_id=7, ranges=[[6, 11]]) or m.update(
        num_embeddings=11), r"ids \[5, 6\) belong to no field"),
    (lambda m: m.update(num_embeddings=12), r"ids \[10, 12\) belong to no field"),
    (lambda m: m["fields"].append(dict(m["fields"][0])), r"two fields are named 'price'"),
    (lambda m: m["fields"][0].update(column=0) or m["fields"].append(dict(m["fields"][0], name="p2")) or m.update(
        num_dense=2), r"dense fields own columns \[0, 0\], expected each of 0\.\.1 once"),
    (lambda m: m.update(parent={"sha256": "ab", "num_embeddings": 11, "path": "x"}),
     r"parent.num_embeddings 11 exceeds num_embeddings 10"),
])
def test_header_consistency(v3, change, pattern):
    meta = json.loads((v3 / "dataset.json").read_text())
    change(meta)
    with pytest.raises(DatasetError, match=pattern):
        check_header(meta, v3 / "dataset.json")


def test_big_endian_arrays_are_refused(v3):
    """Arrays rewritten big-endian with a recomputed hash loaded, then failed in a numba kernel."""
    labels = np.load(v3 / "labels.npy").astype(">f4")
    np.save(v3 / "labels.npy", labels)
    arrays = [np.load(v3 / f"{n}.npy") for n in ("indptr", "indices", "labels", "dense")]
    edit(v3, lambda m: m.update(arrays_sha256=compute_sha256(*arrays)), reseal=True)
    with pytest.raises(DatasetError, match=r"labels\.npy has byte order >f4 \(big-endian\), expected the native"):
        load_dataset(v3)
    one_line_error(["data", "info", v3], "big-endian")


def test_extending_a_schema2_dataset_keeps_its_old_hash_reachable(tmp_path):
    """A child of a schema-2 dataset names the parent's schema-3 hash and its arrays' hash, so a manifest
    or checkpoint made for the parent before schema 3 is still found among the child's ancestors."""
    parent = Path(shutil.copytree(DATA / "dataset_v2", tmp_path / "d2"))
    old = json.loads((parent / "dataset.json").read_text())["sha256"]
    src = tmp_path / "day1.csv"
    src.write_text("label,user,item,price\n1,u1,i9,1.0\n0,u7,i1,2.0\n1,u1,i1,3.0\n")
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--out", str(tmp_path / "d3"), "--label", "label",
                              "--dense", "price", "--test-fraction", "0.34", "--extend", str(parent)])
    assert res.exit_code == 0, res.output
    child = load_dataset(tmp_path / "d3")
    link = child.meta["parent"]
    assert link["sha256"] == load_dataset(parent).sha256 and link["arrays_sha256"] == old
    assert ancestor_generations(child, old) == 1 and ancestor_generations(child, link["sha256"]) == 1
