"""The function-level API (jacobian, value_and_jacobian, jvp, sparsity) and seed(a, b)."""
import doctest

import numpy as np
import pytest
import scipy.sparse

import sparsegrad
from sparsegrad import forward, _api
from sparsegrad.testing import numerical_jacobian

RNG = np.random.default_rng(7)


def f_vec(x):
    return np.exp(x[1:]) * x[:-1] - np.sin(x[0])


def f_two(x, y, scale=1.0):
    # x: (3,), y: (2, 2)
    return scale * np.concatenate([x[:2] * y[0], np.sum(y * y) + x[2:] ** 3])


def dense_two(x, y, scale=1.0):
    """Hand-written Jacobians of f_two with respect to x and y.ravel()."""
    Jx = np.zeros((3, 3))
    Jy = np.zeros((3, 4))
    Jx[0, 0], Jx[1, 1] = y[0, 0], y[0, 1]
    Jy[0, 0], Jy[1, 1] = x[0], x[1]
    Jx[2, 2] = 3 * x[2] ** 2
    Jy[2, :] = 2 * y.ravel()
    return scale * Jx, scale * Jy


def test_docstring_examples():
    for module in (_api, forward):
        failures, attempted = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert attempted > 0 and failures == 0


# ==== seed of several arrays =========================================================
def test_seed_of_two_arrays_gives_column_blocks():
    a0, b0 = RNG.standard_normal(3), RNG.standard_normal((2, 2))
    a, b = forward.seed(a0, b0)
    assert isinstance(a, forward.value) and isinstance(b, forward.value)
    np.testing.assert_array_equal(a.dvalue.toarray(), np.eye(3, 7))
    np.testing.assert_array_equal(b.dvalue.toarray(), np.eye(4, 7, k=3))
    Jx, Jy = dense_two(a0, b0)
    J = f_two(a, b).dvalue
    assert isinstance(J, scipy.sparse.csr_matrix) and J.shape == (3, 7)
    np.testing.assert_allclose(J.toarray(), np.hstack([Jx, Jy]), rtol=1e-14)


def test_seed_of_one_array_still_returns_one_value():
    x = forward.seed(np.ones(3))
    assert isinstance(x, forward.value)
    s = forward.seed(2.0)
    assert (s * s).dvalue.shape == ()  # scalar seed, scalar value: 0-d, as in 0.0.15


def test_seed_of_a_scalar_and_a_vector_and_mixed_dtypes():
    s, v = forward.seed(np.float32(2.0), np.array([1.0, 3.0]))
    J = (s * v).dvalue
    assert J.shape == (2, 3)
    np.testing.assert_array_equal(J.toarray(), [[1, 2, 0], [3, 0, 2]])
    z, w = forward.seed(np.array([1j]), np.array([2.0]))
    np.testing.assert_array_equal((z * w).dvalue.toarray(), [[2.0, 1j]])


def test_seed_sparsity_of_two_arrays():
    a, b = forward.seed_sparsity(np.ones(3), np.ones(2))
    P = (a[1:] * b).sparsity
    assert P.dtype == np.bool_
    np.testing.assert_array_equal(P.toarray(), [[0, 1, 0, 1, 0], [0, 0, 1, 0, 1]])


def test_seed_needs_an_array():
    with pytest.raises(TypeError, match="at least one"):
        forward.seed()
    with pytest.raises(TypeError, match="at least one"):
        forward.seed_sparsity()


def test_seeds_of_separate_calls_still_refuse_to_mix():
    a, b = forward.seed(np.ones(2), np.ones(2))
    c = forward.seed(np.ones(2))
    with pytest.raises(sparsegrad.SeedMismatchError):
        a + c
    np.testing.assert_array_equal((a + b).dvalue.toarray(), np.hstack([np.eye(2)] * 2))


# ==== jacobian and value_and_jacobian =================================================
def test_jacobian_matches_finite_differences():
    x = RNG.standard_normal(6)
    J = sparsegrad.jacobian(f_vec)(x)
    assert isinstance(J, scipy.sparse.csr_matrix) and J.shape == (5, 6)
    np.testing.assert_allclose(J.toarray(), numerical_jacobian(f_vec, x), rtol=1e-12)


