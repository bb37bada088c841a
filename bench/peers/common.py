"""What the peer trainers share: the epoch order, batches in the layouts the peers
consume, the gmp model's dense part, evaluation, and the result record.

Batches follow Herald's *naive* data-parallel order (the order a peer would use):
each epoch the training range is permuted by ``SeedSequence([seed, epoch])``, cut
into global batches of ``world * batch_size`` and split into ``world`` equal
consecutive parts; rank ``r`` trains on part ``r``. Loss: binary cross-entropy
summed over the rank's samples and divided by the global batch size, as ``gmp
train`` does, so every peer optimises the mean loss of the global batch.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from gmp.datasets.format import load_dataset


def arguments(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", default="dcn", help="gmp model whose dense part is used (wdl | dcn | deepfm)")
    ap.add_argument("--batch-size", type=int, default=2048, help="samples per rank per step")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (embeddings and dense)")
    ap.add_argument("--embedding-dim", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many steps (0 = all)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    ap.add_argument("--eval-initial", action="store_true",
                    help="also evaluate the untrained model (history epoch 0, 0 training seconds: the time-to-AUC "
                         "interpolation starts there)")
    ap.add_argument("--out", required=True, help="JSON result (rank 0 writes it)")
    return ap


@dataclass
class Data:
    """The dataset as numpy arrays, with each id's field and field-local id."""

    indptr: np.ndarray
    indices: np.ndarray
    labels: np.ndarray
    dense: np.ndarray | None
    num_train: int
    num_samples: int
    num_embeddings: int
    field_sizes: list[int]
    field_names: list[str]
    field_of: np.ndarray  # int64 [num_embeddings]
    local_id: np.ndarray  # int64 [num_embeddings]: id - offset of its field

    @classmethod
    def load(cls, path: str) -> "Data":
        ds = load_dataset(path)
        cats = ds.categorical_fields
        field_of = ds.field_of_embedding().astype(np.int64)
        local_id = np.zeros(ds.num_embeddings, dtype=np.int64)
        for f in cats:  # a field's ids may be several ranges (datasets made with --extend)
            local_id[f.ids()] = np.arange(f.num_values, dtype=np.int64)
        return cls(np.asarray(ds.indptr), np.asarray(ds.indices).astype(np.int64), np.asarray(ds.labels),
                   None if ds.dense is None else np.asarray(ds.dense), ds.num_train, ds.num_samples,
                   ds.num_embeddings, [f.num_values for f in cats], [f.name for f in cats], field_of,
                   local_id)

    @property
    def num_fields(self) -> int:
        return len(self.field_sizes)

    @property
    def num_dense(self) -> int:
        return 0 if self.dense is None else self.dense.shape[1]

    def gather(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(sample position of each id, id) of the given samples, in sample order."""
        lengths = self.indptr[samples + 1] - self.indptr[samples]
        starts = np.repeat(self.indptr[samples] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        pos = np.arange(int(lengths.sum()), dtype=np.int64)
        return np.repeat(np.arange(samples.size), lengths), self.indices[starts + pos]

    def bag_batch(self, samples: np.ndarray):
        """(global ids, offsets of the sample x field bags) for one ``nn.EmbeddingBag``."""
        owner, ids = self.gather(samples)
        seg = owner * self.num_fields + self.field_of[ids]
        order = np.argsort(seg, kind="stable")
        ids, seg = ids[order], seg[order]
        offsets = np.searchsorted(seg, np.arange(samples.size * self.num_fields))
        return torch.as_tensor(ids), torch.as_tensor(offsets)

    def keyed_batch(self, samples: np.ndarray):
        """(field-local ids, lengths) in TorchRec's key-major KeyedJaggedTensor layout."""
        owner, ids = self.gather(samples)
        seg = self.field_of[ids] * samples.size + owner
        order = np.argsort(seg, kind="stable")
        lengths = np.bincount(seg, minlength=self.num_fields * samples.size)
        return torch.as_tensor(self.local_id[ids[order]]), torch.as_tensor(lengths)

    def dense_batch(self, samples: np.ndarray):
        return None if self.dense is None else torch.as_tensor(self.dense[samples])

    def label_batch(self, samples: np.ndarray):
        return torch.as_tensor(self.labels[samples])


def epoch_order(data: Data, epoch: int, *, seed: int) -> np.ndarray:
    """The epoch's permutation of the training samples (the naive order)."""
    return np.random.default_rng(np.random.SeedSequence([seed, epoch])).permutation(data.num_train)


def epoch_batches(data: Data, epoch: int, *, seed: int, world: int, batch_size: int, rank: int):
    """Rank ``rank``'s part of every global batch of the epoch (the naive order)."""
    order = epoch_order(data, epoch, seed=seed)
    global_batch = world * batch_size
    for a in range(0, order.size, global_batch):
        g = order[a:a + global_batch]
        yield g.size, np.array_split(g, world)[rank]


@dataclass
class Progress:
    """Training seconds (batch building included), samples and steps so far."""

    seconds: float = 0.0
    samples: int = 0
    steps: int = 0


def timed_steps(data: Data, args, epoch: int, *, world: int, rank: int, progress: Progress):
    """The rank's ``(global batch size, its samples)`` for each step of the epoch (at most
    ``args.max_steps``); the time between one yield and the next counts as training time."""
    for i, (global_size, mine) in enumerate(epoch_batches(data, epoch, seed=args.seed, world=world,
                                                           batch_size=args.batch_size, rank=rank)):
        if args.max_steps and i >= args.max_steps:
            return
        t0 = time.perf_counter()
        yield global_size, mine
        progress.seconds += time.perf_counter() - t0
        progress.samples += global_size
        progress.steps += 1


class DenseInput:
    """What a gmp model's ``logits_from`` reads of a batch."""

    def __init__(self, num_samples: int, dense):
        self.num_samples, self.dense = num_samples, dense


def test_auc(data: Data, logits_of, chunk: int = 8192) -> tuple[float, float]:
    """(AUC, logloss) on the test range; ``logits_of(samples)`` gives float logits."""
    from sklearn.metrics import roc_auc_score

    test = np.arange(data.num_train, data.num_samples)
    with torch.no_grad():
        z = np.concatenate([logits_of(test[a:a + chunk]).double().numpy() for a in range(0, test.size, chunk)])
    y = data.labels[test].astype(np.float64)
    return float(roc_auc_score(y, z)), float(np.mean(np.logaddexp(0, z) - y * z))


def start(args):
    """Threads, the gloo process group, the data and the gmp model: ``(rank, world, data, ctr)``."""
    import torch.distributed as dist

    from gmp.train.models import make_model

    torch.set_num_threads(max(1, args.threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, args.threads)))
    dist.init_process_group("gloo")
    data = Data.load(args.dataset)
    ctr = make_model(args.model, num_fields=data.num_fields, num_dense=data.num_dense,
                     embedding_dim=args.embedding_dim, seed=args.seed)
    return dist.get_rank(), dist.get_world_size(), data, ctr


def write_result(path: str, result: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)
