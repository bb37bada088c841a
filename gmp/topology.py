"""Worker-to-worker communication cost matrices.

``cost[i, j]`` is the relative cost of moving one embedding row from worker
``i`` to worker ``j`` (HET-GMP Eq. 3 weighs remote accesses by it). Three ways
to get one:

* ``"8"`` — 8 homogeneous workers, cost 1 between any two;
* ``"2x8"`` — 2 machines x 8 GPUs; intra-machine cost 1, inter-machine cost
  ``inter_cost`` (10 by default, the bandwidth ratio of HET-GMP section 7.2);
* a JSON file ``{"cost": [[0, 1], [1, 0]]}`` (or a bare nested list).

Every matrix is validated: square, non-negative, at most :data:`MAX_COST`
(so every sum of costs x rows stays a finite number), zero diagonal. A file
and a manifest's ``topology`` are read by the same rule
(:func:`topology_fields`): ``name`` a string, ``machine_of`` one integer
machine index per worker.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._memory import check_memory
from .errors import TopologyError
from .params import param_error
from .wording import plural

DEFAULT_INTER_COST = 10.0
#: the largest cost gmp takes: costs are relative (1 = a row between two workers of one machine), and every
#: weighted metric and hybrid's objective sum cost x rows; 1e12 x 2^63 rows x 2048^2 pairs is still about 4e37,
#: far below float64's 1.8e308 (``--inter-cost 1e308`` wrote NaN and Infinity into report.json)
MAX_COST = 1e12


@dataclass(frozen=True, eq=False)
class Topology:
    """A validated ``num_workers x num_workers`` cost matrix (float64)."""

    cost: np.ndarray
    name: str = "custom"
    #: machine index of every worker (hierarchical topologies), else all zeros
    machine_of: np.ndarray | None = None

    def __post_init__(self) -> None:
        c = np.asarray(self.cost, dtype=np.float64)
        object.__setattr__(self, "cost", c)
        validate_cost(c, where=self.name)
        if self.machine_of is None:
            object.__setattr__(self, "machine_of", np.zeros(c.shape[0], dtype=np.int32))
        machine = machine_indices(self.machine_of, c.shape[0], where=self.name)
        object.__setattr__(self, "machine_of", machine)
        used = np.unique(machine)
        if used.size and not np.array_equal(used, np.arange(used.size)):  # the machine-level passes deal onto 0..M-1
            missing = sorted(set(range(int(used.max()) + 1)) - set(used.tolist()))  # (indices are >= 0 by now)
            raise TopologyError(f"{self.name}: machine_of must number the machines 0..M-1 with every machine holding "
                                f"a worker; machine(s) {missing[:5]} hold none: renumber them.")

    @property
    def num_workers(self) -> int:
        return int(self.cost.shape[0])

    @property
    def num_machines(self) -> int:
        return int(self.machine_of.max()) + 1 if self.num_workers else 0

    @property
    def is_uniform(self) -> bool:
        off = self.cost[~np.eye(self.num_workers, dtype=bool)]
        return bool(off.size == 0 or np.all(off == off[0]))

    def to_json(self) -> dict:
        return {"name": self.name, "cost": self.cost.tolist(), "machine_of": self.machine_of.tolist()}

    @classmethod
    def from_json(cls, obj: dict) -> "Topology":
        """The topology :meth:`to_json` wrote (a manifest's ``topology``), read by the rule a topology file is
        read by (:func:`topology_fields`)."""
        name = obj.get("name", "custom")
        cost, name, machine_of = topology_fields(obj, where=name if isinstance(name, str) else "topology",
                                                 default_name="custom")
        return cls(cost, name=name, machine_of=machine_of)


def topology_fields(obj: dict, *, where: str, default_name: str) -> tuple[np.ndarray, str, np.ndarray | None]:
    """``(cost, name, machine_of)`` of a topology object, ``{"cost": [[...]], "name": "..."?, "machine_of":
    [...]?}``, checked by the one rule a topology file (:func:`load_topology`) and a manifest's ``topology``
    (:meth:`Topology.from_json`) share, so gmp never writes a manifest from a file it would refuse to read:
    ``name`` a string, ``cost`` a valid matrix (:func:`validate_cost`), ``machine_of`` one integer machine
    index per worker (0.5 or true is no machine index; nothing is truncated or cast). ``where`` starts every
    message."""
    name = obj.get("name", default_name)
    if not isinstance(name, str):
        raise TopologyError(f"{where}: 'name' must be a string, got {json.dumps(name, default=str)[:40]}.")
    try:
        cost = np.asarray(obj["cost"], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise TopologyError(f"{where}: 'cost' must be a square matrix of numbers.") from None
    validate_cost(cost, where=where)
    return cost, name, machine_indices(obj.get("machine_of"), cost.shape[0], where=where)


def machine_indices(value, num_workers: int, *, where: str) -> np.ndarray | None:
    """``value`` (JSON's ``machine_of``) as int32 [num_workers] machine indices in ``[0, num_workers)``, or None
    when not given. Refused: a list of another length or shape, anything but integers (floats, booleans,
    text), and an index that cannot number a machine of ``num_workers`` workers (the int32 cast overflowed)."""
    if value is None:
        return None
    try:
        mo = np.asarray(value)
    except (TypeError, ValueError, OverflowError):  # ragged, or an int beyond 64 bits
        mo = np.asarray([], dtype=object)
    if mo.dtype == object or mo.dtype.kind not in "biufUS":
        raise TopologyError(f"{where}: machine_of must list one integer machine index per worker ({num_workers}).")
    if mo.size and not np.issubdtype(mo.dtype, np.integer):  # 0.5, true or "a": not cast to a machine
        kind = {"b": "true/false", "U": "text", "S": "text"}.get(mo.dtype.kind, str(mo.dtype))
        raise TopologyError(f"{where}: machine_of must hold integer machine indices, got {kind} values.")
    if mo.shape != (num_workers,):  # every reader indexes it by worker (the machine-level passes, reports)
        got = f"{mo.size} entries" if mo.ndim == 1 else f"shape {mo.shape}"
        raise TopologyError(f"{where}: machine_of must list one machine index per worker ({num_workers}), "
                            f"got {got}.")
    low, high = (int(mo.min()), int(mo.max())) if mo.size else (0, 0)
    if low < 0 or high >= num_workers:  # M machines of N workers are numbered below N
        raise TopologyError(f"{where}: machine_of must number the machines 0..M-1 with every machine holding a "
                            f"worker; got {low if low < 0 else high}: renumber them.")
    return mo.astype(np.int32)


def validate_cost(cost: np.ndarray, *, where: str = "cost matrix") -> None:
    if cost.ndim != 2 or cost.shape[0] != cost.shape[1] or cost.shape[0] < 1:
        raise TopologyError(f"{where}: expected a square N x N matrix with N >= 1, got shape {cost.shape}.")
    if not np.all(np.isfinite(cost)):
        raise TopologyError(f"{where}: entries must be finite numbers.")
    if np.any(cost < 0):
        i, j = np.argwhere(cost < 0)[0]
        raise TopologyError(f"{where}: cost[{i}][{j}] = {cost[i, j]} is negative; costs must be >= 0.")
    if np.any(cost > MAX_COST):
        i, j = np.argwhere(cost > MAX_COST)[0]
        raise TopologyError(f"{where}: cost[{i}][{j}] = {cost[i, j]:g} is above {MAX_COST:g}, the largest cost gmp "
                            f"takes (costs are relative, 1 = a row within a machine; larger ones make the weighted "
                            f"sums overflow): scale the costs down.")
    if np.any(np.diag(cost) != 0):
        i = int(np.flatnonzero(np.diag(cost) != 0)[0])
        raise TopologyError(f"{where}: cost[{i}][{i}] = {cost[i, i]}; the diagonal must be 0 (local access is free).")


#: bytes per pair of workers a run over N workers holds: the N x N cost matrix with its temporaries (3 x 8 B)
#: and the quality report's N x N traffic matrix, written to report.json and read back (about 100 B a number
#: as JSON text and Python floats: ``--workers 7000`` wrote 1.9 GB that ``gmp report`` could not read in 4 GB)
BYTES_PER_WORKER_PAIR = 24 + 100


#: bytes of JSON text per pair of workers that a placement writes: manifest.json and report.json each hold the
#: N x N topology costs, report.json also the N x N traffic matrix, every number on its own indented line
#: (about 15 B each; ``--workers 7000`` made 1.9 GB of report.json)
JSON_BYTES_PER_WORKER_PAIR = 54
#: the most workers a placement may have: its headers stay under about 230 MB of JSON, which every reader
#: (``gmp report``, ``gmp train``, another machine) parses whole (:data:`gmp._io.MAX_HEADER_BYTES`)
MAX_PLACEMENT_WORKERS = 2048


def check_num_workers(num_workers: int, what: str) -> None:
    """Refuse, before any N x N matrix is made, a worker count over :data:`MAX_PLACEMENT_WORKERS` (its manifest
    and report would be JSON too large to read back) or whose matrices cannot fit in memory (the host's,
    capped by the memory cgroup); ``what`` names where the count came from."""
    check_memory(BYTES_PER_WORKER_PAIR * float(num_workers) ** 2, error=TopologyError,
                 what=f"{what}: {num_workers:,} workers ({num_workers:,} x {num_workers:,} cost and traffic matrices)",
                 fix="use fewer workers.")
    if num_workers > MAX_PLACEMENT_WORKERS:
        size = JSON_BYTES_PER_WORKER_PAIR * float(num_workers) ** 2
        raise TopologyError(f"{what}: {num_workers:,} workers would write about {size / 1e9:,.1f} GB of N x N "
                            f"matrices (topology costs, traffic) as JSON into manifest.json and report.json, which "
                            f"every reader parses whole; gmp places at most {MAX_PLACEMENT_WORKERS:,} workers: use "
                            f"fewer.")


def homogeneous(num_workers: int, *, what: str | None = None) -> Topology:
    """``num_workers`` workers, every pair at cost 1; ``what`` names where the count came from in refusals
    (default ``topology N``)."""
    if num_workers < 1:
        raise TopologyError(f"number of workers must be >= 1, got {num_workers}.")
    check_num_workers(num_workers, what or f"topology {num_workers}")
    cost = np.ones((num_workers, num_workers)) - np.eye(num_workers)
    return Topology(cost, name=str(num_workers))


def hierarchical(num_machines: int, workers_per_machine: int, *, intra_cost: float = 1.0,
                 inter_cost: float = DEFAULT_INTER_COST) -> Topology:
    """``num_machines`` x ``workers_per_machine`` workers; worker w is on machine w // workers_per_machine."""
    if num_machines < 1 or workers_per_machine < 1:
        raise TopologyError(f"topology {num_machines}x{workers_per_machine}: both numbers must be >= 1.")
    if intra_cost < 0 or inter_cost < 0:
        raise TopologyError("intra- and inter-machine costs must be >= 0.")
    if inter_cost > MAX_COST:
        raise param_error(TopologyError, "inter_cost", f"`inter_cost` {inter_cost:g} is above {MAX_COST:g}, the "
                                                       f"largest cost gmp takes (intra-machine cost is 1; larger ones "
                                                       f"make the weighted sums overflow).")
    check_num_workers(num_machines * workers_per_machine, f"topology {num_machines}x{workers_per_machine}")
    machine = np.repeat(np.arange(num_machines, dtype=np.int32), workers_per_machine)
    same = machine[:, None] == machine[None, :]
    cost = np.where(same, intra_cost, inter_cost).astype(np.float64)
    np.fill_diagonal(cost, 0.0)
    return Topology(cost, name=f"{num_machines}x{workers_per_machine}", machine_of=machine)


def parse_topology(spec: str, *, inter_cost: float = DEFAULT_INTER_COST) -> Topology:
    """Parse ``"8"`` or ``"2x8"``."""
    spec = spec.strip().lower()
    if re.fullmatch(r"\d+", spec):
        return homogeneous(int(spec))
    m = re.fullmatch(r"(\d+)x(\d+)", spec)
    if m:
        return hierarchical(int(m.group(1)), int(m.group(2)), inter_cost=inter_cost)
    raise TopologyError(f"topology {spec!r} not understood; expected N (e.g. 8) or MxG (e.g. 2x8), or use `topology_file`.")


def load_topology(path: str | os.PathLike) -> Topology:
    """Read ``{"cost": [[...]], "machine_of": [...]?}`` or a bare nested list from JSON."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TopologyError(f"cannot read topology file {path}: {exc.strerror}.") from None
    except ValueError as exc:
        raise TopologyError(f"topology file {path} is not valid JSON: {exc}.") from None
    if isinstance(obj, list):
        obj = {"cost": obj}
    if not isinstance(obj, dict) or "cost" not in obj:
        raise TopologyError(f"topology file {path}: expected an object with a 'cost' matrix.")
    where = f"topology file {path}"
    try:
        cost = np.asarray(obj["cost"], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise TopologyError(f"{where}: 'cost' must be a square matrix of numbers.") from None
    if cost.ndim == 2 and cost.shape[0] == cost.shape[1]:  # before the N x N checks make temporaries
        check_num_workers(cost.shape[0], where)
    cost, name, machine_of = topology_fields(obj, where=where, default_name=path.stem)
    return Topology(cost, name=name, machine_of=machine_of)


def resolve_topology(workers: int | None, spec: str | None, file: str | None, *,
                     inter_cost: float = DEFAULT_INTER_COST) -> Topology:
    """The topology the CLI flags describe, checked against ``--workers``."""
    if spec and file:
        raise TopologyError("give `topology` or `topology_file`, not both.")
    if file:
        topo = load_topology(file)
    elif spec:
        topo = parse_topology(spec, inter_cost=inter_cost)
    elif workers is not None:  # 0 is refused by homogeneous, not taken for "not given"
        topo = homogeneous(workers, what=f"`workers` {workers}")
    else:
        raise TopologyError("give `workers` N, `topology` or `topology_file`.")
    if workers is not None and workers != topo.num_workers:
        raise TopologyError(f"`workers` {workers} disagrees with the topology's {topo.num_workers:,} "
                            f"{plural('worker', topo.num_workers)}.")
    return topo
