"""``gmp train``: train a CTR model with the placement of a manifest."""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Optional

import typer

from cli._common import dataset_argument, handle_errors
from cli._flags import flags_for_params
from gmp.errors import GmpError, TrainingError


def _parse_staleness(text: str) -> float:
    t = text.strip().lower()
    if t in ("inf", "infinity", "none"):
        return math.inf
    try:
        value = float(t)
    except ValueError:
        raise TrainingError(f"--staleness must be a number >= 0 or 'inf', got {text!r}.") from None
    if not value >= 0:
        raise TrainingError(f"--staleness must be a number >= 0 or 'inf', got {text!r}.")
    return value


@contextlib.contextmanager
def one_rank_speaks():
    """Under torchrun an error every rank finds (a worker-count mismatch, a lost peer) is printed
    once, by rank 0; the other ranks exit with code 2 quietly. (When rank 0 itself is the lost
    process, torchrun's own failure report names it.)"""
    try:
        yield
    except GmpError as exc:
        if getattr(exc, "rank", None) not in (None, 0):
            raise typer.Exit(2) from None
        raise


def plan_defaults(manifest: Optional[Path], **given: Optional[int]) -> dict:
    """``given`` with each None replaced by the manifest's plan (else the CLI default); one warning
    line on stderr when a given value differs from the plan."""
    from gmp.constants import DEFAULT_BATCH_SIZE, DEFAULT_EMBEDDING_DIM
    from gmp.manifest import ManifestPlan, read_plan

    plan = read_plan(manifest) if manifest is not None else ManifestPlan(None, None, None)
    values, warning = plan.resolve(**given)
    if warning and os.environ.get("RANK", "0") == "0":  # under torchrun rank 0 speaks for all
        typer.echo(f"warning: {warning}.", err=True)
    fallback = {"batch_size": DEFAULT_BATCH_SIZE, "embedding_dim": DEFAULT_EMBEDDING_DIM}
    return {k: fallback[k] if v is None else v for k, v in values.items()}


def summary_line(records: list[dict]) -> str:
    """What a person reads after training: the last epoch's test metrics, speed and traffic."""
    records = [r for r in records if r.get("kind") != "migration"] or records  # a resume's migration is epoch 0
    last = records[-1]
    secs = sum(float(r.get("train_seconds") or 0.0) for r in records)
    samples = sum(int(r.get("samples") or 0) for r in records)
    mb = last.get("embedding_bytes_per_step")
    auc, logloss = last.get("test_auc"), last.get("test_logloss")
    has_test = isinstance(logloss, (int, float)) and logloss == logloss
    parts = [f"test AUC {auc:.4f}" if isinstance(auc, (int, float)) and auc == auc else
             "test AUC undefined (the test labels are all one class)" if has_test else "no test set",
             f"logloss {logloss:.4f}" if has_test else "",
             f"{samples / secs:,.0f} samples/s" if secs > 0 else "",
             f"{mb / 1e6:.2f} MB of embedding traffic per step" if isinstance(mb, (int, float)) else ""]
    epochs = f"epoch {last['epoch']}" if len(records) == 1 else f"epochs {records[0]['epoch']}-{last['epoch']}"
    return f"trained {epochs} in {secs:.1f} s: " + ", ".join(p for p in parts if p)


