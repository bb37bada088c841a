"""The placement manifest: the versioned on-disk form of a :class:`~gmp.placement.Placement`.

``gmp partition`` writes it, ``gmp report`` and ``gmp train`` read it. A
manifest is a directory::

    criteo-1m.hybrid.w8/
    ├── manifest.json            header: format, schema_version, dataset hash, counts,
    │                            topology, partitioner, metrics summary, array index
    ├── sample_worker.npy        int32 [num_samples]          worker of every sample (dataset order)
    ├── embedding_primary.npy    int32 [num_embeddings]       primary worker of every embedding id
    ├── secondary_indptr.npy     int64 [num_embeddings + 1]   CSR over embedding ids ...
    ├── secondary_workers.npy    int32 [num_secondaries]      ... the workers holding a secondary replica
    ├── trained_rows.npy         uint8 [ceil(num_embeddings / 8)]  (version 3) bit e: a sample of this
    │                            manifest's data, or of the data of the manifests it was placed from, reads e
    ├── created_rows.npy         int64 [num_created]          (version 3) old ids placed afresh (see below)
    ├── report.json              the quality report (format "gmp.report", see gmp.report)
    ├── report.md                the same for people
    └── *.png                    traffic heatmap, per-worker loads, degree distribution

Embedding ``e``'s secondaries are ``secondary_workers[secondary_indptr[e]:secondary_indptr[e+1]]``
(empty for a pure edge-cut placement); a secondary is never on the primary's
worker and never listed twice. Ids that never occur in the dataset (degree
0) still get a primary (any worker) so the arrays cover every id; no metric
counts them.

The directory is written atomically (built in a hidden temporary sibling,
then renamed), so a crash never leaves a directory that reads as valid.
``placement_sha256`` is :func:`gmp._io.hash_arrays` over the four arrays
(in the order above); reading recomputes it, so a modified array is caught.

Reading (:func:`load_manifest`) checks, each failure a one-line
:class:`~gmp.errors.ManifestError` naming the file and the fix: the format
and ``schema_version`` (newer versions are refused; older ones are upgraded
one step at a time: 1 -> 2 adds ``plan`` and ``dataset_name``, 2 -> 3 ``history``), the dataset hash and
counts against the dataset it is used with, the header's types (the partitioner's
``memory_per_worker`` and ``embedding_dim`` options, which the trainer reads, positive
integers; no NaN or infinity anywhere, free-form ``partitioner.options``/``.info`` included),
every array's shape and dtype, worker ids in ``[0, num_workers)``, secondaries never on
their primary's worker, the placement hash, and the topology.

Example ``manifest.json``::

    {
      "format": "gmp.placement",
      "schema_version": 3,
      "gmp_version": "0.1.0",
      "created": "2026-11-22T01:00:00+00:00",
      "dataset_sha256": "5b0d6c1f...",
      "dataset_name": "criteo-1m",
      "num_samples": 6,
      "num_embeddings": 6,
      "num_workers": 2,
      "num_secondaries": 1,
      "topology": {"name": "2", "cost": [[0.0, 1.0], [1.0, 0.0]], "machine_of": [0, 0]},
      "partitioner": {
        "name": "hybrid",
        "options": {"rounds": 5, "tol": 0.001},
        "seed": 0,
        "info": {"rounds": [{"round": 1, "objective": 12.0, "seconds": 0.01}]}
      },
      "batch_size": 512,
      "embedding_dim": 16,
      "plan": {"batch_size": 512, "embedding_dim": 16, "memory_per_worker": null},
      "partition_seconds": 0.02,
      "peak_rss_bytes": 123456789,
      "metrics": {
        "remote_accesses": 1, "remote_accesses_weighted": 1.0, "epoch_unique_remote": 1,
        "batch_remote_reads": 1, "batch_remote_pushes": 2, "batch_size": 512,
        "replication_factor": 1.1667,
        "reduction_vs_random": {"remote_accesses": 0.8, "remote_accesses_weighted": 0.8,
                                "epoch_unique_remote": 0.75, "batch_remote_reads": 0.75,
                                "batch_remote_pushes": 0.5},
        "balance": {"samples": 1.0, "edges": 1.0, "rows_held": 1.14, "traffic_served": 2.0,
                    "traffic_received": 2.0}
      },
      "arrays": {
        "sample_worker": {"file": "sample_worker.npy", "dtype": "int32", "shape": [6]},
        "embedding_primary": {"file": "embedding_primary.npy", "dtype": "int32", "shape": [6]},
        "secondary_indptr": {"file": "secondary_indptr.npy", "dtype": "int64", "shape": [7]},
        "secondary_workers": {"file": "secondary_workers.npy", "dtype": "int32", "shape": [1]}
      },
      "placement_sha256": "0e5f...",
      "history": {
        "trained_rows": {"file": "trained_rows.npy", "dtype": "uint8", "shape": [1]},
        "created_rows": {"file": "created_rows.npy", "dtype": "int64", "shape": [0]},
        "sha256": "7a1c..."
      },
      "report_files": ["report.json", "report.md", "traffic.png", "loads.png", "degrees.png"]
    }

``metrics`` is a summary (the scalar metrics, reductions and balance); the
full metrics (traffic matrix, per-worker loads) are in ``report.json``.
``partitioner.info`` is free-form diagnostics from the partitioner (the
hybrid partitioner's per-round log lives under ``"rounds"``).

``plan`` (version 2) is what the placement was optimised for: the per-worker
batch size and embedding dim of its metrics and the memory budget per worker
in bytes (``memory_per_worker`` of the partitioner's options, null without
one; with a budget ``embedding_dim`` is the partitioner's). ``gmp train`` and
``gmp simulate`` take ``batch_size`` and ``embedding_dim`` as their defaults
(one warning line when told otherwise); the trainer checks the budget.
``dataset_name`` (version 2) is the dataset directory's name (null when unknown).

``history`` (version 3; null when unknown: a manifest upgraded from version 2) tells which rows a
model trained along a chain of placements (``gmp partition NEW --from-manifest OLD``, each trained
in turn with ``gmp train --resume``) can have updated, so that the next day's placement may put a
row nobody trained anywhere at no migration cost (:class:`RowHistory`). ``trained_rows`` (bits in
little order, ``np.packbits(..., bitorder="little")``) marks the rows this manifest's dataset reads
and, for a placement made ``--from-manifest``, the old manifest's trained rows (with no history
there: every old id); a row outside it was never read, so it still holds its initial value. A
superset of what training updated (the test split's rows are marked too): safe, never short.
``created_rows`` are the old ids (below the old manifest's ``num_embeddings``) that the old
history leaves untrained and this placement re-placed where the new data reads them; ``gmp train
--resume`` creates them at their initial values instead of sending them, and neither counts them
as moved rows (:func:`gmp.partition.incremental.moved_rows`). ``sha256`` is :func:`gmp._io.hash_arrays`
over the two arrays, checked on reading like ``placement_sha256``.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import numpy as np

from ._io import (HeaderCount, atomic_directory, hash_arrays, header_value, load_npy, non_finite_value,
                  read_versioned_json, shown_value, verify_enabled, write_json)
from ._version import __version__
from .errors import GmpError, ManifestError, TopologyError
from .graph import min_max
from .placement import Placement, indptr_fault, secondary_violation
from .topology import Topology

log = logging.getLogger(__name__)

FORMAT = "gmp.placement"
SCHEMA_VERSION = 3
MANIFEST_FILE = "manifest.json"
_FIX = "re-create it with 'gmp partition'."

#: name -> (dtype, file); the shapes follow from the header's counts
ARRAYS = {
    "sample_worker": ("int32", "sample_worker.npy"),
    "embedding_primary": ("int32", "embedding_primary.npy"),
    "secondary_indptr": ("int64", "secondary_indptr.npy"),
    "secondary_workers": ("int32", "secondary_workers.npy"),
}

def manifest_bytes(num_samples: int, num_embeddings: int) -> int:
    """The bytes of a manifest's arrays before any secondary (a lower bound of what writing one needs): a
    worker per sample, a primary per id, the secondaries' pointer per id and the trained-rows bits."""
    s, v = int(num_samples), int(num_embeddings)
    return 4 * s + 4 * v + 8 * (v + 1) + -(-v // 8)


#: the history's arrays (version 3): name -> (dtype, file)
HISTORY_ARRAYS = {
    "trained_rows": ("uint8", "trained_rows.npy"),
    "created_rows": ("int64", "created_rows.npy"),
}

#: the report's plots, written beside the manifest by ``gmp report`` (gmp.report.plots)
PLOT_FILES = {"traffic": "traffic.png", "loads": "loads.png", "degrees": "degrees.png"}
#: every name a manifest directory may hold: its header and arrays, and its report (report.json, .md, the
#: .html of ``gmp report MANIFEST --format html``, the plots). ``--overwrite`` replaces these and refuses a
#: directory holding anything else (:func:`gmp._io.check_only_own`), which is someone else's.
MANIFEST_FILES = frozenset({"manifest.json", *(f for _, f in ARRAYS.values()), *(f for _, f in HISTORY_ARRAYS.values()),
                            "report.json", "report.md", "report.html", *PLOT_FILES.values()})

#: metric keys copied into manifest.json's summary (the rest stays in report.json)
SUMMARY_KEYS = (
    "remote_accesses", "remote_accesses_weighted", "epoch_unique_remote", "batch_remote_reads",
    "batch_remote_pushes", "batch_remote_reads_bytes", "batch_remote_pushes_bytes", "batch_size",
    "embedding_dim", "replication_factor", "reduction_vs_random", "balance",
)


class TrainingPlan(NamedTuple):
    """The training plan a placement was optimised for (the manifest's ``plan`` key); None where the manifest
    does not say.

    In gmp's code "plan" alone means this; the other two are qualified: the import recipe
    (:class:`gmp.datasets.dispatch.ImportRecipe`) and the incremental partitioner's option ``plan``
    (``"exact"``/``"onepass"``, a public ``-O`` key and manifest option, so it keeps its name)."""

    batch_size: int | None
    embedding_dim: int | None
    memory_per_worker: int | None

    def resolve(self, **given: int | None) -> tuple[dict[str, int | None], str | None]:
        """The plan's values as defaults: ``given`` (e.g. ``batch_size=None, embedding_dim=256``) with
        each None replaced by the plan's value, and one warning line naming every given value that
        differs from the plan (None when none does). A given value that is not an int >= 1 is refused
        first, so no warning precedes its error."""
        from .params import check_int

        for name, value in given.items():
            if value is not None:
                check_int(name, value, minimum=1)
        out = {name: getattr(self, name) if value is None else value for name, value in given.items()}
        differ = self.differences(**given)
        msg = None
        if differ:
            msg = (f"the manifest's placement was optimised for another setting: {', '.join(differ)}; its "
                   f"reported traffic and memory assume the planned values")
        return out, msg

    def differences(self, **given: int | None) -> list[str]:
        """``"name value (planned p)"`` for each given value (None: not given) that differs from the plan."""
        return [f"{name} {value} (planned {getattr(self, name)})" for name, value in given.items()
                if value is not None and getattr(self, name) is not None and value != getattr(self, name)]


#: the name of :class:`TrainingPlan` before issue 34 ("plan" had three meanings); kept for code that imports it
ManifestPlan = TrainingPlan


class RowHistory(NamedTuple):
    """Which rows a model trained along a chain of placements can have updated (manifest ``history``).

    ``trained``: bool [num_embeddings], the rows read by this placement's data or by the data of the
    placements it was made from. ``created``: int64 ids, old rows no earlier data read that this
    placement re-placed (the trainer creates them instead of moving them)."""

    trained: np.ndarray
    created: np.ndarray

    @classmethod
    def of_degree(cls, degree: np.ndarray, *, parent: "RowHistory | None" = None, parent_rows: int = 0,
                  created: np.ndarray | None = None) -> "RowHistory":
        """The rows a placement's data reads (``degree > 0``), with its old placement's trained rows when it
        was made from one over ``parent_rows`` ids (``parent``: that manifest's history; None marks every
        old id, as for a manifest made before version 3). ``created``: :attr:`created`."""
        trained = np.asarray(degree) > 0
        trained[:parent_rows] |= True if parent is None else np.asarray(parent.trained, dtype=bool)[:parent_rows]
        return cls(trained, np.zeros(0, dtype=np.int64) if created is None else np.asarray(created, dtype=np.int64))

    def packed(self) -> dict[str, np.ndarray]:
        """The arrays as written (:data:`HISTORY_ARRAYS`)."""
        return {"trained_rows": np.packbits(np.asarray(self.trained, dtype=bool), bitorder="little"),
                "created_rows": np.ascontiguousarray(self.created, dtype=np.int64)}


@dataclass
class Manifest:
    """A validated placement manifest opened from disk."""

    path: Path
    meta: dict[str, Any]
    placement: Placement
    topology: Topology
    history: RowHistory | None = None  # None: unknown (made before version 3)

    @property
    def dataset_sha256(self) -> str:
        return str(self.meta["dataset_sha256"])

    def check_dataset(self, dataset: Any) -> None:
        """Refuse ``dataset`` unless this manifest was made for it (what ``load_manifest(..., dataset=)``
        checks on open; for a manifest opened before the dataset was known)."""
        _check_made_for(self.meta, self.path / MANIFEST_FILE, dataset)

    num_workers = HeaderCount()
    num_samples = HeaderCount()
    num_embeddings = HeaderCount()

    @property
    def method(self) -> str:
        return str(self.meta["partitioner"]["name"])

    @property
    def plan(self) -> TrainingPlan:
        plan = self.meta.get("plan") or {}
        return TrainingPlan(*(None if plan.get(k) is None else int(plan[k]) for k in TrainingPlan._fields))

    @property
    def dataset_name(self) -> str | None:
        name = self.meta.get("dataset_name")
        return None if name is None else str(name)

    def __repr__(self) -> str:  # one line, never the arrays or the whole meta
        return (f"<Manifest {str(self.path)!r}: {self.method} on {self.num_workers} workers, "
                f"{self.num_samples:,} samples, {self.num_embeddings:,} embeddings, "
                f"{self.placement.num_secondaries:,} secondaries, dataset sha256 {self.dataset_sha256[:12]}>")


def _placement_hash(placement: Placement) -> str:
    return hash_arrays([(name, getattr(placement, name)) for name in ARRAYS])


def write_manifest(
    out: str | os.PathLike,
    placement: Placement,
    *,
    dataset_sha256: str,
    num_samples: int,
    num_embeddings: int,
    topology: Topology,
    metrics: Mapping[str, Any] | None = None,
    report_files: Callable[[Path], Iterable[str]] | Mapping[str, bytes | str] | None = None,
    partition_seconds: float | None = None,
    peak_rss_bytes: int | None = None,
    overwrite: bool = False,
    dataset_name: str | None = None,
    history: RowHistory | None = None,
) -> Path:
    """Write ``placement`` as a manifest directory at ``out`` (atomically) and return its path.

    Parameters
    ----------
    placement
        Validated against ``num_samples``/``num_embeddings``/``topology`` first.
    dataset_sha256, num_samples, num_embeddings
        The dataset it was made for (:attr:`PreparedDataset.sha256` etc.).
    metrics
        :func:`gmp.metrics.compute_metrics` output; its summary goes into manifest.json.
    report_files
        Extra files written inside the same atomic directory: either a
        callable ``write(tmpdir) -> names`` or a mapping ``name -> content``.
    partition_seconds, peak_rss_bytes
        Measured by the caller.
    dataset_name
        The dataset's name (its directory's name), recorded as ``dataset_name``.
    history
        The rows trained along the placement chain (:class:`RowHistory`; ``RowHistory.of_degree``
        for a placement made from scratch); None records ``history`` as unknown (null).
    overwrite
        Replace an existing non-empty ``out``.
    """
    try:
        placement.check(num_samples=num_samples, num_embeddings=num_embeddings)
    except GmpError as exc:
        raise ManifestError(f"cannot write manifest {out}: {exc}") from None
    if placement.num_workers != topology.num_workers:
        raise ManifestError(
            f"cannot write manifest {out}: the placement has {placement.num_workers} workers, "
            f"the topology {topology.num_workers}."
        )
    if history is not None:
        created = np.asarray(history.created)
        if np.asarray(history.trained).shape != (num_embeddings,) or (created.size and (
                created.min() < 0 or created.max() >= num_embeddings)):
            raise ManifestError(f"cannot write manifest {out}: the history must cover {num_embeddings} rows "
                                f"(trained {np.asarray(history.trained).shape}, created ids in range).")
    metrics = dict(metrics or {})
    from .partition import options_to_json

    with atomic_directory(out, overwrite=overwrite, kind=FORMAT, own=MANIFEST_FILES) as tmp:
        arrays_meta = {}
        for name, (dtype, fname) in ARRAYS.items():
            arr = np.ascontiguousarray(getattr(placement, name), dtype=dtype)
            np.save(tmp / fname, arr, allow_pickle=False)
            arrays_meta[name] = {"file": fname, "dtype": dtype, "shape": list(arr.shape)}
        history_meta = None
        if history is not None:
            packed = history.packed()
            history_meta = {}
            for name, (dtype, fname) in HISTORY_ARRAYS.items():
                np.save(tmp / fname, packed[name], allow_pickle=False)
                history_meta[name] = {"file": fname, "dtype": dtype, "shape": list(packed[name].shape)}
            history_meta["sha256"] = hash_arrays(list(packed.items()))
        names: list[str] = []
        if callable(report_files):
            names = [str(n) for n in report_files(tmp)]
        elif report_files:
            for name, content in report_files.items():
                data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
                (tmp / name).write_bytes(data)
                names.append(str(name))
        meta = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "gmp_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "dataset_sha256": str(dataset_sha256),
            "dataset_name": None if dataset_name is None else str(dataset_name),
            "num_samples": int(num_samples),
            "num_embeddings": int(num_embeddings),
            "num_workers": int(placement.num_workers),
            "num_secondaries": int(placement.num_secondaries),
            "topology": topology.to_json(),
            "partitioner": {
                "name": placement.method,
                "options": options_to_json(placement.options),
                "seed": placement.seed,
                "info": dict(placement.info or {}),
            },
            "batch_size": metrics.get("batch_size"),
            "embedding_dim": metrics.get("embedding_dim"),
            "plan": _plan(metrics.get("batch_size"), metrics.get("embedding_dim"),
                          options_to_json(placement.options)),
            "partition_seconds": None if partition_seconds is None else float(partition_seconds),
            "peak_rss_bytes": None if peak_rss_bytes is None else int(peak_rss_bytes),
            "metrics": {k: metrics[k] for k in SUMMARY_KEYS if k in metrics},
            "arrays": arrays_meta,
            "placement_sha256": _placement_hash(placement),
            "history": history_meta,
            "report_files": names,
        }
        write_json(tmp / MANIFEST_FILE, meta, finite=True, error=ManifestError)
    log.info("wrote manifest %s", out)
    return Path(out)


