"""``gmp partition``, ``gmp report`` and ``gmp compare``: place samples and embedding rows,
score the placement, and compare partitioners.

Thin: parse flags, resolve them with :mod:`gmp.specs` (``resolve_partition``, ``resolve_report``,
``resolve_compare``: every default and every rule between flags, worded with the flags by
:mod:`cli._flags`), run them with :mod:`gmp.api` (``run_partition``, ``run_compare``), print.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

import typer

from gmp.constants import DEFAULT_BATCH_SIZE
from gmp.partition import PARTITIONERS

from ._common import console, handle_errors, summary_table

#: partitioner flags -> Options field names (passed through only when given)
PARTITIONER_FLAGS = ("rounds", "tol", "alpha", "beta", "gamma", "max_imbalance", "replication_budget",
                     "memory_per_worker", "threads")

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """``"512MiB"`` / ``"2GB"`` / ``"1000"`` -> bytes."""
    from gmp.errors import PartitionError

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise PartitionError(f"--memory-per-worker {text!r} not understood; expected bytes like 1048576, 512MiB or 2GB.")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_key_values(items: list[str]) -> dict:
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}``: values as JSON literals when they parse, else strings."""
    from gmp.errors import PartitionError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise PartitionError(f"--option {item!r}: expected KEY=VALUE, e.g. --option max_pairs=8000000.")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _merge_options(flags: dict[str, Any], keyed: dict[str, Any]) -> dict[str, Any]:
    """The partitioner options the flags give (None: not given) and the ``-O KEY=VALUE`` ones; a key given
    both ways is refused (one of them would be dropped silently)."""
    given = {k: v for k, v in flags.items() if v is not None}
    both = sorted(set(given) & set(keyed))
    if both:
        from gmp.errors import PartitionError

        raise PartitionError(f"{both[0]} is given both as --{both[0].replace('_', '-')} and as -O {both[0]}=...; "
                             f"give it once.")
    return {**given, **keyed}


