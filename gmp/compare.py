"""Run several partitioners on one dataset and tabulate them like HET-GMP Table 3.

Each row is one method: every communication metric with its reduction versus
``random`` (same graph, same seed), the replication factor, sample balance,
the partition time and the peak memory.

**Peak memory.** With ``isolate=True`` (the default when a dataset path is
given, and what ``gmp compare`` does) each partitioner runs in its own
freshly spawned Python process, which loads the dataset (memory-mapped),
builds the graph, runs the partitioner and saves the placement; the row's
``peak_rss_bytes`` is that child's ``ru_maxrss`` (its high-water mark: the
interpreter and imports, ~0.2 GB, plus the dataset pages it touched, plus
the partitioner), and ``base_rss_bytes`` is the child's RSS just before the
partitioner started, so ``peak - base`` approximates the partitioner's own
footprint. A child that is killed (e.g. out of memory) or raises gives a
row that says so instead of numbers. With ``isolate=False`` every method runs
in this process and ``peak_rss_bytes`` is this process's high-water mark so
far (monotonic across rows; ``rss_kind`` says which).

**Time.** A row's ``seconds`` is the partitioner's wall time; ``compile_seconds``
is the part numba spent compiling kernels on their first use (a fresh checkout,
a new gmp version: later runs load them from numba's cache). The tables show
the run time without it and the compilation in a column of its own, so the time
column matches what ``gmp partition`` reports once the kernels are cached.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import multiprocessing as mp
import os
import resource
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ._version import __version__
from .errors import GmpError, PartitionError
from .graph import BipartiteGraph
from .metrics import compute_metrics
from .params import option_name, param_error
from .placement import Placement
from .progress import task
from .topology import Topology

log = logging.getLogger(__name__)

FORMAT = "gmp.compare"
SCHEMA_VERSION = 1


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux ``ru_maxrss`` is in KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def current_rss_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:  # pragma: no cover - psutil missing or restricted
        return None


#: the settings a partitioner's options may also hold (hybrid's and the incremental placement's ``batch_size``,
#: hybrid's ``embedding_dim``) that are one setting of the whole request: the batch and width the partitioner
#: optimises for, the metrics score and the manifest's plan records (:func:`refuse_plan_options`)
PLAN_OPTIONS = ("batch_size", "embedding_dim")


def refuse_plan_options(options: Mapping[str, Any] | None, error: type[GmpError] = PartitionError, *,
                        method: str | None = None) -> None:
    """Refuse ``batch_size``/``embedding_dim`` (:data:`PLAN_OPTIONS`) inside a partitioner's ``options``: given
    there they reached the partitioner only, so it optimised for one value while the metrics, the manifest's
    plan and ``gmp train`` used another. ``method``: whose options these are (``gmp compare``'s per-method ones)."""
    given = [k for k in PLAN_OPTIONS if k in (options or {})]
    if given:
        key = given[0]
        value = options[key]
        where = "the partitioner's options" if method is None else f"the options of {method!r}"
        raise param_error(error, key, f"{where} give {key}={value!r}, which is the request's own `{key}` (the value "
                                      f"the partitioner optimises for, the metrics score and the manifest's plan "
                                      f"records); pass `{key}={value!r}` and leave it out of the options.")


def method_options(name: str, given: Mapping[str, Any], *, batch_size: int, embedding_dim: int,
                   strict: bool = True) -> dict[str, Any]:
    """The options dict for partitioner ``name``.

    ``given`` (user flags) must all be fields of the method's Options (else a
    :class:`PartitionError` naming the flags, when ``strict``); ``batch_size``
    and ``embedding_dim`` are added when the Options has such fields (given
    in ``given`` they are refused: :func:`refuse_plan_options`).
    """
    from .partition import get_partitioner

    refuse_plan_options(given, method=name)  # one batch and width for the whole run
    _, options_cls = get_partitioner(name)
    fields = {f.name for f in dataclasses.fields(options_cls)}
    unknown = sorted(set(given) - fields)
    if unknown and strict:
        flags = ", ".join(map(option_name, unknown))
        takes = ", ".join(map(option_name, sorted(fields))) or "no options"
        raise PartitionError(f"method {name!r} does not take {flags}; it takes: {takes}.")
    opts = {k: v for k, v in given.items() if k in fields}
    if "batch_size" in fields and "batch_size" not in opts:
        opts["batch_size"] = int(batch_size)
    if "embedding_dim" in fields and "embedding_dim" not in opts:
        opts["embedding_dim"] = int(embedding_dim)
    return opts


def with_field_layout(options: Mapping[str, Any], dataset) -> dict[str, Any]:
    """``options`` plus ``field_offsets`` (the first id of each categorical field of ``dataset``)
    when they ask for ``per_field`` balance and do not give the offsets themselves."""
    opts = dict(options)
    if opts.get("per_field") and not opts.get("field_offsets"):
        if any(len(f.id_ranges) > 1 for f in dataset.categorical_fields):
            raise PartitionError(f"per_field balance needs every field to be one id range, but {dataset.path} "
                                 f"extends another dataset (its fields have several ranges); give field_offsets "
                                 f"or leave per_field out.")
        opts["field_offsets"] = [int(f.offset) for f in dataset.categorical_fields]
    return opts


def timed_run(fn):
    """``(fn(), seconds, compile_seconds)``: the wall time of ``fn()`` and the part of it numba spent
    compiling (outermost compilations only; 0.0 when every kernel came from numba's cache)."""
    from numba.core import event

    compiled: list[float] = []
    with event.install_timer("numba:compile", compiled.append):
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
    return out, seconds, min(sum(compiled), seconds)


def _child(dataset_path: str, method: str, topology_json: dict, seed: int, options: dict, out_dir: str,
           conn) -> None:  # pragma: no cover - runs in a spawned process
    try:
        from gmp.datasets.format import load_dataset
        from gmp.graph import build_graph
        from gmp.partition import run_partitioner
        from gmp.topology import Topology as _Topology

        graph = build_graph(load_dataset(dataset_path))
        topo = _Topology.from_json(topology_json)
        base = current_rss_bytes()
        placement, seconds, compile_seconds = timed_run(
            lambda: run_partitioner(method, graph, topo, seed=seed, options=options))
        peak = peak_rss_bytes()
        for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
            np.save(Path(out_dir) / f"{name}.npy", getattr(placement, name))
        conn.send({"ok": True, "seconds": seconds, "compile_seconds": compile_seconds, "peak_rss_bytes": peak, "base_rss_bytes": base,
                   "method": placement.method, "options": dict(placement.options), "seed": placement.seed,
                   "info": dict(placement.info or {})})
    except BaseException as exc:  # report every failure to the parent as a row
        msg = str(exc) if isinstance(exc, GmpError) else f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, (GmpError, ImportError, MemoryError)):
            log.debug("%s", traceback.format_exc())
        conn.send({"ok": False, "error": msg})
    finally:
        conn.close()


