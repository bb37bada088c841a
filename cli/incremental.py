"""``gmp partition NEW --from-manifest OLD [--max-moved-rows N|P%]``: new data on an existing placement.

Called by :func:`cli.partition.partition` when ``--from-manifest`` is given.
Thin: open the old manifest and the new dataset, call
:mod:`gmp.partition.incremental`, score with :mod:`gmp.metrics`, write the
manifest and report, print a comparison table.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer

from ._common import console


def partition_from_manifest(dataset: Path, old_manifest: Path, *, max_moved_rows: Optional[str], batch_size: int,
                            embedding_dim: int, seed: int, out: Optional[Path], overwrite: bool,
                            max_imbalance: Optional[float], rounds: Optional[int], compare_full: bool,
                            no_plots: bool = False, given: Optional[dict[str, Any]] = None) -> None:
    from gmp.compare import method_options, peak_rss_bytes
    from gmp.errors import PartitionError
    from gmp.datasets.format import load_dataset
    from gmp.graph import build_graph
    from gmp.manifest import RowHistory, load_manifest, write_manifest
    from gmp.metrics import batch_remote_reads, compute_metrics, embedding_degree
    from gmp.partition import run_partitioner
    from gmp.partition.incremental import (Options, created_rows, match_workers, migration_budget, moved_rows,
                                           place_and_repartition, place_new_data)
    from gmp.progress import task
    from gmp.report import build_report, dataset_name_of, write_report

    old = load_manifest(old_manifest)
    topo = old.topology
    ds = load_dataset(dataset)
    graph = build_graph(ds)
    given = {"batch_size": batch_size, **(given or {})}  # -O KEY=VALUE: any incremental Options field
    if max_imbalance is not None:
        given["max_imbalance"] = max_imbalance
    if rounds is not None:
        given["rounds"] = rounds
    unknown = sorted(set(given) - set(Options.__dataclass_fields__))
    if unknown:
        raise PartitionError(f"--option {unknown[0]!r} is not an option of --from-manifest; expected one of "
                             f"{', '.join(sorted(Options.__dataclass_fields__))}.")
    options = Options(**given)
    used = np.flatnonzero(embedding_degree(graph))
    num_used = int(used.size)
    # rows no earlier data read are placed like new ids and created, not moved (history: manifest v3)
    trained = None if old.history is None else old.history.trained
    created = created_rows(used, old.placement, trained)
    budget = None if max_moved_rows is None else migration_budget(max_moved_rows, num_used)
    name = "incremental" if budget is not None else "place-new"
    out = out or Path("placements") / f"{Path(dataset).resolve().name}.{name}.w{topo.num_workers}"

    t0 = time.perf_counter()
    if budget is None:
        with task(f"Placing {graph.num_samples:,} new samples on {old_manifest}"):
            placed = placement = place_new_data(graph, old.placement, topo, seed=seed, options=options,
                                                trained=trained)
    else:  # one placement pass for both the "no re-partition" line and the refinement
        with task(f"Placing {graph.num_samples:,} new samples on {old_manifest} and re-partitioning, "
                  f"at most {budget:,} rows moved"):
            placed, placement = place_and_repartition(graph, old.placement, topo, max_moved_rows=budget, seed=seed,
                                                      options=options, trained=trained)
    seconds = time.perf_counter() - t0
    peak = peak_rss_bytes()
    moved = moved_rows(old.placement, placement, created=created)
    history = RowHistory.of_degree(embedding_degree(graph), parent=old.history, parent_rows=old.num_embeddings,
                                   created=created)
    comparison: dict[str, Any] = {
        "old_manifest": str(old_manifest),
        "old_placement_sha256": old.meta.get("placement_sha256"),
        "max_moved_rows": budget,
        "moved_rows": {"primaries": moved.primaries, "secondaries": moved.secondaries, "total": moved.total,
                       "bytes": moved.bytes(embedding_dim)},
        "embedding_dim": embedding_dim,
        "batch_size": batch_size,
        "num_used_rows": num_used,
        "created_rows": int(created.size),
        # "this" is the metrics' batch_remote_reads (filled below: one traffic count, not two)
        "batch_remote_reads": {"no_repartition": None if placed is placement else
                               batch_remote_reads(graph, placed, batch_size), "this": None, "full_repartition": None},
        "seconds": {"this": round(seconds, 4), "full_repartition": None},
    }
    if compare_full:
        with task("Full re-partition (hybrid) for comparison"):
            t2 = time.perf_counter()
            full = run_partitioner("hybrid", graph, topo, seed=seed,
                                   options=method_options("hybrid", {}, batch_size=batch_size,
                                                          embedding_dim=embedding_dim))
            comparison["seconds"]["full_repartition"] = round(time.perf_counter() - t2, 4)
        # a full re-partition numbers its workers arbitrarily: rename them to match the old placement
        # where that changes no cost (uniform off-diagonal cost), and count the rows the new data uses
        cost = np.asarray(topo.cost, dtype=float)
        uniform = bool(np.all(cost[~np.eye(cost.shape[0], dtype=bool)] == cost[0, 1])) if cost.shape[0] > 1 else True
        fm = moved_rows(old.placement, match_workers(old.placement, full) if uniform else full,
                        rows=used, created=created)
        comparison["full_repartition_workers_renamed"] = uniform
        comparison["batch_remote_reads"]["full_repartition"] = batch_remote_reads(graph, full, batch_size)
        comparison["full_repartition_moved_rows"] = {"total": fm.total, "bytes": fm.bytes(embedding_dim)}
    placement.info["comparison"] = comparison  # info is a plain dict: recorded in manifest.json
    with task("Computing metrics (and the random reference)"):
        metrics = compute_metrics(graph, placement, topo, batch_size=batch_size, embedding_dim=embedding_dim,
                                  seed=seed, partition_seconds=seconds, peak_rss_bytes=peak, num_train=ds.num_train)
        reads = comparison["batch_remote_reads"]
        reads["this"] = metrics["batch_remote_reads"]
        if placed is placement:
            reads["no_repartition"] = reads["this"]
        report = build_report(placement=placement, topology=topo, metrics=metrics, source="partition",
                              dataset_sha256=ds.sha256, graph=graph, dataset_name=dataset_name_of(ds.meta, dataset))
        report["incremental"] = comparison
    with task("Writing manifest and report"):
        write_manifest(out, placement, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                       num_embeddings=ds.num_embeddings, topology=topo, metrics=metrics,
                       report_files=lambda tmp: write_report(tmp, report, formats=("json", "md"), plots=not no_plots),
                       partition_seconds=seconds, peak_rss_bytes=peak, overwrite=overwrite,
                       dataset_name=Path(ds.path).name, history=history)
    _print(comparison, name)
    if old.history is None:
        typer.echo(f"{old_manifest} records no row history (made before manifest version 3): every old id counts "
                   f"as trained")
    typer.echo(f"wrote {out} (manifest.json, arrays, report.json, report.md{'' if no_plots else ', plots'})")


def _print(c: dict[str, Any], name: str) -> None:
    from rich.table import Table

    reads = c["batch_remote_reads"]
    t = Table(title=f"{name}: batch_remote_reads (batch {c['batch_size']}) and rows moved "
              f"(dim {c['embedding_dim']}, float32)", title_justify="left")
    for h in ("placement", "batch_remote_reads", "rows moved", "bytes moved", "seconds"):
        t.add_column(h, justify="left" if h == "placement" else "right")
    t.add_row("no re-partition (new data placed)", f"{reads['no_repartition']:,}", "0", "0", "")
    budget = "" if c["max_moved_rows"] is None else f" (budget {c['max_moved_rows']:,} rows)"
    t.add_row(f"{name}{budget}", f"{reads['this']:,}", f"{c['moved_rows']['total']:,}",
              f"{c['moved_rows']['bytes']:,}", f"{c['seconds']['this']:.2f}")
    if reads["full_repartition"] is not None:
        fm = c["full_repartition_moved_rows"]
        t.add_row("full re-partition (hybrid)", f"{reads['full_repartition']:,}", f"{fm['total']:,}",
                  f"{fm['bytes']:,}", f"{c['seconds']['full_repartition']:.2f}")
    console().print(t)
    if c["created_rows"]:
        typer.echo(f"{c['created_rows']:,} old ids no earlier data read were placed like new ids (created at their "
                   f"initial values, not moved)")

