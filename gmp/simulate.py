"""Replay a training epoch without training: count the cache pulls and pushes a schedule incurs.

``gmp simulate`` runs :class:`gmp.train.herald.RuntimeScheduler` -- the very
state machine the trainer's ``--schedule herald`` uses -- over one epoch of
global batches and reports the transfers (see that module for the exact
semantics of every count):

* ``pulls``: rows fetched from a primary into a worker (cache miss, or a
  secondary/cached copy invalidated by another worker's update);
* ``pushes``: rows whose accumulated updates a worker sends to the primary
  (at once under naive synchronisation; under on-demand synchronisation when
  the communication plan, a cache eviction, a multi-writer iteration or the
  epoch end requires it);
* ``rows_pulled_bytes`` / ``rows_pushed_bytes``: those counts x
  ``embedding_dim`` x :data:`gmp.constants.VALUE_BYTES` (float32 rows; optimizer state not counted);
* ``schedule_ms_per_batch``: mean wall time of one scheduler step
  (assignment + communication plan + snapshot update), single thread; the
  first batch (which loads the compiled kernels) is excluded when there are
  others.

**Matching the trainer.** ``gmp train --schedule herald`` at staleness 0
executes exactly the transfers this state machine lists (the trainer's store
keeps the cache and the pending updates, :mod:`gmp.train.protocol_herald`), so with the
same manifest, batch size, seed and ``--on-demand/--no-on-demand``,
``--cache-rows``, ``--cache-policy``, ``--lookahead`` and
``--read-only-replicas`` (train: ``--read-only-replicas/--writable-replicas``)
every per-kind count here equals the trainer's first-epoch ``herald`` object
(``pull_miss`` = ``remote_rows_read``, ``pull_stale`` =
``staleness_refreshes``, ``pushes`` = ``remote_rows_pushed``;
tests/test_herald_train.py, tests/test_simulate.py). Mind the defaults, the
one deliberate difference between the two commands
(:meth:`gmp.train.herald.HeraldOptions.for_simulator`): the simulator follows
Herald's paper; ``gmp train`` its own store -- pass the flags explicitly to
compare. Later epochs differ from this one-epoch replay because caches
persist across epochs. ``--lookahead`` is taken only with ``--cache-policy lookahead``, the
one part of a replay that reads it (:func:`check_simulated_options`); under ``lru`` the
trainer's ``--lookahead`` drives its prefetch thread alone, which moves no other row, so the
replay of such a run leaves it out.

Every schedule of ``gmp train`` (:data:`gmp.train.registry.SCHEDULES`) can be
replayed, with the trainer's own sample order (the trainer's schedule classes
make it, so the two cannot drift apart):

* ``naive`` and ``herald``: global batches as the trainer's ``naive``
  schedule draws them (:func:`epoch_order`: with ``shuffle="seeded"``
  :func:`gmp.seeds.epoch_permutation`, a seeded permutation of the training
  samples; with ``shuffle="none"`` the file order ``0, 1, 2, ...``), cut into
  chunks of ``num_workers * batch_size``; ``naive`` splits each into N
  consecutive parts, ``herald`` assigns it with Herald's Algorithm 1;
* ``static`` (the trainer's default, HET-GMP): worker ``w`` walks the
  training samples the placement assigns it
  (:class:`gmp.train.schedule.StaticSchedule`: its shard permuted by
  :func:`gmp.seeds.epoch_rng`, or in file order with ``shuffle="none"``);
  step ``t`` gives it items ``[t*B, (t+1)*B)`` of its shard, and a worker
  whose shard has run out trains nothing in the remaining steps. The engine
  replays each step as one global batch split into N parts of B, the short
  parts padded with a sample that uses no row (:func:`static_order`), so
  padding moves nothing and ``samples`` counts only real samples.

``--on-demand`` defaults to on for ``herald`` and off for ``naive`` and
``static``, so the four rows of Herald's Table 1 are::

    naive                  --schedule naive  --no-on-demand
    on-demand only         --schedule naive  --on-demand
    location-aware only    --schedule herald --no-on-demand
    Herald (both)          --schedule herald --on-demand

JSON (``--json``) example::

    {"schedule": "herald", "shuffle": "seeded", "on_demand": true, "workers": 8, "batch_size": 128,
     "cache_rows": 100000, "cache_policy": "lru", "lookahead": 0, "seed": 0,
     "embedding_dim": 16, "batches": 879, "samples": 900000,
     "pulls": 1234, "pushes": 1000, "rows_pulled_bytes": 78976, "rows_pushed_bytes": 64000,
     "pull_miss": 1000, "pull_stale": 234, "push_sync": 500, "push_plan": 300,
     "push_evict": 150, "push_flush": 50, "prefetchable_pulls": 900,
     "schedule_ms_per_batch": 1.9, "wall_s": 2.1}
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from .constants import DEFAULT_EMBEDDING_DIM, VALUE_BYTES
from .errors import PlacementError, TrainingError
from .params import check_bool, check_choice, check_float, check_int, param_error
from .placement import Placement
from .seeds import check_seed
from .train.herald import HeraldOptions, RuntimeScheduler
from .train.schedule import SHUFFLES, NaiveSchedule, StaticSchedule

#: the schedules ``gmp simulate`` replays: every name of :data:`gmp.train.registry.SCHEDULES`
#: (tests/test_simulate.py checks the two agree). ``static`` runs the engine's naive split over
#: padded steps (:func:`static_order`).
SCHEDULES = ("static", "naive", "herald")


def epoch_order(num_train: int, seed: int, epoch: int = 0, shuffle: str = "seeded") -> np.ndarray:
    """The order in which an epoch of the ``naive``/``herald`` schedules visits the training samples
    ``[0, num_train)``: the trainer's :meth:`gmp.train.schedule.NaiveSchedule.epoch_order` (a seeded
    :func:`gmp.seeds.epoch_permutation`, or the file order with ``shuffle="none"``)."""
    # the order does not depend on the worker count or batch size (NaiveSchedule's docstring)
    return NaiveSchedule(1, num_train, 1, seed=seed, shuffle=shuffle).epoch_order(epoch)


def static_order(placement: Placement, num_train: int, batch_size: int, pad: int, *, seed: int = 0,
                 epoch: int = 0, shuffle: str = "seeded") -> np.ndarray:
    """The trainer's ``static`` steps of ``epoch`` as one sample order for the engine's naive split.

    Step ``t`` becomes the global batch ``[part_0, ..., part_{N-1}]`` where ``part_w`` is
    worker ``w``'s samples of that step (:class:`gmp.train.schedule.StaticSchedule`) padded
    to ``batch_size`` with the sample id ``pad`` (a sample that uses no row), so the naive
    split of ``N * batch_size`` into N consecutive parts of ``batch_size`` gives every worker
    exactly its step. Example: shards ``[0, 2, 4]`` and ``[1]``, B = 2, pad 9:
    ``[0, 2, 1, 9, 4, 9, 9, 9]``.
    """
    sched = StaticSchedule(placement, num_train, batch_size, seed=seed, shuffle=shuffle)
    b = int(batch_size)
    n = sched.num_workers
    steps = sched.num_steps(epoch)
    out = np.full(steps * n * b, pad, dtype=np.int64)
    for w, shard in enumerate(sched.epoch_shards(epoch)):
        # item i of the shard is step i // b, slot i % b of worker w's part
        i = np.arange(shard.size, dtype=np.int64)
        out[(i // b) * (n * b) + w * b + i % b] = shard
    return out


def simulator_options(schedule: str, num_active_rows: int, **overrides: Any) -> HeraldOptions:
    """``gmp simulate``'s replica model for ``schedule`` (:meth:`HeraldOptions.for_simulator`;
    ``static`` takes the ``naive`` defaults: no on-demand synchronisation)."""
    check_choice("schedule", schedule, SCHEDULES, error=TrainingError)
    return HeraldOptions.for_simulator("herald" if schedule == "herald" else "naive", num_active_rows, **overrides)


def check_order(order: Any, num_train: int) -> np.ndarray:
    """``order`` (:func:`simulate`'s explicit sample order) as int64, or a one-line :class:`TrainingError`.

    An order lists training samples: integers in ``[0, num_train)``, each at most once (the epoch the
    trainer walks visits every sample once; a prefix or any subset of the samples is an order too).
    Floats are refused rather than truncated, negative ids rather than counted from the end: the
    scheduler's kernels read the CSR at these ids unchecked.

    >>> check_order([2, 0], 3).tolist()
    [2, 0]
    """
    expected = f"a 1-D sequence of training sample ids (integers in [0, {num_train}), each at most once)"

    def fail(got: str) -> TrainingError:
        return param_error(TrainingError, "order", f"The 'order' parameter must be {expected}, got {got}.")

    if isinstance(order, (str, bytes)) or np.isscalar(order):
        raise fail(repr(order)[:40])
    try:
        arr = np.asarray(order)
    except (TypeError, ValueError):  # ragged nesting
        raise fail(f"a {type(order).__name__} numpy cannot read as an array") from None
    if arr.ndim != 1:
        raise fail(f"an array of shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise fail(f"{arr.dtype} values")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= num_train:
        bad = lo if lo < 0 else hi
        raise fail(f"{bad} at position {int(np.flatnonzero(arr == bad)[0])}")
    out = arr.astype(np.int64, copy=False)
    seen = np.zeros(int(num_train), dtype=np.bool_)
    seen[out] = True
    if np.count_nonzero(seen) != out.size:  # a repeat: name the first one
        _, first = np.unique(out, return_index=True)
        again = np.setdiff1d(np.arange(out.size), first)[0]
        raise fail(f"sample {int(out[again])} twice (positions {int(np.flatnonzero(out == out[again])[0])} and "
                   f"{int(again)})")
    return out


def check_simulated_options(options: HeraldOptions) -> None:
    """Refuse a replica model whose ``lookahead`` a replay would not read: in the replay it is only the
    window of ``cache_policy="lookahead"`` (the trainer's prefetch thread, which it also drives there,
    moves no other row), so under ``"lru"`` it changes no count. ``gmp simulate`` and
    :func:`gmp.simulate_epoch` call it, as other commands refuse settings that have no effect."""
    if options.lookahead > 0 and options.cache_policy != "lookahead":
        raise param_error(TrainingError, "lookahead", f"The 'lookahead' parameter has no effect under cache_policy="
                                                      f"{options.cache_policy} (it is the window of cache_policy="
                                                      f"lookahead), got lookahead={options.lookahead}; pass "
                                                      f"cache_policy=lookahead, or lookahead=0.")


def _with_padding_sample(indptr, indices, num_train: int):
    """The training samples' CSR plus one sample (id ``num_train``) that uses no row."""
    indptr = np.asarray(indptr[: num_train + 1])
    end = int(indptr[-1])
    return np.append(indptr, np.int64(end)).astype(indptr.dtype, copy=False), np.asarray(indices[:end])


@numba.njit(cache=True)
def _filter_csr(indptr, indices, keep, num_samples):  # pragma: no cover - compiled
    out_ptr = np.zeros(num_samples + 1, dtype=np.int64)
    out_idx = np.empty(indptr[num_samples], dtype=indices.dtype)
    k = 0
    for s in range(num_samples):
        for j in range(indptr[s], indptr[s + 1]):
            if keep[indices[j]]:
                out_idx[k] = indices[j]
                k += 1
        out_ptr[s + 1] = k
    return out_ptr, out_idx[:k]


def check_min_frequency(min_frequency: Any) -> float:
    """``min_frequency`` (a fraction of the training samples, :func:`hot_rows_only`) in ``[0, 1)``: at 1 or
    more no row is used by more samples than there are, so nothing would be counted."""
    value = check_float("min_frequency", min_frequency, minimum=0.0, error=TrainingError)
    if value >= 1.0:
        raise param_error(TrainingError, "min_frequency", f"The 'min_frequency' parameter must be a finite number >= 0 "
                                                          f"and < 1 (a fraction of the training samples; Herald caches "
                                                          f"rows of frequency > 1e-5), got {min_frequency!r}.")
    return value


def hot_rows_only(indptr, indices, num_train: int, min_frequency: float):
    """The training samples' CSR restricted to rows used by more than ``min_frequency * num_train`` of them.

    Herald (section 2.3) caches only embeddings with a frequency above 1e-5;
    the others are served outside the cache. ``simulate(min_frequency=...)``
    counts the transfers of the cached (hot) rows only.
    """
    indptr = np.asarray(indptr[: num_train + 1])
    indices = np.asarray(indices[: int(indptr[-1])])
    degree = np.bincount(indices, minlength=int(indices.max()) + 1 if indices.size else 0)
    keep = degree > min_frequency * num_train
    return _filter_csr(indptr, indices, keep, int(num_train))


def parameter_server_placement(num_workers: int, num_embeddings: int) -> Placement:
    """Herald's setting: every primary on an extra worker ``num_workers`` (the PS) that trains nothing."""
    return Placement.edge_cut(num_workers + 1, np.zeros(0, dtype=np.int32),
                              np.full(num_embeddings, num_workers, dtype=np.int32), method="parameter-server")


def active_rows(indptr, indices, num_train: int) -> int:
    """Number of distinct rows the training samples use."""
    end = int(indptr[num_train])
    idx = np.asarray(indices[:end])
    if idx.size == 0:
        return 0
    used = np.zeros(int(idx.max()) + 1, dtype=np.bool_)
    used[idx] = True
    return int(np.count_nonzero(used))


@dataclass
class SimulationResult:
    config: dict[str, Any]
    totals: dict[str, int]
    schedule_ms_per_batch: float
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        row_bytes = int(self.config["embedding_dim"]) * VALUE_BYTES
        out = dict(self.config)
        out.update(self.totals)
        out["rows_pulled_bytes"] = self.totals["pulls"] * row_bytes
        out["rows_pushed_bytes"] = self.totals["pushes"] * row_bytes
        out["schedule_ms_per_batch"] = round(self.schedule_ms_per_batch, 4)
        out["wall_s"] = round(self.wall_s, 3)
        return out


def simulate(indptr, indices, placement: Placement, *, num_train: int, batch_size: int, schedule: str = "herald",
             options: HeraldOptions | None = None, seed: int = 0, epoch: int = 0, shuffle: str = "seeded",
             embedding_dim: int = DEFAULT_EMBEDDING_DIM, parameter_server: bool = False, min_frequency: float = 0.0,
             order: np.ndarray | None = None) -> SimulationResult:
    """Replay one epoch (samples ``[0, num_train)`` in the trainer's order) and count transfers.

    Parameters
    ----------
    indptr, indices : sample CSR of the dataset (all samples; only the training range is used)
    placement : the manifest's placement (primaries and secondaries)
    schedule : {"static", "naive", "herald"} (:data:`SCHEDULES`)
    options : the replica model; default :func:`simulator_options` (Herald's paper:
        on-demand for herald, 10% caches, writable copies)
    shuffle : {"seeded", "none"}: the trainer's ``--shuffle`` (``none`` walks the file order)
    parameter_server : Herald's own setting: the placement's primaries are
        ignored and every row lives on a separate parameter server (an extra
        worker that trains nothing), so every row a worker uses is either
        cached or pulled (:func:`parameter_server_placement`)
    min_frequency : count only rows used by more than this fraction (in ``[0, 1)``) of the
        training samples (Herald caches embeddings with frequency > 1e-5);
        0 counts every row (:func:`hot_rows_only`)
    order : optional explicit sample order of the ``naive``/``herald`` global batches
        (overrides ``seed``/``epoch``/``shuffle``; not for ``static``): training sample ids in
        ``[0, num_train)``, each at most once (:func:`check_order`)
    """
    E = TrainingError
    check_choice("schedule", schedule, SCHEDULES, error=E)
    check_choice("shuffle", shuffle, SHUFFLES, error=E)
    seed = check_seed(seed, error=E)
    check_int("epoch", epoch, minimum=0, error=E)  # numpy's SeedSequence refuses a negative one in a traceback
    check_int("embedding_dim", embedding_dim, minimum=1, error=E)
    check_int("batch_size", batch_size, minimum=1, error=E)
    check_bool("parameter_server", parameter_server, error=E)
    check_min_frequency(min_frequency)
    if not isinstance(placement, Placement):
        raise E(f"The 'placement' parameter must be a gmp.placement.Placement, got {type(placement).__name__}.")
    placement.check()  # its worker ids index the scheduler's per-worker state unchecked
    check_int("num_train", num_train, minimum=0, maximum=int(np.asarray(indptr).size) - 1, error=E)
    if placement.num_samples < num_train:  # the static shards read the owners of the training samples
        raise PlacementError(f"placement covers {placement.num_samples} samples, fewer than the {num_train} training "
                             f"samples; use the placement made for this dataset.")
    if schedule == "static" and order is not None:
        raise E("The 'order' parameter applies to the naive and herald schedules; the static "
                "schedule's order is the placement's shards. Pass order=None.")
    if order is not None:
        order = check_order(order, num_train)
    if options is None:
        options = simulator_options(schedule, active_rows(indptr, indices, num_train))
    t0 = time.perf_counter()
    if min_frequency > 0:
        indptr, indices = hot_rows_only(indptr, indices, num_train, min_frequency)
    trainers = placement.num_workers
    if schedule == "static":
        # the static shards come from the placement's sample owners, before any PS placement replaces it
        indptr, indices = _with_padding_sample(indptr, indices, num_train)
        order = static_order(placement, num_train, batch_size, num_train, seed=seed, epoch=epoch, shuffle=shuffle)
    elif order is None:
        order = epoch_order(num_train, seed, epoch, shuffle)
    if parameter_server:
        placement = parameter_server_placement(trainers, placement.num_embeddings)
    sched = RuntimeScheduler(indptr, indices, placement, options, batch_size=batch_size,
                             assignment="herald" if schedule == "herald" else "naive", num_trainers=trainers)
    sched.start_epoch(order)
    for _ in sched:
        pass
    wall = time.perf_counter() - t0
    tot = sched.totals
    config = {
        "schedule": schedule, "shuffle": shuffle, "on_demand": options.on_demand, "workers": trainers,
        "parameter_server": bool(parameter_server),
        "batch_size": int(batch_size), "cache_rows": options.cache_rows, "cache_policy": options.cache_policy,
        "lookahead": options.lookahead, "seed": int(seed), "embedding_dim": int(embedding_dim),
        "read_only_replicas": options.read_only_replicas, "min_frequency": float(min_frequency),
        "batches": tot.batches,
        "samples": int(np.count_nonzero(order < num_train)) if schedule == "static" else sched.epoch_size,
    }
    ms = tot.ms_per_batch()
    return SimulationResult(config, tot.to_json(), ms, wall)
