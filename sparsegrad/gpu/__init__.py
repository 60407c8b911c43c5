"""GPU backend: forward values whose value and Jacobian live on a CUDA device (CuPy).

``gpu.seed(x)`` takes a ``cupy.ndarray`` (or copies a host array to the
device) and gives a forward value like :func:`sparsegrad.forward.seed`; its
``.dvalue`` is a ``cupyx.scipy.sparse.csr_matrix``.  ``forward.seed`` on a
CuPy array does the same.  The forward logic is sparsegrad's own, run against
CuPy's array namespace (:mod:`sparsegrad._backend`); the kernels are those of
:mod:`sparsegrad.gpu._kernels`.  CuPy is imported only here, and only when a
GPU is used.

Status: the backend plumbing (seeds, the factored Jacobian, merges, gathers,
``.dvalue``) runs against any array namespace and is exercised on the CPU by
the test suite's fake device; operations that still create host arrays raise
CuPy's ``TypeError`` on implicit host/device conversion rather than computing
anything wrong.

>>> from sparsegrad import gpu
>>> gpu.available() in (True, False)
True
"""
from .. import _backend, forward

__all__ = ["available", "backend", "seed", "seed_sparsity"]

_BACKEND = None


def available():
    """Whether CuPy is installed and sees at least one CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device: all mean "no GPU"
        return False


def backend():
    """The CUDA backend (CuPy arrays, ``cupyx.scipy.sparse``), registered on first use.

    Raises
    ------
    ImportError
        When CuPy is not installed.
    """
    global _BACKEND
    if _BACKEND is None:
        import cupy
        import cupyx.scipy.sparse
        from . import _kernels
        _BACKEND = _backend.Backend("cuda", cupy, cupyx.scipy.sparse, _kernels)
        _backend.register(cupy.ndarray, _BACKEND)
    return _BACKEND


def _on_device(arrays, name):
    if not available():
        raise RuntimeError("sparsegrad.gpu.%s: no CUDA device (CuPy missing, or no GPU "
                           "visible); use sparsegrad.forward.%s on the CPU" % (name, name))
    device = backend()
    return [_backend.to_device(x, device) for x in arrays]


def seed(*x):
    """:func:`sparsegrad.forward.seed` on the GPU: host arrays are copied to the device."""
    return forward.seed(*_on_device(x, "seed"))


def seed_sparsity(*x):
    """:func:`sparsegrad.forward.seed_sparsity` on the GPU."""
    return forward.seed_sparsity(*_on_device(x, "seed_sparsity"))
