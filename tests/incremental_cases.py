"""Cases and slow references shared by the incremental tests (test_incremental.py, test_incremental_onepass.py)."""

from __future__ import annotations

import numpy as np

from gmp.graph import BipartiteGraph
from gmp.placement import Placement


def reference_moved(old: Placement, new: Placement, created=()) -> int:
    """Moved rows counted the slow way: per old id (but the ``created`` ones), a changed primary, and new
    secondaries on workers that held no copy before."""
    total = 0
    for e in sorted(set(range(old.num_embeddings)) - {int(x) for x in created}):
        held = {int(old.embedding_primary[e])} | {int(w) for w in old.secondaries_of(e)}
        total += int(new.embedding_primary[e] != old.embedding_primary[e])
        total += sum(1 for w in new.secondaries_of(e) if int(w) not in held)
    return total


def density_case(dense: bool):
    rng = np.random.default_rng(5)
    if dense:  # 200 samples over 12 ids: every row far above the saturated degree (4)
        rows = [sorted(set(rng.integers(0, 12, size=3).tolist())) for _ in range(200)]
        num = 14
    else:  # 2 ids of its own per sample and one of 10 shared ones: 10 saturated rows of 410
        rows = [[int(rng.integers(0, 10)), 10 + 2 * i, 11 + 2 * i] for i in range(200)]
        num = 412
    g = BipartiteGraph.from_lists(rows, num)
    old = Placement.edge_cut(2, [0], rng.integers(0, 2, size=num - 2))  # the last two ids are new
    return g, old
