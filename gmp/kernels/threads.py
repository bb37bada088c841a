"""Whether compiled parallel kernels may be launched from several Python threads at once.

numba runs ``parallel=True`` kernels on a *threading layer*: TBB or OpenMP, both threadsafe, or its own
``workqueue``, which aborts the whole process ("Numba workqueue threading layer is terminating: Concurrent
access has been detected") when two Python threads launch parallel kernels at the same time. numba falls back
to workqueue where it finds neither TBB nor an OpenMP runtime (a slim container without libgomp, a Mac
without libomp) or where ``NUMBA_THREADING_LAYER=workqueue`` asks for it. gmp launches parallel work from
several threads in two places, ``hybrid``'s multilevel start (its candidate bands, one a thread) and target
mode's full re-partition beside the sweep chain; both ask :func:`concurrent_launches_safe` and run one thing
at a time where it says no (the same results, more wall time).
"""

from __future__ import annotations

import functools

import numba
import numpy as np


@numba.njit(cache=True, parallel=True)
def _start_layer(out):  # pragma: no cover - compiled
    for i in numba.prange(out.size):
        out[i] = i


@functools.cache
def concurrent_launches_safe() -> bool:
    """True where numba's threading layer takes parallel launches from several threads at once (TBB,
    OpenMP); False on ``workqueue``. Starts the layer (a tiny parallel kernel) to ask which it is."""
    _start_layer(np.zeros(2, dtype=np.int64))
    return numba.threading_layer() != "workqueue"
