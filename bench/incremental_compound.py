"""Compound moves, a free-sample start and the re-fitted target on one drift (issue 36; a measurement, not a test).

Session 19's attempts at the independent-fields drift at a 5% budget (docs/incremental-log.md, "Session 19"),
on bench/incremental_bench.py's days: day 0 ``hybrid`` (seed ``--seed``), the day's full re-partition
``hybrid`` (seed ``--seed + d``), day 1's old placement day 0's, day 2's the 5% target-mode chain's day 1
(the bench's ``incr-5%`` strategy). Reads are ``batch_remote_reads`` against the day's full re-partition.

``--ideas`` (comma-separated):

``joint``    compound moves: every row's best primary move ranked by its joint gain, the row's own Eq. 3
             gain plus, for each sample reading it that is not on the row's new worker, the gain of that
             sample following it there (soft count, the row moved, the other rows fixed; followers counted
             independently, losing ones left out); closed loop: ``--step`` percent of the used rows a step
             (free moves first, then by gain; primary cap), the samples swept twice with the rows fixed
``rowonly``  the same loop with each row's own gain only (the control of ``joint``)
``free``     samples with at most ``--free-share`` of their entries on old rows held by fewer than half the
             workers take the full re-partition's worker, new ids read only by them its placement, the
             samples swept 3 times, then the shipped chain (the ladder's steps) from there
``refit``    the target's rows on every used row, the samples swept from the target's (1, 2, 5 sweeps) and
             from the placed data's, then the exact plan's moves with the same rows as budget (1 and 3
             rounds, ``sweep="every"`` and the density default)

Usage (the numbers of docs/incremental-log.md)::

    python bench/incremental_compound.py --pool POOL --pool-samples 1500000 \\
        --preset criteo-kaggle-independent --ideas refit,rowonly,free,joint

``joint`` costs ~17 s CPU a 0.5% step at 100k samples (the machine these numbers come from is shared:
CPU seconds are noisy).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import incremental_bench as IB  # noqa: E402  (the day generators)

from gmp.metrics import batch_remote_reads  # noqa: E402
from gmp.partition import _incremental_kernels as K  # noqa: E402
from gmp.partition import incremental as I  # noqa: E402
from gmp.partition import run_partitioner  # noqa: E402
from gmp.partition._common import sample_cap  # noqa: E402
from gmp.partition.incremental import (Options, budget_ladder, match_workers, moved_rows,  # noqa: E402
                                       place_and_repartition, place_new_data, repartition_incremental)
from gmp.topology import resolve_topology  # noqa: E402


@numba.njit(cache=False)
def joint_gains(indptr, cind, rptr, rsam, sw, prim, sec, count, f, df, cost, joint, out_q, out_g):
    """Every row's best primary move and its gain (``joint``: plus the following samples' gains)."""
    n = count.shape[1]
    for x in range(prim.size):
        out_q[x] = -1
        out_g[x] = 0.0
        p = prim[x]
        if rptr[x + 1] == rptr[x]:
            continue
        here = 0.0
        for w in range(n):
            if w != p and (sec[x] >> w) & 1 == 0:
                here += f[count[x, w]] * cost[p, w]
        best = 1e-9
        for q in range(n):
            if q == p:
                continue
            there = 0.0
            for w in range(n):
                if w != q and (sec[x] >> w) & 1 == 0:
                    there += f[count[x, w]] * cost[q, w]
            g = here - there
            if joint:
                for k in range(rptr[x], rptr[x + 1]):
                    s = rsam[k]
                    a = sw[s]
                    if a == q:
                        continue
                    d = 0.0  # sample s from a to q, x already on q
                    for e in range(indptr[s], indptr[s + 1]):
                        y = cind[e]
                        if y == x:
                            if (sec[x] >> a) & 1 == 0:
                                d -= cost[q, a] * df[count[x, a] - 1]
                            continue
                        py = prim[y]
                        if py != a and (sec[y] >> a) & 1 == 0:
                            d -= cost[py, a] * df[count[y, a] - 1]
                        if py != q and (sec[y] >> q) & 1 == 0:
                            d += cost[py, q] * df[count[y, q]]
                    if d < 0:
                        g -= d
            if g > best:
                best = g
                out_q[x] = q
                out_g[x] = g


class Day:
    """One day's old placement, full re-partition (renamed) and placed data over its compact ids."""

    def __init__(self, d, graph, old, full, topo, bs):
        self.d, self.g, self.old, self.topo, self.bs, self.n = d, graph, old, topo, bs, topo.num_workers
        self.cost = np.ascontiguousarray(topo.cost, dtype=np.float64)
        self.comp = comp = I._compact(graph)
        used = comp.used_ids
        self.U = used.size
        self.is_old = I._old_rows(used, old, None)
        self.goal = match_workers(old, full, topology=topo, rows=used)
        self.full_reads = batch_remote_reads(graph, self.goal, bs)
        self.indptr = np.asarray(graph.sample_indptr)
        self.gprim = np.asarray(self.goal.embedding_primary)[used].astype(np.int32)
        self.gsec = I._secondary_masks(self.goal, used)
        self.oprim = np.full(self.U, -1, np.int32)
        self.oprim[self.is_old] = np.asarray(old.embedding_primary)[used[self.is_old]]
        self.osec = np.zeros(self.U, np.int64)
        self.osec[self.is_old] = I._secondary_masks(old, used[self.is_old])
        self.opts = Options(batch_size=bs)
        self.placed = place_new_data(graph, old, topo, options=self.opts)
        self.placed_reads = batch_remote_reads(graph, self.placed, bs)
        order = np.argsort(comp.cindices, kind="stable")
        self.rsam = (np.searchsorted(self.indptr, order, side="right") - 1).astype(np.int64)
        self.rptr = np.zeros(self.U + 1, np.int64)
        self.rptr[1:] = np.cumsum(np.bincount(comp.cindices, minlength=self.U))

    def placement(self, prim, sec, sw):
        p = I._rows_placement(self.old, self.goal, self.comp, prim, sec, self.n, {}, 0, {})
        p.sample_worker[:] = sw
        return p

    def score(self, prim, sec, sw) -> tuple[int, int]:
        p = self.placement(prim, sec, sw)
        return batch_remote_reads(self.g, p, self.bs), moved_rows(self.old, p).total

    def counts(self, sw):
        c = np.zeros((self.U, self.n), np.int32)
        K.count_samples(self.indptr, self.comp.cindices, np.asarray(sw, np.int32), c)
        return c

    def sweep(self, sw, prim, sec, sweeps):
        sw = np.array(sw, np.int32)
        I._sweep_from(self.g, self.comp, sw, prim, sec, self.counts(sw), self.cost, self.opts, sweeps=sweeps)
        return sw

    def placed_rows(self):
        used = self.comp.used_ids
        prim = np.where(self.is_old, self.oprim, np.asarray(self.placed.embedding_primary)[used]).astype(np.int32)
        sec = np.where(self.is_old, self.osec, I._secondary_masks(self.placed, used)).astype(np.int64)
        return prim, sec

    def r(self, reads):
        return f"{reads:,} ({reads / self.full_reads:.3f}x)"


