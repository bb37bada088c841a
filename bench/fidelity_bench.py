"""Fidelity benchmark (not a test): the papers' headline tables on real public data and on the
calibrated generator, side by side. Prints markdown tables; numbers and commands in docs/fidelity.md.

Sections (``--sections``, default all):

* ``mi``: issue 13's estimator (first 1,000 samples, fields with 2-500 distinct values, mutual
  information above an independently shuffled control, bootstrap sd) on every dataset.
* ``herald``: Herald (APNet'22) Table 1: pulls, pushes, pulls + pushes of one epoch normalised to
  naive, random placement over 8 workers, per-worker batch 128, cache 10% of the used rows (LRU);
  naive without on-demand, on-demand only, location-aware only, both (``gmp.simulate``, the same
  code as ``gmp simulate``); pushes include the end-of-epoch flush, which is also shown apart
  (``push_flush``, as herald_bench's Table 1 shows it).
* ``like``: ``gmp data synth --like`` twins of MovieLens-100K and Frappe vs the originals.
* ``table3``: HET-GMP (SIGMOD'22) Table 3: hybrid 1D with 1/3/5 rounds (and the default hybrid
  with 2D replication), BiCut and random, 8 workers; three units of communication.
* ``--fit-criteo``: refit the criteo-kaggle preset's field groups and coherence on the real rows.

Real data is never committed: point ``--criteo-real``, ``--ml``, ``--frappe`` at prepared datasets
(``gmp data import criteo .../criteo_1000/train.txt``, ``gmp data fetch movielens-100k`` +
``gmp data import movielens``, ``gmp data import libfm frappe.validation.libfm frappe.test.libfm``);
a missing one is skipped with a note. Synthetic datasets are generated under ``--workdir`` when absent.

Usage::

    python bench/fidelity_bench.py --criteo-real data/bench/real/criteo1000 \\
        --ml data/bench/real/ml100k --frappe data/bench/real/frappe --workdir data/bench/fidelity
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.datasets.stats import StatsOptions, compare_stats, dataset_stats  # noqa: E402

HERALD_ROWS = (("naive", "naive", False), ("on-demand only", "naive", True),
               ("location-aware only", "herald", False), ("Herald (both)", "herald", True))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def synth_dataset(workdir: Path, name: str, preset: str, num_samples: int) -> Path:
    from gmp.datasets.synth import preset_config, synthesize

    out = workdir / name
    if not (out / "dataset.json").is_file():
        log(f"generating {out} ({preset}, {num_samples:,} samples)")
        synthesize(preset_config(preset, num_samples=num_samples, seed=0), out, overwrite=True)
    return out


def like_dataset(workdir: Path, name: str, source: Path) -> Path:
    from gmp.datasets.synth import synthesize
    from gmp.datasets.synth_fit import like_config

    out = workdir / name
    if not (out / "dataset.json").is_file():
        log(f"fitting --like {source} -> {out}")
        synthesize(like_config(load_dataset(source)).config, out, overwrite=True)
    return out


def random_placement(ds, num_workers: int, seed: int = 0):
    from gmp.placement import Placement

    rng = np.random.default_rng(seed)
    return Placement.edge_cut(num_workers, rng.integers(0, num_workers, ds.num_samples, dtype=np.int32),
                              rng.integers(0, num_workers, ds.num_embeddings, dtype=np.int32),
                              method="random", seed=seed)


def herald_table1(path: Path, *, workers: int = 8, batch_size: int = 128) -> dict[str, dict]:
    """Herald Table 1 rows on a dataset (issue 13's settings)."""
    from gmp.simulate import active_rows, simulate, simulator_options

    ds = load_dataset(path)
    placement = random_placement(ds, workers)
    active = active_rows(ds.indptr, ds.indices, ds.num_train)
    out = {}
    for label, schedule, on_demand in HERALD_ROWS:
        options = simulator_options(schedule, active, on_demand=on_demand)
        out[label] = simulate(ds.indptr, ds.indices, placement, num_train=ds.num_train, batch_size=batch_size,
                              schedule=schedule, options=options).to_json()
    return out


def fmt(x: float, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def section_mi(datasets: dict[str, Path]) -> None:
    print("\n### Mutual information above a shuffled control (issue 13's estimator)\n")
    print("| dataset | samples | fields kept (2-500 values in the first 1,000) | raw MI, mean bits | "
          "control | **MI above control** | bootstrap sd (50) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, path in datasets.items():
        s = dataset_stats(load_dataset(path), StatsOptions())
        print(f"| {name} | {s.num_samples:,} | {len(s.mi.fields)} | {fmt(s.mi.raw_mean_bits)} | "
              f"{fmt(s.mi.control_mean_bits)} | **{fmt(s.mi.mean_bits)}** | {fmt(s.mi.bootstrap_sd)} |")


def section_herald(datasets: dict[str, Path]) -> None:
    print("\n### Herald Table 1: random placement, 8 workers, per-worker batch 128, cache 10% of used rows\n")
    print("| dataset | samples | cache rows/worker | on-demand only (pull/push/overall) | "
          "location-aware only | **Herald (both)** | both: pulls | both: pushes (of which flush) | "
          "on-demand only: flush share of pushes |")
    print("|---|---:|---:|---|---|---|---:|---:|---:|")
    for name, path in datasets.items():
        t0 = time.perf_counter()
        rows = herald_table1(path)
        base = rows["naive"]

        def ratios(r):
            pull = r["pulls"] / max(base["pulls"], 1)
            push = r["pushes"] / max(base["pushes"], 1)
            overall = (r["pulls"] + r["pushes"]) / max(base["pulls"] + base["pushes"], 1)
            return pull, push, overall

        cells = ["{:.2f} / {:.2f} / {:.2f}".format(*ratios(rows[k])) for k in ("on-demand only", "location-aware only")]
        both = ratios(rows["Herald (both)"])
        print(f"| {name} | {base['samples']:,} (train) | {base['cache_rows']:,} | {cells[0]} | {cells[1]} | "
              f"{both[0]:.2f} / {both[1]:.2f} / **{both[2]:.3f}** | {rows['Herald (both)']['pulls']:,} | "
              f"{rows['Herald (both)']['pushes']:,} ({rows['Herald (both)']['push_flush']:,}) | "
              f"{rows['on-demand only']['push_flush'] / max(rows['on-demand only']['pushes'], 1):.1%} |")
        log(f"  herald {name}: {time.perf_counter() - t0:.0f} s")
    print("\nHerald's Table 1 (Criteo Kaggle, its own parameter-server setting): on-demand 1 / 0.84 / 0.91, "
          "location-aware 0.52 / 0.85 / 0.69, Herald 0.52 / 0.42 / 0.46.")


def section_like(pairs: dict[str, tuple[Path, Path]]) -> None:
    for name, (real, twin) in pairs.items():
        a = dataset_stats(load_dataset(real), StatsOptions())
        b = dataset_stats(load_dataset(twin), StatsOptions())
        print(f"\n### `--like {name}`: the real data vs its synthetic twin\n")
        print(f"| statistic | {name} | twin | twin / real |")
        print("|---|---:|---:|---:|")
        for row in compare_stats(a, b):
            cell = (lambda x: f"{x:,}") if isinstance(row.a, int) else (lambda x: fmt(float(x)))
            print(f"| {row.name} | {cell(row.a)} | {cell(row.b)} | {fmt(row.b / row.a if row.a else float('nan'))} |")
        print("\n| field | values used (real / twin) | zipf exponent (real / twin) | top-1% share (real / twin) |")
        print("|---|---|---|---|")
        for fa, fb in zip(a.fields, b.fields):
            print(f"| {fa.name} | {fa.values_used:,} / {fb.values_used:,} | {fmt(fa.zipf_exponent, 2)} / "
                  f"{fmt(fb.zipf_exponent, 2)} | {fa.top1pct_share:.2f} / {fb.top1pct_share:.2f} |")


TABLE3_METHODS = (("random", {}), ("bicut", {}), ("hybrid 1D, 1 round", {"rounds": 1, "replication_budget": 0.0}),
                  ("hybrid 1D, 3 rounds", {"rounds": 3, "replication_budget": 0.0}),
                  ("hybrid 1D, 5 rounds", {"rounds": 5, "replication_budget": 0.0}),
                  ("hybrid 1D+2D, 5 rounds (default)", {"rounds": 5}))


def section_table3(datasets: dict[str, Path], workers: int, batch_size: int) -> None:
    from gmp.graph import build_graph
    from gmp.metrics import compute_metrics
    from gmp.partition import run_partitioner
    from gmp.topology import homogeneous

    print(f"\n### HET-GMP Table 3 shape: {workers} workers, per-worker batch {batch_size}, seed 0\n")
    print("Units: `batch_remote_reads` = rows a worker reads from another worker, summed over the "
          "epoch's batches (each row once per batch); `remote_accesses` = sample-embedding edges whose "
          "row is remote; `epoch_unique_remote` = distinct (worker, remote row) pairs in the epoch.\n")
    print("| dataset | method | batch_remote_reads | vs random | remote_accesses | vs random | "
          "epoch_unique_remote | vs random | time (s) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    topology = homogeneous(workers)
    for name, path in datasets.items():
        graph = build_graph(load_dataset(path))
        ref = None
        for label, opts in TABLE3_METHODS:
            method = "hybrid" if label.startswith("hybrid") else label
            t0 = time.perf_counter()
            placement = run_partitioner(method, graph, topology, seed=0, options=dict(opts))
            secs = time.perf_counter() - t0
            m = compute_metrics(graph, placement, topology, batch_size=batch_size, seed=0)
            keys = ("batch_remote_reads", "remote_accesses", "epoch_unique_remote")
            vals = {k: float(m[k]) for k in keys}
            if ref is None:
                ref = vals
            cells = " | ".join(f"{vals[k]:,.0f} | {1 - vals[k] / ref[k]:.1%}" for k in keys)
            print(f"| {name} | {label} | {cells} | {secs:.1f} |")
            log(f"  table3 {name} {label}: {secs:.1f} s")
    print("\nHET-GMP Table 3 (reduction vs random, 8 partitions): Criteo BiCut 16.5%, 1/3/5 rounds "
          "51.0/62.6/63.5%; Avazu 18.7%, 63.1/67.0/67.7%; Company 13.5%, 37.3/59.7/63.8%.")


def fit_criteo(real: Path) -> None:
    """Refit the criteo-kaggle preset's field groups, sessions and dependence to the real rows."""
    from gmp.datasets.stats import field_values
    from gmp.datasets.synth import CRITEO_ENTITY_KNOBS, preset_config
    from gmp.datasets.synth_fit import dependence_matrix, fit_dependence, group_fields, synthetic_mi

    ds = load_dataset(real)
    target = dataset_stats(ds, StatsOptions(mi_bootstrap=0))
    names = [f.name for f in ds.categorical_fields]
    groups = group_fields(dependence_matrix(field_values(ds), names))
    cfg = preset_config("criteo-kaggle-entity", num_samples=1000, field_entity=groups, fidelity=1.0, segments=0,
                        coherence=0.0, session_share=0.0)
    cfg = fit_dependence(cfg, ds, target.mi.mean_bits, [f.values_used for f in target.fields],
                         segments=CRITEO_ENTITY_KNOBS["segments"])
    print(f"real mean MI above control: {target.mi.mean_bits:.4f} bits")
    print(f"field_entity = {groups}")
    print(f"fidelity = {cfg.fidelity:.4f}, segments = {cfg.segments}, coherence = {cfg.coherence:.4f}, "
          f"session_length = {cfg.session_length}, session_share = {cfg.session_share}")
    print(f"generator MI (mean of 4 windows of 1,000): {synthetic_mi(cfg):.4f} bits")


def fit_growth_criteo(real: Path) -> None:
    """Refit the criteo-kaggle preset's per-field skew, tail and fresh share (issue 37): the growth of each
    field's distinct values over the real rows' first 100, 200, 500, 1,000 rows and the published count at
    full size, on the issue-13 entity knobs with entity popularity 0.97 Zipf(1.1) + 0.03 Uniform."""
    from gmp.datasets.stats import distinct_growth, field_values
    from gmp.datasets.synth import CRITEO_KAGGLE_CARDINALITIES, CRITEO_KAGGLE_SAMPLES, preset_config
    from gmp.datasets.synth_fit import expected_distinct, fit_growth

    ds = load_dataset(real)
    wins = (100, 200, 500, 1000)
    curve = distinct_growth(field_values(ds, max(wins)), wins)
    base = preset_config("criteo-kaggle-entity", num_samples=CRITEO_KAGGLE_SAMPLES, entity_tail=0.03)
    cfg = fit_growth(base, wins, curve, CRITEO_KAGGLE_SAMPLES, CRITEO_KAGGLE_CARDINALITIES)
    r3 = lambda v: tuple(round(float(x), 3) for x in v)  # noqa: E731
    r4 = lambda v: tuple(round(float(x), 4) for x in v)  # noqa: E731
    print(f"field_skews = {r3(cfg.field_skews)}\nfield_tails = {r4(cfg.field_tails)}\n"
          f"field_fresh = {r4(cfg.field_fresh)}")
    for f, name in enumerate(cfg.field_names):
        got = [expected_distinct(cfg, f, w) for w in (*wins, CRITEO_KAGGLE_SAMPLES)]
        print(f"{name}: expected {' '.join(f'{x:,.0f}' for x in got)}; real {' '.join(f'{x:,}' for x in curve[:, f])}"
              f" {CRITEO_KAGGLE_CARDINALITIES[f]:,}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--criteo-real", type=Path, help="prepared dataset of the 1,000 real Criteo rows")
    ap.add_argument("--ml", type=Path, help="prepared MovieLens-100K")
    ap.add_argument("--frappe", type=Path, help="prepared Frappe (libfm validation + test)")
    ap.add_argument("--ipinyou", type=Path, help="prepared iPinYou (libfm train + test)")
    ap.add_argument("--skip-synth", action="store_true", help="real datasets only (no generated presets)")
    ap.add_argument("--workdir", type=Path, default=Path("data/bench/fidelity"))
    ap.add_argument("--samples", type=int, default=1_000_000, help="samples of the synthetic presets")
    ap.add_argument("--sections", default="mi,herald,like,table3")
    ap.add_argument("--table3-workers", type=int, default=8)
    ap.add_argument("--table3-batch", type=int, default=512)
    ap.add_argument("--fit-criteo", action="store_true", help="only refit the preset's knobs (needs --criteo-real)")
    ap.add_argument("--fit-growth", action="store_true",
                    help="only refit the preset's per-field growth knobs (issue 37; needs --criteo-real)")
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=PATH",
                    help="another prepared dataset to put in every section (e.g. a generator variant)")
    args = ap.parse_args(argv)
    if args.fit_growth:
        if args.criteo_real is None:
            ap.error("--fit-growth needs --criteo-real")
        fit_growth_criteo(args.criteo_real)
        return 0
    if args.fit_criteo:
        if args.criteo_real is None:
            ap.error("--fit-criteo needs --criteo-real")
        fit_criteo(args.criteo_real)
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    n = args.samples
    tag = f"{n // 1_000_000}m" if n % 1_000_000 == 0 else str(n)
    real = {k: v for k, v in (("criteo real 1,000 rows", args.criteo_real), ("MovieLens-100K", args.ml),
                              ("Frappe", args.frappe), ("iPinYou", args.ipinyou)) if v is not None}
    for k in ("criteo real 1,000 rows", "MovieLens-100K", "Frappe", "iPinYou"):
        if k not in real:
            log(f"note: {k} not given; skipped")
    synth = {} if args.skip_synth else {
        f"criteo-kaggle (entities, Criteo vocabulary) {tag}": synth_dataset(args.workdir, f"criteo-vocab-{tag}",
                                                                          "criteo-kaggle", n),
        f"criteo-kaggle-entity {tag}": synth_dataset(args.workdir, f"criteo-{tag}", "criteo-kaggle-entity", n),
        f"criteo-kaggle-independent {tag}": synth_dataset(args.workdir, f"criteo-independent-{tag}",
                                                          "criteo-kaggle-independent", n)}
    for item in args.extra:
        name, _, path = item.partition("=")
        if not path:
            ap.error(f"--extra expects NAME=PATH, got {item!r}")
        synth[name] = Path(path)
    likes = {}
    if args.ml is not None:
        likes["MovieLens-100K"] = (args.ml, like_dataset(args.workdir, "like-ml100k", args.ml))
    if args.frappe is not None:
        likes["Frappe"] = (args.frappe, like_dataset(args.workdir, "like-frappe", args.frappe))
    sections = set(args.sections.split(","))
    if "mi" in sections:
        section_mi({**real, **synth})
    if "herald" in sections:
        herald_sets = {k: v for k, v in real.items() if not k.startswith("criteo real")}
        herald_sets.update(synth)
        herald_sets.update({f"--like {k}": v[1] for k, v in likes.items()})
        section_herald(herald_sets)
    if "like" in sections and likes:
        section_like(likes)
    if "table3" in sections:
        t3 = {k: v for k, v in real.items() if not k.startswith("criteo real")}
        t3.update(synth)
        section_table3(t3, args.table3_workers, args.table3_batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
