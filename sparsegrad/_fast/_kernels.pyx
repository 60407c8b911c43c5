# cython: language_level=3
"""Compiled kernels on raw CSR arrays: the Cython twins of ``_reference.py``.

Every function here has the signature, the docstring contract and the results
of the function of the same name in :mod:`sparsegrad._fast._reference`; read
that module for the conventions (int64 indices, ``data=None`` meaning all ones,
``pattern_only``, structural zeros kept, canonical sorted output, inputs never
modified, outputs never aliasing inputs).

How each kernel is built
------------------------
* A ``def`` wrapper validates and converts: index arrays must be 1-d integer
  arrays (converted to contiguous int64), lengths must agree, every ``indptr``
  must start at 0, never decrease and end at ``len(indices)``, and every index
  that the loop uses to address memory (column numbers, row numbers) is checked
  against its bound.  Invalid input raises ``ValueError`` or ``TypeError``
  instead of crashing.
* The wrapper then calls a typed loop that runs without the GIL.  The loops use
  raw pointers and may assume everything the wrapper checked; nothing else.
* Output arrays are allocated at an upper bound of their size, filled, and
  trimmed in place.

Value dtypes
------------
The loops are compiled for float32, float64, complex64 and complex128 (the
fused type ``data_t`` of ``_types.pxd``).  The dtype of the result is the one
the reference gives (numpy's promotion of the inputs, with ``data=None`` read
as float64 ones).  When that dtype is anything else (longdouble, clongdouble,
float16, integers, bool, object), the wrapper hands the call, unchanged, to the
reference kernel, which is exact for every dtype.

Results are bit-for-bit those of the reference for real dtypes: sums are taken
in the order the reference takes them (term by term, entry by entry) and every
product is formed in the dtype in which numpy forms it.  For complex dtypes the
sums are identical too, but a product of two complex numbers can differ in the
last bit, because numpy's vectorised complex multiply uses fused multiply-add
instructions on CPUs that have them and this module uses the textbook formula.
"""
cimport cython
cimport numpy as cnp
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc

import operator

import numpy as np

from . import _reference
from ._types cimport complex64_t, complex128_t, data_t

cnp.import_array()

INDEX_DTYPE = np.int64

__all__ = ["merge_scaled", "gather_rows", "matmul", "scale_rows", "coo_to_csr"]

# dtype codes of the compiled specialisations of data_t
cdef enum:
    F32 = 0
    F64 = 1
    C64 = 2
    C128 = 3

_KINDS = {np.dtype(np.float32): F32, np.dtype(np.float64): F64,
          np.dtype(np.complex64): C64, np.dtype(np.complex128): C128}


# ---------------------------------------------------------------------------
# Validation and conversion (with the GIL)
# ---------------------------------------------------------------------------

cdef int _kind(dtype):
    """Code of the compiled loop for ``dtype``, or -1: use the reference."""
    return _KINDS.get(dtype, -1)


cdef inline void* _ptr(object array):
    """Data pointer of a contiguous ndarray, NULL for None."""
    if array is None:
        return NULL
    return cnp.PyArray_DATA(<cnp.ndarray>array)


cdef int64_t _dim(object n, str name) except -1:
    cdef int64_t value = operator.index(n)
    if value < 0:
        raise ValueError("%s must be non-negative, got %d" % (name, value))
    return value


cdef object _as_index(object x, str name):
    """``x`` as a contiguous 1-d int64 array; other integer dtypes are converted."""
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError("%s must be 1-d, got %d dimensions" % (name, a.ndim))
    if a.dtype != INDEX_DTYPE:
        if a.size == 0 or (a.dtype.kind in "iu" and np.can_cast(a.dtype, INDEX_DTYPE)):
            a = a.astype(INDEX_DTYPE)
        else:
            raise TypeError("%s must hold int64 indices, got dtype %s" % (name, a.dtype))
    return np.ascontiguousarray(a)


cdef object _as_values(object x, Py_ssize_t n, str name):
    """``x`` as a 1-d array of length ``n`` (dtype unchanged, maybe strided)."""
    a = np.asarray(x)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError("%s must be 1-d of length %d, got shape %s" % (name, n, a.shape))
    return a


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _first_decrease(const int64_t* a, int64_t n) noexcept nogil:
    cdef int64_t p
    for p in range(1, n):
        if a[p] < a[p - 1]:
            return p
    return -1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _first_outside(const int64_t* a, int64_t n, int64_t lo, int64_t hi) noexcept nogil:
    cdef int64_t p
    for p in range(n):
        if a[p] < lo or a[p] >= hi:
            return p
    return -1


