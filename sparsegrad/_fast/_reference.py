"""Pure-numpy reference kernels on raw CSR arrays.

This module is the contract of the kernel interface: ``_kernels.pyx`` implements
the same functions with the same signatures and must return identical arrays.
The tests run every kernel on both implementations.

Conventions shared by all kernels
---------------------------------
* A CSR matrix is passed as ``indptr, indices, data``; ``indptr`` and
  ``indices`` are ``int64``; within each row the column indices are sorted and
  unique (canonical CSR).
* ``data=None`` means "every stored entry equals one" (selection and identity
  matrices need no data array).  With ``pattern_only=True`` the values are
  ignored altogether and ``None`` is returned as data.
* Structural zeros are kept: an entry present in an input pattern is present
  in the output pattern even when its value is, or sums to, zero.  The pattern
  of a result therefore never depends on the numerical values.
* Inputs are never modified; outputs never alias inputs.
* ``merge_scaled`` also stacks: a term given as a 5-tuple ``(indptr, indices,
  data, row_scale, first_row)`` has its own number of rows and is added from
  row ``first_row`` of the result on; its ``index_dtype`` argument asks for
  int32 ``indptr`` and ``indices`` in the result (inputs stay int64), ready
  for ``scipy.sparse.csr_matrix`` without a copy.

Array namespaces
----------------
The kernels are written once for every numpy-like array module: each takes
its array module ``xp`` from its arguments (:func:`_namespace`: numpy unless
an argument belongs to another module, such as ``cupy``) and calls ``xp.``
for every array operation, so that the same code is the CPU specification and
the GPU implementation (``sparsegrad.gpu._kernels``).  Where CuPy lacks a
numpy idiom or behaves differently, the operation is written in a form both
support, with a comment saying why.  Python scalars read from arrays
(``int(a[-1])``, a ``.min()`` in an ``if``) wait for the device; the kernels
keep those few the sizes of their outputs and their checks need.

Example
-------
>>> import numpy as np
>>> indptr = np.array([0, 1, 2]); indices = np.array([0, 1])
>>> merge_scaled(2, 2, [(indptr, indices, None, np.array([2.0, 3.0])),
...                     (indptr, indices, None, None)])[2]
array([3., 4.])
"""
import operator
import sys

import numpy as np

INDEX_DTYPE = np.int64

__all__ = ["merge_scaled", "merge_plan", "fill_scaled", "gather_rows", "matmul",
           "scale_rows", "coo_to_csr", "selection_csr", "multiply_add", "sum_of_products",
           "take_product", "take", "same_index", "index_runs"]
# (run_program and PROGRAM_OPS, the runner of sparsegrad._trace's programs, are
# not in the kernel interface of a backend: sparsegrad._fast.run_program is
# their interface, on the CPU only)


class RowIndexError(IndexError, ValueError):
    """A row number past the end of a matrix (``gather_rows``).

    An ``IndexError``, as numpy's indexing raises, and a ``ValueError``, as
    every other invalid kernel input raises (in the manner of numpy's
    ``AxisError``): both kernel implementations raise it, and code catching
    either base class sees it.
    """


def _namespace(*arrays):
    """The array module of the arguments: numpy, unless one of them is an array
    of another module (the first such argument decides).

    An array type defined in a package that exports it as ``ndarray``
    (``cupy.ndarray``) gives that package; otherwise an array type whose
    ``__array_namespace__`` names another module (the fake device of
    ``sparsegrad.gpu._device``) gives that module.  The package comes first
    because an array-API namespace can be narrower than the numpy-like module
    the kernels need.  ``None``, Python scalars, lists and numpy arrays and
    scalars say nothing.

    >>> _namespace(None, np.zeros(2), [1, 2]) is np
    True
    """
    for a in arrays:
        kind = type(a)
        if a is None or kind is np.ndarray or not hasattr(a, "dtype"):
            continue
        package = sys.modules.get(kind.__module__.partition(".")[0])
        array_type = getattr(package, "ndarray", None)
        if package is not np and isinstance(array_type, type) and isinstance(a, array_type):
            return package
        get_namespace = getattr(a, "__array_namespace__", None)
        if get_namespace is not None and not isinstance(a, np.generic):
            xp = get_namespace()
            if xp is not np:
                return xp
    return np


def _as_index(xp, a, name):
    """``a`` as an int64 array of ``xp``, refusing (``TypeError``, as the compiled
    kernels do) an index array that is not empty and holds neither integers nor
    values int64 holds exactly: floats would be truncated, uint64 wrapped."""
    a = xp.asarray(a)
    if a.size and not (a.dtype.kind in "iu" and np.can_cast(a.dtype, INDEX_DTYPE)):
        raise TypeError("%s must hold int64 indices, got dtype %s" % (name, a.dtype))
    return a.astype(INDEX_DTYPE, copy=False)


def _repeat(xp, values, counts, total=None):
    """``values[i]`` repeated ``counts[i]`` times (``values=None``: the positions
    ``i``); ``total`` is ``counts.sum()`` when the caller knows it.

    ``cupy.repeat`` takes its counts as an int, list or tuple only, not as an
    array, so other namespaces find the source of each output position with
    ``searchsorted`` on the running counts: no host copy of the counts, no
    device sync when ``total`` is given.  numpy keeps ``np.repeat``, several
    times faster on the CPU; both give the same arrays.
    """
    if xp is np:
        if values is None:
            values = np.arange(len(counts), dtype=INDEX_DTYPE)
        return np.repeat(values, counts)
    ends = xp.cumsum(counts, dtype=INDEX_DTYPE)
    if total is None:
        total = int(ends[-1]) if len(ends) else 0
    source = xp.searchsorted(ends, xp.arange(total, dtype=INDEX_DTYPE), side="right")
    return source if values is None else values[source]


def _row_of_each_entry(xp, indptr, n_entries):
    """Row number of every stored entry of a CSR matrix of ``n_entries`` entries."""
    return _repeat(xp, None, xp.diff(indptr), n_entries)


