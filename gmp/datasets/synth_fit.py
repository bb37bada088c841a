"""Fit the latent-entity generator's knobs to a dataset: ``gmp data synth --like DATASET``.

The knobs of the entity model (:mod:`gmp.datasets.synth`) are learned from the
statistics of :mod:`gmp.datasets.stats`, in four steps:

1. **Fields and cardinalities.** One synthetic field per categorical field of
   the dataset, named the same, with as many values as the dataset *uses*
   (``values_used``); the label rate and the number of dense columns are the
   dataset's.
2. **Entities** (:func:`group_fields`). Fields that depend on each other express
   the same latent entity: the fields are clustered by their mutual
   information above the shuffled control (:func:`dependence_matrix`, which
   reduces every field to its 31 most frequent values + "other" so that
   high-cardinality fields take part too), average linkage, merging while the
   mean MI between two clusters is at least ``group_threshold`` bits (0.15).
   Each cluster of two or more fields is an entity type; fields left alone
   are independent (``field_entity = -1``). A type has as many entities as
   its most-used field has values (that field names the entity, like a user
   id), and the entity popularity exponent is that field's Zipf exponent.
3. **Skew** (per field). Start from each field's Zipf exponent and correct it
   ``skew_rounds`` times from a pilot of the generator (the exponent of an
   attribute field's marginal is not the exponent of its draws).
   **Sessions.** Real logs are in time order: the first 1,000 MovieLens
   ratings hold 249 users, not the ~560 independent draws would give. Per
   type, a bisection on ``session_share`` (the share of samples that take the
   entity of their block of ``SESSION_LENGTH`` (20) consecutive samples)
   matches the lead field's distinct values among the first 1,000 samples.
   Herald's simulation shuffles samples, so sessions only matter in file order.
4. **Fidelity** (:func:`fit_fidelity`): bisection on the probability that a
   field shows its entity's attribute, until the excess-MI curve of the
   generated data over nested windows of 100, 200, 500 and 1,000 samples
   (:func:`gmp.datasets.stats.mi_growth`, same estimator, one field set per
   window set) closes its mean gap to the dataset's (issue 37; a single mean
   at 1,000 rows when the dataset is smaller). When even fidelity 1 falls short (the
   dataset's attributes depend on each other beyond their entity, like age
   and occupation in MovieLens), fidelity is 1 and the entities are split into
   ``SEGMENTS`` (16) segments whose members share their attributes with
   probability ``coherence``, found by the same bisection.

**Growth** (issue 37): :func:`expected_distinct` is the analytic number of
distinct values of a field among N samples, and :func:`fit_growth` fits each
field's skew, tail and fresh share to a distinct-value curve (it made the
``criteo-kaggle`` preset's; ``--like`` does not use it yet).

The same routine fitted the ``criteo-kaggle`` preset's field groups and
fidelity on the 1,000 public real Criteo rows (``bench/fidelity_bench.py
--fit-criteo``; the preset keeps the published cardinalities).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from ..errors import DatasetError
from .format import PreparedDataset
from .stats import (DatasetStats, StatsOptions, dataset_stats, field_values, mi_growth, mutual_information,
                    zipf_exponent)
from .synth import SynthConfig, SyntheticCTR

log = logging.getLogger(__name__)

#: segments per entity type when --like needs coherent attributes (step 4)
SEGMENTS = 16

#: samples per session block when --like fits sessions (step 3b)
SESSION_LENGTH = 20

#: values kept per field by :func:`dependence_matrix` (the rest is one "other" value)
TOP_VALUES = 31


def reduce_top(values: np.ndarray, top: int = TOP_VALUES) -> np.ndarray:
    """Each column's values replaced by their frequency rank, ranks >= ``top`` merged into ``top``."""
    out = np.empty_like(values)
    for j in range(values.shape[1]):
        _, inv, counts = np.unique(values[:, j], return_inverse=True, return_counts=True)
        rank = np.empty(counts.size, dtype=np.int64)
        rank[np.argsort(-counts, kind="stable")] = np.arange(counts.size)
        out[:, j] = np.minimum(rank[inv.reshape(-1)], top)
    return out


