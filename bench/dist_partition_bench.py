"""The distributed hybrid against the single-process one (and KaMinPar, and out of core).

Runs ``gmp partition`` as a person would -- one process (``-m hybrid``), under torchrun
(``--distributed``) with each process count given, optionally out of core (``--chunk-samples``)
and KaMinPar (``-m kaminpar``) -- each command under ``flock LOCK`` when ``--lock`` is given, and
prints one markdown table from the manifests: partition seconds, peak RSS (per process for the
distributed runs), batch remote reads and their difference from the single-process run, bytes
the processes sent in all-to-all exchanges (all of them; the start, i.e. everything before round 1,
and each round) and seconds likewise. Sums and broadcasts (loads, objective terms, the start's
coarse partition from rank 0) are not counted; ``--hosts`` measures what the links carried.

``--hosts 2`` runs the distributed runs across emulated hosts (bench/netns.py; root): the
processes are split over the hosts, and the table adds the bytes each host put on its link.

Examples::

    python bench/dist_partition_bench.py data/criteo-1m --workers 8 --procs 2,4 --lock data/bench/bench.lock
    python bench/dist_partition_bench.py data/ml-100k --workers 8 --procs 2,4 --kaminpar
    sudo .venv/bin/python bench/dist_partition_bench.py data/criteo-1m --workers 8 --procs 4 --hosts 2 \\
        --no-single
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_bin() -> str:
    return shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")


#: seconds one command may run (inside the lock: the wait for the lock does not count)
TIMEOUT_S = 840
#: load average (1 min) when each command started and ended, by output directory name
LOADS: dict[str, list[float]] = {}


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run(cmd: list[str], lock: str | None) -> float:
    """Run ``cmd`` (under the lock, within TIMEOUT_S); the load average inside the lock is recorded."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = cmd[cmd.index("--out") + 1] if "--out" in cmd else ""
    probe = [sys.executable, "-c", "import pathlib; print(pathlib.Path('/proc/loadavg').read_text().split()[0])"]
    wrapped = ["bash", "-c", '"$1" -c "$2"; shift 2; "$@"; rc=$?; "$PY" -c "$PROBE"; exit $rc', "_", probe[0],
               probe[2], *["timeout", str(TIMEOUT_S), *cmd]]
    env.update(PY=probe[0], PROBE=probe[2])
    t0 = time.perf_counter()
    res = subprocess.run(["flock", lock, *wrapped] if lock else wrapped, cwd=ROOT, env=env, capture_output=True,
                         text=True)
    if res.returncode != 0:
        raise SystemExit(f"failed ({res.returncode}{', timed out' if res.returncode == 124 else ''}): "
                         f"{' '.join(cmd)}\n{res.stderr[-3000:]}")
    lines = res.stdout.strip().splitlines()
    LOADS[Path(out).name] = [float(lines[0]), float(lines[-1])]
    return time.perf_counter() - t0


def partition_args(args, out: Path) -> list[str]:
    return ["partition", str(args.dataset), "-w", str(args.workers), "--seed", str(args.seed), "--out", str(out),
            "--overwrite", "--no-plots", *args.extra]


def row(name: str, out: Path, reference: int | None) -> dict:
    m = json.loads((out / "manifest.json").read_text())
    info = m["partitioner"]["info"] or {}
    dist = info.get("distributed") or {}
    reads = int(m["metrics"]["batch_remote_reads"])
    rounds = info.get("rounds") or []
    per_round = [r.get("bytes_sent", 0) for r in rounds[1:]]
    round_seconds = [r.get("seconds", 0.0) for r in rounds[1:]]
    total = dist.get("bytes_sent", 0)
    # the start is everything before round 1: the projections, or a portfolio's candidates with their own
    # refinement (round 0 of info["rounds"] is then only where the chosen candidate began)
    return {"run": name, "seconds": round(m["partition_seconds"], 1), "load_1min": LOADS.get(out.name),
            "peak_rss_mib": [round(b / 2**20) for b in dist.get("peak_rss_bytes_per_process", [m["peak_rss_bytes"]])],
            "batch_remote_reads": reads,
            "vs_single": None if reference is None else round(100.0 * (reads - reference) / reference, 2),
            "rounds": len(rounds) - 1, "bytes_sent_mib": round(total / 2**20, 1),
            "bytes_start_mib": round((total - sum(per_round)) / 2**20, 1),
            "bytes_per_round_mib": [round(b / 2**20, 1) for b in per_round],
            "seconds_start": round(m["partition_seconds"] - sum(round_seconds), 1),
            "seconds_per_round": [round(x, 1) for x in round_seconds]}


