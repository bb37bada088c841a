"""The communication-engine interface shared by the local and distributed engines.

The worker logic (:mod:`gmp.train.trainer` and its step protocols) is written once, "vectorised over
the workers this process hosts": every collective takes one entry per local
worker. The distributed engine hosts exactly one worker per process
(``local_workers == [rank]``); the local engine hosts all of them and
exchanges tensors in memory. Both count the bytes each worker *sends* to
another worker, per category:

``embedding_rows``   rows returned to readers (remote reads and secondary refreshes)
``gradients``        gradient rows pushed to primaries
``ids_clocks``       requested ids with their clocks, the owners' clocks, pushed ids
``dense_allreduce``  each worker's dense-gradient contribution (numel x itemsize)

Messages a worker sends to itself are free. The few bytes of per-peer size
headers that variable-size exchanges need are not counted. Bytes are counted
only while :attr:`CommEngine.counting` is true (evaluation turns it off).
"""

from __future__ import annotations

import abc
import contextlib
import time
from typing import Any, Iterator, Protocol, Sequence

import numpy as np
import torch

from ..wording import first_difference

CATEGORIES = ("embedding_rows", "gradients", "ids_clocks", "dense_allreduce")
_CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}


class PendingExchange(Protocol):
    """A started all-to-all (:meth:`CommEngine.start_alltoallv`); :meth:`wait` returns ``recv[i][src]``."""

    def wait(self) -> list[list[torch.Tensor]]: ...


class _Done:
    """An exchange that completed when it was started (the local engine; a single process)."""

    def __init__(self, value):
        self.value = value

    def wait(self):
        return self.value


