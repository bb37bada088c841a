"""The one-pass plan of :mod:`gmp.partition.incremental` (``Options(plan="onepass")``, made for large
sparse days): every sample placed once while its rows count it, then the row moves on those counts.

Why a second plan. The exact plan numbers the day's rows, places every sample with its rows' soft-count
state, counts every edge and sweeps the samples of the changed rows: ~10-15 random accesses per edge
of the new day, 0.22-0.41x of a full ``hybrid`` re-partition's CPU time at 1M-6.5M samples a day, where
issue 18 asks for a tenth (docs/incremental.md). This plan reads each edge of the day once, in dataset
order, and touches one table row per edge (:mod:`gmp.partition._onepass_kernels`):

1. **The table**: per id of the id space, the workers holding it and its primary, from the old placement
   (an id without a primary, new or an old id created afresh: :func:`gmp.partition.incremental.created_rows`,
   holds a vote instead), and a 16-bit count per worker.
2. **One pass** (:func:`gmp.partition._onepass_kernels.place_and_count`): every sample, in dataset order,
   to the worker below the sample cap with the lowest topology cost of the rows it does not hold plus
   Eq. 4's alpha term (Eq. 3 without the soft count); a row without a primary counts as held by its vote's
   candidate. Its rows count it in that worker's lane (and vote for it), in the cache line just read.
3. **New ids** (and created rows) take their primaries where most of their samples are
   (:func:`~gmp.partition._common.choose_primaries`, at most ``sample_cap(their number, N, max_imbalance)``
   per worker), as in the exact plan.
4. **Row moves** under the budget on those exact counts, by the exact plan's rule
   (:func:`gmp.partition._row_moves.move_rows`: best primary moves by Eq. 3 with the soft count and Eq. 4,
   secondary swaps by Eq. 6's numerator, moves that cost no row first, exact costs when applied).

The samples stay where the pass put them (the moves are chosen for them); the exact plan's sweep, which
lets the readers of the moved rows follow, is what this plan leaves out, with the soft count in the
pass. Measured against a full ``hybrid`` re-partition (docs/incremental.md, "The one-pass plan"), 5%
budget: reads 1.061x on the 1M drift day (exact plan 1.053x), 1.061x over 7 days of 1M samples with more
ids per sample (1.039x), 0.949x on the 6.5M Criteo-size day (0.941x), in 0.07-0.08x of its CPU time (the
exact plan 0.25-0.33x). ``place_new_data`` under this plan is steps 1-3 (the same samples).

The table costs ``8 (1 + ceil(N / 4))`` bytes per id of the id space (811 MB at Criteo-Kaggle's 33.8M ids
and 8 workers); rows no sample reads keep their primaries and secondaries. Up to 57 workers (a word holds
the holders' bits and a 6-bit primary). Deterministic: no randomness (the pass is in dataset order).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import NamedTuple

import numpy as np

from ..graph import BipartiteGraph
from ..placement import Placement
from ..topology import Topology
from . import _incremental_kernels as K
from . import _onepass_kernels as O
from ._common import choose_primaries, place_unused_embeddings, sample_cap
from ._row_moves import move_rows, secondary_capacity
from ._objective import default_weights, soft_count_table

#: workers a word holds (57 holder bits and a 6-bit primary below the sign)
MAX_WORKERS = 57


class Pass(NamedTuple):
    """What the pass (steps 1-3) leaves: the samples' workers and the rows they read, with their state."""

    sample_worker: np.ndarray  # int32 [samples]
    used_ids: np.ndarray  # int32 [rows read], ascending
    bits: np.ndarray  # int64 bitmap of used_ids over the id space
    prim: np.ndarray  # int32 [rows read]: primaries (new ids and created rows: as chosen in step 3)
    sec: np.ndarray  # int64 [rows read]: secondary masks
    count: np.ndarray  # int32 [rows read, N]: samples of each worker that read the row
    is_old: np.ndarray  # bool [rows read]: old rows (False: new ids and created rows)
    new_id_cap: int
    seconds: dict