def dependence_matrix(values: np.ndarray, names: Sequence[str], *, seed: int = 0) -> np.ndarray:
    """MI above the shuffled control between every pair of fields, on top-``TOP_VALUES`` reduced values."""
    mi = mutual_information(reduce_top(values), list(names), max_values=TOP_VALUES + 1, num_bootstrap=0, seed=seed)
    m = np.nan_to_num(mi.matrix, nan=0.0)
    np.fill_diagonal(m, 0.0)
    return m


def group_fields(matrix: np.ndarray, threshold: float = 0.15) -> tuple[int, ...]:
    """Average-linkage clusters of fields by MI (merge while mean MI >= threshold); -1 for singletons.

    Groups are numbered by their first field.
    """
    n = matrix.shape[0]
    clusters: list[list[int]] = [[i] for i in range(n)]
    while len(clusters) > 1:
        best, pair = -math.inf, None
        for a in range(len(clusters)):
            for b in range(a + 1, len(clusters)):
                v = float(np.mean(matrix[np.ix_(clusters[a], clusters[b])]))
                if v > best:
                    best, pair = v, (a, b)
        if best < threshold or pair is None:
            break
        a, b = pair
        clusters[a] = sorted(clusters[a] + clusters[b])
        del clusters[b]
    out = [-1] * n
    groups = sorted((c for c in clusters if len(c) > 1), key=lambda c: c[0])
    for g, c in enumerate(groups):
        for i in c:
            out[i] = g
    return tuple(out)


def _values_of_chunk(gen: SyntheticCTR, start: int, stop: int) -> np.ndarray:
    ch = gen.generate(start, stop)
    return ch.ids.astype(np.int64) - gen.offset[None, :]


def synthetic_mi(config: SynthConfig, *, num_samples: int = 1000, windows: int = 4, seed: int = 0) -> float:
    """Mean MI above control of the generator's data, averaged over ``windows`` windows of ``num_samples``."""
    gen = SyntheticCTR(config, calibrate=False)
    names = list(config.field_names)
    out = [mutual_information(_values_of_chunk(gen, w * num_samples, (w + 1) * num_samples), names,
                              num_bootstrap=0, seed=seed).mean_bits for w in range(windows)]
    out = [x for x in out if not math.isnan(x)]
    return float(np.mean(out)) if out else float("nan")


def synthetic_mi_curve(config: SynthConfig, windows: Sequence[int], *, blocks: int = 4, seed: int = 0
                       ) -> tuple[float, ...]:
    """The generator's excess-MI curve (:func:`gmp.datasets.stats.mi_growth`: the first ``w`` samples of a
    block, one field set per block), averaged over ``blocks`` disjoint blocks of ``max(windows)`` samples."""
    gen = SyntheticCTR(config, calibrate=False)
    names = list(config.field_names)
    size = max(windows)
    rows = [mi_growth(_values_of_chunk(gen, b * size, (b + 1) * size), names, windows, seed=seed)[1]
            for b in range(blocks)]
    arr = np.array(rows, dtype=np.float64)
    with np.errstate(all="ignore"):
        return tuple(float(np.nanmean(arr[:, k])) if np.any(~np.isnan(arr[:, k])) else float("nan")
                     for k in range(len(windows)))


def _curve_gap(config: SynthConfig, target: float | Mapping[int, float], num_samples: int, windows: int) -> float:
    """Generated minus target MI: at one sample size (a number) or the mean gap over a curve (a mapping
    window -> bits; issue 37: a fit at one N does not carry to the others)."""
    if isinstance(target, Mapping):
        wins = sorted(w for w, v in target.items() if not math.isnan(v))
        got = synthetic_mi_curve(config, wins, blocks=windows)
        gaps = [g - target[w] for g, w in zip(got, wins) if not math.isnan(g)]
        return float(np.mean(gaps)) if gaps else float("nan")
    return synthetic_mi(config, num_samples=num_samples, windows=windows) - float(target)


