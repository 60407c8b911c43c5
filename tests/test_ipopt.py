"""sparsegrad.ipopt: Ipopt problems with exact sparse derivatives, solved by
cyipopt, against known solutions and independently computed derivatives."""
import sys

import numpy as np
import pytest
import scipy.sparse

cyipopt = pytest.importorskip("cyipopt")

import sparsegrad  # noqa: E402
from sparsegrad.ipopt import IpoptCallbacks, ipopt_problem  # noqa: E402
from sparsegrad.testing import numerical_jacobian  # noqa: E402

QUIET = {"print_level": 0, "sb": "yes"}


def hs071_objective(x):
    return x[0] * x[3] * np.sum(x[:3]) + x[2]


def hs071_constraints(x):
    return np.stack([x[0] * x[1] * x[2] * x[3], np.sum(x ** 2)])


def hs071(**options):
    return ipopt_problem(hs071_objective, np.array([1.0, 5.0, 5.0, 1.0]), hs071_constraints,
                         lb=1.0, ub=5.0, cl=[25.0, 40.0], cu=[np.inf, 40.0],
                         options=dict(QUIET, **options))


def test_hs071_solution():
    x, info = hs071(tol=1e-10).solve(np.array([1.0, 5.0, 5.0, 1.0]))
    assert info["status"] == 0
    np.testing.assert_allclose(x, [1.0, 4.74299964, 3.82114998, 1.37940829], rtol=1e-6)
    assert info["obj_val"] == pytest.approx(17.014017145, rel=1e-8)
    np.testing.assert_allclose(info["g"], [25.0, 40.0], rtol=1e-8)


def test_bound_constrained_solution_is_the_clipped_target():
    target = np.linspace(-0.5, 1.5, 11)

    def f(x, t):
        e = x - t
        return np.sum(e ** 4 + e ** 2) + 0.1 * np.sum(e[1:] ** 2 * e[:-1] ** 2)

    lb, ub = 0.0, 1.0
    x0 = np.full(11, 0.5)
    problem = ipopt_problem(f, x0, lb=lb, ub=ub, args=(target,), options=dict(QUIET, tol=1e-10))
    x, info = problem.solve(x0)
    assert info["status"] == 0
    # the coupling's partial derivatives vanish where e = 0: at the clipped
    # target those of the free components do, the others point out of the box
    expected = np.clip(target, lb, ub)
    np.testing.assert_allclose(x, expected, atol=1e-7)
    assert np.all(info["mult_x_L"][target < lb] > 1e-3)
    assert np.all(info["mult_x_U"][target > ub] > 1e-3)
    assert info["g"].size == 0


def test_equality_constrained_quadratic_matches_the_kkt_solve():
    n, m = 30, 8
    Q = scipy.sparse.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    A = scipy.sparse.random(m, n, density=0.2, random_state=4, format="csr")
    A = A + scipy.sparse.eye(m, n, format="csr")
    b = np.cos(np.arange(n))
    d = np.linspace(1.0, 2.0, m)

    def f(x):
        return 0.5 * np.sum(x * (Q @ x)) - np.sum(b * x)

    def c(x):
        return A @ x - d

    x0 = np.zeros(n)
    x, info = ipopt_problem(f, x0, c, options=dict(QUIET, tol=1e-12)).solve(x0)
    assert info["status"] == 0
    kkt = scipy.sparse.bmat([[Q, A.T], [A, None]], format="csc")
    solution = scipy.sparse.linalg.spsolve(kkt, np.concatenate([b, d]))
    np.testing.assert_allclose(x, solution[:n], atol=1e-9)
    # Ipopt's Lagrangian is f + mult_g @ c, the solve's Q x - b + A.T y = 0
    np.testing.assert_allclose(info["mult_g"], solution[n:], atol=1e-8)


def test_structures_are_the_lower_triangle_in_the_order_of_the_values():
    callbacks = IpoptCallbacks(hs071_objective, np.array([1.0, 5.0, 5.0, 1.0]),
                               hs071_constraints)
    x = np.array([1.3, 4.1, 3.2, 1.7])
    lagrange, obj_factor = np.array([0.7, -1.9]), 0.6
    rows, cols = callbacks.hessianstructure()
    values = callbacks.hessian(x, lagrange, obj_factor)
    assert rows.shape == cols.shape == values.shape == (10,)  # dense 4 x 4: its triangle
    assert np.all(rows >= cols)
    assert np.all(np.diff(rows * 4 + cols) > 0)  # row by row, no entry twice

    def lagrangian_gradient(y):
        return (obj_factor * sparsegrad.gradient(hs071_objective)(y)
                + sparsegrad.jacobian(hs071_constraints)(y).T @ lagrange)
    dense = numerical_jacobian(lagrangian_gradient, x, method="central")
    np.testing.assert_allclose(values, dense[rows, cols], rtol=1e-7, atol=1e-7)

    rows, cols = callbacks.jacobianstructure()
    values = callbacks.jacobian(x)
    assert rows.shape == cols.shape == values.shape == (8,)
    np.testing.assert_allclose(values, numerical_jacobian(hs071_constraints, x)[rows, cols],
                               rtol=1e-14)
    assert callbacks.objective(x) == pytest.approx(hs071_objective(x), rel=1e-15)
    np.testing.assert_allclose(callbacks.constraints(x), hs071_constraints(x), rtol=1e-15)
    np.testing.assert_allclose(callbacks.gradient(x),
                               numerical_jacobian(hs071_objective, x)[0], rtol=1e-14)


