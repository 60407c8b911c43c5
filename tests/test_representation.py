"""The factored Jacobian ``s * diag(d) * M``: sharing, structural zeros, copies, dtypes.

Two layers are tested: the algebra of :mod:`sparsegrad._jacobian` directly, and
what it guarantees through the public API (a forward value's factored Jacobian
is reachable as ``fv._jacobian``).
"""
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from sparsegrad import forward
from sparsegrad._errors import SeedMismatchError
from sparsegrad import _jacobian as jac


def _seed(n, pattern_only=False):
    return jac.Seed(n, scalar=False, complex=False, pattern_only=pattern_only)


def _csr(dense):
    return jac.CSR.from_scipy(sp.csr_matrix(np.asarray(dense, dtype=float)))


def _to_dense(J, dtype=np.float64):
    return jac.materialize(J).to_scipy(dtype).toarray()


def _pattern(matrix):
    m = sp.csr_matrix(matrix)
    return m.indptr.tolist(), m.indices.tolist()


def _canonical(m):
    """``m`` is a csr_matrix whose columns strictly increase within every row.

    Checked from the arrays, not from scipy's flags (which ``.dvalue`` sets).
    """
    assert isinstance(m, sp.csr_matrix)
    assert m.has_sorted_indices and m.has_canonical_format
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    same_row = rows[1:] == rows[:-1]
    assert np.all(np.diff(m.indices.astype(np.int64))[same_row] > 0)


# ---------------------------------------------------------------------------
# sparsegrad._jacobian
# ---------------------------------------------------------------------------

