"""Drifting multi-day benchmark of new data on an existing placement (issue 18; not a test).

Each "day" is a dataset in one stable id space (ids are numbered in order of
first appearance over the days, so the ids first seen on day d are the ids
at or above day d-1's ``num_embeddings`` — what ``gmp data import --extend``
produces). Day 0 is partitioned with ``hybrid``; every later day is handled
by five strategies, each a chain over the days (a strategy's day d starts
from its own day d-1 placement):

``kept``        day 0's rows kept; the day's samples dealt at random (balanced), new ids at random
``placed``      :func:`gmp.partition.incremental.place_new_data` (rows fixed, one streaming pass)
``incr-P%``     :func:`gmp.partition.incremental.place_and_repartition` with a budget of P% of the
                day's used rows (1%, 5%, 20% by default), its defaults: target mode, the target being the
                day's ``full`` re-partition below (its CPU is added to the strategy's: the target costs
                one full run); ``--plans onepass`` adds the one-pass plan's (``incr-P%/onepass``, no
                target), ``--targets none,full`` the exact plan without the target (``incr-P%/none``)
``full``        ``hybrid`` from scratch on the day's data; rows moved are counted after relabelling
                its workers to best match the previous day's full placement (Hungarian matching)
``full-window`` ``hybrid`` from scratch on days 0..d together (``--window``): what a user re-partitioning
                the accumulated data pays; its reads are scored on day d's samples
``full-gs``     the same with ``init="greedy-stream"`` (hybrid's graph-aware start, docs/hybrid.md):
                a stronger full re-partition (``--no-full-gs`` leaves it out); "vs full" stays
                relative to ``full``

Per day and strategy: ``batch_remote_reads`` (gmp.metrics, batch 512 per
worker), rows moved against the strategy's previous day
(:func:`gmp.partition.incremental.moved_rows`, counted over the ids the day
uses: a full re-partition also scatters the rows no sample of the day uses,
which it could as well have left in place), and the CPU seconds of the
partitioning call (``incr`` includes its placement pass). CPU time
(``time.process_time``), not wall time: the machine these numbers come from
is shared (load average ~10 on 2 cores), where wall time mostly measures the
neighbours; every kernel timed here is single-threaded.

Data.

* ``--source synth`` (default): one synthetic dataset (``gmp data synth``,
  preset criteo-kaggle, ``--scale``, ``--communities`` K) is generated as a
  pool; day d draws ``--day-samples`` samples *without replacement* from the
  pool with a drifting mixture over the pool's communities
  (``synth_community.npy``): log-weights start N(0, ``--spread``) and take a
  N(0, ``--drift``) random-walk step per day (clipped to +-2 ``--spread``). Popularity and which communities
  are active drift; ids first seen on a day are that day's new ids.
* ``--source mix``: day 0 from one synthetic population (``--preset``, ``--seed``); every later day
  ``1 - --mix`` (default 80%) fresh samples of it and ``--mix`` of another seed's population (the
  same fields, other hot values): :func:`mix_days`. Every day's line names its preset.
* ``--source movielens``: MovieLens-100K split by time: ratings sorted by
  timestamp, cut into ``--days`` equal-count periods (about a month each).
  Needs ``gmp data fetch movielens-100k -o RAW`` and ``gmp data import
  movielens RAW --out DIR --test-fraction 0``; pass ``--ml-raw RAW --ml-dataset DIR``.

Usage::

    python bench/incremental_bench.py --days 7 --day-samples 100000 --workers 8
    python bench/incremental_bench.py --source movielens --ml-raw data/ml-100k-raw --ml-dataset data/ml-100k

The machine these numbers come from is shared with other jobs: times are noisy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gmp.graph import BipartiteGraph  # noqa: E402
from gmp.metrics import batch_remote_reads  # noqa: E402
from gmp.partition import run_partitioner  # noqa: E402
from gmp.partition.incremental import (Options, match_workers, moved_rows, place_and_repartition,  # noqa: E402
                                       place_new_data, repartition_toward)
from gmp.partition.random import balanced_random_assignment  # noqa: E402
from gmp.placement import Placement  # noqa: E402
from gmp.topology import resolve_topology  # noqa: E402


def take_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sub-CSR of ``rows`` (in that order)."""
    lengths = (indptr[rows + 1] - indptr[rows]).astype(np.int64)
    out_ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_ptr[1:])
    starts = np.repeat(indptr[rows] - out_ptr[:-1], lengths)
    return out_ptr, np.asarray(indices)[np.arange(out_ptr[-1]) + starts]


