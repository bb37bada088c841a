"""Groups of co-used rows moved as one unit, on the independent-fields drift (issue 36; a measurement, not a test).

The idea not tried before session 20 (docs/incremental-log.md, "The independent drift at 5%"): single-row moves
stall because a row's gain shows only once the samples reading it follow, and those samples follow only
once most of *their* rows have moved. So move rows in groups whose readers overlap:

1. **Targets** (``--targets``). ``full``: every used row's target worker is where most of its readers' samples
   sit in the day's full re-partition (renamed to the old workers); ``refit``: where most of them sit after the
   placed data's samples are swept onto the full re-partition's rows. Candidates: the used rows whose primary
   (in the placed data) is not their target; old rows cost one row each, new ids are free. ``best``: no target;
   every used row read at most ``saturated_degree`` times is a candidate, and each group goes to its best
   worker (step 3, every worker tried, by gain per budgeted row) at every step.
2. **Groups.** Row-row co-use of the candidates: for every sample, the candidates it reads (with a target: only
   those whose target is the sample's worker in the full re-partition) are pairwise co-used once. Pairs co-used
   at least ``--min-couse`` times (and at least ``--couse-share`` of the smaller row's readers) are joined:
   connected components (``--max-group 0``), or greedy agglomeration, the most co-used pairs first, into groups
   of at most ``--max-group`` rows. A candidate in no pair is its own group.
3. **Gains.** A group's gain (HET-GMP's Eq. 3, soft count, with the current samples' counts): every member
   moved to the target, plus, for every sample reading a member and not on the target, the gain of that
   sample moving there with the group moved (losing ones left out; samples are free).
4. **Moves.** Groups by gain per budgeted row (free groups first), taken whole while they fit
   ``--group-share`` of the budget and the primary cap, in steps of ``--step`` percent of the used rows;
   after each step the samples are swept twice with the rows fixed and the gains recomputed (closed loop;
   ``--step 0``: one shot).
5. **Then the shipped chain**: the exact plan's moves through the ladder's steps up to the budget from that
   placement (what the groups spent counted), the least of the start and the steps kept, as target mode's
   ``sweep`` candidate.

Reads are ``batch_remote_reads`` against the day's full re-partition; days and placements as
bench/incremental_compound.py (day 1's old placement ``hybrid`` on day 0, day 2's the 5% target-mode
chain's day 1). Usage (the numbers of docs/incremental-log.md)::

    python bench/incremental_groups.py --pool POOL --pool-samples 1500000 --preset criteo-kaggle-independent \\
        --days 1 --marks 5 --targets full,best --min-couse 2 --max-group 0,16 --step 1

The machine these numbers come from is shared: CPU seconds are noisy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np
from scipy.sparse import coo_array
from scipy.sparse.csgraph import connected_components

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import incremental_bench as IB  # noqa: E402  (the day generators' options)
import incremental_compound as IC  # noqa: E402  (the measured days, one day's arrays and the sample sweep)

from gmp.metrics import batch_remote_reads  # noqa: E402
from gmp.partition import incremental as I  # noqa: E402
from gmp.partition._common import sample_cap  # noqa: E402
from gmp.partition.incremental import Options, moved_rows  # noqa: E402


@numba.njit(cache=False)
def group_gains(gptr, grows, gtarget, indptr, cind, rptr, rsam, sw, prim, sec, count, f, df, cost, out):
    """Eq. 3 gain of moving each group's rows to its target, plus its readers following (module docstring)."""
    n = count.shape[1]
    mark = np.full(prim.size, -1, np.int64)
    seen = np.full(sw.size, -1, np.int64)
    for g in range(gptr.size - 1):
        t = gtarget[g]
        gain = 0.0
        for k in range(gptr[g], gptr[g + 1]):
            x = grows[k]
            mark[x] = g
            p = prim[x]
            for w in range(n):
                if (sec[x] >> w) & 1 == 1:
                    continue
                c = f[count[x, w]]
                if w != p:
                    gain += c * cost[p, w]
                if w != t:
                    gain -= c * cost[t, w]
        for k in range(gptr[g], gptr[g + 1]):
            x = grows[k]
            for j in range(rptr[x], rptr[x + 1]):
                s = rsam[j]
                if seen[s] == g:
                    continue
                seen[s] = g
                a = sw[s]
                if a == t:
                    continue
                d = 0.0
                for e in range(indptr[s], indptr[s + 1]):
                    y = cind[e]
                    py = t if mark[y] == g else prim[y]
                    if py != a and (sec[y] >> a) & 1 == 0:
                        d -= cost[py, a] * df[max(count[y, a] - 1, 0)]
                    if py != t and (sec[y] >> t) & 1 == 0:
                        d += cost[py, t] * df[count[y, t]]
                if d < 0:
                    gain -= d
        out[g] = gain


