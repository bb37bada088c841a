"""Launching test scripts under torchrun (gloo, one node) on a free local port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int, args: list[str], *, timeout: float = 240, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``torchrun`` with ``nproc`` processes on one node running ``args``; one thread each, the repository on
    ``PYTHONPATH``, ``env`` added to the environment."""
    torchrun_bin = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    cmd = [torchrun_bin, "--nnodes", "1", "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{free_port()}", *args]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)


def two_machines(args: list[list[str]], *, timeout: float = 240, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> list[subprocess.CompletedProcess]:
    """Two torchrun launches of one process each, as on two machines (``--nnodes 2``, static rendezvous on
    127.0.0.1), node ``r`` running ``args[r]``; the results in node order."""
    torchrun_bin = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    port = free_port()
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    procs = [subprocess.Popen([torchrun_bin, "--nnodes", "2", "--node-rank", str(r), "--nproc-per-node", "1",
                               "--master-addr", "127.0.0.1", "--master-port", str(port), *a],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, cwd=cwd)
             for r, a in enumerate(args)]
    done = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return done
