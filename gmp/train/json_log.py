"""The JSON training log (``--log-json``): what may be appended to, its ``"kind": "settings"`` line, and
the rewriting a resume does. Every line is one JSON object naming its run (``"run"``), so several runs
may share a log; a line a killed run tore is dropped before the next run appends (:func:`end_torn_line`).
The records themselves: :mod:`gmp.train.records`.

**Versions.** A log is a file of many runs, each begun by its ``"kind": "settings"`` line, which is the
run's header: it carries ``"format": "gmp.train_log"`` and ``"schema_version"`` (:data:`SCHEMA_VERSION`),
and the run's other lines (``"run"`` names it) are of that version. Version 2 added the two keys; lines
without them are version 1 (a run logged before, or by ``gmp.train.run.train`` without ``settings``),
read as they are: what a resume reads of a line (``epoch``, ``step``, ``kind``, ``run``, absent ones
as before) means the same in both, so the upgrade adds nothing. A log holding a line of a newer
version is refused before anything is appended or rewritten (:func:`read_log`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import TrainingError

FORMAT = "gmp.train_log"
#: 2: the settings line names the format and its version (1: no line does)
SCHEMA_VERSION = 2


def is_stream(path: str | os.PathLike) -> bool:
    """Whether a ``--log-json`` path is a stream gmp only appends to, never reads back nor rewrites: a FIFO, a
    socket, a device, or anything under /dev or /proc (``/dev/stdout`` may lead to a terminal, a pipe or a
    file that holds other output)."""
    path = Path(path)
    if Path(os.path.abspath(path)).parts[1:2] in (("dev",), ("proc",)):
        return True
    return path.exists() and not path.is_file() and not path.is_dir()


def read_log(path: str | os.PathLike, *, first_only: bool = False) -> list[tuple[str, dict[str, Any] | None]]:
    """The lines of a JSON training log with their records (``first_only``: its first line, enough to tell a
    log from another file before appending); ``[]`` when it does not exist. Only the last line may be torn (a
    crash mid-write: its record is None; the next run drops it, :func:`end_torn_line`); a log with any other
    line that is not a gmp record (a JSON object with an ``epoch``), or that is not UTF-8, is refused:
    rewriting or appending to it would damage someone else's file."""
    path = Path(path)
    if not path.exists():
        return []
    if path.is_dir():
        raise TrainingError(f"`log_json` {path} is a directory; give a file name.")
    if is_stream(path):  # reading it back to validate it hung before training
        return []
    try:
        if first_only:
            with open(path, "rb") as f:
                lines = f.readline().decode("utf-8").splitlines()
        else:
            lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise TrainingError(f"`log_json` {path} is not a gmp training log (not UTF-8 text); choose another file.") \
            from None
    out: list[tuple[str, dict[str, Any] | None]] = []
    for k, line in enumerate(lines):
        rec = log_record(line)
        if rec is None and k < len(lines) - 1 and looks_torn(line):  # another run appended onto a torn line
            raise TrainingError(f"`log_json` {path}: line {k + 1} is a torn record (a run killed while writing it) "
                                f"with later lines after it; delete that line or choose another file.")
        if rec is None and not looks_torn(line):
            raise TrainingError(f"`log_json` {path}: line {k + 1} is not a gmp training record; choose another "
                                f"file (gmp appends to it and, with `resume=True`, rewrites it).")
        version = None if rec is None or rec.get("format") != FORMAT else rec.get("schema_version")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
            raise TrainingError(f"`log_json` {path}: line {k + 1} has schema_version {json.dumps(version)}, "
                                f"expected a positive integer; choose another file.")
        if version is not None and version > SCHEMA_VERSION:
            raise TrainingError(f"`log_json` {path}: line {k + 1} has schema_version {version}; this gmp reads up "
                                f"to {SCHEMA_VERSION}. Upgrade gmp or choose another file.")
        out.append((line, rec))
    return out


