"""Recorded evaluation (``trace=True``, ``sparsegrad._trace``) and its kernel.

Every recorded value and Jacobian is checked against the eager way's
(``forward.seed``) bit for bit: pattern, data (inf and nan too) and value;
the rules and the random programs also against central differences.  The
path checks are exercised by changing branches, index arrays (in place too),
scalars and shapes between calls.  ``run_program`` runs the same cases
compiled and as its numpy reference.  ``tests/test_trace_parity.py`` goes
through every rule, operand and special value.
"""
import logging

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import sparsegrad
from sparsegrad import _fast, _trace
from sparsegrad._fast import reference
from sparsegrad.testing import numerical_jacobian

OPS = {name: number for number, name in enumerate(reference.PROGRAM_OPS)}


def eager(f, x, *args):
    return sparsegrad.value_and_jacobian(f, trace=False)(x, *args)


def canonical(J):
    """``J`` as CSR with sorted indices (a copy)."""
    J = J.tocsr(copy=True)
    J.sort_indices()
    return J


def assert_same_as_eager(f, x, value, J, *args):
    """The recorded ``value, J`` are the eager way's bit for bit."""
    with np.errstate(all="ignore"):
        expected_value, expected = eager(f, x, *args)
    assert value.shape == expected_value.shape and value.dtype == expected_value.dtype
    assert np.array_equal(value, expected_value, equal_nan=True)
    assert J.shape == expected.shape and J.dtype == expected.dtype
    J, expected = canonical(J), canonical(expected)
    np.testing.assert_array_equal(J.indptr, expected.indptr)
    np.testing.assert_array_equal(J.indices, expected.indices)
    assert np.array_equal(J.data, expected.data, equal_nan=True), (J.data, expected.data)


def recorded(f, x, *args):
    g = sparsegrad.value_and_jacobian(f, trace=True)
    value, J = g(x, *args)
    return g, value, J


# ---------------------------------------------------------------- rules

POSITIVE = np.linspace(0.3, 1.7, 9)

UNARY = {
    "negative": np.negative, "positive": np.positive, "exp": np.exp, "expm1": np.expm1,
    "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "square": np.square, "reciprocal": np.reciprocal,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_rules(name):
    ufunc = UNARY[name]

    def f(x):
        return ufunc(x[1:] * x[:-1]) + x[1:]

    g, value, J = recorded(f, POSITIVE)
    assert g.cache_info().misses == 1 and g.cache_info().fallbacks == 0
    assert_same_as_eager(f, POSITIVE, value, J)
    reference_J = numerical_jacobian(f, POSITIVE, method="central")
    np.testing.assert_allclose(J.toarray(), reference_J, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1, 1, 2.5, 0])
def test_power_by_constants(exponent):
    def f(x):
        return (x[::2] + 0.5) ** exponent - x[1::2] ** 2

    x = POSITIVE[:8]
    g, value, J = recorded(f, x)
    assert_same_as_eager(f, x, value, J)
    np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, x, method="central"),
                               rtol=1e-6, atol=1e-8)


CONSTANT = np.linspace(-2.0, 3.0, 8)


@pytest.mark.parametrize("expression", [
    lambda x: x * 2.5, lambda x: 2.5 * x, lambda x: x / 3, lambda x: 3 / x,
    lambda x: x + 1.5, lambda x: 1.5 - x, lambda x: x - CONSTANT, lambda x: CONSTANT - x,
    lambda x: CONSTANT * x, lambda x: x / CONSTANT, lambda x: CONSTANT / x,
    lambda x: np.float64(2) * x + np.int64(3), lambda x: -(-(x * -2.0)) / -4.0,
    lambda x: x * x - x / x + x ** 2, lambda x: (x - x) * 3.0,
    lambda x: np.concatenate([x[:3] - 1.0, CONSTANT[:2], x[3:] * 2.0]),
    lambda x: np.roll(x, 1) - 2 * x + np.roll(x, -1),
    lambda x: np.where(x > 1.0, x ** 2, -x),
    lambda x: np.where((x > 0.5) & ~(x > 1.4), np.exp(x), 2.0) * x,
    lambda x: np.where(CONSTANT > 0, x, x[::-1]) + (x < 1.0) * x,
    lambda x: np.where(x != x[::-1], x, x),
    lambda x: np.roll(x[1:] * x[:-1], 3) + np.roll(x, 0)[1:] + np.roll(x, np.int64(-9))[:-1],
])
def test_operands_constants_and_signs(expression):
    x = POSITIVE[:8]
    g, value, J = recorded(expression, x)
    assert g.cache_info().fallbacks == 0
    assert_same_as_eager(expression, x, value, J)