def test_value_and_jacobian_value_is_f():
    x = RNG.standard_normal(6)
    value, J = sparsegrad.value_and_jacobian(f_vec)(x)
    assert type(value) is np.ndarray
    np.testing.assert_array_equal(value, f_vec(x))
    np.testing.assert_array_equal(J.toarray(), sparsegrad.jacobian(f_vec)(x).toarray())


@pytest.mark.parametrize("format, kind", [("matrix", scipy.sparse.csr_matrix),
                                          ("array", scipy.sparse.csr_array),
                                          ("dense", np.ndarray)])
def test_formats(format, kind):
    x = RNG.standard_normal(4)
    J = sparsegrad.jacobian(f_vec, format=format)(x)
    # the sparse ones are subclasses that refuse np.asarray (tests/test_scipy_routes.py)
    assert isinstance(J, kind) and type(J).__name__ == kind.__name__ and J.shape == (3, 4)
    dense = J if format == "dense" else J.toarray()
    np.testing.assert_allclose(dense, numerical_jacobian(f_vec, x), rtol=1e-12)


def test_several_arguments_give_blocks_and_extra_arguments_pass_through():
    x, y = RNG.standard_normal(3), RNG.standard_normal((2, 2))
    Jx, Jy = dense_two(x, y, scale=2.5)
    blocks = sparsegrad.jacobian(f_two, argnums=(0, 1))(x, y, scale=2.5)
    assert isinstance(blocks, tuple) and len(blocks) == 2
    assert all(isinstance(B, scipy.sparse.csr_matrix) for B in blocks)
    np.testing.assert_allclose(blocks[0].toarray(), Jx, rtol=1e-14)
    np.testing.assert_allclose(blocks[1].toarray(), Jy, rtol=1e-14)
    # reversed order follows argnums; negative positions count from the end
    Jy2, Jx2 = sparsegrad.jacobian(f_two, argnums=(-1, 0))(x, y, scale=2.5)
    np.testing.assert_allclose(Jx2.toarray(), Jx, rtol=1e-14)
    np.testing.assert_allclose(Jy2.toarray(), Jy, rtol=1e-14)
    stacked = sparsegrad.jacobian(f_two, argnums=(0, 1), hstack=True)(x, y, scale=2.5)
    assert isinstance(stacked, scipy.sparse.csr_matrix)
    np.testing.assert_allclose(stacked.toarray(), np.hstack([Jx, Jy]), rtol=1e-14)
    only_y = sparsegrad.jacobian(f_two, argnums=1)(x, y, scale=2.5)
    np.testing.assert_allclose(only_y.toarray(), Jy, rtol=1e-14)
    value, dense_blocks = sparsegrad.value_and_jacobian(
        f_two, argnums=(0, 1), format="dense")(x, y, scale=2.5)
    np.testing.assert_array_equal(value, f_two(x, y, scale=2.5))
    np.testing.assert_allclose(dense_blocks[1], Jy, rtol=1e-14)


def test_column_blocks_keep_stored_zeros():
    # x * 0 keeps its diagonal pattern with zero values in each block
    f = lambda a, b: a * 0.0 + b  # noqa: E731
    Ja, Jb = sparsegrad.jacobian(f, argnums=(0, 1))(np.ones(3), np.ones(3))
    assert Ja.nnz == 3 and not Ja.data.any()
    assert Jb.nnz == 3 and np.all(Jb.data == 1)


def test_nd_arguments_and_outputs_follow_c_order():
    x = RNG.standard_normal((3, 4))
    f = lambda a: np.cumsum(a, axis=0).T * a.T  # noqa: E731
    J = sparsegrad.jacobian(f)(x)
    assert J.shape == (12, 12)
    np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, x), rtol=1e-12)


