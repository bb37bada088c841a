"""The version of gmp (written into every file gmp makes). A leaf: importing it imports nothing,
so a low module that records the version does not import the package root (``gmp/__init__``
imports :mod:`gmp.api`, and through it every stage)."""

__version__ = "0.1.0"
