"""Tests of the HET-GMP ``hybrid`` partitioner (gmp/partition/hybrid.py).

Known answers on hand-built graphs (two communities; a two-level community
structure on a 2x2 topology), invariants (one primary per embedding, hard
caps, replication budget, no secondary on its primary), a slow pure-Python
reference of the soft-count objective, and thread-count independence.
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gmp.errors import PartitionError
from gmp.graph import BipartiteGraph
from gmp.partition import _hybrid_kernels as K
from gmp.partition import hybrid as H
from gmp.partition import run_partitioner
from gmp.partition._common import sample_cap
from gmp.topology import Topology, hierarchical, homogeneous

# small graphs: the paper's default alpha/beta (100 N / |V|) make one vertex a
# several-percent imbalance, so the structure tests use light penalties and
# rely on the hard caps for balance; batch_size=1 gives the plain count of Eq. 3.
LIGHT = dict(batch_size=1, replication_budget=0.0, alpha=0.1, beta=0.1, max_imbalance=1.25)


def community_graph(rng, *, num_communities=2, samples_per=40, emb_per=10, own=7, sibling=0):
    """Samples of community c use ``own`` of its ``emb_per`` embeddings (+ ``sibling`` of community c ^ 1)."""
    rows = []
    for c in range(num_communities):
        for _ in range(samples_per):
            row = list(rng.choice(emb_per, own, replace=False) + c * emb_per)
            if sibling:
                row += list(rng.choice(emb_per, sibling, replace=False) + (c ^ 1) * emb_per)
            rows.append(sorted(int(x) for x in row))
    return BipartiteGraph.from_lists(rows, num_communities * emb_per)


def random_graph(rng, num_samples, num_embeddings, degree):
    rows = [sorted(rng.choice(num_embeddings, degree, replace=False).tolist()) for _ in range(num_samples)]
    return BipartiteGraph.from_lists(rows, num_embeddings)


# --------------------------------------------------------------------------
# slow references
# --------------------------------------------------------------------------
def reference_objective(graph, sample_worker, primary, cost, *, batch_size, alpha, beta, gamma):
    """J of the module docstring, from scratch with Python dicts and math.pow."""
    n = cost.shape[0]
    s = graph.num_samples
    m = s / n
    b = min(batch_size, max(m, 1.0))

    def f(c):
        return (1.0 - max(0.0, 1.0 - c / m) ** b) * m / b

    count: dict[tuple[int, int], int] = {}
    for i in range(s):
        for x in graph.sample_indices[graph.sample_indptr[i]:graph.sample_indptr[i + 1]]:
            key = (int(x), int(sample_worker[i]))
            count[key] = count.get(key, 0) + 1
    comm = 0.0
    served = [0.0] * n
    for (x, w), c in count.items():
        p = int(primary[x])
        comm += f(c) * cost[p, w]
        served[p] += f(c) * cost[p, w]
    used = sorted({x for (x, _) in count})
    sl = [0] * n
    pl = [0] * n
    for i in range(s):
        sl[int(sample_worker[i])] += 1
    for x in used:
        pl[int(primary[x])] += 1
    sm, pm, dm = sum(sl) / n, sum(pl) / n, sum(served) / n
    j = comm
    j += alpha / 2 * sum((v - sm) ** 2 for v in sl)
    j += beta / 2 * sum((v - pm) ** 2 for v in pl)
    if dm > 0:
        j += gamma / (2 * dm) * sum((v - dm) ** 2 for v in served)
    return j


def pair_locality(graph, primary, machine_of):
    """Fractions of co-accessed embedding pairs (same sample) whose primaries share a machine / a worker."""
    same_m = same_w = total = 0
    for i in range(graph.num_samples):
        e = graph.sample_indices[graph.sample_indptr[i]:graph.sample_indptr[i + 1]]
        w = primary[e]
        mach = machine_of[w]
        k = e.size
        total += k * (k - 1)
        same_w += int((w[:, None] == w[None, :]).sum()) - k
        same_m += int((mach[:, None] == mach[None, :]).sum()) - k
    return same_m / total, same_w / total


# --------------------------------------------------------------------------
# known answers
# --------------------------------------------------------------------------
def test_soft_count_table_known_values():
    # b = 1: f(c) = c, the plain count of Eq. 3
    np.testing.assert_allclose(H.soft_count_table(3, 10.0, 1), [0, 1, 2, 3, 4])
    # m = 4, b = 2: f(2) = (1 - (1 - 1/2)^2) * 2 = 1.5; f(4) = m/b = 2 (every batch); clamped beyond m
    f = H.soft_count_table(5, 4.0, 2)
    assert f[0] == 0.0 and f[2] == pytest.approx(1.5) and f[4] == pytest.approx(2.0) and f[6] == pytest.approx(2.0)
    # m < b: one batch of m samples
    assert H.soft_count_table(1, 3.0, 512)[1] == pytest.approx(1 - (2 / 3) ** 3)


def assert_communities_separated(p):
    """community_graph's samples 0-39 / 40-79 and embeddings 0-9 / 10-19 on two workers, no remote access."""
    sw, pr = p.sample_worker, p.embedding_primary
    a, b = int(sw[0]), int(sw[40])
    assert a != b
    assert np.all(sw[:40] == a) and np.all(sw[40:] == b)
    assert np.all(pr[:10] == a) and np.all(pr[10:] == b)
    assert p.info["rounds"][-1]["remote_accesses"] == 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_two_communities_separated_exactly(seed):
    g = community_graph(np.random.default_rng(seed))
    p = run_partitioner("hybrid", g, homogeneous(2), seed=seed, options=LIGHT)
    assert_communities_separated(p)


