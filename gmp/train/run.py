"""``gmp train`` as a library call: validate every input, build the engine and
trainer, train, log, checkpoint.

Everything that can be refused is refused before the first step, with one
line: an unreadable or corrupt dataset, a manifest for another dataset (hash
mismatch), a worker count that does not match the manifest (``--workers`` or
the torchrun world size), an unknown model / optimizer / schedule.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import uuid
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from ..datasets.format import load_dataset
from ..comm.local import LocalEngine
from ..errors import TrainingError, raise_terminated
from ..placement import Placement
from ..params import check_int
from ..manifest import load_manifest
from .checkpoint import placement_sha256, save_checkpoint
from .checkpoint_dir import (check_checkpoint_dir, check_checkpoint_room, check_shared_directory, lock_checkpoint_dir,
                             removed_if_left_empty)
from .config import TrainConfig, comparable_settings
from .data import TrainData
from .json_log import check_log_file, end_torn_line, last_run_id, settings_record, trim_log
from . import host_memory
from .migrate import resume_training
from .records import json_line
from .trainer import Trainer

log = logging.getLogger("gmp.train")
ENGINES = ("local", "distributed")


def load_placement(dataset, manifest: str | os.PathLike | None, workers: int | None) -> Placement:
    """The manifest's placement (validated against the dataset), or everything on one worker."""
    return open_placement(dataset, manifest, workers)[0]


class OpenedPlacement(NamedTuple):
    placement: Placement
    created: np.ndarray  # int64: ``history.created_rows``, old ids a migration creates at their initial values
    placed_from: str | None  # the placement sha256 a ``--from-manifest`` manifest was placed from, else None


def open_placement(dataset, manifest: str | os.PathLike | None, workers: int | None) -> OpenedPlacement:
    """:func:`load_placement`, the manifest's created rows (empty without a manifest or a history) and the
    placement it was placed from (``partitioner.info.comparison.old_placement_sha256``; None unless made by
    ``gmp partition --from-manifest``)."""
    none = np.zeros(0, dtype=np.int64)
    if workers is not None:
        check_int("workers", workers, minimum=1, error=TrainingError)
    if manifest is None:
        if workers not in (None, 1):
            raise TrainingError(f"`workers` {workers} needs a `manifest` placing rows on {workers} workers "
                                f"(make one with 'gmp partition'); without a manifest training uses 1 worker.")
        zeros_s = np.zeros(dataset.num_samples, dtype=np.int32)
        return OpenedPlacement(Placement.edge_cut(1, zeros_s, np.zeros(dataset.num_embeddings, dtype=np.int32),
                                                  method="single"), none, None)
    man = load_manifest(manifest, dataset=dataset)
    placement = man.placement
    if workers is not None and workers != placement.num_workers:
        raise TrainingError(f"`workers` {workers} does not match the manifest {manifest}, which places rows on "
                            f"{placement.num_workers} workers; pass `workers` {placement.num_workers} or another manifest.")
    comparison = (placement.info or {}).get("comparison") or {}  # recorded by gmp partition --from-manifest
    return OpenedPlacement(placement, none if man.history is None else man.history.created,
                           comparison.get("old_placement_sha256"))


def check_migration_source(migration: dict[str, Any], placed_from: str | None, manifest) -> None:
    """Add a ``warning`` to a migration record whose checkpoint was trained on another placement than the one
    the manifest was placed from (``--from-manifest``): its rows then moved as from the checkpoint's placement,
    not within the budget the manifest was made with (another chain's checkpoint, or a day skipped)."""
    if placed_from is None or migration["from_placement_sha256"] == placed_from:
        return
    migration["warning"] = (f"the checkpoint was trained on placement {migration['from_placement_sha256'][:12]}, but "
                            f"{manifest} was placed from {placed_from[:12]}: {migration['moved_rows']['total']:,} "
                            f"rows moved from the checkpoint's placement, not within the manifest's migration budget")
    log.warning("%s", migration["warning"])


