"""Hessians of scalar functions: ``sparsegrad.hessian`` and its companions,
against a gradient computed another way (``sparsegrad.gradient``, forward
mode) differentiated by the complex step and by central differences."""
import numpy as np
import pytest
import scipy.sparse

import sparsegrad
from sparsegrad import UnsupportedOperationError

rng = np.random.default_rng(7)
A_SPARSE = scipy.sparse.random(6, 6, density=0.4, random_state=3, format="csr")
A_DENSE = rng.standard_normal((4, 6))


def write_assembly(x):
    r = np.zeros(len(x) + 1, like=x)
    r[1:] = x ** 2
    r[0] = x[2] * x[3]
    r[-2:] += np.sin(x[:2])
    r *= 1.5
    return np.sum(r * r)


def add_at_assembly(x):
    elements = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0]])
    local = x[elements[:, 0]] * x[elements[:, 1]] ** 2
    r = np.zeros(6, like=x)
    np.add.at(r, elements[:, 0], local)
    np.subtract.at(r, elements[:, 1], 0.5 * local)
    return np.sum(np.exp(r))


def movements(x):
    m = x.reshape(2, 3)
    stacked = np.concatenate([m.T.ravel(), np.flip(x), np.roll(x, 2)[::2], [1.0]])
    padded = np.pad(m, ((1, 0), (0, 2)))
    tiled = np.tile(x[:2], 3) * np.repeat(x[3:5], 3)
    both = np.stack([x, x[::-1]])
    return (np.sum(stacked ** 3) + np.sum(np.cos(padded) * padded) + np.sum(tiled ** 2)
            + np.sum(both[0] * both[1]) + np.sum(np.diff(x, 2) ** 4))


def reductions(x):
    m = x.reshape(3, 2)
    rows = np.sum(m ** 2, axis=1, keepdims=True)
    columns = m.mean(axis=0)
    return (np.sum(np.log(rows) * m) + np.sum(columns ** 3) + np.sum(np.cumsum(x) ** 2)
            + np.linalg.norm(x) ** 3)


def selections(x):
    y = np.where(x > 0.5, x ** 3, np.sin(x))
    return (np.sum(np.maximum(x, 0.4) ** 2 + np.minimum(x ** 2, 0.3 * x))
            + np.sum(np.clip(x, 0.2, 0.9) ** 3) + np.sum(y * x[::-1])
            + np.sum(np.abs(x - 0.5) ** 3))


def products(x):
    y = A_SPARSE @ x
    z = A_DENSE @ np.tanh(x)
    return np.sum(y ** 2 * x) + np.dot(z, z) + x @ (A_SPARSE.T @ np.exp(x)) + np.vdot(x, x) ** 2


def powers(x):
    return np.sum(x ** 0.5 + x ** -1 + x ** 3 + 2.0 ** x + np.sqrt(x) * np.cbrt(x)
                  + np.arctan2(x, x[::-1] + 1) + np.hypot(x, 1.0) + x ** x)


def two_d(u):
    return (0.5 * np.sum(np.diff(u, axis=0) ** 2) + 0.5 * np.sum(np.diff(u, axis=1) ** 2)
            + np.sum(np.cosh(u)) - u[1, 2] * u[0, 0] + np.sum(u[:, 1:] * u[:, :-1] ** 2))


def fancy_reads(x):
    idx = np.array([-1, 0, 0, 3, -2])
    mask = np.array([True, False, True, True, True, True])
    return (np.sum(x[idx] ** 2 * x[mask][:5]) + x[-1] * x[1] ** 3 + np.sum(x[[1, 1, 2]] ** 3)
            + np.sum(x[3:1] * 2.0) + np.sum(x[-2:0:-2] ** 3) + np.sum(x[None, 1:4, None] ** 4))


def in_place(x):
    y = x.copy()
    y += x ** 2
    y *= np.exp(-x)
    y /= 1 + x ** 2
    y -= 0.5
    y **= 2
    return np.sum(y)


