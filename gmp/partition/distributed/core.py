"""The distributed hybrid's driver: shard set-up, start, 1D rounds, 2D step, the placement on rank 0."""

from __future__ import annotations

import logging
import resource
import time
from dataclasses import asdict

import numpy as np

from ...errors import PartitionError
from ...params import is_int
from ...placement import Placement
from ...topology import Topology
from .._common import is_hierarchical, machines_of_the_start, place_unused_embeddings
from .._objective import Options, replication_budgets
from .exchange import Ghosts, Mesh, OwnedRows, shard_range
from .memory import bytes_to_come, check_host_memory
from .shard import Shard
from .start import install_primaries, install_samples, multilevel_start, random_start
from .state import DistState

log = logging.getLogger(__name__)

#: samples each process sweeps between two exchanges (see docs/distributed.md, "Blocks")
DEFAULT_BLOCK_SAMPLES = 1024


def check_init(init) -> None:
    """Refuse a start other than the streamed hybrid's own (before the options are checked against the
    in-memory hybrid's list, which offered starts this one refuses)."""
    if init != "random":
        raise PartitionError(f"the streamed hybrid (`distributed`, `chunk_samples`) starts from the multilevel "
                             f"(levels=2) or random (levels=1) start; init={init!r} needs the whole graph in one "
                             f"process: drop it.")


def check_settings(options: Options, topology: Topology, block_samples: int, chunk_samples: int | None) -> None:
    """Refuse what the distributed hybrid does not do, before any work."""
    if topology.num_workers > 64:
        raise PartitionError(f"the distributed hybrid supports up to 64 workers, got {topology.num_workers}; use "
                             f"fewer workers.")
    check_init(options.init)
    if not is_int(block_samples) or block_samples < 1:
        raise PartitionError(f"`block_samples` must be an integer >= 1, got {block_samples!r}; the default is "
                             f"{DEFAULT_BLOCK_SAMPLES}.")
    if chunk_samples is not None and (not is_int(chunk_samples) or chunk_samples < 1):
        raise PartitionError(f"`chunk_samples` must be an integer >= 1, got {chunk_samples!r}.")


def check_same_run(mesh: Mesh, indptr, num_embeddings: int, topology: Topology, seed: int, options: Options,
                   block_samples: int, chunk_samples: int | None, dataset_sha256: str | None = None) -> None:
    """Every process must partition the same graph with the same settings (a launch that gave the ranks
    different flags or datasets would otherwise hang or mix placements): rank 0's fingerprint is
    broadcast, and every process raises the same one-line error naming the ranks that differ. The shape
    alone does not tell two datasets apart (two days of one size): ``dataset_sha256`` does."""
    if mesh.size == 1:
        return
    mine = {"dataset": dataset_sha256 or "", "samples": int(indptr.size - 1), "edges": int(indptr[-1]),
            "ids": int(num_embeddings), "topology": np.asarray(topology.cost).round(9).tolist(), "seed": int(seed),
            "options": dict(sorted(asdict(options).items())), "block_samples": int(block_samples),
            "chunk_samples": chunk_samples}
    differ, said = mesh.engine.settings_unlike_rank0(mine)
    if differ:
        raise PartitionError(f"`distributed`: every process must get the same dataset and flags, got ranks "
                             f"{differ} differing from rank 0 ({said}); launch every rank with the same command.")


