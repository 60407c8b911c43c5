"""Recorded evaluation against the eager way, bit for bit, or refused.

``value_and_jacobian(f, trace=True)`` must return the eager way's value and
Jacobian exactly (pattern, data, inf and nan included) at every call, or go the
eager way: never another answer, never an error of its own.  These tests go
through the classes where a program could differ: every rule of the eager
table and every kind of operand (length-1 operands broadcast, scalars of
either type, constant arrays, masks), the exponents of powers at special
bases, non-finite values, branches and masks that change between calls, the
eager way's merges and its choices by scalars, and values that must not
alias the argument.
"""
import numpy as np
import pytest

import sparsegrad
from sparsegrad._ufunc_rules import DERIVATIVES

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, np.inf, -np.inf, np.nan, 1e-310,
                    1e308, 2.0, -1e-300])
# (other values and another order at every call: masks and branches change)
POINTS = (SPECIAL, SPECIAL[::-1] * 0.7, np.zeros(len(SPECIAL)), np.linspace(-3.0, 3.0, 14))


def canonical(J):
    J = J.tocsr(copy=True)
    J.sort_indices()
    return J


def check(f, points=POINTS, *args, recorded=True):
    """``f`` recorded at every point of ``points`` is the eager way's bit for bit;
    ``recorded``: it was recorded (True), or refused (False; None: either)."""
    g = sparsegrad.value_and_jacobian(f, trace=True)
    for x in points:
        with np.errstate(all="ignore"):
            value, J = g(x, *args)
            expected_value, expected = sparsegrad.value_and_jacobian(f, trace=False)(x, *args)
        assert np.array_equal(value, expected_value, equal_nan=True), (value, expected_value)
        assert value.dtype == expected_value.dtype and J.shape == expected.shape
        J, expected = canonical(J), canonical(expected)
        assert np.array_equal(J.indptr, expected.indptr)
        assert np.array_equal(J.indices, expected.indices)
        assert np.array_equal(J.data, expected.data, equal_nan=True), (x, J.data, expected.data)
        # (the same signs of zeros and infinities too; a nan's is whichever
        # operand's numpy propagates)
        numbers = ~np.isnan(J.data)
        assert np.array_equal(np.signbit(J.data[numbers]), np.signbit(expected.data[numbers]))
    info = g.cache_info()
    if recorded is True:
        assert info.fallbacks == 0, g.cache_info.__self__.refused
    elif recorded is False:
        assert info.fallbacks == len(points) and info.programs == 0
    return g


# ---------------------------------------------------------------- the reproducers

def test_a_broadcast_branch_keeps_its_rows():
    u = np.array([1.0, -2.0, 3.0])
    check(lambda u: np.where(u > 0, u, 2.0 * u[:1]), (u, -u, u * 0.5))


def test_a_broadcast_mask_reads_inside_its_values():
    u = np.array([1.0, -2.0, 3.0])
    check(lambda u: np.where(u[:1] > 0, u, -u), (u, -u, u * 0.5))


def test_a_zeroth_power_is_constant_at_zero():
    check(lambda u: u ** 0 + u, (np.zeros(3), np.array([0.0, np.inf, np.nan])))


def test_a_fractional_power_of_a_log_at_zero():
    check(lambda u: np.log(u) ** 1.5, (np.array([0.0, 1.0, 2.0]), np.array([-1.0, 0.5, 0.0])))


def test_a_read_of_the_argument_is_a_copy():
    g = sparsegrad.value_and_jacobian(lambda x: x[1:], trace=True)
    for f in (lambda x: x[1:], lambda x: x, lambda x: x[::-1][::2], lambda x: +x):
        g = sparsegrad.value_and_jacobian(f, trace=True)
        for _ in range(2):
            x = np.arange(4.0)
            value, J = g(x)
            expected = f(x.copy())
            assert not np.shares_memory(value, x)
            x[:] = 100.0
            np.testing.assert_array_equal(value, expected)
        assert g.cache_info().hits == 1


def test_data_are_fresh_at_every_call():
    g = sparsegrad.value_and_jacobian(lambda x: x[1:] * x[:-1], trace=True)
    (_, J1), (_, J2) = g(np.arange(4.0)), g(np.arange(4.0) + 1.0)
    assert not np.shares_memory(J1.data, J2.data)
    np.testing.assert_array_equal(J1.toarray()[0, :2], [1.0, 0.0])


