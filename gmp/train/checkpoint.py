"""Checkpoints: save after every epoch (and on interrupt), resume exactly, never run code.

Layout (``--checkpoint-dir C``)::

    C/
    ├── latest -> ckpt-00002-00000000          symbolic link, replaced atomically
    ├── ckpt-00002-00000000/                   the newest complete checkpoint
    │   ├── checkpoint.json     format "gmp.checkpoint", schema_version, position, config,
    │   │                       fingerprints, and the size of every file below (written last)
    │   ├── trainer.pt          dense model + dense optimizer state, epoch accumulators,
    │   │                       history, schedule state, torch/numpy RNG states
    │   ├── worker-00000.pt     one per worker: its other rows (secondaries, cached copies),
    │   │                       clocks, the copies' Adagrad state, its counters and byte
    │   │                       counters for the running epoch, the shape of its rows file
    │   └── worker-00000.rows   one per worker: its primaries' [value | optimizer state] rows,
    │                           raw (:mod:`gmp.train.checkpoint_rows`), streamed: a tiered
    │                           table larger than RAM is never in memory at once
    └── ckpt-00001-00000000/                   the previous one, kept as a fallback

Example ``checkpoint.json``::

    {"format": "gmp.checkpoint", "schema_version": 3, "epoch": 1, "step": 0,
     "num_workers": 4, "dataset_sha256": "9f2c...", "placement_sha256": "51ab...",
     "config": {"model": "wdl", "embedding_dim": 16, ...}, "created": "2026-11-23T01:00:00+00:00",
     "files": {"trainer.pt": 15283, "worker-00000.pt": 2958, "worker-00000.rows": 3264, ...}}

``epoch``/``step`` is the next step to run (0-based epoch).

**Saving is crash-safe.** Every worker writes its own file into a hidden
temporary directory (``.tmp-E-S``); after a barrier the main process writes
``checkpoint.json`` (so a directory with it is complete), renames the
directory to ``ckpt-E-S`` and then replaces the ``latest`` link in one
``rename`` of a new link over the old one. A kill at any point leaves
``latest`` pointing to a complete checkpoint (the new or the previous one).
Only then are older checkpoints and temporaries of killed runs removed; the
previous checkpoint is kept as a fallback. A full device removes the
temporary and is one line; before the first epoch a run removes the temporaries
of killed saves and checks the free space for its checkpoints
(:func:`gmp.train.checkpoint_dir.check_checkpoint_room`). Under ``torchrun`` across machines ``C`` must be
on a shared filesystem.

**One run at a time.** Rank 0 holds ``C/.gmp-lock`` (``flock``) for the whole run, for all its
ranks (:func:`gmp.train.checkpoint_dir.lock_checkpoint_dir`): a second run given the same ``C``
is refused in one line instead of pruning the first one's checkpoints.

**Resuming** reads ``latest``; if it is missing or incomplete (a file absent
or of another size than ``checkpoint.json`` records) it falls back to the
newest complete ``ckpt-*`` directory and says so (a warning on stderr). The
header is validated against the schema, then the dataset, the placement and
every setting that changes the trajectory must be the same (only ``epochs``
and ``log_every`` may differ), and the position must lie inside the epoch;
anything else is refused with a one-line error.

**Nothing is unpickled.** Files are read with ``torch.load(weights_only=True)``,
which builds only tensors, numbers, strings and containers: numpy arrays (RNG
state, counters) are stored as byte tensors with their dtype and shape
(:func:`to_safe` / :func:`from_safe`). Checkpoints of schema 1 (read with
``weights_only=False``, and made before the epoch order changed) are refused.

**Versions.** Schema 3 moved each worker's primaries out of its ``.pt`` file into a raw
``worker-NNNNN.rows`` file (streamed in and out). Schema 2 (primaries inside the ``.pt``) is
upgraded on reading, one step (:func:`gmp.train.checkpoint_rows.upgrade_worker_v2`).

**Reading rows by id** (another placement, an export): :func:`read_primary_rows` gives the
values and optimizer state of any global ids from a checkpoint directory, reading only those
rows from each worker's rows file; :func:`open_worker_rows` gives one worker's primaries.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from .._io import header_value, is_full_disk, read_versioned_json, tree_bytes, write_json
from .._version import __version__
from ..errors import GmpError, TrainingError, raised_while
from ..placement import Placement
from ..wording import differing_parts, first_difference
from .checkpoint_safe import first_line, from_safe, refusal_reason, to_safe  # noqa: F401 - re-exported
from .checkpoint_rows import PrimaryRows, rows_name, upgrade_worker_v2, write_primary_rows
from .checkpoint_dir import (CKPT_DIR, HEADER, LATEST, checkpoint_bytes, free_name, link_target, point_latest,
                             prune, size_text)
from .config import comparable_settings

log = logging.getLogger(__name__)

FORMAT = "gmp.checkpoint"
SCHEMA_VERSION = 3
#: settings that may change between the interrupted run and --resume (where the rows live does not
#: change the trajectory: gmp.train.tiers)
MUTABLE = ("epochs", "log_every", "tiers")
_FIX = "start without --resume or point --checkpoint-dir elsewhere."
#: keys every file must hold
TRAINER_KEYS = ("model", "dense_opt", "history", "schedule", "torch_rng", "numpy_rng")
WORKER_KEYS = ("store", "counters", "bytes", "acc")


def placement_sha256(placement: Placement) -> str:
    from .._io import hash_arrays

    return hash_arrays([("sample_worker", placement.sample_worker), ("embedding_primary", placement.embedding_primary),
                        ("secondary_indptr", placement.secondary_indptr),
                        ("secondary_workers", placement.secondary_workers)])


def _save(obj: dict, path: Path) -> int:
    # through a Python file: torch's own writer reports a full device as a RuntimeError ("unexpected pos
    # 704 vs 598"), a traceback naming neither the file nor the cause; this way it is OSError ENOSPC. The
    # zip writer's close, run while that OSError unwinds, raises the RuntimeError again ("during handling"):
    # the OSError behind it is what happened
    try:
        with open(path, "wb") as f:
            torch.save(to_safe(obj), f)
    except RuntimeError as exc:
        cause = raised_while(exc, OSError)
        if cause is None:
            raise
        raise cause from None
    return path.stat().st_size


def _load(path: Path, keys: tuple[str, ...]) -> dict:
    """``torch.load(weights_only=True)`` of one checkpoint file, decoded; one-line errors. The file's zip
    entries are checked against their CRC-32 first: torch reads a damaged tensor without noticing, and the
    damage then surfaced as another error ("holds other rows than the manifest", a loss that is not finite)."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except FileNotFoundError:
        raise TrainingError(f"{path} is missing: the checkpoint is incomplete; {_FIX}") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise TrainingError(f"{path} is not a readable gmp checkpoint file ({first_line(exc)}); {_FIX}") from None
    if damaged is not None:
        raise TrainingError(f"{path} is damaged: its entry {damaged} fails its CRC-32 check; resume from an older "
                            f"checkpoint (move this one aside) or {_FIX}")
    try:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise TrainingError(f"{path} is missing: the checkpoint is incomplete; {_FIX}") from None
    except Exception as exc:  # noqa: BLE001 - UnpicklingError, RuntimeError, EOFError, ...: all mean "corrupt"
        raise TrainingError(f"{path} is not a readable gmp checkpoint file ({refusal_reason(exc)}); {_FIX}") from None
    if not isinstance(obj, dict):
        raise TrainingError(f"{path} holds a {type(obj).__name__}, expected a dict; {_FIX}")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise TrainingError(f"{path} lacks {', '.join(map(repr, missing))}; {_FIX}")
    try:
        return from_safe(obj)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TrainingError(f"{path} holds a malformed array ({first_line(exc)}); {_FIX}") from None


