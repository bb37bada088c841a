"""Statistics that say whether a dataset behaves like real CTR data: ``gmp data stats``.

The same report for any prepared dataset (real or synthetic), so the two can be
compared side by side (:func:`compare_stats`). Three groups of numbers:

Per field (all samples)
    ``values_used`` (distinct values with at least one access), ``zipf_exponent``
    (see :func:`zipf_exponent`) and ``top1pct_share`` (share of the field's
    accesses that go to its most-used 1% of values, at least one value).

Between fields
    * **Mutual information above a shuffled control** (:func:`mutual_information`),
      the estimator of issue 13, defined exactly as:

      1. take the first ``mi_samples`` (1,000) samples and, per categorical
         field, each sample's *value* of the field (:func:`field_values`: the
         field's smallest local id in the sample, ids numbered along the
         field's id ranges, or a "none" value when the sample has none; so a
         multi-valued field counts by its first value);
      2. keep the fields with 2 to ``mi_max_values`` (500) distinct values among
         those samples;
      3. for each pair of kept fields, the plug-in mutual information in bits
         ``I(X;Y) = sum p(x,y) log2(p(x,y) / (p(x) p(y)))`` of their joint
         empirical distribution, minus the mean over ``mi_shuffles`` (5)
         seeded independent shuffles of both columns of the same quantity
         (the plug-in estimate is biased upwards by about ``(|X|-1)(|Y|-1) /
         (2 n ln 2)``; the shuffled control measures that bias on the same
         marginals, so the difference is the dependence);
      4. report the matrix (nan for fields not kept) and the mean over pairs,
         with a bootstrap spread: the standard deviation of that mean over
         ``mi_bootstrap`` (50) resamples of the samples with replacement
         (each resample with its own shuffled control).

    * **Co-occurrence clustering** (:func:`cooccurrence_clustering`): the
      average local clustering coefficient of the embedding co-occurrence
      graph (two values adjacent when some sample uses both) of the first
      ``graph_samples`` samples, estimated by wedge sampling (Schank & Wagner
      2005): for up to ``num_wedges`` random (node, two distinct neighbours)
      triples, the share whose two neighbours are adjacent; beside it the same
      on the field-shuffled samples. Every sample is a clique of its values, so
      both are high; the difference measures how much more often two values
      met through a third value also meet each other than the marginals alone
      make them.

Across batches
    **Row reuse** (:func:`batch_reuse`): cut the first ``reuse_batches + 1``
    batches of ``batch_size`` samples, in file order and in a seeded random
    order (what ``gmp train --shuffle seeded`` sees); for each batch after the
    first, the share of its distinct rows that the previous batch also used;
    the mean over batches.

JSON example (``gmp data stats DIR --json``, abridged)::

    {"format": "gmp.data-stats", "schema_version": 1, "path": "data/ml100k",
     "num_samples": 100000, "num_fields": 8, "batch_size": 1024,
     "fields": [{"name": "user_id", "num_values": 945, "values_used": 943,
                 "zipf_exponent": 0.58, "top1pct_share": 0.05}, ...],
     "mi": {"num_samples": 1000, "fields": ["age", ...], "mean_bits": 0.21,
            "bootstrap_sd": 0.01, "matrix": [[null, 0.3, ...], ...], ...},
     "clustering": {"num_samples": 2000, "clustering": 0.61, "shuffled": 0.48, ...},
     "reuse": {"batch_size": 1024, "file_order": 0.52, "shuffled": 0.47, "num_batches": 50}}
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import DatasetError
from ..wording import plural
from .format import FieldInfo, PreparedDataset

FORMAT = "gmp.data-stats"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class StatsOptions:
    """Sizes of the estimators (validated on construction)."""

    batch_size: int = 1024
    mi_samples: int = 1000
    mi_max_values: int = 500
    mi_shuffles: int = 5
    mi_bootstrap: int = 50
    graph_samples: int = 2000
    num_wedges: int = 200_000
    reuse_batches: int = 50
    seed: int = 0
    windows: tuple[int, ...] = (100, 200, 500, 1000)

    def __post_init__(self) -> None:
        w = tuple(self.windows)
        for x in w:
            _check_int("windows", x, 2)
        if not w or list(w) != sorted(set(w)):
            raise DatasetError(f"stats: windows must be one or more increasing sample counts >= 2, got {w}; "
                               "e.g. 100,200,500,1000.")
        object.__setattr__(self, "windows", w)
        for name in ("batch_size", "mi_samples", "mi_shuffles", "graph_samples", "num_wedges", "reuse_batches"):
            _check_int(name, getattr(self, name), 1)
        _check_int("mi_max_values", self.mi_max_values, 2)
        _check_int("mi_bootstrap", self.mi_bootstrap, 0)
        _check_int("seed", self.seed, 0)


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise DatasetError(f"stats: {name} must be an integer >= {low}, got {value!r}.")


@dataclass(frozen=True)
class FieldStats:
    name: str
    num_values: int
    values_used: int
    accesses: int
    zipf_exponent: float
    top1pct_share: float


@dataclass(frozen=True)
class MutualInfo:
    num_samples: int
    fields: tuple[str, ...]           # the fields kept (2..mi_max_values distinct values)
    matrix: np.ndarray                # [F, F] bits above control over all categorical fields, nan where not kept
    raw_mean_bits: float              # mean plug-in MI over kept pairs, before the control
    control_mean_bits: float          # mean plug-in MI of the shuffled control
    mean_bits: float                  # raw - control, mean over kept pairs
    bootstrap_sd: float               # sd of mean_bits over bootstrap resamples (nan without resamples)


@dataclass(frozen=True)
class Clustering:
    num_samples: int
    num_nodes: int
    clustering: float
    shuffled: float


@dataclass(frozen=True)
class Reuse:
    batch_size: int
    num_batches: int
    file_order: float
    shuffled: float


@dataclass(frozen=True)
class Growth:
    """The statistics across nested windows (the first ``windows[k]`` samples; issue 37)."""

    windows: tuple[int, ...]          # sample counts (those not above the dataset's size)
    fields: tuple[str, ...]           # the MI field set, fixed across windows (kept in the largest window)
    mi_bits: tuple[float, ...]        # mean MI above control over pairs of ``fields``, per window
    distinct: np.ndarray              # int64 [len(windows), F]: distinct values of every field, per window
    dropped: tuple[int, ...] = ()     # the windows asked for that are above the dataset's size (left out)


@dataclass(frozen=True)
class DatasetStats:
    path: str
    num_samples: int
    field_names: tuple[str, ...]
    fields: tuple[FieldStats, ...]
    mi: MutualInfo
    clustering: Clustering
    reuse: Reuse
    options: StatsOptions = field(default_factory=StatsOptions)
    growth: Growth | None = None

    @property
    def mean_zipf_exponent(self) -> float:
        v = [f.zipf_exponent for f in self.fields if not math.isnan(f.zipf_exponent)]
        return float(np.mean(v)) if v else float("nan")

    def to_json(self) -> dict[str, Any]:
        """The ``gmp.stats`` object; a number that is undefined here (NaN: e.g. the reuse of a dataset
        smaller than one batch) is ``null`` (JSON has no NaN)."""
        def clean(x: Any) -> Any:
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            if isinstance(x, (float, np.floating)):
                return None if not math.isfinite(float(x)) else float(x)
            return x

        mi = asdict(self.mi)
        mi["matrix"] = [[float(v) for v in row] for row in self.mi.matrix]
        mi["fields"] = list(self.mi.fields)
        return clean({
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "path": self.path,
            "num_samples": self.num_samples,
            "num_fields": len(self.fields),
            "batch_size": self.options.batch_size,
            "options": asdict(self.options),
            "fields": [{k: clean(v) for k, v in asdict(f).items()} for f in self.fields],
            "mi": mi,
            "clustering": asdict(self.clustering),
            "reuse": asdict(self.reuse),
            **({} if self.growth is None else {"growth": {
                "windows": list(self.growth.windows), "fields": list(self.growth.fields),
                "mi_bits": list(self.growth.mi_bits),
                "distinct": [[int(v) for v in row] for row in self.growth.distinct],
                "dropped_windows": list(self.growth.dropped)}}),
        })


# ---------------------------------------------------------------------------
# building blocks (plain arrays in, numbers out; the tests call these directly)


def field_values(dataset: PreparedDataset, num_samples: int | None = None) -> np.ndarray:
    """int64 [n, F]: each sample's value (id within the field) of every categorical field.

    A sample's value of a field is its smallest local id of that field (the
    position of the id along the field's ``ranges``: a dataset made by
    ``--continue`` or ``--extend`` gives its new values ids after every older
    field's, so a field's ids are several ranges, not one run from its
    ``offset``); -1 when the sample uses no id of the field.
    """
    cats = dataset.categorical_fields
    n = dataset.num_samples if num_samples is None else min(dataset.num_samples, int(num_samples))
    indptr = np.asarray(dataset.indptr[: n + 1], dtype=np.int64)
    ids = np.asarray(dataset.indices[: int(indptr[-1])], dtype=np.int64)
    none = np.iinfo(np.int64).max
    out = np.full((n, len(cats)), none, dtype=np.int64)
    if ids.size:
        fidx, local = local_ids(cats, ids)
        sample = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        # a field's ids need not be adjacent inside a sample (a new range lies after the other fields')
        np.minimum.at(out, (sample, fidx), local)
    out[out == none] = -1
    return out


def local_ids(fields: Sequence[FieldInfo], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(field index into ``fields``, local id) of every global id in ``ids``, from the fields' id ranges.

    Local id k of a field is the k-th id along its ``ranges`` (:attr:`FieldInfo.id_ranges`).
    Raises :class:`DatasetError` for an id that no field's ranges hold.
    """
    spans = sorted((a, b, i, local) for i, f in enumerate(fields)
                   for (a, b), local in zip(f.id_ranges, np.cumsum([0] + [b - a for a, b in f.id_ranges]))
                   if b > a)
    ids = np.asarray(ids, dtype=np.int64)
    if not spans:
        if ids.size:
            raise DatasetError(f"stats: id {int(ids[0])} belongs to no categorical field.")
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    start, stop, fidx, base = (np.array(c, dtype=np.int64) for c in zip(*spans))
    pos = np.searchsorted(start, ids, side="right") - 1
    bad = (pos < 0) | (ids >= stop[np.maximum(pos, 0)])
    if bad.any():
        raise DatasetError(f"stats: id {int(ids[np.argmax(bad)])} belongs to no categorical field's ranges.")
    return fidx[pos], ids - start[pos] + base[pos]


