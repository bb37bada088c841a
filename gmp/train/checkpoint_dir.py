"""The checkpoint directory (``--checkpoint-dir``): its names, the ``latest`` link, pruning, what may be
in it (:func:`check_checkpoint_dir`, before training) and the lock one run holds on it
(:func:`lock_checkpoint_dir`). Layout and crash-safety: :mod:`gmp.train.checkpoint`."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from pathlib import Path

import numpy as np
import torch

from ..errors import TrainingError

LATEST = "latest"
HEADER = "checkpoint.json"
#: the lock a run holds on its checkpoint directory while it trains (rank 0 for all the ranks of a run)
LOCK = ".gmp-lock"
#: a checkpoint's directory: ``ckpt-EPOCH-STEP`` (``-K`` when the name was taken)
CKPT_DIR = re.compile(r"ckpt-(\d+)-(\d+)(?:-(\d+))?$")


def free_name(directory: Path, epoch: int, step: int) -> Path:
    base = f"ckpt-{epoch:05d}-{step:08d}"
    path, k = directory / base, 0
    while path.exists() or path.is_symlink():
        k += 1
        path = directory / f"{base}-{k}"
    return path


def link_target(directory: Path) -> str | None:
    latest = directory / LATEST
    return os.readlink(latest) if latest.is_symlink() else None


def point_latest(directory: Path, name: str) -> None:
    """Replace ``latest`` by a link to ``name`` in one rename (atomic on POSIX filesystems)."""
    latest = directory / LATEST
    if latest.is_dir() and not latest.is_symlink():
        shutil.rmtree(latest)  # a schema-1 checkpoint (refused on resume); this run replaces it
    link = directory / f".latest-{os.getpid()}"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(name, link)
    os.replace(link, latest)


#: temporaries of a save (``.tmp-EPOCH-STEP``, ``.latest-PID``): what a killed run may leave, and pruning removes
TEMP = re.compile(r"\.tmp-\d+-\d+|\.latest-\d+")


def check_checkpoint_dir(directory: str | os.PathLike, *, resume: bool) -> None:
    """Refuse, before training, a ``--checkpoint-dir`` whose entries saving would delete: anything that is not
    a gmp checkpoint, its ``latest`` link or a save's temporary, and (without ``resume``) another run's
    checkpoints, which the new run's pruning would replace."""
    from .._io import KIND_NAMES, enclosing_output

    directory = Path(directory)
    inside = enclosing_output(directory)
    if inside is not None:
        raise TrainingError(f"`checkpoint_dir` {directory} is inside {KIND_NAMES[inside[0]]} ({inside[1]}), whose "
                            f"directory holds only its own files; choose a directory outside it.")
    if not directory.is_dir():
        _check_writable(directory)  # the first save creates it: fail now, not after an epoch
        return
    foreign, saved = [], []
    for p in sorted(directory.iterdir()):
        if p.name == LOCK and p.is_file() and not p.is_symlink():
            continue
        if p.name == LATEST and (p.is_symlink() or (p / HEADER).is_file()):
            saved.append(p.name)
        elif CKPT_DIR.match(p.name) and p.is_dir() and not p.is_symlink() and (p / HEADER).is_file():
            saved.append(p.name)
        elif not TEMP.fullmatch(p.name):
            foreign.append(p.name)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise TrainingError(f"`checkpoint_dir` {directory} holds {shown}, which are not gmp checkpoints; saving "
                            f"removes old entries there: choose an empty or new directory.")
    if saved and not resume:
        raise TrainingError(f"`checkpoint_dir` {directory} holds the checkpoints of an earlier run; continue it "
                            f"with `resume=True`, or choose another directory (this run would replace them).")
    _check_writable(directory)


