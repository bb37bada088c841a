"""``gmp data synth --like D`` fits its model to D: a preset or a scale given with it is refused, as with
``--continue`` (both were ignored)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import gmp
from cli.main import app
from gmp.errors import DatasetError


@pytest.mark.parametrize("flags, said", [
    (["--preset", "tiny"], "--preset does not apply to --like"),
    (["--scale", "0.5"], "--scale does not apply to --like"),
    (["--preset", "tiny", "--scale", "2"], "--preset, --scale do not apply to --like"),
])
def test_like_refuses_a_preset_and_a_scale(tmp_path, flags, said):
    like = tmp_path / "d0"
    res = CliRunner().invoke(app, ["data", "synth", "--like", str(like), *flags, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.stderr.strip() == (f"error: {said}: the model is fitted to {like} (size it "
                                                         f"with --samples)."), res.output
    assert not (tmp_path / "o").exists()


def test_synthesize_refuses_a_preset_with_like(tmp_path):
    with pytest.raises(DatasetError, match="^`preset` does not apply to `like`"):
        gmp.synthesize(tmp_path / "o", like=tmp_path / "d0", preset="tiny")
    assert not (tmp_path / "o").exists()
