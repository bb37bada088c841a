"""Schedules: every training sample exactly once per epoch, seeded orders, splits."""

from __future__ import annotations

import numpy as np
import pytest

from gmp.errors import TrainingError
from gmp.placement import Placement
from gmp.train.registry import SCHEDULES, make_schedule
from gmp.train.schedule import NaiveSchedule, ReplaySchedule, ScheduleContext, StaticSchedule


def placement(sample_worker, n):
    return Placement.edge_cut(n, sample_worker, np.zeros(3, dtype=np.int32))


def test_static_walks_each_shard_and_pads_with_empty_batches():
    # 10 samples, the last 2 are test samples; worker 0 has 5 training samples, worker 1 has 3
    sw = [0, 1, 0, 0, 1, 0, 1, 0, 1, 1]
    s = StaticSchedule(placement(sw, 2), 8, 2, shuffle="none")
    steps = list(s.steps(0))
    assert s.num_steps(0) == 3
    assert [[a.tolist() for a in st.samples] for st in steps] == [[[0, 2], [1, 4]], [[3, 5], [6]], [[7], []]]
    assert [st.global_batch_size for st in steps] == [4, 3, 1]
    assert [st.index for st in s.steps(0, start=2)] == [2]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_static_seeded_uses_every_training_sample_once_and_reshuffles_per_epoch(seed):
    rng = np.random.default_rng(seed)
    sw = rng.integers(0, 3, 100)
    s = StaticSchedule(placement(sw, 3), 90, 7, seed=seed)
    orders = []
    for epoch in range(2):
        seen = np.concatenate([a for st in s.steps(epoch) for a in st.samples])
        assert np.array_equal(np.sort(seen), np.arange(90))
        for st in s.steps(epoch):
            for w, a in enumerate(st.samples):
                assert np.all(sw[a] == w) and a.size <= 7
        orders.append(seen)
    assert not np.array_equal(orders[0], orders[1])
    again = np.concatenate([a for st in StaticSchedule(placement(sw, 3), 90, 7, seed=seed).steps(0)
                            for a in st.samples])
    assert np.array_equal(again, orders[0])


def test_naive_global_batches_do_not_depend_on_the_number_of_workers():
    one = [np.concatenate(st.samples) for st in NaiveSchedule(1, 103, 20, seed=5).steps(1)]
    four = NaiveSchedule(4, 103, 5, seed=5)
    parts = list(four.steps(1))
    assert [np.concatenate(st.samples).tolist() for st in parts] == [b.tolist() for b in one]
    assert [a.size for a in parts[0].samples] == [5, 5, 5, 5]
    assert [a.size for a in parts[-1].samples] == [1, 1, 1, 0]  # 103 = 5 x 20 + 3
    assert np.array_equal(np.sort(np.concatenate(one)), np.arange(103))
    assert [st.samples for st in NaiveSchedule(2, 6, 1, shuffle="none").steps(0)][0][1].tolist() == [1]


def test_registry_and_errors():
    ctx = ScheduleContext(placement([0, 1, 0], 2), 3, 1)
    assert isinstance(make_schedule("naive", ctx), NaiveSchedule)
    with pytest.raises(TrainingError, match=r"The 'schedule' parameter must be one of \['herald', 'naive', 'static'\], got 'nope'"):
        make_schedule("nope", ctx)
    with pytest.raises(TrainingError, match="The 'shuffle' parameter"):
        StaticSchedule(ctx.placement, 3, 1, shuffle="random")
    SCHEDULES["replay-test"] = lambda c: ReplaySchedule([[[0], [1]]])  # the registry is a plain dict
    try:
        assert make_schedule("replay-test", ctx).num_steps(0) == 1
    finally:
        SCHEDULES.pop("replay-test")


def test_the_registry_names_every_schedule_and_herald_needs_no_import_side_effect():
    """The registry is explicit: herald is listed without importing anything first."""
    assert sorted(SCHEDULES) == ["herald", "naive", "static"]


def test_epoch_orders_come_from_the_one_seed_helper():
    """Every epoch order is gmp.seeds.epoch_permutation / epoch_rng of (seed, epoch): the naive schedule
    and the simulator agree, and (seed, epoch) pairs whose sums collide get different orders."""
    from gmp.seeds import epoch_permutation, epoch_rng
    from gmp.simulate import epoch_order

    assert np.array_equal(NaiveSchedule(1, 50, 5, seed=1).epoch_order(0), epoch_permutation(50, 1, 0))
    assert np.array_equal(epoch_order(50, 3, 2), epoch_permutation(50, 3, 2))
    # seed + epoch collided: (0, 1) and (1, 0) gave one stream
    assert not np.array_equal(epoch_permutation(50, 0, 1), epoch_permutation(50, 1, 0))
    # independent derivation: SeedSequence([seed, epoch]) -> PCG64
    want = np.random.Generator(np.random.PCG64(np.random.SeedSequence([7, 4]))).permutation(50)
    assert np.array_equal(epoch_permutation(50, 7, 4), want)
    assert np.array_equal(epoch_rng(7, 4).permutation(50), want)
    shards = StaticSchedule(placement([0] * 30 + [1] * 20, 2), 50, 5, seed=7).epoch_shards(4)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([7, 4])))
    assert np.array_equal(shards[0], np.arange(30)[rng.permutation(30)])
