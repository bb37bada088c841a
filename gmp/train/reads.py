"""HET-GMP phases 1-3 (section 5.3 of HET-GMP): a worker's read of the rows of its step.

* :func:`settle_reads` -- the exchange of ids and clocks: each worker's requests (``(id, clock)``
  to the rows' primaries, :func:`request_sends`), the primaries' clocks in reply, which requests get
  a row (intra-embedding bound), which secondaries the reader refreshes, the rows failing the
  inter-embedding bound and phase 3's requests (:func:`plan_install`): a :class:`ReadPlan` with
  every size and index tensor of the row exchanges. It reads the stores' clocks (host arrays) as
  the previous step left them, so it runs right before the step (``StepProtocol.settle``), or at
  the start of :func:`read_rows` when nothing settled it (the evaluation, the epoch-end refresh);
* :func:`read_rows` -- the rows moved as planned: gather at the primaries, one all-to-all with
  known sizes, :func:`install_rows` (phase 2 on the reader: place, refresh the secondaries) and
  :func:`inter_round` (phase 3): torch operations on tensors the plan holds, no read on the host.

Byte counts and values are those of the protocol as HET-GMP states it: only the rows a request
needs travel (fixed-size buffers would carry fresh secondaries too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import TrainingError
from .consistency import inter_stale, intra_stale
from .steps import WorkerStep, group_by_owner, id_tensor, int_tensor, read_held, received_ids


@dataclass
class ReadPlan:
    """HET-GMP phases 1-3 of one step with every id, clock and size settled (:func:`settle_reads`):
    what is left is moving rows (:func:`read_rows`), torch operations on tensors made here.

    Lists are ``[local worker][peer]``; an index tensor is None where the store's slots may move
    (:attr:`EmbeddingStore.fixed_layout` false): the step then translates them itself."""

    send_slots: list  # [owner][reader]: the primary slots each owner sends (phase 2) ...
    send_idx: list  # ... and their rows in its table (tensors)
    counts: list  # [reader][owner]: rows received (phase 2)
    got: list  # [reader][owner]: positions in uniq of the rows received ...
    got_t: list  # ... as tensors
    sec: list  # [reader][owner]: positions in uniq of the secondaries they refresh ...
    sec_in: list  # ... their positions among the received rows (tensors) ...
    sec_idx: list  # ... and the secondaries' rows in the table (tensors)
    #: [reader]: its rows not held (every one is requested and gets a row: a -1 clock is always
    #: stale), counted from the sizes above instead of a pass over the batch's rows in the step
    remote: list
    refresh: bool
    #: phase 3 (None: not run): [owner][reader] slots sent, their table rows; [reader] (order, bounds)
    #: of the flagged rows, their positions in uniq as tensors per owner, and the secondaries' table rows
    second: tuple | None = None


def _index(store, slots: np.ndarray) -> torch.Tensor | None:
    """Table rows of ``slots`` as a tensor made now (ahead of the step), or None when slots may move."""
    return int_tensor(slots, store.device) if store.fixed_layout else None


def _read(store, slots: np.ndarray, idx: torch.Tensor | None) -> torch.Tensor:
    return store.read(slots) if idx is None else store.table.index_select(0, idx)


def settle_reads(ctx, ws: list[WorkerStep], *, check_secondaries: bool, staleness: float,
                 refresh: bool = True) -> ReadPlan:
    """Phases 1-3's exchange of ids and clocks (HET-GMP section 5.3), before the rows move: which
    rows each worker requests (with its clocks), the primaries' clocks in reply, which requests get
    a row, which secondaries the reader refreshes, the rows failing the inter-embedding bound (phase
    3) and the primaries that send them; every size of :func:`read_rows`'s exchanges and its index
    tensors. Reads the store's clocks as they are now: run it after the previous step's update.
    Sets ``ws[i].served`` and ``ws[i].true_clock``."""
    n = ctx.num_workers
    recv = ctx.engine.alltoallv(request_sends(ctx, ws, check_secondaries), "ids_clocks")
    reply_clock, send_slots = [], []
    for li, s in enumerate(ws):
        store = ctx.stores[li]
        rc, ss = [], []
        s.served = []
        for src in range(n):
            msg = received_ids(recv[li][src]).reshape(-1, 2)
            oslots = primary_slots(store, msg[:, 0])
            s.served.append(msg[:, 0])
            oc = store.clock[oslots]
            rc.append(id_tensor(ctx, oc))
            ss.append(oslots[intra_stale(oc, msg[:, 1], staleness)])
        reply_clock.append(rc)
        send_slots.append(ss)
    # reply sizes follow from the requests (clocks) and from the clocks (rows): no size exchange
    got = ctx.engine.alltoallv(reply_clock, "ids_clocks", recv_counts=[
        [int(s.req_bounds[src + 1] - s.req_bounds[src]) for src in range(n)] for s in ws])
    clocks = [[received_ids(c) for c in per] for per in got]
    need = [[intra_stale(clocks[li][src], s.req_clock[s.req_bounds[src]:s.req_bounds[src + 1]], staleness)
             for src in range(n)] for li, s in enumerate(ws)]
    plan = plan_install(ctx, ws, clocks, need, check_secondaries=check_secondaries, staleness=staleness,
                        refresh=refresh)
    plan.send_slots = send_slots
    plan.send_idx = [[_index(ctx.stores[li], x) for x in per] for li, per in enumerate(send_slots)]
    return plan


def plan_install(ctx, ws: list[WorkerStep], clocks, need, *, check_secondaries: bool, staleness: float,
                 refresh: bool) -> ReadPlan:
    """The reader's side of a :class:`ReadPlan` (its ``send_*`` left empty) from the primaries'
    clocks of its requests (``clocks[i][src]``) and which of them get a row (``need[i][src]``):
    where the received rows go, which secondaries they refresh, and phase 3's exchange of ids when
    the inter-embedding check runs. Sets ``ws[i].true_clock``: the primary clock of every requested
    row, and of the worker's own primaries only where the inter-embedding check reads them (else -1)."""
    n = ctx.num_workers
    plan = ReadPlan([], [], [], [], [], [], [], [], [], refresh)
    flagged_all = []
    for li, s in enumerate(ws):
        store = ctx.stores[li]
        dev = store.device
        inter = check_secondaries and ctx.has_secondaries and 0 < staleness and refresh
        true_clock = np.full(s.uniq.size, -1, dtype=np.int64)
        if inter:  # only the inter-embedding check reads the primaries' clocks (the rest: requested rows)
            true_clock[s.is_primary] = store.clock[s.slots[s.is_primary]]
        refreshed = np.zeros(s.uniq.size, dtype=bool)
        remote = 0
        counts, got_l, got_t, sec_l, sec_in, sec_idx = [], [], [], [], [], []
        for src in range(n):
            part = s.req[s.req_bounds[src]:s.req_bounds[src + 1]]
            true_clock[part] = clocks[li][src]
            got = part[need[li][src]]
            held = s.slots[got] >= 0
            sec = got[held]
            refreshed[sec] = refresh
            counts.append(int(got.size))
            remote += int(got.size - sec.size)
            got_l.append(got)
            got_t.append(int_tensor(got, dev) if got.size else None)
            sec_l.append(sec)
            sec_in.append(int_tensor(np.flatnonzero(held), dev) if sec.size else None)
            sec_idx.append(_index(store, s.slots[sec]) if sec.size else None)
        for name, value in (("counts", counts), ("got", got_l), ("got_t", got_t), ("sec", sec_l),
                            ("sec_in", sec_in), ("sec_idx", sec_idx), ("remote", remote)):
            getattr(plan, name).append(value)
        s.true_clock = true_clock
        if inter:
            # the clocks install leaves: a secondary refreshed by it reads at its primary's clock
            read_clock = true_clock.copy()
            read_clock[s.is_secondary] = store.clock[s.slots[s.is_secondary]]
            read_clock[refreshed] = true_clock[refreshed]
            refreshable = s.is_secondary & (read_clock < true_clock)
            flagged_all.append(np.flatnonzero(inter_stale(s.ptr, s.inv, read_clock, ctx.data.freq[s.uniq],
                                                          refreshable, staleness)))
    if flagged_all:  # every process takes this branch together (same config, same placement)
        plan.second = _settle_inter_round(ctx, ws, flagged_all)
    return plan