def test_defaults_hold_balance_on_tiny_graphs():
    # with the paper's weights one extra vertex costs more than it saves: nothing collapses onto one worker
    g = community_graph(np.random.default_rng(0))
    p = run_partitioner("hybrid", g, homogeneous(2), seed=0, options=dict(batch_size=1, replication_budget=0.0))
    assert np.bincount(p.sample_worker, minlength=2).max() <= sample_cap(80, 2, 1.05)


@pytest.mark.parametrize("levels", [1, 2])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_hierarchical_clusters_machine_level_first(seed, levels):
    # 4 sub-communities; (0, 1) and (2, 3) share embeddings (super-communities)
    g = community_graph(np.random.default_rng(seed), num_communities=4, own=6, sibling=4)
    topo = hierarchical(2, 2)
    p = run_partitioner("hybrid", g, topo, seed=seed, options=dict(LIGHT, levels=levels))
    same_machine, same_worker = pair_locality(g, p.embedding_primary, topo.machine_of)
    # every co-accessed pair on one machine, but within it spread over both workers
    assert same_machine == 1.0
    assert same_worker < 0.6
    levels_logged = [r["level"] for r in p.info["rounds"]]
    if levels == 1:  # the flat sweep: machines first, then workers
        assert levels_logged[0] == "machine" and levels_logged[-1] == "worker"
    else:  # the multilevel start partitions the machines first inside METIS's recursion, then the sweeps
        assert p.info["multilevel"]["candidates"][p.info["multilevel"]["chosen"]]["vertices"] > 0 and set(levels_logged) == {"worker"}
    # super-community (0, 1) on one machine, (2, 3) on the other
    machine = topo.machine_of[p.embedding_primary].reshape(4, 10)
    assert len(set(machine[:2].ravel())) == 1 and len(set(machine[2:].ravel())) == 1
    assert machine[0, 0] != machine[2, 0]


