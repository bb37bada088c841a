"""Synthetic CTR data: skew, co-dependent fields (latent entities) and locality.

``gmp data synth`` writes a prepared dataset (:mod:`gmp.datasets.format`) of
CTR-like samples: one id per categorical field, 13 dense features and a 0/1
label from a hidden logistic model. Everything is drawn from a *generative
story* with a handful of knobs, each of which changes the sample–embedding
graph in a known way (measured numbers: ``docs/synth.md``). Two models
(``SynthConfig.model``):

* ``"entities"`` (``criteo-kaggle``, ``criteo-kaggle-entity`` and ``--like``; issue 13): the
  fields express attributes of latent entities, so they depend on each other
  as real CTR fields do (below, "The entity model");
* ``"independent"`` (``criteo-kaggle-independent``, ``tiny``): every field is
  drawn independently, with community locality in the high-cardinality
  fields; the generator before issue 13, bit-identical to it.

The entity model
----------------
1. **Entities.** For every entity type t (criteo-kaggle: 3, e.g. users, items,
   contexts, with ``entity_counts`` entities) the sample draws an entity rank
   from ``(1 - tail) Zipf(entity_skew) + tail Uniform`` -- or, with probability
   ``session_share[t]``, the entity of its session (the block of
   ``session_length`` consecutive samples; drawn the same way from a stream
   keyed by (type, block)), as real time-ordered logs repeat a user in runs.
2. **Fields.** Field f expresses type ``field_entity[f]`` (-1: independent).
   With probability ``fidelity`` its value is the entity's *attribute*, else an
   independent draw from the field's ``(1 - tail) Zipf(skew_f) + tail Uniform``.
   The attribute of entity e is rank e itself when the field has at least as
   many values as the type has entities (an id-like field) -- or, with
   probability ``fresh``, a uniform draw over the field's other ranks (those no
   entity names: the long tail of rarely seen ids real logs have; 0 in the
   preset, see docs/synth.md, "Known limitation") -- else a draw from the
   field's law seeded by (field, e) only; with probability ``coherence`` that
   draw is made inside the slice of ranks ``g ≡ s (mod segments)`` of the
   entity's segment s (a hash of the entity), so attributes of one entity
   depend on each other through its segment, not only through repeats.
3. Dense features and the label as in the independent model below, with the
   community ``c = (entity of type 0) mod K``.
4. **Criteo's vocabulary** (issue 37; ``field_skews``, ``field_tails``,
   ``field_fresh``, ``entity_tail``): every field has its own Zipf exponent and
   uniform-tail share, entities their own tail, and a field of an entity type
   shows, with probability ``field_fresh[f]``, a *fresh* value instead of its
   entity's (id-like field: a uniform rank no entity names; attribute field: a
   uniform rank of the field), so distinct values keep growing with the sample
   size as real logs' do. Unset, nothing changes and nothing is drawn.

Knobs of ``criteo-kaggle`` (:data:`CRITEO_VOCAB_KNOBS`) are fitted to the real
Criteo rows at 100-1,000 rows and to the published counts at full size;
``criteo-kaggle-entity`` keeps issue 13's (:data:`CRITEO_ENTITY_KNOBS`).
:mod:`gmp.datasets.synth_fit` fits the entity model to any dataset (``--like``)
and holds the analytic distinct-value growth (``expected_distinct``).

The story of one sample (independent model)
-------------------------------------------
1. **Community.** The sample picks one of ``K = num_communities`` latent
   communities uniformly at random.
2. **Categorical ids.** For every field ``f`` with ``n_f`` values, a seeded
   random permutation ``perm_f`` maps popularity *ranks* ``g = 0..n_f-1`` to
   value ids (so popular ids are not simply the low ids). A rank is drawn from
   the mixture

   * with probability ``1 - tail``: ``Zipf(skew)``, ``P(g) ∝ (g + 1) ** -skew``
     (the **skew** knob: the power-law exponent of value popularity);
   * with probability ``tail``: uniform over all ``n_f`` ranks (the **tail**
     knob: a long tail of rarely-seen values, like the millions of
     once-seen ids of real click logs).

   For *local* fields (high cardinality, see below) the draw is, with
   probability ``locality``, made inside the sample's community instead:
   community ``c`` owns the ranks ``g ≡ c (mod K)`` (its *slice*: every K-th
   rank, so each community owns a share of the popular head as well as of
   the tail); a rank ``r`` is drawn from the same Zipf/tail mixture over the
   slice's ``s_c = ceil((n_f - c) / K)`` entries and mapped to ``g = r*K + c``.
   The marginal popularity of rank ``g`` (with ``c = g mod K``) is therefore
   ``(1 - L) P_n(g) + (L / K) P_{s_c}(g // K)``: each community's favourite
   values are, inside the community, as popular as the global favourites.
   With ``skew <= 1`` this has nearly the global shape (``(rK)^-a / Z_n ≈
   r^-a / (K Z_{n/K})``); with ``skew > 1`` the head flattens, so the top-1%
   access share drops a little as ``locality`` grows (measured in docs/synth.md).
3. **Dense features.** ``z_j ~ N(shift[c, j], 1)`` for ``j < 13`` (a
   community-dependent mean, so dense features carry community signal too);
   the stored feature is ``log1p(floor(exp(mu_j + z_j)))``, a log-transformed
   count like prepared Criteo integer columns.
4. **Label.** ``logit = b0 + bias[c] + sum_f w_f(id_f) + sum_j v_j z_j`` with
   per-value weights ``w_f(id)`` uniform with standard deviation
   ``sigma_value`` (a hash of (seed, id): no table needed), dense
   coefficients ``v_j ~ N(0, sigma_dense)`` and community biases
   ``bias[c] ~ N(0, sigma_community)``; ``label ~ Bernoulli(sigmoid(logit))``.
   ``b0`` is calibrated by bisection on a fixed pilot of 16,384 samples so
   the label rate is about ``label_rate`` (0.256, Criteo's). The true
   click probability is saved (``synth_ctr.npy``), so the *Bayes AUC* — the
   AUC of the true probabilities, the best any model can reach — is exact;
   it is written to ``dataset.json`` under ``synth.bayes_auc`` (test split).

**Local fields.** A field is local when its *unscaled* preset cardinality is
at least ``local_min_values`` (10,000 for ``criteo-kaggle``: the 10 fields
C3, C4, C7, C10, C12, C15, C16, C21, C24, C26; 1,000 for ``tiny``) and its
scaled cardinality gives every community at least 2 values
(``n_f >= 2 K``). Which fields are local therefore does not change with
``--scale``. Low-cardinality fields are global: their values are hot, used
by every community, and are what 2D replication (vertex-cut) is for.

What the knobs do to the graph
------------------------------
* ``skew`` (default 1.1): the power-law exponent. Higher -> more accesses go
  to the top 1% of embeddings (``BipartiteGraph.stats().top1pct_access_share``),
  fewer distinct values are used, a larger max degree.
* ``tail`` (default 0.3): share of draws spread uniformly. Higher -> more
  distinct (mostly once-seen) values, closer to the real ~33.8M distinct
  values of Criteo-Kaggle at full size, and a slightly lower top-1% share.
* ``num_communities`` K (default 64) and ``locality`` L (default 0.7): for a
  sample of community c a fraction ``L + (1 - L) P(g ≡ c mod K)`` (≈ L for
  large K) of its local-field ids fall in c's slice. A partition that puts
  whole communities (samples and their slices) on one worker keeps those
  accesses local: with W workers the local-field remote share drops from
  ``(W-1)/W`` (random placement) to about ``(1 - L)(W-1)/W``. L = 0 gives
  no exploitable locality; K controls how finely the locality is cut (K
  < W cannot be balanced without splitting communities).

Measured (criteo-kaggle, scale 1, defaults; ``docs/synth.md`` has the sweep)
-----------------------------------------------------------------------------
==========  ==============  ===================  =============  =========
samples     edges           active embeddings    top-1% share   Bayes AUC
==========  ==============  ===================  =============  =========
1,000,000   26,000,000      2,847,262            0.765          0.857
10,000,000  260,000,000     15,226,032           0.855          0.856
45,840,617  1,191,856,042   30,133,630           0.878          0.855
==========  ==============  ===================  =============  =========

(real Criteo-Kaggle: 33.8M distinct values in 45.8M samples.) At 1M samples,
8 workers: locality 0 / 0.4 / 0.7 / 0.9 leaves 0.875 / 0.525 / 0.263 / 0.088
of local-field accesses remote under the planted partition (random: 0.875);
skew 0.8 / 1.1 / 1.4 gives a top-1% share of 0.709 / 0.765 / 0.821.

Determinism
-----------
All randomness comes from ``numpy.random.SeedSequence(seed)``: the tables
(value permutations, dense/community parameters) from seeded
``default_rng`` generators, and the samples from a *counter-based* stream:
sample ``i`` draws its uniforms from a SplitMix64 sequence started at
``mix(key ^ mix(i))`` (``key`` from the SeedSequence). Each sample depends
only on ``(seed, i)``, so the output is identical for any ``--chunk-samples``
(and any thread count), and ``--samples`` N is a prefix of ``--samples`` M > N
(apart from the train/test split and the split-dependent Bayes AUC).

Sampling method
---------------
Zipf ranks use Hörmann & Derflinger's *rejection-inversion* (ACM TOMACS
1996; the formulation of Apache Commons' ``RejectionInversionZipfSampler``):
exact for any exponent >= 0 and any finite support, O(1) expected time and
no per-value table, so a 10M-value field costs nothing to set up. The only
per-value tables are the permutations (int32, 4 bytes per embedding, 135 MB
at Criteo-Kaggle scale). Generation runs in a numba kernel chunk by chunk;
memory is bounded by ``chunk_samples``, not by ``num_samples``.

Files written besides the prepared-dataset arrays
--------------------------------------------------
``synth_community.npy`` (int16/int32 [num_samples], each sample's community)
and ``synth_ctr.npy`` (float32 [num_samples], the true click probability);
``dataset.json`` gets a ``"synth"`` object with every knob, the local fields,
``b0`` and ``bayes_auc``. Ids within a sample are unique by construction
(one per field, ascending because field ranges are contiguous), so the
dataset is written without the dedupe pass.

Example
-------
>>> from gmp.datasets.synth import preset_config, synthesize
>>> cfg = preset_config("tiny", num_samples=10_000, seed=0)
>>> meta = synthesize(cfg, "/tmp/tiny-synth", overwrite=True)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, Mapping

import numba
import numpy as np

from .._memory import check_memory
from ..errors import DatasetError
from ..kernels.hashing import mix64, splitmix_uniform
from ..progress import task
from ..scoring import roc_auc
from .format import DatasetWriter, FieldInfo, PreparedDataset

log = logging.getLogger(__name__)

#: bump when the generative story changes (a seed then gives different data).
SYNTH_VERSION = 2

#: Criteo Kaggle (display advertising challenge) per-field cardinalities, C1..C26.
CRITEO_KAGGLE_CARDINALITIES = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)
#: rows of the Criteo Kaggle training file (train.txt).
CRITEO_KAGGLE_SAMPLES = 45_840_617

#: The latent-entity knobs of the ``criteo-kaggle`` preset, fitted to the 1,000
#: public real Criteo rows by ``python bench/fidelity_bench.py --fit-criteo``:
#: ``field_entity`` (which entity each of C1..C26 expresses; -1 = independent)
#: groups the fields by their mutual information on those rows
#: (:func:`gmp.datasets.synth_fit.group_fields`); fidelity 1 alone gives 0.16
#: bits, so ``coherence`` (4 segments) is the bisection of the mean MI above the
#: shuffled control onto the real rows' 0.203 bits; no sessions were needed
#: (C3, the id-like field of entity 0, already has no more distinct values
#: among 1,000 independent samples than among the real rows).
#: The entity counts (at --scale 1) and skew were chosen so that Herald's
#: Table 1 ratio at 1M samples lands near MovieLens-100K's (docs/synth.md).
CRITEO_ENTITY_KNOBS: dict[str, Any] = {
    "entity_counts": (200_000, 50_000, 2_000),
    "entity_skew": 1.1,
    "field_entity": (-1, 0, 0, 0, -1, -1, 1, -1, -1, 1, 1, 0, 1, 2, 0, 0, 1, 0, 0, 0, 0, -1, 2, 0, 0, 0),
    "fidelity": 1.0,
    "segments": 4,
    "coherence": 0.913,
    "session_share": 0.0,
}

#: The issue-37 knobs of ``criteo-kaggle``: the issue-13 entity model above at Criteo's real
#: vocabulary. Per field, the Zipf exponent, the uniform-tail share and the fresh-value share
#: (an id-like field: a rank no entity names; an attribute field: a uniform draw over the field)
#: are the least-squares fit of the expected distinct values (:func:`gmp.datasets.synth_fit.
#: expected_distinct`) to the real rows' counts among their first 100, 200, 500 and 1,000 rows and
#: to the published cardinality at 45,840,617 samples (weight 3), with entity popularity
#: ``(1 - 0.03) Zipf(1.1) + 0.03 Uniform`` (``python bench/fidelity_bench.py --fit-growth``).
CRITEO_VOCAB_KNOBS: dict[str, Any] = {
    **CRITEO_ENTITY_KNOBS,
    "entity_tail": 0.03,
    "field_skews": (1.875, 1.055, 1.1, 1.1, 2.482, 3.345, 0.953, 2.087, 4.0, 1.1, 0.886, 1.1, 0.851,
                   3.255, 0.886, 1.1, 2.649, 0.834, 2.46, 0.6, 1.1, 3.633, 3.167, 1.1, 3.256, 2.412),
    "field_tails": (0.0, 0.0, 0.3, 0.3, 0.0017, 0.0, 0.0001, 0.0, 0.0, 0.3, 0.0, 0.3, 0.0, 0.0, 0.0,
                   0.3, 0.0, 0.0, 0.1858, 0.3, 0.3, 0.0, 0.0, 0.3, 0.0192, 0.3824),
    "field_fresh": (0.0, 0.0, 0.544, 0.1551, 0.0, 0.0, 0.5716, 0.0, 0.0, 0.0636, 0.4561, 0.4678,
                   0.3991, 0.0, 0.2611, 0.3378, 0.0, 0.0, 0.0, 0.0, 0.4105, 0.0, 0.0, 0.0061,
                   0.0024, 0.1354),
}

#: the knobs only the latent-entity model reads (the independent model refuses them)
ENTITY_KNOBS = ("entity_counts", "entity_skew", "field_entity", "fidelity", "field_skews", "segments", "coherence",
                "session_length", "session_share", "fresh", "field_tails", "entity_tail", "field_fresh")

#: the generative models: ``independent`` (fields drawn independently, with
#: community locality; issue 13's "before") and ``entities`` (latent entities).
MODELS = ("independent", "entities")


@dataclass(frozen=True)
class Preset:
    """A named field layout."""

    name: str
    cardinalities: tuple[int, ...]
    default_samples: int
    local_min_values: int
    num_dense: int = 13
    description: str = ""
    model: str = "independent"
    knobs: tuple[tuple[str, Any], ...] = ()

    def field_names(self) -> tuple[str, ...]:
        return tuple(f"C{i + 1}" for i in range(len(self.cardinalities)))


PRESETS: dict[str, Preset] = {
    "criteo-kaggle": Preset(
        "criteo-kaggle", CRITEO_KAGGLE_CARDINALITIES, 1_000_000, 10_000,
        description="the 26 Criteo Kaggle categorical fields (33.8M values at --scale 1) + 13 dense, "
        "latent-entity model with knobs fitted to the public real Criteo rows and to Criteo's vocabulary "
        f"(distinct values growing to the published counts at {CRITEO_KAGGLE_SAMPLES:,} samples; docs/synth.md)",
        model="entities", knobs=tuple(CRITEO_VOCAB_KNOBS.items()),
    ),
    "criteo-kaggle-entity": Preset(
        "criteo-kaggle-entity", CRITEO_KAGGLE_CARDINALITIES, 1_000_000, 10_000,
        description="the default of issue 13 (latent entities fitted to the real Criteo rows at 1,000 rows; "
        "1.36M distinct values at full size, real Criteo has 33.8M), bit-identical to its old output",
        model="entities", knobs=tuple(CRITEO_ENTITY_KNOBS.items()),
    ),
    "criteo-kaggle-independent": Preset(
        "criteo-kaggle-independent", CRITEO_KAGGLE_CARDINALITIES, 1_000_000, 10_000,
        description="the 26 Criteo Kaggle fields drawn independently (skew + community locality of the "
        "high-cardinality fields): the generator before issue 13, a hard case for partitioners",
    ),
    "tiny": Preset(
        "tiny", (3, 12, 50, 300, 2_000, 10_000, 30_000, 60_000), 20_000, 1_000,
        description="8 fields (102,365 values) + 13 dense, for demos and tests",
    ),
}

#: samples used to calibrate the intercept b0 (fixed, so b0 does not depend on --samples).
_PILOT_SAMPLES = 16_384


@dataclass(frozen=True)
class SynthConfig:
    """Every knob of the generator (validated on construction).

    Build one with :func:`preset_config` or directly (tests use custom
    ``cardinalities``). ``local_fields`` marks the fields that draw from
    their community's slice with probability ``locality``.
    """

    cardinalities: tuple[int, ...]
    num_samples: int
    local_fields: tuple[bool, ...] | None = None
    field_names: tuple[str, ...] | None = None
    seed: int = 0
    skew: float = 1.1
    tail: float = 0.3
    num_communities: int = 64
    locality: float = 0.7
    num_dense: int = 13
    test_fraction: float = 0.1
    label_rate: float = 0.256
    sigma_value: float = 0.3
    sigma_dense: float = 0.2
    sigma_community: float = 0.4
    preset: str | None = None
    scale: float = 1.0
    local_min_values: int | None = None
    model: str = "independent"
    entity_counts: tuple[int, ...] = ()
    entity_skew: float = 1.1
    field_entity: tuple[int, ...] | None = None
    fidelity: float | tuple[float, ...] = 0.8
    field_skews: tuple[float, ...] | None = None
    segments: int = 0
    coherence: float = 0.0
    session_length: int = 1
    session_share: float | tuple[float, ...] = 0.0
    fresh: float = 0.0
    field_tails: tuple[float, ...] | None = None
    entity_tail: float | None = None
    field_fresh: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        cards = tuple(int(c) for c in self.cardinalities)
        object.__setattr__(self, "cardinalities", cards)
        if not cards:
            raise DatasetError("synth: need at least one categorical field, got none.")
        if min(cards) < 1:
            raise DatasetError(f"synth: every field needs >= 1 value, got cardinalities {cards}.")
        if sum(cards) > np.iinfo(np.int32).max:
            raise DatasetError(f"synth: {sum(cards):,} embeddings exceed int32 ids; lower `scale`.")
        _check_int("`num_samples`", self.num_samples, 1)
        _check_int("`seed`", self.seed, 0)
        _check_int("`num_communities`", self.num_communities, 1)
        _check_int("num_dense", self.num_dense, 0)
        if self.num_communities > np.iinfo(np.int32).max:  # community ids are stored as int32
            raise DatasetError(f"synth: `num_communities` must be at most {np.iinfo(np.int32).max:,}, got "
                               f"{self.num_communities:,}.")
        # parameters per community: a dense shift per dense column, a bias and a label offset (float64)
        check_memory(8 * (self.num_dense + 2) * self.num_communities, error=DatasetError,
                     what=f"synth: `num_communities` {self.num_communities:,} (per-community parameters)",
                     fix="use fewer communities.")
        _check_range("`skew`", self.skew, 0.0, 10.0)
        _check_range("`tail`", self.tail, 0.0, 1.0)
        _check_range("`locality`", self.locality, 0.0, 1.0)
        _check_range("`scale`", self.scale, 0.0, math.inf, low_open=True)
        if not 0.0 <= float(self.test_fraction) < 1.0:
            raise DatasetError(f"synth: `test_fraction` must be in [0, 1), got {self.test_fraction}.")
        if not 0.0 < float(self.label_rate) < 1.0:
            raise DatasetError(f"synth: label_rate must be in (0, 1), got {self.label_rate}.")
        for name in ("sigma_value", "sigma_dense", "sigma_community"):
            _check_range(name, getattr(self, name), 0.0, 100.0)
        if self.local_fields is None:
            object.__setattr__(self, "local_fields", tuple(c >= 2 * self.num_communities for c in cards))
        local = tuple(bool(x) for x in self.local_fields)
        if len(local) != len(cards):
            raise DatasetError(f"synth: local_fields has {len(local)} entries for {len(cards)} fields.")
        # A community needs >= 2 values of a field for its slice to mean anything.
        local = tuple(x and c >= 2 * self.num_communities for x, c in zip(local, cards))
        object.__setattr__(self, "local_fields", local)
        if self.field_names is None:
            object.__setattr__(self, "field_names", tuple(f"C{i + 1}" for i in range(len(cards))))
        if len(self.field_names) != len(cards):
            raise DatasetError(f"synth: {len(self.field_names)} field names for {len(cards)} fields.")
        self._check_entities()

    def _check_entities(self) -> None:
        if self.model not in MODELS:
            raise DatasetError(f"synth: model must be one of {MODELS}, got {self.model!r}.")
        nf = len(self.cardinalities)
        counts = tuple(int(c) for c in self.entity_counts)
        object.__setattr__(self, "entity_counts", counts)
        if self.model == "independent":
            self._refuse_entity_knobs()
            return
        object.__setattr__(self, "local_fields", (False,) * nf)
        if not counts or min(counts) < 1:
            raise DatasetError(f"synth: entity_counts must be one or more integers >= 1, got {counts}.")
        _check_range("`entity_skew`", self.entity_skew, 0.0, 10.0)
        fe = tuple(int(t) for t in (self.field_entity if self.field_entity is not None else [0] * nf))
        if len(fe) != nf or any(t < -1 or t >= len(counts) for t in fe):
            raise DatasetError(f"synth: field_entity needs {nf} entries in [-1, {len(counts) - 1}] "
                               f"(-1 = independent field), got {fe}.")
        object.__setattr__(self, "field_entity", fe)
        fid = self.fidelity
        fid = tuple(float(x) for x in fid) if isinstance(fid, (tuple, list, np.ndarray)) else float(fid)
        for x in (fid if isinstance(fid, tuple) else (fid,)):
            _check_range("`fidelity`", x, 0.0, 1.0)
        if isinstance(fid, tuple) and len(fid) != nf:
            raise DatasetError(f"synth: fidelity has {len(fid)} entries for {nf} fields.")
        object.__setattr__(self, "fidelity", fid)
        _check_int("`segments`", self.segments, 0)
        _check_int("session_length", self.session_length, 1)
        sh = self.session_share
        sh = tuple(float(x) for x in sh) if isinstance(sh, (tuple, list, np.ndarray)) else float(sh)
        for x in (sh if isinstance(sh, tuple) else (sh,)):
            _check_range("session_share", x, 0.0, 1.0)
        if isinstance(sh, tuple) and len(sh) != len(counts):
            raise DatasetError(f"synth: session_share has {len(sh)} entries for {len(counts)} entity types.")
        object.__setattr__(self, "session_share", sh)
        _check_range("`coherence`", self.coherence, 0.0, 1.0)
        _check_range("`fresh`", self.fresh, 0.0, 1.0)
        if self.field_skews is not None:
            fs = tuple(float(x) for x in self.field_skews)
            if len(fs) != nf:
                raise DatasetError(f"synth: field_skews has {len(fs)} entries for {nf} fields.")
            for x in fs:
                _check_range("field_skews", x, 0.0, 10.0)
            object.__setattr__(self, "field_skews", fs)
        for name in ("field_tails", "field_fresh"):
            v = getattr(self, name)
            if v is not None:
                v = tuple(float(x) for x in v)
                if len(v) != nf:
                    raise DatasetError(f"synth: {name} has {len(v)} entries for {nf} fields.")
                for x in v:
                    _check_range(name, x, 0.0, 1.0)
                object.__setattr__(self, name, v)
        if self.field_fresh is not None and self.fresh:
            raise DatasetError(f"synth: `fresh` sets one fresh share for the id-like fields, but this model already "
                               f"has one per field (field_fresh, the criteo-kaggle preset's); got `fresh` "
                               f"{self.fresh}. Use `preset` criteo-kaggle-entity for `fresh`.")
        if self.entity_tail is not None:
            _check_range("entity_tail", self.entity_tail, 0.0, 1.0)
            object.__setattr__(self, "entity_tail", float(self.entity_tail))

    def _refuse_entity_knobs(self) -> None:
        """The independent model reads none of :data:`ENTITY_KNOBS`: one set to other than its default is
        refused, not dropped (the output would be the default's, and ``to_json`` would not record it)."""
        defaults = {f.name: f.default for f in dataclass_fields(SynthConfig)}
        given = [name for name in ENTITY_KNOBS if _differs(getattr(self, name), defaults[name])]
        if given:
            raise _entity_knobs_error(given, self.preset)

    def field_fidelity(self) -> np.ndarray:
        """Per-field probability that the value is the entity's attribute (0 for independent fields)."""
        f = np.broadcast_to(np.asarray(self.fidelity, dtype=np.float64), (self.num_fields,)).copy()
        f[np.asarray(self.field_entity) < 0] = 0.0
        return f

    def skews(self) -> np.ndarray:
        """Per-field Zipf exponent (``field_skews`` or ``skew`` for every field)."""
        if self.field_skews is None:
            return np.full(self.num_fields, float(self.skew))
        return np.asarray(self.field_skews, dtype=np.float64)

    def tails(self) -> np.ndarray:
        """Per-field uniform-tail share (``field_tails`` or ``tail`` for every field)."""
        if self.field_tails is None:
            return np.full(self.num_fields, float(self.tail))
        return np.asarray(self.field_tails, dtype=np.float64)

    def fresh_shares(self) -> np.ndarray:
        """Per-field probability of a fresh value (entity model): ``field_fresh``, or ``fresh`` on the
        id-like fields (at least as many values as their type has entities, and more) and 0 elsewhere."""
        if self.field_fresh is not None:
            out = np.asarray(self.field_fresh, dtype=np.float64).copy()
        else:
            out = np.zeros(self.num_fields)
            for f, (n, t) in enumerate(zip(self.cardinalities, self.field_entity)):
                if t >= 0 and self.entity_counts[t] < n:
                    out[f] = float(self.fresh)
        out[np.asarray(self.field_entity) < 0] = 0.0
        return out

    @property
    def num_fields(self) -> int:
        return len(self.cardinalities)

    @property
    def num_embeddings(self) -> int:
        return int(sum(self.cardinalities))

    @property
    def offsets(self) -> np.ndarray:
        out = np.zeros(self.num_fields, dtype=np.int64)
        np.cumsum(self.cardinalities[:-1], out=out[1:])
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if self.model == "independent":
            # dataset.json of the independent model stays as it was before the entity model existed
            for k in ("model", *ENTITY_KNOBS):  # none is set (refused on construction)
                del d[k]
        else:
            if not self.fresh:
                del d["fresh"]  # dataset.json without the knob stays as it was before it existed
            for k in ("field_tails", "entity_tail", "field_fresh"):  # likewise (issue 37's knobs)
                if d[k] is None:
                    del d[k]
                elif k != "entity_tail":
                    d[k] = list(d[k])
            d["entity_counts"] = list(self.entity_counts)
            d["field_entity"] = list(self.field_entity)
            d["fidelity"] = list(self.fidelity) if isinstance(self.fidelity, tuple) else self.fidelity
            d["field_skews"] = None if self.field_skews is None else list(self.field_skews)
            d["session_share"] = (list(self.session_share) if isinstance(self.session_share, tuple)
                                  else self.session_share)
        d["cardinalities"] = list(self.cardinalities)
        d["local_fields"] = [n for n, loc in zip(self.field_names, self.local_fields) if loc]
        d["field_names"] = list(self.field_names)
        return d


def _entity_knobs_error(names: list[str], preset: str | None) -> DatasetError:
    """The refusal of knobs of :data:`ENTITY_KNOBS` on the independent model (one line)."""
    one = len(names) == 1
    where = f"preset {preset!r}" if preset is not None else "the independent model"
    return DatasetError(f"synth: {', '.join(f'`{k}`' for k in names)} appl{'ies' if one else 'y'} to the "
                        f"latent-entity model ('criteo-kaggle' or `like`), not to {where}, which draws every field "
                        f"from one `skew` and `tail`; leave {'it' if one else 'them'} out or choose an entity preset.")


def _differs(value: Any, default: Any) -> bool:
    """Whether a knob's value is other than its default (a list or array compared as a tuple)."""
    if isinstance(value, (list, np.ndarray)):
        value = tuple(value)
    try:
        return bool(value != default)
    except (TypeError, ValueError):
        return True


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise DatasetError(f"synth: {name} must be an integer >= {low}, got {value!r}.")


def _check_range(name: str, value: Any, low: float, high: float, *, low_open: bool = False) -> None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise DatasetError(f"synth: {name} must be a number, got {value!r}.") from None
    bad = (v <= low if low_open else v < low) or v > high or math.isnan(v)
    if bad:
        lo = "(" if low_open else "["
        raise DatasetError(f"synth: {name} must be in {lo}{low}, {high}], got {value!r}.")


#: the SynthConfig fields a preset sets (its layout and model), which :func:`preset_config` refuses as knobs
PRESET_FIELDS = ("cardinalities", "num_dense", "field_names", "local_fields", "model")

#: ``--scale`` never takes a field below min(its cardinality, SCALE_FLOOR) values
SCALE_FLOOR = 100


def preset_config(preset: str, *, num_samples: int | None = None, scale: float = 1.0,
                  local_min_values: int | None = None, **knobs: Any) -> SynthConfig:
    """The :class:`SynthConfig` of a named preset.

    Cardinalities are multiplied by ``scale`` (rounded), but a field keeps at
    least ``min(c, SCALE_FLOOR)`` of its c values: scaling shrinks the big
    tables while Criteo's small fields (3 to 27 values) stay as they are
    instead of collapsing into constants (one value every sample uses). A field
    is local when its *unscaled* cardinality is >= ``local_min_values``
    (the preset's default when None) and its scaled one >= 2 * communities.

    Raises
    ------
    DatasetError
        For an unknown preset or a bad knob value.
    """
    if preset not in PRESETS:
        raise DatasetError(f"synth: unknown preset {preset!r}; choose one of {sorted(PRESETS)}.")
    fixed = [f"`{k}`" for k in PRESET_FIELDS if k in knobs]
    if fixed:
        one = len(fixed) == 1
        raise DatasetError(f"synth: {', '.join(fixed)} {'is' if one else 'are'} set by preset {preset!r}, not "
                           f"{'a knob' if one else 'knobs'}; for another layout build a SynthConfig and pass it to "
                           f"gmp.datasets.synth.synthesize.")
    p = PRESETS[preset]
    _check_range("`scale`", scale, 0.0, math.inf, low_open=True)
    if p.model == "entities":
        if local_min_values is not None or "locality" in knobs:
            raise DatasetError(f"synth: preset {preset!r} has no community locality (latent-entity model); "
                               "`locality` and `local_threshold` apply to 'criteo-kaggle-independent' and 'tiny'.")
        merged = dict(p.knobs)
        # one --skew / --tail for every field replaces the preset's per-field fit (issue 37's knobs)
        if "skew" in knobs:
            merged.pop("field_skews", None)
        if "tail" in knobs:
            merged.pop("field_tails", None)
            merged.pop("entity_tail", None)
        merged.update(knobs)
        counts = tuple(max(min(c, SCALE_FLOOR), int(round(c * float(scale))))
                       for c in merged.pop("entity_counts"))
        return SynthConfig(
            cardinalities=_scaled(p.cardinalities, scale),
            num_samples=p.default_samples if num_samples is None else num_samples,
            local_fields=(False,) * len(p.cardinalities),
            field_names=p.field_names(),
            num_dense=p.num_dense,
            preset=preset,
            scale=float(scale),
            model="entities",
            entity_counts=counts,
            **merged,
        )
    entity_only = [k for k in ENTITY_KNOBS if k in knobs]  # given, even at the entity model's default
    if entity_only:
        raise _entity_knobs_error(entity_only, preset)
    threshold = p.local_min_values if local_min_values is None else local_min_values
    _check_int("`local_threshold`", threshold, 1)
    cards = _scaled(p.cardinalities, scale)
    local = tuple(c >= threshold for c in p.cardinalities)
    return SynthConfig(
        cardinalities=cards,
        num_samples=p.default_samples if num_samples is None else num_samples,
        local_fields=local,
        field_names=p.field_names(),
        num_dense=p.num_dense,
        preset=preset,
        scale=float(scale),
        local_min_values=int(threshold),
        **knobs,
    )


def _scaled(cards: tuple[int, ...], scale: float) -> tuple[int, ...]:
    return tuple(max(min(c, SCALE_FLOOR), int(round(c * float(scale)))) for c in cards)


# ---------------------------------------------------------------------------
# The numba kernels: a counter-based uniform stream and rejection-inversion Zipf.

_S11 = np.uint64(11)
_TWO_M53 = 1.0 / 9007199254740992.0
_SQRT3 = math.sqrt(3.0)
_mix64 = mix64  # SplitMix64 (gmp.kernels.hashing: one copy for all of gmp)
_uniform = splitmix_uniform


@numba.njit(cache=True, nogil=True)
def _helper1(x):  # pragma: no cover - compiled
    if abs(x) > 1e-8:
        return math.log1p(x) / x
    return 1.0 - x * (0.5 - x * (1.0 / 3.0 - x * 0.25))


@numba.njit(cache=True, nogil=True)
def _helper2(x):  # pragma: no cover - compiled
    if abs(x) > 1e-8:
        return math.expm1(x) / x
    return 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + x * 0.25))


