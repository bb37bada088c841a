"""Progress reporting that the library can call and the CLI can show.

Library code never prints. It wraps long steps in :func:`task`; the CLI turns
display on with :func:`enable` (a rich progress bar on stderr). Tests and
library users see nothing unless they enable it.

    with task("Importing criteo", total=file_size, unit="B") as advance:
        for chunk in chunks:
            ...
            advance(len(chunk))

A thread started with :func:`stoppable` can be asked to stop: its next progress step (a :func:`task`
entered or advanced, or a :func:`stop_point` call) raises :class:`Stopped`. Compiled kernels cannot be
interrupted, so it stops at the first step after the request (target mode's full re-partition when the
call that started it fails first).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Callable, Iterator

log = logging.getLogger("gmp")
_enabled = False
_stops: dict[int, threading.Event] = {}  # thread ident -> the request to stop it (:func:`stoppable`)
_live = None  # the rich Progress drawing now (main thread), for :func:`echo`


class Stopped(Exception):
    """Raised at a progress step of a thread whose stop was requested (:func:`stoppable`)."""


@contextlib.contextmanager
def stoppable(request: threading.Event) -> Iterator[None]:
    """Within this block, this thread's progress steps raise :class:`Stopped` once ``request`` is set."""
    me = threading.get_ident()
    _stops[me] = request
    try:
        yield
    finally:
        del _stops[me]


def stop_point() -> Callable[[], None]:
    """A check bound to the calling thread's stop request: raises :class:`Stopped` once it is set (a
    no-op where the thread is not :func:`stoppable`). Taken by a thread that hands work to a pool, so
    that the pool's threads stop with it."""
    request = _stops.get(threading.get_ident())
    if request is None:
        return lambda: None

    def check() -> None:
        if request.is_set():
            raise Stopped("stopped on request: the call that started this work ended first")
    return check


def enable(on: bool = True) -> None:
    """Show progress bars on stderr (the CLI calls this)."""
    global _enabled
    _enabled = bool(on)


def enabled() -> bool:
    return _enabled


@contextlib.contextmanager
def task(description: str, total: float | None = None, unit: str = "", *, completed: float = 0,
         show: bool = True) -> Iterator[Callable[..., None]]:
    """A progress context; yields ``advance(amount=1, status=None)``. Logs the step's duration.

    ``completed`` starts the bar part-way (a resumed epoch); ``status`` is a short text shown
    after the bar (the trainer's loss and samples/s); ``show=False`` hides the bar even when
    enabled (every process but the main one of a distributed run). Only the main thread draws bars:
    a task on another thread (the full re-partition that target mode runs beside its sweep) is
    logged only, since a terminal holds one live display at a time.
    """
    t0 = time.perf_counter()
    check = stop_point()
    check()
    if not (_enabled and show) or threading.current_thread() is not threading.main_thread():
        yield lambda amount=1, status=None: check()
        log.info("%s: %.2fs", description, time.perf_counter() - t0)
        return
    from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    from rich.console import Console

    columns = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[status]}"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    global _live
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as progress:
        tid = progress.add_task(description, total=total, completed=completed, status="")
        outer, _live = _live, progress

        def advance(amount: float = 1, status: str | None = None) -> None:
            check()
            if status is None:
                progress.advance(tid, amount)
            else:
                progress.update(tid, advance=amount, status=status)
        try:
            yield advance
        finally:
            _live = outer
    log.info("%s: %.2fs", description, time.perf_counter() - t0)


def echo(line: str) -> None:
    """Print ``line`` on stdout; while a bar is drawn on the terminal stdout shares, above the bar instead (a
    plain write would land on the bar's line and leave a frozen copy of it there)."""
    live = _live
    if live is not None and sys.stdout.isatty() and sys.stderr.isatty():
        live.console.print(line, markup=False, highlight=False, soft_wrap=True)
    else:
        print(line, flush=True)
