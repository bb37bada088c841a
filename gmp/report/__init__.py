"""The partition quality report: ``report.json`` (machine-readable), ``report.md`` /
HTML (for people) and PNG plots.

``gmp partition`` writes the report into the manifest directory; ``gmp
report MANIFEST_DIR`` re-renders it after re-validating the manifest's arrays,
and with ``--dataset`` recomputes every metric from the arrays (the dataset's
hash must match the manifest's).

``report.json``::

    {
      "format": "gmp.report",
      "schema_version": 1,
      "gmp_version": "0.1.0",
      "created": "2026-11-22T01:00:00+00:00",
      "source": "partition",             # or "recomputed from dataset", "report.json", "manifest summary"
      "dataset_sha256": "5b0d6c1f...",
      "settings": {"method": "random", "options": {}, "seed": 0, "num_workers": 2,
                   "topology": {"name": "2", "cost": [[0, 1], [1, 0]], "machine_of": [0, 0]},
                   "batch_size": 512, "embedding_dim": 16, "dataset_sha256": "5b0d..."},
      "graph": {"num_samples": 6, "num_embeddings": 6, "num_active_embeddings": 6, "num_edges": 12, ...},
      "metrics": { ... gmp.metrics.compute_metrics(...) ... },
      "degree_distribution": {"bin_edges": [1, 2, 3], "counts": [0, 6]},
      "convergence": [{"round": 1, "objective": ..., "seconds": ...}, ...] or null,
      "plots": ["traffic.png", "loads.png", "degrees.png"]
    }

``metrics`` holds at least ``remote_accesses``, ``remote_accesses_weighted``,
``epoch_unique_remote``, ``batch_remote_reads``, ``batch_remote_pushes``,
``batch_size``, ``reduction_vs_random`` (same metric names, fractions),
``balance`` (``samples``, ``edges``, ``rows_held``, ``traffic_served``,
``traffic_received``: max/mean), ``replication_factor``, ``traffic_matrix``,
``partition_seconds`` and ``peak_rss_bytes``; see :mod:`gmp.metrics` for
the definitions.
"""

from __future__ import annotations

import datetime as _dt
import numbers
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from .._io import json_default, read_versioned_json, shown_value as _shown, write_json
from .._version import __version__
from ..errors import ManifestError
from ..manifest import made_for
from .html import render_html
from .markdown import render_markdown
from .plots import PLOT_FILES, write_plots

FORMAT = "gmp.report"
SCHEMA_VERSION = 1
REPORT_FORMATS = ("md", "json", "html")

__all__ = ["FORMAT", "SCHEMA_VERSION", "PLOT_FILES", "build_report", "report_from_manifest", "write_report", "render",
           "load_report", "render_markdown", "render_html", "write_html_file", "dataset_name_of", "convergence_log", "Report"]


def build_report(*, placement, topology, metrics: Mapping[str, Any], source: str,
                 dataset_sha256: str | None = None, graph=None,
                 degree_distribution: Mapping[str, Any] | None = None,
                 graph_stats: Mapping[str, Any] | None = None,
                 dataset_name: str | None = None) -> dict[str, Any]:
    """Assemble the report dict from a placement and its metrics.

    ``graph`` (a :class:`~gmp.graph.BipartiteGraph`) supplies the graph
    statistics and the degree distribution; without it pass them explicitly.
    ``dataset_name`` names the dataset in the headline, the plots' titles and
    the settings (see :func:`dataset_name_of`).
    """
    from ..metrics import degree_distribution as _degrees
    from ..partition import options_to_json

    if graph is not None:
        from ..metrics import embedding_degree

        deg = embedding_degree(graph)
        sdeg = np.diff(np.asarray(graph.sample_indptr))
        graph_stats = {
            "num_samples": graph.num_samples,
            "num_embeddings": graph.num_embeddings,
            "num_active_embeddings": int(np.count_nonzero(deg)),
            "num_edges": graph.num_edges,
            "mean_sample_degree": float(sdeg.mean()) if sdeg.size else 0.0,
            "max_embedding_degree": int(deg.max()) if deg.size else 0,
        }
        degree_distribution = _degrees(graph)
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "gmp_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "dataset_sha256": dataset_sha256,
        "dataset_name": dataset_name,
        "settings": {
            "method": placement.method,
            "options": options_to_json(placement.options),
            "seed": placement.seed,
            "num_workers": placement.num_workers,
            "topology": topology.to_json(),
            "batch_size": metrics.get("batch_size"),
            "embedding_dim": metrics.get("embedding_dim"),
            "dataset_sha256": dataset_sha256,
            "dataset_name": dataset_name,
        },
        "graph": dict(graph_stats) if graph_stats else None,
        "metrics": dict(metrics),
        "degree_distribution": dict(degree_distribution) if degree_distribution else None,
        "convergence": convergence_log(placement.info),
        "plots": [],
    }


