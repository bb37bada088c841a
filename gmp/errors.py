"""Errors raised by gmp.

Every error a user can cause is a :class:`GmpError`. Subclasses also inherit
the builtin they resemble, so callers that catch ``ValueError`` or ``OSError``
keep working. Messages name the thing, what was expected, what was found and
the fix; the CLI prints them as one line on stderr and exits non-zero.
"""

from __future__ import annotations


class GmpError(Exception):
    """Base class of every error gmp raises on purpose."""


class DatasetError(GmpError, ValueError):
    """A prepared dataset is missing, corrupt, or of an unsupported version."""


class ImportDataError(GmpError, ValueError):
    """Raw input could not be imported (bad lines, empty input, bad options)."""


class GraphError(GmpError, ValueError):
    """A graph's arrays are inconsistent."""


class TopologyError(GmpError, ValueError):
    """A worker cost matrix is invalid."""


class PlacementError(GmpError, ValueError):
    """A placement is inconsistent with its graph or with itself."""


class ManifestError(GmpError, ValueError):
    """A placement manifest is missing, corrupt, or of an unsupported version."""


class PartitionError(GmpError, ValueError):
    """A partitioner was asked for something it cannot do."""


class MissingDependencyError(GmpError, ImportError):
    """An optional dependency is not installed."""


class TrainingError(GmpError, RuntimeError):
    """Training cannot start or continue."""


class OutOfMemory(GmpError, MemoryError):
    """An allocation failed (a ``MemoryError``, torch's CPU allocator, METIS's ``METIS_ERROR_MEMORY``); the
    message says what was being done and what to change."""


class OutputError(GmpError, OSError):
    """An output path cannot or must not be written (it would replace an input, the
    working directory or a foreign directory; a full device; a path below a file)."""


def raised_while(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The exception of type ``kind`` that ``exc`` was raised while handling, if any: its ``__cause__`` /
    ``__context__`` chain, followed a few links (numba wraps a compiled kernel's interrupt in a SystemError,
    torch's zip writer a full device's OSError in a RuntimeError; a caller may wrap that once more)."""
    seen: BaseException | None = exc
    for _ in range(8):
        seen = seen.__cause__ or seen.__context__
        if seen is None:
            return None
        if isinstance(seen, kind):
            return seen
    return None


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler's stop), raised in the main thread by :func:`raise_terminated`: a
    ``gmp`` command then ends as for Ctrl-C, its outputs left as they were and their locks released."""


def raise_terminated(signum: int, frame: object) -> None:
    """The SIGTERM handler ``gmp``'s commands install (``cli.main``): raise :class:`Terminated`. While it is
    installed, :func:`gmp.train.run.train` holds SIGTERM instead, as it holds Ctrl-C: the run stops at its
    next step and checkpoints.

    Inside a callback from C (numba compiling a kernel calls back into Python through ctypes) an exception
    is printed as "Exception ignored" and dropped: the signal was lost and the command ran to its end (exit
    0). There the signal is sent again a moment later instead (:func:`in_foreign_callback`)."""
    if in_foreign_callback(frame):
        resend_soon(signum)
        return
    raise Terminated


def in_foreign_callback(frame: object) -> bool:
    """True when ``frame`` (a signal handler's) runs inside a callback from C code that drops exceptions: a
    ctypes callback of llvmlite, numba's compiler."""
    while frame is not None:
        if "llvmlite" in getattr(getattr(frame, "f_code", None), "co_filename", ""):
            return True
        frame = getattr(frame, "f_back", None)
    return False


def resend_soon(signum: int, delay_s: float = 0.05) -> None:
    """Send ``signum`` to this process again after ``delay_s`` (from a timer thread: the handler then runs
    in the main thread once it is out of the callback)."""
    import os  # noqa: PLC0415 - only when a signal is deferred
    import threading  # noqa: PLC0415

    timer = threading.Timer(delay_s, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()
