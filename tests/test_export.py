"""``gmp export torchrec``: the per-field remap, the plan, the statistics, the bytes, and TorchRec loading it."""

from __future__ import annotations

import json
import re
from collections import OrderedDict

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.format import load_dataset
from gmp.errors import ManifestError, PartitionError
from gmp.export.torchrec import export_torchrec, load_export, lru_miss_rates, remap_field, rank_order
from gmp.manifest import write_manifest
from gmp.placement import Placement
from gmp.topology import homogeneous
from torchrec_mark import needs_torchrec
from torchrun_helpers import free_port

runner = CliRunner()

# tiny_dataset (conftest): samples [[0,1],[1,2],[0,2],[3,4],[4,5],[2,3]], field A = ids 0-2, B = ids 3-5,
# the last third (samples 4, 5) is the test split.
SAMPLE_WORKER = [0, 0, 1, 1, 0, 1]
PRIMARY = [0, 0, 0, 1, 1, 1]  # field A all on worker 0, field B all on worker 1: the worst case for padding


@pytest.fixture
def manifest(tiny_dataset, tmp_path):
    ds = load_dataset(tiny_dataset)
    p = Placement.edge_cut(2, SAMPLE_WORKER, PRIMARY, method="hand", seed=0)
    p = p.with_secondaries([0, 1, 1, 1, 1, 1, 1], [1])  # id 0 also on worker 1
    return write_manifest(tmp_path / "m", p, dataset_sha256=ds.sha256, num_samples=6, num_embeddings=6,
                          topology=homogeneous(2), metrics={"batch_remote_reads": 3, "batch_remote_pushes": 4,
                                                            "batch_size": 2, "embedding_dim": 8})


def test_remap_field_known_answer():
    rows, block, count = remap_field(np.array([2, 0, 2, 1, 0, 2]), 3)
    assert block == 3 and count.tolist() == [2, 1, 3]
    # worker 0's ids (1, 4) -> rows 0, 1; worker 1's (3) -> 3; worker 2's (0, 2, 5) -> 6, 7, 8
    assert rows.tolist() == [6, 0, 7, 3, 1, 8]


def test_rank_order():
    indptr, samples = rank_order(np.array([1, 0, 1, 0, 1, 0]), 4, 2)
    assert indptr.tolist() == [0, 2, 4] and samples.tolist() == [1, 3, 0, 2]


def lru_brute_force(stream, capacity):
    cache, misses = OrderedDict(), 0
    for x in stream:
        if x in cache:
            cache.move_to_end(x)
        else:
            misses += 1
            cache[x] = True
            if len(cache) > capacity:
                cache.popitem(last=False)
    return misses / len(stream)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lru_miss_rates_match_a_brute_force_lru(seed):
    rng = np.random.default_rng(seed)
    stream = (rng.zipf(1.3, 3000) % 200).astype(np.int64)
    caps = [1, 5, 20, 100, 250]
    assert lru_miss_rates(stream, caps) == pytest.approx([lru_brute_force(stream.tolist(), c) for c in caps])


