"""Minimisation with exact sparse Hessians: ``sparsegrad.optimize.minimize`` on
problems with known minimisers, and the Hessian routes into
``scipy.optimize.minimize``."""
import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
import scipy.sparse.linalg

import sparsegrad
from sparsegrad.optimize import minimize


def rosenbrock(x):
    """The chained Rosenbrock function; smallest, 0, at x = 1."""
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def extended_rosenbrock(x):
    """Independent pairs (More, Garbow and Hillstrom's extended form); 0 at x = 1."""
    return np.sum(100.0 * (x[1::2] - x[::2] ** 2) ** 2 + (1.0 - x[::2]) ** 2)


def double_well(x):
    """Wells at x = 1 and x = -1 everywhere, coupled; a maximum at 0, where the
    Hessian is negative definite."""
    return np.sum(x ** 4 / 4 - x ** 2 / 2) + 0.1 * np.sum(np.diff(x) ** 2)


def tilted_saddle(x):
    """Minima at (1, 1) and (-1, -1); at the origin the Hessian [[1, -2], [-2, 1]]
    has a positive diagonal and is indefinite."""
    return 0.5 * (x[0] ** 2 + x[1] ** 2) - 2 * x[0] * x[1] + (x[0] ** 4 + x[1] ** 4) / 4


def laplacian_2d(n):
    one_d = scipy.sparse.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)],
                               [-1, 0, 1])
    identity = scipy.sparse.identity(n)
    return (scipy.sparse.kron(one_d, identity) + scipy.sparse.kron(identity, one_d)).tocsr()


def _gradient_norm(result):
    return float(np.max(np.abs(result.jac)))


@pytest.mark.parametrize("x0", [np.array([-1.2, 1.0]),                  # the classic start
                                np.array([-1.2, 1.0, -1.2, 1.0]),
                                np.array([1.3, 0.7, 0.8, 1.9, 1.2])])   # SciPy's tutorial
def test_rosenbrock_from_standard_starts(x0):
    result = minimize(rosenbrock, x0)
    assert result.success and result.status == 1, result.message
    np.testing.assert_allclose(result.x, 1.0, rtol=0, atol=1e-10)
    assert result.fun < 1e-20 and _gradient_norm(result) <= 1e-8
    assert result.x.shape == x0.shape and result.jac.shape == x0.shape
    assert result.njev == result.nhev == result.nit + 1
    assert result.nfev > result.nhev            # (and the line search's evaluations)
    H = result.hess
    assert scipy.sparse.issparse(H) and H.shape == (x0.size, x0.size)
    np.testing.assert_allclose(H.toarray(), H.toarray().T, rtol=0, atol=0)
    np.testing.assert_allclose(H.toarray(), scipy.optimize.rosen_hess(result.x), atol=1e-6)


def test_extended_rosenbrock_in_200_dimensions():
    # independent pairs: the iteration is the 2-d one's, in every pair at once
    x0 = np.tile([-1.2, 1.0], 100)
    result = minimize(extended_rosenbrock, x0)
    two_d = minimize(extended_rosenbrock, x0[:2])
    assert result.success and result.nit == two_d.nit
    np.testing.assert_allclose(result.x, 1.0, rtol=0, atol=1e-10)
    assert _gradient_norm(result) <= 1e-8 and result.hess.nnz == 3 * 200 - 200


def test_chained_rosenbrock_can_end_in_its_other_minimum():
    # from (-1.2, 1, ..., 1) in 10 dimensions the valley leads to the local minimum
    # near (-1, 1, ..., 1), a known property of the chained function: a minimum,
    # with a positive definite Hessian, not a failure of the method
    result = minimize(rosenbrock, np.r_[-1.2, np.ones(9)])
    assert result.success and _gradient_norm(result) <= 1e-8
    assert -1.0 < result.x[0] < -0.99 and np.all(result.x[1:] > 0.98)
    assert np.linalg.eigvalsh(result.hess.toarray()).min() > 0


def test_convex_quadratic_with_a_sparse_matrix_in_one_newton_step():
    n = 30
    A = laplacian_2d(n) + 0.01 * scipy.sparse.identity(n * n)
    b = np.sin(np.arange(n * n))

    def energy(u):
        return 0.5 * u @ (A @ u) - b @ u

    result = minimize(energy, np.zeros(n * n))
    expected = scipy.sparse.linalg.spsolve(A.tocsc(), b)
    assert result.success and result.nit == 1 and result.factorizations == 1
    np.testing.assert_allclose(result.x, expected, rtol=1e-10, atol=1e-10)
    assert _gradient_norm(result) <= 1e-8
    assert abs(result.hess - A).max() < 1e-12
    assert result.nfev == 3        # (at x0, the accepted full step, the new point)