def log_record(line: str) -> dict[str, Any] | None:
    """The gmp record of a JSON log line (a JSON object with an ``epoch``), else None."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and "epoch" in rec else None


def looks_torn(line: str) -> bool:
    """Whether a log line is one cut short by a crash mid-write: a JSON object begun and not ended."""
    if not line.lstrip().startswith("{"):
        return False
    try:
        json.loads(line)
    except ValueError:
        return True
    return False


def end_torn_line(path: str | os.PathLike) -> None:
    """Before a run appends to its JSON log: drop a torn last line (a run killed mid-write leaves one without
    its newline), so the new run's first line starts a line of its own (it was glued onto the fragment, and
    the log then refused on ``resume=True``). A complete last line without its newline gets one."""
    path = Path(path)
    if not path.is_file() or is_stream(path):
        return
    with open(path, "r+b") as f:
        end = start = f.seek(0, os.SEEK_END)
        while start > 0:  # back to the start of the last line
            size = min(start, 1 << 16)
            f.seek(start - size)
            k = f.read(size).rfind(b"\n")
            if k >= 0:
                start += k + 1 - size
                break
            start -= size
        if start == end:  # empty, or ends with its newline
            return
        f.seek(start)
        last = f.read().decode("utf-8", errors="replace")
        if looks_torn(last):
            f.truncate(start)
        else:
            f.seek(end)
            f.write(b"\n")


def check_log_file(path: str | os.PathLike, *, resume: bool) -> None:
    """Refuse, before training, a ``--log-json`` file that belongs to something else: a file inside a gmp
    dataset or placement manifest, or a file that is not a gmp training log (:func:`read_log`: every line
    when ``resume`` will rewrite it, else its first)."""
    from .._io import KIND_NAMES, owner_of

    path = Path(path)
    owner = owner_of(path)
    if owner is not None:
        raise TrainingError(f"`log_json` {path} is inside {KIND_NAMES[owner]} ({path.parent}); write it elsewhere.")
    read_log(path, first_only=not resume)


def settings_record(settings: dict[str, Any], epoch: int, step: int, *, run_id: str | None) -> dict[str, Any]:
    """The JSON log's ``"kind": "settings"`` line: what this start of a run was asked and resolved to
    (``settings``: :meth:`gmp.specs.TrainSpec.to_json`, with ``sources`` saying where each value came from),
    at ``epoch`` completed epochs and ``step`` (0 and 0 for a new run; a resume's checkpoint position), so a
    resume's log trimming keeps it. It is the run's header: it names the log's format and version."""
    return {"kind": "settings", "format": FORMAT, "schema_version": SCHEMA_VERSION, "epoch": int(epoch),
            "step": int(step), "run": run_id, "settings": settings}


def last_run_id(path: str | os.PathLike) -> str | None:
    """The ``run`` of the last complete line of a JSON log (the run a ``--resume`` continues when its
    checkpoint does not name it: saved before gmp wrote the run id into checkpoints)."""
    for _, rec in reversed(read_log(path)):
        if rec is not None and isinstance(rec.get("run"), str):
            return rec["run"]
    return None


def trim_log(path: str | os.PathLike, epoch: int, step: int, *, run_id: str | None = None) -> None:
    """Keep the JSON log lines up to a checkpoint's position: every line of the ``epoch`` completed
    epochs, and the step lines of epoch ``epoch + 1`` up to ``step``. A run killed after writing a
    line but before saving its checkpoint wrote lines the resumed run writes again; they go.
    With ``run_id`` only that run's lines are trimmed (other runs in the same log stay).
    Written atomically (temporary file, then rename)."""
    path = Path(path)
    if not path.is_file() or is_stream(path):
        return
    keep = []
    for line, rec in read_log(path):
        try:
            e, kind, s = int(rec["epoch"]), rec.get("kind"), int(rec.get("step", 0))
        except (KeyError, TypeError, ValueError):
            continue  # the torn last line of the crash
        if run_id is not None and rec.get("run") not in (run_id, None):
            keep.append(line + "\n")  # another run's line
        elif e <= epoch or (kind == "step" and e == epoch + 1 and s <= step):
            keep.append(line + "\n")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(keep), encoding="utf-8")
    os.replace(tmp, path)