def test_export_plan(manifest, tiny_dataset, tmp_path):
    exp = export_torchrec(manifest, tmp_path / "x", dataset=tiny_dataset, embedding_dim=8, batch_size=2)
    plan = load_export(tmp_path / "x").plan
    assert plan["format"] == "gmp.torchrec_export" and plan["num_ranks"] == 2
    remap = exp.remap()
    by_name = {t["name"]: t for t in plan["tables"]}
    assert list(by_name) == ["t_A", "t_B"]
    for t in plan["tables"]:
        ids = np.arange(t["gmp_offset"], t["gmp_offset"] + t["num_values"])
        rows = remap[ids]
        assert len(set(rows.tolist())) == ids.size  # one row per id
        for e, row in zip(ids, rows):
            # rank r's row-wise block [r*B, (r+1)*B) holds exactly worker r's primaries
            assert row // t["block_rows"] == PRIMARY[e]
        assert t["num_embeddings"] == 2 * t["block_rows"] == t["num_values"] + t["padding_rows"]
        assert [s["row_offset"] for s in t["shards"]] == [0, t["block_rows"]]
    assert by_name["t_A"]["rows_per_rank"] == [3, 0] and by_name["t_A"]["padding_rows"] == 3
    # training samples 0-3: field A ids {0,1}, {1,2}, {0,2}, {}; field B {}, {}, {}, {3,4}
    assert by_name["t_A"]["pooling_factor"] == 1.5 and by_name["t_B"]["pooling_factor"] == 0.5
    assert plan["samples_per_rank"] == [2, 2] and exp.rank_samples(0).tolist() == [0, 1]
    assert exp.rank_samples(1).tolist() == [2, 3]
    assert plan["secondaries_dropped"] == 1
    # input all-to-all: training edges whose primary is not the sample's worker, counted by hand
    rows_ = [[0, 1], [1, 2], [0, 2], [3, 4]]
    remote = sum(PRIMARY[e] != SAMPLE_WORKER[s] for s, r in enumerate(rows_) for e in r)
    trec = plan["bytes_per_epoch"]["torchrec_row_wise"]
    assert trec["remote_ids"] == remote == 2 and trec["ids_bytes"] == 8 * remote
    assert trec["pooled_bytes"] == 2 * (2 - 1) * 4 * 2 * 8 * 4  # 2 x x samples x fields x dim x 4 B
    # natural id order: field A splits [0, 2) | [2, 3), field B [3, 5) | [5, 6)
    natural = lambda e: (e % 3) // 2  # noqa: E731
    remote_default = sum(natural(e) != SAMPLE_WORKER[s] for s, r in enumerate(rows_) for e in r)
    assert plan["bytes_per_epoch"]["torchrec_row_wise_default_ids"]["remote_ids"] == remote_default
    # gmp's row, from the placement itself (the manifest's stored metrics say 3 and 4 and are not read):
    # worker 0's batch {0,1},{1,2} reads and writes only its primaries; worker 1's {0,2},{3,4} reads row 2
    # (row 0 is its secondary) and pushes rows 0 and 2 -> 1 read, 2 pushes
    gmp_row = plan["bytes_per_epoch"]["gmp"]
    assert (gmp_row["rows_read"], gmp_row["rows_pushed"], gmp_row["batch_size"]) == (1, 2, 2)
    assert gmp_row["rows_bytes"] == (1 + 2) * 8 * 4
    assert any("secondaries" in line for line in plan["not_expressible"])
    assert any("staleness" in line for line in plan["not_expressible"])
    readme = (tmp_path / "x" / "README.md").read_text()
    assert "## What TorchRec cannot express" in readme and "## What needs a GPU" in readme
    assert "* Dropped: this placement's 1 secondary." in readme
    assert "on 2 ranks, 2 tables (one per field" in readme and ", 1 step per epoch" in readme
    assert "TorchRecExport" in repr(exp) and "on 2 ranks, 2 row-wise tables" in repr(exp)


def test_cache_statistics(manifest, tiny_dataset, tmp_path):
    plan = export_torchrec(manifest, tmp_path / "x", dataset=tiny_dataset, embedding_dim=8, batch_size=1,
                           load_factors=(0.5, 1.0)).plan
    a = {t["name"]: t for t in plan["tables"]}["t_A"]["cache"]
    # batch 1: steps (0: samples 0 and 2), (1: samples 1 and 3); field A ids: step 0 {0, 1, 0, 2} -> {0, 1, 2},
    # step 1 {1, 2} -> all on rank 0 (block 3); LRU of 1 row (0.5 * 3) then 3 rows
    stream = [0, 1, 2, 1, 2]
    assert a["miss_rates"] == pytest.approx([lru_brute_force(stream, 1), lru_brute_force(stream, 3)])
    assert a["expected_lookups"] == 2.5 and a["steps_simulated"] == 2


