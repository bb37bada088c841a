"""Run under torchrun by tests/test_train_distributed.py: asynchronous collectives left pending
are waited for by ``DistributedEngine.close()`` before the groups go, and their results stay
readable afterwards.

usage: torchrun ... tests/dist_async_worker.py
"""

import torch

from gmp.comm.distributed import DistributedEngine


def main() -> None:
    engine = DistributedEngine()
    rank, n = engine.rank, engine.world_size
    # worker r sends rows filled with 10 r + d to worker d
    rows = engine.start_alltoallv([[torch.full((2, 3), 10.0 * rank + d) for d in range(n)]], "embedding_rows",
                                  recv_counts=[[2] * n])
    dense = engine.start_all_reduce_dense(torch.full((5,), rank + 1.0))
    if engine.num_pending != 2:
        raise SystemExit(f"rank {rank}: {engine.num_pending} pending collectives, expected 2")
    engine.close()  # never waited for by the caller
    if engine.num_pending:
        raise SystemExit(f"rank {rank}: close() left {engine.num_pending} collectives pending")
    got = rows.wait()[0]
    for src in range(n):
        if not torch.equal(got[src], torch.full((2, 3), 10.0 * src + rank)):
            raise SystemExit(f"rank {rank}: rows from {src} are {got[src].tolist()}")
    if not torch.equal(dense.wait(), torch.full((5,), n * (n + 1) / 2)):
        raise SystemExit(f"rank {rank}: dense sum {dense.wait().tolist()}")
    print(f"rank {rank} ok")


if __name__ == "__main__":
    main()
