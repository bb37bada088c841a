"""Render a report dict as one self-contained HTML page (plots inlined as base64 PNG)."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import tables

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f4f8; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; margin: 0.5em 1em 0.5em 0; border: 1px solid #eee; }
"""


def html_table(table: tables.Table) -> str:
    headers, rows = table
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: Mapping[str, Any], *, images: Sequence[Path] = ()) -> str:
    """The report as HTML; ``images`` are PNG files to inline."""
    settings = report.get("settings") or {}
    metrics = report.get("metrics") or {}
    title = f"Placement report: {settings.get('method')} on {settings.get('num_workers')} workers"
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Source: {html.escape(str(report.get('source')))}. Batch size {metrics.get('batch_size')} per worker, "
        f"embedding dim {metrics.get('embedding_dim')}. Reductions relative to random on the same graph.</p>",
        "<h2>Communication</h2>", html_table(tables.metrics_table(metrics)),
        "<h2>Balance and memory</h2>", html_table(tables.summary_table(metrics)),
        "<h2>Per worker</h2>", html_table(tables.per_worker_table(metrics)),
    ]
    rounds = report.get("convergence")
    if rounds:
        parts += ["<h2>Convergence (per round)</h2>", html_table(tables.convergence_table(rounds))]
    if images:
        parts.append("<h2>Plots</h2>")
        for img in images:
            data = base64.b64encode(Path(img).read_bytes()).decode("ascii")
            parts.append(f"<img alt='{html.escape(Path(img).stem)}' src='data:image/png;base64,{data}'>")
    parts += ["<h2>Settings</h2>", html_table(tables.settings_table(settings)), "</body></html>"]
    return "\n".join(parts)