cdef _check_indptr(indptr, int64_t n_rows, int64_t nnz, str name):
    """``indptr`` has ``n_rows + 1`` entries, starts at 0, ends at ``nnz``, never decreases."""
    cdef const int64_t* ip
    cdef int64_t bad
    if indptr.shape[0] != n_rows + 1:
        raise ValueError("%s indptr has length %d, expected %d"
                         % (name, indptr.shape[0], n_rows + 1))
    ip = <const int64_t*>_ptr(indptr)
    if ip[0] != 0 or ip[n_rows] != nnz:
        raise ValueError("%s indptr must run from 0 to nnz=%d, got %d to %d"
                         % (name, nnz, ip[0], ip[n_rows]))
    with nogil:
        bad = _first_decrease(ip, n_rows + 1)
    if bad >= 0:
        raise ValueError("%s indptr decreases at position %d" % (name, bad))


cdef _check_range(a, int64_t lo, int64_t hi, str name):
    """Every entry of the int64 array ``a`` lies in ``[lo, hi)``."""
    cdef int64_t bad
    cdef const int64_t* p = <const int64_t*>_ptr(a)
    cdef int64_t n = a.shape[0]
    with nogil:
        bad = _first_outside(p, n, lo, hi)
    if bad >= 0:
        raise ValueError("%s: entry %d is %d, outside [%d, %d)" % (name, bad, a[bad], lo, hi))


cdef object _trim(object array, int64_t n):
    """Shrink a freshly allocated 1-d array to its first ``n`` entries, in place."""
    if array is not None and array.shape[0] != n:
        array.resize(n, refcheck=False)
    return array


# ---------------------------------------------------------------------------
# Typed helpers (no GIL)
# ---------------------------------------------------------------------------

cdef inline data_t _mul(data_t x, data_t y) noexcept nogil:
    """``x * y`` with numpy's formula (complex: (ac - bd) + (ad + bc)i)."""
    cdef data_t z
    if data_t is complex64_t:
        (<float*>&z)[0] = x.real * y.real - x.imag * y.imag
        (<float*>&z)[1] = x.real * y.imag + x.imag * y.real
        return z
    elif data_t is complex128_t:
        (<double*>&z)[0] = x.real * y.real - x.imag * y.imag
        (<double*>&z)[1] = x.real * y.imag + x.imag * y.real
        return z
    else:
        return x * y


cdef inline void _sift_down(int64_t* a, int64_t root, int64_t n) noexcept nogil:
    cdef int64_t child, top = a[root]
    while True:
        child = 2 * root + 1
        if child >= n:
            break
        if child + 1 < n and a[child + 1] > a[child]:
            child += 1
        if a[child] <= top:
            break
        a[root] = a[child]
        root = child
    a[root] = top


cdef void _sort_row(int64_t* a, int64_t n) noexcept nogil:
    """Sort the column numbers of one output row (distinct values).

    Rows are short and often nearly sorted (a merge of sorted runs), so
    insertion sort; heapsort bounds the cost of the rare long row.
    """
    cdef int64_t p, q, x, end
    if n <= 32:
        for p in range(1, n):
            x = a[p]
            q = p - 1
            while q >= 0 and a[q] > x:
                a[q + 1] = a[q]
                q -= 1
            a[q + 1] = x
        return
    if _first_decrease(a, n) < 0:
        return
    p = n // 2 - 1
    while p >= 0:
        _sift_down(a, p, n)
        p -= 1
    end = n - 1
    while end > 0:
        x = a[0]
        a[0] = a[end]
        a[end] = x
        _sift_down(a, 0, end)
        end -= 1


cdef inline int64_t _add_entry(int64_t i, int64_t j, data_t v, bint values,
                               int64_t* marker, data_t* acc, int64_t* out_indices,
                               int64_t nnz) noexcept nogil:
    """Add ``v`` at column ``j`` of output row ``i``; return the new entry count.

    Gustavson's dense row: ``marker[j] == i`` once column ``j`` is in row ``i``
    (its place in ``out_indices`` is then taken), and ``acc[j]`` holds its
    running sum, in the order the values arrive.
    """
    if marker[j] != i:
        marker[j] = i
        out_indices[nnz] = j
        if values:
            acc[j] = v
        return nnz + 1
    if values:
        acc[j] = acc[j] + v
    return nnz


