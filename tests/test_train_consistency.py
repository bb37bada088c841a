"""Bounded staleness (HET-GMP 5.3): the clock rules on hand-made sequences,
and the trainer refreshing secondaries exactly when the rules say."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gmp.datasets.format import FieldInfo, load_dataset, write_dataset
from gmp.placement import Placement
from gmp.train.consistency import inter_stale, intra_stale, normalized_gap, tick_clocks
from gmp.comm.local import LocalEngine
from gmp.train import TrainConfig, TrainData, Trainer
from gmp.train.records import COUNTERS
from gmp.train.schedule import ReplaySchedule


def test_intra_stale_hand_cases():
    primary = np.array([5, 5, 5, 5, 0])
    replica = np.array([5, 4, 2, -1, 0])
    assert intra_stale(primary, replica, 0).tolist() == [False, True, True, True, False]
    assert intra_stale(primary, replica, 1).tolist() == [False, False, True, True, False]
    assert intra_stale(primary, replica, 3).tolist() == [False, False, False, True, False]
    assert intra_stale(primary, replica, math.inf).tolist() == [False, False, False, True, False]


def test_tick_clocks_adds_one_at_each_slot():
    clock = np.array([0, 5, 2, 7, 1], dtype=np.int64)
    tick_clocks(clock, np.array([4, 1, 0], dtype=np.int32))  # any int dtype, any order
    assert clock.tolist() == [1, 6, 2, 7, 2]
    tick_clocks(clock, np.zeros(0, dtype=np.int64))
    assert clock.tolist() == [1, 6, 2, 7, 2]


def test_normalized_gap_follows_the_paper():
    # p_i >= p_j: |c_i * p_j / p_i - c_j|
    assert normalized_gap(10, 100, 3, 10) == pytest.approx(2.0)
    assert normalized_gap(3, 10, 10, 100) == pytest.approx(2.0)  # symmetric in the pair
    assert normalized_gap(7, 5, 4, 5) == pytest.approx(3.0)  # equal frequencies: plain clock gap


def test_inter_stale_hand_case():
    # sample 0 uses rows 0, 1, 2; sample 1 uses rows 2, 3
    ptr = np.array([0, 3, 5])
    rows = np.array([0, 1, 2, 2, 3])
    clock = np.array([10, 2, 1, 9])
    freq = np.array([10, 10, 5, 1])
    refreshable = np.array([False, True, True, False])
    # row 1 vs row 0 (equal p): gap 8 > 5 -> refresh. row 2 vs row 0: |10*5/10 - 1| = 4 <= 5;
    # row 2 vs row 1: |2*5/10 - 1| = 0; row 2 vs row 3 (p 5 >= 1): |1*1/5 - 9| = 8.8 > 5 and row 2 is behind.
    assert inter_stale(ptr, rows, clock, freq, refreshable, 5).tolist() == [False, True, True, False]
    assert inter_stale(ptr, rows, clock, freq, refreshable, 8.9).tolist() == [False, False, False, False]
    assert inter_stale(ptr, rows, clock, freq, refreshable, math.inf).tolist() == [False] * 4
    # a row that is ahead of its partner is never refreshed, however large the gap
    assert inter_stale(np.array([0, 2]), np.array([0, 1]), np.array([50, 0]), np.array([1, 1]),
                       np.array([True, False]), 1).tolist() == [False, False]


def slow_inter(ptr, rows, clock, freq, refreshable, s):
    out = [False] * len(clock)
    for k in range(len(ptr) - 1):
        members = rows[ptr[k]:ptr[k + 1]]
        for j in members:
            for i in members:
                if i == j or not refreshable[j]:
                    continue
                pi, pj = max(freq[i], 1), max(freq[j], 1)
                if clock[j] / pj < clock[i] / pi and normalized_gap(clock[i], pi, clock[j], pj) > s:
                    out[j] = True
    return out


@pytest.mark.parametrize("seed", range(20))
def test_inter_stale_matches_a_slow_reference(seed):
    rng = np.random.default_rng(seed)
    num_rows = int(rng.integers(1, 12))
    lens = rng.integers(0, 5, size=int(rng.integers(1, 6)))
    ptr = np.concatenate([[0], np.cumsum(lens)])
    rows = np.concatenate([rng.choice(num_rows, size=min(k, num_rows), replace=False) for k in lens]
                          ).astype(np.int64) if lens.sum() else np.zeros(0, np.int64)
    ptr = np.concatenate([[0], np.cumsum([min(k, num_rows) for k in lens])])
    clock = rng.integers(0, 30, size=num_rows)
    freq = rng.integers(0, 20, size=num_rows)
    refreshable = rng.random(num_rows) < 0.6
    s = float(rng.integers(0, 10))
    assert inter_stale(ptr, rows, clock, freq, refreshable, s).tolist() == slow_inter(ptr, rows, clock, freq,
                                                                                       refreshable, s)


# ------------------------------------------------------------------ the trainer
def tiny(tmp_path, rows):
    indptr = np.cumsum([0] + [len(r) for r in rows])
    write_dataset(tmp_path / "d", indptr=indptr, indices=np.array([i for r in rows for i in r]),
                  labels=np.array([1, 0, 1], dtype=np.float32), dense=None,
                  fields=[FieldInfo("A", "categorical", 3, 0), FieldInfo("B", "categorical", 3, 3)],
                  num_embeddings=6, source={"format": "test"}, test_fraction=1 / 3)
    return load_dataset(tmp_path / "d")


def refresh_steps(ds, staleness, num_steps=12, monkeypatch=None):
    """Worker 0 trains sample 0 and worker 1 sample 1 at every step; row 0 is primary on
    worker 0 with a secondary on worker 1. Returns the steps at which worker 1 refreshed."""
    torch.use_deterministic_algorithms(True)
    pl = Placement.edge_cut(2, [0, 1, 0], [0, 0, 0, 0, 1, 1]).with_secondaries([0, 1, 1, 1, 1, 1, 1], [1])
    cfg = TrainConfig(model="wdl", embedding_dim=2, hidden=(4,), lr=0.1, optimizer="sgd", staleness=staleness,
                      dtype="float64", batch_size=1)
    tr = Trainer(TrainData(ds), pl, cfg, LocalEngine(2), schedule=ReplaySchedule([[[0], [1]]] * num_steps))
    # without local application of own updates, a refreshed replica must equal the primary as read
    monkeypatch.setattr(tr.stores[1], "apply_local", lambda slots, grads, idx=None: None)
    k = COUNTERS.index("staleness_refreshes")
    steps = []
    for step in tr.schedule.steps(0):
        before = int(tr.counters[1, k])
        primary_row = tr.stores[0].table[0].clone()
        tr.train_step(step)
        if tr.counters[1, k] > before:
            steps.append(step.index)
            # the replica read at this step is the primary's value before the step's update
            slot = int(tr.stores[1].lookup(np.array([0]))[0])
            assert torch.equal(tr.stores[1].table[slot], primary_row)
            assert tr.stores[1].clock[slot] == step.index  # the primary's clock when it was read
        assert tr.stores[0].clock[0] == step.index + 1  # one update per step (both workers' gradients)
    assert tr.counters[0, k] == 0
    return steps


def test_intra_bound_refreshes_every_s_plus_one_steps(tmp_path, monkeypatch):
    ds = tiny(tmp_path, [[0, 3], [0], [1, 5]])  # worker 1's sample uses only the secondary row
    # primary clock at step t is t; replica r refreshed when t - r > s
    assert refresh_steps(ds, 0, monkeypatch=monkeypatch) == list(range(1, 12))
    assert refresh_steps(ds, 3, monkeypatch=monkeypatch) == [4, 8]
    assert refresh_steps(ds, 5, monkeypatch=monkeypatch) == [6]
    assert refresh_steps(ds, math.inf, monkeypatch=monkeypatch) == []


def test_inter_bound_refreshes_when_the_normalised_gap_exceeds_s(tmp_path, monkeypatch):
    ds = tiny(tmp_path, [[0, 3], [0, 4], [1, 5]])
    # worker 1 reads row 0 (secondary, clock r, p=2) with row 4 (its primary, clock t, p=1):
    # intra: t - r > 3; inter: |r * 1/2 - t| > 3 while r < t.
    # t=4: intra (4 > 3) -> r=4; t=5: 5 - 2 = 3 ok; t=6: 6 - 2 = 4 -> r=6; t=7: 7 - 3 = 4 -> r=7; ...
    assert refresh_steps(ds, 3, monkeypatch=monkeypatch) == [4, 6, 7, 8, 9, 10, 11]
    # without the inter pair (s large enough for it) only the intra period remains
    assert refresh_steps(ds, 20, monkeypatch=monkeypatch) == []


def test_secondaries_apply_their_own_updates_between_refreshes(tmp_path):
    """s > 0 (SGD): after a step without refresh, worker 1's replica moved by exactly
    -lr * (its own gradient), which is also what it pushed to the primary."""
    ds = tiny(tmp_path, [[0, 3], [0], [1, 5]])
    pl = Placement.edge_cut(2, [0, 1, 0], [0, 0, 0, 0, 1, 1]).with_secondaries([0, 1, 1, 1, 1, 1, 1], [1])
    cfg = TrainConfig(model="wdl", embedding_dim=2, hidden=(4,), lr=0.1, optimizer="sgd", staleness=5,
                      dtype="float64", batch_size=1)
    pushed = []
    tr = Trainer(TrainData(ds), pl, cfg, LocalEngine(2), schedule=ReplaySchedule([[[], [1]]] * 3))
    real = tr.engine.alltoallv

    def spy(sends, category, **kw):
        if category == "gradients":
            pushed.append(sends[1][0].clone())
        return real(sends, category, **kw)

    tr.engine.alltoallv = spy
    slot = int(tr.stores[1].lookup(np.array([0]))[0])
    for step in tr.schedule.steps(0):
        before = tr.stores[1].table[slot].clone()
        primary_before = tr.stores[0].table[0].clone()
        tr.train_step(step)
        torch.testing.assert_close(tr.stores[1].table[slot], before - 0.1 * pushed[-1][0], rtol=0, atol=1e-15)
        torch.testing.assert_close(tr.stores[0].table[0], primary_before - 0.1 * pushed[-1][0], rtol=0, atol=1e-15)
    assert tr.counters.sum() > 0 and tr.counters[1, COUNTERS.index("staleness_refreshes")] == 0