def fit_knob(config: SynthConfig, knob: str, target_bits: float | Mapping[int, float], *, iterations: int = 9,
             num_samples: int = 1000, windows: int = 4) -> float:
    """Bisection on ``knob`` (fidelity or coherence) in [0, 1] so the mean MI above control is ``target_bits``:
    a number (at ``num_samples``), or a curve ``{window: bits}`` whose mean gap over windows is closed."""
    lo, hi = 0.0, 1.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        gap = _curve_gap(replace(config, **{knob: mid}), target_bits, num_samples, windows)
        log.info("fit: %s %.4f -> MI gap %+.4f bits", knob, mid, gap)
        lo, hi = (mid, hi) if gap < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def fit_fidelity(config: SynthConfig, target_bits: float, **kw) -> float:
    """Bisection on ``fidelity`` so the generator's mean MI above control is ``target_bits``."""
    return fit_knob(config, "fidelity", target_bits, **kw)


@dataclass(frozen=True)
class LikeFit:
    """What ``--like`` learned: the config and the statistics it was fitted to."""

    config: SynthConfig
    target: DatasetStats
    groups: tuple[int, ...]


def _fit_skews(cfg: SynthConfig, target: DatasetStats, num_real: int, rounds: int) -> SynthConfig:
    """Correct each field's draw exponent by the gap between its measured and target Zipf exponent."""
    pilot_n = min(max(cfg.num_samples, 20_000), 200_000, max(num_real, 1000))
    target_z = np.array([f.zipf_exponent for f in target.fields])
    gen = None
    for _ in range(rounds):
        gen = SyntheticCTR(replace(cfg, num_samples=pilot_n), calibrate=False)
        vals = _values_of_chunk(gen, 0, pilot_n)
        got = np.array([zipf_exponent(np.bincount(vals[:, j][vals[:, j] >= 0])) for j in range(vals.shape[1])])
        fs = np.array(cfg.field_skews)
        ok = ~np.isnan(target_z) & ~np.isnan(got)
        fs[ok] = np.clip(fs[ok] + (target_z[ok] - got[ok]), 0.0, 10.0)
        cfg = replace(cfg, field_skews=tuple(float(x) for x in fs))
    return cfg


def _distinct_lead(cfg: SynthConfig, lead: int, n: int) -> int:
    gen = SyntheticCTR(cfg, calibrate=False)
    return int(np.unique(gen.generate(0, n).ids[:, lead]).size)


def _fit_sessions(cfg: SynthConfig, groups: Sequence[int], head: np.ndarray, used: Sequence[int],
                  iterations: int = 8) -> SynthConfig:
    """Per entity type, the session share that gives the lead field the real number of distinct
    values among the first samples (file order: real logs repeat a user in runs)."""
    n = head.shape[0]
    shares = []
    for t in range(len(cfg.entity_counts)):
        members = [i for i, g in enumerate(groups) if g == t]
        lead = max(members, key=lambda i: used[i])
        want = int(np.unique(head[:, lead]).size)
        lo, hi = 0.0, 1.0
        base = list(shares) + [0.0] * (len(cfg.entity_counts) - len(shares))
        if cfg.cardinalities[lead] < cfg.entity_counts[t]:
            # the lead field is an attribute, not the entity's id: its distinct count says
            # more about its own skew than about repeated entities
            shares.append(0.0)
            continue
        if _distinct_lead(replace(cfg, session_length=SESSION_LENGTH, session_share=tuple(base)), lead, n) <= want:
            shares.append(0.0)
            continue
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            trial = list(base)
            trial[t] = mid
            got = _distinct_lead(replace(cfg, session_length=SESSION_LENGTH, session_share=tuple(trial)), lead, n)
            lo, hi = (mid, hi) if got > want else (lo, mid)
        shares.append(0.5 * (lo + hi))
    return replace(cfg, session_length=SESSION_LENGTH, session_share=tuple(shares))


