# cython: language_level=3
"""The compiled twin of :func:`sparsegrad._fast._reference.run_program`.

A program (made by :mod:`sparsegrad._trace`) computes the values of a Jacobian
from the values of a recorded function's operations, block by block of rows:
each instruction works on a buffer of ``BLOCK`` rows, so that the
intermediate row factors of one block stay in the first-level cache and the
result's data is written once, instead of each row factor being an array of
its own that a later kernel reads back.  Contract, opcodes and checks: read
the reference.  Everything an address is taken from is checked here before it
is used: instructions and their buffers on entry, each load's positions and
each store's code in the loops (a bad one stops the loop and is reported as
ValueError), and the number of places stored at the end.
"""
cimport cython
cimport numpy as cnp
from libc.math cimport cos, exp, log, pow, sin, sqrt, tanh
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy

import numpy as np

from . import _reference
from ._kernels import _run_in_threads, get_threads

cnp.import_array()

__all__ = ["run_program"]

cdef enum:
    OP_LOAD = 0
    OP_PARAM = 1
    OP_ADD = 2
    OP_SUB = 3
    OP_MUL = 4
    OP_DIV = 5
    OP_NEG = 6
    OP_EXP = 7
    OP_LOG = 8
    OP_SQRT = 9
    OP_SIN = 10
    OP_COS = 11
    OP_TANH = 12
    OP_POW = 13
    OP_STORE = 14
    N_OPS = 15
    BLOCK = 256               # rows of a buffer: 2 KiB, dozens of them in L1 and L2
    # buffers lie STRIDE doubles apart: 2 KiB apart, every other one would be
    # 4 KiB from the next, and stores to one would stall loads from the other
    # (the CPU tells loads from earlier stores by their addresses' low 12 bits)
    STRIDE = BLOCK + 24

cdef extern from *:
    """
    /* the elementwise loops of the instructions: a result never shares its
       buffer with an operand (the programs' buffers are allocated so), which
       `restrict` tells the compiler, so that it vectorises them */
    #if defined(__GNUC__) || defined(__clang__)
    #define SG_RESTRICT __restrict__
    #else
    #define SG_RESTRICT
    #endif
    /* and compiled for the vector units of the machine it runs on, as well
       as for the baseline (GCC's target clones, chosen when the module is
       loaded: on x86-64 the baseline's SSE2 loops take 3-6 times as long as
       AVX2's; the results are the same, IEEE operations rounded alike) */
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
        && defined(__linux__) && __GNUC__ >= 6
    #define SG_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
    #else
    #define SG_CLONES
    #endif
    #define SG_BINARY(name, expr) \
        SG_CLONES static void name(double* SG_RESTRICT d, const double* SG_RESTRICT a, \
                                   const double* SG_RESTRICT b, long long n) { \
            for (long long j = 0; j < n; j++) d[j] = (expr); }
    SG_BINARY(sg_add, a[j] + b[j])
    SG_BINARY(sg_sub, a[j] - b[j])
    SG_BINARY(sg_mul, a[j] * b[j])
    SG_BINARY(sg_div, a[j] / b[j])
    SG_CLONES static void sg_neg(double* SG_RESTRICT d, const double* SG_RESTRICT a, long long n) {
        for (long long j = 0; j < n; j++) d[j] = -a[j];
    }
    SG_CLONES static void sg_fill(double* SG_RESTRICT d, double c, long long n) {
        for (long long j = 0; j < n; j++) d[j] = c;
    }
    """
    void sg_add(double* d, const double* a, const double* b, long long n) noexcept nogil
    void sg_sub(double* d, const double* a, const double* b, long long n) noexcept nogil
    void sg_mul(double* d, const double* a, const double* b, long long n) noexcept nogil
    void sg_div(double* d, const double* a, const double* b, long long n) noexcept nogil
    void sg_neg(double* d, const double* a, long long n) noexcept nogil
    void sg_fill(double* d, double c, long long n) noexcept nogil

# rows of a program from which it runs in parts, one per thread
cdef int64_t PARALLEL_ROWS = 1 << 15

