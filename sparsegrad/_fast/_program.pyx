# cython: language_level=3
"""The compiled twin of :func:`sparsegrad._fast._reference.run_program`.

A program (made by :mod:`sparsegrad._trace`) computes the values of a Jacobian
from the values of a recorded function's operations, block by block of rows:
each instruction works on a buffer of ``BLOCK`` rows, so that the
intermediate row factors of one block stay in the CPU's caches and the
result's data is written once, in order, instead of each row factor being an
array of its own that a later kernel reads back.  Contract, opcodes and
checks: read the reference.  Everything an address is taken from is checked
here before it is used: instructions, segments and adds on entry, each load's
positions (and each piece of a run) and each place's owner in the loops (a
bad one stops the loop, and the reference then names it in a ValueError).
"""
cimport cython
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
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
    OP_SCALE = 15
    OP_SHIFT = 16
    OP_RDIV = 17
    OP_KEEP = 18
    N_OPS = 19
    BLOCK = 512               # rows of a buffer: 4 KiB (measured: 512 and 1024 alike, 256 slower)
    # buffers lie STRIDE doubles apart: 4 KiB apart, each would be 4 KiB from
    # the next, and stores to one would stall loads from the other (the CPU
    # tells loads from earlier stores by their addresses' low 12 bits)
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
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \\
        && defined(__linux__) && __GNUC__ >= 6
    #define SG_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
    #else
    #define SG_CLONES
    #endif
    #define SG_BINARY(name, expr) \\
        SG_CLONES static void name(double* SG_RESTRICT d, const double* SG_RESTRICT a, \\
                                   const double* SG_RESTRICT b, long long n) { \\
            for (long long j = 0; j < n; j++) d[j] = (expr); }
    #define SG_BY_SCALAR(name, expr) \\
        SG_CLONES static void name(double* SG_RESTRICT d, const double* SG_RESTRICT a, \\
                                   double c, long long n) { \\
            for (long long j = 0; j < n; j++) d[j] = (expr); }
    SG_BINARY(sg_add, a[j] + b[j])
    SG_BINARY(sg_sub, a[j] - b[j])
    SG_BINARY(sg_mul, a[j] * b[j])
    SG_BINARY(sg_div, a[j] / b[j])
    SG_BINARY(sg_keep, b[j] != 0.0 ? a[j] : 0.0)
    SG_BY_SCALAR(sg_scale, a[j] * c)
    SG_BY_SCALAR(sg_shift, a[j] + c)
    SG_BY_SCALAR(sg_rdiv, c / a[j])
    #define SG_UNARY(name, expr) \\
        SG_CLONES static void name(double* SG_RESTRICT d, const double* SG_RESTRICT a, \\
                                   long long n) { \\
            for (long long j = 0; j < n; j++) d[j] = (expr); }
    SG_UNARY(sg_neg, -a[j])
    SG_UNARY(sg_sqrt, sqrt(a[j]))
    SG_CLONES static void sg_fill(double* SG_RESTRICT d, double c, long long n) {
        for (long long j = 0; j < n; j++) d[j] = c;
    }
    """
    void sg_add(double* d, const double* a, const double* b, long long n) noexcept nogil
    void sg_sub(double* d, const double* a, const double* b, long long n) noexcept nogil
    void sg_mul(double* d, const double* a, const double* b, long long n) noexcept nogil
    void sg_div(double* d, const double* a, const double* b, long long n) noexcept nogil
    void sg_keep(double* d, const double* a, const double* b, long long n) noexcept nogil
    void sg_scale(double* d, const double* a, double c, long long n) noexcept nogil
    void sg_shift(double* d, const double* a, double c, long long n) noexcept nogil
    void sg_rdiv(double* d, const double* a, double c, long long n) noexcept nogil
    void sg_neg(double* d, const double* a, long long n) noexcept nogil
    void sg_sqrt(double* d, const double* a, long long n) noexcept nogil
    void sg_fill(double* d, double c, long long n) noexcept nogil

cdef extern from *:
    """
    /* the places of n rows (row jj holds places ip[jj] .. ip[jj + 1] - 1,
       staged from place ip[0] on), each the value at row jj of its owner's
       slab buffer (owners checked below `slots` first); 0, or -1 for a bad
       row bound or owner */
    #define SG_PLACES(name, owner_t, index_t) \\
        SG_CLONES static int name(double* SG_RESTRICT stage, const double* SG_RESTRICT slab, \\
                                  const owner_t* SG_RESTRICT owners, \\
                                  const index_t* SG_RESTRICT ip, long long n, long long slots, \\
                                  long long stride, long long nnz) { \\
            long long base = ip[0], last = ip[n], jj, k, most = 0; \\
            if (base < 0 || last < base || last > nnz) return -1; \\
            for (k = base; k < last; k++) most = owners[k] > most ? owners[k] : most; \\
            if (most >= slots && last > base) return -1; \\
            for (jj = 0; jj < n; jj++) { \\
                long long lo = ip[jj], hi = ip[jj + 1]; \\
                if (lo < base || hi < lo || hi > last) return -1; \\
                for (k = lo; k < hi; k++) \\
                    stage[k - base] = slab[(long long)owners[k] * stride + jj]; \\
            } \\
            return 0; }
    SG_PLACES(sg_places_8_32, unsigned char, int)
    SG_PLACES(sg_places_8_64, unsigned char, long long)
    SG_PLACES(sg_places_16_32, unsigned short, int)
    SG_PLACES(sg_places_16_64, unsigned short, long long)
    /* rows from `ip` on, owners of one byte or two, row bounds int32 or int64 */
    static int sg_places(double* stage, const double* slab, const void* owners, int wide_owners,
                         const void* ip, int wide_ip, long long n, long long slots,
                         long long stride, long long nnz) {
        if (wide_owners)
            return wide_ip ? sg_places_16_64(stage, slab, owners, ip, n, slots, stride, nnz)
                           : sg_places_16_32(stage, slab, owners, ip, n, slots, stride, nnz);
        return wide_ip ? sg_places_8_64(stage, slab, owners, ip, n, slots, stride, nnz)
                       : sg_places_8_32(stage, slab, owners, ip, n, slots, stride, nnz);
    }
    """
    int sg_places(double* stage, const double* slab, const void* owners, int wide_owners,
                  const void* ip, int wide_ip, long long n, long long slots, long long stride,
                  long long nnz) noexcept nogil

cdef extern from *:
    """
    /* the result's data is written front to back, once, a block's places at
       a time: written past the caches (reading their lines in first, as plain
       stores do, would double the memory traffic); sg_fence() before the
       result is handed on */
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    #include <emmintrin.h>
    static void sg_stream_copy(void* dst, const void* src, long long nbytes) {
        char* d = (char*)dst;
        const char* s = (const char*)src;
        /* (to a 16-byte boundary of the destination, then 16 bytes a store) */
        while (nbytes > 0 && ((size_t)d & 15)) {
            if (((size_t)d & 7) == 0 && nbytes >= 8) {
                long long v; __builtin_memcpy(&v, s, 8);
                _mm_stream_si64((long long*)d, v); d += 8; s += 8; nbytes -= 8;
            } else if (((size_t)d & 3) == 0 && nbytes >= 4) {
                int v; __builtin_memcpy(&v, s, 4);
                _mm_stream_si32((int*)d, v); d += 4; s += 4; nbytes -= 4;
            } else {
                *d++ = *s++; nbytes--;
            }
        }
        for (; nbytes >= 16; d += 16, s += 16, nbytes -= 16)
            _mm_stream_si128((__m128i*)d, _mm_loadu_si128((const __m128i*)s));
        if (nbytes > 0) __builtin_memcpy(d, s, (size_t)nbytes);
    }
    static inline void sg_fence(void) { _mm_sfence(); }
    #else
    static void sg_stream_copy(void* dst, const void* src, long long nbytes) {
        memcpy(dst, src, (size_t)nbytes);
    }
    static inline void sg_fence(void) { }
    #endif
    """
    void sg_fence() noexcept nogil
    void sg_stream_copy(void* dst, const void* src, long long nbytes) noexcept nogil

ctypedef void (*unary_loop)(double* d, const double* a, long long n) noexcept nogil
ctypedef void (*numpy_loop)(char** args, cnp.npy_intp* dimensions, cnp.npy_intp* steps,
                            void* data) noexcept nogil

# the loops of the unary opcodes, by opcode (NULL for the others)
cdef unary_loop UNARY_LOOPS[N_OPS]
UNARY_LOOPS[OP_NEG] = sg_neg
UNARY_LOOPS[OP_SQRT] = sg_sqrt

# The transcendental opcodes run numpy's own float64 loops (those numpy chose
# for this CPU when it was imported), so that a program rounds as numpy does on
# contiguous arrays: numpy's SIMD loops (AVX-512) and the C library's functions
# differ in the last bit, and the eager way's partials are numpy's.
cdef numpy_loop NUMPY_LOOPS[N_OPS]
cdef void* NUMPY_DATA[N_OPS]


cdef extern from "numpy/ufuncobject.h":
    # (numpy's own declaration: the fields are read as C, whatever the .pxd
    # of the numpy at hand declares)
    ctypedef struct PyUFuncObject:
        int nargs
        void** functions
        void** data
        int ntypes
        const char* types


cdef int _take_numpy_loop(int op, object ufunc) except -1:
    """Keep ``ufunc``'s loop of float64 operands and result for ``op``."""
    cdef PyUFuncObject* u = <PyUFuncObject*>ufunc
    cdef int i, k
    if not isinstance(ufunc, np.ufunc):
        raise TypeError("not a ufunc: %r" % (ufunc,))
    for i in range(u.ntypes):
        for k in range(u.nargs):
            if u.types[i * u.nargs + k] != cnp.NPY_DOUBLE:
                break
        else:
            if u.functions[i] == NULL:
                break
            NUMPY_LOOPS[op] = <numpy_loop>u.functions[i]
            NUMPY_DATA[op] = u.data[i]
            return 0
    raise ImportError("numpy.%s has no float64 loop to run programs with" % ufunc.__name__)


