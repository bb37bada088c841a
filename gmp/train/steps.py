"""Step helpers shared by both consistency protocols and the evaluation.

Each function takes the trainer's :class:`~gmp.train.context.StepContext` (``ctx``), whose
local workers it runs, "vectorised over the workers this process hosts":
one loop over them, then one collective of the engine.

* :func:`prepare` -- a worker's batch: distinct rows, their slots, and the step's index and batch
  tensors (:class:`Prepared`), made ahead of the step (see below);
* HET-GMP phases 1-3 (request, serve, inter-embedding check) are :mod:`gmp.train.reads`'
  (``settle_reads`` right before the step, ``read_rows`` in it; also the evaluation's read of
  the primaries, ``staleness = -1``);
* :func:`forward_backward` -- phase 4;
* :func:`apply_at_primaries` -- phase 6: each primary sums its own and the received gradients.

On the wire ids and clocks travel as int32 when every id fits (:func:`wire_id_dtype`), rows
and gradients in the context's ``comm_dtype`` (cast back to the table's dtype on arrival).
:class:`PhaseClock` times the phases of a step (:data:`PHASES`) for the JSON records.

**Batch preparation ahead of the step (issue 33).** A step should run only torch operations on
tensors it is handed: every tensor made of host data inside a step is, on a GPU, a blocking copy
that waits for the stream. :func:`prepare` is the preparation stage: it reads a worker's ids,
deduplicates them (:class:`~gmp.train.unique.UniqueIndex`), translates ids to slots, and builds
what depends on the batch and the placement alone as tensors on the worker's device
(:class:`Prepared`; the id work by numpy on the host, or as torch operations on the device,
:mod:`gmp.train.device_ids`): the model's :class:`~gmp.train.models.Batch` (inverse, segments, dense
features, labels), the positions and table rows of the rows the worker holds, the owner-grouped
order of its gradient push, and the slots of its own primaries' gradients (index, position,
table rows) for a step in which no gradient is received. The step helpers use them when present
and build the same tensors (same values, same order of operations: bit-for-bit the same step)
when not. Slot-dependent tensors are made for rows whose slots are settled ahead: the placement's,
and a tiered store's primaries in the cache slots the input pipeline pinned (``resident``). Herald's
cached copies of remote rows are placed by earlier steps, so they are left to the step
(:func:`settle_copies`, :func:`read_held`). What depends on the other workers' batches and on the
clocks the step before left (HET-GMP's requests and clock replies, which rows travel, phase 3's ids,
the primaries' gradient slots at s < inf) is settled by :func:`gmp.train.reads.settle_reads` and
:func:`settle_gradients` in the last stage of the preparation (``StepProtocol.settle``, on the
trainer's thread right before the step): the clocks are host arrays, so the step then reads nothing
on the host. What the step still builds on the host: at s = inf the pushed gradients' ids it
receives, and the index of the copies a Herald step reads. ``StepProtocol.prepare`` calls
:func:`prepare` outside the step.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import torch

from ..errors import TrainingError
from .device_ids import HostCopies, host_field, prepare_tensors, takes_torch_path
from .models import Batch, bce_sum

if TYPE_CHECKING:
    from .schedule import Step


#: the phases of a training step, in order (seconds per phase in the records' ``phase_seconds``)
PHASES = ("gather", "ids", "pulls", "compute", "pushes", "allreduce", "optimizer")


class PhaseClock:
    """Wall seconds per phase of the training steps (only while ``engine.counting``, so evaluation
    is left out). In the pipelined step a phase is the time the step *waits* for it. ``clock``: the
    seconds it reads (a benchmark may count CPU seconds, ``time.process_time``)."""

    def __init__(self, engine, clock: Callable[[], float] = time.perf_counter) -> None:
        self.engine = engine
        self.clock = clock
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = self.clock()
        try:
            yield
        finally:
            if self.engine.counting:
                self.seconds[name] += self.clock() - t0

    def reset(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)


def wire_id_dtype(num_embeddings: int) -> np.dtype:
    """int32 when every id (and every clock, which counts steps) fits, else int64."""
    return np.dtype(np.int32) if num_embeddings < 2 ** 31 else np.dtype(np.int64)


def group_by_owner(idx: np.ndarray, owner: np.ndarray, num_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Reorder ``idx`` by ``owner[idx]`` (stable); return (order, bounds[num_workers + 1])."""
    order = idx[np.argsort(owner[idx], kind="stable")]
    bounds = np.searchsorted(owner[order], np.arange(num_workers + 1))
    return order, bounds