def check_output_dir(name: str, path: str | os.PathLike | None) -> None:
    """Refuse, before training, a directory parameter that names an existing file."""
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        exc = TrainingError(f"The '{name}' parameter must be a directory (created if missing), got the existing "
                            f"file {path}; pass a directory path.")
        exc.param = name
        raise exc


def new_run_id() -> str:
    """A short random id that every JSON log line of one run carries (``"run"``)."""
    return uuid.uuid4().hex[:12]


def deterministic_on_cuda() -> bool:
    """Turn on torch's deterministic algorithms when CUDA is present (``GMP_DETERMINISTIC=0``: leave them off).

    On a GPU the scatter-adds of a step (the gradient sums at the primaries, the backward of the
    row gather, field pooling) run on atomics whose order changes from run to run, so a resumed
    run would differ from an uninterrupted one in the last bits and two runs with one seed would
    not agree. The deterministic kernels sort instead (measured cost in docs/train.md). cuBLAS
    needs ``CUBLAS_WORKSPACE_CONFIG`` for the same guarantee; it is set unless the user set it.
    On CPU the kernels are deterministic already and nothing changes. Returns whether it is on."""
    if not torch.cuda.is_available() or os.environ.get("GMP_DETERMINISTIC", "1") == "0":
        return False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    return True


