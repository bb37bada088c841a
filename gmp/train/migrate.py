"""Resume on the next day's data and placement: the rows that moved travel with their optimizer state.

``gmp train NEW --manifest NEW_MANIFEST --checkpoint-dir C --resume`` where ``C``'s
checkpoint was made on an *ancestor* of ``NEW`` (``NEW``'s header names it as
``parent``, possibly through a chain of ``gmp data import --extend``; docs/incremental.md)
and on another placement. :func:`resume_training` tells the two cases apart: the
checkpoint's own dataset is the plain resume of :func:`gmp.train.checkpoint.load_checkpoint`
(same manifest required); an ancestor's is a migration; anything else is refused.

A migration starts the new data at epoch 1 step 0 (the checkpoint must be at the end of an
epoch) with the dense model, its optimizer and the RNG states of the checkpoint, and per row:

* **primaries** (row value, Adagrad sum of squares, clock): the old primary's worker sends
  the row to the new primary when they differ (one all-to-all); a row that stays is copied
  locally;
* **secondaries** of old ids: a worker that already held a copy of the row (as primary or
  secondary) keeps it with its clock (a stale one is refreshed by the protocol as usual);
  otherwise the new primary sends value and clock (a second all-to-all);
* **new ids** (at or above the ancestor's ``num_embeddings``): initialised exactly as a fresh
  run initialises them (:func:`gmp.train.slots.initial_rows`, a function of seed and id);
* **created rows** (the new manifest's ``history.created_rows``: old ids no earlier data read,
  which the partitioner placed like new ids): initialised the same way on every worker that
  holds them, nothing sent. They were never updated, so that is their value and optimizer state
  in the checkpoint too; the old primary checks that its clock is 0 (a checkpoint trained along
  another chain of manifests is refused, on every process);
* ``--schedule herald``: its runtime scheduler takes every copy as fresh at the start, so every
  secondary of an old id is refreshed from the new primary with its Adagrad state
  (``refreshed_secondaries`` counts those the worker held already); cached copies are dropped
  and the schedule's state starts afresh.

The moved rows are :func:`gmp.partition.incremental.moved_rows`' count (an old row whose
primary changed, a secondary on a worker that held no copy of it; created rows left out, as
``moved_rows(..., created=...)`` leaves them); the bytes sent are counted
per kind (``values``, ``optimizer_state``, ``clocks``) and returned (the JSON log's
``"kind": "migration"`` line). Every process reads only the old workers' files it hosts
(old worker ``w`` -> new worker ``w mod N``), so the same code runs under the local engine and
under ``torchrun``. Because a migration is a pure re-homing of state, a run resumed on the new
placement takes the same steps at s = 0 as one worker that trained the days in order
(``tests/test_migrate.py``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..datasets.extend import names_parent, parents
from ..errors import DatasetError, TrainingError
from .checkpoint import (check_position, check_settings, find_checkpoint, load_checkpoint, open_worker_rows,
                         read_trainer_file)

log = logging.getLogger("gmp.train")
_FIX = "start without --resume or point --checkpoint-dir elsewhere"
#: settings that define the state a migration carries over (the others, e.g. lr, batch size,
#: schedule, staleness, may change with the new data)
STATE_SETTINGS = ("model", "embedding_dim", "optimizer", "dtype", "hidden", "seed")


def resume_training(trainer, checkpoint_dir: str | os.PathLike, *, dataset, placement_sha: str,
                    created: np.ndarray | None = None) -> dict | None:
    """Restore ``trainer`` from ``checkpoint_dir``: a plain resume (returns None) when the checkpoint
    was made for ``dataset``, a migration (returns its summary) when for one of its ancestors.

    ``created``: the manifest's ``history.created_rows`` (old ids a migration creates, not moves).

    Raises
    ------
    TrainingError
        No checkpoint; a checkpoint of an unrelated dataset, or made inside an epoch of an
        ancestor, or with other settings.
    """
    found = find_checkpoint(checkpoint_dir)
    if found is None:
        raise TrainingError(f"`resume=True`: no checkpoint in {checkpoint_dir}; run without `resume=True` first.")
    ckpt, head = found
    if dataset.has_sha256(head["dataset_sha256"]):  # its hash, or the one schema 2 gave it
        load_checkpoint(trainer, checkpoint_dir, dataset_sha256=head["dataset_sha256"], placement_sha=placement_sha,
                        found=found)
        return None
    old_num_embeddings, depth = ancestor_size(dataset, head["dataset_sha256"], ckpt)
    check_migratable(trainer, ckpt, head)
    summary = migrate_rows(trainer, ckpt, head, old_num_embeddings, created)
    restore_dense(trainer, ckpt)
    summary.update({"checkpoint": str(ckpt), "from_dataset_sha256": head["dataset_sha256"],
                    "generations": depth, "from_placement_sha256": head["placement_sha256"],
                    "to_placement_sha256": placement_sha})
    log.info("migrated %s from %s: %s", dataset.path, ckpt, summary["moved_rows"])
    return summary


def ancestor_size(dataset, sha256: str, ckpt: Path) -> tuple[int, int]:
    """``(num_embeddings, generations)`` of the ancestor of ``dataset`` whose hash is ``sha256``.

    Follows the ``parent`` links (``gmp data import --extend``;
    :func:`gmp.datasets.extend.parent_dataset`). Refuses an unrelated dataset with the fix."""
    seen = []
    try:
        for depth, parent in parents(dataset):
            seen.append(str(parent.get("sha256", ""))[:12])
            if names_parent(parent, sha256):
                return int(parent["num_embeddings"]), depth
    except DatasetError as exc:
        raise TrainingError(f"`resume=True` {ckpt}: {exc}, so the checkpoint's dataset cannot be found among its "
                            f"ancestors; restore it or {_FIX}.") from None
    chain = " <- ".join(seen) if seen else "it has no parent"
    raise TrainingError(
        f"{ckpt} was made for dataset sha256 {sha256[:12]}…, which is neither {dataset.path} nor one of its "
        f"ancestors ({chain}); resume with that dataset and its manifest, import the new data with "
        f"'gmp data import ... --extend' from it, or {_FIX}.")


def check_migratable(trainer, ckpt: Path, head: dict[str, Any]) -> None:
    """A migration needs the checkpoint at an epoch boundary and the same :data:`STATE_SETTINGS`."""
    if head["step"] != 0:
        raise TrainingError(f"{ckpt} stopped inside epoch {head['epoch'] + 1} (step {head['step']}) of its dataset; "
                            f"finish that epoch by resuming with the checkpoint's own dataset and manifest first.")
    check_settings(ckpt, head, trainer.settings(), STATE_SETTINGS)
    check_position(ckpt, head, read_trainer_file(ckpt))  # a step edited to 0 does not make it an epoch's end


def restore_dense(trainer, ckpt: Path) -> None:
    """The dense model, its optimizer and the RNG states; the position starts at the new data's first step."""
    main = read_trainer_file(ckpt)
    try:
        # this run's learning rate, not the checkpoint's
        trainer.load_dense(main["model"], main["dense_opt"], lr=trainer.settings().lr)
        torch.random.set_rng_state(main["torch_rng"])
        np.random.set_state(main["numpy_rng"])
    except Exception as exc:  # noqa: BLE001 - a model of another shape: one line, not a traceback
        data = trainer.context().data
        lines = str(exc).splitlines() or [""]  # torch's first line only says that a list of errors follows
        detail = next((line.strip() for line in lines if "size mismatch" in line), lines[0])
        raise TrainingError(f"{ckpt / 'trainer.pt'} does not fit this run ({detail[:200]}); the "
                            f"model takes every categorical field and dense column ({data.dataset.path}: "
                            f"{data.num_fields} and {data.num_dense}), so it continues only with the checkpoint's "
                            f"fields (a day that adds one starts a new model) and model settings; {_FIX}.") from None
    trainer.seek(0, 0)


