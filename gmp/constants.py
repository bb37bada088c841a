"""Numbers that more than one module needs, each with its unit (one place; TorchRec's planner keeps
its constants the same way). Lowest layer of gmp: imports nothing.
"""

from __future__ import annotations

#: bytes per embedding value: rows are float32 in every byte count (metrics, simulator,
#: partitioner memory budgets, the trainer's memory plan) [bytes / value]
VALUE_BYTES = 4

#: default samples per worker per step of every command that takes ``--batch-size``
#: (``gmp partition`` / ``report`` / ``train`` / ``simulate``) [samples]; a manifest's plan overrides it
DEFAULT_BATCH_SIZE = 512

#: the largest batch of one worker that every command takes (``--batch-size``): the trainer's sample
#: offsets are int32 (``2**63`` was a traceback), so ``gmp partition`` refuses to plan a placement for a
#: batch that ``gmp train`` could not run [samples]
MAX_BATCH_SIZE = 2**31 - 1

#: default embedding row width [values per row]; a manifest's plan overrides it
DEFAULT_EMBEDDING_DIM = 16

#: most workers the Herald scheduler and its caches handle: worker sets are int64 bit masks, worker 63 the
#: sign bit (the masks are only combined bitwise, never compared by value) [workers]
MAX_WORKERS = 64

#: Adagrad's epsilon, trainer and reference alike [dimensionless]
ADAGRAD_EPS = 1e-10

#: default share of the active rows each Herald cache holds in ``gmp simulate`` (Herald: 10% of a
#: GPU's memory) [percent of the rows the training samples use]
SIMULATOR_CACHE_PERCENT = 10

#: default time a collective of the distributed engine waits for the slowest rank [seconds]
#: (``--collective-timeout`` / ``GMP_COLLECTIVE_TIMEOUT`` override it)
COLLECTIVE_TIMEOUT_S = 600.0
