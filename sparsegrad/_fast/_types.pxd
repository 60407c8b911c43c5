# Types shared by the compiled kernels (``_kernels.pyx``).
#
# Index arrays (indptr, indices, row numbers) are always int64, as in the
# reference kernels, so only the value type varies.  ``data_t`` is the single
# fused type for values: one specialisation per dtype that Jacobians actually
# hold.  Every other dtype (longdouble, clongdouble, float16, integers, bool,
# object) is rare enough that the def wrappers hand it to the pure-numpy
# reference kernel instead of multiplying the compiled code by ten.

ctypedef float complex complex64_t
ctypedef double complex complex128_t

ctypedef fused data_t:
    float
    double
    complex64_t
    complex128_t

# Index type of the arrays ``merge_scaled`` writes (its ``index_dtype``): the
# inputs stay int64, the output may be int32 for scipy.
from libc.stdint cimport int32_t, int64_t

ctypedef fused oindex_t:
    int32_t
    int64_t