def test_export_cli(manifest, tiny_dataset, tmp_path):
    res = runner.invoke(app, ["export", "torchrec", str(manifest), "--dataset", str(tiny_dataset), "--out",
                              str(tmp_path / "e"), "--embedding-dim", "8"])
    assert res.exit_code == 0, res.output
    # "1 secondary" once cli/export.py words counts with gmp.wording.plural (test_export_ranges pins that)
    assert "2 row-wise tables on 2 ranks" in res.output and re.search(r"\b1 secondar(y|ies) dropped", res.output)
    assert json.loads((tmp_path / "e" / "plan.json").read_text())["embedding_dim"] == 8
    res = runner.invoke(app, ["export", "torchrec", str(manifest), "--out", str(tmp_path / "f")])
    assert res.exit_code == 2 and "the dataset is needed" in res.output and "Traceback" not in res.output
    assert "pass --dataset DIR," in res.output and "dataset=DIR" not in res.output  # the flag, not the API
    for flag, said in (("--embedding-dim", "embedding_dim must be a positive multiple of 4"),
                       ("--batch-size", "batch_size must be >= 1, got 0.")):  # 0 is refused, not "the manifest's"
        res = runner.invoke(app, ["export", "torchrec", str(manifest), "-d", str(tiny_dataset), "--out",
                                  str(tmp_path / "z"), flag, "0"])
        assert res.exit_code == 2 and said in res.output, res.output
    assert not (tmp_path / "z").exists()
    res = runner.invoke(app, ["export", "torchrec", str(manifest), "-d", str(tiny_dataset), "--out",
                              str(tmp_path / "f"), "--embedding-dim", "10"])
    assert res.exit_code == 2 and "multiple of 4" in res.output and "--embedding-dim 12" in res.output
    res = runner.invoke(app, ["export", "torchrec", str(manifest), "-d", str(tiny_dataset), "--out",
                              str(tmp_path / "e")])
    assert res.exit_code == 2 and "already exists" in res.output
    # --overwrite replaces an export (it refused every directory: an export had no gmp header kind) ...
    res = runner.invoke(app, ["export", "torchrec", str(manifest), "-d", str(tiny_dataset), "--out",
                              str(tmp_path / "e"), "--embedding-dim", "12", "--overwrite"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "e" / "plan.json").read_text())["embedding_dim"] == 12
    # ... and nothing else
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "thesis.tex").write_text("keep")
    res = runner.invoke(app, ["export", "torchrec", str(manifest), "-d", str(tiny_dataset), "--out",
                              str(tmp_path / "notes"), "--overwrite"])
    assert res.exit_code == 2 and "is not a TorchRec export (no plan.json)" in res.output
    assert (tmp_path / "notes" / "thesis.tex").read_text() == "keep"
    res = runner.invoke(app, ["export", "torchrec", str(manifest), "-d", str(tiny_dataset), "--out",
                              str(tmp_path / "b"), "--embedding-dim", "8", "--batch-size", "3"])
    assert res.exit_code == 0 and "optimised for another setting: batch_size 3 (planned 2)" in res.output


