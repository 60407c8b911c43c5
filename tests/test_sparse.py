"""sparsegrad.sparse: every operation against a dense numpy reference.

Each case is a function ``f(x, lib)`` written twice over one body: with
``lib="sparse"`` it builds :class:`sparsegrad.sparse.SparseMatrix` objects
(``x`` a forward value), with ``lib="dense"`` plain dense matrices (``x`` an
ndarray).  The forward value must equal the dense result and its Jacobian the
central differences of the dense function, for every combination of constant
and forward operands, real and complex values.
"""
import doctest

import numpy as np
import pytest
import scipy.sparse

from sparsegrad import forward, sparse, DensificationError
from sparsegrad.testing import assert_jacobian_equal, numerical_jacobian

try:
    from hypothesis import given, settings, strategies as st
except ImportError:  # pragma: no cover
    given = None

M, N, P = 5, 4, 3
RNG = np.random.default_rng(7)


def _coordinates(m, n, count, rng, empty_row=None):
    """Random coordinates with duplicates; ``empty_row`` gets no entry."""
    rows = rng.integers(0, m, count)
    cols = rng.integers(0, n, count)
    if empty_row is not None and m > 1:
        rows[rows == empty_row] = (empty_row + 1) % m
    rows[:2], cols[:2] = rows[2], cols[2]  # duplicates, for sure
    return rows, cols


# three fixed patterns: A (M x N), B (N x P), C (M x N, overlapping A's)
A_COORDS = _coordinates(M, N, 11, RNG, empty_row=2)
B_COORDS = _coordinates(N, P, 7, RNG, empty_row=1)
C_COORDS = _coordinates(M, N, 6, RNG)


def _dense(rows, cols, data, shape):
    out = np.zeros(shape, dtype=np.result_type(data, np.float64))
    np.add.at(out, (rows, cols), data)
    return out


class Operands:
    """Builds operands from consecutive pieces of ``x`` (forward ones) or constants."""

    def __init__(self, x, lib, modes, dtype):
        self.x, self.lib, self.modes, self.dtype, self.used = x, lib, list(modes), dtype, 0
        self.factor = (1 + 0.5j) if np.dtype(dtype).kind == "c" else 1.0

    def _values(self, count, offset):
        mode = self.modes.pop(0)
        base = np.linspace(1.0, 2.0, count) + offset
        if mode == "const":
            return base * self.factor
        piece = self.x[self.used:self.used + count]
        self.used += count
        return (base + piece ** 2 - 0.5 * piece) * self.factor

    def matrix(self, coords, shape):
        rows, cols = coords
        data = self._values(len(rows), 0.3)
        if self.lib == "sparse":
            return sparse.coo_matrix((data, (rows, cols)), shape=shape)
        return _dense(rows, cols, data, shape)

    def vector(self, count):
        return self._values(count, -1.0)

    def matrix2d(self, shape):
        return self._values(int(np.prod(shape)), 0.1).reshape(shape)

    def scalar(self):
        return self._values(1, 0.5)[0]


def _size(f, modes):
    """Number of seed elements the operands of ``f`` use."""
    probe = Operands(np.zeros(1000), "dense", modes, np.float64)
    f(probe)
    return max(probe.used, 1)


def check(f, modes, dtype=np.float64):
    """``f(ops)`` on SparseMatrix operands against the same on dense operands."""
    x0 = np.random.default_rng(3).uniform(-1, 1, _size(f, modes))

    def dense(x):
        return np.asarray(f(Operands(x, "dense", modes, dtype)))

    result = f(Operands(forward.seed(x0), "sparse", modes, dtype))
    if isinstance(result, sparse.SparseMatrix):
        result = result.toarray()
    expected = dense(x0)
    if not isinstance(result, forward.value):
        assert "forward" not in modes
        if scipy.sparse.issparse(result):
            result = result.toarray()
        np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-13, atol=1e-13)
        return None
    np.testing.assert_allclose(result.value, expected, rtol=1e-13, atol=1e-13)
    assert result.value.shape == expected.shape
    reference = numerical_jacobian(dense, x0, method="central")
    assert_jacobian_equal(result, reference, rtol=1e-6, atol=1e-8)
    return result


