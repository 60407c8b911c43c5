"""sparsegrad.linalg and newton(sensitivity=True): solutions and their Jacobians
against dense solves and finite differences of the whole solve."""
import doctest

import numpy as np
import pytest
import scipy.sparse

from sparsegrad import forward, sparse, linalg, DensificationError
from sparsegrad.optimize import newton
from sparsegrad.testing import assert_jacobian_equal, numerical_jacobian

N = 6
RNG = np.random.default_rng(11)
ROWS = np.concatenate([np.arange(N), RNG.integers(0, N, 9)])
COLS = np.concatenate([np.arange(N), RNG.integers(0, N, 9)])
K = len(ROWS)


def _values(x, forward_mode, dtype):
    """Matrix values: diagonally dominant, depending on x[:K] when forward."""
    base = np.concatenate([6.0 + np.arange(N), 0.3 * np.linspace(-1, 1, K - N)])
    factor = (1 + 0.5j) if np.dtype(dtype).kind == "c" else 1.0
    if not forward_mode:
        return base * factor
    return (base + np.concatenate([x[:N] ** 2, 0.3 * x[N:K]])) * factor


def _rhs(x, forward_mode, columns):
    base = np.linspace(1.0, 2.0, N * columns).reshape(N, columns)
    if forward_mode:
        base = base + np.sin(x[K:K + N * columns]).reshape(N, columns)
    return base[:, 0] if columns == 0 or columns == 1 else base


def _dense_matrix(data):
    A = np.zeros((N, N), dtype=np.result_type(data, np.float64))
    np.add.at(A, (ROWS, COLS), data)
    return A


MODES = [(True, False), (False, True), (True, True), (False, False)]
modes = pytest.mark.parametrize("a_forward,b_forward", MODES,
                                ids=["A", "b", "A-b", "constant"])
dtypes = pytest.mark.parametrize("dtype", [np.float64, np.complex128],
                                 ids=["float64", "complex128"])


def check(sparse_solve, dense_solve, x0, forward_used=True):
    result = sparse_solve(forward.seed(x0))
    expected = dense_solve(x0)
    if not forward_used:
        assert isinstance(result, np.ndarray)
        np.testing.assert_allclose(result, expected, rtol=1e-12)
        return None
    np.testing.assert_allclose(result.value, expected, rtol=1e-12)
    reference = numerical_jacobian(dense_solve, x0, method="central")
    assert_jacobian_equal(result, reference, rtol=1e-6, atol=1e-9)
    return result