def test_random_per_field_balance_keeps_padding_small(tmp_path):
    from gmp.api import partition_dataset
    from gmp.datasets.format import FieldInfo, write_dataset
    from gmp.partition import make_options

    rng = np.random.default_rng(0)
    sizes = [7, 50, 3, 400]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n = 300
    ids = np.stack([o + rng.integers(0, s, n) for o, s in zip(offsets, sizes)], axis=1).ravel()
    fields = [FieldInfo(f"C{i}", "categorical", s, int(o)) for i, (s, o) in enumerate(zip(sizes, offsets))]
    write_dataset(tmp_path / "d", indptr=np.arange(0, 4 * n + 1, 4), indices=ids,
                  labels=np.zeros(n, dtype=np.float32), dense=None, fields=fields, num_embeddings=sum(sizes),
                  source={"format": "test"}, test_fraction=0.1)
    workers = 4
    pads = {}
    for per_field in (False, True):
        m = partition_dataset(tmp_path / "d", "random", tmp_path / f"m{per_field}", workers=workers,
                              options={"per_field": per_field}, plots=False)
        exp = export_torchrec(m, tmp_path / f"x{per_field}", dataset=tmp_path / "d")
        pads[per_field] = [t["padding_rows"] for t in exp.tables]
    # per field: every worker within one id of size/4, so padding = 4 * ceil(size / 4) - size < 4
    assert pads[True] == [4 * -(-s // workers) - s for s in sizes]
    assert sum(pads[True]) < sum(pads[False])
    with pytest.raises(PartitionError, match="per_field=True needs field_offsets"):
        make_options("random", {"per_field": True})


# --------------------------------------------------------------------------
# TorchRec itself (the optional 'peers' extra)
# --------------------------------------------------------------------------
@needs_torchrec
def test_torchrec_builds_tables_plan_and_constraints(manifest, tiny_dataset, tmp_path):
    import torch
    from torchrec import EmbeddingBagCollection

    from gmp.export.torchrec import torchrec_constraints, torchrec_sharding_plan, torchrec_tables

    exp = export_torchrec(manifest, tmp_path / "x", dataset=tiny_dataset, embedding_dim=8)
    tables = torchrec_tables(exp)
    assert [(t.name, t.num_embeddings, t.embedding_dim) for t in tables] == [("t_A", 6, 8), ("t_B", 6, 8)]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    plan = torchrec_sharding_plan(exp, ebc)
    shards = plan.plan[""]["t_A"].sharding_spec.shards
    assert [(list(s.shard_offsets), list(s.shard_sizes), str(s.placement)) for s in shards] == \
        [([0, 0], [3, 8], "rank:0/cpu"), ([3, 0], [3, 8], "rank:1/cpu")]
    cons = torchrec_constraints(exp)
    assert cons["t_B"].sharding_types == ["row_wise"] and cons["t_B"].pooling_factors == [0.5]
    stats = cons["t_A"].cache_params.stats
    cache = {t["name"]: t for t in exp.tables}["t_A"]["cache"]
    assert stats.expected_miss_rate(0.0) == 1.0 and stats.expected_miss_rate(1.0) == 0.0
    assert stats.expected_miss_rate(cache["load_factors"][1]) == pytest.approx(cache["miss_rates"][1])


def _sharded_lookup(rank, world, port, export_dir, dataset_dir, queue):  # pragma: no cover - spawned process
    import os

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from torchrec import EmbeddingBagCollection
        from torchrec.distributed.model_parallel import DistributedModelParallel

        from gmp.datasets.format import load_dataset as _load
        from gmp.export.torchrec import load_export as _open, torchrec_batch, torchrec_sharding_plan, torchrec_tables

        exp = _open(export_dir)
        ds = _load(dataset_dir)
        ebc = EmbeddingBagCollection(tables=torchrec_tables(exp), device=torch.device("meta"))
        model = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=torchrec_sharding_plan(exp, ebc))
        # every row holds (gmp id, rank that holds the row): the lookup then shows which id and which rank served it
        remap = np.asarray(exp.remap())
        inverse = {(k, int(remap[e])): e for k, t in enumerate(exp.tables)
                   for a, b in t["gmp_ranges"] for e in range(a, b)}
        with torch.no_grad():
            for k, t in enumerate(exp.tables):
                weight = model.state_dict()[f"embedding_bags.{t['name']}.weight"]
                for shard in weight.local_shards():
                    lo = int(shard.metadata.shard_offsets[0])
                    for i in range(shard.tensor.shape[0]):
                        shard.tensor[i].zero_()
                        shard.tensor[i, 0] = inverse.get((k, lo + i), -1)
                        shard.tensor[i, 1] = rank
        samples = np.asarray(exp.rank_samples(rank))
        out = model(torchrec_batch(exp, ds, samples)).to_dict()
        queue.put((rank, samples.tolist(), {k: v.detach().numpy().tolist() for k, v in out.items()}))
    finally:
        dist.destroy_process_group()


@needs_torchrec
def test_torchrec_sharded_lookup_serves_each_id_from_its_gmp_primary(manifest, tiny_dataset, tmp_path):
    """Two gloo processes run TorchRec's row-wise sharded EmbeddingBagCollection on CPU from the export:
    every looked-up row is the sample's original gmp id, served by the rank gmp made its primary."""
    import torch.multiprocessing as mp

    export_torchrec(manifest, tmp_path / "x", dataset=tiny_dataset, embedding_dim=8)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_sharded_lookup, args=(r, 2, port, str(tmp_path / "x"), str(tiny_dataset), queue))
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=300) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
    rows = [[0, 1], [1, 2], [0, 2], [3, 4]]
    checked = 0
    for rank, samples, out in results:
        for i, s in enumerate(samples):
            for feature, lo in (("A", 0), ("B", 3)):
                ids = [e for e in rows[s] if lo <= e < lo + 3]
                gmp_id, served_by = out[feature][i][0], out[feature][i][1]
                assert gmp_id == sum(ids)  # pooled (sum) over the sample's ids of the field
                assert served_by == sum(PRIMARY[e] for e in ids)
                checked += len(ids)
    assert checked == 8  # every training edge


