"""The one placement type: where every sample and every embedding row lives.

A :class:`Placement` assigns

* each sample to one worker (``sample_worker``, int32 [num_samples]),
* each embedding row to one *primary* worker (``embedding_primary``, int32
  [num_embeddings]) that owns the authoritative copy and its optimizer state,
* optionally *secondary* replicas (HET-GMP's 2D vertex-cut): a CSR over
  embedding ids, ``secondary_indptr`` (int64 [num_embeddings + 1]) and
  ``secondary_workers`` (int32), listing the other workers that hold a copy.
  A secondary is never on its primary's worker and never listed twice.

A row is *local* to worker w when it is primary or secondary on w.
:mod:`gmp.manifest` is the on-disk form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numba
import numpy as np

from .errors import PlacementError


@dataclass(frozen=True, eq=False)
class Placement:
    num_workers: int
    sample_worker: np.ndarray
    embedding_primary: np.ndarray
    secondary_indptr: np.ndarray
    secondary_workers: np.ndarray
    method: str = "unknown"
    options: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    #: free-form diagnostics from the partitioner (e.g. per-round convergence log
    #: under ``"rounds"``); stored in the manifest, rendered by the report.
    info: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def edge_cut(cls, num_workers: int, sample_worker, embedding_primary, **kw) -> "Placement":
        """A placement without secondaries (pure 1D edge-cut)."""
        primary = np.asarray(embedding_primary, dtype=np.int32)
        return cls(
            num_workers=int(num_workers),
            sample_worker=np.asarray(sample_worker, dtype=np.int32),
            embedding_primary=primary,
            secondary_indptr=np.zeros(primary.size + 1, dtype=np.int64),
            secondary_workers=np.zeros(0, dtype=np.int32),
            **kw,
        )

    def with_secondaries(self, secondary_indptr, secondary_workers, **kw) -> "Placement":
        """The same placement with a new secondary CSR (and optionally new method/options)."""
        return Placement(
            num_workers=self.num_workers,
            sample_worker=self.sample_worker,
            embedding_primary=self.embedding_primary,
            secondary_indptr=np.asarray(secondary_indptr, dtype=np.int64),
            secondary_workers=np.asarray(secondary_workers, dtype=np.int32),
            method=kw.get("method", self.method),
            options=kw.get("options", self.options),
            seed=kw.get("seed", self.seed),
            info=kw.get("info", self.info),
        )

    def __repr__(self) -> str:  # one line, never the arrays
        return (f"<Placement {self.method} on {self.num_workers} workers: {self.num_samples:,} samples, "
                f"{self.num_embeddings:,} embeddings, {self.num_secondaries:,} secondaries, seed {self.seed}>")

    @property
    def num_samples(self) -> int:
        return int(self.sample_worker.size)

    @property
    def num_embeddings(self) -> int:
        return int(self.embedding_primary.size)

    @property
    def num_secondaries(self) -> int:
        return int(self.secondary_workers.size)

    def secondaries_of(self, embedding: int) -> np.ndarray:
        return self.secondary_workers[self.secondary_indptr[embedding] : self.secondary_indptr[embedding + 1]]

    def local_mask(self, worker: int) -> np.ndarray:
        """Boolean [num_embeddings]: rows primary or secondary on ``worker``."""
        mask = np.asarray(self.embedding_primary) == worker
        if self.num_secondaries:
            emb = np.repeat(np.arange(self.num_embeddings), np.diff(self.secondary_indptr))
            mask[emb[np.asarray(self.secondary_workers) == worker]] = True
        return mask

    def rows_held(self) -> np.ndarray:
        """Rows (primaries + secondaries) held per worker, int64 [num_workers]."""
        held = np.bincount(self.embedding_primary, minlength=self.num_workers).astype(np.int64)
        held += np.bincount(self.secondary_workers, minlength=self.num_workers).astype(np.int64)
        return held

    def check(self, *, num_samples: int | None = None, num_embeddings: int | None = None) -> None:
        """Validate dtypes, shapes, worker ranges and the secondary invariants."""
        w = self.num_workers
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1:
            raise PlacementError(f"num_workers must be an int >= 1, got {w!r}.")
        for name in ("sample_worker", "embedding_primary", "secondary_workers"):
            arr = np.asarray(getattr(self, name))  # a list given to the constructor: refused by dtype, not crashed on
            if arr.ndim != 1 or arr.dtype != np.int32:
                raise PlacementError(f"{name} must be 1-D int32, got {arr.dtype} {arr.shape}.")
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= w):
                raise PlacementError(f"{name} holds worker ids outside [0, {w}): [{int(arr.min())}, {int(arr.max())}].")
        if num_samples is not None and self.num_samples != num_samples:
            raise PlacementError(f"sample_worker has {self.num_samples} entries, the graph {num_samples} samples.")
        if num_embeddings is not None and self.num_embeddings != num_embeddings:
            raise PlacementError(
                f"embedding_primary has {self.num_embeddings} entries, the graph {num_embeddings} embeddings."
            )
        ip = np.asarray(self.secondary_indptr)
        if ip.dtype != np.int64 or ip.shape != (self.num_embeddings + 1,):
            raise PlacementError(f"secondary_indptr must be int64 [{self.num_embeddings + 1}], got {ip.dtype} {ip.shape}.")
        code, bad = secondary_violation(ip, np.asarray(self.secondary_workers), np.asarray(self.embedding_primary),
                                       np.int64(w))
        if code == 1:
            size = self.secondary_workers.size
            raise PlacementError(f"secondary_indptr must be non-decreasing from 0 to len(secondary_workers) = {size}, "
                                 f"{indptr_fault(ip, size, 'secondary_indptr')}.")
        if code == 2:
            raise PlacementError(f"embedding {bad} has a secondary on its primary's worker.")
        if code == 3:
            raise PlacementError(f"embedding {bad} lists the same secondary worker twice.")


def indptr_fault(indptr: np.ndarray, size: int, name: str = "indptr") -> str:
    """What makes ``indptr`` not run non-decreasing from 0 to ``size``: its ends when they are wrong, and the
    first position where it decreases (its ends alone can look right: ``got 0..328``); ``name``: the array's.

    Examples
    --------
    >>> indptr_fault(np.array([0, 2, 1, 3]), 3)
    'but it decreases at position 2 (indptr[1] = 2, indptr[2] = 1)'
    >>> indptr_fault(np.array([1, 2, 2]), 3)
    'got 1..2'
    """
    ip = np.asarray(indptr)
    said = []
    if ip.size == 0 or ip[0] != 0 or ip[-1] != size:
        said.append("got " + (f"{int(ip[0])}..{int(ip[-1])}" if ip.size else "no entries"))
    down = np.flatnonzero(ip[1:] < ip[:-1])
    if down.size:
        i = int(down[0]) + 1
        said.append(f"{'and' if said else 'but'} it decreases at position {i} ({name}[{i - 1}] = {int(ip[i - 1])}, "
                    f"{name}[{i}] = {int(ip[i])})")
    return " ".join(said)


@numba.njit(cache=True, nogil=True)
def secondary_violation(indptr, workers, primary, num_workers):  # pragma: no cover - compiled
    """One pass over the secondary CSR (worker ids already range-checked); also used by the
    manifest reader, which words the same faults with file names.

    Returns ``(0, 0)`` when valid, else ``(code, embedding)``: 1 malformed
    indptr, 2 a secondary on the primary's worker, 3 a worker listed twice.
    """
    if indptr[0] != 0 or indptr[indptr.size - 1] != workers.size:
        return 1, 0
    seen = np.full(num_workers, -1, dtype=np.int64)
    for e in range(primary.size):
        a = indptr[e]
        b = indptr[e + 1]
        if b < a or b > workers.size:
            return 1, e
        p = primary[e]
        for j in range(a, b):
            w = workers[j]
            if w == p:
                return 2, e
            if seen[w] == e:
                return 3, e
            seen[w] = e
    return 0, 0