class TestAlgebra:
    def test_identity_and_scale(self):
        s = _seed(3)
        J = jac.identity(s)
        assert J.shape == (3, 3)
        assert_array_equal(_to_dense(J), np.eye(3))
        K = jac.scale(jac.scale(J, 2.0), np.array([1.0, -1.0, 0.5]))
        assert K.matrix is J.matrix
        assert_array_equal(_to_dense(K), np.diag([2.0, -2.0, 1.0]))

    def test_add_same_matrix_keeps_it(self):
        s = _seed(4)
        M = _csr([[1, 0, 2, 0], [0, 0, 0, 3], [4, 5, 0, 0]])
        A = jac.Jacobian(s, 3, 2.0, np.array([1.0, 2.0, 3.0]), M)
        B = jac.Jacobian(s, 3, -1.0, None, M)
        C = jac.add([A, B])
        assert C.matrix is M
        dense = M.to_scipy(np.float64).toarray()
        assert_allclose(_to_dense(C), np.diag([1.0, 3.0, 5.0]) @ dense)

    def test_add_different_matrices_merges(self):
        s = _seed(3)
        M1 = _csr([[1, 0, 0], [0, 0, 2]])
        M2 = _csr([[0, 3, 0], [0, 0, 4]])
        C = jac.add([jac.Jacobian(s, 2, 1.0, None, M1), jac.Jacobian(s, 2, 2.0, None, M2)])
        assert_array_equal(_to_dense(C), [[1, 6, 0], [0, 0, 10]])

    def test_add_keeps_structural_zeros(self):
        s = _seed(3)
        J = jac.identity(s)
        Z = jac.add([J, jac.scale(J, -1.0)])
        m = jac.materialize(Z).to_scipy(np.float64)
        assert m.nnz == 3
        assert_array_equal(m.indices, [0, 1, 2])
        assert_array_equal(m.data, 0.0)
        M1 = _csr([[1, 0, 0], [0, 0, 2]])
        M2 = _csr([[-1, 0, 0], [0, 0, -2]])
        m = jac.materialize(jac.add([jac.Jacobian(s, 2, matrix=M1),
                                     jac.Jacobian(s, 2, matrix=M2)])).to_scipy(np.float64)
        assert m.nnz == 2
        assert_array_equal(m.data, 0.0)

    def test_seed_mismatch(self):
        with pytest.raises(SeedMismatchError):
            jac.add([jac.identity(_seed(2)), jac.identity(_seed(2))])

    def test_take_rows(self):
        s = _seed(4)
        J = jac.scale(jac.identity(s), np.array([1.0, 2.0, 3.0, 4.0]))
        T = jac.take_rows(J, [3, -1, 0, 3])
        dense = _to_dense(T)
        assert_array_equal(dense, [[0, 0, 0, 4], [0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 4]])
        assert jac.materialize(T).nnz == 3           # the -1 row is structurally empty
        assert jac.take_rows(J, np.arange(4)) is J
        E = jac.take_rows(J, np.zeros(0, dtype=np.int64))
        assert E.shape == (0, 4)

    def test_take_rows_of_matrix(self):
        s = _seed(3)
        M = _csr([[1, 0, 2], [0, 3, 0]])
        T = jac.take_rows(jac.Jacobian(s, 2, 2.0, None, M), [1, 1, 0])
        assert_array_equal(_to_dense(T), [[0, 6, 0], [0, 6, 0], [2, 0, 4]])

    def test_csr_is_immutable_copy(self):
        source = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 3, 0]]))
        M = jac.CSR.from_scipy(source)
        source.data[:] = 7.0
        assert_array_equal(M.data, [1.0, 2.0, 3.0])
        for array in (M.indptr, M.indices, M.data):
            with pytest.raises(ValueError):
                array[0] = 0
        out = M.to_scipy(np.float64)
        out.data[:] = -1.0
        out.indices[:] = 0
        assert_array_equal(M.data, [1.0, 2.0, 3.0])
        assert_array_equal(M.indices, [0, 2, 1])

    def test_from_scipy_keeps_explicit_zeros_and_sums_duplicates(self):
        coo = sp.coo_matrix((np.array([0.0, 1.0, 2.0]), (np.array([0, 1, 1]),
                                                          np.array([1, 0, 0]))), shape=(2, 2))
        M = jac.CSR.from_scipy(coo)
        assert M.nnz == 2
        assert_array_equal(M.indptr, [0, 1, 2])
        assert_array_equal(M.data, [0.0, 3.0])

    def test_left_multiply(self):
        s = _seed(3)
        A = _csr([[1, 2, 0], [0, 0, 3]])
        J = jac.scale(jac.identity(s), np.array([1.0, 10.0, 100.0]))
        assert_array_equal(_to_dense(jac.left_multiply(A, J)), [[1, 20, 0], [0, 0, 300]])
        M = _csr([[1, 1, 0], [0, 1, 0], [0, 0, 1]])
        K = jac.left_multiply(A, jac.Jacobian(s, 3, matrix=M))
        assert_array_equal(_to_dense(K), [[1, 3, 0], [0, 0, 3]])

    def test_vstack_and_zero(self):
        s = _seed(2)
        Z = jac.zero(s, 2)
        assert Z.is_zero and Z.shape == (2, 2)
        V = jac.vstack([jac.identity(s), Z, jac.scale(jac.identity(s), 3.0)])
        assert_array_equal(_to_dense(V), np.vstack([np.eye(2), np.zeros((2, 2)), 3 * np.eye(2)]))

    def test_vstack_is_merged_once_when_needed(self):
        s = _seed(3)
        A = jac.add([jac.identity(s), jac.Jacobian(s, 3, matrix=_csr(np.eye(3)[[2, 0, 1]]))])
        B = jac.scale(jac.take_rows(jac.identity(s), np.array([1, -1])), 2.0)
        V = jac.vstack([A, jac.zero(s, 1), jac.vstack([B, A])])
        expected = np.vstack([np.eye(3) + np.eye(3)[[2, 0, 1]], np.zeros((1, 3)),
                              2 * np.eye(3)[[1]], np.zeros((1, 3)),
                              np.eye(3) + np.eye(3)[[2, 0, 1]]])
        assert V.shape == (9, 3) and not V.is_zero
        assert [J.n_rows for _, J in V.pieces()] == [3, 1, 2, 3]  # nested stacks flatten
        m = jac.to_scipy(V, np.float64)
        assert m.indices.dtype == np.int32 and m.indptr.dtype == np.int32
        assert_array_equal(m.toarray(), expected)
        assert_array_equal(_to_dense(jac.scale(V, 3.0)), 3 * expected)
        factor = np.arange(9.0)
        scaled = jac.scale(V, factor)
        total = jac.add([scaled, V])
        assert scaled._blocks is not None  # scaled block by block, not merged
        assert total._blocks is not None
        assert_array_equal(_to_dense(scaled), factor[:, None] * expected)
        assert_array_equal(_to_dense(total), (factor[:, None] + 1) * expected)
        I = jac.identity(s)
        other = jac.add([V, jac.vstack([I, I, I])])  # other row blocks: merged
        assert_array_equal(_to_dense(other), expected + np.vstack([np.eye(3)] * 3))
        # a gather merges the stack once
        assert_array_equal(_to_dense(jac.take_rows(V, np.array([8, 0]))), expected[[8, 0]])
        assert jac.vstack([jac.zero(s, 2), jac.zero(s, 1)]).is_zero

    def test_to_scipy_owns_its_arrays(self):
        s = _seed(3)
        M = _csr([[1, 0, 2], [0, 3, 0], [4, 0, 0]])
        J = jac.Jacobian(s, 3, matrix=M)
        m = jac.to_scipy(J, np.float64)
        m.data[:] = 0.0
        m.indices[:] = 0
        assert_array_equal(_to_dense(J), [[1, 0, 2], [0, 3, 0], [4, 0, 0]])
        z = jac.to_scipy(jac.zero(s, 2), np.float32)
        assert z.shape == (2, 3) and z.nnz == 0 and z.dtype == np.float32
        p = jac.to_scipy(jac.identity(_seed(2, pattern_only=True)), np.bool_)
        assert p.dtype == np.bool_
        assert_array_equal(p.toarray(), np.eye(2, dtype=bool))

    def test_mask_rows_does_not_leak_nonfinite(self):
        s = _seed(3)
        J = jac.Jacobian(s, 3, 1.0, np.array([np.inf, 2.0, np.nan]))
        K = jac.mask_rows(J, [False, True, False])
        assert_array_equal(_to_dense(K), np.diag([0.0, 2.0, 0.0]))
        M = _csr([[1, 0, 0], [0, 1, 0], [0, 0, 1]])
        M = jac.CSR(M.shape, M.indptr.copy(), M.indices.copy(), np.array([np.inf, 1.0, np.nan]))
        K = jac.mask_rows(jac.Jacobian(s, 3, matrix=M), [False, True, False])
        m = jac.materialize(K).to_scipy(np.float64)
        assert m.nnz == 3
        assert_array_equal(m.toarray(), np.diag([0.0, 1.0, 0.0]))

    def test_structural_zeros(self):
        s = _seed(3)
        m = jac.materialize(jac.structural_zeros(jac.identity(s))).to_scipy(np.float64)
        assert m.nnz == 3
        assert_array_equal(m.data, 0.0)

    def test_conj(self):
        s = _seed(2)
        J = jac.scale(jac.identity(s), np.array([1 + 2j, 3 - 1j]))
        assert_array_equal(_to_dense(jac.conj(J), np.complex128), np.diag([1 - 2j, 3 + 1j]))

    def test_pattern_only(self):
        s = _seed(3, pattern_only=True)
        J = jac.identity(s)
        assert jac.scale(J, 0.0) is J
        M = _csr([[0, 1, 0], [0, 0, 1], [1, 0, 0]])
        U = jac.materialize(jac.add([J, jac.Jacobian(s, 3, matrix=M)]))
        assert U.data is None
        assert_array_equal(U.indptr, [0, 2, 4, 6])
        assert_array_equal(U.indices, [0, 1, 1, 2, 0, 2])


