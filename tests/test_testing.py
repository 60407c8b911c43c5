"""Tests of the oracles in ``sparsegrad.testing`` themselves.

The numerical Jacobians are checked against analytic Jacobians, and
``assert_jacobian_equal`` / ``dense_jacobian`` against hand-made stand-ins for
forward values, so that these tests do not rely on forward mode.  Only the
last section runs ``check_jacobian`` end to end.
"""
from collections import namedtuple

import numpy as np
import pytest
import scipy.sparse

from sparsegrad.testing import (assert_jacobian_equal, check_jacobian, dense_jacobian,
                                numerical_jacobian)

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

METHODS = ["complex", "central"]
# accuracy to expect from each method in double precision
METHOD_RTOL = {"complex": 1e-14, "central": 1e-8}


# ---- numerical_jacobian on functions with known Jacobians --------------------

@pytest.mark.parametrize("method", METHODS)
def test_linear_map_gives_the_matrix(method, rng):
    A = rng.standard_normal((4, 3))
    x = rng.standard_normal(3)
    J = numerical_jacobian(lambda v: A @ v, x, method=method)
    assert J.shape == (4, 3)
    np.testing.assert_allclose(J, A, rtol=METHOD_RTOL[method], atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", [(), (1,), (5,), (2, 3), (2, 1, 3)],
                         ids=lambda s: "shape%s" % (s,))
def test_elementwise_exp_is_diagonal_in_c_order(method, shape, rng):
    x = rng.uniform(-1, 1, shape)
    J = numerical_jacobian(np.exp, x, method=method)
    assert J.shape == (x.size, x.size)
    np.testing.assert_allclose(J, np.diag(np.exp(x).ravel()), rtol=METHOD_RTOL[method],
                               atol=1e-13)