@numba.njit(cache=True, nogil=True)
def _h_integral(x, a):  # pragma: no cover - compiled
    lx = math.log(x)
    return _helper2((1.0 - a) * lx) * lx


@numba.njit(cache=True, nogil=True)
def _h(x, a):  # pragma: no cover - compiled
    return math.exp(-a * math.log(x))


@numba.njit(cache=True, nogil=True)
def _h_integral_inverse(x, a):  # pragma: no cover - compiled
    t = x * (1.0 - a)
    if t < -1.0:
        t = -1.0
    return math.exp(_helper1(t) * x)


@numba.njit(cache=True, nogil=True)
def _zipf_params(n, a):  # pragma: no cover - compiled
    """(h_integral_x1, h_integral_n, s) of rejection-inversion for support 1..n."""
    hx1 = _h_integral(1.5, a) - 1.0
    hn = _h_integral(n + 0.5, a)
    s = 2.0 - _h_integral_inverse(_h_integral(2.5, a) - _h(2.0, a), a)
    return hx1, hn, s


@numba.njit(cache=True, nogil=True)
def _zipf_rank(state, n, a, hx1, hn, s):  # pragma: no cover - compiled
    """A 0-based rank g with P(g) ∝ (g+1)^-a, g < n (Hörmann & Derflinger 1996)."""
    if n <= 1:
        return state, 0
    while True:
        state, v = _uniform(state)
        u = hn + v * (hx1 - hn)
        x = _h_integral_inverse(u, a)
        k = np.int64(x + 0.5)
        if k < 1:
            k = 1
        elif k > n:
            k = n
        if k - x <= s or u >= _h_integral(k + 0.5, a) - _h(np.float64(k), a):
            return state, k - 1


