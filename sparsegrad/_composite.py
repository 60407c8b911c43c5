"""numpy functions on forward values composed of other forward operations.

Each function here is registered in the ``__array_function__`` table of
:mod:`sparsegrad._functions`.  Its value is numpy's own call on the plain
values (so it equals numpy's result exactly); its Jacobian is that of a
composition of forward operations that are already differentiated exactly
(indexing, ``where``, ``concatenate``, ``einsum``, arithmetic, ...), or, for
pure data movement, the rows gathered as the function moves the data.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.array([1.0, 2.0]))
>>> np.kron(np.eye(2), x).dvalue.nnz  # (one entry a row: x's pattern, never dense)
8
"""
import numbers

import numpy as np
import scipy.special

from . import _backend
from ._errors import unsupported
from ._functions import (implements, _move, _single, _finish, _forwards, _viewed,
                         select)
from ._value import value, nvalue, plain, coerce, make

__all__ = ["MAX_DENSE_SIZE", "pad_composed", "PAD_MODES"]

#: the largest matrix (``n x n``) taken by ``numpy.linalg.solve``, ``inv`` and ``det``
MAX_DENSE_SIZE = 8


# ---- data movement -------------------------------------------------------------------
for _function in (np.tril, np.triu, np.resize):
    # (numpy's zeros of tril/triu, and a resize of an empty array, become zero rows)
    _single(_function)


@implements(np.insert)
def _insert(arr, obj, values, axis=None):
    """``numpy.insert``: data movement of ``arr`` and ``values``.

    A forward ``values`` must not be cast to an integer or real result dtype
    (that cast would have a derivative numpy's result does not carry).
    """
    obj = plain(obj)
    result_dtype = np.asarray(plain(arr)).dtype
    if isinstance(values, value) and (result_dtype.kind not in "fc" or (
            result_dtype.kind == "f" and values.dtype.kind == "c")):
        raise unsupported("numpy.insert", "forward values cast to the %s array"
                          % result_dtype)
    return _move(lambda arrays, rows: np.insert(arrays[0], obj, arrays[1], axis),
                 [arr, values])


def _leaves(nested):
    """The arrays of a nested list, depth first (the order numpy.block reads them)."""
    if isinstance(nested, list):
        return [leaf for item in nested for leaf in _leaves(item)]
    return [nested]


def _rebuild(nested, leaves):
    """``nested`` with its leaves taken in order from the iterator ``leaves``."""
    if isinstance(nested, list):
        return [_rebuild(item, leaves) for item in nested]
    return next(leaves)


@implements(np.block)
def _block(arrays):
    """``numpy.block``: data movement of the blocks (nested lists; numpy refuses tuples)."""
    if isinstance(arrays, tuple):  # (numpy's error)
        raise TypeError("arrays is a tuple. Only lists can be used to arrange blocks, "
                        "and np.block does not allow implicit conversion from tuple to "
                        "ndarray.")
    leaves = _leaves(arrays)
    return _move(lambda parts, rows: np.block(_rebuild(arrays, iter(parts))), leaves)


@implements(np.broadcast_arrays)
def _broadcast_arrays(*args, subok=False):
    """``numpy.broadcast_arrays``: each argument broadcast to the common shape.

    An argument already of that shape is returned as it is (as numpy does); the
    others are read-only views (``numpy.broadcast_to``) whose writes raise
    ``ValueError``: numpy's broadcasts only warn, then write the same memory
    element several times, which has no Jacobian.
    """
    shape = np.broadcast_shapes(*(np.shape(plain(a)) for a in args))
    arrays = [a if isinstance(a, value) else np.asarray(a) for a in args]
    return tuple(a if a.shape == shape else np.broadcast_to(a, shape) for a in arrays)


# ---- products ------------------------------------------------------------------------
@implements(np.kron)
def _kron(a, b):
    """``numpy.kron``: an outer product of ``a`` and ``b`` reshaped; each result
    row depends on one element of each operand, so the pattern stays that of
    the forward operands (never densified by a dense constant)."""
    result = np.kron(plain(a), plain(b))
    a, b = coerce(a), coerce(b)
    nd = max(np.ndim(plain(a)), np.ndim(plain(b)))
    sa = (1,) * (nd - np.ndim(plain(a))) + np.shape(plain(a))
    sb = (1,) * (nd - np.ndim(plain(b))) + np.shape(plain(b))
    # interleaved axes: a's axis i at 2i, b's at 2i + 1
    product = (np.reshape(a, tuple(n for s in sa for n in (s, 1)))
               * np.reshape(b, tuple(n for s in sb for n in (1, s))))
    return _finish(np.reshape(product, result.shape), result)