#: the exit code of a spawned child that found itself re-running an unguarded script (below)
UNGUARDED_MAIN_EXIT = 87


def _called_from_a_reimported_main() -> bool:
    """True when this call runs at the top level of ``__mp_main__``, the name a spawned child gives
    the parent's script while it imports it again: the script called :func:`compare` outside an
    ``if __name__ == "__main__":`` block, so every child would start the whole comparison anew."""
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


def _unguarded_main_error() -> PartitionError:
    return PartitionError(
        "the comparison runs each method in a spawned process (`isolate` is on by default), and that process "
        "imports your script again; your script calls the comparison outside `if __name__ == \"__main__\":`, "
        "so the child would start it anew. Put the call under that guard, or pass `isolate=False` to run the "
        "methods in this process.")


def _run_isolated(dataset_path: str, method: str, topology: Topology, seed: int, options: dict,
                  num_workers: int) -> tuple[Placement | None, dict]:
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix=f"gmp-compare-{method}-")
    try:
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(dataset_path, method, topology.to_json(), seed, options, tmp, send))
        proc.start()
        send.close()
        try:
            result = recv.recv()
        except EOFError:
            result = None
        proc.join()
        if result is None:
            code = proc.exitcode
            if code == UNGUARDED_MAIN_EXIT:
                raise _unguarded_main_error()
            why = "killed (likely out of memory)" if code is not None and code < 0 else f"exited with code {code}"
            return None, {"status": f"not run: process {why}"}
        if not result["ok"]:
            return None, {"status": f"not run: {result['error']}"}
        arrays = {name: np.load(Path(tmp) / f"{name}.npy") for name in
                  ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers")}
        placement = Placement(num_workers=num_workers, method=result["method"], options=result["options"],
                              seed=result["seed"], info=result["info"], **arrays)
        return placement, {"status": "ok", "seconds": result["seconds"],
                           "compile_seconds": result["compile_seconds"], "peak_rss_bytes": result["peak_rss_bytes"],
                           "base_rss_bytes": result["base_rss_bytes"], "rss_kind": "child process peak"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_inline(graph: BipartiteGraph, method: str, topology: Topology, seed: int,
                options: dict) -> tuple[Placement | None, dict]:
    from .partition import run_partitioner

    base = current_rss_bytes()
    try:
        placement, seconds, compile_seconds = timed_run(
            lambda: run_partitioner(method, graph, topology, seed=seed, options=options))
    except (GmpError, ImportError, MemoryError) as exc:
        msg = str(exc) if isinstance(exc, GmpError) else f"{type(exc).__name__}: {exc}"
        return None, {"status": f"not run: {msg}"}
    return placement, {"status": "ok", "seconds": seconds, "compile_seconds": compile_seconds,
                       "peak_rss_bytes": peak_rss_bytes(),
                       "base_rss_bytes": base, "rss_kind": "process high-water mark"}


def compare(graph: BipartiteGraph, topology: Topology, methods: Sequence[str], *, seed: int = 0,
            batch_size: int = 512, embedding_dim: int = 16,
            options: Mapping[str, Mapping[str, Any]] | None = None,
            dataset_path: str | os.PathLike | None = None, isolate: bool | None = None,
            dataset_name: str | None = None) -> dict[str, Any]:
    """Run ``methods`` on ``graph`` and score each against ``random`` (same seed).

    Parameters
    ----------
    graph, topology
        The graph and the worker topology.
    methods
        Registered partitioner names (unknown names are an error; a method
        whose module or dependency is missing gives a "not run" row).
    options
        Per-method option mappings (``{"hybrid": {"rounds": 3}}``), merged
        with ``batch_size``/``embedding_dim`` where the method takes them.
    dataset_path, isolate
        With a ``dataset_path`` each method runs in its own spawned process
        (``isolate`` defaults to True) so its peak memory is its own.
    dataset_name
        Shown in the titles (``settings.dataset_name``).

    Returns
    -------
    dict
        ``{"format": "gmp.compare", "schema_version": 1, "settings": {...},
        "rows": [{"method", "status", "seconds", "compile_seconds", "peak_rss_bytes",
        "base_rss_bytes", "rss_kind", "metrics": {...} | None}, ...]}``.
    """
    from .partition import PARTITIONERS, run_partitioner

    unknown = [m for m in methods if m not in PARTITIONERS]
    if unknown:
        raise PartitionError(f"unknown method(s) {', '.join(unknown)}; choose from: {', '.join(sorted(PARTITIONERS))}.")
    if not methods:
        raise PartitionError("give at least one method, e.g. `methods` random,metis.")
    twice = sorted({m for m in methods if list(methods).count(m) > 1})
    if twice:  # each would run and print its row again
        raise PartitionError(f"`methods` names {', '.join(twice)} more than once; name each method once.")
    if isolate is None:
        isolate = dataset_path is not None
    if isolate and dataset_path is None:
        raise PartitionError("isolate=True needs dataset_path (the child process loads the dataset itself).")
    if isolate and _called_from_a_reimported_main():  # a spawned child importing an unguarded script
        raise SystemExit(UNGUARDED_MAIN_EXIT)
    options = dict(options or {})
    stray = sorted(set(options) - set(methods))
    if stray:  # a typo, or one method's flat options: either would run with the defaults unnoticed
        raise PartitionError(f"options has key(s) {', '.join(map(repr, stray))}, which are not among the methods "
                             f"compared ({', '.join(methods)}); options maps a method to its options, e.g. "
                             f"{{'hybrid': {{'rounds': 1}}}}.")
    reference = run_partitioner("random", graph, topology, seed=seed)
    rows = []
    for method in methods:
        row: dict[str, Any] = {"method": method}
        try:
            opts = method_options(method, options.get(method, {}), batch_size=batch_size,
                                  embedding_dim=embedding_dim)
        except ImportError as exc:
            rows.append({**row, "status": f"not run: {exc}", "metrics": None})
            continue
        with task(f"Partitioning with {method}"):
            if isolate:
                placement, info = _run_isolated(str(dataset_path), method, topology, seed, opts, topology.num_workers)
            else:
                placement, info = _run_inline(graph, method, topology, seed, opts)
        row.update(info)
        if placement is None:
            row["metrics"] = None
            rows.append(row)
            continue
        with task(f"Scoring {method}"):
            metrics = compute_metrics(graph, placement, topology, batch_size=batch_size, embedding_dim=embedding_dim,
                                      reference=reference, partition_seconds=info["seconds"],
                                      peak_rss_bytes=info["peak_rss_bytes"])
        row["metrics"] = metrics
        row["options"] = dict(placement.options)
        rows.append(row)
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "gmp_version": __version__,
        "settings": {"methods": list(methods), "num_workers": topology.num_workers, "topology": topology.name,
                     "seed": seed, "batch_size": batch_size, "embedding_dim": embedding_dim,
                     "num_samples": graph.num_samples, "num_embeddings": graph.num_embeddings,
                     "num_edges": graph.num_edges, "isolated": bool(isolate),
                     "dataset_sha256": graph.sha256, "dataset_name": dataset_name},
        "rows": rows,
    }


#: column order of the Table-3-shaped table: (metric, short label)
TABLE_METRICS = (
    ("batch_remote_reads", "batch reads"),
    ("batch_remote_pushes", "batch pushes"),
    ("epoch_unique_remote", "epoch unique"),
    ("remote_accesses", "remote accesses"),
    ("remote_accesses_weighted", "weighted"),
)


def comparison_table(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """``(headers, rows)``: per method each metric and its reduction vs random, replication,
    sample balance, time and peak RSS (HET-GMP Table 3 shape)."""
    from .report.tables import fmt_bytes, fmt_change, fmt_num, fmt_ratio

    compiled = _any_compiled(result)
    headers = ["method"]
    for _, label in TABLE_METRICS:
        headers += [label, "vs random"]
    headers += ["replication", "balance (samples)", "time (s)"] + (["compile (s)"] if compiled else []) + ["peak RSS"]
    rows = []
    for r in result["rows"]:
        m = r.get("metrics")
        if m is None:
            rows.append([r["method"]] + [r["status"]] + [""] * (len(headers) - 2))
            continue
        red = m["reduction_vs_random"]
        cells = [r["method"]]
        for key, _ in TABLE_METRICS:
            cells += [fmt_num(m[key], 1), fmt_change(red[key])]
        cells += [fmt_ratio(m["replication_factor"]), fmt_ratio(m["balance"]["samples"])] + _time_cells(r, compiled)
        cells += [fmt_bytes(r.get("peak_rss_bytes"))]
        rows.append(cells)
    return headers, rows


def render_comparison_md(result: Mapping[str, Any]) -> str:
    from .report.markdown import md_table
    from .report.tables import workers_phrase

    from ._io import file_mark

    s = result["settings"]
    lines = [
        file_mark(FORMAT, SCHEMA_VERSION),  # what --overwrite recognises as gmp's own file
        f"# Partitioner comparison: {s['num_samples']:,} samples, {s['num_embeddings']:,} embeddings, "
        f"{s['num_edges']:,} edges, {workers_phrase(s['num_workers'], s['topology'])}",
        "",
        f"Per-worker batch {s['batch_size']}, seed {s['seed']}; 'vs random' = the change against random "
        "(same graph and seed; -60% = 60% less traffic, + = more). " + TIME_NOTE + " Peak RSS: "
        + ("each partitioner's own child process (includes the interpreter and the dataset pages it touched)."
           if s.get("isolated") else "this process's high-water mark so far."),
        "",
        md_table(comparison_table(result)),
        "",
    ]
    note = compile_note(result)
    if note:
        lines += [note[0].upper() + note[1:], ""]
    return "\n".join(lines)


#: the communication metrics of the compact (terminal / HTML) tables and the bar chart
COMPACT_METRICS = (
    ("batch_remote_reads", "batch reads"),
    ("batch_remote_pushes", "batch pushes"),
    ("epoch_unique_remote", "epoch unique"),
    ("remote_accesses", "remote accesses"),
    ("remote_accesses_weighted", "weighted"),
)


TIME_NOTE = ("'time (s)' is the partitioner's run; 'compile (s)', where shown, the numba compilation of its "
             "kernels on first use, which later runs load from numba's cache.")


def _any_compiled(result: Mapping[str, Any]) -> bool:
    """Whether some row spent a noticeable time (>= 0.05 s) compiling: only then the tables show the column."""
    return any(float(r.get("compile_seconds") or 0.0) >= 0.05 for r in result["rows"] if r.get("metrics"))


def _time_cells(row: Mapping[str, Any], compiled: bool) -> list[str]:
    """``["1.02"]`` or, with ``compiled``, ``["1.02", "8.61"]``: the run time without the compilation, and it."""
    comp = float(row.get("compile_seconds") or 0.0)
    return [f"{row['seconds'] - comp:.2f}"] + ([f"{comp:.2f}"] if compiled else [])


def compile_note(result: Mapping[str, Any]) -> str | None:
    """One line under the tables when some row's time included first-run compilation (None otherwise)."""
    if not _any_compiled(result):
        return None
    return "compile (s): numba compiling kernels on first use, left out of time (s); later runs load them cached."


def _ok_rows(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in result["rows"] if r.get("metrics") is not None]


def _compact_metrics(result: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The metrics worth a column: ``weighted`` only when some topology cost differs from 1
    (on a flat topology it repeats ``remote accesses``)."""
    rows = _ok_rows(result)
    keep = []
    for key, name in COMPACT_METRICS:
        if key == "remote_accesses_weighted" and all(
                float(r["metrics"][key]) == float(r["metrics"]["remote_accesses"]) for r in rows):
            continue
        keep.append((key, name))
    return keep


def comparison_tables(result: Mapping[str, Any]) -> list[tuple[str, tuple[list[str], list[list[str]]]]]:
    """The comparison as two narrow tables ``[(title, (headers, rows)), ...]`` that fit 80-100 columns.

    1. communication per epoch: each metric as ``"2.05M -82.5%"`` (rows, change vs random);
    2. cost: replication factor, sample balance, partition time, peak RSS.

    A method that did not run gets its reason in the first table only.
    """
    from .report.tables import fmt_bytes, fmt_change, fmt_ratio, fmt_short

    metrics = _compact_metrics(result)
    compiled = _any_compiled(result)
    comm_rows, cost_rows = [], []
    for r in result["rows"]:
        m = r.get("metrics")
        if m is None:
            comm_rows.append([r["method"], r["status"]] + [""] * (len(metrics) - 1))
            continue
        red = m["reduction_vs_random"]
        comm_rows.append([r["method"]] + [f"{fmt_short(m[k])} {fmt_change(red[k])}" for k, _ in metrics])
        cost_rows.append([r["method"], fmt_ratio(m["replication_factor"]), fmt_ratio(m["balance"]["samples"])]
                         + _time_cells(r, compiled) + [fmt_bytes(r.get("peak_rss_bytes"))])
    return [
        ("Rows moved per epoch, change vs random", (["method"] + [name for _, name in metrics], comm_rows)),
        ("Cost", (["method", "replication", "balance (samples)", "time (s)"] + (["compile (s)"] if compiled else [])
                  + ["peak RSS"], cost_rows)),
    ]


def comparison_title(result: Mapping[str, Any]) -> str:
    from .report.tables import workers_phrase

    s = result["settings"]
    name = f"{s['dataset_name']}: " if s.get("dataset_name") else ""
    return f"{name}{s['num_samples']:,} samples, {workers_phrase(s['num_workers'], s['topology'])}, batch {s['batch_size']}"


def comparison_summary(result: Mapping[str, Any]) -> str:
    """One line: the method that moves the fewest rows per epoch (batch reads + pushes), its change
    against random, and the methods that did not run."""
    from .report.tables import traffic_summary

    rows = _ok_rows(result)
    failed = [r["method"] for r in result["rows"] if r.get("metrics") is None]
    tail = f" Not run: {', '.join(failed)}." if failed else ""
    if not rows:
        return "No method ran." + tail
    best = min(rows, key=lambda r: float(r["metrics"]["batch_remote_reads"]) + float(r["metrics"]["batch_remote_pushes"]))
    return f"Best: {best['method']}, {traffic_summary(best['metrics'])}.{tail}"


def _bar_chart_svg(result: Mapping[str, Any]) -> str:
    """A grouped bar chart (inline SVG, no matplotlib): per metric, each method's rows as % of random."""
    rows = _ok_rows(result)
    metrics = _compact_metrics(result)
    palette = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7")
    values = [[100.0 * (1.0 - float(r["metrics"]["reduction_vs_random"][k])) for r in rows] for k, _ in metrics]
    top = max([100.0] + [v for group in values for v in group])
    width, height, left, bottom, top_pad = 760, 320, 50, 60, 20
    plot_h = height - bottom - top_pad
    group_w = (width - left - 10) / max(len(metrics), 1)
    bar_w = group_w * 0.8 / max(len(rows), 1)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height + 24 * ((len(rows) + 3) // 4)}' "
             "role='img' aria-label='rows moved per epoch as % of random'>",
             "<style>text { font: 12px system-ui, sans-serif; }</style>"]
    for tick in range(0, int(top) + 1, 25 if top <= 200 else 100):
        y = top_pad + plot_h * (1 - tick / top)
        parts.append(f"<line x1='{left}' x2='{width - 10}' y1='{y:.1f}' y2='{y:.1f}' stroke='#ddd'/>"
                     f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end'>{tick}%</text>")
    for g, ((_, name), group) in enumerate(zip(metrics, values)):
        x0 = left + g * group_w + group_w * 0.1
        for i, v in enumerate(group):
            h = plot_h * v / top
            x = x0 + i * bar_w
            parts.append(f"<rect class='bar' x='{x:.1f}' y='{top_pad + plot_h - h:.1f}' width='{bar_w * 0.9:.1f}' "
                         f"height='{h:.1f}' fill='{palette[i % len(palette)]}'><title>{rows[i]['method']}, {name}: "
                         f"{v:.1f}% of random</title></rect>")
        parts.append(f"<text x='{x0 + group_w * 0.4:.1f}' y='{top_pad + plot_h + 18}' text-anchor='middle'>{name}</text>")
    y100 = top_pad + plot_h * (1 - 100 / top)
    parts.append(f"<line x1='{left}' x2='{width - 10}' y1='{y100:.1f}' y2='{y100:.1f}' stroke='#333' "
                 "stroke-dasharray='4 3'/>")
    for i, r in enumerate(rows):
        lx, ly = left + (i % 4) * 170, height - 14 + 24 * (i // 4)
        parts.append(f"<rect x='{lx}' y='{ly - 10}' width='12' height='12' fill='{palette[i % len(palette)]}'/>"
                     f"<text x='{lx + 18}' y='{ly}'>{r['method']}</text>")
    parts.append("</svg>")
    return "\n".join(parts)


def render_comparison_html(result: Mapping[str, Any]) -> str:
    """The comparison as one self-contained HTML page: a bar chart (rows per epoch as % of random,
    inline SVG) and the tables."""
    import html as _html

    from .report.html import CSS, html_table

    s = result["settings"]
    title = f"Partitioner comparison — {comparison_title(result)}"
    from ._io import file_mark

    parts = ["<!DOCTYPE html>", file_mark(FORMAT, SCHEMA_VERSION), "<html><head><meta charset='utf-8'>",
             f"<title>{_html.escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{_html.escape(title)}</h1>",
             f"<p class='note'>{s['num_embeddings']:,} embeddings, {s['num_edges']:,} edges, seed {s['seed']}; "
             "bars: rows moved per epoch as % of random on the same graph and seed (dashed line = random; "
             "lower is better).</p>"]
    if _ok_rows(result):
        parts.append(_bar_chart_svg(result))
    for name, table in comparison_tables(result):
        parts += [f"<h2>{_html.escape(name)}</h2>", html_table(table)]
    parts += ["<h2>Every number</h2>", html_table(comparison_table(result))]
    note = compile_note(result)
    parts += ([f"<p class='note'>{_html.escape(note[0].upper() + note[1:])}</p>"] if note else []) + ["</body></html>"]
    return "\n".join(parts)
