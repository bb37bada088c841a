"""The objective HET-GMP's hybrid partitioning descends (SIGMOD'22, Eqs. 3-5), in one place.

``hybrid`` (:mod:`gmp.partition.hybrid`), the incremental re-partitioning
(:mod:`gmp.partition.incremental` and its one-pass plan) and the distributed one
(:mod:`gmp.partition.distributed`) score placements with these pieces::

    J = sum_x sum_w f(count[x, w]) * C'[p(x), w]                  (Eq. 3, soft count f: soft_count_table)
      + alpha/2 * sum_i (samples_i    - samples/N)^2             (Eq. 4, compute; alpha: default_weights)
      + beta/2  * sum_i (primaries_i  - primaries/N)^2           (Eq. 4, memory;  beta:  default_weights)
      + gamma/(2 d) * sum_i (served_i - d)^2                     (Eq. 5, hot spots)

:func:`summarize` evaluates J and the round metrics of a level's state. The marginal costs the
sweeps use live in the kernel modules (``_hybrid_kernels.py``, ``_incremental_kernels.py``,
``distributed/_kernels.py``); the module docstring of :mod:`gmp.partition.hybrid` derives them.
"""

from __future__ import annotations

import numpy as np


def soft_count_table(max_count: int, samples_per_worker: float, batch_size: int) -> np.ndarray:
    """float64 [max_count + 2]: f(c) = (1 - (1 - c/m)^b) * m/b, the expected batches touching an
    embedding used by c of a worker's m samples (b = min(batch_size, m); f is clamped at m/b for c >= m).

    Examples
    --------
    >>> soft_count_table(3, 10.0, 1)      # b = 1: f(c) = c, the plain count of Eq. 3
    array([0., 1., 2., 3., 4.])
    """
    m = max(float(samples_per_worker), 1.0)
    b = float(min(batch_size, m))
    c = np.arange(max_count + 2, dtype=np.float64)
    base = np.clip(1.0 - c / m, 0.0, 1.0)
    return (1.0 - base**b) * (m / b)


def default_weights(num_workers: int, num_samples: int, num_used_embeddings: int) -> tuple[float, float]:
    """The paper's alpha = 100 N / |samples| and beta = 100 N / |embeddings| (used ones)."""
    return 100.0 * num_workers / max(num_samples, 1), 100.0 * num_workers / max(num_used_embeddings, 1)


def imbalance(load: np.ndarray) -> float:
    """max / mean of a load vector (1.0 when empty or all zero)."""
    load = np.asarray(load, dtype=np.float64)
    mean = load.mean() if load.size else 0.0
    return float(load.max() / mean) if mean > 0 else 1.0


def summarize(state, traffic: tuple) -> dict:
    """The objective J (module docstring) and the round metrics of a level's ``state`` (its ``served``,
    ``sample_load``, ``primary_load``, ``alpha``, ``beta``, ``gamma``, ``num_workers``) and its current
    ``traffic`` totals (weighted, reads, remote, unique); shared by the flat and coarse levels."""
    weighted, reads, remote, unique = traffic
    s_dev = state.sample_load - state.sample_load.mean()
    p_dev = state.primary_load - state.primary_load.mean()
    d_mean = float(state.served.mean())
    traffic_pen = ((state.gamma / (2.0 * d_mean)) * float(np.sum((state.served - d_mean) ** 2))
                   if d_mean > 0 else 0.0)
    obj = (float(weighted) + state.alpha / 2.0 * float(s_dev @ s_dev) + state.beta / 2.0 * float(p_dev @ p_dev)
           + traffic_pen)
    return {
        "objective": obj,
        "comm_weighted": float(weighted),
        "expected_remote_reads": float(reads),
        "remote_accesses": int(remote),
        "epoch_unique_remote": int(unique),
        "sample_imbalance": imbalance(state.sample_load),
        "primary_imbalance": imbalance(state.primary_load),
        "traffic_imbalance": imbalance(state.served) if state.num_workers > 1 else 1.0,
    }
