"""Per-field vocabularies: raw value keys -> embedding ids, in one pass.

Design
------
Importers reduce every raw categorical value to a 64-bit key (the hex value
itself for Criteo, a 64-bit FNV-1a/splitmix64 hash of the token text
otherwise) and hand blocks of keys to :meth:`Vocabulary.lookup`. Because the
final id of a value depends on its frequency, which is only known at the end,
lookup returns *provisional* ids: one dense id space shared by all fields,
allocated in order of first appearance (a compiled loop over an
open-addressing hash table per field), with an occurrence count per id. The writer stores the
provisional ids; :meth:`Vocabulary.finish` computes the final ids and the
``remap`` array that :meth:`gmp.datasets.format.DatasetWriter.finish` applies.

Final local ids inside a field (see :mod:`gmp.datasets.format`):

* ``0`` — missing (empty cell, absent multi-valued list),
* ``1`` — rare: every value seen fewer than ``min_count`` times,
* ``2..`` — the kept values, most frequent first (ties: first seen first).

A *hashed* field (``--hash FIELD=SIZE``) skips the vocabulary: value ->
``1 + mix(key) % SIZE``, missing -> 0, no rare id; its ``num_values`` is
``SIZE + 1``. Hashing bounds memory and the embedding table for fields with
tens of millions of values at the cost of collisions. Its provisional ids are
a span of their own above :data:`HASHED_PIDS` that maps to its final ids by an
offset (:class:`Remap`), so an import holds nothing per bucket: its memory
follows the data, whatever SIZE (``--hash C1=100000000`` on 500 rows took
2.5 GB when every bucket had a provisional id and a remap entry).

Key collisions: two distinct token texts share a 64-bit hash with probability
about ``n^2 / 2^65`` for ``n`` distinct values (~1e-8 for a million values);
Criteo hex values are keyed by their exact value and never collide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numba
import numpy as np

from ..errors import ImportDataError
from ..kernels.hashing import mix64, mix64_array
from ..wording import plural
from .format import FieldInfo


@numba.njit(cache=True, nogil=True, inline="always")
def _slot(k, mask):  # pragma: no cover - compiled
    # splitmix64 finaliser: keys may be low-entropy (small integers, Criteo's 32-bit hashes)
    return np.int64(mix64(k) & mask)


#: the first provisional id of hashed fields: each takes a span of ``1 + SIZE`` from here (no array holds
#: them), far above the vocabulary fields' provisional ids (which count the distinct values read)
HASHED_PIDS = 1 << 62

_ONE = np.uint64(1)
_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)


@numba.njit(cache=True, nogil=True)
def _assign(slots, keys, present, missing_pid, next_pid, out, pid_field, field):  # pragma: no cover
    # Open-addressing hash table (linear probing). A slot is 16 bytes:
    # [key, (provisional id + 1) << 32 | count]; word 1 == 0 marks an empty slot.
    # Four slots share a cache line; the caller keeps the load factor <= 1/2.
    cap = slots.shape[0]
    mask = np.uint64(cap - 1)
    for i in range(keys.size):
        if not present[i]:
            out[i] = missing_pid
            continue
        k = keys[i]
        j = _slot(k, mask)
        while True:
            w = slots[j, 1]
            if w == 0:
                slots[j, 0] = k
                w = np.uint64(next_pid + 1) << _SHIFT
                pid_field[next_pid] = field
                next_pid += 1
                break
            if slots[j, 0] == k:
                break
            j = (j + 1) & (cap - 1)
        if (w & _LOW) != _LOW:  # the count saturates at 2^32 - 1 (only compared with --min-count)
            w += _ONE
        slots[j, 1] = w
        out[i] = np.int64(w >> _SHIFT) - 1
    return next_pid


@numba.njit(cache=True, nogil=True)
def _rehash(slots, new_slots):  # pragma: no cover - compiled
    cap = new_slots.shape[0]
    mask = np.uint64(cap - 1)
    for i in range(slots.shape[0]):
        if slots[i, 1] != 0:
            j = _slot(slots[i, 0], mask)
            while new_slots[j, 1] != 0:
                j = (j + 1) & (cap - 1)
            new_slots[j, 0] = slots[i, 0]
            new_slots[j, 1] = slots[i, 1]


class _Table:
    """uint64 key -> (provisional id, count), grown by doubling (load factor <= 1/2).

    16 bytes per slot, at most 4 slots per distinct value: a field with 10M
    values (Criteo-Kaggle's largest) needs a 2^25-slot table, 512 MiB. It starts
    at 16 slots: a libsvm line of 200k tokens has 200k fields (one per position),
    and 1,024 slots each took 3.2 GB before a value was read.
    """

    def __init__(self, capacity: int = 1 << 4):
        self.slots = np.zeros((capacity, 2), dtype=np.uint64)
        self.size = 0

    def reserve(self, extra: int) -> None:
        need = 2 * (self.size + extra)
        cap = self.slots.shape[0]
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        new = np.zeros((cap, 2), dtype=np.uint64)
        _rehash(self.slots, new)
        self.slots = new

    def ids_and_counts(self) -> tuple[np.ndarray, np.ndarray]:
        w = self.slots[self.slots[:, 1] != 0, 1]
        return (w >> _SHIFT).astype(np.int64) - 1, (w & _LOW).astype(np.int64)

    def keys(self) -> np.ndarray:
        """The keys, in the order of :meth:`ids_and_counts`."""
        return self.slots[self.slots[:, 1] != 0, 0].copy()




@dataclass
class _Field:
    name: str
    kind: str  # "categorical" or "multi"
    missing_pid: int
    hash_size: int | None
    table: object | None  # numba typed Dict (vocabulary fields)


@dataclass(frozen=True)
class PreviousField:
    """A field of the dataset an import extends (``--extend``; :func:`gmp.datasets.extend.previous_fields`).

    ``ids``: int64, the global id of every local id (0 missing, 1 rare, 2.. the kept values; for a
    hashed field 0 missing, 1.. the buckets: may be None when ``ranges`` is given, which a hashed field
    needs instead, so its buckets are never listed one by one). ``keys``: uint64, the keys of local ids
    2.. (None for a hashed field). ``ranges``: the field's ids as half-open ``(start, stop)`` ranges
    (:attr:`gmp.datasets.format.FieldInfo.id_ranges`; None: taken from ``ids``).
    """

    name: str
    kind: str
    ids: np.ndarray | None
    keys: np.ndarray | None
    hash_buckets: int | None
    ranges: tuple[tuple[int, int], ...] | None = None

    def id_ranges(self) -> tuple[tuple[int, int], ...]:
        return self.ranges if self.ranges is not None else _ranges(self.ids)


class Remap:
    """Provisional -> final ids (``remap[pids]``, as :meth:`gmp.datasets.format.DatasetWriter.finish`
    applies it): ``table`` for the vocabulary fields' provisional ids, below :data:`HASHED_PIDS`; each
    hashed field's span ``[first, first + count)`` to the ids of its ``ranges`` in order (local id k ->
    the k-th id along them). Holds nothing per bucket."""

    def __init__(self, table: np.ndarray, spans: list[tuple[int, int, tuple[tuple[int, int], ...]]]):
        self.table = table
        self.spans = []
        for first, count, ranges in spans:
            starts = np.array([a for a, _ in ranges], dtype=np.int64)
            local = np.zeros(len(ranges), dtype=np.int64)  # the local id each range starts at
            np.cumsum([b - a for a, b in ranges][:-1], out=local[1:])
            self.spans.append((int(first), int(count), starts, local))

    def __getitem__(self, pids: np.ndarray) -> np.ndarray:
        pids = np.asarray(pids, dtype=np.int64)
        low = pids < HASHED_PIDS
        if low.all():
            return self.table[pids]
        out = np.empty(pids.shape, dtype=np.int64)
        out[low] = self.table[pids[low]]
        for first, count, starts, local in self.spans:
            inside = (pids >= first) & (pids < first + count)
            if inside.any():
                k = pids[inside] - first
                r = np.searchsorted(local, k, side="right") - 1
                out[inside] = starts[r] + (k - local[r])
        return out


class Vocabulary:
    """Provisional ids for every categorical field of one import.

    Parameters
    ----------
    min_count
        Values seen fewer times map to the field's rare id (1 keeps all).
    hash_sizes
        ``{field name: SIZE}`` for fields that are hashed instead.

    Examples
    --------
    >>> v = Vocabulary(min_count=2)
    >>> f = v.add_field("C1")
    >>> pids = v.lookup(f, np.array([7, 7, 9, 0], np.uint64), np.array([1, 1, 1, 0], bool))
    >>> fields, n, remap = v.finish()
    >>> remap[pids].tolist()   # 7 kept (local 2), 9 rare (1), missing (0)
    [2, 2, 1, 0]
    """

    def __init__(self, *, min_count: int = 1, hash_sizes: Mapping[str, int] | None = None):
        if min_count < 1:
            raise ImportDataError(f"`min_count` must be >= 1, got {min_count}.")
        self.min_count = int(min_count)
        self.hash_sizes = dict(hash_sizes or {})
        for name, size in self.hash_sizes.items():
            if int(size) < 1:
                raise ImportDataError(f"`hash_sizes` {name}={size}: the size must be a positive integer.")
        if sum(1 + int(size) for size in self.hash_sizes.values()) >= HASHED_PIDS:  # their spans must fit int64
            raise ImportDataError(f"`hash_sizes` {self.hash_sizes}: more than 2^62 buckets in all; choose smaller "
                                  f"sizes.")
        self.fields: list[_Field] = []
        self._by_name: dict[str, int] = {}
        self._next = 0
        self._next_hashed = HASHED_PIDS  # the next hashed field's span starts here (module docstring)
        self._pid_field = np.full(1 << 16, -1, dtype=np.int32)

    # -- building ---------------------------------------------------------
    def add_field(self, name: str, kind: str = "categorical") -> int:
        """Register a field; returns its index (used by :meth:`lookup`)."""
        if name in self._by_name:
            raise ImportDataError(f"field {name!r} appears twice; field names must be unique.")
        idx = len(self.fields)
        size = self.hash_sizes.get(name)
        if size:  # a span of 1 + SIZE provisional ids, nothing allocated for it
            missing = self._next_hashed
            self._next_hashed += 1 + int(size)
        else:
            missing = self._alloc(1, idx)
        table = None if size else _Table()
        self.fields.append(_Field(name, kind, missing, int(size) if size else None, table))
        self._by_name[name] = idx
        return idx

    def index(self, name: str) -> int:
        return self._by_name[name]

    def set_kind(self, idx: int, kind: str) -> None:
        self.fields[idx].kind = kind

    def check_hash_fields(self) -> None:
        """Every ``--hash`` name must be a field of this import."""
        unknown = sorted(set(self.hash_sizes) - set(self._by_name))
        if unknown:
            raise ImportDataError(
                f"`hash_sizes` names unknown field(s) {unknown}; this input's fields are {list(self._by_name)}."
            )

    def reorder(self, order: list[int]) -> None:
        """Put the fields in ``order`` (old indices); provisional ids stay valid,
        only the final offsets follow the new order."""
        if sorted(order) != list(range(len(self.fields))):
            raise ImportDataError(f"internal: reorder needs a permutation of {len(self.fields)} fields.")
        new_of_old = np.empty(len(order), dtype=np.int32)
        new_of_old[order] = np.arange(len(order), dtype=np.int32)
        self.fields = [self.fields[i] for i in order]
        self._by_name = {f.name: i for i, f in enumerate(self.fields)}
        used = self._pid_field[: self._next]
        used[:] = new_of_old[used]

    def _check_shares_a_field(self, previous: list[PreviousField]) -> None:
        """A day may lack or add fields (:meth:`_align`), but one that shares none of ``previous``'s would
        keep every old id unused and give all its own new ones: almost surely the wrong ``extend``."""
        old = {p.name for p in previous}
        if self.fields and not any(f.name in old for f in self.fields):
            raise ImportDataError(
                f"`extend`: this input's {_shown([f.name for f in self.fields])} share none with the previous "
                f"dataset's {_shown([p.name for p in previous])}; extend a dataset imported from the same source, "
                f"or import without `extend`.")

    def _align(self, previous: list[PreviousField]) -> None:
        """Line the fields up with ``previous`` (``--extend``) for importers that discover their fields
        while reading (libsvm's positions, libffm's field numbers): the previous fields first, in their
        order, each registered when this input never had it (its ids are kept, it gains no value); this
        input's other fields after them (new fields: all their ids new); a field multi-valued on
        either day is multi-valued (:meth:`finish` with ``discovered``)."""
        for p in previous:
            if p.name not in self._by_name:
                self.add_field(p.name, p.kind)
            elif p.kind == "multi":
                self.set_kind(self._by_name[p.name], "multi")
        old = {p.name for p in previous}
        self.reorder([self._by_name[p.name] for p in previous]
                     + [i for i, f in enumerate(self.fields) if f.name not in old])

    def _alloc(self, num: int, field: int) -> int:
        first = self._next
        self._ensure(first + num)
        self._pid_field[first : first + num] = field
        self._next += num
        return first

    def _ensure(self, size: int) -> None:
        if size > self._pid_field.size:
            new = max(size, 2 * self._pid_field.size)
            self._pid_field = np.concatenate([self._pid_field, np.full(new - self._pid_field.size, -1, np.int32)])

    def lookup(self, field: int, keys: np.ndarray, present: np.ndarray) -> np.ndarray:
        """Provisional ids (int64) of ``keys``; ``present[i] == False`` means missing."""
        f = self.fields[field]
        keys = np.asarray(keys, dtype=np.uint64)
        present = np.asarray(present, dtype=np.bool_)
        if keys.ndim != 1:
            keys, present = keys.reshape(-1), present.reshape(-1)
        if f.hash_size is not None:
            return np.where(present, f.missing_pid + 1 + (mix64_array(keys) % np.uint64(f.hash_size)).astype(np.int64),
                            f.missing_pid).astype(np.int64)
        self._ensure(self._next + keys.size)
        f.table.reserve(keys.size)
        out = np.empty(keys.size, dtype=np.int64)
        before = self._next
        self._next = int(_assign(f.table.slots, keys, present, f.missing_pid, self._next, out,
                                 self._pid_field, field))
        f.table.size += self._next - before
        return out

    def lookup_multi(self, field: int, lengths: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ids of a multi-valued field: sample ``i`` has ``lengths[i]`` of ``keys``.

        Returns ``(lengths, ids)`` where an empty list became one missing id.
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        keys = np.asarray(keys, dtype=np.uint64)
        empty = lengths == 0
        out_lengths = np.where(empty, 1, lengths)
        ids = np.empty(int(out_lengths.sum()), np.int64)
        first = np.zeros(lengths.size, np.int64)
        np.cumsum(out_lengths[:-1], out=first[1:])
        is_missing = np.zeros(ids.size, bool)
        is_missing[first[empty]] = True
        ids[~is_missing] = self.lookup(field, keys, np.ones(keys.size, bool))
        num_empty = int(empty.sum())
        if num_empty:
            ids[is_missing] = self.lookup(field, np.zeros(num_empty, np.uint64), np.zeros(num_empty, bool))
        return out_lengths, ids

    # -- final ids --------------------------------------------------------
    def finish(self, previous: list[PreviousField] | None = None, previous_num_embeddings: int = 0, *,
               discovered: bool = False) -> tuple[list[FieldInfo], int, np.ndarray]:
        """``(fields, num_embeddings, remap)``: final FieldInfo per categorical
        field (offsets in registration order), the embedding count, and the
        provisional -> final id array.

        Afterwards :attr:`kept_keys` holds, per field, the keys of local ids
        2.. in local order (None for hashed fields): what ``vocab.npz`` stores.

        ``previous`` (``--extend``): the fields of the dataset this import
        extends, same names and kinds in the same order. A value it knew keeps
        its global id (even when it is rare now); a new value seen at least
        ``min_count`` times gets a new id after ``previous_num_embeddings``,
        field by field, most frequent first; other new values take the
        field's old rare id. A field's ids are then its old ids plus a new
        range (``FieldInfo.ranges``); :attr:`new_id_ranges` lists the new ranges. ``discovered``: the
        importer found its fields in the data (libsvm, libffm), so this input may lack some of the previous
        fields, add fields after them and read a field multi-valued (:meth:`_align`).
        """
        if previous is not None:
            if discovered:
                self._check_shares_a_field(previous)
                self._align(previous)
            return self._finish_extending(previous, int(previous_num_embeddings), discovered)
        remap = np.full(max(self._next, 1), -1, dtype=np.int64)
        spans: list = []
        infos: list[FieldInfo] = []
        self.kept_keys = []
        offset = 0
        for f in self.fields:
            info, keys = self._fresh_field(f, offset, remap, spans)
            infos.append(info)
            self.kept_keys.append(keys)
            offset += info.num_values
        self.new_id_ranges = [[0, offset]] if offset else []
        return infos, offset, Remap(remap, spans) if spans else remap

    def _fresh_field(self, f: _Field, offset: int, remap: np.ndarray,
                     spans: list) -> tuple[FieldInfo, np.ndarray | None]:
        """Field ``f`` given ids from ``offset`` on, as no earlier dataset knew it: its missing id, its
        rare id, then its kept values most frequent first (ties: first seen first); a hashed field its
        missing id and buckets. Fills ``remap`` (a hashed field: its span in ``spans``, :class:`Remap`);
        returns the FieldInfo and the kept values' keys (None for a hashed field)."""
        if f.hash_size is not None:
            num_values = f.hash_size + 1
            spans.append((f.missing_pid, num_values, ((offset, offset + num_values),)))
            return FieldInfo(f.name, f.kind, num_values, offset, missing_id=offset, rare_id=None,
                             hash_buckets=f.hash_size), None
        ids, c = f.table.ids_and_counts()
        keys = f.table.keys()
        first_seen = np.argsort(ids, kind="stable")
        ids, c, keys = ids[first_seen], c[first_seen], keys[first_seen]
        keep = c >= self.min_count
        by_count = np.argsort(-c[keep], kind="stable")
        kept = ids[keep][by_count]
        remap[f.missing_pid] = offset
        remap[ids[~keep]] = offset + 1
        remap[kept] = offset + 2 + np.arange(kept.size)
        num_values = 2 + int(kept.size)
        return FieldInfo(f.name, f.kind, num_values, offset, missing_id=offset, rare_id=offset + 1), \
            keys[keep][by_count]

    def _finish_extending(self, previous: list[PreviousField], base: int,
                          discovered: bool) -> tuple[list[FieldInfo], int, np.ndarray]:
        names = [f.name for f in self.fields]
        same = [p.name for p in previous] == (names[:len(previous)] if discovered else names)
        kinds = all(p.kind == f.kind or (discovered and f.kind == "multi") for p, f in zip(previous, self.fields))
        if not (same and kinds):
            raise ImportDataError(
                f"`extend`: the previous dataset's categorical fields are "
                f"{[(p.name, p.kind) for p in previous]}, this input's {[(f.name, f.kind) for f in self.fields]}; "
                f"extend a dataset imported from the same format and columns.")
        remap = np.full(max(self._next, 1), -1, dtype=np.int64)
        spans: list = []
        infos: list[FieldInfo] = []
        self.kept_keys = []
        self.new_id_ranges = []
        cursor = base
        for f, prev in zip(self.fields, previous):
            if f.hash_size is not None or prev.hash_buckets is not None:
                if f.hash_size != prev.hash_buckets:
                    raise ImportDataError(_hash_mismatch(f.name, prev.hash_buckets, f.hash_size))
                ranges = prev.id_ranges()  # its ids as they were: a hashed field gains none
                num_values = sum(b - a for a, b in ranges)
                spans.append((f.missing_pid, num_values, ranges))
                infos.append(FieldInfo(f.name, f.kind, num_values, int(ranges[0][0]), missing_id=int(ranges[0][0]),
                                       rare_id=None, hash_buckets=f.hash_size, ranges=tuple(ranges)))
                self.kept_keys.append(None)
                continue
            ids, c = f.table.ids_and_counts()
            keys = f.table.keys()
            order = np.argsort(ids, kind="stable")  # first-seen order
            ids, c, keys = ids[order], c[order], keys[order]
            known_sorted = np.argsort(prev.keys, kind="stable")
            pos = np.searchsorted(prev.keys[known_sorted], keys)
            pos_c = np.minimum(pos, max(prev.keys.size - 1, 0))
            found = (pos < prev.keys.size) & (prev.keys[known_sorted][pos_c] == keys) if prev.keys.size else \
                np.zeros(keys.size, dtype=bool)
            remap[f.missing_pid] = prev.ids[0]
            remap[ids[found]] = prev.ids[2 + known_sorted[pos_c[found]]]
            fresh = ~found & (c >= self.min_count)
            remap[ids[~found & ~fresh]] = prev.ids[1]
            new_pids = ids[fresh][np.argsort(-c[fresh], kind="stable")]
            remap[new_pids] = cursor + np.arange(new_pids.size)
            all_ids = np.concatenate([prev.ids, np.arange(cursor, cursor + new_pids.size, dtype=np.int64)])
            if new_pids.size:
                self.new_id_ranges.append([cursor, cursor + int(new_pids.size)])
            cursor += int(new_pids.size)
            infos.append(FieldInfo(f.name, f.kind, int(all_ids.size), int(all_ids[0]), missing_id=int(prev.ids[0]),
                                   rare_id=int(prev.ids[1]), ranges=_ranges(all_ids)))
            self.kept_keys.append(np.concatenate([prev.keys, keys[fresh][np.argsort(-c[fresh], kind="stable")]]))
        for f in self.fields[len(previous):]:  # fields the previous dataset never had (_align)
            info, keys = self._fresh_field(f, cursor, remap, spans)
            infos.append(info)
            self.kept_keys.append(keys)
            self.new_id_ranges.append([cursor, cursor + info.num_values])
            cursor += info.num_values
        return infos, cursor, Remap(remap, spans) if spans else remap