@dataclass
class Prepared:
    """Tensors of one worker's step made ahead of it by :func:`prepare` (module docstring); None:
    not prepared (the step makes it)."""

    batch: Batch | None = None  # the model's batch (None without samples)
    held_pos: torch.Tensor | None = None  # positions in uniq of the rows the worker holds in its table
    held_idx: torch.Tensor | None = None  # ... and their rows in the store's table
    cached_pos: torch.Tensor | None = None  # a tiered store: positions in uniq of its primaries ...
    cached_idx: torch.Tensor | None = None  # ... and their (pinned) slots in its tier's cache
    push_order: np.ndarray | None = None  # group_by_owner order of the non-primary rows
    push_bounds: np.ndarray | None = None
    push_order_t: torch.Tensor | None = None  # push_order on the gradients' device
    own_t: torch.Tensor | None = None  # positions in uniq of the worker's own primaries
    grad_slots: np.ndarray | None = None  # their slots ascending (np.unique of the own slots) ...
    grad_where: torch.Tensor | None = None  # ... the position of each own gradient among them ...
    grad_idx: torch.Tensor | None = None  # ... and their rows in the table (own gradients only)
    sec_t: torch.Tensor | None = None  # positions in uniq of the worker's secondaries ...
    sec_idx: tuple | None = None  # ... their (table rows, optimizer state rows): s > 0's local updates
    #: phase 6 with gradients received (settled before the step, :func:`settle_gradients`): the
    #: slots summed (distinct, ascending), each gradient's position among them, and their table rows
    agg: tuple | None = None


@dataclass
class PreparedStep:
    """A step with its local workers' batches prepared (:func:`prepare`), ready for the protocol's
    ``train_step``: ``workers[li]`` is local worker ``li``'s (empty for a step without samples)."""

    step: Step
    workers: list[WorkerStep]
    #: phases 1-3's ids and clocks settled right before the step (a :class:`gmp.train.reads.ReadPlan`;
    #: reads.py imports this module, not the other way round)
    reads: object | None = None
    event: object = None  # CUDA: the event of the side stream that made its tensors (gmp.train.prepare)

    def tensors(self) -> Iterator[torch.Tensor]:
        """Every tensor the preparation made (the pipeline marks them as used by the step's stream)."""
        for s in self.workers:
            for value in vars(s.ready).values():
                if isinstance(value, torch.Tensor):
                    yield value
                elif isinstance(value, (Batch, tuple)):  # a batch's parts; (table rows, state rows) and the like
                    yield from (t for t in (vars(value).values() if isinstance(value, Batch) else value)
                                if isinstance(t, torch.Tensor))

    # the step's own fields, so a hook reading ``step.index`` of what ``Trainer.train_step`` receives works
    index = property(lambda self: self.step.index)
    samples = property(lambda self: self.step.samples)
    global_batch_size = property(lambda self: self.step.global_batch_size)


def prepare_step(ctx, step, *, timed: bool = True, resident=None, ahead: bool = False,
                 before_step: bool = False) -> PreparedStep:
    """Every local worker's :func:`prepare` of ``step``; ``timed``: as the ``gather`` phase (not in the
    input pipeline, :func:`gmp.train.prepare.pipeline_steps`, which times the wait for it instead);
    ``resident``: per local worker, its tier's pinned rows of the step (None: no tier, or not pinned);
    ``before_step``: see :func:`prepare`."""
    if step.global_batch_size == 0:
        return PreparedStep(step, [])
    if len(step.samples) != ctx.num_workers:
        raise TrainingError(f"schedule gave {len(step.samples)} batches for {ctx.num_workers} workers.")
    resident = resident if resident is not None else [None] * len(ctx.stores)
    with ctx.phase("gather") if timed else contextlib.nullcontext():
        return PreparedStep(step, [prepare(ctx, li, step.samples[w], resident=resident[li], ahead=ahead,
                                           before_step=before_step)
                                   for li, w in enumerate(ctx.engine.local_workers)])


