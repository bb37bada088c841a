"""The per-process state of the distributed hybrid and its bulk-synchronous sweeps.

**Sample sweep** (Algorithm 1 lines 3-5 over the samples). A round is cut into *blocks*: in block
k every process sweeps ``block_samples`` of its shard's samples sequentially against its ghost
rows, which already carry every move of the earlier blocks (all processes) and its own moves of
this block. Then the moves' count deltas, summed per (row, worker), go in one all-to-all to each
row's owner and to every other process holding a ghost of it; owners add them to their counts,
holders to their ghosts, so every ghost equals its owner's row afterwards. Each process's net
arrivals per worker ride along to every process, so the sample loads are summed without an
all-reduce. The only staleness: the other
processes' moves of the same block, at most ``(P - 1) * block_samples`` samples.

**Private rows** (``carry_private``, flat topologies). A row of global degree 1 has one ghost, on
the shard of its one sample, so that shard may move it with the sample as the single process
does (``_hybrid_kernels.best_carry_move``); the new primaries go to the owners in the same
all-to-all, and a second set of quotas keeps the primary cap.

**Hard caps.** Before each block the room ``cap - load`` on every worker is split into per-process
quotas (:meth:`~.exchange.Mesh.split_room`); a process moves a sample onto worker b only while
its net arrivals on b stay below its quota, so the cap holds globally (the caps of
:mod:`gmp.partition.hybrid`, same formulas).

**Embedding sweep.** Every owner sweeps its used rows in id order against its authoritative
counts (which the sample sweep left fresh), with primary quotas split the same way; the traffic
totals of the result are summed across processes. Then every ghost's primary is refreshed.

With one process and the same start, every decision is the single-process sweep's: the same
order, the same counts, the same loads (tests/test_distributed_partition.py checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...kernels.simd import padded_width
from .._common import sample_cap
from .._objective import default_weights, soft_count_table, summarize
from . import _kernels as DK
from .exchange import Ghosts, Mesh, OwnedRows
from .shard import Shard


#: after each block, sweep its moved samples once more against the fresh counts (a second exchange)
RECHECK = True

#: the factor a process's own moves count with in the balance terms; None: the process count P
BALANCE_SPREAD: float | None = None

#: blocks of the owners' embedding sweep (each ends with one all-reduce of the primary loads)
EMBEDDING_BLOCKS = 32

#: a round has at least this many sample blocks: with few samples per process the blocks shrink, so
#: that the samples moving concurrently stay a small share of the graph (dense small graphs oscillate)
MIN_BLOCKS_PER_ROUND = 64


@dataclass
class Weights:
    """The objective's constants (module docstring of :mod:`gmp.partition.hybrid`)."""

    alpha: float
    beta: float
    gamma: float
    sample_cap: int
    primary_cap: int
    num_samples: int
    num_used: int


