"""Datasets that extend each other: ``gmp data import ... --extend PREVIOUS``.

A day's import that extends the previous day's dataset keeps every value the
previous vocabulary knew at its id and appends the new values of each field
after the previous ``num_embeddings`` (:meth:`gmp.datasets.vocab.Vocabulary.finish`
with ``previous``), so an embedding row keeps its id across days and a
placement made for the previous day stays meaningful
(:mod:`gmp.partition.incremental`). The format side (``vocab.npz``, field
``ranges``, ``parent``, ``new_id_ranges``) is documented in
:mod:`gmp.datasets.format`.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .._io import hash_arrays
from ..errors import DatasetError, ImportDataError
from .format import load_dataset
from .vocab import PreviousField

#: the file holding the kept keys of every vocabulary field
VOCAB_FILE = "vocab.npz"

#: the most ``parent`` links followed from a dataset [generations]
MAX_ANCESTORS = 1000


def vocab_arrays(kept_keys: list[np.ndarray | None]) -> dict[str, np.ndarray]:
    """``vocab.npz``'s members: ``field_<i>`` -> uint64 keys for every vocabulary field i."""
    return {f"field_{i}": np.asarray(k, dtype=np.uint64) for i, k in enumerate(kept_keys) if k is not None}


def vocab_sha256(members: Mapping[str, np.ndarray]) -> str:
    """``vocab_sha256`` (dataset.json): :func:`gmp._io.hash_arrays` over ``vocab.npz``'s members by name
    (name, dtype, shape, keys), so the same keys hash the same whatever the archive's zip bytes. It is not
    part of the dataset's ``sha256`` (which would change every dataset's identity); ``extend`` checks it."""
    return hash_arrays(sorted(members.items()))


def previous_fields(path: str | os.PathLike) -> tuple[list[PreviousField], dict[str, Any]]:
    """The categorical fields of the dataset at ``path`` (with their keys) and its header.

    Raises
    ------
    ImportDataError
        When ``path`` is not a dataset, or has no ``vocab.npz`` (synthetic data, or
        imported by a gmp that did not write it).
    """
    ds = load_dataset(path)
    vfile = Path(path) / VOCAB_FILE
    if not vfile.is_file():
        raise ImportDataError(f"`extend` {path}: it has no {VOCAB_FILE} (its raw-value keys), so its ids cannot be "
                              f"kept; re-import it with this gmp (synthetic datasets cannot be extended).")
    stored = _read_vocab(vfile, path)
    want = ds.meta.get("vocab_sha256")  # absent in datasets imported before it was recorded: not checked
    got = vocab_sha256(stored) if want is not None else None
    if got != want:
        raise ImportDataError(f"`extend` {path}: {VOCAB_FILE} is not the vocabulary the dataset was imported with "
                              f"(its keys hash to {got[:12]}…, dataset.json's vocab_sha256 is "
                              f"{str(want)[:12]}…), so its ids would not mean the dataset's; restore its "
                              f"{VOCAB_FILE} or re-import the previous dataset.")
    out = []
    for i, f in enumerate(ds.categorical_fields):
        keys = stored.get(f"field_{i}")
        if f.hash_buckets is None and (keys is None or keys.size != f.num_values - 2):
            got = "none" if keys is None else keys.size
            raise ImportDataError(f"`extend` {path}: {VOCAB_FILE} holds {got} keys for field {f.name!r}, its header "
                                  f"{f.num_values - 2} kept values; the dataset is inconsistent, re-import it.")
        if f.hash_buckets is None and keys.size > 1:
            ordered = np.sort(keys.astype(np.uint64))
            twice = np.flatnonzero(ordered[1:] == ordered[:-1])
            if twice.size:
                raise ImportDataError(f"`extend` {path}: {VOCAB_FILE} lists key {int(ordered[twice[0]])} more than "
                                      f"once in field {f.name!r}, so one value would have two ids; restore its "
                                      f"{VOCAB_FILE} or re-import the previous dataset.")
        if f.hash_buckets is not None:  # its ranges only: listing its buckets' ids would cost 8 bytes each
            out.append(PreviousField(f.name, f.kind, None, None, f.hash_buckets, ranges=f.id_ranges))
        else:
            out.append(PreviousField(f.name, f.kind, f.ids(), keys.astype(np.uint64), f.hash_buckets))
    return out, ds.meta


