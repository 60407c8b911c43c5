"""The kernel interface of ``sparsegrad._fast`` for device arrays (CuPy).

The same six functions as :mod:`sparsegrad._fast._reference`, with the same
signatures and contract (read that module): ``merge_scaled``,
``gather_rows``, ``matmul``, ``scale_rows``, ``coo_to_csr`` and
``selection_csr``.  They are the reference kernels themselves, which take the
array module from their arguments, so CuPy arrays in give CuPy arrays out and
there is one implementation of the logic.  Where a CuPy profile shows a
kernel or a step of one to dominate (the per-rank passes that sum duplicates
in input order, the ``searchsorted`` that replaces ``repeat``), a CuPy
RawKernel can replace that function here, tested against the reference like
the Cython kernels are.

Nothing here imports CuPy: the kernels run on whatever arrays they are given,
including the fake device of :mod:`sparsegrad.gpu._device` on the CPU.

>>> from sparsegrad.gpu._device import fake
>>> indptr, indices = selection_csr(fake.asarray([2, -1, 0]))
>>> type(indptr).__name__, indices.tolist()
('DeviceArray', [2, 0])
"""
from .._fast._reference import (coo_to_csr, gather_rows, matmul, merge_scaled, scale_rows,
                                selection_csr)

__all__ = ["merge_scaled", "gather_rows", "matmul", "scale_rows", "coo_to_csr",
           "selection_csr"]
