"""Herald's on-demand scheme at s = 0 (``--schedule herald``): the step protocol whose every
transfer is one the :class:`~gmp.train.herald.RuntimeScheduler` lists (the single source of truth).

Per step: ``push_plan`` (pending copies -> primaries, before anything is read),
the pulls (primary rows -> the worker's secondary or cache slot, with Adagrad
together with the primary's sum of squares), forward/backward on the worker's
own rows and copies, ``push_sync`` gradients (summed at the primary, one
optimizer step), the worker's own optimizer step on each copy it used (kept
*pending* when the scheduler pushes nothing: on-demand synchronisation),
``push_evict`` (pending copies of evicted rows), then the cache forgets what
the scheduler's cache evicted. Pending pushes send the copy's value and
optimizer state, which overwrite the primary: the scheduler guarantees that
nobody read or wrote the row since the copy was pulled, so this is the
single-worker sequence of updates. At the epoch end every pending copy is
pushed (``push_flush``). The protocol refuses transfers the scheduler's state
does not justify (a pull over pending updates, a push of a clean row, a row
read but not held) instead of training on wrong values.

The batch is prepared ahead of the step in the input pipeline (:meth:`HeraldOnDemand.prepare`,
:mod:`gmp.train.prepare`): ids, unique, the model's batch and the slots the placement fixes; the
slots of the copies the step's pulls place are looked up after them (a one-worker step reads none
and makes no tensor of host data).

Counts: ``remote_rows_read`` = ``pull_miss``, ``staleness_refreshes`` =
``pull_stale``, ``remote_rows_pushed`` = all pushes; per kind in the record's
``herald`` object. With ``lookahead K`` the primaries send the next step's
provably final pulls unasked during this step (``CommEngine.start_alltoallv``:
asynchronous under torchrun; :mod:`gmp.train.herald.prefetch`; the record's
``prefetch`` object).
"""

from __future__ import annotations

import contextlib

import time
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..errors import TrainingError
from .herald.events import PULL_KINDS, PULL_MISS, PULL_STALE, PUSH_EVICT, PUSH_PLAN, PUSH_SYNC
from .protocol import StepProtocol
from .records import HERALD_COUNTERS
from .schedule import Step
from .steps import (PreparedStep, apply_at_primaries, forward_backward, group_by_owner, id_tensor, int_tensor,
                    prepare, prepare_step, read_held, received_ids, settle_copies)