# --------------------------------------------------------------------------- saving
def save_checkpoint(trainer, directory: str | os.PathLike, *, dataset_sha256: str, placement_sha: str) -> Path:
    """Write a new checkpoint and point ``directory/latest`` at it (collective: every process calls it)."""
    ctx = trainer.context()
    engine = ctx.engine
    epoch, step = trainer.position()
    directory = Path(directory)
    tmp = directory / f".tmp-{epoch}-{step}"
    if engine.is_main:
        if directory.exists() and not directory.is_dir():
            raise TrainingError(f"`checkpoint_dir` {directory} exists and is not a directory; choose another.")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
        except OSError as exc:
            raise _write_error(exc, directory) from None
    engine.barrier()
    files: dict[str, int] = {}
    failed = None
    try:
        for li, (w, store) in enumerate(zip(engine.local_workers, ctx.stores)):
            name = f"worker-{w:05d}.pt"
            meta = write_primary_rows(store, tmp / rows_name(w))
            files[meta["file"]] = (tmp / rows_name(w)).stat().st_size
            files[name] = _save({"store": store.state_dict(), "primary_rows": meta, **trainer.worker_state(li)},
                                tmp / name)
    except OSError as exc:
        failed = _write_error(exc, directory, tmp, checkpoint_bytes(trainer))
    # every process learns whether every part was written (a barrier here let rank 0 commit without them)
    _agree(engine, failed, tmp, "could not write its part of the checkpoint")
    if engine.is_main:
        try:
            missing = [w for w in range(ctx.num_workers) if not (tmp / f"worker-{w:05d}.pt").is_file()]
            if missing:
                raise TrainingError(f"the checkpoint files of worker(s) {', '.join(map(str, missing[:5]))} are not "
                                    f"in {tmp}, where rank 0 looks: `checkpoint_dir` must be one directory that "
                                    f"every machine shares; latest still points to the previous checkpoint.")
            files["trainer.pt"] = _save({
                **trainer.state_dict(),
                "torch_rng": torch.random.get_rng_state(), "numpy_rng": np.random.get_state(),
                # the position again, inside the state it belongs to: checkpoint.json's epoch/step are checked
                # against it on resume (an edited step skipped steps silently)
                "position": [int(v) for v in trainer.position()]}, tmp / "trainer.pt")
            for name in os.listdir(tmp):  # the workers of other processes
                files.setdefault(name, (tmp / name).stat().st_size)
            write_json(tmp / HEADER, {  # last: a directory with a header is complete
                "format": FORMAT, "schema_version": SCHEMA_VERSION, "gmp_version": __version__,
                "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "epoch": epoch, "step": step, "num_workers": ctx.num_workers,
                "dataset_sha256": dataset_sha256, "placement_sha256": placement_sha,
                "config": trainer.settings().to_json(), "files": dict(sorted(files.items())),
                **({"run": trainer.run_name()} if trainer.run_name() is not None else {})})
            final = free_name(directory, epoch, step)
            os.rename(tmp, final)
            previous = link_target(directory)
            point_latest(directory, final.name)
        except (OSError, GmpError) as exc:
            failed = exc if isinstance(exc, GmpError) else _write_error(exc, directory, tmp,
                                                                          checkpoint_bytes(trainer))
        else:
            prune(directory, keep={final.name, previous})
    _agree(engine, failed, tmp, "could not commit the checkpoint")
    return directory / LATEST


