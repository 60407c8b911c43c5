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
  Where a separate validation pass would cost as much as the work itself
  (``merge_scaled``, the row numbers of ``gather_rows``), the wrapper checks
  only lengths and end points, and the loop checks each ``indptr`` step and
  index before it uses it; when the loop reports bad input, the wrapper runs
  the full checks to raise the usual error.
* Output arrays are allocated at an upper bound of their size, filled, and
  trimmed in place.

``merge_scaled`` takes two arguments beyond the basic conventions: a term may
be a 5-tuple ``(indptr, indices, data, row_scale, first_row)``, a block of
``len(indptr) - 1`` rows added from row ``first_row`` on (so that stacked
blocks are merged by one call writing the final matrix), and
``index_dtype=np.int32`` asks for int32 ``indptr`` and ``indices`` (ValueError
when the entry bound or ``n_cols`` exceeds ``2**31 - 1``).  The rows are split
into segments covered by the same terms; each segment is merged with its own
terms only, by one of three paths, chosen block by block:

* direct: when every term holds one entry in each row of the block and the
  rows follow the template taken from an earlier row (the order of the terms'
  columns, which terms share a column), each term's entries are written
  straight to their places in the output, term after term;
* keys: when every term holds at most one entry per row, one packed
  ``(column, term)`` key per term and row, written in the previous row's key
  order when it still sorts them;
* general: row by row, a 64-column window for bands, sorted packed keys for
  short rows, a dense marker for rows of more than 256 entries.

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
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcmp, memcpy, memmove

import operator

import numpy as np

from . import _reference
from ._types cimport complex64_t, complex128_t, data_t, oindex_t

