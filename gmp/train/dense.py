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

from typing import Any

import torch

from ..comm.base import CommEngine
from ..errors import TrainingError
from .steps import PhaseClock

#: torch.optim's param_group keys for the two optimizers, in its order (its state_dict, key for key)
_GROUP_DEFAULTS = {
    "sgd": {"momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": False, "maximize": False,
            "foreach": None, "differentiable": False, "fused": None},
    "adagrad": {"lr_decay": 0, "eps": 1e-10, "weight_decay": 0, "initial_accumulator_value": 0, "foreach": None,
                "maximize": False, "differentiable": False, "fused": None},
}


class DenseOptimizer:
    """SGD or Adagrad on the dense model's parameters: torch.optim's update and its state_dict, without
    torch.optim, whose constructor and step import torch._dynamo (2-3 s of CPU at the start of every
    process of ``gmp train``, a third of a small run's).

    The update is torch.optim's single-tensor one, the one it runs on CPU, operation for operation (so a
    run's numbers on CPU are those of torch.optim): SGD ``p.add_(g, alpha=-lr)``; Adagrad ``step += 1;
    h.addcmul_(g, g); p.addcdiv_(g, h.sqrt().add_(eps), value=-lr)`` (no lr decay, no weight decay, no
    momentum). On CUDA torch.optim took its multi-tensor kernels instead (``torch._foreach_*``, the same
    formula rounded differently in the last bit, a few launches for all the parameters); this runs the
    single-tensor step there too (Adagrad: 4 launches a parameter, 28-48 a step for the three models; SGD:
    1), rather than call torch's private ``_foreach`` functions. :meth:`state_dict` and :meth:`load_state_dict` keep
    torch.optim's layout (``state``: per parameter index ``step`` and ``sum`` for Adagrad, nothing for SGD;
    ``param_groups``: its keys), so checkpoints written before read as before and the other way round.
    ``param_groups[0]["lr"]`` is the learning rate a step uses.
    """

    def __init__(self, params: list[torch.nn.Parameter], kind: str, *, lr: float) -> None:
        if kind not in _GROUP_DEFAULTS:
            raise TrainingError(f"optimizer must be one of {sorted(_GROUP_DEFAULTS)}, got {kind!r}.")
        self.kind = kind
        self.params = list(params)
        self.param_groups = [{"lr": lr, **_GROUP_DEFAULTS[kind], "params": self.params}]
        self.state: dict[int, dict[str, torch.Tensor]] = {}
        if kind == "adagrad":  # as torch.optim.Adagrad's constructor: a float32 step on the host, sums of 0
            self.state = {i: {"step": torch.tensor(0.0),
                              "sum": torch.zeros_like(p, memory_format=torch.preserve_format)}
                          for i, p in enumerate(self.params)}

    def zero_grad(self) -> None:
        """The gradients zeroed in place (torch.optim's ``zero_grad(set_to_none=False)``): the dense
        all-reduce copies into them every step."""
        for p in self.params:
            if p.grad is None:
                continue
            if p.grad.grad_fn is not None:
                p.grad.detach_()
            else:
                p.grad.requires_grad_(False)
            p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        lr, eps = float(self.param_groups[0]["lr"]), float(self.param_groups[0].get("eps", 0.0))
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if self.kind == "sgd":
                p.add_(p.grad, alpha=-lr)
                continue
            state = self.state[i]
            state["step"] += 1
            state["sum"].addcmul_(p.grad, p.grad, value=1)
            p.addcdiv_(p.grad, state["sum"].sqrt().add_(eps), value=-lr)

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: the state's tensors themselves (not copies), the group's keys, the
        parameters by index."""
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {"state": {i: dict(s) for i, s in self.state.items()},
                "param_groups": [{**group, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A :meth:`state_dict` (or torch.optim's, of the same optimizer) of the same parameters: the state
        copied onto each parameter's device and dtype (``step`` as saved), the group's values taken."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise TrainingError(f"the dense optimizer's saved state has {sum(len(g['params']) for g in groups)} "
                                f"parameters in {len(groups)} group(s); this model has {len(self.params)} in 1: "
                                "a checkpoint of another model; resume with the flags it was written with.")
        if self.kind == "adagrad":  # copies, as torch.optim's: the loaded dict shares no tensor with the state
            saved = [state_dict["state"][k] for k in groups[0]["params"]]
            self.state = {i: {"step": s["step"].clone(), "sum": s["sum"].to(dtype=p.dtype, device=p.device, copy=True)}
                          for i, (p, s) in enumerate(zip(self.params, saved))}
        self.param_groups[0].update({k: v for k, v in groups[0].items() if k != "params"})


class DenseSync:
    """The dense model, its optimizer and the all-reduce of its gradients (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, optimizer: DenseOptimizer, engine: CommEngine,
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
        self.optimizer.zero_grad()

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