def test_sparse_structure_of_a_chain():
    def f(x):
        return np.sum(np.exp(x[1:] - x[:-1])) + np.sum(x ** 2)

    def c(x):
        return x[::2] ** 2 - x[1::2]

    callbacks = IpoptCallbacks(f, np.zeros(10), c)
    rows, cols = callbacks.hessianstructure()
    # diagonal and first subdiagonal of a tridiagonal Hessian
    np.testing.assert_array_equal(rows, np.repeat(np.arange(10), [1] + [2] * 9)[:19])
    np.testing.assert_array_equal(rows - cols, np.tile([1, 0], 10)[1:])
    jacobian_rows, jacobian_cols = callbacks.jacobianstructure()
    np.testing.assert_array_equal(jacobian_rows, np.repeat(np.arange(5), 2))
    np.testing.assert_array_equal(jacobian_cols, np.arange(10))
    x = np.linspace(0.0, 1.0, 10)
    lagrange = np.arange(5.0)
    H = sparsegrad.hessian(lambda y: f(y) + np.sum(lagrange * c(y)))(x)
    np.testing.assert_array_equal(callbacks.hessian(x, lagrange, 1.0),
                                  H.toarray()[rows, cols])


def test_shaped_argument_and_extra_arguments():
    def f(x, scale):
        return scale * np.sum(x ** 2) + np.sum(x[:, 0])

    def c(x, scale):
        return np.sum(x, axis=1) - 1.0

    x0 = np.ones((3, 2))
    problem = ipopt_problem(f, x0, c, args=(2.0,), options=QUIET)
    x, info = problem.solve(x0.ravel())
    assert info["status"] == 0
    # rows sum to one; the stationary point puts 1/8 more on the second column
    np.testing.assert_allclose(x.reshape(3, 2), np.tile([0.375, 0.625], (3, 1)), atol=1e-8)


def test_one_sided_constraint_bounds_and_the_intermediate_callback():
    seen = []

    def intermediate(alg_mod, iter_count, *rest):
        seen.append(iter_count)
        return True

    x0 = np.array([2.0, 2.0])
    problem = ipopt_problem(lambda x: np.sum(x ** 2), x0, lambda x: x[:1] + x[1:],
                            cl=1.0, intermediate=intermediate, options=QUIET)
    x, info = problem.solve(x0)
    np.testing.assert_allclose(x, [0.5, 0.5], atol=1e-7)
    assert seen and seen[0] == 0


def test_a_program_that_changes_its_pattern_is_refused():
    def f(x):
        if x[0] > 0:  # a Python branch: another program, another pattern
            return np.sum(x ** 3)
        return np.sum(x ** 2) + np.sum(x[1:] * x[:-1])

    callbacks = IpoptCallbacks(f, np.ones(4))
    assert callbacks.hessianstructure()[0].size == 4
    with pytest.raises(ValueError, match="outside the structure"):
        callbacks.hessian(-np.ones(4), np.zeros(0), 1.0)
    # the other way round the smaller pattern fits, its other entries are zeros
    callbacks = IpoptCallbacks(f, -np.ones(4))
    rows, cols = callbacks.hessianstructure()
    values = callbacks.hessian(np.full(4, 2.0), np.zeros(0), 1.0)
    np.testing.assert_array_equal(values, np.where(rows == cols, 12.0, 0.0))


def test_bounds_of_the_wrong_size_are_refused():
    with pytest.raises(ValueError, match="lb must be"):
        ipopt_problem(lambda x: np.sum(x ** 2), np.zeros(3), lb=[0.0, 0.0])
    with pytest.raises(ValueError, match="cu must be"):
        ipopt_problem(lambda x: np.sum(x ** 2), np.zeros(3), lambda x: x, cu=np.nan)


def test_missing_cyipopt_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cyipopt", None)
    with pytest.raises(ImportError, match="pip install cyipopt"):
        ipopt_problem(lambda x: np.sum(x ** 2), np.zeros(3))
