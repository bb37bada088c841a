"""Training with a placement: the trainer, its consistency protocols, the schedules and Herald.

Who calls whom (imports point down; docs/train.md has the full diagram)::

    run.py          gmp train as a library call: validate, build engine + trainer, fit, log, checkpoint
      |   \
      |    json_log.py      the --log-json file: refused if foreign, torn last line dropped, trimmed on resume
      |    migrate.py       resume on the next day's placement (rows travel with their state)
      |    checkpoint.py    save / resume (checkpoint_dir.py: names, latest link; checkpoint_rows.py: rows files;
      |                     checkpoint_safe.py: arrays as weights-only tensors)
      |      (both use the Trainer's public methods only)
    trainer.py      Trainer: the loop (fit), position, records, evaluation -- protocol-independent
      |    prepare.py       the one input pipeline: schedule, tier rows, batch preparation ahead (pipeline_steps)
      |
    registry.py     SCHEDULES and PROTOCOLS (explicit dicts), make_schedule, make_protocol
      |   \
      |    protocol.py           StepProtocol: what a protocol implements; it gets a StepContext
      |      protocol_hetgmp.py    HET-GMP bounded staleness         \
      |      protocol_pipeline.py  bounded staleness at s = 0, reads   |  all on steps.py
      |                            overlapped with compute             |  (shared step helpers)
      |      protocol_herald.py    Herald on-demand (s = 0)           /
      |
    context.py      StepContext: the run's parts a step uses (engine, stores, data, dense, staleness...)
    dense.py        DenseSync: dense all-reduce + optimizer step, the stop/non-finite control element
    evaluate.py  records.py (records, Counters)  steps.py (phases 1-6, PhaseClock)
      device_ids.py (the preparation's id work as torch operations: the torch id path, GMP_ID_PATH)
      device_arrays.py (the run's fixed host arrays as tensors, made once per device: id matrix, maps, primaries)
      host_memory.py (a CPU run keeps a step's freed memory for the next step: GMP_KEEP_HOST_MEMORY)
      reads.py (phases 1-3: settle_reads right before a step, read_rows in it)
    config.py       TrainConfig (validated once)   consistency.py  Staleness: every rule that depends on s
    schedule.py     static / naive / replay        herald/  Herald's runtime scheduler, HeraldSchedule
    store.py        EmbeddingStore: a worker's rows, clocks, optimizer state
      slots.py (initial rows, id -> slot)  unique.py (np.unique without the sort)
      copies.py (Herald's copies in the device cache)  tiers/ (host / disk master tiers, device cache)
    models.py  data.py
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