# ---------------------------------------------------------------------------
# through the public API
# ---------------------------------------------------------------------------

def _x(n, k=0):
    rng = np.random.default_rng(99 + k)
    return rng.uniform(0.5, 1.5, n) * rng.choice([-1.0, 1.0], n)


IDX = np.array([4, 0, 0, 2, -1, 3])


@pytest.mark.parametrize("reshape", [
    lambda z: z.reshape(2, 3), lambda z: np.ravel(z), lambda z: np.squeeze(z[None]),
    lambda z: np.expand_dims(z, -1), lambda z: np.reshape(z, (3, 2), order="C"),
], ids=["method", "ravel", "squeeze", "expand_dims", "order-C"])
def test_reshapes_in_c_order_share_the_jacobian(reshape):
    x = forward.seed(_x(6).reshape(3, 2))
    y = np.sin(x)
    assert reshape(y)._jacobian is y._jacobian
    assert np.reshape(y, (2, 3), order="F")._jacobian is not y._jacobian


@pytest.mark.parametrize("op", [
    lambda z: np.exp(z) * 2,
    lambda z: -z / 3.0 + 1.0,
    lambda z: np.sin(z) * np.cos(z),
    lambda z: np.exp(z) + np.sin(z),
    lambda z: z * z - 2 * z,
    lambda z: z ** 2,
    lambda z: abs(z) + np.tanh(z),
    lambda z: np.maximum(z, -z),
    lambda z: np.where(np.arange(z.shape[0]) % 2 == 0, z, np.exp(z)),
], ids=["exp*2", "affine", "product", "sum", "poly", "square", "abs+tanh", "maximum", "where"])
def test_elementwise_ops_share_the_matrix(op):
    x0 = _x(5)
    x = forward.seed(x0)
    assert op(x)._jacobian.matrix is x._jacobian.matrix
    z = x[IDX]
    before = z.dvalue.toarray()
    w = op(z)
    assert w._jacobian.matrix is z._jacobian.matrix
    assert_array_equal(z.dvalue.toarray(), before)       # z is not modified