@pytest.mark.parametrize("method", METHODS)
def test_rows_follow_the_output_in_c_order(method):
    # f(x)[i, j] = c[j] * x[i] ** 2, output (2, 3), seed (2,)
    c = np.array([1.0, 2.0, 3.0])
    x = np.array([0.5, -2.0])
    J = numerical_jacobian(lambda v: v[:, None] ** 2 * c, x, method=method)
    expected = np.zeros((6, 2))
    expected[0:3, 0] = 2 * x[0] * c
    expected[3:6, 1] = 2 * x[1] * c
    np.testing.assert_allclose(J, expected, rtol=METHOD_RTOL[method], atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_scalar_output_gives_one_row(method):
    x = np.array([1.0, 2.0, 3.0])
    J = numerical_jacobian(lambda v: np.sum(v ** 3), x, method=method)
    assert J.shape == (1, 3)
    np.testing.assert_allclose(J[0], 3 * x ** 2, rtol=METHOD_RTOL[method])


def test_python_scalar_output_and_input():
    J = numerical_jacobian(lambda v: float(v) ** 2, 3.0, method="central")
    assert J.shape == (1, 1)
    np.testing.assert_allclose(J, [[6.0]], rtol=1e-9)


def test_coupled_function_both_methods_agree(rng):
    def f(v):
        return np.sin(v[1:] * v[:-1]) + np.exp(v[:-1]) / (1 + v[1:] ** 2)

    x = rng.uniform(-1, 1, 6)
    expected = np.zeros((5, 6))
    a, b = x[:-1], x[1:]
    i = np.arange(5)
    expected[i, i] = np.cos(a * b) * b + np.exp(a) / (1 + b ** 2)
    expected[i, i + 1] = np.cos(a * b) * a - np.exp(a) * 2 * b / (1 + b ** 2) ** 2
    for method in METHODS:
        np.testing.assert_allclose(numerical_jacobian(f, x, method=method), expected,
                                   rtol=METHOD_RTOL[method], atol=1e-10)


def test_input_is_not_modified(rng):
    x = rng.standard_normal(4)
    x0 = x.copy()
    for method in METHODS:
        numerical_jacobian(np.sin, x, method=method)
    np.testing.assert_array_equal(x, x0)


def test_complex_valued_function_of_real_x_by_central_differences():
    x = np.array([0.5, -1.5])
    J = numerical_jacobian(lambda v: v * (1 + 2j) + np.exp(1j * v), x, method="central")
    assert np.iscomplexobj(J)
    np.testing.assert_allclose(J, np.diag(1 + 2j + 1j * np.exp(1j * x)), rtol=1e-8)


def test_holomorphic_function_of_complex_x_gives_complex_derivative():
    z = np.array([0.5 + 0.3j, -1.0 - 0.2j])
    J = numerical_jacobian(lambda v: v ** 3 + np.sin(v), z, method="central")
    np.testing.assert_allclose(J, np.diag(3 * z ** 2 + np.cos(z)), rtol=1e-8)


def test_complex_step_refuses_complex_x_or_complex_output():
    with pytest.raises(ValueError, match="real x"):
        numerical_jacobian(np.exp, np.array([1j]), method="complex")
    with pytest.raises(ValueError, match="real-valued"):
        numerical_jacobian(lambda v: v * 1j, np.array([1.0]), method="complex")


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown method"):
        numerical_jacobian(np.exp, np.ones(2), method="forward")


def test_complex_step_is_exact_where_central_differences_are_not():
    # d/dx exp(x) at x = 20: central differences lose ~1e-10, the complex step nothing
    x = np.array([20.0])
    exact = np.exp(20.0)
    assert numerical_jacobian(np.exp, x, method="complex")[0, 0] == pytest.approx(
        exact, rel=1e-15)
    assert numerical_jacobian(np.exp, x, method="central")[0, 0] == pytest.approx(
        exact, rel=1e-8)


def test_central_step_scales_with_x():
    # an absolute step of eps**(1/3) would cancel catastrophically at x = 1e8
    x = np.array([1e8, 1e-3, -1e6])
    J = numerical_jacobian(np.log1p, np.abs(x), method="central")
    np.testing.assert_allclose(np.diag(J), 1 / (1 + np.abs(x)), rtol=1e-8)


def test_explicit_steps():
    x = np.array([1.0, 2.0])
    # quadratic: central differences are exact for any step
    J = numerical_jacobian(lambda v: v ** 2, x, method="central", step=0.5)
    np.testing.assert_allclose(J, np.diag(2 * x), rtol=1e-15)
    J = numerical_jacobian(lambda v: v ** 2, x, method="central", step=[0.25, 0.125])
    np.testing.assert_allclose(J, np.diag(2 * x), rtol=1e-15)
    J = numerical_jacobian(np.sin, x, method="complex", step=1e-30)
    np.testing.assert_allclose(J, np.diag(np.cos(x)), rtol=1e-15)


@pytest.mark.parametrize("method", METHODS)
def test_float32_input_is_differentiated_in_double_precision(method):
    x = np.array([0.3, 1.7], dtype=np.float32)
    J = numerical_jacobian(np.sin, x, method=method)
    assert J.dtype == np.float64
    np.testing.assert_allclose(J, np.diag(np.cos(x.astype(np.float64))),
                               rtol=METHOD_RTOL[method])


def test_longdouble_is_kept():
    x = np.array([0.3, 1.7], dtype=np.longdouble)
    J = numerical_jacobian(np.sin, x, method="complex")
    assert J.dtype == np.longdouble
    eps = np.finfo(np.longdouble).eps
    np.testing.assert_allclose(J, np.diag(np.cos(x)), rtol=10 * eps)
    J = numerical_jacobian(np.sin, x, method="central")
    assert J.dtype == np.longdouble
    np.testing.assert_allclose(J, np.diag(np.cos(x)), rtol=100 * np.cbrt(eps) ** 2)


def test_integer_input_is_promoted():
    J = numerical_jacobian(lambda v: v * v, np.array([1, 2]), method="central")
    assert J.dtype == np.float64
    np.testing.assert_allclose(J, np.diag([2.0, 4.0]), rtol=1e-9)


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=3),
                  elements=st.floats(-3, 3)),
       st.floats(-2, 2))
def test_polynomial_and_trig_match_analytic(x, a):
    def f(v):
        return a * v ** 3 + np.sin(v) * np.cos(a)

    expected = np.diag((3 * a * x ** 2 + np.cos(x) * np.cos(a)).ravel())
    for method in METHODS:
        np.testing.assert_allclose(numerical_jacobian(f, x, method=method), expected,
                                   rtol=METHOD_RTOL[method] * 100, atol=1e-7)


# ---- dense_jacobian and assert_jacobian_equal on stand-in values ---------------

Fake = namedtuple("Fake", "value dvalue")