def run_hosts(args, nproc: int, out: Path) -> list[int]:
    """``nproc`` processes split over ``args.hosts`` emulated hosts; bytes each host sent."""
    from netns import EmulatedCluster

    per_host = nproc // args.hosts
    with EmulatedCluster(hosts=args.hosts, rate=args.rate, prefix=args.netns_prefix) as net:
        port = str(free_port())
        env = net.env({**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
        procs = []
        for h in range(args.hosts):
            cmd = [torchrun_bin(), "--nnodes", str(args.hosts), "--node-rank", str(h), "--nproc-per-node",
                   str(per_host), "--master-addr", net.addr(0), "--master-port", port, "-m", "cli.main",
                   *partition_args(args, out), "--distributed"]
            procs.append(net.popen(h, cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True))
        for p in procs:
            _, err = p.communicate()
            if p.returncode != 0:
                raise SystemExit(f"host run failed: {err[-3000:]}")
        return net.bytes_sent()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--procs", default="2,4", help="process counts of the distributed runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("data/bench/dist-partition-bench"))
    ap.add_argument("--lock", default=None, help="run every command under flock LOCK")
    ap.add_argument("--no-single", action="store_true", help="skip the single-process run (reuse OUT/single)")
    ap.add_argument("--kaminpar", action="store_true", help="also run -m kaminpar")
    ap.add_argument("--chunk-samples", type=int, default=None, help="also run out of core with this chunk")
    ap.add_argument("--hosts", type=int, default=1, help=">1: distributed runs across emulated hosts (root)")
    ap.add_argument("--rate", default=None, help="--hosts: link rate, e.g. 1gbit (default: unlimited)")
    ap.add_argument("--netns-prefix", default="dist-partition")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--timeout", type=int, default=840, help="seconds one command may run inside the lock (default 840)")
    ap.add_argument("extra", nargs="*", help="more gmp partition flags (after --)")
    args = ap.parse_args()
    globals()["TIMEOUT_S"] = args.timeout
    args.out.mkdir(parents=True, exist_ok=True)
    py = [sys.executable, "-m", "cli.main"]
    rows = []
    single = args.out / "single"
    if not args.no_single:
        run([*py, *partition_args(args, single), "-m", "hybrid"], args.lock)
    reference = row("single process", single, None)["batch_remote_reads"] if single.exists() else None
    if single.exists():
        rows.append(row("single process", single, None))
    for nproc in (int(p) for p in args.procs.split(",") if p):
        out = args.out / f"d{nproc}"
        if args.hosts > 1:
            sent = run_hosts(args, nproc, out)
            rows.append({**row(f"{nproc} processes on {args.hosts} hosts", out, reference),
                         "host_link_bytes_mib": [round(b / 2**20, 1) for b in sent]})
            continue
        run([torchrun_bin(), "--standalone", "--nproc-per-node", str(nproc), "-m", "cli.main",
             *partition_args(args, out), "--distributed"], args.lock)
        rows.append(row(f"{nproc} processes", out, reference))
    if args.chunk_samples:
        out = args.out / "ooc"
        run([*py, *partition_args(args, out), "--chunk-samples", str(args.chunk_samples)], args.lock)
        rows.append(row(f"out of core (chunks of {args.chunk_samples:,})", out, reference))
    if args.kaminpar:
        out = args.out / "kaminpar"
        run([*py, *partition_args(args, out), "-m", "kaminpar"], args.lock)
        rows.append(row("kaminpar (edge cut)", out, reference))
    keys = list(rows[0])
    for r in rows[1:]:
        keys += [k for k in r if k not in keys]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r.get(k, "")) for k in keys) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