@numba.njit(cache=True, nogil=True, inline="always")
def _draw_rank(state, u, n, tail, skew, p0, p1, p2):  # pragma: no cover - compiled
    """A rank in ``[0, n)``: uniform over the long tail when ``u < tail`` (``u`` reused, scaled),
    else a Zipf draw from ``state``; returns ``(state, rank)``. Every draw of both generators."""
    if u < tail:
        g = np.int64(u / tail * n)
        if g >= n:
            g = n - 1
        return state, g
    return _zipf_rank(state, n, skew, p0, p1, p2)


@numba.njit(cache=True, nogil=True, inline="always")
def _dense_and_label(state, i, acc, c, num_dense, dense, dense_mu, dense_coef, comm_shift, logit,
                     label):  # pragma: no cover - compiled
    """Sample i's dense features (log-normal counts around its community's shift, Box-Muller pairs)
    and its label from the hidden logit ``acc`` plus the dense terms; returns the RNG state.
    Shared by both generators (same operations in the same order: the output is unchanged)."""
    j = 0
    while j < num_dense:
        state, u1 = _uniform(state)
        state, u2 = _uniform(state)
        rad = math.sqrt(-2.0 * math.log(1.0 - u1))
        for t in range(2):
            if j >= num_dense:
                break
            zz = rad * (math.cos(2.0 * math.pi * u2) if t == 0 else math.sin(2.0 * math.pi * u2))
            zz += comm_shift[c, j]
            dense[i, j] = math.log1p(math.floor(math.exp(dense_mu[j] + zz)))
            acc += dense_coef[j] * zz
            j += 1
    logit[i] = acc
    state, u = _uniform(state)
    label[i] = 1.0 if u * (1.0 + math.exp(-acc)) < 1.0 else 0.0
    return state


