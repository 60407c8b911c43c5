"""Sparsity mode computes values only when they are read (sparsegrad._deferred).

The pattern never needs them; every value read must equal numpy's, computed
from the inputs as they were at the call (later writes into the caller's arrays
or into forward values do not reach it), and errors numpy raises at a call
(index out of bounds) must still come at that call.
"""
import numpy as np
import pytest
from numpy.testing import assert_array_equal

from sparsegrad import forward
from sparsegrad._deferred import Deferred
from asv_benchmarks.problems import PROBLEMS


def _deferred(y):
    return type(y._raw) is Deferred


def test_values_are_computed_when_read():
    x0 = np.linspace(0.5, 2.0, 6)
    x = forward.seed_sparsity(x0)
    y = np.exp(x[1:] * x[:-1]) - 2.0 * x[::-1][1:]
    assert _deferred(y)
    assert y.shape == (5,) and y.ndim == 1 and y.size == 5 and len(y) == 5
    assert y.dtype == np.float64
    pattern = y.sparsity                     # the pattern needs no value
    assert _deferred(y) and pattern.shape == (5, 6)
    expected = np.exp(x0[1:] * x0[:-1]) - 2.0 * x0[::-1][1:]
    assert_array_equal(y.value, expected)
    assert type(y._raw) is np.ndarray        # computed once, kept
    assert y.value is y.value


def test_value_mode_computes_at_once():
    x = forward.seed(np.array([1.0, 2.0]))
    assert type((x * 2.0)._raw) is np.ndarray


def test_numpy_scalars_keep_values_deferred():
    # (a grid spacing h = x[1] - x[0] is a numpy float64: 1 / h**2 must not force
    # the values of a stencil in sparsity mode)
    x0 = np.linspace(0.5, 2.0, 6)
    h, two = x0[1] - x0[0], np.int64(2)
    assert type(h) is np.float64
    expected = (x0[2:] - two * x0[1:-1] + x0[:-2]) / h ** 2 - h * x0[1:-1] ** two
    x = forward.seed_sparsity(x0)
    y = (x[2:] - two * x[1:-1] + x[:-2]) / h ** 2 - h * x[1:-1] ** two
    assert _deferred(y)
    assert_array_equal(y.value, expected)
    y = (lambda x: (x[2:] - two * x[1:-1] + x[:-2]) / h ** 2 - h * x[1:-1] ** two)(
        forward.seed(x0))
    assert_array_equal(y.value, expected)
    inner = 1.0 / h ** 2 * np.array([[1.0, -2.0, 1.0, 0, 0, 0], [0, 1, -2, 1, 0, 0],
                                      [0, 0, 1, -2, 1, 0], [0, 0, 0, 1, -2, 1]])
    inner[:, 1:-1] -= np.diag(2 * h * x0[1:-1])
    np.testing.assert_allclose(y.dvalue.toarray(), inner, rtol=1e-15, atol=1e-12)


def test_benchmark_residuals_in_sparsity_mode():
    for name, n in (("sw", 8), ("pb", 30), ("bratu", 6), ("dd", 12)):
        residual, x0 = PROBLEMS[name].setup(n)
        y = residual(forward.seed_sparsity(x0))
        assert _deferred(y), name
        J = residual(forward.seed(x0)).dvalue
        assert not np.any((J.toarray() != 0) & ~y.sparsity.toarray())
        assert_array_equal(y.value, residual(x0))


def test_the_callers_arrays_are_read_at_the_call():
    x0 = np.array([1.0, 2.0, 3.0])
    c = np.array([10.0, 20.0, 30.0])
    x = forward.seed_sparsity(x0)
    y = x * c
    z = np.concatenate([x, c])
    c[:] = -1.0                              # after the calls
    assert_array_equal(y.value, x0 * [10.0, 20.0, 30.0])
    assert_array_equal(z.value, [1.0, 2.0, 3.0, 10.0, 20.0, 30.0])


def test_writes_into_a_forward_value_after_a_deferred_use():
    x0 = np.array([1.0, 2.0, 3.0, 4.0])
    x = forward.seed_sparsity(x0)
    y = x * 1.0
    tail = y[1:]                             # a deferred view of y
    double = y * 2.0                         # a deferred product of y
    gathered = y[np.array([3, 0])]           # a deferred gather of y
    y[0] = 100.0                             # y is computed, then written
    y[1:] = 0.0
    assert_array_equal(y.value, [100.0, 0.0, 0.0, 0.0])
    assert_array_equal(tail.value, [0.0, 0.0, 0.0])  # (numpy's view sees the writes)
    assert_array_equal(double.value, [2.0, 4.0, 6.0, 8.0])
    assert_array_equal(gathered.value, [4.0, 1.0])


def test_index_errors_come_at_the_read():
    x = forward.seed_sparsity(np.arange(5.0))
    y = x * 2.0
    with pytest.raises(IndexError):
        y[7]
    with pytest.raises(IndexError):
        y[np.array([0, 7])]
    with pytest.raises(IndexError):
        y[np.array([0, -9])]
    assert_array_equal(y[np.array([4, -1, 0])].value, [8.0, 8.0, 0.0])
    assert_array_equal(y[np.array([4, 1], np.int32)].value, [8.0, 2.0])
    assert_array_equal(y[1:4:2].value, [2.0, 6.0])


def test_a_long_chain_is_computed_without_recursion():
    x0 = np.array([0.5, 1.5])
    x = forward.seed_sparsity(x0)
    y = x
    for _ in range(5000):                    # far beyond Python's recursion limit
        y = y + 1.0
    assert _deferred(y)
    assert_array_equal(y.value, x0 + 5000.0)