def zipf_exponent(counts: np.ndarray, *, min_count: int = 5, points_per_decade: int = 10) -> float:
    """Zipf exponent of a field's value counts: ``a`` in ``count(rank r) ∝ r ** -a``.

    Least squares slope of ``ln count`` on ``ln rank`` over the values seen at
    least ``min_count`` times (below that, counts are too noisy to carry the
    shape), at ranks spaced geometrically (``points_per_decade`` per decade,
    so each decade of ranks weighs the same instead of the tail dominating).
    nan when fewer than 3 distinct ranks qualify.
    """
    c = np.sort(np.asarray(counts, dtype=np.float64)[np.asarray(counts) > 0])[::-1]
    c = c[c >= min_count]
    if c.size < 3:
        return float("nan")
    ranks = np.unique(np.round(np.logspace(0, math.log10(c.size), max(3, int(points_per_decade
                                                                         * math.log10(c.size)) + 1))).astype(np.int64))
    if ranks.size < 3:
        return float("nan")
    x = np.log(ranks.astype(np.float64))
    y = np.log(c[ranks - 1])
    slope = np.polyfit(x, y, 1)[0]
    return float(-slope)


def top_share(counts: np.ndarray, fraction: float = 0.01) -> float:
    """Share of accesses to the most-used ``fraction`` of used values (at least one value)."""
    c = np.asarray(counts)
    c = c[c > 0]
    if c.size == 0:
        return 0.0
    k = max(1, int(math.ceil(c.size * fraction)))
    top = np.partition(c, c.size - k)[c.size - k:]
    return float(top.sum() / c.sum())


