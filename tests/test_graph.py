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
    with pytest.raises(DatasetError, match=r"do not match the arrays_sha256 .* or 'gmp data synth' \(GMP_NO_VERIFY=1 "
                                           r"skips this check\)\.$"):
        load_dataset(tiny_dataset).verify_hash()


def test_dataset_newer_version_refused(tiny_dataset):
    import json

    meta = json.loads((tiny_dataset / "dataset.json").read_text())
    meta["schema_version"] = 99
    (tiny_dataset / "dataset.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="schema_version 99; this gmp reads up to 3"):
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


def test_to_networkx_known_answers_cross_checked_with_networkx():
    """Two components by hand: samples {0, 1} share embedding 1; sample 2 alone uses 3 and 4;
    embedding 2 is unused (an isolated node)."""
    import networkx as nx
    from networkx.algorithms import bipartite

    from gmp.graph import BipartiteGraph
    from gmp.metrics import embedding_degree

    g = BipartiteGraph.from_lists([[0, 1], [1], [3, 4]], num_embeddings=5)
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == 3 + 5 and nxg.number_of_edges() == g.num_edges == 5
    assert bipartite.is_bipartite(nxg)
    assert {n for n, d in nxg.nodes(data=True) if d["bipartite"] == 0} == {("s", 0), ("s", 1), ("s", 2)}
    # components: {s0, s1, e0, e1}, {s2, e3, e4}, {e2}
    comps = sorted(sorted(c) for c in nx.connected_components(nxg))
    assert comps == [[("e", 0), ("e", 1), ("s", 0), ("s", 1)], [("e", 2)], [("e", 3), ("e", 4), ("s", 2)]]
    # gmp's degrees equal networkx's
    assert [nxg.degree(("e", j)) for j in range(5)] == embedding_degree(g).tolist() == [1, 2, 0, 1, 1]
    assert [nxg.degree(("s", i)) for i in range(3)] == np.diff(g.sample_indptr).tolist()
    # the embedding co-use projection: 0-1 (sample 0) and 3-4 (sample 2)
    proj = bipartite.projected_graph(nxg, [("e", j) for j in range(5)])
    assert sorted(tuple(sorted((a[1], b[1]))) for a, b in proj.edges()) == [(0, 1), (3, 4)]


def test_to_networkx_refuses_large_graphs():
    from gmp.errors import GraphError
    from gmp.graph import BipartiteGraph

    with pytest.raises(GraphError, match="max_edges=2"):
        BipartiteGraph.from_lists([[0, 1], [1]], num_embeddings=2).to_networkx(max_edges=2)


def test_from_csr_refuses_a_sample_that_lists_an_embedding_twice():
    indptr = np.array([0, 2, 5, 6], dtype=np.int64)
    BipartiteGraph.from_csr(indptr, np.array([0, 1, 1, 2, 3, 1]), 4)  # repeats across samples are edges
    with pytest.raises(GraphError, match="sample 1 lists the same embedding twice"):
        BipartiteGraph.from_csr(indptr, np.array([0, 1, 1, 2, 1, 1]), 4)


def _write(path, rows, num_embeddings, dedupe):
    from gmp.datasets.format import FieldInfo, write_dataset

    write_dataset(path, indptr=np.cumsum([0] + [len(r) for r in rows]),
                  indices=np.array([i for r in rows for i in r], dtype=np.int64),
                  labels=np.zeros(len(rows), dtype=np.float32), dense=None,
                  fields=[FieldInfo("M", "multi", num_embeddings, 0)], num_embeddings=num_embeddings,
                  source={"format": "test"}, test_fraction=0.0, dedupe=dedupe)


def test_build_graph_refuses_a_dataset_whose_sample_repeats_an_id(tmp_path):
    """write_dataset(dedupe=False) wrote a repeat that load_dataset and build_graph accepted: --distributed then
    raised an IndexError and the compiled kernels indexed their count tables past the end."""
    rows = [[2, 0], [1, 3, 1, 0], [3, 3]]   # sample 1 repeats id 1 (not ascending), sample 2 id 3
    _write(tmp_path / "raw", rows, 4, dedupe=False)
    with pytest.raises(GraphError, match=r"raw: sample 1 lists id 1 more than once.*dedupe=True"):
        build_graph(load_dataset(tmp_path / "raw"))
    _write(tmp_path / "clean", rows, 4, dedupe=True)
    assert build_graph(load_dataset(tmp_path / "clean")).num_edges == 2 + 3 + 1


@pytest.mark.parametrize("seed", [1, 2, 3, 7])
def test_first_repeated_id_equals_a_plain_reference(seed):
    from gmp.graph import first_repeated_id

    def reference(rows):
        for i, r in enumerate(rows):
            if len(set(r)) < len(r):
                return i
        return None

    rng = np.random.default_rng(seed)
    for _ in range(400):
        rows = [list(rng.integers(0, 6, rng.integers(0, 5))) for _ in range(rng.integers(0, 8))]
        if rng.random() < 0.5:  # ascending rows, as the writer leaves them: repeats come only from ties
            rows = [sorted(r) for r in rows]
        indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
        indices = np.array([i for r in rows for i in r], dtype=np.int32)
        got = first_repeated_id(indptr, indices)
        want = reference(rows)
        assert (None if got is None else got[0]) == want, (rows, got)
        if got is not None:
            assert rows[got[0]].count(got[1]) > 1


def test_a_streamed_partition_refuses_a_repeated_id_before_it_starts(tmp_path):
    """The --distributed / --chunk-samples path reads the dataset's arrays without build_graph."""
    from cli_helpers import invoke, one_line_error

    _write(tmp_path / "raw", [[0, 1], [1, 2, 1], [0]], 3, dedupe=False)
    res = invoke("partition", tmp_path / "raw", "--workers", 2, "--chunk-samples", 2, "--no-plots",
                 "--out", tmp_path / "o")
    one_line_error(res, r"sample 1 lists id 1 more than once")
