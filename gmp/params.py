"""The one parameter validator of the typed option objects (``TrainConfig``, ``HeraldOptions``, ...).

Every violation is worded the same way and names the *parameter* (never a
command-line flag; the CLI maps parameter names to its flags,
``cli/_flags.py``)::

    The 'batch_size' parameter must be an int >= 1, got 0.

The raised error carries ``.param`` (the parameter's name).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .constants import MAX_BATCH_SIZE
from .errors import GmpError


def param_error(error: type[GmpError], param: str, msg: str) -> GmpError:
    """``error(msg)`` about the parameter ``param``, which the CLI re-words as its flag (cli/_flags.py)."""
    exc = error(msg)
    exc.param = param
    return exc


def _fail(error: type[GmpError], name: str, expected: str, value: Any) -> GmpError:
    return param_error(error, name, f"The '{name}' parameter must be {expected}, got {value!r}.")


def is_int(value: Any) -> bool:
    """``value`` is a Python int and not a bool (JSON's ``true`` is no count, though ``bool`` subclasses ``int``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """``value`` is a Python int or float and not a bool (JSON's ``true`` is no number)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None,
              error: type[GmpError] = GmpError) -> int:
    """``value`` as an int (bools refused), at least ``minimum`` and at most ``maximum``."""
    expected = "an int" + (f" >= {minimum}" if minimum is not None else "")
    if maximum is not None:
        expected += (" and" if minimum is not None else "") + f" <= {maximum}"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise _fail(error, name, expected, value)
    if minimum is not None and int(value) < minimum:
        raise _fail(error, name, expected, value)
    if maximum is not None and int(value) > maximum:
        raise _fail(error, name, expected, value)
    return int(value)


def check_float(name: str, value: Any, *, minimum: float | None = None, strict: bool = False,
                allow_inf: bool = False, maximum: float | None = None, error: type[GmpError] = GmpError) -> float:
    """``value`` as a float: finite (unless ``allow_inf``), ``> minimum`` when ``strict`` else ``>=``, at most
    ``maximum``."""
    rel = ">" if strict else ">="
    expected = "a finite number" if not allow_inf else "a number"
    if minimum is not None:
        expected += f" {rel} {minimum:g}" + (" (or inf)" if allow_inf else "")
    if maximum is not None:
        expected += (" and" if minimum is not None else "") + f" <= {maximum:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise _fail(error, name, expected, value)
    v = float(value)
    if math.isnan(v) or (math.isinf(v) and not (allow_inf and v > 0)):
        raise _fail(error, name, expected, value)
    if minimum is not None and (v <= minimum if strict else v < minimum):
        raise _fail(error, name, expected, value)
    if maximum is not None and v > maximum:
        raise _fail(error, name, expected, value)
    return v


#: the bounds of a training plan's values (:class:`gmp.manifest.TrainingPlan`) besides ``>= 1``: a manifest carries
#: them into ``gmp train``, so every command that plans or scores a placement bounds them as the trainer does
PLAN_MAXIMA = {"batch_size": MAX_BATCH_SIZE, "embedding_dim": None}


def check_plan_value(name: str, value: Any, *, error: type[GmpError] = GmpError) -> int:
    """``value`` of the plan's ``name`` (``batch_size``, ``embedding_dim``): an int >= 1 and at most
    :data:`PLAN_MAXIMA`'s bound."""
    return check_int(name, value, minimum=1, maximum=PLAN_MAXIMA[name], error=error)


def check_choice(name: str, value: Any, choices: Sequence[str], *, error: type[GmpError] = GmpError) -> str:
    """``value`` if it is one of ``choices``."""
    if value not in tuple(choices):
        raise _fail(error, name, f"one of {list(choices)}", value)
    return value


def check_bool(name: str, value: Any, *, error: type[GmpError] = GmpError) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise _fail(error, name, "a bool", value)
    return bool(value)


def comma_list(value: str | Sequence[str]) -> list[str]:
    """Names from a list, or from the command line's comma-separated string (``"random, hybrid"``; blanks
    dropped): a bare string is never taken as a sequence of one-character names."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


#: partitioner options ``gmp partition`` has a flag of their own for (``--max-imbalance``); the rest go
#: through ``-O KEY=VALUE``
OPTION_FLAGS = frozenset({"rounds", "tol", "alpha", "beta", "gamma", "max_imbalance", "replication_budget",
                          "memory_per_worker", "threads"})


def option_name(key: str) -> str:
    """How a person gives partitioner option ``key`` to ``gmp partition``: its flag, else ``-O key=``."""
    return "--" + key.replace("_", "-") if key in OPTION_FLAGS else f"-O {key}="
