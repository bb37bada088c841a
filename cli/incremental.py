"""What ``gmp partition NEW --from-manifest OLD [--max-moved-rows N|P%]`` prints: the comparison table.

:func:`cli.partition.partition` resolves and runs the request (:func:`gmp.specs.resolve_partition`,
:func:`gmp.api.run_partition`) and calls :func:`print_comparison` with the manifest's comparison.
"""

from __future__ import annotations

from typing import Any

import typer

from ._common import console


def print_comparison(c: dict[str, Any], name: str) -> None:
    """The comparison table of ``gmp partition --from-manifest`` (the manifest's ``comparison`` object) and
    the lines of target mode."""
    from rich.table import Table

    from gmp.report.tables import incremental_table

    headers, rows = incremental_table(c)
    t = Table(title=f"{name}: batch_remote_reads (batch {c['batch_size']}) and rows moved "
              f"(dim {c['embedding_dim']}, float32)", title_justify="left")
    for h in headers:
        t.add_column(h, justify="left" if h == "placement" else "right")
    for row in rows:
        t.add_row(*row)
    console().print(t)
    _print_target(c)
    if c["created_rows"]:
        typer.echo(f"{c['created_rows']:,} old ids no earlier data read were placed like new ids (created at their "
                   f"initial values, not moved)")


#: what the summary calls each candidate of target mode (gmp.partition.incremental.place_and_repartition)
KEPT = {"sweep": "the sweep's own moves", "target": "the moves toward the full re-partition",
        "full": "the full re-partition itself"}


def _print_target(c: dict[str, Any]) -> None:
    """Target mode's lines: the candidate kept and the three at the budget, what each part cost, the window,
    the curve (``--compare-full``)."""
    from rich.table import Table

    w = c.get("window")
    if w:
        typer.echo(f"window: the last {w['days']} days, {w['samples']:,} samples; "
                   f"{w['batch_remote_reads']:,} batch_remote_reads over the window")
    if "kept" not in c:
        if c.get("target") == "none":
            typer.echo("target none: the plan's own moves only (-O target=full also moves toward the full "
                       "re-partition and keeps what reads least)")
        return
    cands = c["candidates"]
    full = cands["full"]
    typer.echo(f"kept: {KEPT[c['kept']]} (reads / rows moved at this budget: sweep "
               f"{cands['sweep']['batch_remote_reads']:,} / {cands['sweep']['rows']:,}, toward the target "
               f"{cands['target']['batch_remote_reads']:,} / {cands['target']['rows']:,}, the target "
               f"{full['batch_remote_reads']:,} / {full['rows']:,}{'' if full['fits'] else ' (above the budget)'})")
    sec = c["seconds"]
    typer.echo(f"cost: sweep {sec['sweep']:.2f} s, target {sec['target']:.2f} s (its full re-partition and the "
               f"ordered moves; -O target=none leaves it out)")
    curve = c.get("curve")
    if not curve:
        return
    t = Table(title="reads against rows moved by budget (one full re-partition run)", title_justify="left")
    for h in ("budget", "rows allowed", "batch_remote_reads", "vs full", "rows moved", "kept"):
        t.add_column(h, justify="left" if h in ("budget", "kept") else "right")
    ref = full["batch_remote_reads"]  # the target: the full re-partition of the same samples
    for p in curve:
        label = f"{p['percent']:g}%" if p["percent"] is not None else "this budget"
        ratio = f"{p['batch_remote_reads'] / ref:.3f}x" if ref else "-"  # a full re-partition that reads nothing
        t.add_row(label, f"{p['budget']:,}", f"{p['batch_remote_reads']:,}", ratio, f"{p['rows']:,}", p["kept"])
    console().print(t)
