"""``gmp partition``, ``gmp report`` and ``gmp compare`` through typer's CliRunner."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.manifest import load_manifest
from gmp.partition import PARTITIONERS

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_every_registered_module_is_present():
    """A registered partitioner whose module is missing fails here (never a skip)."""
    for method, spec in PARTITIONERS.items():
        importlib.import_module(f"gmp.partition.{spec.module}")


def test_method_help_lists_every_registered_partitioner():
    res = runner.invoke(app, ["partition", "--help"], env={"COLUMNS": "400"})  # one line per option
    line = next(ln for ln in res.output.splitlines() if "--method" in ln)
    assert all(method in line for method in PARTITIONERS), line


@pytest.fixture
def partitioned(tiny_dataset, tmp_path) -> Path:
    out = tmp_path / "p"
    res = invoke("partition", tiny_dataset, "--workers", 2, "--method", "random", "--batch-size", 2,
                 "--seed", 3, "--out", out)
    assert res.exit_code == 0, res.output
    return out


def test_partition_writes_manifest_and_report(partitioned, tiny_dataset):
    from gmp.datasets.format import load_dataset

    names = {p.name for p in partitioned.iterdir()}
    assert names == {"manifest.json", "sample_worker.npy", "embedding_primary.npy", "secondary_indptr.npy",
                     "secondary_workers.npy", "trained_rows.npy", "created_rows.npy", "report.json", "report.md",
                     "traffic.png", "loads.png", "degrees.png"}
    m = load_manifest(partitioned, dataset=load_dataset(tiny_dataset))
    assert m.placement.method == "random" and m.placement.seed == 3 and m.num_workers == 2
    rep = json.loads((partitioned / "report.json").read_text())
    assert rep["metrics"]["batch_size"] == 2 and rep["metrics"]["partition_seconds"] >= 0
    assert rep["metrics"]["peak_rss_bytes"] > 0
    assert rep["metrics"]["train"]["num_train"] == 4  # tiny_dataset: last third is the test split
    # random scored against random with the same seed
    assert all(v == 0.0 for v in rep["metrics"]["reduction_vs_random"].values())
    assert m.meta["report_files"] == ["traffic.png", "loads.png", "degrees.png", "report.json", "report.md"]


def test_partition_prints_summary(tiny_dataset, tmp_path):
    res = invoke("partition", tiny_dataset, "--topology", "1x2", "--method", "random", "--out", tmp_path / "p")
    assert res.exit_code == 0, res.output
    assert "batch remote reads (rows pulled / epoch)" in res.output
    assert "balance: samples (max/mean)" in res.output
    assert f"wrote {tmp_path / 'p'}" in res.output
    # the last line: rows a training epoch moves (batch reads + pushes) and the topology explained
    m = json.loads((tmp_path / "p" / "report.json").read_text())["metrics"]
    total = m["batch_remote_reads"] + m["batch_remote_pushes"]
    last = res.output.strip().splitlines()[-1]
    assert last.startswith(f"random, 2 workers: {total:,.0f} rows/epoch ({total * 16 * 4:.0f} B), 0.0% vs random"), last
    assert "2 workers (1 machine x 2, a row on another machine costs more)" in res.output
    one = invoke("partition", tiny_dataset, "--workers", "1", "--method", "random", "--out", tmp_path / "p1")
    assert one.exit_code == 0, one.output
    assert one.output.strip().splitlines()[-1].startswith("random, 1 worker: 0 rows/epoch (0 B)"), one.output


def test_report_formats(partitioned, tmp_path):
    res = invoke("report", partitioned)
    assert res.exit_code == 0, res.output
    assert res.output.startswith("# random on tiny, 2 workers: 0.0% bytes moved vs random (reads + pushes)")
    res = invoke("report", partitioned, "--format", "json")
    assert res.exit_code == 0
    obj = json.loads(res.output)
    assert obj["format"] == "gmp.report" and obj["source"] == "report.json (arrays re-validated)"
    res = invoke("report", partitioned, "--format", "html")  # a file, not 128 KB on the terminal
    assert res.exit_code == 0 and "data:image/png;base64," in (partitioned / "report.html").read_text()
    res = invoke("report", partitioned, "--format", "md", "--out", tmp_path / "r")
    assert res.exit_code == 0, res.output
    assert {p.name for p in (tmp_path / "r").iterdir()} == {"report.md", "traffic.png", "loads.png", "degrees.png"}
    res = invoke("report", partitioned, "--format", "pdf")
    assert res.exit_code == 2 and "error: --format 'pdf' not understood" in res.output


def test_report_recomputes_with_dataset(partitioned, tiny_dataset):
    stored = json.loads((partitioned / "report.json").read_text())["metrics"]
    res = invoke("report", partitioned, "--dataset", tiny_dataset, "--format", "json")
    assert res.exit_code == 0, res.output
    fresh = json.loads(res.output)
    assert fresh["source"] == "recomputed from dataset"
    for key in ("remote_accesses", "batch_remote_reads", "batch_remote_pushes", "traffic_matrix", "per_worker",
                "balance", "reduction_vs_random"):
        assert fresh["metrics"][key] == stored[key], key
    res = invoke("report", partitioned, "--dataset", tiny_dataset, "--format", "json", "--batch-size", 1)
    assert res.exit_code == 0 and json.loads(res.output)["metrics"]["batch_size"] == 1


def test_report_refuses_other_dataset(partitioned, tmp_path):
    import numpy as np

    from gmp.datasets.format import write_dataset

    other = tmp_path / "other"
    write_dataset(other, indptr=np.array([0, 1, 2]), indices=np.array([0, 1]), labels=np.zeros(2, dtype=np.float32),
                  dense=None, fields=[], num_embeddings=2, source={"format": "test"}, test_fraction=0.5)
    res = invoke("report", partitioned, "--dataset", other)
    assert res.exit_code == 2
    assert "error:" in res.output and "was made for dataset sha256" in res.output
    assert "Traceback" not in res.output


def test_report_refuses_corrupt_manifest(partitioned):
    (partitioned / "sample_worker.npy").write_bytes(b"junk")
    res = invoke("report", partitioned)
    assert res.exit_code == 2 and "sample_worker.npy is not a readable .npy array" in res.output


def test_partition_errors(tiny_dataset, tmp_path):
    res = invoke("partition", tiny_dataset, "--workers", 2, "--method", "random", "--rounds", 3, "--out", tmp_path / "a")
    assert res.exit_code == 2 and ("error: method 'random' does not take --rounds; it takes: -O field_offsets=, "
                                   "-O per_field=." in res.output)
    res = invoke("partition", tiny_dataset, "--workers", 2, "--method", "greedy-stream", "-O", "foo=1")
    assert "error: method 'greedy-stream' does not take -O foo=; it takes: -O embedding_max_imbalance=, " \
           "--max-imbalance, -O order=." in res.output, res.output
    res = invoke("partition", tiny_dataset, "--workers", 2, "--method", "nope", "--out", tmp_path / "a")
    assert res.exit_code == 2 and "unknown partitioner 'nope'" in res.output
    res = invoke("partition", tiny_dataset, "--workers", 3, "--topology", "2x2", "--method", "random")
    assert res.exit_code == 2 and "--workers 3 disagrees with the topology's 4 workers" in res.output
    for n in (0, -1):  # 0 is a bad count, not a missing --workers
        res = invoke("partition", tiny_dataset, "--workers", n, "--method", "random", "--out", tmp_path / "w")
        assert res.exit_code == 2 and f"error: number of workers must be >= 1, got {n}." in res.output, res.output
    res = invoke("partition", tmp_path / "missing", "--workers", 2, "--method", "random")
    assert res.exit_code == 2 and "is not a directory" in res.output
    out = tmp_path / "b"
    assert invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", out).exit_code == 0
    res = invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", out)
    assert res.exit_code == 2 and "already exists and is not empty" in res.output
    assert invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--out", out, "--overwrite").exit_code == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directories left


def test_partition_names_a_manifest_given_as_the_dataset(partitioned, tmp_path):
    """A placement manifest where a dataset belongs is named as such (not 'dataset.json not found')."""
    res = invoke("partition", partitioned, "-w", 2, "-m", "random", "--out", tmp_path / "c")
    assert res.exit_code == 2, res.output
    assert (f"error: {partitioned} is a placement manifest (it has manifest.json), not a dataset; a dataset "
            "directory (with dataset.json" in " ".join(res.output.split()))
    assert "dataset.json not found" not in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    res = invoke("partition", empty, "-w", 2, "-m", "random", "--out", tmp_path / "d")
    assert res.exit_code == 2 and "dataset.json not found" in res.output  # a plain directory keeps the old message


def test_partition_refuses_zero_memory_before_the_graph(tiny_dataset, tmp_path, monkeypatch):
    """hybrid's Options refuse memory_per_worker=0 (the manifest's plan would) before any graph is built."""
    def no_graph(*args, **kwargs):
        raise AssertionError("the graph was built before the options were checked")

    monkeypatch.setattr("gmp.graph.build_graph", no_graph)
    out = tmp_path / "mz"
    res = invoke("partition", tiny_dataset, "-w", 2, "-m", "hybrid", "--memory-per-worker", "0", "--no-plots",
                 "--out", out)
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "error: hybrid: memory_per_worker must be a number of bytes >= 1" in res.output
    assert not out.exists()


def test_topology_file(tiny_dataset, tmp_path):
    f = tmp_path / "costs.json"
    f.write_text(json.dumps({"cost": [[0, 3], [5, 0]]}))
    res = invoke("partition", tiny_dataset, "--topology-file", f, "-m", "random", "--out", tmp_path / "p")
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "p" / "report.json").read_text())
    edge = rep["metrics"]["traffic_matrix"]
    assert rep["settings"]["topology"]["cost"] == [[0, 3], [5, 0]]
    assert rep["metrics"]["batch_remote_reads_weighted"] == 3 * edge[0][1] + 5 * edge[1][0]


def test_parse_bytes():
    from cli.partition import parse_bytes
    from gmp.errors import PartitionError

    assert parse_bytes("1024") == 1024 and parse_bytes("2KiB") == 2048 and parse_bytes("1.5MB") == 1_500_000
    assert parse_bytes("1GiB") == 2**30
    with pytest.raises(PartitionError, match="--memory-per-worker '12 apples' not understood"):
        parse_bytes("12 apples")


OTHER_METHODS = sorted(m for m in PARTITIONERS if m != "random")


@pytest.mark.parametrize("method", OTHER_METHODS)
def test_partition_every_registered_method(method, tiny_dataset, tmp_path):
    res = invoke("partition", tiny_dataset, "--workers", 2, "--method", method, "--batch-size", 2,
                 "--out", tmp_path / "p")
    if res.exit_code == 2 and ("install" in res.output or "not installed" in res.output):
        pytest.skip(f"{method}: optional dependency missing ({res.output.strip()})")
    assert res.exit_code == 0, res.output
    m = load_manifest(tmp_path / "p")
    assert m.placement.method == method
    # batch_size reaches partitioners that take it
    if "batch_size" in m.meta["partitioner"]["options"]:
        assert m.meta["partitioner"]["options"]["batch_size"] == 2


def test_partition_options_pass_through_to_hybrid(tiny_dataset, tmp_path):
    res = invoke("partition", tiny_dataset, "-w", 2, "-m", "hybrid", "--rounds", 2, "--tol", 0, "--gamma", 0.5,
                 "--replication-budget", 0.2, "--embedding-dim", 8, "--out", tmp_path / "h")
    assert res.exit_code == 0, res.output
    m = load_manifest(tmp_path / "h")
    opts = m.meta["partitioner"]["options"]
    assert (opts["rounds"], opts["tol"], opts["gamma"], opts["replication_budget"], opts["embedding_dim"]) == \
        (2, 0.0, 0.5, 0.2, 8)
    assert "## Convergence (per round)" in (tmp_path / "h" / "report.md").read_text()


def test_compare_inline(tiny_dataset, tmp_path):
    methods = ["random", "greedy-stream", "metis", "hybrid"]
    out = tmp_path / "cmp.json"
    res = invoke("compare", tiny_dataset, "--workers", 2, "--methods", ",".join(methods), "--batch-size", 2,
                 "--no-isolate", "--out", out)
    assert res.exit_code == 0, res.output
    assert "change vs random" in res.output and "random" in res.output
    obj = json.loads(out.read_text())
    assert obj["format"] == "gmp.compare" and [r["method"] for r in obj["rows"]] == methods
    first = obj["rows"][0]
    assert first["status"] == "ok" and first["rss_kind"] == "process high-water mark"
    assert all(v == 0.0 for v in first["metrics"]["reduction_vs_random"].values())


def test_compare_isolated_markdown(tiny_dataset, tmp_path):
    out = tmp_path / "cmp.md"
    res = invoke("compare", tiny_dataset, "--workers", 2, "--methods", "random,greedy-stream", "--batch-size", 2,
                 "--out", out)
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "| method | batch reads | vs random |" in text and "| random |" in text
    assert "each partitioner's own child process" in text
    assert "2 workers (flat: every remote row costs 1)" in text and "workers (2)" not in res.output


def test_compare_one_sign_convention_and_compile_time_apart(tiny_dataset, tmp_path):
    """The terminal and compare.md show a reduction the same way ("-83.3%", compare.md said "83.3%"), the
    JSON rows carry the compilation apart, and the last line names the method that moves the fewest rows."""
    out, js = tmp_path / "cmp.md", tmp_path / "cmp.json"
    args = ["compare", tiny_dataset, "--workers", 2, "--methods", "random,greedy-stream", "--batch-size", 2,
            "--no-isolate"]
    res = invoke(*args, "--out", out)
    assert res.exit_code == 0, res.output
    assert invoke(*args, "--out", js).exit_code == 0
    rows = {r["method"]: r for r in json.loads(js.read_text())["rows"]}
    red = rows["greedy-stream"]["metrics"]["reduction_vs_random"]["batch_remote_reads"]
    assert red > 0
    shown = f"{-100 * red:+.1f}%"
    md_row = next(line for line in out.read_text().splitlines() if line.startswith("| greedy-stream |"))
    assert md_row.split(" | ")[2] == shown
    assert f" {shown}" in next(line for line in res.output.splitlines() if "greedy-stream" in line)
    for r in rows.values():
        assert 0.0 <= r["compile_seconds"] <= r["seconds"]
    gs = rows["greedy-stream"]["metrics"]
    total = gs["batch_remote_reads"] + gs["batch_remote_pushes"]
    assert res.output.strip().splitlines()[-1].startswith(f"Best: greedy-stream, {total:,.0f} rows/epoch")


def test_compare_errors(tiny_dataset, tmp_path):
    res = invoke("compare", tiny_dataset, "-w", 2, "--methods", "random,bogus")
    assert res.exit_code == 2 and "unknown method(s) bogus" in res.output
    res = invoke("compare", tiny_dataset, "-w", 2, "--methods", "random", "--out", tmp_path / "x.txt")
    assert res.exit_code == 2 and "expected a .md, .json or .html file name" in res.output


def test_inter_cost_without_machines_is_refused(tiny_dataset, tmp_path):
    for where in (["--workers", "2"], ["--topology", "2"]):  # a uniform matrix was written, the flag ignored
        res = invoke("partition", tiny_dataset, "-m", "random", *where, "--inter-cost", "5", "--out", tmp_path / "p")
        assert res.exit_code == 2 and "--inter-cost sets the cost between the machines of --topology MxG" in res.output
    res = invoke("partition", tiny_dataset, "-m", "random", "--topology", "1x2", "--inter-cost", "5",
                 "--out", tmp_path / "q")
    assert res.exit_code == 0, res.output


def test_compare_out_never_replaces_a_file_unasked(tiny_dataset, tmp_path):
    import shutil

    from gmp.datasets.format import load_dataset

    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    before = (ds / "dataset.json").read_bytes()
    res = invoke("compare", ds, "-w", 2, "--methods", "random", "--no-isolate", "--out", ds / "dataset.json")
    assert res.exit_code == 2 and "is inside a gmp dataset" in res.output, res.output
    assert (ds / "dataset.json").read_bytes() == before and load_dataset(ds).num_samples == 6
    out = tmp_path / "cmp.json"
    out.write_text("mine")
    res = invoke("compare", ds, "-w", 2, "--methods", "random", "--no-isolate", "--out", out)
    assert res.exit_code == 2 and "already exists" in res.output and out.read_text() == "mine"
    res = invoke("compare", ds, "-w", 2, "--methods", "random", "--no-isolate", "--out", out, "--overwrite")
    # not gmp's: --overwrite replaces only a file gmp wrote (it replaced this one)
    assert res.exit_code == 2 and "is not a file gmp wrote (it has no gmp.compare mark)" in res.output
    assert out.read_text() == "mine"
    out.unlink()
    for _ in range(2):  # written, then replaced: gmp's own
        res = invoke("compare", ds, "-w", 2, "--methods", "random", "--no-isolate", "--out", out, "--overwrite")
        assert res.exit_code == 0 and json.loads(out.read_text())["format"] == "gmp.compare", res.output


def test_report_out_never_replaces_another_report(partitioned, tiny_dataset, tmp_path):
    import shutil

    own = (partitioned / "report.json").read_bytes()
    res = invoke("report", partitioned, "-d", tiny_dataset, "--batch-size", 1, "--format", "json", "--out", partitioned)
    assert res.exit_code == 2 and "its own report would be replaced by one for batch_size 1 (planned 2)" in res.output
    other = tmp_path / "q"  # another manifest (a copy): its report is its own
    shutil.copytree(partitioned, other)
    res = invoke("report", partitioned, "--format", "json", "--out", other)
    assert res.exit_code == 2 and "is a placement manifest; its files are not this report's" in res.output
    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    res = invoke("report", partitioned, "--format", "json", "--out", ds)
    assert res.exit_code == 2 and "is a gmp dataset" in res.output and not (ds / "report.json").exists()
    assert (partitioned / "report.json").read_bytes() == own
    res = invoke("report", partitioned, "-d", tiny_dataset, "--batch-size", 2, "--format", "json",
                 "--out", partitioned / ".")
    assert res.exit_code == 0, res.output  # the planned settings, the manifest itself: its report, rewritten


def test_compare_reports_failed_method_as_row(tiny_graph):
    from gmp.compare import compare, comparison_table
    from gmp.topology import homogeneous

    # a method whose options cannot be built on this graph raises a GmpError -> a "not run" row
    res = compare(tiny_graph, homogeneous(2), ["random"], options={"random": {}}, isolate=False)
    assert res["rows"][0]["status"] == "ok"
    res = compare(tiny_graph, homogeneous(2), ["greedy-stream"], options={"greedy-stream": {"max_imbalance": 0.5}},
                  isolate=False)
    assert res["rows"][0]["status"].startswith("not run:")
    headers, rows = comparison_table(res)
    assert rows[0][1].startswith("not run:")


def test_generic_partitioner_option(tiny_dataset, tmp_path):
    from typer.testing import CliRunner

    from cli.main import app
    from gmp.manifest import load_manifest

    out = tmp_path / "gs"
    r = CliRunner().invoke(app, ["partition", str(tiny_dataset), "--workers", "2", "--method", "greedy-stream",
                                 "-O", "order=dataset", "--option", "max_imbalance=1.5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    opts = load_manifest(out).meta["partitioner"]["options"]
    assert opts["order"] == "dataset" and opts["max_imbalance"] == 1.5
    r = CliRunner().invoke(app, ["partition", str(tiny_dataset), "--workers", "2", "--method", "random",
                                 "-O", "nonsense", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "expected KEY=VALUE" in r.output


@pytest.fixture(scope="module")
def synth_day(tmp_path_factory) -> Path:
    """A small criteo-kaggle day (5,000 samples): hybrid's multilevel start and its sweeps run on it."""
    out = tmp_path_factory.mktemp("day") / "d"
    res = invoke("data", "synth", "--preset", "criteo-kaggle", "-n", 5000, "--scale", 0.01, "--out", out)
    assert res.exit_code == 0, res.output
    return out


