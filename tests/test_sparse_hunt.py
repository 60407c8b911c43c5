"""Regression tests from a bug hunt of sparsegrad.sparse, sparsegrad.linalg and
sparsegrad.sparsevec: every derivative against an independent dense reference,
and the inputs that used to give a silent wrong result, an unusable matrix or a
confusing error.
"""
import warnings

import numpy as np
import pytest
import scipy.sparse

from sparsegrad import forward, linalg, sparse
from sparsegrad.sparsevec import sparsesum_bare
from sparsegrad.testing import numerical_jacobian

ROWS = np.array([0, 2, 1, 0, 2, 2])  # with a duplicate (0, 1) and unsorted
COLS = np.array([1, 0, 2, 1, 2, 0])
X0 = np.linspace(0.5, 1.5, 6)
S_DENSE = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0], [4.0, 5.0, 0.0]])


def _matrix(x):
    """The 3x3 matrix with the values ``x`` at (ROWS, COLS): sparse for a forward
    ``x``, dense (the reference) for an array."""
    if isinstance(x, forward.value):
        return sparse.coo_matrix((x, (ROWS, COLS)), shape=(3, 3))
    dense = np.zeros((3, 3))
    np.add.at(dense, (ROWS, COLS), x)
    return dense


def _check(f):
    """``f`` on forward values against central differences of ``f`` on arrays."""
    result = f(forward.seed(X0))
    if isinstance(result, sparse.SparseMatrix):
        result = result.toarray()
    np.testing.assert_allclose(result.value, f(X0), rtol=1e-13)
    reference = numerical_jacobian(f, X0, method="central")
    reference = reference.toarray() if scipy.sparse.issparse(reference) else reference
    np.testing.assert_allclose(result.dvalue.toarray(), reference, atol=1e-7)


# ---- probes that found nothing: products and sums with every scipy format ---------
@pytest.mark.parametrize("kind", ["csr_matrix", "csc_matrix", "coo_matrix", "bsr_matrix",
                                  "lil_matrix", "dia_matrix", "csr_array", "coo_array"])
def test_products_and_sums_with_every_scipy_format(kind):
    S = getattr(scipy.sparse, kind)(S_DENSE)

    def operand(x):  # the scipy matrix with forward values, its dense twin otherwise
        return S if isinstance(x, forward.value) else S_DENSE
    _check(lambda x: _matrix(x) @ operand(x))
    _check(lambda x: operand(x) @ _matrix(x))
    _check(lambda x: _matrix(x) + operand(x))
    _check(lambda x: operand(x) - _matrix(x))
    _check(lambda x: _matrix(x).multiply(S) if isinstance(x, forward.value)
           else _matrix(x) * S_DENSE)
    _check(lambda x: operand(x) @ x[:3])
    _check(lambda x: x[:3] @ operand(x))


# ---- splu and factorized: the derivative must use the values that were factorised ---
def test_splu_keeps_a_snapshot_of_the_matrix():
    p = forward.seed(np.array([2.0, 4.0]))
    A = sparse.diags(p)
    lu = linalg.splu(A)
    solve = linalg.factorized(A)
    A.data[0] = 3 * p[0]  # the caller reuses its matrix object
    expected = np.diag([-1 / 4.0, -1 / 16.0])  # d(1/p)/dp of the factorised matrix
    for x in (lu.solve(np.ones(2)), solve(np.ones(2))):
        np.testing.assert_allclose(x.value, [0.5, 0.25])
        np.testing.assert_allclose(x.dvalue.toarray(), expected)


# ---- implicit_solution: the result owns its array ----------------------------------
def test_implicit_solution_does_not_share_the_callers_x():
    p = forward.seed(np.array([4.0, 9.0]))
    x = np.array([2.0, 3.0])
    result = linalg.implicit_solution(lambda x, p: x ** 2 - p, x, (p,))
    x[0] = 100.0
    np.testing.assert_array_equal(result.value, [2.0, 3.0])
    result[0] = -1.0  # (copy on write, never into x)
    assert x[1] == 3.0


def test_implicit_solution_of_an_integer_x_is_floating_point():
    p = forward.seed(np.array([4.0, 9.0]))
    result = linalg.implicit_solution(lambda x, p: x ** 2 - p, np.array([2, 3]), (p,))
    assert result.dtype == np.float64
    np.testing.assert_allclose(result.dvalue.toarray(), np.diag([0.25, 1 / 6]))


# ---- spsolve_triangular: the dtypes of the other solves ----------------------------
def test_spsolve_triangular_dtypes_follow_spsolve():
    p = forward.seed(np.array([2.0, 4.0], np.float32))
    A = sparse.diags(p)
    for solve in (linalg.spsolve, linalg.spsolve_triangular):
        x = solve(A, np.ones(2, np.float32))
        assert x.dtype == np.float32 and x.dvalue.dtype == np.float32
        np.testing.assert_allclose(x.dvalue.toarray(), np.diag([-0.25, -0.0625]))
        assert solve(A, np.ones(2, np.complex64)).dtype == np.complex64
        # longdouble is solved in float64 (SuperLU has no longdouble); it used to
        # raise SuperLU's "nzvals is not of a type supported by SuperLU"
        x = solve(sparse.diags(p.astype(np.longdouble)), np.ones(2))
        assert x.dtype == np.float64
        np.testing.assert_allclose(x.dvalue.toarray(), np.diag([-0.25, -0.0625]))


