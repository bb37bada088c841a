"""Reference: gmp's model trained by plain PyTorch on one device (CPU or one GPU), no placement.

What one device can do without gmp (issue 33, item 4): every table of the dataset in one fused
``nn.EmbeddingBag(mode="sum", sparse=True)`` (one row per global id, the gmp model's row width),
the gmp model's dense part (``gmp.train.models.make_model``, ``--hidden`` as ``gmp train
--hidden``), and ``torch.optim.SGD`` on both (a sparse gradient for the table: only the rows a
batch read are touched). No id deduplication, slot map, exchange or placement.

Its starting point is gmp's: table rows are ``gmp.train.slots.initial_rows(ids, row_dim, seed)``
(a row depends on ``(seed, id)`` only, so every gmp placement starts from the same rows) and the
dense part is ``make_model(..., seed=seed)``. The loss is gmp's: binary cross-entropy summed over
the batch, divided by the full batch size (a short last batch weighs each sample as a full one,
as ``gmp train`` does at a world of one). Batches follow the peers' naive order
(:func:`peers.common.epoch_order`: one permutation per epoch, cut into consecutive batches).

The dataset is moved to the device once (ids sorted into (sample, field) bags, dense features,
labels); a batch is then cut on the device from its sample numbers, so the host only launches
kernels. Where every sample has exactly one id per field (the criteo presets) the bags are an
``[samples, fields]`` matrix and a step has no host synchronisation at all; with multi-hot fields
one (the batch's id count, for ``repeat_interleave``). Step losses are kept on the device and read
once at the end of the run.

``samples_per_sec`` is training samples over training seconds (batch cutting, forward, backward and
update, the device synchronised at the end of each epoch; evaluation excluded), as ``gmp train``
reports it. On CUDA, ``GMP_DETERMINISTIC`` is honoured as by ``gmp train`` (on unless ``=0``).

    python bench/peers/reference.py --dataset D --batch-size 16384 --embedding-dim 64 --hidden 512,256,128 \\
        --lr 0.05 --out ref.json [--device cuda]
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from peers.common import Data, DenseInput, arguments, epoch_order, test_auc, write_result  # noqa: E402

from gmp.train.models import bce_sum, make_model  # noqa: E402
from gmp.train.slots import initial_rows  # noqa: E402

INIT_BLOCK = 1 << 16  # ids drawn per call of initial_rows (bounded float64 temporaries)


class DeviceData:
    """The dataset on one device, with batches cut there.

    ``bag_ptr[s * F + f]`` .. ``bag_ptr[s * F + f + 1]`` are sample ``s``'s ids of field ``f`` in
    ``bag_ids`` (global ids); ``one_hot``: every bag holds exactly one id, and ``id_matrix`` is
    ``[num_samples, F]``."""

    def __init__(self, data: Data, device: torch.device):
        self.data, self.device = data, device
        self.num_fields = data.num_fields
        owner = np.repeat(np.arange(data.num_samples, dtype=np.int64), np.diff(data.indptr))
        seg = owner * self.num_fields + data.field_of[data.indices]
        order = np.argsort(seg, kind="stable")
        lengths = np.bincount(seg, minlength=data.num_samples * self.num_fields)
        self.one_hot = bool(np.all(lengths == 1))
        ids = torch.as_tensor(data.indices[order])
        if self.one_hot:
            self.id_matrix = ids.view(data.num_samples, self.num_fields).to(device)
        else:
            self.bag_ids = ids.to(device)
            self.bag_ptr = torch.as_tensor(np.concatenate([[0], np.cumsum(lengths)])).to(device)
        self.dense = None if data.dense is None else torch.as_tensor(np.asarray(data.dense, np.float32)).to(device)
        self.labels = torch.as_tensor(np.asarray(data.labels, np.float32)).to(device)
        self._fields = torch.arange(self.num_fields, device=device)

    def batch(self, samples: torch.Tensor):
        """(ids, offsets, dense, labels) of the samples (an int64 tensor on the device)."""
        n = samples.numel()
        if self.one_hot:
            ids = self.id_matrix.index_select(0, samples).reshape(-1)
            offsets = torch.arange(0, n * self.num_fields, device=self.device)
        else:
            seg = (samples.unsqueeze(1) * self.num_fields + self._fields).reshape(-1)
            starts = self.bag_ptr.index_select(0, seg)
            lengths = self.bag_ptr.index_select(0, seg + 1) - starts
            offsets = torch.cumsum(lengths, 0) - lengths
            total = int(lengths.sum())  # the one host synchronisation of a multi-hot batch
            pos = torch.repeat_interleave(starts - offsets, lengths, output_size=total)
            ids = self.bag_ids.index_select(0, pos + torch.arange(total, device=self.device))
        dense = None if self.dense is None else self.dense.index_select(0, samples)
        return ids, offsets, dense, self.labels.index_select(0, samples)


class FusedModel(nn.Module):
    """One fused sum-pooled bag over all tables, then the gmp model's dense part."""

    def __init__(self, ctr, num_embeddings: int, seed: int):
        super().__init__()
        self.ctr = ctr
        self.bag = nn.EmbeddingBag(num_embeddings, ctr.row_dim, mode="sum", sparse=True)
        with torch.no_grad():
            for a in range(0, num_embeddings, INIT_BLOCK):
                ids = np.arange(a, min(a + INIT_BLOCK, num_embeddings), dtype=np.int64)
                self.bag.weight[a:a + ids.size] = torch.as_tensor(initial_rows(ids, ctr.row_dim, seed, np.float32))

    def forward(self, ids, offsets, num_samples: int, dense):
        pooled = self.bag(ids, offsets).view(num_samples, self.ctr.num_fields, self.ctr.row_dim)
        emb = pooled[..., : self.ctr.embedding_dim]
        linear = pooled[..., self.ctr.embedding_dim:].sum(dim=(1, 2)) if self.ctr.has_linear else None
        return self.ctr.logits_from(emb, linear, DenseInput(num_samples, dense))


