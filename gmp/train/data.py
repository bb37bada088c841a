"""``TrainData``: the dataset arrays the trainer reads (samples, fields, labels, access frequencies)."""

from __future__ import annotations

import numpy as np

from ..errors import TrainingError
from ..kernels.csr import gather_csr


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

    def gather(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """CSR (ptr, ids) of the given samples, ids int64."""
        return gather_csr(self.indptr, self.indices, np.asarray(samples, dtype=np.int64))
