"""Tensors of a run's fixed host arrays, made once per device on first use and kept (the torch id path's
id matrix, field map, slot maps and primaries, :mod:`gmp.train.device_ids`). On the CPU they share the
arrays' memory: nothing is copied."""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable

import numpy as np
import torch


def shared_tensor(a: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing ``a``'s memory (a read-only memory map too: the id path only reads it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.ascontiguousarray(a))


class DeviceArrays:
    """What :meth:`get` made, by key; thread-safe (the batch preparation runs on a side thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict = {}

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()``'s result for ``key``, made on the first call."""
        with self._lock:
            if key not in self._made:
                self._made[key] = make()
            return self._made[key]

    def tensor(self, name: str, array: np.ndarray, device: torch.device | str) -> torch.Tensor:
        """``array`` (named ``name`` in the cache) as a tensor on ``device``."""
        device = torch.device(device)
        return self.get((name, device), lambda: shared_tensor(array).to(device))
