"""The dense model's optimizer (gmp.train.dense.DenseOptimizer) against torch.optim, its reference: the
same parameters after every step, bit for bit, and the same state_dict, key for key, loadable both ways;
and a process of ``gmp train`` that no longer imports torch._dynamo (what torch.optim's constructor and
step cost: 2-3 s of CPU at every rank's start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gmp.datasets.format import load_dataset
from gmp.errors import TrainingError
from gmp.train.dense import DenseOptimizer
from test_train_cli import manifest_for
from train_data import make_ctr_dataset

ROOT = Path(__file__).resolve().parents[1]


def _params(seed: int, dtype=torch.float32) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g, dtype=dtype)) for shape in ((5, 3), (3,), (1,))]


def _reference(kind: str, params, lr: float):
    return torch.optim.SGD(params, lr=lr) if kind == "sgd" else torch.optim.Adagrad(params, lr=lr, eps=1e-10)


def _grads(step: int, params) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(p.shape, generator=g, dtype=p.dtype) * (0.0 if step == 3 else 1.0) for p in params]


def _run(opt, params, steps: range) -> None:
    for t in steps:
        if isinstance(opt, DenseOptimizer):
            opt.zero_grad()
        else:
            opt.zero_grad(set_to_none=False)
        for p, g in zip(params, _grads(t, params)):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(g)
        opt.step()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["sgd", "adagrad"])
def test_steps_and_state_dict_equal_torch_optim(kind, dtype):
    """Six steps (one with zero gradients): parameters equal to the last bit; state_dict equal in layout and
    values; torch.optim's state_dict loads into ours and ours into torch.optim, and both go on alike."""
    ours_p, ref_p = _params(0, dtype), _params(0, dtype)
    ours, ref = DenseOptimizer(ours_p, kind, lr=0.05), _reference(kind, ref_p, 0.05)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    _run(ours, ours_p, range(6))
    _run(ref, ref_p, range(6))
    for a, b in zip(ours_p, ref_p):
        assert torch.equal(a, b)
    sa, sb = ours.state_dict(), ref.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for i in sb["state"]:
        assert sa["state"][i].keys() == sb["state"][i].keys()
        for key in sb["state"][i]:
            assert sa["state"][i][key].dtype == sb["state"][i][key].dtype
            assert torch.equal(sa["state"][i][key], sb["state"][i][key]), (i, key)
    # each loads the other's, then both take the same three steps
    ours2_p, ref2_p = [torch.nn.Parameter(p.detach().clone()) for p in ref_p], [torch.nn.Parameter(p.detach().clone())
                                                                             for p in ours_p]
    ours2, ref2 = DenseOptimizer(ours2_p, kind, lr=1.0), _reference(kind, ref2_p, 1.0)
    ours2.load_state_dict(ref.state_dict())
    ref2.load_state_dict(ours.state_dict())
    assert ours2.param_groups[0]["lr"] == ref2.param_groups[0]["lr"] == 0.05
    _run(ours2, ours2_p, range(6, 9))
    _run(ref2, ref2_p, range(6, 9))
    for a, b in zip(ours2_p, ref2_p):
        assert torch.equal(a, b)


def test_a_state_dict_of_other_parameters_is_refused():
    opt = DenseOptimizer(_params(0), "adagrad", lr=0.1)
    other = DenseOptimizer(_params(0)[:2], "adagrad", lr=0.1)
    with pytest.raises(TrainingError, match="saved state has 2 parameters in 1 group.* this model has 3 in 1"):
        opt.load_state_dict(other.state_dict())
    with pytest.raises(TrainingError, match="optimizer must be one of"):
        DenseOptimizer(_params(0), "adam", lr=0.1)


def test_gmp_train_does_not_import_dynamo(tmp_path):
    path = make_ctr_dataset(tmp_path / "ds", num_samples=120)
    man, _ = manifest_for(tmp_path, load_dataset(path), 2)
    code = ("import sys; from cli.main import main; sys.argv = ['gmp', 'train', '--dataset', sys.argv[1], "
            "'--manifest', sys.argv[2], '--epochs', '1', '--batch-size', '8', '--embedding-dim', '4']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo imported'")
    res = subprocess.run([sys.executable, "-c", code, str(path), str(man)], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "test AUC" in res.stderr + res.stdout