def parse_hidden(text: str) -> tuple[int, ...]:
    return tuple(int(h) for h in text.split(",") if h.strip())


def deterministic(device: torch.device) -> bool:
    """As ``gmp train``: torch's deterministic algorithms on CUDA unless ``GMP_DETERMINISTIC=0``."""
    if device.type != "cuda" or os.environ.get("GMP_DETERMINISTIC", "1") == "0":
        return False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    return True


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(args) -> dict:
    """Train as ``args`` say; the result record (``losses``: every step's mean loss)."""
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    det = deterministic(device)
    torch.set_num_threads(max(1, args.threads))
    data = Data.load(args.dataset)
    ctr = make_model(args.model, num_fields=data.num_fields, num_dense=data.num_dense,
                     embedding_dim=args.embedding_dim, hidden=parse_hidden(args.hidden), seed=args.seed)
    model = FusedModel(ctr, data.num_embeddings, args.seed).to(device)
    dev = DeviceData(data, device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses, seconds, samples, history = [], 0.0, 0, []

    def evaluate(epoch: int) -> None:
        def logits_of(s):
            ids, offsets, dense, _ = dev.batch(torch.as_tensor(s, device=device))
            return model(ids, offsets, s.size, dense).cpu()
        model.eval()
        auc, logloss = test_auc(data, logits_of)
        model.train()
        history.append({"epoch": epoch, "train_seconds": seconds, "test_auc": auc, "test_logloss": logloss})

    if args.eval_initial:
        evaluate(0)
    for epoch in range(args.epochs):
        sync(device)
        t0 = time.perf_counter()
        order = torch.as_tensor(epoch_order(data, epoch, seed=args.seed), device=device)
        for i, a in enumerate(range(0, data.num_train, args.batch_size)):
            if args.max_steps and i >= args.max_steps:
                break
            part = order[a:a + args.batch_size]
            n = part.numel()
            ids, offsets, dense, labels = dev.batch(part)
            opt.zero_grad(set_to_none=True)
            loss = bce_sum(model(ids, offsets, n, dense), labels) / args.batch_size
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            samples += n
        sync(device)
        seconds += time.perf_counter() - t0
        evaluate(epoch + 1)
    return {"method": "reference", "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "deterministic": det, "one_hot": dev.one_hot, "model": args.model, "hidden": args.hidden,
            "embedding_dim": args.embedding_dim, "batch_size": args.batch_size, "lr": args.lr,
            "samples": samples, "steps": len(losses), "train_seconds": seconds,
            "samples_per_sec": samples / seconds if seconds else None, "epochs": history,
            "test_auc": history[-1]["test_auc"] if history else None,
            "test_logloss": history[-1]["test_logloss"] if history else None,
            "losses": torch.stack(losses).double().cpu().tolist() if losses else []}


def parser():
    ap = arguments(__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda when present)")
    ap.add_argument("--hidden", default="128,64", help="widths of the dense layers, as gmp train --hidden")
    return ap


def main() -> None:
    args = parser().parse_args()
    write_result(args.out, run(args))


if __name__ == "__main__":
    main()
