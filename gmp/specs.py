"""One front door: each command's settings resolved once into a frozen, validated spec.

``gmp train``/``simulate``/``export`` and their Python verbs (:func:`gmp.train_model`,
:func:`gmp.simulate_epoch`, :func:`gmp.export_torchrec`) pass what the person gave to one
``resolve_*`` function here, which adds what is on disk (the dataset, the manifest's plan, a
checkpoint) and the defaults, checks every rule between settings once, and returns a spec that
says where each value came from::

    what the person gave (CLI flags or keywords)
        + the manifest's plan (batch size, embedding dim) + the checkpoint (resume point)
        + the environment (torchrun's WORLD_SIZE) + defaults
        -> resolve_train(...)  -> TrainSpec    -> gmp.api.run_train(spec)
        -> resolve_simulate(...) -> SimulateSpec -> gmp.api.run_simulate(spec)
        -> resolve_export(...) -> ExportSpec   -> gmp.export_torchrec
        -> resolve_import(...) -> ImportSpec   -> gmp.api.run_import (gmp data import, gmp.import_dataset)

So the same request gives the same run from the command line and from Python. Errors name the
parameter (``The 'cache_rows' parameter ...``); the CLI words them with its flags
(``cli/_flags.py``).

Sources (``spec.sources[name]``): :data:`USER`, :data:`PLAN` (the manifest's plan),
:data:`CHECKPOINT`, :data:`TORCHRUN` (the environment), :data:`DEFAULT`, :data:`RECOGNISED` (the
input's recognition, imports only).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .constants import DEFAULT_BATCH_SIZE, DEFAULT_EMBEDDING_DIM
from .errors import GmpError, TrainingError
from .params import param_error
from .wording import plural

USER = "user"
PLAN = "manifest plan"
CHECKPOINT = "checkpoint"
TORCHRUN = "torchrun"
DEFAULT = "default"


# ----------------------------------------------------------------------------------- the plan
def resolve_training_plan(manifest: Any, *, dataset: Any = None,
                          **given: int | None) -> tuple[dict[str, int], dict[str, str], str | None]:
    """``given`` (``batch_size``, ``embedding_dim``; None: not given) with each None replaced by the
    manifest's plan, else the default; returns ``(values, sources, warning)``, the warning naming
    every given value that differs from the plan (None when none does). ``manifest``: a path, an
    opened :class:`gmp.manifest.Manifest` or None; ``dataset`` (opened): refused where the manifest
    was not made for it."""
    from .manifest import Manifest, TrainingPlan, read_plan

    if manifest is None:
        plan = TrainingPlan(None, None, None)
    elif isinstance(manifest, Manifest):
        if dataset is not None:
            manifest.check_dataset(dataset)
        plan = manifest.plan
    else:
        plan = read_plan(manifest, dataset=dataset)
    planned, warning = plan.resolve(**given)
    fallback = {"batch_size": DEFAULT_BATCH_SIZE, "embedding_dim": DEFAULT_EMBEDDING_DIM}
    values, sources = {}, {}
    for name, value in planned.items():
        values[name] = fallback[name] if value is None else int(value)
        sources[name] = USER if given[name] is not None else DEFAULT if value is None else PLAN
    return values, sources, warning


def describe_sources(values: Mapping[str, Any], sources: Mapping[str, str], *, skip: Sequence[str] = ()) -> str:
    """``"batch_size 256 (manifest plan), cache_rows 343 (default: ...)"``: the values not given by
    the person, with where each came from (empty when every one was given)."""
    return ", ".join(f"{k} {_show(values[k])} ({src})" for k, src in sources.items()
                     if src != USER and k in values and k not in skip)


def _show(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return str(value)


# ----------------------------------------------------------------------------------- train
#: keywords of :func:`resolve_train` for the one device cache and the tiers (``gmp train`` flags)
TIER_KEYS = ("table_location", "cache_bytes", "tier_dir", "prefetch_depth")
#: keywords shared by the tiers and Herald (one device cache, one look-ahead window)
SHARED_KEYS = ("cache_rows", "lookahead", "cache_policy")
HERALD_KEYS = ("on_demand", "read_only_replicas")
ENGINES = ("local", "distributed")


def torchrun_world(environ: Mapping[str, str] | None = None) -> int | None:
    """The process count torchrun launched (``WORLD_SIZE``), None outside torchrun."""
    env = os.environ if environ is None else environ
    value = env.get("WORLD_SIZE")
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class TrainSpec:
    """Everything one training run needs, resolved (:func:`resolve_train`; run by :func:`gmp.api.run_train`).

    ``sources[name]`` says where each setting came from; ``warnings`` are lines to show the person
    (a setting that differs from the manifest's plan); ``resume_from`` is the checkpoint's
    ``{"epoch", "step", "dataset_sha256"}`` a resume starts from (None otherwise, or no checkpoint yet:
    training then refuses it); ``cache`` is the default device cache's derivation
    (:class:`gmp.train.tiers.sizing.CacheSize`, None when the cache was given or the table is on the
    device)."""

    dataset: Path
    manifest: Path | None
    config: Any  # gmp.train.TrainConfig (torch is imported only when training)
    engine: str
    workers: int | None = None
    checkpoint_dir: Path | None = None
    resume: bool = False
    log_json: Path | None = None
    collective_timeout: float | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    resume_from: Mapping[str, Any] | None = None
    cache: Any = None
    world_size: int | None = None

    def values(self) -> dict[str, Any]:
        """Every named setting's value (the keys of :attr:`sources`)."""
        c = self.config
        tiers = c.tiers
        out = {f.name: getattr(c, f.name) for f in dataclasses.fields(c) if f.name not in ("herald", "tiers")}
        out.update(engine=self.engine, workers=self.workers,
                   table_location=tiers.table_location if tiers is not None else "device",
                   cache_rows=tiers.cache_rows if tiers is not None else None)
        return out

    def described(self) -> str:
        """What the person did not set, and where it came from: one line for a summary."""
        return describe_sources(self.values(), self.sources)

    def to_json(self) -> dict[str, Any]:
        """The spec as a JSON object: the settings (``config``) and their ``sources``."""
        return {"dataset": str(self.dataset), "manifest": None if self.manifest is None else str(self.manifest),
                "engine": self.engine, "workers": self.workers, "config": self.config.to_json(),
                "sources": dict(self.sources), "resume_from": None if self.resume_from is None else
                dict(self.resume_from)}


def _parse_staleness(value: Any) -> float:
    if isinstance(value, str):
        t = value.strip().lower()
        if t in ("inf", "infinity", "none"):
            return math.inf
        try:
            return float(t)
        except ValueError:
            raise param_error(TrainingError, "staleness", f"The 'staleness' parameter must be a number >= 0 or "
                                                           f"'inf', got {value!r}.") from None
    return value


def _parse_hidden(value: Any) -> Any:
    """``"512,256,128"`` -> ``(512, 256, 128)``; a non-empty sequence passes through (TrainConfig checks its
    widths); no layer at all (``""``, ``()``, a bare number) is refused, from the command line and Python alike."""
    if value is None:
        return value
    if not isinstance(value, str):
        try:
            empty = len(value) == 0
        except TypeError:  # a bare number: not a sequence of widths
            empty = True
        if empty:
            raise param_error(TrainingError, "hidden", f"The 'hidden' parameter must be comma-separated layer "
                                                        f"widths (e.g. 512,256,128) or a sequence of them, got "
                                                        f"{value!r}.")
        return value
    parts = [p.strip() for p in value.split(",") if p.strip()]
    try:
        out = tuple(int(p) for p in parts)
    except ValueError:
        out = ()
    if not out:
        raise param_error(TrainingError, "hidden", f"The 'hidden' parameter must be comma-separated layer widths "
                                                    f"(e.g. 512,256,128), got {value!r}.")
    return out


def resolve_train(dataset: Any, manifest: Any = None, *, engine: str | None = None, workers: int | None = None,
                  checkpoint_dir: str | os.PathLike | None = None, resume: bool = False,
                  log_json: str | os.PathLike | None = None, collective_timeout: float | None = None,
                  environ: Mapping[str, str] | None = None, **settings: Any) -> TrainSpec:
    """The one resolution of a training request (``gmp train`` and :func:`gmp.train_model`).

    ``settings`` are :class:`gmp.train.TrainConfig` fields (``model``, ``epochs``, ``batch_size``,
    ``embedding_dim``, ``staleness`` (a number or ``"inf"``), ``hidden`` (a sequence or
    ``"512,256,128"``), ...) and the device cache's keywords as ``gmp train`` has them:
    ``table_location``, ``cache_rows`` (the one device cache: with a tiered table and Herald, Herald's
    copies keep half), ``cache_bytes``, ``lookahead``, ``cache_policy``, ``tier_dir``, ``on_demand``,
    ``read_only_replicas``. A ``tiers=TierOptions(...)`` object may replace the tier keywords; then
    ``cache_rows``/``lookahead``/``cache_policy`` are Herald's alone (``herald=HeraldOptions(...)``
    replaces those).

    Defaults: ``batch_size``/``embedding_dim`` the manifest's plan, else 512/16; ``engine``
    ``distributed`` under torchrun (``WORLD_SIZE`` set), else ``local``; a tiered table's device
    cache the largest step of the run or 10% of the largest worker's primaries, whichever is
    larger (:func:`gmp.train.tiers.sizing.default_cache_rows`).
    """
    from .params import check_choice
    from .train.config import TrainConfig
    from .train.herald import HeraldOptions
    from .train.tiers import DEFAULT_CACHE_PERCENT, TierOptions, split_cache_rows

    E = TrainingError
    settings = {k: v for k, v in settings.items() if v is not None}
    config_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    takes = config_fields | set(TIER_KEYS) | set(SHARED_KEYS) | set(HERALD_KEYS)
    unknown = sorted(set(settings) - takes)
    if unknown:
        raise E(f"train: unknown option(s) {', '.join(unknown)}; it takes: {', '.join(sorted(takes))}.")
    sources: dict[str, str] = {}
    warnings: list[str] = []

    # the manifest's plan; a manifest made for another dataset is refused here, before the run says its settings
    opened = None
    if manifest is not None:
        from .datasets.format import PreparedDataset, load_dataset

        opened = dataset if isinstance(dataset, PreparedDataset) else load_dataset(dataset, verify=False)
    plan, plan_sources, warning = resolve_training_plan(manifest, dataset=opened,
                                                        batch_size=settings.pop("batch_size", None),
                                                        embedding_dim=settings.pop("embedding_dim", None))
    sources.update(plan_sources)
    if warning:
        warnings.append(warning)

    # the engine: under torchrun every process is one worker of one run, never a whole local run each
    world = torchrun_world(environ)
    if engine is None:
        engine, sources["engine"] = ("distributed", TORCHRUN) if world is not None else ("local", DEFAULT)
    else:
        sources["engine"] = USER
    check_choice("engine", engine, ENGINES, error=E)
    if engine == "local" and world is not None and world > 1:
        raise param_error(E, "engine", f"The 'engine' parameter is 'local' under torchrun (WORLD_SIZE={world}): "
                                        f"each of the {world} processes would train the whole run; use "
                                        f"engine='distributed' (the default under torchrun) or run without torchrun.")
    sources["workers"] = USER if workers is not None else DEFAULT
    if collective_timeout is not None:
        from .comm.distributed import collective_timeout as check_timeout  # the one rule for its value

        check_timeout(collective_timeout)  # a bad value is named as such, on either engine
        if engine == "local":  # as the other settings a run cannot use: refused, not ignored
            how = "the default outside torchrun" if sources["engine"] == DEFAULT else "given"
            raise param_error(E, "collective_timeout",
                               f"The 'collective_timeout' parameter bounds the collectives of the distributed "
                               f"engine (one worker per process under torchrun); this run is on engine 'local' "
                               f"({how}), which has none: drop collective_timeout or run under torchrun with "
                               f"engine='distributed'.")

    # the device cache: one per worker, for its own tiered rows and Herald's copies of remote rows
    schedule = settings.get("schedule", "static")
    herald_on = schedule == "herald"
    if "staleness" in settings:
        settings["staleness"] = _parse_staleness(settings["staleness"])
    tiers_obj, herald_obj = settings.pop("tiers", None), settings.pop("herald", None)
    cache_rows, lookahead = settings.pop("cache_rows", None), settings.pop("lookahead", None)
    cache_policy = settings.pop("cache_policy", None)
    herald_given = {k: settings.pop(k) for k in HERALD_KEYS if k in settings}
    tier_given = {k: settings.pop(k) for k in TIER_KEYS if k in settings}
    split = False  # the one cache size given is shared by the tiered rows and Herald's copies
    if tiers_obj is not None:
        if tier_given:
            raise param_error(E, sorted(tier_given)[0], f"The '{sorted(tier_given)[0]}' parameter cannot be "
                                                         f"combined with tiers (a TierOptions); give one of them.")
        tiers = tiers_obj
        herald_given.update(cache_rows=cache_rows, lookahead=lookahead, cache_policy=cache_policy)
        sources["table_location"] = USER
    else:
        location = tier_given.get("table_location", "device")
        tiered = location != "device"
        sources["table_location"] = USER if "table_location" in tier_given else DEFAULT
        for name, value in (("cache_rows", cache_rows), ("lookahead", lookahead), ("cache_policy", cache_policy)):
            if value and not tiered and not herald_on:
                raise param_error(E, name, f"The '{name}' parameter drives the device cache of table_location="
                                            f"host|disk (the worker's own rows) or of schedule=herald (remote "
                                            f"rows), got table_location=device schedule={schedule}; add one of "
                                            f"them or drop `{name}`.")
        cache_bytes = tier_given.get("cache_bytes")
        if cache_bytes is not None and cache_bytes < 1:  # not "the default": that is leaving it out
            raise param_error(E, "cache_bytes", f"The 'cache_bytes' parameter must hold at least one row of the "
                                                 f"tiered table's device cache, got {cache_bytes}; leave it out "
                                                 f"for the default.")
        whole = herald_on and herald_obj is not None  # Herald's replica model given whole, its cache included
        if whole and tiered:  # the one window and eviction order of the device cache are then the object's
            given = next((k for k, v in (("lookahead", lookahead), ("cache_policy", cache_policy)) if v is not None),
                         None)
            if given is not None:
                raise param_error(E, given, f"The '{given}' parameter cannot be combined with herald (a "
                                            f"HeraldOptions), whose {given} the tiered table's cache takes too; "
                                            f"set it in the HeraldOptions.")
            lookahead, cache_policy = herald_obj.lookahead, herald_obj.cache_policy
        # Herald keeps copies at s = 0 only (at s > 0 it only assigns samples): only then is a size shared
        split = tiered and herald_on and not whole and settings.get("staleness", 0.0) == 0
        own, remote = split_cache_rows(cache_rows, tiered=tiered, herald=split)
        policy = cache_policy or "lookahead"
        tiers = TierOptions(table_location=location, cache_rows=own, cache_bytes=cache_bytes or 0,
                            lookahead=(lookahead or 0) if tiered else 0, cache_policy=policy,
                            tier_dir=None if tier_given.get("tier_dir") is None else str(tier_given["tier_dir"]),
                            **({"prefetch_depth": tier_given["prefetch_depth"]}
                               if "prefetch_depth" in tier_given else {}))
        if not whole or not tiered:
            herald_given.update(cache_rows=remote, lookahead=lookahead if herald_on else None,
                                cache_policy=cache_policy if herald_on else None)
    sources["cache_rows"] = USER if cache_rows is not None or tiers.cache_rows or tiers.cache_bytes else DEFAULT
    if herald_obj is not None:
        if any(v is not None for v in herald_given.values()):
            name = next(k for k, v in herald_given.items() if v is not None)
            raise param_error(E, name, f"The '{name}' parameter cannot be combined with herald (a HeraldOptions); "
                                        f"give one of them.")
        herald = herald_obj
    elif any(v is not None for v in herald_given.values()) or tiers_obj is None:
        herald = HeraldOptions.for_trainer(**herald_given)
    else:
        herald = None
    for name in config_fields:
        if name not in sources:
            sources[name] = USER if name in settings else DEFAULT
    if "hidden" in settings:
        settings["hidden"] = _parse_hidden(settings["hidden"])
    config = TrainConfig(**settings, batch_size=plan["batch_size"], embedding_dim=plan["embedding_dim"],
                         herald=herald, tiers=tiers)

    # what is on disk: the checkpoint a resume starts from, the steps the device cache must hold
    ds_path = Path(getattr(dataset, "path", dataset))
    man_path = None if manifest is None else Path(getattr(manifest, "path", manifest))
    resume_from = None
    kept_share = None  # Herald's share of the device cache in the checkpoint's run
    if resume and checkpoint_dir is not None:
        from .train.checkpoint import find_checkpoint

        found = find_checkpoint(checkpoint_dir, quiet=True)
        if found is not None:
            head = found[1]
            resume_from = {"epoch": int(head["epoch"]), "step": int(head["step"]),
                           "dataset_sha256": head.get("dataset_sha256")}
            sources["resume_from"] = CHECKPOINT
            then = (head.get("config") or {}).get("herald") or {}
            if isinstance(then.get("cache_rows"), int):
                kept_share = then["cache_rows"]
    if split and (config.tiers.cache_rows or config.tiers.cache_bytes):
        config = _share_device_cache(config, cache_rows, kept_share)
    cache = None
    if config.tiers is not None:
        need = _default_cache(ds_path, man_path, workers, config, resume_from)
        if not config.tiers.cache_rows and not config.tiers.cache_bytes:
            cache = need
            config = dataclasses.replace(config, tiers=dataclasses.replace(config.tiers, cache_rows=cache.rows))
            sources["cache_rows"] = (f"{DEFAULT}: the largest step of the run" if cache.rows == cache.largest_step
                                     else f"{DEFAULT}: {DEFAULT_CACHE_PERCENT}% of the largest worker's primaries")
        else:
            _check_cache_holds_the_run(config, need.largest_step, split=split, kept_share=kept_share)
    return TrainSpec(dataset=ds_path, manifest=man_path, config=config, engine=engine, workers=workers,
                     checkpoint_dir=None if checkpoint_dir is None else Path(checkpoint_dir), resume=bool(resume),
                     log_json=None if log_json is None else Path(log_json), collective_timeout=collective_timeout,
                     sources=sources, warnings=tuple(warnings), resume_from=resume_from, cache=cache,
                     world_size=world)


def _share_device_cache(config: Any, cache_rows: int | None, kept_share: int | None) -> Any:
    """``config`` with the one device cache size given (``cache_rows``, else the tier's ``cache_bytes``) shared
    between the tiered rows and Herald's copies: Herald keeps half of its rows (``cache_rows // 2``), or on a
    resume the checkpoint's share (``kept_share``: it must match, and more rows then all go to the tiered rows);
    the tiered rows get the rest (:func:`gmp.train.tiers.split_cache_rows`)."""
    from .train.tiers import split_cache_rows

    tiers, row_bytes = config.tiers, config.row_bytes
    total = int(cache_rows) if cache_rows else tiers.cache_bytes // row_bytes
    share = split_cache_rows(total, tiered=True, herald=True)[1] if kept_share is None else kept_share
    name = "cache_rows" if cache_rows else "cache_bytes"
    if total - share < 1:
        size = total if cache_rows else f"{tiers.cache_bytes} ({total} rows)"
        raise param_error(TrainingError, name, f"The '{name}' parameter must leave the tiered rows at least one "
                                               f"row beside the {share} of Herald's copies the checkpoint was made "
                                               f"with, got {size}; raise {name}.")
    own = ({"cache_rows": total - share} if cache_rows else {"cache_bytes": tiers.cache_bytes - share * row_bytes})
    return dataclasses.replace(config, tiers=dataclasses.replace(tiers, **own),
                               herald=dataclasses.replace(config.herald_options(), cache_rows=share))


def _check_cache_holds_the_run(config: Any, largest_step: int, *, split: bool, kept_share: int | None) -> None:
    """Refuse a tiered table's cache (given in rows or bytes) that cannot hold the rows of the largest step of
    the run (every epoch this run trains), naming the size that can, in the setting the person gave: with
    ``split`` the size is shared with Herald's copies (:func:`_share_device_cache`)."""
    from .train.tiers import cache_rows_for

    tiers, row_bytes = config.tiers, config.row_bytes
    own = tiers.cache_rows or tiers.cache_bytes // row_bytes
    if own >= largest_step:
        return
    if not split:
        rows, why = largest_step, ""
    elif kept_share is None:  # Herald keeps half
        rows, why = cache_rows_for(largest_step, herald=True), " (Herald's copies keep half of it)"
    else:
        rows, why = largest_step + kept_share, f" (Herald's copies keep the checkpoint's {kept_share} rows of it)"
    name = "cache_bytes" if tiers.cache_bytes else "cache_rows"
    need = rows * row_bytes if tiers.cache_bytes else rows
    raise param_error(TrainingError, name, f"The '{name}' parameter leaves each worker's cache {own} rows for its "
                                           f"own tiered rows, but the largest step of the run uses {largest_step}; "
                                           f"raise {name} to at least {need}{why}.")


def _default_cache(dataset: Path, manifest: Path | None, workers: int | None, config: Any,
                   resume_from: Mapping[str, Any] | None):
    """The device cache a tiered table gets by default (:func:`gmp.train.tiers.sizing.default_cache_rows`), over
    the epochs this run will train (a resume of this dataset's checkpoint: from its epoch on)."""
    from .datasets.format import load_dataset
    from .train.run import open_placement
    from .train.tiers.sizing import default_cache_rows

    # not verified here: the run that follows recomputes the content hash once (sizing is a read of ids)
    ds = load_dataset(dataset, verify=False)
    placement = open_placement(ds, manifest, workers)[0]
    start = 0
    if resume_from is not None and resume_from.get("dataset_sha256") == ds.sha256:
        start = min(int(resume_from["epoch"]), config.epochs)
    return default_cache_rows(ds.indptr, ds.indices, placement, num_train=ds.num_train, schedule=config.schedule,
                              batch_size=config.batch_size, seed=config.seed, shuffle=config.shuffle,
                              epochs=range(start, config.epochs))


# ----------------------------------------------------------------------------------- simulate
#: the HeraldOptions fields :func:`resolve_simulate` takes
SIMULATE_HERALD_KEYS = ("on_demand", "cache_rows", "cache_policy", "lookahead", "read_only_replicas")


@dataclass(frozen=True)
class SimulateSpec:
    """One simulated epoch, resolved (:func:`resolve_simulate`; run by :func:`gmp.api.run_simulate`).

    ``differs_from_train`` holds ``(setting, here, gmp train's)`` for each default of ``gmp simulate``
    (Herald's paper) that ``gmp train`` does not share and the person did not set."""

    dataset: Any  # the opened PreparedDataset
    placement: Any
    schedule: str
    options: Any  # HeraldOptions
    batch_size: int
    embedding_dim: int
    seed: int = 0
    shuffle: str = "seeded"
    epoch: int = 0
    parameter_server: bool = False
    min_frequency: float = 0.0
    order: Any = None
    num_active_rows: int = 0
    herald_given: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    differs_from_train: tuple[tuple[str, str, str], ...] = ()

    def with_schedule(self, schedule: str) -> "SimulateSpec":
        """The same request under another schedule with that schedule's defaults (the person's
        settings kept): the baseline ``gmp simulate`` prints beside the chosen schedule."""
        from .simulate import simulator_options

        return dataclasses.replace(self, schedule=schedule,
                                   options=simulator_options(schedule, self.num_active_rows, **self.herald_given))


def resolve_simulate(dataset: Any, manifest: Any = None, *, workers: int | None = None,
                     batch_size: int | None = None, embedding_dim: int | None = None, seed: int = 0,
                     schedule: str | None = None, shuffle: str = "seeded", epoch: int = 0,
                     parameter_server: bool = False, min_frequency: float = 0.0, order: Any = None,
                     **herald: Any) -> SimulateSpec:
    """The one resolution of a simulation request (``gmp simulate`` and :func:`gmp.simulate_epoch`).

    Without ``manifest`` the rows are placed at random over ``workers``. ``batch_size`` and
    ``embedding_dim`` default to the manifest's plan (else 512 and 16); ``herald`` are
    :class:`gmp.train.herald.HeraldOptions` fields over :meth:`HeraldOptions.for_simulator`'s
    defaults (Herald's paper; ``schedule`` default ``herald``).
    """
    from .datasets.format import PreparedDataset, load_dataset
    from .params import check_int
    from .seeds import check_seed
    from .simulate import SCHEDULES, active_rows, check_simulated_options, simulator_options
    from .train.herald import HeraldOptions
    from .params import check_choice

    E = TrainingError
    unknown = sorted(set(herald) - set(SIMULATE_HERALD_KEYS))
    if unknown:
        takes = {"workers", "batch_size", "embedding_dim", "seed", "schedule", "shuffle", "epoch",
                 "parameter_server", "min_frequency", "order", *SIMULATE_HERALD_KEYS}
        raise E(f"simulate: unknown option(s) {', '.join(unknown)}; it takes: {', '.join(sorted(takes))}.")
    herald = {k: v for k, v in herald.items() if v is not None}
    check_seed(seed)  # before the random placement, which numpy would refuse in a traceback
    sources = {"schedule": USER if schedule is not None else DEFAULT}
    schedule = "herald" if schedule is None else schedule
    check_choice("schedule", schedule, SCHEDULES, error=E)
    plan, plan_sources, warning = resolve_training_plan(manifest, batch_size=batch_size, embedding_dim=embedding_dim)
    sources.update(plan_sources)
    ds = dataset if isinstance(dataset, PreparedDataset) else load_dataset(dataset)
    if manifest is None:
        from .graph import build_graph
        from .partition import run_partitioner
        from .topology import homogeneous
        from .train.herald.engine import check_num_workers

        if workers is None:
            raise param_error(E, "workers", "The 'workers' parameter is required without a manifest (rows are "
                                             "then placed at random); pass workers=N or a manifest.")
        check_int("workers", workers, minimum=1, error=E)
        check_num_workers(workers)  # before the random placement (100,000 workers ran out of memory there)
        placement = run_partitioner("random", build_graph(ds), homogeneous(workers), seed=seed)
    else:
        from .manifest import Manifest, load_manifest

        m = manifest if isinstance(manifest, Manifest) else load_manifest(manifest, dataset=ds)
        if isinstance(manifest, Manifest):
            m.check_dataset(ds)
        placement = m.placement
        if workers is not None and workers != placement.num_workers:
            raise param_error(E, "workers", f"workers={workers} does not match the manifest "
                                             f"{m.path}, which places rows on {placement.num_workers} workers; "
                                             f"drop workers or pass another manifest.")
    active = active_rows(ds.indptr, ds.indices, ds.num_train)
    options = simulator_options(schedule, active, **herald)
    check_simulated_options(options)  # a lookahead the replay would not read
    for k in SIMULATE_HERALD_KEYS:
        sources[k] = USER if k in herald else DEFAULT
    # the settings whose defaults here (Herald's paper) are not gmp train's
    train = HeraldOptions.for_trainer()
    differs = []
    if sources["schedule"] == DEFAULT and schedule != "static":
        differs.append(("schedule", schedule, "static"))
    for k in SIMULATE_HERALD_KEYS:
        here, there = getattr(options, k), getattr(train, k)
        if k not in herald and here != there:
            differs.append((k, _show(here), _show(there)))
    return SimulateSpec(dataset=ds, placement=placement, schedule=schedule, options=options,
                        batch_size=plan["batch_size"], embedding_dim=plan["embedding_dim"], seed=seed,
                        shuffle=shuffle, epoch=epoch, parameter_server=parameter_server, min_frequency=min_frequency,
                        order=order, num_active_rows=active, herald_given=herald, sources=sources,
                        warnings=(warning,) if warning else (), differs_from_train=tuple(differs))


# ----------------------------------------------------------------------------------- export
@dataclass(frozen=True)
class ExportSpec:
    """``gmp export torchrec``'s row width and batch (:func:`resolve_export`): None where the export
    takes the manifest's own recorded value."""

    batch_size: int | None
    embedding_dim: int | None
    sources: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def resolve_export(manifest: Any, *, batch_size: int | None = None, embedding_dim: int | None = None) -> ExportSpec:
    """The export's batch and width: the person's, else the manifest's plan (else what the export
    reads from the manifest), with the plan's warning when a given value differs from it. A given
    value that is not an int >= 1 is left to the export's own error."""
    from .manifest import Manifest, read_plan

    plan = manifest.plan if isinstance(manifest, Manifest) else read_plan(manifest)
    given = {k: v for k, v in (("batch_size", batch_size), ("embedding_dim", embedding_dim))}
    checked = {k: v for k, v in given.items() if isinstance(v, int) and v >= 1}
    _, warning = plan.resolve(**checked)
    values, sources = {}, {}
    for k, v in given.items():
        planned = getattr(plan, k)
        values[k] = v if v is not None else planned
        sources[k] = USER if v is not None else PLAN if planned is not None else DEFAULT
    from .export.torchrec import check_settings

    check_settings(**values)  # a refusal comes before the plan's warning, which the caller prints
    return ExportSpec(values["batch_size"], values["embedding_dim"], sources, (warning,) if warning else ())


# ----------------------------------------------------------------------------------- partition
#: what :func:`resolve_partition` runs: a partitioner from scratch in this process, the distributed hybrid
#: across torchrun's processes, the hybrid streamed out of core in one process, new data on an old placement
PARTITION_MODES = ("scratch", "distributed", "chunked", "incremental")
#: the options of the incremental placement that ``from_manifest`` takes (the rest are refused)
_NOT_INCREMENTAL = ("inter_cost", "tol", "gamma", "threads", "memory_per_worker")
#: the settings only ``from_manifest`` takes
_INCREMENTAL_ONLY = ("max_moved_rows", "compare_full", "window")
#: the incremental options that placing new data on the old placement reads (``from_manifest`` without
#: ``max_moved_rows``: :func:`gmp.partition.incremental.place_new_data`, i.e. the exact plan's ``_place`` and
#: ``resolve_options``, the one-pass plan's ``run_pass``); the others only shape the re-partition, so without
#: ``max_moved_rows`` they are refused rather than ignored (and recorded in the manifest as if used)
PLACEMENT_OPTIONS = ("plan", "max_imbalance", "alpha", "batch_size", "order", "start", "carry_private")
#: the incremental options the one-pass plan (``plan="onepass"``, :mod:`gmp.partition._incremental_onepass`) never
#: reads: the exact plan's start, sweeps and rounds (``gmp.partition.incremental.EXACT_ONLY``) and the pass's
#: ``order`` (its one pass is in dataset order); refused rather than ignored and recorded in the manifest as if used.
#: (``carry_private`` is read there: target mode's re-fit runs the exact plan's rounds.)
ONEPASS_UNREAD = ("order", "start", "sweep", "rounds", "sweep_first")
#: the environment ``distributed`` needs (torchrun sets it)
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
TORCHRUN_HINT = "run it under torchrun (one process per rank; docs/distributed.md)"


@dataclass(frozen=True)
class PartitionSpec:
    """One partitioning request, resolved (:func:`resolve_partition`; run by :func:`gmp.api.run_partition`).

    ``mode`` is one of :data:`PARTITION_MODES`; ``topology`` is the resolved
    :class:`gmp.topology.Topology` (None in ``incremental`` mode, which keeps the old placement's);
    ``options`` the partitioner's options as given (``incremental``: :class:`gmp.partition.incremental.Options`
    fields; else the method's); ``block_samples`` is resolved in ``distributed`` mode only."""

    dataset: Path
    mode: str
    method: str
    out: Path
    topology: Any = None
    from_manifest: Path | None = None
    old_manifest: Any = None  # from_manifest opened (a gmp.manifest.Manifest)
    seed: int = 0
    batch_size: int = DEFAULT_BATCH_SIZE
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    options: Mapping[str, Any] = field(default_factory=dict)
    max_moved_rows: int | str | None = None
    compare_full: bool = False
    window: int | None = None
    chunk_samples: int | None = None
    block_samples: int | None = None
    overwrite: bool = False
    plots: bool = True
    inter_cost: float | None = None  # resolved for a topology of machines (MxG) only: elsewhere it does not apply
    sources: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def values(self) -> dict[str, Any]:
        """The value of each setting :attr:`sources` names that applies to this request."""
        out = {"method": self.method, "seed": self.seed, "batch_size": self.batch_size,
               "embedding_dim": self.embedding_dim, "out": self.out, "inter_cost": self.inter_cost,
               "block_samples": self.block_samples}
        return {k: v for k, v in out.items() if v is not None}

    def described(self) -> str:
        """What the person did not set and where it came from (the manifest's plan, a default): one line for
        the summary, as ``gmp train``'s settings line."""
        return describe_sources(self.values(), self.sources)

    def to_json(self) -> dict[str, Any]:
        """The spec as a JSON object (the topology by name and worker count)."""
        topo = None if self.topology is None else {"name": self.topology.name,
                                                    "num_workers": self.topology.num_workers}
        return {"dataset": str(self.dataset), "mode": self.mode, "method": self.method, "out": str(self.out),
                "topology": topo, "from_manifest": None if self.from_manifest is None else str(self.from_manifest),
                "seed": self.seed, "batch_size": self.batch_size, "embedding_dim": self.embedding_dim,
                "options": dict(self.options), "max_moved_rows": self.max_moved_rows,
                "compare_full": self.compare_full, "window": self.window, "chunk_samples": self.chunk_samples,
                "block_samples": self.block_samples, "inter_cost": self.inter_cost, "sources": dict(self.sources)}


def _refuse(error: type[GmpError], param: str, msg: str) -> GmpError:
    """A refusal that names several parameters, each in backticks (`` `window` ``, `` `workers=N` ``,
    `` `distributed=True` ``), so that the CLI can word each as its flag; ``param`` is the one to blame."""
    return param_error(error, param, msg)


def _refuse_repartition_options(options: Mapping[str, Any]) -> None:
    """Refuse the incremental options given (not None) that only the re-partition reads (not in
    :data:`PLACEMENT_OPTIONS`): ``from_manifest`` without ``max_moved_rows`` places the new data only."""
    if not options:
        return
    from .partition.incremental import Options

    unread = [k for k in Options.__dataclass_fields__ if k not in PLACEMENT_OPTIONS and options.get(k) is not None]
    if unread:
        raise _options_refusal(unread, lambda one: (
            f"appl{'ies' if one else 'y'} only to the re-partition that `max_moved_rows` asks for; without it the new "
            f"data is only placed on the old placement, which does not read {'it' if one else 'them'}: add "
            f"`max_moved_rows=N` (rows, or a percentage such as 5%) or drop {'it' if one else 'them'}."))


def _refuse_options_the_plan_ignores(options: Mapping[str, Any], max_moved_rows: Any) -> None:
    """Refuse the incremental options given (not None) that the one-pass plan never reads
    (:data:`ONEPASS_UNREAD`), with or without ``max_moved_rows``, before anything is read; and
    ``carry_private``, which only target mode's re-fit reads there (``target="full"`` with a budget)."""
    if options.get("plan") != "onepass":
        return
    if options.get("carry_private") is not None and (max_moved_rows is None or options.get("target") != "full"):
        raise _options_refusal(["carry_private"], lambda one: (
            "is read by plan 'onepass' only in target mode's re-fit (target 'full' with `max_moved_rows`): drop it, "
            "add both, or use plan 'exact'."))
    unread = [k for k in ONEPASS_UNREAD if options.get(k) is not None]
    if unread:
        # no `name=value` here: the CLI would word it as a flag, and `plan` is only `-O plan=...`
        raise _options_refusal(unread, lambda one: (
            f"{'is' if one else 'are'} not read by plan 'onepass', which places each sample once, in dataset order, "
            f"and does not sweep the samples after: drop {'it' if one else 'them'} or use plan 'exact'."))


def _options_refusal(unread: Sequence[str], says: Any) -> GmpError:
    """``the incremental option 'a'`` (or ``options 'a' and 'b'``) followed by ``says(one)``, ``one`` telling
    whether a single option is named; the first option is the one to blame."""
    from .errors import PartitionError

    return _refuse(PartitionError, unread[0],
                   f"the incremental {plural('option', len(unread))} {_quoted(unread)} {says(len(unread) == 1)}")


def _machines_given(topology: Any) -> bool:
    """Whether ``topology`` names machines (``"MxG"``), the one form ``inter_cost`` shapes."""
    from .topology import Topology

    return topology is not None and not isinstance(topology, Topology) and "x" in str(topology).lower()


def _refuse_inter_cost_without_machines(inter_cost: float | None, topology: Any, error: type[GmpError]) -> None:
    """``inter_cost`` given (not None) with a topology that has no machines to put it between: refused, not
    ignored (a uniform matrix would be used and the value dropped). ``gmp partition`` and ``gmp compare``."""
    if inter_cost is not None and not _machines_given(topology):
        raise _refuse(error, "inter_cost", "`inter_cost` sets the cost between the machines of `topology=MxG`; it "
                                           "does not apply to `workers=N`, `topology=N` or `topology_file` (which "
                                           "gives its own costs): drop it.")


def _quoted(names: Sequence[str]) -> str:
    """``'a'``, ``'a' and 'b'``, ``'a', 'b' and 'c'``."""
    quoted = [f"'{k}'" for k in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


#: ``gmp partition``'s partitioner when none is given: gmp's own (HET-GMP's hybrid partitioning)
DEFAULT_METHOD = "hybrid"
#: ``gmp compare``'s partitioners when none are given: the reference, the classic peer and gmp's own
DEFAULT_COMPARE_METHODS = ("random", "metis", "hybrid")


def resolve_partition(dataset: Any, method: str | None = None, out: str | os.PathLike | None = None, *,
                      workers: int | None = None, topology: Any = None,
                      topology_file: str | os.PathLike | None = None, inter_cost: float | None = None,
                      seed: int | None = None, batch_size: int | None = None, embedding_dim: int | None = None,
                      options: Mapping[str, Any] | None = None, from_manifest: Any = None,
                      max_moved_rows: int | str | None = None, compare_full: bool = False,
                      window: int | None = None, distributed: bool = False, chunk_samples: int | None = None,
                      block_samples: int | None = None, overwrite: bool = False, plots: bool = True,
                      environ: Mapping[str, str] | None = None) -> PartitionSpec:
    """The one resolution of a partitioning request (``gmp partition`` and :func:`gmp.partition_dataset` /
    :func:`gmp.repartition_dataset`).

    The mode: ``from_manifest`` (new data on an old placement; ``max_moved_rows``, ``compare_full`` and
    ``window`` need it), ``distributed`` (the hybrid across torchrun's processes), ``chunk_samples`` (the
    hybrid streamed from disk), else ``method`` from scratch. Defaults: ``method`` ``hybrid``, ``seed`` 0,
    ``batch_size``/``embedding_dim`` the old manifest's plan with ``from_manifest`` (else 512/16),
    ``inter_cost`` 10, ``out`` ``placements/DATASET.METHOD.wN``. Every rule between the settings is checked here, before
    anything is read but the old manifest."""
    from .compare import refuse_plan_options
    from .errors import PartitionError
    from .params import check_int, check_plan_value
    from .seeds import check_seed
    from .topology import DEFAULT_INTER_COST, Topology, resolve_topology

    E = PartitionError
    env = os.environ if environ is None else environ
    world = torchrun_world(env)
    if world is not None and not distributed:  # every process would partition the whole dataset
        raise _refuse(E, "distributed", f"gmp partition runs under torchrun (WORLD_SIZE={world}) without "
                                        f"`distributed=True`: each of the {world} processes would partition the "
                                        f"whole dataset; add `distributed=True` (one partition across the "
                                        f"processes) or run it without torchrun.")
    multi = _machines_given(topology)
    if from_manifest is None:
        _refuse_inter_cost_without_machines(inter_cost, topology, E)
    sources: dict[str, str] = {"seed": USER if seed is not None else DEFAULT}
    seed = check_seed(0 if seed is None else seed)
    options = dict(options or {})
    refuse_plan_options(options, E)  # one batch and width for the whole request
    streamed = distributed or chunk_samples is not None or block_samples is not None
    incremental_given = [k for k, v in (("from_manifest", from_manifest), ("max_moved_rows", max_moved_rows),
                                        ("compare_full", compare_full or None), ("window", window))
                         if v is not None]
    if streamed:
        mode = "distributed" if distributed else "chunked"
        if method not in (None, "hybrid"):
            raise _refuse(E, "method", f"`distributed` and `chunk_samples` run the hybrid partitioner, got "
                                       f"`method={method}`; drop `method` or use `method=hybrid`.")
        if distributed:
            missing = [k for k in TORCHRUN_ENV if k not in env]
            if missing:
                raise _refuse(E, "distributed", f"`distributed` needs RANK and WORLD_SIZE (and MASTER_ADDR, "
                                                f"MASTER_PORT) in the environment (torchrun sets them), got no "
                                                f"{', '.join(missing)}; {TORCHRUN_HINT}, or drop `distributed`.")
        if incremental_given:
            raise _refuse(E, incremental_given[0], "`distributed`/`chunk_samples` partition from scratch; drop "
                                                   "`from_manifest`, `max_moved_rows`, `compare_full` and `window`.")
        method = "hybrid"
    elif from_manifest is not None:
        mode = "incremental"
        if method is not None or workers is not None or topology is not None or topology_file is not None:
            raise _refuse(E, "from_manifest", "`from_manifest` keeps the old placement's workers and topology; drop "
                                              "`method`, `workers`, `topology` and `topology_file`.")
        wrong = [k for k in _NOT_INCREMENTAL if (inter_cost if k == "inter_cost" else options.get(k)) is not None]
        if wrong:
            raise _refuse(E, wrong[0], f"{', '.join(f'`{k}`' for k in wrong)} do{'es' if len(wrong) == 1 else ''} "
                                       f"not apply to `from_manifest` (its options: `max_imbalance`, `rounds`, "
                                       f"`alpha`, `beta`, `replication_budget` and the incremental options).")
        _refuse_options_the_plan_ignores(options, max_moved_rows)
        if max_moved_rows is None:
            _refuse_repartition_options(options)
        method = "incremental" if max_moved_rows is not None else "place-new"
    else:
        mode = "scratch"
        sources["method"] = USER if method is not None else DEFAULT
        method = DEFAULT_METHOD if method is None else method
        if incremental_given:
            raise _refuse(E, incremental_given[0], "`max_moved_rows`, `compare_full` and `window` need "
                                                   "`from_manifest=OLD_MANIFEST`.")
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
        raise param_error(E, "window", f"The 'window' parameter must be a number of days >= 1, got {window}.")
    if max_moved_rows is not None:  # its form, before anything is read (the percentage's rows come later)
        from .partition.incremental import migration_budget

        migration_budget(max_moved_rows, 0, name="`max_moved_rows`")

    ds_path = Path(getattr(dataset, "path", dataset))
    name = Path(os.path.realpath(ds_path)).name  # realpath: Path.resolve raises RuntimeError in a symlink loop
    old = None
    topo = None
    warnings: list[str] = []
    if mode == "incremental":
        from .manifest import Manifest, load_manifest

        old = from_manifest if isinstance(from_manifest, Manifest) else load_manifest(from_manifest)
        plan, plan_sources, warning = resolve_training_plan(old, batch_size=batch_size, embedding_dim=embedding_dim)
        if warning:
            warnings.append(warning)
        memory = old.plan.memory_per_worker
        if memory is not None:  # said, not silently dropped: the placement is not made to hold it
            warnings.append(f"{old.path} was made with a memory plan of {memory:,} bytes per worker, which placing "
                            f"new data on it does not hold (the new ids' primaries and the copies are placed "
                            f"without it) and the new manifest does not record; to hold it, re-partition the new "
                            f"data from scratch with `memory_per_worker` {memory}")
        num_workers = old.topology.num_workers
    else:
        plan, plan_sources, _ = resolve_training_plan(None, batch_size=batch_size, embedding_dim=embedding_dim)
        sources["inter_cost"] = USER if inter_cost is not None else DEFAULT
        inter_cost = DEFAULT_INTER_COST if inter_cost is None else inter_cost
        if isinstance(topology, Topology):
            topo = topology
            if workers is not None and workers != topo.num_workers:
                raise param_error(E, "workers", f"workers={workers} disagrees with the topology's {topo.num_workers:,} "
                                                 f"{plural('worker', topo.num_workers)}; drop workers or pass another "
                                                 f"topology.")
        else:
            if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool)):
                from .errors import TopologyError  # a count < 1 is the topology's to refuse (as --workers 0)

                check_int("workers", workers, minimum=1, error=TopologyError)
            topo = resolve_topology(workers, None if topology is None else str(topology),
                                    None if topology_file is None else str(topology_file), inter_cost=inter_cost)
        num_workers = topo.num_workers
    for k in ("batch_size", "embedding_dim"):  # bounded as gmp train bounds them: the manifest carries them there
        check_plan_value(k, plan[k], error=E)
    sources.update(plan_sources)
    sources["out"] = USER if out is not None else DEFAULT
    out = Path(out) if out is not None else Path("placements") / f"{name}.{method}.w{num_workers}"
    block = None
    if mode in ("distributed", "chunked"):
        from .compare import method_options
        from .partition.distributed import DEFAULT_BLOCK_SAMPLES, check_init, check_settings
        from .partition.hybrid import Options

        if block_samples is not None and not distributed:
            raise _refuse(E, "block_samples", f"`block_samples` sets the blocks of `distributed` (one process sweeps "
                                              f"its samples in order), got `block_samples={block_samples}` without "
                                              f"`distributed`; add `distributed` (under torchrun) or drop "
                                              f"`block_samples`.")
        check_init(options.get("init", "random"))
        hybrid = Options(**method_options("hybrid", options, batch_size=plan["batch_size"],
                                          embedding_dim=plan["embedding_dim"]))
        if distributed:  # one process sweeps its samples in order: no blocks to speak of
            sources["block_samples"] = USER if block_samples is not None else DEFAULT
        block = DEFAULT_BLOCK_SAMPLES if block_samples is None else block_samples
        check_settings(hybrid, topo, block, chunk_samples)
    return PartitionSpec(dataset=ds_path, mode=mode, method=method, out=out, topology=topo,
                         from_manifest=None if old is None else Path(old.path), old_manifest=old, seed=seed,
                         batch_size=plan["batch_size"], embedding_dim=plan["embedding_dim"], options=options,
                         max_moved_rows=max_moved_rows, compare_full=bool(compare_full), window=window,
                         chunk_samples=chunk_samples, block_samples=block, overwrite=bool(overwrite),
                         plots=bool(plots), inter_cost=inter_cost if multi else None, sources=sources,
                         warnings=tuple(warnings))