def test_control_flow_on_values_computes_them():
    x = forward.seed_sparsity(np.array([-1.0, 2.0]))
    y = x * 3.0
    assert_array_equal(y > 0, [False, True])
    if y[1] > 5.0:
        z = np.where(y > 0, y, -y)
    assert_array_equal(z.value, [3.0, 6.0])


def test_reshapes_and_dtype_changes():
    x0 = np.arange(1.0, 7.0)
    x = forward.seed_sparsity(x0)
    y = (x * 2.0).reshape(2, 3)
    assert _deferred(y) and y.shape == (2, 3)
    assert_array_equal(y.ravel().value, 2.0 * x0)
    assert_array_equal(np.pad(y, 1).value, np.pad(2.0 * x0.reshape(2, 3), 1))
    joined = np.concatenate([x * 1.0, x * 1.0], dtype=np.float32)  # computed now
    assert joined.dtype == np.float32
    assert_array_equal(joined.value, np.concatenate([x0, x0]).astype(np.float32))


def test_reshapes_stay_deferred_where_the_layout_is_known_at_the_call():
    # each deferred result knows its layout from its operands' when it is made:
    # a reshape of a C-contiguous one is deferred too, and numpy's view of it
    n = 4
    x0 = np.arange(1.0, n * n + 1.0)
    expected_grid = np.pad(x0.reshape(n, n), 1)
    x = forward.seed_sparsity(x0)
    U = np.pad(x.reshape(n, n), 1)
    inner = U[1:-1, 1:-1] * 2.0 + np.exp(U[2:, 1:-1]) - U[1:-1, :-2] ** 2
    flat = inner.ravel()
    assert _deferred(U) and _deferred(inner) and _deferred(flat)
    expected = (expected_grid[1:-1, 1:-1] * 2.0 + np.exp(expected_grid[2:, 1:-1])
                - expected_grid[1:-1, :-2] ** 2)
    for shape in ((n * n,), (n, -1), (-1, 2, 2), (2, 8), n * n):
        reshaped = inner.reshape(shape)
        assert _deferred(reshaped)
        assert_array_equal(reshaped.value, expected.reshape(shape))
    joined = np.concatenate([x * 1.0, x * 2.0]).reshape(2, n * n)
    assert _deferred(joined)
    assert_array_equal(joined.value, np.concatenate([x0, 2.0 * x0]).reshape(2, n * n))
    flat[0] = 7.0                            # a write through the view reaches its base
    expected[0, 0] = 7.0
    assert_array_equal(inner.value, expected)
    assert_array_equal(flat.value, expected.ravel())


def test_reshapes_of_values_not_in_c_order_copy_as_numpy():
    x0 = np.arange(1.0, 7.0)
    for transposed in (lambda v: v.reshape(2, 3).T, lambda v: v.reshape(2, 3)[:, ::-1].T):
        x = forward.seed_sparsity(x0)
        y = transposed(x) * 2.0              # laid out as its operand: not C-contiguous
        expected = transposed(x0) * 2.0
        flat = y.ravel()
        assert_array_equal(flat.value, expected.ravel())
        flat[0] = -1.0                       # numpy's ravel copied: y is not written
        assert_array_equal(y.value, expected)
        assert flat.value[0] == -1.0


def _outcome(call):
    try:
        return np.shape(call())
    except (ValueError, TypeError) as error:
        return type(error), str(error)


def test_deferred_reshapes_give_numpy_shapes_and_errors():
    x0 = np.arange(6.0)
    y = forward.seed_sparsity(x0) * 1.0
    for shape in ((4, -1), (-1, -1), (5,), (0, -1), (-2, 3), (2, 3.0), (3, -1), -1, 6,
                  (), (1, 6, 1), (-1, 1, 1)):
        assert _outcome(lambda: y.reshape(shape)) == _outcome(lambda: x0.reshape(shape))
    assert _outcome(lambda: np.ravel(y, "C", order="C")) == _outcome(
        lambda: np.ravel(x0, "C", order="C"))
    assert_array_equal(np.reshape(y, (3, 2), "C").value, x0.reshape(3, 2))
    assert_array_equal(np.reshape(y, shape=(2, 3)).value, x0.reshape(2, 3))
    assert_array_equal(np.squeeze(y.reshape(1, 6)).value, x0)


def test_a_deferred_value_checks_what_it_computes():
    wrong = Deferred(np.add, (np.ones(3), 1.0), (4,), np.float64)
    with pytest.raises(RuntimeError, match="internal error"):
        wrong.compute()


def test_arguments_the_caller_may_change_are_read_at_the_call():
    x0 = np.arange(1.0, 7.0)
    x = forward.seed_sparsity(x0)
    index = np.array([5, 0])
    taken = np.take(x * 1.0, index)
    shape = [3, 2]
    reshaped = np.reshape(x * 2.0, shape)
    padded = np.pad(x * 1.0, 1, constant_values=np.array([7.0, 8.0]))
    index[:] = 1
    shape[0] = 2
    assert_array_equal(taken.value, [6.0, 1.0])
    assert_array_equal(reshaped.value, 2.0 * x0.reshape(3, 2))
    assert_array_equal(padded.value, np.concatenate([[7.0], x0, [8.0]]))


def test_index_bounds_of_an_index_array_read_again():
    # the seed keeps the largest row of its copy of an index array: a shorter
    # value, or the array changed in place, is still checked
    x = forward.seed_sparsity(np.arange(8.0))
    long, short = x * 1.0, x[:3] * 1.0
    index = np.array([4, 0, 2])
    assert_array_equal(long[index].value, [4.0, 0.0, 2.0])
    with pytest.raises(IndexError):
        short[index]
    index[0] = 9
    with pytest.raises(IndexError):
        long[index]
    index[0] = 1
    assert_array_equal(short[index].value, [1.0, 0.0, 2.0])