@numba.njit(cache=True, nogil=True, parallel=True)
def _generate(start, count, key, wkey, num_comm, locality, tail, skew,
              card, offset, is_local, perm, gparams, lparams, value_scale,
              dense_mu, dense_coef, comm_shift, comm_bias, b0,
              ids, dense, logit, label, community):  # pragma: no cover - compiled
    num_fields = card.size
    num_dense = dense_mu.size
    # Samples are independent (counter-based stream), so the parallel loop
    # gives bit-identical output for any thread count.
    for i in numba.prange(count):
        state = _mix64(key ^ _mix64(np.uint64(start + i)))
        state, u = _uniform(state)
        c = np.int64(u * num_comm)
        if c >= num_comm:
            c = num_comm - 1
        community[i] = c
        acc = b0 + comm_bias[c]
        for f in range(num_fields):
            n = card[f]
            in_comm = False
            if is_local[f]:
                state, u = _uniform(state)
                in_comm = u < locality
            state, u = _uniform(state)
            if in_comm:
                q = n // num_comm
                rem = n - q * num_comm
                p = 0 if c < rem else 1
                size = q + 1 if c < rem else q
                state, r = _draw_rank(state, u, size, tail, skew, lparams[f, p, 0], lparams[f, p, 1],
                                      lparams[f, p, 2])
                g = r * num_comm + c
            else:
                state, g = _draw_rank(state, u, n, tail, skew, gparams[f, 0], gparams[f, 1], gparams[f, 2])
            e = offset[f] + perm[offset[f] + g]
            ids[i, f] = e
            hw = np.float64(_mix64(wkey ^ _mix64(np.uint64(e))) >> _S11) * _TWO_M53
            acc += value_scale[f] * (2.0 * hw - 1.0)
        state = _dense_and_label(state, i, acc, c, num_dense, dense, dense_mu, dense_coef, comm_shift, logit, label)


