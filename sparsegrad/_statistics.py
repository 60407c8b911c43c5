"""numpy's statistics and order-statistics functions on forward values.

Sorting, medians, percentiles and quantiles (numpy's default
``method="linear"``), variance and standard deviation, weighted averages, the
peak-to-peak range, rounding and the nan-functions.  As everywhere in the
``__array_function__`` table, each value is numpy's own result on the plain
values; the Jacobian comes from a composition of forward operations that
numpy's definition implies:

* **order statistics** gather the elements along the sorted order of the
  plain value (``np.argsort(..., kind="stable")``), then interpolate between
  neighbours with numpy's weights.  The order is locally constant away from
  ties, so the derivative is exact there; at ties it is that of the element
  the stable sort puts at that position (the first of equal elements first).
  A slice holding a NaN, whose order statistics numpy makes NaN, has the
  Jacobian row of the NaN element sorted last;
* **moments** (var, std, average) are the arithmetic of their definition;
* **nan-functions** replace the NaN entries by a constant first (the identity
  of the reduction): an entry numpy ignores has zero derivative, and a result
  numpy makes NaN for a slice without entries to use (all NaN, or fewer than
  ``ddof`` left) has a zero Jacobian row;
* **rounding** is piecewise constant: zero derivative.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.array([3.0, 1.0, 2.0, 4.0]))
>>> np.median(x).dvalue.toarray()
array([[0.5, 0. , 0.5, 0. ]])
"""
import math
import numbers

import numpy as np

from . import _backend
from . import _jacobian as jac
from ._errors import unsupported
from ._functions import implements, _finish, _refuse, _axes
from ._value import value, nvalue, make, cast_input

__all__ = []


def _forward_argument(name, **arguments):
    """Raise for an argument that is a forward value where only a constant is taken."""
    for key, given in arguments.items():
        if isinstance(given, value):
            raise unsupported("numpy." + name, "%s= a forward value (only its value "
                              "would be used: no derivative with respect to it)" % key)


def _lines(a, axis):
    """``a`` with the axes of ``axis`` merged into its last one (the lines the
    reduction runs along), and the shape of the result with keepdims."""
    ndim = np.ndim(nvalue(a))
    axes = _axes(axis, ndim, "axis")
    moved = np.moveaxis(a, axes, tuple(range(ndim - len(axes), ndim)))
    kept = moved.shape[:ndim - len(axes)]
    lines = np.reshape(moved, kept + (math.prod(moved.shape[ndim - len(axes):]),))
    kept_dims = tuple(1 if i in axes else n for i, n in enumerate(np.shape(nvalue(a))))
    return lines, kept, kept_dims


def _kept(keepdims):
    """Whether a ``keepdims=`` argument (numpy's no-value marker: False) keeps them."""
    return keepdims is not np._NoValue and bool(keepdims)


def _without_nan(a, fill):
    """``a`` with its NaN entries replaced by the constant ``fill`` (zero derivative)."""
    return np.where(np.isnan(nvalue(a)), fill, a)


# ---- sorting and order statistics ---------------------------------------------------
def _line_pattern(gathered, a, axis):
    """``gathered`` (elements of the forward ``a`` taken along ``axis``) with the
    pattern of each whole line of ``a`` as structural zeros: which element an order
    statistic takes depends on the values, its pattern must not (``sparsity``)."""
    union = np.broadcast_to(np.sum(a, axis=axis, keepdims=True), gathered.shape)
    return make(gathered._value, jac.add([gathered._jacobian,
                                          jac.structural_zeros(union._jacobian)]))


def _sorted(a, axis):
    """``np.sort(a, axis)``'s Jacobian: ``a`` gathered in the stable order of its value."""
    if axis is None:
        a, axis = np.ravel(a), 0
    order = np.argsort(nvalue(a), axis=axis, kind="stable")
    return _line_pattern(np.take_along_axis(a, order, axis=axis), a, axis)


@implements(np.sort)
def _sort(a, axis=-1, kind=None, order=None, *, stable=None):
    _refuse("sort", order=order)
    # (stable= passed only when given: older numpy and CuPy have no such keyword)
    result = np.sort(nvalue(a), axis=axis, kind=kind,
                     **({} if stable is None else {"stable": stable}))
    return _finish(_sorted(a, axis), result)


