"""examples/: every script runs, as a newcomer would run it, on small inputs (each well under a minute of CPU).

The TorchRec example needs the `peers` extra (scripts/setup.sh installs it, and CI runs
scripts/test.sh): without TorchRec its test fails, it does not skip.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, timeout: int = 900, tmpdir: Path | None = None) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if tmpdir is not None:  # where the example's default scratch directory goes
        env["TMPDIR"] = str(tmpdir)
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_every_example_has_a_test():
    tested = {"own_data.py", "in_memory.py", "torchrec_train.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_own_data_example(tmp_path):
    out = run_example("own_data.py", "--rows", "4000", "--work", str(tmp_path))
    manifest = tmp_path / "clicks.hybrid.w4"
    report = json.loads((manifest / "report.json").read_text())
    red = report["metrics"]["reduction_vs_random"]["batch_remote_reads"]
    assert f"placement: {100 * red:.1f}% fewer batch reads than random" in out
    assert (manifest / "report.html").is_file()
    records = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "epoch" and records[-1]["samples"] == 3600  # 90% of 4,000 rows train
    for cmd in ("data import csv", "data info", "partition", "report", "train"):
        assert f"$ gmp {cmd} " in out, cmd


def test_in_memory_example(tmp_path):
    out = run_example("in_memory.py", "--samples", "1500", "--work", str(tmp_path))
    assert "remote accesses" in out and "(checked edge by edge)" in out
    written = json.loads((tmp_path / "manifest" / "report.json").read_text())["metrics"]
    total = written["batch_remote_reads"] + written["batch_remote_pushes"]
    assert f"hybrid: {total:,.0f} rows moved per epoch (reads + pushes)" in out  # in memory == on disk


def test_in_memory_example_removes_its_default_scratch_directory(tmp_path):
    out = run_example("in_memory.py", "--samples", "600", tmpdir=tmp_path)
    assert f"wrote {tmp_path}" in out  # it did work there ...
    assert list(tmp_path.iterdir()) == []  # ... and left nothing behind


def test_torchrec_example_trains_on_two_cpu_ranks(tmp_path):
    import torchrec  # noqa: F401  (the peers extra: a missing TorchRec fails this test, as CI must install it)

    out = run_example("torchrec_train.py", "--samples", "1500", "--work", str(tmp_path))
    ranks = [line for line in out.splitlines() if line.startswith("rank ")]
    assert sorted(line.split(":")[0] for line in ranks) == ["rank 0", "rank 1"], out
    per_rank = np.load(tmp_path / "data.hybrid.w2.torchrec" / "rank_indptr.npy")
    for line in ranks:
        rank = int(line.split(":")[0].split()[1])
        assert f"of its {per_rank[rank + 1] - per_rank[rank]:,} samples" in line, line
    assert "trained one epoch on 2 ranks" in out



def test_readme_is_short_with_own_data_before_any_measured_table():
    """README: under 200 lines; the two commands exactly as .ci/run and the demo use them; "Your own data"
    before any table of measured numbers (those live in docs/benchmarks.md); every linked doc exists."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) < 200, len(lines)
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    own = next(i for i, line in enumerate(lines) if line.startswith("## Your own data"))
    measured = [i for i, line in enumerate(lines) if re.match(r"\|.*\d[\d,.]*\s*(%|s|MB|GiB|k)\b.*\|", line)]
    assert all(i > own for i in measured), [lines[i] for i in measured]
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link
    bench = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "| criteo-kaggle (entity model, the default) 1M | **0.58M (-93.8%)**" in bench


STAMP = ROOT / ".venv" / ".gmp-setup-stamp"


@pytest.mark.skipif(not STAMP.is_file(), reason="this checkout was not set up by scripts/setup.sh (CI's "
                    "scripts/test.sh does that first)")
def test_setup_is_silent_and_installs_nothing_when_nothing_changed():
    """scripts/setup.sh after a setup with the same pyproject.toml: no output at all, no pip run (the
    stamp and setup.log stay as they were)."""
    log = ROOT / ".venv" / "setup.log"
    before = (STAMP.read_text(), log.stat().st_mtime_ns if log.exists() else None)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", proc.stdout + proc.stderr
    assert (STAMP.read_text(), log.stat().st_mtime_ns if log.exists() else None) == before


def test_readme_layout_names_every_library_module():
    """Issue 34: the README's layout block names every module of gmp/ (a new or renamed module must appear)."""
    text = (ROOT / "README.md").read_text()
    start = text.index("gmp/errors.py")
    block = text[start:text.index("```", start)]
    missing = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "gmp").rglob("*.py"))
               if p.name != "__init__.py"
               and not re.search(r"(?<![\w])" + re.escape(p.stem) + r"(?![\w])", block)]
    assert missing == []
