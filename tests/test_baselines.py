"""Known-answer tests of the baseline partitioners (metis, metis-bipartite, greedy-stream) and their helpers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmp.errors import MissingDependencyError, PartitionError
from gmp.graph import BipartiteGraph
from gmp.partition import make_options, run_partitioner
from gmp.partition._common import (assign_samples_by_majority, choose_primaries, compact_ids,
                                   count_embedding_workers, enforce_cap, expand_primaries, import_pymetis, place_unused_embeddings,
                                   run_metis,
                                   sample_cap, seeded_order)
from gmp.partition.metis import choose_rows, cooccurrence_csr
from gmp.partition.metis_bipartite import bipartite_csr
from gmp.topology import homogeneous

ROOT = Path(__file__).resolve().parents[1]


def remote_accesses(graph: BipartiteGraph, sample_worker, primary) -> int:
    sw = np.repeat(np.asarray(sample_worker), np.diff(graph.sample_indptr))
    return int(np.count_nonzero(np.asarray(primary)[graph.sample_indices] != sw))


def two_communities(num_samples=400, per=50, degree=5, seed=0, unused=0):
    rng = np.random.default_rng(seed)
    rows = [sorted((rng.choice(per, size=degree, replace=False) + (i % 2) * per).tolist()) for i in range(num_samples)]
    return BipartiteGraph.from_lists(rows, num_embeddings=2 * per + unused)


# ----------------------------------------------------------------------------- helpers
@pytest.mark.parametrize("n, workers, imb, expected", [
    (10, 4, 1.05, 3),      # ceil(2.5 * 1.05) = 3
    (100, 8, 1.05, 14),    # ceil(12.5 * 1.05) = ceil(13.125)
    (100, 4, 1.0, 25),     # exact, no rounding up to 26
    (7, 2, 1.0, 4),        # never below ceil(n / N)
    (0, 3, 1.05, 0),
    (10, 4, 3.9, 10),      # ceil(9.75): the cap never exceeds the items
    (10, 4, 1e5, 10),      # a cap >= n is no cap: n, whatever the value
    (10, 4, 1e300, 10),    # 10 / 4 * 1e300 would overflow an int
    (5_000, 4, 1.7e308, 5_000),
])
def test_sample_cap(n, workers, imb, expected):
    assert sample_cap(n, workers, imb) == expected


@pytest.mark.parametrize("method", ["greedy-stream", "metis", "metis-bipartite", "bicut", "hybrid"])
def test_a_huge_max_imbalance_is_no_cap(method):
    """1e300 overflowed (OverflowError, or a 10 GB soft-count table in hybrid): it is the same as no cap,
    so every sample placement is valid and the manifest's options keep the value given."""
    g = two_communities(num_samples=200)
    p = run_partitioner(method, g, homogeneous(4), seed=0, options={"max_imbalance": 1e300})
    assert p.sample_worker.shape == (200,) and 0 <= p.sample_worker.min() and p.sample_worker.max() < 4
    assert p.options["max_imbalance"] == 1e300


def test_metis_imbalance_is_capped_at_the_number_of_parts(monkeypatch):
    """METIS's ufactor is an int64: metis_imbalance=1e300 overflowed it; N parts is already no constraint."""
    import gmp.partition._common as common

    seen = []
    monkeypatch.setattr(common, "_call_metis", lambda *a, **kw: seen.append(kw["ufactor"]) or np.zeros(a[1].size - 1, dtype=np.int32))
    monkeypatch.setattr(common, "_metis_entry", lambda pymetis, recursive: object())
    xadj, adjncy = np.array([0, 1, 2]), np.array([1, 0])
    common.run_metis(xadj, adjncy, 4, vertex_weights=None, edge_weights=None, seed=0, imbalance=1e300, recursive=False)
    assert seen == [3000]   # 1000 * (4 - 1)


