"""The batch preparation stage ahead of the step (issue 33, gmp/train/prepare.py): the same
trajectory with the preparation on a side thread as with it before each step, which protocols and
stores may prepare ahead, and a run stopped mid-epoch leaves no preparation thread behind."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from gmp.comm.local import LocalEngine
from gmp.datasets.format import load_dataset
from gmp.train import TrainData, Trainer
from gmp.train import steps as steps_module
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
            m.setattr(BoundedStaleness, "prepares_ahead", property(lambda self: False))
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


@pytest.mark.parametrize("num_workers,settings", [(1, {}), (2, dict(staleness=0)), (2, dict(staleness=2.0))])
def test_preparing_ahead_changes_nothing(ctr, num_workers, settings, monkeypatch):
    table_a, dense_a, threads_a, _ = trained(ctr, num_workers, True, monkeypatch, **settings)
    table_b, dense_b, threads_b, _ = trained(ctr, num_workers, False, monkeypatch, **settings)
    np.testing.assert_array_equal(table_a, table_b)
    for a, b in zip(dense_a, dense_b):
        assert torch.equal(a, b)
    # the look-ahead prepared on its side thread (the evaluation prepares on the main one)
    assert "gmp-lookahead" in threads_a and "gmp-lookahead" not in threads_b


def test_only_fixed_layouts_prepare_ahead(ctr):
    """A tiered store moves its slots during a step: its steps are prepared inside them, not ahead."""
    def protocol(**settings):
        return Trainer(TrainData(ctr), random_placement(ctr, 1), make_config(**dict(CONFIG, **settings)),
                       LocalEngine(1)).protocol

    assert protocol().prepares_ahead
    assert not protocol(pipeline=True, staleness=0).prepares_ahead
    tiered = protocol(tiers=dict(table_location="host", cache_rows=30))
    assert not tiered.prepares_ahead


def test_a_stop_mid_epoch_leaves_no_thread_and_resumes_exactly(ctr, monkeypatch):
    table_a, dense_a, _, _ = trained(ctr, 2, True, monkeypatch, staleness=0)
    table_b, dense_b, threads, _ = trained(ctr, 2, True, monkeypatch, staleness=0, stop_after=3)
    assert "gmp-lookahead" in threads
    assert not [t for t in threading.enumerate() if t.name == "gmp-lookahead"]
    np.testing.assert_array_equal(table_a, table_b)
    for a, b in zip(dense_a, dense_b):
        assert torch.equal(a, b)