def fit_dependence(cfg: SynthConfig, dataset: PreparedDataset, target_bits: float | Mapping[int, float],
                   used: Sequence[int], *,
                   skew_rounds: int = 2, segments: int | None = None) -> SynthConfig:
    """Steps 3b and 4 of the module docstring on a config whose ``field_entity`` is set: sessions,
    then fidelity (or, when fidelity 1 falls short, segments + coherence) for ``target_bits``."""
    head = field_values(dataset, 1000)
    cfg = _fit_sessions(cfg, cfg.field_entity, head, used)
    if isinstance(target_bits, Mapping):
        target_bits = {w: v for w, v in target_bits.items() if not math.isnan(v)}
        if not target_bits:
            return cfg
    elif math.isnan(target_bits):
        return cfg
    cfg = replace(cfg, fidelity=fit_fidelity(cfg, target_bits))
    if cfg.fidelity > 0.99 and _curve_gap(cfg, target_bits, 1000, 4) < -0.1 * _level(target_bits):
        # even faithful attributes are not enough: entities must share attributes (segments);
        # segments change the marginals, so the skews are corrected again and coherence refitted
        cfg = replace(cfg, fidelity=1.0, segments=SEGMENTS if segments is None else segments)
        cfg = replace(cfg, coherence=fit_knob(cfg, "coherence", target_bits))
        if skew_rounds and cfg.field_skews is not None:
            target = dataset_stats(dataset, StatsOptions(mi_bootstrap=0))
            cfg = _fit_skews(cfg, target, dataset.num_samples, skew_rounds)
            cfg = replace(cfg, coherence=fit_knob(cfg, "coherence", target_bits))
    return cfg


def _level(target: float | Mapping[int, float]) -> float:
    return float(np.mean(list(target.values()))) if isinstance(target, Mapping) else float(target)


def target_curve(stats: DatasetStats) -> dict[int, float] | float:
    """What the dependence fit targets: the excess-MI curve over the report's windows (issue 37), or its
    single mean MI when the dataset is smaller than every window."""
    g = stats.growth
    if g is not None and g.windows and any(not math.isnan(v) for v in g.mi_bits):
        return {int(w): float(v) for w, v in zip(g.windows, g.mi_bits)}
    return stats.mi.mean_bits


def like_config(dataset: PreparedDataset, *, num_samples: int | None = None, seed: int = 0,
                group_threshold: float = 0.15, skew_rounds: int = 2, tail: float = 0.05,
                stats: DatasetStats | None = None) -> LikeFit:
    """A latent-entity :class:`SynthConfig` fitted to ``dataset`` (see the module docstring)."""
    if not dataset.categorical_fields:
        raise DatasetError(f"synth `like`: {dataset.path} has no categorical fields to imitate.")
    target = stats or dataset_stats(dataset, StatsOptions(mi_bootstrap=0, seed=seed))
    cats = dataset.categorical_fields
    used = [max(1, f.values_used) for f in target.fields]
    names = tuple(f.name for f in cats)
    head = field_values(dataset, 5000)
    groups = group_fields(dependence_matrix(head, names, seed=seed), group_threshold)
    num_types = max(groups) + 1
    if num_types == 0:
        # nothing depends on anything: one entity type nobody expresses keeps the model valid
        groups = tuple(-1 for _ in names)
        counts = (1,)
        ent_skew = 1.0
    else:
        counts_l, skews_l = [], []
        for t in range(num_types):
            members = [i for i, g in enumerate(groups) if g == t]
            lead = max(members, key=lambda i: used[i])
            counts_l.append(used[lead])
            z = target.fields[lead].zipf_exponent
            skews_l.append(z if not math.isnan(z) else 1.0)
        counts = tuple(counts_l)
        ent_skew = float(np.clip(np.mean(skews_l), 0.0, 10.0))
    field_skews = tuple(float(np.clip(f.zipf_exponent if not math.isnan(f.zipf_exponent) else 1.0, 0.0, 10.0))
                        for f in target.fields)
    n = dataset.num_samples if num_samples is None else int(num_samples)
    label_rate = float(np.clip(float(dataset.meta.get("label_rate") or 0.5), 0.01, 0.99))
    cfg = SynthConfig(cardinalities=tuple(used), num_samples=n, field_names=names, seed=seed,
                      num_dense=dataset.num_dense, model="entities", entity_counts=counts,
                      entity_skew=ent_skew, field_entity=groups, fidelity=0.9, field_skews=field_skews,
                      tail=tail, label_rate=label_rate, local_fields=(False,) * len(names),
                      test_fraction=float(dataset.num_test) / max(1, dataset.num_samples))
    cfg = _fit_skews(cfg, target, dataset.num_samples, skew_rounds)
    if num_types:
        cfg = fit_dependence(cfg, dataset, target_curve(target), used, skew_rounds=skew_rounds)
    return LikeFit(cfg, target, groups)