BOTH = [("const", "forward"), ("forward", "const"), ("forward", "forward"),
        ("const", "const")]
DTYPES = [np.float64, np.complex128]
two_modes = pytest.mark.parametrize("modes", BOTH, ids="-".join)
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)


def test_docstring_examples():
    failures, attempted = doctest.testmod(sparse, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert attempted > 0 and failures == 0


# ==== products ========================================================================
@dtypes
@two_modes
def test_matrix_vector(modes, dtype):
    check(lambda o: o.matrix(A_COORDS, (M, N)) @ o.vector(N), modes, dtype)


@dtypes
@two_modes
def test_matrix_dense_matrix(modes, dtype):
    check(lambda o: o.matrix(A_COORDS, (M, N)) @ o.matrix2d((N, 2)), modes, dtype)


@dtypes
@two_modes
def test_vector_matrix(modes, dtype):
    # y @ A, with y first: the operand order of the modes is (A, y)
    def f(o):
        A = o.matrix(A_COORDS, (M, N))
        return o.vector(M) @ A
    check(f, modes, dtype)


@two_modes
def test_dense_matrix_times_matrix(modes):
    def f(o):
        A = o.matrix(A_COORDS, (M, N))
        return o.matrix2d((2, M)) @ A
    check(f, modes)


@dtypes
@two_modes
def test_sparse_sparse_product(modes, dtype):
    check(lambda o: o.matrix(A_COORDS, (M, N)) @ o.matrix(B_COORDS, (N, P)), modes, dtype)


@pytest.mark.parametrize("mode", ["const", "forward"])
def test_product_with_scipy_matrices(mode):
    S = scipy.sparse.random(P, M, density=0.4, random_state=2, format="csr")
    T = scipy.sparse.random(N, P, density=0.4, random_state=3, format="csc")

    def f(o):
        A = o.matrix(A_COORDS, (M, N))
        if o.lib == "dense":
            return S.toarray() @ A @ T.toarray()
        return S @ A @ T
    check(f, [mode])


def test_diags_times_matrix():
    def f(o):
        d = o.vector(M)
        A = o.matrix(A_COORDS, (M, N))
        if o.lib == "dense":
            return np.diag(d) @ A
        return sparse.diags(d) @ A
    for modes in BOTH:
        check(f, modes)


def test_product_pattern_is_structural():
    # entries that cancel stay stored: the pattern depends on the patterns only
    A = sparse.csr_matrix(scipy.sparse.csr_matrix(np.array([[1.0, 1.0]])))
    B = sparse.csr_matrix(scipy.sparse.csr_matrix(np.array([[1.0], [-1.0]])))
    C = A @ B
    assert C.nnz == 1 and C.value.toarray()[0, 0] == 0


# ==== sums and scaling ================================================================
@dtypes
@two_modes
def test_add_union_pattern(modes, dtype):
    check(lambda o: o.matrix(A_COORDS, (M, N)) + o.matrix(C_COORDS, (M, N)), modes, dtype)


@two_modes
def test_subtract(modes):
    check(lambda o: o.matrix(A_COORDS, (M, N)) - o.matrix(C_COORDS, (M, N)), modes)


@two_modes
def test_add_same_pattern(modes):
    check(lambda o: o.matrix(A_COORDS, (M, N)) + o.matrix(A_COORDS, (M, N)), modes)


@pytest.mark.parametrize("mode", ["const", "forward"])
def test_add_scipy_matrix(mode):
    S = scipy.sparse.random(M, N, density=0.3, random_state=4, format="csr")

    def f(o):
        A = o.matrix(A_COORDS, (M, N))
        return (S.toarray() if o.lib == "dense" else S) + A - 2 * A
    check(f, [mode])


@dtypes
@two_modes
def test_scale(modes, dtype):
    def f(o):
        alpha = o.scalar()
        A = o.matrix(A_COORDS, (M, N))
        return alpha * A - A * alpha / 4
    check(f, modes, dtype)


def test_negation_and_subtraction_keep_the_pattern():
    A = sparse.coo_matrix((forward.seed(np.ones(3)), ([0, 1, 1], [0, 0, 1])))
    Z = A - A
    assert Z.nnz == 3 and np.all(Z.value.data == 0)
    assert Z.data.dvalue.nnz == 3  # the derivative cancels, the entries stay


# ==== elementwise product =============================================================
@dtypes
@two_modes
def test_multiply_sparse(modes, dtype):
    def f(o):
        A, C = o.matrix(A_COORDS, (M, N)), o.matrix(C_COORDS, (M, N))
        return A * C if o.lib == "dense" else A.multiply(C)
    check(f, modes, dtype)


@pytest.mark.parametrize("shape", [(M, N), (N,), (1, N), (M, 1)], ids=str)
@two_modes
def test_multiply_dense(modes, shape):
    def f(o):
        A = o.matrix(A_COORDS, (M, N))
        D = o.matrix2d(shape)
        if o.lib == "dense":
            return A * D
        return A.multiply(D)
    check(f, modes)


def test_multiply_intersection_pattern():
    A = sparse.coo_matrix((np.ones(3), ([0, 1, 1], [0, 0, 1])), shape=(2, 2))
    B = sparse.coo_matrix((np.ones(2), ([1, 0], [1, 1])), shape=(2, 2))
    C = A.multiply(B)
    assert C.nnz == 1 and C.value.toarray().tolist() == [[0, 0], [0, 1]]
    empty = sparse.coo_matrix((np.zeros(0), ([], [])), shape=(2, 2))
    assert A.multiply(empty).nnz == 0


# ==== linear maps of the values =======================================================
@dtypes
@pytest.mark.parametrize("mode", ["const", "forward"])
def test_transpose(mode, dtype):
    def f(o):
        A = o.matrix(A_COORDS, (M, N))
        return A.T @ np.arange(1.0, M + 1)
    check(f, [mode], dtype)
    check(lambda o: o.matrix(A_COORDS, (M, N)).T, ["forward"], dtype)


@pytest.mark.parametrize("k", [-2, -1, 0, 1, 3])
def test_diagonal(k):
    def f(o):
        A = o.matrix(A_COORDS, (M, N))
        return np.diagonal(A, k).copy() if o.lib == "dense" else A.diagonal(k)
    check(f, ["forward"])
    check(f, ["const"])


@dtypes
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_sum(axis, dtype):
    def f(o):
        A = o.matrix(A_COORDS, (M, N))
        if o.lib == "dense":
            return A.sum(axis=axis, keepdims=axis is not None)
        return A.sum(axis=axis)
    check(f, ["forward"], dtype)
    value = sparse.coo_matrix((np.ones(3), ([0, 1, 1], [0, 0, 1]))).sum(axis=axis)
    expected = scipy.sparse.csr_matrix(np.array([[1.0, 0], [1, 1]])).sum(axis=axis)
    np.testing.assert_array_equal(np.asarray(value), np.asarray(expected))


def test_toarray_and_conj():
    def f(o):
        A = o.matrix(A_COORDS, (M, N))
        return np.conj(A) if o.lib == "dense" else A.conj()
    check(f, ["forward"], np.complex128)


# ==== constructors ====================================================================
@dtypes
def test_coo_sums_duplicates(dtype):
    rows, cols = A_COORDS
    result = check(lambda o: o.matrix(A_COORDS, (M, N)), ["forward"], dtype)
    A = sparse.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(M, N))
    reference = scipy.sparse.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(M, N))
    reference = reference.tocsr()
    reference.sum_duplicates()
    np.testing.assert_array_equal(A.indptr, reference.indptr)
    np.testing.assert_array_equal(A.indices, reference.indices)
    assert A.value.getnnz(axis=1)[2] == 0  # the empty row
    assert result is not None


