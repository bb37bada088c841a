"""Collectives over the workers: the all-to-all / all-reduce engines and their byte accounting.

Below :mod:`gmp.train` (it imports only :mod:`gmp.errors` and torch), so the
partitioner can run on the same engines later.

==========================  =====================================================
:mod:`.base`                :class:`CommEngine` (the interface), ``CATEGORIES`` of counted bytes
:mod:`.local`               :class:`LocalEngine`: N workers in one process, in-memory exchange
:mod:`.distributed`         :class:`DistributedEngine`: one process per worker under torchrun
==========================  =====================================================

:mod:`.distributed` imports ``torch.distributed``; import it only when needed.
"""

from .base import CATEGORIES, CommEngine, PendingExchange
from .local import LocalEngine

__all__ = ["CATEGORIES", "CommEngine", "LocalEngine", "PendingExchange"]
