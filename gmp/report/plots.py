"""The report's figures (matplotlib, Agg backend: no display needed).

Three PNGs, each a function of the report dict only:

* ``traffic.png`` — worker x worker heatmap of rows served (row = serving
  primary, column = reading worker) per epoch in ``batch_remote_reads``
  terms (compare HET-GMP Fig. 9b); machine boundaries drawn for hierarchical
  topologies;
* ``loads.png`` — per-worker load bars relative to the mean (samples, edges,
  rows held, traffic served, traffic received): a bar at 1.0 is perfect balance;
* ``degrees.png`` — complementary CDF of the embedding degree on log-log
  axes: the share of active embeddings used by at least *d* samples (exact at
  the histogram's bin edges, so the curve needs no density normalisation).

Every figure is saved at :data:`DPI` (print resolution) and titled with the
method, the dataset name (when the report knows it) and the worker count.
matplotlib is imported only when a plot is drawn (``--no-plots`` never
imports it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..manifest import PLOT_FILES  # the manifest directory names its own files
from .tables import subject

#: dots per inch of every saved figure (print resolution)
DPI = 200


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_traffic(report: Mapping[str, Any], path: Path) -> Path | None:
    matrix = report.get("metrics", {}).get("traffic_matrix")
    if matrix is None:
        return None
    plt = _plt()
    m = np.asarray(matrix, dtype=np.float64)
    n = m.shape[0]
    fig, ax = plt.subplots(figsize=(min(3.5 + 0.45 * n, 12), min(3 + 0.45 * n, 11)))
    im = ax.imshow(m, cmap="Blues", interpolation="nearest")
    ax.set_xlabel("reading worker")
    ax.set_ylabel("serving worker (primary)")
    ax.set_title(f"{subject(report)}\nrows served per epoch (batch {report['metrics'].get('batch_size')})",
                 fontsize=9)
    ticks = np.arange(n) if n <= 32 else np.arange(0, n, max(1, n // 16))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    machine_of = (report.get("settings", {}).get("topology") or {}).get("machine_of")
    if machine_of is not None and len(set(machine_of)) > 1:
        bounds = [i for i in range(1, n) if machine_of[i] != machine_of[i - 1]]
        for b in bounds:
            ax.axhline(b - 0.5, color="red", lw=1)
            ax.axvline(b - 0.5, color="red", lw=1)
    if n <= 16:
        top = m.max() if m.size else 0
        for i in range(n):
            for j in range(n):
                if m[i, j] > 0:
                    ax.text(j, i, _short(m[i, j]), ha="center", va="center", fontsize=7,
                            color="white" if m[i, j] > 0.6 * top else "black")
    fig.colorbar(im, ax=ax, label="rows", fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_loads(report: Mapping[str, Any], path: Path) -> Path | None:
    loads = report.get("metrics", {}).get("per_worker")
    if not loads:
        return None
    plt = _plt()
    keys = [k for k in ("samples", "edges", "rows_held", "traffic_served", "traffic_received") if k in loads]
    n = len(loads[keys[0]])
    fig, ax = plt.subplots(figsize=(min(4.5 + 0.6 * n, 14), 3.8))
    width = 0.8 / len(keys)
    x = np.arange(n)
    for k, key in enumerate(keys):
        v = np.asarray(loads[key], dtype=np.float64)
        rel = v / v.mean() if v.mean() > 0 else np.ones_like(v)
        ax.bar(x + (k - (len(keys) - 1) / 2) * width, rel, width, label=key.replace("_", " "))
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xticks(x)
    ax.set_xlabel("worker")
    ax.set_ylabel("load / mean")
    ax.set_title(f"{subject(report)}\nper-worker load (1.0 = perfectly balanced)", fontsize=9)
    ax.legend(fontsize=7, ncol=len(keys), loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_degrees(report: Mapping[str, Any], path: Path) -> Path | None:
    dist = report.get("degree_distribution")
    if not dist or not any(dist.get("counts", [])):
        return None
    plt = _plt()
    edges = np.asarray(dist["bin_edges"], dtype=np.float64)
    counts = np.asarray(dist["counts"], dtype=np.float64)
    # CCDF at each bin's lower edge: share of active rows with degree >= edge (exact, bins are [lo, hi))
    ccdf = counts[::-1].cumsum()[::-1] / counts.sum()
    fig, ax = plt.subplots(figsize=(5, 3.8))
    ax.loglog(edges[:-1], ccdf, "o-", ms=3)  # exact at the points (bin edges)
    ax.set_xlabel("degree d (samples using the row)")
    ax.set_ylabel("share of rows with degree ≥ d")
    ax.set_title(f"{subject(report)}\nembedding degree CCDF", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def write_plots(report: Mapping[str, Any], out_dir: Path) -> list[str]:
    """Write every plot the report has data for into ``out_dir``; return the file names."""
    out_dir = Path(out_dir)
    written = []
    for key, fn in (("traffic", plot_traffic), ("loads", plot_loads), ("degrees", plot_degrees)):
        if fn(report, out_dir / PLOT_FILES[key]) is not None:
            written.append(PLOT_FILES[key])
    return written


def _short(v: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.1f}{unit}"
    return f"{v:.0f}"
