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

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from ._io import release_claim
from .params import param_error

_log = logging.getLogger("gmp")

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


# ------------------------------------------------------------------ the keywords' types, checked at the door
# The resolvers (gmp.specs) check what the command line can give; a Python caller can also give what no flag
# can (a list for a mapping, 'no' for a bool, an int for a path): refused here, in gmp.params' wording, so
# the call fails in one line before anything is read instead of deep inside with a builtin's error.
def _check_bools(error: type, **values: Any) -> None:
    """Each keyword a bool: ``"no"`` or ``1`` is refused, not taken as true or false (None: left at its default,
    for the keywords whose default is None)."""
    from .params import check_bool

    for name, value in values.items():
        if value is not None:
            check_bool(name, value, error=error)


def _check_path(name: str, value: Any, error: type, what: str) -> None:
    if not isinstance(value, (str, os.PathLike)):
        raise param_error(error, name, f"The '{name}' parameter must be {what} (a str or os.PathLike), got "
                                    f"{type(value).__name__}.")


def _check_options(options: Any, error: type, *, per_method: bool = False) -> None:
    """``options`` None or a mapping of option names to values (``per_method``: of method names to such
    mappings), as ``-O KEY=VALUE`` gives them; a list of ``"key=value"`` strings is refused, not misread."""
    if options is None:
        return
    if per_method:  # a key that is no method is the resolver's to name ("not among the methods")
        from .partition import PARTITIONERS

        expected = "a mapping of method names to mappings of their options (e.g. {'hybrid': {'rounds': 3}})"
        if isinstance(options, Mapping) and all(isinstance(v, Mapping) for k, v in options.items()
                                                if k in PARTITIONERS):
            return
    else:
        expected = "a mapping of option names to values (e.g. {'rounds': 3})"
        if isinstance(options, Mapping):
            return
    shown = repr(options)
    raise param_error(error, "options", f"The 'options' parameter must be {expected}, got "
                                     f"{shown if len(shown) <= 60 else shown[:60] + '…'}.")