def test_hierarchical_beats_flat_on_inter_machine_pairs():
    # the flat sweep (levels=1); the multilevel start's METIS k-way numbers its parts along its recursive
    # bisection, which on this graph happens to pair the sub-communities as the machines would
    light = dict(LIGHT, levels=1)
    topo = hierarchical(2, 2)
    hier, flat = [], []
    for seed in range(6):
        g = community_graph(np.random.default_rng(seed), num_communities=4, own=6, sibling=4)
        hier.append(pair_locality(g, run_partitioner("hybrid", g, topo, seed=seed, options=light).embedding_primary,
                                  topo.machine_of)[0])
        flat.append(pair_locality(g, run_partitioner("hybrid", g, homogeneous(4), seed=seed,
                                                     options=light).embedding_primary, topo.machine_of)[0])
    assert min(hier) == 1.0
    assert np.mean(flat) < 0.95  # a flat cost matrix pairs sub-communities onto machines by chance


# --------------------------------------------------------------------------
# the objective against the slow reference
# --------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size,gamma", [(1, 0.0), (4, 0.0), (4, 0.5), (512, 0.01)])
def test_objective_matches_reference(batch_size, gamma):
    rng = np.random.default_rng(7)
    g = random_graph(rng, 120, 50, 4)
    cost = np.array([[0, 1, 3], [1, 0, 2], [3, 2, 0]], dtype=float)
    topo = Topology(cost, name="custom3")
    opts = dict(batch_size=batch_size, gamma=gamma, replication_budget=0.0, rounds=2, tol=0.0, levels=1)
    p = run_partitioner("hybrid", g, topo, seed=3, options=opts)
    info = p.info
    ref = reference_objective(g, p.sample_worker, p.embedding_primary, cost, batch_size=batch_size,
                              alpha=info["alpha"], beta=info["beta"], gamma=gamma)
    assert info["rounds"][-1]["objective"] == pytest.approx(ref, rel=1e-9)
    # the random start too (round 0), recomputed from the seeded start
    rng0 = np.random.default_rng(3)
    from gmp.partition.random import balanced_random_assignment
    sw0 = balanced_random_assignment(g.num_samples, 3, rng0)
    used = np.flatnonzero(np.bincount(g.sample_indices, minlength=g.num_embeddings) > 0)
    pr0 = np.full(g.num_embeddings, -1, dtype=np.int32)
    pr0[used] = balanced_random_assignment(used.size, 3, rng0)
    ref0 = reference_objective(g, sw0, pr0, cost, batch_size=batch_size, alpha=info["alpha"], beta=info["beta"],
                               gamma=gamma)
    assert info["rounds"][0]["objective"] == pytest.approx(ref0, rel=1e-9)


def test_sequential_sweeps_never_increase_the_objective():
    # the sequential sweep: every move has a negative exact marginal cost (gamma = 0)
    rng = np.random.default_rng(11)
    g = random_graph(rng, 300, 80, 5)
    topo = hierarchical(2, 2)
    opts = H.Options(batch_size=8, gamma=0.0, alpha=0.05, beta=0.05)
    st = H._State(g, topo.cost, opts, H.balanced_random_assignment(300, 4, rng), None, rng, batch_size=8)
    prev = st.summary()["objective"]
    for _ in range(4):
        ceff = st.effective_cost()
        st.sweep_samples(ceff)
        mid = st.summary()["objective"]
        assert mid <= prev + 1e-9
        st.sweep_embeddings(ceff)
        now = st.summary()["objective"]
        assert now <= mid + 1e-9
        prev = now
    # counts stayed consistent with the placement
    expect = np.zeros_like(st.count)
    for i in range(300):
        for x in g.sample_indices[g.sample_indptr[i]:g.sample_indptr[i + 1]]:
            expect[x, st.sw[i]] += 1
    np.testing.assert_array_equal(st.count, expect)


# --------------------------------------------------------------------------
# private rows move with their sample (carry_private)
# --------------------------------------------------------------------------
def private_state(graph, cost, options, sw, prim, *, carry=True):
    """A ``_State`` over ``graph`` whose entries are reordered as ``hybrid`` does (private rows last)."""
    indices = np.array(graph.sample_indices, dtype=np.int32)
    g = BipartiteGraph(np.asarray(graph.sample_indptr), indices, graph.num_embeddings, check=False)
    degree = np.bincount(indices, minlength=graph.num_embeddings).astype(np.int64)
    num_private = np.empty(graph.num_samples, dtype=np.int32)
    K.private_last(np.asarray(g.sample_indptr), indices, (degree == 1).view(np.uint8), num_private)
    return H._State(g, cost, options, np.array(sw, dtype=np.int32), np.array(prim, dtype=np.int32),
                    np.random.default_rng(0), batch_size=options.batch_size,
                    num_private=num_private if carry else None)


