"""Hash Herald schedules, placements and training trajectories, batch by batch (issue 10).

Run before and after a refactor of gmp/train; every line whose key does not
name a shuffled order must print the same hash. Keys:

``sched/...``     RuntimeScheduler over a fixed explicit order (worker_of + every event array, per batch)
``simseed/...``   gmp.simulate over its own seeded epoch order (changes when the seed helper changes)
``steps/...``     Schedule.steps of static / naive / herald (``shuffle=seeded`` changes with the seed helper)
``place/...``     every registered partitioner on a small graph
``train/...``     Trainer (local engine): model parameters + embedding table after every step
                  (``shuffle=seeded`` keys change with the seed helper; ``--legacy-order`` injects
                  the old ``default_rng(seed + epoch)`` order so they can be compared too)

Usage::

    python scripts/hash_trajectories.py > before.txt
    python scripts/hash_trajectories.py [--legacy-order] > after.txt
    diff before.txt after.txt
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gmp.datasets.format import load_dataset  # noqa: E402
from gmp.graph import build_graph  # noqa: E402
from gmp.partition import PARTITIONERS, run_partitioner  # noqa: E402
from gmp.placement import Placement  # noqa: E402
from gmp.topology import homogeneous  # noqa: E402
from train_data import make_ctr_dataset  # noqa: E402


# ----------------------------------------------------------------- layout adapter (old / new gmp.train)
def api():
    """The names this script needs, from whichever layout of gmp.train is checked out."""
    import importlib.util

    if importlib.util.find_spec("gmp.train.herald") is not None:  # the redesigned layout (issue 10)
        from gmp.comm.local import LocalEngine
        from gmp.simulate import simulate
        from gmp.train.config import TrainConfig
        from gmp.train.data import TrainData
        from gmp.train.herald import HeraldOptions
        from gmp.train.herald import RuntimeScheduler as _RS
        from gmp.train.registry import make_schedule
        from gmp.train.schedule import ScheduleContext
        from gmp.train.trainer import Trainer

        def RuntimeScheduler(indptr, indices, pl, *, batch_size, assignment, **opts):
            return _RS(indptr, indices, pl, HeraldOptions(**opts), batch_size=batch_size, assignment=assignment)

        def config(**kw):
            opts = kw.pop("schedule_options", None) or {}
            if kw.get("schedule") == "herald":
                kw["herald"] = HeraldOptions.for_trainer(**opts)
            return TrainConfig(**kw)
        return RuntimeScheduler, simulate, config, TrainData, Trainer, LocalEngine, ScheduleContext, make_schedule
    from gmp.simulate import simulate
    from gmp.train.engine_local import LocalEngine
    from gmp.train.loop import TrainConfig, TrainData, Trainer
    from gmp.train.schedule import ScheduleContext, make_schedule
    from gmp.train.scheduler import RuntimeScheduler
    return RuntimeScheduler, simulate, TrainConfig, TrainData, Trainer, LocalEngine, ScheduleContext, make_schedule


def legacy_order() -> None:
    """Make the new seed helper return the old ``default_rng(seed + epoch)`` streams."""
    from gmp import seeds

    seeds.epoch_rng = lambda seed, epoch: np.random.default_rng(int(seed) + int(epoch))


# ----------------------------------------------------------------- hashing
class Hasher:
    def __init__(self):
        self.h = hashlib.sha256()

    def add(self, *arrays) -> None:
        for a in arrays:
            a = np.ascontiguousarray(a)
            self.h.update(str(a.dtype).encode() + str(a.shape).encode())
            self.h.update(a.tobytes())

    def hex(self) -> str:
        return self.h.hexdigest()[:16]


def random_placement(num_samples, num_embeddings, n, *, secondaries=0.0, seed=1):
    rng = np.random.default_rng(seed)
    pl = Placement.edge_cut(n, rng.integers(0, n, num_samples), rng.integers(0, n, num_embeddings))
    if secondaries and n > 1:
        sec = [[w for w in range(n) if w != pl.embedding_primary[e] and rng.random() < secondaries]
               for e in range(num_embeddings)]
        indptr = np.cumsum([0] + [len(s) for s in sec])
        pl = pl.with_secondaries(indptr, np.array([w for s in sec for w in s], dtype=np.int32))
    return pl


def big_dataset(root: Path):
    """A dataset large enough for caches, evictions and several batches per epoch."""
    return load_dataset(make_ctr_dataset(root / "big", num_samples=3000, field_sizes=(40, 90, 25, 300), seed=7))


def schedules(A, ds, out) -> None:
    RuntimeScheduler, simulate = A[0], A[1]
    order = np.random.default_rng(12345).permutation(ds.num_train).astype(np.int64)
    configs = []
    for n, sec in ((2, 0.0), (4, 0.3), (9, 0.2)):
        for assignment in ("naive", "herald"):
            for on_demand in (False, True):
                for cache_rows, policy, look in ((0, "lru", 0), (50, "lru", 0), (50, "lookahead", 3)):
                    for ro in (False, True):
                        configs.append((n, sec, assignment, on_demand, cache_rows, policy, look, ro))
    for n, sec, assignment, on_demand, cache_rows, policy, look, ro in configs:
        pl = random_placement(ds.num_samples, ds.num_embeddings, n, secondaries=sec)
        eng = RuntimeScheduler(ds.indptr, ds.indices, pl, batch_size=64, assignment=assignment, on_demand=on_demand,
                               cache_rows=cache_rows, cache_policy=policy, lookahead=look, read_only_replicas=ro)
        h = Hasher()
        for epoch in range(2):
            eng.start_epoch(order if epoch == 0 else order[::-1].copy())
            for b in eng:
                h.add(b.worker_of, b.event_kind, b.event_worker, b.event_row, b.event_ready)
            h.add(eng.flush)
        key = f"sched/n{n}/sec{sec}/{assignment}/od{int(on_demand)}/c{cache_rows}/{policy}{look}/ro{int(ro)}"
        out.append((key, h.hex()))
    pl = random_placement(ds.num_samples, ds.num_embeddings, 4, secondaries=0.3)
    for sched in ("naive", "herald"):
        res = simulate(ds.indptr, ds.indices, pl, num_train=ds.num_train, batch_size=64, schedule=sched, seed=5)
        tot = {k: v for k, v in res.totals.items()}
        out.append((f"simseed/{sched}", hashlib.sha256(repr(sorted(tot.items())).encode()).hexdigest()[:16]))
        res = simulate(ds.indptr, ds.indices, pl, num_train=ds.num_train, batch_size=64, schedule=sched, order=order)
        tot = {k: v for k, v in res.totals.items()}
        out.append((f"sim-fixed-order/{sched}", hashlib.sha256(repr(sorted(tot.items())).encode()).hexdigest()[:16]))


def steps(A, ds, out) -> None:
    ScheduleContext, make_schedule = A[6], A[7]
    pl = random_placement(ds.num_samples, ds.num_embeddings, 3, secondaries=0.2)
    for name in ("static", "naive", "herald"):
        for shuffle in ("none", "seeded"):
            ctx_kw = dict(seed=4, shuffle=shuffle, dataset=ds)
            if name == "herald":
                try:  # new layout: typed options
                    from gmp.train.herald import HeraldOptions
                    ctx_kw["herald"] = HeraldOptions.for_trainer(cache_rows=30, on_demand=True)
                except ImportError:
                    ctx_kw["options"] = dict(cache_rows=30, on_demand=True)
            sch = make_schedule(name, ScheduleContext(pl, ds.num_train, 50, **ctx_kw))
            h = Hasher()
            for epoch in range(3):
                for st in sch.steps(epoch):
                    h.add(np.array([st.index]), *st.samples)
            out.append((f"steps/{name}/shuffle={shuffle}", h.hex()))


def placements(ds, out) -> None:
    g = build_graph(ds)
    for name in sorted(PARTITIONERS):
        try:
            pl = run_partitioner(name, g, homogeneous(4), seed=3)
        except Exception as exc:  # noqa: BLE001 - e.g. an optional tool missing: report, don't hash
            out.append((f"place/{name}", f"error {type(exc).__name__}"))
            continue
        h = Hasher()
        h.add(pl.sample_worker, pl.embedding_primary, pl.secondary_indptr, pl.secondary_workers)
        out.append((f"place/{name}", h.hex()))


TRAIN_CASES = [
    # (schedule, workers, secondaries, staleness, optimizer, schedule options)
    ("static", 3, 0.3, 0.0, "sgd", {}),
    ("static", 3, 0.3, 0.0, "adagrad", {}),
    ("static", 3, 0.4, 2.0, "adagrad", {}),
    ("static", 2, 0.5, float("inf"), "sgd", {}),
    ("naive", 2, 0.0, 0.0, "adagrad", {}),
    ("naive", 4, 0.3, 1.0, "sgd", {}),
    ("herald", 3, 0.3, 0.0, "adagrad", dict(on_demand=True, cache_rows=6, read_only_replicas=False, lookahead=0)),
    ("herald", 2, 0.0, 0.0, "sgd", dict(on_demand=True, cache_rows=0, read_only_replicas=True, lookahead=2)),
    ("herald", 4, 0.3, 0.0, "adagrad", dict(on_demand=False, cache_rows=5, read_only_replicas=False, lookahead=2,
                                            cache_policy="lookahead")),
    ("herald", 3, 0.3, 0.0, "sgd", {}),
    ("herald", 3, 0.3, 1.0, "sgd", {}),
]


def training(A, ds, out) -> None:
    _, _, config, TrainData, Trainer, LocalEngine = A[:6]
    data = TrainData(ds)
    torch.use_deterministic_algorithms(True)
    for sched, n, sec, s, opt, opts in TRAIN_CASES:
        for shuffle in ("none", "seeded"):
            pl = random_placement(ds.num_samples, ds.num_embeddings, n, secondaries=sec)
            cfg = config(model="wdl", embedding_dim=4, optimizer=opt, lr=0.1, batch_size=12, epochs=2,
                         schedule=sched, dtype="float64", hidden=(8,), seed=3, staleness=s, shuffle=shuffle,
                         schedule_options=dict(opts))
            tr = Trainer(data, pl, cfg, LocalEngine(n))
            h = Hasher()
            inner = tr.train_step

            def step(st, inner=inner, tr=tr, h=h):
                loss = inner(st)
                h.add(np.array([loss]), tr.embedding_table(), *[p.detach().numpy() for p in tr.model.parameters()])
                return loss
            tr.train_step = step
            recs = tr.fit()
            h.add(np.array([r["train_loss"] for r in recs]), np.array([r["test_logloss"] for r in recs]))
            tag = ",".join(f"{k}={v}" for k, v in sorted(opts.items()))
            out.append((f"train/{sched}/n{n}/sec{sec}/s{s}/{opt}/{tag}/shuffle={shuffle}", h.hex()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--legacy-order", action="store_true", help="inject the old seed + epoch orders (new layout)")
    ap.add_argument("--only", default="", help="comma list of parts: sched,steps,place,train")
    args = ap.parse_args()
    if args.legacy_order:
        legacy_order()
    A = api()
    parts = set(args.only.split(",")) if args.only else {"sched", "steps", "place", "train"}
    out: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        small = load_dataset(make_ctr_dataset(Path(tmp) / "small"))
        big = big_dataset(Path(tmp))
        if "sched" in parts:
            schedules(A, big, out)
        if "steps" in parts:
            steps(A, big, out)
        if "place" in parts:
            placements(big, out)
        if "train" in parts:
            training(A, small, out)
    for key, value in out:
        print(f"{key}  {value}")


if __name__ == "__main__":
    main()