# ---------------------------------------------------------------------------
# Distinct-value growth (issue 37): the expected number of distinct values of a field among the
# first N samples, and the per-field fit of skew, tail and fresh share to a growth curve.

#: ranks summed one by one; above this, geometric bins (the law varies by < 1% inside a bin)
_EXACT_RANKS = 20_000
_RANK_BINS = 1500


def rank_law(n: int, skew: float, tail: float) -> tuple[np.ndarray, np.ndarray]:
    """The ``(1 - tail) Zipf(skew) + tail Uniform`` law over ``n`` ranks, compressed: ``(p, mult)`` where
    rank group k holds ``mult[k]`` ranks of probability ``p[k]`` each (exact up to 20,000 ranks, then
    geometric bins whose Zipf mass is the integral of ``x^-skew`` over the bin)."""
    n = int(n)
    k = min(n, _EXACT_RANKS)
    r = np.arange(1, k + 1, dtype=np.float64)
    w = r ** -float(skew)
    mult = np.ones(k)
    if n > k:
        edges = np.unique(np.round(np.geomspace(k + 1, n + 1, _RANK_BINS)).astype(np.int64)).astype(np.float64)
        lo, hi = edges[:-1], edges[1:]
        a = float(skew)
        if abs(a - 1.0) < 1e-9:
            mass = np.log((hi - 0.5) / (lo - 0.5))
        else:
            mass = ((hi - 0.5) ** (1 - a) - (lo - 0.5) ** (1 - a)) / (1 - a)
        w = np.concatenate([w, mass / (hi - lo)])
        mult = np.concatenate([mult, hi - lo])
    p = (1.0 - tail) * w / float(np.sum(w * mult)) + tail / n
    return p, mult


def distinct_of_law(p: np.ndarray, mult: np.ndarray, draws: float) -> float:
    """Expected distinct values among ``draws`` independent draws of a law (``sum 1 - exp(-draws p)``,
    the Poisson form of ``sum 1 - (1 - p)^draws``)."""
    return float(np.sum(mult * -np.expm1(-float(draws) * p)))


def _attribute_law(n: int, skew: float, tail: float, segments: int, coherence: float):
    """The marginal law of an attribute draw: with probability ``coherence`` inside one of ``segments``
    slices of ranks (``g = r * segments + s``, each slice with the same Zipf/tail shape)."""
    p, mult = rank_law(n, skew, tail)
    if segments <= 1 or coherence <= 0 or n > _EXACT_RANKS or n < segments:
        return p, mult
    g = np.arange(n)
    ps = np.empty(n)
    for s in range(segments):
        size = len(range(s, n, segments))
        q, _ = rank_law(size, skew, tail)
        ps[g % segments == s] = q / segments
    return coherence * ps + (1.0 - coherence) * p, mult


def expected_distinct(config: SynthConfig, field: int, num_samples: float) -> float:
    """Expected distinct values of field ``field`` among ``num_samples`` samples of the entity model.

    An independent field: the distinct values of its law. An id-like field (at least as many values as
    its type has entities ``m``): the distinct entities among the ``(1 - fresh)`` share of samples, plus
    the fresh draws' coverage of the other ``n - m`` ranks. An attribute field: the attributes of the
    distinct entities met (each an independent draw of the field's law, in its segment slice with
    probability ``coherence``), joined with the fresh draws' coverage of the field. Sessions and
    ``fidelity < 1`` are approximated (the latter as an independent union); the curve is exact up to the
    Poisson approximation otherwise (tests/test_synth_growth.py).
    """
    cfg = config
    n = int(cfg.cardinalities[field])
    big_n = float(num_samples)
    skew = float(cfg.skews()[field])
    tail = float(cfg.tails()[field])
    if cfg.model != "entities" or cfg.field_entity[field] < 0:
        p, mult = rank_law(n, skew, tail)
        return distinct_of_law(p, mult, big_n)
    t = cfg.field_entity[field]
    m = int(cfg.entity_counts[t])
    fid = float(cfg.field_fidelity()[field])
    fr = float(cfg.fresh_shares()[field])
    etail = float(cfg.tail if cfg.entity_tail is None else cfg.entity_tail)
    q, qm = rank_law(m, float(cfg.entity_skew), etail)
    ents = distinct_of_law(q, qm, big_n * fid * (1.0 - fr))
    if m <= n:
        d = ents
        if m < n and fr > 0:
            d += (n - m) * -math.expm1(-big_n * fid * fr / (n - m))
    else:
        p, mult = _attribute_law(n, skew, tail, cfg.segments, float(cfg.coherence))
        d = distinct_of_law(p, mult, ents)
        if fr > 0:
            d += (n - d) * -math.expm1(-big_n * fid * fr / n)
    if fid < 1.0:
        p, mult = rank_law(n, skew, tail)
        other = distinct_of_law(p, mult, big_n * (1.0 - fid))
        d = n * (1.0 - (1.0 - d / n) * (1.0 - other / n))
    return float(d)


