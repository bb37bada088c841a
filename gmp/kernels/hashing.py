"""SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014).

One copy for all of gmp: the vocabulary's open-addressing slots, the importers'
token hashes (FNV-1a then this finaliser) and the synthetic generator's
counter-based uniforms use these functions.

* :func:`mix64` -- the finaliser (``mix64`` of the paper), numba, inlined;
* :func:`mix64_array` -- the same on a numpy array (uint64 arithmetic wraps);
* :func:`splitmix_uniform` -- one step of the SplitMix64 stream: ``state + GAMMA``,
  then a float64 in [0, 1) from the top 53 bits of its finalised value.
"""

from __future__ import annotations

import numba
import numpy as np

#: the golden-ratio increment of the SplitMix64 stream
GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_TWO_M53 = 1.0 / 9007199254740992.0


@numba.njit(cache=True, nogil=True, inline="always")
def mix64(z):  # pragma: no cover - compiled
    """SplitMix64 finaliser of a uint64."""
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@numba.njit(cache=True, nogil=True, inline="always")
def splitmix_uniform(state):  # pragma: no cover - compiled
    """``(next state, uniform float64 in [0, 1))`` of the SplitMix64 stream."""
    state = state + GAMMA
    return state, np.float64(mix64(state) >> _S11) * _TWO_M53


def mix64_array(keys: np.ndarray) -> np.ndarray:
    """:func:`mix64` of every element (a new uint64 array).

    >>> int(mix64_array(np.array([0], dtype=np.uint64))[0])
    0
    """
    h = np.asarray(keys).astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        h ^= h >> _S30
        h *= _MIX1
        h ^= h >> _S27
        h *= _MIX2
        h ^= h >> _S31
    return h
