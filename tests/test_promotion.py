"""Result dtypes follow numpy's promotion, in every operator and ufunc with ``out=``.

Each operation on forward values is compared with the same operation on the
plain counterparts of its operands: an n-d forward value's is its array, a
0-d forward value's the numpy scalar of its value (0-d forward values are
scalar-like: their in-place operators rebind, as a numpy scalar's do, where a
0-d array would be written in place).  The result's dtype and value must be
numpy's, and where numpy raises (a casting error of an in-place operation,
an operator without a loop for the dtypes) sparsegrad raises an exception of
the same kind.  A plain array cannot hold a derivative: an in-place operation
into one with a forward operand raises ``TypeError``.
"""
import itertools
import operator
import warnings

import numpy as np
import pytest

from sparsegrad import forward

FORWARD_DTYPES = [np.float32, np.float64, np.longdouble, np.complex64, np.complex128,
                  np.clongdouble]
NUMBER_DTYPES = [np.bool_, np.int8, np.uint8, np.int64, np.float16, np.float32, np.float64,
                 np.longdouble, np.complex64, np.complex128, np.clongdouble]
OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul,
             "/": operator.truediv, "**": operator.pow, "//": operator.floordiv,
             "%": operator.mod}
IN_PLACE = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
            "/=": operator.itruediv, "**=": operator.ipow, "//=": operator.ifloordiv,
            "%=": operator.imod}
OUT_UFUNCS = [np.add, np.subtract, np.multiply, np.divide, np.power, np.floor_divide,
              np.remainder, np.maximum, np.fmin, np.arctan2, np.hypot, np.copysign]
UNARY_OUT_UFUNCS = [np.negative, np.exp, np.sqrt, np.absolute, np.floor, np.square]
SEED = np.array([1.5, 2.5, 0.75])


def _name(dtype):
    return np.dtype(dtype).name


#: the seed every forward operand comes from (forward values of different seeds
#: cannot be mixed); never written into: each operand is a copy (``astype``)
X = forward.seed(SEED)


def _forward(dtype, ndim):
    """A fresh forward value of ``dtype``, n-d or 0-d."""
    return (X if ndim else X[2]).astype(dtype)


def _plain(x):
    """The plain counterpart of an operand: a 0-d forward value's numpy scalar."""
    if isinstance(x, forward.value):
        array = x.value.copy()
        return array[()] if array.ndim == 0 else array
    return x.copy() if isinstance(x, np.ndarray) else x


def _operands():
    """``(label, make)`` of every kind of operand; ``make()`` gives a fresh one."""
    yield "int", lambda: 2
    yield "float", lambda: 0.5
    yield "complex", lambda: 0.5 + 0.25j
    for dtype in NUMBER_DTYPES:
        one = np.True_ if dtype is np.bool_ else dtype(2)
        yield "scalar " + _name(dtype), lambda one=one: one
        yield "0-d " + _name(dtype), lambda one=one: np.array(one)
        yield "n-d " + _name(dtype), lambda dtype=dtype: (
            np.array([True, False, True]) if dtype is np.bool_
            else np.array([2, 3, 1], dtype=dtype))
    for dtype, ndim in itertools.product(FORWARD_DTYPES, (0, 1)):
        yield "forward %d-d %s" % (ndim, _name(dtype)), \
            lambda dtype=dtype, ndim=ndim: _forward(dtype, ndim)


OPERANDS = list(_operands())
TARGETS = [pytest.param(dtype, ndim, id="%d-d %s" % (ndim, _name(dtype)))
           for dtype in FORWARD_DTYPES for ndim in (0, 1)]