cdef inline void _finish_row(int64_t start, int64_t nnz, bint values, const data_t* acc,
                             int64_t* out_indices, data_t* out_data) noexcept nogil:
    """Sort the columns of the row at ``[start, nnz)`` and write their sums."""
    cdef int64_t p
    _sort_row(out_indices + start, nnz - start)
    if values:
        for p in range(start, nnz):
            out_data[p] = acc[out_indices[p]]


# ---------------------------------------------------------------------------
# Loops (no GIL; inputs validated by the wrappers)
# ---------------------------------------------------------------------------

@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _merge_loop(int64_t n_rows, Py_ssize_t n_terms,
                         const int64_t** indptrs, const int64_t** indices,
                         const data_t** datas, const data_t** scales, bint values,
                         int64_t* marker, data_t* acc, int64_t* out_indptr,
                         int64_t* out_indices, data_t* out_data) noexcept nogil:
    # Row by row, terms in order, so that each sum is formed in the order of
    # the reference: term by term, entry by entry.
    cdef int64_t i, p, start, nnz = 0
    cdef Py_ssize_t k
    cdef const int64_t* ip
    cdef const data_t* d
    cdef const data_t* s
    cdef data_t one = 1, v = 1, sc = 1
    out_indptr[0] = 0
    for i in range(n_rows):
        start = nnz
        for k in range(n_terms):
            ip = indptrs[k]
            d = datas[k]
            s = scales[k]
            if values and s != NULL:
                sc = s[i]
            for p in range(ip[i], ip[i + 1]):
                if values:
                    v = d[p] if d != NULL else one
                    if s != NULL:
                        v = _mul(v, sc)
                nnz = _add_entry(i, indices[k][p], v, values, marker, acc, out_indices, nnz)
        _finish_row(start, nnz, values, acc, out_indices, out_data)
        out_indptr[i + 1] = nnz
    return nnz


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _gather_indptr(int64_t n_out, const int64_t* rows, const int64_t* indptr,
                         int64_t* out_indptr) noexcept nogil:
    cdef int64_t r, row
    out_indptr[0] = 0
    for r in range(n_out):
        row = rows[r]
        if row < 0:
            out_indptr[r + 1] = out_indptr[r]
        else:
            out_indptr[r + 1] = out_indptr[r] + indptr[row + 1] - indptr[row]


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _gather_copy(int64_t n_out, const int64_t* rows, const int64_t* indptr,
                       const int64_t* indices, const data_t* data,
                       const int64_t* out_indptr, int64_t* out_indices,
                       data_t* out_data) noexcept nogil:
    cdef int64_t r, row, p, q
    for r in range(n_out):
        row = rows[r]
        if row < 0:
            continue
        q = out_indptr[r]
        for p in range(indptr[row], indptr[row + 1]):
            out_indices[q] = indices[p]
            if data != NULL:
                out_data[q] = data[p]
            q += 1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _matmul_bound(int64_t n_rows, int64_t n_cols, const int64_t* a_indptr,
                           const int64_t* a_indices, const int64_t* b_indptr) noexcept nogil:
    # sum over output rows of min(products in the row, n_cols)
    cdef int64_t i, p, k, row, total = 0
    for i in range(n_rows):
        row = 0
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            row += b_indptr[k + 1] - b_indptr[k]
        total += row if row < n_cols else n_cols
    return total


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _matmul_loop(int64_t n_rows, const int64_t* a_indptr,
                          const int64_t* a_indices, const data_t* a_data,
                          const int64_t* b_indptr, const int64_t* b_indices,
                          const data_t* b_data, bint values, int64_t* marker,
                          data_t* acc, int64_t* out_indptr, int64_t* out_indices,
                          data_t* out_data) noexcept nogil:
    # Gustavson's row-by-row product; a product b_kj * a_ik (the reference's
    # operand order) is added in the order of k, as the reference adds it.
    cdef int64_t i, k, p, q, start, nnz = 0
    cdef data_t one = 1, a_ik = 1, prod = 1
    out_indptr[0] = 0
    for i in range(n_rows):
        start = nnz
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            if values:
                a_ik = a_data[p] if a_data != NULL else one
            for q in range(b_indptr[k], b_indptr[k + 1]):
                if values:
                    prod = _mul(b_data[q] if b_data != NULL else one, a_ik)
                nnz = _add_entry(i, b_indices[q], prod, values, marker, acc, out_indices, nnz)
        _finish_row(start, nnz, values, acc, out_indices, out_data)
        out_indptr[i + 1] = nnz
    return nnz


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _scale_loop(int64_t n_rows, const int64_t* indptr, const data_t* data,
                      const data_t* scale, data_t* out) noexcept nogil:
    cdef int64_t i, p
    cdef data_t s
    for i in range(n_rows):
        s = scale[i]
        if data == NULL:
            for p in range(indptr[i], indptr[i + 1]):
                out[p] = s
        else:
            for p in range(indptr[i], indptr[i + 1]):
                out[p] = _mul(data[p], s)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _coo_loop(int64_t n_rows, int64_t nnz_in, const int64_t* rows,
                       const int64_t* cols, const data_t* vals, int64_t* head,
                       int64_t* perm, int64_t* marker, data_t* acc,
                       int64_t* out_indptr, int64_t* out_indices,
                       data_t* out_data) noexcept nogil:
    # Stable counting sort of the entries by row into perm (head[r] is where
    # row r starts), then per row: sum duplicates in input order (the order of
    # the reference's stable sort) and sort the distinct columns.
    cdef int64_t i, e, p, start, nnz = 0
    cdef bint values = vals != NULL
    cdef data_t v = 0
    for i in range(n_rows + 1):
        head[i] = 0
    for e in range(nnz_in):
        head[rows[e] + 1] += 1
    for i in range(n_rows):
        head[i + 1] += head[i]
    for e in range(nnz_in):          # head[r] is row r's cursor here
        perm[head[rows[e]]] = e
        head[rows[e]] += 1
    for i in range(n_rows, 0, -1):   # cursors have reached the next row's start
        head[i] = head[i - 1]
    head[0] = 0
    out_indptr[0] = 0
    for i in range(n_rows):
        start = nnz
        for p in range(head[i], head[i + 1]):
            e = perm[p]
            if values:
                v = vals[e]
            nnz = _add_entry(i, cols[e], v, values, marker, acc, out_indices, nnz)
        _finish_row(start, nnz, values, acc, out_indices, out_data)
        out_indptr[i + 1] = nnz
    return nnz


