"""``hypergraph``: Mt-KaHyPar on the sample hypergraph (km1), the quality reference of the
hypergraph-partitioning field.

Model: one hypernode per sample (weight 1), one hyperedge per embedding with
at least two samples (its pins are the samples that use it; degree-1
embeddings can never be cut and are left out). Minimising the connectivity
metric ``km1 = sum_e (lambda(e) - 1)``, where lambda(e) is the number of
workers the pins of e span, minimises the number of remote copies of each
embedding, i.e. ``epoch_unique_remote`` once each embedding's primary sits on
one of the workers using it. Balance: Mt-KaHyPar's ``epsilon`` =
``max_imbalance - 1`` on samples, then the hard cap is enforced exactly
(the few excess samples, if any, move to the least-loaded workers). Each used
embedding's primary then goes to the worker with most of its samples (ties:
fewest primaries so far, then lowest id; hard cap ``max_imbalance`` on
primaries); unused ids are spread over the least-loaded workers.

The hypergraph is handed to Mt-KaHyPar as an hMetis file written from the
embedding->sample CSR by a compiled formatter (Mt-KaHyPar's Python API
otherwise wants a Python list of lists, which at 26M pins costs gigabytes
and minutes). Mt-KaHyPar is an optional extra::

    pip install 'gmp[hypergraph]'      # or: pip install mtkahypar

**Size limit.** Mt-KaHyPar holds the whole hypergraph plus its coarsening
hierarchy in memory, a few hundred bytes per pin; ``max_pins`` (default 60M,
a little over Criteo-like data at 2M samples) refuses larger inputs with a
clear :class:`~gmp.errors.PartitionError` instead of exhausting the machine.
The benchmark reports such sizes as "did not run".

Determinism: the ``deterministic`` preset (default) with the seed gives the
same partition for the same seed and thread count; other presets may vary
between runs.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numba
import numpy as np

from ..errors import MissingDependencyError, PartitionError
from ..params import is_int
from ..graph import BipartiteGraph
from ..placement import Placement
from ..progress import task
from ..topology import Topology
from ._common import check_max_imbalance, enforce_cap, primaries_by_majority, sample_cap, solver_imbalance

log = logging.getLogger(__name__)

PRESETS = ("deterministic", "default", "quality", "highest_quality", "large_k", "deterministic_quality")
INSTALL_HINT = "pip install 'gmp[hypergraph]'"

_initialized: dict[str, object] = {}


@dataclass(frozen=True)
class Options:
    """Options of ``hypergraph``.

    Parameters
    ----------
    max_imbalance
        Hard cap on samples and on primaries per worker (max/mean); Mt-KaHyPar
        runs with ``epsilon = max_imbalance - 1``. Default 1.05.
    preset
        Mt-KaHyPar preset: ``deterministic`` (default), ``default``, ``quality``, ...
    threads
        Mt-KaHyPar threads (None: all CPUs). Fixed on first use in a process.
    max_pins
        Refuse hypergraphs with more pins than this (memory guard). Default 60M.
    """

    max_imbalance: float = 1.05
    preset: str = "deterministic"
    threads: int | None = None
    max_pins: int = 60_000_000

    def __post_init__(self) -> None:
        check_max_imbalance(self.max_imbalance)
        if self.preset not in PRESETS:
            raise PartitionError(f"hypergraph: preset must be one of {', '.join(PRESETS)}, got {self.preset!r}.")
        if self.threads is not None and (not is_int(self.threads) or self.threads < 1):
            raise PartitionError(f"hypergraph: threads must be an integer >= 1 (or omitted), got {self.threads!r}.")
        if not is_int(self.max_pins) or self.max_pins < 1:
            raise PartitionError(f"hypergraph: max_pins must be an integer >= 1, got {self.max_pins!r}.")


def import_mtkahypar():
    """The ``mtkahypar`` module, or :class:`MissingDependencyError` with the install hint."""
    try:
        import mtkahypar  # noqa: PLC0415 - optional dependency
    except ImportError:
        raise MissingDependencyError(
            f"the 'hypergraph' partitioner needs Mt-KaHyPar (package 'mtkahypar'), which is not installed; "
            f"run: {INSTALL_HINT}"
        ) from None
    return mtkahypar


def _initializer(mtkahypar, threads: int | None):
    # Mt-KaHyPar's thread pool is process-wide: initialise once, reuse
    if "init" not in _initialized:
        _initialized["init"] = mtkahypar.initialize(int(threads or os.cpu_count() or 1), False)
    return _initialized["init"]


def write_hmetis(path: str | os.PathLike, emb_indptr: np.ndarray, emb_indices: np.ndarray, edges: np.ndarray,
                 num_vertices: int, *, chunk_pins: int = 1 << 22) -> int:
    """Write the hyperedges ``edges`` (rows of the embedding->sample CSR) as an hMetis file.

    Line 1: ``num_hyperedges num_vertices``; then one line per hyperedge with
    its pins, 1-based. Returns the number of pins written.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "h.hgr")
    >>> write_hmetis(p, np.array([0, 2, 5]), np.array([0, 1, 0, 2, 3]), np.array([0, 1]), 4)
    5
    >>> open(p).read()
    '2 4\\n1 2\\n1 3 4\\n'
    """
    edges = np.asarray(edges, dtype=np.int64)
    pins = 0
    with open(path, "wb") as out:
        out.write(f"{edges.size} {int(num_vertices)}\n".encode())
        start = 0
        while start < edges.size:
            # take hyperedges until ~chunk_pins pins (at least one)
            sizes = emb_indptr[edges[start:start + (1 << 20)] + 1] - emb_indptr[edges[start:start + (1 << 20)]]
            cum = np.cumsum(sizes)
            stop = start + max(1, int(np.searchsorted(cum, chunk_pins, side="right")))
            stop = min(stop, edges.size)
            npins = int(cum[stop - start - 1])
            buf = np.empty(npins * 11 + (stop - start), dtype=np.uint8)  # <= 10 digits + separator per pin
            used = _format_lines(emb_indptr, emb_indices, edges[start:stop], buf)
            out.write(buf[:used].tobytes())
            pins += npins
            start = stop
    return pins


@numba.njit(cache=True, nogil=True)
def _format_lines(indptr, indices, edges, buf):  # pragma: no cover - compiled
    pos = 0
    digits = np.empty(20, dtype=np.uint8)
    for t in range(edges.size):
        e = edges[t]
        first = True
        for k in range(indptr[e], indptr[e + 1]):
            if not first:
                buf[pos] = 32  # ' '
                pos += 1
            first = False
            v = np.int64(indices[k]) + 1
            nd = 0
            while True:
                digits[nd] = 48 + v % 10
                nd += 1
                v //= 10
                if v == 0:
                    break
            for d in range(nd - 1, -1, -1):
                buf[pos] = digits[d]
                pos += 1
        buf[pos] = 10  # '\n'
        pos += 1
    return pos


def partition(graph: BipartiteGraph, topology: Topology, *, seed: int, options: Options) -> Placement:
    """Mt-KaHyPar km1 partition of the samples; primaries follow their samples (the cost matrix is not used)."""
    mtkahypar = import_mtkahypar()
    n = topology.num_workers
    num_samples = graph.num_samples
    degree = np.bincount(np.asarray(graph.sample_indices), minlength=graph.num_embeddings)  # no transpose yet
    edges = np.flatnonzero(degree >= 2)
    num_pins = int(degree[edges].sum())
    if num_pins > options.max_pins:
        raise PartitionError(
            f"hypergraph: {num_pins:,} pins ({edges.size:,} hyperedges over {num_samples:,} samples) exceed "
            f"max_pins={options.max_pins:,}; Mt-KaHyPar would need several hundred bytes per pin. "
            f"Use a smaller dataset, raise max_pins if the machine has the memory, or another method."
        )
    rng = np.random.default_rng(seed)
    if n == 1 or num_samples == 0:
        sample_worker = np.zeros(num_samples, dtype=np.int32)
    else:
        init = _initializer(mtkahypar, options.threads)
        ctx = init.context_from_preset(getattr(mtkahypar.PresetType, options.preset.upper()))
        ctx.set_partitioning_parameters(n, solver_imbalance(options.max_imbalance, n) - 1.0, mtkahypar.Objective.KM1)
        ctx.logging = False
        mtkahypar.set_seed(int(seed) % (2**31))
        # the deterministic preset ignores that seed (same partition for every seed, mtkahypar 1.7): the samples
        # are numbered in a seeded order instead, so another seed gives another (still reproducible) partition
        perm = rng.permutation(num_samples).astype(np.int32)  # sample i is vertex perm[i]
        with tempfile.TemporaryDirectory(prefix="gmp-hgr-") as tmp:
            path = Path(tmp) / "samples.hgr"
            with task("hypergraph: writing hMetis file", total=num_pins) as advance:
                write_hmetis(path, graph.emb_indptr, perm[np.asarray(graph.emb_indices)], edges, num_samples)
                advance(num_pins)
            del edges, degree
            with task("hypergraph: Mt-KaHyPar km1", total=None):
                hg = init.hypergraph_from_file(str(path), ctx, mtkahypar.FileFormat.HMETIS)
                part = hg.partition(ctx)
                km1 = int(part.km1())
                sample_worker = np.asarray(part.get_partition(), dtype=np.int32)[perm]
                del part, hg
        log.info("hypergraph: Mt-KaHyPar km1 = %d", km1)
        enforce_cap(sample_worker, n, sample_cap(num_samples, n, options.max_imbalance), rng)

    indptr, indices = np.asarray(graph.sample_indptr), np.asarray(graph.sample_indices)
    primary = primaries_by_majority(indptr, indices, sample_worker, graph.num_embeddings, n, options.max_imbalance)
    return Placement.edge_cut(n, sample_worker, primary, method="hypergraph", options=asdict(options), seed=seed)