def test_assign_samples_by_majority_hand_traced():
    # primaries: e0,e1 on 0; e2,e3 on 1; e4 unplaced
    primary = np.array([0, 0, 1, 1, -1], dtype=np.int32)
    g = BipartiteGraph.from_lists([[0, 1], [2, 3], [0, 2], [4]], num_embeddings=5)
    # s0 -> 0 (2 vs 0); s1 -> 1; s2 ties 1:1, loads 1:1 -> lowest id 0; s3 no votes, worker 0 full (cap 2) -> 1
    out = assign_samples_by_majority(g.sample_indptr, g.sample_indices, primary, 2, cap=2)
    np.testing.assert_array_equal(out, [0, 1, 0, 1])
    assert out.dtype == np.int32


def test_assign_samples_respects_cap_and_order():
    primary = np.zeros(3, dtype=np.int32)  # everything on worker 0
    g = BipartiteGraph.from_lists([[0], [1], [2], [0, 1]], num_embeddings=3)
    out = assign_samples_by_majority(g.sample_indptr, g.sample_indices, primary, 2, cap=2,
                                     order=np.array([3, 2, 1, 0]))
    np.testing.assert_array_equal(out, [1, 1, 0, 0])  # samples 3 and 2 came first and got worker 0
    with pytest.raises(PartitionError, match="cannot hold"):
        assign_samples_by_majority(g.sample_indptr, g.sample_indices, primary, 2, cap=1)


def test_count_and_choose_primaries_tie_breaking_and_cap():
    g = BipartiteGraph.from_lists([[0, 1], [0, 1], [1, 2], [2], [3]], num_embeddings=5)
    sw = np.array([0, 1, 1, 0, 1], dtype=np.int32)
    ids, local = compact_ids(g.sample_indices, 6)
    np.testing.assert_array_equal(ids, [0, 1, 2, 3])
    np.testing.assert_array_equal(local, [0, 1, 2, 3, -1, -1])
    counts = count_embedding_workers(g.sample_indptr, g.sample_indices, sw, np.arange(5, dtype=np.int32), 5, 2)
    np.testing.assert_array_equal(counts, [[1, 1], [1, 2], [1, 1], [0, 1], [0, 0]])
    # a compact numbering counts only the selected ids
    _, sel = compact_ids(g.sample_indices, 5, select=np.array([1, 3]))
    np.testing.assert_array_equal(count_embedding_workers(g.sample_indptr, g.sample_indices, sw, sel, 2, 2),
                                  [[1, 2], [0, 1]])
    # e0 tie, loads 0:0 -> 0; e1 -> 1 (2 > 1); e2 tie, loads 1:1 -> 0; e3 -> 1; e4 unused stays -1
    np.testing.assert_array_equal(choose_primaries(counts), [0, 1, 0, 1, -1])
    # cap 1 per worker: e0 -> 0, e1 -> 1, e2: both full -> least loaded (tie) -> 0, e3: both at cap -> 1
    capped = choose_primaries(counts, cap=1)
    np.testing.assert_array_equal(capped[:2], [0, 1])
    # pre-placed primaries are kept and count as load
    pre = np.array([1, -1, -1, -1, -1], dtype=np.int32)
    np.testing.assert_array_equal(choose_primaries(counts, pre), [1, 1, 0, 1, -1])
    # load placed elsewhere breaks ties: worker 0 already holds 5 -> e0 and e2 go to 1
    np.testing.assert_array_equal(choose_primaries(counts, initial_load=np.array([5, 0])), [1, 1, 1, 1, -1])


def test_place_unused_embeddings_least_loaded_first():
    primary = np.array([0, 0, -1, 1, -1, -1, -1], dtype=np.int32)
    # loads 2:1 -> e2 to 1 (2:2) -> e4 to 0 (3:2) -> e5 to 1 (3:3) -> e6 to 0
    np.testing.assert_array_equal(place_unused_embeddings(primary, 2), [0, 0, 1, 1, 0, 1, 0])