cdef enum:
    FAULT_NONE = 0
    FAULT_LOAD = 1
    FAULT_STORE = 2
    FAULT_MEMORY = 3


cdef struct Leaf:
    const double* values
    int64_t n_values
    const int64_t* index      # NULL: the positions read the values directly
    int64_t n_index
    int64_t start, step       # row j reads position start + step * j


cdef struct Store:
    const void* codes
    bint wide                 # int64 codes, else int32
    int64_t n_codes


cdef struct Part:
    const int64_t* instructions
    const int64_t* segments   # (rows, begin, end, buffers, first row)
    int64_t n_segments
    const Leaf* leaves
    const double* params
    const Store* stores
    double* out
    int64_t nnz
    const void* indptr        # the result's, int32 or int64
    bint wide_indptr
    int64_t n_rows
    int64_t part, n_parts
    int64_t stored
    int fault


cdef inline bint _positions_fit(const Leaf* leaf, int64_t j0, int64_t n, int64_t bound) noexcept nogil:
    """Positions ``start + step * j`` of rows ``j0 .. j0 + n - 1`` inside ``[0, bound)``."""
    cdef int64_t first = leaf.start + leaf.step * j0
    cdef int64_t last = first + leaf.step * (n - 1)
    return 0 <= first < bound and 0 <= last < bound


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _load(const Leaf* leaf, int64_t j0, int64_t n, double* dst) noexcept nogil:
    """Rows ``j0 .. j0 + n - 1`` of a leaf into ``dst``; FAULT_LOAD if one is outside."""
    cdef int64_t j, p, q
    cdef const double* v = leaf.values
    cdef const int64_t* index = leaf.index
    cdef uint64_t bound = <uint64_t>leaf.n_values
    if index == NULL:
        if not _positions_fit(leaf, j0, n, leaf.n_values):
            return FAULT_LOAD
        p = leaf.start + leaf.step * j0
        if leaf.step == 1:
            for j in range(n):
                dst[j] = v[p + j]
        else:
            for j in range(n):
                dst[j] = v[p + leaf.step * j]
        return FAULT_NONE
    if not _positions_fit(leaf, j0, n, leaf.n_index):
        return FAULT_LOAD
    p = leaf.start + leaf.step * j0
    for j in range(n):
        q = index[p + leaf.step * j]
        if <uint64_t>q >= bound:
            return FAULT_LOAD
        dst[j] = v[q]
    return FAULT_NONE


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int64_t _store(const Store* store, int64_t j0, int64_t n, const double* src,
                    double* stage, int64_t lo, int64_t hi) noexcept nogil:
    """Values of rows ``j0 ..`` to the places of their codes (``2 p``: store,
    ``2 p + 1``: add, ``-1``: none), places ``lo .. hi - 1`` (the block's)
    staged at ``stage``: the number stored, or -1 for a bad code."""
    cdef int64_t j, c, place, stored = 0
    cdef uint64_t width = <uint64_t>(hi - lo)
    cdef const int32_t* narrow = <const int32_t*>store.codes
    cdef const int64_t* wide = <const int64_t*>store.codes
    if j0 + n > store.n_codes:
        return -1
    for j in range(n):
        c = wide[j0 + j] if store.wide else narrow[j0 + j]
        if c < 0:
            if c == -1:
                continue
            return -1
        place = (c >> 1) - lo
        if <uint64_t>place >= width:
            return -1
        if c & 1:
            stage[place] = stage[place] + src[j]
        else:
            stage[place] = src[j]
            stored += 1
    return stored


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef int _block(const Part* p, int64_t first, int64_t last, int64_t j0, int64_t n,
                double* buffers, double* stage, int64_t lo, int64_t hi,
                int64_t* stored) noexcept nogil:
    """Instructions ``first .. last - 1`` on rows ``j0 .. j0 + n - 1`` of a
    segment, whose places ``lo .. hi - 1`` are staged at ``stage``."""
    cdef int64_t i, j, op, got
    cdef double* d
    cdef const double* a
    cdef const double* b
    cdef double c
    cdef const int64_t* ins
    for i in range(first, last):
        ins = p.instructions + 4 * i
        op = ins[0]
        d = buffers + ins[1] * STRIDE
        a = buffers + ins[2] * STRIDE
        b = buffers + ins[3] * STRIDE
        if op == OP_LOAD:
            if _load(&p.leaves[ins[2]], j0, n, d) != FAULT_NONE:
                return FAULT_LOAD
        elif op == OP_PARAM:
            sg_fill(d, p.params[ins[2]], n)
        elif op == OP_ADD:
            sg_add(d, a, b, n)
        elif op == OP_SUB:
            sg_sub(d, a, b, n)
        elif op == OP_MUL:
            sg_mul(d, a, b, n)
        elif op == OP_DIV:
            sg_div(d, a, b, n)
        elif op == OP_NEG:
            sg_neg(d, a, n)
        elif op == OP_EXP:
            for j in range(n):
                d[j] = exp(a[j])
        elif op == OP_LOG:
            for j in range(n):
                d[j] = log(a[j])
        elif op == OP_SQRT:
            for j in range(n):
                d[j] = sqrt(a[j])
        elif op == OP_SIN:
            for j in range(n):
                d[j] = sin(a[j])
        elif op == OP_COS:
            for j in range(n):
                d[j] = cos(a[j])
        elif op == OP_TANH:
            for j in range(n):
                d[j] = tanh(a[j])
        elif op == OP_POW:
            c = p.params[ins[3]]
            for j in range(n):
                d[j] = pow(a[j], c)
        else:  # OP_STORE (checked on entry)
            got = _store(&p.stores[ins[3]], j0, n, a, stage, lo, hi)
            if got < 0:
                return FAULT_STORE
            stored[0] += got
    return FAULT_NONE


