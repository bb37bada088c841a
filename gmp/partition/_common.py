"""Building blocks shared by the graph-aware partitioners.

Most partitioners decide one side of the bipartite graph and derive the other
side from it. The two derivations are the same everywhere, so they live here,
compiled with numba and deterministic (no threads, fixed tie-breaking):

* :func:`assign_samples_by_majority` — every sample goes to the worker that
  already holds most of its embeddings (primaries), subject to a hard cap on
  samples per worker. Ties go to the least-loaded worker, then the lowest id.
* :func:`compact_ids` — a dense numbering of the ids that occur, so
  per-embedding state is sized by the used ids, not the id space.
* :func:`count_embedding_workers` + :func:`choose_primaries` — every embedding
  goes to the worker that holds most of its samples; ties go to the worker
  with the fewest primaries so far, then the lowest id; an optional cap bounds
  primaries per worker.
* :func:`place_unused_embeddings` — embeddings no sample uses are spread over
  the least-loaded workers (they cost no traffic, only memory), so ids that
  never occur neither distort a partitioner's graph nor pile up on worker 0.
* :func:`sample_cap` — the one definition of the hard balance cap,
  ``ceil(num_items / num_workers * max_imbalance)``, never below
  ``ceil(num_items / num_workers)`` so it is always feasible, never above
  ``num_items`` (a bigger cap is no cap).

All id arrays are int32 and all offsets int64; counts are integers.
"""

from __future__ import annotations

import ctypes
import glob
import math
import os
import threading

import numba
import numpy as np

from ..errors import OutOfMemory, PartitionError
from ..params import is_real
from ..topology import Topology

UNASSIGNED = -1