def _last_axis(x, axis):
    return np.moveaxis(coerce(x), axis, -1)


@implements(np.cross)
def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """``numpy.cross`` of 2- and 3-vectors, composed of products of the components."""
    result = np.cross(plain(a), plain(b), axisa, axisb, axisc, axis)
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _last_axis(a, axisa), _last_axis(b, axisb)
    ca = [a[..., i] for i in range(a.shape[-1])]
    cb = [b[..., i] for i in range(b.shape[-1])]
    if len(ca) == len(cb) == 2:
        return _finish(ca[0] * cb[1] - ca[1] * cb[0], result)
    zero = 0.0  # (a 2-vector has a zero third component)
    a0, a1, a2 = ca + [zero] * (3 - len(ca))
    b0, b1, b2 = cb + [zero] * (3 - len(cb))
    # (each component holds a product of a component of a and one of b: the
    # broadcast shape of the two)
    components = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    return _finish(np.moveaxis(np.stack(components, axis=-1), -1, axisc), result)


def _full_convolution(a, v):
    """``numpy.convolve(a, v, "full")`` of 1-d operands, ``len(v) <= len(a)``:
    ``sum_j a[k - j] v[j]``, the shifted copies of ``a`` gathered with one index
    array (``len(a) + len(v) - 1`` by ``len(v)``)."""
    n, m = np.shape(plain(a))[0], np.shape(plain(v))[0]
    padded = np.concatenate([np.zeros(m - 1), a, np.zeros(m - 1)])
    shifts = (np.arange(n + m - 1)[:, None] + (m - 1)) - np.arange(m)[None, :]
    return np.einsum("kj,j->k", padded[shifts], v)


def _convolved(name, a, v, mode, flipped):
    """``numpy.convolve`` (``flipped=False``) or ``numpy.correlate`` of 1-d
    operands, either of them forward, in ``mode`` ``full``, ``same`` or ``valid``."""
    function = getattr(np, name)
    result = function(plain(a), plain(v), mode)
    a, v = coerce(a), coerce(v)
    if np.ndim(plain(a)) != 1 or np.ndim(plain(v)) != 1:
        raise ValueError("%s: the operands must be 1-d" % name)  # (numpy has raised)
    n, m = len(plain(a)), len(plain(v))
    if flipped:  # correlate(a, v) = convolve(a, conj(v)[::-1])
        v = (np.conj(v) if np.iscomplexobj(plain(v)) else v)[::-1]
    full = _full_convolution(a, v) if m <= n else _full_convolution(v, a)
    small = min(n, m)
    if isinstance(mode, str):  # (numpy reads the first letter)
        mode = {"f": "full", "s": "same", "v": "valid"}.get(mode.lower()[:1], mode)
    if mode in (2, "full"):
        start = 0
    elif mode in (1, "same"):
        # (numpy's correlate of a shorter first operand is taken mirrored)
        start = n // 2 if flipped and n < m else (small - 1) - small // 2
    else:
        start = small - 1
    return _finish(full[start:start + len(result)], result)


@implements(np.convolve)
def _convolve(a, v, mode="full"):
    """``numpy.convolve`` of 1-d operands, either forward, every ``mode``."""
    return _convolved("convolve", a, v, mode, False)


@implements(np.correlate)
def _correlate(a, v, mode="valid"):
    """``numpy.correlate`` of 1-d operands, either forward, every ``mode``."""
    return _convolved("correlate", a, v, mode, True)


# ---- selection -----------------------------------------------------------------------
@implements(np.select)
def _select(condlist, choicelist, default=0):
    """``numpy.select``: ``numpy.where`` applied from the last condition to the
    first (the first true condition wins); the union pattern of the choices."""
    result = np.select([plain(c) for c in condlist], [plain(c) for c in choicelist],
                       plain(default))
    selected = coerce(default)
    for condition, choice in zip(condlist[::-1], choicelist[::-1]):
        selected = select(plain(condition), choice, selected)
    if not isinstance(selected, value):
        return result
    return _finish(np.broadcast_to(selected, result.shape) if selected.shape != result.shape
                   else selected, result)


