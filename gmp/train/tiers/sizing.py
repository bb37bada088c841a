"""The tiered table's default device cache: big enough for the largest step of the run.

A worker's cache must hold every row of its own that one step uses (the step's rows are pinned
while it trains: :class:`gmp.train.tiers.StepFeeder`), so a fixed share of its primaries fails on
small data, where one step reads a large part of the table. :func:`default_cache_rows` is the
larger of the most rows any step of the run pins on any worker (over the epochs' orders as the
trainer will run them) and :data:`~gmp.train.tiers.DEFAULT_CACHE_PERCENT` % of the largest
worker's primaries.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...placement import Placement
from ..schedule import NaiveSchedule, ScheduleContext
from ._kernels import largest_step_primaries
from .table import DEFAULT_CACHE_PERCENT


class CacheSize(NamedTuple):
    """:func:`default_cache_rows`: the rows, the largest step's rows and the percentage's rows."""

    rows: int
    largest_step: int
    percent_rows: int


def _epoch_steps(schedule: str, placement: Placement, num_train: int, batch_size: int, seed: int, shuffle: str,
                 epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, bounds)``: step ``t`` of ``epoch`` is the samples ``order[bounds[t]:bounds[t+1]]`` of every
    worker together. ``herald`` walks the naive schedule's global batches (it only splits them otherwise)."""
    if schedule in ("naive", "herald"):
        naive = NaiveSchedule(placement.num_workers, num_train, batch_size, seed=seed, shuffle=shuffle)
        order = naive.epoch_order(epoch)
        bounds = np.append(np.arange(0, num_train, naive.global_batch_size, dtype=np.int64), num_train)
        return order, bounds
    from ..registry import make_schedule

    sched = make_schedule(schedule, ScheduleContext(placement=placement, num_train=num_train,
                                                    batch_size=batch_size, seed=seed, shuffle=shuffle))
    parts, sizes = [], [0]
    for step in sched.steps(epoch):
        parts.extend(np.asarray(a, dtype=np.int64) for a in step.samples)
        sizes.append(sum(int(np.asarray(a).size) for a in step.samples))
    order = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return order, np.cumsum(sizes).astype(np.int64)


def largest_step_rows(indptr, indices, placement: Placement, *, num_train: int, schedule: str, batch_size: int,
                      seed: int, shuffle: str, epochs: range) -> np.ndarray:
    """Per worker, the most of its primaries one step of ``epochs`` uses (what its cache must hold)."""
    primary = np.asarray(placement.embedding_primary, dtype=np.int64)
    stamp = np.full(primary.size, -1, dtype=np.int64)
    most = np.zeros(placement.num_workers, dtype=np.int64)
    first = 0
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    for epoch in epochs:
        order, bounds = _epoch_steps(schedule, placement, num_train, batch_size, seed, shuffle, epoch)
        most = np.maximum(most, largest_step_primaries(indptr, indices, order, bounds, primary,
                                                       placement.num_workers, stamp, first))
        first += bounds.size
    return most


def default_cache_rows(indptr, indices, placement: Placement, *, num_train: int, schedule: str, batch_size: int,
                       seed: int, shuffle: str, epochs: range) -> CacheSize:
    """The device cache every worker gets when none is given: the largest step of ``epochs`` or
    :data:`DEFAULT_CACHE_PERCENT` % of the largest worker's primaries, whichever is larger (at least 1)."""
    step = int(largest_step_rows(indptr, indices, placement, num_train=num_train, schedule=schedule,
                                 batch_size=batch_size, seed=seed, shuffle=shuffle, epochs=epochs).max(initial=0))
    num_primary = np.bincount(np.asarray(placement.embedding_primary), minlength=placement.num_workers)
    percent = int(-(-int(num_primary.max(initial=0)) * DEFAULT_CACHE_PERCENT // 100))
    return CacheSize(max(1, step, percent), step, percent)
