"""Oracle budget curves for one drifting day (issue 36; a measurement, not a test).

What can a migration budget buy at best on a day where target mode stays above 1.10x of the full
re-partition's reads (the independent-fields drift at 5%: docs/incremental-log.md)? Two questions:

1. **The full re-partition's own moves, ranked by an oracle.** The day's full ``hybrid`` re-partition
   (its workers renamed to the old ones, :func:`~gmp.partition.incremental.match_workers`) moves a set of
   old rows. Rank them (``--rankings``), take the longest prefix within each budget (the rest of the
   old rows stay, new ids start on the full re-partition's workers), then fit the samples to those
   rows as well as this module's tools can: five sample sweeps with the rows fixed, from the full
   re-partition's samples and from the placed data's, each also followed by a refinement that may move
   new ids and re-spend the same number of rows (:func:`~gmp.partition.incremental.repartition_incremental`,
   ``sweep="every"``, 3 rounds, budget = the prefix's moved rows); the lowest reads of the four count.

   ``fgain``    gain per moved row with the full re-partition's samples fixed (exact: a row's batch
                reads depend on that row alone then); "the fraction of the gain in the first 5%" is
                of this gain
   ``pgain``    the same with the placed data's samples fixed
   ``degree``   the rows the day reads most first
   ``random``   a seeded random order (the baseline a ranking must beat)
   ``loop``     closed loop: 0.5% of the used rows at a time, by gain per row under the samples the
                previous step settled on, the samples re-fitted after each step

2. **hybrid's own sweeps from the kept placement** (``--hybrid-rounds``): ``hybrid``'s 1D rounds
   (sample and primary sweeps, ``beta=0``) started from the placed data instead of its multilevel
   start, old secondaries kept: the moved rows and reads after each round, i.e. where an unpenalised
   "Lagrangian target" (hybrid from the kept placement, a price per moved row) would end at price 0.

Old placement: ``hybrid`` on the previous day (seed ``--seed``); full re-partition: ``hybrid`` on the
day (seed ``--seed + day``), as bench/incremental_bench.py. Usage (the numbers of docs/incremental-log.md)::

    python bench/incremental_oracle.py --pool POOL --pool-samples 1500000 --preset criteo-kaggle-independent
    python bench/incremental_oracle.py --source mix --pool POOLMIX --preset criteo-kaggle

The machine these numbers come from is shared: CPU seconds are noisy.
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

from gmp.graph import BipartiteGraph  # noqa: E402
from gmp.metrics import batch_remote_reads  # noqa: E402
from gmp.partition import _incremental_kernels as K  # noqa: E402
from gmp.partition import hybrid as H  # noqa: E402
from gmp.partition import incremental as I  # noqa: E402
from gmp.partition._objective import Options as HybridOptions  # noqa: E402
from gmp.partition.incremental import (Options, match_workers, moved_rows, place_and_repartition,  # noqa: E402
                                       repartition_incremental)

RANKINGS = ("fgain", "pgain", "degree", "random", "loop")


class Day:
    """One day's old placement, full re-partition and the arrays over its used (compact) rows."""

    def __init__(self, graph: BipartiteGraph, old, full, topo, batch_size: int, seed: int):
        self.g, self.old, self.topo, self.bs, self.n = graph, old, topo, batch_size, topo.num_workers
        self.comp = I._compact(graph)
        used = self.comp.used_ids
        self.U = used.size
        self.is_old = I._old_rows(used, old, None)
        self.goal = match_workers(old, full, topology=topo, rows=used)
        self.full_reads = batch_remote_reads(graph, self.goal, batch_size)
        self.gprim = np.asarray(self.goal.embedding_primary)[used].astype(np.int32)
        self.gsec = I._secondary_masks(self.goal, used)
        oprim = np.full(self.U, -1, np.int32)
        oprim[self.is_old] = np.asarray(old.embedding_primary)[used[self.is_old]]
        osec = np.zeros(self.U, np.int64)
        osec[self.is_old] = I._secondary_masks(old, used[self.is_old])
        held = osec | np.left_shift(np.int64(1), np.maximum(oprim, 0).astype(np.int64))
        fresh = np.bitwise_count((self.gsec & ~held).view(np.uint64)).astype(np.int64)
        self.fresh = fresh
        self.moved_prim = self.is_old & (self.gprim != oprim)
        # moved_rows' count of taking the full re-partition's placement of a row
        self.rows_of = np.where(self.is_old, self.moved_prim.astype(np.int64) + fresh, 0)
        self.R = np.flatnonzero(self.rows_of > 0)
        self.start_prim = np.where(self.is_old, oprim, self.gprim).astype(np.int32)
        self.start_sec = np.where(self.is_old, osec, self.gsec).astype(np.int64)
        self.indptr = np.asarray(graph.sample_indptr)
        self.cost = np.ascontiguousarray(topo.cost, dtype=np.float64)
        self.opts = Options(batch_size=batch_size)
        self.seed = seed

    def row_reads(self, sw, prim, sec) -> np.ndarray:
        nb = np.zeros((self.U, self.n), np.int32)
        K.row_batches(self.indptr, self.comp.cindices, np.asarray(sw, np.int32), np.int64(self.bs), nb,
                      np.zeros(self.U, bool))
        out = np.empty(self.U, np.int64)
        K.row_reads(nb, prim, sec, out)
        return out

    def gain(self, sw, prim=None, sec=None) -> np.ndarray:
        """Reads saved by each row's move to the full re-partition's placement, samples ``sw`` fixed."""
        prim = self.start_prim if prim is None else prim
        sec = self.start_sec if sec is None else sec
        return (self.row_reads(sw, prim, sec) - self.row_reads(sw, self.gprim, self.gsec)).astype(np.float64)

    def placement(self, prim, sec, sw):
        p = I._rows_placement(self.old, self.goal, self.comp, prim, sec, self.n, {}, 0, {})
        p.sample_worker[:] = sw
        return p

    def evaluate(self, prim, sec, starts) -> tuple[int, int, str, np.ndarray]:
        """(reads, moved rows, how, samples): the best fit of the samples to these rows (module docstring)."""
        moved = moved_rows(self.old, self.placement(prim, sec, self.goal.sample_worker)).total
        best = None
        for name, sw0 in starts:
            sw = np.array(sw0, np.int32)
            count = np.zeros((self.U, self.n), np.int32)
            K.count_samples(self.indptr, self.comp.cindices, sw, count)
            I._sweep_from(self.g, self.comp, sw, prim, sec, count, self.cost, self.opts, sweeps=5)
            swept = self.placement(prim, sec, sw)
            refined = repartition_incremental(self.g, self.old, self.topo, max_moved_rows=moved, start=swept,
                                              options=Options(batch_size=self.bs, target="none", sweep="every",
                                                              rounds=3), seed=self.seed)
            for how, p in ((name, swept), (name + "+refine", refined)):
                r = batch_remote_reads(self.g, p, self.bs)
                if best is None or r < best[0]:
                    best = (r, moved_rows(self.old, p).total, how, np.array(p.sample_worker, np.int32))
        return best