# ----------------------------------------------------------------------------------- report / compare
@dataclass(frozen=True)
class ReportSpec:
    """One report request, resolved (:func:`resolve_report`): ``batch_size``/``embedding_dim`` None keep the
    manifest's own (recomputing with others needs ``dataset``)."""

    manifest: Path
    dataset: Path | None = None
    format: str = "md"
    out: Path | None = None
    batch_size: int | None = None
    embedding_dim: int | None = None
    plots: bool = True
    overwrite: bool = False
    sources: Mapping[str, str] = field(default_factory=dict)


def resolve_report(manifest: Any, *, dataset: Any = None, format: str = "md", out: str | os.PathLike | None = None,
                   batch_size: int | None = None, embedding_dim: int | None = None, plots: bool = True,
                   overwrite: bool = False) -> ReportSpec:
    """The one resolution of a report request (``gmp report`` and :func:`gmp.make_report`): the format is one
    of :data:`gmp.report.REPORT_FORMATS`, a given batch or width an int >= 1."""
    from .errors import ManifestError
    from .params import check_plan_value
    from .report import REPORT_FORMATS

    if format not in REPORT_FORMATS:
        raise _refuse(ManifestError, "format", f"`format` {format!r} not understood; choose one of "
                                               f"{', '.join(REPORT_FORMATS)}.")
    for name, value in (("batch_size", batch_size), ("embedding_dim", embedding_dim)):
        if value is not None:
            check_plan_value(name, value, error=ManifestError)
    sources = {k: USER if v is not None else DEFAULT for k, v in (("batch_size", batch_size),
                                                                    ("embedding_dim", embedding_dim),
                                                                    ("dataset", dataset), ("out", out))}
    return ReportSpec(manifest=Path(getattr(manifest, "path", manifest)),
                      dataset=None if dataset is None else Path(getattr(dataset, "path", dataset)), format=format,
                      out=None if out is None else Path(out), batch_size=batch_size, embedding_dim=embedding_dim,
                      plots=bool(plots), overwrite=bool(overwrite), sources=sources)