def sample_cap(num_items: int, num_workers: int, max_imbalance: float) -> int:
    """The most items one worker may hold: ``ceil(n / N * max_imbalance)``, at least ``ceil(n / N)`` and at
    most ``n``.

    A cap of ``n`` or more is no cap, so any ``max_imbalance >= N`` gives ``n``: tables sized by the cap
    (hybrid's soft counts) then stay sized by the graph, and a huge value (1e300) neither overflows nor
    asks for memory.

    Examples
    --------
    >>> sample_cap(10, 4, 1.05)
    3
    >>> sample_cap(100, 8, 1.05)
    14
    >>> sample_cap(100, 8, 1e300)
    100
    """
    if num_workers < 1:
        raise PartitionError(f"num_workers must be >= 1, got {num_workers}.")
    num_items, num_workers = int(num_items), int(num_workers)
    if float(max_imbalance) >= num_workers:
        return num_items
    even = -(-num_items // num_workers)
    # the small epsilon keeps 100 / 4 * 1.0 from becoming 26 through rounding
    capped = math.ceil(num_items / num_workers * float(max_imbalance) - 1e-9)
    return min(num_items, max(even, capped))


def solver_imbalance(imbalance: float, num_parts: int) -> float:
    """``imbalance`` (max/mean) as handed to an external partitioner (METIS, KaMinPar, Mt-KaHyPar): at most
    ``num_parts``, where one part may already hold the whole graph, so a huge value is no constraint rather
    than an integer overflow in the solver (METIS's ``ufactor`` is an int64)."""
    return min(float(imbalance), float(max(int(num_parts), 1)))


def check_max_imbalance(value: float, *, name: str = "max_imbalance") -> None:
    """Raise :class:`PartitionError` unless ``value`` is a finite number >= 1."""
    if not is_real(value) or not math.isfinite(value) or value < 1.0:
        raise PartitionError(f"{name} must be a number >= 1.0 (1.05 allows 5% above the mean), got {value!r}.")


def seeded_order(n: int, rng: np.random.Generator) -> np.ndarray:
    """A seeded permutation of ``range(n)`` as int32 (int64 above 2^31)."""
    perm = rng.permutation(n)
    return perm.astype(np.int32 if n < 2**31 else np.int64, copy=False)


# --------------------------------------------------------------------------
# samples follow their embeddings
# --------------------------------------------------------------------------
def assign_samples_by_majority(indptr: np.ndarray, indices: np.ndarray, embedding_primary: np.ndarray,
                               num_workers: int, cap: int, order: np.ndarray | None = None) -> np.ndarray:
    """Each sample to the worker holding most of its embeddings, at most ``cap`` samples per worker.

    Parameters
    ----------
    indptr, indices
        The sample -> embedding CSR (int64 offsets, int32/int64 ids).
    embedding_primary
        int32 [num_embeddings]; entries ``< 0`` (not yet placed) are ignored.
    num_workers, cap
        Number of workers and the hard cap on samples per worker
        (``cap * num_workers >= num_samples`` is required).
    order
        The order samples are decided in (default: dataset order). Early
        samples get their favourite worker; later ones may hit the cap, so a
        seeded random order is fairer.

    Returns
    -------
    numpy.ndarray
        int32 [num_samples].
    """
    num_samples = indptr.size - 1
    if int(cap) * int(num_workers) < num_samples:
        raise PartitionError(f"sample cap {cap} x {num_workers} workers cannot hold {num_samples} samples.")
    if order is None:
        order = np.arange(num_samples, dtype=np.int64)
    out = np.empty(num_samples, dtype=np.int32)
    assign_by_majority(np.asarray(indptr), np.asarray(indices), np.asarray(embedding_primary, dtype=np.int32),
                       np.zeros(int(num_workers), dtype=np.int64), np.full(int(num_workers), int(cap), dtype=np.int64),
                       np.asarray(order), out)
    return out


@numba.njit(cache=True, nogil=True)
def assign_by_majority(indptr, indices, row_worker, load, cap, order, out):  # pragma: no cover - compiled
    """Samples in ``order`` to the worker holding most of their placed rows (``row_worker >= 0``),
    among workers with ``load < cap`` (per worker; ``load`` is updated); ties to the lower load,
    then the lower worker id."""
    num_workers = load.size
    count = np.zeros(num_workers, dtype=np.int64)
    for t in range(order.size):
        i = order[t]
        for k in range(indptr[i], indptr[i + 1]):
            w = row_worker[indices[k]]
            if w >= 0:
                count[w] += 1
        best = -1
        for w in range(num_workers):
            if load[w] >= cap[w]:
                continue
            if best < 0 or count[w] > count[best] or (count[w] == count[best] and load[w] < load[best]):
                best = w
        out[i] = best
        load[best] += 1
        for k in range(indptr[i], indptr[i + 1]):
            w = row_worker[indices[k]]
            if w >= 0:
                count[w] = 0


# --------------------------------------------------------------------------
# embeddings follow their samples
# --------------------------------------------------------------------------
def compact_ids(indices: np.ndarray, num_embeddings: int, select: np.ndarray | None = None):
    """Dense numbering of the embeddings that occur (or of the ``select`` ids).

    Returns ``(ids, local)``: ``ids`` int32 [num_used] ascending, and
    ``local`` int32 [num_embeddings] with ``local[ids[k]] == k`` and -1
    elsewhere. Per-embedding state is then sized by the ids that occur, not
    by the id space (Criteo-Kaggle's 33.8M ids at 1M samples are mostly
    unused).
    """
    if select is None:
        return _compact_used(np.asarray(indices), np.int64(num_embeddings))
    ids = np.asarray(select, dtype=np.int32)
    local = np.full(int(num_embeddings), -1, dtype=np.int32)
    local[ids] = np.arange(ids.size, dtype=np.int32)
    return ids, local


@numba.njit(cache=True, nogil=True)
def _compact_used(indices, num_embeddings):  # pragma: no cover - compiled
    """``(ids, local)`` of the ids that occur in ``indices``, in two passes and without temporaries."""
    local = np.zeros(num_embeddings, dtype=np.int32)
    for k in range(indices.size):
        local[indices[k]] = 1
    n = 0
    for e in range(num_embeddings):
        if local[e] != 0:
            local[e] = n
            n += 1
        else:
            local[e] = -1
    ids = np.empty(n, dtype=np.int32)
    for e in range(num_embeddings):
        if local[e] >= 0:
            ids[local[e]] = e
    return ids, local


def count_embedding_workers(indptr: np.ndarray, indices: np.ndarray, sample_worker: np.ndarray,
                            local: np.ndarray, num_local: int, num_workers: int) -> np.ndarray:
    """int32 [num_local, num_workers]: how many samples of each worker use each (compact) embedding.

    ``local`` maps embedding ids to rows (-1: not counted), see
    :func:`compact_ids`. One streaming pass over the sample CSR (no
    transpose); memory ``4 * num_local * num_workers`` bytes.
    """
    counts = np.zeros((int(num_local), int(num_workers)), dtype=np.int32)
    _count_embedding_workers(np.asarray(indptr), np.asarray(indices), np.asarray(sample_worker, dtype=np.int32),
                             np.asarray(local, dtype=np.int32), counts)
    return counts



def primaries_by_majority(indptr: np.ndarray, indices: np.ndarray, sample_worker: np.ndarray,
                          num_embeddings: int, num_workers: int, max_imbalance: float) -> np.ndarray:
    """int32 [num_embeddings]: the edge-cut primaries of a sample assignment. Each used embedding goes to
    the worker with most of its samples (:func:`choose_primaries`, at most ``max_imbalance`` x the mean
    primaries per worker); unused ones are dealt to the least-loaded workers (:func:`place_unused_embeddings`)."""
    used, local = compact_ids(indices, num_embeddings)
    counts = count_embedding_workers(indptr, indices, sample_worker, local, used.size, num_workers)
    del local
    primary = np.full(num_embeddings, UNASSIGNED, dtype=np.int32)
    primary[used] = choose_primaries(counts, cap=sample_cap(used.size, num_workers, max_imbalance))
    del counts
    place_unused_embeddings(primary, num_workers)
    return primary

@numba.njit(cache=True, nogil=True)
def _count_embedding_workers(indptr, indices, sample_worker, local, counts):  # pragma: no cover - compiled
    for i in range(indptr.size - 1):
        w = sample_worker[i]
        for k in range(indptr[i], indptr[i + 1]):
            r = local[indices[k]]
            if r >= 0:
                counts[r, w] += 1


def choose_primaries(counts: np.ndarray, embedding_primary: np.ndarray | None = None, *,
                     cap: int | None = None, initial_load: np.ndarray | None = None) -> np.ndarray:
    """Each used embedding's primary = the worker with most of its samples.

    Parameters
    ----------
    counts
        int32 [num_rows, num_workers] from :func:`count_embedding_workers`.
    embedding_primary
        int32 [num_rows] to fill in place: only entries ``< 0`` whose row is
        used (row sum > 0) are decided; existing primaries count towards the
        load. ``None``: start from all-unassigned.
    cap
        Optional hard cap on primaries per worker (counting those already
        placed). When the favourite worker is full the next best one is taken.
    initial_load
        Primaries per worker placed elsewhere (e.g. rows outside this compact
        numbering), added to the load used for tie-breaking and the cap.

    Returns
    -------
    numpy.ndarray
        The int32 primary array (unused, unassigned rows stay ``-1``).

    Notes
    -----
    Rows are decided in order; ties go to the worker with fewer primaries so
    far, then the lower id, so the result is deterministic.
    """
    num_rows, num_workers = counts.shape
    if embedding_primary is None:
        embedding_primary = np.full(num_rows, UNASSIGNED, dtype=np.int32)
    load = np.bincount(embedding_primary[embedding_primary >= 0], minlength=num_workers).astype(np.int64)
    if initial_load is not None:
        load += np.asarray(initial_load, dtype=np.int64)
    big = np.int64(cap) if cap is not None else np.int64(2**62)
    _choose_primaries(counts, embedding_primary, load, big)
    return embedding_primary


@numba.njit(cache=True, nogil=True)
def _choose_primaries(counts, primary, load, cap):  # pragma: no cover - compiled
    num_embeddings, num_workers = counts.shape
    for e in range(num_embeddings):
        if primary[e] >= 0:
            continue
        used = False
        for w in range(num_workers):
            if counts[e, w] > 0:
                used = True
                break
        if not used:
            continue
        best = -1
        for w in range(num_workers):
            if load[w] >= cap:
                continue
            if best < 0 or counts[e, w] > counts[e, best] or (counts[e, w] == counts[e, best] and load[w] < load[best]):
                best = w
        if best < 0:  # every worker at the cap: take the least loaded
            best = 0
            for w in range(1, num_workers):
                if load[w] < load[best]:
                    best = w
        primary[e] = best
        load[best] += 1


def place_unused_embeddings(embedding_primary: np.ndarray, num_workers: int) -> np.ndarray:
    """Fill every entry ``< 0`` with the currently least-loaded worker (ties: lowest id), in id order.

    Used for embeddings no sample uses: they cost no traffic, so they only
    even out memory. Modifies and returns ``embedding_primary``. One pass in
    a compiled kernel (criteo-1m: 31M of 33.8M ids are unused).
    """
    _fill_least_loaded(embedding_primary, np.int64(num_workers))
    return embedding_primary


@numba.njit(cache=True, nogil=True, inline="always")
def _deal(load, r):  # pragma: no cover - compiled
    """The next worker of the greedy "least loaded, lowest id on ties": ``(worker, r)``.

    While ``r < 0`` the loads may differ: the argmin, counted into ``load``. Once they are all
    equal the greedy deals 0, 1, ..., N-1 and is equal again, so from then on (``r >= 0``, the
    next worker) it deals round-robin without an argmin per item (same result)."""
    if r < 0:
        best = 0
        equal = True
        for w in range(1, load.size):
            if load[w] != load[0]:
                equal = False
            if load[w] < load[best]:
                best = w
        if not equal:
            load[best] += 1
            return best, r
        r = 0
    return r, (r + 1) % load.size


@numba.njit(cache=True, nogil=True)
def _fill_least_loaded(primary, num_workers):  # pragma: no cover - compiled
    """The greedy "least loaded, lowest id on ties" in id order (:func:`_deal`)."""
    load = np.zeros(num_workers, dtype=np.int64)
    for e in range(primary.size):
        if primary[e] >= 0:
            load[primary[e]] += 1
    r = -1
    for e in range(primary.size):
        if primary[e] < 0:
            primary[e], r = _deal(load, r)


def expand_primaries(ids: np.ndarray, primary: np.ndarray, num_embeddings: int, num_workers: int) -> np.ndarray:
    """The primaries of compact rows (row j = embedding ``ids[j]``, ids ascending) over all
    ``num_embeddings`` ids, the others placed by :func:`place_unused_embeddings`; in one pass,
    without the ``-1``-filled int32 array and the scatter (criteo-1m: 33.8M ids, 2.8M used)."""
    out = np.empty(num_embeddings, dtype=np.int32)
    _expand_and_fill(np.asarray(ids), np.asarray(primary, dtype=np.int32), np.int64(num_workers), out)
    return out


@numba.njit(cache=True, nogil=True)
def _expand_and_fill(ids, primary, num_workers, out):  # pragma: no cover - compiled
    load = np.zeros(num_workers, dtype=np.int64)
    for j in range(primary.size):
        if primary[j] >= 0:
            load[primary[j]] += 1
    r = -1
    j = 0
    for e in range(out.size):
        p = -1
        if j < ids.size and ids[j] == e:
            p = primary[j]
            j += 1
        if p < 0:
            p, r = _deal(load, r)
        out[e] = p


def enforce_cap(assignment: np.ndarray, num_workers: int, cap: int, rng: np.random.Generator) -> np.ndarray:
    """Move items off workers above ``cap`` to the least-loaded workers (seeded choice of which items).

    A repair step for external partitioners (METIS) whose balance is a soft
    target: only the excess moves, so a placement within the cap is returned
    unchanged. Modifies and returns ``assignment`` (int32).
    """
    load = np.bincount(assignment, minlength=num_workers).astype(np.int64)
    if load.max(initial=0) <= cap:
        return assignment
    if cap * num_workers < assignment.size:
        raise PartitionError(f"cap {cap} x {num_workers} workers cannot hold {assignment.size} items.")
    order = seeded_order(assignment.size, rng)
    _move_excess(assignment, load, np.int64(cap), order)
    return assignment


@numba.njit(cache=True, nogil=True)
def _move_excess(assignment, load, cap, order):  # pragma: no cover - compiled
    num_workers = load.size
    for t in range(order.size):
        i = order[t]
        w = assignment[i]
        if load[w] <= cap:
            continue
        best = 0
        for v in range(1, num_workers):
            if load[v] < load[best]:
                best = v
        assignment[i] = best
        load[w] -= 1
        load[best] += 1


# --------------------------------------------------------------------------
# METIS boundary
# --------------------------------------------------------------------------
def import_pymetis():
    """Import pymetis or raise :class:`MissingDependencyError` with the install hint."""
    try:
        import pymetis  # noqa: PLC0415 - optional heavy dependency, imported where needed
    except ImportError:
        from ..errors import MissingDependencyError

        raise MissingDependencyError(
            "the metis partitioners need pymetis, which is not installed; install it with 'pip install pymetis'."
        ) from None
    return pymetis


def run_metis(xadj: np.ndarray, adjncy: np.ndarray, num_parts: int, *, vertex_weights: np.ndarray | None,
              edge_weights: np.ndarray | None, seed: int, imbalance: float, recursive: bool,
              ncuts: int = 1, niter: int | None = None) -> np.ndarray:
    """``METIS_PartGraph{Kway,Recursive}`` through pymetis; returns int32 [num_vertices] parts.

    Translates gmp's names to METIS's at this one boundary: ``num_parts`` ->
    ``nparts``, ``imbalance`` (max/mean, e.g. 1.03) -> ``ufactor`` (in 1/1000,
    e.g. 30). Arrays are passed as int64, pymetis's ``idx_t`` here, so it
    reads them without copying. ``ncuts``: METIS computes that many
    partitionings (different seeds inside METIS) and keeps the smallest cut.
    ``niter``: refinement passes per uncoarsening level (METIS's default, 10, when None).
    """
    pymetis = import_pymetis()
    num_vertices = xadj.size - 1
    if num_parts == 1 or num_vertices == 0:
        return np.zeros(num_vertices, dtype=np.int32)
    ufactor = max(1, int(round((solver_imbalance(imbalance, num_parts) - 1.0) * 1000)))
    dtype = np.dtype(pymetis.zero_copy_dtype()) if hasattr(pymetis, "zero_copy_dtype") else np.dtype(np.int64)
    kw = {}
    if vertex_weights is not None:
        kw["vweights"] = np.ascontiguousarray(vertex_weights, dtype=dtype)
    if edge_weights is not None:
        kw["eweights"] = np.ascontiguousarray(edge_weights, dtype=dtype)
    entry = _metis_entry(pymetis, recursive)
    if entry is not None:
        return _call_metis(entry, xadj, adjncy, int(num_parts), kw.get("vweights"), kw.get("eweights"),
                           seed=int(seed), ufactor=ufactor, ncuts=int(ncuts), niter=niter)
    opts = pymetis.Options(seed=int(seed), ufactor=ufactor, ncuts=int(ncuts))
    if niter is not None:
        opts.niter = int(niter)
    adjacency = pymetis.CSRAdjacency(np.ascontiguousarray(xadj, dtype=dtype), np.ascontiguousarray(adjncy, dtype=dtype))
    result = pymetis.part_graph(int(num_parts), adjacency, recursive=bool(recursive), options=opts, **kw)
    return np.asarray(result.vertex_part, dtype=np.int32)


_METIS_ENTRIES: dict = {}
#: METIS is not thread-safe (GKlib's random generator is one global state, seeded at the start of every
#: call): one METIS call at a time, as under pymetis's GIL, but the other threads' work goes on meanwhile
_METIS_LOCK = threading.Lock()


def _metis_entry(pymetis, recursive: bool):
    """``METIS_PartGraphKway`` / ``METIS_PartGraphRecursive`` of the METIS that pymetis links, through ctypes,
    or None where its extension module does not export them (then pymetis's own call is used).

    Why: pymetis holds the GIL for the whole METIS run, so the multilevel start's candidate threads
    (:mod:`gmp.partition._multilevel`) waited for each other's METIS; a ctypes call releases the GIL
    (criteo-1m: 1 s of METIS per candidate), and ``_METIS_LOCK`` keeps METIS calls one at a time (its
    random generator is global state). Same library and the same arguments as pymetis passes (one
    constraint, no target weights or ``ubvec``), so the same parts (tests/test_baselines.py compares
    them). Only METIS's public C API is used (metis.h): the entry points, ``METIS_SetDefaultOptions``
    and the option indices below; the library is pymetis's extension module, found by file name."""
    name = "METIS_PartGraphRecursive" if recursive else "METIS_PartGraphKway"
    if name not in _METIS_ENTRIES:
        fn = None
        try:
            if np.dtype(pymetis.zero_copy_dtype()) == np.int64:  # idx_t of that METIS build
                lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(pymetis.__file__), "_internal*.so"))[0])
                fn = getattr(lib, name)
                fn.restype = ctypes.c_int
                fn.argtypes = [ctypes.c_void_p] * 13
                fn.set_defaults = lib.METIS_SetDefaultOptions
                fn.set_defaults.argtypes = [ctypes.c_void_p]
        except (AttributeError, IndexError, OSError, TypeError):
            fn = None
        _METIS_ENTRIES[name] = fn
    return _METIS_ENTRIES[name]