# ---------------------------------------------------------------- every rule, every operand

def _unary_forms(ufunc):
    return {
        "value": lambda x: ufunc(x) + x,
        "slices": lambda x: ufunc(x[1:] * x[:-1]) * x[1:],
        "broadcast": lambda x: ufunc(x[:1]) * x,
        "twice": lambda x: ufunc(x) * ufunc(x) - ufunc(x[::-1]),
    }


def _binary_forms(ufunc):
    return {
        "values": lambda x: ufunc(x, x[::-1]),
        "same value": lambda x: ufunc(x, x),
        "float": lambda x: ufunc(x, 2.0),
        "reflected float": lambda x: ufunc(1.5, x),
        "int": lambda x: ufunc(x, 3),
        "reflected int": lambda x: ufunc(-2, x),
        "numpy scalar": lambda x: ufunc(np.float64(0.25), x) + ufunc(x, np.int64(2)),
        "length 1": lambda x: ufunc(x, x[:1]),
        "reflected length 1": lambda x: ufunc(x[:1], x) * x,
        "constant": lambda x: ufunc(x * 2.0, SPECIAL),
        "constant length 1": lambda x: ufunc(SPECIAL[2:3], x),
        "mask": lambda x: ufunc(x, x > 0.5) + ufunc(x < 0.0, x),
    }


def _forms():
    for ufunc in DERIVATIVES:
        forms = _unary_forms(ufunc) if ufunc.nin == 1 else _binary_forms(ufunc)
        for name, f in forms.items():
            yield pytest.param(f, id="%s-%s" % (ufunc.__name__, name))


@pytest.mark.parametrize("f", list(_forms()))
def test_every_rule_and_operand(f):
    # (recorded, or refused where the rule needs more than arithmetic and
    # ufuncs, or numpy refuses the operands: never another answer)
    try:
        check(f, recorded=None)
    except TypeError:
        with pytest.raises(TypeError), np.errstate(all="ignore"):
            sparsegrad.value_and_jacobian(f, trace=False)(SPECIAL)


@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.divide, np.negative,
                                   np.exp, np.log, np.sqrt, np.sin, np.cos, np.tanh,
                                   np.expm1, np.log1p, np.square, np.reciprocal, np.arctan,
                                   np.sinh, np.absolute, np.hypot, np.arctan2, np.logaddexp])
def test_the_common_rules_are_recorded(ufunc):
    forms = _unary_forms(ufunc) if ufunc.nin == 1 else _binary_forms(ufunc)
    for f in forms.values():
        check(f)


# ---------------------------------------------------------------- powers

EXPONENTS = [0, 1, 2, 3, -1, -2, 0.5, 1.5, -0.5, 2.0, 1.0, 0.0, -1.0, 3.0, 1 / 3, np.float64(2),
             np.int64(3), np.float64(0.5), 1e300, np.inf, -np.inf, np.nan, 2 ** 53]


@pytest.mark.parametrize("p", EXPONENTS, ids=repr)
def test_powers_at_special_bases(p):
    # (x ** p is numpy's operator: sqrt, reciprocal and square for 0.5, -1
    # and 2; np.power is the ufunc)
    for f in (lambda x: x ** p, lambda x: np.power(x, p), lambda x: (x * x[::-1]) ** p + x,
              lambda x: np.log(x) ** p, lambda x: x[:1] ** p * x,
              lambda x: (x ** p)[1:] * x[:-1] ** p, lambda x: -x ** p, lambda x: np.abs(x) ** p):
        check(f, POINTS + (-SPECIAL,))


def test_powers_the_recorder_does_not_take():
    for f in (lambda x: x ** x, lambda x: 2.0 ** x, lambda x: x ** 2 ** 60,
              lambda x: x ** np.float32(2.0), lambda x: np.float_power(x, 2.0)):
        check(f, recorded=False)


# ---------------------------------------------------------------- where, masks, broadcasts

B = SPECIAL > 0.4