# ---------------------------------------------------------------- random programs

UNARY_SAFE = ["negative", "exp", "sin", "cos", "tanh", "square"]
BINARY = [np.add, np.subtract, np.multiply]


def random_program(seed, scale=1):
    """A random function of a 1-d x: ufuncs, slices, gathers (negative and
    repeated indices too), concatenations and constants (``x`` of 3 to 8 times
    ``scale`` elements)."""
    rng = np.random.default_rng(seed)
    steps = []
    lengths = [int(rng.integers(3, 9)) * scale]
    n = lengths[0]
    for _ in range(int(rng.integers(2, 12))):
        kind = rng.choice(["unary", "binary", "scalar", "slice", "gather", "concat", "divide",
                           "where"])
        a = int(rng.integers(len(lengths)))
        m = lengths[a]
        if kind == "unary":
            steps.append(("unary", a, str(rng.choice(UNARY_SAFE))))
        elif kind == "where":
            same = [i for i, k in enumerate(lengths) if k == m]
            steps.append(("where", a, int(rng.choice(same)), float(rng.normal())))
        elif kind in ("binary", "divide"):
            same = [i for i, k in enumerate(lengths) if k == m]
            steps.append((kind, a, int(rng.choice(same)), int(rng.integers(len(BINARY)))))
        elif kind == "scalar":
            steps.append(("scalar", a, float(rng.normal()), bool(rng.integers(2))))
        elif kind == "slice":
            start, stop = sorted(rng.integers(0, m + 1, 2))
            step = int(rng.choice([1, 1, 2, -1]))
            if step < 0:
                start, stop = stop - 1, (start - 1 if start > 0 else None)
            m = len(range(m)[slice(start, stop, step)])
            if m == 0:
                continue
            steps.append(("slice", a, slice(start, stop, step)))
        elif kind == "gather":
            k = int(rng.integers(1, 2 * m + 1))
            index = rng.integers(-m, m, k)
            steps.append(("gather", a, index))
            m = k
        else:
            b = int(rng.integers(len(lengths)))
            constant = rng.normal(size=int(rng.integers(0, 3)))
            steps.append(("concat", a, b, constant))
            m = lengths[a] + lengths[b] + len(constant)
        lengths.append(m)

    def f(x):
        values = [x]
        for step in steps:
            kind, a = step[0], values[step[1]]
            if kind == "unary":
                values.append(getattr(np, step[2])(a))
            elif kind == "binary":
                values.append(BINARY[step[3]](a, values[step[2]]))
            elif kind == "divide":
                values.append(a / (2.0 + np.sin(values[step[2]])))
            elif kind == "where":
                values.append(np.where(a > step[3], np.cos(a), values[step[2]] * a))
            elif kind == "scalar":
                values.append(a * step[2] if step[3] else step[2] - a)
            elif kind == "slice":
                values.append(a[step[2]])
            elif kind == "gather":
                values.append(a[step[2]])
            else:
                values.append(np.concatenate([a, step[3], values[step[2]]]))
        return np.concatenate(values[1:]) if len(values) > 1 else x * 1.0

    return f, n


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 31))
def test_random_programs_against_the_eager_way(seed):
    f, n = random_program(seed)
    x0 = np.random.default_rng(seed).normal(size=n)
    g = sparsegrad.value_and_jacobian(f, trace=True)
    for x in (x0, x0 * 1.1 + 0.3, x0 - 0.7):
        value, J = g(x)
        assert_same_as_eager(f, x, value, J)
    info = g.cache_info()
    if info.fallbacks:
        # (np.where of a value whose terms the eager way merged, a
        # concatenation's: its rounding there depends on the merged values;
        # or a merge that would sum at some rows only: refused)
        assert info.fallbacks == 3 and any(
            reason in g.cache_info.__self__.refused
            for reason in ("merged", "a merge of terms that meet at some of their places"))
        return
    # (compiled once, or found among the programs other calls compiled)
    assert info.misses + info.hits == 3 and info.misses <= 1 and info.fallbacks == 0
    # (the program's ops are complex-safe: the complex step is exact to
    # rounding; both sum the same terms in other orders, and where terms of
    # 1e28 cancel to a few of 1e28 the rounding shows at 1e-10 of the entry)
    reference_J = numerical_jacobian(f, x, method="complex")
    np.testing.assert_allclose(J.toarray(), reference_J, rtol=1e-9,
                               atol=1e-12 * max(1.0, np.abs(reference_J).max()))