def test_private_last_puts_private_rows_last_in_order():
    g = BipartiteGraph.from_lists([[0, 1, 2, 5], [1, 3, 4], [2, 6]], 7)  # rows 0, 3, 4, 5, 6: one user each
    indices = np.array(g.sample_indices, dtype=np.int32)
    degree = np.bincount(indices, minlength=7).astype(np.int64)
    num_private = np.empty(3, dtype=np.int32)
    K.private_last(np.asarray(g.sample_indptr), indices, (degree == 1).view(np.uint8), num_private)
    assert indices.tolist() == [1, 2, 0, 5, 1, 3, 4, 2, 6]
    assert num_private.tolist() == [2, 2, 1]


@pytest.mark.parametrize("carry", [True, False])
def test_a_sample_moves_with_its_private_rows(carry):
    # sample 0 (worker 0) has 3 private rows (0, 1, 2; primaries on 0) and reads row 3, whose other two
    # users and primary are on worker 1. f(c) = c (batch 1), no balance weights. Alone, the move to 1
    # saves row 3's fetch (1) but makes 3 private rows remote (+3): Algorithm 1's sweep keeps it on 0.
    # With its private rows it saves 1 and costs nothing: it moves, and so do their primaries.
    g = BipartiteGraph.from_lists([[0, 1, 2, 3], [3, 4], [3, 5], [6, 7], [6]], 8)
    sw, prim = [0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0, 0]
    opts = H.Options(batch_size=1, alpha=0.0, beta=0.0, gamma=0.0, max_imbalance=2.0)
    st = private_state(g, homogeneous(2).cost, opts, sw, prim, carry=carry)
    before = st.summary()["objective"]
    moved = st.sweep_samples(st.effective_cost())
    after = st.summary()["objective"]
    if carry:
        assert moved == 1 and st.sw.tolist() == [1, 1, 1, 0, 0]
        assert st.prim.tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
        assert after == pytest.approx(before - 1.0)
    else:
        assert moved == 0 and st.sw.tolist() == sw and st.prim.tolist() == prim
    np.testing.assert_array_equal(st.primary_load, np.bincount(st.prim, minlength=2))
    np.testing.assert_array_equal(st.sample_load, np.bincount(st.sw, minlength=2))