def import_dataset(format: str | None, paths: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike, *,
                   test_paths: str | os.PathLike | Sequence[str | os.PathLike] = (), min_count: int = 1,
                   hash_sizes: Mapping[str, int] | None = None, max_bad_lines: int = 0, test_fraction: float = 0.1,
                   overwrite: bool = False, extend: str | os.PathLike | None = None, **options: Any):
    """Import raw files into a prepared dataset at ``out`` and open it (``gmp data import``).

    Parameters
    ----------
    format
        One of ``criteo``, ``avazu``, ``movielens``, ``libsvm``, ``libfm``,
        ``libffm``, ``csv``, ``parquet``; ``None``: recognised from the first input, as
        ``gmp data import`` does (csv/Parquet: the label and dense columns too, when not given).
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
    from .datasets.dispatch import ColumnChoice
    from .datasets.sniff import expand_names
    from .errors import ImportDataError
    from .params import comma_list
    from .specs import resolve_import

    _check_bools(ImportDataError, overwrite=overwrite)
    fmt = None if format is None else str(format).lower()
    if fmt is not None and fmt not in IMPORT_FORMATS:
        raise ImportDataError(f"import_dataset: format {format!r} is not one of {', '.join(IMPORT_FORMATS)}; "
                              "pass one of those, or None to have the first input recognised.")
    takes = IMPORT_FORMATS[fmt] if fmt is not None else tuple(sorted({o for v in IMPORT_FORMATS.values() for o in v}))
    unknown = sorted(set(options) - set(takes))
    if unknown:
        said = ", ".join(takes) or "no format options"
        raise ImportDataError(f"import_dataset: format {fmt!r} does not take {', '.join(unknown)}; it takes: {said}.")

    def names(key: str) -> tuple[str, ...] | None:  # as the CLI: "C1..C26,extra" or a list
        value = options.get(key)
        return None if value is None else tuple(expand_names(comma_list(value)))

    columns = ColumnChoice(label=options.get("label"), label_positive=options.get("label_positive"),
                           label_threshold=options.get("label_threshold"), categorical=names("categorical"),
                           multi=names("multi") or (), multi_sep=options.get("multi_sep", "|"), dense=names("dense"),
                           dense_transform=options.get("dense_transform", "log1p"), ignore=names("ignore") or (),
                           sep=options.get("sep"))
    spec = resolve_import(fmt, _paths(paths), out, test_inputs=_paths(test_paths) if test_paths else (),
                          min_count=min_count, hash_sizes=hash_sizes, max_bad_lines=max_bad_lines,
                          test_fraction=test_fraction, overwrite=overwrite, extend=extend,
                          split_hour=options.get("split_hour"), rating_threshold=options.get("rating_threshold"),
                          columns=columns)
    run_import(spec)
    return load_dataset(out)


def run_import(spec: Any) -> dict[str, Any]:
    """Run a resolved :class:`gmp.specs.ImportSpec` (``gmp data import`` and :func:`import_dataset`);
    returns the written ``dataset.json`` header."""
    from .datasets.dispatch import import_dataset as _import

    return _import(spec.format, list(spec.inputs), spec.out, common=spec.common, test_inputs=spec.test_inputs,
                   **spec.format_options)


def synthesize(out: str | os.PathLike, *, preset: str | None = None, num_samples: int | None = None,
               scale: float | None = None, seed: int = 0, overwrite: bool = False,
               continue_from: str | os.PathLike | None = None, like: str | os.PathLike | None = None,
               min_count: int = 1, chunk_samples: int = 1 << 18, **knobs: Any):
    """Generate a synthetic CTR dataset at ``out`` (``gmp data synth``) and open it.

    ``preset`` defaults to ``criteo-kaggle`` at ``scale`` 1.0; ``like`` fits the latent-entity model
    to that prepared dataset instead (``--like``); ``min_count`` cuts values seen fewer times as
    import does. ``knobs`` are :class:`gmp.datasets.synth.SynthConfig` fields (``skew``, ``tail``,
    ``num_communities``, ``locality``, ``test_fraction``, ...).

    ``continue_from`` (``--continue``): the day after that synthetic dataset instead: its ids
    stay, new ones are appended, popularity drifts; ``knobs`` then are ``growth``, ``drift``
    and ``test_fraction``, ``num_samples`` defaults to the previous day's and a ``seed`` of 0
    to the first day's (:func:`gmp.datasets.synth_continue.continue_synth`).

    Resolved by :func:`gmp.specs.resolve_synth` and run by :func:`run_synth`, as the command is.

    >>> ds = gmp.synthesize("data/tiny", preset="tiny", num_samples=2000)  # doctest: +SKIP
    """
    from .errors import DatasetError
    from .specs import resolve_synth

    _check_bools(DatasetError, overwrite=overwrite)
    spec = resolve_synth(out, preset=preset, like=like, num_samples=num_samples, scale=scale, seed=seed,
                         min_count=min_count, chunk_samples=chunk_samples, overwrite=overwrite,
                         continue_from=continue_from, **knobs)
    run_synth(spec)
    return load_dataset(out)


def run_synth(spec: Any) -> dict[str, Any]:
    """Run a resolved :class:`gmp.specs.SynthSpec` (``gmp data synth`` and :func:`synthesize`); returns
    the written ``dataset.json`` header. ``out`` is claimed before any input is read (``like``: the
    dataset the model is fitted to), and released when the run fails."""
    from ._io import check_disk, check_output_dir
    from .datasets.format import DATASET_FILES

    check_output_dir(spec.out, kind="gmp.dataset", overwrite=spec.overwrite, own=DATASET_FILES,
                     inputs=[p for p in (spec.continue_from, spec.like) if p is not None])
    try:
        if spec.continue_from is not None:
            from .datasets.synth_continue import continue_synth

            return continue_synth(spec.continue_from, spec.out, overwrite=spec.overwrite, **spec.day)
        from .datasets.synth import synthesize as _synthesize

        config = spec.config
        if config is None:  # --like: the model fitted to that dataset, the request's knobs on top
            import dataclasses

            from .datasets.format import load_dataset as _load
            from .datasets.synth_fit import like_config

            fit = like_config(_load(spec.like), num_samples=spec.num_samples, seed=spec.seed)
            config = dataclasses.replace(fit.config, test_fraction=spec.test_fraction, **spec.knobs)
        # the arrays (ids, row pointers, labels, dense) plus their raw temporaries, before any is written
        per_sample = 4 * len(config.cardinalities) + 8 + 4 + 4 * config.num_dense
        check_disk(spec.out, 2 * per_sample * config.num_samples, what=f"`num_samples` {config.num_samples:,}",
                   fix="lower `num_samples` or choose another `out`.")
        return _synthesize(config, spec.out, chunk_samples=spec.chunk_samples, overwrite=spec.overwrite,
                           min_count=spec.min_count)
    except BaseException:  # a failed call leaves out unclaimed: a notebook may call it again
        release_claim(spec.out)
        raise


def dataset_info(path: str | os.PathLike) -> dict[str, Any]:
    """Counts, per-field cardinalities and degree skew of a prepared dataset (``gmp data info``)."""
    import numpy as np

    from .datasets.format import load_dataset
    from .graph import build_graph

    ds = load_dataset(path)
    graph = build_graph(ds)
    stats = graph.stats().to_json()
    deg = graph.embedding_degree()
    fields = []
    for f in ds.fields:
        row: dict[str, Any] = {"name": f.name, "kind": f.kind}
        if f.kind == "dense":
            row.update(column=f.column)
        else:
            d = np.asarray(deg[f.ids()])  # the field's ids (several ranges once extended)
            active = d[d > 0]
            k = max(1, int(np.ceil(active.size * 0.01))) if active.size else 0
            top = float(np.sort(active)[-k:].sum() / active.sum()) if active.size else 0.0
            missing = int(deg[f.missing_id]) if f.missing_id is not None else None
            rare = int(deg[f.rare_id]) if f.rare_id is not None else None
            row.update(num_values=f.num_values, offset=f.offset, num_active=int(active.size),
                       max_degree=int(d.max()) if d.size else 0, top1pct_access_share=top,
                       missing_accesses=missing, rare_accesses=rare, hash_buckets=f.hash_buckets)
        fields.append(row)
    meta = ds.meta
    return {
        "path": str(path),
        "source": meta.get("source", {}),
        "num_samples": ds.num_samples,
        "num_train": ds.num_train,
        "num_test": ds.num_test,
        "num_embeddings": ds.num_embeddings,
        "num_edges": ds.num_edges,
        "num_dense": ds.num_dense,
        "label_rate": meta.get("label_rate"),
        "num_bad_lines": meta.get("num_bad_lines", 0),
        "sha256": ds.sha256,
        "graph": stats,
        "fields": fields,
    }


def load_dataset(path: str | os.PathLike, *, mmap: bool = True):
    """Open a prepared dataset (arrays memory-mapped); see :mod:`gmp.datasets.format`."""
    from .datasets.format import load_dataset as _load
    from .errors import DatasetError

    _check_path("path", path, DatasetError, "a prepared dataset's directory")
    _check_bools(DatasetError, mmap=mmap)
    return _load(path, mmap=mmap)


def load_manifest(path: str | os.PathLike, *, dataset: Any = None):
    """Open and validate a placement manifest; with ``dataset`` (a path or a loaded
    dataset) also check it was made for that dataset. See :mod:`gmp.manifest`."""
    from .errors import ManifestError
    from .manifest import load_manifest as _load

    _check_path("path", path, ManifestError, "a placement manifest's directory")
    return _load(path, dataset=None if dataset is None else _dataset(dataset))


def _check_dataset(dataset: Any) -> None:
    """``dataset`` a path or an opened :class:`gmp.datasets.format.PreparedDataset` (not opened here)."""
    from .datasets.format import PreparedDataset
    from .errors import DatasetError

    if not isinstance(dataset, (str, os.PathLike, PreparedDataset)):
        raise param_error(DatasetError, "dataset", f"dataset must be a prepared dataset (its directory, or "
                                                f"gmp.load_dataset(...)), got {type(dataset).__name__}.")


def _dataset(dataset: Any):
    """``dataset`` (a path or an opened :class:`gmp.datasets.format.PreparedDataset`), opened."""
    _check_dataset(dataset)
    return load_dataset(dataset) if isinstance(dataset, (str, os.PathLike)) else dataset


def _check_manifest(manifest: Any, name: str = "manifest") -> None:
    """``manifest`` (the keyword ``name``) a path or an opened :class:`gmp.manifest.Manifest` (not opened here)."""
    from .errors import ManifestError
    from .manifest import Manifest

    if not isinstance(manifest, (str, os.PathLike, Manifest)):
        raise param_error(ManifestError, name, f"{name} must be a placement manifest (its directory, or "
                                            f"gmp.load_manifest(...)), got {type(manifest).__name__}.")


def _manifest(manifest: Any, ds: Any):
    """``manifest`` (a path or an opened :class:`gmp.manifest.Manifest`), checked against ``ds`` (None: no
    dataset to check) whichever it is: an opened manifest was checked against nothing when it was opened."""
    from .manifest import Manifest

    _check_manifest(manifest)
    if not isinstance(manifest, Manifest):
        return load_manifest(manifest, dataset=ds)
    if ds is not None:
        manifest.check_dataset(ds)
    return manifest


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


def partition_dataset(dataset: Any, method: str | None = None, out: str | os.PathLike | None = None, *,
                      workers: int | None = None, topology: Any = None, inter_cost: float | None = None,
                      seed: int | None = None, batch_size: int | None = None, embedding_dim: int | None = None,
                      options: Mapping[str, Any] | None = None, overwrite: bool = False, plots: bool = True,
                      distributed: bool = False, chunk_samples: int | None = None,
                      block_samples: int | None = None):
    """Partition a dataset, score it against random and write the manifest directory ``out``
    (manifest, arrays, report.json, report.md and, unless ``plots=False``, the PNGs), like
    ``gmp partition``.

    Parameters
    ----------
    dataset
        A prepared dataset or its path.
    method
        A registered partitioner (``random``, ``metis``, ``hybrid``, ...; see
        ``gmp.partition.PARTITIONERS``); None (default): ``hybrid``.
    workers, topology, inter_cost
        ``workers=8``, or ``topology="2x8"`` / a :class:`gmp.topology.Topology`.
    out
        The manifest directory; None: ``placements/DATASET.METHOD.wN`` (what ``gmp partition`` writes
        without ``--out``).
    options
        The method's Options fields (``{"rounds": 3}``); ``batch_size`` and
        ``embedding_dim`` are passed to methods that take them.

    distributed, chunk_samples, block_samples
        ``distributed=True``: the hybrid across the processes of torchrun (``gmp partition --distributed``;
        call it on every process: each reads its slice of the samples, rank 0 writes the manifest and gets
        it back, the others get None); the process group is started and closed here. ``chunk_samples``:
        the hybrid streamed from disk that many samples at a time; ``block_samples``: the samples each
        process sweeps between two exchanges (default 1024). ``method`` may then be left out (``hybrid``).

    Every keyword left at None takes the default of ``gmp partition``: seed 0, batch size 512,
    embedding dim 16, inter-machine cost 10 (``workers`` or ``topology`` must still be given).
    Resolved by :func:`gmp.specs.resolve_partition`, as the command is.

    Returns
    -------
    Manifest
        The written manifest, opened again (validated); None on the ranks other than 0 of ``distributed``.
    """
    from .errors import PartitionError
    from .launch import refusals_told
    from .specs import resolve_partition

    with refusals_told(distributed is True):  # a refusal before the join reaches the peers (gmp.launch)
        _check_dataset(dataset)
        _check_options(options, PartitionError)
        _check_bools(PartitionError, overwrite=overwrite, plots=plots, distributed=distributed)
        spec = resolve_partition(dataset, method, out, workers=workers, topology=topology, inter_cost=inter_cost,
                                 seed=seed, batch_size=batch_size, embedding_dim=embedding_dim, options=options,
                                 distributed=distributed, chunk_samples=chunk_samples, block_samples=block_samples,
                                 overwrite=overwrite, plots=plots)
        return run_partition(spec, dataset=dataset)


def run_partition(spec: Any, *, dataset: Any = None):
    """Run a resolved :class:`gmp.specs.PartitionSpec` (what :func:`partition_dataset`,
    :func:`repartition_dataset` and ``gmp partition`` do after resolving): the written manifest, opened
    again (None on the ranks other than 0 of a distributed run). ``dataset``: the opened dataset, if the
    caller has it (else ``spec.dataset`` is opened)."""
    from ._memory import is_out_of_memory

    ds = dataset if dataset is not None and not isinstance(dataset, (str, os.PathLike)) else None
    try:
        if spec.mode == "incremental":
            return _repartition(spec, ds)
        if spec.mode in ("distributed", "chunked"):
            return _partition_streamed(spec)
        return _partition(spec, ds)
    except BaseException as exc:  # a failed call leaves out unclaimed: a notebook may call it again
        release_claim(spec.out)
        if is_out_of_memory(exc):  # past the check before work (an estimate; an address-space limit)
            raise _partition_memory_error(spec, exc) from None
        raise


#: from about this many samples the out-of-core hybrid (``chunk_samples``, one process) peaks below the in-memory
#: run: criteo-kaggle, 8 workers, ``/usr/bin/time -v``: 1M 2.05 against 1.87 GiB, 5M 3.51 against 3.52 GiB,
#: full size 14.15 against 17.08 GiB (docs/distributed.md, "Out of core: when it saves memory")
OUT_OF_CORE_SAVES_FROM = 5_000_000


def _chunk_hint(num_samples: int) -> int:
    """The ``chunk_samples`` a refusal of the in-memory hybrid suggests: a quarter of the samples, at most 2M."""
    return max(1, min(2_000_000, int(num_samples) // 4))


def _out_of_core_advice(num_samples: int) -> str:
    """What a refusal of the in-memory hybrid says of the out-of-core path: take it where it saves memory; below
    :data:`OUT_OF_CORE_SAVES_FROM` samples it needs as much or more, so say that instead of sending people to it."""
    where = 'docs/distributed.md, "Out of core: when it saves memory"'
    if num_samples >= OUT_OF_CORE_SAVES_FROM:
        return (f"partition out of core with `chunk_samples` {_chunk_hint(num_samples)} (the same hybrid streamed "
                f"in blocks, slower; {where})")
    return (f"out of core (`chunk_samples`) needs as much memory or more below {OUT_OF_CORE_SAVES_FROM:,} samples "
            f"({where}): use fewer `workers` or a machine with more memory")


def _partition_memory_error(spec: Any, exc: BaseException):
    """The one line for an allocation that failed while partitioning: what ran out (METIS says its own),
    the memory available now and what to change for this mode."""
    from ._memory import available_text
    from .errors import GmpError, OutOfMemory

    cause = f" ({exc})" if isinstance(exc, GmpError) else ""
    try:
        num_samples = int(load_dataset(spec.dataset).num_samples)
    except Exception:  # noqa: BLE001 - the line must still be said
        num_samples = None
    samples = f" {num_samples:,} samples" if num_samples is not None else ""
    workers = getattr(spec.topology, "num_workers", None)
    on = f" on {workers} workers" if workers else ""
    what = f"out of memory partitioning{samples} with {spec.method}{on}{cause}; {available_text()}"
    if spec.mode == "chunked":
        fix = (f"a smaller `chunk_samples` (now {spec.chunk_samples:,}) bounds only the streamed block, not the "
               f"per-row state (docs/distributed.md, \"Out of core: when it saves memory\"): use fewer `workers`, a "
               f"smaller dataset or a machine with more memory")
    elif spec.mode == "distributed":
        fix = "start more processes (on more machines), use fewer `workers`, or give each process more memory"
    elif spec.method == "hybrid" and num_samples is not None:
        fix = f"{_out_of_core_advice(num_samples)}, or free memory"
    else:
        fix = "use fewer `workers`, a smaller dataset or a machine with more memory"
    return OutOfMemory(f"{what}; {fix}.")


def _partition(spec: Any, ds: Any):
    """From scratch in this process (``spec.mode == "scratch"``)."""
    from ._io import check_output_dir
    from .compare import method_options, peak_rss_bytes, with_field_layout
    from .graph import build_graph
    from .manifest import MANIFEST_FILES
    from .partition import make_options, run_partitioner
    from .progress import task

    method, topo, seed = spec.method, spec.topology, spec.seed
    batch_size, embedding_dim, out, overwrite = spec.batch_size, spec.embedding_dim, spec.out, spec.overwrite
    # checked before the (possibly long) partitioning
    check_output_dir(out, kind="gmp.placement", overwrite=overwrite, inputs=[spec.dataset], flag="`out`",
                     own=MANIFEST_FILES)
    _load_partitioner(method)
    ds = ds if ds is not None else load_dataset(spec.dataset)
    opts = method_options(method, dict(spec.options), batch_size=batch_size, embedding_dim=embedding_dim)
    # per_field=True: the fields' first ids; validated here, before the (possibly long) graph and partitioning
    opts = make_options(method, with_field_layout(opts, ds))
    if method == "hybrid":
        _check_hybrid_memory(ds, topo.num_workers, opts)
    _check_manifest_room(out, ds)
    graph = build_graph(ds)
    with task(f"Partitioning {graph.num_samples:,} samples with {method} on {topo.num_workers} workers"):
        t0 = time.perf_counter()
        placement = run_partitioner(method, graph, topo, seed=seed, options=opts)
        seconds = time.perf_counter() - t0
    write_scored_manifest(out, ds, graph, placement, topo, seed=seed, batch_size=batch_size,
                          embedding_dim=embedding_dim, seconds=seconds, peak=peak_rss_bytes(), plots=spec.plots,
                          overwrite=overwrite)
    return load_manifest(out)


def _check_hybrid_memory(ds: Any, num_workers: int, options: Any) -> None:
    """Refuse an in-memory hybrid run whose estimated peak (from the header, before any array is read)
    exceeds the memory available now (the host's, capped by the memory cgroup): one line naming the
    estimate, the memory available and the out-of-core path (``chunk_samples``)."""
    from ._memory import available_memory, check_memory
    from .errors import PartitionError
    from .partition.hybrid import BASE_BYTES, count_used_rows, peak_memory_bytes

    # the estimate counts the process itself (BASE_BYTES), which holds part of that already (its resident
    # set now, not its peak: hashing the arrays touched their mapped pages)
    try:
        import psutil  # noqa: PLC0415 - a dependency of gmp, optional as in gmp._memory

        held = min(BASE_BYTES, psutil.Process().memory_info().rss)
    except ImportError:  # pragma: no cover
        held = 0

    def need_of(peak: int) -> int:
        return max(0, peak - held)

    header = (ds.num_samples, ds.num_edges, ds.num_embeddings, num_workers, options)
    peak = peak_memory_bytes(*header, field_sizes=[f.num_values for f in ds.categorical_fields])
    available = available_memory()
    if need_of(peak) > available and need_of(peak_memory_bytes(*header, used_rows=0)) <= available:
        # the header bounds the rows used (1.4x high on a 5M draw) and the run may fit with fewer: count them
        # (one pass over the ids; skipped where even no used row would fit) before refusing
        peak = peak_memory_bytes(*header, used_rows=count_used_rows(ds.indices, ds.num_embeddings))
    need = need_of(peak)
    check_memory(need, error=PartitionError,
                 param="chunk_samples" if ds.num_samples >= OUT_OF_CORE_SAVES_FROM else "workers",
                 what=f"`method` hybrid in memory on {ds.num_samples:,} samples, {ds.num_edges:,} edges, "
                      f"{ds.num_embeddings:,} embeddings and {num_workers} workers (estimated peak "
                      f"{peak / 2**30:,.1f} GiB)",
                 fix=f"{_out_of_core_advice(ds.num_samples)}, or free memory.")


def _check_manifest_room(out: Any, ds: Any) -> None:
    """Refuse before partitioning an `out` whose device cannot hold the manifest's arrays (sized by the
    samples and the ids of the header: :func:`gmp.manifest.manifest_bytes`), instead of after it."""
    from ._io import check_disk
    from .manifest import manifest_bytes

    check_disk(out, manifest_bytes(ds.num_samples, ds.num_embeddings),
               what=f"the manifest of {ds.num_samples:,} samples and {ds.num_embeddings:,} embedding ids",
               fix="free space or choose another `out` on a larger device.")


def _load_partitioner(method: str) -> None:
    """Import ``method``'s module, or say why it cannot be (before any data is read)."""
    from .errors import PartitionError
    from .partition import PARTITIONERS, get_partitioner

    try:
        get_partitioner(method)
    except ModuleNotFoundError as exc:
        module = PARTITIONERS[method].module
        if exc.name and exc.name.endswith(f"gmp.partition.{module}"):
            err = PartitionError(f"method {method!r} is registered but gmp/partition/{module}.py is not in this "
                                 f"installation; choose another `method`.")
            err.param = "method"
            raise err from None
        raise PartitionError(f"method {method!r} needs the module {exc.name!r}; install it "
                             f"(pip install {exc.name}).") from None