@pytest.mark.parametrize("f", [
    lambda x: np.where(x > 0, np.sqrt(x), 1.0 / x),
    lambda x: np.where(x > 0, x, x),
    lambda x: np.where(B, x, 2.0) + np.where(~B, 3.0, x * x),
    lambda x: np.where(x > 0, 1.0, x) * np.where(x < 0, x, x * 3),
    lambda x: np.where(x[:1] > 0, x[:1], x),
    lambda x: np.where(B[:1], x, x * x[:1]),
    lambda x: np.where((x > 0) & (x < 2) | ~(x != x), np.exp(x), np.log(x)),
    lambda x: np.where(x > 0, x * np.where(x > 1, x, 2.0), -x) * x,
    lambda x: B * x + x * (x > 1.0) - (x < 0) / x,
    lambda x: ((x > 0) * 1.0 + 2.0) * x,
    lambda x: x * x[:1] + x[:1] * x + x[:1] / x - x / x[:1],
    lambda x: np.exp(x[:1]) * x + np.sin(x[-1:]),
    lambda x: (x - x) / (x - x) + np.log(x - x) * x,
], ids=range(13))
def test_where_masks_and_broadcasts(f):
    check(f)


def test_where_of_one_stacked_value_in_both_branches():
    # (the value's blocks stay unmerged, as when recorded: the same rounding)
    def f(x):
        v = np.concatenate([np.sin(x), np.sin(x)])
        e = np.exp(np.where(v > 0.25, v, v))
        return e * e
    check(f)


def test_where_of_a_merged_concatenation_is_refused():
    def f(x):
        u = np.concatenate([x[:1], x, x[-1:]])
        d = u[1:] - u[:-1]
        return np.where(d > 0, d, 0.0)
    check(f, recorded=False)


# ---------------------------------------------------------------- reads, merges, sums

EAST = np.roll(np.arange(len(SPECIAL)), -1)


@pytest.mark.parametrize("f", [
    lambda x: np.concatenate([x[:1], x, x[-1:]])[1:] - np.concatenate([x[:1], x, x[-1:]])[:-1],
    lambda x: (lambda u: u[2:] - 2 * u[1:-1] + u[:-2])(np.concatenate([x[:1], x, x[-1:]])),
    lambda x: (lambda u: u[2:] * u[:-2])(np.concatenate([np.zeros(1), x * x, np.ones(1)])),
    lambda x: np.concatenate([x, x * 2]) * np.concatenate([x, x]) + np.concatenate([x, x]),
    lambda x: np.concatenate([x, x * 2]) + np.concatenate([x[:3], x[3:] * 2, x]),
    lambda x: np.roll(np.concatenate([x[:2], x[2:] * 2]), 1) + x,
    lambda x: np.concatenate([x * 2, SPECIAL]) * x[0:1],
    lambda x: x[EAST] - 2 * x + x[EAST[::-1].copy()] + x[EAST][EAST],
    lambda x: x[EAST] * x[EAST.copy()] + x[np.roll(EAST, 3)] * x,
    lambda x: x[[0, -1]] * x[[0, 13]] + x[[0, -1]],
    lambda x: x[list(range(14)) * 3] * 2.0,
    lambda x: np.roll(x, 1) + np.roll(x, -13) + np.roll(x, 15) + np.roll(x, 1, axis=0),
    lambda x: x[1:][1:] * x[2:] + x[2:] + x[1:][1:],
    lambda x: sum((x[k:k + 8] * (k + 1.5) for k in range(6)), x[:8]),
    lambda x: sum((x[k:k + 1] * x for k in range(14)), x),
    lambda x: x * 0.0 + x * 1.0 + x * -0.0 + 0.0 * x - x * 1,
    lambda x: x[5:5] * x[0:0],
], ids=range(17))
def test_reads_merges_and_sums(f):
    check(f)


def test_an_index_array_written_between_two_reads():
    index = np.arange(14)

    def f(x):
        index[:] = np.arange(14)
        a = x[index]
        index[:] = EAST
        b = x[index] * x[index]
        index[:] = np.arange(14)[::-1]
        return a * 2.0 + b + x[index]
    g = check(f)
    assert g.cache_info().hits == len(POINTS) - 1


def test_temporary_index_arrays_are_each_their_own():
    # (equal arrays made afresh: the eager way shares no matrix between them)
    base = np.arange(14)
    check(lambda x: x[np.roll(base, 1)] * 3.0 + x[np.roll(base, 1)] * x + x[base.copy()])