def _add_later_entries(xp, data, values, first, starts):
    """Add ``values[p]`` into ``data[r]`` for every position ``p`` after the
    first of its run ``r``, in the order of the positions.

    Runs are contiguous; ``first`` marks the first position of each and
    ``starts`` lists those positions.  numpy's ``ufunc.at`` is unbuffered and
    takes the indices in order, which is the contract.  CuPy's ``ufunc.at``
    and ``cupyx.scatter_add`` add with atomics, in no fixed order and for a
    few dtypes only; there the k-th later entry of every run is added in pass
    k instead.  A pass holds one entry per run at most, so a plain indexed add
    is safe, and every run is summed ``((v0 + v1) + v2) + ...`` as on the
    CPU.  Passes: the longest run; device syncs: three.
    """
    later = ~first
    run = xp.cumsum(first) - 1
    if xp is np:
        np.add.at(data, run[later], values[later])
        return
    positions = xp.flatnonzero(later)
    if not len(positions):
        return
    run = run[positions]
    rank = positions - starts[run]
    order = xp.argsort(rank)
    positions, run = positions[order], run[order]
    bounds = xp.cumsum(xp.bincount(rank)).tolist()
    for k in range(1, len(bounds)):
        step = slice(bounds[k - 1], bounds[k])
        data[run[step]] += values[positions[step]]


def _check_bounds(message, first, second):
    """Raise ``ValueError(message % (name, bound))`` for the first of two
    ``(name, indices, bound)`` whose indices leave ``[0, bound)``, with one
    device sync for both (empty index arrays pass)."""
    checks = [check for check in (first, second) if len(check[1])]
    flags = [(coords.min() < 0) | (coords.max() >= bound) for _, coords, bound in checks]
    if flags and bool(flags[0] | flags[-1]):
        name, _, bound = checks[0] if flags[0] else checks[-1]
        raise ValueError(message % (name, bound))


def coo_to_csr(n_rows, n_cols, rows, cols, values):
    """Canonical CSR from coordinate triplets, summing duplicates.

    Parameters
    ----------
    n_rows, n_cols : int
        Shape of the matrix.
    rows, cols : int64 arrays
        Coordinates of the entries, in any order, duplicates allowed.
    values : array or None
        Values of the entries; ``None`` for a pattern-only result.

    Returns
    -------
    indptr, indices, data
        Canonical CSR; ``data`` is ``None`` when ``values`` is ``None``.
        Entries that sum to zero are kept.  Duplicates are summed one after
        the other in input order, ``((v0 + v1) + v2) + ...``, so that every
        implementation rounds alike (``np.add.reduceat`` may sum pairwise).

    Examples
    --------
    >>> coo_to_csr(2, 2, np.array([1, 0, 1]), np.array([0, 1, 0]), np.array([1., 2., 3.]))
    (array([0, 1, 2]), array([1, 0]), array([2., 4.]))
    """
    xp = _namespace(rows, cols, values)
    rows = _as_index(xp, rows, "coo_to_csr rows")
    cols = _as_index(xp, cols, "coo_to_csr cols")
    _check_bounds("coo_to_csr: %s must lie in [0, %d)", ("rows", rows, n_rows),
                  ("cols", cols, n_cols))
    key = rows * INDEX_DTYPE(max(n_cols, 1)) + cols
    # stable: equal keys keep their input order (cupy sorts stably and takes
    # kind="stable", documented since CuPy 12)
    order = xp.argsort(key, kind="stable")
    key = key[order]
    first = xp.ones(len(key), dtype=bool)
    xp.not_equal(key[1:], key[:-1], out=first[1:])
    starts = xp.flatnonzero(first)
    unique_key = key[starts]
    out_rows = unique_key // max(n_cols, 1)
    indices = (unique_key - out_rows * max(n_cols, 1)).astype(INDEX_DTYPE)
    indptr = xp.zeros(n_rows + 1, dtype=INDEX_DTYPE)
    if xp is np:
        xp.cumsum(xp.bincount(out_rows, minlength=n_rows), out=indptr[1:])
    elif n_rows:
        # cupy.bincount raises on an empty array whatever minlength is (it sizes
        # its result by the maximum first: cupy/cupy#8116), and a Jacobian
        # may have no entries; the rows are sorted, so the end of each row's run
        # is a searchsorted (no device sync either)
        indptr[1:] = xp.searchsorted(out_rows, xp.arange(n_rows, dtype=INDEX_DTYPE),
                                     side="right")
    if values is None:
        return indptr, indices, None
    values = xp.asarray(values)[order]
    data = values[starts]
    # unbuffered and in input order: ((v0 + v1) + v2) + ...
    _add_later_entries(xp, data, values, first, starts)
    return indptr, indices, data


def _real_factor(factor, row_scale):
    """A merge term's factor as a Python float (a real number times a row scale)."""
    if isinstance(factor, (complex, np.complexfloating)) or not np.isrealobj(factor) \
            or np.ndim(factor) != 0:
        raise ValueError("merge_scaled: a term's factor is a real number, got %r" % (factor,))
    factor = float(factor)
    if row_scale is None and factor != 1.0:
        raise ValueError("merge_scaled: a term's factor multiplies its row_scale, "
                         "which is None")
    return factor


def _scale_pair(pair):
    """The two vectors of a row scale given as a pair ``(scale, scale2)``."""
    if len(pair) != 2 or any(v is None or np.ndim(v) != 1 for v in pair):
        raise ValueError("merge_scaled: a row_scale pair is two 1-d arrays, got %r"
                         % (pair,))
    return pair


def _row_scale(scale, factor):
    """A term's row scale formed as numpy forms ``(d * c) * factor`` (``scale`` a
    vector, a pair ``(d, c)`` or None)."""
    if isinstance(scale, tuple):
        scale, scale2 = _scale_pair(scale)
        scale = scale * scale2
    if factor != 1.0:
        scale = scale * factor
    return scale


