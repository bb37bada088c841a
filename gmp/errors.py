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


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler's stop), raised in the main thread by :func:`raise_terminated`: a
    ``gmp`` command then ends as for Ctrl-C, its outputs left as they were and their locks released."""


def raise_terminated(signum: int, frame: object) -> None:
    """The SIGTERM handler ``gmp``'s commands install (``cli.main``): raise :class:`Terminated`. While it is
    installed, :func:`gmp.train.run.train` holds SIGTERM instead, as it holds Ctrl-C: the run stops at its
    next step and checkpoints."""
    raise Terminated