def _csr(dense, dtype=None):
    return scipy.sparse.csr_matrix(np.asarray(dense, dtype=dtype))


def test_dense_jacobian_of_csr_and_0d():
    J = np.array([[1.0, 0.0], [0.0, 3.0]])
    np.testing.assert_array_equal(dense_jacobian(Fake(np.zeros(2), _csr(J))), J)
    scalar = dense_jacobian(Fake(np.float64(1.0), np.array(2.5)))
    assert scalar.shape == (1, 1) and scalar[0, 0] == 2.5
    row = dense_jacobian(Fake(np.array(1.0), _csr([[1.0, 2.0]])))
    np.testing.assert_array_equal(row, [[1.0, 2.0]])


def test_dense_jacobian_rejects_plain_arrays():
    with pytest.raises(TypeError, match="forward value"):
        dense_jacobian(np.ones(3))


def test_assert_jacobian_equal_accepts_a_correct_jacobian():
    J = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    assert_jacobian_equal(Fake(np.zeros(2), _csr(J)), J)
    assert_jacobian_equal(Fake(np.zeros(2), _csr(J)), J + 1e-12, rtol=1e-9, atol=1e-9)


def test_assert_jacobian_equal_accepts_stored_zeros():
    # structural zeros are part of the pattern and allowed
    J = scipy.sparse.csr_matrix((np.array([1.0, 0.0]), np.array([0, 1]), np.array([0, 1, 2])),
                                shape=(2, 2))
    assert_jacobian_equal(Fake(np.zeros(2), J), np.diag([1.0, 0.0]))


def test_assert_jacobian_equal_value_mismatch():
    J = np.eye(2)
    with pytest.raises(AssertionError, match="differs"):
        assert_jacobian_equal(Fake(np.zeros(2), _csr(J)), 2 * J)


def test_assert_jacobian_equal_wrong_type():
    J = np.eye(2)
    with pytest.raises(AssertionError, match="csr_matrix"):
        assert_jacobian_equal(Fake(np.zeros(2), scipy.sparse.csc_matrix(J)), J)
    with pytest.raises(AssertionError, match="csr_matrix"):
        assert_jacobian_equal(Fake(np.zeros(2), scipy.sparse.csr_array(J)), J)
    with pytest.raises(AssertionError, match="csr_matrix"):
        assert_jacobian_equal(Fake(np.zeros(2), J), J)


def test_assert_jacobian_equal_wrong_shape():
    with pytest.raises(AssertionError, match="shape"):
        assert_jacobian_equal(Fake(np.zeros(2), _csr(np.eye(2))), np.eye(2, 3))
    with pytest.raises(AssertionError, match="elements"):
        assert_jacobian_equal(Fake(np.zeros(3), _csr(np.eye(2))), np.eye(2))


@pytest.mark.parametrize("value_dtype, jac_dtype", [
    (np.float64, np.float32), (np.float32, np.float64), (np.complex128, np.float64),
    (np.longdouble, np.float64), (np.int64, np.int64)])
def test_assert_jacobian_equal_dtype_must_follow_the_value(value_dtype, jac_dtype):
    J = np.eye(2)
    with pytest.raises(AssertionError, match="dtype"):
        assert_jacobian_equal(Fake(np.zeros(2, value_dtype), _csr(J, jac_dtype)), J)


@pytest.mark.parametrize("value_dtype, jac_dtype", [
    (np.float32, np.float32), (np.complex128, np.complex128),
    (np.longdouble, np.longdouble), (np.int64, np.float64), (np.bool_, np.float64)])
def test_assert_jacobian_equal_dtype_accepted(value_dtype, jac_dtype):
    J = np.eye(2)
    assert_jacobian_equal(Fake(np.zeros(2, value_dtype), _csr(J, jac_dtype)), J,
                          rtol=1e-6)


def test_assert_jacobian_equal_unsorted_indices():
    J = scipy.sparse.csr_matrix((np.array([2.0, 1.0]), np.array([1, 0]), np.array([0, 2])),
                                shape=(1, 2))
    with pytest.raises(AssertionError, match="canonical"):
        assert_jacobian_equal(Fake(np.zeros(1), J), np.array([[1.0, 2.0]]))


