"""The explicit-SIMD intrinsics equal their scalar definitions bit for bit."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from gmp.kernels.simd import LANES, gather_rows_dot, padded_width, weighted_row_sum


@numba.njit(cache=True)
def _rows_dot_all(indices, k0, k1, prim, d, c, out, count, df, a):
    stay = gather_rows_dot(indices, k0, k1, prim, d, c, 0, out, count, df, a)
    extra = 0.0  # a = None on the other column blocks: no scalar sum
    for col in range(LANES, d.shape[1], LANES):
        extra += abs(gather_rows_dot(indices, k0, k1, prim, d, c, col, out, count, df, None))
    return stay, extra


@numba.njit(cache=True)
def _row_sum_all(m, coef, n, out):
    for col in range(0, m.shape[1], LANES):
        weighted_row_sum(m, coef, n, col, out)


def test_padded_width():
    assert [padded_width(n) for n in (1, 2, 8, 9, 16, 17, 64)] == [8, 8, 8, 16, 16, 24, 64]


@pytest.mark.parametrize("n", [1, 3, 8, 11, 16])
def test_gather_rows_dot_matches_scalar_loop(n):
    rng = np.random.default_rng(n)
    width = padded_width(n)
    num_rows, num_edges = 50, 37
    indices = rng.integers(0, num_rows, num_edges).astype(np.int32)
    prim = rng.integers(0, n, num_rows).astype(np.int32)
    d = np.zeros((num_rows, width))
    d[:, :n] = rng.random((num_rows, n))
    c = np.zeros((n, width))
    c[:, :n] = rng.random((n, n))
    count = rng.integers(1, 20, (num_rows, n)).astype(np.int32)
    df = rng.random(25)
    a = n - 1
    out = np.full(width, np.nan)
    k0, k1 = 4, 33
    stay, extra = _rows_dot_all(indices, k0, k1, prim, d, c, out, count, df, a)
    assert extra == 0.0
    # the scalar definition, summed in edge order
    ref = np.zeros(width)
    ref_stay = 0.0
    for k in range(k0, k1):
        x = indices[k]
        for b in range(width):
            ref[b] += c[prim[x], b] * d[x, b]
        ref_stay += c[prim[x], a] * df[count[x, a] - 1]
    np.testing.assert_array_equal(out, ref)
    assert stay == ref_stay
    # an empty range gives zeros
    out[:] = np.nan
    assert _rows_dot_all(indices, 5, 5, prim, d, c, out, count, df, a) == (0.0, 0.0)
    np.testing.assert_array_equal(out, np.zeros(width))


@pytest.mark.parametrize("n", [1, 5, 8, 13])
def test_weighted_row_sum_matches_scalar_loop(n):
    rng = np.random.default_rng(100 + n)
    width = padded_width(n)
    m = np.zeros((n, width))
    m[:, :n] = rng.normal(size=(n, n))
    coef = rng.normal(size=n)
    out = np.full(width, np.nan)
    _row_sum_all(m, coef, n, out)
    ref = np.zeros(width)
    for w in range(n):
        for q in range(width):
            ref[q] += coef[w] * m[w, q]
    np.testing.assert_array_equal(out, ref)


def test_popcount_against_python():
    import numba

    from gmp.kernels.simd import popcount

    @numba.njit
    def bits_of(values, out):
        for i in range(values.size):
            out[i] = popcount(values[i])

    rng = np.random.default_rng(0)
    values = np.concatenate([np.array([0, 1, -1, np.iinfo(np.int64).min, np.iinfo(np.int64).max], dtype=np.int64),
                             rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=200, dtype=np.int64)])
    out = np.empty(values.size, dtype=np.int64)
    bits_of(values, out)
    assert out.tolist() == [bin(int(v) & (2**64 - 1)).count("1") for v in values]
