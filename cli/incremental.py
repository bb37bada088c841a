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
        "full": "the full re-partition itself", "refit": "the full re-partition re-fitted"}


def _alongside_text(c: dict) -> str:
    """Where the full re-partition ran beside the sweep: the parts overlap, so say the call's own time."""
    if not c.get("target_alongside"):
        return ""
    sec = c["seconds"]
    return (f"; the two ran side by side: {sec['this']:.2f} s in all, the sweep waited "
            f"{sec.get('wait_for_target', 0.0):.2f} s for the target")


def _refit_text(refit: dict[str, Any] | None) -> str:
    """The re-fitted target at the kept line's end: only where it was computed (the target fits)."""
    if not refit or refit.get("batch_remote_reads") is None:
        return ""
    return f", re-fitted {refit['batch_remote_reads']:,} / {refit['rows']:,}"


def _print_target(c: dict[str, Any]) -> None:
    """Target mode's lines: the candidate kept and the three at the budget, what each part cost, the window,
    the curve (``--compare-full``)."""
    from rich.table import Table

    from gmp.report.tables import CURVE_TITLE, curve_choice, curve_table
    from gmp.wording import plural

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
    kept = KEPT[c["kept"]]
    prefix = (cands.get("refit") or {}).get("prefix_percent")
    if c["kept"] == "refit" and prefix is not None:
        kept = f"the moves toward the full re-partition within {prefix:g}% of the used rows, re-fitted"
    typer.echo(f"kept: {kept} (reads / rows moved at this budget: sweep "
               f"{cands['sweep']['batch_remote_reads']:,} / {cands['sweep']['rows']:,}, toward the target "
               f"{cands['target']['batch_remote_reads']:,} / {cands['target']['rows']:,}, the target "
               f"{full['batch_remote_reads']:,} / {full['rows']:,}{'' if full['fits'] else ' (above the budget)'}"
               f"{_refit_text(cands.get('refit'))})")
    sec = c["seconds"]
    steps = c["sweep_steps"]
    typer.echo(f"cost: sweep {sec['sweep']:.2f} s (placement pass {sec['place']:.2f} s, chain of {steps} "
               f"{plural('step', steps)} {sec['sweep_chain']:.2f} s), target {sec['target']:.2f} s (full "
               f"re-partition {sec['target_full_repartition']:.2f} s, ordered moves {sec['target_moves']:.2f} s, "
               f"re-fit {sec.get('target_refit', 0.0):.2f} s; "
               f"-O target=none leaves it out)" + _alongside_text(c))
    curve = curve_table(c)
    if curve is None:
        return
    headers, rows = curve
    t = Table(title=CURVE_TITLE, title_justify="left")
    for h in headers:
        t.add_column(h, justify="left" if h in ("budget", "kept") else "right")
    for row in rows:
        t.add_row(*row)
    console().print(t)
    typer.echo(curve_choice(c))