_take_numpy_loop(OP_EXP, np.exp)
_take_numpy_loop(OP_LOG, np.log)
_take_numpy_loop(OP_SIN, np.sin)
_take_numpy_loop(OP_COS, np.cos)
_take_numpy_loop(OP_TANH, np.tanh)
_take_numpy_loop(OP_POW, np.power)


cdef inline void _numpy_unary(int op, double* d, const double* a, int64_t n) noexcept nogil:
    cdef char* args[2]
    cdef cnp.npy_intp dimensions[1]
    cdef cnp.npy_intp steps[2]
    args[0], args[1] = <char*>a, <char*>d
    dimensions[0] = n
    steps[0] = steps[1] = sizeof(double)
    NUMPY_LOOPS[op](args, dimensions, steps, NUMPY_DATA[op])


cdef inline void _numpy_power(double* d, const double* a, const double* c,
                              int64_t n) noexcept nogil:
    # (the exponent a broadcast scalar, of stride 0, as numpy hands it on)
    cdef char* args[3]
    cdef cnp.npy_intp dimensions[1]
    cdef cnp.npy_intp steps[3]
    args[0], args[1], args[2] = <char*>a, <char*>c, <char*>d
    dimensions[0] = n
    steps[0], steps[1], steps[2] = sizeof(double), 0, sizeof(double)
    NUMPY_LOOPS[OP_POW](args, dimensions, steps, NUMPY_DATA[OP_POW])

