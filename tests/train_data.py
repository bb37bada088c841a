"""Helpers for the trainer tests: a small random CTR dataset and a plain-PyTorch reference trainer."""

from __future__ import annotations

import numpy as np
import torch

from gmp.datasets.format import FieldInfo, load_dataset, write_dataset
from gmp.train.models import Batch, bce_sum, make_model
from gmp.constants import ADAGRAD_EPS
from gmp.train.store import initial_rows
from gmp.placement import Placement
from gmp.train import TrainConfig


def make_ctr_dataset(out, *, num_samples=240, field_sizes=(7, 11, 5), num_dense=2, multi=True, test_fraction=0.25,
                     seed=0):
    """A random dataset with skewed ids, optional multi-hot last field, dense features; returns its path."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(field_sizes)])
    rows = []
    for _ in range(num_samples):
        ids = []
        for f, size in enumerate(field_sizes):
            k = 1 + (rng.integers(0, 3) if (multi and f == len(field_sizes) - 1) else 0)
            vals = np.unique(np.minimum(rng.zipf(1.6, size=k) - 1, size - 1))
            ids.extend(int(offsets[f] + v) for v in vals)
        rows.append(sorted(ids))
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.array([i for r in rows for i in r])
    labels = (rng.random(num_samples) < 0.3).astype(np.float32)
    dense = rng.normal(size=(num_samples, num_dense)).astype(np.float32) * 3 if num_dense else None
    fields = [FieldInfo(f"I{j}", "dense", 0, None, column=j) for j in range(num_dense)]
    fields += [FieldInfo(f"C{f}", "multi" if (multi and f == len(field_sizes) - 1) else "categorical", int(s),
                         int(offsets[f])) for f, s in enumerate(field_sizes)]
    write_dataset(out, indptr=indptr, indices=indices, labels=labels, dense=dense, fields=fields,
                  num_embeddings=int(offsets[-1]), source={"format": "test"}, test_fraction=test_fraction)
    return out


def reference_train(dataset_path, global_batches_per_epoch, *, model="wdl", embedding_dim=4, optimizer="sgd",
                    lr=0.1, seed=0, hidden=(8,), dtype=torch.float64, full_batch=0):
    """Plain PyTorch on one full embedding table: BCE summed over each global batch and divided by its
    size, or by ``full_batch`` (N x B) when the batch is smaller (a partial step weighs each sample as
    a full one), torch.optim step.

    ``global_batches_per_epoch`` is a list (one per epoch) of lists of sample-id arrays.
    Returns (table float64 [num_embeddings, row_dim], model).
    """
    ds = load_dataset(dataset_path)
    f_of = ds.field_of_embedding().astype(np.int64)
    num_fields = len(ds.categorical_fields)
    net = make_model(model, num_fields=num_fields, num_dense=ds.num_dense, embedding_dim=embedding_dim,
                     hidden=hidden, seed=seed, dtype=dtype)
    table = torch.nn.Parameter(torch.as_tensor(initial_rows(np.arange(ds.num_embeddings), net.row_dim, seed),
                                               dtype=dtype))
    params = [table] + list(net.parameters())
    opt = (torch.optim.SGD(params, lr=lr) if optimizer == "sgd"
           else torch.optim.Adagrad(params, lr=lr, eps=ADAGRAD_EPS))
    for batches in global_batches_per_epoch:
        for samples in batches:
            samples = np.asarray(samples, dtype=np.int64)
            if samples.size == 0:
                continue
            ids, seg = [], []
            for k, s in enumerate(samples):
                for e in ds.indices[ds.indptr[s]:ds.indptr[s + 1]]:
                    ids.append(int(e))
                    seg.append(k * num_fields + int(f_of[e]))
            dense = torch.as_tensor(np.asarray(ds.dense[samples])) if ds.num_dense else None
            batch = Batch(samples.size, torch.tensor(ids), torch.tensor(seg), dense,
                          torch.as_tensor(np.asarray(ds.labels[samples])))
            opt.zero_grad()
            loss = bce_sum(net(table, batch), batch.labels) / max(samples.size, full_batch)
            loss.backward()
            opt.step()
    return table.detach().cpu().numpy().astype(np.float64), net


def assert_rank_rows_match(directory, num_ranks, table, num_embeddings, dense=None):
    """The ``rank{r}.npz`` files tests/dist_worker.py writes (each rank's primary ids and rows)
    together cover every embedding once and equal ``table`` (the reference model's rows); with
    ``dense``, every rank's dense parameters equal it too."""
    seen = 0
    for r in range(num_ranks):
        z = np.load(f"{directory}/rank{r}.npz")
        np.testing.assert_allclose(z["rows"], table[z["ids"]], rtol=1e-9, atol=1e-12)
        if dense is not None:
            np.testing.assert_allclose(z["dense"], dense, rtol=1e-9, atol=1e-12)
        seen += z["ids"].size
    assert seen == num_embeddings


def save_placement_npz(path, placement):
    """A placement as the .npz that the torchrun test workers read (:func:`load_placement_npz`)."""
    np.savez(path, num_workers=placement.num_workers, sample_worker=placement.sample_worker,
             embedding_primary=placement.embedding_primary, secondary_indptr=placement.secondary_indptr,
             secondary_workers=placement.secondary_workers)


def load_placement_npz(path):
    """The placement :func:`save_placement_npz` wrote (what the torchrun test workers read)."""
    z = np.load(path)
    return Placement(int(z["num_workers"]), z["sample_worker"], z["embedding_primary"], z["secondary_indptr"],
                     z["secondary_workers"])


def make_config(**kw):
    """TrainConfig from keyword arguments, ``schedule_options={...}`` given as the HeraldOptions
    of ``--schedule herald`` (empty: the defaults)."""
    from gmp.train import TrainConfig
    from gmp.train.herald import HeraldOptions

    opts = kw.pop("schedule_options", None)
    if opts:
        kw["herald"] = HeraldOptions(**opts)
    if isinstance(kw.get("tiers"), dict):
        from gmp.train.tiers import TierOptions

        kw["tiers"] = TierOptions(**kw["tiers"])
    return TrainConfig(**kw)


def runtime_scheduler(indptr, indices, placement, *, batch_size, assignment="herald", num_trainers=None, check=True,
                      **options):
    """A RuntimeScheduler with Herald's own replica model unless told otherwise (on-demand
    synchronisation, writable copies, no cache): the engine's former keyword defaults."""
    from gmp.train.herald import HeraldOptions, RuntimeScheduler

    opts = dict(on_demand=True, read_only_replicas=False)
    opts.update(options)
    return RuntimeScheduler(indptr, indices, placement, HeraldOptions(**opts), batch_size=batch_size,
                            assignment=assignment, num_trainers=num_trainers, check=check)


def simulate_with(indptr, indices, placement, *, num_train, schedule="herald", on_demand=None, cache_rows=None,
                  cache_policy=None, lookahead=None, read_only_replicas=None, **kw):
    """gmp.simulate.simulate with the replica options as keywords (None: the simulator's defaults)."""
    from gmp.simulate import active_rows, simulate, simulator_options

    options = simulator_options(schedule, active_rows(indptr, indices, num_train), on_demand=on_demand,
                                cache_rows=cache_rows, cache_policy=cache_policy, lookahead=lookahead,
                                read_only_replicas=read_only_replicas)
    return simulate(indptr, indices, placement, num_train=num_train, schedule=schedule, options=options, **kw)


def random_placement(ds, n, *, secondaries=0.0, seed=1):
    """Samples and primaries on random workers; each row also on every other worker with probability ``secondaries``."""
    rng = np.random.default_rng(seed)
    pl = Placement.edge_cut(n, rng.integers(0, n, ds.num_samples), rng.integers(0, n, ds.num_embeddings))
    if secondaries and n > 1:
        sec = [[w for w in range(n) if w != pl.embedding_primary[e] and rng.random() < secondaries]
               for e in range(ds.num_embeddings)]
        indptr = np.cumsum([0] + [len(s) for s in sec])
        pl = pl.with_secondaries(indptr, np.array([w for s in sec for w in s], dtype=np.int32))
    pl.check(num_samples=ds.num_samples, num_embeddings=ds.num_embeddings)
    return pl


def make_two_worker_run(root):
    """``(dataset, manifest)`` under ``root``: 64 samples with fields of 5 and 7 values, placed at random
    (seed 0) on 2 workers; the small run of the checkpoint and claim tests."""
    from gmp.manifest import write_manifest
    from gmp.topology import homogeneous

    path = make_ctr_dataset(root / "ds", num_samples=64, field_sizes=(5, 7))
    ds = load_dataset(path)
    rng = np.random.default_rng(0)
    pl = Placement.edge_cut(2, rng.integers(0, 2, ds.num_samples), rng.integers(0, 2, ds.num_embeddings), method="t")
    man = root / "man"
    write_manifest(man, pl, dataset_sha256=ds.sha256, num_samples=ds.num_samples, num_embeddings=ds.num_embeddings,
                   topology=homogeneous(2))
    return path, man


#: the settings of :func:`make_two_worker_run`'s run: Wide & Deep, batch 8, rows of width 2, one epoch
TWO_WORKER_CONFIG = TrainConfig(model="wdl", batch_size=8, epochs=1, optimizer="adagrad", embedding_dim=2,
                                hidden=(4,))


def train_two_worker_run(setup, ckdir, *, epochs=1, resume=False, manifest=None, **kw):
    """:func:`gmp.train.run.train` on ``setup`` (:func:`make_two_worker_run`'s ``(dataset, manifest)``; ``manifest``
    replaces its manifest) with :data:`TWO_WORKER_CONFIG` for ``epochs`` epochs; ``kw`` as ``train`` takes them."""
    import dataclasses

    from gmp.train.run import train

    path, man = setup
    return train(path, manifest or man, dataclasses.replace(TWO_WORKER_CONFIG, epochs=epochs), checkpoint_dir=ckdir,
                 resume=resume, **kw)
