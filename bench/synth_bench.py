"""Benchmark of the synthetic generator (``gmp data synth``), and what its knobs do to the graph.

Two parts:

* ``--sizes`` (default 1M and 10M samples x 26 fields, ``--preset``
  criteo-kaggle (the entity model) or criteo-kaggle-independent, scale 1): each size runs ``gmp data synth`` in a child process under
  ``/usr/bin/time -v`` (falling back to ``getrusage(RUSAGE_CHILDREN)``) and
  prints wall time, CPU time, rows/s and peak RSS, then the graph statistics
  of the result (``BipartiteGraph.stats()``).
* ``--sweep`` (in memory, no files): one knob of the independent model
  (criteo-kaggle-independent) at a time around the defaults,
  printing active embeddings, top-1% access share, the Bayes AUC and the
  remote share of local-field accesses under the planted partition
  (communities -> 8 workers) vs 7/8 under a random one.

Usage::

    python bench/synth_bench.py --sizes 1000000,10000000 --workdir data/bench/bench
    python bench/synth_bench.py --sizes 0 --sweep --sweep-samples 1000000
    python bench/synth_bench.py --stats data/bench/criteo-full   # stats of an existing dataset

Timings on a shared machine are noisy; CPU time (user + sys) is the steadier figure.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gmp.datasets import load_dataset  # noqa: E402
from gmp.datasets.synth import SyntheticCTR, preset_config, roc_auc  # noqa: E402
from gmp.graph import BipartiteGraph, build_graph  # noqa: E402


def run_synth(samples: int, out: Path, chunk: int, preset: str = "criteo-kaggle") -> dict:
    cmd = [sys.executable, "-m", "cli.main", "data", "synth", "--preset", preset, "--scale", "1",
           "--samples", str(samples), "--seed", "0", "--chunk-samples", str(chunk), "--out", str(out),
           "--overwrite"]
    gnu_time = Path("/usr/bin/time").exists()
    if gnu_time:
        cmd = ["/usr/bin/time", "-v", *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"synth failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    peak_kb = int(m.group(1)) if m else after.ru_maxrss
    return {"samples": samples, "wall_s": wall, "cpu_s": cpu, "peak_rss_gib": peak_kb / 2**20,
            "command": " ".join(cmd[2:] if gnu_time else cmd)}


def dataset_stats(path: Path) -> dict:
    """BipartiteGraph.stats() of a prepared dataset, with the degree counted in chunks.

    The degree is counted by a chunked bincount and handed to the graph, so
    stats() does not build the full transpose (4.8 GB at Criteo-Kaggle scale).
    """
    ds = load_dataset(path)
    g = build_graph(ds)
    deg = np.zeros(ds.num_embeddings, dtype=np.int64)
    step = 1 << 27
    for a in range(0, ds.num_edges, step):
        deg += np.bincount(np.asarray(ds.indices[a : a + step]), minlength=ds.num_embeddings)
    g._emb_degree = deg  # noqa: SLF001 - the cached degree stats() reads
    st = g.stats().to_json()
    counts = deg[deg > 0]
    st["values_seen_once"] = int((counts == 1).sum())
    st["values_seen_ge10"] = int((counts >= 10).sum())
    st["bayes_auc"] = ds.meta["synth"]["bayes_auc"]
    st["label_rate"] = ds.meta["label_rate"]
    return st


def sweep_point(samples: int, workers: int = 8, **knobs) -> dict:
    # the sweep is about the independent model's knobs (locality, communities)
    cfg = preset_config("criteo-kaggle-independent", num_samples=samples, seed=0, **knobs)
    gen = SyntheticCTR(cfg)
    deg = np.zeros(cfg.num_embeddings, dtype=np.int64)
    local_cols = np.flatnonzero(cfg.local_fields)
    owner = {}
    for f in local_cols:
        n, a = cfg.cardinalities[f], int(cfg.offsets[f])
        owner[f] = gen.owner_community(f, np.arange(n)) % workers
        gen._inverse_perm.clear()  # noqa: SLF001 - keep one inverse table at a time
    remote = total = 0
    labels, ctr = [], []
    for s0 in range(0, samples, 1 << 18):
        ch = gen.generate(s0, min(samples, s0 + (1 << 18)))
        deg += np.bincount(ch.ids.ravel(), minlength=cfg.num_embeddings)
        sw = ch.community % workers
        for f in local_cols:
            remote += int((owner[f][ch.ids[:, f] - cfg.offsets[f]] != sw).sum())
            total += ch.ids.shape[0]
        labels.append(ch.labels)
        ctr.append(ch.ctr)
    g = BipartiteGraph(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), cfg.num_embeddings, check=False)
    g._emb_degree = deg  # noqa: SLF001
    st = g.stats()
    return {
        **{k: knobs.get(k, getattr(cfg, k)) for k in ("skew", "tail", "num_communities", "locality")},
        "active": st.num_active_embeddings,
        "top1pct": st.top1pct_access_share,
        "max_deg": st.max_embedding_degree,
        "planted_remote_local": remote / max(total, 1),
        "bayes_auc": roc_auc(np.concatenate(labels), np.concatenate(ctr)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,10000000", help="comma-separated sample counts (0: none)")
    ap.add_argument("--workdir", default="data/bench/bench", help="where the benchmark datasets go")
    ap.add_argument("--chunk-samples", type=int, default=1 << 18)
    ap.add_argument("--preset", default="criteo-kaggle",
                    help="preset of the --sizes runs (criteo-kaggle or criteo-kaggle-independent)")
    ap.add_argument("--keep", action="store_true", help="keep the generated datasets")
    ap.add_argument("--sweep", action="store_true", help="run the knob sweep (in memory)")
    ap.add_argument("--sweep-samples", type=int, default=1_000_000)
    ap.add_argument("--stats", nargs="*", default=[], help="print stats of existing datasets")
    args = ap.parse_args()

    for path in args.stats:
        print(path, dataset_stats(Path(path)))
    sizes = [int(s) for s in args.sizes.split(",") if int(s) > 0]
    if sizes:
        print("| samples | wall s | CPU s | rows/s (wall) | rows/s (CPU) | peak RSS GiB | active embeddings | "
              "edges | top-1% share |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        out = Path(args.workdir) / f"synth-bench-{n}"
        r = run_synth(n, out, args.chunk_samples, args.preset)
        st = dataset_stats(out)
        print(f"| {n:,} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {n / r['wall_s']:,.0f} | {n / r['cpu_s']:,.0f} | "
              f"{r['peak_rss_gib']:.2f} | {st['num_active_embeddings']:,} | {st['num_edges']:,} | "
              f"{st['top1pct_access_share']:.3f} |", flush=True)
        print(f"  command: {r['command']}", flush=True)
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    if args.sweep:
        n = args.sweep_samples
        points = [{}, {"skew": 0.8}, {"skew": 1.4}, {"tail": 0.0}, {"tail": 0.6}, {"locality": 0.0},
                  {"locality": 0.4}, {"locality": 0.9}, {"num_communities": 8}, {"num_communities": 512}]
        print(f"\nknob sweep, criteo-kaggle-independent scale 1, {n:,} samples, 8 workers (random placement: 0.875 remote)")
        print("| skew | tail | communities | locality | active embeddings | top-1% share | max degree | "
              "planted remote share (local fields) | Bayes AUC |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p in points:
            r = sweep_point(n, **p)
            print(f"| {r['skew']} | {r['tail']} | {r['num_communities']} | {r['locality']} | {r['active']:,} | "
                  f"{r['top1pct']:.3f} | {r['max_deg']:,} | {r['planted_remote_local']:.3f} | "
                  f"{r['bayes_auc']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
