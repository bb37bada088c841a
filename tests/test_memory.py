"""The memory cgroup reader (gmp/_memory.py) on fake /proc and /sys trees, and the refusals that use it:
a process in a 1.5 GiB cgroup on a 24 GiB host was killed (exit 137, no message) where the same request
was refused on the host, because the checks read only the host's available memory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gmp._memory as mem
from cli.main import app
from gmp.datasets.streaming import CommonOptions
from gmp.errors import ImportDataError

GIB = 1 << 30
MIB = 1 << 20

V1_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 {root} /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
"""
V2_MOUNTS = "30 23 0:27 {root} /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def fake_tree(tmp: Path, *, version: int, path: str, limits: dict[str, str], usage: int = 0,
              inactive: int = 0, mount_root: str = "/") -> Path:
    """A fake root: /proc/self/{cgroup,mountinfo} and the cgroup directories with ``limits`` (cgroup
    path -> the limit file's text) below the hierarchy's mount point."""
    root = tmp / "root"
    (root / "proc/self").mkdir(parents=True)
    if version == 1:
        (root / "proc/self/cgroup").write_text(f"5:cpu:/\n4:memory:{path}\n0::/\n")
        (root / "proc/self/mountinfo").write_text(V1_MOUNTS.format(root=mount_root))
        top = root / "sys/fs/cgroup/memory"
        limit_file, usage_file, stat = "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
    else:
        (root / "proc/self/cgroup").write_text(f"0::{path}\n")
        (root / "proc/self/mountinfo").write_text(V2_MOUNTS.format(root=mount_root))
        top = root / "sys/fs/cgroup"
        limit_file, usage_file, stat = "memory.max", "memory.current", "inactive_file"
    for cg, text in limits.items():
        rel = cg[len(mount_root):] if cg.startswith(mount_root) else cg
        d = top / rel.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / limit_file).write_text(text + "\n")
    leaf_rel = path[len(mount_root):] if path.startswith(mount_root) else path
    leaf = top / leaf_rel.lstrip("/")
    leaf.mkdir(parents=True, exist_ok=True)
    (leaf / usage_file).write_text(f"{usage}\n")
    (leaf / "memory.stat").write_text(f"cache 5\nactive_file 7\n{stat} {inactive}\n")
    return root


