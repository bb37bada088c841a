"""Render a report dict as Markdown (report.md)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from . import tables


def md_table(table: tables.Table) -> str:
    headers, rows = table
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def render_markdown(report: Mapping[str, Any], *, images: Sequence[str] = (),
                    placement_secondaries: int | None = None) -> str:
    """The report as Markdown; ``images`` are PNG paths (relative to the .md) to embed;
    ``placement_secondaries``: see :func:`gmp.report.tables.summary_table`."""
    settings = report.get("settings") or {}
    metrics = report.get("metrics") or {}
    title, summary = tables.headline(report)
    parts = [
        f"# {title}",
        "",
    ]
    if summary:
        parts += [summary, ""]
    parts += [
        f"Source: {report.get('source')}. Batch size {metrics.get('batch_size')} per worker, "
        f"embedding dim {metrics.get('embedding_dim')} (float32). 'vs random' is the change against "
        f"{(metrics.get('reference') or {}).get('placement', 'random')} on the same graph "
        "(-60% = 60% less traffic; + = more).",
        "",
        "## Communication",
        "",
        md_table(tables.metrics_table(metrics)),
        "",
        "## Balance and memory",
        "",
        md_table(tables.summary_table(metrics, placement_secondaries=placement_secondaries)),
        "",
        "## Per worker",
        "",
        md_table(tables.per_worker_table(metrics)),
        "",
    ]
    inc = report.get("incremental")
    if inc:
        parts += ["## New data on an old placement", "", tables.incremental_note(inc), "",
                  md_table(tables.incremental_table(inc)), ""]
        curve = tables.curve_table(inc)
        if curve:
            parts += [tables.CURVE_TITLE[0].upper() + tables.CURVE_TITLE[1:] + ":", "", md_table(curve), "",
                      tables.curve_choice(inc) + ".", ""]
    rounds = tables.convergence_with_final(report)
    if rounds:
        parts += ["## Convergence (per round)", "", CONVERGENCE_NOTE, "", md_table(tables.convergence_table(rounds)), ""]
    if images:
        parts += ["## Plots", ""]
        parts += [f"![{name}]({name})" for name in images]
        parts.append("")
    parts += ["## Settings", "", md_table(tables.settings_table(settings)), ""]
    graph = report.get("graph")
    if graph:
        parts += ["## Graph", "", md_table(tables.graph_table(graph)), ""]
    return "\n".join(parts)


CONVERGENCE_NOTE = ("Rounds 0..T are the partitioner's 1D sweeps (its own estimates; round 0 is the start), "
                    "'2D' its replication step (expected batch reads once secondaries serve locally), "
                    "'final' the exact numbers this report measured.")
