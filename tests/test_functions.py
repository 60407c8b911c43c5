"""Every array function of the ``__array_function__`` table, one case table.

Each case is a function ``f`` written with plain numpy and a list of input
shapes.  For every shape the test seeds a random ``x``, checks that
``f(seed(x)).value`` equals ``f(x)`` run by numpy (exactly, or to a few ulps
where the summation order may legitimately differ) and that the Jacobian
equals an independent dense reference: complex-step differences for
complex-safe functions (exact to rounding for the linear ones), central
differences for the rest (``max``, ``clip``, ``norm``...).

Further sections: array-like attributes and methods of forward values,
creation functions, constant (sparse and dense) matrices, dtypes and errors.
"""
import warnings
import zlib

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

import sparsegrad
from sparsegrad import forward
from sparsegrad.testing import assert_jacobian_equal, numerical_jacobian

from device_check import assert_matches_cpu

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

TOL = {"complex": dict(rtol=1e-12, atol=1e-13), "central": dict(rtol=1e-6, atol=1e-7)}


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _x(shape, *key):
    """Random input away from 0 with both signs (no ties, no kinks)."""
    rng = _rng("x", shape, *key)
    return rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)


#: where the constants of the cases live: numpy, or the fake device's namespace
#: while a case runs on the device (test_case_on_the_device)
_CONSTANTS = {"xp": np}


def _c(shape, k=0):
    """A deterministic constant of ``shape`` (made where the case runs)."""
    shape = tuple(np.atleast_1d(shape)) if np.ndim(shape) else (shape,)
    size = int(np.prod(shape, dtype=np.int64))
    return _CONSTANTS["xp"].asarray(
        (np.cos(1.3 * np.arange(size) + k) + 0.25 * k).reshape(shape))


def _mask(shape, k=0):
    size = int(np.prod(shape, dtype=np.int64))
    return _CONSTANTS["xp"].asarray(((np.arange(size) * 7 + k) % 3 != 0).reshape(shape))


def _dense(d, value_size, seed_size):
    if sp.issparse(d):
        return d.toarray()
    return np.asarray(d).reshape(value_size, seed_size)


def assert_value(fv, expected, exact=True):
    """The forward value's ``.value`` equals numpy's result (shape, dtype, values)."""
    assert isinstance(fv, forward.value), type(fv)
    expected = np.asarray(expected)
    got = fv.value
    assert isinstance(got, np.ndarray)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    if exact:
        assert_array_equal(got, expected)
    else:
        assert_allclose(got, expected, rtol=1e-13, atol=1e-15)


def assert_jac(fv, expected, x, rtol, atol):
    """Jacobian of ``fv`` (seeded with ``x``) equals the dense ``expected``."""
    x = np.asarray(x)
    expected = np.asarray(expected).reshape(fv.value.size, x.size)
    if x.ndim == 0 and fv.value.ndim == 0:
        d = fv.dvalue
        assert isinstance(d, np.ndarray) and d.ndim == 0, type(d)
        assert d.dtype == fv.value.dtype
        assert_allclose(d, expected.reshape(()), rtol=rtol, atol=atol)
        return
    assert_jacobian_equal(fv, expected, rtol=rtol, atol=atol)


def check(f, x, method="complex", exact=True):
    """Value of ``f(seed(x))`` equals numpy's, Jacobian equals the numerical one."""
    x = np.asarray(x)
    expected = f(x.copy())
    fv = f(forward.seed(x))
    assert_value(fv, expected, exact)
    ref = numerical_jacobian(f, x.copy(), method=method)
    assert_jac(fv, ref, x, **TOL[method])
    return fv


# ---------------------------------------------------------------------------
# the case table: name -> (f, shapes, method, exact)
# ---------------------------------------------------------------------------

S0, S1, S2, S3 = (), (4,), (2, 3), (2, 3, 2)
E1, E2 = (0,), (0, 3)

CASES = {}


def case(name, f, shapes, method="complex", exact=True):
    assert name not in CASES, name
    CASES[name] = (f, shapes, method, exact)


def _assembled(x):
    """``2 x`` with ``x[-1:]`` added to the first row, written into ``np.zeros(like=x)``."""
    F = np.zeros(np.shape(x), dtype=x.dtype, like=x)
    F[...] = 2 * x
    F[:1] += x[-1:]
    return F


# ---- joining ----------------------------------------------------------------
case("concatenate-then-elementwise-and-gather",
     lambda x: (np.exp(np.concatenate([x, np.sin(x) * x, x[:1]])) * 2)[::-1],
     [S1, S2, E1])
case("concatenate-nested",
     lambda x: np.concatenate([np.concatenate([x, x * x]), _c(x.shape), x[::-1]]), [S1])
case("concatenate-axis0", lambda x: np.concatenate([x, _c(x.shape)]), [S1, S2, S3, E1, E2])
case("concatenate-axis-1",
     lambda x: np.concatenate([_c(x.shape[:-1] + (2,)), x], axis=-1), [S1, S2, S3, E2])
case("concatenate-axis1-3d",
     lambda x: np.concatenate([x, _c((2, 1, 2)), x], axis=1), [S3])
case("concatenate-axisNone",
     lambda x: np.concatenate([x, _c((2, 2))], axis=None), [S0, S1, S2, S3, E1])
case("concatenate-two-forward", lambda x: np.concatenate([x, np.sin(x)[::-1]]), [S1, S2])
# (forward values only, along axis 0 or flattened: stacked as they are, no row numbers)
case("concatenate-forward-in-order",
     lambda x: np.concatenate([x[1:] * 2, np.sin(x), x[:1]]), [S1, S2, S3, E1, E2])
case("concatenate-forward-axisNone",
     lambda x: np.concatenate([x.T, np.sin(x)], axis=None), [S0, S1, S2, S3])
case("hstack-forward-1d", lambda x: np.hstack([x.ravel(), np.exp(x).ravel()[::-1]]),
     [S0, S1, S2, E1])
case("concatenate-empty-pieces",
     lambda x: np.concatenate([_c((0,) + x.shape[1:]), x, x[:0]]), [S1, S2, E1])
case("stack", lambda x: np.stack([x, _c(x.shape), x]), [S0, S1, S2, S3, E1])
case("stack-axis-1", lambda x: np.stack([_c(x.shape), x], axis=-1), [S0, S1, S2, S3])
case("stack-axis1", lambda x: np.stack([x, x * x], axis=1), [S2, S3])
case("hstack", lambda x: np.hstack([x, _c(x.shape), x]), [S0, S1, S2, S3, E1])
case("hstack-scalars", lambda x: np.hstack([x, 2.0, _c((3,)), x * 3]), [S0])
case("vstack", lambda x: np.vstack([x, _c(x.shape)]), [S0, S1, S2, S3, E1])
case("column_stack", lambda x: np.column_stack([x, _c(x.shape), x]), [S0, S1, S2, E1])

# ---- selection --------------------------------------------------------------
case("where-x-const", lambda x: np.where(_mask(x.shape), x, _c(x.shape)),
     [S0, (5,), S2, S3, E1])
case("where-const-x", lambda x: np.where(_mask(x.shape, 1), _c(x.shape), x), [S0, (5,), S2, S3])
case("where-x-fx", lambda x: np.where(_mask(x.shape), x, x * x), [(5,), S2, S3])
case("where-broadcast-cond", lambda x: np.where(_mask((2,) + x.shape, 2), x, 0.5),
     [S0, (3,), S2])
