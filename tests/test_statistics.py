"""numpy's statistics and order-statistics functions on forward values.

Each case checks that the value equals numpy's own result exactly (shape, dtype,
bits) and that the Jacobian equals central differences (complex-step
differences for the complex-safe ones); further tests cover NaN entries, ties,
``initial=``/``where=``, the ndarray methods and the refusals.
"""
import zlib

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import sparsegrad
from sparsegrad import forward
from sparsegrad.testing import numerical_jacobian

TOL = {"complex": dict(rtol=1e-12, atol=1e-13), "central": dict(rtol=1e-6, atol=1e-7)}


def _x(shape, *key):
    """Random input away from 0, with both signs and without ties."""
    rng = np.random.default_rng(zlib.crc32(repr((shape,) + key).encode()))
    size = int(np.prod(shape))
    values = np.linspace(0.3, 2.0, size) + 0.0123
    values[::2] *= -1
    return rng.permutation(values).reshape(shape)


def _dense(fv):
    d = fv.dvalue
    return d.toarray() if hasattr(d, "toarray") else np.asarray(d).reshape(1, -1)


def check(f, x, method="central"):
    """``f(seed(x))``: numpy's value exactly, the numerical Jacobian."""
    x = np.asarray(x, dtype=float)
    expected = f(x.copy())
    fv = f(forward.seed(x))
    assert isinstance(fv, forward.value), type(fv)
    assert fv.value.shape == np.shape(expected)
    assert fv.value.dtype == np.asarray(expected).dtype
    assert_array_equal(fv.value, expected)
    reference = numerical_jacobian(f, x.copy(), method=method)
    assert_allclose(_dense(fv), np.reshape(reference, (fv.value.size, x.size)),
                    **TOL[method])
    return fv


CASES = {
    "sort": (lambda x: np.sort(x), "complex"),
    "sort-axis0": (lambda x: np.sort(x, axis=0), "complex"),
    "sort-none": (lambda x: np.sort(x, axis=None), "complex"),
    "sort-kind": (lambda x: np.sort(x, kind="mergesort"), "complex"),
    "median": (lambda x: np.median(x), "central"),
    "median-axis": (lambda x: np.median(x, axis=-1), "central"),
    "median-keepdims": (lambda x: np.median(x, axis=0, keepdims=True), "central"),
    "percentile": (lambda x: np.percentile(x, 37.5), "central"),
    "percentile-q": (lambda x: np.percentile(x, [0, 10, 50, 90, 100], axis=-1), "central"),
    "percentile-keepdims": (lambda x: np.percentile(x, [20, 70], axis=0, keepdims=True),
                            "central"),
    "quantile": (lambda x: np.quantile(x, 0.3), "central"),
    "quantile-axes": (lambda x: np.quantile(x, [0.25, 0.8], axis=(0, -1)), "central"),
    "var": (lambda x: np.var(x), "central"),
    "var-axis-ddof": (lambda x: np.var(x, axis=0, ddof=1), "central"),
    "var-keepdims": (lambda x: np.var(x, axis=-1, keepdims=True), "central"),
    "std": (lambda x: np.std(x), "central"),
    "std-axis-ddof": (lambda x: np.std(x, axis=-1, ddof=1, keepdims=True), "central"),
    "average": (lambda x: np.average(x), "complex"),
    "average-weights": (lambda x: np.average(x, axis=-1, weights=np.arange(1.0, 1.0
                                                                          + x.shape[-1])),
                        "complex"),
    "average-weights-full": (lambda x: np.average(x, axis=0, weights=np.cos(
        np.arange(x.size)).reshape(x.shape) + 2), "complex"),
    "average-forward-weights": (lambda x: np.average(x, weights=x * x + 1), "complex"),
    "ptp": (lambda x: np.ptp(x), "central"),
    "ptp-axis": (lambda x: np.ptp(x, axis=-1, keepdims=True), "central"),
    "nansum": (lambda x: np.nansum(x, axis=0), "complex"),
    "nanmean": (lambda x: np.nanmean(x, axis=-1), "complex"),
    "nanmax": (lambda x: np.nanmax(x, axis=-1), "central"),
    "nanmin": (lambda x: np.nanmin(x), "central"),
    "nanvar": (lambda x: np.nanvar(x, axis=0, ddof=1), "central"),
    "nanstd": (lambda x: np.nanstd(x, axis=-1, keepdims=True), "central"),
    "nanmedian": (lambda x: np.nanmedian(x, axis=-1), "central"),
    "nanprod": (lambda x: np.nanprod(x, axis=-1), "complex"),
    "nancumsum": (lambda x: np.nancumsum(x, axis=0), "complex"),
    "nanpercentile": (lambda x: np.nanpercentile(x, [15, 85], axis=-1), "central"),
    "nanquantile": (lambda x: np.nanquantile(x, 0.4), "central"),
    "max-initial": (lambda x: np.max(x, axis=-1, initial=0.5), "central"),
    "min-initial": (lambda x: np.min(x, axis=0, initial=-0.5, keepdims=True), "central"),
    "max-where": (lambda x: np.max(x, axis=-1, initial=-5.0,
                                   where=np.arange(x.shape[-1]) % 2 == 0), "central"),
    "sum-where": (lambda x: np.sum(x, axis=0, where=np.arange(x.shape[-1]) % 3 != 1),
                  "complex"),
    "mean-where": (lambda x: np.mean(x, axis=-1, where=np.arange(x.shape[-1]) > 0),
                   "complex"),
    "round": (lambda x: np.round(x, 1), "central"),
    "around": (lambda x: np.around(x), "central"),
}

