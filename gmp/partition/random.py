"""``random``: samples and embeddings placed uniformly at random, balanced.

This is HET-GMP's HET-MP baseline (hash/random placement with no regard to
the graph). Balance is exact: a seeded permutation dealt round-robin, so
worker loads differ by at most one sample and one embedding.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..graph import BipartiteGraph
from ..placement import Placement
from ..topology import Topology


@dataclass(frozen=True)
class Options:
    """``random`` takes no options."""


def balanced_random_assignment(n: int, num_workers: int, rng: np.random.Generator) -> np.ndarray:
    """int32 [n]: a uniformly random assignment with sizes differing by at most one."""
    out = np.empty(n, dtype=np.int32)
    out[rng.permutation(n)] = np.arange(n, dtype=np.int64) % num_workers
    return out


def partition(graph: BipartiteGraph, topology: Topology, *, seed: int, options: Options) -> Placement:
    rng = np.random.default_rng(seed)
    n = topology.num_workers
    return Placement.edge_cut(
        n,
        balanced_random_assignment(graph.num_samples, n, rng),
        balanced_random_assignment(graph.num_embeddings, n, rng),
        method="random",
        options=asdict(options),
        seed=seed,
    )
