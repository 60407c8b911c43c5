"""Regression tests for bugs found in the numpy-function layer (``_functions.py``).

Each test states numpy's own result on plain arrays and the Jacobian from an
independent reference (``numerical_jacobian``), or the loud refusal expected.
"""
import warnings

import numpy as np
import pytest

import sparsegrad
from sparsegrad import forward
from sparsegrad.testing import numerical_jacobian


def _rng(k=0):
    return np.random.default_rng(1234 + k)


def _dense(y):
    d = y.dvalue
    return d.toarray() if hasattr(d, "toarray") else np.atleast_2d(np.asarray(d))


def check(f, x, method="complex", rtol=1e-10, atol=1e-12):
    """Value equal to numpy's (dtype and shape too); Jacobian equal to the reference."""
    y = f(forward.seed(x))
    expected = np.asarray(f(x))
    assert y.shape == expected.shape
    assert y.dtype == expected.dtype
    np.testing.assert_array_equal(y.value, expected)
    J = _dense(y).reshape(expected.size, x.size)
    np.testing.assert_allclose(J, numerical_jacobian(f, x, method=method),
                               rtol=rtol, atol=atol)
    return y


# ---- reductions over a non-empty axis of an empty array ------------------------------
@pytest.mark.parametrize("func", [np.prod, np.max, np.min, np.amax, np.amin])
@pytest.mark.parametrize("shape,axis", [((0, 3), 1), ((0, 3), -1), ((2, 0, 3), (0, 2)),
                                        ((2, 0, 3), 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduction_over_nonempty_axis_of_empty_array(func, shape, axis, keepdims):
    x = np.zeros(shape)
    y = func(forward.seed(x), axis=axis, keepdims=keepdims)
    expected = func(x, axis=axis, keepdims=keepdims)
    assert y.shape == expected.shape
    assert y.dvalue.shape == (0, 0)


# ---- gufunc keywords: numpy's value ------------------------------------------------------
@pytest.mark.parametrize("func,args", [
    (np.vecdot, lambda x: (x, np.arange(4.0))),
    (np.matvec, lambda x: (x, np.arange(4.0))),
    (np.vecmat, lambda x: (np.arange(3.0), x)),
], ids=["vecdot", "matvec", "vecmat"])
def test_gufunc_dtype_keyword_gives_numpys_value(func, args):
    x = _rng().standard_normal((3, 4))
    y = func(*args(forward.seed(x)), dtype=np.float32)
    expected = func(*args(x), dtype=np.float32)
    assert y.dtype == np.float32 == expected.dtype
    np.testing.assert_array_equal(y.value, expected)
    # (the map is linear: its Jacobian is that of the float64 call, exactly)
    # (vecdot conjugates its first argument: no complex step)
    reference = numerical_jacobian(lambda x: func(*args(x)), x, method="central")
    np.testing.assert_allclose(_dense(y), reference, rtol=1e-6, atol=1e-8)


# ---- cumulative functions -------------------------------------------------------------
@pytest.mark.parametrize("func", [np.cumsum, np.cumprod, np.cumulative_sum,
                                  np.cumulative_prod])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumulative_of_0d_with_axis_is_numpys_1d_result(func, axis):
    y = check(lambda x: func(x, axis=axis), np.array(0.7))
    assert y.shape == (1,)


@pytest.mark.parametrize("func", [np.cumulative_sum, np.cumulative_prod])
def test_cumulative_of_2d_without_axis_raises_like_numpy(func):
    x = _rng().standard_normal((2, 3))
    with pytest.raises(ValueError, match="axis"):
        func(x)
    with pytest.raises(ValueError, match="axis"):
        func(forward.seed(x))


def test_cumulative_sum_with_axis_still_works():
    check(lambda x: np.cumulative_sum(x, axis=1, include_initial=False),
          _rng().standard_normal((2, 3)))
    check(lambda x: np.cumulative_prod(x, axis=0), _rng().standard_normal((2, 3)))


# ---- clip ---------------------------------------------------------------------------------
def test_clip_refuses_where():
    x = forward.seed(_rng().standard_normal((3, 4)))
    mask = np.arange(12).reshape(3, 4) % 2 == 0
    with pytest.raises(TypeError, match="where="):
        np.clip(x, -0.5, 0.5, where=mask)


@pytest.mark.parametrize("f", [
    lambda x: np.clip(x, -0.5, 0.5),
    lambda x: np.clip(x, min=-0.5),
    lambda x: np.clip(x, None, 0.25),
], ids=["both", "min-keyword", "upper"])
def test_clip_of_float32_with_python_bounds_stays_float32(f):
    x = _rng().standard_normal((3, 4)).astype(np.float32)
    y = f(forward.seed(x))
    assert y.dtype == np.float32 == f(x).dtype
    np.testing.assert_array_equal(y.value, f(x))
    inside = (x > -0.5) & (x < 0.25)
    assert np.all(np.diag(_dense(y))[inside.ravel()] == 1)


@pytest.mark.parametrize("call", [
    lambda x: np.clip(x, -0.5, None, max=0.3),
    lambda x: np.clip(x, -0.5),
], ids=["bound-twice", "a_max-missing"])
def test_clip_bad_bounds_raise_like_numpy(call):
    x = _rng().standard_normal(4)
    with pytest.raises((TypeError, ValueError)) as plain_error:
        call(x)
    with pytest.raises(type(plain_error.value)):
        call(forward.seed(x))


# ---- diff ---------------------------------------------------------------------------------
def test_diff_n0_is_the_input_like_numpy():
    x = _rng().standard_normal((3, 4))
    check(lambda x: np.diff(x, n=0, prepend=1.0, append=x[:, :1]), x)
    check(lambda x: np.diff(x, n=0), np.array(0.5))
    s = forward.seed(x)
    assert np.diff(s, 0) is s  # (numpy returns its input itself)


# ---- full_like and full with a forward fill value ------------------------------------------
@pytest.mark.parametrize("f", [
    lambda x: np.full_like(x, x[0, 0]),
    lambda x: np.full_like(x, x[0]),
    lambda x: np.full_like(x, 2 * x[:, :1], shape=(2, 3, 4)),
    lambda x: np.ravel(np.full_like(x.T, x[:, 0]), order="K"),
    lambda x: np.ravel(np.full_like(x.T, x[:, 0], order="C"), order="K"),
], ids=["scalar", "row", "shape", "fortran-prototype", "order-C"])
def test_full_like_with_forward_fill_keeps_its_derivative(f):
    check(f, _rng().standard_normal((3, 4)))


def test_full_like_with_forward_fill_is_writable_and_fresh():
    x = forward.seed(np.arange(1.0, 5.0))
    F = np.full_like(x, x[0])
    F[1] = 3 * x[2]
    np.testing.assert_array_equal(F.value, [1.0, 9.0, 1.0, 1.0])
    np.testing.assert_array_equal(F.dvalue.toarray(), [[1, 0, 0, 0], [0, 0, 3, 0],
                                                       [1, 0, 0, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(x.value, [1.0, 2.0, 3.0, 4.0])


def test_full_like_with_plain_fill_is_still_a_plain_array():
    x = forward.seed(np.ones(3, dtype=np.float32))
    y = np.full_like(x, 0.1)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32


def test_full_with_forward_fill_and_dtype_is_c_ordered():
    def f(x):
        like = {"like": x} if isinstance(x, forward.value) else {}
        return np.ravel(np.full((4, 3), x[:, 0], dtype=x.dtype, **like), order="K")
    check(f, _rng().standard_normal((3, 2)))


# ---- sequence functions -------------------------------------------------------------------
@pytest.mark.parametrize("func", [np.concatenate, np.stack])
def test_casting_without_dtype_is_numpys(func):
    x = _rng().standard_normal(3)
    ints = np.arange(3)
    with pytest.raises(TypeError, match="'no'"):
        func([x, ints], casting="no")
    with pytest.raises(TypeError, match="'no'"):
        func([forward.seed(x), ints], casting="no")
    check(lambda x: func([x, ints], casting="same_kind"), x)


def test_column_stack_refuses_casting_like_numpy():
    with pytest.raises(TypeError, match="casting"):
        np.column_stack([forward.seed(np.ones(3)), np.ones(3)], casting="no")


# ---- where with a condition that is not boolean ------------------------------------------
@pytest.mark.parametrize("condition", [
    np.array([1, 0, 2, 0]), [1, 0, -3, 0], np.array([0.5, 0.0, np.nan, 0.0]),
], ids=["int", "int-list", "float"])
def test_where_with_non_boolean_condition(condition):
    check(lambda x: np.where(condition, x, 2 * x), _rng().standard_normal((3, 4)),
          method="central", rtol=1e-7, atol=1e-7)


def test_where_with_forward_condition_as_truth_values():
    x = np.array([0.0, 1.5, -2.0, 0.0])
    s = forward.seed(x)
    y = np.where(s, 3 * s, -s)
    np.testing.assert_array_equal(np.diag(_dense(y)), [-1, 3, 3, -1])


# ---- value queries with out= -------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda x, F: np.any(np.stack([x, x]), axis=0, out=F),
    lambda x, F: np.all(np.stack([x, x]), 0, F),
    lambda x, F: np.argmax(np.stack([x, x]), axis=0, out=F),
], ids=["any", "all-positional", "argmax"])
def test_value_query_refuses_forward_out(call):
    x = forward.seed(np.array([1.0, 0.0, 2.0]))
    F = np.zeros(3, like=x)
    F[...] = 2 * x
    with pytest.raises(TypeError, match="out="):
        call(x, F)
    np.testing.assert_array_equal(F.value, [2.0, 0.0, 4.0])


def test_value_query_with_plain_out_still_works():
    x = forward.seed(np.array([1.0, 0.0, 2.0]))
    out = np.zeros((), dtype=bool)
    assert np.any(x, out=out) is out and out[()]


# ---- dot and inner with a 0-d operand ----------------------------------------------------
@pytest.mark.parametrize("f", [
    lambda x: np.dot(x, 3.0), lambda x: np.dot(3.0, x), lambda x: np.inner(x, 3.0),
    lambda x: np.dot(x[0, 0], x),
], ids=["dot-right", "dot-left", "inner", "forward-0d"])
def test_dot_with_0d_operand_is_numpys_value(f):
    x = _rng().standard_normal((2, 3)).astype(np.float32)
    y = f(forward.seed(x))
    expected = f(x)
    assert y.dtype == expected.dtype  # float64: numpy takes 3.0 as an array here
    np.testing.assert_array_equal(y.value, expected)
    np.testing.assert_allclose(_dense(y), numerical_jacobian(f, x), rtol=1e-6)


# ---- forward split points / indices --------------------------------------------------------
def test_split_with_forward_sections_does_not_recurse():
    y = forward.seed(np.arange(6.0))
    pieces = np.split(y, y[2])  # (numpy takes the 0-d value 2.0 as two sections)
    assert [p.value.tolist() for p in pieces] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    np.testing.assert_array_equal(pieces[1].dvalue.toarray(), np.eye(6)[3:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((TypeError, IndexError)):
            np.split(np.arange(5.0), forward.seed(np.array([1.0, 3.0])))
        with pytest.raises(IndexError):
            np.delete(y, y[:2])


def test_vecdot_takes_an_axis():
    x0 = np.arange(1.0, 7.0).reshape(2, 3)
    y = np.array([[1.0, -2.0, 0.5], [3.0, 1.0, 2.0]])

    def f(x):
        return np.vecdot(x, y, axis=0)

    result = f(forward.seed(x0))
    np.testing.assert_allclose(result.value, np.vecdot(x0, y, axis=0))
    # (central differences: vecdot conjugates x, which defeats the complex step)
    np.testing.assert_allclose(result.dvalue.toarray(),
                               numerical_jacobian(f, x0, method="central"),
                               rtol=1e-8, atol=1e-8)
    expected = np.zeros((3, 6))
    for i in range(2):
        for j in range(3):
            expected[j, 3 * i + j] = y[i, j]   # d sum_i x[i, j] y[i, j] / d x[i, j]
    np.testing.assert_array_equal(result.dvalue.toarray(), expected)


@pytest.mark.parametrize("reduction", [np.sum, np.prod, np.max, np.min])
@pytest.mark.parametrize("axis", [0, -1])
def test_reductions_of_a_0d_value_over_its_axis(reduction, axis):
    x = forward.seed(np.array(2.0))
    y = reduction(x * 3.0, axis=axis)
    np.testing.assert_array_equal(y.value, reduction(np.array(6.0), axis=axis))
    np.testing.assert_array_equal(y.dvalue, 3.0)
    with pytest.raises(np.exceptions.AxisError):
        reduction(x * 3.0, axis=1)


@pytest.mark.parametrize("call", [lambda y: np.sum(y, dtype=object),
                                  lambda y: np.cumsum(y, dtype=object),
                                  lambda y: np.prod(y, dtype=object),
                                  lambda y: y.astype(object)])
def test_object_dtype_casts_are_refused(call):
    # (they gave a zero Jacobian: an object array of numbers is not piecewise constant)
    x = forward.seed(np.array([1.0, 2.0]))
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="dtype=object"):
        call(x * 1.0)