# --------------------------------------------------------------------------- the rows
class _Old:
    """One old worker's rows as its checkpoint holds them: the primaries (value and optimizer
    state, slots ``[0, num_primary)``) from its rows file, the other rows from its ``.pt`` file."""

    def __init__(self, ckpt: Path, head: dict[str, Any], worker: int):
        where = ckpt / f"worker-{worker:05d}.pt"
        try:
            state, rows = open_worker_rows(ckpt, head, worker)
        except TrainingError as exc:  # a schema-2 SGD file does not say which rows are primaries
            raise TrainingError(f"{where}: {exc} (a checkpoint of an older gmp with `optimizer` sgd cannot "
                                f"migrate); finish the old data with that gmp or {_FIX}.") from None
        store = state["store"]
        self.worker = worker
        self.ids = np.asarray(store["ids"], dtype=np.int64)
        try:
            self.num_primary = rows.num_rows
            self.primaries = rows(0, rows.num_rows)  # [value | state]
        finally:
            rows.close()
        self.table = store["table"]  # secondaries (then cached copies, not migrated)
        self.local_state = store.get("local_state")
        self.clock = np.asarray(store["clock"], dtype=np.int64)
        dirty = np.asarray(store.get("dirty", np.zeros(0, bool)))[:self.ids.size]
        if dirty.any():
            raise TrainingError(f"{where} holds updates not yet pushed to their primaries; resume with its own "
                                f"dataset to the end of the epoch first.")
        order = np.argsort(self.ids, kind="stable")
        self._sorted, self._order = self.ids[order], order

    def values(self, slots: np.ndarray, row_dim: int) -> torch.Tensor:
        """The values of ``slots`` (primaries from the rows file, the others from the table)."""
        out = torch.empty(slots.size, row_dim, dtype=self.table.dtype)
        prim = slots < self.num_primary
        out[torch.as_tensor(prim)] = torch.as_tensor(self.primaries[slots[prim], :row_dim]).to(out.dtype)
        out[torch.as_tensor(~prim)] = self.table[torch.as_tensor(slots[~prim] - self.num_primary)]
        return out

    def slots_of(self, ids: np.ndarray) -> np.ndarray:
        """Slots of ``ids`` in this file (-1 where not held)."""
        pos = np.minimum(np.searchsorted(self._sorted, ids), max(self._sorted.size - 1, 0))
        hit = (self._sorted[pos] == ids) if self._sorted.size else np.zeros(ids.size, bool)
        return np.where(hit, self._order[pos], -1)