def test_nonconvex_start_where_the_newton_step_goes_uphill():
    x0 = np.full(20, 0.1)
    value, g, H = sparsegrad.value_grad_and_hessian(double_well)(x0)
    newton_step = scipy.sparse.linalg.spsolve(H.tocsc(), -g)
    assert g @ newton_step > 0                       # uphill: towards the maximum at 0
    assert double_well(x0 + newton_step) > value
    result = minimize(double_well, x0)
    assert result.success, result.message
    np.testing.assert_allclose(result.x, 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.fun, -0.25 * 20, rtol=1e-14)
    assert _gradient_norm(result) <= 1e-8
    assert result.factorizations > result.nit        # a shift was needed


def test_positive_diagonal_but_indefinite_hessian_needs_a_growing_shift():
    x0 = np.array([0.1, 0.2])
    assert np.all(np.diag(sparsegrad.hessian(tilted_saddle)(x0).toarray()) > 0)
    result = minimize(tilted_saddle, x0)
    assert result.success
    # (max|g| <= 1e-8 and the Hessian's smallest eigenvalue 2 at the minimum)
    np.testing.assert_allclose(result.x, [1.0, 1.0], rtol=0, atol=1e-8)
    assert result.factorizations >= result.nit + 2   # mu = 0 and mu_1 both refused


def test_stationary_point_that_is_a_maximum_passes_the_gradient_test():
    # documented: gtol is a first-order test; the Hessian tells a maximum
    result = minimize(double_well, np.zeros(5))
    assert result.success and result.nit == 0
    assert np.linalg.eigvalsh(result.hess.toarray()).max() < 0


def test_two_dimensional_argument():
    target = np.outer(np.linspace(0.0, 1.0, 6), np.linspace(-1.0, 1.0, 7))

    def energy(u):                               # strictly convex
        return (0.5 * np.sum(np.diff(u, axis=0) ** 2)
                + 0.5 * np.sum(np.diff(u, axis=1) ** 2) + np.sum(np.exp(u)))

    load = sparsegrad.gradient(energy)(target)   # so that target is the minimiser

    def shifted(u):
        return energy(u) - np.sum(load * u)

    result = minimize(shifted, np.zeros((6, 7)))
    assert result.success and result.x.shape == (6, 7) and result.jac.shape == (6, 7)
    np.testing.assert_allclose(result.x, target, rtol=0, atol=1e-10)
    assert result.hess.shape == (42, 42)


def test_args_reach_f():
    def scaled(x, centre, weight):
        return weight * np.sum(np.cosh(x - centre))

    centre = np.array([0.5, -2.0, 3.0])
    result = minimize(scaled, np.zeros(3), args=(centre, 4.0))
    assert result.success
    np.testing.assert_allclose(result.x, centre, rtol=0, atol=1e-12)
    one = minimize(lambda x, c: np.sum((x - c) ** 4 + (x - c) ** 2), np.zeros(2), args=3.0)
    np.testing.assert_allclose(one.x, 3.0, rtol=0, atol=1e-12)   # not a tuple: one arg


def test_callback_after_every_iteration_and_stopping():
    seen = []
    result = minimize(rosenbrock, np.array([-1.2, 1.0]),
                      callback=lambda x, fun: seen.append((x.copy(), fun)))
    assert len(seen) == result.nit
    np.testing.assert_array_equal(seen[-1][0], result.x)
    assert seen[-1][1] == result.fun
    assert all(b[1] <= a[1] for a, b in zip(seen, seen[1:]))   # f never increases
    stopped = minimize(rosenbrock, np.array([-1.2, 1.0]), callback=lambda x, fun: True)
    assert not stopped.success and stopped.status == 0 and stopped.nit == 1
    assert "callback" in stopped.message


def test_maxiter_reached_is_a_failure_with_a_message():
    result = minimize(rosenbrock, np.array([-1.2, 1.0]), maxiter=3)
    assert not result.success and result.status == -1 and result.nit == 3
    assert "maximum number of iterations" in result.message
    assert "maxiter=3" in result.message
    assert _gradient_norm(result) > 1e-3
    zero = minimize(rosenbrock, np.array([-1.2, 1.0]), maxiter=0)
    assert zero.status == -1 and zero.nit == 0 and np.array_equal(zero.x, [-1.2, 1.0])


