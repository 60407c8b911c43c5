"""Regression tests from a bug hunt of the function-level API and the Newton solver.

Each test pins a case that used to give a silently wrong (or silently ignored)
result, or a cryptic error, and now gives the exact answer or a clear error.
"""
import numpy as np
import pytest

import sparsegrad
from sparsegrad import forward
from sparsegrad.optimize import newton


def cube(x):
    return x ** 3


# -- nested differentiation: a forward value as the point ---------------------

def test_jacobian_inside_a_differentiated_function_is_loud():
    # f(x) = J_cube(x) @ x = 3 x^3 has the derivative 9 x^2 = [9, 36]; the inner
    # jacobian seeded x.value and dropped x's derivative, so the outer Jacobian
    # was silently [3, 12] (the inner matrix taken as a constant)
    def f(x):
        return sparsegrad.jacobian(cube)(x) @ x

    with pytest.raises(TypeError, match=r"sparsegrad\.jacobian: argument 0 is a forward "
                                        r"value; nested differentiation"):
        sparsegrad.jacobian(f)(np.array([1.0, 2.0]))


def test_jvp_and_sparsity_at_a_forward_value_are_loud():
    x = np.array([1.0, 2.0])
    # d/dx of jvp(cube, x, 1)[1] = 6 x: was silently a zero Jacobian
    with pytest.raises(TypeError, match=r"sparsegrad\.jvp: x is a forward value"):
        sparsegrad.jacobian(lambda x: sparsegrad.jvp(cube, x, np.ones(2))[1])(x)
    with pytest.raises(TypeError, match=r"sparsegrad\.sparsity: argument 0 is a forward"):
        sparsegrad.sparsity(cube, forward.seed(x))
    with pytest.raises(TypeError, match=r"value_and_jacobian: argument 1 is a forward"):
        sparsegrad.value_and_jacobian(lambda a, b: a * b, argnums=(0, 1))(
            x, forward.seed(x))
    # the documented way out: differentiate at the value
    assert np.array_equal(sparsegrad.jacobian(cube)(forward.seed(x).value).toarray(),
                          np.diag([3.0, 12.0]))


def test_newton_from_a_forward_value_is_loud():
    # used to fail inside np.isfinite with "ufunc 'isfinite' not supported"
    with pytest.raises(TypeError, match="x0 is a forward value"):
        newton(lambda x: x ** 2 - 4.0, forward.seed(np.ones(2)))


# -- non-numeric values --------------------------------------------------------

def test_non_numeric_results_are_loud():
    x = np.arange(3.0)
    # a string result used to get a (1, 3) zero Jacobian, as if it were a number
    with pytest.raises(TypeError, match=r"sparsegrad\.jacobian: the function returned an "
                                        r"array of dtype <U3"):
        sparsegrad.jacobian(lambda x: "abc")(x)
    with pytest.raises(TypeError, match="dtype datetime64"):
        sparsegrad.value_and_jacobian(lambda x: np.datetime64("2020-01-01"))(x)
    with pytest.raises(TypeError, match=r"sparsegrad\.jvp: the function returned"):
        sparsegrad.jvp(lambda x: "ab", x, np.ones(3))
    with pytest.raises(TypeError, match=r"sparsegrad\.sparsity: the function returned"):
        sparsegrad.sparsity(lambda x: "ab", x)
    with pytest.raises(TypeError, match=r"sparsegrad\.optimize\.newton: the function "
                                        r"returned"):
        newton(lambda x: np.array(["a"]), np.ones(1))
    # numeric constants still give zero Jacobians of the right shape and dtype
    value, J = sparsegrad.value_and_jacobian(lambda x: x > 1)(x)
    assert value.dtype == bool and J.shape == (3, 3) and J.nnz == 0


def test_jvp_non_numeric_direction_is_loud():
    # None in an object array used to become nan silently (astype(float64))
    with pytest.raises(TypeError, match="v has dtype object"):
        sparsegrad.jvp(lambda x: 2 * x, np.ones(2), np.array([1.0, None]))
    with pytest.raises(TypeError, match="v has dtype <U1"):
        sparsegrad.jvp(lambda x: 2 * x, np.ones(2), np.array(["a", "b"]))
    # bool and integer directions are numbers
    assert np.array_equal(sparsegrad.jvp(lambda x: 2 * x, np.ones(2),
                                         np.array([True, False]))[1], [2.0, 0.0])