def _settle_inter_round(ctx, ws: list[WorkerStep], flagged: list[np.ndarray]) -> tuple:
    """Phase 3's ids (Sec. 5.3 (2)): the flagged rows' requests and the slots their primaries send."""
    n = ctx.num_workers
    orders, sends = [], []
    for li, s in enumerate(ws):
        order, bounds = group_by_owner(flagged[li], ctx.primary[s.uniq], n)
        orders.append((order, bounds))
        ids = s.uniq[order]
        sends.append([id_tensor(ctx, ids[bounds[d]:bounds[d + 1]]) for d in range(n)])
    recv = ctx.engine.alltoallv(sends, "ids_clocks")
    slots = [[ctx.stores[li].lookup(received_ids(recv[li][src])) for src in range(n)] for li in range(len(ws))]
    idx = [[_index(ctx.stores[li], x) for x in per] for li, per in enumerate(slots)]
    parts_t, sec_idx = [], []
    for li, (order, bounds) in enumerate(orders):
        store, s = ctx.stores[li], ws[li]
        parts = [order[bounds[src]:bounds[src + 1]] for src in range(n)]
        parts_t.append([int_tensor(p, store.device) if p.size else None for p in parts])
        sec_idx.append([_index(store, s.slots[p]) if p.size else None for p in parts])
    return slots, idx, orders, parts_t, sec_idx