#: metis.h (METIS 5): the status of a failed allocation (rstatus_et)
METIS_ERROR_MEMORY = -3
#: metis.h (METIS 5): METIS_NOPTIONS and the indices of the options gmp sets
METIS_NOPTIONS, METIS_OPTION_NITER, METIS_OPTION_NCUTS, METIS_OPTION_SEED, METIS_OPTION_UFACTOR = 40, 6, 7, 8, 16


def _call_metis(fn, xadj, adjncy, num_parts, vweights, eweights, *, seed, ufactor, ncuts, niter) -> np.ndarray:
    """One METIS_PartGraph* call (METIS 5 API, idx_t = int64) with the GIL released."""
    def ptr(a):
        return None if a is None else a.ctypes.data_as(ctypes.c_void_p)

    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    adjncy = np.ascontiguousarray(adjncy, dtype=np.int64)
    options = np.empty(METIS_NOPTIONS, dtype=np.int64)
    fn.set_defaults(ptr(options))
    options[METIS_OPTION_SEED], options[METIS_OPTION_UFACTOR], options[METIS_OPTION_NCUTS] = seed, ufactor, ncuts
    if niter is not None:
        options[METIS_OPTION_NITER] = niter
    nvtxs, ncon, nparts, edgecut = (ctypes.c_int64(xadj.size - 1), ctypes.c_int64(1), ctypes.c_int64(num_parts),
                                    ctypes.c_int64(0))
    part = np.empty(xadj.size - 1, dtype=np.int64)
    with _METIS_LOCK:
        status = fn(ctypes.byref(nvtxs), ctypes.byref(ncon), ptr(xadj), ptr(adjncy), ptr(vweights), None, ptr(eweights),
                    ctypes.byref(nparts), None, None, ptr(options), ctypes.byref(edgecut), ptr(part))
    if status == METIS_ERROR_MEMORY:  # its allocation failed (it printed its own lines about it)
        raise OutOfMemory(f"METIS ran out of memory (METIS_ERROR_MEMORY, status {status}) on a graph of "
                          f"{xadj.size - 1:,} vertices")
    if status != 1:  # METIS_OK
        raise PartitionError(f"METIS failed (status {status}) on a graph of {xadj.size - 1} vertices.")
    return part.astype(np.int32)


def is_hierarchical(topology: Topology) -> bool:
    """Machines the partitioners place for: more than one, more than one worker on some machine, all of one
    size, and a cost matrix whose off-diagonal costs are not all alike. Otherwise the topology is placed as
    flat (its costs still weigh every read): where every cost is alike the machines change no cost, and the
    machines-first start split unequal machines in equal halves, which the sweeps then pulled back to the
    workers' loads through the communities (3+1 workers at one cost: 10,203 batch reads where the flat
    start gives 7,105 on a tiny-preset day; session 32)."""
    mo = np.asarray(topology.machine_of)
    num_machines = int(mo.max()) + 1 if mo.size else 1
    if not 1 < num_machines < topology.num_workers:
        return False
    sizes = np.bincount(mo, minlength=num_machines)
    return bool(np.all(sizes == sizes[0])) and not topology.is_uniform


def machines_of_the_start(topology: Topology) -> np.ndarray:
    """int64 [N]: the machines the multilevel start splits the signal graph into first (the topology's where
    :func:`is_hierarchical`, else one machine: a flat split)."""
    if is_hierarchical(topology):
        return np.asarray(topology.machine_of, dtype=np.int64)
    return np.zeros(topology.num_workers, dtype=np.int64)
