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
def task(description: str, total: float | None = None, unit: str = "") -> Iterator[Callable[[float], None]]:
    """A progress context; yields ``advance(amount)``. Logs the step's duration."""
    t0 = time.perf_counter()
    if not _enabled:
        yield lambda amount=1: None
        log.info("%s: %.2fs", description, time.perf_counter() - t0)
        return
    from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    from rich.console import Console

    columns = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
               TimeRemainingColumn()]
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as progress:
        tid = progress.add_task(description, total=total)
        yield lambda amount=1: progress.advance(tid, amount)
    log.info("%s: %.2fs", description, time.perf_counter() - t0)
