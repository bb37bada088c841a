"""The batch preparation stage ahead of the step (issue 33): the trainer's input pipeline.

A step runs only torch operations on tensors it is handed; everything that depends on the
batch and the placement alone is settled before it (:func:`gmp.train.steps.prepare`): the
batch's ids are read, deduplicated (:class:`~gmp.train.unique.UniqueIndex`) and translated to
slots, the owner grouping of the gradient push and the own gradients' slots are settled, and
their index tensors and the model's batch are made on the worker's device. The protocol takes
the result, a :class:`~gmp.train.steps.PreparedStep`, in
:meth:`~gmp.train.protocol.StepProtocol.train_step`.

:func:`prepared_steps` runs that preparation one step ahead, on a side thread, while the
current step computes, when the protocol says it can (:attr:`StepProtocol.prepares_ahead
<gmp.train.protocol.StepProtocol.prepares_ahead>`: its preparation reads nothing a step
changes -- the synchronous protocol over stores whose slots never move, no tier and no cache).
Otherwise the trainer prepares each step right before it on its own thread (the same
preparation, the same tensors). Either way the trajectories are the same bit for bit: the
preparation is a pure function of the step and the placement.

Design, and what is not done yet (issue 33)::

    schedule -> [preparation thread: gather ids, unique, id -> slot, owner groups,
                 index + batch tensors]  --PreparedStep-->  step (torch ops only)
                 -> gradient push -> index_add_ -> sparse SGD / Adagrad update

* on CUDA the preparation should copy from pinned host buffers with ``non_blocking`` copies
  on a side stream, the step waiting on its event; today the thread's copies are plain
  (pageable) ones on the device's default stream: correct, not yet overlapped on a GPU;
* tiered stores and Herald's cache move slots during a step, so their preparation still runs
  inside the step (the tier feeder, :func:`gmp.train.tiers.feed_steps`, and Herald's look-ahead,
  :mod:`gmp.train.herald.prefetch`, stay separate); one pipeline for all of them is issue 33's
  item 2;
* a step of several workers exchanges its ids and clocks in ``StepProtocol.settle`` (right
  before the step, on the trainer's thread: it reads the clocks the step before left), not a
  step ahead; the stale/fresh decision is made there on the host clocks, so that only the rows
  HET-GMP's protocol sends travel (fixed-size device buffers would send every requested row).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator

from .tiers.prefetch import StepFeeder


def prepared_steps(ctx, protocol, steps: Iterable, *, on_wait: Callable[[float], None] | None = None) -> Iterator:
    """``steps`` with each one prepared by ``protocol.prepare``: one step ahead on a side thread when
    ``protocol.prepares_ahead``, else ``steps`` unchanged (the trainer prepares each step before it).

    The wait for a step prepared ahead is timed as the ``gather`` phase (the time the step waits for
    its preparation) and handed to ``on_wait`` (seconds; the trainer counts it as training time, as
    it counted the preparation when it ran inside the step). Close the generator
    (``contextlib.closing``) when leaving the loop early: the thread is stopped and joined there, and
    a step prepared but never run is dropped (preparing has no side effect)."""
    if not protocol.prepares_ahead:
        yield from steps
        return
    pairs = ((step, protocol.prepare(step, timed=False)) for step in steps)
    feeder = StepFeeder([], pairs, lambda _: [], lookahead=1, prefetch_depth=1)
    it = iter(feeder)
    try:
        while True:
            t0 = time.perf_counter()
            with ctx.phase("gather"):
                got = next(it, None)
            if on_wait is not None:
                on_wait(time.perf_counter() - t0)
            if got is None:
                return
            (_, prepared), _ = got
            yield prepared
    finally:
        it.close()