def test_structural_zeros_kept():
    x0 = _x(5)
    x = forward.seed(x0)
    d = (x - x).dvalue
    _canonical(d)
    assert d.nnz == 5
    assert_array_equal(d.indices, np.arange(5))
    assert_array_equal(d.data, 0.0)
    z = x[IDX]
    d = (z - z).dvalue
    assert _pattern(d) == _pattern(z.dvalue)
    assert_array_equal(d.data, 0.0)


def test_product_at_zero_keeps_entry():
    x0 = np.array([1.0, 0.0, 2.0, 0.0, 3.0])
    x = forward.seed(x0)
    y = x * x[::-1]
    d = y.dvalue
    _canonical(d)
    expected = np.diag(x0[::-1]) + np.eye(5)[::-1] * x0[:, None]
    assert_array_equal(d.toarray(), expected)
    assert _pattern(d) == _pattern(np.eye(5) + np.eye(5)[::-1])   # row 1: x3 = 0 stored
    xs = forward.seed_sparsity(x0)
    assert _pattern((xs * xs[::-1]).sparsity) == _pattern(d)


PATTERN_FUNCTIONS = {
    "product": lambda x: x * x[::-1],
    "square": lambda x: x ** 2,
    "abs": lambda x: abs(x),
    "maximum": lambda x: np.maximum(x, x[::-1]),
    "where-x-condition": lambda x: np.where(x > 0, x, 2 * x[::-1]),
    "clip": lambda x: np.clip(x, -0.5, 0.5),
    "max-reduction": lambda x: np.max(x.reshape(2, 3), axis=0),
    "prod": lambda x: np.prod(x),
    "sqrt-of-square": lambda x: np.sqrt(x * x + 1.0),
}