def _partition_streamed(spec: Any):
    """The hybrid across torchrun's processes (``distributed``) or streamed out of core in this process
    (``chunked``); the process group is started here and closed whatever happens. Rank 0 scores the
    placement and writes the manifest; the other ranks return None."""
    from ._io import check_output_dir
    from .comm import LocalEngine
    from .compare import method_options, peak_rss_bytes
    from .errors import GmpError, PartitionError
    from .graph import build_graph, check_unique_ids
    from .manifest import MANIFEST_FILES
    from .partition.distributed import partition_distributed
    from .partition.hybrid import Options
    from .specs import TORCHRUN_HINT

    distributed = spec.mode == "distributed"
    rank = int(os.environ.get("RANK", "0")) if distributed else 0
    if rank == 0:
        check_output_dir(spec.out, kind="gmp.placement", overwrite=spec.overwrite, inputs=[spec.dataset],
                         flag="`out`", own=MANIFEST_FILES)
    options = Options(**method_options("hybrid", dict(spec.options), batch_size=spec.batch_size,
                                       embedding_dim=spec.embedding_dim))
    ds = load_dataset(spec.dataset)
    if rank == 0:
        _check_manifest_room(spec.out, ds)
    # every rank refuses a repeated id before the process group starts (the shards index count tables by it)
    check_unique_ids(ds.indptr, ds.indices, where=str(ds.path))
    if distributed:
        from .comm.distributed import DistributedEngine, collective_timeout

        timeout_s = collective_timeout()  # a bad GMP_COLLECTIVE_TIMEOUT is a bad setting, not a failed join
        try:
            engine = DistributedEngine(timeout_s=timeout_s)
        except GmpError as exc:  # the engine's own line (the join, the backend): said as it is
            raise PartitionError(str(exc)) from None
        except (ValueError, RuntimeError) as exc:  # rendezvous: torch's message, first line
            said = str(exc).strip()
            err = PartitionError(f"`distributed` could not join the process group: "
                                 f"{said.splitlines()[0] if said else type(exc).__name__}; {TORCHRUN_HINT}.")
            err.param = "distributed"
            raise err from None
    else:
        engine = LocalEngine(1)
    ok = False
    try:
        t0 = time.perf_counter()
        placement = partition_distributed(ds.indptr, ds.indices, ds.num_embeddings, spec.topology, seed=spec.seed,
                                          options=options, engine=engine, block_samples=spec.block_samples,
                                          chunk_samples=spec.chunk_samples, dataset_sha256=ds.sha256)
        seconds = time.perf_counter() - t0
        made = None
        if placement is not None:  # rank 0: score on the memory-mapped graph, write atomically
            peak = max(placement.info["distributed"]["peak_rss_bytes_per_process"])
            write_scored_manifest(spec.out, ds, build_graph(ds), placement, spec.topology, seed=spec.seed,
                                  batch_size=spec.batch_size, embedding_dim=spec.embedding_dim, seconds=seconds,
                                  peak=peak, plots=spec.plots, overwrite=spec.overwrite,
                                  manifest_peak=max(peak, peak_rss_bytes()))
            made = load_manifest(spec.out)
        ok = True
        return made
    finally:
        _close_engine(engine, ok)