def _exchange(engine, sends: list[list[np.ndarray]], dtype) -> list[list[torch.Tensor]]:
    """All-to-all of numpy blocks (not counted in the training byte counters: the caller counts);
    the received blocks on the host (NCCL delivers them on the rank's GPU)."""
    tens = [[torch.as_tensor(np.ascontiguousarray(a), dtype=dtype) for a in row] for row in sends]
    with engine.not_counted():  # nor timed into the first epoch's comm_seconds
        got = engine.alltoallv(tens, None)
    return [[t.cpu() for t in row] for row in got]


def _who_held(engine, olds: list[list[_Old]], old_workers: int, old_n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every process learns the old primary of each old id and the sorted keys ``id * old_workers + w``
    of every (row, worker) the old placement held (two gathers)."""
    ids_parts, code_parts = [], []
    for mine in olds:
        ids_parts.append(np.concatenate([o.ids for o in mine] + [np.zeros(0, np.int64)]))
        code_parts.append(np.concatenate([2 * o.worker + (np.arange(o.ids.size) < o.num_primary) for o in mine]
                                         + [np.zeros(0, np.int64)]))
    ids = np.concatenate(engine.gather(ids_parts)).astype(np.int64)
    code = np.concatenate(engine.gather(code_parts)).astype(np.int64)
    prim, worker = code % 2 == 1, code // 2
    if ids.size and (ids.min() < 0 or ids.max() >= old_n) or np.count_nonzero(prim) != old_n or \
            np.any(np.bincount(ids[prim], minlength=old_n) != 1):
        raise TrainingError(f"the checkpoint's workers do not hold each of the ancestor's {old_n} rows exactly once as "
                            f"a primary; the checkpoint does not belong to that dataset ({_FIX}).")
    old_primary = np.full(old_n, -1, dtype=np.int64)
    old_primary[ids[prim]] = worker[prim]
    return old_primary, np.sort(ids * old_workers + worker)


def _held(keys: np.ndarray, ids: np.ndarray, workers: np.ndarray, old_workers: int) -> np.ndarray:
    k = ids * old_workers + workers
    pos = np.minimum(np.searchsorted(keys, k), max(keys.size - 1, 0))
    return (workers < old_workers) & (keys[pos] == k) if keys.size else np.zeros(ids.size, bool)


# long function: one pass over the migration's phases reads best in order (gather, primaries, secondaries)
def migrate_rows(trainer, ckpt: Path, head: dict[str, Any], old_n: int,
                 created: np.ndarray | None = None) -> dict[str, Any]:
    """Move the old placement's rows (checkpoint ``ckpt``, header ``head``) to ``trainer``'s stores, all but
    the ``created`` ids (left at their initial values); return the counts."""
    old_workers = int(head["num_workers"])
    ctx, config = trainer.context(), trainer.settings()
    eng, n, d = ctx.engine, ctx.num_workers, ctx.row_dim
    adagrad = config.optimizer == "adagrad"
    dtype = config.torch_dtype
    item = torch.empty(0, dtype=dtype).element_size()
    local = list(eng.local_workers)
    if old_n > ctx.data.num_embeddings:
        raise TrainingError(f"{ckpt}'s dataset has {old_n} ids, the new one {ctx.data.num_embeddings}; ids must "
                            f"only be appended ('gmp data import --extend').")
    olds = [[_Old(ckpt, head, w) for w in range(old_workers) if w % n == lw] for lw in local]
    old_primary, held_keys = _who_held(eng, olds, old_workers, old_n)
    fresh = np.zeros(old_n, dtype=bool)  # created rows: at their initial values everywhere, nothing sent
    if created is not None:
        c = np.asarray(created, dtype=np.int64)
        fresh[c[c < old_n]] = True
    new_primary = np.asarray(ctx.primary, dtype=np.int64)
    moved = {"primaries": 0, "secondaries": 0, "refreshed": 0, "new_ids": int(ctx.data.num_embeddings - old_n)}
    sent = {"values": 0, "optimizer_state": 0, "clocks": 0}

    # 1. primaries: old primary -> new primary (sender: the process reading the old file, by id order)
    val_sends, clk_sends, first_trained = [], [], None
    for mine in olds:
        ids = np.concatenate([o.ids[:o.num_primary] for o in mine] + [np.zeros(0, np.int64)])
        vals = np.concatenate([o.primaries for o in mine] + [np.zeros((0, d * (2 if adagrad else 1)))])
        vals = vals.astype(np.float64)
        clk = np.concatenate([o.clock[:o.num_primary] for o in mine] + [np.zeros(0, np.int64)])
        made = fresh[ids]
        trained_here = made & (clk != 0)
        if trained_here.any() and first_trained is None:
            first_trained = int(ids[trained_here][0])
        ids, vals, clk = ids[~made], vals[~made], clk[~made]
        dest = new_primary[ids]
        order = np.lexsort((ids, dest))
        cuts = np.searchsorted(dest[order], np.arange(n + 1))
        val_sends.append([vals[order[cuts[k]:cuts[k + 1]]] for k in range(n)])
        clk_sends.append([clk[order[cuts[k]:cuts[k + 1]]] for k in range(n)])
    if eng.sum_across(np.array([0.0 if first_trained is None else 1.0]))[0] > 0:  # every process raises
        which = "" if first_trained is None else f" (e.g. row {first_trained})"
        raise TrainingError(f"{ckpt} trained rows that the manifest's history says no earlier data read{which}: the "
                            f"new manifest was not placed from the one this checkpoint was trained with; run 'gmp "
                            f"partition NEW `from_manifest`' on that manifest, or {_FIX}.")
    got_vals, got_clk = _exchange(eng, val_sends, dtype), _exchange(eng, clk_sends, torch.int64)
    states = []
    for li, w in enumerate(local):
        store = ctx.stores[li]
        st = store.state_dict()  # a fresh store: every row at its initial value (new ids included)
        st["primaries"] = np.concatenate(list(store.primary_blocks()) + [np.zeros((0, store.primary_width))])
        prim = store.ids[:store.num_primary]
        prim = prim[prim < old_n]
        prim = prim[~fresh[prim]]
        for src in range(n):
            exp = prim[old_primary[prim] % n == src]
            if exp.size != got_vals[li][src].shape[0]:
                raise TrainingError(f"migration: worker {w} expected {exp.size} rows from worker {src}, got "
                                    f"{got_vals[li][src].shape[0]}. This is a bug in gmp.")
            slots = store.lookup(exp)  # primaries: slots [0, num_primary)
            st["primaries"][slots] = got_vals[li][src].numpy()
            st["clock"][slots] = got_clk[li][src].numpy()
            away = int(np.count_nonzero(old_primary[exp] != w))
            moved["primaries"] += away
            sent["values"] += away * d * item
            sent["optimizer_state"] += away * d * item if adagrad else 0
            sent["clocks"] += away * 8
        states.append(st)

    # 2. secondaries of old ids: kept where the worker held a copy, else sent by the new primary
    sec_x = np.repeat(np.arange(ctx.placement.num_embeddings, dtype=np.int64),
                      np.diff(np.asarray(ctx.placement.secondary_indptr)))
    sec_w = np.asarray(ctx.placement.secondary_workers, dtype=np.int64)
    old = sec_x < old_n
    old[old] = ~fresh[sec_x[old]]
    sec_x, sec_w = sec_x[old], sec_w[old]
    held = _held(held_keys, sec_x, sec_w, old_workers)
    # Herald's runtime scheduler takes every copy as fresh at the start (it tracks staleness by its
    # own events, not by clocks): there every copy is refreshed, with the primary's Adagrad state
    herald = config.herald_options() is not None
    kept = held & (not herald)
    fill_x, fill_w, fill_new = sec_x[~kept], sec_w[~kept], ~held[~kept]
    ship_state = herald and adagrad
    for li, w in enumerate(local):
        store, st = ctx.stores[li], states[li]
        mine = [o for o in olds[li] if o.worker == w]
        xs = sec_x[kept & (sec_w == w)]
        if mine and xs.size:
            o, slots = mine[0], store.lookup(xs)
            src = o.slots_of(xs)
            st["table"][torch.as_tensor(slots - store.num_primary)] = o.values(src, d).to(st["table"].dtype)
            st["clock"][slots] = o.clock[src]
            was_sec = src >= o.num_primary
            if st.get("local_state") is not None and o.local_state is not None and was_sec.any():
                st["local_state"][torch.as_tensor(slots[was_sec] - store.num_primary)] = \
                    o.local_state[torch.as_tensor(src[was_sec] - o.num_primary)].to(st["local_state"].dtype)
    val_sends, clk_sends = [], []
    for li, w in enumerate(local):
        store, st = ctx.stores[li], states[li]
        mine = new_primary[fill_x] == w
        xs, to = fill_x[mine], fill_w[mine]
        order = np.lexsort((xs, to))
        cuts = np.searchsorted(to[order], np.arange(n + 1))
        slots = store.lookup(xs[order])
        vals, clk = st["primaries"][slots][:, :d], st["clock"][slots]
        if ship_state:
            vals = st["primaries"][slots]
        val_sends.append([vals[cuts[k]:cuts[k + 1]] for k in range(n)])
        clk_sends.append([clk[cuts[k]:cuts[k + 1]] for k in range(n)])
    got_vals, got_clk = _exchange(eng, val_sends, dtype), _exchange(eng, clk_sends, torch.int64)
    for li, w in enumerate(local):
        store, st = ctx.stores[li], states[li]
        for src in range(n):
            sel = (fill_w == w) & (new_primary[fill_x] == src)
            exp = fill_x[sel]
            slots = store.lookup(exp)
            st["table"][torch.as_tensor(slots - store.num_primary)] = got_vals[li][src][:, :d].to(st["table"].dtype)
            st["clock"][slots] = got_clk[li][src].numpy()
            if ship_state:
                st["local_state"][torch.as_tensor(slots - store.num_primary)] = \
                    got_vals[li][src][:, d:].to(st["local_state"].dtype)
            moved["secondaries"] += int(np.count_nonzero(fill_new[sel]))
            moved["refreshed"] += int(np.count_nonzero(~fill_new[sel]))
            sent["values"] += int(exp.size) * d * item
            sent["optimizer_state"] += int(exp.size) * d * item if ship_state else 0
            sent["clocks"] += int(exp.size) * 8
        prim = st.pop("primaries")
        store.load_state_dict(st, lambda a, b, prim=prim: prim[a:b])
    totals = eng.sum_across(np.array([moved["primaries"], moved["secondaries"], moved["refreshed"], sent["values"],
                                      sent["optimizer_state"], sent["clocks"]], dtype=np.float64))
    p, s, r, v, o, c = (int(round(t)) for t in totals)
    return {"moved_rows": {"primaries": p, "secondaries": s, "total": p + s, "new_ids": moved["new_ids"],
                           "created_rows": int(np.count_nonzero(fresh)), "refreshed_secondaries": r},
            "bytes": {"values": v, "optimizer_state": o, "clocks": c, "total": v + o + c},
            "old_num_embeddings": int(old_n), "num_embeddings": int(ctx.data.num_embeddings),
            "old_workers": int(old_workers)}