DATA = __import__("pathlib").Path(__file__).parent / "data"


@pytest.mark.parametrize("version", [1, 2])
def test_golden_export_reads_and_matches_a_fresh_export(manifest, tiny_dataset, tmp_path, version):
    """Every version's golden, read (version 1 upgraded: one range per table), equals a fresh export."""
    from gmp.export.torchrec import SCHEMA_VERSION

    golden_dir = DATA / f"torchrec_export_v{version}"
    on_disk = json.loads((golden_dir / "plan.json").read_text())
    assert on_disk["format"] == "gmp.torchrec_export" and on_disk["schema_version"] == version
    golden = load_export(golden_dir)
    assert golden.plan["schema_version"] == SCHEMA_VERSION == 2
    assert [t["gmp_ranges"] for t in golden.tables] == [[[0, 3]], [[3, 6]]]
    fresh = export_torchrec(manifest, tmp_path / "x", dataset=tiny_dataset, embedding_dim=8, batch_size=2)
    skip = {"gmp_version", "manifest", "dataset", "dataset_sha256"}
    assert {k: v for k, v in fresh.plan.items() if k not in skip} == \
        {k: v for k, v in golden.plan.items() if k not in skip}
    meta = json.loads((tiny_dataset / "dataset.json").read_text())
    if version == 1:  # it predates dataset schema 3: it names the arrays' hash, which the dataset still answers to
        assert golden.plan["dataset_sha256"] == meta["arrays_sha256"] != meta["sha256"]
    assert fresh.plan["dataset_sha256"] == meta["sha256"]
    for name in ("remap.npy", "rank_indptr.npy", "rank_samples.npy"):
        assert np.array_equal(np.load(golden_dir / name), np.load(tmp_path / "x" / name)), name


def test_every_export_version_has_a_golden():
    from gmp.export.torchrec import SCHEMA_VERSION

    for version in range(1, SCHEMA_VERSION + 1):
        assert (DATA / f"torchrec_export_v{version}" / "plan.json").is_file(), version


def test_newer_export_is_refused(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"format": "gmp.torchrec_export", "schema_version": 3}))
    with pytest.raises(ManifestError, match="schema_version 3; this gmp reads up to 2"):
        load_export(tmp_path)