def test_csr_from_arrays_with_unsorted_and_repeated_indices():
    x0 = np.array([1.0, 2.0, 3.0, 4.0])
    indices, indptr = np.array([2, 0, 2, 1]), np.array([0, 3, 3, 4])

    def f(x):
        A = sparse.csr_matrix((x ** 2, indices, indptr), shape=(3, 3))
        return A.toarray()

    result = f(forward.seed(x0))
    reference = scipy.sparse.csr_matrix((x0 ** 2, indices, indptr), shape=(3, 3))
    np.testing.assert_array_equal(result.value, reference.toarray())
    expected = numerical_jacobian(lambda x: scipy.sparse.csr_matrix(
        (x ** 2, indices, indptr), shape=(3, 3)).toarray(), x0, method="central")
    assert_jacobian_equal(result, expected, rtol=1e-6)
    assert sparse.csr_matrix((x0, indices, indptr)).shape == (3, 3)


def test_diags_matches_scipy():
    d0, d1 = np.arange(1.0, 5.0), np.arange(1.0, 4.0)
    expected = scipy.sparse.diags([d0, d1, 2.0], [0, 1, -1]).toarray()
    np.testing.assert_array_equal(sparse.diags([d0, d1, 2.0], [0, 1, -1]).value.toarray(),
                                  expected)
    expected = scipy.sparse.diags([d1], [-1], shape=(4, 3)).toarray()
    np.testing.assert_array_equal(sparse.diags([d1], [-1], shape=(4, 3)).value.toarray(),
                                  expected)

    def f(o):
        a, b = o.vector(4), o.vector(3)
        if o.lib == "dense":
            return np.diag(a) + np.diag(b, 1) + np.diag(b, -1)
        return sparse.diags([a, b, b], [0, 1, -1])
    for modes in [("forward", "const"), ("const", "forward"), ("forward", "forward")]:
        check(f, modes)


