"""Shared fixtures: tiny hand-made datasets and graphs."""

from __future__ import annotations

import numpy as np
import pytest

from gmp.datasets.format import FieldInfo, write_dataset
from gmp.graph import BipartiteGraph


@pytest.fixture
def tiny_rows() -> list[list[int]]:
    # 6 samples over 6 embeddings: two obvious communities {0,1,2} and {3,4,5},
    # bridged by sample 5 (uses 2 and 3).
    return [[0, 1], [1, 2], [0, 2], [3, 4], [4, 5], [2, 3]]


@pytest.fixture
def tiny_graph(tiny_rows) -> BipartiteGraph:
    return BipartiteGraph.from_lists(tiny_rows, num_embeddings=6)


@pytest.fixture
def tiny_dataset(tmp_path, tiny_rows):
    """A prepared dataset on disk: 2 categorical fields of 3 values each, 1 dense column."""
    indptr = np.cumsum([0] + [len(r) for r in tiny_rows])
    indices = np.array([i for r in tiny_rows for i in r])
    labels = np.array([1, 0, 1, 0, 1, 0], dtype=np.float32)
    dense = np.arange(6, dtype=np.float32).reshape(6, 1)
    fields = [
        FieldInfo("I1", "dense", 0, None, column=0),
        FieldInfo("A", "categorical", 3, 0),
        FieldInfo("B", "categorical", 3, 3),
    ]
    out = tmp_path / "tiny"
    write_dataset(out, indptr=indptr, indices=indices, labels=labels, dense=dense, fields=fields,
                  num_embeddings=6, source={"format": "test"}, test_fraction=1 / 3)
    return out


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test, then as it was (the training tests share a small machine)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
