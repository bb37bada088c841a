"""The in-memory API: dataset -> graph -> Placement -> metrics, with no file written but the dataset.

What DGL's ``partition_graph`` offers, step by step: build the bipartite graph of a prepared dataset
(or of your own CSR arrays), run a registered partitioner on it, look at the Placement, score it
against random with the same metric functions every report uses, and only then, if you like, write
it as a manifest. Run it:

    python examples/in_memory.py [--samples 3000] [--workers 4] [--work DIR]

It prints one line per step and checks its own numbers (it exits non-zero if one is wrong).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import gmp
from gmp.graph import BipartiteGraph, build_graph
from gmp.metrics import compute_metrics
from gmp.partition import PARTITIONERS, run_partitioner
from gmp.topology import homogeneous


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--work", type=Path, default=None,
                    help="scratch directory, kept (default: a temporary one, removed at the end)")
    args = ap.parse_args(argv)
    if args.work is not None:
        run(args.work, args.samples, args.workers)
        return
    with tempfile.TemporaryDirectory(prefix="gmp-in-memory-") as work:
        run(Path(work), args.samples, args.workers)


def run(work: Path, num_samples: int, num_workers: int) -> None:
    """The five steps, in ``work``."""
    # 1. a dataset (gmp.import_dataset for real data) and its graph: samples x embedding rows, CSR both ways
    ds = gmp.synthesize(work / "data", preset="tiny", num_samples=num_samples, seed=0, overwrite=True)
    graph = build_graph(ds)
    print(f"graph: {graph.num_samples:,} samples, {graph.num_embeddings:,} rows, {graph.num_edges:,} edges")

    # 2. partition in memory: any registered partitioner, one signature, a Placement back
    topo = homogeneous(num_workers)
    print(f"partitioners: {', '.join(sorted(PARTITIONERS))}")
    placement = run_partitioner("hybrid", graph, topo, seed=0, options={"batch_size": 64})
    reference = run_partitioner("random", graph, topo, seed=0)
    print(f"placement: {placement!r}")

    # the Placement: a worker per sample, a primary worker per row, secondaries (replicas) as CSR
    samples_per_worker = np.bincount(placement.sample_worker, minlength=topo.num_workers)
    rows_per_worker = np.bincount(placement.embedding_primary, minlength=topo.num_workers)
    print(f"samples per worker {samples_per_worker.tolist()}, primary rows per worker {rows_per_worker.tolist()}, "
          f"{placement.num_secondaries:,} secondaries")
    assert samples_per_worker.sum() == graph.num_samples and rows_per_worker.sum() == graph.num_embeddings

    # 3. metrics: plain functions of (graph, placement), the same the report and gmp compare use
    m = compute_metrics(graph, placement, topo, batch_size=64, embedding_dim=16, reference=reference)
    total = m["batch_remote_reads"] + m["batch_remote_pushes"]
    total_random = m["reference"]["batch_remote_reads"] + m["reference"]["batch_remote_pushes"]
    print(f"hybrid: {total:,.0f} rows moved per epoch (reads + pushes) against {total_random:,.0f} for random "
          f"({100 * (total / total_random - 1):+.1f}%), replication factor {m['replication_factor']:.3f}")

    # the one number checked by hand: remote accesses = edges whose row is neither on the sample's worker
    # as primary nor as a secondary there
    w = np.repeat(placement.sample_worker, np.diff(graph.sample_indptr))
    rows = graph.sample_indices
    local = placement.embedding_primary[rows] == w
    owner = np.repeat(np.arange(graph.num_embeddings), np.diff(placement.secondary_indptr))
    replicas = set(zip(owner.tolist(), np.asarray(placement.secondary_workers).tolist()))
    local |= np.fromiter(((e, x) in replicas for e, x in zip(rows.tolist(), w.tolist())), bool, len(rows))
    assert int((~local).sum()) == m["remote_accesses"], (int((~local).sum()), m["remote_accesses"])
    print(f"remote accesses {m['remote_accesses']:,} (checked edge by edge)")

    # 4. your own arrays: a graph from CSR (or lists of rows per sample) partitions the same way
    own = BipartiteGraph.from_lists([[0, 1], [1, 2], [0, 2], [3, 4], [4, 5], [3, 5]])
    two = run_partitioner("metis", own, homogeneous(2), seed=0)
    print(f"own graph: samples on workers {two.sample_worker.tolist()}, rows on {two.embedding_primary.tolist()}")
    assert len(set(two.sample_worker[:3])) == 1 and len(set(two.sample_worker[3:])) == 1  # the two triangles

    # 5. only now, if you want it on disk: the manifest + report gmp partition writes
    written = gmp.partition_dataset(ds, "hybrid", work / "manifest", workers=num_workers, batch_size=64,
                                    options={}, plots=False, overwrite=True)
    assert np.array_equal(written.placement.sample_worker, placement.sample_worker)  # same seed, same placement
    print(f"wrote {written.path}: {gmp.make_report(written).headline}")


if __name__ == "__main__":
    main()