def renumber(days: list[tuple[np.ndarray, np.ndarray]], id_space: int) -> list[BipartiteGraph]:
    """Ids numbered by first appearance over the days (a day's new ids follow the previous ids)."""
    new_id = np.full(id_space, -1, dtype=np.int64)
    seen = 0
    graphs = []
    for indptr, indices in days:
        u = np.unique(indices)
        fresh = u[new_id[u] < 0]
        new_id[fresh] = np.arange(seen, seen + fresh.size)
        seen += fresh.size
        graphs.append(BipartiteGraph.from_csr(indptr, new_id[indices].astype(np.int32), seen))
    return graphs


def synth_days(args) -> list[BipartiteGraph]:
    from gmp.datasets.format import load_dataset
    from gmp.datasets.synth import load_community, preset_config, synthesize

    pool_dir = Path(args.pool) if args.pool else Path(tempfile.mkdtemp(prefix="gmp-incr-bench-")) / "pool"
    if not (pool_dir / "dataset.json").is_file():
        cfg = preset_config(args.preset, num_samples=args.pool_samples, scale=args.scale, seed=args.seed,
                            num_communities=args.communities)
        synthesize(cfg, pool_dir)
    ds = load_dataset(pool_dir)
    comm = np.asarray(load_community(ds)).astype(np.int64)
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    k = int(comm.max()) + 1
    rng = np.random.default_rng(args.seed)
    members = [rng.permutation(np.flatnonzero(comm == c)) for c in range(k)]
    taken = np.zeros(k, dtype=np.int64)
    logw = rng.normal(0.0, args.spread, size=k)
    days = []
    for d in range(args.days):
        if d:
            logw = np.clip(logw + rng.normal(0.0, args.drift, size=k), -2 * args.spread, 2 * args.spread)
        w = np.exp(logw - logw.max())
        need = rng.multinomial(args.day_samples, w / w.sum())
        rows = []
        for c in range(k):
            avail = members[c].size - taken[c]
            if need[c] > avail:
                raise SystemExit(f"community {c} has {avail} unused pool samples, day {d} needs {need[c]}; "
                                 f"use a larger --pool-samples or a smaller --drift.")
            rows.append(members[c][taken[c]: taken[c] + need[c]])
            taken[c] += need[c]
        rows = np.sort(np.concatenate(rows))
        days.append(take_rows(indptr, indices, rows))
    return renumber(days, ds.num_embeddings)


def pool_dataset(path: Path, preset: str, num_samples: int, args, seed: int):
    """The synthetic pool at ``path`` (made there when missing)."""
    from gmp.datasets.format import load_dataset
    from gmp.datasets.synth import preset_config, synthesize

    if not (path / "dataset.json").is_file():
        synthesize(preset_config(preset, num_samples=num_samples, scale=args.scale, seed=seed,
                                 num_communities=args.communities), path)
    return load_dataset(path)


def mix_days(args) -> tuple[list[BipartiteGraph], list[str]]:
    """Day 0 from one synthetic population (``--preset``, seed ``--seed``); every later day draws
    ``1 - --mix`` of its samples afresh from that population and ``--mix`` from another seed's
    (``--seed + 1``: the same fields and cardinalities, other hot values), without replacement. The
    two pools share the raw id space (the same preset and scale); ids are then numbered by first
    appearance over the days. Returns the days and each day's preset mix."""
    root = Path(args.pool) if args.pool else Path(tempfile.mkdtemp(prefix="gmp-incr-mix-"))
    n, days = args.day_samples, args.days
    n_other = int(round(args.mix * n))
    a = pool_dataset(root / "mix-a", args.preset, n + (days - 1) * (n - n_other), args, args.seed)
    b = pool_dataset(root / "mix-b", args.preset, max((days - 1) * n_other, 1), args, args.seed + 1)
    if a.num_embeddings != b.num_embeddings:
        raise SystemExit("the two mix pools have different id spaces; use one preset and --scale")
    out, names = [], []
    ia, ib = 0, 0
    for d in range(days):
        take_a = n if d == 0 else n - n_other
        pa = take_rows(np.asarray(a.indptr), np.asarray(a.indices), np.arange(ia, ia + take_a))
        ia += take_a
        if d == 0 or n_other == 0:
            out.append(pa)
            names.append(f"{args.preset} seed {args.seed}")
            continue
        pb = take_rows(np.asarray(b.indptr), np.asarray(b.indices), np.arange(ib, ib + n_other))
        ib += n_other
        out.append((np.concatenate([pa[0], pb[0][1:] + pa[0][-1]]), np.concatenate([pa[1], pb[1]])))
        names.append(f"{args.preset}: {1 - args.mix:.0%} seed {args.seed}, {args.mix:.0%} seed {args.seed + 1}")
    return renumber(out, a.num_embeddings), names