# rows of a program from which it runs in parts, one per thread
cdef int64_t PARALLEL_ROWS = 1 << 15

cdef enum:
    FAULT_NONE = 0
    FAULT_LOAD = 1
    FAULT_PLACE = 2
    FAULT_MEMORY = 3


cdef struct Leaf:
    const double* values
    int64_t n_values
    const int64_t* index      # NULL: the positions read the values directly
    int64_t n_index
    int64_t start, step       # row j reads position start + step * j
    int64_t offset            # (of the index's entry, or of the position)
    const int64_t* runs       # NULL, or where the index's runs start (index_runs)
    int64_t n_runs            # (entries of runs: the runs and one)


cdef struct Part:
    const int64_t* instructions
    const int64_t* segments   # (rows, begin, end, buffers, first row, slots)
    int64_t n_segments
    const Leaf* leaves
    const double* params
    const void* owners        # uint8 or uint16, one per place
    bint wide_owners
    const int64_t* adds       # (segment, row, slot, place), sorted
    int64_t n_adds
    const void* indptr        # the result's, int32 or int64
    bint wide_indptr
    double* out
    int64_t nnz
    int64_t part, n_parts
    int fault


cdef inline bint _positions_fit(int64_t first, int64_t step, int64_t n, int64_t bound) noexcept nogil:
    """Positions ``first + step * j``, ``j < n``, inside ``[0, bound)``."""
    cdef int64_t last = first + step * (n - 1)
    return 0 <= first < bound and 0 <= last < bound


