"""The dense half of a step: the model's gradients all-reduced over the workers, one optimizer step.

Every protocol ends its step here (:mod:`gmp.train.protocol`). One control element rides along
with the gradients: ``stop + (N + 1) * nonfinite`` summed over the workers, so any worker asking
to stop (:meth:`DenseSync.request_stop`, a signal handler) stops all of them at this step, and a
non-finite loss on any worker is seen by all of them (the optimizer then steps with zero gradients,
which leaves SGD's and Adagrad's parameters as they were; the trainer's loop refuses to go on).

The element is read on the host only after the step (:meth:`DenseSync.settle`, which the trainer
calls once :meth:`~gmp.train.protocol.StepProtocol.train_step` returns), so the step itself never
waits for the device (issue 33).
"""

from __future__ import annotations

import torch

from ..comm.base import CommEngine
from .steps import PhaseClock


class DenseSync:
    """The dense model, its optimizer and the all-reduce of its gradients (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, engine: CommEngine,
                 phase: PhaseClock, *, dtype: torch.dtype, comm_dtype: torch.dtype) -> None:
        self.model = model
        self.optimizer = optimizer
        self.engine = engine
        self.phase = phase
        self.dtype = dtype
        self.comm_dtype = comm_dtype  # the dense all-reduce on the wire
        self.stop_requested = False  # set by request_stop() (a signal handler); agreed on at the next step
        self.stop_now = False  # some worker asked to stop, or some loss was not finite (set by update)
        self.nonfinite_now = False  # some worker's loss was not finite (set by update)
        self._control: torch.Tensor | None = None  # the last step's summed control element (settle)

    def request_stop(self) -> None:
        """Ask every worker to stop after the current step (safe from a signal handler)."""
        self.stop_requested = True

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=False)

    def step(self, losses: list[torch.Tensor]) -> None:
        """All-reduce the dense gradients and step the dense optimizer (see the module docstring)."""
        with self.phase("allreduce"):
            flat = self.finish(self.engine.start_all_reduce_dense(self.flat(losses)))
        with self.phase("optimizer"):
            self.update(flat)

    def flat(self, losses: list[torch.Tensor]) -> torch.Tensor:
        """This process's dense gradients and the control element, flat, at the wire's ``comm_dtype``.
        ``losses``: the step's per-worker losses (:func:`~gmp.train.steps.forward_backward`), checked
        for finiteness on the device."""
        params = list(self.model.parameters())
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        n1 = float(self.engine.world_size + 1)
        stop = 1.0 if self.stop_requested else 0.0
        control = torch.full((1,), stop, dtype=params[0].dtype, device=params[0].device)
        if losses:
            nonfinite = ~torch.isfinite(torch.stack([loss.to(params[0].device) for loss in losses])).all()
            control = torch.where(nonfinite, control + n1, control)
        return torch.cat([p.grad.reshape(-1) for p in params] + [control]).to(self.comm_dtype)

    def finish(self, pending) -> torch.Tensor:
        """Wait for a started dense all-reduce; the sum in the model's dtype."""
        return pending.wait().to(self.dtype)

    def update(self, flat: torch.Tensor) -> None:
        """Copy the summed ``flat`` into the gradients and step the dense optimizer; when some loss
        was not finite (the control element, on the device) the gradients are zero instead, a step
        that changes no parameter. :meth:`settle` reads the control element after the step."""
        params = list(self.model.parameters())
        n1 = float(self.engine.world_size + 1)
        self._control = flat[-1:].clone()
        flat = torch.where(self._control < n1 - 0.5, flat, torch.zeros((), dtype=flat.dtype, device=flat.device))
        offset = 0
        for p in params:
            k = p.numel()
            p.grad.copy_(flat[offset:offset + k].view_as(p))
            offset += k
        self.optimizer.step()

    def settle(self) -> None:
        """After a step, on the host: did some worker ask to stop, was some loss not finite
        (``stop_now``, ``nonfinite_now``)? Reads the control element :meth:`update` kept."""
        if self._control is None:
            return
        total = float(self._control.item())
        self._control = None
        n1 = float(self.engine.world_size + 1)
        self.nonfinite_now = total >= n1 - 0.5
        self.stop_now = self.nonfinite_now or total > 0.5