# ---- diags --------------------------------------------------------------------------
def test_diags_of_zero_length_diagonals_as_scipy():
    x = forward.seed(np.zeros(0))
    assert sparse.diags(x).shape == (0, 0)
    assert scipy.sparse.diags(np.zeros(0)).shape == (0, 0)
    # a tridiagonal matrix of one unknown: its off-diagonals are empty
    x = forward.seed(np.array([1.0]))
    A = sparse.diags([2 + x ** 2, -np.ones(0), -np.ones(0)], [0, 1, -1])
    expected = scipy.sparse.diags([np.ones(1), -np.ones(0), -np.ones(0)], [0, 1, -1])
    assert A.shape == expected.shape == (1, 1)
    r = A @ x
    np.testing.assert_allclose(r.value, [3.0])
    np.testing.assert_allclose(r.dvalue.toarray(), [[5.0]])  # d((2 + x^2) x)/dx
    assert sparse.diags(1.0, 3, shape=(3, 3)).nnz == 0
    for k in (4, -4):  # beyond the corner, as scipy
        with pytest.raises(ValueError, match="offset %d is outside a 3x3 matrix" % k):
            sparse.diags(1.0, k, shape=(3, 3))


def test_diags_broadcasts_a_forward_scalar_in_its_dtype():
    s = forward.seed(np.array(2.0, np.float32))
    A = sparse.diags(s, 1, shape=(3, 3))
    assert A.dtype == sparse.diags(np.float32(2.0), 1, shape=(3, 3)).dtype == np.float32
    np.testing.assert_array_equal(A.value.toarray(), np.diag([2.0, 2.0], 1))
    np.testing.assert_array_equal(A.data.dvalue.toarray(), np.ones((2, 1)))


def test_diags_names_the_shape_of_a_wrong_diagonal():
    # (a list of one array with a scalar offset: it used to say "has 3 values,
    # expected 3")
    with pytest.raises(ValueError, match=r"diagonal 0 has shape \(1, 3\), expected 3"):
        sparse.diags([[1.0, 2.0, 3.0]], 0)


def test_csr_matrix_names_two_dimensional_indices():
    x = forward.seed(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"indices must be a 1-d array, not of shape "
                                         r"\(1, 2\)"):
        sparse.csr_matrix((x, [[0, 1]], [0, 1, 2]))


# ---- dtypes scipy.sparse cannot store -----------------------------------------------
@pytest.mark.parametrize("dtype", ["U1", "S1", "datetime64[s]", "timedelta64[s]"])
def test_constructors_refuse_non_numeric_data(dtype):
    data = np.array([1, 2]).astype(dtype)
    with pytest.raises(TypeError, match="scipy.sparse does not support dtype"):
        sparse.coo_matrix((data, ([0, 1], [0, 1])))
    with pytest.raises(TypeError, match="scipy.sparse does not support dtype"):
        sparse.csr_matrix((np.ones(2), [0, 1], [0, 1, 2]), dtype=dtype)


def test_float16_data_is_stored_as_float32():
    # scipy.sparse has no float16: the plain matrix used to be a float16 csr_matrix
    # on which toarray, @ and the solves fail ("Output dtype not compatible")
    for data in (np.array([2.0, 4.0], np.float16),
                 forward.seed(np.array([2.0, 4.0], np.float16))):
        A = sparse.coo_matrix((data, ([0, 1], [0, 1])))
        assert A.dtype == np.float32 and A.value.dtype == np.float32
        np.testing.assert_array_equal(A.value.toarray(), np.diag([2.0, 4.0]))
        x = linalg.spsolve(A, np.ones(2, np.float32))
        np.testing.assert_allclose(forward.nvalue(x), [0.5, 0.25])
    with pytest.raises(TypeError, match="does not support dtype float16"):
        A.astype(np.float16)
    with pytest.raises(TypeError, match="does not support dtype float16"):
        sparse.coo_matrix((np.ones(2), ([0, 1], [0, 1])), dtype=np.float16)


def test_solves_refuse_a_non_numeric_right_hand_side():
    A = sparse.diags(forward.seed(np.array([2.0, 4.0])))
    with pytest.raises(TypeError, match="spsolve: right-hand side of dtype <U1"):
        linalg.spsolve(A, np.array(["1", "2"]))


def test_sparsesum_bare_refuses_non_numeric_values():
    with pytest.raises(TypeError, match="values must be numbers, not <U1"):
        sparsesum_bare(2, [([0], ["a"])])
    # numbers, with repeated and negative indices, still sum
    x = forward.seed(np.array([1.0, 2.0]))
    r = sparsesum_bare(3, [([0, -1, 0], [x[0], x[1], 1.0])])
    np.testing.assert_array_equal(r.value, [2.0, 0.0, 2.0])
    np.testing.assert_array_equal(r.dvalue.toarray(), [[1, 0], [0, 0], [0, 1]])


def test_a_solution_with_infinities_warns_nothing_of_its_own():
    # the residual b - A x that carries the Jacobian is not a result: numpy's
    # "invalid value" about its value would be about nothing the caller gets
    x = forward.seed(np.array([2.0, 4.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = linalg.spsolve(sparse.diags(x), np.array([np.inf, 1.0]))
    np.testing.assert_array_equal(y.value, [np.inf, 0.25])
    np.testing.assert_array_equal(y.dvalue.toarray()[1], [0.0, -1.0 / 16])
