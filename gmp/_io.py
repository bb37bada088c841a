"""Shared helpers for gmp's on-disk formats: atomic directories, versioned
JSON headers and content hashes.

Every directory gmp writes is first built under a hidden temporary sibling
(``.NAME.tmp-XXXX``) and renamed into place only when complete, so a crash never
leaves a directory that reads as valid.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .errors import GmpError

#: bytes read per hash update; large enough to keep sha256 near memory speed.
_HASH_CHUNK = 1 << 24


@contextlib.contextmanager
def atomic_directory(out: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that is renamed to ``out`` on success.

    On any exception the temporary directory is removed and ``out`` is left
    untouched. With ``overwrite=False`` an existing non-empty ``out`` is an error.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise GmpError(f"{out} exists and is not a directory; choose another --out.")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise GmpError(f"{out} already exists and is not empty; choose another --out or pass --overwrite.")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: str | os.PathLike, obj: Mapping[str, Any]) -> None:
    """Write ``obj`` as indented JSON (atomically within its directory)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False, default=json_default)
        f.write("\n")
    os.replace(tmp, path)


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
