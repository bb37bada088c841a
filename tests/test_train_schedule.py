"""Schedules: every training sample exactly once per epoch, seeded orders, splits."""

from __future__ import annotations

import numpy as np
import pytest

from gmp.errors import TrainingError
from gmp.placement import Placement
from gmp.train.schedule import (NaiveSchedule, ReplaySchedule, ScheduleContext, StaticSchedule, make_schedule,
                                register_schedule, SCHEDULES)


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
    with pytest.raises(TrainingError, match="unknown --schedule 'nope'"):
        make_schedule("nope", ctx)
    with pytest.raises(TrainingError, match="--shuffle"):
        StaticSchedule(ctx.placement, 3, 1, shuffle="random")
    register_schedule("replay-test", lambda c: ReplaySchedule([[[0], [1]]]))
    try:
        assert make_schedule("replay-test", ctx).num_steps(0) == 1
    finally:
        SCHEDULES.pop("replay-test")
