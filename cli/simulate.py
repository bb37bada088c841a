"""``gmp simulate``: replay an epoch with a runtime schedule and count cache pulls and pushes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ._common import check_seed, console, dataset_argument, echo_json, handle_errors
from ._flags import flags_for_params


def load_placement(dataset, manifest: Optional[Path], workers: Optional[int], seed: int):
    """The placement to simulate: the manifest's, or (no manifest) random over ``workers``."""
    from gmp.errors import TrainingError
    from gmp.manifest import load_manifest

    if manifest is None:
        from gmp.graph import build_graph
        from gmp.partition import run_partitioner
        from gmp.topology import homogeneous

        if workers is None:
            raise TrainingError("Without --manifest, --workers is required (rows are then placed at random).")
        from gmp.train.herald.engine import check_num_workers

        check_num_workers(workers)  # before the random placement (100,000 workers ran out of memory there)
        return run_partitioner("random", build_graph(dataset), homogeneous(workers), seed=seed)
    placement = load_manifest(manifest, dataset=dataset).placement
    if workers is not None and workers != placement.num_workers:
        raise TrainingError(f"--workers {workers} does not match the manifest {manifest}, which places rows on "
                            f"{placement.num_workers} workers. Drop --workers or partition again.")
    return placement


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    @handle_errors
    def simulate_cmd(
        dataset_arg: Optional[Path] = typer.Argument(None, metavar="DATASET", help="Prepared dataset directory."),
        dataset: Optional[Path] = typer.Option(None, "--dataset",
                                               help="Deprecated alias of DATASET (kept for old scripts)."),
        manifest: Optional[Path] = typer.Option(None, "--manifest",
                                                help="Placement manifest (default: random placement over --workers)."),
        workers: Optional[int] = typer.Option(None, "--workers", help="Workers (must match the manifest)."),
        schedule: str = typer.Option("herald", "--schedule",
                                     help="static (gmp train's default) | naive | herald: every schedule of "
                                          "gmp train."),
        shuffle: str = typer.Option("seeded", "--shuffle", help="seeded (SeedSequence([seed, epoch])) | none "
                                                                "(dataset order), as gmp train --shuffle."),
        on_demand: Optional[bool] = typer.Option(None, "--on-demand/--no-on-demand",
                                                 help="On-demand synchronisation (default: on for herald, off for "
                                                      "naive and static; Herald's paper setting, unlike gmp "
                                                      "train)."),
        cache_rows: Optional[int] = typer.Option(None, "--cache-rows",
                                                 help="Cached rows per worker (default: 10% of the rows the training samples use)."),
        cache_policy: Optional[str] = typer.Option(None, "--cache-policy", help="lru (default) | lookahead"),
        lookahead: Optional[int] = typer.Option(None, "--lookahead", help="Look-ahead window in global batches "
                                                                          "(default 0)."),
        batch_size: Optional[int] = typer.Option(None, "--batch-size",
                                                 help="Samples per worker per iteration (default: the manifest's "
                                                      "plan, else 512)."),
        embedding_dim: Optional[int] = typer.Option(None, "--embedding-dim",
                                                    help="Row width for the byte counts (float32; default: the "
                                                         "manifest's plan, else 16)."),
        read_only_replicas: Optional[bool] = typer.Option(
            None, "--read-only-replicas/--writable-replicas",
            help="Read-only: the trainer's store, non-primary copies are never written locally (with "
                 "--cache-rows 0 --no-on-demand it predicts gmp train's counts); writable: Herald's cache "
                 "(default here; gmp train's default is read-only)."),
        parameter_server: bool = typer.Option(False, "--parameter-server",
                                              help="Herald's setting: all rows on a separate PS (the manifest's "
                                                   "primaries are ignored)."),
        min_frequency: float = typer.Option(0.0, "--min-frequency",
                                            help="Count only rows used by more than this fraction of the training "
                                                 "samples (Herald caches frequency > 1e-5)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the sample order (and of the random placement)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Count the embedding pulls/pushes one epoch incurs under a schedule, without training."""
        from cli.train import plan_defaults
        from gmp.datasets.format import load_dataset
        from gmp.simulate import active_rows, simulate, simulator_options

        with flags_for_params():
            check_seed(seed)  # before the random placement, which numpy would refuse in a traceback
            dataset = dataset_argument(dataset_arg, dataset, "simulate")
            plan = plan_defaults(manifest, batch_size=batch_size, embedding_dim=embedding_dim)
            ds = load_dataset(dataset)
            placement = load_placement(ds, manifest, workers, seed)
            options = simulator_options(schedule, active_rows(ds.indptr, ds.indices, ds.num_train),
                                        on_demand=on_demand, cache_rows=cache_rows, cache_policy=cache_policy,
                                        lookahead=lookahead, read_only_replicas=read_only_replicas)
            result = simulate(ds.indptr, ds.indices, placement, num_train=ds.num_train, batch_size=plan["batch_size"],
                              schedule=schedule, options=options, seed=seed, shuffle=shuffle,
                              embedding_dim=plan["embedding_dim"],
                              parameter_server=parameter_server, min_frequency=min_frequency)
        out = result.to_json()
        if as_json:
            echo_json(out)
            return
        from rich.table import Table

        table = Table(title=f"gmp simulate: {out['schedule']} ({out['shuffle']} order), on-demand {'on' if out['on_demand'] else 'off'}, "
                            f"{out['workers']} workers, {out['batches']} batches")
        table.add_column("quantity")
        table.add_column("value", justify="right")
        for key in ("pulls", "pull_miss", "pull_stale", "pushes", "push_sync", "push_plan", "push_evict",
                    "push_flush", "rows_pulled_bytes", "rows_pushed_bytes", "prefetchable_pulls",
                    "schedule_ms_per_batch"):
            table.add_row(key, f"{out[key]:,}" if isinstance(out[key], int) else f"{out[key]:.3f}")
        console().print(table)