@dataclass
class WorkerStep:
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
    true_clock: np.ndarray | None = None  # primary clock of the rows of uniq it reads (reads.plan_install)
    rows: torch.Tensor | None = None  # [len(uniq), row_dim] values read
    grad: torch.Tensor | None = None  # their gradients
    #: as a primary: the ids each worker requested of this one this step (its pushes follow them, s < inf)
    served: list[np.ndarray] = field(default_factory=list)
    ready: Prepared = field(default_factory=Prepared)  # tensors made ahead of the step (prepare)


#: the numpy fields the settle stage and the step read on the host (gmp.train.device_ids, "The host arrays"):
#: of WorkerStep (in its field order) and of Prepared
STEP_HOST_FIELDS = ("uniq", "inv", "slots", "is_primary", "is_secondary")
READY_HOST_FIELDS = ("push_order", "push_bounds", "grad_slots")
for _cls, _names in ((WorkerStep, STEP_HOST_FIELDS), (Prepared, READY_HOST_FIELDS)):
    for _name in _names:
        setattr(_cls, _name, host_field(_name))
del _cls, _names, _name


def int_tensor(a: np.ndarray, device: torch.device | None = None) -> torch.Tensor:
    """``a`` as int64 (on ``device``); an empty one is made without host data (nothing to copy)."""
    if a.size == 0:
        return torch.empty(a.shape, dtype=torch.int64, device=device)
    return torch.as_tensor(np.ascontiguousarray(a, dtype=np.int64), device=device)


def id_tensor(ctx, a: np.ndarray) -> torch.Tensor:
    """Ids or clocks as the wire carries them (``ctx.id_dtype``: int32 when they fit); an empty
    message is made without host data (nothing to copy)."""
    if a.size == 0:
        return torch.empty(a.shape, dtype=torch.int32 if ctx.id_dtype == np.int32 else torch.int64)
    return torch.as_tensor(np.ascontiguousarray(a, dtype=ctx.id_dtype))


def received_ids(t: torch.Tensor) -> np.ndarray:
    """Ids or clocks received from the wire, as int64 (an empty message is read without a copy to
    the host: its size is known without waiting for the device)."""
    if t.numel() == 0:
        return np.zeros(t.shape, dtype=np.int64)
    return t.cpu().numpy().astype(np.int64, copy=False)