def run_pass(graph: BipartiteGraph, old: Placement, topology: Topology, options,
             trained: np.ndarray | None) -> Pass:
    """Steps 1-3 (module docstring)."""
    t0 = time.perf_counter()
    n = topology.num_workers
    table = np.zeros((graph.num_embeddings, 1 + (n + 3) // 4), dtype=np.int64)
    oip = np.asarray(old.secondary_indptr)
    keep = np.zeros(0, dtype=bool)
    if trained is not None:
        keep = np.asarray(trained, dtype=bool) | (oip[1:] > oip[:-1])
    O.fill_words(np.asarray(old.embedding_primary), oip, np.asarray(old.secondary_workers), keep,
                 trained is not None, table)
    t1 = time.perf_counter()
    cap = sample_cap(graph.num_samples, n, options.max_imbalance)
    alpha = options.alpha if options.alpha is not None else default_weights(n, graph.num_samples, 1)[0]
    sample_worker = np.empty(graph.num_samples, dtype=np.int32)
    O.place_and_count(np.ascontiguousarray(graph.sample_indptr, dtype=np.int64), np.asarray(graph.sample_indices),
                      table, np.ascontiguousarray(topology.cost, dtype=np.float64), float(alpha),
                      np.zeros(n, dtype=np.int64), np.int64(cap), sample_worker)
    t2 = time.perf_counter()
    bits = np.zeros((graph.num_embeddings + 63) // 64, dtype=np.int64)
    O.mark_read_rows(table, bits)
    used = K.rank_ids(bits, np.empty(bits.size, dtype=np.int64))
    prim = np.empty(used.size, dtype=np.int32)
    sec = np.empty(used.size, dtype=np.int64)
    count = np.empty((used.size, n), dtype=np.int32)
    O.unpack(table, used, prim, sec, count)
    del table
    is_old = prim >= 0
    new_rows = np.flatnonzero(~is_old)
    new_cap = sample_cap(new_rows.size, n, options.max_imbalance)
    prim[new_rows] = choose_primaries(np.ascontiguousarray(count[new_rows]), cap=new_cap)
    seconds = {"table": round(t1 - t0, 4), "pass": round(t2 - t1, 4), "rows": round(time.perf_counter() - t2, 4)}
    return Pass(sample_worker, used, bits, prim, sec, count, is_old, int(new_cap), seconds)


def placement_of(graph: BipartiteGraph, old: Placement, topology: Topology, seed: int, options, state: Pass,
                 method: str, bits: np.ndarray | None = None) -> Placement:
    """The placement of ``state``: the old primaries but the rows read (their ``prim``), the unused new ids on
    the least-loaded workers; the secondaries of the rows marked in ``bits`` from ``state.sec`` (None: the
    old secondaries)."""
    m, m_old = graph.num_embeddings, old.num_embeddings
    primary = np.empty(m, dtype=np.int32)
    primary[:m_old] = old.embedding_primary
    primary[m_old:] = -1
    primary[state.used_ids] = state.prim
    place_unused_embeddings(primary, topology.num_workers)
    oip, ow = np.asarray(old.secondary_indptr), np.asarray(old.secondary_workers, dtype=np.int32)
    if bits is None:
        indptr = oip if m == m_old else np.concatenate([oip, np.full(m - m_old, oip[-1], dtype=np.int64)])
        workers = ow
    else:
        indptr, workers = K.csr_from_masks(oip, ow, np.int64(m_old), bits, state.sec, np.int64(m),
                                           np.int64(topology.num_workers))
    return Placement(num_workers=topology.num_workers, sample_worker=state.sample_worker, embedding_primary=primary,
                     secondary_indptr=indptr, secondary_workers=workers, method=method, options=asdict(options),
                     seed=seed, info={"plan": "onepass"})


def move(state: Pass, old: Placement, topology: Topology, budget: int, options, num_samples: int,
         steps: list[int] | None = None, score=None) -> dict:
    """Step 4 (module docstring), in place on ``state.prim`` and ``state.sec``; returns its record.

    ``steps`` (ascending budgets) and ``score``: the moves made step by step, each step's budget in turn
    (one chain, whatever ``budget``), ``score(step budget, rows spent)`` called after each; ``budget``
    is then not used here (the caller keeps the best step within it)."""
    n = topology.num_workers
    num_used = state.used_ids.size
    prim, sec, is_old = state.prim, state.sec, state.is_old
    old_prim = np.where(is_old, prim, -1).astype(np.int32)
    old_sec = sec.copy()
    cap = sample_cap(num_samples, n, options.max_imbalance)
    f = soft_count_table(cap, num_samples / n, options.batch_size)
    pcap = sample_cap(num_used, n, options.max_imbalance)
    pload = np.bincount(prim, minlength=n).astype(np.int64)
    sec_load, sec_cap = secondary_capacity(sec, n, options.replication_budget, old.options)
    beta = float(options.beta if options.beta is not None else default_weights(n, num_samples, num_used)[1])
    t = time.perf_counter()
    # a count is at most the samples of one worker, within the sample cap, so f covers it
    cost = np.ascontiguousarray(topology.cost, dtype=np.float64)
    spent, candidates, touched = 0, 0, np.zeros(num_used, dtype=bool)
    for allowed in ([budget] if steps is None else steps):
        spent, changed, num = move_rows(prim, sec, state.count, f, cost, pload, pcap, beta, sec_load, sec_cap,
                                        old_prim, old_sec, is_old, allowed, spent)
        touched |= changed
        candidates += num
        if score is not None:
            score(allowed, spent)
    return {"spent_rows": int(spent), "candidates": candidates, "changed_rows": int(np.count_nonzero(touched)),
            "primary_cap": int(pcap), "secondary_cap": sec_cap.tolist(), "beta": beta,
            "moves_seconds": round(time.perf_counter() - t, 4)}