def torch_threads() -> int | None:
    """``GMP_TORCH_THREADS`` (torch's intra-op threads) if set, checked: a positive integer (``-3`` was torch's
    RuntimeError at start)."""
    text = os.environ.get("GMP_TORCH_THREADS", "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= 1 << 16:
        raise TrainingError(f"GMP_TORCH_THREADS must be a positive integer (torch's threads per process, at most "
                            f"{1 << 16}), got {text!r}; set it to a number such as 4, or unset it.")
    return int(text)


def make_engine(name: str, num_workers: int, *, collective_timeout: float | None = None):
    deterministic_on_cuda()
    if os.environ.get("GMP_TORCH_THREADS"):
        torch.set_num_threads(torch_threads())
    if name == "local":
        return LocalEngine(num_workers)
    if name == "distributed":
        from ..comm.distributed import DistributedEngine, world_from_env  # loads torch.distributed

        rank, world, _ = world_from_env()
        if world != num_workers:
            exc = TrainingError(f"torchrun started {world} processes but the manifest places rows on {num_workers} "
                                f"workers; start {num_workers} in all (torchrun --nnodes x --nproc-per-node = "
                                f"{num_workers}).")
            # every rank finds it and the CLI says it once per machine, by whichever rank is first (not
            # rank 0 alone: torchrun stops the others when one exits, so rank 0 could be stopped unheard)
            raise exc
        if "OMP_NUM_THREADS" not in os.environ and not os.environ.get("GMP_TORCH_THREADS"):
            # share the machine's cores between the processes of this node: oversubscribed
            # intra-op thread pools make small kernels (index_add) orders of magnitude slower
            per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // per_node))
        return DistributedEngine(timeout_s=collective_timeout)
    raise TrainingError(f"The 'engine' parameter must be one of {list(ENGINES)}, got {name!r}.")


def check_arguments(config: TrainConfig, checkpoint_dir: str | os.PathLike | None, *, resume: bool,
                    log_json: str | os.PathLike | None, collective_timeout: float | None) -> None:
    """Everything :func:`train` refuses before it opens the data: one line each."""
    if not isinstance(config, TrainConfig):
        raise TrainingError(f"The 'config' parameter must be a TrainConfig, got {type(config).__name__}.")
    if resume and checkpoint_dir is None:
        raise TrainingError("`resume=True` needs `checkpoint_dir` (where the interrupted run saved its checkpoints).")
    check_output_dir("checkpoint_dir", checkpoint_dir)
    if collective_timeout is not None:  # the local engine has no collectives, but a bad value is still an error
        from ..comm.distributed import collective_timeout as check_timeout  # noqa: PLC0415 - the one rule

        check_timeout(collective_timeout)
    torch_threads()
    host_memory.wanted()  # GMP_KEEP_HOST_MEMORY checked before the data is opened
    if checkpoint_dir is not None:
        check_checkpoint_dir(checkpoint_dir, resume=resume)
    if log_json is not None:
        check_log_file(log_json, resume=resume)


def open_log(log_json: str | os.PathLike | None, trainer: Trainer, *, continued: bool):
    """Name the run (:meth:`Trainer.name_run`) and open its JSON log for appending (None: no log, or not the main
    process). A ``continued`` run (a plain resume) keeps its checkpoint's run id (the log's last run for a
    checkpoint saved before gmp recorded it) and loses its lines past the checkpoint."""
    if trainer.run_name() is None:  # a new run, a migration, or a checkpoint saved before it named its run
        trainer.name_run((last_run_id(log_json) if continued and log_json is not None else None) or new_run_id())
    if log_json is None or not trainer.context().engine.is_main:
        return None
    if continued:
        trim_log(log_json, *trainer.position(), run_id=trainer.run_name())  # drops a torn last line too
    else:
        end_torn_line(log_json)
    return open(log_json, "a", encoding="utf-8")  # a log holds many runs, each line names its run


class SignalStop:
    """Ctrl-C stops the trainer at the next step (which checkpoints); so does SIGTERM under torchrun, which
    turns a terminal's Ctrl-C into SIGTERM for its workers (and kills them 30 s later). :func:`train`
    holds it from its process group's start (:meth:`start`) until the group is closed (:meth:`end`),
    past the last step: a signal while the run ends only asks for a stop already under way.

    Under torchrun SIGTERM is held from the start: one that comes before the trainer exists (while the ranks
    check each other and the trainer is built) stops the trainer at its first step (:meth:`attach`).
    torchrun terminates every other rank as soon as one exits, and a rank 0 that was about to print the
    one line an error every rank found gets (a peer died, the ranks were started with other flags) was
    killed before it did. For the same reason a run that ends with an error leaves SIGTERM ignored: that
    process is ending, and torchrun's SIGKILL 30 s later still bounds it. A run that ends well restores
    the handlers. A signal the process was started ignoring (SIGINT under ``nohup`` or ``cmd &``) stays
    ignored, as Python itself leaves it. A local run holds SIGTERM only where the program asked SIGTERM to
    end it as Ctrl-C does (:func:`gmp.errors.raise_terminated`, ``gmp``'s commands): a job scheduler's stop
    then checkpoints too; a library caller's SIGTERM is left as it is."""

    def __init__(self, *, distributed: bool) -> None:
        self.distributed = distributed
        self.trainer: Trainer | None = None
        self.pending = False  # a signal came before the trainer did
        self.old: dict[int, Any] = {}

    def start(self) -> None:
        if self.distributed or signal.getsignal(signal.SIGTERM) is raise_terminated:
            self._install(signal.SIGTERM)

    def attach(self, trainer: Trainer) -> None:
        self.trainer = trainer
        if trainer.context().engine.is_main or self.distributed:
            self._install(signal.SIGINT)
        if self.pending:
            trainer.request_stop()

    def _install(self, sig: int) -> None:
        if signal.getsignal(sig) is signal.SIG_IGN:  # ignored by who started us (nohup, `cmd &`): stays so
            return
        try:
            self.old[sig] = signal.signal(sig, self._on_signal)
        except ValueError:  # not in the main thread
            pass

    def _on_signal(self, *_) -> None:
        if self.trainer is None:
            self.pending = True
        else:
            self.trainer.request_stop()

    def end(self, *, failed: bool) -> None:
        for sig, handler in self.old.items():
            signal.signal(sig, signal.SIG_IGN if failed and self.distributed and sig == signal.SIGTERM else handler)
        self.old.clear()


def check_same_launch(eng, dataset_sha256: str, placement_sha: str, config: TrainConfig, resume: bool, *,
                      log_json: str | os.PathLike | None = None) -> None:
    """Collective: every process trains the same dataset and placement with the same settings (the
    ``--tier-dir`` aside, a machine's own path). A launch that gave the ranks different flags trained
    on silently with mixed settings, or aborted in gloo; each rank raises this one line (rank 0 says it),
    which names the first setting that differs. A JSON log given to some ranks only is refused too (rank 0
    writes it: given to another rank alone it was silently not written); its path may differ (a machine's
    own), and so may nothing else."""
    settings = comparable_settings(config.to_json())
    if settings.get("tiers"):
        settings["tiers"] = {k: v for k, v in settings["tiers"].items() if k != "tier_dir"}
    fingerprint = {"dataset": dataset_sha256, "manifest": placement_sha, "resume": bool(resume),
                   "log_json": log_json is not None,
                   "collective_timeout": getattr(eng, "timeout_s", None), **settings}
    differ, said = eng.settings_unlike_rank0(fingerprint)
    if differ:
        exc = TrainingError(f"every process must get the same dataset, manifest and training flags, got rank(s) "
                            f"{', '.join(map(str, differ[:8]))} differing from rank 0 ({said}); launch every rank "
                            f"with the same command.")
        exc.rank = eng.local_workers[0]
        raise exc


def train(dataset: str | os.PathLike, manifest: str | os.PathLike | None, config: TrainConfig, *,
          engine: str = "local", workers: int | None = None, checkpoint_dir: str | os.PathLike | None = None,
          resume: bool = False, log_json: str | os.PathLike | None = None,
          on_record: Callable[[dict[str, Any]], None] | None = None,
          stop_after_steps: int | None = None, verify_hash: bool | None = None,
          collective_timeout: float | None = None, settings: dict[str, Any] | None = None,
          on_start: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Train and return the epoch records (see :mod:`gmp.train.records` for the keys); a resumed
    run whose checkpoint already finished ``config.epochs`` returns ``[]``. A resume that migrated
    rows to a new day's placement (:mod:`gmp.train.migrate`) returns its ``"kind": "migration"``
    record first, the line the log gets.

    ``collective_timeout`` (seconds; default ``GMP_COLLECTIVE_TIMEOUT`` or 600) bounds how long a
    collective of the distributed engine waits for the slowest rank.
    ``settings`` (the resolved request with where each value came from: :meth:`gmp.specs.TrainSpec.to_json`)
    goes to the log as the run's first line, a ``"kind": "settings"`` record at the position the run
    starts from (:func:`settings_record`); it is not returned.
    ``verify_hash`` recomputes the dataset's content hash and checks its arrays (default: on unless
    ``GMP_NO_VERIFY=1`` is set, as every command that opens a dataset).
    ``stop_after_steps`` simulates an interrupt after that many steps (a
    checkpoint is written when ``checkpoint_dir`` is set) and raises
    :class:`TrainingError` like a real interrupt does.
    ``on_start()`` is called on the main process once the inputs are accepted (the dataset, the manifest
    with its arrays, a checkpoint to resume from), before the first record: a command's lines about the run
    go there, so that a refusal of the inputs is the only line.

    A run that fails before its first checkpoint leaves no ``checkpoint_dir`` it created (nor the missing
    parents it made for it); one that existed before is never removed.
    """
    with removed_if_left_empty(checkpoint_dir):
        return _train(dataset, manifest, config, engine=engine, workers=workers, checkpoint_dir=checkpoint_dir,
                      resume=resume, log_json=log_json, on_record=on_record, stop_after_steps=stop_after_steps,
                      verify_hash=verify_hash, collective_timeout=collective_timeout, settings=settings,
                      on_start=on_start)


def _train(dataset, manifest, config: TrainConfig, *, engine: str, workers: int | None, checkpoint_dir, resume: bool,
           log_json, on_record, stop_after_steps: int | None, verify_hash: bool | None,
           collective_timeout: float | None, settings: dict[str, Any] | None,
           on_start: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """:func:`train` itself, within the clean-up of the checkpoint directory it may create."""
    check_arguments(config, checkpoint_dir, resume=resume, log_json=log_json, collective_timeout=collective_timeout)
    ds = load_dataset(dataset, verify=verify_hash)
    placement, created, placed_from = open_placement(ds, manifest, workers)  # validated by load_manifest, Trainer
    data = TrainData(ds)
    eng = make_engine(engine, placement.num_workers, collective_timeout=collective_timeout)
    trainer, alone, lock = None, False, None  # alone: an error of this process only (not one every rank raises)
    signals, failed = SignalStop(distributed=engine == "distributed"), True
    signals.start()
    try:
        lock = lock_checkpoint_dir(eng, checkpoint_dir)  # one run at a time saves and prunes there
        psha = placement_sha256(placement)
        check_same_launch(eng, ds.sha256, psha, config, resume, log_json=log_json)
        check_shared_directory(eng, checkpoint_dir)
        trainer = Trainer(data, placement, config, eng)
        signals.attach(trainer)
        migration = None
        if resume:  # the checkpoint's dataset, or an ancestor's (rows migrate: gmp.train.migrate)
            migration = resume_training(trainer, checkpoint_dir, dataset=ds, placement_sha=psha, created=created)
            if migration is not None:
                check_migration_source(migration, placed_from, manifest)
        if checkpoint_dir is not None:  # before the first epoch, not after it
            check_checkpoint_room(trainer, checkpoint_dir, saves=config.epochs - trainer.position()[0])
        log_file = open_log(log_json, trainer, continued=resume and migration is None)
        run_id = trainer.run_name()

        def record(rec: dict[str, Any]) -> dict[str, Any]:
            rec = {**rec, "run": run_id, "engine": engine, "workers": placement.num_workers,
                   "schedule": config.schedule, "staleness": "inf" if math.isinf(config.staleness) else config.staleness}
            if log_file is not None:
                try:
                    log_file.write(json_line(rec) + "\n")
                    log_file.flush()
                except OSError as exc:  # a file object's error names no file: a full disk said "a file"
                    raise OSError(exc.errno, exc.strerror, str(log_json)) from None
            if on_record is not None and eng.is_main:
                on_record(rec)
            return rec

        if log_file is not None and settings is not None:
            try:
                log_file.write(json_line(settings_record(settings, *trainer.position(), run_id=run_id)) + "\n")
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(log_json)) from None
        if on_start is not None and eng.is_main:
            on_start()
        first = [] if migration is None else [record({"kind": "migration", "epoch": 0, "step": 0, **migration})]

        def checkpoint(t: Trainer) -> None:
            if checkpoint_dir is not None:
                save_checkpoint(t, checkpoint_dir, dataset_sha256=ds.sha256, placement_sha=psha)

        devices = [eng.device_for(w) for w in eng.local_workers]
        try:  # a CPU step's freed pages stay for the next step while the epochs run
            with host_memory.kept_between_steps(devices) as kept:
                if kept:
                    log.info("keeping freed host memory for the next steps (GMP_KEEP_HOST_MEMORY=0: glibc's default)")
                records = trainer.fit(on_record=record, on_epoch_end=checkpoint, stop_after_steps=stop_after_steps,
                                      flush_at_epoch_end=checkpoint_dir is not None)
        finally:
            if log_file is not None:
                log_file.close()
        if trainer.was_interrupted():
            epoch, step = trainer.position()
            where = f"epoch {epoch + 1} step {step}"
            if checkpoint_dir is None:
                exc = TrainingError(f"interrupted at {where}; no `checkpoint_dir`, so nothing was saved.")
            else:
                checkpoint(trainer)
                exc = TrainingError(f"interrupted at {where}; checkpoint saved in {checkpoint_dir}, "
                                    f"continue with the same command plus `resume=True`.")
            exc.rank = getattr(eng, "rank", 0)  # every rank stops here; the CLI lets rank 0 say it
            raise exc
        failed = False
        return first + records
    except BaseException as exc:
        alone = not (hasattr(exc, "rank") or getattr(exc, "together", False))
        raise
    finally:
        close_run(trainer, lock, eng, signals, clean=not alone, failed=failed)


def close_run(trainer: Trainer | None, lock, eng, signals: SignalStop, *, clean: bool, failed: bool) -> None:
    """The end of :func:`train`: a disk tier's files, the checkpoint directory's lock, the process group
    (``clean``: see the engine's ``close``), then the signal handlers (:class:`SignalStop`)."""
    try:
        if trainer is not None:
            trainer.close()
        if lock is not None:
            lock.release()
        eng.close(clean=clean)
    finally:
        signals.end(failed=failed)
