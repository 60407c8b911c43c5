"""Regressions of the ufunc layer beyond the common float64 case.

Each test pins one bug: mixed dtypes, ``dtype=`` casts to real results,
ufunc methods (``reduce``, ``accumulate``, ``at``) at their edges, and
operands that numpy would compute with element by element.
"""
import warnings

import numpy as np
import pytest
import scipy.sparse
import scipy.special as sc

import sparsegrad
from sparsegrad import forward


def _jac(y):
    return y.dvalue.toarray()


def _same_values(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)


# ---- a real result of complex values keeps the real part of the Jacobian -----------

X0 = np.array([0.5, 1.5])


@pytest.mark.parametrize("g, derivative", [
    (lambda s: np.multiply(s * (1 + 2j), 2, dtype=float, casting="unsafe"),
     lambda x: 2 + 0 * x),
    # (numpy's loop is real: it takes the real part of the input, exp(x) here)
    (lambda s: np.exp(s * (1 + 2j), dtype=float, casting="unsafe"), np.exp),
    (lambda s: np.sin(s * (1 + 2j) + 1j, dtype=float, casting="unsafe"), np.cos),
    (lambda s: np.multiply(s * (1 + 2j), s * (1 - 1j), dtype=float, casting="unsafe"),
     lambda x: 2 * x),
    (lambda s: np.maximum(s * (1 + 2j), 0, dtype=float, casting="unsafe"),
     lambda x: 1 + 0 * x),
    (lambda s: np.add.reduce(s * (1 + 2j) * np.ones((3, 1)), axis=0, dtype=float),
     lambda x: 3 + 0 * x),
    # a product of the real parts, not the real part of the product
    (lambda s: np.multiply.reduce(s * (1 + 2j) * np.ones((3, 1)), axis=0, dtype=float),
     lambda x: 3 * x * x),
    (lambda s: np.multiply.accumulate(s * (1 + 2j) * np.ones((3, 1)), dtype=float)[2],
     lambda x: 3 * x * x),
], ids=["multiply", "exp", "sin", "multiply-both", "maximum", "add.reduce",
        "multiply.reduce", "multiply.accumulate"])
def test_real_dtype_result_of_complex_values_has_a_real_jacobian(g, derivative):
    # numpy computes with the real parts of the inputs; the imaginary part of
    # a complex Jacobian must not survive into later complex arithmetic:
    # d(1j * y)/dx = 1j * dy/dx with dy/dx real
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        y = g(forward.seed(X0))
        _same_values(y.value, g(X0))
        z = np.conj(y * 1j)
    np.testing.assert_allclose(_jac(z), np.diag(-1j * derivative(X0)), rtol=1e-15,
                               atol=1e-15)


def test_add_at_complex_increment_into_a_real_target():
    def g(s):
        t = s * 1.0
        np.add.at(t, [0, 0], s * (1 + 2j))
        return t * 1j

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        y = g(forward.seed(X0))
        _same_values(y.value, g(X0))
        np.testing.assert_array_equal(_jac(y), [[2j, 1j], [0, 1j]])
        # a complex seed: the real part has no complex derivative
        z = forward.seed(np.array([1 + 1j, 2.0]))
        with pytest.raises(sparsegrad.UnsupportedOperationError, match="add.at"):
            np.add.at(np.zeros(2, like=z), [0, 1], z)


def test_add_at_into_an_integer_target_is_piecewise_constant():
    x = forward.seed(np.array([0.5, 1.5, -2.0]))
    t = x.astype(np.int64)
    np.add.at(t, [0, 1], x[:2] * 3.0)
    _same_values(t.value, np.array([1, 5, -2]))
    np.testing.assert_array_equal(_jac(t), np.zeros((3, 3)))


# ---- operands numpy computes with element by element: refused ------------------------

@pytest.mark.parametrize("call", [
    lambda x, A: A / x, lambda x, A: x / A, lambda x, A: x + A, lambda x, A: A - x,
    lambda x, A: np.maximum(x, A), lambda x, A: np.hypot(A, x)],
    ids=["A/x", "x/A", "x+A", "A-x", "maximum", "hypot"])
def test_scipy_sparse_operand_of_an_elementwise_ufunc_is_refused(call):
    A = scipy.sparse.csr_matrix(np.array([[1.0, 0, 2], [0, 3, 0], [4, 0, 5]]))
    x = forward.seed(np.array([0.5, 1.5, -2.0]))
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="sparse"):
        call(x, A)
    # the matrix product stays
    np.testing.assert_array_equal(_jac(A @ x), A.toarray())


# ---- ufunc methods at their edges -------------------------------------------------

M0 = np.array([[0.5, 1.5, -2.0], [0.7, -0.3, 2.5]])


@pytest.mark.parametrize("ufunc", [np.add, np.multiply], ids=lambda u: u.__name__)
def test_accumulate_axis_as_numpy_reads_it(ufunc):
    x = forward.seed(M0)
    with pytest.raises(ValueError):
        ufunc.accumulate(M0, axis=None)
    with pytest.raises(ValueError):  # (np.cumsum would flatten the array)
        ufunc.accumulate(x, axis=None)
    with pytest.raises(TypeError):
        ufunc.accumulate(x[0, 0] * 1.0)
    y = ufunc.accumulate(x, axis=(1,))
    _same_values(y.value, ufunc.accumulate(M0, axis=1))
    ref = ufunc.accumulate(x, axis=1)
    np.testing.assert_array_equal(_jac(y), _jac(ref))


@pytest.mark.parametrize("axis", [0, -1, None])
@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.maximum, np.minimum],
                         ids=lambda u: u.__name__)
