"""Regression tests for bugs found in sparsegrad.sparse and the 0.0.15 compatibility layer.

Each test failed before its fix: a silently wrong value, dtype or Jacobian, or
a user's value reaching into a result.
"""
import numpy as np
import pytest
import scipy.sparse

from sparsegrad import forward, sparse
from sparsegrad.functions import where, dot, hstack, branch, apply, asdifferentiable
from sparsegrad.sparsevec import sparsesum_bare
from sparsegrad.testing import numerical_jacobian


def dense(J):
    return np.asarray(J.toarray())


# ---- sparsegrad.sparse ---------------------------------------------------------------
@pytest.mark.parametrize("build", [
    lambda d: sparse.coo_matrix((d, ([0, 1, 2], [0, 1, 2])), shape=(3, 3)),
    lambda d: sparse.csr_matrix((d, [0, 1, 2], [0, 1, 2, 3]), shape=(3, 3)),
], ids=["coo_matrix", "csr_matrix"])
def test_matrix_does_not_keep_the_users_forward_data(build):
    x = forward.seed(np.array([1.0, 2.0, 3.0]))
    d = 2.0 * x
    A = build(d)
    d[0] = 100.0  # assigning into the user's forward value afterwards
    np.testing.assert_array_equal(A.value.toarray().diagonal(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(dense(A.data.dvalue), 2.0 * np.eye(3))
    np.testing.assert_array_equal(dense((A @ np.ones(3)).dvalue), 2.0 * np.eye(3))


def test_integer_values_are_summed_exactly_as_scipy_does():
    big = 2 ** 53 + 1  # not representable in float64
    rows, cols = np.array([0, 0, 1]), np.array([1, 1, 0])
    data = np.array([big, 2, 5])
    A = sparse.coo_matrix((data, (rows, cols)), shape=(2, 2))
    S = scipy.sparse.coo_matrix((data, (rows, cols)), shape=(2, 2)).tocsr()
    assert A.dtype == S.dtype == np.int64
    assert A.data.tolist() == S.data.tolist() == [big + 2, 5]
    for axis in (0, 1):
        assert A.sum(axis=axis).tolist() == np.asarray(S.sum(axis=axis)).tolist()
        assert A.sum(axis=axis).dtype == np.int64
    assert (A @ A).value.toarray().tolist() == (S @ S).toarray().tolist()
    # bool matrices: duplicates are True (not a count), sums count the entries
    B = sparse.coo_matrix((np.array([True, True, True]), (rows, cols)), shape=(2, 2))
    T = scipy.sparse.coo_matrix((np.array([True, True, True]), (rows, cols)),
                                shape=(2, 2)).tocsr()
    assert B.dtype == T.dtype == np.bool_
    assert B.data.tolist() == T.data.tolist() == [True, True]
    M = sparse.csr_matrix(scipy.sparse.csr_matrix(np.array([[True, True], [True, False]])))
    assert M.sum(axis=0).tolist() == [[2, 1]] and M.sum(axis=0).dtype == np.int64
    u = sparse.csr_matrix(scipy.sparse.csr_matrix(np.array([[200, 100]], dtype=np.uint8)))
    assert u.sum(axis=1).tolist() == [[300]]


def test_numpy_functions_on_sparse_matrices_are_exact_or_loud():
    x0 = np.array([1.0, 2.0, 3.0])
    x = forward.seed(x0)
    A = sparse.diags(x ** 2)
    # np.dot with the matrix first, or with an ndarray: the matrix product
    y = np.dot(A, x)
    np.testing.assert_allclose(y.value, x0 ** 3)
    np.testing.assert_allclose(dense(y.dvalue), np.diag(3 * x0 ** 2))
    z = np.dot(np.ones(3), A)
    np.testing.assert_allclose(z.value, x0 ** 2)
    np.testing.assert_allclose(dense(z.dvalue), np.diag(2 * x0))
    np.testing.assert_allclose(np.dot(2.0, A).value.toarray(), 2 * np.diag(x0 ** 2))
    assert np.shape(A) == (3, 3) and np.ndim(A) == 2
    for call in (lambda: np.sum(A), lambda: np.concatenate([A]), lambda: np.trace(A)):
        with pytest.raises(TypeError, match="SparseMatrix"):
            call()
    # comparisons were Python identity (A == A is True, scipy compares elementwise)
    with pytest.raises(TypeError, match="comparison"):
        A == A
    with pytest.raises(TypeError, match="comparison"):
        A != sparse.diags(x)


def test_dot_with_a_sparsegrad_sparse_matrix():
    x0 = np.array([1.0, 2.0, 3.0])
    C = sparse.csr_matrix(scipy.sparse.csr_matrix(np.array([[1.0, 0, 2], [0, 3, 0]])))
    numeric = dot(C, x0)
    assert type(numeric) is np.ndarray
    np.testing.assert_array_equal(numeric, [7.0, 6.0])
    x = forward.seed(x0)
    y = dot(sparse.diags(x), x)  # a matrix depending on the seed
    np.testing.assert_array_equal(y.value, x0 ** 2)
    np.testing.assert_array_equal(dense(y.dvalue), np.diag(2 * x0))
    w = dot(C, x * x)
    np.testing.assert_array_equal(dense(w.dvalue), [[2, 0, 12], [0, 12, 0]])


# ---- compatibility layer: dtypes ---------------------------------------------------------
def test_branch_keeps_float32_with_a_python_number_branch():
    x = forward.seed(np.array([1.0, 2.0], dtype=np.float32))
    y = branch(np.array([True, False]), lambda i: x[i] * 3, lambda i: 0.0)
    assert y.dtype == np.float32 and y.dvalue.dtype == np.float32
    assert y.dtype == where(np.array([True, False]), x * 3, 0.0).dtype
    np.testing.assert_array_equal(dense(y.dvalue), [[3, 0], [0, 0]])
    assert branch(np.array([True, False]), lambda i: 0.5, lambda i: 2).dtype == np.float64


def test_sparsesum_bare_keeps_float32_with_python_number_terms():
    x = forward.seed(np.array([1.0, 2.0], dtype=np.float32))
    F = sparsesum_bare(3, [(np.array([0, 2]), x), (1, 2.0), (np.array([0, 0]), 1)])
    assert F.dtype == np.float32 and F.dvalue.dtype == np.float32
    assert F.dtype == (x + 2.0).dtype
    np.testing.assert_array_equal(F.value, [3.0, 2.0, 2.0])
    np.testing.assert_array_equal(dense(F.dvalue), [[1, 0], [0, 0], [0, 1]])
    assert sparsesum_bare(2, [(0, 1), (1, 2)]).dtype == np.int64


# ---- compatibility layer: lists holding forward values -----------------------------------
X0 = np.array([0.5, 1.25, 2.0])


@pytest.mark.parametrize("f", [
    lambda x: hstack([[x[0], 2.0 * x[1]], x[::-1]]),
    lambda x: where(np.array([True, False, True]), [x[0], x[1], x[2] ** 2], 0.5),
    lambda x: dot(scipy.sparse.csr_matrix(np.array([[1.0, 2.0], [0.0, 3.0]])),
                  [x[0] * x[1], x[2]]),
    lambda x: dot(np.array([[1.0, 2.0], [0.0, 3.0]]), [x[0], x[2]]),
    lambda x: branch(np.array([True, False, True]), lambda i: [x[0] ** 2, x[1]],
                     lambda i: 1.0),
    lambda x: apply(asdifferentiable(lambda a: np.asarray(a) ** 3,
                                     lambda args, v: [lambda: 3 * args[0] ** 2]),
                    ([x[2], x[0]],)),
    lambda x: sparsesum_bare(3, [([0, 2], [x[1], x[0] * x[2]]), (1, 0.5)]),
], ids=["hstack", "where", "dot-sparse", "dot-dense", "branch", "apply", "sparsesum_bare"])
def test_lists_holding_forward_values(f):
    # before: object arrays of forward values (or a forward value holding them)
    y = f(forward.seed(X0))
    assert isinstance(y, forward.value) and y.dtype == np.float64
    expected = np.asarray(f(X0), dtype=np.float64)
    np.testing.assert_allclose(y.value, expected, rtol=1e-14)
    reference = numerical_jacobian(lambda v: np.asarray(f(v), dtype=np.float64), X0,
                                   method="central")
    np.testing.assert_allclose(dense(y.dvalue), reference, rtol=1e-7, atol=1e-9)


def test_dot_of_a_forward_value_and_a_sparse_matrix():
    # the forward value first: numpy asks the matrix too, which maps np.dot to @
    x0 = np.array([1.0, 2.0, 3.0])
    M = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [4.0, 0.0, 5.0]])
    A = sparse.csr_matrix(scipy.sparse.csr_matrix(M))
    y = np.dot(forward.seed(x0), A)
    np.testing.assert_allclose(y.value, x0 @ M)
    np.testing.assert_array_equal(y.dvalue.toarray(), M.T)
    with pytest.raises(TypeError, match="not supported on a sparsegrad.sparse"):
        np.concatenate([forward.seed(x0), A])