def register(app: typer.Typer) -> None:
    @app.command("train")
    @handle_errors
    def train_cmd(
        dataset_arg: Optional[Path] = typer.Argument(None, metavar="DATASET", help="Prepared dataset directory."),
        dataset: Optional[Path] = typer.Option(None, "--dataset",
                                               help="Deprecated alias of DATASET (kept for old scripts)."),
        manifest: Optional[Path] = typer.Option(None, "--manifest",
                                                help="Placement manifest ('gmp partition'); without it all rows "
                                                     "live on one worker."),
        model: str = typer.Option("wdl", "--model", help="wdl | dcn | deepfm."),
        engine: str = typer.Option("local", "--engine",
                                   help="local (N workers in this process) | distributed (under torchrun)."),
        workers: Optional[int] = typer.Option(None, "--workers", help="Must equal the manifest's workers."),
        schedule: str = typer.Option("static", "--schedule", help="static | naive | herald."),
        shuffle: str = typer.Option("seeded", "--shuffle", help="seeded (SeedSequence([seed, epoch])) | none "
                                                                "(dataset order)."),
        staleness: str = typer.Option("0", "--staleness", help="Bound s on secondary staleness; 0 = synchronous, "
                                                               "'inf' = refresh only at epoch end."),
        epochs: int = typer.Option(1, "--epochs"),
        batch_size: Optional[int] = typer.Option(None, "--batch-size",
                                                 help="Samples per worker per step (default: the manifest's plan, "
                                                      "else 512)."),
        lr: float = typer.Option(0.01, "--lr", help="Learning rate (embeddings and dense layers)."),
        optimizer: str = typer.Option("adagrad", "--optimizer", help="sgd | adagrad."),
        embedding_dim: Optional[int] = typer.Option(None, "--embedding-dim",
                                                    help="Row width (default: the manifest's plan, else 16)."),
        seed: int = typer.Option(0, "--seed"),
        checkpoint_dir: Optional[Path] = typer.Option(None, "--checkpoint-dir",
                                                      help="Save a checkpoint here after every epoch."),
        resume: bool = typer.Option(False, "--resume",
                                    help="Continue from --checkpoint-dir exactly where it stopped (or, for the next "
                                         "day's --dataset made with --extend, move its rows to --manifest)."),
        log_json: Optional[Path] = typer.Option(None, "--log-json",
                                                help="Append one JSON line per epoch here (each line carries the "
                                                     "run's id; --resume continues the log's last run)."),
        log_every: int = typer.Option(0, "--log-every", help="Also log a JSON line every K steps (0 = off)."),
        lookahead: Optional[int] = typer.Option(None, "--lookahead",
                                      help="Steps read ahead (default 0 = inline). --table-location host|disk: "
                                           "the prefetcher loads each step's rows into the device cache in a "
                                           "background thread and keeps the window's rows cached (cDLRM). "
                                           "--schedule herald: the scheduler runs this many batches ahead and "
                                           "the next step's already-final rows are fetched early; also the "
                                           "window of --cache-policy lookahead."),
        on_demand: Optional[bool] = typer.Option(None, "--on-demand/--no-on-demand",
                                       help="--schedule herald (s = 0): keep a worker's updates of rows it is not "
                                            "primary of until the communication plan, an eviction or the epoch "
                                            "end needs them (Herald's on-demand synchronisation; default off)."),
        cache_rows: Optional[int] = typer.Option(None, "--cache-rows",
                                                 help="Rows of each worker's device cache. --table-location "
                                                      "host|disk: the cache of its own rows (default 10% of its "
                                                      "primaries); else --schedule herald (s = 0): rows cached "
                                                      "beyond its primaries and secondaries (default 0)."),
        cache_bytes: Optional[int] = typer.Option(None, "--cache-bytes",
                                                  help="--table-location host|disk: the device cache in bytes "
                                                       "instead of --cache-rows (a row = value + optimizer "
                                                       "state)."),
        table_location: str = typer.Option("device", "--table-location",
                                           help="device (one table on the worker's device) | host (primaries "
                                                "and their optimizer state in host memory, a device cache) | "
                                                "disk (in a file under --tier-dir, a device cache)."),
        tier_dir: Optional[Path] = typer.Option(None, "--tier-dir",
                                                help="--table-location disk: directory of the tier files "
                                                     "(default: the system's temporary directory); removed "
                                                     "at the end."),
        cache_policy: Optional[str] = typer.Option(None, "--cache-policy",
                                                   help="lookahead (default: evict first the rows the next "
                                                        "--lookahead steps do not use, then LRU; cDLRM) | lru. "
                                                        "The one device cache's order: own rows and Herald's."),
        collective_timeout: Optional[float] = typer.Option(None, "--collective-timeout",
                                                           help="--engine distributed: seconds a collective waits "
                                                                "for the slowest rank (default: "
                                                                "GMP_COLLECTIVE_TIMEOUT, else 600)."),
        read_only_replicas: Optional[bool] = typer.Option(None, "--read-only-replicas/--writable-replicas",
                                                help="--schedule herald: after a synchronous push only the primary "
                                                     "is current (read-only) or the writer's copy too (writable, "
                                                     "Herald's cache; s = 0)."),
        comm_dtype: Optional[str] = typer.Option(None, "--comm-dtype",
                                                 help="fp32 | fp16 | bf16: dtype of rows, gradients and the dense "
                                                      "all-reduce on the wire (default: the table's, float32; "
                                                      "optimizer state stays float32; exact only at fp32)."),
        pipeline: bool = typer.Option(False, "--pipeline/--no-pipeline",
                                      help="s = 0, static/naive schedule: overlap the next step's id exchange and "
                                           "pulls with this step's compute, and the gradient push with the dense "
                                           "all-reduce (the same model bit for bit)."),
    ) -> None:
        """Train WDL / DCN / DeepFM from a placement manifest (HET-GMP primaries/secondaries, bounded staleness).

        One JSON line per epoch goes to stdout (and to --log-json). Distributed:
        'torchrun --nproc-per-node N -m cli.main train --engine distributed ...'.
        """
        from gmp.train import TrainConfig, train
        from gmp.train.herald import HeraldOptions
        from gmp.train.records import json_line
        from gmp.train.tiers import DEFAULT_CACHE_PERCENT, TierOptions, split_cache_rows

        with one_rank_speaks(), flags_for_params():
            plan = plan_defaults(manifest, batch_size=batch_size, embedding_dim=embedding_dim)
            for flag, value in (("--cache-rows", cache_rows), ("--lookahead", lookahead),
                                ("--cache-policy", cache_policy)):
                if value and table_location == "device" and schedule != "herald":
                    raise TrainingError(f"{flag} drives the device cache of --table-location host|disk (the "
                                        f"worker's own rows) or of --schedule herald (remote rows), got "
                                        f"--table-location device --schedule {schedule}; add one of them or "
                                        f"drop {flag}.")
            if cache_bytes is not None and cache_bytes < 1:  # not "the default": that is leaving it out
                raise TrainingError(f"--cache-bytes must hold at least one row of the tiered table's device "
                                    f"cache, got {cache_bytes}; leave it out for the default (--table-location "
                                    f"host|disk: {DEFAULT_CACHE_PERCENT}% of the worker's primaries).")
            # one device cache per worker (docs/train.md, "Tiers"): --cache-rows sizes it; with a tiered
            # table and Herald, the scheduler's copies of remote rows take half of it between steps
            own, remote = split_cache_rows(cache_rows, tiered=table_location != "device", herald=schedule == "herald")
            policy = cache_policy or "lookahead"
            tiers = TierOptions(table_location=table_location, cache_rows=own, cache_bytes=cache_bytes or 0,
                                lookahead=(lookahead or 0) if table_location != "device" else 0,
                                cache_policy=policy, tier_dir=None if tier_dir is None else str(tier_dir))
            herald = HeraldOptions.for_trainer(lookahead=lookahead if schedule == "herald" else None,
                                               on_demand=on_demand, cache_rows=remote,
                                               cache_policy=policy if schedule == "herald" else None,
                                               read_only_replicas=read_only_replicas)
            config = TrainConfig(model=model, embedding_dim=plan["embedding_dim"], optimizer=optimizer, lr=lr,
                                 batch_size=plan["batch_size"], epochs=epochs, staleness=_parse_staleness(staleness),
                                 seed=seed, schedule=schedule, shuffle=shuffle, log_every=log_every, herald=herald,
                                 tiers=tiers, comm_dtype=comm_dtype, pipeline=pipeline)
            dataset = dataset_argument(dataset_arg, dataset, "train")
            records = train(dataset, manifest, config, engine=engine, workers=workers, checkpoint_dir=checkpoint_dir,
                            resume=resume, log_json=log_json, on_record=lambda rec: typer.echo(json_line(rec)),
                            collective_timeout=collective_timeout)
        if os.environ.get("RANK", "0") != "0":
            return  # under torchrun rank 0 speaks for all
        if records:
            typer.echo(summary_line(records), err=True)
        elif resume:
            from gmp.train.checkpoint import read_checkpoint_header

            done = read_checkpoint_header(checkpoint_dir)["epoch"]
            typer.echo(f"nothing left to train: the checkpoint in {checkpoint_dir} already finished {done} "
                       f"epoch{'s' if done != 1 else ''}; pass --epochs {done + 1} or more to continue.", err=True)
        else:
            typer.echo("nothing trained: --epochs 0.", err=True)