def test_scalar_arguments_and_outputs_give_2d_matrices():
    J = sparsegrad.jacobian(lambda s: s ** 3)(2.0)
    assert J.shape == (1, 1) and J.toarray()[0, 0] == 12.0
    J = sparsegrad.jacobian(np.sum)(np.ones(3))
    assert J.shape == (1, 3)
    J = sparsegrad.jacobian(lambda s: s * np.arange(3.0))(2.0)
    np.testing.assert_array_equal(J.toarray(), [[0.0], [1.0], [2.0]])


def test_output_independent_of_the_argument_is_a_zero_matrix():
    J = sparsegrad.jacobian(lambda x, c: c, argnums=0)(np.ones(3), np.arange(2.0))
    assert J.shape == (2, 3) and J.nnz == 0
    assert isinstance(J, scipy.sparse.csr_matrix)


def test_integer_arguments_are_promoted():
    J = sparsegrad.jacobian(lambda x: x * x)(np.array([1, 2]))
    assert J.dtype == np.float64
    np.testing.assert_array_equal(J.toarray(), np.diag([2.0, 4.0]))


@pytest.mark.parametrize("argnums, error", [("x", TypeError), (1.0, TypeError),
                                            (True, TypeError), ((), ValueError),
                                            ((0, 0), ValueError), (2, ValueError),
                                            ((0, -3), ValueError)])
def test_bad_argnums_are_loud(argnums, error):
    with pytest.raises(error, match="argnums"):
        sparsegrad.jacobian(f_two, argnums=argnums)(np.ones(3), np.ones((2, 2)))


def test_bad_format_and_bad_outputs_are_loud():
    with pytest.raises(ValueError, match="format"):
        sparsegrad.jacobian(f_vec, format="csc")
    with pytest.raises(TypeError, match="one array"):
        sparsegrad.jacobian(lambda x: {"r": x})(np.ones(2))
    with pytest.raises(ValueError, match="same shape"):
        sparsegrad.jacobian(lambda x: [x[0], x[1:]])(np.ones(3))
    with pytest.raises(TypeError, match="dtype"):
        sparsegrad.jacobian(lambda x: x)(np.array(["a"]))


def test_wrappers_are_named_after_f():
    assert sparsegrad.jacobian(f_vec).__name__ == "jacobian_of_f_vec"
    assert sparsegrad.value_and_jacobian(f_vec).__wrapped__ is f_vec


# ==== jvp ===============================================================================
def test_jvp_matches_the_jacobian_times_v():
    x, v = RNG.standard_normal(8), RNG.standard_normal(8)
    value, derivative = sparsegrad.jvp(f_vec, x, v)
    np.testing.assert_array_equal(value, f_vec(x))
    np.testing.assert_allclose(derivative, sparsegrad.jacobian(f_vec)(x) @ v, rtol=1e-13)


def test_jvp_nd_and_extra_arguments():
    x, v = RNG.standard_normal(3), RNG.standard_normal(3)
    y = RNG.standard_normal((2, 2))
    value, derivative = sparsegrad.jvp(f_two, x, v, args=(y,), kwargs={"scale": 3.0})
    Jx, _ = dense_two(x, y, scale=3.0)
    np.testing.assert_allclose(derivative, Jx @ v, rtol=1e-13)
    X, V = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
    f = lambda a: np.exp(a).T @ a  # noqa: E731  (3, 3) output
    value, derivative = sparsegrad.jvp(f, X, V)
    assert value.shape == derivative.shape == (3, 3)
    reference = numerical_jacobian(f, X) @ V.ravel()
    np.testing.assert_allclose(derivative.ravel(), reference, rtol=1e-10)
    value, flat = sparsegrad.jvp(f, X, V.ravel())  # v may be flat
    np.testing.assert_array_equal(flat, derivative)


def test_jvp_scalar_output_and_constant_output():
    value, derivative = sparsegrad.jvp(lambda x: np.sum(x ** 2), np.array([1.0, 2.0]),
                                       np.array([1.0, -1.0]))
    assert value.shape == derivative.shape == () and derivative == -2.0
    value, derivative = sparsegrad.jvp(lambda x: np.ones(2), np.ones(3), np.ones(3))
    np.testing.assert_array_equal(derivative, np.zeros(2))