@pytest.mark.parametrize("seed", range(6))
def test_place_unused_embeddings_equals_the_plain_greedy(seed):
    # the compiled kernel switches to round-robin once loads are equal; the plain greedy is the reference
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    primary = rng.integers(-1, n, int(rng.integers(1, 400))).astype(np.int32)
    primary[rng.random(primary.size) < 0.5] = -1
    ref = primary.copy()
    load = np.bincount(ref[ref >= 0], minlength=n)
    for e in range(ref.size):
        if ref[e] < 0:
            ref[e] = int(np.argmin(load))  # lowest id among the least loaded
            load[ref[e]] += 1
    np.testing.assert_array_equal(place_unused_embeddings(primary, n), ref)
    # the one-pass form from compact rows: the same as scattering them into -1s first
    ids = np.flatnonzero(rng.random(ref.size) < 0.3).astype(np.int32)
    compact = rng.integers(-1, n, ids.size).astype(np.int32)
    full = np.full(ref.size, -1, dtype=np.int32)
    full[ids] = compact
    np.testing.assert_array_equal(expand_primaries(ids, compact, ref.size, n), place_unused_embeddings(full, n))


def test_enforce_cap_moves_only_the_excess():
    a = np.array([0, 0, 0, 0, 1, 2], dtype=np.int32)
    out = enforce_cap(a.copy(), 3, 2, np.random.default_rng(0))
    assert np.bincount(out, minlength=3).tolist() == [2, 2, 2]
    assert np.count_nonzero(out != a) == 2
    within = np.array([0, 1, 2, 0], dtype=np.int32)
    np.testing.assert_array_equal(enforce_cap(within.copy(), 3, 2, np.random.default_rng(0)), within)


def test_seeded_order_is_a_permutation():
    o = seeded_order(50, np.random.default_rng(3))
    assert sorted(o.tolist()) == list(range(50))
    np.testing.assert_array_equal(o, seeded_order(50, np.random.default_rng(3)))


# ----------------------------------------------------------------------------- metis building blocks
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cooccurrence_csr_matches_scipy_reference(seed):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    rows = [sorted(rng.choice(30, size=int(rng.integers(0, 7)), replace=False).tolist()) for _ in range(150)]
    g = BipartiteGraph.from_lists(rows, num_embeddings=35)
    subset = np.sort(rng.choice(150, size=60, replace=False)).astype(np.int64)
    xadj, adjncy, w, vertex_embedding = cooccurrence_csr(g.sample_indptr, g.sample_indices, subset, 35)
    used = sorted({e for i in subset for e in rows[i]})
    np.testing.assert_array_equal(vertex_embedding, used)  # only embeddings the rows use: no phantom vertices
    ours = sp.csr_array((w, adjncy, xadj), shape=(len(used), len(used))).toarray()
    sub = BipartiteGraph.from_lists([rows[i] for i in subset], num_embeddings=35)
    ref = sub.cooccurrence().toarray()[np.ix_(used, used)]
    np.testing.assert_array_equal(ours, ref)
    assert np.all(w > 0)


def test_cooccurrence_tiny_by_hand(tiny_graph):
    # rows [0,1] [1,2] [0,2] [3,4] [4,5] [2,3]: each pair occurs once
    xadj, adjncy, w, ve = cooccurrence_csr(tiny_graph.sample_indptr, tiny_graph.sample_indices, np.arange(6), 6)
    assert ve.tolist() == [0, 1, 2, 3, 4, 5]
    neighbours = {v: sorted(adjncy[xadj[v]: xadj[v + 1]].tolist()) for v in range(6)}
    assert neighbours == {0: [1, 2], 1: [0, 2], 2: [0, 1, 3], 3: [2, 4], 4: [3, 5], 5: [4]}
    assert set(w.tolist()) == {1}


def test_choose_rows_bounds():
    indptr = np.arange(0, 101 * 4, 4, dtype=np.int64)  # 100 samples of degree 4: 6 pairs each
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(choose_rows(indptr, rng, max_pairs=600), np.arange(100))
    rows = choose_rows(indptr, rng, max_pairs=100)
    assert rows.size == 16 and np.all(np.diff(rows) > 0)  # 16 * 6 = 96 <= 100 < 17 * 6
    assert choose_rows(indptr, rng, max_pairs=10**6, max_samples=7).size == 7


