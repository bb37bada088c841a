"""The ``gmp`` command line: a thin typer app; each module owns one command group.

Importing the app takes a while (typer, numpy, numba; seconds on a loaded machine, under torchrun
on every rank), and a Ctrl-C in that window used to print a KeyboardInterrupt traceback from the
middle of an import. So when this package starts the ``gmp`` console script (or ``python -m
cli.main``), a Ctrl-C before :func:`cli.main.main` runs ends the process at once with the one line
every interrupted command prints and exit code 130: nothing has been read or written yet.
``main`` puts Python's own handler back before it parses the command line.

The console script also quiets torch's C++ log (``TORCH_CPP_LOG_LEVEL=FATAL`` unless the environment sets
it): a failed rendezvous or a lost peer printed 35-43 lines of C++ stack frames before gmp's one line
saying what happened (docs/failure.md). ``TORCH_CPP_LOG_LEVEL=WARNING`` shows them again.
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


def console_script() -> bool:
    """True in a process the ``gmp`` console script (or ``python -m cli.main``) started; False in a library
    or test process that imports the app."""
    return _CONSOLE


_CONSOLE = _os.path.basename(_sys.argv[0] if _sys.argv else "") == "gmp" or _sys.argv[:1] == ["-m"]
if _CONSOLE and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)
if _CONSOLE:  # read by torch's C++ library when it loads: before any gmp module imports torch
    _os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