# ---------------------------------------------------------------------------
# def wrappers: the kernel interface
# ---------------------------------------------------------------------------

def coo_to_csr(n_rows, n_cols, rows, cols, values):
    """Canonical CSR from coordinate triplets, summing duplicates.

    Contract of :func:`sparsegrad._fast._reference.coo_to_csr`: entries in any
    order, duplicates summed in input order, entries that sum to zero kept;
    ``values=None`` gives a pattern-only result.  ``rows`` must lie in
    ``[0, n_rows)`` and ``cols`` in ``[0, n_cols)``.  Value dtypes other than
    float32/64 and complex64/128 are handed to the reference kernel.
    """
    cdef int64_t nr = _dim(n_rows, "n_rows"), nc = _dim(n_cols, "n_cols")
    cdef int64_t nnz_in, nnz
    cdef int kind = F64
    rows = _as_index(rows, "rows")
    cols = _as_index(cols, "cols")
    nnz_in = rows.shape[0]
    if cols.shape[0] != nnz_in:
        raise ValueError("rows and cols differ in length: %d and %d" % (nnz_in, cols.shape[0]))
    _check_range(rows, 0, nr, "rows")
    _check_range(cols, 0, nc, "cols")
    if values is not None:
        values = _as_values(values, nnz_in, "values")
        kind = _kind(values.dtype)
        if kind < 0:
            return _reference.coo_to_csr(nr, nc, rows, cols, values)
        values = np.ascontiguousarray(values)
    head = np.empty(nr + 1, dtype=INDEX_DTYPE)
    perm = np.empty(nnz_in, dtype=INDEX_DTYPE)
    marker = np.full(nc, -1, dtype=INDEX_DTYPE)
    out_indptr = np.empty(nr + 1, dtype=INDEX_DTYPE)
    out_indices = np.empty(nnz_in, dtype=INDEX_DTYPE)
    out_data = acc = None
    if values is not None:
        out_data = np.empty(nnz_in, dtype=values.dtype)
        acc = np.empty(nc, dtype=values.dtype)
    cdef const int64_t* r = <const int64_t*>_ptr(rows)
    cdef const int64_t* c = <const int64_t*>_ptr(cols)
    cdef void* v = _ptr(values)
    cdef int64_t* h = <int64_t*>_ptr(head)
    cdef int64_t* pm = <int64_t*>_ptr(perm)
    cdef int64_t* mk = <int64_t*>_ptr(marker)
    cdef void* ac = _ptr(acc)
    cdef int64_t* oip = <int64_t*>_ptr(out_indptr)
    cdef int64_t* oix = <int64_t*>_ptr(out_indices)
    cdef void* od = _ptr(out_data)
    with nogil:
        if kind == F32:
            nnz = _coo_loop[float](nr, nnz_in, r, c, <const float*>v, h, pm, mk,
                                   <float*>ac, oip, oix, <float*>od)
        elif kind == F64:
            nnz = _coo_loop[double](nr, nnz_in, r, c, <const double*>v, h, pm, mk,
                                    <double*>ac, oip, oix, <double*>od)
        elif kind == C64:
            nnz = _coo_loop[complex64_t](nr, nnz_in, r, c, <const complex64_t*>v, h, pm,
                                         mk, <complex64_t*>ac, oip, oix, <complex64_t*>od)
        else:
            nnz = _coo_loop[complex128_t](nr, nnz_in, r, c, <const complex128_t*>v, h, pm,
                                          mk, <complex128_t*>ac, oip, oix,
                                          <complex128_t*>od)
    return out_indptr, _trim(out_indices, nnz), _trim(out_data, nnz)


