"""Herald's copies of remote rows on one worker (``--schedule herald``, s = 0): which global ids the
worker holds beyond its placement rows, under which store slot, and where in the worker's one
device cache (:class:`gmp.train.tiers.RowCache`) each copy's ``[value | copied optimizer state]``
row lives.

Store slots ``num_rows + j`` (``j`` = 0, 1, ...) name the copies; ``j`` is always the lowest
free one, so the slot layout depends only on the sequence of inserts and drops (which the
runtime scheduler fixes: every rank sees the same). The device-cache slot behind ``j`` is
:meth:`RowCache.hold`'s choice and never leaves this worker. The runtime scheduler decides
which copies exist (its exactness needs that: :mod:`gmp.train.herald.cache`); the device cache
only stores them, beside the worker's own tiered primaries, and never evicts them.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..errors import TrainingError
from .slots import DENSE_MAP_MAX_IDS


class CachedCopies:
    """The copies of one worker: ``ids[j]`` (global id, -1 when free) of store slot ``base + j``,
    ``held[j]`` its device-cache slot (see the module docstring)."""

    def __init__(self, base: int, num_embeddings: int, device_cache) -> None:
        self.base = int(base)
        self.device_cache = device_cache
        self._map = np.full(num_embeddings, -1, dtype=np.int32) if num_embeddings <= DENSE_MAP_MAX_IDS else {}
        self.ids = np.zeros(0, dtype=np.int64)
        self.held = np.zeros(0, dtype=np.int64)
        self._free: list[int] = []  # a heap of free store slots

    def lookup(self, gids: np.ndarray) -> np.ndarray:
        """Store slots of ``gids`` (-1 where no copy is held)."""
        if isinstance(self._map, dict):
            return np.array([self._map.get(int(g), -1) for g in gids], dtype=np.int64)
        return self._map[gids].astype(np.int64)

    def _set(self, gids: np.ndarray, slots: np.ndarray) -> None:
        if isinstance(self._map, dict):
            for g, sl in zip(gids.tolist(), slots.tolist()):
                if sl < 0:
                    self._map.pop(g, None)
                else:
                    self._map[g] = sl
        else:
            self._map[gids] = slots

    def grow_to(self, new: int) -> int:
        """At least ``new`` store slots; returns how many were added."""
        old = self.ids.size
        add = new - old
        if add <= 0:
            return 0
        self.ids = np.concatenate([self.ids, np.full(add, -1, dtype=np.int64)])
        self.held = np.concatenate([self.held, np.full(add, -1, dtype=np.int64)])
        for sl in range(self.base + old, self.base + new):
            heapq.heappush(self._free, sl)
        return add

    def insert(self, gids: np.ndarray) -> np.ndarray:
        """Store slots for ``gids`` (distinct), new copies in the lowest free slots (grows by doubling)."""
        slots = self.lookup(gids) if gids.size else np.zeros(0, dtype=np.int64)
        new = np.flatnonzero(slots < 0)
        if new.size:
            if len(self._free) < new.size:
                old = self.ids.size
                self.grow_to(max(2 * old, old + new.size - len(self._free), 16))
            got = np.array([heapq.heappop(self._free) for _ in range(new.size)], dtype=np.int64)
            slots[new] = got
            self.ids[got - self.base] = gids[new]
            self.held[got - self.base] = self.device_cache.hold(new.size)
            self._set(gids[new], got)
        return slots

    def drop(self, gids: np.ndarray) -> np.ndarray:
        """Forget the copies of ``gids`` (absent ones ignored); returns the store slots they had."""
        slots = self.lookup(gids)
        sl = slots[slots >= 0]
        self.ids[sl - self.base] = -1
        self.device_cache.drop(self.held[sl - self.base])
        self.held[sl - self.base] = -1
        self._set(gids[slots >= 0], np.full(sl.size, -1, dtype=np.int64))
        for x in sl.tolist():
            heapq.heappush(self._free, x)
        return sl

    def restore(self, ids: np.ndarray) -> None:
        """The copies of a checkpoint (``ids`` per store slot, -1 free) into an empty set."""
        if np.any(self.ids >= 0):
            raise TrainingError("restoring cached copies into a worker that holds some; resume into a fresh "
                                "trainer.")
        ids = np.asarray(ids, dtype=np.int64)
        self.grow_to(ids.size)
        live = np.flatnonzero(ids >= 0)
        self.ids = ids.copy()
        self.held[live] = self.device_cache.hold(live.size)
        self._set(ids[live], live + self.base)
        self._free = sorted(set(range(self.base, self.base + self.ids.size)) - set((live + self.base).tolist()))

    def slots_of_held(self, slots: np.ndarray) -> np.ndarray:
        """Device-cache slots of store ``slots`` (copies)."""
        return self.held[np.asarray(slots, dtype=np.int64) - self.base]

    def sorted_ids(self) -> np.ndarray:
        return np.sort(self.ids[self.ids >= 0])