class HeraldOnDemand(StepProtocol):
    """Herald at s = 0: pulls, plan/sync/evict/flush pushes exactly as the runtime scheduler lists them."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.options = ctx.herald
        # copies are updated and read again only with on-demand sync or writable replicas; otherwise
        # every copy a worker updates is invalid afterwards and Adagrad's sums need not travel
        self.copies_stay_valid = self.options.on_demand or not self.options.read_only_replicas
        for store in ctx.stores:
            store.enable_cache(ship_state=self.copies_stay_valid)
        self._early = None  # (pending exchange, rows per local worker, step) of the early exchange in flight
        self._replay_early = None  # the step (of a resumed epoch) whose early fetch is redone uncounted
        self.reset_epoch()

    #: the scheduler and the batch preparation run ahead in the input pipeline (gmp.train.prepare): the
    #: preparation settles what the placement and the tier fix; the copies' slots are the step's
    prepares_ahead = True

    def prepare(self, step: Step, *, timed: bool = True, resident: list | None = None) -> PreparedStep:
        """Every local worker's batch ahead of the step (:func:`~gmp.train.steps.prepare_step`), its
        cached copies of remote rows left to the step (they are placed by the earlier steps' pulls)."""
        return prepare_step(self.ctx, step, timed=timed, resident=resident, ahead=True)

    def reset_epoch(self) -> None:
        self.stats = {"produce_s": 0.0, "stall_s": 0.0, "items": 0, "fetch_wait_s": 0.0}
        self._running = None  # the running prefetcher's stats() (watch_lookahead)

    def watch_lookahead(self, stats: Callable[[], dict[str, float]] | None) -> None:
        self._running = stats

    def steps(self, epoch: int, start: int) -> Iterator[Step]:
        """The scheduler's steps, each with the next step's schedule (or None) and the scheduler's
        cache after it. With ``lookahead > 0`` the trainer's one look-ahead prefetcher
        (:func:`gmp.train.prepare.pipeline_steps`) advances this generator ``lookahead`` steps ahead in its
        thread, so the scheduler runs ahead of training there."""
        if self._early is not None and self._early[2] != start:  # left over, for another step: drop the rows
            self._take_early()
        # a run resumed mid-epoch: step start - 1 fetched this step's final rows early before the
        # interrupt (and counted them in the checkpoint); the first step fetches them again, uncounted
        self._replay_early = start if start > 0 and self.options.lookahead > 0 and self._early is None else None
        return self._steps(epoch, start)

    def _steps(self, epoch: int, start: int) -> Iterator[Step]:
        ctx = self.ctx
        hs = ctx.schedule
        n = ctx.num_workers
        items = hs.batches(epoch, start, cache_of=ctx.engine.local_workers)
        completed = False
        try:
            cur = next(items, None)
            while cur is not None:
                nxt = next(items, None)
                sched, snap = cur
                step = Step(sched.index_in_epoch, [sched.worker_samples(w) for w in range(n)],
                            info={"herald": sched, "cache_after": snap,
                                  "next": nxt[0] if nxt is not None else None})
                yield step
                cur = nxt
            completed = True
        finally:
            if not completed:  # the scheduler may have run ahead of training: replay it on the next call
                hs.discard_engine()

    def add_lookahead_stats(self, stats: dict[str, float]) -> None:
        """The look-ahead prefetcher's ``stats()`` (it ran the scheduler ahead) for the record."""
        for key in ("items", "produce_s", "stall_s"):
            self.stats[key] += stats[key]
        self.ctx.schedule.add_prefetch_stats(stats)

    def _owned_by(self, rows_of: list[np.ndarray], me: int) -> list[np.ndarray]:
        """Of each worker's rows (``rows_of[src]``, in the order it sends them), those whose primary is
        ``me``: what ``me`` receives from each worker, in arrival order (:func:`group_by_owner` keeps
        each owner's rows in their order). The schedule is global, so a primary knows the ids it is
        sent before they arrive and never reads them back from the device (issue 33)."""
        primary = self.ctx.primary
        return [rows[primary[rows] == me] for rows in rows_of]

    def _push_pending(self, rows_per_worker: list[np.ndarray], kind: str,
                      rows_of: list[np.ndarray] | None = None) -> None:
        """Push the copies of ``rows_per_worker[li]`` (pending updates applied) to their primaries.
        ``rows_of[w]``: the rows every worker ``w`` pushes, when the schedule says so (then no id is
        read back from the wire); None: the primaries read the ids they receive (the epoch-end flush,
        whose rows only their holders know)."""
        ctx = self.ctx
        n = ctx.num_workers
        id_sends, pay_sends = [], []
        for li, rows in enumerate(rows_per_worker):
            store = ctx.stores[li]
            rows = np.asarray(rows, dtype=np.int64)
            slots = store.lookup(rows)
            if np.any(slots < store.num_primary) or not store.all_pending(slots):
                raise TrainingError(f"worker {store.worker}: the runtime scheduler asks for a {kind} of rows "
                                    f"without pending updates here. This is a bug in gmp.")
            order, bounds = group_by_owner(np.arange(rows.size), ctx.primary[rows], n)
            pay = store.read_payload(slots[order])
            id_sends.append([id_tensor(ctx, rows[order[bounds[d]:bounds[d + 1]]]) for d in range(n)])
            pay_sends.append([pay[bounds[d]:bounds[d + 1]] for d in range(n)])
            store.mark_pending(slots, False)
            ctx.count(li, kind, rows.size)
            ctx.count(li, "remote_rows_pushed", rows.size)
        rid = ctx.engine.alltoallv(id_sends, "ids_clocks")
        rpay = ctx.engine.alltoallv(pay_sends, "gradients",
                                     recv_counts=[[int(t.shape[0]) for t in r] for r in rid])
        for li, store in enumerate(ctx.stores):
            known = self._owned_by(rows_of, ctx.engine.local_workers[li]) if rows_of is not None else None
            for src in range(n):
                ids = known[src] if known is not None else received_ids(rid[li][src])
                if ids.size:
                    store.overwrite_primary(store.lookup(ids), rpay[li][src])

    def _pull(self, sched, nxt) -> None:
        """Pull this step's rows: those fetched one step early come from the early exchange, the
        rest on demand; then, with a look-ahead, start the early fetch of the next step's final rows."""
        ctx = self.ctx
        n = ctx.num_workers
        if self._replay_early is not None and self._replay_early == sched.index_in_epoch:
            self._replay_early = None
            with contextlib.ExitStack() as quiet:  # counted by the interrupted run, before its checkpoint
                quiet.enter_context(ctx.engine.not_counted())
                for store in ctx.stores:
                    if store.tier is not None:
                        quiet.enter_context(store.tier.cache.victims_not_counted())
                self._issue_early(sched)
        early_of = self._early[3] if self._early is not None else None  # every worker's early rows
        staged = self._take_early()
        req_sends, wants = [], []
        for li, w in enumerate(ctx.engine.local_workers):
            ctx.count(li, "pull_miss", sched.rows(PULL_MISS, w).size)
            ctx.count(li, "pull_stale", sched.rows(PULL_STALE, w).size)
            ctx.count(li, "remote_rows_read", sched.rows(PULL_MISS, w).size)
            ctx.count(li, "staleness_refreshes", sched.rows(PULL_STALE, w).size)
            rows = np.unique(sched.pulls(w))
            pre = None
            if staged is not None and staged[li][0].size:  # fetched one step early (provably final values)
                st_rows, st_pay = staged[li]
                have = np.isin(rows, st_rows)
                pos = np.searchsorted(st_rows, rows[have])
                pre = (rows[have], st_pay[torch.as_tensor(pos, dtype=torch.int64, device=st_pay.device)])
                ctx.count(li, "prefetched_rows", int(have.sum()))
                rows = rows[~have]
            order, bounds = group_by_owner(np.arange(rows.size), ctx.primary[rows], n)
            wants.append((rows, order, bounds, pre))
            req_sends.append([id_tensor(ctx, rows[order[bounds[d]:bounds[d + 1]]]) for d in range(n)])
        ctx.engine.alltoallv(req_sends, "ids_clocks")  # the requests travel; their ids follow from the schedule
        asked = self._requests(sched, early_of)
        replies = []
        for li, store in enumerate(ctx.stores):
            rep = []
            for src, ids in enumerate(self._owned_by(asked, ctx.engine.local_workers[li])):
                slots = store.lookup(ids)
                if np.any((slots < 0) | (slots >= store.num_primary)):
                    raise TrainingError(f"worker {store.worker} was asked for rows it is not primary of.")
                rep.append(store.read_payload(slots) if ids.size else
                           torch.zeros(0, store.payload_dim, dtype=ctx.dtype, device=store.device))
            replies.append(rep)
        got = ctx.engine.alltoallv(replies, "embedding_rows",
                                    recv_counts=[[int(w[2][d + 1] - w[2][d]) for d in range(n)] for w in wants])
        for li, (rows, order, bounds, pre) in enumerate(wants):
            store = ctx.stores[li]
            pay = torch.cat([g.to(store.device, ctx.dtype) for g in got[li]]) if rows.size else \
                torch.zeros(0, store.payload_dim, dtype=ctx.dtype, device=store.device)
            inv = np.empty(rows.size, dtype=np.int64)
            inv[order] = np.arange(rows.size)
            pay = pay[int_tensor(inv, pay.device)]  # back to rows order
            if pre is not None:  # one install in id order, early or not: the cache layout is the same
                rows = np.concatenate([rows, pre[0]])
                pay = torch.cat([pay, pre[1].to(pay.device)])
                srt = np.argsort(rows, kind="stable")
                rows, pay = rows[srt], pay[torch.as_tensor(srt, dtype=torch.int64, device=pay.device)]
            self._install(li, rows, pay)
        if self.options.lookahead > 0 and nxt is not None:
            self._issue_early(nxt)

    def _requests(self, sched, early_of: list[np.ndarray] | None) -> list[np.ndarray]:
        """The rows each worker requests in :meth:`_pull` (sorted): its pulls, less those fetched early."""
        pulls = _rows_by_worker(sched, PULL_KINDS, self.ctx.num_workers)
        out = []
        for w, rows in enumerate(pulls):
            rows = np.unique(rows)
            if early_of is not None and early_of[w].size:
                rows = rows[~np.isin(rows, early_of[w])]
            out.append(rows)
        return out

    def _issue_early(self, nxt) -> None:
        """Start sending the next step's pulls whose row is final now (cDLRM prefetch, s = 0 safe).

        A pull of batch t+1 with ``ready < t`` reads a value the primary already
        holds before step t updates anything, and nobody changes it during step
        t. The schedule is global, so each primary knows which of its rows every
        worker will need and sends them unasked (no id exchange): an
        asynchronous all-to-all under torchrun (overlapping step t's compute),
        an in-memory hand-off in the local engine. Taken at step t+1.
        """
        ctx = self.ctx
        n = ctx.num_workers
        sel = nxt.early_pulls()
        ew = nxt.event_worker[sel].astype(np.int64)
        er = nxt.event_row[sel].astype(np.int64)
        prim = ctx.primary[er].astype(np.int64)
        order = np.lexsort((er, prim, ew))  # by destination, then source (primary), then row
        ew, er, prim = ew[order], er[order], prim[order]
        sends, recv_rows, recv_counts = [], [], []
        for li, me in enumerate(ctx.engine.local_workers):
            store = ctx.stores[li]
            mine = prim == me
            parts = []
            for d in range(n):
                r = er[mine & (ew == d)]
                parts.append(store.read_payload(store.lookup(r)) if r.size else
                             torch.zeros(0, store.payload_dim, dtype=ctx.dtype, device=store.device))
            sends.append(parts)
            to_me = ew == me
            recv_rows.append(er[to_me])  # ordered by (primary, row): the order the parts arrive in
            recv_counts.append([int(np.count_nonzero(to_me & (prim == src))) for src in range(n)])
        self._early = (ctx.engine.start_alltoallv(sends, "embedding_rows", recv_counts=recv_counts), recv_rows,
                       nxt.index_in_epoch, [er[ew == w] for w in range(n)])

    def _take_early(self) -> list[tuple[np.ndarray, torch.Tensor]] | None:
        """Wait for the early exchange started in the previous step; per local worker (rows sorted, payload)."""
        ctx = self.ctx
        if self._early is None:
            return None
        handle, recv_rows, _, _ = self._early
        self._early = None
        t0 = time.perf_counter()
        got = handle.wait()
        self.stats["fetch_wait_s"] += time.perf_counter() - t0
        out = []
        for li, store in enumerate(ctx.stores):
            rows = recv_rows[li]
            pay = torch.cat([g.to(store.device, ctx.dtype) for g in got[li]]) if rows.size else \
                torch.zeros(0, store.payload_dim, dtype=ctx.dtype, device=store.device)
            srt = np.argsort(rows, kind="stable")
            out.append((rows[srt], pay[torch.as_tensor(srt, dtype=torch.int64, device=pay.device)]))
        return out

    def _install(self, li: int, rows: np.ndarray, payload: torch.Tensor) -> None:
        """Put pulled rows (and their optimizer state) into worker ``li``'s copies, cache slots first."""
        store = self.ctx.stores[li]
        slots = store.lookup(rows)
        if np.any((slots >= 0) & (slots < store.num_primary)):
            raise TrainingError(f"worker {store.worker}: the runtime scheduler pulls a row it is primary of. "
                                f"This is a bug in gmp.")
        new = slots < 0
        if new.any():
            slots[new] = store.cache_insert(rows[new])
        if store.any_pending(slots):
            raise TrainingError(f"worker {store.worker}: a pull would overwrite pending updates. This is a bug in gmp.")
        store.install_copies(slots, payload)

    def train_step(self, step: Step | PreparedStep) -> list[torch.Tensor]:
        """One s = 0 step whose every transfer is the runtime scheduler's (``step``: prepared by
        :meth:`prepare`, or not)."""
        ctx = self.ctx
        prepared = step if isinstance(step, PreparedStep) else self.prepare(step)
        step = prepared.step
        sched = step.info["herald"]
        n = ctx.num_workers
        local = ctx.engine.local_workers
        # end of the previous iteration: the communication plan (Algorithm 1 line 15)
        plans = _rows_by_worker(sched, (PUSH_PLAN,), n)
        self._push_pending([plans[w] for w in local], "push_plan", plans)
        self._pull(sched, step.info.get("next"))
        ws = prepared.workers or [prepare(ctx, li, step.samples[w]) for li, w in enumerate(local)]
        for li, s in enumerate(ws):
            covered = settle_copies(ctx, li, s)  # the copies this step's pulls placed
            if np.any(s.slots < 0):
                raise TrainingError(f"worker {local[li]} lacks rows the runtime scheduler holds valid there. "
                                    f"This is a bug in gmp.")
            s.rows = read_held(ctx, li, s) if covered else ctx.stores[li].read(s.slots)
        losses = forward_backward(ctx, ws, step) if step.global_batch_size else []
        # synchronous pushes (naive sync, or several writers): gradients to the primaries
        id_sends, grad_sends = [], []
        for li, s in enumerate(ws):
            store = ctx.stores[li]
            sync = np.unique(sched.rows(PUSH_SYNC, local[li]))
            pos = np.searchsorted(s.uniq, sync)
            if sync.size and (np.any(pos >= s.uniq.size) or np.any(s.uniq[np.minimum(pos, s.uniq.size - 1)] != sync)
                              or np.any(s.is_primary[pos])):
                raise TrainingError(f"worker {store.worker}: the runtime scheduler pushes rows it did not use. "
                                    f"This is a bug in gmp.")
            copies = np.flatnonzero(~s.is_primary)
            pending = np.setdiff1d(copies, pos, assume_unique=True)
            if pending.size and not self.options.on_demand:
                raise TrainingError(f"worker {store.worker}: an update left unpushed without on-demand "
                                    f"synchronisation. This is a bug in gmp.")
            order, bounds = group_by_owner(pos, ctx.primary[s.uniq], n)
            g = s.grad[int_tensor(order, s.grad.device)]
            id_sends.append([id_tensor(ctx, s.uniq[order[bounds[d]:bounds[d + 1]]]) for d in range(n)])
            grad_sends.append([g[bounds[d]:bounds[d + 1]] for d in range(n)])
            ctx.count(li, "push_sync", sync.size)
            ctx.count(li, "remote_rows_pushed", sync.size)
            if store.any_pending(s.slots[pos]):
                raise TrainingError(f"worker {store.worker}: a synchronous push of a row with pending updates. "
                                    f"This is a bug in gmp.")
            # the worker's own step on its copies (exactly the primary's formula and state)
            if self.copies_stay_valid:
                store.apply_copy(s.slots[copies], s.grad[int_tensor(copies, s.grad.device)])
            store.mark_pending(s.slots[pending])  # on-demand: kept until a plan/eviction/epoch end
        rid = ctx.engine.alltoallv(id_sends, "ids_clocks")
        rgrad = ctx.engine.alltoallv(grad_sends, "gradients",
                                      recv_counts=[[int(t.shape[0]) for t in r] for r in rid])
        syncs = [np.unique(rows) for rows in _rows_by_worker(sched, (PUSH_SYNC,), n)]  # the ids rid carries
        apply_at_primaries(ctx, ws, [self._owned_by(syncs, w) for w in local], rgrad)
        # evictions: pending updates of victims go to their primaries, then the cache forgets them
        evicts = _rows_by_worker(sched, (PUSH_EVICT,), n)
        self._push_pending([evicts[w] for w in local], "push_evict", evicts)
        snap = step.info.get("cache_after")
        if snap is not None:
            for li, store in enumerate(ctx.stores):
                store.cache_drop(np.setdiff1d(store.cached_ids(), snap[li], assume_unique=True))
        ctx.dense.step(losses)
        return losses

    def end_epoch(self) -> None:
        """Epoch end: every pending update goes to its primary (the scheduler's ``push_flush``)."""
        self._push_pending([store.pending_ids() for store in self.ctx.stores], "push_flush")

    def add_to_record(self, rec: dict[str, Any], counters: dict[str, int]) -> None:
        """The record's ``herald`` object (transfers per kind) and, with a look-ahead, ``prefetch``."""
        h = {name: counters[name] for name in HERALD_COUNTERS}
        h["pulls"] = h["pull_miss"] + h["pull_stale"]
        h["pushes"] = sum(h[k] for k in ("push_sync", "push_plan", "push_evict", "push_flush"))
        opts = self.options.to_json()
        h.update({k: opts[k] for k in ("on_demand", "cache_rows", "cache_policy", "read_only_replicas")})
        rec["herald"] = h
        if self.options.lookahead > 0:
            st = dict(self.stats)
            if self._running is not None:  # a step record: the prefetcher is still running
                running = self._running()
                for key in ("items", "produce_s", "stall_s"):
                    st[key] += running[key]
            rec["prefetch"] = {
                "lookahead": self.options.lookahead,
                "early_rows": h["prefetched_rows"], "late_rows": h["pulls"] - h["prefetched_rows"],
                "early_share": h["prefetched_rows"] / h["pulls"] if h["pulls"] else 1.0,
                "early_fetch_wait_s": self.ctx.max_across(st["fetch_wait_s"]),
                "scheduler_produce_s": st["produce_s"], "scheduler_stall_s": st["stall_s"],
                "scheduler_overlap": (max(0.0, 1.0 - st["stall_s"] / st["produce_s"])
                                      if st["produce_s"] > 0 else 1.0)}


def _rows_by_worker(sched, kinds: tuple[int, ...], num_workers: int) -> list[np.ndarray]:
    """``sched.rows(kinds, w)`` (int64) of every worker ``w``, from one pass over the events."""
    sel = np.isin(sched.event_kind, kinds)
    rows, worker = sched.event_row[sel].astype(np.int64), sched.event_worker[sel]
    return [rows[worker == w] for w in range(num_workers)]