@numba.njit(cache=True, nogil=True, parallel=True)
def _generate_entities(start, count, key, wkey, akey, skey, session_length, session_share, num_comm, etail, ftail, fskew, card, offset, perm, gparams,
                       ent_count, ent_skew, eparams, field_entity, fidelity, segments, coherence, sparams, value_scale,
                       fresh, dense_mu, dense_coef, comm_shift, comm_bias, b0,
                       ids, dense, logit, label, community, entity):  # pragma: no cover - compiled
    """The latent-entity model (see the module docstring, "The entity model")."""
    num_fields = card.size
    num_types = ent_count.size
    num_dense = dense_mu.size
    for i in numba.prange(count):
        state = _mix64(key ^ _mix64(np.uint64(start + i)))
        # 1. one entity of every type, popularity (1 - tail) Zipf(entity_skew) + tail uniform; with
        #    probability session_share[t] the entity of the sample's session (block of session_length
        #    consecutive samples) instead, drawn the same way from a stream keyed by (type, block)
        for t in range(num_types):
            m = ent_count[t]
            if session_share[t] > 0.0:
                state, u = _uniform(state)
                if u < session_share[t]:
                    block = np.uint64((start + i) // session_length)
                    s3 = _mix64(skey ^ _mix64(block * np.uint64(64) + np.uint64(t)))
                    s3, u = _uniform(s3)
                    s3, e = _draw_rank(s3, u, m, etail, ent_skew, eparams[t, 0], eparams[t, 1], eparams[t, 2])
                    entity[i, t] = e
                    continue
            state, u = _uniform(state)
            state, e = _draw_rank(state, u, m, etail, ent_skew, eparams[t, 0], eparams[t, 1], eparams[t, 2])
            entity[i, t] = e
        c = entity[i, 0] % num_comm
        community[i] = c
        acc = b0 + comm_bias[c]
        # 2. every field: its entity's attribute with probability fidelity[f], else a fresh draw
        for f in range(num_fields):
            n = card[f]
            t = field_entity[f]
            state, u = _uniform(state)
            if t >= 0 and u < fidelity[f]:
                e = np.int64(entity[i, t])
                if ent_count[t] <= n:
                    g = e  # the field names the entity itself (an id-like field)
                    # ... or, with probability fresh, a rank no entity names (uniform): the once-seen
                    # tail. No draw at all when fresh == 0, so older datasets keep their bytes.
                    if fresh[f] > 0.0 and ent_count[t] < n:
                        state, u4 = _uniform(state)
                        if u4 < fresh[f]:
                            span = n - ent_count[t]
                            r = np.int64(u4 / fresh[f] * span)
                            g = ent_count[t] + (r if r < span else span - 1)
                else:
                    # with probability fresh[f] (issue 37; no draw when 0, so older data keep their
                    # bytes) a fresh value: uniform over the whole field, not the entity's attribute
                    g = -1
                    if fresh[f] > 0.0:
                        state, u4 = _uniform(state)
                        if u4 < fresh[f]:
                            g = np.int64(u4 / fresh[f] * n)
                            if g >= n:
                                g = n - 1
                    if g < 0:
                        # an attribute shared by many entities: a draw seeded by (field, entity) alone.
                        # With probability coherence it is drawn inside the slice of ranks of the
                        # entity's segment (g = r * segments + seg, like the independent model's community
                        # slices), so the attributes of one entity depend on each other (through its
                        # segment), not only through repeated entities.
                        s2 = _mix64(akey ^ _mix64(np.uint64(f) * np.uint64(4294967296) + np.uint64(e)))
                        sliced = False
                        if segments > 0:
                            s2, u3 = _uniform(s2)
                            sliced = u3 < coherence
                        s2, u2 = _uniform(s2)
                        if sliced:
                            seg = np.int64(_mix64(akey ^ _mix64(np.uint64(e) + np.uint64(t + 1) * np.uint64(4294967296)))
                                           % np.uint64(segments))
                            if seg >= n:
                                g = seg % n
                            else:
                                q = n // segments
                                rem = n - q * segments
                                size = q + 1 if seg < rem else q
                                p = 0 if seg < rem else 1
                                if u2 < ftail[f]:
                                    r = np.int64(u2 / ftail[f] * size)
                                    if r >= size:
                                        r = size - 1
                                else:
                                    s2, r = _zipf_rank(s2, size, fskew[f], sparams[f, p, 0], sparams[f, p, 1],
                                                       sparams[f, p, 2])
                                g = r * segments + seg
                        elif u2 < ftail[f]:
                            g = np.int64(u2 / ftail[f] * n)
                            if g >= n:
                                g = n - 1
                        else:
                            s2, g = _zipf_rank(s2, n, fskew[f], gparams[f, 0], gparams[f, 1], gparams[f, 2])
            else:
                state, u = _uniform(state)
                state, g = _draw_rank(state, u, n, ftail[f], fskew[f], gparams[f, 0], gparams[f, 1], gparams[f, 2])
            e_id = offset[f] + perm[offset[f] + g]
            ids[i, f] = e_id
            hw = np.float64(_mix64(wkey ^ _mix64(np.uint64(e_id))) >> _S11) * _TWO_M53
            acc += value_scale[f] * (2.0 * hw - 1.0)
        # 3. dense and 4. label, as in the independent model
        state = _dense_and_label(state, i, acc, c, num_dense, dense, dense_mu, dense_coef, comm_shift, logit, label)


# ---------------------------------------------------------------------------


@dataclass
class SynthChunk:
    """Samples ``[start, start + len)`` of a synthetic dataset, in memory."""

    start: int
    ids: np.ndarray        # int32 [n, num_fields], global embedding ids (ascending per row)
    dense: np.ndarray      # float32 [n, num_dense]
    labels: np.ndarray     # float32 [n]
    ctr: np.ndarray        # float32 [n], true click probability
    logit: np.ndarray      # float64 [n]
    community: np.ndarray  # int32 [n]
    entity: np.ndarray | None = None  # int32 [n, num_types], the latent entities (entity model only)


class SyntheticCTR:
    """A seeded generator: builds its tables once, then makes any sample range.

    ``generate(a, b)`` returns samples ``a..b-1``; each depends only on the
    seed and its index, so chunks can be made in any order and size.
    """

    def __init__(self, config: SynthConfig, *, calibrate: bool = True):
        self.config = cfg = config
        ss = np.random.SeedSequence(cfg.seed)
        self._key, self._wkey = (np.uint64(x) for x in ss.generate_state(2, dtype=np.uint64))
        self.card = np.asarray(cfg.cardinalities, dtype=np.int64)
        self.offset = cfg.offsets
        self.is_local = np.asarray(cfg.local_fields, dtype=np.bool_)
        self.perm = _permutations(cfg)
        self._inverse_perm: dict[int, np.ndarray] = {}
        k = cfg.num_communities
        self.gparams = np.zeros((cfg.num_fields, 3), dtype=np.float64)
        self.lparams = np.zeros((cfg.num_fields, 2, 3), dtype=np.float64)
        for f, n in enumerate(cfg.cardinalities):
            self.gparams[f] = _zipf_params(float(n), cfg.skew)
            q = n // k
            self.lparams[f, 0] = _zipf_params(float(max(q + 1, 1)), cfg.skew)
            self.lparams[f, 1] = _zipf_params(float(max(q, 1)), cfg.skew)
        rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(2,)))
        d = cfg.num_dense
        self.dense_mu = rng.uniform(0.0, 3.0, size=d)
        self.dense_coef = rng.normal(0.0, cfg.sigma_dense, size=d)
        self.comm_shift = rng.normal(0.0, 0.5, size=(k, d))
        self.comm_bias = rng.normal(0.0, cfg.sigma_community, size=k)
        # Uniform weights on [-sqrt(3) s, sqrt(3) s] have standard deviation s.
        self.value_scale = np.full(cfg.num_fields, _SQRT3 * cfg.sigma_value, dtype=np.float64)
        if cfg.model == "entities":
            self._akey = np.uint64(np.random.SeedSequence(cfg.seed, spawn_key=(3,)).generate_state(1, np.uint64)[0])
            self._skey = np.uint64(np.random.SeedSequence(cfg.seed, spawn_key=(4,)).generate_state(1, np.uint64)[0])
            share = cfg.session_share
            self.session_share = np.broadcast_to(np.asarray(share, dtype=np.float64),
                                                 (len(cfg.entity_counts),)).copy()
            self.fskew = cfg.skews()
            self.ftail = cfg.tails()
            self.etail = float(cfg.tail if cfg.entity_tail is None else cfg.entity_tail)
            self.fresh = cfg.fresh_shares()
            for f, n in enumerate(cfg.cardinalities):
                self.gparams[f] = _zipf_params(float(n), self.fskew[f])
            self.ent_count = np.asarray(cfg.entity_counts, dtype=np.int64)
            self.eparams = np.array([_zipf_params(float(m), float(cfg.entity_skew)) for m in cfg.entity_counts],
                                    dtype=np.float64).reshape(-1, 3)
            self.field_entity = np.asarray(cfg.field_entity, dtype=np.int64)
            self.fidelity = cfg.field_fidelity()
            # Zipf parameters of the segment slices (sizes q + 1 and q, q = n // segments)
            self.sparams = np.zeros((cfg.num_fields, 2, 3), dtype=np.float64)
            num_seg = max(1, cfg.segments)
            for f, n in enumerate(cfg.cardinalities):
                q = n // num_seg
                self.sparams[f, 0] = _zipf_params(float(max(q + 1, 1)), self.fskew[f])
                self.sparams[f, 1] = _zipf_params(float(max(q, 1)), self.fskew[f])
        self.b0 = self._calibrate_intercept() if calibrate else 0.0

    def _raw(self, start: int, stop: int, b0: float) -> SynthChunk:
        cfg = self.config
        n = stop - start
        ids = np.empty((n, cfg.num_fields), dtype=np.int32)
        dense = np.empty((n, cfg.num_dense), dtype=np.float32)
        logit = np.empty(n, dtype=np.float64)
        labels = np.empty(n, dtype=np.float32)
        comm = np.empty(n, dtype=np.int32)
        if cfg.model == "entities":
            ent = np.empty((n, len(cfg.entity_counts)), dtype=np.int32)
            _generate_entities(start, n, self._key, self._wkey, self._akey, self._skey, np.int64(cfg.session_length),
                               self.session_share, cfg.num_communities, self.etail, self.ftail,
                               self.fskew, self.card, self.offset, self.perm, self.gparams, self.ent_count,
                               float(cfg.entity_skew), self.eparams, self.field_entity, self.fidelity,
                               np.int64(cfg.segments), float(cfg.coherence), self.sparams, self.value_scale,
                               self.fresh, self.dense_mu, self.dense_coef, self.comm_shift, self.comm_bias,
                               float(b0), ids, dense, logit, labels, comm, ent)
            ctr = (1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
            return SynthChunk(start, ids, dense, labels, ctr, logit, comm, ent)
        _generate(start, n, self._key, self._wkey, cfg.num_communities, float(cfg.locality), float(cfg.tail),
                  float(cfg.skew), self.card, self.offset, self.is_local, self.perm, self.gparams,
                  self.lparams, self.value_scale, self.dense_mu, self.dense_coef, self.comm_shift,
                  self.comm_bias, float(b0), ids, dense, logit, labels, comm)
        ctr = (1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
        return SynthChunk(start, ids, dense, labels, ctr, logit, comm)

    def _calibrate_intercept(self) -> float:
        """b0 with mean sigmoid(b0 + logit) == label_rate on a fixed pilot (bisection)."""
        pilot = self._raw(0, _PILOT_SAMPLES, 0.0).logit
        lo, hi = -30.0, 30.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            rate = float(np.mean(1.0 / (1.0 + np.exp(-(pilot + mid)))))
            lo, hi = (mid, hi) if rate < self.config.label_rate else (lo, mid)
        return 0.5 * (lo + hi)

    def generate(self, start: int, stop: int) -> SynthChunk:
        """Samples ``start .. stop-1`` (any range; independent of other calls)."""
        if not 0 <= start <= stop:
            raise DatasetError(f"synth: bad sample range [{start}, {stop}).")
        return self._raw(int(start), int(stop), self.b0)

    def owner_community(self, field_index: int, local_ids: np.ndarray) -> np.ndarray:
        """Community whose slice holds each value of a local field (-1 for global fields).

        ``local_ids`` are ids within the field (global id minus the field offset).
        """
        cfg = self.config
        local_ids = np.asarray(local_ids, dtype=np.int64)
        if not cfg.local_fields[field_index]:
            return np.full(local_ids.shape, -1, dtype=np.int64)
        inv = self._inverse_perm.get(field_index)
        if inv is None:
            a, n = int(self.offset[field_index]), cfg.cardinalities[field_index]
            inv = np.empty(n, dtype=np.int64)
            inv[self.perm[a : a + n]] = np.arange(n)
            self._inverse_perm[field_index] = inv
        return inv[local_ids] % cfg.num_communities

    def rank_of(self, field_index: int, local_ids: np.ndarray) -> np.ndarray:
        """Popularity rank (0 = most popular) of values of a field."""
        a, n = int(self.offset[field_index]), self.config.cardinalities[field_index]
        inv = np.empty(n, dtype=np.int64)
        inv[self.perm[a : a + n]] = np.arange(n)
        return inv[np.asarray(local_ids, dtype=np.int64)]


def _permutations(cfg: SynthConfig) -> np.ndarray:
    """One seeded random permutation (rank -> local id) per field, concatenated (int32)."""
    perm = np.empty(cfg.num_embeddings, dtype=np.int32)
    for f, (n, a) in enumerate(zip(cfg.cardinalities, cfg.offsets)):
        rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(1, f)))
        perm[a : a + n] = rng.permutation(n).astype(np.int32)
    return perm


