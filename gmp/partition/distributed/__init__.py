"""The hybrid partitioner past one process: bulk-synchronous sweeps over sharded samples.

``gmp partition DATASET --distributed`` under torchrun (one process per rank, gloo on CPU), and
the same code in one process with ``--chunk-samples N`` (out of core: the CSR is streamed from
disk in chunks). Design, measurements and the Criteo-1TB plan: docs/distributed.md.

==========================  =====================================================
:mod:`.exchange`            the processes (:class:`Mesh`), ghost rows and owned rows, their messages
:mod:`.shard`               a process's samples, in memory or streamed in chunks
:mod:`.memory`              the pre-check: the memory each host's processes will need, before the start
:mod:`.state`               counts, loads, the blocked sample sweep and the owners' embedding sweep
:mod:`.start`               the multilevel start from shards (or the seeded random start)
:mod:`.core`                :func:`partition_distributed`: set-up, rounds, the 2D step, the placement
==========================  =====================================================
"""

from .core import DEFAULT_BLOCK_SAMPLES, check_init, check_settings, partition_distributed

__all__ = ["DEFAULT_BLOCK_SAMPLES", "check_init", "check_settings", "partition_distributed"]