# ---------------------------------------------------------------- the path checks

def test_where_drops_the_other_branch_as_the_eager_way_does():
    # sqrt and its derivative are nan below 0, 1 / x is inf at 0: the rows of
    # the other branch must not reach the Jacobian (no 0 * nan)
    f = lambda x: np.where(x > 0.0, np.sqrt(x), 1.0 / x) + np.where(x != 0.0, x, np.log(x))
    x = np.array([-1.0, 0.0, 0.5, 2.0, -3.0])
    with np.errstate(all="ignore"):
        g, value, J = recorded(f, x)
        assert g.cache_info().fallbacks == 0
        assert_same_as_eager(f, x, value, J)
    assert np.isfinite(J.data[np.isfinite(J.data)]).all() and np.isfinite(J[2:4].data).all()


def test_a_changed_branch_compiles_again_and_both_paths_stay():
    calls = []

    def f(x, sharp):
        calls.append(sharp)
        if sharp:
            return np.exp(x[1:]) - x[:-1] ** 3
        return np.sin(x[::-1]) * x

    g = sparsegrad.value_and_jacobian(f, trace=True)
    x = POSITIVE
    for sharp in (False, True, False, True, True):
        value, J = g(x, sharp)
        assert_same_as_eager(f, x, value, J, sharp)
    info = g.cache_info()
    assert info.misses == 2 and info.hits == 3 and info.programs == 2
    # a call on another path than the last call's ran the function again where
    # the values its program reads had not been kept (at most calls 2, 3 and
    # 4); the others once; and assert_same_as_eager once each
    assert 5 + 5 <= len(calls) <= 5 + 3 + 5


def test_an_index_array_written_in_place_is_caught():
    index = np.array([2, 0, 1, 3])

    def f(x):
        return x[index] * x

    g = sparsegrad.value_and_jacobian(f, trace=True)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    value, J = g(x)
    index[:] = [3, 3, 0, 1]               # in place: same array, same shape
    value, J = g(x)
    assert_same_as_eager(f, x, value, J)
    assert g.cache_info().misses == 2
    index_copy = index.copy()             # another array of the same numbers: found
    index = index_copy
    value, J = g(x)
    assert_same_as_eager(f, x, value, J)
    assert g.cache_info().hits == 1


def test_scalars_are_read_at_every_call():
    scale = {"c": 2.0}

    def f(x):
        return scale["c"] * x ** 2 - x[::-1] / scale["c"]

    g = sparsegrad.value_and_jacobian(f, trace=True)
    for c in (2.0, -3.0, 0.5):
        scale["c"] = c
        value, J = g(POSITIVE)
        assert_same_as_eager(f, POSITIVE, value, J)
    assert g.cache_info().misses == 1 and g.cache_info().hits == 2


def test_a_new_shape_compiles_again():
    f = lambda x: np.exp(x[1:]) * x[:-1]
    g = sparsegrad.value_and_jacobian(f, trace=True)
    for n in (5, 7, 5):
        x = np.linspace(0, 1, n)
        value, J = g(x)
        assert_same_as_eager(f, x, value, J)
    assert g.cache_info().misses == 2 and g.cache_info().hits == 1


def test_matrices_share_a_read_only_pattern():
    f = lambda x: np.exp(x[1:]) * x[:-1] - x[1:] * x[:-1]
    g = sparsegrad.jacobian(f, trace=True)
    J1, J2 = g(POSITIVE), g(POSITIVE * 2.0)
    assert np.shares_memory(J1.indices, J2.indices)
    assert np.shares_memory(J1.indptr, J2.indptr)
    assert not J1.indices.flags.writeable and not J1.indptr.flags.writeable
    assert J1.data is not J2.data and J1.data.flags.writeable
    J1.data[:] = 0.0                       # a matrix's values are its own
    np.testing.assert_array_equal(J2.toarray(), g(POSITIVE * 2.0).toarray())
    J1.sort_indices()
    J1.sum_duplicates()                    # (canonical already: nothing to write)
    with pytest.raises(ValueError, match="read-only"):
        J1.eliminate_zeros()               # a change of the pattern in place: loud
    J3 = g(np.where(POSITIVE > 1.0, POSITIVE, 0.0))   # (stored zeros in the pattern)
    copy = J3.copy()
    copy.eliminate_zeros()
    assert copy.nnz < J3.nnz


