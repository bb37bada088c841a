"""Your own data, end to end: a CSV file -> prepared dataset -> placement + report -> one epoch of training.

The same five commands as README.md's "Your own data", run on a small clicks file this script writes
(20,000 rows: a user, an item, the item's category, a price and a click label; users prefer the items
of a few categories, so a good placement keeps most lookups on the worker that reads them):

    python examples/own_data.py [--rows 20000] [--work DIR]

Each command is printed before it runs; the script stops at the first that fails.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

GMP = [sys.executable, "-m", "cli.main"]  # the `gmp` console script, from this interpreter


def write_clicks(path: Path, num_rows: int, seed: int = 0) -> None:
    """A clicks CSV with a header: label,user,item,category,price."""
    rng = np.random.default_rng(seed)
    num_users, num_items, num_categories = 2000, 1000, 20
    user = rng.integers(0, num_users, num_rows)
    category_of_item = rng.integers(0, num_categories, num_items)
    # each user browses 2 favourite categories 80% of the time
    favourite = rng.integers(0, num_categories, (num_users, 2))
    category = np.where(rng.random(num_rows) < 0.8, favourite[user, rng.integers(0, 2, num_rows)],
                        rng.integers(0, num_categories, num_rows))
    items_by_category = [np.flatnonzero(category_of_item == c) for c in range(num_categories)]
    item = np.array([rng.choice(items_by_category[c]) if len(items_by_category[c]) else 0 for c in category])
    price = np.round(rng.lognormal(3.0, 1.0, num_rows), 2)
    # clicks: likelier on a user's first favourite category and on the popular half of the items
    p_click = np.where(category == favourite[user, 0], 0.35, 0.08) * np.where(item < num_items // 2, 1.5, 0.5)
    click = (rng.random(num_rows) < p_click).astype(int)
    lines = ["label,user,item,category,price"]
    lines += [f"{c},u{u},i{i},c{category_of_item[i]},{p}" for c, u, i, p in zip(click, user, item, price)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def gmp(*args: str) -> str:
    print("$ gmp " + " ".join(shlex.quote(a) for a in args), flush=True)
    proc = subprocess.run([*GMP, *args], capture_output=True, text=True)
    # the per-epoch JSON records of gmp train are in --log-json's file; the rest is what a person reads
    print("".join(line for line in proc.stdout.splitlines(keepends=True) if not line.startswith("{")), end="")
    if proc.returncode != 0:
        sys.exit(f"gmp {args[0]} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--work", type=Path, default=None, help="scratch directory (default: a new temporary one)")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="gmp-own-data-"))
    work.mkdir(parents=True, exist_ok=True)
    csv, data, manifest = work / "clicks.csv", work / "clicks", work / f"clicks.hybrid.w{args.workers}"
    write_clicks(csv, args.rows)

    # 1. import: name the label and the numeric column; every other column is categorical
    gmp("data", "import", "csv", str(csv), "--label", "label", "--dense", "price", "--out", str(data), "--overwrite")
    # 2. what is in it
    gmp("data", "info", str(data))
    # 3. partition: a placement manifest and its quality report (report.md, plots)
    gmp("partition", str(data), "--workers", str(args.workers), "--method", "hybrid", "--batch-size", "128",
        "--out", str(manifest), "--overwrite")
    # 4. the report as one HTML page
    gmp("report", str(manifest), "--format", "html")
    # 5. train one epoch of Wide & Deep with that placement, the workers simulated in this process
    gmp("train", str(data), "--manifest", str(manifest), "--engine", "local", "--model", "wdl", "--epochs", "1",
        "--log-json", str(work / "train.jsonl"))

    report = json.loads((manifest / "report.json").read_text(encoding="utf-8"))
    record = json.loads((work / "train.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    red = report["metrics"]["reduction_vs_random"]["batch_remote_reads"]
    assert (manifest / "report.html").is_file() and 0.0 < red <= 1.0, red
    assert 0.0 <= record["test_auc"] <= 1.0, record
    print(f"\nplacement: {100 * red:.1f}% fewer batch reads than random; trained one epoch, test AUC "
          f"{record['test_auc']:.3f}. Open {manifest / 'report.html'}")


if __name__ == "__main__":
    main()
