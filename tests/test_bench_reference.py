"""The plain-PyTorch reference trainer (bench/peers/reference.py): two steps on CPU replayed by hand."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gmp.datasets.format import load_dataset
from gmp.train.models import bce_sum, make_model
from gmp.train.slots import initial_rows
from tests.train_data import make_ctr_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from peers import reference  # noqa: E402

BATCH, LR, SEED = 16, 0.5, 3


def replay(path, model: str, dim: int, steps: int) -> list[float]:
    """The reference's first steps written out: per-id loops for the pooling, a dense table, SGD by hand."""
    ds = load_dataset(path)
    field_of = ds.field_of_embedding()
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    num_fields = len(ds.categorical_fields)
    ctr = make_model(model, num_fields=num_fields, num_dense=ds.num_dense, embedding_dim=dim, hidden=(8, 4),
                     seed=SEED)
    table = torch.as_tensor(initial_rows(np.arange(ds.num_embeddings), ctr.row_dim, SEED)).float()
    perm = np.random.default_rng(np.random.SeedSequence([SEED, 0])).permutation(ds.num_train)
    losses = []
    for step in range(steps):
        samples = perm[step * BATCH:(step + 1) * BATCH]
        leaf = table.clone().requires_grad_(True)
        bags = []
        for s in samples:
            row = [torch.zeros(ctr.row_dim) for _ in range(num_fields)]
            for i in indices[indptr[s]:indptr[s + 1]]:
                row[field_of[i]] = row[field_of[i]] + leaf[i]
            bags.append(torch.stack(row))
        pooled = torch.stack(bags)
        emb = pooled[..., :dim]
        linear = pooled[..., dim:].sum(dim=(1, 2)) if ctr.has_linear else None
        dense = torch.as_tensor(np.asarray(ds.dense)[samples]) if ds.num_dense else None
        logits = ctr.logits_from(emb, linear, SimpleNamespace(num_samples=len(samples), dense=dense))
        loss = bce_sum(logits, torch.as_tensor(np.asarray(ds.labels)[samples])) / BATCH
        ctr.zero_grad()
        loss.backward()
        with torch.no_grad():
            table -= LR * leaf.grad
            for p in ctr.parameters():
                if p.grad is not None:
                    p -= LR * p.grad
        losses.append(float(loss))
    return losses


@pytest.mark.parametrize("model,multi", [("dcn", False), ("wdl", True)])
def test_reference_two_steps_match_a_replay(tmp_path, model, multi):
    path = make_ctr_dataset(tmp_path / "d", num_samples=80, multi=multi)
    args = reference.parser().parse_args(
        ["--dataset", str(path), "--model", model, "--batch-size", str(BATCH), "--lr", str(LR), "--embedding-dim",
         "4", "--hidden", "8,4", "--seed", str(SEED), "--max-steps", "2", "--device", "cpu", "--out", "unused"])
    res = reference.run(args)
    assert res["one_hot"] is (not multi)
    assert res["steps"] == 2 and res["samples"] == 2 * BATCH
    expected = replay(path, model, 4, 2)
    assert expected[0] != expected[1]
    np.testing.assert_allclose(res["losses"], expected, rtol=1e-5)
    assert 0.0 <= res["test_auc"] <= 1.0


def test_step_bench_counts_nested_and_overlapping_operators_once():
    from step_cpu_bench import union_seconds

    # an operator inside another (2-3 in 0-10) counts once; overlapping ones (12-15, 14-16) as 12-16
    assert union_seconds([(12.0, 15.0), (0.0, 10.0), (2.0, 3.0), (14.0, 16.0)]) == 14.0
    assert union_seconds([]) == 0.0