def _merge_term(term, n_rows):
    """``(indptr, indices, data, row_scale, first_row, m)`` of a merge term given
    as a 4-tuple (``first_row`` 0, ``m == n_rows``), a 5-tuple or a 6-tuple,
    its row scale formed as numpy forms ``(d * c) * factor``."""
    factor = 1.0
    if len(term) == 4:
        indptr, indices, data, scale = term
        first_row = 0
        m = n_rows
    elif len(term) in (5, 6):
        indptr, indices, data, scale, first_row = term[:5]
        first_row = operator.index(first_row)
        if len(term) == 6:
            factor = _real_factor(term[5], scale)
        m = len(indices) if indptr is None else len(indptr) - 1
        if m < 0:
            raise ValueError("merge_scaled: a term's indptr must have at least one entry")
    else:
        raise ValueError("merge_scaled: a term is (indptr, indices, data, row_scale"
                         "[, first_row[, factor]]), got a tuple of %d items" % len(term))
    indices = _as_index(_namespace(indices), indices, "merge_scaled term indices")
    if indptr is not None:
        indptr = _as_index(_namespace(indptr), indptr, "merge_scaled term indptr")
    if indptr is not None and len(term) == 4 and len(indptr) != n_rows + 1:
        # (a shorter indptr would silently leave the last rows empty)
        raise ValueError("merge_scaled: a term's indptr has length %d, expected %d"
                         % (len(indptr), n_rows + 1))
    scale = _row_scale(scale, factor)
    if indptr is None:  # a selection given by its columns
        if data is not None:
            raise ValueError("merge_scaled: a selection term (indptr None) has no data")
        if len(indices) != m:
            raise ValueError("merge_scaled: a selection term needs one column per row "
                             "(%d), got %d" % (m, len(indices)))
        indptr, indices = selection_csr(indices)
    if first_row < 0 or first_row + m > n_rows:
        raise ValueError("merge_scaled: a term of %d rows from row %d does not fit in "
                         "%d rows" % (m, first_row, n_rows))
    return indptr, indices, data, scale, first_row, m


def _check_index_dtype(index_dtype, bound, n_cols):
    """The output index dtype (int32 or int64), checking that int32 holds the
    entry bound and the column numbers."""
    dtype = np.dtype(INDEX_DTYPE if index_dtype is None else index_dtype)
    if dtype == np.int64:
        return dtype
    if dtype != np.int32:
        raise ValueError("merge_scaled: index_dtype must be int32 or int64, got %s" % dtype)
    limit = np.iinfo(np.int32).max
    if bound > limit or n_cols > limit:
        raise ValueError("merge_scaled: %d entries (at most) or %d columns do not fit in "
                         "int32 indices" % (bound, n_cols))
    return dtype


def merge_scaled(n_rows, n_cols, terms, pattern_only=False, index_dtype=None):
    """Sum of row-scaled CSR matrices, ``sum_k diag(scale_k) @ M_k``, each term
    placed at its own first row.

    Parameters
    ----------
    n_rows, n_cols : int
        Shape of the result.
    terms : sequence of (indptr, indices, data, row_scale[, first_row[, factor]])
        ``data`` may be ``None`` (all ones); ``row_scale`` is ``None`` (ones)
        or a 1-d array with one entry per row of the term (a broadcast,
        stride-0 array is fine).  ``indptr`` may be ``None``: the term is then
        a selection given by its columns, ``indices`` holding one column per
        row, ``-1`` for an empty row (as :func:`selection_csr` reads them), and
        ``data`` must be ``None``; the caller need not compress it.  A 4-tuple
        is an ``n_rows x n_cols`` matrix.
        A 5-tuple is a matrix of ``m = len(indptr) - 1`` rows (``len(indices)``
        for a selection) added into rows
        ``first_row .. first_row + m - 1`` of the result; it must fit:
        ``0 <= first_row`` and ``first_row + m <= n_rows``.  Rows of the
        result that no term covers are empty; terms whose rows overlap are
        summed.  A 6-tuple's ``factor``, a real number, multiplies the
        row scale as ``row_scale * factor`` does with a Python float (in the
        row scale's dtype): terms ``s * diag(d) * M`` need no product array.
        ``row_scale`` may also be a pair of vectors of one length, ``(d, c)``:
        the row scale is then ``d * c`` (formed before the factor), and
        ``s * diag(c) * diag(d) * M`` needs no product array either.
    pattern_only : bool
        Compute only the union pattern; data of the result is ``None``.
    index_dtype : None, numpy.int64 or numpy.int32
        Dtype of the returned ``indptr`` and ``indices`` (``None``: int64).
        int32 requires the bound on the entries, ``min(sum of the terms'
        entries, n_rows * n_cols)``, and ``n_cols`` to be at most
        ``2**31 - 1`` (ValueError otherwise).

    Returns
    -------
    indptr, indices, data
        Canonical CSR with the union of the input patterns (structural zeros
        kept).  The data dtype is the result type of all data and scales.
        Duplicates are summed term by term, in the order of ``terms``.  The
        arrays belong to the namespace of the terms' arrays; with no terms
        there is none to take, and the result is numpy arrays (a device caller
        merging nothing passes an empty block, ``(xp.zeros(1, int64),
        xp.zeros(0, int64), None, None, 0)``).

    Examples
    --------
    >>> block = (np.array([0, 1]), np.array([1]), None, np.array([5.0]), 2)
    >>> merge_scaled(3, 2, [block], index_dtype=np.int32)
    (array([0, 0, 0, 1], dtype=int32), array([1], dtype=int32), array([5.]))
    """
    terms = list(terms)
    xp = _namespace(*(a for term in terms for a in term[:4]))
    rows, cols, vals = [], [], []
    total = 0
    for term in terms:
        indptr, indices, data, scale, first_row, m = _merge_term(term, n_rows)
        entry_rows = _row_of_each_entry(xp, indptr, len(indices))
        rows.append(entry_rows + first_row)
        cols.append(indices)
        total += len(indices)
        if not pattern_only:
            if data is not None and len(data) != len(indices):
                # (numpy would broadcast data of length 1)
                raise ValueError("merge_scaled: a term's data has length %d, expected %d"
                                 % (len(data), len(indices)))
            v = xp.ones(len(indices)) if data is None else data
            if scale is not None:
                scale = xp.asarray(scale)
                if scale.shape != (m,):
                    raise ValueError("merge_scaled: a row_scale must have shape (%d,), got %s"
                                     % (m, scale.shape))
                v = v * scale[entry_rows]
            vals.append(v)
    dtype = _check_index_dtype(index_dtype, min(total, n_rows * n_cols), n_cols)
    if not rows:
        result = coo_to_csr(n_rows, n_cols, xp.zeros(0, INDEX_DTYPE),
                            xp.zeros(0, INDEX_DTYPE), None if pattern_only else xp.zeros(0))
    else:
        result = coo_to_csr(n_rows, n_cols, xp.concatenate(rows), xp.concatenate(cols),
                            None if pattern_only else xp.concatenate(vals))
    if dtype != INDEX_DTYPE:
        result = (result[0].astype(dtype), result[1].astype(dtype), result[2])
    return result