def reference_carry_sweep(graph, sw, prim, cost, *, batch_size, alpha, beta, sample_cap_, primary_cap):
    """One sample sweep with private rows carried, every candidate scored by J from scratch
    (:func:`reference_objective`, gamma = 0): sample i on a may go to b (below the sample cap) with its
    private rows when b then holds at most ``primary_cap`` primaries, else alone; b = a with its private rows
    brought home is a candidate too. The lowest J change below -1e-9 wins, the lowest b on ties."""
    sw, prim = np.array(sw), np.array(prim)
    n = cost.shape[0]
    degree = np.bincount(graph.sample_indices, minlength=graph.num_embeddings)
    used = degree > 0

    def objective(s, p):
        return reference_objective(graph, s, p, cost, batch_size=batch_size, alpha=alpha, beta=beta, gamma=0.0)

    for i in range(graph.num_samples):
        rows = graph.sample_indices[graph.sample_indptr[i]:graph.sample_indptr[i + 1]]
        private = rows[degree[rows] == 1]
        a = sw[i]
        now = objective(sw, prim)
        best, best_delta, best_prim = a, -1e-9, None
        for b in range(n):
            if b != a and np.count_nonzero(sw == b) >= sample_cap_:
                continue
            s2 = sw.copy()
            s2[i] = b
            p2 = prim.copy()
            p2[private] = b
            if private.size and np.count_nonzero(p2[used] == b) <= primary_cap:
                delta = objective(s2, p2) - now
                candidate = p2
            elif b != a:
                delta = objective(s2, prim) - now
                candidate = prim
            else:
                continue
            if delta < best_delta:
                best, best_delta, best_prim = b, delta, candidate
        if best_prim is not None:
            sw[i] = best
            prim = best_prim
    return sw, prim


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_carried_sample_sweep_equals_the_reference(seed):
    # half the rows have one user; a tight primary cap makes some compound moves fall back to moving alone
    rng = np.random.default_rng(seed)
    rows = [sorted(set(rng.choice(12, 2, replace=False).tolist()) | {12 + 2 * i, 13 + 2 * i}
                   if rng.random() < 0.6 else set(rng.choice(12, 3, replace=False).tolist())) for i in range(30)]
    g = BipartiteGraph.from_lists(rows, 72)
    cost = np.array([[0, 1.3, 2.9], [1.1, 0, 1.7], [3.1, 2.3, 0]])
    n = 3
    used = np.bincount(g.sample_indices, minlength=72) > 0
    sw = rng.integers(0, n, g.num_samples)
    prim = np.where(used, rng.integers(0, n, 72), -1)
    opts = H.Options(batch_size=4, alpha=0.05, beta=0.07, gamma=0.0, max_imbalance=1.15)
    st = private_state(g, cost, opts, sw, prim)
    ref_sw, ref_prim = reference_carry_sweep(g, sw, prim, cost, batch_size=4, alpha=st.alpha, beta=st.beta,
                                             sample_cap_=st.sample_cap, primary_cap=st.primary_cap)
    before = st.summary()["objective"]
    st.sweep_samples(st.effective_cost())
    np.testing.assert_array_equal(st.sw, ref_sw)
    np.testing.assert_array_equal(st.prim[used], ref_prim[used])
    assert st.summary()["objective"] <= before
    expect = np.zeros_like(st.count)
    np.add.at(expect, (g.sample_indices, np.repeat(st.sw, np.diff(g.sample_indptr))), 1)
    np.testing.assert_array_equal(st.count, expect)
    np.testing.assert_array_equal(st.primary_load, np.bincount(st.prim[used], minlength=n))
    assert st.primary_load.max() <= max(st.primary_cap, np.bincount(prim[used], minlength=n).max())


# --------------------------------------------------------------------------
# invariants
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def medium_graph():
    rng = np.random.default_rng(5)
    # skewed ids, 9000 samples, ids 3000.. never used (phantoms)
    ids = np.minimum(rng.zipf(1.3, size=(9000, 6)) - 1, 2999)
    rows = [sorted(set(r.tolist())) for r in ids]
    return BipartiteGraph.from_lists(rows, 3500)


def test_properties(medium_graph):
    g = medium_graph
    opts = dict(replication_budget=0.02, rounds=3)
    p = run_partitioner("hybrid", g, hierarchical(2, 4), seed=1, options=opts)
    p.check(num_samples=g.num_samples, num_embeddings=g.num_embeddings)  # secondaries never on the primary
    deg = np.bincount(g.sample_indices, minlength=g.num_embeddings)
    used = deg > 0
    n = 8
    # hard caps
    assert np.bincount(p.sample_worker, minlength=n).max() <= sample_cap(g.num_samples, n, 1.05)
    assert np.bincount(p.embedding_primary[used], minlength=n).max() <= sample_cap(int(used.sum()), n, 1.05)
    # phantoms: placed, never replicated, not counted as used
    assert p.info["num_used_embeddings"] == int(used.sum())
    sec_emb = np.repeat(np.arange(g.num_embeddings), np.diff(p.secondary_indptr))
    assert np.all(used[sec_emb])
    # budget respected exactly: floor(2% of used) per worker, or all candidates when fewer
    budget = math.floor(0.02 * used.sum() + 1e-9)
    per_worker = np.bincount(p.secondary_workers, minlength=n)
    assert np.all(per_worker <= budget)
    assert p.info["replication"]["secondaries_per_worker"] == per_worker.tolist()
    for w in range(n):
        users = np.unique(g.sample_indices[np.repeat(p.sample_worker == w, np.diff(g.sample_indptr))])
        candidates = np.setdiff1d(users, np.flatnonzero(p.embedding_primary == w))
        assert per_worker[w] == min(budget, candidates.size)