def test_bipartite_csr_by_hand():
    g = BipartiteGraph.from_lists([[0, 2], [2]], num_embeddings=4)  # e1, e3 unused
    local = np.array([2, -1, 3, -1], dtype=np.int64)
    xadj, adjncy = bipartite_csr(g.sample_indptr, g.sample_indices, local, np.array([1, 2]))
    assert xadj.tolist() == [0, 2, 3, 4, 6]
    assert adjncy.tolist() == [2, 3, 3, 0, 0, 1]


# ----------------------------------------------------------------------------- greedy-stream
def greedy_stream_reference(rows, num_embeddings, num_workers, cap, order):
    """Slow, obviously-correct restatement of the streaming rule."""
    held = [set() for _ in range(num_workers)]
    load = [0] * num_workers
    counts = np.zeros((num_embeddings, num_workers), dtype=np.int64)
    sw = [0] * len(rows)
    for i in order:
        candidates = [w for w in range(num_workers) if load[w] < cap]
        best = max(candidates, key=lambda w: (len(held[w] & set(rows[i])), -load[w], -w))
        sw[i] = best
        load[best] += 1
        held[best] |= set(rows[i])
        for e in rows[i]:
            counts[e, best] += 1
    primary = [-1] * num_embeddings
    pload = [0] * num_workers
    for e in range(num_embeddings):
        if counts[e].sum():
            primary[e] = max(range(num_workers), key=lambda w: (counts[e, w], -pload[w], -w))
            pload[primary[e]] += 1
    for e in range(num_embeddings):
        if primary[e] < 0:
            primary[e] = min(range(num_workers), key=lambda w: (pload[w], w))
            pload[primary[e]] += 1
    return sw, primary


