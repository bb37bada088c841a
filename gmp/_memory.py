"""Memory this process may still allocate: the host's available RAM, capped by its memory cgroup and
by its address-space limit (``ulimit -v``, ``prlimit --as``).

A container, a batch job or ``systemd-run -p MemoryMax=`` puts a process in a
memory cgroup whose limit can be far below the host's RAM; past it the kernel
kills the process (exit 137, no message). So a check before a large allocation
compares the estimate with the smaller of

* the host's available memory (``psutil.virtual_memory().available``), and
* the cgroup's room: its limit less what it holds now, reclaimable page cache
  (``inactive_file``) not counted. The limit is the smallest along the
  cgroup's path up to the hierarchy's root (a parent's limit binds its
  children).

The cgroup is found the way the kernel describes it:

* ``/proc/self/cgroup``: ``ID:CONTROLLERS:PATH`` lines; cgroup v1 names the
  ``memory`` controller, v2 has the single line ``0::PATH``;
* ``/proc/self/mountinfo``: the mount of that hierarchy (fs type ``cgroup``
  with the ``memory`` super option, or ``cgroup2``), its root within the
  hierarchy and its mount point, so ``PATH`` maps to a directory under
  ``/sys/fs/cgroup`` also inside a container;
* v1 files ``memory.limit_in_bytes``, ``memory.usage_in_bytes``; v2 files
  ``memory.max`` (``max``: none), ``memory.current``; both ``memory.stat``.

Anything missing or unreadable means "no cgroup limit known" (never an error).

An address-space limit (``RLIMIT_AS``) makes an allocation past it fail (a
``MemoryError``, torch's "DefaultCPUAllocator: can't allocate memory") instead
of a kill; its room is the soft limit less the process's mapped size now
(``VmSize`` in ``/proc/self/status``), a lower bound of what it may still
allocate (reserved but untouched mappings count). :func:`is_out_of_memory`
recognises the errors such an allocation raises.
Every reader takes ``root`` (default ``/``) so tests run them on a fake tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import GmpError

#: a v1 limit at or above this is "no limit" (the kernel shows 2^63 - 4096 rounded to pages)
_UNLIMITED = 1 << 60


@dataclass(frozen=True)
class CgroupMemory:
    """The memory cgroup of this process: ``limit`` bytes (the smallest along its path), ``usage`` bytes
    charged now less reclaimable cache, ``path`` the cgroup (as in ``/proc/self/cgroup``), ``version`` 1 or 2."""

    limit: int
    usage: int
    path: str
    version: int

    @property
    def available(self) -> int:
        return max(0, self.limit - self.usage)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    if text is None or text == "max":
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if 0 <= v < _UNLIMITED else None


def _under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _find_mount(root: Path, version: int) -> tuple[str, str] | None:
    """(root within the hierarchy, mount point) of the memory hierarchy (v1) or of cgroup2 (v2)."""
    text = _read(root / "proc/self/mountinfo")
    if text is None:
        return None
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if sep < 5 or len(fields) < sep + 2:
            continue
        fstype = fields[sep + 1]
        supers = fields[sep + 3].split(",") if len(fields) > sep + 3 else []
        if (version == 2 and fstype == "cgroup2") or (version == 1 and fstype == "cgroup" and "memory" in supers):
            return fields[3], fields[4].replace("\\040", " ")
    return None


def _cgroup_path(root: Path) -> tuple[int, str] | None:
    """(version, path) of this process's memory cgroup; v1's memory line wins over v2's ``0::``."""
    text = _read(root / "proc/self/cgroup")
    if text is None:
        return None
    v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            return 1, parts[2]
        if parts[0] == "0" and parts[1] == "":
            v2 = (2, parts[2])
    return v2


def _inactive_file(stat: str | None, version: int) -> int:
    keys = ("total_inactive_file", "inactive_file") if version == 1 else ("inactive_file",)
    values = {}
    for line in (stat or "").splitlines():
        k, _, v = line.partition(" ")
        if k in keys:
            values[k] = _int(v) or 0
    return next((values[k] for k in keys if k in values), 0)


def cgroup_memory(root: str | os.PathLike = "/") -> CgroupMemory | None:
    """The memory cgroup's limit and usage, or None where no limit is set or none can be read."""
    root = Path(root)
    found = _cgroup_path(root)
    if found is None:
        return None
    version, path = found
    mount = _find_mount(root, version)
    if mount is None:
        return None
    mroot, mpoint = mount
    top = _under(root, mpoint)
    rel = path[len(mroot):] if mroot == "/" or path == mroot or path.startswith(mroot.rstrip("/") + "/") else None
    leaf = top / rel.lstrip("/") if rel is not None else top
    if not leaf.is_dir():  # a container that shows the host's path but mounts its own cgroup at the top
        leaf = top
    limit_file, usage_file = (("memory.limit_in_bytes", "memory.usage_in_bytes") if version == 1
                              else ("memory.max", "memory.current"))
    limits = []
    d = leaf
    while True:
        v = _int(_read(d / limit_file))
        if v is not None:
            limits.append(v)
        if d == top or top not in d.parents:
            break
        d = d.parent
    if not limits:
        return None
    usage = _int(_read(leaf / usage_file)) or 0
    usage = max(0, usage - _inactive_file(_read(leaf / "memory.stat"), version))
    return CgroupMemory(limit=min(limits), usage=usage, path=path, version=version)


