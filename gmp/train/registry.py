"""The schedules ``gmp train --schedule`` accepts and the step protocols: explicit dicts (like
:data:`gmp.partition.PARTITIONERS`).

Nothing registers itself at import time; adding a schedule or a protocol means adding a line here.
Which protocol a run gets is the staleness rules' choice (:meth:`gmp.train.consistency.Staleness.protocol`).
"""

from __future__ import annotations

from typing import Callable

from ..errors import TrainingError
from ..params import check_choice
from .context import StepContext
from .herald.schedule import HeraldSchedule, make_herald_schedule
from .protocol import StepProtocol
from .protocol_herald import HeraldOnDemand
from .protocol_hetgmp import BoundedStaleness
from .protocol_pipeline import PipelinedStaleness
from .schedule import NaiveSchedule, Schedule, ScheduleContext, StaticSchedule

#: name -> factory(ScheduleContext) -> Schedule
SCHEDULES: dict[str, Callable[[ScheduleContext], Schedule]] = {
    "static": lambda c: StaticSchedule(c.placement, c.num_train, c.batch_size, seed=c.seed, shuffle=c.shuffle),
    "naive": lambda c: NaiveSchedule(c.num_workers, c.num_train, c.batch_size, seed=c.seed, shuffle=c.shuffle),
    "herald": make_herald_schedule,
}


def schedule_names() -> list[str]:
    return sorted(SCHEDULES)


def make_schedule(name: str, context: ScheduleContext) -> Schedule:
    """Build the schedule called ``name`` (a TrainingError naming the parameter for unknown names)."""
    check_choice("schedule", name, schedule_names(), error=TrainingError)
    return SCHEDULES[name](context)


#: name -> StepProtocol class (one per consistency model; :mod:`gmp.train.protocol`)
PROTOCOLS: dict[str, Callable[[StepContext], StepProtocol]] = {
    "bounded": BoundedStaleness,
    "pipelined": PipelinedStaleness,
    "herald": HeraldOnDemand,
}


def make_protocol(ctx: StepContext, *, pipeline: bool = False) -> StepProtocol:
    """The step protocol of a trainer's context: Herald's on-demand scheme for the herald schedule at
    s = 0, the pipelined step with ``pipeline`` (s = 0: ``TrainConfig`` checks), else bounded staleness."""
    name = ctx.staleness.protocol(herald=ctx.herald is not None, pipeline=pipeline)
    if name == "herald" and not isinstance(ctx.schedule, HeraldSchedule):
        raise TrainingError(f"The 'schedule' parameter must be a HeraldSchedule for schedule='herald' at "
                            f"staleness 0, got {type(ctx.schedule).__name__}; pass no schedule.")
    return PROTOCOLS[name](ctx)
