"""The prepared-dataset format: what every importer writes and everything
downstream (graph, partitioners, trainer) reads.

A prepared dataset is a directory::

    criteo-1m/
    ├── dataset.json      header: format, schema_version, counts, fields, split, sha256
    ├── indptr.npy        int64  [num_samples + 1]   CSR row pointers
    ├── indices.npy       int32  [num_edges]          embedding ids (int64 if > 2^31-1)
    ├── labels.npy        float32 [num_samples]       0.0 / 1.0
    ├── dense.npy         float32 [num_samples, num_dense]   (absent when num_dense == 0)
    └── vocab.npz         uint64 per vocabulary field: the raw-value keys of its local ids 2.. in
                          local-id order, as ``field_<i>`` (i = index among the categorical
                          fields; hashed fields have none). Written by ``gmp data import``
                          (absent for synthetic data); read by ``gmp data import --extend``.

The directory holds nothing else: :data:`DATASET_FILES` are its names (the
synthetic generator adds ``synth_*`` arrays), and ``--overwrite`` refuses a
dataset directory holding anything more, which is someone else's.

Sample ``i`` uses embedding ids ``indices[indptr[i]:indptr[i+1]]`` (multi-hot
allowed: a multi-valued field contributes several ids; duplicates are removed
within a sample, and the graph refuses a sample that lists an id twice,
:func:`gmp.graph.check_unique_ids`: only ``write_dataset(..., dedupe=False)``
can write one). Embedding ids are global: field ``f`` owns the ids of its
``ranges`` (half-open ``[start, stop)`` pairs; local id k is the k-th id along
them): one range ``[offset_f, offset_f + num_values_f)`` for a fresh import,
more for a dataset that extends another (``gmp data import --extend PREV``
keeps every value PREV knew at its id and appends the new values of each
field after PREV's ``num_embeddings``, so a row keeps its id across days).
Such a dataset records ``parent`` (PREV's ``sha256``, ``arrays_sha256`` and ``num_embeddings``)
and ``new_id_ranges`` (the ids it added); both are null otherwise. Inside every categorical or
multi-valued field, local id 0 is the field's *missing* value and local id 1
its shared *rare* value (values seen fewer than ``--min-count`` times); real
values follow, most frequent first. A hashed field has ``hash_buckets``
values and no rare id (local ids 0 = missing, 1.. = buckets). Synthetic
fields have neither (``missing_id`` and ``rare_id`` are null). Ids that never
occur in the data are allowed (e.g. an unused rare id); consumers must not
treat them as real embeddings (their degree is 0).

**Split.** The last ``split.num_test`` samples in dataset order are the test
set; samples ``[0, split.num_train)`` are the training set. ``split.method`` is
``tail`` (the last ``test_fraction`` of the input) or ``provided`` (the samples
of the test inputs, ``gmp data import ... --test-input FILE``). Partitioners place
every sample (the trainer only trains on the training range).

**Hash.** ``arrays_sha256`` is :func:`gmp._io.hash_arrays` over indptr,
indices, labels and dense (in that order: name, dtype, shape, raw bytes).
``sha256``, the dataset's identity, is :func:`header_sha256`: a sha256 over
``arrays_sha256`` and the header's meaning (the counts, every field's kind,
ids, ranges and dense column, the split's method and counts, ``parent``'s
sha256 and ``num_embeddings``, ``new_id_ranges``), so an edited header is a
different dataset. Placement manifests, checkpoints and extending datasets
record it, so none of them can be used with another dataset (or another
meaning of the same arrays). ``vocab_sha256`` (written by every import since it
was added; absent before, and from synthetic datasets) is
:func:`gmp.datasets.extend.vocab_sha256` over ``vocab.npz``'s keys; it is not part
of ``sha256`` (that would change every dataset's identity), and ``--extend``
refuses a ``vocab.npz`` that does not match it, or that lists a key twice in a field.

**Validation on read.** :func:`load_dataset` checks the header against the
schema once (every count a JSON integer, ``fields`` a list of field objects,
``split`` an object whose counts add up, nesting at most 32 levels), then its
consistency (the categorical fields' id ranges disjoint and covering
``[0, num_embeddings)`` when there are any, the dense fields' columns each of ``[0, num_dense)``
once, field names unique, a parent no larger than the dataset) and that
``sha256`` is the hash of that header (schema 3: checked on every open, it
reads no array), then every array's shape, dtype and (native, little-endian)
byte order. Unless verification is switched off (``verify=False``
or the environment variable ``GMP_NO_VERIFY=1``) it also recomputes the
``arrays_sha256`` and checks the arrays' contents: ``indptr`` non-decreasing, ids in
``[0, num_embeddings)``, labels 0 or 1, dense values finite (one pass each).

All arrays are plain ``.npy`` files and are memory-mapped when read.

Example ``dataset.json``::

    {
      "format": "gmp.dataset",
      "schema_version": 3,
      "gmp_version": "0.1.0",
      "created": "2026-11-22T00:00:00+00:00",
      "source": {"format": "criteo", "inputs": ["train.txt.gz"],
                 "options": {"min_count": 10, "max_bad_lines": 0}},
      "num_samples": 1000000,
      "num_embeddings": 1228411,
      "num_edges": 26000000,
      "num_dense": 13,
      "fields": [
        {"name": "I1", "kind": "dense", "num_values": 0, "offset": null, "column": 0},
        {"name": "C1", "kind": "categorical", "num_values": 1262, "offset": 0,
         "missing_id": 0, "rare_id": 1, "hash_buckets": null, "ranges": [[0, 1262]]},
        {"name": "genres", "kind": "multi", "num_values": 21, "offset": 1262,
         "missing_id": 1262, "rare_id": 1263, "hash_buckets": null, "ranges": [[1262, 1283]]}
      ],
      "parent": null,
      "new_id_ranges": null,
      "label_rate": 0.2561,
      "num_bad_lines": 0,
      "bad_lines": [],
      "split": {"method": "tail", "test_fraction": 0.1, "num_train": 900000, "num_test": 100000},
      "arrays_sha256": "5e01...",
      "sha256": "9f2c...",
      "vocab_sha256": "0c5c..."
    }

``bad_lines`` holds the first 10 skipped lines as ``{"line": N, "reason": "..."}``.
An extending dataset has ``"parent": {"sha256": "...", "arrays_sha256": "...", "num_embeddings": 1228411,
"path": "..."}``
and e.g. ``"new_id_ranges": [[1228411, 1230002], [1230002, 1230950]]`` (one range per field
that gained values), and its fields' ``ranges`` then have two or more entries.

**Versions.** 2 added ``fields[].ranges``, ``parent`` and ``new_id_ranges``;
a version-1 header is upgraded on read (one contiguous range per field, no parent).
3 added ``arrays_sha256`` and made ``sha256`` cover the header (:func:`header_sha256`);
a version-2 header is upgraded on read: its ``sha256`` (the arrays' hash then) becomes
``arrays_sha256``, and ``sha256`` is derived from the header as it reads (a schema-2
header carries nothing that could tell an edit: it is bound from the next import on).

**Older files stay valid.** Manifests, checkpoints and ``parent`` links written before
schema 3 name a dataset by its arrays' hash; a dataset answers to its ``sha256`` and to its
``arrays_sha256`` (:meth:`PreparedDataset.has_sha256`), so they keep working, with the
protection they had (the arrays). Everything written since names ``sha256``, which an
edited header changes.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numba
import numpy as np

from .._version import __version__
from .._io import (KIND_FILES, KIND_NAMES, HeaderCount, atomic_directory, hash_arrays, header_value, index_dtype,
                   json_default, load_npy, output_kind, read_versioned_json, release_pages, verify_enabled, write_json)
from .._memory import check_memory
from ..errors import DatasetError

FORMAT = "gmp.dataset"
SCHEMA_VERSION = 3
FIELD_KINDS = ("categorical", "multi", "dense")
_FIX = "re-create it with 'gmp data import' or 'gmp data synth'."


@dataclass(frozen=True)
class FieldInfo:
    """One input field. ``offset`` is its first global embedding id (None for dense)."""

    name: str
    kind: str
    num_values: int
    offset: int | None
    missing_id: int | None = None
    rare_id: int | None = None
    hash_buckets: int | None = None
    column: int | None = None  # dense fields: column in dense.npy
    #: the field's ids as half-open ranges; None: the one range [offset, offset + num_values)
    ranges: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in FIELD_KINDS:
            raise DatasetError(f"field {self.name!r} has kind {self.kind!r}, expected one of {FIELD_KINDS}.")
        if self.kind != "dense" and (self.offset is None or self.offset < 0 or self.num_values < 0):
            raise DatasetError(f"field {self.name!r} needs a non-negative offset and num_values.")
        if self.ranges is not None and self.kind != "dense":
            if sum(b - a for a, b in self.ranges) != self.num_values or any(b < a for a, b in self.ranges):
                raise DatasetError(f"field {self.name!r}: ranges {list(self.ranges)} must be [start, stop) pairs "
                                   f"covering num_values={self.num_values} ids.")

    @property
    def id_ranges(self) -> tuple[tuple[int, int], ...]:
        """The field's ids as half-open ``(start, stop)`` ranges (empty for a dense field)."""
        if self.kind == "dense":
            return ()
        return self.ranges if self.ranges is not None else ((int(self.offset), int(self.offset) + self.num_values),)

    def ids(self) -> np.ndarray:
        """int64: the global id of every local id, in local order."""
        parts = [np.arange(a, b, dtype=np.int64) for a, b in self.id_ranges]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "num_values": int(self.num_values),
            "offset": None if self.offset is None else int(self.offset),
            "missing_id": self.missing_id,
            "rare_id": self.rare_id,
            "hash_buckets": self.hash_buckets,
            "column": self.column,
            "ranges": None if self.kind == "dense" else [list(r) for r in self.id_ranges],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "FieldInfo":
        return cls(
            name=str(obj["name"]),
            kind=str(obj["kind"]),
            num_values=int(obj.get("num_values", 0)),
            offset=None if obj.get("offset") is None else int(obj["offset"]),
            missing_id=obj.get("missing_id"),
            rare_id=obj.get("rare_id"),
            hash_buckets=obj.get("hash_buckets"),
            column=obj.get("column"),
            ranges=None if obj.get("ranges") is None else tuple((int(a), int(b)) for a, b in obj["ranges"]),
        )