def rank_pmf(n: int, skew: float, tail: float) -> np.ndarray:
    """Analytic probability of each popularity rank of an ``n``-valued field (float64 [n])."""
    p = np.arange(1, n + 1, dtype=np.float64) ** -float(skew)
    p /= p.sum()
    return (1.0 - tail) * p + tail / n


def fields_of(config: SynthConfig) -> list[FieldInfo]:
    """The FieldInfo list of a synthetic dataset: dense I1..I13, then the categorical fields."""
    out = [FieldInfo(f"I{j + 1}", "dense", 0, None, column=j) for j in range(config.num_dense)]
    for name, n, off in zip(config.field_names, config.cardinalities, config.offsets):
        out.append(FieldInfo(name, "categorical", int(n), int(off), missing_id=None, rare_id=None))
    return out


def _min_count_remap(gen: SyntheticCTR, chunk_samples: int, min_count: int
                     ) -> tuple[np.ndarray, list[FieldInfo], int]:
    """``gmp data import --min-count``'s cut for a synthetic dataset: a first pass counts every value, then
    each field gets a rare id (its first id) for the values seen fewer than ``min_count`` times, and its
    kept values the next ids in id order. Returns the id map (int32 over the generator's ids), the fields
    and the number of embeddings."""
    cfg = gen.config
    counts = np.zeros(cfg.num_embeddings, dtype=np.int64)
    with task(f"Counting values for --min-count {min_count}", total=cfg.num_samples) as advance:
        for s0 in range(0, cfg.num_samples, chunk_samples):
            s1 = min(cfg.num_samples, s0 + chunk_samples)
            u, c = np.unique(gen.generate(s0, s1).ids, return_counts=True)
            counts[u] += c
            advance(s1 - s0)
    remap = np.empty(cfg.num_embeddings, dtype=np.int32)
    fields = [f for f in fields_of(cfg) if f.kind == "dense"]
    base = 0
    for name, n, off in zip(cfg.field_names, cfg.cardinalities, cfg.offsets):
        keep = counts[off:off + n] >= min_count
        remap[off:off + n] = np.where(keep, base + np.cumsum(keep), base)
        kept = int(keep.sum())
        fields.append(FieldInfo(name, "categorical", kept + 1, base, missing_id=None, rare_id=base))
        base += kept + 1
    return remap, fields, base


