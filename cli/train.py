"""``gmp train``: train a CTR model with the placement of a manifest."""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Optional

import typer

from cli._common import dataset_argument, given, handle_errors
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


def warn(line: Optional[str]) -> None:
    """``warning: LINE.`` on stderr, once under torchrun (rank 0 speaks for all)."""
    if line and os.environ.get("RANK", "0") == "0":
        typer.echo(f"warning: {line}.", err=True)


def summary_line(records: list[dict], spec=None) -> str:
    """What a person reads after training: the last epoch's test metrics, speed, bytes per step (embedding
    and dense), the tiered cache's hit rate, and the resume point or migration (``spec``: the run's
    :class:`gmp.specs.TrainSpec`)."""
    migration = next((r for r in records if r.get("kind") == "migration"), None)
    records = [r for r in records if r.get("kind") != "migration"] or records  # a resume's migration is epoch 0
    last = records[-1]
    secs = sum(float(r.get("train_seconds") or 0.0) for r in records)
    samples = sum(int(r.get("samples") or 0) for r in records)
    auc, logloss = last.get("test_auc"), last.get("test_logloss")
    has_test = isinstance(logloss, (int, float)) and logloss == logloss
    parts = [f"test AUC {auc:.4f}" if isinstance(auc, (int, float)) and auc == auc else
             "test AUC undefined (the test labels are all one class)" if has_test else "no test set",
             f"logloss {logloss:.4f}" if has_test else "",
             f"{samples / secs:,.0f} samples/s" if secs > 0 else "",
             bytes_per_step(last), cache_hit_rate(last)]
    if migration is not None:
        moved = (migration.get("moved_rows") or {})
        parts.append(f"migrated {int(moved.get('total') or 0):,} rows from {migration.get('checkpoint', 'the checkpoint')}")
    elif spec is not None and spec.resume_from is not None:
        e, st = int(spec.resume_from["epoch"]), int(spec.resume_from["step"])
        parts.append(f"resumed at epoch {e + 1} step {st}" if st else f"resumed after epoch {e}")
    epochs = f"epoch {last['epoch']}" if len(records) == 1 else f"epochs {records[0]['epoch']}-{last['epoch']}"
    return f"trained {epochs} in {secs:.1f} s: " + ", ".join(p for p in parts if p)


def bytes_per_step(rec: dict) -> str:
    """``"1.23 MB per step (embedding 0.40 MB, dense all-reduce 0.83 MB)"`` of an epoch record."""
    nbytes, steps = rec.get("bytes"), rec.get("steps")
    if not isinstance(nbytes, dict) or not steps:
        mb = rec.get("embedding_bytes_per_step")
        return f"{mb / 1e6:.2f} MB of embedding traffic per step" if isinstance(mb, (int, float)) else ""
    emb = (nbytes.get("embedding_rows", 0) + nbytes.get("gradients", 0)) / steps
    dense = nbytes.get("dense_allreduce", 0) / steps
    ids = nbytes.get("ids_clocks", 0) / steps
    total = sum(v for v in nbytes.values() if isinstance(v, (int, float))) / steps
    more = f", ids {ids / 1e6:.2f} MB" if ids else ""
    return (f"{total / 1e6:.2f} MB per step (embedding {emb / 1e6:.2f} MB, dense all-reduce "
            f"{dense / 1e6:.2f} MB{more})")


def cache_hit_rate(rec: dict) -> str:
    """The tiered table's device-cache hit rate of an epoch record (empty without tiers)."""
    tiers = rec.get("tiers")
    if not isinstance(tiers, dict):
        return ""
    hits, misses = int(tiers.get("hits") or 0), int(tiers.get("misses") or 0)
    return f"cache hit rate {hits / (hits + misses):.1%}" if hits + misses else ""