def movielens_days(args) -> list[BipartiteGraph]:
    from gmp.datasets.format import load_dataset

    ds = load_dataset(args.ml_dataset)
    inter = Path(args.ml_raw) / "ml-100k.inter"
    ts = np.loadtxt(inter, skiprows=1, usecols=3, delimiter="\t")
    if ts.size != ds.num_samples:
        raise SystemExit(f"{inter} has {ts.size} ratings, {args.ml_dataset} {ds.num_samples} samples; import it "
                         f"with --test-fraction 0 and no skipped lines.")
    order = np.argsort(ts, kind="stable")
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    days = [take_rows(indptr, indices, np.sort(part)) for part in np.array_split(order, args.days)]
    return renumber(days, ds.num_embeddings)


def window_graph(graphs: list[BipartiteGraph]) -> BipartiteGraph:
    """The days' samples one after another, in the last day's id space (what re-partitioning the
    accumulated data from scratch partitions)."""
    indptr = [np.asarray(graphs[0].sample_indptr)]
    for g in graphs[1:]:
        indptr.append(np.asarray(g.sample_indptr)[1:] + indptr[-1][-1])
    indices = np.concatenate([np.asarray(g.sample_indices) for g in graphs])
    return BipartiteGraph.from_csr(np.concatenate(indptr), indices, graphs[-1].num_embeddings)


def kept_placement(graph: BipartiteGraph, prev: Placement, rng: np.random.Generator) -> Placement:
    """Rows of ``prev`` kept, new ids and the day's samples dealt at random (balanced)."""
    n = prev.num_workers
    m_old = prev.num_embeddings
    prim = np.concatenate([np.asarray(prev.embedding_primary),
                           balanced_random_assignment(graph.num_embeddings - m_old, n, rng)]).astype(np.int32)
    ip = np.asarray(prev.secondary_indptr)
    indptr = np.concatenate([ip, np.full(graph.num_embeddings - m_old, ip[-1], dtype=np.int64)])
    return Placement(n, balanced_random_assignment(graph.num_samples, n, rng).astype(np.int32), prim, indptr,
                     np.asarray(prev.secondary_workers, dtype=np.int32), method="kept")


def add_day_arguments(ap: argparse.ArgumentParser, *, preset: str = "criteo-kaggle") -> None:
    """The options of the synthetic day generators (:func:`synth_days`, :func:`mix_days`), shared with
    the benches that draw their days from this module (incremental_oracle.py, incremental_compound.py)."""
    ap.add_argument("--day-samples", type=int, default=100_000)
    ap.add_argument("--pool-samples", type=int, default=1_500_000)
    ap.add_argument("--pool", default=None, help="Pool dataset directory (generated there when missing).")
    ap.add_argument("--scale", type=float, default=0.02)
    ap.add_argument("--preset", default=preset,
                    help="Synth preset of the pool (criteo-kaggle: latent entities; criteo-kaggle-independent: "
                         "community slices, many more ids per day).")
    ap.add_argument("--communities", type=int, default=64)
    ap.add_argument("--drift", type=float, default=0.5)
    ap.add_argument("--spread", type=float, default=0.75)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)


def add_one_day_arguments(ap: argparse.ArgumentParser, *, budgets: str) -> None:
    """The options of a bench that measures one synthetic day against its previous day's placement
    (:func:`one_day`: incremental_oracle.py, incremental_pairs.py)."""
    add_day_arguments(ap, preset="criteo-kaggle-independent")
    ap.add_argument("--source", choices=("synth", "mix"), default="synth")
    ap.add_argument("--mix", type=float, default=0.2)
    ap.add_argument("--day", type=int, default=1, help="The day measured (its previous day is the old one).")
    ap.add_argument("--budgets", default=budgets, help="Percent of the day's used rows.")


