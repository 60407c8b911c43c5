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

Example
-------
>>> import numpy as np
>>> indptr = np.array([0, 1, 2]); indices = np.array([0, 1])
>>> merge_scaled(2, 2, [(indptr, indices, None, np.array([2.0, 3.0])),
...                     (indptr, indices, None, None)])[2]
array([3., 4.])
"""
import operator

import numpy as np

INDEX_DTYPE = np.int64

__all__ = ["merge_scaled", "gather_rows", "matmul", "scale_rows", "coo_to_csr",
           "selection_csr"]


def _row_of_each_entry(indptr):
    """Row number of every stored entry of a CSR matrix."""
    counts = np.diff(indptr)
    return np.repeat(np.arange(len(counts), dtype=INDEX_DTYPE), counts)


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
    rows = np.asarray(rows, dtype=INDEX_DTYPE)
    cols = np.asarray(cols, dtype=INDEX_DTYPE)
    for name, coords, bound in (("rows", rows, n_rows), ("cols", cols, n_cols)):
        if len(coords) and (coords.min() < 0 or coords.max() >= bound):
            raise ValueError("coo_to_csr: %s must lie in [0, %d)" % (name, bound))
    key = rows * INDEX_DTYPE(max(n_cols, 1)) + cols
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.ones(len(key), dtype=bool)
    np.not_equal(key[1:], key[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    unique_key = key[starts]
    out_rows = unique_key // max(n_cols, 1)
    indices = (unique_key - out_rows * max(n_cols, 1)).astype(INDEX_DTYPE)
    indptr = np.zeros(n_rows + 1, dtype=INDEX_DTYPE)
    np.cumsum(np.bincount(out_rows, minlength=n_rows), out=indptr[1:])
    if values is None:
        return indptr, indices, None
    values = np.asarray(values)[order]
    data = values[starts]
    later = ~first
    # unbuffered and in input order: ((v0 + v1) + v2) + ...
    np.add.at(data, np.cumsum(first)[later] - 1, values[later])
    return indptr, indices, data


def _merge_term(term, n_rows):
    """``(indptr, indices, data, row_scale, first_row, m)`` of a merge term given
    as a 4-tuple (``first_row`` 0, ``m == n_rows``) or a 5-tuple."""
    if len(term) == 4:
        indptr, indices, data, scale = term
        first_row = 0
        m = n_rows
    elif len(term) == 5:
        indptr, indices, data, scale, first_row = term
        first_row = operator.index(first_row)
        m = len(indptr) - 1
        if m < 0:
            raise ValueError("merge_scaled: a term's indptr must have at least one entry")
    else:
        raise ValueError("merge_scaled: a term is (indptr, indices, data, row_scale"
                         "[, first_row]), got a tuple of %d items" % len(term))
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
    terms : sequence of (indptr, indices, data, row_scale[, first_row])
        ``data`` may be ``None`` (all ones); ``row_scale`` is ``None`` (ones)
        or a 1-d array with one entry per row of the term (a broadcast,
        stride-0 array is fine).  A 4-tuple is an ``n_rows x n_cols`` matrix.
        A 5-tuple is a matrix of ``m = len(indptr) - 1`` rows added into rows
        ``first_row .. first_row + m - 1`` of the result; it must fit:
        ``0 <= first_row`` and ``first_row + m <= n_rows``.  Rows of the
        result that no term covers are empty; terms whose rows overlap are
        summed.
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
        Duplicates are summed term by term, in the order of ``terms``.

    Examples
    --------
    >>> block = (np.array([0, 1]), np.array([1]), None, np.array([5.0]), 2)
    >>> merge_scaled(3, 2, [block], index_dtype=np.int32)
    (array([0, 0, 0, 1], dtype=int32), array([1], dtype=int32), array([5.]))
    """
    rows, cols, vals = [], [], []
    total = 0
    for term in terms:
        indptr, indices, data, scale, first_row, m = _merge_term(term, n_rows)
        entry_rows = _row_of_each_entry(indptr)
        rows.append(entry_rows + first_row)
        cols.append(indices)
        total += len(indices)
        if not pattern_only:
            v = np.ones(len(indices)) if data is None else data
            if scale is not None:
                scale = np.asarray(scale)
                if scale.shape != (m,):
                    raise ValueError("merge_scaled: a row_scale must have shape (%d,), got %s"
                                     % (m, scale.shape))
                v = v * scale[entry_rows]
            vals.append(v)
    dtype = _check_index_dtype(index_dtype, min(total, n_rows * n_cols), n_cols)
    if not rows:
        result = coo_to_csr(n_rows, n_cols, np.zeros(0, INDEX_DTYPE),
                            np.zeros(0, INDEX_DTYPE), None if pattern_only else np.zeros(0))
    else:
        result = coo_to_csr(n_rows, n_cols, np.concatenate(rows), np.concatenate(cols),
                            None if pattern_only else np.concatenate(vals))
    if dtype != INDEX_DTYPE:
        result = (result[0].astype(dtype), result[1].astype(dtype), result[2])
    return result


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
    rows = np.asarray(rows, dtype=INDEX_DTYPE)
    if len(rows) and rows.min() < -1:
        raise ValueError("gather_rows: row indices must be >= -1")
    valid = rows >= 0
    # rows of -1 must not touch indptr: the source may have no rows at all
    starts = np.zeros(len(rows), dtype=INDEX_DTYPE)
    counts = np.zeros(len(rows), dtype=INDEX_DTYPE)
    starts[valid] = indptr[rows[valid]]
    counts[valid] = indptr[rows[valid] + 1] - starts[valid]
    new_indptr = np.zeros(len(rows) + 1, dtype=INDEX_DTYPE)
    np.cumsum(counts, out=new_indptr[1:])
    source = np.arange(new_indptr[-1], dtype=INDEX_DTYPE)
    source -= np.repeat(new_indptr[:-1] - starts, counts)
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
    n_rows = len(a_indptr) - 1
    g_indptr, g_indices, g_data = gather_rows(b_indptr, b_indices,
                                              None if pattern_only else b_data, a_indices)
    # each stored a_ik selected row k of B; those rows belong to output row i
    a_rows = _row_of_each_entry(a_indptr)
    out_rows = np.repeat(a_rows, np.diff(g_indptr))
    if pattern_only:
        return coo_to_csr(n_rows, n_cols, out_rows, g_indices, None)
    a_vals = np.ones(len(a_indices)) if a_data is None else a_data
    b_vals = np.ones(len(g_indices)) if g_data is None else g_data
    values = b_vals * np.repeat(a_vals, np.diff(g_indptr))
    return coo_to_csr(n_rows, n_cols, out_rows, g_indices, values)


def scale_rows(indptr, data, scale):
    """Data of ``diag(scale) @ M`` for CSR ``M`` (``data=None``: all ones).

    Examples
    --------
    >>> scale_rows(np.array([0, 2, 3]), None, np.array([2., 5.]))
    array([2., 2., 5.])
    """
    repeated = np.repeat(np.asarray(scale), np.diff(indptr))
    return repeated if data is None else data * repeated


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
    columns = np.asarray(columns, dtype=INDEX_DTYPE)
    if len(columns) and columns.min() < -1:
        row = int(np.argmax(columns < -1))
        raise ValueError("selection_csr: columns must be >= -1, got %d at row %d"
                         % (columns[row], row))
    valid = columns >= 0
    indptr = np.zeros(len(columns) + 1, dtype=INDEX_DTYPE)
    np.cumsum(valid, out=indptr[1:])
    return indptr, columns[valid]