def _agree(engine, failed: GmpError | None, tmp: Path | None, what: str) -> None:
    """Collective: raise on every process when one failed (``failed``: its error, which it raises; the
    others raise one line that rank 0 prints), after rank 0 removed the unfinished ``tmp``; ``latest``
    is untouched."""
    if not engine.sum_across(np.array([0.0 if failed is None else 1.0]))[0]:
        return
    if engine.is_main and tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    if failed is None:
        failed = TrainingError(f"another process {what}; latest still points to the previous checkpoint (its own "
                               f"error says why).")
        failed.rank = getattr(engine, "rank", 0)  # rank 0 says it for the others
    failed.together = True  # every process raises here: they close together (gmp.train.run)
    raise failed


def _write_error(exc: OSError, directory: Path, tmp: Path | None = None, need: int | None = None) -> GmpError:
    """The one line for a save that failed writing (``tmp``: the unfinished checkpoint, removed after this;
    ``need``: about the bytes of one checkpoint)."""
    if is_full_disk(exc):
        written = tree_bytes(tmp) if tmp is not None and tmp.is_dir() else None
        try:
            free = shutil.disk_usage(directory).free + (written or 0)  # once the unfinished one is removed
            room = f"{size_text(free)} free"
        except OSError:
            room = "free space unknown"
        size = f"a checkpoint of this run needs about {size_text(need)}, " if need else ""
        return TrainingError(f"no space left on the device while writing a checkpoint in {directory} "
                             f"({exc.strerror}): {size}{room} there (the unfinished one removed); free space or "
                             f"choose `checkpoint_dir` on a larger device; latest still points to the previous "
                             f"checkpoint.")
    return TrainingError(f"cannot write a checkpoint in {directory}: {exc.strerror or exc}; "
                         f"check `checkpoint_dir` and its permissions.")


