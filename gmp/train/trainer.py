"""The training loop: one :class:`Trainer` per process, independent of the consistency protocol.

One :class:`Trainer` per process drives the workers that process hosts
(all of them under the local engine, one under ``torchrun``); every phase
below is a loop over those workers followed by one collective of the
:class:`~gmp.comm.CommEngine`. What a step does is the protocol's
(:mod:`gmp.train.protocol`): HET-GMP's bounded staleness
(:mod:`gmp.train.protocol_hetgmp`) or Herald's on-demand scheme at s = 0
(:mod:`gmp.train.protocol_herald`), both built on :mod:`gmp.train.steps`.
Per step of bounded staleness (HET-GMP section 6, "Decentralized Communication"):

1. **Request.** Each worker takes its batch from the schedule, finds the
   distinct rows it uses, and sends ``(id, clock)`` for every row it does not
   hold (clock -1) and — unless ``s = inf`` — every row it holds as a
   secondary (its replica clock) to the row's primary (``ids_clocks``).
2. **Serve.** Each primary answers every request with its current clock
   (``ids_clocks``) and, for remote reads and for secondaries failing the
   intra-embedding bound, the row (``embedding_rows``).
3. **Inter-embedding check** (only when ``0 < s < inf`` and the placement has
   secondaries): secondaries that fail the bound of
   :func:`~gmp.train.consistency.inter_stale` are fetched in a second round.
4. **Forward/backward** on the distinct rows as a leaf tensor; the loss is the
   sum of BCE over the worker's samples divided by the *global* batch size,
   so gradients add up to those of the mean over the union of all batches.
5. **Push.** Gradients of rows that are not primary on the worker go to
   their primaries with their ids (``gradients`` + ``ids_clocks``).
6. **Update.** Each primary sums its own and the received gradients of a row
   and applies the embedding optimizer once (clock + 1); dense gradients are
   all-reduced (``dense_allreduce``) and the dense optimizer steps.

Per step and worker, remote rows read = distinct non-local rows of its batch
and rows pushed = distinct non-primary rows — the same quantities as
:func:`gmp.metrics.batch_remote_reads` / ``batch_remote_pushes``. Refreshes
of secondaries are counted as ``staleness_refreshes``. With ``s > 0`` all
secondaries are brought up to date at the end of every epoch (also counted).

Evaluation (:mod:`gmp.train.evaluate`) reads primaries only; records are built
by :mod:`gmp.train.records`; the progress bar is :func:`gmp.progress.task`.

**No blackboard.** The protocol, the step helpers, the evaluation, the tier feeder and the records
get the :class:`~gmp.train.context.StepContext` (the run's parts), not the trainer; checkpoints,
migrations and the run loop (:mod:`gmp.train.checkpoint`, :mod:`gmp.train.migrate`,
:mod:`gmp.train.run`) use the trainer's public methods only (``tests/test_architecture.py``
checks both).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Callable

import numpy as np
import torch

from .. import progress
from .._memory import memory_note
from ..comm.base import CommEngine
from ..constants import DEFAULT_BATCH_SIZE, DEFAULT_EMBEDDING_DIM, VALUE_BYTES
from ..errors import TrainingError
from ..placement import Placement
from .config import TrainConfig
from .context import StepContext
from .data import TrainData
from .dense import DenseOptimizer, DenseSync
from .evaluate import evaluate
from .models import make_model
from .records import Counters, make_record
from .registry import make_protocol, make_schedule
from .schedule import Schedule, ScheduleContext, Step
from .prepare import pipeline_steps
from .steps import PhaseClock, PreparedStep, loss_value, wire_id_dtype
from .store import EmbeddingStore
from .unique import UniqueIndex

log = logging.getLogger("gmp.train")


class Trainer:
    """Trains one model over the workers hosted by ``engine`` (see the module docstring)."""

    def __init__(self, data: TrainData, placement: Placement, config: TrainConfig, engine: CommEngine,
                 *, schedule: Schedule | None = None):
        if not isinstance(config, TrainConfig):
            raise TrainingError(f"The 'config' parameter must be a TrainConfig, got {type(config).__name__}.")
        if placement.num_workers != engine.world_size:
            raise TrainingError(f"the manifest places rows on {placement.num_workers} workers but the engine runs "
                                f"{engine.world_size}; use `workers` {placement.num_workers} "
                                f"(torchrun --nproc-per-node {placement.num_workers}).")
        placement.check(num_samples=data.num_samples, num_embeddings=data.num_embeddings)
        self.data = data
        self.placement = placement
        self.config = config
        self.engine = engine
        self.num_workers = engine.world_size
        self.dtype = config.torch_dtype
        self.phase = PhaseClock(engine)  # seconds per phase of the steps (records' phase_seconds)
        self.device = engine.device_for(engine.local_workers[0])
        check_memory(placement, config, engine.local_workers, data.num_fields, self.device,
                     num_dense=data.num_dense, num_test=data.num_samples - data.num_train)
        self.model = make_model(config.model, num_fields=data.num_fields, num_dense=data.num_dense,
                                embedding_dim=config.embedding_dim, hidden=config.hidden, seed=config.seed,
                                dtype=self.dtype).to(self.device)
        self.row_dim = self.model.row_dim
        self.stores = [EmbeddingStore(w, placement, row_dim=self.row_dim, optimizer=config.optimizer, lr=config.lr,
                                      seed=config.seed, dtype=self.dtype, device=engine.device_for(w),
                                      tiers=config.tiers)
                       for w in engine.local_workers]
        self._check_memory_plan()
        self.dense_opt = DenseOptimizer(list(self.model.parameters()), config.optimizer, lr=config.lr)
        # one worker sends nothing: --comm-dtype has no wire to narrow (its gradients were rounded for nothing)
        self.dense = DenseSync(self.model, self.dense_opt, engine, self.phase, dtype=self.dtype,
                               comm_dtype=config.comm_torch_dtype if self.num_workers > 1 else self.dtype)
        if schedule is None:
            ctx = ScheduleContext(placement, data.num_train, config.batch_size, seed=config.seed,
                                  shuffle=config.shuffle, dataset=data.dataset, herald=config.herald_options())
            schedule = make_schedule(config.schedule, ctx)
        if schedule.num_workers != self.num_workers:
            raise TrainingError(f"schedule is for {schedule.num_workers} workers, the engine runs {self.num_workers}.")
        self.schedule = schedule
        # position and epoch accumulators (checkpointed)
        self.epoch = 0
        self.step_in_epoch = 0
        self.counts = Counters(engine, len(self.stores))
        self.counters = self.counts.values  # [local worker, ALL_COUNTERS] of the running epoch
        self.ctx = StepContext(
            engine=engine, stores=tuple(self.stores), data=data, model=self.model, dense=self.dense,
            schedule=schedule, placement=placement, primary=np.asarray(placement.embedding_primary),
            staleness=config.staleness_rules, batch_size=config.batch_size,
            eval_batch_size=config.eval_batch_size, row_dim=self.row_dim, dtype=self.dtype,
            comm_dtype=config.comm_torch_dtype, id_dtype=wire_id_dtype(data.num_embeddings), phase=self.phase,
            counters=self.counts, unique_ids=UniqueIndex(data.num_embeddings),
            unique_slots=tuple(UniqueIndex(store.num_primary) for store in self.stores),
            herald=config.herald_options(), tiers=config.tiers)
        self.protocol = make_protocol(self.ctx, pipeline=config.pipeline)
        self.acc = _new_acc()
        self.history: list[dict[str, Any]] = []
        self.interrupted = False
        self.run_id: str | None = None  # the run its JSON log lines name; kept in its checkpoints

    def _check_memory_plan(self) -> None:
        """Compare the rows each worker holds with the manifest's plan.

        Every store already checked that it holds exactly the rows the placement
        lists (``Placement.rows_held``). When the partitioner was given a memory
        budget (``memory_per_worker`` bytes of ``embedding_dim`` float32 rows,
        the hybrid partitioner), the secondaries must fit in it beside the
        primaries; the table this trainer allocates (row width, dtype and
        optimizer state included) is logged against the plan.
        """
        opts = dict(self.placement.options or {})
        budget = opts.get("memory_per_worker")
        for store in self.stores:
            mem = store.memory_bytes()
            log.info("worker %d holds %d rows (%d primaries, %d secondaries): %d bytes", store.worker, mem["rows"],
                     mem["primaries"], mem["secondaries"], mem["total_bytes"])
            if budget is None:
                continue
            # both positive integers when read from a manifest (gmp.manifest.check_header); null: the default
            rows_planned = int(budget) // (int(opts.get("embedding_dim") or DEFAULT_EMBEDDING_DIM) * VALUE_BYTES)
            if mem["secondaries"] and mem["rows"] > max(rows_planned, mem["primaries"]):
                raise TrainingError(f"worker {store.worker} holds {mem['rows']} rows, more than the manifest's memory "
                                    f"plan of {rows_planned} rows ({budget} bytes); re-run 'gmp partition'.")
            if mem["table_bytes"] > int(budget):
                log.warning("worker %d: the embedding table takes %d bytes, the plan assumed %d "
                            "(row width %d, %s)", store.worker, mem["table_bytes"], budget, self.row_dim,
                            self.config.dtype)

    def request_stop(self) -> None:
        """Ask :meth:`fit` to stop after the current step (safe from a signal handler)."""
        self.dense.request_stop()

    # ------------------------------------------------------------------ step
    def train_step(self, step: Step | PreparedStep) -> float:
        """Run one synchronous step of all local workers (the protocol's); return the sum of their sample losses
        (read on the host once the step has returned). ``step``: prepared ahead (:mod:`gmp.train.prepare`)
        or not (prepared here, before the protocol's step)."""
        prepared = step if isinstance(step, PreparedStep) else self.protocol.prepare(step)
        prepared = self.protocol.settle(prepared)  # on this thread, after the step before updated
        losses = self.protocol.train_step(prepared)
        self.dense.settle()  # the step's stop / non-finite agreement, read after the step
        return loss_value(losses)

    def evaluate(self) -> dict[str, float]:
        """AUC and logloss of the current primaries on the test split (:mod:`gmp.train.evaluate`)."""
        return evaluate(self.ctx)

    # ------------------------------------------------------------ the loop
    def _count_wait(self, seconds: float) -> None:
        """The wait for the input pipeline (gmp.train.prepare): training time, as the preparation was."""
        self.acc["train_seconds"] += seconds

    def _reset_epoch(self) -> None:
        self.counts.reset()
        self.engine.reset_counts()
        self.phase.reset()
        self.acc = _new_acc()
        self.protocol.reset_epoch()

    def _record(self, kind: str, extra: dict[str, Any]) -> dict[str, Any]:
        return make_record(self.ctx, self.protocol, kind, extra, epoch=self.epoch, step=self.step_in_epoch,
                           acc=self.acc)

    def close(self) -> None:
        """Release the stores' tiers (a disk tier's files are removed)."""
        for store in self.stores:
            store.close()

    def memory(self) -> list[dict[str, int]]:
        return [s.memory_bytes() for s in self.stores]

    def fit(self, *, on_record: Callable[[dict[str, Any]], None] | None = None,
            on_epoch_end: Callable[["Trainer"], None] | None = None,
            stop_after_steps: int | None = None, flush_at_epoch_end: bool = False) -> list[dict[str, Any]]:
        """Train from the current position to ``config.epochs``.

        ``on_record`` receives every JSON record (per epoch, and every
        ``log_every`` steps); ``on_epoch_end`` runs after each epoch (checkpoints).
        ``stop_after_steps`` stops after that many steps of this call (tests
        of interrupt/resume); the position is kept so a checkpoint saved then
        resumes exactly there. ``flush_at_epoch_end`` (``on_epoch_end`` saves a checkpoint,
        which flushes the tiered caches): the flush is done before the epoch's record, so its
        write-backs count in the epoch whose checkpoint made them (the next epoch's counters
        start from zero), and the run's totals do not depend on checkpointing.
        Returns the epoch records of this call.
        """
        done = 0
        records = []
        while self.epoch < self.config.epochs:
            num_steps = self.schedule.num_steps(self.epoch)
            # the one input pipeline (gmp.train.prepare): the schedule, the tiered rows resident and
            # pinned, each step's batch prepared, ahead on a side thread where it can
            steps = pipeline_steps(self.ctx, self.protocol, self.protocol.steps(self.epoch, self.step_in_epoch),
                                   epoch_start=self.step_in_epoch == 0, on_wait=self._count_wait)
            with progress.task(f"epoch {self.epoch + 1}/{self.config.epochs}", total=num_steps,
                               completed=self.step_in_epoch, show=self.engine.is_main) as advance, \
                    contextlib.closing(steps) as ahead:
                for item in ahead:
                    step = item.step if isinstance(item, PreparedStep) else item
                    if (stop_after_steps is not None and done >= stop_after_steps) or self.dense.stop_now:
                        self.interrupted = True
                        return records
                    t0 = time.perf_counter()
                    loss = self.train_step(item)
                    self.acc["train_seconds"] += time.perf_counter() - t0
                    if self.dense.nonfinite_now:
                        raise TrainingError(f"The training loss is not finite at epoch {self.epoch + 1} step "
                                            f"{step.index + 1}; lower the learning rate (lr={self.config.lr:g}) "
                                            f"or check the dataset for non-finite values.")
                    self.acc["loss_sum"] += loss
                    self.acc["samples"] += step.global_batch_size
                    self.acc["local_samples"] += sum(int(step.samples[w].size) for w in self.engine.local_workers)
                    self.acc["steps"] += 1
                    self.step_in_epoch = step.index + 1
                    done += 1
                    advance(1, _status(self.acc))
                    if self.config.log_every and self.step_in_epoch % self.config.log_every == 0:
                        rec = self._record("step", {})
                        if on_record:
                            on_record(rec)
            with _timed(self.acc):
                self.protocol.end_epoch()
            metrics = self.evaluate()
            if flush_at_epoch_end:
                for store in self.stores:
                    if store.tier is not None:
                        store.tier.flush()
            rec = self._record("epoch", metrics)
            rec["memory_bytes_per_worker"] = [int(x) for x in np.concatenate(self.engine.gather(
                [np.array([m["total_bytes"]], dtype=np.float64) for m in self.memory()]))]
            records.append(rec)
            self.history.append(rec)
            if on_record:
                on_record(rec)
            self.epoch += 1
            self.step_in_epoch = 0
            self._reset_epoch()
            if on_epoch_end:
                on_epoch_end(self)
        return records

    # ---------------------------------------------------------- state (checkpoints, migration, the run)
    def context(self) -> StepContext:
        """The run's parts (engine, local stores, data, placement, dense model, ...) as the steps see them."""
        return self.ctx

    def settings(self) -> TrainConfig:
        return self.config

    def position(self) -> tuple[int, int]:
        """``(epoch, step)``: the next step to run (0-based epoch)."""
        return self.epoch, self.step_in_epoch

    def seek(self, epoch: int, step: int) -> None:
        """Continue at step ``step`` of ``epoch`` (a checkpoint's position; a migration's ``(0, 0)``)."""
        self.epoch, self.step_in_epoch = int(epoch), int(step)

    def was_interrupted(self) -> bool:
        """Whether the last :meth:`fit` stopped before ``config.epochs`` (a stop request or ``stop_after_steps``)."""
        return self.interrupted

    def run_name(self) -> str | None:
        """The run id every JSON log line names (kept in checkpoints; None until named)."""
        return self.run_id

    def name_run(self, run_id: str | None) -> None:
        self.run_id = run_id

    def worker_state(self, li: int) -> dict[str, Any]:
        """Local worker ``li``'s share of the running epoch's accumulators (a checkpoint's worker file):
        its ``counters``, its engine ``bytes``, and this process's ``acc``."""
        return {"counters": self.counters[li].copy(), "bytes": self.engine.bytes[li].copy(), "acc": dict(self.acc)}

    def load_worker_state(self, li: int, state: dict[str, Any]) -> None:
        """Restore :meth:`worker_state` (ValueError naming what does not fit)."""
        for name, old, new in (("counters", self.counters[li], state["counters"]),
                               ("bytes", self.engine.bytes[li], state["bytes"])):
            if not isinstance(new, np.ndarray) or new.shape != old.shape:
                raise ValueError(f"{name} has shape {getattr(new, 'shape', None)}, expected {old.shape}")
        self.counters[li] = state["counters"]
        self.engine.bytes[li] = state["bytes"]
        if not isinstance(state["acc"], dict):
            raise ValueError("acc is not a dict")
        self.acc = dict(state["acc"])  # loss_sum and local_samples are per process; the rest is global
        if "local_samples" not in self.acc:  # a checkpoint from before the bar's own count: this process's share
            self.acc["local_samples"] = self.acc["samples"] * len(self.engine.local_workers) // self.num_workers

    def state_dict(self) -> dict[str, Any]:
        """The dense model and optimizer, the epoch records so far and the schedule's state (``trainer.pt``)."""
        return {"model": self.model.state_dict(), "dense_opt": self.dense_opt.state_dict(),
                "history": list(self.history), "schedule": self.schedule.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (torch's errors for a model of another shape)."""
        self.load_dense(state["model"], state["dense_opt"])
        self.history = list(state["history"])
        self.schedule.load_state_dict(state["schedule"])

    def load_dense(self, model: dict[str, Any], dense_opt: dict[str, Any], *, lr: float | None = None) -> None:
        """Load the dense model and its optimizer's state; ``lr``: the learning rate to go on with (a
        migration keeps this run's, not the checkpoint's)."""
        self.model.load_state_dict(model)
        self.dense_opt.load_state_dict(dense_opt)
        if lr is not None:
            for group in self.dense_opt.param_groups:
                group["lr"] = lr

    def embedding_table(self) -> np.ndarray:
        """The global model's rows (primaries), float64 [num_embeddings, row_dim]; local engine only."""
        if len(self.stores) != self.num_workers:
            raise TrainingError("embedding_table() needs every worker in this process (local engine).")
        out = np.zeros((self.data.num_embeddings, self.row_dim), dtype=np.float64)
        for store in self.stores:
            ids, values = store.primary_rows()
            out[ids] = values.double().cpu().numpy()
        return out


def available_memory(device: torch.device | None = None) -> int:
    """Bytes this process may still allocate: on a CUDA ``device`` its free memory
    (``torch.cuda.mem_get_info``), else host memory: psutil's ``available`` capped by this process's memory
    cgroup (:func:`gmp._memory.available_memory`)."""
    if device is not None and device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    from .._memory import available_memory as host_memory

    return host_memory()


#: tensors of ``batch x deep input`` one forward/backward holds at its peak, per model (measured for wdl:
#: 3.5 GB peak RSS at embedding_dim 100000, 3 fields, batch 512, about 4.3 such tensors beside the
#: parameters): the pooled rows, the deep input and their gradients, plus the FM terms of deepfm and three
#: tensors forward and back per cross layer of dcn
ACTIVATION_COPIES = {"wdl": 5, "deepfm": 8, "dcn": 5 + 6 * 3}


def check_memory(placement: Placement, config: TrainConfig, local_workers, num_fields: int,
                 device: torch.device | None = None, *, num_dense: int = 0, num_test: int = 0) -> None:
    """Refuse, before allocating, a run whose embedding tables, first dense layer and batch activations
    cannot fit in the memory they go to (e.g. ``embedding_dim=100000`` by mistake, or a libffm file with
    50,000 field numbers): the free memory of a CUDA ``device`` (the local engine's workers share one),
    else the host's, capped by this process's memory cgroup (:mod:`gmp._memory`); a tiered table's master
    (``table_location`` host or disk) is checked against the host's.

    Estimate: the rows the local workers hold x (embedding_dim + 1) values x the dtype's bytes,
    twice with Adagrad (its state), plus the first hidden layer's weights, gradients and
    optimizer state (``num_fields * embedding_dim * hidden[0]``), plus one worker's batch (the larger of
    ``batch_size`` and its share of the test split in ``eval_batch_size`` pieces) x the deep input
    (``num_fields * embedding_dim + num_dense``) x :data:`ACTIVATION_COPIES` of the model. The workers of
    one process run their forward/backward one after the other, so one batch counts.

    The refusal names what drives the estimate: ``embedding_dim`` where the rows and the first layer
    outweigh the batch's activations; else the fields where thousands of them make the deep input large
    under an ordinary batch (at most the default), else ``batch_size`` where a smaller batch fits (with
    the largest that does)."""
    itemsize = 4 if config.dtype == "float32" else 8
    copies = 2 if config.optimizer == "adagrad" else 1
    rows = int(placement.rows_held()[list(local_workers)].sum())  # one count over the ids, not one per worker
    table = rows * (config.embedding_dim + 1) * itemsize * copies
    first = num_fields * config.embedding_dim * (config.hidden[0] if config.hidden else 1) * itemsize * (2 + copies)
    eval_rows = min(config.eval_batch_size, -(-max(int(num_test), 0) // max(placement.num_workers, 1)))
    deep_in = num_fields * (config.embedding_dim + 1) + num_dense
    per_sample = deep_in * itemsize * ACTIVATION_COPIES.get(config.model, 8)  # one sample's activations
    activations = max(config.batch_size, eval_rows) * per_sample
    on_gpu = device is not None and device.type == "cuda" and not (config.tiers and config.tiers.tiered)
    need, have = table + first + activations, available_memory(device if on_gpu else None)
    if need > have:
        where = f"free on {device}" if on_gpu else f"of memory available{memory_note()}"
        fix = "lower it, use more GPUs, or `table_location` host" if on_gpu else "lower it or use more workers"
        fits = (have - table - first) // per_sample  # the largest batch beside the rows and the first layer
        big = "embedding_dim"
        if activations > first + table:
            wide = num_fields > 1000
            if wide and max(config.batch_size, eval_rows) <= DEFAULT_BATCH_SIZE:
                big = "num_fields"
            elif config.batch_size >= eval_rows and fits >= 1:
                big = "batch_size"
            elif wide:
                big = "num_fields"
        if big == "batch_size":  # e.g. --batch-size 2147483647: the batch's activations are the estimate
            exc = TrainingError(f"The 'batch_size' parameter {config.batch_size} needs about {need / 2**30:.1f} GiB "
                                f"(a batch of {config.batch_size:,} samples x {deep_in:,} values of deep input x "
                                f"{itemsize} bytes x {ACTIVATION_COPIES.get(config.model, 8)} activation copies of "
                                f"model {config.model!r}, plus {(table + first) / 2**30:.1f} GiB of embedding rows "
                                f"and the first dense layer), more than the {have / 2**30:.1f} GiB {where}; lower it "
                                f"to {int(fits):,} or less.")
            exc.param = "batch_size"
            raise exc
        if big == "num_fields":  # a file with thousands of field numbers: the deep input is what is large
            exc = TrainingError(f"The 'embedding_dim' parameter {config.embedding_dim} with the dataset's "
                                f"{num_fields:,} fields makes a deep input of {deep_in:,} values per sample that "
                                f"needs about {need / 2**30:.1f} GiB for model {config.model!r} (the first dense "
                                f"layer and a batch of {max(config.batch_size, eval_rows):,}), more than the "
                                f"{have / 2**30:.1f} GiB {where}; re-import with fewer fields (libffm's field "
                                f"numbers name fields), or lower it or the batch size.")
            exc.param = "embedding_dim"
            raise exc
        exc = TrainingError(f"The 'embedding_dim' parameter {config.embedding_dim} needs about {need / 2**30:.1f} GiB "
                            f"({rows:,} rows held here x {config.embedding_dim + 1} values x {itemsize} bytes"
                            f"{' x 2 (Adagrad state)' if copies == 2 else ''}, plus the first dense layer and a "
                            f"batch's activations), more than the {have / 2**30:.1f} GiB {where}; {fix}.")
        exc.param = "embedding_dim"
        raise exc


class _timed:
    """Add the time inside the block to ``acc["train_seconds"]``."""

    def __init__(self, acc):
        self.acc = acc

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.acc["train_seconds"] += time.perf_counter() - self.t0


def _new_acc() -> dict[str, Any]:
    """An epoch's accumulators: the loss summed over this process's samples and their count (``local_samples``),
    the global samples and steps, the training seconds."""
    return {"loss_sum": 0.0, "samples": 0, "steps": 0, "train_seconds": 0.0, "local_samples": 0}


def _status(acc) -> str:
    """The progress bar's words: the running loss of this process's samples (the epoch record's sums every
    process's; a collective each step would cost more than the bar is worth) and the global rate."""
    loss = acc["loss_sum"] / acc["local_samples"] if acc["local_samples"] else float("nan")
    rate = acc["samples"] / acc["train_seconds"] if acc["train_seconds"] else 0.0
    return f"loss {loss:.4f}  {rate:,.0f} samples/s"