def test_the_option_example_of_the_help_runs_with_the_default_method(synth_day, tmp_path):
    """The -O example in ``gmp partition --help`` (it was -O order=dataset -O max_pairs=8000000, which every
    method refused) runs as shown, and each of its options changes the default method's placement."""
    import re

    help_text = runner.invoke(app, ["partition", "--help"], env={"COLUMNS": "400"}).output
    line = next(ln for ln in help_text.splitlines() if "--option" in ln)
    example = re.search(r"e\.g\. ((?:-O \S+ ?)+)", line).group(1).split()
    assert example[::2] == ["-O"] * (len(example) // 2) and len(example) >= 4, example
    sha = {}
    for name, extra in (("default", []), ("first", example[:2]), ("example", example)):
        res = invoke("partition", synth_day, "-w", 2, "--no-plots", "--out", tmp_path / name, *extra)
        assert res.exit_code == 0, res.output
        sha[name] = load_manifest(tmp_path / name).meta["placement_sha256"]
    assert len(set(sha.values())) == 3, sha  # neither option is ignored


def test_an_option_given_twice_is_refused(tiny_dataset, tmp_path):
    """``-O rounds=3 -O rounds=4`` kept the last silently (``--rounds 4 -O rounds=3`` was refused)."""
    res = invoke("partition", tiny_dataset, "-w", 2, "-O", "rounds=3", "-O", "rounds=4", "--out", tmp_path / "p")
    assert res.exit_code == 2 and not (tmp_path / "p").exists()
    assert res.stderr.strip() == "error: -O rounds is given twice (-O rounds=3 and -O rounds=4); give it once."


@pytest.mark.parametrize("sig,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_says_nothing_was_written_and_leaves_nothing(synth_day, tmp_path, sig, code):
    """Ctrl-C during ``gmp partition`` exited 130 without a word; it says so in one line, naming --out, of which
    nothing is on disk (nor its lock or a temporary). The sweeps run until the signal (tol 0, a million rounds):
    it is sent once a round was logged, so the partitioning is under way. SIGTERM (``kill``, a job scheduler)
    killed the process where it stood, leaving the lock file; it now ends as Ctrl-C does, exit code 143."""
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "p"
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "-v", "partition", str(synth_day), "-w", "2",
                             "--no-plots", "--rounds", "1000000", "--tol", "0", "-O", "levels=1", "--out", str(out)],
                            cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal
    try:
        said = []
        for line in proc.stderr:  # wait for the marker: the sweeps' first round
            said.append(line)
            if "round 1:" in line:
                break
        assert proc.poll() is None, "".join(said)[-2000:]  # still partitioning
        proc.send_signal(getattr(signal, sig))
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, rest[-2000:]
    assert rest.strip().splitlines()[-1:] == [f"error: interrupted; nothing written to {out}."], rest[-2000:]
    assert "Traceback" not in rest and sorted(os.listdir(tmp_path)) == []


def test_the_options_named_as_flags_are_the_partition_commands_flags():
    """Errors and the report name a partitioner option by its flag only where `gmp partition` has one
    (they named --order, --per-field, ... that do not exist); every 'Partitioner option:' flag is listed."""
    import typer

    from cli.main import app
    from gmp.params import OPTION_FLAGS

    cmd = typer.main.get_command(app).commands["partition"]
    option_flags = {p.name for p in cmd.params if "Partitioner option" in (getattr(p, "help", None) or "")}
    assert option_flags == set(OPTION_FLAGS)


def test_timed_run_counts_numba_compilation_apart():
    """gmp compare's rows time the first-run compilation apart: a kernel compiled inside the timed call
    is counted, the same kernel called again (compiled) is not."""
    import numba

    from gmp.compare import timed_run

    @numba.njit(cache=False)
    def add_one(x):
        return x + 1

    out, seconds, compiled = timed_run(lambda: add_one(1))
    assert out == 2 and 0.0 < compiled <= seconds
    out, seconds, compiled = timed_run(lambda: add_one(2))
    assert out == 3 and compiled == 0.0


@pytest.mark.parametrize("args, pattern", [
    (["-m", "random", "-O", 'field_offsets="x"'], r"random: field_offsets must be a list of ids"),
    (["-m", "random", "-O", "field_offsets=[0, true]"], r"random: field_offsets must be a list of ids"),
    (["-m", "hybrid", "--memory-per-worker", "99999999999999999999999GiB"], r"memory_per_worker must be .* below 2\^63"),
    (["-m", "kaminpar", "-O", "kaminpar_imbalance=1.0"], r"kaminpar_imbalance must be a number > 1.0"),
    (["-m", "hybrid", "-O", "replication_budget=true"], r"replication_budget must be a fraction in \[0, 1\], got True"),
    (["--topology", "2x1", "--inter-cost", "1e308"], r"--inter-cost 1e\+308 is above 1e\+12"),
])
def test_values_that_passed_validation_are_one_line_errors(tiny_dataset, tmp_path, args, pattern):
    """Each of these ran into a traceback (or, for the bools and 1e308, wrote what gmp then could not read)."""
    from cli_helpers import one_line_error

    res = invoke("partition", tiny_dataset, *(["--workers", 2] if "--topology" not in args else []), *args,
                 "--no-plots", "--out", tmp_path / "o")
    one_line_error(res, pattern)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("machine_of, pattern", [
    (["a", "b"], "got text values"), ([1e12, 0], "got float64 values"),
    ([0.5, 1.7], "got float64 values"), ([True, False], "got true/false values"),
])
@pytest.mark.parametrize("command", ["partition", "compare"])
def test_topology_files_with_bad_machine_of_are_one_line_errors(tiny_dataset, tmp_path, command, machine_of, pattern):
    from cli_helpers import one_line_error

    topo = tmp_path / "t.json"
    topo.write_text(json.dumps({"cost": [[0, 1], [1, 0]], "machine_of": machine_of}))
    out = ["--no-plots", "--out", tmp_path / "o"] if command == "partition" else []
    res = invoke(command, tiny_dataset, "--topology-file", topo, *out)
    one_line_error(res, r"machine_of must hold integer machine indices, " + pattern)


def test_a_huge_max_imbalance_is_no_cap_and_is_recorded(tiny_dataset, tmp_path):
    """1e300 overflowed (greedy-stream, metis, ...) or sized a table past memory (hybrid): now no cap."""
    res = invoke("partition", tiny_dataset, "--workers", 2, "-m", "greedy-stream", "--max-imbalance", "1e300",
                 "--no-plots", "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    assert load_manifest(tmp_path / "o").meta["partitioner"]["options"]["max_imbalance"] == 1e300


def test_threads_is_a_one_line_deprecation_notice(tiny_dataset, tmp_path):
    """--threads printed Python's FutureWarning with its source file and the line 'return options_cls(**options)'."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "cli.main", "partition", str(tiny_dataset), "--workers", "2",
                          "--threads", "2", "--no-plots", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert res.returncode == 0, res.stderr
    notices = [line for line in res.stderr.splitlines() if "threads" in line]
    assert notices == ["warning: hybrid: the 'threads' option is deprecated and does nothing (the sweeps are "
                       "sequential); drop it. It will be removed in a later version."], res.stderr
    assert "FutureWarning" not in res.stderr and "options_cls" not in res.stderr
    help_text = " ".join(invoke("partition", "--help").output.replace("│", " ").split())
    assert "for hybrid deprecated, does nothing" in help_text