cnp.import_array()

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define SG_PREFETCH(p) __builtin_prefetch((const void*)(p))
    #else
    #define SG_PREFETCH(p) ((void)0)
    #endif
    """
    void SG_PREFETCH(const void* p) noexcept nogil

cdef extern from *:
    """
    /* index of the lowest set bit of a non-zero 64-bit word */
    #if defined(__GNUC__) || defined(__clang__)
    #define SG_CTZ64(x) ((int)__builtin_ctzll((unsigned long long)(x)))
    #elif defined(_MSC_VER) && defined(_M_X64)
    #include <intrin.h>
    static __inline int SG_CTZ64(unsigned __int64 x) {
        unsigned long i; _BitScanForward64(&i, x); return (int)i;
    }
    #else
    static int SG_CTZ64(unsigned long long x) {
        int i = 0; while (!(x & 1)) { x >>= 1; i++; } return i;
    }
    #endif
    """
    int SG_CTZ64(uint64_t x) noexcept nogil

# how many rows ahead gather_rows prefetches (random row orders miss the cache)
cdef enum:
    GATHER_AHEAD = 16

INDEX_DTYPE = np.int64

__all__ = ["merge_scaled", "gather_rows", "matmul", "scale_rows", "coo_to_csr",
           "selection_csr", "multiply_add", "sum_of_products", "take_product", "take"]

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


cdef tuple _KIND_DTYPES = (np.dtype(np.float32), np.dtype(np.float64),
                           np.dtype(np.complex64), np.dtype(np.complex128))


cdef inline int _array_kind(object x):
    """Code of the compiled loop for the dtype of the ndarray ``x``, or -1."""
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef int t = cnp.PyArray_TYPE(a)
    if not cnp.PyArray_ISNOTSWAPPED(a):
        return -1
    if t == cnp.NPY_DOUBLE:
        return F64
    if t == cnp.NPY_FLOAT:
        return F32
    if t == cnp.NPY_CDOUBLE:
        return C128
    if t == cnp.NPY_CFLOAT:
        return C64
    return -1


cdef inline bint _is_vector_of(object x, int typenum):
    """``x`` a 1-d C-contiguous native ndarray of numpy type number ``typenum``."""
    if type(x) is not np.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>x
    return (cnp.PyArray_NDIM(a) == 1 and cnp.PyArray_TYPE(a) == typenum
            and cnp.PyArray_ISCARRAY_RO(a) and cnp.PyArray_ISNOTSWAPPED(a))


cdef inline bint _is_index_array(object x):
    """``x`` is already what :func:`_as_index` makes: a 1-d C-contiguous int64 ndarray."""
    return _is_vector_of(x, cnp.NPY_INT64)


cdef inline bint _is_values(object x, Py_ssize_t n):
    """``x`` is already what :func:`_as_values` makes: a 1-d ndarray of length ``n``."""
    if type(x) is not np.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>x
    return cnp.PyArray_NDIM(a) == 1 and cnp.PyArray_DIM(a, 0) == n


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
    if _is_index_array(x):
        return x
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
    """First ``p`` with ``a[p] < a[p - 1]``, or -1.

    Blocks of branch-free tests (which the compiler vectorises); the block
    that holds a decrease is searched again for its position.
    """
    cdef int64_t p, block = 1, end
    cdef int bad
    while block < n:
        end = block + 4096 if n - block > 4096 else n
        bad = 0
        for p in range(block, end):
            bad |= a[p] < a[p - 1]
        if bad:
            for p in range(block, end):
                if a[p] < a[p - 1]:
                    return p
        block = end
    return -1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _first_outside(const int64_t* a, int64_t n, int64_t lo, int64_t hi) noexcept nogil:
    """First ``p`` with ``a[p]`` outside ``[lo, hi)``, or -1 (``lo <= hi``); blocks as above."""
    cdef int64_t p, block = 0, end
    cdef uint64_t width = <uint64_t>hi - <uint64_t>lo, ulo = <uint64_t>lo
    cdef int bad
    while block < n:
        end = block + 4096 if n - block > 4096 else n
        bad = 0
        for p in range(block, end):
            bad |= (<uint64_t>a[p] - ulo) >= width
        if bad:
            for p in range(block, end):
                if (<uint64_t>a[p] - ulo) >= width:
                    return p
        block = end
    return -1


cdef _check_indptr_ends(indptr, int64_t n_rows, int64_t nnz, str name):
    """``indptr`` has ``n_rows + 1`` entries, starts at 0 and ends at ``nnz`` (O(1))."""
    cdef const int64_t* ip
    if indptr.shape[0] != n_rows + 1:
        raise ValueError("%s indptr has length %d, expected %d"
                         % (name, indptr.shape[0], n_rows + 1))
    ip = <const int64_t*>_ptr(indptr)
    if ip[0] != 0 or ip[n_rows] != nnz:
        raise ValueError("%s indptr must run from 0 to nnz=%d, got %d to %d"
                         % (name, nnz, ip[0], ip[n_rows]))


cdef _check_indptr(indptr, int64_t n_rows, int64_t nnz, str name):
    """``indptr`` has ``n_rows + 1`` entries, starts at 0, ends at ``nnz``, never decreases."""
    cdef const int64_t* ip
    cdef int64_t bad
    _check_indptr_ends(indptr, n_rows, nnz, name)
    ip = <const int64_t*>_ptr(indptr)
    with nogil:
        bad = _first_decrease(ip, n_rows + 1)
    if bad >= 0:
        raise ValueError("%s indptr decreases at position %d" % (name, bad))


cdef _check_range(a, int64_t lo, int64_t hi, str name):
    """Every entry of the int64 array ``a`` lies in ``[lo, hi)``."""
    cdef int64_t bad
    cdef const int64_t* p = <const int64_t*>_ptr(a)
    cdef int64_t n = a.shape[0]
    if hi < lo:
        hi = lo
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


cdef inline void _sift_down(oindex_t* a, int64_t root, int64_t n) noexcept nogil:
    cdef int64_t child
    cdef oindex_t top = a[root]
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


cdef void _sort_row(oindex_t* a, int64_t n) noexcept nogil:
    """Sort the column numbers of one output row (distinct values).

    Rows are short and often nearly sorted (a merge of sorted runs), so
    insertion sort; heapsort bounds the cost of the rare long row.
    """
    cdef int64_t p, q, end
    cdef oindex_t x
    cdef bint in_order = True
    if n <= 32:
        for p in range(1, n):
            x = a[p]
            q = p - 1
            while q >= 0 and a[q] > x:
                a[q + 1] = a[q]
                q -= 1
            a[q + 1] = x
        return
    for p in range(1, n):
        in_order &= a[p - 1] <= a[p]
    if in_order:
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
                               int64_t* marker, data_t* acc, oindex_t* out_indices,
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
                             oindex_t* out_indices, data_t* out_data) noexcept nogil:
    """Sort the columns of the row at ``[start, nnz)`` and write their sums."""
    cdef int64_t p
    _sort_row(out_indices + start, nnz - start)
    if values:
        for p in range(start, nnz):
            out_data[p] = acc[out_indices[p]]


# ---------------------------------------------------------------------------
# Loops (no GIL; inputs validated by the wrappers)
# ---------------------------------------------------------------------------

# Short rows of merge_scaled are merged by sorting packed keys
# ``column << KEY_SHIFT | slot``, where ``slot`` is the entry's place in the
# row's gather buffer (terms in order, entries in order).  All keys of a row
# are distinct and their order is (column, term, entry): the order in which
# the reference adds duplicates.  Longer rows use the dense marker.
cdef enum:
    KEY_SHIFT = 8
    SHORT_ROW = 256          # 1 << KEY_SHIFT
    KEY_MASK = 255
    INSERTION_SORT_MAX = 16
    WINDOW_MARGIN = 8        # window rows start this far before their first entry

# largest n_cols whose packed keys fit in 64 bits
cdef int64_t MAX_KEY_COLS = (<int64_t>1) << (63 - KEY_SHIFT)


cdef struct Term:
    const int64_t* indptr
    const int64_t* indices
    const void* data          # NULL: all ones
    const void* scale         # NULL: no row scaling
    int64_t scale_step        # scale of row i: scale[i * scale_step] (0: broadcast)
    const void* scale2        # NULL, or a second row scale (same step as scale; real kinds)
    double factor             # real scalar times the row scale (1: none; real kinds only)
    int64_t nnz
    int mode                  # ONES, DATA, SCALE, DATA_SCALE or ONES_SCALE
    bint holes                # a selection: one entry per row, column -1 = none


cdef struct Dense:
    # the dense marker and accumulator of Gustavson's method, allocated on
    # the first long row (most merges never need them)
    int64_t* marker
    void* acc


cdef inline void _free_dense(Dense* dense) noexcept nogil:
    free(dense.marker)
    free(dense.acc)
    dense.marker = NULL
    dense.acc = NULL


cdef int _alloc_dense(Dense* dense, int64_t n_cols, size_t item, bint values) noexcept nogil:
    """Allocate the marker (all -1) and, for values, the accumulator; 0 or -1."""
    cdef int64_t j
    cdef size_t n = <size_t>(n_cols if n_cols > 0 else 1)
    dense.marker = <int64_t*>malloc(n * sizeof(int64_t))
    if dense.marker == NULL:
        return -1
    for j in range(n_cols):
        dense.marker[j] = -1
    if values:
        dense.acc = malloc(n * item)
        if dense.acc == NULL:
            return -1
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _sort_keys(uint64_t* a, int64_t m, uint64_t* tmp, int64_t* bounds) noexcept nogil:
    """Sort ``m`` distinct keys (``m <= SHORT_ROW``).

    Insertion sort for a few keys; otherwise a natural merge sort: the buffer
    is a concatenation of sorted runs (one per term), merged pairwise.
    """
    cdef int64_t j, q, r, n_runs, n_out, lo, mid, hi, x, y
    cdef uint64_t key
    cdef uint64_t* src = a
    cdef uint64_t* dst = tmp
    cdef uint64_t* swap
    if m <= INSERTION_SORT_MAX:
        for j in range(1, m):
            key = a[j]
            q = j - 1
            while q >= 0 and a[q] > key:
                a[q + 1] = a[q]
                q -= 1
            a[q + 1] = key
        return
    n_runs = 0
    bounds[0] = 0
    for j in range(1, m):
        if a[j] < a[j - 1]:
            n_runs += 1
            bounds[n_runs] = j
    n_runs += 1
    bounds[n_runs] = m
    while n_runs > 1:
        r = 0
        n_out = 0
        while r + 1 < n_runs:
            lo = bounds[r]
            mid = bounds[r + 1]
            hi = bounds[r + 2]
            x = lo
            y = mid
            q = lo
            while x < mid and y < hi:
                if src[y] < src[x]:
                    dst[q] = src[y]
                    y += 1
                else:
                    dst[q] = src[x]
                    x += 1
                q += 1
            while x < mid:
                dst[q] = src[x]
                x += 1
                q += 1
            while y < hi:
                dst[q] = src[y]
                y += 1
                q += 1
            bounds[n_out] = lo
            n_out += 1
            r += 2
        if r < n_runs:
            lo = bounds[r]
            memcpy(dst + lo, src + lo, <size_t>(m - lo) * sizeof(uint64_t))
            bounds[n_out] = lo
            n_out += 1
        bounds[n_out] = m
        n_runs = n_out
        swap = src
        src = dst
        dst = swap
    if src != a:
        memcpy(a, src, <size_t>m * sizeof(uint64_t))


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int64_t _emit_row(const uint64_t* keys, const uint8_t* perm, int64_t m,
                              bint values, const data_t* vals, oindex_t* out_indices,
                              data_t* out_data, int64_t nnz) noexcept nogil:
    """Write a short row whose keys, in order, are ``keys[perm[0]], keys[perm[1]], ...``.

    Duplicate columns are summed in key order, i.e. term by term.  Returns the
    new entry count, or -1 when ``perm`` does not sort the keys (then the row
    must be sorted and written again).
    """
    cdef int64_t j, col, last
    cdef uint64_t key, prev
    cdef uint8_t slot = perm[0]
    cdef data_t total
    prev = keys[slot]
    last = <int64_t>(prev >> KEY_SHIFT)
    if values:
        total = vals[slot]
    for j in range(1, m):
        slot = perm[j]
        key = keys[slot]
        if key <= prev:
            return -1
        prev = key
        col = <int64_t>(key >> KEY_SHIFT)
        if col != last:
            out_indices[nnz] = last
            if values:
                out_data[nnz] = total
                total = vals[slot]
            nnz += 1
            last = col
        elif values:
            total = total + vals[slot]
    out_indices[nnz] = last
    if values:
        out_data[nnz] = total
    return nnz + 1


cdef struct Sorter:
    # scratch of the short-row merge: the order of the last sorted row (its
    # length prev_m and the slots in key order) and room to sort keys
    int64_t prev_m
    uint8_t perm[SHORT_ROW]
    uint64_t sorted_keys[SHORT_ROW]
    uint64_t tmp[SHORT_ROW]
    int64_t bounds[SHORT_ROW + 1]


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int64_t _write_short_row(Sorter* so, const uint64_t* keys, int64_t m,
                                     bint values, const data_t* vals,
                                     oindex_t* out_indices, data_t* out_data,
                                     int64_t nnz) noexcept nogil:
    """Write a row of ``1 <= m <= SHORT_ROW`` gathered keys (and values) in key
    order, duplicates summed; return the new entry count.

    The previous row's order is tried first (stencils, shifted selections give
    rows alike); when it does not sort the keys, they are sorted and their
    order remembered.
    """
    cdef int64_t got = -1, j
    if m == 1:
        out_indices[nnz] = <int64_t>(keys[0] >> KEY_SHIFT)
        if values:
            out_data[nnz] = vals[0]
        return nnz + 1
    if m == so.prev_m:
        got = _emit_row(keys, so.perm, m, values, vals, out_indices, out_data, nnz)
    if got < 0:
        memcpy(so.sorted_keys, keys, <size_t>m * sizeof(uint64_t))
        _sort_keys(so.sorted_keys, m, so.tmp, so.bounds)
        for j in range(m):
            so.perm[j] = <uint8_t>(so.sorted_keys[j] & KEY_MASK)
        so.prev_m = m
        got = _emit_row(keys, so.perm, m, values, vals, out_indices, out_data, nnz)
    return got


# how a term's values are formed (Term.mode)
cdef enum:
    ONES = 0            # data None, no scale
    DATA = 1            # data, no scale
    SCALE = 2           # data None, scale: the value is the row's scale
    DATA_SCALE = 3      # data * scale
    ONES_SCALE = 4      # data None, complex scale: 1 * scale by the complex formula


# The same formulas as compile-time tags: a loop written once over a fused
# ``formula_t`` is compiled once per formula, with the formula's test out of
# the loop (``values`` off is the pattern tag).  ``_with_formula`` maps a
# term's runtime mode to its tag.
cdef struct PatternTag:
    char unused
cdef struct OnesTag:
    char unused
cdef struct DataTag:
    char unused
cdef struct ScaleTag:
    char unused
cdef struct DataScaleTag:
    char unused
cdef struct OnesScaleTag:
    char unused

ctypedef fused formula_t:
    PatternTag
    OnesTag
    DataTag
    ScaleTag
    DataScaleTag
    OnesScaleTag


cdef inline data_t _formula_value(formula_t* tag, const data_t* dp, const data_t* sp,
                                  int64_t p, int64_t r, int64_t step,
                                  const data_t* s2p, double fac) noexcept nogil:
    """Value of entry ``p`` (local row ``r``) of a term by the tag's formula
    (``s2p``, ``fac``: the term's second row scale and factor, see
    :func:`_row_scale`)."""
    cdef data_t one = 1
    if formula_t is DataTag:
        return dp[p]
    elif formula_t is ScaleTag:
        return _row_scale(sp, s2p, r * step, fac)
    elif formula_t is DataScaleTag:
        return _mul(dp[p], _row_scale(sp, s2p, r * step, fac))
    elif formula_t is OnesScaleTag:
        return _mul(one, sp[r * step])
    else:
        return one


cdef inline data_t _row_scale(const data_t* sp, const data_t* s2p, int64_t j,
                             double fac) noexcept nogil:
    """Entry ``j`` of a term's row scale, times its second row scale (``s2p`` not
    NULL) and then its real factor, rounded as numpy's ``(scale * scale2) * fac``
    (the wrapper gives a second scale or a factor other than 1 to real kinds
    only, where ``x * 1 == x`` exactly)."""
    cdef data_t v = sp[j]
    if data_t is float or data_t is double:
        if s2p != NULL:
            v = v * s2p[j]
        return v * <data_t>fac
    return v


cdef inline data_t _term_scale(const Term* t, int64_t i, data_t one) noexcept nogil:
    """The row scale of row ``i`` of a term of a real kind (``one``: 1 in the value
    type), second scale and factor applied (see :func:`_row_scale`)."""
    return _row_scale(<const data_t*>t.scale, <const data_t*>t.scale2, i * t.scale_step,
                      t.factor)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline data_t _term_value(const Term* t, int64_t p, int64_t i, data_t one) noexcept nogil:
    """Value of entry ``p`` (row ``i``) of a term: ``data * scale`` as the reference
    forms it (``one`` is 1 in the value type)."""
    cdef int mode = t.mode
    if mode == DATA:
        return (<const data_t*>t.data)[p]
    if mode == SCALE:
        return _term_scale(t, i, one)
    if mode == DATA_SCALE:
        return _mul((<const data_t*>t.data)[p], _term_scale(t, i, one))
    if mode == ONES_SCALE:
        return _mul(one, (<const data_t*>t.scale)[i * t.scale_step])
    return one


cdef inline void _window_add(uint64_t* window, data_t* wacc, uint64_t off,
                             data_t v) noexcept nogil:
    """Add ``v`` at place ``off`` of the window: the first value is stored as it is."""
    cdef uint64_t bit = (<uint64_t>1) << off
    if window[0] & bit:
        wacc[off] = wacc[off] + v
    else:
        window[0] |= bit
        wacc[off] = v


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int64_t _window_row(int64_t i, Py_ssize_t n_terms, const Term* terms,
                                const int64_t* los, const int64_t* his, bint values,
                                int64_t n_cols, int64_t* lead, data_t* wacc,
                                oindex_t* out_indices, data_t* out_data,
                                int64_t nnz) noexcept nogil:
    """Write a short row whose columns all lie in a window of 64 columns.

    The window starts WINDOW_MARGIN columns before where the row's smallest
    column is expected: ``lead[0]`` columns after its first entry, as in the
    previous row (``lead[0]`` is updated); a one-word bitmap marks the columns
    present and ``wacc`` sums their values in the order they come (term by
    term).  Returns the new entry count, -1 if some column falls outside the
    window (nothing is written then), -2 if a column lies outside
    ``[0, n_cols)``.
    """
    cdef Py_ssize_t k
    cdef int64_t p, lo, hi, col
    cdef const Term* t
    cdef const int64_t* ix
    cdef const data_t* d
    cdef data_t one = 1, sc
    cdef uint64_t first, base, off, window = 0
    cdef int mode
    k = 0
    while los[k] == his[k]:
        k += 1
    first = <uint64_t>terms[k].indices[los[k]]
    base = first + <uint64_t>lead[0] - WINDOW_MARGIN
    for k in range(n_terms):
        lo = los[k]
        hi = his[k]
        if lo == hi:
            continue
        t = &terms[k]
        ix = t.indices
        if not values:
            for p in range(lo, hi):
                off = <uint64_t>ix[p] - base
                if off >= 64:
                    return -1
                window |= (<uint64_t>1) << off
            continue
        mode = t.mode
        d = <const data_t*>t.data
        sc = one
        if mode == SCALE or mode == DATA_SCALE:
            sc = _term_scale(t, i, one)
        elif mode == ONES_SCALE:
            sc = _mul(one, (<const data_t*>t.scale)[i * t.scale_step])
        # (one loop per value formula: the formula is fixed within a term)
        if mode == DATA:
            for p in range(lo, hi):
                off = <uint64_t>ix[p] - base
                if off >= 64:
                    return -1
                _window_add(&window, wacc, off, d[p])
        elif mode == DATA_SCALE:
            for p in range(lo, hi):
                off = <uint64_t>ix[p] - base
                if off >= 64:
                    return -1
                _window_add(&window, wacc, off, _mul(d[p], sc))
        else:
            for p in range(lo, hi):
                off = <uint64_t>ix[p] - base
                if off >= 64:
                    return -1
                _window_add(&window, wacc, off, sc)
    lead[0] = <int64_t>(base + <uint64_t>SG_CTZ64(window) - first)
    while window:
        off = <uint64_t>SG_CTZ64(window)
        window &= window - 1
        col = <int64_t>(base + off)
        if <uint64_t>col >= <uint64_t>n_cols:
            return -2
        out_indices[nnz] = col
        if values:
            out_data[nnz] = wacc[off]
        nnz += 1
    return nnz


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int64_t _window_run(const int64_t* cols, const data_t* vals, int64_t m,
                                bint values, int64_t n_cols, int64_t* lead,
                                data_t* wacc, int64_t* out_indices, data_t* out_data,
                                int64_t nnz) noexcept nogil:
    """:func:`_window_row` for a row held as ``m`` columns and values in a row:
    the window starts WINDOW_MARGIN columns before ``cols[0] + lead[0]``.
    Returns the new entry count, -1 if a column falls outside the window
    (nothing written), -2 if one lies outside ``[0, n_cols)``.  The output may
    overwrite ``cols`` and ``vals``: it is written after they are read."""
    cdef int64_t p, col
    cdef uint64_t first = <uint64_t>cols[0]
    cdef uint64_t base = first + <uint64_t>lead[0] - WINDOW_MARGIN
    cdef uint64_t off, window = 0
    if values:
        for p in range(m):
            off = <uint64_t>cols[p] - base
            if off >= 64:
                return -1
            _window_add(&window, wacc, off, vals[p])
    else:
        for p in range(m):
            off = <uint64_t>cols[p] - base
            if off >= 64:
                return -1
            window |= (<uint64_t>1) << off
    lead[0] = <int64_t>(base + <uint64_t>SG_CTZ64(window) - first)
    while window:
        off = <uint64_t>SG_CTZ64(window)
        window &= window - 1
        col = <int64_t>(base + off)
        if <uint64_t>col >= <uint64_t>n_cols:
            return -2
        out_indices[nnz] = col
        if values:
            out_data[nnz] = wacc[off]
        nnz += 1
    return nnz


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline uint64_t _gather_run(const Term* t, int64_t lo, int64_t n, int64_t i, int64_t m,
                                 bint values, uint64_t* keys, data_t* vals,
                                 uint64_t bits) noexcept nogil:
    """Append the ``n`` entries of term ``t`` from ``lo`` (row ``i``) at slot ``m``
    of the key and value buffers; return ``bits`` or-ed with their columns."""
    cdef const int64_t* ix = t.indices + lo
    cdef const data_t* d
    cdef data_t one = 1, sc
    cdef int64_t p, c
    cdef uint64_t key = <uint64_t>m
    if n == 1:
        c = ix[0]
        bits |= <uint64_t>c
        keys[m] = (<uint64_t>c << KEY_SHIFT) | key
        if values:
            vals[m] = _term_value(t, lo, i, one)
        return bits
    for p in range(n):
        c = ix[p]
        bits |= <uint64_t>c
        keys[m + p] = (<uint64_t>c << KEY_SHIFT) | key
        key += 1
    if values:
        if t.mode == DATA:
            d = <const data_t*>t.data + lo
            for p in range(n):
                vals[m + p] = d[p]
        elif t.mode == DATA_SCALE:
            d = <const data_t*>t.data + lo
            sc = _term_scale(t, i, one)
            for p in range(n):
                vals[m + p] = _mul(d[p], sc)
        else:
            sc = _term_value(t, lo, i, one)
            for p in range(n):
                vals[m + p] = sc
    return bits


# Rows where every term holds at most one entry (selections, shifted
# selections, identities: most merges of stencil Jacobians) are merged a block
# of rows at a time.  A gather pass, term by term (one memory stream at a
# time, the value formula fixed within a term), writes one packed key
# ``column << KEY_SHIFT | term`` (``SEL_EMPTY`` when the term's row is empty)
# and one value per term and row; then each row is written in the order of
# the previous row's keys, when that order still sorts them.
cdef enum:
    SEL_BLOCK_ENTRIES = 1024     # keys per block: rows per block = this // terms
    SEL_MAX_TERMS = 128          # more terms than this: the general rows
    SEL_MAX_SKIP = 64            # blocks skipped after a failed try, at most
    SEL_FIX_ROWS = 4             # rows by keys after a row that breaks the template
    DIRECT_BLOCK_ENTRIES = 512   # entries per block of the direct path (about)

# the key column of an empty term row: above every valid column
cdef uint64_t SEL_EMPTY_COL = ((<uint64_t>1) << (64 - KEY_SHIFT)) - 1


cdef struct MergeState:
    # everything one merge carries from row to row, and its scratch
    int64_t* los                 # extent of the current row in each active term
    int64_t* his
    int64_t row_base             # result row of local row 0 (dense marker ids)
    bint try_window
    int64_t lead
    int64_t skip                 # blocks before the block path is tried again
    int64_t fails                # block path tries that failed in a row
    int64_t sel_k                # terms the block path's order is for (-1: none)
    # the template of the direct path: every term has one entry per row and
    # term k's goes to place tmpl_pos[k] of the row's tmpl_c entries, stored
    # there by the first term of that place (tmpl_first), added by the others
    int64_t tmpl_k               # terms the template is for (-1: none)
    int64_t cap                  # room in the output arrays
    int64_t tmpl_c
    int64_t tmpl_pos[SEL_MAX_TERMS]
    uint8_t tmpl_order[SEL_MAX_TERMS]   # the terms in the order of their places
    uint8_t tmpl_first[SEL_MAX_TERMS]
    Sorter so
    uint64_t keys[SHORT_ROW]
    double vals[2 * SHORT_ROW]   # room for SHORT_ROW complex128
    double wacc[2 * 64]
    uint8_t sel_perm[SEL_MAX_TERMS]
    uint64_t sel_sorted[SEL_MAX_TERMS]
    uint64_t bkeys[SEL_BLOCK_ENTRIES]
    double bvals[2 * SEL_BLOCK_ENTRIES]


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline uint64_t _largest_key(const uint64_t* keys, int64_t m) noexcept nogil:
    """The largest of ``m >= 1`` keys."""
    cdef int64_t p
    cdef uint64_t top = keys[0]
    for p in range(1, m):
        if keys[p] > top:
            top = keys[p]
    return top


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _general_rows(MergeState* st, int64_t r0, int64_t r1, int64_t n_rows,
                           int64_t n_cols, Py_ssize_t n_terms, const Term* terms,
                           bint values, Dense* dense, oindex_t* out_indptr,
                           oindex_t* out_indices, data_t* out_data,
                           int64_t nnz) noexcept nogil:
    """Merge rows ``r0 .. r1 - 1`` (of ``n_rows``) row by row; return nnz, -1 for
    invalid input, -2 out of memory.

    Each row first reads every term's extent ``[los[k], his[k])`` (checking
    the indptr step; ``st.his`` holds the extents' starts on entry, their ends
    on return).  A row of at most SHORT_ROW entries (all terms together) is
    written by one of two methods:

    * window: when the previous row's columns spanned little (bands), the
      values are summed straight into a 64-column window (:func:`_window_row`);
    * keys: otherwise, or when a column falls outside the window, the row is
      gathered, term by term, as packed keys and values into small buffers,
      then written in key order: by the previous row's order when it still
      sorts the keys (stencils, shifted selections), else after sorting them.

    A longer row goes through the dense marker and accumulator.

    Checks what it relies on before relying on it: every indptr step is
    non-negative and stays within its term's entries, every column lies in
    ``[0, n_cols)`` (each term's cursor is within its entries on entry, by
    induction from ``indptr[0] == 0``).  On -1 the output is garbage.
    """
    cdef int64_t i, p, lo, hi, n, m, c, start, got
    cdef int64_t cmin, cmax
    cdef Py_ssize_t k
    cdef const Term* t
    cdef const int64_t* ix
    cdef int64_t* swap
    cdef int64_t* los = st.los
    cdef int64_t* his = st.his
    cdef data_t one = 1, sc = 1
    cdef uint64_t bits = 0
    cdef uint64_t ncols = <uint64_t>n_cols
    cdef int64_t short_max = SHORT_ROW if n_cols <= MAX_KEY_COLS else 0
    cdef uint64_t* keys = st.keys
    cdef data_t* vals = <data_t*>st.vals
    cdef data_t* wacc = <data_t*>st.wacc
    cdef int64_t* marker
    cdef data_t* acc
    cdef int status = 0
    # (the state the rows pass on, in locals while the loop runs)
    cdef bint try_window = st.try_window
    cdef int64_t lead = st.lead

    for i in range(r0, r1):
        start = nnz
        bits = 0
        if (i & 7) == 0 and i + 64 < n_rows:
            # many terms are many concurrent memory streams: help the prefetcher
            for k in range(n_terms):
                t = &terms[k]
                SG_PREFETCH(t.indptr + i + 64)
                if his[k] + 64 < t.nnz:
                    SG_PREFETCH(t.indices + his[k] + 64)
                    if values and t.data != NULL:
                        SG_PREFETCH(<const data_t*>t.data + his[k] + 64)
                if values and t.scale != NULL and t.scale_step == 1:
                    SG_PREFETCH(<const data_t*>t.scale + i + 64)
        # the extent of the row in every term: this row's los are the last
        # row's his
        swap = los
        los = his
        his = swap
        m = 0
        if not try_window:
            # read the extents and gather the short row in one pass
            for k in range(n_terms):
                t = &terms[k]
                lo = los[k]
                hi = t.indptr[i + 1]
                # lo <= nnz holds by induction from indptr[0] == 0
                if <uint64_t>(hi - lo) > <uint64_t>(t.nnz - lo):
                    status = -1
                    break
                his[k] = hi
                n = hi - lo
                if t.holes and n == 1 and t.indices[lo] == -1:
                    los[k] = hi  # an empty row of a selection
                    n = 0
                if n and m + n <= short_max:
                    bits = _gather_run(t, lo, n, i, m, values, keys, vals, bits)
                m += n
            if status:
                break
        else:
            for k in range(n_terms):
                t = &terms[k]
                lo = los[k]
                hi = t.indptr[i + 1]
                if <uint64_t>(hi - lo) > <uint64_t>(t.nnz - lo):
                    status = -1
                    break
                his[k] = hi
                if t.holes and hi - lo == 1 and t.indices[lo] == -1:
                    los[k] = hi  # an empty row of a selection
                m += hi - los[k]
            if status:
                break
            if m > 1 and m <= short_max:
                got = _window_row(i, n_terms, terms, los, his, values, n_cols, &lead,
                                  wacc, out_indices, out_data, nnz)
                if got == -2:
                    status = -1
                    break
                if got >= 0:
                    out_indptr[i + 1] = got
                    nnz = got
                    continue
            if m <= short_max:
                # gather the packed keys (and values) of the row, term by term
                m = 0
                for k in range(n_terms):
                    n = his[k] - los[k]
                    if n:
                        bits = _gather_run(&terms[k], los[k], n, i, m, values, keys, vals,
                                           bits)
                        m += n
        if m == 0:
            out_indptr[i + 1] = nnz
            continue
        if m <= short_max:
            # every column must lie in [0, n_cols) before the row is written:
            # the output has room for valid rows only, and an int32 output
            # would truncate a column before it could be checked.  ``bits``,
            # the or of the row's columns, bounds the largest (a negative
            # column makes it huge); only when it does not settle the question
            # are the keys (which hold columns below MAX_KEY_COLS whole)
            # searched for the largest.
            if bits >= ncols and (bits >= <uint64_t>MAX_KEY_COLS
                                  or _largest_key(keys, m) >> KEY_SHIFT >= ncols):
                status = -1
                break
            nnz = _write_short_row(&st.so, keys, m, values, vals, out_indices, out_data, nnz)
            cmin = out_indices[start]
            cmax = out_indices[nnz - 1]
            # try the window on the next row if this one would have fitted,
            # placed as this row's columns are placed
            try_window = cmax - cmin < 64 - 2 * WINDOW_MARGIN
            lead = cmin - <int64_t>(keys[0] >> KEY_SHIFT)
        else:
            # a long row: Gustavson's dense marker and accumulator
            if dense.marker == NULL:
                if _alloc_dense(dense, n_cols, sizeof(data_t), values) < 0:
                    status = -2
                    break
            marker = dense.marker
            acc = <data_t*>dense.acc
            for k in range(n_terms):
                t = &terms[k]
                ix = t.indices
                for p in range(los[k], his[k]):
                    c = ix[p]
                    if <uint64_t>c >= ncols:
                        status = -1
                        break
                    if values:
                        sc = _term_value(t, p, i, one)
                    nnz = _add_entry(st.row_base + i, c, sc, values, marker, acc,
                                     out_indices, nnz)
                if status:
                    break
            if status:
                break
            _finish_row(start, nnz, values, acc, out_indices, out_data)
        out_indptr[i + 1] = nnz
    st.los = los
    st.his = his
    st.try_window = try_window
    st.lead = lead
    return status if status else nnz


cdef inline void _prefetch_next(const Term* t, int64_t r, int64_t lo, int64_t n,
                                bint values, size_t item) noexcept nogil:
    """Prefetch what term ``t`` reads for the ``n`` rows from local row ``r``,
    its entries from ``lo`` on (one entry per row), one cache line in eight
    entries: the next block of the block paths, which visit many terms in
    short runs that the hardware prefetcher does not follow."""
    cdef int64_t x
    cdef const char* sp = <const char*>t.scale
    for x in range(0, n, 8):
        SG_PREFETCH(t.indptr + r + 1 + x)
        SG_PREFETCH(t.indices + lo + x)
        if values:
            if t.data != NULL:
                SG_PREFETCH(<const char*>t.data + (lo + x) * item)
            if sp != NULL and t.scale_step == 1:
                SG_PREFETCH(sp + (r + x) * item)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int _sel_gather_term(formula_t* tag, int64_t n, const int64_t* ip,
                                 const int64_t* ix, int64_t* cursor, int64_t nnz_t,
                                 uint64_t ncols, uint64_t* kp, data_t* vp,
                                 Py_ssize_t n_terms, Py_ssize_t k, const data_t* dp,
                                 const data_t* sp, int64_t step, const data_t* s2p,
                                 double fac, bint holes, uint64_t* bad) noexcept nogil:
    """The rows of one term for :func:`_sel_gather`: 1 if some row holds more
    than one entry or an indptr step is invalid, else 0 (``cursor`` moved).
    ``holes``: a column of -1 is an empty row."""
    cdef int64_t r, hi, d, lo = cursor[0]
    cdef uint64_t c, empty = (SEL_EMPTY_COL << KEY_SHIFT), seen_bad = 0
    cdef data_t zero = 0
    for r in range(n):
        hi = ip[r]
        d = hi - lo
        if <uint64_t>d > 1 or <uint64_t>d > <uint64_t>(nnz_t - lo):
            return 1
        if d and not (holes and ix[lo] == -1):
            c = <uint64_t>ix[lo]
            seen_bad |= c >= ncols
            kp[r * n_terms] = (c << KEY_SHIFT) | <uint64_t>k
            if formula_t is not PatternTag:
                vp[r * n_terms] = _formula_value(tag, dp, sp, lo, r, step, s2p, fac)
        else:
            kp[r * n_terms] = empty | <uint64_t>k
            if formula_t is not PatternTag:
                vp[r * n_terms] = zero
        lo = hi
    bad[0] |= seen_bad
    cursor[0] = lo
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _sel_gather(MergeState* st, int64_t r0, int64_t n, Py_ssize_t n_terms,
                     const Term* terms, bint values, uint64_t ncols,
                     data_t* bvals) noexcept nogil:
    """Gather pass of the block path over rows ``r0 .. r0 + n - 1``: key and
    value of every (row, term) into ``st.bkeys`` and ``bvals`` (``st.bvals``;
    row-major),
    the terms' new cursors into ``st.los``.  Returns 0, 1 if some term row
    holds more than one entry or an indptr step is invalid (nothing is used
    then: the general rows take the block and check it), -1 if a column lies
    outside ``[0, ncols)``."""
    cdef Py_ssize_t k
    cdef int64_t lo, nnz_t, step
    cdef uint64_t bad = 0
    cdef const Term* t
    cdef const int64_t* ip
    cdef const int64_t* ix
    cdef const data_t* dp
    cdef const data_t* sp
    cdef const data_t* s2p
    cdef uint64_t* kp
    cdef data_t* vp
    cdef int mode, rc
    for k in range(n_terms):
        t = &terms[k]
        ip = t.indptr + r0 + 1
        ix = t.indices
        lo = st.his[k]
        nnz_t = t.nnz
        kp = st.bkeys + k
        vp = bvals + k
        mode = t.mode
        dp = <const data_t*>t.data
        sp = (<const data_t*>t.scale) + r0 * t.scale_step if t.scale != NULL else NULL
        s2p = (<const data_t*>t.scale2) + r0 * t.scale_step if t.scale2 != NULL else NULL
        step = t.scale_step
        _prefetch_next(t, r0 + n, lo + n, n, values, sizeof(data_t))
        if not values:
            rc = _sel_gather_term(<PatternTag*>NULL, n, ip, ix, &lo, nnz_t, ncols, kp, vp,
                                  n_terms, k, dp, sp, step, s2p, t.factor, t.holes, &bad)
        elif mode == ONES:
            rc = _sel_gather_term(<OnesTag*>NULL, n, ip, ix, &lo, nnz_t, ncols, kp, vp,
                                  n_terms, k, dp, sp, step, s2p, t.factor, t.holes, &bad)
        elif mode == DATA:
            rc = _sel_gather_term(<DataTag*>NULL, n, ip, ix, &lo, nnz_t, ncols, kp, vp,
                                  n_terms, k, dp, sp, step, s2p, t.factor, t.holes, &bad)
        elif mode == SCALE:
            rc = _sel_gather_term(<ScaleTag*>NULL, n, ip, ix, &lo, nnz_t, ncols, kp, vp,
                                  n_terms, k, dp, sp, step, s2p, t.factor, t.holes, &bad)
        elif mode == DATA_SCALE:
            rc = _sel_gather_term(<DataScaleTag*>NULL, n, ip, ix, &lo, nnz_t, ncols, kp, vp,
                                  n_terms, k, dp, sp, step, s2p, t.factor, t.holes, &bad)
        else:
            rc = _sel_gather_term(<OnesScaleTag*>NULL, n, ip, ix, &lo, nnz_t, ncols, kp, vp,
                                  n_terms, k, dp, sp, step, s2p, t.factor, t.holes, &bad)
        if rc:
            return 1
        st.los[k] = lo
    return -1 if bad else 0


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int64_t _sel_emit(const uint64_t* kr, const data_t* vr, const uint8_t* perm,
                              Py_ssize_t n_terms, bint values, oindex_t* out_indices,
                              data_t* out_data, int64_t nnz) noexcept nogil:
    """Write one row of the block path in the order ``perm`` of its keys: the
    columns once each, duplicates summed in key order (term by term), empty
    term rows skipped.  Returns the new entry count, or -1 when ``perm`` does
    not sort the keys (the row must then be written again)."""
    cdef Py_ssize_t q
    cdef uint64_t key, prev, col, last
    cdef uint8_t slot = perm[0]
    cdef data_t total = 0
    prev = kr[slot]
    last = prev >> KEY_SHIFT
    if values:
        total = vr[slot]
    for q in range(1, n_terms):
        slot = perm[q]
        key = kr[slot]
        if key <= prev:
            return -1
        prev = key
        col = key >> KEY_SHIFT
        if col == last:
            if values:
                total = total + vr[slot]
            continue
        # a new column: the last one was a real column (empty rows come last)
        out_indices[nnz] = <oindex_t>last
        if values:
            out_data[nnz] = total
            total = vr[slot]
        nnz += 1
        last = col
    if last != SEL_EMPTY_COL:
        out_indices[nnz] = <oindex_t>last
        if values:
            out_data[nnz] = total
        nnz += 1
    return nnz


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _sel_block(MergeState* st, int64_t r0, int64_t r1, int64_t n_cols,
                        Py_ssize_t n_terms, const Term* terms, bint values,
                        oindex_t* out_indptr, oindex_t* out_indices, data_t* out_data,
                        int64_t nnz) noexcept nogil:
    """Rows ``r0 .. r1 - 1`` by the block path when each term holds at most one
    entry in each of them; return nnz, -1 for invalid input, -3 when the block
    path does not apply (nothing written, ``st.his`` unchanged)."""
    cdef int64_t r, got, n = r1 - r0
    cdef Py_ssize_t q, j
    cdef int status
    cdef uint64_t key
    cdef const uint64_t* kr
    cdef const data_t* vr
    cdef uint8_t* perm = st.sel_perm
    cdef int64_t* swap
    status = _sel_gather(st, r0, n, n_terms, terms, values, <uint64_t>n_cols,
                         <data_t*>st.bvals)
    if status > 0:
        return -3
    if status < 0:
        return -1
    if st.sel_k != n_terms:
        for q in range(n_terms):
            perm[q] = <uint8_t>q
        st.sel_k = n_terms
    for r in range(n):
        kr = st.bkeys + r * n_terms
        vr = (<const data_t*>st.bvals) + r * n_terms
        got = _sel_emit(kr, vr, perm, n_terms, values, out_indices, out_data, nnz)
        if got < 0:
            # the order changed (a periodic wrap, an empty row): insertion
            # sort, from the previous order, which is nearly right
            for q in range(n_terms):
                st.sel_sorted[q] = kr[perm[q]]
            for q in range(1, n_terms):
                key = st.sel_sorted[q]
                j = q - 1
                while j >= 0 and st.sel_sorted[j] > key:
                    st.sel_sorted[j + 1] = st.sel_sorted[j]
                    j -= 1
                st.sel_sorted[j + 1] = key
            for q in range(n_terms):
                perm[q] = <uint8_t>(st.sel_sorted[q] & KEY_MASK)
            got = _sel_emit(kr, vr, perm, n_terms, values, out_indices, out_data, nnz)
        nnz = got
        out_indptr[r0 + r + 1] = <oindex_t>nnz
    swap = st.los
    st.los = st.his
    st.his = swap
    # the template of the direct path, from the last row when no term row
    # is empty there: places in key order, duplicates at one place
    kr = st.bkeys + (n - 1) * n_terms
    st.tmpl_k = -1
    if kr[perm[n_terms - 1]] >> KEY_SHIFT != SEL_EMPTY_COL:
        j = -1
        for q in range(n_terms):
            if q == 0 or kr[perm[q]] >> KEY_SHIFT != kr[perm[q - 1]] >> KEY_SHIFT:
                j += 1
                st.tmpl_first[perm[q]] = 1
            else:
                st.tmpl_first[perm[q]] = 0
            st.tmpl_pos[perm[q]] = j
            st.tmpl_order[q] = perm[q]
        st.tmpl_c = j + 1
        st.tmpl_k = n_terms
    return nnz


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int64_t _direct_term(formula_t* tag, bint first, bint checked, bint holes,
                                 int64_t limit,
                                 const int64_t* ip, const int64_t* ix, int64_t lo,
                                 uint64_t ncols, const oindex_t* prev, int64_t pc,
                                 oindex_t* oi, data_t* od, int64_t c, const data_t* dp,
                                 const data_t* sp, int64_t step, const data_t* s2p,
                                 double fac, uint64_t* bad, uint64_t* disorder) noexcept nogil:
    """One term's rows for :func:`_direct_block`; returns the rows that follow
    the template.  The first term of a place writes it (and notes a column
    not above the previous place's in ``disorder``); the others check the
    column and add.  ``checked``: the indptr steps are known to be one.
    ``holes``: a column of -1 (an empty row of a selection) is off the
    template."""
    cdef int64_t r, col
    cdef uint64_t seen_bad = 0, seen_disorder = 0
    if first:
        for r in range(limit):
            if not checked and ip[r] != lo + 1 + r:
                limit = r
                break
            col = ix[lo + r]
            if holes and col == -1:
                limit = r
                break
            seen_bad |= <uint64_t>col >= ncols
            seen_disorder |= col <= prev[r * pc]
            oi[r * c] = <oindex_t>col
            if formula_t is not PatternTag:
                od[r * c] = _formula_value(tag, dp, sp, lo + r, r, step, s2p, fac)
    else:
        for r in range(limit):
            if not checked and ip[r] != lo + 1 + r:
                limit = r
                break
            col = ix[lo + r]
            if holes and col == -1:
                limit = r
                break
            seen_bad |= <uint64_t>col >= ncols
            if oi[r * c] != col:
                limit = r
                break
            if formula_t is not PatternTag:
                od[r * c] = od[r * c] + _formula_value(tag, dp, sp, lo + r, r, step, s2p, fac)
    bad[0] |= seen_bad
    disorder[0] |= seen_disorder
    return limit


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _direct_block(MergeState* st, int64_t r0, int64_t n, int64_t n_cols,
                           Py_ssize_t n_terms, const Term* terms, bint values,
                           oindex_t* out_indptr, oindex_t* out_indices, data_t* out_data,
                           int64_t* nnz) noexcept nogil:
    """The direct path over rows ``r0 .. r0 + n - 1``: while the rows follow
    the template (every term one entry, the columns in the template's order,
    duplicates where it has them), term by term, each entry is written
    straight to its place in the output (a duplicate is added to the place,
    term by term as the reference sums); a row whose columns come in another
    order, all distinct, is sorted in place.  Returns the number of rows
    written (the first rows that follow the template; ``nnz`` and the
    cursors advanced past them), or -1 if a column lies outside
    ``[0, n_cols)``."""
    cdef Py_ssize_t k
    cdef int64_t r, q, j, lo, nnz_t, step, pos, limit = n, c = st.tmpl_c
    cdef int64_t n_sorted = 0, last_sorted = -1
    cdef int64_t base = nnz[0]
    cdef uint64_t bad = 0, ncols = <uint64_t>n_cols
    cdef int64_t col, x
    cdef bint first, ok, checked
    cdef uint64_t disorder = 0
    cdef const oindex_t* prev
    cdef oindex_t low[1]
    cdef int64_t pc
    low[0] = -1
    cdef const Term* t
    cdef const int64_t* ip
    cdef const int64_t* ix
    cdef const data_t* dp
    cdef const data_t* sp
    cdef const data_t* s2p
    cdef oindex_t* oi
    cdef data_t* od
    cdef data_t v, one = 1
    cdef int mode
    # (rows that other terms do not fill must not be written out of bounds)
    if (st.cap - base) // c < limit:
        limit = (st.cap - base) // c
    # terms in the order of their places: the first term of a place writes
    # it (and checks that its column exceeds the previous place's), the
    # others of the place, in term order, check the column and add
    for q in range(n_terms):
        k = st.tmpl_order[q]
        t = &terms[k]
        ip = t.indptr + r0 + 1
        ix = t.indices
        lo = st.his[k]
        nnz_t = t.nnz
        pos = st.tmpl_pos[k]
        first = st.tmpl_first[k]
        oi = out_indices + base + pos
        od = out_data + base + pos if values else NULL
        # the previous place (the first place: a row of minus ones)
        prev = oi - 1 if pos else low
        pc = c if pos else 0
        mode = t.mode
        dp = <const data_t*>t.data
        sp = (<const data_t*>t.scale) + r0 * t.scale_step if t.scale != NULL else NULL
        s2p = (<const data_t*>t.scale2) + r0 * t.scale_step if t.scale2 != NULL else NULL
        step = t.scale_step
        _prefetch_next(t, r0 + n, lo + n, n, values, sizeof(data_t))
        if limit > nnz_t - lo:
            limit = nnz_t - lo
        # an indptr shared with an earlier term at the same place (selections
        # share one arange) is checked already, up to limit
        checked = False
        for j in range(q):
            if terms[st.tmpl_order[j]].indptr == t.indptr and st.his[st.tmpl_order[j]] == lo:
                checked = True
                break
        # one loop per formula (a compile-time tag: the formula's test is out
        # of the loop)
        if not values:
            limit = _direct_term(<PatternTag*>NULL, first, checked, t.holes, limit, ip, ix, lo, ncols,
                                 prev, pc, oi, od, c, dp, sp, step, s2p, t.factor, &bad, &disorder)
        elif mode == ONES:
            limit = _direct_term(<OnesTag*>NULL, first, checked, t.holes, limit, ip, ix, lo, ncols,
                                 prev, pc, oi, od, c, dp, sp, step, s2p, t.factor, &bad, &disorder)
        elif mode == DATA:
            limit = _direct_term(<DataTag*>NULL, first, checked, t.holes, limit, ip, ix, lo, ncols,
                                 prev, pc, oi, od, c, dp, sp, step, s2p, t.factor, &bad, &disorder)
        elif mode == SCALE:
            limit = _direct_term(<ScaleTag*>NULL, first, checked, t.holes, limit, ip, ix, lo, ncols,
                                 prev, pc, oi, od, c, dp, sp, step, s2p, t.factor, &bad, &disorder)
        elif mode == DATA_SCALE:
            limit = _direct_term(<DataScaleTag*>NULL, first, checked, t.holes, limit, ip, ix, lo, ncols,
                                 prev, pc, oi, od, c, dp, sp, step, s2p, t.factor, &bad, &disorder)
        else:
            limit = _direct_term(<OnesScaleTag*>NULL, first, checked, t.holes, limit, ip, ix, lo, ncols,
                                 prev, pc, oi, od, c, dp, sp, step, s2p, t.factor, &bad, &disorder)
    if bad:
        return -1
    # the places of each row must hold increasing columns (looked at only
    # when some first term found its column not above the previous place's)
    if disorder:
        for r in range(limit):
            oi = out_indices + base + r * c
            ok = True
            for q in range(1, c):
                ok &= oi[q - 1] < oi[q]
            if ok:
                continue
            n_sorted += 1
            last_sorted = r
            # another order (a periodic wrap): sort the row's places
            od = out_data + base + r * c if values else NULL
            for q in range(1, c):
                x = oi[q]
                if values:
                    v = od[q]
                j = q - 1
                while j >= 0 and oi[j] > x:
                    oi[j + 1] = oi[j]
                    if values:
                        od[j + 1] = od[j]
                    j -= 1
                oi[j + 1] = <oindex_t>x
                if values:
                    od[j + 1] = v
            ok = True
            for q in range(1, c):
                ok &= oi[q - 1] < oi[q]
            if not ok:
                # two terms meet in a column: not the template's row
                limit = r
                break
    for r in range(limit):
        out_indptr[r0 + r + 1] = <oindex_t>(base + (r + 1) * c)
    for k in range(n_terms):
        st.his[k] += limit
    if limit and (last_sorted == limit - 1 or 8 * n_sorted > limit):
        # the order has changed for good, it seems: a new template from the
        # next block (by keys)
        st.tmpl_k = -1
    nnz[0] = base + limit * c
    return limit


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _merge_rows(MergeState* st, int64_t n_rows, int64_t n_cols, Py_ssize_t n_terms,
                         const Term* terms, bint values, Dense* dense,
                         oindex_t* out_indptr, oindex_t* out_indices, data_t* out_data,
                         int64_t nnz) noexcept nogil:
    """Merge ``n_rows`` rows with the same active terms (``terms``, rebased to
    the first of these rows; ``st.his`` holds their cursors), block by block:
    the block path when every term has at most one entry in each row of the
    block (checked cheaply first: no term has more entries in the block than
    rows), else the general rows.  Returns nnz or a negative error code."""
    cdef int64_t r0 = 0, r1, rows, drows, got
    cdef Py_ssize_t k
    cdef bint fits
    rows = 0
    if n_terms <= SEL_MAX_TERMS and n_cols <= MAX_KEY_COLS:
        rows = SEL_BLOCK_ENTRIES // n_terms
        # (the direct path writes the output itself: longer runs per term)
        drows = DIRECT_BLOCK_ENTRIES // n_terms
    if rows == 0:
        return _general_rows(st, 0, n_rows, n_rows, n_cols, n_terms, terms, values, dense,
                             out_indptr, out_indices, out_data, nnz)
    while r0 < n_rows:
        r1 = r0 + rows if n_rows - r0 > rows else n_rows
        if st.skip == 0 and st.tmpl_k == n_terms:
            r1 = r0 + drows if n_rows - r0 > drows else n_rows
        if st.skip > 0:
            st.skip -= 1
        else:
            fits = True
            for k in range(n_terms):
                fits &= terms[k].indptr[r1] - st.his[k] <= r1 - r0
            if fits and st.tmpl_k == n_terms:
                got = _direct_block(st, r0, r1 - r0, n_cols, n_terms, terms, values,
                                    out_indptr, out_indices, out_data, &nnz)
                if got < 0:
                    return got
                if got == r1 - r0:
                    r0 = r1
                    continue
                # a row off the template: a few rows by keys, which make a
                # new template
                r0 += got
                r1 = r0 + SEL_FIX_ROWS if n_rows - r0 > SEL_FIX_ROWS else n_rows
            if fits:
                got = _sel_block(st, r0, r1, n_cols, n_terms, terms, values, out_indptr,
                                 out_indices, out_data, nnz)
                if got != -3:
                    if got < 0:
                        return got
                    st.fails = 0
                    nnz = got
                    r0 = r1
                    continue
            # back off (bands, and rows the block paths did not take): try
            # again after 1, 2, 4, ... blocks
            st.skip = (<int64_t>1) << st.fails
            if st.skip < SEL_MAX_SKIP:
                st.fails += 1
        nnz = _general_rows(st, r0, r1, n_rows, n_cols, n_terms, terms, values, dense,
                            out_indptr, out_indices, out_data, nnz)
        if nnz < 0:
            return nnz
        r0 = r1
    return nnz


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _merge_loop(int64_t n_rows, int64_t n_cols, Py_ssize_t n_terms,
                         const Term* terms, const int64_t* first_rows, Py_ssize_t s0,
                         Py_ssize_t s1, const int64_t* seg_rows, const int64_t* seg_start,
                         const int64_t* seg_terms, bint values, MergeState* st,
                         Term* active, int64_t* cursors, Dense* dense,
                         oindex_t* out_indptr, oindex_t* out_indices,
                         data_t* out_data, int64_t nnz) noexcept nogil:
    """Merge the terms segment by segment, segments ``s0 .. s1 - 1``, writing
    entries from ``nnz`` on; return the new nnz, -1 for invalid input, -2 out
    of memory.

    Segment ``s`` is the rows ``seg_rows[s] .. seg_rows[s + 1] - 1`` of the
    result, covered by the terms ``seg_terms[seg_start[s] .. seg_start[s + 1] - 1]``
    (in term order, which is the order of the sums) and by no other term.  Its
    terms are copied to ``active`` with their indptr and scale moved to the
    segment's first row, so that the row loops see only the terms covering
    their rows.  ``cursors[k]`` is term k's position in its entries at the
    first row of segment ``s0`` (set by the caller), carried from segment to
    segment (its rows are visited in order).
    """
    cdef Py_ssize_t s, j, k
    cdef int64_t a, b, i, off
    cdef Py_ssize_t n_act
    for s in range(s0, s1):
        a = seg_rows[s]
        b = seg_rows[s + 1]
        n_act = seg_start[s + 1] - seg_start[s]
        if n_act == 0:
            for i in range(a, b):
                out_indptr[i + 1] = <oindex_t>nnz
            continue
        for j in range(n_act):
            k = seg_terms[seg_start[s] + j]
            active[j] = terms[k]
            off = a - first_rows[k]
            active[j].indptr = terms[k].indptr + off
            if terms[k].scale != NULL:
                active[j].scale = (<const data_t*>terms[k].scale) + off * terms[k].scale_step
            if terms[k].scale2 != NULL:
                active[j].scale2 = (<const data_t*>terms[k].scale2) + off * terms[k].scale_step
            st.his[j] = cursors[k]
        st.row_base = a
        st.try_window = True
        st.lead = 0
        st.so.prev_m = -1
        st.skip = 0
        st.fails = 0
        st.sel_k = -1
        st.tmpl_k = -1
        nnz = _merge_rows(st, b - a, n_cols, n_act, active, values, dense, out_indptr + a,
                          out_indices, out_data, nnz)
        if nnz < 0:
            return nnz
        for j in range(n_act):
            cursors[seg_terms[seg_start[s] + j]] = st.his[j]
    return nnz


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _gather_indptr(int64_t n_out, const int64_t* rows, int64_t n_src,
                            const int64_t* indptr, int64_t nnz,
                            int64_t* out_indptr) noexcept nogil:
    """Row pointers of the gathered matrix; -1 if a row lies outside ``[-1, n_src)``
    or the extent of a gathered row is not within ``[0, nnz]`` (the rows that
    are not gathered are not looked at)."""
    cdef int64_t r, row, ahead, lo, hi, total = 0
    out_indptr[0] = 0
    for r in range(n_out):
        if r + GATHER_AHEAD < n_out:
            ahead = rows[r + GATHER_AHEAD]
            if <uint64_t>ahead < <uint64_t>n_src:
                SG_PREFETCH(indptr + ahead)
        row = rows[r]
        if <uint64_t>(row + 1) > <uint64_t>n_src:
            return -1
        if row >= 0:
            lo = indptr[row]
            hi = indptr[row + 1]
            if <uint64_t>lo > <uint64_t>nnz or <uint64_t>(hi - lo) > <uint64_t>(nnz - lo):
                return -1
            total += hi - lo
        out_indptr[r + 1] = total
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _gather_copy(int64_t n_out, const int64_t* rows, const int64_t* indptr,
                       const int64_t* indices, const data_t* data,
                       const int64_t* out_indptr, int64_t* out_indices,
                       data_t* out_data) noexcept nogil:
    """Copy the rows; a run of consecutive source rows is copied in one piece.

    Prefetches two levels ahead: the indptr entry of the row 2 * GATHER_AHEAD
    ahead, the entries of the row GATHER_AHEAD ahead.
    """
    cdef int64_t r = 0, r_end, row, ahead, src, n, q, p
    while r < n_out:
        if r + 2 * GATHER_AHEAD < n_out:
            ahead = rows[r + 2 * GATHER_AHEAD]
            if ahead >= 0:
                SG_PREFETCH(indptr + ahead)
        if r + GATHER_AHEAD < n_out:
            ahead = rows[r + GATHER_AHEAD]
            if ahead >= 0:
                SG_PREFETCH(indices + indptr[ahead])
                if data != NULL:
                    SG_PREFETCH(data + indptr[ahead])
        row = rows[r]
        if row < 0:
            r += 1
            continue
        r_end = r + 1
        while r_end < n_out and rows[r_end] == row + (r_end - r):
            r_end += 1
        src = indptr[row]
        q = out_indptr[r]
        n = out_indptr[r_end] - q
        if n > 8:
            memcpy(out_indices + q, indices + src, <size_t>n * sizeof(int64_t))
            if data != NULL:
                memcpy(out_data + q, data + src, <size_t>n * sizeof(data_t))
        else:
            for p in range(n):
                out_indices[q + p] = indices[src + p]
            if data != NULL:
                for p in range(n):
                    out_data[q + p] = data[src + p]
        r = r_end


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
cdef int64_t _matmul_loop(int64_t n_rows, int64_t n_cols, const int64_t* a_indptr,
                          const int64_t* a_indices, const data_t* a_data,
                          const int64_t* b_indptr, const int64_t* b_indices,
                          const data_t* b_data, bint values, Dense* dense,
                          int64_t* out_indptr, int64_t* out_indices,
                          data_t* out_data) noexcept nogil:
    """Row by row: the products of a row, b_kj * a_ik (the reference's operand
    order) in the order of k, then of j, are merged as in ``merge_scaled``
    (sorted keys for a short row, the dense marker, allocated then, for a long
    one).  Returns nnz, or -2 out of memory."""
    cdef int64_t i, k, p, q, m, c, start, nnz = 0
    cdef uint64_t key
    cdef data_t one = 1, a_ik = 1, prod = 1
    cdef int64_t short_max = SHORT_ROW if n_cols <= MAX_KEY_COLS else 0
    cdef uint64_t keys[SHORT_ROW]
    cdef data_t vals[SHORT_ROW]
    cdef Sorter so
    cdef int64_t* marker
    cdef data_t* acc
    so.prev_m = -1
    out_indptr[0] = 0
    for i in range(n_rows):
        start = nnz
        m = 0
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            m += b_indptr[k + 1] - b_indptr[k]
        if m == 0:
            pass
        elif m <= short_max:
            m = 0
            for p in range(a_indptr[i], a_indptr[i + 1]):
                k = a_indices[p]
                if values:
                    a_ik = a_data[p] if a_data != NULL else one
                for q in range(b_indptr[k], b_indptr[k + 1]):
                    keys[m] = (<uint64_t>b_indices[q] << KEY_SHIFT) | <uint64_t>m
                    if values:
                        vals[m] = _mul(b_data[q] if b_data != NULL else one, a_ik)
                    m += 1
            nnz = _write_short_row(&so, keys, m, values, vals, out_indices, out_data, nnz)
        else:
            if dense.marker == NULL:
                if _alloc_dense(dense, n_cols, sizeof(data_t), values) < 0:
                    return -2
            marker = dense.marker
            acc = <data_t*>dense.acc
            for p in range(a_indptr[i], a_indptr[i + 1]):
                k = a_indices[p]
                if values:
                    a_ik = a_data[p] if a_data != NULL else one
                for q in range(b_indptr[k], b_indptr[k + 1]):
                    if values:
                        prod = _mul(b_data[q] if b_data != NULL else one, a_ik)
                    nnz = _add_entry(i, b_indices[q], prod, values, marker, acc,
                                     out_indices, nnz)
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
cdef int64_t _coo_loop(int64_t n_rows, int64_t n_cols, int64_t nnz_in, const int64_t* rows,
                       const int64_t* cols, const data_t* vals, int64_t* head,
                       Dense* dense, int64_t* out_indptr, int64_t* out_indices,
                       data_t* out_data) noexcept nogil:
    """A stable counting sort moves the entries into their rows, in the output
    arrays themselves (``head[r]`` is where row r starts); then row by row the
    duplicates are summed in input order (the order of the reference's stable
    sort) and the columns sorted, as in ``merge_scaled``, the result written
    over the staging place (never ahead of what is still to be read).
    Returns nnz, -1 if a row or column is out of range, -2 out of memory."""
    cdef int64_t i, e, p, r, m, c, start, lo, hi, got, nnz = 0, lead = 0
    cdef uint64_t bad = 0
    cdef bint values = vals != NULL, try_window = True
    cdef data_t wacc[64]
    cdef data_t v = 0
    cdef int64_t short_max = SHORT_ROW if n_cols <= MAX_KEY_COLS else 0
    cdef uint64_t keys[SHORT_ROW]
    cdef data_t row_vals[SHORT_ROW]
    cdef Sorter so
    cdef int64_t* marker
    cdef data_t* acc
    so.prev_m = -1
    for i in range(n_rows + 1):
        head[i] = 0
    for e in range(nnz_in):
        r = rows[e]
        if <uint64_t>r >= <uint64_t>n_rows:
            return -1
        head[r + 1] += 1
    for i in range(n_rows):
        head[i + 1] += head[i]
    for e in range(nnz_in):          # head[r] is row r's cursor here
        if e + 2 * GATHER_AHEAD < nnz_in:
            # random rows: fetch the cursors, then the places they point at
            SG_PREFETCH(head + rows[e + 2 * GATHER_AHEAD])
        if e + GATHER_AHEAD < nnz_in:
            r = head[rows[e + GATHER_AHEAD]]
            SG_PREFETCH(out_indices + r)
            if values:
                SG_PREFETCH(out_data + r)
        r = rows[e]
        p = head[r]
        head[r] = p + 1
        c = cols[e]
        bad |= <uint64_t>c >= <uint64_t>n_cols
        out_indices[p] = c
        if values:
            out_data[p] = vals[e]
    if bad:
        return -1
    out_indptr[0] = 0
    lo = 0                           # cursors have reached the next row's start
    for i in range(n_rows):
        hi = head[i]
        start = nnz
        m = hi - lo
        if m == 0:
            pass
        elif m <= short_max:
            got = -1
            if try_window and m > 1:
                got = _window_run(out_indices + lo, out_data + lo if values else NULL, m,
                                  values, n_cols, &lead, wacc, out_indices, out_data, nnz)
            if got >= 0:
                nnz = got
            else:
                for p in range(m):
                    keys[p] = (<uint64_t>out_indices[lo + p] << KEY_SHIFT) | <uint64_t>p
                if values:
                    for p in range(m):
                        row_vals[p] = out_data[lo + p]
                nnz = _write_short_row(&so, keys, m, values, row_vals, out_indices,
                                       out_data, nnz)
                # try the window on the next row if this one would have fitted
                try_window = out_indices[nnz - 1] - out_indices[start] < 64 - 2 * WINDOW_MARGIN
                lead = out_indices[start] - <int64_t>(keys[0] >> KEY_SHIFT)
        else:
            if dense.marker == NULL:
                if _alloc_dense(dense, n_cols, sizeof(data_t), values) < 0:
                    return -2
            marker = dense.marker
            acc = <data_t*>dense.acc
            for p in range(lo, hi):
                if values:
                    v = out_data[p]
                nnz = _add_entry(i, out_indices[p], v, values, marker, acc, out_indices, nnz)
            _finish_row(start, nnz, values, acc, out_indices, out_data)
        out_indptr[i + 1] = nnz
        lo = hi
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
    # the loop checks rows and columns as it goes
    if values is not None:
        values = _as_values(values, nnz_in, "values")
        kind = _kind(values.dtype)
        if kind < 0:
            _check_range(rows, 0, nr, "rows")
            _check_range(cols, 0, nc, "cols")
            return _reference.coo_to_csr(nr, nc, rows, cols, values)
        values = np.ascontiguousarray(values)
    head = np.empty(nr + 1, dtype=INDEX_DTYPE)
    out_indptr = np.empty(nr + 1, dtype=INDEX_DTYPE)
    out_indices = np.empty(nnz_in, dtype=INDEX_DTYPE)
    out_data = None
    if values is not None:
        out_data = np.empty(nnz_in, dtype=values.dtype)
    cdef const int64_t* r = <const int64_t*>_ptr(rows)
    cdef const int64_t* c = <const int64_t*>_ptr(cols)
    cdef void* v = _ptr(values)
    cdef int64_t* h = <int64_t*>_ptr(head)
    cdef int64_t* oip = <int64_t*>_ptr(out_indptr)
    cdef int64_t* oix = <int64_t*>_ptr(out_indices)
    cdef void* od = _ptr(out_data)
    cdef Dense dense
    dense.marker = NULL
    dense.acc = NULL
    try:
        with nogil:
            if kind == F32:
                nnz = _coo_loop[float](nr, nc, nnz_in, r, c, <const float*>v, h, &dense,
                                       oip, oix, <float*>od)
            elif kind == F64:
                nnz = _coo_loop[double](nr, nc, nnz_in, r, c, <const double*>v, h, &dense,
                                        oip, oix, <double*>od)
            elif kind == C64:
                nnz = _coo_loop[complex64_t](nr, nc, nnz_in, r, c, <const complex64_t*>v, h,
                                             &dense, oip, oix, <complex64_t*>od)
            else:
                nnz = _coo_loop[complex128_t](nr, nc, nnz_in, r, c, <const complex128_t*>v,
                                              h, &dense, oip, oix, <complex128_t*>od)
    finally:
        _free_dense(&dense)
    if nnz == -1:
        _check_range(rows, 0, nr, "rows")
        _check_range(cols, 0, nc, "cols")
        raise ValueError("coo_to_csr: invalid coordinates")  # not reached
    if nnz < 0:
        raise MemoryError("coo_to_csr: no memory for a dense row of %d columns" % nc)
    return out_indptr, _trim(out_indices, nnz), _trim(out_data, nnz)


cdef struct MergePart:
    # one range of segments of a merge, run without the GIL, perhaps in a
    # worker thread: its own scratch, shared read-only inputs, its own rows
    # and entries of the output
    int kind
    bint int32
    bint values
    int64_t n_rows, n_cols
    Py_ssize_t n_terms
    const Term* terms
    const int64_t* first_rows
    Py_ssize_t s0, s1
    const int64_t* seg_rows
    const int64_t* seg_start
    const int64_t* seg_terms
    MergeState* st
    Term* active
    int64_t* cursors
    Dense dense
    void* out_indptr
    void* out_indices
    void* out_data
    int64_t start            # its first entry: the terms' entries in earlier rows
    int64_t end              # its entry count at the end, or an error code


cdef int64_t _merge_kind(MergePart* p, oindex_t* out_indptr,
                         oindex_t* out_indices) noexcept nogil:
    """:func:`_merge_loop` of one part for the value type ``p.kind``."""
    if p.kind == F32:
        return _merge_loop(p.n_rows, p.n_cols, p.n_terms, p.terms, p.first_rows, p.s0, p.s1,
                           p.seg_rows, p.seg_start, p.seg_terms, p.values, p.st, p.active,
                           p.cursors, &p.dense, out_indptr, out_indices,
                           <float*>p.out_data, p.start)
    if p.kind == F64:
        return _merge_loop(p.n_rows, p.n_cols, p.n_terms, p.terms, p.first_rows, p.s0, p.s1,
                           p.seg_rows, p.seg_start, p.seg_terms, p.values, p.st, p.active,
                           p.cursors, &p.dense, out_indptr, out_indices,
                           <double*>p.out_data, p.start)
    if p.kind == C64:
        return _merge_loop(p.n_rows, p.n_cols, p.n_terms, p.terms, p.first_rows, p.s0, p.s1,
                           p.seg_rows, p.seg_start, p.seg_terms, p.values, p.st, p.active,
                           p.cursors, &p.dense, out_indptr, out_indices,
                           <complex64_t*>p.out_data, p.start)
    return _merge_loop(p.n_rows, p.n_cols, p.n_terms, p.terms, p.first_rows, p.s0, p.s1,
                       p.seg_rows, p.seg_start, p.seg_terms, p.values, p.st, p.active,
                       p.cursors, &p.dense, out_indptr, out_indices,
                       <complex128_t*>p.out_data, p.start)


cdef void _run_part(void* part) noexcept nogil:
    """Merge one :c:type:`MergePart`."""
    cdef MergePart* p = <MergePart*>part
    if p.int32:
        p.end = _merge_kind(p, <int32_t*>p.out_indptr, <int32_t*>p.out_indices)
    else:
        p.end = _merge_kind(p, <int64_t*>p.out_indptr, <int64_t*>p.out_indices)


ctypedef void (*part_function)(void*) noexcept nogil


cdef class _PartRunner:
    """Runs one part of a kernel split by rows (a :c:type:`MergePart` by
    ``_run_part``, a :c:type:`FillPart` by ``_fill_part``) without the GIL: the
    callable handed to a worker thread (the part's memory belongs to the
    kernel's caller, which waits for it)."""
    cdef void* part
    cdef part_function run

    @staticmethod
    cdef _PartRunner of(part_function run, void* part):
        cdef _PartRunner runner = _PartRunner()
        runner.run = run
        runner.part = part
        return runner

    def __call__(self):
        with nogil:
            self.run(self.part)


# worker threads of merge_scaled and fill_scaled: a merge of at least
# 2 PARALLEL_ENTRIES entries (bound) is split into row ranges of at least
# PARALLEL_ENTRIES, one per thread, up to _threads of them; a fill from half
# those sizes on
cdef int64_t PARALLEL_ENTRIES = 1 << 18
cdef int _threads = 1
_executor = None


def set_threads(n):
    """Use up to ``n`` threads in merge_scaled (1: none besides the caller's)."""
    global _threads
    n = operator.index(n)
    if n < 1:
        raise ValueError("the number of threads must be >= 1, got %d" % n)
    _threads = n


def get_threads():
    """The number of threads merge_scaled may use."""
    return _threads


def _set_parallel_entries(n):
    """Split merges of at least ``2 n`` entries and fills of at least ``n`` (None:
    the default) -- for tests."""
    global PARALLEL_ENTRIES
    PARALLEL_ENTRIES = (1 << 18) if n is None else max(1, operator.index(n))


def _forget_executor():
    global _executor
    _executor = None


def _wait_all(futures):
    """Wait for every future, through KeyboardInterrupt too (re-raised after the
    last): a worker writes into memory that the caller frees once it returns."""
    interrupted = None
    for future in futures:
        while True:
            try:
                future.result()
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
    if interrupted is not None:
        raise interrupted


def _submit(runner):
    global _executor
    if _executor is None:
        import concurrent.futures
        _executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="sparsegrad-merge")
    return _executor.submit(runner)


def _run_in_threads(runners):
    """Call ``runners[1:]`` in worker threads and ``runners[0]`` in this one (each
    releases the GIL itself), and wait for all of them, whatever happens: they
    write into memory that the caller frees once this returns."""
    futures = []
    try:
        for runner in runners[1:]:
            futures.append(_submit(runner))
        runners[0]()
    finally:
        _wait_all(futures)


def _init_threads():
    import os
    if hasattr(os, "register_at_fork"):  # a forked child has no worker threads
        os.register_at_fork(after_in_child=_forget_executor)


_init_threads()


cdef tuple _row_segments(list ranges, int64_t nr, bint stacked, list splits):
    """Segments of rows covered by the same terms: ``(bounds, starts, members)``.

    ``ranges`` holds each term's ``(first_row, n_rows)``; segment ``g`` is rows
    ``bounds[g] .. bounds[g + 1] - 1``, covered by the terms
    ``members[starts[g]:starts[g + 1]]`` (in term order).  Without ``stacked``
    every term covers every row.  ``splits``: rows where a segment must
    begin (the parts of a merge in threads).
    """
    cdef Py_ssize_t n_terms = len(ranges)
    if not stacked:
        bounds = [0] + splits + [nr]
        return (np.array(bounds, dtype=INDEX_DTYPE),
                np.arange(len(bounds), dtype=INDEX_DTYPE) * n_terms,
                np.tile(np.arange(n_terms, dtype=INDEX_DTYPE), len(bounds) - 1))
    points = {0, nr}
    points.update(splits)
    for first, m in ranges:
        if m:
            points.add(first)
            points.add(first + m)
    points = sorted(points)
    starts = [0]
    members = []
    for a, b in zip(points[:-1], points[1:]):
        members += [k for k, (first, m) in enumerate(ranges) if m and first <= a and first + m >= b]
        starts.append(len(members))
    return (np.array(points, dtype=INDEX_DTYPE), np.array(starts, dtype=INDEX_DTYPE),
            np.array(members, dtype=INDEX_DTYPE))


def merge_scaled(n_rows, n_cols, terms, pattern_only=False, index_dtype=None):
    """Sum of row-scaled CSR matrices, ``sum_k diag(scale_k) @ M_k``, each term
    placed at its own first row.

    Contract of :func:`sparsegrad._fast._reference.merge_scaled`: ``terms`` is
    a sequence of ``(indptr, indices, data, row_scale)`` (an ``n_rows`` x
    ``n_cols`` matrix) or ``(indptr, indices, data, row_scale, first_row)``
    (a matrix of ``len(indptr) - 1`` rows added from row ``first_row`` on;
    it must fit in ``n_rows``) or ``(..., first_row, factor)`` (the row scale
    times a real number); ``data`` and ``row_scale`` may be ``None``, and
    ``row_scale`` a pair of vectors ``(d, c)`` (their product).  Real row
    scales are multiplied by the second vector and the factor as the entries
    are written, rounded as numpy's ``(d * c) * factor``; other dtypes, and
    strided pairs, are multiplied with numpy first.  The result has the union pattern of the terms (structural zeros kept),
    sorted columns, the dtype that numpy promotion of all data and scales
    gives, and ``index_dtype`` (``None``: int64, or int32) indices.

    The rows are split into segments covered by the same terms, and each
    segment is merged with those terms only (stacked blocks cost what their
    own terms cost).  Within a segment, blocks of rows where every term holds
    one entry per row, in the columns' order of an earlier row (the
    template), are written term by term straight to the output; blocks where
    every term holds at most one entry per row are gathered term by term as
    packed (column, term) keys and written row by row in the previous row's
    key order, when it still sorts the keys.  Other rows are merged one by one: a row of at
    most 256 entries (all terms together) in a 64-column window (bands) or a
    small buffer of sorted packed keys; a longer row through a dense marker
    and accumulator of length ``n_cols``, allocated only then.  The loops
    check the indptr steps and column bounds they rely on; on a failure the
    wrapper finds and reports the bad entry.  A term whose own product dtype
    is narrower than the result dtype is scaled with numpy first, so that its
    rounding is the reference's.  Other value dtypes than float32/64 and
    complex64/128 are handed to the reference kernel.
    """
    cdef int64_t nr = _dim(n_rows, "n_rows"), nc = _dim(n_cols, "n_cols")
    cdef int64_t nnz = 0, total = 0, nnz_k, m, first
    cdef Py_ssize_t k, n_terms, n_items
    cdef int kind = F64, tk, sk
    cdef bint values = not pattern_only, known = True, stacked = False, int32 = False
    cdef const int64_t* ip
    terms = list(terms)
    n_terms = len(terms)
    prepared = []
    kinds = []
    arange = None
    # (a tuple too short to be a term is refused below, with the reference's
    # ValueError)
    longest = max([len(t[1]) for t in terms if len(t) > 1 and t[0] is None] or [0])
    for k in range(n_terms):
        term = terms[k]
        n_items = len(term)
        first = 0
        factor = 1.0
        if n_items == 4:
            indptr, indices, data, scale = term
        elif n_items == 5:
            indptr, indices, data, scale, first_row = term
            first = operator.index(first_row)
        elif n_items == 6:
            indptr, indices, data, scale, first_row, factor = term
            first = operator.index(first_row)
            if type(factor) is not float or scale is None:
                factor = _reference._real_factor(factor, scale)
        else:
            raise ValueError("merge_scaled: term %d is (indptr, indices, data, row_scale"
                             "[, first_row[, factor]]), got a tuple of %d items"
                             % (k, n_items))
        # (error messages, and conversions, only off the fast path)
        if not _is_index_array(indices):
            indices = _as_index(indices, "merge_scaled term %d indices" % k)
        holes = indptr is None
        if holes:  # a selection by its columns: one entry per row, -1 for none
            if data is not None:
                raise ValueError("merge_scaled: a selection term (indptr None) has no data")
            m = cnp.PyArray_DIM(<cnp.ndarray>indices, 0)
            if n_items == 4 and m != nr:
                raise ValueError("merge_scaled: a selection term needs one column per row "
                                 "(%d), got %d" % (nr, m))
            # (one arange for all of them: the direct path checks it once)
            if arange is None or arange.shape[0] <= m:
                arange = np.arange(max(m + 1, longest + 1), dtype=INDEX_DTYPE)
            indptr = arange[:m + 1]
        elif not _is_index_array(indptr):
            indptr = _as_index(indptr, "merge_scaled term %d indptr" % k)
        m = nr
        if n_items >= 5:
            m = cnp.PyArray_DIM(<cnp.ndarray>indptr, 0) - 1
            if m < 0:
                raise ValueError("merge_scaled term %d: indptr must have at least one entry"
                                 % k)
            if first < 0 or first > nr - m:
                raise ValueError("merge_scaled: term %d of %d rows from row %d does not fit "
                                 "in %d rows" % (k, m, first, nr))
            stacked = stacked or first != 0 or m != nr
        nnz_k = cnp.PyArray_DIM(<cnp.ndarray>indices, 0)
        ip = <const int64_t*>_ptr(indptr)
        # the loop checks the rest of indptr and the columns as it goes
        if (cnp.PyArray_DIM(<cnp.ndarray>indptr, 0) != m + 1 or ip[0] != 0
                or ip[m] != nnz_k):
            _check_indptr_ends(indptr, m, nnz_k, "merge_scaled term %d" % k)
        total += nnz_k
        scale2 = None
        if isinstance(scale, tuple):
            if not (len(<tuple>scale) == 2 and _is_values(scale[0], m)
                    and _is_values(scale[1], m)):
                _reference._scale_pair(scale)  # (raises unless two 1-d arrays)
            scale, scale2 = scale
        if values:
            if data is not None and not _is_values(data, nnz_k):
                data = _as_values(data, nnz_k, "merge_scaled term %d data" % k)
            if scale is not None and not _is_values(scale, m):
                scale = _as_values(scale, m, "merge_scaled term %d row_scale" % k)
            if scale2 is not None:
                if not _is_values(scale2, m):
                    scale2 = _as_values(scale2, m, "merge_scaled term %d row_scale" % k)
                if not (_array_kind(scale) in (F32, F64)
                        and _array_kind(scale2) == _array_kind(scale)
                        and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>scale)
                        and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>scale2)):
                    # (other dtypes, strided scales: the product as numpy forms it)
                    scale = scale * scale2
                    scale2 = None
            if factor != 1.0 and _array_kind(scale) not in (F32, F64):
                # (complex and other dtypes, which the loops do not scale by a
                # factor: the product as numpy forms it, here once)
                scale = scale * factor
                factor = 1.0
            # the kind of the reference's (ones or data) * scale
            tk = F64 if data is None else _array_kind(data)
            if scale is not None:
                sk = _array_kind(scale)
                tk = tk | sk if tk >= 0 and sk >= 0 else -1
            known = known and tk >= 0
            kinds.append(tk)
        else:
            data = scale = scale2 = None
        prepared.append([indptr, indices, data, scale, first, m, holes, factor, scale2])
    bound = min(<object>total, <object>nr * <object>nc)
    if index_dtype is not None:
        int32 = _reference._check_index_dtype(index_dtype, bound, nc) == np.int32
    out_dtype = None
    if values:
        if known:
            # promotion among float32/64, complex64/128 is the bitwise or of
            # their codes (bit 0: double precision, bit 1: complex)
            kind = F32 if n_terms else F64
            for tk in kinds:
                kind |= tk
            out_dtype = _KIND_DTYPES[kind]
            narrow = [kinds[k] != kind for k in range(n_terms)]
        else:
            dtypes = [np.result_type(np.float64 if t[2] is None else t[2].dtype,
                                     *(() if t[3] is None else (t[3].dtype,)))
                      for t in prepared]
            out_dtype = np.result_type(*dtypes)
            kind = _kind(out_dtype)
            if kind < 0:
                _validate_terms(prepared, nc)
                return _reference.merge_scaled(
                    nr, nc, [(None if t[6] else t[0], t[1], t[2], _numpy_scale(t), t[4])
                         for t in prepared],
                    pattern_only, index_dtype)
            narrow = [dt != out_dtype for dt in dtypes]
        for k in range(n_terms):
            indptr, indices, data, scale = prepared[k][:4]
            if scale is not None and narrow[k]:
                # a product rounded in a narrower dtype than the result's
                scale = _numpy_scale(prepared[k])
                data = scale_rows(indptr, data, scale)
                scale = None
            if data is not None and not (_array_kind(data) == kind
                                         and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>data)):
                data = np.ascontiguousarray(data, dtype=out_dtype)
            if scale is not None and not (_array_kind(scale) == kind
                                          and cnp.PyArray_ISALIGNED(<cnp.ndarray>scale)
                                          and scale.strides[0] % scale.itemsize == 0):
                # (a scale of the right dtype is read with its stride: a
                # broadcast scalar, stride 0, is not copied)
                scale = _numpy_scale(prepared[k])  # (in the scale's own dtype)
                scale = np.ascontiguousarray(scale, dtype=out_dtype)
            prepared[k][2] = data
            prepared[k][3] = scale

    # row ranges for worker threads, each writing from the sum of the terms'
    # entries in earlier rows (so the output must have room for all of them)
    cdef Py_ssize_t n_parts = 1
    if _threads > 1 and bound >= 2 * PARALLEL_ENTRIES and nr > 1 and bound == total:
        n_parts = min(<Py_ssize_t>_threads, <Py_ssize_t>(bound // PARALLEL_ENTRIES), nr)
    splits = _balanced_splits(prepared, nr, n_parts, total) if n_parts > 1 else []
    if splits and not _cursors_valid(prepared, splits):
        splits = []  # (one part: its loop finds and reports the bad indptr)
    n_parts = len(splits) + 1
    segments, seg_start, seg_terms = _row_segments(
        [(t[4], t[5]) for t in prepared], nr, stacked, splits)
    first_rows = np.array([t[4] for t in prepared], dtype=INDEX_DTYPE)
    part_segments = np.searchsorted(segments, [0] + splits + [nr])

    out_index = np.int32 if int32 else INDEX_DTYPE
    out_indptr = np.empty(nr + 1, dtype=out_index)
    out_indices = np.empty(bound, dtype=out_index)
    out_data = np.empty(bound, dtype=out_dtype) if values else None

    cdef Py_ssize_t slots = n_terms if n_terms > 0 else 1
    cdef Py_ssize_t q
    cdef int64_t row, start, shift, r
    cdef Term* ts = <Term*>malloc(slots * sizeof(Term))
    cdef MergePart* parts = <MergePart*>calloc(n_parts, sizeof(MergePart))
    cdef MergePart* p
    cdef void* od = _ptr(out_data)
    cdef char* oix = <char*>_ptr(out_indices)
    cdef char* odc = <char*>od
    cdef size_t ixsize = 4 if int32 else 8
    cdef size_t dsize = out_dtype.itemsize if values else 0
    cdef int32_t* oip32 = <int32_t*>_ptr(out_indptr)
    cdef int64_t* oip64 = <int64_t*>_ptr(out_indptr)
    try:
        if ts == NULL or parts == NULL:
            raise MemoryError()
        for k in range(n_terms):
            ts[k].indptr = <const int64_t*>_ptr(prepared[k][0])
            ts[k].indices = <const int64_t*>_ptr(prepared[k][1])
            ts[k].data = _ptr(prepared[k][2])
            ts[k].scale = _ptr(prepared[k][3])
            ts[k].scale_step = 0
            ts[k].factor = prepared[k][7]
            ts[k].scale2 = _ptr(prepared[k][8])
            if prepared[k][3] is not None:
                ts[k].scale_step = prepared[k][3].strides[0] // prepared[k][3].itemsize
            ts[k].nnz = prepared[k][1].shape[0]
            ts[k].mode = _term_mode(prepared[k][2], prepared[k][3], kind)
            ts[k].holes = prepared[k][6]
        for q in range(n_parts):
            p = &parts[q]
            p.active = <Term*>malloc(slots * sizeof(Term))
            p.cursors = <int64_t*>malloc(slots * sizeof(int64_t))
            p.st = <MergeState*>malloc(sizeof(MergeState))
            if p.st != NULL:
                p.st.los = <int64_t*>malloc(slots * sizeof(int64_t))
                p.st.his = <int64_t*>malloc(slots * sizeof(int64_t))
            if (p.active == NULL or p.cursors == NULL or p.st == NULL or p.st.los == NULL
                    or p.st.his == NULL):
                raise MemoryError()
            p.kind = kind
            p.int32 = int32
            p.values = values
            p.n_rows = nr
            p.n_cols = nc
            p.n_terms = n_terms
            p.terms = ts
            p.first_rows = <const int64_t*>_ptr(first_rows)
            p.s0 = part_segments[q]
            p.s1 = part_segments[q + 1]
            p.seg_rows = <const int64_t*>_ptr(segments)
            p.seg_start = <const int64_t*>_ptr(seg_start)
            p.seg_terms = <const int64_t*>_ptr(seg_terms)
            p.out_indptr = _ptr(out_indptr)
            p.out_indices = oix
            p.out_data = od
            # each term's entries before the part's first row: its cursors, and
            # their sum bounds the output before it (the part writes from there)
            row = 0 if q == 0 else splits[q - 1]
            start = 0
            for k in range(n_terms):
                p.cursors[k] = _cursor_at(prepared[k], row)
                start += p.cursors[k]
            p.start = start
        for q in range(n_parts):
            parts[q].st.cap = parts[q + 1].start if q + 1 < n_parts else bound
        if int32:
            oip32[0] = 0
        else:
            oip64[0] = 0
        _run_in_threads([_PartRunner.of(_run_part, &parts[q]) for q in range(n_parts)])
        # the parts, one after the other: close the gaps their bounds left
        nnz = parts[0].end
        for q in range(1, n_parts):
            if nnz < 0:
                break
            p = &parts[q]
            if p.end < 0:
                nnz = p.end
                break
            shift = p.start - nnz
            if shift:
                memmove(oix + nnz * ixsize, oix + p.start * ixsize,
                        (p.end - p.start) * ixsize)
                if values:
                    memmove(odc + nnz * dsize, odc + p.start * dsize,
                            (p.end - p.start) * dsize)
                for r in range(splits[q - 1] + 1,
                               splits[q] + 1 if q + 1 < n_parts else nr + 1):
                    if int32:
                        oip32[r] -= shift
                    else:
                        oip64[r] -= shift
            nnz += p.end - p.start
    finally:
        # (the parts' threads are done: _run_in_threads waited for them)
        if parts != NULL:
            for q in range(n_parts):
                free(parts[q].active)
                free(parts[q].cursors)
                if parts[q].st != NULL:
                    free(parts[q].st.los)
                    free(parts[q].st.his)
                free(parts[q].st)
                _free_dense(&parts[q].dense)
        free(parts)
        free(ts)
    if nnz == -2:
        raise MemoryError("merge_scaled: no memory for a dense row of %d columns" % nc)
    if nnz < 0:
        _validate_terms(prepared, nc)
        raise ValueError("merge_scaled: invalid CSR input")  # not reached
    return out_indptr, _trim(out_indices, nnz), _trim(out_data, nnz)


cdef inline int64_t _cursor_at(list term, int64_t row):
    """A prepared term's entries in the rows before ``row`` of the result: its
    indptr at that row, clamped to the term's own rows."""
    cdef int64_t r = min(max(row - <int64_t>term[4], 0), <int64_t>term[5])
    return (<const int64_t*>_ptr(term[0]))[r]


cdef int64_t _entries_before(list prepared, int64_t row):
    """The terms' entries in the rows before ``row`` (of the result)."""
    cdef int64_t count = 0
    for t in prepared:
        count += _cursor_at(t, row)
    return count


cdef bint _cursors_valid(list prepared, list splits):
    """Whether every term's indptr at the split rows lies within its entries and
    does not decrease from split to split: the parts start from these cursors,
    and the loops check each row's step from there on (by induction, as one
    loop does from ``indptr[0] == 0``)."""
    cdef int64_t nnz_k, cursor, previous
    for t in prepared:
        nnz_k = t[1].shape[0]
        previous = 0
        for row in splits:
            cursor = _cursor_at(t, row)
            if cursor < previous or cursor > nnz_k:
                return False
            previous = cursor
    return True


cdef list _balanced_splits(list prepared, int64_t nr, Py_ssize_t n_parts, int64_t total):
    """Rows that split the merge into ``n_parts`` ranges of about equal entries
    (stacked blocks of different widths make equal rows unequal work); distinct,
    increasing, inside ``(0, nr)``."""
    cdef int64_t lo, hi, mid, goal, last = 0
    cdef Py_ssize_t q
    splits = []
    for q in range(1, n_parts):
        goal = total * q // n_parts
        lo = last + 1
        hi = nr - (n_parts - q)      # (room for the later splits)
        if lo > hi:
            break
        while lo < hi:  # the first row with at least goal entries before it
            mid = (lo + hi) // 2
            if _entries_before(prepared, mid) < goal:
                lo = mid + 1
            else:
                hi = mid
        splits.append(lo)
        last = lo
    return splits


def _numpy_scale(prepared_term):
    """A prepared term's row scale with its second scale and its factor multiplied
    in by numpy, as the loops would round them (``(d * c) * factor``); the term
    then has neither."""
    scale = prepared_term[3]
    if prepared_term[8] is not None:
        scale = scale * prepared_term[8]
        prepared_term[8] = None
    if prepared_term[7] != 1.0:
        scale = scale * prepared_term[7]
        prepared_term[7] = 1.0
    return scale


cdef int _term_mode(data, scale, int kind):
    if scale is None:
        return ONES if data is None else DATA
    if data is not None:
        return DATA_SCALE
    # 1 * x == x exactly for reals; complex scales go through the formula
    return SCALE if kind == F32 or kind == F64 else ONES_SCALE


cdef _validate_terms(prepared, int64_t nc):
    """Raise the error of the first invalid indptr or column index of the terms."""
    for k, t in enumerate(prepared):
        name = "merge_scaled term %d" % k
        _check_indptr(t[0], t[5], t[1].shape[0], name)
        # (a selection's empty rows are columns of -1)
        _check_range(t[1], -1 if t[6] else 0, nc, name + " column indices")



cdef _check_gather_rows(rows, int64_t n_src):
    """Raise the reference's error for row numbers outside ``[-1, n_src)``:
    ``ValueError`` below -1, ``RowIndexError`` (an ``IndexError`` and a
    ``ValueError``) past the end."""
    if rows.shape[0] == 0:
        return
    if rows.min() < -1:
        raise ValueError("gather_rows: row indices must be >= -1")
    if rows.max() >= n_src:
        raise _reference.RowIndexError("gather_rows: row %d is out of range for %d rows"
                         % (rows.max(), n_src))


def gather_rows(indptr, indices, data, rows):
    """Rows ``rows`` of a CSR matrix, stacked; a row index of ``-1`` gives an empty row.

    Contract of :func:`sparsegrad._fast._reference.gather_rows`: ``rows`` in
    ``[-1, n_rows)``, repeats allowed; ``data=None`` gives ``None`` data.
    One pass for the row pointers (checking the rows and their extents: the
    source rows that are not gathered are not read), one copying the rows,
    runs of consecutive source rows in one piece.  Value dtypes other than
    float32/64 and complex64/128 are handed to the reference kernel.
    """
    cdef int64_t n_src, n_out, nnz, status
    cdef int kind = F64
    indptr = _as_index(indptr, "indptr")
    indices = _as_index(indices, "indices")
    rows = _as_index(rows, "rows")
    if indptr.shape[0] < 1:
        raise ValueError("indptr must have at least one entry")
    n_src = indptr.shape[0] - 1
    # O(1) here; the extents of the gathered rows are checked as they are read
    _check_indptr_ends(indptr, n_src, indices.shape[0], "gather_rows source")
    if data is not None:
        data = _as_values(data, indices.shape[0], "data")
        kind = _kind(data.dtype)
        if kind < 0:
            _check_gather_rows(rows, n_src)
            _check_indptr(indptr, n_src, indices.shape[0], "gather_rows source")
            return _reference.gather_rows(indptr, indices, data, rows)
        data = np.ascontiguousarray(data)
    n_out = rows.shape[0]
    out_indptr = np.empty(n_out + 1, dtype=INDEX_DTYPE)
    cdef const int64_t* r = <const int64_t*>_ptr(rows)
    cdef const int64_t* ip = <const int64_t*>_ptr(indptr)
    cdef const int64_t* ix = <const int64_t*>_ptr(indices)
    cdef void* d = _ptr(data)
    cdef int64_t* oip = <int64_t*>_ptr(out_indptr)
    cdef int64_t nnz_src = indices.shape[0]
    with nogil:
        status = _gather_indptr(n_out, r, n_src, ip, nnz_src, oip)
    if status < 0:
        _check_gather_rows(rows, n_src)
        _check_indptr(indptr, n_src, indices.shape[0], "gather_rows source")
        raise ValueError("gather_rows: invalid input")  # not reached
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
    out_data = None
    if values:
        out_data = np.empty(bound, dtype=out_dtype)
    cdef void* ad = _ptr(a_data)
    cdef void* bd = _ptr(b_data)
    cdef int64_t* oip = <int64_t*>_ptr(out_indptr)
    cdef int64_t* oix = <int64_t*>_ptr(out_indices)
    cdef void* od = _ptr(out_data)
    cdef Dense dense
    dense.marker = NULL
    dense.acc = NULL
    try:
        with nogil:
            if kind == F32:
                nnz = _matmul_loop[float](n_rows, nc, aip, aix, <const float*>ad, bip, bix,
                                          <const float*>bd, values, &dense, oip, oix,
                                          <float*>od)
            elif kind == F64:
                nnz = _matmul_loop[double](n_rows, nc, aip, aix, <const double*>ad, bip,
                                           bix, <const double*>bd, values, &dense, oip,
                                           oix, <double*>od)
            elif kind == C64:
                nnz = _matmul_loop[complex64_t](n_rows, nc, aip, aix,
                                                <const complex64_t*>ad, bip, bix,
                                                <const complex64_t*>bd, values, &dense,
                                                oip, oix, <complex64_t*>od)
            else:
                nnz = _matmul_loop[complex128_t](n_rows, nc, aip, aix,
                                                 <const complex128_t*>ad, bip, bix,
                                                 <const complex128_t*>bd, values, &dense,
                                                 oip, oix, <complex128_t*>od)
    finally:
        _free_dense(&dense)
    if nnz < 0:
        raise MemoryError("matmul: no memory for a dense row of %d columns" % nc)
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


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _selection_loop(int64_t n, const int64_t* columns, int64_t* indptr,
                             int64_t* indices) noexcept nogil:
    """Fill the CSR arrays of a selection; the number of entries, or ``-1 - row`` of a bad column."""
    cdef int64_t i, k = 0, column
    indptr[0] = 0
    for i in range(n):
        column = columns[i]
        if column >= 0:
            indices[k] = column
            k += 1
        elif column != -1:
            return -1 - i
        indptr[i + 1] = k
    return k


def selection_csr(columns):
    """``indptr, indices`` of the selection matrix whose row ``r`` holds column ``columns[r]``.

    Contract of :func:`sparsegrad._fast._reference.selection_csr`: one pass,
    no temporaries; a column below ``-1`` raises ``ValueError``.
    """
    columns = _as_index(columns, "selection_csr columns")
    cdef int64_t n = columns.shape[0], k
    out_indptr = np.empty(n + 1, dtype=INDEX_DTYPE)
    out_indices = np.empty(n, dtype=INDEX_DTYPE)
    cdef const int64_t* c = <const int64_t*>_ptr(columns)
    cdef int64_t* ip = <int64_t*>_ptr(out_indptr)
    cdef int64_t* ix = <int64_t*>_ptr(out_indices)
    with nogil:
        k = _selection_loop(n, c, ip, ix)
    if k < 0:
        raise ValueError("selection_csr: columns must be >= -1, got %d at row %d"
                         % (columns[-1 - k], -1 - k))
    return out_indptr, _trim(out_indices, k)



ctypedef fused real_t:
    float
    double


cdef inline bint _same_real_vectors(tuple arrays, Py_ssize_t n):
    """Every array a C-contiguous, native float32 or float64 ndarray of length
    ``n``, all of one dtype (the compiled loops' case)."""
    cdef cnp.ndarray a
    cdef int typenum = -1
    for x in arrays:
        if type(x) is not np.ndarray:
            return False
        a = <cnp.ndarray>x
        if (cnp.PyArray_NDIM(a) != 1 or cnp.PyArray_DIM(a, 0) != n
                or not cnp.PyArray_ISCARRAY_RO(a) or not cnp.PyArray_ISNOTSWAPPED(a)):
            return False
        if typenum == -1:
            typenum = cnp.PyArray_TYPE(a)
            if typenum != cnp.NPY_FLOAT64 and typenum != cnp.NPY_FLOAT32:
                return False
        elif cnp.PyArray_TYPE(a) != typenum:
            return False
    return True


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _multiply_add_loop(Py_ssize_t n, const real_t* a, const real_t* b, const real_t* c,
                             real_t* out, Py_ssize_t b_step, Py_ssize_t c_step) noexcept nogil:
    cdef Py_ssize_t i
    cdef real_t product
    for i in range(n):
        product = a[i] * b[i * b_step]  # (rounded before the sum: built without FMA contraction)
        out[i] = product + c[i * c_step]


def multiply_add(a, b, c):
    """``a * b + c`` in one pass.

    Contract of :func:`sparsegrad._fast._reference.multiply_add` (numpy's
    rounding: the product, then the sum).  Other than 1-d C-contiguous
    float32/float64 arrays of one dtype and length (``b``, ``c`` also numpy
    scalars of that dtype) go to the reference.
    """
    cdef Py_ssize_t n = len(a)
    cdef Py_ssize_t b_step = 1, c_step = 1
    if not _same_real_vectors((a,), n):
        return _reference.multiply_add(a, b, c)
    given = (b, c)
    if type(b) is a.dtype.type:  # (a scalar: read with step 0)
        b, b_step = np.array([b]), 0
    if type(c) is a.dtype.type:
        c, c_step = np.array([c]), 0
    if not ((not b_step or _same_real_vectors((a, b), n))
            and (not c_step or _same_real_vectors((a, c), n))):
        return _reference.multiply_add(a, *given)
    out = np.empty(n, dtype=a.dtype)
    cdef void* pa = _ptr(a)
    cdef void* pb = _ptr(b)
    cdef void* pc = _ptr(c)
    cdef void* po = _ptr(out)
    with nogil:
        if cnp.PyArray_TYPE(<cnp.ndarray>out) == cnp.NPY_FLOAT64:
            _multiply_add_loop[double](n, <const double*>pa, <const double*>pb,
                                       <const double*>pc, <double*>po, b_step, c_step)
        else:
            _multiply_add_loop[float](n, <const float*>pa, <const float*>pb,
                                      <const float*>pc, <float*>po, b_step, c_step)
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _sum_of_products_loop(Py_ssize_t n, const real_t* a, const real_t* b, real_t s,
                                const real_t* c, const real_t* e, real_t t,
                                real_t* out) noexcept nogil:
    """One loop per pair of products present, each simple enough to vectorise; an
    absent scale is 1 (``x * 1 == x`` exactly); each operation rounded as numpy's
    passes round it (built without FMA contraction)."""
    cdef Py_ssize_t i
    if b != NULL and e != NULL:
        for i in range(n):
            out[i] = (a[i] * b[i]) * s + (c[i] * e[i]) * t
    elif b != NULL:
        for i in range(n):
            out[i] = (a[i] * b[i]) * s + c[i] * t
    elif e != NULL:
        for i in range(n):
            out[i] = a[i] * s + (c[i] * e[i]) * t
    else:
        for i in range(n):
            out[i] = a[i] * s + c[i] * t


def sum_of_products(a, b, s, c, e, t):
    """``(a * b) * s + (c * e) * t`` in one pass.

    Contract of :func:`sparsegrad._fast._reference.sum_of_products` (numpy's
    rounding).  Other than 1-d C-contiguous float32/float64 arrays of one dtype
    and length, and scalars of that dtype, go to the reference.
    """
    if type(a) is not np.ndarray:
        return _reference.sum_of_products(a, b, s, c, e, t)
    cdef Py_ssize_t n = len(a)
    arrays = tuple(x for x in (a, b, c, e) if x is not None)
    number = a.dtype.type
    if not (_same_real_vectors(arrays, n) and (s is None or type(s) is number)
            and (t is None or type(t) is number)):
        return _reference.sum_of_products(a, b, s, c, e, t)
    out = np.empty(n, dtype=a.dtype)
    cdef void* pa = _ptr(a)
    cdef void* pb = _ptr(b)
    cdef void* pc = _ptr(c)
    cdef void* pe = _ptr(e)
    cdef void* po = _ptr(out)
    cdef double s64 = 1.0 if s is None else s, t64 = 1.0 if t is None else t
    cdef float s32 = 1.0 if s is None else s, t32 = 1.0 if t is None else t
    with nogil:
        if cnp.PyArray_TYPE(<cnp.ndarray>out) == cnp.NPY_FLOAT64:
            _sum_of_products_loop[double](n, <const double*>pa, <const double*>pb, s64,
                                          <const double*>pc, <const double*>pe, t64,
                                          <double*>po)
        else:
            _sum_of_products_loop[float](n, <const float*>pa, <const float*>pb, s32,
                                         <const float*>pc, <const float*>pe, t32,
                                         <float*>po)
    return out


ctypedef fused gathered_t:
    float
    double
    int64_t


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _take_loop(Py_ssize_t n, Py_ssize_t m, const gathered_t* a,
                        const gathered_t* b, const int64_t* rows,
                        gathered_t* out) noexcept nogil:
    """``out = a[rows]``, or ``(a * b)[rows]`` when ``b`` is not NULL.  Returns -1,
    or the first position whose row is out of range."""
    cdef Py_ssize_t i
    cdef int64_t r
    for i in range(n):
        r = rows[i]
        if r < 0:
            r += m
        if <uint64_t>r >= <uint64_t>m:
            return i
        out[i] = a[r] if b == NULL else a[r] * b[r]
    return -1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _take_runs_loop(Py_ssize_t n_runs, Py_ssize_t m, const gathered_t* a,
                         const gathered_t* b, const int64_t* rows, const int64_t* starts,
                         gathered_t* out) noexcept nogil:
    """:func:`_take_loop` run by run (``starts`` of :func:`index_runs`, checked to
    fit: see :func:`_runs_fit`): 0, or 1 for a run reaching past ``m`` (nothing
    is reported: :func:`_take_any` gathers again by rows, which names the entry)."""
    cdef Py_ssize_t j, i, s, e
    cdef int64_t first
    for j in range(n_runs):
        s = starts[j]
        e = starts[j + 1]
        first = rows[s]
        if first < 0 or rows[e - 1] >= m:
            return 1
        if b == NULL:
            memcpy(out + s, a + first, <size_t>(e - s) * sizeof(gathered_t))
        else:
            first -= s
            for i in range(s, e):
                out[i] = a[first + i] * b[first + i]
    return 0


cdef int64_t _take_any(Py_ssize_t n, Py_ssize_t m, const gathered_t* a, const gathered_t* b,
                       const int64_t* rows, Py_ssize_t n_runs, const int64_t* starts,
                       gathered_t* out) noexcept nogil:
    """:func:`_take_loop` by the runs when there are any (``n_runs >= 0``) and
    none reaches past ``m``, else by the rows (which names the entry out of
    range): -1, or the first position whose row is out of range."""
    if n_runs >= 0 and not _take_runs_loop(n_runs, m, a, b, rows, starts, out):
        return -1
    return _take_loop(n, m, a, b, rows, out)


cdef Py_ssize_t _runs_fit(object rows, object runs, str name) except -1:
    """The number of runs in ``runs`` (starts of :func:`index_runs` of ``rows``),
    after checking that they fit ``rows``: from 0 to ``len(rows)``, increasing,
    each run's last row its first plus its length less one (ValueError)."""
    if not _is_index_array(runs) or cnp.PyArray_DIM(<cnp.ndarray>runs, 0) < 2:
        raise ValueError("%s: the runs do not fit the rows (index_runs of other rows?)"
                         % name)
    cdef Py_ssize_t n_runs = cnp.PyArray_DIM(<cnp.ndarray>runs, 0) - 1, j
    cdef Py_ssize_t n = cnp.PyArray_DIM(<cnp.ndarray>rows, 0)
    cdef const int64_t* st = <const int64_t*>_ptr(runs)
    cdef const int64_t* r = <const int64_t*>_ptr(rows)
    cdef bint fit = st[0] == 0 and st[n_runs] == n
    with nogil:
        j = 0
        while fit and j < n_runs:
            # (the rows may be any numbers: compared modulo 2^64, as numpy's int64 wraps)
            fit = (st[j] < st[j + 1] <= n and <uint64_t>r[st[j + 1] - 1] - <uint64_t>r[st[j]]
                   == <uint64_t>(st[j + 1] - 1 - st[j]))
            j += 1
    if not fit:
        raise ValueError("%s: the runs do not fit the rows (index_runs of other rows?)"
                         % name)
    return n_runs


def index_runs(rows, min_run=_reference.MIN_RUN):
    """Where the runs of consecutive row numbers of ``rows`` start, or None.

    Contract of :func:`sparsegrad._fast._reference.index_runs`; one pass, which
    stops at the first negative row or the first run past the limit.  Other
    than 1-d C-contiguous int64 rows go to the reference.
    """
    min_run = operator.index(min_run)
    if not _is_index_array(rows) or min_run < 1:
        return _reference.index_runs(rows, min_run)  # (or its error)
    cdef Py_ssize_t n = cnp.PyArray_DIM(<cnp.ndarray>rows, 0), i, k = 0
    cdef Py_ssize_t limit = n // min_run
    if n == 0 or limit < 1:
        return None
    starts = np.empty(limit + 1, dtype=np.int64)
    cdef int64_t* st = <int64_t*>_ptr(starts)
    cdef const int64_t* r = <const int64_t*>_ptr(rows)
    with nogil:
        if r[0] >= 0:
            st[0] = 0
            k = 1
            for i in range(1, n):
                if r[i] < 0:
                    k = -1
                    break
                if r[i] - r[i - 1] != 1:  # (both >= 0: no overflow)
                    if k == limit:
                        k = -1
                        break
                    st[k] = i
                    k += 1
        else:
            k = -1
    if k < 0:
        return None
    st[k] = n
    return starts[:k + 1].copy()


def take_product(a, b, rows, runs=None):
    """``(a * b)[rows]`` in one pass over ``rows`` (or over ``runs``).

    Contract of :func:`sparsegrad._fast._reference.take_product` (numpy's
    indexing: negative rows from the end, ``IndexError`` out of range).  Other
    than 1-d C-contiguous float32/float64 arrays of one dtype and int64 rows
    go to the reference.
    """
    cdef Py_ssize_t m = len(a)
    if not (_same_real_vectors((a, b), m) and _is_index_array(rows)):
        return _reference.take_product(a, b, rows, runs)
    cdef Py_ssize_t n_runs = -1 if runs is None else _runs_fit(rows, runs, "take_product")
    cdef Py_ssize_t n = cnp.PyArray_DIM(<cnp.ndarray>rows, 0)
    out = np.empty(n, dtype=a.dtype)
    cdef void* pa = _ptr(a)
    cdef void* pb = _ptr(b)
    cdef const int64_t* pr = <const int64_t*>_ptr(rows)
    cdef const int64_t* ps = <const int64_t*>_ptr(runs)
    cdef void* po = _ptr(out)
    cdef int64_t bad
    with nogil:
        if cnp.PyArray_TYPE(<cnp.ndarray>out) == cnp.NPY_FLOAT64:
            bad = _take_any[double](n, m, <const double*>pa, <const double*>pb, pr, n_runs,
                                    ps, <double*>po)
        else:
            bad = _take_any[float](n, m, <const float*>pa, <const float*>pb, pr, n_runs,
                                   ps, <float*>po)
    if bad >= 0:
        raise IndexError("index %d is out of bounds for axis 0 with size %d"
                         % (rows[bad], m))
    return out


def take(a, rows, runs=None):
    """``a[rows]`` in one pass over ``rows``, or a block copy per run of ``runs``.

    Contract of :func:`sparsegrad._fast._reference.take` (numpy's indexing:
    negative rows from the end, ``IndexError`` out of range).  Other than a
    1-d C-contiguous float32, float64 or int64 array and int64 rows go to the
    reference.  numpy's own gather checks and converts every index through a
    general iterator; this loop is a third faster on the stencils' gathers,
    and a copy by runs (an index array made by ``np.roll``) 2.5x faster again.
    """
    if not (type(a) is np.ndarray and _is_index_array(rows)):
        return _reference.take(a, rows, runs)
    cdef cnp.ndarray array = <cnp.ndarray>a
    cdef int typenum = cnp.PyArray_TYPE(array)
    if (cnp.PyArray_NDIM(array) != 1 or not cnp.PyArray_ISCARRAY_RO(array)
            or not cnp.PyArray_ISNOTSWAPPED(array)
            or typenum not in (cnp.NPY_FLOAT64, cnp.NPY_FLOAT32, cnp.NPY_INT64)):
        return _reference.take(a, rows, runs)
    cdef Py_ssize_t n_runs = -1 if runs is None else _runs_fit(rows, runs, "take")
    cdef Py_ssize_t m = cnp.PyArray_DIM(array, 0)
    cdef Py_ssize_t n = cnp.PyArray_DIM(<cnp.ndarray>rows, 0)
    out = np.empty(n, dtype=a.dtype)
    cdef void* pa = _ptr(a)
    cdef const int64_t* pr = <const int64_t*>_ptr(rows)
    cdef const int64_t* ps = <const int64_t*>_ptr(runs)
    cdef void* po = _ptr(out)
    cdef int64_t bad
    with nogil:
        if typenum == cnp.NPY_FLOAT64:
            bad = _take_any[double](n, m, <const double*>pa, NULL, pr, n_runs, ps,
                                    <double*>po)
        elif typenum == cnp.NPY_FLOAT32:
            bad = _take_any[float](n, m, <const float*>pa, NULL, pr, n_runs, ps, <float*>po)
        else:
            bad = _take_any[int64_t](n, m, <const int64_t*>pa, NULL, pr, n_runs, ps,
                                     <int64_t*>po)
    if bad >= 0:
        raise IndexError("index %d is out of bounds for axis 0 with size %d"
                         % (rows[bad], m))
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
cdef bint _same_widened(Py_ssize_t n, const int32_t* a, const int64_t* b) noexcept nogil:
    cdef Py_ssize_t i
    cdef uint64_t diff = 0
    for i in range(n):
        diff |= <uint64_t>(<int64_t>a[i] ^ b[i])
    return diff == 0


def same_index(a, b):
    """Whether two index arrays hold the same numbers.

    Contract of :func:`sparsegrad._fast._reference.same_index`.  Two 1-d
    C-contiguous arrays of one of int32 and int64 are compared byte by byte
    (``memcmp``: integers of one dtype are equal exactly when their bytes
    are), an int32 one (a scipy matrix's indices) against an int64 one
    number by number, with no temporary; everything else goes to the
    reference.
    """
    cdef Py_ssize_t n
    cdef const void* pa
    cdef const void* pb
    cdef bint same
    cdef int kind_a, kind_b
    if _is_vector_of(a, cnp.NPY_INT32) and _is_index_array(b):
        a, b = b, a
    if not ((_is_index_array(a) or _is_vector_of(a, cnp.NPY_INT32))
            and (_is_index_array(b) or _is_vector_of(b, cnp.NPY_INT32))):
        return _reference.same_index(a, b)
    n = cnp.PyArray_DIM(<cnp.ndarray>a, 0)
    if cnp.PyArray_DIM(<cnp.ndarray>b, 0) != n:
        return False
    kind_a = cnp.PyArray_TYPE(<cnp.ndarray>a)
    kind_b = cnp.PyArray_TYPE(<cnp.ndarray>b)
    pa = _ptr(a)
    pb = _ptr(b)
    with nogil:
        if kind_a == kind_b:
            same = memcmp(pa, pb, <size_t>n * (sizeof(int64_t) if kind_a == cnp.NPY_INT64
                                                else sizeof(int32_t))) == 0
        else:  # (a is the int64 one)
            same = _same_widened(n, <const int32_t*>pb, <const int64_t*>pa)
    return same

# ---------------------------------------------------------------------------
# Merge plans: the values of a repeated merge, without merging again
# ---------------------------------------------------------------------------

ctypedef fused code_t:
    int32_t
    int64_t


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _plan_term(code_t* codes, const oindex_t* out_indptr, const oindex_t* out_indices,
                        const int64_t* ip, const int64_t* ix, int64_t r_begin, int64_t r_end,
                        int64_t first, uint8_t* placed) noexcept nogil:
    """Codes of the local rows ``r_begin .. r_end - 1`` of one term of
    :func:`merge_plan` (``ip`` NULL: a selection by its columns ``ix``);
    ``placed`` has a byte per place, set once a term's entry is placed there
    (a byte, not a bit: parts of the rows in threads never share one).
    Returns -1, or the first entry outside the pattern or not after the
    previous entry of its row (a column twice in a row).

    An entry is looked for first where the last row's first entry was, or
    just after the row's previous entry (a stencil's term keeps its place in
    the rows), then by a binary search of its merged row."""
    cdef int64_t r, e, e0, e1, lo, hi, a, b, mid, c, rank = 0, previous
    for r in range(r_begin, r_end):
        lo = out_indptr[first + r]
        hi = out_indptr[first + r + 1]
        if ip == NULL:
            e0 = r
            e1 = r + 1
        else:
            e0 = ip[r]
            e1 = ip[r + 1]
        a = lo + rank
        previous = -1
        for e in range(e0, e1):
            c = ix[e]
            if ip == NULL and c == -1:
                codes[e] = -1
                continue
            if c <= previous:  # (canonical rows: each place once per term)
                return e
            previous = c
            if not (a < hi and out_indices[a] == c):
                a = lo
                b = hi
                while a < b:
                    mid = (a + b) >> 1
                    if out_indices[mid] < c:
                        a = mid + 1
                    else:
                        b = mid
                if a >= hi or out_indices[a] != c:
                    return e
            if e == e0:
                rank = a - lo
            codes[e] = <code_t>(2 * a + placed[a])
            placed[a] = 1
            a += 1
    return -1


cdef int64_t _plan_kind(void* codes, bint wide, const void* out_indptr,
                        const void* out_indices, bint int32, const int64_t* ip,
                        const int64_t* ix, int64_t r_begin, int64_t r_end, int64_t first,
                        uint8_t* placed) noexcept nogil:
    """:func:`_plan_term` for the dtypes of the codes and of the merged pattern."""
    if int32:
        if wide:
            return _plan_term(<int64_t*>codes, <const int32_t*>out_indptr,
                              <const int32_t*>out_indices, ip, ix, r_begin, r_end, first,
                              placed)
        return _plan_term(<int32_t*>codes, <const int32_t*>out_indptr,
                          <const int32_t*>out_indices, ip, ix, r_begin, r_end, first, placed)
    if wide:
        return _plan_term(<int64_t*>codes, <const int64_t*>out_indptr,
                          <const int64_t*>out_indices, ip, ix, r_begin, r_end, first, placed)
    return _plan_term(<int32_t*>codes, <const int64_t*>out_indptr,
                      <const int64_t*>out_indices, ip, ix, r_begin, r_end, first, placed)


cdef struct PlanTerm:
    const int64_t* indptr     # NULL for a selection (one column per row)
    const int64_t* indices
    void* codes
    int64_t first
    int64_t m


cdef struct PlanPart:
    const PlanTerm* terms
    Py_ssize_t n_terms
    int64_t r0, r1            # its rows of the merged pattern
    const void* out_indptr
    const void* out_indices
    bint int32                # the pattern's index dtype (else int64)
    bint wide                 # int64 codes (else int32)
    uint8_t* placed
    int64_t bad               # -1, or an entry outside the pattern was met


cdef void _plan_part(void* part) noexcept nogil:
    """The codes of every term's entries in rows ``p.r0 .. p.r1 - 1``, the terms
    in order (a place's first term is found as in one pass: the places of
    these rows belong to this part alone)."""
    cdef PlanPart* p = <PlanPart*>part
    cdef const PlanTerm* t
    cdef int64_t a, b
    cdef Py_ssize_t k
    p.bad = -1
    for k in range(p.n_terms):
        t = &p.terms[k]
        a = max(p.r0 - t.first, 0)
        b = min(p.r1 - t.first, t.m)
        if a < b and _plan_kind(t.codes, p.wide, p.out_indptr, p.out_indices, p.int32,
                                t.indptr, t.indices, a, b, t.first, p.placed) >= 0:
            p.bad = k
            return


cdef bint _is_pattern(object indptr, object indices):
    """``indptr, indices`` are what the plan loops read as they are: 1-d
    C-contiguous native ndarrays of one dtype, int32 or int64 (a merged pattern
    for scipy, or for sparsegrad's own matrices)."""
    if type(indptr) is not np.ndarray:
        return False
    cdef int typenum = cnp.PyArray_TYPE(<cnp.ndarray>indptr)
    return ((typenum == cnp.NPY_INT32 or typenum == cnp.NPY_INT64)
            and _is_vector_of(indptr, typenum) and _is_vector_of(indices, typenum)
            and cnp.PyArray_DIM(<cnp.ndarray>indptr, 0) >= 1)


cdef inline int64_t _index_at(object index, int64_t i):
    """Entry ``i`` of an int32 or int64 vector that :func:`_is_pattern` accepted."""
    cdef void* data = cnp.PyArray_DATA(<cnp.ndarray>index)
    if cnp.PyArray_TYPE(<cnp.ndarray>index) == cnp.NPY_INT32:
        return (<int32_t*>data)[i]
    return (<int64_t*>data)[i]


cdef list _row_parts(object indptr, int64_t nnz, int64_t n_rows):
    """Row bounds ``[0, ..., n_rows]`` of the parts of a fill or a plan over a
    pattern of ``nnz`` entries: one part per thread, of about equal entries,
    from half a merge's size on (measured on the fills of the benchmark
    problems at 300k-450k entries, 0.30-0.42 ms in two threads against
    0.45-0.68 ms in one, and no gain at 80k)."""
    cdef int64_t part_entries = max(PARALLEL_ENTRIES // 2, 1)
    cdef Py_ssize_t n_parts = 1
    if _threads > 1 and nnz >= 2 * part_entries and n_rows > 1:
        n_parts = min(<Py_ssize_t>_threads, <Py_ssize_t>(nnz // part_entries),
                      <Py_ssize_t>n_rows)
    if n_parts == 1:
        return [0, n_rows]
    # (the targets in indptr's dtype: another would convert all of indptr first)
    return [0] + [int(r) for r in np.searchsorted(indptr, np.array(
        [nnz * q // n_parts for q in range(1, n_parts)], dtype=indptr.dtype))] + [n_rows]


def merge_plan(indptr, indices, terms):
    """Where each entry of merge_scaled's terms lands in its result.

    Contract of :func:`sparsegrad._fast._reference.merge_plan`; one pass over
    the terms' entries (in parts of rows, in threads, for large patterns), each
    found by a binary search of its merged row (a merged pattern of int32 or
    int64 read as it is).
    """
    terms = list(terms)
    if not _is_pattern(indptr, indices):
        return _reference.merge_plan(indptr, indices, terms)
    cdef int64_t n_rows = indptr.shape[0] - 1, nnz = indices.shape[0]
    cdef bint int32 = indptr.dtype == np.int32
    if int(indptr[0]) != 0 or int(indptr[n_rows]) != nnz \
            or (n_rows and not bool((indptr[1:] >= indptr[:-1]).all())):
        raise ValueError("merge_plan: indptr must run from 0 to len(indices) "
                         "without decreasing")
    code_dtype = _reference._plan_code_dtype(nnz)
    cdef bint wide = code_dtype == INDEX_DTYPE
    cdef int64_t m, first
    cdef Py_ssize_t n_terms = len(terms), n_parts, q, k
    prepared = []  # (indptr or None, indices, codes, first, m): the arrays kept alive
    for k, term in enumerate(terms):
        term_indptr, term_indices, first_row = term
        name = "merge_plan term %d" % k
        term_indices = _as_index(term_indices, name + " indices")
        if term_indptr is None:
            m = term_indices.shape[0]
        else:
            term_indptr = _as_index(term_indptr, name + " indptr")
            m = term_indptr.shape[0] - 1
            if m < 0:
                raise ValueError("%s: indptr must have at least one entry" % name)
            _check_indptr(term_indptr, m, term_indices.shape[0], name)
        first = operator.index(first_row)
        if first < 0 or first > n_rows - m:
            raise ValueError("merge_plan: term %d of %d rows from row %d does not fit "
                             "in %d rows" % (k, m, first, n_rows))
        prepared.append((term_indptr, term_indices,
                         np.empty(term_indices.shape[0], dtype=code_dtype), first, m))
    # (threads as for a fill: parts of rows with their own places; measured on
    # Bratu 1000x1000, 5 M entries: 21 ms in one thread, 15 in two)
    bounds = _row_parts(indptr, nnz, n_rows)
    n_parts = len(bounds) - 1
    placed = np.zeros(nnz + 1, dtype=np.uint8)  # (+ 1: a buffer also for no entries)
    cdef PlanTerm* ts = <PlanTerm*>calloc(n_terms if n_terms else 1, sizeof(PlanTerm))
    cdef PlanPart* parts = <PlanPart*>calloc(n_parts, sizeof(PlanPart))
    cdef bint bad = False
    try:
        if ts == NULL or parts == NULL:
            raise MemoryError()
        for k in range(n_terms):
            term_indptr, term_indices, codes, first, m = prepared[k]
            ts[k].indptr = <const int64_t*>_ptr(term_indptr)
            ts[k].indices = <const int64_t*>_ptr(term_indices)
            ts[k].codes = _ptr(codes)
            ts[k].first = first
            ts[k].m = m
        for q in range(n_parts):
            parts[q].terms = ts
            parts[q].n_terms = n_terms
            parts[q].r0 = bounds[q]
            parts[q].r1 = bounds[q + 1]
            parts[q].out_indptr = _ptr(indptr)
            parts[q].out_indices = _ptr(indices)
            parts[q].int32 = int32
            parts[q].wide = wide
            parts[q].placed = <uint8_t*>_ptr(placed)
        _run_in_threads([_PartRunner.of(_plan_part, &parts[q]) for q in range(n_parts)])
        bad = any(parts[q].bad >= 0 for q in range(n_parts))
    finally:
        # (the parts' threads are done: _run_in_threads waited for them)
        free(ts)
        free(parts)
    if bad:
        return _reference.merge_plan(indptr, indices, terms)  # (raises, naming it)
    return [item[2] for item in prepared]


cdef struct FillTerm:
    Term term                 # indptr NULL for a selection (one code per row)
    const void* codes
    bint wide                 # int64 codes (else int32)
    int64_t first
    int64_t m


cdef struct FillPart:
    const FillTerm* terms
    Py_ssize_t n_terms
    int64_t r0, r1            # its rows of the result
    int64_t lo, hi            # the places of those rows
    double* out
    int64_t stores            # values stored (not added), or -1: a bad code
    # the copies of the pattern it makes: indptr[r0 + 1 .. r1], indices[lo .. hi - 1]
    const char* indptr_in
    char* indptr_out
    const char* indices_in
    char* indices_out
    size_t index_size


cdef inline int64_t _put(double* out, int64_t code, double v) noexcept nogil:
    """Store ``v`` at the place of a plan's ``code`` (1), or add it there (0)."""
    if code & 1:
        out[code >> 1] = out[code >> 1] + v
        return 0
    out[code >> 1] = v
    return 1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _fill_loop(formula_t* tag, const code_t* codes, const int64_t* ip,
                        int64_t a, int64_t b, int64_t lo, int64_t hi, double* out,
                        const double* dp, const double* sp, int64_t step,
                        const double* s2p, double fac) noexcept nogil:
    """Local rows ``a .. b - 1`` of one term (``ip`` NULL: a selection, one
    code per row, -1 for none) by the tag's formula: the values stored, or -1
    for a code that is invalid or points outside ``[lo, hi)``."""
    cdef int64_t r, e, e1, c, place, stores = 0
    cdef uint64_t width = <uint64_t>(hi - lo)
    if ip == NULL:
        for r in range(a, b):
            c = codes[r]
            if c < 0:
                if c == -1:
                    continue
                return -1
            place = c >> 1
            if <uint64_t>(place - lo) >= width:
                return -1
            stores += _put(out, c, _formula_value(tag, dp, sp, r, r, step, s2p, fac))
        return stores
    for r in range(a, b):
        e1 = ip[r + 1]
        for e in range(ip[r], e1):
            c = codes[e]
            place = c >> 1
            if c < 0 or <uint64_t>(place - lo) >= width:
                return -1
            stores += _put(out, c, _formula_value(tag, dp, sp, e, r, step, s2p, fac))
    return stores


cdef int64_t _fill_rows(const FillTerm* ft, const code_t* codes, int64_t a, int64_t b,
                        int64_t lo, int64_t hi, double* out) noexcept nogil:
    """:func:`_fill_loop` of one term with the loop of its formula."""
    cdef const Term* t = &ft.term
    cdef const double* dp = <const double*>t.data
    cdef const double* sp = <const double*>t.scale
    cdef const double* s2p = <const double*>t.scale2
    cdef int mode = t.mode
    if mode == ONES:
        return _fill_loop(<OnesTag*>NULL, codes, t.indptr, a, b, lo, hi, out, dp, sp,
                          t.scale_step, s2p, t.factor)
    if mode == DATA:
        return _fill_loop(<DataTag*>NULL, codes, t.indptr, a, b, lo, hi, out, dp, sp,
                          t.scale_step, s2p, t.factor)
    if mode == SCALE:
        return _fill_loop(<ScaleTag*>NULL, codes, t.indptr, a, b, lo, hi, out, dp, sp,
                          t.scale_step, s2p, t.factor)
    return _fill_loop(<DataScaleTag*>NULL, codes, t.indptr, a, b, lo, hi, out, dp, sp,
                      t.scale_step, s2p, t.factor)


cdef enum:
    FILL_BLOCK = 1024         # rows of the result filled by every term in turn


cdef void _fill_part(void* part) noexcept nogil:
    """Rows ``p.r0 .. p.r1 - 1`` of a :c:type:`FillPart`, a block of rows at a
    time, each block by the terms in order (so a place's values are summed in
    the order of the terms, while the block's part of ``out`` stays in cache);
    first the part's share of the pattern's copies."""
    cdef FillPart* p = <FillPart*>part
    cdef int64_t b0 = p.r0, b1, a, b, got, stores = 0
    cdef Py_ssize_t k
    cdef const FillTerm* ft
    cdef size_t size = p.index_size
    memcpy(p.indptr_out + (p.r0 + 1) * size, p.indptr_in + (p.r0 + 1) * size,
           (p.r1 - p.r0) * size)
    memcpy(p.indices_out + p.lo * size, p.indices_in + p.lo * size, (p.hi - p.lo) * size)
    while b0 < p.r1:
        b1 = b0 + FILL_BLOCK if p.r1 - b0 > FILL_BLOCK else p.r1
        for k in range(p.n_terms):
            ft = &p.terms[k]
            a = b0 - ft.first if b0 > ft.first else 0
            b = b1 - ft.first if b1 - ft.first < ft.m else ft.m
            if a >= b:
                continue
            if ft.wide:
                got = _fill_rows(ft, <const int64_t*>ft.codes, a, b, p.lo, p.hi, p.out)
            else:
                got = _fill_rows(ft, <const int32_t*>ft.codes, a, b, p.lo, p.hi, p.out)
            if got < 0:
                p.stores = -1
                return
            stores += got
        b0 = b1
    p.stores = stores


cdef object _fill_term(object term, object codes, int64_t nr):
    """``[indptr, data, scale, scale2, factor, first, m]`` of a term the compiled
    fill takes (float64 values, scales readable with their stride), or None."""
    n_items = len(term)
    if n_items not in (4, 5, 6):
        return None
    indptr, indices, data, scale = term[:4]
    first = operator.index(term[4]) if n_items >= 5 else 0
    factor = term[5] if n_items == 6 else 1.0
    if type(factor) is not float or not _is_index_array(indices):
        return None
    if indptr is not None and not _is_index_array(indptr):
        return None
    m = indices.shape[0] if indptr is None else indptr.shape[0] - 1
    if n_items == 4 and m != nr:
        return None
    if not ((_is_vector_of(codes, cnp.NPY_INT32) or _is_vector_of(codes, cnp.NPY_INT64))
            and cnp.PyArray_DIM(<cnp.ndarray>codes, 0)
            == cnp.PyArray_DIM(<cnp.ndarray>indices, 0)):
        return None
    scale2 = None
    if isinstance(scale, tuple):
        if len(scale) != 2:
            return None
        scale, scale2 = scale
        if not (_is_values(scale2, m) and _array_kind(scale2) == F64
                and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>scale2)
                and _is_values(scale, m) and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>scale)):
            return None
    if data is not None and not (indptr is not None and _is_values(data, indices.shape[0])
                                 and _array_kind(data) == F64
                                 and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>data)):
        return None
    if scale is not None and not (_is_values(scale, m) and _array_kind(scale) == F64
                                  and cnp.PyArray_ISALIGNED(<cnp.ndarray>scale)
                                  and cnp.PyArray_STRIDE(<cnp.ndarray>scale, 0) % 8 == 0):
        return None
    if factor != 1.0 and scale is None:
        return None
    return [indptr, data, scale, scale2, factor, first, m]


def fill_scaled(indptr, indices, terms, plan):
    """``merge_scaled`` of ``terms`` again, by a plan of :func:`merge_plan`.

    Contract of :func:`sparsegrad._fast._reference.fill_scaled`.  float64
    values (data, row scales and pairs of them, factors) are written by a
    loop over blocks of rows, every term in turn, in worker threads for large
    results (the rows split at equal places, each part copying its share of
    the pattern too); other dtypes go to the reference (whose complex
    products may differ from this module's merge in the last bit, as the
    merges do).  Every code is checked against the places of its rows before
    it is written, and the values stored are counted.
    """
    terms = list(terms)
    plan = list(plan)
    if not (_is_pattern(indptr, indices) and len(plan) == len(terms)):
        return _reference.fill_scaled(indptr, indices, terms, plan)
    cdef int64_t nr = indptr.shape[0] - 1
    cdef int64_t nnz = indices.shape[0]
    cdef Py_ssize_t k, q, n_terms = len(terms), n_parts
    if _index_at(indptr, 0) != 0 or _index_at(indptr, nr) != nnz:
        raise ValueError("fill_scaled: indptr must run from 0 to len(indices)")
    prepared = []
    for k in range(n_terms):
        item = _fill_term(terms[k], plan[k], nr)
        if item is None:
            return _reference.fill_scaled(indptr, indices, terms, plan)
        if item[5] < 0 or item[5] > nr - item[6]:
            raise ValueError("fill_scaled: term %d of %d rows from row %d does not fit "
                             "in %d rows" % (k, item[6], item[5], nr))
        if item[0] is not None:
            _check_indptr(item[0], item[6], terms[k][1].shape[0], "fill_scaled term %d" % k)
        prepared.append(item)
    bounds = _row_parts(indptr, nnz, nr)
    n_parts = len(bounds) - 1
    places = [_index_at(indptr, r) for r in bounds]
    if any(not 0 <= places[q] <= places[q + 1] <= nnz or bounds[q] > bounds[q + 1]
           for q in range(n_parts)):
        raise ValueError("fill_scaled: indptr decreases")
    out_indptr = np.empty_like(indptr)
    out_indices = np.empty_like(indices)
    out = np.empty(nnz, dtype=np.float64)
    cdef FillTerm* ts = <FillTerm*>calloc(n_terms if n_terms else 1, sizeof(FillTerm))
    cdef FillPart* parts = <FillPart*>calloc(n_parts, sizeof(FillPart))
    cdef int64_t stores = 0
    try:
        if ts == NULL or parts == NULL:
            raise MemoryError()
        for k in range(n_terms):
            ip_k, data, scale, scale2, factor, first, m = prepared[k]
            ts[k].term.indptr = <const int64_t*>_ptr(ip_k)
            ts[k].term.data = _ptr(data)
            ts[k].term.scale = _ptr(scale)
            ts[k].term.scale_step = (0 if scale is None
                                     else cnp.PyArray_STRIDE(<cnp.ndarray>scale, 0) // 8)
            ts[k].term.scale2 = _ptr(scale2)
            ts[k].term.factor = factor
            ts[k].term.mode = _term_mode(data, scale, F64)
            ts[k].codes = _ptr(plan[k])
            ts[k].wide = cnp.PyArray_TYPE(<cnp.ndarray>plan[k]) == cnp.NPY_INT64
            ts[k].first = first
            ts[k].m = m
        memcpy(_ptr(out_indptr), _ptr(indptr), indptr.itemsize)  # (indptr[0]; parts copy the rest)
        for q in range(n_parts):
            parts[q].terms = ts
            parts[q].n_terms = n_terms
            parts[q].r0 = bounds[q]
            parts[q].r1 = bounds[q + 1]
            parts[q].lo = places[q]
            parts[q].hi = places[q + 1]
            parts[q].out = <double*>_ptr(out)
            parts[q].indptr_in = <const char*>_ptr(indptr)
            parts[q].indptr_out = <char*>_ptr(out_indptr)
            parts[q].indices_in = <const char*>_ptr(indices)
            parts[q].indices_out = <char*>_ptr(out_indices)
            parts[q].index_size = indptr.itemsize
        _run_in_threads([_PartRunner.of(_fill_part, &parts[q]) for q in range(n_parts)])
        for q in range(n_parts):
            if parts[q].stores < 0:
                # (the reference's result, or its error naming what is wrong)
                return _reference.fill_scaled(indptr, indices, terms, plan)
            stores += parts[q].stores
    finally:
        # (the parts' threads are done: _run_in_threads waited for them)
        free(ts)
        free(parts)
    if stores != nnz:
        raise ValueError("fill_scaled: the plan stores %d values for %d places"
                         % (stores, nnz))
    return out_indptr, out_indices, out