def test_assemble_finite_elements():
    # 1-d linear elements with a conductivity per element, and rectangular blocks
    elements = np.array([[0, 1], [1, 2], [2, 3]])
    local = np.array([[1.0, -1.0], [-1.0, 1.0]])

    def f(o):
        c = o.vector(3)
        blocks = c[:, None, None] * local
        if o.lib == "dense":
            K = np.zeros((4, 4), dtype=blocks.dtype)
            for e, dofs in enumerate(elements):
                K[np.ix_(dofs, dofs)] += blocks[e]
            return K
        return sparse.assemble(elements, blocks, (4, 4))
    check(f, ["forward"])
    rect = sparse.assemble((np.array([[0], [1]]), np.array([[0, 1], [1, 2]])),
                           np.arange(4.0).reshape(2, 1, 2), (2, 3))
    np.testing.assert_array_equal(rect.value.toarray(), [[0, 1, 0], [0, 2, 3]])


def test_very_wide_pattern():
    # row * n_cols would overflow int64: the pattern is sorted by (row, col) pairs
    A = sparse.coo_matrix((np.arange(1.0, 4.0), ([1, 0, 1], [2 ** 61, 5, 2 ** 61])),
                          shape=(2, 2 ** 62))
    assert A.nnz == 2 and A.indices.tolist() == [5, 2 ** 61] and A.data.tolist() == [2, 4]


def test_constructors_copy_user_arrays():
    data, rows, cols = np.array([1.0, 2.0]), np.array([0, 1]), np.array([1, 0])
    A = sparse.coo_matrix((data, (rows, cols)))
    data[:] = 7
    rows[:] = 0
    assert A.value.toarray().tolist() == [[0, 1], [2, 0]]
    x = forward.seed(np.array([1.0, 2.0]))
    B = sparse.coo_matrix((x, (np.array([1, 0]), np.array([0, 0]))))
    (B @ np.ones(1)).dvalue
    np.testing.assert_array_equal(x.value, [1.0, 2.0])


def test_constructor_from_scipy_keeps_explicit_zeros():
    S = scipy.sparse.csr_matrix((np.array([0.0, 1.0]), np.array([0, 1]), np.array([0, 1, 2])))
    A = sparse.csr_matrix(S)
    assert A.nnz == 2 and not A.is_forward
    assert sparse.coo_matrix(A) is not A and sparse.coo_matrix(A).nnz == 2


def test_dtypes_are_kept():
    x = forward.seed(np.ones(3, dtype=np.float32))
    A = sparse.coo_matrix((x, ([0, 1, 2], [0, 1, 2])))
    y = A @ np.ones(3, dtype=np.float32)
    assert y.dtype == np.float32 and y.dvalue.dtype == np.float32
    assert (A @ A).dtype == np.float32 and A.sum(axis=0).dtype == np.float32
    assert A.value.dtype == np.float32


