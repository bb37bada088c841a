"""The distributed engine: one process per worker under ``torchrun``.

Rank, world size and local rank come from the environment torchrun sets
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``; ``MASTER_ADDR``/``MASTER_PORT`` for
the rendezvous), so the usual multi-machine flags work unchanged::

    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 \\
             --rdzv-backend c10d --rdzv-endpoint host0:29500 \\
             --no-python gmp train D --manifest M

Backend: NCCL with ``cuda:<LOCAL_RANK>`` when CUDA is available, gloo on CPU
otherwise (``GMP_DIST_BACKEND`` overrides).

Failures: a collective waits at most the collective timeout
(:func:`collective_timeout`: ``--collective-timeout``, ``GMP_COLLECTIVE_TIMEOUT``,
default 600 s) for the slowest rank. A failed collective becomes one
:class:`~gmp.errors.TrainingError` line: with gloo a monitored barrier names
the ranks that do not answer (stopped, hung or dead), otherwise the message
says a peer died. The error carries ``rank`` and ``culprits`` so the CLI lets
one process speak.

Variable-size all-to-all: ``dist.all_to_all`` with tensor lists is not
implemented by gloo in every torch version, but ``all_to_all_single`` with
split sizes is, on gloo and NCCL alike. An exchange first swaps the per-peer
row counts (one int64 per peer, ``all_to_all_single``) unless the caller
already knows them (replies to requests, gradients following their ids), then
the flattened payload with ``input_split_sizes``/``output_split_sizes``.
Dense gradients are summed with one ``all_reduce`` over a flat buffer
(equivalent to DDP's bucketed all-reduce, without its hooks, since the model's
input rows are not parameters). Asynchronous collectives (``start_alltoallv``,
``start_all_reduce_dense``: the pipelined step's rows, the dense all-reduce) run on a
second process group, so a synchronous exchange issued while they are in flight does
not wait behind them; :meth:`DistributedEngine.close` waits for every one still
pending before the groups are destroyed.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import math
import os
import re
import socket
import time
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..constants import COLLECTIVE_TIMEOUT_S
from ..errors import TrainingError
from ..params import check_float
from .base import CommEngine

ENV_HINT = ("run it under torchrun, e.g. 'torchrun --standalone --nproc-per-node N --no-python gmp train DATASET "
            "--manifest M'")


def _first_line(exc: BaseException) -> str:
    """An exception's first line (its type's name when it says nothing): torch's messages run on for pages."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def collective_timeout(timeout_s: float | None = None) -> float:
    """Seconds a collective may wait for the slowest rank: ``timeout_s``, else the environment
    variable ``GMP_COLLECTIVE_TIMEOUT``, else :data:`gmp.constants.COLLECTIVE_TIMEOUT_S`."""
    if timeout_s is None:
        text = os.environ.get("GMP_COLLECTIVE_TIMEOUT")
        if text is None:
            return float(COLLECTIVE_TIMEOUT_S)
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not MIN_TIMEOUT_S <= value <= MAX_TIMEOUT_S:  # named as the variable the person set, not as a flag
            raise TrainingError(f"GMP_COLLECTIVE_TIMEOUT must be a number of seconds in [{MIN_TIMEOUT_S:g}, "
                                f"{MAX_TIMEOUT_S:g}], got {text!r}; set another value or unset it for the default "
                                f"{COLLECTIVE_TIMEOUT_S:g} s.")
        return value
    value = check_float("collective_timeout", timeout_s, minimum=0.0, strict=True, maximum=MAX_TIMEOUT_S,
                        error=TrainingError)
    if value < MIN_TIMEOUT_S:  # torch rounds to milliseconds: 1e-9 became 0, a failure in C++ on the first call
        exc = TrainingError(f"The 'collective_timeout' parameter must be at least {MIN_TIMEOUT_S:g} s (the "
                            f"collectives count in milliseconds), got {timeout_s!r}.")
        exc.param = "collective_timeout"
        raise exc
    return value


