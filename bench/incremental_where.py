"""Where a budgeted placement reads more than the full re-partition, row by row (issue 36; a measurement).

One new day on an old manifest: the full ``hybrid`` re-partition, the placed data (nothing moved) and the
budgeted placement (``place_and_repartition``, the exact plan's defaults; ``--target none`` for the plan's
own moves only). With each placement's samples fixed, a row's batch reads are its own (the chunks of each
worker's samples that read it, less the workers that hold it: ``row_batches``, ``row_reads``), so the
``batch_remote_reads`` of a placement split exactly over its rows. The table sums them by old / new id and
by the row's degree on the day, with each group's share of the budgeted placement's excess over the full
re-partition. Then, per worker, the copies (secondaries) that cost no row and would read less: a new id or a
copy the old placement held, in place of the worker's least read copy, counted with the budgeted
placement's samples fixed; and the same for copies that cost one row each and save at least 3 reads. Last,
with the same samples, what each moved row's move saves, and how many old rows that stayed (without
copies) would save 2 reads or more by one primary move.

The day is a dataset on a manifest, or (without them) a day of bench/incremental_bench.py's pools: day
``--day`` on ``hybrid`` of the day before, as bench/incremental_oracle.py draws it. Usage (session 26's
numbers, docs/incremental-log.md)::

    gmp data synth --preset criteo-kaggle-independent -n 1000000 --scale 0.02 -o D/s0
    gmp data synth --continue D/s0 -o D/s1
    gmp partition D/s0 --workers 8 --method hybrid -o D/p0
    python bench/incremental_where.py D/s1 D/p0 --budgets 5
    python bench/incremental_where.py --pool POOL --pool-samples 1500000 --preset criteo-kaggle-independent
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import incremental_bench as IB  # noqa: E402
from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.graph import build_graph  # noqa: E402
from gmp.manifest import load_manifest  # noqa: E402
from gmp.partition import _incremental_kernels as K  # noqa: E402
from gmp.partition import incremental as I  # noqa: E402
from gmp.partition import run_partitioner  # noqa: E402

DEGREES = (1, 2, 3, 5, 9, 17, 65, 257)


def batches(graph, comp, sample_worker, n: int, batch_size: int) -> np.ndarray:
    """int32 [used rows, N]: the chunks of each worker's samples that read each used row (``comp``: the
    graph's compact ids, ``incremental._compact``)."""
    num_used = comp.used_ids.size
    nb = np.zeros((num_used, n), dtype=np.int32)
    K.row_batches(np.asarray(graph.sample_indptr), comp.cindices, np.asarray(sample_worker, dtype=np.int32),
                  np.int64(batch_size), nb, np.zeros(num_used, dtype=bool))
    return nb


def row_reads(nb: np.ndarray, prim: np.ndarray, sec: np.ndarray) -> np.ndarray:
    out = np.empty(prim.size, dtype=np.int64)
    K.row_reads(nb, prim.astype(np.int32), sec, out)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", nargs="?", help="the new day (else a day of --pool)")
    ap.add_argument("manifest", nargs="?", help="the old placement's manifest")
    ap.add_argument("--target", default="full", choices=("full", "none"))
    IB.add_one_day_arguments(ap, budgets="5")
    args = ap.parse_args(argv)
    bs = args.batch_size
    if args.dataset is not None:
        graph = build_graph(load_dataset(args.dataset))
        man = load_manifest(args.manifest)
        old, topo, full = man.placement, man.topology, None
        trained = None if man.history is None else man.history.trained
        where = f"{args.dataset} on {args.manifest}"
    else:
        graph, old, full, topo, _ = IB.one_day(args)
        trained, where = None, f"day {args.day} of {args.pool} ({args.preset})"
    n = topo.num_workers
    comp = I._compact(graph)
    used, deg = comp.used_ids, comp.degree
    is_old = I._old_rows(used, old, trained)
    percent = args.budgets.split(",")[0]
    budget = I.migration_budget(f"{percent}%", used.size)
    if full is None:
        full = run_partitioner("hybrid", graph, topo, seed=0, options={"batch_size": bs})
    placed, budgeted = I.place_and_repartition(
        graph, old, topo, max_moved_rows=budget, trained=trained, goal=full if args.target == "full" else None,
        options=I.Options(batch_size=bs, target=args.target, alongside=False))
    reads, masks, nbs = {}, {}, {}
    for name, p in (("full", full), ("budgeted", budgeted), ("placed", placed)):
        nbs[name] = batches(graph, comp, p.sample_worker, n, bs)
        masks[name] = I._secondary_masks(p, used)
        reads[name] = row_reads(nbs[name], np.asarray(p.embedding_primary)[used], masks[name])
    total = {k: int(v.sum()) for k, v in reads.items()}
    excess = total["budgeted"] - total["full"]
    print(f"{where}: budget {percent}% ({budget:,} rows), {used.size:,} used rows "
          f"({int(is_old.sum()):,} old), {n} workers, batch {bs}; kept {budgeted.info.get('kept', 'plan')}")
    print(f"batch_remote_reads: full {total['full']:,}, budgeted {total['budgeted']:,} "
          f"({total['budgeted'] / total['full']:.3f}x), placed {total['placed']:,} "
          f"({total['placed'] / total['full']:.3f}x)")
    print("| rows | degree | count | full | budgeted | placed | share of the excess |")
    print("|---|---|---:|---:|---:|---:|---:|")
    bounds = DEGREES + (np.iinfo(np.int64).max,)
    for kind, mask in (("old", is_old), ("new", ~is_old)):
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            m = mask & (deg >= lo) & (deg < hi)
            if not m.any():
                continue
            r = {k: int(v[m].sum()) for k, v in reads.items()}
            span = f"{lo}" if hi == lo + 1 else (f"{lo}-{hi - 1}" if hi < bounds[-1] else f">= {lo}")
            print(f"| {kind} | {span} | {int(m.sum()):,} | {r['full']:,} | {r['budgeted']:,} | {r['placed']:,} | "
                  f"{(r['budgeted'] - r['full']) / max(excess, 1):.3f} |")
    # copies left on the table, with the budgeted placement's samples fixed
    nb = nbs["budgeted"]
    prim = np.asarray(budgeted.embedding_primary)[used]
    sec = masks["budgeted"]
    oprim, osec = I.old_holders(old, used, is_old)
    free_gain = paid_gain = paid_swaps = 0
    for w in range(n):
        bit = np.int64(1) << np.int64(w)
        copies = np.flatnonzero(((sec & bit) != 0) & (prim != w))
        weakest = np.sort(nb[copies, w])
        lacking = np.flatnonzero(((sec & bit) == 0) & (prim != w))
        free = ~is_old[lacking] | (oprim[lacking] == w) | ((osec[lacking] & bit) != 0)
        for rows, least, into in ((lacking[free], 1, "free"), (lacking[~free], 3, "paid")):
            gains = np.sort(nb[rows, w])[::-1][:weakest.size] - weakest[:rows.size]
            gains = gains[:np.argmin(np.append(gains >= least, False))]  # the pairs gaining at least `least`
            if into == "free":
                free_gain += int(gains.sum())
            else:
                paid_gain += int(gains.sum())
                paid_swaps += int(gains.size)
    print(f"copies that cost no row and would read less (each for a worker's least read copy): "
          f"{free_gain:,} reads in all")
    print(f"copies that cost a row and save at least 3 reads each: {paid_swaps:,}, {paid_gain:,} reads in all")
    # the rows moved against what their moves save, and the best single primary move of the old rows that
    # stayed without copies (their reads if their primary sat on w: every other worker's chunks)
    here = reads["budgeted"]
    back = row_reads(nb, np.where(is_old, oprim, prim), np.where(is_old, osec, sec))
    moved = I.moved_per_row(oprim, osec, prim.astype(np.int32), sec, is_old) > 0
    gain = (back - here)[moved]
    stayed = is_old & ~moved & (sec == 0)
    best = (here[stayed, None] - (nb[stayed].sum(axis=1, keepdims=True) - nb[stayed])).max(axis=1, initial=0)
    print(f"rows moved: {int(moved.sum()):,}, the reads each saves with these samples: 10th percentile "
          f"{np.percentile(gain, 10):.0f}, median {np.median(gain):.0f}, {int((gain <= 0).sum()):,} at 0 or less; "
          f"old rows that stayed without copies and would save 2 or more by one move: {int((best >= 2).sum()):,}")


if __name__ == "__main__":
    main()
