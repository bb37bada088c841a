"""Checkpoint and resume of a disk-tier table larger than the process's memory (issue 12; docs/train.md,
"Checkpoint and resume of a table larger than the process's memory"). Run each phase in the cgroup:

    python bench/tiered_checkpoint_run.py first 25            # 25 steps, checkpoint into WORK/ck
    python bench/tiered_checkpoint_run.py resume 25           # a new process: load WORK/ck, 25 steps, save
    python bench/tiered_checkpoint_run.py straight 50 WORK/ck2   # the uninterrupted reference
    cmp WORK/ck/latest/worker-00000.rows WORK/ck2/latest/worker-00000.rows

Environment: GMP_BIG_DATA (default data/bench/c500k), GMP_BIG_WORK (default data/bench/tiered-checkpoint,
beside the data: the phases run as separate processes and share it; WORK above).
"""
import argparse, json, os, resource, sys, time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="GMP_BIG_DATA / GMP_BIG_WORK: see the module docstring.")
parser.add_argument("phase", choices=["first", "resume", "straight"],
                    help="first: train and checkpoint; resume: load the checkpoint, train, save; straight: the "
                         "uninterrupted reference")
parser.add_argument("steps", type=int, help="steps to train in this phase")
parser.add_argument("checkpoint_dir", nargs="?", default=None, help="where to checkpoint (default WORK/ck)")
args = parser.parse_args()

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch
torch.set_num_threads(1)
from gmp.comm.local import LocalEngine
from gmp.datasets.format import load_dataset
from gmp.train import TrainConfig, TrainData, Trainer
from gmp.train.checkpoint import load_checkpoint, save_checkpoint
from gmp.train.run import load_placement
from gmp.train.tiers import TierOptions

phase, steps = args.phase, args.steps
root = os.environ.get("GMP_BIG_WORK", "data/bench/tiered-checkpoint")
CK = args.checkpoint_dir or os.path.join(root, "ck")
ds = load_dataset(os.environ.get("GMP_BIG_DATA", "data/bench/c500k"))
data = TrainData(ds)
pl = load_placement(ds, None, 1)
tiers = TierOptions(table_location="disk", cache_rows=200_000, lookahead=8, tier_dir=f"{root}/tier")
cfg = TrainConfig(model="wdl", embedding_dim=96, optimizer="adagrad", batch_size=1024, epochs=1, seed=0, tiers=tiers)
t0 = time.time()
tr = Trainer(data, pl, cfg, LocalEngine(1))
setup = time.time() - t0
if phase == "resume":
    t1 = time.time()
    load_checkpoint(tr, CK, dataset_sha256="d", placement_sha="p")
    print("resume_load_s", round(time.time() - t1, 1))
t1 = time.time()
tr.fit(stop_after_steps=steps)
train_s = time.time() - t1
t1 = time.time()
save_checkpoint(tr, CK, dataset_sha256="d", placement_sha="p")
save_s = time.time() - t1
st = tr.stores[0].tier.cache.stats.to_json()
print(json.dumps({"phase": phase, "position": [tr.epoch, tr.step_in_epoch], "master_bytes": tr.stores[0].tier.master.nbytes,
                  "setup_s": round(setup, 1), "train_s": round(train_s, 1), "save_s": round(save_s, 1),
                  "rows_file_bytes": os.path.getsize(CK + "/latest/worker-00000.rows"),
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "hits": st["hits"], "misses": st["misses"], "rows_written_back": st["rows_written_back"]}))
tr.close()