def read_rows(ctx, ws: list[WorkerStep], *, check_secondaries: bool, staleness: float,
              refresh: bool = True, plan: ReadPlan | None = None) -> None:
    """Phases 1-3: fill ``ws[i].rows`` ([U, row_dim]) obeying the staleness bound.

    ``plan``: the step's ids and clocks exchanged before it (:func:`settle_reads`, made here when
    None); the rows then move with sizes and index tensors made ahead: no read on the host.
    ``staleness = -1`` pulls every non-primary row; ``refresh=False`` leaves
    the replicas untouched (evaluation reads the primaries' values only).
    """
    n = ctx.num_workers
    if plan is None:
        with ctx.phase("ids"):
            plan = settle_reads(ctx, ws, check_secondaries=check_secondaries, staleness=staleness, refresh=refresh)
    with ctx.phase("pulls"):
        sends = [[_read(ctx.stores[li], plan.send_slots[li][d], plan.send_idx[li][d]).to(ctx.comm_dtype)
                  for d in range(n)] for li in range(len(ws))]
        rows = ctx.engine.alltoallv(sends, "embedding_rows", recv_counts=plan.counts)
        install_rows(ctx, ws, rows, plan)
        if plan.second is not None:
            inter_round(ctx, ws, plan.second)


def request_sends(ctx, ws: list[WorkerStep], check_secondaries: bool) -> list[list[torch.Tensor]]:
    """Phase 1: set each worker's requests (``req``, ``req_bounds``, ``req_clock``) and return the
    ``(id, clock)`` messages to the rows' primaries."""
    n = ctx.num_workers
    sends = []
    for li, s in enumerate(ws):
        store = ctx.stores[li]
        need = ~s.is_primary if check_secondaries else (s.slots < 0)
        s.req, s.req_bounds = group_by_owner(np.flatnonzero(need), ctx.primary[s.uniq], n)
        sl = s.slots[s.req]
        s.req_clock = np.full(sl.size, -1, dtype=np.int64)  # -1: not held (a worker may hold no rows at all)
        s.req_clock[sl >= 0] = store.clock[sl[sl >= 0]]
        payload = np.stack([s.uniq[s.req], s.req_clock], axis=1)
        sends.append([id_tensor(ctx, payload[s.req_bounds[d]:s.req_bounds[d + 1]]) for d in range(n)])
    return sends


def primary_slots(store, ids: np.ndarray) -> np.ndarray:
    """Slots of rows ``ids`` that ``store``'s worker must be primary of (a request or a push)."""
    oslots = store.lookup(ids)
    if np.any((oslots < 0) | (oslots >= store.num_primary)):
        raise TrainingError(f"worker {store.worker} was asked for rows it is not primary of.")
    return oslots


def install_rows(ctx, ws: list[WorkerStep], rows, plan: ReadPlan) -> None:
    """Phase 2 on the reader: ``ws[i].rows`` from the rows it holds and those received
    (``rows[i][src]``, placed and refreshed as ``plan`` settled, :func:`settle_reads`)."""
    n = ctx.num_workers
    for li, s in enumerate(ws):
        store = ctx.stores[li]
        out = read_held(ctx, li, s, torch.empty(s.uniq.size, ctx.row_dim, dtype=ctx.dtype, device=store.device))
        for src in range(n):
            if plan.got_t[li][src] is not None:
                r = rows[li][src].to(store.device, ctx.dtype)
                out[plan.got_t[li][src]] = r
                sec = plan.sec[li][src]
                if sec.size and plan.refresh:  # intra-embedding refresh of secondaries (Sec. 5.3 (1))
                    store.refresh(s.slots[sec], r[plan.sec_in[li][src].to(r.device)], s.true_clock[sec],
                                  idx=plan.sec_idx[li][src])
                    ctx.count(li, "staleness_refreshes", sec.size)
        ctx.count(li, "remote_rows_read", plan.remote[li])
        s.rows = out


def inter_round(ctx, ws: list[WorkerStep], second: tuple) -> None:
    """Phase 3: refresh the secondaries that failed the inter-embedding bound (Sec. 5.3 (2)), with
    the requests :func:`settle_reads` exchanged."""
    n = ctx.num_workers
    slots, idx, orders, parts_t, sec_idx = second
    replies = [[_read(ctx.stores[li], slots[li][src], idx[li][src]).to(ctx.comm_dtype) for src in range(n)]
               for li in range(len(ws))]
    rows = ctx.engine.alltoallv(replies, "embedding_rows",
                                 recv_counts=[[int(b[src + 1] - b[src]) for src in range(n)] for _, b in orders])
    for li, s in enumerate(ws):
        store = ctx.stores[li]
        order, bounds = orders[li]
        for src in range(n):
            part = order[bounds[src]:bounds[src + 1]]
            if part.size:
                r = rows[li][src].to(store.device, ctx.dtype)
                s.rows[parts_t[li][src]] = r
                store.refresh(s.slots[part], r, s.true_clock[part], idx=sec_idx[li][src])
                ctx.count(li, "staleness_refreshes", part.size)