# load_export checks plan.json's keys and the arrays (adversarial pass on formats, F2): each damage was a
# KeyError/TypeError/IndexError, or a silently wrong batch (a remap of -7 or 1e9 into the KeyedJaggedTensor,
# a decreasing rank_indptr dropping samples, a float32 remap.npy)
def _damaged_export(tmp_path, edit, version=2):
    import shutil

    out = tmp_path / f"x{version}"
    shutil.copytree(DATA / f"torchrec_export_v{version}", out)
    plan = json.loads((out / "plan.json").read_text())
    arrays = {n: np.load(out / f"{n}.npy") for n in ("remap", "rank_indptr", "rank_samples")}
    edit(plan, arrays)
    (out / "plan.json").write_text(json.dumps(plan))
    for name, arr in arrays.items():
        if arr is None:
            (out / f"{name}.npy").unlink()
        else:
            np.save(out / f"{name}.npy", arr)
    return out


def _set(key, value):
    return lambda p, a: p.__setitem__(key, value)


def _array(name, fn):
    return lambda p, a: a.__setitem__(name, fn(a[name].copy()))


def _at(k, v):
    def put(arr):
        arr[k] = v
        return arr
    return put


# the golden export (tiny_dataset, 2 ranks): table t_A ids 0-2 on rank 0 (rows 0-2), t_B ids 3-5 on rank 1
# (rows 3-5), block_rows 3; training samples [0, 1 | 2, 3], batch_size 2, one step
DAMAGED_EXPORTS = {
    "no_tables": (lambda p, a: p.pop("tables"), r"plan\.json lacks the key 'tables' \(a list\)"),
    "tables_str": (_set("tables", "x"), r'plan\.json: tables must be a list, got "x"'),
    "tables_empty": (_set("tables", []), r"plan\.json: tables is empty"),
    "range_str": (lambda p, a: p["tables"][0].__setitem__("gmp_ranges", [[0, "a"]]),
                  r"tables\[0\]\.gmp_ranges must be \[start, stop\] pairs of ids .*got \[\[0, \"a\"\]\]"),
    "range_short": (lambda p, a: p["tables"][0].__setitem__("gmp_ranges", [[0, 2]]),
                    r"tables\[0\]\.gmp_ranges hold 2 ids, expected num_values 3"),
    "overlap": (lambda p, a: p["tables"][1].__setitem__("gmp_ranges", [[2, 5]]),
                r"table \"t_B\"'s ids \[2, 5\) overlap table \"t_A\"'s \[0, 3\)"),
    "same_feature": (lambda p, a: p["tables"][1].__setitem__("feature", "A"),
                     r"two tables have the feature \"A\", expected unique ones"),
    "batch_zero": (_set("batch_size", 0), r"plan\.json: batch_size must be a positive integer, got 0"),
    "steps_negative": (_set("steps_per_epoch", -1), r"steps_per_epoch must be a non-negative integer, got -1"),
    "steps_more": (_set("steps_per_epoch", 5), r"steps_per_epoch is 5, expected 1 \(the most samples per rank, 2, "
                                               r"over batch_size 2, rounded up\)"),
    "per_rank_sum": (_set("samples_per_rank", [3, 2]), r"samples_per_rank sums to 5, expected num_train 4"),
    "rows_per_rank": (lambda p, a: p["tables"][0].__setitem__("rows_per_rank", [4, -1]),
                      r"tables\[0\]\.rows_per_rank must be 2 integers in \[0, block_rows=3\]"),
    "shards": (lambda p, a: p["tables"][0]["shards"][1].__setitem__("row_offset", 2),
               r"tables\[0\]\.shards must be the even row-wise split"),
    "no_constraint": (lambda p, a: p["constraints"].pop("t_B"), r"lacks the key 'constraints\.t_B' \(an object\)"),
    "indptr_missing": (lambda p, a: a.__setitem__("rank_indptr", None), r"rank_indptr\.npy not found"),
    "indptr_decreasing": (_array("rank_indptr", _at(1, 3)), r"rank_indptr\.npy holds 3 at 1, expected 2 \(from 0 "
                                                            r"by plan\.json's samples_per_rank\)"),
    "sample_too_big": (_array("rank_samples", _at(0, 10**6)), r"rank_samples\.npy holds sample 1000000 at 0, "
                                                              r"expected each training sample in \[0, num_train=4\)"),
    "sample_twice": (_array("rank_samples", _at(1, 0)), r"rank_samples\.npy holds sample 1 nowhere \(another twice\)"),
    "remap_float": (_array("remap", lambda r: r.astype(np.float32)),
                    r"remap\.npy has dtype float32 and shape \(6,\), expected 1-D int64"),
    "remap_negative": (_array("remap", _at(0, -7)), r"remap\.npy maps id 0 of table t_A to row -7, expected a row "
                                                    r"in \[r x 3, r x 3 \+ rows_per_rank\[r\]\)"),
    "remap_huge": (_array("remap", _at(3, 10**9)), r"maps id 3 of table t_B to row 1000000000"),
    "remap_padding": (_array("remap", _at(3, 0)), r"maps id 3 of table t_B to row 0,"),  # rank 0 holds no t_B row
    "remap_twice": (_array("remap", _at(1, 0)), r"remap\.npy maps two ids of table t_A to one row"),
    "remap_short": (_array("remap", lambda r: r[:5]), r"remap\.npy has shape \(5,\), expected at least \(6,\)"),
}


