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

__all__ = ["import_dataset", "synthesize", "load_dataset", "partition_dataset", "load_manifest", "make_report",
           "compare_partitioners", "train_model", "simulate_epoch", "export_torchrec"]

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
                   overwrite: bool = False, **options: Any):
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
                           test_fraction=test_fraction, overwrite=overwrite)
    if fmt in ("csv", "parquet"):
        from .datasets.csvfmt import CsvOptions

        options = {"options": CsvOptions(**options)}
    _import(fmt, _paths(paths), out, common=common, test_inputs=_paths(test_paths) if test_paths else (), **options)
    return load_dataset(out)


def synthesize(out: str | os.PathLike, *, preset: str = "criteo-kaggle", num_samples: int | None = None,
               scale: float = 1.0, seed: int = 0, overwrite: bool = False, **knobs: Any):
    """Generate a synthetic CTR dataset at ``out`` (``gmp data synth``) and open it.

    ``knobs`` are :class:`gmp.datasets.synth.SynthConfig` fields (``skew``,
    ``tail``, ``num_communities``, ``locality``, ``test_fraction``, ...).

    >>> ds = gmp.synthesize("data/tiny", preset="tiny", num_samples=2000)  # doctest: +SKIP
    """
    from .datasets.synth import preset_config
    from .datasets.synth import synthesize as _synthesize

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


def _topology(workers: int | None, topology: Any, inter_cost: float):
    from .topology import Topology, resolve_topology

    if isinstance(topology, Topology):
        return topology
    return resolve_topology(workers, None if topology is None else str(topology), None, inter_cost=inter_cost)


def partition_dataset(dataset: Any, method: str, out: str | os.PathLike, *, workers: int | None = None,
                      topology: Any = None, inter_cost: float = 10.0, seed: int = 0, batch_size: int = 512,
                      embedding_dim: int = 16, options: Mapping[str, Any] | None = None, overwrite: bool = False,
                      plots: bool = True):
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
    options
        The method's Options fields (``{"rounds": 3}``); ``batch_size`` and
        ``embedding_dim`` are passed to methods that take them.

    Returns
    -------
    Manifest
        The written manifest, opened again (validated).
    """
    from .compare import method_options, peak_rss_bytes, with_field_layout
    from .errors import ManifestError
    from .graph import build_graph
    from .manifest import RowHistory, write_manifest
    from .metrics import compute_metrics, embedding_degree
    from .partition import run_partitioner
    from .report import build_report, dataset_name_of, write_report

    out = Path(out)
    if out.exists() and not overwrite:  # checked before the (possibly long) partitioning
        raise ManifestError(f"partition_dataset: out {out} already exists; pass overwrite=True or another out.")
    ds = _dataset(dataset)
    topo = _topology(workers, topology, inter_cost)
    opts = method_options(method, dict(options or {}), batch_size=batch_size, embedding_dim=embedding_dim)
    opts = with_field_layout(opts, ds)
    graph = build_graph(ds)
    t0 = time.perf_counter()
    placement = run_partitioner(method, graph, topo, seed=seed, options=opts)
    seconds = time.perf_counter() - t0
    peak = peak_rss_bytes()
    metrics = compute_metrics(graph, placement, topo, batch_size=batch_size, embedding_dim=embedding_dim, seed=seed,
                              partition_seconds=seconds, peak_rss_bytes=peak, num_train=ds.num_train)
    report = build_report(placement=placement, topology=topo, metrics=metrics, source="partition",
                          dataset_sha256=ds.sha256, graph=graph, dataset_name=dataset_name_of(ds.meta, ds.path))
    write_manifest(out, placement, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                   num_embeddings=ds.num_embeddings, topology=topo, metrics=metrics,
                   report_files=lambda tmp: write_report(tmp, report, formats=("json", "md"), plots=plots),
                   partition_seconds=seconds, peak_rss_bytes=peak, overwrite=overwrite,
                   dataset_name=Path(ds.path).name, history=RowHistory.of_degree(embedding_degree(graph)))
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
    from .manifest import Manifest
    from .report import Report, report_from_manifest, write_report

    ds = _dataset(dataset) if dataset is not None else None
    m = manifest if isinstance(manifest, Manifest) else load_manifest(manifest, dataset=ds)
    data = report_from_manifest(m, dataset=ds, batch_size=batch_size, embedding_dim=embedding_dim)
    if out is not None:
        write_report(out, data, formats=formats, plots=plots)
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
    from .report import dataset_name_of

    ds = _dataset(dataset)
    topo = _topology(workers, topology, inter_cost)
    return compare(build_graph(ds), topo, list(methods), seed=seed, batch_size=batch_size,
                   embedding_dim=embedding_dim, options=options, dataset_path=ds.path if isolate else None,
                   isolate=isolate, dataset_name=dataset_name_of(ds.meta, ds.path))


def train_model(dataset: str | os.PathLike, manifest: str | os.PathLike | None = None, *, engine: str = "local",
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
        config["herald"] = HeraldOptions(**herald)
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
    from .manifest import Manifest
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
        m = manifest if isinstance(manifest, Manifest) else load_manifest(manifest, dataset=ds)
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
