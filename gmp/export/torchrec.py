"""Export a placement manifest as a TorchRec row-wise sharding plan.

TorchRec shards a table *row-wise* by cutting it into ``num_ranks``
contiguous blocks of ``ceil(rows / num_ranks)`` rows (rank ``r`` holds rows
``[r * block, (r + 1) * block)``). gmp places every embedding id on a
*primary* worker, scattered over the id space. The export makes the two
agree: inside every categorical field, ids are renumbered so that worker
``w``'s primaries are rows ``[w * B_f, w * B_f + count_f(w))`` of that
field's table, where ``B_f = max_w count_f(w)``; the table is padded to
``num_ranks * B_f`` rows (padding rows are never looked up), so TorchRec's
even row-wise split puts exactly worker ``w``'s primaries on rank ``w``.
One TorchRec table per gmp field, one feature per table.

A field's ids are its ``ranges`` in the dataset (:class:`gmp.datasets.format.FieldInfo`): one
range for a fresh dataset, two or more for one made by ``gmp data synth --continue`` or
``gmp data import --extend`` (the new values of every field come after the parent's ids). The
remap, the statistics and :func:`torchrec_batch` go by those ranges (a table's ``gmp_ranges``),
never by ``gmp_offset`` + ``num_values``, which are kept for reading only.

Written into ``OUT``::

    OUT/
    ├── plan.json          format "gmp.torchrec_export": tables, shards, constraints,
    │                      planner statistics, bytes per epoch, what TorchRec cannot express
    ├── remap.npy          int64 [num_embeddings]: gmp id -> row in its field's table (-1: no field)
    ├── rank_indptr.npy    int64 [num_ranks + 1] ... CSR over ranks of
    ├── rank_samples.npy   int64 [num_train]     ... the training samples each rank reads, in order
    └── README.md          the same for people, and how to load it

``plan.json`` (abridged)::

    {
      "format": "gmp.torchrec_export", "schema_version": 2, "gmp_version": "0.1.0",
      "manifest": "placements/criteo-1m.hybrid.w8", "dataset_sha256": "5b0d...", "dataset_name": "criteo-1m",
      "method": "hybrid", "num_ranks": 8, "embedding_dim": 16, "batch_size": 512,
      "steps_per_epoch": 220,
      "tables": [
        {"name": "t_C1", "feature": "C1", "gmp_offset": 0, "num_values": 1460,
         "gmp_ranges": [[0, 1450], [1228411, 1228421]],
         "num_embeddings": 1464, "block_rows": 183, "rows_per_rank": [183, 181, ...],
         "padding_rows": 4, "pooling_factor": 1.0,
         "shards": [{"rank": 0, "row_offset": 0, "num_rows": 183}, ...],
         "cache": {"load_factors": [0.01, 0.05, 0.1, 0.2, 0.5], "miss_rates": [...],
                   "expected_lookups": 412.5, "cacheability": 0.31, "steps_simulated": 220}}
      ],
      "constraints": {"t_C1": {"sharding_types": ["row_wise"], "pooling_factors": [1.0]}},
      "padding": {"rows": 120, "fraction": 0.0004},
      "bytes_per_epoch": {"gmp": {...}, "torchrec_row_wise": {...}, "torchrec_row_wise_default_ids": {...}},
      "not_expressible": ["...secondaries...", "...staleness..."],
      "needs_gpu": ["..."]
    }

``gmp_ranges`` are the field's global ids as half-open ``[start, stop)`` ranges; local id
``k`` (the ``k``-th id along them) is the field's natural row ``k``, and ``remap`` renumbers
them as above. ``steps_per_epoch`` is ``ceil(max samples per rank / batch_size)``: every
training sample is read once, and a step's batch is shorter once ranks run out
(:func:`epoch_batches` gives each step's samples and the size all ranks pad to).

**Versions.** 2 added ``tables[].gmp_ranges``; a version-1 plan is upgraded on read
(``[[gmp_offset, gmp_offset + num_values]]``), which is what it meant, and
:func:`torchrec_batch` refuses it for a dataset whose fields have more ranges (such a
version-1 export was wrong: re-export it).

**Reading** (:func:`load_export`) checks what the readers use, each failure one
:class:`~gmp.errors.ManifestError` naming the file and the fix (:func:`check_export`): every key of
plan.json they read with its type, the counts agreeing, and the three arrays' dtype (int64), shape
and contents (``rank_indptr`` from 0 by ``samples_per_rank``, ``rank_samples`` every training sample
once, ``remap`` each table's ids to distinct rows of their rank's block).

**Planner statistics.** ``pooling_factor`` is the mean number of ids a
training sample has in the field (TorchRec's ``ParameterConstraints.
pooling_factors``). ``cache`` gives TorchRec's ``CacheStatistics``: the
expected distinct ids of a table per global batch, and the LRU miss rate
of a per-rank cache of ``load_factor * block_rows`` rows, measured by
replaying the batches (each rank's shard sees the distinct ids of its rows
in every global batch) with exact LRU stack distances, for the first
``cache_steps`` steps. ``cacheability`` is the mean miss rate over the load
factors (0 = very cacheable, 1 = not at all).

**Bytes per epoch** (training range, ``embedding_dim`` float32 rows):

* ``gmp``: the placement's ``batch_remote_reads`` + ``batch_remote_pushes``
  rows over the training range at the export's batch size (HET-GMP's static
  schedule, secondaries serving reads locally), counted by the export itself.
* ``torchrec_row_wise``: TorchRec's row-wise pooled lookup under this plan:
  the input all-to-all sends each id whose row is on another rank (8 bytes)
  plus every sample's per-feature lengths to every other rank (4 bytes each:
  ``(R - 1) * num_train * F * 4``); the output reduce-scatter sends each
  rank's partial pooled sums for the other ranks' samples (``(R - 1) *
  num_train * F * D * 4`` bytes per epoch), and the backward all-gather of
  the output gradients as much again. Only the id traffic depends on the
  placement.
* ``torchrec_row_wise_default_ids``: the same without the remap (ids in
  their natural order, TorchRec's even split), for comparison.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numba
import numpy as np

from .._io import (atomic_directory, claim_output, header_value, load_npy, read_versioned_json, release_claim_on_error,
                   shown_value, write_json)
from .._version import __version__
from ..errors import ManifestError, MissingDependencyError
from ..graph import build_graph
from ..metrics import traffic
from ..wording import plural

log = logging.getLogger(__name__)

FORMAT = "gmp.torchrec_export"
SCHEMA_VERSION = 2
VALUE_BYTES = 4  # float32 rows and lengths
ID_BYTES = 8  # int64 ids in TorchRec's KeyedJaggedTensor
DEFAULT_LOAD_FACTORS = (0.01, 0.05, 0.1, 0.2, 0.5)
#: the cache replay stops after the step that brings the replayed lookups over this many
DEFAULT_CACHE_LOOKUPS = 5_000_000

NOT_EXPRESSIBLE = [
    "secondaries: gmp's 2D replicas (HET-GMP Eq. 6) have no TorchRec equivalent; a row lives on exactly one "
    "rank, so every read of a replicated row by another rank goes through the all-to-all. The export keeps "
    "primaries only ('secondaries_dropped' counts them).",
    "staleness: TorchRec's lookups are synchronous every step; gmp's bounded staleness (--staleness s > 0) "
    "cannot be expressed.",
    "communication volume: TorchRec's row-wise pooled lookup moves pooled partial sums (a dense "
    "reduce-scatter of batch x features x dim per rank), not rows; a placement only changes the id "
    "all-to-all (see bytes_per_epoch).",
    "per-rank sample order: TorchRec reads whatever batches the data loader gives each rank; rank_samples.npy "
    "must be fed by your own loader (ranks whose samples run out send empty batches).",
    "topology costs: gmp's worker cost matrix (e.g. 2x8 machines) is not passed on; TorchRec's planner has its "
    "own Topology.",
]

NEEDS_GPU = [
    "fused (FBGEMM TBE) and UVM-caching compute kernels: the cache statistics only matter to TorchRec's "
    "planner and to the fused_uvm_caching kernel, which runs on CUDA devices.",
    "NCCL process groups; on CPU TorchRec runs row-wise sharding with the 'dense' compute kernel over gloo "
    "(what the tests do).",
]


@dataclass(frozen=True)
class TableSpec:
    """One TorchRec table: one gmp categorical field, padded so that rank r holds worker r's primaries."""

    name: str
    feature: str
    gmp_offset: int
    num_values: int
    block_rows: int
    rows_per_rank: tuple[int, ...]
    #: the field's gmp ids as half-open ``(start, stop)`` ranges, in local-id order
    ranges: tuple[tuple[int, int], ...] = ()

    @property
    def num_embeddings(self) -> int:
        return self.block_rows * len(self.rows_per_rank)

    @property
    def padding_rows(self) -> int:
        return self.num_embeddings - self.num_values


