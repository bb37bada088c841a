"""Where a process's CPU time goes, by Linux ``perf`` samples of its own code: torch's operator
kernels, numpy, the kernel's freeing of memory, Python (issue 33, the step bench's ``--perf``).

``torch.profiler``'s "outside operators" is wall time between operator events: it counts a
preemption of the process on a loaded machine, and the ``munmap`` of a large tensor freed
between two operators, as host work. ``perf`` samples the CPU time of this process (user and
kernel) with call chains, and each sample is put in the first class that matches its frames:

* ``ops``: a frame in ``libtorch_cpu`` (an operator's kernel; ``ops_memory`` is the part in the
  kernel's page-fault and page-clearing code, first touches of freshly mapped tensor memory);
* ``numpy``: a frame in numpy or numba code;
* ``free``: the kernel unmapping memory (glibc returns every freed block above its mmap
  threshold, 32 MiB at most, to the system);
* ``python``: the interpreter, torch's Python binding, c10's tensor bookkeeping, libc;
* ``other``.

    with PerfSplit() as perf:        # None of its methods fail: without perf, .available is False
        for x in work:
            with perf.window():      # only the time inside windows is sampled
                run(x)
    print(perf.classes())            # {"ops": seconds, ...}

Needs ``perf`` on the PATH and the right to profile this process (root, or
``kernel.perf_event_paranoid`` <= 1).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

CLASSES = ("ops", "ops_memory", "numpy", "free", "python", "other")
_FREE = re.compile(r"munmap|madvise|unmap_|zap_|free_pages|release_pages|tlb_finish|free_unref")
_FAULT = re.compile(r"page_fault|clear_page|handle_mm_fault|do_anonymous_page|alloc_pages")


def classify(frames: list[tuple[str, str]]) -> str:
    """The class of one sample from its ``(symbol, shared object)`` frames, leaf first."""
    dsos = [d for _, d in frames]
    syms = [s for s, _ in frames]
    if any("libtorch_cpu" in d for d in dsos):
        kernel = any("kernel.kallsyms" in d for d in dsos)
        return "ops_memory" if kernel and any(_FAULT.search(s) for s in syms) else "ops"
    if any("/numpy/" in d or "_multiarray_umath" in d or "numba" in d for d in dsos):
        return "numpy"
    if any(_FREE.search(s) for s in syms):
        return "free"
    if any(x in d for d in dsos for x in ("libpython", "libtorch_python", "libc10", "libc.so", "python3")):
        return "python"
    return "other"


class PerfSplit:
    """``perf record`` attached to this process, sampling only inside :meth:`window` (module docstring)."""

    def __init__(self, frequency: int = 2999) -> None:
        self.frequency = frequency
        self.available = False
        self.samples = collections.Counter()
        self.seconds_sampled = 0

    def __enter__(self) -> "PerfSplit":
        if shutil.which("perf") is None:
            return self
        self._dir = Path(tempfile.mkdtemp(prefix="gmp-perf-"))
        self._ctl, self._ack, self._data = self._dir / "ctl", self._dir / "ack", self._dir / "perf.data"
        os.mkfifo(self._ctl)
        os.mkfifo(self._ack)
        self._proc = subprocess.Popen(
            ["perf", "record", "-F", str(self.frequency), "-g", "-D", "-1", "-p", str(os.getpid()),
             "--control", f"fifo:{self._ctl},{self._ack}", "-o", str(self._data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self._cmd("disable")  # blocks until perf has opened its control fifo
            self.available = True
        except OSError:
            self._proc.kill()
        return self

    def _cmd(self, what: str) -> None:
        with open(self._ctl, "w") as ctl:
            ctl.write(what + "\n")
        with open(self._ack) as ack:
            ack.readline()

    @contextlib.contextmanager
    def window(self):
        if self.available:
            self._cmd("enable")
        try:
            yield
        finally:
            if self.available:
                self._cmd("disable")

    def __exit__(self, *exc) -> None:
        if not self.available:
            return
        self._proc.send_signal(signal.SIGINT)
        self._proc.wait()
        out = subprocess.run(["perf", "script", "-i", str(self._data), "-F", "ip,sym,dso"],
                             capture_output=True, text=True).stdout
        frames: list[tuple[str, str]] = []
        for line in out.splitlines() + [""]:
            if not line.strip():
                if frames:
                    self.samples[classify(frames)] += 1
                frames = []
                continue
            m = re.match(r"\s*[0-9a-f]+ (.*) \((.*)\)$", line)
            if m:
                frames.append((m.group(1), m.group(2)))
        shutil.rmtree(self._dir, ignore_errors=True)

    def shares(self) -> dict[str, float]:
        """Each class's share of the samples (empty without perf or samples)."""
        total = sum(self.samples.values())
        return {k: self.samples[k] / total for k in CLASSES} if total else {}