#: the files ``gmp compare --out`` writes, by suffix
COMPARE_SUFFIXES = (".md", ".json", ".html")


@dataclass(frozen=True)
class CompareSpec:
    """One comparison of partitioners, resolved (:func:`resolve_compare`; run by :func:`gmp.api.run_compare`)."""

    dataset: Path
    methods: tuple[str, ...]
    topology: Any
    seed: int = 0
    batch_size: int = DEFAULT_BATCH_SIZE
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    options: Mapping[str, Mapping[str, Any]] | None = None
    isolate: bool = True  # each method in a process of its own, so its peak RSS is its own (docs/report.md)
    out: Path | None = None
    overwrite: bool = False
    sources: Mapping[str, str] = field(default_factory=dict)


def resolve_compare(dataset: Any, methods: Any = None, *, workers: int | None = None, topology: Any = None,
                    topology_file: str | os.PathLike | None = None, inter_cost: float | None = None,
                    seed: int | None = None, batch_size: int | None = None, embedding_dim: int | None = None,
                    options: Mapping[str, Mapping[str, Any]] | None = None, isolate: bool | None = None,
                    out: str | os.PathLike | None = None, overwrite: bool = False) -> CompareSpec:
    """The one resolution of a comparison (``gmp compare`` and :func:`gmp.compare_partitioners`): ``methods`` a
    list or ``"random,metis,hybrid"`` (the default, :data:`DEFAULT_COMPARE_METHODS`); defaults seed 0, batch
    512, width 16, inter-machine cost 10, ``isolate`` True (each method in a process of its own: its peak RSS
    is its own); ``out`` (a ``.md``, ``.json`` or ``.html`` file) is checked here, before the (long)
    partitioning."""
    from .compare import refuse_plan_options
    from .errors import PartitionError
    from .params import check_int, check_plan_value, comma_list
    from .seeds import check_seed
    from .topology import DEFAULT_INTER_COST, Topology, resolve_topology

    E = PartitionError
    _refuse_inter_cost_without_machines(inter_cost, topology, E)
    for method, given in (options or {}).items():
        if isinstance(given, Mapping):
            refuse_plan_options(given, E, method=str(method))
    sources = {k: USER if v is not None else DEFAULT for k, v in (("methods", methods), ("seed", seed),
                                                                    ("batch_size", batch_size),
                                                                    ("embedding_dim", embedding_dim),
                                                                    ("inter_cost", inter_cost),
                                                                    ("isolate", isolate))}
    isolate = CompareSpec.isolate if isolate is None else isolate
    seed = check_seed(0 if seed is None else seed)
    batch_size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    embedding_dim = DEFAULT_EMBEDDING_DIM if embedding_dim is None else embedding_dim
    for name, value in (("batch_size", batch_size), ("embedding_dim", embedding_dim)):
        check_plan_value(name, value, error=E)
    if out is not None and Path(out).suffix not in COMPARE_SUFFIXES:
        raise _refuse(E, "out", f"`out` {out}: expected a .md, .json or .html file name.")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool)):
        from .errors import TopologyError  # a count < 1 is the topology's to refuse (as --workers 0)

        check_int("workers", workers, minimum=1, error=TopologyError)
    if isinstance(topology, Topology):
        topo = topology
    else:
        topo = resolve_topology(workers, None if topology is None else str(topology),
                                None if topology_file is None else str(topology_file),
                                inter_cost=DEFAULT_INTER_COST if inter_cost is None else inter_cost)
    methods = tuple(comma_list(DEFAULT_COMPARE_METHODS if methods is None else methods))
    twice = sorted({m for m in methods if methods.count(m) > 1})
    if twice:  # each would run and print its row again: the same numbers, twice the time
        raise _refuse(E, "methods", f"`methods` names {_quoted(twice)} more than once; name each method once.")
    return CompareSpec(dataset=Path(getattr(dataset, "path", dataset)), methods=methods,
                       topology=topo, seed=seed, batch_size=batch_size, embedding_dim=embedding_dim,
                       options=options, isolate=bool(isolate), out=None if out is None else Path(out),
                       overwrite=bool(overwrite), sources=sources)


