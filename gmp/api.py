"""The Python facade: one verb per pipeline stage, re-exported by ``import gmp``.

    dataset  ->  graph  ->  partition  ->  placement manifest  ->  report
                                                 |
                                                 v
                                        train / simulate / export

==========================  =========================================  ======================
function                    does                                       returns
==========================  =========================================  ======================
``import_dataset``          raw files -> prepared dataset              ``PreparedDataset``
``synthesize``              synthetic CTR data -> prepared dataset     ``PreparedDataset``
``load_dataset``            open a prepared dataset                    ``PreparedDataset``
``partition_dataset``       partition, score, write manifest + report  ``Manifest``
``repartition_dataset``     new data on an existing placement          ``Manifest``
``load_manifest``           open (and validate) a manifest             ``Manifest``
``make_report``             the quality report of a manifest           ``gmp.report.Report``
``compare_partitioners``    several partitioners side by side          ``dict`` (gmp.compare)
``train_model``             train WDL / DCN / DeepFM on a placement    ``list`` of epoch records
``simulate_epoch``          count one epoch's pulls / pushes           ``SimulationResult``
``export_torchrec``         TorchRec sharding plan from a manifest     ``TorchRecExport``
==========================  =========================================  ======================

The names are verbs that no submodule of :mod:`gmp` has: ``gmp.partition``,
``gmp.report``, ``gmp.train``, ``gmp.simulate`` and ``gmp.compare`` are
modules, and Python binds a submodule to its package's attribute when it is
imported, so a facade function of the same name would be replaced by the
module the first time anything imported it. Every heavy import (numba,
torch, matplotlib) happens inside the function that needs it, so ``import
gmp`` stays cheap. Errors are :class:`gmp.errors.GmpError` subclasses with
one-line messages; see docs/python.md for a walkthrough.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["import_dataset", "synthesize", "load_dataset", "partition_dataset", "repartition_dataset", "load_manifest",
           "make_report", "compare_partitioners", "train_model", "simulate_epoch", "export_torchrec"]

#: import formats -> the keyword options each one takes beyond the common ones
_CSV_OPTIONS = ("label", "categorical", "multi", "dense", "ignore", "sep", "multi_sep", "label_positive",
                "label_threshold", "dense_transform")
IMPORT_FORMATS: dict[str, tuple[str, ...]] = {
    "criteo": (),
    "avazu": ("split_hour",),
    "movielens": ("rating_threshold", "ignore"),
    "libsvm": (),
    "libfm": (),
    "libffm": (),
    "csv": _CSV_OPTIONS,
    "parquet": _CSV_OPTIONS,
}


def _paths(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    return [Path(p) for p in paths]


def import_dataset(format: str, paths: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike, *,
                   test_paths: str | os.PathLike | Sequence[str | os.PathLike] = (), min_count: int = 1,
                   hash_sizes: Mapping[str, int] | None = None, max_bad_lines: int = 0, test_fraction: float = 0.1,
                   overwrite: bool = False, extend: str | os.PathLike | None = None, **options: Any):
    """Import raw files into a prepared dataset at ``out`` and open it (``gmp data import``).

    Parameters
    ----------
    format
        One of ``criteo``, ``avazu``, ``movielens``, ``libsvm``, ``libfm``,
        ``libffm``, ``csv``, ``parquet``.
    paths
        One input file or a list of them (plain or gzip).
    test_paths
        A provided test split (``--test-input``): the test set is exactly
        their samples, ``test_fraction`` is then not used.
    out
        The prepared dataset's directory.
    min_count, hash_sizes, max_bad_lines, test_fraction, overwrite
        As the CLI's ``--min-count``, ``--hash FIELD=SIZE``,
        ``--max-bad-lines``, ``--test-fraction``, ``--overwrite``.
    extend
        A dataset imported before (e.g. yesterday's; ``--extend``): its values keep their ids and
        new values get ids after its ``num_embeddings``, so a placement of it can take this data
        (:func:`repartition_dataset`).
    **options
        Format options: avazu ``split_hour``; movielens ``rating_threshold``,
        ``ignore``; csv / parquet ``label`` (required), ``categorical``,
        ``multi``, ``dense``, ``ignore`` (lists of column names), ``sep``,
        ``multi_sep``, ``label_positive``, ``label_threshold``,
        ``dense_transform``.

    Returns
    -------
    PreparedDataset

    Examples
    --------
    >>> ds = gmp.import_dataset("criteo", "train.txt.gz", "data/criteo", min_count=10)  # doctest: +SKIP
    """
    from .datasets.importers import CommonOptions
    from .datasets.imports import import_dataset as _import
    from .errors import ImportDataError

    fmt = str(format).lower()
    if fmt not in IMPORT_FORMATS:
        raise ImportDataError(f"import_dataset: format {format!r} is not one of {', '.join(IMPORT_FORMATS)}; "
                              "pass one of those.")
    unknown = sorted(set(options) - set(IMPORT_FORMATS[fmt]))
    if unknown:
        takes = ", ".join(IMPORT_FORMATS[fmt]) or "no format options"
        raise ImportDataError(f"import_dataset: format {fmt!r} does not take {', '.join(unknown)}; it takes: {takes}.")
    common = CommonOptions(min_count=min_count, hash_sizes=dict(hash_sizes or {}), max_bad_lines=max_bad_lines,
                           test_fraction=test_fraction, overwrite=overwrite,
                           extend=None if extend is None else str(extend))
    if fmt in ("csv", "parquet"):
        from .datasets.csvfmt import CsvOptions
        from .datasets.sniff import expand_names
        from .params import comma_list

        for key in ("categorical", "multi", "dense", "ignore"):  # as the CLI: "C1..C26,extra" or a list
            if options.get(key) is not None:
                options[key] = expand_names(comma_list(options[key]))
        options = {"options": CsvOptions(**options)}
    _import(fmt, _paths(paths), out, common=common, test_inputs=_paths(test_paths) if test_paths else (), **options)
    return load_dataset(out)


def synthesize(out: str | os.PathLike, *, preset: str = "criteo-kaggle", num_samples: int | None = None,
               scale: float = 1.0, seed: int = 0, overwrite: bool = False,
               continue_from: str | os.PathLike | None = None, **knobs: Any):
    """Generate a synthetic CTR dataset at ``out`` (``gmp data synth``) and open it.

    ``knobs`` are :class:`gmp.datasets.synth.SynthConfig` fields (``skew``,
    ``tail``, ``num_communities``, ``locality``, ``test_fraction``, ...).

    ``continue_from`` (``--continue``): the day after that synthetic dataset instead: its ids
    stay, new ones are appended, popularity drifts; ``knobs`` then are ``growth``, ``drift``
    and ``test_fraction``, ``num_samples`` defaults to the previous day's and a ``seed`` of 0
    to the first day's (:func:`gmp.datasets.synth_continue.continue_synth`).

    >>> ds = gmp.synthesize("data/tiny", preset="tiny", num_samples=2000)  # doctest: +SKIP
    """
    if continue_from is not None:
        from .datasets.synth_continue import continue_synth
        from .errors import DatasetError

        unknown = sorted(set(knobs) - {"growth", "drift", "test_fraction"})
        if unknown:
            raise DatasetError(f"synthesize: continue_from takes growth, drift and test_fraction, not "
                               f"{', '.join(unknown)}.")
        continue_synth(continue_from, out, num_samples=num_samples, seed=seed or None, overwrite=overwrite, **knobs)
        return load_dataset(out)
    import dataclasses

    from .datasets.synth import SynthConfig, preset_config
    from .datasets.synth import synthesize as _synthesize
    from .errors import DatasetError

    takes = {f.name for f in dataclasses.fields(SynthConfig)} | {"local_min_values"}
    unknown = sorted(set(knobs) - takes)
    if unknown:
        raise DatasetError(f"synthesize: unknown knob(s) {', '.join(unknown)}; SynthConfig takes: "
                           f"{', '.join(sorted(takes))}.")
    config = preset_config(preset, num_samples=num_samples, scale=scale, seed=seed, **knobs)
    _synthesize(config, out, overwrite=overwrite)
    return load_dataset(out)


def load_dataset(path: str | os.PathLike, *, mmap: bool = True):
    """Open a prepared dataset (arrays memory-mapped); see :mod:`gmp.datasets.format`."""
    from .datasets.format import load_dataset as _load

    return _load(path, mmap=mmap)


def load_manifest(path: str | os.PathLike, *, dataset: Any = None):
    """Open and validate a placement manifest; with ``dataset`` (a path or a loaded
    dataset) also check it was made for that dataset. See :mod:`gmp.manifest`."""
    from .manifest import load_manifest as _load

    if isinstance(dataset, (str, os.PathLike)):
        dataset = load_dataset(dataset)
    return _load(path, dataset=dataset)


def _dataset(dataset: Any):
    return load_dataset(dataset) if isinstance(dataset, (str, os.PathLike)) else dataset


def _manifest(manifest: Any, ds: Any):
    """``manifest`` (a path or an opened :class:`gmp.manifest.Manifest`), checked against ``ds`` (None: no
    dataset to check) whichever it is: an opened manifest was checked against nothing when it was opened."""
    from .errors import ManifestError
    from .manifest import Manifest

    if not isinstance(manifest, Manifest):
        if not isinstance(manifest, (str, os.PathLike)):
            raise ManifestError(f"manifest must be a placement manifest (its directory, or gmp.load_manifest(...)), "
                                f"got {type(manifest).__name__}.")
        return load_manifest(manifest, dataset=ds)
    if ds is not None:
        manifest.check_dataset(ds)
    return manifest


def _topology(workers: int | None, topology: Any, inter_cost: float):
    from .errors import TopologyError
    from .params import check_int
    from .topology import Topology, resolve_topology

    if isinstance(topology, Topology):
        return topology
    if workers is not None:
        check_int("workers", workers, minimum=1, error=TopologyError)
    return resolve_topology(workers, None if topology is None else str(topology), None, inter_cost=inter_cost)


def write_scored_manifest(out: str | os.PathLike, ds: Any, graph: Any, placement: Any, topology: Any, *, seed: int,
                          batch_size: int, embedding_dim: int, seconds: float, peak: int, history: Any = None,
                          plots: bool = True, overwrite: bool = False, report_extra: Any = None,
                          manifest_peak: int | None = None) -> dict[str, Any]:
    """Score ``placement`` (:func:`gmp.metrics.compute_metrics`: the random reference, the training range),
    build its report and write the manifest directory ``out`` with ``report.json``, ``report.md`` and,
    with ``plots``, the PNGs; returns the metrics. What every partition path ends with (``gmp partition``
    from scratch, ``--from-manifest``, ``--distributed``).

    ``history`` is the manifest's :class:`gmp.manifest.RowHistory` (default: a placement made from
    scratch, whose trained rows are the ones this data reads); ``report_extra(metrics)`` returns
    more top-level report objects (the incremental comparison); ``manifest_peak`` is the peak RSS the
    manifest records (default ``peak``, the one the metrics record).
    """
    from .manifest import RowHistory, write_manifest
    from .metrics import compute_metrics, embedding_degree
    from .progress import task
    from .report import build_report, dataset_name_of, write_report

    if history is None:
        history = RowHistory.of_degree(embedding_degree(graph))
    with task("Computing metrics (and the random reference)"):
        metrics = compute_metrics(graph, placement, topology, batch_size=batch_size, embedding_dim=embedding_dim,
                                  seed=seed, partition_seconds=seconds, peak_rss_bytes=peak, num_train=ds.num_train)
        report = build_report(placement=placement, topology=topology, metrics=metrics, source="partition",
                              dataset_sha256=ds.sha256, graph=graph, dataset_name=dataset_name_of(ds.meta, ds.path))
        report.update(report_extra(metrics) if report_extra is not None else {})
    with task("Writing manifest and report"):
        write_manifest(out, placement, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                       num_embeddings=ds.num_embeddings, topology=topology, metrics=metrics,
                       report_files=lambda tmp: write_report(tmp, report, formats=("json", "md"), plots=plots,
                                                             placement_secondaries=placement.num_secondaries),
                       partition_seconds=seconds, peak_rss_bytes=peak if manifest_peak is None else manifest_peak,
                       overwrite=overwrite, dataset_name=Path(ds.path).name, history=history)
    return metrics


def partition_dataset(dataset: Any, method: str, out: str | os.PathLike | None = None, *,
                      workers: int | None = None, topology: Any = None, inter_cost: float | None = None,
                      seed: int | None = None, batch_size: int | None = None, embedding_dim: int | None = None,
                      options: Mapping[str, Any] | None = None, overwrite: bool = False, plots: bool = True):
    """Partition a dataset, score it against random and write the manifest directory ``out``
    (manifest, arrays, report.json, report.md and, unless ``plots=False``, the PNGs), like
    ``gmp partition``.

    Parameters
    ----------
    dataset
        A prepared dataset or its path.
    method
        A registered partitioner (``random``, ``metis``, ``hybrid``, ...; see
        ``gmp.partition.PARTITIONERS``).
    workers, topology, inter_cost
        ``workers=8``, or ``topology="2x8"`` / a :class:`gmp.topology.Topology`.
    out
        The manifest directory; None: ``placements/DATASET.METHOD.wN`` (what ``gmp partition`` writes
        without ``--out``).
    options
        The method's Options fields (``{"rounds": 3}``); ``batch_size`` and
        ``embedding_dim`` are passed to methods that take them.

    Every keyword left at None takes the default of ``gmp partition``: seed 0, batch size 512,
    embedding dim 16, inter-machine cost 10 (``workers`` or ``topology`` must still be given).

    Returns
    -------
    Manifest
        The written manifest, opened again (validated).
    """
    from .compare import method_options, peak_rss_bytes, with_field_layout
    from .errors import ManifestError
    from .graph import build_graph
    from .partition import make_options, run_partitioner
    from .progress import task

    from .constants import DEFAULT_BATCH_SIZE, DEFAULT_EMBEDDING_DIM
    from .topology import DEFAULT_INTER_COST

    # None means the default, as for gmp partition's flags left out
    seed = 0 if seed is None else seed
    batch_size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    embedding_dim = DEFAULT_EMBEDDING_DIM if embedding_dim is None else embedding_dim
    inter_cost = DEFAULT_INTER_COST if inter_cost is None else inter_cost
    ds = _dataset(dataset)
    topo = _topology(workers, topology, inter_cost)
    if out is None:
        out = Path("placements") / f"{Path(ds.path).resolve().name}.{method}.w{topo.num_workers}"
    out = Path(out)
    if out.exists() and not overwrite:  # checked before the (possibly long) partitioning
        raise ManifestError(f"partition_dataset: out {out} already exists; pass overwrite=True or another out.")
    opts = method_options(method, dict(options or {}), batch_size=batch_size, embedding_dim=embedding_dim)
    # per_field=True: the fields' first ids; validated here, before the (possibly long) graph and partitioning
    opts = make_options(method, with_field_layout(opts, ds))
    graph = build_graph(ds)
    with task(f"Partitioning {graph.num_samples:,} samples with {method} on {topo.num_workers} workers"):
        t0 = time.perf_counter()
        placement = run_partitioner(method, graph, topo, seed=seed, options=opts)
        seconds = time.perf_counter() - t0
    write_scored_manifest(out, ds, graph, placement, topo, seed=seed, batch_size=batch_size,
                          embedding_dim=embedding_dim, seconds=seconds, peak=peak_rss_bytes(), plots=plots,
                          overwrite=overwrite)
    return load_manifest(out)


def _lineage(ds, old) -> int | None:
    """Generations from ``ds`` up to the dataset ``old`` was made for (0: the same one), or None, with a
    warning: ids are then taken as the same rows on trust (right for days cut from one vocabulary)."""
    import logging

    from .datasets.extend import ancestor_generations
    from .errors import DatasetError

    want = old.dataset_sha256
    try:
        generations = ancestor_generations(ds, want)
    except DatasetError as exc:
        logging.getLogger("gmp").warning("cannot check that %s descends from the dataset of %s: %s", ds.path,
                                         old.path, exc)
        return None
    if generations is None:
        logging.getLogger("gmp").warning(
            "%s was made for dataset %s…, which is neither %s nor one of its ancestors: its ids are taken as the "
            "same rows (import new data with 'gmp data import ... --extend' from the old dataset; fine when both "
            "share one vocabulary)", old.path, want[:12], ds.path)
    return generations


def repartition_dataset(dataset: Any, old_manifest: Any, out: str | os.PathLike, *,
                        max_moved_rows: int | str | None = None, seed: int = 0, batch_size: int | None = None,
                        embedding_dim: int | None = None, options: Mapping[str, Any] | None = None,
                        compare_full: bool = False, overwrite: bool = False, plots: bool = True):
    """New data on an existing placement, scored and written like :func:`partition_dataset`
    (``gmp partition NEW --from-manifest OLD [--max-moved-rows N|P%]``; docs/incremental.md).

    Parameters
    ----------
    dataset
        The new data (a prepared dataset or its path), its ids stable against the old one's
        (``import_dataset(..., extend=OLD)`` or ``synthesize(..., continue_from=OLD)``).
    old_manifest
        The placement to keep (a path or a loaded :class:`gmp.manifest.Manifest`); its workers and
        topology are kept.
    max_moved_rows
        None: place the new samples and ids on the old rows (one pass, nothing moves). A number of
        rows or a percentage of the used rows (``"5%"``): re-partition incrementally moving at most
        that many rows of the old placement.
    batch_size, embedding_dim
        What the placement is scored and planned for; None (the default): the old manifest's plan
        (then 512 and 16 where it has none), so that ``train_model(..., resume=True)`` on the new
        manifest keeps the old run's width.
    options
        :class:`gmp.partition.incremental.Options` fields (``{"rounds": 3}``).
    compare_full
        Also run a full ``hybrid`` re-partition and record its traffic, rows moved and time.

    Returns
    -------
    Manifest
        The written manifest, opened again. ``manifest.meta["info"]["comparison"]`` (and the report's
        ``incremental`` object) holds ``batch_remote_reads`` of the placed data, this placement and the
        full re-partition, the rows and bytes moved and the old ids created afresh.
    """
    import numpy as np

    from ._io import check_output_dir
    from .compare import method_options, peak_rss_bytes
    from .constants import DEFAULT_BATCH_SIZE, DEFAULT_EMBEDDING_DIM
    from .errors import PartitionError
    from .graph import build_graph
    from .manifest import Manifest, RowHistory
    from .metrics import batch_remote_reads, embedding_degree
    from .partition import run_partitioner
    from .partition.incremental import (Options, created_rows, match_workers, migration_budget, moved_rows,
                                        place_and_repartition, place_new_data)
    from .progress import task
    from .seeds import check_seed

    seed = check_seed(seed)
    if max_moved_rows is not None:
        migration_budget(max_moved_rows, 0)  # its form, before the data is read (a percentage's rows come later)
    old = old_manifest if isinstance(old_manifest, Manifest) else load_manifest(old_manifest)
    planned, _ = old.plan.resolve(batch_size=batch_size, embedding_dim=embedding_dim)
    batch_size = DEFAULT_BATCH_SIZE if planned["batch_size"] is None else planned["batch_size"]
    embedding_dim = DEFAULT_EMBEDDING_DIM if planned["embedding_dim"] is None else planned["embedding_dim"]
    ds = _dataset(dataset)
    # checked before the (possibly long) partitioning
    out = check_output_dir(out, kind="gmp.placement", overwrite=overwrite, inputs=[ds.path, old.path], flag="out")
    generations = _lineage(ds, old)
    topo = old.topology
    graph = build_graph(ds)
    given = {"batch_size": batch_size, **dict(options or {})}
    unknown = sorted(set(given) - set(Options.__dataclass_fields__))
    if unknown:
        raise PartitionError(f"option {unknown[0]!r} is not an option of --from-manifest (repartition_dataset); "
                             f"expected one of {', '.join(sorted(Options.__dataclass_fields__))}.")
    opts = Options(**given)
    degree = embedding_degree(graph)  # one pass over the edges, for the used rows and the history
    used = np.flatnonzero(degree)
    # rows no earlier data read are placed like new ids and created, not moved (history: manifest v3)
    trained = None if old.history is None else old.history.trained
    created = created_rows(used, old.placement, trained)
    budget = None if max_moved_rows is None else migration_budget(max_moved_rows, int(used.size))

    t0 = time.perf_counter()
    if budget is None:
        with task(f"Placing {graph.num_samples:,} new samples on {old.path}"):
            placed = placement = place_new_data(graph, old.placement, topo, seed=seed, options=opts, trained=trained)
    else:  # one placement pass for both the "no re-partition" line and the refinement
        with task(f"Placing {graph.num_samples:,} new samples on {old.path} and re-partitioning, "
                  f"at most {budget:,} rows moved"):
            placed, placement = place_and_repartition(graph, old.placement, topo, max_moved_rows=budget, seed=seed,
                                                      options=opts, trained=trained)
    seconds = time.perf_counter() - t0
    peak = peak_rss_bytes()
    moved = moved_rows(old.placement, placement, created=created)
    history = RowHistory.of_degree(degree, parent=old.history, parent_rows=old.num_embeddings, created=created)
    comparison: dict[str, Any] = {
        "old_manifest": str(old.path),
        "old_placement_sha256": old.meta.get("placement_sha256"),
        "max_moved_rows": budget,
        "moved_rows": {"primaries": moved.primaries, "secondaries": moved.secondaries, "total": moved.total,
                       "bytes": moved.bytes(embedding_dim)},
        "embedding_dim": embedding_dim,
        "batch_size": batch_size,
        "num_used_rows": int(used.size),
        "created_rows": int(created.size),
        "generations": generations,
        # "this" is the metrics' batch_remote_reads (filled below: one traffic count, not two)
        "batch_remote_reads": {"no_repartition": None if placed is placement else
                               batch_remote_reads(graph, placed, batch_size), "this": None, "full_repartition": None},
        "seconds": {"this": round(seconds, 4), "full_repartition": None},
    }
    if compare_full:
        with task("Full re-partition (hybrid) for comparison"):
            t2 = time.perf_counter()
            full = run_partitioner("hybrid", graph, topo, seed=seed,
                                   options=method_options("hybrid", {}, batch_size=batch_size,
                                                          embedding_dim=embedding_dim))
            comparison["seconds"]["full_repartition"] = round(time.perf_counter() - t2, 4)
        # a full re-partition numbers its workers arbitrarily: rename them to match the old placement
        # where that changes no cost (uniform off-diagonal cost), and count the rows the new data uses
        cost = np.asarray(topo.cost, dtype=float)
        uniform = bool(np.all(cost[~np.eye(cost.shape[0], dtype=bool)] == cost[0, 1])) if cost.shape[0] > 1 else True
        fm = moved_rows(old.placement, match_workers(old.placement, full) if uniform else full,
                        rows=used, created=created)
        comparison["full_repartition_workers_renamed"] = uniform
        comparison["batch_remote_reads"]["full_repartition"] = batch_remote_reads(graph, full, batch_size)
        comparison["full_repartition_moved_rows"] = {"total": fm.total, "bytes": fm.bytes(embedding_dim)}
    placement.info["comparison"] = comparison  # info is a plain dict: recorded in manifest.json

    def incremental(metrics: dict[str, Any]) -> dict[str, Any]:
        reads = comparison["batch_remote_reads"]
        reads["this"] = metrics["batch_remote_reads"]
        if placed is placement:
            reads["no_repartition"] = reads["this"]
        return {"incremental": comparison}

    write_scored_manifest(out, ds, graph, placement, topo, seed=seed, batch_size=batch_size,
                          embedding_dim=embedding_dim, seconds=seconds, peak=peak, history=history, plots=plots,
                          overwrite=overwrite, report_extra=incremental)
    return load_manifest(out)


def make_report(manifest: Any, *, dataset: Any = None, batch_size: int | None = None,
                embedding_dim: int | None = None, out: str | os.PathLike | None = None,
                formats: Sequence[str] = ("md", "html"), plots: bool = True):
    """The quality report of a manifest (``gmp report``).

    Without ``dataset`` the stored report.json is re-rendered (after checking
    it against the arrays); with it every metric is recomputed. With ``out``
    the report files (``report.md``, ``report.html``, ``report.json``, PNGs)
    are written there too.

    Returns
    -------
    gmp.report.Report
        ``.data`` (the report.json dict), ``.markdown()``, ``.html()``,
        ``.headline``; shown as rendered Markdown in a notebook.
    """
    from .params import comma_list
    from .report import Report, report_from_manifest, write_report

    ds = _dataset(dataset) if dataset is not None else None
    m = _manifest(manifest, ds)
    data = report_from_manifest(m, dataset=ds, batch_size=batch_size, embedding_dim=embedding_dim)
    if out is not None:
        write_report(out, data, formats=comma_list(formats), plots=plots)
    return Report(data)


def compare_partitioners(dataset: Any, methods: Sequence[str], *, workers: int | None = None, topology: Any = None,
                         inter_cost: float = 10.0, seed: int = 0, batch_size: int = 512, embedding_dim: int = 16,
                         options: Mapping[str, Mapping[str, Any]] | None = None, isolate: bool = False):
    """Run several partitioners on one dataset and score each against random (``gmp compare``).

    Returns the ``gmp.compare`` dict; ``gmp.compare.comparison_tables`` and
    ``render_comparison_html`` render it. ``isolate=True`` runs each method in
    its own process (peak memory per method; slower to start).
    """
    from .compare import compare
    from .graph import build_graph
    from .params import comma_list
    from .report import dataset_name_of

    ds = _dataset(dataset)
    topo = _topology(workers, topology, inter_cost)
    return compare(build_graph(ds), topo, comma_list(methods), seed=seed, batch_size=batch_size,
                   embedding_dim=embedding_dim, options=options, dataset_path=ds.path if isolate else None,
                   isolate=isolate, dataset_name=dataset_name_of(ds.meta, ds.path))


def train_model(dataset: Any, manifest: Any = None, *, engine: str = "local",
                workers: int | None = None, checkpoint_dir: str | os.PathLike | None = None, resume: bool = False,
                log_json: str | os.PathLike | None = None, **config: Any) -> list[dict[str, Any]]:
    """Train a CTR model with a manifest's placement (``gmp train``); returns the epoch records.

    ``config`` are :class:`gmp.train.TrainConfig` fields: ``model``
    (wdl | dcn | deepfm), ``epochs``, ``batch_size``, ``lr``, ``optimizer``,
    ``embedding_dim``, ``staleness``, ``schedule``, ``shuffle``, ``seed``, ...;
    with ``schedule="herald"`` also the :class:`gmp.train.herald.HeraldOptions`
    fields (``on_demand``, ``cache_rows``, ``cache_policy``, ``lookahead``,
    ``read_only_replicas``) directly.
    """
    import dataclasses

    from .errors import TrainingError
    from .train import TrainConfig, train
    from .train.herald import HeraldOptions

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    herald_fields = {f.name for f in dataclasses.fields(HeraldOptions)}
    unknown = sorted(set(config) - fields - herald_fields)
    if unknown:
        raise TrainingError(f"train_model: unknown option(s) {', '.join(unknown)}; TrainConfig takes: "
                            f"{', '.join(sorted(fields | herald_fields))}.")
    herald = {k: config.pop(k) for k in list(config) if k in herald_fields}
    if herald:
        config["herald"] = HeraldOptions.for_trainer(**herald)  # gmp train's defaults
    # gmp.train.train opens both itself (verified, memory-mapped): an opened object gives its path
    dataset, manifest = (getattr(x, "path", x) for x in (dataset, manifest))
    return train(dataset, manifest, TrainConfig(**config), engine=engine, workers=workers,
                 checkpoint_dir=checkpoint_dir, resume=resume, log_json=log_json)


def simulate_epoch(dataset: Any, manifest: Any = None, *, workers: int | None = None,
                   batch_size: int | None = None, seed: int = 0, **options: Any):
    """Replay one training epoch under a runtime schedule and count pulls and pushes (``gmp simulate``).

    Without ``manifest`` the rows are placed at random over ``workers``.
    ``batch_size`` defaults to the manifest's plan (else ``gmp.constants.DEFAULT_BATCH_SIZE``).
    ``options`` are :func:`gmp.simulate.simulate` keywords (``schedule``,
    ``embedding_dim``, ...) and :class:`gmp.train.herald.HeraldOptions` fields
    (``on_demand``, ``cache_rows``, ``cache_policy``, ``lookahead``, ``read_only_replicas``),
    which override :meth:`HeraldOptions.for_simulator`'s defaults (Herald's paper).
    Returns a :class:`gmp.simulate.SimulationResult` (``.to_json()`` for every count).
    """
    from .errors import TrainingError
    from .simulate import simulate

    ds = _dataset(dataset)
    if manifest is None:
        from .graph import build_graph
        from .partition import run_partitioner
        from .topology import homogeneous

        if workers is None:
            raise TrainingError("simulate_epoch: without a manifest, workers is required (rows are then placed "
                                "at random); pass workers=N or a manifest.")
        placement = run_partitioner("random", build_graph(ds), homogeneous(workers), seed=seed)
    else:
        m = _manifest(manifest, ds)
        placement = m.placement
        if workers is not None and workers != placement.num_workers:
            raise TrainingError(f"simulate_epoch: workers={workers} does not match the manifest's "
                                f"{placement.num_workers} workers; drop workers or pass another manifest.")
    import dataclasses

    import numpy as np

    from .constants import DEFAULT_BATCH_SIZE
    from .simulate import simulator_options
    from .train.herald import HeraldOptions

    if batch_size is None:
        plan = m.plan.batch_size if manifest is not None else None
        batch_size = plan or DEFAULT_BATCH_SIZE
    herald_fields = {f.name for f in dataclasses.fields(HeraldOptions)}
    takes = {"schedule", "shuffle", "epoch", "embedding_dim", "parameter_server", "min_frequency", "order"}
    unknown = sorted(set(options) - takes - herald_fields)
    if unknown:
        raise TrainingError(f"simulate_epoch: unknown option(s) {', '.join(unknown)}; it takes: "
                            f"{', '.join(sorted(takes | herald_fields))}.")
    overrides = {k: options.pop(k) for k in list(options) if k in herald_fields}
    if overrides:
        schedule = options.get("schedule", "herald")
        active = int(np.count_nonzero(np.bincount(np.asarray(ds.indices[:int(ds.indptr[ds.num_train])]),
                                                  minlength=ds.num_embeddings)))
        options["options"] = simulator_options(schedule, active, **overrides)
    return simulate(ds.indptr, ds.indices, placement, num_train=ds.num_train, batch_size=batch_size, seed=seed,
                    **options)


def export_torchrec(manifest: Any, out: str | os.PathLike, *, dataset: Any = None, **options: Any):
    """Write a TorchRec sharding plan for a manifest (``gmp export torchrec``); see :mod:`gmp.export.torchrec`."""
    from .export.torchrec import export_torchrec as _export

    return _export(manifest, out, dataset=dataset, **options)
