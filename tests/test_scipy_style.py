"""The idioms of SciPy-style code.

A small residual written as ``np.array([f0, f1])`` of expressions of ``x``'s
elements (numpy makes an object array of forward values) or returned as a
list: every entry point stacks it into one forward value (its elements' shapes
after the array's own), on the eager and the recorded evaluation alike.
Functions of the shape only take forward values; a write into a plain array
stays an error, which names the line and its fix.
"""
import numpy as np
import pytest
import scipy.optimize

import sparsegrad
from sparsegrad import forward, optimize
from sparsegrad.testing import numerical_jacobian

from test_trace_parity import check

X = np.array([1.5, -0.5, 2.0])


def rosenbrock(x):
    return np.array([10 * (x[1] - x[0] ** 2), 1 - x[0]])


def rosenbrock_jacobian(x):
    return np.array([[-20 * x[0], 10.0], [-1.0, 0.0]])


def powell(x):
    # (scipy.optimize.root's documented example returns a list)
    return [x[0] + 0.5 * (x[0] - x[1]) ** 3 - 1.0, 0.5 * (x[1] - x[0]) ** 3 + x[1]]


CASES = {
    "object array of 0-d values": (rosenbrock, X[:2]),
    "list of 0-d values": (powell, X[:2]),
    "tuple of 0-d values": (lambda x: (x[0] * x[1], x[2]), X),
    "numbers among values": (lambda x: np.array([x[0] ** 2, 1.0, 0, x[1] / x[2]]), X),
    "2-d object array": (lambda x: np.array([[x[0], 2.0], [x[1] * x[2], np.exp(x[0])]]), X),
    "object array of 1-d values": (lambda x: np.array([x[1:] - x[:-1], x[1:] * x[:-1]]), X),
    "list of 1-d values": (lambda x: [np.sin(x), x ** 2, x[::-1]], X),
    "nested lists": (lambda x: [[x[0], x[1]], [x[2] * x[0], 3.0]], X),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("trace", [False, True])
def test_stacked_as_numpy_stacks_the_numbers(name, trace):
    f, x = CASES[name]
    value, J = sparsegrad.value_and_jacobian(f, trace=trace)(x)
    expected = np.array(f(x), dtype=np.float64)
    np.testing.assert_array_equal(value, expected)
    assert value.dtype == np.float64
    np.testing.assert_allclose(J.toarray(), numerical_jacobian(
        lambda v: np.array(f(v)).ravel(), x, method="complex"),
        rtol=1e-13, atol=1e-14)


def test_rosenbrock_is_the_hand_written_jacobian():
    J = sparsegrad.jacobian(rosenbrock)(np.array([0.5, 2.0]))
    np.testing.assert_array_equal(J.toarray(), rosenbrock_jacobian(np.array([0.5, 2.0])))


@pytest.mark.parametrize("name", CASES)
def test_recorded_is_the_eager_result_bit_for_bit(name):
    f, x = CASES[name]
    check(f, (x, x * -0.5, x + 3.0), recorded=True)


def test_every_entry_point_stacks():
    x = np.array([0.5, 2.0])
    J = rosenbrock_jacobian(x)
    v = np.array([0.25, -1.0])
    value, product = sparsegrad.jvp(rosenbrock, x, v)
    np.testing.assert_array_equal(value, rosenbrock(x).astype(float))
    np.testing.assert_allclose(product, J @ v, rtol=1e-15)
    pattern = sparsegrad.sparsity(rosenbrock, x)
    np.testing.assert_array_equal(pattern.toarray(), J != 0)
    solution = optimize.newton(rosenbrock, np.array([-1.2, 1.0]))
    np.testing.assert_allclose(solution.x, [1.0, 1.0], rtol=1e-12)
    root = scipy.optimize.root(powell, [0.0, 0.0],
                               jac=sparsegrad.jacobian(powell, format="dense"))
    assert root.success
    np.testing.assert_allclose(powell(root.x), [0.0, 0.0], atol=1e-12)


def test_forward_results_of_object_arrays():
    x = forward.seed(np.array([1.0, 2.0]))
    residual = np.array([x[0] * x[1], 1.0 - x[0]])
    np.testing.assert_array_equal(forward.nvalue(residual), [2.0, 0.0])
    # (arithmetic with a forward value stacks the array first)
    total = residual + x
    np.testing.assert_array_equal(total.value, [3.0, 2.0])
    np.testing.assert_array_equal(total.dvalue.toarray(), [[3.0, 1.0], [-1.0, 1.0]])
    # (elementwise arithmetic of the array itself is numpy's object loop: its
    # elements stay forward values)
    doubled = residual * 2
    assert doubled.dtype == object
    np.testing.assert_array_equal(forward.nvalue(doubled), [4.0, 0.0])
    np.testing.assert_array_equal(
        np.concatenate([doubled, x]).dvalue.toarray(),
        [[4.0, 2.0], [-2.0, 0.0], [1.0, 0.0], [0.0, 1.0]])


def test_other_objects_are_named():
    with pytest.raises(TypeError, match="holds str, value"):
        sparsegrad.jacobian(lambda x: np.array([x[0], "a"], dtype=object))(X)
    with pytest.raises(TypeError, match="not ndarray holding float, str"):
        sparsegrad.jacobian(lambda x: np.array([1.0, "a"], dtype=object))(X)
    with pytest.raises(ValueError, match="same shape"):
        sparsegrad.jacobian(lambda x: np.array([x[0], x[1:]], dtype=object))(X)


def test_object_arrays_as_operands_and_write_sources():
    def f(x):
        r = np.zeros(3, like=x)
        r[:2] = np.array([x[0] * x[2], x[1]])
        return np.where(x > 0, r, np.array([x[2], 0.0, x[0]]))
    for trace in (False, True):
        value, J = sparsegrad.value_and_jacobian(f, trace=trace)(X)
        np.testing.assert_array_equal(value, [3.0, 0.0, 0.0])
        np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, X, method="central"),
                                   rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("trace", [False, True])