def refit(day):
    starts = (("the target's samples", day.goal.sample_worker), ("the placed samples", day.placed.sample_worker))
    for name, sw0 in starts:
        for sweeps in (1, 2, 5):
            t = time.process_time()
            sw = day.sweep(sw0, day.gprim, day.gsec, sweeps)
            reads, moved = day.score(day.gprim, day.gsec, sw)
            print(f"refit: the target's rows, {sweeps} sweeps from {name}: {day.r(reads)}, {moved:,} rows moved, "
                  f"{time.process_time() - t:.1f} s CPU", flush=True)
    sw = day.sweep(day.goal.sample_worker, day.gprim, day.gsec, 2)
    start = day.placement(day.gprim, day.gsec, sw)
    moved = moved_rows(day.old, start).total
    for rounds in (1, 3):
        for sweep in ("every", None):
            t = time.process_time()
            res = repartition_incremental(day.g, day.old, day.topo, max_moved_rows=moved, start=start,
                                          options=Options(batch_size=day.bs, target="none", sweep=sweep,
                                                          rounds=rounds))
            print(f"refit: 2 sweeps, then {rounds} rounds of the exact plan (sweep={sweep or 'default'}) within "
                  f"{moved:,} rows: {day.r(batch_remote_reads(day.g, res, day.bs))}, "
                  f"{moved_rows(day.old, res).total:,} moved, {time.process_time() - t:.1f} s CPU", flush=True)