def host_available() -> int | None:
    """The host's available memory in bytes (psutil), or None without psutil."""
    try:
        import psutil  # noqa: PLC0415 - optional at import time
    except ImportError:  # pragma: no cover - a dependency of gmp
        return None
    return int(psutil.virtual_memory().available)


def address_space_room(root: str | os.PathLike = "/") -> tuple[int, int] | None:
    """``(room, limit)`` in bytes under this process's address-space limit (``RLIMIT_AS``, soft): the limit
    less the size of its mappings now (``VmSize``), or None without a limit (or where it cannot be read)."""
    import resource  # noqa: PLC0415 - POSIX only

    try:
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (OSError, ValueError):  # pragma: no cover
        return None
    if limit == resource.RLIM_INFINITY or limit < 0 or limit >= _UNLIMITED:
        return None
    size = None
    for line in (_read(Path(root) / "proc/self/status") or "").splitlines():
        if line.startswith("VmSize:"):
            size = _int(line.split()[1])
    if size is None:
        return None
    return max(0, limit - 1024 * size), int(limit)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed host allocation: a ``MemoryError`` (numpy, numba, METIS through gmp), or
    torch's CPU allocator's ``RuntimeError`` ("DefaultCPUAllocator: can't allocate memory" on POSIX, "not
    enough memory" on Windows). Nothing else: another ``RuntimeError`` is a bug to be seen as one."""
    if isinstance(exc, MemoryError):
        return True
    if type(exc) is not RuntimeError:
        return False
    text = str(exc)
    return "DefaultCPUAllocator: can't allocate memory" in text or "DefaultCPUAllocator: not enough memory" in text


def allocation_failed(exc: BaseException) -> str:
    """What an out-of-memory error (:func:`is_out_of_memory`) says failed, without torch's stack: ``can't
    allocate memory: you tried to allocate 8000000 bytes. Error code 12``; ``MemoryError`` when it says nothing."""
    return str(exc).split("DefaultCPUAllocator: ", 1)[-1].split(" (", 1)[0].strip() or type(exc).__name__


def available_text() -> str:
    """``N GiB is available now`` (with :func:`memory_note`): the memory left, for an out-of-memory line."""
    return f"{available_memory() / 2**30:,.1f} GiB is available now{memory_note()}"


#: the root the readers look under (tests point it at a fake tree)
ROOT = "/"


def available_memory() -> int:
    """Bytes this process may still allocate on the host: the smallest of the host's available memory, its
    memory cgroup's room and its address-space limit's room (module docstring)."""
    host = host_available()
    group = cgroup_memory(ROOT)
    space = address_space_room(ROOT)
    values = [v for v in (host, group.available if group else None, space[0] if space else None) if v is not None]
    return min(values) if values else 1 << 62


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def memory_note() -> str:
    """`` (the memory cgroup PATH limits this process to N GiB)`` when a cgroup limit binds, `` (its
    address-space limit, ulimit -v, is N GiB)`` when that binds, else ""."""
    group = cgroup_memory(ROOT)
    host = host_available()
    space = address_space_room(ROOT)
    others = [v for v in (host, group.available if group else None) if v is not None]
    if space is not None and (not others or space[0] < min(others)):
        return f" (its address-space limit, ulimit -v, is {_gib(space[1])})"
    if group is None or (host is not None and group.available >= host):
        return ""
    return f" (the memory cgroup {group.path} limits this process to {_gib(group.limit)})"


def check_memory(need_bytes: float, *, what: str, fix: str, error: type[GmpError] = GmpError,
                 param: str | None = None) -> None:
    """Refuse before a large allocation that cannot fit in the memory available now (the host's, capped by
    the cgroup's). ``what`` names the parameter's value (``"The 'embedding_dim' parameter 100000"``); the
    error carries ``.param`` so the CLI words it with its flag."""
    avail = available_memory()
    if need_bytes > avail:
        exc = error(f"{what} needs about {_gib(need_bytes)} of memory, {_gib(avail)} is available"
                    f"{memory_note()}; {fix}")
        if param is not None:
            exc.param = param
        raise exc