case("where-broadcast-x", lambda x: np.where(_mask((3, 2)), x, _c((3, 2))), [S0, (2,), (1, 2)])
case("where-scalar-true", lambda x: np.where(True, x, _c(x.shape)), [S0, S1, S2])
case("where-scalar-false", lambda x: np.where(False, x, _c(x.shape)), [S0, S1, S2])
case("where-x-condition", lambda x: np.where(x > 0, x ** 2, -3 * x), [(6,), S2], "central")

# ---- products -----------------------------------------------------------------
case("dot-A-x", lambda x: np.dot(_c((3,) + x.shape[:1]), x), [S1, (4, 2), E1], exact=False)
case("dot-x-A", lambda x: np.dot(x, _c(x.shape[-1:] + (3,))), [S1, S2, S3], exact=False)
case("dot-scalar", lambda x: np.dot(x, 3.0), [S0, S1, S2])
case("dot-scalar-left", lambda x: np.dot(-2.0, x), [S0, S1, S2])
case("dot-0d-array", lambda x: np.dot(x, _c((3,))), [S0])
case("dot-x-x", lambda x: np.dot(x, x), [S1, (3, 3)], exact=False)
case("vdot-c-x", lambda x: np.vdot(_c(x.shape), x), [S1, S2, S3], exact=False)
case("vdot-x-c", lambda x: np.vdot(x, _c(x.shape, 3)), [S1, S2], "central", exact=False)
case("vdot-x-x", lambda x: np.vdot(x, x), [S1, S2], "central", exact=False)
case("matmul-A-x", lambda x: _c((3,) + x.shape[:1]) @ x, [S1, (4, 2), E1], exact=False)
case("matmul-x-A", lambda x: x @ _c(x.shape[-1:] + (3,)), [S1, S2, S3], exact=False)
case("matmul-batched", lambda x: np.matmul(x, _c((2, 2, 4))), [S3], exact=False)
case("matmul-x-x", lambda x: x @ x, [S1, (3, 3)], exact=False)
case("matmul-x-xT", lambda x: x @ x.T, [S2], exact=False)
case("einsum-ij,j->i", lambda x: np.einsum("ij,j->i", _c((3,) + x.shape), x), [S1],
     exact=False)
case("einsum-ij->ji", lambda x: np.einsum("ij->ji", x), [S2])
case("einsum-ii->", lambda x: np.einsum("ii->", x), [(3, 3)], exact=False)
case("einsum-ijk->k", lambda x: np.einsum("ijk->k", x), [S3], exact=False)
case("einsum-ijk,k->ij", lambda x: np.einsum("ijk,k->ij", x, _c((2,))), [S3], exact=False)
case("einsum-i,i->", lambda x: np.einsum("i,i->", x, x), [S1], exact=False)
case("einsum-ij,jk->ik", lambda x: np.einsum("ij,jk->ik", x, x), [(3, 3)], exact=False)
case("einsum-i,j->ij", lambda x: np.einsum("i,j->ij", x, np.sin(x)), [S1], exact=False)
case("outer-x-c", lambda x: np.outer(x, _c((3,))), [S0, S1, S2])
case("outer-c-x", lambda x: np.outer(_c((3,)), x), [S0, S1, S2])
case("outer-x-x", lambda x: np.outer(x, x), [S1])
case("inner-x-c", lambda x: np.inner(x, _c(x.shape)), [S0, S1], exact=False)
case("inner-2d", lambda x: np.inner(x, _c((4, x.shape[-1]))), [S2, S3], exact=False)
case("inner-x-x", lambda x: np.inner(x, x), [S1], exact=False)

# ---- reductions ---------------------------------------------------------------
case("sum", lambda x: np.sum(x), [S0, S1, S2, S3, E1, E2])
case("sum-axis0", lambda x: np.sum(x, axis=0), [S1, S2, S3, E2])
case("sum-axis-1", lambda x: np.sum(x, axis=-1), [S2, S3, (3, 0)])
case("sum-axis02", lambda x: np.sum(x, axis=(0, 2)), [S3])
case("sum-keepdims", lambda x: np.sum(x, axis=1, keepdims=True), [S2, S3])
case("sum-keepdims-all", lambda x: np.sum(x, keepdims=True), [S0, S2])
case("mean", lambda x: np.mean(x), [S0, S1, S2, S3], exact=False)
case("mean-axis0", lambda x: np.mean(x, axis=0), [S2, S3], exact=False)
case("mean-axis-1-keepdims", lambda x: np.mean(x, axis=-1, keepdims=True), [S2, S3],
     exact=False)
case("mean-axis02", lambda x: np.mean(x, axis=(0, 2)), [S3], exact=False)
case("mean-empty-axis", lambda x: np.mean(x, axis=1), [(0, 3)])
case("prod", lambda x: np.prod(x), [S0, S1, S2, S3, E1], exact=False)
case("prod-axis0", lambda x: np.prod(x, axis=0), [S2, S3], exact=False)
case("prod-axis-1-keepdims", lambda x: np.prod(x, axis=-1, keepdims=True), [S2, S3],
     exact=False)
case("cumsum", lambda x: np.cumsum(x), [S0, S1, S2, E1])
case("cumsum-axis0", lambda x: np.cumsum(x, axis=0), [S2, S3])
case("cumsum-axis-1", lambda x: np.cumsum(x, axis=-1), [S2, S3])
case("cumprod", lambda x: np.cumprod(x), [S0, S1, S2, E1])
case("cumprod-axis0", lambda x: np.cumprod(x, axis=0), [S2, S3])
case("cumprod-axis-1", lambda x: np.cumprod(x, axis=-1), [S2, S3])
case("max", lambda x: np.max(x), [S0, (5,), S2, S3], "central")
case("max-axis0", lambda x: np.max(x, axis=0), [S2, S3], "central")
case("max-axis-1-keepdims", lambda x: np.max(x, axis=-1, keepdims=True), [S2, S3], "central")
case("max-axis02", lambda x: np.max(x, axis=(0, 2)), [S3], "central")
case("min", lambda x: np.min(x), [S0, (5,), S2, S3], "central")
case("min-axis1", lambda x: np.min(x, axis=1), [S2, S3], "central")
case("amax", lambda x: np.amax(x, axis=-1), [S1, S2, S3], "central")
case("amin", lambda x: np.amin(x, axis=0, keepdims=True), [S1, S2, S3], "central")
case("norm", lambda x: np.linalg.norm(x), [S0, (5,)], "central", exact=False)
case("norm-ord1", lambda x: np.linalg.norm(x, 1), [(5,)], "central", exact=False)
case("norm-ord2", lambda x: np.linalg.norm(x, ord=2), [(5,)], "central", exact=False)
case("norm-ordinf", lambda x: np.linalg.norm(x, np.inf), [(5,)], "central", exact=False)
# vector_norm over a tuple of axes is the vector norm of the elements over them
# (never a matrix norm, which np.linalg.norm would take for two axes)
for _ord, _tag in ((1, "1"), (2, "2"), (np.inf, "inf"), (3, "3"), (-np.inf, "-inf")):
    case("vector_norm-ord%s-axis01" % _tag,
         lambda x, o=_ord: np.linalg.vector_norm(x, ord=o, axis=(0, 1)), [S2, S3], "central")
case("vector_norm-ord3-axis02-keepdims",
     lambda x: np.linalg.vector_norm(x, ord=3, axis=(0, 2), keepdims=True), [S3], "central")
case("vector_norm-ordinf-axis-10", lambda x: np.linalg.vector_norm(x, ord=np.inf, axis=(-1, 0)),
     [S3], "central")
