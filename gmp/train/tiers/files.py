"""The disk tier's folder (``--tier-dir``): the directories a run creates for it, removed when the
last tier of the process using them closes, and the files of killed runs, removed on start.
See :mod:`gmp.train.tiers`.

A disk tier is the file ``worker-NNNNN-PID.rows`` (:data:`TIER_FILE`), locked with ``flock``
while its run has it open. A run killed with ``kill -9`` cannot remove its file; the next run in
the same folder removes every file whose name matches :data:`TIER_FILE` exactly, whose PID is not
a live process of this machine and whose lock is free (a lock held means a live run, on this or
another machine sharing the folder) -- nothing else is ever deleted.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import logging
import os
import re
import threading
from pathlib import Path

from ...errors import TrainingError
from ...wording import plural

log = logging.getLogger("gmp.train")

#: a disk tier's file name: worker (5 digits or more), the PID of the process that made it
TIER_FILE = re.compile(r"worker-(\d{5,})-(\d+)\.rows")

_lock = threading.Lock()
_users: dict[Path, int] = {}  # directories this process created -> open tiers inside them
#: releases waiting for ``_lock`` (:func:`release_dirs`): a tier's finalizer runs wherever the garbage
#: collector does, on any allocation, also inside this module's critical section in the same thread, where
#: waiting for the lock never ends (a test run hung there, in make_dirs)
_pending: collections.deque[Path] = collections.deque()


def tier_file(directory: Path, worker: int) -> Path:
    return directory / f"worker-{worker:05d}-{os.getpid()}.rows"


def make_dirs(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; the ones created here (deepest first), which
    :func:`release_dirs` removes when no tier of this process uses them any more. Under the lock from the
    check to the count, so that no release removes a directory this tier is about to use."""
    directory = Path(directory)
    try:
        with _lock:
            created = _create_missing(directory)
            for d in created:
                _users[d] = 0
            for d in _owned_above(directory):
                _users[d] += 1
    finally:
        _release_pending()
    return list(reversed(created))


def _create_missing(directory: Path) -> list[Path]:
    """``directory``'s missing parents and itself, created (shallowest first); none left on an error."""
    missing = []
    p = directory
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    created = []
    try:
        for d in reversed(missing):
            try:
                d.mkdir()
                created.append(d)
            except FileExistsError:  # another process made it meanwhile: not ours to remove
                pass
    except OSError as exc:
        _remove_empty(reversed(created))
        raise TrainingError(f"cannot create the disk tier directory {directory}: {exc.strerror}; pass a writable "
                            f"tier_dir.") from None
    return created


def release_dirs(directory: Path) -> None:
    """One tier in ``directory`` closed: remove the directories this process created for tiers (deepest
    first) once none of its tiers uses them, if empty (another file in them keeps them). Never waits for
    the lock: a release that finds it taken is left to its holder, which takes the pending releases
    when it lets go (:func:`_release_pending`)."""
    _pending.append(Path(directory))
    _release_pending()


def _release_pending() -> None:
    """Take the pending releases while the lock is free; a holder calls this after it lets go, so a release
    left by a finalizer inside its critical section, or by another thread meanwhile, is taken then."""
    while _pending:
        if not _lock.acquire(blocking=False):
            return  # its holder takes it when it lets go
        done = []
        try:
            while _pending:
                for d in _owned_above(_pending.popleft()):
                    _users[d] -= 1
                    if _users[d] <= 0:
                        del _users[d]
                        done.append(d)
        finally:
            _lock.release()
        _remove_empty(sorted(done, key=lambda d: len(d.parts), reverse=True))


def _owned_above(directory: Path) -> list[Path]:
    """The directories of this process's registry that are ``directory`` or hold it. Under ``_lock``."""
    return [d for d in _users if d == directory or d in directory.parents]


def _remove_empty(dirs) -> None:
    for d in dirs:
        try:
            d.rmdir()
        except OSError:  # not empty (another run's files, the user's): kept
            pass


def lock(fd: int) -> None:
    """Mark a tier file as in use (released when its file is closed, or its process dies)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # a file system without locks: the PID check still protects this machine's runs
        pass


def remove_stale(directory: Path) -> int:
    """Remove the tier files of dead runs from ``directory`` (see the module docstring); says so in one
    log line. Returns how many were removed."""
    directory = Path(directory)
    removed, nbytes = 0, 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        m = TIER_FILE.fullmatch(entry.name)
        if m is None or not entry.is_file(follow_symlinks=False):
            continue
        pid = int(m.group(2))
        if pid == os.getpid() or _alive(pid):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: a live run (on another machine)
            size = os.fstat(fd).st_size
            os.unlink(entry.path)
            removed, nbytes = removed + 1, nbytes + size
        except OSError:
            pass
        finally:
            os.close(fd)
    if removed:
        log.warning("removed %d disk-tier %s of killed runs (%.1f MB) from %s", removed, plural("file", removed),
                    nbytes / 1e6, directory)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM  # exists, another user's
    return True