def _plan_code_dtype(nnz):
    """int32 codes when ``2 * nnz + 1`` fits (half the bytes to read), else int64."""
    return np.int32 if 2 * nnz + 1 < 2 ** 31 else INDEX_DTYPE


def merge_plan(indptr, indices, terms):
    """Where each entry of :func:`merge_scaled`'s terms lands in its result.

    The plan of :func:`fill_scaled`, which writes the values of a later merge of
    terms with the same patterns (and other values) without merging again.

    Parameters
    ----------
    indptr, indices : int arrays
        The merged pattern, canonical: what ``merge_scaled`` returned for these
        terms (int32 or int64).
    terms : sequence of (indptr, indices, first_row)
        The terms' patterns and first rows, as given to ``merge_scaled``;
        ``indptr`` None: a selection by its columns (``-1``: an empty row).

    Returns
    -------
    list of int arrays
        One per term, one code per stored entry (per row for a selection):
        ``2 p`` -- the entry's value goes to place ``p`` of the result's data
        (the first term there), ``2 p + 1`` -- it is added to what is there,
        ``-1`` -- an empty selection row.  int32 when ``2 nnz + 1`` fits, else
        int64.  Raises ValueError when an entry is not in the pattern or a
        term holds a column twice in a row.

    Examples
    --------
    >>> terms = [(None, np.array([1, -1]), 0), (None, np.array([1, 0]), 0)]
    >>> merge_plan(np.array([0, 1, 2]), np.array([1, 0]), terms)
    [array([ 0, -1], dtype=int32), array([1, 2], dtype=int32)]
    """
    terms = list(terms)
    xp = _namespace(indptr, indices, *(a for term in terms for a in term[:2]))
    indptr = _as_index(xp, indptr, "merge_plan indptr")
    indices = _as_index(xp, indices, "merge_plan indices")
    n_rows = len(indptr) - 1
    nnz = len(indices)
    if n_rows < 0 or int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        raise ValueError("merge_plan: indptr must run from 0 to len(indices)")
    width = max([int(indices.max()) + 1 if nnz else 1]
                + [int(term[1].max()) + 1 for term in terms if len(term[1])])
    keys = _row_of_each_entry(xp, indptr, nnz) * INDEX_DTYPE(width) + indices
    code_dtype = _plan_code_dtype(nnz)
    filled = xp.zeros(nnz, dtype=bool)
    plan = []
    for k, (term_indptr, term_indices, first_row) in enumerate(terms):
        cols = _as_index(xp, term_indices, "merge_plan term indices")
        if term_indptr is None:
            m = len(cols)
            rows = xp.arange(m, dtype=INDEX_DTYPE)
            valid = cols >= 0
        else:
            term_indptr = _as_index(xp, term_indptr, "merge_plan term indptr")
            m = len(term_indptr) - 1
            rows = _row_of_each_entry(xp, term_indptr, len(cols))
            valid = xp.ones(len(cols), dtype=bool)
        first_row = operator.index(first_row)
        if first_row < 0 or first_row + m > n_rows or m < 0:
            raise ValueError("merge_plan: term %d of %d rows from row %d does not fit "
                             "in %d rows" % (k, m, first_row, n_rows))
        wanted = (rows[valid] + first_row) * INDEX_DTYPE(width) + cols[valid]
        places = xp.minimum(xp.searchsorted(keys, wanted), max(nnz - 1, 0))
        if len(wanted) and (not nnz or not bool((keys[places] == wanted).all())):
            raise ValueError("merge_plan: term %d has an entry outside the merged pattern"
                             % k)
        if len(places) > 1 and bool((xp.diff(xp.sort(places)) == 0).any()):
            raise ValueError("merge_plan: term %d holds a column twice in a row" % k)
        codes = -xp.ones(len(cols), dtype=code_dtype)
        codes[valid] = (2 * places + filled[places]).astype(code_dtype)
        filled[places] = True
        plan.append(codes)
    return plan


def fill_scaled(indptr, indices, terms, plan):
    """``merge_scaled`` of ``terms`` again, by a plan (:func:`merge_plan`).

    ``indptr, indices`` are the merged pattern the plan was made from,
    ``terms`` are as :func:`merge_scaled`'s (4-, 5- or 6-tuples, the patterns
    the plan was made for, any values) and ``plan`` the codes of
    :func:`merge_plan`.  Returns fresh ``indptr, indices, data``: the pattern's
    copies and the data ``merge_scaled`` would give, in its dtype and, value
    for value, its rounding (each place is its terms' values summed in the
    order of the terms).  The codes are trusted to be ``merge_plan``'s for
    these patterns, which store every place once: which rows of a selection
    hold an entry is read from them (-1: none), not from its columns, and a
    place stored twice is not looked for (another is then left as
    ``np.empty`` made it).  What is checked, cheaply enough for every
    evaluation: every code points into the result (into its own row's places
    in the compiled loop), and as many values are stored as there are places
    (ValueError otherwise, and for a plan of other lengths than the terms).

    Examples
    --------
    >>> terms = [(None, np.array([1, -1]), None, np.array([2.0, 3.0])),
    ...          (None, np.array([1, 0]), None, None)]
    >>> indptr, indices = np.array([0, 1, 2]), np.array([1, 0])
    >>> plan = merge_plan(indptr, indices, [(t[0], t[1], 0) for t in terms])
    >>> fill_scaled(indptr, indices, terms, plan)[2]
    array([3., 1.])
    """
    terms = list(terms)
    if len(plan) != len(terms):
        raise ValueError("fill_scaled: a plan of %d terms for %d terms"
                         % (len(plan), len(terms)))
    xp = _namespace(indptr, indices, *(a for term in terms for a in term[:4]))
    n_rows = len(indptr) - 1
    nnz = len(indices)
    if n_rows < 0 or int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        raise ValueError("fill_scaled: indptr must run from 0 to len(indices)")
    places, values = [], []
    for term, codes in zip(terms, plan):
        if len(codes) != len(term[1]):
            raise ValueError("fill_scaled: a term of %d entries has %d codes"
                             % (len(term[1]), len(codes)))
        codes = xp.asarray(codes).astype(INDEX_DTYPE)
        if term[0] is None:
            # (a selection's rows are its entries: the codes say which hold one,
            # its columns are not read, as in the compiled loop)
            m = len(codes)
            entries = codes != -1
            term = (xp.arange(m + 1, dtype=INDEX_DTYPE), xp.zeros(m, INDEX_DTYPE)) + term[2:]
        else:
            entries = xp.ones(len(codes), dtype=bool)
        indptr_k, _, data, scale = _merge_term(term, n_rows)[:4]
        v = xp.ones(len(codes)) if data is None else data
        if scale is not None:
            v = v * xp.asarray(scale)[_row_of_each_entry(xp, indptr_k, len(v))]
        places.append(codes[entries])
        values.append(v[entries])
    dtype = np.result_type(*[v.dtype for v in values]) if values else np.float64
    data = xp.empty(nnz, dtype=dtype)
    stores = 0
    for codes, v in zip(places, values):
        at = codes >> 1
        if len(at) and (int(at.min()) < 0 or int(at.max()) >= nnz):
            raise ValueError("fill_scaled: the plan points outside the %d places" % nnz)
        first = (codes & 1) == 0
        data[at[first]] = v[first]
        data[at[~first]] += v[~first]
        stores += int(first.sum())
    if stores != nnz:
        raise ValueError("fill_scaled: the plan stores %d values for %d places"
                         % (stores, nnz))
    return xp.asarray(indptr).copy(), xp.asarray(indices).copy(), data