def one_day(args):
    """``(graph, old, full, topology, full_cpu_seconds)`` of day ``args.day``: its graph, ``hybrid`` on the
    previous day (seed ``args.seed``) and ``hybrid`` on the day (seed ``args.seed + day``, its CPU seconds)."""
    args.days = args.day + 1
    graphs = mix_days(args)[0] if args.source == "mix" else synth_days(args)
    topo = resolve_topology(args.workers, None, None)
    options = {"batch_size": args.batch_size}
    old = run_partitioner("hybrid", graphs[args.day - 1], topo, seed=args.seed, options=options)
    t = time.process_time()
    full = run_partitioner("hybrid", graphs[args.day], topo, seed=args.seed + args.day, options=options)
    return graphs[args.day], old, full, topo, time.process_time() - t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", choices=("synth", "mix", "movielens"), default="synth")
    ap.add_argument("--mix", type=float, default=0.2, help="--source mix: share of a later day's samples from the "
                    "other seed's population.")
    ap.add_argument("--targets", default="full", help="Incremental Options.target values of the exact plan, "
                    "comma-separated (full, none); a target other than the first is named incr-P%%/TARGET.")
    ap.add_argument("--days", type=int, default=7)
    add_day_arguments(ap)
    ap.add_argument("--sweep", choices=("all", "changed", "every"), default=None,
                    help="Incremental Options.sweep (default: by the day's density, Options' own default).")
    ap.add_argument("--starts", default="auto",
                    help="Incremental Options.start values, comma-separated (auto, pass, project; auto: by the "
                         "day's density, Options' own default); the strategies of a start other than the first are "
                         "named incr-P%%/START.")
    ap.add_argument("--plans", default="",
                    help="More incremental Options.plan values, comma-separated (onepass; the other options at "
                         "their defaults): their strategies are named incr-P%%/PLAN. Default: the exact plan only.")
    ap.add_argument("--sweep-first", choices=("true", "false"), default=None,
                    help="Incremental Options.sweep_first (default: by the day's density).")
    ap.add_argument("--no-carry", dest="carry", action="store_false", help="Incremental carry_private=False.")
    ap.add_argument("--budgets", default="1,5,20", help="Incremental budgets in percent of the day's used rows.")
    ap.add_argument("--rounds", type=int, default=None, help="Incremental rounds (default: by the day's density).")
    ap.add_argument("--no-full-gs", dest="full_gs", action="store_false",
                    help="Leave out the hybrid re-partition with the greedy-stream start.")
    ap.add_argument("--toward", default="",
                    help="Budgets (percent) of 'toward-P%%': the best row moves toward the day's full "
                         "re-partition (repartition_toward; its CPU s exclude the full re-partition it needs).")
    ap.add_argument("--window", action="store_true",
                    help="Also 'full-window': hybrid from scratch on days 0..d together (what re-partitioning the "
                         "accumulated data costs), scored on day d's samples.")
    ap.add_argument("--ml-raw", default=None)
    ap.add_argument("--ml-dataset", default=None)
    args = ap.parse_args(argv)

    if args.source == "mix":
        graphs, presets = mix_days(args)
    else:
        graphs = synth_days(args) if args.source == "synth" else movielens_days(args)
        presets = [args.preset if args.source == "synth" else "movielens-100k by time"] * len(graphs)
    topo = resolve_topology(args.workers, None, None)
    bs = args.batch_size
    budgets = [float(b) for b in args.budgets.split(",") if b.strip()]
    starts = [x.strip() for x in args.starts.split(",") if x.strip()]
    sweep_first = None if args.sweep_first is None else args.sweep_first == "true"
    opts = Options(batch_size=bs, rounds=args.rounds, sweep=args.sweep, start=None if starts[0] == "auto" else starts[0],
                   sweep_first=sweep_first, carry_private=args.carry)
    start_opts = {st: replace(opts, start=None if st == "auto" else st) for st in starts}
    plans = [x.strip() for x in args.plans.split(",") if x.strip()]
    start_opts.update({pl: Options(batch_size=bs, plan=pl) for pl in plans})
    targets = [x.strip() for x in args.targets.split(",") if x.strip()]
    start_opts = {st: replace(o, target=targets[0]) if o.plan == "exact" else o for st, o in start_opts.items()}
    start_opts.update({tg: replace(opts, target=tg) for tg in targets[1:]})
    hybrid_opts = {"batch_size": bs}
    rng = np.random.default_rng(args.seed)

    t = time.process_time()
    day0 = run_partitioner("hybrid", graphs[0], topo, seed=args.seed, options=hybrid_opts)
    t0 = time.process_time() - t
    # compile (or load from numba's cache) every kernel before timing
    goal = match_workers(day0, run_partitioner("hybrid", graphs[1], topo, options=hybrid_opts))
    repartition_toward(graphs[1], day0, goal, topo, max_moved_rows=1, options=opts)
    for o in start_opts.values():
        place_and_repartition(graphs[1], day0, topo, max_moved_rows=1, options=o, goal=goal)
    towards = [float(b) for b in args.toward.split(",") if b.strip()]
    names = ["full", "kept", "placed"] + [f"incr-{b:g}%" for b in budgets]  # full first: the others' target
    names += [f"incr-{b:g}%/{st}" for st in starts[1:] + plans + targets[1:] for b in budgets]
    names += (["full-gs"] if args.full_gs else []) + (["full-window"] if args.window else [])
    names += [f"toward-{b:g}%" for b in towards]
    prev = {name: day0 for name in names}
    rows_out = []
    kept: dict = {}
    print(f"# {' '.join(sys.argv)}")
    print(f"# {args.source}: {args.days} days, {args.workers} workers, batch {bs}; day 0: "
          f"{graphs[0].num_samples:,} samples, {graphs[0].num_embeddings:,} ids, hybrid "
          f"{batch_remote_reads(graphs[0], day0, bs):,} batch_remote_reads in {t0:.2f} s\n")
    for d in range(1, len(graphs)):
        g = graphs[d]
        used_ids = np.unique(np.asarray(g.sample_indices))
        used = int(used_ids.size)
        new_used = int(np.count_nonzero(used_ids >= graphs[d - 1].num_embeddings))
        res = {}
        for name in names:
            old = prev[name]
            t = time.process_time()
            if name == "kept":
                p = kept_placement(g, old, rng)
            elif name == "placed":
                p = place_new_data(g, old, topo, seed=args.seed, options=opts)
            elif name == "full":
                p = full_raw = run_partitioner("hybrid", g, topo, seed=args.seed + d, options=hybrid_opts)
                full_cpu = time.process_time() - t
            elif name.startswith("toward"):
                goal = match_workers(old, full_raw)
                t = time.process_time()
                budget = int(float(name[7:-1]) / 100.0 * used)
                p = repartition_toward(g, old, goal, topo, max_moved_rows=budget, options=opts)
            elif name == "full-window":
                win = window_graph(graphs[: d + 1])
                t = time.process_time()
                p = run_partitioner("hybrid", win, topo, seed=args.seed + d, options=hybrid_opts)
            elif name == "full-gs":
                p = run_partitioner("hybrid", g, topo, seed=args.seed + d, options={**hybrid_opts, "init": "greedy-stream"})
            else:
                pct, _, st = name[5:].partition("/")
                budget = int(float(pct[:-1]) / 100.0 * used)
                o = start_opts[st or starts[0]]
                p = place_and_repartition(g, old, topo, max_moved_rows=budget, seed=args.seed, options=o,
                                          goal=full_raw)[1]
                if "kept" in p.info:  # target mode: its target is the full re-partition, timed there
                    t -= full_cpu
                    kept[d, name] = p.info["kept"]
            sec = time.process_time() - t
            if name.startswith("full"):
                p = match_workers(old, p)
            prev[name] = p
            if name == "full-window":  # the window's placement, scored on the day's samples (its last ones)
                p = Placement(p.num_workers, np.asarray(p.sample_worker)[-g.num_samples:], p.embedding_primary,
                              p.secondary_indptr, p.secondary_workers)
            res[name] = (batch_remote_reads(g, p, bs), moved_rows(old, p, rows=used_ids).total, sec)
        full_reads = res["full"][0]
        for name in names:
            reads, moved, sec = res[name]
            rows_out.append((d, name, reads, moved, sec))
        print(f"day {d} ({presets[d]}): {g.num_samples:,} samples, {used:,} used ids ({new_used:,} new), "
              f"full re-partition {full_reads:,} reads")
    print()
    print("| day | strategy | batch_remote_reads | vs full | rows moved | % of used rows | CPU s | kept |")
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    fulls = {d: r for d, n, r, _, _ in rows_out if n == "full"}
    used_of = {d: int(np.count_nonzero(np.bincount(np.asarray(graphs[d].sample_indices)))) for d in fulls}
    for d, name, reads, moved, sec in rows_out:
        print(f"| {d} | {name} | {reads:,} | {reads / fulls[d]:.3f} | {moved:,} | "
              f"{100.0 * moved / used_of[d]:.2f} | {sec:.2f} | {kept.get((d, name), '')} |")
    print()
    print("| strategy | mean reads vs full (days 1+) | max reads vs full | rows moved (all days) | CPU s (all days) | CPU vs full |")
    print("|---|---:|---:|---:|---:|---:|")
    full_cpu = sum(s for d, n, r, m, s in rows_out if n == "full")
    for name in names:
        rs = [(r / fulls[d], m, s) for d, n, r, m, s in rows_out if n == name]
        ratio = np.array([x[0] for x in rs])
        cpu = sum(x[2] for x in rs)
        print(f"| {name} | {ratio.mean():.3f} | {ratio.max():.3f} | {sum(x[1] for x in rs):,} | "
              f"{cpu:.2f} | {cpu / full_cpu:.2f} |")


if __name__ == "__main__":
    main()
