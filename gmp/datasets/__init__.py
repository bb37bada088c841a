"""Datasets: importers for raw formats, the synthetic generator, and the
prepared-dataset format everything downstream reads (:mod:`gmp.datasets.format`)."""

from .format import DatasetWriter, FieldInfo, PreparedDataset, load_dataset, write_dataset

__all__ = ["DatasetWriter", "FieldInfo", "PreparedDataset", "load_dataset", "write_dataset"]
