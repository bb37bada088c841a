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
parents, a directory holding an input, a symbolic link, or (with
``overwrite``) an existing directory that is not a gmp output of the same kind.
Directories are created with the user's umask (``mkdtemp`` alone gives 0700).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import json
import logging
import mmap
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .errors import GmpError, OutputError

log = logging.getLogger(__name__)

#: bytes read per hash update; large enough to keep sha256 near memory speed.
_HASH_CHUNK = 1 << 24

#: the header file that makes a directory a gmp output of each kind
KIND_FILES = {"gmp.dataset": "dataset.json", "gmp.placement": "manifest.json", "gmp.report": "report.json"}
KIND_NAMES = {"gmp.dataset": "a gmp dataset", "gmp.placement": "a placement manifest",
              "gmp.report": "a gmp report directory"}
#: errno values that mean "the device is full"
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def output_kind(path: Path) -> str | None:
    """The gmp format whose header ``path`` holds (``"gmp.dataset"``, ...), or None."""
    for kind, name in KIND_FILES.items():
        f = path / name
        if f.is_file():
            try:
                with open(f, encoding="utf-8") as fh:
                    head = json.load(fh)
            except (OSError, ValueError, RecursionError):
                continue
            if isinstance(head, dict) and head.get("format") == kind:
                return kind
    return None


def check_output_dir(out: str | os.PathLike, *, kind: str | None, overwrite: bool = False,
                     inputs: Iterable[str | os.PathLike] = (), flag: str = "--out") -> Path:
    """Refuse an output directory that cannot or must not be (re)written; cheap, so call it first.

    Refused, each with a one-line :class:`~gmp.errors.OutputError`: a symbolic
    link; the working directory or one of its parents; a directory that holds
    one of ``inputs``; a path below an existing file; an existing file; an
    existing non-empty directory without ``overwrite``, or (with ``overwrite``)
    one that is not a gmp output of ``kind`` (with ``kind=None`` no
    non-empty directory is ever replaced).
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
    for anc in target.parents:
        if anc.exists() or anc.is_symlink():
            if not anc.is_dir():
                raise OutputError(f"{flag} {out}: {anc} is not a directory; choose another {flag}.")
            if not os.access(anc, os.W_OK | os.X_OK) and not out.exists():
                raise OutputError(f"{flag} {out}: cannot write in {anc} (permission denied); choose another {flag}.")
            break
    clean_leftovers(out)  # may put back an old copy a killed run had moved aside
    if out.exists():
        if not out.is_dir():
            raise OutputError(f"{flag} {out} exists and is not a directory; choose another {flag}.")
        if any(out.iterdir()):
            if not overwrite:
                raise OutputError(f"{flag} {out} already exists and is not empty; choose another {flag} or pass "
                                  f"--overwrite.")
            have = output_kind(out)
            if kind is None or have != kind:
                what = KIND_NAMES.get(kind or "", "a gmp output")
                header = KIND_FILES.get(kind or "", "gmp header")
                is_ = f"is {KIND_NAMES[have]}, not {what}" if have else f"is not {what} (no {header})"
                raise OutputError(f"{flag} {out} {is_}; --overwrite only replaces {what}: choose another {flag}.")
        if not os.access(out.parent, os.W_OK | os.X_OK):
            raise OutputError(f"{flag} {out}: cannot write in {out.parent} (permission denied); choose another {flag}.")
    for inp in inputs:
        if Path(os.path.realpath(inp)) == real:
            raise OutputError(f"{flag} {out} is the input {inp}; choose another {flag}.")
    return out


def owner_of(path: str | os.PathLike) -> str | None:
    """``"gmp.dataset"`` or ``"gmp.placement"`` when ``path`` lies in such a directory (its files belong to it:
    a stray file there can replace or corrupt what gmp reads), else None."""
    parent = Path(path).parent
    kind = output_kind(parent) if parent.is_dir() else None
    return kind if kind in ("gmp.dataset", "gmp.placement") else None


def check_output_file(out: str | os.PathLike, *, overwrite: bool = False, flag: str = "--out") -> Path:
    """Refuse an output file that must not be (re)written; cheap, so call it first.

    Refused, each with a one-line :class:`~gmp.errors.OutputError`: a symbolic link; a directory; a file
    inside a gmp dataset or placement manifest (their files belong to them: a stray ``dataset.json`` or
    ``report.json`` there replaces what gmp reads); an existing file without ``overwrite``.
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
    if out.exists() and not overwrite:
        raise OutputError(f"{flag} {out} already exists; choose another {flag} or pass --overwrite.")
    return out


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


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # kernel or filesystem without RENAME_EXCHANGE: fall back
    raise OSError(err, os.strerror(err), str(b))


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