def _close_engine(engine: Any, ok: bool) -> None:
    """Close the engine; after an error on this rank, without the closing barrier: the peers are inside
    some collective, and this process leaving closes its connections, so they fail at once with a
    line naming the lost peer instead of waiting out the collective timeout."""
    import sys

    dist = sys.modules.get("torch.distributed")  # loaded by the distributed engine only
    if ok or dist is None or not (dist.is_available() and dist.is_initialized()):
        engine.close()
        return
    dist.destroy_process_group()


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


def _window_graph(ds, graph, window: int | None):
    """``graph`` (the dataset's) when ``window`` is None or 1, else the samples of the last ``window`` days
    one after another, oldest first, in ``ds``'s id space: ``ds`` and its ``parent`` chain
    (:func:`gmp.datasets.extend.parent_dataset`)."""
    import numpy as np

    from .datasets.extend import parent_dataset
    from .errors import DatasetError, PartitionError
    from .graph import BipartiteGraph, build_graph

    if window is None or window == 1:
        return graph
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise PartitionError(f"window must be an integer >= 1 (days), got {window!r}.")
    chain = [ds]
    while len(chain) < window:
        parent = parent_dataset(chain[-1])
        if parent is None:
            raise DatasetError(f"window {window}: {ds.path} has {len(chain)} day(s) in its parent chain (datasets "
                               f"made with 'gmp data import ... --extend'); give a window of at most {len(chain)}.")
        chain.append(parent)
    graphs = [build_graph(d) for d in reversed(chain[1:])] + [graph]
    indptr = [np.asarray(graphs[0].sample_indptr, dtype=np.int64)]
    for g in graphs[1:]:
        indptr.append(np.asarray(g.sample_indptr, dtype=np.int64)[1:] + indptr[-1][-1])
    indices = np.concatenate([np.asarray(g.sample_indices) for g in graphs])
    return BipartiteGraph.from_csr(np.concatenate(indptr), indices, graph.num_embeddings)