def synthesize(config: SynthConfig, out: str | os.PathLike, *, chunk_samples: int = 1 << 18,
               overwrite: bool = False, min_count: int = 1) -> dict[str, Any]:
    """Generate ``config.num_samples`` samples and write a prepared dataset to ``out``.

    Memory is bounded by ``chunk_samples`` (plus the permutation tables and
    the writer's final pass), not by the number of samples. ``min_count`` > 1
    cuts the values as ``gmp data import --min-count`` does (a first pass
    counts them; values seen fewer times share their field's rare id; the ids
    are renumbered). Returns the ``dataset.json`` header.
    """
    _check_int("`chunk_samples`", chunk_samples, 1)
    _check_int("`min_count`", min_count, 1)
    cfg = config
    gen = SyntheticCTR(cfg)
    remap, fields, num_embeddings = None, fields_of(cfg), cfg.num_embeddings
    if min_count > 1:
        remap, fields, num_embeddings = _min_count_remap(gen, chunk_samples, min_count)
    n = cfg.num_samples
    num_test = int(round(n * cfg.test_fraction))
    eval_start = n - num_test if num_test else 0
    comm_dtype = np.int16 if cfg.num_communities <= np.iinfo(np.int16).max else np.int32
    eval_labels: list[np.ndarray] = []
    eval_ctr: list[np.ndarray] = []
    with DatasetWriter(out, num_dense=cfg.num_dense, overwrite=overwrite, provisional_dtype=np.int32) as w:
        comm_out = np.lib.format.open_memmap(w.tmpdir / "synth_community.npy", mode="w+", dtype=comm_dtype,
                                             shape=(n,))
        ctr_out = np.lib.format.open_memmap(w.tmpdir / "synth_ctr.npy", mode="w+", dtype=np.float32, shape=(n,))
        lengths = np.full(min(chunk_samples, n), cfg.num_fields, dtype=np.int32)
        with task(f"Generating {n:,} synthetic samples", total=n) as advance:
            for s0 in range(0, n, chunk_samples):
                s1 = min(n, s0 + chunk_samples)
                ch = gen.generate(s0, s1)
                ids = ch.ids if remap is None else remap[ch.ids]
                w.add(lengths[: s1 - s0], ids.reshape(-1), ch.labels, ch.dense)
                comm_out[s0:s1] = ch.community
                ctr_out[s0:s1] = ch.ctr
                if s1 > eval_start:
                    a = max(0, eval_start - s0)
                    eval_labels.append(ch.labels[a:].copy())
                    eval_ctr.append(ch.ctr[a:].copy())
                advance(s1 - s0)
        comm_out.flush()
        ctr_out.flush()
        del comm_out, ctr_out
        bayes_auc = roc_auc(np.concatenate(eval_labels), np.concatenate(eval_ctr))
        synth_meta = cfg.to_json()
        if min_count > 1:
            synth_meta["min_count"] = int(min_count)  # absent when 1 (no cut), as before the option
        synth_meta.update({
            "synth_version": SYNTH_VERSION,
            "b0": gen.b0,
            "bayes_auc": bayes_auc,
            "bayes_auc_on": "test" if num_test else "all",
            "files": {"community": "synth_community.npy", "ctr": "synth_ctr.npy"},
        })
        options = {k: synth_meta[k] for k in ("preset", "scale", "seed", "skew", "tail", "num_communities",
                                               "locality", "local_min_values", "test_fraction")}
        meta = w.finish(
            fields=fields,
            num_embeddings=num_embeddings,
            source={"format": "synth", "inputs": [], "options": options},
            test_fraction=cfg.test_fraction,
            dedupe=False,
            extra={"synth": synth_meta},
        )
    log.info("synth: wrote %s (%d samples, bayes auc %.4f)", out, n, bayes_auc)
    return meta


