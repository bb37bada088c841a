"""The schedules ``gmp train --schedule`` accepts: one explicit dict (like :data:`gmp.partition.PARTITIONERS`).

Nothing registers itself at import time; adding a schedule means adding a line here.
"""

from __future__ import annotations

from typing import Callable

from ..errors import TrainingError
from ..params import check_choice
from .herald.plugin import make_herald_schedule
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
