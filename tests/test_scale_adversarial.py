"""Resource edges found at realistic size (a scale test pass, F2-F5, F12): out of memory under an
address-space limit, a full device inside torch's zip writer, numpy's full-device error without errno, and
disk figures that read "0.0 GiB". Each was a traceback or a misleading line; each is now one ``error:``
line that names what to change."""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import invoke, one_line_error
from train_data import make_ctr_dataset

#: torch's CPU allocator under ``prlimit --as`` (the report's F2 run), word for word
TORCH_OOM = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
             "to allocate 286981896 bytes. Error code 12 (Cannot allocate memory)")
Usage = namedtuple("Usage", "total used free")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_ctr_dataset(tmp_path_factory.mktemp("scale") / "ds", num_samples=60)


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- F2/F5: out of memory
def test_torchs_cpu_allocator_error_is_recognised_narrowly():
    from gmp._memory import is_out_of_memory

    assert is_out_of_memory(RuntimeError(TORCH_OOM))
    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:83] DefaultCPUAllocator: not enough memory: "
                                         "you tried to allocate 8 bytes."))
    assert is_out_of_memory(MemoryError())
    assert not is_out_of_memory(RuntimeError("expected scalar type Float but found Double"))
    assert not is_out_of_memory(RuntimeError("CUDA out of memory"))  # the GPU's: handled as the GPU's


def test_train_out_of_host_memory_is_one_line_naming_what_to_lower(ds, tmp_path, monkeypatch):
    """F2: a traceback of 60 lines, exit 1."""
    import gmp.train.trainer as trainer_mod

    def oom(*a, **k):
        raise RuntimeError(TORCH_OOM)

    monkeypatch.setattr(trainer_mod.Trainer, "fit", oom)
    err = one_line_error(invoke("train", "--dataset", ds, "--epochs", 1, "--embedding-dim", 2),
                         r"^error: out of memory while training \(can't allocate memory: you tried to allocate "
                         r"286981896 bytes\. Error code 12\); [\d.,]+ GiB is available now")
    assert "--embedding-dim" in err and "--batch-size" in err and "--table-location disk" in err


def test_an_other_runtime_error_is_not_taken_for_out_of_memory(ds, monkeypatch):
    import gmp.train.trainer as trainer_mod

    def bug(*a, **k):
        raise RuntimeError("expected scalar type Float but found Double")

    monkeypatch.setattr(trainer_mod.Trainer, "fit", bug)
    res = invoke("train", "--dataset", ds, "--epochs", 1, "--embedding-dim", 2)
    assert res.exit_code == 1 and isinstance(res.exception, RuntimeError)


@pytest.mark.parametrize("raised", [MemoryError(), RuntimeError(TORCH_OOM)])
def test_partition_out_of_memory_names_chunk_samples(tiny_dataset, tmp_path, monkeypatch, raised):
    """F5: "out of memory; use a smaller input or settings" named no estimate and no --chunk-samples."""
    import gmp.partition as part

    def oom(*a, **k):
        raise raised

    monkeypatch.setattr(part, "run_partitioner", oom)
    err = one_line_error(invoke("partition", tiny_dataset, "-w", 2, "-m", "hybrid", "--no-plots", "--out",
                                tmp_path / "m"),
                         r"^error: out of memory partitioning 6 samples with hybrid on 2 workers; [\d.,]+ GiB is "
                         r"available now")
    # 6 samples: below 5M out of core saves nothing (docs/distributed.md), and the line says so
    assert "out of core (--chunk-samples) needs as much memory or more below 5,000,000 samples" in err
    assert "use fewer --workers" in err
    assert not (tmp_path / "m").exists()


