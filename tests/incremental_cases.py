"""Cases and slow references shared by the incremental tests (test_incremental.py, test_incremental_onepass.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

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


def draw_day(draw, workers: list[int]):
    """Draw (inside a hypothesis ``@st.composite``) a random old placement and a new day: ``(n, m_old, m,
    rows, prim, secs, trained)``: N from ``workers``, m_old old ids (primaries ``prim``, secondaries
    ``secs``), up to 4 new ids, up to 30 samples of 1-4 rows, and the old history (None: every id trained)."""
    n = draw(st.sampled_from(workers))
    m_old = draw(st.integers(1, 10))
    m = m_old + draw(st.integers(0, 4))
    rows = draw(st.lists(st.sets(st.integers(0, m - 1), min_size=1, max_size=4), min_size=1, max_size=30))
    prim = draw(st.lists(st.integers(0, n - 1), min_size=m_old, max_size=m_old))
    secs = [sorted(draw(st.sets(st.integers(0, n - 1), max_size=2)) - {prim[e]}) for e in range(m_old)]
    trained = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=m_old, max_size=m_old)))
    return n, m_old, m, [sorted(r) for r in rows], prim, secs, trained


def old_placement(n: int, prim: list[int], secs: list[list[int]]) -> Placement:
    """The placement of :func:`draw_day`'s ``prim`` and ``secs`` (samples: one, on worker 0)."""
    indptr = np.zeros(len(prim) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in secs], out=indptr[1:])
    return Placement.edge_cut(n, [0], prim).with_secondaries(indptr, [w for s in secs for w in s])


def day_to_day_cli(tmp_path, budget: str):
    """Through the CLI: a tiny day 0 and its ``--continue`` day 1, day 0 placed by hybrid on 2 workers and
    trained with checkpoints, day 1 placed ``--from-manifest`` at ``--max-moved-rows budget``, then trained
    with ``--resume``. Returns ``(d0, d1, p0, p1, resume_result)``; every command exited 0."""
    from typer.testing import CliRunner

    from cli.main import app

    run = CliRunner().invoke
    d0, d1, p0, p1, ck = (str(tmp_path / x) for x in ("s0", "s1", "p0", "p1", "ck"))
    train = ["--checkpoint-dir", ck, "--batch-size", "256", "--embedding-dim", "4"]
    for args in (["data", "synth", "--preset", "tiny", "-n", "1500", "--scale", "0.05", "-o", d0],
                 ["data", "synth", "--continue", d0, "-o", d1, "--growth", "0.05"],
                 ["partition", d0, "-m", "hybrid", "-w", "2", "-o", p0, "--no-plots"],
                 ["partition", d1, "--from-manifest", p0, "--max-moved-rows", budget, "-o", p1, "--no-plots"],
                 ["train", "--dataset", d0, "--manifest", p0, *train]):
        res = run(app, args)
        assert res.exit_code == 0, res.output
    res = run(app, ["train", "--dataset", d1, "--manifest", p1, *train, "--resume"])
    assert res.exit_code == 0, res.output
    return d0, d1, p0, p1, res
