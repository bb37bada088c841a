"""Helpers shared by the command modules."""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable, TypeVar

import typer

from gmp._io import json_default
from gmp.errors import GmpError

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(fn: F) -> F:
    """Turn GmpError (and unreadable files) into ``error: ...`` on stderr and exit code 2.

    Every command function is wrapped, so the behaviour is the same under the
    console script and typer's ``CliRunner``.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GmpError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
            typer.echo(f"error: cannot read {exc.filename}: {exc.strerror}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=json_default))




def console():
    """A rich console on stdout (tables): the terminal's width, or 200 columns
    when stdout is a file or pipe (wide comparison tables stay unwrapped in logs)."""
    from rich.console import Console

    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200)
