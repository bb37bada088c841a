"""Kept rows as fixed vertices of a multilevel partitioner (issue 36; a measurement, not a test).

bench/incremental_pairs.py bounds a budget B from below by K - B remote (row, worker) pairs, K the fewest pairs
with every old row kept, and finds K only by sweeping samples. Here Mt-KaHyPar, a multilevel partitioner far
stronger than a sweep, searches the kept-rows placements and the moves, on two models of the day:

* ``km1``: one net per used row over its samples plus one fixed vertex per old holder (primary and
  secondaries, on their workers); samples free. km1 = the remote pairs + a constant (a holder's block costs
  nothing beyond the constant), so this is K's search: the fewest pairs with every old row kept. New ids
  get the worker with most of their samples.
* ``repart``: the repartitioning model of Catalyurek et al. (J. Parallel Distrib. Comput. 2009) on the graph
  cut: samples and the rows of at most ``--hot`` samples (the others stay) are vertices, one edge per
  (sample, row) use, and each old row an edge of weight ``alpha`` to a fixed anchor vertex of its old
  worker: the cut is the remote uses plus ``alpha`` per moved row. Old secondaries stay.
* ``batch``: the batch reads themselves, as far as a net can count them: one net per (row, window of
  ``batch_size x workers`` consecutive sample ids) over the window's samples that read the row, the row's
  vertex (free) and its old secondaries (fixed vertices); each old row also an ``alpha`` net to its old
  worker's anchor. km1 = the reads of the batches, when every worker's batches line up with the windows
  (a worker's batch is a run of its samples in id order), plus a constant.

Each placement is scored on ``batch_remote_reads`` (what the budget curve compares) and pairs, then given to
the exact plan (``repartition_incremental``, ``target="none"``) as its start at each budget it fits, and to
target mode's chain (``--chain``: the budget ladder's steps up to the budget, as the ``sweep`` candidate runs
them from ``place_new_data``; also run from ``place_new_data`` as the control).
Samples weigh 100 and rows 1 against the per-worker caps (samples within ``max_imbalance``, as ``hybrid``).

Usage (docs/incremental-log.md, "Session 23: a multilevel search of the kept rows"; needs ``mtkahypar``)::

    python bench/incremental_fixed_vertices.py --pool POOL --pool-samples 1500000 \\
        --preset criteo-kaggle-independent --models km1,repart --alphas 1000,3
    python bench/incremental_fixed_vertices.py ... --models batch --alphas 1000 --budgets 5,10 --chain

Day d's old placement is ``hybrid`` on day d - 1, its full re-partition ``hybrid`` on day d, as
bench/incremental_pairs.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import incremental_bench as IB  # noqa: E402  (the day generators)
from incremental_pairs import undo_moves  # noqa: E402

from gmp.metrics import batch_remote_reads, epoch_unique_remote  # noqa: E402
from gmp.partition import incremental as I  # noqa: E402
from gmp.partition._common import enforce_cap, primaries_by_majority, sample_cap  # noqa: E402
from gmp.partition.hypergraph import import_mtkahypar  # noqa: E402
from gmp.partition.incremental import (Options, match_workers, moved_rows, place_and_repartition,  # noqa: E402
                                       repartition_incremental)
from gmp.placement import Placement  # noqa: E402

SAMPLE_WEIGHT = 100  # against a row's 1: the caps are on samples, rows only tip them


def mtkahypar_blocks(mtk, init, *, graph: bool, num_nodes: int, nets, net_weights, node_weights, fixed,
                     block_caps, seed: int) -> np.ndarray:
    """int64 [num_nodes]: Mt-KaHyPar's block of each vertex (graph cut, or hypergraph km1), ``fixed`` kept."""
    ctx = init.context_from_preset(mtk.PresetType.DEFAULT)
    ctx.set_partitioning_parameters(len(block_caps), 0.05, mtk.Objective.CUT if graph else mtk.Objective.KM1)
    ctx.logging = False
    ctx.set_individual_target_block_weights([int(c) for c in block_caps])
    mtk.set_seed(seed)
    make = init.create_graph if graph else init.create_hypergraph
    h = make(ctx, num_nodes, len(nets), nets, node_weights, net_weights)
    h.add_fixed_vertices(fixed, len(block_caps))
    blocks = np.asarray(h.partition(ctx).get_partition(), dtype=np.int64)
    fixed = np.asarray(fixed)
    if not (blocks[fixed >= 0] == fixed[fixed >= 0]).all():
        raise SystemExit("Mt-KaHyPar moved a fixed vertex")
    return blocks


