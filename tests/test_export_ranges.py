"""``gmp export torchrec`` of datasets whose fields have several id ranges (``gmp data synth --continue``,
``gmp data import --extend``), per-step batches, and the command's wording.

Every expected value is recomputed here from ``dataset.json``'s field ``ranges`` and the manifest's
arrays with plain numpy (never with the export's own helpers).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from gmp.api import partition_dataset
from gmp.datasets.format import load_dataset
from gmp.datasets.synth import preset_config, synthesize
from gmp.datasets.synth_continue import continue_synth
from gmp.errors import ManifestError
from gmp.export.torchrec import epoch_batches, export_torchrec, load_export
from torchrec_mark import needs_torchrec
from torchrun_helpers import free_port

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------
# a chain of synthetic days: day 2's fields have up to three id ranges
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def days(tmp_path_factory):
    root = tmp_path_factory.mktemp("days")
    synthesize(preset_config("tiny", num_samples=2000, seed=0), root / "day0")
    continue_synth(root / "day0", root / "day1")
    continue_synth(root / "day1", root / "day2", growth=0.05, num_samples=1500)
    return root


@pytest.fixture(scope="module", params=[("random", 2), ("hybrid", 3)], ids=["random-w2", "hybrid-w3"])
def exported(request, days):
    """(dataset dir, manifest dir, export dir) of day 2 placed by ``method`` on ``workers``."""
    method, workers = request.param
    root = days
    manifest = root / f"m-{method}{workers}"
    if not manifest.exists():
        partition_dataset(root / "day2", method, manifest, workers=workers, batch_size=64, plots=False)
    out = root / f"e-{method}{workers}"
    if not out.exists():
        export_torchrec(manifest, out, dataset=root / "day2", embedding_dim=8, batch_size=64)
    return root / "day2", manifest, out


def field_ids(dataset_dir: Path) -> dict[str, np.ndarray]:
    """Field name -> its global ids in local-id order, from dataset.json's ``ranges`` alone."""
    meta = json.loads((dataset_dir / "dataset.json").read_text())
    return {f["name"]: np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in f["ranges"]])
            for f in meta["fields"] if f["kind"] != "dense"}


def expected_rows(ids: np.ndarray, primary: np.ndarray, num_ranks: int) -> tuple[np.ndarray, int]:
    """Rows of a field's ids: worker w's primaries, in local order, at rows w * block, w * block + 1, ..."""
    owner = primary[ids]
    block = max(1, int(max(np.count_nonzero(owner == w) for w in range(num_ranks))))
    rows = np.empty(ids.size, dtype=np.int64)
    for w in range(num_ranks):
        sel = np.flatnonzero(owner == w)
        rows[sel] = w * block + np.arange(sel.size)
    return rows, block


def test_the_chain_has_fields_with_several_ranges(days):
    meta = json.loads((days / "day2" / "dataset.json").read_text())
    multi = [f["name"] for f in meta["fields"] if f["kind"] != "dense" and len(f["ranges"]) > 1]
    assert len(multi) >= 4, multi  # else the tests below test nothing new
    assert any(len(f["ranges"]) == 3 for f in meta["fields"] if f["kind"] != "dense")


def test_every_id_of_a_field_has_its_own_row_in_its_primary_block(exported):
    """The remap is recomputed from the fields' ranges: each of a field's ids (its new ones too) has one
    row of that field's table, inside its primary rank's block, no row shared; other ids have none."""
    data, manifest, out = exported
    exp = load_export(out)
    primary = np.load(manifest / "embedding_primary.npy")
    remap = np.load(out / "remap.npy")
    num_ranks = exp.num_ranks
    fields = field_ids(data)
    ranges = {f["name"]: f["ranges"] for f in json.loads((data / "dataset.json").read_text())["fields"]}
    assert [t["feature"] for t in exp.tables] == list(fields)
    covered = np.zeros(remap.size, dtype=bool)
    for t in exp.tables:
        ids = fields[t["feature"]]
        covered[ids] = True
        rows, block = expected_rows(ids, primary, num_ranks)
        assert np.array_equal(remap[ids], rows), t["name"]
        assert np.unique(remap[ids]).size == ids.size  # no two gmp ids share a row
        assert t["block_rows"] == block and t["num_embeddings"] == num_ranks * block
        assert t["num_values"] == ids.size and t["padding_rows"] == num_ranks * block - ids.size
        assert t["rows_per_rank"] == np.bincount(primary[ids], minlength=num_ranks).tolist()
        assert t["gmp_ranges"] == ranges[t["feature"]]
    assert (remap[~covered] == -1).all()


