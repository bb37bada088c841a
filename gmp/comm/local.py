"""The local engine: ``N`` workers simulated in one process.

Exchanges hand tensors from one worker's outbox to another's inbox; nothing
is copied. The worker logic is the same as under ``torchrun``
(:mod:`gmp.train.trainer`), and the bytes are counted as if they had been sent,
so a local run reports the traffic a distributed run would have.
All workers share one device (``cuda:0`` when a GPU is present, else CPU)
and one dense model whose ``.grad`` accumulates the workers' gradients — the
sum an all-reduce would produce.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..errors import TrainingError
from .base import CommEngine


class LocalEngine(CommEngine):
    def __init__(self, num_workers: int, *, device: str | torch.device | None = None):
        if num_workers < 1:
            raise TrainingError(f"the local engine needs >= 1 worker, got {num_workers}.")
        self.world_size = int(num_workers)
        self.local_workers = list(range(self.world_size))
        if device is None:
            device = "cuda:0" if torch.cuda.is_available() else "cpu"
        self._device = torch.device(device)
        super().__init__()

    def device_for(self, worker: int) -> torch.device:
        return self._device

    def _alltoallv(self, sends: Sequence[Sequence[torch.Tensor]], category: str | None, *,
                  recv_counts: Sequence[Sequence[int]] | None = None) -> list[list[torch.Tensor]]:
        n = self.world_size
        if len(sends) != n or any(len(s) != n for s in sends):
            raise TrainingError("alltoallv: every worker must send one tensor to every worker.")
        if recv_counts is not None:  # the distributed engine trusts these: check them here
            for dst in range(n):
                for src in range(n):
                    if int(sends[src][dst].shape[0]) != int(recv_counts[dst][src]):
                        raise TrainingError(f"alltoallv: worker {dst} expected {recv_counts[dst][src]} rows from "
                                            f"{src}, got {sends[src][dst].shape[0]} ({category}).")
        self.count_sends(sends, category)
        return [[sends[src][dst] for src in range(n)] for dst in range(n)]

    def _all_reduce_dense(self, flat: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            for i in range(self.world_size):
                self.count(i, "dense_allreduce", flat.numel() * flat.element_size())
        return flat

    def sum_across(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values)

    def gather(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(a) for a in arrays]
