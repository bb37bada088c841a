"""Entry point of the ``gmp`` command.

Each command group lives in its own module exposing ``register(app)``; this
module only wires them together and turns :class:`gmp.errors.GmpError` into a
one-line message on stderr with exit code 2 (never a traceback).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import warnings

import typer
import typer.core
from typer.core import TyperGroup, TyperOption

from cli._common import say_error, stop_on_sigterm
from gmp._version import __version__
from gmp.errors import GmpError

#: the click typer runs on (typer >= 0.20 carries its own copy as ``typer._click``)
click = getattr(typer.core, "_click", None) or importlib.import_module("click")
#: raised for a group called without a command (its help is shown; click >= 8.2 only)
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class OneLineErrors(TyperGroup):
    """The root group: a usage error (an unknown or mistyped flag, a missing argument, a bad value) is one
    ``error:`` line on stderr, exit code 2, with click's did-you-mean hint, instead of typer's boxed usage
    (the same under the console script and ``CliRunner``). Errors of the root's own arguments come from
    :meth:`parse_args`, those of a command (its parsing included) from :meth:`invoke`; a group called
    without a command still shows its help."""

    def parse_args(self, ctx, args):
        with _one_line_usage_errors():
            return super().parse_args(ctx, args)

    def invoke(self, ctx):
        with _one_line_usage_errors():
            return super().invoke(ctx)


@contextlib.contextmanager
def _one_line_usage_errors():
    try:
        yield
    except _NO_ARGS_IS_HELP:
        raise
    except click.ClickException as exc:
        say_error(usage_error_line(exc))
        raise typer.Exit(exc.exit_code) from None


def usage_error_line(exc: click.ClickException) -> str:
    """One line for a click error: its message (with any "Did you mean" hint) and where to find help."""
    msg = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"{msg.rstrip('.')}{where}."


app = typer.Typer(
    cls=OneLineErrors,
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
    warnings.formatwarning = one_line_warning


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as the command line shows it: ``warning: MESSAGE``, one line, without the source file and line
    Python adds (a deprecation notice is for the person at the terminal: ``--threads`` printed
    ``gmp/partition/__init__.py:77: FutureWarning: ...`` and then ``return options_cls(**options)``)."""
    return f"warning: {message}\n"


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
    import signal

    from gmp import progress

    from . import starting_handler

    if starting_handler() is not None:  # the start is over: Ctrl-C is a KeyboardInterrupt again (handle_errors)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    progress.enable(sys.stderr.isatty())
    stop_on_sigterm()
    try:
        app(args=hoist_global_options(sys.argv[1:]))
    except GmpError as exc:  # a command that forgot @handle_errors
        from ._flags import to_flags

        say_error(to_flags(str(exc)))
        sys.exit(2)
    except SystemExit as exc:
        if exc.code in (130, 143) and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            # said "interrupted" already: a second Ctrl-C while the interpreter shuts down (torchrun forwards
            # one more) ends the process as the signal does, not with a traceback from threading._shutdown
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        raise


if __name__ == "__main__":
    main()