def test_secondaries_are_the_top_expected_traffic(medium_graph):
    g = medium_graph
    topo = hierarchical(2, 4)
    opts = H.Options(replication_budget=0.01, rounds=1, batch_size=64)
    p = run_partitioner("hybrid", g, topo, seed=2, options=dict(replication_budget=0.01, rounds=1, batch_size=64))
    n = 8
    count = np.zeros((g.num_embeddings, n), dtype=np.int64)
    np.add.at(count, (g.sample_indices, np.repeat(p.sample_worker, np.diff(g.sample_indptr))), 1)
    f = H.soft_count_table(sample_cap(g.num_samples, n, opts.max_imbalance), g.num_samples / n, 64)
    budget = math.floor(0.01 * int((count.sum(1) > 0).sum()) + 1e-9)
    for w in range(n):
        score = f[count[:, w]] * topo.cost[p.embedding_primary, w]
        score[p.embedding_primary == w] = 0.0
        cand = np.flatnonzero(score > 0)
        order = cand[np.lexsort((cand, -score[cand]))]  # score descending, then id ascending
        expect = np.sort(order[:budget])
        got = np.flatnonzero(p.local_mask(w) & (p.embedding_primary != w))
        np.testing.assert_array_equal(got, expect)


def test_memory_per_worker_budget(medium_graph):
    g = medium_graph
    dim = 16
    opts = dict(rounds=1, memory_per_worker=500 * dim * 4 + 7, embedding_dim=dim)
    p = run_partitioner("hybrid", g, homogeneous(8), seed=0, options=opts)
    assert np.all(p.rows_held() == 500)  # each worker filled to its memory exactly
    prim = np.bincount(p.embedding_primary, minlength=8)  # phantom ids hold memory too
    assert p.info["replication"]["budget_per_worker"] == np.maximum(500 - prim, 0).tolist()


def test_memory_per_worker_too_small_warns_once(medium_graph, caplog):
    """The warning comes from the final 2D step only, not from scoring each round and start."""
    opts = dict(rounds=3, memory_per_worker=1024, embedding_dim=16)  # 16 rows: fewer than any worker's primaries
    with caplog.at_level(logging.WARNING, logger="gmp.partition.hybrid"):
        p = run_partitioner("hybrid", medium_graph, homogeneous(4), seed=0, options=opts)
    said = [r for r in caplog.records if "memory_per_worker=1024 B holds 16 rows" in r.getMessage()]
    assert len(said) == 1 and p.num_secondaries == 0


def test_zero_budget_gives_pure_edge_cut(tiny_graph):
    p = run_partitioner("hybrid", tiny_graph, homogeneous(2), seed=0, options=dict(replication_budget=0.0))
    assert p.num_secondaries == 0
    assert p.method == "hybrid" and p.seed == 0 and p.options["rounds"] == 5


def test_same_seed_same_arrays_and_seed_matters(medium_graph):
    g = medium_graph
    a = run_partitioner("hybrid", g, homogeneous(4), seed=3, options=dict(rounds=2))
    b = run_partitioner("hybrid", g, homogeneous(4), seed=3, options=dict(rounds=2))
    c = run_partitioner("hybrid", g, homogeneous(4), seed=4, options=dict(rounds=2))
    for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.sample_worker, c.sample_worker)


