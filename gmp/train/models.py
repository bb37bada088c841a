"""CTR models: Wide & Deep, Deep & Cross (DCN) and DeepFM.

The embedding rows live outside the model (in the per-worker
:class:`~gmp.train.store.EmbeddingStore`); a model receives, for one batch,
the distinct rows it needs as a leaf tensor and the batch's structure, so its
gradient with respect to those rows is what the trainer pushes to primaries.

A row is ``embedding_dim`` wide, plus one extra column — the id's weight in
the linear ("wide" / FM first-order) part — for ``wdl`` and ``deepfm``
(:attr:`CTRModel.row_dim`). Ids of one field in one sample are sum-pooled
(multi-hot fields), giving ``[batch, num_fields, embedding_dim]``; a field
with no id in a sample contributes zeros.

Dense features enter the deep part after ``sign(x) * log1p(|x|)``.

* ``wdl``:    logit = bias + sum of wide weights + MLP([fields..., dense])
* ``dcn``:    x0 = [fields..., dense]; cross layers x_{l+1} = x0 * (x_l . w_l) + b_l + x_l
              (Wang et al. 2017, Eq. 1) and an MLP in parallel; logit = linear([x_L, mlp])
* ``deepfm``: logit = bias + first order + 0.5 * sum_d((sum_f v_f)^2 - sum_f v_f^2) + MLP(...)

Loss: binary cross-entropy with logits, summed per sample; the trainer divides
by the global batch size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..errors import TrainingError

MODELS = ("wdl", "dcn", "deepfm")


@dataclass
class Batch:
    """One worker's batch in the form models consume.

    ``entry_row[e]`` indexes the distinct-row tensor; ``entry_seg[e]`` is
    ``sample * num_fields + field`` of entry ``e``.
    """

    num_samples: int
    entry_row: torch.Tensor  # int64 [num_entries]
    entry_seg: torch.Tensor | None  # int64 [num_entries]; None: entry e is segment e (one id per field)
    dense: torch.Tensor | None  # [num_samples, num_dense]
    labels: torch.Tensor  # [num_samples]


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class CTRModel(nn.Module):
    """Base: pooling of rows into fields; subclasses define :meth:`logits_from`."""

    has_linear = False

    @classmethod
    def row_width(cls, embedding_dim: int) -> int:
        """The width of the model's embedding rows: ``embedding_dim``, plus the linear weight of a model with a
        first-order part."""
        return int(embedding_dim) + (1 if cls.has_linear else 0)

    def __init__(self, num_fields: int, num_dense: int, embedding_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.num_fields = int(num_fields)
        self.num_dense = int(num_dense)
        self.embedding_dim = int(embedding_dim)
        self.row_dim = self.row_width(self.embedding_dim)
        self.deep_in = self.num_fields * self.embedding_dim + self.num_dense
        self.hidden = tuple(int(h) for h in hidden)

    def pool(self, rows: torch.Tensor, batch: Batch) -> torch.Tensor:
        """[batch, num_fields, row_dim] sum-pooled rows."""
        picked = rows.index_select(0, batch.entry_row)
        if batch.entry_seg is None:  # exactly one id per field, in field order: nothing to pool
            return picked.view(batch.num_samples, self.num_fields, self.row_dim)
        out = rows.new_zeros(batch.num_samples * self.num_fields, self.row_dim).index_add(0, batch.entry_seg, picked)
        return out.view(batch.num_samples, self.num_fields, self.row_dim)

    def deep_input(self, emb: torch.Tensor, batch: Batch) -> torch.Tensor:
        x = emb.reshape(batch.num_samples, -1)
        if self.num_dense:
            d = batch.dense.to(x.dtype)
            x = torch.cat([x, torch.sign(d) * torch.log1p(d.abs())], dim=1)
        return x

    def forward(self, rows: torch.Tensor, batch: Batch) -> torch.Tensor:
        pooled = self.pool(rows, batch)
        emb = pooled[..., : self.embedding_dim]
        linear = pooled[..., self.embedding_dim:].sum(dim=(1, 2)) if self.has_linear else None
        return self.logits_from(emb, linear, batch)

    def logits_from(self, emb, linear, batch):  # pragma: no cover - abstract
        raise NotImplementedError


class _LinearAndDeep(CTRModel):
    """A linear (first-order) part, a bias and an MLP over the deep input: the layers Wide&Deep and DeepFM
    share (built in the same order, so the same seed initialises the same weights)."""

    has_linear = True

    def __init__(self, num_fields, num_dense, embedding_dim, hidden=(128, 64)):
        super().__init__(num_fields, num_dense, embedding_dim, hidden)
        self.mlp = _mlp([self.deep_in, *self.hidden])
        self.out = nn.Linear(self.hidden[-1] if self.hidden else self.deep_in, 1)
        self.bias = nn.Parameter(torch.zeros(()))


class WideDeep(_LinearAndDeep):
    def logits_from(self, emb, linear, batch):
        return self.bias + linear + self.out(self.mlp(self.deep_input(emb, batch))).squeeze(1)


class DCN(CTRModel):
    has_linear = False

    def __init__(self, num_fields, num_dense, embedding_dim, hidden=(128, 64), num_cross: int = 3):
        super().__init__(num_fields, num_dense, embedding_dim, hidden)
        d = self.deep_in
        self.cross_w = nn.ParameterList([nn.Parameter(torch.randn(d) / d ** 0.5) for _ in range(num_cross)])
        self.cross_b = nn.ParameterList([nn.Parameter(torch.zeros(d)) for _ in range(num_cross)])
        self.mlp = _mlp([d, *self.hidden])
        self.out = nn.Linear(d + (self.hidden[-1] if self.hidden else d), 1)

    def logits_from(self, emb, linear, batch):
        x0 = self.deep_input(emb, batch)
        x = x0
        for w, b in zip(self.cross_w, self.cross_b):
            x = x0 * (x @ w).unsqueeze(1) + b + x  # DCN cross layer (Wang et al. 2017, Eq. 1)
        return self.out(torch.cat([x, self.mlp(x0)], dim=1)).squeeze(1)


class DeepFM(_LinearAndDeep):
    def logits_from(self, emb, linear, batch):
        s = emb.sum(dim=1)
        fm = 0.5 * (s * s - (emb * emb).sum(dim=1)).sum(dim=1)  # FM second order (Rendle 2010, Eq. 1)
        return self.bias + linear + fm + self.out(self.mlp(self.deep_input(emb, batch))).squeeze(1)


_CLASSES = {"wdl": WideDeep, "dcn": DCN, "deepfm": DeepFM}


def model_row_dim(name: str, embedding_dim: int) -> int:
    """The width of model ``name``'s embedding rows (:meth:`CTRModel.row_width`), before any model is built."""
    return _CLASSES[name].row_width(embedding_dim)


def make_model(name: str, *, num_fields: int, num_dense: int, embedding_dim: int,
               hidden: tuple[int, ...] = (128, 64), seed: int = 0,
               dtype: torch.dtype = torch.float32) -> CTRModel:
    """Build a model with parameters drawn from ``torch.Generator`` seeded by ``seed``
    (identical on every rank)."""
    if name not in _CLASSES:
        raise TrainingError(f"The 'model' parameter must be one of {list(MODELS)}, got {name!r}.")
    if embedding_dim < 1:
        raise TrainingError(f"The 'embedding_dim' parameter must be an int >= 1, got {embedding_dim!r}.")
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = _CLASSES[name](num_fields, num_dense, embedding_dim, hidden)
    finally:
        torch.random.set_rng_state(state)
    return model.to(dtype)


def bce_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum over samples of the binary cross-entropy with logits."""
    return nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), reduction="sum")
