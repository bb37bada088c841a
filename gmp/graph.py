"""The sample–embedding bipartite graph: the one graph type that flows through gmp.

Samples are one side, embedding rows the other; an edge (i, e) means sample i
looks up embedding row e. The graph is stored as CSR in both directions with
int64 offsets and int32 ids where they fit (the full Criteo-Kaggle scale has
~1.19 billion edges, so offsets must be int64)::

    sample_indptr     int64 [num_samples + 1]     sample -> embeddings
    sample_indices    int32 [num_edges]
    emb_indptr        int64 [num_embeddings + 1]  embedding -> samples (built lazily)
    emb_indices       int32 [num_edges]           (sample ids, ascending per embedding)

The arrays may be memory-mapped views of a prepared dataset. scipy sparse
*arrays* are available as :meth:`BipartiteGraph.sample_csr` and
:meth:`BipartiteGraph.embedding_csr` (note scipy gives indices the dtype of
indptr, so those views cost 8 bytes per edge above 2^31 edges; the hot loops
use the raw arrays).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numba
import numpy as np
import scipy.sparse as sp

from ._io import index_dtype
from .errors import GraphError

if TYPE_CHECKING:  # pragma: no cover
    from .datasets.format import PreparedDataset


@dataclass(frozen=True)
class GraphStats:
    """Degree statistics of the embedding side (what HET-GMP's skew argument needs)."""

    num_samples: int
    num_embeddings: int
    num_active_embeddings: int  # embeddings with degree > 0
    num_edges: int
    mean_sample_degree: float
    max_sample_degree: int
    max_embedding_degree: int
    top1pct_access_share: float  # share of all accesses that hit the top 1% of active embeddings
    top01pct_access_share: float

    def to_json(self) -> dict:
        return {k: (float(v) if isinstance(v, float) else int(v)) for k, v in self.__dict__.items()}


class BipartiteGraph:
    """Samples x embeddings incidence, CSR both ways.

    Build with :func:`build_graph` (from a prepared dataset) or
    :meth:`from_csr` (from arrays); both end in :meth:`check`.
    """

    def __init__(self, sample_indptr: np.ndarray, sample_indices: np.ndarray, num_embeddings: int,
                 *, sha256: str | None = None, check: bool = True):
        self.sample_indptr = sample_indptr
        self.sample_indices = sample_indices
        self.num_embeddings = int(num_embeddings)
        self.sha256 = sha256
        self._emb_indptr: np.ndarray | None = None
        self._emb_indices: np.ndarray | None = None
        self._emb_degree: np.ndarray | None = None
        if check:
            self.check()

    # -- construction -----------------------------------------------------
    @classmethod
    def from_csr(cls, indptr, indices, num_embeddings: int | None = None, **kw) -> "BipartiteGraph":
        """From CSR arrays; ``num_embeddings`` defaults to ``max(indices) + 1``."""
        indptr = np.asarray(indptr, dtype=np.int64)
        indices = np.asarray(indices)
        if num_embeddings is None:
            num_embeddings = int(indices.max()) + 1 if indices.size else 0
        indices = indices.astype(index_dtype(max(num_embeddings - 1, 0)), copy=False)
        graph = cls(indptr, indices, num_embeddings, **kw)
        # one edge per (sample, embedding): the partitioners' counts assume it (a repeat counted twice
        # can exceed a worker's samples, past the soft-count table); the importers remove repeats
        if indices.size and kw.get("check", True):
            repeat = first_repeated_id(indptr, indices)
            if repeat is not None:
                raise GraphError(f"from_csr: sample {repeat[0]} lists the same embedding twice; give each "
                                 f"(sample, embedding) pair once.")
        return graph

    @classmethod
    def from_lists(cls, rows: list[list[int]], num_embeddings: int | None = None) -> "BipartiteGraph":
        """From a list of per-sample id lists (tests and tiny examples)."""
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        indices = np.array([i for r in rows for i in sorted(set(r))], dtype=np.int64)
        if any(len(set(r)) != len(r) for r in rows):
            raise GraphError("from_lists: a sample lists the same embedding twice.")
        return cls.from_csr(indptr, indices, num_embeddings)

    def check(self) -> None:
        """Validate shapes, dtypes and id ranges (raises :class:`GraphError`)."""
        ip, ix = self.sample_indptr, self.sample_indices
        if ip.ndim != 1 or ip.size < 1 or ip.dtype != np.int64:
            raise GraphError(f"sample_indptr must be 1-D int64 with >= 1 entry, got {ip.dtype} {ip.shape}.")
        if ix.ndim != 1 or ix.dtype not in (np.int32, np.int64):
            raise GraphError(f"sample_indices must be 1-D int32/int64, got {ix.dtype} {ix.shape}.")
        if int(ip[0]) != 0 or int(ip[-1]) != ix.size:
            raise GraphError(f"sample_indptr must run from 0 to num_edges={ix.size}, got {int(ip[0])}..{int(ip[-1])}.")
        if ip.size > 1 and _any_decreasing(np.asarray(ip)):
            raise GraphError("sample_indptr is not non-decreasing.")
        if ix.size:
            lo, hi = min_max(np.asarray(ix))
            if lo < 0 or hi >= self.num_embeddings:
                raise GraphError(f"embedding ids must lie in [0, {self.num_embeddings}), got [{lo}, {hi}].")

    # -- sizes --------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return int(self.sample_indptr.size - 1)

    @property
    def num_edges(self) -> int:
        return int(self.sample_indices.size)

    def sample_degree(self) -> np.ndarray:
        return np.diff(self.sample_indptr)

    def embedding_degree(self) -> np.ndarray:
        """Number of samples using each embedding (int64)."""
        if self._emb_degree is None:
            self._emb_degree = np.diff(self.emb_indptr)
        return self._emb_degree

    # -- transpose ------------------------------------------------------------
    @property
    def emb_indptr(self) -> np.ndarray:
        self._build_transpose()
        return self._emb_indptr  # type: ignore[return-value]

    @property
    def emb_indices(self) -> np.ndarray:
        self._build_transpose()
        return self._emb_indices  # type: ignore[return-value]

    def cached_embedding_degree(self) -> np.ndarray | None:
        """Samples per embedding when already known (degree or transpose built), else None (no work)."""
        if self._emb_degree is not None:
            return self._emb_degree
        if self._emb_indptr is not None:
            return np.diff(self._emb_indptr)
        return None

    def to_networkx(self, *, max_edges: int = 1_000_000):
        """The graph as a ``networkx.Graph`` (small graphs: tests, plots, cross-checks).

        Nodes ``("s", i)`` for sample i and ``("e", j)`` for embedding j, with
        ``bipartite`` 0 and 1 (networkx's convention); one edge per distinct
        (sample, embedding) pair. Refused above ``max_edges`` edges.

        >>> g = BipartiteGraph.from_lists([[0, 1], [1]], num_embeddings=2)
        >>> sorted(g.to_networkx().degree([("e", 0), ("e", 1)]))
        [(('e', 0), 1), (('e', 1), 2)]
        """
        import networkx as nx

        if self.num_edges > max_edges:
            raise GraphError(f"The graph has {self.num_edges} edges, more than max_edges={max_edges} for "
                             f"to_networkx; pass a larger max_edges or use the CSR arrays.")
        g = nx.Graph()
        g.add_nodes_from((("s", i) for i in range(self.num_samples)), bipartite=0)
        g.add_nodes_from((("e", j) for j in range(self.num_embeddings)), bipartite=1)
        ptr = np.asarray(self.sample_indptr)
        idx = np.asarray(self.sample_indices)
        rows = np.repeat(np.arange(self.num_samples), np.diff(ptr))
        g.add_edges_from((("s", int(i)), ("e", int(j))) for i, j in zip(rows, idx))
        return g

    def _build_transpose(self) -> None:
        if self._emb_indptr is not None:
            return
        self._emb_indptr, self._emb_indices = transpose_csr(np.asarray(self.sample_indptr),
                                                            np.asarray(self.sample_indices), self.num_embeddings)

    # -- scipy views -----------------------------------------------------------
    def sample_csr(self, dtype=np.float32) -> sp.csr_array:
        """samples x embeddings as a scipy ``csr_array`` of ones."""
        data = np.ones(self.num_edges, dtype=dtype)
        return sp.csr_array((data, np.asarray(self.sample_indices), np.asarray(self.sample_indptr)),
                            shape=(self.num_samples, self.num_embeddings))

    def embedding_csr(self, dtype=np.float32) -> sp.csr_array:
        """embeddings x samples (the transpose) as a scipy ``csr_array`` of ones."""
        data = np.ones(self.num_edges, dtype=dtype)
        return sp.csr_array((data, self.emb_indices, self.emb_indptr),
                            shape=(self.num_embeddings, self.num_samples))

    # -- statistics -------------------------------------------------------------
    def stats(self) -> GraphStats:
        deg = self.embedding_degree()
        sdeg = self.sample_degree()
        active = deg[deg > 0]
        total = float(active.sum()) if active.size else 0.0

        def share(frac: float) -> float:
            if not active.size:
                return 0.0
            k = max(1, int(np.ceil(active.size * frac)))
            top = np.partition(active, active.size - k)[active.size - k :]
            return float(top.sum()) / total

        return GraphStats(
            num_samples=self.num_samples,
            num_embeddings=self.num_embeddings,
            num_active_embeddings=int(active.size),
            num_edges=self.num_edges,
            mean_sample_degree=float(sdeg.mean()) if sdeg.size else 0.0,
            max_sample_degree=int(sdeg.max()) if sdeg.size else 0,
            max_embedding_degree=int(deg.max()) if deg.size else 0,
            top1pct_access_share=share(0.01),
            top01pct_access_share=share(0.001),
        )

    def cooccurrence(self, *, max_samples: int | None = None) -> sp.csr_array:
        """Weighted embedding co-occurrence graph (HET-GMP Fig. 3, what METIS cuts).

        ``W[a, b]`` = number of samples that use both embeddings a and b
        (a != b); symmetric, zero diagonal, int64 weights. Computed as
        ``A^T A`` on the first ``max_samples`` samples (all by default). Its
        size grows with the square of the sample degree (325 pairs per sample
        for 26 fields), so callers bound ``max_samples`` at large scale.
        """
        n = self.num_samples if max_samples is None else min(self.num_samples, int(max_samples))
        end = int(self.sample_indptr[n])
        a = sp.csr_array(
            (np.ones(end, dtype=np.int64), np.asarray(self.sample_indices[:end]), np.asarray(self.sample_indptr[: n + 1])),
            shape=(n, self.num_embeddings),
        )
        w = (a.T @ a).tocsr()
        w.setdiag(0)
        w.eliminate_zeros()
        w.sort_indices()
        return w


def build_graph(dataset: "PreparedDataset", *, verify_hash: bool = False) -> BipartiteGraph:
    """The bipartite graph of a prepared dataset (arrays stay memory-mapped).

    A sample listing an id twice is refused (:func:`check_unique_ids`): the partitioners count one edge per
    (sample, embedding), and a repeat counted twice can exceed a worker's samples, past the end of their
    count tables."""
    if verify_hash:
        dataset.verify_hash()
    check_unique_ids(dataset.indptr, dataset.indices, where=str(dataset.path))
    return BipartiteGraph(np.asarray(dataset.indptr), dataset.indices, dataset.num_embeddings,
                          sha256=dataset.sha256)


def check_unique_ids(indptr: np.ndarray, indices: np.ndarray, *, where: str) -> None:
    """Raise :class:`GraphError` naming the first sample that lists an id twice (``where``: the dataset).

    gmp's importers and ``write_dataset`` (``dedupe=True``, the default) write each sample's ids ascending
    and once; only ``dedupe=False`` can write a repeat."""
    repeat = first_repeated_id(indptr, indices)
    if repeat is not None:
        sample, embedding = repeat
        raise GraphError(f"{where}: sample {sample:,} lists id {embedding:,} more than once, but the partitioners "
                         f"count each (sample, id) pair once; re-import the data, or write it with "
                         f"write_dataset(..., dedupe=True), the default.")


def first_repeated_id(indptr: np.ndarray, indices: np.ndarray) -> tuple[int, int] | None:
    """``(sample, id)`` of the first sample that lists an id twice, or None.

    One compiled pass over the edges: a sample whose ids ascend strictly cannot repeat one, and a prepared
    dataset's ids ascend within every sample (the writer sorts them), so only the other samples are sorted, each
    on its own. No array is sized by the id space (a per-id mark would be 270 MB at Criteo-Kaggle's 33.8M ids).

    >>> first_repeated_id(np.array([0, 2, 5]), np.array([1, 4, 3, 0, 3]))
    (1, 3)
    >>> first_repeated_id(np.array([0, 2, 4]), np.array([1, 4, 0, 3])) is None
    True
    """
    sample, embedding = _first_repeat(np.asarray(indptr, dtype=np.int64), np.asarray(indices))
    return None if sample < 0 else (int(sample), int(embedding))


def transpose_csr(indptr: np.ndarray, indices: np.ndarray, num_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The transpose of the CSR ``indptr``/``indices`` (its first ``indptr[-1]`` entries; columns below
    ``num_cols``): ``(indptr int64 [num_cols + 1], rows)``, each column's rows ascending, in the smallest index
    type that holds the row ids."""
    num_rows = indptr.size - 1
    tindptr = np.zeros(num_cols + 1, dtype=np.int64)
    np.cumsum(np.bincount(indices[:indptr[-1]], minlength=num_cols), out=tindptr[1:])
    out = np.empty(int(indptr[-1]), dtype=index_dtype(max(num_rows - 1, 0)))
    _transpose_fill(indptr, indices, tindptr, out)
    return tindptr, out


@numba.njit(cache=True, nogil=True)
def _transpose_fill(indptr, indices, emb_indptr, out):  # pragma: no cover - compiled
    # Counting sort: the rows visited in order, so each column's rows come out ascending.
    pos = emb_indptr[:-1].copy()
    n = indptr.size - 1
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            e = indices[k]
            out[pos[e]] = i
            pos[e] += 1


@numba.njit(cache=True, nogil=True)
def _first_repeat(indptr, indices):  # pragma: no cover - compiled
    """``(sample, id)`` of the first sample that lists an id twice, or ``(-1, -1)`` (:func:`first_repeated_id`)."""
    for i in range(indptr.size - 1):
        a, b = indptr[i], indptr[i + 1]
        ascending = True
        for k in range(a + 1, b):
            if indices[k] <= indices[k - 1]:
                ascending = False
                break
        if ascending:
            continue
        ids = np.sort(indices[a:b])
        for k in range(1, ids.size):
            if ids[k] == ids[k - 1]:
                return i, np.int64(ids[k])
    return -1, np.int64(-1)


@numba.njit(cache=True, nogil=True)
def _any_decreasing(a):  # pragma: no cover - compiled
    for i in range(1, a.size):
        if a[i] < a[i - 1]:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def min_max(a):  # pragma: no cover - compiled
    lo = a[0]
    hi = a[0]
    for v in a:
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    return lo, hi