@dataclass
class TorchRecExport:
    """An export directory opened from disk (``plan`` is plan.json)."""

    path: Path
    plan: dict[str, Any]
    #: whether remap.npy was checked against the tables (:func:`check_export`); a version-1 plan's tables may
    #: not be its dataset's fields, so its rows are checked by :func:`torchrec_batch` once the dataset is known
    rows_checked: bool = True

    @property
    def num_ranks(self) -> int:
        return int(self.plan["num_ranks"])

    @property
    def tables(self) -> list[dict[str, Any]]:
        return list(self.plan["tables"])

    def remap(self) -> np.ndarray:
        return np.load(self.path / "remap.npy", mmap_mode="r")

    def rank_samples(self, rank: int) -> np.ndarray:
        indptr = np.load(self.path / "rank_indptr.npy")
        return np.load(self.path / "rank_samples.npy", mmap_mode="r")[indptr[rank]:indptr[rank + 1]]

    def __repr__(self) -> str:
        pad = self.plan["padding"]
        b = self.plan["bytes_per_epoch"]
        num_tables = len(self.tables)
        return (f"<TorchRecExport {str(self.path)!r}: {self.plan['method']} on {self.num_ranks} "
                f"{plural('rank', self.num_ranks)}, {num_tables} row-wise {plural('table', num_tables)}, "
                f"padding {pad['fraction']:.2%}, per epoch "
                f"TorchRec {_mib(b['torchrec_row_wise']['total_bytes'])} vs gmp {_mib(b['gmp']['total_bytes'])}>")


class _IdRanges:
    """Which table a gmp id belongs to and its local id there (its natural row), from the tables' ranges.

    >>> r = _IdRanges([[(0, 3), (10, 12)], [(3, 10)]])
    >>> [a.tolist() for a in r.locate(np.array([11, 4, 12, 2]))]
    [[0, 1, -1, 0], [4, 1, -1, 2]]
    """

    def __init__(self, table_ranges: Sequence[Sequence[Sequence[int]]]):
        spans = []
        for t, ranges in enumerate(table_ranges):
            base = 0
            for a, b in ranges:
                if int(b) > int(a):
                    spans.append((int(a), int(b), t, base))
                base += int(b) - int(a)
        spans.sort()
        self.start, self.stop, self.table, self.base = (np.array([s[i] for s in spans], dtype=np.int64)
                                                        for i in range(4))

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(table, local)`` of every id (both -1 for an id in no table)."""
        ids = np.asarray(ids, dtype=np.int64)
        table = np.full(ids.shape, -1, dtype=np.int64)
        local = np.full(ids.shape, -1, dtype=np.int64)
        if not ids.size or not self.start.size:
            return table, local
        k = np.searchsorted(self.start, ids, side="right") - 1
        kc = np.maximum(k, 0)
        inside = (k >= 0) & (ids < self.stop[kc])
        k = kc[inside]
        table[inside] = self.table[k]
        local[inside] = ids[inside] - self.start[k] + self.base[k]
        return table, local


def table_ranges(table: Mapping[str, Any]) -> list[tuple[int, int]]:
    """A plan table's gmp ids as ``(start, stop)`` ranges (``gmp_ranges``)."""
    return [(int(a), int(b)) for a, b in table["gmp_ranges"]]


def _mib(v: float | None) -> str:
    from ..report.tables import fmt_bytes

    return "?" if v is None else fmt_bytes(v)


# --------------------------------------------------------------------------
# the remap
# --------------------------------------------------------------------------
def remap_field(primary: np.ndarray, num_ranks: int) -> tuple[np.ndarray, int, np.ndarray]:
    """Rows of one field's ids so that rank r's primaries are rows ``[r * B, r * B + count[r])``.

    Returns ``(rows, B, count)``; ids keep their relative order inside a rank.

    >>> rows, block, count = remap_field(np.array([1, 0, 1, 1]), 2)
    >>> rows.tolist(), block, count.tolist()
    ([3, 0, 4, 5], 3, [1, 3])
    """
    primary = np.asarray(primary, dtype=np.int64)
    count = np.bincount(primary, minlength=num_ranks)
    block = max(int(count.max()) if count.size else 0, 1)
    order = np.argsort(primary, kind="stable")
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    pos = np.empty(primary.size, dtype=np.int64)
    pos[order] = np.arange(primary.size, dtype=np.int64) - start[primary[order]]
    return primary * block + pos, block, count


def rank_order(sample_worker: np.ndarray, num_train: int, num_ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, samples)``: the training samples of each rank, in dataset order (gmp's static schedule)."""
    sw = np.asarray(sample_worker[:num_train], dtype=np.int64)
    samples = np.argsort(sw, kind="stable").astype(np.int64)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(sw, minlength=num_ranks))]).astype(np.int64)
    return indptr, samples