def test_more_reads_of_one_value_than_the_eager_way_keeps_are_refused():
    # (the eager way keeps 16 gathers of a matrix, the least recently used
    # forgotten first: the 17th read's matrix would not be the 1st's)
    rows = [np.roll(np.arange(14), k) for k in range(20)]

    def f(x):
        y = x[::-1] * 2.0
        return sum((y[r] for r in rows + rows), x)
    check(f, recorded=False)


# ---------------------------------------------------------------- scalars

SCALARS = [2.0, 1.0, 0.0, -0.0, np.nan, np.inf, 2, 1, 0, -1, 2.0, 1.0, np.float64(1.0),
           np.int64(1), 1e308, 3.5]


@pytest.mark.parametrize("f", [
    lambda x, c: x * c + x * 2.0,
    lambda x, c: np.exp(x) * c + x * c,
    lambda x, c: (x[1:] * c - x[:-1] * c) * c + x[1:] * x[:-1],
    lambda x, c: np.concatenate([x[:1], x * c]) * c + np.concatenate([x, x[:1]]),
    lambda x, c: (x * c) / c - x ** 2 * c + c / x + c - x + x - c,
    lambda x, c: (x[1:] * x[:-1] + x[1:]) * c * 2.0 + x[1:] * c * c,
    lambda x, c: np.where(x > c, x * c, x / c) + np.where(x > c, c, x),
], ids=range(7))
def test_scalars_that_change_between_calls(f):
    # (the eager way sums terms of one matrix by whether their scalars are
    # equal, and returns a Jacobian itself for a factor 1: programs are kept
    # for each such choice)
    g = sparsegrad.value_and_jacobian(f, trace=True)
    x = np.array([0.5, -1.0, 2.0, 0.0, 3.0])
    for c in SCALARS:
        with np.errstate(all="ignore"):
            value, J = g(x, c)
            expected_value, expected = sparsegrad.value_and_jacobian(f, trace=False)(x, c)
        assert np.array_equal(value, expected_value, equal_nan=True)
        J, expected = canonical(J), canonical(expected)
        assert np.array_equal(J.indices, expected.indices)
        assert np.array_equal(J.data, expected.data, equal_nan=True)
    info = g.cache_info()
    assert info.fallbacks == 0 and info.misses <= 4


def test_scalars_the_recorder_does_not_take():
    for c in (np.float32(0.5), 2 ** 60, True, np.array(2.0)):
        check(lambda x: x * c, recorded=False)


# ---------------------------------------------------------------- the benchmark problems

@pytest.mark.parametrize("key, n", [("sw", 8), ("pb", 30), ("dd", 30), ("dd", 400)])
def test_benchmark_problems_bit_for_bit(key, n):
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from asv_benchmarks import problems
    F, x0 = problems.get(key).setup(n)
    check(F, (x0, x0 * 1.01 + 0.001, x0 * 0.99))


# ---------------------------------------------------------------- never an error of its own

def test_a_program_that_fails_its_checks_goes_the_eager_way(monkeypatch):
    from sparsegrad import _fast

    def failing(*args):
        raise ValueError("run_program: leaf 0 (instruction 0) reads outside its values")
    monkeypatch.setattr(_fast, "run_program", failing)
    g = check(lambda x: x[1:] * x[:-1], recorded=None)
    assert g.cache_info().fallbacks == len(POINTS)
    assert "failed its checks" in g.cache_info.__self__.refused


def test_an_error_of_the_compiler_goes_the_eager_way(monkeypatch):
    from sparsegrad import _trace

    def failing(tape, output):
        raise TypeError("a case the compiler does not know")
    monkeypatch.setattr(_trace, "compile_tape", failing)
    sparsegrad.clear_structure_cache()      # (no program of another test's)
    g = check(lambda x: x[1:] * x[:-1], recorded=False)
    assert "compiler's TypeError" in g.cache_info.__self__.refused


# ---------------------------------------------------------------- n-d values

COLUMN = np.linspace(0.5, 2.0, 7).reshape(7, 1)


def bratu(x):
    u = x.reshape(2, 7)
    U = np.pad(u, 1)
    return ((U[:-2, 1:-1] + U[2:, 1:-1] + U[1:-1, :-2] + U[1:-1, 2:] - 4 * u) * 49.0
            + 6.0 * np.exp(u)).ravel()


