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
from typing import Any

import typer

from . import console_script
from ._common import console, handle_errors, stop_on_sigterm, summary_table
from ._options import options

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
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}``: values as JSON literals when they parse, else strings. A key
    given twice is refused (one of the values would be dropped silently)."""
    from gmp.errors import PartitionError

    out: dict = {}
    given: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise PartitionError(f"--option {item!r}: expected KEY=VALUE, e.g. --option levels=1.")
        if key in given:
            raise PartitionError(f"-O {key} is given twice (-O {given[key]} and -O {item}); give it once.")
        given[key] = item
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


#: ``gmp partition``'s settings that are not partitioner options: ``-O`` of one of them is refused, naming its flag
#: (``-O batch_size=64`` reached the partitioner alone, which then optimised for 64 while the metrics, the
#: manifest's plan and ``gmp train`` used 512); the options with a flag of their own (``--rounds``) are merged
#: by :func:`_merge_options` instead
REQUEST_KEYS = ("workers", "method", "topology", "topology_file", "inter_cost", "batch_size", "embedding_dim",
                "seed", "out", "overwrite", "from_manifest", "max_moved_rows", "compare_full", "window",
                "distributed", "chunk_samples", "block_samples")


def refuse_request_keys(keyed: dict[str, Any], items: list[str]) -> None:
    """Refuse a ``-O KEY=VALUE`` whose KEY is one of the command's own flags (:data:`REQUEST_KEYS`)."""
    from gmp.errors import PartitionError

    from ._flags import flag_of

    for item in items:
        key = item.partition("=")[0].strip().replace("-", "_")
        if key in REQUEST_KEYS and key in keyed:
            value = item.partition("=")[2]
            flag = flag_of(key)
            raise PartitionError(f"-O {key}={value} sets {flag}, a setting of the whole run (not a partitioner "
                                 f"option only); pass {flag} {value} instead.")


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


@options("partition")
def partition(dataset, workers, method, topology, topology_file, inter_cost, batch_size, embedding_dim, seed,
              out, overwrite, no_plots, rounds, tol, alpha, beta, gamma, max_imbalance, replication_budget,
              memory_per_worker, threads, option, from_manifest, max_moved_rows, compare_full, window,
              distributed, chunk_samples, block_samples) -> None:
    """Partition a dataset's sample-embedding graph and write a placement manifest + report."""
    from gmp.api import run_partition
    from gmp.launch import expect_join
    from gmp.specs import resolve_partition

    from ._flags import flags_for_params, to_flags

    if distributed:  # a refusal before the join is told to the peers (gmp.launch); SIGTERM ends it in one line
        expect_join()
        if console_script():
            stop_on_sigterm(under_torchrun=True)

    flags = {"rounds": rounds, "tol": tol, "alpha": alpha, "beta": beta, "gamma": gamma,
             "max_imbalance": max_imbalance, "replication_budget": replication_budget,
             "memory_per_worker": parse_bytes(memory_per_worker) if memory_per_worker is not None else None,
             "threads": threads}
    keyed = parse_key_values(option or [])
    refuse_request_keys(keyed, option or [])
    with flags_for_params():
        spec = resolve_partition(dataset, method, out, workers=workers, topology=topology,
                                 topology_file=topology_file, inter_cost=inter_cost, seed=seed,
                                 batch_size=batch_size, embedding_dim=embedding_dim,
                                 options=_merge_options(flags, keyed),
                                 from_manifest=from_manifest, max_moved_rows=max_moved_rows,
                                 compare_full=compare_full, window=window, distributed=distributed,
                                 chunk_samples=chunk_samples, block_samples=block_samples, overwrite=overwrite,
                                 plots=not no_plots)
        for line in spec.warnings:
            typer.echo(f"warning: {to_flags(line)}.", err=True)
        made = run_partition(spec)
    if made is None:  # a distributed run's other ranks: rank 0 speaks for all
        return
    wrote = f"wrote {spec.out} (manifest.json, arrays, report.json, report.md{'' if no_plots else ', plots'})"
    said = spec.described()
    if said:  # the settings the person did not give, and where each came from (the old manifest's plan, a default)
        wrote = f"settings: {said}\n{wrote}"
    if spec.mode == "incremental":
        from .incremental import print_comparison

        print_comparison(made.placement.info["comparison"], spec.method)
        if spec.old_manifest.history is None:
            typer.echo(f"{from_manifest} records no row history (made before manifest version 3): every old id "
                       f"counts as trained")
        typer.echo(wrote)
        return
    from gmp.report.tables import traffic_summary, workers_phrase
    from gmp.wording import plural

    topo = spec.topology
    metrics = json.loads((spec.out / "report.json").read_text(encoding="utf-8"))["metrics"]  # the full metrics
    if spec.mode == "scratch":
        summary_table(metrics, f"{spec.method} on {workers_phrase(topo.num_workers, topo.name)}, "
                               f"batch {spec.batch_size}")
        typer.echo(wrote)
        on = f"{topo.num_workers} {plural('worker', topo.num_workers)}"
        typer.echo(f"{spec.method}, {on}: {traffic_summary(metrics)}; replication "
                   f"{metrics['replication_factor']:.3f}, {metrics['partition_seconds']:.1f} s")
        return
    processes = made.placement.info["distributed"]["processes"]
    summary_table(metrics, f"hybrid ({processes} {plural('process', processes, 'processes')}) on {topo.num_workers} "
                           f"workers ({topo.name}), batch {spec.batch_size}")
    typer.echo(wrote)