def lock_checkpoint_dir(engine, directory: str | os.PathLike | None):
    """Collective: lock ``directory`` for this run, or raise one line on every process when another run
    holds it (two runs saving into one directory prune each other's checkpoints). The lock is per run: rank 0
    (the process that commits and prunes) holds ``directory/.gmp-lock`` for all ranks. Returns the lock
    (None on other ranks, or without ``directory``); the caller releases it when training ends. A killed
    run's lock is released by the kernel (``flock``), so it never blocks the next run."""
    from .._io import acquire_lock
    from ..errors import GmpError

    if directory is None:
        return None
    directory = Path(directory)
    lock, failed = None, None
    if engine.is_main:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            lock = acquire_lock(directory / LOCK, busy=f"--checkpoint-dir {directory}")
        except GmpError as exc:
            failed = TrainingError(str(exc))
        except OSError as exc:
            failed = TrainingError(f"cannot lock {directory / LOCK}: {exc.strerror or exc}; check `checkpoint_dir` "
                                   f"and its permissions.")
    raise_on_every_rank(engine, failed, f"rank 0 could not lock `checkpoint_dir` {directory} (its error says why).")
    return lock


def raise_on_every_rank(engine, failed: TrainingError | None, others: str) -> None:
    """Collective: when rank 0 failed (``failed``: its error; None elsewhere), every process raises, rank 0
    its error and the others ``others``; rank 0 says it for all."""
    if engine.sum_across(np.array([0.0 if failed is None else 1.0]))[0]:
        if failed is None:
            failed = TrainingError(others)
        failed.rank = getattr(engine, "rank", 0)  # rank 0 says it for the others
        failed.together = True  # every process raises here
        raise failed


@contextlib.contextmanager
def removed_if_left_empty(directory: str | os.PathLike | None):
    """Within the block, a run may create ``directory`` (and its missing parents); when the block raises, those
    it created are removed again if still empty (innermost first), so a run that fails before its first
    checkpoint leaves no empty directory behind. A directory that existed when the block began is never
    removed."""
    made = []
    if directory is not None:
        path = Path(os.path.abspath(directory))
        while not path.exists() and not path.is_symlink() and path != path.parent:
            made.append(path)
            path = path.parent
    try:
        yield
    except BaseException:
        for d in made:
            with contextlib.suppress(OSError):  # not empty (a checkpoint, another writer's file): kept
                d.rmdir()
        raise