@pytest.mark.parametrize("f", [
    bratu,
    lambda x: np.sin(x.reshape(2, 7)) * x.reshape(2, 7)[::-1],
    lambda x: np.reshape(x, (7, 2))[1:, 0] * np.ravel(x.reshape(2, -1))[:6],
    lambda x: np.reshape(x, shape=(2, 7))[..., 2:5] ** 2,
    lambda x: x.reshape(2, 7)[None, :, 1] - x.reshape(14, 1)[3:5, 0],
    lambda x: x.reshape(7, 2) * COLUMN + x.reshape(7, 2)[:, :1],     # broadcasts
    lambda x: np.exp(x.reshape(1, 14)) / x.reshape(14, 1)[:3],       # an outer one
    lambda x: np.where(x.reshape(2, 7) > 0, x.reshape(2, 7), x.reshape(2, 7)[:1]),
    lambda x: np.pad(x.reshape(7, 2) ** 2, ((1, 0), (2, 3)))[::2],
    lambda x: x[2:, ...][None] * x[(slice(None, -2),)],
    lambda x: x.reshape(2, 7)[1],
    lambda x: x.reshape(2, 7).T.ravel() * x[::-1],
    lambda x: np.flip(x.reshape(2, 7), axis=(0, 1)) - np.flip(x.reshape(2, 7), axis=1)[::-1],
    lambda x: np.roll(x.reshape(7, 2), 1, axis=0) - x.reshape(7, 2).swapaxes(0, 1).T,
    lambda x: (np.tile(x.reshape(2, 7)[:, :2], (2, 1))
               * np.repeat(np.repeat(x[:4], 2).reshape(2, 4)[:, :2], 2, axis=0)),
    lambda x: np.moveaxis(x.reshape(1, 2, 7), 0, -1).ravel() + np.broadcast_to(x[:1], (14,)),
    lambda x: np.rot90(x.reshape(2, 7)).ravel() * np.transpose(x.reshape(2, 7), [1, 0]).ravel(),
    lambda x: np.diagonal(x.reshape(2, 7)) * x[:2] + x.reshape(2, 7).transpose(1, 0)[0],
    lambda x: np.concatenate([[0.0], x, [2.5, 1]])[:-3] * np.concatenate(([3], x[1:]))[::-1],
    lambda x: np.concatenate([x.reshape(2, 7), x.reshape(2, 7) ** 2]).ravel(),
    lambda x: np.concatenate([x.reshape(2, 7), np.ones((2, 1)), x.reshape(2, 7)], axis=1),
    lambda x: np.concatenate((x.reshape(7, 2), x[:4].reshape(2, 2)), axis=None) * 3.0,
    lambda x: np.stack([x[:7], x[7:] ** 2, np.ones(7)], axis=1)[:, 1:] - np.stack((x[:7], x[7:])).T,
    lambda x: np.vstack([x[:7], np.zeros(7), x[7:]]) * np.hstack([x[:2], [1.0], x[2:6]]),
    lambda x: np.dstack([x.reshape(2, 7), x.reshape(2, 7)[::-1]])
    + np.column_stack([x[:7], x[7:]])[None],
    lambda x: x * x[0] - x[-1],
    lambda x: np.exp(x[3]) * x[::2] + x[0] ** 2 / x[2],
    lambda x: np.where(x > 0, x[0], x) * x.reshape(2, 7)[1, 3],
    lambda x: np.sin(x[1] * 2.0 + x[2]) * x - np.sqrt(x[4]),
    lambda x: x[0] * x[1] + 1.0,
    lambda x: np.maximum(x, 0.5) + np.maximum(x, 0.25) * np.minimum(x, x[::-1]),
    lambda x: np.fmax(x, x ** 2) * 2.0 - np.fmin(x[::-1], 0.0) + np.maximum(x, x),
    lambda x: np.maximum(1.0, x.reshape(2, 7)) - np.minimum(np.ones(7), x.reshape(2, 7)),
    lambda x: np.diff(x) * x[1:] + np.diff(x, 2)[0],
    lambda x: np.diff(x.reshape(2, 7), axis=0) * np.diff(x.reshape(2, 7), 3, axis=1)[:, :1],
], ids=["bratu", "reversed rows", "np.reshape and np.ravel", "ellipsis", "none and ints",
        "broadcast columns", "outer", "where", "pad", "1-d tuple keys", "a row", "transpose",
        "flip", "roll and swapaxes", "tile and repeat", "moveaxis and broadcast_to",
        "rot90", "diagonal", "lists of numbers concatenated", "n-d concatenate",
        "concatenate along 1", "concatenate flat", "stack", "vstack and hstack",
        "dstack and column_stack", "elements", "elements in rules", "elements in where",
        "element arithmetic", "a 0-d result", "maximum and minimum", "fmax and fmin",
        "selections broadcast", "diff", "diff of n-d values"])