def test_programs_are_bounded_and_cleared():
    f = lambda x: x[1:] * x[:-1]
    g = sparsegrad.value_and_jacobian(f, trace=True)
    for n in range(3, 6 + _trace.MAX_STRUCTURES):
        g(np.ones(n))
    info = g.cache_info()
    assert info.programs == _trace.MAX_STRUCTURES and info.nbytes > 0
    g.cache_clear()
    assert g.cache_info() == _trace.RecorderInfo(0, 0, 0, 0, 0)
    # and by the structure cache's byte limit (the newest program kept)
    previous = sparsegrad.structure_cache_limit()
    try:
        sparsegrad.structure_cache_limit(1)
        for n in range(3, 6):
            g(np.ones(n))
        assert g.cache_info().programs == 1
        value, J = g(np.ones(4))
        assert_same_as_eager(f, np.ones(4), value, J)
    finally:
        sparsegrad.structure_cache_limit(previous)


# ---------------------------------------------------------------- what goes the eager way

@pytest.mark.parametrize("f", [
    lambda x: np.sum(x) * x,                        # another numpy function
    lambda x: (x.reshape(2, -1).sum(axis=0) * 2.0),  # a reduction
    lambda x: np.heaviside(x, 0.5) * x,             # a ufunc without a derivative rule
    lambda x: np.roll(x, 1.5),                      # a roll by other than an integer
    lambda x: np.where(x, x, 0.0),                  # a condition that is not a mask
    lambda x: x[x > 1.0],                           # a read by a mask
    lambda x: x[np.array([True, False] * 4)],       # a boolean mask
    lambda x: np.ones(8),                           # a result without x
])
def test_what_the_recorder_does_not_take_goes_the_eager_way(f):
    x = POSITIVE[:8]
    g = sparsegrad.value_and_jacobian(f, trace=True)
    for _ in range(2):
        value, J = g(x)
        assert_same_as_eager(f, x, value, J)
    info = g.cache_info()
    assert info.fallbacks == 2 and info.programs == 0


def test_a_method_of_ndarrays_goes_the_eager_way_once_refused():
    calls = []

    def f(x):
        calls.append(1)
        return x.cumsum() * 2.0 + x

    g = sparsegrad.value_and_jacobian(f, trace=True)
    for _ in range(3):
        value, J = g(POSITIVE)
        assert_same_as_eager(f, POSITIVE, value, J)
    # (refused at the first call: later calls do not try the light values
    # again): once on light values, three times the eager way, three checks
    assert len(calls) == 1 + 3 + 3
    assert "cumsum" in g.cache_info.__self__.refused


def test_an_error_only_light_values_raise_refuses_the_function():
    calls = []

    def f(x):
        calls.append(type(x).__name__)
        if type(x).__name__ == "Traced":
            raise RuntimeError("not for light values")
        return x * 2.0

    g = sparsegrad.value_and_jacobian(f, trace=True)
    for _ in range(3):
        g(POSITIVE)
    assert calls.count("Traced") == 1
    assert "RuntimeError" in g.cache_info.__self__.refused


def test_the_reason_is_kept():
    recorder = _trace.Recorder()
    assert recorder.value_and_jacobian(lambda x: np.cumsum(x), POSITIVE, (), {}) is None
    assert "cumsum" in recorder.refused


def test_errors_of_the_function_are_the_eager_ways():
    g = sparsegrad.value_and_jacobian(lambda x: x[np.array([0, 99])], trace=True)
    with pytest.raises(IndexError):
        g(POSITIVE)
    g = sparsegrad.jacobian(lambda x: x + "a", trace=True)
    with pytest.raises(TypeError):
        g(POSITIVE)


def test_arguments_formats_and_the_seed_untouched():
    f = lambda t, y, k=1.0: k * t * y ** 2
    y = np.array([1.0, 3.0])
    before = y.copy()
    J = sparsegrad.jacobian(f, argnums=1, trace=True, format="array")
    for _ in range(2):
        out = J(2.0, y, k=0.5)
        assert type(out).__name__ == "csr_array"
        np.testing.assert_array_equal(out.toarray(), [[2.0, 0.0], [0.0, 6.0]])
    assert J.cache_info().hits == 1
    np.testing.assert_array_equal(y, before)
    dense = sparsegrad.value_and_jacobian(lambda x: x * x, trace=True, format="dense")
    np.testing.assert_array_equal(dense(y)[1], [[2.0, 0.0], [0.0, 6.0]])
    # not a float64 array: the eager way, nothing recorded, and why
    g = sparsegrad.value_and_jacobian(lambda x: x * x, trace=True)
    g([1.0, 2.0])
    g(np.ones(3, dtype=np.float32))
    info = g.cache_info()
    assert (info.hits, info.misses, info.fallbacks, info.programs) == (0, 0, 2, 0)
    assert info.reason == ("argument 0 is a ndarray of dtype float32 and shape (3,), not a "
                           "float64 ndarray of 1 or more dimensions")
    g(np.ones((2, 2)))                       # (not refused: recorded)
    info = g.cache_info()
    assert info.hits + info.misses == 1 and info.reason is None