SHAPES = [(5,), (4, 3), (2, 3, 4)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_value_and_jacobian(name, shape):
    f, method = CASES[name]
    if name == "quantile-axes" and len(shape) < 2:
        pytest.skip("two axes")
    check(f, _x(shape, name), method)


def test_round_has_zero_derivative_and_numpys_value():
    x0 = np.array([0.26, -1.74, 2.5, 3.5])
    fv = np.round(forward.seed(x0), 1)
    assert_array_equal(fv.value, np.round(x0, 1))
    assert fv.dvalue.nnz == 0 or not fv.dvalue.toarray().any()
    assert_array_equal(forward.seed(x0).round().value, np.round(x0))


def test_zero_d_results_and_inputs():
    x0 = _x((6,), "zero-d")
    for f in (np.median, lambda x: np.percentile(x, 40), np.var, np.std, np.ptp,
              np.nansum, np.nanmedian, lambda x: np.quantile(x, 0.9)):
        fv = check(f, x0)
        assert fv.value.ndim == 0
    zero_d = forward.seed(np.array(1.5))
    assert np.median(zero_d).value == 1.5
    assert np.median(zero_d).dvalue == 1.0
    assert np.var(zero_d).value == 0.0


def test_order_statistics_of_values_with_nan():
    x0 = np.array([[3.0, np.nan, 1.0, 2.0], [0.5, 4.0, -1.0, 2.0]])
    x = forward.seed(x0)
    for f in (lambda x: np.median(x, axis=1), lambda x: np.percentile(x, 30, axis=1),
              lambda x: np.max(x, axis=1)):
        fv = f(x)
        assert_array_equal(fv.value, f(x0))
        # a slice with NaN: the NaN's own row, as np.max's
        assert_array_equal(_dense(fv)[0], np.eye(8)[1])
    med = np.median(x, axis=1)
    assert_array_equal(_dense(med)[1], [0, 0, 0, 0, 0.5, 0, 0, 0.5])


@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_nan_functions_give_zero_derivative_to_nan_entries():
    x0 = np.array([[3.0, np.nan, 1.0, 2.0], [np.nan, np.nan, np.nan, np.nan]])
    x = forward.seed(x0)
    with pytest.warns(RuntimeWarning):
        expected = np.nanmean(x0, axis=1)
        fv = np.nanmean(x, axis=1)
    assert_array_equal(fv.value, expected)
    assert_array_equal(_dense(fv), [[1 / 3, 0, 1 / 3, 1 / 3, 0, 0, 0, 0], [0] * 8])
    assert_array_equal(_dense(np.nansum(x, axis=1)), [[1, 0, 1, 1, 0, 0, 0, 0], [0] * 8])
    for function in (np.nanmax, np.nanmin, np.nanmedian, np.nanvar, np.nanstd):
        with pytest.warns(RuntimeWarning):
            expected = function(x0, axis=1)
            fv = function(x, axis=1)
        assert_array_equal(fv.value, expected)
        assert np.isnan(fv.value[1]) and not _dense(fv)[1].any(), function
        assert not _dense(fv)[0, [1, 4, 5, 6, 7]].any(), function
    assert_array_equal(_dense(np.nanmax(x, axis=1))[0], np.eye(8)[0])
    assert_array_equal(_dense(np.nanmedian(x, axis=1))[0], np.eye(8)[3])
    prod = np.nanprod(x, axis=1)
    assert_array_equal(prod.value, np.nanprod(x0, axis=1))
    assert_array_equal(_dense(prod)[0], [2, 0, 6, 3, 0, 0, 0, 0])
    cum = np.nancumsum(x[0])
    assert_array_equal(cum.value, np.nancumsum(x0[0]))
    assert_array_equal(_dense(cum), [[1, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0],
                                     [1, 0, 1, 0, 0, 0, 0, 0], [1, 0, 1, 1, 0, 0, 0, 0]])


def test_ties_take_the_row_of_the_stable_order():
    x0 = np.array([2.0, 1.0, 2.0, 1.0])
    s = np.sort(forward.seed(x0))
    assert_array_equal(s.value, [1, 1, 2, 2])
    assert_array_equal(_dense(s), np.eye(4)[[1, 3, 0, 2]])
    med = np.median(forward.seed(np.array([1.0, 3.0, 2.0, 2.0, 0.0])))
    assert_array_equal(_dense(med), [[0, 0, 1, 0, 0]])


def test_max_min_initial_and_where():
    x0 = np.array([[1.0, 5.0, 3.0], [0.2, 0.1, 0.3]])
    x = forward.seed(x0)
    fv = np.max(x, axis=1, initial=2.0)
    assert_array_equal(fv.value, [5.0, 2.0])
    assert_array_equal(_dense(fv), [[0, 1, 0, 0, 0, 0], [0] * 6])
    tie = np.max(x, axis=1, initial=5.0)  # (a tie goes to the element)
    assert_array_equal(_dense(tie)[0], [0, 1, 0, 0, 0, 0])
    where = np.array([True, False, True])
    fv = np.min(x, axis=1, initial=0.25, where=where)
    assert_array_equal(fv.value, np.min(x0, axis=1, initial=0.25, where=where))
    assert_array_equal(_dense(fv), [[0] * 6, [0, 0, 0, 1, 0, 0]])
    empty = np.max(forward.seed(np.zeros((2, 0))), axis=1, initial=-1.0)
    assert_array_equal(empty.value, [-1.0, -1.0])
    assert not _dense(empty).any()
    with pytest.raises(ValueError):  # numpy's: where= without initial=
        np.max(x, where=where)
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="numpy.max"):
        np.max(x, initial=x[0, 0])