def test_identical_with_one_and_two_threads():
    # separate processes, NUMBA_NUM_THREADS fixed before numba starts its pool
    code = textwrap.dedent("""
        import hashlib, numpy as np
        from gmp.graph import BipartiteGraph
        from gmp.partition import run_partitioner
        from gmp.topology import homogeneous
        rng = np.random.default_rng(5)
        ids = np.minimum(rng.zipf(1.3, size=(9000, 6)) - 1, 2999)
        g = BipartiteGraph.from_lists([sorted(set(r.tolist())) for r in ids], 3500)
        p = run_partitioner("hybrid", g, homogeneous(8), seed=9, options=dict(rounds=3, replication_budget=0.02))
        h = hashlib.sha256()
        for a in (p.sample_worker, p.embedding_primary, p.secondary_indptr, p.secondary_workers):
            h.update(a.tobytes())
        print(h.hexdigest(), repr([r["objective"] for r in p.info["rounds"]]))
    """)
    outs = []
    for threads in ("1", "2"):
        env = {**__import__("os").environ, "NUMBA_NUM_THREADS": threads}
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout.strip())
    assert outs[0] == outs[1]


def test_threads_option_does_not_change_result(medium_graph):
    with pytest.warns(FutureWarning, match="deprecated"):
        a = run_partitioner("hybrid", medium_graph, homogeneous(8), seed=1, options=dict(rounds=2, threads=1))
        b = run_partitioner("hybrid", medium_graph, homogeneous(8), seed=1, options=dict(rounds=2, threads=2))
    np.testing.assert_array_equal(a.sample_worker, b.sample_worker)
    np.testing.assert_array_equal(a.embedding_primary, b.embedding_primary)


def test_rounds_log_and_early_stop(medium_graph):
    p = run_partitioner("hybrid", medium_graph, homogeneous(4), seed=0, options=dict(rounds=5, tol=0.5))
    rounds = p.info["rounds"]
    assert rounds[0]["round"] == 0 and rounds[0]["moved_samples"] == 0
    # tol = 50%: the first rounds improve a lot, then the loop stops before round 5
    assert 1 <= len(rounds) - 1 < 5
    keys = {"objective", "comm_weighted", "expected_remote_reads", "remote_accesses", "epoch_unique_remote",
            "sample_imbalance", "primary_imbalance", "traffic_imbalance", "moved_samples", "moved_embeddings",
            "seconds", "level"}
    assert keys <= set(rounds[-1])
    objs = [r["objective"] for r in rounds]
    assert objs[-1] < objs[0]


def test_zero_rounds_is_the_random_start(medium_graph):
    p = run_partitioner("hybrid", medium_graph, homogeneous(4), seed=0,
                        options=dict(rounds=0, replication_budget=0, levels=1))
    assert len(p.info["rounds"]) == 1


# --------------------------------------------------------------------------
# options
# --------------------------------------------------------------------------
@pytest.mark.parametrize("bad,match", [
    (dict(rounds=-1), "rounds must be an integer >= 0"),
    (dict(max_imbalance=0.9), "max_imbalance must be a number >= 1.0"),
    (dict(replication_budget=1.5), "replication_budget must be a fraction"),
    (dict(batch_size=0), "batch_size must be an integer >= 1"),
    (dict(alpha=-1.0), "alpha must be a finite number >= 0"),
    (dict(memory_per_worker=-5), "memory_per_worker must be a number of bytes"),
    (dict(memory_per_worker=0), "memory_per_worker must be a number of bytes >= 1"),  # the manifest refuses 0
    (dict(threads=0), "threads must be an integer >= 1"),
    # 99999999999999999999999GiB overflowed the int64 budgets (an OverflowError traceback)
    (dict(memory_per_worker=99999999999999999999999 * 2**30), r"memory_per_worker must be .* below 2\^63"),
    (dict(memory_per_worker=2**63), r"memory_per_worker must be .* below 2\^63"),
])
def test_bad_options(bad, match, tiny_graph):
    with pytest.raises(PartitionError, match=match):
        run_partitioner("hybrid", tiny_graph, homogeneous(2), seed=0, options=bad)