def _outcome(compute):
    """``(result, exception)`` of ``compute()``, numpy's warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            try:
                return compute(), None
            except Exception as error:  # (compared with numpy's below)
                return None, error


def _family(error):
    for kind in (TypeError, ValueError, ZeroDivisionError, ArithmeticError):
        if isinstance(error, kind):
            return kind
    return type(error)


def _difference(ours, numpys):
    """What differs between two outcomes, or None."""
    (result, error), (expected, expected_error) = ours, numpys
    if expected_error is not None or error is not None:
        if expected_error is None or error is None or (
                _family(error) is not _family(expected_error)):
            return "raised %r, numpy %r" % (error, expected_error)
        return None
    if not isinstance(result, forward.value):
        return "a %s, not a forward value" % type(result).__name__
    value, expected = result.value, np.asarray(expected)
    if value.dtype != expected.dtype or value.shape != expected.shape:
        return "%s %s, numpy %s %s" % (value.dtype, value.shape, expected.dtype,
                                       expected.shape)
    if not np.array_equal(value, expected, equal_nan=True):
        return "value %s, numpy %s" % (value, expected)
    return None


def _assert_all_as_numpy(cases):
    """``cases``: ``(label, ours, numpy's)`` pairs of computations."""
    differences = []
    for label, ours, numpys in cases:
        difference = _difference(_outcome(ours), _outcome(numpys))
        if difference is not None:
            differences.append("%s: %s" % (label, difference))
    assert not differences, "\n".join(differences[:20] + ["(%d in all)" % len(differences)])


@pytest.mark.parametrize("dtype, ndim", TARGETS)
@pytest.mark.parametrize("symbol", OPERATORS)
def test_operators(symbol, dtype, ndim):
    function = OPERATORS[symbol]

    def cases():
        for label, make in OPERANDS:
            yield ("x %s %s" % (symbol, label),
                   lambda: function(_forward(dtype, ndim), make()),
                   lambda: function(_plain(_forward(dtype, ndim)), _plain(make())))
            yield ("%s %s x" % (label, symbol),
                   lambda: function(make(), _forward(dtype, ndim)),
                   lambda: function(_plain(make()), _plain(_forward(dtype, ndim))))
    _assert_all_as_numpy(cases())


@pytest.mark.parametrize("dtype, ndim", TARGETS)
@pytest.mark.parametrize("symbol", IN_PLACE)
def test_in_place_operators_into_forward_values(symbol, dtype, ndim):
    # an n-d target keeps its dtype (or numpy's casting error); a 0-d one rebinds
    function = IN_PLACE[symbol]

    def cases():
        for label, make in OPERANDS:
            yield ("x %s %s" % (symbol, label),
                   lambda: function(_forward(dtype, ndim), make()),
                   lambda: function(_plain(_forward(dtype, ndim)), _plain(make())))
    _assert_all_as_numpy(cases())


@pytest.mark.parametrize("dtype, ndim", TARGETS)
@pytest.mark.parametrize("symbol", IN_PLACE)
def test_in_place_operators_with_a_forward_operand(symbol, dtype, ndim):
    function = IN_PLACE[symbol]
    cases = []
    for label, make in OPERANDS:
        if isinstance(make(), forward.value):
            continue  # (forward targets: the test above)
        if isinstance(make(), np.ndarray):
            # a plain array cannot hold the derivative: refused, never dropped
            with pytest.raises(TypeError, match="plain"):
                function(make(), _forward(dtype, ndim))
            continue
        # a Python or numpy scalar is rebound to the (forward) result
        cases.append(("%s %s x" % (label, symbol),
                      lambda make=make: function(make(), _forward(dtype, ndim)),
                      lambda make=make: function(make(), _plain(_forward(dtype, ndim)))))
    _assert_all_as_numpy(cases)


def _out_target(x):
    """The plain counterpart of an ``out=`` target: an array (numpy takes no scalar
    there), written in place in its own dtype."""
    return np.array(x.value)


@pytest.mark.parametrize("dtype, ndim", TARGETS)
@pytest.mark.parametrize("ufunc", OUT_UFUNCS, ids=lambda u: u.__name__)
def test_binary_ufuncs_with_out(ufunc, dtype, ndim):
    def ours(make, order):
        target = _forward(dtype, ndim)
        arguments = {"first": (target, make()), "second": (make(), target),
                     "neither": (make(), make())}[order]
        result = ufunc(*arguments, out=target)
        assert result is target
        return target

    def numpys(make, order):
        target = _out_target(_forward(dtype, ndim))
        arguments = {"first": (target, _plain(make())), "second": (_plain(make()), target),
                     "neither": (_plain(make()), _plain(make()))}[order]
        ufunc(*arguments, out=target)
        return target

    _assert_all_as_numpy(
        ("%s(%s) with x as out= and the %s argument" % (ufunc.__name__, label, order),
         lambda make=make, order=order: ours(make, order),
         lambda make=make, order=order: numpys(make, order))
        for (label, make), order in itertools.product(OPERANDS, ("first", "second",
                                                                  "neither")))


@pytest.mark.parametrize("dtype, ndim", TARGETS)
@pytest.mark.parametrize("ufunc", UNARY_OUT_UFUNCS, ids=lambda u: u.__name__)
def test_unary_ufuncs_with_out(ufunc, dtype, ndim):
    def ours(make):
        target = _forward(dtype, ndim)
        assert ufunc(make(), out=target) is target
        return target

    def numpys(make):
        target = _out_target(_forward(dtype, ndim))
        ufunc(_plain(make()), out=target)
        return target

    _assert_all_as_numpy(("%s(%s, out=x)" % (ufunc.__name__, label),
                          lambda make=make: ours(make), lambda make=make: numpys(make))
                         for label, make in OPERANDS)


def test_a_0d_float32_value_plus_equal_a_0d_float64_array_is_float64():
    # as a numpy scalar: np.float32(1) += np.array(2.0) rebinds to a float64 scalar
    x = forward.seed(np.array([1.0, 2.0], dtype=np.float32))
    s = x[0] * 1
    t = s
    s += np.array(2.0)
    assert s.dtype == np.float64 and s.value == 3.0
    np.testing.assert_array_equal(s.dvalue.toarray(), [[1.0, 0.0]])
    assert s.dvalue.dtype == np.float64
    assert t.dtype == np.float32 and t.value == 1.0  # rebound, not written into
    # an n-d value and a 0-d view are arrays: written in place, in their dtype
    v = x * 1
    v += np.array(2.0)
    assert v.dtype == np.float32
    F = np.zeros(2, like=x).astype(np.float32)
    view = F[0, ...]
    view += x[1] * np.float64(2.0)
    assert view.dtype == np.float32 and F.value[0] == 4.0
    np.testing.assert_array_equal(F.dvalue.toarray(), [[0.0, 2.0], [0.0, 0.0]])
    with pytest.raises(TypeError):
        v += 1j                               # numpy: no complex into float32


def test_in_place_into_an_integer_value_is_numpys_casting_error():
    k = forward.seed(np.array([0.5, 1.5, 2.0])).astype(np.int64)
    with pytest.raises(TypeError):
        k += 0.5
    with pytest.raises(TypeError):
        np.add(k, 0.5, out=k)
    k += 2
    assert k.dtype == np.int64
    np.testing.assert_array_equal(k.value, [2, 3, 4])


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.complex128, np.clongdouble],
                         ids=_name)
