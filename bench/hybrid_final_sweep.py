"""``hybrid`` followed by the incremental exact sweep from its own placement (a measurement, not a feature).

The exact plan of gmp/partition/incremental.py scores batches (``batch_remote_reads``) where ``hybrid``
refines Eq. 3-4's edge costs; run from ``hybrid``'s own placement with no budget and no target
(``repartition_incremental(..., target="none")``) it is a final sweep on the metric the report leads with.
Prints the reads of both and the sweep's CPU time against ``hybrid``'s, each after a first run that loads
the compiled kernels (the second run is reported).

Usage (the closing note of session 24)::

    python bench/hybrid_final_sweep.py DATASET_DIR --workers 4 [--batch-size 512]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.graph import build_graph  # noqa: E402
from gmp.metrics import batch_remote_reads  # noqa: E402
from gmp.partition import incremental as I  # noqa: E402
from gmp.partition import run_partitioner  # noqa: E402
from gmp.topology import resolve_topology  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    graph = build_graph(load_dataset(args.dataset))
    topo = resolve_topology(args.workers, None, None)
    for run in range(2):  # the first loads the kernels
        t = time.process_time()
        h = run_partitioner("hybrid", graph, topo, seed=args.seed, options={"batch_size": args.batch_size})
        t_h = time.process_time() - t
        t = time.process_time()
        swept = I.repartition_incremental(graph, h, topo, max_moved_rows=graph.num_embeddings, seed=args.seed,
                                          options=I.Options(batch_size=args.batch_size, target="none"))
        t_s = time.process_time() - t
    reads_h = batch_remote_reads(graph, h, args.batch_size)
    reads_s = batch_remote_reads(graph, swept, args.batch_size)
    print("| dataset | workers | hybrid reads | + final sweep | vs hybrid | hybrid CPU | sweep CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| {Path(args.dataset).name} | {args.workers} | {reads_h:,} | {reads_s:,} | "
          f"{reads_s / max(reads_h, 1):.3f}x | {t_h:.2f} s | {t_s:.2f} s (+{t_s / t_h:.0%}) |")


if __name__ == "__main__":
    main()