# ------------------------------------------------------------------ import
#: a value the input's recognition chose (:func:`gmp.datasets.dispatch.recognise_import`)
RECOGNISED = "recognised"
#: the format options each import format takes beyond the common ones (the others are refused)
IMPORT_FORMAT_OPTIONS: dict[str, tuple[str, ...]] = {
    "avazu": ("split_hour",),
    "movielens": ("rating_threshold", "ignore"),
    "csv": ("label", "label_positive", "label_threshold", "categorical", "multi", "multi_sep", "dense",
            "dense_transform", "ignore", "sep"),
    "parquet": ("label", "label_positive", "label_threshold", "categorical", "multi", "multi_sep", "dense",
                "dense_transform", "ignore"),
}
#: the order format options given to the wrong format are named in (as the command lists them)
_IMPORT_OPTION_ORDER = ("split_hour", "rating_threshold", "label", "label_positive", "label_threshold",
                        "categorical", "multi", "multi_sep", "dense", "dense_transform", "ignore", "sep")


@dataclass(frozen=True)
class ImportSpec:
    """One import, resolved: the format (given or recognised), the inputs, the common options and the
    importer's format options; ``recipe`` is what recognition decided (the command it stands for)."""

    format: str
    inputs: tuple[Path, ...]
    out: Path
    test_inputs: tuple[Path, ...]
    common: Any  # gmp.datasets.streaming.CommonOptions
    format_options: Mapping[str, Any]
    recipe: Any  # gmp.datasets.dispatch.ImportRecipe
    sources: Mapping[str, str] = field(default_factory=dict)

    def values(self) -> dict[str, Any]:
        return {"format": self.format, **self.common.to_json()}


