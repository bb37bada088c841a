"""The input pipeline ahead of the step (issue 33, gmp/train/prepare.py): the same trajectory with
the preparation on its side thread as with it before each step, for device tables, tiered tables and
Herald's cache; which protocols prepare ahead; and a run stopped mid-epoch leaves no thread behind
and resumes exactly."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from gmp.comm.local import LocalEngine
from gmp.datasets.format import load_dataset
from gmp.train import TrainData, Trainer
from gmp.train import steps as steps_module
from gmp.train.protocol_herald import HeraldOnDemand
from gmp.train.protocol_hetgmp import BoundedStaleness
from train_data import make_config, make_ctr_dataset, random_placement

CONFIG = dict(model="wdl", embedding_dim=4, optimizer="adagrad", lr=0.1, batch_size=12, epochs=2, hidden=(8,),
              seed=3)


@pytest.fixture(scope="module")
def ctr(tmp_path_factory):
    return load_dataset(make_ctr_dataset(tmp_path_factory.mktemp("prep") / "ds"))


def trained(ds, num_workers, ahead: bool, monkeypatch, *, stop_after=None, **settings):
    """(table, dense parameters, threads that prepared, trainer) of a run with or without the look-ahead."""
    with monkeypatch.context() as m:
        if not ahead:
            m.setattr(BoundedStaleness, "prepares_ahead", False)
            m.setattr(HeraldOnDemand, "prepares_ahead", False)
        threads = set()
        prepare = steps_module.prepare

        def seen(*a, **k):
            threads.add(threading.current_thread().name)
            return prepare(*a, **k)

        m.setattr(steps_module, "prepare", seen)
        tr = Trainer(TrainData(ds), random_placement(ds, num_workers, secondaries=0.3),
                     make_config(**dict(CONFIG, **settings)), LocalEngine(num_workers))
        tr.fit(stop_after_steps=stop_after)
        if stop_after is not None:  # resume where it stopped
            tr.fit()
        out = (tr.embedding_table(), [p.detach().clone() for p in tr.model.parameters()], threads, tr)
    tr.close()
    return out


def assert_same_model(table_a, dense_a, table_b, dense_b) -> None:
    """The two runs' embedding tables and dense parameters are equal bit for bit."""
    np.testing.assert_array_equal(table_a, table_b)
    for a, b in zip(dense_a, dense_b):
        assert torch.equal(a, b)


@pytest.mark.parametrize("num_workers,settings", [(1, {}), (2, dict(staleness=0)), (2, dict(staleness=2.0))])
def test_preparing_ahead_changes_nothing(ctr, num_workers, settings, monkeypatch):
    table_a, dense_a, threads_a, _ = trained(ctr, num_workers, True, monkeypatch, **settings)
    table_b, dense_b, threads_b, _ = trained(ctr, num_workers, False, monkeypatch, **settings)
    assert_same_model(table_a, dense_a, table_b, dense_b)
    # the look-ahead prepared on its side thread (the evaluation prepares on the main one)
    assert "gmp-lookahead" in threads_a and "gmp-lookahead" not in threads_b


def test_which_protocols_prepare_ahead(ctr):
    """Every protocol but the pipelined one (which prepares step t + 1 inside step t) prepares on the
    pipeline's thread, tiered stores included: their rows stay pinned from admission to the step's end."""
    def protocol(**settings):
        return Trainer(TrainData(ctr), random_placement(ctr, 1), make_config(**dict(CONFIG, **settings)),
                       LocalEngine(1)).protocol

    assert protocol().prepares_ahead
    assert not protocol(pipeline=True, staleness=0).prepares_ahead
    assert protocol(tiers=dict(table_location="host", cache_rows=30)).prepares_ahead
    assert protocol(schedule="herald", schedule_options=HERALD).prepares_ahead


HERALD = dict(on_demand=True, cache_rows=6, read_only_replicas=False)
TIER = dict(table_location="host", cache_rows=40)
#: (workers, settings of the pipelined run, settings of the reference run: no thread, or no tier)
PIPELINES = {
    "tier-1": (1, dict(tiers=dict(TIER, lookahead=2)), dict()),
    "tier-2": (2, dict(staleness=0, tiers=dict(TIER, lookahead=2)), dict(staleness=0)),
    "tier-2-s2": (2, dict(staleness=2.0, tiers=dict(TIER, lookahead=1)), dict(staleness=2.0)),
    "herald-1": (1, dict(schedule="herald", schedule_options=HERALD), dict(schedule="herald",
                                                                            schedule_options=HERALD)),
    "herald-2": (2, dict(schedule="herald", schedule_options=dict(HERALD, lookahead=2)),
                 dict(schedule="herald", schedule_options=HERALD)),
    "herald-tier-2": (2, dict(schedule="herald", schedule_options=dict(HERALD, cache_rows=30, lookahead=1),
                              tiers=dict(TIER, lookahead=1)), dict(schedule="herald", schedule_options=HERALD)),
}


@pytest.mark.parametrize("case", sorted(PIPELINES))
def test_the_pipeline_changes_nothing_for_tiers_and_herald(ctr, case, monkeypatch):
    """Prepared on the pipeline's one thread (tier rows pinned, Herald's scheduler run ahead there)
    against prepared on the training thread with the table on the device: the same model bit for bit."""
    num_workers, settings, reference = PIPELINES[case]
    table_a, dense_a, threads_a, _ = trained(ctr, num_workers, True, monkeypatch, **settings)
    table_b, dense_b, threads_b, _ = trained(ctr, num_workers, False, monkeypatch, **reference)
    assert_same_model(table_a, dense_a, table_b, dense_b)
    assert "gmp-lookahead" in threads_a and "gmp-lookahead" not in threads_b


@pytest.mark.parametrize("case", ["tier-2", "herald-tier-2"])
def test_a_stop_mid_epoch_with_tiers_and_herald_resumes_exactly(ctr, case, monkeypatch):
    num_workers, settings, _ = PIPELINES[case]
    table_a, dense_a, _, _ = trained(ctr, num_workers, True, monkeypatch, **settings)
    table_b, dense_b, _, _ = trained(ctr, num_workers, True, monkeypatch, stop_after=4, **settings)
    assert not [t for t in threading.enumerate() if t.name == "gmp-lookahead"]
    assert_same_model(table_a, dense_a, table_b, dense_b)


def test_a_stop_mid_epoch_leaves_no_thread_and_resumes_exactly(ctr, monkeypatch):
    table_a, dense_a, _, _ = trained(ctr, 2, True, monkeypatch, staleness=0)
    table_b, dense_b, threads, _ = trained(ctr, 2, True, monkeypatch, staleness=0, stop_after=3)
    assert "gmp-lookahead" in threads
    assert not [t for t in threading.enumerate() if t.name == "gmp-lookahead"]
    assert_same_model(table_a, dense_a, table_b, dense_b)