def test_n_d_values_are_recorded(f):
    check(f)


@pytest.mark.parametrize("f", [
    lambda x: x.reshape(2, 7).sum(axis=0),                # a reduction
    lambda x: np.roll(x.reshape(2, 7), np.array([1, 2]), axis=(0, 1)),   # by an array
    lambda x: x.reshape(2, 7, order="F").ravel(),         # another order
    lambda x: np.pad(x, 1, mode="edge"),                  # another pad
    lambda x: np.stack([x, x], axis=np.int64(1)),         # a numpy integer axis
    lambda x: x.reshape(2, 7)[np.array([1, 0])].ravel(),  # an index array of an n-d value
])
def test_n_d_reads_not_recorded_go_the_eager_way(f):
    check(f, recorded=False)


def test_an_n_d_argument_is_recorded():
    X = np.linspace(-1.0, 2.0, 12).reshape(3, 4)
    check(lambda X: np.pad(X, 1)[1:-1, :-2] * X + X[:, ::-1], (X, X * 2.0, X[::-1].copy()))


def test_an_n_d_result_keeps_its_shape():
    g = check(lambda x: np.exp(x.reshape(2, 7)))
    with np.errstate(all="ignore"):
        value, J = g(SPECIAL)
    assert value.shape == (2, 7) and J.shape == (14, 14)


# ---------------------------------------------------------------- writes

def _assembled(x):
    R = np.zeros(14, like=x)
    R[1:-1] = x[:-2] * x[2:]
    R[0] = x[3] * 2.0
    R[-1] = 1.5
    return R


def _two_d(x):
    U = np.zeros((4, 5), like=x)
    U[1:-1, 1:-1] = x[:6].reshape(2, 3) ** 2
    U[0] = x[5:10]
    U[:, 0] = np.exp(x[10:14])
    return U


def _loop(x):
    F = np.empty(14, like=x)
    for i in range(14):
        F[i] = x[i] * x[13 - i]
    return F


def _columns(x):
    # (more runs than an assembly keeps, then more pieces than it gathers one by one)
    F = np.zeros((70, 3), like=x)
    F[:, 1] = np.concatenate([x] * 5)
    for i in range(10):
        F[3 * i:3 * i + 2, 0] = x[i:i + 2] * float(i)
    return F.ravel()


def _many_pieces(x):
    F = np.zeros(14, like=x)
    for i in range(10):
        F[np.array([i, (i + 3) % 14])] = x[i:i + 2] ** 2
    return F


@pytest.mark.parametrize("f", [
    _assembled, _two_d, _loop, _columns, _many_pieces,
    lambda x: (lambda F: (F.__setitem__(0, x[1]), F)[1])(np.exp(x)),     # into a result
    lambda x: (lambda F: (F.__setitem__(slice(2, 9), x[:7] * 3.0), F * 2.0)[1])(x ** 2),
    lambda x: (lambda F: (F.__setitem__(np.array([4, -1, 2]), x[:3]), F)[1])(x.copy()),
    lambda x: (lambda F: (F.__setitem__([0, 3], np.array([1.0, 2.0])), F)[1])(np.sin(x)),
    lambda x: (lambda F: (F.__setitem__(slice(1, 9), x[0]), F)[1])(np.ones(14, like=x)),
    lambda x: (lambda F: (F.__setitem__(slice(3, 5), x[1:3]),
                          F.__setitem__(slice(2, 7), x[7:12]), F)[2])(np.full(14, 2.0, like=x)),
    lambda x: (lambda F: (F.__setitem__(slice(1, None), F[:-1] * x[1:]), F)[1])(x * 2.0),
    lambda x: (lambda F: (F.__setitem__(0, 0.0), F[np.array([0, 5, 5])])[1])(np.cos(x)),
    lambda x: (lambda F: (F.__setitem__(1, x[0]), F > 0, F.__setitem__(2, x[5]), F)[3])(x * 1.0),
    lambda x: (lambda F: (F.__setitem__(1, x[0]), F[3:], F.__setitem__(4, x[5]), F)[3])(x * 1.0),
    lambda x: (lambda F: (F.__setitem__(Ellipsis, x[::-1]), F + x)[1])(np.zeros(14, like=x)),
    lambda x: (lambda F: (F.__setitem__((slice(None), 0), x[:7]), F.T * x[7:].reshape(1, 7))[1])(
        x.reshape(7, 2).copy()),
    lambda x: (lambda F: (F.__iadd__(x[::-1]), F.__imul__(2.0), F.__isub__(x), F)[3])(
        np.exp(x)),
], ids=["slices and ints", "2-d blocks, rows and columns", "a loop of elements",
        "more runs and pieces", "many pieces by index arrays", "into a result",
        "into a square", "by an index array", "by a list, of constants", "a number broadcast",
        "overlapping", "from itself", "gathered from", "compared before more writes",
        "read before more writes", "the whole", "a column of a copy", "in place"])
