"""Per-worker caches: LRU and the look-ahead-aware policy on hand-made access sequences."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from gmp.errors import TrainingError
from gmp.train.herald.cache import WorkerCaches


def test_lru_eviction_order():
    c = WorkerCaches(1, 10, capacity=3, policy="lru")
    assert c.access(0, [1, 2, 3]).tolist() == [1, 2, 3]
    assert c.trim(0).tolist() == []
    assert c.access(0, [1]).tolist() == []  # hit: 1 becomes most recent -> order 2, 3, 1
    assert c.access(0, [4, 5]).tolist() == [4, 5]  # 2, 3, 1, 4, 5
    assert c.trim(0).tolist() == [2, 3]
    assert c.rows(0).tolist() == [1, 4, 5]
    assert c.access(0, [4, 6]).tolist() == [6]  # 1, 5, 4, 6
    assert c.trim(0).tolist() == [1]
    assert c.rows(0).tolist() == [5, 4, 6]
    assert not c.contains(0, 1) and c.contains(0, 6)


def test_workers_are_independent():
    c = WorkerCaches(2, 10, capacity=1, policy="lru")
    c.access(0, [1, 2])
    c.access(1, [2, 1])
    assert c.trim(0).tolist() == [1] and c.trim(1).tolist() == [2]
    assert c.rows(0).tolist() == [2] and c.rows(1).tolist() == [1]
    assert c.contains(1, 1) and not c.contains(0, 1) and c.contains(0, 2) and not c.contains(1, 2)


def test_lookahead_evicts_rows_outside_the_window_first():
    c = WorkerCaches(1, 10, capacity=2, policy="lookahead")
    c.access(0, [1, 2, 3, 4])  # LRU order 1, 2, 3, 4
    c.set_window([[1, 7], [3]])  # 1 and 3 are needed soon
    # plain LRU would evict 1, 2; look-ahead evicts the unneeded 2 and 4 instead
    assert c.trim(0).tolist() == [2, 4]
    assert c.rows(0).tolist() == [1, 3]


def test_lookahead_falls_back_to_lru_when_everything_is_needed():
    c = WorkerCaches(1, 10, capacity=1, policy="lookahead")
    c.access(0, [5, 6, 7])
    c.set_window([[5, 6, 7]])
    assert c.trim(0).tolist() == [5, 6]
    c.access(0, [8, 9])  # 7, 8, 9
    c.set_window([[7], [9]])  # only 8 unneeded
    assert c.trim(0).tolist() == [8, 7]  # the unneeded first, then LRU among the needed


def test_lookahead_with_an_empty_window_is_lru():
    a = WorkerCaches(1, 50, capacity=4, policy="lookahead")
    b = WorkerCaches(1, 50, capacity=4, policy="lru")
    rng = np.random.default_rng(0)
    for _ in range(30):
        rows = rng.integers(0, 50, 5)
        a.access(0, rows)
        b.access(0, rows)
        assert a.trim(0).tolist() == b.trim(0).tolist()


def test_lru_matches_ordered_dict_reference():
    rng = np.random.default_rng(3)
    c = WorkerCaches(1, 30, capacity=5, policy="lru")
    ref: OrderedDict[int, None] = OrderedDict()
    for _ in range(200):
        rows = rng.integers(0, 30, int(rng.integers(1, 4))).tolist()
        missed = []
        for r in rows:
            if r in ref:
                ref.move_to_end(r)
            else:
                ref[r] = None
                missed.append(r)
        assert c.access(0, rows).tolist() == missed
        want = []
        while len(ref) > 5:
            want.append(ref.popitem(last=False)[0])
        assert c.trim(0).tolist() == want
    assert c.rows(0).tolist() == list(ref)


def test_zero_capacity_keeps_nothing():
    c = WorkerCaches(1, 5, capacity=0, policy="lru")
    c.access(0, [3, 1])
    assert c.trim(0).tolist() == [3, 1] and c.size[0] == 0


@pytest.mark.parametrize("kw, match", [(dict(capacity=-1), "The 'cache_rows' parameter must be an int >= 0"),
                                       (dict(capacity=1, policy="fifo"), "The 'cache_policy' parameter must be one of .*got 'fifo'")])
def test_bad_arguments(kw, match):
    with pytest.raises(TrainingError, match=match):
        WorkerCaches(1, 5, **kw)