# ---------------------------------------------------------------- the default engine

def test_recorded_by_default_and_eager_on_request():
    f = lambda x: np.exp(x[1:]) * x[:-1]
    J = sparsegrad.jacobian(f)
    for _ in range(2):
        J(POSITIVE)
    assert (J.cache_info().misses, J.cache_info().hits) in ((1, 1), (0, 2))
    g = sparsegrad.value_and_jacobian(f)
    value, matrix = g(POSITIVE)
    assert_same_as_eager(f, POSITIVE, value, matrix)
    assert not hasattr(sparsegrad.jacobian(f, trace=False), "cache_info")


def test_why_a_call_went_the_eager_way_is_public(caplog):
    g = sparsegrad.value_and_jacobian(lambda x: x.reshape(3, -1).sum(axis=0))
    # (a reduction: not recorded)
    with caplog.at_level(logging.DEBUG, logger="sparsegrad"):
        g(POSITIVE)
        g(POSITIVE)
    info = g.cache_info()
    assert info.fallbacks == 2 and info.reason == "the attribute 'sum'"
    assert [r.getMessage().endswith("not recorded: the attribute 'sum'")
            for r in caplog.records] == [True, True]
    h = sparsegrad.jacobian(lambda x, y: x * y, argnums=(0, 1))
    h(POSITIVE, POSITIVE)
    assert h.cache_info().reason == "several arguments differentiated (argnums=(0, 1))"


def test_programs_are_kept_by_structure_across_functions(monkeypatch):
    compiled = []

    def counting(tape, node):
        compiled.append(node)
        return _trace.compile_tape.__wrapped__(tape, node)

    counting.__wrapped__ = _trace.compile_tape
    monkeypatch.setattr(_trace, "compile_tape", counting)
    sparsegrad.clear_structure_cache()

    def step(u_old, dt):
        # (a new closure at every step, as a time stepper makes)
        return lambda u: u - u_old - dt * (u[np.r_[1:len(u), 0]] - u) ** 2

    u = POSITIVE
    for _ in range(3):
        u = sparsegrad.optimize.newton(step(u, 0.01), u, tol=1e-12).x
    assert len(compiled) == 1
    # a function's own programs are forgotten by its cache_clear, every
    # program by clear_structure_cache
    g = sparsegrad.value_and_jacobian(step(u, 0.01))
    g(u)
    assert g.cache_info().programs == 1 and len(compiled) == 1
    sparsegrad.clear_structure_cache()
    g(u)
    assert len(compiled) == 2
    g.cache_clear()
    assert g.cache_info().programs == 0
    g(u)
    assert len(compiled) == 3


@pytest.mark.parametrize("f", [
    lambda x: np.sinh(x[::-1])[:4] * np.exp(x[::-2]),
    lambda x: np.cos(np.flip(x.reshape(2, 4), 0)) ** 2.5,
    lambda x: np.tanh(x)[::-1] + np.log(x[::-1]),
])
def test_partials_are_computed_in_ascending_order(monkeypatch, f):
    """numpy rounds a function of an operand of negative stride by its scalar
    loop and of any other by its SIMD loop (different in the last bit on
    AVX-512), and a program computes on contiguous rows: both engines hand the
    rules of the table operands of no negative stride."""
    strides = []

    def watched(rule):
        def partial(*args):
            strides.extend(a.strides for a in args if type(a) is np.ndarray)
            return rule(*args)
        return partial

    for ufunc in (np.sinh, np.cos, np.tanh, np.log, np.power):
        rules = sparsegrad._ufunc_rules.DERIVATIVES[ufunc]
        monkeypatch.setitem(sparsegrad._ufunc_rules.DERIVATIVES, ufunc,
                            tuple(watched(r) if callable(r) else r for r in rules))
    x = np.linspace(0.2, 0.9, 8)
    for trace in (False, True):
        g = sparsegrad.value_and_jacobian(f, trace=trace)
        for _ in range(2):
            value, J = g(x)
    assert_same_as_eager(f, x, value, J)
    assert strides and min(min(s, default=0) for s in strides) >= 0


