"""The step-protocol interface: one implementation per consistency model.

The :class:`~gmp.train.trainer.Trainer` knows nothing of HET-GMP or Herald: it
builds its protocol by name (:func:`gmp.train.registry.make_protocol`), hands it the
:class:`~gmp.train.context.StepContext` (not the trainer), asks it for the epoch's
steps, runs :meth:`StepProtocol.train_step` on each, :meth:`StepProtocol.end_epoch`
after the last, and lets the protocol add its fields to the JSON records. The
implementations:

* :class:`gmp.train.protocol_hetgmp.BoundedStaleness` -- HET-GMP's bounded
  staleness (any schedule; s >= 0, including inf);
* :class:`gmp.train.protocol_pipeline.PipelinedStaleness` -- bounded staleness at
  s = 0 with the next step's reads overlapped (``pipeline``);
* :class:`gmp.train.protocol_herald.HeraldOnDemand` -- Herald's on-demand
  scheme at s = 0 (``--schedule herald``): every transfer is the one the
  runtime scheduler lists.

Which one runs is :meth:`gmp.train.consistency.Staleness.protocol`'s choice (the staleness rules
live there), by name in :data:`gmp.train.registry.PROTOCOLS`.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Iterator

import torch

from .context import StepContext
from .schedule import Step


class StepProtocol(abc.ABC):
    """How the workers of one trainer read, update and synchronise rows in a step."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx

    def steps(self, epoch: int, start: int) -> Iterator[Step]:
        """The steps of ``epoch`` from ``start`` on (default: the schedule's)."""
        return self.ctx.schedule.steps(epoch, start)

    #: whether :meth:`prepare` and :meth:`steps` may run on the input pipeline's side thread while an
    #: earlier step computes (they read nothing a step changes; :func:`gmp.train.prepare.pipeline_steps`)
    prepares_ahead: bool = False

    def prepare(self, step: Step, *, timed: bool = True, resident: list | None = None) -> Any:
        """The batch preparation of ``step`` ahead of it (issue 33: ids deduplicated and translated,
        index and batch tensors made), handed to :meth:`train_step` instead of ``step``. Default: none
        (``step`` itself; the protocol prepares inside its step). ``timed``: count it as the ``gather``
        phase (not in the input pipeline, which times its wait); ``resident``: per local worker, the
        :class:`~gmp.train.tiers.ReadyStep` of its tier's rows pinned for the step (None: no tier)."""
        return step

    def settle(self, prepared: Any) -> Any:
        """The last stage of the preparation, on the trainer's thread right before :meth:`train_step`
        (after the step before it has updated): what depends on the state that step left (HET-GMP's
        clocks) and on the other workers' batches (the exchange of ids), so that the step itself
        reads nothing on the host. Default: nothing (``prepared`` unchanged)."""
        return prepared

    @abc.abstractmethod
    def train_step(self, step: Step) -> list[torch.Tensor]:
        """Run one synchronous step of all local workers (``step``: what :meth:`prepare` made of it);
        return the summed sample loss of each local worker with samples (0-d tensors on its device, :func:`gmp.train.steps.forward_backward`).

        A step never waits for the device (issue 33): the trainer reads the losses and the dense
        control element (:meth:`gmp.train.dense.DenseSync.settle`) after it returns."""

    def end_epoch(self) -> None:
        """Work after an epoch's last step (counted as training time)."""

    def add_lookahead_stats(self, stats: dict[str, float]) -> None:
        """What the look-ahead prefetcher measured over a call of :meth:`steps` (``items``,
        ``produce_s``, ``stall_s``; :class:`gmp.train.tiers.StepFeeder`), for the protocol's record."""

    def watch_lookahead(self, stats: Callable[[], dict[str, float]] | None) -> None:
        """The running prefetcher's ``stats`` while a call of :meth:`steps` is in progress (None after it), so
        that a record made mid-epoch (``--log-every``) counts what it measured so far."""

    def reset_epoch(self) -> None:
        """Clear the protocol's per-epoch accumulators."""

    def add_to_record(self, rec: dict[str, Any], counters: dict[str, int]) -> None:
        """Add the protocol's fields to a JSON record (``counters``: every counter summed over workers)."""