@pytest.mark.parametrize("exponent", [0.5, -1, 2, 0.5000001, np.float64(0.5), np.int64(-1)],
                         ids=repr)
def test_power_by_numpys_shortcuts(exponent, dtype):
    # numpy's a ** 0.5, a ** -1 and a ** 2 of an array are sqrt, reciprocal and
    # square (a rounding apart from power for complex values); not of a scalar
    x0 = (np.array([1.5, 2.5, 0.75]) * (1 + 0.3j if np.dtype(dtype).kind == "c" else 1)
          ).astype(dtype)
    x = forward.seed(x0)
    np.testing.assert_array_equal((x ** exponent).value, x0 ** exponent)
    y = x * 1
    y **= exponent
    expected = x0.copy()
    expected **= exponent
    np.testing.assert_array_equal(y.value, expected)
    np.testing.assert_array_equal((x[1] ** exponent).value, x0[1] ** exponent)
    np.testing.assert_allclose(y.dvalue.diagonal(), exponent * x0 ** (exponent - 1),
                               rtol=10 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=_name)
def test_power_of_scalars_is_numpys_scalar_arithmetic(dtype):
    # between numpy scalars ``**`` calls the C library's pow, which on AVX-512
    # differs in the last bit from the ufunc's loop that 0-d arrays take
    x0 = np.random.default_rng(3).uniform(0.1, 3.0, 400).astype(dtype)
    x = forward.seed(x0)
    for i in range(len(x0)):
        for got, expected in [(x[i] ** 1.5, x0[i] ** 1.5),
                              (np.sum(x[i:i + 2]) ** 2.5, np.sum(x0[i:i + 2]) ** 2.5),
                              (1.25 ** x[i], 1.25 ** x0[i]),
                              (x[i] ** np.float64(0.7), x0[i] ** np.float64(0.7))]:
            assert got.value.dtype == np.asarray(expected).dtype
            assert got.value == expected
    # (a 0-d array is not a scalar: its operator is the ufunc)
    view = x[:1].reshape(())
    np.testing.assert_array_equal((view ** 1.5).value, np.power(x0[:1].reshape(()), 1.5))
    J = (x[3] ** 1.5).dvalue.toarray()
    np.testing.assert_allclose(J[0, 3], 1.5 * np.sqrt(x0[3]), rtol=4 * np.finfo(dtype).eps)
