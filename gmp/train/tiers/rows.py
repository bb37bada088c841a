"""The master tier: a worker's rows in host memory (:class:`HostRows`) or in a file read and
written with ``preadv``/``pwritev`` (:class:`DiskRows`; never memory-mapped, so resident memory
stays the cache plus one transfer buffer). See :mod:`gmp.train.tiers`."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ...errors import TrainingError

FLOAT = np.float32


def _runs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and lengths of runs of consecutive values in sorted ``rows``."""
    if rows.size == 0:
        return rows[:0], rows[:0]
    brk = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [rows.size]])
    return rows[starts], ends - starts


class HostRows:
    """Master rows in host memory: a copy of ``values``, or ``values`` itself with ``copy=False``.

    Never pinned: a load to a CUDA cache gathers its rows into a pinned staging buffer, the
    source of the asynchronous copy (:meth:`RowCache._load`), so pinning the master would not
    make a copy asynchronous; it would page-lock the whole table (torch's pinned allocator rounds
    a block up to a power of two: up to twice the table)."""

    location = "host"

    def __init__(self, values: np.ndarray, *, copy: bool = True, dtype=FLOAT):
        self.data = np.array(values, dtype=dtype, copy=True) if copy else np.ascontiguousarray(values, dtype=dtype)
        self.dtype = self.data.dtype
        self.num_rows, self.width = self.data.shape

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def read(self, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            return np.take(self.data, rows, axis=0)
        np.take(self.data, rows, axis=0, out=out)
        return out

    def write(self, rows: np.ndarray, values: np.ndarray) -> None:
        self.data[rows] = values

    def close(self) -> None:
        pass


class DiskRows:
    """Master rows in a file (row ``r`` at byte ``r * width * 4``), read and written by
    ``preadv``/``pwritev`` on runs of consecutive rows; never memory-mapped.

    ``DiskRows.create(path, values_or_init, ...)`` writes the initial rows in blocks.
    """

    location = "disk"
    BLOCK_ROWS = 1 << 16

    def __init__(self, path: str | os.PathLike, num_rows: int, width: int, *, dtype=FLOAT, readonly: bool = False):
        self.path = Path(path)
        self.num_rows, self.width = int(num_rows), int(width)
        self.dtype = np.dtype(dtype)
        self.row_bytes = self.width * self.dtype.itemsize
        try:
            self._fd = os.open(self.path, os.O_RDONLY if readonly else os.O_RDWR)
        except OSError as exc:
            raise TrainingError(f"cannot open the disk tier {self.path}: {exc.strerror}.") from None
        size = os.fstat(self._fd).st_size
        if size != self.num_rows * self.row_bytes:
            os.close(self._fd)
            raise TrainingError(f"{self.path}: {size} bytes, expected {self.num_rows} rows x {self.row_bytes} bytes; "
                                f"the file is from another run or truncated.")

    @classmethod
    def create(cls, path: str | os.PathLike, num_rows: int, width: int, init, *, dtype=FLOAT) -> "DiskRows":
        """A new file of ``num_rows`` rows; ``init(start, stop)`` gives rows ``[start, stop)``."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            f = open(path, "wb")
        except OSError as exc:
            raise TrainingError(f"cannot create the disk tier {path}: {exc.strerror}; pass a writable "
                                f"tier_dir.") from None
        with f:
            for a in range(0, num_rows, cls.BLOCK_ROWS):
                b = min(num_rows, a + cls.BLOCK_ROWS)
                block = np.ascontiguousarray(init(a, b), dtype=dtype)
                if block.shape != (b - a, width):
                    raise TrainingError(f"disk tier init gave shape {block.shape}, expected {(b - a, width)}.")
                f.write(block.tobytes())
        return cls(path, num_rows, width, dtype=dtype)

    @property
    def nbytes(self) -> int:
        return self.num_rows * self.row_bytes

    def fileno(self) -> int:
        return self._fd

    def read(self, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((rows.size, self.width), dtype=self.dtype) if out is None else out
        order = np.argsort(rows, kind="stable")
        srt = rows[order]
        buf = np.empty((rows.size, self.width), dtype=self.dtype)
        starts, lens = _runs(srt)
        pos = 0
        for s, n in zip(starts.tolist(), lens.tolist()):
            view = memoryview(buf[pos:pos + n]).cast("B")
            got = os.preadv(self._fd, [view], s * self.row_bytes)
            if got != n * self.row_bytes:
                raise TrainingError(f"{self.path}: short read at row {s} ({got} of {n * self.row_bytes} bytes).")
            pos += n
        out[order] = buf
        return out

    def write(self, rows: np.ndarray, values: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        srt = rows[order]
        vals = np.ascontiguousarray(np.asarray(values, dtype=self.dtype)[order])
        starts, lens = _runs(srt)
        pos = 0
        for s, n in zip(starts.tolist(), lens.tolist()):
            view = memoryview(vals[pos:pos + n]).cast("B")
            try:
                put = os.pwritev(self._fd, [view], s * self.row_bytes)
            except OSError as exc:
                raise TrainingError(f"cannot write the disk tier {self.path}: {exc.strerror}.") from None
            if put != n * self.row_bytes:
                raise TrainingError(f"{self.path}: short write at row {s}; is the disk full?")
            pos += n

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass
