"""``kaminpar``: KaMinPar (Gottesbüren, Heuer, Sanders, Schulz, Seemaier; ESA 2021) on the co-occurrence graph.

The scalable edge-cut baseline: the same graph as :mod:`gmp.partition.metis`
(embeddings joined by an edge weighted by the number of samples using both,
vertex weight = the embedding's degree, built from a seeded row subset of at
most ``max_pairs`` pairs), partitioned by KaMinPar's deep multilevel scheme
(size-constrained label propagation for coarsening and refinement) instead
of METIS; then, as in ``metis``, every sample goes to the worker holding
most of its embeddings (hard cap ``max_imbalance``, seeded order), unseen
embeddings to the worker holding most of their samples, unused ids to the
least-loaded workers.

KaMinPar's Python binding reads graphs from files only, so the graph is
written once to a temporary file in the binary ParHiP format (header
``version, n, m`` as uint64; uint64 byte offsets; uint32 neighbours, vertex
weights and edge weights -- the version word's flags say so), which
KaMinPar memory-maps.

Optional extra (MIT)::

    pip install 'gmp[kaminpar]'      # or: pip install kaminpar

Without it the partitioner raises :class:`~gmp.errors.MissingDependencyError`
with that hint. Determinism: KaMinPar is seeded from ``seed``; with
``threads=1`` (the default) the result depends only on the seed. More
threads are faster, but its parallel label propagation may then give a
different partition from run to run.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import numpy as np

from ..errors import MissingDependencyError, PartitionError
from ..params import is_int
from ..graph import BipartiteGraph
from ..placement import Placement
from ..topology import Topology
from ._common import check_max_imbalance, solver_imbalance
from .metis import partition_cooccurrence

INSTALL_HINT = "pip install 'gmp[kaminpar]'  (or: pip install kaminpar)"

#: KaMinPar's preset contexts (``kaminpar.<name>_context()``)
PRESETS = ("default", "fast", "eco", "strong")


@dataclass(frozen=True)
class Options:
    """Options of ``kaminpar``.

    Attributes
    ----------
    max_imbalance
        Hard cap on samples per worker (max/mean), as for ``metis``.
    kaminpar_imbalance
        KaMinPar's own tolerance on the vertex-weight (degree) balance, max/mean
        (its ``epsilon`` = value - 1), above 1.0.
    max_pairs, max_samples
        Bound the co-occurrence graph as in ``metis`` (seeded row subset).
    preset
        KaMinPar's configuration: ``default``, ``fast``, ``eco`` or ``strong``.
    threads
        KaMinPar's threads (1 = deterministic per seed).
    """

    max_imbalance: float = 1.05
    kaminpar_imbalance: float = 1.03
    max_pairs: int = 24_000_000
    max_samples: int | None = None
    preset: str = "default"
    threads: int = 1

    def __post_init__(self) -> None:
        check_max_imbalance(self.max_imbalance)
        check_max_imbalance(self.kaminpar_imbalance, name="kaminpar_imbalance")
        if self.kaminpar_imbalance <= 1.0:  # KaMinPar refuses epsilon = 0 (it asks for block weights instead)
            raise PartitionError(f"kaminpar: kaminpar_imbalance must be a number > 1.0 (KaMinPar needs some slack; "
                                 f"1.03 allows 3% above the mean), got {self.kaminpar_imbalance!r}.")
        if not is_int(self.max_pairs) or self.max_pairs < 1:
            raise PartitionError(f"kaminpar: max_pairs must be a positive integer, got {self.max_pairs!r}.")
        if self.max_samples is not None and (not is_int(self.max_samples) or self.max_samples < 1):
            raise PartitionError(f"kaminpar: max_samples must be a positive integer or None, got {self.max_samples!r}.")
        if self.preset not in PRESETS:
            raise PartitionError(f"kaminpar: preset must be one of {', '.join(PRESETS)}, got {self.preset!r}.")
        if not is_int(self.threads) or self.threads < 1:
            raise PartitionError(f"kaminpar: threads must be an integer >= 1, got {self.threads!r}.")


def import_kaminpar():
    """The ``kaminpar`` module, or :class:`MissingDependencyError` with the install hint."""
    try:
        import kaminpar  # noqa: PLC0415 - optional dependency, imported where needed
    except ImportError:
        raise MissingDependencyError(
            f"the 'kaminpar' partitioner needs KaMinPar (package 'kaminpar'), which is not installed; "
            f"run: {INSTALL_HINT}"
        ) from None
    return kaminpar


def write_parhip(path: str, xadj: np.ndarray, adjncy: np.ndarray, vertex_weights: np.ndarray,
                 edge_weights: np.ndarray) -> None:
    """The graph in KaMinPar's binary ParHiP format (64-bit offsets; 32-bit ids and weights).

    Version word: bit set = *absent / 32-bit*: bit 0 no edge weights, bit 1 no vertex weights,
    bit 2 32-bit offsets, bit 3 32-bit vertex ids, bit 4 32-bit vertex weights, bit 5 32-bit edge
    weights. Offsets are byte positions of each vertex's neighbour list in the file.
    """
    n = xadj.size - 1
    if n >= 2**32 or int(np.max(vertex_weights, initial=0)) >= 2**31 or int(np.max(edge_weights, initial=0)) >= 2**31:
        raise PartitionError(f"kaminpar: graph of {n} vertices does not fit ParHiP's 32-bit ids/weights.")
    version = (1 << 3) | (1 << 4) | (1 << 5)
    base = 24 + (n + 1) * 8
    with open(path, "wb") as fh:
        np.array([version, n, adjncy.size], dtype=np.uint64).tofile(fh)
        (np.uint64(base) + np.asarray(xadj, dtype=np.uint64) * np.uint64(4)).tofile(fh)
        np.asarray(adjncy, dtype=np.uint32).tofile(fh)
        np.asarray(vertex_weights, dtype=np.uint32).tofile(fh)
        np.asarray(edge_weights, dtype=np.uint32).tofile(fh)


def run_kaminpar(xadj: np.ndarray, adjncy: np.ndarray, num_parts: int, *, vertex_weights: np.ndarray,
                 edge_weights: np.ndarray, seed: int, imbalance: float, preset: str, threads: int) -> np.ndarray:
    """KaMinPar's k-way partition of a CSR graph: int32 [num_vertices] parts."""
    kaminpar = import_kaminpar()
    num_vertices = xadj.size - 1
    if num_parts == 1 or num_vertices == 0:
        return np.zeros(num_vertices, dtype=np.int32)
    with tempfile.TemporaryDirectory(prefix="gmp-kaminpar-") as tmp:
        path = os.path.join(tmp, "graph.parhip")
        write_parhip(path, xadj, adjncy, vertex_weights, edge_weights)
        graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP)
    kaminpar.reseed(int(seed))
    context = getattr(kaminpar, f"{preset}_context")()
    solver = kaminpar.KaMinPar(int(threads), context)
    parts = solver.compute_partition(graph, int(num_parts), solver_imbalance(imbalance, num_parts) - 1.0)
    return np.asarray(parts, dtype=np.int32)


def partition(graph: BipartiteGraph, topology: Topology, *, seed: int, options: Options) -> Placement:
    """Partition the co-occurrence graph with KaMinPar, then place samples by majority (the path
    :func:`gmp.partition.metis.partition_cooccurrence` shares with ``metis``)."""
    import_kaminpar()  # fail before building the graph

    def cut(xadj, adjncy, num_parts, vertex_weights, edge_weights, tool_seed):
        return run_kaminpar(xadj, adjncy, num_parts, vertex_weights=vertex_weights, edge_weights=edge_weights,
                            seed=tool_seed, imbalance=options.kaminpar_imbalance, preset=options.preset,
                            threads=options.threads)

    return partition_cooccurrence(graph, topology, seed=seed, options=options, name="kaminpar", cut=cut)