def _plan(batch_size, embedding_dim, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``plan`` object: the metrics' batch size and embedding dim, the partitioner's memory budget
    (with a budget, the embedding dim the budget was computed for)."""
    options = dict(options or {})
    budget = options.get("memory_per_worker")
    if budget is not None and options.get("embedding_dim") is not None:
        embedding_dim = options["embedding_dim"]
    return {"batch_size": None if batch_size is None else int(batch_size),
            "embedding_dim": None if embedding_dim is None else int(embedding_dim),
            "memory_per_worker": None if budget is None else int(budget)}


def _whole(value: Any) -> int | None:
    """``value`` when it is a whole number (a JSON int, or a float like 1e9), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (float("inf"),
                                                                                                       float("-inf")):
        return None
    return int(value) if float(value).is_integer() else None


def _upgrade_1_to_2(meta: dict[str, Any]) -> dict[str, Any]:
    """Version 2 adds ``plan`` (from version 1's batch_size, embedding_dim and the partitioner's
    memory budget) and ``dataset_name`` (unknown for version 1: null)."""
    meta = dict(meta)
    part = meta.get("partitioner") if isinstance(meta.get("partitioner"), dict) else {}
    options = part.get("options") if isinstance(part.get("options"), dict) else {}
    # values of the wrong type become null here; check_header then names the bad key of version 1
    options = {k: _whole(options.get(k)) for k in ("memory_per_worker", "embedding_dim")}
    meta["plan"] = _plan(_whole(meta.get("batch_size")), _whole(meta.get("embedding_dim")), options)
    meta.setdefault("dataset_name", None)
    meta["schema_version"] = 2
    return meta


def _upgrade_2_to_3(meta: dict[str, Any]) -> dict[str, Any]:
    """Version 3 adds ``history``: unknown (null) for a manifest made before it, so every old id counts as
    trained (the placement of the next day's data then behaves as before version 3)."""
    meta = dict(meta)
    meta.setdefault("history", None)
    meta["schema_version"] = 3
    return meta


# --------------------------------------------------------------------------- reading
def _upgrade(meta: dict[str, Any], path: Path) -> dict[str, Any]:
    """Upgrade an older header one version at a time."""
    upgrades: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3}  # v -> v + 1
    while meta["schema_version"] < SCHEMA_VERSION:
        meta = upgrades[meta["schema_version"]](meta)
    return meta