def test_writes_are_recorded(f):
    check(f)


def test_a_write_into_the_argument_leaves_it_alone():
    x = np.linspace(-1.0, 1.0, 14)
    before = x.copy()

    def f(x):
        x[2:5] = x[:3] ** 2
        return x * 2.0
    check(f, (x,) * 3)
    assert np.array_equal(x, before)


def _fluxes(x):
    F = np.zeros(14, like=x)
    flux = x[1:] * x[:-1]
    F[:-1] += flux
    F[1:] -= flux
    F[0] = x[0]
    return F


def _through_views(x):
    F = x * 1.0
    top = F.reshape(2, 7)[0]
    top[1:] = np.exp(x[8:])        # a write through a view of a view
    G = F.reshape(7, 2).T
    G[1] = G[0] * 2.0              # the transposed view: columns of F
    return F * top[0] + G[0, 3]


def _views_seen(x):
    F = np.ones(14, like=x)
    v = F[2:]
    w = F.reshape(2, 7)[:, 1:]
    F[3:6] = x[:3] ** 2            # seen through v and w
    v[0] = x[4]                    # seen through F and w
    return v * w.ravel()[:12] + F[2:] * 0.5


def _fluxes_2d(x):
    u = x.reshape(2, 7)
    F = np.zeros((2, 7), like=x)
    flux = (u[:, 1:] - u[:, :-1]) * (u[:, 1:] + u[:, :-1])
    F[:, :-1] += flux
    F[:, 1:] -= flux
    F[:, 0] = u[:, 0]
    return F


def test_fluxes_written_in_place_are_recorded():
    # (a merge of terms that meet at some of their places: cut where they do)
    check(_fluxes)
    check(_fluxes_2d)


@pytest.mark.parametrize("f", [
    _through_views, _views_seen,
    lambda x: (lambda F: (F.reshape(2, 7).__setitem__(0, x[:7]), F)[1])(x * 1.0),
    lambda x: (lambda F, v: (F.__setitem__(0, x[0]), v * 2.0)[1])(*(lambda F: (F, F[1:]))(x * 1.0)),
    lambda x: (lambda F: (F[1:].__iadd__(x[:-1]), F)[1])(x * 1.0),
    lambda x: (lambda F: (F[::-2].__setitem__(slice(1, 3), x[:2]), F[5:] > 0, F)[2])(x * 1.0),
    lambda x: (lambda F: (F[3:].__setitem__(0, x[1]), F[np.array([3, 4])])[1])(np.exp(x)),
], ids=["through views", "views seen", "a reshape's row", "a view read after",
        "in place, a view", "reversed, compared", "gathered after"])
def test_writes_through_views_are_recorded(f):
    check(f)


@pytest.mark.parametrize("f", [
    lambda x: (lambda F: (F.__setitem__(x > 0, 1.0), F)[1])(x * 1.0),         # by a mask
])
def test_writes_not_recorded_go_the_eager_way(f):
    check(f, recorded=False)


def test_a_write_into_a_plain_array_is_the_eager_way_s_error():
    def f(x):
        F = np.zeros(14)
        F[0] = x[0]
        return F
    for trace in (True, False):
        with pytest.raises(TypeError, match="like=x"):
            sparsegrad.value_and_jacobian(f, trace=trace)(SPECIAL)


# ---------------------------------------------------------------- places met twice

