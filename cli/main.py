"""Entry point of the ``gmp`` command.

Each command group lives in its own module exposing ``register(app)``; this
module only wires them together and turns :class:`gmp.errors.GmpError` into a
one-line message on stderr with exit code 2 (never a traceback).
"""

from __future__ import annotations

import importlib
import logging
import sys

import typer
from typer.core import TyperOption

from gmp._version import __version__
from gmp.errors import GmpError

app = typer.Typer(
    name="gmp",
    help="gmp: graph-based placement of samples and embedding rows for distributed CTR training.\n\n"
    "Pipeline: 'gmp data import|synth' -> 'gmp partition' -> 'gmp report' -> 'gmp train'.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

#: command modules, in help order; each defines register(app).
COMMAND_MODULES = ("cli.data", "cli.partition", "cli.train", "cli.simulate", "cli.export")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"gmp {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each step's timing to stderr."),
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s", stream=sys.stderr)


for _name in COMMAND_MODULES:  # a missing command module is an error, never silently dropped
    importlib.import_module(_name).register(app)


#: options of the whole program, accepted before or after the command (``gmp data info D -v``)
GLOBAL_FLAGS = ("-v", "--verbose")


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move the global flags found after the command in front of it (typer reads them only there);
    nothing after a ``--`` is touched."""
    front, rest = [], []
    for i, arg in enumerate(argv):
        if arg == "--":
            rest.extend(argv[i:])
            break
        (front if arg in GLOBAL_FLAGS else rest).append(arg)
    return front + rest


def _flag_type(display_type_rich):
    """Help shows no type for a flag: ``--resume`` takes no value, so ``<bool>`` beside it misleads."""
    def display(self, ctx):
        return None if getattr(self, "is_flag", False) else display_type_rich(self, ctx)
    return display


if hasattr(TyperOption, "display_type_rich"):  # typer's own hook, not in every version typer>=0.12 allows
    TyperOption.display_type_rich = _flag_type(TyperOption.display_type_rich)


def main() -> None:
    """Console-script entry: progress bars when stderr is a terminal, then the app."""
    from gmp import progress

    progress.enable(sys.stderr.isatty())
    try:
        app(args=hoist_global_options(sys.argv[1:]))
    except GmpError as exc:  # a command that forgot @handle_errors
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
