"""gmp against the plain-PyTorch reference on one device: samples/s and test AUC (issue 33, item 4).

Made for a lent GPU machine (no package registry, at most 64 MiB carried: the data is generated
there), and bounded to about 8 minutes at its default sizes. On one dataset (``gmp data synth
--preset criteo-kaggle``), one model (DCN with ``--hidden``), one global batch, one embedding dim,
SGD at one learning rate, one epoch:

* ``gmp w1``: ``gmp train --engine local --workers 1`` on a hybrid manifest for one worker, batch B;
* ``gmp w4``: 4 local workers on one device, hybrid manifest for 4, batch B/4 per worker (the same
  global batch B, so the same number of optimizer steps per epoch);
* ``reference``: bench/peers/reference.py, every table in one fused sparse ``nn.EmbeddingBag``,
  batch B, gmp's initial rows and dense part;

each with ``GMP_DETERMINISTIC=0`` and ``=1`` (the reference honours it as gmp does), in
interleaved rounds (``--repeats``: every round runs every configuration once, so a slow minute of
the machine hits all of them alike). Optionally (``--cpu-run``) one ``gmp w1`` run on the CPU
(``CUDA_VISIBLE_DEVICES=``), for the GPU/CPU ratio, after the first round (so a ``--budget`` that
runs out drops repeats first). The first round's gmp runs include numba's first compilation of the
step's kernels (cached on disk for the later runs): compare the rounds. Prints one table (median samples/s with the
min-max, test AUC, ratio to the reference of the same determinism) and writes every run as JSON.

    python bench/gpu_reference.py --out runs/gpu-check/reference          # the GPU section's sizes
    python bench/gpu_reference.py --out /tmp/ref --tiny                   # seconds, on CPU: a logic check

Run by ``bench/gpu_check.sh`` (section 6; ``GMP_GPU_CHECK_ONLY=reference`` runs it alone,
``GMP_GPU_CHECK_TINY=1`` shrinks it). Compare with TorchRec's published single-GPU figure (about
740k samples/s on one A100 at batch 16,384, dim 128: facebookresearch/dlrm, torchrec_dlrm/README).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = {"samples": 20_000, "scale": 0.01, "batch": 1024, "dim": 8, "hidden": "32,16", "repeats": 1}


def gmp_cmd() -> list[str]:
    return [sys.executable, "-m", "cli.main"]


def call(cmd: list, *, env: dict | None = None, timeout: float) -> tuple[int, float, str]:
    """(exit code, wall seconds, stderr tail); a timeout is exit code 124."""
    cmd = list(map(str, cmd))
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, err = res.returncode, res.stderr
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        rc, err = 124, f"{err}\n(timed out after {timeout:.0f} s)"
    return rc, time.perf_counter() - t0, err[-1500:]


def prepare(args) -> tuple[Path, dict[int, Path]]:
    """The dataset (generated once) and a hybrid manifest per world size."""
    data = Path(args.work).resolve() / f"criteo-kaggle-{args.samples}-s{args.scale}"
    if not (data / "dataset.json").is_file():
        rc, secs, err = call(gmp_cmd() + ["data", "synth", "--preset", "criteo-kaggle", "--samples", args.samples,
                                          "--scale", args.scale, "--seed", 0, "--out", data], timeout=args.timeout)
        if rc:
            raise SystemExit(f"data synth failed ({rc}):\n{err}")
        print(f"data synth: {secs:.0f} s", file=sys.stderr)
    manifests = {}
    for w in (1, 4):
        out = Path(args.out).resolve() / f"manifest-{w}"
        if not (out / "manifest.json").is_file():
            rc, secs, err = call(gmp_cmd() + ["partition", data, "--workers", w, "--method", "hybrid", "--batch-size",
                                              args.batch // w, "--seed", 0, "--out", out, "--overwrite"],
                                 timeout=args.timeout)
            if rc:
                raise SystemExit(f"partition --workers {w} failed ({rc}):\n{err}")
        manifests[w] = out
    return data, manifests


def command(name: str, args, data: Path, manifests: dict[int, Path], out: Path) -> list:
    common = ["--model", "dcn", "--hidden", args.hidden, "--lr", args.lr, "--embedding-dim", args.dim,
              "--epochs", args.epochs, "--seed", 0]
    if name == "reference":
        return [sys.executable, ROOT / "bench" / "peers" / "reference.py", "--dataset", data, "--batch-size",
                args.batch, "--threads", args.threads, "--out", out, *common]
    w = int(name.split("w")[-1])
    return gmp_cmd() + ["train", data, "--manifest", manifests[w], "--workers", w, "--engine", "local",
                        "--optimizer", "sgd", "--batch-size", args.batch // w, "--log-json", out, *common]


def read(name: str, out: Path) -> dict | None:
    """samples/s (training samples over training seconds) and the last test AUC of a run."""
    if not out.is_file() or not out.stat().st_size:
        return None
    if name == "reference":
        r = json.loads(out.read_text())
        return {"samples_per_sec": r["samples_per_sec"], "test_auc": r["test_auc"], "test_logloss": r["test_logloss"]}
    recs = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    epochs = [r for r in recs if r.get("kind") == "epoch"]
    if not epochs:
        return None
    secs = sum(r["train_seconds"] for r in epochs)
    return {"samples_per_sec": sum(r["samples"] for r in epochs) / secs, "test_auc": epochs[-1]["test_auc"],
            "test_logloss": epochs[-1]["test_logloss"]}


def default_device() -> str:
    """Where ``gmp train --engine local`` and the reference put their tables here: cuda or cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for manifests, logs and results.json")
    ap.add_argument("--work", default="data/bench", help="where the generated dataset goes (reused)")
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--scale", type=float, default=0.1, help="criteo-kaggle cardinality scale")
    ap.add_argument("--batch", type=int, default=16_384, help="global batch (gmp w4: a quarter per worker)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", default="512,256,128")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved rounds")
    ap.add_argument("--deterministic", default="0,1", help="GMP_DETERMINISTIC values to run")
    ap.add_argument("--runs", default="gmp-w1,gmp-w4,reference")
    ap.add_argument("--cpu-run", action="store_true", help="also one gmp-w1 run with CUDA hidden")
    ap.add_argument("--threads", type=int, default=1, help="reference: torch intra-op threads (CPU)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per command")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds for the whole bench (0: none): no run starts that the slowest run so far would "
                         "carry past it; the table then has the runs done")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (a logic check on CPU): " + json.dumps(TINY))
    args = ap.parse_args()
    if args.tiny:
        for k, v in TINY.items():
            setattr(args, k, v)
    start = time.monotonic()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # a SIGTERM (the caller's `timeout`) still prints the table of the runs done so far
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    results: list[dict] = []
    try:
        run_all(args, out, results, start)
    except KeyboardInterrupt:
        print("interrupted: the table has the runs done so far", file=sys.stderr)
    (out / "results.json").write_text(json.dumps({"settings": vars(args), "runs": results}, indent=1))
    report(args, results)