@pytest.mark.parametrize("name", list(PATTERN_FUNCTIONS))
def test_pattern_independent_of_values(name):
    f = PATTERN_FUNCTIONS[name]
    points = [_x(6, 1), _x(6, 2), np.zeros(6), np.array([1.0, -2.0, 0.0, 0.0, 3.0, -0.1])]
    patterns = [_pattern(f(forward.seed(p)).dvalue) for p in points]
    for p in patterns[1:]:
        assert p == patterns[0]
    assert _pattern(f(forward.seed_sparsity(points[0])).sparsity) == patterns[0]


def test_seed_copies_the_user_array():
    x0 = np.arange(4.0)
    x = forward.seed(x0)
    assert not np.shares_memory(x.value, x0)
    x0[:] = -1.0
    assert_array_equal(x.value, np.arange(4.0))
    assert_array_equal(x.dvalue.toarray(), np.eye(4))


def test_dvalue_is_a_fresh_matrix_each_time():
    x0 = _x(5)
    x = forward.seed(x0)
    d1, d2 = x.dvalue, x.dvalue
    assert d1 is not d2
    assert not np.shares_memory(d1.data, d2.data)
    d1.data[:] = 42.0
    assert_array_equal(x.dvalue.toarray(), np.eye(5))
    assert_array_equal((x * 2).dvalue.toarray(), 2 * np.eye(5))
    z = x[IDX]
    dz = z.dvalue
    dz.data[:] = 7.0
    dz.indices[:] = 0
    assert_array_equal(z.dvalue.toarray(), np.eye(5)[IDX])
    assert_array_equal((3 * z).dvalue.toarray(), 3 * np.eye(5)[IDX])
    assert x.gradient is not x.dvalue and x.sparsity is not x.dvalue


