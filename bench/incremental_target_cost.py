"""What target mode costs against the full re-partition it runs (issue 36, point 4), CPU and wall.

One new day on an old manifest, the budget of ``--budget``: the full ``hybrid`` re-partition alone, target
mode (``place_and_repartition``, the exact plan's default) with the re-partition beside the sweep chain
(``alongside``, the default on two cores or more) and one after the other, and ``-O target=none`` (the plan's
moves only). The issue's allowance is the last plus the first. Each call runs ``--reps`` times after a first
round that loads the compiled kernels; the table gives the means, CPU (``time.process_time``, every thread)
and wall (``time.perf_counter``), and the reads of each placement (the same whatever the timing).

Usage (the closing note of session 25)::

    gmp data synth --preset criteo-kaggle-independent -n 1000000 --scale 0.02 -o D/s0
    gmp data synth --continue D/s0 -o D/s1
    gmp partition D/s0 --workers 8 --method hybrid -o D/p0
    python bench/incremental_target_cost.py D/s1 D/p0 --budget 5% --reps 2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.graph import build_graph  # noqa: E402
from gmp.manifest import load_manifest  # noqa: E402
from gmp.metrics import batch_remote_reads  # noqa: E402
from gmp.partition import incremental as I  # noqa: E402
from gmp.partition import run_partitioner  # noqa: E402


def timed(fn):
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", help="the new day")
    ap.add_argument("manifest", help="the old placement's manifest")
    ap.add_argument("--budget", default="5%")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    graph = build_graph(load_dataset(args.dataset))
    old = load_manifest(args.manifest)
    topo, bs = old.topology, args.batch_size
    trained = None if old.history is None else old.history.trained
    budget = I.migration_budget(args.budget, int(np.count_nonzero(graph.embedding_degree())))
    calls = {
        "full re-partition (hybrid)": lambda: run_partitioner("hybrid", graph, topo, seed=0,
                                                              options={"batch_size": bs}),
        "target mode, alongside": lambda: I.place_and_repartition(
            graph, old.placement, topo, max_moved_rows=budget, trained=trained,
            options=I.Options(batch_size=bs, alongside=True))[1],
        "target mode, one after the other": lambda: I.place_and_repartition(
            graph, old.placement, topo, max_moved_rows=budget, trained=trained,
            options=I.Options(batch_size=bs, alongside=False))[1],
        "-O target=none": lambda: I.place_and_repartition(
            graph, old.placement, topo, max_moved_rows=budget, trained=trained,
            options=I.Options(batch_size=bs, target="none"))[1],
    }
    seconds = {name: [] for name in calls}
    reads = {}
    for rep in range(args.reps + 1):  # the first round loads the kernels
        for name, call in calls.items():
            placement, cpu, wall = timed(call)
            if rep:
                seconds[name].append((cpu, wall))
            reads[name] = batch_remote_reads(graph, placement, bs)
    mean = {name: np.mean(v, axis=0) for name, v in seconds.items()}
    full = mean["full re-partition (hybrid)"]
    print(f"{args.dataset} on {args.manifest}: {graph.num_samples:,} samples, budget {args.budget} "
          f"({budget:,} rows), {topo.num_workers} workers, means of {args.reps} runs after a first")
    print(f"| call | CPU s | vs full | wall s | vs full | batch_remote_reads |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (cpu, wall) in mean.items():
        print(f"| {name} | {cpu:.2f} | {cpu / full[0]:.2f}x | {wall:.2f} | {wall / full[1]:.2f}x | {reads[name]:,} |")
    none = mean["-O target=none"]
    print(f"| allowance (target=none + full) | {none[0] + full[0]:.2f} | {(none[0] + full[0]) / full[0]:.2f}x | "
          f"{none[1] + full[1]:.2f} | {(none[1] + full[1]) / full[1]:.2f}x | |")


if __name__ == "__main__":
    main()
