"""The step bench: where a gmp training step spends its time, host work outside torch operations
against time inside them, over batch sizes and embedding dims (issue 33, item 4).

Every local worker of the placement runs in this process (the local engine: the exchanges are
memory copies). For each (embedding dim, per-worker batch) the bench builds a trainer, runs
``--warmup`` steps, then

1. ``--steps`` plain steps: wall milliseconds per step (the device synchronised around each step)
   and CPU milliseconds of this process;
2. ``--profile-steps`` steps under ``torch.profiler``: the time the host spends *inside* torch
   operations (the union, per thread, of the intervals of every operator event: nested
   operators are counted once; the backward's operators on the autograd thread included), and the
   rest of the profiled step wall time, the host work *outside* them (numpy, Python, the trainer's
   bookkeeping). The profiler adds a few microseconds per operator, so its step is slower than
   the plain one: read the split as fractions of the profiled step;
3. 'outside CPU': that outside share applied to the plain step's step CPU milliseconds, the estimate
   of the host's own work per step that a loaded machine (whose wall clock includes the waits
   for a core) distorts least;
4. on CUDA also the GPU busy fraction: the union of the kernels' and copies' intervals on the
   device over the profiled steps' wall time.

The per-phase CPU milliseconds per worker of gmp's own clock (:data:`gmp.train.steps.PHASES`,
process time: the table of docs/train.md "A cheaper step") are printed with ``--phases``. Batches of several steps per epoch cycle through epochs, so a
batch larger than the training set still runs whole steps.

A step is split in two (issue 33): the batch *preparation* (``protocol.prepare``: ids gathered,
deduplicated, translated, index and batch tensors made; in training it runs a step ahead on a side
thread, :mod:`gmp.train.prepare`), timed alone ('prep CPU'), and the *step* proper, from the
prepared batch to the optimizer update returning ('step CPU'; the profiled steps are these alone,
so 'outside' is the host work inside the step). 'CPU ms' is their sum, the same work as a
``train_step`` of the code before the split. A protocol that prepares inside its step (the
pipelined one, tiered or caching stores) shows its preparation in the step. The host time per step
should stay roughly constant from 4,096 up when the per-sample work is in torch operations.

``torch.profiler``'s gaps between operators are wall time: they include preemption on a loaded
machine and the kernel's unmapping of large tensors freed between two operators (glibc returns
every block above 32 MiB to the system), which any eager torch loop pays. Two checks tell gmp's own
host work from those: ``--torch-only`` adds a row per batch that runs the same prepared batches
through the step's torch operations alone (gather, model, per-row sums, row-wise update, dense
optimizer; a world of one), and ``--perf`` splits the timed steps' CPU time by Linux ``perf``
samples (:mod:`perf_split`: operators, their page faults, numpy, munmap, Python).

    python bench/step_cpu_bench.py D [MANIFEST] --batches 512,2048,4096,16384,65536 --dims 16,64 \\
        --hidden 512,256,128 [--device cuda] [--torch-only] [--perf]
    python bench/step_cpu_bench.py D MANIFEST --steps 40 --batches 2048 --dims 16 --phases  # per-phase CPU ms

Without a manifest the run is one worker holding every row (a world of one).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_split import PerfSplit  # noqa: E402
from gmp.comm.local import LocalEngine  # noqa: E402
from gmp.constants import ADAGRAD_EPS  # noqa: E402
from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.train.config import TrainConfig  # noqa: E402
from gmp.train.data import TrainData  # noqa: E402
from gmp.train import host_memory  # noqa: E402
from gmp.train.models import bce_sum  # noqa: E402
from gmp.train.run import load_placement  # noqa: E402
from gmp.train.trainer import Trainer  # noqa: E402


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def union_seconds(intervals) -> float:
    """Length of the union of ``(start, end)`` intervals (any unit in, the same unit out)."""
    total, reach = 0.0, None
    for a, b in sorted(intervals):
        if reach is None or a > reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


def profile_split(events) -> tuple[float, float]:
    """(host µs inside torch operators, summed over threads; device µs busy) of profiler events."""
    host: dict[int, list] = {}
    device = []
    for e in events:
        span = (e.time_range.start, e.time_range.end)
        if e.device_type == torch.autograd.DeviceType.CPU:
            if not e.is_user_annotation:
                host.setdefault(e.thread, []).append(span)
        else:
            device.append(span)
    return sum(union_seconds(v) for v in host.values()), union_seconds(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def torch_only_step(tr: Trainer, prepared, batch: int) -> torch.Tensor:
    """The step's torch operations for a world of one without gmp's code around them: the gather, the
    model, the gradients summed per row and the row-wise SGD/Adagrad update on the prepared index
    tensors, the dense optimizer (``--torch-only``: what eager torch costs outside its operators)."""
    ready, store = prepared.workers[0].ready, tr.stores[0]
    rows = torch.empty(prepared.workers[0].uniq.size, tr.row_dim, dtype=tr.dtype, device=store.device)
    rows[ready.held_pos] = store.table.index_select(0, ready.held_idx)
    leaf = rows.requires_grad_(True)
    tr.dense_opt.zero_grad()
    loss = bce_sum(tr.model(leaf, ready.batch), ready.batch.labels)
    (loss / max(prepared.global_batch_size, batch)).backward()
    summed = torch.zeros(ready.grad_slots.size, tr.row_dim, dtype=tr.dtype, device=store.device)
    summed.index_add_(0, ready.grad_where, leaf.grad[ready.own_t])
    idx, lr = ready.grad_idx, tr.config.lr
    if store.opt_state is None:  # SGD
        store.table.index_copy_(0, idx, store.table.index_select(0, idx).add_(summed, alpha=-lr))
    else:  # Adagrad (gmp.train.store's formula)
        h = store.opt_state.index_select(0, idx) + summed * summed
        store.opt_state[idx] = h
        store.table[idx] = store.table.index_select(0, idx) - lr * summed / (h.sqrt() + ADAGRAD_EPS)
    tr.dense_opt.step()
    return loss.detach()


def measure(ds, placement, args, dim: int, batch: int, torch_only: bool = False) -> dict:
    config = TrainConfig(model=args.model, optimizer=args.optimizer, lr=0.01, batch_size=batch,
                         embedding_dim=dim, hidden=tuple(int_list(args.hidden)), staleness=0,
                         pipeline=args.pipeline)
    engine = LocalEngine(placement.num_workers, device=args.device)
    device = engine.device_for(0)
    tr = Trainer(TrainData(ds), placement, config, engine)
    host_memory.keep_freed_memory([s.device for s in tr.stores])  # as gmp train does (GMP_KEEP_HOST_MEMORY=0: not)
    tr.phase.clock = time.process_time  # CPU seconds per phase (the protocols time through this clock)
    steps = itertools.chain.from_iterable(tr.protocol.steps(e, 0) for e in itertools.count())
    for step in itertools.islice(steps, args.warmup):
        tr.train_step(step)
    tr.phase.reset()
    wall = cpu = 0.0
    samples = 0
    prep_cpu = 0.0
    run = (lambda p: torch_only_step(tr, p, batch)) if torch_only else tr.train_step
    with PerfSplit() if args.perf else contextlib.nullcontext() as perf:
        for step in itertools.islice(steps, args.steps):
            sync(device)
            t0, c0 = time.perf_counter(), time.process_time()
            prepared = tr.protocol.prepare(step)
            sync(device)
            prep_cpu += time.process_time() - c0
            with perf.window() if perf else contextlib.nullcontext():
                run(prepared)
                sync(device)
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
            samples += step.global_batch_size
    phases = dict(tr.phase.seconds)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync(device)
    ready = [tr.protocol.prepare(step) for step in itertools.islice(steps, args.profile_steps)]
    sync(device)
    with torch.profiler.profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for prepared in ready:
            run(prepared)
        sync(device)
        pwall = time.perf_counter() - t0
    in_ops_us, busy_us = profile_split(prof.events())
    n, p = max(1, args.steps), max(1, args.profile_steps)
    outside_share = max(0.0, 1.0 - in_ops_us / 1e6 / pwall) if pwall > 0 else 0.0
    step_cpu_ms = (cpu - prep_cpu) / n * 1e3
    perf_ms = {k: v * step_cpu_ms for k, v in perf.shares().items()} if perf else {}
    return {"dim": dim, "batch": batch, "step": "torch only" if torch_only else "gmp", "perf_cpu_ms": perf_ms,
            "workers": placement.num_workers, "samples_per_step": samples / n,
            "prep_cpu_ms": prep_cpu / n * 1e3, "step_cpu_ms": step_cpu_ms,
            "outside_share": outside_share, "outside_cpu_ms": outside_share * step_cpu_ms,
            "wall_ms": wall / n * 1e3, "cpu_ms": cpu / n * 1e3, "profiled_ms": pwall / p * 1e3,
            "in_ops_ms": in_ops_us / p / 1e3, "outside_ms": max(0.0, pwall / p * 1e3 - in_ops_us / p / 1e3),
            "gpu_busy": busy_us / 1e6 / pwall if device.type == "cuda" and pwall > 0 else None,
            "phases_cpu_ms_per_worker": {k: v / n / placement.num_workers * 1e3 for k, v in phases.items()},
            "device": str(device)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("manifest", nargs="?", default=None, help="placement (default: one worker, every row)")
    ap.add_argument("--batches", default="512,2048,4096,16384,65536", help="samples per worker per step")
    ap.add_argument("--dims", default="16,64", help="embedding dims")
    ap.add_argument("--hidden", default="128,64", help="dense layers, as gmp train --hidden (e.g. 512,256,128)")
    ap.add_argument("--model", default="dcn")
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--steps", type=int, default=5, help="plain timed steps (after --warmup)")
    ap.add_argument("--profile-steps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default=None, help="cpu | cuda:0 (default: the local engine's: cuda:0 if present)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--pipeline", action="store_true")
    ap.add_argument("--phases", action="store_true", help="also print gmp's per-phase CPU ms")
    ap.add_argument("--id-path", choices=("auto", "torch", "numpy"), default=None,
                    help="the preparation's id path (sets GMP_ID_PATH, gmp/train/device_ids.py; default: as set)")
    ap.add_argument("--torch-only", action="store_true",
                    help="also run each batch through the same torch operations without gmp's step code "
                         "(a world of one only): the share outside operators that eager torch itself has")
    ap.add_argument("--perf", action="store_true",
                    help="also split the timed steps' CPU time by Linux perf samples (bench/perf_split.py): "
                         "operators, their page faults, numpy, freeing memory, Python")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    if args.id_path is not None:
        os.environ["GMP_ID_PATH"] = args.id_path
    torch.set_num_threads(max(1, args.threads))
    ds = load_dataset(args.dataset)
    placement = load_placement(ds, args.manifest, None)
    rows = []
    head = (f"{'dim':>4} {'batch':>7} {'step':>10} {'wall ms':>9} {'CPU ms':>9} {'prep CPU':>9} {'step CPU':>9} "
            f"{'profiled':>9} {'in ops':>9} {'outside':>9} "
            f"{'outside %':>9} {'outside CPU':>11} {'µs/sample':>9} {'GPU busy':>9}")
    print(f"{ds.num_samples:,} samples, {placement.num_workers} worker(s), model {args.model} hidden {args.hidden}, "
          f"{args.optimizer}, id path {os.environ.get('GMP_ID_PATH') or 'auto'}, freed host memory kept: "
          f"{'yes' if host_memory.wanted() else 'no'} (GMP_KEEP_HOST_MEMORY), {args.steps} timed + {args.profile_steps} profiled steps; ms per step "
          f"(all workers of the step); batch per worker", flush=True)
    print(head, flush=True)
    kinds = [False, True] if args.torch_only and placement.num_workers == 1 else [False]
    for dim in int_list(args.dims):
        for batch in int_list(args.batches):
            for torch_only in kinds:
                r = measure(ds, placement, args, dim, batch, torch_only)
                rows.append(r)
                busy = "-" if r["gpu_busy"] is None else f"{100 * r['gpu_busy']:.0f}%"
                print(f"{dim:>4} {batch:>7,} {r['step']:>10} {r['wall_ms']:>9.1f} {r['cpu_ms']:>9.1f} "
                      f"{r['prep_cpu_ms']:>9.1f} {r['step_cpu_ms']:>9.1f} {r['profiled_ms']:>9.1f} "
                      f"{r['in_ops_ms']:>9.1f} {r['outside_ms']:>9.1f} {100 * r['outside_share']:>8.0f}% "
                      f"{r['outside_cpu_ms']:>11.1f} "
                      f"{1e3 * r['outside_cpu_ms'] / max(r['samples_per_step'], 1):>9.2f} {busy:>9}", flush=True)
                if r["perf_cpu_ms"]:
                    print("      perf, step CPU ms: " + ", ".join(f"{k} {v:.1f}" for k, v in r["perf_cpu_ms"].items()),
                          flush=True)
                if args.phases:
                    phases = r["phases_cpu_ms_per_worker"]
                    outside = sum(v for k, v in phases.items() if k != "compute")
                    print("      CPU ms per worker per step: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
                          + f"; outside compute {outside:.2f}", flush=True)
    print("wall: plain steps (preparation included), device synchronised; CPU: this process's CPU time of a "
          "plain step, prep CPU (the batch preparation) + step CPU (the step from the prepared batch); profiled: "
          "a step from its prepared batch under torch.profiler (wall), split into 'in ops' (inside torch operators) and 'outside' (host "
          "work between them); 'outside CPU': the outside share x step CPU ms, the host's own work per step (on a "
          "loaded machine the wall columns include the waits for a core, this one does not); µs/sample: "
          "'outside CPU' per sample of the step (both the step proper's, preparation excluded); step 'torch only': "
          "the same batches through the step's torch operations alone (--torch-only); perf: the timed steps' CPU "
          "split by perf samples (bench/perf_split.py: ops, ops_memory = their page faults, numpy, free = munmap, "
          "python)")
    if args.out:
        import json
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