cdef inline int64_t _place(const Part* p, int64_t row) noexcept nogil:
    if p.wide_indptr:
        return (<const int64_t*>p.indptr)[row]
    return (<const int32_t*>p.indptr)[row]


cdef void _run_part(void* arg) noexcept nogil:
    """Rows ``[L q / Q, L (q + 1) / Q)`` of every segment (``L`` rows) for part
    ``q`` of ``Q``, a block at a time: the block's stores land in a staging
    buffer (cache-resident, so that a store scattered over the block's places
    does not wait for the result's memory), copied in order to the result."""
    cdef Part* p = <Part*>arg
    cdef int64_t s, rows, begin, end, first_row, j0, j1, b0, n, lo, hi, most = 1
    cdef int64_t staged = 0
    cdef const int64_t* seg
    cdef double* stage = NULL
    cdef double* grown
    for s in range(p.n_segments):
        if p.segments[5 * s + 3] > most:
            most = p.segments[5 * s + 3]
    cdef double* buffers = <double*>malloc(most * STRIDE * sizeof(double))
    if buffers == NULL:
        p.fault = FAULT_MEMORY
        return
    for s in range(p.n_segments):
        seg = p.segments + 5 * s
        rows, begin, end, first_row = seg[0], seg[1], seg[2], seg[4]
        j0 = rows * p.part // p.n_parts
        j1 = rows * (p.part + 1) // p.n_parts
        b0 = j0
        while b0 < j1:
            n = BLOCK if j1 - b0 > BLOCK else j1 - b0
            lo = _place(p, first_row + b0)
            hi = _place(p, first_row + b0 + n)
            if not 0 <= lo <= hi <= p.nnz:
                p.fault = FAULT_STORE
                break
            if hi - lo > staged:
                grown = <double*>realloc(stage, (hi - lo) * sizeof(double))
                if grown == NULL:
                    p.fault = FAULT_MEMORY
                    break
                stage, staged = grown, hi - lo
            p.fault = _block(p, begin, end, b0, n, buffers, stage, lo, hi, &p.stored)
            if p.fault != FAULT_NONE:
                break
            memcpy(p.out + lo, stage, (hi - lo) * sizeof(double))
            b0 += n
        if p.fault != FAULT_NONE:
            break
    free(buffers)
    free(stage)


