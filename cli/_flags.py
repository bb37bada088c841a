"""Library parameter names -> command-line flags.

The library's errors name parameters ("The 'batch_size' parameter must be an
int >= 1, got 0."; :mod:`gmp.params`); a command re-words them with its flags
("--batch-size must be an int >= 1, got 0.") so the person reads what they typed.
Other library messages name a parameter between backticks ("pass `max_bad_lines` N"), which
:func:`to_flags` turns into its flag ("pass --max-bad-lines N") by the explicit table :data:`FLAGS`;
:func:`cli._common.handle_errors` does it for every error a command prints.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator, Mapping

from gmp.errors import GmpError

#: parameters whose flag is not ``--`` + the name with dashes
SPECIAL = {
    "on_demand": "--on-demand/--no-on-demand",
    "read_only_replicas": "--read-only-replicas/--writable-replicas",
    "schedule": "--schedule",
    "from_manifest": "--from-manifest",
}


#: every parameter that a library message names between backticks (`max_bad_lines` 0,
#: `overwrite=True`) -> the flag the person typed. Explicit, so a parameter whose flag is not
#: "--" + its name with dashes (categorical -> --cat) needs no rule; complete:
#: tests/test_architecture.py fails on a backticked name in gmp/ that is missing here.
FLAGS = {
    "alpha": "--alpha",
    "batch_size": "--batch-size",
    "beta": "--beta",
    "block_samples": "--block-samples",
    "cache_bytes": "--cache-bytes",
    "cache_policy": "--cache-policy",
    "cache_rows": "--cache-rows",
    "categorical": "--cat",
    "checkpoint_dir": "--checkpoint-dir",
    "chunk_mb": "--chunk-mb",
    "chunk_samples": "--chunk-samples",
    "coherence": "--coherence",
    "comm_dtype": "--comm-dtype",
    "compare_full": "--compare-full",
    "continue_from": "--continue",
    "dataset": "--dataset",
    "dense": "--dense",
    "dense_transform": "--dense-transform",
    "distributed": "--distributed",
    "drift": "--drift",
    "embedding_dim": "--embedding-dim",
    "engine": "--engine",
    "entity_skew": "--entity-skew",
    "extend": "--extend",
    "fidelity": "--fidelity",
    "format": "--format",
    "fresh": "--fresh",
    "from_manifest": "--from-manifest",
    "gamma": "--gamma",
    "growth": "--growth",
    "hash_sizes": "--hash",
    "hidden": "--hidden",
    "ignore": "--ignore",
    "inter_cost": "--inter-cost",
    "isolate": "--isolate",
    "label": "--label",
    "label_positive": "--label-positive",
    "label_threshold": "--label-threshold",
    "like": "--like",
    "local_min_values": "--local-threshold",
    "local_threshold": "--local-threshold",
    "locality": "--locality",
    "log_json": "--log-json",
    "lookahead": "--lookahead",
    "lr": "--lr",
    "manifest": "--manifest",
    "max_bad_lines": "--max-bad-lines",
    "max_imbalance": "--max-imbalance",
    "max_moved_rows": "--max-moved-rows",
    "memory_per_worker": "--memory-per-worker",
    "method": "--method",
    "methods": "--methods",
    "min_count": "--min-count",
    "model": "--model",
    "multi": "--multi",
    "multi_sep": "--multi-sep",
    "num_communities": "--communities",
    "num_samples": "--samples",
    "on_demand": "--on-demand",
    "optimizer": "--optimizer",
    "out": "--out",
    "overwrite": "--overwrite",
    "pipeline": "--pipeline",
    "preset": "--preset",
    "rating_threshold": "--rating-threshold",
    "read_only_replicas": "--read-only-replicas",
    "replication_budget": "--replication-budget",
    "resume": "--resume",
    "rounds": "--rounds",
    "scale": "--scale",
    "schedule": "--schedule",
    "seed": "--seed",
    "segments": "--segments",
    "sep": "--sep",
    "shuffle": "--shuffle",
    "skew": "--skew",
    "split_hour": "--split-hour",
    "staleness": "--staleness",
    "table_location": "--table-location",
    "tail": "--tail",
    "test_fraction": "--test-fraction",
    "test_inputs": "--test-input",
    "threads": "--threads",
    "tol": "--tol",
    "topology": "--topology",
    "topology_file": "--topology-file",
    "wheel": "--wheel",
    "window": "--window",
    "workers": "--workers",
}
#: `name=True` / `name=False` of a boolean parameter -> its flag / its negative flag (None: none)
BOOLEAN_FLAGS = {"overwrite": ("--overwrite", None), "resume": ("--resume", None),
                 "distributed": ("--distributed", None), "compare_full": ("--compare-full", None),
                 "split_hour": ("--split-hour", "--no-split-hour"),
                 "isolate": ("--isolate", "--no-isolate"),
                 "on_demand": ("--on-demand", "--no-on-demand"),
                 "read_only_replicas": ("--read-only-replicas", "--writable-replicas"),
                 "pipeline": ("--pipeline", "--no-pipeline")}

_NAMED = re.compile(r"`(\w+)(=[^`]*)?`")


def to_flags(message: str) -> str:
    """``message`` with every backticked parameter of :data:`FLAGS` written as its flag:
    "`max_bad_lines` N" -> "--max-bad-lines N", "`overwrite=True`" -> "--overwrite",
    "`workers=4`" -> "--workers 4"; other backticked text is left as it is."""
    def flag(m: re.Match) -> str:
        name, value = m.group(1), m.group(2)
        if name not in FLAGS:
            return m.group(0)
        if value in ("=True", "=False") and name in BOOLEAN_FLAGS:
            on, off = BOOLEAN_FLAGS[name]
            chosen = on if value == "=True" else off
            return chosen if chosen else m.group(0)
        return FLAGS[name] + (" " + value[1:] if value else "")

    return _NAMED.sub(flag, message)


def flag_of(param: str, special: Mapping[str, str] = SPECIAL) -> str:
    return special.get(param) or FLAGS.get(param) or "--" + param.replace("_", "-")


@contextlib.contextmanager
def flags_for_params(special: Mapping[str, str] = SPECIAL) -> Iterator[None]:
    """Re-raise a GmpError that names a parameter with the parameter's flag instead."""
    try:
        yield
    except GmpError as exc:
        msg = str(exc)
        new = re.sub(r"The '(\w+)' parameter", lambda m: flag_of(m.group(1), special), to_flags(msg))
        param = getattr(exc, "param", None)
        if param:
            new = re.sub(r"(?<![\w-])([a-z][a-z0-9_]*)=(?=\S)", lambda m: flag_of(m.group(1), special) + " ", new)
            # the parameter itself named in the fix ("raise cache_rows to at least 343")
            if "_" in param:  # a plain word ("workers") is also English in the message
                new = re.sub(rf"(?<![\w'.-]){re.escape(param)}(?![\w'=(])", flag_of(param, special), new)
        if new == msg:
            raise
        err = type(exc)(new)
        for attr in ("param", "rank", "together"):  # who raised it (one_rank_speaks), not only what
            if hasattr(exc, attr):
                setattr(err, attr, getattr(exc, attr))
        raise err from None