cdef inline int64_t _run_of(const int64_t* runs, int64_t n_runs, int64_t p) noexcept nogil:
    """The run holding position ``p``: the last ``r`` with ``runs[r] <= p``."""
    cdef int64_t lo = 0, hi = n_runs - 1, mid
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if runs[mid] <= p:
            lo = mid
        else:
            hi = mid
    return lo


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _load(const Leaf* leaf, int64_t j0, int64_t n, double* dst) noexcept nogil:
    """Rows ``j0 .. j0 + n - 1`` of a leaf into ``dst``; FAULT_LOAD if one is outside."""
    cdef int64_t j, q, r, piece, first
    cdef int64_t p = leaf.start + leaf.step * j0
    cdef int64_t offset = leaf.offset
    cdef const double* v = leaf.values
    cdef const int64_t* index = leaf.index
    cdef uint64_t bound = <uint64_t>leaf.n_values
    if index == NULL:
        p += offset
        if not _positions_fit(p, leaf.step, n, leaf.n_values):
            return FAULT_LOAD
        if leaf.step == 1:
            memcpy(dst, v + p, n * sizeof(double))
        else:
            for j in range(n):
                dst[j] = v[p + leaf.step * j]
        return FAULT_NONE
    if not _positions_fit(p, leaf.step, n, leaf.n_index):
        return FAULT_LOAD
    if leaf.runs != NULL and leaf.step == 1:
        # (run by run: positions p .. of a run read consecutive values)
        j = 0
        r = _run_of(leaf.runs, leaf.n_runs, p)
        while j < n:
            if r + 1 >= leaf.n_runs:
                return FAULT_LOAD
            piece = leaf.runs[r + 1] - (p + j)
            if piece > n - j:
                piece = n - j
            if piece <= 0:
                return FAULT_LOAD
            first = index[leaf.runs[r]] + (p + j - leaf.runs[r]) + offset
            if first < 0 or first + piece > leaf.n_values:
                return FAULT_LOAD
            memcpy(dst + j, v + first, piece * sizeof(double))
            j += piece
            r += 1
        return FAULT_NONE
    for j in range(n):
        q = index[p + leaf.step * j] + offset
        if <uint64_t>q >= bound:
            return FAULT_LOAD
        dst[j] = v[q]
    return FAULT_NONE


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _block(const Part* p, int64_t first, int64_t last, int64_t j0, int64_t n,
                double* buffers, double* slab) noexcept nogil:
    """Instructions ``first .. last - 1`` on rows ``j0 .. j0 + n - 1`` of a
    segment; stores to ``slab``."""
    cdef int64_t i, op
    cdef double* d
    cdef const double* a
    cdef const double* b
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
        elif op == OP_MUL:
            sg_mul(d, a, b, n)
        elif op == OP_SCALE:
            sg_scale(d, a, p.params[ins[3]], n)
        elif op == OP_ADD:
            sg_add(d, a, b, n)
        elif op == OP_SUB:
            sg_sub(d, a, b, n)
        elif op == OP_STORE:
            memcpy(slab + ins[3] * STRIDE, a, n * sizeof(double))
        elif op == OP_DIV:
            sg_div(d, a, b, n)
        elif op == OP_KEEP:
            sg_keep(d, a, b, n)
        elif op == OP_SHIFT:
            sg_shift(d, a, p.params[ins[3]], n)
        elif op == OP_RDIV:
            sg_rdiv(d, a, p.params[ins[3]], n)
        elif op == OP_PARAM:
            sg_fill(d, p.params[ins[2]], n)
        elif op == OP_POW:
            _numpy_power(d, a, &p.params[ins[3]], n)
        elif NUMPY_LOOPS[op] != NULL:
            _numpy_unary(op, d, a, n)
        else:  # (the unary loops: checked on entry)
            UNARY_LOOPS[op](d, a, n)
    return FAULT_NONE


