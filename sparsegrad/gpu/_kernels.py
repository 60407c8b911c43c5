"""The kernel interface of ``sparsegrad._fast`` for device arrays (CuPy).

The same functions as :mod:`sparsegrad._fast._reference`, with the same
signatures and contract (read that module): ``merge_scaled``,
``merge_plan``, ``fill_scaled``, ``gather_rows``, ``matmul``, ``scale_rows``, ``coo_to_csr``,
``selection_csr``, ``multiply_add``, ``sum_of_products``, ``take_product``,
``take`` and ``same_index``.  They are the
reference kernels themselves, which take the array module from their
arguments, so CuPy arrays in give CuPy arrays out and there is one
implementation of the logic.  Where a CuPy profile shows a
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
from .._fast import _reference
from .._fast._reference import (coo_to_csr, fill_scaled, matmul, merge_plan, merge_scaled,
                                multiply_add, same_index, selection_csr,
                                sum_of_products, take, take_product)
from . import _cuda


def scale_rows(indptr, data, scale):
    """The reference ``scale_rows``; its CUDA kernel on CuPy arrays when opted in
    (:mod:`sparsegrad.gpu._cuda`)."""
    if _cuda.enabled(indptr, data, scale):
        out = _cuda.scale_rows(indptr, data, scale)
        if out is not None:
            return out
    return _reference.scale_rows(indptr, data, scale)


def gather_rows(indptr, indices, data, rows):
    """The reference ``gather_rows``; the source positions by a CUDA kernel on CuPy
    arrays when opted in (:mod:`sparsegrad.gpu._cuda`)."""
    if not _cuda.enabled(indptr, indices, data, rows):
        return _reference.gather_rows(indptr, indices, data, rows)
    return _reference.gather_rows_by(
        lambda xp, new_indptr, starts, counts: _cuda.row_sources(new_indptr, starts),
        indptr, indices, data, rows)


__all__ = ["merge_scaled", "merge_plan", "fill_scaled", "gather_rows", "matmul",
           "scale_rows", "coo_to_csr", "selection_csr", "multiply_add", "sum_of_products",
           "take_product", "take", "same_index"]