def test_sparsity_mode():
    x = forward.seed_sparsity(np.ones(4))
    A = sparse.diags([x, x[1:]], [0, 1])
    J = (A @ np.ones(4)).sparsity
    assert J.dtype == np.bool_
    assert J.toarray().tolist() == [[True, True, False, False], [False, True, True, False],
                                    [False, False, True, True], [False, False, False, True]]


def test_empty_matrices():
    x = forward.seed(np.ones(3))
    none = np.array([], dtype=int)
    E = sparse.coo_matrix((x[none], (none, none)), shape=(2, 3))
    y = E @ x
    assert y.value.tolist() == [0, 0] and y.dvalue.shape == (2, 3) and y.dvalue.nnz == 0
    A = sparse.diags(x)
    assert (E @ A).nnz == 0 and (E @ A).shape == (2, 3) and (A @ E.T).shape == (3, 2)
    assert (E + E).nnz == 0 and E.multiply(E).nnz == 0
    assert E.sum(axis=0).dvalue.shape == (3, 3) and E.diagonal().value.tolist() == [0, 0]
    Z = sparse.coo_matrix((x[none], (none, none)), shape=(0, 3))
    assert (Z @ x).value.shape == (0,) and Z.sum(axis=1).shape == (0, 1)
    assert A.diagonal(5).value.shape == (0,)


def test_values_from_different_seeds_refuse_to_combine():
    a, b = forward.seed(np.ones(2)), forward.seed(np.ones(2))
    with pytest.raises(ValueError, match="seed"):
        sparse.diags(a) @ b


# ==== errors ==========================================================================
def test_errors_are_loud():
    x = forward.seed(np.ones(3))
    A = sparse.coo_matrix((x, ([0, 1, 1], [0, 0, 1])))
    with pytest.raises(TypeError, match="A @ B"):
        A * A
    with pytest.raises(TypeError, match="A @ B"):
        A * np.ones((2, 2))
    with pytest.raises(TypeError, match="dense"):
        A + np.ones((2, 2))
    with pytest.raises(TypeError, match="dense"):
        A + 1.0
    for same in (A + 0, 0 + A, A - 0, +A):   # new matrices, as scipy's (never A itself)
        assert same is not A and not np.shares_memory(same.data.value, A.data.value)
        np.testing.assert_array_equal(same.toarray().value, A.toarray().value)
    with pytest.raises(ValueError, match="dimension mismatch"):
        A @ np.ones(3)
    with pytest.raises(TypeError, match="operand of dtype object"):
        A @ np.array([x[0], x[1]], dtype=object)
    with pytest.raises(ValueError, match="dimension mismatch"):
        A @ sparse.diags(np.ones(3))
    with pytest.raises(ValueError, match="differ"):
        A + sparse.diags(np.ones(3))
    with pytest.raises(ValueError, match="out of range"):
        sparse.coo_matrix((np.ones(1), ([3], [0])), shape=(2, 2))
    with pytest.raises(ValueError, match="values for"):
        sparse.coo_matrix((np.ones(2), ([0], [0])))
    with pytest.raises(TypeError, match="drop its derivative"):
        np.asarray(A, dtype=float)
    with pytest.raises(TypeError, match="expected"):
        sparse.coo_matrix(np.ones((2, 2)))
    with pytest.raises(ValueError, match="repeated offset"):
        sparse.diags([np.ones(2), np.ones(2)], [0, 0])
    with pytest.raises(ValueError, match="expected 2"):
        sparse.diags([np.ones(3)], [0], shape=(2, 2))
    with pytest.raises(TypeError, match="integers"):
        sparse.coo_matrix((np.ones(1), ([0.5], [0])))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(A)


