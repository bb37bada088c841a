"""``TrainData``: the dataset arrays the trainer reads (samples, fields, labels, access frequencies).

The torch id path of the preparation (:mod:`gmp.train.device_ids`) reads them as tensors
(:meth:`TrainData.tensors`: on the table's device when they fit, else the CPU tensors that share the
arrays' memory) and gathers a batch's ids with torch operations (:meth:`TrainData.gather_tensor`).
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numba
import numpy as np
import torch

from ..errors import TrainingError
from ..kernels.csr import gather_csr
from .device_arrays import DeviceArrays, shared_tensor

#: :meth:`TrainData.sample_kinds`: a sample with an id outside every field, one id per field in
#: field order (its entries are its fields: nothing to pool), anything else
BAD_FIELD, ONE_HOT, POOLED = 0, 1, 2


@numba.njit(cache=True, nogil=True)
def _sample_kinds(indptr, indices, field_of, num_fields):  # pragma: no cover - compiled
    out = np.empty(indptr.size - 1, dtype=np.int8)
    for i in range(indptr.size - 1):
        a, b = indptr[i], indptr[i + 1]
        kind = ONE_HOT if b - a == num_fields else POOLED
        for e in range(a, b):
            f = field_of[indices[e]]
            if f < 0:
                kind = BAD_FIELD
                break
            if f != e - a:
                kind = POOLED
        out[i] = kind
    return out


class DataTensors(NamedTuple):
    """The dataset's arrays as tensors on ``device`` (:meth:`TrainData.tensors`)."""

    device: torch.device
    indptr: torch.Tensor
    indices: torch.Tensor
    labels: torch.Tensor
    dense: torch.Tensor | None


class Gathered(NamedTuple):
    """A batch gathered by :meth:`TrainData.gather_tensor` (tensors on the device asked for)."""

    ptr: np.ndarray  # CSR offsets of the batch's ids (host, int64)
    ids: torch.Tensor  # int64 ids, sample after sample
    entry_sample: torch.Tensor | None  # each id's sample in the batch; None: one id per field in order
    labels: torch.Tensor
    dense: torch.Tensor | None


