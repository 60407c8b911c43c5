# Types for the compiled build of _jacobian.py (an augmenting .pxd: Cython reads
# it beside the .py, which stays plain Python and runs unchanged from source; see
# sparsegrad/_compiled.py).  Every elementwise operation makes a Jacobian and
# scales and sums terms: as an extension type its fields are read in C by its
# methods and by the functions below, whose calls within the module are C calls.
# Functions holding a generator expression (a closure) cannot be cpdef.
import cython

cdef class Jacobian:
    cdef public object seed
    cdef public object n_rows
    cdef public object _terms
    cdef public object _blocks
    cdef public object _zero

cpdef _is_vector(factor)
cpdef _is_one(factor)
cpdef _factor(s, d)
cpdef _vector(d)
cpdef _scalar_keeps_dtype(s, d)
cpdef _times(d, factor)
cpdef _combine(first, second)
cpdef _fused_sum(s, d, s2, d2)
cpdef _sum_of_factors(d, d2)

@cython.locals(J=Jacobian)
cpdef _built(seed, n_rows, terms)

@cython.locals(J=Jacobian, combined=dict)
cpdef _summed(seed, n_rows, jacobians)