@implements(np.piecewise)
def _piecewise(x, condlist, funclist, *args, **kw):
    """``numpy.piecewise`` of a forward ``x``: numpy's own steps, the functions
    applied to the forward elements ``x[condition]``."""
    x = coerce(x)
    xv = nvalue(x)
    n2 = len(funclist)
    condlist = plain(condlist)
    if np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray))
                                 and xv.ndim != 0):
        condlist = [condlist]
    condlist = np.asarray([plain(c) for c in condlist], dtype=bool)
    n = len(condlist)
    if n == n2 - 1:  # the "otherwise" condition
        condlist = np.concatenate([condlist, ~np.any(condlist, axis=0, keepdims=True)])
    elif n != n2:
        raise ValueError("with {} condition(s), either {} or {} functions are expected"
                         .format(n, n, n + 1))
    y = np.zeros(xv.shape, dtype=xv.dtype, like=x)
    for condition, function in zip(condlist, funclist):
        if not callable(function):
            y[condition] = function
        else:
            values = x[condition]
            if values.size > 0:
                y[condition] = function(values, *args, **kw)
    return y


# ---- elementwise ---------------------------------------------------------------------
@implements(np.sinc)
def _sinc(x):
    """``numpy.sinc``, numpy's formula: ``sin(y) / y`` with ``y = pi x`` and ``x = 0``
    replaced by a constant (derivative 0 there, the limit)."""
    result = np.sinc(plain(x))
    y = np.pi * np.where(plain(x) == 0, 1.0e-20, x)
    return _finish(np.sin(y) / y, result)


@implements(np.i0)
def _i0(x):
    """``numpy.i0``, derivative ``scipy.special.i1``."""
    result = np.i0(plain(x))
    return _finish(scipy.special.i0(x), result)


@implements(np.interp)
def _interp(x, xp, fp, left=None, right=None, period=None):
    """``numpy.interp``, differentiable in ``x``, ``fp``, ``left`` and ``right``.

    ``xp`` must not depend on the seed.  At a breakpoint ``xp[j]`` (a kink) the
    derivative in ``x`` is that of the segment to its right (of the last
    segment at ``xp[-1]``); outside ``[xp[0], xp[-1]]`` it is zero.
    """
    if isinstance(xp, value):
        raise unsupported("numpy.interp", "xp depending on the seed (the breakpoints "
                          "must be constants)")
    result = np.interp(*(plain(o) for o in (x, xp, fp, left, right)), period=period)
    x, fp = coerce(x), coerce(fp)
    fp = fp if isinstance(fp, value) else np.asarray(fp)
    xp = np.asarray(xp, dtype=np.float64)
    if period is not None:
        # numpy's normalisation: the breakpoints sorted modulo the period and
        # extended by one on each side, so that every x lies inside
        period = abs(period)
        xp = xp % period
        order = np.argsort(xp, kind="stable")
        xp = xp[order]
        fp = fp[order]
        xp = np.concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = np.concatenate([fp[-1:], fp, fp[:1]])
        x = np.remainder(x, period)
        left = right = None
    xv = np.asarray(plain(x), dtype=np.float64)
    if len(xp) == 1:
        inside = np.broadcast_to(fp[0], xv.shape)
    else:
        j = np.clip(np.searchsorted(xp, xv, side="right") - 1, 0, len(xp) - 2)
        t = (x - xp[j]) / (xp[j + 1] - xp[j])
        inside = fp[j] + t * (fp[j + 1] - fp[j])
    below = fp[0] if left is None else left
    above = fp[-1] if right is None else right
    composed = np.where(xv > xp[-1], above, np.where(xv < xp[0], below, inside))
    return _finish(composed, result)


# ---- small dense matrices ------------------------------------------------------------
def _square(a, name):
    """The plain value of the stack of square matrices ``a``, refused when large."""
    av = np.asarray(plain(a))
    if av.ndim < 2 or av.shape[-1] != av.shape[-2]:
        return av  # (numpy's call raises)
    if av.shape[-1] > MAX_DENSE_SIZE:
        raise unsupported(name, "%dx%d matrices (dense matrices up to %dx%d; for a large "
                          "sparse system use sparsegrad.linalg.spsolve)"
                          % (av.shape[-1], av.shape[-1], MAX_DENSE_SIZE, MAX_DENSE_SIZE))
    return av


