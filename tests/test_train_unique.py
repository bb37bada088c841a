"""UniqueIndex: np.unique(values, return_inverse=True) without sorting every value."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmp.train.unique import UniqueIndex


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 50).flatmap(lambda size: st.tuples(
    st.just(size), st.lists(st.lists(st.integers(0, size - 1), max_size=40), min_size=1, max_size=4))))
def test_equals_numpy_unique_call_after_call(case):
    """Several calls on one instance (the map must be left clean after each): numpy's exact answer."""
    size, batches = case
    index = UniqueIndex(size)
    for values in batches:
        values = np.array(values, dtype=np.int64)
        uniq, inv = index(values)
        want_u, want_inv = np.unique(values, return_inverse=True)
        assert uniq.dtype == np.int64 and inv.dtype == np.int64
        assert np.array_equal(uniq, want_u)
        assert np.array_equal(inv, want_inv.reshape(-1))
        assert np.array_equal(uniq[inv], values)


def test_a_batch_of_a_large_id_space():
    rng = np.random.default_rng(0)
    values = rng.zipf(1.3, 50_000) % 3_000_000
    uniq, inv = UniqueIndex(3_000_000)(values)
    want_u, want_inv = np.unique(values, return_inverse=True)
    assert np.array_equal(uniq, want_u) and np.array_equal(inv, want_inv)


@pytest.mark.parametrize("values", [[-1, 2], [0, 10]])
def test_out_of_range_values_get_numpys_answer(values):
    """Values outside [0, size) (a caller's bug it checks itself) never index the map."""
    values = np.array(values)
    uniq, inv = UniqueIndex(10)(values)
    assert np.array_equal(uniq, np.unique(values)) and np.array_equal(uniq[inv], values)


def test_empty():
    uniq, inv = UniqueIndex(5)(np.zeros(0, dtype=np.int64))
    assert uniq.size == 0 and inv.size == 0


def test_initial_rows_are_the_ids_rows_of_their_chunk_block_in_bounded_memory(monkeypatch):
    """Id i's initial row is row i % 2**16 of the uniform block drawn from (seed, 7919, i >> 16), whichever
    ids are asked together, and drawing it in pieces gives those same values; a wide row_dim does not
    draw a whole [2**16, row_dim] block (1 GiB here) for a few ids."""
    import tracemalloc

    import gmp.train.slots as slots
    from gmp.train.slots import INIT_SCALE, initial_rows

    def block_row(i, dim, seed):
        return np.random.default_rng([seed, 7919, i >> 16]).uniform(-INIT_SCALE, INIT_SCALE,
                                                                  size=(1 << 16, dim))[i & 0xFFFF]

    ids = np.array([70000, 3, 65535, 131071, 65536, 9, 200003])
    want = np.stack([block_row(int(i), 6, 11) for i in ids])
    np.testing.assert_array_equal(initial_rows(ids, 6, 11), want)
    np.testing.assert_array_equal(initial_rows(ids[::-1], 6, 11), want[::-1])
    np.testing.assert_array_equal(initial_rows(ids[:2], 6, 11), want[:2])
    monkeypatch.setattr(slots, "_PIECE_VALUES", 6 * 7)  # pieces of 7 rows
    np.testing.assert_array_equal(initial_rows(ids, 6, 11), want)
    monkeypatch.undo()
    tracemalloc.start()
    try:
        initial_rows(np.array([5, 70000]), 2000, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