def resolve_import(format: str | None, inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                   test_inputs: Sequence[str | os.PathLike] = (), min_count: int = 1,
                   hash_sizes: Mapping[str, int] | None = None, max_bad_lines: int = 0,
                   test_fraction: float | None = None, overwrite: bool = False,
                   extend: str | os.PathLike | None = None, chunk_mb: int = 16, split_hour: bool | None = None,
                   rating_threshold: float | None = None, columns: Any = None,
                   extra_args: Sequence[str] = ()) -> ImportSpec:
    """Resolve ``gmp data import`` / :func:`gmp.import_dataset`: recognise the first input (the format
    when ``format`` is None, csv/Parquet's label and dense columns when not given), refuse format options
    the format does not take, check the common options, and build the importer's options.

    ``columns`` is a :class:`~gmp.datasets.dispatch.ColumnChoice` (csv/Parquet columns and, for
    movielens, ``ignore``); a format option left ``None`` (or at its ColumnChoice default) is not given.
    ``extra_args`` are the other flags as typed, repeated in the commands recognition suggests.
    """
    from .datasets.dispatch import ColumnChoice, recognise_import
    from .datasets.streaming import CommonOptions
    from .errors import ImportDataError

    columns = columns if columns is not None else ColumnChoice()
    inputs = tuple(Path(p) for p in inputs)
    # recognition first: a file of another format is named before any option is checked against the format
    recipe = recognise_import(format, inputs, out, columns=columns, extra_args=extra_args, extend=extend)
    fmt = recipe.format
    plain = ColumnChoice()
    given = {
        "split_hour": split_hour is False, "rating_threshold": rating_threshold is not None,
        "label": columns.label is not None, "label_positive": columns.label_positive is not None,
        "label_threshold": columns.label_threshold is not None, "categorical": columns.categorical is not None,
        "multi": columns.multi != plain.multi, "multi_sep": columns.multi_sep != plain.multi_sep,
        "dense": columns.dense is not None, "dense_transform": columns.dense_transform != plain.dense_transform,
        "ignore": columns.ignore != plain.ignore, "sep": columns.sep is not None,
    }
    takes = IMPORT_FORMAT_OPTIONS.get(fmt, ())
    wrong = [f"`{name}=False`" if name == "split_hour" else f"`{name}`"
             for name in _IMPORT_OPTION_ORDER if given[name] and name not in takes]
    if wrong:  # an option of another format is a mistake, not to be ignored
        raise ImportDataError(f"{', '.join(wrong)} do{'es' if len(wrong) == 1 else ''} not apply to format "
                              f"{fmt!r}; docs/datasets.md lists each format's options.")
    if not 1 <= chunk_mb <= 1024:
        raise ImportDataError(f"`chunk_mb` must be in [1, 1024], got {chunk_mb}.")
    common = CommonOptions(min_count=min_count, hash_sizes=dict(hash_sizes or {}), max_bad_lines=max_bad_lines,
                           test_fraction=0.1 if test_fraction is None else test_fraction, overwrite=overwrite,
                           chunk_bytes=chunk_mb << 20, extend=None if extend is None else str(extend))
    if test_inputs and test_fraction is not None and test_fraction != 0.1:
        raise ImportDataError("`test_fraction` and `test_inputs` both choose the test set; give one of them.")
    if fmt == "avazu":
        format_options: dict[str, Any] = {"split_hour": split_hour is not False}
    elif fmt == "movielens":
        format_options = {"rating_threshold": 4.0 if rating_threshold is None else rating_threshold,
                          "ignore": list(columns.ignore) if given["ignore"] else None}
    elif fmt in ("csv", "parquet"):
        format_options = {"options": recipe.columns.csv_options()}
    else:
        format_options = {}
    sources = {"format": RECOGNISED if "format" in recipe.proposed else USER}
    sources.update({name: RECOGNISED for name in recipe.proposed if name != "format"})
    return ImportSpec(fmt, inputs, Path(out), tuple(Path(p) for p in test_inputs), common, format_options, recipe,
                      sources)


