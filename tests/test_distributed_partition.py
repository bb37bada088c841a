"""The distributed hybrid (gmp/partition/distributed/): one process against a slow reference of
Algorithm 1, streamed chunks against the in-memory shard, and 2-3 gloo processes under torchrun
(hard caps, determinism, quality near one process, the manifest the CLI writes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gmp.comm import LocalEngine
from gmp.datasets.format import FieldInfo, load_dataset, write_dataset
from gmp.errors import PartitionError
from gmp.graph import build_graph
from gmp.manifest import load_manifest
from gmp.metrics import compute_metrics
from gmp.partition._common import sample_cap
from gmp.partition.distributed import partition_distributed
from gmp.partition.distributed.exchange import Mesh, shard_range
from gmp.partition.hybrid import Options, default_weights, soft_count_table
from gmp.topology import resolve_topology
import torchrun_helpers

HERE = Path(__file__).parent
ROOT = HERE.parent


def make_community_dataset(out: Path, *, num_samples=900, num_fields=6, values=40, communities=4, seed=0):
    """Samples of ``communities`` planted groups: each field's value comes from the group's slice with
    probability 0.7, else from the whole field (a few values hot). The id space has unused ids."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, communities, num_samples)
    rows = []
    for i in range(num_samples):
        ids = []
        for f in range(num_fields):
            if rng.random() < 0.7:
                v = group[i] * (values // communities) + rng.integers(0, values // communities)
            else:
                v = min(int(rng.zipf(1.5)) - 1, values - 1)
            ids.append(f * (values + 3) + int(v))  # 3 ids per field never occur
        rows.append(sorted(set(ids)))
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.array([i for r in rows for i in r])
    fields = [FieldInfo(f"C{f}", "categorical", values + 3, f * (values + 3)) for f in range(num_fields)]
    write_dataset(out, indptr=indptr, indices=indices, labels=np.zeros(num_samples, np.float32), dense=None,
                  fields=fields, num_embeddings=num_fields * (values + 3), source={"format": "test"},
                  test_fraction=0.1)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = make_community_dataset(tmp_path_factory.mktemp("dist") / "ds")
    return path, load_dataset(path)


def run_local(ds, workers, **kw):
    block = kw.pop("block_samples", 64)
    chunk = kw.pop("chunk_samples", None)
    return partition_distributed(ds.indptr, ds.indices, ds.num_embeddings, resolve_topology(workers, None, None),
                                 seed=3, options=Options(**kw), engine=LocalEngine(1), block_samples=block,
                                 chunk_samples=chunk)


# --------------------------------------------------------------------------
# a slow reference of Algorithm 1's sweeps (gmp.partition.hybrid's module docstring), gamma = 0
# --------------------------------------------------------------------------
def reference_rounds(indptr, indices, sw, prim, num_workers, rounds, options):
    """Sequential sample sweep then embedding sweep, ``rounds`` times, in plain Python."""
    sw, prim = sw.copy(), prim.copy()
    used = np.flatnonzero(np.bincount(indices, minlength=prim.size))
    n, s = num_workers, indptr.size - 1
    cost = 1.0 - np.eye(n)
    scap, pcap = sample_cap(s, n, options.max_imbalance), sample_cap(used.size, n, options.max_imbalance)
    alpha, beta = default_weights(n, s, used.size)
    f = soft_count_table(scap, s / n, options.batch_size)
    df = np.diff(f)
    count = np.zeros((prim.size, n), dtype=np.int64)
    for i in range(s):
        for x in indices[indptr[i]:indptr[i + 1]]:
            count[x, sw[i]] += 1
    sload = np.bincount(sw, minlength=n)
    pload = np.bincount(prim[used], minlength=n)
    for _ in range(rounds):
        for i in range(s):
            xs, a = indices[indptr[i]:indptr[i + 1]], sw[i]
            gain = [sum(cost[prim[x], b] * df[count[x, b]] for x in xs) for b in range(n)]
            stay = sum(cost[prim[x], a] * df[count[x, a] - 1] for x in xs)
            best, best_delta = a, -1e-9
            for b in range(n):
                if b != a and sload[b] < scap:
                    delta = gain[b] - stay + alpha * (sload[b] - sload[a] + 1)
                    if delta < best_delta:
                        best, best_delta = b, delta
            if best != a:
                count[xs, a] -= 1
                count[xs, best] += 1
                sload[a] -= 1
                sload[best] += 1
                sw[i] = best
        for x in used:
            p = prim[x]
            total = [sum(f[count[x, w]] * cost[q, w] for w in range(n)) for q in range(n)]
            best, best_delta = p, -1e-9
            for q in range(n):
                if q != p and pload[q] < pcap:
                    delta = total[q] - total[p] + beta * (pload[q] - pload[p] + 1)
                    if delta < best_delta:
                        best, best_delta = q, delta
            if best != p:
                pload[p] -= 1
                pload[best] += 1
                prim[x] = best
    return sw, prim


def test_one_process_equals_reference_sweeps(data):
    """P = 1: from the same start, the rounds make exactly the moves of the sequential reference."""
    _, ds = data
    opts = dict(levels=1, gamma=0.0, tol=0.0, replication_budget=0.0)
    start = run_local(ds, 4, rounds=0, **opts)
    done = run_local(ds, 4, rounds=2, **opts)
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    sw, prim = reference_rounds(indptr, indices, np.asarray(start.sample_worker), np.asarray(start.embedding_primary),
                                4, 2, Options(**opts))
    assert [r["moved_samples"] for r in done.info["rounds"]][1] > 0
    np.testing.assert_array_equal(done.sample_worker, sw)
    used = np.bincount(indices, minlength=ds.num_embeddings) > 0
    np.testing.assert_array_equal(np.asarray(done.embedding_primary)[used], prim[used])


def test_random_start_is_balanced_within_one(data):
    _, ds = data
    p = run_local(ds, 4, rounds=0, levels=1)
    loads = np.bincount(p.sample_worker, minlength=4)
    assert loads.max() - loads.min() <= 1
    used = np.bincount(np.asarray(ds.indices), minlength=ds.num_embeddings) > 0
    ploads = np.bincount(np.asarray(p.embedding_primary)[used], minlength=4)
    assert ploads.max() - ploads.min() <= 1


def test_streamed_chunks_equal_in_memory(data):
    """Out of core (chunks of 100 samples read from the memory map) gives the same placement."""
    _, ds = data
    a = run_local(ds, 4, levels=1, rounds=3)
    b = run_local(ds, 4, levels=1, rounds=3, chunk_samples=100)
    np.testing.assert_array_equal(a.sample_worker, b.sample_worker)
    np.testing.assert_array_equal(a.embedding_primary, b.embedding_primary)
    np.testing.assert_array_equal(a.secondary_workers, b.secondary_workers)


def test_secondaries_are_the_global_top_k(data):
    """2D step: per worker the budget's highest f(c) * C rows (ties: lower id), never the primary's."""
    _, ds = data
    p = run_local(ds, 4, replication_budget=0.05)
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    sw, prim = np.asarray(p.sample_worker), np.asarray(p.embedding_primary)
    count = np.zeros((ds.num_embeddings, 4), dtype=np.int64)
    np.add.at(count, (indices, np.repeat(sw, np.diff(indptr))), 1)
    f = soft_count_table(p.info["sample_cap"], ds.num_samples / 4, Options().batch_size)
    budget = int(0.05 * p.info["num_used_embeddings"])
    sec = {w: set() for w in range(4)}
    for e in range(ds.num_embeddings):
        for w in p.secondary_workers[p.secondary_indptr[e]:p.secondary_indptr[e + 1]]:
            sec[int(w)].add(e)
    for w in range(4):
        ids = [e for e in range(ds.num_embeddings) if prim[e] != w and count[e, w] > 0]
        ids.sort(key=lambda e: (-f[count[e, w]], e))
        assert sec[w] == set(ids[:budget])


def test_the_mesh_splits_room_exactly():
    """The per-process quotas of every worker sum to the room (the hard cap's guarantee)."""

    class Fake:
        def __init__(self, rank, size):
            self.world_size, self.local_workers = size, [rank]

    room = np.array([0, 1, 5, 7, 12, 3])
    for turn in range(4):
        total = sum(Mesh(Fake(r, 3)).split_room(room, turn) for r in range(3))
        np.testing.assert_array_equal(total, room)
    assert [shard_range(10, 3, r) for r in range(3)] == [(0, 3), (3, 6), (6, 10)]
    assert [shard_range(2, 3, r) for r in range(3)] == [(0, 0), (0, 1), (1, 2)]  # an empty shard
    with pytest.raises(PartitionError, match="up to 64 processes"):
        Mesh(Fake(0, 65))


def test_init_other_than_random_is_refused(data):
    _, ds = data
    with pytest.raises(PartitionError, match="init='bicut'"):
        run_local(ds, 4, init="bicut")
    with pytest.raises(PartitionError, match="`block_samples` must be an integer >= 1, got 0"):
        run_local(ds, 4, block_samples=0)


# --------------------------------------------------------------------------
# under torchrun (gloo)
# --------------------------------------------------------------------------
def torchrun(nproc: int, args: list[str], *, timeout: float = 240) -> subprocess.CompletedProcess:
    return torchrun_helpers.torchrun(nproc, args, timeout=timeout, cwd=ROOT)


def worker(nproc: int, path, out: Path, runs: list[dict]) -> dict:
    """tests/dist_partition_worker.py under torchrun; rank 0's placement of each run (or its errors)."""
    res = torchrun(nproc, [str(HERE / "dist_partition_worker.py"), str(path), str(out), json.dumps(runs)])
    assert res.returncode == 0, res.stderr[-3000:]
    got = {}
    for run in runs:
        f = out / f"{run['name']}.npz"
        got[run["name"]] = (dict(np.load(f)) if f.exists() else
                            [(out / f"{run['name']}.rank{r}.err").read_text() for r in range(nproc)])
    return got


def as_placement(a: dict, n: int):
    from gmp.placement import Placement

    return Placement.edge_cut(n, a["sample_worker"], a["primary"]).with_secondaries(a["sec_indptr"], a["sec_workers"])


def assert_caps(ds, a: dict, n: int, max_imbalance: float = 1.05) -> None:
    used = np.bincount(np.asarray(ds.indices), minlength=ds.num_embeddings) > 0
    assert np.bincount(a["sample_worker"], minlength=n).max() <= sample_cap(ds.num_samples, n, max_imbalance)
    assert np.bincount(a["primary"][used], minlength=n).max() <= sample_cap(int(used.sum()), n, max_imbalance)


@pytest.mark.distributed
def test_processes_keep_caps_are_deterministic_and_near_one_process(data, tmp_path):
    """3 processes, flat topology: twice the same placement, the caps, and within 10% of one process
    (the large-graph start: the portfolio, tested below, would refine 20 candidates). The flat sweep
    runs beside the multilevel start (``flat_beside_samples=1``); it loses here, and the placement is
    the run's without it (``alone``): the multilevel one, restored after the flat sweep."""
    path, ds = data
    big = {"portfolio_edges": 0}
    runs = [{"name": f"run{r}", "block_samples": 32, "options": {**big, "flat_beside_samples": 1}} for r in range(2)]
    got = worker(3, path, tmp_path, runs + [{"name": "alone", "block_samples": 32,
                                             "options": {**big, "flat_beside_samples": 0}}])
    a, b = got["run0"], got["run1"]
    for key in ("sample_worker", "primary", "sec_indptr", "sec_workers"):
        np.testing.assert_array_equal(a[key], b[key])  # deterministic for a seed and process count
        np.testing.assert_array_equal(a[key], got["alone"][key])
    info = json.loads(str(a["info"]))
    assert info["distributed"]["processes"] == 3
    fb = info["multilevel"]["flat_beside"]
    assert fb["chosen"] == "multilevel" and fb["multilevel_score"] < fb["flat_score"]
    assert "flat_beside" not in json.loads(str(got["alone"]["info"]))["multilevel"]
    assert_caps(ds, a, 4)
    # quality: the batch remote reads within 10% of the one-process run's on this small graph
    graph, topo = build_graph(ds), resolve_topology(4, None, None)
    reads = [compute_metrics(graph, p, topo, seed=0)["batch_remote_reads"] for p in (run_local(ds, 4, **big),
                                                                                    as_placement(a, 4))]
    assert reads[1] <= 1.10 * reads[0], reads


PAIRS_OPTIONS = {"levels": 1, "alpha": 0.0, "beta": 0.0, "gamma": 0.0, "max_imbalance": 2.0,
                 "replication_budget": 0.0}


def host_needs(path, nproc: int, workers: int) -> list[int]:
    """``memory.bytes_to_come`` of each of ``nproc`` processes on the dataset at ``path``: its ghosts (the ids
    its samples touch) and owned rows (the used ids ``x % nproc == rank``), counted here from the CSR."""
    from gmp.partition.distributed.memory import bytes_to_come

    ds = load_dataset(path)
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    used = np.unique(indices)
    needs = []
    for r in range(nproc):
        s0, s1 = shard_range(ds.num_samples, nproc, r)
        ghosts = np.unique(indices[indptr[s0]:indptr[s1]]).size
        needs.append(bytes_to_come(ghosts, int(np.sum(used % nproc == r)), s1 - s0, workers, streamed=False))
    return needs


@pytest.fixture(scope="module")
def two_processes(data, tmp_path_factory):
    """One torchrun launch of 2 processes for the two tests below (start-up is most of a launch's time): the
    runs of the hierarchical test on ``data`` and those of the carry-private test on the pairs dataset."""
    path, _ = data
    root = tmp_path_factory.mktemp("two_processes")
    pairs = str(make_pairs_dataset(root / "pairs"))
    hier = {"topology": "2x2", "block_samples": 32}
    hierarchical = [
        {"name": "hier", **hier},
        {"name": "mem", **hier, "project_block": 128},
        {"name": "chunked", **hier, "project_block": 128, "chunk_samples": 100},
        {"name": "flat_chunked", "options": {"levels": 1}, "chunk_samples": 70},
        {"name": "flat_mem", "options": {"levels": 1}},
        # the memory pre-check: both processes on this host, so their needs add up
        {"name": "enough_memory", "options": {"levels": 1}, "available_bytes": sum(host_needs(path, 2, 4))},
        {"name": "short_of_memory", "options": {"levels": 1}, "available_bytes": sum(host_needs(path, 2, 4)) - 1},
        {"name": "mismatch", "seed_plus_rank": True},
        {"name": "other_data", "sha_by_rank": True},  # same shape, another dataset (two days of one size)
    ]
    flat = {"topology": "2", "block_samples": 8, "dataset": pairs}
    pair_runs = [
        {"name": "carry", **flat, "options": PAIRS_OPTIONS},
        {"name": "streamed", **flat, "options": PAIRS_OPTIONS, "chunk_samples": 20},
        {"name": "single_vertex", **flat, "options": {**PAIRS_OPTIONS, "carry_private": False}},
    ]
    got = worker(2, path, root, pair_runs + hierarchical)  # the runs that fail on purpose last, as before
    return {"hierarchical": {r["name"]: got[r["name"]] for r in hierarchical},
            "pairs": {r["name"]: got[r["name"]] for r in pair_runs}, "pairs_path": pairs}


@pytest.mark.distributed
def test_hierarchical_topology_streamed_chunks_and_mismatched_ranks(data, two_processes):
    """2 processes: a 2x2 topology keeps the caps and stays within 10% of one process on it (cost-weighted
    remote accesses too); --chunk-samples gives the in-memory distributed placement; ranks given
    different seeds all stop with the same one-line error."""
    path, ds = data
    got = two_processes["hierarchical"]
    topo = resolve_topology(None, "2x2", None)
    assert_caps(ds, got["hier"], 4)
    graph = build_graph(ds)
    one = partition_distributed(ds.indptr, ds.indices, ds.num_embeddings, topo, seed=3, options=Options(),
                                engine=LocalEngine(1))
    m_one, m_many = (compute_metrics(graph, p, topo, seed=0) for p in (one, as_placement(got["hier"], 4)))
    for key in ("batch_remote_reads", "remote_accesses_weighted"):
        assert m_many[key] <= 1.10 * m_one[key], (key, m_one[key], m_many[key])
    for a, b in (("mem", "chunked"), ("flat_mem", "flat_chunked")):
        for key in ("sample_worker", "primary", "sec_indptr", "sec_workers"):
            np.testing.assert_array_equal(got[a][key], got[b][key])
    assert json.loads(str(got["chunked"]["info"]))["distributed"]["chunk_samples"] == 100
    for name, differ in (("mismatch", "(seed=4 on rank 1, seed=3 on rank 0)"), ("other_data", "(dataset='")):
        errors = got[name]
        assert errors[0] == errors[1] and f"ranks [1] differing from rank 0 {differ}" in errors[0], errors
        assert "\n" not in errors[0]


def make_pairs_dataset(out: Path, *, num_pairs=64, num_private=3):
    """Sample i and sample i + num_pairs share one row; each also has ``num_private`` rows of its own.
    The partners lie on different processes' shards (2 processes), and so do half the private rows'
    owners. Remote reads 0 is the optimum: every pair on the worker of its shared row's primary."""
    rows = []
    for i in range(2 * num_pairs):
        own = 2 * num_pairs + np.arange(i * num_private, (i + 1) * num_private)
        rows.append([i % num_pairs, *own.tolist()])
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.array([x for r in rows for x in r])
    num_embeddings = int(indices.max()) + 1
    write_dataset(out, indptr=indptr, indices=indices, labels=np.zeros(indptr.size - 1, np.float32), dense=None,
                  fields=[FieldInfo("C0", "categorical", num_embeddings, 0)], num_embeddings=num_embeddings,
                  source={"format": "test"}, test_fraction=0.0)
    return out


@pytest.mark.distributed
def test_a_host_short_of_memory_is_refused_before_the_start(data, two_processes):
    """The pre-check adds up the needs of the processes of one host (both here): with exactly their sum
    available the run goes on; with a byte less every rank stops with the same line naming the ranks,
    the estimate and the way out. Each process alone would fit (its need is at most 60% of the sum)."""
    path, _ = data
    needs = host_needs(path, 2, 4)
    assert max(needs) < 0.6 * sum(needs)
    got = two_processes["hierarchical"]
    assert isinstance(got["enough_memory"], dict)
    errs = got["short_of_memory"]
    assert isinstance(errs, list) and len(set(errs)) == 1, errs
    gib = 2.0 ** 30
    assert (f"the 2 processes on the host of ranks [0, 1] need about {sum(needs) / gib:,.1f} GiB more of memory"
            in errs[0]), errs[0]
    assert f"{(sum(needs) - 1) / gib:,.1f} GiB is available there" in errs[0]
    assert "run fewer processes per host" in errs[0] and "\n" not in errs[0]


def test_hosts_short_of_memory_add_up_their_processes(monkeypatch):
    """Ranks grouped by host key: a host's needs summed against the least memory its processes saw. The
    key is torchrun's node rank where it is set (one name may serve containers on several hosts)."""
    from gmp.partition.distributed.memory import host_key, hosts_short

    table = [(7, 6, 10), (9, 6, 10), (7, 5, 11), (9, 3, 10)]  # host 7: ranks 0, 2 need 11 > 10 available
    assert hosts_short(table) == [([0, 2], 11.0, 10.0)]
    assert hosts_short([(7, 5, 10), (7, 5, 10)]) == []  # exactly what is there fits
    monkeypatch.delenv("GROUP_RANK", raising=False)
    assert host_key() >= 2**32
    monkeypatch.setenv("GROUP_RANK", "3")
    assert host_key() == 3


@pytest.mark.distributed
def test_processes_carry_private_rows_to_the_optimum(two_processes):
    """carry_private across processes. On the pairs graph the single-vertex sweep leaves split pairs
    pinned by their private rows (each would turn remote); moving a sample with its private rows
    joins every pair in round 1 (no balance terms, loose caps): 0 expected remote reads with 1 and 2
    processes, every private row's primary (on its owner, which may be the other process) with its
    sample, the same placement streamed, and more than 0 reads with ``carry_private=False``."""
    ds = load_dataset(two_processes["pairs_path"])
    opts = PAIRS_OPTIONS
    got = two_processes["pairs"]
    for key in ("sample_worker", "primary"):
        np.testing.assert_array_equal(got["carry"][key], got["streamed"][key])
    one = run_local(ds, 2, block_samples=8, **opts)
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    user = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    private = np.bincount(indices, minlength=ds.num_embeddings)[indices] == 1
    reads = {}
    for name, sw, prim, info in [("carry", got["carry"]["sample_worker"], got["carry"]["primary"],
                                  json.loads(str(got["carry"]["info"]))),
                                 ("one", np.asarray(one.sample_worker), np.asarray(one.embedding_primary), one.info),
                                 ("single_vertex", got["single_vertex"]["sample_worker"],
                                  got["single_vertex"]["primary"], json.loads(str(got["single_vertex"]["info"])))]:
        remote = sw[user] != prim[indices]  # (sample, row) edges read from another worker
        reads[name] = (info["rounds"][-1]["expected_remote_reads"], int(remote.sum()), int(remote[private].sum()))
    assert reads["carry"] == (0.0, 0, 0) and reads["one"] == (0.0, 0, 0), reads
    assert reads["single_vertex"][0] > 0 and reads["single_vertex"][1] > 0, reads


@pytest.mark.distributed
def test_python_under_torchrun_equals_the_cli(data, tmp_path):
    """The command under torchrun writes a valid manifest; gmp.partition_dataset(..., distributed=True) called
    on every process of torchrun starts and closes the process group itself and writes the manifest the
    command writes: the same arrays and metrics. Without the portfolio start (``portfolio_edges=0``, given
    both ways): its 16 candidates under torchrun took 3/4 of the test's time, and
    test_small_graphs_get_the_portfolio_start covers it."""
    path, ds = data
    cli, api = tmp_path / "cli", tmp_path / "api"
    res = torchrun(2, ["-m", "cli.main", "partition", str(path), "--distributed", "-w", "4", "--seed", "3",
                       "--block-samples", "32", "-O", "portfolio_edges=0", "--out", str(cli), "--no-plots"],
                   timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    m = load_manifest(cli, dataset=ds)
    assert m.method == "hybrid" and m.num_workers == 4
    assert "batch_remote_reads" in json.loads((cli / "manifest.json").read_text())["metrics"]
    code = (f"import gmp; m = gmp.partition_dataset({str(path)!r}, out={str(api)!r}, workers=4, seed=3, "
            f"block_samples=32, options={{'portfolio_edges': 0}}, distributed=True, plots=False); "
            f"import os; assert (m is None) == (os.environ['RANK'] != '0'), m")
    res = torchrun(2, ["--no-python", sys.executable, "-c", code], timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    a, b = load_manifest(cli, dataset=ds), load_manifest(api, dataset=ds)
    for name in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
        assert np.array_equal(getattr(a.placement, name), getattr(b.placement, name)), name
    assert a.placement.info["distributed"]["processes"] == b.placement.info["distributed"]["processes"] == 2
    timing = {"partition_seconds", "peak_rss_bytes"}
    ma, mb = (json.loads((d / "report.json").read_text())["metrics"] for d in (cli, api))
    assert {k: v for k, v in ma.items() if k not in timing} == {k: v for k, v in mb.items() if k not in timing}


def test_cli_distributed_without_torchrun_is_one_line(data, tmp_path):
    path, _ = data
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    res = subprocess.run([sys.executable, "-m", "cli.main", "partition", str(path), "--distributed", "-w", "4",
                          "--out", str(tmp_path / "x")], capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode != 0
    assert "--distributed needs RANK and WORLD_SIZE" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_bad_collective_timeout_variable_is_a_bad_setting_not_a_failed_join(data, tmp_path):
    path, _ = data
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(torchrun_helpers.free_port()),
               GMP_COLLECTIVE_TIMEOUT="0")
    res = subprocess.run([sys.executable, "-m", "cli.main", "partition", str(path), "--distributed", "-w", "4",
                          "--out", str(tmp_path / "x")], capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == ("error: GMP_COLLECTIVE_TIMEOUT must be a number of seconds in [0.001, 1e+09], got "
                                  "'0'; set another value or unset it for the default 600 s.")


def test_streamed_chunks_equal_in_memory_with_the_multilevel_start(data, monkeypatch):
    """The default start too: the projection visits fixed blocks (here 128 samples), not the chunks."""
    from gmp.partition.distributed import start

    monkeypatch.setattr(start, "PROJECT_BLOCK", 128)
    _, ds = data
    a = run_local(ds, 4, rounds=2)
    b = run_local(ds, 4, rounds=2, chunk_samples=100)
    assert a.info["multilevel"] is not None
    np.testing.assert_array_equal(a.sample_worker, b.sample_worker)
    np.testing.assert_array_equal(a.embedding_primary, b.embedding_primary)
    np.testing.assert_array_equal(a.secondary_workers, b.secondary_workers)


def test_small_graphs_get_the_portfolio_start(data):
    """At most ``portfolio_edges`` edges: every (band, seed) candidate is refined before the choice, the
    lowest score wins, and the rounds are the winner's (not ``rounds`` more of them)."""
    _, ds = data
    p = run_local(ds, 4, portfolio_bands=3, portfolio_seeds=2, portfolio_rounds=3)
    ml = p.info["multilevel"]  # the first band ([2, 4]) has no signal rows here
    assert ml["portfolio"] and [len(c.get("objectives", [])) for c in ml["candidates"]] == [0, 2, 2]
    scores = [(o, k) for k, c in enumerate(ml["candidates"]) for o in c.get("objectives", [])]
    assert ml["chosen"] == min(scores)[1]
    assert 1 <= len(p.info["rounds"]) - 1 <= 3
    assert not run_local(ds, 4, portfolio_edges=0, rounds=1).info["multilevel"]["portfolio"]


def test_large_graphs_refine_every_band_before_the_choice(data):
    """Above ``portfolio_edges`` (flat topology): each band's projection (the lower J of its METIS seeds) is refined
    by ``rounds`` rounds and the lowest refined J less the 2D step's savings wins, as in the single process; the
    result's rounds are the winner's, and its score is its last J less what its 2D step saved."""
    _, ds = data
    p = run_local(ds, 4, portfolio_edges=0, coarse_restarts=3, rounds=2)
    ml = p.info["multilevel"]
    assert ml["refined"] and not ml["portfolio"]
    bands = [k for k, c in enumerate(ml["candidates"]) if "score" in c]
    assert len(bands) == 2  # the first band ([2, 4]) has no signal rows here
    assert ml["chosen"] == min(bands, key=lambda k: (ml["candidates"][k]["score"], k))
    chosen = ml["candidates"][ml["chosen"]]
    assert len(p.info["rounds"]) - 1 == chosen["rounds"] <= 2
    rep = p.info["replication"]
    saved = rep["expected_remote_pushes"] - rep["expected_remote_reads"]
    assert chosen["score"] == pytest.approx(p.info["rounds"][-1]["objective"] - saved, rel=1e-9)
    # a hierarchical topology keeps the projected choice, refined after it
    q = partition_distributed(ds.indptr, ds.indices, ds.num_embeddings, resolve_topology(None, "2x2", None), seed=3,
                              options=Options(portfolio_edges=0, coarse_restarts=3, rounds=2), engine=LocalEngine(1),
                              block_samples=64)
    assert not q.info["multilevel"]["refined"]
    assert all("score" not in c for c in q.info["multilevel"]["candidates"])


def test_flat_beside_follows_the_scores_after_the_2d_step(data, monkeypatch):
    """``flat_beside_samples`` reached: the flat sweep runs beside the multilevel start, each refined
    placement is scored as J less the 2D step's savings, and the lower is kept. The multilevel score is
    checked against the run without the check (its last J less the reads its 2D step saved: the flat
    topology's cost is 1 off the diagonal, the budgets do not depend on the primaries); kept, its
    placement and rounds are that run's. With the flat state's savings made huge the flat one is kept."""
    from gmp.partition.distributed import core

    _, ds = data
    opts = {"portfolio_edges": 0, "rounds": 2}
    alone = run_local(ds, 4, **opts, flat_beside_samples=0)
    both = run_local(ds, 4, **opts, flat_beside_samples=1)
    assert "flat_beside" not in alone.info["multilevel"]
    fb = both.info["multilevel"]["flat_beside"]
    rep = alone.info["replication"]
    saved = rep["expected_remote_pushes"] - rep["expected_remote_reads"]
    assert saved > 0
    assert fb["multilevel_score"] == pytest.approx(alone.info["rounds"][-1]["objective"] - saved, rel=1e-9)
    assert fb["multilevel_rounds"] == alone.info["rounds"][-1]["round"]
    assert fb["chosen"] == "multilevel" and fb["multilevel_score"] < fb["flat_score"]
    for key in ("sample_worker", "embedding_primary", "secondary_indptr", "secondary_workers"):
        np.testing.assert_array_equal(getattr(both, key), getattr(alone, key))
    assert [r["objective"] for r in both.info["rounds"]] == [r["objective"] for r in alone.info["rounds"]]

    real = core.score_after_2d

    def score(state, options, rounds):  # the refined bands' and the multilevel scores as they are; the flat one's
        return real(state, options, rounds) - (1e9 if rounds[-1]["level"] == "worker (flat)" else 0.0)

    monkeypatch.setattr(core, "score_after_2d", score)
    flat = run_local(ds, 4, **opts, flat_beside_samples=1)
    fb = flat.info["multilevel"]["flat_beside"]
    assert fb["chosen"] == "flat" and fb["flat_score"] < 0 < fb["multilevel_score"]
    assert {r["level"] for r in flat.info["rounds"]} == {"worker (flat)"}
    rep = flat.info["replication"]
    saved = rep["expected_remote_pushes"] - rep["expected_remote_reads"]
    assert fb["flat_score"] + 1e9 == pytest.approx(flat.info["rounds"][-1]["objective"] - saved, rel=1e-9)
    assert not np.array_equal(flat.sample_worker, alone.sample_worker)
    assert np.bincount(flat.sample_worker, minlength=4).max() <= sample_cap(ds.num_samples, 4, 1.05)


def test_the_log_names_the_flat_sweep_and_the_2d_step(data, caplog):
    """The flat sweep's rounds are logged under its level's name, as the single process logs them: its
    round 0 (a random start, after the multilevel rounds) read as the run's objective jumping back to
    random's (a 10M run's log: 3.42e7 after round 4, then 8.12e7). The 2D step's line gives the reads
    after it, the figure the report compares (the rounds' expected reads are the 1D objective's)."""
    import logging

    _, ds = data
    with caplog.at_level(logging.INFO, logger="gmp.partition.distributed.core"):
        placement = run_local(ds, 4, portfolio_edges=0, rounds=2, flat_beside_samples=1)
    lines = [r.getMessage() for r in caplog.records]
    ml_rounds = [m for m in lines if m.startswith("distributed hybrid worker round ")]
    flat_rounds = [m for m in lines if m.startswith("distributed hybrid worker (flat) round ")]
    # every band's refinement is logged (round 0 its projection), the chosen one's rounds are the multilevel's
    ml = placement.info["multilevel"]
    bands = [c for c in ml["candidates"] if "rounds" in c]
    assert bands and len(ml_rounds) == sum(c["rounds"] + 1 for c in bands)
    assert ml["candidates"][ml["chosen"]]["rounds"] == ml["flat_beside"]["multilevel_rounds"]
    assert flat_rounds and flat_rounds[0].startswith("distributed hybrid worker (flat) round 0: ")
    rep = placement.info["replication"]
    step = [m for m in lines if m.startswith("distributed hybrid 2D step: ")]
    assert len(step) == 1
    assert f"{rep['num_secondaries']} secondaries" in step[0]
    assert f"{rep['expected_remote_pushes']:.6g} -> {rep['expected_remote_reads']:.6g}" in step[0]


@pytest.mark.distributed
def test_cli_more_processes_than_samples(tmp_path):
    """3 processes on 2 samples: rank 0's shard is empty; the manifest is written and every sample placed."""
    path = make_community_dataset(tmp_path / "tiny", num_samples=2)
    ds = load_dataset(path)
    out = tmp_path / "m"
    res = torchrun(3, ["-m", "cli.main", "partition", str(path), "--distributed", "-w", "4", "--out", str(out),
                       "--no-plots"])
    assert res.returncode == 0, res.stderr[-3000:]
    m = load_manifest(out, dataset=ds)
    assert m.placement.info["distributed"]["processes"] == 3
    sw = np.asarray(m.placement.sample_worker)
    assert sw.size == 2 and sw.min() >= 0 and sw.max() < 4
    assert np.bincount(sw, minlength=4).max() <= sample_cap(2, 4, 1.05)


BAD_INPUT = [
    (["--chunk-samples", "0"], "--chunk-samples must be an integer >= 1, got 0"),
    (["--block-samples", "64"], "--block-samples sets the blocks of --distributed"),
    (["--chunk-samples", "10", "-m", "metis"], "got --method metis"),
    (["--chunk-samples", "10", "-O", "init=bicut"], "init='bicut' needs the whole graph"),
    (["--chunk-samples", "10", "-w", "65"], "up to 64 workers, got 65"),
]

#: one interpreter runs the command line of every BAD_INPUT case in turn (its start-up, the imports of the CLI,
#: is most of a case's time); after each case's stderr, a line "--- case exit STATUS ---"
_CASES = """
import json, sys, traceback
from cli.main import main
for argv in json.loads(sys.argv[1]):
    sys.argv = ["gmp", *argv]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    print(f"--- case exit {code} ---", file=sys.stderr, flush=True)
"""


@pytest.fixture(scope="module")
def bad_input_runs(data, tmp_path_factory):
    """``gmp partition DATA ... ARGS`` of each BAD_INPUT case: (exit status, stderr), in one Python process."""
    path, _ = data
    out = tmp_path_factory.mktemp("bad_input")
    argvs = [["partition", str(path), *(["-w", "4"] if "-w" not in args else []), *args, "--out", str(out / str(i))]
             for i, (args, _) in enumerate(BAD_INPUT)]
    res = subprocess.run([sys.executable, "-c", _CASES, json.dumps(argvs)], capture_output=True, text=True, cwd=ROOT)
    parts = re.split(r"^--- case exit (-?\d+) ---\n", res.stderr, flags=re.M)  # [err, code, err, code, ..., tail]
    assert res.returncode == 0 and len(parts) == 2 * len(BAD_INPUT) + 1, res.stdout + res.stderr[-3000:]
    return [(int(parts[2 * i + 1]), parts[2 * i]) for i in range(len(BAD_INPUT))]


@pytest.mark.parametrize("case", range(len(BAD_INPUT)), ids=[m for _, m in BAD_INPUT])
def test_cli_bad_input_is_one_line(bad_input_runs, case):
    message = BAD_INPUT[case][1]
    code, stderr = bad_input_runs[case]
    assert code != 0
    assert message in stderr and "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1


def test_cli_distributed_without_rendezvous_address_is_one_line(data, tmp_path):
    """RANK and WORLD_SIZE set by hand but no MASTER_ADDR: one line naming what is missing."""
    path, _ = data
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MASTER_")}, "RANK": "0", "WORLD_SIZE": "2"}
    res = subprocess.run([sys.executable, "-m", "cli.main", "partition", str(path), "--distributed", "-w", "4",
                          "--out", str(tmp_path / "x")], capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "got no MASTER_ADDR, MASTER_PORT" in res.stderr and len(res.stderr.strip().splitlines()) == 1
