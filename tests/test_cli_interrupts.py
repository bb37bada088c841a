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


def _python(code: str) -> "subprocess.CompletedProcess[str]":
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)


def test_ctrl_c_while_the_console_script_starts_is_one_line_and_130():
    """A Ctrl-C while `gmp` still imports its modules (seconds under torchrun on a loaded machine) printed a
    KeyboardInterrupt traceback from inside an import; the package's start handler ends it as one line."""
    res = _python("import sys; sys.argv = ['/usr/bin/gmp', 'partition']\n"
                  "import cli, os, signal, time\n"
                  "os.kill(os.getpid(), signal.SIGINT)\n"
                  "time.sleep(30)\n"
                  "print('not stopped')")
    assert (res.returncode, res.stdout, res.stderr) == (130, "", "error: interrupted.\n")


def test_the_start_handler_is_only_the_console_scripts_and_main_gives_ctrl_c_back_to_python():
    res = _python("import signal, sys\n"
                  "import cli.main\n"  # argv[0] is '-c' here: a library or test import keeps Python's handler
                  "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
                  "sys.argv = ['gmp', '--version']\n"
                  "import importlib; importlib.reload(cli)\n"
                  "assert cli.starting_handler() is not None\n"
                  "try:\n"
                  "    cli.main.main()\n"
                  "except SystemExit as exc:\n"
                  "    assert exc.code in (0, None), exc.code\n"
                  "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
                  "print('ok')")
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr


def test_after_an_interrupted_command_a_second_ctrl_c_ends_the_process_without_a_traceback():
    """torchrun forwards a second SIGINT while the interpreter shuts down; it printed a KeyboardInterrupt
    traceback from threading._shutdown. After exit code 130 or 143 SIGINT is the signal's default action."""
    res = _python("import signal, sys\n"
                  "import cli.main\n"
                  "def app(args):\n"
                  "    raise SystemExit(130)\n"  # what handle_errors' typer.Exit(130) becomes
                  "cli.main.app = app\n"
                  "try:\n"
                  "    cli.main.main()\n"
                  "except SystemExit as exc:\n"
                  "    assert exc.code == 130\n"
                  "print(signal.getsignal(signal.SIGINT) is signal.SIG_DFL)")
    assert res.stdout.strip() == "True", res.stderr


def test_sigterm_inside_a_compile_callback_is_sent_again():
    """numba compiling a kernel calls back into Python through ctypes, which prints an exception raised there as
    "Exception ignored" and drops it: a SIGTERM then was lost and the command ran to its end with exit 0 (seen
    in a fresh clone, where every kernel compiles). The handler sends the signal again a moment later."""
    import signal
    import time
    import types

    from gmp.errors import Terminated, raise_terminated

    got = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        code = types.SimpleNamespace(co_filename="/venv/site-packages/llvmlite/binding/executionengine.py")
        inner = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename="x.py"),
                                      f_back=types.SimpleNamespace(f_code=code, f_back=None))
        raise_terminated(signal.SIGTERM, inner)  # deferred: no exception here
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [signal.SIGTERM]
        with pytest.raises(Terminated):  # anywhere else: at once
            raise_terminated(signal.SIGTERM, types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename="y.py"),
                                                                    f_back=None))
    finally:
        signal.signal(signal.SIGTERM, old)
