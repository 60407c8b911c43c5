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

Example
-------
>>> import numpy as np
>>> indptr = np.array([0, 1, 2]); indices = np.array([0, 1])
>>> merge_scaled(2, 2, [(indptr, indices, None, np.array([2.0, 3.0])),
...                     (indptr, indices, None, None)])[2]
array([3., 4.])
"""
import numpy as np

INDEX_DTYPE = np.int64

__all__ = ["merge_scaled", "gather_rows", "matmul", "scale_rows", "coo_to_csr"]


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


def merge_scaled(n_rows, n_cols, terms, pattern_only=False):
    """Sum of row-scaled CSR matrices, ``sum_k diag(scale_k) @ M_k``.

    Parameters
    ----------
    n_rows, n_cols : int
        Common shape of all terms.
    terms : sequence of (indptr, indices, data, row_scale)
        ``data`` may be ``None`` (all ones); ``row_scale`` is ``None`` (ones)
        or a 1-d array of length ``n_rows``.
    pattern_only : bool
        Compute only the union pattern; data of the result is ``None``.

    Returns
    -------
    indptr, indices, data
        Canonical CSR with the union of the input patterns (structural zeros
        kept).  The data dtype is the result type of all data and scales.
    """
    rows, cols, vals = [], [], []
    for indptr, indices, data, scale in terms:
        entry_rows = _row_of_each_entry(indptr)
        rows.append(entry_rows)
        cols.append(indices)
        if not pattern_only:
            v = np.ones(len(indices)) if data is None else data
            if scale is not None:
                v = v * np.asarray(scale)[entry_rows]
            vals.append(v)
    if not terms:
        return coo_to_csr(n_rows, n_cols, np.zeros(0, INDEX_DTYPE),
                          np.zeros(0, INDEX_DTYPE),
                          None if pattern_only else np.zeros(0))
    return coo_to_csr(n_rows, n_cols, np.concatenate(rows), np.concatenate(cols),
                      None if pattern_only else np.concatenate(vals))


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