@pytest.mark.parametrize("case", list(DAMAGED_EXPORTS))
def test_load_export_refuses_a_damaged_export_in_one_line(tmp_path, case):
    edit, pattern = DAMAGED_EXPORTS[case]
    out = _damaged_export(tmp_path, edit)
    with pytest.raises(ManifestError, match=pattern) as err:
        load_export(out)
    assert str(err.value).endswith("re-create it with 'gmp export torchrec MANIFEST --dataset DIR --out DIR'.")
    assert str(out) in str(err.value) and "\n" not in str(err.value)


def test_a_version_1_export_is_checked_too(tmp_path):
    """Its order arrays on reading; its remap once torchrec_batch knows the tables are the dataset's fields."""
    out = _damaged_export(tmp_path, _array("rank_indptr", _at(1, 3)), version=1)
    with pytest.raises(ManifestError, match=r"rank_indptr\.npy holds 3 at 1, expected 2"):
        load_export(out)


@needs_torchrec
def test_a_version_1_remap_is_checked_by_torchrec_batch(tiny_dataset, tmp_path):
    from gmp.export.torchrec import torchrec_batch

    exp = load_export(_damaged_export(tmp_path, _array("remap", _at(0, -7)), version=1))
    assert not exp.rows_checked
    with pytest.raises(ManifestError, match=r"remap\.npy maps id 0 of table t_A to row -7"):
        torchrec_batch(exp, load_dataset(tiny_dataset), [0])
    good = load_export(DATA / "torchrec_export_v1")
    kjt = torchrec_batch(good, load_dataset(tiny_dataset), [0, 3]).to_dict()
    assert good.rows_checked
    # samples 0 = ids [0, 1] (t_A rows 0, 1), 3 = ids [3, 4] (t_B rows 3, 4): the golden remap is the identity
    assert kjt["A"].values().tolist() == [0, 1] and kjt["B"].values().tolist() == [3, 4]


@needs_torchrec
def test_torchrec_batch_refuses_sample_ids_outside_the_dataset(tiny_dataset):
    from gmp.export.torchrec import torchrec_batch

    with pytest.raises(ManifestError, match=r"sample_ids must be in \[0, 6\) \(the dataset's samples\), got 0\.\.6"):
        torchrec_batch(load_export(DATA / "torchrec_export_v2"), load_dataset(tiny_dataset), [0, 6])
