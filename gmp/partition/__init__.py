"""Partitioner registry.

Every partitioner is a plain function with one signature::

    fn(graph: BipartiteGraph, topology: Topology, *, seed: int, options: OptionsDataclass) -> Placement

and is registered in :data:`PARTITIONERS` below (explicit, easy to grep).
Options of each algorithm are a frozen dataclass validated in
``__post_init__``; :func:`run_partitioner` builds it from a plain mapping and
rejects unknown keys with a clear message.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import PartitionError

if TYPE_CHECKING:  # annotations only: the registry stays cheap to import (the CLI's --method help lists it)
    from ..graph import BipartiteGraph
    from ..placement import Placement
    from ..topology import Topology


@dataclass(frozen=True)
class PartitionerSpec:
    name: str
    module: str  # module inside gmp.partition holding `partition` and `Options`
    description: str

    def load(self) -> tuple[Callable[..., Placement], type]:
        mod = importlib.import_module(f"{__name__}.{self.module}")
        return mod.partition, mod.Options


#: name -> spec. Adding a partitioner: write gmp/partition/NAME.py with
#: ``Options`` and ``partition``, add it here, and the common test battery
#: (tests/test_partitioners.py) picks it up.
PARTITIONERS: dict[str, PartitionerSpec] = {
    "random": PartitionerSpec("random", "random", "samples and embeddings uniformly at random, balanced (HET-MP baseline)"),
    "metis": PartitionerSpec("metis", "metis", "pymetis on the weighted embedding co-occurrence graph; samples follow their embeddings"),
    "metis-bipartite": PartitionerSpec("metis-bipartite", "metis_bipartite", "pymetis on the sample-embedding bipartite graph"),
    "greedy-stream": PartitionerSpec("greedy-stream", "greedy_stream", "one-pass min-max streaming (Alistarh et al. 2015)"),
    "hybrid": PartitionerSpec("hybrid", "hybrid", "HET-GMP: iterative 1D edge-cut + 2D vertex-cut replication"),
    "bicut": PartitionerSpec("bicut", "bicut", "BiCut/Aweto bipartite-oriented greedy (Chen et al. 2015)"),
    "hypergraph": PartitionerSpec("hypergraph", "hypergraph", "Mt-KaHyPar km1 on samples x embedding hyperedges (optional extra)"),
    "kaminpar": PartitionerSpec("kaminpar", "kaminpar", "KaMinPar on the weighted embedding co-occurrence graph (optional extra)"),
}


def register(spec: PartitionerSpec) -> None:
    PARTITIONERS[spec.name] = spec


def get_partitioner(name: str) -> tuple[Callable[..., Placement], type]:
    if name not in PARTITIONERS:
        raise PartitionError(f"unknown partitioner {name!r}; choose one of: {', '.join(sorted(PARTITIONERS))}.")
    return PARTITIONERS[name].load()


def make_options(name: str, options: Any = None) -> Any:
    """Build partitioner ``name``'s options dataclass from a mapping (unknown keys are errors); one
    already built (to check it before the graph is built) passes through."""
    _, options_cls = get_partitioner(name)
    if isinstance(options, options_cls):
        return options
    options = dict(options or {})
    known = {f.name for f in dataclasses.fields(options_cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise PartitionError(
            f"partitioner {name!r} has no option(s) {', '.join(unknown)}; it takes: {', '.join(sorted(known)) or 'none'}."
        )
    return options_cls(**options)


def run_partitioner(name: str, graph: BipartiteGraph, topology: Topology, *, seed: int = 0,
                    options: Any = None) -> Placement:
    """Run a registered partitioner and validate its result against the graph (``options``: a mapping
    of its Options fields, or the Options)."""
    fn, _ = get_partitioner(name)
    opts = make_options(name, options)
    placement = fn(graph, topology, seed=int(seed), options=opts)
    placement.check(num_samples=graph.num_samples, num_embeddings=graph.num_embeddings)
    if placement.num_workers != topology.num_workers:
        raise PartitionError(f"partitioner {name!r} returned {placement.num_workers} workers, expected {topology.num_workers}.")
    return placement


def options_to_json(options: Any) -> dict[str, Any]:
    return dataclasses.asdict(options) if dataclasses.is_dataclass(options) else dict(options or {})