#: the knobs of a synthetic preset the command sets (``gmp data synth --skew ...``; Python may set any
#: other SynthConfig field too)
SYNTH_KNOBS = ("skew", "tail", "num_communities", "locality", "entity_skew", "fidelity", "coherence", "fresh")
#: what the next day of a synthetic dataset takes besides ``out`` (``continue_from``)
SYNTH_DAY_KEYS = ("num_samples", "seed", "test_fraction", "growth", "drift")


@dataclass(frozen=True)
class SynthSpec:
    """One ``gmp data synth`` / :func:`gmp.synthesize` request, resolved: a new dataset from ``config``
    (None with ``like``: the model is fitted to that dataset when the run starts, after ``out`` is
    claimed, with ``knobs`` on top), or the next day of ``continue_from`` (``day``: its keywords)."""

    out: Path
    overwrite: bool = False
    config: Any = None  # gmp.datasets.synth.SynthConfig
    like: Path | None = None
    knobs: Mapping[str, Any] = field(default_factory=dict)
    num_samples: int | None = None
    seed: int = 0
    test_fraction: float = 0.1
    min_count: int = 1
    chunk_samples: int = 1 << 18
    continue_from: Path | None = None
    day: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)


def resolve_synth(out: str | os.PathLike, *, preset: str | None = None, like: str | os.PathLike | None = None,
                  num_samples: int | None = None, scale: float | None = None, seed: int = 0,
                  test_fraction: float | None = None, min_count: int = 1, chunk_samples: int = 1 << 18,
                  overwrite: bool = False, continue_from: str | os.PathLike | None = None,
                  growth: float | None = None, drift: float | None = None, local_min_values: int | None = None,
                  **knobs: Any) -> SynthSpec:
    """Resolve ``gmp data synth`` / :func:`gmp.synthesize`: a preset (default ``criteo-kaggle``, at
    ``scale`` 1.0) or a model fitted to ``like``, with ``knobs`` (:data:`SYNTH_KNOBS`) on top; or, with
    ``continue_from``, the next day of that synthetic dataset, which keeps its generator and takes only
    ``num_samples``, ``seed``, ``test_fraction``, ``growth`` and ``drift`` (None: the previous day's,
    and a ``seed`` of 0 the first day's). A setting the request cannot use is refused, not ignored."""
    from .datasets.synth import PRESET_FIELDS, SynthConfig, preset_config
    from .errors import DatasetError
    from .seeds import check_seed

    seed = check_seed(seed, error=DatasetError)
    takes = {f.name for f in dataclasses.fields(SynthConfig)} | {"local_min_values"}
    unknown = sorted(set(knobs) - takes)
    if unknown:
        # a preset's layout and the named arguments are SynthConfig fields but not knobs
        knob_names = takes - set(PRESET_FIELDS) - {"num_samples", "seed", "test_fraction", "preset", "scale"}
        raise DatasetError(f"synthesize: unknown knob(s) {', '.join(unknown)}; the knobs: "
                           f"{', '.join(sorted(knob_names))}.")
    knobs = {k: v for k, v in knobs.items() if v is not None}
    sources = {name: USER for name, value in (("preset", preset), ("scale", scale), ("test_fraction", test_fraction))
               if value is not None}
    if continue_from is not None:  # the next day (issue 18): ids of the previous day stay, new ones are appended
        kept = [name for name, given in (("preset", preset is not None), ("like", like is not None),
                                         ("scale", scale is not None), *((k, True) for k in knobs),
                                         ("local_min_values", local_min_values is not None),
                                         ("min_count", min_count != 1)) if given]
        if kept:
            raise DatasetError(f"{', '.join(f'`{k}`' for k in kept)} do{'es' if len(kept) == 1 else ''} not apply to "
                               f"`continue_from`: the next day keeps {continue_from}'s generator (it takes "
                               f"`num_samples`, `seed`, `test_fraction`, `growth` and `drift`).")
        day = {k: v for k, v in (("num_samples", num_samples), ("seed", seed or None), ("test_fraction", test_fraction),
                                 ("growth", growth), ("drift", drift)) if v is not None}
        return SynthSpec(out=Path(out), overwrite=overwrite, continue_from=Path(continue_from), day=day,
                         sources=sources)
    if growth is not None or drift is not None:
        raise DatasetError("`growth` and `drift` apply to `continue_from` (the next day of a synthetic dataset).")
    if like is not None:  # the model is fitted to LIKE: a preset's model and size would be ignored
        kept = [name for name, given in (("preset", preset is not None), ("scale", scale is not None)) if given]
        if kept:
            raise DatasetError(f"{', '.join(f'`{k}`' for k in kept)} do{'es' if len(kept) == 1 else ''} not apply "
                               f"to `like`: the model is fitted to {like} (size it with `num_samples`).")
    scale = 1.0 if scale is None else scale
    if not math.isfinite(scale):
        raise DatasetError(f"`scale` must be a finite number > 0, got {scale}.")
    test_fraction = 0.1 if test_fraction is None else test_fraction
    common = dict(out=Path(out), overwrite=overwrite, num_samples=num_samples, seed=seed, test_fraction=test_fraction,
                  min_count=min_count, chunk_samples=chunk_samples, sources=sources)
    if like is not None:
        if local_min_values is not None or "locality" in knobs:
            raise DatasetError("synth: `locality` and `local_min_values` do not apply to `like` "
                               "(the latent-entity model has no community slices).")
        return SynthSpec(like=Path(like), knobs=knobs, **common)
    preset = "criteo-kaggle" if preset is None else preset
    # a knob only the latent-entity model reads is refused by preset_config on an independent preset
    config = preset_config(preset, num_samples=num_samples, scale=scale, local_min_values=local_min_values,
                           seed=seed, test_fraction=test_fraction, **knobs)
    return SynthSpec(config=config, **common)
