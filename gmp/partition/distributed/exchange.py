"""The shard / owner / ghost layout of the distributed hybrid and the messages between processes.

Process r of P holds

* its **shard**: the samples ``[start_r, stop_r)`` (contiguous ranges of equal size), read from the
  memory-mapped CSR and re-numbered to *ghost* ids;
* **ghosts**: a copy of the rows its shard touches (``gids``, ascending global ids): counts, drow,
  primary, degree;
* the **owned rows**: the used rows x with ``x % P == r`` (``used``, ascending): the authoritative
  counts ``count`` [U, N] and primaries ``prim`` [U], and who holds a ghost of each (``subs``, a
  bit per process).

Every exchange is one :meth:`gmp.comm.CommEngine.alltoallv` of int64 (or float64) rows, so the
same code runs on the distributed engine under torchrun and on the local engine with P = 1
(the out-of-core path), and the engine counts the bytes.
"""

from __future__ import annotations

import numpy as np
import torch

from ...comm import CommEngine
from ...errors import PartitionError

#: category under which the engine counts the partitioner's bytes
CATEGORY = "ids_clocks"


class Mesh:
    """The processes of one run: rank, size, the engine and byte/round counters."""

    def __init__(self, engine: CommEngine):
        self.engine = engine
        if engine.world_size == 1:
            self.size, self.rank = 1, 0
        elif len(engine.local_workers) == 1:
            self.size, self.rank = int(engine.world_size), int(engine.local_workers[0])
        else:
            raise PartitionError(f"the distributed hybrid needs one process per rank (a distributed engine) or "
                                 f"one local worker, got an engine hosting {len(engine.local_workers)} workers.")
        if self.size > 64:
            raise PartitionError(f"the distributed hybrid runs on up to 64 processes (a bit per process marks who "
                                 f"holds a row), got {self.size}; launch at most 64.")
        self.exchanges = 0

    # -- primitives ---------------------------------------------------------
    def alltoall(self, parts: list[np.ndarray], dtype=np.int64) -> list[np.ndarray]:
        """``parts[dst]`` (2-D arrays of one width) to every process; returns ``recv[src]``."""
        self.exchanges += 1
        if self.size == 1:
            return [np.ascontiguousarray(parts[0], dtype=dtype)]
        width = max((p.shape[1] for p in parts), default=1)
        sends = [torch.from_numpy(np.ascontiguousarray(p, dtype=dtype).reshape(-1, width)) for p in parts]
        (recv,) = self.engine.alltoallv([sends], CATEGORY)
        return [r.numpy().reshape(-1, width) for r in recv]

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum over processes (float64)."""
        if self.size == 1:
            return np.asarray(values, dtype=np.float64)
        return np.asarray(self.engine.sum_across(np.asarray(values, dtype=np.float64)))

    def isum(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum of an integer vector over processes (exact below 2^53)."""
        return np.rint(self.sum(np.asarray(values, dtype=np.float64))).astype(np.int64)

    def to_root(self, array: np.ndarray, dtype=np.int64) -> list[np.ndarray] | None:
        """Every process's 1-D ``array`` on rank 0 (in rank order); None elsewhere."""
        a = np.asarray(array, dtype=dtype).reshape(-1, 1)
        empty = np.zeros((0, 1), dtype=dtype)
        recv = self.alltoall([a if dst == 0 else empty for dst in range(self.size)], dtype=dtype)
        return [r.reshape(-1) for r in recv] if self.rank == 0 else None

    def broadcast(self, obj):
        return obj if self.size == 1 else self.engine.broadcast_object(obj)

    def split_room(self, room: np.ndarray, turn: int) -> np.ndarray:
        """This process's share of ``room`` (int64 [N]): ``room // P`` each, the remainder of worker w
        to the processes ``turn + w, turn + w + 1, ...`` (mod P); the shares of all processes sum to
        ``room`` exactly, and the remainders spread over the processes."""
        room = np.maximum(np.asarray(room, dtype=np.int64), 0)
        share = room // self.size
        extra = room % self.size
        slot = (self.rank - turn - np.arange(room.size)) % self.size
        return share + (slot < extra).astype(np.int64)


def shard_range(num_samples: int, size: int, rank: int) -> tuple[int, int]:
    """Samples ``[start, stop)`` of process ``rank``: contiguous ranges differing by at most one."""
    return num_samples * rank // size, num_samples * (rank + 1) // size


def as_rows(values: np.ndarray, num_rows: int) -> np.ndarray:
    """``values`` as int64 [num_rows, c] (a vector is one column); an empty shard's rows too."""
    values = np.asarray(values, dtype=np.int64)
    return values.reshape(num_rows, 1) if values.ndim == 1 else values.reshape(num_rows, values.shape[-1])


class Ghosts:
    """The ghost ids of a shard and the routing of owner rows to them."""

    def __init__(self, mesh: Mesh, gids: np.ndarray):
        self.mesh = mesh
        self.gids = gids  # int64, ascending
        # ghost positions per owner, ascending (the order the owner keeps its subscriber lists in);
        # one process owns every ghost (no index arrays: out of core, every byte counts)
        self.by_owner = [slice(None)] if mesh.size == 1 else [np.flatnonzero(gids % mesh.size == o)
                                                              for o in range(mesh.size)]

    def send_to_owners(self, values: np.ndarray) -> list[np.ndarray]:
        """Rows ``[gid, *values[g]]`` of every ghost g to its owner; returns what this process
        received as owner, per source."""
        table = np.concatenate([self.gids[:, None], as_rows(values, self.gids.size)], axis=1)
        return self.mesh.alltoall([table[pos] for pos in self.by_owner])

    def receive_full(self, owned: "OwnedRows", values: np.ndarray) -> np.ndarray:
        """Every ghost's row of the owners' ``values`` (int64 [U, c]): [ghosts, c]."""
        values = as_rows(values, owned.used.size)
        recv = self.mesh.alltoall([values[pos] for pos in owned.sub_pos])
        out = np.empty((self.gids.size, values.shape[1]), dtype=np.int64)
        for o, pos in enumerate(self.by_owner):
            out[pos] = recv[o]
        return out


class OwnedRows:
    """The used rows this process owns (``x % P == rank``), built from what the ghosts sent."""

    def __init__(self, mesh: Mesh, received: list[np.ndarray]):
        self.mesh = mesh
        ids = [r[:, 0] for r in received]
        if mesh.size == 1:  # the ghosts are the owned rows, same order (ascending ids)
            self.used, self.sub_pos, self.subs = ids[0].copy(), [slice(None)], np.zeros(0, dtype=np.uint64)
            return
        self.used = np.unique(np.concatenate(ids))
        self.sub_pos = [np.searchsorted(self.used, i) for i in ids]
        self.subs = np.zeros(self.used.size, dtype=np.uint64)
        for s, pos in enumerate(self.sub_pos):
            self.subs[pos] |= np.uint64(1) << np.uint64(s)

    def sum_received(self, received: list[np.ndarray]) -> np.ndarray:
        """Sum of the value columns the ghosts sent (int64 [U, c])."""
        width = received[0].shape[1] - 1
        out = np.zeros((self.used.size, width), dtype=np.int64)
        for pos, r in zip(self.sub_pos, received):
            out[pos] += r[:, 1:]
        return out