def km1_kept_rows(g, old, n, cap, mtk, init, seed) -> Placement:
    """The fewest pairs Mt-KaHyPar finds with every old row kept (the ``km1`` model)."""
    N, m_old = g.num_samples, old.num_embeddings
    eip, eix = np.asarray(g.emb_indptr), np.asarray(g.emb_indices)
    prim, sip, sw = (np.asarray(old.embedding_primary), np.asarray(old.secondary_indptr),
                     np.asarray(old.secondary_workers))
    nets, fixed = [], [-1] * N
    for r in np.flatnonzero(np.diff(eip) > 0):
        pins = eix[eip[r]:eip[r + 1]].tolist()
        if r < m_old:
            for h in [int(prim[r])] + sw[sip[r]:sip[r + 1]].tolist():
                fixed.append(h)
                pins.append(len(fixed) - 1)
        if len(pins) >= 2:
            nets.append(pins)
    holders = np.bincount(np.asarray(fixed[N:]), minlength=n)
    blocks = mtkahypar_blocks(mtk, init, graph=False, num_nodes=len(fixed), nets=nets, net_weights=[1] * len(nets),
                              node_weights=[SAMPLE_WEIGHT] * N + [1] * (len(fixed) - N), fixed=fixed,
                              block_caps=cap * SAMPLE_WEIGHT + holders, seed=seed)
    sample_worker = blocks[:N].astype(np.int32)
    enforce_cap(sample_worker, n, cap, np.random.default_rng(seed))
    primary = primaries_by_majority(np.asarray(g.sample_indptr), np.asarray(g.sample_indices), sample_worker,
                                    g.num_embeddings, n, 1.05)
    return undo_moves(old, Placement.edge_cut(n, sample_worker, primary))


def old_primaries(g, old) -> np.ndarray:
    """int32 [the day's ids]: the old primaries, 0 for the ids the old placement lacks (the models place them)."""
    prim = np.zeros(g.num_embeddings, np.int32)
    prim[:old.num_embeddings] = np.asarray(old.embedding_primary)
    return prim


def placed_by_blocks(g, old, blocks: np.ndarray, prim: np.ndarray, rows: np.ndarray, cap: int, seed: int) -> Placement:
    """The placement of a model whose vertices are the samples, then ``rows`` (from ``g.num_samples`` on):
    the samples' blocks within the cap, ``rows`` on their blocks (the other ids at ``prim``), and the old
    secondaries kept (the newer ids have none)."""
    n, N = old.num_workers, g.num_samples
    sample_worker = blocks[:N].astype(np.int32)
    enforce_cap(sample_worker, n, cap, np.random.default_rng(seed))
    prim[rows] = blocks[N:N + rows.size]
    oip = np.asarray(old.secondary_indptr)
    indptr = np.concatenate([oip, np.full(g.num_embeddings - old.num_embeddings, oip[-1])]).astype(np.int64)
    return Placement.edge_cut(n, sample_worker, prim).with_secondaries(
        indptr, np.asarray(old.secondary_workers).astype(np.int32))


def repart_model(g, old, n, cap, mtk, init, seed, alpha: int, hot: int) -> Placement:
    """The repartitioning model's placement at migration cost ``alpha`` per moved row (the ``repart`` model)."""
    N, M, m_old = g.num_samples, g.num_embeddings, old.num_embeddings
    six = np.asarray(g.sample_indices)
    deg = np.bincount(six, minlength=M)
    prim = old_primaries(g, old)
    rows = np.flatnonzero((deg > 0) & (deg <= hot))
    node = np.full(M, -1, np.int64)
    node[rows] = N + np.arange(rows.size)
    anchor0 = N + rows.size
    uses = node[six] >= 0
    src = np.repeat(np.arange(N), np.diff(np.asarray(g.sample_indptr)))[uses]
    old_rows = rows[rows < m_old]
    edges = list(zip(np.concatenate([src, node[old_rows]]).tolist(),
                     np.concatenate([node[six[uses]], anchor0 + prim[old_rows]]).tolist()))
    weights = [1] * int(uses.sum()) + [alpha] * old_rows.size
    blocks = mtkahypar_blocks(mtk, init, graph=True, num_nodes=anchor0 + n, nets=edges, net_weights=weights,
                              node_weights=[SAMPLE_WEIGHT] * N + [1] * (rows.size + n),
                              fixed=[-1] * anchor0 + list(range(n)),
                              block_caps=np.full(n, cap * SAMPLE_WEIGHT + int(np.ceil(1.05 * rows.size / n)) + 2),
                              seed=seed)
    return placed_by_blocks(g, old, blocks, prim, rows, cap, seed)


def batch_model(g, old, n, cap, mtk, init, seed, alpha: int, batch_size: int) -> Placement:
    """The ``batch`` model's placement at migration cost ``alpha`` per moved row."""
    N, M, m_old = g.num_samples, g.num_embeddings, old.num_embeddings
    sip, six = np.asarray(g.sample_indptr), np.asarray(g.sample_indices)
    prim = old_primaries(g, old)
    oip, ow = np.asarray(old.secondary_indptr), np.asarray(old.secondary_workers)
    rows = np.flatnonzero(np.bincount(six, minlength=M) > 0)
    node = np.full(M, -1, np.int64)
    node[rows] = N + np.arange(rows.size)
    fixed = [-1] * (N + rows.size)
    secondaries = {}  # old row -> its fixed secondary vertices
    for r in rows[rows < m_old]:
        if oip[r + 1] > oip[r]:
            secondaries[int(r)] = list(range(len(fixed), len(fixed) + int(oip[r + 1] - oip[r])))
            fixed.extend(ow[oip[r]:oip[r + 1]].tolist())
    anchor0 = len(fixed)
    fixed += list(range(n))
    sample = np.repeat(np.arange(N), np.diff(sip))
    window = sample // (batch_size * n)
    order = np.lexsort((sample, window, six))
    key = six[order].astype(np.int64) * (int(window.max()) + 1) + window[order]
    cuts = np.flatnonzero(np.diff(key)) + 1
    nets = []
    for a, b in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [key.size]]).tolist()):
        r = int(six[order[a]])
        nets.append(sample[order[a:b]].tolist() + [int(node[r])] + secondaries.get(r, []))
    old_rows = rows[rows < m_old]
    nets += [[int(node[r]), anchor0 + int(prim[r])] for r in old_rows]
    held = np.bincount(np.asarray(fixed[N + rows.size:]), minlength=n)
    blocks = mtkahypar_blocks(mtk, init, graph=False, num_nodes=len(fixed), nets=nets,
                              net_weights=[1] * (len(nets) - old_rows.size) + [alpha] * old_rows.size,
                              node_weights=[SAMPLE_WEIGHT] * N + [1] * (len(fixed) - N), fixed=fixed,
                              block_caps=cap * SAMPLE_WEIGHT + int(np.ceil(1.05 * rows.size / n)) + 2 + held,
                              seed=seed)
    return placed_by_blocks(g, old, blocks, prim, rows, cap, seed)


