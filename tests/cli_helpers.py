"""Helpers for tests that run the CLI in-process: invoke a command, check a one-line refusal."""
from __future__ import annotations

import re

from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


def invoke(*args):
    """Run ``gmp ARGS...`` in this process (arguments stringified); the click Result."""
    return runner.invoke(app, [str(a) for a in args])


def one_line_error(res, pattern: str) -> str:
    """Assert ``res`` is a refusal: exit 2, one ``error:`` line on stderr matching ``pattern``, no traceback."""
    assert res.exit_code == 2, (res.exit_code, res.output)
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in res.output, err
    assert re.search(pattern, err), err
    return err
