"""The tiers in ``gmp train``: :class:`TierOptions` (``--table-location``, ``--cache-rows``/``--cache-bytes``,
``--lookahead``, ``--tier-dir``), :class:`TieredTable` (a worker's primaries in a master tier behind a
cache) and :class:`TierFeed` (their part of the trainer's input pipeline). See :mod:`gmp.train.tiers`."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from ...errors import TrainingError
from ...params import check_choice, check_int
from . import files
from ._kernels import step_primaries
from .cache import CACHE_POLICIES, RowCache, TierStats
from .prefetch import ReadyStep
from .rows import DiskRows, HostRows

TABLE_LOCATIONS = ("device", "host", "disk")
#: a tiered worker's cache when neither cache_rows nor cache_bytes is given: this share of its primaries
DEFAULT_CACHE_PERCENT = 10


@dataclass(frozen=True)
class TierOptions:
    """Where a worker's primary rows (and their optimizer state) live (``gmp train --table-location``).

    Parameters
    ----------
    table_location : ``"device"`` (one table on the worker's device, no tiers), ``"host"``
        (master rows in host memory) or ``"disk"`` (a file in ``tier_dir``)
    cache_rows : rows of the worker's device cache (0: from ``cache_bytes``, else
        :data:`DEFAULT_CACHE_PERCENT` % of its primaries)
    cache_bytes : the cache's size in bytes instead (rows x (row width + optimizer state) x itemsize)
    lookahead : steps the prefetcher reads ahead (0: each step's rows are loaded inline)
    cache_policy : ``"lookahead"`` (rows the window does not use are evicted first, then LRU; cDLRM)
        or ``"lru"``
    prefetch_depth : steps loaded and pinned ahead of the training one (with ``lookahead > 0``)
    tier_dir : directory of the disk tier's files (default: the system's temporary directory)
    """

    table_location: str = "device"
    cache_rows: int = 0
    cache_bytes: int = 0
    lookahead: int = 0
    cache_policy: str = "lookahead"
    prefetch_depth: int = 2
    tier_dir: str | None = None

    def __post_init__(self) -> None:
        E = TrainingError
        check_choice("table_location", self.table_location, TABLE_LOCATIONS, error=E)
        check_int("cache_rows", self.cache_rows, minimum=0, error=E)
        check_int("cache_bytes", self.cache_bytes, minimum=0, error=E)
        check_int("lookahead", self.lookahead, minimum=0, error=E)
        check_choice("cache_policy", self.cache_policy, CACHE_POLICIES, error=E)
        check_int("prefetch_depth", self.prefetch_depth, minimum=1, error=E)
        if self.cache_rows and self.cache_bytes:
            raise _param_error("cache_bytes", f"The 'cache_bytes' parameter cannot be combined with `cache_rows` "
                                              f"({self.cache_rows}), got {self.cache_bytes}; give one of them.")
        if self.table_location == "device":
            for name in ("cache_rows", "cache_bytes", "lookahead"):  # tier_dir: disk only (below)
                if getattr(self, name) not in (0, None):
                    raise _param_error(name, f"The '{name}' parameter applies to table_location='host' or "
                                             f"'disk' only, got table_location='device'; drop it or move the "
                                             f"table to host or disk.")
        if self.tier_dir is not None and self.table_location != "disk":
            raise _param_error("tier_dir", f"The 'tier_dir' parameter applies to table_location='disk' only, "
                                           f"got table_location={self.table_location!r}; drop it or move the "
                                           f"table to disk.")

    @property
    def tiered(self) -> bool:
        return self.table_location != "device"

    def capacity(self, num_primary: int, row_bytes: int) -> int:
        """Cache rows for a worker with ``num_primary`` primaries of ``row_bytes`` bytes (value + state)."""
        if self.cache_rows:
            return int(self.cache_rows)
        if self.cache_bytes:
            rows = int(self.cache_bytes) // int(row_bytes)
            if rows < 1:
                raise _param_error("cache_bytes", f"The 'cache_bytes' parameter must hold at least one row of "
                                                  f"{row_bytes} bytes, got {self.cache_bytes}.")
            return rows
        return max(1, -(-int(num_primary) * DEFAULT_CACHE_PERCENT // 100))

    def to_json(self) -> dict:
        return dict(self.__dict__)


def split_cache_rows(cache_rows: int | None, *, tiered: bool, herald: bool) -> tuple[int, int | None]:
    """``cache_rows`` of the one device cache as ``(own rows, Herald's remote rows)``: all of it for
    the worker's own tiered rows, or for Herald's copies of remote rows when the table is on the
    device; with both (``herald``: Herald keeps copies, i.e. the herald schedule at s = 0), Herald's
    runtime scheduler keeps at most half between steps (its share must be fixed: the scheduler
    decides which copies exist, identically on every rank) and the own rows get the rest. ``None``
    for Herald: its default (no copies kept)."""
    if not tiered:
        return 0, cache_rows
    if cache_rows is not None and cache_rows < 1:  # not "the default": that is leaving it out
        raise _param_error("cache_rows", f"The 'cache_rows' parameter must be >= 1 with a tiered table (the cache "
                                         f"of the worker's own rows), got {cache_rows}; leave it out for the "
                                         f"default (the largest step of the run or {DEFAULT_CACHE_PERCENT}% of the "
                                         f"largest worker's primaries, whichever is larger).")
    if not cache_rows:
        return 0, None
    if not herald:
        return int(cache_rows), None
    return int(cache_rows) - int(cache_rows) // 2, int(cache_rows) // 2


def cache_rows_for(own_rows: int, *, herald: bool) -> int:
    """The smallest ``cache_rows`` whose own share (:func:`split_cache_rows`) is ``own_rows``:
    ``2 * own_rows - 1`` with Herald (it keeps ``cache_rows // 2``), else ``own_rows``."""
    return 2 * int(own_rows) - 1 if herald else int(own_rows)


def _param_error(name: str, msg: str) -> TrainingError:
    exc = TrainingError(msg)
    exc.param = name
    return exc


class TieredTable:
    """One worker's primaries as ``[value | optimizer state]`` rows in a master tier, computed on
    through a :class:`RowCache` (what :class:`gmp.train.store.EmbeddingStore` holds instead of
    its primaries' part of the table when ``table_location`` is ``host`` or ``disk``).

    Master row ``p`` is the store's primary slot ``p``. During a step the rows the
    :class:`StepFeeder` pinned for it are used in place in the cache (:meth:`views` gives the
    cache tensor and the slots); any other row (a pushed copy, an early pull of the next
    step, evaluation, a checkpoint) goes through :meth:`RowCache.gather`/``scatter``: its
    slot when resident, else the master (cDLRM's victim rows). Either way the row's one
    current copy is read and written, so the model does not depend on the tier or the cache.
    """

    def __init__(self, options: TierOptions, *, worker: int, num_rows: int, row_dim: int, state: bool,
                 dtype, device, init: Callable[[int, int], np.ndarray]):
        self.options = options
        self.row_dim = int(row_dim)
        self.width = self.row_dim * (2 if state else 1)
        dtype = np.dtype(dtype)
        self.device = torch.device(device)
        self._path = where = None
        if options.table_location == "host":
            self.master = HostRows(_blocks(num_rows, init, self.width, dtype), copy=False, dtype=dtype)
        else:
            import tempfile

            where = Path(options.tier_dir) if options.tier_dir else Path(tempfile.gettempdir()) / "gmp-tiers"
            files.make_dirs(where)  # the missing ones, removed again when the last tier in them closes
            files.remove_stale(where)  # files of killed runs
            self._path = files.tier_file(where, worker)
            try:
                self.master = DiskRows.create(self._path, num_rows, self.width, init, dtype=dtype)
            except BaseException:
                _remove_file(self._path, where)
                raise
            files.lock(self.master.fileno())
        # the file and the directories made for it go at close, exit or garbage collection
        self._finalizer = weakref.finalize(self, _remove_file, self._path, where)
        capacity = options.capacity(num_rows, self.width * dtype.itemsize)
        self.cache = RowCache(self.master, max(1, capacity), device=self.device, policy=options.cache_policy)
        self.cache.advice = self._advice
        #: the cache's size came from gmp train's --cache-rows split with Herald (split_cache_rows)
        self.herald_share = False
        self._rows: np.ndarray | None = None  # the current step's pinned rows (ascending) and slots
        self._slots: np.ndarray | None = None

    def _advice(self, rows: int) -> str:
        """What to raise so that a step's ``rows`` distinct rows fit (the cache's error message)."""
        if self.options.cache_bytes:
            return f"raise cache_bytes to at least {rows * self.width * self.master.dtype.itemsize}"
        if self.herald_share:
            return (f"raise cache_rows to at least {cache_rows_for(rows, herald=True)} (Herald's copies keep "
                    f"half of it)")
        return f"raise cache_rows to at least {rows}"

    # -- the current step ---------------------------------------------------------------------
    def begin(self, ready: ReadyStep) -> None:
        if ready.event is not None:
            torch.cuda.current_stream(self.device).wait_event(ready.event)
        self._rows, self._slots = ready.rows, ready.slots

    def end(self) -> None:
        self._rows = self._slots = None

    def _fast(self, rows: np.ndarray) -> np.ndarray | None:
        """Cache slots of ``rows`` when the current step pinned them all, else None."""
        if self._rows is None or rows.size == 0 or self._rows.size == 0:
            return None
        if rows.size == self._rows.size and np.array_equal(rows, self._rows):
            return self._slots  # the step's own rows, as they were pinned
        pos = np.searchsorted(self._rows, rows)
        posc = np.minimum(pos, self._rows.size - 1)
        if not np.array_equal(self._rows[posc], rows):
            return None
        return self._slots[posc]

    # -- access -------------------------------------------------------------------------------
    def read(self, rows: np.ndarray) -> torch.Tensor:
        """``[k, width]``: the rows' values followed by their optimizer state (a copy)."""
        rows = np.asarray(rows, dtype=np.int64)
        slots = self._fast(rows)
        if slots is not None:
            return self.cache.tensor.index_select(0, torch.as_tensor(slots, device=self.device))
        return self.cache.gather(rows)

    def views(self, rows: np.ndarray, idx: torch.Tensor | None = None):
        """``(values, state, idx, commit)``: rows ``idx`` of ``values``/``state`` (state None
        without optimizer state) are ``rows``; write them in place, then call ``commit()``.
        ``idx``: the cache slots of ``rows`` when the step pinned them all, made ahead of the step."""
        rows = np.asarray(rows, dtype=np.int64)
        d = self.row_dim
        slots = self._fast(rows)
        if slots is not None:
            t = self.cache.tensor
            return (t[:, :d], t[:, d:] if self.width > d else None,
                    torch.as_tensor(slots, device=self.device) if idx is None else idx,
                    lambda: self.cache.mark_dirty(slots))
        tmp = self.cache.gather(rows)
        return (tmp[:, :d], tmp[:, d:] if self.width > d else None,
                torch.arange(rows.size, device=self.device), lambda: self.cache.scatter(rows, tmp))

    def flush(self) -> None:
        """Write every dirty cached row back to the master (counted in ``rows_written_back``)."""
        self.cache.flush()

    def read_all(self) -> np.ndarray:
        """Every master row (the cache flushed first): ``[num_rows, width]``."""
        self.cache.flush()
        return self.master.read(np.arange(self.master.num_rows, dtype=np.int64))

    def blocks(self, block_rows: int = DiskRows.BLOCK_ROWS) -> Iterator[np.ndarray]:
        """Every master row in order, ``block_rows`` at a time (the cache flushed first; a checkpoint
        of a table larger than RAM)."""
        self.cache.flush()
        for a in range(0, self.master.num_rows, block_rows):
            yield self.master.read(np.arange(a, min(self.master.num_rows, a + block_rows), dtype=np.int64))

    def write_blocks(self, rows: Callable[[int, int], np.ndarray], state: dict | None = None) -> None:
        """Replace every master row by ``rows(start, stop)``, block by block (a checkpoint being
        loaded): the cache's own rows are forgotten first; ``state`` (:meth:`state_dict`, None from a
        checkpoint of a device run: counters from 0) gives the running epoch's counters."""
        self.cache.clear()
        self.load_state_dict(state or {})
        for a in range(0, self.master.num_rows, DiskRows.BLOCK_ROWS):
            b = min(self.master.num_rows, a + DiskRows.BLOCK_ROWS)
            self.master.write(np.arange(a, b, dtype=np.int64), np.asarray(rows(a, b), dtype=self.master.dtype))

    def memory(self) -> dict:
        return {"location": self.options.table_location, "master_bytes": int(self.master.nbytes),
                "cache_rows": int(self.cache.capacity), "cache_bytes": int(self.cache.nbytes)}

    def reset_stats(self) -> None:
        self.cache.stats = TierStats()

    def state_dict(self) -> dict:
        """The running epoch's counters (``TierStats``), for a checkpoint. The cache's contents are not
        kept: a checkpoint flushes it, and the resumed run starts with an empty cache (cold), so its
        epoch record counts the steps before the interrupt as the interrupted run did and the steps
        after it from a cold cache."""
        return {"stats": self.cache.stats.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.cache.stats = TierStats.from_state(state.get("stats", {}))

    def close(self) -> None:
        self.master.close()
        self._finalizer()


def _remove_file(path: Path | None, directory: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass
    if directory is not None:
        files.release_dirs(directory)


def _blocks(num_rows: int, init: Callable[[int, int], np.ndarray], width: int, dtype) -> np.ndarray:
    out = np.empty((num_rows, width), dtype=dtype)
    for a in range(0, num_rows, DiskRows.BLOCK_ROWS):
        b = min(num_rows, a + DiskRows.BLOCK_ROWS)
        out[a:b] = init(a, b)
    return out


class TierFeed:
    """The tiered stores' part of the trainer's one input pipeline (:func:`gmp.train.prepare.pipeline_steps`,
    whose :class:`StepFeeder` loads and pins :meth:`rows_of` each step ahead of it).

    ``ctx``: the trainer's :class:`~gmp.train.context.StepContext`; ``epoch_start``: the steps begin at
    the epoch's first step (the record's tier figures count from there).

    A step's rows, per local worker: its primaries among the distinct rows of every worker's
    batch of the step (all its primaries the step reads, serves or updates under bounded
    staleness; Herald's pushes of pending copies and early pulls go through the victim path).
    """

    def __init__(self, ctx, *, epoch_start: bool) -> None:
        self.ctx = ctx
        opts, herald = ctx.tiers, ctx.herald
        #: the window (steps read ahead; 0: each step's rows loaded inline) and the admission depth
        self.lookahead = opts.lookahead if opts is not None else (herald.lookahead if herald is not None else 0)
        self.prefetch_depth = opts.prefetch_depth if opts is not None else 1
        self.live = [(li, s.tier) for li, s in enumerate(ctx.stores) if s.tier is not None]
        self._maps = []
        for li, _t in self.live:
            store = ctx.stores[li]
            identity, dense = store.slots.dense()
            self._maps.append((identity, dense if dense is not None else np.zeros(1, np.int32),
                               identity or dense is not None, np.zeros(store.num_primary, dtype=np.uint8), store))
        for _, t in self.live:  # Herald's copies share the cache: gmp train's --cache-rows was split (split_cache_rows)
            t.herald_share = herald is not None and herald.cache_rows > 0
        if epoch_start:
            for _, t in self.live:
                t.reset_stats()

    @property
    def caches(self) -> list[RowCache]:
        return [t.cache for _, t in self.live]

    def rows_of(self, step) -> list[np.ndarray]:
        """Per tiered store, the master rows (its primary slots, ascending) ``step`` computes on."""
        ctx = self.ctx
        samples = np.concatenate([np.asarray(a, dtype=np.int64) for a in step.samples]) if step.samples else \
            np.zeros(0, np.int64)
        out = []
        uniq = None
        for identity, dense, compiled, mark, store in self._maps:
            if compiled:  # one compiled pass (the placement's map is immutable: safe in the feeder's thread)
                out.append(step_primaries(ctx.data.indptr, ctx.data.indices, samples, dense, identity,
                                          store.num_primary, mark))
                continue
            if uniq is None:
                uniq = np.unique(ctx.data.gather(samples)[1])
            slots = store.slots.lookup(uniq)
            out.append(slots[(slots >= 0) & (slots < store.num_primary)])
        return out

    def resident(self, ready: list[ReadyStep]) -> list[ReadyStep | None]:
        """``ready`` (one per tiered store) as one entry per local worker (None: no tier)."""
        out: list[ReadyStep | None] = [None] * len(self.ctx.stores)
        for (li, _), r in zip(self.live, ready):
            out[li] = r
        return out

    def begin(self, ready: list[ReadyStep]) -> None:
        """The step starts: it computes on ``ready``'s slots (and waits for their loads on CUDA)."""
        for (_, t), r in zip(self.live, ready):
            t.begin(r)

    def end(self) -> None:
        for _, t in self.live:
            t.end()