def chain_from(g, old, topo, start: Placement, budget: int, seed: int, batch_size: int) -> Placement:
    """Target mode's ``sweep`` candidate (the chain through the budget ladder up to ``budget``) run from ``start``."""
    comp = I._compact(g)
    options, defaults = I.resolve_options(Options(batch_size=batch_size, target="none"), g, old.num_workers,
                                          degree=comp.degree)
    steps = [rows for _, rows in I.budget_ladder(comp.used_ids.size) if rows <= budget]
    return I._refine(g, old, topo, budget, seed, options, defaults, start, comp, I._old_rows(comp.used_ids, old, None),
                     None, time.perf_counter(), steps=steps)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    IB.add_one_day_arguments(ap, budgets="5")
    ap.add_argument("--models", default="km1,repart", help="km1, repart, batch (comma-separated).")
    ap.add_argument("--alphas", default="1000,3", help="The repart and batch models' migration costs per moved row.")
    ap.add_argument("--chain", action="store_true", help="Also run target mode's chain from each start (and from "
                    "place_new_data, the control).")
    ap.add_argument("--hot", type=int, default=2000, help="repart: rows of more samples stay where they are.")
    ap.add_argument("--threads", type=int, default=1, help="Mt-KaHyPar's threads.")
    args = ap.parse_args(argv)
    mtk = import_mtkahypar()
    init = mtk.initialize(args.threads)
    g, old, full, topo, _ = IB.one_day(args)
    bs, n = args.batch_size, args.workers
    used = I._compact(g).used_ids
    goal = match_workers(old, full, topology=topo, rows=used)
    full_reads = batch_remote_reads(g, goal, bs)
    cap = sample_cap(g.num_samples, n, 1.05)
    print(f"# {' '.join(sys.argv)}")
    print(f"# day {args.day} ({args.preset}, {args.source}): {g.num_samples:,} samples, {used.size:,} used rows, "
          f"{n} workers, batch {bs}; full re-partition {full_reads:,} batch reads")
    print("\n| placement | rows moved | batch reads | vs full | pairs | reads per pair | Mt-KaHyPar s |")
    print("|---|---:|---:|---:|---:|---:|---:|")

    def line(name, p, seconds=None):
        b, c = batch_remote_reads(g, p, bs), epoch_unique_remote(g, p)
        s = f"{seconds:.1f}" if seconds is not None else ""
        print(f"| {name} | {moved_rows(old, p, rows=used).total:,} | {b:,} | {b / full_reads:.3f} | {c:,} | "
              f"{b / c:.3f} | {s} |", flush=True)

    starts = []
    for model in [m for m in args.models.split(",") if m]:
        for alpha in ([None] if model == "km1" else [int(a) for a in args.alphas.split(",")]):
            t = time.perf_counter()
            if model == "km1":
                p, name = km1_kept_rows(g, old, n, cap, mtk, init, args.seed), "km1, old rows' holders fixed"
            elif model == "repart":
                p, name = repart_model(g, old, n, cap, mtk, init, args.seed, alpha, args.hot), f"repart, alpha {alpha}"
            else:
                p, name = batch_model(g, old, n, cap, mtk, init, args.seed, alpha, bs), f"batch, alpha {alpha}"
            line(name, p, time.perf_counter() - t)
            starts.append((name, p))
    placed = place_and_repartition(g, old, topo, max_moved_rows=0, seed=args.seed,
                                   options=Options(batch_size=bs, target="none"))[0] if args.chain else None
    for pct in [float(x) for x in args.budgets.split(",") if x.strip()]:
        budget = int(pct / 100.0 * used.size)
        for name, p in starts:
            if moved_rows(old, p, rows=used).total <= budget:
                q = repartition_incremental(g, old, topo, max_moved_rows=budget, start=p, seed=args.seed,
                                            options=Options(batch_size=bs, target="none"))
                line(f"exact plan at {pct:g}% from ({name})", q)
                if args.chain:
                    line(f"chain to {pct:g}% from ({name})", chain_from(g, old, topo, p, budget, args.seed, bs))
        if args.chain:
            line(f"chain to {pct:g}% from `place_new_data` (the control)",
                 chain_from(g, old, topo, placed, budget, args.seed, bs))
    line("full re-partition (renamed)", goal)


if __name__ == "__main__":
    main()
