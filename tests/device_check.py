"""The one check of the device tests: a result computed on a device equals the
CPU's.

The device path must give the CPU backend's value (left on the device), the same
stored pattern (structural zeros included) and the same Jacobian values, to
rounding.  The device is the fake of ``sparsegrad.gpu._device`` or CuPy (the
``device`` fixture of conftest.py).
"""
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from sparsegrad.gpu._device import fake, fake_backend

#: the devices the device-path tests run on (:func:`namespace` of each)
DEVICES = ["fake", pytest.param("cupy", marks=pytest.mark.gpu)]


def namespace(name):
    """The array module of device ``name``, its sparsegrad backend registered:
    ``"fake"`` (the fake device, always there) or ``"cupy"`` (a real GPU; the test
    is skipped, saying why, without CuPy or a CUDA device)."""
    if name == "fake":
        fake_backend()
        return fake
    cupy = pytest.importorskip("cupy")
    try:
        n_devices = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver or runtime missing
        pytest.skip("no CUDA device: %s" % exc)
    if n_devices < 1:
        pytest.skip("no CUDA device")
    from sparsegrad import gpu
    gpu.backend()
    return cupy


#: the least tolerances on a real GPU by precision, (rtol, atol): double, single
#: (see assert_matches_cpu)
GPU_TOLERANCES = {8: (1e-12, 1e-14), 4: (1e-5, 1e-6)}


def gpu_tolerance(dtype):
    """``(rtol, atol)`` of a real GPU's rounding for results of ``dtype``."""
    dtype = np.dtype(dtype)
    size = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    return GPU_TOLERANCES[4 if size <= 4 else 8]


def on_host(array):
    """A device result (dense or sparse, fake or CuPy) as numpy / SciPy."""
    if sp.issparse(array) or isinstance(array, np.ndarray) and not isinstance(
            array, fake.ndarray):
        return array
    if isinstance(array, fake.ndarray):
        return fake.asnumpy(array)
    return array.get()       # CuPy arrays and cupyx.scipy.sparse matrices


def assert_matches_cpu(got, expected, rtol, atol=0.0, value_rtol=None, value_atol=0.0,
                       device=fake):
    """``got`` (from a seed on ``device``) against ``expected`` (the same program on
    the CPU).

    ``rtol``/``atol`` bound the Jacobian values, ``value_rtol``/``value_atol``
    the values (``value_rtol`` None: the values are equal bit for bit).  On a
    real GPU the math library rounds differently from the CPU's (``exp``,
    ``sin``, fused multiply-adds: a few ulp), so there the bounds are at least
    those of :func:`gpu_tolerance` (the atol for values that cancel to ~0).
    """
    if device is not fake:
        least_rtol, least_atol = gpu_tolerance(expected.value.dtype)
        rtol, atol = max(rtol, least_rtol), max(atol, least_atol)
        value_rtol, value_atol = max(value_rtol or 0.0, least_rtol), max(value_atol, least_atol)
    assert isinstance(got.value, device.ndarray), type(got.value)
    value = device.asnumpy(got.value)
    if value_rtol is None:
        assert_array_equal(value, expected.value)
    else:
        assert_allclose(value, expected.value, rtol=value_rtol, atol=value_atol)
    J, J_cpu = on_host(got.dvalue), expected.dvalue
    if sp.issparse(J_cpu):
        J, J_cpu = sp.csr_matrix(J), sp.csr_matrix(J_cpu)
        assert J.shape == J_cpu.shape
        assert_array_equal(J.indptr, J_cpu.indptr)
        assert_array_equal(J.indices, J_cpu.indices)
        J, J_cpu = J.data, J_cpu.data
    assert_allclose(np.asarray(J), np.asarray(J_cpu), rtol=rtol, atol=atol)
