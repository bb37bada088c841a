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
"""

__version__ = "0.1.0"
