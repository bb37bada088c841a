"""What a step may use: the :class:`StepContext` a step protocol, the step helpers, the evaluation,
the tier feeder and the records receive instead of the :class:`~gmp.train.trainer.Trainer`.

The trainer builds one context when it is made and keeps the loop's own state (position, epoch
accumulators, history, the run's id) to itself. The context holds the run's parts, fixed for its
life: the engine, the local workers' stores, the data, the dense model with its optimizer and
all-reduce (:class:`~gmp.train.dense.DenseSync`), the schedule, the placement, the staleness rules
(:class:`~gmp.train.consistency.Staleness`), the dtypes on the wire and the counters; no
protocol reads settings off the trainer or its config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from ..comm.base import CommEngine
from ..placement import Placement
from .consistency import Staleness
from .data import TrainData
from .dense import DenseSync
from .device_arrays import DeviceArrays
from .records import Counters
from .schedule import Schedule
from .steps import PhaseClock
from .store import EmbeddingStore
from .unique import UniqueIndex


@dataclass(frozen=True)
class StepContext:
    """The parts of one trainer a step uses (see the module docstring); ``li`` indexes the local workers."""

    engine: CommEngine
    stores: Sequence[EmbeddingStore]  # one per local worker
    data: TrainData
    model: torch.nn.Module
    dense: DenseSync
    schedule: Schedule
    placement: Placement
    primary: np.ndarray  # the placement's primary worker of every row
    staleness: Staleness
    batch_size: int  # per worker (a partial step still weighs each sample as a full step's N x B)
    eval_batch_size: int  # per worker
    row_dim: int
    dtype: torch.dtype  # the tables' and the model's
    comm_dtype: torch.dtype  # rows, gradients and the dense all-reduce on the wire
    id_dtype: np.dtype  # ids and clocks on the wire
    phase: PhaseClock  # seconds per phase of the steps (records' phase_seconds)
    counters: Counters
    unique_ids: UniqueIndex  # np.unique(..., return_inverse=True) of a batch's ids
    unique_slots: Sequence[UniqueIndex]  # ... and of each local primary's gradient slots
    herald: Any = None  # the herald schedule's replica model (HeraldOptions), else None
    tiers: Any = None  # where the primaries live (TierOptions), None: on the device
    #: tensors of the run's fixed arrays made on first use, per device (:meth:`primary_tensor`)
    device_arrays: DeviceArrays = field(default_factory=DeviceArrays, repr=False, compare=False)

    @property
    def num_workers(self) -> int:
        return self.engine.world_size

    @property
    def has_secondaries(self) -> bool:
        return self.placement.num_secondaries > 0

    def primary_tensor(self, device: torch.device) -> torch.Tensor:
        """``primary`` as a tensor on ``device`` (the torch id path's owner groups, :mod:`gmp.train.device_ids`):
        made once per device, shared with the array on the CPU."""
        return self.device_arrays.tensor("primary", self.primary, device)

    def count(self, li: int, name: str, value: int) -> None:
        """Add ``value`` to local worker ``li``'s counter ``name`` (while the engine counts)."""
        self.counters.add(li, name, value)

    def max_across(self, value: float) -> float:
        """The largest ``value`` over all processes (collective)."""
        per = np.concatenate(self.engine.gather([np.array([value])] * len(self.stores)))
        return float(per.max())
