"""bench/incremental_where.py splits a placement's batch reads over its rows: the table's columns must add up
to ``gmp.metrics.batch_remote_reads`` of the three placements, computed here on their own."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.format import load_dataset
from gmp.graph import build_graph
from gmp.manifest import load_manifest
from gmp.metrics import batch_remote_reads
from gmp.partition import run_partitioner
from gmp.partition.incremental import Options, migration_budget, place_and_repartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import incremental_where  # noqa: E402


def test_the_rows_add_up_to_each_placements_batch_reads(tmp_path, capsys):
    d0, d1, p0 = (str(tmp_path / x) for x in ("s0", "s1", "p0"))
    for args in (["data", "synth", "--preset", "tiny", "-n", "3000", "--scale", "0.05", "-o", d0],
                 ["data", "synth", "--continue", d0, "-o", d1, "--growth", "0.05"],
                 ["partition", d0, "-m", "hybrid", "-w", "4", "-o", p0, "--no-plots"]):
        assert CliRunner().invoke(app, args).exit_code == 0
    incremental_where.main([d1, p0, "--budgets", "5", "--batch-size", "64"])
    out = capsys.readouterr().out
    table = [line.split("|")[1:-1] for line in out.splitlines() if re.match(r"\| (old|new) \|", line)]
    sums = [sum(int(row[k].replace(",", "")) for row in table) for k in (3, 4, 5)]  # full, budgeted, placed

    graph = build_graph(load_dataset(d1))
    man = load_manifest(p0)
    used = int(np.count_nonzero(graph.embedding_degree()))
    full = run_partitioner("hybrid", graph, man.topology, seed=0, options={"batch_size": 64})
    placed, budgeted = place_and_repartition(graph, man.placement, man.topology,
                                             max_moved_rows=migration_budget("5%", used),
                                             trained=man.history.trained, goal=full,
                                             options=Options(batch_size=64, alongside=False))
    assert sums == [batch_remote_reads(graph, p, 64) for p in (full, budgeted, placed)]
    assert sum(int(row[2].replace(",", "")) for row in table) == used  # every used row in one group
    assert sums[1] < sums[2]  # the budget bought something on this day