@dataclass
class PreparedDataset:
    """A prepared dataset opened from disk (arrays memory-mapped by default)."""

    path: Path
    meta: dict[str, Any]
    indptr: np.ndarray
    indices: np.ndarray
    labels: np.ndarray
    dense: np.ndarray | None
    fields: list[FieldInfo] = field(default_factory=list)
    _verified: bool = field(default=False, repr=False, compare=False)

    num_samples = HeaderCount()
    num_embeddings = HeaderCount()
    num_edges = HeaderCount()

    @property
    def num_dense(self) -> int:
        return int(self.meta.get("num_dense", 0))

    @property
    def sha256(self) -> str:
        """The dataset's identity: :func:`header_sha256` (arrays and header's meaning)."""
        return str(self.meta["sha256"])

    def has_sha256(self, sha256: str) -> bool:
        """Whether a manifest, checkpoint or child recording ``sha256`` was made for this dataset: its
        :attr:`sha256`, or ``arrays_sha256`` (what files written before dataset schema 3 name; anything
        written since names :attr:`sha256`, so an edited header is refused by it)."""
        return str(sha256) in (self.sha256, self.meta["arrays_sha256"])

    @property
    def num_train(self) -> int:
        return int(self.meta["split"]["num_train"])

    @property
    def num_test(self) -> int:
        return int(self.meta["split"]["num_test"])

    @property
    def categorical_fields(self) -> list[FieldInfo]:
        return [f for f in self.fields if f.kind != "dense"]

    def field_of_embedding(self) -> np.ndarray:
        """Field index (into :attr:`categorical_fields`) of every embedding id, int16/int32."""
        cats = self.categorical_fields
        dtype = np.int16 if len(cats) < 2**15 else np.int32
        out = np.full(self.num_embeddings, -1, dtype=dtype)
        for i, f in enumerate(cats):
            for a, b in f.id_ranges:
                out[a:b] = i
        return out

    def __repr__(self) -> str:  # the header in one line, never the arrays or the whole meta
        name = self.meta.get("name") or self.path.name
        return (f"<PreparedDataset {name!r} at {str(self.path)!r}: {self.num_samples:,} samples "
                f"({self.num_train:,} train), {self.num_embeddings:,} embeddings in {len(self.categorical_fields)} "
                f"fields, {self.num_dense} dense, sha256 {self.sha256[:12]}>")

    def verify_hash(self) -> None:
        """Recompute the content hash, then check the arrays' contents (:func:`check_arrays`).

        Raises :class:`DatasetError` on a mismatch. Done once per opened dataset
        (later calls return at once).
        """
        if self._verified:
            return
        got = compute_sha256(self.indptr, self.indices, self.labels, self.dense)
        want = str(self.meta["arrays_sha256"])
        if got != want:
            raise DatasetError(
                f"{self.path}: arrays do not match the arrays_sha256 in dataset.json (got {got[:12]}…, "
                f"expected {want[:12]}…); the files were modified or corrupted: "
                f"{_FIX.rstrip('.')} (GMP_NO_VERIFY=1 skips this check)."
            )
        check_arrays(self.path, self.indptr, self.indices, self.labels, self.dense, self.num_embeddings)
        self._verified = True


