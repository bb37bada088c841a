"""Run under torchrun by tests/test_distributed_partition.py: the distributed hybrid on a dataset, one
run per entry of RUNS_JSON in the same process group, each rank-0 placement saved as OUT_DIR/NAME.npz
(a run that raises a GmpError on every rank saves the message as OUT_DIR/NAME.rank{r}.err instead).

usage: torchrun ... tests/dist_partition_worker.py DATASET OUT_DIR RUNS_JSON

A run: {"name": ..., "topology": "4" or "2x2", "options": {...}, "block_samples": 64,
"chunk_samples": null, "project_block": null, "seed": 3, "seed_plus_rank": false, "dataset": null,
"available_bytes": null}; a run's "dataset" (a path) replaces DATASET for that run, so that tests on several
datasets share one launch; "available_bytes" is the memory the pre-check sees as available during that run.
"""

import json
import sys
from pathlib import Path

import numpy as np

from gmp.comm.distributed import DistributedEngine
from gmp.datasets.format import load_dataset
from gmp.errors import GmpError
from gmp.partition.distributed import memory, partition_distributed, start
from gmp.partition.hybrid import Options
from gmp.topology import resolve_topology


def main() -> None:
    dataset, out, runs = sys.argv[1:4]
    datasets = {dataset: load_dataset(dataset)}
    engine = DistributedEngine()
    default_block = start.PROJECT_BLOCK
    default_available = memory.available_memory
    for run in json.loads(runs):
        path = run.get("dataset") or dataset
        ds = datasets[path] = datasets.get(path) or load_dataset(path)
        topo = str(run.get("topology", "4"))
        topo = resolve_topology(int(topo), None, None) if "x" not in topo else resolve_topology(None, topo, None)
        start.PROJECT_BLOCK = run.get("project_block") or default_block
        seed = run.get("seed", 3) + (engine.rank if run.get("seed_plus_rank") else 0)
        available = run.get("available_bytes")
        memory.available_memory = default_available if available is None else (lambda: available)
        try:
            p = partition_distributed(ds.indptr, ds.indices, ds.num_embeddings, topo, seed=seed,
                                      options=Options(**run.get("options", {})), engine=engine,
                                      block_samples=run.get("block_samples", 64),
                                      chunk_samples=run.get("chunk_samples"),
                                      dataset_sha256=f"{ds.sha256}{engine.rank if run.get('sha_by_rank') else ''}")
        except GmpError as exc:
            (Path(out) / f"{run['name']}.rank{engine.rank}.err").write_text(str(exc))
            continue
        if p is not None:
            np.savez(Path(out) / f"{run['name']}.npz", sample_worker=p.sample_worker, primary=p.embedding_primary,
                     sec_indptr=p.secondary_indptr, sec_workers=p.secondary_workers,
                     info=json.dumps({k: p.info[k] for k in ("sample_cap", "primary_cap", "rounds", "distributed", "multilevel")}))
    engine.close()


if __name__ == "__main__":
    main()
