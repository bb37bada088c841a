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
from .steps import make_batch, prepare, read_rows


def evaluate(tr) -> dict[str, float]:
    """``{"test_auc", "test_logloss"}`` of trainer ``tr`` (nan without test samples)."""
    test = np.arange(tr.data.num_train, tr.data.num_samples, dtype=np.int64)
    if test.size == 0:
        return {"test_auc": float("nan"), "test_logloss": float("nan")}
    n = tr.num_workers
    chunk = tr.config.eval_batch_size * n
    logits = [[] for _ in tr.stores]
    sample_ids = [[] for _ in tr.stores]
    tr.model.eval()
    with tr.engine.not_counted(), torch.no_grad():
        for start in range(0, test.size, chunk):
            parts = np.array_split(test[start:start + chunk], n)
            ws = [prepare(tr, li, parts[w]) for li, w in enumerate(tr.engine.local_workers)]
            read_rows(tr, ws, check_secondaries=True, staleness=-1.0, refresh=False)
            for li, s in enumerate(ws):
                if s.samples.size:
                    batch = make_batch(tr, s, s.rows.device)
                    logits[li].append(tr.model(s.rows, batch).double().cpu().numpy())
                    sample_ids[li].append(s.samples.astype(np.float64))
    tr.model.train()
    mine_l = [np.concatenate(x) if x else np.zeros(0) for x in logits]
    mine_s = [np.concatenate(x) if x else np.zeros(0) for x in sample_ids]
    all_l = np.concatenate(tr.engine.gather(mine_l))
    all_s = np.concatenate(tr.engine.gather(mine_s)).astype(np.int64)
    order = np.argsort(all_s, kind="stable")
    z = all_l[order]
    y = np.asarray(tr.data.labels[all_s[order]], dtype=np.float64)
    return {"test_auc": roc_auc(y, z), "test_logloss": logloss_from_logits(y, z)}
