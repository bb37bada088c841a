"""``TrainConfig``: the trainer's hyper-parameters, one frozen object validated once.

Every rule lives in :meth:`TrainConfig.__post_init__` and is worded by
:mod:`gmp.params` ("The 'batch_size' parameter must be an int >= 1, got 0.");
``gmp train`` maps the parameter names to its flags (``cli/_flags.py``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..constants import DEFAULT_BATCH_SIZE, DEFAULT_EMBEDDING_DIM, MAX_BATCH_SIZE
from ..errors import TrainingError
from ..params import check_choice, check_float, check_int
from ..seeds import check_seed
from .consistency import Staleness
from .herald.options import HeraldOptions
from .models import MODELS, model_row_dim
from .registry import schedule_names
from .schedule import SHUFFLES
from .store import OPTIMIZERS
from .tiers import TierOptions

DTYPES = {"float32": torch.float32, "float64": torch.float64}
#: the largest learning rate: any larger overflows float32's optimizer step (``--lr 1e308`` was a torch
#: RuntimeError mid-epoch) and no model trains at it anyway
MAX_LR = 1e6
#: wire dtypes of rows, gradients and the dense all-reduce (``comm_dtype``; None: the table's dtype)
COMM_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class TrainConfig:
    """Training hyper-parameters (what ``gmp train`` parses).

    ``herald`` is the replica model of ``schedule="herald"``
    (:class:`~gmp.train.herald.HeraldOptions`; None there means its defaults)
    and must be None for the other schedules. ``staleness`` is the bound s
    (``math.inf``: refresh at epoch end only). ``tiers`` says where each worker's
    primaries live (:class:`~gmp.train.tiers.TierOptions`; None: on its device).
    ``comm_dtype`` is the dtype rows, gradients and dense gradients travel in
    (``"fp32" | "fp16" | "bf16"``; None: the table's ``dtype``, exact); optimizer
    state stays in ``dtype``. ``pipeline`` overlaps the next step's id exchange and
    pulls with this step's compute (:mod:`gmp.train.protocol_pipeline`; s = 0, not
    with ``schedule="herald"`` nor tiers); it gives the same model bit for bit.
    """

    model: str = "wdl"
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    optimizer: str = "adagrad"
    lr: float = 0.01
    batch_size: int = DEFAULT_BATCH_SIZE
    epochs: int = 1
    staleness: float = 0.0
    seed: int = 0
    schedule: str = "static"
    shuffle: str = "seeded"
    dtype: str = "float32"
    hidden: tuple[int, ...] = (128, 64)
    eval_batch_size: int = 4096
    log_every: int = 0
    herald: HeraldOptions | None = None
    tiers: TierOptions | None = None
    comm_dtype: str | None = None
    pipeline: bool = False

    def __post_init__(self) -> None:
        E = TrainingError
        check_choice("model", self.model, MODELS, error=E)
        check_int("embedding_dim", self.embedding_dim, minimum=1, error=E)
        check_choice("optimizer", self.optimizer, OPTIMIZERS, error=E)
        check_float("lr", self.lr, minimum=0.0, strict=True, maximum=MAX_LR, error=E)
        check_int("batch_size", self.batch_size, minimum=1, maximum=MAX_BATCH_SIZE, error=E)
        check_int("epochs", self.epochs, minimum=0, error=E)
        check_float("staleness", self.staleness, minimum=0.0, allow_inf=True, error=E)
        check_int("seed", self.seed, minimum=0, error=E)
        check_seed(self.seed, error=E)  # and below 2^63: torch.manual_seed takes an int64
        check_choice("schedule", self.schedule, schedule_names(), error=E)
        check_choice("shuffle", self.shuffle, SHUFFLES, error=E)
        check_choice("dtype", self.dtype, tuple(DTYPES), error=E)
        check_int("eval_batch_size", self.eval_batch_size, minimum=1, maximum=MAX_BATCH_SIZE, error=E)
        check_int("log_every", self.log_every, minimum=0, error=E)
        hidden = tuple(self.hidden)
        for h in hidden:
            check_int("hidden", h, minimum=1, error=E)
        object.__setattr__(self, "hidden", tuple(int(h) for h in hidden))
        object.__setattr__(self, "staleness", float(self.staleness))
        object.__setattr__(self, "lr", float(self.lr))
        if self.herald is not None:
            if not isinstance(self.herald, HeraldOptions):
                raise E(f"The 'herald' parameter must be a HeraldOptions or None, got {type(self.herald).__name__}.")
            unset = HeraldOptions.for_trainer()
            if self.schedule != "herald" and self.herald != unset:
                changed = [k for k, v in self.herald.to_json().items() if v != getattr(unset, k)]
                exc = E(f"The '{changed[0]}' parameter applies to schedule='herald' only, got "
                        f"schedule={self.schedule!r}; drop it or use the herald schedule.")
                exc.param = changed[0]
                raise exc
        if self.tiers is not None and not isinstance(self.tiers, TierOptions):
            raise E(f"The 'tiers' parameter must be a TierOptions or None, got {type(self.tiers).__name__}.")
        if self.tiers is not None and not self.tiers.tiered:
            object.__setattr__(self, "tiers", None)  # table_location 'device' is the default store
        if self.comm_dtype is not None:
            check_choice("comm_dtype", self.comm_dtype, tuple(COMM_DTYPES), error=E)
        self._check_pipeline()
        h = self.herald_options()
        if h is not None and self.tiers is not None:  # one device cache, one prefetcher: one window
            for name in ("lookahead",):
                if getattr(h, name) != getattr(self.tiers, name):
                    exc = E(f"The '{name}' parameter must be the same for the tiers and herald (the one device "
                            f"cache and prefetcher), got {getattr(self.tiers, name)!r} and {getattr(h, name)!r}; "
                            f"give one value (gmp train has one --{name.replace('_', '-')}).")
                    exc.param = name
                    raise exc
        if Staleness.herald_needs_exact(h) and not self.staleness_rules.exact:
            exc = E(f"The 'staleness' parameter must be 0 with Herald's copies of remote rows (`cache_rows` > 0 "
                    f"on a device table), `on_demand=True` or `read_only_replicas=False` (the runtime scheduler "
                    f"models s = 0 only, Herald section 3.3), got {self.staleness:g}; use `staleness` 0, or drop "
                    f"those (with a tiered table `cache_rows` then sizes its cache alone).")
            exc.param = "staleness"
            raise exc

    def _check_pipeline(self) -> None:
        if not isinstance(self.pipeline, bool):
            raise TrainingError(f"The 'pipeline' parameter must be a bool, got {self.pipeline!r}.")
        if not self.pipeline:
            return
        why = (("staleness 0", f"staleness={self.staleness:g}") if not self.staleness_rules.exact else
               ("a schedule other than herald", "schedule='herald'") if self.schedule == "herald" else
               ("table_location 'device'", f"table_location={self.tiers.table_location!r}") if self.tiers is not None
               else None)
        if why is not None:
            exc = TrainingError(f"The 'pipeline' parameter needs {why[0]} (the pipelined step is the exact s = 0 "
                                f"step of bounded staleness), got {why[1]}; drop pipeline or change that setting.")
            exc.param = "pipeline"
            raise exc

    @property
    def staleness_rules(self) -> Staleness:
        """The staleness bound and the rules that follow from it (:class:`~gmp.train.consistency.Staleness`)."""
        return Staleness(self.staleness)

    @property
    def comm_torch_dtype(self) -> torch.dtype:
        """The dtype rows, gradients and dense gradients are sent in."""
        return self.torch_dtype if self.comm_dtype is None else COMM_DTYPES[self.comm_dtype]

    def herald_options(self) -> HeraldOptions | None:
        """The replica model when ``schedule == "herald"`` (its defaults if not given), else None."""
        if self.schedule != "herald":
            return None
        return self.herald if self.herald is not None else HeraldOptions.for_trainer()

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of a worker's device cache (a tiered primary or a Herald copy): its value and,
        with Adagrad, its sum of squares, side by side in ``dtype`` (``--cache-bytes`` counts these)."""
        width = model_row_dim(self.model, self.embedding_dim) * (2 if self.optimizer == "adagrad" else 1)
        return width * self.torch_dtype.itemsize

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["staleness"] = "inf" if math.isinf(self.staleness) else self.staleness
        d["hidden"] = list(self.hidden)
        h = self.herald_options()
        d["herald"] = None if h is None else h.to_json()
        d["tiers"] = None if self.tiers is None else self.tiers.to_json()
        # written only when set, so checkpoints made before these options resume unchanged
        for key, default in WRITTEN_WHEN_SET.items():
            if d[key] == default:
                del d[key]
        return d