@numba.njit(cache=False)
def _find(label, x):
    while label[x] != x:
        label[x] = label[label[x]]
        x = label[x]
    return x


@numba.njit(cache=False)
def agglomerate(lo, hi, label, size, max_group):
    """Union-find over the pairs in order, a union only while the group stays within ``max_group`` rows."""
    for k in range(lo.size):
        a, b = _find(label, lo[k]), _find(label, hi[k])
        if a != b and size[a] + size[b] <= max_group:
            if size[a] < size[b]:
                a, b = b, a
            label[b] = a
            size[a] += size[b]


def targets_of(day, sw) -> np.ndarray:
    """Per used row, the worker holding most of its readers under samples ``sw``."""
    return np.argmax(day.counts(sw), axis=1).astype(np.int32)


def make_groups(day, target, cand, sw_goal, min_couse: int, share: float, max_group: int = 0):
    """(group CSR over candidate rows, group target) of module docstring step 2."""
    U = day.U
    is_cand = np.zeros(U, bool)
    is_cand[cand] = True
    cind, indptr = day.comp.cindices, day.indptr
    deg = np.diff(indptr)
    s_of = np.repeat(np.arange(deg.size), deg)
    keep = is_cand[cind] if sw_goal is None else is_cand[cind] & (target[cind] == np.asarray(sw_goal)[s_of])
    ks, kx = s_of[keep], cind[keep].astype(np.int64)
    # pairs within each sample's kept rows
    kptr = np.zeros(deg.size + 1, np.int64)
    np.cumsum(np.bincount(ks, minlength=deg.size), out=kptr[1:])
    a_list, b_list = [], []
    lens = np.diff(kptr)
    for L in np.unique(lens[lens > 1]):
        rows = np.flatnonzero(lens == L)
        block = kx[(kptr[rows][:, None] + np.arange(L)[None, :])]
        i, j = np.triu_indices(L, 1)
        a_list.append(block[:, i].ravel())
        b_list.append(block[:, j].ravel())
    if a_list:
        a, b = np.concatenate(a_list), np.concatenate(b_list)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        key, w = np.unique(lo * U + hi, return_counts=True)
        lo, hi = key // U, key % U
        readers = np.bincount(cind, minlength=U)
        ok = (w >= min_couse) & (w >= share * np.minimum(readers[lo], readers[hi]))
        lo, hi = lo[ok], hi[ok]
    else:
        lo = hi = w = np.zeros(0, np.int64)
        ok = np.zeros(0, bool)
    if max_group > 0:  # greedy agglomeration: the most co-used pairs first, groups up to max_group rows
        order = np.lexsort((hi, lo, -w[ok])) if lo.size else np.zeros(0, np.int64)
        label = np.arange(U, dtype=np.int64)
        agglomerate(lo[order], hi[order], label, np.ones(U, np.int64), max_group)
        for _ in range(64):  # flatten
            nxt = label[label]
            if np.array_equal(nxt, label):
                break
            label = nxt
    else:
        adj = coo_array((np.ones(lo.size), (lo, hi)), shape=(U, U)).tocsr()
        _, label = connected_components(adj, directed=False)
    lab = label[cand]
    order = np.lexsort((cand, lab))
    rows = cand[order].astype(np.int64)
    _, first = np.unique(lab[order], return_index=True)
    gptr = np.append(first, rows.size).astype(np.int64)
    return gptr, rows, None if target is None else target[rows[gptr[:-1]]].astype(np.int32)


