"""numpy functions composed of other forward operations (``sparsegrad._composite``)
and the ufunc methods ``multiply.at``, ``maximum.at``, ``minimum.at``.

Every case: the forward value equals numpy's result exactly (shape, dtype,
values), and the Jacobian equals complex-step differences (complex-safe
functions) or central differences.
"""
import warnings
import zlib

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import sparsegrad
from sparsegrad import UnsupportedOperationError, forward
from sparsegrad.testing import numerical_jacobian

TOL = {"complex": dict(rtol=1e-12, atol=1e-13), "central": dict(rtol=1e-6, atol=1e-7)}


def _x(n, *key):
    """Random input away from 0 with both signs (no ties, no kinks)."""
    rng = np.random.default_rng(zlib.crc32(repr((n,) + key).encode()))
    return rng.uniform(0.5, 1.5, n) * rng.choice([-1.0, 1.0], n)


def check(f, x, method="central"):
    """``f`` on a forward value: numpy's value exactly, and the Jacobian."""
    expected = np.asarray(f(x))
    result = f(forward.seed(x))
    assert isinstance(result, forward.value), type(result)
    got = result.value
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    assert_array_equal(got, expected)
    J = sparsegrad.jacobian(f)(x).toarray()
    assert_allclose(J, numerical_jacobian(f, x, method=method), **TOL[method])
    return J


# ---------------------------------------------------------------------------
# data movement
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("function", [np.tril, np.triu])
@pytest.mark.parametrize("shape, k", [((3, 4), 0), ((3, 4), 1), ((4, 3), -1),
                                      ((2, 3, 3), 0), ((5,), 0), ((5,), -2)])
def test_tril_triu(function, shape, k):
    n = int(np.prod(shape))
    J = check(lambda v: function(v.reshape(shape), k), _x(n, shape, k), "complex")
    assert J.sum() == np.count_nonzero(function(np.ones(shape), k))


@pytest.mark.parametrize("new_shape", [(5, 7), 3, (2, 2, 2), (0,)])
def test_resize(new_shape):
    check(lambda v: np.resize(v.reshape(3, 2), new_shape), _x(6, new_shape), "complex")


@pytest.mark.parametrize("case", [
    lambda v: np.insert(v[:6], [1, 3, 3], v[6:9]),
    lambda v: np.insert(v[:6], 2, 5.0),
    lambda v: np.insert(v.reshape(3, 4), 1, 5.0, axis=1),
    lambda v: np.insert(v.reshape(3, 4), [0, 2], v[:4], axis=0),
])
def test_insert(case):
    check(case, _x(12, "insert"), "complex")
    check(case, _x(12, "insert"), "central")


def test_insert_into_a_constant():
    # (central differences: numpy casts the complex step to the real array)
    check(lambda v: np.insert(np.arange(4.0), 1, v[:3]), _x(5, "insert"), "central")


def test_insert_refuses_forward_values_cast_to_integers():
    with pytest.raises(UnsupportedOperationError, match="numpy.insert"):
        np.insert(np.arange(3), 1, forward.seed(np.ones(2)))


@pytest.mark.parametrize("case", [
    lambda v: np.block([[v[:4].reshape(2, 2), np.eye(2)],
                        [v[4:8].reshape(2, 2), v[8:].reshape(2, 2)]]),
    lambda v: np.block([v[:3], 1.0, v[5:]]),
    lambda v: np.block([[v[:4].reshape(2, 2)], [v[4:6].reshape(1, 2)]]),
])
def test_block(case):
    check(case, _x(12, "block"), "complex")


def test_block_refuses_a_tuple_as_numpy_does():
    x = forward.seed(_x(4, "tuple"))
    with pytest.raises(TypeError, match="tuple"):
        np.block((x, x))


def test_broadcast_arrays():
    x = _x(7, "broadcast")
    check(lambda v: sum(a * (k + 1) for k, a in
                        enumerate(np.broadcast_arrays(v[:4], v[4:6].reshape(2, 1), 2.0))),
          x, "complex")
    a, b = np.broadcast_arrays(forward.seed(x)[:4], np.ones((3, 4)))
    assert isinstance(a, forward.value) and a.shape == b.shape == (3, 4)
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 1.0
    same = forward.seed(x)[:4]
    assert np.broadcast_arrays(same, 1.0)[0] is same