cdef inline int64_t _place(const Part* p, int64_t row) noexcept nogil:
    if p.wide_indptr:
        return (<const int64_t*>p.indptr)[row]
    return (<const int32_t*>p.indptr)[row]


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _places(const Part* p, int64_t first_row, int64_t j0, int64_t n, int64_t slots,
                 const double* slab, double* stage) noexcept nogil:
    """The places of rows ``j0 .. j0 + n - 1`` of a segment, in order, each
    from the slab of its owner, staged from the block's first place on."""
    cdef int64_t row = first_row + j0
    cdef const void* ip = (<const char*>p.indptr) + row * (8 if p.wide_indptr else 4)
    if sg_places(stage, slab, p.owners, p.wide_owners, ip, p.wide_indptr, n, slots, STRIDE,
                 p.nnz) != 0:
        return FAULT_PLACE
    return FAULT_NONE


cdef int64_t _first_add(const Part* p, int64_t s, int64_t j0) noexcept nogil:
    """The first add of segment ``s`` at a row ``>= j0`` (adds are sorted)."""
    cdef int64_t lo = 0, hi = p.n_adds, mid
    cdef const int64_t* a
    while lo < hi:
        mid = (lo + hi) // 2
        a = p.adds + 4 * mid
        if a[0] < s or (a[0] == s and a[1] < j0):
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef void _run_part(void* arg) noexcept nogil:
    """Rows ``[L q / Q, L (q + 1) / Q)`` of every segment (``L`` rows) for part
    ``q`` of ``Q``, a block at a time: the block's roots go to a slab, one
    buffer per store, and the block's places are written in order from it
    (the result's memory written once, front to back), then its adds."""
    cdef Part* p = <Part*>arg
    cdef int64_t s, rows, begin, end, first_row, slots, j0, j1, b0, n, k, lo, hi
    cdef int64_t most_buffers = 1, most_slots = 1, staged = 0
    cdef double* stage = NULL
    cdef const int64_t* seg
    cdef const int64_t* a
    for s in range(p.n_segments):
        seg = p.segments + 6 * s
        most_buffers = seg[3] if seg[3] > most_buffers else most_buffers
        most_slots = seg[5] if seg[5] > most_slots else most_slots
    cdef double* buffers = <double*>malloc(most_buffers * STRIDE * sizeof(double))
    cdef double* slab = <double*>malloc(most_slots * STRIDE * sizeof(double))
    if buffers == NULL or slab == NULL:
        free(buffers)
        free(slab)
        p.fault = FAULT_MEMORY
        return
    for s in range(p.n_segments):
        seg = p.segments + 6 * s
        rows, begin, end, first_row, slots = seg[0], seg[1], seg[2], seg[4], seg[5]
        j0 = rows * p.part // p.n_parts
        j1 = rows * (p.part + 1) // p.n_parts
        k = _first_add(p, s, j0)
        b0 = j0
        while b0 < j1 and p.fault == FAULT_NONE:
            n = BLOCK if j1 - b0 > BLOCK else j1 - b0
            lo = _place(p, first_row + b0)
            hi = _place(p, first_row + b0 + n)
            if not 0 <= lo <= hi <= p.nnz:
                p.fault = FAULT_PLACE
                break
            if hi - lo > staged:
                free(stage)
                staged = 2 * (hi - lo)
                stage = <double*>malloc(staged * sizeof(double))
                if stage == NULL:
                    p.fault = FAULT_MEMORY
                    break
            p.fault = _block(p, begin, end, b0, n, buffers, slab)
            if p.fault == FAULT_NONE:
                p.fault = _places(p, first_row, b0, n, slots, slab, stage)
            if p.fault == FAULT_NONE:
                sg_stream_copy(p.out + lo, stage, (hi - lo) * sizeof(double))
                sg_fence()   # (the adds below read places just streamed out)
            # (then the block's adds, in the order of their slots)
            while p.fault == FAULT_NONE and k < p.n_adds:
                a = p.adds + 4 * k
                if a[0] != s or a[1] >= b0 + n:
                    break
                p.out[a[3]] = p.out[a[3]] + slab[a[2] * STRIDE + a[1] - b0]
                k += 1
            b0 += n
        if p.fault != FAULT_NONE:
            break
    free(buffers)
    free(slab)
    free(stage)
    sg_fence()


