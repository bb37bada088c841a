import numpy as np
import pytest

from gmp.datasets.format import load_dataset
from gmp.errors import DatasetError, GraphError
from gmp.graph import BipartiteGraph, build_graph


def test_dataset_round_trip(tiny_dataset, tiny_rows):
    ds = load_dataset(tiny_dataset)
    assert ds.num_samples == 6 and ds.num_embeddings == 6 and ds.num_edges == 12
    assert ds.indices.dtype == np.int32 and ds.indptr.dtype == np.int64
    assert [sorted(ds.indices[ds.indptr[i]:ds.indptr[i + 1]].tolist()) for i in range(6)] == tiny_rows
    assert ds.num_train == 4 and ds.num_test == 2
    assert ds.meta["label_rate"] == pytest.approx(0.5)
    ds.verify_hash()


def test_dataset_hash_detects_change(tiny_dataset):
    arr = np.load(tiny_dataset / "labels.npy")
    arr[0] = 1 - arr[0]
    np.save(tiny_dataset / "labels.npy", arr)
    with pytest.raises(DatasetError, match="do not match the sha256"):
        load_dataset(tiny_dataset).verify_hash()


def test_dataset_newer_version_refused(tiny_dataset):
    import json

    meta = json.loads((tiny_dataset / "dataset.json").read_text())
    meta["schema_version"] = 99
    (tiny_dataset / "dataset.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="schema_version 99; this gmp reads up to 2"):
        load_dataset(tiny_dataset)


def test_dataset_bad_shape(tiny_dataset):
    np.save(tiny_dataset / "labels.npy", np.zeros(5, dtype=np.float32))
    with pytest.raises(DatasetError, match=r"labels.npy has shape \(5,\), expected \(6,\)"):
        load_dataset(tiny_dataset)


def test_graph_csr_and_transpose(tiny_dataset):
    g = build_graph(load_dataset(tiny_dataset))
    # hand-checked transpose: embedding -> samples using it
    expect = {0: [0, 2], 1: [0, 1], 2: [1, 2, 5], 3: [3, 5], 4: [3, 4], 5: [4]}
    for e, samples in expect.items():
        assert g.emb_indices[g.emb_indptr[e]:g.emb_indptr[e + 1]].tolist() == samples
    assert g.embedding_degree().tolist() == [2, 2, 3, 2, 2, 1]
    a = g.sample_csr().toarray()
    assert a.sum() == 12 and a[5, 2] == 1 and a[5, 3] == 1 and a[5, 0] == 0


def test_cooccurrence_weights(tiny_graph):
    w = tiny_graph.cooccurrence().toarray()
    expect = np.zeros((6, 6), dtype=np.int64)
    for a, b in [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (2, 3)]:
        expect[a, b] += 1
        expect[b, a] += 1
    np.testing.assert_array_equal(w, expect)


def test_cooccurrence_counts_repeated_pairs():
    g = BipartiteGraph.from_lists([[0, 1, 2], [0, 1], [1, 2]], num_embeddings=3)
    w = g.cooccurrence().toarray()
    assert w[0, 1] == 2 and w[1, 2] == 2 and w[0, 2] == 1 and np.all(np.diag(w) == 0)


def test_stats(tiny_graph):
    s = tiny_graph.stats()
    assert s.num_active_embeddings == 6 and s.max_embedding_degree == 3
    assert s.top1pct_access_share == pytest.approx(3 / 12)


def test_unused_ids_are_not_active():
    g = BipartiteGraph.from_lists([[0], [0, 3]], num_embeddings=5)
    assert g.stats().num_active_embeddings == 2
    assert g.embedding_degree().tolist() == [2, 0, 0, 1, 0]


def test_graph_check_rejects_out_of_range():
    with pytest.raises(GraphError, match=r"ids must lie in \[0, 2\)"):
        BipartiteGraph(np.array([0, 2], dtype=np.int64), np.array([0, 5], dtype=np.int32), 2)
