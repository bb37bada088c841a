"""Partitioner benchmark: placement quality, time and peak memory per method (not a test).

Runs every requested partitioner on every requested dataset, each in its own
child process, so wall time and peak RSS are measured per method, and a
method that runs out of time or memory is stopped and reported as
"did not run: <reason>" instead of taking the benchmark (or the machine)
down. Prints a markdown table in the shape of HET-GMP Table 3.

Usage::

    python bench/partition_bench.py --sizes 1m,10m --workers 8 \\
        --methods random,metis,metis-bipartite,greedy-stream
    python bench/partition_bench.py --datasets data/bench/ml-100k --methods random,hybrid:rounds=5
    python bench/partition_bench.py --sizes 1m \\
        --methods 'hybrid:rounds=1,hybrid:rounds=5,hybrid:rounds=5;replication_budget=0'

Methods. ``NAME`` or ``NAME:key=value,key=value`` (options of that
partitioner; values parsed as JSON when they parse, else strings). Because
``--methods`` is itself comma-separated, a token ``key=value`` that follows a
``NAME:...`` token continues that method's options, so
``hybrid:rounds=5,replication_budget=0`` is one method; ``;`` also separates
options.

Datasets. ``--sizes 1m,10m`` reads ``DATA_ROOT/criteo-1m``,
``DATA_ROOT/criteo-10m`` (``--data-root``, default ``data/bench``). A
missing one is generated with ``gmp data synth --preset
criteo-kaggle-independent --samples N`` (the generator the README numbers were
measured on) when that command exists, else with this script's own quick
generator (26 Criteo-Kaggle fields, Zipf popularity, 16 latent communities;
written as ``DATA_ROOT/bench-synth-<size>``; the table names the directory).
``--preset criteo-kaggle`` uses the default at Criteo's vocabulary instead
(``DATA_ROOT/criteo-vocab-<size>``), ``--preset criteo-kaggle-entity`` the
latent-entity model that was the default until issue 37
(``DATA_ROOT/criteo-entity-<size>``, the directory the older entity rows used).

What each child does (``--child``): load the prepared dataset (memory-mapped),
build the graph, run the partitioner (timed: ``time (s)``), record its peak
RSS (``getrusage`` maximum resident set, so it includes the memory-mapped
graph pages the partitioner touched), then score the placement with
:func:`gmp.metrics.compute_metrics` (not counted in time or RSS). The parent
polls the child's RSS and kills it above ``--max-rss-gib`` or after
``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Criteo-Kaggle's 26 categorical field cardinalities (issue 2's preset)
CRITEO_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
                        14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
CRITEO_SAMPLES = 45_840_617


# ----------------------------------------------------------------------------- parsing
def parse_size(text: str) -> int:
    """``"1m"`` -> 1_000_000, ``"100k"`` -> 100_000, ``"2500"`` -> 2500."""
    t = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}.get(t[-1:], 1)
    return int(float(t[:-1] if mult != 1 else t) * mult)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_methods(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``"random,hybrid:rounds=5,replication_budget=0"`` -> [(label, name, options), ...]."""
    methods: list[list[Any]] = []
    for token in [t.strip() for t in text.split(",") if t.strip()]:
        if "=" in token and ":" not in token and methods and methods[-1][2] is not None:
            parts, current = [token], methods[-1]  # continues the previous method's options
        else:
            name, _, rest = token.partition(":")
            current = [name.strip(), None, {} if rest or ":" in token else None]
            methods.append(current)
            parts = [rest] if rest else []
        for part in parts:
            for kv in [p for p in part.split(";") if p.strip()]:
                key, eq, value = kv.partition("=")
                if not eq:
                    raise SystemExit(f"--methods: option {kv!r} of {current[0]!r} is not key=value.")
                current[2][key.strip()] = _parse_value(value.strip())
    out = []
    for name, _, opts in methods:
        opts = opts or {}
        label = name if not opts else name + ":" + ",".join(f"{k}={json.dumps(v)}" for k, v in opts.items())
        out.append((label, name, opts))
    return out


