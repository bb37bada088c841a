"""``gmp export``: hand a placement to another training system.

    gmp export torchrec placements/criteo-1m.hybrid.w8 --dataset data/criteo-1m --out export/c1m-h8

Thin: parse, call :mod:`gmp.export`, print.
"""

from __future__ import annotations

import typer

from ._common import handle_errors
from ._flags import flags_for_params
from ._options import options

export_app = typer.Typer(name="export", help="Export a placement manifest to another training system (TorchRec).",
                         no_args_is_help=True)


@export_app.command("torchrec")
@options("export torchrec")
@handle_errors
def torchrec_cmd(manifest, out, dataset, embedding_dim, batch_size, overwrite) -> None:
    """TorchRec row-wise sharding plan: per-field id remap (rank r holds worker r's primaries), sharding
    constraints, per-rank sample order, planner statistics and bytes per epoch beside gmp's own.
    See docs/export.md for what TorchRec cannot express (secondaries, staleness)."""
    from gmp.api import run_export
    from gmp.report.tables import fmt_bytes
    from gmp.specs import resolve_export
    from gmp.wording import plural

    from .train import warn

    with flags_for_params():  # "pass dataset=DIR" -> "pass --dataset DIR"
        spec = resolve_export(manifest, batch_size=batch_size, embedding_dim=embedding_dim)
        for line in spec.warnings:
            warn(line)  # one line when a given value is not the planned one
        exp = run_export(spec, manifest, out, dataset=dataset, overwrite=overwrite)
    plan = exp.plan
    b = plan["bytes_per_epoch"]
    tables, ranks, rows, dropped = (len(plan["tables"]), plan["num_ranks"], plan["padding"]["rows"],
                                    plan["secondaries_dropped"])
    typer.echo(f"wrote {out}: {tables} row-wise {plural('table', tables)} on {ranks} {plural('rank', ranks)}, "
               f"padding {rows:,} {plural('row', rows)} ({plan['padding']['fraction']:.2%}), {dropped:,} "
               f"{plural('secondary', dropped, 'secondaries')} dropped (TorchRec cannot express them)")
    typer.echo(f"bytes per epoch: TorchRec row-wise {fmt_bytes(b['torchrec_row_wise']['total_bytes'])} "
               f"(ids {fmt_bytes(b['torchrec_row_wise']['ids_bytes'])}, pooled sums "
               f"{fmt_bytes(b['torchrec_row_wise']['pooled_bytes'])}); gmp {fmt_bytes(b['gmp']['total_bytes'])}")


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