def test_line_search_keeps_the_iterate_where_f_is_finite():
    def barrier(x):                              # nan for x <= 0; smallest at x = 1
        return np.sum(x - np.log(x))

    with np.errstate(invalid="ignore", divide="ignore"):
        result = minimize(barrier, np.array([3.0, 5.0, 0.2]))
    assert result.success and _gradient_norm(result) <= 1e-8
    np.testing.assert_allclose(result.x, 1.0, rtol=0, atol=1e-8)   # (H = 1 there)


def test_failures_are_results():
    with np.errstate(invalid="ignore"):
        result = minimize(lambda x: np.sum(np.sqrt(x)), np.array([-1.0, 1.0]))
    assert not result.success and result.status == -3 and "at x0" in result.message
    with np.errstate(divide="ignore"):                # x ** 1.5: H = inf at 0
        result = minimize(lambda x: np.sum(x ** 1.5 - x), np.array([0.0, 1.0]))
    assert result.status == -2 and "non-finite" in result.message
    assert result.nit == 0 and np.isinf(result.hess[0, 0])


def test_xtol_ends_where_rounding_keeps_the_gradient_above_gtol():
    result = minimize(rosenbrock, np.array([-1.2, 1.0]), gtol=0.0)
    assert result.success and result.status == 2
    np.testing.assert_allclose(result.x, 1.0, rtol=0, atol=1e-15)


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match="complex"):
        minimize(rosenbrock, np.array([1.0 + 0j, 1.0]))
    with pytest.raises(ValueError, match="not finite"):
        minimize(rosenbrock, np.array([np.nan, 1.0]))
    with pytest.raises(ValueError, match="gtol"):
        minimize(rosenbrock, np.ones(2), gtol=-1.0)
    with pytest.raises(TypeError, match="forward value"):
        minimize(rosenbrock, sparsegrad.forward.seed(np.ones(2)))
    with pytest.raises(ValueError, match="one number|more than one"):
        minimize(lambda x: x ** 2, np.ones(2))
    with pytest.raises(ValueError, match="progress"):
        minimize(rosenbrock, np.ones(2), progress=-1)