def run_all(args, out: Path, results: list[dict], start: float) -> None:
    """Every configuration ``--repeats`` times, interleaved, then the CPU run; appends to ``results``."""
    data, manifests = prepare(args)
    names = [n.strip() for n in args.runs.split(",") if n.strip()]
    device = default_device()
    plan = [(f"{name}-det{det}-r{r}", name, det, device, r + 1, {"GMP_DETERMINISTIC": det})
            for r in range(args.repeats) for det in args.deterministic.split(",") for name in names]
    if args.cpu_run:  # after the first round (numba's kernels compiled and cached), before the repeats
        plan.insert(len(plan) // max(1, args.repeats),
                    ("gmp-w1-cpu", "gmp-w1", "-", "cpu", 1, {"CUDA_VISIBLE_DEVICES": ""}))
    base_env = {**os.environ, "GMP_NO_PROGRESS": "1", "PYTHONPATH": str(ROOT)}
    if args.tiny:  # the logic check runs on a shared CPU: gmp on as many torch threads as the reference
        base_env.setdefault("GMP_TORCH_THREADS", str(args.threads))
    slowest = 0.0
    for tag, name, det, dev, rnd, env in plan:
        if args.budget and time.monotonic() - start + slowest > args.budget:
            print(f"--budget {args.budget:.0f} s: {tag} and the runs after it are skipped", file=sys.stderr)
            return
        log = out / f"{tag}.json"
        log.unlink(missing_ok=True)
        rc, secs, err = call(command(name, args, data, manifests, log), env={**base_env, **env},
                             timeout=args.timeout)
        slowest = max(slowest, secs)
        res = read(name, log)
        if res is None:
            print(f"{tag}: failed ({rc}):\n{err}", file=sys.stderr)
            continue
        results.append({"name": name, "deterministic": det, "device": dev, "round": rnd, "wall_seconds": secs,
                        **res})
        print(f"  {tag:<18} {dev}: {res['samples_per_sec']:,.0f} samples/s, AUC {res['test_auc']:.4f} "
              f"({secs:.0f} s)", file=sys.stderr, flush=True)


def report(args, results: list[dict]) -> None:
    print(f"\ncriteo-kaggle synth {args.samples:,} samples (scale {args.scale}), DCN hidden {args.hidden}, dim "
          f"{args.dim}, global batch {args.batch:,} (gmp w4: {args.batch // 4:,} per worker), SGD lr {args.lr}, "
          f"{args.epochs} epoch(s), {args.repeats} interleaved round(s)\n")
    print("| run | GMP_DETERMINISTIC | device | samples/s median (min-max) | vs reference | test AUC | runs |")
    print("|---|---|---|---:|---:|---:|---:|")
    groups: dict[tuple, list] = {}
    for r in results:
        groups.setdefault((r["name"], r["deterministic"], r["device"]), []).append(r)
    med = {k: statistics.median(x["samples_per_sec"] for x in v) for k, v in groups.items()}
    for (name, det, device), runs in groups.items():
        sps = [x["samples_per_sec"] for x in runs]
        ref = med.get(("reference", det, device))
        ratio = f"{med[(name, det, device)] / ref:.2f}" if ref and name != "reference" else "-"
        auc = statistics.median(x["test_auc"] for x in runs)
        print(f"| {name} | {det} | {device} | {med[(name, det, device)]:,.0f} ({min(sps):,.0f}-{max(sps):,.0f}) | "
              f"{ratio} | {auc:.4f} | {len(runs)} |")
    gpu, cpu = med.get(("gmp-w1", "0", "cuda")), med.get(("gmp-w1", "-", "cpu"))
    if gpu and cpu:
        print(f"\ngmp w1 on the GPU (GMP_DETERMINISTIC=0) vs on this machine's CPU cores: {gpu / cpu:.1f}x")
    print("\nTorchRec's published single-GPU figure: about 740k samples/s on one A100, batch 16,384, dim 128 "
          "(facebookresearch/dlrm, torchrec_dlrm/README).")


if __name__ == "__main__":
    main()
