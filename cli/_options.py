"""One declaration per command-line option: its flags, type, default and help, read from ``cli/options.json``.

A command lists its parameters by name and :func:`options` gives them their typer declarations from
that table, so a flag shared by several commands (``--cache-rows``, ``--batch-size``, ``--overwrite``...)
is spelt once. The parameter names are those of the specs (:mod:`gmp.specs`) and of the library's
messages, which :mod:`cli._flags` maps back to these flags.

The table is data: ``"options"`` holds the shared declarations, ``"commands"`` what each command
declares otherwise (its own options, and shared flags it words its own way: ``gmp simulate --schedule``
defaults to herald, Herald's paper setting). An entry with ``"spec_default": true`` takes its default
from the command's spec (:data:`REQUESTS`), so the command and the Python verb cannot drift apart.

:data:`REQUESTS` ties each command to the request it resolves: every option is a parameter of the
command's ``resolve_*`` (or ``run_*``) function, under its own name or the one :attr:`Request.renamed`
gives, and every such parameter is an option or says why not (tests/test_cli_flags.py checks both ways).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any, Callable, List, Mapping, Optional, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

#: the table (a data file beside this module; packaged with it)
TABLE = Path(__file__).with_name("options.json")
_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": bool, "path": Path,
                          "list[str]": List[str], "list[path]": List[Path]}


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


@dataclass(frozen=True)
class Request:
    """How a command's options meet the library request it resolves.

    ``takes``: the functions (``"module:name"``) whose parameters make the request; ``spec``: the
    dataclass they resolve it into (``spec_default`` entries read their defaults there); ``renamed``:
    option -> parameter where the names differ (``no_plots`` -> ``plots``; a dotted parameter is a
    field of a parameter's dataclass, ``columns.label``); ``cli_only``: options that only shape what the
    command prints; ``python_only``: parameters the command does not take, each with why; ``derived``: the
    spec's fields that resolution computes rather than takes (besides ``sources`` and ``warnings``)."""

    takes: tuple[str, ...]
    spec: str
    renamed: Mapping[str, str] = field(default_factory=dict)
    cli_only: tuple[str, ...] = ()
    python_only: Mapping[str, str] = field(default_factory=dict)
    derived: tuple[str, ...] = ()

    def spec_class(self) -> type:
        module, _, name = self.spec.partition(":")
        return getattr(importlib.import_module(module), name)


def _fill(text: Optional[str]) -> Optional[str]:
    """The lists a help names that the library owns (the registered partitioners, the import formats)."""
    if text is None or "${" not in text:
        return text
    from gmp.datasets.dispatch import FORMATS
    from gmp.partition import PARTITIONERS

    return Template(text).substitute(partitioners=", ".join(PARTITIONERS), formats=", ".join(FORMATS))


#: partitioner options ``gmp partition`` takes as flags of their own (the rest as ``-O KEY=VALUE``)
PARTITIONER_FLAGS = ("rounds", "tol", "alpha", "beta", "gamma", "max_imbalance", "replication_budget",
                     "memory_per_worker", "threads")

#: what each command (of those that resolve a spec of :mod:`gmp.specs` through ``gmp.api``) asks the library
REQUESTS: dict[str, Request] = {
    "train": Request(
        ("gmp.specs:resolve_train", "gmp.train.config:TrainConfig", "gmp.specs:TIER_KEYS", "gmp.specs:SHARED_KEYS",
         "gmp.specs:HERALD_KEYS"), "gmp.specs:TrainSpec",
        renamed={"dataset_arg": "dataset"},
        python_only={"environ": "the environment torchrun sets (os.environ)",
                     "dtype": "the table's float dtype (the command trains float32)",
                     "eval_batch_size": "the evaluation's batch (the command evaluates at the default)",
                     "tiers": "a TierOptions object; the command gives its fields as flags",
                     "herald": "a HeraldOptions object; the command gives its fields as flags",
                     "prefetch_depth": "the host tier's look-ahead queue depth (the default)"},
        derived=("config", "resume_from", "cache", "world_size")),
    "simulate": Request(
        ("gmp.specs:resolve_simulate", "gmp.specs:SIMULATE_HERALD_KEYS"), "gmp.specs:SimulateSpec",
        renamed={"dataset_arg": "dataset"}, cli_only=("as_json",),
        python_only={"epoch": "which epoch's shuffle to replay (the command replays the first)",
                     "order": "a sample order of the caller's own"},
        derived=("placement", "options", "num_active_rows", "herald_given", "differs_from_train")),
    "data synth": Request(
        ("gmp.specs:resolve_synth", "gmp.specs:SYNTH_KNOBS"), "gmp.specs:SynthSpec",
        renamed={"samples": "num_samples", "communities": "num_communities", "local_threshold": "local_min_values"},
        cli_only=("as_json",), derived=("config", "knobs", "day")),
    "partition": Request(
        ("gmp.specs:resolve_partition",), "gmp.specs:PartitionSpec",
        renamed={"no_plots": "plots", "option": "options", **{k: "options" for k in PARTITIONER_FLAGS}},
        python_only={"environ": "the environment torchrun sets (os.environ)"}, derived=("mode", "old_manifest")),
    "report": Request(("gmp.specs:resolve_report",), "gmp.specs:ReportSpec", renamed={"no_plots": "plots"}),
    "compare": Request(("gmp.specs:resolve_compare",), "gmp.specs:CompareSpec",
                       python_only={"options": "per-method partitioner options (a dict of dicts)"}),
    "export torchrec": Request(
        ("gmp.specs:resolve_export", "gmp.api:run_export", "gmp.export.torchrec:export_torchrec"),
        "gmp.specs:ExportSpec",
        python_only={"spec": "the resolved request itself",
                     "load_factors": "the planner statistics' load factors (docs/export.md; the defaults)",
                     "cache_lookups": "the planner statistics' cache size (docs/export.md; the default)"}),
    "data import": Request(
        ("gmp.specs:resolve_import",), "gmp.specs:ImportSpec",
        renamed={"args": "inputs", **{k: f"columns.{k}" for k in (
            "label", "label_positive", "label_threshold", "categorical", "multi", "multi_sep", "dense",
            "dense_transform", "ignore", "sep")}},
        cli_only=("as_json",),
        python_only={"format": "the first word of ARGS when it names a format (cli.data.split_format)",
                     "extra_args": "the flags as typed, for the commands that recognition prints"},
        derived=("common", "format_options", "recipe")),
}


def spec_default(command: str, name: str) -> Any:
    """The default of the field ``name`` (as renamed for ``command``) of the command's spec."""
    request = REQUESTS[command]
    target = request.renamed.get(name, name)
    for f in dataclasses.fields(request.spec_class()):
        if f.name == target:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    raise KeyError(f"cli/options.json: {command} {name} takes its default from the spec, but {request.spec} "
                   f"has no field {target!r} with a default.")


#: the fields an entry of the table may have
ENTRY_KEYS = frozenset({"type", "flags", "argument", "default", "required", "metavar", "help", "spec_default", "like"})


def _declare(command: str, name: str, entry: Mapping[str, Any]) -> Opt:
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown or entry.get("type", "").rstrip("?") not in _TYPES:
        raise ValueError(f"cli/options.json: {command or 'options'} {name}: unknown field(s) {unknown} or type "
                         f"{entry.get('type')!r}; fields: {', '.join(sorted(ENTRY_KEYS))}; types: "
                         f"{', '.join(_TYPES)} (a trailing ? allows None).")
    kind = entry["type"]
    type_ = _TYPES[kind.rstrip("?")]
    if kind.endswith("?"):
        type_ = Optional[type_]
    if entry.get("required"):
        default: Any = ...
    elif entry.get("spec_default"):
        default = spec_default(command, name)
    else:
        default = entry.get("default")
    return Opt(type_, default, tuple(entry.get("flags") or ()), _fill(entry.get("help")), entry.get("metavar"))


def load_table(path: Path = TABLE) -> tuple[dict[str, Opt], dict[str, dict[str, Opt]]]:
    """``(shared, per command)`` declarations of the table at ``path`` (see the module docstring)."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    shared = raw["options"]
    entries: dict[str, dict[str, Mapping[str, Any]]] = {}
    for command, own in raw["commands"].items():
        entries[command] = {}
        for name, entry in own.items():
            if "like" in entry:
                entry = entries[entry["like"]][name]
            elif "type" not in entry:  # the shared declaration, worded otherwise
                entry = {k: v for k, v in {**shared[name], **entry}.items() if v is not None}
            entries[command][name] = entry
    return ({name: _declare("", name, e) for name, e in shared.items()},
            {c: {name: _declare(c, name, e) for name, e in own.items()} for c, own in entries.items()})


OPTIONS, VARIANTS = load_table()

#: ``gmp data synth``'s generator defaults; its --continue refuses any other value (the next day keeps
#: PREVIOUS's generator)
DEFAULT_PRESET = VARIANTS["data synth"]["preset"].default
DEFAULT_SCALE = VARIANTS["data synth"]["scale"].default


def declaration(command: str, name: str) -> Opt:
    """The declaration of parameter ``name`` of ``command`` (``"simulate"``, ``"data synth"``...)."""
    own = VARIANTS.get(command, {})
    if name in own:
        return own[name]
    if name in OPTIONS:
        return OPTIONS[name]
    raise KeyError(f"cli/options.json declares no option {name!r} (for {command!r}): add it to \"options\" or "
                   f"to \"commands\": {{{command!r}: ...}}.")


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
