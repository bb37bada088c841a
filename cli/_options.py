"""One declaration per command-line option: its type, default, flag names and help.

A command lists its parameters by name and :func:`options` gives them their typer declarations from
this table, so a flag shared by several commands (``--cache-rows``, ``--batch-size``, ``--manifest``...)
is spelt once. The parameter names are those of the specs (:mod:`gmp.specs`) and of the library's
messages, which :mod:`cli._flags` maps back to these flags.

Where two commands give one flag another default or help (``gmp simulate --schedule`` defaults to
herald, Herald's paper setting), the command's entry in :data:`VARIANTS` says only what differs.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

#: ``gmp data synth``'s generator defaults; its --continue refuses any other value (the next day keeps
#: PREVIOUS's generator)
DEFAULT_PRESET = "criteo-kaggle"
DEFAULT_SCALE = 1.0


@dataclass(frozen=True)
class Opt:
    """A typer parameter: ``decls`` are its flags (an argument has none)."""

    type: Any
    default: Any
    decls: tuple[str, ...] = ()
    help: Optional[str] = None
    metavar: Optional[str] = None

    def info(self) -> Any:
        extra = {} if self.metavar is None else {"metavar": self.metavar}
        if not self.decls:
            return typer.Argument(self.default, help=self.help, **extra)
        return typer.Option(self.default, *self.decls, help=self.help, **extra)


def _opt(type_: Any, default: Any, *decls: str, help: Optional[str] = None, metavar: Optional[str] = None) -> Opt:
    return Opt(type_, default, decls, help, metavar)


OPTIONS: dict[str, Opt] = {
    # ------------------------------------------------------------------ the dataset and the placement
    "dataset_arg": _opt(Optional[Path], None, metavar="DATASET", help="Prepared dataset directory."),
    "dataset": _opt(Optional[Path], None, "--dataset", help="Deprecated alias of DATASET (kept for old scripts)."),
    "manifest": _opt(Optional[Path], None, "--manifest", help="Placement manifest ('gmp partition'); without it "
                                                              "all rows live on one worker."),
    "workers": _opt(Optional[int], None, "--workers", help="Must equal the manifest's workers."),
    "seed": _opt(int, 0, "--seed"),
    "as_json": _opt(bool, False, "--json", help="Print one JSON object."),
    # ------------------------------------------------------------------ the run (gmp train, gmp simulate)
    "model": _opt(str, "wdl", "--model", help="wdl | dcn | deepfm."),
    "engine": _opt(Optional[str], None, "--engine", help="local (N workers in this process) | distributed (one "
                                                         "worker per process of torchrun; the default under "
                                                         "torchrun)."),
    "schedule": _opt(str, "static", "--schedule", help="static | naive | herald."),
    "shuffle": _opt(str, "seeded", "--shuffle", help="seeded (SeedSequence([seed, epoch])) | none (dataset order)."),
    "staleness": _opt(str, "0", "--staleness", help="Bound s on secondary staleness; 0 = synchronous, 'inf' = "
                                                    "refresh only at epoch end."),
    "epochs": _opt(int, 1, "--epochs"),
    "batch_size": _opt(Optional[int], None, "--batch-size", help="Samples per worker per step (default: the "
                                                                 "manifest's plan, else 512)."),
    "lr": _opt(float, 0.01, "--lr", help="Learning rate (embeddings and dense layers)."),
    "optimizer": _opt(str, "adagrad", "--optimizer", help="sgd | adagrad."),
    "embedding_dim": _opt(Optional[int], None, "--embedding-dim", help="Row width (default: the manifest's plan, "
                                                                       "else 16)."),
    "hidden": _opt(Optional[str], None, "--hidden", help="Widths of the dense layers, e.g. 512,256,128 (default "
                                                         "128,64)."),
    "checkpoint_dir": _opt(Optional[Path], None, "--checkpoint-dir", help="Save a checkpoint here after every "
                                                                          "epoch."),
    "resume": _opt(bool, False, "--resume", help="Continue from --checkpoint-dir exactly where it stopped (or, for "
                                                 "the next day's --dataset made with --extend, move its rows to "
                                                 "--manifest)."),
    "log_json": _opt(Optional[Path], None, "--log-json", help="Append one JSON line per epoch here, after a "
                                                              "settings line per start (each line carries the "
                                                              "run's id; --resume continues the log's last run)."),
    "log_every": _opt(int, 0, "--log-every", help="Also log a JSON line every K steps (0 = off)."),
    "lookahead": _opt(Optional[int], None, "--lookahead",
                      help="Steps read ahead (default 0 = inline). --table-location host|disk: the prefetcher loads "
                           "each step's rows into the device cache in a background thread and keeps the window's "
                           "rows cached (cDLRM). --schedule herald: the scheduler runs this many batches ahead and "
                           "the next step's already-final rows are fetched early; also the window of --cache-policy "
                           "lookahead."),
    "on_demand": _opt(Optional[bool], None, "--on-demand/--no-on-demand",
                      help="--schedule herald (s = 0): keep a worker's updates of rows it is not primary of until "
                           "the communication plan, an eviction or the epoch end needs them (Herald's on-demand "
                           "synchronisation; default off)."),
    "cache_rows": _opt(Optional[int], None, "--cache-rows",
                       help="Rows of each worker's device cache. --table-location host|disk: the cache of its own "
                            "rows (default: the largest step of the run or 10% of its primaries, whichever is "
                            "larger); else --schedule herald (s = 0): rows cached beyond its primaries and "
                            "secondaries (default 0)."),
    "cache_bytes": _opt(Optional[int], None, "--cache-bytes",
                        help="--table-location host|disk: the device cache in bytes instead of --cache-rows (a row "
                             "= value + optimizer state)."),
    "table_location": _opt(str, "device", "--table-location",
                           help="device (one table on the worker's device) | host (primaries and their optimizer "
                                "state in host memory, a device cache) | disk (in a file under --tier-dir, a device "
                                "cache)."),
    "tier_dir": _opt(Optional[Path], None, "--tier-dir",
                     help="--table-location disk: directory of the tier files (default: the system's temporary "
                          "directory); removed at the end."),
    "cache_policy": _opt(Optional[str], None, "--cache-policy",
                         help="lookahead (default: evict first the rows the next --lookahead steps do not use, then "
                              "LRU; cDLRM) | lru. The one device cache's order: own rows and Herald's."),
    "collective_timeout": _opt(Optional[float], None, "--collective-timeout",
                               help="--engine distributed: seconds a collective waits for the slowest rank "
                                    "(default: GMP_COLLECTIVE_TIMEOUT, else 600)."),
    "read_only_replicas": _opt(Optional[bool], None, "--read-only-replicas/--writable-replicas",
                               help="--schedule herald: after a synchronous push only the primary is current "
                                    "(read-only) or the writer's copy too (writable, Herald's cache; s = 0)."),
    "comm_dtype": _opt(Optional[str], None, "--comm-dtype",
                       help="fp32 | fp16 | bf16: dtype of rows, gradients and the dense all-reduce on the wire "
                            "(default: the table's, float32; optimizer state stays float32; exact only at fp32)."),
    "pipeline": _opt(bool, False, "--pipeline/--no-pipeline",
                     help="s = 0, static/naive schedule: overlap the next step's id exchange and pulls with this "
                          "step's compute, and the gradient push with the dense all-reduce (the same model bit for "
                          "bit)."),
    "parameter_server": _opt(bool, False, "--parameter-server", help="Herald's setting: all rows on a separate PS "
                                                                     "(the manifest's primaries are ignored)."),
    "min_frequency": _opt(float, 0.0, "--min-frequency", help="Count only rows used by more than this fraction of "
                                                              "the training samples (Herald caches frequency > "
                                                              "1e-5)."),
    # ------------------------------------------------------------------ the outputs
    "out": _opt(Path, ..., "--out", "-o", help="Output directory (a prepared dataset)."),
    "overwrite": _opt(bool, False, "--overwrite", help="Replace an existing --out directory."),
}


def _variant(name: str, **changes: Any) -> Opt:
    return replace(OPTIONS[name], **changes)


#: what a command declares otherwise than :data:`OPTIONS` (its own options, and shared flags it words its own way)
VARIANTS: dict[str, dict[str, Opt]] = {
    "simulate": {
        "manifest": _variant("manifest", help="Placement manifest (default: random placement over --workers)."),
        "workers": _variant("workers", help="Workers (must match the manifest)."),
        "schedule": _variant("schedule", default="herald", help="static (gmp train's default) | naive | herald: "
                                                                "every schedule of gmp train."),
        "shuffle": _variant("shuffle", help="seeded (SeedSequence([seed, epoch])) | none (dataset order), as gmp "
                                            "train --shuffle."),
        "on_demand": _variant("on_demand", help="On-demand synchronisation (default: on for herald, off for naive "
                                                "and static; Herald's paper setting, unlike gmp train)."),
        "cache_rows": _variant("cache_rows", help="Cached rows per worker (default: 10% of the rows the training "
                                                  "samples use)."),
        "cache_policy": _variant("cache_policy", help="lru (default) | lookahead"),
        "lookahead": _variant("lookahead", help="Look-ahead window in global batches (default 0)."),
        "batch_size": _variant("batch_size", help="Samples per worker per iteration (default: the manifest's plan, "
                                                  "else 512)."),
        "embedding_dim": _variant("embedding_dim", help="Row width for the byte counts (float32; default: the "
                                                        "manifest's plan, else 16)."),
        "read_only_replicas": _variant("read_only_replicas",
                                       help="Read-only: the trainer's store, non-primary copies are never written "
                                            "locally (with --cache-rows 0 --no-on-demand it predicts gmp train's "
                                            "counts); writable: Herald's cache (default here; gmp train's default "
                                            "is read-only)."),
        "seed": _variant("seed", help="Seed of the sample order (and of the random placement)."),
    },
    "data synth": {
        "preset": _opt(str, DEFAULT_PRESET, "--preset",
                       help="Field layout and model: 'criteo-kaggle' (26 Criteo Kaggle cardinalities, latent-entity "
                            "model fitted to real Criteo rows and Criteo's vocabulary), 'criteo-kaggle-entity' (its "
                            "issue-13 version, 1.36M values at full size), 'criteo-kaggle-independent' (the same "
                            "fields drawn independently, the generator before issue 13) or 'tiny' (8 independent "
                            "fields, for demos)."),
        "like": _opt(Optional[Path], None, "--like", metavar="DATASET",
                     help="Fit the latent-entity model to this prepared dataset's stats (cardinalities, skew, mutual "
                          "information) instead of a preset."),
        "samples": _opt(Optional[int], None, "--samples", "-n",
                        help="Number of samples (default: 1,000,000 for criteo-kaggle, 20,000 for tiny, the "
                             "dataset's count with --like)."),
        "scale": _opt(float, DEFAULT_SCALE, "--scale",
                      help="Multiply every field's cardinality and entity count (a field keeps at least min(its "
                           "values, 100))."),
        "seed": _variant("seed", help="Random seed; same seed, same data (any chunk size)."),
        "skew": _opt(Optional[float], None, "--skew",
                     help="Zipf exponent of value popularity (default 1.1; criteo-kaggle: fitted per field, which "
                          "this replaces): higher = more accesses to the top 1% of embeddings, fewer distinct "
                          "values."),
        "tail": _opt(Optional[float], None, "--tail",
                     help="Share of draws spread uniformly over a field's values or a type's entities (default 0.3; "
                          "criteo-kaggle: fitted per field, which this replaces): higher = more distinct values."),
        "communities": _opt(Optional[int], None, "--communities",
                            help="Number of latent communities K (default 64); independent presets: each owns a 1/K "
                                 "slice of every local field."),
        "locality": _opt(Optional[float], None, "--locality",
                         help="Independent presets: probability in [0, 1] that a local field's value comes from the "
                              "sample's community slice (default 0.7)."),
        "local_threshold": _opt(Optional[int], None, "--local-threshold",
                                help="Independent presets: a field is local when its unscaled preset cardinality is "
                                     ">= this (default: 10,000 for criteo-kaggle-independent, 1,000 for tiny)."),
        "entity_skew": _opt(Optional[float], None, "--entity-skew",
                            help="Entity model: Zipf exponent of entity popularity (criteo-kaggle: 1.1)."),
        "fidelity": _opt(Optional[float], None, "--fidelity",
                         help="Entity model: probability in [0, 1] that a field shows its entity's attribute (0 = "
                              "independent fields)."),
        "coherence": _opt(Optional[float], None, "--coherence",
                          help="Entity model: probability in [0, 1] that an attribute is shared by the entity's "
                               "whole segment."),
        "fresh": _opt(Optional[float], None, "--fresh",
                      help="Entity model: probability in [0, 1] that an id-like field (at least as many values as "
                           "its entities) shows a uniformly drawn rarely-seen value instead of its entity (default "
                           "0; criteo-kaggle has one fitted per field: use criteo-kaggle-entity)."),
        "min_count": _opt(int, 1, "--min-count",
                          help="As gmp data import's: values seen fewer times share their field's rare id (1 keeps "
                               "every value; > 1 costs a first counting pass)."),
        "test_fraction": _opt(float, 0.1, "--test-fraction", help="The last fraction of samples is the test split."),
        "chunk_samples": _opt(int, 1 << 18, "--chunk-samples",
                              help="Samples generated per chunk (bounds memory; does not change the data)."),
        "continue_from": _opt(Optional[Path], None, "--continue", metavar="PREVIOUS",
                              help="Make the next day of this synthetic dataset: its ids stay, new values get new "
                                   "ids after them, community popularity drifts (gmp.datasets.synth_continue). Uses "
                                   "--samples, --seed (0: PREVIOUS's), --test-fraction, --growth and --drift; the "
                                   "other knobs come from PREVIOUS."),
        "growth": _opt(Optional[float], None, "--growth",
                       help="With --continue: share of new values per field per day (default 0.02)."),
        "drift": _opt(Optional[float], None, "--drift",
                      help="With --continue: standard deviation of the daily random-walk step of each community's "
                           "log-weight (default 0.5)."),
        "as_json": _variant("as_json", help="Print a JSON summary instead of one line for people."),
    },
}


def declaration(command: str, name: str) -> Opt:
    """The declaration of parameter ``name`` of ``command`` (``"simulate"``, ``"data synth"``...)."""
    own = VARIANTS.get(command, {})
    if name in own:
        return own[name]
    if name in OPTIONS:
        return OPTIONS[name]
    raise KeyError(f"cli/_options.py declares no option {name!r} (for {command!r}): add it to OPTIONS or "
                   f"VARIANTS[{command!r}].")


def options(command: str) -> Callable[[F], F]:
    """Give the decorated command's parameters their declarations from this table, in the order the function
    lists them; a parameter annotated in the function itself (``ctx: typer.Context``) stays as it is."""
    def decorate(fn: F) -> F:
        params = []
        for p in inspect.signature(fn).parameters.values():
            if p.annotation is not inspect.Parameter.empty:
                params.append(p)
                continue
            d = declaration(command, p.name)
            params.append(p.replace(default=d.info(), annotation=d.type))
        fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # typer reads this signature
        return fn

    return decorate