@options("report")
def report(manifest, dataset, format, out, batch_size, embedding_dim, no_plots, overwrite) -> None:
    """Validate a placement manifest and print (md, json) or write (html) its quality report."""
    from gmp.api import run_report
    from gmp.report import render, write_html_file
    from gmp.specs import resolve_report

    from ._flags import flags_for_params

    with flags_for_params():
        spec = resolve_report(manifest, dataset=dataset, format=format, out=out, batch_size=batch_size,
                              embedding_dim=embedding_dim, plots=not no_plots, overwrite=overwrite)
        if format == "html" and out is None and dataset is not None:  # into the manifest, as --out M is
            _refuse_replacing_the_manifests_page(Path(manifest), batch_size=batch_size, embedding_dim=embedding_dim)
        rep, m, names = run_report(spec)
    total = m.placement.num_secondaries  # the manifest's count, shown beside the report's when they differ
    if format == "html" and out is None:  # a page of inlined PNGs is for a browser, not a terminal
        page = write_html_file(Path(manifest) / "report.html", rep, plots=not no_plots, placement_secondaries=total)
        typer.echo(f"wrote {page}")
        return
    if names is not None:
        typer.echo(f"wrote {', '.join(str(Path(out) / n) for n in names)}")
        return
    if format == "md":
        rep["plots"] = []  # plot files are not next to stdout; use --out for them
    typer.echo(render(rep, format, plots=not no_plots, placement_secondaries=total))


def _refuse_replacing_the_manifests_page(manifest: Path, **given: int | None) -> None:
    """``gmp report M -f html`` without ``--out`` writes M/report.html, the manifest's own report: refused when
    the report is recomputed for a batch or width other than the manifest's plan (as ``--out M`` is), before
    the metrics are computed. A manifest that cannot be read is left to the report's own error."""
    from gmp.errors import GmpError, ManifestError
    from gmp.manifest import read_plan

    if all(v is None for v in given.values()):
        return
    try:
        differ = read_plan(manifest).differences(**given)
    except GmpError:
        return
    if differ:
        raise ManifestError(f"--format html without --out writes {manifest / 'report.html'}, the manifest's own "
                            f"report, which would be replaced by one for {', '.join(differ)}; pass --out DIR to "
                            f"write it elsewhere.")


@options("compare")
def compare(dataset, methods, workers, topology, topology_file, inter_cost, batch_size, embedding_dim, seed, out,
            isolate, overwrite) -> None:
    """Run several partitioners on one dataset; print a HET-GMP-Table-3-shaped comparison."""
    from rich.table import Table

    from gmp._io import check_output_file, json_default, write_claimed_file
    from gmp.api import run_compare
    from gmp.compare import FORMAT as COMPARE_FORMAT
    from gmp.compare import (comparison_summary, comparison_tables, comparison_title, compile_note,
                             render_comparison_html, render_comparison_md)
    from gmp.specs import resolve_compare

    from ._flags import flags_for_params

    with flags_for_params():
        spec = resolve_compare(dataset, methods, workers=workers, topology=topology, topology_file=topology_file,
                               inter_cost=inter_cost, seed=seed, batch_size=batch_size, embedding_dim=embedding_dim,
                               isolate=isolate, out=out, overwrite=overwrite)
    if out is not None:
        check_output_file(out, overwrite=overwrite, kind=COMPARE_FORMAT)  # before the (long) partitioning
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