# --------------------------------------------------------------------------
# LRU miss rates by stack distance
# --------------------------------------------------------------------------
@numba.njit(cache=True)
def _stack_distances(stream, num_ids):  # pragma: no cover - compiled
    """LRU stack distance of every access (-1 = first access): distinct ids since its last access.

    A Fenwick tree over access positions marks the last access of every id.
    """
    n = stream.size
    tree = np.zeros(n + 1, dtype=np.int64)
    last = np.full(num_ids, -1, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    marked = 0
    for i in range(n):
        x = stream[i]
        p = last[x]
        if p < 0:
            out[i] = -1
        else:
            # marked positions <= p
            s = 0
            j = p + 1
            while j > 0:
                s += tree[j]
                j -= j & (-j)
            out[i] = marked - s  # marked positions in (p, i)
            j = p + 1
            while j <= n:
                tree[j] -= 1
                j += j & (-j)
            marked -= 1
        j = i + 1
        while j <= n:
            tree[j] += 1
            j += j & (-j)
        marked += 1
        last[x] = i
    return out


def lru_miss_rates(stream: np.ndarray, capacities: Sequence[int]) -> list[float]:
    """Miss rate of an LRU cache of each capacity on an access stream (ids in ``[0, max]``).

    >>> lru_miss_rates(np.array([0, 1, 0, 2, 0, 1]), [1, 2, 3])
    [1.0, 0.6666666666666666, 0.5]
    """
    stream = np.asarray(stream, dtype=np.int64)
    if stream.size == 0:
        return [0.0 for _ in capacities]
    dist = _stack_distances(stream, int(stream.max()) + 1)
    return [float(np.mean((dist < 0) | (dist >= int(c)))) for c in capacities]


# --------------------------------------------------------------------------
# the export
# --------------------------------------------------------------------------
def _open(manifest: Any, dataset: Any):
    from ..datasets.format import PreparedDataset, load_dataset
    from ..manifest import Manifest, load_manifest

    ds = dataset
    if isinstance(ds, (str, os.PathLike)):
        ds = load_dataset(ds)
    m = manifest if isinstance(manifest, Manifest) else None
    if ds is None:  # a manifest records its dataset's hash and name, not where it is
        name = (m if m is not None else load_manifest(manifest)).dataset_name
        exc = ManifestError(f"export torchrec: the dataset is needed (fields, samples); pass dataset=DIR, the "
                            f"one the manifest was made for{f' ({name!r})' if name else ''}.")
        exc.param = "dataset"  # the CLI words it with its flag (cli/_flags.py)
        raise exc
    if not isinstance(ds, PreparedDataset):
        raise ManifestError(f"export torchrec: dataset must be a prepared dataset or its path, got {type(ds).__name__}.")
    if m is None:
        m = load_manifest(manifest, dataset=ds)
    else:
        m.check_dataset(ds)
    return m, ds


def _edge_chunks(ds, num_train: int, max_edges: int = 1 << 24):
    """``(first_sample, indptr_slice, indices_slice)`` over the training range, in bounded pieces."""
    indptr = np.asarray(ds.indptr)
    s = 0
    while s < num_train:
        e = int(np.searchsorted(indptr, indptr[s] + max_edges, side="right")) - 1
        e = min(max(e, s + 1), num_train)
        lo, hi = int(indptr[s]), int(indptr[e])
        yield s, indptr[s:e + 1] - lo, np.asarray(ds.indices[lo:hi])
        s = e


#: the files an export writes: anything else found in ``--out`` when it is replaced is someone else's
EXPORT_FILES = frozenset({"remap.npy", "rank_indptr.npy", "rank_samples.npy", "plan.json", "README.md"})


def check_settings(*, embedding_dim: int | None = None, batch_size: int | None = None,
                   load_factors: Sequence[float] = DEFAULT_LOAD_FACTORS) -> None:
    """Refuse settings the export cannot use (None: not given), before anything is read or written.

    What :func:`export_torchrec` checks first; a caller that words a warning about the settings
    (``gmp export torchrec``'s "optimised for another setting") calls it before, so that no
    warning precedes the refusal.

    >>> check_settings(embedding_dim=6)
    Traceback (most recent call last):
    ...
    gmp.errors.ManifestError: export torchrec: embedding_dim must be a positive multiple of 4 (FBGEMM's row \
alignment), got 6; pass `embedding_dim` 8.
    """
    if embedding_dim is not None and (embedding_dim < 4 or embedding_dim % 4):
        raise ManifestError(f"export torchrec: embedding_dim must be a positive multiple of 4 (FBGEMM's row "
                            f"alignment), got {embedding_dim}; pass `embedding_dim` "
                            f"{max(4, 4 * math.ceil(embedding_dim / 4))}.")
    if batch_size is not None and batch_size < 1:
        raise ManifestError(f"export torchrec: batch_size must be >= 1, got {batch_size}.")
    if any(not 0 < f <= 1 for f in load_factors):
        raise ManifestError(f"export torchrec: load_factors must be in (0, 1], got {list(load_factors)}.")


@release_claim_on_error("out")
def export_torchrec(manifest: Any, out: str | os.PathLike, *, dataset: Any = None,
                    embedding_dim: int | None = None, batch_size: int | None = None,
                    load_factors: Sequence[float] = DEFAULT_LOAD_FACTORS,
                    cache_lookups: int = DEFAULT_CACHE_LOOKUPS, overwrite: bool = False) -> TorchRecExport:
    """Write the TorchRec export of a manifest into ``out`` (see the module docstring).

    Parameters
    ----------
    manifest, dataset
        The manifest (path or loaded) and the dataset it was made for (path
        or loaded; checked by hash).
    embedding_dim, batch_size
        Row width (a multiple of 4: FBGEMM's requirement) and per-rank
        batch; default the manifest's.
    load_factors, cache_lookups
        Cache sizes (fractions of a shard) for the LRU miss rates, and the
        replay budget (lookups) that bounds their cost.
    """
    # the given settings first: a refusal never waits for the manifest and the dataset to be read
    check_settings(embedding_dim=None if embedding_dim is None else int(embedding_dim),  # 0 is refused
                   batch_size=None if batch_size is None else int(batch_size), load_factors=load_factors)
    m, ds = _open(manifest, dataset)
    meta = m.meta
    dim = int(meta.get("embedding_dim") or 16) if embedding_dim is None else int(embedding_dim)
    bs = int(meta.get("batch_size") or 512) if batch_size is None else int(batch_size)
    check_settings(embedding_dim=dim, batch_size=bs)  # the manifest's, when none was given
    out = Path(out)
    claim_output(out)  # one writer from here to the end; atomic_directory replaces only what is there now
    if out.exists() and not overwrite and any(out.iterdir()):
        raise ManifestError(f"export torchrec: {out} already exists; pass `overwrite=True` or another `out`.")

    placement = m.placement
    num_ranks = placement.num_workers
    primary = np.asarray(placement.embedding_primary)
    fields = ds.categorical_fields
    if not fields:
        raise ManifestError(f"export torchrec: {ds.path} has no categorical fields, so there is nothing to shard.")

    remap = np.full(ds.num_embeddings, -1, dtype=np.int64)
    tables: list[TableSpec] = []
    for f in fields:
        # the field's ids along its ranges (a dataset made by 'gmp data synth --continue' or 'gmp data import
        # --extend' gives a field its new values after the parent's ids): local id k is the k-th of them
        ids = f.ids()
        rows, block, count = remap_field(primary[ids], num_ranks)
        remap[ids] = rows
        tables.append(TableSpec(f"t_{f.name}", f.name, int(f.offset), int(f.num_values), block,
                                tuple(int(c) for c in count), tuple((int(a), int(b)) for a, b in f.id_ranges)))

    num_train = ds.num_train
    indptr, samples = rank_order(placement.sample_worker, num_train, num_ranks)
    per_rank = np.diff(indptr)
    steps = int(math.ceil(per_rank.max() / bs)) if num_train else 0
    field_of = ds.field_of_embedding().astype(np.int64)
    num_fields = len(fields)

    # one pass over the training edges: pooling factors and the id all-to-all under both id orders
    default_block = np.array([max(1, math.ceil(t.num_values / num_ranks)) for t in tables], dtype=np.int64)
    locate = _IdRanges([t.ranges for t in tables]).locate  # natural order: a field's local id is its row
    edges_per_field = np.zeros(num_fields, dtype=np.int64)
    remote_ids = 0
    remote_ids_default = 0
    sample_worker = np.asarray(placement.sample_worker)
    for first, ip, idx in _edge_chunks(ds, num_train):
        fo = field_of[idx]
        keep = fo >= 0
        worker = np.repeat(np.asarray(sample_worker[first:first + ip.size - 1], dtype=np.int64), np.diff(ip))[keep]
        idx, fo = idx[keep].astype(np.int64), fo[keep]
        edges_per_field += np.bincount(fo, minlength=num_fields)
        remote_ids += int(np.count_nonzero(primary[idx] != worker))
        remote_ids_default += int(np.count_nonzero(locate(idx)[1] // default_block[fo] != worker))

    pooling = (edges_per_field / max(num_train, 1)).tolist()
    cache = _cache_statistics(ds, tables, remap, field_of, indptr, samples, bs, load_factors, cache_lookups)

    table_json = []
    for t, pf, c in zip(tables, pooling, cache):
        table_json.append({
            "name": t.name, "feature": t.feature, "gmp_offset": t.gmp_offset, "num_values": t.num_values,
            "gmp_ranges": [list(r) for r in t.ranges],
            "num_embeddings": t.num_embeddings, "block_rows": t.block_rows, "rows_per_rank": list(t.rows_per_rank),
            "padding_rows": t.padding_rows, "pooling_factor": round(float(pf), 6),
            "shards": [{"rank": r, "row_offset": r * t.block_rows, "num_rows": t.block_rows} for r in range(num_ranks)],
            "cache": c,
        })
    padding = sum(t.padding_rows for t in tables)
    total_rows = sum(t.num_embeddings for t in tables)
    row_bytes = dim * VALUE_BYTES
    # every rank sends its samples' per-feature lengths to the R - 1 other ranks, and (forward reduce-scatter)
    # its partial pooled sums for every other rank's samples; the backward all-gather of the output
    # gradients moves as much again. Summed over the epoch both are proportional to the training samples.
    lengths = (num_ranks - 1) * int(num_train) * num_fields * VALUE_BYTES
    pooled = 2 * (num_ranks - 1) * int(num_train) * num_fields * row_bytes

    def torchrec_bytes(ids: int) -> dict[str, Any]:
        return {"remote_ids": ids, "ids_bytes": ids * ID_BYTES, "lengths_bytes": lengths,
                "pooled_bytes": pooled, "total_bytes": ids * ID_BYTES + lengths + pooled}

    # gmp's row: the placement's own training-range traffic at this export's batch (Eq. 1's pulls and pushes,
    # gmp.metrics.traffic), so both rows count the same epoch; never a report.json that may belong to another
    # placement or batch size
    train_traffic = traffic(build_graph(ds), placement, bs, num_train=num_train)
    reads, pushes = int(train_traffic.read.sum()), int(train_traffic.push.sum())
    gmp_bytes = {
        "scope": "training range",
        "batch_size": bs,
        "rows_read": reads, "rows_pushed": pushes,
        "rows_bytes": int((reads + pushes) * row_bytes),
        "ids_bytes": int(reads * ID_BYTES),
        "total_bytes": int((reads + pushes) * row_bytes + reads * ID_BYTES),
    }
    constraints = {t["name"]: {"sharding_types": ["row_wise"], "compute_kernels": ["dense", "fused"],
                               "pooling_factors": [t["pooling_factor"]], "feature_names": [t["feature"]],
                               "cache": {"algorithm": "LRU", "load_factor": 0.1}}
                   for t in table_json}
    from ..report import dataset_name_of

    plan = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "gmp_version": __version__,
        "manifest": str(m.path),
        "dataset": str(ds.path),
        "dataset_sha256": ds.sha256,
        "dataset_name": dataset_name_of(meta) or dataset_name_of(ds.meta, ds.path),
        "method": m.method,
        "num_ranks": num_ranks,
        "embedding_dim": dim,
        "batch_size": bs,
        "num_train": int(num_train),
        "samples_per_rank": per_rank.tolist(),
        "steps_per_epoch": steps,
        "tables": table_json,
        "constraints": constraints,
        "padding": {"rows": int(padding), "fraction": padding / max(total_rows, 1),
                    "worst_table": max(table_json, key=lambda t: t["padding_rows"])["name"]},
        "secondaries_dropped": int(placement.num_secondaries),
        "bytes_per_epoch": {
            "gmp": gmp_bytes,
            "torchrec_row_wise": torchrec_bytes(remote_ids),
            "torchrec_row_wise_default_ids": torchrec_bytes(remote_ids_default),
        },
        "not_expressible": NOT_EXPRESSIBLE,
        "needs_gpu": NEEDS_GPU,
    }
    with atomic_directory(out, overwrite=True, kind=FORMAT, own=EXPORT_FILES) as tmp:
        np.save(tmp / "remap.npy", remap)
        np.save(tmp / "rank_indptr.npy", indptr)
        np.save(tmp / "rank_samples.npy", samples)
        write_json(tmp / "plan.json", plan)
        (tmp / "README.md").write_text(render_readme(plan), encoding="utf-8")
    return TorchRecExport(out, plan)


def _cache_statistics(ds, tables: list[TableSpec], remap: np.ndarray, field_of: np.ndarray, indptr: np.ndarray,
                      samples: np.ndarray, batch_size: int, load_factors: Sequence[float],
                      budget: int) -> list[dict[str, Any]]:
    """Per table: expected distinct ids per global batch and LRU miss rates per load factor (module docstring)."""
    num_ranks = indptr.size - 1
    per_rank = np.diff(indptr)
    if samples.size == 0:
        return [{"load_factors": list(load_factors), "miss_rates": [1.0] * len(load_factors),
                 "expected_lookups": 0.0, "cacheability": 1.0, "steps_simulated": 0} for _ in tables]
    # step of every training sample (rank r's k-th sample is in step k // batch_size)
    step_of = np.empty(samples.size, dtype=np.int64)
    for r in range(num_ranks):
        step_of[indptr[r]:indptr[r + 1]] = np.arange(per_rank[r]) // batch_size
    order = np.argsort(step_of, kind="stable")
    ordered, steps = samples[order], step_of[order]
    sptr = np.asarray(ds.indptr)
    deg = sptr[ordered + 1] - sptr[ordered]
    last = int(np.searchsorted(np.cumsum(deg), budget, side="left"))
    last_step = int(steps[min(last, steps.size - 1)])
    keep = steps <= last_step
    ordered, steps, deg = ordered[keep], steps[keep], deg[keep]
    ids = np.concatenate([np.asarray(ds.indices[sptr[s]:sptr[s + 1]]) for s in ordered]) if ordered.size else \
        np.zeros(0, dtype=np.int64)
    step_e = np.repeat(steps, deg)
    fo = field_of[ids]
    ok = fo >= 0
    ids, step_e, fo = ids[ok].astype(np.int64), step_e[ok], fo[ok]
    rows = remap[ids]
    out = []
    num_steps = last_step + 1
    for t_i, t in enumerate(tables):
        sel = fo == t_i
        r, st = rows[sel], step_e[sel]
        # distinct (step, row) pairs in step order: what the table's shards look up
        key = np.unique(st * t.num_embeddings + r)
        st_u, r_u = key // t.num_embeddings, key % t.num_embeddings
        owner = r_u // t.block_rows
        misses = np.zeros(len(load_factors))
        for rank in range(num_ranks):
            stream = r_u[owner == rank] - rank * t.block_rows
            if stream.size:
                caps = [max(1, int(f * t.block_rows)) for f in load_factors]
                misses += np.array(lru_miss_rates(stream, caps)) * stream.size
        lookups = key.size
        rates = (misses / lookups).tolist() if lookups else [1.0] * len(load_factors)
        out.append({"load_factors": [float(f) for f in load_factors], "miss_rates": [round(x, 6) for x in rates],
                    "expected_lookups": round(lookups / num_steps, 3), "cacheability": round(float(np.mean(rates)), 6),
                    "steps_simulated": num_steps})
        del st_u
    return out


_FIX = "re-create it with 'gmp export torchrec MANIFEST --dataset DIR --out DIR'."


def _upgrade_1_to_2(plan: dict[str, Any]) -> dict[str, Any]:
    """Version 2 adds ``tables[].gmp_ranges``: a version-1 table meant the one range
    ``[gmp_offset, gmp_offset + num_values)`` (:func:`torchrec_batch` refuses it for a dataset whose
    field has more ranges)."""
    plan = dict(plan)
    plan["tables"] = [{**t, "gmp_ranges": [[int(t["gmp_offset"]), int(t["gmp_offset"]) + int(t["num_values"])]]}
                      for t in plan["tables"]]
    plan["schema_version"] = 2
    return plan


def load_export(path: str | os.PathLike) -> TorchRecExport:
    """Open an export directory: plan.json's format and version (older versions upgraded), its keys and
    types, and the three arrays (dtype, shape, range, :func:`check_export`); each failure one
    :class:`ManifestError` naming the file and the fix."""
    path = Path(path)
    pfile = path / "plan.json"
    plan = read_versioned_json(pfile, fmt=FORMAT, max_version=SCHEMA_VERSION, error=ManifestError, fix=_FIX)
    if plan["schema_version"] < 2:  # what the upgrade reads, typed first
        for i, t in enumerate(_plan_tables(plan, pfile)):
            for key in ("gmp_offset", "num_values"):
                header_value(t, key, "int>=0", path=pfile, error=ManifestError, fix=_FIX, where=f"tables[{i}].")
    written_as = plan["schema_version"]
    upgrades = {1: _upgrade_1_to_2}  # v -> v + 1
    while plan["schema_version"] < SCHEMA_VERSION:
        plan = upgrades[plan["schema_version"]](plan)
    # a version-1 table meant one range, which is its field's only when the dataset was not extended
    # (torchrec_batch tells the two apart, and refuses the other): its ids and rows are checked there
    export = TorchRecExport(path, plan, rows_checked=written_as >= 2)
    check_export(export)
    return export


def _plan_tables(plan: Mapping[str, Any], pfile: Path) -> list[dict[str, Any]]:
    tables = header_value(plan, "tables", "list", path=pfile, error=ManifestError, fix=_FIX)
    if not tables:
        raise ManifestError(f"{pfile}: tables is empty, expected one table per categorical field; {_FIX}")
    for i, t in enumerate(tables):
        if not isinstance(t, dict):
            raise ManifestError(f"{pfile}: tables[{i}] must be an object, got {shown_value(t)}; {_FIX}")
    return tables


def check_export(export: TorchRecExport) -> None:
    """Refuse an export whose plan.json or arrays the readers (:func:`epoch_batches`, :func:`torchrec_batch`,
    ``torchrec_*``) cannot use as written: every key they read with its type, the counts agreeing
    (``samples_per_rank`` sums to ``num_train``, ``steps_per_epoch`` is ``ceil(max / batch_size)``, a table's
    ``gmp_ranges`` hold ``num_values`` ids and no other table's, its ``rows_per_rank`` fit ``block_rows``), and
    the arrays: int64, their shapes, ``rank_indptr`` running from 0 by ``samples_per_rank``, ``rank_samples``
    every training sample once, and (unless ``export.rows_checked`` is False: a version-1 plan) ``remap``
    giving each table's ids distinct rows of their rank's block (never a padding row), and no id in two
    tables. One :class:`ManifestError` naming the file, the key and the fix."""
    plan, path = export.plan, export.path
    pfile = path / "plan.json"

    def get(obj, key, kind, where="", optional=False):
        return header_value(obj, key, kind, path=pfile, error=ManifestError, fix=_FIX, optional=optional,
                            where=where)

    def refuse(what: str) -> ManifestError:
        return ManifestError(f"{pfile}: {what}; {_FIX}")

    ranks = get(plan, "num_ranks", "int>=1")
    for key in ("embedding_dim", "batch_size"):
        get(plan, key, "int>=1")
    num_train = get(plan, "num_train", "int>=0")
    get(plan, "method", "str")
    get(plan, "dataset_sha256", "str", optional=True)
    per_rank = get(plan, "samples_per_rank", "list")
    if len(per_rank) != ranks or any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in per_rank):
        raise refuse(f"samples_per_rank must be {ranks} non-negative integers (num_ranks), got {shown_value(per_rank)}")
    if sum(per_rank) != num_train:
        raise refuse(f"samples_per_rank sums to {sum(per_rank)}, expected num_train {num_train}")
    steps = get(plan, "steps_per_epoch", "int>=0")
    want = -(-max(per_rank) // plan["batch_size"]) if num_train else 0
    if steps != want:
        raise refuse(f"steps_per_epoch is {steps}, expected {want} (the most samples per rank, "
                     f"{max(per_rank)}, over batch_size {plan['batch_size']}, rounded up)")
    constraints = get(plan, "constraints", "dict")
    spans = []
    seen: dict[str, set[str]] = {"name": set(), "feature": set()}
    for i, t in enumerate(_plan_tables(plan, pfile)):
        where = f"tables[{i}]."
        for key, names in seen.items():  # a KeyedJaggedTensor's keys and TorchRec's tables are unique
            value = get(t, key, "str", where)
            if value in names:
                raise refuse(f"two tables have the {key} {shown_value(value)}, expected unique ones")
            names.add(value)
        name = t["name"]
        num_values = get(t, "num_values", "int>=0", where)
        get(t, "gmp_offset", "int>=0", where)
        ranges = get(t, "gmp_ranges", "list", where)
        if any(not isinstance(r, list) or len(r) != 2 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                 for x in r) or not 0 <= r[0] <= r[1] for r in ranges):
            raise refuse(f"{where}gmp_ranges must be [start, stop] pairs of ids with 0 <= start <= stop, got "
                         f"{shown_value(ranges)}")
        if sum(b - a for a, b in ranges) != num_values:
            raise refuse(f"{where}gmp_ranges hold {sum(b - a for a, b in ranges)} ids, expected num_values "
                         f"{num_values}")
        spans += [(a, b, name) for a, b in ranges if b > a]
        block = get(t, "block_rows", "int>=1", where)
        rows = get(t, "rows_per_rank", "list", where)
        if len(rows) != ranks or any(not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= block
                                     for n in rows) or sum(rows) != num_values:
            raise refuse(f"{where}rows_per_rank must be {ranks} integers in [0, block_rows={block}] summing to "
                         f"num_values {num_values}, got {shown_value(rows)}")
        if get(t, "num_embeddings", "int>=1", where) != block * ranks:
            raise refuse(f"{where}num_embeddings is {t['num_embeddings']}, expected block_rows x num_ranks = "
                         f"{block * ranks}")
        shards = [{"rank": r, "row_offset": r * block, "num_rows": block} for r in range(ranks)]
        if get(t, "shards", "list", where) != shards:
            raise refuse(f"{where}shards must be the even row-wise split {shown_value(shards)}, got "
                         f"{shown_value(t['shards'])}")
        cache = get(t, "cache", "dict", where)
        for key in ("expected_lookups", "cacheability"):
            get(cache, key, "number", f"{where}cache.")
        factors, rates = get(cache, "load_factors", "list", f"{where}cache."), get(cache, "miss_rates", "list",
                                                                                   f"{where}cache.")
        if len(factors) != len(rates) or any(not _is_fraction(x) for x in [*factors, *rates]):
            raise refuse(f"{where}cache.load_factors and .miss_rates must be lists of numbers in [0, 1] of one "
                         f"length, got {shown_value(factors)} and {shown_value(rates)}")
        c = get(constraints, name, "dict", "constraints.")
        for key in ("sharding_types", "compute_kernels", "pooling_factors", "feature_names"):
            get(c, key, "list", f"constraints.{name}.")
        get(get(c, "cache", "dict", f"constraints.{name}."), "load_factor", "number", f"constraints.{name}.cache.")
    spans.sort()
    for (a, b, first), (c, d, second) in zip(spans, spans[1:]):
        if c < b and export.rows_checked:
            raise refuse(f"table {shown_value(second)}'s ids [{c}, {d}) overlap table {shown_value(first)}'s "
                         f"[{a}, {b}), expected every id in one table at most")
    _check_order(export)
    remap = _load_ids(path / "remap.npy", None)
    end = max((b for _, b, _ in spans), default=0)
    if remap.size < end:
        raise ManifestError(f"{path / 'remap.npy'} has shape {remap.shape}, expected at least ({end},) for the "
                            f"tables' ids; {_FIX}")
    if export.rows_checked:
        _check_rows(export, remap)


def _is_fraction(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1


def _load_ids(f: Path, shape: tuple[int, ...] | None) -> np.ndarray:
    """A 1-D int64 array of an export (``shape``: the one plan.json implies; None: any length), read whole."""
    arr = load_npy(f, error=ManifestError, mmap=True, fix=_FIX)
    if arr.dtype != np.dtype(np.int64) or arr.ndim != 1:
        raise ManifestError(f"{f} has dtype {arr.dtype} and shape {arr.shape}, expected 1-D int64; {_FIX}")
    if shape is not None and arr.shape != shape:
        raise ManifestError(f"{f} has shape {arr.shape}, expected {shape} from plan.json; {_FIX}")
    return np.asarray(arr)


def _check_order(export: TorchRecExport) -> None:
    """``rank_indptr.npy`` and ``rank_samples.npy`` against the checked plan (:func:`check_export`)."""
    plan, path = export.plan, export.path
    ranks, num_train = int(plan["num_ranks"]), int(plan["num_train"])
    indptr = _load_ids(path / "rank_indptr.npy", (ranks + 1,))
    want = np.concatenate([[0], np.cumsum(plan["samples_per_rank"])])
    if not np.array_equal(indptr, want):
        r = int(np.flatnonzero(indptr != want)[0])
        raise ManifestError(f"{path / 'rank_indptr.npy'} holds {int(indptr[r])} at {r}, expected {int(want[r])} "
                            f"(from 0 by plan.json's samples_per_rank); {_FIX}")
    samples = _load_ids(path / "rank_samples.npy", (num_train,))
    seen = np.zeros(num_train, dtype=bool)
    bad = np.flatnonzero((samples < 0) | (samples >= num_train))
    if not bad.size:
        seen[samples] = True
    if bad.size or not seen.all():
        what = (f"sample {int(samples[bad[0]])} at {int(bad[0])}" if bad.size else
                f"sample {int(np.flatnonzero(~seen)[0])} nowhere (another twice)")
        raise ManifestError(f"{path / 'rank_samples.npy'} holds {what}, expected each training sample in "
                            f"[0, num_train={num_train}) once; {_FIX}")


def _check_rows(export: TorchRecExport, remap: np.ndarray) -> None:
    """Each table's ids in ``remap`` go to distinct rows of their rank's block (:func:`check_export`)."""
    path = export.path
    for t in export.plan["tables"]:
        ids = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in table_ranges(t)] or
                             [np.zeros(0, dtype=np.int64)])
        rows, block = remap[ids], int(t["block_rows"])
        ok = (rows >= 0) & (rows < int(t["num_embeddings"]))
        ok[ok] = rows[ok] % block < np.asarray(t["rows_per_rank"], dtype=np.int64)[rows[ok] // block]
        if not ok.all():
            k = int(np.flatnonzero(~ok)[0])
            raise ManifestError(f"{path / 'remap.npy'} maps id {int(ids[k])} of table {t['name']} to row "
                                f"{int(rows[k])}, expected a row in [r x {block}, r x {block} + rows_per_rank[r]) "
                                f"for some rank r (plan.json's block_rows and rows_per_rank); {_FIX}")
        if rows.size and np.unique(rows).size != rows.size:
            raise ManifestError(f"{path / 'remap.npy'} maps two ids of table {t['name']} to one row, expected "
                                f"distinct rows; {_FIX}")


def epoch_batches(export: TorchRecExport, rank: int) -> list[tuple[np.ndarray, int]]:
    """One epoch of ``rank``: ``(sample_ids, size)`` per step, ``steps_per_epoch`` steps.

    Step ``k`` reads the rank's next ``batch_size`` samples (fewer, or none, once they run out);
    ``size`` is the same on every rank: ``min(batch_size, the most samples any rank has left)``.
    TorchRec's row-wise lookup (1.8, CPU) wants the same batch size on every rank at every step,
    so pass it on: ``torchrec_batch(export, dataset, sample_ids, pad_to=size)`` pads with empty
    samples (which a loss should mask). Every training sample is read once, also when
    ``batch_size`` is larger than a rank's samples (one step). With ``batch_size`` 2 and 5 and 2
    samples on ranks 0 and 1, rank 1 reads 2, 0 and 0 samples in steps of sizes 2, 2 and 1.
    """
    batch = int(export.plan["batch_size"])
    per_rank = np.asarray(export.plan["samples_per_rank"], dtype=np.int64)
    samples = np.asarray(export.rank_samples(rank))
    out = []
    for k in range(int(export.plan["steps_per_epoch"])):
        size = int(min(batch, (per_rank - k * batch).max()))
        out.append((samples[k * batch:k * batch + size], size))
    return out


def render_readme(plan: Mapping[str, Any]) -> str:
    b = plan["bytes_per_epoch"]
    gmp_b, trec, dflt = b["gmp"], b["torchrec_row_wise"], b["torchrec_row_wise_default_ids"]
    ranks, num_tables, steps = plan["num_ranks"], len(plan["tables"]), plan["steps_per_epoch"]
    lines = [
        f"# TorchRec export of {plan['manifest']}",
        "",
        f"{plan['method']} placement of {plan.get('dataset_name') or plan['dataset']} on {ranks} "
        f"{plural('rank', ranks)}, {num_tables} {plural('table', num_tables)} (one per field, row-wise), embedding "
        f"dim {plan['embedding_dim']}, batch {plan['batch_size']} per rank, {steps} {plural('step', steps)} per "
        f"epoch (samples per rank: {', '.join(f'{n:,}' for n in plan['samples_per_rank'])}; a step's batch is "
        f"shorter once ranks run out, and every sample is read once).",
        "",
        "## Files",
        "",
        "* `remap.npy` — int64 per gmp embedding id: its row in its field's table (-1: not a categorical id).",
        "  Feed TorchRec `KeyedJaggedTensor(keys=[feature...], values=remap[ids], lengths=...)`.",
        "* `rank_indptr.npy`, `rank_samples.npy` — rank r reads training samples "
        "`rank_samples[rank_indptr[r]:rank_indptr[r+1]]` in that order, `batch_size` at a time "
        "(`epoch_batches(exp, r)`: each step's samples and the batch size every rank pads to).",
        "* `plan.json` — tables, shards (rank r holds rows `[r * block_rows, (r + 1) * block_rows)`), "
        "`ParameterConstraints` fields, cache statistics, bytes.",
        "",
        f"Padding: {plan['padding']['rows']:,} {plural('row', plan['padding']['rows'])} "
        f"({plan['padding']['fraction']:.2%} of all table rows; most in "
        f"{plan['padding']['worst_table']}). Padding rows are never looked up.",
        "",
        "## What TorchRec cannot express",
        "",
        *[f"* {line}" for line in plan["not_expressible"]],
        f"* Dropped: this placement's {plan['secondaries_dropped']:,} "
        f"{plural('secondary', plan['secondaries_dropped'], 'secondaries')}.",
        "",
        "## What needs a GPU",
        "",
        *[f"* {line}" for line in plan["needs_gpu"]],
        "",
        "## Bytes per epoch",
        "",
        "| run | ids | lengths | rows / pooled sums | total |",
        "|---|---|---|---|---|",
        f"| gmp ({gmp_b['scope']}) | {_mib(gmp_b['ids_bytes'])} | — | {_mib(gmp_b['rows_bytes'])} | "
        f"{_mib(gmp_b['total_bytes'])} |",
        f"| TorchRec row-wise, this plan | {_mib(trec['ids_bytes'])} | {_mib(trec['lengths_bytes'])} | "
        f"{_mib(trec['pooled_bytes'])} | {_mib(trec['total_bytes'])} |",
        f"| TorchRec row-wise, ids in natural order | {_mib(dflt['ids_bytes'])} | {_mib(dflt['lengths_bytes'])} | "
        f"{_mib(dflt['pooled_bytes'])} | {_mib(dflt['total_bytes'])} |",
        "",
        "## Loading it",
        "",
        "```python",
        "from gmp.export.torchrec import load_export, torchrec_tables, torchrec_sharding_plan, torchrec_constraints",
        "exp = load_export('THIS_DIR')",
        "tables = torchrec_tables(exp)                 # [EmbeddingBagConfig, ...]",
        "ebc = EmbeddingBagCollection(tables=tables, device=torch.device('meta'))",
        "plan = torchrec_sharding_plan(exp, ebc)       # ShardingPlan: rank r holds worker r's primaries",
        "constraints = torchrec_constraints(exp)       # for EmbeddingShardingPlanner(constraints=...)",
        "model = DistributedModelParallel(ebc, device=torch.device('cpu'), plan=plan)",
        "```",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# TorchRec objects (optional extra: pip install 'gmp[peers]')
# --------------------------------------------------------------------------
def _torchrec():
    try:
        import torchrec  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            f"TorchRec is not installed ({exc}); install the 'peers' extra: pip install fbgemm-gpu-cpu==1.8.0 "
            "tensordict torchmetrics==1.0.3 pyre-extensions && pip install --no-deps torchrec==1.8.0."
        ) from None
    import torchrec

    return torchrec


def torchrec_tables(export: TorchRecExport) -> list:
    """One ``EmbeddingBagConfig`` per table (padded row counts, one feature each)."""
    torchrec = _torchrec()
    return [torchrec.EmbeddingBagConfig(name=t["name"], embedding_dim=int(export.plan["embedding_dim"]),
                                        num_embeddings=int(t["num_embeddings"]), feature_names=[t["feature"]])
            for t in export.tables]


def torchrec_sharding_plan(export: TorchRecExport, module, *, device_type: str = "cpu", module_path: str = ""):
    """The ``ShardingPlan`` that puts worker r's primaries on rank r (row-wise, even blocks).

    Built with TorchRec's own ``row_wise()`` helper; the shards it computes are
    checked against the export's (a mismatch is a ManifestError).
    """
    _torchrec()
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise
    from torchrec.distributed.types import ShardingPlan

    ranks = export.num_ranks
    mplan = construct_module_sharding_plan(module, per_param_sharding={t["name"]: row_wise() for t in export.tables},
                                           local_size=ranks, world_size=ranks, device_type=device_type)
    for t in export.tables:
        shards = mplan[t["name"]].sharding_spec.shards
        got = [(int(s.shard_offsets[0]), int(s.shard_sizes[0])) for s in shards]
        want = [(s["row_offset"], s["num_rows"]) for s in t["shards"]]
        if got != want:
            raise ManifestError(f"TorchRec's row-wise split of {t['name']} is {got}, the export expects {want}; "
                                "this TorchRec version splits rows differently.")
    return ShardingPlan({module_path: mplan})


def torchrec_constraints(export: TorchRecExport) -> dict:
    """``{table: ParameterConstraints}``: row-wise only, pooling factors, LRU cache statistics."""
    _torchrec()
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import CacheAlgorithm, CacheParams, CacheStatistics

    class GmpCacheStatistics(CacheStatistics):
        """Miss rates measured by gmp's LRU replay, interpolated linearly between the measured load factors."""

        def __init__(self, cache: Mapping[str, Any]):
            self._lf = [0.0] + list(cache["load_factors"]) + [1.0]
            self._miss = [1.0] + list(cache["miss_rates"]) + [0.0]
            self._lookups = float(cache["expected_lookups"])
            self._cacheability = float(cache["cacheability"])

        @property
        def expected_lookups(self) -> float:
            return self._lookups

        def expected_miss_rate(self, clf: float) -> float:
            return float(np.interp(clf, self._lf, self._miss))

        @property
        def cacheability(self) -> float:
            return self._cacheability

    out = {}
    for t in export.tables:
        c = export.plan["constraints"][t["name"]]
        out[t["name"]] = ParameterConstraints(
            sharding_types=list(c["sharding_types"]), compute_kernels=list(c["compute_kernels"]),
            pooling_factors=list(c["pooling_factors"]), feature_names=list(c["feature_names"]),
            cache_params=CacheParams(algorithm=CacheAlgorithm.LRU, load_factor=c["cache"]["load_factor"],
                                     stats=GmpCacheStatistics(t["cache"])))
    return out


def torchrec_batch(export: TorchRecExport, dataset, sample_ids: np.ndarray, *, pad_to: int | None = None):
    """A ``KeyedJaggedTensor`` of these samples' ids, remapped to table rows (features in table order).

    An id goes to the table whose ``gmp_ranges`` hold it (its field's). ``pad_to`` appends empty
    samples (no ids: a pooled row of zeros) up to that batch size (:func:`epoch_batches`).
    The dataset must be the one the export was made for.
    """
    _torchrec()
    import torch
    from torchrec import KeyedJaggedTensor

    _check_dataset(export, dataset)
    sample_ids = np.asarray(sample_ids, dtype=np.int64).ravel()
    num = sample_ids.size
    if num and (int(sample_ids.min()) < 0 or int(sample_ids.max()) >= dataset.num_samples):
        raise ManifestError(f"torchrec_batch: sample_ids must be in [0, {dataset.num_samples:,}) (the dataset's "
                            f"samples), got {int(sample_ids.min())}..{int(sample_ids.max())}; pass the ids "
                            f"epoch_batches gives.")
    size = num if pad_to is None else int(pad_to)
    if size < num:
        raise ManifestError(f"torchrec_batch: pad_to must be at least the number of sample_ids ({num:,}), got {size}.")
    tables = export.tables
    indptr = np.asarray(dataset.indptr)
    lo, deg = indptr[sample_ids], indptr[sample_ids + 1] - indptr[sample_ids]
    # every id of the samples, in sample order (one gather: no slice per sample)
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(deg)[:-1]]), deg) if num else np.zeros(0, np.int64)
    ids = np.asarray(dataset.indices[starts + np.arange(starts.size)], dtype=np.int64)
    pos = np.repeat(np.arange(num, dtype=np.int64), deg)
    table, _ = _IdRanges([table_ranges(t) for t in tables]).locate(ids)
    keep = table >= 0
    key = table[keep] * size + pos[keep]  # table-major, then sample, then the sample's own order
    order = np.argsort(key, kind="stable")
    vals = np.asarray(export.remap())[ids[keep][order]]
    lengths = np.bincount(key, minlength=len(tables) * size)
    return KeyedJaggedTensor.from_lengths_sync(keys=[t["feature"] for t in tables],
                                               values=torch.as_tensor(vals, dtype=torch.int64),
                                               lengths=torch.as_tensor(lengths, dtype=torch.int32))


