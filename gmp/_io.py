"""Shared helpers for gmp's on-disk formats: atomic directories, versioned
JSON headers and content hashes.

Every directory gmp writes is first built under a hidden temporary sibling
(``.NAME.tmp-HOST-PID-XXXX``) and moved into place only when complete, so a
crash never leaves a directory that reads as valid. An existing directory is
replaced by swapping the two in one ``renameat2(RENAME_EXCHANGE)`` call (Linux
>= 3.15), so at every instant ``NAME`` is either the complete old or the
complete new directory; where the kernel or filesystem lacks it, the old one
is renamed aside (``.NAME.old-HOST-PID-XXXX``), the new one renamed in, and a
later run puts the old one back if it finds ``NAME`` missing. Temporaries left
by a killed run are removed by the next run that writes the same ``NAME``
(when their owner process on this host is gone) or reported (another host's).

Before any work, :func:`check_output_dir` refuses an output that would destroy
something it was not meant to replace: the working directory or one of its
parents, a directory holding an input, a symbolic link, a path inside a dataset,
manifest, TorchRec export or checkpoint directory (:data:`OWNING_KINDS`), or
(with ``overwrite``) an existing directory that is not a gmp
output of the same kind or that holds anything but that kind's own files.
Directories are created with the user's umask (``mkdtemp`` alone gives 0700).

**Claims.** The same check claims the output for this process
(:func:`claim_output`): an ``flock``-ed lock file ``.NAME.gmp-lock`` beside it
refuses a second writer (a killed holder's lock is released by the kernel), and
the claim records what stood at ``NAME`` (nothing, or a device and inode). At
the end the new output goes in only if ``NAME`` still holds that
(``RENAME_NOREPLACE`` where nothing was; after an exchange, the directory
swapped out must be the claimed one, else it is swapped back).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import json
import logging
import mmap
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .errors import GmpError, OutputError

log = logging.getLogger(__name__)

#: bytes read per hash update; large enough to keep sha256 near memory speed.
_HASH_CHUNK = 1 << 24

#: the header file that makes a directory a gmp output of each kind, the report's last (a manifest holds its own
#: report.json; a report may be written into an export); a checkpoint directory (``--checkpoint-dir``) has none
#: of its own: its ``latest`` checkpoint's header marks it (:func:`output_kind`)
KIND_FILES = {"gmp.dataset": "dataset.json", "gmp.placement": "manifest.json", "gmp.torchrec_export": "plan.json",
              "gmp.checkpoint": "checkpoint.json", "gmp.report": "report.json"}
KIND_NAMES = {"gmp.dataset": "a gmp dataset", "gmp.placement": "a placement manifest",
              "gmp.report": "a gmp report directory", "gmp.torchrec_export": "a TorchRec export",
              "gmp.checkpoint": "a gmp checkpoint directory"}
#: the kinds whose directory holds only its own files, so that no output may go inside one: a dataset, a
#: manifest and an export are replaced whole (their `overwrite=True` refuses or loses anything else there), and
#: a checkpoint directory's saves refuse what is not a checkpoint. Not a report directory: a report is written
#: into an existing directory beside what is there and never replaces it.
OWNING_KINDS = ("gmp.dataset", "gmp.placement", "gmp.torchrec_export", "gmp.checkpoint")
#: the entry of a checkpoint directory that holds its newest checkpoint (``gmp.train.checkpoint_dir.LATEST``)
_LATEST_CHECKPOINT = "latest"
#: errno values that mean "the device is full"
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def output_kind(path: Path) -> str | None:
    """The gmp format whose header ``path`` holds (``"gmp.dataset"``, ...), or None; a checkpoint directory
    (its ``latest`` checkpoint's header) is ``"gmp.checkpoint"`` too."""
    for kind, name in KIND_FILES.items():
        if _has_header(path / name, kind):
            return kind
    if _has_header(path / _LATEST_CHECKPOINT / KIND_FILES["gmp.checkpoint"], "gmp.checkpoint"):
        return "gmp.checkpoint"
    return None


def _has_header(f: Path, kind: str) -> bool:
    """Whether the file ``f`` is a JSON header of format ``kind``."""
    if not f.is_file():
        return False
    try:
        with open(f, encoding="utf-8") as fh:
            head = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(head, dict) and head.get("format") == kind


# --------------------------------------------------------------------------- claims
#: the lock beside an output (``.NAME.gmp-lock`` in its parent) that one writer holds from start to end
LOCK_SUFFIX = ".gmp-lock"


class OutputLock:
    """An exclusive ``flock`` on a lock file, held by this process until :meth:`release`.

    The file records the holder (host, pid, command, start time, a random token) for the message a
    second writer gets. The kernel drops a ``flock`` when its holder dies, so the lock of a killed run
    is stale by construction: the next writer takes it over (no pid guessing, also on another host
    when the filesystem passes locks on, as NFSv4 does).
    """

    def __init__(self, path: Path, fd: int, token: str):
        self.path, self.fd, self.token = path, fd, token

    def held(self) -> bool:
        """Whether ``path`` is still this lock's file (a person may have deleted it)."""
        try:
            a, b = os.fstat(self.fd), os.stat(self.path)
        except OSError:
            return False
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

    def release(self) -> None:
        if self.fd < 0:
            return
        if self.held():
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # while still locked: a waiting writer then finds the path gone and retries
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = -1


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except (OSError, ValueError, UnicodeDecodeError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another gmp run"
    return (f"another gmp run (pid {info.get('pid')} on {info.get('host')}, since {info.get('started')}: "
            f"{shorten_command(str(info.get('command', '')))})")


def shorten_command(command: str, width: int = 120) -> str:
    """``command`` up to ``width`` characters, cut at its last space before them (at the width when it has none)
    and marked " ..." (a long one was cut mid-word, unmarked)."""
    if len(command) <= width:
        return command
    return command[:width - 4].rsplit(" ", 1)[0] + " ..."


def _busy_error(fd: int, busy: str) -> OutputError:
    """The refusal of a second writer: who holds the lock open as ``fd`` (closed here)."""
    who = _holder(fd)
    os.close(fd)
    return OutputError(f"{busy} is being written by {who}; wait for it to end or choose another path (a second "
                       f"writer would replace its files).")


def acquire_lock(path: str | os.PathLike, *, busy: str, flag: str = "") -> OutputLock:
    """Take the lock file ``path`` (created if missing) or raise :class:`OutputError` ``"{busy} is being
    written by {holder}; ..."`` when a live process holds it, ``"{busy}: FOLDER is not writable ...; choose
    another {flag}"`` when no file can be created beside it."""
    import fcntl
    import sys
    import uuid

    path = Path(path)
    token = uuid.uuid4().hex
    absent = 0  # tries that could neither create the lock nor find one (released meanwhile, or no place for it)
    for _ in range(50):  # a holder releasing between our open and our lock: look again
        read_only = False
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except PermissionError as exc:  # another user's lock file (a shared directory): read-only serves for flock
            try:
                fd, read_only = os.open(path, os.O_RDONLY | os.O_CLOEXEC), True
            except FileNotFoundError:
                absent += 1
                if absent >= 3:  # not a holder releasing it: nothing can be created there (/sys, as root too)
                    raise _not_writable(path, busy, exc, flag) from None
                continue
            except OSError as exc:
                raise OutputError(f"cannot open the lock {path}: {exc.strerror}; check the permissions of "
                                  f"{path.parent}.") from None
        except OSError as exc:
            if is_full_disk(exc):
                raise full_disk_error(exc, path) from None
            raise _not_writable(path, busy, exc, flag) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if isinstance(exc, BlockingIOError) or read_only:
                raise _busy_error(fd, busy) from None
            os.close(fd)  # a filesystem without locks: the file's existence is the lock (O_EXCL below)
            return _acquire_exclusive(path, busy=busy, token=token)
        lock = OutputLock(path, fd, token)
        if read_only:  # a dead run's lock, not ours to rewrite: removed under its lock, then made anew
            if lock.held():
                with contextlib.suppress(OSError):
                    os.unlink(path)
            os.close(fd)
            continue
        if not lock.held():  # released (unlinked) by its holder between our open and our flock
            os.close(fd)
            continue
        info = {"host": socket.gethostname(), "pid": os.getpid(), "token": token,
                "started": _now(), "command": " ".join(sys.argv)[:200]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
        return lock
    raise OutputError(f"{busy}: could not take the lock {path} (it keeps changing); try again.")


def _not_writable(lock: Path, busy: str, exc: OSError, flag: str) -> OutputError:
    """The refusal of an output whose folder takes no new file (the lock ``lock`` beside it could not be
    created): the folder, not the lock, is what the person chose; trying again cannot help."""
    why = "read-only file system" if read_only_file_system(lock.parent) else (exc.strerror or str(exc)).lower()
    return OutputError(f"{busy}: {lock.parent} is not writable (a file cannot be created there: {why}); choose "
                       f"another {flag or 'location'}.")


def _acquire_exclusive(path: Path, *, busy: str, token: str) -> OutputLock:
    """The lock where ``flock`` is unsupported: created with ``O_EXCL``; one left by a process of this host
    that is gone is taken over, another host's is reported with the file to delete."""
    info = {"host": _owner_tag().rsplit("-", 1)[0], "pid": os.getpid(), "token": token, "started": _now()}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                old = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
            except (OSError, ValueError, UnicodeDecodeError):
                old = {}
            finally:
                os.close(fd)
            pid = old.get("pid") if isinstance(old, dict) else None
            if isinstance(pid, int) and old.get("host") == info["host"] and pid != os.getpid():
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    os.unlink(path)  # its process is gone
                    continue
                except PermissionError:
                    pass
            raise OutputError(f"{busy} is being written by another gmp run (lock {path}); wait for it to end, or "
                              f"delete {path} if that run is gone.") from None
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
        return OutputLock(path, fd, token)
    raise OutputError(f"{busy}: could not take the lock {path}; delete it if no gmp run writes there.")


def _now() -> str:
    import datetime as _dt

    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path`` itself (a link is not followed), or None when nothing is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class Claim:
    """A writer's claim on an output path: the lock beside it and what stood at the path when it was taken
    (``identity``: device and inode, None when nothing was there). :func:`atomic_directory` and
    :func:`write_claimed_file` put the result in place only if the path still holds that."""

    def __init__(self, path: Path, lock: OutputLock, made: list[Path]):
        self.path, self.lock, self._made = path, lock, made
        self.identity = _identity(path)
        #: True once this run may have changed what stands at the path (its output put in place, or files
        #: written into an existing directory): kept after the release, for :func:`unwritten_outputs`
        self.written = False

    def same(self) -> bool:
        return _identity(self.path) == self.identity

    def check(self, flag: str = "`out`") -> None:
        """Raise a one-line :class:`OutputError` unless the path still holds what the claim found."""
        if not self.same():
            now = _identity(self.path)
            raise _changed(self.path, flag, "appeared" if self.identity is None else
                           "was removed" if now is None else "was replaced")

    def release(self) -> None:
        self.lock.release()
        for d in self._made:  # parents this claim created for its lock, if nothing else went there
            with contextlib.suppress(OSError):
                d.rmdir()
        _CLAIMS.pop(self.path, None)


#: this process's claims, by absolute path (a command checks early, writes late: one claim for both)
_CLAIMS: dict[Path, Claim] = {}
#: every claim taken since the last :func:`release_claims`, released or not (:func:`unwritten_outputs`)
_TAKEN: dict[Path, Claim] = {}


def lock_path(out: str | os.PathLike) -> Path:
    """The lock file of the output ``out``: ``.NAME.gmp-lock`` beside it."""
    out = Path(os.path.abspath(out))
    return out.parent / f".{out.name}{LOCK_SUFFIX}"


def claim_output(out: str | os.PathLike, *, flag: str = "`out`") -> Claim:
    """Claim ``out`` for this process (idempotent): take the lock beside it, creating missing parents, and
    note what is there now. A second writer, in another process, gets a one-line :class:`OutputError`
    naming the holder. Held until :meth:`Claim.release` (:func:`atomic_directory` releases it when it
    ends), :func:`release_claims`, or this process's end."""
    key = Path(os.path.abspath(out))
    if key in _CLAIMS:
        return _CLAIMS[key]
    made = []
    anc = key.parent
    while not anc.exists() and not anc.is_symlink() and anc != anc.parent:
        made.append(anc)
        anc = anc.parent
    try:
        key.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if is_full_disk(exc):
            raise full_disk_error(exc, key) from None
        raise OutputError(f"cannot create {key.parent}: {exc.strerror}; choose another {flag}.") from None
    try:
        lock = acquire_lock(lock_path(key), busy=f"{flag} {out}", flag=flag)
    except BaseException:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    claim = _CLAIMS[key] = _TAKEN[key] = Claim(key, lock, made)
    return claim


def release_claim_on_error(param: str = "out"):
    """Decorate a library function that claims its ``param`` output early: when it raises, the claim is
    released (the CLI releases every claim when a command ends; a notebook calling the function again
    after fixing a mistake must start from a fresh claim, not one recording what stood there before)."""
    import functools
    import inspect

    def wrap(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except BaseException:
                release_claim(sig.bind_partial(*args, **kwargs).arguments.get(param))
                raise
        return inner
    return wrap


def release_claim(out: str | os.PathLike | None) -> None:
    """Release this process's claim on ``out``, if it holds one (a library call that failed after
    claiming: a notebook calling it again must start from a fresh claim)."""
    held = _CLAIMS.get(Path(os.path.abspath(out))) if out is not None else None
    if held is not None:
        held.release()


def unwritten_outputs() -> list[Path]:
    """The outputs (absolute paths) claimed since the last :func:`release_claims` (the CLI's command) that this
    run has not written: an output is put in place whole (:func:`atomic_directory`, :func:`write_claimed_file`),
    so nothing of this run is there (what the CLI says when a command is interrupted)."""
    return [path for path, claim in _TAKEN.items() if not claim.written]


def release_claims() -> None:
    """Release every claim this process holds (the CLI calls it when a command ends, however it ends)."""
    for claim in list(_CLAIMS.values()):
        claim.release()
    _TAKEN.clear()


atexit.register(release_claims)


def foreign_entries(out: Path, own: Callable[[str], bool] | Collection[str]) -> list[str]:
    """The names in directory ``out`` that gmp did not write there (not in ``own``), sorted."""
    is_own = own if callable(own) else (lambda name: name in own)
    try:
        names = sorted(p.name for p in out.iterdir())
    except OSError:
        return []
    return [n for n in names if not is_own(n)]


def shown_value(v: Any) -> str:
    """``v`` as JSON for a one-line message, cut to 40 characters."""
    text = json.dumps(v, default=str)
    return text if len(text) <= 40 else text[:40] + "…"


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def enclosing_output(path: str | os.PathLike) -> tuple[str, Path] | None:
    """``(kind, directory)`` of the gmp output of :data:`OWNING_KINDS` (a dataset, a placement manifest, a
    TorchRec export, a checkpoint directory or one of its checkpoints) that ``path`` lies inside (at any depth),
    or None: such a directory's content is gmp's, and ``--overwrite`` of it would refuse or lose anything else
    put there."""
    target = Path(os.path.abspath(path))
    for anc in target.parents:
        if anc.is_dir():
            kind = output_kind(anc)
            if kind in OWNING_KINDS:
                return kind, anc
    return None


def check_output_dir(out: str | os.PathLike, *, kind: str | None, overwrite: bool = False,
                     inputs: Iterable[str | os.PathLike] = (), flag: str = "`out`",
                     own: Callable[[str], bool] | Collection[str] | None = None, claim: bool = True) -> Path:
    """Refuse an output directory that cannot or must not be (re)written, and claim it; cheap, so call it
    first.

    Refused, each with a one-line :class:`~gmp.errors.OutputError`: a symbolic
    link; the working directory or one of its parents; a directory that holds
    one of ``inputs``; a path inside a gmp output of :data:`OWNING_KINDS` (their
    directories hold only their own files); a path below an existing file; an
    existing file; an existing non-empty directory without ``overwrite``, or
    (with ``overwrite``) one that is not a gmp output of ``kind`` (with
    ``kind=None`` no non-empty directory is ever replaced) or that holds an
    entry not in ``own`` (the names a gmp output of ``kind`` writes: anything
    else is someone else's, and is named); ``out`` claimed by another process.

    With ``claim`` (the default) ``out`` is claimed for this process
    (:func:`claim_output`) before it is looked at, so a second writer is refused
    from the start and :func:`atomic_directory` later replaces only what was
    found here.
    """
    out = Path(out)
    if out.is_symlink():
        raise OutputError(f"{flag} {out} is a symbolic link (to {os.readlink(out)}); pass the real directory "
                          f"or another path.")
    target = Path(os.path.abspath(out))
    real = Path(os.path.realpath(out))  # Path.resolve raises RuntimeError inside a symlink loop
    cwd = Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise OutputError(f"{flag} {out} is the working directory or one of its parents; writing there would "
                          f"replace it: choose a new directory for {flag}.")
    inputs = list(inputs)
    for inp in inputs:
        if real in Path(os.path.realpath(inp)).parents:
            raise OutputError(f"{flag} {out} contains the input {inp}; choose an output directory that does not "
                              f"hold the input.")
    inside = enclosing_output(target)
    if inside is not None:
        raise OutputError(f"{flag} {out} is inside {KIND_NAMES[inside[0]]} ({inside[1]}), whose directory holds "
                          f"only its own files (rewriting it would refuse or lose anything else); choose a path "
                          f"outside it.")
    for anc in target.parents:
        if anc.exists() or anc.is_symlink():
            if not anc.is_dir():
                raise not_a_directory(out, anc, flag)
            if not os.access(anc, os.W_OK | os.X_OK):
                why = "read-only file system" if read_only_file_system(anc) else "permission denied"
                raise OutputError(f"{flag} {out}: cannot write in {anc} ({why}); choose another {flag}.")
            break
    fresh = claim and Path(os.path.abspath(out)) not in _CLAIMS
    held = claim_output(out, flag=flag) if claim else None
    try:
        clean_leftovers(out)  # may put back an old copy a killed run had moved aside
        if fresh:
            held.identity = _identity(target)  # what this writer may replace at the end
        elif held is not None and _identity(target) not in (None, held.identity):  # claimed earlier (before
            # the inputs were read): what stands there now was put there meanwhile by someone else
            raise _changed(target, flag, "appeared" if held.identity is None else "was replaced")
        if out.exists():
            if not out.is_dir():
                raise not_a_directory(out, out, flag)
            if any(out.iterdir()):
                if not overwrite:
                    raise OutputError(f"{flag} {out} already exists and is not empty; choose another {flag} or "
                                      f"pass `overwrite=True`.")
                have = output_kind(out)
                if kind is None or have != kind:
                    what = KIND_NAMES.get(kind or "", "a gmp output")
                    header = KIND_FILES.get(kind or "", "gmp header")
                    is_ = f"is {KIND_NAMES[have]}, not {what}" if have else f"is not {what} (no {header})"
                    raise OutputError(f"{flag} {out} {is_}; `overwrite=True` only replaces {what}: choose another "
                                      f"{flag}.")
                if own is not None:
                    check_only_own(out, own, kind=kind, flag=flag)
        for inp in inputs:
            if Path(os.path.realpath(inp)) == real:
                raise OutputError(f"{flag} {out} is the input {inp}; choose another {flag}.")
    except BaseException:
        if fresh:
            held.release()
        raise
    return out


def check_only_own(out: Path, own: Callable[[str], bool] | Collection[str], *, kind: str | None,
                   flag: str = "`out`", when: str = "") -> None:
    """Refuse (one line naming them) the entries of ``out`` that are not in ``own``: ``--overwrite``
    replaces a gmp output, never what someone else put inside it."""
    foreign = foreign_entries(out, own)
    if foreign:
        what = KIND_NAMES.get(kind or "", "a gmp output")
        raise OutputError(f"{flag} {out} holds {_shown(foreign)}{when}, which gmp did not write there; `overwrite=True` "
                          f"only replaces the files of {what}: move {'it' if len(foreign) == 1 else 'them'} out "
                          f"or choose another {flag}.")


def owner_of(path: str | os.PathLike) -> str | None:
    """The kind of :data:`OWNING_KINDS` of the directory ``path`` lies in (its files belong to it: a stray file
    there can replace or corrupt what gmp reads, or block its `overwrite=True`), else None."""
    parent = Path(path).parent
    kind = output_kind(parent) if parent.is_dir() else None
    return kind if kind in OWNING_KINDS else None


def check_output_file(out: str | os.PathLike, *, overwrite: bool = False, flag: str = "`out`",
                      claim: bool = True, kind: str | None = None) -> Path:
    """Refuse an output file that must not be (re)written; cheap, so call it first.

    Refused, each with a one-line :class:`~gmp.errors.OutputError`: a symbolic link; a directory; a file
    inside a gmp output of :data:`OWNING_KINDS` (their files belong to them: a stray ``dataset.json`` or
    ``report.json`` there replaces what gmp reads); an existing file without ``overwrite``, or (with
    ``overwrite``) one that is not a gmp file of ``kind`` (:func:`file_kind`; with ``kind=None`` any file is
    replaced): someone's own notes are never replaced; a file another process claimed. With ``claim`` it is
    claimed for this process (see :func:`write_claimed_file`).
    """
    out = Path(out)
    if out.is_symlink():
        raise OutputError(f"{flag} {out} is a symbolic link (to {os.readlink(out)}); pass the real file or another "
                          f"path.")
    if out.is_dir():
        raise OutputError(f"{flag} {out} is a directory; give a file name.")
    owner = owner_of(out)
    if owner is not None:
        raise OutputError(f"{flag} {out} is inside {KIND_NAMES[owner]} ({out.parent}); write it elsewhere.")
    fresh = claim and Path(os.path.abspath(out)) not in _CLAIMS
    held = claim_output(out, flag=flag) if claim else None
    try:
        if out.exists() and not overwrite:
            raise OutputError(f"{flag} {out} already exists; choose another {flag} or pass `overwrite=True`.")
        if out.exists() and kind is not None:
            _check_own_file(out, kind, flag)
    except BaseException:
        if fresh:
            held.release()
        raise
    return out


#: the mark gmp writes at the top of a Markdown or HTML file of its own (a JSON file says its ``format`` in its
#: object): an HTML comment, shown by neither a Markdown viewer nor a browser (:func:`file_mark`)
_MARK = "<!-- gmp "
#: bytes of a text file :func:`file_kind` looks for the mark in
_MARK_BYTES = 1024


def file_mark(kind: str, version: int) -> str:
    """The line that makes a Markdown or HTML file one of gmp's own: ``<!-- gmp {"format": KIND,
    "schema_version": N} -->`` (put it in the file's first :data:`_MARK_BYTES` bytes)."""
    return f"{_MARK}{json.dumps({'format': kind, 'schema_version': int(version)})} -->"


def file_kind(path: str | os.PathLike) -> str | None:
    """The gmp format of the file ``path`` (``"gmp.compare"``, ...): a JSON object's ``format``, or the format
    of the mark (:func:`file_mark`) near the top of a text file; None for anything else (someone's own file)."""
    path = Path(path)
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            head = f.read(_MARK_BYTES)
        if head.lstrip()[:1] == b"{":
            if path.stat().st_size > MAX_HEADER_BYTES:
                return None
            with open(path, encoding="utf-8") as f:
                return _gmp_format(json.load(f))
    except (OSError, ValueError, RecursionError):
        return None
    text = head.decode("utf-8", errors="replace")
    at = text.find(_MARK)
    if at < 0:
        return _unmarked_kind(text)
    try:
        return _gmp_format(json.loads(text[at + len(_MARK):text.find("-->", at)]))
    except ValueError:
        return None


def _gmp_format(obj: Any) -> str | None:
    """The ``format`` a JSON header or mark names, when it is a gmp one (``gmp.*``)."""
    got = obj.get("format") if isinstance(obj, dict) else None
    return got if isinstance(got, str) and got.startswith("gmp.") else None


#: how the files gmp wrote before the mark (:func:`file_mark`) began: a comparison's Markdown title line, its HTML
#: head; read so that ``--overwrite`` keeps replacing the comparisons an earlier version wrote (the demo's)
_UNMARKED_STARTS = {
    "gmp.compare": ("# Partitioner comparison: ",
                    "<!DOCTYPE html><html><head><meta charset='utf-8'>\n<title>Partitioner comparison — "),
}


def _unmarked_kind(text: str) -> str | None:
    """The gmp format of a text file written before the mark, by its first bytes; None for any other file."""
    for kind, starts in _UNMARKED_STARTS.items():
        if text.startswith(starts):
            return kind
    return None


def _check_own_file(out: Path, kind: str, flag: str) -> None:
    """Refuse to replace ``out`` unless gmp wrote it as a file of ``kind``."""
    have = file_kind(out)
    if have == kind:
        return
    what = f"a {have} file, not a {kind} one" if have else f"not a file gmp wrote (it has no {kind} mark)"
    raise OutputError(f"{flag} {out} is {what}; `overwrite=True` only replaces a {kind} file gmp wrote: move it "
                      f"or choose another {flag}.")


def _libc():
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        fn = lib.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _libc()
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2(a: Path, b: Path, flags: int) -> bool:
    """``renameat2(a, b, flags)``: True when done, False where the kernel or filesystem lacks it (the caller
    falls back); any other failure raises ``OSError`` naming ``b``."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # kernel or filesystem without this flag: fall back
    raise OSError(err, os.strerror(err), str(b))


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    return _renameat2(a, b, _RENAME_EXCHANGE)


_RENAME_NOREPLACE = 1


def _rename_noreplace(a: Path, b: Path) -> bool:
    """Rename ``a`` to ``b`` unless ``b`` exists (``renameat2(RENAME_NOREPLACE)``: ``FileExistsError``
    then); False where unsupported."""
    return _renameat2(a, b, _RENAME_NOREPLACE)


def _owner_tag() -> str:
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}"


def _owner_alive(name: str) -> bool | None:
    """True/False for a temporary of this host whose pid is (not) running; None: another host's."""
    try:
        rest = name.split(".tmp-", 1)[1] if ".tmp-" in name else name.split(".old-", 1)[1]
        host, pid, _ = rest.rsplit("-", 2)
        pid_i = int(pid)
    except (IndexError, ValueError):
        return None
    if host != _owner_tag().rsplit("-", 1)[0]:
        return None
    try:
        os.kill(pid_i, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_leftovers(out: Path) -> None:
    """Restore or remove what killed runs left next to ``out``; log what is kept."""
    parent = out.parent
    if not parent.is_dir():
        return
    for p in sorted(parent.glob(f".{out.name}.old-*")):
        alive = _owner_alive(p.name)
        if alive:
            continue
        if not out.exists() and alive is False:
            os.replace(p, out)  # killed between moving the old copy aside and the new one in
            log.warning("restored %s from %s (a run was killed while replacing it)", out, p.name)
        elif alive is False:
            shutil.rmtree(p, ignore_errors=True)
    for p in sorted(parent.glob(f".{out.name}.tmp-*")):
        alive = _owner_alive(p.name)
        if alive is False:
            shutil.rmtree(p, ignore_errors=True)
            log.info("removed %s, left by a killed run", p)
        elif alive is None:
            log.warning("%s was left by a run on another host or an older gmp; delete it if that run is gone", p)


def tree_bytes(path: Path) -> int:
    """Bytes of the files below ``path`` (those that vanish meanwhile not counted)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


#: numpy's words for a full device (``tofile``/``np.save`` preallocate the array's bytes): an OSError without errno
_NUMPY_FULL = re.compile(r"Not enough free space to write (\d+) bytes")


def is_full_disk(exc: OSError) -> bool:
    """Whether ``exc`` says the device (or a quota) is full: ENOSPC, EDQUOT, EFBIG, or numpy's own OSError
    ("Not enough free space to write N bytes after offset M"), which carries no errno."""
    return exc.errno in _FULL or (exc.errno is None and _NUMPY_FULL.search(str(exc)) is not None)


def full_disk_error(exc: OSError, out: Path, written: int | None = None) -> OutputError:
    """The one-line error for a full device while writing ``out`` (``written``: the bytes of it that were
    written before the device filled, removed since): what is free now and what the output needs at least
    (what was written plus the write that failed, where numpy says its size); the rest of the output is not
    known here, so the need is a lower bound."""
    try:
        free = shutil.disk_usage(out.parent if not out.exists() else out).free
    except OSError:
        free = None
    failed = _NUMPY_FULL.search(str(exc))
    need = (written or 0) + (int(failed.group(1)) if failed else 0)
    room = f"{_mib(free)} free now" if free is not None else "free space unknown"
    said = exc.strerror or "No space left on device"
    if need:
        parts = " and ".join(p for p, b in (("the part written before it filled", written),
                                            ("the write that failed", failed)) if b)
        short = f"; free at least {_mib(need - free)} more" if free is not None and need > free else "; free more"
        return OutputError(f"no space left on the device while writing {out} ({said}): it needs more than "
                           f"{_mib(need)} ({parts}), {room}{short} or choose another `out` on a larger device.")
    return OutputError(f"no space left on the device while writing {out} ({said}): {room}; free space or choose "
                       f"another `out` on a larger device.")


def _gib(n: float) -> str:
    """``n`` bytes in GiB, or in MiB below 1 GiB (50 MiB free read "0.0 GiB")."""
    return f"{n / 2**30:,.1f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:,.1f} MiB"


def check_memory(need_bytes: float, *, what: str, fix: str, error: type[GmpError] = GmpError,
                 param: str | None = None) -> None:
    """Refuse before a large allocation that cannot fit in the memory available now (the host's, capped by
    this process's memory cgroup: :mod:`gmp._memory`)."""
    from ._memory import check_memory as _check

    _check(need_bytes, what=what, fix=fix, error=error, param=param)


def check_disk(out: str | os.PathLike, need_bytes: float, *, what: str, fix: str,
               error: type[GmpError] = OutputError) -> None:
    """Refuse before writing ``need_bytes`` (an estimate) below ``out`` on a device without room."""
    probe = Path(os.path.abspath(out))
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return
    if need_bytes > free:
        raise error(f"{what} needs about {_gib(need_bytes)} of disk at {out}, {_gib(free)} is free on that device; "
                    f"{fix}")


@contextlib.contextmanager
def atomic_directory(out: str | os.PathLike, *, overwrite: bool = False, kind: str | None = None,
                     inputs: Iterable[str | os.PathLike] = (), own: Callable[[str], bool] | Collection[str] | None = None,
                     flag: str = "`out`") -> Iterator[Path]:
    """Yield a temporary directory that replaces ``out`` on success.

    ``out`` is claimed first (:func:`check_output_dir`; a claim this process
    took earlier is kept, with what it found then) and released when this
    ends. On success the temporary is moved in only if ``out`` is still what
    the claim found: nothing when nothing was there (a directory another
    program created meanwhile stays, and this fails), else the same directory
    holding nothing outside ``own`` (anything added meanwhile is named; the
    old directory is put back). On any exception the temporary directory is
    removed and ``out`` is left untouched (a full device becomes a one-line
    :class:`OutputError`). With ``overwrite=False`` an existing non-empty
    ``out`` is an error; with ``overwrite=True`` only a gmp output of ``kind``
    is replaced.
    """
    out = Path(out)
    check_output_dir(out, kind=kind, overwrite=overwrite, inputs=inputs, own=own, flag=flag)
    claim = claim_output(out, flag=flag)  # taken by check_output_dir (now or earlier in this process)
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{_owner_tag()}-", dir=out.parent))
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes it 0700
        yield tmp
        _put_in_place(tmp, out, claim, kind=kind, own=own, flag=flag)
        claim.written = True
    except OSError as exc:
        written = tree_bytes(tmp) if tmp is not None and tmp.exists() else None
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if is_full_disk(exc):
            raise full_disk_error(exc, out, written) from None
        raise
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        claim.release()


def _changed(out: Path, flag: str, how: str) -> OutputError:
    return OutputError(f"{flag} {out} {how} while gmp was writing it (not by this run); it was left as it is and "
                       f"the new output was not written: move it away or choose another {flag}.")


def _put_in_place(tmp: Path, out: Path, claim: Claim, *, kind: str | None,
                  own: Callable[[str], bool] | Collection[str] | None, flag: str) -> None:
    """Move the complete ``tmp`` to ``out``, replacing only the directory ``claim`` found there."""
    now = _identity(out)
    if now is not None and now != claim.identity:
        raise _changed(out, flag, "appeared" if claim.identity is None else "was replaced")
    if now is None:  # nothing there (as claimed, or the claimed one was removed meanwhile): never replace
        try:
            if not _rename_noreplace(tmp, out):
                os.rename(tmp, out)  # without RENAME_NOREPLACE: only an empty directory made this instant is replaced
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise _changed(out, flag, "appeared") from None
            raise
        return

    def gained() -> None:
        if own is not None:
            check_only_own(old, own, kind=kind, flag=flag, when=" (put there while gmp was writing it)")

    if _exchange(tmp, out):
        old = tmp  # now the previous directory
        try:
            if _identity(old) != claim.identity:
                raise _changed(out, flag, "was replaced")
            gained()
        except OutputError:
            _exchange(tmp, out)  # put the previous one back, untouched
            raise
        shutil.rmtree(old, ignore_errors=True)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{_owner_tag()}-", dir=out.parent))
    os.replace(out, old)  # a kill here leaves the complete old copy, restored by the next run
    try:
        if _identity(old) != claim.identity:
            raise _changed(out, flag, "was replaced")
        gained()
    except OutputError:
        os.replace(old, out)
        raise
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def write_claimed_file(out: str | os.PathLike, data: bytes, *, flag: str = "`out`") -> Path:
    """Write ``data`` to the file ``out`` claimed by :func:`check_output_file` (claimed now if it was not): through
    a temporary, moved in only if ``out`` is still what the claim found (absent: never replaced)."""
    out = Path(out)
    claim = claim_output(out, flag=flag)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp-{_owner_tag()}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            if claim.identity is None:
                try:
                    os.link(tmp, out)  # fails if anything is there now: never replaces a file made meanwhile
                except FileExistsError:
                    raise _changed(out, flag, "appeared") from None
            elif not claim.same():
                raise _changed(out, flag, "was replaced" if out.exists() else "was removed")
            else:
                os.replace(tmp, out)
            claim.written = True
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        if is_full_disk(exc):
            raise full_disk_error(exc, out) from None
        raise
    finally:
        claim.release()
    return out


def write_json(path: str | os.PathLike, obj: Mapping[str, Any], *, finite: bool = False,
               error: type[GmpError] = OutputError) -> None:
    """Write ``obj`` as indented JSON (atomically within its directory).

    ``finite``: refuse (``error``, nothing written) an ``obj`` holding NaN or an infinity: JSON has no such
    number, and Python's ``NaN``/``Infinity`` are refused by strict parsers and read back as a damaged file.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, sort_keys=False, default=json_default, allow_nan=not finite)
            f.write("\n")
        os.replace(tmp, path)
    except ValueError:
        tmp.unlink(missing_ok=True)
        found = non_finite_value(obj)
        if found is None:
            raise
        key, value = found
        raise error(f"{path}: {key} is {value}, which is not a JSON number; nothing was written.") from None
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if is_full_disk(exc):
            raise full_disk_error(exc, path) from None
        raise


def non_finite_value(obj: Any, key: str = "") -> tuple[str, float] | None:
    """``(dotted key, value)`` of the first NaN or infinity inside ``obj`` (dicts, lists, numpy values), else
    None."""
    if isinstance(obj, Mapping):
        items = ((f"{key}.{k}" if key else str(k), v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, np.ndarray)):
        items = ((f"{key}[{i}]", v) for i, v in enumerate(obj))
    else:
        if isinstance(obj, (float, np.floating)) and not np.isfinite(obj):
            return key, float(obj)
        return None
    for k, v in items:
        found = non_finite_value(v, k)
        if found is not None:
            return found
    return None


def json_default(o: Any) -> Any:
    """``json.dump(default=...)`` for numpy scalars/arrays and paths (anything else: ``str``)."""
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def read_versioned_json(
    path: Path,
    *,
    fmt: str,
    max_version: int,
    error: type[GmpError],
    fix: str,
) -> dict[str, Any]:
    """Read a gmp JSON header and check its ``format`` and ``schema_version``.

    Raises ``error`` with a one-line message naming ``path`` and the fix.
    """
    if not path.is_file():
        raise error(f"{not_a_file(path)}; {fix}")
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if size > MAX_HEADER_BYTES:  # parsed whole, into several times its size of Python objects: refused unread
        raise error(f"{path} is {size / 2**20:,.0f} MiB, expected at most {MAX_HEADER_BYTES >> 20} MiB for a gmp "
                    f"header (gmp refuses to make a placement whose headers would be this big); {fix}")
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError) as exc:
        raise error(f"{path} is not valid JSON ({exc}); {fix}") from None
    except RecursionError:
        raise error(f"{path} is nested too deeply to be a gmp header; {fix}") from None
    depth = json_depth(obj)
    if depth > MAX_JSON_DEPTH:
        raise error(f"{path} is nested {depth} levels deep, expected at most {MAX_JSON_DEPTH}; {fix}")
    # values are shown as the file holds them (JSON: true, null, "3"), never as Python reprs
    if not isinstance(obj, dict):
        raise error(f"{path} holds a JSON {_json_kind(obj)}, expected an object with \"format\": "
                    f"{shown_value(fmt)}; {fix}")
    if "format" not in obj:  # worded as header_value words a missing key
        raise error(f"{path} lacks the key 'format' ({shown_value(fmt)}); {fix}")
    if obj["format"] != fmt:
        raise error(f"{path} has format {shown_value(obj['format'])}, expected {shown_value(fmt)}; {fix}")
    version = obj.get("schema_version")
    if "schema_version" not in obj:
        raise error(f"{path} lacks the key 'schema_version' (a positive integer); {fix}")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise error(f"{path} has schema_version {shown_value(version)}, expected a positive integer; {fix}")
    if version > max_version:
        raise error(
            f"{path} has schema_version {version}; this gmp reads up to {max_version}. "
            f"Upgrade gmp or re-create the file with this version."
        )
    return obj


def _json_kind(obj: Any) -> str:
    """What a parsed JSON value is, in JSON's words (``array``, ``string``, ``number``, ``null``, ...)."""
    if obj is None:
        return "null"
    if isinstance(obj, bool):
        return "boolean"
    if isinstance(obj, (int, float)):
        return "number"
    return {list: "array", str: "string", dict: "object"}.get(type(obj), type(obj).__name__)


#: deepest nesting a gmp JSON header may have (free-form sections included)
MAX_JSON_DEPTH = 32
#: largest gmp JSON file read [bytes]: the biggest a placement writes (report.json of
#: :data:`gmp.topology.MAX_PLACEMENT_WORKERS` workers, about 170 MB) with room to spare; a bigger one (1.9 GB
#: of --workers 7000, written before that limit) would take several times its size to parse
MAX_HEADER_BYTES = 256 << 20


def json_depth(obj: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative: no recursion limit)."""
    depth, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            depth = max(depth, d)
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            depth = max(depth, d)
            stack.extend((v, d + 1) for v in o)
        if depth > MAX_JSON_DEPTH:
            break
    return depth


_KINDS = {
    "int": "an integer", "int>=0": "a non-negative integer", "int>=1": "a positive integer",
    "number": "a finite number", "str": "a string", "dict": "an object", "list": "a list", "bool": "true or false",
}


class HeaderCount:
    """A read-only attribute ``int(self.meta[name])``: a count the header of a file states
    (``num_samples = HeaderCount()`` on a class whose instances hold the header as ``meta``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return int(obj.meta[self.key])

def header_value(obj: Mapping[str, Any], key: str, kind: str, *, path: Path, error: type[GmpError], fix: str,
                 optional: bool = False, where: str = "") -> Any:
    """``obj[key]`` checked against ``kind`` (see ``_KINDS``); one-line ``error`` otherwise.

    Integers must be JSON integers (``2.5``, ``"2"`` and ``true`` are refused,
    not truncated or coerced). ``optional`` allows a missing key or null
    (returns None).
    """
    name = f"{where}{key}"
    if not isinstance(obj, Mapping):
        raise error(f"{path}: {where.rstrip('.') or 'the header'} must be an object, got "
                    f"{type(obj).__name__}; {fix}")
    if key not in obj or obj[key] is None:
        if optional:
            return None
        what = "lacks" if key not in obj else "has null for"
        raise error(f"{path} {what} the key {name!r} ({_KINDS[kind]}); {fix}")
    v = obj[key]
    ok: bool
    if kind.startswith("int"):
        ok = isinstance(v, int) and not isinstance(v, bool)
        if ok and kind == "int>=0":
            ok = v >= 0
        elif ok and kind == "int>=1":
            ok = v >= 1
    elif kind == "number":
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))
    elif kind == "str":
        ok = isinstance(v, str)
    elif kind == "dict":
        ok = isinstance(v, dict)
    elif kind == "list":
        ok = isinstance(v, list)
    else:
        ok = isinstance(v, bool)
    if not ok:
        shown = json.dumps(v, default=str)
        shown = shown if len(shown) <= 40 else shown[:40] + "…"
        raise error(f"{path}: {name} must be {_KINDS[kind]}, got {shown}; {fix}")
    return v


def verify_enabled(verify: bool | None = None) -> bool:
    """Whether content hashes and array checks run: ``verify`` if given, else on unless the
    environment sets ``GMP_NO_VERIFY`` to 1/true/yes (the documented opt-out)."""
    if verify is not None:
        return bool(verify)
    return os.environ.get("GMP_NO_VERIFY", "").strip().lower() not in ("1", "true", "yes", "on")


def hash_arrays(arrays: Sequence[tuple[str, np.ndarray]]) -> str:
    """sha256 over named arrays: name, dtype, shape, then the raw bytes.

    Works on memory-mapped arrays without loading them whole.
    """
    h = hashlib.sha256()
    for name, arr in arrays:
        arr = np.asanyarray(arr)  # keeps np.memmap, so the pages read can be released
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        flat = arr.reshape(-1) if arr.flags.c_contiguous else np.ascontiguousarray(arr).reshape(-1)
        step = max(1, _HASH_CHUNK // max(1, flat.itemsize))
        for start in range(0, flat.size, step):
            h.update(memoryview(np.ascontiguousarray(flat[start : start + step])).cast("B"))
            release_pages(flat, start, start + step)
    return h.hexdigest()


def release_pages(arr: np.ndarray, start: int, stop: int) -> None:
    """Unmap the pages of ``arr[start:stop]`` from this process if ``arr`` is a file-backed memmap.

    Streaming once over a memory-mapped array leaves every page it touched
    mapped, so the process's RSS grows by the whole file although the data is
    only in the page cache. ``madvise(MADV_DONTNEED)`` drops the mapping (read-
    only and shared file mappings lose nothing: a later access faults the page
    back in from the page cache). A no-op for in-memory arrays and where
    ``madvise`` is unavailable. ``arr`` must be 1-D; ``start``/``stop`` are
    element indices (clipped to the array).
    """
    mm = getattr(arr, "_mmap", None)
    if mm is None or not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED") or arr.ndim != 1:
        return
    stop = min(int(stop), arr.shape[0])
    if stop <= start:
        return
    try:
        base = np.frombuffer(mm, dtype=np.uint8).ctypes.data
    except (ValueError, TypeError):  # closed or not exportable
        return
    page = mmap.PAGESIZE
    lo = arr.ctypes.data + int(start) * arr.strides[0] - base
    hi = arr.ctypes.data + stop * arr.strides[0] - base
    lo -= lo % page
    if hi > lo >= 0:
        mm.madvise(mmap.MADV_DONTNEED, lo, min(hi, len(mm)) - lo)


def load_npy(path: Path, *, error: type[GmpError], mmap: bool = True, fix: str) -> np.ndarray:
    """Load a ``.npy`` file (memory-mapped by default) with a clear error."""
    if not path.is_file():
        raise error(f"{not_a_file(path)}; {fix}")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise error(f"{path} is not a readable .npy array ({npy_problem(exc)}); {fix}") from None


def npy_problem(exc: BaseException) -> str:
    """Why numpy could not read a ``.npy`` file, in a few words. numpy says a file without the ``.npy``
    magic "contains pickled (object) data" and advises loading it unsafely with ``allow_pickle``: that file
    is garbage or a pickle, and gmp never unpickles, so the advice is never quoted."""
    text = str(exc).strip()
    if "Object arrays" in text or "Python objects" in text:  # a .npy of dtype object (read, or mapped)
        return "an array of Python objects (a pickle, which gmp never loads)"
    if "pickle" in text.lower():
        return "garbage or a pickle, which gmp never loads"
    return text.splitlines()[0][:120] if text else type(exc).__name__


def not_a_directory(out: Path, place: Path, flag: str) -> OutputError:
    """The refusal of the output directory ``out`` (named by ``flag``) because ``place``, ``out`` itself or a
    parent of it, exists and is not a directory."""
    what = f"{flag} {out} exists and" if place == out else f"{flag} {out}: {place}"
    return OutputError(f"{what} is not a directory; choose another {flag}.")


def not_a_file(path: Path) -> str:
    """Why ``path``, expected to be a regular file, is not one: ``"PATH not found"``, ``"PATH is a directory"``,
    ``"PATH is a named pipe (FIFO), not a regular file"``, a broken symbolic link, unreadable, ..."""
    try:
        mode = path.stat().st_mode  # what a symbolic link points at
    except FileNotFoundError:
        if path.is_symlink():
            return f"{path} is a broken symbolic link (to {os.readlink(path)})"
        return f"{path} not found"
    except NotADirectoryError:
        return f"{path} not found (a parent of it is a file)"
    except OSError as exc:
        return f"{path} cannot be read ({(exc.strerror or str(exc)).lower()})"
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    what = next((name for test, name in kinds if test(mode)), "a special file")
    return f"{path} is {what}, not a regular file"


def read_only_file_system(path: str | os.PathLike) -> bool:
    """Whether ``path`` lies on a file system mounted read-only (``ST_RDONLY``; False where it cannot be told)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def index_dtype(max_value: int) -> np.dtype:
    """int32 when ``max_value`` fits, else int64."""
    return np.dtype(np.int32) if max_value <= np.iinfo(np.int32).max else np.dtype(np.int64)