def merge_scaled(n_rows, n_cols, terms, pattern_only=False):
    """Sum of row-scaled CSR matrices, ``sum_k diag(scale_k) @ M_k``.

    Contract of :func:`sparsegrad._fast._reference.merge_scaled`: ``terms`` is
    a sequence of ``(indptr, indices, data, row_scale)``, ``data`` and
    ``row_scale`` may be ``None``; the result has the union pattern of the
    terms (structural zeros kept), sorted columns, and the dtype that numpy
    promotion of all data and scales gives.  One pass over the rows with a
    dense marker and accumulator of length ``n_cols``; a term whose own
    product dtype is narrower than the result dtype is scaled with numpy first,
    so that its rounding is the reference's.  Other value dtypes than
    float32/64 and complex64/128 are handed to the reference kernel.
    """
    cdef int64_t nr = _dim(n_rows, "n_rows"), nc = _dim(n_cols, "n_cols")
    cdef int64_t nnz = 0, total = 0
    cdef Py_ssize_t k, n_terms
    cdef int kind = F64
    cdef bint values = not pattern_only
    terms = list(terms)
    n_terms = len(terms)
    prepared = []
    dtypes = []
    for k in range(n_terms):
        indptr, indices, data, scale = terms[k]
        name = "merge_scaled term %d" % k
        indptr = _as_index(indptr, name + " indptr")
        indices = _as_index(indices, name + " indices")
        _check_indptr(indptr, nr, indices.shape[0], name)
        _check_range(indices, 0, nc, name + " column indices")
        total += indices.shape[0]
        if values:
            if data is not None:
                data = _as_values(data, indices.shape[0], name + " data")
            if scale is not None:
                scale = _as_values(scale, nr, name + " row_scale")
            # the dtype of the reference's (ones or data) * scale
            dtypes.append(np.result_type(np.float64 if data is None else data.dtype,
                                         *(() if scale is None else (scale.dtype,))))
        prepared.append([indptr, indices, data, scale])
    out_dtype = None
    if values:
        out_dtype = np.result_type(*dtypes) if dtypes else np.dtype(np.float64)
        kind = _kind(out_dtype)
        if kind < 0:
            return _reference.merge_scaled(nr, nc, [tuple(t) for t in prepared],
                                           pattern_only)
        for k in range(n_terms):
            indptr, indices, data, scale = prepared[k]
            if scale is not None and dtypes[k] != out_dtype:
                # a product rounded in a narrower dtype than the result's
                entry_rows = np.repeat(np.arange(nr, dtype=INDEX_DTYPE), np.diff(indptr))
                data = (np.ones(indices.shape[0]) if data is None else data) * scale[entry_rows]
                scale = None
            if data is not None:
                data = np.ascontiguousarray(data, dtype=out_dtype)
            if scale is not None:
                scale = np.ascontiguousarray(scale, dtype=out_dtype)
            prepared[k][2] = data
            prepared[k][3] = scale

    bound = min(<object>total, <object>nr * <object>nc)
    out_indptr = np.empty(nr + 1, dtype=INDEX_DTYPE)
    out_indices = np.empty(bound, dtype=INDEX_DTYPE)
    marker = np.full(nc, -1, dtype=INDEX_DTYPE)
    out_data = acc = None
    if values:
        out_data = np.empty(bound, dtype=out_dtype)
        acc = np.empty(nc, dtype=out_dtype)

    cdef Py_ssize_t slots = n_terms if n_terms > 0 else 1
    cdef const int64_t** ips = <const int64_t**>malloc(slots * sizeof(int64_t*))
    cdef const int64_t** ixs = <const int64_t**>malloc(slots * sizeof(int64_t*))
    cdef const void** ds = <const void**>malloc(slots * sizeof(void*))
    cdef const void** ss = <const void**>malloc(slots * sizeof(void*))
    cdef int64_t* mk = <int64_t*>_ptr(marker)
    cdef void* ac = _ptr(acc)
    cdef int64_t* oip = <int64_t*>_ptr(out_indptr)
    cdef int64_t* oix = <int64_t*>_ptr(out_indices)
    cdef void* od = _ptr(out_data)
    try:
        if ips == NULL or ixs == NULL or ds == NULL or ss == NULL:
            raise MemoryError()
        for k in range(n_terms):
            ips[k] = <const int64_t*>_ptr(prepared[k][0])
            ixs[k] = <const int64_t*>_ptr(prepared[k][1])
            ds[k] = _ptr(prepared[k][2])
            ss[k] = _ptr(prepared[k][3])
        with nogil:
            if kind == F32:
                nnz = _merge_loop[float](nr, n_terms, ips, ixs, <const float**>ds,
                                         <const float**>ss, values, mk, <float*>ac,
                                         oip, oix, <float*>od)
            elif kind == F64:
                nnz = _merge_loop[double](nr, n_terms, ips, ixs, <const double**>ds,
                                          <const double**>ss, values, mk, <double*>ac,
                                          oip, oix, <double*>od)
            elif kind == C64:
                nnz = _merge_loop[complex64_t](nr, n_terms, ips, ixs,
                                               <const complex64_t**>ds,
                                               <const complex64_t**>ss, values, mk,
                                               <complex64_t*>ac, oip, oix,
                                               <complex64_t*>od)
            else:
                nnz = _merge_loop[complex128_t](nr, n_terms, ips, ixs,
                                                <const complex128_t**>ds,
                                                <const complex128_t**>ss, values, mk,
                                                <complex128_t*>ac, oip, oix,
                                                <complex128_t*>od)
    finally:
        free(ips)
        free(ixs)
        free(ds)
        free(ss)
    return out_indptr, _trim(out_indices, nnz), _trim(out_data, nnz)