# ---------------------------------------------------------------------------
# products
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", [
    lambda v: np.kron(np.arange(6.0).reshape(2, 3), v.reshape(3, 4)),
    lambda v: np.kron(v[:4].reshape(2, 2), v[4:]),
    lambda v: np.kron(v[:3], np.ones((2, 2))),
    lambda v: np.kron(v.reshape(2, 3, 2), v[:2]),
])
def test_kron(case):
    check(case, _x(12, "kron"), "complex")


def test_kron_with_a_dense_constant_stays_sparse():
    dense = np.arange(1.0, 17.0).reshape(4, 4)
    J = np.kron(dense, forward.seed(_x(5, "sparse"))).dvalue
    assert J.nnz == dense.size * 5  # one entry per row: no densification


@pytest.mark.parametrize("case", [
    lambda v: np.cross(v[:6].reshape(2, 3), v[6:].reshape(2, 3)),
    lambda v: np.cross(v[:6].reshape(3, 2), v[6:].reshape(3, 2), axis=0),
    lambda v: np.cross(v[:6].reshape(3, 2), v[6:].reshape(2, 3), axisa=0, axisc=0),
    lambda v: np.cross(v[:3], np.array([1.0, 2.0, 3.0])),
    lambda v: np.cross(v[:6].reshape(2, 3), v[6:9]),
])
def test_cross(case):
    check(case, _x(12, "cross"), "complex")


@pytest.mark.filterwarnings("ignore:Arrays of 2-dimensional vectors:DeprecationWarning")
@pytest.mark.parametrize("case", [
    lambda v: np.cross(v[:2], v[6:9]),
    lambda v: np.cross(v[:4].reshape(2, 2), v[6:10].reshape(2, 2)),
])
def test_cross_of_2_vectors(case):
    check(case, _x(12, "cross2"), "complex")


@pytest.mark.parametrize("function", [np.convolve, np.correlate])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 9])
def test_convolve_correlate_both_forward(function, mode, n):
    # (correlate conjugates v: not complex-safe)
    method = "complex" if function is np.convolve else "central"
    check(lambda v: function(v[:n], v[n:], mode), _x(10, function.__name__, mode, n),
          method)


@pytest.mark.parametrize("function", [np.convolve, np.correlate])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_correlate_with_a_constant(function, mode):
    x = _x(6, function.__name__, "constant")
    method = "complex" if function is np.convolve else "central"
    check(lambda v: function(np.arange(1.0, 4.0), v, mode), x, method)
    check(lambda v: function(v, np.arange(1.0, 9.0), mode), x, method)
    kernel = np.array([1.0, -2.0, 1.0])
    J = function(forward.seed(x), kernel, mode).dvalue
    assert J.nnz <= 3 * len(function(x, kernel, mode))


def test_correlate_of_complex_values():
    x = _x(8, "complex correlate")
    z = np.array([1 + 2j, -1j, 0.5])
    check(lambda v: np.correlate(v * (1 + 1j), z, "same"), x, "central")


# ---------------------------------------------------------------------------
# selection
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", [
    lambda v: np.select([v > 1, v < 0], [v ** 2, 3 * v], default=v[::-1]),
    lambda v: np.select([v > 0], [np.sin(v)]),
    lambda v: np.select([v.reshape(3, 4) > 0, np.ones((3, 4), bool)],
                        [v[:4], 2.0], default=-1.0),
])
def test_select(case):
    check(case, _x(12, "select"), "complex")


@pytest.mark.parametrize("case", [
    lambda v: np.piecewise(v, [v < 0, v > 1], [lambda t: t ** 2, np.sin, 7.0]),
    lambda v: np.piecewise(v, [v < 0], [lambda t: -t, lambda t: 2 * t]),
    lambda v: np.piecewise(v.reshape(3, 4), [v.reshape(3, 4) > 0.8],
                           [lambda t, a: a * t, 0.0], 3.0),
    lambda v: np.piecewise(v, v > 5, [np.exp]),
])
def test_piecewise(case):
    check(case, _x(12, "piecewise"), "complex")


# ---------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------
def test_sinc():
    x = np.concatenate([_x(9, "sinc") * 3, [0.0, 1.0, -2.0]])
    check(np.sinc, x, "complex")
    J = check(lambda v: np.sinc(v.reshape(3, 4)), x, "complex")
    assert J[9, 9] == 0.0  # (the derivative at 0)