def test_nothing_densifies():
    # a long chain of operations on a large banded matrix stays O(nnz) in its Jacobian
    n = 20000
    u = forward.seed(np.linspace(0, 1, n))
    A = sparse.diags([1 + u ** 2, -u[1:], -u[:-1]], [0, 1, -1])
    r = (A @ A).T @ u + A.multiply(A).sum(axis=1).reshape(-1) - A.diagonal()
    J = r.dvalue
    assert J.shape == (n, n) and J.nnz <= 7 * n
    assert (A + A.T).data.dvalue.nnz <= 5 * n
    assert DensificationError  # (the solves in sparsegrad.linalg raise it)


# ==== the done criterion: a finite-volume residual A(x) @ x - b ======================
def _conductivity(u):
    return 1 + u ** 2


def _fv_matrix(u, h):
    """-d/dx (k(u) du/dx) on interior nodes, Dirichlet rows on the ends; face
    conductivities are means of the node values."""
    n = u.size
    k = _conductivity(u)
    kf = 0.5 * (k[1:] + k[:-1])  # face i+1/2 between nodes i and i+1
    west, east = kf[:-1] / h ** 2, kf[1:] / h ** 2  # interior nodes 1..n-2
    rows = np.concatenate([[0, n - 1], np.arange(1, n - 1), np.arange(1, n - 1),
                           np.arange(1, n - 1)])
    cols = np.concatenate([[0, n - 1], np.arange(1, n - 1), np.arange(0, n - 2),
                           np.arange(2, n)])
    data = np.concatenate([np.ones(2), west + east, -west, -east])
    return sparse.coo_matrix((data, (rows, cols)), shape=(n, n))


def _fv_stencil(u, h, b):
    """The same residual expanded by hand."""
    k = _conductivity(u)
    kf = 0.5 * (k[1:] + k[:-1])
    F = np.zeros(u.size, like=u) if isinstance(u, forward.value) else np.zeros(u.size)
    F[0], F[-1] = u[0] - b[0], u[-1] - b[-1]
    F[1:-1] = (kf[:-1] * (u[1:-1] - u[:-2]) - kf[1:] * (u[2:] - u[1:-1])) / h ** 2 - b[1:-1]
    return F


def test_finite_volume_residual_matches_the_hand_expanded_stencil():
    n = 40
    h = 1.0 / (n - 1)
    x = np.linspace(0, 1, n)
    u0 = np.sin(3 * x) + 0.5
    b = np.cos(x)
    u = forward.seed(u0)
    via_matrix = _fv_matrix(u, h) @ u - b
    by_hand = _fv_stencil(forward.seed(u0), h, b)
    np.testing.assert_allclose(via_matrix.value, by_hand.value, rtol=1e-12, atol=1e-9)
    J, K = via_matrix.dvalue, by_hand.dvalue
    np.testing.assert_allclose(J.toarray(), K.toarray(), rtol=1e-12, atol=1e-9)
    assert J.nnz == K.nnz == 2 + 3 * (n - 2)  # tridiagonal: nothing densified
    reference = numerical_jacobian(lambda v: _fv_matrix(v, h).value @ v - b, u0)
    np.testing.assert_allclose(J.toarray(), reference, rtol=1e-9, atol=1e-6)


# ==== random shapes ===================================================================
if given is not None:
    @settings(max_examples=25, deadline=None)
    @given(m=st.integers(1, 6), n=st.integers(1, 6), p=st.integers(1, 4),
           count=st.integers(0, 12), seed=st.integers(0, 2 ** 16))
    def test_random_shapes(m, n, p, count, seed):
        rng = np.random.default_rng(seed)
        a_coords = (rng.integers(0, m, count), rng.integers(0, n, count))
        b_count = int(rng.integers(0, 8))
        b_coords = (rng.integers(0, n, b_count), rng.integers(0, p, b_count))

        def product(o):
            A = o.matrix(a_coords, (m, n))
            return A @ o.matrix(b_coords, (n, p)) @ o.vector(p)

        def others(o):
            A = o.matrix(a_coords, (m, n))
            B = o.matrix(a_coords[::-1] if m == n else a_coords, (m, n))
            product = A * B if o.lib == "dense" else A.multiply(B)
            return (A + product).T @ o.vector(m)

        for modes in [("forward", "forward", "forward"), ("const", "forward", "const")]:
            check(product, modes)
            check(others, modes)