def check_header(meta: Mapping[str, Any], mfile: Path, *, verify_hash: bool = True) -> None:
    """Validate a ``manifest.json`` header against the schema (types, nesting, required keys).

    Counts must be JSON integers (``2.5`` workers is refused, not truncated),
    ``topology`` and ``partitioner`` objects, ``partitioner.options`` and
    ``.info`` objects (the options' ``memory_per_worker`` and ``embedding_dim``,
    the budget the trainer checks, positive integers or absent); no number
    anywhere may be NaN or infinite; ``placement_sha256`` is required unless
    hash verification is off.
    """
    def get(obj, key, kind, where="", optional=False):
        return header_value(obj, key, kind, path=mfile, error=ManifestError, fix=_FIX, optional=optional,
                            where=where)

    get(meta, "dataset_sha256", "str")
    get(meta, "num_samples", "int>=0")
    get(meta, "num_embeddings", "int>=0")
    get(meta, "num_workers", "int>=1")
    get(meta, "num_secondaries", "int>=0", optional=True)
    get(meta, "topology", "dict")
    part = get(meta, "partitioner", "dict")
    get(part, "name", "str", "partitioner.")
    options = get(part, "options", "dict", "partitioner.", optional=True)
    if options is not None:  # the memory budget the trainer checks the rows against (and version 1's plan)
        for key in ("memory_per_worker", "embedding_dim"):
            get(options, key, "int>=1", "partitioner.options.", optional=True)
    get(part, "info", "dict", "partitioner.", optional=True)
    seed = get(part, "seed", "int>=0", "partitioner.", optional=True)  # numpy refuses a negative one later
    if seed is not None and seed >= 2**63:  # gmp.seeds.check_seed's range: manifests store it as int64
        raise ManifestError(f"{mfile}: partitioner.seed must be an integer in [0, 2^63), got {seed}; {_FIX}")
    for key in ("batch_size", "embedding_dim"):
        get(meta, key, "int>=1", optional=True)
    plan = get(meta, "plan", "dict", optional=True)
    for key in ("batch_size", "embedding_dim", "memory_per_worker"):
        if plan is not None:
            get(plan, key, "int>=1", "plan.", optional=True)
    get(meta, "dataset_name", "str", optional=True)
    for key, kind in (("partition_seconds", "number"), ("peak_rss_bytes", "int>=0"), ("created", "str"),
                      ("gmp_version", "str")):
        get(meta, key, kind, optional=True)
    for key, kind in (("metrics", "dict"), ("arrays", "dict"), ("history", "dict"), ("report_files", "list")):
        get(meta, key, kind, optional=True)
    get(meta, "dataset_name", "str", optional=True)  # schema 2; null when unknown
    get(meta, "partition_seconds", "number", optional=True)
    get(meta, "peak_rss_bytes", "int>=0", optional=True)
    get(meta, "created", "str", optional=True)
    plan = get(meta, "plan", "dict", optional=True)
    if plan:
        for key in ("batch_size", "embedding_dim", "memory_per_worker"):
            get(plan, key, "int>=0", "plan.", optional=True)
    # gmp writes no NaN or Infinity (write_json(finite=True)); one in a free-form object (partitioner.options,
    # .info) would be copied into every report.json and refused there by a strict JSON writer
    found = non_finite_value(meta)
    if found is not None:
        raise ManifestError(f"{mfile}: {found[0]} must be a finite number, got {shown_value(found[1])}; {_FIX}")
    if verify_hash:
        if "placement_sha256" not in meta:
            raise ManifestError(f"{mfile} lacks the key 'placement_sha256', so its arrays cannot be checked; "
                                f"{_FIX.rstrip('.')} (GMP_NO_VERIFY=1 skips the check).")
        get(meta, "placement_sha256", "str")


