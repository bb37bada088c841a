"""Helpers shared by the command modules."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
from pathlib import Path
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Mapping, TypeVar

import typer

from gmp._io import is_full_disk, json_default, release_claims
from gmp._memory import allocation_failed, is_out_of_memory
from gmp.errors import GmpError, Terminated, raised_while
from gmp.launch import LAUNCH, tell_peers

F = TypeVar("F", bound=Callable[..., Any])


def stop_on_sigterm(*, under_torchrun: bool = False) -> None:
    """Make SIGTERM end a command as Ctrl-C does (:class:`gmp.errors.Terminated`, exit code 143) instead of
    killing the process where it stands, which left the lock files of its outputs behind; ``gmp train``
    stops at its next step and checkpoints. Not under torchrun (``WORLD_SIZE`` set), whose SIGTERM ``gmp
    train`` holds itself, unless ``under_torchrun`` (``gmp partition --distributed``: a scheduler's stop reaches
    its ranks through torchrun), and not where the process was started ignoring SIGTERM."""
    import signal

    from gmp.errors import raise_terminated

    if ("WORLD_SIZE" not in os.environ or under_torchrun) and signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, raise_terminated)


def handle_errors(fn: F) -> F:
    """Turn GmpError (and unreadable files) into ``error: ...`` on stderr and exit code 2, and Ctrl-C into
    ``error: interrupted; nothing written to OUT`` and exit code 130 (SIGTERM, :class:`Terminated`: 143).

    Every command function is wrapped, so the behaviour is the same under the
    console script and typer's ``CliRunner``.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GmpError as exc:
            from ._flags import to_flags  # the library names parameters (`max_bad_lines`); the person typed flags

            line = to_flags(str(exc))
            say_error(line)
            tell_peers(line, note=say_note)
            raise typer.Exit(2) from None
        except OSError as exc:
            line = os_error_line(exc)
            say_error(line)
            tell_peers(line, note=say_note)
            raise typer.Exit(2) from None
        except KeyboardInterrupt as exc:  # Ctrl-C: one line, as for an error (gmp train says where its epochs stopped)
            say_interrupted()
            # 128 + the signal, as a shell reports a command Ctrl-C (SIGINT) or kill (SIGTERM) stopped
            raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None
        except SystemError as exc:
            # a signal arriving inside a compiled (numba) kernel: its handler's KeyboardInterrupt comes out
            # as "... returned a result with an exception set", a SystemError whose context is the interrupt
            interrupt = interrupt_behind(exc)
            if interrupt is None:
                raise
            say_interrupted()
            raise typer.Exit(143 if isinstance(interrupt, Terminated) else 130) from None
        except MemoryError:
            say_error(f"out of memory{memory_left()}; use a smaller input or settings, or a machine with more "
                      f"memory.")
            raise typer.Exit(2) from None
        except RuntimeError as exc:
            if is_out_of_memory(exc):  # torch's CPU allocator ("DefaultCPUAllocator: can't allocate memory")
                say_error(f"out of memory ({allocation_failed(exc)}){memory_left()}; use a smaller input or "
                          f"settings, or a machine with more memory.")
                raise typer.Exit(2) from None
            if type(exc).__name__ != "OutOfMemoryError":  # torch's (CUDA): not imported here for the name
                raise
            said = str(exc).split(". ")[:2]
            say_error(f"out of GPU memory ({'. '.join(said).strip()}); lower --embedding-dim or --batch-size, use "
                      f"more GPUs, or keep the table in host memory (--table-location host).")
            raise typer.Exit(2) from None
        finally:
            release_claims()  # the outputs this command claimed (released already when it wrote them)
            LAUNCH.reset()

    return wrapper  # type: ignore[return-value]


def memory_left() -> str:
    """`` (N GiB available now...)``: the memory this process may still allocate, for an out-of-memory line."""
    from gmp._memory import available_text

    try:
        return f" ({available_text()})"
    except Exception:  # noqa: BLE001 - the line must still be said
        return ""


def interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM, :class:`Terminated`) that ``exc`` was raised while handling, if any: the
    ``__cause__``/``__context__`` chain, followed a few links (numba wraps the interrupt of a compiled kernel
    in a SystemError; a caller may wrap that once more)."""
    return raised_while(exc, KeyboardInterrupt)


def interrupted_line() -> str:
    """The line for a command stopped by Ctrl-C: the outputs it had claimed and not written (each is put in
    place whole at the end, so none of them holds anything of this run; :func:`gmp._io.unwritten_outputs`)."""
    from gmp._io import unwritten_outputs

    outs = unwritten_outputs()
    if not outs:
        return "interrupted."
    try:
        here = Path.cwd()
    except OSError:  # the working directory was removed
        here = None
    shown = []
    for out in outs:  # as the person gave it, where it is under the working directory
        shown.append(os.path.relpath(out, here) if here is not None and here in out.parents else str(out))
    return f"interrupted; nothing written to {', '.join(shown)}."


def say_note(line: str) -> None:
    """``note: LINE.`` on stderr (a wait after an error line, :func:`gmp.launch.tell_peers`)."""
    typer.echo(f"note: {line}.", err=True)


def say_interrupted() -> None:
    """The interrupted line (:func:`interrupted_line`), once per machine under torchrun: by the rank that
    names the outputs it had claimed, else by the machine's first local rank (each rank said its own)."""
    line = interrupted_line()
    if line != "interrupted." or os.environ.get("LOCAL_RANK", "0") == "0" or "TORCHELASTIC_RUN_ID" not in os.environ:
        say_error(line)


