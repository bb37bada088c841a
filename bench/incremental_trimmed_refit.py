"""The re-fit brought under a budget, trimmed or from a prefix (issue 36; a measurement, not a test).

Target mode's ``refit`` candidate (gmp/partition/incremental.py, ``_refit_toward``) is a candidate only at
budgets its moved rows fit: on sparse days it reads below the full re-partition (0.86-0.96x) but moves
30-40% of the used rows, and below that the budget curve is the sweep's chain, which plateaus (20% spends
11%). Here the re-fit is computed whatever the budget and trimmed: with its samples fixed a row's batch reads
depend on that row alone (``row_batches``), so each moved row has an exact cost of returning it to its old
placement (primary and secondaries); the moved rows return cheapest per row first, and the candidate at
budget B is the least-read state of that order with at most B rows moved (monotone in B, as the chain).
Beside it, the other way to a re-fit within the budget: the prefix of the ordered moves toward the target
that fits B (the ``target`` candidate), re-fitted as the re-fit is (``_refit``: its samples swept, then the
exact plan's moves within B rows). Printed beside the shipped curve (``--compare-full``'s), all against the
full re-partition's reads.

Usage (docs/incremental-log.md, "Session 24: the re-fit within the budget")::

    gmp data synth --preset criteo-kaggle -n 100000 --scale 0.02 -o D/s0
    gmp data synth --continue D/s0 -o D/s1
    gmp partition D/s0 --workers 8 --method hybrid -o D/p0
    python bench/incremental_trimmed_refit.py D/s1 D/p0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.graph import build_graph  # noqa: E402
from gmp.manifest import load_manifest  # noqa: E402
from gmp.metrics import batch_remote_reads  # noqa: E402
from gmp.partition import _incremental_kernels as K  # noqa: E402
from gmp.partition import incremental as I  # noqa: E402
from gmp.partition import run_partitioner  # noqa: E402


def refit_at_every_budget(graph, old, topo, full, batch_size: int):
    """``(refit, captured, shipped)``: target mode at 100% with ``--compare-full``'s curve (``shipped``), and
    the re-fit it computed with what it was computed from (``captured``)."""
    captured = {}
    orig = I._refit_toward

    def spy(graph, old, topology, goal, comp, is_old, path, top, seed, options, created):
        r = orig(graph, old, topology, goal, comp, is_old, path, np.iinfo(np.int64).max, seed, options, created)
        captured.update(goal=goal, comp=comp, is_old=is_old, path=path, options=options, created=created)
        return r if r is not None and r.need <= top else None

    I._refit_toward = spy
    try:
        trained = None if old.history is None else old.history.trained
        _, res = I.place_and_repartition(graph, old.placement, topo, max_moved_rows=np.iinfo(np.int64).max,
                                         options=I.Options(batch_size=batch_size), trained=trained, goal=full,
                                         curve=True)
    finally:
        I._refit_toward = orig
    refit = res if res.info["kept"] == "refit" else None
    return refit, captured, res.info["curve"]


def return_order(graph, old, refit, comp, is_old, n: int, batch_size: int):
    """``(rows moved, reads)`` after each return of the re-fit's moved rows, cheapest per row first."""
    used = comp.used_ids
    sw = np.asarray(refit.sample_worker, dtype=np.int32)
    prim = np.asarray(refit.embedding_primary)[used].astype(np.int32)
    sec = I._secondary_masks(refit, used)
    oprim, osec = I.old_holders(old, used, is_old)
    nb = np.zeros((used.size, n), np.int32)
    K.row_batches(np.asarray(graph.sample_indptr), comp.cindices, sw, np.int64(batch_size), nb,
                  np.zeros(used.size, bool))
    here, back = np.empty(used.size, np.int64), np.empty(used.size, np.int64)
    K.row_reads(nb, prim, sec, here)
    K.row_reads(nb, np.where(is_old, oprim, prim).astype(np.int32), np.where(is_old, osec, sec), back)
    rows_of = I.moved_per_row(oprim, osec, prim, sec, is_old)
    moved = np.flatnonzero(rows_of > 0)
    cost = back[moved] - here[moved]
    order = moved[np.argsort(cost / rows_of[moved], kind="stable")]
    start_rows, start_reads = int(rows_of.sum()), int(here.sum())
    return (np.concatenate([[start_rows], start_rows - np.cumsum(rows_of[order])]),
            np.concatenate([[start_reads], start_reads + np.cumsum((back - here)[order])]), int((cost <= 0).sum()))


def prefix_refit(graph, old, topo, cap: dict, budget: int):
    """``(reads, rows)`` of the ordered moves' prefix within ``budget``, re-fitted within its rows."""
    path = cap["path"]
    _, rows, k = path.at(budget)
    prim, sec = path.prim.copy(), path.sec.copy()
    take = path.rows[:k]
    prim[take], sec[take] = path.gprim[take], path.gsec[take]
    r = I._refit(graph, old, topo, cap["goal"], cap["comp"], cap["is_old"], prim, sec, rows, 0, cap["options"],
                 cap["created"])
    return r.reads, r.rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", help="the new day (a prepared dataset)")
    ap.add_argument("manifest", help="the old day's manifest")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    ds = load_dataset(args.dataset)
    graph = build_graph(ds)
    old = load_manifest(args.manifest)
    topo = old.topology
    full = run_partitioner("hybrid", graph, topo, seed=args.seed, options={"batch_size": args.batch_size})
    full_reads = batch_remote_reads(graph, full, args.batch_size)
    refit, cap, shipped = refit_at_every_budget(graph, old, topo, full, args.batch_size)
    if refit is None:
        sys.exit("the re-fit was not kept at 100% on this day: nothing to trim")
    rows, reads, free = return_order(graph, old.placement, refit, cap["comp"], cap["is_old"], topo.num_workers,
                                     args.batch_size)
    print(f"full re-partition: {full_reads:,} reads; re-fit: {int(reads[0]):,} reads, {int(rows[0]):,} rows moved "
          f"({free} moved rows return at no cost)")
    print("| budget | rows | shipped: reads (vs full) | kept | trimmed re-fit: reads (vs full) | its rows "
          "| prefix re-fit: reads (vs full) | its rows |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|")
    for pt in (p for p in shipped if p["percent"] is not None):  # the ladder's points, not the call's own budget
        b = int(pt["budget"])
        k = int(np.argmax(rows <= b)) if (rows <= b).any() else None
        if k is None:
            trimmed = "-"
        else:
            j = k + int(np.argmin(reads[k:]))
            trimmed = f"{int(reads[j]):,} ({reads[j] / full_reads:.3f}x) | {int(rows[j]):,}"
        pr, prows = prefix_refit(graph, old.placement, topo, cap, b)
        shipped_reads = pt["batch_remote_reads"]
        print(f"| {pt['percent']}% | {b:,} | {shipped_reads:,} ({shipped_reads / full_reads:.3f}x) | {pt['kept']} | "
              f"{trimmed} | {pr:,} ({pr / full_reads:.3f}x) | {prows:,} |")


if __name__ == "__main__":
    main()