# --------------------------------------------------------------------------
# init: a registered partitioner's placement as the start of the sweeps
# --------------------------------------------------------------------------
@pytest.mark.parametrize("init", ["bicut", "greedy-stream"])
def test_init_from_partitioner_caps_determinism(init, medium_graph):
    g = medium_graph
    n = 8
    opts = dict(rounds=2, replication_budget=0.01, init=init, max_imbalance=1.05)
    a = run_partitioner("hybrid", g, homogeneous(n), seed=2, options=opts)
    b = run_partitioner("hybrid", g, homogeneous(n), seed=2, options=opts)
    a.check(num_samples=g.num_samples, num_embeddings=g.num_embeddings)
    for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    used = np.bincount(g.sample_indices, minlength=g.num_embeddings) > 0
    assert np.bincount(a.sample_worker, minlength=n).max() <= sample_cap(g.num_samples, n, 1.05)
    assert np.bincount(a.embedding_primary[used], minlength=n).max() <= sample_cap(int(used.sum()), n, 1.05)
    assert a.info["init"]["method"] == init and a.info["init"]["seconds"] >= 0
    assert a.options["init"] == init


@pytest.mark.parametrize("init", ["bicut", "greedy-stream"])
def test_init_zero_rounds_is_the_init_placement(init, medium_graph):
    # with no rounds the result is the init partitioner's own placement (it already respects the caps)
    g = medium_graph
    p = run_partitioner("hybrid", g, homogeneous(4), seed=1,
                        options=dict(rounds=0, replication_budget=0, init=init))
    q = run_partitioner(init, g, homogeneous(4), seed=1, options=dict(max_imbalance=1.05))
    np.testing.assert_array_equal(p.sample_worker, q.sample_worker)
    used = np.bincount(g.sample_indices, minlength=g.num_embeddings) > 0
    np.testing.assert_array_equal(p.embedding_primary[used], q.embedding_primary[used])


@pytest.mark.parametrize("init", ["bicut", "greedy-stream"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_init_two_communities_separated_exactly(init, seed):
    g = community_graph(np.random.default_rng(seed))
    p = run_partitioner("hybrid", g, homogeneous(2), seed=seed, options=dict(LIGHT, init=init))
    assert_communities_separated(p)


def test_init_default_is_random(medium_graph):
    p = run_partitioner("hybrid", medium_graph, homogeneous(4), seed=0, options=dict(rounds=1))
    assert p.options["init"] == "random" and p.info["init"] == {"method": "random", "seconds": 0.0}


def test_init_refused_on_hierarchical_topology(tiny_graph):
    with pytest.raises(PartitionError, match="flat topologies only"):
        run_partitioner("hybrid", tiny_graph, hierarchical(2, 2), seed=0, options=dict(init="bicut"))


def test_unknown_init(tiny_graph):
    with pytest.raises(PartitionError, match=r"init must be one of 'random', 'bicut', 'greedy-stream', got 'metis'"):
        run_partitioner("hybrid", tiny_graph, homogeneous(2), seed=0, options=dict(init="metis"))


def test_threads_option_is_deprecated_with_a_warning():
    """``threads`` never changed anything (the sweeps are sequential): passing it warns."""
    with pytest.warns(FutureWarning, match="'threads' option is deprecated"):
        H.Options(threads=2)


def test_soft_count_table_is_sized_by_the_samples_not_by_max_imbalance(monkeypatch):
    """The table was sized ceil(S/N * max_imbalance): 10.9 GB at 1e5 on 5,000 samples. A cap above S is
    no cap, so the table never needs more than S + 2 entries."""
    sizes = []
    real = H.soft_count_table
    monkeypatch.setattr(H, "soft_count_table", lambda c, m, b: sizes.append(c) or real(c, m, b))
    g = community_graph(np.random.default_rng(0))   # 80 samples
    run_partitioner("hybrid", g, homogeneous(2), seed=0, options={"max_imbalance": 1e5, "levels": 1, "rounds": 1})
    assert sizes and max(sizes) == g.num_samples