def test_partition_out_of_memory_from_5m_samples_names_the_chunk_size(monkeypatch):
    """F5 at a size where out of core saves memory: the line names --chunk-samples and its value (a quarter of
    the samples, at most 2M)."""
    from types import SimpleNamespace

    from gmp import api
    from gmp.errors import OutOfMemory

    monkeypatch.setattr(api, "load_dataset", lambda path: SimpleNamespace(num_samples=6_000_000))
    spec = SimpleNamespace(dataset="d", mode="scratch", method="hybrid", topology=SimpleNamespace(num_workers=8),
                           chunk_samples=None)
    err = api._partition_memory_error(spec, MemoryError())
    assert isinstance(err, OutOfMemory)
    assert str(err).startswith("out of memory partitioning 6,000,000 samples with hybrid on 8 workers; ")
    assert "partition out of core with `chunk_samples` 1500000 (the same hybrid streamed in blocks, slower" in str(err)


def test_metis_out_of_memory_says_memory(tiny_dataset, tmp_path, monkeypatch):
    """F5: "METIS failed (status -3)": status -3 is METIS_ERROR_MEMORY (metis.h)."""
    from gmp.errors import OutOfMemory
    from gmp.partition._common import METIS_NOPTIONS, _call_metis

    class Fn:
        def __call__(self, *args):
            return -3

        @staticmethod
        def set_defaults(ptr):
            return None

    xadj, adjncy = np.array([0, 1, 2]), np.array([1, 0])
    with pytest.raises(OutOfMemory, match=r"METIS ran out of memory \(METIS_ERROR_MEMORY, status -3\) on a graph "
                                          r"of 2 vertices"):
        _call_metis(Fn(), xadj, adjncy, 2, None, None, seed=0, ufactor=30, ncuts=1, niter=None)
    assert METIS_NOPTIONS == 40

    import gmp.partition as part

    def metis_oom(*a, **k):
        raise OutOfMemory("METIS ran out of memory (METIS_ERROR_MEMORY, status -3) on a graph of 99,397 vertices")

    monkeypatch.setattr(part, "run_partitioner", metis_oom)
    err = one_line_error(invoke("partition", tiny_dataset, "-w", 2, "-m", "metis", "--no-plots", "--out",
                                tmp_path / "m"), r"^error: out of memory partitioning 6 samples with metis on 2 "
                                                 r"workers \(METIS ran out of memory \(METIS_ERROR_MEMORY")
    assert "--workers" in err and "status -3)" in err


