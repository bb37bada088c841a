"""bench/incremental_fixed_vertices.py's two models on hand-built days whose best placements are known: the
``km1`` model keeps every old row and finds the placement with no remote pair; the repartitioning model moves
a row only when its migration cost ``alpha`` is less than the remote uses the move saves."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gmp.graph import BipartiteGraph
from gmp.metrics import batch_remote_reads, epoch_unique_remote
from gmp.partition._common import sample_cap
from gmp.partition.incremental import moved_rows
from gmp.placement import Placement

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import incremental_fixed_vertices as FV  # noqa: E402

# an optional dependency (the 'hypergraph' extra; 'dev' has it on Linux x86-64): skipped with the reason elsewhere
mtk = pytest.importorskip("mtkahypar", reason="mtkahypar not installed (pip install 'gmp[hypergraph]')")


@pytest.fixture(scope="module")
def init():
    return mtk.initialize(1)


def _three_worker_day():
    """Three old rows on workers 0, 1, 2 (row 2 also held by worker 0) and one new id (3); each sample reads one
    old row, the samples of row 3 also row 0: every sample fits beside its rows within the cap (5)."""
    rows = [[0, 3]] * 2 + [[0]] * 2 + [[1]] * 4 + [[2]] * 4
    graph = BipartiteGraph.from_lists(rows, num_embeddings=4)
    old = Placement.edge_cut(3, np.zeros(5, np.int32), np.array([0, 1, 2], np.int32)).with_secondaries(
        np.array([0, 0, 0, 1], np.int64), np.array([0], np.int32))
    return graph, old, sample_cap(graph.num_samples, 3, 1.05)


def test_km1_keeps_the_old_rows_and_finds_no_remote_pair(init):
    graph, old, cap = _three_worker_day()
    p = FV.km1_kept_rows(graph, old, 3, cap, mtk, init, seed=0)
    assert moved_rows(old, p).total == 0
    np.testing.assert_array_equal(p.embedding_primary[:3], [0, 1, 2])
    assert epoch_unique_remote(graph, p) == 0
    assert set(p.sample_worker[4:8]) == {1}  # worker 1 alone holds row 1 (row 2's samples: 2, or 0's copy)
    assert p.embedding_primary[3] == 0  # the new id goes with its samples


@pytest.mark.parametrize("alpha, moved", [(1000, 0), (1, 1)])
def test_the_repartitioning_model_moves_a_row_when_alpha_is_below_what_it_saves(init, alpha, moved):
    # both old rows on worker 1, 4 samples each; the cap (5 of 8 samples a worker) sends 3 samples to worker 0:
    # kept, 3 remote uses; moving one row to worker 0 with its 4 samples costs alpha and leaves none
    graph = BipartiteGraph.from_lists([[0]] * 4 + [[1]] * 4, num_embeddings=2)
    old = Placement.edge_cut(2, np.zeros(3, np.int32), np.array([1, 1], np.int32))
    cap = sample_cap(8, 2, 1.05)
    assert cap == 5
    p = FV.repart_model(graph, old, 2, cap, mtk, init, seed=0, alpha=alpha, hot=100)
    assert moved_rows(old, p).total == moved
    assert np.bincount(p.sample_worker, minlength=2).max() <= cap
    remote_uses = sum(int(p.sample_worker[s] != p.embedding_primary[r]) for s, r in enumerate([0] * 4 + [1] * 4))
    assert remote_uses == (3 if moved == 0 else 0)


def test_the_batch_model_keeps_the_rows_at_a_high_alpha_and_reads_nothing_remote(init):
    # in windows of 2 samples x 3 workers: at alpha 1000 every sample joins its rows' worker (no batch reads a
    # remote row) and no old row moves; the new id 3 goes with its samples
    graph, old, cap = _three_worker_day()
    p = FV.batch_model(graph, old, 3, cap, mtk, init, seed=0, alpha=1000, batch_size=2)
    assert moved_rows(old, p).total == 0
    assert set(p.sample_worker[4:8]) == {1}  # worker 1 alone holds row 1 (row 2's samples: 2, or 0's copy)
    assert p.embedding_primary[3] == 0
    assert batch_remote_reads(graph, p, 2) == 0