def test_newton_non_numeric_x0_is_loud():
    for x0 in (np.array(["a"]), np.array([1.0, None])):
        with pytest.raises(TypeError, match="x0 has dtype"):
            newton(lambda x: x ** 2 - 4.0, x0)


# -- newton options ------------------------------------------------------------

@pytest.mark.parametrize("divtol", [np.nan, 0.0, -1.0])
def test_newton_invalid_divtol_is_loud(divtol):
    # nan switched the divergence test off; 0 or less reported "diverged" at once
    with pytest.raises(ValueError, match="divtol > 0"):
        newton(lambda x: x ** 2 - 4.0, np.ones(1), divtol=divtol)


def test_newton_linear_options_a_solver_does_not_take_are_loud():
    F = lambda x: x ** 2 - 4.0  # noqa: E731
    x0 = np.ones(3)
    # a misspelt tolerance was ignored: the default rtol stayed in effect
    with pytest.raises(ValueError, match="unknown linear_options for gmres: tol"):
        newton(F, x0, linear_solver="gmres", linear_options={"tol": 1e-3})
    # an unknown preconditioner used to mean no preconditioner
    with pytest.raises(ValueError, match="'ilu' or None, not 'jacobi'"):
        newton(F, x0, linear_solver="gmres", linear_options={"preconditioner": "jacobi"})
    with pytest.raises(ValueError, match="restart \\(a GMRES setting\\)"):
        newton(F, x0, linear_solver="bicgstab", linear_options={"restart": 5})
    for solver in ("direct", "splu", lambda J, b: b):
        with pytest.raises(ValueError, match="settings of the Krylov solvers"):
            newton(F, x0, linear_solver=solver, linear_options={"rtol": 1e-3})
    # every documented option is still taken
    options = dict(rtol=1e-12, maxiter=30, restart=5, drop_tol=1e-6, fill_factor=5,
                   preconditioner="ilu")
    result = newton(F, x0, linear_solver="gmres", linear_options=options)
    assert result.success and np.allclose(result.x, 2.0)
    result = newton(F, x0, linear_solver="bicgstab",
                    linear_options=dict(rtol=1e-12, preconditioner=None))
    assert result.success and np.allclose(result.x, 2.0)
    assert newton(F, x0, linear_options={}).success


def test_newton_complex_residual_for_a_real_x0_is_loud():
    def F(x):
        return np.abs(x) * x - 4.0 * np.exp(0.1j)

    # the complex step turned x complex, and the next evaluation raised
    # "numpy.absolute of a complex value is not complex-differentiable, and the
    # seed is complex" although the user's x0 was real
    with pytest.raises(ValueError, match="F returned complex values for a real x0"):
        newton(F, np.ones(2))
    # a complex start solves a holomorphic system in complex numbers
    result = newton(lambda x: x ** 2 + 4.0, np.array([1.0 + 1.0j]))
    assert result.success and np.allclose(result.x, [2.0j])


@pytest.mark.parametrize("seeding", [forward.seed, forward.seed_sparsity,
                                     lambda x: forward.seed(np.ones(2), x)])
def test_seeding_a_forward_value_is_loud(seeding):
    # its value alone would be seeded and its own derivative silently dropped
    x = forward.seed(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="forward value; nested differentiation"):
        seeding(x * 2)


def test_a_non_tuple_args_is_one_argument_as_in_scipy():
    p = np.array([2.0, 3.0])
    f = lambda x, p: x * x - p
    result = newton(f, np.ones(2), args=p)
    np.testing.assert_allclose(result.x, np.sqrt(p), rtol=1e-12)
    _, derivative = sparsegrad.jvp(f, np.ones(2), np.ones(2), args=p)
    np.testing.assert_array_equal(derivative, [2.0, 2.0])
    assert sparsegrad.sparsity(lambda x, p: x * p, np.ones(2), args=p).nnz == 2
    assert sparsegrad.sparsity(lambda x, a, b: x * a * b, np.ones(2), args=(2.0, 3.0)).nnz == 2


def test_newton_refuses_a_bool_residual():
    with pytest.raises(TypeError, match="bool values"):
        newton(lambda x: x > 1.0, np.ones(2))
