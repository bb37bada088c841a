"""What a checkpoint file may hold, and why one is refused: nothing in it is unpickled.

:func:`to_safe` / :func:`from_safe` encode numpy arrays as byte tensors, so every file reads with
``torch.load(weights_only=True)`` (:mod:`gmp.train.checkpoint`); :func:`refusal_reason` words
torch's refusal of a file without its advice to load it with ``weights_only=False``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import torch


def to_safe(obj: Any) -> Any:
    """``obj`` with every numpy array/scalar turned into what ``torch.load(weights_only=True)`` reads.

    Arrays become ``{"__ndarray__": uint8 tensor, "dtype": "<u4", "shape": [...]}``;
    numpy scalars Python numbers; tensors, numbers, strings, None, lists,
    tuples and dicts pass (recursively). Anything else is a ``TypeError``: it
    could not be read back without unpickling code.
    """
    if isinstance(obj, torch.Tensor) or obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError("object arrays cannot be stored in a checkpoint")
        raw = np.ascontiguousarray(obj).view(np.uint8).reshape(-1) if obj.size else np.zeros(0, np.uint8)
        return {"__ndarray__": torch.from_numpy(raw.copy()), "dtype": obj.dtype.str, "shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: to_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_safe(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_safe(v) for v in obj)
    raise TypeError(f"a {type(obj).__name__} cannot be stored in a checkpoint (only tensors, numbers, strings, "
                    f"containers and numpy arrays)")


def from_safe(obj: Any) -> Any:
    """Inverse of :func:`to_safe`."""
    if isinstance(obj, dict):
        if "__ndarray__" in obj:
            data, dtype, shape = obj["__ndarray__"], np.dtype(obj["dtype"]), tuple(int(s) for s in obj["shape"])
            if dtype.hasobject:
                raise ValueError("object dtype")
            raw = data.numpy().tobytes() if isinstance(data, torch.Tensor) else b""
            return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        return {k: from_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_safe(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(from_safe(v) for v in obj)
    return obj


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, at most 160 characters."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 160 else line[:160] + "…"


def refusal_reason(exc: BaseException) -> str:
    """Why torch refused a file, in gmp's words: torch's "Weights only load failed" advises re-loading with
    ``weights_only=False`` (which would run the file's code), advice gmp must never pass on."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    if "weights only load failed" not in text.lower() and "weights_only" not in text:
        return first_line(exc)
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text) or re.search(r"Unsupported operand \d+", text)
    what = f"the pickled object {found.group(1)}" if found and found.groups() else "pickled objects"
    return f"it holds {what}, which gmp never writes: refused, not unpickled"