def partition_distributed(indptr: np.ndarray, indices: np.ndarray, num_embeddings: int, topology: Topology, *,
                          seed: int, options: Options, engine, block_samples: int = DEFAULT_BLOCK_SAMPLES,
                          chunk_samples: int | None = None, dataset_sha256: str | None = None) -> Placement | None:
    """HET-GMP hybrid partitioning across the processes of ``engine`` (docs/distributed.md).

    Parameters
    ----------
    indptr, indices, num_embeddings
        The whole sample CSR, typically memory-mapped: each process reads only its shard's
        slice (``indices`` as int32/int64, ``indptr`` int64).
    topology, seed, options
        As :func:`gmp.partition.hybrid.partition` (``init`` must be ``"random"``).
    engine
        A :class:`gmp.comm.distributed.DistributedEngine` (one process per rank), or a
        :class:`gmp.comm.LocalEngine` of one worker (one process).
    block_samples
        Samples each process sweeps between two exchanges (ignored with one process).
    chunk_samples
        Stream the shard from the memory-mapped CSR in chunks of this many samples instead of
        holding it (out of core).
    dataset_sha256
        The dataset's hash: every process must have the same (checked with the shape and settings
        before any work; None: the shape only).

    Returns
    -------
    Placement or None
        The placement on rank 0 (``method="hybrid"``, ``info["distributed"]`` with processes,
        blocks, bytes per round and peak RSS per process; ``info["multilevel"]["flat_beside"]`` when
        the flat sweep ran beside the multilevel start, :func:`flat_beside`); None on the other
        ranks. Deterministic for a given seed and number of processes.
    """
    check_settings(options, topology, block_samples, chunk_samples)
    t0 = time.perf_counter()
    mesh = Mesh(engine)
    check_same_run(mesh, indptr, num_embeddings, topology, seed, options, block_samples, chunk_samples,
                   dataset_sha256)
    num_samples = int(indptr.size - 1)
    start, stop = shard_range(num_samples, mesh.size, mesh.rank)
    shard = Shard(indptr, indices, num_embeddings, start, stop, chunk_samples=chunk_samples)
    ghosts = Ghosts(mesh, shard.gids)
    received = ghosts.send_to_owners(shard.degrees()[:, None])
    owned = OwnedRows(mesh, received)
    owner_degree = owned.sum_received(received)[:, 0]
    del received
    num_used = int(mesh.isum(np.array([owned.used.size]))[0])
    if mesh.size > 1:  # before the large arrays and the start: can every host hold its processes' rounds?
        need = bytes_to_come(ghosts.gids.size, owned.used.size, shard.num_samples, topology.num_workers,
                             streamed=chunk_samples is not None)
        log.info("distributed hybrid: %d ghost rows, %d owned rows, %d samples: about %.2f GiB to come beside "
                 "%.2f GiB held (peak RSS so far)", ghosts.gids.size, owned.used.size, shard.num_samples,
                 need / 2**30, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
        check_host_memory(mesh, need, num_samples=num_samples, num_workers=topology.num_workers)
    # carry_private: flat topologies only, as in the single process
    carry = options.carry_private and not is_hierarchical(topology)
    state = DistState(mesh, shard, owned, ghosts, topology.cost, num_samples=num_samples, num_used=num_used,
                      options=options, block_samples=block_samples, owner_degree=owner_degree if carry else None)
    rng = np.random.default_rng([seed, mesh.size, mesh.rank])
    seed_rng = np.random.default_rng([seed, mesh.size])
    ml, rounds = None, None
    if options.levels > 1:
        # small graphs: the single process's portfolio (every candidate refined before the choice)
        flat = not is_hierarchical(topology) and options.rounds > 0
        portfolio = flat and int(indptr[-1]) <= options.portfolio_edges
        # large flat graphs: every band's projection refined before the choice, as the single process
        started = multilevel_start(state, owner_degree, options, machines_of_the_start(topology), rng,
                                   seed_rng, refine=(lambda s: refine_candidate(s, options)) if portfolio else None,
                                   refine_bands=(lambda s: refine_candidate(s, options, options.rounds,
                                                                            level=logging.INFO))
                                   if flat and not portfolio else None)
        if started is not None:
            ml, rounds = started
    if ml is None:
        random_start(state, rng)
    del owner_degree
    if rounds is None:
        rounds = run_rounds(state, options, t0)
    if ml is not None and 0 < options.flat_beside_samples <= num_samples and not is_hierarchical(topology):
        rounds = flat_beside(state, options, rng, rounds, ml)
    return _assemble(state, options, topology, num_embeddings, seed, rounds, ml, t0, chunk_samples)


def refine_candidate(state: DistState, options: Options, max_rounds: int | None = None, *,
                     level: int = logging.DEBUG) -> tuple[float, list[dict]]:
    """A refined candidate: up to ``max_rounds`` rounds (default ``portfolio_rounds``: the portfolio's), logged at
    ``level``, scored by :func:`score_after_2d`. Returns the score and the round log."""
    rounds = run_rounds(state, options, time.perf_counter(),
                        max_rounds=options.portfolio_rounds if max_rounds is None else max_rounds, level=level)
    return score_after_2d(state, options, rounds), rounds


def score_after_2d(state: DistState, options: Options, rounds: list[dict]) -> float:
    """A refined placement's score, as the single process scores it (``_multilevel.multilevel_start``,
    ``hybrid._flat_beside``): J after the last round less the traffic the 2D step's secondaries will
    take off (:func:`replication_savings`); the same value on every process."""
    budgets = replication_budgets(state.num_workers, state.w.num_used, state.primary_load, options)
    return rounds[-1]["objective"] - replication_savings(state, budgets)


def flat_beside(state: DistState, options: Options, rng: np.random.Generator, rounds: list[dict],
                ml: dict) -> list[dict]:
    """``hybrid._flat_beside`` across the processes (``options.flat_beside_samples``): the refined
    multilevel placement in ``state`` or the flat sweep's (the seeded random start of ``levels=1`` and
    the same rounds), whichever scores lower (:func:`score_after_2d`); ``state`` ends holding it.

    Returns the kept placement's round log; the comparison goes to ``ml["flat_beside"]``. Memory: only
    the multilevel samples' workers and primaries are kept aside (4 B per shard sample and per owned
    row); its counts are recounted from them if it wins (one pass over the shard, one exchange)."""
    ml_score = score_after_2d(state, options, rounds)
    sw, prim = state.sw.copy(), state.prim.copy()
    random_start(state, rng)
    flat_rounds = run_rounds(state, options, time.perf_counter(), name="worker (flat)")
    flat_score = score_after_2d(state, options, flat_rounds)
    chosen = "flat" if flat_score < ml_score else "multilevel"
    ml["flat_beside"] = {"multilevel_score": ml_score, "flat_score": flat_score, "chosen": chosen,
                         "multilevel_rounds": rounds[-1]["round"]}
    log.info("distributed hybrid: after the 2D step's savings, multilevel %.6g against flat %.6g: %s kept",
             ml_score, flat_score, chosen)
    if chosen == "flat":
        return flat_rounds
    install_samples(state, sw)
    install_primaries(state, prim)
    return rounds


def replication_savings(state: DistState, budgets: np.ndarray) -> float:
    """``hybrid.replication_savings`` over the owners: per worker the sum of the global top-``budget``
    scores of Eq. 6's numerator (inside the union of the owners' top ``budget``, as for the 2D step);
    the same value on every process."""
    if int(np.sum(budgets)) <= 0:
        return 0.0
    cands = state.mesh.to_root(local_candidates(state, budgets)[:, [0, 2]].reshape(-1), dtype=np.float64)
    total = None
    if state.mesh.rank == 0:
        c = np.concatenate(cands).reshape(-1, 2)
        total = sum(float(np.sort(c[c[:, 0] == w, 1])[::-1][:int(budgets[w])].sum())
                    for w in range(state.num_workers))
    return float(state.mesh.broadcast(total))


def run_rounds(state: DistState, options: Options, t0: float, *, max_rounds: int | None = None,
               level: int = logging.INFO, name: str = "worker") -> list[dict]:
    """Algorithm 1 lines 2-5: up to ``max_rounds`` (default ``options.rounds``) rounds, stopping below ``tol``;
    each logged at ``level``, recorded with ``"level": name``."""
    rounds = []

    def record(r: int, seconds: float, moved: tuple[int, int], bytes0: int) -> float:
        entry = {"round": r, "level": name, **state.summary(), "moved_samples": moved[0],
                 "moved_embeddings": moved[1], "seconds": round(seconds, 4),
                 "bytes_sent": int(state.mesh.isum(np.array([state.round_bytes() - bytes0]))[0])}
        rounds.append(entry)
        # the level named as the single process names it: the flat sweep's round 0 (a random start, after
        # the multilevel rounds) must not read as a jump of the multilevel run's objective
        log.log(level, "distributed hybrid %s round %d: objective %.6g, expected batch remote reads %.6g, moved %d "
                "samples %d embeddings, %d bytes sent, %.2f s", name, r, entry["objective"],
                entry["expected_remote_reads"], moved[0], moved[1], entry["bytes_sent"], seconds)
        return entry["objective"]

    prev = record(0, time.perf_counter() - t0, (0, 0), 0)
    for r in range(1, (options.rounds if max_rounds is None else max_rounds) + 1):
        t_r, b_r = time.perf_counter(), state.round_bytes()
        ceff = state.effective_cost()
        moved = (state.sweep_samples(ceff), state.sweep_embeddings(ceff))
        obj = record(r, time.perf_counter() - t_r, moved, b_r)
        improvement = (prev - obj) / prev if prev > 0 else 0.0
        prev = obj
        if improvement < options.tol:
            break
    return rounds


def local_candidates(state: DistState, budgets: np.ndarray) -> np.ndarray:
    """Per worker w, this owner's top-``budget[w]`` rows by Eq. 6's numerator f(c_xw) * C[p_x, w]
    (score descending, id ascending) as rows (w, global id, score, f(c_xw)) (float64)."""
    out = []
    for w in range(state.num_workers):
        c = state.count[:, w]
        score = state.f[c] * state.cost[state.prim, w]
        ok = np.flatnonzero((state.prim != w) & (c > 0) & (score > 0))
        order = np.lexsort((ok, -score[ok]))[: int(budgets[w])]
        sel = ok[order]
        out.append(np.stack([np.full(sel.size, w, dtype=np.float64), state.owned.used[sel].astype(np.float64),
                             score[sel], state.f[c[sel]]], axis=1))
    return np.concatenate(out) if out else np.zeros((0, 4))


def choose_global(cands: np.ndarray, budgets: np.ndarray, num_embeddings: int, num_workers: int):
    """Rank 0: the global top-``budget`` per worker of the owners' candidates (the single-process
    order: score descending, then lower id). Returns ``(indptr, workers, saved_reads)``."""
    ws, ids, saved = [], [], 0.0
    for w in range(num_workers):
        c = cands[cands[:, 0] == w]
        order = np.lexsort((c[:, 1], -c[:, 2]))[: int(budgets[w])]
        ids.append(np.sort(c[order, 1].astype(np.int64)))
        ws.append(np.full(order.size, w, dtype=np.int32))
        saved += float(c[order, 3].sum())
    w_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    w_of = np.concatenate(ws) if ws else np.zeros(0, np.int32)
    order = np.argsort(w_ids, kind="stable")
    indptr = np.zeros(num_embeddings + 1, dtype=np.int64)
    np.cumsum(np.bincount(w_ids, minlength=num_embeddings), out=indptr[1:])
    return indptr, w_of[order], saved


def _assemble(state: DistState, options: Options, topology: Topology, num_embeddings: int, seed: int,
              rounds: list[dict], ml: dict | None, t0: float, chunk_samples: int | None) -> Placement | None:
    """Gather the samples and primaries on rank 0, run the 2D step (Eq. 6) over the owners' candidates."""
    mesh, n = state.mesh, state.num_workers
    t2 = time.perf_counter()
    sw = mesh.to_root(state.sw, dtype=np.int32)
    used = mesh.to_root(state.owned.used)
    prim_parts = mesh.to_root(state.prim, dtype=np.int32)
    budgets = None
    if mesh.rank == 0:
        prim = np.full(num_embeddings, -1, dtype=np.int32)
        prim[np.concatenate(used)] = np.concatenate(prim_parts)
        del used, prim_parts
        place_unused_embeddings(prim, n)
        budgets = replication_budgets(n, state.w.num_used, np.bincount(prim, minlength=n), options, warn=True)
    budgets = mesh.broadcast(budgets)
    cands = mesh.to_root(local_candidates(state, budgets).reshape(-1), dtype=np.float64)
    rss = mesh.to_root(np.array([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]))
    bytes_total = int(mesh.isum(np.array([state.round_bytes()]))[0])
    if mesh.rank != 0:
        return None
    indptr, workers, saved = choose_global(np.concatenate(cands).reshape(-1, 4), budgets, num_embeddings, n)
    expected_1d = rounds[-1]["expected_remote_reads"]
    log.info("distributed hybrid 2D step: %d secondaries, expected batch remote reads %.6g -> %.6g, %.2f s",
             workers.size, expected_1d, expected_1d - saved, time.perf_counter() - t2)
    info = {
        "rounds": rounds,
        "replication": {"budget_per_worker": budgets.tolist(),
                        "secondaries_per_worker": np.bincount(workers, minlength=n).tolist(),
                        "num_secondaries": int(workers.size), "expected_remote_reads": expected_1d - saved,
                        "expected_remote_pushes": expected_1d, "seconds": round(time.perf_counter() - t2, 4)},
        "alpha": state.w.alpha, "beta": state.w.beta, "gamma": state.w.gamma,
        "sample_cap": state.w.sample_cap, "primary_cap": state.w.primary_cap,
        "num_used_embeddings": state.w.num_used,
        "init": {"method": "random", "seconds": 0.0},
        "multilevel": ml,
        "distributed": {"processes": mesh.size, "block_samples": state.block_samples,
                        "chunk_samples": chunk_samples, "exchanges": mesh.exchanges, "bytes_sent": bytes_total,
                        "peak_rss_bytes_per_process": [int(r[0]) for r in rss]},
        "seconds": round(time.perf_counter() - t0, 4),
    }
    placement = Placement.edge_cut(n, np.concatenate(sw), prim, method="hybrid", options=asdict(options),
                                   seed=seed, info=info)
    return placement.with_secondaries(indptr, workers) if workers.size else placement
