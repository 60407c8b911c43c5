"""CUDA kernels for two steps of the device kernel interface (opt-in, CuPy only).

The device kernels (:mod:`sparsegrad.gpu._kernels`) are the namespace-generic
reference kernels; on CuPy arrays they expand "one value per row" into "one
value per entry" with a ``searchsorted`` over the running counts, because
``cupy.repeat`` takes no array of counts.  The two kernels here do that
expansion directly, one thread per row:

* ``sg_row_sources``: ``source[p] = starts[r] + (p - out_indptr[r])`` for the
  entries ``p`` of output row ``r`` (the source positions of a row gather);
* ``sg_scale_rows<T>``: ``out[p] = data[p] * scale[r * step]`` (or
  ``scale[r * step]`` without data) for float and double, the data of
  ``diag(scale) @ M`` rounded as numpy rounds one multiplication.

They match the reference kernels on an H200 (``pytest -m gpu``) but gave no
measurable gain there (docs/gpu.md): :func:`enabled` is False unless
``SPARSEGRAD_GPU_RAWKERNELS=1`` is set.  The test suite compiles :data:`SOURCE`
with ``nvcc`` wherever nvcc is installed, so syntax and type errors are caught
without a device.

>>> "sg_row_sources" in SOURCE
True
"""
import os

__all__ = ["SOURCE", "TEMPLATES", "enabled", "row_sources", "scale_rows"]

SOURCE = r"""
extern "C" __global__ void sg_row_sources(const long long* out_indptr,
                                          const long long* starts,
                                          long long n_rows, long long* source)
{
    long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    long long first = out_indptr[r];
    long long start = starts[r];
    for (long long p = first; p < out_indptr[r + 1]; ++p)
        source[p] = start + (p - first);
}

template <typename T>
__global__ void sg_scale_rows(const long long* indptr, const T* data, const T* scale,
                              long long step, long long n_rows, T* out)
{
    long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    T s = scale[r * step];
    for (long long p = indptr[r]; p < indptr[r + 1]; ++p)
        out[p] = data ? data[p] * s : s;
}
"""

#: the template instances compiled (CuPy name expressions)
TEMPLATES = ("sg_scale_rows<float>", "sg_scale_rows<double>")

_THREADS = 256
_MODULE = None


def enabled(*arrays):
    """Whether the CUDA kernels serve these arrays: opted in, and all CuPy arrays."""
    if os.environ.get("SPARSEGRAD_GPU_RAWKERNELS", "") in ("", "0"):
        return False
    from .._backend import is_cupy
    return all(a is None or is_cupy(a) for a in arrays)


def _module():
    global _MODULE
    if _MODULE is None:
        import cupy
        _MODULE = cupy.RawModule(code=SOURCE, options=("--std=c++11",),
                                 name_expressions=TEMPLATES)
    return _MODULE


def _blocks(n):
    return ((int(n) + _THREADS - 1) // _THREADS,)


def row_sources(out_indptr, starts):
    """Source positions of the entries of a row gather (see the module docstring)."""
    import cupy
    n_rows = len(starts)
    source = cupy.empty(int(out_indptr[-1]), dtype=cupy.int64)
    if n_rows:
        _module().get_function("sg_row_sources")(
            _blocks(n_rows), (_THREADS,),
            (out_indptr, starts, cupy.int64(n_rows), source))
    return source


def scale_rows(indptr, data, scale):
    """Data of ``diag(scale) @ M`` for float32/float64 (None when not served here)."""
    import cupy
    dtype = cupy.result_type(scale, *(() if data is None else (data,)))
    if dtype not in (cupy.float32, cupy.float64):
        return None
    n_rows = len(indptr) - 1
    scale = cupy.asarray(scale, dtype=dtype)
    step = scale.strides[0] // scale.itemsize if scale.ndim else 0
    data = None if data is None else cupy.ascontiguousarray(data, dtype=dtype)
    out = cupy.empty(int(indptr[-1]), dtype=dtype)
    if n_rows:
        name = "sg_scale_rows<%s>" % ("float" if dtype == cupy.float32 else "double")
        _module().get_function(name)(
            _blocks(n_rows), (_THREADS,),
            (indptr, data if data is not None else 0, scale, cupy.int64(step),
             cupy.int64(n_rows), out))
    return out
