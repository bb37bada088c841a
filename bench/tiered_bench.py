"""Tiered tables (``gmp train --table-location``, issue 12): samples/s of one worker with its table
on the device vs in host memory vs on disk behind a device cache of 10% / 25% of the rows, for
look-ahead windows 0 / 8 / 64 / 512; cache hit rates; test AUC (cDLRM's Table 1b: at s = 0 every
tier and cache size trains the same model, so the AUCs are equal, not merely close).

Data (criteo-kaggle preset, 500k samples, 3.38M ids)::

    gmp data synth --preset criteo-kaggle --samples 500000 --scale 0.1 --seed 0 --out data/bench/c500k
    python bench/tiered_bench.py --data data/bench/c500k --steps 60 --repeats 3

Runs are interleaved (repeat r runs every configuration once before repeat r + 1 starts), so a
change of machine load hits all configurations alike; the table gives the median samples/s over
the repeats and the spread (min-max) in percent of the median. ``vs device`` compares medians.
On a CPU machine the "device" cache is a CPU tensor: ``host`` measures the tier's bookkeeping,
``disk`` the pread/pwrite path (from the page cache when the file fits in RAM).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.placement import Placement  # noqa: E402
from gmp.train import TrainConfig, TrainData, Trainer  # noqa: E402
from gmp.train.run import load_placement, make_engine  # noqa: E402
from gmp.train.tiers import TierOptions  # noqa: E402


def configurations(locations, cache_percents, lookaheads):
    out = [("device", 0, 0)] if "device" in locations else []
    for loc in locations:
        if loc == "device":
            continue
        for pct in cache_percents:
            for k in lookaheads:
                out.append((loc, pct, k))
    return out


def stale_placement(data, num_workers: int, hot_percent: float, seed: int = 0) -> Placement:
    """``num_workers`` workers, rows and samples at random, the ``hot_percent`` % most accessed rows
    replicated on every other worker (secondaries: what bounded staleness s > 0 reads stale)."""
    rng = np.random.default_rng(seed)
    pl = Placement.edge_cut(num_workers, rng.integers(0, num_workers, data.num_samples).astype(np.int32),
                            rng.integers(0, num_workers, data.num_embeddings).astype(np.int32), method="random")
    hot = np.zeros(data.num_embeddings, dtype=bool)
    hot[np.argsort(-data.freq, kind="stable")[:int(data.num_embeddings * hot_percent / 100)]] = True
    counts = np.where(hot, num_workers - 1, 0)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    prim = np.asarray(pl.embedding_primary)
    others = (prim[hot][:, None] + np.arange(1, num_workers)[None, :]) % num_workers
    return pl.with_secondaries(indptr, others.reshape(-1).astype(np.int32))


def run_one(data, placement, args, loc, pct, lookahead, tier_dir, evaluate):
    tiers = None
    n = placement.num_workers
    if loc != "device":
        rows = max(1, data.num_embeddings // n * pct // 100)  # of each worker's share of the rows
        tiers = TierOptions(table_location=loc, cache_rows=rows, lookahead=lookahead,
                            tier_dir=tier_dir if loc == "disk" else None)
    cfg = TrainConfig(model=args.model, embedding_dim=args.embedding_dim, optimizer="adagrad", lr=0.01,
                      batch_size=args.batch_size, epochs=1, schedule="static", seed=0, tiers=tiers,
                      staleness=args.staleness)
    t0 = time.perf_counter()
    tr = Trainer(data, placement, cfg, make_engine("local", n))  # as gmp train: deterministic on CUDA
    setup = time.perf_counter() - t0
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        tr.fit(stop_after_steps=args.steps)
        cpu = time.process_time() - cpu0  # every thread of the process (the prefetcher's too)
        wall = time.perf_counter() - wall0  # the whole step loop: steps, waiting for rows, the inline loads (k = 0)
        out = {"location": loc, "cache_percent": pct, "lookahead": lookahead,
               "samples_per_sec": tr.acc["samples"] / wall,
               "step_samples_per_sec": tr.acc["samples"] / tr.acc["train_seconds"],  # inside train_step only
               "samples_per_cpu_sec": tr.acc["samples"] / cpu, "setup_seconds": setup, "steps": tr.acc["steps"]}
        if tiers is not None:
            sts = [s.tier.cache.stats.to_json() for s in tr.stores]
            hits, misses = sum(st["hits"] for st in sts), sum(st["misses"] for st in sts)
            out.update(hit_rate=hits / max(1, hits + misses),
                       stall_seconds=max(st["prefetch_stall_seconds"] for st in sts),
                       rows_loaded=sum(st["rows_loaded"] for st in sts),
                       rows_written_back=sum(st["rows_written_back"] for st in sts),
                       cache_rows=tr.stores[0].tier.cache.capacity)
        if evaluate:
            out.update(tr.evaluate())
        return out
    finally:
        tr.close()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/bench/c500k")
    ap.add_argument("--steps", type=int, default=60, help="training steps per run (a bounded part of the epoch)")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--embedding-dim", type=int, default=16)
    ap.add_argument("--model", default="wdl")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--locations", default="device,host,disk")
    ap.add_argument("--cache-percents", default="10,25")
    ap.add_argument("--lookaheads", default="0,8,64,512")
    ap.add_argument("--only", default=None,
                    help="explicit configurations instead of the cross product: 'host:10:0,disk:25:64,...' "
                         "(location:cache percent:lookahead; the device run is always included)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--tier-dir", default=None)
    ap.add_argument("--out", default=None, help="write every run as JSON here")
    ap.add_argument("--workers", type=int, default=1,
                    help="local workers (> 1: random placement, the --hot-percent most used rows replicated)")
    ap.add_argument("--hot-percent", type=float, default=1.0)
    ap.add_argument("--staleness", type=float, default=0.0, help="bounded staleness s (needs --workers > 1)")
    args = ap.parse_args(argv)
    if not Path(args.data, "dataset.json").is_file():
        sys.exit(f"{args.data}: no dataset; make it with 'gmp data synth --preset criteo-kaggle --samples 500000 "
                 f"--scale 0.1 --seed 0 --out {args.data}'.")
    torch.set_num_threads(args.threads)
    ds = load_dataset(args.data)
    data = TrainData(ds)
    placement = load_placement(ds, None, 1) if args.workers == 1 else \
        stale_placement(data, args.workers, args.hot_percent)
    confs = configurations(args.locations.split(","), [int(x) for x in args.cache_percents.split(",")],
                           [int(x) for x in args.lookaheads.split(",")])
    if args.only:
        confs = [("device", 0, 0)] + [(c.split(":")[0], int(c.split(":")[1]), int(c.split(":")[2]))
                                      for c in args.only.split(",")]
    tier_dir = args.tier_dir or tempfile.mkdtemp(prefix="gmp-tiered-bench-")
    run_one(data, placement, args, "device", 0, 0, tier_dir, evaluate=False)  # warm-up (untimed): first touches
    runs = []
    for r in range(args.repeats):
        for loc, pct, k in confs:
            res = run_one(data, placement, args, loc, pct, k, tier_dir, evaluate=(r == 0))
            res["repeat"] = r
            runs.append(res)
            if args.out:  # after every run: a stopped benchmark keeps what it measured
                Path(args.out).write_text(json.dumps(runs, indent=1))
            print(f"  repeat {r} {loc:6s} {pct:3d}% k={k:<4d} {res['samples_per_sec']:9,.0f} samples/s",
                  file=sys.stderr, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=1))
    print(f"{args.data}: {ds.num_samples:,} samples, {ds.num_embeddings:,} rows, {args.model} dim "
          f"{args.embedding_dim} Adagrad, {args.workers} worker(s) (s = {args.staleness:g}), batch {args.batch_size}, "
          f"{args.steps} steps per run, "
          f"{args.repeats} interleaved repeats, {args.threads} torch thread(s), "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU'}\n")
    head = (f"{'location':8s} {'cache':>6s} {'k':>4s} {'samples/s':>10s} {'spread':>7s} {'vs device':>9s} "
            f"{'per CPU s':>9s} {'spread':>7s} {'vs device':>9s} {'hit rate':>8s} {'stall s':>7s} {'test AUC':>9s} "
            f"{'logloss':>8s}")
    print(head)
    print("-" * len(head))
    base = base_cpu = None
    for loc, pct, k in confs:
        mine = [x for x in runs if (x["location"], x["cache_percent"], x["lookahead"]) == (loc, pct, k)]
        rates = [x["samples_per_sec"] for x in mine]
        med = statistics.median(rates)
        spread = (max(rates) - min(rates)) / med * 100
        cpu_rates = [x["samples_per_cpu_sec"] for x in mine]
        med_cpu = statistics.median(cpu_rates)
        spread_cpu = (max(cpu_rates) - min(cpu_rates)) / med_cpu * 100
        if loc == "device":
            base, base_cpu = med, med_cpu
        first = mine[0]
        vs = f"{med / base * 100:8.1f}%" if base else "        -"
        vs_cpu = f"{med_cpu / base_cpu * 100:8.1f}%" if base_cpu else "        -"
        hit = f"{first['hit_rate']:8.3f}" if "hit_rate" in first else "       -"
        stall = f"{statistics.median(x['stall_seconds'] for x in mine):7.2f}" if "stall_seconds" in first else "      -"
        cache = f"{pct}%" if pct else "all"
        print(f"{loc:8s} {cache:>6s} {k:4d} {med:10,.0f} {spread:6.1f}% {vs} {med_cpu:9,.0f} {spread_cpu:6.1f}% {vs_cpu} "
              f"{hit} {stall} "
              f"{first.get('test_auc', float('nan')):9.6f} {first.get('test_logloss', float('nan')):8.5f}")
    aucs = {x["test_auc"] for x in runs if "test_auc" in x}
    print("\nsamples/s: training samples / wall seconds of the step loop (steps, waits for rows, inline loads); "
          "per CPU s: / process CPU seconds "
          "(all threads) over the same steps, which a loaded machine disturbs far less; spread: (max - min) / median "
          "over the repeats; stall s: seconds a step waited for its rows (median); hit rate: first repeat.")
    print(f"test AUC equal in every configuration: {len(aucs) == 1} ({len(aucs)} distinct value(s))")
    if os.path.isdir(tier_dir) and not args.tier_dir:
        os.rmdir(tier_dir)


if __name__ == "__main__":
    main()