def convergence_log(info: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """The partitioner's per-round log, ending with its 2D (replication) step when it logged one.

    Hybrid logs its 1D rounds under ``info["rounds"]`` and the 2D step (Eq. 6
    of HET-GMP) under ``info["replication"]``; the 2D row carries the expected
    batch reads *after* replication, the number the report's headline measures.
    """
    info = info if isinstance(info, Mapping) else {}
    logged = info.get("rounds")
    # the log is free-form partitioner output kept in the manifest: what is not a round of
    # numbers (a hand-edited or damaged file) is left out rather than failing the report
    rounds = [{k: v for k, v in r.items() if _is_scalar(v)} for r in (logged if isinstance(logged, list) else [])
              if isinstance(r, Mapping)]
    if not rounds:
        return None
    rep = info.get("replication")
    if isinstance(rep, Mapping) and _is_number(rep.get("expected_remote_reads")):
        rounds.append({"round": "2D", "level": "replication",
                       "expected_remote_reads": rep["expected_remote_reads"],
                       **{k: rep.get(k) for k in ("num_secondaries", "seconds") if _is_number(rep.get(k))}})
    return rounds


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _is_scalar(v: Any) -> bool:
    """A value a table cell can show: a number, a string, null, or one level of those (``extra: {moved: 3}``)."""
    if isinstance(v, Mapping):
        return all(x is None or isinstance(x, (numbers.Real, str)) for x in v.values())
    return v is None or isinstance(v, (numbers.Real, str))


def dataset_name_of(meta: Mapping[str, Any] | None = None, path: str | os.PathLike | None = None) -> str | None:
    """The dataset's name: ``meta["dataset_name"]`` / ``meta["dataset"]["name"]`` / ``meta["name"]``
    when the header (a manifest's or a dataset.json) records one, else the directory name of ``path``."""
    meta = meta or {}
    for value in (meta.get("dataset_name"), (meta.get("dataset") or {}).get("name")
                  if isinstance(meta.get("dataset"), Mapping) else None, meta.get("name")):
        if value:
            return str(value)
    if path is not None:
        return Path(os.path.realpath(path)).name or None
    return None


_REPORT_FIX = "re-create it with 'gmp report MANIFEST_DIR --dataset DATASET_DIR'."
#: metrics that are one number (or null)
_NUMBER_METRICS = ("remote_accesses", "remote_accesses_weighted", "epoch_unique_remote", "batch_remote_reads",
                   "batch_remote_pushes", "batch_remote_reads_weighted", "batch_size", "embedding_dim", "bytes_per_row",
                   "remote_accesses_bytes", "epoch_unique_remote_bytes", "batch_remote_reads_bytes",
                   "batch_remote_pushes_bytes", "replication_factor", "num_workers", "num_samples", "num_edges",
                   "num_active_embeddings", "num_secondaries", "partition_seconds", "peak_rss_bytes")
#: metrics that are an object of numbers (or strings: ``reference.placement``)
_TABLE_METRICS = ("reduction_vs_random", "reference", "balance", "train")


def load_report(path: str | os.PathLike) -> dict[str, Any]:
    """Read a ``report.json`` (format and version checked, then its shape: :func:`check_report`)."""
    report = read_versioned_json(Path(path), fmt=FORMAT, max_version=SCHEMA_VERSION, error=ManifestError,
                                 fix=_REPORT_FIX)
    check_report(report, Path(path))
    return report


def check_report(report: Mapping[str, Any], path: Path) -> None:
    """Check the shape of what a report's tables and plots read, so an edited or damaged ``report.json``
    is one :class:`ManifestError` naming the key, not a TypeError deep in the rendering.

    ``metrics`` an object: its counts numbers or null, ``per_worker`` lists of numbers one per worker,
    ``traffic_matrix`` workers x workers numbers, ``balance``/``reference``/... objects of scalars;
    ``graph`` an object of scalars, ``degree_distribution`` ``bin_edges`` and one fewer ``counts``,
    ``convergence`` a list of objects of scalars, ``plots`` a list of file names (each may be null).
    """
    def bad(key: str, expected: str, got: Any) -> ManifestError:
        import json

        return ManifestError(f"{path}: {key} must be {expected}, got {json.dumps(got, default=str)[:60]}; "
                             f"{_REPORT_FIX}")

    def numbers_list(v: Any) -> bool:
        return isinstance(v, list) and all(_is_number(x) for x in v)

    def scalars(v: Any) -> bool:
        return isinstance(v, Mapping) and all(x is None or isinstance(x, (numbers.Real, str)) for x in v.values())

    metrics = report.get("metrics")
    if not isinstance(metrics, Mapping):
        raise bad("metrics", "an object", metrics)
    for k in _NUMBER_METRICS:
        if metrics.get(k) is not None and not _is_number(metrics[k]):
            raise bad(f"metrics.{k}", "a number or null", metrics[k])
    for k in _TABLE_METRICS:
        if metrics.get(k) is not None and not scalars(metrics[k]):
            raise bad(f"metrics.{k}", "an object of numbers", metrics[k])
    num_workers = metrics.get("num_workers")
    per_worker = metrics.get("per_worker")
    if per_worker is not None:
        if not isinstance(per_worker, Mapping):
            raise bad("metrics.per_worker", "an object of per-worker lists", per_worker)
        for k, v in per_worker.items():
            if not numbers_list(v):
                raise bad(f"metrics.per_worker.{k}", "a list of numbers", v)
            num_workers = len(v) if num_workers is None else num_workers
            if len(v) != num_workers:
                raise bad(f"metrics.per_worker.{k}", f"one number per worker ({num_workers})", v)
    matrix = metrics.get("traffic_matrix")
    if matrix is not None:
        square = isinstance(matrix, list) and all(numbers_list(r) and len(r) == len(matrix) for r in matrix)
        if not square or (num_workers is not None and len(matrix) != num_workers):
            raise bad("metrics.traffic_matrix", f"a {num_workers} x {num_workers} list of lists of numbers", matrix)
    graph = report.get("graph")
    if graph is not None and not scalars(graph):
        raise bad("graph", "an object of numbers", graph)
    degrees = report.get("degree_distribution")
    if degrees is not None:
        edges, counts = (degrees.get("bin_edges"), degrees.get("counts")) if isinstance(degrees, Mapping) else (0, 0)
        if not (numbers_list(edges) and numbers_list(counts) and len(counts) == max(len(edges) - 1, 0)):
            raise bad("degree_distribution", "an object with bin_edges and one fewer counts (numbers)", degrees)
    conv = report.get("convergence")
    if conv is not None and not (isinstance(conv, list) and all(
            isinstance(r, Mapping) and all(_is_scalar(v) for v in r.values()) for r in conv)):
        raise bad("convergence", "a list of objects of numbers or null", conv)
    plots = report.get("plots")
    if plots is not None and not (isinstance(plots, list) and all(isinstance(p, str) for p in plots)):
        raise bad("plots", "a list of file names or null", plots)
    for k in ("settings",):
        if report.get(k) is not None and not isinstance(report[k], Mapping):
            raise bad(k, "an object", report[k])
    for k in ("source", "dataset_sha256", "dataset_name"):
        if report.get(k) is not None and not isinstance(report[k], str):
            raise bad(k, "a string or null", report[k])


def report_from_manifest(manifest, *, dataset=None, batch_size: int | None = None,
                         embedding_dim: int | None = None) -> dict[str, Any]:
    """The report of a loaded :class:`~gmp.manifest.Manifest`.

    With ``dataset`` (whose hash must match; check it with
    ``load_manifest(path, dataset=dataset)``) every metric is recomputed from
    the arrays. Without it the stored ``report.json`` is used after checking
    it against ``manifest.json``'s metrics summary, the arrays and its own sums
    (:func:`cross_check_report`); if there is no report.json, the manifest's
    metric summary and what the arrays alone give (per-worker samples, rows
    held) are shown. ``manifest.json``'s counts of the arrays were checked
    against them when it was loaded (:func:`gmp.manifest.check_header_against_arrays`).
    """
    report = _report_from_manifest(manifest, dataset, batch_size, embedding_dim)
    comparison = (manifest.placement.info or {}).get("comparison")
    if comparison:  # made by gmp partition --from-manifest: its comparison, as the report it wrote has it
        report["incremental"] = comparison
    return report


def _report_from_manifest(manifest, dataset, batch_size, embedding_dim) -> dict[str, Any]:
    meta = manifest.meta
    placement = manifest.placement
    name = dataset_name_of(meta) or (dataset_name_of(dataset.meta, dataset.path) if dataset is not None else None)
    bs = int(batch_size or meta.get("batch_size") or 512)
    dim = int(embedding_dim or meta.get("embedding_dim") or 16)
    if dataset is not None:
        from ..graph import build_graph
        from ..metrics import compute_metrics

        if not made_for(dataset, manifest.dataset_sha256):
            raise ManifestError(
                f"{manifest.path / 'manifest.json'} was made for dataset sha256 {manifest.dataset_sha256[:12]}…, "
                f"but {dataset.path} has sha256 {str(dataset.sha256)[:12]}…; use the dataset it was made for."
            )
        graph = build_graph(dataset)
        metrics = compute_metrics(graph, placement, manifest.topology, batch_size=bs, embedding_dim=dim,
                                  seed=placement.seed, partition_seconds=meta.get("partition_seconds"),
                                  peak_rss_bytes=meta.get("peak_rss_bytes"), num_train=dataset.num_train)
        return build_report(placement=placement, topology=manifest.topology, metrics=metrics,
                            source="recomputed from dataset", dataset_sha256=manifest.dataset_sha256, graph=graph,
                            dataset_name=name)

    samples = np.bincount(np.asarray(placement.sample_worker), minlength=placement.num_workers)
    stored_path = manifest.path / "report.json"
    if stored_path.is_file() and batch_size is None and embedding_dim is None:
        stored = load_report(stored_path)
        cross_check_report(stored, manifest, stored_path)
        report = build_report(placement=placement, topology=manifest.topology, metrics=stored["metrics"],
                              source="report.json (arrays re-validated)", dataset_sha256=manifest.dataset_sha256,
                              degree_distribution=stored.get("degree_distribution"), graph_stats=stored.get("graph"),
                              dataset_name=name or stored.get("dataset_name"))
        return report
    if batch_size is not None or embedding_dim is not None:
        raise ManifestError("`batch_size`/`embedding_dim` need `dataset` DATASET_DIR to recompute the metrics.")
    metrics = dict(meta.get("metrics") or {})
    if metrics.get("embedding_dim") is not None:  # the bytes of a row, as a partition's report.json records them
        from ..constants import VALUE_BYTES

        metrics.setdefault("bytes_per_row", int(metrics["embedding_dim"]) * VALUE_BYTES)
    prim = np.bincount(np.asarray(placement.embedding_primary), minlength=placement.num_workers)
    sec = np.bincount(np.asarray(placement.secondary_workers), minlength=placement.num_workers)
    metrics["per_worker"] = {"samples": samples.tolist(), "primaries": prim.tolist(), "secondaries": sec.tolist(),
                             "rows_held": (prim + sec).tolist()}
    metrics["partition_seconds"] = meta.get("partition_seconds")
    metrics["peak_rss_bytes"] = meta.get("peak_rss_bytes")
    return build_report(placement=placement, topology=manifest.topology, metrics=metrics,
                        source="manifest summary (no report.json; pass --dataset for every metric)",
                        dataset_sha256=manifest.dataset_sha256, dataset_name=name)


def _fix_for(manifest) -> str:
    return (f"one of them was edited or damaged: recompute the report with 'gmp report {manifest.path} --dataset "
            f"DATASET_DIR', or re-create both with 'gmp partition'.")


def _same(a: Any, b: Any) -> bool:
    """Equal, numbers to a relative 1e-9 (each went through JSON once; a float's last digit is not news)."""
    if _is_number(a) and _is_number(b):
        return a == b or abs(float(a) - float(b)) <= 1e-9 * max(abs(float(a)), abs(float(b)))
    return a == b


def cross_check_report(report: Mapping[str, Any], manifest, path: Path) -> None:
    """Refuse a stored ``report.json`` whose metrics disagree with what else records or implies them (one
    :class:`ManifestError` naming the key): ``manifest.json``'s metrics summary (every key it holds), the
    arrays (workers, samples, per-worker samples; the per-worker primaries and secondaries and the
    secondaries' total at most the arrays' counts, as the metrics count only rows the data reads), and the
    report's own sums (per-worker traffic and the traffic matrix against the totals; each change against
    random against the metric and the reference's value).

    The report is re-rendered from these numbers without the dataset, so an edited file would otherwise be
    shown, headline and all, as the manifest's own."""
    from ..manifest import MANIFEST_FILE
    from ..metrics import reduction

    metrics = report.get("metrics") or {}
    placement = manifest.placement
    fix = _fix_for(manifest)

    def refuse(key: str, got: Any, what: str) -> ManifestError:
        return ManifestError(f"{path}: metrics.{key} is {_shown(got)}, but {what}; {fix}")

    summary = manifest.meta.get("metrics") or {}
    against = f"{manifest.path / MANIFEST_FILE}'s metrics summary"
    for key, want in summary.items():
        pairs = ([(f"{key}.{k}", v, (metrics.get(key) or {}).get(k) if isinstance(metrics.get(key), Mapping)
                   else None) for k, v in want.items()] if isinstance(want, Mapping) else [(key, want, metrics.get(key))])
        for name, expected, got in pairs:
            if expected is not None and not _same(got, expected):
                raise refuse(name, got, f"{against} has {_shown(expected)}")

    w = placement.num_workers
    if metrics.get("num_workers") is not None and int(metrics["num_workers"]) != w:
        raise refuse("num_workers", metrics["num_workers"], f"the placement has {w}")
    if metrics.get("num_samples") is not None and int(metrics["num_samples"]) != placement.num_samples:
        raise refuse("num_samples", metrics["num_samples"], f"sample_worker.npy has {placement.num_samples:,}")
    loads = metrics.get("per_worker") or {}
    arrays = {"samples": ("sample_worker.npy", np.asarray(placement.sample_worker), True),
              "primaries": ("embedding_primary.npy", np.asarray(placement.embedding_primary), False),
              "secondaries": ("secondary_workers.npy", np.asarray(placement.secondary_workers), False)}
    for key, (fname, arr, exact) in arrays.items():
        if loads.get(key) is None:
            continue
        have = np.bincount(arr, minlength=w).tolist()
        got = [int(x) for x in loads[key]]
        if got != have if exact else any(g > h for g, h in zip(got, have)):
            relation = "counts" if exact else "counts at most"
            raise refuse(f"per_worker.{key}", got, f"{fname} {relation} {have}")
    counted = metrics.get("num_secondaries")
    if counted is not None:
        if int(counted) > placement.num_secondaries:
            raise refuse("num_secondaries", counted, f"secondary_workers.npy holds only "
                                                     f"{placement.num_secondaries:,}")
        if loads.get("secondaries") is not None and int(counted) != sum(int(x) for x in loads["secondaries"]):
            raise refuse("num_secondaries", counted, f"metrics.per_worker.secondaries sums to "
                                                     f"{sum(int(x) for x in loads['secondaries']):,}")
    for key in ("remote_accesses", "epoch_unique_remote", "batch_remote_reads", "batch_remote_pushes"):
        if metrics.get(key) is not None and loads.get(key) is not None and not _same(sum(loads[key]), metrics[key]):
            raise refuse(key, metrics[key], f"metrics.per_worker.{key} sums to {_shown(sum(loads[key]))}")
    matrix = metrics.get("traffic_matrix")
    if matrix is not None and metrics.get("batch_remote_reads") is not None:
        total = sum(sum(row) for row in matrix)
        if not _same(total, metrics["batch_remote_reads"]):
            raise refuse("batch_remote_reads", metrics["batch_remote_reads"],
                         f"metrics.traffic_matrix sums to {_shown(total)}")
    ref = metrics.get("reference") or {}
    for key, change in (metrics.get("reduction_vs_random") or {}).items():
        if change is None or not _is_number(metrics.get(key)) or not _is_number(ref.get(key)):
            continue
        want = reduction(float(metrics[key]), float(ref[key]))
        if not _same(change, want):
            raise refuse(f"reduction_vs_random.{key}", change,
                         f"metrics.{key} {_shown(metrics[key])} against the reference's {_shown(ref[key])} is "
                         f"{want:+.4f}")


def write_report(out_dir: str | os.PathLike, report: dict[str, Any],
                 formats: Iterable[str] = ("json", "md"), *, plots: bool = True,
                 placement_secondaries: int | None = None) -> list[str]:
    """Write the plots and ``report.<fmt>`` for each format into ``out_dir``; return the file names.

    ``plots=False`` skips the PNGs (and matplotlib, which is only imported to
    draw them): the reports then say the plots were left out.
    ``placement_secondaries`` (the placement's ``num_secondaries``) is shown
    in md/html beside the metrics' count when the two differ (see
    :func:`gmp.report.tables.summary_table`); report.json is unchanged.
    """
    formats = list(formats)
    for fmt in formats:
        if fmt not in REPORT_FORMATS:
            raise ManifestError(f"unknown report format {fmt!r}; choose one of {', '.join(REPORT_FORMATS)}.")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = write_plots(report, out_dir) if plots else []
    report["plots"] = written
    names = list(written)
    for fmt in formats:
        name = f"report.{fmt}"
        if fmt == "json":
            write_json(out_dir / name, report, finite=True, error=ManifestError)
        elif fmt == "md":
            page = render_markdown(report, images=written, placement_secondaries=placement_secondaries)
            (out_dir / name).write_text(page, encoding="utf-8")
        else:
            page = render_html(report, images=[out_dir / p for p in written],
                               placement_secondaries=placement_secondaries)
            (out_dir / name).write_text(page, encoding="utf-8")
        names.append(name)
    return names


class Report:
    """A report dict with a readable face: ``repr`` is its headline, a notebook shows it as Markdown.

    ``.data`` is the report.json dict; ``.markdown()`` / ``.html()`` render it.
    """

    def __init__(self, data: dict[str, Any]):
        self.data = data

    @property
    def headline(self) -> str:
        from .tables import headline

        return headline(self.data)[0]

    @property
    def metrics(self) -> dict[str, Any]:
        return self.data.get("metrics") or {}

    def markdown(self) -> str:
        return render(self.data, "md")

    def html(self, *, plots: bool = True) -> str:
        return render(self.data, "html", plots=plots)

    def _repr_markdown_(self) -> str:  # Jupyter
        return self.markdown()

    def __repr__(self) -> str:
        return f"<Report {self.headline!r} ({self.data.get('source')})>"


def write_html_file(path: str | os.PathLike, report: dict[str, Any], *, plots: bool = True,
                    placement_secondaries: int | None = None) -> Path:
    """Write the report as one self-contained HTML page (plots inlined) to ``path``; return it."""
    path = Path(path)
    page = render(report, "html", plots=plots, placement_secondaries=placement_secondaries)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise ManifestError(f"cannot write {path}: {exc.strerror}; pass `out` DIR (a writable directory) "
                            "or `out` - to print the page.") from None
    return path


def render(report: dict[str, Any], fmt: str, *, plots: bool = True, placement_secondaries: int | None = None) -> str:
    """The report as one string (json, md, or html with plots inlined unless ``plots=False``);
    ``placement_secondaries``: see :func:`write_report`."""
    import json

    if fmt == "json":
        return json.dumps(report, indent=2, default=json_default, allow_nan=False)
    if fmt == "md":
        return render_markdown(report, images=report.get("plots") or [], placement_secondaries=placement_secondaries)
    if fmt == "html" and not plots:
        return render_html(report, images=[], placement_secondaries=placement_secondaries)
    if fmt == "html":
        tmp = Path(tempfile.mkdtemp(prefix="gmp-report-"))
        try:
            plots = write_plots(report, tmp)
            return render_html(report, images=[tmp / p for p in plots], placement_secondaries=placement_secondaries)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    raise ManifestError(f"unknown report format {fmt!r}; choose one of {', '.join(REPORT_FORMATS)}.")


