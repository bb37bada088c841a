"""The training loop and the worker logic, shared by both engines.

One :class:`Trainer` per process drives the workers that process hosts
(all of them under the local engine, one under ``torchrun``); every phase
below is a loop over those workers followed by one collective of the
:class:`~gmp.train.comm.CommEngine`. Per step (HET-GMP section 6, "Decentralized
Communication"):

1. **Request.** Each worker takes its batch from the schedule, finds the
   distinct rows it uses, and sends ``(id, clock)`` for every row it does not
   hold (clock -1) and — unless ``s = inf`` — every row it holds as a
   secondary (its replica clock) to the row's primary (``ids_clocks``).
2. **Serve.** Each primary answers every request with its current clock
   (``ids_clocks``) and, for remote reads and for secondaries failing the
   intra-embedding bound, the row (``embedding_rows``).
3. **Inter-embedding check** (only when ``0 < s < inf`` and the placement has
   secondaries): secondaries that fail the bound of
   :func:`~gmp.train.consistency.inter_stale` are fetched in a second round.
4. **Forward/backward** on the distinct rows as a leaf tensor; the loss is the
   sum of BCE over the worker's samples divided by the *global* batch size,
   so gradients add up to those of the mean over the union of all batches.
5. **Push.** Gradients of rows that are not primary on the worker go to
   their primaries with their ids (``gradients`` + ``ids_clocks``).
6. **Update.** Each primary sums its own and the received gradients of a row
   and applies the embedding optimizer once (clock + 1); dense gradients are
   all-reduced (``dense_allreduce``) and the dense optimizer steps.

Per step and worker, remote rows read = distinct non-local rows of its batch
and rows pushed = distinct non-primary rows — the same quantities as
:func:`gmp.metrics.batch_remote_reads` / ``batch_remote_pushes``. Refreshes
of secondaries are counted as ``staleness_refreshes``. With ``s > 0`` all
secondaries are brought up to date at the end of every epoch (also counted).

**``--schedule herald`` at s = 0** replaces phases 1-3 and 5-6 by the
transfers the :class:`~gmp.train.scheduler.RuntimeScheduler` lists for the
step (the single source of truth; :meth:`Trainer._herald_step`):
``push_plan`` (pending copies -> primaries, before anything is read), the
pulls (primary rows -> the worker's secondary or cache slot, with Adagrad
together with the primary's sum of squares), forward/backward on the
worker's own rows and copies, ``push_sync`` gradients (summed at the primary,
one optimizer step), the worker's own optimizer step on each copy it used
(kept *pending* when the scheduler pushes nothing: on-demand
synchronisation), ``push_evict`` (pending copies of evicted rows), then the
cache forgets what the scheduler's cache evicted. Pending pushes send the
copy's value and optimizer state, which overwrite the primary: the scheduler
guarantees that nobody read or wrote the row since the copy was pulled, so
this is the single-worker sequence of updates. At the epoch end every
pending copy is pushed (``push_flush``). The trainer refuses transfers the
scheduler's state does not justify (a pull over pending updates, a push of
a clean row, a row read but not held) instead of training on wrong values.
Counts: ``remote_rows_read`` = ``pull_miss``, ``staleness_refreshes`` =
``pull_stale``, ``remote_rows_pushed`` = all pushes; per kind in the
record's ``herald`` object. With ``--lookahead K`` the primaries send the next
step's provably final pulls unasked during this step (asynchronously under
torchrun; :meth:`Trainer._issue_early`, :mod:`gmp.train.prefetch`; the
record's ``prefetch`` object).

Evaluation reads primaries only (every non-primary row is pulled, uncounted),
each worker scoring a share of the test split.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numba
import numpy as np
import torch

from .. import progress
from ..errors import TrainingError
from ..placement import Placement
from .comm import CATEGORIES, CommEngine
from .consistency import inter_stale, intra_stale
from .models import Batch, bce_sum, make_model
from .schedule import Schedule, ScheduleContext, Step, make_schedule
from .store import EmbeddingStore

log = logging.getLogger("gmp.train")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
COUNTERS = ("remote_rows_read", "remote_rows_pushed", "staleness_refreshes")
#: per-kind transfers of ``--schedule herald`` (s = 0), the runtime scheduler's event names (+ prefetch)
HERALD_COUNTERS = ("pull_miss", "pull_stale", "push_sync", "push_plan", "push_evict", "push_flush",
                   "prefetched_rows")
ALL_COUNTERS = COUNTERS + HERALD_COUNTERS


@dataclass
class TrainConfig:
    """Training hyper-parameters (what ``gmp train`` parses)."""

    model: str = "wdl"
    embedding_dim: int = 16
    optimizer: str = "adagrad"
    lr: float = 0.01
    batch_size: int = 256
    epochs: int = 1
    staleness: float = 0.0
    seed: int = 0
    schedule: str = "static"
    shuffle: str = "seeded"
    dtype: str = "float32"
    hidden: tuple[int, ...] = (128, 64)
    eval_batch_size: int = 4096
    log_every: int = 0
    schedule_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise TrainingError(f"dtype must be one of {list(DTYPES)}, got {self.dtype!r}.")
        if not (self.staleness >= 0):
            raise TrainingError(f"--staleness must be >= 0 (or inf), got {self.staleness}.")
        if self.epochs < 0:
            raise TrainingError(f"--epochs must be >= 0, got {self.epochs}.")
        if not (self.lr > 0):
            raise TrainingError(f"--lr must be > 0, got {self.lr}.")
        self.hidden = tuple(int(h) for h in self.hidden)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["staleness"] = "inf" if math.isinf(self.staleness) else self.staleness
        d["hidden"] = list(self.hidden)
        return d


class TrainData:
    """The dataset arrays the trainer reads (samples, fields, labels, access frequencies)."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.indptr = np.asarray(dataset.indptr)
        self.indices = np.asarray(dataset.indices)
        self.labels = np.asarray(dataset.labels)
        self.dense = None if dataset.dense is None else np.asarray(dataset.dense)
        self.num_train = dataset.num_train
        self.num_samples = dataset.num_samples
        self.num_embeddings = dataset.num_embeddings
        self.num_dense = dataset.num_dense
        self.field_of = dataset.field_of_embedding().astype(np.int64)
        self.num_fields = len(dataset.categorical_fields)
        if self.num_fields == 0:
            raise TrainingError(f"{dataset.path}: the dataset has no categorical field to embed.")
        end = int(self.indptr[self.num_train])
        self.freq = np.bincount(self.indices[:end], minlength=self.num_embeddings).astype(np.int64)

    def gather(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """CSR (ptr, ids) of the given samples, ids int64."""
        return _gather(self.indptr, self.indices, np.asarray(samples, dtype=np.int64))


@numba.njit(cache=True)
def _gather(indptr, indices, samples):  # pragma: no cover - compiled
    n = samples.size
    ptr = np.empty(n + 1, dtype=np.int64)
    ptr[0] = 0
    for k in range(n):
        s = samples[k]
        ptr[k + 1] = ptr[k] + indptr[s + 1] - indptr[s]
    out = np.empty(ptr[n], dtype=np.int64)
    for k in range(n):
        a = indptr[samples[k]]
        for j in range(ptr[k + 1] - ptr[k]):
            out[ptr[k] + j] = indices[a + j]
    return ptr, out


def _group_by_owner(idx: np.ndarray, owner: np.ndarray, num_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Reorder ``idx`` by ``owner[idx]`` (stable); return (order, bounds[num_workers + 1])."""
    order = idx[np.argsort(owner[idx], kind="stable")]
    bounds = np.searchsorted(owner[order], np.arange(num_workers + 1))
    return order, bounds


@dataclass
class _WorkerStep:
    """Scratch state of one worker during one step."""

    samples: np.ndarray
    ptr: np.ndarray
    uniq: np.ndarray
    inv: np.ndarray
    slots: np.ndarray
    is_primary: np.ndarray
    is_secondary: np.ndarray
    req: np.ndarray | None = None  # indices into uniq of the rows requested, grouped by owner
    req_bounds: np.ndarray | None = None  # req[req_bounds[d]:req_bounds[d+1]] go to worker d
    req_clock: np.ndarray | None = None  # clock sent with each request (-1: not held)
    true_clock: np.ndarray | None = None  # primary clock of every row of uniq
    rows: torch.Tensor | None = None  # [len(uniq), row_dim] values read
    grad: torch.Tensor | None = None  # their gradients


class Trainer:
    """Trains one model over the workers hosted by ``engine`` (see the module docstring)."""

    def __init__(self, data: TrainData, placement: Placement, config: TrainConfig, engine: CommEngine,
                 *, schedule: Schedule | None = None):
        if placement.num_workers != engine.world_size:
            raise TrainingError(f"the manifest places rows on {placement.num_workers} workers but the engine runs "
                                f"{engine.world_size}; use --workers {placement.num_workers} "
                                f"(torchrun --nproc-per-node {placement.num_workers}).")
        placement.check(num_samples=data.num_samples, num_embeddings=data.num_embeddings)
        self.data = data
        self.placement = placement
        self.config = config
        self.engine = engine
        self.num_workers = engine.world_size
        self.primary = np.asarray(placement.embedding_primary)
        self.has_secondaries = placement.num_secondaries > 0
        self.staleness = float(config.staleness)
        self.dtype = DTYPES[config.dtype]
        self.device = engine.device_for(engine.local_workers[0])
        self.model = make_model(config.model, num_fields=data.num_fields, num_dense=data.num_dense,
                                embedding_dim=config.embedding_dim, hidden=config.hidden, seed=config.seed,
                                dtype=self.dtype).to(self.device)
        self.row_dim = self.model.row_dim
        self.stores = [EmbeddingStore(w, placement, row_dim=self.row_dim, optimizer=config.optimizer, lr=config.lr,
                                      seed=config.seed, dtype=self.dtype, device=engine.device_for(w))
                       for w in engine.local_workers]
        self._check_memory_plan()
        params = list(self.model.parameters())
        if config.optimizer == "sgd":
            self.dense_opt = torch.optim.SGD(params, lr=config.lr)
        else:
            self.dense_opt = torch.optim.Adagrad(params, lr=config.lr, eps=1e-10)
        if schedule is None:
            ctx = ScheduleContext(placement, data.num_train, config.batch_size, seed=config.seed,
                                  shuffle=config.shuffle, dataset=data.dataset, options=dict(config.schedule_options))
            schedule = make_schedule(config.schedule, ctx)
        if schedule.num_workers != self.num_workers:
            raise TrainingError(f"schedule is for {schedule.num_workers} workers, the engine runs {self.num_workers}.")
        self.schedule = schedule
        # position and epoch accumulators (checkpointed)
        self.epoch = 0
        self.step_in_epoch = 0
        self.counters = np.zeros((len(self.stores), len(ALL_COUNTERS)), dtype=np.int64)
        self.herald = self._herald_mode()
        self._early = None  # (handle, rows per local worker) of the early exchange in flight
        self._prefetch_stats = {"produce_s": 0.0, "stall_s": 0.0, "items": 0, "fetch_wait_s": 0.0}
        self.acc = {"loss_sum": 0.0, "samples": 0, "steps": 0, "train_seconds": 0.0}
        self.history: list[dict[str, Any]] = []
        self.interrupted = False
        self._stop_flag = False  # set by request_stop() (a signal handler); agreed on at the next step
        self._stop_now = False
        self.schedule.bind(self)

    def _check_memory_plan(self) -> None:
        """Compare the rows each worker holds with the manifest's plan.

        Every store already checked that it holds exactly the rows the placement
        lists (``Placement.rows_held``). When the partitioner was given a memory
        budget (``memory_per_worker`` bytes of ``embedding_dim`` float32 rows,
        the hybrid partitioner), the secondaries must fit in it beside the
        primaries; the table this trainer allocates (row width, dtype and
        optimizer state included) is logged against the plan.
        """
        opts = dict(self.placement.options or {})
        budget = opts.get("memory_per_worker")
        for store in self.stores:
            mem = store.memory_bytes()
            log.info("worker %d holds %d rows (%d primaries, %d secondaries): %d bytes", store.worker, mem["rows"],
                     mem["primaries"], mem["secondaries"], mem["total_bytes"])
            if budget is None:
                continue
            rows_planned = int(budget) // (int(opts.get("embedding_dim", 16)) * 4)
            if mem["secondaries"] and mem["rows"] > max(rows_planned, mem["primaries"]):
                raise TrainingError(f"worker {store.worker} holds {mem['rows']} rows, more than the manifest's memory "
                                    f"plan of {rows_planned} rows ({budget} bytes); re-run 'gmp partition'.")
            if mem["table_bytes"] > int(budget):
                log.warning("worker %d: the embedding table takes %d bytes, the plan assumed %d "
                            "(row width %d, %s)", store.worker, mem["table_bytes"], budget, self.row_dim,
                            self.config.dtype)

    def request_stop(self) -> None:
        """Ask :meth:`fit` to stop after the current step (safe from a signal handler)."""
        self._stop_flag = True

    # ------------------------------------------------------------------ step
    def _count(self, li: int, name: str, value: int) -> None:
        if self.engine.counting:
            self.counters[li, ALL_COUNTERS.index(name)] += int(value)

    def _prepare(self, li: int, samples: np.ndarray) -> _WorkerStep:
        store = self.stores[li]
        ptr, ids = self.data.gather(samples)
        uniq, inv = np.unique(ids, return_inverse=True)
        slots = store.lookup(uniq)
        return _WorkerStep(samples, ptr, uniq, inv.reshape(-1), slots, store.is_primary_slot(slots),
                           store.is_secondary_slot(slots))

    def _int_tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a, dtype=np.int64))

    def _read_rows(self, ws: list[_WorkerStep], *, check_secondaries: bool, staleness: float,
                   refresh: bool = True) -> None:
        """Phases 1-3: fill ``ws[i].rows`` ([U, row_dim]) obeying the staleness bound.

        ``staleness = -1`` pulls every non-primary row; ``refresh=False`` leaves
        the replicas untouched (evaluation reads the primaries' values only).
        """
        n = self.num_workers
        sends = []
        for li, s in enumerate(ws):
            store = self.stores[li]
            need = ~s.is_primary if check_secondaries else (s.slots < 0)
            s.req, s.req_bounds = _group_by_owner(np.flatnonzero(need), self.primary[s.uniq], n)
            sl = s.slots[s.req]
            s.req_clock = np.where(sl >= 0, store.clock[np.maximum(sl, 0)], -1)
            payload = np.stack([s.uniq[s.req], s.req_clock], axis=1)
            sends.append([self._int_tensor(payload[s.req_bounds[d]:s.req_bounds[d + 1]]) for d in range(n)])
        recv = self.engine.alltoallv(sends, "ids_clocks")
        reply_clock, reply_rows = [], []
        for li in range(len(ws)):
            store = self.stores[li]
            rc, rr = [], []
            for src in range(n):
                msg = recv[li][src].cpu().numpy().reshape(-1, 2)
                oslots = store.lookup(msg[:, 0])
                if np.any((oslots < 0) | (oslots >= store.num_primary)):
                    raise TrainingError(f"worker {store.worker} was asked for rows it is not primary of.")
                oc = store.clock[oslots]
                rc.append(self._int_tensor(oc))
                rr.append(store.read(oslots[intra_stale(oc, msg[:, 1], staleness)]))
            reply_clock.append(rc)
            reply_rows.append(rr)
        # reply sizes follow from the requests (clocks) and from the clocks (rows): no size exchange
        clocks = self.engine.alltoallv(reply_clock, "ids_clocks", recv_counts=[
            [int(s.req_bounds[src + 1] - s.req_bounds[src]) for src in range(n)] for s in ws])
        need = [[intra_stale(clocks[li][src].cpu().numpy().reshape(-1),
                             s.req_clock[s.req_bounds[src]:s.req_bounds[src + 1]], staleness) for src in range(n)]
                for li, s in enumerate(ws)]
        rows = self.engine.alltoallv(reply_rows, "embedding_rows",
                                     recv_counts=[[int(m.sum()) for m in need[li]] for li in range(len(ws))])
        second_round = []
        for li, s in enumerate(ws):
            store = self.stores[li]
            u = s.uniq.size
            true_clock = np.full(u, -1, dtype=np.int64)
            true_clock[s.is_primary] = store.clock[s.slots[s.is_primary]]
            out = torch.empty(u, self.row_dim, dtype=self.dtype, device=store.device)
            held = s.slots >= 0
            out[torch.as_tensor(np.flatnonzero(held), device=store.device)] = store.read(s.slots[held])
            for src in range(n):
                part = s.req[s.req_bounds[src]:s.req_bounds[src + 1]]
                c = clocks[li][src].cpu().numpy().reshape(-1)
                true_clock[part] = c
                got = part[need[li][src]]
                if got.size:
                    r = rows[li][src].to(store.device, self.dtype)
                    out[torch.as_tensor(got, device=store.device)] = r
                    sec = got[s.slots[got] >= 0]
                    if sec.size and refresh:  # intra-embedding refresh of secondaries (Sec. 5.3 (1))
                        store.refresh(s.slots[sec], r[torch.as_tensor(s.slots[got] >= 0, device=r.device)],
                                      true_clock[sec])
                        self._count(li, "staleness_refreshes", sec.size)
            self._count(li, "remote_rows_read", int((s.slots < 0).sum()))
            s.true_clock = true_clock
            s.rows = out
            if check_secondaries and self.has_secondaries and 0 < staleness and refresh:
                read_clock = true_clock.copy()
                read_clock[s.is_secondary] = store.clock[s.slots[s.is_secondary]]
                refreshable = s.is_secondary & (read_clock < true_clock)
                flagged = np.flatnonzero(inter_stale(s.ptr, s.inv, read_clock, self.data.freq[s.uniq], refreshable,
                                                     staleness))
                second_round.append(flagged)
        if second_round:  # every process takes this branch together (same config, same placement)
            self._inter_round(ws, second_round)

    def _inter_round(self, ws: list[_WorkerStep], flagged: list[np.ndarray]) -> None:
        """Phase 3: refresh the secondaries that failed the inter-embedding bound (Sec. 5.3 (2))."""
        n = self.num_workers
        orders, sends = [], []
        for li, s in enumerate(ws):
            order, bounds = _group_by_owner(flagged[li], self.primary[s.uniq], n)
            orders.append((order, bounds))
            ids = s.uniq[order]
            sends.append([self._int_tensor(ids[bounds[d]:bounds[d + 1]]) for d in range(n)])
        recv = self.engine.alltoallv(sends, "ids_clocks")
        replies = [[self.stores[li].read(self.stores[li].lookup(recv[li][src].cpu().numpy())) for src in range(n)]
                   for li in range(len(ws))]
        rows = self.engine.alltoallv(replies, "embedding_rows",
                                     recv_counts=[[int(b[src + 1] - b[src]) for src in range(n)] for _, b in orders])
        for li, s in enumerate(ws):
            store = self.stores[li]
            order, bounds = orders[li]
            for src in range(n):
                part = order[bounds[src]:bounds[src + 1]]
                if part.size:
                    r = rows[li][src].to(store.device, self.dtype)
                    s.rows[torch.as_tensor(part, device=store.device)] = r
                    store.refresh(s.slots[part], r, s.true_clock[part])
                    self._count(li, "staleness_refreshes", part.size)

    def _batch(self, s: _WorkerStep, device) -> Batch:
        f = self.data.num_fields
        entry_sample = np.repeat(np.arange(s.samples.size, dtype=np.int64), np.diff(s.ptr))
        ids_field = self.data.field_of[s.uniq[s.inv]]
        if np.any(ids_field < 0):
            raise TrainingError("a sample uses an embedding id outside every field of the dataset.")
        dense = None
        if self.data.num_dense:
            dense = torch.as_tensor(np.asarray(self.data.dense[s.samples]), device=device)
        seg = entry_sample * f + ids_field
        one_hot = seg.size == s.samples.size * f and bool(np.all(seg == np.arange(seg.size)))
        return Batch(int(s.samples.size), torch.as_tensor(s.inv, dtype=torch.int64, device=device),
                     None if one_hot else torch.as_tensor(seg, device=device), dense,
                     torch.as_tensor(np.asarray(self.data.labels[s.samples]), device=device))

    def train_step(self, step: Step) -> float:
        """Run one synchronous step of all local workers; return the sum of their sample losses."""
        if self.herald is not None and "herald" in step.info:
            return self._herald_step(step)
        total = step.global_batch_size
        if total == 0:
            return 0.0
        if len(step.samples) != self.num_workers:
            raise TrainingError(f"schedule gave {len(step.samples)} batches for {self.num_workers} workers.")
        ws = [self._prepare(li, step.samples[w]) for li, w in enumerate(self.engine.local_workers)]
        check = not math.isinf(self.staleness)
        self._read_rows(ws, check_secondaries=check, staleness=self.staleness)
        loss_sum = self._forward_backward(ws, total)  # phase 4
        # phase 5: push gradients of non-primary rows to their primaries
        n = self.num_workers
        id_sends, grad_sends, pushed = [], [], []
        for li, s in enumerate(ws):
            order, bounds = _group_by_owner(np.flatnonzero(~s.is_primary), self.primary[s.uniq], n)
            pushed.append(order)
            ids = s.uniq[order]
            g = s.grad[torch.as_tensor(order, dtype=torch.int64, device=s.grad.device)]
            id_sends.append([self._int_tensor(ids[bounds[d]:bounds[d + 1]]) for d in range(n)])
            grad_sends.append([g[bounds[d]:bounds[d + 1]] for d in range(n)])
            self._count(li, "remote_rows_pushed", order.size)
        rid = self.engine.alltoallv(id_sends, "ids_clocks")
        rgrad = self.engine.alltoallv(grad_sends, "gradients",
                                      recv_counts=[[int(t.shape[0]) for t in r] for r in rid])
        if self.staleness > 0:  # own updates visible locally on secondaries (store docstring)
            for li, s in enumerate(ws):
                if s.is_secondary.any():
                    sec = np.flatnonzero(s.is_secondary)
                    self.stores[li].apply_local(s.slots[sec], s.grad[torch.as_tensor(sec, dtype=torch.int64,
                                                                                      device=s.grad.device)])
        self._apply_at_primaries(ws, rid, rgrad)
        self._dense_step()
        return loss_sum

    def _apply_at_primaries(self, ws: list[_WorkerStep], rid, rgrad) -> None:
        """Phase 6: each primary sums its own and the received gradients per row and steps once."""
        n = self.num_workers
        for li, s in enumerate(ws):
            store = self.stores[li]
            own = np.flatnonzero(s.is_primary)
            slot_parts = [s.slots[own]] + [store.lookup(rid[li][src].cpu().numpy()) for src in range(n)]
            grad_parts = [s.grad[torch.as_tensor(own, dtype=torch.int64, device=s.grad.device)]]
            grad_parts += [rgrad[li][src].to(store.device, self.dtype) for src in range(n)]
            all_slots = np.concatenate(slot_parts)
            if all_slots.size == 0:
                continue
            uslots, where = np.unique(all_slots, return_inverse=True)
            summed = torch.zeros(uslots.size, self.row_dim, dtype=self.dtype, device=store.device)
            summed.index_add_(0, torch.as_tensor(where.reshape(-1), device=store.device),
                              torch.cat([g.to(store.device) for g in grad_parts]))
            store.apply_gradients(uslots, summed)

    def _forward_backward(self, ws: list[_WorkerStep], total: int) -> float:
        """Phase 4: forward/backward of every local worker; dense grads accumulate over them."""
        self.dense_opt.zero_grad(set_to_none=False)
        loss_sum = 0.0
        for li, s in enumerate(ws):
            leaf = s.rows.detach().requires_grad_(True)
            if s.samples.size:
                batch = self._batch(s, leaf.device)
                loss = bce_sum(self.model(leaf, batch), batch.labels)
                (loss / total).backward()
                loss_sum += float(loss.detach())
            s.grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        return loss_sum

    # ------------------------------------------------- herald (runtime-driven)
    def _herald_mode(self) -> dict[str, Any] | None:
        """The runtime scheduler's options when ``--schedule herald`` drives the transfers (s = 0), else None.

        At s = 0 every pull and push of a herald step is the one the
        :class:`~gmp.train.scheduler.RuntimeScheduler` lists (module docstring of
        :mod:`gmp.train.scheduler`); the trainer's per-worker store keeps the
        cache and the pending updates (:mod:`gmp.train.store`). With s > 0 the
        scheduler only assigns samples and the store works as for any schedule,
        which is exact only without cache and on-demand synchronisation.
        """
        opts = getattr(self.schedule, "engine_options", None)
        if opts is None or not hasattr(self.schedule, "_batches"):
            return None
        if self.staleness != 0:
            if opts["cache_rows"] or opts["on_demand"] or not opts["read_only_replicas"]:
                raise TrainingError("--cache-rows > 0, --on-demand and writable replicas need --staleness 0 "
                                    "(the runtime scheduler models s = 0 only, Herald section 3.3); use "
                                    "--staleness 0 or --cache-rows 0 --no-on-demand --read-only-replicas.")
            return None
        # copies are updated and read again only with on-demand sync or writable replicas; otherwise
        # every copy a worker updates is invalid afterwards and Adagrad's sums need not travel
        keep = bool(opts["on_demand"]) or not bool(opts["read_only_replicas"])
        for store in self.stores:
            store.enable_cache(ship_state=keep)
        return dict(opts, copies_stay_valid=keep)

    def _herald_source(self, epoch: int, start: int):
        """(BatchSchedule, per-local-worker ids in the scheduler's cache after that batch)."""
        hs = self.schedule
        for sched in hs._batches(epoch, start):
            eng = hs._engine
            snap = None
            if eng is not None:  # the state right after this batch (this runs before the next next_batch)
                snap = [np.sort(eng.row_ids[eng.caches.rows(w)]) for w in self.engine.local_workers]
            yield sched, snap

    def _herald_steps(self, epoch: int, start: int):
        """Steps of the runtime-driven herald schedule; each with the next step's schedule (or None)."""
        from .prefetch import Prefetcher

        hs = self.schedule
        n = self.num_workers
        k = int(self.herald["lookahead"])
        if self._early is not None:  # left over from an interrupted call: complete it, drop the rows
            self._take_early()
        pf = Prefetcher(self._herald_source(epoch, start), k) if k > 0 else None
        items = (item for item, _ in pf) if pf is not None else self._herald_source(epoch, start)
        completed = False
        try:
            cur = next(items, None)
            while cur is not None:
                nxt = next(items, None)
                sched, snap = cur
                step = Step(sched.index_in_epoch, [sched.worker_samples(w) for w in range(n)],
                            info={"herald": sched, "cache_after": snap,
                                  "next": nxt[0] if nxt is not None else None})
                yield step
                cur = nxt
            completed = True
        finally:
            if pf is not None:
                pf.close()
                st = pf.stats()
                for key in ("items", "produce_s", "stall_s"):
                    self._prefetch_stats[key] += st[key]
                    if isinstance(getattr(hs, "_prefetch_stats", None), dict):  # HeraldSchedule.prefetch_stats()
                        hs._prefetch_stats[key] = hs._prefetch_stats.get(key, 0) + st[key]
            if not completed:  # the scheduler ran ahead of training: replay it on the next call
                hs._engine = None

    def _steps(self, epoch: int, start: int):
        if self.herald is not None:
            return self._herald_steps(epoch, start)
        return self.schedule.steps(epoch, start)

    def _push_pending(self, rows_per_worker: list[np.ndarray], kind: str) -> None:
        """Push the copies of ``rows_per_worker[li]`` (pending updates applied) to their primaries."""
        n = self.num_workers
        id_sends, pay_sends = [], []
        for li, rows in enumerate(rows_per_worker):
            store = self.stores[li]
            rows = np.asarray(rows, dtype=np.int64)
            slots = store.lookup(rows)
            if np.any(slots < store.num_primary) or not np.all(store.dirty[slots]):
                raise TrainingError(f"worker {store.worker}: the runtime scheduler asks for a {kind} of rows "
                                    f"without pending updates here. This is a bug in gmp.")
            order, bounds = _group_by_owner(np.arange(rows.size), self.primary[rows], n)
            pay = store.read_payload(slots[order])
            id_sends.append([self._int_tensor(rows[order[bounds[d]:bounds[d + 1]]]) for d in range(n)])
            pay_sends.append([pay[bounds[d]:bounds[d + 1]] for d in range(n)])
            store.dirty[slots] = False
            self._count(li, kind, rows.size)
            self._count(li, "remote_rows_pushed", rows.size)
        rid = self.engine.alltoallv(id_sends, "ids_clocks")
        rpay = self.engine.alltoallv(pay_sends, "gradients",
                                     recv_counts=[[int(t.shape[0]) for t in r] for r in rid])
        for li, store in enumerate(self.stores):
            for src in range(n):
                ids = rid[li][src].cpu().numpy()
                if ids.size:
                    store.overwrite_primary(store.lookup(ids), rpay[li][src])

    def _pull(self, sched, nxt) -> None:
        """Pull this step's rows: those fetched one step early come from the early exchange, the
        rest on demand; then, with a look-ahead, start the early fetch of the next step's final rows."""
        from .scheduler import PULL_MISS, PULL_STALE

        n = self.num_workers
        staged = self._take_early()
        req_sends, wants = [], []
        for li, w in enumerate(self.engine.local_workers):
            self._count(li, "pull_miss", sched.rows(PULL_MISS, w).size)
            self._count(li, "pull_stale", sched.rows(PULL_STALE, w).size)
            self._count(li, "remote_rows_read", sched.rows(PULL_MISS, w).size)
            self._count(li, "staleness_refreshes", sched.rows(PULL_STALE, w).size)
            rows = np.unique(sched.pulls(w))
            pre = None
            if staged is not None and staged[li][0].size:  # fetched one step early (provably final values)
                st_rows, st_pay = staged[li]
                have = np.isin(rows, st_rows)
                pos = np.searchsorted(st_rows, rows[have])
                pre = (rows[have], st_pay[torch.as_tensor(pos, dtype=torch.int64, device=st_pay.device)])
                self._count(li, "prefetched_rows", int(have.sum()))
                rows = rows[~have]
            order, bounds = _group_by_owner(np.arange(rows.size), self.primary[rows], n)
            wants.append((rows, order, bounds, pre))
            req_sends.append([self._int_tensor(rows[order[bounds[d]:bounds[d + 1]]]) for d in range(n)])
        rid = self.engine.alltoallv(req_sends, "ids_clocks")
        replies = []
        for li, store in enumerate(self.stores):
            rep = []
            for src in range(n):
                ids = rid[li][src].cpu().numpy()
                slots = store.lookup(ids)
                if np.any((slots < 0) | (slots >= store.num_primary)):
                    raise TrainingError(f"worker {store.worker} was asked for rows it is not primary of.")
                rep.append(store.read_payload(slots) if ids.size else
                           torch.zeros(0, store.payload_dim, dtype=self.dtype, device=store.device))
            replies.append(rep)
        got = self.engine.alltoallv(replies, "embedding_rows",
                                    recv_counts=[[int(w[2][d + 1] - w[2][d]) for d in range(n)] for w in wants])
        for li, (rows, order, bounds, pre) in enumerate(wants):
            store = self.stores[li]
            pay = torch.cat([g.to(store.device, self.dtype) for g in got[li]]) if rows.size else \
                torch.zeros(0, store.payload_dim, dtype=self.dtype, device=store.device)
            inv = np.empty(rows.size, dtype=np.int64)
            inv[order] = np.arange(rows.size)
            pay = pay[torch.as_tensor(inv, dtype=torch.int64, device=pay.device)]  # back to rows order
            if pre is not None:  # one install in id order, early or not: the cache layout is the same
                rows = np.concatenate([rows, pre[0]])
                pay = torch.cat([pay, pre[1].to(pay.device)])
                srt = np.argsort(rows, kind="stable")
                rows, pay = rows[srt], pay[torch.as_tensor(srt, dtype=torch.int64, device=pay.device)]
            self._install(li, rows, pay)
        if self.herald["lookahead"] > 0 and nxt is not None:
            self._issue_early(nxt)

    def _issue_early(self, nxt) -> None:
        """Start sending the next step's pulls whose row is final now (cDLRM prefetch, s = 0 safe).

        A pull of batch t+1 with ``ready < t`` reads a value the primary already
        holds before step t updates anything, and nobody changes it during step
        t. The schedule is global, so each primary knows which of its rows every
        worker will need and sends them unasked (no id exchange): an
        asynchronous all-to-all under torchrun (overlapping step t's compute),
        an in-memory hand-off in the local engine. Taken at step t+1.
        """
        from .scheduler import PULL_KINDS

        n = self.num_workers
        sel = np.isin(nxt.event_kind, PULL_KINDS) & (nxt.event_ready < nxt.iteration - 1)
        ew = nxt.event_worker[sel].astype(np.int64)
        er = nxt.event_row[sel].astype(np.int64)
        prim = self.primary[er].astype(np.int64)
        order = np.lexsort((er, prim, ew))  # by destination, then source (primary), then row
        ew, er, prim = ew[order], er[order], prim[order]
        sends, recv_rows, recv_counts = [], [], []
        for li, me in enumerate(self.engine.local_workers):
            store = self.stores[li]
            mine = prim == me
            parts = []
            for d in range(n):
                r = er[mine & (ew == d)]
                parts.append(store.read_payload(store.lookup(r)) if r.size else
                             torch.zeros(0, store.payload_dim, dtype=self.dtype, device=store.device))
            sends.append(parts)
            to_me = ew == me
            recv_rows.append(er[to_me])  # ordered by (primary, row): the order the parts arrive in
            recv_counts.append([int(np.count_nonzero(to_me & (prim == src))) for src in range(n)])
        self._early = (_start_alltoallv(self.engine, sends, "embedding_rows", recv_counts), recv_rows)

    def _take_early(self) -> list[tuple[np.ndarray, torch.Tensor]] | None:
        """Wait for the early exchange started in the previous step; per local worker (rows sorted, payload)."""
        if self._early is None:
            return None
        handle, recv_rows = self._early
        self._early = None
        t0 = time.perf_counter()
        got = handle.wait()
        self._prefetch_stats["fetch_wait_s"] += time.perf_counter() - t0
        out = []
        for li, store in enumerate(self.stores):
            rows = recv_rows[li]
            pay = torch.cat([g.to(store.device, self.dtype) for g in got[li]]) if rows.size else \
                torch.zeros(0, store.payload_dim, dtype=self.dtype, device=store.device)
            srt = np.argsort(rows, kind="stable")
            out.append((rows[srt], pay[torch.as_tensor(srt, dtype=torch.int64, device=pay.device)]))
        return out

    def _install(self, li: int, rows: np.ndarray, payload: torch.Tensor) -> None:
        store = self.stores[li]
        slots = store.lookup(rows)
        if np.any((slots >= 0) & (slots < store.num_primary)):
            raise TrainingError(f"worker {store.worker}: the runtime scheduler pulls a row it is primary of. "
                                f"This is a bug in gmp.")
        new = slots < 0
        if new.any():
            slots[new] = store.cache_insert(rows[new])
        if np.any(store.dirty[slots]):
            raise TrainingError(f"worker {store.worker}: a pull would overwrite pending updates. This is a bug in gmp.")
        store.install_copies(slots, payload)

    def _herald_step(self, step: Step) -> float:
        """One s = 0 step whose every transfer is the runtime scheduler's (see :meth:`_herald_mode`)."""
        from .scheduler import PUSH_EVICT, PUSH_SYNC

        sched = step.info["herald"]
        total = step.global_batch_size
        n = self.num_workers
        local = self.engine.local_workers
        # end of the previous iteration: the communication plan (Algorithm 1 line 15)
        self._push_pending([sched.plan(w) for w in local], "push_plan")
        self._pull(sched, step.info.get("next"))
        ws = [self._prepare(li, step.samples[w]) for li, w in enumerate(local)]
        for li, s in enumerate(ws):
            if np.any(s.slots < 0):
                raise TrainingError(f"worker {local[li]} lacks rows the runtime scheduler holds valid there. "
                                    f"This is a bug in gmp.")
            s.rows = self.stores[li].read(s.slots)
        loss_sum = self._forward_backward(ws, total) if total else 0.0
        # synchronous pushes (naive sync, or several writers): gradients to the primaries
        id_sends, grad_sends = [], []
        for li, s in enumerate(ws):
            store = self.stores[li]
            sync = np.unique(sched.rows(PUSH_SYNC, local[li]))
            pos = np.searchsorted(s.uniq, sync)
            if sync.size and (np.any(pos >= s.uniq.size) or np.any(s.uniq[np.minimum(pos, s.uniq.size - 1)] != sync)
                              or np.any(s.is_primary[pos])):
                raise TrainingError(f"worker {store.worker}: the runtime scheduler pushes rows it did not use. "
                                    f"This is a bug in gmp.")
            copies = np.flatnonzero(~s.is_primary)
            pending = np.setdiff1d(copies, pos, assume_unique=True)
            if pending.size and not self.herald["on_demand"]:
                raise TrainingError(f"worker {store.worker}: an update left unpushed without on-demand "
                                    f"synchronisation. This is a bug in gmp.")
            order, bounds = _group_by_owner(pos, self.primary[s.uniq], n)
            g = s.grad[torch.as_tensor(order, dtype=torch.int64, device=s.grad.device)]
            id_sends.append([self._int_tensor(s.uniq[order[bounds[d]:bounds[d + 1]]]) for d in range(n)])
            grad_sends.append([g[bounds[d]:bounds[d + 1]] for d in range(n)])
            self._count(li, "push_sync", sync.size)
            self._count(li, "remote_rows_pushed", sync.size)
            if np.any(store.dirty[s.slots[pos]]):
                raise TrainingError(f"worker {store.worker}: a synchronous push of a row with pending updates. "
                                    f"This is a bug in gmp.")
            # the worker's own step on its copies (exactly the primary's formula and state)
            if self.herald["copies_stay_valid"]:
                store.apply_copy(s.slots[copies], s.grad[torch.as_tensor(copies, dtype=torch.int64,
                                                                         device=s.grad.device)])
            store.dirty[s.slots[pending]] = True  # on-demand: kept until a plan/eviction/epoch end
        rid = self.engine.alltoallv(id_sends, "ids_clocks")
        rgrad = self.engine.alltoallv(grad_sends, "gradients",
                                      recv_counts=[[int(t.shape[0]) for t in r] for r in rid])
        self._apply_at_primaries(ws, rid, rgrad)
        # evictions: pending updates of victims go to their primaries, then the cache forgets them
        self._push_pending([sched.rows(PUSH_EVICT, w) for w in local], "push_evict")
        snap = step.info.get("cache_after")
        if snap is not None:
            for li, store in enumerate(self.stores):
                store.cache_drop(np.setdiff1d(store.cached_ids(), snap[li], assume_unique=True))
        self._dense_step()
        return loss_sum

    def flush_pending(self) -> None:
        """Epoch end: every pending update goes to its primary (the scheduler's ``push_flush``)."""
        rows = []
        for store in self.stores:
            sl = np.flatnonzero(store.dirty)
            rows.append(np.where(sl < store.num_rows, store.ids[np.minimum(sl, store.num_rows - 1)],
                                 store.cache_ids[np.maximum(sl - store.num_rows, 0)]))
        self._push_pending(rows, "push_flush")

    def _dense_step(self) -> None:
        params = list(self.model.parameters())
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        # one control element rides along: any worker asking to stop stops all of them at this step
        stop = torch.tensor([1.0 if self._stop_flag else 0.0], dtype=params[0].dtype, device=params[0].device)
        flat = torch.cat([p.grad.reshape(-1) for p in params] + [stop])
        flat = self.engine.all_reduce_dense(flat)
        self._stop_now = bool(flat[-1].item() > 0)
        offset = 0
        for p in params:
            k = p.numel()
            p.grad.copy_(flat[offset:offset + k].view_as(p))
            offset += k
        self.dense_opt.step()

    # ------------------------------------------------------- epoch-end sync
    def sync_secondaries(self) -> None:
        """Bring every secondary up to date with its primary (end of epoch when s > 0)."""
        if not self.has_secondaries:
            return
        ws = []
        for li, store in enumerate(self.stores):
            sec = np.arange(store.num_primary, store.num_rows, dtype=np.int64)
            uniq = store.ids[sec]
            ws.append(_WorkerStep(np.zeros(0, np.int64), np.zeros(1, np.int64), uniq, np.zeros(0, np.int64), sec,
                                  np.zeros(sec.size, bool), np.ones(sec.size, bool)))
        self._read_rows(ws, check_secondaries=True, staleness=0.0)

    # ------------------------------------------------------------ evaluate
    def evaluate(self) -> dict[str, float]:
        """AUC and logloss of the current primaries on the test split."""
        from sklearn.metrics import roc_auc_score

        test = np.arange(self.data.num_train, self.data.num_samples, dtype=np.int64)
        if test.size == 0:
            return {"test_auc": float("nan"), "test_logloss": float("nan")}
        n = self.num_workers
        chunk = max(1, self.config.eval_batch_size) * n
        logits = [[] for _ in self.stores]
        sample_ids = [[] for _ in self.stores]
        self.model.eval()
        with self.engine.not_counted(), torch.no_grad():
            for start in range(0, test.size, chunk):
                parts = np.array_split(test[start:start + chunk], n)
                ws = [self._prepare(li, parts[w]) for li, w in enumerate(self.engine.local_workers)]
                self._read_rows(ws, check_secondaries=True, staleness=-1.0, refresh=False)
                for li, s in enumerate(ws):
                    if s.samples.size:
                        batch = self._batch(s, s.rows.device)
                        logits[li].append(self.model(s.rows, batch).double().cpu().numpy())
                        sample_ids[li].append(s.samples.astype(np.float64))
        self.model.train()
        mine_l = [np.concatenate(x) if x else np.zeros(0) for x in logits]
        mine_s = [np.concatenate(x) if x else np.zeros(0) for x in sample_ids]
        all_l = np.concatenate(self.engine.gather(mine_l))
        all_s = np.concatenate(self.engine.gather(mine_s)).astype(np.int64)
        order = np.argsort(all_s, kind="stable")
        z = all_l[order]
        y = np.asarray(self.data.labels[all_s[order]], dtype=np.float64)
        # logloss from logits: log(1 + e^z) - y z, computed stably
        logloss = float(np.mean(np.logaddexp(0.0, z) - y * z))
        auc = float(roc_auc_score(y, z)) if 0 < y.sum() < y.size else float("nan")
        return {"test_auc": auc, "test_logloss": logloss}

    # ------------------------------------------------------------ the loop
    def _reset_epoch(self) -> None:
        self.counters[:] = 0
        self.engine.bytes[:] = 0
        self.engine.seconds = 0.0
        self.acc = {"loss_sum": 0.0, "samples": 0, "steps": 0, "train_seconds": 0.0}
        self._prefetch_stats = {"produce_s": 0.0, "stall_s": 0.0, "items": 0, "fetch_wait_s": 0.0}

    def _global(self) -> tuple[np.ndarray, dict[str, int], float]:
        counters = self.engine.sum_across(self.counters.sum(axis=0).astype(np.float64))
        loss = float(self.engine.sum_across(np.array([self.acc["loss_sum"]]))[0])
        return counters, self.engine.total_bytes(), loss

    def _record(self, kind: str, extra: dict[str, Any]) -> dict[str, Any]:
        counters, nbytes, loss = self._global()
        samples = self.acc["samples"]
        secs = self.acc["train_seconds"]
        steps = max(1, self.acc["steps"])
        rec = {"epoch": self.epoch + 1, "step": self.step_in_epoch, "kind": kind,
               "train_loss": loss / samples if samples else float("nan"),
               "samples": samples, "steps": self.acc["steps"],
               "samples_per_sec": samples / secs if secs > 0 else float("nan"),
               "train_seconds": secs, "bytes": nbytes,
               # max over processes of the time inside collectives (local engine: in-memory exchange)
               "comm_seconds": self._max_comm_seconds(),
               "embedding_bytes_per_step": (nbytes["embedding_rows"] + nbytes["gradients"]) / steps}
        for name, v in zip(COUNTERS, counters):
            rec[name] = int(round(v))
        if self.herald is not None:
            h = {name: int(round(v)) for name, v in zip(ALL_COUNTERS, counters) if name in HERALD_COUNTERS}
            h["pulls"] = h["pull_miss"] + h["pull_stale"]
            h["pushes"] = sum(h[k] for k in ("push_sync", "push_plan", "push_evict", "push_flush"))
            h.update({k: self.herald[k] for k in ("on_demand", "cache_rows", "cache_policy", "read_only_replicas")})
            rec["herald"] = h
            if self.herald["lookahead"] > 0:
                st = self._prefetch_stats
                late = h["pulls"] - h["prefetched_rows"]
                rec["prefetch"] = {
                    "lookahead": int(self.herald["lookahead"]),
                    "early_rows": h["prefetched_rows"], "late_rows": late,
                    "early_share": h["prefetched_rows"] / h["pulls"] if h["pulls"] else 1.0,
                    "early_fetch_wait_s": self._max_across(st["fetch_wait_s"]),
                    "scheduler_produce_s": st["produce_s"], "scheduler_stall_s": st["stall_s"],
                    "scheduler_overlap": (max(0.0, 1.0 - st["stall_s"] / st["produce_s"])
                                          if st["produce_s"] > 0 else 1.0)}
        rec.update(extra)
        return rec

    def _max_across(self, value: float) -> float:
        per = np.concatenate(self.engine.gather([np.array([value])] * len(self.stores)))
        return float(per.max())

    def _max_comm_seconds(self) -> float:
        per = np.concatenate(self.engine.gather([np.array([self.engine.seconds])] * len(self.stores)))
        return float(per.max())

    def memory(self) -> list[dict[str, int]]:
        return [s.memory_bytes() for s in self.stores]

    def fit(self, *, on_record: Callable[[dict[str, Any]], None] | None = None,
            on_epoch_end: Callable[["Trainer"], None] | None = None,
            stop_after_steps: int | None = None) -> list[dict[str, Any]]:
        """Train from the current position to ``config.epochs``.

        ``on_record`` receives every JSON record (per epoch, and every
        ``log_every`` steps); ``on_epoch_end`` runs after each epoch (checkpoints).
        ``stop_after_steps`` stops after that many steps of this call (tests
        of interrupt/resume); the position is kept so a checkpoint saved then
        resumes exactly there. Returns the epoch records of this call.
        """
        done = 0
        records = []
        show = progress.enabled() and self.engine.is_main
        while self.epoch < self.config.epochs:
            num_steps = self.schedule.num_steps(self.epoch)
            bar = _Bar(show, f"epoch {self.epoch + 1}/{self.config.epochs}", num_steps, self.step_in_epoch)
            with bar:
                for step in self._steps(self.epoch, self.step_in_epoch):
                    if (stop_after_steps is not None and done >= stop_after_steps) or self._stop_now:
                        self.interrupted = True
                        return records
                    t0 = time.perf_counter()
                    loss = self.train_step(step)
                    self.acc["train_seconds"] += time.perf_counter() - t0
                    self.acc["loss_sum"] += loss
                    self.acc["samples"] += step.global_batch_size
                    self.acc["steps"] += 1
                    self.step_in_epoch = step.index + 1
                    done += 1
                    bar.update(self.acc)
                    if self.config.log_every and self.step_in_epoch % self.config.log_every == 0:
                        rec = self._record("step", {})
                        if on_record:
                            on_record(rec)
            if self.staleness > 0:
                with _timed(self.acc):
                    self.sync_secondaries()
            if self.herald is not None:
                with _timed(self.acc):
                    self.flush_pending()
            metrics = self.evaluate()
            rec = self._record("epoch", metrics)
            rec["memory_bytes_per_worker"] = [int(x) for x in np.concatenate(self.engine.gather(
                [np.array([m["total_bytes"]], dtype=np.float64) for m in self.memory()]))]
            records.append(rec)
            self.history.append(rec)
            if on_record:
                on_record(rec)
            self.epoch += 1
            self.step_in_epoch = 0
            self._reset_epoch()
            if on_epoch_end:
                on_epoch_end(self)
        return records

    # ---------------------------------------------------------- state
    def embedding_table(self) -> np.ndarray:
        """The global model's rows (primaries), float64 [num_embeddings, row_dim]; local engine only."""
        if len(self.stores) != self.num_workers:
            raise TrainingError("embedding_table() needs every worker in this process (local engine).")
        out = np.zeros((self.data.num_embeddings, self.row_dim), dtype=np.float64)
        for store in self.stores:
            p = store.num_primary
            out[store.ids[:p]] = store.table[:p].double().cpu().numpy()
        return out


class _Done:
    def __init__(self, value):
        self.value = value

    def wait(self):
        return self.value


class _AsyncAllToAll:
    """An all-to-all started with ``async_op=True``; :meth:`wait` returns ``recv[0][src]``."""

    def __init__(self, work, out, counts, trailing):
        self.work, self.out, self.counts, self.trailing = work, out, counts, trailing

    def wait(self):
        self.work.wait()
        parts = torch.split(self.out, [c * int(np.prod(self.trailing)) for c in self.counts])
        return [[p.view(-1, *self.trailing) for p in parts]]


def _start_alltoallv(engine: CommEngine, sends, category: str, recv_counts):
    """Start a variable-size all-to-all whose receive counts are known; returns a handle with ``wait()``.

    Under torchrun it is issued with ``async_op=True`` (every rank starts it at
    the same point of the step, so collectives stay matched); the local engine
    exchanges in memory at once. Bytes are counted at the start.
    """
    from .engine_dist import DistributedEngine

    if not isinstance(engine, DistributedEngine) or engine.world_size == 1:
        return _Done(engine.alltoallv(sends, category, recv_counts=recv_counts))
    import torch.distributed as dist

    (mine,) = sends
    engine._count_sends(sends, category)
    trailing = tuple(mine[0].shape[1:])
    per_row = int(np.prod(trailing))
    dev = engine.device_for(engine.rank)
    rc = [int(c) for c in recv_counts[0]]
    flat = torch.cat([t.reshape(-1).to(dev) for t in mine])  # a copy: later in-place updates don't leak in
    out = torch.empty(sum(rc) * per_row, dtype=flat.dtype, device=dev)
    work = dist.all_to_all_single(out, flat, [c * per_row for c in rc], [int(t.shape[0]) * per_row for t in mine],
                                  async_op=True)
    return _AsyncAllToAll(work, out, rc, trailing)


class _timed:
    def __init__(self, acc):
        self.acc = acc

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.acc["train_seconds"] += time.perf_counter() - self.t0


class _Bar:
    """A rich progress bar with loss and samples/s (no-op when disabled)."""

    def __init__(self, show: bool, description: str, total: int, completed: int):
        self.show, self.description, self.total, self.completed = show, description, total, completed

    def __enter__(self):
        if self.show:
            import sys

            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                     TextColumn("loss {task.fields[loss]}  {task.fields[rate]} samples/s"),
                                     TimeRemainingColumn(), console=Console(file=sys.stderr), transient=True)
            self.progress.__enter__()
            self.tid = self.progress.add_task(self.description, total=self.total, completed=self.completed,
                                              loss="-", rate="-")
        return self

    def update(self, acc) -> None:
        if self.show:
            loss = acc["loss_sum"] / acc["samples"] if acc["samples"] else float("nan")
            rate = acc["samples"] / acc["train_seconds"] if acc["train_seconds"] else 0.0
            self.progress.update(self.tid, advance=1, loss=f"{loss:.4f}", rate=f"{rate:,.0f}")

    def __exit__(self, *exc):
        if self.show:
            self.progress.__exit__(*exc)


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