@implements(np.linalg.det)
def _det(a):
    """``numpy.linalg.det`` of matrices up to ``MAX_DENSE_SIZE``: ``d det(A) =
    sum_ij C_ij dA_ij`` with the cofactors ``C`` (from the minors: exact also for
    singular matrices)."""
    av = _square(a, "numpy.linalg.det")
    result = np.linalg.det(av)
    n = av.shape[-1]
    cofactors = np.empty(av.shape, dtype=result.dtype)
    rows = np.arange(n)
    for i in range(n):
        for j in range(n):
            minor = av[..., rows != i, :][..., rows != j]
            cofactors[..., i, j] = (-1) ** (i + j) * np.linalg.det(minor)
    return _finish(np.einsum("...ij,...ij->...", cofactors, a), result)


@implements(np.linalg.inv)
def _inv(a):
    """``numpy.linalg.inv`` of matrices up to ``MAX_DENSE_SIZE``: ``d A^-1 =
    -A^-1 dA A^-1``."""
    result = np.linalg.inv(_square(a, "numpy.linalg.inv"))
    return _finish(-np.einsum("...ij,...jk,...kl->...il", result, a, result), result)


@implements(np.linalg.solve)
def _solve(a, b):
    """``numpy.linalg.solve`` with matrices up to ``MAX_DENSE_SIZE``: ``dx =
    A^-1 (db - dA x)``; ``b`` is a vector when 1-d, else a stack of matrices
    (numpy 2)."""
    av = _square(a, "numpy.linalg.solve")
    result = np.linalg.solve(av, plain(b))
    inverse = np.linalg.inv(av)
    if np.ndim(plain(b)) == 1:
        residual = b - np.einsum("...ij,...j->...i", a, result)
        return _finish(np.einsum("...ij,...j->...i", inverse, residual), result)
    residual = b - np.einsum("...ij,...jk->...ik", a, result)
    return _finish(np.einsum("...ij,...jk->...ik", inverse, residual), result)


# ---- numpy.pad modes computed from the values ------------------------------------------
PAD_MODES = ("linear_ramp", "mean", "maximum", "minimum", "median")


def _pairs(argument, ndim, name, dtype):
    """A ``pad_width``-style argument as ``ndim`` pairs (``None``: pairs of None)."""
    if argument is None:
        return [(None, None)] * ndim
    if isinstance(argument, value):
        raise unsupported("numpy.pad", "%s depending on the seed" % name)
    return np.broadcast_to(np.asarray(argument, dtype=dtype), (ndim, 2)).tolist()


def _statistic(mode, chunk, axis):
    function = {"mean": np.mean, "maximum": np.max, "minimum": np.min,
                "median": np.median}[mode]
    return function(chunk, axis=axis, keepdims=True)


def _along(x, axis, index):
    return x[(slice(None),) * axis + (index,)]


def pad_composed(array, pad_width, mode, kwargs):
    """``numpy.pad`` in a mode of ``PAD_MODES``: numpy's steps, one axis after the
    other (the corners from the axes padded before)."""
    x = coerce(array)
    ndim = x.ndim
    lengths = _pairs(kwargs.get("stat_length"), ndim, "stat_length", np.int64)
    ends = _pairs(kwargs.get("end_values", 0), ndim, "end_values", np.float64)
    result = np.pad(plain(array), plain(pad_width), mode=mode, **kwargs)
    widths = np.broadcast_to(np.asarray(plain(pad_width), dtype=np.int64), (ndim, 2))
    for axis in range(ndim):
        before, after = (int(w) for w in widths[axis])
        if before == after == 0:
            continue
        n = x.shape[axis]
        pieces = []
        for width, side in ((before, 0), (after, 1)):
            if mode == "linear_ramp":
                edge = _along(x, axis, slice(n - 1, n) if side else slice(0, 1))
                # (numpy's linspace from the end value to the edge, without the edge)
                steps = np.arange(width, dtype=np.float64) / max(width, 1)
                if side:
                    steps = steps[::-1]
                steps = steps.reshape((-1,) + (1,) * (ndim - axis - 1))
                end = ends[axis][side]
                pieces.append(end + (edge - end) * steps)
            else:
                length = lengths[axis][side]
                length = n if length is None else min(int(length), n)
                chunk = _along(x, axis, slice(n - length, n) if side else slice(0, length))
                shape = list(x.shape)
                shape[axis] = width
                pieces.append(np.broadcast_to(_statistic(mode, chunk, axis), tuple(shape)))
        x = np.concatenate([pieces[0], x, pieces[1]], axis=axis)
    return _finish(x, result)