class CommEngine(abc.ABC):
    """Collectives over the workers; see the module docstring."""

    world_size: int
    local_workers: list[int]

    def __init__(self) -> None:
        self.counting = True
        self.bytes = np.zeros((len(self.local_workers), len(CATEGORIES)), dtype=np.int64)
        #: wall seconds spent inside alltoallv / all_reduce_dense while counting (this process)
        self.seconds = 0.0

    # -- accounting -------------------------------------------------------
    def count(self, local_index: int, category: str, nbytes: int) -> None:
        if self.counting:
            self.bytes[local_index, _CAT_INDEX[category]] += int(nbytes)

    def reset_counts(self) -> None:
        """Zero the byte counters and the seconds inside collectives (a new epoch's accounting)."""
        self.bytes[:] = 0
        self.seconds = 0.0

    @contextlib.contextmanager
    def not_counted(self) -> Iterator[None]:
        old, self.counting = self.counting, False
        try:
            yield
        finally:
            self.counting = old

    def count_sends(self, sends: Sequence[Sequence[torch.Tensor]], category: str | None) -> None:
        if category is None:
            return
        for i, w in enumerate(self.local_workers):
            for dst, t in enumerate(sends[i]):
                if dst != w:
                    self.count(i, category, t.numel() * t.element_size())

    # -- collectives ------------------------------------------------------
    def alltoallv(self, sends: Sequence[Sequence[torch.Tensor]], category: str | None, *,
                  recv_counts: Sequence[Sequence[int]] | None = None) -> list[list[torch.Tensor]]:
        """Variable-size all-to-all (timed into :attr:`seconds` while counting).

        ``sends[i][dst]`` is what local worker ``i`` sends to worker ``dst``
        (tensors of one dtype, any first dimension, equal trailing shape,
        ``world_size`` entries each). Returns ``recv[i][src]``.
        ``recv_counts[i][src]``, when the caller knows them, are the first
        dimensions local worker ``i`` will receive; the distributed engine then
        skips its size exchange (the local engine checks them).
        """
        t0 = time.perf_counter()
        try:
            return self._alltoallv(sends, category, recv_counts=recv_counts)
        finally:
            if self.counting:
                self.seconds += time.perf_counter() - t0

    def start_alltoallv(self, sends: Sequence[Sequence[torch.Tensor]], category: str, *,
                        recv_counts: Sequence[Sequence[int]]) -> PendingExchange:
        """Start a variable-size all-to-all whose receive counts are known; ``wait()`` on the
        handle returns ``recv[i][src]`` as :meth:`alltoallv` does.

        Every process must start it at the same point of its sequence of
        collectives. The distributed engine issues it asynchronously (compute
        overlaps it); this default exchanges at once. Bytes are counted at the start.
        """
        return _Done(self.alltoallv(sends, category, recv_counts=recv_counts))

    @abc.abstractmethod
    def _alltoallv(self, sends: Sequence[Sequence[torch.Tensor]], category: str | None, *,
                   recv_counts: Sequence[Sequence[int]] | None = None) -> list[list[torch.Tensor]]:
        """The engine's all-to-all (see :meth:`alltoallv`)."""

    def all_reduce_dense(self, flat: torch.Tensor) -> torch.Tensor:
        """Sum of the dense gradients of all workers (timed into :attr:`seconds` while counting).

        ``flat`` is this process's contribution (in the local engine the
        shared model already holds the sum over its workers).
        """
        t0 = time.perf_counter()
        try:
            return self._all_reduce_dense(flat)
        finally:
            if self.counting:
                self.seconds += time.perf_counter() - t0

    def start_all_reduce_dense(self, flat: torch.Tensor) -> PendingExchange:
        """Start :meth:`all_reduce_dense`; ``wait()`` on the handle returns the sum. The
        distributed engine issues it asynchronously; this default reduces at once."""
        return _Done(self.all_reduce_dense(flat))

    @abc.abstractmethod
    def _all_reduce_dense(self, flat: torch.Tensor) -> torch.Tensor:
        """The engine's all-reduce (see :meth:`all_reduce_dense`)."""

    @abc.abstractmethod
    def sum_across(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum of a float64/int64 vector over processes (identity locally)."""

    @abc.abstractmethod
    def gather(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """All workers' 1-D arrays (one per local worker given), in worker order, on every process."""

    def barrier(self) -> None:
        """Synchronise processes (no-op locally)."""

    def broadcast_object(self, obj, src: int = 0):
        """Worker ``src``'s ``obj`` on every process (identity locally)."""
        return obj

    def ranks_unlike_rank0(self, fingerprint) -> list[int]:
        """Collective: the workers whose process has another ``fingerprint`` (a picklable value) than
        worker 0's, on every process ([] locally: one process)."""
        theirs = self.broadcast_object(fingerprint)
        mine = np.zeros(self.world_size)
        mine[list(self.local_workers)] = float(fingerprint != theirs)
        return np.flatnonzero(np.rint(self.sum_across(mine))).tolist()

    def settings_unlike_rank0(self, settings: dict[str, Any]) -> tuple[list[int], str]:
        """Collective: the workers whose process has other ``settings`` (a dict of picklable values) than
        worker 0's, and the first setting that differs on the lowest of them, worded as a person fixes it
        (``"seed=7 on rank 1, seed=0 on rank 0"``; ``""`` when none differ). Every process returns the same."""
        theirs = self.broadcast_object(settings)
        differ_here = first_difference(settings, theirs)
        mine = np.zeros(self.world_size)
        mine[list(self.local_workers)] = float(differ_here is not None)
        differ = np.flatnonzero(np.rint(self.sum_across(mine))).tolist()
        if not differ:
            return [], ""
        ours, rank0 = self.broadcast_object(differ_here, src=differ[0])  # the lowest differing rank words it
        return differ, f"{ours} on rank {differ[0]}, {rank0} on rank 0"

    @property
    def is_main(self) -> bool:
        """True on the process that writes logs and shared files."""
        return 0 in self.local_workers

    def device_for(self, worker: int) -> torch.device:
        return torch.device("cpu")

    def close(self, *, clean: bool = True) -> None:
        """Release process groups; ``clean=False`` after an error of this process alone (its peers are in
        some other collective: nothing that would pair with theirs)."""

    # -- helpers ----------------------------------------------------------
    def total_bytes(self) -> dict[str, int]:
        """Bytes per category summed over all workers (collective in the distributed engine)."""
        tot = self.sum_across(self.bytes.sum(axis=0).astype(np.float64))
        return {c: int(round(v)) for c, v in zip(CATEGORIES, tot)}
