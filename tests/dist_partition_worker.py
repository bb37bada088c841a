"""Run under torchrun by tests/test_distributed_partition.py: the distributed hybrid on a dataset,
twice in the same process group (determinism), each rank-0 placement saved as .npz.

usage: torchrun ... tests/dist_partition_worker.py DATASET OUT_DIR WORKERS OPTIONS_JSON
"""

import json
import sys
from pathlib import Path

import numpy as np

from gmp.comm.distributed import DistributedEngine
from gmp.datasets.format import load_dataset
from gmp.partition.distributed import partition_distributed
from gmp.partition.hybrid import Options
from gmp.topology import resolve_topology


def main() -> None:
    dataset, out, workers, options = sys.argv[1:5]
    ds = load_dataset(dataset)
    topo = resolve_topology(int(workers), None, None)
    kw = json.loads(options)
    block = kw.pop("block_samples", 64)
    engine = DistributedEngine()
    for run in range(2):
        p = partition_distributed(ds.indptr, ds.indices, ds.num_embeddings, topo, seed=3, options=Options(**kw),
                                  engine=engine, block_samples=block)
        if p is not None:
            np.savez(Path(out) / f"run{run}.npz", sample_worker=p.sample_worker, primary=p.embedding_primary,
                     sec_indptr=p.secondary_indptr, sec_workers=p.secondary_workers,
                     info=json.dumps({k: p.info[k] for k in ("sample_cap", "primary_cap", "rounds", "distributed")}))
    engine.close()


if __name__ == "__main__":
    main()