def test_remote_ids_and_pooling_follow_the_ranges(exported):
    """The id all-to-all under this plan and under natural order (a field's local id is its natural row,
    TorchRec's even split of ceil(num_values / R) rows), and the pooling factors, recomputed per edge."""
    data, manifest, out = exported
    plan = load_export(out).plan
    num_ranks = plan["num_ranks"]
    primary = np.load(manifest / "embedding_primary.npy")
    sample_worker = np.load(manifest / "sample_worker.npy")
    meta = json.loads((data / "dataset.json").read_text())
    num_train = meta["split"]["num_train"]
    indptr, indices = np.load(data / "indptr.npy"), np.load(data / "indices.npy").astype(np.int64)
    field_of = np.full(meta["num_embeddings"], -1)
    local = np.full(meta["num_embeddings"], -1)
    natural_block = []
    for k, ids in enumerate(field_ids(data).values()):
        field_of[ids], local[ids] = k, np.arange(ids.size)
        natural_block.append(math.ceil(ids.size / num_ranks))
    edges = indices[:indptr[num_train]]
    worker = np.repeat(sample_worker[:num_train], np.diff(indptr[:num_train + 1]))
    keep = field_of[edges] >= 0
    edges, worker = edges[keep], worker[keep]
    trec, natural = plan["bytes_per_epoch"]["torchrec_row_wise"], plan["bytes_per_epoch"][
        "torchrec_row_wise_default_ids"]
    assert trec["remote_ids"] == int(np.count_nonzero(primary[edges] != worker))
    assert natural["remote_ids"] == int(np.count_nonzero(
        local[edges] // np.array(natural_block)[field_of[edges]] != worker))
    pooling = np.bincount(field_of[edges], minlength=len(plan["tables"])) / num_train
    assert [t["pooling_factor"] for t in plan["tables"]] == pytest.approx(pooling.tolist(), abs=1e-6)


def test_a_version_1_plan_is_upgraded_and_refused_for_an_extended_dataset(exported, tmp_path):
    """An export written before plan.json schema 2 meant one range per table: read as such, and refused
    by torchrec_batch for a dataset whose fields have more (it covered their first ranges only)."""
    pytest.importorskip("torchrec")
    from gmp.export.torchrec import torchrec_batch

    data, _, out = exported
    old = tmp_path / "old"
    old.mkdir()
    for name in ("remap.npy", "rank_indptr.npy", "rank_samples.npy", "README.md"):
        (old / name).write_bytes((out / name).read_bytes())
    plan = json.loads((out / "plan.json").read_text())
    plan["schema_version"] = 1
    for t in plan["tables"]:
        del t["gmp_ranges"]
    (old / "plan.json").write_text(json.dumps(plan))
    exp = load_export(old)
    assert exp.plan["schema_version"] == 2
    assert [t["gmp_ranges"] for t in exp.tables] == [[[t["gmp_offset"], t["gmp_offset"] + t["num_values"]]]
                                                    for t in plan["tables"]]
    with pytest.raises(ManifestError, match=r"covered each field's first range only\); re-create it with 'gmp "
                                            r"export torchrec"):
        torchrec_batch(exp, load_dataset(data), [0])


@needs_torchrec
def test_torchrec_batch_puts_each_value_in_its_own_fields_table(exported, days):
    from gmp.export.torchrec import torchrec_batch

    data, _, out = exported
    exp, ds = load_export(out), load_dataset(data)
    remap = np.load(out / "remap.npy")
    indptr, indices = np.load(data / "indptr.npy"), np.load(data / "indices.npy").astype(np.int64)
    new_ids = np.concatenate([np.arange(a, b) for a, b in
                              json.loads((data / "dataset.json").read_text())["new_id_ranges"]])
    samples = np.arange(ds.num_samples)
    with_new = samples[[np.isin(indices[indptr[s]:indptr[s + 1]], new_ids).any() for s in samples]]
    assert with_new.size >= 10
    pick = np.concatenate([with_new[:40], samples[:20]])
    kjt = torchrec_batch(exp, ds, pick).to_dict()
    assert list(kjt) == list(field_ids(data))
    for name, ids in field_ids(data).items():
        got = [row.tolist() for row in kjt[name].to_dense()]
        want = [remap[e[np.isin(e, ids)]].tolist() for e in (indices[indptr[s]:indptr[s + 1]] for s in pick)]
        assert got == want, name
    # a dataset the export was not made for is refused (day 1's ids are day 2's first ones: it would "work")
    with pytest.raises(ManifestError, match="was made for dataset sha256"):
        torchrec_batch(exp, load_dataset(days / "day1"), [0])


@needs_torchrec
def test_torchrec_batch_pads_to_the_step_size(exported):
    from gmp.export.torchrec import torchrec_batch

    data, _, out = exported
    exp, ds = load_export(out), load_dataset(data)
    kjt = torchrec_batch(exp, ds, [3, 5], pad_to=5)
    assert kjt.stride() == 5
    for name in kjt.keys():
        lengths = kjt[name].lengths().tolist()
        assert lengths[2:] == [0, 0, 0] and sum(lengths[:2]) > 0
    with pytest.raises(ManifestError, match=r"pad_to must be at least the number of sample_ids \(2\), got 1"):
        torchrec_batch(exp, ds, [3, 5], pad_to=1)


# --------------------------------------------------------------------------
# steps: steps_per_epoch steps read every training sample once
# --------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [1, 7, 64, 100_000])
def test_epoch_batches_read_every_sample_once_in_steps_per_epoch(days, batch_size, tmp_path):
    data, manifest = days / "day2", days / "m-random2"
    if not manifest.exists():
        partition_dataset(data, "random", manifest, workers=2, batch_size=64, plots=False)
    exp = export_torchrec(manifest, tmp_path / "e", dataset=data, embedding_dim=8, batch_size=batch_size)
    num_train = json.loads((data / "dataset.json").read_text())["split"]["num_train"]
    sample_worker = np.load(manifest / "sample_worker.npy")[:num_train]
    per_rank = np.bincount(sample_worker, minlength=2)
    steps = math.ceil(per_rank.max() / batch_size)
    assert exp.plan["steps_per_epoch"] == steps
    batches = [epoch_batches(exp, r) for r in range(2)]
    assert [len(b) for b in batches] == [steps, steps]
    for r in range(2):
        read = np.concatenate([ids for ids, _ in batches[r]])
        assert read.tolist() == np.flatnonzero(sample_worker == r).tolist()  # every sample once, in order
    for k in range(steps):
        sizes = {size for b in batches for _, size in [b[k]]}
        assert sizes == {max(len(b[k][0]) for b in batches)}  # one size, the largest real batch


def test_the_example_trains_every_sample_when_the_batch_exceeds_a_ranks_samples(tmp_path):
    pytest.importorskip("torchrec")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "torchrec_train.py"), "--samples", "600",
                           "--batch-size", "100000", "--work", str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads((tmp_path / "data.hybrid.w2.torchrec" / "plan.json").read_text())
    assert plan["steps_per_epoch"] == 1
    for rank, n in enumerate(plan["samples_per_rank"]):
        assert f"rank {rank}: {n:,} of its {n:,} samples in 1 step of up to 100000" in proc.stdout, proc.stdout


# --------------------------------------------------------------------------
# TorchRec's sharded lookup on the extended dataset, in padded steps
# --------------------------------------------------------------------------
def _lookup_epochs(rank, world, port, exports, dataset_dir, queue):  # pragma: no cover - spawned process
    """Each export's epoch of padded steps on this rank: (samples, size, pooled rows) per step."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from torchrec import EmbeddingBagCollection
        from torchrec.distributed.model_parallel import DistributedModelParallel

        from gmp.datasets.format import load_dataset as _load
        from gmp.export.torchrec import epoch_batches as _batches
        from gmp.export.torchrec import load_export as _open
        from gmp.export.torchrec import torchrec_batch, torchrec_sharding_plan, torchrec_tables

        ds = _load(dataset_dir)
        results = []
        for export_dir, inverse in exports:
            exp = _open(export_dir)
            ebc = EmbeddingBagCollection(tables=torchrec_tables(exp), device=torch.device("meta"))
            model = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=torchrec_sharding_plan(exp, ebc))
            # row -> (gmp id, serving rank, 1): pooled, the sum of the ids, of their ranks, and their count
            with torch.no_grad():
                for t in exp.tables:
                    weight = model.state_dict()[f"embedding_bags.{t['name']}.weight"]
                    table = inverse[t["name"]]
                    for shard in weight.local_shards():
                        lo = int(shard.metadata.shard_offsets[0])
                        gmp_id = torch.as_tensor(table[lo:lo + shard.tensor.shape[0]], dtype=torch.float32)
                        used = (gmp_id >= 0).float()  # padding rows stay zero
                        shard.tensor.zero_()
                        shard.tensor[:, 0], shard.tensor[:, 1], shard.tensor[:, 2] = gmp_id * used, rank * used, used
            steps = []
            for ids, size in _batches(exp, rank):
                out = model(torchrec_batch(exp, ds, ids, pad_to=size)).to_dict()
                steps.append((ids.tolist(), size, {k: v.detach()[:, :3].numpy().tolist() for k, v in out.items()}))
            results.append(steps)
        queue.put((rank, results))
    finally:
        dist.destroy_process_group()


@needs_torchrec
def test_sharded_lookup_on_an_extended_dataset_serves_each_id_from_its_primary(days, tmp_path):
    """Three gloo processes run TorchRec's row-wise sharded lookup on day 2 (fields with three ranges)
    over a whole epoch of padded steps, at batch 50 and at a batch larger than any rank's samples
    (one step): every sample's pooled row per field is the sum of its own ids of that field
    (recomputed from dataset.json's ranges), served by their primaries; padding rows are zero."""
    import torch.multiprocessing as mp

    data, manifest, world = days / "day2", days / "m-hybrid3", 3
    if not manifest.exists():
        partition_dataset(data, "hybrid", manifest, workers=world, batch_size=64, plots=False)
    fields = field_ids(data)
    primary = np.load(manifest / "embedding_primary.npy")
    exports, plans = [], []
    for batch_size in (50, 100_000):
        out = tmp_path / f"e{batch_size}"
        exp = export_torchrec(manifest, out, dataset=data, embedding_dim=8, batch_size=batch_size)
        remap = np.load(out / "remap.npy")
        inverse = {}  # per table: row -> gmp id (-1: padding), from dataset.json's ranges
        for t in exp.tables:
            ids = fields[t["feature"]]
            inverse[t["name"]] = np.full(t["num_embeddings"], -1, dtype=np.int64)
            inverse[t["name"]][remap[ids]] = ids
        exports.append((str(out), inverse))
        plans.append(exp.plan)
    assert [p["steps_per_epoch"] for p in plans][1] == 1
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_lookup_epochs, args=(r, world, port, exports, str(data), queue))
             for r in range(world)]
    for p in procs:
        p.start()
    try:
        results = dict(queue.get(timeout=300) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=60)
    indptr, indices = np.load(data / "indptr.npy"), np.load(data / "indices.npy").astype(np.int64)
    num_train = json.loads((data / "dataset.json").read_text())["split"]["num_train"]
    for k, plan in enumerate(plans):
        seen = []
        for rank in range(world):
            steps = results[rank][k]
            assert len(steps) == plan["steps_per_epoch"]
            for samples, size, pooled in steps:
                for name, ids in fields.items():
                    rows = pooled[name]
                    assert len(rows) == size and all(r == [0.0, 0.0, 0.0] for r in rows[len(samples):])
                    for i, s in enumerate(samples):
                        mine = indices[indptr[s]:indptr[s + 1]]
                        mine = mine[np.isin(mine, ids)]
                        assert rows[i] == [float(mine.sum()), float(primary[mine].sum()), float(mine.size)], (name, s)
                seen += samples
        assert sorted(seen) == list(range(num_train))  # every training sample once