cdef class _Runner:
    """One part of a program, run without the GIL (the callable of a worker thread)."""
    cdef Part* part

    def __call__(self):
        with nogil:
            _run_part(self.part)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef bint _valid(const int64_t* instructions, int64_t n_instructions, const int64_t* segments,
                 int64_t n_segments, int64_t n_leaves, int64_t n_params,
                 int64_t n_stores, int64_t n_rows) noexcept nogil:
    """The checks of the reference's ``_check_program``: every field in its
    bounds, every buffer read after its segment wrote it."""
    cdef int64_t s, i, op, rows, begin, end, n_buffers, first_row, d, a, b
    cdef int64_t* written = NULL    # (the instruction of a segment that last wrote each buffer)
    cdef bint ok = True
    cdef int64_t most = 1
    for s in range(n_segments):
        if segments[5 * s + 3] > most:
            most = segments[5 * s + 3]
    written = <int64_t*>malloc(most * sizeof(int64_t))
    if written == NULL:
        return False
    for s in range(n_segments):
        rows, begin, end, n_buffers, first_row = (
            segments[5 * s], segments[5 * s + 1], segments[5 * s + 2], segments[5 * s + 3],
            segments[5 * s + 4])
        if (rows < 0 or begin < 0 or begin > end or end > n_instructions or n_buffers < 1
                or first_row < 0 or first_row > n_rows - rows):
            ok = False
            break
        for i in range(n_buffers):
            written[i] = -1
        for i in range(begin, end):
            op, d, a, b = (instructions[4 * i], instructions[4 * i + 1],
                           instructions[4 * i + 2], instructions[4 * i + 3])
            if op == OP_STORE:
                ok = d == 0 and 0 <= a < n_buffers and written[a] >= 0 and 0 <= b < n_stores
            elif op < 0 or op >= N_OPS or not 0 <= d < n_buffers:
                ok = False
            elif op == OP_LOAD:
                ok = 0 <= a < n_leaves and b == 0
            elif op == OP_PARAM:
                ok = 0 <= a < n_params and b == 0
            elif op == OP_POW:
                ok = 0 <= a < n_buffers and written[a] >= 0 and 0 <= b < n_params
            elif op == OP_ADD or op == OP_SUB or op == OP_MUL or op == OP_DIV:
                ok = (0 <= a < n_buffers and written[a] >= 0
                      and 0 <= b < n_buffers and written[b] >= 0)
            else:
                ok = 0 <= a < n_buffers and written[a] >= 0 and b == 0
            if ok and op != OP_STORE and op != OP_LOAD and op != OP_PARAM:
                # (the loops are compiled for results apart from their operands)
                ok = d != a and (d != b or op == OP_POW or op == OP_NEG or op > OP_DIV)
            if not ok:
                break
            if op != OP_STORE:
                written[d] = i
        if not ok:
            break
    free(written)
    return ok


cdef bint _vector(object a, int typenum):
    return (type(a) is np.ndarray and cnp.PyArray_NDIM(<cnp.ndarray>a) == 1
            and cnp.PyArray_TYPE(<cnp.ndarray>a) == typenum
            and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>a) and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a))


cdef bint _table(object a, int width):
    """A C-contiguous native int64 array of shape (n, width)."""
    return (type(a) is np.ndarray and cnp.PyArray_NDIM(<cnp.ndarray>a) == 2
            and cnp.PyArray_DIM(<cnp.ndarray>a, 1) == width
            and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_INT64
            and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>a) and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a))