#: bounds of a collective's timeout in seconds: torch counts milliseconds, and a datetime.timedelta (its
#: argument) overflows near 8.6e13 s (``1e300`` was an OverflowError on every rank); 1e9 s is 31 years
MIN_TIMEOUT_S = 0.001
MAX_TIMEOUT_S = 1e9


def world_from_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment, or a TrainingError."""
    try:
        rank = int(os.environ["RANK"])
        world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
    except (KeyError, ValueError):
        raise TrainingError(f"`engine` distributed needs RANK and WORLD_SIZE in the environment; {ENV_HINT}.") from None
    return rank, world, local


class DistributedEngine(CommEngine):
    #: set once a process has joined its process group (:func:`gmp.launch.joined`)
    joined = False

    def __init__(self, *, backend: str | None = None, timeout_s: float | None = None, refused: str | None = None):
        """Join the process group of torchrun's launch (rank and world from its environment). The first
        collective is an exchange of refusals (:mod:`gmp.launch`): ``refused`` is this process's error
        line when it joins only to tell its peers that it refused its input; a rank whose checks passed
        raises one line naming the ranks that refused."""
        rank, world, local = world_from_env()
        timeout_s = collective_timeout(timeout_s)
        self.timeout_s = timeout_s
        self._failed = False
        use_cuda = torch.cuda.is_available()
        backend = backend or os.environ.get("GMP_DIST_BACKEND") or ("nccl" if use_cuda else "gloo")
        if backend == "nccl":
            if not use_cuda:
                raise TrainingError("backend nccl needs CUDA; use gloo on CPU machines.")
            per_machine, gpus = int(os.environ.get("LOCAL_WORLD_SIZE", "1")), torch.cuda.device_count()
            if per_machine > gpus:  # NCCL refuses two ranks on one GPU, in a message about something else
                raise TrainingError(f"{per_machine} processes on this machine but {gpus} GPU(s): NCCL needs one "
                                    f"GPU per process; run --nproc-per-node {gpus} (more machines for more "
                                    f"workers) or GMP_DIST_BACKEND=gloo.")
            self._device = torch.device("cuda", local % gpus)
            torch.cuda.set_device(self._device)
        else:
            self._device = torch.device("cpu")
        self.backend = backend
        self.rank = rank
        self.world_size = world
        self.local_workers = [rank]
        if not dist.is_initialized():
            kw = {"device_id": self._device} if backend == "nccl" else {}
            try:
                dist.init_process_group(backend, timeout=_dt.timedelta(seconds=timeout_s), **kw)
            except (RuntimeError, ValueError) as exc:  # torch's DistNetworkError, a missing MASTER_ADDR, ...
                first = _first_line(exc)[:200].rstrip(".")
                where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
                raise TrainingError(f"rank {rank} of {world} could not join the process group at {where} ({first}): "
                                    f"a peer did not arrive or left before the group formed (it may have refused "
                                    f"its own input: see that process's log, on its machine), or the processes "
                                    f"were not started by torchrun with the same rendezvous endpoint.") from None
        DistributedEngine.joined = True
        if dist.get_world_size() != world or dist.get_rank() != rank:
            raise TrainingError("the process group disagrees with RANK/WORLD_SIZE from the environment.")
        # a second, idle gloo group: after a timeout gloo closes the main group's connections, so
        # the monitored barrier that names the late ranks runs on its own
        self._monitor = dist.new_group(backend="gloo", timeout=_dt.timedelta(seconds=timeout_s)) if world > 1 else None
        # the asynchronous collectives (start_*) on a group of their own: a synchronous one issued
        # meanwhile (the next step's id exchange) must not queue behind them (one group runs its
        # collectives in the order they were issued)
        self._async = dist.new_group(backend=backend, timeout=_dt.timedelta(seconds=timeout_s)) if world > 1 else None
        #: started asynchronous collectives not yet waited for (close() waits for them)
        self._pending: list[_AsyncWork] = []
        super().__init__()
        self._share_refusals(refused)

    def _share_refusals(self, refused: str | None) -> None:
        """Collective, the group's first: every rank's refusal before the join (None: its checks passed) and
        host. A rank that did not refuse, where another did, leaves the group and raises the line naming them:
        the refusing rank's own line when it is on another machine (this machine's log has not got it), a
        pointer to it otherwise."""
        if self._monitor is None:
            return
        said: list = [None] * self.world_size
        with self._collective("start"):
            dist.all_gather_object(said, (refused, socket.gethostname()), group=self._monitor)
        ranks = [r for r, (line, _) in enumerate(said) if line is not None]
        if not ranks or refused is not None:
            return
        first, (line, host) = ranks[0], said[ranks[0]]
        who = (f"rank {first}" if len(ranks) == 1 else
               f"ranks {', '.join(map(str, ranks[:8]))}{' ...' if len(ranks) > 8 else ''} (first rank {first})")
        why = ("its error line is in this machine's log" if host == socket.gethostname() else
               f"on {host}: {line.rstrip('.')}")
        self.close(clean=False)
        raise TrainingError(f"{who} refused {'its' if len(ranks) == 1 else 'their'} input before the process group "
                            f"formed ({why}); nothing was done here: fix that input and start every process again.")

    def device_for(self, worker: int) -> torch.device:
        return self._device

    @property
    def num_pending(self) -> int:
        """Asynchronous collectives started and not yet waited for."""
        return len(self._pending)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @contextlib.contextmanager
    def _collective(self, op: str):
        """Turn a failed collective (a dead, stopped or hung peer) into one TrainingError line."""
        started = time.monotonic()
        try:
            yield
        except RuntimeError as exc:  # torch.distributed's errors (DistBackendError, gloo timeouts) are RuntimeErrors
            raise self._failure(op, exc, started) from None

    def _failure(self, op: str, exc: BaseException, started: float) -> TrainingError:
        """The line for collective ``op`` that failed with ``exc`` (it began at ``time.monotonic()``
        ``started``). Rank 0 names the ranks missing from a monitored barrier: gone before the timeout
        (a process that ended or closed its connection), or not there after it (stopped or hung). A
        rank other than 0 learns only whether rank 0 answered; one that did not is named as what it
        may be, the stopped process (when it is, no other line names it: ``err.speaks``)."""
        self._failed = True
        late, rank0_silent = self._late_ranks()
        timeout = (f"the collective timeout of {self.timeout_s:g} s (a stopped or hung process; set the timeout "
                   f"with GMP_COLLECTIVE_TIMEOUT, or gmp train's --collective-timeout)")
        speaks = False
        waited = time.monotonic() - started >= 0.5 * self.timeout_s  # else a peer ended, none hung
        if late and not waited:
            msg = (f"rank {self.rank}: the {op} collective did not complete: rank(s) {', '.join(map(str, late))} "
                   f"left it (the process ended, or its connection closed).")
        elif late:
            msg = (f"rank {self.rank}: the {op} collective did not complete: rank(s) {', '.join(map(str, late))} did "
                   f"not reach it within {timeout}.")
        elif rank0_silent and waited:
            speaks = True  # said once per machine (the line names no rank of its own)
            msg = (f"the {op} collective did not complete within {timeout}, and rank 0 did not answer the check of "
                   f"which ranks are missing: rank 0's line names them; if rank 0 printed none, rank 0 is the "
                   f"stopped, hung or lost process.")
        else:
            # without gloo's source path, one sentence
            first = re.sub(r"^\[[^\]]*\]\s*", "", _first_line(exc)).split(". ")[0][:160]
            msg = (f"rank {self.rank}: the {op} collective failed: a peer process died or closed its connection "
                   f"({first}).")
        err = TrainingError(msg)
        err.rank = self.rank
        err.culprits = late
        err.speaks = speaks
        return err

    def _late_ranks(self) -> tuple[list[int], bool]:
        """After a failed collective: the ranks that do not answer a monitored barrier on the idle
        monitor group (rank 0 learns them; [] when it cannot tell), and whether rank 0 did not answer
        this rank's part of it (a rank other than 0 learns only that)."""
        if self._monitor is None:
            return [], False
        try:
            dist.monitored_barrier(group=self._monitor, timeout=_dt.timedelta(seconds=min(10.0, self.timeout_s)),
                                   wait_all_ranks=True)
        except RuntimeError as exc:
            text = str(exc)
            # rank 0 collects the barrier and names the ranks that never came; the others only learn
            # that rank 0 did not answer, which it does not when anyone is missing: they cannot tell
            m = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", text)
            if m:
                return sorted(int(x) for x in re.findall(r"\d+", m.group(1))), False
            return [], self.rank != 0 and bool(re.search(r"\bfrom rank 0\b", text))
        return [], False

    def _alltoallv(self, sends: Sequence[Sequence[torch.Tensor]], category: str | None, *,
                  recv_counts: Sequence[Sequence[int]] | None = None) -> list[list[torch.Tensor]]:
        with self._collective("all-to-all"):
            return self._alltoallv_unguarded(sends, category, recv_counts=recv_counts)

    def _alltoallv_unguarded(self, sends: Sequence[Sequence[torch.Tensor]], category: str | None, *,
                             recv_counts: Sequence[Sequence[int]] | None = None) -> list[list[torch.Tensor]]:
        (mine,) = sends
        if len(mine) != self.world_size:
            raise TrainingError("alltoallv: one tensor per destination is required.")
        self.count_sends(sends, category)
        trailing = tuple(mine[0].shape[1:])
        per_row = int(np.prod(trailing)) if trailing else 1
        dev = self._device
        if recv_counts is not None:
            rc = [int(c) for c in recv_counts[0]]
        else:
            send_counts = torch.tensor([int(t.shape[0]) for t in mine], dtype=torch.int64, device=dev)
            counts = torch.empty_like(send_counts)
            dist.all_to_all_single(counts, send_counts)
            rc = counts.tolist()
        flat = torch.cat([t.reshape(-1).to(dev) for t in mine])
        out = torch.empty(sum(rc) * per_row, dtype=flat.dtype, device=dev)
        dist.all_to_all_single(out, flat, [c * per_row for c in rc], [int(t.shape[0]) * per_row for t in mine])
        parts = torch.split(out, [c * per_row for c in rc])
        return [[p.view(-1, *trailing) if trailing else p for p in parts]]

    def start_alltoallv(self, sends: Sequence[Sequence[torch.Tensor]], category: str, *,
                        recv_counts: Sequence[Sequence[int]]):
        """:meth:`CommEngine.start_alltoallv` issued with ``async_op=True`` (one rank: at once)."""
        if self.world_size == 1:
            return super().start_alltoallv(sends, category, recv_counts=recv_counts)
        (mine,) = sends
        self.count_sends(sends, category)
        trailing = tuple(mine[0].shape[1:])
        per_row = int(np.prod(trailing))
        rc = [int(c) for c in recv_counts[0]]
        flat = torch.cat([t.reshape(-1).to(self._device) for t in mine])  # a copy: later in-place updates don't leak in
        out = torch.empty(sum(rc) * per_row, dtype=flat.dtype, device=self._device)
        with self._collective("asynchronous all-to-all"):
            work = dist.all_to_all_single(out, flat, [c * per_row for c in rc],
                                          [int(t.shape[0]) * per_row for t in mine], group=self._async,
                                          async_op=True)
        def result():
            parts = torch.split(out, [c * per_row for c in rc])
            return [[p.view(-1, *trailing) for p in parts]]

        return _AsyncWork(work, result, self, "asynchronous all-to-all")

    def start_all_reduce_dense(self, flat: torch.Tensor):
        """:meth:`CommEngine.start_all_reduce_dense` issued with ``async_op=True``."""
        if self.world_size == 1:
            return super().start_all_reduce_dense(flat)
        self.count(0, "dense_allreduce", flat.numel() * flat.element_size())
        flat = flat.to(self._device)
        with self._collective("asynchronous dense all-reduce"):
            work = dist.all_reduce(flat, group=self._async, async_op=True)
        return _AsyncWork(work, lambda: flat, self, "asynchronous dense all-reduce")

    def _all_reduce_dense(self, flat: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            self.count(0, "dense_allreduce", flat.numel() * flat.element_size())
        flat = flat.to(self._device)
        with self._collective("dense all-reduce"):
            dist.all_reduce(flat)
        return flat

    def sum_across(self, values: np.ndarray) -> np.ndarray:
        t = torch.as_tensor(np.asarray(values, dtype=np.float64), device=self._device).clone()
        with self._collective("all-reduce"):
            dist.all_reduce(t)
        return t.cpu().numpy()

    def gather(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        (mine,) = arrays
        t = torch.as_tensor(np.asarray(mine, dtype=np.float64).reshape(-1), device=self._device)
        size = torch.tensor([t.numel()], dtype=torch.int64, device=self._device)
        sizes = [torch.empty_like(size) for _ in range(self.world_size)]
        with self._collective("all-gather"):
            dist.all_gather(sizes, size)
        sizes = [int(s.item()) for s in sizes]
        longest = max(sizes)
        padded = torch.zeros(longest, dtype=torch.float64, device=self._device)
        padded[: t.numel()] = t
        bufs = [torch.empty_like(padded) for _ in range(self.world_size)]
        with self._collective("all-gather"):
            dist.all_gather(bufs, padded)
        return [b[:k].cpu().numpy() for b, k in zip(bufs, sizes)]

    def barrier(self) -> None:
        with self._collective("barrier"):
            if self.backend == "nccl":
                dist.barrier(device_ids=[self._device.index])
            else:
                dist.barrier()

    def broadcast_object(self, obj, src: int = 0):
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def close(self, *, clean: bool = True) -> None:
        """Wait for every started asynchronous collective and drop it, then tear the groups down.
        ``clean=False`` (an error of this process alone): as after a failed collective, no wait and no
        barrier -- the peers are in another collective, which a barrier here would pair with.

        A gloo work object that outlives its process group, or is freed while the interpreter
        exits, holds tensors whose release needs the GIL then: the rank aborts at exit
        ("terminate called without an active exception", SIGABRT) after its work is done."""
        if not dist.is_initialized():
            return
        self._failed = self._failed or not clean
        try:
            if not self._failed:
                for work in list(self._pending):
                    work.wait()
            # let every rank finish its last collective before the groups are torn down (tearing
            # gloo down while a peer is still sending aborted a rank at exit in the bench); after a
            # failed collective a barrier would wait for the lost peer again
            if not self._failed:
                self.barrier()
        finally:
            self._pending.clear()
            if not self._failed:  # (after a failure the error line must go out before torchrun's SIGTERM)
                gc.collect()  # work objects in reference cycles go now, not during interpreter exit
            dist.destroy_process_group()


class _AsyncWork:
    """A collective started with ``async_op=True``; :meth:`wait` returns ``result()`` once it is done
    (the wait is timed into the engine's ``seconds`` while it counts)."""

    def __init__(self, work, result, engine: DistributedEngine, op: str):
        self.work, self.result, self.engine, self.op = work, result, engine, op
        self.started = time.monotonic()
        engine._pending.append(self)

    def wait(self):
        """The result; waiting again returns it again. The gloo work object is released here."""
        if self.work is not None:
            t0 = time.perf_counter()
            try:
                self.work.wait()
            except RuntimeError as exc:
                raise self.engine._failure(self.op, exc, self.started) from None
            finally:
                if self.engine.counting:
                    self.engine.seconds += time.perf_counter() - t0
            self.work = None
            self.engine._pending.remove(self)
        return self.result()
