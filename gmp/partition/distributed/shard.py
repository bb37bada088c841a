"""A process's shard of the samples, read from the memory-mapped CSR, with its rows as ghost ids.

Two ways to hold it:

* **in memory** (the default under torchrun): the shard's edges re-numbered once to ghost ids
  (int32 per edge of the shard, 1/P of the graph);
* **streamed** (``chunk_samples``, the out-of-core path): nothing of the CSR is kept; every pass
  reads ``chunk_samples`` samples at a time from the memory-mapped arrays and re-numbers them
  through a dense id map (int32 per embedding id). Only one chunk is resident beside the counters.

With :meth:`Shard.carry_private` every sample's *private* rows (global degree 1) are put last in its
entries (``_hybrid_kernels.private_last``: the shared rows keep their order, so the start's pairs of
band rows are the same), once in memory or in every streamed block the sample sweep reads.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .. import _hybrid_kernels as HK
from .._common import compact_ids


class Shard:
    """Samples ``[start, stop)`` of a graph's sample CSR (int64 indptr, int32/int64 indices, may be memmaps)."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, num_embeddings: int, start: int, stop: int, *,
                 chunk_samples: int | None = None):
        self.start, self.stop = int(start), int(stop)
        self.num_samples = self.stop - self.start
        self.num_embeddings = int(num_embeddings)
        self._indptr_all = indptr
        self._indices_all = indices
        self.chunk_samples = chunk_samples
        self.private: np.ndarray | None = None  # uint8 [ghosts]: rows of global degree 1 (carry_private)
        self.num_private: np.ndarray | None = None  # int32 [samples] in memory: private rows of each sample
        e0, e1 = int(indptr[self.start]), int(indptr[self.stop])
        self.num_edges = e1 - e0
        # the rows the shard touches (ascending global ids) and the dense map global -> ghost id
        gids, local = compact_ids(indices[e0:e1], self.num_embeddings)
        self.gids = gids.astype(np.int64)
        if chunk_samples is None:  # in memory: re-number once, drop the map
            self.indptr = np.asarray(indptr[self.start:self.stop + 1], dtype=np.int64) - e0
            self.indices = np.empty(self.num_edges, dtype=np.int32)
            HK.remap(np.asarray(indices[e0:e1]), local, self.indices)
            self.local = None
        else:
            self.indptr = self.indices = None
            self.local = local

    def carry_private(self, private: np.ndarray) -> None:
        """Put every sample's private rows (``private``, bool [ghosts]: global degree 1) last in its
        entries, as the single process does, so the sample sweep can move them with it."""
        self.private = np.ascontiguousarray(private, dtype=np.bool_).view(np.uint8)
        if self.local is None:
            self.num_private = np.empty(self.num_samples, dtype=np.int32)
            HK.private_last(self.indptr, self.indices, self.private, self.num_private)

    def sweep_blocks(self, size: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """:meth:`blocks` with each sample's private rows last and their number (int32 per sample, all 0
        without :meth:`carry_private`): ``(first, indptr, indices, num_private)``."""
        for first, indptr, indices in self.blocks(size):
            if self.private is None:
                num_private = np.zeros(indptr.size - 1, dtype=np.int32)
            elif self.num_private is not None:
                num_private = self.num_private[first:first + indptr.size - 1]
            else:  # streamed: a fresh copy of the block, reordered in place
                num_private = np.empty(indptr.size - 1, dtype=np.int32)
                HK.private_last(indptr, indices, self.private, num_private)
            yield first, indptr, indices, num_private

    def blocks(self, size: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(first, indptr, indices)`` of consecutive blocks of at most ``size`` shard samples
        (``first`` shard-local; indptr rebased to 0; indices ghost ids)."""
        size = max(int(size), 1)
        for i0 in range(0, self.num_samples, size):
            yield (i0, *self.block(i0, min(i0 + size, self.num_samples)))

    def block(self, i0: int, i1: int) -> tuple[np.ndarray, np.ndarray]:
        """Shard samples ``[i0, i1)`` as (indptr rebased to 0, ghost-id indices)."""
        if self.local is None:
            ptr = self.indptr[i0:i1 + 1]
            return ptr - ptr[0], self.indices[ptr[0]:ptr[-1]]
        ptr = np.asarray(self._indptr_all[self.start + i0:self.start + i1 + 1], dtype=np.int64)
        raw = np.asarray(self._indices_all[ptr[0]:ptr[-1]])
        out = np.empty(raw.size, dtype=np.int32)
        HK.remap(raw, self.local, out)
        return ptr - ptr[0], out

    def chunks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """The whole shard in one block (in memory) or in ``chunk_samples`` blocks (streamed)."""
        return self.blocks(self.chunk_samples or max(self.num_samples, 1))

    def degrees(self) -> np.ndarray:
        """int64 [ghosts]: the shard's edges per ghost row."""
        out = np.zeros(self.gids.size, dtype=np.int64)
        for _, _, idx in self.chunks():
            out += np.bincount(idx, minlength=self.gids.size)
        return out
