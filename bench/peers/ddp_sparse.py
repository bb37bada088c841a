"""Peer: plain PyTorch data parallelism with a sparse embedding gradient.

Every rank holds the whole table as one ``nn.EmbeddingBag(sparse=True)`` (sum-pooled
per field, the gmp model's row width) and the gmp model's dense part; DDP all-reduces
the dense gradients and the *sparse* embedding gradient (gloo's sparse all-reduce: the
touched rows only, not the 92 MB dense table gradient of a naive DDP). SGD on both.

    torchrun --nproc-per-node 2 bench/peers/ddp_sparse.py --dataset D --out r.json
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from peers.common import (DenseInput, Progress, arguments, start, test_auc, timed_steps,  # noqa: E402
                          write_result)

from gmp.train.models import bce_sum  # noqa: E402

INIT_SCALE = 0.05  # uniform(-0.05, 0.05), as gmp's store initialises rows


class Replicated(nn.Module):
    def __init__(self, ctr, num_embeddings: int, seed: int):
        super().__init__()
        self.ctr = ctr
        self.bag = nn.EmbeddingBag(num_embeddings, ctr.row_dim, mode="sum", sparse=True)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.bag.weight.uniform_(-INIT_SCALE, INIT_SCALE, generator=g)

    def forward(self, ids, offsets, num_samples, dense):
        pooled = self.bag(ids, offsets).view(num_samples, self.ctr.num_fields, self.ctr.row_dim)
        emb = pooled[..., : self.ctr.embedding_dim]
        linear = pooled[..., self.ctr.embedding_dim:].sum(dim=(1, 2)) if self.ctr.has_linear else None
        return self.ctr.logits_from(emb, linear, DenseInput(num_samples, dense))


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    rank, world, data, ctr = start(args)
    model = DDP(Replicated(ctr, data.num_embeddings, args.seed))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    prog = Progress()
    history = []

    def evaluate(epoch: int) -> None:
        if rank == 0:
            def logits_of(s):
                ids, offsets = data.bag_batch(s)
                return model.module(ids, offsets, s.size, data.dense_batch(s))
            auc, logloss = test_auc(data, logits_of)
            history.append({"epoch": epoch, "train_seconds": prog.seconds, "test_auc": auc, "test_logloss": logloss})

    if args.eval_initial:
        evaluate(0)
    for epoch in range(args.epochs):
        for global_size, mine in timed_steps(data, args, epoch, world=world, rank=rank, progress=prog):
            ids, offsets = data.bag_batch(mine)
            dense, labels = data.dense_batch(mine), data.label_batch(mine)
            opt.zero_grad()
            loss = bce_sum(model(ids, offsets, mine.size, dense), labels)
            # DDP averages over ranks: scale so the step is the mean over the global batch
            (loss * world / global_size).backward()
            opt.step()
        evaluate(epoch + 1)
    if rank == 0:
        write_result(args.out, {"method": "ddp-sparse", "world": world, "samples": prog.samples, "steps": prog.steps,
                                "train_seconds": prog.seconds, "samples_per_sec": prog.samples / prog.seconds,
                                "epochs": history,
                                "test_auc": history[-1]["test_auc"] if history else None})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
