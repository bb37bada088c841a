"""A process of a torchrun launch that refuses its input before the process group exists tells its peers.

Each process checks its own flags and files (a dataset, a manifest, an output directory) before it joins
the process group. One that refused and left at once stranded its peers on the other machines: they
waited at the join for the whole collective timeout (600 s by default) and then blamed the rendezvous
(one torchrun on one machine stops its other ranks when one exits; across machines nobody does). So a
process that refuses joins anyway, once its own error line is out, and says that it refused: the first
collective of :class:`~gmp.comm.distributed.DistributedEngine` is an exchange of every rank's refusal
(None for a rank whose checks passed), and the ranks that checked fine stop with one line naming the rank
that refused and why. The refusing process waits at most the collective timeout for its peers to join;
after that, or on Ctrl-C, it leaves without telling them.

Who tells: ``gmp``'s commands call :func:`expect_join` once they know they will join (``gmp train`` under
torchrun, ``gmp partition --distributed``) and tell from their error handler, after printing the line
(:func:`tell_peers`); a library call (:func:`refusals_told`, around the checks :func:`gmp.api.train` and
:func:`gmp.api.partition` run before the join) tells before it raises, unless a command does it.

Torch is imported only when a refusal is told (this module is outside :mod:`gmp.comm`, which imports torch,
so that a command's error handler can ask it for free).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from typing import Callable, Iterator

from .errors import GmpError

_log = logging.getLogger(__name__)


class Launch:
    """This process's part in telling its peers (one per process: :data:`LAUNCH`)."""

    def __init__(self) -> None:
        self.expected = False  # a command said this process joins a process group
        self.told = False  # a refusal was told (or telling was tried): once per process

    def reset(self) -> None:
        """Forget a command's expectation (its end; tests run many commands in one process)."""
        self.expected = self.told = False


#: the process's state
LAUNCH = Launch()


def under_torchrun() -> bool:
    """True in a process of a launch of more than one process (torchrun's ``RANK`` and ``WORLD_SIZE``)."""
    try:
        return "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def expect_join() -> None:
    """A command's word that this process joins the process group of its torchrun launch (a no-op outside
    one): a refusal before the join is told by the command's error handler (:func:`tell_peers`)."""
    LAUNCH.expected = under_torchrun()


def joined() -> bool:
    """True once this process has joined its process group, even if it has left it since (then a refusal
    travels as any error does, or comes after the peers are done): the engine's module is loaded only by
    a process that joins."""
    engines = sys.modules.get("gmp.comm.distributed")
    return engines is not None and engines.DistributedEngine.joined


#: seconds a refusing process waits for its peers before it says that it waits
WAIT_NOTE_S = 5.0


def tell_peers(line: str, note: Callable[[str], None] | None = None) -> None:
    """Join the process group only to tell every peer that this process refused its input (``line``, its
    error line as printed), then leave. Nothing when no join was expected, when this process is in a group
    already or has told before. Waits for the peers at most the collective timeout, and after
    :data:`WAIT_NOTE_S` says so through ``note`` (default: a logged warning); a failed join, a bad setting or
    Ctrl-C ends it quietly (this process's own line is out already)."""
    if not LAUNCH.expected or LAUNCH.told or joined():
        return
    LAUNCH.told = True
    note = note or _log.warning
    timer = None
    try:
        from .comm.distributed import DistributedEngine, collective_timeout  # noqa: PLC0415 - torch only here

        wait = collective_timeout()
        timer = threading.Timer(WAIT_NOTE_S, lambda: note(
            f"waiting for the other processes of this launch to join, to tell them (the collective timeout, "
            f"{wait:g} s, bounds the wait; Ctrl-C ends it)"))
        timer.daemon = True
        timer.start()
        engine = DistributedEngine(timeout_s=wait, refused=line)
        engine.close(clean=False)
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - telling is a courtesy; the refusal is the error
        return
    finally:
        if timer is not None:
            timer.cancel()


@contextlib.contextmanager
def refusals_told(distributed: bool) -> Iterator[None]:
    """Around a library call's checks before its join (``distributed``: it will join): a refusal in them
    (an error of gmp or an unreadable file) is told to the peers before it is raised; under a ``gmp``
    command (:func:`expect_join`) the command tells, after it has printed the line."""
    try:
        yield
    except (GmpError, OSError) as exc:
        if distributed and not LAUNCH.expected and under_torchrun():
            LAUNCH.expected = True
            try:
                tell_peers(str(exc))
            finally:
                LAUNCH.reset()  # a later call of this process tells its own
        raise