def _manifest_file(path: str | os.PathLike) -> Path:
    """``DIR/manifest.json`` of a manifest directory given as DIR or as its manifest.json; one line where
    DIR is not a directory (what :func:`load_manifest` and :func:`read_plan` both say)."""
    path = Path(path)
    if path.is_file() and path.name == MANIFEST_FILE:
        path = path.parent
    if not path.is_dir():
        raise ManifestError(f"{path} is not a directory; pass a placement manifest directory ({_FIX.rstrip('.')}).")
    return path / MANIFEST_FILE


def read_plan(path: str | os.PathLike, *, dataset: Any = None) -> TrainingPlan:
    """The ``plan`` of a manifest, from its header alone (upgraded; arrays not read or checked). With
    ``dataset`` (an opened dataset) it also refuses a dataset the header says the manifest was not made
    for, as :func:`load_manifest` does later, so that a command says so before anything else."""
    mfile = _manifest_file(path)
    meta = read_versioned_json(mfile, fmt=FORMAT, max_version=SCHEMA_VERSION, error=ManifestError, fix=_FIX)
    check_header(meta, mfile, verify_hash=False)  # the upgrade reads typed values
    meta = _upgrade(meta, mfile)
    if dataset is not None:
        _check_made_for(meta, mfile, dataset)
    plan = meta.get("plan") or {}
    if not isinstance(plan, dict):
        raise ManifestError(f"{mfile}: plan must be an object, got {plan!r:.40}; {_FIX}")
    try:
        return TrainingPlan(*(None if plan.get(k) is None else int(plan[k]) for k in TrainingPlan._fields))
    except (TypeError, ValueError):
        raise ManifestError(f"{mfile}: plan must hold integers or null, got {plan!r}; {_FIX}") from None


