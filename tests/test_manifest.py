"""Placement manifest: round trip, golden v1 files, and every invalid-manifest case with its error text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gmp.datasets.format import load_dataset, write_dataset
from gmp.errors import DatasetError, GmpError, ManifestError
from gmp.manifest import SCHEMA_VERSION, load_manifest, write_manifest
from gmp.placement import Placement
from gmp.topology import hierarchical, homogeneous

GOLDEN = Path(__file__).parent / "data" / "manifest_v1"
# The tiny_dataset fixture's arrays hash (conftest.py; its sha256 before dataset schema 3); the golden manifest
# was made for it.
TINY_SHA256 = "de274a42daaa90df27467dad0f25ed350a77868af57ac70dea27c4766b7dfd4c"


def make_placement() -> Placement:
    p = Placement.edge_cut(2, [0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1], method="hand",
                           options={"rounds": 3, "tol": 0.5}, seed=4,
                           info={"rounds": [{"round": 1, "objective": 3.0}], "note": "x"})
    return p.with_secondaries([0, 0, 0, 1, 1, 1, 2], [1, 0])


def write(out: Path, placement: Placement | None = None, **kw) -> Path:
    args = dict(dataset_sha256=TINY_SHA256, num_samples=6, num_embeddings=6, topology=homogeneous(2),
                metrics={"batch_remote_reads": 3, "batch_size": 2, "per_worker": {"samples": [3, 3]}},
                partition_seconds=0.25, peak_rss_bytes=1234)
    args.update(kw)
    return write_manifest(out, placement or make_placement(), **args)


@pytest.fixture
def golden(tmp_path) -> Path:
    out = tmp_path / "golden"
    shutil.copytree(GOLDEN, out)
    return out


def test_round_trip(tmp_path, tiny_dataset):
    ds = load_dataset(tiny_dataset)
    assert ds.meta["arrays_sha256"] == TINY_SHA256  # what manifests before dataset schema 3 name: accepted
    p = make_placement()
    path = write(tmp_path / "m", p, topology=hierarchical(1, 2, inter_cost=10))
    m = load_manifest(path, dataset=ds)
    for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
        got, want = getattr(m.placement, name), getattr(p, name)
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    assert m.placement.method == "hand" and m.placement.seed == 4
    assert dict(m.placement.options) == {"rounds": 3, "tol": 0.5}
    assert m.placement.info["rounds"] == [{"round": 1, "objective": 3.0}]
    assert m.meta["partitioner"]["info"]["note"] == "x"
    assert m.topology.name == "1x2" and np.array_equal(m.topology.cost, [[0, 1], [1, 0]])
    assert (m.num_workers, m.num_samples, m.num_embeddings, m.dataset_sha256) == (2, 6, 6, TINY_SHA256)
    assert m.meta["partition_seconds"] == 0.25 and m.meta["peak_rss_bytes"] == 1234
    # only the summary keys reach manifest.json
    assert m.meta["metrics"] == {"batch_remote_reads": 3, "batch_size": 2}
    assert m.meta["num_secondaries"] == 2 and m.meta["schema_version"] == SCHEMA_VERSION
    m.placement.check(num_samples=6, num_embeddings=6)
    # load via the manifest.json path, and without mmap
    assert load_manifest(path / "manifest.json", mmap=False).placement.num_secondaries == 2


def test_golden_v1_reads_with_exact_values(tiny_dataset):
    m = load_manifest(GOLDEN, dataset=load_dataset(tiny_dataset))
    p = m.placement
    assert p.sample_worker.tolist() == [0, 0, 0, 1, 1, 1]
    assert p.embedding_primary.tolist() == [0, 0, 0, 1, 1, 1]
    assert p.secondary_indptr.tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert p.secondary_workers.tolist() == [1]
    assert p.method == "hand" and p.seed == 0 and dict(p.options) == {"note": "golden v1"}
    assert [r["objective"] for r in p.info["rounds"]] == [3.0, 1.0]
    assert m.meta["created"] == "2026-11-22T00:00:00+00:00" and m.meta["gmp_version"] == "0.1.0"
    # read through the upgrades 1 -> 2 -> 3: the plan comes from version 1's batch size and dim
    assert m.meta["schema_version"] == 3 and m.history is None and m.meta["format"] == "gmp.placement"
    assert tuple(m.plan) == (2, 4, None) and m.dataset_name is None
    assert json.loads((GOLDEN / "manifest.json").read_text())["schema_version"] == 1  # the file stays v1
    assert m.meta["placement_sha256"] == "f6bdcab410c0ca2a55c7da0f245291dde7fbbdc8420a9ffce16d0c4e009cc9b9"
    met = m.meta["metrics"]
    # with e2 replicated on worker 1 nothing is remote; sample 5 still pushes e2's gradient
    assert (met["remote_accesses"], met["batch_remote_reads"], met["batch_remote_pushes"]) == (0, 0, 1)
    assert met["replication_factor"] == pytest.approx(7 / 6)
    assert met["batch_size"] == 2 and met["embedding_dim"] == 4 and met["batch_remote_pushes_bytes"] == 16
    assert m.meta["report_files"] == ["report.json"]


def test_golden_metrics_recompute_exactly(tiny_dataset):
    from gmp.graph import build_graph
    from gmp.metrics import compute_metrics

    m = load_manifest(GOLDEN)
    stored = json.loads((GOLDEN / "report.json").read_text())["metrics"]
    fresh = compute_metrics(build_graph(load_dataset(tiny_dataset)), m.placement, m.topology, batch_size=2,
                            embedding_dim=4, seed=0)
    for key in ("remote_accesses", "epoch_unique_remote", "batch_remote_reads", "batch_remote_pushes",
                "traffic_matrix", "per_worker", "balance", "reduction_vs_random", "replication_factor"):
        assert fresh[key] == stored[key], key


def _edit_meta(path: Path, **changes) -> None:
    meta = json.loads((path / "manifest.json").read_text())
    meta.update(changes)
    (path / "manifest.json").write_text(json.dumps(meta))


def _save(path: Path, name: str, arr) -> None:
    np.save(path / f"{name}.npy", np.asarray(arr))


INVALID_CASES = {
    "newer_version": (lambda p: _edit_meta(p, schema_version=4),
                      r"manifest\.json has schema_version 4; this gmp reads up to 3\. Upgrade gmp"),
    "bad_version": (lambda p: _edit_meta(p, schema_version="1"),
                    r'schema_version "1", expected a positive integer; re-create it with \'gmp partition\''),
    "wrong_format": (lambda p: _edit_meta(p, format="gmp.dataset"),
                     r'manifest\.json has format "gmp\.dataset", expected "gmp\.placement"'),
    "not_json": (lambda p: (p / "manifest.json").write_text("{oops"), r"manifest\.json is not valid JSON"),
    "missing_manifest": (lambda p: (p / "manifest.json").unlink(), r"manifest\.json not found; re-create it"),
    "missing_key": (lambda p: _drop_key(p, "dataset_sha256"),
                    r"lacks the key 'dataset_sha256'"),
    "missing_hash": (lambda p: _drop_key(p, "placement_sha256"),
                     r"lacks the key 'placement_sha256', so its arrays cannot be checked; re-create it with "
                     r"'gmp partition' \(GMP_NO_VERIFY=1 skips the check\)\.$"),
    "wrong_shape": (lambda p: _save(p, "sample_worker", np.zeros(7, dtype=np.int32)),
                    r"sample_worker\.npy has shape \(7,\), expected \(6,\) from manifest\.json"),
    "wrong_dtype": (lambda p: _save(p, "embedding_primary", np.zeros(6, dtype=np.int64)),
                    r"embedding_primary\.npy has dtype int64, expected int32"),
    "worker_out_of_range": (lambda p: _save(p, "sample_worker", np.array([0, 0, 0, 1, 1, 5], dtype=np.int32)),
                            r"sample_worker\.npy holds worker ids in \[0, 5\], expected \[0, 2\) for num_workers 2"),
    "negative_worker": (lambda p: _save(p, "secondary_workers", np.array([-1], dtype=np.int32)),
                        r"secondary_workers\.npy holds worker ids in \[-1, -1\]"),
    "secondary_on_primary": (lambda p: _save(p, "secondary_workers", np.array([0], dtype=np.int32)),
                             r"secondary_workers\.npy: embedding 2 has a secondary on its primary's worker 0"),
    "bad_indptr": (lambda p: _save(p, "secondary_indptr", np.array([0, 0, 0, 1, 1, 1, 2], dtype=np.int64)),
                   r"secondary_indptr\.npy must run non-decreasing from 0 to len\(secondary_workers\) = 1, "
                   r"got 0\.\.2; re-create it"),
    # its ends are right: the message names where it decreases (it said "got 0..1", a range that looks valid)
    "indptr_decreasing_inside": (lambda p: _save(p, "secondary_indptr", np.array([0, 0, 1, 0, 1, 1, 1], np.int64)),
                                 r"secondary_indptr\.npy must run non-decreasing from 0 to len\(secondary_workers\) "
                                 r"= 1, but it decreases at position 3 \(secondary_indptr\[2\] = 1, "
                                 r"secondary_indptr\[3\] = 0\); re-create it"),
    "missing_array": (lambda p: (p / "embedding_primary.npy").unlink(),
                      r"embedding_primary\.npy not found; re-create it with 'gmp partition'"),
    "corrupt_npy": (lambda p: (p / "secondary_indptr.npy").write_bytes(b"\x93NUMPY garbage"),
                    r"secondary_indptr\.npy is not a readable \.npy array"),
    "truncated_npy": (lambda p: (p / "sample_worker.npy").write_bytes((p / "sample_worker.npy").read_bytes()[:-8]),
                      r"sample_worker\.npy is not a readable \.npy array"),
    "modified_array": (lambda p: _save(p, "sample_worker", np.array([1, 0, 0, 1, 1, 1], dtype=np.int32)),
                       r"the arrays do not match placement_sha256 in manifest\.json"),
    "topology_mismatch": (lambda p: _edit_meta(p, topology={"name": "3", "cost": [[0, 1, 1], [1, 0, 1], [1, 1, 0]]}),
                          r"topology has 3 workers, num_workers is 2"),
    "bad_topology": (lambda p: _edit_meta(p, topology={"cost": [[0, -1], [1, 0]]}),
                     r"invalid topology .*negative"),
    # a hand-edited seed passed the header check, then 'gmp report M -d D' died in numpy's SeedSequence
    "negative_seed": (lambda p: _edit_partitioner(p, seed=-3),
                      r"manifest\.json: partitioner\.seed must be a non-negative integer, got -3; re-create it"),
    "seed_beyond_int64": (lambda p: _edit_partitioner(p, seed=2**63),
                          r"partitioner\.seed must be an integer in \[0, 2\^63\), got 9223372036854775808"),
    # Topology.from_json skipped the length check load_topology makes: 3 machines listed for 2 workers
    "machine_of_wrong_length": (lambda p: _edit_meta(p, topology={"name": "2", "cost": [[0, 1], [1, 0]],
                                                                  "machine_of": [0, 0, 1]}),
                                r"invalid topology \(2: machine_of must list one machine index per worker \(2\), "
                                r"got 3 entries\); re-create it"),
}


def _edit_partitioner(path: Path, **changes) -> None:
    meta = json.loads((path / "manifest.json").read_text())
    meta["partitioner"].update(changes)
    (path / "manifest.json").write_text(json.dumps(meta))


def _drop_key(path: Path, key: str) -> None:
    meta = json.loads((path / "manifest.json").read_text())
    del meta[key]
    (path / "manifest.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("case", sorted(INVALID_CASES))
def test_invalid_manifest_is_refused(golden, case):
    corrupt, message = INVALID_CASES[case]
    corrupt(golden)
    with pytest.raises(ManifestError, match=message) as info:
        load_manifest(golden)
    text = str(info.value)
    assert "\n" not in text
    assert str(golden) in text  # names the file (or directory)


def test_history_round_trips_and_an_edit_is_caught(tmp_path):
    from gmp.manifest import RowHistory

    trained = np.array([True, False, True, True, False, False])
    path = write(tmp_path / "m", history=RowHistory(trained, np.array([1, 4])))
    m = load_manifest(path)
    assert m.history.trained.tolist() == trained.tolist() and m.history.created.tolist() == [1, 4]
    assert np.load(path / "trained_rows.npy").tolist() == [1 + 4 + 8]  # bits 0, 2, 3 in little order
    assert json.loads((path / "manifest.json").read_text())["history"]["created_rows"]["shape"] == [2]
    assert load_manifest(write(tmp_path / "none")).history is None  # not given: unknown
    np.save(path / "trained_rows.npy", np.array([1 + 4 + 8 + 16], dtype=np.uint8))
    with pytest.raises(ManifestError, match=r"trained_rows\.npy / created_rows\.npy do not match history\.sha256"):
        load_manifest(path)
    np.save(path / "trained_rows.npy", np.zeros(2, dtype=np.uint8))
    with pytest.raises(ManifestError, match=r"trained_rows\.npy has shape \(2,\), expected \(1,\) for 6 embeddings"):
        load_manifest(path)
    np.save(path / "trained_rows.npy", np.array([13], dtype=np.uint8))
    np.save(path / "created_rows.npy", np.array([6]))
    with pytest.raises(ManifestError, match=r"created_rows\.npy holds ids outside \[0, 6\)"):
        load_manifest(path)
    with pytest.raises(ManifestError, match="the history must cover 6 rows"):
        write(tmp_path / "bad", history=RowHistory(trained[:5], np.zeros(0, dtype=np.int64)))


def test_duplicate_secondary_is_refused(tmp_path):
    p = Placement.edge_cut(3, [0, 1], [0, 1]).with_secondaries([0, 2, 2], [1, 2])
    path = write_manifest(tmp_path / "m", p, dataset_sha256="x", num_samples=2, num_embeddings=2,
                          topology=homogeneous(3))
    np.save(path / "secondary_workers.npy", np.array([1, 1], dtype=np.int32))
    with pytest.raises(ManifestError, match="embedding 0 lists the same secondary worker twice"):
        load_manifest(path)


def test_dataset_hash_mismatch_is_refused(golden, tmp_path, tiny_rows):
    rows = [r[::-1] for r in tiny_rows][::-1]
    other = tmp_path / "other"
    write_dataset(other, indptr=np.cumsum([0] + [len(r) for r in rows]), indices=np.array([i for r in rows for i in r]),
                  labels=np.zeros(6, dtype=np.float32), dense=None, fields=[], num_embeddings=6,
                  source={"format": "test"}, test_fraction=0.5)
    ds = load_dataset(other)
    with pytest.raises(ManifestError, match=r"was made for dataset sha256 de274a42daaa…, but .*other has sha256 "
                                            r".*re-run 'gmp partition"):
        load_manifest(golden, dataset=ds)


def test_not_a_directory(tmp_path):
    with pytest.raises(ManifestError, match=r"is not a directory; pass a placement manifest directory "
                                            r"\(re-create it with 'gmp partition'\)\.$"):  # the period outside
        load_manifest(tmp_path / "nope")
    with pytest.raises(DatasetError, match=r"nope is not a directory; pass a prepared dataset \(re-create it "
                                           r"with 'gmp data import' or 'gmp data synth'\)\.$"):
        load_dataset(tmp_path / "nope")


def test_write_refuses_existing_and_invalid(tmp_path):
    path = write(tmp_path / "m")
    with pytest.raises(GmpError, match="already exists and is not empty; choose another `out` or pass `overwrite=True`"):
        write(path)
    write(path, overwrite=True)
    bad = Placement.edge_cut(2, [0, 0, 0, 1, 1, 3], [0] * 6)
    with pytest.raises(ManifestError, match="cannot write manifest .*worker ids outside"):
        write(tmp_path / "bad", bad)
    with pytest.raises(ManifestError, match="the placement has 2 workers, the topology 3"):
        write(tmp_path / "bad", topology=homogeneous(3))
    assert not (tmp_path / "bad").exists()


def test_write_is_atomic(tmp_path):
    def explode(tmp: Path):
        (tmp / "report.json").write_text("{}")
        raise RuntimeError("crash while writing the report")

    with pytest.raises(RuntimeError, match="crash"):
        write(tmp_path / "m", report_files=explode)
    assert list(tmp_path.iterdir()) == []  # no half-written directory, no temporary left


def test_report_files_mapping_and_callable(tmp_path):
    path = write(tmp_path / "a", report_files={"report.md": "# hi\n", "x.bin": b"\x00\x01"})
    assert (path / "report.md").read_text() == "# hi\n" and (path / "x.bin").read_bytes() == b"\x00\x01"
    assert json.loads((path / "manifest.json").read_text())["report_files"] == ["report.md", "x.bin"]
    path = write(tmp_path / "b", report_files=lambda tmp: [(tmp / "r.txt").write_text("r") and "r.txt"])
    assert (path / "r.txt").read_text() == "r"


def test_module_docstring_example_is_valid_json():
    import re

    import gmp.manifest

    doc = gmp.manifest.__doc__
    start = doc.index("Example ``manifest.json``::")
    block = doc[start:].split("::", 1)[1]
    text = block[: block.index("\n\n``metrics``")]
    text = re.sub(r'"([0-9a-f]+)\.\.\."', r'"\1"', text)
    obj = json.loads(text)
    assert obj["format"] == "gmp.placement" and obj["schema_version"] == SCHEMA_VERSION
    assert set(obj["arrays"]) == {"sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_round_trip_random_placements(tmp_path_factory, data):
    num_workers = data.draw(st.integers(1, 6))
    n = data.draw(st.integers(0, 20))
    m = data.draw(st.integers(0, 15))
    sw = data.draw(st.lists(st.integers(0, num_workers - 1), min_size=n, max_size=n))
    prim = data.draw(st.lists(st.integers(0, num_workers - 1), min_size=m, max_size=m))
    secs = [sorted(data.draw(st.sets(st.sampled_from([w for w in range(num_workers) if w != prim[e]]),
                                     max_size=num_workers - 1)) if num_workers > 1 else set()) for e in range(m)]
    indptr = np.zeros(m + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(s) for s in secs])
    p = Placement.edge_cut(num_workers, np.array(sw, dtype=np.int32), np.array(prim, dtype=np.int32),
                           method="prop", seed=data.draw(st.integers(0, 9))).with_secondaries(
        indptr, np.array([w for s in secs for w in s], dtype=np.int32))
    out = tmp_path_factory.mktemp("rt") / "m"
    write_manifest(out, p, dataset_sha256="h", num_samples=n, num_embeddings=m, topology=homogeneous(num_workers))
    q = load_manifest(out, mmap=data.draw(st.booleans())).placement
    for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
        assert np.array_equal(getattr(q, name), getattr(p, name)), name
    assert (q.num_workers, q.method, q.seed) == (num_workers, "prop", p.seed)


def test_version_2_records_the_plan_and_the_dataset_name(tmp_path):
    from gmp.manifest import TrainingPlan, read_plan

    metrics = {"batch_size": 64, "embedding_dim": 8}
    plain = load_manifest(write(tmp_path / "a", metrics=metrics, dataset_name="criteo-1m"))
    assert plain.meta["schema_version"] == SCHEMA_VERSION and plain.dataset_name == "criteo-1m"
    assert plain.plan == TrainingPlan(64, 8, None) == read_plan(tmp_path / "a")
    # with a memory budget, the plan's dim is the one the partitioner budgeted rows for
    budgeted = make_placement()
    budgeted = Placement(budgeted.num_workers, budgeted.sample_worker, budgeted.embedding_primary,
                         budgeted.secondary_indptr, budgeted.secondary_workers, method="hybrid",
                         options={"memory_per_worker": 4096, "embedding_dim": 32})
    m = load_manifest(write(tmp_path / "b", budgeted, metrics=metrics))
    assert m.plan == TrainingPlan(64, 32, 4096) and m.dataset_name is None


def test_the_plan_becomes_defaults_and_one_line_names_what_differs():
    from gmp.manifest import TrainingPlan

    plan = TrainingPlan(512, 16, None)
    assert plan.resolve(batch_size=None, embedding_dim=None) == ({"batch_size": 512, "embedding_dim": 16}, None)
    assert plan.resolve(batch_size=512, embedding_dim=16)[1] is None
    values, msg = plan.resolve(batch_size=256, embedding_dim=None)
    assert values == {"batch_size": 256, "embedding_dim": 16}
    assert "batch_size 256 (planned 512)" in msg and "embedding_dim" not in msg and "\n" not in msg
    assert TrainingPlan(None, None, None).resolve(batch_size=None, embedding_dim=8)[0] == {"batch_size": None,
                                                                                         "embedding_dim": 8}
    with pytest.raises(GmpError, match=r"^The 'batch_size' parameter must be an int >= 1, got 0\.$"):
        plan.resolve(batch_size=0, embedding_dim=None)  # refused, not named in a warning first
