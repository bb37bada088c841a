"""Benchmark: import a generated Criteo-format TSV with ``gmp data import criteo``.

Generates ``--rows`` (default 1M) Criteo-like lines (vectorised: Zipf-ish hex
values per field, empty fields, 1% of rows with up to 3 trailing columns
stripped, a few negative I2 values) into ``--dir`` (default data/bench),
then times the import in a child process and prints rows/s (wall clock and
per CPU-second: on a shared machine the CPU time is the steadier number),
MB/s and the child's peak RSS (``resource.getrusage(RUSAGE_CHILDREN)``).

    python bench/import_bench.py                       # 1M rows
    python bench/import_bench.py --rows 200000 --gzip  # also time a .gz copy
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: published Criteo-Kaggle cardinalities, capped so a 1M-row file keeps a realistic mix
CARDS = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992, 5461306, 10,
         5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
#: share of empty cells per categorical field (roughly as in the Kaggle data)
CAT_MISSING = [0.0] * 18 + [0.44, 0.44, 0.03, 0.76, 0.0, 0.03, 0.44, 0.03]
DENSE_MISSING = [0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.22]
HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _pieces(rng: np.random.Generator, n: int):
    """Per column: (bytes [n, width] uint8, kept length [n]) right-aligned."""
    cols = []
    label = (rng.random(n) < 0.256).astype(np.uint8) + ord("0")
    cols.append((label[:, None], np.ones(n, np.int64)))
    for j in range(13):
        v = np.minimum(np.floor(rng.lognormal(1.5, 1.8, n)), 999_999).astype(np.int64)
        ndig = np.maximum(1, np.floor(np.log10(np.maximum(v, 1))).astype(np.int64) + 1)
        digits = np.stack([(v // 10 ** k) % 10 for k in range(5, -1, -1)], axis=1).astype(np.uint8) + ord("0")
        length = ndig.copy()
        if j == 1:  # I2 has a few negatives in the real data
            neg = rng.random(n) < 0.05
            digits[neg, 4] = ord("-")
            digits[neg, 5] = ord("1")
            length[neg] = 2
        length[rng.random(n) < DENSE_MISSING[j]] = 0
        cols.append((digits, length))
    for j, card in enumerate(CARDS):
        card = min(card, 2_000_000)
        # Zipf-ish rank: floor(card ** u ** 2)-style heavy head
        rank = np.minimum(np.floor(np.exp(rng.random(n) ** 2.5 * np.log(card))).astype(np.int64) - 1, card - 1)
        val = ((rank * 2654435761 + j * 97531) % (1 << 32)).astype(np.uint64)  # distinct ranks -> distinct hashes
        hexb = np.stack([HEX[((val >> np.uint64(4 * k)) & np.uint64(15)).astype(np.int64)] for k in range(7, -1, -1)],
                        axis=1)
        length = np.full(n, 8, np.int64)
        length[rng.random(n) < CAT_MISSING[j]] = 0
        cols.append((hexb, length))
    return cols


def generate(path: Path, rows: int, seed: int = 0, block: int = 100_000) -> None:
    rng = np.random.default_rng(seed)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        for start in range(0, rows, block):
            n = min(block, rows - start)
            cols = _pieces(rng, n)
            # 1% of rows lose their last 1..3 columns (published copies strip trailing empties)
            strip = np.where(rng.random(n) < 0.01, rng.integers(1, 4, n), 0)
            parts, lens = [], []
            for c, (b, length) in enumerate(cols):
                if c > 0:
                    sep_len = np.ones(n, np.int64)
                    if c >= 40 - 3:
                        gone = strip >= 40 - c
                        sep_len[gone] = 0
                        length = np.where(gone, 0, length)
                    parts.append(np.full((n, 1), 9, np.uint8))
                    lens.append(sep_len)
                parts.append(b)
                lens.append(length)
            parts.append(np.full((n, 1), 10, np.uint8))
            lens.append(np.ones(n, np.int64))
            big = np.concatenate(parts, axis=1)
            keep = np.concatenate([np.arange(p.shape[1])[None, :] >= (p.shape[1] - l)[:, None]
                                   for p, l in zip(parts, lens)], axis=1)
            f.write(big[keep].tobytes())
    os.replace(tmp, path)


def time_import(inp: Path, out: Path, extra: list[str]) -> tuple[float, int, float, str]:
    gmp = shutil.which("gmp") or str(Path(sys.executable).with_name("gmp"))
    cmd = [gmp, "data", "import", "criteo", str(inp), "--out", str(out), "--overwrite", *extra]
    # A fresh wrapper process per measurement, so RUSAGE_CHILDREN's max RSS is this import's alone.
    wrapper = ("import resource, subprocess, sys, time; t0 = time.perf_counter(); "
               "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); w = time.perf_counter() - t0; "
               "r = resource.getrusage(resource.RUSAGE_CHILDREN); sys.stderr.write(p.stderr); "
               "print(p.returncode, w, r.ru_maxrss, r.ru_utime + r.ru_stime); "
               "print(p.stdout.strip())")
    proc = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True)
    first, _, rest = proc.stdout.partition("\n")
    rc, wall, peak_kb, cpu = first.split()
    if int(rc) != 0:
        sys.exit(f"import failed: {proc.stderr.strip()}")
    return float(wall), int(peak_kb), float(cpu), rest.strip() + "\n  command: " + " ".join(cmd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path("data/bench"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gzip", action="store_true", help="also time the same data gzip-compressed")
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--min-count", type=int, default=1)
    ap.add_argument("--pyarrow", action="store_true",
                    help="also time pyarrow's streaming CSV reader parsing the same file (parse only)")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    src = args.dir / f"criteo-bench-{args.rows}.tsv"
    if args.regenerate or not src.exists():
        t0 = time.perf_counter()
        generate(src, args.rows, args.seed)
        print(f"generated {src} ({src.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f}s")
    inputs = [src]
    if args.gzip:
        gz = src.with_name(src.name + ".gz")
        if args.regenerate or not gz.exists():
            with open(src, "rb") as fi, gzip.open(gz, "wb", compresslevel=6) as fo:
                shutil.copyfileobj(fi, fo, 1 << 24)
        inputs.append(gz)
    # warm-up: compile the numba kernels once (cached on disk afterwards)
    small = args.dir / "criteo-bench-warmup.tsv"
    generate(small, 1000, 1)
    time_import(small, args.dir / "criteo-bench-warmup", [])
    for inp in inputs:
        wall, peak_kb, cpu, detail = time_import(inp, args.dir / "criteo-bench-out",
                                                 ["--min-count", str(args.min_count)])
        size = inp.stat().st_size
        print(f"{inp.name}: {args.rows:,} rows in {wall:.2f}s wall = {args.rows / wall:,.0f} rows/s "
              f"({size / wall / 1e6:.1f} MB/s of input); CPU {cpu:.2f}s = {args.rows / cpu:,.0f} rows per CPU-second; "
              f"peak RSS {peak_kb / 1024:.0f} MiB (whole gmp process, incl. interpreter start)")
        print(f"  {detail}")
    if args.pyarrow:
        wall, peak_kb, cpu = time_pyarrow_parse(src)
        print(f"pyarrow.csv.open_csv, parse only (no vocabulary, no hex keys, no output): {args.rows:,} rows in "
              f"{wall:.2f}s wall = {args.rows / wall:,.0f} rows/s; CPU {cpu:.2f}s; peak RSS {peak_kb / 1024:.0f} MiB")


def time_pyarrow_parse(src: Path) -> tuple[float, int, float]:
    """pyarrow's streaming CSV reader over the TSV, one thread (as gmp's importer), in a child process."""
    code = f"""