def prepare(ctx, li: int, samples: np.ndarray, *, training: bool = True, resident=None,
            ahead: bool = False, before_step: bool = False) -> WorkerStep:
    """Worker ``li``'s batch of ``samples`` (module docstring); ``training=False`` (the evaluation's
    read) leaves out what only the gradient push and update use. ``resident``: the tiered store's
    :class:`~gmp.train.tiers.ReadyStep` (its rows pinned for this step: their cache slots are
    settled); ``ahead``: prepared while an earlier step may still run (gmp.train.prepare), so a
    store's cached copies of remote rows, which steps place, are left to the step (:func:`settle_copies`);
    ``before_step``: prepared outside any step (the input pipeline, or the trainer before the step), where
    the torch id path may wait for its sizes (:func:`~gmp.train.device_ids.takes_torch_path`)."""
    store = ctx.stores[li]
    if takes_torch_path(store, ctx.num_workers, resident=resident, before_step=before_step):
        return prepare_on_device(ctx, li, samples, training=training)
    ptr, ids = ctx.data.gather(samples)
    uniq, inv = ctx.unique_ids(ids)  # np.unique(ids, return_inverse=True), without sorting every id
    slots = store.slots.lookup(uniq) if ahead and store.copies is not None else store.lookup(uniq)
    ws = WorkerStep(samples, ptr, uniq, inv, slots, store.is_primary_slot(slots), store.is_secondary_slot(slots))
    ready = ws.ready
    dev = store.device
    if samples.size:
        ready.batch = make_batch(ctx, ws, dev)
    # the slot-dependent tensors: the placement's slots never move, a tiered store's primaries sit in
    # the cache slots they were pinned in (resident) until the step ends, copies of remote rows move
    settled = store.tier is None or resident is not None
    if not settled or not (store.fixed_layout or ahead or resident is not None):
        return ws
    held = np.flatnonzero((ws.slots >= 0) & (ws.slots < store.num_rows))
    in_table = held if store.tier is None else held[~ws.is_primary[held]]
    ready.held_pos = to_device(in_table, dev)
    ready.held_idx = to_device(ws.slots[in_table] - store.table_base, dev)  # row s - table_base of table
    if store.tier is not None:
        mine = held[ws.is_primary[held]]
        ready.cached_pos = to_device(mine, dev)
        ready.cached_idx = to_device(cache_slots(resident, ws.slots[mine]), dev)
    if training:  # the push's owner groups and the own gradients' slots
        order, bounds = group_by_owner(np.flatnonzero(~ws.is_primary), ctx.primary[uniq], ctx.num_workers)
        ready.push_order, ready.push_bounds = order, bounds
        ready.push_order_t = to_device(order, dev, torch.int64)
        own = np.flatnonzero(ws.is_primary)
        ready.own_t = to_device(own, dev, torch.int64)
        own_slots = ws.slots[own]  # distinct (distinct ids): np.unique is a sort, the inverse its rank
        rank = np.argsort(own_slots, kind="stable")
        where = np.empty(own.size, dtype=np.int64)
        where[rank] = np.arange(own.size, dtype=np.int64)
        ready.grad_slots = own_slots[rank]
        ready.grad_where = to_device(where, dev)
        ready.grad_idx = to_device(ready.grad_slots if store.tier is None else
                                   cache_slots(resident, ready.grad_slots), dev)
        sec = np.flatnonzero(ws.is_secondary)
        if sec.size:  # s > 0's local updates of the secondaries: (table rows, state rows)
            ready.sec_t = to_device(sec, dev, torch.int64)
            ready.sec_idx = (to_device(ws.slots[sec] - store.table_base, dev),
                             to_device(ws.slots[sec] - store.num_primary, dev))
    return ws


def prepare_on_device(ctx, li: int, samples: np.ndarray, *, training: bool = True) -> WorkerStep:
    """:func:`prepare` by the torch id path (:mod:`gmp.train.device_ids`, a fixed-layout store): the same
    fields, its tensors made by torch operations on the store's device, its numpy fields host views or
    copies of them."""
    copies = HostCopies(ctx.stores[li].device)
    ptr, ids, ready = prepare_tensors(ctx, li, samples, training=training)
    ws = WorkerStep(samples, ptr, *(copies.add(ids[k]) for k in STEP_HOST_FIELDS))
    for name, value in ready.items():
        setattr(ws.ready, name, copies.add(value) if name in READY_HOST_FIELDS else value)
    copies.close()
    return ws


def cache_slots(resident, rows: np.ndarray) -> np.ndarray:
    """Cache slots of a tiered store's master ``rows`` (primary slots), all pinned in ``resident``."""
    return resident.slots[np.searchsorted(resident.rows, rows)]


