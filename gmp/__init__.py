"""gmp: graph-based placement for large embedding-model training.

The pipeline (each stage owned by one module)::

    dataset  ->  graph  ->  partition  ->  placement manifest  ->  report
                                                 |
                                                 v
                 trainer: scheduler -> embedding store + consistency -> comm engine

* :mod:`gmp.datasets` imports raw data into the prepared-dataset format.
* :mod:`gmp.graph` builds the one :class:`~gmp.graph.BipartiteGraph` type.
* :mod:`gmp.partition` holds the partitioner registry.
* :mod:`gmp.placement` is the one placement type; :mod:`gmp.manifest` its
  versioned on-disk form.

``import gmp`` gives one verb per stage (:mod:`gmp.api`; docs/python.md)::

    ds = gmp.import_dataset("criteo", "train.txt", "data/criteo")   # or gmp.synthesize(...)
    m = gmp.partition_dataset(ds, "hybrid", "placements/h8", workers=8)
    gmp.make_report(m)                                               # headline, tables, plots
    gmp.simulate_epoch(ds, m); gmp.train_model(ds.path, m.path, epochs=1)
    gmp.export_torchrec(m, "export/h8", dataset=ds)

The verbs are named so that no submodule shadows them (``gmp.partition`` is
the partitioner package, ``gmp.partition_dataset`` the verb).
"""

from ._version import __version__
from ._numba_cache import configure as _configure_numba_cache

_configure_numba_cache()  # before any kernel is compiled: a read-only install caches them in a temp directory

from .api import (  # noqa: E402
    compare_partitioners,
    export_torchrec,
    import_dataset,
    load_dataset,
    load_manifest,
    make_report,
    partition_dataset,
    repartition_dataset,
    simulate_epoch,
    synthesize,
    train_model,
)

__all__ = ["__version__", "import_dataset", "synthesize", "load_dataset", "partition_dataset", "repartition_dataset",
           "load_manifest", "make_report", "compare_partitioners", "train_model", "simulate_epoch", "export_torchrec"]
