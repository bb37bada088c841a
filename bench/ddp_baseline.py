"""Plain PyTorch data parallelism: the baseline of bench/train_bench.py.

Every rank holds the whole embedding table (one replicated ``nn.EmbeddingBag``,
sum-pooled per field) and the same dense model as ``gmp train``; DDP all-reduces
all gradients (the full table's dense gradient included) every step. Batches:
the ``naive`` schedule (global batch of N*B split into N parts), loss scaled
so the step is the mean over the global batch. Same initial values as gmp.

    torchrun --standalone --nproc-per-node 4 bench/ddp_baseline.py --dataset D --out result.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from gmp.datasets.format import load_dataset
from gmp.train import TrainData
from gmp.train.models import bce_sum, make_model
from gmp.train.schedule import NaiveSchedule
from gmp.constants import ADAGRAD_EPS
from gmp.train.store import initial_rows


class Replicated(nn.Module):
    def __init__(self, ctr, num_embeddings, seed):
        super().__init__()
        self.ctr = ctr
        self.bag = nn.EmbeddingBag(num_embeddings, ctr.row_dim, mode="sum")
        with torch.no_grad():
            self.bag.weight.copy_(torch.as_tensor(initial_rows(np.arange(num_embeddings), ctr.row_dim, seed)))

    def forward(self, ids, offsets, num_samples, dense):
        pooled = self.bag(ids, offsets).view(num_samples, self.ctr.num_fields, self.ctr.row_dim)
        emb = pooled[..., : self.ctr.embedding_dim]
        linear = pooled[..., self.ctr.embedding_dim:].sum(dim=(1, 2)) if self.ctr.has_linear else None

        class _B:  # what logits_from reads
            pass

        b = _B()
        b.num_samples, b.dense = num_samples, dense
        return self.ctr.logits_from(emb, linear, b)


def batch_tensors(data: TrainData, samples: np.ndarray):
    ptr, ids = data.gather(samples)
    f = data.num_fields
    seg = np.repeat(np.arange(samples.size), np.diff(ptr)) * f + data.field_of[ids]
    offsets = np.searchsorted(seg, np.arange(samples.size * f))
    dense = torch.as_tensor(np.asarray(data.dense[samples])) if data.num_dense else None
    return (torch.as_tensor(ids), torch.as_tensor(offsets), int(samples.size), dense,
            torch.as_tensor(np.asarray(data.labels[samples])))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", default="wdl")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--embedding-dim", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = TrainData(load_dataset(args.dataset))
    ctr = make_model(args.model, num_fields=data.num_fields, num_dense=data.num_dense,
                     embedding_dim=args.embedding_dim, seed=args.seed)
    model = DDP(Replicated(ctr, data.num_embeddings, args.seed))
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr, eps=ADAGRAD_EPS)
    schedule = NaiveSchedule(world, data.num_train, args.batch_size, seed=args.seed)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    seconds, samples, steps, loss_sum = 0.0, 0, 0, 0.0
    for epoch in range(args.epochs):
        for step in schedule.steps(epoch):
            t0 = time.perf_counter()
            ids, offsets, n, dense, labels = batch_tensors(data, step.samples[rank])
            opt.zero_grad()
            loss = bce_sum(model(ids, offsets, n, dense), labels)
            # DDP averages over ranks; scale so the result is the mean over the global batch
            (loss * world / step.global_batch_size).backward()
            opt.step()
            seconds += time.perf_counter() - t0
            samples += step.global_batch_size
            steps += 1
            loss_sum += float(loss.detach())
    total_loss = torch.tensor([loss_sum], dtype=torch.float64)
    dist.all_reduce(total_loss)
    if rank == 0:
        from sklearn.metrics import roc_auc_score

        test = np.arange(data.num_train, data.num_samples)
        z = []
        with torch.no_grad():
            for a in range(0, test.size, 8192):
                ids, offsets, n, dense, _ = batch_tensors(data, test[a:a + 8192])
                z.append(model.module(ids, offsets, n, dense).double().numpy())
        z = np.concatenate(z)
        y = np.asarray(data.labels[test], dtype=np.float64)
        res = {"method": "ddp-replicated", "samples_per_sec": samples / seconds, "steps": steps,
               "train_loss": float(total_loss) / samples, "test_auc": float(roc_auc_score(y, z)),
               "test_logloss": float(np.mean(np.logaddexp(0, z) - y * z)),
               # every worker contributes the full gradient (table included) to the all-reduce
               "bytes_per_step": grad_bytes * world, "embedding_bytes_per_step": (grad_bytes - sum(
                   p.numel() * p.element_size() for p in model.module.ctr.parameters())) * world}
        with open(args.out, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