class TrainData:
    """The arrays of a prepared dataset the trainer needs, loaded once."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.indptr = np.asarray(dataset.indptr)
        self.indices = np.asarray(dataset.indices)
        self.labels = np.asarray(dataset.labels)
        self.dense = None if dataset.dense is None else np.asarray(dataset.dense)
        self.num_train = dataset.num_train
        self.num_samples = dataset.num_samples
        self.num_embeddings = dataset.num_embeddings
        self.num_dense = dataset.num_dense
        self.field_of = dataset.field_of_embedding().astype(np.int64)
        self.num_fields = len(dataset.categorical_fields)
        if self.num_fields == 0:
            raise TrainingError(f"{dataset.path}: the dataset has no categorical field to embed.")
        end = int(self.indptr[self.num_train])
        self.freq = np.bincount(self.indices[:end], minlength=self.num_embeddings).astype(np.int64)
        self._lock = threading.Lock()
        self._device = DeviceArrays()
        self._kinds: np.ndarray | None = None

    def gather(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """CSR (ptr, ids) of the given samples, ids int64."""
        return gather_csr(self.indptr, self.indices, np.asarray(samples, dtype=np.int64))

    # -- the torch id path (gmp.train.device_ids) ------------------------------------------
    def sample_kinds(self) -> np.ndarray:
        """int8 per sample: :data:`BAD_FIELD`, :data:`ONE_HOT` or :data:`POOLED` (one pass over the ids,
        made on first use), so a batch's checks need no id."""
        with self._lock:
            if self._kinds is None:
                self._kinds = _sample_kinds(self.indptr, self.indices, self.field_of, self.num_fields)
            return self._kinds

    def one_hot(self, samples: np.ndarray) -> bool:
        """Whether every sample of the batch has one id per field, in field order (the model's batch then
        needs no pooling: ``Batch.entry_seg`` None); refuses a batch with an id outside every field. Read
        from :meth:`sample_kinds`: no id is read."""
        kinds = self.sample_kinds()[samples]
        if np.any(kinds == BAD_FIELD):
            raise TrainingError("a sample uses an embedding id outside every field of the dataset.")
        return kinds.size > 0 and bool(np.all(kinds == ONE_HOT))

    def tensors(self, device: torch.device | str) -> DataTensors:
        """The id matrix (``indptr``, ``indices``), labels and dense features as tensors, made once per
        device: on a CUDA ``device`` when they take at most half its free memory, else the CPU tensors
        that share the arrays' memory (no copy)."""
        device = torch.device(device)
        return self._device.get(("data", device), lambda: self._make_tensors(device))

    def _make_tensors(self, device: torch.device) -> DataTensors:
        arrays = (self.indptr, self.indices, self.labels, self.dense)
        cpu = [None if a is None else shared_tensor(a) for a in arrays]
        if device.type == "cuda":
            need = sum(a.nbytes for a in arrays if a is not None)
            if need <= torch.cuda.mem_get_info(device)[0] // 2:
                return DataTensors(device, *(None if t is None else t.to(device) for t in cpu))
        return DataTensors(torch.device("cpu"), *cpu)

    def field_tensor(self, device: torch.device | str) -> torch.Tensor:
        """``field_of`` (each id's field, int64) as a tensor on ``device`` (made once; shared on the CPU)."""
        return self._device.tensor("field_of", self.field_of, device)

    def gather_tensor(self, samples: np.ndarray, device: torch.device | str) -> Gathered:
        """The batch of ``samples`` by torch operations, its tensors on ``device``: the ids (the same as
        :meth:`gather`'s), each id's sample (None for a batch of one id per field in field order, whose
        ids need no pooling), labels and dense features. The sample indices travel to the device
        ``non_blocking`` from pinned memory; the CSR offsets and the checks are made on the host from
        ``indptr`` and :meth:`sample_kinds` (no id read there)."""
        device = torch.device(device)
        samples = np.asarray(samples, dtype=np.int64)
        one_hot = self.one_hot(samples)
        lens = self.indptr[samples + 1] - self.indptr[samples]
        ptr = np.zeros(samples.size + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        t = self.tensors(device)
        here = t.device
        s = shared_tensor(samples) if here.type == "cpu" else samples_on(samples, here)
        starts = t.indptr.index_select(0, s).long()
        if one_hot:
            pos = (starts.unsqueeze(1) + torch.arange(self.num_fields, device=here)).reshape(-1)
            entry_sample = None
        else:
            lens_t = t.indptr.index_select(0, s + 1).long() - starts
            # output sizes from the host offsets: no wait for the device
            entry_sample = torch.repeat_interleave(torch.arange(samples.size, device=here), lens_t,
                                                   output_size=int(ptr[-1]))
            first = torch.cumsum(lens_t, 0) - lens_t
            pos = (torch.arange(int(ptr[-1]), device=here) - first.index_select(0, entry_sample)
                   + starts.index_select(0, entry_sample))
        ids = t.indices.index_select(0, pos).long()
        dense = None if t.dense is None else t.dense.index_select(0, s)

        def on(x):
            return None if x is None else _to(x, device)

        return Gathered(ptr, on(ids), on(entry_sample), on(t.labels.index_select(0, s)), on(dense))


def samples_on(samples: np.ndarray, device: torch.device) -> torch.Tensor:
    """Sample indices on a CUDA ``device``: from a pinned buffer, ``non_blocking`` (on the current stream)."""
    return torch.from_numpy(samples).pin_memory().to(device, non_blocking=True)


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A tensor made where the dataset's tensors are, on ``device`` (from pinned memory, ``non_blocking``)."""
    if t.device == device:
        return t
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)