def test_sum_and_mean_where():
    x0 = _x((3, 4), "where")
    where = np.arange(12).reshape(3, 4) % 5 != 1
    for axis in (None, 0, 1):
        for function in (np.sum, np.mean):
            fv = function(forward.seed(x0), axis=axis, where=where)
            assert_array_equal(fv.value, function(x0, axis=axis, where=where))
            ref = numerical_jacobian(lambda z: function(z, axis=axis, where=where), x0)
            assert_allclose(_dense(fv), ref.reshape(fv.value.size, -1), rtol=1e-12,
                            atol=1e-13)
    # a slice without elements: numpy's NaN, a NaN derivative as the mean of an empty axis
    with pytest.warns(RuntimeWarning):
        fv = np.mean(forward.seed(x0), axis=1, where=np.array([[True], [False], [True]]))
    with np.errstate(invalid="ignore"):  # (0 * inf: the reference kernels compute it)
        dense = _dense(fv)
    assert np.isnan(fv.value[1]) and np.isnan(dense[1, 4:8]).all()


def test_average_returned():
    x0 = _x((3, 4), "returned")
    w = np.arange(1.0, 5.0)
    avg, scl = np.average(forward.seed(x0), axis=1, weights=w, returned=True)
    e_avg, e_scl = np.average(x0, axis=1, weights=w, returned=True)
    assert_array_equal(avg.value, e_avg)
    assert isinstance(scl, np.ndarray) and not isinstance(scl, forward.value)
    assert_array_equal(scl, e_scl)
    avg, scl = np.average(forward.seed(x0), returned=True)
    assert_array_equal(avg.value, np.average(x0)) and scl == x0.size
    x = forward.seed(x0[0])
    avg, scl = np.average(x0[0], weights=x + 3, returned=True)
    assert_array_equal(scl.value, np.average(x0[0], weights=x0[0] + 3, returned=True)[1])
    assert_array_equal(_dense(scl), [[1, 1, 1, 1]])


