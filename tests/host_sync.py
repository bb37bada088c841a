"""Find host synchronisations inside a training step (issue 33, item 1).

A device-resident step never waits for the device: no ``.item()``, ``.tolist()``, ``.cpu()``,
``.numpy()`` and no Python or numpy conversion of a tensor (``float(t)``, ``int(t)``,
``bool(t)``, ``np.asarray(t)``) between taking a prepared batch and the optimizer update
returning. On CUDA ``torch.cuda.set_sync_debug_mode("error")`` finds them; on the CPU, where
nothing waits, :func:`watch_host_syncs` patches those calls for the window and records where
each one came from (the first frame inside ``gmp/``), so a test can fail on the CPU where the
same code would stall a GPU.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Iterator

import torch

GMP_DIR = str(Path(__file__).resolve().parents[1] / "gmp")

#: the ``torch.Tensor`` methods that copy a tensor to the host or read it there
SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__array__", "__float__", "__int__", "__bool__", "__index__")
#: the ``torch`` functions that make a tensor of host data: on CUDA a blocking copy to the device,
#: which waits for the stream too (recorded as ``upload:<name>`` when given host data, not a tensor)
UPLOAD_FUNCTIONS = ("as_tensor", "tensor", "from_numpy")


def _caller() -> str | None:
    """``path:line (function)`` of the direct caller when it is gmp's code, else None: torch's own
    reads of host-held scalars (an optimizer's step counter, kept on the CPU unless ``capturable``)
    are no device synchronisation."""
    f = sys._getframe(2)
    name = f.f_code.co_filename
    if name.startswith(GMP_DIR):
        return f"{Path(name).relative_to(Path(GMP_DIR).parent)}:{f.f_lineno} ({f.f_code.co_name})"
    return None


class HostSyncs:
    """The host synchronisations seen in the watched windows: ``sites[(method, where)] = count``;
    ``uploads[(function, where)]``: tensors made of host data there (:data:`UPLOAD_FUNCTIONS`)."""

    def __init__(self) -> None:
        self.sites: Counter = Counter()
        self.uploads: Counter = Counter()
        self.active = False
        self.thread: int | None = None  # the thread running the step (a look-ahead thread prepares, not steps)

    def report(self, uploads: bool = False) -> str:
        sites = self.uploads if uploads else self.sites
        return "\n".join(f"  {n:5d} x {m} at {w}" for (m, w), n in sorted(sites.items()))


@contextlib.contextmanager
def watch_host_syncs() -> Iterator[HostSyncs]:
    """Patch :data:`SYNC_METHODS` for the context; a call made while ``syncs.active`` is true from
    gmp's code is recorded in ``syncs.sites``. Set ``syncs.active`` around each step window
    (:func:`step_window`)."""
    syncs = HostSyncs()
    originals = {m: getattr(torch.Tensor, m) for m in SYNC_METHODS}
    makers = {f: getattr(torch, f) for f in UPLOAD_FUNCTIONS}

    def wrap_maker(name, fn):
        def watched(data, *a, **k):
            if syncs.active and threading.get_ident() == syncs.thread and not isinstance(data, torch.Tensor):
                where = _caller()
                if where is not None:
                    syncs.uploads[(name, where)] += 1
            return fn(data, *a, **k)
        return watched

    def wrap(name, fn):
        def watched(self, *a, **k):
            if syncs.active and threading.get_ident() == syncs.thread:
                where = _caller()
                if where is not None:
                    syncs.sites[(name, where)] += 1
            return fn(self, *a, **k)
        return watched

    try:
        for m, fn in originals.items():
            setattr(torch.Tensor, m, wrap(m, fn))
        for f, fn in makers.items():
            setattr(torch, f, wrap_maker(f, fn))
        yield syncs
    finally:
        for m, fn in originals.items():
            setattr(torch.Tensor, m, fn)
        for f, fn in makers.items():
            setattr(torch, f, fn)


@contextlib.contextmanager
def step_window(syncs: HostSyncs, device: torch.device) -> Iterator[None]:
    """One step's window: recorded on the CPU, an error for any synchronisation on CUDA."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.set_sync_debug_mode("error")
    syncs.thread = threading.get_ident()
    syncs.active = True
    try:
        yield
    finally:
        syncs.active = False
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