def run_groups(day, budget, target, cand, gptr, grows, gtarget, step_rows, sw0):
    """Steps 3-4: (prim, sec, sw, spent) after the group moves within ``budget``."""
    prim, sec = day.placed_rows()
    sw = np.array(sw0, np.int32)
    n = day.n
    cap = sample_cap(day.g.num_samples, n, day.opts.max_imbalance)
    pcap = max(sample_cap(day.U, n, day.opts.max_imbalance), int(np.bincount(prim, minlength=n).max()))
    f, df = I._soft_count(day.g, n, max(cap, int(np.bincount(sw, minlength=n).max())), day.opts)
    done = np.zeros(gptr.size - 1, bool)
    spent = 0
    step_rows = step_rows if step_rows > 0 else budget
    def costs(targets):
        # budget cost (moved_rows'): an old row off its old primary costs 1, moving it back frees 1
        t_rows = np.repeat(targets, np.diff(gptr))
        row_cost = np.where(day.is_old[grows], (t_rows != day.oprim[grows]).astype(np.int64)
                            - (prim[grows] != day.oprim[grows]), 0)
        return np.add.reduceat(row_cost, gptr[:-1])

    free = gtarget is None
    while spent < budget:
        count = day.counts(sw)
        gain = np.empty(gptr.size - 1, np.float64)
        if free:  # every group's best worker by gain per budgeted row
            best = np.full(gptr.size - 1, -np.inf)
            gtarget = np.zeros(gptr.size - 1, np.int32)
            for t in range(n):
                tt = np.full(gptr.size - 1, t, np.int32)
                group_gains(gptr, grows, tt, day.indptr, day.comp.cindices, day.rptr, day.rsam, sw, prim, sec,
                            count, f, df, day.cost, gain)
                per = np.where(gain > 0, gain / np.maximum(costs(tt), 1), -np.inf)
                better = per > best
                best[better], gtarget[better] = per[better], t
            group_gains(gptr, grows, gtarget, day.indptr, day.comp.cindices, day.rptr, day.rsam, sw, prim, sec,
                        count, f, df, day.cost, gain)
            done[:] = False  # a group may move again, elsewhere
        else:
            group_gains(gptr, grows, gtarget, day.indptr, day.comp.cindices, day.rptr, day.rsam, sw, prim, sec,
                        count, f, df, day.cost, gain)
        cost = costs(gtarget)
        ok = ~done & (gain > 0)
        idx = np.flatnonzero(ok)
        per = gain[idx] / np.maximum(cost[idx], 1)
        idx = idx[np.lexsort((-per, cost[idx] > 0))]
        limit = min(budget, spent + step_rows)
        pload = np.bincount(prim, minlength=n)
        took = 0
        for g in idx:
            c = int(cost[g])
            if c > 0 and spent + c > limit:
                continue
            rows = grows[gptr[g]:gptr[g + 1]]
            t = gtarget[g]
            mv = rows[prim[rows] != t]
            if mv.size == 0 or pload[t] + mv.size > pcap:
                continue
            np.subtract.at(pload, prim[mv], 1)
            pload[t] += mv.size
            prim[mv] = t
            sec[rows] &= ~np.int64(1 << int(t))
            spent += c
            done[g] = True
            took += 1
        sw = day.sweep(sw, prim, sec, 2)
        if took == 0:
            break
    return prim, sec, sw, spent


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    IB.add_day_arguments(ap, preset="criteo-kaggle-independent")
    ap.add_argument("--days", default="1,2", help="The days measured (1 and/or 2).")
    ap.add_argument("--marks", default="5,10", help="Budgets, percent of the day's used rows.")
    ap.add_argument("--targets", default="full,refit")
    ap.add_argument("--min-couse", default="2", help="Comma-separated values tried.")
    ap.add_argument("--couse-share", type=float, default=0.0)
    ap.add_argument("--max-group", default="0", help="Group size caps tried (greedy agglomeration; 0: connected "
                    "components), comma-separated.")
    ap.add_argument("--group-share", type=float, default=1.0, help="Share of the budget the groups may spend; "
                    "the chain spends the rest.")
    ap.add_argument("--step", default="1,0", help="Percent of the used rows a step (0: one shot), comma-separated.")
    args = ap.parse_args(argv)
    bs = args.batch_size
    print(f"# {' '.join(sys.argv)}")
    for day, used, chain_reads in IC.measured_days(args):
        print(f"\n## day {day.d}: {used:,} used rows ({int(day.is_old.sum()):,} old); full {day.full_reads:,}; "
              f"placed {day.r(day.placed_reads)}; target mode at 5% {day.r(chain_reads)}", flush=True)
        gsw = np.asarray(day.goal.sample_worker, np.int32)
        for tname in [x.strip() for x in args.targets.split(",") if x.strip()]:
            if tname == "best":  # no target: co-use over every sample, each group to its best worker
                sat = I.saturated_degree(day.g.num_samples, day.n, bs)
                cand = np.flatnonzero(np.bincount(day.comp.cindices, minlength=day.U) <= sat)
                sw_t = target = None
            else:
                sw_t = gsw if tname == "full" else day.sweep(day.placed.sample_worker, day.gprim, day.gsec, 2)
                target = targets_of(day, sw_t)
                prim0, _ = day.placed_rows()
                cand = np.flatnonzero(prim0 != target)
            for mc, mg in [(int(a), int(b)) for a in args.min_couse.split(",") for b in args.max_group.split(",")]:
                t = time.process_time()
                gptr, grows, gtarget = make_groups(day, target, cand, sw_t, mc, args.couse_share, mg)
                sizes = np.diff(gptr)
                print(f"targets {tname}, min co-use {mc}, groups up to {mg or 'any'} rows: {cand.size:,} candidate rows "
                      f"({int(day.is_old[cand].sum()):,} old), {sizes.size:,} groups, largest "
                      f"{int(sizes.max()):,}, {int((sizes > 1).sum()):,} of 2+ rows holding "
                      f"{int(sizes[sizes > 1].sum()):,}; {time.process_time() - t:.1f} s", flush=True)
                for step in [float(x) for x in args.step.split(",")]:
                    for pct in [float(x) for x in args.marks.split(",")]:
                        t = time.process_time()
                        budget = int(pct / 100 * used)
                        prim, sec, sw, spent = run_groups(day, int(args.group_share * budget), target, cand,
                                                          gptr, grows, gtarget, int(step / 100 * used),
                                                          day.placed.sample_worker)
                        reads, moved = day.score(prim, sec, sw)
                        start = day.placement(prim, sec, sw)
                        # the shipped chain from there: the ladder's steps within the budget, the least of
                        # the start and the steps (what target mode's sweep candidate takes)
                        steps = [rows for _, rows in I.budget_ladder(day.U) if rows <= budget]
                        if budget not in steps:
                            steps.append(budget)
                        opts, defaults = I.resolve_options(Options(batch_size=bs, target="none"), day.g, day.n,
                                                           degree=day.comp.degree)
                        res = I._refine(day.g, day.old, day.topo, budget, 0, opts, defaults, start, day.comp,
                                        day.is_old, None, time.perf_counter(), steps=steps)
                        r2 = batch_remote_reads(day.g, res, bs)
                        print(f"  step {step:g}%, {pct:g}% ({budget:,}, groups up to {args.group_share:g} of "
                              f"it): groups {day.r(reads)} ({moved:,} rows), then the chain {day.r(r2)} "
                              f"({moved_rows(day.old, res).total:,} rows); {time.process_time() - t:.1f} s CPU",
                              flush=True)


if __name__ == "__main__":
    main()
