"""One front door (gmp.specs): the CLI and the Python API resolve a request the same way and give the
same run; defaults that work (a tiered table's cache, torchrun); the train and simulate summaries."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import gmp
from cli.main import app
from gmp.datasets.format import load_dataset
from gmp.manifest import write_manifest
from gmp.placement import Placement
from gmp.specs import DEFAULT, PLAN, TORCHRUN, USER, resolve_train
from gmp.topology import homogeneous
from train_data import make_ctr_dataset

PLANNED = {"batch_size": 16, "embedding_dim": 8}  # unlike the defaults (512, 16)


def planned_manifest(root, ds, n, *, seed=0, plan=PLANNED):
    rng = np.random.default_rng(seed)
    pl = Placement.edge_cut(n, rng.integers(0, n, ds.num_samples), rng.integers(0, n, ds.num_embeddings),
                            method="test")
    out = root / f"m{n}"
    write_manifest(out, pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples, num_embeddings=ds.num_embeddings,
                   topology=homogeneous(n), metrics=dict(plan))
    return out, pl


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    root = tmp_path_factory.mktemp("specs")
    path = make_ctr_dataset(root / "ds", num_samples=300, field_sizes=(30, 20, 10), seed=1)
    man, pl = planned_manifest(root, load_dataset(path), 2)
    return path, man, pl


def cli(*args):
    return CliRunner().invoke(app, [*map(str, args)])


def log(path):
    """The records of a JSON training log, without its ``settings`` lines (:func:`settings_of`)."""
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] != "settings"]


def settings_of(path):
    """The ``"kind": "settings"`` lines of a JSON training log (one per start of a run)."""
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "settings"]


def same_run(a: dict, b: dict) -> None:
    for key in ("train_loss", "test_logloss", "test_auc", "bytes", "steps", "samples", "remote_rows_read"):
        assert a[key] == b[key], key


def test_train_api_and_cli_use_the_manifests_plan(planned, tmp_path):
    """gmp.train_model trained at the default batch whatever the manifest planned (logloss 0.4377 by the API,
    0.4243 by the CLI on the issue's data): both now train at the plan, as an explicit --batch-size would."""
    path, man, _ = planned
    api = gmp.train_model(path, man, epochs=1, seed=0, log_json=tmp_path / "api.jsonl")
    res = cli("train", path, "--manifest", man, "--log-json", tmp_path / "cli.jsonl")
    assert res.exit_code == 0, res.output
    res = cli("train", path, "--manifest", man, "--batch-size", 16, "--embedding-dim", 8,
              "--log-json", tmp_path / "explicit.jsonl")
    assert res.exit_code == 0, res.output
    (by_cli,), (explicit,) = log(tmp_path / "cli.jsonl"), log(tmp_path / "explicit.jsonl")
    same_run(api[-1], by_cli)
    same_run(api[-1], explicit)
    num_train = load_dataset(path).num_train
    assert api[-1]["samples"] == num_train and api[-1]["steps"] >= num_train // (2 * 16)  # not one step of 512
    # the log's first line: the resolved settings and where each came from, the same request by both doors
    (by_api,), (said,) = settings_of(tmp_path / "api.jsonl"), settings_of(tmp_path / "cli.jsonl")
    assert (said["epoch"], said["step"], said["run"]) == (0, 0, by_cli["run"])
    assert said["settings"]["config"] == by_api["settings"]["config"]
    assert (said["settings"]["config"]["batch_size"], said["settings"]["config"]["embedding_dim"]) == (16, 8)
    assert said["settings"]["sources"]["batch_size"] == by_api["settings"]["sources"]["batch_size"] == PLAN
    assert said["settings"]["sources"]["epochs"] == DEFAULT and by_api["settings"]["sources"]["epochs"] == USER
    assert json.loads((tmp_path / "explicit.jsonl").read_text().splitlines()[0])["settings"]["sources"][
        "batch_size"] == USER


def test_the_spec_says_where_each_value_came_from(planned):
    path, man, _ = planned
    spec = resolve_train(path, man, embedding_dim=4, environ={})
    assert (spec.config.batch_size, spec.config.embedding_dim) == (16, 4)
    assert spec.sources["batch_size"] == PLAN and spec.sources["embedding_dim"] == USER
    assert spec.sources["model"] == DEFAULT and spec.sources["engine"] == DEFAULT and spec.engine == "local"
    assert spec.warnings and "embedding_dim 4 (planned 8)" in spec.warnings[0]
    assert "batch_size 16 (manifest plan)" in spec.described()


def test_herald_with_a_host_tier_is_the_same_run_from_python_and_the_cli(planned, tmp_path):
    """gmp.train_model(cache_rows=...) gave the whole cache to Herald and took no tier keywords; the one device
    cache is now split as gmp train splits it (Herald's copies keep half)."""
    path, man, _ = planned
    opts = dict(schedule="herald", table_location="host", cache_rows=80, on_demand=True)
    api = gmp.train_model(path, man, epochs=1, seed=0, **opts)
    res = cli("train", path, "--manifest", man, "--schedule", "herald", "--table-location", "host", "--cache-rows", 80,
              "--on-demand", "--log-json", tmp_path / "h.jsonl")
    assert res.exit_code == 0, res.output
    (by_cli,) = log(tmp_path / "h.jsonl")
    same_run(api[-1], by_cli)
    untimed = lambda d: {k: v for k, v in d.items() if "seconds" not in k and k != "peak_rss_bytes"}
    assert api[-1]["herald"] == by_cli["herald"] and untimed(api[-1]["tiers"]) == untimed(by_cli["tiers"])
    spec = resolve_train(path, man, environ={}, **opts)
    assert (spec.config.tiers.cache_rows, spec.config.herald.cache_rows) == (40, 40)


def test_simulate_api_and_cli_use_the_plans_embedding_dim(planned):
    """gmp.simulate_epoch applied the plan's batch size but not its embedding dim (bytes at 16 floats a row)."""
    path, man, _ = planned
    api = gmp.simulate_epoch(path, man).to_json()
    res = cli("simulate", path, "--manifest", man, "--json")
    assert res.exit_code == 0, res.output
    by_cli = json.loads(res.stdout)
    drop = lambda d: {k: v for k, v in d.items() if k not in ("wall_s", "schedule_ms_per_batch")}
    assert drop(api) == drop(by_cli)
    assert api["embedding_dim"] == 8 and api["rows_pulled_bytes"] == api["pulls"] * 8 * 4


def test_simulate_prints_the_naive_baseline_and_its_defaults_unlike_train(planned):
    path, man, _ = planned
    res = cli("simulate", path, "--manifest", man)
    assert res.exit_code == 0, res.output
    assert "naive (baseline" in res.stdout
    naive = json.loads(cli("simulate", path, "--manifest", man, "--schedule", "naive", "--json").stdout)
    row = next(line for line in res.stdout.splitlines() if line.strip("│ ").startswith("pulls "))
    assert f"{naive['pulls']:,}" in row
    line = next(x for x in res.stderr.splitlines() if x.startswith("defaults unlike gmp train's"))
    assert "--schedule herald (gmp train: --schedule static)" in line and "--on-demand (gmp train: --no-on-demand)" \
        in line and "--writable-replicas (gmp train: --read-only-replicas)" in line
    assert res.stderr.strip().splitlines()[-1].startswith("simulated 1 epoch of ")
    given = cli("simulate", path, "--manifest", man, "--on-demand")
    assert "--on-demand (gmp train" not in given.stderr  # a setting the person gave is theirs, not a default


def largest_step_by_hand(ds, pl, batch_size, epochs, seed=0):
    """Per step of the static schedule: the union of every worker's batch, its rows counted per primary worker."""
    from gmp.train.schedule import StaticSchedule

    sched = StaticSchedule(pl, ds.num_train, batch_size, seed=seed)
    most = 0
    for e in range(epochs):
        for step in sched.steps(e):
            ids = set()
            for part in step.samples:
                for s in part:
                    ids.update(int(i) for i in ds.indices[ds.indptr[s]:ds.indptr[s + 1]])
            per = np.bincount(pl.embedding_primary[sorted(ids)], minlength=pl.num_workers) if ids else [0]
            most = max(most, int(np.max(per)))
    return most


@pytest.mark.parametrize("location", ["host", "disk"])
def test_a_tiered_tables_default_cache_holds_the_largest_step(tmp_path, location):
    """'gmp train --table-location host' with the default cache refused a 1,000-sample dataset ('a step uses 343
    distinct rows but the cache holds 46'): the default now holds the run's largest step."""
    path = make_ctr_dataset(tmp_path / "ds", num_samples=1000, field_sizes=(200, 150, 100), seed=2)
    ds = load_dataset(path)
    man, pl = planned_manifest(tmp_path, ds, 2, plan={"batch_size": None, "embedding_dim": None})
    res = cli("train", path, "--manifest", man, "--table-location", location, "--epochs", 2,
              "--log-json", tmp_path / "t.jsonl")
    assert res.exit_code == 0, res.output
    spec = resolve_train(path, man, table_location=location, epochs=2, environ={})
    percent = -(-int(np.bincount(pl.embedding_primary).max()) * 10 // 100)
    step = largest_step_by_hand(ds, pl, 512, 2)
    assert step > percent  # the case the 10% default refused
    assert spec.config.tiers.cache_rows == step and spec.cache.largest_step == step
    assert "cache_rows" in spec.described() and "largest step" in spec.sources["cache_rows"]
    assert "settings: " in res.stderr and "cache_rows " + str(step) in res.stderr
    summary = res.stderr.strip().splitlines()[-1]
    assert "MB per step (embedding" in summary and "dense all-reduce" in summary and "cache hit rate" in summary


def test_a_cache_too_small_names_the_flag(planned):
    path, man, _ = planned
    res = cli("train", path, "--manifest", man, "--table-location", "host", "--cache-rows", 2)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "raise --cache-rows to at least" in lines[-1]
    with pytest.raises(gmp.errors.TrainingError, match="raise cache_rows to at least"):
        gmp.train_model(path, man, table_location="host", cache_rows=2)


def test_torchrun_picks_the_distributed_engine_and_refuses_local_copies(planned):
    path, man, _ = planned
    spec = resolve_train(path, man, environ={"WORLD_SIZE": "2"})
    assert spec.engine == "distributed" and spec.sources["engine"] == TORCHRUN
    with pytest.raises(gmp.errors.TrainingError, match="'engine' parameter is 'local' under torchrun"):
        resolve_train(path, man, engine="local", environ={"WORLD_SIZE": "2"})


def test_partition_under_torchrun_without_distributed_refuses(planned, monkeypatch, tmp_path):
    path, _, _ = planned
    monkeypatch.setenv("WORLD_SIZE", "2")
    res = cli("partition", path, "--workers", 2, "--out", tmp_path / "p")
    assert res.exit_code == 2 and not (tmp_path / "p").exists()
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--distributed" in lines[0]


def test_hidden_sets_the_dense_layers(planned, tmp_path):
    path, man, _ = planned
    assert resolve_train(path, man, hidden="32,16,8", environ={}).config.hidden == (32, 16, 8)
    assert resolve_train(path, man, environ={}).config.hidden == (128, 64)
    res = cli("train", path, "--manifest", man, "--hidden", "12,6", "--checkpoint-dir", tmp_path / "ck")
    assert res.exit_code == 0, res.output
    from gmp.train.checkpoint import read_checkpoint_header

    assert read_checkpoint_header(tmp_path / "ck")["config"]["hidden"] == [12, 6]
    bad = cli("train", path, "--manifest", man, "--hidden", "a,b")
    assert bad.exit_code == 2 and "--hidden must be comma-separated" in bad.output
    resumed = cli("train", path, "--manifest", man, "--hidden", "12,6", "--checkpoint-dir", tmp_path / "ck",
                  "--resume", "--epochs", 2)
    assert resumed.exit_code == 0, resumed.output
    assert "resumed after epoch 1" in resumed.stderr.strip().splitlines()[-1]


@pytest.mark.distributed
@pytest.mark.slow
def test_train_under_torchrun_without_engine_trains_once_distributed(planned, tmp_path):
    """'torchrun --nproc-per-node 2 ... gmp train DATA --manifest M' without --engine: one run (one run id in
    the log), on the distributed engine; it ran the whole local run once per process (two runs)."""
    from test_train_distributed import torchrun

    path, man, _ = planned
    res = torchrun(2, ["-m", "cli.main", "train", str(path), "--manifest", str(man), "--log-json",
                       str(tmp_path / "d.jsonl")])
    assert res.returncode == 0, res.stderr[-3000:]
    records = log(tmp_path / "d.jsonl")
    assert len({r["run"] for r in records}) == 1 and [r["engine"] for r in records] == ["distributed"]
    assert res.stderr.count("one run on the distributed engine") == 1


# ----------------------------------------------------------------------------------- partition / report / compare
def test_a_partition_request_resolves_each_mode_and_says_where_each_value_came_from(planned):
    from gmp.specs import resolve_partition

    path, man, _ = planned
    spec = resolve_partition(path, "random", workers=3, environ={})
    assert (spec.mode, spec.method, spec.topology.num_workers, spec.seed) == ("scratch", "random", 3, 0)
    assert (spec.batch_size, spec.embedding_dim) == (512, 16)
    assert spec.out == Path("placements") / f"{Path(path).name}.random.w3"
    assert {spec.sources[k] for k in ("seed", "batch_size", "embedding_dim", "inter_cost", "out")} == {DEFAULT}
    assert spec.sources["method"] == USER and "method" not in spec.described()
    plain = resolve_partition(path, workers=3, environ={})  # no method: gmp's own, said in the settings line
    assert (plain.mode, plain.method, plain.sources["method"]) == ("scratch", "hybrid", DEFAULT)
    assert plain.out.name == f"{Path(path).name}.hybrid.w3" and "method hybrid (default)" in plain.described()
    new = resolve_partition(path, from_manifest=man, max_moved_rows="5%", embedding_dim=4, environ={})
    assert (new.mode, new.method, new.batch_size, new.embedding_dim) == ("incremental", "incremental", 16, 4)
    assert new.sources["batch_size"] == PLAN and new.sources["embedding_dim"] == USER
    assert new.out.name == f"{Path(path).name}.incremental.w2" and new.topology is None
    assert new.warnings and "embedding_dim 4 (planned 8)" in new.warnings[0]
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    dist = resolve_partition(path, workers=4, distributed=True, environ=env)
    assert (dist.mode, dist.method, dist.block_samples, dist.sources["block_samples"]) == \
        ("distributed", "hybrid", 1024, DEFAULT)


@pytest.mark.parametrize("kwargs, library, command", [
    (dict(method="random", workers=2, inter_cost=3.0), "`inter_cost` sets the cost between the machines of "
     "`topology=MxG`", "--inter-cost sets the cost between the machines of --topology MxG"),
    (dict(workers=2, distributed=True), "`distributed` needs RANK and WORLD_SIZE", "--distributed needs RANK"),
    (dict(method="random", workers=2, window=2), "`max_moved_rows`, `compare_full` and `window` need "
     "`from_manifest=OLD_MANIFEST`", "--max-moved-rows, --compare-full and --window need --from-manifest "
     "OLD_MANIFEST"),
    (dict(method="hybrid", workers=2, distributed=False, block_samples=64), "`block_samples` sets the blocks of "
     "`distributed`", "--block-samples sets the blocks of --distributed"),
])
def test_partition_refusals_name_the_parameter_and_the_command_its_flag(planned, kwargs, library, command):
    from gmp.errors import PartitionError
    from gmp.specs import resolve_partition

    path, _, _ = planned
    with pytest.raises(PartitionError) as exc:
        resolve_partition(path, environ={}, **kwargs)
    assert library in str(exc.value) and "--" not in str(exc.value).split(";")[0]
    from cli._flags import flags_for_params

    with pytest.raises(PartitionError, match=command.replace("-", "\\-")):
        with flags_for_params():
            resolve_partition(path, environ={}, **kwargs)


def test_a_placement_is_planned_only_for_a_batch_gmp_train_takes(planned, tmp_path):
    """``gmp partition --batch-size 10**12`` was accepted and its manifest then refused by ``gmp train`` (which
    the person never gave the flag); every door that plans or scores a placement bounds the batch as the trainer
    does, in the trainer's words (one bound: gmp.constants.MAX_BATCH_SIZE)."""
    from gmp.constants import MAX_BATCH_SIZE
    from gmp.errors import GmpError
    from gmp.specs import resolve_compare, resolve_partition, resolve_report
    from gmp.train.config import TrainConfig

    path, man, _ = planned
    with pytest.raises(GmpError) as trained:
        TrainConfig(batch_size=MAX_BATCH_SIZE + 1)
    said = str(trained.value)
    assert said == f"The 'batch_size' parameter must be an int >= 1 and <= {MAX_BATCH_SIZE}, got {MAX_BATCH_SIZE + 1}."
    for resolve in (lambda b: resolve_partition(path, "random", workers=2, batch_size=b, environ={}),
                    lambda b: resolve_partition(path, from_manifest=man, batch_size=b, environ={}),
                    lambda b: resolve_report(man, dataset=path, batch_size=b),
                    lambda b: resolve_compare(path, "random", workers=2, batch_size=b)):
        with pytest.raises(GmpError) as refused:
            resolve(MAX_BATCH_SIZE + 1)
        assert str(refused.value) == said
        resolve(MAX_BATCH_SIZE)  # the bound itself is taken
    res = cli("partition", path, "-w", 2, "-m", "random", "--batch-size", 10**12, "--out", tmp_path / "pb")
    assert res.exit_code == 2 and not (tmp_path / "pb").exists()
    assert res.stderr.strip() == f"error: --batch-size must be an int >= 1 and <= {MAX_BATCH_SIZE}, got {10**12}."


#: a value other than the default of each incremental option that only the re-partition reads
REPARTITION_ONLY = {"rounds": 1, "sweep": "all", "sweep_first": True, "beta": 5.0, "replication_budget": 0.5,
                    "target": "none", "alongside": False}


def test_the_options_only_the_repartition_reads_need_max_moved_rows(planned, tmp_path):
    """``from_manifest`` without ``max_moved_rows`` places the new data only: an option only the re-partition
    reads (``--rounds 1``) was ignored there but recorded in the manifest as used; it is refused in one line
    that names the flag making it apply. The placement's own options are taken, and with a budget all are."""
    from gmp.errors import PartitionError
    from gmp.partition.incremental import Options
    from gmp.specs import PLACEMENT_OPTIONS, resolve_partition

    path, man, _ = planned
    assert set(PLACEMENT_OPTIONS) | set(REPARTITION_ONLY) == set(Options.__dataclass_fields__)  # every option sorted
    with pytest.raises(PartitionError, match=r"^the incremental option 'rounds' applies only to the re-partition "
                                             r"that `max_moved_rows` asks for; .*add `max_moved_rows=N`"):
        resolve_partition(path, from_manifest=man, options={"rounds": 1}, environ={})
    with pytest.raises(PartitionError, match=r"options 'beta' and 'sweep' apply only"):
        resolve_partition(path, from_manifest=man, options={"sweep": "all", "beta": 1.0, "order": "dataset"},
                          environ={})
    resolve_partition(path, from_manifest=man, options=REPARTITION_ONLY, max_moved_rows="5%", environ={})
    resolve_partition(path, from_manifest=man, options={"order": "dataset", "start": "project", "alpha": 2.0,
                                                        "carry_private": False, "max_imbalance": 1.2}, environ={})
    res = cli("partition", path, "--from-manifest", man, "--rounds", 1, "--out", tmp_path / "r1", "--no-plots")
    assert res.exit_code == 2 and not (tmp_path / "r1").exists()
    assert res.stderr.strip().startswith("error: the incremental option 'rounds' applies only to the re-partition "
                                         "that --max-moved-rows asks for;") and "--max-moved-rows N" in res.stderr
    assert "\n" not in res.stderr.strip()


@pytest.mark.parametrize("key", sorted(REPARTITION_ONLY))
def test_placing_new_data_reads_none_of_the_options_refused_without_a_budget(planned, key):
    """The guard of :data:`gmp.specs.PLACEMENT_OPTIONS`: each option refused without ``max_moved_rows`` leaves
    :func:`place_new_data`'s placement as it is (should the placement start reading one, this fails)."""
    from gmp.graph import build_graph
    from gmp.manifest import load_manifest
    from gmp.partition.incremental import Options, place_new_data

    path, man, _ = planned
    old = load_manifest(man)
    graph = build_graph(load_dataset(path))
    base = place_new_data(graph, old.placement, old.topology, seed=1, options=Options())
    other = place_new_data(graph, old.placement, old.topology, seed=1, options=Options(**{key: REPARTITION_ONLY[key]}))
    for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
        assert np.array_equal(getattr(base, name), getattr(other, name)), name


def test_report_and_compare_requests_are_checked_once_for_both_doors(planned, tmp_path):
    from gmp.errors import ManifestError, PartitionError
    from gmp.specs import DEFAULT as D, resolve_compare, resolve_report

    path, man, _ = planned
    with pytest.raises(ManifestError, match="`format` 'pdf' not understood"):
        gmp.make_report(man, formats=("pdf",))
    res = cli("report", man, "--format", "pdf")
    assert res.exit_code == 2 and "--format 'pdf' not understood" in res.output
    spec = resolve_compare(path, "random,hybrid", workers=2)
    assert spec.methods == ("random", "hybrid") and spec.topology.num_workers == 2
    assert (spec.seed, spec.batch_size, spec.embedding_dim) == (0, 512, 16) and spec.sources.pop("methods") == USER
    assert set(spec.sources.values()) == {D}
    plain = resolve_compare(path, workers=2)  # no methods: the reference, the classic peer and gmp's own
    assert plain.methods == ("random", "metis", "hybrid") and plain.sources["methods"] == D
    with pytest.raises(PartitionError, match="`out` x.txt: expected a .md, .json or .html file name"):
        resolve_compare(path, "random", workers=2, out="x.txt")
    assert resolve_report(man, batch_size=8).sources["batch_size"] == USER


# ------------------------------------------------------------------ import (resolve_import)
def _recognisable_csv(path: Path) -> Path:
    """A csv with a header whose label (``click``, the only 0/1 column) and dense column (``price``, numeric,
    many values) are left for recognition to find."""
    rng = np.random.default_rng(5)
    lines = ["click,user,item,price"]
    for i in range(300):
        lines.append(f"{int(rng.random() < 0.3)},u{rng.integers(40)},i{rng.integers(25)},{rng.random() * 100:.3f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_import_with_recognition_is_the_same_dataset_from_python_and_the_cli(tmp_path):
    src = _recognisable_csv(tmp_path / "clicks.csv")
    r = CliRunner().invoke(app, ["data", "import", str(src), "--out", str(tmp_path / "cli"), "--min-count", "2"])
    assert r.exit_code == 0, r.output
    assert "recognised" in r.output
    ds = gmp.import_dataset(None, src, tmp_path / "api", min_count=2)  # the format, label and dense recognised
    by_cli = json.loads((tmp_path / "cli" / "dataset.json").read_text())
    by_api = json.loads((tmp_path / "api" / "dataset.json").read_text())
    assert by_api["sha256"] == by_cli["sha256"]
    kinds = {f["name"]: f["kind"] for f in by_api["fields"]}
    assert kinds == {"user": "categorical", "item": "categorical", "price": "dense"}  # click: the label
    assert ds.num_samples == 300


def test_resolve_import_names_the_parameter_and_the_cli_the_flag(tmp_path):
    from gmp.datasets.dispatch import ColumnChoice
    from gmp.errors import ImportDataError
    from gmp.specs import RECOGNISED, resolve_import

    src = _recognisable_csv(tmp_path / "clicks.csv")
    spec = resolve_import(None, [src], tmp_path / "out")
    assert (spec.format, spec.sources["format"], spec.sources["label"]) == ("csv", RECOGNISED, RECOGNISED)
    assert spec.format_options["options"].label == "click"
    with pytest.raises(ImportDataError, match=r"^`split_hour=False` does not apply to format 'csv'"):
        resolve_import(None, [src], tmp_path / "out", split_hour=False)
    with pytest.raises(ImportDataError, match=r"`test_fraction` and `test_inputs` both choose"):
        resolve_import("csv", [src], tmp_path / "out", test_inputs=[tmp_path / "t.csv"], test_fraction=0.2,
                       columns=ColumnChoice(label="click"))
    r = CliRunner().invoke(app, ["data", "import", str(src), "--out", str(tmp_path / "o"), "--no-split-hour"])
    assert r.exit_code == 2 and "error: --no-split-hour does not apply to format 'csv'" in r.output


def test_compare_is_one_request_from_python_and_the_cli_each_method_in_its_own_process(planned, tmp_path):
    """One default for ``isolate`` (the command's, True, which docs/report.md documents): before issue 34's
    item 6 ``gmp.compare_partitioners`` ran the methods in its own process (``isolate=False``), so its peak RSS
    column was this process's high-water mark where ``gmp compare``'s was each method's own."""
    from gmp._io import json_default
    from gmp.specs import resolve_compare

    path, _, _ = planned
    assert resolve_compare(path, "random", workers=2).isolate is True
    assert resolve_compare(path, "random", workers=2).sources["isolate"] == DEFAULT
    api = gmp.compare_partitioners(path, ["random"], workers=2, batch_size=16)
    out = tmp_path / "cmp.json"
    res = cli("compare", path, "--methods", "random", "--workers", 2, "--batch-size", 16, "--out", out)
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    assert [r["rss_kind"] for r in api["rows"]] == [r["rss_kind"] for r in got["rows"]] == ["child process peak"]
    api = json.loads(json.dumps(api, default=json_default))  # as the command wrote it
    assert api["settings"] == got["settings"]
    measured = ("partition_seconds", "peak_rss_bytes")  # of the run, not of the request
    assert ([{k: v for k, v in r["metrics"].items() if k not in measured} for r in api["rows"]]
            == [{k: v for k, v in r["metrics"].items() if k not in measured} for r in got["rows"]])


def test_an_unguarded_script_gets_one_error_not_rows_of_dead_processes(planned, tmp_path):
    """With ``isolate`` on by default a spawned child imports the caller's script again; a script that calls
    the comparison at its top level (no ``if __name__ == "__main__":``) made every child start it anew and die,
    which the parent reported as rows "not run: process exited with code 1" under a multiprocessing
    traceback. Now the child exits at once and the parent raises one error that names the fix; the same
    script guarded runs."""
    import subprocess
    import sys

    path, _, _ = planned
    call = f"gmp.compare_partitioners({str(path)!r}, ['random'], workers=2, batch_size=16)"
    env = dict(os.environ, PYTHONPATH=str(Path(gmp.__file__).resolve().parent.parent))
    script = tmp_path / "unguarded.py"
    script.write_text(f"import gmp\nprint([r['status'] for r in {call}['rows']])\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 1
    assert "not run" not in res.stdout + res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("gmp.errors.PartitionError: ")
    assert 'if __name__ == "__main__":' in res.stderr and "`isolate=False`" in res.stderr
    script.write_text(f"import gmp\nif __name__ == '__main__':\n    print([r['status'] for r in {call}['rows']])\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert (res.returncode, res.stdout.strip()) == (0, "['ok']"), res.stderr


def test_the_partition_summary_says_where_each_setting_came_from(planned, tmp_path):
    """``PartitionSpec.sources`` printed (issue 34): one ``settings:`` line names what the person did not give,
    with where it came from: the old manifest's plan, a default (the inter-machine cost of a MxG topology)."""
    path, man, _ = planned
    res = cli("partition", path, "--from-manifest", man, "--out", tmp_path / "new", "--no-plots")
    assert res.exit_code == 0, res.output
    said = [line for line in res.output.splitlines() if line.startswith("settings: ")]
    assert said == [f"settings: batch_size {PLANNED['batch_size']} ({PLAN}), embedding_dim "
                    f"{PLANNED['embedding_dim']} ({PLAN})"]
    res = cli("partition", path, "--method", "random", "--topology", "2x2", "--batch-size", 32, "--out",
              tmp_path / "mxg", "--no-plots")
    assert res.exit_code == 0, res.output
    said = [line for line in res.output.splitlines() if line.startswith("settings: ")]
    assert said == [f"settings: inter_cost 10.0 ({DEFAULT}), embedding_dim 16 ({DEFAULT})"]
    res = cli("partition", path, "--method", "random", "--workers", 2, "--batch-size", 32, "--embedding-dim", 8,
              "--out", tmp_path / "given", "--no-plots")
    assert res.exit_code == 0 and "settings: " not in res.output  # every setting given: nothing to say


def test_partition_report_and_export_are_the_same_from_python_and_the_cli(planned, tmp_path):
    """The other verbs of issue 34's one front door: a scratch partition (the same arrays and metrics), a report
    of it (the same report.md) and a TorchRec export of a manifest with a plan (the same plan.json, at the plan's
    batch and width) are one request whichever door it comes in by."""
    path, man, _ = planned
    timing = {"partition_seconds", "peak_rss_bytes"}

    api = gmp.partition_dataset(path, "greedy-stream", tmp_path / "pa", workers=3, seed=2, plots=False)
    res = cli("partition", path, "--method", "greedy-stream", "--workers", 3, "--seed", 2, "--out", tmp_path / "pc",
              "--no-plots")
    assert res.exit_code == 0, res.output
    made = gmp.load_manifest(tmp_path / "pc", dataset=path)
    for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
        assert np.array_equal(getattr(api.placement, name), getattr(made.placement, name)), name
    ma, mc = (json.loads((d / "report.json").read_text())["metrics"] for d in (tmp_path / "pa", tmp_path / "pc"))
    assert {k: v for k, v in ma.items() if k not in timing} == {k: v for k, v in mc.items() if k not in timing}

    gmp.make_report(tmp_path / "pa", dataset=path, batch_size=4, out=tmp_path / "ra", formats="md", plots=False)
    res = cli("report", tmp_path / "pa", "--dataset", path, "--batch-size", 4, "--out", tmp_path / "rc",
              "--format", "md", "--no-plots")
    assert res.exit_code == 0, res.output
    ra, rc = ((tmp_path / d / "report.md").read_text() for d in ("ra", "rc"))
    assert ra == rc

    gmp.export_torchrec(man, tmp_path / "ea", dataset=path)
    res = cli("export", "torchrec", man, "--dataset", path, "--out", tmp_path / "ec")
    assert res.exit_code == 0, res.output
    ea, ec = (json.loads((tmp_path / d / "plan.json").read_text()) for d in ("ea", "ec"))
    assert ea == ec
    assert (ea["embedding_dim"], ea["batch_size"]) == (PLANNED["embedding_dim"], PLANNED["batch_size"])


def largest_global_step(ds, pl, batch_size, epochs, seed=0):
    """Per epoch, the most rows one worker is primary of among the distinct rows of a global batch of the naive
    (and herald) schedule: what its tiered cache must hold for that step."""
    from gmp.train.schedule import NaiveSchedule

    naive = NaiveSchedule(pl.num_workers, ds.num_train, batch_size, seed=seed)
    out = []
    for e in epochs:
        most = 0
        for batch in naive.global_batches(e):
            ids = sorted({int(i) for s in batch for i in ds.indices[ds.indptr[s]:ds.indptr[s + 1]]})
            most = max(most, int(np.bincount(pl.embedding_primary[ids], minlength=pl.num_workers).max()))
        out.append(most)
    return out


def test_herald_options_given_whole_train_as_the_same_flat_keywords(planned):
    """train_model(herald=HeraldOptions(...)) was always refused ("'cache_policy' cannot be combined with herald"):
    resolve_train filled the cache policy itself. A HeraldOptions now gives the run its flat keywords give, and
    its defaults are gmp train's (the look-ahead policy), so the two cannot train differently."""
    from gmp.train.herald import HeraldOptions

    path, man, _ = planned
    assert HeraldOptions() == HeraldOptions.for_trainer()
    assert HeraldOptions().cache_policy == "lookahead" == HeraldOptions.for_trainer().cache_policy
    assert HeraldOptions.for_simulator("herald", 100).cache_policy == "lru"  # Herald's paper, gmp simulate
    flat = resolve_train(path, man, schedule="herald", on_demand=True, cache_rows=10, lookahead=2, environ={})
    whole = resolve_train(path, man, schedule="herald", environ={},
                          herald=HeraldOptions(on_demand=True, cache_rows=10, lookahead=2))
    assert whole.config == flat.config
    assert resolve_train(path, man, schedule="herald", herald=HeraldOptions(), environ={}).config == \
        resolve_train(path, man, schedule="herald", environ={}).config
    # a tiered table takes the object's window and eviction order; the flat cache size is then the tier's alone
    tiered = resolve_train(path, man, schedule="herald", table_location="host", cache_rows=300, environ={},
                           herald=HeraldOptions(cache_rows=10, lookahead=3, cache_policy="lru")).config
    assert (tiered.tiers.cache_rows, tiered.tiers.lookahead, tiered.tiers.cache_policy) == (300, 3, "lru")
    assert tiered.herald.cache_rows == 10
    with pytest.raises(gmp.errors.TrainingError, match="'lookahead' parameter cannot be combined with herald"):
        resolve_train(path, man, schedule="herald", table_location="host", lookahead=1, herald=HeraldOptions(),
                      environ={})


@pytest.mark.parametrize("staleness", [2, "inf"])
def test_at_s_above_0_cache_rows_sizes_the_tiered_cache_alone(planned, staleness):
    """Herald keeps no copies at s > 0, so a tiered table's --cache-rows is its cache's whole size; it used to
    give Herald half, which the s = 0 rule then refused (and every fix the messages named was refused too)."""
    path, man, _ = planned
    config = resolve_train(path, man, schedule="herald", staleness=staleness, table_location="host",
                           cache_rows=300, environ={}).config
    assert config.tiers.cache_rows == 300 and config.herald_options().cache_rows == 0
    res = cli("train", path, "--manifest", man, "--schedule", "herald", "--staleness", staleness,
              "--table-location", "host", "--cache-rows", 300, "--epochs", 1)
    assert res.exit_code == 0, res.output
    # on a device table --cache-rows is Herald's copies alone: refused at s > 0, in flags only
    res = cli("train", path, "--manifest", man, "--schedule", "herald", "--staleness", staleness, "--cache-rows", 5)
    err = res.stderr.strip().splitlines()[-1]
    assert res.exit_code == 2 and err.startswith("error: --staleness must be 0")
    assert "--cache-rows > 0" in err and "cache_rows" not in err and "on_demand" not in err


def test_cache_bytes_is_shared_with_herald_as_cache_rows_is(planned):
    """--cache-bytes B is the cache of B // row_bytes rows: with Herald at s = 0 it keeps half of them, as with
    --cache-rows (it used to keep none with --cache-bytes)."""
    path, man, _ = planned
    row_bytes = (PLANNED["embedding_dim"] + 1) * 2 * 4  # wdl: value + linear weight; Adagrad's sum; float32
    by_rows = resolve_train(path, man, schedule="herald", table_location="host", cache_rows=301, environ={}).config
    by_bytes = resolve_train(path, man, schedule="herald", table_location="host", cache_bytes=301 * row_bytes + 5,
                             environ={}).config
    assert by_bytes.row_bytes == row_bytes
    assert by_rows.herald.cache_rows == by_bytes.herald.cache_rows == 150
    assert by_rows.tiers.cache_rows == 151 and by_bytes.tiers.cache_bytes == 151 * row_bytes + 5
    assert by_bytes.tiers.capacity(1, row_bytes) == 151


def test_a_given_cache_is_checked_against_the_largest_step_of_the_run(tmp_path):
    """The advice used to cover only the running epoch, so a run given that size died in a later epoch: the
    size given is now checked against every epoch of the run before training, and the advice holds them all."""
    path = make_ctr_dataset(tmp_path / "ds", num_samples=600, field_sizes=(200, 150, 100), seed=2)
    ds = load_dataset(path)
    man, pl = planned_manifest(tmp_path, ds, 2)
    per_epoch = largest_global_step(ds, pl, 16, range(4))
    first, run = per_epoch[0], max(per_epoch)
    assert run > first  # a later epoch has a larger step: the case the epoch's advice missed
    for schedule, need in (("naive", run), ("herald", 2 * run - 1)):  # Herald's copies keep half of --cache-rows
        given = first if schedule == "naive" else 2 * first - 1  # what the epoch's advice said
        with pytest.raises(gmp.errors.TrainingError, match=rf"largest step of the run uses {run}; raise cache_rows "
                                                           rf"to at least {need}\b"):
            resolve_train(path, man, schedule=schedule, table_location="host", cache_rows=given, epochs=4,
                          environ={})
        assert resolve_train(path, man, schedule=schedule, table_location="host", cache_rows=need, epochs=4,
                             environ={}).config.tiers.cache_rows == run
        res = cli("train", path, "--manifest", man, "--schedule", schedule, "--table-location", "host",
                  "--cache-rows", given, "--epochs", 4)
        err = res.stderr.strip().splitlines()[-1]
        assert res.exit_code == 2 and f"raise --cache-rows to at least {need}" in err
        assert "TierOptions" not in err and "cache_rows" not in err
    row_bytes = (PLANNED["embedding_dim"] + 1) * 2 * 4
    with pytest.raises(gmp.errors.TrainingError, match=rf"raise cache_bytes to at least {run * row_bytes}\b"):
        resolve_train(path, man, schedule="naive", table_location="disk", cache_bytes=first * row_bytes, epochs=4,
                      environ={})


def test_a_herald_run_on_a_tier_resumes_with_another_cache_rows(tmp_path):
    """Herald's share of --cache-rows must match the checkpoint's, and with half of any --cache-rows going to Herald
    no value gave it the same share and the tier more rows: a resume keeps the checkpoint's share, the rest is
    the tier's."""
    path = make_ctr_dataset(tmp_path / "ds", num_samples=300, field_sizes=(30, 20, 10), seed=1)
    man, _ = planned_manifest(tmp_path, load_dataset(path), 2)
    flags = ["--schedule", "herald", "--on-demand", "--table-location", "host", "--checkpoint-dir", tmp_path / "ck"]
    first = cli("train", path, "--manifest", man, *flags, "--cache-rows", 201, "--epochs", 1)
    assert first.exit_code == 0, first.output
    spec = resolve_train(path, man, schedule="herald", on_demand=True, table_location="host", cache_rows=251,
                         epochs=2, checkpoint_dir=tmp_path / "ck", resume=True, environ={})
    assert (spec.config.herald.cache_rows, spec.config.tiers.cache_rows) == (100, 151)
    res = cli("train", path, "--manifest", man, *flags, "--cache-rows", 251, "--epochs", 2, "--resume")
    assert res.exit_code == 0, res.output
    assert "resumed after epoch 1" in res.stderr