def test_i0():
    x = np.concatenate([_x(9, "i0") * 4, [0.0]])
    check(np.i0, x, "central")
    check(lambda v: np.i0(v.reshape(2, 5)), x, "central")


# ---------------------------------------------------------------------------
# interp
# ---------------------------------------------------------------------------
XP = np.array([-1.3, -0.2, 0.45, 1.1])
FP = np.array([1.0, 3.0, -2.0, 4.0])


@pytest.mark.parametrize("case", [
    lambda v: np.interp(v, XP, FP),
    lambda v: np.interp(v * 2, XP, FP, left=-7.0, right=9.0),
    lambda v: np.interp(v.reshape(3, 4), XP, FP),
    lambda v: np.interp([-3.0, 0.1, 0.5, 1.0, 5.0], np.linspace(0, 1, 12), v),
    lambda v: np.interp(v[:6], XP[:3], v[6:9], left=v[9], right=v[10]),
    lambda v: np.interp(v[:6] * 2, [0.5], v[6:7]),
    lambda v: np.interp(0.3, XP, v[:4]),
    lambda v: np.interp(v[:6] * 200, [30.0, 100.0, 200.0, 340.0], v[6:10], period=360),
    lambda v: np.interp(v[:6] * 200, [30.0, 100.0, 200.0, 340.0], FP, period=-360),
])
def test_interp(case):
    check(case, _x(12, "interp"), "central")


def test_interp_of_complex_fp():
    x = _x(4, "interp complex")
    check(lambda v: np.interp(np.array([-0.5, 0.2, 1.0]), XP, v * (1 + 2j)), x, "central")


def test_interp_refuses_forward_breakpoints():
    x = forward.seed(_x(4, "xp"))
    with pytest.raises(UnsupportedOperationError, match="numpy.interp.*xp"):
        np.interp(0.5, np.sort(x), FP)


# ---------------------------------------------------------------------------
# small dense matrices
# ---------------------------------------------------------------------------
def _matrices(n, batch, key):
    """Well-conditioned matrices: the identity times n plus a perturbation."""
    return (_x(batch * n * n, key) + n * np.tile(np.eye(n).ravel(), batch))


@pytest.mark.parametrize("n, batch", [(1, 3), (2, 5), (3, 4), (4, 1), (8, 1)])
def test_det(n, batch):
    check(lambda v: np.linalg.det(v.reshape(batch, n, n)), _matrices(n, batch, "det"),
          "complex")


def test_det_of_a_singular_matrix():
    A = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]).ravel()
    J = check(lambda v: np.linalg.det(v.reshape(3, 3)), A, "central")
    assert np.any(J != 0)  # (the cofactors: no division by a zero determinant)


@pytest.mark.parametrize("n, batch", [(1, 2), (2, 5), (3, 4), (5, 2)])
def test_inv(n, batch):
    check(lambda v: np.linalg.inv(v.reshape(batch, n, n)), _matrices(n, batch, "inv"),
          "complex")


@pytest.mark.parametrize("n, batch", [(2, 5), (3, 4), (6, 1)])
def test_solve(n, batch):
    m = batch * n * n
    x = np.concatenate([_matrices(n, batch, "solve"), _x(batch * n * 2, "b")])
    check(lambda v: np.linalg.solve(v[:m].reshape(batch, n, n),
                                    v[m:m + batch * n].reshape(batch, n, 1)), x, "complex")
    check(lambda v: np.linalg.solve(v[:m].reshape(batch, n, n),
                                    v[m:].reshape(batch, n, 2)), x, "complex")
    check(lambda v: np.linalg.solve(v[:m].reshape(batch, n, n), v[m:m + n]), x, "complex")
    check(lambda v: np.linalg.solve(np.eye(n) * 2 + 0.1, v[m:m + n]), x, "complex")
    check(lambda v: np.linalg.solve(v[:n * n].reshape(n, n), np.arange(n)), x, "complex")


@pytest.mark.parametrize("function, args", [(np.linalg.det, ()), (np.linalg.inv, ()),
                                            (np.linalg.solve, (np.ones(9),))])
def test_large_matrices_are_refused(function, args):
    A = forward.seed(np.eye(9).ravel() + 0.1).reshape(9, 9)
    with pytest.raises(UnsupportedOperationError,
                       match=r"numpy\.linalg\.%s.*9x9.*sparsegrad\.linalg\.spsolve"
                       % function.__name__):
        function(A, *args)