case("vector_norm-ord1-axis1", lambda x: np.linalg.vector_norm(x, ord=1, axis=1), [S2],
     "central")
case("vector_norm-default-keepdims", lambda x: np.linalg.vector_norm(x, keepdims=True),
     [S1, S2], "central")
case("trace", lambda x: np.trace(x), [(3, 3), (3, 4)], exact=False)
case("trace-offset", lambda x: np.trace(x, offset=1), [(3, 4)], exact=False)
case("trace-offset-neg", lambda x: np.trace(x, -1), [(3, 3)], exact=False)
case("trace-3d", lambda x: np.trace(x, axis1=1, axis2=2), [(2, 3, 3), S3], exact=False)

# ---- differences ---------------------------------------------------------------
case("diff", lambda x: np.diff(x), [(5,), S2, (1,)])
case("diff-axis0", lambda x: np.diff(x, axis=0), [(3, 4), S3])
case("diff-n2", lambda x: np.diff(x, n=2, axis=-1), [(5,), (2, 4), (2, 2, 4)])
case("diff-prepend-append",
     lambda x: np.diff(x, prepend=0.5, append=_c(x.shape[:-1] + (1,))), [(5,), S2])
case("gradient", lambda x: np.gradient(x), [(5,)], exact=False)
case("gradient-spacing", lambda x: np.gradient(x, 0.5), [(5,)], exact=False)
case("gradient-edge2", lambda x: np.gradient(x, edge_order=2), [(5,)], exact=False)
case("gradient-axis0", lambda x: np.gradient(x, axis=0), [(3, 4), (3, 2, 2)], exact=False)
case("gradient-axis-1", lambda x: np.gradient(x, 2.0, axis=-1), [(3, 4)], exact=False)
case("gradient-all-axes", lambda x: np.stack(np.gradient(x)), [(3, 4)], exact=False)

