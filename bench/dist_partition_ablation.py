"""What each staleness guard of the distributed hybrid buys (docs/distributed.md, "Staleness").

Run under torchrun; rank 0 prints one markdown row per variant (batch remote reads, exact):

    torchrun --standalone --nproc-per-node 4 bench/dist_partition_ablation.py data/ml-100k --workers 8

Variants: all guards (the default); without the gain re-check; without counting the balance
moves P-fold; with blocks of 4096 and no minimum block count; and none of the guards with
blocks of 4096 (close to the "decide a block against a snapshot" scheme that was dropped).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import gmp.partition.distributed.state as S  # noqa: E402
from gmp.comm.distributed import DistributedEngine  # noqa: E402
from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.graph import build_graph  # noqa: E402
from gmp.metrics import compute_metrics  # noqa: E402
from gmp.partition.distributed import partition_distributed  # noqa: E402
from gmp.partition.hybrid import Options  # noqa: E402
from gmp.topology import resolve_topology  # noqa: E402

VARIANTS = {
    "all guards (default)": dict(recheck=True, spread=True, block=1024, min_blocks=64),
    "no gain re-check": dict(recheck=False, spread=True, block=1024, min_blocks=64),
    "balance not P-fold": dict(recheck=True, spread=False, block=1024, min_blocks=64),
    "blocks of 4096": dict(recheck=True, spread=True, block=4096, min_blocks=1),
    "no guards, blocks of 4096": dict(recheck=False, spread=False, block=4096, min_blocks=1),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Run under torchrun, one process per rank (module docstring).")
    p.add_argument("dataset", help="a prepared dataset directory (gmp data import / gmp data synth)")
    p.add_argument("--workers", type=int, default=8, help="workers to place for (default 8)")
    return p.parse_args(argv)


def main() -> None:
    args = parse_args()
    dataset, workers = args.dataset, args.workers
    ds = load_dataset(dataset)
    topo = resolve_topology(workers, None, None)
    engine = DistributedEngine()
    size = engine.world_size
    rows = []
    for name, v in VARIANTS.items():
        S.RECHECK, S.MIN_BLOCKS_PER_ROUND = v["recheck"], v["min_blocks"]
        S.BALANCE_SPREAD = None if v["spread"] else 1.0
        p = partition_distributed(ds.indptr, ds.indices, ds.num_embeddings, topo, seed=0, options=Options(),
                                  engine=engine, block_samples=v["block"])
        if p is not None:
            reads = compute_metrics(build_graph(ds), p, topo, seed=0)["batch_remote_reads"]
            rows.append((name, reads, p.info["rounds"][-1]["round"], int(np.sum([r["moved_samples"]
                                                                                  for r in p.info["rounds"]]))))
    if engine.rank == 0:
        print(f"| variant ({size} processes) | batch remote reads | rounds | samples moved |")
        print("|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(map(str, r)) + " |")
    engine.close()


if __name__ == "__main__":
    main()
