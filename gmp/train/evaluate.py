"""Evaluation: AUC and log loss of the current primaries on the test split.

Protocol-independent: every non-primary row is read from its primary
(``read_rows`` with ``staleness = -1``, uncounted, replicas untouched), each
worker scoring a share of the test split; the scores are gathered in sample
order and scored once (:mod:`gmp.scoring`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..scoring import logloss_from_logits, roc_auc
from .reads import read_rows
from .steps import prepare


def evaluate(ctx) -> dict[str, float]:
    """``{"test_auc", "test_logloss"}`` of the trainer whose :class:`~gmp.train.context.StepContext` is
    ``ctx`` (nan without test samples)."""
    test = np.arange(ctx.data.num_train, ctx.data.num_samples, dtype=np.int64)
    if test.size == 0:
        return {"test_auc": float("nan"), "test_logloss": float("nan")}
    n = ctx.num_workers
    chunk = ctx.eval_batch_size * n
    logits = [[] for _ in ctx.stores]
    sample_ids = [[] for _ in ctx.stores]
    ctx.model.eval()
    with ctx.engine.not_counted(), torch.no_grad():
        for start in range(0, test.size, chunk):
            parts = np.array_split(test[start:start + chunk], n)
            ws = [prepare(ctx, li, parts[w], training=False) for li, w in enumerate(ctx.engine.local_workers)]
            read_rows(ctx, ws, check_secondaries=True, staleness=-1.0, refresh=False)
            for li, s in enumerate(ws):
                if s.samples.size:
                    logits[li].append(ctx.model(s.rows, s.ready.batch).double().cpu().numpy())
                    sample_ids[li].append(s.samples.astype(np.float64))
    ctx.model.train()
    mine_l = [np.concatenate(x) if x else np.zeros(0) for x in logits]
    mine_s = [np.concatenate(x) if x else np.zeros(0) for x in sample_ids]
    all_l = np.concatenate(ctx.engine.gather(mine_l))
    all_s = np.concatenate(ctx.engine.gather(mine_s)).astype(np.int64)
    order = np.argsort(all_s, kind="stable")
    z = all_l[order]
    y = np.asarray(ctx.data.labels[all_s[order]], dtype=np.float64)
    return {"test_auc": roc_auc(y, z), "test_logloss": logloss_from_logits(y, z)}