def fit_growth(config: SynthConfig, windows: Sequence[int], distinct: np.ndarray, full_samples: int,
               full_counts: Sequence[int], *, full_weight: float = 3.0) -> SynthConfig:
    """Per-field skew, tail and fresh share so that :func:`expected_distinct` follows a growth curve.

    ``distinct[k, f]`` is field f's distinct values among the first ``windows[k]`` samples of the target
    (e.g. real rows) and ``full_counts[f]`` its distinct values at ``full_samples``. Least squares on the
    log ratios (the full-size one weighted ``full_weight``): an id-like field fits its fresh share only
    (its values are its entities'), an attribute field skew, tail and fresh share, an independent field
    skew and tail. The entity law (``entity_skew``, ``entity_tail``) is the caller's.
    """
    from scipy.optimize import least_squares

    cfg = replace(config, field_skews=tuple(float(x) for x in config.skews()),
                  field_tails=tuple(float(x) for x in config.tails()),
                  field_fresh=tuple(float(x) for x in config.fresh_shares()), fresh=0.0)
    wins = np.asarray(windows, dtype=np.float64)
    target = np.maximum(np.asarray(distinct, dtype=np.float64), 1.0)
    skews, tails, fresh = list(cfg.field_skews), list(cfg.field_tails), list(cfg.field_fresh)
    for f in range(cfg.num_fields):
        t = cfg.field_entity[f]
        n = cfg.cardinalities[f]
        idlike = t >= 0 and cfg.entity_counts[t] <= n

        def trial(x, f=f, t=t, idlike=idlike):
            s, tl, fr = list(skews), list(tails), list(fresh)
            if idlike:
                fr[f] = float(x[0])
            else:
                s[f], tl[f] = float(x[0]), float(x[1])
                if t >= 0:
                    fr[f] = float(x[2])
            return replace(cfg, field_skews=tuple(s), field_tails=tuple(tl), field_fresh=tuple(fr))

        def resid(x, f=f):
            c = trial(x)
            got = [expected_distinct(c, f, w) for w in wins]
            full = expected_distinct(c, f, full_samples)
            return np.concatenate([np.log(np.maximum(got, 1e-9) / target[:, f]),
                                   [full_weight * math.log(max(full, 1e-9) / max(1, full_counts[f]))]])

        if idlike:
            starts, lb, ub = [[0.1]], [0.0], [1.0]
        elif t >= 0:
            starts, lb, ub = [[a, 0.3, 0.0] for a in (0.6, 1.2, 2.0)], [0, 0, 0], [4, 1, 1]
        else:
            starts, lb, ub = [[a, 0.3] for a in (0.6, 1.2, 2.0)], [0, 0], [4, 1]
        best = min((least_squares(resid, x0, bounds=(lb, ub), diff_step=1e-3) for x0 in starts),
                   key=lambda r: r.cost)
        c = trial(best.x)
        skews, tails, fresh = list(c.field_skews), list(c.field_tails), list(c.field_fresh)
        log.info("fit growth: %s -> skew %.3f tail %.4f fresh %.4f (cost %.4f)", cfg.field_names[f], skews[f],
                 tails[f], fresh[f], best.cost)
    return replace(cfg, field_skews=tuple(skews), field_tails=tuple(tails), field_fresh=tuple(fresh))