def _codes(col: np.ndarray) -> tuple[np.ndarray, int]:
    u, inv = np.unique(col, return_inverse=True)
    return inv.astype(np.int64), int(u.size)


def plugin_mi(x: np.ndarray, y: np.ndarray, nx: int | None = None, ny: int | None = None) -> float:
    """Plug-in mutual information in bits of two integer-coded columns (codes ``0..n-1``)."""
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    n = x.size
    if n == 0:
        return 0.0
    nx = int(x.max()) + 1 if nx is None else nx
    ny = int(y.max()) + 1 if ny is None else ny
    joint = np.bincount(x * ny + y, minlength=nx * ny)
    nz = np.flatnonzero(joint)
    pxy = joint[nz] / n
    px = np.bincount(x, minlength=nx)[nz // ny] / n
    py = np.bincount(y, minlength=ny)[nz % ny] / n
    return float(np.sum(pxy * np.log2(pxy / (px * py))))


def _mi_pairs(codes: np.ndarray, sizes: Sequence[int], rng: np.random.Generator,
              num_shuffles: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw and shuffled-control plug-in MI for every pair of columns of ``codes`` ([n, k])."""
    k = codes.shape[1]
    raw = np.full((k, k), np.nan)
    ctl = np.full((k, k), np.nan)
    shuffled = [np.stack([rng.permutation(codes[:, j]) for j in range(k)], axis=1) for _ in range(num_shuffles)]
    for a in range(k):
        for b in range(a + 1, k):
            raw[a, b] = raw[b, a] = plugin_mi(codes[:, a], codes[:, b], sizes[a], sizes[b])
            c = np.mean([plugin_mi(s[:, a], s[:, b], sizes[a], sizes[b]) for s in shuffled])
            ctl[a, b] = ctl[b, a] = c
    return raw, ctl


def mutual_information(values: np.ndarray, field_names: Sequence[str], *, max_values: int = 500,
                       num_shuffles: int = 5, num_bootstrap: int = 50, seed: int = 0) -> MutualInfo:
    """Pairwise MI above a shuffled control of ``values`` ([n, F], one row per sample).

    The caller passes the first ``mi_samples`` rows (:func:`dataset_stats`
    passes the first 1,000). Fields with 2..``max_values`` distinct values are
    kept. See the module docstring for the exact definition.
    """
    values = np.asarray(values)
    n, num_fields = values.shape
    if len(field_names) != num_fields:
        raise DatasetError(f"stats: {len(field_names)} field names for {num_fields} columns.")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 13]))
    kept, codes, sizes = [], [], []
    for j in range(num_fields):
        c, m = _codes(values[:, j])
        if 2 <= m <= max_values:
            kept.append(j)
            codes.append(c)
            sizes.append(m)
    matrix = np.full((num_fields, num_fields), np.nan)
    if len(kept) < 2:
        return MutualInfo(n, tuple(field_names[j] for j in kept), matrix, float("nan"), float("nan"),
                          float("nan"), float("nan"))
    codes_arr = np.stack(codes, axis=1)
    raw, ctl = _mi_pairs(codes_arr, sizes, rng, num_shuffles)
    above = raw - ctl
    iu = np.triu_indices(len(kept), 1)
    for a, b in zip(*iu):
        matrix[kept[a], kept[b]] = matrix[kept[b], kept[a]] = above[a, b]
    boots = []
    for _ in range(num_bootstrap):
        rows = rng.integers(0, n, n)
        sample = codes_arr[rows]
        # re-code so the sizes match the resample
        recoded = np.stack([_codes(sample[:, j])[0] for j in range(sample.shape[1])], axis=1)
        rsz = [int(recoded[:, j].max()) + 1 for j in range(recoded.shape[1])]
        r, c = _mi_pairs(recoded, rsz, rng, 1)
        boots.append(float(np.mean((r - c)[iu])))
    sd = float(np.std(boots, ddof=1)) if len(boots) > 1 else float("nan")
    return MutualInfo(n, tuple(field_names[j] for j in kept), matrix, float(np.mean(raw[iu])),
                      float(np.mean(ctl[iu])), float(np.mean(above[iu])), sd)


def distinct_growth(values: np.ndarray, windows: Sequence[int]) -> np.ndarray:
    """int64 [len(windows), F]: the distinct values of every column among the first ``w`` rows, per window
    (a -1, "none", counts as a value, as in :func:`mutual_information`)."""
    values = np.asarray(values)
    return np.array([[np.unique(values[:w, j]).size for j in range(values.shape[1])] for w in windows],
                    dtype=np.int64).reshape(len(windows), values.shape[1])


def mi_growth(values: np.ndarray, field_names: Sequence[str], windows: Sequence[int], *, max_values: int = 500,
              num_shuffles: int = 5, seed: int = 0) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The excess-MI curve: :func:`mutual_information`'s mean bits among the first ``w`` rows, per window,
    on one field set for all windows (the fields with 2..``max_values`` values in the largest window), so
    the curve shows how dependence grows with the sample, not which fields pass the filter."""
    values = np.asarray(values)
    head = values[: max(windows)] if len(windows) else values[:0]
    cols = [j for j in range(values.shape[1]) if 2 <= np.unique(head[:, j]).size <= max_values]
    kept = [field_names[j] for j in cols]
    out = []
    for w in windows:
        if len(cols) < 2:
            out.append(float("nan"))
            continue
        mi = mutual_information(values[:w][:, cols], kept, max_values=max(2, w), num_shuffles=num_shuffles,
                                num_bootstrap=0, seed=seed)
        out.append(mi.mean_bits)
    return tuple(kept), tuple(out)


def _wedge_clustering(values: np.ndarray, num_wedges: int, rng: np.random.Generator) -> tuple[float, int]:
    """Wedge-sampled average local clustering of the co-occurrence graph of rows of ``values`` ([n, F])."""
    import scipy.sparse as sp

    n, num_fields = values.shape
    # one node per (field, value); -1 ("none") is not a node
    node_of = np.full(values.shape, -1, dtype=np.int64)
    base = 0
    for j in range(num_fields):
        col = values[:, j]
        ok = col >= 0
        u, inv = np.unique(col[ok], return_inverse=True)
        node_of[ok, j] = base + inv
        base += u.size
    rows = np.repeat(np.arange(n), num_fields)
    cols = node_of.reshape(-1)
    keep = cols >= 0
    a = sp.csr_array((np.ones(int(keep.sum()), dtype=np.int64), (rows[keep], cols[keep])), shape=(n, base))
    w = (a.T @ a).tocsr()
    w.setdiag(0)
    w.eliminate_zeros()
    w.sort_indices()
    deg = np.diff(w.indptr)
    eligible = np.flatnonzero(deg >= 2)
    if eligible.size == 0:
        return float("nan"), int(base)
    # average local clustering: pick a node uniformly among those of degree >= 2, then a wedge at it
    v = eligible[rng.integers(0, eligible.size, num_wedges)]
    d = deg[v]
    i = rng.integers(0, d)
    j = rng.integers(0, d - 1)
    j = j + (j >= i)
    u1 = w.indices[w.indptr[v] + i].astype(np.int64)
    u2 = w.indices[w.indptr[v] + j].astype(np.int64)
    keys = np.repeat(np.arange(base, dtype=np.int64), deg) * base + w.indices.astype(np.int64)
    q = u1 * base + u2
    pos = np.searchsorted(keys, q)
    pos = np.minimum(pos, keys.size - 1)
    return float(np.mean(keys[pos] == q)), int(base)


def cooccurrence_clustering(values: np.ndarray, *, num_wedges: int = 200_000, seed: int = 0) -> Clustering:
    """Clustering of the co-occurrence graph of ``values`` and of its field-shuffled control."""
    values = np.asarray(values)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 17]))
    c, nodes = _wedge_clustering(values, num_wedges, rng)
    shuffled = np.stack([rng.permutation(values[:, j]) for j in range(values.shape[1])], axis=1)
    s, _ = _wedge_clustering(shuffled, num_wedges, rng)
    return Clustering(int(values.shape[0]), nodes, c, s)