#: settings :meth:`TrainConfig.to_json` writes only when they differ from these defaults
WRITTEN_WHEN_SET: dict[str, Any] = {"comm_dtype": None, "pipeline": False}


def comparable_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A :meth:`TrainConfig.to_json` dict with the settings it leaves out at their defaults filled in, so
    two runs' settings compare key by key (a checkpoint without ``pipeline`` was made with ``False``). A
    ``comm_dtype`` that is the table's own dtype (``fp32`` on ``float32``) is the default, None: the same run.
    Herald's ``cache_policy`` ``"lru"`` at ``lookahead`` 0 is ``"lookahead"`` (with no window the look-ahead
    policy evicts in LRU order: :mod:`gmp.train.herald.cache`), so a checkpoint made before the default
    changed to ``"lookahead"`` resumes with the defaults."""
    out = {**WRITTEN_WHEN_SET, **settings}
    wire = out.get("comm_dtype")
    if wire is not None and COMM_DTYPES.get(wire) == DTYPES.get(out.get("dtype", "float32")):
        out["comm_dtype"] = None
    herald = out.get("herald")
    if isinstance(herald, dict) and herald.get("lookahead") == 0 and herald.get("cache_policy") == "lru":
        out["herald"] = {**herald, "cache_policy": "lookahead"}
    return out