cdef class _Runner:
    """One part of a program, run without the GIL (the callable of a worker thread)."""
    cdef Part* part

    def __call__(self):
        with nogil:
            _run_part(self.part)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef bint _valid(const int64_t* instructions, int64_t n_instructions, const int64_t* segments,
                 int64_t n_segments, int64_t n_leaves, int64_t n_params, const int64_t* adds,
                 int64_t n_adds, const void* indptr, bint wide_indptr,
                 int64_t n_rows) noexcept nogil:
    """The checks of the reference's ``_check_program`` and of the adds: every
    field in its bounds, every buffer read after its segment wrote it and by
    another instruction, every slot stored; adds sorted, each at a place of
    its row."""
    cdef int64_t s, i, op, rows, begin, end, n_buffers, first_row, slots, d, a, b, row, place
    cdef int64_t* written = NULL    # (the instruction of a segment that last wrote each buffer)
    cdef int64_t* stored = NULL     # (the instruction that stored each slot)
    cdef bint ok = True
    cdef int64_t most_buffers = 1, most_slots = 1
    cdef const int64_t* add
    cdef const int64_t* previous
    for s in range(n_segments):
        if segments[6 * s + 3] > most_buffers:
            most_buffers = segments[6 * s + 3]
        if segments[6 * s + 5] > most_slots:
            most_slots = segments[6 * s + 5]
    written = <int64_t*>malloc(most_buffers * sizeof(int64_t))
    stored = <int64_t*>malloc(most_slots * sizeof(int64_t))
    if written == NULL or stored == NULL:
        free(written)
        free(stored)
        return False
    for s in range(n_segments):
        rows, begin, end, n_buffers, first_row, slots = (
            segments[6 * s], segments[6 * s + 1], segments[6 * s + 2], segments[6 * s + 3],
            segments[6 * s + 4], segments[6 * s + 5])
        if (rows < 0 or begin < 0 or begin > end or end > n_instructions or n_buffers < 1
                or first_row < 0 or first_row > n_rows - rows or slots < 0
                or slots > 65536):
            ok = False
            break
        for i in range(n_buffers):
            written[i] = -1
        for i in range(slots):
            stored[i] = -1
        for i in range(begin, end):
            op, d, a, b = (instructions[4 * i], instructions[4 * i + 1],
                           instructions[4 * i + 2], instructions[4 * i + 3])
            if op == OP_STORE:
                ok = (d == 0 and 0 <= a < n_buffers and written[a] >= 0 and 0 <= b < slots
                      and stored[b] < 0)
                if ok:
                    stored[b] = i
            elif op < 0 or op >= N_OPS or not 0 <= d < n_buffers:
                ok = False
            elif op == OP_LOAD:
                ok = 0 <= a < n_leaves and b == 0
            elif op == OP_PARAM:
                ok = 0 <= a < n_params and b == 0
            elif op == OP_POW or op == OP_SCALE or op == OP_SHIFT or op == OP_RDIV:
                ok = 0 <= a < n_buffers and written[a] >= 0 and 0 <= b < n_params and d != a
            elif (op == OP_ADD or op == OP_SUB or op == OP_MUL or op == OP_DIV
                  or op == OP_KEEP):
                ok = (0 <= a < n_buffers and written[a] >= 0
                      and 0 <= b < n_buffers and written[b] >= 0 and d != a and d != b)
            else:
                ok = 0 <= a < n_buffers and written[a] >= 0 and b == 0 and d != a
            if not ok:
                break
            if op != OP_STORE:
                written[d] = i
        for i in range(slots):
            if stored[i] < 0:
                ok = False
        if not ok:
            break
    free(written)
    free(stored)
    previous = NULL
    for i in range(n_adds if ok else 0):
        add = adds + 4 * i
        s, row, b, place = add[0], add[1], add[2], add[3]
        if not (0 <= s < n_segments and 0 <= row < segments[6 * s] and 0 <= b < segments[6 * s + 5]):
            return False
        row = row + segments[6 * s + 4]
        if wide_indptr:
            ok = (<const int64_t*>indptr)[row] <= place < (<const int64_t*>indptr)[row + 1]
        else:
            ok = (<const int32_t*>indptr)[row] <= place < (<const int32_t*>indptr)[row + 1]
        if not ok:
            return False
        if previous != NULL and (previous[0] > s or (previous[0] == s and (
                previous[1] > add[1] or (previous[1] == add[1] and previous[2] >= b)))):
            return False
        previous = add
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


