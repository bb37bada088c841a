"""Training with a placement: the trainer, its two consistency protocols, the schedules and Herald.

Who calls whom (imports point down; docs/train.md has the full diagram)::

    run.py          gmp train as a library call: validate, build engine + trainer, fit, log, checkpoint
      |
    trainer.py      Trainer: the loop (fit), dense step, records, evaluation -- protocol-independent
      |   \\
      |    protocol.py         StepProtocol + make_protocol
      |      protocol_hetgmp.py  HET-GMP bounded staleness      \\  both on steps.py
      |      protocol_herald.py  Herald on-demand (s = 0)         /  (shared step helpers)
      |
    config.py  registry.py  schedule.py  herald/  store.py  consistency.py  models.py  data.py
    evaluate.py  records.py  checkpoint.py
      |
    gmp.comm (engines)  gmp.kernels  gmp.seeds  gmp.params  gmp.constants  gmp.scoring  gmp.progress

Public names: :class:`TrainConfig`, :class:`TrainData`, :class:`Trainer`,
:func:`train` (``gmp train``), :data:`SCHEDULES`.
"""

from .config import TrainConfig
from .data import TrainData
from .registry import SCHEDULES, make_schedule, schedule_names
from .run import train
from .trainer import Trainer

__all__ = ["SCHEDULES", "TrainConfig", "TrainData", "Trainer", "make_schedule", "schedule_names", "train"]
