"""The torch id path of a step's preparation (issue 33, item 1): the id work as torch operations.

:func:`gmp.train.steps.prepare` reads a worker's batch ids, deduplicates them, translates ids to
slots and makes the step's index and batch tensors. The *numpy path* does the id work on the host
and copies its results to the device; the *torch path* (here) does the same work with torch
operations on the store's device, with the same results bit for bit:

* the batch's ids: numpy ``gather_csr`` over the dataset / the dataset's id matrix as a tensor
  (:meth:`TrainData.tensors`) indexed by the sample indices (on CUDA copied from pinned memory,
  ``non_blocking``);
* deduplication: numba :class:`~gmp.train.unique.UniqueIndex` (equal to ``np.unique``) /
  ``torch.unique(sorted=True, return_inverse=True)``;
* id -> slot: :meth:`SlotMap.lookup` / :meth:`SlotMap.lookup_tensor` (the dense map as a device
  tensor, or ``searchsorted`` over the sorted held ids);
* the masks, the owner groups of the gradient push, the own gradients' sorted slots and their
  positions: numpy stable argsorts / ``argsort(stable=True)`` and a scatter;
* the model's ``Batch``: :func:`~gmp.train.steps.make_batch` / :func:`prepare_tensors`.

**Which case takes which path** (:func:`takes_torch_path`, the one place that reads
``GMP_ID_PATH``): the torch path needs a store whose slots never move (``fixed_layout``: a device
table, no tier, no Herald cache). With ``GMP_ID_PATH`` unset (or ``auto``) it is taken when that
store is on CUDA in a world of one (one worker in all) and the batch is prepared before its step
(``BoundedStaleness.prepare``, on the input pipeline's side stream; not the pipelined protocol's
preparation inside a step, nor the evaluation's); ``GMP_ID_PATH=torch`` takes it for every
fixed-layout store (any number of workers, any staleness: the tests and the bench force it on the
CPU), ``GMP_ID_PATH=numpy`` never. Everything else takes the numpy path: tiered stores (their pinned
cache slots are the tier's host arrays), Herald's cache (its copies move during steps), several
workers on CUDA by default (the settle stage reads the batch's ids, slots and masks on the host
every step to exchange HET-GMP's requests and clocks), and the CPU by default, where numpy is the
faster one (docs/train.md, "The preparation's id work as torch operations").

**The host arrays.** The settle stage and the step still read some numpy fields: the ids, slots and
masks of :class:`~gmp.train.steps.WorkerStep` (HET-GMP's requests and the clocks, host metadata of
the store), ``Prepared.grad_slots`` (the clocks of the updated rows) and the push's owner groups. On
the CPU they are numpy views of the torch path's tensors (no copy). On CUDA the preparation copies
them ``non_blocking`` into pinned buffers on its own stream and records one event (:class:`HostCopies`);
a field is read on its first use, which waits for that event only (the preparation's copies, never
the training stream). The preparation itself reads no device value in a world of one:
``torch.unique`` waits inside torch for its output size, on the preparation's stream; positions of
held and own rows are ``arange`` there (every row is a primary of the one worker), where several
workers use ``nonzero`` (another such wait).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from ..errors import TrainingError
from .models import Batch

#: the environment variable that chooses the preparation's id path (:func:`id_path`)
ID_PATH_ENV = "GMP_ID_PATH"
ID_PATHS = ("auto", "torch", "numpy")


def id_path() -> str:
    """``GMP_ID_PATH`` (``auto`` when unset): ``auto``, ``torch`` or ``numpy`` (module docstring)."""
    value = os.environ.get(ID_PATH_ENV, "").strip().lower() or "auto"
    if value not in ID_PATHS:
        raise TrainingError(f"The environment variable {ID_PATH_ENV} is {value!r}; expected auto, torch or "
                            f"numpy. Unset it (auto: torch on a CUDA table in a world of one) or set one of those.")
    return value


def takes_torch_path(store, num_workers: int, *, resident=None, before_step: bool = True) -> bool:
    """Whether :func:`gmp.train.steps.prepare` takes the torch path for ``store`` (module docstring):
    a fixed-layout store (``resident``: a tier's pinned rows, never), on CUDA in a world of one when
    prepared ``before_step`` (not inside another step, as the pipelined protocol prepares the next:
    ``torch.unique`` would wait for the step's stream there), or any when ``GMP_ID_PATH=torch``."""
    if resident is not None or not store.fixed_layout:
        return False
    setting = id_path()
    if setting == "auto":
        return store.device.type == "cuda" and num_workers == 1 and before_step
    return setting == "torch"


class HostCopies:
    """Host copies of one preparation's tensors, read by the settle stage and the step (module
    docstring): numpy views on the CPU; on CUDA pinned buffers filled ``non_blocking`` on the current
    stream, with one event recorded by :meth:`close` that a first read waits for."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._event = None

    def add(self, value):
        """``value`` (a tensor, or an array already on the host) as the host sees it: an array, or on
        CUDA a :class:`HostArray` read on first use."""
        if not isinstance(value, torch.Tensor):
            return value
        if not self.cuda:
            return value.numpy()  # a view: the CPU tensor's memory
        buf = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
        buf.copy_(value, non_blocking=True)
        return HostArray(buf.numpy(), self)  # the array keeps the pinned buffer alive

    def close(self) -> None:
        """Mark the end of the copies (on the device's current stream, which made them)."""
        if self.cuda:
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(self.device))

    def wait(self) -> None:
        """Wait for the copies (once): the preparation's stream up to :meth:`close`, nothing else."""
        event, self._event = self._event, None
        if event is not None:
            event.synchronize()


class HostArray:
    """An array whose values are still being copied from the device (:class:`HostCopies`)."""

    __slots__ = ("_array", "_copies")

    def __init__(self, array: np.ndarray, copies: HostCopies) -> None:
        self._array = array
        self._copies = copies

    def get(self) -> np.ndarray:
        self._copies.wait()
        return self._array


def host_field(name: str) -> property:
    """A dataclass field that may hold a :class:`HostArray` (the torch path on CUDA: a host copy still
    in flight), read as its array on first use (set on :class:`~gmp.train.steps.WorkerStep` and
    :class:`~gmp.train.steps.Prepared` after their dataclass is made)."""
    def get(self):
        value = self.__dict__[name]
        if isinstance(value, HostArray):
            value = self.__dict__[name] = value.get()
        return value

    def put(self, value) -> None:
        self.__dict__[name] = value

    return property(get, put)


def _positions(mask: torch.Tensor, every: bool) -> torch.Tensor:
    """Positions where ``mask`` holds; ``every``: it holds everywhere (no ``nonzero``, no wait)."""
    if every:
        return torch.arange(mask.shape[0], dtype=torch.int64, device=mask.device)
    return torch.nonzero(mask).reshape(-1)


def prepare_tensors(ctx, li: int, samples: np.ndarray, *, training: bool = True) -> tuple[np.ndarray, dict, dict]:
    """Worker ``li``'s batch of ``samples`` by the torch path: ``(ptr, ids, ready)``, ``ptr`` the
    batch's CSR offsets (host, from the dataset's ``indptr``: no id read), ``ids`` the
    :class:`~gmp.train.steps.WorkerStep` fields ``uniq``, ``inv``, ``slots``, ``is_primary``,
    ``is_secondary`` and ``ready`` the :class:`~gmp.train.steps.Prepared` fields, as
    :func:`~gmp.train.steps.prepare`'s numpy path makes them for a fixed-layout store (tensors on
    the store's device; ``push_order``, ``push_bounds``, ``grad_slots`` are read on the host)."""
    store = ctx.stores[li]
    dev = store.device
    got = ctx.data.gather_tensor(samples, dev)
    uniq, inv = torch.unique(got.ids, sorted=True, return_inverse=True)  # == np.unique
    inv = inv.reshape(-1)
    slots = store.slots.lookup_tensor(uniq)
    is_primary = (slots >= 0) & (slots < store.num_primary)
    is_secondary = (slots >= store.num_primary) & (slots < store.num_rows)
    ids = dict(uniq=uniq, inv=inv, slots=slots, is_primary=is_primary, is_secondary=is_secondary)
    ready: dict = {}
    if samples.size:
        f = ctx.data.num_fields
        seg = None if got.entry_sample is None else got.entry_sample * f + ctx.data.field_tensor(dev).index_select(0, got.ids)
        ready["batch"] = Batch(int(samples.size), inv, seg, got.dense, got.labels)
    # a world of one: the worker is primary of every row (no nonzero, no owner groups, no secondaries)
    every = store.num_primary == store.slots.num_embeddings
    held = _positions((slots >= 0) & (slots < store.num_rows), every)  # fixed layout: in the table
    ready["held_pos"] = held
    ready["held_idx"] = slots[held] - store.table_base
    if not training:
        return got.ptr, ids, ready
    n = ctx.num_workers
    if every:
        ready["push_order"] = np.zeros(0, dtype=np.int64)
        ready["push_bounds"] = np.zeros(n + 1, dtype=np.int64)
        ready["push_order_t"] = torch.zeros(0, dtype=torch.int64, device=dev)
    else:  # group_by_owner of the non-primary rows
        idx = torch.nonzero(~is_primary).reshape(-1)
        owner = ctx.primary_tensor(dev)[uniq[idx]]
        rank = torch.argsort(owner, stable=True)
        order = idx[rank]
        bounds = torch.searchsorted(owner[rank], torch.arange(n + 1, dtype=owner.dtype, device=dev))
        ready["push_order"], ready["push_bounds"], ready["push_order_t"] = order, bounds.long(), order
    own = _positions(is_primary, every)
    ready["own_t"] = own
    own_slots = slots[own]  # distinct: np.unique is a sort, the inverse its rank
    rank = torch.argsort(own_slots, stable=True)
    where = torch.empty_like(rank)
    where[rank] = torch.arange(rank.shape[0], dtype=torch.int64, device=dev)
    ready["grad_slots"] = own_slots[rank]
    ready["grad_where"] = where
    ready["grad_idx"] = ready["grad_slots"].clone()
    if not every:
        sec = torch.nonzero(is_secondary).reshape(-1)
        if sec.shape[0]:  # s > 0's local updates of the secondaries: (table rows, state rows)
            ready["sec_t"] = sec
            ready["sec_idx"] = (slots[sec] - store.table_base, slots[sec] - store.num_primary)
    return got.ptr, ids, ready