def test_reduce_of_a_0d_value(ufunc, axis):
    x = forward.seed(np.array([0.5, 1.5]))
    y = ufunc.reduce(x[1] * 2.0, axis=axis)
    _same_values(y.value, ufunc.reduce(np.array(3.0), axis=axis))
    np.testing.assert_array_equal(_jac(y), [[0.0, 2.0]])


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum], ids=lambda u: u.__name__)
def test_maximum_reduce_with_dtype(ufunc):
    x = forward.seed(M0)
    y = ufunc.reduce(x, axis=1, dtype=np.float32)
    _same_values(y.value, ufunc.reduce(M0, axis=1, dtype=np.float32))
    chosen = np.argmax(M0, axis=1) if ufunc is np.maximum else np.argmin(M0, axis=1)
    expected = np.zeros((2, 6), dtype=np.float32)
    expected[[0, 1], [chosen[0], 3 + chosen[1]]] = 1
    assert y.dvalue.dtype == np.float32
    np.testing.assert_array_equal(_jac(y), expected)


# ---- integer and bool operands are cast as numpy's loop casts them -----------------

def test_small_integer_operand_does_not_wrap_in_a_partial():
    x0 = np.array([0.5, 1.5])
    c = np.array([20, 200], dtype=np.uint8)
    y = np.arctan2(forward.seed(x0), c)
    _same_values(y.value, np.arctan2(x0, c))
    expected = c / (c.astype(float) ** 2 + x0 ** 2)
    np.testing.assert_allclose(np.diag(_jac(y)), expected, rtol=1e-15)


def test_bool_operand_of_a_rule():
    x0 = np.array([0.5, 1.5])
    b = np.array([True, False])
    y = np.arctan2(b, forward.seed(x0))  # (-b of a bool array is an error)
    _same_values(y.value, np.arctan2(b, x0))
    one = b.astype(float)
    np.testing.assert_allclose(np.diag(_jac(y)), -one / (x0 ** 2 + one), rtol=1e-15)
    # log1p(True) is float16: the partial must be as precise as the float64 value
    y = sc.xlog1py(forward.seed(x0.astype(np.float32)), np.array([True, True]))
    assert y.value.dtype == np.float64
    np.testing.assert_allclose(np.diag(_jac(y)), np.log(2.0), rtol=1e-15)


# ---- rules ------------------------------------------------------------------------

def test_fmod_partial_is_the_quotient_of_the_value():
    # fmod(1, 0.1) = 1 - 9 * 0.1 (0.1 is slightly above 1/10), but 1 / 0.1 rounds to 10
    x = np.array([1.0, -1.0, 1.0, 0.9, 3.0, -7.0])
    y0 = np.array([0.1, 0.1, -0.1, 0.3, np.inf, 2.0])
    y = np.fmod(x, forward.seed(y0))
    _same_values(y.value, np.fmod(x, y0))
    np.testing.assert_array_equal(np.diag(_jac(y)), [-9.0, 9.0, 9.0, -3.0, 0.0, 3.0])


def test_heaviside_is_its_second_argument_where_the_first_is_zero():
    x = forward.seed(np.array([0.0, -1.0, 2.0, 0.0]))
    y = np.heaviside(x[:2, None] * 1.0, x[2:])
    _same_values(y.value, np.array([[2.0, 0.0], [0.0, 0.0]]))
    expected = np.zeros((4, 4))
    expected[0, 2] = expected[1, 3] = 1.0
    np.testing.assert_array_equal(_jac(y), expected)
    # no leak of an infinite derivative of the unselected rows
    with np.errstate(divide="ignore"):
        y = np.heaviside(np.array([0.0, 1.0]), np.sqrt(forward.seed(np.array([4.0, 0.0]))))
    np.testing.assert_array_equal(_jac(y), [[0.25, 0.0], [0.0, 0.0]])
    # sparsity mode: the pattern of the second argument
    s = forward.seed_sparsity(np.array([0.5, 1.5]))
    assert np.heaviside(np.array([0.0, 1.0]), s).sparsity.toarray().diagonal().all()


@pytest.mark.parametrize("call", [
    lambda x: np.array([1.0, 2.0], dtype=object) * x,
    lambda x: np.add(x, 1.0, dtype=object),
    lambda x: np.add.reduce(x, dtype=object),
    lambda x: np.multiply.accumulate(x, dtype=object)],
    ids=["multiply", "add-dtype", "add.reduce", "multiply.accumulate"])
def test_object_dtype_is_refused(call):
    # numpy calls the elements' methods: the result was given a zero Jacobian
    x = forward.seed(np.array([1.0, 2.0]))
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="object"):
        call(x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_complex_to_real_astype_warns_as_numpy(dtype):
    z0 = np.array([1.0 + 2.0j, -3.0 + 0.5j])
    with pytest.warns(np.exceptions.ComplexWarning):
        z0.astype(dtype)
    x = forward.seed(np.array([1.0, 2.0]))
    with pytest.warns(np.exceptions.ComplexWarning, match="discards the imaginary part") as record:
        y = (x * (1 + 1j)).astype(dtype)
    assert len(record) == 1                        # (once, as numpy)
    np.testing.assert_array_equal(y.value, (np.array([1.0, 2.0]) * (1 + 1j)).real.astype(dtype))


def test_complex_to_bool_astype_is_nonzero_as_numpy():
    x = forward.seed(np.array([0.0, 2.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = (x * 1j).astype(bool)
    np.testing.assert_array_equal(y.value, [False, True])
    assert y.dvalue.nnz == 0