class DistState:
    """Shard, ghosts and owned rows of one process; see the module docstring."""

    def __init__(self, mesh: Mesh, shard: Shard, owned: OwnedRows, ghosts: Ghosts, cost: np.ndarray, *,
                 num_samples: int, num_used: int, options, block_samples: int,
                 owner_degree: np.ndarray | None = None):
        self.mesh, self.shard, self.owned, self.ghosts = mesh, shard, owned, ghosts
        n = int(cost.shape[0])
        self.num_workers = n
        self.cost = np.ascontiguousarray(cost, dtype=np.float64)
        self.block_samples = int(block_samples)
        scap = sample_cap(num_samples, n, options.max_imbalance)
        a, b = default_weights(n, num_samples, num_used)
        self.w = Weights(float(options.alpha) if options.alpha is not None else a,
                         float(options.beta) if options.beta is not None else b, float(options.gamma), scap,
                         sample_cap(num_used, n, options.max_imbalance), num_samples, num_used)
        self.f = soft_count_table(scap, num_samples / n, options.batch_size)
        self.df = np.diff(self.f)
        self.width = padded_width(n)
        # one process: the ghosts are the owned rows (same ids, same order); share the arrays
        self.shared = mesh.size == 1
        self.sw = np.zeros(shard.num_samples, dtype=np.int32)
        self.count = np.zeros((owned.used.size, n), dtype=np.int32)
        self.prim = np.zeros(owned.used.size, dtype=np.int32)
        self.gcount = self.count if self.shared else np.zeros((ghosts.gids.size, n), dtype=np.int32)
        self.gprim = self.prim if self.shared else np.zeros(ghosts.gids.size, dtype=np.int32)
        self.gdrow = np.zeros((ghosts.gids.size, self.width), dtype=np.float64)
        self.sample_load = np.zeros(n, dtype=np.int64)
        self.primary_load = np.zeros(n, dtype=np.int64)
        self.served = np.zeros(n, dtype=np.float64)
        self.received = np.zeros(n, dtype=np.float64)
        self._traffic: tuple | None = None
        self._tally = np.zeros(n, dtype=np.int64)  # the sample sweep's scratch (private rows by primary)
        self.bytes_per_round: list[int] = []
        # per ghost row, a bit per process holding a ghost of it (the owner's ``subs``): where deltas go;
        # with ``owner_degree`` (carry private rows) the rows of global degree 1 ride along: the sample
        # sweep moves them with their one sample, whose shard holds their only ghost
        private = None
        if self.shared:
            self.ghost_subs = np.zeros(0, dtype=np.uint64)
            if owner_degree is not None:
                private = owner_degree == 1
        else:
            cols = [owned.subs.view(np.int64)] + ([] if owner_degree is None else [owner_degree])
            got = ghosts.receive_full(owned, np.stack(cols, axis=1))
            self.ghost_subs = got[:, 0].view(np.uint64)
            if owner_degree is not None:
                private = got[:, 1] == 1
            del got
        if private is not None:
            shard.carry_private(private)

    # -- set-up after a start ----------------------------------------------
    def set_start(self, sw: np.ndarray, owner_count: np.ndarray, prim: np.ndarray) -> None:
        """Install a start: this shard's workers, the owners' counts and primaries; refresh ghosts and loads."""
        self.sw[:] = sw
        self.count[:] = owner_count
        self.prim[:] = prim
        self.refresh_ghosts(counts=True)
        self.sample_load = self.mesh.isum(np.bincount(self.sw, minlength=self.num_workers))
        self.primary_load = self.mesh.isum(np.bincount(self.prim, minlength=self.num_workers))
        self._traffic = None

    def refresh_ghosts(self, *, counts: bool) -> None:
        """Every ghost takes its owner's primary (and counts): one all-to-all of int64 rows."""
        if not self.shared:
            values = np.concatenate([self.prim[:, None], self.count], axis=1) if counts else self.prim[:, None]
            got = self.ghosts.receive_full(self.owned, values)
            self.gprim[:] = got[:, 0]
            if counts:
                self.gcount[:] = got[:, 1:]
        if counts:  # drow follows the counts, read as they are (an int64 copy of them was 8 B per row and worker)
            DK.overwrite_rows(np.arange(self.gcount.shape[0], dtype=np.int64), self.gcount, self.gcount, self.gdrow,
                              self.df)

    # -- objective ----------------------------------------------------------
    def mark_stale(self) -> None:
        """The placement changed: the traffic totals are recomputed on the next :meth:`summary`."""
        self._traffic = None

    def summary(self) -> dict:
        """The round metrics of :func:`gmp.partition._objective.summarize` over all processes."""
        if self._traffic is None:
            served = np.zeros(self.num_workers)
            received = np.zeros(self.num_workers)
            sums, counts = np.zeros(2), np.zeros(2, dtype=np.int64)
            DK.owned_traffic(self.prim, self.count, self.f, self.cost, served, received, sums, counts)
            self._set_traffic(served, received, sums, counts)
        view = _View(self)
        return summarize(view, self._traffic)

    def _set_traffic(self, served, received, sums, counts) -> None:
        n = self.num_workers
        tot = self.mesh.sum(np.concatenate([served, received, sums, counts.astype(np.float64)]))
        self.served, self.received = tot[:n], tot[n:2 * n]
        self._traffic = (float(tot[2 * n]), float(tot[2 * n + 1]), int(round(tot[2 * n + 2])),
                         int(round(tot[2 * n + 3])))

    def effective_cost(self) -> np.ndarray:
        """C' (Eq. 5 linearised at the round start), as :meth:`gmp.partition.hybrid` computes it."""
        d_mean = float(self.served.mean())
        if self.w.gamma == 0.0 or d_mean <= 0.0:
            return self.cost.copy()
        return np.ascontiguousarray(self.cost * (1.0 + self.w.gamma * (self.served / d_mean - 1.0))[:, None])

    # -- sweeps ---------------------------------------------------------------
    def sweep_samples(self, ceff: np.ndarray) -> int:
        """The blocked sample sweep (module docstring); returns the samples moved (all processes)."""
        n = self.num_workers
        cpad = np.zeros((n, self.width), dtype=np.float64)
        cpad[:, :n] = ceff
        gain = np.zeros(self.width, dtype=np.float64)
        size = self.effective_block() if self.mesh.size > 1 else (self.shard.chunk_samples or self.shard.num_samples)
        num_blocks = self._num_blocks(size)
        moves = np.zeros((size if self.mesh.size > 1 else 0, 3), dtype=np.int64)
        moved = 0
        blocks = self.shard.sweep_blocks(size)
        empty = (0, np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32))
        for k in range(num_blocks):
            block = next(blocks, empty)
            everyone = np.arange(block[1].size - 1, dtype=np.int64)
            moved += self._sweep_rows(block, everyone, cpad, gain, moves, 2 * k)
            if self.mesh.size > 1 and RECHECK:  # the block's moves against the fresh counts
                recheck = np.unique(moves[:min(self._last_moves, moves.shape[0]), 0])
                moved += self._sweep_rows(block, recheck, cpad, gain, moves, 2 * k + 1)
        self._traffic = None
        return moved

    def _sweep_rows(self, block, rows, cpad, gain, moves, turn) -> int:
        """Sweep ``rows`` of a block (:meth:`.shard.Shard.sweep_blocks`) within this process's quotas of
        samples and primaries, exchange the deltas, sum the loads; returns the samples moved by all
        processes."""
        n = self.num_workers
        first, indptr, indices, num_private = block
        quota = self.mesh.split_room(self.w.sample_cap - self.sample_load, turn)
        pquota = self.mesh.split_room(self.w.primary_cap - self.primary_load, turn)
        net = np.zeros(n, dtype=np.int64)
        pnet = np.zeros(n, dtype=np.int64)
        # (ghost row, primary) of the private rows carried, for their owners (one process: none to send)
        carried = np.empty((indices.size if self.mesh.size > 1 else 0, 2), dtype=np.int64)
        m, c = DK.sweep_block(indptr, indices, num_private, rows, self.sw[first:first + indptr.size - 1], self.gprim,
                              self.gcount, self.gdrow, self.df, cpad, self.sample_load, net, quota, self.w.alpha,
                              self.primary_load, pnet, pquota, self.w.beta, float(BALANCE_SPREAD or self.mesh.size),
                              gain, self._tally, moves, carried)
        self._last_moves = m
        if self.mesh.size == 1:
            self.sample_load += net
            self.primary_load += pnet
            return m
        tot = self._exchange_deltas(indptr, indices, moves, m, net, carried[:c], pnet)
        self.sample_load += tot[:n]
        self.primary_load += tot[n + 1:]
        return int(tot[n])

    def effective_block(self) -> int:
        """``block_samples``, or fewer so that a round has at least :data:`MIN_BLOCKS_PER_ROUND` blocks."""
        longest = -(-self.w.num_samples // self.mesh.size)
        return max(1, min(self.block_samples, -(-longest // MIN_BLOCKS_PER_ROUND)))

    def _num_blocks(self, size: int) -> int:
        longest = -(-self.w.num_samples // self.mesh.size)  # the longest shard (exchange.shard_range)
        return -(-longest // max(size, 1))

    def _exchange_deltas(self, indptr, indices, moves, m, net, carried, pnet) -> np.ndarray:
        """The block's count deltas, summed per (row, worker), in one all-to-all straight to the row's
        owner and to every other process holding a ghost of it (``ghost_subs``): the owners add them
        to the authoritative counts, the ghost holders to their ghosts (their own moves are in their
        ghosts already), so every ghost equals its owner's row after the pass without a second
        exchange. The carried private rows' new primaries go to their owners in the same message, as
        rows (id, -1 - primary, 0) (a private row has no other ghost). The net arrivals of samples per
        worker, the number of moves and the net arrivals of primaries ride along to every process
        (rows with id -1): returns their sums over the processes (int64 [2 N + 1])."""
        n, size, rank = self.num_workers, self.mesh.size, self.mesh.rank
        raw = np.empty((2 * int(indptr[-1]), 3), dtype=np.int64)
        raw = raw[:DK.ghost_deltas(indptr, indices, moves, m, raw)]
        key, inv = np.unique(raw[:, 0] * n + raw[:, 1], return_inverse=True)
        value = np.bincount(inv.reshape(-1), weights=raw[:, 2], minlength=key.size).astype(np.int64)
        keep = value != 0
        ghost, worker, value = key[keep] // n, key[keep] % n, value[keep]
        gid = self.ghosts.gids[ghost]
        deltas = np.stack([gid, worker, value], axis=1)
        owner, subs = gid % size, self.ghost_subs[ghost]
        cid = self.ghosts.gids[carried[:, 0]]
        prims = np.stack([cid, -1 - carried[:, 1], np.zeros_like(cid)], axis=1)
        tally = np.stack([np.full(2 * n + 1, -1, dtype=np.int64), np.arange(2 * n + 1),
                          np.concatenate([net, [m], pnet])], axis=1)
        parts = []
        for d in range(size):
            to_d = owner == d
            if d != rank:
                to_d |= ((subs >> np.uint64(d)) & np.uint64(1)).astype(bool)
            parts.append(np.concatenate([tally, deltas[to_d], prims[cid % size == d]]))
        tot = np.zeros(2 * n + 1, dtype=np.int64)
        for src, recv in enumerate(self.mesh.alltoall(parts)):
            ours = recv[:, 0] < 0
            tot += np.bincount(recv[ours, 1], weights=recv[ours, 2], minlength=2 * n + 1).astype(np.int64)
            recv = recv[~ours]
            carry = recv[:, 1] < 0  # carried private rows: owned here, held by no other process
            self.prim[np.searchsorted(self.owned.used, recv[carry, 0])] = -1 - recv[carry, 1]
            recv = recv[~carry]
            owned = recv[recv[:, 0] % size == rank]
            DK.apply_deltas(np.searchsorted(self.owned.used, owned[:, 0]), owned, self.count)
            if src != rank:
                pos = np.searchsorted(self.ghosts.gids, recv[:, 0])
                held = pos < self.ghosts.gids.size
                held[held] = self.ghosts.gids[pos[held]] == recv[held, 0]
                DK.add_ghost_deltas(pos[held], np.ascontiguousarray(recv[held]), self.gcount, self.gdrow, self.df)
        return tot

    def sweep_embeddings(self, ceff: np.ndarray) -> int:
        """The owners' embedding sweep in :data:`EMBEDDING_BLOCKS` blocks (the primary quotas are
        re-split from the summed loads after each, so room freed on one owner serves the others);
        refreshes the ghosts' primaries."""
        n = self.num_workers
        ceff_t = np.zeros((n, self.width), dtype=np.float64)
        ceff_t[:, :n] = ceff.T
        served, received = np.zeros(n), np.zeros(n)
        sums, counts = np.zeros(2), np.zeros(2, dtype=np.int64)
        fw, total = np.zeros(n), np.zeros(self.width)
        num_blocks = 1 if self.mesh.size == 1 else EMBEDDING_BLOCKS
        bounds = np.linspace(0, self.prim.size, num_blocks + 1).astype(np.int64)
        moved = 0
        for k in range(num_blocks):
            quota = self.mesh.split_room(self.w.primary_cap - self.primary_load, k)
            net = np.zeros(n, dtype=np.int64)
            m = DK.sweep_owned(bounds[k], bounds[k + 1], self.prim, self.count, self.f, ceff_t, self.primary_load,
                               net, quota, self.w.beta, float(BALANCE_SPREAD or self.mesh.size), fw, total,
                               self.cost, served, received, sums, counts)
            tot = self.mesh.isum(np.concatenate([net, [m]]))
            self.primary_load += tot[:n]
            moved += int(tot[n])
        self._set_traffic(served, received, sums, counts)
        self.refresh_ghosts(counts=False)
        return moved

    def round_bytes(self) -> int:
        """Bytes this process has sent so far (the engine's count)."""
        return int(self.mesh.engine.bytes.sum())


class _View:
    """What :func:`gmp.partition._objective.summarize` reads, from a :class:`DistState`."""

    def __init__(self, s: DistState):
        self.served = s.served
        self.sample_load = s.sample_load
        self.primary_load = s.primary_load
        self.alpha, self.beta, self.gamma = s.w.alpha, s.w.beta, s.w.gamma
        self.num_workers = s.num_workers