def run_program(instructions, segments, leaves, params, stores, indptr):
    """The data of a Jacobian by a program of :mod:`sparsegrad._trace`.

    Contract of :func:`sparsegrad._fast._reference.run_program`; arrays of
    other dtypes or layouts than the compiled loops read go to the reference.
    """
    leaves, stores = list(leaves), list(stores)
    if not (_vector(params, cnp.NPY_FLOAT64)
            and (_vector(indptr, cnp.NPY_INT32) or _vector(indptr, cnp.NPY_INT64))
            and indptr.shape[0] >= 1
            and all(_vector(v, cnp.NPY_FLOAT64) and (i is None or _vector(i, cnp.NPY_INT64))
                    for v, i, _, _ in leaves)
            and all(_vector(c, cnp.NPY_INT32) or _vector(c, cnp.NPY_INT64) for c in stores)):
        return _reference.run_program(instructions, segments, leaves, params, stores, indptr)
    cdef int64_t n_rows = indptr.shape[0] - 1
    cdef int64_t nnz = int(indptr[n_rows])
    if not (_table(instructions, 4) and _table(segments, 5) and nnz >= 0
            and _valid(<const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>instructions),
                       instructions.shape[0],
                       <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>segments), segments.shape[0],
                       len(leaves), params.shape[0], len(stores), n_rows)):
        # (the reference converts what it can and names what is wrong)
        return _reference.run_program(instructions, segments, leaves, params, stores, indptr)
    cdef int64_t n_segments = segments.shape[0]
    cdef int64_t rows = int(segments[:, 0].sum())
    cdef Py_ssize_t k, n_leaves = len(leaves), n_stores = len(stores), n_parts = 1, q
    if get_threads() > 1 and rows >= 2 * PARALLEL_ROWS:
        n_parts = min(get_threads(), rows // PARALLEL_ROWS)
    out = np.empty(nnz, dtype=np.float64)
    cdef Leaf* ls = <Leaf*>calloc(n_leaves if n_leaves else 1, sizeof(Leaf))
    cdef Store* ss = <Store*>calloc(n_stores if n_stores else 1, sizeof(Store))
    cdef Part* parts = <Part*>calloc(n_parts, sizeof(Part))
    cdef _Runner runner
    cdef int64_t stored = 0
    cdef int fault = FAULT_NONE
    try:
        if ls == NULL or ss == NULL or parts == NULL:
            raise MemoryError()
        for k in range(n_leaves):
            values, index, start, step = leaves[k]
            ls[k].values = <const double*>cnp.PyArray_DATA(<cnp.ndarray>values)
            ls[k].n_values = values.shape[0]
            ls[k].index = NULL if index is None else <const int64_t*>cnp.PyArray_DATA(
                <cnp.ndarray>index)
            ls[k].n_index = 0 if index is None else index.shape[0]
            ls[k].start = start
            ls[k].step = step
        for k in range(n_stores):
            ss[k].codes = cnp.PyArray_DATA(<cnp.ndarray>stores[k])
            ss[k].wide = cnp.PyArray_TYPE(<cnp.ndarray>stores[k]) == cnp.NPY_INT64
            ss[k].n_codes = stores[k].shape[0]
        runners = []
        for q in range(n_parts):
            parts[q].instructions = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>instructions)
            parts[q].segments = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>segments)
            parts[q].n_segments = n_segments
            parts[q].leaves = ls
            parts[q].params = <const double*>cnp.PyArray_DATA(<cnp.ndarray>params)
            parts[q].stores = ss
            parts[q].out = <double*>cnp.PyArray_DATA(<cnp.ndarray>out)
            parts[q].nnz = nnz
            parts[q].indptr = cnp.PyArray_DATA(<cnp.ndarray>indptr)
            parts[q].wide_indptr = cnp.PyArray_TYPE(<cnp.ndarray>indptr) == cnp.NPY_INT64
            parts[q].n_rows = n_rows
            parts[q].part = q
            parts[q].n_parts = n_parts
            runner = _Runner()
            runner.part = &parts[q]
            runners.append(runner)
        _run_in_threads(runners)
        for q in range(n_parts):
            if parts[q].fault != FAULT_NONE and fault == FAULT_NONE:
                fault = parts[q].fault
            stored += parts[q].stored
    finally:
        # (the parts' threads are done: _run_in_threads waited for them)
        free(ls)
        free(ss)
        free(parts)
    if fault == FAULT_MEMORY:
        raise MemoryError()
    if fault != FAULT_NONE:
        # (the reference names what is wrong)
        return _reference.run_program(instructions, segments, leaves, params, stores, indptr)
    if stored != nnz:
        raise ValueError("run_program: the stores fill %d of %d places" % (stored, nnz))
    return out
