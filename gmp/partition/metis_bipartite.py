"""``metis-bipartite``: METIS on the sample–embedding bipartite graph itself.

Vertices are the samples and the *used* embeddings (ids no sample touches are
left out of METIS and spread over the least-loaded workers afterwards); every
(sample, embedding) pair is an undirected edge of weight 1. For an edge-cut
placement METIS's edge cut is then exactly ``remote_accesses``.

Balance. The natural formulation is multi-constraint (``ncon = 2``, vertex
weights ``[is_sample, is_embedding]``), balancing samples and rows at once.
pymetis 2025.2 does not pass ``ncon > 1`` to METIS: checked on a graph of two
single-type components, interleaved two-constraint weights came back with all
samples of one type in one part, i.e. they were read as one constraint. So
the one constraint is the sample count: samples weigh 1, embeddings 0 (rows
then go wherever their samples are). METIS's balance is a soft target
(``metis_imbalance`` -> ``ufactor``); the hard cap
``ceil(num_samples / num_workers * max_imbalance)`` is then enforced by
moving a seeded random choice of excess samples to the least-loaded workers
(usually none move).

Memory. METIS needs the graph with both edge directions as int64 (16 bytes
per edge, pymetis's ``idx_t`` is 64-bit) and much more while coarsening:
measured with pymetis 2025.2 on 1M x 26 criteo-like samples (26M edges)
the process peaked at 6.3 GiB (1.7M vertices) and 7.3 GiB (criteo-kaggle
preset, 369 s), about 256 bytes per edge, so 10M x 26 would need about
65 GiB. When the estimate
(:data:`MEMORY_PER_EDGE` per edge + :data:`MEMORY_PER_VERTEX` per vertex)
exceeds ``max_memory_gib`` (default 8) the partitioner refuses with a
:class:`PartitionError` naming the estimate (the benchmark table then says
"did not run") instead of exhausting the machine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numba
import numpy as np

from ..errors import PartitionError
from ..params import is_real
from ..graph import BipartiteGraph
from ..placement import Placement
from ..progress import task
from ..topology import Topology
from ._common import UNASSIGNED, check_max_imbalance, enforce_cap, place_unused_embeddings, run_metis, sample_cap

PTYPES = ("kway", "recursive")
#: bytes per bipartite edge: 16 for the int64 CSR (both directions) + METIS's working memory
#: (measured: 6.3 GiB peak RSS for 26M edges)
MEMORY_PER_EDGE = 256
#: bytes per vertex (xadj, weights, METIS's per-vertex arrays)
MEMORY_PER_VERTEX = 120


@dataclass(frozen=True)
class Options:
    """Options of ``metis-bipartite``.

    Attributes
    ----------
    max_imbalance
        Hard cap on samples per worker, as max/mean.
    metis_imbalance
        METIS's tolerance on the sample balance (-> ``ufactor``).
    max_memory_gib
        Refuse (PartitionError) when the estimated peak memory of METIS
        exceeds this many GiB.
    ptype
        ``"kway"`` or ``"recursive"``.
    """

    max_imbalance: float = 1.05
    metis_imbalance: float = 1.03
    max_memory_gib: float = 8.0
    ptype: str = "kway"

    def __post_init__(self) -> None:
        check_max_imbalance(self.max_imbalance)
        check_max_imbalance(self.metis_imbalance, name="metis_imbalance")
        if not is_real(self.max_memory_gib) or not self.max_memory_gib > 0:
            raise PartitionError(f"metis-bipartite: max_memory_gib must be > 0, got {self.max_memory_gib!r}.")
        if self.ptype not in PTYPES:
            raise PartitionError(f"metis-bipartite: ptype must be one of {', '.join(PTYPES)}, got {self.ptype!r}.")


def estimate_memory_bytes(num_samples: int, num_used_embeddings: int, num_edges: int) -> int:
    """Estimated peak bytes of running METIS on the bipartite graph."""
    return int(MEMORY_PER_EDGE * num_edges + MEMORY_PER_VERTEX * (num_samples + num_used_embeddings))


def partition(graph: BipartiteGraph, topology: Topology, *, seed: int, options: Options) -> Placement:
    """Partition samples and embeddings together with METIS (samples weigh 1, embeddings 0)."""
    rng = np.random.default_rng(seed)
    num_workers = topology.num_workers
    n = graph.num_samples
    indptr = np.asarray(graph.sample_indptr)
    indices = np.asarray(graph.sample_indices)
    degree = np.bincount(indices, minlength=graph.num_embeddings).astype(np.int64)
    used = np.flatnonzero(degree).astype(np.int32)

    need = estimate_memory_bytes(n, used.size, graph.num_edges)
    if need > options.max_memory_gib * 2**30:
        raise PartitionError(
            f"metis-bipartite: METIS on {n} samples + {used.size} embeddings, {graph.num_edges} edges needs about "
            f"{need / 2**30:.1f} GiB, above max_memory_gib={options.max_memory_gib:g}; use greedy-stream or metis "
            f"at this size, or raise max_memory_gib."
        )
    local = np.full(graph.num_embeddings, -1, dtype=np.int64)
    local[used] = np.arange(n, n + used.size, dtype=np.int64)
    with task("metis-bipartite: building the bipartite graph"):
        xadj, adjncy = bipartite_csr(indptr, indices, local, degree[used])
    del local
    vertex_weights = np.zeros(n + used.size, dtype=np.int64)
    vertex_weights[:n] = 1
    metis_seed = int(rng.integers(0, 2**31 - 1))
    with task(f"metis-bipartite: METIS on {n + used.size} vertices, {graph.num_edges} edges"):
        parts = run_metis(xadj, adjncy, num_workers, vertex_weights=vertex_weights, edge_weights=None,
                          seed=metis_seed, imbalance=options.metis_imbalance,
                          recursive=options.ptype == "recursive")
    del xadj, adjncy, vertex_weights

    sample_worker = np.ascontiguousarray(parts[:n])
    cap = sample_cap(n, num_workers, options.max_imbalance)
    moved_before = sample_worker.copy() if n else sample_worker
    enforce_cap(sample_worker, num_workers, cap, rng)
    primary = np.full(graph.num_embeddings, UNASSIGNED, dtype=np.int32)
    primary[used] = parts[n:]
    place_unused_embeddings(primary, num_workers)
    info = {"samples_moved_to_meet_cap": int(np.count_nonzero(moved_before != sample_worker))}
    return Placement.edge_cut(num_workers, sample_worker, primary, method="metis-bipartite",
                              options=asdict(options), seed=seed, info=info)


def bipartite_csr(indptr: np.ndarray, indices: np.ndarray, local: np.ndarray, used_degree: np.ndarray):
    """METIS CSR of the bipartite graph: vertices ``0..n-1`` samples, ``n..`` used embeddings (int64).

    ``local[e]`` is embedding ``e``'s vertex id (>= n), ``used_degree`` the
    degree of each used embedding in vertex order.
    """
    n = indptr.size - 1
    num_vertices = n + used_degree.size
    xadj = np.empty(num_vertices + 1, dtype=np.int64)
    xadj[: n + 1] = indptr
    np.cumsum(used_degree, out=xadj[n + 1 :])
    xadj[n + 1 :] += indptr[-1]
    adjncy = np.empty(2 * int(indptr[-1]), dtype=np.int64)
    _fill_bipartite(indptr, indices, local, xadj, adjncy)
    return xadj, adjncy


@numba.njit(cache=True, nogil=True)
def _fill_bipartite(indptr, indices, local, xadj, adjncy):  # pragma: no cover - compiled
    n = indptr.size - 1
    pos = xadj[n:-1].copy()
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            v = local[indices[k]]
            adjncy[k] = v
            adjncy[pos[v - n]] = i
            pos[v - n] += 1
