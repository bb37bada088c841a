"""``gmp train``: train a CTR model with the placement of a manifest."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import Optional

import typer

from cli._common import dataset_argument, given, handle_errors
from cli._flags import flags_for_params
from cli._options import options
from gmp import progress
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
    """Under torchrun an error every rank finds but words by its own rank (a lost peer) is printed
    once, by rank 0; the other ranks exit with code 2 quietly. (An error worded alike on every rank, such
    as a worker-count mismatch, is printed once per machine by :func:`say_error` instead.) A rank that rank 0 did not
    answer after a failed collective says so, once per machine (``speaks``: rank 0 may be the stopped process, which
    then prints nothing)."""
    try:
        yield
    except GmpError as exc:
        if getattr(exc, "rank", None) not in (None, 0) and not getattr(exc, "speaks", False):
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
        parts.append(migrated(migration))
    elif spec is not None and spec.resume_from is not None:
        e, st = int(spec.resume_from["epoch"]), int(spec.resume_from["step"])
        parts.append(f"resumed at epoch {e + 1} step {st}" if st else f"resumed after epoch {e}")
    epochs = f"epoch {last['epoch']}" if len(records) == 1 else f"epochs {records[0]['epoch']}-{last['epoch']}"
    return f"trained {epochs} in {secs:.1f} s: " + ", ".join(p for p in parts if p)


def record_line(rec: dict) -> str:
    """A record as a person reads it, for a terminal (a pipe or a file gets the JSON line):
    ``epoch 2: train loss 0.4312, test AUC 0.7947, logloss 0.4601, 181,616 samples/s``."""
    kind = rec.get("kind", "epoch")
    if kind == "migration":
        return migrated(rec)
    where = f"epoch {rec.get('epoch')}" + (f" step {rec.get('step')}" if kind == "step" else "")
    parts = []
    for key, label in (("train_loss", "train loss"), ("test_auc", "test AUC"), ("test_logloss", "logloss")):
        v = rec.get(key)
        if isinstance(v, (int, float)) and v == v:
            parts.append(f"{label} {v:.4f}")
    sps = rec.get("samples_per_sec")
    if isinstance(sps, (int, float)) and sps > 0:
        parts.append(f"{sps:,.0f} samples/s")
    return f"{where}: {', '.join(parts)}"


def migrated(rec: dict) -> str:
    """``"migrated 9,721 rows from CHECKPOINT"`` of a migration record."""
    moved = rec.get("moved_rows") or {}
    return f"migrated {int(moved.get('total') or 0):,} rows from {rec.get('checkpoint', 'the checkpoint')}"


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
    @options("train")
    @handle_errors
    def train_cmd(ctx: typer.Context, dataset_arg, dataset, manifest, model, engine, workers, schedule, shuffle,
                  staleness, epochs, batch_size, lr, optimizer, embedding_dim, seed, hidden, checkpoint_dir,
                  resume, log_json, log_every, lookahead, on_demand, cache_rows, cache_bytes, table_location,
                  tier_dir, cache_policy, collective_timeout, read_only_replicas, comm_dtype, pipeline,
    ) -> None:
        """Train WDL / DCN / DeepFM from a placement manifest (HET-GMP primaries/secondaries, bounded staleness).

        One JSON line per epoch goes to stdout (a line to read when stdout is a terminal; every record
        in JSON to --log-json). Distributed:
        'torchrun --nproc-per-node N --no-python gmp train DATASET --manifest M' (one worker per process).
        """
        from gmp.api import run_train
        from gmp.launch import expect_join
        from gmp.specs import resolve_train
        from gmp.train.records import json_line

        if engine != "local":  # under torchrun: a refusal before the join is told to the peers (gmp.launch)
            expect_join()

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

            def say_settings() -> None:  # once the inputs are accepted: a refusal of them is the only line
                said = settings_line(spec)
                if said and os.environ.get("RANK", "0") == "0":
                    typer.echo(said, err=True)

            show = record_line if sys.stdout.isatty() else json_line  # a terminal reads lines, a pipe JSON
            records = run_train(spec, on_record=lambda rec: progress.echo(show(rec)), on_start=say_settings)
        if os.environ.get("RANK", "0") != "0":
            return  # under torchrun rank 0 speaks for all
        if records:
            typer.echo(summary_line(records, spec), err=True)
        elif resume:
            from gmp.train.checkpoint import read_checkpoint_header
            from gmp.wording import plural

            done = read_checkpoint_header(checkpoint_dir)["epoch"]
            typer.echo(f"nothing left to train: the checkpoint in {checkpoint_dir} already finished {done} "
                       f"{plural('epoch', done)}; pass --epochs {done + 1} or more to continue.", err=True)
        else:
            typer.echo("nothing trained: --epochs 0.", err=True)