def load_community(dataset: PreparedDataset) -> np.ndarray:
    """Each sample's community (memory-mapped) of a synthetic dataset."""
    path = Path(dataset.path) / "synth_community.npy"
    if "synth" not in dataset.meta or not path.is_file():
        raise DatasetError(f"{dataset.path} is not a synthetic dataset with communities "
                           "(no synth_community.npy); generate it with 'gmp data synth'.")
    return np.load(path, mmap_mode="r")


def config_of(dataset: PreparedDataset) -> SynthConfig:
    """The :class:`SynthConfig` that generated a synthetic dataset (from its dataset.json)."""
    meta = dataset.meta.get("synth")
    if not isinstance(meta, Mapping):
        raise DatasetError(f"{dataset.path} was not made by 'gmp data synth' (no 'synth' in dataset.json).")
    d = dict(meta)
    names = list(d["field_names"])
    local_names = set(d["local_fields"])
    keep = {f.name for f in SynthConfig.__dataclass_fields__.values()}  # type: ignore[attr-defined]
    d = {k: v for k, v in d.items() if k in keep}
    d["cardinalities"] = tuple(d["cardinalities"])
    d["field_names"] = tuple(names)
    d["local_fields"] = tuple(nm in local_names for nm in names)
    return SynthConfig(**d)


def planted_placement(dataset: PreparedDataset, num_workers: int):
    """The partition the generator planted: a reference point for partitioners.

    Community ``c``'s samples go to worker ``c mod W``; each value of a local
    field goes to the worker of the community whose slice holds it; values
    of global fields are spread by id (``id mod W``). No replication.
    Returns a :class:`gmp.placement.Placement` (method ``"planted"``).
    """
    from ..placement import Placement

    cfg = config_of(dataset)
    if cfg.model != "independent":
        raise DatasetError(f"planted_placement: {dataset.path} was made by the latent-entity model, which plants "
                           "no partition; use a 'criteo-kaggle-independent' or 'tiny' dataset.")
    if num_workers < 1:
        raise DatasetError(f"planted_placement: num_workers must be >= 1, got {num_workers}.")
    if dataset.meta["synth"].get("min_count", 1) > 1:
        raise DatasetError(f"planted_placement: {dataset.path} was cut with `min_count` (its ids are renumbered); "
                           "generate it without `min_count`.")
    gen = SyntheticCTR(cfg, calibrate=False)  # tables only
    community = np.asarray(load_community(dataset))
    sample_worker = (community.astype(np.int64) % num_workers).astype(np.int32)
    primary = (np.arange(cfg.num_embeddings, dtype=np.int64) % num_workers).astype(np.int32)
    for f, n in enumerate(cfg.cardinalities):
        if cfg.local_fields[f]:
            a = int(gen.offset[f])
            owner = gen.owner_community(f, np.arange(n))
            primary[a : a + n] = (owner % num_workers).astype(np.int32)
            gen._inverse_perm.clear()  # one field's inverse at a time
    return Placement.edge_cut(num_workers, sample_worker, primary, method="planted",
                              options={"num_communities": cfg.num_communities}, seed=cfg.seed)