def _quantiles(name, a, q, axis, keepdims, result, skip_nan):
    """The forward order statistics at the quantiles ``q`` (in [0, 1]) of ``a``
    by numpy's linear method; ``result`` is numpy's value, ``skip_nan`` whether
    NaN entries are left out (the nan-functions)."""
    if not isinstance(a, value):
        return result
    q = np.asarray(q, dtype=np.float64)
    lines, kept, kept_dims = _lines(a, axis)
    n = lines.shape[-1]
    out_shape = q.shape + (kept_dims if keepdims else kept)
    if n == 0 or q.size == 0:  # (numpy's NaN of an empty slice, or no quantiles)
        return _finish(np.zeros(out_shape, like=a), result)
    ordered = _sorted(lines, -1)
    ordered_values = nvalue(ordered)
    if skip_nan:  # (NaN sorts last: the first count entries of a line are numbers)
        count = n - np.count_nonzero(np.isnan(ordered_values), axis=-1)
    else:
        count = np.full(kept, n)
    # numpy's virtual index (n - 1) q and its neighbours, inside the line
    count = count[..., None]
    virtual = (count - 1) * q.ravel()
    low = np.clip(np.floor(virtual), 0, np.maximum(count - 1, 0)).astype(np.intp)
    gamma = np.where(virtual >= count - 1, 0.0, virtual - low)
    high = np.minimum(low + 1, np.maximum(count - 1, 0))
    if not skip_nan:  # a slice with a NaN: numpy's result is its NaN, sorted last
        has_nan = np.isnan(ordered_values[..., -1:])
        low = np.where(has_nan, n - 1, low)
        high = np.where(has_nan, n - 1, high)
        gamma = np.where(has_nan, 0.0, gamma)
    low_values = np.take_along_axis(ordered, low, axis=-1)
    high_values = np.take_along_axis(ordered, high, axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):  # (only the Jacobian is kept)
        interpolated = low_values * (1.0 - gamma) + high_values * gamma
    interpolated = _line_pattern(interpolated, lines, -1)
    if skip_nan:  # an all-NaN slice: numpy's constant NaN
        interpolated = np.where(count > 0, interpolated, 0.0)
    interpolated = np.reshape(np.moveaxis(interpolated, -1, 0), out_shape)
    return _finish(interpolated, result)


def _checked_method(name, method, weights, interpolation):
    if interpolation is not None:
        raise unsupported("numpy." + name, "the interpolation= argument (deprecated "
                          "by numpy; the default method='linear' is supported)")
    if method != "linear":
        raise unsupported("numpy." + name, "method=%r (only the default method='linear' "
                          "is supported)" % (method,))
    _refuse(name, weights=weights)


def _register_quantile(function, scale, skip_nan):
    """Register ``function`` (``np.percentile`` and friends): ``q`` divided by
    ``scale`` is the quantile in [0, 1]."""
    name = function.__name__

    @implements(function)
    def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                 keepdims=False, *, weights=None, interpolation=None):
        _refuse(name, out=out)
        _checked_method(name, method, weights, interpolation)
        _forward_argument(name, q=q)
        # (overwrite_input is not passed on: it would reorder the forward value's
        # own array; the values do not depend on it)
        result = function(nvalue(a), q, axis=axis, keepdims=keepdims)
        return _quantiles(name, a, np.true_divide(q, scale), axis, keepdims, result,
                          skip_nan)
    quantile.__name__ = "_" + name
    return quantile


for _function, _scale, _skip_nan in ((np.percentile, 100, False),
                                     (np.quantile, 1, False),
                                     (np.nanpercentile, 100, True),
                                     (np.nanquantile, 1, True)):
    _register_quantile(_function, _scale, _skip_nan)


@implements(np.median)
def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _refuse("median", out=out)
    result = np.median(nvalue(a), axis=axis, keepdims=keepdims)
    return _quantiles("median", a, 0.5, axis, keepdims, result, False)


@implements(np.nanmedian)
def _nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=np._NoValue):
    _refuse("nanmedian", out=out)
    result = np.nanmedian(nvalue(a), axis=axis, keepdims=keepdims)
    return _quantiles("nanmedian", a, 0.5, axis, _kept(keepdims), result, True)


