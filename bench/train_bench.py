"""Training benchmark (not a test): HET-GMP placements vs random vs plain data parallelism.

Generates criteo-kaggle-independent data (scaled down; the README's table was measured on it), partitions it for N workers
with ``random``, ``metis``, ``hybrid`` 1D (no secondaries) and ``hybrid`` 2D
(secondaries), trains each with ``gmp train --engine distributed`` under
torchrun, and prints samples/s, embedding bytes per iteration (rows pulled +
gradients pushed, all workers), the reduction vs random, and the final test
AUC, for the 2D placement at several staleness bounds; then the same model
trained by plain PyTorch DDP with a replicated ``nn.EmbeddingBag``
(bench/ddp_baseline.py).

    python bench/train_bench.py                       # 200k samples, 4 workers, 1 epoch
    python bench/train_bench.py --samples 1000000 --epochs 2 --out results.json

Compare HET-GMP Fig. 8 (embedding traffic, up to 87.5% less with 2D and
s = 100, on its Company dataset, not Criteo) and Table 2 (no AUC loss at s = 100).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def gmp_cmd() -> list[str]:
    exe = shutil.which("gmp")
    return [exe] if exe else [sys.executable, "-m", "cli.main"]


def torchrun_cmd(nproc: int) -> list[str]:
    exe = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [exe, "--nnodes", "1", "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}"]


def run(cmd: list[str], *, done: Path | None = None) -> None:
    """Run a command; a failure is fatal unless ``done`` (its result file) was written."""
    print("$", " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    res = subprocess.run(list(map(str, cmd)), cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        if done is not None and done.is_file() and done.stat().st_size:
            print(f"warning: exit code {res.returncode} after the result was written:\n{res.stderr[-1500:]}",
                  file=sys.stderr)
            return
        raise SystemExit(f"command failed ({res.returncode}):\n{res.stderr[-4000:]}")


def traffic_change(traffic: float, random_traffic: float) -> str:
    """``traffic`` against the random placement's, signed as ``gmp partition`` and docs/report.md sign it:
    ``"-60.0%"`` = 60% less traffic."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from gmp.report.tables import fmt_change

    return fmt_change(1 - traffic / random_traffic)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="data/bench/train-bench", help="where data, manifests and logs go")
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--scale", type=float, default=0.01, help="criteo-kaggle cardinality scale")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256, help="per worker")
    ap.add_argument("--model", default="wdl")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--replication-budget", type=float, default=0.05, help="hybrid 2D secondaries per worker")
    ap.add_argument("--staleness", default="0,10,100,10000,inf", help="bounds run on the 2D placement")
    ap.add_argument("--skip-ddp", action="store_true")
    ap.add_argument("--out", default=None, help="write all results as JSON here")
    args = ap.parse_args()

    work = Path(args.work)
    data = work / f"criteo-{args.samples // 1000}k"
    if not (data / "dataset.json").is_file():
        # the independent model: the README's training table was measured on it
        run(gmp_cmd() + ["data", "synth", "--preset", "criteo-kaggle-independent", "--samples", args.samples, "--scale",
                         args.scale, "--seed", 0, "--out", data])
    n = args.workers
    manifests = {
        "random": ["--method", "random"],
        "metis": ["--method", "metis"],
        "hybrid-1d": ["--method", "hybrid", "--replication-budget", "0"],
        "hybrid-2d": ["--method", "hybrid", "--replication-budget", args.replication_budget],
    }
    for name, opts in manifests.items():
        out = work / f"{data.name}.{name}.w{n}"
        if not (out / "manifest.json").is_file():
            run(gmp_cmd() + ["partition", data, "--workers", n, "--batch-size", args.batch_size, "--out", out,
                             "--overwrite", *opts])
    runs = [(m, "0") for m in ("random", "metis", "hybrid-1d")]
    runs += [("hybrid-2d", s) for s in args.staleness.split(",")]
    results = []
    logs = Path(tempfile.mkdtemp(prefix="train-bench-", dir=work))
    for method, s in runs:
        log = logs / f"{method}-s{s}.jsonl"
        run(torchrun_cmd(n) + ["-m", "cli.main", "train", "--engine", "distributed", "--dataset", data,
                               "--manifest", work / f"{data.name}.{method}.w{n}", "--model", args.model,
                               "--schedule", "static", "--staleness", s, "--epochs", args.epochs,
                               "--batch-size", args.batch_size, "--lr", args.lr, "--log-json", log], done=log)
        rec = [json.loads(x) for x in log.read_text().splitlines()][-1]
        rec["method"], rec["s"] = method, s
        results.append(rec)
    if not args.skip_ddp:
        out = logs / "ddp.json"
        run(torchrun_cmd(n) + [ROOT / "bench" / "ddp_baseline.py", "--dataset", data, "--model", args.model,
                               "--batch-size", args.batch_size, "--epochs", args.epochs, "--lr", args.lr,
                               "--out", out], done=out)
        ddp = json.loads(out.read_text())
        ddp["s"] = "-"
        results.append(ddp)

    base = next(r["embedding_bytes_per_step"] for r in results if r["method"] == "random")
    print(f"\n{data.name}: {args.samples:,} samples, {n} workers, batch {args.batch_size}/worker, "
          f"{args.epochs} epoch(s), model {args.model}, gloo on CPU\n")
    head = (f"{'placement':<16}{'s':>7}{'samples/s':>12}{'emb MB/iter':>13}{'vs random':>11}"
            f"{'refreshes':>11}{'test AUC':>10}{'logloss':>9}")
    print(head)
    print("-" * len(head))
    for r in results:
        eb = r["embedding_bytes_per_step"]
        red = traffic_change(eb, base) if r["method"] != "random" else "-"
        print(f"{r['method']:<16}{r['s']:>7}{r['samples_per_sec']:>12,.0f}{eb / 1e6:>13.2f}{red:>11}"
              f"{r.get('staleness_refreshes', 0):>11,}{r['test_auc']:>10.4f}{r['test_logloss']:>9.4f}")
    print("\nemb MB/iter: embedding rows pulled + gradients pushed per iteration, summed over workers "
          "(ddp: the replicated table's gradient in the all-reduce).\n'vs random': reduction of that traffic "
          "relative to the random placement, signed as gmp partition signs it (-60% = 60% less traffic; "
          "docs/report.md).")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