LONG = np.concatenate([np.linspace(-3.0, 3.0, 300), SPECIAL, np.linspace(1.0, 2.0, 100)])


@pytest.mark.parametrize("f", [
    lambda x: np.diff(np.exp(x), 2) * 3.0 - np.diff(x)[1:],
    lambda x: (lambda y: y[1:] * x[2:] - y[:-1] / (1.0 + x[:-2] ** 2))(x[1:] - x[:-1]),
    lambda x: np.where(x[1:] > 0, x[1:] - x[:-1], x[1:] * x[:-1]) + x[:-1],
    lambda x: x[::2][1:] * 2.0 + x[1::2][:-1] + x[::2][:-1] * x[1::2][1:],
], ids=["differences", "fluxes", "a branch between", "strided"])
def test_places_met_twice_sum_as_the_eager_way(f):
    check(f, (LONG, LONG[::-1] * 0.5, np.zeros(len(LONG))))


def test_terms_met_alike_are_summed_in_the_program():
    from sparsegrad import _trace
    g = check(lambda x: np.diff(np.sin(x), 2), (LONG,))
    with np.errstate(all="ignore"):
        g(LONG)
    programs = [p for variants in _trace._programs.values() for p in variants
                if p.shape == (len(LONG) - 2, len(LONG))]
    assert programs and all(len(p.adds) == 0 for p in programs)


def test_reads_numpy_makes_no_view_for_leave_an_assembly_as_it_is():
    # (the eager way takes an empty or 0-d read of a written value by its rows,
    # without assembling it: the rounding of later operations follows)
    def f(x):
        F = x.reshape(2, 7) * 1.0
        F[-1, ::3] = np.sin(x[[3, 0, 5]] * 2.0)
        F[2:2]
        F[1, 3]
        return (1.0 + F * F) ** 0.5 + F[0, 1]
    check(f)
    check(lambda x: (lambda F: (F.__setitem__(slice(2, 5), x[:3] ** 2), F[5:5], F * 3.0)[2])(
        x * 1.0))


def test_an_empty_slice_is_not_a_view_of_a_written_value():
    # (numpy makes a new array of an empty slice: no write reaches it, and the
    # eager way reads no Jacobian for it again)
    def f(x):
        F = x * 2.0
        F[1:4] = x[5:8] ** 2
        empty = F[3:3]
        F[0] = x[9]
        return np.concatenate([F, empty]) * 1.5
    check(f)


def test_many_temporary_views_then_a_write():
    # (the views a loop makes and drops are let go of during the call; the
    # live ones still see the write)
    def f(x):
        F = x * 2.0
        kept = F[2:]
        total = 0.0
        for k in range(600):
            total = total + F[k % 5:][0]
        F[3] = x[0] ** 2
        return kept * total
    check(f)


def test_a_0d_view_sees_a_later_write():
    # (numpy's reshape to () of one element is a 0-d view, not a number)
    def f(x):
        v1 = np.reshape(x, ())
        v2 = x[0::1]
        v2 *= 2.0
        return np.concatenate([np.ravel(v1), v2.reshape(-1), x - x])
    point = np.array([-0.93])
    check(f, (point, point * 1.45, point))
    assert point[0] == -0.93


def test_a_write_through_a_0d_view():
    def f(x):
        F = x * 1.0
        corner = F[:1].reshape(())
        corner[...] = x[1] ** 2
        return F * 3.0 + corner
    check(f)


def test_an_array_of_a_0d_value_has_vector_partials():
    # (the eager way multiplies the partials of a (1, 1, 1) value out in their
    # order, as vectors: (d * c1) * c2, not d * (c1 * c2))
    def f(x):
        v2 = np.reshape(x.reshape(()), (1, 1, 1))
        v4 = np.sin(np.sqrt(1.5 + v2 * v2))
        return np.ravel(v4 + v4)
    check(f, (np.array([-1.343]), np.array([0.3]), np.array([2.5])))


@pytest.mark.parametrize("read", [lambda c: c.reshape(1), lambda c: np.broadcast_to(c, (2,))])
def test_a_view_of_a_0d_view_sees_a_write_into_the_base(read):
    def f(x):
        F = x * 2.0
        seen = read(F[:1].reshape(()))
        F[0] = x[1] ** 2
        return np.concatenate([seen * 3.0, F])
    check(f)