def test_constant_matrix_is_copied():
    A = sp.csr_matrix(np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]]))
    x = forward.seed(_x(3))
    y = A @ x
    A.data[:] = 0.0
    assert_array_equal(y.dvalue.toarray(), [[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    assert_array_equal((y * 2).dvalue.toarray(), [[2.0, 4.0, 0.0], [0.0, 0.0, 6.0]])


@pytest.mark.parametrize("op", [
    lambda x: x, lambda x: x * 2, lambda x: np.exp(x), lambda x: x[[0, 2, 2]],
    lambda x: np.sum(x), lambda x: np.concatenate([x, x]), lambda x: x.reshape(3, 1),
    lambda x: np.cumsum(x), lambda x: x @ np.ones((3, 2), dtype=x.dtype)],
    ids=["seed", "scale", "exp", "index", "sum", "concatenate", "reshape", "cumsum", "matmul"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.longdouble, np.complex64,
                                   np.complex128])
def test_jacobian_dtype_follows_value(op, dtype):
    y = op(forward.seed(np.array([0.5, 1.0, 1.5], dtype=dtype)))
    assert y.value.dtype == dtype
    assert y.dvalue.dtype == dtype


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_int_and_bool_seeds_promoted(dtype):
    x0 = np.array([1, 0, 1], dtype=dtype)
    x = forward.seed(x0)
    assert x.value.dtype == np.float64
    assert_array_equal(x.value, x0.astype(np.float64))
    assert x.dvalue.dtype == np.float64
    assert_array_equal(x.dvalue.toarray(), np.eye(3))


@pytest.mark.parametrize("index", [[1, 2], slice(1, None), np.array([True, False, True]),
                                   Ellipsis, (None, 0)])
@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.float64])
def test_pure_indexing_keeps_float_dtype(index, dtype):
    x = forward.seed(np.arange(3).astype(dtype))
    y = x[index]
    expected = np.float32 if dtype == np.float32 else np.float64
    assert y.value.dtype == expected
    assert y.dvalue.dtype == expected
    assert_array_equal(y.dvalue.toarray(), np.eye(3)[np.arange(3)[index].reshape(-1)])


def test_float32_mixed_with_float64_constant():
    x = forward.seed(np.ones(3, np.float32))
    y = x * 2.0                                  # a python float keeps float32 (NEP 50)
    assert y.value.dtype == np.float32
    assert y.dvalue.dtype == y.value.dtype
    z = x + np.ones(3)
    assert z.value.dtype == np.float64 and z.dvalue.dtype == np.float64


def test_float16_seed_gives_a_float32_jacobian():
    # scipy.sparse has no float16 (a float16 csr_matrix is stored, but toarray, @
    # and the solvers refuse it): the Jacobian is float32, the smallest float scipy
    # supports, as sparsegrad.sparse already promotes; the values stay float16,
    # and the entries are computed in float16 arithmetic like the values
    import sparsegrad
    x0 = np.array([0.5, 1.0, 2.0], dtype=np.float16)
    wide = x0.astype(np.float64)
    x = forward.seed(x0)
    assert x.value.dtype == np.float16 and x.dvalue.dtype == np.float32
    assert_array_equal(x.dvalue.toarray(), np.eye(3))
    y = np.exp(x) * x
    assert y.value.dtype == np.float16
    assert_array_equal(y.value, np.exp(x0) * x0)
    d = y.dvalue
    assert isinstance(d, sp.csr_matrix) and d.dtype == np.float32
    # by hand: d(x e^x)/dx = (1 + x) e^x, to float16 precision (eps 2**-10)
    assert_allclose(d.toarray(), np.diag((1 + wide) * np.exp(wide)), rtol=2e-3)
    assert_allclose(d @ np.ones(3), (1 + wide) * np.exp(wide), rtol=2e-3)
    # a scalar seed and a scalar result: a 0-d float32 array
    z = forward.seed(np.float16(3.0))
    dz = (z * z).dvalue
    assert dz.dtype == np.float32 and dz.shape == () and float(dz) == 6.0
    # the function API and jvp follow the same rule
    J = sparsegrad.jacobian(lambda v: v[1:] * v[:-1])(x0)
    assert J.dtype == np.float32
    assert_array_equal(J.toarray(), [[1.0, 0.5, 0.0], [0.0, 2.0, 1.0]])
    value, derivative = sparsegrad.jvp(lambda v: v * v, x0, np.ones(3))
    assert value.dtype == np.float16 and derivative.dtype == np.float32
    assert_array_equal(derivative, 2 * wide)


def test_sparsity_mode():
    x0 = _x(5)
    xs = forward.seed_sparsity(x0)
    y = np.exp(xs[IDX[:5]]) * 3 + xs[::-1]
    s = y.sparsity
    assert isinstance(s, sp.csr_matrix)
    assert s.dtype == np.bool_
    _canonical(s)
    x = forward.seed(x0)
    assert _pattern(s) == _pattern((np.exp(x[IDX[:5]]) * 3 + x[::-1]).dvalue)
    assert_array_equal(y.value, np.exp(x0[IDX[:5]]) * 3 + x0[::-1])


def test_scalar_seed_shapes():
    x = forward.seed(np.array(2.0))
    assert isinstance(x.dvalue, np.ndarray) and x.dvalue.shape == ()
    assert x.dvalue == 1.0
    v = x * np.arange(3.0)
    assert isinstance(v.dvalue, sp.csr_matrix) and v.dvalue.shape == (3, 1)
    s = np.sum(forward.seed(np.arange(3.0)) ** 2)
    assert isinstance(s.dvalue, sp.csr_matrix) and s.dvalue.shape == (1, 3)
    assert_array_equal(s.dvalue.toarray(), [[0.0, 2.0, 4.0]])


def test_row_numbers_of_reads_are_recognised_as_views():
    # reads slice row_index(shape, xp): the gather must see a strided view of the
    # very arange it compares against, however the shared arange was asked for
    from sparsegrad._indexing import row_index
    for arguments in ((), (np,)):
        view = row_index((4, 5), *arguments)[1:3, ::2]
        assert jac._Rows(view, 20)._view is not None
    assert jac._arange(7) is jac._arange(7, np) is jac._arange(np.int64(7))


@pytest.mark.parametrize("shape,key", [
    ((12,), slice(None)), ((12,), slice(None, None, -1)), ((12,), slice(2, -3, 3)),
    ((3, 4), (slice(None, None, -1), slice(1, 3))), ((3, 4), (1,)), ((3, 4), (Ellipsis, 2)),
    ((3, 4), (None, slice(1, None), None, slice(None, None, -2))), ((2, 3, 2), (0, 1, 1)),
    ((2, 3, 2), (slice(0, 0),)), ((3, 4), (slice(None), slice(None))),
    ((3, 1), ("broadcast", (3, 4))), ((1, 4), ("broadcast", (2, 3, 4))),
])
def test_rows_from_basic_indexing_read_by_strides(shape, key):
    n = int(np.prod(shape))
    rows = jac._arange(n).reshape(shape)
    broadcast = isinstance(key, tuple) and key[0] == "broadcast"
    view = np.broadcast_to(rows, key[1]) if broadcast else rows[key]
    rows = jac._Rows(view, n)
    # recognised as a view: no index array (a full integer index gives a scalar)
    assert (rows._view is not None) == isinstance(view, np.ndarray)
    view = np.asarray(view)
    v = np.linspace(-1.0, 1.0, n)
    assert_array_equal(rows.pick(v), v[view.ravel()])
    assert_array_equal(rows.flat, view.ravel())
    assert rows.is_all() == (view.size == n and np.array_equal(view.ravel(), np.arange(n)))
    assert not rows.has_empty()
    s = _seed(n)
    J = jac.scale(jac.add([jac.identity(s), jac.Jacobian(s, n, matrix=_csr(np.eye(n)[::-1]))]), v)
    expected = (np.diag(v) @ (np.eye(n) + np.eye(n)[::-1]))[view.ravel()]
    assert_array_equal(_to_dense(jac.take_rows(J, view)), expected)
    assert_array_equal(_to_dense(jac.take_rows(J, view.copy())), expected)


@pytest.mark.parametrize("program, factor", [
    (lambda x: (x * 2 ** 62) * 4, 2.0 ** 64),
    (lambda x: x * 2 ** 62 + x * 2 ** 62, 2.0 ** 63),
    (lambda x: -(x * -2 ** 63), 2.0 ** 63),
    (lambda x: (x * 3) * 2 ** 62 * 2 ** 62, 3 * 2.0 ** 124),
    (lambda x: x * np.int64(2 ** 62) * np.int64(4), 2.0 ** 64),
])
def test_large_integer_factors_do_not_wrap_around(program, factor):
    # integer partials become the terms' scalars: kept as floats, never int64
    x0 = np.array([1.0, 2.0, 3.0])
    y = program(forward.seed(x0))
    assert_array_equal(y.value, program(x0))
    assert_array_equal(y.dvalue.toarray(), factor * np.eye(3))


@pytest.mark.parametrize("columns", [
    [], [-1], [3], [-1, -1, -1, -1], [-1, -1, -1, 2, -1, -1, -1],
    [-1] * 500 + [7] + [-1] * 500, [-1] * 1000 + [0], [4] + [-1] * 999])
def test_selection_is_empty_looks_at_every_row(columns):
    columns = np.array(columns, dtype=np.int64)
    M = jac.CSR.selection(10, columns)
    assert M.is_empty == (not np.any(columns >= 0))
    assert M.is_empty == (M.nnz == 0)


def test_padded_grid_is_not_structurally_zero():
    # (the first, middle and last rows of a padded grid are all on its boundary)
    x = forward.seed(np.ones(9))
    U = np.pad(x.reshape(3, 3), 1)
    assert not U._jacobian.is_zero
    assert U.dvalue.nnz == 9
