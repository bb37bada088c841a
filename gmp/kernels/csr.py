"""CSR gather: the ids of a list of samples, as their own CSR (used by the trainer and the Herald scheduler)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def gather_csr(indptr, indices, samples):  # pragma: no cover - compiled
    """``(ptr, ids)``: int64 CSR of the rows ``samples`` of ``(indptr, indices)``, in the given order.

    >>> import numpy as np
    >>> ptr, ids = gather_csr(np.array([0, 2, 3]), np.array([5, 7, 9]), np.array([1, 0]))
    >>> ptr.tolist(), ids.tolist()
    ([0, 1, 3], [9, 5, 7])
    """
    m = samples.size
    ptr = np.empty(m + 1, dtype=np.int64)
    ptr[0] = 0
    for k in range(m):
        s = samples[k]
        ptr[k + 1] = ptr[k] + indptr[s + 1] - indptr[s]
    out = np.empty(ptr[m], dtype=np.int64)
    for k in range(m):
        a = indptr[samples[k]]
        for j in range(ptr[k + 1] - ptr[k]):
            out[ptr[k] + j] = indices[a + j]
    return ptr, out