def gather_rows(indptr, indices, data, rows):
    """Rows ``rows`` of a CSR matrix, stacked; a row index of ``-1`` gives an empty row.

    Parameters
    ----------
    indptr, indices, data
        The source matrix (``data`` may be ``None``).
    rows : int64 array
        Row numbers in ``[-1, n_rows)``; repeats allowed.

    Returns
    -------
    indptr, indices, data
        A CSR matrix with ``len(rows)`` rows; ``data`` is ``None`` if the
        source data was ``None``.

    Examples
    --------
    >>> gather_rows(np.array([0, 1, 3]), np.array([0, 0, 1]), None, np.array([1, -1, 0]))
    (array([0, 2, 2, 3]), array([0, 1, 0]), None)
    """
    return gather_rows_by(_source_positions, indptr, indices, data, rows)


def _source_positions(xp, new_indptr, starts, counts):
    """Position in the source of every entry of a row gather."""
    total = int(new_indptr[-1])
    source = xp.arange(total, dtype=INDEX_DTYPE)
    source -= _repeat(xp, new_indptr[:-1] - starts, counts, total)
    return source


def gather_rows_by(source_positions, indptr, indices, data, rows):
    """:func:`gather_rows` with ``source_positions(xp, new_indptr, starts, counts)``
    finding where each entry comes from (a device kernel may do that step)."""
    xp = _namespace(indptr, indices, data, rows)
    rows = _as_index(xp, rows, "gather_rows rows")
    # (the result's indices are int64 like every kernel's, whatever the input's)
    indices = _as_index(xp, indices, "gather_rows indices")
    n_rows = len(indptr) - 1
    # one device sync for both bounds: numpy raises IndexError for a row past
    # the end, CuPy would wrap it around silently
    if len(rows) and bool((rows.min() < -1) | (rows.max() >= n_rows)):
        if rows.min() < -1:
            raise ValueError("gather_rows: row indices must be >= -1")
        raise RowIndexError("gather_rows: row %d is out of range for %d rows"
                         % (int(rows.max()), n_rows))
    # a row of -1 reads indptr[-1] and indptr[0], which exist even when the
    # source has no rows, and gets no entries
    starts = indptr[rows]
    counts = xp.where(rows >= 0, indptr[rows + 1] - starts, 0)
    new_indptr = xp.zeros(len(rows) + 1, dtype=INDEX_DTYPE)
    xp.cumsum(counts, out=new_indptr[1:])
    source = source_positions(xp, new_indptr, starts, counts)
    new_data = None if data is None else data[source]
    return new_indptr, indices[source], new_data


def matmul(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, n_cols,
           pattern_only=False):
    """Sparse product ``A @ B`` keeping the structural pattern.

    The pattern of the result is every ``(i, j)`` with some ``k`` such that
    ``A[i, k]`` and ``B[k, j]`` are stored, whatever their values (scipy drops
    entries that cancel; this kernel does not).

    Returns
    -------
    indptr, indices, data
        Canonical CSR of shape ``(len(a_indptr) - 1, n_cols)``.
    """
    xp = _namespace(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data)
    n_rows = len(a_indptr) - 1
    n_b = len(b_indptr) - 1
    # (a column of B that no entry of A selects is refused too, as the compiled
    # kernel does)
    _check_bounds("matmul: %s's column indices must lie in [0, %d)", ("A", a_indices, n_b),
                  ("B", b_indices, n_cols))
    g_indptr, g_indices, g_data = gather_rows(b_indptr, b_indices,
                                              None if pattern_only else b_data, a_indices)
    # each stored a_ik selected row k of B; those rows belong to output row i
    a_rows = _row_of_each_entry(xp, a_indptr, len(a_indices))
    g_counts = xp.diff(g_indptr)
    out_rows = _repeat(xp, a_rows, g_counts, len(g_indices))
    if pattern_only:
        return coo_to_csr(n_rows, n_cols, out_rows, g_indices, None)
    a_vals = xp.ones(len(a_indices)) if a_data is None else a_data
    b_vals = xp.ones(len(g_indices)) if g_data is None else g_data
    # (xp.multiply, not ``*``: numpy's operator may reuse the temporary in place
    # and then keep a byte-swapped input's dtype instead of the promoted one)
    values = xp.multiply(b_vals, _repeat(xp, a_vals, g_counts, len(g_indices)))
    return coo_to_csr(n_rows, n_cols, out_rows, g_indices, values)


def scale_rows(indptr, data, scale):
    """Data of ``diag(scale) @ M`` for CSR ``M`` (``data=None``: all ones).

    Examples
    --------
    >>> scale_rows(np.array([0, 2, 3]), None, np.array([2., 5.]))
    array([2., 2., 5.])
    """
    xp = _namespace(indptr, data, scale)
    if len(scale) != len(indptr) - 1:
        # (np.repeat would broadcast one row's counts over a longer scale)
        raise ValueError("scale_rows: scale has length %d, expected %d"
                         % (len(scale), len(indptr) - 1))
    repeated = _repeat(xp, xp.asarray(scale), xp.diff(indptr),
                       None if data is None else len(data))
    # (xp.multiply, not ``*``: see matmul)
    return repeated if data is None else xp.multiply(data, repeated)