def made_for(dataset: Any, sha256: str) -> bool:
    """Whether a file recording dataset hash ``sha256`` was made for ``dataset`` (a prepared dataset answers
    to its schema-2 hash too: :meth:`gmp.datasets.format.PreparedDataset.has_sha256`)."""
    known = getattr(dataset, "has_sha256", None)
    return bool(known(sha256)) if known is not None else str(dataset.sha256) == sha256


def _check_made_for(meta: dict[str, Any], mfile: Path, dataset: Any) -> None:
    """Refuse ``dataset`` unless the manifest ``meta`` (read from ``mfile``) was made for it: same sha256,
    same shape."""
    n, m = meta["num_samples"], meta["num_embeddings"]
    if not made_for(dataset, str(meta["dataset_sha256"])):
        raise ManifestError(
            f"{mfile} was made for dataset sha256 {str(meta['dataset_sha256'])[:12]}…, but {dataset.path} "
            f"has sha256 {str(dataset.sha256)[:12]}…; use the dataset it was made for or re-run "
            f"'gmp partition {dataset.path}'."
        )
    if (n, m) != (dataset.num_samples, dataset.num_embeddings):
        raise ManifestError(
            f"{mfile} covers {n} samples x {m} embeddings, {dataset.path} has "
            f"{dataset.num_samples} x {dataset.num_embeddings}; re-run 'gmp partition {dataset.path}'."
        )