def test_float32_values_keep_numpys_dtype():
    x0 = _x((4, 3), "f32").astype(np.float32)
    x = forward.seed(x0)
    for f in (np.median, lambda z: np.percentile(z, 30, axis=0), np.std,
              lambda z: np.var(z, axis=1), np.nanmean, np.sort, np.ptp):
        fv = f(x)
        expected = f(x0)
        assert fv.value.dtype == np.asarray(expected).dtype
        assert_array_equal(fv.value, expected)


def test_refusals_name_the_function_and_argument():
    x = forward.seed(_x((5,), "refuse"))
    for name, call in (("numpy.percentile", lambda: np.percentile(x, 50, method="nearest")),
                       ("numpy.quantile", lambda: np.quantile(x, 0.5, method="lower")),
                       ("numpy.nanpercentile",
                        lambda: np.nanpercentile(x, 50, method="midpoint")),
                       ("numpy.quantile", lambda: np.quantile(x, 0.5, weights=np.ones(5))),
                       ("numpy.quantile", lambda: np.quantile(x, x[0])),
                       ("numpy.median", lambda: np.median(x, out=np.zeros(()))),
                       ("numpy.sort", lambda: np.sort(x, order="a")),
                       ("numpy.var", lambda: np.var(x, where=np.ones(5, bool))),
                       ("numpy.std", lambda: np.std(x, mean=np.zeros(()))),
                       ("numpy.round", lambda: np.round(x, out=np.zeros(5)))):
        with pytest.raises(sparsegrad.UnsupportedOperationError, match=name):
            call()
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="method='nearest'"):
        np.percentile(x, 50, method="nearest")


def test_methods_of_forward_values():
    x0 = _x((3, 4), "methods")
    x = forward.seed(x0)
    assert_array_equal(x.std(axis=0).value, x0.std(axis=0))
    assert_array_equal(x.var(ddof=1).value, x0.var(ddof=1))
    assert_array_equal(x.clip(-1, 1).value, x0.clip(-1, 1))
    assert_array_equal(x.round(1).value, x0.round(1))
    assert x.any() == x0.any() and (x.all(axis=1) == x0.all(axis=1)).all()
    assert x.item(5) == x0.item(5) and type(x.item(5)) is float
    assert forward.seed(np.array(2.5)).item() == 2.5
    assert_allclose(_dense(x.std()), numerical_jacobian(np.std, x0, method="central").reshape(1, -1),
                    rtol=1e-6, atol=1e-7)


def test_tolist_holds_forward_elements():
    x0 = _x((2, 3), "tolist")
    x = forward.seed(x0)
    listed = x.tolist()
    assert len(listed) == 2 and len(listed[0]) == 3
    assert all(isinstance(e, forward.value) and e.ndim == 0 for row in listed for e in row)
    assert listed[1][2].value == x0[1, 2]
    assert_array_equal(_dense(listed[1][2]), np.eye(6)[[5]])
    stacked = np.array(listed)
    assert stacked.shape == (2, 3) and isinstance(stacked.flat[0], forward.value)
    zero_d = forward.seed(np.array(1.0))
    assert zero_d.tolist() is zero_d


