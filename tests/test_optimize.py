"""sparsegrad.optimize.newton: convergence, linear solvers and every failure mode."""
import doctest

import numpy as np
import pytest
import scipy.sparse

from sparsegrad import optimize
from sparsegrad.optimize import newton


def bratu_1d(u, lam=3.0):
    """-u'' = lam exp(u) on (0, 1), u(0) = u(1) = 0, by central differences."""
    n = u.size
    h = 1.0 / (n + 1)
    padded = np.concatenate([[0.0], u, [0.0]])
    return -(padded[:-2] - 2 * padded[1:-1] + padded[2:]) / (h * h) - lam * np.exp(u)


def test_docstring_examples():
    failures, attempted = doctest.testmod(optimize, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert attempted > 0 and failures == 0


@pytest.mark.parametrize("solver", ["direct", "splu", "gmres", "bicgstab"])
def test_bratu_converges_quadratically(solver):
    iterates = []
    result = newton(bratu_1d, np.zeros(200), linear_solver=solver,
                    callback=lambda x, f: iterates.append(x.copy()))
    assert result.success and result.status == 1, result.message
    assert np.max(np.abs(bratu_1d(result.x))) <= 1e-10
    np.testing.assert_array_equal(result.fun, bratu_1d(result.x))
    # converged on the residual of the last accepted iterate: no Jacobian there
    assert 3 <= result.nit <= 6 and result.njev == result.nit
    assert len(result.residual_norms) == result.nit + 1
    assert np.all(np.diff(result.residual_norms) < 0)
    # quadratic convergence: the error is at most about squared from step to step
    errors = [np.max(np.abs(x - result.x)) for x in [np.zeros(200)] + iterates[:-1]]
    for previous, current in zip(errors[:-1], errors[1:]):
        if previous > 1e-6:
            assert current <= 5 * previous ** 2
    reference = newton(bratu_1d, np.zeros(200)).x
    np.testing.assert_allclose(result.x, reference, atol=1e-9)


def test_extra_arguments_shape_and_callable_solver():
    x0 = np.zeros((10, 20))
    calls = []

    def solve(J, b):
        calls.append(J.shape)
        return scipy.sparse.linalg.spsolve(J.tocsc(), b)

    def F(u, lam):
        return bratu_1d(u.ravel(), lam).reshape(u.shape)

    result = newton(F, x0, args=(2.0,), linear_solver=solve)
    assert result.success and result.x.shape == (10, 20)
    assert result.fun.shape == (10, 20)
    assert calls and calls[0] == (200, 200)


def test_step_tolerance_convergence():
    # a double root: quadratic convergence is lost, the residual falls like the
    # square of the step; a step test stops it
    result = newton(lambda x: (x - 1.0) ** 2, np.array([3.0]), tol=0.0, xtol=1e-8,
                    maxiter=100)
    assert result.success and result.status == 2, result.message
    assert abs(result.x[0] - 1.0) < 1e-7


def test_already_converged_and_zero_iterations():
    result = newton(lambda x: x - 1.0, np.ones(3))
    assert result.success and result.nit == 0 and result.njev == 1
    result = newton(lambda x: x - 1.0, np.zeros(3), maxiter=0)
    assert not result.success and result.status == -1


def test_maxiter_is_reported_not_raised():
    result = newton(bratu_1d, np.zeros(50), maxiter=1)
    assert not result.success and result.status == -1
    assert "maximum number of iterations" in result.message and result.nit == 1


def test_singular_jacobian_is_reported():
    result = newton(lambda x: x ** 2, np.array([0.0, 1.0]), tol=0.0)
    assert not result.success and result.status == -2
    assert "singular" in result.message
    # the pattern of a structurally singular Jacobian
    result = newton(lambda x: np.concatenate([x[:1] - 1.0, x[:1] * 2.0]), np.zeros(2))
    assert result.status == -2


@pytest.mark.parametrize("solver", ["gmres", "bicgstab"])
def test_singular_jacobian_with_krylov_is_reported(solver):
    result = newton(lambda x: x ** 2 - 1.0, np.array([0.0, 1.0]), linear_solver=solver)
    assert not result.success and result.status == -2, result.message


def test_krylov_not_converging_is_reported():
    A = scipy.sparse.random(60, 60, density=0.3, random_state=1, format="csr") \
        + scipy.sparse.eye(60) * 1e-3
    result = newton(lambda x: A @ x - 1.0, np.zeros(60), linear_solver="gmres",
                    linear_options={"maxiter": 1, "restart": 2, "preconditioner": None})
    assert not result.success and result.status == -2
    assert "gmres did not converge" in result.message


def test_non_finite_residual_is_reported():
    with np.errstate(invalid="ignore"):
        result = newton(np.log, np.array([-1.0, 1.0]))
    assert not result.success and result.status == -3 and "at x0" in result.message
    # without line search a full step lands where the residual is nan
    with np.errstate(invalid="ignore"):
        result = newton(lambda x: np.sqrt(x) - 2.0, np.array([25.0]), line_search=False)
    assert not result.success and result.status == -3
    assert not np.all(np.isfinite(result.fun))


def test_line_search_keeps_out_of_the_nan_region():
    with np.errstate(invalid="ignore"):
        result = newton(lambda x: np.sqrt(x) - 2.0, np.array([25.0]))
    assert result.success and abs(result.x[0] - 4.0) < 1e-10


def test_line_search_failure_is_reported():
    # Newton on arctan from x = 3 overshoots; no step down to 1/2 decreases |F|
    result = newton(np.arctan, np.array([3.0]), min_damping=0.5)
    assert not result.success and result.status == -4
    assert "line search failed" in result.message
    # one norm before the first and after every iteration, the failed one too
    assert result.nit == 1 and result.residual_norms == [np.arctan(3.0)] * 2
    np.testing.assert_array_equal(result.x, [3.0])
    # with backtracking to small steps it converges
    assert newton(np.arctan, np.array([3.0])).success


def test_divergence_is_reported():
    # the cube root: Newton steps double |x| and alternate in sign
    result = newton(np.cbrt, np.array([1.0]), line_search=False, divtol=10.0)
    assert not result.success and result.status == -5 and "diverged" in result.message
    assert result.nit < 20


def test_verbose_prints_one_line_per_iteration(capsys):
    result = newton(bratu_1d, np.zeros(20), verbose=True)
    lines = capsys.readouterr().out.splitlines()
    iteration_lines = [line for line in lines if line.strip()[:1].isdigit()]
    assert len(iteration_lines) == result.nit + 1
    assert "converged" in lines[-1]
    assert len(iteration_lines[-1].split()) == 5  # iteration, |F|, |dx|, damping, time


def test_callback_sees_each_iterate_and_can_stop():
    seen = []
    result = newton(bratu_1d, np.zeros(20),
                    callback=lambda x, f: seen.append((x.copy(), f.copy())))
    assert len(seen) == result.nit
    np.testing.assert_array_equal(seen[-1][0], result.x)
    np.testing.assert_array_equal(seen[-1][1], bratu_1d(result.x))
    result = newton(bratu_1d, np.zeros(20), callback=lambda x, f: True)
    assert result.status == 0 and result.nit == 1 and not result.success


def test_bad_input_is_loud():
    with pytest.raises(ValueError, match="not finite"):
        newton(bratu_1d, np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="square"):
        newton(lambda x: x[1:], np.ones(3))
    with pytest.raises(ValueError, match="linear_solver"):
        newton(bratu_1d, np.zeros(3), linear_solver="cholesky")
    with pytest.raises(ValueError, match="tol"):
        newton(bratu_1d, np.zeros(3), tol=-1.0)
    for option in ("tol", "xtol", "min_damping"):  # nan compares False with everything
        with pytest.raises(ValueError, match="tol"):
            newton(bratu_1d, np.zeros(3), **{option: np.nan})


def test_linear_solver_returning_the_wrong_size_is_a_failed_solve():
    result = newton(bratu_1d, np.zeros(3), linear_solver=lambda J, b: np.ones(2))
    assert not result.success and result.status == -2
    assert "returned 2 values for 3 unknowns" in result.message


def test_direct_solvers_are_detected():
    names = optimize.direct_solvers()
    assert names[-1] == "splu"
    for name in ("pardiso", "umfpack"):
        if name not in names:
            with pytest.raises(ValueError, match="not available"):
                newton(bratu_1d, np.zeros(3), linear_solver=name)


def test_rounding_floor_above_tol_stops_on_the_step():
    # rows of size 1/h^2 = 1e6: rounding keeps max|F| near 1e-10, above tol
    result = newton(bratu_1d, np.zeros(1000), tol=1e-12)
    assert result.success and result.status == 2, result.message
    assert np.max(np.abs(result.fun)) < 1e-8


def test_relative_tolerance_stops_at_a_fraction_of_the_initial_residual():
    def F(x):
        return x ** 3 - 8.0 + 0.1 * np.roll(x, 1)
    x0 = np.full(20, 10.0)
    full = optimize.newton(F, x0)
    relative = optimize.newton(F, x0, tol=0.0, rtol=1e-4)
    assert full.success and relative.success and relative.status == 1
    assert relative.nit < full.nit
    assert relative.residual_norms[-1] <= 1e-4 * relative.residual_norms[0]
    assert relative.residual_norms[-2] > 1e-4 * relative.residual_norms[0]
    with pytest.raises(ValueError, match="rtol"):
        optimize.newton(F, x0, rtol=1.5)