# ---- shape manipulation --------------------------------------------------------
case("roll", lambda x: np.roll(x, 2), [S0, (5,), S2, S3])
case("roll-axis0", lambda x: np.roll(x, -1, axis=0), [S2, S3])
case("roll-axis-1", lambda x: np.roll(x, 1, axis=-1), [S2, S3])
case("roll-multi", lambda x: np.roll(x, (1, -1), axis=(0, 1)), [S2, S3])
case("reshape-flat", lambda x: np.reshape(x, (-1,)), [S0, S1, S2, S3, E2])
case("reshape-2d", lambda x: np.reshape(x, (x.size // 2, 2)), [S1, S2, S3])
case("reshape-0d", lambda x: np.reshape(x, (1, 1)), [S0, (1,)])
case("reshape-to-0d", lambda x: np.reshape(x, ()), [(1,), (1, 1)])
case("reshape-empty", lambda x: np.reshape(x, (3, 0)), [E2])
case("ravel", lambda x: np.ravel(x), [S0, S1, S2, S3, E2])
case("reshape-F", lambda x: np.reshape(x, (x.size // 2, 2), order="F"), [S1, S2, S3])
case("reshape-F-positional", lambda x: np.reshape(x, (x.size // 2, 2), "F"), [S2])
case("ravel-F", lambda x: np.ravel(x, order="F"), [S2, S3])
case("ravel-F-of-transpose", lambda x: np.ravel(np.transpose(x), "F"), [S2, S3])
case("reshape-of-assembled", lambda x: np.reshape(_assembled(x), (-1,)), [S2])
case("transpose", lambda x: np.transpose(x), [S0, S1, S2, S3])
case("transpose-axes", lambda x: np.transpose(x, (1, 0, 2)), [S3])
case("transpose-axes-neg", lambda x: np.transpose(x, (-1, 0, 1)), [S3])
case("moveaxis", lambda x: np.moveaxis(x, 0, -1), [S2, S3])
case("moveaxis-multi", lambda x: np.moveaxis(x, [0, 1], [2, 0]), [S3])
case("swapaxes", lambda x: np.swapaxes(x, 0, 1), [S2, S3])
case("swapaxes-neg", lambda x: np.swapaxes(x, -1, 0), [S3])
case("squeeze", lambda x: np.squeeze(x), [S0, (1,), (1, 3, 1), (2, 1, 2)])
case("squeeze-axis0", lambda x: np.squeeze(x, axis=0), [(1, 3, 1)])
case("squeeze-axis-1", lambda x: np.squeeze(x, axis=-1), [(1, 3, 1), (3, 1)])
case("expand_dims", lambda x: np.expand_dims(x, 0), [S0, S1, S2])
case("expand_dims-neg", lambda x: np.expand_dims(x, -1), [S0, S1, S3])
case("expand_dims-tuple", lambda x: np.expand_dims(x, (0, 2)), [S1, S2])
case("atleast_1d", lambda x: np.atleast_1d(x), [S0, S1, S2])
case("broadcast_to", lambda x: np.broadcast_to(x, (2, 3)), [S0, (3,), (2, 1), (1, 3)])
case("broadcast_to-3d", lambda x: np.broadcast_to(x, (2, 3, 4)), [(1, 3, 1), (4,)])
case("take", lambda x: np.take(x, [0, -1, 2, 2]), [(5,), S2, S3])
case("take-0d", lambda x: np.take(x, [0, 0]), [S0])
case("take-axis0", lambda x: np.take(x, [1, 0, 1, -2], axis=0), [S2, S3])
case("take-axis-1", lambda x: np.take(x, np.array([[0, 2], [-1, 1]]), axis=-1),
     [S1, S2, (2, 2, 3)])
case("take-empty", lambda x: np.take(x, np.array([], dtype=np.intp)), [S1, S2])
case("take_along_axis-1d",
     lambda x: np.take_along_axis(x, np.argsort(_c(x.shape)), axis=0), [(5,)])
case("take_along_axis-axis0",
     lambda x: np.take_along_axis(x, np.argsort(_c(x.shape), axis=0), axis=0), [S2, S3])
case("take_along_axis-axis-1",
     lambda x: np.take_along_axis(x, np.argsort(_c(x.shape, 2), axis=-1)[..., :2], axis=-1),
     [S2, S3])
case("take_along_axis-None",
     lambda x: np.take_along_axis(x, np.array([5, 0, 1, 1]), axis=None), [S2])
case("flip", lambda x: np.flip(x), [S0, S1, S2, S3])
case("flip-axis0", lambda x: np.flip(x, axis=0), [S1, S2, S3])
case("flip-axis-1", lambda x: np.flip(x, -1), [S2, S3])
case("flip-axes", lambda x: np.flip(x, (0, 2)), [S3])
case("repeat", lambda x: np.repeat(x, 2), [S0, S1, S2])
case("repeat-array", lambda x: np.repeat(x, [1, 0, 2], axis=0), [(3,), (3, 2)])
case("repeat-axis-1", lambda x: np.repeat(x, [2, 1, 0], axis=-1), [S2, (2, 2, 3)])
case("tile", lambda x: np.tile(x, 2), [S0, S1, S2])
case("tile-tuple", lambda x: np.tile(x, (2, 1)), [S1, S2])
case("tile-3", lambda x: np.tile(x, (1, 2, 2)), [S2, S3])
case("pad-constant", lambda x: np.pad(x, 1), [S1, S2, S3])
case("pad-constant-values",
     lambda x: np.pad(x, ((1, 0), (2, 1)), constant_values=3.0), [S2])
case("pad-constant-pair", lambda x: np.pad(x, (0, 2), "constant", constant_values=(-1.0, 4.0)),
     [S1, S2])
case("pad-edge", lambda x: np.pad(x, (2, 1), "edge"), [S1, S2, S3])
case("pad-wrap", lambda x: np.pad(x, (2, 3), mode="wrap"), [S1, S2])
case("pad-wrap-long", lambda x: np.pad(x, 5, mode="wrap"), [(3,)])
case("pad-reflect", lambda x: np.pad(x, ((1, 2), (2, 0)), mode="reflect"), [(3, 4)])
case("pad-reflect-1d", lambda x: np.pad(x, 2, mode="reflect"), [S1, S3])
case("pad-reflect-long", lambda x: np.pad(x, 4, mode="reflect"), [(3,)])
case("clip", lambda x: np.clip(x, -0.8, 0.9), [S0, (6,), S2, S3], "central")
case("clip-arrays", lambda x: np.clip(x, _c(x.shape) - 0.3, _c(x.shape) + 0.5), [(6,), S2],
     "central")
case("clip-broadcast", lambda x: np.clip(x, -0.7 + 0 * _c(3), 1.1), [S2, (2, 2, 3)], "central")
case("clip-lower-only", lambda x: np.clip(x, -0.9, None), [(6,), S2], "central")
case("clip-upper-only", lambda x: np.clip(x, None, 0.7), [(6,), S2], "central")
case("diagonal", lambda x: np.diagonal(x), [(3, 3), (3, 4)])
case("diagonal-offset", lambda x: np.diagonal(x, 1), [(3, 4)])
case("diagonal-offset-neg", lambda x: np.diagonal(x, offset=-2), [(4, 3)])
case("diagonal-3d", lambda x: np.diagonal(x, axis1=0, axis2=2), [S3, (3, 2, 3)])
case("copy", lambda x: np.copy(x), [S0, S1, S2, S3, E1])

# split / array_split return lists: each piece is a case
for _k in range(3):
    case("split-sections-%d" % _k, lambda x, k=_k: np.split(x, 3)[k], [(6,), (3, 2)])
    case("split-indices-%d" % _k, lambda x, k=_k: np.split(x, [1, 4], axis=-1)[k], [(5,), (2, 5)])
    case("array_split-%d" % _k, lambda x, k=_k: np.array_split(x, 3)[k], [(7,), (4, 2)])
    case("array_split-axis1-%d" % _k, lambda x, k=_k: np.array_split(x, 3, axis=1)[k],
         [(2, 5), (2, 4, 2)])


def _case_params():
    for name, (f, shapes, method, exact) in CASES.items():
        for shape in shapes:
            yield pytest.param(name, shape, id="%s-%s" % (name, str(shape).replace(" ", "")))


@pytest.mark.parametrize("name,shape", list(_case_params()))
def test_function_case(name, shape):
    f, _, method, exact = CASES[name]
    check(f, _x(shape, name), method=method, exact=exact)


@pytest.mark.parametrize("name,shape", list(_case_params()))
def test_case_on_the_device(name, shape, device, monkeypatch):
    """The same case with the seed and its constants on a device (the fake device of
    sparsegrad.gpu._device, which refuses host arrays as CuPy does, and CuPy on a
    GPU): the device path gives the CPU's value, pattern and Jacobian, and the value
    stays on the device."""
    f = CASES[name][0]
    x = _x(shape, name)
    expected = f(forward.seed(x))
    monkeypatch.setitem(_CONSTANTS, "xp", device)
    got = f(forward.seed(device.asarray(x)))
    assert_matches_cpu(got, expected, rtol=1e-12, atol=1e-14, value_rtol=1e-13,
                       value_atol=1e-15, device=device)


def test_every_listed_function_has_a_case():
    listed = """concatenate stack hstack vstack column_stack where dot vdot matmul einsum sum
        mean prod cumsum cumprod diff gradient roll reshape ravel transpose moveaxis
        swapaxes squeeze expand_dims atleast_1d broadcast_to take take_along_axis flip
        repeat tile pad clip max min amax amin norm trace diagonal outer inner split
        array_split copy""".split()
    prefixes = {name.split("-")[0] for name in CASES}
    assert set(listed) <= prefixes, set(listed) - prefixes


# ---- zeros in products: the Jacobian must not divide by zero -------------------

@pytest.mark.parametrize("func", [
    lambda x: np.prod(x), lambda x: np.prod(x, axis=0), lambda x: np.cumprod(x),
    lambda x: np.cumprod(x, axis=-1), lambda x: np.prod(x, axis=-1, keepdims=True)],
    ids=["prod", "prod-axis0", "cumprod", "cumprod-axis-1", "prod-keepdims"])
@pytest.mark.parametrize("zeros", [1, 3], ids=["one-zero", "three-zeros"])
def test_products_with_exact_zeros(func, zeros):
    x = _x((3, 4), "zeros")
    x.flat[[5, 6, 9][:zeros]] = 0.0    # (1, 1), then also (1, 2) and (2, 1)
    fv = check(func, x, "complex", exact=False)
    assert np.all(np.isfinite(_dense(fv.dvalue, fv.value.size, x.size)))


# ---- where never leaks inf/nan from the unselected branch -----------------------

def test_where_does_not_leak_nonfinite_unselected_branch():
    x0 = np.array([-1.0, 0.0, 2.0, 4.0])

    def f(x):
        with np.errstate(all="ignore"):
            return np.where(x > 0, np.sqrt(x) + np.log(x), 2.0 * x)

    fv = f(forward.seed(x0))
    assert_value(fv, f(x0))
    expected = np.diag([2.0, 2.0, 0.5 / np.sqrt(2.0) + 0.5, 0.25 + 0.25])
    assert_jac(fv, expected, x0, rtol=1e-15, atol=0)


def test_where_reciprocal_at_zero_gives_zero_rows():
    x = np.array([0.0, 2.0, 0.0])

    def f(x):
        with np.errstate(divide="ignore"):
            return np.where(x != 0, 1.0 / x, 0.0)

    fv = f(forward.seed(x))
    assert_array_equal(fv.value, [0.0, 0.5, 0.0])
    assert_array_equal(_dense(fv.dvalue, 3, 3), np.diag([0.0, -0.25, 0.0]))


def test_mean_of_empty_matches_numpy():
    x = np.zeros(0)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.mean(x)
        fv = np.mean(forward.seed(x))
    assert np.isnan(fv.value) and np.isnan(expected)
    assert fv.dvalue.shape == (1, 0)


# ---------------------------------------------------------------------------
# creation functions
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [S0, S1, S2, S3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_like_functions_return_plain_arrays(shape, dtype):
    x0 = _x(shape, "like").astype(dtype)
    x = forward.seed(x0)
    for func, args in [(np.zeros_like, ()), (np.ones_like, ()), (np.full_like, (3.5,)),
                       (np.empty_like, ())]:
        got = func(x, *args)
        expected = func(x0, *args)
        assert type(got) is np.ndarray, func
        assert got.shape == expected.shape and got.dtype == expected.dtype, func
        if func is not np.empty_like:
            assert_array_equal(got, expected)
    got = np.zeros_like(x, dtype=np.int32)
    assert type(got) is np.ndarray and got.dtype == np.int32
    assert_array_equal(np.full_like(x, 2.0, shape=(2, 2)), np.full((2, 2), 2.0, dtype))


@pytest.mark.parametrize("shape", [3, (3,), (2, 3), (2, 1, 2)])
@pytest.mark.parametrize("seed_shape", [S0, (4,), (2, 2)])
def test_zeros_like_x_is_an_assignable_forward_value(shape, seed_shape):
    x0 = _x(seed_shape, "zeros")
    x = forward.seed(x0)
    F = np.zeros(shape, like=x)
    assert isinstance(F, forward.value)
    assert_value(F, np.zeros(shape))
    n = F.value.size
    assert_jac(F, np.zeros((n, x0.size)), x0, rtol=0, atol=0)
    # assignable: one element from x, and the rest stays zero
    F[(0,) * F.ndim] = 3.0 * x.reshape(-1)[-1]
    expected = np.zeros((n, x0.size))
    expected[0, -1] = 3.0
    assert F.value.flat[0] == 3.0 * x0.reshape(-1)[-1]
    assert_jac(F, expected, x0, rtol=0, atol=0)


def test_ones_and_full_like_x():
    x0 = _x((3,), "ones")
    x = forward.seed(x0)
    for F, expected in [(np.ones(4, like=x), np.ones(4)),
                        (np.full((2, 2), 1.5, like=x), np.full((2, 2), 1.5))]:
        assert isinstance(F, forward.value)
        assert_value(F, expected)
        assert_jac(F, np.zeros((F.value.size, 3)), x0, rtol=0, atol=0)


# ---------------------------------------------------------------------------
# array-like attributes and methods of forward values
# ---------------------------------------------------------------------------

METHODS = {
    "T": lambda x: x.T,
    "real": lambda x: x.real,
    "reshape-args": lambda x: x.reshape(3, 2),
    "reshape-tuple": lambda x: x.reshape((3, 2)),
    "reshape-1": lambda x: x.reshape(-1),
    "ravel": lambda x: x.ravel(),
    "flatten": lambda x: x.flatten(),
    "transpose": lambda x: x.transpose(),
    "transpose-args": lambda x: x.transpose(1, 0),
    "transpose-tuple": lambda x: x.transpose((1, 0)),
    "swapaxes": lambda x: x.swapaxes(0, 1),
    "squeeze": lambda x: x[None].squeeze(),
    "squeeze-axis": lambda x: x[:1].squeeze(axis=0),
    "sum": lambda x: x.sum(),
    "sum-axis0": lambda x: x.sum(axis=0),
    "sum-keepdims": lambda x: x.sum(axis=-1, keepdims=True),
    "mean": lambda x: x.mean(),
    "mean-axis1": lambda x: x.mean(axis=1),
    "prod": lambda x: x.prod(),
    "prod-axis0": lambda x: x.prod(axis=0),
    "cumsum": lambda x: x.cumsum(),
    "cumsum-axis1": lambda x: x.cumsum(axis=1),
    "max": lambda x: x.max(),
    "max-axis1": lambda x: x.max(axis=1),
    "min": lambda x: x.min(),
    "min-axis0": lambda x: x.min(axis=0),
    "dot": lambda x: x.dot(_c((3,))),
    "dot-matrix": lambda x: x.dot(_c((3, 4))),
    "conj": lambda x: x.conj(),
    "copy": lambda x: x.copy(),
    "astype-float64": lambda x: x.astype(np.float64),
    "iter": lambda x: np.stack([row * (k + 1) for k, row in enumerate(x)]),
    "diagonal": lambda x: x.diagonal(),
    "diagonal-offset": lambda x: x.diagonal(1),
    "trace": lambda x: x.trace(),
    "repeat": lambda x: x.repeat(2, axis=1),
    "take": lambda x: x.take([4, 0, 4]),
    "take-axis": lambda x: x.take([2, 0], axis=1),
    "argsort-gather": lambda x: x.ravel()[x.real.ravel().argsort()],
    "argmax-gather": lambda x: x.ravel()[x.real.argmax()] * x,
}
_REAL_ONLY = {"max", "max-axis1", "min", "min-axis0", "conj", "real", "astype-float64",
              "argsort-gather", "argmax-gather"}


@pytest.mark.parametrize("name", list(METHODS))
def test_method(name):
    method = "central" if name in _REAL_ONLY else "complex"
    exact = name not in {"mean", "mean-axis1", "dot", "dot-matrix", "prod", "prod-axis0"}
    check(METHODS[name], _x((2, 3), name), method, exact=exact)


def test_index_methods_give_numpys_answers():
    x0 = _x((2, 3), "index methods")
    x = forward.seed(x0)
    for name in ("argmax", "argmin", "argsort", "nonzero"):
        np.testing.assert_array_equal(getattr(x, name)(), getattr(x0, name)())
    np.testing.assert_array_equal(x.argpartition(1, axis=1), x0.argpartition(1, axis=1))
    flat = np.sort(x0.ravel())
    np.testing.assert_array_equal(forward.seed(flat).searchsorted(x0[0]), flat.searchsorted(x0[0]))
    assert (x.itemsize, x.nbytes) == (x0.itemsize, x0.nbytes)
    target = np.zeros(3, like=x)
    target.fill(x[0, 1])
    np.testing.assert_array_equal(target.value, np.full(3, x0[0, 1]))
    np.testing.assert_array_equal(target.dvalue.toarray()[:, 1], 1.0)


@pytest.mark.parametrize("name", ["tobytes", "strides", "view", "byteswap", "data", "flags",
                                  "ctypes", "tofile", "setflags", "base"])
def test_memory_members_refuse_naming_ndarrays(name):
    x = forward.seed(np.ones(3))
    assert not hasattr(x, name)
    with pytest.raises(sparsegrad.UnsupportedOperationError,
                       match="numpy.ndarray.%s is not supported.*use .value" % name):
        getattr(x, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        x.nothing


@pytest.mark.parametrize("shape", [S0, S1, S2, S3, E2])
def test_attributes(shape):
    x0 = _x(shape, "attr")
    x = forward.seed(x0)
    assert x.shape == x0.shape
    assert x.ndim == x0.ndim
    assert x.size == x0.size
    assert x.dtype == x0.dtype
    if x0.ndim:
        assert len(x) == len(x0)
        assert len(list(iter(x))) == len(x0)
    else:
        with pytest.raises(TypeError):
            len(x)
        with pytest.raises(TypeError):
            iter(x)


def test_iter_rows_have_the_right_jacobians():
    x0 = _x((3, 2), "iter")
    rows = list(forward.seed(x0))
    assert len(rows) == 3
    for k, row in enumerate(rows):
        assert_value(row, x0[k])
        expected = np.zeros((2, 6))
        expected[[0, 1], [2 * k, 2 * k + 1]] = 1.0
        assert_jac(row, expected, x0, rtol=0, atol=0)


def test_imag_of_real_value_is_zero():
    x0 = _x((2, 3), "imag")
    y = forward.seed(x0).imag
    assert_value(y, x0.imag)
    assert_jac(y, np.zeros((6, 6)), x0, rtol=0, atol=0)


def test_real_imag_conj_of_complex_intermediate():
    x0 = _x((4,), "cplx")
    x = forward.seed(x0)
    z = x * (1.0 + 2.0j)
    for fv, expected_value, d in [(z.real, (x0 * (1 + 2j)).real, 1.0),
                                  (z.imag, (x0 * (1 + 2j)).imag, 2.0),
                                  (z.conj(), np.conj(x0 * (1 + 2j)), 1.0 - 2.0j),
                                  (np.real(z), (x0 * (1 + 2j)).real, 1.0),
                                  (np.imag(z), (x0 * (1 + 2j)).imag, 2.0)]:
        assert_value(fv, expected_value)
        assert fv.dvalue.dtype == expected_value.dtype
        assert_jac(fv, d * np.eye(4), x0, rtol=1e-15, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_astype(dtype):
    x0 = _x((2, 3), "astype")
    y = forward.seed(x0).astype(dtype)
    assert_value(y, x0.astype(dtype))
    assert y.dvalue.dtype == dtype
    assert_allclose(y.dvalue.toarray(), np.eye(6))


def test_scalar_seed_methods():
    x0 = np.array(1.25)
    x = forward.seed(x0)
    for f in [lambda x: x.reshape(1), lambda x: x.ravel(), lambda x: x.sum(), lambda x: x.T,
              lambda x: x.copy(), lambda x: x.flatten()]:
        check(f, x0)


# ---------------------------------------------------------------------------
# constant matrices: A @ x, A.dot(x), x @ A, sparsegrad.dot(A, x)
# ---------------------------------------------------------------------------

SPARSE_CLASSES = [sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.lil_matrix,
                  sp.csr_array, sp.csc_array, sp.coo_array, sp.lil_array]


def _constant_matrix(m, n):
    A = np.zeros((m, n))
    A[[0, 0, 1, 2, 3, 3], [0, 3, 1, 4, 2, 0]] = [1.5, -2.0, 3.0, 0.25, -1.0, 4.0]
    return A


@pytest.mark.parametrize("op", ["A@x", "A.dot(x)", "sparsegrad.dot", "x@A"])
@pytest.mark.parametrize("cls", SPARSE_CLASSES + [np.asarray],
                         ids=[c.__name__ for c in SPARSE_CLASSES] + ["ndarray"])
def test_constant_matrix_products(cls, op):
    if cls is np.asarray and op == "A.dot(x)":
        pytest.skip("ndarray.dot converts its argument with __array__ (no numpy override)")
    if cls in (sp.coo_matrix, sp.coo_array) and op == "A.dot(x)":
        pytest.skip("scipy's coo .dot raises TypeError for non-array operands (no override)")
    dense = _constant_matrix(4, 5)
    x0 = _x((5,), "const-matrix")
    if op == "x@A":
        A = cls(dense.T.copy())        # x @ A with A = dense.T: Jacobian A.T = dense
        f = lambda x: x @ A
    else:
        A = cls(dense.copy())
        f = {"A@x": lambda x: A @ x, "A.dot(x)": lambda x: A.dot(x),
             "sparsegrad.dot": lambda x: sparsegrad.dot(A, x)}[op]
    A_before = A.toarray() if sp.issparse(A) else A.copy()
    y = f(forward.seed(x0))
    assert_value(y, dense @ x0, exact=False)
    assert y.dvalue.dtype == np.float64
    assert_jac(y, dense, x0, rtol=1e-15, atol=0)
    # the user's matrix is not modified, and modifying the result does not reach it
    y.dvalue.data[:] = 99.0
    assert_jac(y, dense, x0, rtol=1e-15, atol=0)
    assert_array_equal(A.toarray() if sp.issparse(A) else A, A_before)


@pytest.mark.parametrize("cls", [sp.csr_matrix, sp.csr_array, np.asarray],
                         ids=["csr_matrix", "csr_array", "ndarray"])
def test_constant_matrix_on_intermediate(cls):
    dense = _constant_matrix(4, 5)
    A = cls(dense)
    x0 = _x((5,), "chain")

    def f(x):
        return np.sin(A @ np.exp(x)) + A @ (x[::-1] * x)

    def f_ref(x):
        return np.sin(dense @ np.exp(x)) + dense @ (x[::-1] * x)

    y = f(forward.seed(x0))
    assert_value(y, f_ref(x0), exact=False)
    assert_jac(y, numerical_jacobian(f_ref, x0, method="complex"), x0, **TOL["complex"])


def test_sparsegrad_dot_with_numeric_argument():
    A = sp.csr_matrix(_constant_matrix(4, 5))
    v = _x((5,), "numeric")
    got = sparsegrad.dot(A, v)
    assert not isinstance(got, forward.value)
    assert_allclose(got, A.dot(v))


def test_constant_matrix_times_2d_forward():
    dense = _constant_matrix(4, 5)
    x0 = _x((5, 2), "multivector")
    y = dense @ forward.seed(x0)
    assert_value(y, dense @ x0, exact=False)
    assert_jac(y, np.kron(dense, np.eye(2)), x0, rtol=1e-15, atol=0)


@pytest.mark.skipif(not hasattr(sp, "coo_array"), reason="scipy without sparse arrays")
def test_a_1d_scipy_sparse_array_is_refused_with_the_way_out():
    x = forward.seed(np.arange(4.0))
    try:
        a = sp.coo_array(np.array([1.0, 0.0, 2.0, 0.0]))
    except (ValueError, TypeError):
        pytest.skip("this scipy has no 1-d sparse arrays")
    if len(a.shape) != 1:
        pytest.skip("this scipy has no 1-d sparse arrays")
    for product in (lambda: a @ x, lambda: x @ a):
        with pytest.raises(sparsegrad.UnsupportedOperationError, match="1-d scipy sparse"):
            product()


@pytest.mark.parametrize("side", ["A @ X", "X @ A"])
def test_scipy_matrix_times_2d_forward_stores_only_dependencies(side):
    # entry (i, j) of A pairs column c of X with column c of the result only:
    # the pattern is kron(pattern(A), I) exactly, with A's explicit zero kept
    rows, cols = np.array([0, 0, 1, 2, 2]), np.array([0, 3, 1, 2, 4])
    data = np.array([1.5, 0.0, -2.0, 3.0, 0.5])  # an explicit zero at (0, 3)
    A = sp.csr_matrix((data, (rows, cols)), shape=(3, 5))
    k = 2
    pattern = np.zeros((3, 5), bool)
    pattern[rows, cols] = True
    if side == "A @ X":
        x0 = _x((5, k), "multivector")
        y = A @ forward.seed(x0)
        dense, expected = A.toarray(), np.kron(pattern, np.eye(k, dtype=bool))
        assert_value(y, dense @ x0, exact=False)
        assert_jac(y, np.kron(dense, np.eye(k)), x0, rtol=1e-15, atol=0)
    else:
        x0 = _x((k, 3), "multivector")
        y = forward.seed(x0) @ A
        dense, expected = A.toarray(), np.kron(np.eye(k, dtype=bool), pattern.T)
        assert_value(y, x0 @ dense, exact=False)
        assert_jac(y, np.kron(np.eye(k), dense.T), x0, rtol=1e-15, atol=0)
    J = y.dvalue
    stored = np.zeros(J.shape, bool)
    stored[np.repeat(np.arange(J.shape[0]), np.diff(J.indptr)), J.indices] = True
    assert_array_equal(stored, expected)
    assert J.nnz == 5 * k


# ---------------------------------------------------------------------------
# dtypes: the Jacobian dtype is the value dtype
# ---------------------------------------------------------------------------

DTYPE_CASES = {
    "concatenate": lambda x: np.concatenate([x, x[::-1] * 2]),
    "sum-axis0": lambda x: np.sum(x.reshape(2, 3), axis=0),
    "mean": lambda x: np.mean(x),
    "reshape": lambda x: np.reshape(x, (3, 2)),
    "dense-A@x": lambda x: _constant_matrix(4, 6) @ x,
    "cumprod": lambda x: np.cumprod(x),
    "where": lambda x: np.where(_mask(6), x, x * x),
    "take": lambda x: np.take(x, [5, 0, 0]),
    "roll": lambda x: np.roll(x, 2),
    "pad-edge": lambda x: np.pad(x, 2, mode="edge"),
}


def _holomorphic_central(f, x, h):
    """Central differences in the real direction (the complex derivative for holomorphic f)."""
    cols = []
    for j in range(x.size):
        e = np.zeros(x.size, x.dtype)
        e[j] = h
        e = e.reshape(x.shape)
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))).reshape(-1) / (2 * h))
    return np.array(cols).T


@pytest.mark.parametrize("name", list(DTYPE_CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_dtypes(name, dtype):
    f = DTYPE_CASES[name]
    x0 = _x((6,), "dtype", name)
    if dtype == np.complex128:
        x0 = x0 + 1j * _x((6,), "dtype-imag", name)
    x0 = x0.astype(dtype)
    y = f(forward.seed(x0))
    expected = f(x0.copy())
    assert_value(y, expected, exact=name not in ("mean", "dense-A@x"))
    assert y.dvalue.dtype == expected.dtype
    ref = _holomorphic_central(f, x0.astype(np.complex128 if dtype == np.complex128
                                             else np.float64), 1e-6)
    rtol = 1e-5 if dtype == np.float32 else 1e-7
    assert_allclose(_dense(y.dvalue, expected.size, 6), ref, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("spacing", [0.1, np.float32(0.1), np.float64(0.1), 3,
                                     [0.0, 0.1, 0.3, 0.35, 0.6, 1.0]])
@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_of_float32_is_numpys_float32_result(spacing, edge_order):
    # the spacing reaches numpy as the user gave it: a Python float is a weak
    # scalar there, so float32 data is differentiated in float32 (a 0-d float64
    # array instead gave results 1 ulp off)
    x0 = (_x((6,), "gradient32") * np.arange(1, 7) ** 2).astype(np.float32)
    y = np.gradient(forward.seed(x0), spacing, edge_order=edge_order)
    expected = np.gradient(x0, spacing, edge_order=edge_order)
    assert y.value.dtype == np.float32 and y.dvalue.dtype == np.float32
    assert_array_equal(y.value, expected)
    # the Jacobian is the finite-difference matrix: central differences of the
    # float64 computation are exact to rounding for a linear map
    ref = numerical_jacobian(lambda z: np.gradient(z, spacing, edge_order=edge_order),
                             x0.astype(np.float64), method="central")
    assert_allclose(y.dvalue.toarray(), ref, rtol=1e-6, atol=1e-5)


def test_gradient_of_float32_along_axes_is_numpys_result():
    x0 = _x((4, 5), "gradient32-2d").astype(np.float32)
    gy, gx = np.gradient(forward.seed(x0), 0.1, 0.3)
    ey, ex = np.gradient(x0, 0.1, 0.3)
    for got, expected, axis, h in ((gy, ey, 0, 0.1), (gx, ex, 1, 0.3)):
        assert got.value.dtype == np.float32
        assert_array_equal(got.value, expected)
        ref = numerical_jacobian(lambda z: np.gradient(z, h, axis=axis),
                                 x0.astype(np.float64), method="central")
        assert_allclose(got.dvalue.toarray(), ref, rtol=1e-6, atol=1e-5)


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------

UNSUPPORTED = {
    "cov": lambda x: np.cov(x),
    "corrcoef": lambda x: np.corrcoef(x),
    "fft": lambda x: np.fft.fft(x),
    "unique": lambda x: np.unique(x),
    "histogram": lambda x: np.histogram(x),
    "partition": lambda x: np.partition(x, 1),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_function_raises_type_error_naming_it(name):
    x = forward.seed(_x((4,), "unsupported"))
    with pytest.raises(TypeError) as info:
        UNSUPPORTED[name](x)
    assert isinstance(info.value, sparsegrad.UnsupportedOperationError)
    assert name in str(info.value)


@pytest.mark.parametrize("options", [{"mode": "reflect", "reflect_type": "odd"},
                                     {"mode": "symmetric", "reflect_type": "odd"},
                                     {"mode": "empty"}])
def test_pad_modes_that_compute_values_are_refused(options):
    # odd reflection is 2 a[edge] - a[i]: it does not move data, and row numbers
    # must never go through it; "empty" leaves the padding undefined
    x = forward.seed(_x((4,), "pad"))
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="numpy.pad"):
        np.pad(x, 2, **options)


def test_linalg_solve_with_a_large_forward_matrix_raises():
    x = forward.seed(_x((81,), "solve") + 9 * np.eye(9).ravel())
    with pytest.raises(TypeError) as info:
        np.linalg.solve(x.reshape(9, 9), np.ones(9))
    assert "solve" in str(info.value)


AXIS_ERRORS = {
    "sum": lambda x: np.sum(x, axis=2),
    "sum-neg": lambda x: np.sum(x, axis=-3),
    "mean": lambda x: np.mean(x, axis=5),
    "prod": lambda x: np.prod(x, axis=2),
    "max": lambda x: np.max(x, axis=2),
    "cumsum": lambda x: np.cumsum(x, axis=2),
    "concatenate": lambda x: np.concatenate([x, x], axis=2),
    "stack": lambda x: np.stack([x, x], axis=4),
    "flip": lambda x: np.flip(x, axis=2),
    "roll": lambda x: np.roll(x, 1, axis=2),
    "expand_dims": lambda x: np.expand_dims(x, 4),
    "squeeze": lambda x: np.squeeze(x, axis=3),
    "moveaxis": lambda x: np.moveaxis(x, 0, 2),
    "swapaxes": lambda x: np.swapaxes(x, 0, 2),
    "take": lambda x: np.take(x, [0], axis=2),
    "diff": lambda x: np.diff(x, axis=2),
    "method-sum": lambda x: x.sum(axis=2),
}


@pytest.mark.parametrize("name", list(AXIS_ERRORS))
def test_axis_out_of_range_raises(name):
    x0 = _x((2, 3), "axis")
    with pytest.raises(Exception) as numpy_info:
        AXIS_ERRORS[name](x0)
    with pytest.raises((ValueError, IndexError, TypeError)) as info:
        AXIS_ERRORS[name](forward.seed(x0))
    assert "axis" in str(info.value).lower() or isinstance(info.value, type(numpy_info.value))


SHAPE_ERRORS = {
    "add": lambda x: x + np.ones(4),
    "add-forward": lambda x: x + x[:2],
    "concatenate": lambda x: np.concatenate([x, np.ones((2, 2))], axis=0),
    "stack": lambda x: np.stack([x, np.ones(4)]),
    "matmul": lambda x: np.ones((2, 2)) @ x,
    "matmul-right": lambda x: x @ np.ones((2, 2)),
    "sparse-matmul": lambda x: sp.csr_matrix(np.ones((2, 2))) @ x,
    "dot": lambda x: np.dot(x, np.ones(4)),
    "reshape": lambda x: x.reshape(4),
    "broadcast_to": lambda x: np.broadcast_to(x, (2, 4)),
    "where": lambda x: np.where(np.ones(2, bool), x, 0.0),
    "max-empty": lambda x: np.max(x[:0]),
}


@pytest.mark.parametrize("name", list(SHAPE_ERRORS))
def test_shape_mismatch_raises(name):
    x0 = _x((3,), "shape")
    with pytest.raises(ValueError):
        SHAPE_ERRORS[name](x0)
    with pytest.raises(ValueError):
        SHAPE_ERRORS[name](forward.seed(x0))


# ---------------------------------------------------------------------------
# python sequences holding forward values: a correct result or a TypeError,
# never a value of dtype object or a Jacobian that lost the nested elements
# ---------------------------------------------------------------------------

NESTED = {
    "concatenate": lambda x: np.concatenate([x, [x[0] * 2.0]]),
    "concatenate-first": lambda x: np.concatenate([[x[-1], 1.0], x]),
    "hstack": lambda x: np.hstack([x, [x[0], 1.0]]),
    "add-list": lambda x: x + [x[0], x[1], 1.0],
    "multiply-list": lambda x: [x[2], 2.0, x[0]] * x,
    "stack-list": lambda x: np.stack([x, [x[1], x[0], 3.0]]),
}


@pytest.mark.parametrize("name", list(NESTED))
def test_sequences_holding_forward_values(name):
    f = NESTED[name]
    x0 = _x((3,), "nested", name)
    try:
        y = f(forward.seed(x0))
    except TypeError:
        return
    expected = f(x0)
    assert isinstance(y, forward.value)
    assert y.value.dtype == np.float64, "value of dtype %s" % y.value.dtype
    assert_value(y, expected)
    assert_jac(y, numerical_jacobian(f, x0, method="complex"), x0, **TOL["complex"])


# ---------------------------------------------------------------------------
# layout-dependent orders: "A" and "K" follow the value's memory layout
# ---------------------------------------------------------------------------

LAYOUT_CASES = {
    "ravel-K-of-F-result": lambda x: np.ravel(2 * x.reshape(2, 3).T, order="K"),
    "ravel-A-of-F-result": lambda x: np.ravel(2 * x.reshape(2, 3).T, "A"),
    "reshape-A-of-F-result": lambda x: np.reshape(2 * x.reshape(2, 3).T, (6,), order="A"),
    "flatten-A": lambda x: (2 * x.reshape(2, 3).T).flatten("A"),
    "method-ravel-K": lambda x: (2 * x.reshape(2, 3).T).ravel("K"),
    "ravel-K-of-F-view": lambda x: np.ravel(x.reshape(2, 3).T, order="K"),
    "ravel-A-of-C": lambda x: np.ravel(x.reshape(2, 3) * 2, order="A"),
}


@pytest.mark.parametrize("name", sorted(LAYOUT_CASES))
def test_layout_orders_follow_the_value(name):
    f = LAYOUT_CASES[name]
    x0 = np.arange(1.0, 7.0)
    y = f(forward.seed(x0))
    assert_value(y, f(x0))
    # every case is linear: the Jacobian is the map itself (a permutation, scaled)
    expected = np.column_stack([f(np.eye(6)[j]) for j in range(6)])
    assert_array_equal(y.dvalue.toarray(), expected)


def test_order_k_of_a_strided_view_is_refused():
    x = forward.seed(np.arange(6.0))
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="order='K'"):
        np.ravel(x.reshape(2, 3)[:, ::-1].T, order="K")


@pytest.mark.parametrize("f", [
    lambda x: np.sum(x, dtype=np.int64), lambda x: np.cumsum(x, dtype=np.int64),
    lambda x: np.mean(x, dtype=np.int64), lambda x: np.prod(x, dtype=int),
    lambda x: np.trace(x.reshape(2, 2), 0, 0, 1, int),
    lambda x: np.concatenate([x, x], dtype=int, casting="unsafe")],
    ids=["sum", "cumsum", "mean", "prod", "trace-positional", "concatenate"])
def test_dtype_int_of_real_values_is_piecewise_constant(f):
    x0 = np.array([0.6, 1.7, 2.2, 3.9])
    y = f(forward.seed(x0))
    assert_array_equal(y.value, f(x0))
    assert (y.dvalue != 0).nnz == 0
    assert np.sum(forward.seed(np.arange(3))).dvalue.toarray().tolist() == [[1, 1, 1]]


def test_full_with_a_forward_fill_value():
    x = forward.seed(np.array([0.5, 2.0]))
    F = np.full((2, 2), x[1] * 3, like=x)
    assert_array_equal(F.value, np.full((2, 2), 6.0))
    assert_array_equal(F.dvalue.toarray(), [[0, 3]] * 4)
    F[0, 0] = x[0]                          # a fresh array: writable, x unchanged
    assert_array_equal(F.dvalue.toarray(), [[1, 0]] + [[0, 3]] * 3)
    assert_array_equal(x.value, [0.5, 2.0])
    G = np.full(3, x[0], like=x, dtype=np.float32)
    assert G.value.dtype == np.float32 and G.dvalue.toarray().tolist() == [[1, 0]] * 3


def test_complex_to_real_dtype_with_a_complex_seed_is_refused():
    z = forward.seed(np.array([1 + 1j, 2.0]))
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="numpy.sum"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            np.sum(z, dtype=float)
    # a real seed through complex values: the real part, exactly
    x = forward.seed(np.array([1.0, 2.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        y = np.sum(x * (1 + 2j), dtype=float)
    assert_array_equal(y.dvalue.toarray(), [[1.0, 1.0]])


@pytest.mark.parametrize("shapes, args", [
    (((3,), ()), ()), (((2, 3), (2, 2)), ()), (((2, 3), (3,)), ()), (((2,), (3,)), (1,)),
    (((2, 3), (2, 2)), (np.int64(0),)), ((), ())])
def test_concatenate_of_forward_values_raises_numpys_errors(shapes, args):
    arrays = [np.ones(shape) for shape in shapes]
    with pytest.raises(Exception) as expected:
        np.concatenate(arrays, *args)
    x = forward.seed(np.ones(sum(a.size for a in arrays)))
    pieces, first = [], 0
    for a in arrays:
        pieces.append(x[first:first + a.size].reshape(a.shape))
        first += a.size
    with pytest.raises(type(expected.value), match=str(expected.value)[:30].replace("(", ".")):
        np.concatenate(pieces, *args)


def test_concatenate_in_order_shares_nothing_writable():
    x0 = np.arange(1.0, 5.0)
    x = forward.seed(x0)
    a = x * 2
    y = np.concatenate([a, x])
    a[0] = 100.0                       # a write into an operand after the call
    assert_array_equal(y.value, [2.0, 4.0, 6.0, 8.0, 1.0, 2.0, 3.0, 4.0])
    expected = np.vstack([2 * np.eye(4), np.eye(4)])
    assert_array_equal(y.dvalue.toarray(), expected)
    y[1] = x[0] * 5                    # and one into the result
    assert_array_equal(a.value, [100.0, 4.0, 6.0, 8.0])
    assert_array_equal(x.value, x0)


def test_a_dense_broadcast_that_memory_cannot_hold_names_itself(monkeypatch):
    # u - np.sum(u): a dense row broadcast over every element, n x n entries;
    # the gather's allocation failing (as at n = 2e5: 298 GiB) becomes a
    # DensificationError that counts them and names the way out
    from sparsegrad import _backend

    def no_memory(*args):
        raise MemoryError("Unable to allocate")

    n = 50
    u = forward.seed(np.linspace(0.0, 1.0, n))
    total = np.sum(u)
    monkeypatch.setattr(_backend.CPU.kernels, "gather_rows", no_memory)
    with pytest.raises(sparsegrad.DensificationError, match="2500 entries.*jvp") as info:
        u - total
    assert isinstance(info.value.__cause__, MemoryError)


@pytest.mark.parametrize("dtype", [np.float64, np.longdouble])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_cumulative_products_of_empty_strided_values(dtype, axis):
    # (numpy's einsum of an empty operand with a zero stride can write out of bounds)
    x0 = np.linspace(-1.3, 1.4, 27).astype(dtype)
    for _ in range(20):
        y = np.cumprod(forward.seed(x0).reshape(3, 3, 3).T[0:0], axis=axis)
    expected = np.cumprod(x0.reshape(3, 3, 3).T[0:0], axis=axis)
    assert y.value.shape == expected.shape and y.value.dtype == expected.dtype
    assert y.dvalue.shape == (0, 27)