def test_verbose_table_and_progress_lines(capsys):
    minimize(rosenbrock, np.array([-1.2, 1.0]), verbose=True, progress=0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("minimize: 2 unknowns")
    assert lines[-1] == "minimize: converged: max|gradient| below gtol"
    assert any(line.startswith("minimize: ") and "factorising H + mu I" in line
               for line in lines)
    assert any("evaluating f at step length" in line for line in lines)


def test_trace_false_gives_the_same_iterates():
    traced = minimize(rosenbrock, np.array([1.3, 0.7, 0.8, 1.9, 1.2]))
    eager = minimize(rosenbrock, np.array([1.3, 0.7, 0.8, 1.9, 1.2]), trace=False)
    assert traced.nit == eager.nit
    np.testing.assert_allclose(traced.x, eager.x, rtol=0, atol=1e-14)


# ---- scipy.optimize.minimize with sparsegrad's Hessians ----

TARGET = np.linspace(0.5, 1.5, 6)


def convex(x):
    """Strictly convex, smallest at TARGET (dogleg needs a positive definite
    Hessian all along its path)."""
    d = x - TARGET
    return np.sum(np.exp(d) - d) + 0.5 * np.sum(np.diff(d) ** 2)


ROSENBROCK_START = np.array([1.3, 0.7, 0.8, 1.9, 1.2])

# SciPy's trust-region methods stop at max|g| <= 1e-5 by default; trust-krylov stops
# unsuccessful ("A bad approximation caused failure to predict improvement") on
# `convex` at gtol=1e-8, with a hand-written exact Hessian too, at max|g| = 7e-9
GTOL = {"trust-ncg": 1e-10, "dogleg": 1e-10, "trust-exact": 1e-10, "trust-krylov": 1e-7}


def test_scipy_trust_constr_with_the_sparse_hessian():
    hess = sparsegrad.hessian(rosenbrock)
    result = scipy.optimize.minimize(rosenbrock, ROSENBROCK_START, method="trust-constr",
                                     jac=sparsegrad.gradient(rosenbrock), hess=hess)
    assert result.success, result.message
    np.testing.assert_allclose(result.x, 1.0, rtol=0, atol=1e-8)
    assert scipy.sparse.issparse(hess(ROSENBROCK_START))


@pytest.mark.parametrize("method", ["Newton-CG", "trust-ncg", "trust-krylov"])
def test_scipy_hessian_vector_product_methods_with_hvp(method):
    options = {"xtol": 1e-12} if method == "Newton-CG" else {"gtol": GTOL[method]}
    result = scipy.optimize.minimize(rosenbrock, ROSENBROCK_START, method=method,
                                     jac=sparsegrad.gradient(rosenbrock),
                                     hessp=sparsegrad.hvp(rosenbrock), options=options)
    assert result.success, result.message
    np.testing.assert_allclose(result.x, 1.0, rtol=0, atol=1e-6)
    assert np.max(np.abs(result.jac)) < 1e-6


def test_scipy_newton_cg_with_the_sparse_hessian():
    result = scipy.optimize.minimize(rosenbrock, ROSENBROCK_START, method="Newton-CG",
                                     jac=sparsegrad.gradient(rosenbrock),
                                     hess=sparsegrad.hessian(rosenbrock),
                                     options={"xtol": 1e-12})
    assert result.success
    np.testing.assert_allclose(result.x, 1.0, rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", ["dogleg", "trust-exact", "trust-ncg", "trust-krylov"])
def test_scipy_trust_region_methods_with_the_dense_hessian(method):
    result = scipy.optimize.minimize(convex, np.ones(6), method=method,
                                     jac=sparsegrad.gradient(convex),
                                     hess=sparsegrad.hessian(convex, format="dense"),
                                     options={"gtol": GTOL[method]})
    assert result.success, result.message
    np.testing.assert_allclose(result.x, TARGET, rtol=0, atol=1e-7)


def test_scipy_trust_exact_on_a_nonconvex_start_with_the_dense_hessian():
    result = scipy.optimize.minimize(rosenbrock, ROSENBROCK_START, method="trust-exact",
                                     jac=sparsegrad.gradient(rosenbrock),
                                     hess=sparsegrad.hessian(rosenbrock, format="dense"),
                                     options={"gtol": GTOL["trust-exact"]})
    assert result.success
    np.testing.assert_allclose(result.x, 1.0, rtol=0, atol=1e-10)


def test_scipy_dogleg_stops_at_an_indefinite_hessian():
    # SciPy's dogleg needs a positive definite Hessian (a Cholesky factorisation of
    # it); the Rosenbrock Hessian at this start is indefinite
    H = sparsegrad.hessian(rosenbrock, format="dense")
    assert np.linalg.eigvalsh(H(ROSENBROCK_START)).min() < 0
    result = scipy.optimize.minimize(rosenbrock, ROSENBROCK_START, method="dogleg",
                                     jac=sparsegrad.gradient(rosenbrock), hess=H)
    assert not result.success and "psd" in result.message


@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")
@pytest.mark.parametrize("method", ["trust-ncg", "trust-krylov", "dogleg", "trust-exact"])
def test_scipy_methods_that_need_a_dense_hessian_fail_on_the_sparse_one(method):
    # SciPy turns a sparse Hessian into a csr_array, then multiplies it by np.dot
    # (trust-ncg, trust-krylov) or factorises it as a dense array (dogleg,
    # trust-exact): each fails inside SciPy, so these take format="dense" or hessp
    with pytest.raises((ValueError, TypeError, AttributeError)):
        scipy.optimize.minimize(convex, np.ones(6), method=method,
                                jac=sparsegrad.gradient(convex),
                                hess=sparsegrad.hessian(convex))


def test_scipy_trust_constr_with_the_constraint_hessian():
    a = np.array([3.0, 4.0, -1.0, 0.5, 0.0, -2.0, 6.0, 8.0])

    def distance(x):
        return np.sum((x - a) ** 2)

    def radii(x):                                # each pair on the unit circle
        return x[::2] ** 2 + x[1::2] ** 2

    weighted = sparsegrad.hessian(lambda x, v: v @ radii(x))
    calls = []

    def constraint_hessian(x, v):                # sum_i v_i Hess(c_i)(x)
        calls.append(1)
        return weighted(x, v)

    constraint = scipy.optimize.NonlinearConstraint(
        radii, 1.0, 1.0, jac=sparsegrad.jacobian(radii), hess=constraint_hessian)
    result = scipy.optimize.minimize(distance, np.ones(8), method="trust-constr",
                                     jac=sparsegrad.gradient(distance),
                                     hess=sparsegrad.hessian(distance),
                                     constraints=[constraint])
    pairs = a.reshape(-1, 2)
    nearest = (pairs / np.linalg.norm(pairs, axis=1, keepdims=True)).ravel()
    assert result.success, result.message
    np.testing.assert_allclose(result.x, nearest, rtol=0, atol=1e-7)
    assert calls and result.constr_violation < 1e-10
    H = weighted(np.ones(8), np.arange(4.0))
    np.testing.assert_array_equal(H.toarray(), np.diag(2 * np.repeat(np.arange(4.0), 2)))