def _hash_mismatch(name: str, before: int | None, now: int | None) -> str:
    """The refusal of an ``extend`` whose field ``name`` is hashed into ``before`` buckets in the previous
    dataset and ``now`` here (None: not hashed, a vocabulary): what to pass to match the previous one."""
    if before is None:
        return (f"`extend`: field {name!r} is not hashed in the previous dataset (a vocabulary) and hashed into "
                f"{now} buckets here; drop `hash_sizes` {name}={now}.")
    here = "not hashed here (a vocabulary)" if now is None else f"into {now} here"
    return (f"`extend`: field {name!r} is hashed into {before} buckets in the previous dataset and {here}; "
            f"pass `hash_sizes` {name}={before}.")


def _shown(names: list[str], most: int = 8) -> str:
    """``N fields (a, b, ...)`` for a message: how many, and their names (the first few of many)."""
    shown = ", ".join(names) if len(names) <= most else f"{', '.join(names[:most - 2])}, ..."
    return f"{len(names)} {plural('field', len(names))} ({shown})"


def _ranges(ids: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Ascending runs of consecutive ids as half-open ``(start, stop)`` pairs (in the ids' order)."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size == 0:
        return ()
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [ids.size]])
    return tuple((int(ids[a]), int(ids[b - 1]) + 1) for a, b in zip(starts, stops))