def compute_sha256(indptr, indices, labels, dense) -> str:
    """``arrays_sha256``: :func:`gmp._io.hash_arrays` over the arrays (name, dtype, shape, bytes)."""
    arrays = [("indptr", indptr), ("indices", indices), ("labels", labels)]
    if dense is not None:
        arrays.append(("dense", dense))
    return hash_arrays(arrays)


#: bytes per embedding id that every command using a dataset holds at least (``gmp data info``'s degree
#: counts, a partitioner's degrees and primaries): checked on open, so a header claiming billions of ids is
#: refused in one line instead of the process being killed
BYTES_PER_EMBEDDING = 16


def _check_id_memory(path: Path, num_embeddings: int) -> None:
    check_memory(BYTES_PER_EMBEDDING * num_embeddings, error=DatasetError,
                 what=f"{path / 'dataset.json'}: num_embeddings {num_embeddings:,} (per-id counts of "
                      f"{BYTES_PER_EMBEDDING} bytes)",
                 fix="a header edited by hand or a dataset too large for this machine: re-import it, or use a "
                     "machine with more memory.")


def load_dataset(path: str | os.PathLike, *, mmap: bool = True, verify: bool | None = None) -> PreparedDataset:
    """Open a prepared dataset, checking its header, version and every array's shape and dtype.

    ``verify`` (default: on unless ``GMP_NO_VERIFY=1`` is set) also recomputes
    the sha256 and checks the arrays' contents (see the module docstring).

    Raises
    ------
    DatasetError
        With a one-line message naming the file that is wrong and the fix.
    """
    path = Path(path)
    if not path.is_dir():
        raise DatasetError(f"{path} is not a directory; pass a prepared dataset ({_FIX.rstrip('.')}).")
    other = None if (path / "dataset.json").is_file() else output_kind(path)
    if other is not None and other != FORMAT:
        raise DatasetError(f"{path} is {KIND_NAMES[other]} (it has {KIND_FILES[other]}), not a dataset; a dataset "
                           f"directory (with dataset.json, made by 'gmp data import' or 'gmp data synth') is "
                           f"expected here.")
    meta = read_versioned_json(
        path / "dataset.json", fmt=FORMAT, max_version=SCHEMA_VERSION, error=DatasetError, fix=_FIX
    )
    written_as = int(meta["schema_version"])
    meta = _upgrade(meta)
    fields = check_header(meta, path / "dataset.json")
    _bind_header(meta, fields, path / "dataset.json", written_as)
    n, e = meta["num_samples"], meta["num_edges"]
    _check_id_memory(path, meta["num_embeddings"])
    indptr = load_npy(path / "indptr.npy", error=DatasetError, mmap=mmap, fix=_FIX)
    indices = load_npy(path / "indices.npy", error=DatasetError, mmap=mmap, fix=_FIX)
    labels = load_npy(path / "labels.npy", error=DatasetError, mmap=mmap, fix=_FIX)
    _expect(path / "indptr.npy", indptr, (n + 1,), ("i8",))
    _expect(path / "indices.npy", indices, (e,), ("i4", "i8"))
    _expect(path / "labels.npy", labels, (n,), ("f4",))
    if int(indptr[0]) != 0 or int(indptr[-1]) != e:
        raise DatasetError(
            f"{path / 'indptr.npy'}: expected indptr[0] == 0 and indptr[-1] == num_edges ({e}), "
            f"got {int(indptr[0])} and {int(indptr[-1])}; {_FIX}"
        )
    num_dense = meta["num_dense"] = meta.get("num_dense") or 0
    dense = None
    if num_dense:
        dense = load_npy(path / "dense.npy", error=DatasetError, mmap=mmap, fix=_FIX)
        _expect(path / "dense.npy", dense, (n, num_dense), ("f4",))
    ds = PreparedDataset(path, meta, indptr, indices, labels, dense, fields)
    if verify_enabled(verify):
        ds.verify_hash()
    return ds


def header_sha256(meta: Mapping[str, Any], fields: Sequence[FieldInfo]) -> str:
    """The dataset's identity (``sha256``): a sha256 over ``arrays_sha256`` and the header's meaning.

    The meaning is what changes what a model trains on: the counts, every field as
    :meth:`FieldInfo.to_json` writes it (kind, ids, ranges, dense column), the split's method and
    counts, the parent's sha256 and ``num_embeddings`` and ``new_id_ranges``; not the statistics,
    the source or the creation time. ``meta`` must have passed :func:`check_header` (``fields`` is
    what it returned). Canonical JSON (sorted keys, no spaces), so the same header always hashes
    the same.
    """
    split = meta["split"]
    parent = meta.get("parent")
    meaning = {
        "num_samples": int(meta["num_samples"]),
        "num_embeddings": int(meta["num_embeddings"]),
        "num_edges": int(meta["num_edges"]),
        "num_dense": int(meta.get("num_dense") or 0),
        "fields": [f.to_json() for f in fields],
        "split": {"method": split.get("method"), "num_train": int(split["num_train"]),
                  "num_test": int(split["num_test"])},
        "parent": None if not parent else {"sha256": str(parent["sha256"]),
                                           "num_embeddings": int(parent["num_embeddings"])},
        "new_id_ranges": meta.get("new_id_ranges"),
    }
    h = hashlib.sha256(f"{FORMAT}|3|{meta['arrays_sha256']}|".encode())
    h.update(json.dumps(meaning, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


def _bind_header(meta: dict[str, Any], fields: Sequence[FieldInfo], path: Path, written_as: int) -> None:
    """Check that ``sha256`` is :func:`header_sha256` of the header (schema 3), or derive it (a header
    written before schema 3, whose ``sha256`` only covered the arrays: it is ``arrays_sha256`` now)."""
    derived = header_sha256(meta, fields)
    if written_as < 3:
        meta["sha256"] = derived
        return
    if meta["sha256"] != derived:
        raise DatasetError(f"{path}: sha256 {meta['sha256'][:12]}… is not the hash of this header and its arrays "
                           f"({derived[:12]}…): the header (fields, split or counts) was edited after it was "
                           f"written; {_FIX}")


def check_header(meta: Mapping[str, Any], path: Path) -> list[FieldInfo]:
    """Validate a ``dataset.json`` header against the schema; returns its fields.

    Every count must be a JSON integer (no floats, strings or booleans), every
    field an object with a name, a kind and (categorical/multi) an id range
    inside ``num_embeddings``; ``split`` must add up to ``num_samples``.
    """
    def get(obj, key, kind, where="", optional=False):
        return header_value(obj, key, kind, path=path, error=DatasetError, fix=_FIX, optional=optional, where=where)

    n = get(meta, "num_samples", "int>=0")
    m = get(meta, "num_embeddings", "int>=0")
    get(meta, "num_edges", "int>=0")
    num_dense = get(meta, "num_dense", "int>=0", optional=True) or 0
    get(meta, "sha256", "str")
    get(meta, "arrays_sha256", "str")
    get(meta, "vocab_sha256", "str", optional=True)  # an import's vocab.npz (checked by --extend)
    for key, kind in (("source", "dict"), ("label_rate", "number"), ("num_bad_lines", "int>=0"),
                      ("bad_lines", "list")):
        get(meta, key, kind, optional=True)
    raw_fields = get(meta, "fields", "list")
    fields = []
    for i, f in enumerate(raw_fields):
        where = f"fields[{i}]."
        if not isinstance(f, dict):
            raise DatasetError(f"{path}: fields[{i}] must be an object with name, kind, num_values and offset, "
                               f"got {json.dumps(f, default=str)[:40]}; {_FIX}")
        name = get(f, "name", "str", where)
        kind = get(f, "kind", "str", where)
        if kind not in FIELD_KINDS:
            raise DatasetError(f"{path}: {where}kind is {kind!r}, expected one of {FIELD_KINDS}; {_FIX}")
        num_values = get(f, "num_values", "int>=0", where, optional=True) or 0
        ids = {k: get(f, k, "int>=0", where, optional=True) for k in ("offset", "missing_id", "rare_id")}
        buckets = get(f, "hash_buckets", "int>=1", where, optional=True)
        column = get(f, "column", "int>=0", where, optional=True)
        if kind == "dense":
            if column is None or column >= num_dense:
                raise DatasetError(f"{path}: {where}column must be an integer in [0, num_dense={num_dense}) for "
                                   f"dense field {name!r}, got {column}; {_FIX}")
        ranges = None
        if kind != "dense":
            off = ids["offset"]
            if off is None:
                raise DatasetError(f"{path}: {where}offset must be a non-negative integer for field {name!r}; {_FIX}")
            ranges = _check_ranges(get(f, "ranges", "list", where, optional=True), off, num_values, m,
                                   f"{path}: {where}ranges of field {name!r}")
            end = max((b for _, b in ranges), default=off)
            if end > m:
                raise DatasetError(f"{path}: field {name!r} ends at id {end}, beyond num_embeddings {m}; {_FIX}")
            for k in ("missing_id", "rare_id"):
                if ids[k] is not None and not any(a <= ids[k] < b for a, b in ranges):
                    raise DatasetError(f"{path}: {where}{k} {ids[k]} is outside field {name!r}'s ids "
                                       f"{[list(r) for r in ranges]}; {_FIX}")
        fields.append(FieldInfo(name=name, kind=kind, num_values=num_values, offset=ids["offset"],
                                missing_id=ids["missing_id"], rare_id=ids["rare_id"], hash_buckets=buckets,
                                column=column, ranges=ranges))
    parent = get(meta, "parent", "dict", optional=True)  # schema 2: the dataset this one extends
    if parent:
        get(parent, "sha256", "str", "parent.")
        if get(parent, "num_embeddings", "int>=0", "parent.") > m:
            raise DatasetError(f"{path}: parent.num_embeddings {parent['num_embeddings']} exceeds num_embeddings "
                               f"{m}; an extending dataset keeps every id of its parent: {_FIX}")
    new_ranges = get(meta, "new_id_ranges", "list", optional=True)
    if new_ranges is not None:
        _check_ranges(new_ranges, 0, None, m, f"{path}: new_id_ranges")
    split = get(meta, "split", "dict")
    get(split, "method", "str", "split.", optional=True)
    num_train = get(split, "num_train", "int>=0", "split.")
    num_test = get(split, "num_test", "int>=0", "split.")
    if num_train + num_test != n:
        raise DatasetError(f"{path}: split.num_train + split.num_test = {num_train + num_test}, expected "
                           f"num_samples {n}; {_FIX}")
    _check_layout(fields, m, num_dense, path)
    return fields


def _check_layout(fields: Sequence[FieldInfo], num_embeddings: int, num_dense: int, path: Path) -> None:
    """The fields partition the ids and the dense columns: names unique, the categorical fields' ranges
    disjoint and covering ``[0, num_embeddings)`` (a header that lists no categorical field, as a bare
    graph written by :func:`write_dataset` may, attributes no id), every dense column owned by one dense
    field."""
    seen: set[str] = set()
    for f in fields:
        if f.name in seen:
            raise DatasetError(f"{path}: two fields are named {f.name!r}, expected unique names; {_FIX}")
        seen.add(f.name)
    spans = sorted((a, b, f.name) for f in fields for a, b in f.id_ranges if b > a)
    end, last = 0, None
    for a, b, name in spans:
        if a < end:
            raise DatasetError(f"{path}: field {name!r}'s ids [{a}, {b}) overlap field {last!r}'s (up to {end}), "
                               f"expected every id in one field; {_FIX}")
        if a > end:
            raise DatasetError(f"{path}: ids [{end}, {a}) belong to no field, expected the fields to cover "
                               f"[0, num_embeddings={num_embeddings}); {_FIX}")
        end, last = b, name
    if end != num_embeddings and any(f.kind != "dense" for f in fields):
        raise DatasetError(f"{path}: ids [{end}, {num_embeddings}) belong to no field, expected the fields to "
                           f"cover [0, num_embeddings={num_embeddings}); {_FIX}")
    columns = sorted(f.column for f in fields if f.kind == "dense")
    if columns != list(range(num_dense)):
        raise DatasetError(f"{path}: the dense fields own columns {columns}, expected each of 0..{num_dense - 1} "
                           f"once (num_dense={num_dense}); {_FIX}")


def _check_ranges(ranges, offset: int, num_values: int | None, num_embeddings: int,
                  what: str) -> tuple[tuple[int, int], ...]:
    """``[[start, stop], ...]`` half-open id ranges inside ``[0, num_embeddings]`` covering ``num_values`` ids
    (``None`` ranges: the one range ``[offset, offset + num_values)``)."""
    if ranges is None:
        return ((offset, offset + (num_values or 0)),)
    out = []
    for r in ranges:
        ok = (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
              and 0 <= r[0] <= r[1] <= num_embeddings)
        if not ok:
            raise DatasetError(f"{what} must be [start, stop] pairs of ids in [0, {num_embeddings}], got "
                               f"{json.dumps(r, default=str)[:40]}; {_FIX}")
        out.append((r[0], r[1]))
    if num_values is not None and sum(b - a for a, b in out) != num_values:
        raise DatasetError(f"{what} cover {sum(b - a for a, b in out)} ids, expected num_values {num_values}; {_FIX}")
    return tuple(out)


#: rows up to this long are sorted by insertion (the common case: one id per field); longer ones by np.sort
_INSERTION_SORT_MAX = 32


@numba.njit(cache=True, nogil=True)
def sort_unique_rows(ids, lengths, out, out_lengths):  # pragma: no cover - compiled
    """Each sample's ids (``lengths[i]`` consecutive entries of ``ids``) ascending and without repeats, into
    ``out`` (as long as ``ids``); ``out_lengths[i]`` gets the sample's new length. Returns the entries
    written. A sample is a short row (26 ids for Criteo), so it is sorted in place: a ``lexsort`` of
    (id, sample) over the whole chunk cost 4 of the 9.6 s of a 1M-row ``--extend`` import."""
    pos = 0
    k = 0
    for i in range(lengths.size):
        n = lengths[i]
        a = pos
        for j in range(n):
            out[a + j] = ids[k + j]
        k += n
        if n <= _INSERTION_SORT_MAX:
            for j in range(a + 1, a + n):
                v = out[j]
                q = j - 1
                while q >= a and out[q] > v:
                    out[q + 1] = out[q]
                    q -= 1
                out[q + 1] = v
        else:
            out[a:a + n] = np.sort(out[a:a + n])
        w = a
        for j in range(a, a + n):
            if w == a or out[j] != out[w - 1]:
                out[w] = out[j]
                w += 1
        out_lengths[i] = w - a
        pos = w
    return pos


@numba.njit(cache=True, nogil=True)
def _array_problems(indptr, indices, labels, dense_flat, num_embeddings):  # pragma: no cover - compiled
    # (code, position): 1 indptr decreases, 2 id out of range, 3 label not 0/1, 4 dense not finite
    for i in range(1, indptr.size):
        if indptr[i] < indptr[i - 1]:
            return 1, i
    for k in range(indices.size):
        v = indices[k]
        if v < 0 or v >= num_embeddings:
            return 2, k
    for i in range(labels.size):
        v = labels[i]
        if v != 0.0 and v != 1.0:
            return 3, i
    for k in range(dense_flat.size):
        v = dense_flat[k]
        if not np.isfinite(v):
            return 4, k
    return 0, 0


def check_arrays(path: Path, indptr, indices, labels, dense, num_embeddings: int) -> None:
    """One pass over the arrays: indptr non-decreasing, ids in range, labels 0/1, dense finite."""
    dflat = np.zeros(0, np.float32) if dense is None else np.asarray(dense).reshape(-1)
    code, pos = _array_problems(np.asarray(indptr), np.asarray(indices), np.asarray(labels), dflat,
                                np.int64(num_embeddings))
    if code == 1:
        raise DatasetError(f"{path / 'indptr.npy'} decreases at sample {pos - 1} ({int(indptr[pos - 1])} -> "
                           f"{int(indptr[pos])}); row pointers must be non-decreasing: {_FIX}")
    if code == 2:
        raise DatasetError(f"{path / 'indices.npy'} holds id {int(indices[pos])} at position {pos}, expected ids in "
                           f"[0, {num_embeddings}); {_FIX}")
    if code == 3:
        raise DatasetError(f"{path / 'labels.npy'} holds {float(labels[pos])!r} at sample {pos}, expected labels 0 "
                           f"or 1; {_FIX}")
    if code == 4:
        nd = dense.shape[1]
        raise DatasetError(f"{path / 'dense.npy'} holds {float(dflat[pos])!r} at sample {pos // nd} column "
                           f"{pos % nd}, expected finite values; {_FIX}")


def _expect(path: Path, arr: np.ndarray, shape: tuple[int, ...], dtypes: Sequence[str]) -> None:
    if arr.shape != shape:
        raise DatasetError(f"{path} has shape {arr.shape}, expected {shape} from dataset.json; {_FIX}")
    if arr.dtype.str.lstrip("<>|=") not in dtypes:
        raise DatasetError(f"{path} has dtype {arr.dtype}, expected one of {list(dtypes)}; {_FIX}")
    if not arr.dtype.isnative:  # gmp writes native (little-endian) arrays; its kernels take no other order
        raise DatasetError(f"{path} has byte order {arr.dtype.str} (big-endian), expected the native "
                           f"{arr.dtype.newbyteorder('=').str} that gmp writes; {_FIX}")


def _upgrade_1_to_2(meta: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added ``fields[].ranges``, ``parent`` and ``new_id_ranges``: a version-1 field is
    one contiguous range and a version-1 dataset extends nothing."""
    meta = dict(meta)
    fields = []
    for f in meta.get("fields", []) if isinstance(meta.get("fields"), list) else []:
        if not isinstance(f, dict):
            fields.append(f)  # check_header names it
            continue
        f = dict(f)
        off, num = f.get("offset"), f.get("num_values", 0)
        whole = all(isinstance(x, int) and not isinstance(x, bool) for x in (off, num))
        # a wrongly typed offset stays for check_header to name; its ranges stay unset
        f["ranges"] = [[off, off + num]] if f.get("kind") != "dense" and whole else None
        fields.append(f)
    if isinstance(meta.get("fields"), list):
        meta["fields"] = fields  # anything else is left for check_header to name
    meta.setdefault("parent", None)
    meta.setdefault("new_id_ranges", None)
    meta["schema_version"] = 2
    return meta


def _upgrade_2_to_3(meta: dict[str, Any]) -> dict[str, Any]:
    """Version 3 added ``arrays_sha256`` and made ``sha256`` cover the header: a version-2 ``sha256`` is
    the arrays' hash, kept as ``arrays_sha256``; ``sha256`` is derived once the header is checked
    (:func:`_bind_header`)."""
    meta = dict(meta)
    meta["arrays_sha256"] = meta.get("sha256")
    meta["schema_version"] = 3
    return meta


#: version v -> the function upgrading a version-v header to v + 1
_UPGRADES = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3}


def _upgrade(meta: dict[str, Any]) -> dict[str, Any]:
    """Upgrade an older header one version at a time."""
    while int(meta["schema_version"]) < SCHEMA_VERSION:
        meta = _UPGRADES[int(meta["schema_version"])](meta)
    return meta


#: every name a dataset directory may hold: what gmp writes there (the header, the arrays, the vocabulary
#: of an import, the synthetic generator's side arrays). ``--overwrite`` replaces these and refuses a
#: directory holding anything else (:func:`gmp._io.check_only_own`), which is someone else's.
DATASET_FILES = frozenset({
    "dataset.json", "indptr.npy", "indices.npy", "labels.npy", "dense.npy", "vocab.npz",
    "synth_community.npy", "synth_ctr.npy", "synth_index.npy", "synth_ids.npz",
})


class DatasetWriter:
    """Build a prepared dataset chunk by chunk, in bounded memory.

    Chunks are appended to raw temporary files; :meth:`finish` turns them into
    ``.npy`` arrays (optionally remapping provisional ids through ``remap``),
    hashes them and writes ``dataset.json``. Everything happens inside an
    atomic temporary directory: if :meth:`finish` is never reached (an
    exception, a crash) nothing that looks like a dataset is left at ``out``.

    Use as a context manager::

        with DatasetWriter(out, num_dense=13) as w:
            for chunk in chunks:
                w.add(lengths, ids, labels, dense)
            w.finish(fields=..., num_embeddings=..., source=...)
    """

    def __init__(self, out: str | os.PathLike, *, num_dense: int = 0, overwrite: bool = False,
                 provisional_dtype: np.dtype | type = np.int64, inputs: Sequence[str | os.PathLike] = ()):
        self.out = Path(out)
        self.inputs = list(inputs)
        self.num_dense = int(num_dense)
        self.overwrite = overwrite
        self._provisional_dtype = np.dtype(provisional_dtype)
        self._ctx = None
        self._dir: Path | None = None
        self._files: dict[str, Any] = {}
        self.num_samples = 0
        self.num_edges = 0
        self._finished = False
        self._test_start: int | None = None

    def __enter__(self) -> "DatasetWriter":
        self._ctx = atomic_directory(self.out, overwrite=self.overwrite, kind=FORMAT, inputs=self.inputs,
                                     own=DATASET_FILES)
        self._dir = self._ctx.__enter__()
        for name in ("lengths", "ids", "labels", "dense"):
            self._files[name] = open(self._dir / f"_{name}.bin", "wb")
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        for f in self._files.values():
            f.close()
        if exc_type is None and not self._finished:
            err = DatasetError("DatasetWriter closed without finish(); nothing was written.")
            self._ctx.__exit__(DatasetError, err, None)
            raise err
        return bool(self._ctx.__exit__(exc_type, exc, tb))

    def start_test(self) -> None:
        """Every sample added from now on belongs to the test set (a provided split:
        ``split.method = "provided"``, and ``finish``'s ``test_fraction`` is not used)."""
        if self._test_start is None:
            self._test_start = self.num_samples

    @property
    def tmpdir(self) -> Path:
        """The temporary directory (for extra files such as vocabularies)."""
        assert self._dir is not None, "use DatasetWriter as a context manager"
        return self._dir

    def add(self, lengths: np.ndarray, ids: np.ndarray, labels: np.ndarray, dense: np.ndarray | None = None) -> None:
        """Append samples: ``lengths[i]`` ids per sample, ``ids`` concatenated."""
        lengths = np.asarray(lengths, dtype=np.int32)
        ids = np.asarray(ids, dtype=self._provisional_dtype)
        labels = np.asarray(labels, dtype=np.float32)
        if lengths.ndim != 1 or labels.shape != lengths.shape or int(lengths.sum()) != ids.size:
            raise DatasetError(
                f"chunk is inconsistent: {lengths.size} lengths summing to {int(lengths.sum())}, "
                f"{ids.size} ids, {labels.size} labels."
            )
        bad = np.flatnonzero((labels != 0) & (labels != 1))
        if bad.size:
            i = int(bad[0])
            raise DatasetError(f"labels must be finite and 0 or 1, got {float(labels[i])!r} at sample "
                               f"{self.num_samples + i}; fix the input or the importer.")
        if self.num_dense:
            dense = np.asarray(dense, dtype=np.float32)
            if dense.shape != (lengths.size, self.num_dense):
                raise DatasetError(f"dense chunk has shape {dense.shape}, expected {(lengths.size, self.num_dense)}.")
            finite = np.isfinite(dense)
            if not finite.all():
                i, j = (int(v[0]) for v in np.nonzero(~finite))
                raise DatasetError(f"dense values must be finite, got {float(dense[i, j])!r} at sample "
                                   f"{self.num_samples + i} column {j}; fix the input or the importer.")
            self._files["dense"].write(np.ascontiguousarray(dense).tobytes())
        self._files["lengths"].write(lengths.tobytes())
        self._files["ids"].write(ids.tobytes())
        self._files["labels"].write(labels.tobytes())
        self.num_samples += lengths.size
        self.num_edges += ids.size

    def finish(
        self,
        *,
        fields: Sequence[FieldInfo],
        num_embeddings: int,
        source: Mapping[str, Any],
        remap: np.ndarray | None = None,
        test_fraction: float = 0.1,
        num_bad_lines: int = 0,
        bad_lines: Sequence[Mapping[str, Any]] = (),
        dedupe: bool = True,
        extra: Mapping[str, Any] | None = None,
        chunk_samples: int = 1 << 20,
    ) -> dict[str, Any]:
        """Write the final arrays and ``dataset.json``; returns the header.

        ``remap`` (if given) maps provisional ids to final embedding ids.
        ``dedupe`` removes repeated ids within a sample (multi-hot fields).
        """
        if self.num_samples == 0:
            raise DatasetError("no samples to write: the input is empty (or every line was skipped).")
        if not 0.0 <= test_fraction < 1.0:
            raise DatasetError(f"test fraction must be in [0, 1), got {test_fraction}.")
        if self._test_start is None and self.num_samples - int(round(self.num_samples * test_fraction)) < 1:
            raise DatasetError(f"test fraction {test_fraction} of {self.num_samples} samples leaves no training "
                               f"samples; lower `test_fraction`.")
        for f in self._files.values():
            f.close()
        d = self.tmpdir
        n = self.num_samples
        lengths = np.fromfile(d / "_lengths.bin", dtype=np.int32)
        raw_ids = np.memmap(d / "_ids.bin", dtype=self._provisional_dtype, mode="r", shape=(self.num_edges,)) \
            if self.num_edges else np.zeros(0, dtype=self._provisional_dtype)
        idx_dtype = index_dtype(max(int(num_embeddings) - 1, 0))
        # Pass 1: remap + sort/dedupe each sample, writing a compacted id stream.
        out_ids = np.lib.format.open_memmap(d / "_indices_full.npy", mode="w+", dtype=idx_dtype,
                                            shape=(max(self.num_edges, 1),))
        new_lengths = np.empty(n, dtype=np.int64)
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        pos = 0
        for s0 in range(0, n, chunk_samples):
            s1 = min(n, s0 + chunk_samples)
            a, b = int(starts[s0]), int(starts[s1])
            chunk = np.asarray(raw_ids[a:b])
            if remap is not None:
                chunk = remap[chunk]
            chunk = chunk.astype(idx_dtype, copy=False)
            if chunk.size and (chunk.min() < 0 or chunk.max() >= num_embeddings):
                raise DatasetError(
                    f"embedding id out of range [0, {num_embeddings}) in samples {s0}..{s1}: importer bug."
                )
            lens = lengths[s0:s1].astype(np.int64)
            if dedupe and chunk.size:
                sorted_ids = np.empty_like(chunk)
                kept = np.empty(s1 - s0, dtype=np.int64)
                chunk = sorted_ids[:sort_unique_rows(chunk, lens, sorted_ids, kept)]
                lens = kept
            new_lengths[s0:s1] = lens
            out_ids[pos : pos + chunk.size] = chunk
            # both streams are touched once: unmap them as we go, so RSS stays the working set
            release_pages(raw_ids, a, b)
            release_pages(out_ids, pos, pos + chunk.size)
            pos += chunk.size
        num_edges = pos
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(new_lengths, out=indptr[1:])
        del raw_ids
        np.save(d / "indptr.npy", indptr)
        if num_edges == out_ids.shape[0]:
            # Nothing was removed: the stream is already the final array (saves a
            # copy of every edge: 4.8 GB at Criteo-Kaggle scale).
            out_ids.flush()
            del out_ids
            os.replace(d / "_indices_full.npy", d / "indices.npy")
        else:
            final = np.lib.format.open_memmap(d / "indices.npy", mode="w+", dtype=idx_dtype, shape=(num_edges,))
            step = 1 << 26
            for a in range(0, num_edges, step):
                final[a : a + step] = out_ids[a : min(a + step, num_edges)]  # out_ids may be longer (dedupe)
                release_pages(out_ids, a, a + step)
                release_pages(final, a, a + step)
            final.flush()
            del final, out_ids
            (d / "_indices_full.npy").unlink()
        labels = np.fromfile(d / "_labels.bin", dtype=np.float32)
        np.save(d / "labels.npy", labels)
        dense = None
        if self.num_dense:
            # streamed in row blocks (2.4 GB at Criteo-Kaggle scale: not held in memory), then mapped for the hash
            out = np.lib.format.open_memmap(d / "dense.npy", mode="w+", dtype=np.float32, shape=(n, self.num_dense))
            flat_out = out.reshape(-1)
            with open(d / "_dense.bin", "rb") as fin:
                for r0 in range(0, n, chunk_samples):
                    r1 = min(n, r0 + chunk_samples)
                    block = np.fromfile(fin, dtype=np.float32, count=(r1 - r0) * self.num_dense)
                    out[r0:r1] = block.reshape(r1 - r0, self.num_dense)
                    release_pages(flat_out, r0 * self.num_dense, r1 * self.num_dense)
            out.flush()
            del out, flat_out
            dense = np.load(d / "dense.npy", mmap_mode="r")
        for name in ("lengths", "ids", "labels", "dense"):
            (d / f"_{name}.bin").unlink(missing_ok=True)
        indices = np.load(d / "indices.npy", mmap_mode="r")
        arrays_sha = compute_sha256(indptr, indices, labels, dense)
        del indices, dense
        if self._test_start is None:
            num_test = int(round(n * test_fraction))
            split = {"method": "tail", "test_fraction": float(test_fraction), "num_train": n - num_test,
                     "num_test": num_test}
        else:
            num_test = n - self._test_start
            if num_test == 0 or num_test == n:
                what = "no sample" if num_test == 0 else "every sample"
                raise DatasetError(f"the provided split leaves {what} in the test set ({n} samples in all); "
                                   f"pass training and test inputs that both hold valid lines.")
            split = {"method": "provided", "test_fraction": num_test / n, "num_train": n - num_test,
                     "num_test": num_test}
        meta: dict[str, Any] = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "gmp_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "source": dict(source),
            "num_samples": n,
            "num_embeddings": int(num_embeddings),
            "num_edges": int(num_edges),
            "num_dense": self.num_dense,
            "fields": [f.to_json() for f in fields],
            "label_rate": float(labels.mean()) if n else 0.0,
            "num_bad_lines": int(num_bad_lines),
            "bad_lines": [dict(b) for b in list(bad_lines)[:10]],
            "split": split,
            "arrays_sha256": arrays_sha,
            "sha256": "",
            "parent": None,
            "new_id_ranges": None,
        }
        if extra:
            meta.update(extra)
        meta["sha256"] = seal_header(meta, d / "dataset.json")
        write_json(d / "dataset.json", meta)
        self._finished = True
        return meta


def seal_header(meta: Mapping[str, Any], path: str | os.PathLike = "dataset.json") -> str:
    """The ``sha256`` a header must carry (:func:`header_sha256`), after checking it as a reader would
    (:func:`check_header`, on its JSON form): an importer that writes an inconsistent header fails here
    rather than its readers. ``path`` only names the file in a message."""
    as_read = json.loads(json.dumps(meta, default=json_default))
    return header_sha256(as_read, check_header(as_read, Path(path)))


def write_dataset(
    out: str | os.PathLike,
    *,
    indptr: np.ndarray,
    indices: np.ndarray,
    labels: np.ndarray,
    dense: np.ndarray | None,
    fields: Sequence[FieldInfo],
    num_embeddings: int,
    source: Mapping[str, Any],
    test_fraction: float = 0.1,
    overwrite: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """Write an in-memory dataset (convenience for tests and small data)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    lengths = np.diff(indptr)
    num_dense = 0 if dense is None else int(np.asarray(dense).shape[1])
    with DatasetWriter(out, num_dense=num_dense, overwrite=overwrite) as w:
        w.add(lengths, np.asarray(indices), np.asarray(labels), dense)
        return w.finish(fields=fields, num_embeddings=num_embeddings, source=source,
                        test_fraction=test_fraction, **kwargs)
