"""The primaries' rows of a checkpoint (schema 3): one raw file per worker, streamed.

``worker-NNNNN.rows`` holds worker N's primaries in slot order (ascending global id), each row
its value followed by its optimizer state (Adagrad's sum of squares; nothing with SGD):
``num_rows x width`` numbers of ``dtype``, little-endian, row-major, no header. Its shape is in
the worker's ``.pt`` file under ``primary_rows``::

    "primary_rows": {"file": "worker-00000.rows", "num_rows": 1688293, "width": 34,
                     "row_dim": 17, "dtype": "<f4"}

Written block by block from :meth:`gmp.train.store.EmbeddingStore.primary_blocks` (a tiered
store flushes its cache and streams its master), read block by block on resume and by id with
``pread`` (:class:`gmp.train.tiers.DiskRows`), so a table larger than RAM is checkpointed and
resumed without ever being in memory. Schema 2 kept the primaries inside the ``.pt`` file's
``table`` (and ``opt_state``); :func:`upgrade_worker_v2` turns that into this shape in memory.
Rows read back (:class:`PrimaryRows`) must be finite: the file has no checksum, and a NaN or an
infinity there is refused as it is read, in one line naming the file and the row.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..errors import TrainingError
from .tiers import DiskRows

ROWS_SUFFIX = ".rows"


def rows_name(worker: int) -> str:
    return f"worker-{worker:05d}{ROWS_SUFFIX}"


def write_primary_rows(store, path: Path) -> dict[str, Any]:
    """Stream ``store``'s primaries into ``path``; returns the ``primary_rows`` entry of its ``.pt``."""
    dtype = np.dtype(np.float32 if store.dtype == torch.float32 else np.float64).newbyteorder("<")
    n = 0
    with open(path, "wb") as f:
        for block in store.primary_blocks():
            f.write(np.ascontiguousarray(block, dtype=dtype).tobytes())
            n += block.shape[0]
        f.flush()
        os.fsync(f.fileno())
    if n != store.num_primary:
        raise TrainingError(f"worker {store.worker} wrote {n} primary rows, holds {store.num_primary}. "
                            f"This is a bug in gmp.")
    return {"file": path.name, "num_rows": int(n), "width": int(store.primary_width),
            "row_dim": int(store.row_dim), "dtype": dtype.str}


class PrimaryRows:
    """The primaries of one worker of a checkpoint: ``rows(start, stop)`` and :meth:`take` give
    ``[value | state]`` rows as numpy arrays (from the rows file, or from memory after an upgrade)."""

    def __init__(self, meta: dict[str, Any], *, directory: Path | None = None, values: np.ndarray | None = None):
        self.num_rows, self.width, self.row_dim = int(meta["num_rows"]), int(meta["width"]), int(meta["row_dim"])
        self.dtype = np.dtype(meta["dtype"])
        self._values = values
        self._file = None
        self.where = "the primaries of a schema-2 worker file"
        if values is None:
            path = Path(directory) / str(meta["file"])
            self.where = str(path)
            self._file = DiskRows(path, self.num_rows, self.width, dtype=self.dtype, readonly=True)

    def __call__(self, start: int, stop: int) -> np.ndarray:
        return self.take(np.arange(start, stop, dtype=np.int64))

    def take(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if np.any((rows < 0) | (rows >= self.num_rows)):
            raise TrainingError(f"primary row out of range 0..{self.num_rows - 1}. This is a bug in gmp.")
        block = self._values[rows] if self._values is not None else \
            self._file.read(rows).astype(self.dtype.newbyteorder("="), copy=False)
        # a .rows file carries no checksum: a NaN there was found at the first step, blamed on the learning
        # rate and the dataset; checked as it is read (one pass over what is read anyway)
        bad = ~np.isfinite(block)
        if bad.any():
            k, col = (int(x[0]) for x in np.nonzero(bad))
            raise TrainingError(f"{self.where}: row {int(rows[k])} holds {float(block[k, col])!r} (column {col}), "
                                f"expected finite values; the checkpoint is damaged (a .rows file carries no "
                                f"checksum): start without `resume=True` or point `checkpoint_dir` elsewhere.")
        return block

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def upgrade_worker_v2(obj: dict[str, Any], num_primary: int | None) -> tuple[dict[str, Any], Callable]:
    """A schema-2 worker file (primaries inside ``store.table``/``opt_state``) as schema 3: its
    ``store`` without the primaries and a :class:`PrimaryRows` over them in memory.

    ``num_primary``: the worker's primaries (from the placement); an Adagrad file says it itself."""
    store = dict(obj["store"])
    opt_state = store.pop("opt_state", None)
    if num_primary is None:
        if opt_state is None:
            raise TrainingError("a schema-2 checkpoint of an SGD run does not record its primaries; pass the "
                                "placement (num_primary) to read it.")
        num_primary = int(opt_state.shape[0])
    table = store["table"]
    prim = table[:num_primary]
    if opt_state is not None:
        prim = torch.cat([prim, opt_state.to(prim.dtype)], dim=1)
    store["table"] = table[num_primary:]
    values = prim.numpy()
    meta = {"file": None, "num_rows": int(num_primary), "width": int(prim.shape[1]),
            "row_dim": int(table.shape[1]), "dtype": values.dtype.str}
    out = dict(obj)
    out["store"] = store
    out["primary_rows"] = meta
    return out, PrimaryRows(meta, values=values)
