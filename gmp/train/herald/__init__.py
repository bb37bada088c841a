"""Herald (APNet'22): location-aware assignment and on-demand synchronisation, as a package.

Imports go one way, top to bottom::

    schedule.py   HeraldSchedule: the trainer's ``--schedule herald`` (a gmp.train.schedule.Schedule)
      |  \\
      |   prefetch.py   Prefetcher (look-ahead thread), plan_prefetch (cDLRM early/late pulls)
      v
    engine.py     RuntimeScheduler: per-row replica state, one call per global batch
      |
      v
    kernels.py    the numba kernels (RowState, BatchBuffers: the state in two bundles)
      |        \\
      v         reference.py  Algorithm 1 as plain functions + a slow replay (the specification)
    cache.py      per-worker LRU / look-ahead caches
    events.py     event kinds, BatchSchedule, ScheduleTotals
    options.py    HeraldOptions (validated once; trainer and simulator defaults)

Low-level helpers come from :mod:`gmp.kernels` (SIMD ``prefetch``, ``gather_csr``).
"""

from .engine import RuntimeScheduler
from .events import (
    EVENT_NAMES,
    PULL_KINDS,
    PULL_MISS,
    PULL_STALE,
    PUSH_EVICT,
    PUSH_FLUSH,
    PUSH_KINDS,
    PUSH_PLAN,
    PUSH_SYNC,
    BatchSchedule,
    ScheduleTotals,
)
from .options import ASSIGNMENTS, HeraldOptions, default_cache_rows
from .reference import (
    batch_capacities,
    communication_plan,
    location_aware_assignment,
    naive_assignment,
    resident_masks,
    score_matrix,
)

__all__ = [
    "ASSIGNMENTS", "EVENT_NAMES", "PULL_KINDS", "PULL_MISS", "PULL_STALE", "PUSH_EVICT", "PUSH_FLUSH", "PUSH_KINDS",
    "PUSH_PLAN", "PUSH_SYNC", "BatchSchedule", "HeraldOptions", "RuntimeScheduler", "ScheduleTotals",
    "batch_capacities", "communication_plan", "default_cache_rows", "location_aware_assignment",
    "naive_assignment", "resident_masks", "score_matrix",
]
