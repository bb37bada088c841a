"""Ctrl-C (or SIGTERM) inside a compiled kernel ends a command as every interrupt does.

numba turns the KeyboardInterrupt its signal handler raises inside a compiled function into
``SystemError: CPUDispatcher(...) returned a result with an exception set``, whose context is the
interrupt: the command ended with rc 1 and a traceback (1 of 11 SIGINTs during a Criteo import). A
stand-in kernel raising that SystemError makes it deterministic.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from cli._common import handle_errors
from cli_helpers import invoke
from gmp.errors import Terminated

FIX = Path(__file__).parent / "data" / "import"


def kernel_interrupted_by(signal_exc: type[KeyboardInterrupt]):
    """A stand-in for a compiled kernel that a signal interrupts: numba's SystemError over the interrupt."""
    def kernel(*args, **kwargs):
        try:
            raise signal_exc
        except KeyboardInterrupt:
            # raised while handling the interrupt: its __context__ is the interrupt, as numba's is
            raise SystemError("CPUDispatcher(<function _parse_hex_block>) returned a result with an exception set")
    return kernel


@pytest.mark.parametrize("signal_exc, code", [(KeyboardInterrupt, 130), (Terminated, 143)], ids=["SIGINT", "SIGTERM"])
def test_import_interrupted_inside_a_kernel_says_interrupted(tmp_path, monkeypatch, signal_exc, code):
    import gmp.datasets.streaming as streaming

    monkeypatch.setattr(streaming, "_parse_hex_block", kernel_interrupted_by(signal_exc))
    out = tmp_path / "out"
    res = invoke("data", "import", "criteo", FIX / "criteo_small.tsv", "--out", out)
    assert res.exit_code == code, (res.exit_code, res.output, res.exception)
    assert res.stderr.strip() == f"error: interrupted; nothing written to {out}."
    assert "Traceback" not in res.output and sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("signal_exc, code", [(KeyboardInterrupt, 130), (Terminated, 143)], ids=["SIGINT", "SIGTERM"])
def test_any_command_takes_an_interrupt_wrapped_by_a_kernel(capsys, signal_exc, code):
    """The general place, handle_errors (every command is wrapped): the interrupt behind a SystemError,
    even when a caller wrapped it once more."""
    def command():
        try:
            kernel_interrupted_by(signal_exc)()
        except SystemError as exc:
            raise SystemError("while partitioning") from exc

    with pytest.raises(typer.Exit) as ended:
        handle_errors(command)()
    assert ended.value.exit_code == code
    assert capsys.readouterr().err == "error: interrupted.\n"


def test_a_system_error_without_an_interrupt_is_not_hidden():
    """Only an interrupt is said as one: any other SystemError is a bug and keeps its traceback."""
    def command():
        raise SystemError("a bug")

    with pytest.raises(SystemError, match="a bug"):
        handle_errors(command)()