def gather_rows(indptr, indices, data, rows):
    """Rows ``rows`` of a CSR matrix, stacked; a row index of ``-1`` gives an empty row.

    Contract of :func:`sparsegrad._fast._reference.gather_rows`: ``rows`` in
    ``[-1, n_rows)``, repeats allowed; ``data=None`` gives ``None`` data.
    Value dtypes other than float32/64 and complex64/128 are handed to the
    reference kernel.
    """
    cdef int64_t n_src, n_out, nnz
    cdef int kind = F64
    indptr = _as_index(indptr, "indptr")
    indices = _as_index(indices, "indices")
    rows = _as_index(rows, "rows")
    if indptr.shape[0] < 1:
        raise ValueError("indptr must have at least one entry")
    n_src = indptr.shape[0] - 1
    _check_indptr(indptr, n_src, indices.shape[0], "gather_rows source")
    _check_range(rows, -1, n_src, "rows")
    if data is not None:
        data = _as_values(data, indices.shape[0], "data")
        kind = _kind(data.dtype)
        if kind < 0:
            return _reference.gather_rows(indptr, indices, data, rows)
        data = np.ascontiguousarray(data)
    n_out = rows.shape[0]
    out_indptr = np.empty(n_out + 1, dtype=INDEX_DTYPE)
    cdef const int64_t* r = <const int64_t*>_ptr(rows)
    cdef const int64_t* ip = <const int64_t*>_ptr(indptr)
    cdef const int64_t* ix = <const int64_t*>_ptr(indices)
    cdef void* d = _ptr(data)
    cdef int64_t* oip = <int64_t*>_ptr(out_indptr)
    with nogil:
        _gather_indptr(n_out, r, ip, oip)
    nnz = oip[n_out]
    out_indices = np.empty(nnz, dtype=INDEX_DTYPE)
    out_data = None if data is None else np.empty(nnz, dtype=data.dtype)
    cdef int64_t* oix = <int64_t*>_ptr(out_indices)
    cdef void* od = _ptr(out_data)
    with nogil:
        if kind == F32:
            _gather_copy[float](n_out, r, ip, ix, <const float*>d, oip, oix, <float*>od)
        elif kind == F64:
            _gather_copy[double](n_out, r, ip, ix, <const double*>d, oip, oix, <double*>od)
        elif kind == C64:
            _gather_copy[complex64_t](n_out, r, ip, ix, <const complex64_t*>d, oip, oix,
                                      <complex64_t*>od)
        else:
            _gather_copy[complex128_t](n_out, r, ip, ix, <const complex128_t*>d, oip, oix,
                                       <complex128_t*>od)
    return out_indptr, out_indices, out_data