def test_jvp_complex():
    z, v = np.array([1 + 1j, 2.0]), np.array([1j, 1.0])
    _, derivative = sparsegrad.jvp(lambda z: z ** 2, z, v)
    np.testing.assert_allclose(derivative, 2 * z * v)


def test_jvp_is_loud_about_bad_directions():
    with pytest.raises(ValueError, match="shape"):
        sparsegrad.jvp(f_vec, np.ones(3), np.ones(4))
    with pytest.raises(TypeError, match="complex v"):
        sparsegrad.jvp(f_vec, np.ones(3), np.ones(3) * 1j)


# ==== sparsity ============================================================================
def test_sparsity_is_the_pattern_of_the_jacobian():
    x = RNG.standard_normal(7)
    P = sparsegrad.sparsity(f_vec, x)
    J = sparsegrad.jacobian(f_vec)(x)
    assert P.dtype == np.bool_ and isinstance(P, scipy.sparse.csr_matrix)
    np.testing.assert_array_equal(P.indptr, J.indptr)
    np.testing.assert_array_equal(P.indices, J.indices)
    assert P.data.all()


def test_sparsity_with_arguments_and_formats():
    P = sparsegrad.sparsity(f_two, np.ones(3), args=(np.ones((2, 2)),),
                            kwargs={"scale": 2.0}, format="dense")
    Jx, _ = dense_two(np.ones(3), np.ones((2, 2)))
    np.testing.assert_array_equal(P, Jx != 0)
    assert type(sparsegrad.sparsity(f_vec, np.ones(3), format="array")) \
        is scipy.sparse.csr_array


def test_public_names():
    for name in ("jacobian", "value_and_jacobian", "jvp", "sparsity", "optimize"):
        assert name in sparsegrad.__all__


# ---------------------------------------------------------------- repeated evaluation
# A Jacobian function is called at every Newton step.  Whatever sparsegrad keeps
# between calls (today: the memory of its freed arrays, in the memory pool), a
# call that takes another branch, reads a changed index array or gets another
# shape must give exactly what a first call gives.

def _reference_jacobian(f, x):
    return numerical_jacobian(f, x, method="complex")


def test_repeated_calls_follow_a_changed_branch():
    def f(x):
        if x.sum() > 0:                     # Python control flow on the value
            return np.exp(x) * x[::-1]
        return np.roll(x, 1) ** 3 - x

    J = sparsegrad.jacobian(f)
    for k in range(6):
        x = RNG.standard_normal(30000) + (1.0 if k % 2 else -1.0)
        got = J(x)
        expected = f(forward.seed(x)).dvalue     # a first evaluation, from scratch
        assert (got != expected).nnz == 0 and np.array_equal(got.indices, expected.indices)
    # and on a size small enough for a dense reference
    for sign in (1.0, -1.0, 1.0):
        x = sign * (1.0 + RNG.random(7))
        np.testing.assert_allclose(J(x).toarray(), _reference_jacobian(f, x), rtol=1e-12,
                                   atol=1e-14)


def test_repeated_calls_see_an_index_array_changed_in_place():
    neighbour = np.roll(np.arange(8), 1)

    def f(x):
        return x * x[neighbour]

    J = sparsegrad.jacobian(f)
    x = 1.0 + RNG.random(8)
    first = J(x).toarray()
    np.testing.assert_allclose(first, _reference_jacobian(f, x), rtol=1e-12)
    neighbour[:] = np.roll(np.arange(8), -3)        # the user changes the stencil
    second = J(x).toarray()
    np.testing.assert_allclose(second, _reference_jacobian(f, x), rtol=1e-12)
    assert not np.array_equal(first != 0, second != 0)


def test_repeated_calls_with_other_shapes():
    def f(x):
        return np.diff(x, axis=-1) * x[..., :-1] ** 2

    J = sparsegrad.jacobian(f)
    for shape in [(6,), (3, 4), (6,), (2, 2, 3)]:
        x = 1.0 + RNG.random(shape)
        np.testing.assert_allclose(
            J(x).toarray(), _reference_jacobian(lambda v: f(v.reshape(shape)).ravel(),
                                                x.ravel()),
            rtol=1e-12, atol=1e-14)
