"""Checkpoints: save after every epoch (and on interrupt), resume exactly.

Layout (``--checkpoint-dir C``)::

    C/
    └── latest/
        ├── checkpoint.json     format "gmp.checkpoint", schema_version, position, config, fingerprints
        ├── trainer.pt          dense model + dense optimizer state, epoch accumulators,
        │                       history, schedule state, torch/numpy RNG states
        └── worker-00000.pt     one per worker: its rows, clocks, Adagrad state,
                                its counters and byte counters for the running epoch

Example ``checkpoint.json``::

    {"format": "gmp.checkpoint", "schema_version": 1, "epoch": 1, "step": 0,
     "num_workers": 4, "dataset_sha256": "9f2c...", "placement_sha256": "51ab...",
     "config": {"model": "wdl", "embedding_dim": 16, ...}, "created": "2026-11-22T01:00:00+00:00"}

``epoch``/``step`` is the next step to run (0-based epoch). Every worker
writes its own file into a temporary sibling directory; after a barrier the
main process renames it to ``latest`` (the previous one is removed only
then), so a crash never leaves a ``latest`` that is half written. Under
``torchrun`` across machines ``C`` must be on a shared filesystem.

Resuming checks that the dataset, the placement and every setting that
changes the trajectory are the same (only ``epochs`` and ``log_every`` may
differ) and refuses otherwise with a one-line error.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import __version__
from .._io import hash_arrays, read_versioned_json, write_json
from ..errors import TrainingError
from ..placement import Placement

FORMAT = "gmp.checkpoint"
SCHEMA_VERSION = 1
#: settings that may change between the interrupted run and --resume (where the rows live does not
#: change the trajectory: gmp.train.tiers)
MUTABLE = ("epochs", "log_every", "tiers")
_FIX = "start without --resume or point --checkpoint-dir elsewhere."


def placement_sha256(placement: Placement) -> str:
    return hash_arrays([("sample_worker", placement.sample_worker), ("embedding_primary", placement.embedding_primary),
                        ("secondary_indptr", placement.secondary_indptr),
                        ("secondary_workers", placement.secondary_workers)])


def save_checkpoint(trainer, directory: str | os.PathLike, *, dataset_sha256: str, placement_sha: str) -> Path:
    """Write ``directory/latest`` (collective: every process calls it)."""
    engine = trainer.engine
    directory = Path(directory)
    tmp = directory / f".tmp-{trainer.epoch}-{trainer.step_in_epoch}"
    if engine.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    engine.barrier()
    for li, (w, store) in enumerate(zip(engine.local_workers, trainer.stores)):
        torch.save({"store": store.state_dict(), "counters": trainer.counters[li].copy(),
                    "bytes": engine.bytes[li].copy(), "acc": dict(trainer.acc)}, tmp / f"worker-{w:05d}.pt")
    if engine.is_main:
        torch.save({"model": trainer.model.state_dict(), "dense_opt": trainer.dense_opt.state_dict(),
                    "history": list(trainer.history),
                    "schedule": trainer.schedule.state_dict(), "torch_rng": torch.random.get_rng_state(),
                    "numpy_rng": np.random.get_state()}, tmp / "trainer.pt")
        write_json(tmp / "checkpoint.json", {
            "format": FORMAT, "schema_version": SCHEMA_VERSION, "gmp_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "epoch": trainer.epoch, "step": trainer.step_in_epoch, "num_workers": trainer.num_workers,
            "dataset_sha256": dataset_sha256, "placement_sha256": placement_sha,
            "config": trainer.config.to_json()})
    engine.barrier()
    latest = directory / "latest"
    if engine.is_main:
        old = directory / ".old"
        shutil.rmtree(old, ignore_errors=True)
        if latest.exists():
            os.replace(latest, old)
        os.replace(tmp, latest)
        shutil.rmtree(old, ignore_errors=True)
    engine.barrier()
    return latest


def read_checkpoint_header(directory: str | os.PathLike) -> dict[str, Any]:
    path = Path(directory) / "latest" / "checkpoint.json"
    return read_versioned_json(path, fmt=FORMAT, max_version=SCHEMA_VERSION, error=TrainingError, fix=_FIX)


def load_checkpoint(trainer, directory: str | os.PathLike, *, dataset_sha256: str, placement_sha: str) -> dict:
    """Restore ``trainer`` from ``directory/latest``; returns the header."""
    head = read_checkpoint_header(directory)
    latest = Path(directory) / "latest"
    if head["dataset_sha256"] != dataset_sha256:
        raise TrainingError(f"{latest} was made for another dataset (sha256 {head['dataset_sha256'][:12]}…); {_FIX}")
    if head["placement_sha256"] != placement_sha or int(head["num_workers"]) != trainer.num_workers:
        raise TrainingError(f"{latest} was made with another manifest; resume with the same --manifest or {_FIX}")
    now = trainer.config.to_json()
    diff = [k for k in now if k not in MUTABLE and head["config"].get(k) != now[k]]
    if diff:
        k = diff[0]
        raise TrainingError(f"{latest} was made with {k}={head['config'].get(k)!r}, this run has {k}={now[k]!r}; "
                            f"resume with the same settings or {_FIX}")
    try:
        for li, w in enumerate(trainer.engine.local_workers):
            state = torch.load(latest / f"worker-{w:05d}.pt", weights_only=False)
            trainer.stores[li].load_state_dict(state["store"])
            trainer.counters[li] = state["counters"]
            trainer.engine.bytes[li] = state["bytes"]
            trainer.acc = dict(state["acc"])  # loss_sum is per process; the rest is global
        main = torch.load(latest / "trainer.pt", weights_only=False)
    except (OSError, RuntimeError, KeyError, EOFError) as exc:
        raise TrainingError(f"{latest} is incomplete or corrupt ({exc}); {_FIX}") from None
    trainer.model.load_state_dict(main["model"])
    trainer.dense_opt.load_state_dict(main["dense_opt"])
    trainer.history = list(main["history"])
    trainer.schedule.load_state_dict(main["schedule"])
    torch.random.set_rng_state(main["torch_rng"])
    np.random.set_state(main["numpy_rng"])
    trainer.epoch = int(head["epoch"])
    trainer.step_in_epoch = int(head["step"])
    return head
