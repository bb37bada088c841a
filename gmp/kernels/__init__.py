"""Low-level numba building blocks shared by the partitioners, the Herald kernels and the data code.

Lowest layer of gmp after :mod:`gmp.errors` and :mod:`gmp.constants`: it imports nothing else of gmp.

=====================  ===========================================================
:mod:`.simd`           explicit SIMD intrinsics (``gather_rows_dot``, ``weighted_row_sum``, ``prefetch``)
:mod:`.csr`            ``gather_csr``: the CSR rows of a list of samples
:mod:`.hashing`        SplitMix64 (Steele, Lea & Flood 2014): the finaliser ``mix64``, its
                       vectorised form ``mix64_array`` and the counter stream ``splitmix_uniform``
:mod:`.threads`        ``concurrent_launches_safe``: whether numba's threading layer takes parallel
                       launches from several Python threads at once (not on ``workqueue``)
=====================  ===========================================================
"""
