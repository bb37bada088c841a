"""The per-worker embedding store: primaries and secondaries in one local table.

Worker ``w`` holds every row whose primary is ``w`` and every row with a secondary on ``w``
(from the placement), in one tensor on its device:

* slots ``[0, num_primary)`` are the primaries, sorted by global id;
* slots ``[num_primary, num_rows)`` are the secondaries, sorted by global id.

A :class:`SlotMap` translates global ids to slots (:mod:`gmp.train.slots`). Each row has a
clock (:mod:`gmp.train.consistency`); the embedding optimizer's state (Adagrad's sum of
squares) exists only for primaries, which are the only rows updated. Initial values depend
only on ``(seed, global id)`` (:func:`initial_rows`): every placement and every number of
workers starts from the same model.

Optimizers (row-wise; a row absent from a step is untouched, which makes them equal to
torch's dense ``SGD``/``Adagrad`` on a full table):

* ``sgd``:     ``x -= lr * g``
* ``adagrad``: ``h += g*g;  x -= lr * g / (sqrt(h) + eps)``  (torch.optim.Adagrad, eps 1e-10)

With ``s > 0`` a worker also applies its own gradient to the secondaries it holds
(:meth:`EmbeddingStore.apply_local`; Adagrad with a per-replica sum of squares of the worker's
own gradients), so it sees its own updates between refreshes; the clock is not advanced, and a
refresh overwrites the replica with the primary, which has received the same gradients.

**Cache and pending updates (``--schedule herald`` at s = 0).** With
:meth:`EmbeddingStore.enable_cache` the store also keeps copies of rows that are neither
primary nor secondary on the worker, in slots ``[num_rows, num_rows + allocated)`` (the table
grows by doubling; the runtime scheduler bounds how many are live: ``--cache-rows`` between
iterations, plus the batch's rows during one). Every non-primary slot (secondary or cached)
then holds a *copy* of the primary row: its value and, with Adagrad, a copy of the primary's
sum of squares (``copy_state``), so the worker can apply the optimizer step to its copy exactly
as the primary would (:meth:`apply_copy`), and a ``dirty`` flag for updates not yet pushed. A
push of pending updates sends the copy's value (and state), which overwrites the primary
(:meth:`overwrite_primary`): at s = 0 the runtime scheduler guarantees nobody else read or
wrote the row in between, so this is the single-worker update sequence, bit for bit. In this
mode ``copy_state`` replaces the per-replica ``local_state`` of ``s > 0`` (the two modes never
mix: cache and pending updates need s = 0).
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import torch

from ..constants import ADAGRAD_EPS
from ..errors import TrainingError
from ..params import check_choice
from ..placement import Placement
from .consistency import tick_clocks
from .slots import DENSE_MAP_MAX_IDS, INIT_SCALE, SlotMap, initial_rows, secondary_ids_of  # noqa: F401 (public here)
from .copies import CachedCopies
from .tiers import RowCache, TieredTable, TierOptions

OPTIMIZERS = ("sgd", "adagrad")
class EmbeddingStore:
    """One worker's rows, clocks and optimizer state (see the module docstring)."""

    def __init__(self, worker: int, placement: Placement, *, row_dim: int, optimizer: str = "sgd",
                 lr: float = 0.01, seed: int = 0, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", tiers: TierOptions | None = None):
        check_choice("optimizer", optimizer, OPTIMIZERS, error=TrainingError)
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
        self.tier: TieredTable | None = None
        self.table_base = 0  # table row of slot s is s - table_base (primaries are in the tier when > 0)
        if tiers is not None and tiers.tiered:
            self.tier = self._make_tier(tiers, prim_ids, seed, np_dtype)
            self.table_base = self.num_primary
        self.table = torch.as_tensor(initial_rows(self.ids[self.table_base:], self.row_dim, seed, np_dtype),
                                     dtype=dtype).to(self.device)
        self.clock = np.zeros(self.num_rows, dtype=np.int64)
        self.opt_state = (torch.zeros(self.num_primary, self.row_dim, dtype=dtype, device=self.device)
                          if optimizer == "adagrad" and self.tier is None else None)
        # secondaries: Adagrad sum of squares of this worker's own gradients (the "extra space for
        # stale gradients" of HET-GMP section 6), used to apply them locally when s > 0
        self.local_state = (torch.zeros(self.num_rows - self.num_primary, self.row_dim, dtype=dtype,
                                        device=self.device) if optimizer == "adagrad" else None)
        self._pending = np.zeros(self.num_rows, dtype=bool)  # copies with pending updates (herald, s = 0)
        self.copies: CachedCopies | None = None  # Herald's copies of remote rows (enable_cache)
        self.device_cache: RowCache | None = self.tier.cache if self.tier is not None else None
        self._ship_state = True
        expected = int(placement.rows_held()[worker])
        if self.num_rows != expected:  # memory plan of the manifest: rows held per worker
            raise TrainingError(f"worker {worker} holds {self.num_rows} rows, the placement plans {expected}; "
                                f"the manifest's secondaries are inconsistent — re-run 'gmp partition'.")

    def _make_tier(self, tiers: TierOptions, prim_ids: np.ndarray, seed: int, np_dtype) -> TieredTable:
        """The primaries' master tier: ``[value | Adagrad state]`` rows, initial values as in the table."""
        d = self.row_dim
        state = self.optimizer == "adagrad"

        def init(a: int, b: int) -> np.ndarray:
            block = np.zeros((b - a, d * (2 if state else 1)), dtype=np_dtype)
            block[:, :d] = initial_rows(prim_ids[a:b], d, seed, np_dtype)
            return block

        return TieredTable(tiers, worker=self.worker, num_rows=self.num_primary, row_dim=d, state=state,
                           dtype=np_dtype, device=self.device, init=init)

    def close(self) -> None:
        """Release the tier (closes and deletes a disk tier's file)."""
        if self.tier is not None:
            self.tier.close()

    def _tidx(self, slots: np.ndarray) -> torch.Tensor:
        """Rows of ``self.table`` holding ``slots`` (copies; any slot when the table is on the device)."""
        if len(slots) == 0:  # made without host data: nothing to copy to the device
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return torch.as_tensor(np.asarray(slots, dtype=np.int64) - self.table_base, dtype=torch.int64, device=self.device)

    def _primary_views(self, slots: np.ndarray, idx: torch.Tensor | None = None):
        """``(values, state, idx, commit)`` of primary ``slots``: write rows ``idx``, then ``commit()``."""
        if self.tier is None:
            return self.table, self.opt_state, self._tidx(slots) if idx is None else idx, lambda: None
        return self.tier.views(slots, idx)

    @property
    def fixed_layout(self) -> bool:
        """No tier, no cache: slot s is row s of ``table`` for the store's life (an index made ahead of a step)."""
        return self.tier is None and self.copies is None

    # -- lookups ----------------------------------------------------------
    def lookup(self, gids: np.ndarray) -> np.ndarray:
        """Local slots of ``gids`` (int64, -1 where not held; cached rows included)."""
        out = self.slots.lookup(gids)
        if self.copies is not None and out.size:
            miss = out < 0
            if miss.any():
                out[miss] = self.copies.lookup(np.asarray(gids, dtype=np.int64)[miss])
        return out

    def is_primary_slot(self, slots: np.ndarray) -> np.ndarray:
        return (slots >= 0) & (slots < self.num_primary)

    def is_secondary_slot(self, slots: np.ndarray) -> np.ndarray:
        return (slots >= self.num_primary) & (slots < self.num_rows)

    def global_ids(self, slots: np.ndarray) -> np.ndarray:
        """Global ids of local ``slots`` (placement rows and cache slots)."""
        slots = np.asarray(slots, dtype=np.int64)
        if self.cache_ids.size == 0:
            return self.ids[slots]
        if self.num_rows == 0:  # a worker that holds no placement rows, only cached ones
            return self.cache_ids[slots]
        return np.where(slots < self.num_rows, self.ids[np.minimum(slots, self.num_rows - 1)],
                        self.cache_ids[np.maximum(slots - self.num_rows, 0)])

    def primary_rows(self) -> tuple[np.ndarray, torch.Tensor]:
        """(global ids, values) of this worker's primaries (the global model's rows it owns)."""
        if self.tier is not None:
            return self.ids[:self.num_primary], torch.from_numpy(self.tier.read_all()[:, :self.row_dim])
        return self.ids[:self.num_primary], self.table[:self.num_primary]

    # -- pending updates (herald, s = 0) --------------------------------------
    def pending_slots(self) -> np.ndarray:
        """Slots of copies holding updates not yet pushed to their primaries, ascending."""
        return np.flatnonzero(self._pending)

    def pending_ids(self) -> np.ndarray:
        """Global ids of the rows with pending updates here (in slot order)."""
        return self.global_ids(self.pending_slots())

    def any_pending(self, slots: np.ndarray) -> bool:
        return bool(np.any(self._pending[np.asarray(slots, dtype=np.int64)]))

    def all_pending(self, slots: np.ndarray) -> bool:
        return bool(np.all(self._pending[np.asarray(slots, dtype=np.int64)]))

    def mark_pending(self, slots: np.ndarray, pending: bool = True) -> None:
        """Record that the copies in ``slots`` hold (or, ``pending=False``, no longer hold) unpushed updates."""
        slots = np.asarray(slots, dtype=np.int64)
        if pending and np.any(slots < self.num_primary):
            raise TrainingError(f"worker {self.worker}: only copies hold pending updates. This is a bug in gmp.")
        self._pending[slots] = bool(pending)

    # -- cache (herald, s = 0) ----------------------------------------------
    def enable_cache(self, *, ship_state: bool = True) -> None:
        """Allow rows beyond the placement's (see the module docstring); idempotent.

        ``ship_state=False``: pulls and pushes carry values only (Adagrad's sums
        stay with the primaries). Valid when no copy is ever updated and still
        read afterwards (no on-demand synchronisation, read-only replicas).
        """
        self._ship_state = bool(ship_state)
        if self.copies is not None:
            return
        # the one device cache holds the copies' [value | state] rows (the tier's cache when tiered)
        self.device_cache = self.tier.cache if self.tier is not None else RowCache.for_remote_rows(
            self.row_dim * (2 if self.optimizer == "adagrad" else 1),
            dtype=np.float32 if self.dtype == torch.float32 else np.float64, device=self.device)
        self.copies = CachedCopies(self.num_rows, self.slots.num_embeddings, self.device_cache)
        if self.optimizer == "adagrad" and self.local_state is not None:
            self.local_state.zero_()  # copy_state: copies of the primaries' sums (secondaries start at 0)

    @property
    def cache_ids(self) -> np.ndarray:
        """Global id of each cache slot (``num_rows + j``), -1 when free."""
        return self.copies.ids if self.copies is not None else np.zeros(0, dtype=np.int64)

    @property
    def copy_state(self) -> torch.Tensor | None:
        """Adagrad sums of squares of the secondaries' copies, in cache mode (cached copies keep theirs
        in the device cache)."""
        return self.local_state

    def _grow_slots(self) -> None:
        """Clocks and pending flags for every cache slot."""
        add = self.num_rows + self.cache_ids.size - self.clock.size
        if add > 0:
            self.clock = np.concatenate([self.clock, np.zeros(add, dtype=np.int64)])
            self._pending = np.concatenate([self._pending, np.zeros(add, dtype=bool)])

    def cache_insert(self, gids: np.ndarray) -> np.ndarray:
        """Slots for ``gids`` (distinct, not primary/secondary here), allocating cache slots for new ones."""
        gids = np.asarray(gids, dtype=np.int64)
        new = self.copies.lookup(gids) < 0 if gids.size else np.zeros(0, dtype=bool)
        slots = self.copies.insert(gids)
        self._grow_slots()
        self._pending[slots[new]] = False
        return slots

    def cache_drop(self, gids: np.ndarray) -> int:
        """Forget the cached copies of ``gids`` (absent ones ignored); returns how many were held."""
        gids = np.asarray(gids, dtype=np.int64)
        if gids.size == 0:
            return 0
        slots = self.copies.lookup(gids)
        if np.any(self._pending[slots[slots >= 0]]):
            raise TrainingError(f"worker {self.worker}: a cached row with pending updates was dropped without "
                                f"a push. This is a bug in gmp.")
        return int(self.copies.drop(gids).size)

    def cached_ids(self) -> np.ndarray:
        """Sorted global ids of the rows in the cache."""
        return np.zeros(0, dtype=np.int64) if self.copies is None else self.copies.sorted_ids()

    def read_payload(self, slots: np.ndarray) -> torch.Tensor:
        """Row values, with Adagrad followed by the row's sum of squares: [k, row_dim * (1 or 2)].

        ``slots`` all primary (what a pull returns) or all copies (what a push of
        pending updates sends)."""
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size == 0:
            return torch.zeros(0, self.payload_dim, dtype=self.dtype, device=self.device)
        if self.tier is not None and np.all(slots < self.num_primary):
            rows = self.tier.read(slots)  # [value | state]: the payload's layout
            return rows if self.ship_state else rows[:, :self.row_dim]
        if np.all(slots < self.num_primary):
            vals = self.table.index_select(0, self._tidx(slots))
            if not self.ship_state:
                return vals
            return torch.cat([vals, self.opt_state.index_select(0, self._tidx(slots))], dim=1)
        if np.any(slots < self.num_primary):
            raise TrainingError("read_payload: mixed primary and copy slots.")
        out = torch.empty(slots.size, self.payload_dim, dtype=self.dtype, device=self.device)
        sec, rem, cslots = self._copy_parts(slots)
        if sec.size:
            vals = self.table.index_select(0, self._tidx(slots[sec]))
            if self.ship_state:
                st = self.local_state.index_select(0, self._dev(slots[sec] - self.num_primary))
                vals = torch.cat([vals, st], dim=1)
            out[self._dev(sec)] = vals
        if rem.size:
            out[self._dev(rem)] = self.device_cache.tensor.index_select(0, self._dev(cslots))[:, :self.payload_dim]
        return out

    def _dev(self, a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a, dtype=np.int64), device=self.device)

    def _copy_parts(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions of the secondaries and of the cached copies among copy ``slots``, and the
        device-cache slots of the latter."""
        rem = slots >= self.num_rows
        pr = np.flatnonzero(rem)
        return np.flatnonzero(~rem), pr, self.copies.slots_of_held(slots[pr]) if pr.size else pr

    @property
    def ship_state(self) -> bool:
        """Whether pulls and pending pushes carry the Adagrad sum of squares (see :meth:`enable_cache`)."""
        return self.optimizer != "sgd" and self._ship_state

    @property
    def payload_dim(self) -> int:
        return self.row_dim * (2 if self.ship_state else 1)

    def install_copies(self, slots: np.ndarray, payload: torch.Tensor) -> None:
        """Overwrite copies (secondary/cache slots) with pulled primary values (and state)."""
        if slots.size == 0:
            return
        if np.any(slots < self.num_primary):
            raise TrainingError("install_copies: a primary cannot be overwritten by a pull.")
        payload = payload.to(self.device, self.dtype)
        sec, rem, cslots = self._copy_parts(slots)
        if sec.size:
            self.table[self._tidx(slots[sec])] = payload[self._dev(sec), :self.row_dim]
            if self.ship_state:
                self.local_state[self._dev(slots[sec] - self.num_primary)] = payload[self._dev(sec), self.row_dim:]
        if rem.size:
            self.device_cache.tensor[self._dev(cslots), :payload.shape[1]] = payload[self._dev(rem)]
        self._pending[slots] = False

    def overwrite_primary(self, slots: np.ndarray, payload: torch.Tensor) -> None:
        """Take a pushed copy (pending updates applied) as the primary's value (and state); clocks += 1."""
        if slots.size == 0:
            return
        if np.any((slots < 0) | (slots >= self.num_primary)):
            raise TrainingError(f"worker {self.worker} received a pushed row it is not primary of.")
        payload = payload.to(self.device, self.dtype)
        values, state, idx, commit = self._primary_views(slots)
        values[idx] = payload[:, :self.row_dim]
        if self.ship_state:
            state[idx] = payload[:, self.row_dim:]
        commit()
        self.clock[slots] += 1

    def _step(self, values: torch.Tensor, idx: torch.Tensor, state: torch.Tensor | None, sidx: torch.Tensor,
              grads: torch.Tensor) -> None:
        """SGD or row-wise Adagrad on rows ``idx`` of ``values``; Adagrad's sum of squares of
        those rows is ``state[sidx]`` (the primary's state, or a copy's)."""
        grads = grads.to(self.device, self.dtype)
        if self.optimizer == "sgd":
            # SGD's add_(g, alpha=-lr) on rows idx (distinct): 8x faster on CPU than index_add_ with alpha
            values.index_copy_(0, idx, values.index_select(0, idx).add_(grads, alpha=-self.lr))
        else:
            h = state.index_select(0, sidx) + grads * grads
            state[sidx] = h
            values[idx] = values.index_select(0, idx) - self.lr * grads / (h.sqrt() + ADAGRAD_EPS)

    def _step_copies(self, slots: np.ndarray, grads: torch.Tensor, idx: tuple | None = None) -> None:
        """The optimizer step on copies: secondaries in the table, cached copies in the device cache
        (row-wise, so the two parts are independent). ``idx``: (table rows, state rows) of secondaries."""
        slots = np.asarray(slots, dtype=np.int64)
        sec, rem, cslots = self._copy_parts(slots)
        if rem.size == 0:
            idx = idx or (self._tidx(slots), self._dev(slots - self.num_primary))
            return self._step(self.table, idx[0], self.local_state, idx[1], grads)
        if sec.size:
            self._step(self.table, self._tidx(slots[sec]), self.local_state,
                       self._dev(slots[sec] - self.num_primary), grads[self._dev(sec).to(grads.device)])
        t, d, cs = self.device_cache.tensor, self.row_dim, self._dev(cslots)
        self._step(t[:, :d], cs, t[:, d:] if t.shape[1] > d else None, cs, grads[self._dev(rem).to(grads.device)])

    def apply_copy(self, slots: np.ndarray, grads: torch.Tensor) -> None:
        """The optimizer step the primary would take, applied to copies (same formula, copied state)."""
        if slots.size == 0:
            return
        if np.any(slots < self.num_primary):
            raise TrainingError("apply_copy: only copies (secondary/cache slots).")
        self._step_copies(slots, grads)

    def read(self, slots: np.ndarray) -> torch.Tensor:
        """Values of local ``slots`` (any mix of primaries and copies)."""
        slots = np.asarray(slots, dtype=np.int64)
        if self.tier is None and (self.cache_ids.size == 0 or np.all(slots < self.num_rows)):
            return self.table.index_select(0, self._tidx(slots))
        prim = slots < self.num_primary
        if prim.all():
            return self.tier.read(slots)[:, :self.row_dim]
        out = torch.empty(slots.size, self.row_dim, dtype=self.dtype, device=self.device)
        pp = np.flatnonzero(prim)
        if pp.size:
            out[self._dev(pp)] = (self.tier.read(slots[pp])[:, :self.row_dim] if self.tier is not None else
                                  self.table.index_select(0, self._tidx(slots[pp])))
        sec, rem, cslots = self._copy_parts(slots)
        sec = sec[~prim[sec]]
        if sec.size:
            out[self._dev(sec)] = self.table.index_select(0, self._tidx(slots[sec]))
        if rem.size:
            out[self._dev(rem)] = self.device_cache.tensor.index_select(0, self._dev(cslots))[:, :self.row_dim]
        return out

    # -- writes -----------------------------------------------------------
    def refresh(self, slots: np.ndarray, rows: torch.Tensor, clocks: np.ndarray, idx=None) -> None:
        """Overwrite secondary replicas with their primaries' values and clocks (``idx``: their rows, fixed_layout)."""
        if slots.size == 0:
            return
        if np.any(slots < self.num_primary):
            raise TrainingError("refresh: only secondaries can be overwritten from a primary.")
        self.table[self._tidx(slots) if idx is None else idx] = rows.to(self.device, self.dtype)
        self.clock[slots] = clocks

    def apply_gradients(self, slots: np.ndarray, grads: torch.Tensor, idx: torch.Tensor | None = None) -> None:
        """One optimizer step on primary rows ``slots`` (distinct; ``idx``: their table or cache rows, made ahead
        with ``slots``, primary by construction: unchecked) with summed gradients; clocks += 1."""
        if slots.size == 0:
            return
        if idx is None and np.any((slots < 0) | (slots >= self.num_primary)):
            raise TrainingError(f"worker {self.worker} received a gradient for a row it is not primary of.")
        values, state, idx, commit = self._primary_views(slots, idx)
        self._step(values, idx, state, idx, grads)
        commit()
        tick_clocks(self.clock, slots)

    def apply_local(self, slots: np.ndarray, grads: torch.Tensor, idx: tuple | None = None) -> None:
        """Apply this worker's own gradients to its secondary replicas (clocks unchanged).

        The same gradients are pushed to the primaries; this only lets the
        worker see its own updates before the next refresh. Adagrad uses the
        sum of squares of the worker's own gradients on the row.
        """
        if slots.size == 0:
            return
        if np.any(slots < self.num_primary):
            raise TrainingError("apply_local: only secondaries take local updates.")
        self._step_copies(slots, grads, idx)

    # -- bookkeeping ------------------------------------------------------
    def memory_bytes(self) -> dict[str, int]:
        item = self.table.element_size()
        held = self.num_rows - self.table_base  # rows in the device table (primaries too unless tiered)
        state = self.optimizer == "adagrad"
        out = {
            "rows": self.num_rows,
            "primaries": self.num_primary,
            "secondaries": self.num_rows - self.num_primary,
            "table_bytes": held * self.row_dim * item,
            "optimizer_bytes": held * self.row_dim * item if state else 0,
            "cache_rows": int(np.count_nonzero(self.cache_ids >= 0)),
            "cache_slots_allocated": int(self.cache_ids.size),
            # the one device cache (own tiered rows and copies of remote rows)
            "cache_bytes": 0 if self.device_cache is None else self.device_cache.nbytes,
            "clock_bytes": int(self.clock.nbytes),
            "map_bytes": self.slots.nbytes,
        }
        out["total_bytes"] = (out["table_bytes"] + out["optimizer_bytes"] + out["clock_bytes"] + out["map_bytes"]
                              + out["cache_bytes"])
        if self.tier is not None:  # the device holds the tier's cache instead of the primaries
            out["tier"] = self.tier.memory()
        return out

    def _cached_rows(self) -> torch.Tensor:
        """``[value | state]`` of every cache slot (zeros where free), on the CPU."""
        n = self.cache_ids.size
        out = torch.zeros(n, self.row_dim * (2 if self.optimizer == "adagrad" else 1), dtype=self.dtype)
        if n == 0:
            return out
        live = np.flatnonzero(self.cache_ids >= 0)
        out[torch.as_tensor(live)] = self.device_cache.tensor.index_select(
            0, self._dev(self.copies.held[live])).cpu().to(self.dtype)
        return out

    @property
    def primary_width(self) -> int:
        """Floats of one primary in a checkpoint's rows file: its value, then Adagrad's sum of squares."""
        return self.row_dim * (2 if self.optimizer == "adagrad" else 1)

    def primary_blocks(self, block_rows: int = 1 << 16) -> Iterator[np.ndarray]:
        """The primaries' ``[value | optimizer state]`` rows in slot order, ``block_rows`` at a time
        (a tier's cache is flushed first and the master streamed: a table larger than RAM never
        is in memory at once)."""
        if self.tier is not None:
            yield from self.tier.blocks(block_rows)
            return
        for a in range(0, self.num_primary, block_rows):
            b = min(self.num_primary, a + block_rows)
            block = self.table[a:b].detach().cpu()
            if self.opt_state is not None:
                block = torch.cat([block, self.opt_state[a:b].detach().cpu()], dim=1)
            yield block.numpy()

    def state_dict(self) -> dict:
        """The store as the checkpoint holds it beside :meth:`primary_blocks`: the table of the other
        rows (secondaries, then cached copies), clocks, the copies' optimizer state and pending flags."""
        table = self.table[self.num_primary - self.table_base:].detach().cpu().clone()
        local_state = None if self.local_state is None else self.local_state.detach().cpu().clone()
        cached = self._cached_rows()
        table = torch.cat([table, cached[:, :self.row_dim]])
        if local_state is not None:
            local_state = torch.cat([local_state, cached[:, self.row_dim:]])
        return {"ids": self.ids.copy(), "num_primary": self.num_primary, "table": table, "clock": self.clock.copy(), "local_state": local_state,
                "dirty": self._pending.copy(), "cache_ids": self.cache_ids.copy(), "tier": self.tier and self.tier.state_dict()}

    def load_state_dict(self, state: dict, primary_rows: Callable[[int, int], np.ndarray]) -> None:
        """Restore from :meth:`state_dict`'s dict and ``primary_rows(start, stop)`` (the primaries'
        ``[value | state]`` rows ``[start, stop)``, read block by block into a tier)."""
        if not np.array_equal(state["ids"], self.ids):
            raise TrainingError(f"checkpoint of worker {self.worker} holds other rows than the manifest; "
                                f"resume with the manifest it was made with.")
        cache_ids = np.asarray(state.get("cache_ids", np.zeros(0, dtype=np.int64)))
        if cache_ids.size:
            self.enable_cache()
            self.copies.restore(cache_ids)
            self._grow_slots()
        if "dirty" in state:
            self._pending[:] = state["dirty"]
        self.clock[:] = state["clock"]
        table = state["table"].to(self.device, self.dtype)  # secondaries, then cached copies
        nsec = self.num_rows - self.num_primary
        self.table[self.num_primary - self.table_base:].copy_(table[:nsec])
        if self.tier is not None:
            self.tier.write_blocks(primary_rows, state.get("tier"))  # + the running epoch's counters
        else:
            rows = torch.as_tensor(primary_rows(0, self.num_primary)).to(self.device, self.dtype)
            self.table[:self.num_primary].copy_(rows[:, :self.row_dim])
            if self.opt_state is not None:
                self.opt_state.copy_(rows[:, self.row_dim:])
        if self.optimizer == "adagrad":
            self.local_state.copy_(state["local_state"][:nsec].to(self.device, self.dtype))
        live = np.flatnonzero(cache_ids >= 0)
        if live.size:
            rows = table[torch.as_tensor(live + nsec, device=self.device)]
            if self.optimizer == "adagrad":
                st = state["local_state"].to(self.device, self.dtype)
                rows = torch.cat([rows, st[torch.as_tensor(live + nsec, device=self.device)]], dim=1)
            self.device_cache.tensor[self._dev(self.copies.held[live])] = rows.to(self.device_cache.tensor.dtype)