@implements(np.ptp)
def _ptp(a, axis=None, out=None, keepdims=False):
    _refuse("ptp", out=out)
    result = np.ptp(nvalue(a), axis=axis, keepdims=keepdims)
    return _finish(np.max(a, axis=axis, keepdims=keepdims)
                   - np.min(a, axis=axis, keepdims=keepdims), result)


# ---- moments ---------------------------------------------------------------------
def _squared_deviations(a, axis, mean=None):
    """``|a - mean(a)|**2`` along ``axis`` (both parts of complex values), or
    from the forward ``mean`` when given."""
    deviations = a - (np.mean(a, axis=axis, keepdims=True) if mean is None else mean)
    if np.iscomplexobj(nvalue(deviations)):
        return np.real(deviations) ** 2 + np.imag(deviations) ** 2
    return deviations * deviations


def _ddof(name, ddof, correction):
    if correction is not np._NoValue:
        if ddof != 0:  # (numpy's refusal: both given)
            raise ValueError("ddof and correction can't be provided simultaneously.")
        return correction
    return ddof


def _variance(name, a, axis, dtype, ddof, keepdims, skip_nan, root):
    """The forward variance, or with ``root`` the standard deviation (only its
    Jacobian is kept by callers)."""
    a = cast_input(a, dtype, "numpy." + name)
    if not skip_nan:
        total = np.sum(_squared_deviations(a, axis), axis=axis, keepdims=keepdims)
        count = math.prod(np.shape(nvalue(a))[i]
                          for i in _axes(axis, np.ndim(nvalue(a)), "axis"))
        # (numpy divides by max(n - ddof, 0): a NaN or inf derivative where it divides by 0)
        variance = total / max(count - ddof, 0)
        return np.sqrt(variance) if root else variance
    numbers_ = ~np.isnan(nvalue(a))
    count = np.sum(numbers_, axis=axis, keepdims=True)
    mean = np.sum(_without_nan(a, 0.0), axis=axis, keepdims=True) / np.maximum(count, 1)
    # (a NaN entry deviates by nothing: it is replaced by the mean)
    total = np.sum(_squared_deviations(np.where(numbers_, a, mean), axis, mean),
                   axis=axis, keepdims=keepdims)
    dof = np.sum(numbers_, axis=axis, keepdims=keepdims) - ddof
    variance = total / np.where(dof > 0, dof, 1)
    # (no degrees of freedom left: numpy's constant NaN)
    return np.where(dof > 0, np.sqrt(variance) if root else variance, 0.0)


def _register_moment(function, root, skip_nan):
    """Register ``function`` (``np.var`` and friends); ``root``: the standard deviation."""
    name = function.__name__

    @implements(function)
    def moment(a, axis=None, dtype=None, out=None, ddof=0, keepdims=np._NoValue, *,
               where=np._NoValue, mean=np._NoValue, correction=np._NoValue):
        _refuse(name, out=out, where=where, mean=mean)
        ddof = _ddof(name, ddof, correction)
        _forward_argument(name, ddof=ddof)
        extra = {} if keepdims is np._NoValue else {"keepdims": keepdims}
        result = function(nvalue(a), axis=axis, dtype=dtype, ddof=ddof, **extra)
        if not isinstance(a, value):
            return result
        with np.errstate(divide="ignore", invalid="ignore"):  # (numpy warned already)
            return _finish(_variance(name, a, axis, dtype, ddof, _kept(keepdims), skip_nan,
                                     root), result)
    moment.__name__ = "_" + name
    return moment


for _function, _root, _skip_nan in ((np.var, False, False), (np.std, True, False),
                                    (np.nanvar, False, True), (np.nanstd, True, True)):
    _register_moment(_function, _root, _skip_nan)


