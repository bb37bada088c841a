"""CPU milliseconds per worker per step of each phase of gmp's training step (process time, so
other jobs on a shared machine distort it less than wall-clock time).

Both workers of a placement run in this process (the local engine: the exchanges are memory
copies, so the communication phases show only their CPU work, never a wait); every phase of
:data:`gmp.train.steps.PHASES` is timed with ``time.process_time`` and divided by steps x workers.

    python bench/step_cpu_bench.py data/bench/cluster-bench/criteo-kaggle-500k-s0.1 \\
        data/bench/cluster-bench/criteo-kaggle-500k-s0.1.hybrid.2 --steps 40
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gmp.comm.local import LocalEngine  # noqa: E402
from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.train.config import TrainConfig  # noqa: E402
from gmp.train.data import TrainData  # noqa: E402
from gmp.train.run import load_placement  # noqa: E402
from gmp.train.trainer import Trainer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("manifest")
    ap.add_argument("--steps", type=int, default=40, help="timed steps (after --warmup)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--model", default="dcn")
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--embedding-dim", type=int, default=16)
    ap.add_argument("--pipeline", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset(args.dataset)
    placement = load_placement(ds, args.manifest, None)
    config = TrainConfig(model=args.model, optimizer="sgd", lr=0.01, batch_size=args.batch_size,
                         embedding_dim=args.embedding_dim, staleness=0, pipeline=args.pipeline)
    tr = Trainer(TrainData(ds), placement, config, LocalEngine(placement.num_workers))
    tr.phase.clock = time.process_time  # CPU seconds per phase (the protocols time through this clock)
    steps = tr.protocol.steps(0, 0)
    for step in itertools.islice(steps, args.warmup):
        tr.train_step(step)
    tr.phase.reset()
    t0 = time.process_time()
    done = 0
    for step in itertools.islice(steps, args.steps):
        tr.train_step(step)
        done += 1
    total = time.process_time() - t0
    per = max(1, done * placement.num_workers)
    cpu = tr.phase.seconds
    outside = sum(v for k, v in cpu.items() if k != "compute")
    print(f"CPU ms per worker per step ({done} steps, {placement.num_workers} workers): "
          + ", ".join(f"{k} {v / per * 1e3:.2f}" for k, v in cpu.items())
          + f"; outside compute {outside / per * 1e3:.2f}; total {total / per * 1e3:.2f}")


if __name__ == "__main__":
    main()
