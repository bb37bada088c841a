"""Hierarchical-topology benchmark (not a test): does ``hybrid`` cluster traffic at machine level first?

HET-GMP Fig. 9b shows the worker x worker traffic of a two-level cluster
concentrated in the machine blocks. This prints, for a random placement,
hybrid with a flat cost matrix (every pair of workers equally far) and hybrid
with the hierarchical topology (machine level first, then worker level), the
1D placements' (no secondaries, as in the paper's experiment):

* ``batch remote reads`` and the share of them that cross machines, measured
  exactly (``gmp.metrics.traffic_matrix``, the report's heatmap);
* the same split by how many workers read a row: a row read by at most
  ``workers per machine`` workers could live with all its readers on one
  machine; a row read by more always has readers on the other machine, so
  for it a cross-machine share near ``(N - G) / (N - 1)`` (8/15 = 53.3 % for
  2x8) is unavoidable. These two columns use the soft-count estimate of the
  reads (expected batches touching a row), within ~0.5 % of the exact count.

Usage::

    python bench/hierarchy_bench.py --dataset data/bench/criteo-1m --topology 2x8

The numbers and command are in docs/hybrid.md ("Hierarchical topology").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.graph import build_graph  # noqa: E402
from gmp.metrics import traffic_matrix  # noqa: E402
from gmp.partition import run_partitioner  # noqa: E402
from gmp.partition._common import compact_ids, count_embedding_workers  # noqa: E402
from gmp.partition.hybrid import soft_count_table  # noqa: E402
from gmp.topology import homogeneous, parse_topology  # noqa: E402


def reads_by_reader_count(graph, placement, machine_of, batch_size, per_machine, num_train):
    """Soft-count remote reads of the training samples and their cross-machine share, for rows with <= / >
    per_machine readers."""
    n = placement.num_workers
    indptr = np.asarray(graph.sample_indptr)[:num_train + 1]
    indices = np.asarray(graph.sample_indices)[:int(indptr[-1])]
    ids, local = compact_ids(indices, graph.num_embeddings)
    cnt = count_embedding_workers(indptr, indices, np.asarray(placement.sample_worker)[:num_train], local,
                                  ids.size, n)
    f = soft_count_table(int(cnt.max()), num_train / n, batch_size)
    prim = np.asarray(placement.embedding_primary)[ids]
    remote = f[cnt]
    remote[np.arange(ids.size), prim] = 0.0
    cross = remote * (machine_of[None, :] != machine_of[prim][:, None])
    readers = np.count_nonzero(cnt, axis=1)
    out = []
    for mask in (readers <= per_machine, readers > per_machine):
        total = float(remote[mask].sum())
        out.append((total, float(cross[mask].sum()) / total if total else 0.0))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="data/bench/criteo-1m")
    ap.add_argument("--topology", default="2x8", help="MxG: M machines of G workers (inter-machine cost 10)")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    ds = load_dataset(args.dataset)
    graph = build_graph(ds)
    topo = parse_topology(args.topology)
    n = topo.num_workers
    mo = np.asarray(topo.machine_of)
    per_machine = int(np.bincount(mo).max())
    hybrid = {"rounds": args.rounds, "replication_budget": 0.0, "batch_size": args.batch_size}
    runs = [("random", "random", topo, {}),
            (f"hybrid, flat {n}-worker cost", "hybrid", homogeneous(n), hybrid),
            (f"hybrid, {args.topology} cost (multilevel start, machines first)", "hybrid", topo, hybrid)]
    print(f"{args.dataset}, {n} workers ({args.topology}), per-worker batch {args.batch_size}, seed {args.seed}, "
          f"1D placements (no secondaries)\n")
    print(f"| placement | batch remote reads | cross-machine | share | reads, rows with <= {per_machine} readers "
          f"| their cross share | reads, rows with > {per_machine} readers | their cross share | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, method, t, opts in runs:
        t0 = time.perf_counter()
        p = run_partitioner(method, graph, t, seed=args.seed, options=opts)
        seconds = time.perf_counter() - t0
        tm = traffic_matrix(graph, p, args.batch_size, num_train=ds.num_train)
        total = int(tm.sum())
        cross = int(tm[mo[:, None] != mo[None, :]].sum())
        (few, few_share), (many, many_share) = reads_by_reader_count(graph, p, mo, args.batch_size, per_machine,
                                                                           ds.num_train)
        print(f"| {name} | {total:,} | {cross:,} | {100 * cross / max(total, 1):.1f}% | {few / 1e6:.2f}M "
              f"| {100 * few_share:.1f}% | {many / 1e6:.2f}M | {100 * many_share:.1f}% | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