def load_manifest(path: str | os.PathLike, *, dataset: Any = None, mmap: bool = True,
                  verify_hash: bool | None = None) -> Manifest:
    """Open and validate a manifest directory (or its manifest.json).

    Parameters
    ----------
    path
        The manifest directory.
    dataset
        A :class:`~gmp.datasets.format.PreparedDataset` the manifest will be
        used with: its sha256 and counts must match.
    mmap
        Memory-map the arrays (default) instead of reading them.
    verify_hash
        Recompute ``placement_sha256`` over the arrays (default: yes, unless the
        environment sets ``GMP_NO_VERIFY=1``); a manifest without the key is
        refused, never silently accepted.

    Raises
    ------
    ManifestError
        One line naming the file that is wrong and the fix.
    """
    mfile = _manifest_file(path)
    path = mfile.parent
    meta = read_versioned_json(mfile, fmt=FORMAT, max_version=SCHEMA_VERSION, error=ManifestError, fix=_FIX)
    verify_hash = verify_enabled(verify_hash)
    check_header(meta, mfile, verify_hash=verify_hash)  # before the upgrade, which reads typed values
    meta = _upgrade(meta, mfile)
    check_header(meta, mfile, verify_hash=verify_hash)
    n, m, w = meta["num_samples"], meta["num_embeddings"], meta["num_workers"]

    if dataset is not None:
        _check_made_for(meta, mfile, dataset)

    try:
        topology = Topology.from_json(meta["topology"])
    except (TopologyError, KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise ManifestError(f"{mfile}: invalid topology ({str(exc).rstrip('.')}); {_FIX}") from None
    if topology.num_workers != w:
        raise ManifestError(f"{mfile}: topology has {topology.num_workers} workers, num_workers is {w}; {_FIX}")

    arrays = {}
    for name, (dtype, fname) in ARRAYS.items():
        f = path / fname
        arr = load_npy(f, error=ManifestError, mmap=mmap, fix=_FIX)
        arrays[name] = arr
        if arr.dtype != np.dtype(dtype):
            raise ManifestError(f"{f} has dtype {arr.dtype}, expected {dtype}; {_FIX}")
    expected = {"sample_worker": (n,), "embedding_primary": (m,), "secondary_indptr": (m + 1,)}
    for name, shape in expected.items():
        if arrays[name].shape != shape:
            raise ManifestError(
                f"{path / ARRAYS[name][1]} has shape {arrays[name].shape}, expected {shape} from "
                f"{MANIFEST_FILE}; {_FIX}"
            )
    sw = arrays["secondary_workers"]
    ip = arrays["secondary_indptr"]
    if sw.ndim != 1:
        raise ManifestError(f"{path / ARRAYS['secondary_workers'][1]} must be 1-D, got shape {sw.shape}; {_FIX}")
    ipa = np.asarray(ip)
    for name in ("sample_worker", "embedding_primary", "secondary_workers"):
        arr = np.asarray(arrays[name])
        if arr.size:
            lo, hi = min_max(arr)
            if lo < 0 or hi >= w:
                raise ManifestError(
                    f"{path / ARRAYS[name][1]} holds worker ids in [{int(lo)}, {int(hi)}], expected "
                    f"[0, {w}) for num_workers {w}; {_FIX}"
                )
    kind, e = secondary_violation(ipa, np.asarray(sw), np.asarray(arrays["embedding_primary"]), np.int64(w))
    if kind == 1:
        raise ManifestError(
            f"{path / ARRAYS['secondary_indptr'][1]} must run non-decreasing from 0 to "
            f"len(secondary_workers) = {sw.size}, {indptr_fault(ipa, sw.size, 'secondary_indptr')}; {_FIX}"
        )
    if kind == 2:
        raise ManifestError(
            f"{path / ARRAYS['secondary_workers'][1]}: embedding {int(e)} has a secondary on its primary's "
            f"worker {int(arrays['embedding_primary'][e])}; {_FIX}"
        )
    if kind == 3:
        raise ManifestError(
            f"{path / ARRAYS['secondary_workers'][1]}: embedding {int(e)} lists the same secondary "
            f"worker twice; {_FIX}"
        )

    part = meta["partitioner"] if isinstance(meta["partitioner"], dict) else {}
    placement = Placement(
        num_workers=w,
        sample_worker=arrays["sample_worker"],
        embedding_primary=arrays["embedding_primary"],
        secondary_indptr=arrays["secondary_indptr"],
        secondary_workers=arrays["secondary_workers"],
        method=str(part.get("name", "unknown")),
        options=dict(part.get("options") or {}),
        seed=part.get("seed"),
        info=dict(part.get("info") or {}),
    )
    if verify_hash:
        got = _placement_hash(placement)
        if got != meta["placement_sha256"]:
            raise ManifestError(
                f"{path}: the arrays do not match placement_sha256 in {MANIFEST_FILE} (got {got[:12]}…, "
                f"expected {str(meta['placement_sha256'])[:12]}…); the files were modified or corrupted: {_FIX}"
            )
    history = _load_history(path, meta, m, mmap=mmap, verify_hash=verify_hash)
    manifest = Manifest(path=path, meta=meta, placement=placement, topology=topology, history=history)
    check_header_against_arrays(manifest)
    return manifest


def check_header_against_arrays(manifest: Manifest) -> None:
    """Refuse a ``manifest.json`` whose counts of the arrays disagree with the arrays: ``num_secondaries`` and
    the ``arrays`` index (each array's file, dtype and shape). The placement's hash covers the arrays, not the
    header, so an edited header is caught here (one :class:`ManifestError` naming the key)."""
    meta, placement = manifest.meta, manifest.placement
    mfile = manifest.path / MANIFEST_FILE
    fix = "re-create it with 'gmp partition' (placement_sha256 covers the arrays, not the header)."
    said = meta.get("num_secondaries")
    if said is not None and int(said) != placement.num_secondaries:
        raise ManifestError(f"{mfile}: num_secondaries is {said}, but secondary_workers.npy holds "
                            f"{placement.num_secondaries:,}; {fix}")
    index = meta.get("arrays") or {}
    for name, entry in index.items():
        if name not in ARRAYS:
            continue
        arr = np.asarray(getattr(placement, name))
        have = {"file": ARRAYS[name][1], "dtype": str(arr.dtype), "shape": list(arr.shape)}
        if not isinstance(entry, Mapping):
            raise ManifestError(f"{mfile}: arrays.{name} must be an object {shown_value(have)}, got "
                                f"{shown_value(entry)}; {fix}")
        for key, value in have.items():
            if key in entry and entry[key] != value:
                raise ManifestError(f"{mfile}: arrays.{name}.{key} is {shown_value(entry[key])}, but the array "
                                    f"{ARRAYS[name][1]} has {shown_value(value)}; {fix}")


def _load_history(path: Path, meta: dict[str, Any], m: int, *, mmap: bool, verify_hash: bool) -> RowHistory | None:
    """The manifest's :class:`RowHistory` (None when its header records none), checked like the placement."""
    hist = meta.get("history")
    if hist is None:
        return None
    arrays = {}
    for name, (dtype, fname) in HISTORY_ARRAYS.items():
        f = path / fname
        arr = load_npy(f, error=ManifestError, mmap=mmap, fix=_FIX)
        if arr.dtype != np.dtype(dtype) or arr.ndim != 1:
            raise ManifestError(f"{f} has dtype {arr.dtype} and {arr.ndim} dimensions, expected 1-D {dtype}; {_FIX}")
        arrays[name] = arr
    if arrays["trained_rows"].shape != ((m + 7) // 8,):
        raise ManifestError(f"{path / 'trained_rows.npy'} has shape {arrays['trained_rows'].shape}, expected "
                            f"({(m + 7) // 8},) for {m} embeddings; {_FIX}")
    created = arrays["created_rows"]
    if created.size and (int(created.min()) < 0 or int(created.max()) >= m):
        raise ManifestError(f"{path / 'created_rows.npy'} holds ids outside [0, {m}); {_FIX}")
    if verify_hash:
        got = hash_arrays(list(arrays.items()))
        if got != header_value(hist, "sha256", "str", path=path / MANIFEST_FILE, error=ManifestError, fix=_FIX,
                               optional=False, where="history."):
            raise ManifestError(f"{path}: trained_rows.npy / created_rows.npy do not match history.sha256 in "
                                f"{MANIFEST_FILE}; the files were modified or corrupted: {_FIX}")
    trained = np.unpackbits(np.asarray(arrays["trained_rows"]), count=m, bitorder="little").view(bool)
    return RowHistory(trained, np.asarray(created, dtype=np.int64))