def multiply_add(a, b, c):
    """``a * b + c`` for 1-d arrays of one length, rounded as numpy forms it (the
    product first, no fused multiply-add); ``b`` and ``c`` may also be numpy
    scalars of ``a``'s dtype.

    A pending row factor ``(a, b)`` added to another (see
    ``sparsegrad._jacobian._vector``), or a row factor times a number plus a
    number (two terms of one matrix, ``s2 * d + s``), in one pass instead of two.

    Examples
    --------
    >>> multiply_add(np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([0.5, 0.5]))
    array([3.5, 8.5])
    """
    return a * b + c


def sum_of_products(a, b, s, c, e, t):
    """``(a * b) * s + (c * e) * t`` for 1-d arrays ``a``, ``c`` of one length and
    dtype, rounded as numpy forms it (each product first, no fused multiply-add);
    ``b``, ``e`` are arrays like them or None (no product), ``s``, ``t`` numpy
    scalars of their dtype or None (no scaling).

    Two terms of one matrix with different scalars, ``s * (a * b) + t * (c * e)``
    (pending row factors, see ``sparsegrad._jacobian._vector``), added in one
    pass instead of five.

    Examples
    --------
    >>> sum_of_products(np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.float64(2.0),
    ...                 np.array([0.5, 0.5]), None, None)
    array([ 6.5, 16.5])
    """
    first = a if b is None else a * b
    second = c if e is None else c * e
    return (first if s is None else first * s) + (second if t is None else second * t)


def take_product(a, b, rows, runs=None):
    """``(a * b)[rows]`` for 1-d arrays ``a``, ``b`` of one length and int64 ``rows``
    (numpy's indexing rules: negative rows count from the end, out of range
    raises ``IndexError``).

    A pending row factor ``(a, b)`` gathered (``x[idx]`` of a product) in one
    pass instead of two.  ``runs``: :func:`index_runs` of ``rows``, or None
    (see :func:`take`).

    Examples
    --------
    >>> take_product(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]), np.array([2, -1, 0]))
    array([18., 18.,  4.])
    """
    _check_runs("take_product", rows, runs)
    return (a * b)[rows]


def take(a, rows, runs=None):
    """``a[rows]`` for a 1-d array ``a`` and int64 ``rows`` (numpy's indexing rules:
    negative rows count from the end, out of range raises ``IndexError``).

    The gathers of values and row factors that stencils make (``x[east]``).
    ``runs``: :func:`index_runs` of these ``rows`` (the compiled kernel then
    copies run by run instead of reading every index), or None: the same result
    either way.  Only the ends of the runs are checked against ``rows``
    (``ValueError`` if they do not fit); the caller keeps the runs beside the
    read-only rows they were found in.

    Examples
    --------
    >>> take(np.array([1.0, 2.0, 3.0]), np.array([2, -1, 0]))
    array([3., 3., 1.])
    >>> rows = np.array([1, 2, 3, 0])
    >>> take(np.array([1.0, 2.0, 3.0, 4.0]), rows, index_runs(rows, min_run=2))
    array([2., 3., 4., 1.])
    """
    _check_runs("take", rows, runs)
    return a[rows]


#: :func:`index_runs` keeps runs that average at least this many rows
MIN_RUN = 8


def index_runs(rows, min_run=MIN_RUN):
    """Where the runs of consecutive row numbers of ``rows`` start, or None.

    ``rows``: a 1-d int64 array.  Returns the int64 array ``starts`` with
    ``starts[0] == 0`` and ``starts[-1] == len(rows)`` such that each
    ``rows[starts[j]:starts[j + 1]]`` counts up by one from ``rows[starts[j]]``,
    every run as long as it can be; None when ``rows`` is empty, holds a
    negative number, or has more than ``len(rows) // min_run`` runs (then a
    gather run by run would not pay).

    A stencil's index array made by ``np.roll`` of a grid's numbers is a few
    long runs (east or west neighbours: two per grid line; north or south:
    two in all): found once per index array, its gathers (:func:`take`,
    :func:`take_product`) then copy blocks.

    Examples
    --------
    >>> index_runs(np.array([1, 2, 3, 0, 5, 6, 7, 4]), min_run=2)
    array([0, 3, 4, 7, 8])
    >>> print(index_runs(np.array([3, 1, 2, 0]), min_run=2))
    None
    """
    min_run = operator.index(min_run)
    if min_run < 1:
        raise ValueError("index_runs: min_run must be >= 1, got %d" % min_run)
    xp = _namespace(rows)
    n = len(rows)
    if n == 0 or int(rows.min()) < 0:
        return None
    breaks = xp.flatnonzero(rows[1:] - rows[:-1] != 1) + 1
    if len(breaks) + 1 > n // min_run:
        return None
    starts = xp.empty(len(breaks) + 2, dtype=INDEX_DTYPE)
    starts[0], starts[-1] = 0, n
    starts[1:-1] = breaks
    return starts


def _check_runs(name, rows, runs):
    """``runs`` None, or starts of runs that fit ``rows``: from 0 to ``len(rows)``,
    increasing, each run's last row its first plus its length less one."""
    if runs is None:
        return
    n = len(rows)
    fit = runs.ndim == 1 and len(runs) >= 2 and int(runs[0]) == 0 and int(runs[-1]) == n
    if fit:
        ends = runs[1:] - 1
        fit = bool((ends >= runs[:-1]).all()) and bool(
            (rows[ends] - rows[runs[:-1]] == ends - runs[:-1]).all())
    if not fit:
        raise ValueError("%s: the runs do not fit the rows (index_runs of other rows?)"
                         % name)


def same_index(a, b):
    """Whether the integer arrays ``a`` and ``b`` have one shape and equal entries.

    How a repeated evaluation recognises an index array it has read before
    (``f[east]``: the copy kept from the last read against the array now).

    Examples
    --------
    >>> a = np.array([2, 0, 1])
    >>> same_index(a, a.copy()), same_index(a, np.array([2, 0, 3])), same_index(a, a[:2])
    (True, False, False)
    """
    if a.shape != b.shape:
        return False
    return bool((a == b).all())