def test_assert_jacobian_equal_duplicate_indices():
    J = scipy.sparse.csr_matrix((np.array([0.5, 0.5]), np.array([0, 0]), np.array([0, 2, 2])),
                                shape=(2, 2))
    with pytest.raises(AssertionError, match="canonical"):
        assert_jacobian_equal(Fake(np.zeros(2), J), np.array([[1.0, 0.0], [0.0, 0.0]]))


def test_assert_jacobian_equal_row_boundaries_are_not_duplicates():
    # column 0 ending row 0 and starting row 1 is fine; so are empty rows
    J = _csr([[0.0, 1.0], [0.0, 0.0], [1.0, 2.0]])
    assert_jacobian_equal(Fake(np.zeros(3), J), J.toarray())


def test_assert_jacobian_equal_missing_pattern_entry():
    # the values agree within the (loose) tolerance, but a nonzero of the
    # reference above atol must be stored
    J = _csr([[1.0, 0.0]])
    with pytest.raises(AssertionError, match="pattern"):
        assert_jacobian_equal(Fake(np.zeros(1), J), np.array([[1.0, 1e-3]]), rtol=2)
    # at most atol: numerical noise of a reference is not demanded in the pattern
    assert_jacobian_equal(Fake(np.zeros(1), J), np.array([[1.0, 1e-3]]), atol=2e-3)


def test_assert_jacobian_equal_zero_d():
    assert_jacobian_equal(Fake(np.array(1.0), np.array(3.0)), [[3.0]])
    assert_jacobian_equal(Fake(np.array(1.0), np.array(3.0)), [[3.0]], scalar_seed=True)
    # a 0-d value of a vector seed of size one is a (1, 1) csr_matrix
    assert_jacobian_equal(Fake(np.array(1.0), _csr([[3.0]])), [[3.0]], scalar_seed=False)
    with pytest.raises(AssertionError, match="0-d ndarray"):
        assert_jacobian_equal(Fake(np.array(1.0), _csr([[3.0]])), [[3.0]], scalar_seed=True)
    with pytest.raises(AssertionError, match="csr_matrix"):
        assert_jacobian_equal(Fake(np.array(1.0), np.array(3.0)), [[3.0]], scalar_seed=False)
    with pytest.raises(AssertionError):
        assert_jacobian_equal(Fake(np.array(1.0), np.array([3.0, 1.0])), [[3.0, 1.0]])


def test_assert_jacobian_equal_sparsity_mode():
    pattern = _csr([[True, False], [True, True]], bool)
    assert_jacobian_equal(Fake(np.zeros(2), pattern), [[2.0, 0.0], [0.0, 1.0]],
                          sparsity=True)
    with pytest.raises(AssertionError, match="pattern"):
        assert_jacobian_equal(Fake(np.zeros(2), pattern), [[2.0, 1.0], [0.0, 1.0]],
                              sparsity=True)
    with pytest.raises(AssertionError, match="dtype"):
        assert_jacobian_equal(Fake(np.zeros(2), _csr(np.eye(2))), np.eye(2), sparsity=True)


def test_assert_jacobian_equal_rejects_plain_arrays():
    with pytest.raises(AssertionError, match="forward value"):
        assert_jacobian_equal(np.zeros(2), np.eye(2))


# ---- check_jacobian end to end (uses forward mode) ------------------------------

def test_check_jacobian_smooth_function(rng):
    x = rng.uniform(0.5, 1.5, (2, 3))
    y = check_jacobian(lambda v: np.exp(v) * np.sin(v) + v ** 2, x, method="complex")
    assert y.dvalue.shape == (6, 6)
    check_jacobian(lambda v: np.exp(v) * np.sin(v) + v ** 2, x, method="central")


def test_check_jacobian_detects_a_wrong_value():
    def f(v):
        return v * 2 if isinstance(v, np.ndarray) else v * 3

    with pytest.raises(AssertionError):
        check_jacobian(f, np.array([1.0, 2.0]))


def test_check_jacobian_detects_a_wrong_derivative():
    # forward mode sees a constant, the reference sees x ** 2
    def f(v):
        return v ** 2 if isinstance(v, np.ndarray) else v * 0 + v.value ** 2

    with pytest.raises(AssertionError):
        check_jacobian(f, np.array([1.0, 2.0]))


def test_check_jacobian_scalar_seed():
    y = check_jacobian(lambda v: np.exp(v), np.array(0.5), method="complex")
    assert isinstance(y.dvalue, np.ndarray) and y.dvalue.ndim == 0
