"""The sampled plan of :mod:`gmp.partition.incremental` (``Options(plan="sampled")``, made for large sparse
days): the row moves chosen on every k-th sample, then every sample placed once on the final rows.

Why a second plan. The exact plan numbers the day's rows, places every sample with its rows' soft-count
state, counts every edge and sweeps the samples of the changed rows: ~10-15 random accesses per edge
of the new day, 0.22-0.41x of a full ``hybrid`` re-partition's CPU time at 1M-6.5M samples a day, where
issue 18 asks for a tenth (docs/incremental.md). This plan reads each edge of the day once, in dataset
order, one word per id:

1. **Words** (:mod:`gmp.partition._sampled_kernels`): per id of the id space, the workers holding it and
   its primary, from the old placement; an id without a primary (new, or an old id created afresh:
   :func:`gmp.partition.incremental.created_rows`) holds a vote instead.
2. **The sample**: samples ``0, k, 2k, ...`` (``k = Options.sample_every``, default 8) with their rows
   numbered, placed on the old rows by the exact plan's streaming pass (Eq. 3 with the soft count of the
   sample: batches of ``batch_size / k``, Eq. 4) in the seeded order; the counts of that placement.
3. **Row moves** under the budget on the sample's old rows, by the exact plan's rule
   (:func:`gmp.partition._row_moves.move_rows`: best primary moves, secondary swaps by Eq. 6's numerator,
   moves that cost no row first, exact costs when applied); the moved rows' words updated.
4. **Every sample placed once** on the final rows (:func:`gmp.partition._sampled_kernels.place_samples`):
   to the worker below the sample cap holding most of its rows, weighted by the topology cost (Eq. 3
   without the soft count: a sample's cost on a worker is the cost of the rows that worker does not hold)
   plus Eq. 4's alpha term. A row without a primary counts as held by its vote's candidate; after each
   sample its rows without a primary vote for the worker chosen. Then such rows take their vote's
   candidate (at most ``sample_cap(their number, N, max_imbalance)`` per worker, else the least-loaded
   worker below it: :func:`~gmp.partition._common.choose_primaries`), and unused new ids the least-loaded
   workers.

What is traded (measured in docs/incremental.md, "The sampled plan"): the soft count is left out of the
final pass (the exact plan's pass without it placed nearly as well, 896,333 against 895,893 reads on the
1M drift day), and the row moves see 1/k of the samples, so rows read by few samples are moved on noisy
counts. Against a full ``hybrid`` re-partition, 5% budget: the 1M drift day reads 1.084x instead of the
exact plan's 1.053x, the 6.5M Criteo-size day 0.978x instead of 0.941x, and 7 days of 1M samples with
more ids per sample (45 edges per row instead of 127) 1.159x instead of 1.039x, for a quarter of the
exact plan's time or less; the exact plan stays the default. Step 4 places the samples for the final rows,
as the exact plan's sweep does: with exact counts (``k = 1``) the plan reads what the exact plan does
(864,477 against 864,337 on the 1M day). The primary cap of the moves counts the sample's rows (the rows it
does not read keep their primaries); the secondary capacity is the larger of what a worker holds of the
sample's rows and ``replication_budget`` x the sample's rows.

Deterministic: the only randomness is the seeded order of step 2; step 4 is in dataset order.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from typing import NamedTuple

import numpy as np

from ..graph import BipartiteGraph
from ..placement import Placement
from ..topology import Topology
from . import _incremental_kernels as K
from . import _sampled_kernels as S
from ._common import choose_primaries, place_unused_embeddings, sample_cap, seeded_order
from ._row_moves import move_rows
from .hybrid import default_weights, soft_count_table

#: workers a word holds (int64: 57 holder bits and a 6-bit primary below the sign)
MAX_WORKERS = 57


class Sample(NamedTuple):
    """Every ``every``-th sample of the new day, its rows numbered (ascending id, like the exact plan's)."""

    every: int
    indptr: np.ndarray  # int64 [sampled samples + 1]
    cindices: np.ndarray  # int32 [sampled edges]: compact ids
    used_ids: np.ndarray  # int32 [rows the sample reads], ascending
    bits: np.ndarray  # int64 bitmap of used_ids over the id space
    degree: np.ndarray  # int32: sampled samples per row


def take_sample(graph: BipartiteGraph, every: int) -> Sample:
    """Samples ``0, every, 2 * every, ...`` of ``graph`` with their rows numbered (bitmap and rank, as the
    exact plan numbers the whole day: :func:`gmp.partition.incremental._compact`)."""
    indptr, indices = S.every_kth(np.ascontiguousarray(graph.sample_indptr, dtype=np.int64),
                                  np.asarray(graph.sample_indices), np.int64(every))
    return Sample(int(every), indptr, *number_rows(indices, graph.num_embeddings))


def number_rows(indices: np.ndarray, num_embeddings: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(cindices, used_ids, bits, degree)``: the ids of ``indices`` numbered densely in id order (compact
    ids), through a bitmap over the id space and its rank (:func:`gmp.partition._incremental_kernels.rank_ids`);
    both plans number their rows so."""
    bits = np.zeros((num_embeddings + 63) // 64, dtype=np.int64)
    K.mark_ids(indices, bits)
    rank = np.empty(bits.size, dtype=np.int64)
    used = K.rank_ids(bits, rank)
    cindices = np.empty(indices.size, dtype=np.int32)
    degree = np.zeros(used.size, dtype=np.int32)
    K.remap(indices, bits, rank, cindices, degree)
    return cindices, used, bits, degree


def words(graph: BipartiteGraph, old: Placement, trained: np.ndarray | None) -> tuple[np.ndarray, int]:
    """``(word, shift)`` over the new graph's id space (:mod:`gmp.partition._sampled_kernels`): the old rows
    as ``old`` holds them, except the old ids ``trained`` leaves unmarked and that have no secondary (created
    afresh, like new ids: :func:`gmp.partition.incremental.created_rows`)."""
    n = old.num_workers
    dtype, shift = (np.int32, 16) if n <= 16 else (np.int64, MAX_WORKERS)
    word = np.empty(graph.num_embeddings, dtype=dtype)
    oip = np.asarray(old.secondary_indptr)
    keep = np.zeros(0, dtype=bool)
    if trained is not None:
        keep = np.asarray(trained, dtype=bool) | (oip[1:] > oip[:-1])
    S.fill_words(np.asarray(old.embedding_primary), oip, np.asarray(old.secondary_workers), keep,
                 trained is not None, shift, word[:old.num_embeddings])
    word[old.num_embeddings:] = S.UNSEEN
    return word, shift


def place_all(graph: BipartiteGraph, word: np.ndarray, shift: int, topology: Topology, options) -> np.ndarray:
    """Step 4 (module docstring): every sample once on the rows of ``word`` (its votes updated in place)."""
    n = topology.num_workers
    cap = sample_cap(graph.num_samples, n, options.max_imbalance)
    alpha = options.alpha if options.alpha is not None else default_weights(n, graph.num_samples, 1)[0]
    out = np.empty(graph.num_samples, dtype=np.int32)
    S.place_samples(np.ascontiguousarray(graph.sample_indptr, dtype=np.int64), np.asarray(graph.sample_indices),
                    word, np.int64(shift), np.ascontiguousarray(topology.cost, dtype=np.float64), float(alpha),
                    np.zeros(n, dtype=np.int64), np.int64(cap), out)
    return out


def primaries(word: np.ndarray, old: Placement, options, moved: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[np.ndarray, np.ndarray, int]:
    """``(embedding_primary, voted ids, new_id_cap)`` after step 4: the old primaries, the ``moved`` rows'
    (ids, workers), the voted rows' elected primaries and the unused new ids on the least-loaded workers."""
    n, m_old = old.num_workers, old.num_embeddings
    primary = np.empty(word.size, dtype=np.int32)
    primary[:m_old] = old.embedding_primary
    primary[m_old:] = -1
    if moved is not None:
        primary[moved[0]] = moved[1]
    voted = np.flatnonzero(word < S.UNSEEN)
    new_cap = sample_cap(voted.size, n, options.max_imbalance)
    votes = np.zeros((voted.size, n), dtype=np.int32)  # the vote's candidate, the one worker it names
    votes[np.arange(voted.size), (-word[voted].astype(np.int64) - 1) & 63] = 1
    primary[voted] = choose_primaries(votes, cap=new_cap)
    place_unused_embeddings(primary, n)
    return primary, voted, new_cap


class Moves(NamedTuple):
    ids: np.ndarray  # int64: the sample's old rows whose primary or secondaries changed
    primary: np.ndarray  # int32: their primaries
    sec: np.ndarray  # int64 [sample rows]: secondary masks of every row the sample reads (0: new or created)
    spent: int
    candidates: int
    primary_cap: int
    secondary_cap: np.ndarray


def sample_moves(sample: Sample, word: np.ndarray, shift: int, old: Placement, topology: Topology, budget: int,
                 seed: int, options) -> Moves:
    """Steps 2 and 3 (module docstring); ``word`` is updated for the moved rows."""
    n = topology.num_workers
    used = sample.used_ids
    num = sample.indptr.size - 1
    wu = word[used]
    is_old = wu >= 0
    prim = np.where(is_old, wu >> shift, -1).astype(np.int32)
    sec = np.zeros(used.size, dtype=np.int64)
    S.secondaries_of(word, used, np.int64(shift), sec)
    cost = np.ascontiguousarray(topology.cost, dtype=np.float64)
    cap = sample_cap(num, n, options.max_imbalance)
    f = soft_count_table(cap, num / n, max(1, options.batch_size // sample.every))
    df = np.diff(f)
    count = np.zeros((used.size, n), dtype=np.int32)
    marg = np.empty((used.size, n), dtype=np.float64)
    K.fill_marginals(prim, sec, count, df, cost, marg)
    alpha = options.alpha if options.alpha is not None else default_weights(n, num, used.size)[0]
    order = seeded_order(num, np.random.default_rng(seed)) if options.order == "random" else \
        np.arange(num, dtype=np.int64)
    # rows every worker holds cost nothing anywhere (their marginals stay 0): the pass skips their edges and
    # they are counted after it, in dataset order (the exact plan's sealed rows; the same placement)
    sealed = is_old & ((wu & ((1 << shift) - 1)) == (1 << n) - 1)
    num_sealed = int(sample.degree[sealed].sum())
    oindptr, sindptr = np.empty(num + 1, dtype=np.int64), np.empty(num + 1, dtype=np.int64)
    ocindices = np.empty(sample.cindices.size - num_sealed + 1, dtype=np.int32)
    scindices = np.empty(num_sealed + 1, dtype=np.int32)
    K.split_edges(sample.indptr, sample.cindices, sealed.view(np.uint8), oindptr, ocindices,
                  np.empty(num, dtype=np.int32), sindptr, scindices)
    sample_worker = np.empty(num, dtype=np.int32)
    K.stream_samples(oindptr, ocindices, order, prim, sec, count, marg, df, cost, np.zeros(n, dtype=np.int64),
                     np.int64(cap), float(alpha), sample_worker)
    del marg, ocindices
    K.count_samples(sindptr, scindices, sample_worker, count)
    rows = np.flatnonzero(is_old)  # rows without a primary are placed by step 4
    p, s, c = prim[rows], sec[rows], np.ascontiguousarray(count[rows])
    old_p, old_s, flags = p.copy(), s.copy(), np.ones(rows.size, dtype=bool)
    pload = np.bincount(p, minlength=n).astype(np.int64)
    pcap = sample_cap(rows.size, n, options.max_imbalance)
    sec_load = np.array([np.count_nonzero((s >> w) & 1) for w in range(n)], dtype=np.int64)
    rb = options.replication_budget
    if rb is None:
        rb = float((old.options or {}).get("replication_budget", 0.0) or 0.0)
    sec_cap = np.maximum(sec_load, int(math.floor(rb * used.size + 1e-9))).astype(np.int64)
    beta = float(options.beta if options.beta is not None else default_weights(n, num, used.size)[1])
    spent, touched, candidates = move_rows(p, s, c, f, cost, pload, pcap, beta, sec_load, sec_cap, old_p, old_s,
                                           flags, budget, 0)
    changed = np.flatnonzero(touched)
    ids = used[rows[changed]].astype(np.int64)
    one = word.dtype.type(1)
    word[ids] = (p[changed].astype(word.dtype) << shift) | (one << p[changed].astype(word.dtype)) | \
        s[changed].astype(word.dtype)
    sec[rows] = s
    return Moves(ids, p[changed], sec, spent, candidates, int(pcap), sec_cap)


def repartition(graph: BipartiteGraph, old: Placement, topology: Topology, budget: int, seed: int, options,
                trained: np.ndarray | None, sample: Sample, word: np.ndarray | None = None,
                shift: int | None = None) -> tuple[Placement, np.ndarray]:
    """The sampled plan's placement (``method="incremental"``) and the created ids (voted ids below the
    old placement's); ``word`` (from :func:`words`, consumed) when the caller made it already."""
    t0 = time.perf_counter()
    if word is None:
        word, shift = words(graph, old, trained)
    stage = {"words": round(time.perf_counter() - t0, 4)}
    t = time.perf_counter()
    moves = sample_moves(sample, word, shift, old, topology, budget, seed, options)
    stage["sample_and_moves"] = round(time.perf_counter() - t, 4)
    t = time.perf_counter()
    sample_worker = place_all(graph, word, shift, topology, options)
    stage["samples"] = round(time.perf_counter() - t, 4)
    t = time.perf_counter()
    primary, voted, new_cap = primaries(word, old, options, (moves.ids, moves.primary))
    n, m = topology.num_workers, graph.num_embeddings
    s_indptr, s_workers = K.csr_from_masks(np.asarray(old.secondary_indptr), np.asarray(old.secondary_workers),
                                           np.int64(old.num_embeddings), sample.bits, moves.sec, np.int64(m),
                                           np.int64(n))
    stage["outputs"] = round(time.perf_counter() - t, 4)
    info = {
        "max_moved_rows": int(budget),
        "plan": "sampled",
        "sampled_samples": int(sample.indptr.size - 1),
        "sampled_rows": int(sample.used_ids.size),
        "spent_rows": moves.spent,
        "candidates": moves.candidates,
        "new_id_cap": int(new_cap),
        "primary_cap": moves.primary_cap,
        "secondary_cap": moves.secondary_cap.tolist(),
        "stages": stage,
    }
    result = Placement(num_workers=n, sample_worker=sample_worker, embedding_primary=primary,
                       secondary_indptr=s_indptr, secondary_workers=s_workers, method="incremental",
                       options=asdict(options), seed=seed, info=info)
    return result, voted[voted < old.num_embeddings]


def place(graph: BipartiteGraph, old: Placement, topology: Topology, seed: int, options,
          word: np.ndarray, shift: int) -> tuple[Placement, np.ndarray, int]:
    """:func:`gmp.partition.incremental.place_new_data` by step 4 alone (nothing moves; ``word`` consumed):
    ``(placement, voted ids, new_id_cap)``."""
    sample_worker = place_all(graph, word, shift, topology, options)
    primary, voted, new_cap = primaries(word, old, options)
    m, m_old = graph.num_embeddings, old.num_embeddings
    oip = np.asarray(old.secondary_indptr)
    indptr = oip if m == m_old else np.concatenate([oip, np.full(m - m_old, oip[-1], dtype=np.int64)])
    placed = Placement(num_workers=topology.num_workers, sample_worker=sample_worker, embedding_primary=primary,
                       secondary_indptr=indptr, secondary_workers=np.asarray(old.secondary_workers, dtype=np.int32),
                       method="place-new", options=asdict(options), seed=seed, info={"plan": "sampled"})
    return placed, voted, new_cap
