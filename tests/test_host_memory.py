"""A CPU run keeps its freed host memory for the next step (gmp/train/host_memory.py): large blocks come
from the heap, not from an mmap of their own, and freeing them gives nothing back; results are unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gmp.errors import TrainingError
from gmp.train import host_memory

from train_data import make_ctr_dataset

ROOT = Path(__file__).resolve().parents[1]

# in a fresh process (mallopt changes the whole process): glibc's own count of the bytes in blocks mapped
# one by one (mallinfo2's hblkhd) and of the heap (arena), around a 64 MiB array and its release
PROBE = """
import ctypes, json, sys, numpy as np, torch
from gmp.train import host_memory
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
devices = [torch.device(sys.argv[1])]
if sys.argv[2] == "after":  # a block inside the scope, then one after leaving it
    import os
    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    with host_memory.kept_between_steps(devices) as kept:
        b = np.ones(64 << 17)
        del b
        kept_rss = rss()  # the freed block's pages still resident
    given_back = kept_rss - rss()  # what leaving gave back
else:
    kept = host_memory.keep_freed_memory(devices)
    given_back = None
before = libc.mallinfo2()
a = np.ones(64 << 17)  # 64 MiB of float64
during = libc.mallinfo2()
del a
after = libc.mallinfo2()
print(json.dumps({"kept": kept, "mapped": during.hblkhd - before.hblkhd, "given_back": given_back,
                  "heap_grew": during.arena - before.arena, "heap_after_free": after.arena - before.arena}))
"""

needs_glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or host_memory._libc() is None,
                                 reason="glibc's mallopt only")


def probe(device: str, keep: str | None, mode: str = "keep") -> dict:
    env = {k: v for k, v in os.environ.items() if k != host_memory.KEEP_ENV}
    if keep is not None:
        env[host_memory.KEEP_ENV] = keep
    res = subprocess.run([sys.executable, "-c", PROBE, device, mode], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


@needs_glibc
def test_a_large_block_comes_from_the_heap_and_stays_there():
    got = probe("cpu", None)
    assert got["kept"] is True
    assert got["mapped"] == 0  # not an mmap of its own
    # the heap grew by the array (less what it had free before) and the free gave none of it back
    assert got["heap_grew"] >= 60 << 20 and got["heap_after_free"] == got["heap_grew"]


@needs_glibc
def test_switched_off_or_on_a_gpu_the_allocator_is_glibcs_own():
    """The control: the same 64 MiB array is an mmap of its own, given back on free (what made every step
    fault its pages in again)."""
    for device, keep in (("cpu", "0"), ("cuda", None)):
        got = probe(device, keep)
        assert got["kept"] is False
        assert got["mapped"] >= 64 << 20 and got["heap_after_free"] < 1 << 20, (device, keep, got)


@needs_glibc
def test_leaving_the_scope_gives_the_memory_back_and_maps_large_blocks_again():
    """What a notebook keeps after training: nothing (the kept 64 MiB trimmed, mmaps back on)."""
    got = probe("cpu", None, "after")
    assert got["kept"] is True
    assert got["given_back"] >= 60 << 20  # the pages of the block freed inside were given back on leaving
    assert got["mapped"] >= 64 << 20 and got["heap_after_free"] < 1 << 20


def test_a_bad_setting_is_one_error(monkeypatch):
    monkeypatch.setenv(host_memory.KEEP_ENV, "yes")
    with pytest.raises(TrainingError, match="GMP_KEEP_HOST_MEMORY is 'yes'; expected 1 .* or 0"):
        host_memory.wanted()
    monkeypatch.setenv(host_memory.KEEP_ENV, "0")
    assert host_memory.wanted() is False and host_memory.keep_freed_memory(["cpu"]) is False


@needs_glibc
def test_gmp_train_gives_the_same_records_with_and_without(tmp_path):
    """The same computation with the pages kept: every loss, AUC and count of the run is equal (the wall-clock
    keys, "...seconds" and samples_per_sec, and the run id left out)."""
    path = make_ctr_dataset(tmp_path / "ds", num_samples=400)
    logs = {keep: tmp_path / f"run{keep}.jsonl" for keep in ("1", "0")}
    argv = {keep: ["--epochs", "2", "--batch-size", "32", "--model", "dcn", "--log-json", str(log)]
            for keep, log in logs.items()}
    argv["2"] = []  # refused
    # the three processes side by side (the allocator's settings are a process's own, hence processes)
    procs = {keep: subprocess.Popen([sys.executable, "-m", "cli.main", "train", "--dataset", str(path), *args],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                    env={**os.environ, host_memory.KEEP_ENV: keep})
             for keep, args in argv.items()}
    done = {keep: (p.communicate(timeout=300), p.returncode) for keep, p in procs.items()}
    out = {}
    for keep, log in logs.items():
        (_, err), code = done[keep]
        assert code == 0, err[-2000:]
        out[keep] = [{k: v for k, v in json.loads(line).items() if k != "run" and "sec" not in k}
                     for line in log.read_text().splitlines() if json.loads(line)["kind"] == "epoch"]
    assert len(out["1"]) == 2 and out["1"] == out["0"]
    (_, err), code = done["2"]
    assert code != 0 and err.strip().splitlines() == [
        "error: The environment variable GMP_KEEP_HOST_MEMORY is '2'; expected 1 (keep a step's freed memory for "
        "the next step, the default) or 0 (leave the C library's allocator as it is)."], err