def _check_writable(directory: Path) -> None:
    """Create ``directory`` (as the first save would) and a file in it, removed at once (named like a save's
    temporary, which pruning removes should this process die in between)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".latest-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise TrainingError(f"cannot write a checkpoint in {directory}: {exc.strerror or exc}; check "
                            f"`checkpoint_dir` and its permissions.") from None


#: bytes of a checkpoint file beyond its arrays (torch's zip entries and pickled structure), rounded up
FILE_OVERHEAD = 8192


def checkpoint_bytes(trainer) -> int:
    """About the bytes of one checkpoint of ``trainer``: per worker its rows (value and optimizer state, in
    the checkpoint's dtype) and per row its id, clock and flag (the workers of other processes taken as the
    local ones' mean: they hold about as many rows); the dense model twice (its weights and its optimizer's
    state, ``trainer.pt``); and per file a fixed overhead."""
    ctx = trainer.context()
    local = 0
    for store in ctx.stores:
        itemsize = 4 if store.dtype == torch.float32 else 8
        local += int(store.ids.size) * (store.primary_width * itemsize + 8 + 8 + 1) + 2 * FILE_OVERHEAD
    dense = sum(p.numel() * p.element_size() for p in ctx.model.parameters())
    return local * ctx.num_workers // max(len(ctx.stores), 1) + 2 * dense + FILE_OVERHEAD


def check_checkpoint_room(trainer, directory: str | os.PathLike, *, saves: int) -> None:
    """Collective, before training: refuse (one line on every process) a run whose checkpoints cannot fit in
    ``directory``'s free space, instead of failing after its first epoch; temporaries a killed or failed save
    left there are removed first (this run holds the directory's lock). ``saves``: the checkpoints this run
    writes at most; up to three are on disk at once (the new one while the latest and the previous one are
    kept), those already there count."""
    from .._io import check_disk

    engine = trainer.context().engine
    directory = Path(directory)
    failed = None
    if engine.is_main and saves > 0:
        remove_temporaries(directory)
        have = sum(1 for p in directory.iterdir() if CKPT_DIR.match(p.name) and (p / HEADER).is_file()) \
            if directory.is_dir() else 0
        each = checkpoint_bytes(trainer)
        count = max(1, min(have + saves, 3) - have)
        try:
            check_disk(directory, count * each, error=TrainingError,
                       what=f"{'a checkpoint' if count == 1 else f'{count} checkpoints'} of this run (about "
                            f"{size_text(each)} each)",
                       fix="free space or choose `checkpoint_dir` on a larger device.")
        except TrainingError as exc:
            failed = exc
    raise_on_every_rank(engine, failed, f"rank 0 refused `checkpoint_dir` {directory} (its error says why).")


def size_text(n: float) -> str:
    """``n`` bytes in GiB, MiB below 1 GiB, bytes below 1 MiB."""
    if n >= 2**30:
        return f"{n / 2**30:,.1f} GiB"
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{int(n):,} bytes"


def remove_temporaries(directory: Path) -> None:
    """Remove the temporaries (:data:`TEMP`) a killed or failed save left in ``directory`` (main process, under
    the run's lock): an unfinished checkpoint kept a full device full, so the next run failed the same way."""
    if not directory.is_dir():
        return
    for p in directory.iterdir():
        if TEMP.fullmatch(p.name) and not p.name.startswith(f".latest-{os.getpid()}"):
            remove_entry(p)


def remove_entry(p: Path) -> None:
    """Remove a file, a link or a directory tree of a checkpoint directory (gone already: nothing)."""
    if p.is_symlink() or p.is_file():
        p.unlink(missing_ok=True)
    else:
        shutil.rmtree(p, ignore_errors=True)


def prune(directory: Path, *, keep: set[str | None]) -> None:
    """Remove checkpoints other than ``keep`` and temporaries left by killed runs (main process only)."""
    for p in directory.iterdir():
        if TEMP.fullmatch(p.name) or (CKPT_DIR.match(p.name) and p.name not in keep):
            remove_entry(p)


def check_shared_directory(engine, directory: str | os.PathLike | None) -> None:
    """Collective, before training: every process was given a checkpoint directory or none, and every
    process sees, in its own, the probe file rank 0 writes in its. A rank given another directory passed
    the flag comparison and failed at the first save ("No such file or directory"), after a full epoch.

    Rank 0 creates the directory if needed (and removes it again, empty, on a refusal); the probe is named
    by a token rank 0 draws, so concurrent launches do not see each other's.
    """
    given = directory is not None
    differ = engine.ranks_unlike_rank0(given)
    if differ:
        exc = TrainingError(f"The 'checkpoint_dir' parameter must be given to every rank or to none; rank(s) "
                            f"{', '.join(map(str, differ[:8]))} differ from rank 0.")
        exc.param = "checkpoint_dir"
        exc.rank = engine.local_workers[0]
        raise exc
    if not given or engine.world_size == 1:
        return
    directory = Path(directory)
    token = engine.broadcast_object(uuid.uuid4().hex if engine.is_main else None)
    probe = directory / f".gmp-probe-{token}"
    created = False
    if engine.is_main:
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        probe.touch()
    engine.barrier()
    differ = engine.ranks_unlike_rank0(probe.exists())
    engine.barrier()
    if engine.is_main:
        probe.unlink(missing_ok=True)
        if differ and created:
            with contextlib.suppress(OSError):
                directory.rmdir()
    if differ:
        exc = TrainingError(f"The 'checkpoint_dir' parameter of rank(s) {', '.join(map(str, differ[:8]))} is not "
                            f"the directory rank 0 writes in ({directory} on this rank): it must be one directory "
                            f"that every machine shares, where rank 0 collects every worker's files; give every "
                            f"rank the same shared directory.")
        exc.param = "checkpoint_dir"
        exc.rank = engine.local_workers[0]
        raise exc
