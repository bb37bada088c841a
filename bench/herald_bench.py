"""Herald benchmark (not a test): Table 1, scheduler time per batch, and training with --schedule herald.

Three parts, each printed as a markdown table:

1. **Table 1 of Herald** (APNet'22): cache pulls / pushes / overall traffic of
   one epoch, normalised to naive (pushes also without the end-of-epoch flush,
   ``push_flush``, which the table shows apart), for naive / on-demand only /
   location-aware only / Herald (both) -- plus Herald with the look-ahead
   cache policy -- in two settings:

   * ``ps``: Herald's own setting: every row on a separate parameter server,
     each of the N workers caches ``--cache-fraction`` of the active rows (LRU);
   * ``ps-hot``: the same, counting only the rows Herald caches (frequency
     > ``--min-frequency``, 1e-5; the others are served outside the cache);
   * ``manifest``: gmp's setting: primaries (and secondaries) from a manifest
     (``--manifest``; default a random placement over N workers), same caches.

2. **Scheduler time** for global batches of ``--timing-batch`` (8192) samples
   x 26 fields over N = 8 workers, single thread (``NUMBA_NUM_THREADS=1``, set
   before numba loads): Algorithm 1's assignment alone (with the batch gather
   and the marking of the batch's rows), and the full step (assignment +
   communication plan + reads/updates + cache update + event arrays), CPU
   (``thread_time``) and wall, per batch, in steady state (caches full), as
   the median over ``--timing-repeats`` repeats of ``--timing-batches``
   batches each.

3. **Training** (``--train``): ``gmp train``'s trainer (local engine) on a small
   criteo-kaggle-preset dataset with ``--schedule static``, ``naive`` and
   ``herald`` on the same manifest: samples/s, embedding bytes per iteration,
   remote rows read/pushed per iteration. With ``--train-manifest M
   --train-dataset D``: ``gmp train --engine distributed`` under torchrun on
   that manifest instead.

Usage::

    python bench/herald_bench.py --dataset data/bench/criteo-1m --workers 8 --batch-size 128
    python bench/herald_bench.py --skip-table --train --train-samples 50000

Numbers and commands: docs/herald.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.placement import Placement  # noqa: E402
from gmp.simulate import epoch_order, simulate  # noqa: E402
from gmp.train.herald import HeraldOptions, RuntimeScheduler, batch_capacities  # noqa: E402
from gmp.train.herald.kernels import SPREAD, BatchBuffers, assign_mark  # noqa: E402

SETTINGS = ("ps", "ps-hot", "manifest")
ROWS = [
    ("naive", "naive", False, "lru"),
    ("on-demand only", "naive", True, "lru"),
    ("location-aware only", "herald", False, "lru"),
    ("Herald (both)", "herald", True, "lru"),
    ("Herald + look-ahead cache", "herald", True, "lookahead"),
]


def random_placement(num_samples: int, num_embeddings: int, n: int, seed: int = 0) -> Placement:
    rng = np.random.default_rng(seed)
    return Placement.edge_cut(n, rng.integers(0, n, num_samples, dtype=np.int32),
                              rng.integers(0, n, num_embeddings, dtype=np.int32), method="random", seed=seed)


def active_rows(ds, num_train: int) -> int:
    used = np.zeros(ds.num_embeddings, dtype=bool)
    used[np.asarray(ds.indices[: int(ds.indptr[num_train])])] = True
    return int(used.sum())


def table1(ds, placement, args) -> list[dict]:
    order = epoch_order(ds.num_train, args.seed)
    if args.samples:
        order = order[: args.samples]
    rows_active = active_rows(ds, ds.num_train)
    cache_rows = max(1, int(args.cache_fraction * rows_active))
    out = []
    for setting in SETTINGS:
        for label, schedule, on_demand, policy in ROWS:
            t0 = time.perf_counter()
            options = HeraldOptions(on_demand=on_demand, cache_rows=cache_rows, cache_policy=policy,
                                    lookahead=args.lookahead, read_only_replicas=False)
            res = simulate(ds.indptr, ds.indices, placement, num_train=ds.num_train, batch_size=args.batch_size,
                           schedule=schedule, options=options, seed=args.seed, embedding_dim=args.embedding_dim,
                           parameter_server=setting.startswith("ps"),
                           min_frequency=args.min_frequency if setting.endswith("hot") else 0.0,
                           order=order).to_json()
            res.update(setting=setting, label=label, active_rows=rows_active, wall_s=time.perf_counter() - t0)
            out.append(res)
            print(f"  {setting:8s} {label:26s} pulls {res['pulls']:>11,} pushes {res['pushes']:>11,} "
                  f"(flush {res['push_flush']:,}; {res['wall_s']:.0f} s)", file=sys.stderr, flush=True)
    return out


def print_table1(results: list[dict]) -> None:
    for setting in SETTINGS:
        rows = [r for r in results if r["setting"] == setting]
        if not rows:
            continue
        base = rows[0]
        r0 = rows[0]
        hot = f", rows with frequency > {r0['min_frequency']:g} only" if r0["min_frequency"] else ""
        print(f"\n### Table 1, setting `{setting}`{hot} ({r0['workers']} workers, B = {r0['batch_size']}, "
              f"cache {r0['cache_rows']:,} rows/worker = {r0['cache_rows'] / r0['active_rows']:.1%} of "
              f"{r0['active_rows']:,} active rows, {r0['batches']} batches)\n")
        # pushes = in-epoch pushes (sync + plan + evict) + the end-of-epoch flush, shown apart as
        # `gmp simulate` reports it (push_flush): the flush is paid once per epoch whatever the schedule
        print("| optimization | pulls | pushes (in epoch + flush) | pull | push | push w/o flush | overall "
              "| prefetchable pulls | ms/batch |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            pull = r["pulls"] / max(base["pulls"], 1)
            push = r["pushes"] / max(base["pushes"], 1)
            in_epoch = (r["pushes"] - r["push_flush"]) / max(base["pushes"] - base["push_flush"], 1)
            overall = (r["pulls"] + r["pushes"]) / max(base["pulls"] + base["pushes"], 1)
            pre = r["prefetchable_pulls"] / max(r["pulls"], 1)
            print(f"| {r['label']} | {r['pulls']:,} | {r['pushes'] - r['push_flush']:,} + {r['push_flush']:,} | "
                  f"{pull:.2f} | {push:.2f} | {in_epoch:.2f} | {overall:.2f} | {pre:.0%} | "
                  f"{r['schedule_ms_per_batch']:.1f} |")
        print("\nHerald's Table 1 (Criteo Kaggle): on-demand 1 / 0.84 / 0.91, location-aware 0.52 / 0.85 / 0.69, "
              "Herald 0.52 / 0.42 / 0.46 (pull / push / overall).")


def timing(ds, placement, args) -> dict:
    """Scheduler ms per global batch of args.timing_batch samples over args.timing_workers workers.

    ``args.timing_repeats`` epochs (orders seed, seed + 1, ...) of one engine; in each, after
    ``args.timing_warmup`` batches (the first epoch's warm-up fills the caches: steady state),
    ``args.timing_batches`` batches are timed one by one (full steps back to back, then the
    front kernel alone on the same batches): wall (``perf_counter``) and CPU
    (``thread_time``: this thread only, so other jobs on the machine do not count, but they
    still compete for caches and memory). Reported: the median over repeats of each
    repeat's median (and min / mean), for the front kernel alone (batch gather + Algorithm 1
    + marking the batch's rows) and for the full step (``next_batch``: everything the
    simulator and the trainer get, the ``BatchSchedule`` included). During the full steps the
    four kernels of ``next_batch`` are timed too (CPU, each call wrapped in ``thread_time``:
    a few microseconds per step); "rest" is the full step minus the kernels (the sort of the
    batch's distinct rows, allocations, Python).
    """
    import gmp.train.herald.engine as sched_mod

    n = args.timing_workers
    b = args.timing_batch // n
    if placement.num_workers != n:
        placement = random_placement(ds.num_samples, ds.num_embeddings, n, args.seed)
    rows_active = active_rows(ds, ds.num_train)
    cache_rows = max(1, int(args.cache_fraction * rows_active))
    eng = RuntimeScheduler(ds.indptr, ds.indices, placement,
                           HeraldOptions(on_demand=True, cache_rows=cache_rows, read_only_replicas=False),
                           batch_size=b, assignment="herald")
    vw = eng.vw.copy()  # scratch: the front kernel alone must not touch the engine's state
    nnz = args.timing_batch * eng.max_degree
    b_ptr, b_idx, touched = (np.empty(args.timing_batch + 1, np.int64), np.empty(nnz, np.int32),
                             np.empty(nnz, np.int32))
    keys = ("assign_wall", "assign_cpu", "step_wall", "step_cpu") + tuple(f"kernel{k}_cpu" for k in KERNELS)
    reps: dict[str, list] = {k: [] for k in keys}
    kernel_s: dict[str, list] = {k: [] for k in KERNELS}
    originals = {k: getattr(sched_mod, k) for k in KERNELS}

    def timed(name, fn):
        def call(*a):
            c0 = time.thread_time()
            r = fn(*a)
            kernel_s[name].append(time.thread_time() - c0)
            return r
        return call

    fields, events, loads = [], [], [os.getloadavg()[0]]
    for rep in range(args.timing_repeats):
        eng.start_epoch(epoch_order(ds.num_train, args.seed, rep))
        if eng.num_batches() < args.timing_warmup + args.timing_batches:
            raise SystemExit(f"--timing-warmup + --timing-batches exceed the {eng.num_batches()} batches of an epoch")
        for _ in range(args.timing_warmup):
            eng.next_batch()
        cur = {k: [] for k in keys}
        first = eng.position
        for k in KERNELS:  # next_batch looks the kernels up in the module at each call
            kernel_s[k].clear()
            setattr(sched_mod, k, timed(k, originals[k]))
        try:
            for _ in range(args.timing_batches):  # the full steps, back to back (as in an epoch)
                c0 = time.thread_time()
                sched = eng.next_batch()
                cur["step_cpu"].append(time.thread_time() - c0)
                cur["step_wall"].append(sched.schedule_s)
                events.append(sched.event_kind.size)
        finally:
            for k in KERNELS:
                setattr(sched_mod, k, originals[k])
        for k in KERNELS:
            cur[f"kernel{k}_cpu"] = kernel_s[k][:]
        for k in range(first, first + args.timing_batches):  # then the front kernel alone, same batches
            samples = eng.batch_samples(k)
            caps = batch_capacities(samples.size, n)
            worker_of = np.empty(samples.size, dtype=np.int32)
            t0, c0 = time.perf_counter(), time.thread_time()
            state = eng.kernel_state()._replace(vw=vw)
            bufs = BatchBuffers(b_ptr, b_idx.view(np.uint32), touched.view(np.uint32), *eng.kernel_buffers()[3:])
            ids, nt, _ = assign_mark(state, bufs, eng.indptr, eng.indices_u32, samples, caps, True, eng.swar, SPREAD,
                                     worker_of)
            cur["assign_wall"].append(time.perf_counter() - t0)
            cur["assign_cpu"].append(time.thread_time() - c0)
            vw[touched[:nt], 1] = 0
            fields.append(ids / samples.size)
        for k in keys:
            reps[k].append(1000 * np.asarray(cur[k]))
        loads.append(os.getloadavg()[0])
    out = {"workers": n, "batch_samples": args.timing_batch, "ids_per_sample": float(np.mean(fields)),
           "cache_rows": cache_rows, "cache_full": bool(eng.caches.size.min() >= cache_rows),
           "events_per_batch": float(np.mean(events)), "batches": args.timing_batches,
           "repeats": args.timing_repeats, "warmup": args.timing_warmup,
           "numba_threads": os.environ.get("NUMBA_NUM_THREADS"), "load_avg": float(np.mean(loads)),
           "load_avg_range": [float(min(loads)), float(max(loads))]}
    for k in keys:
        out[f"{k}_ms_median"] = float(np.median([np.median(v) for v in reps[k]]))
        out[f"{k}_ms_min"] = float(min(np.min(v) for v in reps[k]))
        out[f"{k}_ms_mean"] = float(np.mean([np.mean(v) for v in reps[k]]))
        out[f"{k}_ms_repeat_medians"] = [round(float(np.median(v)), 3) for v in reps[k]]
    return out


#: the compiled kernels of ``RuntimeScheduler.next_batch`` (gmp.train.herald.kernels), timed one by one
KERNELS = ("assign_mark", "sync_rows", "trim_all", "assemble")


def print_timing(t: dict) -> None:
    print(f"\n### Scheduler time per batch ({t['batch_samples']} samples x {t['ids_per_sample']:.0f} ids over "
          f"{t['workers']} workers, NUMBA_NUM_THREADS={t['numba_threads']}, cache {t['cache_rows']:,} rows/worker "
          f"{'full' if t['cache_full'] else 'NOT full'}, {t['events_per_batch']:,.0f} events/batch; "
          f"{t['repeats']} repeats x {t['batches']} batches after {t['warmup']} warm-up; "
          f"load average {t['load_avg']:.1f} ({t['load_avg_range'][0]:.1f}-{t['load_avg_range'][1]:.1f}))\n")
    print("| part | CPU median ms | CPU mean ms | CPU min ms | wall median ms | wall mean ms | CPU medians of repeats |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for key, label in (("assign", "Algorithm 1 (lines 1-13) incl. batch gather + marking the batch's rows"),
                       ("step", "full step: assignment + plan + reads/updates + cache + events (`next_batch`)")):
        print(f"| {label} | {t[key + '_cpu_ms_median']:.2f} | {t[key + '_cpu_ms_mean']:.2f} | "
              f"{t[key + '_cpu_ms_min']:.2f} | {t[key + '_wall_ms_median']:.2f} | {t[key + '_wall_ms_mean']:.2f} | "
              f"{', '.join(f'{x:.2f}' for x in t[key + '_cpu_ms_repeat_medians'])} |")
    print("\nFull step by kernel (CPU ms per batch, median over repeats of each repeat's median / min):\n")
    print("| " + " | ".join(k.lstrip("_") for k in KERNELS) + " | rest |")
    print("|" + "---:|" * (len(KERNELS) + 1))
    rest = t["step_cpu_ms_median"] - sum(t[f"kernel{k}_cpu_ms_median"] for k in KERNELS)
    print("| " + " | ".join(f"{t[f'kernel{k}_cpu_ms_median']:.2f} / {t[f'kernel{k}_cpu_ms_min']:.2f}"
                            for k in KERNELS) + f" | {rest:.2f} |")


def train_part(args) -> list[dict]:
    import torch

    from gmp.datasets.synth import preset_config, synthesize
    from gmp.graph import build_graph
    from gmp.partition import run_partitioner
    from gmp.topology import homogeneous
    from gmp.comm.local import LocalEngine
    from gmp.train import TrainConfig, TrainData, Trainer

    torch.set_num_threads(1)
    path = Path(args.train_dataset or f"data/bench/herald-train-{args.train_preset}-{args.train_samples // 1000}k")
    if not (path / "dataset.json").exists():
        cfg = preset_config(args.train_preset, num_samples=args.train_samples, scale=args.train_scale, seed=0)
        synthesize(cfg, path, overwrite=True)
    ds = load_dataset(path)
    n = args.train_workers
    placement = None
    for method in args.train_partitioners.split(","):
        try:
            t0 = time.perf_counter()
            placement = run_partitioner(method, build_graph(ds), homogeneous(n), seed=0)
            print(f"  partitioned with {method} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            break
        except Exception as exc:  # noqa: BLE001 - fall back to the next method
            print(f"  partitioner {method} failed: {exc}", file=sys.stderr)
    out = []
    for schedule, options in (("static", {}), ("naive", {}), ("herald", {}),
                              ("herald", {"lookahead": args.train_lookahead})):
        cfg = TrainConfig(model="wdl", embedding_dim=args.embedding_dim, optimizer="adagrad", lr=0.01,
                          batch_size=args.train_batch_size, epochs=1, schedule=schedule, seed=0,
                          herald=HeraldOptions(**options) if schedule == "herald" else None)
        tr = Trainer(TrainData(ds), placement, cfg, LocalEngine(n))
        rec = tr.fit()[-1]
        steps = max(rec["steps"], 1)
        label = schedule + (f" --lookahead {options['lookahead']}" if options.get("lookahead") else "")
        pf = tr.schedule.prefetch_stats() if options.get("lookahead") else {}
        out.append({"schedule": label, "partitioner": placement.method, "workers": n, "prefetch": pf,
                    "samples_per_sec": rec["samples_per_sec"], "embedding_bytes_per_step": rec["embedding_bytes_per_step"],
                    "remote_rows_read_per_step": rec["remote_rows_read"] / steps,
                    "remote_rows_pushed_per_step": rec["remote_rows_pushed"] / steps,
                    "test_auc": rec["test_auc"], "steps": rec["steps"], "dataset": f"{path} (local engine)"})
        print(f"  {label}: {rec['samples_per_sec']:.0f} samples/s {pf}", file=sys.stderr, flush=True)
    return out


def train_torchrun(args) -> list[dict]:
    """``gmp train --engine distributed`` under torchrun for static / naive / herald on one manifest."""
    import shutil
    import socket
    import subprocess
    import tempfile

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    man = json.loads((Path(args.train_manifest) / "manifest.json").read_text())
    n = int(man["num_workers"])
    out = []
    Path("data/bench/herald-bench").mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="herald-train-", dir="data/bench/herald-bench"))
    runs = [("static", []), ("naive", []), ("herald", []), (f"herald --lookahead {args.train_lookahead}",
                                                            ["--lookahead", str(args.train_lookahead)])]
    for label, extra in runs:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        log = tmp / (label.replace(" ", "_").replace("-", "") + ".jsonl")
        cmd = [torchrun, "--nnodes", "1", "--nproc-per-node", str(n), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "cli.main", "train", "--engine", "distributed",
               "--dataset", str(args.train_dataset), "--manifest", str(args.train_manifest), "--model", "wdl",
               "--schedule", label.split()[0], "--staleness", "0", "--epochs", "1",
               "--batch-size", str(args.train_batch_size), "--lr", "0.01", "--log-json", str(log), *extra]
        print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if res.returncode != 0 or not log.exists():
            print(f"  {label} failed: {res.stderr[-2000:]}", file=sys.stderr)
            continue
        rec = [json.loads(x) for x in log.read_text().splitlines() if x.strip()][-1]
        steps = max(rec["steps"], 1)
        out.append({"schedule": label, "partitioner": man["partitioner"]["name"], "workers": n, "prefetch": {},
                    "samples_per_sec": rec["samples_per_sec"],
                    "embedding_bytes_per_step": rec["embedding_bytes_per_step"],
                    "remote_rows_read_per_step": rec["remote_rows_read"] / steps,
                    "remote_rows_pushed_per_step": rec["remote_rows_pushed"] / steps,
                    "test_auc": rec["test_auc"], "steps": rec["steps"],
                    "dataset": f"{args.train_dataset} (distributed engine, {args.train_manifest})"})
        print(f"  {label}: {rec['samples_per_sec']:.0f} samples/s", file=sys.stderr, flush=True)
    return out


def print_train(rows: list[dict]) -> None:
    r0 = rows[0]
    print(f"\n### Training, {r0['workers']} workers, {r0['partitioner']} manifest, "
          f"{r0['dataset']} ({r0['steps']} static steps)\n")
    print("| schedule | samples/s | embedding bytes / iteration | remote rows read / it. | rows pushed / it. | "
          "test AUC |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['schedule']} | {r['samples_per_sec']:.0f} | {r['embedding_bytes_per_step']:,.0f} | "
              f"{r['remote_rows_read_per_step']:,.0f} | {r['remote_rows_pushed_per_step']:,.0f} | "
              f"{r['test_auc']:.4f} |")
    for r in rows:
        if r["prefetch"]:
            p = r["prefetch"]
            print(f"\n`{r['schedule']}`: the prefetch thread scheduled {p['items']} batches in {p['produce_s']:.2f} s; "
                  f"the trainer waited {p['stall_s']:.3f} s for them (overlap {p['overlap']:.0%}).")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="data/bench/criteo-1m")
    ap.add_argument("--manifest", default=None, help="placement manifest (default: random placement)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=128, help="per worker (Herald: 128)")
    ap.add_argument("--cache-fraction", type=float, default=0.05,
                    help="cache rows per worker as a fraction of the active rows (Herald: 1.6 GB of 1 KB rows "
                         "for 33.8M rows, ~5%%)")
    ap.add_argument("--lookahead", type=int, default=8)
    ap.add_argument("--min-frequency", type=float, default=1e-5, help="hot-row threshold of the ps-hot setting")
    ap.add_argument("--embedding-dim", type=int, default=16)
    ap.add_argument("--samples", type=int, default=0, help="simulate only the first N samples of the epoch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-table", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--timing-batch", type=int, default=8192)
    ap.add_argument("--timing-workers", type=int, default=8)
    ap.add_argument("--timing-batches", type=int, default=60, help="timed batches per repeat")
    ap.add_argument("--timing-warmup", type=int, default=40,
                    help="untimed batches at the start of each repeat (the first fills the caches)")
    ap.add_argument("--timing-repeats", type=int, default=3, help="repeats (one epoch order each)")
    ap.add_argument("--train", action="store_true", help="also run the training comparison")
    ap.add_argument("--train-dataset", default=None)
    ap.add_argument("--train-samples", type=int, default=50_000)
    ap.add_argument("--train-preset", default="criteo-kaggle",
                    help="the synth preset of the dataset drawn without --train-dataset (named in its folder)")
    ap.add_argument("--train-scale", type=float, default=0.02)
    ap.add_argument("--train-workers", type=int, default=4)
    ap.add_argument("--train-batch-size", type=int, default=256)
    ap.add_argument("--train-partitioners", default="hybrid,metis,random")
    ap.add_argument("--train-lookahead", type=int, default=4)
    ap.add_argument("--train-manifest", default=None,
                    help="train with --engine distributed under torchrun on this manifest (and --train-dataset)")
    ap.add_argument("--json", default=None, help="also write all results to this file")
    args = ap.parse_args()

    results: dict = {"command": " ".join(sys.argv)}
    if not args.skip_table or not args.skip_timing:
        ds = load_dataset(args.dataset)
        if args.manifest:
            from gmp.manifest import load_manifest

            placement = load_manifest(args.manifest, dataset=ds).placement
        else:
            placement = random_placement(ds.num_samples, ds.num_embeddings, args.workers, args.seed)
        print(f"# Herald bench: {args.dataset} ({ds.num_samples:,} samples, {ds.num_embeddings:,} ids), "
              f"placement {placement.method}", flush=True)
        if not args.skip_table:
            results["table1"] = table1(ds, placement, args)
            print_table1(results["table1"])
        if not args.skip_timing:
            results["timing"] = timing(ds, placement, args)
            print_timing(results["timing"])
    if args.train:
        results["train"] = train_torchrun(args) if args.train_manifest else train_part(args)
        print_train(results["train"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
