"""``HeraldOptions``: the replica model of the Herald scheduler, one typed object for the CLI,
``gmp simulate``, the trainer's ``--schedule herald`` and the engine."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from ...constants import SIMULATOR_CACHE_PERCENT
from ...errors import TrainingError
from ...params import check_bool, check_choice, check_int
from .cache import CACHE_POLICIES

#: assignment strategies of the runtime scheduler (Herald's Table 1: naive split or Algorithm 1)
ASSIGNMENTS = ("naive", "herald")


@dataclass(frozen=True)
class HeraldOptions:
    """How the scheduler models each worker's copies (validated once, here).

    The defaults are the trainer's (``gmp train --schedule herald``): no cache,
    every non-primary update pushed at once, replicas never written locally, so
    the scheduler's counts are exactly the trainer's, and the ``"lookahead"``
    cache policy, so ``HeraldOptions(...)`` trains as the same flags of ``gmp
    train`` do (:meth:`for_trainer` is the same with None values dropped).
    ``gmp simulate`` starts from :meth:`for_simulator` instead (Herald's paper,
    ``"lru"`` included; see there).

    Parameters
    ----------
    on_demand : Herald's on-demand synchronisation (else naive: push every update at once)
    cache_rows : rows each worker caches beyond its primaries and secondaries
    cache_policy : ``"lru"`` or ``"lookahead"`` (:mod:`gmp.train.herald.cache`)
    lookahead : scheduler look-ahead in global batches (prefetch thread, look-ahead policy window)
    read_only_replicas : a non-primary copy is never written locally (the trainer's store)
    """

    on_demand: bool = False
    cache_rows: int = 0
    cache_policy: str = "lookahead"
    lookahead: int = 0
    read_only_replicas: bool = True

    def __post_init__(self) -> None:
        check_bool("on_demand", self.on_demand, error=TrainingError)
        check_int("cache_rows", self.cache_rows, minimum=0, error=TrainingError)
        check_choice("cache_policy", self.cache_policy, CACHE_POLICIES, error=TrainingError)
        check_int("lookahead", self.lookahead, minimum=0, error=TrainingError)
        check_bool("read_only_replicas", self.read_only_replicas, error=TrainingError)

    @classmethod
    def for_trainer(cls, **overrides: Any) -> "HeraldOptions":
        """The trainer's defaults (the dataclass's) with ``overrides`` (None values are ignored)."""
        return cls(**{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def for_simulator(cls, assignment: str, num_active_rows: int, **overrides: Any) -> "HeraldOptions":
        """``gmp simulate``'s defaults with ``overrides`` (None values are ignored).

        The one deliberate difference between the two commands: the simulator
        follows Herald's paper -- on-demand synchronisation for the ``herald``
        assignment (off for ``naive``), caches of 10% of the active rows,
        writable copies, LRU eviction -- while the trainer defaults to its own
        store (no cache, pushes at once, read-only replicas, the look-ahead
        policy). Pass the options explicitly to make the two compare.
        """
        check_choice("schedule", assignment, ASSIGNMENTS, error=TrainingError)
        base = cls(on_demand=assignment == "herald", cache_rows=default_cache_rows(num_active_rows),
                   cache_policy="lru", read_only_replicas=False)
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def default_cache_rows(num_active_rows: int) -> int:
    """``gmp simulate``'s default cache: 10% of the rows the training samples use, per worker
    (Herald: each cache is 10% of a GPU's memory). Ids no sample uses do not count:
    synthetic Criteo-Kaggle data declares 33.8M ids of which a 1M-sample set uses ~2.6M."""
    return max(1, int(num_active_rows) * SIMULATOR_CACHE_PERCENT // 100)