def _last_samples(placement, graph, max_imbalance: float):
    """``placement`` with only the samples of ``graph``, its last ones (the dataset's in a window's placement),
    those above their own cap (the window's cap held over all its days) moved to the workers under it that hold
    most of their rows (:func:`gmp.partition.fit_samples_to_cap`): the manifest holds ``max_imbalance`` for
    them. The samples are a view of ``placement``'s, so its last day is fitted too."""
    from .partition.incremental import fit_samples_to_cap
    from .placement import Placement

    last = Placement(num_workers=placement.num_workers,
                     sample_worker=placement.sample_worker[placement.num_samples - graph.num_samples:],
                     embedding_primary=placement.embedding_primary, secondary_indptr=placement.secondary_indptr,
                     secondary_workers=placement.secondary_workers, method=placement.method,
                     options=placement.options, seed=placement.seed, info=placement.info)
    fit_samples_to_cap(graph, last, max_imbalance)
    return last


def repartition_dataset(dataset: Any, old_manifest: Any, out: str | os.PathLike, *,
                        max_moved_rows: int | str | None = None, seed: int = 0, batch_size: int | None = None,
                        embedding_dim: int | None = None, options: Mapping[str, Any] | None = None,
                        compare_full: bool = False, overwrite: bool = False, plots: bool = True,
                        window: int | None = None):
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
        Also run a full ``hybrid`` re-partition and record its traffic, rows moved and time; in target
        mode (``options["target"]``, the exact plan's default) it is the target, run once, and the
        comparison also holds the curve of reads against rows moved at every budget of
        :func:`gmp.partition.incremental.budget_ladder` (``comparison["curve"]``).
    window
        Re-partition on the last ``window`` days: the dataset and its ``parent`` datasets
        (``--extend``'s chain), their samples one after another in the dataset's id space; the
        manifest places the dataset's own samples (the last ones), and the budget's percentage is of
        the rows the window uses. None or 1: the dataset alone.

    Returns
    -------
    Manifest
        The written manifest, opened again. ``manifest.meta["info"]["comparison"]`` (and the report's
        ``incremental`` object) holds ``batch_remote_reads`` of the placed data, this placement and the
        full re-partition, the rows and bytes moved and the old ids created afresh.
    """
    from .errors import PartitionError
    from .specs import resolve_partition

    _check_dataset(dataset)
    _check_manifest(old_manifest, "old_manifest")
    _check_options(options, PartitionError)
    _check_bools(PartitionError, compare_full=compare_full, overwrite=overwrite, plots=plots)
    spec = resolve_partition(dataset, None, out, from_manifest=old_manifest, max_moved_rows=max_moved_rows,
                             seed=seed, batch_size=batch_size, embedding_dim=embedding_dim, options=options,
                             compare_full=compare_full, overwrite=overwrite, plots=plots, window=window)
    return run_partition(spec, dataset=dataset)


def _repartition(spec: Any, ds: Any):
    """New data on the old placement ``spec.old_manifest`` (``spec.mode == "incremental"``)."""
    import numpy as np

    from ._io import check_output_dir
    from .compare import method_options, peak_rss_bytes
    from .errors import PartitionError
    from .graph import build_graph
    from .manifest import MANIFEST_FILES, RowHistory
    from .metrics import batch_remote_reads, embedding_degree
    from .partition import make_options, run_partitioner
    from .partition.incremental import (Background, Options, created_rows, in_background, match_workers,
                                        migration_budget, moved_rows, place_and_repartition, place_new_data,
                                        renames_workers, runs_alongside)
    from .progress import task

    old, seed, batch_size, embedding_dim = spec.old_manifest, spec.seed, spec.batch_size, spec.embedding_dim
    max_moved_rows, options, compare_full, window = spec.max_moved_rows, spec.options, spec.compare_full, spec.window
    overwrite, plots = spec.overwrite, spec.plots
    # checked before the (possibly long) partitioning
    out = check_output_dir(spec.out, kind="gmp.placement", overwrite=overwrite, inputs=[spec.dataset, old.path],
                           flag="`out`", own=MANIFEST_FILES)
    ds = ds if ds is not None else load_dataset(spec.dataset)
    generations = _lineage(ds, old)
    topo = old.topology
    graph = build_graph(ds)
    given = {"batch_size": batch_size, **dict(options or {})}
    unknown = sorted(set(given) - set(Options.__dataclass_fields__))
    if unknown:
        raise PartitionError(f"option {unknown[0]!r} is not an option of `from_manifest` (repartition_dataset); "
                             f"expected one of {', '.join(sorted(Options.__dataclass_fields__))}.")
    opts = Options(**given)
    target = opts.target or ("full" if opts.plan == "exact" else "none")
    degree = embedding_degree(graph)  # one pass over the edges, for the used rows and the history
    days = _window_graph(ds, graph, window)  # the graph partitioned: the dataset's, or the window's
    used = np.flatnonzero(degree if days is graph else embedding_degree(days))
    # rows no earlier data read are placed like new ids and created, not moved (history: manifest v3)
    trained = None if old.history is None else old.history.trained
    created = created_rows(used, old.placement, trained)
    budget = None if max_moved_rows is None else migration_budget(max_moved_rows, int(used.size))
    hybrid_options = method_options("hybrid", {}, batch_size=batch_size, embedding_dim=embedding_dim)

    full_seconds = None

    def full_repartition():
        nonlocal full_seconds
        with task("Full re-partition (hybrid)" + (" as the target" if budget is not None and target == "full"
                                                  else " for comparison")):
            t = time.perf_counter()
            full = run_partitioner("hybrid", days, topo, seed=seed, options=hybrid_options)
            full_seconds = time.perf_counter() - t
            return full

    t0 = time.perf_counter()
    full = None
    if budget is None:
        with task(f"Placing {graph.num_samples:,} new samples on {old.path}"):
            placed = placement = place_new_data(days, old.placement, topo, seed=seed, options=opts, trained=trained)
    else:  # one placement pass for both the "no re-partition" line and the refinement
        if target == "full":  # the target is the comparison's full re-partition: one run for both, beside the sweep
            full = in_background(full_repartition) if runs_alongside(opts, days) else full_repartition()
        with task(f"Placing {days.num_samples:,} new samples on {old.path} and re-partitioning, "
                  f"at most {budget:,} rows moved" + (" (the full re-partition alongside)" if isinstance(full, Background)
                                                       else "")):
            try:
                placed, placement = place_and_repartition(days, old.placement, topo, max_moved_rows=budget,
                                                          seed=seed, options=opts, trained=trained, goal=full,
                                                          curve=compare_full)
            except BaseException:  # the full re-partition beside it ends at its next step, not computing on
                if isinstance(full, Background):
                    full.stop()
                raise
        full = full.result() if isinstance(full, Background) else full  # done: the call waited for it
    seconds = time.perf_counter() - t0
    peak = peak_rss_bytes()
    window_reads = None
    if days is not graph:  # the manifest places the dataset's own samples, the window's last ones
        same, window_placement = placed is placement, placement
        placement = _last_samples(placement, graph, opts.max_imbalance)
        window_reads = batch_remote_reads(days, window_placement, batch_size)  # with its last day fitted
        placed = placement if same else _last_samples(placed, graph, opts.max_imbalance)
    # target mode scored the placed data as its chain's first step (budget 0, nothing moved): the same count as
    # the metrics' pass, which costs 0.2 s more on a 1M-sample day; a window's chain scores the window
    first = ((placement.info or {}).get("steps") or [None])[0]
    if placed is placement:
        placed_reads = None
    elif days is graph and opts.batch_size == batch_size and first and first["budget"] == first["rows"] == 0:
        placed_reads = int(first["batch_remote_reads"])
    else:
        placed_reads = batch_remote_reads(graph, placed, batch_size)
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
        "batch_remote_reads": {"no_repartition": placed_reads, "this": None, "full_repartition": None},
        "seconds": {"this": round(seconds, 4), "full_repartition": None},
        "target": target if budget is not None else None,
        "window": None if days is graph else {"days": window, "samples": days.num_samples,
                                              "batch_remote_reads": window_reads},
    }
    info = placement.info or {}
    if "kept" in info:  # target mode: which candidate, what each part cost, the curve
        comparison["kept"] = info["kept"]
        comparison["candidates"] = info["candidates"]
        comparison["seconds"].update(sweep=info["seconds_sweep"],
                                     target=round(full_seconds + info["seconds_target"], 4))
        comparison["seconds"].update(info["seconds_steps"], target_full_repartition=round(full_seconds, 4))
        comparison["sweep_steps"] = info["sweep_steps"]
        comparison["target_alongside"] = info["target_alongside"]  # the parts' seconds overlap in time
        if compare_full:
            comparison["curve"] = info["curve"]
    if compare_full:
        if full is None:
            full = full_repartition()
        comparison["seconds"]["full_repartition"] = round(full_seconds, 4)
        # a full re-partition numbers its workers arbitrarily: rename them to match the old placement where
        # that changes no cost (uniform costs, or machines x GPUs: match_workers), count the rows the data uses
        renamed = renames_workers(topo)
        full = match_workers(old.placement, full, topology=topo, rows=used)
        if days is not graph:
            full = _last_samples(full, graph, make_options("hybrid", hybrid_options).max_imbalance)
        fm = moved_rows(old.placement, full, rows=used, created=created)
        comparison["full_repartition_workers_renamed"] = renamed
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
                formats: Sequence[str] = ("md", "html"), plots: bool = True, overwrite: bool = False):
    """The quality report of a manifest (``gmp report``).

    Without ``dataset`` the stored report.json is re-rendered (after checking
    it against the arrays); with it every metric is recomputed. With ``out``
    the report files (``report.md``, ``report.html``, ``report.json``, PNGs)
    are written there too, as ``gmp report --out`` writes them: a new directory
    is built aside and moved in; into an existing one, report files gmp did
    not write there are replaced only with ``overwrite=True``.

    Returns
    -------
    gmp.report.Report
        ``.data`` (the report.json dict), ``.markdown()``, ``.html()``,
        ``.headline``; shown as rendered Markdown in a notebook.
    """
    from .errors import ManifestError
    from .params import comma_list
    from .report import Report
    from .specs import resolve_report

    _check_manifest(manifest)
    if dataset is not None:
        _check_dataset(dataset)
    _check_bools(ManifestError, plots=plots, overwrite=overwrite)
    formats = comma_list(formats)
    for fmt in formats or ["md"]:  # each checked as gmp report --format is
        spec = resolve_report(manifest, dataset=dataset, format=fmt, out=out, batch_size=batch_size,
                              embedding_dim=embedding_dim, plots=plots, overwrite=overwrite)
    data, _, _ = run_report(spec, formats=formats or ["md"], dataset=dataset, manifest=manifest)
    return Report(data)


def run_report(spec: Any, *, formats: Sequence[str] | None = None, dataset: Any = None, manifest: Any = None):
    """Run a resolved :class:`gmp.specs.ReportSpec` (what :func:`make_report` and ``gmp report`` do after
    resolving): ``(report dict, manifest, names written into spec.out or None)``.

    ``spec.out`` None or ``"-"`` writes nothing. A new directory is claimed before the (possibly long)
    metrics, built aside and moved in, so a directory someone makes there meanwhile stays theirs; into an
    existing directory (claimed, one writer at a time) only the report's own files are written, and
    report files found there that are not the manifest's own are replaced only with ``spec.overwrite``.
    ``dataset``/``manifest``: opened objects, if the caller has them."""
    from ._io import atomic_directory, check_output_dir, claim_output
    from .progress import task
    from .report import report_from_manifest, write_report

    formats = tuple(formats or (spec.format,))
    out = spec.out
    to_dir = out is not None and str(out) != "-"
    new_dir = to_dir and not (out.is_dir() and not out.is_symlink())
    if new_dir:
        check_output_dir(out, kind="gmp.report", flag="`out`")  # a new directory, claimed
    try:
        ds = _dataset(dataset if dataset is not None else spec.dataset) if spec.dataset is not None else None
        with task("Validating manifest"):
            m = _manifest(manifest if manifest is not None else spec.manifest, ds)
        if to_dir and not new_dir:
            claim = claim_output(out)  # one writer at a time
            _check_report_target(out, m, batch_size=spec.batch_size, embedding_dim=spec.embedding_dim)
            _check_report_files(out, m, formats, plots=spec.plots, overwrite=spec.overwrite)
        with task("Computing metrics" if ds is not None else "Reading report"):
            rep = report_from_manifest(m, dataset=ds, batch_size=spec.batch_size, embedding_dim=spec.embedding_dim)
        total = m.placement.num_secondaries  # the manifest's count, shown beside the report's when they differ
        names = None
        if new_dir:
            with atomic_directory(out, kind="gmp.report") as tmp:
                names = write_report(tmp, rep, formats=formats, plots=spec.plots, placement_secondaries=total)
        elif to_dir:
            claim.check()  # still the directory checked above
            claim.written = True  # file by file, into a directory that stays: from here it may have changed
            names = write_report(out, rep, formats=formats, plots=spec.plots, placement_secondaries=total)
            claim.release()  # written: a library caller's next report there (another process's) is not refused
    except BaseException:  # a failed call leaves out unclaimed: a notebook may call it again
        if to_dir:
            release_claim(out)
        raise
    return rep, m, names


def _check_report_target(out: Path, m: Any, **given: int | None) -> None:
    """Refuse a report into a directory whose files belong to something else: a dataset, another manifest, a
    TorchRec export, a checkpoint directory (:data:`gmp._io.OWNING_KINDS`) or a directory inside one, or this
    manifest when the report is recomputed for another batch or width (its own report.json is what
    ``gmp report MANIFEST`` reads back)."""
    from ._io import KIND_NAMES, OWNING_KINDS, enclosing_output, output_kind
    from .errors import OutputError

    kind = output_kind(out)
    own = os.path.realpath(out) == os.path.realpath(m.path)
    if kind in OWNING_KINDS and not own:
        raise OutputError(f"`out` {out} is {KIND_NAMES[kind]}; its files are not this report's: write it elsewhere.")
    inside = None if own else enclosing_output(out)
    if inside is not None:
        raise OutputError(f"`out` {out} is inside {KIND_NAMES[inside[0]]} ({inside[1]}), whose directory holds only "
                          f"its own files; write it elsewhere.")
    differ = m.plan.differences(**given)
    if own and differ:
        raise OutputError(f"`out` {out} is the manifest itself: its own report would be replaced by one for "
                          f"{', '.join(differ)}; write it elsewhere.")


def _check_report_files(out: Path, m: Any, formats: Sequence[str], *, plots: bool, overwrite: bool) -> None:
    """Refuse, without ``overwrite``, a report over report files in a directory other than the manifest
    itself: they are someone's (another report, a page of their own), not this manifest's."""
    from .errors import OutputError
    from .report import PLOT_FILES

    if out.resolve() == Path(m.path).resolve() or overwrite:
        return
    names = [*(f"report.{fmt}" for fmt in formats), *(PLOT_FILES.values() if plots else ())]
    there = [n for n in names if (out / n).exists() or (out / n).is_symlink()]
    if there:
        shown = ", ".join(there)
        raise OutputError(f"`out` {out} already holds {shown}, which this report would replace; pass "
                          f"`overwrite=True` to replace {'it' if len(there) == 1 else 'them'}, or choose another "
                          f"`out`.")


def compare_partitioners(dataset: Any, methods: Sequence[str] | str | None = None, *, workers: int | None = None,
                         topology: Any = None, inter_cost: float | None = None, seed: int | None = None,
                         batch_size: int | None = None, embedding_dim: int | None = None,
                         options: Mapping[str, Mapping[str, Any]] | None = None, isolate: bool | None = None):
    """Run several partitioners on one dataset and score each against random (``gmp compare``).

    Returns the ``gmp.compare`` dict; ``gmp.compare.comparison_tables`` and
    ``render_comparison_html`` render it. Keywords left at None take ``gmp compare``'s defaults (methods
    ``random, metis, hybrid``, seed 0, batch 512, width 16, inter-machine cost 10, ``isolate=True``: each
    method runs in a process of its own started with ``spawn``, so its peak memory is its own;
    ``isolate=False`` runs them in this process, quicker to start); resolved by
    :func:`gmp.specs.resolve_compare`.
    """
    from .errors import PartitionError
    from .specs import resolve_compare

    _check_dataset(dataset)
    _check_options(options, PartitionError, per_method=True)
    _check_bools(PartitionError, isolate=isolate)
    spec = resolve_compare(dataset, methods, workers=workers, topology=topology, inter_cost=inter_cost, seed=seed,
                           batch_size=batch_size, embedding_dim=embedding_dim, options=options, isolate=isolate)
    return run_compare(spec, dataset=dataset)


def run_compare(spec: Any, *, dataset: Any = None):
    """Run a resolved :class:`gmp.specs.CompareSpec` (what :func:`compare_partitioners` and ``gmp compare`` do
    after resolving): the ``gmp.compare`` dict. ``dataset``: the opened dataset, if the caller has it."""
    from .compare import compare
    from .graph import build_graph
    from .report import dataset_name_of

    ds = dataset if dataset is not None and not isinstance(dataset, (str, os.PathLike)) else load_dataset(spec.dataset)
    return compare(build_graph(ds), spec.topology, list(spec.methods), seed=spec.seed, batch_size=spec.batch_size,
                   embedding_dim=spec.embedding_dim, options=spec.options,
                   dataset_path=spec.dataset if spec.isolate else None, isolate=spec.isolate,
                   dataset_name=dataset_name_of(ds.meta, spec.dataset))


def train_model(dataset: Any, manifest: Any = None, *, engine: str | None = None,
                workers: int | None = None, checkpoint_dir: str | os.PathLike | None = None, resume: bool = False,
                log_json: str | os.PathLike | None = None, **config: Any) -> list[dict[str, Any]]:
    """Train a CTR model with a manifest's placement (``gmp train``); returns the epoch records.

    ``config`` are :class:`gmp.train.TrainConfig` fields: ``model``
    (wdl | dcn | deepfm), ``epochs``, ``batch_size``, ``lr``, ``optimizer``,
    ``embedding_dim``, ``staleness``, ``schedule``, ``shuffle``, ``seed``, ``hidden``, ...,
    and the device cache's settings as ``gmp train`` has them (``table_location``,
    ``cache_rows``, ``cache_bytes``, ``lookahead``, ``cache_policy``, ``tier_dir``,
    ``on_demand``, ``read_only_replicas``). Resolved by :func:`gmp.specs.resolve_train`, as the
    command is: ``batch_size``/``embedding_dim`` default to the manifest's plan, ``engine`` to
    ``distributed`` under torchrun, a tiered table's cache to the largest step of the run.
    """
    from .errors import TrainingError
    from .launch import refusals_told
    from .specs import resolve_train

    with refusals_told(engine != "local"):  # under torchrun a refusal before the join reaches the peers
        _check_dataset(dataset)
        if manifest is not None:
            _check_manifest(manifest)
        _check_bools(TrainingError, resume=resume)
        # gmp.train.train opens both itself (verified, memory-mapped): an opened object gives its path
        spec = resolve_train(dataset, manifest, engine=engine, workers=workers, checkpoint_dir=checkpoint_dir,
                             resume=resume, log_json=log_json, **config)
        for line in spec.warnings:
            _log.warning("%s", line)
        return run_train(spec)


def run_train(spec: Any, *, on_record: Any = None, on_start: Any = None) -> list[dict[str, Any]]:
    """Run a resolved :class:`gmp.specs.TrainSpec` (what :func:`train_model` and ``gmp train`` do after
    resolving); ``on_record(record)`` is called with each record on the main process as it is logged, and
    ``on_start()`` once the inputs are accepted, before the first (:func:`gmp.train.run.train`)."""
    from ._memory import allocation_failed, available_text, is_out_of_memory
    from .errors import GmpError, OutOfMemory
    from .train import train

    try:
        return train(spec.dataset, spec.manifest, spec.config, engine=spec.engine, workers=spec.workers,
                     checkpoint_dir=spec.checkpoint_dir, resume=spec.resume, log_json=spec.log_json,
                     on_record=on_record, collective_timeout=spec.collective_timeout,
                     settings=spec.to_json() if spec.log_json is not None else None, on_start=on_start)
    except (MemoryError, RuntimeError) as exc:  # past the check before work (an estimate; an address-space limit)
        if isinstance(exc, GmpError) or not is_out_of_memory(exc):
            raise
        err = OutOfMemory(f"out of memory while training ({allocation_failed(exc)}); {available_text()}; lower "
                          f"`embedding_dim` or `batch_size`, spread the workers over more processes or machines, or "
                          f"keep the tables on disk (`table_location` disk).")
        raise err from None


def simulate_epoch(dataset: Any, manifest: Any = None, *, workers: int | None = None,
                   batch_size: int | None = None, seed: int = 0, **options: Any):
    """Replay one training epoch under a runtime schedule and count pulls and pushes (``gmp simulate``).

    Without ``manifest`` the rows are placed at random over ``workers``.
    ``batch_size`` and ``embedding_dim`` default to the manifest's plan (else
    ``gmp.constants.DEFAULT_BATCH_SIZE`` and ``DEFAULT_EMBEDDING_DIM``).
    ``options`` are :func:`gmp.simulate.simulate` keywords (``schedule``,
    ``embedding_dim``, ``epoch`` (>= 0), ``order`` (training sample ids in ``[0, num_train)``, each
    at most once: :func:`gmp.simulate.check_order`), ``min_frequency`` (in ``[0, 1)``), ...) and
    :class:`gmp.train.herald.HeraldOptions` fields
    (``on_demand``, ``cache_rows``, ``cache_policy``, ``lookahead``, ``read_only_replicas``),
    which override :meth:`HeraldOptions.for_simulator`'s defaults (Herald's paper); a ``lookahead``
    without ``cache_policy="lookahead"``, which alone reads it in a replay, is refused as ``gmp simulate``
    refuses it.
    Resolved by :func:`gmp.specs.resolve_simulate`, as the command is.
    Returns a :class:`gmp.simulate.SimulationResult` (``.to_json()`` for every count).
    """
    from .specs import resolve_simulate

    if manifest is not None:
        _check_manifest(manifest)
    spec = resolve_simulate(_dataset(dataset), manifest, workers=workers, batch_size=batch_size, seed=seed,
                            **options)
    for line in spec.warnings:
        _log.warning("%s", line)
    return run_simulate(spec)


def run_simulate(spec: Any):
    """Run a resolved :class:`gmp.specs.SimulateSpec`: a :class:`gmp.simulate.SimulationResult`."""
    from .simulate import simulate

    ds = spec.dataset
    return simulate(ds.indptr, ds.indices, spec.placement, num_train=ds.num_train, batch_size=spec.batch_size,
                    schedule=spec.schedule, options=spec.options, seed=spec.seed, epoch=spec.epoch,
                    shuffle=spec.shuffle, embedding_dim=spec.embedding_dim, parameter_server=spec.parameter_server,
                    min_frequency=spec.min_frequency, order=spec.order)


def export_torchrec(manifest: Any, out: str | os.PathLike, *, dataset: Any = None, batch_size: int | None = None,
                    embedding_dim: int | None = None, **options: Any):
    """Write a TorchRec sharding plan for a manifest (``gmp export torchrec``); see :mod:`gmp.export.torchrec`.
    ``batch_size`` and ``embedding_dim`` default to the manifest's plan (:func:`gmp.specs.resolve_export`)."""
    import inspect

    from .errors import ManifestError, OutputError
    from .export.torchrec import export_torchrec as _export
    from .specs import resolve_export

    takes = sorted(set(inspect.signature(_export).parameters) - {"manifest", "out", "dataset", "batch_size",
                                                                "embedding_dim"})
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise ManifestError(f"export_torchrec: unknown option(s) {', '.join(unknown)}; it takes: {', '.join(takes)}.")
    _check_bools(ManifestError, overwrite=options.get("overwrite", False))
    _check_export_cache(options, ManifestError)
    _check_manifest(manifest)
    if dataset is not None:
        _check_dataset(dataset)
    _check_path("out", out, OutputError, "the export's directory")
    spec = resolve_export(manifest, batch_size=batch_size, embedding_dim=embedding_dim)
    for line in spec.warnings:
        _log.warning("%s", line)
    return run_export(spec, manifest, out, dataset=dataset, **options)