def partition(
    dataset: Path = typer.Argument(..., help="Prepared dataset directory (from 'gmp data import|synth')."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help="Number of workers (or give --topology)."),
    method: Optional[str] = typer.Option(None, "--method", "-m", help=f"Partitioner: {', '.join(PARTITIONERS)} "
                                         "(not with --from-manifest)."),
    topology: Optional[str] = typer.Option(None, "--topology", help="N workers (e.g. 8) or MxG machines x GPUs (e.g. 2x8)."),
    topology_file: Optional[Path] = typer.Option(None, "--topology-file", help="JSON cost matrix {\"cost\": [[...]]}."),
    inter_cost: Optional[float] = typer.Option(None, "--inter-cost", help="Inter-machine cost for --topology MxG "
                                               "(intra = 1; default 10)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-worker batch size the batch metrics (and "
                                             "partitioners that take it) use (default 512; with --from-manifest, the "
                                             "old manifest's)."),
    embedding_dim: Optional[int] = typer.Option(None, "--embedding-dim", help="Embedding width for byte figures and "
                                                "memory budgets (default 16; with --from-manifest, the old "
                                                "manifest's)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (the random reference uses the same seed)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Manifest directory (default: placements/DATASET.METHOD.wN)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out directory."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the PNG plots (and matplotlib's start-up)."),
    rounds: Optional[int] = typer.Option(None, "--rounds", help="Partitioner option: refinement rounds."),
    tol: Optional[float] = typer.Option(None, "--tol", help="Partitioner option: stop when a round improves less than this."),
    alpha: Optional[float] = typer.Option(None, "--alpha", help="Partitioner option: sample-balance weight."),
    beta: Optional[float] = typer.Option(None, "--beta", help="Partitioner option: embedding-balance weight."),
    gamma: Optional[float] = typer.Option(None, "--gamma", help="Partitioner option: traffic-balance weight."),
    max_imbalance: Optional[float] = typer.Option(None, "--max-imbalance", help="Partitioner option: hard cap on max/mean load."),
    replication_budget: Optional[float] = typer.Option(None, "--replication-budget", help="Partitioner option: secondaries per worker as a fraction of embeddings."),
    memory_per_worker: Optional[str] = typer.Option(None, "--memory-per-worker", help="Partitioner option: replica memory per worker (e.g. 512MiB)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Partitioner option: worker threads."),
    option: Optional[list[str]] = typer.Option(None, "--option", "-O", help="Any other partitioner option as "
                                               "KEY=VALUE (repeatable), e.g. -O order=dataset -O max_pairs=8000000."),
    from_manifest: Optional[Path] = typer.Option(None, "--from-manifest", help="Keep this older placement's rows "
                                                 "and place the new DATASET on it (ids must be stable: --extend)."),
    max_moved_rows: Optional[str] = typer.Option(None, "--max-moved-rows", help="With --from-manifest: re-partition "
                                                 "incrementally, moving at most N rows or P% of the used rows."),
    compare_full: bool = typer.Option(False, "--compare-full", help="With --from-manifest: also run a full hybrid "
                                      "re-partition and report its traffic, rows moved and time (and the reads "
                                      "against rows moved at budgets from 0.5% to 100%)."),
    window: Optional[int] = typer.Option(None, "--window", help="With --from-manifest: re-partition on the last K "
                                         "days (DATASET and its --extend parents); the manifest places DATASET's "
                                         "samples."),
    distributed: bool = typer.Option(False, "--distributed", help="Hybrid across the processes of torchrun (each "
                                     "reads its slice of the samples; docs/distributed.md)."),
    chunk_samples: Optional[int] = typer.Option(None, "--chunk-samples", help="Hybrid out of core: stream the "
                                                "samples from disk N at a time (with or without --distributed)."),
    block_samples: Optional[int] = typer.Option(None, "--block-samples", help="--distributed: samples each process "
                                                "sweeps between two exchanges (default 1024)."),
) -> None:
    """Partition a dataset's sample-embedding graph and write a placement manifest + report."""
    from gmp.api import run_partition
    from gmp.specs import resolve_partition

    from ._flags import flags_for_params

    flags = {"rounds": rounds, "tol": tol, "alpha": alpha, "beta": beta, "gamma": gamma,
             "max_imbalance": max_imbalance, "replication_budget": replication_budget,
             "memory_per_worker": parse_bytes(memory_per_worker) if memory_per_worker is not None else None,
             "threads": threads}
    with flags_for_params():
        spec = resolve_partition(dataset, method, out, workers=workers, topology=topology,
                                 topology_file=topology_file, inter_cost=inter_cost, seed=seed,
                                 batch_size=batch_size, embedding_dim=embedding_dim,
                                 options=_merge_options(flags, parse_key_values(option or [])),
                                 from_manifest=from_manifest, max_moved_rows=max_moved_rows,
                                 compare_full=compare_full, window=window, distributed=distributed,
                                 chunk_samples=chunk_samples, block_samples=block_samples, overwrite=overwrite,
                                 plots=not no_plots)
        for line in spec.warnings:
            typer.echo(f"warning: {line}.", err=True)
        made = run_partition(spec)
    if made is None:  # a distributed run's other ranks: rank 0 speaks for all
        return
    wrote = f"wrote {spec.out} (manifest.json, arrays, report.json, report.md{'' if no_plots else ', plots'})"
    if spec.mode == "incremental":
        from .incremental import print_comparison

        print_comparison(made.placement.info["comparison"], spec.method)
        if spec.old_manifest.history is None:
            typer.echo(f"{from_manifest} records no row history (made before manifest version 3): every old id "
                       f"counts as trained")
        typer.echo(wrote)
        return
    from gmp.report.tables import traffic_summary, workers_phrase

    topo = spec.topology
    metrics = json.loads((spec.out / "report.json").read_text(encoding="utf-8"))["metrics"]  # the full metrics
    if spec.mode == "scratch":
        summary_table(metrics, f"{spec.method} on {workers_phrase(topo.num_workers, topo.name)}, "
                               f"batch {spec.batch_size}")
        typer.echo(wrote)
        typer.echo(f"{spec.method}, {topo.num_workers} workers: {traffic_summary(metrics)}; replication "
                   f"{metrics['replication_factor']:.3f}, {metrics['partition_seconds']:.1f} s")
        return
    processes = made.placement.info["distributed"]["processes"]
    summary_table(metrics, f"hybrid ({processes} process{'es' if processes > 1 else ''}) on {topo.num_workers} "
                           f"workers ({topo.name}), batch {spec.batch_size}")
    typer.echo(wrote)

def report(
    manifest: Path = typer.Argument(..., help="Placement manifest directory (from 'gmp partition')."),
    dataset: Optional[Path] = typer.Option(None, "--dataset", "-d", help="Recompute every metric from this dataset (hash must match)."),
    fmt: str = typer.Option("md", "--format", "-f", help="md, json or html."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write report.FORMAT (and the plots) into this directory "
                                       "instead of printing; '-' prints html too. html defaults to MANIFEST/report.html."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Recompute with another per-worker batch (needs --dataset)."),
    embedding_dim: Optional[int] = typer.Option(None, "--embedding-dim", help="Recompute byte figures for another width (needs --dataset)."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Leave the plots out (and skip matplotlib)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace report files already in the --out directory "
                                   "(without it gmp only replaces the manifest's own report)."),
) -> None:
    """Validate a placement manifest and print (md, json) or write (html) its quality report."""
    from gmp.api import run_report
    from gmp.report import render, write_html_file
    from gmp.specs import resolve_report

    from ._flags import flags_for_params

    with flags_for_params():
        spec = resolve_report(manifest, dataset=dataset, format=fmt, out=out, batch_size=batch_size,
                              embedding_dim=embedding_dim, plots=not no_plots, overwrite=overwrite)
        rep, m, names = run_report(spec)
    total = m.placement.num_secondaries  # the manifest's count, shown beside the report's when they differ
    if fmt == "html" and out is None:  # a page of inlined PNGs is for a browser, not a terminal
        page = write_html_file(Path(manifest) / "report.html", rep, plots=not no_plots, placement_secondaries=total)
        typer.echo(f"wrote {page}")
        return
    if names is not None:
        typer.echo(f"wrote {', '.join(str(Path(out) / n) for n in names)}")
        return
    if fmt == "md":
        rep["plots"] = []  # plot files are not next to stdout; use --out for them
    typer.echo(render(rep, fmt, plots=not no_plots, placement_secondaries=total))


def compare(
    dataset: Path = typer.Argument(..., help="Prepared dataset directory."),
    methods: str = typer.Option(..., "--methods", help="Comma-separated partitioners, e.g. random,metis,hybrid."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help="Number of workers (or give --topology)."),
    topology: Optional[str] = typer.Option(None, "--topology", help="N or MxG (e.g. 2x8)."),
    topology_file: Optional[Path] = typer.Option(None, "--topology-file", help="JSON cost matrix."),
    inter_cost: float = typer.Option(10.0, "--inter-cost", help="Inter-machine cost for --topology MxG."),
    batch_size: int = typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", help="Per-worker batch size."),
    embedding_dim: int = typer.Option(16, "--embedding-dim", help="Embedding width for byte figures."),
    seed: int = typer.Option(0, "--seed", help="Seed of every partitioner and of the random reference."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write the comparison to FILE.md, FILE.json or "
                                       "FILE.html (a bar chart and the tables)."),
    isolate: bool = typer.Option(True, "--isolate/--no-isolate", help="Run each partitioner in its own process so its peak RSS is its own."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out file."),
) -> None:
    """Run several partitioners on one dataset; print a HET-GMP-Table-3-shaped comparison."""
    from rich.table import Table

    from gmp._io import check_output_file, json_default, write_claimed_file
    from gmp.api import run_compare
    from gmp.compare import (comparison_summary, comparison_tables, comparison_title, compile_note,
                             render_comparison_html, render_comparison_md)
    from gmp.specs import resolve_compare

    from ._flags import flags_for_params

    with flags_for_params():
        spec = resolve_compare(dataset, methods, workers=workers, topology=topology, topology_file=topology_file,
                               inter_cost=inter_cost, seed=seed, batch_size=batch_size, embedding_dim=embedding_dim,
                               isolate=isolate, out=out, overwrite=overwrite)
    if out is not None:
        check_output_file(out, overwrite=overwrite)  # before the (long) partitioning
    result = run_compare(spec)
    con = console()
    con.print(comparison_title(result), highlight=False)
    for title, (headers, rows) in comparison_tables(result):
        t = Table(title=title, title_justify="left")
        for h in headers:
            t.add_column(h, justify="left" if h == "method" else "right")
        for r in rows:
            t.add_row(*r)
        con.print(t)
    note = compile_note(result)
    if note:
        typer.echo(note[0].upper() + note[1:])
    if out is not None:  # moved in only if --out is still what the check above found (claimed since)
        if out.suffix == ".json":
            page = json.dumps(result, indent=2, default=json_default) + "\n"
        elif out.suffix == ".html":
            page = render_comparison_html(result)
        else:
            page = render_comparison_md(result)
        write_claimed_file(out, page.encode("utf-8"))
        typer.echo(f"wrote {out}")
    typer.echo(comparison_summary(result))


def register(app: typer.Typer) -> None:
    app.command("partition")(handle_errors(partition))
    app.command("report")(handle_errors(report))
    app.command("compare")(handle_errors(compare))
