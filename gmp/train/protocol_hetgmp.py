"""HET-GMP's bounded staleness (section 5.3 of HET-GMP): the step protocol for every schedule at
s >= 0 (and for ``--schedule herald`` at s > 0, where the runtime scheduler only assigns samples).

Per step (HET-GMP section 6, "Decentralized Communication"; module docstring of
:mod:`gmp.train.trainer` for the phases): :func:`~gmp.train.steps.read_rows`
(phases 1-3), :func:`~gmp.train.steps.forward_backward` (4), the gradient push
of non-primary rows (5), :func:`~gmp.train.steps.apply_at_primaries` and the
dense all-reduce (6). With ``s > 0`` a worker applies its own gradients to its
secondaries too, and every secondary is refreshed at the end of each epoch.

The exchange of ids and clocks of phases 1-3 runs before the step, in :meth:`BoundedStaleness.settle`
(after the previous step's update, on the trainer's thread): the step moves rows with every size
and index tensor known, and reads nothing on the host (issue 33).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from .protocol import StepProtocol
from .schedule import Step
from .reads import read_rows, settle_reads
from .steps import (PreparedStep, WorkerStep, apply_at_primaries, forward_backward, prepare_step, push_sends,
                    settle_gradients)


class BoundedStaleness(StepProtocol):
    """HET-GMP's protocol: requests with clocks, refresh of stale secondaries, gradient pushes."""

    #: the preparation is a pure function of the step, the placement and the tier's pinned slots
    #: (this protocol caches no copy of a remote row): it may run while an earlier step computes
    prepares_ahead = True

    def steps(self, epoch: int, start: int) -> Iterator[Step]:
        """The schedule's steps; Herald's runtime scheduler (``--schedule herald`` at s > 0) runs ahead in
        the input pipeline's thread, not in a thread of its own."""
        return self.ctx.schedule.steps(epoch, start, threaded=False)

    def prepare(self, step: Step, *, timed: bool = True, resident: list | None = None) -> PreparedStep:
        """Every local worker's batch, deduplicated, translated and its index tensors made
        (:func:`~gmp.train.steps.prepare_step`), ahead of the step."""
        return prepare_step(self.ctx, step, timed=timed, resident=resident, before_step=True)

    def settle(self, prepared: Step | PreparedStep) -> Step | PreparedStep:
        """Phases 1-3's ids and clocks exchanged (:func:`~gmp.train.steps.settle_reads`), and at s < inf
        the primaries' gradient slots (:func:`~gmp.train.steps.settle_gradients`), after the step
        before has updated the clocks: the step then moves rows with every size and index known."""
        if not isinstance(prepared, PreparedStep) or not prepared.workers:
            return prepared
        ctx = self.ctx
        check = ctx.staleness.checks_clocks
        with ctx.phase("ids"):
            prepared.reads = settle_reads(ctx, prepared.workers, check_secondaries=check,
                                          staleness=ctx.staleness.bound)
            if check:
                settle_gradients(ctx, prepared.workers)
        return prepared

    def train_step(self, step: Step | PreparedStep) -> list[torch.Tensor]:
        """Run one synchronous step of all local workers; return their sample losses (0-d tensors).
        ``step``: prepared by :meth:`prepare` (the trainer does so before the step), or not."""
        ctx = self.ctx
        prepared = step if isinstance(step, PreparedStep) else prepare_step(ctx, step)
        step, ws = prepared.step, prepared.workers
        if step.global_batch_size == 0:
            return []
        check = ctx.staleness.checks_clocks
        read_rows(ctx, ws, check_secondaries=check, staleness=ctx.staleness.bound, plan=prepared.reads)
        with ctx.phase("compute"):
            losses = forward_backward(ctx, ws, step)  # phase 4
        # phase 5: push gradients of non-primary rows to their primaries (at s < inf the
        # primaries know the ids from this step's requests); the dense all-reduce of phase 6 is
        # started first and runs (on the engine's asynchronous group) under the push and the
        # embedding update
        with ctx.phase("pushes"):
            dense = ctx.engine.start_all_reduce_dense(ctx.dense.flat(losses))
            id_sends, grad_sends = push_sends(ctx, ws, with_ids=not check)
            rid = ctx.engine.alltoallv(id_sends, "ids_clocks") if not check else [s.served for s in ws]
            rgrad = ctx.engine.alltoallv(grad_sends, "gradients",
                                        recv_counts=[[int(r.shape[0]) for r in per] for per in rid])
        with ctx.phase("optimizer"):
            if ctx.staleness.local_updates:  # own updates visible locally on secondaries (store docstring)
                for li, s in enumerate(ws):
                    if s.ready.sec_t is not None:  # made by prepare (fixed layout)
                        sec = s.ready.sec_t.to(s.grad.device)
                        ctx.stores[li].apply_local(s.slots[s.is_secondary], s.grad[sec], s.ready.sec_idx)
                    elif s.is_secondary.any():
                        sec = np.flatnonzero(s.is_secondary)
                        ctx.stores[li].apply_local(s.slots[sec], s.grad[torch.as_tensor(sec, dtype=torch.int64,
                                                                                          device=s.grad.device)])
            apply_at_primaries(ctx, ws, rid, rgrad)
        with ctx.phase("allreduce"):
            flat = ctx.dense.finish(dense)
        with ctx.phase("optimizer"):
            ctx.dense.update(flat)
        return losses

    def end_epoch(self) -> None:
        """Bring every secondary up to date with its primary (end of epoch when s > 0)."""
        ctx = self.ctx
        if not ctx.staleness.local_updates or not ctx.has_secondaries:
            return
        ws = []
        for li, store in enumerate(ctx.stores):
            sec = np.arange(store.num_primary, store.num_rows, dtype=np.int64)
            uniq = store.ids[sec]
            ws.append(WorkerStep(np.zeros(0, np.int64), np.zeros(1, np.int64), uniq, np.zeros(0, np.int64), sec,
                                  np.zeros(sec.size, bool), np.ones(sec.size, bool)))
        read_rows(ctx, ws, check_secondaries=True, staleness=0.0)
