"""cDLRM's capability as a library: rows in host memory or on disk, a device cache that
steps compute on, and a look-ahead prefetcher that fills it (cDLRM, RecSys'21, sections
3-5; Algorithms 1 and 2).

Three pieces, each usable alone:

:class:`HostRows`, :class:`DiskRows` — the *master* tier
    ``num_rows x width`` float32 rows: a worker's rows and their optimizer state side
    by side (``width = row_dim`` for SGD, ``2 * row_dim`` with Adagrad's sum of
    squares). ``HostRows`` is one array (not pinned: loads to a CUDA cache go through a
    pinned staging buffer); ``DiskRows`` is a file read and written with
    ``os.preadv``/``os.pwritev`` on runs of consecutive rows — never memory-mapped,
    so the process's resident memory stays the cache plus one transfer buffer, not
    the file's pages (file-backed pages of a mapping count in RSS and in a cgroup's
    limit).

:class:`RowCache` — the device tier
    ``capacity`` rows in one tensor on the worker's device; steps compute on its
    slots only. Fully associative (a slot map over the master's rows) where cDLRM is
    set-associative with random ways (its choice for a parallel GPU fill; here the
    CPU manages the tags, as cDLRM's occupancy table does, and a full map loses no
    row to set conflicts — cDLRM's "conflict victims" cannot happen). A row is
    loaded on a miss and written back to the master when evicted dirty. Eviction
    order: rows no step of the look-ahead window uses first (cDLRM: a row is kept
    while the window needs it), least recently used among them, then LRU among
    window rows; a row pinned by the current or an in-flight step is never evicted.

:class:`LookaheadPrefetcher` — cDLRM Algorithm 1 as a rolling window
    Reads the steps' row lists ``lookahead`` steps ahead; for each step entering
    the window it loads the missing rows into the cache and pins them, in a
    background thread, while the current step trains. cDLRM loads a whole window
    of ``n`` batches at once every ``n`` steps (Algorithm 2, line 3); a rolling
    window does the same work in smaller pieces, so the cache holds the rows of at
    most ``lookahead + 1`` steps instead of up to ``2n`` (the reading chosen here:
    the paper's point is that the window's rows are resident before their step,
    which both satisfy). ``lookahead = 0`` loads each step's rows inline.

**Exactness.** Every value a step reads and every update it makes goes through the
cache, and a row's only current copy is either its cache slot (while cached) or its
master row (after write-back), so a run with any tier and any cache size performs
the same float operations on the same values as the all-on-device table: results
are identical bit for bit (tested against a plain table with eviction every step).

**GPU path.** With a CUDA cache a load gathers its rows from the master (host array or
disk file) into a pinned staging buffer and copies it with ``non_blocking=True`` on a side
stream, with an event the step waits on; write-backs synchronise that stream before reading,
and reads and writes outside a step's rows (``gather``/``scatter``) make the current stream
wait for it. Loads are ordered after the admitting thread's current stream: compute on the
device's default stream (as the trainer does), or admit from the thread and stream that
compute. ``scripts/gpu_smoke.sh`` checks the path bit for bit on a GPU.

**In the trainer** (``gmp train --table-location host|disk``; :mod:`.table`): each worker's
primaries and their optimizer state are a :class:`TieredTable` inside its
:class:`~gmp.train.store.EmbeddingStore`; :class:`TierFeed` is their part of the trainer's one
input pipeline (:func:`gmp.train.prepare.pipeline_steps`), whose :class:`StepFeeder` loads and
pins every step's rows ahead of it and then prepares the step in the same thread (its cache slots
are settled while the rows stay pinned, so the step's index tensors are made ahead). Rows a step touches
outside that set (Herald's pushes of pending copies, evaluation) are read and written in
place: their slot when cached, else the master (cDLRM's victim rows, section 5.2.2).

Modules: :mod:`.rows` (master tiers), :mod:`.cache` (``RowCache``, ``TierStats``),
:mod:`.prefetch` (``StepFeeder``, ``LookaheadPrefetcher``), :mod:`.table` (``TierOptions``,
``TieredTable``, ``TierFeed``), :mod:`.files` (the disk tier's folder: directories made for it,
files of killed runs).
"""


from .cache import CACHE_POLICIES, RowCache, TierStats
from .prefetch import LookaheadPrefetcher, ReadyStep, StepFeeder
from .rows import DiskRows, HostRows
from .table import (DEFAULT_CACHE_PERCENT, TABLE_LOCATIONS, TierFeed, TieredTable, TierOptions, cache_rows_for,
                    split_cache_rows)

__all__ = ["CACHE_POLICIES", "DEFAULT_CACHE_PERCENT", "DiskRows", "HostRows", "LookaheadPrefetcher", "ReadyStep",
           "RowCache", "StepFeeder", "TABLE_LOCATIONS", "TierFeed", "TierOptions", "TierStats", "TieredTable",
           "cache_rows_for", "split_cache_rows"]