def prefix_curve(day: Day, order: np.ndarray, budgets: list[int], starts, label: str) -> None:
    cum = np.cumsum(day.rows_of[order])
    for b in budgets + [int(day.rows_of.sum())]:
        k = int(np.searchsorted(cum, b, side="right"))
        prim, sec = day.start_prim.copy(), day.start_sec.copy()
        take = order[:k]
        prim[take], sec[take] = day.gprim[take], day.gsec[take]
        reads, moved, how, _ = day.evaluate(prim, sec, starts)
        print(f"| {label} | {b:,} ({100 * b / day.U:.1f}%) | {moved:,} | {reads:,} | {reads / day.full_reads:.3f} | "
              f"{how} |", flush=True)


def loop_curve(day: Day, budgets: list[int], starts) -> None:
    prim, sec = day.start_prim.copy(), day.start_sec.copy()
    done = np.zeros(day.U, bool)
    sw = np.array(starts[1][1], np.int32)  # the placed data's samples
    step = max(day.U // 200, 1)
    spent, marks, last = 0, list(budgets), None
    while marks:
        per_row = day.gain(sw, prim, sec) / np.maximum(day.rows_of, 1)
        cand = day.R[~done[day.R] & (per_row[day.R] > 0)]
        if cand.size == 0:
            reads, moved, how = last or (0, 0, "")
            print(f"| loop (stops: no move of the full re-partition's left reads less under the settled samples) | "
                  f"{spent:,} ({100 * spent / day.U:.1f}%) | {moved:,} | {reads:,} | {reads / day.full_reads:.3f} | "
                  f"{how} |", flush=True)
            break
        o = cand[np.argsort(-per_row[cand], kind="stable")]
        cum = np.cumsum(day.rows_of[o])
        k = int(np.searchsorted(cum, min(step, marks[0] - spent), side="right"))
        if k == 0:
            marks.pop(0)
            continue
        take = o[:k]
        prim[take], sec[take] = day.gprim[take], day.gsec[take]
        done[take] = True
        spent += int(cum[k - 1])
        reads, moved, how, sw = day.evaluate(prim, sec, [("settled", sw)])
        last = (reads, moved, how)
        if spent >= marks[0] - step // 10:
            b = marks.pop(0)
            print(f"| loop | {b:,} ({100 * b / day.U:.1f}%) | {moved:,} | {reads:,} | {reads / day.full_reads:.3f} | "
                  f"{how} |", flush=True)


def hybrid_from_placed(day: Day, placed, rounds: int) -> None:
    gc = BipartiteGraph(day.indptr, day.comp.cindices, day.U, check=False)
    ho = HybridOptions(batch_size=day.bs, rounds=1, tol=0.0, beta=0.0)
    sw = np.array(placed.sample_worker, np.int32)
    prim = np.asarray(placed.embedding_primary)[day.comp.used_ids].astype(np.int32)
    state = H._State(gc, day.cost, ho, sw, prim, np.random.default_rng(day.seed), batch_size=day.bs)
    t = time.process_time()
    for r in range(1, rounds + 1):
        H._run_rounds(state, ho, [], "worker", time.perf_counter(), max_rounds=1, show=False)
        p = day.placement(state.prim.copy(), day.start_sec, state.sw)
        moved = moved_rows(day.old, p).total
        reads = batch_remote_reads(day.g, p, day.bs)
        print(f"| {r} | {moved:,} ({100 * moved / day.U:.1f}%) | {reads:,} | {reads / day.full_reads:.3f} | "
              f"{time.process_time() - t:.1f} |", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    IB.add_one_day_arguments(ap, budgets="1,2,5,10,20")
    ap.add_argument("--rankings", default=",".join(RANKINGS))
    ap.add_argument("--hybrid-rounds", type=int, default=8, help="0: leave question 2 out.")
    args = ap.parse_args(argv)
    graph, old, full, topo, t_full = IB.one_day(args)
    bs, d = args.batch_size, args.day
    day = Day(graph, old, full, topo, bs, args.seed)
    budgets = [int(float(p) / 100.0 * day.U) for p in args.budgets.split(",") if p.strip()]
    b5 = int(0.05 * day.U)
    t = time.process_time()
    placed, chain5 = place_and_repartition(day.g, old, topo, max_moved_rows=b5, seed=args.seed,
                                           options=Options(batch_size=bs), goal=full)
    t_chain = time.process_time() - t
    placed_reads = batch_remote_reads(day.g, placed, bs)
    fr = day.full_reads
    print(f"# {' '.join(sys.argv)}")
    print(f"# day {d} ({args.preset}, {args.source}): {day.g.num_samples:,} samples, {day.U:,} used rows "
          f"({int(day.is_old.sum()):,} old), {args.workers} workers, batch {bs}")
    print(f"# full re-partition {fr:,} reads ({t_full:.1f} s CPU); placed {placed_reads:,} "
          f"({placed_reads / fr:.3f}x); target mode at 5% {batch_remote_reads(day.g, chain5, bs):,} "
          f"({chain5.info['kept']} kept; {t_chain:.1f} s CPU with the full re-partition given); "
          f"1.10x = {int(1.1 * fr):,}")
    R, deg = day.R, day.comp.degree
    kept_old = day.is_old & (day.rows_of == 0)
    print(f"# the full re-partition moves {int(day.rows_of.sum()):,} rows ({100 * day.rows_of.sum() / day.U:.1f}% of "
          f"the used rows; {int(day.moved_prim.sum()):,} primaries, {int(day.fresh.sum()):,} secondaries), touching "
          f"{100 * R.size / max(int(day.is_old.sum()), 1):.1f}% of the old used rows; their degree: median "
          f"{np.median(deg[R]):.0f}, mean {deg[R].mean():.1f} (old rows it keeps: median "
          f"{np.median(deg[kept_old]) if kept_old.any() else 0:.0f}, mean "
          f"{deg[kept_old].mean() if kept_old.any() else 0:.1f}); they carry {100 * deg[R].sum() / deg.sum():.1f}% "
          f"of the day's edges")
    gain = day.gain(day.goal.sample_worker)
    order = R[np.argsort(-(gain[R] / day.rows_of[R]), kind="stable")]
    cum = np.cumsum(day.rows_of[order])
    total = float(gain[R].sum())
    for p, b in zip(args.budgets.split(","), budgets):
        k = int(np.searchsorted(cum, b, side="right"))
        print(f"# fgain: the first {p}% of the used rows by gain per row hold {100 * gain[order[:k]].sum() / total:.1f}% "
              f"of the {total:,.0f} reads the full re-partition's old-row moves save with its samples fixed")
    starts = [("full's samples", day.goal.sample_worker), ("placed samples", placed.sample_worker)]
    print("\n| ranking | budget (rows) | rows moved | batch_remote_reads | vs full | samples fitted from |")
    print("|---|---:|---:|---:|---:|---|")
    rng = np.random.default_rng(args.seed)
    for rk in [x.strip() for x in args.rankings.split(",") if x.strip()]:
        t = time.process_time()
        if rk == "fgain":
            prefix_curve(day, order, budgets, starts, rk)
        elif rk == "pgain":
            g2 = day.gain(placed.sample_worker)
            prefix_curve(day, R[np.argsort(-(g2[R] / day.rows_of[R]), kind="stable")], budgets, starts, rk)
        elif rk == "degree":
            prefix_curve(day, R[np.argsort(-deg[R], kind="stable")], budgets, starts, rk)
        elif rk == "random":
            prefix_curve(day, rng.permutation(R), budgets, starts, rk)
        elif rk == "loop":
            loop_curve(day, budgets, starts)
        else:
            raise SystemExit(f"unknown ranking {rk!r}; choose from {', '.join(RANKINGS)}")
        print(f"<!-- {rk}: {time.process_time() - t:.1f} s CPU -->", flush=True)
    if args.hybrid_rounds:
        print("\nhybrid's 1D rounds from the placed data (beta 0, old secondaries kept)\n")
        print("| round | rows moved | batch_remote_reads | vs full | CPU s |")
        print("|---:|---:|---:|---:|---:|")
        hybrid_from_placed(day, placed, args.hybrid_rounds)


if __name__ == "__main__":
    main()
