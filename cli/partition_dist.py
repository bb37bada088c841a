"""``gmp partition --distributed`` (under torchrun) and ``--chunk-samples N`` (out of core, one process).

Thin: check the flags, build the engine, call :func:`gmp.partition.distributed.partition_distributed`,
and on rank 0 score and write the manifest as ``gmp partition`` does.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Optional

import typer

ENV_HINT = ("run it under torchrun, e.g. 'torchrun --standalone --nproc-per-node 4 --no-python gmp partition DATASET "
            "--distributed --workers 8'")


def check_launch(distributed: bool, method: Optional[str]) -> None:
    """--distributed needs torchrun's environment and the hybrid method."""
    from gmp.errors import PartitionError

    if method not in (None, "hybrid"):
        raise PartitionError(f"--distributed and --chunk-samples run the hybrid partitioner, got --method {method}; "
                             f"drop --method or use --method hybrid.")
    if distributed:
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if missing:
            raise PartitionError(f"--distributed needs RANK and WORLD_SIZE (and MASTER_ADDR, MASTER_PORT) in the "
                                 f"environment (torchrun sets them), got no {', '.join(missing)}; {ENV_HINT}, or "
                                 f"drop --distributed.")


def partition_distributed_cmd(dataset: Path, *, distributed: bool, chunk_samples: Optional[int],
                              block_samples: Optional[int], workers: Optional[int], topology: Optional[str],
                              topology_file: Optional[Path], inter_cost: float, batch_size: int, embedding_dim: int,
                              seed: int, out: Optional[Path], overwrite: bool, no_plots: bool,
                              given: dict[str, Any]) -> None:
    """The body of ``gmp partition --distributed`` / ``--chunk-samples``."""
    from gmp._io import check_output_dir
    from gmp.comm import LocalEngine
    from gmp.errors import PartitionError
    from gmp.compare import method_options
    from gmp.datasets.format import load_dataset
    from gmp.partition.distributed import DEFAULT_BLOCK_SAMPLES, check_settings, partition_distributed
    from gmp.partition.hybrid import Options
    from gmp.topology import resolve_topology

    from ._common import check_seed, topo_workers

    check_seed(seed)
    name = Path(os.path.realpath(dataset)).name
    out = out or Path("placements") / f"{name}.hybrid.w{topo_workers(workers, topology)}"
    rank = int(os.environ.get("RANK", "0")) if distributed else 0
    if rank == 0:
        from gmp.manifest import MANIFEST_FILES

        check_output_dir(out, kind="gmp.placement", overwrite=overwrite, inputs=[dataset], own=MANIFEST_FILES)
    topo = resolve_topology(workers, topology, str(topology_file) if topology_file else None, inter_cost=inter_cost)
    options = Options(**method_options("hybrid", given, batch_size=batch_size, embedding_dim=embedding_dim))
    if block_samples is not None and not distributed:
        raise PartitionError(f"--block-samples sets the blocks of --distributed (one process sweeps its samples in "
                             f"order), got --block-samples {block_samples} without --distributed; add --distributed "
                             f"(under torchrun) or drop --block-samples.")
    block = DEFAULT_BLOCK_SAMPLES if block_samples is None else block_samples
    check_settings(options, topo, block, chunk_samples)
    ds = load_dataset(dataset)
    if distributed:
        from gmp.comm.distributed import DistributedEngine

        try:
            engine = DistributedEngine()
        except (ValueError, RuntimeError) as exc:  # rendezvous: torch's message, first line
            raise PartitionError(f"--distributed could not join the process group: "
                                 f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}; "
                                 f"{ENV_HINT}.") from None
    else:
        engine = LocalEngine(1)
    ok = False
    try:
        t0 = time.perf_counter()
        placement = partition_distributed(ds.indptr, ds.indices, ds.num_embeddings, topo, seed=seed, options=options,
                                          engine=engine, block_samples=block, chunk_samples=chunk_samples,
                                          dataset_sha256=ds.sha256)
        seconds = time.perf_counter() - t0
        if placement is not None:
            _write(ds, placement, topo, out, overwrite, no_plots, batch_size, embedding_dim, seed, seconds)
        ok = True
    finally:
        _close(engine, ok)


def _close(engine, ok: bool) -> None:
    """Close the engine; after an error on this rank, without the closing barrier: the peers are inside
    some collective, and this process leaving closes its connections, so they fail at once with a
    line naming the lost peer instead of waiting out the collective timeout."""
    if ok or not distributed_group():
        engine.close()
        return
    import torch.distributed as dist

    dist.destroy_process_group()


def distributed_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _write(ds, placement, topo, out, overwrite, no_plots, batch_size, embedding_dim, seed, seconds) -> None:
    """Rank 0: score the placement on the memory-mapped graph and write the manifest atomically."""
    from gmp.api import write_scored_manifest
    from gmp.compare import peak_rss_bytes
    from gmp.graph import build_graph

    from ._common import summary_table

    graph = build_graph(ds)
    peak = max(placement.info["distributed"]["peak_rss_bytes_per_process"])
    metrics = write_scored_manifest(out, ds, graph, placement, topo, seed=seed, batch_size=batch_size,
                                    embedding_dim=embedding_dim, seconds=seconds, peak=peak, plots=not no_plots,
                                    overwrite=overwrite, manifest_peak=max(peak, peak_rss_bytes()))
    processes = placement.info["distributed"]["processes"]
    summary_table(metrics, f"hybrid ({processes} process{'es' if processes > 1 else ''}) on {topo.num_workers} "
                           f"workers ({topo.name}), batch {batch_size}")
    typer.echo(f"wrote {out} (manifest.json, arrays, report.json, report.md{'' if no_plots else ', plots'})")
