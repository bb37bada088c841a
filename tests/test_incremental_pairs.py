"""The step of bench/incremental_pairs.py's bound (issue 36): undoing a placement's moves against the old one
adds at most one remote (row, worker) pair per moved row, as ``moved_rows`` counts them. Random small days
with secondaries on both sides, and a hand-built day where the bound is met with equality."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gmp.graph import BipartiteGraph
from gmp.metrics import epoch_unique_remote
from gmp.partition.incremental import moved_rows
from gmp.placement import Placement

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from incremental_pairs import undo_moves  # noqa: E402


def _secondaries(rng, num_rows: int, n: int, primary: np.ndarray, share: float):
    lists = [sorted(set(rng.choice(n, size=int(rng.integers(1, n)), replace=False).tolist()) - {int(primary[x])})
             if rng.random() < share else [] for x in range(num_rows)]
    indptr = np.concatenate([[0], np.cumsum([len(v) for v in lists])]).astype(np.int64)
    return indptr, np.array([w for v in lists for w in v], dtype=np.int32)


def _placement(rng, num_samples: int, num_rows: int, n: int, share: float) -> Placement:
    primary = rng.integers(0, n, num_rows)
    return Placement.edge_cut(n, rng.integers(0, n, num_samples), primary).with_secondaries(
        *_secondaries(rng, num_rows, n, primary, share))


def _secondary_list(p: Placement, x: int) -> list[int]:
    return np.asarray(p.secondary_workers)[p.secondary_indptr[x]:p.secondary_indptr[x + 1]].tolist()


def _used(graph: BipartiteGraph) -> np.ndarray:
    return np.flatnonzero(np.bincount(np.asarray(graph.sample_indices), minlength=graph.num_embeddings))


@pytest.mark.parametrize("seed", range(40))
def test_undoing_the_moves_adds_at_most_one_pair_per_moved_row(seed):
    rng = np.random.default_rng(seed)
    n, m_old, m_new, s = int(rng.integers(2, 6)), int(rng.integers(3, 20)), int(rng.integers(0, 10)), 30
    rows = [rng.choice(m_old + m_new, size=int(rng.integers(1, 5)), replace=False).tolist() for _ in range(s)]
    graph = BipartiteGraph.from_lists(rows, num_embeddings=m_old + m_new)
    old = _placement(rng, 7, m_old, n, 0.4)  # the old day's placement: its own samples, the old ids only
    new = _placement(rng, s, m_old + m_new, n, 0.4)
    undone = undo_moves(old, new)
    np.testing.assert_array_equal(undone.sample_worker, new.sample_worker)
    np.testing.assert_array_equal(undone.embedding_primary[:m_old], old.embedding_primary)
    np.testing.assert_array_equal(undone.embedding_primary[m_old:], new.embedding_primary[m_old:])
    for x in range(m_old + m_new):  # secondaries: the old ids' as in old, the newer ids' as in new
        src = old if x < m_old else new
        assert _secondary_list(undone, x) == _secondary_list(src, x), x
    assert moved_rows(old, undone).total == 0
    used = _used(graph)
    added = epoch_unique_remote(graph, undone) - epoch_unique_remote(graph, new)
    assert added <= moved_rows(old, new, rows=used).total, (added, moved_rows(old, new, rows=used))


def test_the_bound_is_met_with_equality_on_a_hand_built_day():
    """Two workers; samples 0, 1 on worker 1 read rows 0 and 1; old: both rows' primaries on worker 0; new:
    row 0's primary moved to 1 and a new secondary of row 1 on 1 (2 moved rows). New: 0 remote pairs;
    undone: (row 0, w1) and (row 1, w1) remote, 2 pairs: exactly one per moved row."""
    graph = BipartiteGraph.from_lists([[0, 1], [1]], num_embeddings=2)
    old = Placement.edge_cut(2, [0], [0, 0])
    new = Placement.edge_cut(2, [1, 1], [1, 0]).with_secondaries([0, 0, 1], [1])
    assert moved_rows(old, new).total == 2
    assert epoch_unique_remote(graph, new) == 0
    assert epoch_unique_remote(graph, undo_moves(old, new)) == 2
