"""The one seed helper: every per-epoch random stream of gmp comes from :func:`epoch_rng`.

``np.random.SeedSequence([seed, epoch])`` derives independent streams per
(seed, epoch) pair; the former ``default_rng(seed + epoch)`` gave (0, 1) and
(1, 0) the same stream. Every schedule and the simulator call
:func:`epoch_permutation`, so two modules that must agree on an epoch's
order call the same function instead of repeating a formula.
"""

from __future__ import annotations

import numpy as np

from .errors import GmpError


def check_seed(seed, *, error: type[GmpError] = GmpError) -> int:
    """``seed`` as an int in ``[0, 2^63)`` (numpy refuses negative seeds; manifests store it as int64, and
    torch's generators take an int64), or an ``error`` naming the parameter."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**63:
        raise error(f"The 'seed' parameter must be an int in [0, 2^63), got {seed!r}; pass e.g. seed=0.")
    return int(seed)


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of ``epoch`` (0-based) of a run seeded with ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(epoch)]))


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """int64 permutation of ``[0, n)``: the seeded order of an epoch over ``n`` items.

    >>> epoch_permutation(4, 0, 0).tolist() == epoch_permutation(4, 0, 0).tolist()
    True
    """
    return epoch_rng(seed, epoch).permutation(int(n)).astype(np.int64)