def test_sort_in_place_through_a_view_reaches_the_base():
    x0 = np.array([5.0, 3.0, 4.0, 1.0, 2.0, 0.0])
    base0 = x0.copy()
    base0[1:5].sort()
    base = forward.seed(x0) * 1.0
    view = base[1:5]
    assert view.sort() is None
    assert_array_equal(base.value, base0)
    assert_array_equal(view.value, base0[1:5])
    assert_array_equal(_dense(base), np.eye(6)[[0, 3, 4, 1, 2, 5]])
    assert_array_equal(x0, [5.0, 3.0, 4.0, 1.0, 2.0, 0.0])  # (the user's array)
    grid0 = _x((3, 4), "sort-view")
    expected = grid0.copy()
    expected.T.sort(axis=1)
    grid = forward.seed(grid0) + 0.0
    grid.T.sort(axis=1)
    assert_array_equal(grid.value, expected)
    ref = numerical_jacobian(lambda z: np.sort(z, axis=0), grid0, method="complex")
    assert_allclose(_dense(grid), ref.reshape(12, 12), rtol=1e-12, atol=1e-13)


def test_flat_reads_and_writes():
    x0 = _x((3, 4), "flat")
    x = forward.seed(x0)
    for key in (5, -1, slice(2, 9, 3), [0, 11, 4], np.arange(12) % 5 == 0):
        got = x.flat[key]
        assert_array_equal(got.value, x0.flat[key])
        assert_array_equal(_dense(got).reshape(np.size(x0.flat[key]), 12),
                           np.eye(12)[np.arange(12)[key]].reshape(-1, 12))
    assert len(x.flat) == 12
    assert [e.value for e in x.flat] == list(x0.flat)
    # writes go through numpy's aliasing, into a view's base too
    y = forward.seed(x0) * 1.0
    expected = x0.copy()
    expected.T.flat[[1, 6]] = 7.0
    y.T.flat[[1, 6]] = 7.0
    assert_array_equal(y.value, expected)
    z = forward.seed(x0) * 2.0
    piece = z.flat[2:4]
    piece[0] = 0.0  # (a copy, as numpy's: z unchanged)
    assert z.value[0, 2] == 2.0 * x0[0, 2]
    z.flat[2:4] = z.flat[0:2] * 3.0
    assert_array_equal(z.value.ravel()[2:4], 6.0 * x0.ravel()[0:2])
    assert_array_equal(_dense(z)[2:4], 6.0 * np.eye(12)[0:2])
    z.flat = 1.0
    assert_array_equal(z.value, np.ones((3, 4)))
    assert not _dense(z).any()
    with pytest.raises(ValueError):  # (numpy would repeat the two new elements)
        z.flat[0:4] = np.array([1.0, 2.0])
    zero_d = forward.seed(np.array(2.0)) * 3.0
    assert zero_d.flat[0].value == 6.0 and zero_d.flat[[0]].shape == (1,)


def test_forward_only_import_registers_them():
    import subprocess
    import sys
    code = ("from sparsegrad import forward; import numpy as np; "
            "print(np.median(forward.seed(np.arange(3.0))).value)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "1.0"


def test_sparsity_pattern_does_not_depend_on_the_values():
    # which element an order statistic takes depends on the values: its pattern
    # is the whole line's, as np.max's
    def f(x):
        return np.concatenate([np.sort(x.reshape(2, 4), axis=0).ravel(),
                               np.atleast_1d(np.median(x[:4])),
                               np.percentile(x[4:], [30, 70]),
                               np.atleast_1d(np.nanquantile(x, 0.5))])
    pattern = sparsegrad.sparsity(f, np.arange(8.0)).toarray()
    lines = np.kron(np.ones((2, 2), bool), np.eye(4, dtype=bool))
    expected = np.vstack([lines, np.r_[[1] * 4, [0] * 4], np.r_[[0] * 4, [1] * 4],
                          np.r_[[0] * 4, [1] * 4], np.ones(8)]).astype(bool)
    assert_array_equal(pattern, expected)
    for seed in range(3):
        x0 = np.random.default_rng(seed).normal(size=8)
        J = sparsegrad.jacobian(f)(x0)
        assert J.nnz == expected.sum()
        assert_allclose(J.toarray(), numerical_jacobian(f, x0, method="central"),
                        rtol=1e-6, atol=1e-7)
