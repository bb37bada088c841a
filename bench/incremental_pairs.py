"""What a migration budget can buy, counted in remote (row, worker) pairs (issue 36; a measurement, not a test).

``epoch_unique_remote`` counts the pairs (row, worker) where some sample on the worker reads the row and the
worker holds no copy of it; ``batch_remote_reads`` counts each pair once per batch that reads it, so it is the
pairs times a ratio >= 1 (how many batches read a remote pair, on average).

**The bound.** Take any placement P of the day that moves at most B rows (``moved_rows``: old rows whose
primary changed, plus secondaries on a worker that held no copy). Undo its moves: every moved primary back
to its old worker, every new secondary dropped, every dropped old secondary restored. Each undone move adds
at most one remote pair (the row on one worker it no longer covers) and the samples, new ids and other rows
stay, so the result P0 keeps every old row where it was and has at most pairs(P) + B pairs. Hence

    pairs(P) >= pairs(P0) - B >= K - B,

K being the fewest pairs of any placement that keeps the old rows (samples and new ids free). K is not
known (a partitioning problem); this script reports the fewest pairs it finds with the rows kept: the placed
data (``place_new_data``) and the exact plan with no rows to move, its samples and new ids swept ``--rounds``
rounds (``repartition_incremental(max_moved_rows=0, sweep="every")``), also with the balance loosened to
``max_imbalance=2, alpha=0``, a placement a budget may not use but one that shows how far sweeping samples
goes. Then target mode (``place_and_repartition``, the shipped default, the day's full re-partition as its
target) at each budget: its pairs, how many fewer than the kept-rows placement per moved row (at most about
1 by the bound, plus what its own sample sweeps find), and the batch reads per pair.

What 1.10x the full re-partition's batch reads at a budget B would need follows: with the batch-per-pair
ratio of the full re-partition, pairs <= 1.10 x full's batch reads / ratio, so K <= that + B; the script
prints it beside the kept-rows placements found.

Usage (the numbers of docs/incremental-log.md, "Counted in (row, worker) pairs")::

    python bench/incremental_pairs.py --pool POOL --pool-samples 1500000 --preset criteo-kaggle-independent
    python bench/incremental_pairs.py --pool POOL --pool-samples 1500000 --preset criteo-kaggle-independent --day 2

Day d's old placement is ``hybrid`` on day d - 1 (seed ``--seed``), its full re-partition ``hybrid`` on day d
(seed ``--seed + d``), as bench/incremental_oracle.py.
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

from gmp.metrics import batch_remote_reads, epoch_unique_remote  # noqa: E402
from gmp.partition import incremental as I  # noqa: E402
from gmp.partition.incremental import (Options, match_workers, moved_rows, place_and_repartition,  # noqa: E402
                                       repartition_incremental)
from gmp.placement import Placement  # noqa: E402


def undo_moves(old: Placement, placement: Placement) -> Placement:
    """``placement`` with every id of ``old`` (below ``old.num_embeddings``) placed as in ``old``: primary and
    secondaries; the samples and the newer ids as in ``placement``. What the bound undoes: for every row the
    day reads, its remote pairs grow by at most its count in ``moved_rows(old, placement)`` (a holder of
    ``placement`` that ``old`` lacks is a moved primary or a new secondary; tests/test_incremental_pairs.py)."""
    m_old, m = old.num_embeddings, placement.num_embeddings
    primary = np.asarray(placement.embedding_primary, dtype=np.int32).copy()
    primary[:m_old] = np.asarray(old.embedding_primary)[:m_old]
    oip, ow = np.asarray(old.secondary_indptr), np.asarray(old.secondary_workers)
    pip, pw = np.asarray(placement.secondary_indptr), np.asarray(placement.secondary_workers)
    counts = np.concatenate([np.diff(oip)[:m_old], np.diff(pip)[m_old:m]])
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    workers = np.concatenate([ow[:oip[m_old]], pw[pip[m_old]:pip[m]]]).astype(np.int32)
    return Placement.edge_cut(placement.num_workers, placement.sample_worker, primary).with_secondaries(indptr, workers)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    IB.add_one_day_arguments(ap, budgets="1,5,10,20")
    ap.add_argument("--sweep-rounds", type=int, default=10, help="Rounds of the kept-rows sweeps.")
    args = ap.parse_args(argv)
    g, old, full, topo, _ = IB.one_day(args)
    bs, d = args.batch_size, args.day
    used = I._compact(g).used_ids
    goal = match_workers(old, full, topology=topo, rows=used)
    full_reads, full_pairs = batch_remote_reads(g, goal, bs), epoch_unique_remote(g, goal)
    ratio_full = full_reads / full_pairs
    print(f"# {' '.join(sys.argv)}")
    print(f"# day {d} ({args.preset}, {args.source}): {g.num_samples:,} samples, {used.size:,} used rows, "
          f"{args.workers} workers, batch {bs}; full re-partition {full_reads:,} batch reads, {full_pairs:,} pairs "
          f"({ratio_full:.3f} reads per pair)")
    print("\n| placement | rows moved | batch reads | vs full | pairs | vs full | reads per pair | "
          "pairs saved per moved row (vs the best kept-rows placement) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")

    def line(name, p, kept_pairs=None):
        b, c, m = batch_remote_reads(g, p, bs), epoch_unique_remote(g, p), moved_rows(old, p).total
        undone = epoch_unique_remote(g, undo_moves(old, p))
        if undone > c + moved_rows(old, p, rows=used).total:  # the bound's step, checked on every line
            raise SystemExit(f"{name}: undoing its moves added {undone - c:,} pairs, more than its moved rows")
        per = f"{(kept_pairs - c) / m:.2f}" if kept_pairs is not None and m else ""
        print(f"| {name} | {m:,} | {b:,} | {b / full_reads:.3f} | {c:,} | {c / full_pairs:.3f} | {b / c:.3f} | {per} |",
              flush=True)
        return c

    placed, _ = place_and_repartition(g, old, topo, max_moved_rows=0, seed=args.seed,
                                      options=Options(batch_size=bs, target="none"))
    kept = [line("placed data (`place_new_data`)", placed)]
    swept = repartition_incremental(g, old, topo, max_moved_rows=0, start=placed, seed=args.seed,
                                    options=Options(batch_size=bs, target="none", sweep="every",
                                                    rounds=args.sweep_rounds))
    kept.append(line(f"rows kept, samples and new ids swept {args.sweep_rounds} rounds", swept))
    loose = repartition_incremental(g, old, topo, max_moved_rows=0, start=placed, seed=args.seed,
                                    options=Options(batch_size=bs, target="none", sweep="every",
                                                    rounds=args.sweep_rounds, max_imbalance=2.0, alpha=0.0))
    line("the same, max_imbalance 2, alpha 0 (over the balance)", loose)
    best_kept = min(kept)
    budgets = {}
    for pct in [float(x) for x in args.budgets.split(",") if x.strip()]:
        budget = int(pct / 100.0 * used.size)
        t = time.process_time()
        _, p = place_and_repartition(g, old, topo, max_moved_rows=budget, seed=args.seed,
                                     options=Options(batch_size=bs), goal=full)
        line(f"target mode at {pct:g}% ({budget:,} rows; {p.info['kept']} kept, "
             f"{time.process_time() - t:.1f} s CPU)", p, best_kept)
        budgets[pct] = budget
    line("full re-partition (renamed)", goal)
    print(f"\nBound: any placement moving at most B rows has >= K - B pairs, K the fewest pairs with every old row "
          f"kept; the fewest found here with the balance kept: {best_kept:,}.")
    pairs_needed = 1.10 * full_pairs  # 1.10x the full re-partition's reads at its reads per pair
    for pct, budget in budgets.items():
        k_max = pairs_needed + budget
        print(f"1.10x at {pct:g}% ({budget:,} rows) at the full re-partition's {ratio_full:.3f} reads per pair needs "
              f"<= {pairs_needed:,.0f} pairs, so K <= {k_max:,.0f} ({k_max / best_kept:.3f}x the "
              f"kept-rows placement found)")

if __name__ == "__main__":
    main()
