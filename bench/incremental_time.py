"""Time of the incremental path against a full re-partition at a realistic day size (issue 18; not a test).

Cuts two consecutive days of ``--day-samples`` samples out of one prepared dataset (same
vocabulary, so ids are stable: what ``gmp data import --extend`` gives), partitions day 0 with
``hybrid`` (its defaults, batch 512) and then, on day 1, interleaves ``--reps`` calls of

``placed``   :func:`gmp.partition.incremental.place_new_data`: the new data on the fixed placement,
             nothing moved
``incr``     :func:`gmp.partition.incremental.repartition_incremental` with its defaults (the exact
             plan), 5% of day 1's used rows
``onepass``  the same call with ``Options(plan="onepass")`` (docs/incremental.md, "The one-pass plan")
``full``     ``run_partitioner("hybrid", ...)`` on day 1 from scratch

and prints CPU and wall seconds of each call (loading excluded: all read the same graph) with
``batch_remote_reads`` of the results. A last line, ``floor``, is the cheapest placement pass there
can be, for scale (not a partitioner): each sample in dataset order to the worker holding the
primaries of most of its rows (``gmp.partition._common.assign_by_majority``: one lookup per edge in
a byte table over the id space, the sample cap kept); anything that looks at every edge of the new
day once costs at least that. The days are views of the dataset's arrays (no copy).
The calls get day 0's row history as the manifest records it (``trained``: the ids day 0 reads;
the ids day 1 reads that day 0 never did are placed like new ids); ``--no-history`` counts every id
as trained, as a manifest made before version 3 does.

Data: ``data/bench/criteo-full`` (``gmp data synth --preset criteo-kaggle --samples 45840617 --seed 0``)
cut into 6.5M-sample days is Criteo-Kaggle's real day size (45.8M samples over 7 days); its samples are
drawn independently, so day 1 has no drift against day 0 (the drifting days are
``bench/incremental_bench.py``'s).

``--drift-pool POOL`` takes the days from ``bench/incremental_bench.py``'s drifting synthetic days instead
(a pool of ``--pool-samples`` at ``--scale``, generated in POOL when missing; entity preset, 64
communities, ``--spread``, drift 0.5): days 0 and 1 of that bench.

Usage (``--write-days DIR`` also writes the two days as datasets, for timing whole commands)::

    python bench/incremental_time.py data/bench/criteo-full --day-samples 6500000 --reps 3
    python bench/incremental_time.py --drift-pool POOL1M --pool-samples 10000000 --scale 0.15 --day-samples 1000000
    python bench/incremental_time.py --drift-pool POOL3M --pool-samples 30000000 --scale 0.45 --day-samples 3000000
    python bench/incremental_time.py data/bench/ent-1m --day-samples 100000 --reps 1 [--no-history]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from gmp.datasets.format import FieldInfo, load_dataset, write_dataset
from gmp.graph import BipartiteGraph, build_graph
from gmp.metrics import batch_remote_reads
from gmp.partition import run_partitioner
from gmp.partition._common import assign_by_majority
from gmp.partition.incremental import Options, migration_budget, place_new_data, repartition_incremental
from gmp.topology import resolve_topology


def day(graph: BipartiteGraph, d: int, size: int) -> BipartiteGraph:
    """Samples [d * size, (d + 1) * size) of ``graph``, its id space kept (indices are a view)."""
    ip = np.asarray(graph.sample_indptr)
    a, b = d * size, (d + 1) * size
    if b > graph.num_samples:
        raise SystemExit(f"the dataset has {graph.num_samples:,} samples, fewer than {d + 1} days of {size:,}")
    e0, e1 = int(ip[a]), int(ip[b])
    return BipartiteGraph(sample_indptr=(ip[a:b + 1] - e0).astype(np.int64),
                          sample_indices=np.asarray(graph.sample_indices)[e0:e1], num_embeddings=graph.num_embeddings)


def floor_pass(graph: BipartiteGraph, old, num_workers: int) -> np.ndarray:
    """The ``floor`` line: every sample to the worker with most of its rows' old primaries (see above)."""
    primary = np.full(graph.num_embeddings, -1, dtype=np.int8 if num_workers < 128 else np.int32)
    primary[:old.num_embeddings] = old.embedding_primary
    out = np.empty(graph.num_samples, dtype=np.int32)
    cap = np.full(num_workers, int(np.ceil(graph.num_samples / num_workers * 1.05)), dtype=np.int64)
    assign_by_majority(np.asarray(graph.sample_indptr), np.asarray(graph.sample_indices), primary,
                       np.zeros(num_workers, dtype=np.int64), cap, np.arange(graph.num_samples, dtype=np.int64), out)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", nargs="?", help="A prepared dataset directory (cut into days).")
    ap.add_argument("--drift-pool", default=None, help="Use incremental_bench's drifting days from this pool.")
    ap.add_argument("--pool-samples", type=int, default=10_000_000)
    ap.add_argument("--scale", type=float, default=0.15)
    ap.add_argument("--spread", type=float, default=0.5)
    ap.add_argument("--preset", default="criteo-kaggle")
    ap.add_argument("--day-samples", type=int, default=6_500_000)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--budget", default="5%", help="Migration budget (rows or a percentage of day 1's used rows).")
    ap.add_argument("--reps", type=int, default=3, help="Calls of each (interleaved).")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--no-history", action="store_true",
                    help="Count every day-0 id as trained (a manifest without history) instead of the ids day 0 reads.")
    ap.add_argument("--write-days", default=None, metavar="DIR",
                    help="Also write the two days as datasets DIR/day0 and DIR/day1 (to time whole commands).")
    args = ap.parse_args(argv)

    if args.drift_pool:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import incremental_bench

        g0, g1 = incremental_bench.synth_days(argparse.Namespace(
            pool=args.drift_pool, pool_samples=args.pool_samples, scale=args.scale, seed=0, communities=64,
            preset=args.preset, days=2, day_samples=args.day_samples, spread=args.spread, drift=0.5))
    elif args.dataset:
        graph = build_graph(load_dataset(args.dataset))
        g0, g1 = day(graph, 0, args.day_samples), day(graph, 1, args.day_samples)
    else:
        raise SystemExit("give a dataset directory or --drift-pool POOL")
    if args.write_days:
        for d, g in enumerate((g0, g1)):
            write_dataset(Path(args.write_days) / f"day{d}", indptr=np.asarray(g.sample_indptr),
                          indices=np.asarray(g.sample_indices), labels=np.zeros(g.num_samples, dtype=np.float32),
                          dense=None, fields=[FieldInfo("ids", "categorical", g.num_embeddings, 0)],
                          num_embeddings=g.num_embeddings, source={"kind": "bench/incremental_time.py", "day": d},
                          test_fraction=0.0, overwrite=True)
    topo = resolve_topology(args.workers, None, None)
    hopts = {"batch_size": args.batch_size}
    t = time.perf_counter()
    old = run_partitioner("hybrid", g0, topo, seed=0, options=hopts)
    print(f"day 0: {g0.num_samples:,} samples, {g0.num_edges:,} edges, hybrid {time.perf_counter() - t:.1f} s",
          flush=True)
    used = int(np.count_nonzero(np.bincount(np.asarray(g1.sample_indices), minlength=g1.num_embeddings)))
    trained = None if args.no_history else np.bincount(np.asarray(g0.sample_indices), minlength=g0.num_embeddings) > 0
    budget = migration_budget(args.budget, used)
    floor_pass(g0, old, args.workers)  # compiled before it is timed
    calls = {
        "placed": lambda: place_new_data(g1, old, topo, trained=trained),
        "incr": lambda: repartition_incremental(g1, old, topo, max_moved_rows=budget, trained=trained),
        "onepass": lambda: repartition_incremental(g1, old, topo, max_moved_rows=budget, trained=trained,
                                                   options=Options(plan="onepass")),
        "full": lambda: run_partitioner("hybrid", g1, topo, seed=1, options=hopts),
        "floor": lambda: floor_pass(g1, old, args.workers),
    }
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in calls}
    results = {}
    for rep in range(args.reps):
        for what, call in calls.items():
            c, w = time.process_time(), time.perf_counter()
            out = call()
            times[what].append((time.process_time() - c, time.perf_counter() - w))
            if what != "floor":
                results[what] = out
            print(f"rep {rep + 1} {what}: cpu {times[what][-1][0]:.2f} s, wall {times[what][-1][1]:.2f} s", flush=True)
    reads = {k: batch_remote_reads(g1, p, args.batch_size) for k, p in results.items()}
    cpu = {k: min(c for c, _ in v) for k, v in times.items()}
    wall = {k: min(w for _, w in v) for k, v in times.items()}
    print(f"\nday 1: {g1.num_samples:,} samples, {g1.num_edges:,} edges, {used:,} used rows, budget {budget:,} rows; "
          f"min of {args.reps} calls")
    print("| call | plan | CPU s | wall s | CPU vs full | batch_remote_reads | vs full | rows moved |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for k in ("placed", "incr", "onepass", "full"):
        plan = (results[k].options or {}).get("plan", "")
        moved = (results[k].info or {}).get("moved_rows", {}).get("total")
        print(f"| {k} | {plan} | {cpu[k]:.2f} | {wall[k]:.2f} | {cpu[k] / cpu['full']:.3f} | {reads[k]:,} | "
              f"{reads[k] / reads['full']:.3f} | {'' if moved is None else f'{moved:,}'} |")
    print(f"| floor (one lookup per edge; samples only) | | {cpu['floor']:.2f} | {wall['floor']:.2f} | "
          f"{cpu['floor'] / cpu['full']:.3f} | | | |")
    print(f"old ids created (never read on day 0): {results['placed'].info['num_created_rows']:,}"
          f"{' (--no-history)' if args.no_history else ''}")

if __name__ == "__main__":
    sys.exit(main())