@pytest.mark.parametrize("f", [
    lambda x: x[3] ** 1.5 + x,                     # a numpy scalar: the C library's pow
    lambda x: x[3:4].reshape(()) ** 1.5 + x,       # a 0-d array: the ufunc's loop
    lambda x: x[..., 3] ** 2.5 - x,
    lambda x: (x[0] * x[1]) ** 0.5 * x,
])
def test_power_of_0d_values_as_numpys(f):
    """numpy's ``**`` of a scalar is its scalar arithmetic, of a 0-d array the
    ufunc (a rounding apart on AVX-512): both engines give numpy's value."""
    g = sparsegrad.value_and_jacobian(f)
    for x in np.random.default_rng(5).uniform(0.1, 3.0, (60, 6)):
        value, J = g(x)
        np.testing.assert_array_equal(value, f(x))
        assert_same_as_eager(f, x, value, J)
    assert g.cache_info().fallbacks == 0


def test_benchmark_problems_recorded():
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from asv_benchmarks import problems
    for key, n in (("sw", 6), ("pb", 20)):
        F, x0 = problems.get(key).setup(n)
        g = sparsegrad.value_and_jacobian(F, trace=True)
        for x in (x0, x0 * 1.01):
            value, J = g(x)
            assert_same_as_eager(F, x, value, J)
        assert g.cache_info().hits == 1 and g.cache_info().fallbacks == 0


# ---------------------------------------------------------------- run_program

def test_threads_give_the_same_bits():
    n = 70000                              # (two parts from 2**16 rows on)
    f = lambda x: np.exp(x[1:]) * x[:-1] - np.sin(x[::-1][1:])
    x = np.linspace(0.0, 1.0, n)
    g = sparsegrad.value_and_jacobian(f, trace=True)
    previous = sparsegrad.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            sparsegrad.set_num_threads(threads)
            results.append(g(x)[1])
    finally:
        sparsegrad.set_num_threads(previous)
    np.testing.assert_array_equal(results[0].data, results[1].data)
    assert_same_as_eager(f, x, *g(x))


@pytest.mark.parametrize("seed", range(4))
def test_random_programs_of_two_parts(seed):
    # (from 2**16 rows on, a program runs in two threads, the rows split)
    f, n = random_program(seed, scale=12000)
    x = np.random.default_rng(seed).normal(size=n)
    previous = sparsegrad.get_num_threads()
    try:
        sparsegrad.set_num_threads(2)
        g = sparsegrad.value_and_jacobian(f, trace=True)
        for x in (x, x * 0.9):
            value, J = g(x)
            assert_same_as_eager(f, x, value, J)
    finally:
        sparsegrad.set_num_threads(previous)


def small_program():
    """Two rows of one segment: slot 0 = exp(v[1 - j]), slot 1 = v * 2 (added)."""
    instructions = np.array([(OPS["load"], 0, 0, 0), (OPS["exp"], 1, 0, 0),
                             (OPS["store"], 0, 1, 0), (OPS["scale"], 2, 0, 0),
                             (OPS["store"], 0, 2, 1)], dtype=np.int64)
    segments = np.array([(2, 0, 5, 3, 0, 2)], dtype=np.int64)
    leaves = [(np.array([0.0, 1.0]), None, 1, -1, 0, None)]
    params = np.array([2.0])
    owners = np.zeros(2, dtype=np.uint8)
    adds = np.array([(0, 0, 1, 0), (0, 1, 1, 1)], dtype=np.int64)
    indptr = np.array([0, 1, 2], dtype=np.int32)
    return [instructions, segments, leaves, params, owners, adds, indptr]


@pytest.mark.parametrize("run", [_fast.run_program, reference.run_program])
def test_run_program_small(run):
    np.testing.assert_allclose(run(*small_program()), [np.e + 2.0, 1.0])