def loop(day, joint, marks, step_pct):
    prim, sec = day.placed_rows()
    sw = np.array(day.placed.sample_worker, np.int32)
    n = day.n
    cap = sample_cap(day.g.num_samples, n, day.opts.max_imbalance)
    pcap = max(sample_cap(day.U, n, day.opts.max_imbalance), int(np.bincount(prim, minlength=n).max()))
    f, df = I._soft_count(day.g, n, max(cap, int(np.bincount(sw, minlength=n).max())), day.opts)
    step = max(int(step_pct / 100 * day.U), 1)
    label = "joint (row + followers)" if joint else "row-only (control)"
    spent, marks, t = 0, [int(m / 100 * day.U) for m in marks], time.process_time()
    while marks:
        q, gain = np.empty(day.U, np.int32), np.empty(day.U, np.float64)
        joint_gains(day.indptr, day.comp.cindices, day.rptr, day.rsam, sw, prim, sec, day.counts(sw), f, df,
                    day.cost, joint, q, gain)
        cand = np.flatnonzero(q >= 0)
        c = (day.is_old[cand] & (q[cand] != day.oprim[cand])).astype(np.int64) - \
            (day.is_old[cand] & (prim[cand] != day.oprim[cand]))
        pos = np.lexsort((-gain[cand], c > 0))
        limit = min(spent + step, marks[0])
        pload = np.bincount(prim, minlength=n)
        took = 0
        for x, cx in zip(cand[pos], c[pos]):
            if cx > 0 and spent + cx > limit:
                break
            if pload[q[x]] >= pcap:
                continue
            pload[prim[x]] -= 1
            pload[q[x]] += 1
            prim[x] = q[x]
            sec[x] &= ~np.int64(1 << int(q[x]))
            spent += int(cx)
            took += 1
        sw = day.sweep(sw, prim, sec, 2)
        if took == 0 or spent >= marks[0]:
            reads, moved = day.score(prim, sec, sw)
            print(f"{label}: {100 * marks[0] / day.U:.0f}% ({marks[0]:,} rows): {day.r(reads)}, {moved:,} moved, "
                  f"{time.process_time() - t:.1f} s CPU", flush=True)
            if took == 0 and spent < marks[0]:
                print(f"{label}: stops, no move gains", flush=True)
                return
            marks.pop(0)


