"""The kernel interface of ``sparsegrad._fast`` for device arrays (CuPy).

The same functions as :mod:`sparsegrad._fast._reference`, with the same
signatures and contract (read that module): ``merge_scaled``,
``merge_plan``, ``fill_scaled``, ``gather_rows``, ``matmul``, ``scale_rows``, ``coo_to_csr``,
``selection_csr``, ``multiply_add``, ``sum_of_products``, ``take_product``,
``take``, ``same_index`` and ``index_runs``.  They are the
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
import operator

import numpy as np

from .._fast import _reference
from .._fast._reference import (INDEX_DTYPE, coo_to_csr, index_runs, matmul,
                                merge_scaled, multiply_add, same_index, selection_csr,
                                sum_of_products, take, take_product)
from . import _cuda


class _Plan(tuple):
    """A merge plan (the reference's codes, one array per term) with the same
    writes in levels, for :func:`fill_scaled` on a device.

    ``levels[j]`` is ``(sources, places)``: the ``j``-th value written to each
    place, in the order of the terms, is entry ``sources`` of the terms'
    values laid end to end.  Each place appears once per level, so a level is
    one gather and one scatter over all terms, however many there are.
    ``indptr`` is the pattern the plan was made for (the levels hold for it
    alone), ``levels`` None where the codes do not describe a fill (the
    per-term fill then names what is wrong).
    """

    def __new__(cls, codes, indptr, levels):
        plan = super().__new__(cls, codes)
        plan.indptr, plan.levels = indptr, levels
        return plan


def merge_plan(indptr, indices, terms):
    """The reference ``merge_plan``, with its writes in levels (:class:`_Plan`)."""
    codes = _reference.merge_plan(indptr, indices, terms)
    return _Plan(codes, indptr, _levels(indptr, indices, codes))


def _levels(indptr, indices, codes):
    """The levels of :class:`_Plan`, or None (made once per plan: the sizes read
    back here are not read at any fill)."""
    xp = _reference._namespace(indptr, indices, *codes)
    nnz = len(indices)
    if not codes:
        return None
    every = xp.concatenate([xp.asarray(c).astype(INDEX_DTYPE) for c in codes])
    if bool((every < -1).any()) or bool(((every >> 1) >= nnz).any()):
        return None
    sources = xp.flatnonzero(every >= 0)
    places = every[sources] >> 1
    # (by place, then by the order of the terms: the keys are distinct)
    order = xp.argsort(places * len(every) + sources)
    sources, places, first = sources[order], places[order], (every[sources[order]] & 1) == 0
    rank = xp.arange(len(places), dtype=INDEX_DTYPE) - xp.searchsorted(places, places)
    # (every place written first by one term, then added to by the later ones)
    if bool((first != (rank == 0)).any()) or int(first.sum()) != nnz:
        return None
    levels = []
    for j in range(int(rank.max()) + 1 if len(rank) else 0):
        at = xp.flatnonzero(rank == j)
        levels.append((sources[at], places[at]))
    return levels


def scale_rows(indptr, data, scale):
    """The reference ``scale_rows``; its CUDA kernel on CuPy arrays when opted in
    (:mod:`sparsegrad.gpu._cuda`)."""
    if _cuda.enabled(indptr, data, scale):
        out = _cuda.scale_rows(indptr, data, scale)
        if out is not None:
            return out
    return _reference.scale_rows(indptr, data, scale)


def fill_scaled(indptr, indices, terms, plan):
    """The reference ``fill_scaled``'s contract and numbers, in a form for a device.

    By a plan of this module's :func:`merge_plan` for this ``indptr``: the terms'
    values laid end to end, then one gather and one scatter per level of the
    plan, nothing read back (the plan was checked when it was made).  By other
    codes: per term one gather, one ``where`` and one scatter over all its
    entries, and the codes' checks summed on the device and read back once at
    the end.  The reference instead selects each term's entries by boolean
    masks and checks each term's codes at once, which on a GPU reads sizes back
    to the host several times per term (measured: 25 ms of a shallow-water
    evaluation on an H200, docs/gpu.md).  Either way every place gets its first
    term's value, then the later ones added in the order of the terms, as
    there; an empty selection row (code ``-1``) and a code past the places
    write into one spare place past the result.

    >>> from sparsegrad.gpu._device import fake
    >>> terms = [(None, fake.asarray([1, -1]), None, fake.asarray([2.0, 3.0])),
    ...          (None, fake.asarray([1, 0]), None, None)]
    >>> indptr, indices = fake.asarray([0, 1, 2]), fake.asarray([1, 0])
    >>> plan = merge_plan(indptr, indices, [(t[0], t[1], 0) for t in terms])
    >>> fake.asnumpy(fill_scaled(indptr, indices, terms, plan)[2])
    array([3., 1.])
    """
    terms = list(terms)
    if len(plan) != len(terms):
        raise ValueError("fill_scaled: a plan of %d terms for %d terms"
                         % (len(plan), len(terms)))
    xp = _reference._namespace(indptr, indices, *(a for term in terms for a in term[:4]))
    nnz = len(indices)
    n_rows = len(indptr) - 1
    if n_rows < 0:
        raise ValueError("fill_scaled: indptr must run from 0 to len(indices)")
    values = []
    for k, (term, codes) in enumerate(zip(terms, plan)):
        if len(codes) != len(term[1]):
            raise ValueError("fill_scaled: a term of %d entries has %d codes"
                             % (len(term[1]), len(codes)))
        m = len(term[1]) if term[0] is None else len(term[0]) - 1
        first_row = operator.index(term[4]) if len(term) > 4 else 0
        if first_row < 0 or first_row + m > n_rows or (len(term) == 4 and m != n_rows):
            raise ValueError("fill_scaled: term %d of %d rows from row %d does not fit "
                             "in %d rows" % (k, m, first_row, n_rows))
        factor = _reference._real_factor(term[5], term[3]) if len(term) == 6 else 1.0
        scale = _reference._row_scale(term[3], factor)
        data = term[2]
        if term[0] is None:  # a selection: one entry per row
            if data is not None:
                raise ValueError("fill_scaled: a selection term (indptr None) has no data")
            v = scale if scale is not None else xp.ones(len(codes))
        else:
            v = data if data is not None else xp.ones(len(codes))
            if scale is not None:
                rows = _reference._row_of_each_entry(
                    xp, _reference._as_index(xp, term[0], "fill_scaled term indptr"), len(v))
                v = v * xp.asarray(scale)[rows]
        values.append(v)
    dtype = np.result_type(*[v.dtype for v in values]) if values else np.float64
    levels = getattr(plan, "levels", None)
    if levels is not None and plan.indptr is indptr:
        # (a level is one gather and one scatter for all terms; nothing read back)
        every = xp.concatenate(values) if len(values) > 1 else values[0]
        data = xp.empty(nnz, dtype=dtype)
        for j, (sources, places) in enumerate(levels):
            data[places] = every[sources] if j == 0 else data[places] + every[sources]
        return xp.asarray(indptr).copy(), xp.asarray(indices).copy(), data
    data = xp.zeros(nnz + 1, dtype=dtype)
    stores = xp.zeros((), dtype=INDEX_DTYPE)
    wrong = xp.zeros((), dtype=bool)
    for v, codes in zip(values, plan):
        codes = xp.asarray(codes).astype(INDEX_DTYPE)
        # (-1: an empty selection row; anything past the places is an error, noted)
        wrong = wrong | ((codes < -1) | (codes >= 2 * nnz)).any()
        at = xp.where(codes < 0, nnz, xp.minimum(codes >> 1, nnz))
        first = (codes & 1) == 0
        stores = stores + (first & (codes >= 0)).sum()
        data[at] = xp.where(first, v, data[at] + v)
    ends_wrong = (indptr[0] != 0) | (indptr[-1] != nnz)
    if bool(wrong | ends_wrong | (stores != nnz)):
        if bool(ends_wrong):
            raise ValueError("fill_scaled: indptr must run from 0 to len(indices)")
        if bool(wrong):
            raise ValueError("fill_scaled: the plan points outside the %d places" % nnz)
        raise ValueError("fill_scaled: the plan stores %d values for %d places"
                         % (int(stores), nnz))
    return xp.asarray(indptr).copy(), xp.asarray(indices).copy(), data[:nnz]


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
           "take_product", "take", "same_index", "index_runs"]