@pytest.mark.parametrize("run", [_fast.run_program, reference.run_program])
@pytest.mark.parametrize("op", ["exp", "log", "sin", "cos", "tanh", "power"])
def test_program_functions_round_as_numpy(run, op):
    """A program's functions are numpy's on contiguous arrays, bit for bit, in
    blocks of every length (the C library's ``exp`` or ``pow`` differ from
    numpy's AVX-512 loops in the last bit)."""
    n = 5000
    x = np.random.default_rng(0).uniform(0.05, 3.0, n)
    instructions = np.array([(OPS["load"], 0, 0, 0), (OPS[op], 1, 0, 0),
                             (OPS["store"], 0, 1, 0)], dtype=np.int64)
    segments = np.array([(n, 0, 3, 2, 0, 1)], dtype=np.int64)
    params = np.array([1.5])
    got = run(instructions, segments, [(x, None, 0, 1, 0, None)], params,
              np.zeros(n, dtype=np.uint8), np.zeros((0, 4), dtype=np.int64),
              np.arange(n + 1, dtype=np.int32))
    expected = np.power(x, params[0]) if op == "power" else getattr(np, op)(x)
    np.testing.assert_array_equal(got, expected)


def _broken(position, value):
    args = small_program()
    if isinstance(position, tuple):
        array = args[position[0]].copy()
        array[position[1:]] = value
        args[position[0]] = array
    else:
        args[position] = value
    return args


@pytest.mark.parametrize("run", [_fast.run_program, reference.run_program])
@pytest.mark.parametrize("args, message", [
    (_broken((0, 1, 0), 99), "opcode"),                          # no such opcode
    (_broken((0, 1, 2), 2), "bad field"),                        # reads a buffer not written
    (_broken((0, 1, 1), 0), "bad field"),                        # writes the buffer it reads
    (_broken((0, 4, 3), 0), "bad field"),                        # slot 0 stored twice
    (_broken((1, 0, 5), 3), "stores 2 of its 3 slots"),
    (_broken((1, 0, 0), 3), "does not fit"),                     # more rows than the result
    (_broken(2, [(np.array([0.0, 1.0]), None, 2, -1, 0, None)]), "outside"),
    (_broken(2, [(np.zeros(2), np.array([0, 5]), 0, 1, 0, None)]), "outside"),
    (_broken(2, [(np.zeros(2), np.array([0, 1]), 0, 1, 1, None)]), "outside"),
    (_broken((4, 1), 7), "owned by slot"),
    (_broken(5, np.array([(0, 1, 1, 1), (0, 0, 1, 0)])), "sorted"),
    (_broken(5, np.array([(0, 0, 1, 1)])), "not at a place of its row"),
    (_broken(6, np.array([0, 1, 3], dtype=np.int32)), "owners must be"),
    (_broken(1, np.array([(1, 0, 5, 3, 0, 2), (1, 0, 5, 3, 0, 2)])), "overlap"),
])
def test_run_program_refuses_bad_programs(run, args, message):
    with pytest.raises(ValueError, match=message):
        run(*args)


def test_runs_that_do_not_fit_their_index():
    args = small_program()
    args[2] = [(np.arange(4.0), np.array([3, 0]), 0, 1, 0, np.array([0, 2]))]
    for run in (_fast.run_program, reference.run_program):
        with pytest.raises(ValueError, match="runs do not fit"):
            run(*args)
    # (within the values, the compiled loop trusts the runs it is given)
    args[2] = [(np.arange(4.0), np.array([1, 0]), 0, 1, 0, np.array([0, 2]))]
    with pytest.raises(ValueError, match="runs do not fit"):
        reference.run_program(*args)
    if _fast.run_program is not reference.run_program:
        assert _fast.run_program(*args).shape == (2,)


def test_run_program_by_runs_and_by_rows_agree():
    rng = np.random.default_rng(3)
    values = rng.normal(size=1000)
    index = np.roll(np.arange(1000), 7).astype(np.int64)
    runs = reference.index_runs(index)
    assert runs is not None
    args = small_program()
    n = 900
    args[0] = np.array([(OPS["load"], 0, 0, 0), (OPS["store"], 0, 0, 0)], dtype=np.int64)
    args[1] = np.array([(n, 0, 2, 1, 0, 1)], dtype=np.int64)
    args[4] = np.zeros(n, dtype=np.uint8)
    args[5] = np.zeros((0, 4), dtype=np.int64)
    args[6] = np.arange(n + 1, dtype=np.int64)
    for start, offset in ((0, 0), (50, -7), (99, 0)):
        expected = values[index[start:start + n] + offset]
        for leaf_runs in (None, runs):
            args[2] = [(values, index, start, 1, offset, leaf_runs)]
            np.testing.assert_array_equal(_fast.run_program(*args), expected)
            np.testing.assert_array_equal(reference.run_program(*args), expected)


@pytest.mark.parametrize("name", ["negative", "exp", "log", "sqrt", "sin", "cos", "tanh",
                                  "add", "subtract", "multiply", "divide", "keep",
                                  "power", "scale", "shift", "rdivide", "param"])
