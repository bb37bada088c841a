"""The pipelined step of bounded staleness at s = 0 (``pipeline=True``): the same model, bit for
bit, with the next step's reads overlapped with this step's compute.

TorchRec's ``TrainPipelineSparseDist`` is the idea: while batch t computes, batch t + 1's
input distribution is already under way. Here, at s = 0 (HET-GMP section 5.3 with s = 0: every
read sees the primary after all earlier steps' updates), the rows step t + 1 reads split in two:

* rows **no worker uses in step t** are not updated by step t, so their values are final
  before step t computes: they are sent right after step t + 1's id exchange, and the
  transfer runs while step t computes (``early``);
* rows **some worker uses in step t** get step t's update: they are sent once step t's
  gradients have been applied (``late``), and the transfer runs while step t + 2's batch is
  gathered and its ids exchanged (at the start of step t + 1, before its rows are installed).
  A reader then asks with the clocks of replicas not yet refreshed by step t + 1's install;
  that changes nothing: a replica that install refreshes is used in step t + 1, so in step
  t + 2 it is a late row and is sent whatever clock was asked with.

A primary knows which of its rows step t updates without asking: its own batch's primaries
and the rows requested of it in step t (at s = 0 every non-primary row a worker uses is
requested, with its clock). Its answer to a request of step t + 1 carries the row's clock
after step t (the clock it has now, plus one for a late row), and a late row's clock is sent
negative (``-(clock + 2)``), so the reader knows which rows come in which transfer with no
extra message. The gradient push then needs no ids (the primaries know them from the
requests, :func:`~gmp.train.steps.push_sends`), and it overlaps the dense all-reduce, which is
started asynchronously first.

Per step t of an epoch::

    prepare batch t+1                                  -> gather    (late rows(t) in flight)
    exchange ids(t+1) and clocks, start early rows    -> ids
    wait rows(t) (early + late), install them        -> pulls
    forward/backward(t)                                -> compute   (early rows(t+1) in flight)
    start dense all-reduce(t); push gradients(t)      -> pushes
    wait dense all-reduce(t)                           -> allreduce
    apply gradients at primaries, dense optimizer step -> optimizer
    start late rows(t+1)

Every value read, every clock, every gradient sum and every optimizer step is the one the
synchronous step (:class:`~gmp.train.protocol_hetgmp.BoundedStaleness`) computes, in the same
order, so the models are identical (the tests check bit equality on both engines), and the
byte counts and counters are the same. Only the order of the collectives differs: on the
local engine the "asynchronous" collectives happen at once; under torchrun they run in
gloo's (or NCCL's) background while the process computes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import TrainingError
from .consistency import intra_stale
from .protocol_hetgmp import BoundedStaleness
from .schedule import Step
from .reads import install_rows, plan_install, primary_slots, request_sends
from .steps import WorkerStep, apply_at_primaries, forward_backward, id_tensor, prepare, push_sends, received_ids


@dataclass
class _Reads:
    """The reads of one step, started during the step before (or at once for an epoch's first step)."""

    key: tuple[int, int]  # (epoch, step index)
    ws: list[WorkerStep]
    clocks: list[list[np.ndarray]]  # [reader][owner]: the rows' clocks after the previous step
    need: list[list[np.ndarray]]  # [reader][owner]: which requests get a row
    late: list[list[np.ndarray]]  # [reader][owner]: which requests get their row late
    early: object  # the started all-to-all of the early rows
    late_slots: list[list[np.ndarray]]  # [owner][reader]: slots to send late
    touched: list[np.ndarray]  # [owner]: bool over its primaries' slots, True for those this step updates
    late_pending: object = None  # the started all-to-all of the late rows


def _start_reads(ctx, key: tuple[int, int], ws: list[WorkerStep], running: _Reads | None) -> _Reads:
    """Exchange ``ws``'s requests and clocks and start the early rows. ``running``: the reads of
    the step running now, not yet installed (None: no step runs, every row is early)."""
    n = ctx.num_workers
    recv = ctx.engine.alltoallv(request_sends(ctx, ws, True), "ids_clocks")
    replies, early_rows, late_slots, touched = [], [], [], []
    for li, s in enumerate(ws):
        store = ctx.stores[li]
        s.served = []
        rc, er, ls = [], [], []
        # the rows of this worker that the step updates: its batch's primaries and those requested
        # of it (a mask, not np.isin of sorted slots: that sort was most of this phase's CPU)
        mask = np.zeros(store.num_primary, dtype=bool)
        mask[s.slots[s.is_primary]] = True
        for src in range(n):
            msg = received_ids(recv[li][src]).reshape(-1, 2)
            oslots = primary_slots(store, msg[:, 0])
            s.served.append(msg[:, 0])
            mask[oslots] = True
            late = running.touched[li][oslots] if running is not None else np.zeros(oslots.size, bool)
            clock = store.clock[oslots]
            need = intra_stale(clock + late, msg[:, 1], 0.0)
            rc.append(id_tensor(ctx, np.where(late, -(clock + 1) - 2, clock)))
            er.append(store.read(oslots[need & ~late]).to(ctx.comm_dtype))
            ls.append(oslots[late])
        replies.append(rc)
        early_rows.append(er)
        late_slots.append(ls)
        touched.append(mask)
    got = ctx.engine.alltoallv(replies, "ids_clocks", recv_counts=[
        [int(s.req_bounds[src + 1] - s.req_bounds[src]) for src in range(n)] for s in ws])
    clocks, need, late = [], [], []
    for li, s in enumerate(ws):
        wire = [received_ids(g) for g in got[li]]
        late.append([w < 0 for w in wire])
        clocks.append([np.where(w < 0, -w - 2, w) for w in wire])
        need.append([intra_stale(clocks[li][src], s.req_clock[s.req_bounds[src]:s.req_bounds[src + 1]], 0.0)
                     for src in range(n)])
    early = ctx.engine.start_alltoallv(early_rows, "embedding_rows", recv_counts=[
        [int((need[li][src] & ~late[li][src]).sum()) for src in range(n)] for li in range(len(ws))])
    return _Reads(key, ws, clocks, need, late, early, late_slots, touched)


def _start_late(ctx, reads: _Reads) -> None:
    """Send the late rows (after the gradients of the step running now were applied)."""
    n = ctx.num_workers
    sends = [[ctx.stores[li].read(reads.late_slots[li][dst]).to(ctx.comm_dtype) for dst in range(n)]
             for li in range(len(reads.ws))]
    reads.late_pending = ctx.engine.start_alltoallv(sends, "embedding_rows", recv_counts=[
        [int(m.sum()) for m in per] for per in reads.late])


def _finish_reads(ctx, reads: _Reads) -> list[WorkerStep]:
    """Wait for the early and late rows and install them (HET-GMP phase 2 on the reader)."""
    n = ctx.num_workers
    early = reads.early.wait()
    late = reads.late_pending.wait() if reads.late_pending is not None else None
    rows = []
    for li in range(len(reads.ws)):
        per = []
        for src in range(n):
            need, is_late = reads.need[li][src], reads.late[li][src]
            r = early[li][src]
            if late is not None and is_late.any():
                r = torch.empty(int(need.sum()), *r.shape[1:], dtype=r.dtype, device=r.device)
                pos_late = is_late[need]  # late rows are always needed
                r[torch.as_tensor(np.flatnonzero(~pos_late), device=r.device)] = early[li][src]
                r[torch.as_tensor(np.flatnonzero(pos_late), device=r.device)] = late[li][src].to(r.device)
            per.append(r)
        rows.append(per)
    plan = plan_install(ctx, reads.ws, reads.clocks, reads.need, check_secondaries=True, staleness=0.0,
                        refresh=True)  # at install: the primaries' clocks after the step before
    install_rows(ctx, reads.ws, rows, plan)
    return reads.ws


class PipelinedStaleness(BoundedStaleness):
    """Bounded staleness at s = 0 with the next step's reads overlapped (see the module docstring)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._epoch = 0  # the epoch whose steps run (steps() sets it)
        self._next: Step | None = None
        self._reads: _Reads | None = None
        # the step (of an epoch resumed or restarted mid-way) whose reads step start - 1 already began and
        # counted (in the checkpoint's bytes, or before a stop): they are done again, uncounted
        self._replay: tuple[int, int] | None = None

    def steps(self, epoch: int, start: int):
        """The schedule's steps, each yielded once the step after it is known (its reads start early)."""
        self._epoch = epoch
        ahead = self._reads is not None and self._reads.key == (epoch, start)
        self._replay = (epoch, start) if start > 0 and not ahead else None
        it = iter(super().steps(epoch, start))
        cur = next(it, None)
        while cur is not None:
            nxt = next(it, None)
            self._next = nxt
            yield cur
            cur = nxt
        self._next = None

    prepares_ahead = False

    def prepare(self, step: Step, *, timed: bool = True, resident: list | None = None) -> Step:
        """No preparation by the trainer: this protocol prepares step t + 1 inside step t, where its
        exchange starts (:meth:`train_step`)."""
        return step

    def _reads_of(self, step: Step) -> _Reads:
        ctx = self.ctx
        key = (self._epoch, step.index)
        reads, self._reads = self._reads, None
        if reads is not None and reads.key != key:  # a stop between steps: drop what was read ahead
            reads.early.wait()
            if reads.late_pending is not None:
                reads.late_pending.wait()
            reads = None
        if reads is None:
            replay, self._replay = self._replay == key, None
            with ctx.phase("gather"):
                ws = [prepare(ctx, li, step.samples[w]) for li, w in enumerate(ctx.engine.local_workers)]
            with ctx.phase("ids"), (ctx.engine.not_counted() if replay else contextlib.nullcontext()):
                # replayed: the same requests and rows, late ones now early (step start - 1 was applied)
                reads = _start_reads(ctx, key, ws, None)
        return reads

    def train_step(self, step: Step) -> list[torch.Tensor]:
        """Run step t and start the reads of step t + 1; return the local workers' sample losses."""
        ctx = self.ctx
        if len(step.samples) != ctx.num_workers:
            raise TrainingError(f"schedule gave {len(step.samples)} batches for {ctx.num_workers} workers.")
        if step.global_batch_size == 0:
            return []
        current = self._reads_of(step)
        nxt = self._next if self._next is not None and self._next.global_batch_size > 0 else None
        reads = None
        if nxt is not None:  # while this step's late rows travel
            with ctx.phase("gather"):
                ws_next = [prepare(ctx, li, nxt.samples[w]) for li, w in enumerate(ctx.engine.local_workers)]
            with ctx.phase("ids"):
                reads = _start_reads(ctx, (self._epoch, nxt.index), ws_next, current)
        with ctx.phase("pulls"):
            ws = _finish_reads(ctx, current)
        with ctx.phase("compute"):
            losses = forward_backward(ctx, ws, step)
        with ctx.phase("pushes"):
            dense = ctx.engine.start_all_reduce_dense(ctx.dense.flat(losses))
            _, grad_sends = push_sends(ctx, ws, with_ids=False)
            rid = [s.served for s in ws]
            rgrad = ctx.engine.alltoallv(grad_sends, "gradients",
                                        recv_counts=[[int(r.shape[0]) for r in per] for per in rid])
        with ctx.phase("allreduce"):
            flat = ctx.dense.finish(dense)
        with ctx.phase("optimizer"):
            apply_at_primaries(ctx, ws, rid, rgrad)
            ctx.dense.update(flat)
        if reads is not None:
            _start_late(ctx, reads)
            self._reads = reads
        return losses
