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

So the same request gives the same run from the command line and from Python. Errors name the
parameter (``The 'cache_rows' parameter ...``); the CLI words them with its flags
(``cli/_flags.py``).

Sources (``spec.sources[name]``): :data:`USER`, :data:`PLAN` (the manifest's plan),
:data:`CHECKPOINT`, :data:`TORCHRUN` (the environment), :data:`DEFAULT`.
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

USER = "user"
PLAN = "manifest plan"
CHECKPOINT = "checkpoint"
TORCHRUN = "torchrun"
DEFAULT = "default"


def _param_error(error: type[GmpError], param: str, msg: str) -> GmpError:
    exc = error(msg)
    exc.param = param  # the CLI re-words parameter names as flags (cli/_flags.py)
    return exc


# ----------------------------------------------------------------------------------- the plan
def resolve_training_plan(manifest: Any, **given: int | None) -> tuple[dict[str, int], dict[str, str], str | None]:
    """``given`` (``batch_size``, ``embedding_dim``; None: not given) with each None replaced by the
    manifest's plan, else the default; returns ``(values, sources, warning)``, the warning naming
    every given value that differs from the plan (None when none does). ``manifest``: a path, an
    opened :class:`gmp.manifest.Manifest` or None."""
    from .manifest import Manifest, TrainingPlan, read_plan

    if manifest is None:
        plan = TrainingPlan(None, None, None)
    elif isinstance(manifest, Manifest):
        plan = manifest.plan
    else:
        plan = read_plan(manifest)
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
            raise _param_error(TrainingError, "staleness", f"The 'staleness' parameter must be a number >= 0 or "
                                                           f"'inf', got {value!r}.") from None
    return value


def _parse_hidden(value: Any) -> Any:
    """``"512,256,128"`` -> ``(512, 256, 128)`` (a sequence passes through; TrainConfig checks it)."""
    if not isinstance(value, str):
        return value
    parts = [p.strip() for p in value.split(",") if p.strip()]
    try:
        out = tuple(int(p) for p in parts)
    except ValueError:
        out = ()
    if not out:
        raise _param_error(TrainingError, "hidden", f"The 'hidden' parameter must be comma-separated layer widths "
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

    # the manifest's plan
    plan, plan_sources, warning = resolve_training_plan(manifest, batch_size=settings.pop("batch_size", None),
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
        raise _param_error(E, "engine", f"The 'engine' parameter is 'local' under torchrun (WORLD_SIZE={world}): "
                                        f"each of the {world} processes would train the whole run; use "
                                        f"engine='distributed' (the default under torchrun) or run without torchrun.")
    sources["workers"] = USER if workers is not None else DEFAULT

    # the device cache: one per worker, for its own tiered rows and Herald's copies of remote rows
    schedule = settings.get("schedule", "static")
    herald_on = schedule == "herald"
    tiers_obj, herald_obj = settings.pop("tiers", None), settings.pop("herald", None)
    cache_rows, lookahead = settings.pop("cache_rows", None), settings.pop("lookahead", None)
    cache_policy = settings.pop("cache_policy", None)
    herald_given = {k: settings.pop(k) for k in HERALD_KEYS if k in settings}
    tier_given = {k: settings.pop(k) for k in TIER_KEYS if k in settings}
    if tiers_obj is not None:
        if tier_given:
            raise _param_error(E, sorted(tier_given)[0], f"The '{sorted(tier_given)[0]}' parameter cannot be "
                                                         f"combined with tiers (a TierOptions); give one of them.")
        tiers = tiers_obj
        herald_given.update(cache_rows=cache_rows, lookahead=lookahead, cache_policy=cache_policy)
        sources["table_location"] = USER
    else:
        location = tier_given.get("table_location", "device")
        sources["table_location"] = USER if "table_location" in tier_given else DEFAULT
        for name, value in (("cache_rows", cache_rows), ("lookahead", lookahead), ("cache_policy", cache_policy)):
            if value and location == "device" and not herald_on:
                raise _param_error(E, name, f"The '{name}' parameter drives the device cache of table_location="
                                            f"host|disk (the worker's own rows) or of schedule=herald (remote "
                                            f"rows), got table_location=device schedule={schedule}; add one of "
                                            f"them or drop {name}.")
        cache_bytes = tier_given.get("cache_bytes")
        if cache_bytes is not None and cache_bytes < 1:  # not "the default": that is leaving it out
            raise _param_error(E, "cache_bytes", f"The 'cache_bytes' parameter must hold at least one row of the "
                                                 f"tiered table's device cache, got {cache_bytes}; leave it out "
                                                 f"for the default.")
        own, remote = split_cache_rows(cache_rows, tiered=location != "device", herald=herald_on)
        policy = cache_policy or "lookahead"
        tiers = TierOptions(table_location=location, cache_rows=own, cache_bytes=cache_bytes or 0,
                            lookahead=(lookahead or 0) if location != "device" else 0, cache_policy=policy,
                            tier_dir=None if tier_given.get("tier_dir") is None else str(tier_given["tier_dir"]),
                            **({"prefetch_depth": tier_given["prefetch_depth"]}
                               if "prefetch_depth" in tier_given else {}))
        herald_given.update(cache_rows=remote, lookahead=lookahead if herald_on else None,
                            cache_policy=policy if herald_on else None)
    sources["cache_rows"] = USER if cache_rows is not None or tiers.cache_rows or tiers.cache_bytes else DEFAULT
    if herald_obj is not None:
        if any(v is not None for v in herald_given.values()):
            name = next(k for k, v in herald_given.items() if v is not None)
            raise _param_error(E, name, f"The '{name}' parameter cannot be combined with herald (a HeraldOptions); "
                                        f"give one of them.")
        herald = herald_obj
    elif any(v is not None for v in herald_given.values()) or tiers_obj is None:
        herald = HeraldOptions.for_trainer(**herald_given)
    else:
        herald = None
    for name in config_fields:
        if name not in sources:
            sources[name] = USER if name in settings else DEFAULT
    if "staleness" in settings:
        settings["staleness"] = _parse_staleness(settings["staleness"])
    if "hidden" in settings:
        settings["hidden"] = _parse_hidden(settings["hidden"])
    config = TrainConfig(**settings, batch_size=plan["batch_size"], embedding_dim=plan["embedding_dim"],
                         herald=herald, tiers=tiers)

    # what is on disk: the checkpoint a resume starts from, the steps a default cache must hold
    ds_path = Path(getattr(dataset, "path", dataset))
    man_path = None if manifest is None else Path(getattr(manifest, "path", manifest))
    resume_from = None
    if resume and checkpoint_dir is not None:
        from .train.checkpoint import find_checkpoint

        found = find_checkpoint(checkpoint_dir, quiet=True)
        if found is not None:
            head = found[1]
            resume_from = {"epoch": int(head["epoch"]), "step": int(head["step"]),
                           "dataset_sha256": head.get("dataset_sha256")}
            sources["resume_from"] = CHECKPOINT
    cache = None
    if config.tiers is not None and not config.tiers.cache_rows and not config.tiers.cache_bytes:
        cache = _default_cache(ds_path, man_path, workers, config, resume_from)
        config = dataclasses.replace(config, tiers=dataclasses.replace(config.tiers, cache_rows=cache.rows))
        sources["cache_rows"] = (f"{DEFAULT}: the largest step of the run" if cache.rows == cache.largest_step else
                                 f"{DEFAULT}: {DEFAULT_CACHE_PERCENT}% of the largest worker's primaries")
    return TrainSpec(dataset=ds_path, manifest=man_path, config=config, engine=engine, workers=workers,
                     checkpoint_dir=None if checkpoint_dir is None else Path(checkpoint_dir), resume=bool(resume),
                     log_json=None if log_json is None else Path(log_json), collective_timeout=collective_timeout,
                     sources=sources, warnings=tuple(warnings), resume_from=resume_from, cache=cache,
                     world_size=world)


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
    from .simulate import SCHEDULES, active_rows, simulator_options
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
            raise _param_error(E, "workers", "The 'workers' parameter is required without a manifest (rows are "
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
            raise _param_error(E, "workers", f"workers={workers} does not match the manifest "
                                             f"{m.path}, which places rows on {placement.num_workers} workers; "
                                             f"drop workers or pass another manifest.")
    active = active_rows(ds.indptr, ds.indices, ds.num_train)
    options = simulator_options(schedule, active, **herald)
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
    return ExportSpec(values["batch_size"], values["embedding_dim"], sources, (warning,) if warning else ())