def test_every_opcode_against_numpy(name):
    rows = 700                                  # (more than a block)
    values = np.linspace(0.2, 3.0, rows)
    c = 1.7
    numpy = {"negative": lambda a: -a, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
             "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
             "add": lambda a: a + a[::-1], "subtract": lambda a: a - a[::-1],
             "multiply": lambda a: a * a[::-1], "divide": lambda a: a / a[::-1],
             "keep": lambda a: np.where(a[::-1] != 0, a, 0.0),
             "power": lambda a: a ** c, "scale": lambda a: a * c, "shift": lambda a: a + c,
             "rdivide": lambda a: c / a, "param": lambda a: np.full_like(a, c)}[name]
    op = OPS[name]
    load = [(OPS["load"], 0, 0, 0), (OPS["load"], 1, 1, 0)]
    # (a binary op reads buffers 0 and 1; the others buffer 0 or params[0])
    body = [(op, 2, 0, 1 if name in ("add", "subtract", "multiply", "divide", "keep") else 0)]
    instructions = np.array(load + body + [(OPS["store"], 0, 2, 0)], dtype=np.int64)
    args = [instructions, np.array([(rows, 0, len(instructions), 3, 0, 1)], dtype=np.int64),
            [(values, None, 0, 1, 0, None), (values, None, rows - 1, -1, 0, None)],
            np.array([c]), np.zeros(rows, dtype=np.uint8), np.zeros((0, 4), dtype=np.int64),
            np.arange(rows + 1, dtype=np.int32)]
    expected = numpy(values)
    for run in (_fast.run_program, reference.run_program):
        np.testing.assert_allclose(run(*args), expected, rtol=1e-15, atol=0)


def test_newton_with_recorded_jacobians():
    from sparsegrad.optimize import newton
    n = 200
    h = 1.0 / (n + 1)

    def F(u, lam):
        # 1-d Bratu, zero Dirichlet ends
        padded = np.concatenate([np.zeros(1), u, np.zeros(1)])
        return (padded[:-2] - 2 * u + padded[2:]) / h ** 2 + lam * np.exp(u)

    eager = newton(F, np.zeros(n), args=(2.0,))
    traced = newton(F, np.zeros(n), args=(2.0,), trace=True)
    assert eager.success and traced.success
    assert traced.nit == eager.nit and traced.njev == eager.njev
    np.testing.assert_allclose(traced.x, eager.x, rtol=1e-12, atol=1e-14)


def test_structure_keys_hash_once_as_their_tuples():
    from sparsegrad._trace import StructureKey
    plain = ((("seed", (3,)), ("ufunc", np.exp, (("n", 0),))), 1)
    key = StructureKey(plain)
    assert key == plain and hash(key) == hash(plain) and hash(key) == hash(key)
    assert {plain: 1}[key] == 1


def test_alternating_structures_find_their_own_programs():
    g = sparsegrad.value_and_jacobian(lambda x: x[1:] * np.exp(x[:-1]))
    for x in (np.array([1.0, 2.0, 3.0]), np.array([-1.0, 2.0, 3.0, 0.5])) * 3:
        value, J = g(x)
        expected_value, expected = sparsegrad.value_and_jacobian(g.__wrapped__,
                                                                 trace=False)(x)
        np.testing.assert_array_equal(value, expected_value)
        np.testing.assert_array_equal(J.toarray(), expected.toarray())
    info = g.cache_info()
    assert info.hits + info.misses == 6 and info.hits >= 4 and info.fallbacks == 0
    assert info.programs == 2


def test_a_strided_leaf_runs_compiled(monkeypatch):
    """A value the program reads that is a strided view (a broadcast 0-d value,
    stride 0) is copied for the compiled runner, which would otherwise hand
    the whole program to the reference runner (right, but slow)."""
    if sparsegrad.KERNELS != "compiled":
        pytest.skip("the compiled runner")

    def refused(*args):
        raise AssertionError("the reference runner was called")
    monkeypatch.setattr(_fast._reference, "run_program", refused)

    def f(x):
        return np.sin(x) * np.broadcast_to(x[1] * 2.0, x.shape)
    F = sparsegrad.value_and_jacobian(f)
    x = np.linspace(0.1, 0.9, 7)
    for _ in range(2):
        value, J = F(x)
    assert F.cache_info().hits == 1
    np.testing.assert_array_equal(J.toarray(), f(sparsegrad.forward.seed(x)).dvalue.toarray())
