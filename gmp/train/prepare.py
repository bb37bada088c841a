"""The trainer's one input pipeline ahead of the step (issue 33, item 2).

A step runs only torch operations on tensors it is handed; everything that depends on the
batch, the placement and the rows' cache slots is settled before it (:func:`gmp.train.steps.prepare`):
the batch's ids are read, deduplicated (:class:`~gmp.train.unique.UniqueIndex`) and translated to
slots, the owner grouping of the gradient push and the own gradients' slots are settled, and
their index tensors and the model's batch are made on the worker's device. The protocol takes
the result, a :class:`~gmp.train.steps.PreparedStep`, in
:meth:`~gmp.train.protocol.StepProtocol.train_step`.

:func:`pipeline_steps` is that pipeline for every schedule and table location, in one thread
(a :class:`~gmp.train.tiers.StepFeeder`: the only thread the trainer starts)::

    protocol.steps (the schedule; Herald's runtime scheduler)      -- advanced in the thread
      -> tiered stores: the step's primaries read into the look-ahead window, then loaded
         into the device cache and pinned (TierFeed.rows_of, RowCache.admit)
      -> protocol.prepare(step, resident=...): ids, unique, id -> slot, cache slots of the
         pinned rows, owner groups, index + batch tensors (CUDA: pinned host buffers,
         non_blocking copies on a side stream, an event)
      --PreparedStep-->  [training thread] tiers.begin (waits for the loads), the step's
         stream waits for the preparation's event -> step (torch ops only) -> tiers.end, done

When it runs ahead: on the side thread while the current step computes when the protocol's
preparation reads nothing a step changes (:attr:`StepProtocol.prepares_ahead
<gmp.train.protocol.StepProtocol.prepares_ahead>`) or a look-ahead is asked for; the window is
the look-ahead (``TierOptions.lookahead`` / ``HeraldOptions.lookahead``, ``--lookahead``: steps
whose ids are read ahead, the scheduler's run-ahead), the admission depth ``prefetch_depth``
(one step without a look-ahead). With a tiered table and ``lookahead = 0`` each step's rows are
loaded inline, as that option promises, and its preparation follows inline, before the step.
Either way the trajectories are the same bit for bit: the preparation is a pure function of the
step, the placement and the pinned slots.

What a preparation can settle ahead, per store: the placement's slots (primaries and secondaries
never move), a tiered store's cache slots of the step's primaries (pinned from admission to the
step's end), and nothing of Herald's copies of remote rows, which the previous step's pulls and
evictions place (their slots are looked up in the step; a step of one worker has none). The wait
for the pipeline is the step's ``gather`` phase, counted as training time.

A step of several workers exchanges its ids and clocks in ``StepProtocol.settle`` (right before
the step, on the trainer's thread: it reads the clocks the step before left), not a step ahead;
the stale/fresh decision is made there on the host clocks, so that only the rows HET-GMP's
protocol sends travel (fixed-size device buffers would send every requested row).
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterable, Iterator

import torch

from .steps import PreparedStep
from .tiers import StepFeeder, TierFeed


def pipeline_steps(ctx, protocol, steps: Iterable, *, epoch_start: bool,
                   on_wait: Callable[[float], None] | None = None) -> Iterator:
    """``steps`` prepared by ``protocol.prepare``, each with its tiered rows resident and pinned while
    it is being trained (module docstring).

    ``ctx``: the trainer's :class:`~gmp.train.context.StepContext`; ``epoch_start``: ``steps`` begin at
    the epoch's first step (the record's tier figures count from there). The wait for each step is
    timed as the ``gather`` phase and handed to ``on_wait`` (seconds; the trainer counts it as training
    time). Close the generator (``contextlib.closing``) when leaving the loop early: the thread is
    stopped and joined there, and a step prepared but never run is dropped (its rows unpinned, its
    load uncounted; preparing has no other side effect)."""
    tiers = TierFeed(ctx, epoch_start=epoch_start)
    inline = bool(tiers.live) and tiers.lookahead == 0  # "each step's rows loaded inline" (TierOptions)
    ahead = not inline and (tiers.lookahead > 0 or protocol.prepares_ahead)
    side = _SideStream(ctx) if ahead else None

    def prepare(step, ready):
        with side.stream() if side is not None else contextlib.nullcontext():
            prepared = protocol.prepare(step, timed=False, resident=tiers.resident(ready))
            if side is not None:
                side.mark(prepared)
        return prepared

    feeder = StepFeeder(tiers.caches, steps, tiers.rows_of, prepare=prepare,
                        lookahead=tiers.lookahead if tiers.lookahead > 0 else int(ahead),
                        prefetch_depth=tiers.prefetch_depth if tiers.lookahead > 0 else 1)
    it = iter(feeder)
    ready = None
    protocol.watch_lookahead(feeder.stats)
    try:
        while True:
            t0 = time.perf_counter()
            with ctx.phase("gather"):
                got = next(it, None)
                if got is not None:
                    prepared, ready = got
                    tiers.begin(ready)  # on CUDA the step's stream waits for the rows' loads
                    if side is not None:
                        side.wait(prepared)
            if on_wait is not None:
                on_wait(time.perf_counter() - t0)
            if got is None:
                return
            yield prepared
            tiers.end()
            feeder.done(ready)
            ready = None
    finally:
        if ready is not None:  # stopped before training the step (interrupt): unpin it, uncount its load
            tiers.end()
            feeder.discard(ready)
        it.close()
        protocol.watch_lookahead(None)
        protocol.add_lookahead_stats(feeder.stats())


class _SideStream:
    """The pipeline's CUDA side stream (none on the CPU): preparations run on it, each ends with an event
    the training stream waits for, and the prepared tensors are recorded as used by that stream (so the
    caching allocator does not hand their memory to the next preparation while the step reads them)."""

    def __init__(self, ctx) -> None:
        cuda = sorted({s.device for s in ctx.stores if s.device.type == "cuda"}, key=str)
        self.device = cuda[0] if cuda else None
        self._stream = torch.cuda.Stream(self.device) if self.device is not None else None

    def stream(self):
        if self._stream is None:
            return contextlib.nullcontext()
        # the preparation reads nothing the training stream writes: no wait on it
        return torch.cuda.stream(self._stream)

    def mark(self, prepared) -> None:
        if self._stream is not None and isinstance(prepared, PreparedStep):
            event = torch.cuda.Event()
            event.record(self._stream)
            prepared.event = event

    def wait(self, prepared) -> None:
        event = prepared.event if isinstance(prepared, PreparedStep) else None
        if event is None:
            return
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(event)
        for t in prepared.tensors():
            if t.device.type == "cuda":
                t.record_stream(compute)