cdef bint _leaf_ok(object leaf):
    if len(leaf) != 6:
        return False
    values, index, start, step, offset, runs = leaf
    return (_vector(values, cnp.NPY_FLOAT64) and (index is None or _vector(index, cnp.NPY_INT64))
            and (runs is None or (index is not None and _vector(runs, cnp.NPY_INT64)
                                  and runs.shape[0] >= 2))
            and type(start) is int and type(step) is int and type(offset) is int)


def run_program(instructions, segments, leaves, params, owners, adds, indptr):
    """The data of a Jacobian by a program of :mod:`sparsegrad._trace`.

    Contract of :func:`sparsegrad._fast._reference.run_program`; arrays of
    other dtypes or layouts than the compiled loops read go to the reference,
    and so does a program that fails a check (the reference names it).
    """
    leaves = list(leaves)
    if not (_vector(params, cnp.NPY_FLOAT64)
            and (_vector(indptr, cnp.NPY_INT32) or _vector(indptr, cnp.NPY_INT64))
            and indptr.shape[0] >= 1
            and (_vector(owners, cnp.NPY_UINT8) or _vector(owners, cnp.NPY_UINT16))
            and _table(instructions, 4) and _table(segments, 6) and _table(adds, 4)
            and all(_leaf_ok(leaf) for leaf in leaves)):
        return _reference.run_program(instructions, segments, leaves, params, owners, adds,
                                      indptr)
    cdef int64_t n_rows = indptr.shape[0] - 1
    cdef int64_t nnz = int(indptr[n_rows])
    cdef bint wide_indptr = cnp.PyArray_TYPE(<cnp.ndarray>indptr) == cnp.NPY_INT64
    if not (nnz >= 0 and owners.shape[0] == nnz and int(indptr[0]) == 0
            and _valid(<const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>instructions),
                       instructions.shape[0],
                       <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>segments),
                       segments.shape[0], len(leaves), params.shape[0],
                       <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>adds), adds.shape[0],
                       cnp.PyArray_DATA(<cnp.ndarray>indptr), wide_indptr, n_rows)):
        return _reference.run_program(instructions, segments, leaves, params, owners, adds,
                                      indptr)
    cdef int64_t n_segments = segments.shape[0]
    cdef int64_t rows = int(segments[:, 0].sum())
    cdef Py_ssize_t k, n_leaves = len(leaves), n_parts = 1, q
    if get_threads() > 1 and rows >= 2 * PARALLEL_ROWS:
        n_parts = min(get_threads(), rows // PARALLEL_ROWS)
    # (rows of no segment hold no places: the places of the segments' rows,
    # which do not overlap, are every place when they are nnz in all)
    spans = sorted((first, m) for m, first in segments[:, [0, 4]].tolist())
    covered = sum(int(indptr[first + m]) - int(indptr[first]) for first, m in spans)
    if covered != nnz or any(a[0] + a[1] > b[0] for a, b in zip(spans, spans[1:])):
        return _reference.run_program(instructions, segments, leaves, params, owners, adds,
                                      indptr)
    out = np.empty(nnz, dtype=np.float64)
    cdef Leaf* ls = <Leaf*>calloc(n_leaves if n_leaves else 1, sizeof(Leaf))
    cdef Part* parts = <Part*>calloc(n_parts, sizeof(Part))
    cdef _Runner runner
    cdef int fault = FAULT_NONE
    try:
        if ls == NULL or parts == NULL:
            raise MemoryError()
        for k in range(n_leaves):
            values, index, start, step, offset, runs = leaves[k]
            ls[k].values = <const double*>cnp.PyArray_DATA(<cnp.ndarray>values)
            ls[k].n_values = values.shape[0]
            ls[k].index = NULL if index is None else <const int64_t*>cnp.PyArray_DATA(
                <cnp.ndarray>index)
            ls[k].n_index = 0 if index is None else index.shape[0]
            ls[k].start = start
            ls[k].step = step
            ls[k].offset = offset
            ls[k].runs = NULL if runs is None else <const int64_t*>cnp.PyArray_DATA(
                <cnp.ndarray>runs)
            ls[k].n_runs = 0 if runs is None else runs.shape[0]
        runners = []
        for q in range(n_parts):
            parts[q].instructions = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>instructions)
            parts[q].segments = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>segments)
            parts[q].n_segments = n_segments
            parts[q].leaves = ls
            parts[q].params = <const double*>cnp.PyArray_DATA(<cnp.ndarray>params)
            parts[q].owners = cnp.PyArray_DATA(<cnp.ndarray>owners)
            parts[q].wide_owners = cnp.PyArray_TYPE(<cnp.ndarray>owners) == cnp.NPY_UINT16
            parts[q].adds = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>adds)
            parts[q].n_adds = adds.shape[0]
            parts[q].indptr = cnp.PyArray_DATA(<cnp.ndarray>indptr)
            parts[q].wide_indptr = wide_indptr
            parts[q].out = <double*>cnp.PyArray_DATA(<cnp.ndarray>out)
            parts[q].nnz = nnz
            parts[q].part = q
            parts[q].n_parts = n_parts
            runner = _Runner()
            runner.part = &parts[q]
            runners.append(runner)
        _run_in_threads(runners)
        for q in range(n_parts):
            if parts[q].fault != FAULT_NONE and fault == FAULT_NONE:
                fault = parts[q].fault
    finally:
        # (the parts' threads are done: _run_in_threads waited for them)
        free(ls)
        free(parts)
    if fault == FAULT_MEMORY:
        raise MemoryError()
    if fault != FAULT_NONE:
        # (the reference names what is wrong)
        return _reference.run_program(instructions, segments, leaves, params, owners, adds,
                                      indptr)
    return out