def test_functions_of_the_shape_only(trace):
    def f(x):
        A = x.reshape(3, 3)
        n = np.shape(A)[0] + np.ndim(A) + np.size(A)
        return np.concatenate([A[np.diag_indices_from(A)] * n,
                               A[np.triu_indices_from(A, 1)], A[np.tril_indices_from(A, -1)]])
    x = np.arange(1.0, 10.0)
    value, J = sparsegrad.value_and_jacobian(f, trace=trace)(x)
    np.testing.assert_array_equal(value, f(x))
    expected = np.zeros((9, 9))
    rows = [0, 4, 8, 1, 2, 5, 3, 6, 7]
    expected[np.arange(9), rows] = [14.0] * 3 + [1.0] * 6
    np.testing.assert_array_equal(J.toarray(), expected)


def _writes_into_a_plain_array(x):
    u = np.zeros(3)
    u[1:] = x[:2]
    return u


def _converts_to_float(x):
    return float(x[0]) * x


@pytest.mark.parametrize("trace", [False, True])
def test_a_write_into_a_plain_array_names_the_line_and_its_fix(trace):
    with pytest.raises(TypeError, match=r"u is a plain numpy array(.|\n)*"
                                        r"u = np.zeros\(n, like=x\)(.|\n)*"
                                        r"in _writes_into_a_plain_array: u\[1:\] = x\[:2\]"):
        sparsegrad.jacobian(_writes_into_a_plain_array, trace=trace)(X)
    with pytest.raises(TypeError, match=r"like=x(.|\n)*"
                                        r"in _converts_to_float: return float\(x\[0\]\)"):
        sparsegrad.jacobian(_converts_to_float, trace=trace)(X)


def test_forward_values_in_an_object_array_say_how_they_got_there():
    import scipy.special
    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(sparsegrad.UnsupportedOperationError,
                       match="numpy.exp reached a forward value held in an object "
                             "array.*SCIPY_ARRAY_API=1"):
        sparsegrad.jacobian(scipy.special.logsumexp, trace=False)(x)
    held = np.array([forward.seed(x)], dtype=object)
    for ufunc in (np.sqrt, np.log1p, np.tanh):
        with pytest.raises(sparsegrad.UnsupportedOperationError, match=ufunc.__name__):
            ufunc(held)


def test_scipy_sparse_constructors_point_to_sparsegrad_sparse():
    import scipy.sparse
    x = forward.seed(np.array([1.0, 2.0, 3.0]))
    with pytest.raises(sparsegrad.UnsupportedOperationError,
                       match="numpy.common_type .* sparsegrad.sparse.diags"):
        scipy.sparse.diags([x], [0])
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="sparsegrad.sparse.diags"):
        sparsegrad.jacobian(lambda v: scipy.sparse.diags([v], [0]) @ v)(x.value)
