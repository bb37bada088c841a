"""Knobs of :func:`gmp.synthesize` that a preset's model does not read are refused, not ignored; a
preset's own layout is not a knob (one-line error, not Python's "multiple values" TypeError)."""

from __future__ import annotations

import pytest

import gmp
from gmp.datasets.synth import ENTITY_KNOBS, SynthConfig, preset_config
from gmp.errors import DatasetError

#: a value of every knob only the latent-entity model reads, each valid for a tiny-sized entity model
ENTITY_VALUES = {
    "entity_counts": (5,),
    "entity_skew": 0.9,
    "field_entity": (0,) * 8,
    "fidelity": 0.5,
    "field_skews": (0.5,) * 8,
    "segments": 4,
    "coherence": 0.5,
    "session_length": 5,
    "session_share": 0.3,
    "fresh": 0.1,
    "field_tails": (0.1,) * 8,
    "entity_tail": 0.5,
    "field_fresh": (0.1,) * 8,
}


def test_every_entity_knob_has_a_value_here():
    assert set(ENTITY_VALUES) == set(ENTITY_KNOBS)


@pytest.mark.parametrize("preset", ["tiny", "criteo-kaggle-independent"])
@pytest.mark.parametrize("knob", sorted(ENTITY_VALUES))
def test_entity_knobs_are_refused_on_independent_presets(tmp_path, preset, knob):
    with pytest.raises(DatasetError, match=rf"^synth: `{knob}` appl(y|ies) to the latent-entity model "
                                           rf"\('criteo-kaggle' or `like`\), not to preset '{preset}'"):
        gmp.synthesize(tmp_path / "out", preset=preset, num_samples=100, **{knob: ENTITY_VALUES[knob]})
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("knob, value", [("segments", -3), ("session_length", -1), ("session_share", 0.0),
                                         ("field_skews", None)])
def test_a_knob_is_refused_on_tiny_whatever_its_value(knob, value):
    """Given is refused, even at a value the entity model would take as its default or would reject."""
    with pytest.raises(DatasetError, match=rf"`{knob}` applies to the latent-entity model"):
        preset_config("tiny", num_samples=100, **{knob: value})


def test_an_independent_config_built_directly_refuses_entity_knobs():
    with pytest.raises(DatasetError, match=r"`field_skews`, `segments` apply to the latent-entity model .* not to "
                                           r"the independent model"):
        SynthConfig(cardinalities=(3, 4), num_samples=10, field_skews=(1.0, 1.0), segments=2)
    SynthConfig(cardinalities=(3, 4), num_samples=10, segments=0, fidelity=0.8)  # the defaults: nothing to refuse


@pytest.mark.parametrize("knob, value, message", [
    ("segments", -3, r"`segments` must be an integer >= 0, got -3"),
    ("session_length", -1, r"session_length must be an integer >= 1, got -1"),
    ("session_share", 1.5, r"session_share must be in \[0.0, 1.0\], got 1.5"),
    ("entity_tail", -0.5, r"entity_tail must be in \[0.0, 1.0\], got -0.5"),
    ("field_skews", (1.0,) * 3, r"field_skews has 3 entries for 26 fields"),
])
def test_entity_knobs_are_range_checked_on_entity_presets(tmp_path, knob, value, message):
    with pytest.raises(DatasetError, match=message):
        gmp.synthesize(tmp_path / "out", preset="criteo-kaggle", num_samples=100, **{knob: value})


@pytest.mark.parametrize("preset", ["tiny", "criteo-kaggle"])
@pytest.mark.parametrize("knob, value", [("cardinalities", (3, 4)), ("num_dense", 2), ("field_names", ("a",)),
                                         ("local_fields", (True,)), ("model", "entities")])
def test_a_presets_layout_is_not_a_knob(tmp_path, preset, knob, value):
    with pytest.raises(DatasetError, match=rf"^synth: `{knob}` is set by preset '{preset}', not a knob; for another "
                                           rf"layout build a SynthConfig"):
        gmp.synthesize(tmp_path / "out", preset=preset, num_samples=100, **{knob: value})