def with_divide_and_special(x):
    return np.sum(np.expm1(x) / (1 + x) + np.log1p(x) * np.tanh(x) + np.logaddexp(x, 2 * x))


CASES = {
    "rosenbrock": (lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2),
                   np.array([1.3, 0.7, 0.8, 1.9, 1.2])),
    "write assembly": (write_assembly, np.linspace(0.2, 1.3, 6)),
    "add.at assembly": (add_at_assembly, np.linspace(0.1, 0.6, 6)),
    "movements": (movements, np.linspace(0.3, 1.1, 6)),
    "reductions": (reductions, np.linspace(0.3, 1.1, 6)),
    "selections": (selections, np.array([0.1, 0.35, 0.45, 0.6, 0.75, 1.05])),
    "products": (products, np.linspace(-0.4, 0.9, 6)),
    "powers": (powers, np.linspace(0.3, 1.4, 6)),
    "2-d argument": (two_d, np.linspace(-1.0, 1.0, 12).reshape(3, 4)),
    "fancy reads": (fancy_reads, np.linspace(0.3, 1.4, 6)),
    "in-place operators": (in_place, np.linspace(-0.4, 0.9, 6)),
    "divide and special": (with_divide_and_special, np.linspace(0.3, 1.4, 6)),
}
# (also checked by the complex step: functions whose forward-mode gradient
# takes complex arguments)
ANALYTIC = {"rosenbrock", "movements", "2-d argument", "in-place operators"}


def reference_hessian(f, x):
    """The Hessian by differentiating ``sparsegrad.gradient`` (forward mode)
    numerically: the complex step where ``f`` is analytic, else central
    differences."""
    n = x.size
    gradient = sparsegrad.gradient(f, trace=False)
    columns = []
    for k in range(n):
        e = np.zeros(n)
        e[k] = 1.0
        e = e.reshape(x.shape)
        columns.append(((gradient(x + 1e-6 * e) - gradient(x - 1e-6 * e)) / 2e-6).ravel())
    return np.array(columns).T


def assert_by_the_complex_step(f, x):
    """numpy's value, forward mode's gradient and the complex step's Hessian."""
    value, gradient, H = sparsegrad.value_grad_and_hessian(f, trace=False)(x)
    assert value == f(x)
    np.testing.assert_allclose(gradient, sparsegrad.gradient(f, trace=False)(x), rtol=1e-13,
                               atol=1e-13)
    np.testing.assert_allclose(H.toarray(), complex_step_hessian(f, x), rtol=1e-12,
                               atol=1e-12)


def complex_step_hessian(f, x):
    n = x.size
    jacobian = sparsegrad.jacobian(f, trace=False)
    columns = []
    for k in range(n):
        e = np.zeros(n, dtype=complex)
        e[k] = 1e-30j
        columns.append(np.asarray(jacobian(x + e.reshape(x.shape)).todense()).ravel().imag
                       / 1e-30)
    return np.array(columns).T


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("trace", [False, True])
def test_hessian_is_the_second_derivative(name, trace):
    f, x = CASES[name]
    value, gradient, H = sparsegrad.value_grad_and_hessian(f, trace=trace)(x)
    assert value == f(x)
    assert H.shape == (x.size, x.size) and H.dtype == np.float64
    np.testing.assert_allclose(gradient, sparsegrad.gradient(f, trace=False)(x),
                               rtol=1e-13, atol=1e-13)
    dense = H.toarray()
    np.testing.assert_allclose(dense, reference_hessian(f, x), rtol=1e-6, atol=1e-6)
    if name in ANALYTIC:
        np.testing.assert_allclose(dense, complex_step_hessian(f, x), rtol=1e-12, atol=1e-12)
    # symmetric to the last bit, pattern and values
    transposed = H.T.tocsr()
    transposed.sort_indices()
    np.testing.assert_array_equal(transposed.indptr, H.indptr)
    np.testing.assert_array_equal(transposed.indices, H.indices)
    np.testing.assert_array_equal(transposed.data, H.data)
    # the pattern holds every entry, and the other engine gives the same bits
    pattern = sparsegrad.hessian_sparsity(f, x)
    assert (abs(H).astype(bool) > pattern).nnz == 0
    assert (H.astype(bool) > pattern).nnz == 0
    other = sparsegrad.hessian(f, trace=not trace)(x)
    np.testing.assert_array_equal(other.indices, H.indices)
    np.testing.assert_array_equal(other.data, H.data)


