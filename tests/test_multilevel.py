"""Tests of the multilevel start of ``hybrid`` (gmp/partition/_multilevel.py) and of the ``kaminpar`` baseline.

Planted structures with known answers: communities carried only by rare
values (every community also uses the same hot values, which carry no
community information), and a two-level machine/worker structure; the
multilevel start recovers both exactly, the paper's flat sweep (``levels=1``)
does not. Hard caps at the projection level and after the sweeps;
determinism per seed and with 1 and 2 numba threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gmp.errors import MissingDependencyError, PartitionError
from gmp.graph import BipartiteGraph
from gmp.metrics import batch_remote_reads
from gmp.partition import _multilevel as ML
from gmp.partition import run_partitioner
from gmp.partition import _hybrid_kernels as K
from gmp.partition._common import (assign_samples_by_majority, choose_primaries, compact_ids, sample_cap,
                                   seeded_order)
from gmp.partition._multilevel import default_coarse_pairs
from gmp.topology import hierarchical, homogeneous

NO_2D = dict(replication_budget=0.0)
# 120 samples per worker: with the default batch of 512 (> m) every row costs one fetch per worker whatever its
# count, the soft count is flat and every row counts as saturated (docs/hybrid.md, "Small graphs"); a batch of
# 8 makes the planted graphs' rare rows (degree <= 10) the signal rows and the hot ones (degree ~300) saturated
SMALL = dict(replication_budget=0.0, batch_size=8)


def rare_value_communities(rng, *, num_communities=4, samples_per=120, rare_per_sample=4, users_per_rare=3,
                           num_hot=6, hot_per_sample=4, super_groups=None, super_per_sample=0):
    """Samples of community c use ``rare_per_sample`` values of c's own pool, each value used by about
    ``users_per_rare`` samples, plus ``hot_per_sample`` of ``num_hot`` values every community uses.

    ``super_groups`` (list of community lists): the communities of a group also share a pool of rare
    values (``super_per_sample`` per sample), a second, coarser level of structure.
    Returns ``(graph, community of each sample)``.
    """
    pool = samples_per * rare_per_sample // users_per_rare
    next_id = num_hot
    own = []
    for _ in range(num_communities):
        own.append(np.arange(next_id, next_id + pool))
        next_id += pool
    shared = {}
    for group in super_groups or []:
        ids = np.arange(next_id, next_id + pool)
        next_id += pool
        for c in group:
            shared[c] = ids
    rows, community = [], []
    for c in range(num_communities):
        for _ in range(samples_per):
            row = set(rng.choice(own[c], rare_per_sample, replace=False).tolist())
            row |= set(rng.choice(num_hot, hot_per_sample, replace=False).tolist())
            if c in shared and super_per_sample:
                row |= set(rng.choice(shared[c], super_per_sample, replace=False).tolist())
            rows.append(sorted(row))
            community.append(c)
    perm = rng.permutation(len(rows))  # communities interleaved in id order
    return (BipartiteGraph.from_lists([rows[i] for i in perm], next_id), np.asarray(community)[perm])


def recovered(sample_worker, community):
    """True when the workers are exactly the communities (a bijection between the two labellings)."""
    pairs = set(zip(community.tolist(), sample_worker.tolist()))
    return len(pairs) == len(set(community.tolist())) == len(set(sample_worker.tolist()))


# --------------------------------------------------------------------------
# planted structures
# --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_communities_carried_only_by_rare_values_recovered_exactly(seed):
    g, comm = rare_value_communities(np.random.default_rng(seed))
    p = run_partitioner("hybrid", g, homogeneous(4), seed=seed, options=SMALL)
    assert recovered(p.sample_worker, comm)
    # every shared rare value's primary on its community's worker: the only remote reads of values used
    # twice or more are of hot values (a value with one user may sit elsewhere when the primary balance
    # term outweighs its single fetch)
    hot = 6
    degree = np.bincount(g.sample_indices, minlength=g.num_embeddings)
    remote = p.sample_worker[np.repeat(np.arange(g.num_samples), np.diff(g.sample_indptr))] != \
        p.embedding_primary[g.sample_indices]
    assert not np.any(remote & (g.sample_indices >= hot) & (degree[g.sample_indices] >= 2))


@pytest.mark.parametrize("max_imbalance", [2.0, 4.0])
def test_a_looser_cap_still_recovers_the_communities(max_imbalance):
    """A looser --max-imbalance let METIS return unbalanced signal-graph parts, which the sweeps' Eq. 4 balance
    term then pulled back to even, splitting the communities (the adversarial pass's planted 4-community day:
    84 batch reads at 1.05, 1,499 at 2): the slack must not make the placement worse."""
    for seed in range(3):
        g, comm = rare_value_communities(np.random.default_rng(seed))
        tight = run_partitioner("hybrid", g, homogeneous(4), seed=seed, options=SMALL)
        loose = run_partitioner("hybrid", g, homogeneous(4), seed=seed, options=dict(SMALL, max_imbalance=max_imbalance))
        assert recovered(loose.sample_worker, comm)
        assert batch_remote_reads(g, loose, 8) <= batch_remote_reads(g, tight, 8)


@pytest.mark.parametrize("inter_cost", [1.0, 10.0])
def test_machines_of_unequal_size_are_placed_as_the_flat_topology_of_their_costs(inter_cost):
    """3 + 1 workers on two machines: the machines-first start split the signal graph into two equal halves,
    one of them for a single worker, and the sweeps pulled the loads back through the communities (the
    adversarial pass: 10,203 batch reads against the flat 7,105 at one cost; 970 cost-weighted reads against
    408 at an inter-machine cost of 10). Such a topology is now placed as the flat one with the same costs,
    to the array; so is one whose machines change no cost."""
    from gmp.topology import Topology

    cost = np.ones((4, 4)) - np.eye(4)
    cost[3, :3] = cost[:3, 3] = inter_cost
    g, comm = rare_value_communities(np.random.default_rng(0))
    machines = run_partitioner("hybrid", g, Topology(cost, machine_of=np.array([0, 0, 0, 1])), seed=0, options=SMALL)
    flat = run_partitioner("hybrid", g, Topology(cost), seed=0, options=SMALL)
    assert np.array_equal(machines.sample_worker, flat.sample_worker)
    assert np.array_equal(machines.embedding_primary, flat.embedding_primary)
    if inter_cost == 1.0:
        assert recovered(machines.sample_worker, comm)
    even = np.ones((4, 4)) - np.eye(4)  # two machines of 2 workers at one cost: no cost tells them apart
    two = run_partitioner("hybrid", g, Topology(even, machine_of=np.array([0, 0, 1, 1])), seed=0, options=SMALL)
    assert np.array_equal(two.sample_worker, run_partitioner("hybrid", g, Topology(even), seed=0,
                                                             options=SMALL).sample_worker)


def test_flat_sweep_misses_the_rare_value_communities():
    # the paper's sweep from a random start: hot values outvote the rare ones, communities stay split
    hits = 0
    for seed in range(5):
        g, comm = rare_value_communities(np.random.default_rng(seed))
        p = run_partitioner("hybrid", g, homogeneous(4), seed=seed, options=dict(SMALL, levels=1))
        hits += recovered(p.sample_worker, comm)
    assert hits == 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_two_level_machine_worker_structure_recovered_exactly(seed):
    # communities (0, 1) and (2, 3) also share rare values: on 2 machines x 2 workers each community gets
    # a worker and each pair a machine
    g, comm = rare_value_communities(np.random.default_rng(seed), super_groups=[[0, 1], [2, 3]],
                                     super_per_sample=2)
    topo = hierarchical(2, 2)
    p = run_partitioner("hybrid", g, topo, seed=seed, options=SMALL)
    assert recovered(p.sample_worker, comm)
    machine = np.asarray(topo.machine_of)[p.sample_worker]
    assert len(set(machine[comm <= 1].tolist())) == 1 and len(set(machine[comm >= 2].tolist())) == 1
    assert machine[comm == 0][0] != machine[comm == 2][0]


# --------------------------------------------------------------------------
# hard caps at every level
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def skewed_graph():
    # skewed ids and uneven communities: METIS balances row degrees, not samples, so the projection's caps bind
    rng = np.random.default_rng(3)
    ids = np.minimum(rng.zipf(1.4, size=(6000, 6)) - 1, 1999)
    big = rng.random(6000) < 0.6  # one community holds 60% of the samples
    ids[big, :3] = 2000 + rng.integers(0, 300, size=(int(big.sum()), 3))
    return BipartiteGraph.from_lists([sorted(set(r.tolist())) for r in ids], 2600)


@pytest.mark.parametrize("topo", [homogeneous(8), hierarchical(2, 4)], ids=["flat8", "2x4"])
@pytest.mark.parametrize("rounds", [0, 3])
@pytest.mark.parametrize("max_imbalance", [1.0, 1.05, 1.3])
def test_caps_hold_at_projection_and_after_sweeps(skewed_graph, topo, rounds, max_imbalance):
    g = skewed_graph
    n = topo.num_workers
    p = run_partitioner("hybrid", g, topo, seed=1,
                        options=dict(NO_2D, rounds=rounds, max_imbalance=max_imbalance))
    used = np.bincount(g.sample_indices, minlength=g.num_embeddings) > 0
    assert np.bincount(p.sample_worker, minlength=n).max() <= sample_cap(g.num_samples, n, max_imbalance)
    assert np.bincount(p.embedding_primary[used], minlength=n).max() <= sample_cap(int(used.sum()), n,
                                                                                   max_imbalance)
    assert p.info["multilevel"]["candidates"][p.info["multilevel"]["chosen"]]["vertices"] > 0
    for r in p.info["rounds"]:  # the projection (round 0) and every round within the caps
        assert r["sample_imbalance"] <= sample_cap(g.num_samples, n, max_imbalance) / (g.num_samples / n) + 1e-12


def test_project_respects_caps_even_when_all_rows_pick_one_worker():
    g, _ = rare_value_communities(np.random.default_rng(0))
    indptr, indices = np.asarray(g.sample_indptr), np.asarray(g.sample_indices).astype(np.int32)
    row_worker = np.zeros(g.num_embeddings, dtype=np.int32)  # every row on worker 0
    cap = sample_cap(g.num_samples, 4, 1.05)
    pcap = sample_cap(g.num_embeddings, 4, 1.05)
    sw, prim, count = ML.project(indptr, indices, row_worker, 4, cap, pcap, np.random.default_rng(0))
    expect = np.zeros((g.num_embeddings, 4), dtype=np.int64)
    np.add.at(expect, (indices, np.repeat(sw, np.diff(indptr))), 1)
    np.testing.assert_array_equal(count, expect)
    assert np.bincount(sw, minlength=4).max() == cap
    assert np.bincount(prim[prim >= 0], minlength=4).max() <= pcap


# --------------------------------------------------------------------------
# pieces
# --------------------------------------------------------------------------
@pytest.mark.parametrize("seed,workers,imbalance", [(0, 4, 1.05), (1, 8, 1.0), (2, 3, 1.2), (3, 64, 1.05)])
def test_project_equals_the_majority_rule_of_the_baselines(seed, workers, imbalance):
    """The two-pass projection (favourite masks, then the capped seeded pass) places every sample
    where :func:`assign_samples_by_majority` (one pass, the baselines' rule) places it, also when
    the caps bind (skewed rows, imbalance 1.0), and its counts/primaries are the plain ones."""
    rng = np.random.default_rng(seed)
    num_rows = 400
    ids = np.minimum(rng.zipf(1.4, size=(3000, 7)) - 1, num_rows - 1)
    g = BipartiteGraph.from_lists([sorted(set(r.tolist())) for r in ids], num_rows)
    indptr, indices = np.asarray(g.sample_indptr), np.asarray(g.sample_indices).astype(np.int32)
    row_worker = np.where(rng.random(num_rows) < 0.6, rng.integers(0, workers, num_rows), -1).astype(np.int32)
    row_worker[:5] = 0  # the hottest rows all on worker 0: worker 0 fills up first
    cap = sample_cap(g.num_samples, workers, imbalance)
    pcap = sample_cap(num_rows, workers, imbalance)
    sw, prim, count = ML.project(indptr, indices, row_worker, workers, cap, pcap, np.random.default_rng(7))
    order = seeded_order(g.num_samples, np.random.default_rng(7))
    expect = assign_samples_by_majority(indptr, indices, row_worker, workers, cap, order=order)
    np.testing.assert_array_equal(sw, expect)
    assert np.bincount(sw, minlength=workers).max() <= cap
    counts = np.zeros((num_rows, workers), dtype=np.int64)
    np.add.at(counts, (indices, np.repeat(sw, np.diff(indptr))), 1)
    np.testing.assert_array_equal(count, counts)
    np.testing.assert_array_equal(prim, choose_primaries(counts.astype(np.int32), cap=pcap))


def test_used_ids_and_degree_match_compact_ids_and_bincount():
    rng = np.random.default_rng(3)
    indices = rng.choice(np.array([2, 3, 5, 7, 11, 40]), size=500).astype(np.int32)
    ids, local, degree = K.used_ids_and_degree(indices, np.int64(50))
    ref_ids, ref_local = compact_ids(indices, 50)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(local, ref_local)
    np.testing.assert_array_equal(degree, np.bincount(indices, minlength=50)[ref_ids])
    out = np.empty_like(indices)
    K.remap_parallel(indices, local, out)
    np.testing.assert_array_equal(ids[out], indices)


def test_id_space_kernels_against_numpy():
    """used_ids_and_degree and expand_indptr on a sparse id space (ids at its edges) against numpy."""
    rng = np.random.default_rng(5)
    num = 3 * (1 << 20) + 17
    pool = np.concatenate([rng.choice(num, 300, replace=False), [0, num - 1]]).astype(np.int32)
    indices = rng.choice(pool, 5000).astype(np.int32)
    indices[:pool.size] = pool  # every pool id used
    ids, local, degree = K.used_ids_and_degree(indices, np.int64(num))
    ref_ids = np.unique(indices)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(degree, np.bincount(indices, minlength=num)[ref_ids])
    ref_local = np.full(num, -1, dtype=np.int32)
    ref_local[ref_ids] = np.arange(ref_ids.size)
    np.testing.assert_array_equal(local, ref_local)
    lengths = rng.integers(0, 4, ids.size)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    full_lengths = np.zeros(num, dtype=np.int64)
    full_lengths[ids] = lengths
    np.testing.assert_array_equal(K.expand_indptr(indptr, ids, np.int64(num)),
                                  np.concatenate([[0], np.cumsum(full_lengths)]))


def test_signal_band():
    deg = np.array([1, 2, 2, 3, 5, 900])
    # m = 1000 samples per worker, b = 100: hi = 4 * m / b = 40; 4 rows in [2, 40] > 3 allowed -> lo = 3
    assert ML.signal_band(deg, 8000, 8, 100, saturation=4.0, max_vertices=3) == (3, 40)
    assert ML.signal_band(deg, 8000, 8, 100, saturation=4.0, max_vertices=10) == (2, 40)
    # m < batch: one batch of m samples, hi = saturation
    assert ML.signal_band(deg, 80, 8, 512, saturation=4.0, max_vertices=10) == (2, 4)


def test_signal_graph_counts_cooccurrence_of_band_rows():
    # rows 0 (degree 1), 1, 2 (degree 3), 3 (degree 2), 4 (degree 4 > hi)
    g = BipartiteGraph.from_lists([[0, 1, 2, 4], [1, 2, 4], [1, 3, 4], [2, 3, 4]], 5)
    deg = np.bincount(g.sample_indices, minlength=5)
    xadj, adjncy, w, rows, used = ML.signal_graph(np.asarray(g.sample_indptr), np.asarray(g.sample_indices),
                                                  deg, 2, 3, np.random.default_rng(0), 10**6)
    assert rows.tolist() == [1, 2, 3] and used == 4
    edges = {(int(rows[u]), int(rows[adjncy[k]])): int(w[k]) for u in range(3) for k in range(xadj[u], xadj[u + 1])}
    assert edges == {(1, 2): 2, (2, 1): 2, (1, 3): 1, (3, 1): 1, (2, 3): 1, (3, 2): 1}


def clustered_signal_graph(cluster_worker):
    """4 clusters of 2 signal rows (A = rows 0-1, B = 2-3, C = 4-5, D = 6-7; inner edge weight 10) joined by
    the light edges A-B (1), B-C (1) and C-D (2); 10 samples per cluster use its two rows and one row of
    their own (8 + i, off the graph). ``cluster_worker``: the worker of A, B, C, D."""
    xadj, adjncy, weights = [0], [], []
    edges = {(0, 1): 10, (2, 3): 10, (4, 5): 10, (6, 7): 10, (1, 2): 1, (3, 4): 1, (5, 6): 2}
    for v in range(8):
        for (a, b), w in sorted(edges.items()):
            if v in (a, b):
                adjncy.append(b if v == a else a)
                weights.append(w)
        xadj.append(len(adjncy))
    rows = [[2 * c, 2 * c + 1, 8 + 10 * c + i] for c in range(4) for i in range(10)]
    g = BipartiteGraph.from_lists(rows, 48)
    part = np.repeat(np.asarray(cluster_worker, dtype=np.int32), 2)
    return (np.asarray(xadj, dtype=np.int64), np.asarray(adjncy, dtype=np.int64), np.asarray(weights, dtype=np.int64),
            part, g)


def rebalance(xadj, adjncy, weights, part, g, num_workers, cap):
    indptr, indices = np.asarray(g.sample_indptr), np.asarray(g.sample_indices).astype(np.int32)
    vertex_row = np.arange(8, dtype=np.int32)
    row_worker = np.full(g.num_embeddings, -1, dtype=np.int8)
    row_worker[vertex_row] = part
    favourites = ML.favourite_workers(indptr, indices, row_worker, num_workers)
    return ML.rebalance_clusters(xadj, adjncy, weights, part, favourites, row_worker, vertex_row, indptr, indices,
                                 num_workers, cap)


def test_rebalance_moves_the_cluster_that_cuts_least():
    # A, B, C on worker 0 hold 30 samples' favourite rows, above the cap of 21 (40 samples, 2 workers, 1.05):
    # moving C to worker 1 lowers the cut (its edge to D, 2, becomes internal; B-C, 1, is cut); A or B would
    # raise it. Afterwards 20 samples follow each worker.
    xadj, adjncy, weights, part, g = clustered_signal_graph([0, 0, 0, 1])
    cap = sample_cap(g.num_samples, 2, 1.05)
    assert cap == 21
    new, info = rebalance(xadj, adjncy, weights, part, g, 2, cap)
    assert new.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert info == {"overloaded": 1, "clusters": 3, "moves": 1, "samples_moved": 10}
    assert part.tolist() == [0, 0, 0, 0, 0, 0, 1, 1]  # the input is not changed


def test_rebalance_leaves_a_partition_within_the_cap_alone():
    xadj, adjncy, weights, part, g = clustered_signal_graph([0, 0, 1, 1])
    new, info = rebalance(xadj, adjncy, weights, part, g, 2, sample_cap(g.num_samples, 2, 1.05))
    assert new is part and info["moves"] == 0 and info["overloaded"] == 0


def test_rebalance_moves_nothing_that_does_not_fit():
    # all four clusters on worker 0 of 3 workers (cap ceil(40 / 3 * 1.05) = 14): a cluster of 10 fits on
    # worker 1, then one on worker 2; worker 0 keeps 20, above the cap, and nothing more fits anywhere
    xadj, adjncy, weights, part, g = clustered_signal_graph([0, 0, 0, 0])
    cap = sample_cap(g.num_samples, 3, 1.05)
    assert cap == 14
    new, info = rebalance(xadj, adjncy, weights, part, g, 3, cap)
    assert info["moves"] == 2 and info["samples_moved"] == 20
    assert np.bincount(new, minlength=3).tolist() == [4, 2, 2]


def test_default_coarse_pairs():
    assert default_coarse_pairs(10_000) == 2_000_000
    assert default_coarse_pairs(2_000_000) == 4_000_000
    assert default_coarse_pairs(45_840_617) == 24_000_000


# --------------------------------------------------------------------------
# determinism
# --------------------------------------------------------------------------
def test_same_seed_same_result_and_levels_option(skewed_graph):
    a = run_partitioner("hybrid", skewed_graph, homogeneous(4), seed=5, options=dict(rounds=2))
    b = run_partitioner("hybrid", skewed_graph, homogeneous(4), seed=5, options=dict(rounds=2))
    for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.options["levels"] == 2 and a.info["multilevel"] is not None
    flat = run_partitioner("hybrid", skewed_graph, homogeneous(4), seed=5, options=dict(rounds=2, levels=1))
    assert flat.info["multilevel"] is None


def test_identical_with_one_and_two_threads():
    code = textwrap.dedent("""
        import hashlib, numpy as np
        from gmp.graph import BipartiteGraph
        from gmp.partition import run_partitioner
        from gmp.topology import hierarchical, homogeneous
        rng = np.random.default_rng(5)
        ids = np.minimum(rng.zipf(1.3, size=(9000, 6)) - 1, 2999)
        g = BipartiteGraph.from_lists([sorted(set(r.tolist())) for r in ids], 3500)
        h = hashlib.sha256()
        for topo in (homogeneous(8), hierarchical(2, 4)):
            p = run_partitioner("hybrid", g, topo, seed=9, options=dict(rounds=3, replication_budget=0.02))
            for a in (p.sample_worker, p.embedding_primary, p.secondary_indptr, p.secondary_workers):
                h.update(a.tobytes())
        print(h.hexdigest())
    """)
    outs = []
    for threads in ("1", "2"):
        env = {**__import__("os").environ, "NUMBA_NUM_THREADS": threads}
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout.strip())
    assert outs[0] == outs[1]


@pytest.mark.parametrize("bad,match", [
    (dict(levels=3), "levels must be 1"),
    (dict(levels=0), "levels must be 1"),
    (dict(coarse_pairs=0), "coarse_pairs must be a positive integer"),
    (dict(coarse_vertices=-1), "coarse_vertices must be a positive integer"),
    (dict(saturation=0.0), "saturation must be a finite number > 0"),
])
def test_bad_multilevel_options(bad, match):
    g = BipartiteGraph.from_lists([[0, 1], [1, 2]], 3)
    with pytest.raises(PartitionError, match=match):
        run_partitioner("hybrid", g, homogeneous(2), seed=0, options=bad)


# --------------------------------------------------------------------------
# kaminpar baseline
# --------------------------------------------------------------------------
def test_kaminpar_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "kaminpar", None)  # import kaminpar -> ImportError
    g = BipartiteGraph.from_lists([[0, 1], [1, 2]], 3)
    with pytest.raises(MissingDependencyError, match=r"pip install 'gmp\[kaminpar\]'"):
        run_partitioner("kaminpar", g, homogeneous(2), seed=0)


def test_parhip_file_layout(tmp_path):
    from gmp.partition.kaminpar import write_parhip

    xadj = np.array([0, 2, 3, 4], dtype=np.int64)
    adjncy = np.array([1, 2, 0, 0], dtype=np.int64)
    write_parhip(str(tmp_path / "g"), xadj, adjncy, np.array([5, 6, 7]), np.array([1, 2, 1, 2]))
    raw = (tmp_path / "g").read_bytes()
    head = np.frombuffer(raw[:24], dtype=np.uint64)
    assert head.tolist() == [8 + 16 + 32, 3, 4]  # 32-bit ids and weights, both weights present
    offsets = np.frombuffer(raw[24:24 + 32], dtype=np.uint64)
    assert offsets.tolist() == [56, 64, 68, 72]  # byte position of each neighbour list
    body = np.frombuffer(raw[56:], dtype=np.uint32)
    assert body.tolist() == [1, 2, 0, 0, 5, 6, 7, 1, 2, 1, 2]


def test_kaminpar_planted_communities():
    pytest.importorskip("kaminpar", reason="optional extra 'kaminpar' not installed")
    # without hot values: the baseline's co-occurrence graph has every row as a vertex, and hot rows
    # (vertex weight = degree) would dominate its balance
    g, comm = rare_value_communities(np.random.default_rng(0), num_hot=0, hot_per_sample=0)
    p = run_partitioner("kaminpar", g, homogeneous(4), seed=0)
    q = run_partitioner("kaminpar", g, homogeneous(4), seed=0)
    np.testing.assert_array_equal(p.sample_worker, q.sample_worker)
    assert recovered(p.sample_worker, comm)


def test_parallel_candidates_bounded_by_available_memory(monkeypatch):
    import psutil

    from gmp.partition._multilevel import _candidates_that_fit, candidate_bytes

    one = candidate_bytes(45_840_617, 30_100_000, 8, 24_000_000)
    assert one == 24 * 45_840_617 + 45 * 30_100_000 + 40 * 24_000_000  # ~3.2 GiB at the full Criteo scale
    for available, expect in ((2 * 3 * one + 5, 3), (one, 1), (0, 1)):
        monkeypatch.setattr(psutil, "virtual_memory", lambda a=available: type("VM", (), {"available": a})())
        assert _candidates_that_fit(45_840_617, 30_100_000, 8, 24_000_000) == expect


# --------------------------------------------------------------------------
# the portfolio start of small graphs and the kernels of the speed work
# --------------------------------------------------------------------------
def test_worker_loads_matches_bincount_and_skips_unplaced():
    part = np.random.default_rng(3).integers(-1, 5, 10_000).astype(np.int32)
    expect = np.bincount(part[part >= 0], minlength=5)
    np.testing.assert_array_equal(K.worker_loads(part, np.int64(5)), expect)
    np.testing.assert_array_equal(K.worker_loads(np.full(4, -1, dtype=np.int32), np.int64(3)), [0, 0, 0])


def test_portfolio_keeps_the_candidate_with_the_lowest_refined_objective(skewed_graph):
    from gmp.partition._objective import soft_count_table, start_objective

    g, n = skewed_graph, 4
    p = run_partitioner("hybrid", g, homogeneous(n), seed=3, options=dict(NO_2D, portfolio_seeds=2))
    ml = p.info["multilevel"]
    assert ml["portfolio"]
    bands = {tuple(c["band"]) for c in ml["candidates"]}
    assert len(ml["candidates"]) == 2 * len(bands) and len(bands) >= 2
    objectives = [c["objective"] for c in ml["candidates"]]
    assert ml["chosen"] == int(np.argmin(objectives))
    assert all(c["objective"] <= c["projected_objective"] * (1 + 1e-9) for c in ml["candidates"])
    # the placement returned is the chosen candidate's: its objective recomputed from scratch
    used_ids, local, degree = K.used_ids_and_degree(np.asarray(g.sample_indices), np.int64(g.num_embeddings))
    count = np.zeros((used_ids.size, n), dtype=np.int32)
    K.count_samples(np.asarray(g.sample_indptr), local[np.asarray(g.sample_indices)], p.sample_worker, count)
    scap = sample_cap(g.num_samples, n, 1.05)
    f = soft_count_table(scap, g.num_samples / n, 512)
    again = start_objective(p.sample_worker, np.asarray(p.embedding_primary)[used_ids].astype(np.int32), count,
                            degree > 0, f, homogeneous(n).cost.astype(np.float64), n, p.info["alpha"],
                            p.info["beta"], p.info["gamma"])
    assert again == pytest.approx(objectives[ml["chosen"]], rel=1e-9)
    assert p.info["rounds"][-1]["objective"] == objectives[ml["chosen"]]
    # off: the projected choice among coarse_restarts bands, as on large graphs
    q = run_partitioner("hybrid", g, homogeneous(n), seed=3, options=dict(NO_2D, portfolio_edges=0))
    assert not q.info["multilevel"]["portfolio"] and len(q.info["multilevel"]["candidates"]) <= 2
    assert not run_partitioner("hybrid", g, homogeneous(n), seed=3,
                               options=dict(NO_2D, rounds=0)).info["multilevel"]["portfolio"]


def test_large_graphs_choose_among_the_refined_bands(skewed_graph):
    """Above portfolio_edges every band's projection is refined by the sweeps' rounds before the choice, and the
    lowest refined J less the 2D step's savings wins (the portfolio's rule, one seed a band). Here (2 workers,
    batch 16) the projected J ranks the bands the other way: the wider band projects worse and refines better
    (chosen by the projection, this graph read 3,033 rows; now 2,845)."""
    g = skewed_graph
    p = run_partitioner("hybrid", g, homogeneous(2), seed=0, options=dict(portfolio_edges=0, batch_size=16))
    ml = p.info["multilevel"]
    assert ml["refined"] and not ml["portfolio"] and len(ml["candidates"]) == 2
    cands = ml["candidates"]
    assert ml["chosen"] == int(np.argmin([c["score"] for c in cands])) == 1
    assert int(np.argmin([c["projected_objective"] for c in cands])) == 0
    # the placement is the chosen candidate's refinement, and its score is J less what the 2D step then saved
    # (the 2D step's own count: its expected reads before and after, cost 1 between the two workers)
    rounds, rep = p.info["rounds"], p.info["replication"]
    assert rounds[-1]["objective"] == cands[1]["objective"] < cands[1]["projected_objective"]
    saved = rounds[-1]["expected_remote_reads"] - rep["expected_remote_reads"]
    assert saved > 0 and cands[1]["score"] == pytest.approx(cands[1]["objective"] - saved, rel=1e-9)
    assert batch_remote_reads(g, p, 16) == 2845
    # a hierarchical topology keeps the projected choice (its rounds run after it)
    q = run_partitioner("hybrid", g, hierarchical(2, 2), seed=0, options=dict(portfolio_edges=0, batch_size=16))
    assert not q.info["multilevel"]["refined"]
    assert q.info["multilevel"]["chosen"] == int(np.argmin([c["projected_objective"]
                                                            for c in q.info["multilevel"]["candidates"]]))


@pytest.mark.parametrize("bad,match", [
    (dict(portfolio_edges=-1), "portfolio_edges must be an integer >= 0"),
    (dict(portfolio_seeds=0), "portfolio_seeds must be an integer >= 1"),
    (dict(portfolio_bands=1.5), "portfolio_bands must be an integer >= 1"),
    (dict(portfolio_rounds=0), "portfolio_rounds must be an integer >= 1"),
])
def test_bad_portfolio_options(bad, match):
    g = BipartiteGraph.from_lists([[0, 1], [1, 2]], 3)
    with pytest.raises(PartitionError, match=match):
        run_partitioner("hybrid", g, homogeneous(2), seed=0, options=bad)


def test_fill_marginals_is_df_of_count_and_keeps_padding():
    count = np.random.default_rng(4).integers(0, 30, size=(5000, 5)).astype(np.int32)
    df = np.random.default_rng(5).random(40)
    drow = np.full((5000, 8), -7.0)
    K.fill_marginals(count, df, drow)
    np.testing.assert_array_equal(drow[:, :5], df[count])
    assert (drow[:, 5:] == -7.0).all()  # padding columns untouched


def test_flat_beside_keeps_the_multilevel_placement_when_it_scores_lower(skewed_graph):
    """Graphs of at least flat_beside_samples samples run the flat sweep beside the multilevel start and
    keep the lower objective less the 2D step's savings; when the multilevel one wins, the placement is
    the one without the check, bit for bit, and both scores are recorded."""
    opts = {"portfolio_edges": 0, "batch_size": 64}
    alone = run_partitioner("hybrid", skewed_graph, homogeneous(4), seed=3, options={**opts, "flat_beside_samples": 0})
    both = run_partitioner("hybrid", skewed_graph, homogeneous(4), seed=3, options={**opts, "flat_beside_samples": 1})
    fb = both.info["multilevel"]["flat_beside"]
    assert "flat_beside" not in alone.info["multilevel"]
    assert fb["chosen"] == "multilevel" and fb["multilevel_score"] < fb["flat_score"]
    np.testing.assert_array_equal(both.sample_worker, alone.sample_worker)
    np.testing.assert_array_equal(both.embedding_primary, alone.embedding_primary)
    np.testing.assert_array_equal(both.secondary_workers, alone.secondary_workers)


def test_flat_beside_takes_the_flat_placement_when_it_scores_lower(skewed_graph, monkeypatch):
    """The same check with the flat state's score made huge: the flat sweep's placement and round log are
    kept, within the caps."""
    from gmp.partition import hybrid as H

    real = H.score_after_2d

    def score(state, rounds, options):  # the refined bands' scores as they are, the flat state's 1e9 lower
        return real(state, rounds, options) - (1e9 if rounds[-1]["level"] == "worker (flat)" else 0.0)

    monkeypatch.setattr(H, "score_after_2d", score)
    opts = {"portfolio_edges": 0, "batch_size": 64, "flat_beside_samples": 1}
    p = run_partitioner("hybrid", skewed_graph, homogeneous(4), seed=3, options=opts)
    assert p.info["multilevel"]["flat_beside"]["chosen"] == "flat"
    assert {r["level"] for r in p.info["rounds"]} == {"worker (flat)"}
    monkeypatch.setattr(H, "score_after_2d", real)
    ml = run_partitioner("hybrid", skewed_graph, homogeneous(4), seed=3, options={**opts, "flat_beside_samples": 0})
    assert not np.array_equal(p.sample_worker, ml.sample_worker)
    n = skewed_graph.num_samples
    assert np.bincount(p.sample_worker, minlength=4).max() <= sample_cap(n, 4, 1.05)
    with pytest.raises(PartitionError, match="flat_beside_samples"):
        run_partitioner("hybrid", skewed_graph, homogeneous(4), options={"flat_beside_samples": -1})


# --------------------------------------------------------------------------- numba's workqueue threading layer
WORKQUEUE_RUN = """
import numpy as np
from gmp.graph import BipartiteGraph
from gmp.kernels.threads import concurrent_launches_safe
from gmp.partition import run_partitioner
from gmp.partition.incremental import Options, place_and_repartition, runs_alongside
from gmp.placement import Placement
from gmp.topology import resolve_topology
rng = np.random.default_rng(7)
g = BipartiteGraph.from_lists([sorted(set(rng.integers(0, 300, size=8).tolist())) for _ in range(2000)], 300)
topo = resolve_topology(4, None, None)
p = run_partitioner("hybrid", g, topo, seed=0, options={"batch_size": 64})
old = Placement.edge_cut(4, rng.integers(0, 4, size=2000), rng.integers(0, 4, size=300))
q = place_and_repartition(g, old, topo, max_moved_rows=30, options=Options(batch_size=64))[1]
print(concurrent_launches_safe(), runs_alongside(Options(), g), q.info["target_alongside"],
      p.sample_worker[:20].tolist())
"""


def test_hybrid_and_target_mode_run_on_numbas_workqueue_layer():
    # workqueue aborts the process when two threads launch parallel kernels at once: hybrid's multilevel start
    # (candidate bands on threads) did so on every small graph there, and target mode would beside its sweep
    def run(layer):
        env = {**os.environ, "NUMBA_THREADING_LAYER": layer}
        res = subprocess.run([sys.executable, "-c", WORKQUEUE_RUN], capture_output=True, text=True, env=env,
                             timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        return res.stdout.split(maxsplit=3)

    safe, alongside, ran_alongside, start = run("workqueue")
    assert (safe, alongside, ran_alongside) == ("False", "False", "False")
    assert run("default")[3] == start  # one band at a time: the same placement
