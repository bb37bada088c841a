"""Golden files of every on-disk format gmp writes, one directory per schema version.

``tests/data/<format>_v<N>/`` holds a small file of version N written by the gmp of that
version (see tests/data/README.md for how each was made). The current version of each
format must have one (the guard test below fails when a version is bumped without it),
and each is read by today's code: upgraded one step at a time where an upgrade exists,
refused with a one-line message where it cannot be (checkpoint schema 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gmp import manifest as manifest_mod
from gmp import report as report_mod
from gmp.datasets import format as dataset_mod
from gmp.datasets.format import compute_sha256, load_dataset
from gmp.errors import TrainingError
from gmp.manifest import load_manifest
from gmp.report import load_report
from gmp.train import checkpoint as checkpoint_mod

DATA = Path(__file__).parent / "data"

#: format -> (module holding SCHEMA_VERSION, golden directory stem)
FORMATS = {
    "gmp.dataset": (dataset_mod, "dataset"),
    "gmp.placement": (manifest_mod, "manifest"),
    "gmp.report": (report_mod, "manifest"),  # report.json lives in the manifest's golden directory
    "gmp.checkpoint": (checkpoint_mod, "checkpoint"),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_current_version_has_a_golden_file(fmt):
    module, stem = FORMATS[fmt]
    assert module.FORMAT == fmt
    for version in range(1, module.SCHEMA_VERSION + 1):
        assert (DATA / f"{stem}_v{version}").is_dir(), f"no golden file tests/data/{stem}_v{version} for {fmt}"


def test_golden_dataset_v1_reads_and_verifies():
    path = DATA / "dataset_v1"
    ds = load_dataset(path, verify=True)
    meta = json.loads((path / "dataset.json").read_text())
    assert meta["schema_version"] == 1
    assert (ds.num_samples, ds.num_embeddings, ds.num_dense) == (24, 7, 1)
    assert (ds.num_train, ds.num_test) == (18, 6)
    assert [f.name for f in ds.fields] == ["I0", "C0", "C1"]
    # the hash is recomputed independently of load_dataset
    arrays = [np.load(path / f"{n}.npy") for n in ("indptr", "indices", "labels", "dense")]
    assert compute_sha256(*arrays) == meta["sha256"]
    assert float(np.mean(arrays[2])) == pytest.approx(meta["label_rate"])


def test_golden_dataset_v2_reads_and_verifies():
    path = DATA / "dataset_v2"
    ds = load_dataset(path, verify=True)
    assert json.loads((path / "dataset.json").read_text())["schema_version"] == 2
    assert ds.meta["schema_version"] == 3 and ds.meta["parent"] is None
    assert [(f.name, f.id_ranges) for f in ds.categorical_fields] == [("user", ((0, 5),)), ("item", ((5, 10),))]
    assert (ds.num_samples, ds.num_train, ds.num_test, ds.num_dense) == (6, 4, 2, 1)
    arrays = [np.load(path / f"{n}.npy") for n in ("indptr", "indices", "labels", "dense")]
    assert compute_sha256(*arrays) == ds.meta["arrays_sha256"]
    assert (path / "vocab.npz").is_file()  # what --extend reads


def meaning_sha256(meta: dict) -> str:
    """The schema-3 ``sha256`` of a header, derived here from docs/datasets.md's definition (not gmp's code)."""
    import hashlib

    keys = ("name", "kind", "num_values", "offset", "missing_id", "rare_id", "hash_buckets", "column", "ranges")
    meaning = {k: meta[k] for k in ("num_samples", "num_embeddings", "num_edges", "num_dense")}
    meaning["fields"] = [{k: f.get(k) for k in keys} for f in meta["fields"]]
    meaning["split"] = {k: meta["split"][k] for k in ("method", "num_train", "num_test")}
    parent = meta.get("parent")
    meaning["parent"] = parent and {"sha256": parent["sha256"], "num_embeddings": parent["num_embeddings"]}
    meaning["new_id_ranges"] = meta.get("new_id_ranges")
    h = hashlib.sha256(f"gmp.dataset|3|{meta['arrays_sha256']}|".encode())
    h.update(json.dumps(meaning, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


def test_golden_dataset_v3_binds_its_header():
    path = DATA / "dataset_v3"
    meta = json.loads((path / "dataset.json").read_text())
    assert meta["schema_version"] == 3
    ds = load_dataset(path, verify=True)
    arrays = [np.load(path / f"{n}.npy") for n in ("indptr", "indices", "labels", "dense")]
    assert compute_sha256(*arrays) == meta["arrays_sha256"]
    assert meaning_sha256(meta) == meta["sha256"] == ds.sha256
    # files written before schema 3 name the arrays' hash: still accepted
    assert ds.has_sha256(meta["arrays_sha256"]) and not ds.has_sha256("0" * 64)


@pytest.mark.parametrize("version", [1, 2])
def test_golden_dataset_upgrade_keeps_the_old_hash(version):
    """A dataset written before schema 3 answers to the hash its manifests, checkpoints and children
    recorded (the arrays' hash), and gets the schema-3 identity of its header too."""
    path = DATA / f"dataset_v{version}"
    old = json.loads((path / "dataset.json").read_text())["sha256"]
    ds = load_dataset(path, verify=True)
    assert ds.has_sha256(old) and ds.has_sha256(ds.sha256) and ds.sha256 != old
    assert ds.meta["arrays_sha256"] == old
    assert ds.sha256 == meaning_sha256(ds.meta)


def test_golden_manifest_v1_and_its_report_read():
    raw = json.loads((DATA / "manifest_v1" / "manifest.json").read_text())
    m = load_manifest(DATA / "manifest_v1", verify_hash=True)
    assert raw["schema_version"] == 1 and m.meta["schema_version"] == 3 and m.num_workers >= 1  # upgraded on read
    assert m.history is None  # version 3's history: unknown before it
    rep = load_report(DATA / "manifest_v1" / "report.json")
    assert rep["format"] == "gmp.report" and rep["schema_version"] == 1


def test_golden_manifest_v2_reads_with_its_plan_and_dataset_name():
    ds = load_dataset(DATA / "dataset_v1", verify=True)
    m = load_manifest(DATA / "manifest_v2", dataset=ds, verify_hash=True)
    assert json.loads((DATA / "manifest_v2" / "manifest.json").read_text())["schema_version"] == 2
    assert m.meta["schema_version"] == 3 and m.history is None  # upgraded: no history (every id trained)
    assert (m.plan.batch_size, m.plan.embedding_dim, m.plan.memory_per_worker) == (4, 16, None)
    assert m.dataset_name == "dataset_v1" and m.method == "hybrid" and m.num_workers == 2
    rep = load_report(DATA / "manifest_v2" / "report.json")
    assert rep["dataset_name"] == "dataset_v1"


def test_golden_manifest_v3_reads_with_its_history():
    ds = load_dataset(DATA / "dataset_v1", verify=True)
    m = load_manifest(DATA / "manifest_v3", dataset=ds, verify_hash=True)
    assert m.meta["schema_version"] == 3 and m.method == "hybrid" and m.num_workers == 2
    # every id of dataset_v1 is read by a sample: its trained rows, independently of gmp
    used = np.zeros(7, dtype=bool)
    used[np.load(DATA / "dataset_v1" / "indices.npy")] = True
    assert m.history.trained.tolist() == used.tolist() and m.history.created.size == 0
    assert np.load(DATA / "manifest_v3" / "trained_rows.npy").tolist() == [int(np.packbits(used, bitorder="little")[0])]


def test_golden_checkpoint_v1_is_refused_in_one_line():
    with pytest.raises(TrainingError) as exc:
        checkpoint_mod.read_checkpoint_header(DATA / "checkpoint_v1")
    msg = str(exc.value)
    assert "\n" not in msg and "schema_version 1" in msg and "refused" in msg


def test_golden_checkpoint_v2_upgrades_one_step():
    path, head = checkpoint_mod.find_checkpoint(DATA / "checkpoint_v2")
    assert head["schema_version"] == 2 == checkpoint_mod.SCHEMA_VERSION - 1
    assert set(head["files"]) == {"trainer.pt", "worker-00000.pt", "worker-00001.pt"}
    raw = checkpoint_mod._load(path / "worker-00000.pt", checkpoint_mod.WORKER_KEYS)["store"]
    obj, rows = checkpoint_mod.open_worker_rows(path, head, 0)
    n = raw["opt_state"].shape[0]  # Adagrad: one sum of squares per primary
    assert rows.num_rows == n and rows.width == 2 * raw["table"].shape[1]
    np.testing.assert_array_equal(rows(0, n)[:, :rows.row_dim], raw["table"][:n].cpu().numpy())
    np.testing.assert_array_equal(rows(0, n)[:, rows.row_dim:], raw["opt_state"].cpu().numpy())
    assert "opt_state" not in obj["store"] and obj["store"]["table"].shape[0] == raw["table"].shape[0] - n


def test_golden_checkpoint_v3_is_current():
    path, head = checkpoint_mod.find_checkpoint(DATA / "checkpoint_v3")
    assert head["schema_version"] == checkpoint_mod.SCHEMA_VERSION == 3
    assert set(head["files"]) == {"trainer.pt", "worker-00000.pt", "worker-00001.pt", "worker-00000.rows",
                                  "worker-00001.rows"}
    for w in range(2):
        obj, rows = checkpoint_mod.open_worker_rows(path, head, w)
        # the rows file is num_rows x (value + Adagrad sum) float32, nothing else
        assert (path / f"worker-{w:05d}.rows").stat().st_size == rows.num_rows * rows.width * 4
        assert rows.width == 2 * rows.row_dim and np.all(rows(0, rows.num_rows)[:, rows.row_dim:] >= 0)
        rows.close()


def test_golden_checkpoint_rows_by_global_id():
    """read_primary_rows (the API a placement change reads through) against each worker's rows file."""
    path, head = checkpoint_mod.find_checkpoint(DATA / "checkpoint_v3")
    expect = {}
    for w in range(head["num_workers"]):
        obj, rows = checkpoint_mod.open_worker_rows(path, head, w)
        ids = obj["store"]["ids"][:rows.num_rows]
        for i, g in enumerate(ids.tolist()):
            expect[g] = rows(i, i + 1)[0]
        rows.close()
    gids = np.array(sorted(expect))[::-1]
    values, state = checkpoint_mod.read_primary_rows(DATA / "checkpoint_v3", gids)
    want = np.stack([expect[g] for g in gids.tolist()])
    np.testing.assert_array_equal(values, want[:, :values.shape[1]])
    np.testing.assert_array_equal(state, want[:, values.shape[1]:])
    with pytest.raises(TrainingError, match="no worker's primary"):
        checkpoint_mod.read_primary_rows(DATA / "checkpoint_v3", [len(expect) + 5])
