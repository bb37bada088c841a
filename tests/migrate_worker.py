"""Run under torchrun by tests/test_migrate.py: train one day with the distributed engine and
save a checkpoint; with ``resume``, first migrate from the previous day's checkpoint.

usage: torchrun ... tests/migrate_worker.py DATASET PLACEMENT.npz CKPT_DIR OUT_DIR CONFIG_JSON
       [resume [CREATED.npy [REFUSED.npy]]]

Writes OUT_DIR/rank{r}.npz (each rank's primary ids, rows and the dense parameters) and,
on rank 0, OUT_DIR/migration.json (the summary, when resuming). A refused migration
(TrainingError) writes OUT_DIR/refused{r}.txt with the message and exits 3 on every rank.
With REFUSED.npy, a migration with that history (which must be refused) is tried first, by a
trainer of its own: its message goes to OUT_DIR/refused{r}.txt (exit 4 if it was not refused),
then the run goes on with CREATED.npy in the same processes (one torchrun launch for both).
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

from gmp.comm.distributed import DistributedEngine
from gmp.datasets.format import load_dataset
from gmp.errors import TrainingError
from gmp.train import TrainData, Trainer
from gmp.train.checkpoint import placement_sha256, save_checkpoint
from gmp.train.migrate import resume_training
from train_data import load_placement_npz, make_config


def main() -> None:
    dataset, placement_npz, ckpt, out, cfg = sys.argv[1:6]
    resume = sys.argv[6:7] == ["resume"]
    created = np.load(sys.argv[7]) if len(sys.argv) > 7 else None
    refused = np.load(sys.argv[8]) if len(sys.argv) > 8 else None
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    placement = load_placement_npz(placement_npz)
    engine = DistributedEngine()
    ds = load_dataset(dataset)
    psha = placement_sha256(placement)
    if refused is not None:
        wrong = Trainer(TrainData(ds), placement, make_config(**json.loads(cfg)), engine)
        try:
            resume_training(wrong, ckpt, dataset=ds, placement_sha=psha, created=refused)
        except TrainingError as exc:
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / f"refused{engine.rank}.txt").write_text(str(exc))
        else:
            sys.exit(4)
        wrong.close()
        engine.bytes[:] = 0  # the refused attempt's gathers are not the run's traffic
    trainer = Trainer(TrainData(ds), placement, make_config(**json.loads(cfg)), engine)
    try:
        summary = resume_training(trainer, ckpt, dataset=ds, placement_sha=psha, created=created) if resume else None
    except TrainingError as exc:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"refused{engine.rank}.txt").write_text(str(exc))
        sys.exit(3)
    trainer.fit()
    save_checkpoint(trainer, ckpt, dataset_sha256=ds.sha256, placement_sha=psha)
    store = trainer.stores[0]
    p = store.num_primary
    Path(out).mkdir(parents=True, exist_ok=True)
    np.savez(Path(out) / f"rank{engine.rank}.npz", ids=store.ids[:p], rows=store.primary_rows()[1].double().cpu().numpy(),
             dense=torch.cat([q.detach().reshape(-1) for q in trainer.model.parameters()]).double().cpu().numpy())
    if engine.rank == 0 and summary is not None:
        (Path(out) / "migration.json").write_text(json.dumps(summary))
    trainer.close()
    engine.close()


if __name__ == "__main__":
    main()
