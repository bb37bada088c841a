"""``gmp partition NEW --from-manifest OLD [--max-moved-rows N|P%]``: new data on an existing placement.

Called by :func:`cli.partition.partition` when ``--from-manifest`` is given.
Thin: check ``--out``, call :func:`gmp.api.repartition_dataset` (place,
re-partition, score, write the manifest and report), print a comparison table.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from ._common import console


def partition_from_manifest(dataset: Path, old_manifest: Path, *, max_moved_rows: Optional[str],
                            batch_size: Optional[int], embedding_dim: Optional[int], seed: int, out: Optional[Path],
                            overwrite: bool, compare_full: bool, no_plots: bool = False,
                            given: Optional[dict[str, Any]] = None, window: Optional[int] = None) -> None:
    """``given``: incremental Options fields (the flags that map to one and ``-O KEY=VALUE``);
    ``batch_size``/``embedding_dim`` None: the old manifest's plan."""
    from gmp._io import check_output_dir
    from gmp.api import repartition_dataset
    from gmp.manifest import MANIFEST_FILES, load_manifest

    from ._common import check_seed

    check_seed(seed)
    if window is not None and window < 1:
        from gmp.errors import PartitionError

        raise PartitionError(f"--window must be a number of days >= 1, got {window}.")
    if max_moved_rows is not None:  # its form, before anything is read (the percentage's rows come later)
        from gmp.partition.incremental import migration_budget

        migration_budget(max_moved_rows, 0, name="--max-moved-rows")
    old = load_manifest(old_manifest)
    options = dict(given or {})
    name = "incremental" if max_moved_rows is not None else "place-new"
    out = out or Path("placements") / f"{Path(os.path.realpath(dataset)).name}.{name}.w{old.topology.num_workers}"
    check_output_dir(out, kind="gmp.placement", overwrite=overwrite, inputs=[dataset, old_manifest],
                     own=MANIFEST_FILES)
    made = repartition_dataset(dataset, old, out, max_moved_rows=max_moved_rows, seed=seed, batch_size=batch_size,
                               embedding_dim=embedding_dim, options=options, compare_full=compare_full,
                               overwrite=overwrite, plots=not no_plots, window=window)
    _print(made.placement.info["comparison"], name)
    if old.history is None:
        typer.echo(f"{old_manifest} records no row history (made before manifest version 3): every old id counts "
                   f"as trained")
    typer.echo(f"wrote {out} (manifest.json, arrays, report.json, report.md{'' if no_plots else ', plots'})")


def _print(c: dict[str, Any], name: str) -> None:
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

    from gmp.report.tables import CURVE_TITLE, curve_table

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
    steps = c["sweep_steps"]
    typer.echo(f"cost: sweep {sec['sweep']:.2f} s (placement pass {sec['place']:.2f} s, chain of {steps} "
               f"step{'s' if steps != 1 else ''} {sec['sweep_chain']:.2f} s), target {sec['target']:.2f} s (full "
               f"re-partition {sec['target_full_repartition']:.2f} s, ordered moves {sec['target_moves']:.2f} s; "
               f"-O target=none leaves it out)")
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
