"""Train a TorchRec model on gmp's placement: `gmp export torchrec`, then 2 CPU ranks, a process group and a loop.

What the export gives TorchRec (docs/export.md): per-field tables whose ids are renumbered so that
TorchRec's even row-wise split puts each worker's primary rows on the rank gmp chose, the
ShardingPlan, and each rank's training samples. This script makes a small dataset and its hybrid
placement on 2 workers, exports it, then starts 2 processes (gloo, CPU) that each build the sharded
EmbeddingBagCollection from the export, wrap it with DistributedModelParallel and train a small
model (pooled embeddings + the dense features -> MLP -> click logit) for one epoch over their own
samples: the export's steps_per_epoch steps, every training sample once (a rank that runs out
pads its batch with empty samples that the loss masks):

    python examples/torchrec_train.py [--samples 3000] [--batch-size 64] [--work DIR]

Needs TorchRec (the `peers` extra, which scripts/setup.sh installs):
    pip install -e '.[peers]' && pip install --no-deps torchrec==1.8.0
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

GMP = [sys.executable, "-m", "cli.main"]  # the `gmp` console script, from this interpreter
WORLD = 2


def gmp(*args: str) -> None:
    print("$ gmp " + " ".join(args), flush=True)
    proc = subprocess.run([*GMP, *args], capture_output=True, text=True)
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "", flush=True)  # its summary line
    if proc.returncode != 0:
        sys.exit(f"gmp {args[0]} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_rank(rank: int, world: int, port: int, export_dir: str, data_dir: str, lr: float) -> None:
    """One rank: join the process group, build the sharded model from the export, train one epoch."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    import gmp as gmp_api
    from gmp.export.torchrec import (epoch_batches, load_export, torchrec_batch, torchrec_sharding_plan,
                                     torchrec_tables)
    from gmp.wording import plural

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # TorchRec 1.8 calls deprecated torch collectives
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # the same dense initialisation on every rank
        exp = load_export(export_dir)
        ds = gmp_api.load_dataset(data_dir)
        dim, num_tables = int(exp.plan["embedding_dim"]), len(exp.tables)
        num_dense = int(np.asarray(ds.dense).shape[1]) if ds.dense is not None else 0

        class ClickModel(nn.Module):
            def __init__(self, device: torch.device):
                super().__init__()
                self.ebc = EmbeddingBagCollection(tables=torchrec_tables(exp), device=device)
                self.mlp = nn.Sequential(nn.Linear(num_tables * dim + num_dense, 32), nn.ReLU(), nn.Linear(32, 1))

            def forward(self, kjt, dense):
                pooled = self.ebc(kjt).values()  # batch x (tables * dim), the features in table order
                return self.mlp(torch.cat([pooled, dense], dim=1)).squeeze(1)

        # the tables are created on the meta device: DistributedModelParallel materialises each rank's shard
        model = ClickModel(torch.device("meta"))  # the MLP is made on the CPU (nn.Linear's default)
        # the embedding rows are updated inside the backward pass (TorchRec's fused optimizer) ...
        apply_optimizer_in_backward(torch.optim.SGD, model.ebc.parameters(), {"lr": lr})
        dmp = DistributedModelParallel(model, device=torch.device("cpu"),
                                       plan=torchrec_sharding_plan(exp, model.ebc, module_path="ebc"))
        # ... the replicated MLP (DistributedDataParallel inside DMP) by a plain optimizer
        dense_opt = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                          lambda params: torch.optim.SGD(params, lr=lr))
        optimizer = CombinedOptimizer([dmp.fused_optimizer, dense_opt])

        samples = np.asarray(exp.rank_samples(rank))  # this rank's training samples, in gmp's order
        batch = int(exp.plan["batch_size"])
        # every rank runs the export's steps_per_epoch steps, and at every step all ranks' batches have the
        # same size (the row-wise lookup's collectives on CPU, TorchRec 1.8, exchange fixed-size blocks):
        # epoch_batches gives this rank's samples of each step and that size; a rank with fewer samples
        # left pads its batch with empty samples (no ids, zero dense features), masked out of the loss
        labels = np.asarray(ds.labels)
        dense_all = np.asarray(ds.dense, dtype=np.float32) if num_dense else None
        loss_fn = nn.BCEWithLogitsLoss(reduction="none")
        losses, trained, steps = [], 0, 0
        for ids, size in epoch_batches(exp, rank):
            kjt = torchrec_batch(exp, ds, ids, pad_to=size)
            dense = torch.zeros((size, num_dense))
            target = torch.zeros(size)
            mask = torch.zeros(size)
            if num_dense:
                dense[:len(ids)] = torch.as_tensor(dense_all[ids])
            target[:len(ids)] = torch.as_tensor(labels[ids], dtype=torch.float32)
            mask[:len(ids)] = 1.0
            optimizer.zero_grad()
            logits = dmp(kjt, dense)
            loss = (loss_fn(logits, target) * mask).sum() / max(len(ids), 1)  # 0 (no gradient) when out of samples
            loss.backward()
            optimizer.step()
            steps += 1
            trained += len(ids)
            if len(ids):
                losses.append(float(loss.detach()))
        quarter = max(1, len(losses) // 4)
        # each rank's line goes to a file the parent prints in rank order (two processes printing at once
        # can interleave their lines)
        loss_line = (f"loss {np.mean(losses[:quarter]):.4f} (first quarter) -> {np.mean(losses[-quarter:]):.4f} "
                     f"(last)" if losses else "no samples")
        Path(export_dir, f"rank{rank}.txt").write_text(
            f"rank {rank}: {trained:,} of its {len(samples):,} samples in {steps} {plural('step', steps)} of up to "
            f"{batch}, {loss_line}\n")
        if not np.isfinite(losses).all():
            raise SystemExit(f"rank {rank}: the loss is not finite")
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--work", type=Path, default=None,
                    help="scratch directory, kept (default: a temporary one, removed at the end)")
    args = ap.parse_args(argv)
    try:
        import torchrec  # noqa: F401
    except ImportError as exc:
        sys.exit(f"TorchRec is not installed ({exc}): pip install -e '.[peers]' && "
                 "pip install --no-deps torchrec==1.8.0 (scripts/setup.sh does both)")
    if args.work is not None:
        run(args.work, args.samples, args.batch_size, args.lr)
        return
    with tempfile.TemporaryDirectory(prefix="gmp-torchrec-") as work:
        run(Path(work), args.samples, args.batch_size, args.lr)


def run(work: Path, num_samples: int, batch_size: int, lr: float) -> None:
    """Synthesize, partition, export, and train one epoch on WORLD ranks, in ``work``."""
    import torch.multiprocessing as mp

    data, manifest, export = work / "data", work / "data.hybrid.w2", work / "data.hybrid.w2.torchrec"
    gmp("data", "synth", "--preset", "tiny", "--samples", str(num_samples), "--seed", "0", "--out", str(data),
        "--overwrite")
    gmp("partition", str(data), "--workers", str(WORLD), "--method", "hybrid", "--batch-size", str(batch_size),
        "--no-plots", "--out", str(manifest), "--overwrite")
    # FBGEMM wants row widths divisible by 4
    gmp("export", "torchrec", str(manifest), "--dataset", str(data), "--embedding-dim", "8",
        "--batch-size", str(batch_size), "--out", str(export), "--overwrite")
    mp.start_processes(train_rank, args=(WORLD, free_port(), str(export), str(data), lr), nprocs=WORLD,
                       join=True, start_method="spawn")
    for rank in range(WORLD):
        print((export / f"rank{rank}.txt").read_text(), end="")
    print(f"trained one epoch on {WORLD} ranks from {export}")


if __name__ == "__main__":
    main()
