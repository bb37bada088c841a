"""Herald Algorithm 1 spelled out: the pure functions the engine's kernels implement, and a slow
plain-Python replay of the engine's rules (the specification of :mod:`gmp.train.herald.kernels`).

* :func:`score_matrix`, :func:`location_aware_assignment` -- Algorithm 1 lines 1-13;
* :func:`communication_plan` -- Algorithm 1 line 15 (rows with pending updates only);
* :func:`naive_assignment`, :func:`batch_capacities` -- the naive split;
* :func:`replay_epoch` -- one epoch of the replica state machine, written from the rules.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict

import numpy as np

import numba

from ...errors import TrainingError
from .kernels import best_worker


@numba.njit(cache=True)
def scores(b_indptr, b_indices, resident, num_workers):  # pragma: no cover - compiled
    m = b_indptr.size - 1
    out = np.zeros((m, num_workers), dtype=np.int32)
    for s in range(m):
        for j in range(b_indptr[s], b_indptr[s + 1]):
            mask = resident[b_indices[j]]
            for w in range(num_workers):
                out[s, w] += (mask >> w) & 1
    return out


@numba.njit(cache=True, nogil=True)
def assign_greedy(b_indptr, b_indices, resident, capacities):  # pragma: no cover - compiled
    """Herald Algorithm 1, lines 1-13 (see module docstring for the tie rule).

    ``resident[r]``: bit mask of workers where row r scores (primary or current copy).
    """
    m = b_indptr.size - 1
    n = capacities.size
    worker_of = np.empty(m, dtype=np.int32)
    load = np.zeros(n, dtype=np.int64)
    score = np.zeros(n, dtype=np.int64)
    for s in range(m):
        for w in range(n):
            score[w] = 0
        for j in range(b_indptr[s], b_indptr[s + 1]):
            # line 3: score(i, w) = |cache(w) ∩ embs(i)|, cache(w) = current copies + primaries
            mask = resident[b_indices[j]]
            for w in range(n):
                score[w] += (mask >> w) & 1
        best = best_worker(score, load, capacities)  # line 8
        worker_of[s] = best  # line 9
        load[best] += 1  # lines 10-11: full workers drop out via the capacity test above
    return worker_of


def _as_masks(resident, num_embeddings: int) -> np.ndarray:
    if isinstance(resident, np.ndarray) and resident.dtype == np.int64 and resident.ndim == 1:
        return resident
    return resident_masks(num_embeddings, resident)


def _with_primary(resident, primary) -> np.ndarray:
    primary = np.asarray(primary, dtype=np.int64)
    return _as_masks(resident, primary.size) | np.left_shift(np.int64(1), primary)


def resident_masks(num_embeddings: int, rows_by_worker) -> np.ndarray:
    """int64 [num_embeddings] bit masks from ``{worker: rows}`` (or a list indexed by worker)."""
    items = rows_by_worker.items() if hasattr(rows_by_worker, "items") else enumerate(rows_by_worker)
    out = np.zeros(num_embeddings, dtype=np.int64)
    for w, rows in items:
        rows = np.asarray(list(rows), dtype=np.int64)
        out[rows] |= np.int64(1) << np.int64(w)
    return out


def _csr(batch) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(batch, tuple) and len(batch) == 2:
        return np.asarray(batch[0], dtype=np.int64), np.asarray(batch[1], dtype=np.int64)
    indptr = np.zeros(len(batch) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(s) for s in batch])
    indices = np.asarray([r for s in batch for r in s], dtype=np.int64)
    return indptr, indices


def score_matrix(batch, primary, resident, num_workers: int) -> np.ndarray:
    """Algorithm 1 line 3: int32 [num_samples, num_workers] scores.

    Parameters
    ----------
    batch : list of row-id lists, or (indptr, indices)
    primary : int array [num_embeddings]
    resident : int64 bit masks [num_embeddings], or ``{worker: rows}`` of
        current non-primary copies (secondaries and cached rows).
    """
    indptr, indices = _csr(batch)
    return scores(indptr, indices, _with_primary(resident, primary), int(num_workers))


def location_aware_assignment(batch, primary, resident, capacities) -> np.ndarray:
    """Herald Algorithm 1 (lines 1-13): int32 worker per sample, exactly ``capacities[w]`` each.

    Examples
    --------
    >>> location_aware_assignment([[0], [1], [0]], primary=[0, 1], resident={}, capacities=[2, 1]).tolist()
    [0, 1, 0]
    """
    primary = np.asarray(primary, dtype=np.int32)
    capacities = np.asarray(capacities, dtype=np.int64)
    indptr, indices = _csr(batch)
    if int(capacities.sum()) != indptr.size - 1:
        raise TrainingError(f"capacities sum to {int(capacities.sum())}, the batch has {indptr.size - 1} samples.")
    return assign_greedy(indptr, indices, _with_primary(resident, primary), capacities)


def naive_assignment(capacities) -> np.ndarray:
    """Consecutive split: the first ``capacities[0]`` samples to worker 0, and so on."""
    capacities = np.asarray(capacities, dtype=np.int64)
    return np.repeat(np.arange(capacities.size, dtype=np.int32), capacities)


def communication_plan(batch, worker_of, dirty, num_workers: int) -> list[np.ndarray]:
    """Algorithm 1 line 15 restricted to rows with pending updates.

    For each worker A, the rows whose pending updates A holds (``dirty[r] == A``)
    and that some other worker uses in ``batch`` under ``worker_of``: A must push
    them before that batch is trained. Rows ascending.
    """
    indptr, indices = _csr(batch)
    worker_of = np.asarray(worker_of, dtype=np.int64)
    dirty = np.asarray(dirty, dtype=np.int64)
    sample_of_edge = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    users = worker_of[sample_of_edge]
    holders = dirty[indices]
    hit = (holders >= 0) & (users != holders)
    return [np.unique(indices[hit & (holders == a)]) for a in range(num_workers)]


def batch_capacities(num_samples: int, num_workers: int) -> np.ndarray:
    """Samples per worker of a global batch: ``np.array_split`` sizes (B each when full)."""
    base, extra = divmod(int(num_samples), int(num_workers))
    caps = np.full(num_workers, base, dtype=np.int64)
    caps[:extra] += 1
    return caps



def replay_epoch(rows, primary, n, b, order, *, assignment, on_demand, cap, policy, k, secondaries=()):
    """The engine's rules (:mod:`gmp.train.herald.engine`) for one epoch, in plain Python: slow,
    written from the rules rather than from the kernels, and the specification the engine is
    tested against (tests/test_scheduler.py).

    ``rows[s]`` are sample s's row ids, ``primary[r]`` row r's primary worker, ``secondaries``
    (row, worker) pairs, ``order`` the epoch's sample order, ``cap``/``policy``/``k`` the cache.
    Returns (event counts by name, per batch the worker of each sample).
    """
    primary = list(primary)
    local = defaultdict(set)
    for r, p in enumerate(primary):
        local[r].add(p)
    for r, w in secondaries:
        local[r].add(w)
    valid = {r: set(local[r]) for r in range(len(primary))}
    dirty = {}
    caches = [OrderedDict() for _ in range(n)]
    counts = defaultdict(int)
    g = n * b
    batches = [order[i:i + g] for i in range(0, len(order), g)]
    assigned = []
    for t, batch in enumerate(batches):
        caps = [len(batch) // n + (1 if w < len(batch) % n else 0) for w in range(n)]
        if assignment == "naive":
            worker_of = [w for w in range(n) for _ in range(caps[w])]
        else:
            load = [0] * n
            worker_of = []
            for s in batch:
                sc = [sum(1 for r in rows[s] if w == primary[r] or w in valid[r]) for w in range(n)]
                avail = [w for w in range(n) if load[w] < caps[w]]
                best = max(avail, key=lambda w: (sc[w], -load[w], -w))
                worker_of.append(best)
                load[best] += 1
        assigned.append(worker_of)
        users = {}
        for s, w in zip(batch, worker_of):
            for r in rows[s]:
                users.setdefault(r, set()).add(w)
        if on_demand:
            for r, us in users.items():
                a = dirty.get(r)
                if a is not None and us - {a}:
                    counts["push_plan"] += 1
                    del dirty[r]
                    valid[r].add(primary[r])
        for r, us in sorted(users.items()):  # rows in ascending id order (the LRU tie rule)
            for w in sorted(us):
                if dirty.get(r) not in (None, w):  # the plan pushed it: never happens
                    raise TrainingError(f"reference: row {r} read by {w} while {dirty[r]} holds its updates")
                if w == primary[r]:
                    continue
                if w not in valid[r]:
                    counts["pull_stale" if (w in local[r] or r in caches[w]) else "pull_miss"] += 1
                    valid[r].add(w)
                if w not in local[r]:
                    caches[w][r] = True
                    caches[w].move_to_end(r)
        for r, us in users.items():
            p = primary[r]
            if len(us) == 1:
                (w,) = us
                if w == p:
                    valid[r] = {p}
                elif on_demand:
                    dirty[r] = w
                    valid[r] = {w}
                else:
                    counts["push_sync"] += 1
                    valid[r] = {w, p}
            else:
                counts["push_sync"] += len(us - {p})
                valid[r] = {p}
                dirty.pop(r, None)
        window = {r for bt in batches[t + 1:t + 1 + k] for s in bt for r in rows[s]} if policy == "lookahead" else set()
        for w in range(n):
            while len(caches[w]) > cap:
                victim = next((r for r in caches[w] if r not in window), None) if policy == "lookahead" else None
                if victim is None:
                    victim = next(iter(caches[w]))
                del caches[w][victim]
                valid[victim].discard(w)
                if dirty.get(victim) == w:
                    counts["push_evict"] += 1
                    del dirty[victim]
                    valid[victim].add(primary[victim])
    counts["push_flush"] += len(dirty)
    return dict(counts), assigned

