"""The per-worker embedding store: primaries and secondaries in one local table.

Worker ``w`` holds every row whose primary is ``w`` and every row with a
secondary on ``w`` (from the placement), in one tensor on its device:

* slots ``[0, num_primary)`` are the primaries, sorted by global id;
* slots ``[num_primary, num_rows)`` are the secondaries, sorted by global id.

A :class:`SlotMap` translates global ids to slots (a dense int32 array over all
ids when that is at most :data:`DENSE_MAP_MAX_IDS` entries, else a sorted id
array searched with ``np.searchsorted``). Each row has a clock
(:mod:`gmp.train.consistency`); the embedding optimizer's state (Adagrad's
sum of squares) exists only for primaries, which are the only rows updated.

Initial values depend only on ``(seed, global id)`` (uniform in
``±INIT_SCALE``, drawn in chunks of 65,536 ids from
``np.random.default_rng([seed, chunk])``), so every placement and every
number of workers starts from the same model.

Optimizers (row-wise; a row absent from a step is untouched, which makes them
equal to torch's dense ``SGD``/``Adagrad`` on a full table):

* ``sgd``:     ``x -= lr * g``
* ``adagrad``: ``h += g*g;  x -= lr * g / (sqrt(h) + eps)``  (torch.optim.Adagrad, eps 1e-10)

With ``s > 0`` a worker also applies its own gradient to the secondaries it
holds (:meth:`EmbeddingStore.apply_local`; Adagrad with a per-replica sum of
squares of the worker's own gradients), so it sees its own updates between
refreshes; the clock is not advanced, and a refresh overwrites the replica
with the primary, which has received the same gradients.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import TrainingError
from ..placement import Placement

OPTIMIZERS = ("sgd", "adagrad")
INIT_SCALE = 0.05
ADAGRAD_EPS = 1e-10
_CHUNK_BITS = 16
#: largest id space mapped with a dense int32 array (64 MiB).
DENSE_MAP_MAX_IDS = 1 << 24


def initial_rows(ids: np.ndarray, row_dim: int, seed: int, dtype=np.float64) -> np.ndarray:
    """[len(ids), row_dim] of ``dtype``: the deterministic initial value of each global id
    (drawn in float64, then cast)."""
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
    for a, b in zip(starts, ends):
        c = int(chunk[a])
        block = np.random.default_rng([int(seed), 7919, c]).uniform(-INIT_SCALE, INIT_SCALE,
                                                                      size=(1 << _CHUNK_BITS, row_dim))
        sel = order[a:b]
        out[sel] = block[ids[sel] & mask]
    return out


class SlotMap:
    """Global id -> local slot (-1 when the id is not held)."""

    def __init__(self, ids: np.ndarray, num_embeddings: int):
        ids = np.asarray(ids, dtype=np.int64)
        self.num_embeddings = int(num_embeddings)
        if self.num_embeddings <= DENSE_MAP_MAX_IDS:
            self._dense = np.full(self.num_embeddings, -1, dtype=np.int32)
            self._dense[ids] = np.arange(ids.size, dtype=np.int32)
        else:
            self._dense = None
            self._order = np.argsort(ids, kind="stable")
            self._sorted = ids[self._order]

    def lookup(self, gids: np.ndarray) -> np.ndarray:
        gids = np.asarray(gids, dtype=np.int64)
        if self._dense is not None:
            return self._dense[gids].astype(np.int64)
        pos = np.searchsorted(self._sorted, gids)
        pos_c = np.minimum(pos, max(self._sorted.size - 1, 0))
        hit = (pos < self._sorted.size) & (self._sorted[pos_c] == gids) if self._sorted.size else np.zeros(gids.size, bool)
        out = np.full(gids.size, -1, dtype=np.int64)
        out[hit] = self._order[pos_c[hit]]
        return out

    @property
    def nbytes(self) -> int:
        if self._dense is not None:
            return int(self._dense.nbytes)
        return int(self._order.nbytes + self._sorted.nbytes)


def secondary_ids_of(placement: Placement, worker: int) -> np.ndarray:
    """Sorted int64 global ids with a secondary on ``worker``."""
    if placement.num_secondaries == 0:
        return np.zeros(0, dtype=np.int64)
    emb = np.repeat(np.arange(placement.num_embeddings, dtype=np.int64), np.diff(placement.secondary_indptr))
    return np.sort(emb[np.asarray(placement.secondary_workers) == worker])


class EmbeddingStore:
    """One worker's rows, clocks and optimizer state (see the module docstring)."""

    def __init__(self, worker: int, placement: Placement, *, row_dim: int, optimizer: str = "sgd",
                 lr: float = 0.01, seed: int = 0, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu"):
        if optimizer not in OPTIMIZERS:
            raise TrainingError(f"unknown --optimizer {optimizer!r}; expected one of {OPTIMIZERS}.")
        self.worker = int(worker)
        self.row_dim = int(row_dim)
        self.optimizer = optimizer
        self.lr = float(lr)
        self.device = torch.device(device)
        self.dtype = dtype
        primary = np.asarray(placement.embedding_primary)
        prim_ids = np.flatnonzero(primary == worker).astype(np.int64)
        sec_ids = secondary_ids_of(placement, worker)
        self.num_primary = int(prim_ids.size)
        self.ids = np.concatenate([prim_ids, sec_ids])
        self.num_rows = int(self.ids.size)
        self.slots = SlotMap(self.ids, placement.num_embeddings)
        np_dtype = np.float32 if dtype == torch.float32 else np.float64
        self.table = torch.as_tensor(initial_rows(self.ids, self.row_dim, seed, np_dtype), dtype=dtype).to(self.device)
        self.clock = np.zeros(self.num_rows, dtype=np.int64)
        self.opt_state = (torch.zeros(self.num_primary, self.row_dim, dtype=dtype, device=self.device)
                          if optimizer == "adagrad" else None)
        # secondaries: Adagrad sum of squares of this worker's own gradients (the "extra space for
        # stale gradients" of HET-GMP section 6), used to apply them locally when s > 0
        self.local_state = (torch.zeros(self.num_rows - self.num_primary, self.row_dim, dtype=dtype,
                                        device=self.device) if optimizer == "adagrad" else None)
        expected = int(placement.rows_held()[worker])
        if self.num_rows != expected:  # memory plan of the manifest: rows held per worker
            raise TrainingError(f"worker {worker} holds {self.num_rows} rows, the placement plans {expected}; "
                                f"the manifest's secondaries are inconsistent — re-run 'gmp partition'.")

    # -- lookups ----------------------------------------------------------
    def lookup(self, gids: np.ndarray) -> np.ndarray:
        """Local slots of ``gids`` (int64, -1 where not held)."""
        return self.slots.lookup(gids)

    def is_primary_slot(self, slots: np.ndarray) -> np.ndarray:
        return (slots >= 0) & (slots < self.num_primary)

    def is_secondary_slot(self, slots: np.ndarray) -> np.ndarray:
        return slots >= self.num_primary

    def read(self, slots: np.ndarray) -> torch.Tensor:
        return self.table.index_select(0, torch.as_tensor(slots, dtype=torch.int64, device=self.device))

    # -- writes -----------------------------------------------------------
    def refresh(self, slots: np.ndarray, rows: torch.Tensor, clocks: np.ndarray) -> None:
        """Overwrite secondary replicas with their primaries' values and clocks."""
        if slots.size == 0:
            return
        if np.any(slots < self.num_primary):
            raise TrainingError("refresh: only secondaries can be overwritten from a primary.")
        self.table[torch.as_tensor(slots, device=self.device)] = rows.to(self.device, self.dtype)
        self.clock[slots] = clocks

    def apply_gradients(self, slots: np.ndarray, grads: torch.Tensor) -> None:
        """One optimizer step on primary rows ``slots`` (distinct) with summed gradients; clocks += 1."""
        if slots.size == 0:
            return
        if np.any((slots < 0) | (slots >= self.num_primary)):
            raise TrainingError(f"worker {self.worker} received a gradient for a row it is not primary of.")
        idx = torch.as_tensor(slots, dtype=torch.int64, device=self.device)
        grads = grads.to(self.device, self.dtype)
        if self.optimizer == "sgd":
            self.table.index_add_(0, idx, grads, alpha=-self.lr)
        else:
            h = self.opt_state.index_select(0, idx) + grads * grads
            self.opt_state[idx] = h
            self.table[idx] = self.table.index_select(0, idx) - self.lr * grads / (h.sqrt() + ADAGRAD_EPS)
        self.clock[slots] += 1

    def apply_local(self, slots: np.ndarray, grads: torch.Tensor) -> None:
        """Apply this worker's own gradients to its secondary replicas (clocks unchanged).

        The same gradients are pushed to the primaries; this only lets the
        worker see its own updates before the next refresh. Adagrad uses the
        sum of squares of the worker's own gradients on the row.
        """
        if slots.size == 0:
            return
        if np.any(slots < self.num_primary):
            raise TrainingError("apply_local: only secondaries take local updates.")
        idx = torch.as_tensor(slots, dtype=torch.int64, device=self.device)
        grads = grads.to(self.device, self.dtype)
        if self.optimizer == "sgd":
            self.table.index_add_(0, idx, grads, alpha=-self.lr)
        else:
            lidx = idx - self.num_primary
            h = self.local_state.index_select(0, lidx) + grads * grads
            self.local_state[lidx] = h
            self.table[idx] = self.table.index_select(0, idx) - self.lr * grads / (h.sqrt() + ADAGRAD_EPS)

    # -- bookkeeping ------------------------------------------------------
    def memory_bytes(self) -> dict[str, int]:
        item = self.table.element_size()
        out = {
            "rows": self.num_rows,
            "primaries": self.num_primary,
            "secondaries": self.num_rows - self.num_primary,
            "table_bytes": self.num_rows * self.row_dim * item,
            "optimizer_bytes": 0 if self.opt_state is None else self.num_rows * self.row_dim * item,
            "clock_bytes": int(self.clock.nbytes),
            "map_bytes": self.slots.nbytes,
        }
        out["total_bytes"] = out["table_bytes"] + out["optimizer_bytes"] + out["clock_bytes"] + out["map_bytes"]
        return out

    def state_dict(self) -> dict:
        return {"ids": self.ids.copy(), "table": self.table.detach().cpu().clone(), "clock": self.clock.copy(),
                "opt_state": None if self.opt_state is None else self.opt_state.detach().cpu().clone(),
                "local_state": None if self.local_state is None else self.local_state.detach().cpu().clone()}

    def load_state_dict(self, state: dict) -> None:
        if not np.array_equal(state["ids"], self.ids):
            raise TrainingError(f"checkpoint of worker {self.worker} holds other rows than the manifest; "
                                f"resume with the manifest it was made with.")
        self.table.copy_(state["table"].to(self.device, self.dtype))
        self.clock[:] = state["clock"]
        if self.opt_state is not None:
            if state["opt_state"] is None:
                raise TrainingError("checkpoint has no optimizer state; resume with the same --optimizer.")
            self.opt_state.copy_(state["opt_state"].to(self.device, self.dtype))
            self.local_state.copy_(state["local_state"].to(self.device, self.dtype))
