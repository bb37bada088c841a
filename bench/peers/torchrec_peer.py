"""Peer: TorchRec 1.8 model parallelism (optional ``peers`` extra).

One ``EmbeddingBagConfig`` per categorical field (the gmp dataset's field-local ids),
sharded by ``DistributedModelParallel`` — table-wise (``--sharding table_wise``) or as
the planner chooses (``--sharding planner``) — with SGD fused into the backward pass
(``apply_optimizer_in_backward``), the gmp model's dense part replicated under DDP,
and SGD on it. FBGEMM needs row widths divisible by 4, so models with a linear column
(``wdl``, ``deepfm``: ``dim + 1``) are refused: compare on ``dcn``.

    torchrun --nproc-per-node 2 bench/peers/torchrec_peer.py --dataset D --out r.json
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from peers.common import (Data, DenseInput, Progress, arguments, start, timed_steps,  # noqa: E402
                          write_result)

from gmp.train.models import bce_sum  # noqa: E402

INIT_SCALE = 0.05  # uniform(-0.05, 0.05), as gmp's store initialises rows


def require_torchrec():
    try:
        import torchrec  # noqa: F401
        return torchrec
    except ImportError as exc:
        raise SystemExit(f"TorchRec is not installed ({exc}); install the peers extra: pip install "
                         "fbgemm-gpu-cpu==1.8.0 tensordict torchmetrics==1.0.3 pyre-extensions && "
                         "pip install --no-deps torchrec==1.8.0") from None


class Model(nn.Module):
    def __init__(self, ebc, ctr, data: Data):
        super().__init__()
        self.ebc, self.ctr = ebc, ctr
        self.keys = data.field_names

    def forward(self, kjt, num_samples: int, dense):
        pooled = self.ebc(kjt).to_dict()
        emb = torch.stack([pooled[k] for k in self.keys], dim=1)  # [batch, fields, dim]
        return self.ctr.logits_from(emb, None, DenseInput(num_samples, dense))


def main() -> None:
    ap = arguments(__doc__.splitlines()[0])
    ap.add_argument("--sharding", default="table_wise", help="table_wise | row_wise | planner")
    args = ap.parse_args()
    require_torchrec()
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    rank, world, data, ctr = start(args)
    if ctr.row_dim % 4:
        raise SystemExit(f"FBGEMM needs row widths divisible by 4; --model {args.model} has rows of {ctr.row_dim} "
                         f"(embedding dim + a linear column): use --model dcn")
    tables = [EmbeddingBagConfig(name=f"t_{n}", embedding_dim=ctr.row_dim, num_embeddings=max(1, s),
                                 feature_names=[n]) for n, s in zip(data.field_names, data.field_sizes)]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": args.lr})
    constraints = None
    if args.sharding != "planner":
        constraints = {f"t_{n}": ParameterConstraints(sharding_types=[args.sharding]) for n in data.field_names}
    topology = Topology(world_size=world, compute_device="cpu")
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints)
    sharders = [EmbeddingBagCollectionSharder()]
    model = Model(ebc, ctr, data)
    plan = planner.collective_plan(model, sharders, dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan, sharders=sharders)
    g = torch.Generator().manual_seed(args.seed + 1000 * rank)
    # rows start uniform(-0.05, 0.05) as in gmp (each shard drawn locally: same distribution, not same bits)
    for name, tensor in dmp.state_dict().items():
        if "embedding_bags" in name and hasattr(tensor, "local_shards"):
            for shard in tensor.local_shards():
                shard.tensor.uniform_(-INIT_SCALE, INIT_SCALE, generator=g)
    dense_params = [p for n, p in dmp.named_parameters() if "embedding_bags" not in n]
    opt = torch.optim.SGD(dense_params, lr=args.lr)
    kinds = sorted({ps.sharding_type for m in plan.plan.values() for ps in m.values()})
    prog = Progress()
    history = []
    keys = data.field_names
    def evaluate(epoch: int) -> None:
        """Test AUC after ``epoch`` epochs (every rank takes part: the sharded lookup is collective)."""
        dmp.eval()
        test = torch.arange(data.num_train, data.num_samples).numpy()
        part = test[rank::world]

        def logits_of(s):
            values, lengths = data.keyed_batch(s)
            kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths)
            return dmp(kjt, s.size, data.dense_batch(s))

        z = []
        with torch.no_grad():
            n = max(1, -(-part.size // 8192))
            counts = torch.tensor([n])
            dist.all_reduce(counts, op=dist.ReduceOp.MAX)
            chunks = [part[a * 8192:(a + 1) * 8192] for a in range(int(counts))]
            for c in chunks:
                z.append(logits_of(c if c.size else part[:1]).double()[: c.size])
        z = torch.cat(z) if z else torch.zeros(0, dtype=torch.float64)
        sizes = [None] * world
        dist.all_gather_object(sizes, (part.tolist(), z.tolist()))
        if rank == 0:
            import numpy as np
            from sklearn.metrics import roc_auc_score
            ids = np.concatenate([np.asarray(s[0], dtype=np.int64) for s in sizes])
            zz = np.concatenate([np.asarray(s[1]) for s in sizes])
            y = data.labels[ids].astype(np.float64)
            history.append({"epoch": epoch, "train_seconds": prog.seconds, "test_auc": float(roc_auc_score(y, zz)),
                            "test_logloss": float(np.mean(np.logaddexp(0, zz) - y * zz))})

    if args.eval_initial:
        evaluate(0)
    for epoch in range(args.epochs):
        dmp.train()
        for global_size, mine in timed_steps(data, args, epoch, world=world, rank=rank, progress=prog):
            values, lengths = data.keyed_batch(mine)
            kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths)
            dense, labels = data.dense_batch(mine), data.label_batch(mine)
            opt.zero_grad()
            loss = bce_sum(dmp(kjt, mine.size, dense), labels)
            # embedding gradients sum over ranks (all-to-all); DDP averages the dense ones: scale
            # the loss to the global-batch mean, and the dense gradients back up by the world size
            (loss / global_size).backward()
            for p in dense_params:
                if p.grad is not None:
                    p.grad.mul_(world)
            opt.step()
        evaluate(epoch + 1)
    if rank == 0:
        write_result(args.out, {"method": f"torchrec-{args.sharding}", "sharding_types": kinds, "world": world,
                                "samples": prog.samples, "steps": prog.steps, "train_seconds": prog.seconds,
                                "samples_per_sec": prog.samples / prog.seconds, "epochs": history, "test_auc": history[-1]["test_auc"] if history else None})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