import resource, sys, time
import pyarrow as pa, pyarrow.csv as pc
pa.set_cpu_count(1); pa.set_io_thread_count(1)
names = ["label"] + [f"I{{i}}" for i in range(1, 14)] + [f"C{{i}}" for i in range(1, 27)]
types = {{"label": pa.int8(), **{{f"I{{i}}": pa.int64() for i in range(1, 14)}}, **{{f"C{{i}}": pa.string() for i in range(1, 27)}}}}
t0 = time.perf_counter()
r = pc.open_csv({str(src)!r}, read_options=pc.ReadOptions(column_names=names, block_size=16 << 20, use_threads=False),
                # rows with stripped trailing columns (real dumps have them) are an error to pyarrow:
                # skipped here (1% of the rows), so pyarrow parses slightly less than gmp imports
                parse_options=pc.ParseOptions(delimiter="\\t", invalid_row_handler=lambda row: "skip"),
                convert_options=pc.ConvertOptions(column_types=types, strings_can_be_null=True))
rows = sum(b.num_rows for b in r)
w = time.perf_counter() - t0
u = resource.getrusage(resource.RUSAGE_SELF)
print(w, u.ru_maxrss, u.ru_utime + u.ru_stime)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"pyarrow parse failed: {out.stderr.strip()[-800:]}")
    wall, peak, cpu = out.stdout.split()
    return float(wall), int(peak), float(cpu)


if __name__ == "__main__":
    main()