def _check_dataset(export: TorchRecExport, dataset) -> None:
    """Refuse a dataset the export was not made for, or whose fields' ranges are not the tables' (a
    version-1 export of a dataset with extended fields: it covered only each field's first range)."""
    from ..manifest import made_for

    sha = export.plan.get("dataset_sha256")
    if sha and not made_for(dataset, str(sha)):
        raise ManifestError(f"{export.path} was made for dataset sha256 {str(sha)[:12]}…, but {dataset.path} has "
                            f"sha256 {str(dataset.sha256)[:12]}…; use the dataset it was made for or {_FIX}")
    remap = np.load(export.path / "remap.npy", mmap_mode="r")
    for what, have, want in (("remap.npy has", remap.shape[0], dataset.num_embeddings),
                             ("plan.json's num_train is", int(export.plan["num_train"]), dataset.num_train)):
        if have != want:  # dataset_sha256 says so too, unless it was removed
            raise ManifestError(f"{export.path}: {what} {have:,}, but {dataset.path} has {want:,} (num_embeddings, "
                                f"num_train); use the dataset it was made for or {_FIX}")
    fields = {f.name: [tuple(r) for r in f.id_ranges] for f in dataset.categorical_fields}
    for t in export.tables:
        if fields.get(t["feature"]) != table_ranges(t):
            raise ManifestError(f"{export.path}: table {t['name']} covers gmp ids {table_ranges(t)}, but field "
                                f"{t['feature']!r} of {dataset.path} has ids {fields.get(t['feature'])} (an export "
                                f"made before plan.json schema 2 covered each field's first range only); {_FIX}")
    if not export.rows_checked:  # a version-1 plan whose tables are the dataset's fields: its rows now
        _check_rows(export, np.asarray(remap))
        export.rows_checked = True