def _tree_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def full_disk_error(exc: OSError, out: Path, written: int | None = None) -> OutputError:
    """The one-line error for a full device while writing ``out``."""
    try:
        free = shutil.disk_usage(out.parent if not out.exists() else out).free
    except OSError:
        free = None
    what = f"{_mib(written)} were written before it filled; " if written else ""
    room = f"{_mib(free)} free now" if free is not None else "free space unknown"
    need = f"at least {_mib(written)} more" if written else "more space"
    return OutputError(f"no space left on the device while writing {out} ({exc.strerror}): {what}{room}; "
                       f"free {need} or choose another --out on a larger device.")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_memory(need_bytes: float, *, what: str, fix: str, error: type[GmpError] = GmpError) -> None:
    """Refuse before a large allocation that cannot fit in the memory available now."""
    import psutil

    avail = psutil.virtual_memory().available
    if need_bytes > avail:
        raise error(f"{what} needs about {_gib(need_bytes)} of memory, {_gib(avail)} is available; {fix}")


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
                     inputs: Iterable[str | os.PathLike] = ()) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``out`` on success.

    On any exception the temporary directory is removed and ``out`` is left
    untouched (a full device becomes a one-line :class:`OutputError`). With
    ``overwrite=False`` an existing non-empty ``out`` is an error; with
    ``overwrite=True`` only a gmp output of ``kind`` is replaced (see
    :func:`check_output_dir`, which the caller should also run before
    expensive work).
    """
    out = Path(out)
    check_output_dir(out, kind=kind, overwrite=overwrite, inputs=inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in _FULL:
            raise full_disk_error(exc, out) from None
        raise OutputError(f"cannot create {out.parent}: {exc.strerror}; choose another --out.") from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{_owner_tag()}-", dir=out.parent))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes it 0700
        yield tmp
        if out.exists() and not _exchange(tmp, out):
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{_owner_tag()}-", dir=out.parent))
            os.replace(out, old)  # a kill here leaves the complete old copy, restored by the next run
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        elif not out.exists():
            os.replace(tmp, out)
        shutil.rmtree(tmp, ignore_errors=True)  # after an exchange: the old directory
    except OSError as exc:
        written = _tree_bytes(tmp) if tmp.exists() else None
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno in _FULL:
            raise full_disk_error(exc, out, written) from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: str | os.PathLike, obj: Mapping[str, Any]) -> None:
    """Write ``obj`` as indented JSON (atomically within its directory)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, sort_keys=False, default=json_default)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno in _FULL:
            raise full_disk_error(exc, path) from None
        raise


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
        raise error(f"{path} not found; {fix}")
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
    if not isinstance(obj, dict) or obj.get("format") != fmt:
        got = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
        raise error(f"{path} has format {got!r}, expected {fmt!r}; {fix}")
    version = obj.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise error(f"{path} has schema_version {version!r}, expected a positive integer; {fix}")
    if version > max_version:
        raise error(
            f"{path} has schema_version {version}; this gmp reads up to {max_version}. "
            f"Upgrade gmp or re-create the file with this version."
        )
    return obj


#: deepest nesting a gmp JSON header may have (free-form sections included)
MAX_JSON_DEPTH = 32


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
        raise error(f"{path} not found; {fix}")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise error(f"{path} is not a readable .npy array ({exc}); {fix}") from None


def index_dtype(max_value: int) -> np.dtype:
    """int32 when ``max_value`` fits, else int64."""
    return np.dtype(np.int32) if max_value <= np.iinfo(np.int32).max else np.dtype(np.int64)
