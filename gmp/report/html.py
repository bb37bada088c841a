"""Render a report dict as one self-contained HTML page (plots inlined as base64 PNG)."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import tables

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } p.summary { font-size: 1.1em; margin-top: 0; }
p.note { color: #555; font-size: 0.85em; }
div.table { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.45em; text-align: right; }
td { white-space: nowrap; } table.wide { font-size: 0.75em; }
th { background: #f0f4f8; } td:first-child, th:first-child { text-align: left; }
div.plots { display: flex; flex-wrap: wrap; gap: 0.5em; align-items: flex-start; }
div.plots img { width: 48%; min-width: 320px; height: auto; border: 1px solid #eee; }
@media print { body { max-width: none; margin: 0; } div.table { overflow: visible; }
               table.wide { font-size: 0.65em; } div.plots img { width: 45%; } }
"""


def html_table(table: tables.Table) -> str:
    headers, rows = table
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    wide = " class='wide'" if len(headers) > 7 else ""
    return f"<div class='table'><table{wide}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def render_html(report: Mapping[str, Any], *, images: Sequence[Path] = (),
                placement_secondaries: int | None = None) -> str:
    """The report as HTML; ``images`` are PNG files to inline; ``placement_secondaries``: see
    :func:`gmp.report.tables.summary_table`."""
    from .markdown import CONVERGENCE_NOTE

    settings = report.get("settings") or {}
    metrics = report.get("metrics") or {}
    title, summary = tables.headline(report)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if summary:
        parts.append(f"<p class='summary'>{html.escape(summary)}</p>")
    parts += [
        f"<p class='note'>Source: {html.escape(str(report.get('source')))}. Batch size {metrics.get('batch_size')} "
        f"per worker, embedding dim {metrics.get('embedding_dim')}. 'vs random' is the change against random on the "
        "same graph and seed (-60% = 60% less traffic).</p>",
        "<h2>Communication</h2>", html_table(tables.metrics_table(metrics)),
        "<h2>Balance and memory</h2>",
        html_table(tables.summary_table(metrics, placement_secondaries=placement_secondaries)),
        "<h2>Per worker</h2>", html_table(tables.per_worker_table(metrics)),
    ]
    inc = report.get("incremental")
    if inc:
        parts += ["<h2>New data on an old placement</h2>",
                  f"<p class='note'>{html.escape(tables.incremental_note(inc))}</p>",
                  html_table(tables.incremental_table(inc))]
        curve = tables.curve_table(inc)
        if curve:
            parts += [f"<p class='note'>{html.escape(tables.CURVE_TITLE[0].upper() + tables.CURVE_TITLE[1:])}:</p>",
                      html_table(curve), f"<p class='note'>{html.escape(tables.curve_choice(inc))}.</p>"]
    rounds = tables.convergence_with_final(report)
    if rounds:
        parts += ["<h2>Convergence (per round)</h2>", f"<p class='note'>{html.escape(CONVERGENCE_NOTE)}</p>",
                  html_table(tables.convergence_table(rounds))]
    if images:
        parts += ["<h2>Plots</h2>", "<div class='plots'>"]
        for img in images:
            data = base64.b64encode(Path(img).read_bytes()).decode("ascii")
            parts.append(f"<img alt='{html.escape(Path(img).stem)}' src='data:image/png;base64,{data}'>")
        parts.append("</div>")
    parts += ["<h2>Settings</h2>", html_table(tables.settings_table(settings))]
    graph = report.get("graph")
    if graph:
        parts += ["<h2>Graph</h2>", html_table(tables.graph_table(graph))]
    parts.append("</body></html>")
    return "\n".join(parts)
