"""gmp._io helpers: releasing memory-mapped pages never changes data or hashes."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from gmp._io import _HASH_CHUNK, hash_arrays, release_pages


def test_release_pages_keeps_written_and_read_data(tmp_path):
    path = tmp_path / "x.npy"
    n = 3_000_001
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(n,))
    for s in range(0, n, 100_003):  # chunks not aligned to pages
        out[s:s + 100_003] = np.arange(s, min(s + 100_003, n), dtype=np.int32)
        release_pages(out, s, s + 100_003)
    out.flush()
    del out
    back = np.load(path, mmap_mode="r")
    for s in range(0, n, 77_777):
        release_pages(back, s, s + 77_777)
    np.testing.assert_array_equal(back, np.arange(n, dtype=np.int32))


def test_release_pages_ignores_plain_arrays_and_empty_ranges():
    a = np.arange(10)
    release_pages(a, 0, 10)
    release_pages(a, 5, 2)
    np.testing.assert_array_equal(a, np.arange(10))


def test_hash_of_a_memmap_equals_the_hash_in_memory(tmp_path):
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 1 << 30, size=_HASH_CHUNK // 8 * 2 + 17, dtype=np.int64)  # three chunks
    np.save(tmp_path / "a.npy", arr)
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert hash_arrays([("a", mapped)]) == hash_arrays([("a", arr)])
    np.testing.assert_array_equal(mapped, arr)  # still readable after its pages were released


def test_write_json_finite_refuses_nan_and_infinity_naming_the_key(tmp_path):
    """manifest.json and report.json held bare NaN/Infinity (not JSON), which gmp report then called damaged."""
    from gmp._io import write_json
    from gmp.errors import ManifestError

    path = tmp_path / "m.json"
    bad = {"metrics": {"reduction_vs_random": {"remote_accesses_weighted": float("nan")}}, "ok": 1}
    with pytest.raises(ManifestError, match=r"m.json: metrics.reduction_vs_random.remote_accesses_weighted is nan"):
        write_json(path, bad, finite=True, error=ManifestError)
    assert not path.exists() and not list(tmp_path.iterdir())
    with pytest.raises(ManifestError, match=r"traffic\[1\]\[0\] is inf"):
        write_json(path, {"traffic": np.array([[0.0, 1.0], [np.inf, 0.0]])}, finite=True, error=ManifestError)
    write_json(path, {"a": 1.5, "b": [np.float64(2.0)]}, finite=True)
    assert json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c)) == {"a": 1.5, "b": [2.0]}


@pytest.mark.parametrize("content, why", [
    (b"garbage", "garbage or a pickle, which gmp never loads"),
    (pickle.dumps([1, 2]), "garbage or a pickle, which gmp never loads"),
    ("object", "an array of Python objects (a pickle, which gmp never loads)"),
    (b"", "No data left in file"),
], ids=["garbage", "pickle", "object-array", "empty"])
@pytest.mark.parametrize("mmap", [True, False])
def test_load_npy_never_quotes_the_unsafe_load_advice(tmp_path, content, why, mmap):
    """numpy's error for a file without the .npy magic advises allow_pickle=; it was quoted as it is."""
    from gmp._io import load_npy
    from gmp.errors import DatasetError

    path = tmp_path / "indptr.npy"
    if content == "object":
        np.save(path, np.array([1, "a"], dtype=object), allow_pickle=True)
        if mmap:  # numpy's memory-mapping words it otherwise ("Python objects in dtype")
            why = "an array of Python objects (a pickle, which gmp never loads)"
    else:
        path.write_bytes(content)
    with pytest.raises(DatasetError) as err:
        load_npy(path, error=DatasetError, mmap=mmap, fix="re-create it.")
    assert str(err.value) == f"{path} is not a readable .npy array ({why}); re-create it."
