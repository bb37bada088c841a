"""Known-answer and invariant tests of the ``bicut`` and ``hypergraph`` baselines."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from gmp.errors import MissingDependencyError, PartitionError
from gmp.graph import BipartiteGraph
from gmp.partition import hypergraph as HG
from gmp.partition import run_partitioner
from gmp.partition._common import sample_cap
from gmp.topology import homogeneous

try:
    import mtkahypar  # noqa: F401
    HAVE_MTKAHYPAR = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_MTKAHYPAR = False

needs_mtkahypar = pytest.mark.skipif(not HAVE_MTKAHYPAR, reason="mtkahypar not installed (pip install 'gmp[hypergraph]')")

ROWS = [[0, 1], [1, 2], [0, 2], [3, 4], [4, 5], [2, 3]]  # the tiny_rows fixture; id 6 never occurs


@pytest.fixture
def tiny7():
    return BipartiteGraph.from_lists(ROWS, num_embeddings=7)


# ----------------------------------------------------------------------------- bicut
def test_bicut_aweto_known_answer(tiny7):
    # |V|/|E| = 1/2 and every sample has 2 edges, so score(v, i) = overlap(v, i) - load_i.
    # s0: tie -> w0 | s1 [1,2]: w0 1-1=0, w1 0-0=0, tie -> less loaded w1 | s2 [0,2]: w0 1-1, w1 1-1, tie, loads
    # equal -> w0 | s3 [3,4]: w0 -2, w1 -1 -> w1 | s4 [4,5]: w0 -2, w1 1-2 -> w1 | s5 [2,3]: w0 1-2, w1 2-3 ->
    # tie, loads 2 < 3 -> w0.
    p = run_partitioner("bicut", tiny7, homogeneous(2), seed=0, options=dict(order="dataset"))
    assert p.sample_worker.tolist() == [0, 1, 0, 1, 1, 0]
    # primaries by majority; ties -> fewer primaries so far: e1 (w0 1, w1 1; loads 1/0) -> w1,
    # e3 (w1 s3, w0 s5; loads 2/1) -> w1; unused id 6 -> least loaded (w0: 2, w1: 4)
    assert p.embedding_primary.tolist() == [0, 1, 0, 1, 1, 1, 0]
    assert p.num_secondaries == 0


def test_bicut_pure_locality_known_answer(tiny7):
    # without the load term the stream follows locality: the two communities exactly
    p = run_partitioner("bicut", tiny7, homogeneous(2), seed=0,
                        options=dict(order="dataset", balance_weight=0.0, max_imbalance=1.5))
    assert p.sample_worker.tolist() == [0, 0, 0, 1, 1, 1]
    assert p.embedding_primary.tolist() == [0, 0, 0, 1, 1, 1, 0]


def test_bicut_plain_is_balanced_random(tiny7):
    p = run_partitioner("bicut", tiny7, homogeneous(3), seed=4, options=dict(greedy=False))
    assert np.bincount(p.sample_worker, minlength=3).tolist() == [2, 2, 2]


def test_bicut_caps_and_determinism():
    rng = np.random.default_rng(0)
    ids = np.minimum(rng.zipf(1.4, size=(3000, 5)) - 1, 799)
    g = BipartiteGraph.from_lists([sorted(set(r.tolist())) for r in ids], 1000)
    a = run_partitioner("bicut", g, homogeneous(8), seed=1)
    b = run_partitioner("bicut", g, homogeneous(8), seed=1)
    np.testing.assert_array_equal(a.sample_worker, b.sample_worker)
    np.testing.assert_array_equal(a.embedding_primary, b.embedding_primary)
    assert np.bincount(a.sample_worker, minlength=8).max() <= sample_cap(3000, 8, 1.05)
    used = np.bincount(g.sample_indices, minlength=1000) > 0
    assert np.bincount(a.embedding_primary[used], minlength=8).max() <= sample_cap(int(used.sum()), 8, 1.05)


def test_bicut_bad_options(tiny7):
    with pytest.raises(PartitionError, match="order must be one of"):
        run_partitioner("bicut", tiny7, homogeneous(2), seed=0, options=dict(order="sorted"))
    with pytest.raises(PartitionError, match="balance_weight must be a finite number"):
        run_partitioner("bicut", tiny7, homogeneous(2), seed=0, options=dict(balance_weight=-1))


# ----------------------------------------------------------------------------- hypergraph
def test_write_hmetis_format(tmp_path):
    # 3 hyperedges (rows 0, 2, 3 of the embedding->sample CSR), 1-based pins
    indptr = np.array([0, 2, 3, 6, 9], dtype=np.int64)
    indices = np.array([0, 1, 4, 0, 2, 9, 3, 10, 11], dtype=np.int32)
    path = tmp_path / "h.hgr"
    pins = HG.write_hmetis(path, indptr, indices, np.array([0, 2, 3]), 12, chunk_pins=4)
    assert pins == 8
    assert path.read_text() == "3 12\n1 2\n1 3 10\n4 11 12\n"


def km1(graph, sample_worker):
    total = 0
    for e in range(graph.num_embeddings):
        users = graph.emb_indices[graph.emb_indptr[e]:graph.emb_indptr[e + 1]]
        if users.size:
            total += np.unique(sample_worker[users]).size - 1
    return total


@needs_mtkahypar
def test_hypergraph_two_communities(tiny7):
    p = run_partitioner("hypergraph", tiny7, homogeneous(2), seed=0)
    sw = p.sample_worker
    # the only optimum with 3 samples per worker: {0,1,2} | {3,4,5}, km1 = 1 (the bridge sample 5)
    assert sw[0] == sw[1] == sw[2] and sw[3] == sw[4] and sw[3] != sw[0]
    assert km1(tiny7, sw) == 1
    # primaries: the worker with most of their samples
    assert p.embedding_primary[:2].tolist() == [sw[0]] * 2 and p.embedding_primary[4] == sw[3]


@needs_mtkahypar
def test_hypergraph_balanced_and_better_than_random():
    rng = np.random.default_rng(3)
    z = rng.integers(0, 4, 2000)
    rows = [sorted(set((z[i] * 50 + rng.integers(0, 50, 4)).tolist()) | {200 + int(rng.integers(0, 30))})
            for i in range(2000)]
    g = BipartiteGraph.from_lists(rows, 240)
    p = run_partitioner("hypergraph", g, homogeneous(4), seed=0)
    assert np.bincount(p.sample_worker, minlength=4).max() <= sample_cap(2000, 4, 1.05)
    r = run_partitioner("random", g, homogeneous(4), seed=0)
    assert km1(g, p.sample_worker) < 0.5 * km1(g, r.sample_worker)
    # the seed matters (Mt-KaHyPar's deterministic preset ignores its own: every seed gave one partition)
    # and a seed reproduces its partition
    q = run_partitioner("hypergraph", g, homogeneous(4), seed=1)
    assert not np.array_equal(p.sample_worker, q.sample_worker)
    assert np.array_equal(q.sample_worker, run_partitioner("hypergraph", g, homogeneous(4), seed=1).sample_worker)
    assert km1(g, q.sample_worker) < 0.5 * km1(g, r.sample_worker)


def test_hypergraph_refuses_too_many_pins(tiny7):
    if not HAVE_MTKAHYPAR:
        pytest.skip("mtkahypar not installed")
    with pytest.raises(PartitionError, match="exceed max_pins=5"):
        run_partitioner("hypergraph", tiny7, homogeneous(2), seed=0, options=dict(max_pins=5))


def test_hypergraph_missing_dependency_message(tiny7, monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "mtkahypar":
            raise ImportError("No module named 'mtkahypar'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(MissingDependencyError, match=r"pip install 'gmp\[hypergraph\]'"):
        run_partitioner("hypergraph", tiny7, homogeneous(2), seed=0)


def test_hypergraph_bad_options(tiny7):
    with pytest.raises(PartitionError, match="preset must be one of"):
        run_partitioner("hypergraph", tiny7, homogeneous(2), seed=0, options=dict(preset="fastest"))
