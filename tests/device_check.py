"""The one check of the fake-device tests: a result computed on the device equals
the CPU's.

The device path must give the CPU backend's value (left on the device), the same
stored pattern (structural zeros included) and the same Jacobian values, to
rounding.
"""
import numpy as np
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from sparsegrad.gpu._device import DeviceArray, fake


def assert_matches_cpu(got, expected, rtol, atol=0.0, value_rtol=None, value_atol=0.0):
    """``got`` (from a device seed) against ``expected`` (the same program on the CPU).

    ``rtol``/``atol`` bound the Jacobian values, ``value_rtol``/``value_atol``
    the values (``value_rtol`` None: the values are equal bit for bit).
    """
    assert isinstance(got.value, DeviceArray), type(got.value)
    value = fake.asnumpy(got.value)
    if value_rtol is None:
        assert_array_equal(value, expected.value)
    else:
        assert_allclose(value, expected.value, rtol=value_rtol, atol=value_atol)
    J, J_cpu = got.dvalue, expected.dvalue
    if sp.issparse(J_cpu):
        J, J_cpu = sp.csr_matrix(J), sp.csr_matrix(J_cpu)
        assert J.shape == J_cpu.shape
        assert_array_equal(J.indptr, J_cpu.indptr)
        assert_array_equal(J.indices, J_cpu.indices)
        J, J_cpu = J.data, J_cpu.data
    assert_allclose(np.asarray(J), np.asarray(J_cpu), rtol=rtol, atol=atol)
