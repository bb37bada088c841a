"""A worker's rows by id: deterministic initial values (:func:`initial_rows`), the id -> slot map
(:class:`SlotMap`) and the ids a placement replicates on a worker (:func:`secondary_ids_of`).
Used by :mod:`gmp.train.store` (which re-exports them)."""

from __future__ import annotations

import numpy as np
import torch

from ..placement import Placement
from .device_arrays import DeviceArrays

INIT_SCALE = 0.05
_CHUNK_BITS = 16
#: values drawn at a time when a chunk's rows are drawn in pieces (8 MiB of float64)
_PIECE_VALUES = 1 << 20
#: largest id space mapped with a dense int32 array (64 MiB).
DENSE_MAP_MAX_IDS = 1 << 24


def initial_rows(ids: np.ndarray, row_dim: int, seed: int, dtype=np.float64) -> np.ndarray:
    """[len(ids), row_dim] of ``dtype``: the deterministic initial value of each global id
    (drawn in float64, then cast).

    Id ``i`` is row ``i % 2**16`` of a ``[2**16, row_dim]`` uniform block drawn from
    ``(seed, 7919, i >> 16)``, so a row's value depends on its id alone, not on which ids are
    asked together. The block is drawn in pieces of about ``_PIECE_VALUES`` values, up to the
    chunk's largest id (the generator's stream continues across pieces: the same values), so
    memory stays bounded whatever ``row_dim`` is."""
    ids = np.asarray(ids, dtype=np.int64)
    out = np.empty((ids.size, row_dim), dtype=dtype)
    if ids.size == 0:
        return out
    order = np.argsort(ids, kind="stable")
    chunk = ids[order] >> _CHUNK_BITS
    bounds = np.flatnonzero(np.diff(chunk)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [ids.size]])
    mask = (1 << _CHUNK_BITS) - 1
    piece = max(1, _PIECE_VALUES // max(int(row_dim), 1))
    for a, b in zip(starts, ends):
        rng = np.random.default_rng([int(seed), 7919, int(chunk[a])])
        sel = order[a:b]  # this chunk's ids, ascending
        within = ids[sel] & mask
        lo = 0
        for p in range(0, int(within[-1]) + 1, piece):  # rows [p, p + piece) of the block
            block = rng.uniform(-INIT_SCALE, INIT_SCALE, size=(piece, row_dim))
            hi = lo + int(np.searchsorted(within[lo:], p + piece))
            out[sel[lo:hi]] = block[within[lo:hi] - p]
            lo = hi
    return out


class SlotMap:
    """Global id -> local slot (-1 when the id is not held)."""

    def __init__(self, ids: np.ndarray, num_embeddings: int):
        ids = np.asarray(ids, dtype=np.int64)
        self.num_embeddings = int(num_embeddings)
        # one worker holding every id in order (no manifest): slot = id, no map at all
        self._identity = ids.size == self.num_embeddings and bool(np.all(ids == np.arange(ids.size)))
        if self._identity:
            self._dense = None
        elif self.num_embeddings <= DENSE_MAP_MAX_IDS:
            self._dense = np.full(self.num_embeddings, -1, dtype=np.int32)
            self._dense[ids] = np.arange(ids.size, dtype=np.int32)
        else:
            self._dense = None
            self._order = np.argsort(ids, kind="stable")
            self._sorted = ids[self._order]
        self._device = DeviceArrays()  # the map as tensors (lookup_tensor)

    def lookup(self, gids: np.ndarray) -> np.ndarray:
        gids = np.asarray(gids, dtype=np.int64)
        if self._identity:
            return gids.copy()
        if self._dense is not None:
            return self._dense[gids].astype(np.int64)
        pos = np.searchsorted(self._sorted, gids)
        pos_c = np.minimum(pos, max(self._sorted.size - 1, 0))
        hit = (pos < self._sorted.size) & (self._sorted[pos_c] == gids) if self._sorted.size else np.zeros(gids.size, bool)
        out = np.full(gids.size, -1, dtype=np.int64)
        out[hit] = self._order[pos_c[hit]]
        return out

    def lookup_tensor(self, gids: torch.Tensor) -> torch.Tensor:
        """:meth:`lookup` as torch operations on ``gids``' device (the torch id path of the preparation,
        :mod:`gmp.train.device_ids`): int64 slots, -1 where not held, equal to :meth:`lookup`'s. The map
        is a tensor on that device (made on first use; on the CPU it shares the map's memory): the
        dense map indexed, or ``searchsorted`` over the sorted held ids."""
        if self._identity:
            return gids.clone()
        maps = self._maps(gids.device)
        if self._dense is not None:
            return maps[0].index_select(0, gids).long()
        sorted_ids, order = maps
        if sorted_ids.shape[0] == 0:
            return torch.full_like(gids, -1)
        pos = torch.searchsorted(sorted_ids, gids).clamp_(max=sorted_ids.shape[0] - 1)
        return torch.where(sorted_ids[pos] == gids, order[pos], -1)

    def _maps(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        arrays = {"dense": self._dense} if self._dense is not None else {"sorted": self._sorted, "order": self._order}
        return tuple(self._device.tensor(name, a, device) for name, a in arrays.items())

    def dense(self) -> tuple[bool, np.ndarray | None]:
        """``(identity, dense map)``: slot = id, or the dense int32 array (-1 = not held), or
        ``(False, None)`` for the sorted-id map (what compiled code can index without a search)."""
        return self._identity, self._dense

    @property
    def nbytes(self) -> int:
        if self._identity:
            return 0
        if self._dense is not None:
            return int(self._dense.nbytes)
        return int(self._order.nbytes + self._sorted.nbytes)


def secondary_ids_of(placement: Placement, worker: int) -> np.ndarray:
    """Sorted int64 global ids with a secondary on ``worker``."""
    if placement.num_secondaries == 0:
        return np.zeros(0, dtype=np.int64)
    emb = np.repeat(np.arange(placement.num_embeddings, dtype=np.int64), np.diff(placement.secondary_indptr))
    return np.sort(emb[np.asarray(placement.secondary_workers) == worker])