# --------------------------------------------------------------------------- finding and reading
def _check_header(head: dict[str, Any], path: Path) -> dict[str, Any]:
    def get(key, kind, optional=False):
        return header_value(head, key, kind, path=path, error=TrainingError, fix=_FIX, optional=optional)

    get("epoch", "int>=0")
    get("step", "int>=0")
    get("num_workers", "int>=1")
    get("dataset_sha256", "str")
    get("placement_sha256", "str")
    get("config", "dict")
    files = get("files", "dict")
    for name, size in files.items():
        if not re.fullmatch(r"trainer\.pt|worker-\d{5}\.(pt|rows)", name) or not isinstance(size, int) \
                or isinstance(size, bool):
            raise TrainingError(f"{path}: files lists {name!r}: {size!r}, expected 'trainer.pt', "
                                f"'worker-NNNNN.pt' or 'worker-NNNNN.rows' with a size in bytes; {_FIX}")
    return head


def read_header(ckpt: Path) -> dict[str, Any]:
    """Read and validate ``ckpt/checkpoint.json``; schema 1 is refused (see the module docstring)."""
    path = ckpt / HEADER
    head = read_versioned_json(path, fmt=FORMAT, max_version=SCHEMA_VERSION, error=TrainingError, fix=_FIX)
    if head["schema_version"] < 2:
        raise TrainingError(
            f"{path} has schema_version {head['schema_version']}: checkpoints before schema 2 are "
            f"refused (loading them would unpickle code, and the epoch order changed); {_FIX}")
    return _check_header(head, path)


def _incomplete(ckpt: Path, head: dict[str, Any]) -> str | None:
    """Why ``ckpt`` is incomplete (a file missing or of another size), or None."""
    for name, size in head["files"].items():
        f = ckpt / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != size:
            return f"{name} has {f.stat().st_size} bytes, checkpoint.json says {size}"
    if "trainer.pt" not in head["files"]:
        return "trainer.pt is not listed"
    return None


def find_checkpoint(directory: str | os.PathLike, *, quiet: bool = False) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint to resume from and its header: ``latest`` if complete, else the newest complete
    ``ckpt-*`` (with a warning saying so, unless ``quiet``: a caller that only looks); None when there is none.

    A schema-1 or malformed ``latest`` is refused (:class:`TrainingError`), not skipped.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return None
    latest = directory / LATEST
    why = None
    if latest.is_dir():
        if not (latest / HEADER).is_file():
            why = f"{latest} has no {HEADER} (a save was interrupted)"
        else:
            head = read_header(latest)
            why = _incomplete(latest, head)
            if why is None:
                return latest.resolve(), head
            why = f"{latest} is incomplete ({why})"
    elif latest.is_symlink():
        why = f"{latest} points to {os.readlink(latest)}, which is missing"
    candidates = []
    for p in directory.iterdir():
        m = CKPT_DIR.match(p.name)
        if m and p.is_dir() and not p.is_symlink() and (p / HEADER).is_file():
            try:
                head = read_header(p)
            except TrainingError:
                continue
            if _incomplete(p, head) is None:
                candidates.append(((head["epoch"], head["step"], int(m.group(3) or 0)), p, head))
    if not candidates:
        if why is not None:
            raise TrainingError(f"{why}, and no complete older checkpoint is in {directory}; {_FIX}")
        return None
    _, path, head = max(candidates, key=lambda c: c[0])
    if not quiet:
        log.warning("warning: %s; resuming from the complete checkpoint %s (epoch %d step %d) instead",
                    why or f"{latest} is missing", path, head["epoch"] + 1, head["step"])
    return path, head


def has_checkpoint(directory: str | os.PathLike) -> bool:
    return find_checkpoint(directory, quiet=True) is not None


def read_checkpoint_header(directory: str | os.PathLike) -> dict[str, Any]:
    found = find_checkpoint(directory, quiet=True)
    if found is None:
        raise TrainingError(f"`resume=True`: no checkpoint in {directory}; run without `resume=True` first.")
    return found[1]


