"""The ``gmp`` command line: a thin typer app; each module owns one command group.

Importing the app takes a while (typer, numpy, numba; seconds on a loaded machine, under torchrun
on every rank), and a Ctrl-C in that window used to print a KeyboardInterrupt traceback from the
middle of an import. So when this package starts the ``gmp`` console script (or ``python -m
cli.main``), a Ctrl-C before :func:`cli.main.main` runs ends the process at once with the one line
every interrupted command prints and exit code 130: nothing has been read or written yet.
``main`` puts Python's own handler back before it parses the command line.
"""

import os as _os
import signal as _signal
import sys as _sys


def _interrupted_while_starting(signum, frame):  # pragma: no cover - exercised in a subprocess
    _os.write(2, b"error: interrupted.\n")
    _os._exit(130)


def starting_handler():
    """The SIGINT handler this package installs for the console script's start (None when it did not)."""
    return _interrupted_while_starting if _signal.getsignal(_signal.SIGINT) is _interrupted_while_starting else None


if (_os.path.basename(_sys.argv[0] if _sys.argv else "") == "gmp" or (_sys.argv[:1] == ["-m"])) and \
        _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)