def _check_export_cache(options: Mapping[str, Any], error: type) -> None:
    """The cache keywords of :func:`export_torchrec` of a type the export can read (it checks their ranges)."""
    import numpy as np

    from .params import check_int

    if "load_factors" in options:
        factors = options["load_factors"]
        ok = isinstance(factors, (Sequence, np.ndarray)) and not isinstance(factors, (str, bytes))
        ok = ok and all(isinstance(f, (int, float, np.integer, np.floating)) and not isinstance(f, (bool, np.bool_))
                        for f in factors)
        if not ok:
            raise param_error(error, "load_factors", f"The 'load_factors' parameter must be a sequence of fractions in "
                                                  f"(0, 1] (e.g. (0.01, 0.1, 0.5)), got {factors!r}.")
    if "cache_lookups" in options:
        check_int("cache_lookups", options["cache_lookups"], minimum=0, error=error)


def run_export(spec: Any, manifest: Any, out: str | os.PathLike, *, dataset: Any = None, **options: Any):
    """Write the TorchRec plan of a resolved :class:`gmp.specs.ExportSpec` (what :func:`export_torchrec` and
    ``gmp export torchrec`` do after resolving). An ``out`` that is a file is refused in one line (the export
    would list it as a directory)."""
    from .errors import OutputError
    from .export.torchrec import export_torchrec as _export

    if os.path.lexists(out) and not os.path.isdir(out):
        raise param_error(OutputError, "out", f"`out` {out} exists and is not a directory; choose another `out`.")
    return _export(manifest, out, dataset=dataset, batch_size=spec.batch_size, embedding_dim=spec.embedding_dim,
                   **options)
