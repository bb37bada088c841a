"""The trainer's JSON records: counter names, one record per epoch (and every ``log_every`` steps).

Keys of a record: ``epoch``, ``step``, ``kind`` ("epoch" | "step"), ``train_loss``,
``samples``, ``steps``, ``samples_per_sec``, ``train_seconds``, ``bytes`` (per
category of :data:`gmp.comm.CATEGORIES`), ``comm_seconds``,
``embedding_bytes_per_step``, ``phase_seconds`` (seconds per phase of the steps,
:data:`gmp.train.steps.PHASES`, mean over processes), the :data:`COUNTERS`, the protocol's own objects
(``herald``, ``prefetch``), and on epoch records ``test_auc``, ``test_logloss``,
``memory_bytes_per_worker``. :func:`json_line` writes NaN as null.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

#: counters of every protocol
COUNTERS = ("remote_rows_read", "remote_rows_pushed", "staleness_refreshes")
#: per-kind transfers of ``--schedule herald`` (s = 0), the runtime scheduler's event names (+ prefetch)
HERALD_COUNTERS = ("pull_miss", "pull_stale", "push_sync", "push_plan", "push_evict", "push_flush",
                   "prefetched_rows")
ALL_COUNTERS = COUNTERS + HERALD_COUNTERS


class Counters:
    """The :data:`ALL_COUNTERS` of the running epoch, per local worker (``values[li]``), counted only
    while the engine counts (evaluation and replays are not)."""

    def __init__(self, engine, num_local: int) -> None:
        self.engine = engine
        self.values = np.zeros((num_local, len(ALL_COUNTERS)), dtype=np.int64)

    def add(self, li: int, name: str, value: int) -> None:
        if self.engine.counting:
            self.values[li, ALL_COUNTERS.index(name)] += int(value)

    def reset(self) -> None:
        self.values[:] = 0


def make_record(ctx, protocol, kind: str, extra: dict[str, Any], *, epoch: int, step: int,
                acc: dict[str, Any]) -> dict[str, Any]:
    """The record of the epoch accumulators ``acc`` at ``epoch`` (0-based) and ``step`` (collective: every
    process calls it). ``ctx``: the trainer's :class:`~gmp.train.context.StepContext`; ``protocol`` adds its
    own fields."""
    eng = ctx.engine
    counters = eng.sum_across(ctx.counters.values.sum(axis=0).astype(np.float64))
    nbytes = eng.total_bytes()
    loss = float(eng.sum_across(np.array([acc["loss_sum"]]))[0])
    samples, secs, steps = acc["samples"], acc["train_seconds"], max(1, acc["steps"])
    rec = {"epoch": epoch + 1, "step": step, "kind": kind,
           "train_loss": loss / samples if samples else float("nan"),
           "samples": samples, "steps": acc["steps"],
           "samples_per_sec": samples / secs if secs > 0 else float("nan"),
           "train_seconds": secs, "bytes": nbytes,
           # max over processes of the time inside collectives (local engine: in-memory exchange)
           "comm_seconds": ctx.max_across(eng.seconds),
           "embedding_bytes_per_step": (nbytes["embedding_rows"] + nbytes["gradients"]) / steps}
    phases = ctx.phase.seconds
    per_process = eng.sum_across(np.array(list(phases.values()))) * len(ctx.stores) / ctx.num_workers
    rec["phase_seconds"] = {k: float(v) for k, v in zip(phases, per_process)}
    by_name = {name: int(round(v)) for name, v in zip(ALL_COUNTERS, counters)}
    for name in COUNTERS:
        rec[name] = by_name[name]
    protocol.add_to_record(rec, by_name)
    tiers = tier_record(ctx)
    if tiers is not None:
        rec["tiers"] = tiers
    rec.update(extra)
    return rec


#: summed over workers in the record's ``tiers`` object (:class:`gmp.train.tiers.TierStats`)
TIER_SUMS = ("hits", "misses", "rows_loaded", "rows_written_back", "bytes_loaded", "bytes_written_back",
             "victim_rows_read", "victim_rows_written")


def tier_record(ctx) -> dict[str, Any] | None:
    """The ``tiers`` object (collective): cache hits/misses, rows and bytes moved each way between
    the master tier and the cache since the epoch began (victim rows included in the bytes), the
    longest prefetch stall of any process, and the peak bytes per tier (largest worker) and
    resident memory (largest process). None when the primaries are on the device."""
    tables = [s.tier for s in ctx.stores]
    if ctx.tiers is None or not tables:
        return None
    eng = ctx.engine
    sums = np.zeros(len(TIER_SUMS))
    stall = peak_pinned = peak_held = 0.0
    device = master = 0
    for store, t in zip(ctx.stores, tables):
        st = t.cache.stats
        sums += [getattr(st, k) for k in TIER_SUMS]
        stall = max(stall, st.prefetch_stall_seconds)
        peak_pinned = max(peak_pinned, st.peak_pinned_rows)
        peak_held = max(peak_held, st.peak_held_rows)
        device = max(device, store.memory_bytes()["total_bytes"])
        master = max(master, t.master.nbytes)
    tot = eng.sum_across(sums)
    out: dict[str, Any] = {k: int(round(v)) for k, v in zip(TIER_SUMS, tot)}
    looked = out["hits"] + out["misses"]
    out["hit_rate"] = out["hits"] / looked if looked else 1.0
    loc = ctx.tiers.table_location
    out.update({"table_location": loc, "cache_rows": int(max(t.cache.capacity for t in tables)),
                "lookahead": ctx.tiers.lookahead, "cache_policy": ctx.tiers.cache_policy,
                "prefetch_stall_seconds": ctx.max_across(stall),
                "peak_pinned_rows": int(ctx.max_across(peak_pinned)),
                "peak_held_rows": int(ctx.max_across(peak_held)),
                "peak_bytes": {"device": int(ctx.max_across(device)),
                               loc: int(ctx.max_across(master))},
                "peak_rss_bytes": int(ctx.max_across(_peak_rss()))})
    return out


def _peak_rss() -> float:
    """This process's peak resident set (bytes; Linux reports ru_maxrss in KiB)."""
    import resource

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def json_line(rec: dict[str, Any]) -> str:
    """One JSON line (NaN written as null)."""
    def fix(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    return json.dumps(fix(rec))