@pytest.mark.parametrize("version", [1, 2])
def test_the_limit_usage_and_room_of_a_cgroup(tmp_path, version):
    root = fake_tree(tmp_path, version=version, path="/jobs/a", limits={"/jobs/a": str(3 * GIB // 2)},
                     usage=500 * MIB, inactive=100 * MIB)
    got = mem.cgroup_memory(root)
    assert got == mem.CgroupMemory(limit=3 * GIB // 2, usage=400 * MIB, path="/jobs/a", version=version)
    assert got.available == 3 * GIB // 2 - 400 * MIB


@pytest.mark.parametrize("version", [1, 2])
def test_a_parents_limit_binds_its_child(tmp_path, version):
    unlimited = "9223372036854771712" if version == 1 else "max"
    root = fake_tree(tmp_path, version=version, path="/jobs/a/b",
                     limits={"/jobs": str(GIB), "/jobs/a": str(4 * GIB), "/jobs/a/b": unlimited})
    assert mem.cgroup_memory(root).limit == GIB


@pytest.mark.parametrize("version", [1, 2])
def test_no_limit_is_none(tmp_path, version):
    unlimited = "9223372036854771712" if version == 1 else "max"
    root = fake_tree(tmp_path, version=version, path="/a", limits={"/a": unlimited})
    assert mem.cgroup_memory(root) is None


def test_a_container_mount_maps_the_hosts_path(tmp_path):
    """Inside a container the mount's root is the container's cgroup (/docker/abc), mounted at the top."""
    root = fake_tree(tmp_path, version=1, path="/docker/abc", limits={"/docker/abc": str(2 * GIB)},
                     mount_root="/docker/abc")
    assert mem.cgroup_memory(root).limit == 2 * GIB


@pytest.mark.parametrize("broken", ["no proc", "no mount", "garbage"])
def test_an_unreadable_tree_is_no_limit_never_an_error(tmp_path, broken):
    root = fake_tree(tmp_path, version=2, path="/a", limits={"/a": str(GIB)})
    if broken == "no proc":
        (root / "proc/self/cgroup").unlink()
    elif broken == "no mount":
        (root / "proc/self/mountinfo").write_text("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n")
    else:
        (root / "sys/fs/cgroup/a/memory.max").write_text("lots\n")
    assert mem.cgroup_memory(root) is None


def test_available_memory_is_the_smaller_of_host_and_cgroup(tmp_path, monkeypatch):
    root = fake_tree(tmp_path, version=1, path="/j", limits={"/j": str(GIB)}, usage=GIB // 4)
    monkeypatch.setattr(mem, "ROOT", str(root))
    monkeypatch.setattr(mem, "host_available", lambda: 20 * GIB)
    assert mem.available_memory() == GIB - GIB // 4
    assert mem.memory_note() == " (the memory cgroup /j limits this process to 1.0 GiB)"
    monkeypatch.setattr(mem, "host_available", lambda: GIB // 8)
    assert mem.available_memory() == GIB // 8
    assert mem.memory_note() == ""  # the host's memory binds, not the cgroup


@pytest.fixture
def small_cgroup(tmp_path, monkeypatch):
    """This process seen in a 256 MiB memory cgroup on a host with 64 GiB free."""
    root = fake_tree(tmp_path, version=1, path="/small", limits={"/small": str(256 * MIB)})
    monkeypatch.setattr(mem, "ROOT", str(root))
    monkeypatch.setattr(mem, "host_available", lambda: 64 * GIB)


def test_the_import_block_is_refused_against_the_cgroup(small_cgroup):
    with pytest.raises(ImportDataError, match=r"`chunk_mb` 64 needs about 0\.5 GiB of memory, 0\.2 GiB is available "
                                              r"\(the memory cgroup /small limits this process to 0\.2 GiB\)"):
        CommonOptions(chunk_bytes=64 * MIB)


def test_a_huge_embedding_dim_is_refused_against_the_cgroup_before_training(small_cgroup, tmp_path):
    """``--embedding-dim 100000`` in a small cgroup: one line naming the flag and the cgroup (was exit 137)."""
    from train_data import make_ctr_dataset

    path = make_ctr_dataset(tmp_path / "ds", num_samples=40)
    res = CliRunner().invoke(app, ["train", "--dataset", str(path), "--embedding-dim", "100000"])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert re.match(r"^error: --embedding-dim 100000 needs about \d\.\d GiB .* more than the 0\.2 GiB of memory "
                    r"available \(the memory cgroup /small limits this process to 0\.2 GiB\); lower it", lines[0])


@pytest.mark.parametrize("flags,count", [(["--workers", "2000"], "2,000"), (["--topology", "40x50"], "2,000"),
                                         (["--workers", str(2**63)], f"{2**63:,}"),
                                         (["--topology", "99999999999999999999x1"], "99,999,999,999,999,999,999")])
def test_a_worker_count_whose_matrices_cannot_fit_is_one_line(small_cgroup, tmp_path, flags, count):
    """2,000 workers: 2,000 x 2,000 cost and traffic matrices (report.json read back) do not fit in 256 MiB;
    2**63 workers was a traceback, 1,000,000 a generic "out of memory" naming nothing."""
    _, line = refused_partition(tmp_path, flags)
    assert re.match(rf"^error: (topology|--workers) \S+: {count} workers \({count} x {count} cost and traffic "
                    r"matrices\) needs about [\d,.]+ GiB of memory, 0\.2 GiB is available", line), line


def refused_partition(tmp_path, flags):
    """``gmp partition`` of a 40-sample dataset with ``flags``: (the dataset, its one ``error:`` line)."""
    from train_data import make_ctr_dataset

    path = make_ctr_dataset(tmp_path / "ds", num_samples=40)
    res = CliRunner().invoke(app, ["partition", str(path), "--method", "random", *flags, "--out", str(tmp_path / "m")])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    return path, lines[0]


@pytest.mark.parametrize("flags,what", [(["--workers", "9"], "--workers 9"), (["--topology", "3x3"], "topology 3x3"),
                                        (["--topology", "9"], "topology 9")])
def test_a_worker_count_whose_json_no_reader_could_parse_is_one_line(tmp_path, monkeypatch, flags, what):
    """``--workers 7000`` on 6,000 samples fitted the host's memory and wrote 1.9 GB of report.json (N x N
    matrices as JSON) that ``gmp report`` could not read in 4 GB: the count is refused before any work.
    The limit is lowered to 8 here so that the test makes no big matrix."""
    import gmp.topology as topology

    monkeypatch.setattr(topology, "MAX_PLACEMENT_WORKERS", 8)
    path, line = refused_partition(tmp_path, flags)
    assert re.match(rf"^error: {what}: 9 workers would write about [\d.]+ GB of N x N matrices .* as JSON into "
                    r"manifest\.json and report\.json, .*at most 8 workers", line), line
    assert not (tmp_path / "m").exists()
    res = CliRunner().invoke(app, ["partition", str(path), "--method", "random", "--workers", "8", "--out",
                                   str(tmp_path / "m"), "--no-plots"])
    assert res.exit_code == 0, res.output


def test_a_header_too_big_to_parse_is_refused_unread(tmp_path, monkeypatch):
    """A report.json of 1.9 GB (written before the limit above) was parsed whole and killed ``gmp report``; a
    gmp JSON file over MAX_HEADER_BYTES is one line naming it and its size, read no further."""
    import gmp._io as io
    from train_data import make_ctr_dataset

    path = make_ctr_dataset(tmp_path / "ds", num_samples=40)
    man = tmp_path / "m"
    res = CliRunner().invoke(app, ["partition", str(path), "--method", "random", "--workers", "2", "--out", str(man),
                                   "--no-plots"])
    assert res.exit_code == 0, res.output
    size = (man / "report.json").stat().st_size
    monkeypatch.setattr(io, "MAX_HEADER_BYTES", size - 1)  # report.json is now "too big"; manifest.json is smaller
    assert (man / "manifest.json").stat().st_size < size
    res = CliRunner().invoke(app, ["report", str(man), "--format", "json"])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert re.match(rf"^error: .*report\.json is 0 MiB, expected at most 0 MiB for a gmp header", lines[0]), lines[0]


def test_a_header_claiming_billions_of_embeddings_is_refused_on_open(small_cgroup, tmp_path):
    """``data info`` and ``partition`` on a header saying 2.5e9 embeddings were killed; now refused on open."""
    import json

    from gmp.datasets.format import FieldInfo, header_sha256, load_dataset
    from gmp.errors import DatasetError
    from train_data import make_ctr_dataset

    path = make_ctr_dataset(tmp_path / "ds", num_samples=40)
    head = json.loads((path / "dataset.json").read_text())
    head["num_embeddings"] = 2_500_000_000
    last = [f for f in head["fields"] if f["kind"] != "dense"][-1]
    last["num_values"] = 2_500_000_000 - last["offset"]
    last["ranges"] = [[last["offset"], 2_500_000_000]]
    # resealed, as a consistent header of that size would be (dataset schema 3 binds the header to its hash)
    head["sha256"] = header_sha256(head, [FieldInfo.from_json(f) for f in head["fields"]])
    (path / "dataset.json").write_text(json.dumps(head))
    with pytest.raises(DatasetError, match=r"dataset.json: num_embeddings 2,500,000,000 \(per-id counts of 16 bytes\) "
                                           r"needs about 37\.3 GiB of memory, 0\.2 GiB is available"):
        load_dataset(path, verify=False)
    res = CliRunner().invoke(app, ["data", "info", str(path)])
    assert res.exit_code == 2 and res.output.startswith("error: ") and len(res.output.splitlines()) == 1, res.output


def test_a_read_only_install_caches_numba_kernels_in_a_temp_directory(tmp_path):
    """A package directory that takes no cache (here: below a regular file, refused even to root) made numba
    raise "no locator available" at import; gmp points numba at a per-user temporary directory instead."""
    from types import SimpleNamespace

    from gmp._numba_cache import configure, fallback_dir

    (tmp_path / "file").write_text("x")
    config = SimpleNamespace(CACHE_DIR="")
    assert configure(config, package_dir=tmp_path / "file" / "gmp", environ={}) == str(fallback_dir())
    assert config.CACHE_DIR == str(fallback_dir()) and fallback_dir().is_dir()
    # a writable install, or the user's own NUMBA_CACHE_DIR, is left to numba
    config = SimpleNamespace(CACHE_DIR="")
    assert configure(config, package_dir=tmp_path / "gmp", environ={}) is None and config.CACHE_DIR == ""
    assert configure(config, package_dir=tmp_path / "file" / "gmp", environ={"NUMBA_CACHE_DIR": "/x"}) is None


def test_a_libffm_file_with_thousands_of_field_numbers_is_refused_before_training(small_cgroup, tmp_path):
    """A 750 KB libffm file with 51,760 field numbers imported, then ``train --model dcn`` was killed at 9 GB:
    the deep input (fields x (dim + 1) values a sample) was not estimated. Here 2,000 fields in 40 lines: the
    refusal names the fields and the re-import, not only the embedding dim."""
    lines = [f"{i % 2} " + " ".join(f"{(i % 20) * 100 + j}:{i}:1" for j in range(100)) for i in range(40)]
    (tmp_path / "wide.libffm").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["data", "import", "libffm", str(tmp_path / "wide.libffm"), "--out",
                                   str(tmp_path / "ds"), "--test-fraction", "0.25"])
    assert res.exit_code == 0 and "in 2000 fields" in res.output, res.output
    res = CliRunner().invoke(app, ["train", "--dataset", str(tmp_path / "ds"), "--model", "dcn"])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert re.match(r"^error: --embedding-dim 16 with the dataset's 2,000 fields makes a deep input of 34,000 values "
                    r"per sample that needs about [\d.]+ GiB for model 'dcn' .*re-import with fewer fields",
                    lines[0]), lines[0]


@pytest.fixture
def tiny_cgroup(tmp_path, monkeypatch):
    """This process seen in a memory cgroup with 64 MiB of room on a host with 64 GiB free."""
    root = fake_tree(tmp_path / "cg", version=2, path="/tiny", limits={"/tiny": str(GIB)}, usage=GIB - 64 * MIB)
    monkeypatch.setattr(mem, "ROOT", str(root))
    monkeypatch.setattr(mem, "host_available", lambda: 64 * GIB)


def test_an_in_memory_hybrid_that_cannot_fit_is_refused_before_work(tiny_cgroup, tmp_path):
    """Issue 37: the in-memory hybrid on a graph bigger than the memory ran until the kernel killed it; its
    peak is estimated from the header and a run that cannot fit is one line naming the estimate, the memory
    available and the out-of-core path, before any array is read or any output written."""
    from train_data import make_ctr_dataset

    path = make_ctr_dataset(tmp_path / "ds", num_samples=40)
    res = CliRunner().invoke(app, ["partition", str(path), "--method", "hybrid", "--workers", "2", "--no-plots",
                                   "--out", str(tmp_path / "m")])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert re.match(r"^error: --method hybrid in memory on 40 samples, [\d,]+ edges, 23 embeddings and 2 workers "
                    r"\(estimated peak 0\.\d GiB\) needs about 0\.\d GiB of memory, 0\.1 GiB is available \(the memory "
                    r"cgroup /tiny limits this process to 1\.0 GiB\); out of core \(--chunk-samples\) needs as much memory or "
                    r"more below 5,000,000 samples ",
                    lines[0]), lines[0]
    assert not (tmp_path / "m").exists()
    # the same cgroup: a method that holds no graph-sized state is not refused
    res = CliRunner().invoke(app, ["partition", str(path), "--method", "random", "--workers", "2", "--no-plots",
                                   "--out", str(tmp_path / "m")])
    assert res.exit_code == 0, res.output


#: measured peaks (``/usr/bin/time -v``, maximum resident set size, kB) of ``gmp partition DIR --workers 8
#: --method hybrid --no-plots`` on ``gmp data synth --preset criteo-kaggle --samples N --scale 1 --seed 0``
#: and the rows that draw uses (the report's active embeddings; docs/synth.md, "Memory pre-check"), with two
#: candidate bands refined 2 at a time (2 cores); the 20M peak was above the estimate before the refined
#: candidates' sweep states were counted
MEASURED = {1_000_000: (1_941_076, 2_574_753), 5_000_000: (3_691_484, 9_587_552),
            10_000_000: (6_504_156, 15_882_734), 20_000_000: (11_078_008, 23_883_882)}


@pytest.mark.parametrize("samples", sorted(MEASURED))
def test_the_hybrid_estimate_bounds_the_measured_peak(samples):
    """With the used rows counted (what decides a refusal) the estimate is at or above the measured peak of
    the whole command and at most 25% above it; from the header alone it is an upper bound."""
    from gmp.datasets.synth import PRESETS
    from gmp.partition.hybrid import peak_memory_bytes

    sizes = list(PRESETS["criteo-kaggle"].cardinalities)  # at --scale 1: the header's num_values
    assert sum(sizes) == 33_762_577
    kb, used = MEASURED[samples]
    measured = kb * 1024
    counted = peak_memory_bytes(samples, 26 * samples, 33_762_577, 8, used_rows=used)
    assert measured <= counted <= 1.25 * measured, (counted / GIB, measured / GIB)
    assert counted <= peak_memory_bytes(samples, 26 * samples, 33_762_577, 8, field_sizes=sizes)


def test_the_hybrid_estimate_counts_the_refined_candidates_sweep_states(monkeypatch):
    """Hand-computed: 10,000 samples, 260,000 edges, 50,000 ids of which 30,000 used, 8 workers (a marginals
    row of 8 float64), 1,000 row pairs, two candidates at once. Refined (``rounds`` > 0), each candidate
    frees its pairs and holds a sweep state: the larger phase is the refined one."""
    from gmp.partition import hybrid
    from gmp.partition.hybrid import BASE_BYTES, Options, peak_memory_bytes

    monkeypatch.setattr(hybrid.numba, "get_num_threads", lambda: 2)
    s, e, v, used, pairs = 10_000, 260_000, 50_000, 30_000, 1_000
    shared = 8 * e + 20 * s + 4 * s + (4 + 4 * 8) * used  # edges, per-sample arrays, one kept placement
    assert shared == 2_080_000 + 200_000 + 40_000 + 1_080_000
    building = 24 * s + (4 * 8 + 13) * used + 40 * pairs  # one candidate with its signal graph
    assert building == 1_630_000
    refining = 24 * s + (4 * 8 + 13) * used + 64 * used + 8 * s  # its pairs freed, its marginals and order held
    assert refining == 3_590_000
    got = peak_memory_bytes(s, e, v, 8, Options(coarse_pairs=pairs), used_rows=used)
    assert got == BASE_BYTES + shared + 2 * refining == BASE_BYTES + 10_580_000
    # without rounds nothing is refined: the signal-graph phase
    assert peak_memory_bytes(s, e, v, 8, Options(coarse_pairs=pairs, rounds=0), used_rows=used) == \
        BASE_BYTES + shared + 2 * building


def test_count_used_rows_reads_the_ids_in_blocks():
    import numpy as np

    from gmp.partition.hybrid import count_used_rows

    ids = np.array([5, 1, 5, 9, 1, 0, 9], dtype=np.int32)
    assert count_used_rows(ids, 12, block=3) == len(set(ids.tolist())) == 4


def test_the_used_rows_are_counted_before_a_refusal_and_only_then(monkeypatch):
    """The header bounds the rows used (22.8M at 5M criteo-kaggle samples, 9.6M used): a run refused by the
    header estimate but fitting with the rows counted starts; one that cannot fit even with no used row is
    refused without the pass over the ids."""
    from types import SimpleNamespace

    import numpy as np

    import psutil
    from gmp.api import _check_hybrid_memory
    from gmp.datasets.synth import PRESETS
    from gmp.errors import PartitionError
    from gmp.partition import hybrid
    from gmp.partition.hybrid import Options, peak_memory_bytes

    sizes = PRESETS["criteo-kaggle"].cardinalities
    s, e, v = 5_000_000, 26 * 5_000_000, sum(sizes)
    ids = np.arange(9_587_552, dtype=np.int32)  # stands in for the edges: its distinct ids are the rows used
    ds = SimpleNamespace(num_samples=s, num_edges=e, num_embeddings=v, indices=ids,
                         categorical_fields=[SimpleNamespace(num_values=k) for k in sizes])
    header = peak_memory_bytes(s, e, v, 8, field_sizes=list(sizes))
    counted = peak_memory_bytes(s, e, v, 8, used_rows=ids.size)
    assert counted < header
    monkeypatch.setattr(psutil.Process, "memory_info", lambda self: SimpleNamespace(rss=0))
    passes = []
    real = hybrid.count_used_rows
    monkeypatch.setattr(hybrid, "count_used_rows", lambda *a, **k: passes.append(1) or real(*a, **k))
    monkeypatch.setattr(mem, "available_memory", lambda: (counted + header) // 2)
    _check_hybrid_memory(ds, 8, Options())  # fits once counted
    assert passes == [1]
    monkeypatch.setattr(mem, "available_memory", lambda: counted - 1)
    with pytest.raises(PartitionError, match=rf"\(estimated peak {counted / GIB:.1f} GiB\)") as err:
        _check_hybrid_memory(ds, 8, Options())
    assert err.value.param == "chunk_samples" and passes == [1, 1]
    monkeypatch.setattr(mem, "available_memory", lambda: GIB)  # not even the edges fit: no pass
    with pytest.raises(PartitionError, match=rf"\(estimated peak {header / GIB:.1f} GiB\)"):
        _check_hybrid_memory(ds, 8, Options())
    assert passes == [1, 1]


def test_the_refusal_sends_small_runs_nowhere_out_of_core_would_not_help(monkeypatch):
    """Out of core (one process) peaked above the in-memory run below 5M samples (1M: 2.05 against 1.87 GiB,
    docs/distributed.md); the refusal sent every run there. From 5M it still names ``chunk_samples``."""
    from types import SimpleNamespace

    import numpy as np

    import psutil
    from gmp.api import _check_hybrid_memory
    from gmp.errors import PartitionError
    from gmp.partition.hybrid import Options

    monkeypatch.setattr(psutil.Process, "memory_info", lambda self: SimpleNamespace(rss=0))
    monkeypatch.setattr(mem, "available_memory", lambda: GIB // 4)

    def data(s):
        return SimpleNamespace(num_samples=s, num_edges=26 * s, num_embeddings=33_762_577,
                               indices=np.zeros(1, dtype=np.int32),
                               categorical_fields=[SimpleNamespace(num_values=1_298_560)] * 26)

    with pytest.raises(PartitionError) as err:
        _check_hybrid_memory(data(1_000_000), 8, Options())
    assert "out of core (`chunk_samples`) needs as much memory or more below 5,000,000 samples" in str(err.value)
    assert "partition out of core with" not in str(err.value) and err.value.param == "workers"
    with pytest.raises(PartitionError) as err:
        _check_hybrid_memory(data(8_000_000), 8, Options())
    assert "partition out of core with `chunk_samples` 2000000 (the same hybrid streamed in blocks, slower" in \
        str(err.value) and err.value.param == "chunk_samples"