def say_error(line: str) -> None:
    """``error: LINE`` on stderr, once per machine under torchrun: the processes one torchrun started find
    the same errors in the same flags and files, before their process group exists as after (3 ranks
    printed 3 identical lines). Another line (a rank whose GPU is missing) is still printed, once."""
    if first_to_say(line):
        typer.echo(f"error: {line}", err=True)


#: where :func:`first_to_say` marks what the processes of one torchrun launch have said
SAID_DIR = Path(tempfile.gettempdir()) / "gmp-said"


def first_to_say(line: str) -> bool:
    """True unless another process of the same torchrun launch on this machine said ``line`` already.

    The launch is the parent process (torchrun's agent starts every local rank), named by its pid and its
    start time (a pid is reused; the start time, in ``/proc``, tells the two apart) and torchrun's restart
    count; the first process to create the file of (launch, line) says it. Outside torchrun, on a system
    without ``/proc``, or where the mark cannot be written, every process says it. Marks older than a day
    are removed."""
    if os.environ.get("LOCAL_WORLD_SIZE", "1") in ("", "0", "1") or "TORCHELASTIC_RUN_ID" not in os.environ:
        return True
    parent = os.getppid()
    try:
        started = Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[19]
        SAID_DIR.mkdir(mode=0o700, exist_ok=True)
    except (OSError, IndexError):
        return True
    launch = f"{parent} {started} {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    mark = SAID_DIR / hashlib.sha256(f"{launch}\n{line}".encode()).hexdigest()[:32]
    try:
        os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:
        return True
    with contextlib.suppress(OSError):
        for old in SAID_DIR.iterdir():
            if time.time() - old.stat().st_mtime > 86400:
                old.unlink()
    return True


def os_error_line(exc: OSError) -> str:
    """One line for an operating-system error that no gmp check caught (neither 'read' nor 'write'
    is assumed: the same errors come from both)."""
    where = exc.filename or "a file"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or is_full_disk(exc):
        try:
            free = shutil.disk_usage(os.path.dirname(os.path.abspath(where)) if exc.filename else ".").free
            room = f" ({free / 2**20:,.1f} MiB free)"
        except OSError:
            room = ""
        return f"no space left on the device writing {where}{room}; free space or choose another --out."
    return f"{where}: {exc.strerror or exc}; check the path and its permissions."


def check_seed(seed: int) -> int:
    """:func:`gmp.seeds.check_seed`, its message worded with the ``--seed`` flag."""
    from gmp.seeds import check_seed as _check

    from ._flags import flags_for_params

    with flags_for_params():
        return _check(seed)


def echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=json_default))




def given(ctx: "typer.Context", **values: Any) -> dict[str, Any]:
    """``values`` without those the person left at the command's default (click's parameter source), so the
    library resolves them (:mod:`gmp.specs`) and records them as defaults, not as given."""
    def left(name: str) -> bool:
        source = ctx.get_parameter_source(name)  # click's ParameterSource (typer vendors click: compared by name)
        return source is None or source.name in ("DEFAULT", "DEFAULT_MAP")

    return {k: v for k, v in values.items() if not left(k)}


def console():
    """A rich console on stdout (tables): the terminal's width, or 200 columns
    when stdout is a file or pipe (wide comparison tables stay unwrapped in logs)."""
    from rich.console import Console

    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200)


def dataset_argument(positional, option, command: str):
    """The DATASET of a command that takes it positionally and, deprecated, as ``--dataset``."""
    from gmp.errors import GmpError

    if positional is not None and option is not None and Path(positional) != Path(option):
        raise GmpError(f"DATASET is given twice ({positional} and --dataset {option}); pass it once: "
                       f"'gmp {command} DATASET ...'.")
    dataset = positional if positional is not None else option
    if dataset is None:
        raise GmpError(f"missing DATASET: 'gmp {command} DATASET ...' (a prepared dataset directory).")
    return dataset


def refuse_flags(given: Mapping[str, bool], where: str, error: type[Exception]) -> None:
    """Raise ``error("--a, --b do not apply to WHERE")`` when any flag in ``given`` is set (True): a flag
    a command cannot use is a mistake to point out, not to ignore."""
    wrong = [flag for flag, on in given.items() if on]
    if wrong:
        raise error(f"{', '.join(wrong)} do{'es' if len(wrong) == 1 else ''} not apply to {where}")


# ----------------------------------------------------------------- shared by the partition commands
def summary_table(metrics: dict[str, Any], title: str) -> None:
    from rich.table import Table

    from gmp.report import tables

    out = console()
    for headers, rows in (tables.metrics_table(metrics), tables.summary_table(metrics)):
        t = Table(title=title, title_justify="left")
        title = ""
        for h in headers:
            t.add_column(h, justify="left" if h in ("metric", "quantity") else "right")
        for r in rows:
            t.add_row(*r)
        out.print(t)