# ----------------------------------------------------------------------------- datasets
#: ``--preset`` -> directory prefix of the generated datasets
#: (the entity model keeps the ``criteo-entity`` directories it was measured in; the default at
#: Criteo's vocabulary, issue 37, gets its own, so an old ``criteo-entity-1m`` is never read as it)
PRESET_PREFIX = {"criteo-kaggle-independent": "criteo", "criteo-kaggle-entity": "criteo-entity",
                 "criteo-kaggle": "criteo-vocab"}


def ensure_dataset(size: str, data_root: Path, seed: int, locality: float | None = None,
                   preset: str = "criteo-kaggle-independent") -> Path:
    """The criteo-preset dataset of ``size`` samples under ``data_root`` (generated if missing).

    ``preset`` ``criteo-kaggle-independent`` (the generator the older tables were measured on)
    writes ``criteo-<size>``, ``criteo-kaggle-entity`` (the latent-entity model) ``criteo-entity-<size>``,
    ``criteo-kaggle`` (the default at Criteo's vocabulary) ``criteo-vocab-<size>``.
    With ``locality`` the preset's ``--locality`` is overridden and the directory is
    ``<prefix>-<size>-loc<locality>`` (e.g. ``criteo-1m-loc1``)."""
    n = parse_size(size)
    prefix = PRESET_PREFIX[preset]
    suffix = "" if locality is None else f"-loc{locality:g}"
    names = ((f"{prefix}-{size}{suffix}",) if locality is not None or prefix != "criteo"
             else (f"criteo-{size}", f"bench-synth-{size}"))
    for name in names:
        if (data_root / name / "dataset.json").exists():
            return data_root / name
    out = data_root / f"{prefix}-{size}{suffix}"
    gmp = shutil.which("gmp") or str(Path(sys.executable).with_name("gmp"))
    if Path(gmp).exists():
        cmd = [gmp, "data", "synth", "--preset", preset, "--samples", str(n), "--seed", str(seed),
               "--out", str(out)] + ([] if locality is None else ["--locality", f"{locality:g}"])
        print(f"# generating {out}: {' '.join(cmd)}", file=sys.stderr)
        if subprocess.run(cmd).returncode == 0 and (out / "dataset.json").exists():
            return out
    if locality is not None or prefix != "criteo":
        raise SystemExit(f"--locality / --preset need 'gmp data synth' to generate {out}.")
    out = data_root / f"bench-synth-{size}"
    print(f"# 'gmp data synth' unavailable: generating {out} with the benchmark's own generator", file=sys.stderr)
    quick_synth(out, n, seed=seed)
    return out


def quick_synth(out: Path, num_samples: int, *, seed: int = 0, num_communities: int = 16,
                locality: float = 0.8, chunk: int = 1_000_000) -> None:
    """A Criteo-like prepared dataset: 26 one-hot fields, Zipf values, latent communities.

    Cardinalities are Criteo-Kaggle's scaled by ``num_samples / 45.8M``
    (at least the field's own value when small). A value's popularity rank is
    ``floor(card ** u) - 1`` with ``u`` uniform (a Zipf(1)-like law); for
    fields with more than 1000 values a sample of community ``c`` draws, with
    probability ``locality``, from its community's own slice of the ids.
    """
    import numpy as np

    from gmp.datasets.format import DatasetWriter, FieldInfo

    rng = np.random.default_rng(seed)
    scale = num_samples / CRITEO_SAMPLES
    cards = [max(min(c, 1000), int(c * scale)) if c > 1000 else c for c in CRITEO_CARDINALITIES]
    offsets = np.concatenate([[0], np.cumsum(cards)[:-1]]).astype(np.int64)
    fields = [FieldInfo(f"C{k + 1}", "categorical", int(c), int(o)) for k, (c, o) in enumerate(zip(cards, offsets))]
    num_fields = len(cards)
    out.parent.mkdir(parents=True, exist_ok=True)
    with DatasetWriter(out, num_dense=0, overwrite=True) as writer:
        for start in range(0, num_samples, chunk):
            m = min(chunk, num_samples - start)
            community = rng.integers(0, num_communities, m)
            ids = np.empty((m, num_fields), dtype=np.int64)
            for f, card in enumerate(cards):
                rank = np.floor(np.power(float(card), rng.random(m))).astype(np.int64) - 1
                if card > 1000:
                    local = rng.random(m) < locality
                    block = card // num_communities
                    rank = np.where(local, community * block + rank % block, rank)
                ids[:, f] = offsets[f] + np.minimum(rank, card - 1)
            labels = (rng.random(m) < 0.25).astype(np.float32)
            writer.add(np.full(m, num_fields, dtype=np.int64), ids.ravel().astype(np.int32), labels, None)
        writer.finish(fields=fields, num_embeddings=int(sum(cards)),
                      source={"format": "bench-quick-synth", "seed": seed, "num_communities": num_communities,
                              "locality": locality}, test_fraction=0.1)