def test_docstring_examples():
    failures, attempted = doctest.testmod(linalg, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert attempted > 0 and failures == 0


@dtypes
@modes
@pytest.mark.parametrize("columns", [1, 3], ids=["vector", "matrix"])
def test_spsolve(a_forward, b_forward, columns, dtype):
    x0 = RNG.uniform(-1, 1, K + N * columns)

    def solve(x, lib):
        data, b = _values(x, a_forward, dtype), _rhs(x, b_forward, columns)
        if lib == "dense":
            return np.linalg.solve(_dense_matrix(data), b)
        return linalg.spsolve(sparse.coo_matrix((data, (ROWS, COLS)), shape=(N, N)), b)

    check(lambda x: solve(x, "sparse"), lambda x: solve(x, "dense"), x0,
          a_forward or b_forward)


@pytest.mark.parametrize("trans", ["N", "T", "H"])
@dtypes
def test_splu_solve_transposed(trans, dtype):
    x0 = RNG.uniform(-1, 1, K + N)

    def solve(x, lib):
        data, b = _values(x, True, dtype), _rhs(x, True, 1)
        if lib == "dense":
            A = _dense_matrix(data)
            return np.linalg.solve({"N": A, "T": A.T, "H": A.conj().T}[trans], b)
        lu = linalg.splu(sparse.coo_matrix((data, (ROWS, COLS)), shape=(N, N)))
        return lu.solve(b, trans=trans)

    check(lambda x: solve(x, "sparse"), lambda x: solve(x, "dense"), x0)


def test_factorized_reuses_one_factorisation():
    x0 = RNG.uniform(-1, 1, K + 2 * N)
    right_hand_sides = [lambda z: np.ones(N), lambda z: np.sin(z[K:K + N]),
                        lambda z: z[K + N:] ** 2]
    seeded = forward.seed(x0)
    A = sparse.coo_matrix((_values(seeded, True, float), (ROWS, COLS)), shape=(N, N))
    solve = linalg.factorized(A)
    lu = linalg.splu(A)
    assert lu.shape == (N, N) and lu.L.shape == (N, N) and len(lu.perm_r) == N
    for g in right_hand_sides:
        x = solve(g(seeded))

        def dense(z, g=g):
            return np.linalg.solve(_dense_matrix(_values(z, True, float)), g(z))
        assert_jacobian_equal(x, numerical_jacobian(dense, x0, method="central"),
                              rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit_diagonal", [False, True])
@dtypes
@modes
def test_spsolve_triangular(lower, unit_diagonal, a_forward, b_forward, dtype):
    keep = COLS <= ROWS if lower else COLS >= ROWS
    x0 = RNG.uniform(-1, 1, K + N)

    def solve(x, lib):
        data, b = _values(x, a_forward, dtype)[keep], _rhs(x, b_forward, 1)
        if lib == "dense":
            A = np.zeros((N, N), dtype=data.dtype)
            np.add.at(A, (ROWS[keep], COLS[keep]), data)
            if unit_diagonal:
                np.fill_diagonal(A, 1.0)
            return np.linalg.solve(A, b)
        A = sparse.coo_matrix((data, (ROWS[keep], COLS[keep])), shape=(N, N))
        return linalg.spsolve_triangular(A, b, lower=lower, unit_diagonal=unit_diagonal)

    check(lambda x: solve(x, "sparse"), lambda x: solve(x, "dense"), x0,
          a_forward or b_forward)


def test_spsolve_triangular_refuses_the_other_triangle():
    A = sparse.coo_matrix((np.ones(3), ([0, 1, 0], [0, 1, 1])))
    with pytest.raises(ValueError, match="above"):
        linalg.spsolve_triangular(A, np.ones(2))
    with pytest.raises(ValueError, match="below"):
        linalg.spsolve_triangular(A.T, np.ones(2), lower=False)


def test_scipy_matrix_with_forward_rhs():
    A = scipy.sparse.random(N, N, density=0.3, random_state=5, format="csc") \
        + scipy.sparse.identity(N) * 4
    x0 = RNG.uniform(-1, 1, N)
    check(lambda x: linalg.spsolve(A, x ** 2), lambda x: np.linalg.solve(A.toarray(), x ** 2),
          x0)


@pytest.mark.parametrize("b_dtype", [np.float32, np.float64, np.complex128])
def test_float32_matrix(b_dtype):
    # SuperLU works in the precision the operands need; the Jacobian has the value's dtype
    x = forward.seed(np.array([2.0, 4.0], dtype=np.float32))
    A = sparse.diags(x) + sparse.csr_matrix(scipy.sparse.csr_matrix(
        np.array([[0.0, 1.0], [0.0, 0.0]], dtype=np.float32)))
    b = np.array([1.0, 2.0], dtype=b_dtype)
    solution = linalg.spsolve(A, b)
    expected_dtype = np.result_type(np.float32, b_dtype)
    assert solution.dtype == expected_dtype and solution.dvalue.dtype == expected_dtype
    reference = numerical_jacobian(
        lambda z: np.linalg.solve(np.diag(z) + np.eye(2, k=1), b), np.array([2.0, 4.0]),
        method="central")
    np.testing.assert_allclose(solution.dvalue.toarray(), reference, rtol=1e-5, atol=1e-6)


def test_jacobian_holds_only_the_touched_columns():
    x = forward.seed(np.arange(1.0, 11.0))
    A = sparse.diags([2 + x[:N], -np.ones(N - 1)], [0, 1])  # depends on x[0:6]
    sol = linalg.spsolve(A, np.ones(N) + x[7])  # and on x[7]
    J = sol.dvalue
    assert J.shape == (N, 10) and J.nnz == N * 7
    assert set(J.indices) == {0, 1, 2, 3, 4, 5, 7}


def test_densification_is_refused_before_allocating(monkeypatch):
    x = forward.seed(np.ones(N))
    A = sparse.diags(2 + x)
    monkeypatch.setattr(linalg, "MAX_DENSE_ENTRIES", N * N - 1)
    with pytest.raises(DensificationError, match="MAX_DENSE_ENTRIES = 35"):
        linalg.spsolve(A, np.ones(N))
    with pytest.raises(DensificationError):
        linalg.splu(A).solve(np.ones(N))
    with pytest.raises(DensificationError):
        linalg.spsolve_triangular(A, np.ones(N))
    monkeypatch.setattr(linalg, "MAX_DENSE_ENTRIES", N * N)
    assert linalg.spsolve(A, np.ones(N)).dvalue.nnz == N * N


def test_huge_seed_is_refused_quickly():
    # a 10**5-unknown system seeded in full would need a 10**10-entry Jacobian
    n = 10 ** 5
    u = forward.seed(np.ones(n))
    A = sparse.diags([4 + u, -np.ones(n - 1), -np.ones(n - 1)], [0, 1, -1])
    with pytest.raises(DensificationError, match="10000000000 entries"):
        linalg.spsolve(A, np.ones(n))


def test_sparsity_mode():
    x = forward.seed_sparsity(np.ones(3))
    A = sparse.diags([2 + x[:2], x[2:]], [0, 1])
    pattern = linalg.spsolve(A, np.ones(2)).sparsity
    assert pattern.dtype == np.bool_ and pattern.toarray().all()


def test_errors():
    A = sparse.diags(np.ones(3))
    with pytest.raises(ValueError, match="square"):
        linalg.spsolve(sparse.coo_matrix((np.ones(1), ([0], [0])), shape=(2, 3)), np.ones(2))
    with pytest.raises(TypeError, match="sparse matrix"):
        linalg.spsolve(np.eye(3), np.ones(3))
    with pytest.raises(TypeError, match="sparse right-hand side"):
        linalg.spsolve(A, scipy.sparse.identity(3))
    with pytest.raises(ValueError, match="shape"):
        linalg.spsolve(A, np.ones(4))
    x = forward.seed(np.ones(3))
    with pytest.raises(TypeError, match=r"linalg\.spsolve: right-hand side of dtype object"):
        linalg.spsolve(A, np.array(list(x), dtype=object))
    with pytest.raises(ValueError, match="trans"):
        linalg.splu(A).solve(np.ones(3), trans="X")
    with pytest.raises(RuntimeError):  # SuperLU on a singular matrix
        linalg.spsolve(sparse.diags(np.array([1.0, 0.0, 1.0])), np.ones(3))


def test_user_arrays_are_not_modified():
    b = np.ones(N)
    x = forward.seed(np.ones(N))
    A = sparse.diags(2 + x)
    linalg.spsolve(A, b)
    np.testing.assert_array_equal(b, np.ones(N))
    np.testing.assert_array_equal(x.value, np.ones(N))


# ==== Poisson with parameter-dependent conductivities ================================
def _poisson_matrix(kappa, n):
    """-div(kappa grad u) on an n x n grid, zero Dirichlet boundaries: kappa[0] in the
    left half, kappa[1] in the right half, face conductivities the mean of the nodes'."""
    h = 1.0 / (n + 1)
    idx = np.arange(n * n).reshape(n, n)
    k = kappa[np.tile((np.arange(n) >= n // 2).astype(int), n)]  # one per node
    a = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])  # the interior faces
    b = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    kf = 0.5 * (k[a] + k[b]) / h ** 2
    off = sparse.coo_matrix((np.concatenate([-kf, -kf]),
                             (np.concatenate([a, b]), np.concatenate([b, a]))),
                            shape=(n * n, n * n))
    neighbours = np.bincount(np.concatenate([a, b]), minlength=n * n)
    # the diagonal: the node's interior faces, and its boundary faces at its own kappa
    diagonal = -off.sum(axis=1).reshape(-1) + (4 - neighbours) * k / h ** 2
    return off + sparse.diags(diagonal)


def test_poisson_sensitivity_matches_finite_differences():
    n = 8
    f = np.ones(n * n)
    p0 = np.array([1.0, 3.0])
    u = linalg.spsolve(_poisson_matrix(forward.seed(p0), n), f)
    assert u.dvalue.shape == (n * n, 2)
    fd = numerical_jacobian(lambda p: scipy.sparse.linalg.spsolve(
        _poisson_matrix(p, n).value.tocsc(), f), p0, method="central")
    np.testing.assert_allclose(u.dvalue.toarray(), fd, rtol=1e-6, atol=1e-10)


# ==== newton(sensitivity=True) ======================================================
def _bratu(u, lam, scale):
    """-u'' = lam exp(u) scale(x) on (0, 1) with u = 0 at both ends."""
    n = u.size
    h = 1.0 / (n + 1)
    F = np.zeros(n, like=u) if isinstance(u, forward.value) else np.zeros(n)
    padded = np.concatenate([np.zeros(1), u, np.zeros(1)])
    F[:] = -(padded[:-2] - 2 * padded[1:-1] + padded[2:]) / h ** 2 \
        - lam * np.exp(u) * scale
    return F


def test_newton_sensitivity_matches_finite_differences():
    n = 30
    q0 = np.array([2.0, 0.5])

    def solve(q):
        lam = q[0]
        scale = 1 + q[1] * np.linspace(0, 1, n) ** 2
        return lam, scale

    q = forward.seed(q0)
    lam, scale = solve(q)
    result = newton(_bratu, np.zeros(n), args=(lam, scale), sensitivity=True)
    assert result.success
    x = result.x
    assert isinstance(x, forward.value) and x.dvalue.shape == (n, 2)

    def plain(q):
        lam, scale = solve(q)
        return newton(_bratu, np.zeros(n), args=(lam, scale), tol=1e-13).x
    np.testing.assert_allclose(x.value, plain(q0), rtol=1e-10)
    fd = numerical_jacobian(plain, q0, method="central")
    np.testing.assert_allclose(x.dvalue.toarray(), fd, rtol=1e-5, atol=1e-8)
    # the residual at the solution is zero to first order in q: F(x(q), q) = 0
    residual = _bratu(x, lam, scale)
    np.testing.assert_allclose(residual.dvalue.toarray(), 0, atol=1e-6)


def test_newton_sensitivity_arguments():
    p = forward.seed(np.array([4.0, 9.0]))
    with pytest.raises(TypeError, match="sensitivity=True"):
        newton(lambda x, p: x ** 2 - p, np.ones(2), args=(p,))
    with pytest.raises(ValueError, match="forward values among args"):
        newton(lambda x, p: x ** 2 - p, np.ones(2), args=(p.value,), sensitivity=True)
    failed = newton(lambda x, p: x ** 2 + p, np.ones(2), args=(p,), sensitivity=True,
                    maxiter=3)
    assert not failed.success and isinstance(failed.x, np.ndarray)
    # a parameter the residual ignores: zero sensitivity
    c = forward.seed(np.array([1.0]))
    result = newton(lambda x, p, c: x ** 2 - p, np.ones(2), args=(p.value, c),
                    sensitivity=True)
    assert result.x.dvalue.nnz == 0
    np.testing.assert_allclose(result.x.value, [2.0, 3.0])


def _bilinear(x, p):
    """x0 = p0, x0 x1 = p1: x = (p0, p1 / p0), F_x = [[1, 0], [x1, x0]] singular at x0 = 0."""
    return np.stack([x[0] - p[0], x[0] * x[1] - p[1]])


def test_newton_sensitivity_at_a_singular_solution_is_a_failed_result():
    # a regular solution: dx/dp = [[1, 0], [-p1 / p0**2, 1 / p0]] by hand
    p = forward.seed(np.array([1.0, 2.0]))
    result = newton(_bilinear, np.ones(2), args=(p,), sensitivity=True)
    assert result.success and result.status == 1
    np.testing.assert_allclose(result.x.value, [1.0, 2.0])
    np.testing.assert_allclose(result.x.dvalue.toarray(), [[1.0, 0.0], [-2.0, 1.0]],
                               rtol=1e-12)
    # p = 0: one Newton step reaches x = (0, 1) exactly, where F_x is singular and
    # x1 is not determined by p; no derivative exists, and that is a failed result
    # (as a singular Newton step is), not SuperLU's RuntimeError
    p = forward.seed(np.zeros(2))
    result = newton(_bilinear, np.ones(2), args=(p,), sensitivity=True)
    assert not result.success and result.status == -6 and result.nit == 1
    assert isinstance(result.x, np.ndarray)
    np.testing.assert_array_equal(result.x, [0.0, 1.0])
    np.testing.assert_array_equal(result.fun, [0.0, 0.0])
    assert "F_x is singular" in result.message
    assert "converged: residual norm below tol" in result.message
    assert "Factor is exactly singular" in result.message
    # starting at the solution: no iteration, the same failure
    result = newton(lambda x, p: x ** 2 - p, np.array([0.0, 2.0]),
                    args=(forward.seed(np.array([0.0, 4.0])),), sensitivity=True)
    assert result.status == -6 and result.nit == 0
    np.testing.assert_array_equal(result.x, [0.0, 2.0])


def test_implicit_solution_at_a_singular_jacobian_names_it():
    p = forward.seed(np.zeros(2))
    with pytest.raises(RuntimeError, match="F_x of F with respect to x is singular"):
        linalg.implicit_solution(_bilinear, np.array([0.0, 1.0]), (p,))
    # the same call at a regular solution: the hand-derived dx/dp
    p = forward.seed(np.array([2.0, 3.0]))
    x = linalg.implicit_solution(_bilinear, np.array([2.0, 1.5]), (p,))
    np.testing.assert_allclose(x.dvalue.toarray(), [[1.0, 0.0], [-0.75, 0.5]], rtol=1e-12)


def test_newton_sensitivity_with_several_parameters_and_a_shaped_x():
    a, b = forward.seed(np.array(2.0), np.array([1.0, 3.0]))
    result = newton(lambda x, a, b: a * x ** 3 - b[:, None] * np.ones((2, 2)),
                    np.ones((2, 2)), args=(a, b), sensitivity=True)
    x = result.x
    assert x.shape == (2, 2)

    def plain(z):
        return (np.ones((2, 2)) * z[1:, None] / z[0]) ** (1 / 3)
    expected = numerical_jacobian(plain, np.array([2.0, 1.0, 3.0]), method="central")
    np.testing.assert_allclose(x.value, plain(np.array([2.0, 1.0, 3.0])), rtol=1e-10)
    np.testing.assert_allclose(x.dvalue.toarray(), expected, rtol=1e-6)