def test_greedy_stream_hand_traced(tiny_rows):
    g = BipartiteGraph.from_lists(tiny_rows, num_embeddings=8)
    p = run_partitioner("greedy-stream", g, homogeneous(2), seed=0,
                        options={"order": "dataset", "max_imbalance": 1.0})
    # s0 -> 0 (all tie, lowest id); s1 shares e1 -> 0; s2 shares e0,e2 -> 0 (now full, cap 3);
    # s3, s4, s5 -> 1. Primaries: e0..e2 on 0 (e2: 2 samples on 0, 1 on 1), e3..e5 on 1;
    # unused e6, e7 spread: loads 3:3 -> e6 to 0, e7 to 1.
    np.testing.assert_array_equal(p.sample_worker, [0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(p.embedding_primary, [0, 0, 0, 1, 1, 1, 0, 1])
    assert remote_accesses(g, p.sample_worker, p.embedding_primary) == 1


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("order", ["dataset", "random"])
def test_greedy_stream_matches_reference(seed, order):
    rng = np.random.default_rng(100 + seed)
    rows = [sorted(rng.choice(40, size=int(rng.integers(0, 6)), replace=False).tolist()) for _ in range(90)]
    g = BipartiteGraph.from_lists(rows, num_embeddings=45)
    workers = 2 + seed % 3
    p = run_partitioner("greedy-stream", g, homogeneous(workers), seed=seed, options={"order": order})
    stream_order = (seeded_order(90, np.random.default_rng(seed)) if order == "random" else range(90))
    sw, primary = greedy_stream_reference(rows, 45, workers, sample_cap(90, workers, 1.05), list(stream_order))
    np.testing.assert_array_equal(p.sample_worker, sw)
    np.testing.assert_array_equal(p.embedding_primary, primary)


def test_greedy_stream_embedding_cap():
    g = two_communities(num_samples=200)
    p = run_partitioner("greedy-stream", g, homogeneous(4), seed=0, options={"embedding_max_imbalance": 1.0})
    assert np.bincount(p.embedding_primary, minlength=4).max() <= 25


# ----------------------------------------------------------------------------- metis
@pytest.mark.parametrize("method", ["metis", "metis-bipartite"])
@pytest.mark.parametrize("num_workers", [2, 4])
def test_metis_separates_planted_communities(method, num_workers):
    g = two_communities(unused=3)
    p = run_partitioner(method, g, homogeneous(num_workers), seed=1)
    if num_workers == 2:  # the best cut is 0 and METIS finds it
        assert remote_accesses(g, p.sample_worker, p.embedding_primary) == 0
    # samples of one community never share a worker with the other community
    comm = np.arange(g.num_samples) % 2
    for w in range(num_workers):
        assert len(set(comm[p.sample_worker == w].tolist())) <= 1
    assert np.bincount(p.sample_worker, minlength=num_workers).max() <= sample_cap(400, num_workers, 1.05)


def test_metis_row_subset_places_unseen_embeddings_by_majority():
    g = two_communities(num_samples=300, per=60, degree=3, seed=4, unused=5)
    p = run_partitioner("metis", g, homogeneous(2), seed=0, options={"max_samples": 20})
    assert p.info["rows_in_cooccurrence_graph"] == 20
    assert p.info["embeddings_placed_after_metis"] > 0
    degree = np.bincount(g.sample_indices, minlength=g.num_embeddings)
    assert p.info["metis_vertices"] + p.info["embeddings_placed_after_metis"] == np.count_nonzero(degree)
    # every used embedding sits with the majority of its samples here (communities are clean)
    counts = count_embedding_workers(g.sample_indptr, g.sample_indices, p.sample_worker,
                                     np.arange(g.num_embeddings, dtype=np.int32), g.num_embeddings, 2)
    used = degree > 0
    assert np.all(counts[used, p.embedding_primary[used]] == counts[used].max(axis=1))
    # the 5 unused ids even out the primaries (water-filling onto the lighter worker)
    before = np.bincount(p.embedding_primary[:-5], minlength=2)
    after = np.bincount(p.embedding_primary, minlength=2)
    assert after.max() - after.min() == max(abs(int(before[0] - before[1])) - 5, (int(before.sum()) + 5) % 2)


def test_metis_excludes_zero_degree_embeddings():
    g = BipartiteGraph.from_lists([[0, 2], [2, 4], [0, 4], [6, 8]], num_embeddings=10)
    p = run_partitioner("metis", g, homogeneous(2), seed=0)
    assert p.info["metis_vertices"] == 5  # 0, 2, 4, 6, 8 only
    assert sorted(np.bincount(p.embedding_primary, minlength=2).tolist()) == [5, 5]


def test_metis_bipartite_memory_guard():
    g = two_communities(num_samples=50)
    with pytest.raises(PartitionError, match=r"metis-bipartite: METIS on 50 samples .* needs about"):
        run_partitioner("metis-bipartite", g, homogeneous(2), seed=0, options={"max_memory_gib": 1e-6})


@pytest.mark.parametrize("name, options, match", [
    ("metis", {"max_imbalance": 0.9}, "max_imbalance must be a number >= 1.0"),
    ("metis", {"max_pairs": 0}, "max_pairs must be a positive integer"),
    ("metis", {"ptype": "bisect"}, "ptype must be one of kway, recursive"),
    ("metis-bipartite", {"max_memory_gib": -1}, "max_memory_gib must be > 0"),
    ("greedy-stream", {"order": "sorted"}, "order must be one of random, dataset"),
    ("greedy-stream", {"embedding_max_imbalance": 0.5}, "embedding_max_imbalance must be"),
    ("greedy-stream", {"rounds": 3}, "has no option"),
    # JSON's true is a Python int: -O max_imbalance=true ran as 1 and was recorded as true
    ("greedy-stream", {"max_imbalance": True}, "max_imbalance must be a number >= 1.0"),
    ("hybrid", {"max_imbalance": True}, "max_imbalance must be a number >= 1.0"),
    ("hybrid", {"replication_budget": True}, "replication_budget must be a fraction"),
    ("hybrid", {"rounds": True}, "rounds must be an integer >= 0"),
    ("hybrid", {"saturation": True}, "saturation must be a finite number > 0"),
    ("metis", {"max_pairs": True}, "max_pairs must be a positive integer"),
    ("metis-bipartite", {"max_memory_gib": True}, "max_memory_gib must be > 0"),
    ("bicut", {"balance_weight": True}, "balance_weight must be"),
    ("hypergraph", {"max_pins": True}, "max_pins must be"),
    ("kaminpar", {"threads": True}, "threads must be an integer >= 1"),
    # KaMinPar needs epsilon > 0: 1.0 passed validation and then raised KaMinPar's own ValueError
    ("kaminpar", {"kaminpar_imbalance": 1.0}, r"kaminpar_imbalance must be a number > 1.0"),
])
def test_options_are_validated(name, options, match):
    with pytest.raises(PartitionError, match=match):
        make_options(name, options)


def test_missing_pymetis_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)
    with pytest.raises(MissingDependencyError, match="pip install pymetis"):
        import_pymetis()


@pytest.mark.parametrize("method", ["metis", "metis-bipartite", "greedy-stream"])
def test_one_worker_and_empty_graph(method):
    g = BipartiteGraph.from_lists([[0, 1], [1]], num_embeddings=3)
    p = run_partitioner(method, g, homogeneous(1), seed=0)
    assert p.sample_worker.tolist() == [0, 0] and p.embedding_primary.tolist() == [0, 0, 0]
    empty = BipartiteGraph.from_lists([], num_embeddings=2)
    p = run_partitioner(method, empty, homogeneous(3), seed=0)
    assert p.sample_worker.size == 0 and sorted(p.embedding_primary.tolist()) == [0, 1]


# ----------------------------------------------------------------------------- benchmark argument parsing
def test_bench_parses_method_variants():
    spec = importlib.util.spec_from_file_location("partition_bench", ROOT / "bench" / "partition_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    got = bench.parse_methods("random,hybrid:rounds=1,hybrid:rounds=5,replication_budget=0,greedy-stream")
    assert got == [("random", "random", {}), ("hybrid:rounds=1", "hybrid", {"rounds": 1}),
                   ("hybrid:rounds=5,replication_budget=0", "hybrid", {"rounds": 5, "replication_budget": 0}),
                   ("greedy-stream", "greedy-stream", {})]
    assert bench.parse_size("10m") == 10_000_000 and bench.parse_size("100k") == 100_000


def test_bench_table_has_a_row_per_method_and_says_did_not_run():
    spec = importlib.util.spec_from_file_location("partition_bench", ROOT / "bench" / "partition_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    ok = {"metrics": {"batch_remote_reads": 10, "remote_accesses": 20, "epoch_unique_remote": 5,
                      "reduction_vs_random": {"batch_remote_reads": 0.5, "remote_accesses": 0.25,
                                              "epoch_unique_remote": 0.0},
                      "balance": {"samples": 1.05, "rows_held": 1.2}},
          "partition_seconds": 1.25, "peak_rss_bytes": 2**30}
    rows = [{"dataset": "d", "label": "metis", "result": ok},
            {"dataset": "d", "label": "metis-bipartite", "result": {"error": "needs about 65 GiB"}}]
    lines = bench.format_table(rows).splitlines()
    assert len(lines) == 4 and all(line.count("|") == 14 for line in lines)
    # cpu (s) is "-" for results without cpu_seconds (older JSON); vs random signed as docs/report.md signs it
    assert lines[2] == "| d | metis | 10 | -50.0% | 20 | -25.0% | 5 | 0.0% | 1.050 | 1.200 | 1.2 | - | 1.00 |"
    assert "did not run: needs about 65 GiB" in lines[3]


def majority_reference(rows, primary, num_workers, cap, order):
    """Slow restatement of assign_samples_by_majority."""
    load = [0] * num_workers
    out = [0] * len(rows)
    for i in order:
        votes = [sum(1 for e in rows[i] if primary[e] == w) for w in range(num_workers)]
        best = max((w for w in range(num_workers) if load[w] < cap), key=lambda w: (votes[w], -load[w], -w))
        out[i] = best
        load[best] += 1
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_assign_samples_by_majority_matches_reference(data):
    num_workers = data.draw(st.integers(1, 5))
    num_embeddings = data.draw(st.integers(1, 12))
    rows = data.draw(st.lists(st.lists(st.integers(0, num_embeddings - 1), max_size=5, unique=True), max_size=25))
    primary = np.array(data.draw(st.lists(st.integers(-1, num_workers - 1), min_size=num_embeddings,
                                          max_size=num_embeddings)), dtype=np.int32)
    imbalance = data.draw(st.sampled_from([1.0, 1.05, 1.5]))
    cap = sample_cap(len(rows), num_workers, imbalance)
    order = data.draw(st.permutations(range(len(rows))))
    g = BipartiteGraph.from_lists(rows, num_embeddings=num_embeddings)
    got = assign_samples_by_majority(g.sample_indptr, g.sample_indices, primary, num_workers, cap,
                                     order=np.array(order, dtype=np.int64))
    assert got.tolist() == majority_reference(rows, primary, num_workers, cap, order)
    assert np.bincount(got, minlength=num_workers).max(initial=0) <= cap


@settings(max_examples=60, deadline=None)
@given(assignment=st.lists(st.integers(0, 3), max_size=40), imbalance=st.sampled_from([1.0, 1.1, 2.0]),
       seed=st.integers(0, 100))
def test_enforce_cap_properties(assignment, imbalance, seed):
    a = np.array(assignment, dtype=np.int32)
    cap = sample_cap(a.size, 4, imbalance)
    out = enforce_cap(a.copy(), 4, cap, np.random.default_rng(seed))
    before, after = np.bincount(a, minlength=4), np.bincount(out, minlength=4)
    assert after.max(initial=0) <= cap
    # only the excess above the cap moves
    assert np.count_nonzero(out != a) == int(np.maximum(before - cap, 0).sum())


@pytest.mark.parametrize("recursive", [False, True])
def test_metis_through_ctypes_equals_pymetis(recursive, monkeypatch):
    """run_metis calls METIS's entry points through ctypes (the GIL released, so the multilevel start's
    candidate threads overlap); the parts must be pymetis's own, weights, ncuts and niter included."""
    import scipy.sparse as sp

    from gmp.partition import _common as C

    pymetis = import_pymetis()
    if sys.platform.startswith("linux"):  # pymetis's Linux wheels export METIS's symbols
        assert C._metis_entry(pymetis, recursive) is not None
    rng = np.random.default_rng(7)
    for trial in range(4):
        n = int(rng.integers(40, 800))
        r, c = rng.integers(0, n, 6 * n), rng.integers(0, n, 6 * n)
        a = sp.coo_matrix((rng.integers(1, 5, r.size), (r, c)), shape=(n, n)).tocsr()
        a = (a + a.T).tocsr()
        a.setdiag(0)
        a.eliminate_zeros()
        a.sort_indices()
        xadj, adj = a.indptr.astype(np.int64), a.indices.astype(np.int64)
        vw = rng.integers(1, 9, n).astype(np.int64)
        for weights in ({"vertex_weights": None, "edge_weights": None},
                        {"vertex_weights": vw, "edge_weights": a.data.astype(np.int64)}):
            kw = dict(seed=trial, imbalance=1.05, recursive=recursive, ncuts=1 + trial % 2,
                      niter=None if trial % 2 else 3, **weights)
            fast = run_metis(xadj, adj, 5, **kw)
            with monkeypatch.context() as m:
                m.setattr(C, "_metis_entry", lambda *args: None)  # pymetis's own call
                ref = run_metis(xadj, adj, 5, **kw)
            np.testing.assert_array_equal(fast, ref)


def test_metis_calls_from_threads_equal_the_calls_one_by_one():
    """METIS runs with the GIL released, and its random generator is one global state: calls from
    several threads (the multilevel start's candidates) must still give each call's own parts."""
    from concurrent.futures import ThreadPoolExecutor

    import scipy.sparse as sp

    rng = np.random.default_rng(11)
    n = 4000
    r, c = rng.integers(0, n, 8 * n), rng.integers(0, n, 8 * n)
    a = sp.coo_matrix((np.ones(r.size, dtype=np.int64), (r, c)), shape=(n, n)).tocsr()
    a = (a + a.T).tocsr()
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    xadj, adj = a.indptr.astype(np.int64), a.indices.astype(np.int64)

    def one(seed):
        return run_metis(xadj, adj, 8, vertex_weights=None, edge_weights=None, seed=seed, imbalance=1.03,
                         recursive=False)

    alone = [one(s) for s in range(6)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        together = list(pool.map(one, range(6)))
    for x, y in zip(alone, together):
        np.testing.assert_array_equal(x, y)
