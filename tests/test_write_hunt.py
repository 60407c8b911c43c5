"""Regression tests for bugs found by a hunt through index writes, the function
API, the linear solvers and Newton's method."""
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import sparsegrad
from sparsegrad import forward
from sparsegrad.optimize import newton
from sparsegrad.testing import numerical_jacobian


# ---- newton ------------------------------------------------------------------------

def test_newton_with_an_infinite_jacobian_is_a_failed_solve_not_a_solution():
    # d sqrt(x)/dx is inf at 0: the "Newton step" -f/inf is exactly 0, which the
    # step test took for convergence while F(x) = -1
    with np.errstate(divide="ignore"):
        result = newton(lambda x: np.sqrt(x) - 1.0, np.zeros(2))
    assert not result.success and result.status == -2, result.message
    assert "non-finite entries" in result.message
    assert_array_equal(result.x, [0.0, 0.0])
    assert_array_equal(result.fun, [-1.0, -1.0])


def test_newton_callback_also_sees_the_iteration_that_converges_on_the_step():
    seen = []
    result = newton(lambda x: x ** 2 - 2.0, np.ones(1), tol=0.0,
                    callback=lambda x, f: seen.append((x.copy(), f.copy())))
    assert result.success and result.status == 2, result.message
    assert len(seen) == result.nit == 5
    assert_array_equal(seen[-1][0], result.x)
    assert_array_equal(seen[-1][1], result.fun)


def test_newton_linear_solver_returning_none_is_a_failed_solve():
    result = newton(lambda x: x ** 2 - 4.0, np.ones(2), linear_solver=lambda J, b: None)
    assert not result.success and result.status == -2
    assert "returned NoneType" in result.message


# ---- the function API ------------------------------------------------------------

def test_jvp_refuses_a_forward_direction_by_name():
    # was: "v has shape (); expected x's shape (3,)" for a v of shape (3,)
    x0 = np.array([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="v is a forward value"):
        sparsegrad.jvp(lambda x: x * x, x0, forward.seed(x0))
    value, derivative = sparsegrad.jvp(lambda x: x * x, x0, np.array([1.0, 0.0, 2.0]))
    assert_array_equal(value, [1.0, 4.0, 9.0])
    assert_array_equal(derivative, [2.0, 0.0, 12.0])


# ---- writes refused before anything is written ---------------------------------

def test_a_write_from_another_seed_is_refused_and_changes_nothing():
    x = forward.seed(np.array([1.0, 2.0]))
    y = forward.seed(np.array([5.0, 7.0]))
    F = x * 1.0
    with pytest.raises(sparsegrad.SeedMismatchError):
        F[0] = y[0] * 2
    with pytest.raises(sparsegrad.SeedMismatchError):
        np.add.at(F, np.array([1]), y[1:])
    assert_array_equal(F.value, [1.0, 2.0])
    assert_array_equal(F.dvalue.toarray(), np.eye(2))


def test_a_complex_value_written_into_a_real_array_needs_a_real_seed():
    # numpy keeps the real part, which is not complex-differentiable
    z = forward.seed(np.array([1 + 2j, 3 + 1j]))
    F = np.zeros(2, dtype=float, like=z)
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="complex-differentiable"):
        F[:] = z * 2
    assert_array_equal(F.value, [0.0, 0.0])
    # a real seed: the real part's Jacobian is the real part of the Jacobian
    x0 = np.array([0.5, 1.5])
    x = forward.seed(x0)
    G = np.zeros(2, like=x)
    with pytest.warns(np.exceptions.ComplexWarning):
        G[:] = x * (2 + 3j)
    assert_array_equal(G.value, 2 * x0)
    assert_array_equal(G.dvalue.toarray(), 2 * np.eye(2))


def test_add_at_takes_a_list_holding_forward_values():
    x0 = np.array([1.0, 2.0, 3.0])
    x = forward.seed(x0)
    F = np.zeros(3, like=x)
    np.add.at(F, [2, 2], [x[0], 3 * x[1]])
    assert_array_equal(F.value, [0.0, 0.0, 7.0])
    assert_array_equal(F.dvalue.toarray(), [[0, 0, 0], [0, 0, 0], [1, 3, 0]])


def test_newton_needs_a_whole_number_of_iterations():
    with pytest.raises(TypeError):
        newton(lambda x: x - 1.0, np.zeros(2), maxiter=2.5)
    assert newton(lambda x: x - 1.0, np.zeros(2), maxiter=np.int64(3)).success


# ---- real results of complex values: the real part's Jacobian, also later -------------

def test_a_complex_value_written_into_a_real_array_keeps_the_real_part_of_its_jacobian():
    x0 = np.array([0.5, 1.5])
    x = forward.seed(x0)
    t = x * 1.0
    with pytest.warns(np.exceptions.ComplexWarning):
        t[:] = x * (1 + 2j)
    y = t * 1j                           # complex arithmetic after the write
    assert_array_equal(y.value, x0 * 1j)
    assert_array_equal(y.dvalue.toarray(), np.diag([1j, 1j]))


@pytest.mark.parametrize("reduction", [np.prod, np.sum, np.mean, np.cumprod, np.cumsum])
def test_reductions_with_a_real_dtype_cast_complex_values_first(reduction):
    x0 = np.array([0.5, 1.5, 2.0])
    x = forward.seed(x0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        y = reduction(x * (1 + 2j), dtype=float) * 1j
        assert_allclose(y.value, reduction(x0 * (1 + 2j), dtype=float) * 1j)
    # numpy casts first: the reduction of the real parts x0
    expected = numerical_jacobian(lambda v: reduction(v, dtype=float), x0, method="central")
    assert_allclose(y.dvalue.toarray(), 1j * np.atleast_2d(expected), rtol=1e-8, atol=1e-8)


def test_out_follows_numpys_casting_rules():
    x = forward.seed(np.array([0.5, 1.5]))
    target = np.zeros(2, like=x).astype(np.float32)
    with pytest.raises(TypeError, match="cannot cast"):
        np.add(x, 1.0, out=target, casting="safe")
    np.add(x, 1.0, out=target)          # same_kind: float64 -> float32 allowed
    assert_array_equal(target.value, np.array([1.5, 2.5], np.float32))