# ----------------------------------------------------------------------------- child
def run_child(args: argparse.Namespace) -> None:
    """Partition one dataset with one method; write the result JSON to ``args.result``."""
    result: dict[str, Any] = {"method": args.method, "options": json.loads(args.options)}
    try:
        from gmp.datasets.format import load_dataset
        from gmp.graph import build_graph
        from gmp.partition import run_partitioner
        from gmp.topology import homogeneous

        dataset = load_dataset(args.dataset)
        graph = build_graph(dataset)
        topology = homogeneous(args.workers)
        t0 = time.perf_counter()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        placement = run_partitioner(args.method, graph, topology, seed=args.seed, options=result["options"])
        result["partition_seconds"] = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        # CPU time of the partitioner (all threads of this process): on a shared machine the wall time
        # grows with the load, the CPU time much less (single-threaded methods: ~ the unloaded wall time)
        result["cpu_seconds"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        result["info"] = dict(placement.info)
        from gmp.metrics import compute_metrics

        result["metrics"] = compute_metrics(graph, placement, topology, batch_size=args.batch_size, seed=args.seed,
                                            partition_seconds=result["partition_seconds"],
                                            peak_rss_bytes=result["peak_rss_bytes"])
        for heavy in ("per_worker", "traffic_matrix"):
            result["metrics"].pop(heavy, None)
    except ModuleNotFoundError as exc:
        result["error"] = f"module {exc.name} is not present"
    except Exception as exc:  # noqa: BLE001 - the parent reports any failure as "did not run"
        result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    Path(args.result).write_text(json.dumps(result, default=str))


# ----------------------------------------------------------------------------- parent
def run_method(dataset: Path, name: str, options: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Run one method in a child process under the time and memory guards."""
    import psutil

    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--dataset", str(dataset), "--method", name,
               "--options", json.dumps(options), "--workers", str(args.workers), "--seed", str(args.seed),
               "--batch-size", str(args.batch_size), "--result", str(result_path)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT)
        ps = psutil.Process(proc.pid)
        limit = args.max_rss_gib * 2**30
        killed = None
        try:
            while proc.poll() is None:
                try:
                    rss = ps.memory_info().rss
                except psutil.Error:
                    rss = 0
                elapsed = time.perf_counter() - t0
                if rss > limit:
                    killed = f"exceeded the memory guard of {args.max_rss_gib:g} GiB after {elapsed:.0f} s"
                elif elapsed > args.timeout:
                    killed = f"timed out after {args.timeout:g} s"
                if killed:
                    break
                time.sleep(0.2)
        finally:  # a guard, Ctrl-C or a SIGTERM to the bench (main turns it into SystemExit) ends the child too
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        wall = time.perf_counter() - t0
        if killed:
            return {"error": killed, "wall_seconds": wall}
        if not result_path.exists():
            return {"error": f"child exited with status {proc.returncode} and no result", "wall_seconds": wall}
        result = json.loads(result_path.read_text())
        result["wall_seconds"] = wall
        return result


def _fmt_int(v: Any) -> str:
    return "-" if v is None else f"{int(v):,}"


def format_table(rows: list[dict[str, Any]]) -> str:
    from gmp.report.tables import fmt_change  # the sign gmp partition and the docs use

    head = ("| dataset | method | batch_remote_reads | vs random | remote_accesses | vs random | "
            "epoch_unique_remote | vs random | samples max/mean | rows max/mean | time (s) | cpu (s) | "
            "peak RSS (GiB) |")
    lines = [head, "|" + "|".join(["---"] * 13) + "|"]
    for r in rows:
        res = r["result"]
        if "error" in res:
            lines.append(f"| {r['dataset']} | {r['label']} | did not run: {res['error']} |" + " |" * 10)
            continue
        m = res["metrics"]
        red = m.get("reduction_vs_random", {})
        cells = [r["dataset"], r["label"]]
        for key in ("batch_remote_reads", "remote_accesses", "epoch_unique_remote"):
            cells += [_fmt_int(m.get(key)), fmt_change(red.get(key, 0.0))]  # signed as docs/report.md: -60% = less
        bal = m.get("balance", {})
        cells += [f"{bal.get('samples', float('nan')):.3f}", f"{bal.get('rows_held', float('nan')):.3f}",
                  f"{res['partition_seconds']:.1f}",
                  f"{res['cpu_seconds']:.1f}" if "cpu_seconds" in res else "-",
                  f"{res['peak_rss_bytes'] / 2**30:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # run_method's finally kills the child
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="", help="comma-separated sample counts of criteo-preset data, e.g. 1m,10m")
    p.add_argument("--datasets", nargs="*", default=[], help="prepared dataset directories to add")
    p.add_argument("--locality", type=float, default=None,
                   help="--sizes datasets with this synth --locality (directories criteo-<size>-loc<L>)")
    p.add_argument("--preset", default="criteo-kaggle-independent", choices=sorted(PRESET_PREFIX),
                   help="synth preset of the --sizes datasets: criteo-kaggle-independent (criteo-<size>, the "
                        "older tables), criteo-kaggle-entity (the latent-entity model, criteo-entity-<size>) or "
                        "criteo-kaggle (the default at Criteo's vocabulary, criteo-vocab-<size>)")
    p.add_argument("--data-root", default="data/bench", help="where --sizes datasets live / are generated")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--methods", default="random,metis,metis-bipartite,greedy-stream")
    p.add_argument("--batch-size", type=int, default=512, help="per-worker batch of the batch metrics")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per method before it is stopped")
    p.add_argument("--max-rss-gib", type=float, default=8.0, help="memory guard per method (GiB of RSS)")
    p.add_argument("--json", default=None, help="also write all results to this JSON file")
    # child mode (internal)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dataset", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_child(args)
        return 0

    methods = parse_methods(args.methods)
    datasets = [ensure_dataset(s.strip(), Path(args.data_root), args.seed, args.locality, args.preset)
                for s in args.sizes.split(",") if s.strip()]
    datasets += [Path(d) for d in args.datasets]
    if not datasets:
        p.error("give --sizes and/or --datasets")
    rows = []
    for ds in datasets:
        for label, name, opts in methods:
            print(f"# {ds.name}: {label} ...", file=sys.stderr, flush=True)
            res = run_method(ds, name, opts, args)
            brief = res.get("error") or f"{res['partition_seconds']:.1f}s, {res['peak_rss_bytes'] / 2**30:.2f} GiB"
            print(f"#   {brief}", file=sys.stderr, flush=True)
            rows.append({"dataset": ds.name, "label": label, "result": res})
    print(f"\n{args.workers} workers, per-worker batch {args.batch_size}, seed {args.seed}; "
          "'vs random' = change versus the seeded random placement, signed as gmp partition signs it "
          "(-60% = 60% less traffic; docs/report.md).\n")
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