def matmul(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, n_cols,
           pattern_only=False):
    """Sparse product ``A @ B`` keeping the structural pattern.

    Contract of :func:`sparsegrad._fast._reference.matmul`: ``(i, j)`` is in
    the result whenever some ``A[i, k]`` and ``B[k, j]`` are stored, whatever
    their values; canonical CSR of shape ``(len(a_indptr) - 1, n_cols)``.
    ``a_indices`` must lie in ``[0, len(b_indptr) - 1)`` and ``b_indices`` in
    ``[0, n_cols)``.  Gustavson's method with a dense marker and accumulator;
    value dtypes other than float32/64 and complex64/128 are handed to the
    reference kernel.
    """
    cdef int64_t nc = _dim(n_cols, "n_cols")
    cdef int64_t n_rows, n_b, bound, nnz
    cdef int kind = F64
    cdef bint values = not pattern_only
    a_indptr = _as_index(a_indptr, "a_indptr")
    a_indices = _as_index(a_indices, "a_indices")
    b_indptr = _as_index(b_indptr, "b_indptr")
    b_indices = _as_index(b_indices, "b_indices")
    if a_indptr.shape[0] < 1 or b_indptr.shape[0] < 1:
        raise ValueError("indptr must have at least one entry")
    n_rows = a_indptr.shape[0] - 1
    n_b = b_indptr.shape[0] - 1
    _check_indptr(a_indptr, n_rows, a_indices.shape[0], "matmul A")
    _check_indptr(b_indptr, n_b, b_indices.shape[0], "matmul B")
    _check_range(a_indices, 0, n_b, "matmul A column indices")
    _check_range(b_indices, 0, nc, "matmul B column indices")
    out_dtype = None
    if values:
        if a_data is not None:
            a_data = _as_values(a_data, a_indices.shape[0], "a_data")
        if b_data is not None:
            b_data = _as_values(b_data, b_indices.shape[0], "b_data")
        out_dtype = np.result_type(np.float64 if a_data is None else a_data.dtype,
                                   np.float64 if b_data is None else b_data.dtype)
        kind = _kind(out_dtype)
        if kind < 0:
            return _reference.matmul(a_indptr, a_indices, a_data, b_indptr, b_indices,
                                     b_data, nc, pattern_only)
        if a_data is not None:
            a_data = np.ascontiguousarray(a_data, dtype=out_dtype)
        if b_data is not None:
            b_data = np.ascontiguousarray(b_data, dtype=out_dtype)
    else:
        a_data = b_data = None
    cdef const int64_t* aip = <const int64_t*>_ptr(a_indptr)
    cdef const int64_t* aix = <const int64_t*>_ptr(a_indices)
    cdef const int64_t* bip = <const int64_t*>_ptr(b_indptr)
    cdef const int64_t* bix = <const int64_t*>_ptr(b_indices)
    with nogil:
        bound = _matmul_bound(n_rows, nc, aip, aix, bip)
    out_indptr = np.empty(n_rows + 1, dtype=INDEX_DTYPE)
    out_indices = np.empty(bound, dtype=INDEX_DTYPE)
    marker = np.full(nc, -1, dtype=INDEX_DTYPE)
    out_data = acc = None
    if values:
        out_data = np.empty(bound, dtype=out_dtype)
        acc = np.empty(nc, dtype=out_dtype)
    cdef void* ad = _ptr(a_data)
    cdef void* bd = _ptr(b_data)
    cdef int64_t* mk = <int64_t*>_ptr(marker)
    cdef void* ac = _ptr(acc)
    cdef int64_t* oip = <int64_t*>_ptr(out_indptr)
    cdef int64_t* oix = <int64_t*>_ptr(out_indices)
    cdef void* od = _ptr(out_data)
    with nogil:
        if kind == F32:
            nnz = _matmul_loop[float](n_rows, aip, aix, <const float*>ad, bip, bix,
                                      <const float*>bd, values, mk, <float*>ac, oip, oix,
                                      <float*>od)
        elif kind == F64:
            nnz = _matmul_loop[double](n_rows, aip, aix, <const double*>ad, bip, bix,
                                       <const double*>bd, values, mk, <double*>ac, oip,
                                       oix, <double*>od)
        elif kind == C64:
            nnz = _matmul_loop[complex64_t](n_rows, aip, aix, <const complex64_t*>ad, bip,
                                            bix, <const complex64_t*>bd, values, mk,
                                            <complex64_t*>ac, oip, oix, <complex64_t*>od)
        else:
            nnz = _matmul_loop[complex128_t](n_rows, aip, aix, <const complex128_t*>ad,
                                             bip, bix, <const complex128_t*>bd, values, mk,
                                             <complex128_t*>ac, oip, oix,
                                             <complex128_t*>od)
    return out_indptr, _trim(out_indices, nnz), _trim(out_data, nnz)