@pytest.mark.parametrize("name", ["rosenbrock", "2-d argument", "products", "movements"])
def test_hvp_is_the_product(name):
    f, x = CASES[name]
    v = rng.standard_normal(x.shape)
    H = sparsegrad.hessian(f)(x)
    product = sparsegrad.hvp(f)(x, v)
    assert product.shape == x.shape
    np.testing.assert_allclose(product, (H @ v.ravel()).reshape(x.shape), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(sparsegrad.hvp(f)(x, v.ravel()).ravel(), H @ v.ravel(),
                               rtol=1e-12, atol=1e-12)


def test_hvp_and_hessian_take_other_arguments():
    def f(a, x, scale=1.0):
        return scale * np.sum(a * x ** 3)
    a, x, v = np.array([1.0, 2.0]), np.array([0.5, -1.0]), np.array([1.0, 3.0])
    H = sparsegrad.hessian(f, argnums=1)(a, x, scale=2.0)
    np.testing.assert_array_equal(H.toarray(), np.diag(2.0 * 6 * a * x))
    np.testing.assert_array_equal(sparsegrad.hvp(f, argnums=1)(a, x, v, scale=2.0),
                                  2.0 * 6 * a * x * v)
    assert sparsegrad.hvp(lambda x, c: c * np.sum(x ** 2))(x, v, 3.0).tolist() == [6.0, 18.0]


def test_pattern_keeps_structural_zeros_and_does_not_follow_the_point():
    def f(x):
        return np.sum(np.where(x > 0, x ** 3, 0.0 * x[::-1] * x)) + x[0] * x[1] * 0.0
    H_positive = sparsegrad.hessian(f)(np.array([1.0, 2.0, 3.0]))
    H_negative = sparsegrad.hessian(f)(np.array([-1.0, -2.0, -3.0]))
    np.testing.assert_array_equal(H_positive.indptr, H_negative.indptr)
    np.testing.assert_array_equal(H_positive.indices, H_negative.indices)
    assert H_negative.nnz > 0 and not H_negative.data.any()
    np.testing.assert_array_equal(H_positive.toarray(), np.diag([6.0, 12.0, 18.0]))


def test_formats_and_constant_functions():
    f = CASES["rosenbrock"][0]
    x = CASES["rosenbrock"][1]
    dense = sparsegrad.hessian(f, format="dense")(x)
    assert type(dense) is np.ndarray
    np.testing.assert_array_equal(dense, sparsegrad.hessian(f)(x).toarray())
    assert isinstance(sparsegrad.hessian(f, format="array")(x), scipy.sparse.csr_array)
    value, gradient, H = sparsegrad.value_grad_and_hessian(lambda x: 3.0)(np.ones(3))
    assert value == 3.0 and H.nnz == 0 and H.shape == (3, 3)
    np.testing.assert_array_equal(gradient, np.zeros(3))
    H = sparsegrad.hessian(lambda x: np.sum(2.0 * x))(np.ones(3))
    assert H.shape == (3, 3) and not H.data.any()


def test_refusals_name_the_operation():
    x = np.linspace(0.1, 0.6, 6)

    def through_view(x):
        r = np.zeros(6, like=x)
        r.reshape(2, 3)[0] = x[:3]
        return np.sum(r)

    def while_viewed(x):
        r = np.zeros(6, like=x)
        v = r[1:]
        r[0] = x[0]
        return np.sum(v * x[1:])

    def repeated_places(x):
        r = np.zeros(6, like=x)
        r[[0, 0]] = x[:2]
        return np.sum(r)

    for f, message in [(through_view, "a write through a view"),
                       (while_viewed, "a write into an array while a view of it is alive"),
                       (repeated_places, "repeated entries"),
                       (lambda x: np.cumprod(x), "numpy.cumprod is not supported in functions "
                                              "differentiated twice"),
                       (lambda x: np.sum(np.exp(1j * x)).real, "complex"),
                       (lambda x: np.sum(np.multiply.reduce(x)), "numpy.multiply.reduce")]:
        with pytest.raises(UnsupportedOperationError, match=message):
            sparsegrad.hessian(f, trace=False)(x)
    with pytest.raises(ValueError, match="one number"):
        sparsegrad.hessian(np.sin)(x)
    with pytest.raises(ValueError, match="argnums must be one int"):
        sparsegrad.hessian(np.sum, argnums=(0, 1))


def test_a_write_into_a_plain_array_is_refused():
    def f(x):
        r = np.zeros(3)
        r[0] = x[0] ** 2
        return np.sum(r)
    with pytest.raises(TypeError, match=r"np.zeros\(shape, like=x\)"):
        sparsegrad.hessian(f)(np.ones(3))


def test_views_read_after_writes_see_them():
    def f(x):
        r = np.zeros((2, 3), like=x)
        r[0] = x[:3] ** 2
        r[1, 1:] = x[3:5] * x[0]
        t = r.T
        return np.sum(t[1:] ** 2)
    x = np.linspace(0.2, 0.9, 5)
    np.testing.assert_allclose(sparsegrad.hessian(f)(x).toarray(), reference_hessian(f, x),
                               rtol=1e-6, atol=1e-6)


def test_the_argument_is_not_changed():
    def f(x):
        x[0] = 5.0
        return np.sum(x ** 3)
    x = np.array([1.0, 2.0])
    H = sparsegrad.hessian(f, trace=False)(x)
    assert x.tolist() == [1.0, 2.0]
    np.testing.assert_array_equal(H.toarray(), [[0.0, 0.0], [0.0, 12.0]])


C5 = np.array([[-1.25, 1.0, 1.5], [-2.0, -1.5, -1.5], [1.25, -0.25, -1.5]])
C8 = np.array([[0.25, 1.5, -1.25], [1.25, 1.0, 2.0], [1.5, -0.75, 2.0], [-1.25, 0.5, -1.5],
               [-1.25, 2.0, 1.0], [-1.0, 1.0, 0.75], [0.75, -1.5, -0.25], [-1.25, -0.75, 0.75]])


def squares(f):
    def s(x):
        y = f(x)
        return np.sum(y) + np.sum(y * y) / 2
    return s


@pytest.mark.parametrize("f, x", [
    # np.dot's value is numpy's np.dot (BLAS), not np.matmul's
    (lambda x: np.dot(C5, np.broadcast_to(1.0 + np.reshape(x, ()), (3,))), np.array([0.8675])),
    # a vector times a matrix: the transpose of the product is the matrix times g
    (lambda x: x @ C8, np.linspace(-1.0, 1.0, 8)),
    (lambda x: C8.T @ np.exp(x), np.linspace(-1.0, 1.0, 8)),
    # a float32 divisor: its partial in double precision, as the value's
    (lambda x: np.roll(x, -3) / np.float32(0.75), np.linspace(-0.7, 0.3, 6)),
    # max and min, as functions and methods, by axis
    (lambda x: x.reshape(2, 3).max(axis=0) * np.min(x) + np.amax(x ** 2, keepdims=True),
     np.array([0.3, 1.2, -0.5, 0.9, 0.1, 2.0])),
    (lambda x: np.trace(np.outer(x, x)) * np.diag(np.diag(np.outer(x, x[::-1])))[1],
     np.linspace(0.2, 0.9, 4)),
])
def test_drawn_programs(f, x):
    s = squares(f)
    value, gradient, H = sparsegrad.value_grad_and_hessian(s)(x)
    assert value == s(x)
    np.testing.assert_allclose(gradient, sparsegrad.gradient(s, trace=False)(x), rtol=1e-14,
                               atol=1e-14)
    np.testing.assert_allclose(H.toarray(), reference_hessian(s, x), rtol=1e-6, atol=1e-6)


def test_constants_changed_after_the_call_do_not_change_the_result():
    c = np.array([1.0, 2.0, 3.0])
    index = np.array([2, 0])
    mask = np.array([True, False, True])

    def f(x):
        y = np.sum(x * c * x[index].sum() * np.where(mask, x, 0.0))
        c[:] = 0.0
        index[:] = 1
        mask[:] = False
        return y
    def unchanged(x):
        return np.sum(x * np.array([1.0, 2.0, 3.0]) * x[np.array([2, 0])].sum()
                      * np.where(np.array([True, False, True]), x, 0.0))
    x = np.array([1.0, 2.0, 3.0])
    H = sparsegrad.hessian(f, trace=False)(x)
    np.testing.assert_allclose(H.toarray(), reference_hessian(unchanged, x), rtol=1e-6,
                               atol=1e-6)


def test_other_ndarray_methods_are_numpy_functions():
    x = np.linspace(0.2, 0.9, 4)
    assert sparsegrad.hessian(lambda x: x.max() ** 3 + float(x.argmax()))(x)[3, 3] == 6 * 0.9
    with pytest.raises(UnsupportedOperationError, match="numpy.cumprod"):
        sparsegrad.hessian(lambda x: np.sum(x.cumprod()))(x)
    with pytest.raises(AttributeError):
        sparsegrad.hessian(lambda x: x.no_such_method())(x)


def test_the_kept_transposition_follows_the_pattern():
    """``symmetric`` keeps the order of the last symmetric pattern's transpose;
    it depends on the pattern only: changing ``indptr`` alone or ``indices``
    alone gives another order, and the result follows."""
    from sparsegrad._hessian import symmetric

    def check(indptr, indices):
        data = rng.standard_normal(len(indices))
        matrix = scipy.sparse.csr_matrix((data, np.array(indices), np.array(indptr)),
                                         shape=(4, 4))
        dense = matrix.toarray()
        result = symmetric(matrix)
        np.testing.assert_array_equal(result.toarray(), (dense + dense.T) * 0.5)
        assert result.nnz == ((dense != 0) | (dense.T != 0)).sum()
    pairs = [0, 2, 4, 6, 8]
    check(pairs, [0, 1, 0, 1, 2, 3, 2, 3])      # (0, 1) and (2, 3)
    check(pairs, [0, 2, 1, 3, 0, 2, 1, 3])      # the indices alone changed: (0, 2), (1, 3)
    check([0, 1, 2, 3, 4], [0, 2, 1, 3])        # a pattern that is not symmetric
    check([0, 2, 4, 6, 8], [0, 1, 0, 1, 2, 3, 2, 3])
    check([0, 2, 4, 7, 8], [0, 1, 0, 1, 1, 2, 3, 3][:7] + [2])   # indptr changed


def test_one_element_is_a_scalar_not_a_view():
    # += on x[0] makes a new scalar, x unchanged, as numpy's
    def s(x):
        y = np.concatenate([np.ravel(x), np.ravel(x[[0, 1]])]) + _bumped(x[0])
        return np.sum(y) + np.sum(y * y) / 2
    x = np.array([-0.0346, 1.2601, -1.2552])
    value, gradient, H = sparsegrad.value_grad_and_hessian(s, trace=False)(x)
    assert value == s(x)
    np.testing.assert_allclose(H.toarray(), reference_hessian(s, x), rtol=1e-6, atol=1e-6)


def test_np_diag_of_a_2d_array_is_a_view():
    # numpy would show the later write through the diagonal: refused
    with pytest.raises(UnsupportedOperationError, match="while a view of it is alive"):
        sparsegrad.hessian(lambda x: np.sum(_diagonal_then_write(x) ** 2))(
            np.array([-0.7437, -0.289]))


def _bumped(v):
    v += -1.0
    return v


def _diagonal_then_write(x):
    v2 = np.abs(x.reshape((1, 2)))
    v3 = np.diag(v2)
    v2[0] = 1.0
    return np.copy(v3)


def test_a_scalar_alias_is_not_changed_by_an_in_place_operator():
    def f(x):
        a = x[0]
        b = a
        a += 1.0
        a *= 3.0
        return a * b
    x = np.array([2.0, 5.0])
    assert sparsegrad.hessian(f)(x)[0, 0] == 6.0


def test_a_zero_d_array_made_to_be_written_keeps_numpy_semantics():
    def f(x):
        r = np.zeros((), like=x)
        alias = r
        r += x[0] ** 2
        return alias * x[1]
    H = sparsegrad.hessian(f)(np.array([3.0, 5.0]))
    np.testing.assert_array_equal(H.toarray(), [[10.0, 6.0], [6.0, 0.0]])


K = np.arange(24.0).reshape(2, 3, 4) / 10.0 - 1.0


@pytest.mark.parametrize("f", [
    lambda x: np.sum(np.einsum("eij,ej->ei", K, x.reshape(2, 4)) ** 2),
    lambda x: np.einsum("i,i", x, x) * np.einsum("i->", np.exp(x)),
    lambda x: np.sum(np.einsum("ij,jk", x.reshape(2, 4), np.exp(x.reshape(4, 2))) ** 3),
    lambda x: np.sum(np.einsum("ij->ji", x.reshape(2, 4)) * np.einsum("ab,c->abc",
                     x.reshape(2, 4), x[:3]).sum(axis=2).T),
    lambda x: np.sum(np.einsum("ijk,ij", K, x.reshape(2, 4)[:, :3]) ** 2),  # k only in K
    lambda x: np.einsum("ij->", np.sin(x.reshape(2, 4))) ** 2,              # implicit output
])
def test_einsum(f):
    assert_by_the_complex_step(f, np.linspace(0.2, 0.9, 8))


def test_einsum_of_diagonals_is_refused():
    with pytest.raises(UnsupportedOperationError, match="a letter repeated"):
        sparsegrad.hessian(lambda x: np.einsum("ii->i", x.reshape(2, 2)).sum())(np.ones(4))


@pytest.mark.parametrize("f", [
    lambda x: np.prod(x) * x[0],
    lambda x: np.sum(np.prod(x.reshape(2, 3), axis=1) ** 2),
    lambda x: np.sum(np.prod(x.reshape(2, 3), axis=0, keepdims=True) * x.reshape(2, 3)),
    lambda x: x.prod(axis=-1),
])
@pytest.mark.parametrize("x", [np.linspace(0.3, 1.1, 6),
                               np.array([0.0, 0.5, 0.0, 2.0, 1.5, 0.7])])   # zeros too
def test_prod(f, x):
    assert_by_the_complex_step(f, x)


def test_a_zero_d_view_is_an_array():
    # np.squeeze of a 1-element array is a 0-d view: += would change x in
    # numpy; here it is refused as a write through a view
    def f(x):
        v = np.squeeze(x)
        v += 1.0
        return np.sum(x ** 2)
    with pytest.raises(UnsupportedOperationError, match="through a view"):
        sparsegrad.hessian(f)(np.array([1.1592]))


def test_a_write_into_the_argument_is_differentiated_from_the_argument():
    # x[:] is a view: *= changes x, and f's result depends on x as it came
    def s(x):
        v = x[:]
        v *= -1.0
        y = np.concatenate([np.ravel(v), np.diff(np.sinh(v))])
        return np.sum(y) + np.sum(y * y) / 2
    x = np.array([-0.8255, -0.5667, 0.2412, -1.2201])
    value, gradient, H = sparsegrad.value_grad_and_hessian(s, trace=False)(x)
    np.testing.assert_allclose(gradient, sparsegrad.gradient(s, trace=False)(x), rtol=1e-14)
    np.testing.assert_allclose(H.toarray(), complex_step_hessian(s, x), rtol=1e-12,
                               atol=1e-12)


def test_prod_of_nothing():
    H = sparsegrad.hessian(lambda x: np.prod(x[:0]) * np.sum(x ** 2))(np.ones(3))
    np.testing.assert_array_equal(H.toarray(), 2 * np.eye(3))


@pytest.mark.parametrize("f", [
    lambda x: np.sum(np.diff(x, prepend=0.5) ** 3),
    lambda x: np.sum(np.diff(x.reshape(2, 3), axis=0, append=x[:3].reshape(1, 3) ** 2) ** 3),
    lambda x: np.sum(np.diff(x.reshape(2, 3), n=2, prepend=x[0], append=[[1.0], [2.0]]) ** 3),
])
def test_diff_with_ends(f):
    assert_by_the_complex_step(f, np.linspace(0.3, 1.1, 6))


def test_a_write_into_an_einsum_view_is_refused():
    # numpy's einsum("ij->ji", a) is a view of a: np.subtract.at into it would
    # change a, and x through it
    def f(x):
        v2 = x.reshape(3, 4)[-3:]
        v3 = np.einsum("ij->ji", v2)
        np.subtract.at(v3, np.array([0, 1]), -2.0)
        return np.sum(x ** 2)
    with pytest.raises(UnsupportedOperationError, match="view"):
        sparsegrad.hessian(f)(np.linspace(0.1, 1.2, 12))


def test_a_write_keeps_the_layout_of_the_array():
    # x.reshape(2, 3)[:, I] is laid out by columns: numpy writes it in place,
    # and the sum over it runs in that memory order (seed 17004021)
    def s(x):
        v7 = np.sign(x.reshape(2, 3)) * x.reshape(2, 3)
        v7 = v7[:, np.array([1, 0, 1])]
        v7[::-1] -= x[:6].reshape(2, 3) * 0.3
        return np.sum(v7) + np.sum(v7 * v7) / 2
    x = np.array([0.958, -0.5829, -0.58, -1.1491, -0.1453, 1.0352])
    value, gradient, H = sparsegrad.value_grad_and_hessian(s, trace=False)(x)
    assert value == s(x.copy())
    np.testing.assert_allclose(H.toarray(), reference_hessian(s, x), rtol=1e-6, atol=1e-6)


def test_the_refusal_of_writes_does_not_depend_on_the_engine():
    # a view made inside a data movement was held by a reference cycle until
    # the garbage collector ran, so some modes refused the later write
    # (seed 16006212)
    def f(x):
        v2 = x * x
        v5 = np.diff(v2, prepend=-1.0)
        v9 = np.arctan(np.outer(v5, np.array([1.0, -0.5])))
        v10 = np.tile(v9, (2, 2))
        v5[None, -1] += v9.ravel()[:1].reshape((1,))
        return np.sum(v10) + np.sum(v5 ** 2)
    x = np.array([-0.7505, -0.2536, -1.2505, 1.3001])
    H = sparsegrad.hessian(f, trace=False)(x)
    np.testing.assert_array_equal(sparsegrad.hessian(f, trace=True)(x).data, H.data)
    assert (H.astype(bool) > sparsegrad.hessian_sparsity(f, x)).nnz == 0
    np.testing.assert_allclose(H.toarray(), reference_hessian(f, x), rtol=1e-6, atol=1e-6)
