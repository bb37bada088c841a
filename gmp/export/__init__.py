"""Exports of a placement manifest to other training systems.

* :mod:`gmp.export.torchrec` — a TorchRec row-wise sharding plan (``gmp export torchrec``).
"""

EXPORTERS = ("torchrec",)
