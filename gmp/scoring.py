"""Scores of a CTR prediction: ROC AUC and log loss (one implementation for the trainer's
evaluation and the synthetic generator's Bayes AUC)."""

from __future__ import annotations

import numpy as np


def roc_auc(labels, scores) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney U) formula, ties averaged; nan with one class only.

    >>> roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    0.75
    """
    from scipy.stats import rankdata

    labels = np.asarray(labels) > 0.5
    num_pos = int(labels.sum())
    num_neg = labels.size - num_pos
    if num_pos == 0 or num_neg == 0:
        return float("nan")
    ranks = rankdata(np.asarray(scores, dtype=np.float64))
    return float((ranks[labels].sum() - num_pos * (num_pos + 1) / 2.0) / (num_pos * num_neg))


def logloss_from_logits(labels, logits) -> float:
    """Mean binary cross-entropy of logits ``z``: ``log(1 + e^z) - y z``, computed stably."""
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    return float(np.mean(np.logaddexp(0.0, z) - y * z))