def test_the_address_space_limit_caps_the_memory_available(tmp_path, monkeypatch):
    """F2/F5: ``prlimit --as`` made allocations fail past the checks, which read only the host and the cgroup."""
    import resource

    import gmp._memory as mem

    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/status").write_text("Name:\tpython\nVmPeak:\t 3000000 kB\nVmSize:\t 2097152 kB\n")
    limit = 4 * 2**30
    monkeypatch.setattr(resource, "getrlimit", lambda what: (limit, resource.RLIM_INFINITY))
    assert mem.address_space_room(tmp_path) == (limit - 2 * 2**30, limit)
    monkeypatch.setattr(mem, "ROOT", str(tmp_path))  # no cgroup files there: the host and the limit count
    monkeypatch.setattr(mem, "host_available", lambda: 20 * 2**30)
    assert mem.available_memory() == 2 * 2**30
    assert mem.memory_note() == " (its address-space limit, ulimit -v, is 4.0 GiB)"
    monkeypatch.setattr(resource, "getrlimit", lambda what: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert mem.address_space_room(tmp_path) is None and mem.available_memory() == 20 * 2**30


# --------------------------------------------------------------------------- F3: a full device at a checkpoint
def zip_writer_on_a_full_device(obj, f):
    """What torch.save did on the full 50 MiB tmpfs: the write fails with ENOSPC, and the zip writer's close,
    run while that unwinds, raises "unexpected pos" during its handling."""
    f.write(b"x" * 64)
    try:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    finally:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 860992 vs 860936")


def test_a_full_device_inside_torchs_zip_writer_is_one_line_and_leaves_no_temporary(ds, tmp_path, monkeypatch):
    import gmp.train.checkpoint as ckpt

    monkeypatch.setattr(ckpt.torch, "save", zip_writer_on_a_full_device)
    ck = tmp_path / "ck"
    err = one_line_error(invoke("train", "--dataset", ds, "--epochs", 1, "--embedding-dim", 2, "--checkpoint-dir", ck),
                         r"^error: no space left on the device while writing a checkpoint in ")
    assert str(ck) in err and "--checkpoint-dir" in err and "permissions" not in err
    assert re.search(r"a checkpoint of this run needs about [\d,]+ bytes", err), err
    assert not ck.exists() or not [p.name for p in ck.iterdir() if p.name.startswith(".tmp-")]


def test_a_checkpoint_that_cannot_fit_is_refused_before_the_first_epoch(ds, tmp_path, monkeypatch):
    """F3: the full epoch ran, then the save failed; a killed save's temporary kept the device full, so the
    rerun failed the same way. The temporary is removed, then the room is checked before any step."""
    import gmp._io as io_mod
    import gmp.train.trainer as trainer_mod

    ref = tmp_path / "ref"
    res = invoke("train", "--dataset", ds, "--epochs", 1, "--embedding-dim", 2, "--checkpoint-dir", ref)
    assert res.exit_code == 0, res.output
    actual = tree_size(ref / os.readlink(ref / "latest"))  # one real checkpoint of this run

    ck = tmp_path / "ck"
    (ck / ".tmp-1-0").mkdir(parents=True)
    (ck / ".tmp-1-0" / "worker-00000.pt").write_bytes(b"\0" * 4096)  # what the failed save left
    steps = []
    real_fit = trainer_mod.Trainer.fit
    monkeypatch.setattr(trainer_mod.Trainer, "fit", lambda *a, **k: steps.append(1) or real_fit(*a, **k))
    monkeypatch.setattr(io_mod.shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - actual // 4, actual // 4))
    err = one_line_error(invoke("train", "--dataset", ds, "--epochs", 1, "--embedding-dim", 2, "--checkpoint-dir", ck),
                         r"^error: a checkpoint of this run \(about [\d,]+ bytes each\) needs about .* of disk at ")
    each = int(re.search(r"about ([\d,]+) bytes each", err).group(1).replace(",", ""))
    assert actual / 2 <= each <= 2 * actual, (each, actual)  # an estimate of the real size
    assert "--checkpoint-dir" in err and steps == []  # before any step
    assert not (ck / ".tmp-1-0").exists()
    # three epochs keep up to three checkpoints at once (the new one beside the latest and the previous one)
    err = one_line_error(invoke("train", "--dataset", ds, "--epochs", 3, "--embedding-dim", 2, "--checkpoint-dir", ck),
                         r"^error: 3 checkpoints of this run")
    monkeypatch.setattr(io_mod.shutil, "disk_usage", lambda p: Usage(10**9, 0, 10**9))
    res = invoke("train", "--dataset", ds, "--epochs", 1, "--embedding-dim", 2, "--checkpoint-dir", ck)
    assert res.exit_code == 0, res.output


# --------------------------------------------------------------------------- F4/F12: full-device lines
def test_numpys_full_device_error_in_partition_names_out_and_the_shortfall(tiny_dataset, tmp_path, monkeypatch):
    """F4: "a file: Not enough free space to write 135050308 bytes after offset 128; check the path and its
    permissions." numpy's OSError has no errno."""
    import gmp._io as io_mod
    import gmp.manifest as man

    def full(*a, **k):
        raise OSError("Not enough free space to write 135050308 bytes after offset 128")

    monkeypatch.setattr(man.np, "save", full)
    monkeypatch.setattr(io_mod.shutil, "disk_usage", lambda p: Usage(50 * 2**20, 0, 50 * 2**20))
    out = tmp_path / "m"
    err = one_line_error(invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--no-plots", "--out", out),
                         r"^error: no space left on the device while writing ")
    assert str(out) in err and "--out" in err and "permissions" not in err and "a file" not in err
    # it needs more than the write that failed: 135,050,308 B = 128.8 MiB, 50.0 MiB free
    need = 135_050_308 / 2**20
    assert f"needs more than {need:,.1f} MiB" in err and f"free at least {need - 50:,.1f} MiB more" in err, err
    assert not out.exists()


def test_a_manifest_that_cannot_fit_is_refused_before_partitioning(tiny_dataset, tmp_path, monkeypatch):
    """F4: the partitioning ran first (minutes at scale); the manifest's arrays are sized by the header."""
    import gmp._io as io_mod
    import gmp.partition as part

    ran = []
    monkeypatch.setattr(part, "run_partitioner", lambda *a, **k: ran.append(1))
    monkeypatch.setattr(io_mod.shutil, "disk_usage", lambda p: Usage(10**6, 10**6 - 20, 20))
    out = tmp_path / "m"
    err = one_line_error(invoke("partition", tiny_dataset, "-w", 2, "-m", "random", "--no-plots", "--out", out),
                         r"^error: the manifest of 6 samples and 6 embedding ids needs about 0\.0 MiB of disk at ")
    assert str(out) in err and "--out" in err and ran == []
    from gmp.manifest import manifest_bytes

    assert manifest_bytes(6, 6) == 4 * 6 + 4 * 6 + 8 * 7 + 1


def test_disk_figures_below_a_gib_are_in_mib(tmp_path, monkeypatch):
    """F12: 50 MiB free read "0.0 GiB"; "free at least 50.0 MiB more" read as the shortfall, which it is not."""
    import gmp._io as io_mod
    from gmp.errors import OutputError

    monkeypatch.setattr(io_mod.shutil, "disk_usage", lambda p: Usage(50 * 2**20, 0, 50 * 2**20))
    with pytest.raises(OutputError, match=r"needs about 300\.0 MiB of disk at .*, 50\.0 MiB is free on that device"):
        io_mod.check_disk(tmp_path / "syn", 300 * 2**20, what="synth", fix="free space.")
    line = str(io_mod.full_disk_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "imp",
                                      written=50 * 2**20))
    assert "needs more than 50.0 MiB (the part written before it filled), 50.0 MiB free now; free more" in line, line
    assert "at least 50.0 MiB more" not in line


def test_shutil_is_what_the_disk_checks_read():
    """The tests above fake ``shutil.disk_usage`` as gmp._io reads it."""
    import gmp._io as io_mod

    assert io_mod.shutil is shutil


# --------------------------------------------------------------------------- F1: the out-of-core hybrid's memory
def test_refreshing_the_ghosts_reads_the_counts_without_an_int64_copy(monkeypatch):
    """F1: ``gcount.astype(np.int64)`` was 8 B per row and worker beside the int32 counts (614 MB at 5M
    samples, 9.6M rows, 8 workers); drow is still ``df[count]``."""
    from types import SimpleNamespace

    from gmp.partition.distributed import state as state_mod

    rng = np.random.default_rng(0)
    gcount = rng.integers(0, 5, size=(100, 3)).astype(np.int32)
    df = np.linspace(0.0, 1.0, 6)
    fake = SimpleNamespace(shared=True, gcount=gcount, gdrow=np.zeros((100, 8)), df=df)
    state_mod.DistState.refresh_ghosts(fake, counts=True)
    assert np.array_equal(fake.gdrow[:, :3], df[gcount]) and not fake.gdrow[:, 3:].any()
    seen = []
    monkeypatch.setattr(state_mod.DK, "overwrite_rows", lambda pos, values, *rest: seen.append(values))
    state_mod.DistState.refresh_ghosts(fake, counts=True)
    assert seen[0] is gcount  # the counts themselves, no copy


def test_metis_runs_beside_the_signal_graph_only(monkeypatch):
    """F1: rank 0 kept the pair keys, their counts, the unique keys, the inverse, the weights, both endpoint
    arrays and the scipy matrix alive while METIS ran (about 3x the graph). At METIS's call only the graph
    it is given is held: xadj, adjncy and the edge weights as int64 (both directions), the vertex ids, degrees
    and weights."""
    import tracemalloc
    from types import SimpleNamespace

    from gmp.partition.distributed import start as start_mod

    num_vertices, num_keys = 2000, 1_000_000
    held = []

    def metis(xadj, adjncy, ew, vw, machine_of, *, seed, imbalance):
        held.append(tracemalloc.get_traced_memory()[0])
        return np.zeros(xadj.size - 1, dtype=np.int32)

    monkeypatch.setattr(start_mod.ML, "partition_signal_graph", metis)

    def pair_keys():  # made here and handed over: the test holds no reference to them
        rng = np.random.default_rng(1)
        u = rng.integers(0, num_vertices - 1, size=num_keys)
        v = u + 1 + rng.integers(0, num_vertices - 1 - u)
        keys = np.unique((u << 32) | v)  # distinct keys, as each process sends them
        return [keys, np.ones(keys.size, dtype=np.int64), np.arange(num_vertices, dtype=np.int64),
                np.full(num_vertices, 3, dtype=np.int64)]

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        got = pair_keys()
        num_edges = got[0].size
        cand = {}
        start_mod._root_partition(got, np.arange(4), np.random.default_rng(0), SimpleNamespace(max_imbalance=0.05),
                                  cand, 1)
    finally:
        tracemalloc.stop()
    assert cand["edges"] == num_edges and got == []
    graph = 8 * (num_vertices + 1) + 2 * 8 * 2 * num_edges + 3 * 8 * num_vertices  # xadj, adjncy, ew; vids, deg, vw
    assert held[0] - base <= graph + (1 << 20), (held[0] - base, graph)


# --------------------------------------------------------------------------- F9: every bench script has --help
#: the bench modules that are libraries of the others (their docstrings say how they are used)
BENCH_LIBRARIES = {"netns.py", "perf_split.py"}
BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py") if p.name not in BENCH_LIBRARIES))
def test_every_bench_script_prints_its_usage(script):
    """F9: dist_partition_ablation.py took --help for a dataset (DatasetError traceback) and
    tiered_checkpoint_run.py indexed sys.argv (IndexError)."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                         timeout=300, cwd=BENCH.parent)
    assert res.returncode == 0 and "usage:" in res.stdout and "Traceback" not in res.stderr, res.stderr[-2000:]


# --------------------------------------------------------------------------- F10: one sign for "vs random"
def test_the_bench_tables_sign_vs_random_as_the_docs_do():
    """F10: partition_bench printed 63.7% and train_bench 51.1% "(positive = less traffic)" where gmp partition,
    docs/report.md and docs/benchmarks.md say -63.7%."""
    import importlib
    import sys

    sys.path.insert(0, str(BENCH))
    try:
        partition_bench = importlib.import_module("partition_bench")
        train_bench = importlib.import_module("train_bench")
    finally:
        sys.path.remove(str(BENCH))
    metrics = {"batch_remote_reads": 2_954_711, "remote_accesses": 10, "epoch_unique_remote": 3,
               "reduction_vs_random": {"batch_remote_reads": 1 - 2_954_711 / 8_130_116, "remote_accesses": -0.05,
                                       "epoch_unique_remote": 0.5},
               "balance": {"samples": 1.0, "rows_held": 1.0}}
    table = partition_bench.format_table([{"dataset": "criteo-vocab-1m", "label": "hybrid", "result": {
        "metrics": metrics, "partition_seconds": 1.0, "peak_rss_bytes": 2**30}}])
    assert "| 2,954,711 | -63.7% | 10 | +5.0% | 3 | -50.0% |" in table, table
    assert train_bench.traffic_change(0.54 * (1 - 0.511), 0.54) == "-51.1%"
    assert train_bench.traffic_change(2.0, 1.0) == "+100.0%"
