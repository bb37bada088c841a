"""Library parameter names -> command-line flags.

The library's errors name parameters ("The 'batch_size' parameter must be an
int >= 1, got 0."; :mod:`gmp.params`); a command re-words them with its flags
("--batch-size must be an int >= 1, got 0.") so the person reads what they typed.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator, Mapping

from gmp.errors import GmpError

#: parameters whose flag is not ``--`` + the name with dashes
SPECIAL = {
    "on_demand": "--on-demand/--no-on-demand",
    "read_only_replicas": "--read-only-replicas/--writable-replicas",
    "schedule": "--schedule",
    "options": "-O KEY=VALUE",
    "from_manifest": "--from-manifest",
}


def flag_of(param: str, special: Mapping[str, str] = SPECIAL) -> str:
    return special.get(param, "--" + param.replace("_", "-"))


def backticked(param: str, value: str | None, special: Mapping[str, str] = SPECIAL) -> str:
    """A parameter the library named in backticks: `` `window` `` -> ``--window``, `` `workers=N` `` ->
    ``--workers N``, `` `distributed=True` `` -> ``--distributed``."""
    flag = flag_of(param, special)
    if value is None or value == "True":
        return flag.split("/")[0]
    if value == "False":
        return flag.split("/")[-1]
    return f"{flag} {value}"


@contextlib.contextmanager
def flags_for_params(special: Mapping[str, str] = SPECIAL) -> Iterator[None]:
    """Re-raise a GmpError that names a parameter with the parameter's flag instead."""
    try:
        yield
    except GmpError as exc:
        msg = str(exc)
        new = re.sub(r"The '(\w+)' parameter", lambda m: flag_of(m.group(1), special), msg)
        new = re.sub(r"`(\w+)(?:=([^`]*))?`", lambda m: backticked(m.group(1), m.group(2), special), new)
        param = getattr(exc, "param", None)
        if param:
            new = re.sub(r"(?<![\w-])([a-z][a-z0-9_]*)=(?=\S)", lambda m: flag_of(m.group(1), special) + " ", new)
            # the parameter itself named in the fix ("raise cache_rows to at least 343")
            if "_" in param:  # a plain word ("workers") is also English in the message
                new = re.sub(rf"(?<![\w'.-]){re.escape(param)}(?![\w'=(])", flag_of(param, special), new)
        if new == msg:
            raise
        err = type(exc)(new)
        for attr in ("param", "rank", "together"):  # who raised it (one_rank_speaks), not only what
            if hasattr(exc, attr):
                setattr(err, attr, getattr(exc, attr))
        raise err from None