def selection_csr(columns):
    """``indptr, indices`` of the selection whose row ``r`` holds one entry at ``columns[r]``.

    Parameters
    ----------
    columns : int64 array
        One column per row; ``-1`` for a row without entry.

    Returns
    -------
    indptr, indices
        int64 CSR arrays (the data of a selection is all ones).

    Examples
    --------
    >>> selection_csr(np.array([2, -1, 0]))
    (array([0, 1, 1, 2]), array([2, 0]))
    """
    xp = _namespace(columns)
    columns = _as_index(xp, columns, "selection_csr columns")
    if len(columns) and columns.min() < -1:
        row = int(xp.argmax(columns < -1))
        raise ValueError("selection_csr: columns must be >= -1, got %d at row %d"
                         % (int(columns[row]), row))
    valid = columns >= 0
    indptr = xp.zeros(len(columns) + 1, dtype=INDEX_DTYPE)
    xp.cumsum(valid, dtype=INDEX_DTYPE, out=indptr[1:])
    return indptr, columns[valid]


# ---------------------------------------------------------------- programs

#: the opcodes of :func:`run_program`, in their numbers' order
PROGRAM_OPS = ("load", "param", "add", "subtract", "multiply", "divide", "negative",
               "exp", "log", "sqrt", "sin", "cos", "tanh", "power", "store",
               "scale", "shift", "rdivide", "keep")
_OP = {name: number for number, name in enumerate(PROGRAM_OPS)}
_BINARY = {_OP["add"]: np.add, _OP["subtract"]: np.subtract, _OP["multiply"]: np.multiply,
           _OP["divide"]: np.divide, _OP["keep"]: lambda a, b: np.where(b != 0, a, 0.0)}
_UNARY = {_OP["negative"]: np.negative, _OP["exp"]: np.exp, _OP["log"]: np.log,
          _OP["sqrt"]: np.sqrt, _OP["sin"]: np.sin, _OP["cos"]: np.cos, _OP["tanh"]: np.tanh}
# d = f(a, params[b])
_BY_PARAM = {_OP["power"]: np.power, _OP["scale"]: np.multiply, _OP["shift"]: np.add,
             _OP["rdivide"]: lambda a, c: np.divide(c, a)}


def _check_program(instructions, segments, n_leaves, n_params, n_rows):
    """``instructions, segments`` as int64 arrays, after checking every field
    that addresses something (ValueError naming the first bad instruction)."""
    instructions = np.asarray(instructions)
    segments = np.asarray(segments)
    for name, a, width in (("instructions", instructions, 4), ("segments", segments, 6)):
        if a.ndim != 2 or a.shape[1] != width or (a.size and a.dtype.kind not in "iu"):
            raise ValueError("run_program: %s must be an integer array of shape (n, %d), "
                             "got %s %s" % (name, width, a.dtype, a.shape))
    instructions = np.ascontiguousarray(instructions, dtype=INDEX_DTYPE)
    segments = np.ascontiguousarray(segments, dtype=INDEX_DTYPE)
    bounds = {"leaf": n_leaves, "param": n_params}
    # fields 1-3 of each opcode: a buffer written, buffers read, or an index of
    # a table (leaves, params, the segment's slots); None: unused (must be 0)
    layout = {_OP["load"]: ("write", "leaf", None), _OP["param"]: ("write", "param", None),
              _OP["store"]: (None, "read", "slot")}
    for op in _BY_PARAM:
        layout[op] = ("write", "read", "param")
    for op in _BINARY:
        layout[op] = ("write", "read", "read")
    for op in _UNARY:
        layout[op] = ("write", "read", None)
    n_instructions = len(instructions)
    spans = []
    for s, (rows, begin, end, n_buffers, first_row, slots) in enumerate(segments.tolist()):
        if (rows < 0 or not 0 <= begin <= end <= n_instructions or n_buffers < 1
                or not 0 <= first_row <= n_rows - rows or not 0 <= slots <= 65536):
            raise ValueError("run_program: segment %d (%d rows from row %d, instructions "
                             "%d..%d, %d buffers, %d slots) does not fit %d instructions and "
                             "%d rows" % (s, rows, first_row, begin, end, n_buffers, slots,
                                          n_instructions, n_rows))
        spans.append((first_row, rows))
        bounds["slot"] = slots
        written, stored = set(), set()
        for i in range(begin, end):
            op, *fields = instructions[i].tolist()
            if op not in layout:
                raise ValueError("run_program: instruction %d has no opcode %d" % (i, op))
            reads = [f for kind, f in zip(layout[op], fields) if kind == "read"]
            for kind, field in zip(layout[op], fields):
                if kind is None:
                    ok = field == 0
                elif kind == "write":
                    ok = 0 <= field < n_buffers and field not in reads
                elif kind == "read":
                    ok = field in written
                elif kind == "slot":
                    ok = 0 <= field < slots and field not in stored
                    stored.add(field)
                else:
                    ok = 0 <= field < bounds[kind]
                if not ok:
                    raise ValueError("run_program: instruction %d (%s %s) of segment %d: "
                                     "bad field %d" % (i, PROGRAM_OPS[op], fields, s, field))
            if layout[op][0] == "write":
                written.add(fields[0])
        if len(stored) != slots:
            raise ValueError("run_program: segment %d stores %d of its %d slots"
                             % (s, len(stored), slots))
    spans.sort()
    if any(a[0] + a[1] > b[0] for a, b in zip(spans, spans[1:])):
        raise ValueError("run_program: segments overlap")
    return instructions, segments


def _load(values, index, start, step, offset, runs, rows, name):
    """Rows ``0 .. rows - 1`` of a leaf (its runs checked against its index)."""
    positions = start + step * np.arange(rows, dtype=INDEX_DTYPE)
    if index is None:
        positions = positions + offset
    for kind, array in (("index", index), ("values", values)):
        if array is None:
            continue
        if rows and not (0 <= positions.min() and positions.max() < len(array)):
            raise ValueError("run_program: %s reads outside its %s" % (name, kind))
        if kind == "index":
            index = np.asarray(index, dtype=INDEX_DTYPE)
            _check_runs("run_program " + name, index, None if runs is None
                        else np.asarray(runs, dtype=INDEX_DTYPE))
            positions = index[positions] + offset
    return np.asarray(values, dtype=np.float64)[positions]