# ---------------------------------------------------------------------------
# numpy.pad modes computed from the values
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["linear_ramp", "mean", "maximum", "minimum", "median"])
@pytest.mark.parametrize("shape, pad_width", [((3, 4), ((1, 2), (2, 1))), ((7,), 3),
                                              ((2, 3, 2), 1), ((4, 3), ((0, 2), (1, 0)))])
def test_pad_modes(mode, shape, pad_width):
    n = int(np.prod(shape))
    check(lambda v: np.pad(v.reshape(shape), pad_width, mode=mode),
          _x(n, mode, shape), "central")


@pytest.mark.parametrize("mode", ["mean", "maximum", "minimum", "median"])
@pytest.mark.parametrize("stat_length", [1, 2, ((1, 3), (2, 1))])
def test_pad_stat_length(mode, stat_length):
    check(lambda v: np.pad(v.reshape(3, 4), 2, mode=mode, stat_length=stat_length),
          _x(12, mode, repr(stat_length)), "central")


def test_pad_linear_ramp_end_values():
    check(lambda v: np.pad(v.reshape(3, 4), ((1, 2), (2, 1)), mode="linear_ramp",
                           end_values=((1.0, 2.0), (3.0, 4.0))), _x(12, "ramp"), "central")


def test_pad_refusals():
    x = forward.seed(_x(4, "pad"))
    with pytest.raises(UnsupportedOperationError, match="numpy.pad.*end_values"):
        np.pad(x, 1, mode="linear_ramp", end_values=x[0])
    with pytest.raises(UnsupportedOperationError, match="numpy.pad.*'empty'"):
        np.pad(x, 1, mode="empty")


# ---------------------------------------------------------------------------
# ufunc.at
# ---------------------------------------------------------------------------
INDICES = np.array([0, 2, 2, 1, 2, 0, 5, 2])


def _at(ufunc, indices, operand):
    def f(v):
        t = v[:6] * 1.0
        ufunc.at(t, indices, operand(v))
        return t
    return f


@pytest.mark.parametrize("ufunc", [np.multiply, np.maximum, np.minimum])
@pytest.mark.parametrize("operand", [lambda v: v[4:12], lambda v: 0.7,
                                     lambda v: np.linspace(-1, 1, 8), lambda v: v[11]])
def test_at_repeated_indices(ufunc, operand):
    check(_at(ufunc, INDICES, operand), _x(12, ufunc.__name__, "at"), "central")


@pytest.mark.parametrize("ufunc", [np.multiply, np.maximum, np.minimum])
def test_at_with_a_tuple_of_indices_into_a_view(ufunc):
    def f(v):
        t = v[:8] * 1.0
        view = t.reshape(2, 4)[:, 1:]
        ufunc.at(view, (np.array([0, 1, 1, 0]), np.array([2, 2, 2, 2])), v[8:12])
        return t
    check(f, _x(12, ufunc.__name__, "view"), "central")


def test_multiply_at_with_zeros_is_exact():
    x = _x(12, "zeros")
    x[[5, 7]] = 0.0  # (two zero factors at index 2: the products without division)
    check(_at(np.multiply, INDICES, lambda v: v[4:12]), x, "complex")


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum])
def test_at_ties_go_to_the_earlier_element(ufunc):
    x = np.array([1.0, 2.0, 3.0, 5.0, 5.0])

    def f(v):
        t = v[:1] * 1.0
        ufunc.at(t, np.array([0, 0]), v[3:5])
        return t
    J = sparsegrad.jacobian(f)(x).toarray()
    expected = [[0.0, 0.0, 0.0, 1.0, 0.0]] if ufunc is np.maximum else [[1.0, 0, 0, 0, 0]]
    assert_array_equal(J, expected)


def test_at_refusals():
    x = forward.seed(_x(4, "at"))
    with pytest.raises(UnsupportedOperationError, match="maximum.at.*complex"):
        np.maximum.at(x * (1 + 1j), [0], 1.0)
    with pytest.raises(TypeError, match="multiply.at"):
        np.multiply.at(np.ones(4), [0], x[0])


def test_registered_for_the_compatibility_import():
    import subprocess
    import sys
    code = ("from sparsegrad import forward; import numpy as np; "
            "print(type(np.kron(np.eye(2), forward.seed(np.ones(2)))).__name__)")
    with warnings.catch_warnings():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "value" in out.stdout
