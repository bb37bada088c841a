"""The memory pre-check of the distributed hybrid (docs/distributed.md, "Memory").

After the first exchange (the shard's row degrees to the owners) every process knows what sizes
its arrays: its ghost rows G (the rows its shard touches), its owned rows O and its samples S.
Nothing large has been allocated yet beyond the shard itself. Each process estimates what it will
still allocate (:func:`bytes_to_come`), the processes of one host (:func:`host_key`) add theirs up
(they share its memory, and every exchange runs on all of them at once), and when a host's sum
exceeds the memory available there every process raises the same one-line error before the start,
instead of the kernel killing one of them an hour in.

The estimate counts the arrays the rounds hold and the largest exchange (every ghost's full row:
an int64 row of 1 + N columns, held four times at once: the table, its per-owner parts, the
engine's send copy and its receive buffer, beside the int32 counts being sent). It leaves out
rank 0's merge of the start's pair keys and METIS (bounded by ``coarse_pairs``, about 3 GB at
24M pairs) and the pages of the memory-mapped dataset (reclaimable): meant as a lower bound. On
the 10M ``criteo-kaggle`` draw with 2 processes it says 4.7 GiB (5.0 GB) per process; a process's
peak ``ru_maxrss`` was ~5.7 GB above its RSS just after the set-up, rank 0's start and mapped
pages included (docs/distributed.md). With one
process (the out-of-core path) the ghosts are the owned rows and nothing is exchanged; it is not
checked here.
"""

from __future__ import annotations

import os
import socket
import zlib

import numpy as np

from ..._memory import available_memory
from ...errors import PartitionError
from ...kernels.simd import padded_width
from .exchange import Mesh


def bytes_to_come(num_ghosts: int, num_owned: int, num_samples: int, num_workers: int, *,
                  streamed: bool) -> int:
    """Bytes a process of two or more still allocates after the set-up (module docstring).

    ``num_ghosts``, ``num_owned``, ``num_samples``: its ghost rows, owned rows and shard samples;
    ``streamed``: the shard is read in chunks (no per-sample count of private rows is kept)."""
    n, width = int(num_workers), padded_width(int(num_workers))
    # per ghost: counts int32 [N], primary, marginal row float64 [W], holder bits, private flag
    ghost = 4 * n + 4 + 8 * width + 8 + 1
    # per owned row: counts int32 [N], primary
    owned = 4 * n + 4
    # per sample: worker, the flat sweep's copy of it, private rows per sample (in memory)
    sample = 4 + 4 + (0 if streamed else 4)
    # the largest exchange: every ghost's row [id or primary, counts...] as int64, four times, and the
    # int32 counts it is built from; the owners' side as int64 rows
    exchange_ghost = 4 * 8 * (1 + n) + 4 * n
    exchange_owned = 8 * (1 + n)
    return int(num_ghosts * (ghost + exchange_ghost) + num_owned * (owned + exchange_owned) + num_samples * sample)


def host_key() -> int:
    """This host as an integer below 2^33 (exact in the float64 sums that gather it): torchrun's node
    rank (``GROUP_RANK``, one per launching agent, so containers of one name on several hosts stay
    apart), else the host name's CRC-32 past 2^32."""
    group = os.environ.get("GROUP_RANK", "")
    if group.isdigit() and int(group) < 2**32:
        return int(group)
    return 2**32 + zlib.crc32(socket.gethostname().encode("utf-8", "replace"))


def hosts_short(table: np.ndarray) -> list[tuple[list[int], float, float]]:
    """The hosts whose processes need more than the host has: ``table[rank] = (host key, bytes to come,
    bytes available)`` for every rank. Returns ``(ranks, need, available)`` per such host, the need summed
    over its ranks and the available memory the smallest any of them saw."""
    table = np.asarray(table, dtype=np.float64).reshape(-1, 3)
    out = []
    for key in np.unique(table[:, 0]):
        ranks = np.flatnonzero(table[:, 0] == key)
        need, available = float(table[ranks, 1].sum()), float(table[ranks, 2].min())
        if need > available:
            out.append((ranks.tolist(), need, available))
    return out


def check_host_memory(mesh: Mesh, need_bytes: int, *, num_samples: int, num_workers: int) -> None:
    """Refuse on every process, with the same line, when the processes of some host need more memory
    than it has available (:func:`hosts_short`; the same words on every rank, so no cgroup note as
    :func:`gmp._memory.check_memory` adds); one process: no check."""
    if mesh.size == 1:
        return
    mine = np.zeros((mesh.size, 3), dtype=np.float64)
    mine[mesh.rank] = (host_key(), float(need_bytes), float(available_memory()))
    short = hosts_short(mesh.sum(mine.reshape(-1)))
    if not short:
        return
    ranks, need, available = short[0]
    gib = 2.0 ** 30
    exc = PartitionError(
        f"`distributed` hybrid on {num_samples:,} samples and {num_workers} workers across {mesh.size} processes: "
        f"the {len(ranks)} processes on the host of ranks {ranks} need about {need / gib:,.1f} GiB more of memory "
        f"(their ghost rows, counts and exchanges; docs/distributed.md, \"Memory\"), {available / gib:,.1f} GiB "
        f"is available there; run fewer processes per host (more hosts: each shard then touches fewer "
        f"rows), partition out of core in one process (`chunk_samples` without `distributed`), or free memory.")
    exc.param = "distributed"
    raise exc
