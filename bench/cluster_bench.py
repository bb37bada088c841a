"""Training under an emulated cluster network: gmp against its peers in wall-clock time.

Ranks are launched by torchrun inside network namespaces this script creates and
removes itself (bench/netns.py; needs root, never a CI test), with rate-limited
links. Two layouts:

* ``--hosts 1``: all ranks in one namespace whose loopback is limited to each
  ``--rates`` entry (every byte between ranks crosses the slow link);
* ``--hosts 2 --per-host G``: two "machines" joined by the slow link, fast loopback
  inside each, so HET-GMP's hierarchical ``--topology 2xG`` becomes measurable.

For every network setting and every method the same data, model, batch, optimizer
and rank count are used, and the runs are interleaved (``--runs`` rounds, each
round runs every method once) because single runs on these machines vary by
10-20%. Printed per configuration: samples/s (median and min-max), seconds inside
collectives (gmp only: its engine times them), bytes on the slow link per step (the
links' transmit counters over the whole run, evaluation included; with ``--hosts 2``
each host's ``eth0``, i.e. exactly what crosses between the "machines", and beside it
what stays on each host's loopback), test AUC, the training seconds to reach the AUC
that the one-process gmp run reaches after one epoch, and each peer's speed relative
to gmp hybrid.

Time to AUC: every method evaluates the test AUC before training (gmp's untrained model
is the same for every placement and is evaluated once by this script; each peer evaluates
its own, ``--eval-initial``) and after each epoch, and the time is interpolated linearly
between the last evaluation below the target and the first at or above it. At the issue's
settings (SGD lr 0.01) one epoch leaves every method within a few thousandths of the target
(0.5367 on the entity data), so use ``--epochs 2`` or more for that column (with ``--epochs
1`` a method just below the target shows "not reached"). ``--no-target`` skips all of it.

Methods: ``hybrid`` and ``random`` (gmp placements; ``hybrid-flat`` is hybrid
partitioned with a flat topology in the 2-host layout), each optionally with
``:``-separated variants: ``pipe`` (``--pipeline``), ``bf16`` / ``fp16``
(``--comm-dtype``), ``s100`` (``--staleness 100``), ``herald`` (``--schedule herald``),
e.g. ``hybrid:pipe:bf16``; the global ``--staleness``/``--schedule`` apply where no
variant says otherwise. For gmp methods the per-phase seconds of a step (the JSON
records' ``phase_seconds``: gather, id exchange, pulls, compute, pushes, all-reduce,
optimizer; in the pipelined step the time *waited* for a phase) are printed too: a mean over the
processes, while the step time is rank 0's own, so on short runs (a rank waiting for another at the
first steps) the phases can add up to more than the step. ``ddp-sparse``
(bench/peers/ddp_sparse.py), ``torchrec-tw`` and ``torchrec-planner``
(bench/peers/torchrec_peer.py; skipped with a message when TorchRec is absent).

    python bench/cluster_bench.py --rates unlimited,200mbit --runs 5
    python bench/cluster_bench.py --rates 200mbit --methods hybrid,hybrid:pipe,hybrid:pipe:bf16,ddp-sparse
    python bench/cluster_bench.py --hosts 2 --per-host 2 --rates 200mbit --methods hybrid,hybrid-flat,random
    python bench/cluster_bench.py --rates unlimited --epochs 3 --runs 2 --methods hybrid,ddp-sparse,torchrec-tw
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from netns import EmulatedCluster, netem_available  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(__file__).resolve().parent / "peers"
GMP_METHODS = ("hybrid", "hybrid-flat", "random")
ALL_METHODS = GMP_METHODS + ("ddp-sparse", "torchrec-tw", "torchrec-planner")
#: ``method:variant`` suffixes of gmp methods -> extra ``gmp train`` flags
VARIANTS = {"pipe": ["--pipeline"], "bf16": ["--comm-dtype", "bf16"], "fp16": ["--comm-dtype", "fp16"],
            "s100": ["--staleness", "100"], "herald": ["--schedule", "herald"]}
PHASES = ("gather", "ids", "pulls", "compute", "pushes", "allreduce", "optimizer")


def base_method(method: str) -> str:
    return method.split(":")[0]


def is_gmp(method: str) -> bool:
    return base_method(method) in GMP_METHODS


def gmp_cmd() -> list[str]:
    return [sys.executable, "-m", "cli.main"]


def torchrun_bin() -> str:
    return shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_local(cmd: list[str]) -> None:
    print("$", " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    res = subprocess.run(list(map(str, cmd)), cwd=ROOT, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"command failed ({res.returncode}):\n{res.stderr[-3000:]}")


def have_torchrec() -> bool:
    res = subprocess.run([sys.executable, "-c", "import torchrec"], capture_output=True)
    return res.returncode == 0


def prepare(args, work: Path) -> tuple[Path, dict[str, Path]]:
    """The dataset and one manifest per gmp method (made once, reused)."""
    data = work / f"{args.preset}-{args.samples // 1000}k-s{args.scale}"
    if not (data / "dataset.json").is_file():
        run_local(gmp_cmd() + ["data", "synth", "--preset", args.preset, "--samples", args.samples,
                               "--scale", args.scale, "--seed", 0, "--out", data])
    nranks = args.hosts * args.per_host
    topo = f"{args.hosts}x{args.per_host}" if args.hosts > 1 else str(nranks)
    manifests = {}
    for method in dict.fromkeys(base_method(m) for m in args.methods):
        if method not in GMP_METHODS:
            continue
        name, topology = method, topo
        if method == "hybrid-flat":
            name, topology = "hybrid", str(nranks)
        out = work / f"{data.name}.{method}.{topology}"
        if not (out / "manifest.json").is_file():
            run_local(gmp_cmd() + ["partition", data, "--method", name, "--topology", topology,
                                   "--batch-size", args.batch_size, "--out", out])
        manifests[method] = out
    return data, manifests


def method_command(method: str, args, data: Path, manifests: dict[str, Path], out: Path) -> list[str]:
    common = ["--dataset", data, "--batch-size", args.batch_size, "--lr", args.lr, "--seed", 0,
              "--embedding-dim", args.embedding_dim, "--epochs", args.epochs]
    if is_gmp(method):
        base, *variants = method.split(":")
        extra = [flag for v in variants for flag in VARIANTS[v]]
        defaults = [] if "s100" in variants else ["--staleness", args.staleness]
        defaults += [] if "herald" in variants else ["--schedule", args.schedule]
        return ["-m", "cli.main", "train", "--engine", "distributed", "--manifest", manifests[base],
                "--model", args.model, "--optimizer", "sgd", *defaults, *extra, "--log-json", out, *common]
    if not args.no_target:  # the untrained model's AUC starts the time-to-AUC interpolation
        common.append("--eval-initial")
    if method == "ddp-sparse":
        return [PEERS / "ddp_sparse.py", "--model", args.model, "--out", out, *common]
    sharding = {"torchrec-tw": "table_wise", "torchrec-planner": "planner"}[method]
    return [PEERS / "torchrec_peer.py", "--model", args.model, "--sharding", sharding, "--out", out, *common]


def launch(net: EmulatedCluster, args, script: list) -> tuple[float, list[int], list[int], int]:
    """Run ``torchrun ... script`` on every host; (wall seconds, bytes each host sent on the slow
    link, bytes each host sent to itself, exit code)."""
    port = free_port()
    before, before_intra = net.bytes_sent(), net.bytes_intra()
    env = net.env()
    env.update(OMP_NUM_THREADS="1", GMP_NO_PROGRESS="1", PYTHONPATH=str(ROOT))
    procs = []
    t0 = time.perf_counter()
    for h in range(args.hosts):
        cmd = [torchrun_bin(), "--nnodes", args.hosts, "--node-rank", h, "--nproc-per-node", args.per_host,
               "--master-addr", net.addr(0), "--master-port", port, *script]
        procs.append(net.popen(h, cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True))
    rc = 0
    try:
        for p in procs:
            try:
                _, err = p.communicate(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
                err += "\n(timed out)"
            if p.returncode:
                rc = p.returncode
                print(err[-2500:], file=sys.stderr)
    except BaseException:  # interrupted: torchrun forwards SIGTERM to its workers
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        raise
    wall = time.perf_counter() - t0
    after, after_intra = net.bytes_sent(), net.bytes_intra()
    return wall, [a - b for a, b in zip(after, before)], [a - b for a, b in zip(after_intra, before_intra)], rc


def read_result(method: str, out: Path, initial_auc: float | None = None) -> dict | None:
    """One run's result; gmp's epoch history starts with ``initial_auc`` (its untrained model,
    the same for every placement: :func:`gmp_initial_auc`) when given."""
    if not out.is_file() or not out.stat().st_size:
        return None
    if is_gmp(method):
        epochs = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
        epochs = [r for r in epochs if r.get("kind") == "epoch"]
        if not epochs:
            return None
        secs = sum(r["train_seconds"] for r in epochs)
        samples = sum(r["samples"] for r in epochs)
        cum, hist = 0.0, ([] if initial_auc is None else [{"epoch": 0, "train_seconds": 0.0,
                                                            "test_auc": initial_auc}])
        for r in epochs:
            cum += r["train_seconds"]
            hist.append({"epoch": r["epoch"], "train_seconds": cum, "test_auc": r["test_auc"]})
        phases = {k: sum(r.get("phase_seconds", {}).get(k, 0.0) for r in epochs) for k in PHASES}
        return {"samples_per_sec": samples / secs, "steps": sum(r["steps"] for r in epochs), "phases": phases,
                "bytes_counted": {k: sum(r["bytes"][k] for r in epochs) for k in epochs[0]["bytes"]},
                "comm_seconds": sum(r["comm_seconds"] for r in epochs), "train_seconds": secs,
                "epochs": hist, "test_auc": epochs[-1]["test_auc"]}
    res = json.loads(out.read_text())
    res["comm_seconds"] = None
    return res


def single_process_target(args, data: Path, work: Path) -> float:
    """Test AUC of one gmp worker after one epoch (the time-to-accuracy target)."""
    out = work / f"{data.name}.single.jsonl"
    if not out.is_file():
        run_local(gmp_cmd() + ["train", "--dataset", data, "--model", args.model, "--optimizer", "sgd",
                               "--lr", args.lr, "--batch-size", args.batch_size * args.hosts * args.per_host,
                               "--embedding-dim", args.embedding_dim, "--epochs", 1, "--log-json", out])
    recs = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return float([r for r in recs if r.get("kind") == "epoch"][0]["test_auc"])


def gmp_initial_auc(args, data: Path, work: Path) -> float:
    """Test AUC of gmp's untrained model: rows depend only on (seed, id) and the dense part on the
    seed, so every placement and worker count starts from this model (one process evaluates it)."""
    out = work / f"{data.name}.initial-{args.model}-d{args.embedding_dim}.json"
    if not out.is_file():
        sys.path.insert(0, str(ROOT))
        from gmp.comm.local import LocalEngine
        from gmp.datasets.format import load_dataset
        from gmp.train.config import TrainConfig
        from gmp.train.data import TrainData
        from gmp.train.run import load_placement
        from gmp.train.trainer import Trainer

        ds = load_dataset(data)
        config = TrainConfig(model=args.model, optimizer="sgd", lr=args.lr, embedding_dim=args.embedding_dim,
                             batch_size=args.batch_size, seed=0)
        tr = Trainer(TrainData(ds), load_placement(ds, None, None), config, LocalEngine(1))
        out.write_text(json.dumps(tr.evaluate()))
    return float(json.loads(out.read_text())["test_auc"])


def time_to(target: float, res: dict) -> tuple[float, int, bool] | None:
    """Training seconds until the test AUC reaches ``target``: ``(seconds, epoch, upper_bound)``,
    None when no evaluation reached it. The AUC is evaluated before training (epoch 0) and after
    every epoch; between the last evaluation below the target and the first at or above it the
    time is interpolated linearly in the AUC. Without an epoch-0 evaluation, a first epoch that
    already reaches the target gives its seconds as an upper bound."""
    prev = None
    for e in res.get("epochs", []):
        auc = e.get("test_auc")
        if auc is None:
            continue
        if auc >= target:
            if prev is None:
                return e["train_seconds"], e["epoch"], True
            (t0, a0), t1 = prev, e["train_seconds"]
            return t0 + (t1 - t0) * (target - a0) / max(auc - a0, 1e-12), e["epoch"], False
        prev = (e["train_seconds"], auc)
    return None


def fmt(x, spec=".1f", none="—"):
    return none if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="data/bench/cluster-bench")
    ap.add_argument("--preset", default="criteo-kaggle-independent",
                    help="synthetic preset of the data (docs/train.md's table: the independent model)")
    ap.add_argument("--samples", type=int, default=500_000)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--per-host", type=int, default=2, help="ranks per host")
    ap.add_argument("--rates", default="unlimited,200mbit", help="link rates (tc tbf syntax) or 'unlimited'")
    ap.add_argument("--methods", default=",".join(m for m in ALL_METHODS if m != "hybrid-flat"))
    ap.add_argument("--runs", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--model", default="dcn")
    ap.add_argument("--batch-size", type=int, default=2048, help="samples per rank per step")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--embedding-dim", type=int, default=16)
    ap.add_argument("--staleness", default="0")
    ap.add_argument("--schedule", default="static")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--no-target", action="store_true", help="skip the single-process time-to-AUC target run")
    ap.add_argument("--out", default=None, help="also write every run as JSON here (after each run)")
    ap.add_argument("--netns-prefix", default="gmpcb",
                    help="namespace names (<prefix>-h0, ...); stale ones with this prefix are removed first, so two "
                         "concurrent benches need different prefixes")
    ap.add_argument("--report-only", default=None, help="comma-separated --out files: print their merged tables")
    args = ap.parse_args()
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = {m for m in args.methods if base_method(m) not in ALL_METHODS
               or (m.split(":")[1:] and (not is_gmp(m) or set(m.split(":")[1:]) - set(VARIANTS)))}
    if unknown:
        raise SystemExit(f"unknown --methods {sorted(unknown)}; expected some of {list(ALL_METHODS)}, gmp ones "
                         f"with ':'-separated variants of {list(VARIANTS)}")
    if any(m.startswith("torchrec") for m in args.methods) and not have_torchrec():
        print("TorchRec is not installed: skipping torchrec-* (pip install -e '.[peers]' then "
              "pip install --no-deps torchrec==1.8.0)", file=sys.stderr)
        args.methods = [m for m in args.methods if not m.startswith("torchrec")]
    print(f"netem available: {netem_available()} (tbf is used either way)", file=sys.stderr)
    work = (ROOT / args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    data, manifests = prepare(args, work)
    target = None if args.no_target else single_process_target(args, data, work)
    args.initial_auc = None if args.no_target else gmp_initial_auc(args, data, work)
    rates = [None if r in ("unlimited", "none") else r for r in args.rates.split(",")]
    results: dict[tuple, list] = {}
    if args.report_only:  # tables from earlier --out files (e.g. the runs of two locked sessions)
        for f in args.report_only.split(","):
            for key, runs in json.loads(Path(f).read_text()).items():
                results.setdefault(tuple(key.split("|")), []).extend(runs)
        report(args, results, target)
        return
    tmp = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    # a SIGTERM (e.g. `timeout`) still prints the table of the runs done so far
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        run_all(args, data, manifests, rates, results, tmp)
    except KeyboardInterrupt:
        print("interrupted: the table has the runs done so far", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(args, results, target)


def run_all(args, data: Path, manifests: dict, rates: list, results: dict, tmp: Path) -> None:
    """Every method ``--runs`` times per rate, interleaved: each round runs every rate (a cluster
    emulated per round and rate), so a deadline cuts rounds, not a whole rate; ``--out`` rewritten
    after every run."""
    for r in range(args.runs):
        for rate in rates:
            with EmulatedCluster(hosts=args.hosts, rate=rate, prefix=args.netns_prefix) as net:
                for method in args.methods:
                    out = tmp / f"{method}-{rate}-{r}.json"
                    for attempt in range(2):  # a rare gloo abort of one rank: retried once, and said
                        wall, sent, intra, rc = launch(net, args, method_command(method, args, data, manifests, out))
                        res = read_result(method, out, args.initial_auc if is_gmp(method) else None)
                        if res is not None:
                            break
                        print(f"{method} at {rate or 'unlimited'}: run failed (exit {rc})"
                              + ("; retrying" if attempt == 0 else ""), file=sys.stderr)
                    if res is None:
                        continue
                    res.update(wall_seconds=wall, bytes_sent=sent, bytes_intra=intra, rate=rate or "unlimited",
                               method=method,
                               loadavg=os.getloadavg()[0])
                    results.setdefault((rate or "unlimited", method), []).append(res)
                    print(f"  {rate or 'unlimited':>9} {method:<17} run {r + 1}: "
                          f"{res['samples_per_sec']:,.0f} samples/s (load {res['loadavg']:.1f})",
                          file=sys.stderr, flush=True)
                    if args.out:
                        Path(args.out).write_text(json.dumps({f"{k[0]}|{k[1]}": v for k, v in results.items()},
                                                             indent=1))


def report(args, results: dict, target: float | None) -> None:
    n = args.hosts * args.per_host
    print(f"\n{n} ranks ({args.hosts} host(s) x {args.per_host}), {args.model}, SGD lr {args.lr}, dim "
          f"{args.embedding_dim}, {args.batch_size} samples per rank per step, staleness {args.staleness}, "
          f"schedule {args.schedule}; {args.runs} interleaved runs")
    loads = [r["loadavg"] for runs in results.values() for r in runs if "loadavg" in r]
    if loads:
        print(f"1-minute load average during the runs: {min(loads):.1f}-{max(loads):.1f} (2 cores)")
    if target is not None:
        print(f"time-to-AUC target: {target:.4f} (one gmp process, one epoch); 's to target': training seconds "
              f"until the test AUC reaches it, interpolated between the evaluations before training and after "
              f"each epoch ('<=': no evaluation before training, the first epoch's seconds)")
    two = args.hosts > 1
    print("'slow link MB/step': bytes the hosts put on the rate-limited link (interface counters: headers, "
          "start-up and evaluation included) / training steps" + ("; 'intra-host': the hosts' loopback" if two else ""))
    print()
    print("| link | method | samples/s median (min-max) | vs hybrid | comm s | slow link MB/step | "
          + ("intra-host MB/step | " if two else "") + "test AUC (last epoch) | epoch reached | s to target |")
    print("|---|---|---:|---:|---:|---:|" + ("---:|" if two else "") + "---:|---:|---:|")
    for rate in dict.fromkeys(k[0] for k in results):
        base = results.get((rate, "hybrid"))
        base_med = statistics.median(r["samples_per_sec"] for r in base) if base else None
        for method in args.methods:
            runs = results.get((rate, method))
            if not runs:
                continue
            sps = [r["samples_per_sec"] for r in runs]
            med = statistics.median(sps)
            comm = [r["comm_seconds"] for r in runs if r.get("comm_seconds") is not None]
            wire = statistics.median(sum(r["bytes_sent"]) / max(1, r["steps"]) / 1e6 for r in runs)
            intra = statistics.median(sum(r.get("bytes_intra", [0])) / max(1, r["steps"]) / 1e6 for r in runs)
            tt = [time_to(target, r) for r in runs] if target is not None else []
            reached = [t for t in tt if t is not None]
            if reached:
                secs = statistics.median(t[0] for t in reached)
                to_target = ("<=" if all(t[2] for t in reached) else "") + f"{secs:.1f}"
                if len(reached) < len(tt):
                    to_target += f" ({len(reached)} of {len(tt)} runs)"
                epoch = f"{statistics.median(t[1] for t in reached):g}"
            else:
                to_target = epoch = "—" if target is None else "not reached"
            print(f"| {rate} | {method} | {med:,.0f} ({min(sps):,.0f}-{max(sps):,.0f}) | "
                  f"{fmt(med / base_med if base_med else None, '.2f')} | "
                  f"{fmt(statistics.median(comm) if comm else None)} | {wire:.2f} | "
                  + (f"{intra:.2f} | " if two else "")
                  + f"{fmt(statistics.median(r['test_auc'] for r in runs), '.4f')} | {epoch} | {to_target} |")
    report_phases(args, results)


def report_phases(args, results: dict) -> None:
    """Milliseconds per step in each phase (median over runs; gmp methods), and the bytes gmp counts."""
    rows = [(k, runs) for k, runs in results.items() if is_gmp(k[1]) and runs and runs[0].get("phases")]
    if not rows:
        return
    print("\nper-phase ms per step (median of runs; pipelined: time waited) and gmp's own byte counts per step")
    print("| link | method | " + " | ".join(PHASES) + " | sum | step | rows KB | grads KB | ids KB | dense KB |")
    print("|---|---|" + "---:|" * (len(PHASES) + 6))
    for (rate, method), runs in rows:
        ms = [statistics.median(r["phases"][p] / max(1, r["steps"]) * 1e3 for r in runs) for p in PHASES]
        step = statistics.median(r["train_seconds"] / max(1, r["steps"]) * 1e3 for r in runs)
        kb = [statistics.median(r["bytes_counted"][c] / max(1, r["steps"]) / 1e3 for r in runs)
              for c in ("embedding_rows", "gradients", "ids_clocks", "dense_allreduce")]
        print(f"| {rate} | {method} | " + " | ".join(f"{x:.1f}" for x in ms) + f" | {sum(ms):.1f} | {step:.1f} | "
              + " | ".join(f"{x:.0f}" for x in kb) + " |")


if __name__ == "__main__":
    if os.geteuid() != 0:
        raise SystemExit("bench/cluster_bench.py needs root (network namespaces and tc)")
    main()