def _read_vocab(vfile: Path, path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The key arrays of ``vocab.npz``: each a 1-d unsigned or signed integer array (what the importer wrote);
    a corrupt archive, a pickled (object) entry or another dtype is one :class:`ImportDataError`."""
    fix = "re-import the previous dataset with this gmp, or restore its vocab.npz"
    try:
        with np.load(vfile, allow_pickle=False) as z:
            stored = {name: np.asarray(z[name]) for name in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as exc:
        # a pickled entry's ValueError advises allow_pickle=True: never taken, so not quoted
        detail = str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__
        why = ("it is not an archive of plain arrays (it would need unpickling, which gmp never does)"
               if "pickle" in str(exc).lower() else f"not a readable .npz archive ({detail})")
        raise ImportDataError(f"`extend` {path}: {VOCAB_FILE} is corrupt: {why}; {fix}.") from None
    for name, keys in stored.items():
        if keys.ndim != 1 or keys.dtype.kind not in "ui":
            raise ImportDataError(f"`extend` {path}: {VOCAB_FILE} entry {name!r} is {keys.dtype} of shape "
                                  f"{keys.shape}, expected a 1-d integer array of keys; {fix}.")
    return stored


def parent_dataset(child) -> Any:
    """The dataset ``child``'s header names as its ``parent`` (None when it has none), opened without
    re-hashing its arrays: the first of :func:`parent_candidates` whose header has the recorded sha256.

    The recorded ``path`` is the one given to ``--extend`` / ``--continue``, relative to the directory the
    command ran in, which later commands need not share (``ds/d2`` recorded from ``/data`` is not
    ``ds/d2`` from ``/``, nor ``/data/ds/ds/d2`` beside the child): so it is tried as given, then against
    each folder above the child, then as the child's sibling of the same name, and only the recorded
    sha256 decides which one is the parent.

    Raises
    ------
    DatasetError
        No candidate is the parent: missing, unreadable, or the dataset now at its path is not the one
        ``child`` was made from (its header's sha256 differs: re-imported, or replaced since).
    """
    parent = child.meta.get("parent")
    if not parent:
        return None
    raw, want = Path(str(parent.get("path", ""))), str(parent.get("sha256", ""))
    problem = None  # the first candidate that is a dataset but not the parent, said when none is
    for cand in parent_candidates(raw, Path(child.path)):
        try:
            found = load_dataset(cand, verify=False)
        except DatasetError as exc:
            problem = problem or f"the parent {cand} of {child.path} cannot be read ({exc})"
            continue
        if found.has_sha256(want):
            return found
        problem = problem or (f"{child.path}'s parent {cand} is not the dataset it was made from (sha256 "
                              f"{found.sha256[:12]}…, expected {want[:12]}…)")
    raise DatasetError(problem or f"{child.path}'s parent {raw} (sha256 {want[:12]}…) is missing")


def parent_candidates(raw: Path, child: Path) -> list[Path]:
    """Where the parent recorded as ``raw`` may be, in order, each holding a ``dataset.json``: ``raw`` as
    given (absolute, or relative to this process's directory); for a relative ``raw``, ``raw`` against the
    child's folder and each folder above it (the directory ``raw`` was recorded in is one of them when the
    child was written below it); then the child's sibling named as ``raw``'s last part. Each place once."""
    places = [raw]
    if not raw.is_absolute() and raw.parts:
        places += [folder / raw for folder in Path(os.path.abspath(child)).parents]
    if raw.name:
        places.append(child.parent / raw.name)
    out, seen = [], set()
    for place in places:
        key = os.path.abspath(place)
        if key not in seen and (place / "dataset.json").is_file():
            seen.add(key)
            out.append(place)
    return out


def parents(dataset):
    """Yield ``(generations, parent header)`` up ``dataset``'s ``parent`` links (1: its own parent's), at most
    :data:`MAX_ANCESTORS`; each parent is opened (:func:`parent_dataset`) only to read the next link, so the
    last one yielded need not exist. Raises :class:`DatasetError` as :func:`parent_dataset` on the way."""
    current = dataset
    for depth in range(1, MAX_ANCESTORS + 1):
        parent = current.meta.get("parent")
        if not parent:
            return
        yield depth, parent
        current = parent_dataset(current)


def ancestor_generations(dataset, sha256: str) -> int | None:
    """How many ``parent`` links lead from ``dataset`` to its ancestor whose sha256 is ``sha256`` (0: the
    dataset itself); None when the chain ends without it (:func:`parents`)."""
    if dataset.has_sha256(sha256):
        return 0
    return next((depth for depth, parent in parents(dataset) if names_parent(parent, sha256)), None)


def names_parent(link: Mapping[str, Any], sha256: str) -> bool:
    """Whether a ``parent`` link names the dataset whose hash is ``sha256``: the parent's sha256, or the
    parent's ``arrays_sha256`` (which files made before dataset schema 3 name; links of that time hold only
    that hash, as ``sha256``)."""
    return str(sha256) in (link.get("sha256"), link.get("arrays_sha256"))


def parent_link(prev_meta: Mapping[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    """The ``parent`` link of a dataset extending the dataset at ``path`` (``prev_meta``: its header as
    :func:`load_dataset` gives it). The parent's arrays' hash is kept too, so what was made for it before
    dataset schema 3 (a manifest, a checkpoint naming that hash) is still found among the child's ancestors."""
    link = {"sha256": str(prev_meta["sha256"]), "num_embeddings": int(prev_meta["num_embeddings"]), "path": str(path)}
    link["arrays_sha256"] = str(prev_meta["arrays_sha256"])
    return link
