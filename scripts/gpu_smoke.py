"""The Python side of scripts/gpu_smoke.sh (see there): ``single``, ``nccl`` (under torchrun),
``dist-train N``. Each check prints one line ``ok: ...`` or raises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def check_tiers_library() -> None:
    from gmp.train.tiers import DiskRows, HostRows, LookaheadPrefetcher, RowCache

    rng = np.random.default_rng(0)
    num_rows, width, steps = 5000, 8, 80
    init = rng.uniform(-1, 1, size=(num_rows, width)).astype(np.float32)
    batches = [np.unique(rng.integers(0, num_rows, 300)) for _ in range(steps)]
    grads = [torch.randn(b.size, width, generator=torch.Generator().manual_seed(i)).cuda() for i, b in enumerate(batches)]
    ref = torch.from_numpy(init).cuda()
    for b, g in zip(batches, grads):
        idx = torch.as_tensor(b).cuda()
        ref[idx] = ref.index_select(0, idx) - 0.1 * g
    ref = ref.cpu().numpy()
    with tempfile.TemporaryDirectory() as tmp:
        for name, master in (("host", HostRows(init)),
                             ("disk", DiskRows.create(Path(tmp) / "r.bin", num_rows, width, lambda a, b: init[a:b]))):
            for lookahead in (0, 8):
                m = HostRows(init) if name == "host" else \
                    DiskRows.create(Path(tmp) / f"r{lookahead}.bin", num_rows, width, lambda a, b: init[a:b])
                cache = RowCache(m, 1200, device="cuda")
                pf = LookaheadPrefetcher(cache, batches, lookahead=lookahead, prefetch_depth=2)
                for step in pf:
                    if step.event is not None:
                        torch.cuda.current_stream().wait_event(step.event)
                    idx = torch.as_tensor(step.slots).cuda()
                    cache.tensor[idx] = cache.tensor.index_select(0, idx) - 0.1 * grads[step.index]
                    cache.mark_dirty(step.slots)
                    pf.done(step)
                cache.flush()
                got = m.data if name == "host" else m.read(np.arange(num_rows))
                np.testing.assert_array_equal(got, ref)
                assert cache.stats.rows_written_back > 0
                print(f"ok: CUDA RowCache over a {name} master, lookahead {lookahead}: equal to a CUDA table "
                      f"bit for bit ({cache.stats.misses} misses, {cache.stats.rows_written_back} write-backs)")
            master.close()


def check_reads_after_a_slow_load() -> None:
    """A read or write of cached rows outside the step protocol (``gather``/``scatter``: Herald's copies,
    early pulls, victim rows) right after an admission whose copy is still queued on the side stream
    (held back here by a GPU sleep queued there first) sees the loaded values, and is not overwritten
    by the copy. Before the fix the gather read the slots' old contents (zeros) and the scattered values
    were lost."""
    from gmp.train.tiers import HostRows, RowCache

    rng = np.random.default_rng(1)
    init = rng.uniform(-1, 1, size=(64, 8)).astype(np.float32)
    rows = np.arange(0, 64, 3)
    wrong = []
    for what in ("gather", "scatter"):
        master = HostRows(init)
        cache = RowCache(master, 40, device="cuda")
        # the side stream's next copy starts ~1 s from now (longer than the admission's first, compiling call)
        with torch.cuda.stream(cache._stream):
            torch.cuda._sleep(2_000_000_000)
        slots, _event = cache.admit(rows)
        if what == "gather":
            if not np.array_equal(cache.gather(rows).cpu().numpy(), init[rows]):
                wrong.append("gather read the slots before the load")
        else:
            cache.scatter(rows, torch.full((rows.size, 8), 7.0, device="cuda"))
            cache.release(slots)
            cache.flush()
            if not np.all(master.data[rows] == 7.0):
                wrong.append("the load overwrote the scattered values")
    assert not wrong, "; ".join(wrong)
    print("ok: gather and scatter right after an admission whose copy is still running on the side stream "
          "read and keep the right values")


def check_trainer_tiers() -> None:
    from gmp.comm.local import LocalEngine
    from gmp.datasets.format import load_dataset
    from gmp.placement import Placement
    from gmp.train import TrainConfig, TrainData, Trainer
    from gmp.train.tiers import TierOptions
    from test_train_tiers import make_flat_dataset

    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    with tempfile.TemporaryDirectory() as tmp:
        ds = load_dataset(make_flat_dataset(Path(tmp) / "ds"))
        rng = np.random.default_rng(1)
        for n in (1, 2):
            pl = Placement.edge_cut(n, rng.integers(0, n, ds.num_samples), rng.integers(0, n, ds.num_embeddings))
            for opt in ("sgd", "adagrad"):
                results = []
                for tiers in (None, TierOptions(table_location="host", cache_rows=45, lookahead=4),
                              TierOptions(table_location="disk", cache_rows=45, tier_dir=tmp)):
                    cfg = TrainConfig(model="wdl", embedding_dim=4, optimizer=opt, lr=0.1, batch_size=8, epochs=2,
                                      schedule="naive", hidden=(8,), seed=3, tiers=tiers)
                    tr = Trainer(TrainData(ds), pl, cfg, LocalEngine(n))
                    assert tr.stores[0].device.type == "cuda", tr.stores[0].device
                    recs = tr.fit()
                    results.append((tr.embedding_table(), recs[-1]["test_auc"]))
                    tr.close()
                for table, auc in results[1:]:
                    np.testing.assert_array_equal(table, results[0][0])
                    assert auc == results[0][1]
                print(f"ok: gmp train on cuda:0, {n} worker(s), {opt}: host and disk tiers with a CUDA "
                      f"cache of 45 rows == the CUDA store, bit for bit")


def check_herald_device_cache() -> None:
    """Herald's copies held in the CUDA device cache beside tiered rows (the cache tensor grows on
    the device while the prefetch thread loads rows on its side stream) == Herald on the CUDA store."""
    from gmp.comm.local import LocalEngine
    from gmp.datasets.format import load_dataset
    from gmp.placement import Placement
    from gmp.train import TrainConfig, TrainData, Trainer
    from gmp.train.herald import HeraldOptions
    from gmp.train.tiers import TierOptions
    from test_train_tiers import make_flat_dataset

    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    with tempfile.TemporaryDirectory() as tmp:
        ds = load_dataset(make_flat_dataset(Path(tmp) / "ds"))
        rng = np.random.default_rng(2)
        pl = Placement.edge_cut(3, rng.integers(0, 3, ds.num_samples), rng.integers(0, 3, ds.num_embeddings))
        herald = HeraldOptions(on_demand=True, cache_rows=20, lookahead=2, read_only_replicas=False)
        tables = []
        for tiers in (None, TierOptions(table_location="host", cache_rows=30, lookahead=2)):
            cfg = TrainConfig(model="wdl", embedding_dim=4, optimizer="adagrad", lr=0.1, batch_size=8, epochs=2,
                              schedule="herald", hidden=(8,), seed=3, herald=herald, tiers=tiers)
            tr = Trainer(TrainData(ds), pl, cfg, LocalEngine(3))
            assert tr.stores[0].device.type == "cuda", tr.stores[0].device
            tr.fit()
            if tiers is not None:
                assert all(s.device_cache is s.tier.cache and s.device_cache.tensor.is_cuda for s in tr.stores)
            tables.append(tr.embedding_table())
            tr.close()
        np.testing.assert_array_equal(tables[1], tables[0])
        print("ok: Herald (on-demand, cache, early fetch) with its copies in a CUDA device cache beside a "
              "host tier == Herald on the CUDA store, bit for bit")


def check_nccl() -> None:
    from gmp.comm.distributed import DistributedEngine

    eng = DistributedEngine()
    assert eng.backend == "nccl", eng.backend
    me, n = eng.rank, eng.world_size
    dev = eng.device_for(me)
    # uneven splits: rank r sends (r + 2 * d) % 3 rows of width 5 to rank d (0 rows included)
    sends = [[torch.full(((me + 2 * d) % 3, 5), float(100 * me + d), device=dev) for d in range(n)]]
    got = eng.alltoallv(sends, "embedding_rows")
    for src in range(n):
        t = got[0][src]
        assert t.shape == ((src + 2 * me) % 3, 5), t.shape
        assert t.device.type == "cuda" and bool((t == 100 * src + me).all())
    handle = eng.start_alltoallv(sends, "embedding_rows",
                                 recv_counts=[[(src + 2 * me) % 3 for src in range(n)]])
    again = handle.wait()
    assert all(torch.equal(a, b) for a, b in zip(again[0], got[0]))
    s = eng.all_reduce_dense(torch.full((7,), float(me + 1), device=dev))
    assert bool((s == n * (n + 1) / 2).all())
    if eng.is_main:
        print(f"ok: NCCL all-to-all with uneven (and empty) splits among {n} rank(s), asynchronous start_alltoallv, "
              f"dense all-reduce")
    eng.close()


def check_dist_train(ngpu: int) -> None:
    from gmp.datasets.format import load_dataset
    from gmp.manifest import write_manifest
    from gmp.placement import Placement
    from gmp.topology import homogeneous
    from test_train_tiers import make_flat_dataset

    with tempfile.TemporaryDirectory() as tmp:
        path = make_flat_dataset(Path(tmp) / "ds")
        ds = load_dataset(path)
        rng = np.random.default_rng(2)
        pl = Placement.edge_cut(ngpu, rng.integers(0, ngpu, ds.num_samples), rng.integers(0, ngpu, ds.num_embeddings))
        write_manifest(Path(tmp) / "m", pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples,
                       num_embeddings=ds.num_embeddings, topology=homogeneous(ngpu))
        logs = []
        for extra in ([], ["--table-location", "disk", "--tier-dir", tmp, "--cache-rows", "60", "--lookahead", "8"]):
            log = Path(tmp) / f"log{len(logs)}.jsonl"
            cmd = ["torchrun", "--standalone", "--nproc-per-node", str(ngpu), "-m", "cli.main", "train",
                   "--engine", "distributed", "--dataset", str(path), "--manifest", str(Path(tmp) / "m"),
                   "--batch-size", "8", "--embedding-dim", "4", "--epochs", "2", "--log-json", str(log), *extra]
            subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
            logs.append([r for x in log.read_text().splitlines() if (r := json.loads(x))["kind"] == "epoch"])
        for a, b in zip(*logs):
            assert a["train_loss"] == b["train_loss"] and a["test_auc"] == b["test_auc"], (a, b)
        print(f"ok: gmp train --engine distributed (NCCL, {ngpu} GPU(s)): disk tier with a CUDA cache == CUDA "
              f"store (same losses and AUC in the log)")


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "single":
        check_tiers_library()
        check_reads_after_a_slow_load()
        check_trainer_tiers()
        check_herald_device_cache()
    elif what == "nccl":
        check_nccl()
    elif what == "dist-train":
        check_dist_train(int(sys.argv[2]))
    else:
        sys.exit(f"unknown check {what!r}")