def scale_rows(indptr, data, scale):
    """Data of ``diag(scale) @ M`` for CSR ``M`` (``data=None``: all ones).

    Contract of :func:`sparsegrad._fast._reference.scale_rows`: with
    ``data=None`` the result has the dtype of ``scale``, otherwise numpy's
    promotion of both.  Other dtypes than float32/64 and complex64/128 are
    handed to the reference kernel.
    """
    cdef int64_t n_rows, nnz
    cdef int kind
    indptr = _as_index(indptr, "indptr")
    if indptr.shape[0] < 1:
        raise ValueError("indptr must have at least one entry")
    n_rows = indptr.shape[0] - 1
    nnz = indptr[n_rows]
    _check_indptr(indptr, n_rows, nnz, "scale_rows")
    scale = _as_values(scale, n_rows, "scale")
    if data is None:
        out_dtype = scale.dtype
    else:
        data = _as_values(data, nnz, "data")
        out_dtype = np.result_type(data.dtype, scale.dtype)
    kind = _kind(out_dtype)
    if kind < 0:
        return _reference.scale_rows(indptr, data, scale)
    scale = np.ascontiguousarray(scale, dtype=out_dtype)
    if data is not None:
        data = np.ascontiguousarray(data, dtype=out_dtype)
    out = np.empty(nnz, dtype=out_dtype)
    cdef const int64_t* ip = <const int64_t*>_ptr(indptr)
    cdef void* d = _ptr(data)
    cdef void* s = _ptr(scale)
    cdef void* o = _ptr(out)
    with nogil:
        if kind == F32:
            _scale_loop[float](n_rows, ip, <const float*>d, <const float*>s, <float*>o)
        elif kind == F64:
            _scale_loop[double](n_rows, ip, <const double*>d, <const double*>s, <double*>o)
        elif kind == C64:
            _scale_loop[complex64_t](n_rows, ip, <const complex64_t*>d,
                                     <const complex64_t*>s, <complex64_t*>o)
        else:
            _scale_loop[complex128_t](n_rows, ip, <const complex128_t*>d,
                                      <const complex128_t*>s, <complex128_t*>o)
    return out
