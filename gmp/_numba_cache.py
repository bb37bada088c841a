"""Where numba keeps gmp's compiled kernels (``@numba.njit(cache=True)``).

Numba writes its cache next to the sources (``gmp/**/__pycache__``). In a
read-only install (a system site-packages, a container image, a shared
read-only mount) that fails, and where numba finds no other place either it
raises ``RuntimeError: cannot cache function ...: no locator available`` when
the module defining the kernel is imported: a traceback at start. So, unless
``NUMBA_CACHE_DIR`` is set, gmp checks once that its package directory takes
a cache and otherwise points numba at a per-user directory under the system's
temporary directory (``$TMPDIR/gmp-numba-cache-UID``): kernels compile once
per machine instead of failing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

PACKAGE_DIR = Path(__file__).resolve().parent


def _writable(directory: Path) -> bool:
    """Whether a file can be created in ``directory`` (made if missing), tried the way numba does."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError:
        return False
    return True


def fallback_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"gmp-numba-cache-{uid}"


def configure(config: Any = None, *, package_dir: Path = PACKAGE_DIR,
              environ: Mapping[str, str] = os.environ) -> str | None:
    """Point ``config`` (``numba.config``) at :func:`fallback_dir` when ``package_dir``'s ``__pycache__`` takes
    no cache and ``NUMBA_CACHE_DIR`` is not set; returns the directory chosen, or None (numba's own)."""
    if environ.get("NUMBA_CACHE_DIR") or _writable(package_dir / "__pycache__"):
        return None
    if config is None:
        from numba.core import config  # noqa: PLC0415 - numba is imported by gmp's kernels anyway
    target = fallback_dir()
    target.mkdir(parents=True, exist_ok=True)
    config.CACHE_DIR = str(target)
    return str(target)
