"""Metrics: hand-computed known answers, a slow pure-Python reference, invariances."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gmp import metrics as M
from gmp.errors import PlacementError
from gmp.graph import BipartiteGraph
from gmp.placement import Placement
from gmp.topology import Topology, homogeneous

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- the hand-built case
# 9 samples over 7 embedding ids; id 6 never occurs (degree 0, must count nowhere).
ROWS = [[0, 1], [0, 2], [1, 3], [0, 3], [2, 4], [4, 5], [0, 5], [3, 5], [1, 5]]
SAMPLE_WORKER = [0, 0, 1, 0, 1, 2, 2, 1, 2]  # w0: s0 s1 s3 | w1: s2 s4 s7 | w2: s5 s6 s8
PRIMARY = [0, 1, 2, 1, 2, 0, 1]
# cost[i, j]: moving a row from worker i to worker j (asymmetric on purpose)
COST = [[0, 1, 4], [2, 0, 8], [3, 5, 0]]
# secondaries: e2 on {0, 1}, e5 on {2}, unused e6 on {0}
SEC_INDPTR = [0, 0, 0, 2, 2, 2, 3, 4]
SEC_WORKERS = [0, 1, 2, 0]


@pytest.fixture
def graph() -> BipartiteGraph:
    return BipartiteGraph.from_lists(ROWS, num_embeddings=7)


@pytest.fixture
def topo() -> Topology:
    return Topology(np.array(COST, dtype=float), name="asym")


@pytest.fixture
def edge_cut() -> Placement:
    return Placement.edge_cut(3, SAMPLE_WORKER, PRIMARY, method="hand", seed=0)


@pytest.fixture
def with_secondaries(edge_cut) -> Placement:
    return edge_cut.with_secondaries(SEC_INDPTR, SEC_WORKERS)


def test_known_answers_without_secondaries(graph, topo, edge_cut):
    # Remote edges: w0 reads e1, e2, e3; w1 e2, e4, e5; w2 e5, e0, e5, e1, e5  -> 11
    assert M.remote_accesses(graph, edge_cut) == 11
    # weighted: 2*C[1,0] + C[2,0] + 2*C[2,1] + C[0,1] + 4*C[0,2] + C[1,2] = 4+3+10+1+16+8
    assert M.remote_accesses_weighted(graph, edge_cut, topo) == 42.0
    # distinct per worker: {1,2,3} + {2,4,5} + {0,1,5}
    assert M.epoch_unique_remote(graph, edge_cut) == 9
    # B=2: w0 [s0 s1]{1,2} [s3]{3}; w1 [s2 s4]{2,4} [s7]{5}; w2 [s5 s6]{0,5} [s8]{1,5}
    assert M.batch_remote_reads(graph, edge_cut, 2) == 10
    assert M.batch_remote_pushes(graph, edge_cut, 2) == 10  # no secondaries: pushes == reads
    assert M.batch_remote_reads(graph, edge_cut, 1) == 11  # every sample its own batch
    assert M.batch_remote_reads(graph, edge_cut, 3) == 9  # one batch per worker = the epoch
    assert M.traffic_matrix(graph, edge_cut, 2).tolist() == [[0, 1, 3], [2, 0, 1], [1, 2, 0]]
    assert M.replication_factor(edge_cut, graph) == 1.0
    bal = M.balance(graph, edge_cut, 2)
    assert bal == pytest.approx({"samples": 1.0, "edges": 1.0, "rows_held": 1.0,
                                 "traffic_served": 4 / (10 / 3), "traffic_received": 4 / (10 / 3)})


def test_known_answers_with_secondaries(graph, topo, with_secondaries):
    p = with_secondaries
    # Remote edges: w0 e1, e3; w1 e4, e5; w2 e0, e1
    assert M.remote_accesses(graph, p) == 6
    # 2*C[1,0] + C[2,1] + C[0,1] + C[0,2] + C[1,2] = 4 + 5 + 1 + 4 + 8
    assert M.remote_accesses_weighted(graph, p, topo) == 22.0
    assert M.epoch_unique_remote(graph, p) == 6
    assert M.batch_remote_reads(graph, p, 2) == 6
    # pushes only depend on primaries: w0 {1,2}+{3}; w1 {2,4}+{5}; w2 {0,5}+{1,5}
    assert M.batch_remote_pushes(graph, p, 2) == 10
    assert M.traffic_matrix(graph, p, 2).tolist() == [[0, 1, 1], [2, 0, 1], [0, 1, 0]]
    # active rows: 6 primaries + 3 secondaries (e6's secondary is a phantom and does not count)
    assert M.replication_factor(p, graph) == 1.5
    bal = M.balance(graph, p, 2)
    assert bal["rows_held"] == 1.0 and bal["traffic_served"] == 1.5 and bal["traffic_received"] == 1.0
    loads = M.per_worker(graph, p, 2)
    assert loads == {
        "samples": [3, 3, 3], "edges": [6, 6, 6], "primaries": [2, 2, 2], "secondaries": [1, 1, 1],
        "rows_held": [3, 3, 3], "remote_accesses": [2, 2, 2], "epoch_unique_remote": [2, 2, 2],
        "batch_remote_reads": [2, 2, 2], "batch_remote_pushes": [3, 3, 4], "traffic_served": [2, 3, 1],
        "traffic_received": [2, 2, 2],
    }


def test_num_train_restricts_batch_metrics(graph, edge_cut):
    # samples s0..s5 only: w0 {1,2}+{3}; w1 [s2 s4] {2,4}; w2 [s5] {5}
    assert M.batch_remote_reads(graph, edge_cut, 2, num_train=6) == 6
    assert M.batch_remote_reads(graph, edge_cut, 2, num_train=0) == 0
    with pytest.raises(PlacementError, match="num_train must lie in"):
        M.batch_remote_reads(graph, edge_cut, 2, num_train=10)


def test_compute_metrics_known_answers(graph, topo, edge_cut, with_secondaries):
    m = M.compute_metrics(graph, with_secondaries, topo, batch_size=2, embedding_dim=8, reference=edge_cut,
                          partition_seconds=1.5, peak_rss_bytes=1000)
    assert m["remote_accesses"] == 6 and m["remote_accesses_weighted"] == 22.0
    assert m["epoch_unique_remote"] == 6 and m["batch_remote_reads"] == 6 and m["batch_remote_pushes"] == 10
    assert m["batch_size"] == 2
    assert m["batch_remote_reads_bytes"] == 6 * 8 * 4 and m["batch_remote_pushes_bytes"] == 10 * 8 * 4
    assert m["reduction_vs_random"] == pytest.approx({
        "remote_accesses": 1 - 6 / 11, "remote_accesses_weighted": 1 - 22 / 42, "epoch_unique_remote": 1 - 6 / 9,
        "batch_remote_reads": 1 - 6 / 10, "batch_remote_pushes": 0.0})
    assert m["batch_remote_reads_weighted"] == 2 * 2 + 5 + 1 + 4 + 8  # [1,0]x2, [2,1], [0,1], [0,2], [1,2]
    assert m["replication_factor"] == 1.5 and m["num_active_embeddings"] == 6 and m["num_secondaries"] == 3
    assert m["traffic_matrix"] == [[0, 1, 1], [2, 0, 1], [0, 1, 0]]
    assert m["partition_seconds"] == 1.5 and m["peak_rss_bytes"] == 1000
    assert set(m["balance"]) == {"samples", "edges", "rows_held", "traffic_served", "traffic_received"}


def test_compute_metrics_training_range(graph, topo, edge_cut):
    m = M.compute_metrics(graph, edge_cut, topo, batch_size=2, reference=edge_cut, num_train=6)
    # samples s0..s5: w0 [s0 s1]{1,2} [s3]{3}; w1 [s2 s4]{2,4}; w2 [s5]{5}
    assert m["train"] == {"num_train": 6, "remote_accesses": 6, "epoch_unique_remote": 6,
                          "batch_remote_reads": 6, "batch_remote_pushes": 6}
    assert m["batch_remote_reads"] == 10  # the headline metrics still cover every sample
    assert M.compute_metrics(graph, edge_cut, topo, batch_size=2, reference=edge_cut)["train"] is None


def test_compute_metrics_default_reference_is_seeded_random(graph, topo, edge_cut):
    from gmp.partition import run_partitioner

    rnd = run_partitioner("random", graph, topo, seed=7)
    m = M.compute_metrics(graph, edge_cut, topo, batch_size=2, seed=7)
    assert m["reference"]["placement"] == "random (seed 7)"
    assert m["reference"]["batch_remote_reads"] == M.batch_remote_reads(graph, rnd, 2)
    # the random placement scored against itself: zero reduction
    same = M.compute_metrics(graph, rnd, topo, batch_size=2, seed=7)
    assert all(v == 0.0 for v in same["reduction_vs_random"].values())


def test_homogeneous_weighted_equals_unweighted(graph, edge_cut):
    assert M.remote_accesses_weighted(graph, edge_cut, homogeneous(3)) == M.remote_accesses(graph, edge_cut)


def test_mismatched_shapes_and_arguments(graph, topo):
    small = Placement.edge_cut(3, [0, 1], [0, 1, 2, 0, 1, 2, 0])
    with pytest.raises(PlacementError, match="placement covers 2 samples"):
        M.remote_accesses(graph, small)
    p = Placement.edge_cut(3, SAMPLE_WORKER, PRIMARY)
    with pytest.raises(PlacementError, match="batch_size must be >= 1"):
        M.batch_remote_reads(graph, p, 0)
    with pytest.raises(PlacementError, match="topology has 2 workers"):
        M.compute_metrics(graph, p, homogeneous(2), reference=p)


# The two-community graph of conftest.py: samples 0-2 use rows {0,1,2}, samples 3-4 rows {3,4,5}, sample 5 the
# bridge [2, 3]. With samples 0-2 and rows 0-2 on worker 0 and the rest on worker 1, sample 5 (worker 1) reads one
# remote row (2): 1 remote read for any batch size.
TWO_COMMUNITIES = [[0, 1], [1, 2], [0, 2], [3, 4], [4, 5], [2, 3]]


def _invalid_placements():
    """(placement, message): worker ids out of range, in each of the three arrays."""
    good = Placement.edge_cut(2, [0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1])
    return [
        (Placement.edge_cut(2, [0, 0, 0, 1, 1, 5], [0, 0, 0, 1, 1, 1]),
         r"sample_worker holds worker ids outside \[0, 2\): \[0, 5\]\."),
        (Placement.edge_cut(2, [0, 0, 0, 1, 1, -1], [0, 0, 0, 1, 1, 1]),
         r"sample_worker holds worker ids outside \[0, 2\): \[-1, 1\]\."),
        (good.with_secondaries([0, 0, 0, 1, 1, 1, 1], [7]),
         r"secondary_workers holds worker ids outside \[0, 2\): \[7, 7\]\."),
        (good.with_secondaries([0, 0, 0, 1, 1, 1, 1], [0]), r"embedding 2 has a secondary on its primary's worker"),
    ]


@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("call", ["compute_metrics", "batch_remote_reads", "batch_remote_pushes", "traffic",
                                  "traffic_with_train", "edge_traffic_matrix", "remote_accesses",
                                  "epoch_unique_remote", "traffic_matrix", "per_worker", "balance",
                                  "replication_factor"])
def test_every_public_metric_validates_the_placement(call, case):
    """compute_metrics and the traffic functions never called Placement.check: a sample on worker 5 of 2 gave
    batch_remote_reads 2, silently wrong (the kernels index per-worker arrays by these ids unchecked)."""
    g = BipartiteGraph.from_lists(TWO_COMMUNITIES, num_embeddings=6)
    placement, message = _invalid_placements()[case]
    calls = {
        "compute_metrics": lambda p: M.compute_metrics(g, p, homogeneous(2), batch_size=2, reference=p),
        "batch_remote_reads": lambda p: M.batch_remote_reads(g, p, 2),
        "batch_remote_pushes": lambda p: M.batch_remote_pushes(g, p, 2),
        "traffic": lambda p: M.traffic(g, p, 2),
        "traffic_with_train": lambda p: M.traffic_with_train(g, p, 2, num_train=4),
        "edge_traffic_matrix": lambda p: M.edge_traffic_matrix(g, p),
        "remote_accesses": lambda p: M.remote_accesses(g, p),
        "epoch_unique_remote": lambda p: M.epoch_unique_remote(g, p),
        "traffic_matrix": lambda p: M.traffic_matrix(g, p, 2),
        "per_worker": lambda p: M.per_worker(g, p, 2),
        "balance": lambda p: M.balance(g, p, 2),
        "replication_factor": lambda p: M.replication_factor(p, g),
    }
    with pytest.raises(PlacementError, match=message):
        calls[call](placement)
    # the same placement with its ids in range: scored as by hand (the check refuses nothing valid)
    good = Placement.edge_cut(2, [0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1])
    assert M.batch_remote_reads(g, good, 2) == 1 and M.remote_accesses(g, good) == 1


def test_a_primary_out_of_range_is_refused_not_a_crash():
    """A primary on worker 99 of 2 crashed the process (segmentation fault) in compute_metrics; run in a child
    process so that the old crash fails this test instead of the test run."""
    code = ("from gmp import metrics as M\n"
            "from gmp.errors import PlacementError\n"
            "from gmp.graph import BipartiteGraph\n"
            "from gmp.placement import Placement\n"
            "from gmp.topology import homogeneous\n"
            f"g = BipartiteGraph.from_lists({TWO_COMMUNITIES!r}, num_embeddings=6)\n"
            "p = Placement.edge_cut(2, [0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 99])\n"
            "try:\n"
            "    M.compute_metrics(g, p, homogeneous(2), batch_size=2, reference=p)\n"
            "except PlacementError as exc:\n"
            "    print('refused:', exc)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    assert res.stdout.strip() == "refused: embedding_primary holds worker ids outside [0, 2): [0, 99]."


def test_a_reference_over_other_workers_is_refused(graph, edge_cut):
    other = Placement.edge_cut(2, np.zeros(9, dtype=np.int32), np.zeros(7, dtype=np.int32))
    with pytest.raises(PlacementError, match="reference places rows on 2 workers, the placement on 3"):
        M.compute_metrics(graph, edge_cut, homogeneous(3), batch_size=2, reference=other)


def test_degree_distribution_skips_unused_ids(graph):
    d = M.degree_distribution(graph)
    assert sum(d["counts"]) == 6  # e6 has degree 0
    deg = np.array([4, 3, 2, 3, 2, 4])
    edges = np.array(d["bin_edges"])
    assert d["counts"] == np.histogram(deg, bins=edges)[0].tolist()


# --------------------------------------------------------------------------- slow reference
def reference_metrics(rows, sample_worker, primary, secondaries, cost, batch_size):
    """Pure-Python, dict-and-set implementation of every metric (independent of the kernels)."""
    n = len(cost)
    local = [{primary[e]} | set(secondaries[e]) for e in range(len(primary))]
    degree = [0] * len(primary)
    for r in rows:
        for e in r:
            degree[e] += 1
    remote = 0
    weighted = 0.0
    for i, r in enumerate(rows):
        w = sample_worker[i]
        for e in r:
            if w not in local[e]:
                remote += 1
                weighted += cost[primary[e]][w]
    per_worker_samples = [[i for i in range(len(rows)) if sample_worker[i] == w] for w in range(n)]
    epoch = 0
    reads = pushes = 0
    matrix = [[0] * n for _ in range(n)]
    for w in range(n):
        used = set()
        for i in per_worker_samples[w]:
            used |= set(rows[i])
        epoch += len([e for e in used if w not in local[e]])
        samples = per_worker_samples[w]
        for start in range(0, len(samples), batch_size):
            chunk = set()
            for i in samples[start:start + batch_size]:
                chunk |= set(rows[i])
            for e in chunk:
                if w not in local[e]:
                    reads += 1
                    matrix[primary[e]][w] += 1
                if primary[e] != w:
                    pushes += 1
    active = [e for e in range(len(primary)) if degree[e] > 0]
    held = sum(1 + len(secondaries[e]) for e in active)
    return {
        "remote_accesses": remote, "remote_accesses_weighted": weighted, "epoch_unique_remote": epoch,
        "batch_remote_reads": reads, "batch_remote_pushes": pushes, "traffic_matrix": matrix,
        "replication_factor": held / len(active) if active else 1.0,
    }


@st.composite
def instances(draw):
    num_workers = draw(st.integers(1, 5))
    num_embeddings = draw(st.integers(1, 12))
    num_samples = draw(st.integers(0, 25))
    rows = [sorted(draw(st.sets(st.integers(0, num_embeddings - 1), max_size=min(5, num_embeddings))))
            for _ in range(num_samples)]
    sample_worker = [draw(st.integers(0, num_workers - 1)) for _ in range(num_samples)]
    primary = [draw(st.integers(0, num_workers - 1)) for _ in range(num_embeddings)]
    secondaries = [sorted(draw(st.sets(st.sampled_from([w for w in range(num_workers) if w != primary[e]]),
                                       max_size=num_workers - 1)) if num_workers > 1 else set())
                   for e in range(num_embeddings)]
    cost = [[0 if i == j else draw(st.integers(1, 9)) for j in range(num_workers)] for i in range(num_workers)]
    batch_size = draw(st.integers(1, 6))
    return rows, sample_worker, primary, secondaries, cost, batch_size


def build(rows, sample_worker, primary, secondaries, num_workers):
    graph = BipartiteGraph.from_lists(rows, num_embeddings=len(primary))
    indptr = np.zeros(len(primary) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(s) for s in secondaries])
    workers = np.array([w for s in secondaries for w in s], dtype=np.int32)
    placement = Placement.edge_cut(num_workers, np.array(sample_worker, dtype=np.int32),
                                   np.array(primary, dtype=np.int32)).with_secondaries(indptr, workers)
    placement.check(num_samples=len(rows), num_embeddings=len(primary))
    return graph, placement


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_fast_metrics_match_reference(inst):
    rows, sample_worker, primary, secondaries, cost, batch_size = inst
    n = len(cost)
    graph, placement = build(rows, sample_worker, primary, secondaries, n)
    topo = Topology(np.array(cost, dtype=float))
    ref = reference_metrics(rows, sample_worker, primary, secondaries, cost, batch_size)
    m = M.compute_metrics(graph, placement, topo, batch_size=batch_size, reference=placement)
    for key in ("remote_accesses", "epoch_unique_remote", "batch_remote_reads", "batch_remote_pushes",
                "traffic_matrix"):
        assert m[key] == ref[key], key
    assert m["remote_accesses_weighted"] == pytest.approx(ref["remote_accesses_weighted"])
    assert m["replication_factor"] == pytest.approx(ref["replication_factor"])
    # the individual functions agree with compute_metrics
    assert M.remote_accesses(graph, placement) == ref["remote_accesses"]
    assert M.batch_remote_pushes(graph, placement, batch_size) == ref["batch_remote_pushes"]
    assert M.replication_factor(placement, graph) == pytest.approx(ref["replication_factor"])


def _train_reference(rows, sample_worker, primary, secondaries, cost, batch_size, k):
    """The reference over the first k samples only (the training range)."""
    ref = reference_metrics(rows[:k], sample_worker[:k], primary, secondaries, cost, batch_size)
    return {"num_train": k, **{key: ref[key] for key in ("remote_accesses", "epoch_unique_remote",
                                                         "batch_remote_reads", "batch_remote_pushes")}}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.floats(0, 1))
def test_training_range_from_the_same_pass_matches_reference(inst, frac):
    # compute_metrics takes the training counts from its one pass over all samples (as each worker's run
    # leaves the training prefix): they must equal the reference over rows[:k] alone
    rows, sample_worker, primary, secondaries, cost, batch_size = inst
    k = int(round(frac * len(rows)))
    graph, placement = build(rows, sample_worker, primary, secondaries, len(cost))
    m = M.compute_metrics(graph, placement, Topology(np.array(cost, dtype=float)), batch_size=batch_size,
                          reference=placement, num_train=k)
    assert m["train"] == _train_reference(rows, sample_worker, primary, secondaries, cost, batch_size, k)
    assert M.batch_remote_reads(graph, placement, batch_size, num_train=k) == m["train"]["batch_remote_reads"]


def test_training_range_threaded(monkeypatch):
    import numba

    monkeypatch.setattr(M, "PARALLEL_MIN_EDGES", 0)  # the threaded path on a small graph
    rng = np.random.default_rng(5)
    rows = [sorted(set(rng.integers(0, 60, size=5).tolist())) for _ in range(500)]
    sw = rng.integers(0, 4, size=500).tolist()
    primary = rng.integers(0, 4, size=60).tolist()
    secondaries = [sorted(set(rng.integers(0, 4, size=1).tolist()) - {primary[e]}) for e in range(60)]
    cost = (np.ones((4, 4)) - np.eye(4)).tolist()
    graph, placement = build(rows, sw, primary, secondaries, 4)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        for k in (0, 1, 137, 499, 500):
            m = M.compute_metrics(graph, placement, Topology(np.array(cost)), batch_size=16, reference=placement,
                                  num_train=k)
            assert m["train"] == _train_reference(rows, sw, primary, secondaries, cost, 16, k), k
    finally:
        numba.set_num_threads(before)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.randoms(use_true_random=False))
def test_metrics_invariant_under_relabelling_workers(inst, rnd):
    rows, sample_worker, primary, secondaries, cost, batch_size = inst
    n = len(cost)
    perm = list(range(n))
    rnd.shuffle(perm)
    graph, p = build(rows, sample_worker, primary, secondaries, n)
    _, q = build(rows, [perm[w] for w in sample_worker], [perm[w] for w in primary],
                 [sorted(perm[w] for w in s) for s in secondaries], n)
    c = np.array(cost, dtype=float)
    c2 = np.zeros_like(c)
    for i in range(n):
        for j in range(n):
            c2[perm[i], perm[j]] = c[i, j]
    a = M.compute_metrics(graph, p, Topology(c), batch_size=batch_size, reference=p)
    b = M.compute_metrics(graph, q, Topology(c2), batch_size=batch_size, reference=q)
    for key in M.COMM_METRICS + ("replication_factor",):
        assert a[key] == pytest.approx(b[key]), key
    assert a["balance"] == pytest.approx(b["balance"])
    ta, tb = np.array(a["traffic_matrix"]), np.array(b["traffic_matrix"])
    assert np.array_equal(tb[np.ix_(perm, perm)], ta)


def test_random_graph_large_enough_to_chunk():
    # a bigger seeded instance (many chunks per worker) against the reference
    rng = np.random.default_rng(3)
    rows = [sorted(set(rng.integers(0, 40, size=4).tolist())) for _ in range(300)]
    sw = rng.integers(0, 4, size=300).tolist()
    primary = rng.integers(0, 4, size=40).tolist()
    secondaries = [sorted(set(rng.integers(0, 4, size=2).tolist()) - {primary[e]}) if e % 3 == 0 else []
                   for e in range(40)]
    cost = (np.ones((4, 4)) - np.eye(4)).tolist()
    graph, placement = build(rows, sw, primary, secondaries, 4)
    for b in (1, 7, 32, 1000):
        ref = reference_metrics(rows, sw, primary, secondaries, cost, b)
        assert M.batch_remote_reads(graph, placement, b) == ref["batch_remote_reads"]
        assert M.batch_remote_pushes(graph, placement, b) == ref["batch_remote_pushes"]


@pytest.mark.parametrize("num_workers", [M.PACKED_MAX_WORKERS, M.PACKED_MAX_WORKERS + 4])
def test_many_workers_match_reference(num_workers):
    """The pass reads one packed word per row up to PACKED_MAX_WORKERS workers (the last worker's
    primary in the word's top bits) and scans the secondary CSR beyond: both against the reference."""
    n = num_workers
    rng = np.random.default_rng(n)
    rows = [sorted(set(rng.integers(0, 90, size=6).tolist())) for _ in range(600)]
    sw = rng.integers(0, n, size=600).tolist()
    primary = rng.integers(0, n, size=90).tolist()
    primary[:3] = [n - 1, n - 2, 0]  # the highest worker ids as primaries
    secondaries = [sorted(set(rng.integers(0, n, size=e % 4).tolist()) - {primary[e]}) for e in range(90)]
    secondaries[1] = sorted(set(range(n)) - {primary[1]})  # a row every worker holds
    cost = (np.ones((n, n)) - np.eye(n)).tolist()
    graph, placement = build(rows, sw, primary, secondaries, n)
    ref = reference_metrics(rows, sw, primary, secondaries, cost, 8)
    m = M.compute_metrics(graph, placement, Topology(np.array(cost)), batch_size=8, reference=placement)
    for key in ("remote_accesses", "epoch_unique_remote", "batch_remote_reads", "batch_remote_pushes",
                "traffic_matrix"):
        assert m[key] == ref[key], key


def test_thread_count_does_not_change_counts(monkeypatch):
    import numba

    monkeypatch.setattr(M, "PARALLEL_MIN_EDGES", 0)  # take the threaded path even on a small graph

    rng = np.random.default_rng(11)
    rows = [sorted(set(rng.integers(0, 50, size=5).tolist())) for _ in range(400)]
    sw = rng.integers(0, 5, size=400).tolist()
    primary = rng.integers(0, 5, size=50).tolist()
    secondaries = [sorted(set(rng.integers(0, 5, size=2).tolist()) - {primary[e]}) for e in range(50)]
    graph, placement = build(rows, sw, primary, secondaries, 5)
    before = numba.get_num_threads()
    try:
        results = []
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            results.append(M.traffic(graph, placement, 16))
    finally:
        numba.set_num_threads(before)
    for a, b in zip(*results):
        assert np.array_equal(a, b)
    ref = reference_metrics(rows, sw, primary, secondaries, [[0] * 5] * 5, 16)
    assert int(results[0].read.sum()) == ref["batch_remote_reads"]


def test_reference_values_are_cached_per_settings(graph, topo, edge_cut, with_secondaries, monkeypatch):
    calls = []
    real = M._comm_metrics
    monkeypatch.setattr(M, "_comm_metrics", lambda *a: calls.append(a[1]) or real(*a))
    M.compute_metrics(graph, with_secondaries, topo, batch_size=2, reference=edge_cut)
    M.compute_metrics(graph, edge_cut, topo, batch_size=2, reference=edge_cut)
    assert sum(c is edge_cut for c in calls) == 2  # once as the reference, once scored itself
    m = M.compute_metrics(graph, with_secondaries, topo, batch_size=3, reference=edge_cut)
    assert sum(c is edge_cut for c in calls) == 3  # another batch size: recomputed
    assert m["reference"]["batch_remote_reads"] == 9


# -- scoring: ROC AUC's ranks without scipy.stats -----------------------------------------


def test_average_ranks_equal_scipys_rankdata_and_auc_sklearns():
    """Tie groups at their mean rank, value for value as scipy.stats.rankdata("average"); roc_auc equals
    sklearn's on tied and untied scores, and is nan with one class or a nan score."""
    from scipy.stats import rankdata
    from sklearn.metrics import roc_auc_score

    from gmp.scoring import average_ranks, roc_auc

    rng = np.random.default_rng(7)
    for t in range(200):
        n = int(rng.integers(2, 400))
        x = rng.integers(0, 1 + t % 9, n) / 3.0 if t % 2 else rng.random(n)
        assert np.array_equal(average_ranks(x), rankdata(x)), t
        y = rng.random(n) < 0.3
        if 0 < y.sum() < n:
            assert roc_auc(y, x) == pytest.approx(roc_auc_score(y, x), abs=1e-12), t
    assert np.isnan(roc_auc([1, 1], [0.2, 0.3])) and np.isnan(roc_auc([0, 1], [np.nan, 0.3]))


def test_scoring_does_not_import_scipy_stats():
    """An evaluating process (every rank of gmp train) no longer pays scipy.stats' import (1-2 s)."""
    code = ("import sys; from gmp.scoring import roc_auc; roc_auc([0, 1, 1], [0.1, 0.5, 0.5]); "
            "assert 'scipy.stats' not in sys.modules, 'scipy.stats imported'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