# --------------------------------------------------------------------------
# the command's wording
# --------------------------------------------------------------------------
def test_counts_are_worded_for_one_rank(days, tmp_path):
    data = days / "day2"
    partition_dataset(data, "random", tmp_path / "m1", workers=1, plots=False)
    exp = export_torchrec(tmp_path / "m1", tmp_path / "e", dataset=data, embedding_dim=8)
    assert " on 1 rank, 8 row-wise tables," in repr(exp)
    readme = (tmp_path / "e" / "README.md").read_text()
    assert " on 1 rank, 8 tables " in readme and "this placement's 0 secondaries." in readme


def test_cli_summary_words_one_rank(days, tmp_path):
    data = days / "day2"
    partition_dataset(data, "random", tmp_path / "m1", workers=1, plots=False)
    res = runner.invoke(app, ["export", "torchrec", str(tmp_path / "m1"), "-d", str(data), "-o", str(tmp_path / "e"),
                              "--embedding-dim", "8"])
    assert res.exit_code == 0, res.output
    assert "8 row-wise tables on 1 rank," in res.output


def test_a_refused_width_is_not_preceded_by_a_warning(days, tmp_path):
    data, manifest = days / "day2", days / "m-random2"
    if not manifest.exists():
        partition_dataset(data, "random", manifest, workers=2, batch_size=64, plots=False)
    res = runner.invoke(app, ["export", "torchrec", str(manifest), "-d", str(data), "-o", str(tmp_path / "e"),
                              "--embedding-dim", "6"])
    assert res.exit_code == 2 and "embedding_dim must be a positive multiple of 4" in res.output, res.output
    assert "optimised for another setting" not in res.output and "warning" not in res.output
    assert not (tmp_path / "e").exists()


def test_a_missing_manifest_directory_is_worded_as_report_words_it(days, tmp_path):
    missing = tmp_path / "nothere"
    res_report = runner.invoke(app, ["report", str(missing)])
    res = runner.invoke(app, ["export", "torchrec", str(missing), "-d", str(days / "day2"), "-o",
                              str(tmp_path / "e")])
    assert res_report.exit_code == res.exit_code == 2
    assert f"{missing} is not a directory; pass a placement manifest directory" in res_report.output
    assert f"{missing} is not a directory; pass a placement manifest directory" in res.output, res.output
    assert "not found" not in res.output


def test_the_library_refuses_a_width_before_reading_anything(tmp_path):
    """export_torchrec checks its settings first: a bad width is refused even before a missing manifest."""
    with pytest.raises(ManifestError, match=r"embedding_dim must be a positive multiple of 4 .*got 6; pass "
                                            r"`embedding_dim` 8"):
        export_torchrec(tmp_path / "nothere", tmp_path / "e", dataset=tmp_path / "nodata", embedding_dim=6)