@implements(np.average)
def _average(a, axis=None, weights=None, returned=False, *, keepdims=np._NoValue):
    extra = {} if keepdims is np._NoValue else {"keepdims": keepdims}
    result = np.average(nvalue(a), axis=axis, weights=None if weights is None
                        else nvalue(weights), returned=returned, **extra)
    keep = _kept(keepdims)
    if weights is None:
        mean = np.mean(a, axis=axis, keepdims=keep)
        return (_finish(mean, result[0]), result[1]) if returned else _finish(mean, result)
    a_ndim = np.ndim(nvalue(a))
    if np.ndim(nvalue(weights)) != a_ndim:  # numpy's 1-d weights along ``axis``
        axis_index = np.lib.array_utils.normalize_axis_index(axis, a_ndim)
        weights = np.moveaxis(np.reshape(weights, (-1,) + (1,) * (a_ndim - 1)), 0,
                              axis_index)
    total = np.sum(np.broadcast_to(weights, np.broadcast_shapes(
        np.shape(nvalue(a)), np.shape(nvalue(weights)))), axis=axis, keepdims=keep)
    average = np.sum(a * weights, axis=axis, keepdims=keep) / total
    if not returned:
        return _finish(average, result)
    return _finish(average, result[0]), _finish(np.broadcast_to(total, np.shape(
        result[1])) if isinstance(total, value) else total, result[1])


# ---- rounding ----------------------------------------------------------------------
@implements(np.round, np.around)
def _round(a, decimals=0, out=None):
    _refuse("round", out=out)
    _forward_argument("round", decimals=decimals)
    result = np.round(nvalue(a), decimals)
    if not isinstance(a, value):
        return result
    return make(_backend.asarray(result), jac.zero(a._jacobian.seed, np.size(result)))


# ---- nan-functions: NaN entries replaced by the reduction's identity ------------------
def _register_nan_reduction(function, reduction, fill, **fixed):
    """Register ``function`` (``np.nansum`` and friends) as ``reduction`` of ``a``
    with its NaN entries replaced by ``fill``; numpy's value."""
    name = function.__name__

    @implements(function)
    def nan_reduction(a, *args, **kwargs):
        _refuse(name, out=kwargs.get("out"))
        result = function(nvalue(a), *args, **kwargs)
        if not isinstance(a, value):
            return result
        return _finish(reduction(_without_nan(a, fill), *args, **kwargs), result)
    nan_reduction.__name__ = "_" + name
    return nan_reduction


_register_nan_reduction(np.nansum, np.sum, 0.0)
_register_nan_reduction(np.nanprod, np.prod, 1.0)
_register_nan_reduction(np.nancumsum, np.cumsum, 0.0)
_register_nan_reduction(np.nancumprod, np.cumprod, 1.0)


@implements(np.nanmean)
def _nanmean(a, axis=None, dtype=None, out=None, keepdims=np._NoValue, *,
             where=np._NoValue):
    _refuse("nanmean", out=out, where=where)
    extra = {} if keepdims is np._NoValue else {"keepdims": keepdims}
    result = np.nanmean(nvalue(a), axis=axis, dtype=dtype, **extra)
    a = cast_input(a, dtype, "numpy.nanmean")
    keep = _kept(keepdims)
    count = np.sum(~np.isnan(nvalue(a)), axis=axis, keepdims=keep)
    # (an all-NaN slice: numpy's constant NaN, a zero row)
    return _finish(np.sum(_without_nan(a, 0.0), axis=axis, keepdims=keep)
                   / np.maximum(count, 1), result)


def _register_nan_extremum(function, extremum, fill):
    name = function.__name__

    @implements(function)
    def nan_extremum(a, axis=None, out=None, keepdims=np._NoValue, initial=np._NoValue,
                     where=np._NoValue):
        _refuse(name, out=out)
        given = {k: v for k, v in (("keepdims", keepdims), ("initial", initial),
                                   ("where", where)) if v is not np._NoValue}
        result = function(nvalue(a), axis=axis, **given)
        if not isinstance(a, value):
            return result
        numbers_ = ~np.isnan(nvalue(a))
        # (an all-NaN slice: numpy's constant NaN, a zero row)
        has_number = np.any(numbers_, axis=axis, keepdims=_kept(keepdims))
        selected = extremum(_without_nan(a, fill), axis=axis, **given)
        return _finish(np.where(has_number, selected, 0.0), result)
    nan_extremum.__name__ = "_" + name
    return nan_extremum


_register_nan_extremum(np.nanmax, np.max, -np.inf)
_register_nan_extremum(np.nanmin, np.min, np.inf)
del _function, _scale, _skip_nan, _root