def free_start(day, share, marks):
    n = day.n
    nsec = np.bitwise_count(day.osec.view(np.uint64)).astype(np.int64)
    anchored = day.is_old & (nsec < n // 2)
    deg = np.diff(day.indptr)
    free = np.add.reduceat(anchored[day.comp.cindices].astype(np.int64), day.indptr[:-1]) <= share * deg
    prim, sec = day.placed_rows()
    held = np.bincount(day.comp.cindices, weights=np.repeat(~free, deg).astype(np.float64), minlength=day.U)
    theirs = ~day.is_old & (held == 0)  # new ids only free samples read: created where the target puts them
    prim[theirs], sec[theirs] = day.gprim[theirs], day.gsec[theirs]
    sw = np.array(day.placed.sample_worker, np.int32)
    sw[free] = np.asarray(day.goal.sample_worker)[free]
    sw = day.sweep(sw, prim, sec, 3)
    start = day.placement(prim, sec, sw)
    top = max(marks)
    ladder = [rows for p, rows in budget_ladder(day.U) if p <= top]
    opts, defaults = I.resolve_options(Options(batch_size=day.bs, target="none"), day.g, n, degree=day.comp.degree)
    t = time.process_time()
    res = I._refine(day.g, day.old, day.topo, ladder[-1], 0, opts, defaults, start, day.comp, day.is_old, None,
                    time.perf_counter(), steps=ladder)
    at = {s["budget"]: s["batch_remote_reads"] for s in res.info["steps"]}
    best, out = day.placed_reads, []
    for p, rows in budget_ladder(day.U):
        if p > top:
            break
        best = min(best, at[rows])
        if p in marks:
            out.append(f"{p:g}%: {day.r(best)}")
    print(f"free start (share {share:g}): {int(free.sum()):,} free samples, {int(theirs.sum()):,} new ids with them, "
          f"start {day.r(day.score(prim, sec, sw)[0])}; the chain from it (least of the placed data and the steps): "
          + "; ".join(out) + f"; {time.process_time() - t:.1f} s CPU", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    IB.add_day_arguments(ap, preset="criteo-kaggle-independent")
    ap.add_argument("--days", default="1,2", help="The days measured (1 and/or 2).")
    ap.add_argument("--ideas", default="refit,rowonly,free,joint")
    ap.add_argument("--marks", default="1,2,5,10", help="Budgets reported, percent of the day's used rows.")
    ap.add_argument("--step", type=float, default=0.5, help="joint/rowonly: percent of the used rows a step.")
    ap.add_argument("--free-share", type=float, default=0.1)
    args = ap.parse_args(argv)
    marks = [float(x) for x in args.marks.split(",") if x.strip()]
    print(f"# {' '.join(sys.argv)}")
    for day, used, chain_reads in measured_days(args):
        print(f"\n## day {day.d} ({args.preset}): {used:,} used rows ({int(day.is_old.sum()):,} old); full "
              f"{day.full_reads:,}; placed {day.r(day.placed_reads)}; target mode at 5% "
              f"{day.r(chain_reads)}; 1.10x = {int(1.1 * day.full_reads):,}", flush=True)
        for idea in [x.strip() for x in args.ideas.split(",") if x.strip()]:
            if idea == "refit":
                refit(day)
            elif idea in ("joint", "rowonly"):
                loop(day, idea == "joint", marks, args.step)
            elif idea == "free":
                free_start(day, args.free_share, marks)
            else:
                raise SystemExit(f"unknown idea {idea!r}; choose from joint, rowonly, free, refit")


def measured_days(args):
    """The ``--days`` of the synthetic drift (``add_day_arguments``' options) as ``(Day, used rows, the
    shipped 5% budget's reads)``; each day starts from the day before's 5% result (the bench's incr-5%
    strategy)."""
    days = [int(x) for x in args.days.split(",") if x.strip()]
    args.source, args.days = "synth", max(days) + 1
    graphs = IB.synth_days(args)
    topo = resolve_topology(args.workers, None, None)
    bs = args.batch_size
    hopts = {"batch_size": bs}
    old = run_partitioner("hybrid", graphs[0], topo, seed=args.seed, options=hopts)
    for d in range(1, args.days):
        full = run_partitioner("hybrid", graphs[d], topo, seed=args.seed + d, options=hopts)
        used = int(np.unique(np.asarray(graphs[d].sample_indices)).size)
        _, chain = place_and_repartition(graphs[d], old, topo, max_moved_rows=int(0.05 * used), seed=args.seed,
                                         options=Options(batch_size=bs), goal=full)
        if d in days:
            yield Day(d, graphs[d], old, full, topo, bs), used, batch_remote_reads(graphs[d], chain, bs)
        old = chain


if __name__ == "__main__":
    main()