def settings_line(spec) -> str:
    """The settings the run took from somewhere other than the person or a fixed default (the manifest's
    plan, torchrun, a checkpoint, a default derived from the data), with where from; empty when none."""
    from gmp.specs import DEFAULT, USER

    said = {k: v for k, v in spec.sources.items() if v not in (USER, DEFAULT) and k != "resume_from"}
    if not said:
        return ""
    from gmp.specs import describe_sources

    return "settings: " + describe_sources(spec.values(), said)


def register(app: typer.Typer) -> None:
    @app.command("train")
    @handle_errors
    def train_cmd(
        ctx: typer.Context,
        dataset_arg: Optional[Path] = typer.Argument(None, metavar="DATASET", help="Prepared dataset directory."),
        dataset: Optional[Path] = typer.Option(None, "--dataset",
                                               help="Deprecated alias of DATASET (kept for old scripts)."),
        manifest: Optional[Path] = typer.Option(None, "--manifest",
                                                help="Placement manifest ('gmp partition'); without it all rows "
                                                     "live on one worker."),
        model: str = typer.Option("wdl", "--model", help="wdl | dcn | deepfm."),
        engine: Optional[str] = typer.Option(None, "--engine",
                                             help="local (N workers in this process) | distributed (one worker per "
                                                  "process of torchrun; the default under torchrun)."),
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
        hidden: Optional[str] = typer.Option(None, "--hidden",
                                             help="Widths of the dense layers, e.g. 512,256,128 (default 128,64)."),
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
                                                      "host|disk: the cache of its own rows (default: the largest "
                                                      "step of the run or 10% of its primaries, whichever is "
                                                      "larger); else --schedule herald (s = 0): rows cached "
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
        'torchrun --nproc-per-node N --no-python gmp train DATASET --manifest M' (one worker per process).
        """
        from gmp.api import run_train
        from gmp.specs import resolve_train
        from gmp.train.records import json_line

        with one_rank_speaks(), flags_for_params():
            dataset = dataset_argument(dataset_arg, dataset, "train")
            settings = given(ctx, model=model, schedule=schedule, shuffle=shuffle, staleness=staleness,
                             epochs=epochs, batch_size=batch_size, lr=lr, optimizer=optimizer,
                             embedding_dim=embedding_dim, seed=seed, hidden=hidden, log_every=log_every,
                             lookahead=lookahead, on_demand=on_demand, cache_rows=cache_rows, cache_bytes=cache_bytes,
                             table_location=table_location, tier_dir=tier_dir, cache_policy=cache_policy,
                             read_only_replicas=read_only_replicas, comm_dtype=comm_dtype, pipeline=pipeline)
            if "staleness" in settings:
                settings["staleness"] = _parse_staleness(staleness)
            spec = resolve_train(dataset, manifest, engine=engine, workers=workers, checkpoint_dir=checkpoint_dir,
                                 resume=resume, log_json=log_json, collective_timeout=collective_timeout, **settings)
            for line in spec.warnings:
                warn(line)
            if os.environ.get("RANK", "0") == "0":
                if spec.sources.get("engine") == "torchrun":
                    typer.echo(f"under torchrun (WORLD_SIZE={spec.world_size}): one run on the distributed engine, "
                               f"one worker per process.", err=True)
                said = settings_line(spec)
                if said:
                    typer.echo(said, err=True)
            records = run_train(spec, on_record=lambda rec: typer.echo(json_line(rec)))
        if os.environ.get("RANK", "0") != "0":
            return  # under torchrun rank 0 speaks for all
        if records:
            typer.echo(summary_line(records, spec), err=True)
        elif resume:
            from gmp.train.checkpoint import read_checkpoint_header

            done = read_checkpoint_header(checkpoint_dir)["epoch"]
            typer.echo(f"nothing left to train: the checkpoint in {checkpoint_dir} already finished {done} "
                       f"epoch{'s' if done != 1 else ''}; pass --epochs {done + 1} or more to continue.", err=True)
        else:
            typer.echo("nothing trained: --epochs 0.", err=True)