def run_program(instructions, segments, leaves, params, owners, adds, indptr):
    """The data of a Jacobian by a program of :mod:`sparsegrad._trace`.

    A program computes, for every row of each of its segments, values from
    gathered values (its roots, one per slot of the segment); each place of
    the result's data (a CSR matrix's, of the pattern ``indptr``) takes the
    value of one slot at its row, and some add the values of others.

    Parameters
    ----------
    instructions : int array of shape (n, 4)
        ``(opcode, d, a, b)`` rows, opcodes numbered as in ``PROGRAM_OPS``:
        ``load`` -- buffer ``d`` = leaf ``a``; ``param`` -- buffer ``d`` =
        ``params[a]``; ``add``, ``subtract``, ``multiply``, ``divide`` --
        ``d = a op b`` of buffers; ``keep`` -- ``d = a`` where ``b`` is not
        0, else 0.0 (a selection: an inf or nan of ``a`` elsewhere is
        dropped); ``negative``, ``exp``, ``log``, ``sqrt``, ``sin``, ``cos``,
        ``tanh`` -- ``d = f(a)``; ``power``, ``scale``,
        ``shift``, ``rdivide`` -- ``d = a ** c``, ``a * c``, ``a + c``, ``c /
        a`` for ``c = params[b]``; ``store`` -- buffer ``a`` is slot ``b``.
        Unused fields are 0.  A buffer is read only after an instruction of
        its segment wrote it, and never by the instruction writing it; every
        slot of a segment is stored once.
    segments : int array of shape (m, 6)
        ``(rows, begin, end, buffers, first, slots)``: instructions ``begin
        .. end - 1`` run on rows ``0 .. rows - 1`` of the segment, which are
        rows ``first ..`` of the result, with buffers ``0 .. buffers - 1``,
        and store slots ``0 .. slots - 1``.  Segments do not overlap, and
        the places of their rows are all the places.
    leaves : sequence of (values, index, start, step, offset, runs)
        Row ``j`` of a leaf is ``values[index[start + step * j] + offset]``,
        or ``values[start + step * j + offset]`` for ``index`` None (float64
        values, int64 index); ``runs`` None or :func:`index_runs` of
        ``index`` (the compiled loop then copies run by run).
    params : float64 array
    owners : uint8 or uint16 array, one per place
        The slot of the place's segment whose value the place takes.
    adds : int array of shape (k, 4)
        ``(segment, row, slot, place)``: the slot's value at that row of the
        segment is added to the place (one of the row's), after its owner's;
        sorted by segment, row and slot.
    indptr : int32 or int64 array
        The result's rows: row ``r`` holds places ``indptr[r] .. indptr[r +
        1] - 1`` of its data.

    Returns
    -------
    float64 array of ``indptr[-1]`` places

    Examples
    --------
    >>> ops = {name: number for number, name in enumerate(PROGRAM_OPS)}
    >>> instructions = [(ops["load"], 0, 0, 0), (ops["exp"], 1, 0, 0),
    ...                 (ops["store"], 0, 1, 0)]
    >>> leaves = [(np.array([0.0, 1.0]), None, 1, -1, 0, None)]      # rows read 1, 0
    >>> run_program(instructions, [(2, 0, 3, 2, 0, 1)], leaves, np.zeros(0),
    ...             np.zeros(2, np.uint8), np.zeros((0, 4), int), np.array([0, 1, 2]))
    array([2.71828183, 1.        ])
    """
    leaves = list(leaves)
    params = np.asarray(params, dtype=np.float64)
    indptr = _as_index(np, indptr, "run_program indptr")
    if indptr.ndim != 1 or len(indptr) < 1 or indptr[0] != 0 or (np.diff(indptr) < 0).any():
        raise ValueError("run_program: indptr must be a non-decreasing vector from 0 on")
    nnz = int(indptr[-1])
    instructions, segments = _check_program(instructions, segments, len(leaves), len(params),
                                            len(indptr) - 1)
    owners = np.asarray(owners)
    adds = np.asarray(adds, dtype=INDEX_DTYPE).reshape(-1, 4)
    if owners.shape != (nnz,) or owners.dtype.kind != "u":
        raise ValueError("run_program: owners must be unsigned, one per place (%d)" % nnz)
    out = np.full(nnz, np.nan)
    written = np.zeros(nnz, dtype=bool)
    with np.errstate(all="ignore"):   # (as the compiled loop: no warnings)
        for s, (rows, begin, end, n_buffers, first_row, slots) in enumerate(
                segments.tolist()):
            buffers, slab = [None] * n_buffers, [None] * slots
            for i, (op, d, a, b) in enumerate(instructions[begin:end].tolist(), begin):
                if op == _OP["load"]:
                    buffers[d] = _load(*leaves[a], rows, "leaf %d (instruction %d)" % (a, i))
                elif op == _OP["param"]:
                    buffers[d] = np.full(rows, params[a])
                elif op in _BINARY:
                    buffers[d] = _BINARY[op](buffers[a], buffers[b])
                elif op in _UNARY:
                    buffers[d] = _UNARY[op](buffers[a])
                elif op in _BY_PARAM:
                    buffers[d] = _BY_PARAM[op](buffers[a], params[b])
                else:
                    slab[b] = buffers[a]
            lo, hi = int(indptr[first_row]), int(indptr[first_row + rows])
            row_of_place = _row_of_each_entry(np, indptr[first_row:first_row + rows + 1]
                                              - lo, hi - lo)
            owner = owners[lo:hi].astype(INDEX_DTYPE)
            if len(owner) and owner.max() >= slots:
                raise ValueError("run_program: a place of segment %d is owned by slot %d of "
                                 "its %d" % (s, owner.max(), slots))
            if hi > lo:
                out[lo:hi] = np.stack(slab)[owner, row_of_place]
            written[lo:hi] = True
            mine = adds[adds[:, 0] == s]
            for _, row, k, place in mine.tolist():
                if not (0 <= row < rows and 0 <= k < slots
                        and indptr[first_row + row] <= place < indptr[first_row + row + 1]):
                    raise ValueError("run_program: add (%d, %d, %d, %d) is not at a place of "
                                     "its row" % (s, row, k, place))
                out[place] += slab[k][row]
    if not written.all():
        raise ValueError("run_program: the segments' rows hold %d of the %d places"
                         % (int(written.sum()), nnz))
    order = np.lexsort((adds[:, 2], adds[:, 1], adds[:, 0])) if len(adds) else None
    if order is not None and (order != np.arange(len(adds))).any():
        raise ValueError("run_program: adds must be sorted by segment, row and slot")
    return out
