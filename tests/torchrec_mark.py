"""The optional peers (the ``peers`` extra): a mark for the tests that run TorchRec itself."""

from __future__ import annotations

import importlib.util

import pytest

HAVE_TORCHREC = importlib.util.find_spec("torchrec") is not None

needs_torchrec = pytest.mark.skipif(
    not HAVE_TORCHREC, reason="TorchRec is not installed (optional extra 'peers': pip install fbgemm-gpu-cpu==1.8.0 "
    "tensordict torchmetrics==1.0.3 pyre-extensions && pip install --no-deps torchrec==1.8.0)")