def to_device(a: np.ndarray, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a`` on ``device`` for a step prepared ahead: on CUDA through a pinned host buffer with a
    ``non_blocking`` copy (on the pipeline's side stream, gmp.train.prepare); on the CPU
    ``torch.as_tensor`` (no copy)."""
    if device.type != "cuda":
        return torch.as_tensor(a, dtype=dtype, device=device)
    return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype).pin_memory().to(device, non_blocking=True)


def settle_copies(ctx, li: int, s: WorkerStep) -> bool:
    """In the step, after its pulls: the slots of the cached copies of remote rows that worker ``li``'s
    batch (prepared ahead) reads, which the earlier steps placed. True when the batch reads no copy
    (its prepared tensors cover every row it holds)."""
    store = ctx.stores[li]
    if store.copies is None:
        return True
    s.slots = store.lookup(s.uniq)
    s.is_primary, s.is_secondary = store.is_primary_slot(s.slots), store.is_secondary_slot(s.slots)
    return bool(np.all((s.slots >= 0) & (s.slots < store.num_rows)))


def read_held(ctx, li: int, s: WorkerStep, out: torch.Tensor | None = None) -> torch.Tensor:
    """``out[i]`` = the values of the rows worker ``li`` holds of ``s.uniq``, by the prepared indices when
    there are (``out``: made here when None, every row then held)."""
    store = ctx.stores[li]
    ready = s.ready
    if out is None:
        out = torch.empty(s.uniq.size, ctx.row_dim, dtype=ctx.dtype, device=store.device)
    if ready.held_pos is None:
        held = s.slots >= 0
        out[torch.as_tensor(np.flatnonzero(held), device=store.device)] = store.read(s.slots[held])
        return out
    out[ready.held_pos] = store.table.index_select(0, ready.held_idx)
    if ready.cached_pos is not None:
        out[ready.cached_pos] = store.tier.cache.tensor.index_select(0, ready.cached_idx)[:, :ctx.row_dim]
    return out


def make_batch(ctx, s: WorkerStep, device) -> Batch:
    seg = None
    if not ctx.data.one_hot(s.samples):  # (one id per field in field order: entry e is segment e, no pooling)
        entry_sample = np.repeat(np.arange(s.samples.size, dtype=np.int64), np.diff(s.ptr))
        seg = to_device(entry_sample * ctx.data.num_fields + ctx.data.field_of[s.uniq[s.inv]], device)
    dense = None
    if ctx.data.num_dense:
        dense = to_device(np.asarray(ctx.data.dense[s.samples]), device)
    return Batch(int(s.samples.size), to_device(s.inv, device, torch.int64), seg, dense,
                 to_device(np.asarray(ctx.data.labels[s.samples]), device))


def loss_value(losses: list[torch.Tensor]) -> float:
    """The sum of a step's per-worker sample losses (:func:`forward_backward`) as a Python float,
    added in the workers' order: read on the host after the step, not inside it."""
    total = 0.0
    for loss in losses:
        total += float(loss)
    return total


def forward_backward(ctx, ws: list[WorkerStep], step) -> list[torch.Tensor]:
    """Phase 4: forward/backward of every local worker of ``step``; dense grads accumulate over them.

    The summed loss is divided by the step's samples, but at least by a full step's ``N x B``: a partial
    step (the end of an epoch, or of a shard in the static schedule) weighs each sample as a full one
    does. As a mean over its own samples, a last static step of 2 samples moved the model like a full
    step (1-epoch test log loss 0.498 against 0.425, docs/train.md, "The last step of an epoch"). A step
    larger than ``N x B`` (a replayed global batch) keeps its mean.

    Returns the summed sample loss of each local worker with samples, a 0-d tensor on its device
    (no wait for the device here: :func:`loss_value` reads them after the step)."""
    total = max(step.global_batch_size, ctx.num_workers * ctx.batch_size)
    ctx.dense.zero_grad()
    losses = []
    for li, s in enumerate(ws):
        leaf = s.rows.detach().requires_grad_(True)
        if s.samples.size:
            batch = s.ready.batch  # made by prepare for every worker with samples
            loss = bce_sum(ctx.model(leaf, batch), batch.labels)
            (loss / total).backward()
            losses.append(loss.detach())
        s.grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
    return losses

# ------------------------------------------------- herald (runtime-driven)


def push_sends(ctx, ws: list[WorkerStep], *, with_ids: bool):
    """Phase 5 messages: the gradients of each worker's non-primary rows to their primaries, in
    :func:`group_by_owner` order, at ``ctx.comm_dtype`` (and their ids, unless ``with_ids`` is
    false: at s < inf the pushed rows are the requested rows in the same order, so the primaries
    know them from the requests, ``WorkerStep.served``). Returns (id sends or None, grad sends)."""
    n = ctx.num_workers
    id_sends, grad_sends = [], []
    for li, s in enumerate(ws):
        if s.ready.push_order is not None:
            order, bounds = s.ready.push_order, s.ready.push_bounds
            g = s.grad[s.ready.push_order_t.to(s.grad.device)].to(ctx.comm_dtype)
        else:
            order, bounds = group_by_owner(np.flatnonzero(~s.is_primary), ctx.primary[s.uniq], n)
            g = s.grad[torch.as_tensor(order, dtype=torch.int64, device=s.grad.device)].to(ctx.comm_dtype)
        if with_ids:
            ids = s.uniq[order]
            id_sends.append([id_tensor(ctx, ids[bounds[d]:bounds[d + 1]]) for d in range(n)])
        grad_sends.append([g[bounds[d]:bounds[d + 1]] for d in range(n)])
        ctx.count(li, "remote_rows_pushed", order.size)
    return (id_sends if with_ids else None), grad_sends


def apply_at_primaries(ctx, ws: list[WorkerStep], rid, rgrad) -> None:
    """Phase 6: each primary sums its own and the received gradients per row and steps once.

    ``rid[i][src]``: the ids of the gradients ``rgrad[i][src]`` (tensors from the wire or int64 arrays)."""
    n = ctx.num_workers
    for li, s in enumerate(ws):
        store = ctx.stores[li]
        ready = s.ready
        received = sum(int(r.shape[0]) for r in rid[li])  # sizes known on the host: no wait
        if ready.grad_where is not None and received == 0:  # own gradients only: prepared
            if ready.grad_slots.size:
                summed = torch.zeros(ready.grad_slots.size, ctx.row_dim, dtype=ctx.dtype, device=store.device)
                summed.index_add_(0, ready.grad_where, s.grad[ready.own_t.to(s.grad.device)].to(store.device))
                store.apply_gradients(ready.grad_slots, summed, idx=ready.grad_idx)
            continue
        if ready.agg is not None:  # the pushed rows were known before the step (settle_gradients)
            uslots, where_t, own_t, idx = ready.agg
            grad_parts = [s.grad[own_t.to(s.grad.device)]]
            grad_parts += [rgrad[li][src].to(store.device, ctx.dtype) for src in range(n)]
            summed = torch.zeros(uslots.size, ctx.row_dim, dtype=ctx.dtype, device=store.device)
            summed.index_add_(0, where_t, torch.cat([g.to(store.device) for g in grad_parts]))
            store.apply_gradients(uslots, summed, idx=idx)
            continue
        own = np.flatnonzero(s.is_primary)
        slot_parts = [s.slots[own]] + [store.lookup(r if isinstance(r, np.ndarray) else received_ids(r))
                                       for r in rid[li]]
        grad_parts = [s.grad[torch.as_tensor(own, dtype=torch.int64, device=s.grad.device)]]
        grad_parts += [rgrad[li][src].to(store.device, ctx.dtype) for src in range(n)]
        all_slots = np.concatenate(slot_parts)
        if all_slots.size == 0:
            continue
        uslots, where = ctx.unique_slots[li](all_slots)  # np.unique(all_slots, return_inverse=True)
        summed = torch.zeros(uslots.size, ctx.row_dim, dtype=ctx.dtype, device=store.device)
        summed.index_add_(0, torch.as_tensor(where, device=store.device),
                          torch.cat([g.to(store.device) for g in grad_parts]))
        store.apply_gradients(uslots, summed)


def settle_gradients(ctx, ws: list[WorkerStep]) -> None:
    """Phase 6's slots settled before the step (``ready.agg``) where the pushed rows are known then:
    at s < inf a worker pushes the gradients of the rows it requested (``served``, set by
    :func:`gmp.train.reads.settle_reads`), so each primary's sum of its own and the received gradients needs no
    id from the step (fixed-layout stores; :func:`apply_at_primaries` uses it)."""
    for li, s in enumerate(ws):
        store = ctx.stores[li]
        if not store.fixed_layout or not sum(r.size for r in s.served):  # own gradients only: prepared
            continue
        own = np.flatnonzero(s.is_primary)
        uslots, where = ctx.unique_slots[li](np.concatenate([s.slots[own]] + [store.lookup(r) for r in s.served]))
        dev = store.device
        own_t = s.ready.own_t if s.ready.own_t is not None else int_tensor(own, dev)  # made by prepare
        s.ready.agg = (uslots, int_tensor(where, dev), own_t, torch.as_tensor(uslots, device=dev))
