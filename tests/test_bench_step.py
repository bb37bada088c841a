"""The step bench's checks (bench/step_cpu_bench.py, bench/perf_split.py): its torch-only step is gmp's
step's operations without gmp's code (the same model after a step, bit for bit), and perf samples are
classified by their frames."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch

from gmp.comm.local import LocalEngine
from gmp.datasets.format import load_dataset
from gmp.train import TrainData, Trainer
from tests.train_data import make_config, make_ctr_dataset, random_placement

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import perf_split  # noqa: E402
import step_cpu_bench  # noqa: E402

BATCH = 32


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_the_torch_only_step_is_the_same_step_as_gmps(tmp_path, optimizer):
    ds = load_dataset(make_ctr_dataset(tmp_path / "d", num_samples=120, multi=True))

    def trainer():
        config = make_config(model="dcn", optimizer=optimizer, lr=0.3, batch_size=BATCH, embedding_dim=4,
                             hidden=(8, 4))
        return Trainer(TrainData(ds), random_placement(ds, 1), config, LocalEngine(1, device="cpu"))

    gmp_tr, bare_tr = trainer(), trainer()
    for gmp_step, bare_step in itertools.islice(zip(gmp_tr.protocol.steps(0, 0), bare_tr.protocol.steps(0, 0)), 3):
        gmp_tr.train_step(gmp_tr.protocol.prepare(gmp_step))
        step_cpu_bench.torch_only_step(bare_tr, bare_tr.protocol.prepare(bare_step), BATCH)
    assert not torch.equal(gmp_tr.stores[0].table, trainer().stores[0].table)  # the steps moved the rows
    assert torch.equal(gmp_tr.stores[0].table, bare_tr.stores[0].table)
    for a, b in zip(gmp_tr.model.parameters(), bare_tr.model.parameters()):
        assert torch.equal(a, b)


def test_perf_samples_are_classified_by_their_frames():
    torch_cpu = "/v/torch/lib/libtorch_cpu.so"
    kernel = "[kernel.kallsyms]"
    assert perf_split.classify([("at::native::addmm_impl_cpu_", torch_cpu)]) == "ops"
    assert perf_split.classify([("clear_page_erms", kernel), ("exc_page_fault", kernel),
                                ("at::native::add_kernel", torch_cpu)]) == "ops_memory"
    assert perf_split.classify([("mapiter_trivial_get", "/v/numpy/_core/_multiarray_umath.so")]) == "numpy"
    assert perf_split.classify([("unmap_page_range", kernel), ("__munmap", "/lib/libc.so.6")]) == "free"
    assert perf_split.classify([("_PyEval_EvalFrameDefault", "/py/libpython3.11.so.1.0")]) == "python"
    assert perf_split.classify([("[unknown]", "[unknown]")]) == "other"
