"""Run under torchrun by tests/test_train_distributed.py: train with the
distributed engine on a placement given as .npz, save each rank's primaries.

usage: torchrun ... tests/dist_worker.py DATASET PLACEMENT.npz OUT_DIR CONFIGS_JSON

CONFIGS_JSON is a list of TrainConfig dicts, trained one after the other in the
same process group (torchrun start-up dominates the test's time); results go
to OUT_DIR/<index>/.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

from gmp.datasets.format import load_dataset
from gmp.comm.distributed import DistributedEngine
from gmp.train import TrainData, Trainer
from gmp.train.trainer import _status
from train_data import load_placement_npz, make_config


def main() -> None:
    dataset, placement_npz, out, cfg = sys.argv[1:5]
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    placement = load_placement_npz(placement_npz)
    engine = DistributedEngine()
    data = TrainData(load_dataset(dataset))
    for i, config in enumerate(json.loads(cfg)):
        engine.bytes[:] = 0
        trainer = Trainer(data, placement, make_config(**config), engine)
        acc = {}  # the last epoch's accumulators, as they stood when its record was made
        records = trainer.fit(on_record=lambda rec: acc.update(trainer.acc, status=_status(trainer.acc)))
        store = trainer.stores[0]
        p = store.num_primary
        d = Path(out) / str(i)
        d.mkdir(exist_ok=True)
        np.savez(d / f"rank{engine.rank}.npz", ids=store.ids[:p], rows=store.primary_rows()[1].double().cpu().numpy(),
                 dense=torch.cat([q.detach().reshape(-1) for q in trainer.model.parameters()]).double().cpu().numpy(),
                 loss_sum=acc["loss_sum"], local_samples=acc["local_samples"], status=acc["status"])
        if engine.rank == 0:
            (d / "records.json").write_text(json.dumps(records))
        trainer.close()
    engine.close()


if __name__ == "__main__":
    main()