def read_worker_file(ckpt: Path, worker: int) -> dict:
    """Worker ``worker``'s file of the checkpoint directory ``ckpt``, decoded (``store``, ``counters``, ...)."""
    return _load(Path(ckpt) / f"worker-{worker:05d}.pt", WORKER_KEYS)


def read_trainer_file(ckpt: Path) -> dict:
    """The checkpoint directory ``ckpt``'s ``trainer.pt``, decoded (``model``, ``dense_opt``, RNG states, ...)."""
    return _load(Path(ckpt) / "trainer.pt", TRAINER_KEYS)


def load_checkpoint(trainer, directory: str | os.PathLike, *, dataset_sha256: str, placement_sha: str,
                    found: tuple[Path, dict[str, Any]] | None = None) -> dict:
    """Restore ``trainer`` from the newest complete checkpoint in ``directory``; returns its header.
    ``found``: :func:`find_checkpoint`'s result when the caller has it (not looked up, nor warned of, again)."""
    found = find_checkpoint(directory) if found is None else found
    if found is None:
        raise TrainingError(f"`resume=True`: no checkpoint in {directory}; run without `resume=True` first.")
    ckpt, head = found
    ctx = trainer.context()
    if head["dataset_sha256"] != dataset_sha256:
        raise TrainingError(f"{ckpt} was made for another dataset (sha256 {head['dataset_sha256'][:12]}…); {_FIX}")
    if head["placement_sha256"] != placement_sha or head["num_workers"] != ctx.num_workers:
        raise TrainingError(f"{ckpt} was made with another manifest; resume with the same `manifest` or {_FIX}")
    check_settings(ckpt, head, trainer.settings())
    main = _load(ckpt / "trainer.pt", TRAINER_KEYS)
    where = ckpt / "trainer.pt"
    try:
        for li, w in enumerate(ctx.engine.local_workers):
            where = ckpt / f"worker-{w:05d}.pt"
            store = ctx.stores[li]
            state, rows = open_worker_rows(ckpt, head, w, num_primary=store.num_primary)
            if rows.width != store.primary_width:
                raise ValueError(f"primary rows of width {rows.width}, expected {store.primary_width}")
            try:
                store.load_state_dict(state["store"], rows)
            finally:
                rows.close()
            trainer.load_worker_state(li, state)
        where = ckpt / "trainer.pt"
        trainer.load_state_dict(main)
        torch.random.set_rng_state(main["torch_rng"])
        np.random.set_state(main["numpy_rng"])
    except GmpError:
        raise
    except Exception as exc:  # noqa: BLE001 - wrong shapes/types inside a file: one line, not a traceback
        raise TrainingError(f"{where} does not fit this run ({first_line(exc)}); {_FIX}") from None
    num_steps = ctx.schedule.num_steps(head["epoch"])
    if head["step"] > num_steps:
        raise TrainingError(f"{ckpt / HEADER}: step {head['step']} is beyond the {num_steps} steps of epoch "
                            f"{head['epoch'] + 1}; {_FIX}")
    check_position(ckpt, head, main)
    trainer.seek(head["epoch"], head["step"])
    trainer.name_run(head.get("run"))  # its log lines continue under the same run (None: saved before gmp wrote it)
    return head


def check_position(ckpt: Path, head: dict[str, Any], main: dict[str, Any]) -> None:
    """Refuse a checkpoint whose ``checkpoint.json`` epoch/step differ from the position ``trainer.pt`` was
    saved at (``position``; checkpoints saved before gmp wrote it are taken as they are)."""
    pos = main.get("position")
    if pos is None:
        return
    ok = isinstance(pos, (list, tuple)) and len(pos) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                  for x in pos)
    if not ok:
        raise TrainingError(f"{ckpt / 'trainer.pt'} holds position {pos!r}, expected [epoch, step]; {_FIX}")
    if (head["epoch"], head["step"]) != tuple(pos):  # epochs counted from 1, as every other message does
        raise TrainingError(f"{ckpt / HEADER} says epoch {head['epoch'] + 1} step {head['step']} (\"epoch\": "
                            f"{head['epoch']}, 0-based), but the state in trainer.pt was saved at epoch {pos[0] + 1} "
                            f"step {pos[1]}: the header was edited; resume from an untouched checkpoint or {_FIX}")


