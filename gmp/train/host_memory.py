"""Keeping a CPU step's freed memory for the next step (glibc's allocator, ``GMP_KEEP_HOST_MEMORY``).

A step on the CPU allocates its activations and gradients afresh: at batch 8,192 and embedding
dim 64 the DCN's deep input alone is 8,192 x 1,677 floats, 55 MB, and a step makes dozens of
tensors that size. glibc's ``malloc`` serves every block above its mmap threshold (at most 32 MiB)
with a fresh ``mmap`` and returns it to the kernel on ``free``; the next step's tensor of the same
size then faults in and zeroes every page again. On this project's 2-core machine that page work
was more than half of a step's CPU time (docs/train.md, "Keeping freed host memory": 1,520-1,780 ms
a step at batch 8,192, dim 64 against 574-747 ms with the memory kept).

:func:`kept_between_steps` turns that off while training runs, with ``mallopt``: no block is served
by its own mmap (``M_MMAP_MAX = 0``), and the heap's free top is not given back (``M_TRIM_THRESHOLD``
= the largest ``size_t``: glibc stores the ``int`` -1 as that). Freed blocks stay in the process and
the next step reuses them. The cost is resident memory: the process keeps its largest step's working
set while it trains. On leaving, mmaps and trimming are turned back on (glibc's initial values,
128 KiB and 64k maps; the threshold then stays fixed instead of adapting, glibc's rule once ``mallopt``
sets it) and ``malloc_trim`` gives the kept memory back, so a notebook that trained keeps nothing.
:func:`gmp.train.run.train` enters it once the trainer is built (the set-up's large temporaries are
freed to the system before) around the epochs, only when every local table is on the CPU (a GPU
step's tensors are not ``malloc``'s). The values, the order of operations and so every result are
unchanged: it is the same computation, with the pages already there.

``GMP_KEEP_HOST_MEMORY=0`` leaves glibc's allocator as it is (e.g. beside other jobs that need the
memory back); on a C library without ``mallopt`` (not glibc) nothing changes either. The same effect
for any process, set before it starts: ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=<bytes>`` (how the
docs' peers were measured with it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from typing import Iterator

from ..errors import TrainingError

#: the environment variable: "1" (default) keeps freed memory, "0" leaves the allocator as it is
KEEP_ENV = "GMP_KEEP_HOST_MEMORY"
#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
#: glibc's initial values (malloc.c: DEFAULT_TRIM_THRESHOLD, DEFAULT_MMAP_MAX), set back on leaving
DEFAULT_TRIM_THRESHOLD = 128 * 1024
DEFAULT_MMAP_MAX = 65536


def wanted() -> bool:
    """``GMP_KEEP_HOST_MEMORY`` read and checked: True unless it is ``0``."""
    value = os.environ.get(KEEP_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise TrainingError(f"The environment variable {KEEP_ENV} is {value!r}; expected 1 (keep a step's freed "
                            f"memory for the next step, the default) or 0 (leave the C library's allocator as it is).")
    return value != "0"


def _libc():
    """glibc (with ``mallopt`` and ``malloc_trim``), or None (another C library, another system)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: their mallopt differs or is a stub
            return None
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def keep_freed_memory(devices) -> bool:
    """Keep freed memory in the process (module docstring) when every device in ``devices`` is the CPU and
    ``GMP_KEEP_HOST_MEMORY`` is not ``0``, until :func:`release_freed_memory`. Returns whether it did."""
    if not wanted() or any(getattr(d, "type", d) != "cpu" for d in devices):
        return False
    libc = _libc()
    if libc is None:
        return False
    # mallopt returns 1 on success; the trim threshold's int -1 is stored as the largest size_t: never trim
    return bool(libc.mallopt(M_MMAP_MAX, 0)) & bool(libc.mallopt(M_TRIM_THRESHOLD, -1))


def release_freed_memory() -> None:
    """glibc's mmaps and trimming back on (its initial values) and the kept free memory given back."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
        libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
        libc.malloc_trim(0)


@contextlib.contextmanager
def kept_between_steps(devices) -> Iterator[bool]:
    """:func:`keep_freed_memory` inside the block (its result is the block's value), released on leaving."""
    kept = keep_freed_memory(devices)
    try:
        yield kept
    finally:
        if kept:
            release_freed_memory()
