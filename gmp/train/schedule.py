"""Schedules: which samples each worker trains on at each step.

A :class:`Schedule` yields, per training step, one int64 array of sample ids
per worker (a :class:`Step`). The trainer is agnostic of how they were chosen;
at ``staleness = 0`` a step is exactly the single-process step on the union of
the workers' arrays (the loss is the mean over that union), so any schedule
gives the same model as a one-worker replay of its global batches.

Two schedules live here; Herald's location-aware schedule lives in
:mod:`gmp.train.herald.schedule`. The names ``--schedule`` accepts are the
explicit registry :data:`gmp.train.registry.SCHEDULES`.

``static`` (HET-GMP)
    Worker ``w`` trains on the training samples the placement assigns it.
    Each epoch its shard is permuted by :func:`gmp.seeds.epoch_rng` ``(seed, epoch)``
    (one generator, shards permuted in worker order); ``shuffle="none"`` keeps
    dataset order. Step ``t`` gives worker ``w`` items ``[t*B, (t+1)*B)`` of
    its shard; there are ``ceil(max shard / B)`` steps and a worker whose
    shard has run out joins the remaining steps with an empty array. Every
    training sample is used exactly once per epoch.

``naive`` (Herald's baseline)
    The training set (``[0, num_train)``) is permuted by
    :func:`gmp.seeds.epoch_permutation` (or kept in order), cut into global batches
    of ``N * B`` and each global batch split into ``N`` consecutive parts
    (``np.array_split``: equal parts of ``B``, the last batch as equal as
    possible). The permutation does not depend on ``N``, so
    ``--workers 4 --batch-size 256`` sees the same global batches as
    ``--workers 1 --batch-size 1024``.

Determinism is what makes distributed training work without shipping
batches: every rank builds the same schedule and takes its own entry.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import TrainingError
from ..params import check_choice, check_int
from ..placement import Placement
from .. import seeds

SHUFFLES = ("seeded", "none")


@dataclass
class Step:
    """One training step: ``samples[w]`` are worker ``w``'s sample ids (int64).

    ``info`` carries schedule-specific extras (e.g. communication plans) that
    a cooperating store or trainer hook may use; the base trainer ignores it.
    """

    index: int
    samples: list[np.ndarray]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def global_batch_size(self) -> int:
        return int(sum(a.size for a in self.samples))


@dataclass(frozen=True)
class ScheduleContext:
    """Everything a schedule factory may need."""

    placement: Placement
    num_train: int
    batch_size: int
    seed: int = 0
    shuffle: str = "seeded"
    #: the prepared dataset (or None) — schedules that look at sample contents use it.
    dataset: Any = None
    #: the replica model of ``--schedule herald`` (a gmp.train.herald.HeraldOptions; None: its defaults)
    herald: Any = None

    @property
    def num_workers(self) -> int:
        return self.placement.num_workers


class Schedule(abc.ABC):
    """Per-step, per-worker sample ids. Subclasses must be deterministic given
    their constructor arguments (every distributed rank builds its own copy)."""

    num_workers: int

    @abc.abstractmethod
    def num_steps(self, epoch: int) -> int:
        """Number of steps of ``epoch`` (0-based)."""

    @abc.abstractmethod
    def steps(self, epoch: int, start: int = 0, *, threaded: bool = True) -> Iterator[Step]:
        """The steps of ``epoch`` from step ``start`` on (``start`` > 0 when resuming). A schedule that
        computes ahead (Herald's runtime scheduler) does it in a thread of its own unless ``threaded`` is
        False: the caller's input pipeline then runs it ahead in its thread. The others ignore it."""

    def state_dict(self) -> dict[str, Any]:
        """Extra state to checkpoint (stateless schedules return {})."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output when resuming."""


def _check_shuffle(shuffle: str) -> None:
    check_choice("shuffle", shuffle, SHUFFLES, error=TrainingError)


def _check_batch(batch_size: int) -> None:
    check_int("batch_size", batch_size, minimum=1, error=TrainingError)


class StaticSchedule(Schedule):
    """HET-GMP's static schedule: each worker walks its own shard of the placement."""

    def __init__(self, placement: Placement, num_train: int, batch_size: int, *, seed: int = 0,
                 shuffle: str = "seeded"):
        _check_shuffle(shuffle)
        _check_batch(batch_size)
        self.num_workers = placement.num_workers
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.shuffle = shuffle
        owner = np.asarray(placement.sample_worker[:num_train])
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(self.num_workers + 1))
        self.shards = [order[bounds[w]:bounds[w + 1]].astype(np.int64) for w in range(self.num_workers)]
        self._max_shard = max((s.size for s in self.shards), default=0)

    def num_steps(self, epoch: int) -> int:
        return -(-self._max_shard // self.batch_size)

    def epoch_shards(self, epoch: int) -> list[np.ndarray]:
        if self.shuffle == "none":
            return self.shards
        rng = seeds.epoch_rng(self.seed, epoch)
        return [s[rng.permutation(s.size)] for s in self.shards]

    def steps(self, epoch: int, start: int = 0, *, threaded: bool = True) -> Iterator[Step]:
        shards = self.epoch_shards(epoch)
        b = self.batch_size
        for t in range(start, self.num_steps(epoch)):
            yield Step(t, [s[t * b:(t + 1) * b] for s in shards])


class NaiveSchedule(Schedule):
    """Global batches of ``N * B`` in a seeded order, split into N consecutive parts."""

    def __init__(self, num_workers: int, num_train: int, batch_size: int, *, seed: int = 0,
                 shuffle: str = "seeded"):
        _check_shuffle(shuffle)
        _check_batch(batch_size)
        self.num_workers = int(num_workers)
        self.num_train = int(num_train)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.shuffle = shuffle

    @property
    def global_batch_size(self) -> int:
        return self.num_workers * self.batch_size

    def num_steps(self, epoch: int) -> int:
        return -(-self.num_train // self.global_batch_size)

    def epoch_order(self, epoch: int) -> np.ndarray:
        if self.shuffle == "none":
            return np.arange(self.num_train, dtype=np.int64)
        return seeds.epoch_permutation(self.num_train, self.seed, epoch)

    def global_batches(self, epoch: int, start: int = 0) -> Iterator[np.ndarray]:
        order = self.epoch_order(epoch)
        g = self.global_batch_size
        for t in range(start, self.num_steps(epoch)):
            yield order[t * g:(t + 1) * g]

    def steps(self, epoch: int, start: int = 0, *, threaded: bool = True) -> Iterator[Step]:
        for t, batch in enumerate(self.global_batches(epoch, start), start=start):
            yield Step(t, [np.ascontiguousarray(p) for p in np.array_split(batch, self.num_workers)])


class ReplaySchedule(Schedule):
    """A fixed list of steps, the same every epoch (tests: a single-process replay
    of another schedule's global batches)."""

    def __init__(self, steps: Sequence[Sequence[np.ndarray]] | Callable[[int], Sequence[Sequence[np.ndarray]]]):
        self._steps = steps
        first = steps(0) if callable(steps) else steps
        self.num_workers = len(first[0]) if len(first) else 1

    def _epoch(self, epoch: int):
        return self._steps(epoch) if callable(self._steps) else self._steps

    def num_steps(self, epoch: int) -> int:
        return len(self._epoch(epoch))

    def steps(self, epoch: int, start: int = 0, *, threaded: bool = True) -> Iterator[Step]:
        for t, parts in enumerate(self._epoch(epoch)):
            if t >= start:
                yield Step(t, [np.asarray(p, dtype=np.int64) for p in parts])