def check_settings(ckpt: Path, head: dict[str, Any], config, keys: Sequence[str] | None = None) -> None:
    """Refuse a run whose settings differ from the checkpoint's: every setting but :data:`MUTABLE`, or only
    ``keys``; both ways (a setting only the checkpoint records counts, with the defaults the config's JSON
    leaves out filled in)."""
    then, now = comparable_settings(head["config"]), comparable_settings(config.to_json())
    keys = sorted((set(then) | set(now)) - set(MUTABLE)) if keys is None else keys
    ours, theirs = {k: then.get(k) for k in keys}, {k: now.get(k) for k in keys}
    differ = first_difference(ours, theirs)
    if differ is not None:
        made, has = differ
        # the parameters that give this run the checkpoint's values (the CLI writes `cache_policy=lru` as
        # --cache-policy lru); none where one is unset there or nested deeper
        _, _, parts = differing_parts(ours, theirs)
        shown = [(p, ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v) for p, v, _ in parts]
        again = "" if any(v is None or isinstance(v, dict) for _, v in shown) else \
            ", ".join(f"`{p}={v}`" for p, v in shown)
        raise TrainingError(f"{ckpt} was made with {made}, this run has {has}; resume with the same settings"
                            f"{f' ({again})' if again else ''} or {_FIX}")


# --------------------------------------------------------------------------- rows by id
def open_worker_rows(ckpt: str | os.PathLike, head: dict[str, Any], worker: int, *,
                     num_primary: int | None = None) -> tuple[dict[str, Any], PrimaryRows]:
    """Worker ``worker``'s file of the checkpoint directory ``ckpt`` (header ``head``, from
    :func:`find_checkpoint`), as schema 3, and a reader of its primaries (close it after use).

    The file's ``store["ids"][:rows.num_rows]`` are the primaries' global ids, ascending.
    ``num_primary`` is needed only for a schema-2 checkpoint of an SGD run."""
    ckpt = Path(ckpt)
    obj = _load(ckpt / f"worker-{worker:05d}.pt", WORKER_KEYS)
    if head["schema_version"] == 2:
        return upgrade_worker_v2(obj, num_primary)
    meta = obj.get("primary_rows")
    if not isinstance(meta, dict) or meta.get("file") != rows_name(worker):
        raise TrainingError(f"{ckpt / f'worker-{worker:05d}.pt'} lacks its primary_rows entry; {_FIX}")
    return obj, PrimaryRows(meta, directory=ckpt)


def read_primary_rows(directory: str | os.PathLike, gids, *,
                      placement: Placement | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Values ``[k, row_dim]`` and optimizer state (``[k, row_dim]``, None with SGD) of the rows
    ``gids`` as the newest complete checkpoint in ``directory`` holds them at their primaries.
    Reads only those rows. ``placement`` (the run's) is needed for schema-2 SGD checkpoints only."""
    found = find_checkpoint(directory)
    if found is None:
        raise TrainingError(f"no checkpoint in {directory}; train with `checkpoint_dir` first.")
    ckpt, head = found
    gids = np.asarray(gids, dtype=np.int64)
    values = state = None
    got = np.zeros(gids.size, dtype=bool)
    for w in range(int(head["num_workers"])):
        num_primary = None if placement is None else int(np.count_nonzero(
            np.asarray(placement.embedding_primary) == w))
        obj, rows = open_worker_rows(ckpt, head, w, num_primary=num_primary)
        try:
            ids = np.asarray(obj["store"]["ids"][:rows.num_rows])
            pos = np.minimum(np.searchsorted(ids, gids), max(ids.size - 1, 0))
            mine = np.flatnonzero((ids.size > 0) & (ids[pos] == gids) if ids.size else np.zeros(gids.size, bool))
            if values is None:
                values = np.zeros((gids.size, rows.row_dim), dtype=rows.dtype.newbyteorder("="))
                state = np.zeros_like(values) if rows.width > rows.row_dim else None
            if mine.size:
                block = rows.take(pos[mine])
                values[mine] = block[:, :rows.row_dim]
                if state is not None:
                    state[mine] = block[:, rows.row_dim:]
                got[mine] = True
        finally:
            rows.close()
    if not got.all():
        bad = gids[~got][:3].tolist()
        raise TrainingError(f"ids {bad} are no worker's primary in {ckpt}; pass ids below num_embeddings.")
    return values, state