def batch_reuse(indptr: np.ndarray, indices: np.ndarray, batch_size: int, *, num_batches: int = 50,
                order: np.ndarray | None = None) -> float:
    """Mean share of a batch's distinct rows that the previous batch also used.

    Batches are consecutive slices of ``batch_size`` samples of ``order``
    (default the file order); the first ``num_batches + 1`` full batches are
    used (fewer if the data is shorter). nan with fewer than two batches.
    """
    _check_int("batch_size", batch_size, 1)
    indptr = np.asarray(indptr)
    num_samples = indptr.size - 1
    total = min(num_samples // batch_size, num_batches + 1)
    if total < 2:
        return float("nan")
    if order is None:
        order = np.arange(total * batch_size)
    prev: np.ndarray | None = None
    shares = []
    for b in range(total):
        rows = order[b * batch_size:(b + 1) * batch_size]
        starts, stops = indptr[rows], indptr[rows + 1]
        lens = stops - starts
        pos = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
        used = np.unique(np.asarray(indices)[pos])
        if prev is not None and used.size:
            shares.append(np.intersect1d(used, prev, assume_unique=True).size / used.size)
        prev = used
    return float(np.mean(shares)) if shares else float("nan")


# ---------------------------------------------------------------------------


def field_counts(dataset: PreparedDataset, *, chunk_edges: int = 1 << 26) -> list[np.ndarray]:
    """Per categorical field, the access count of each of its values in local id order (all samples;
    chunked): the ids along the field's ranges, several once the dataset was extended."""
    cats = dataset.categorical_fields
    deg = np.zeros(dataset.num_embeddings, dtype=np.int64)
    ind = dataset.indices
    for a in range(0, int(ind.shape[0]), chunk_edges):
        deg += np.bincount(np.asarray(ind[a:a + chunk_edges]), minlength=dataset.num_embeddings)
    return [np.concatenate([deg[a:b] for a, b in f.id_ranges]) if f.num_values else deg[:0] for f in cats]


def dataset_stats(dataset: PreparedDataset, options: StatsOptions | None = None) -> DatasetStats:
    """The full statistics report of a prepared dataset (see the module docstring)."""
    opts = options or StatsOptions()
    cats = dataset.categorical_fields
    if not cats:
        raise DatasetError(f"stats: {dataset.path} has no categorical fields; nothing to measure.")
    names = tuple(f.name for f in cats)
    fields = []
    for f, counts in zip(cats, field_counts(dataset)):
        fields.append(FieldStats(f.name, int(f.num_values), int(np.count_nonzero(counts)), int(counts.sum()),
                                 zipf_exponent(counts), top_share(counts)))
    head = field_values(dataset, max(opts.mi_samples, opts.graph_samples, max(opts.windows)))
    mi = mutual_information(head[: opts.mi_samples], names, max_values=opts.mi_max_values,
                            num_shuffles=opts.mi_shuffles, num_bootstrap=opts.mi_bootstrap, seed=opts.seed)
    clus = cooccurrence_clustering(head[: opts.graph_samples], num_wedges=opts.num_wedges, seed=opts.seed)
    n = dataset.num_samples
    need = min(n, (opts.reuse_batches + 1) * opts.batch_size)
    rng = np.random.default_rng(np.random.SeedSequence([opts.seed, 19]))
    shuffled_order = rng.permutation(n)[:need]
    reuse = Reuse(opts.batch_size, max(0, min(n // opts.batch_size, opts.reuse_batches + 1) - 1),
                  batch_reuse(dataset.indptr, dataset.indices, opts.batch_size, num_batches=opts.reuse_batches),
                  batch_reuse(dataset.indptr, dataset.indices, opts.batch_size, num_batches=opts.reuse_batches,
                              order=shuffled_order))
    wins = tuple(w for w in opts.windows if w <= n)
    kept, curve = mi_growth(head, names, wins, max_values=opts.mi_max_values, num_shuffles=opts.mi_shuffles,
                            seed=opts.seed) if wins else ((), ())
    growth = Growth(wins, kept, curve, distinct_growth(head, wins), tuple(w for w in opts.windows if w > n))
    return DatasetStats(str(dataset.path), n, names, tuple(fields), mi, clus, reuse, opts, growth)


@dataclass(frozen=True)
class CompareRow:
    name: str
    a: float
    b: float

    @property
    def ratio(self) -> float:
        return self.a / self.b if self.b else float("nan")


def dropped_windows_note(stats: DatasetStats) -> str | None:
    """A line naming the windows left out of ``stats`` (above its sample count), or None when none was."""
    g = stats.growth
    if g is None or not g.dropped:
        return None
    kept = (f"; the curve holds {', '.join(f'{w:,}' for w in g.windows)}" if g.windows
            else "; no window is left, so there is no curve")
    return (f"{plural('window', len(g.dropped))} {', '.join(f'{w:,}' for w in g.dropped)} left out: {stats.path} has "
            f"{stats.num_samples:,} {plural('sample', stats.num_samples)}{kept}.")


def compare_stats(a: DatasetStats, b: DatasetStats) -> list[CompareRow]:
    """Headline numbers of two reports side by side (per-field rows by position when names differ)."""
    def mean(v: list[float]) -> float:
        v = [x for x in v if not math.isnan(x)]
        return float(np.mean(v)) if v else float("nan")

    rows = [
        CompareRow("samples", a.num_samples, b.num_samples),
        CompareRow("categorical fields", len(a.fields), len(b.fields)),
        CompareRow("values used (sum over fields)", sum(f.values_used for f in a.fields),
                   sum(f.values_used for f in b.fields)),
        CompareRow("zipf exponent (mean over fields)", a.mean_zipf_exponent, b.mean_zipf_exponent),
        CompareRow("top-1% share (mean over fields)", mean([f.top1pct_share for f in a.fields]),
                   mean([f.top1pct_share for f in b.fields])),
        CompareRow("MI fields kept (2-500 values)", len(a.mi.fields), len(b.mi.fields)),
        CompareRow("MI above control, mean bits", a.mi.mean_bits, b.mi.mean_bits),
        CompareRow("MI bootstrap sd", a.mi.bootstrap_sd, b.mi.bootstrap_sd),
        CompareRow("co-occurrence clustering", a.clustering.clustering, b.clustering.clustering),
        CompareRow("clustering, shuffled control", a.clustering.shuffled, b.clustering.shuffled),
        CompareRow(f"batch reuse, file order (B={a.reuse.batch_size})", a.reuse.file_order, b.reuse.file_order),
        CompareRow(f"batch reuse, shuffled (B={a.reuse.batch_size})", a.reuse.shuffled, b.reuse.shuffled),
    ]
    ga, gb = a.growth, b.growth
    if ga is not None and gb is not None:
        for k, w in enumerate(ga.windows):
            if w in gb.windows:
                rows.append(CompareRow(f"MI above control, first {w:,} (fixed fields)", ga.mi_bits[k],
                                       gb.mi_bits[gb.windows.index(w)]))
        for k, w in enumerate(ga.windows):
            if w in gb.windows and ga.distinct.shape[1] == gb.distinct.shape[1]:
                da, db = ga.distinct[k], gb.distinct[gb.windows.index(w)]
                rows.append(CompareRow(f"distinct values, first {w:,} (sum over fields)", int(da.sum()),
                                       int(db.sum())))
                rows.append(CompareRow(f"  per field: mean |ratio - 1|, first {w:,}",
                                       float(np.mean(np.abs(da / np.maximum(db, 1) - 1.0))), float("nan")))
    return rows
