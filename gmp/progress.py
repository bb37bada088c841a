"""Progress reporting that the library can call and the CLI can show.

Library code never prints. It wraps long steps in :func:`task`; the CLI turns
display on with :func:`enable` (a rich progress bar on stderr). Tests and
library users see nothing unless they enable it.

    with task("Importing criteo", total=file_size, unit="B") as advance:
        for chunk in chunks:
            ...
            advance(len(chunk))
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
    if not (_enabled and show) or threading.current_thread() is not threading.main_thread():
        yield lambda amount=1, status=None: None
        log.info("%s: %.2fs", description, time.perf_counter() - t0)
        return
    from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    from rich.console import Console

    columns = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[status]}"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as progress:
        tid = progress.add_task(description, total=total, completed=completed, status="")

        def advance(amount: float = 1, status: str | None = None) -> None:
            if status is None:
                progress.advance(tid, amount)
            else:
                progress.update(tid, advance=amount, status=status)
        yield advance
    log.info("%s: %.2fs", description, time.perf_counter() - t0)
