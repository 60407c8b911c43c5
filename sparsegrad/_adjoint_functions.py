"""The numpy functions of :mod:`sparsegrad._adjoint`: each one's result and
its vector-Jacobian products, registered in ``_adjoint.FUNCTIONS`` when this
module is imported (:mod:`sparsegrad._hessian` imports it).

Sums, means, cumulative sums, ``max``/``min``, ``where``, ``clip``, products,
copies and creation ``*_like``, and functions composed of other operations
(``diff``, ``linalg.norm``, ``trace``...).  Data movements (``MOVEMENTS``:
reshapes, transposes, flips, rolls, pads, stacks...) have one rule: the same
numpy function run on integer positions says where each element went, and
the transpose gathers, scatters or adds them back.  Those numpy returns as
views (``VIEWS``) are marked so, for the write rules.

>>> import numpy as np
>>> from sparsegrad._adjoint import gradient_and_value
>>> gradient, value = gradient_and_value(lambda x: np.sum(np.roll(x, 1) * x[::-1]),
...                                      (np.arange(3.0),), {}, 0)
>>> gradient, float(value)
(array([2., 0., 4.]), 4.0)
"""
import numbers

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from ._adjoint import (FUNCTIONS, Adjoint, identity, inner_of, into, kept, masked,
                       matmul_transpose, new, no_options, refused, apply_ufunc, source,
                       tape_of, zeros)

__all__ = ["VIEWS", "MOVEMENTS"]


def _sum(a, axis=None, keepdims=False):
    if not isinstance(a, Adjoint):
        return np.sum(a, axis=axis, keepdims=keepdims)
    deferring = a.tape.deferring
    # (the sum of values that carry derivatives is made when an operation asks
    # for it: an energy's final sum is never asked for, only its value)
    value = np.sum(a.plain() if deferring else a.inner, axis=axis, keepdims=keepdims)
    shape = a.shape
    axes = tuple(range(len(shape))) if axis is None else normalize_axis_tuple(
        axis, len(shape))
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))

    def vjp(g):
        return np.broadcast_to(np.reshape(g, kept), shape)
    result = new(value, a.tape, ((a.node, vjp),))
    if deferring:
        values = source(a)
        result._deferred(lambda: np.sum(values(), axis=axis, keepdims=keepdims))
    return result


def _sum_function(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    no_options("numpy.sum", dict(kwargs, dtype=dtype))
    return into(out, _sum(a, axis, keepdims))


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    no_options("numpy.mean", dict(kwargs, dtype=dtype))
    shape = np.shape(inner_of(a))
    axes = tuple(range(len(shape))) if axis is None else normalize_axis_tuple(
        axis, len(shape))
    count = int(np.prod([shape[i] for i in axes]))
    return into(out, _sum(a, axis, keepdims) / count)


def _cumsum(a, axis=None, dtype=None, out=None):
    no_options("numpy.cumsum", {"dtype": dtype})
    if axis is None:
        a, axis = np.ravel(a), 0
    inner = inner_of(a)
    value = np.cumsum(inner, axis=axis)
    if not isinstance(a, Adjoint):
        return into(out, value)

    def vjp(g):
        return np.flip(np.cumsum(np.flip(g, axis), axis=axis), axis)
    return into(out, new(value, a.tape, ((a.node, vjp),)))


def _prod(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    """``np.prod`` along one axis or all: the partial of each factor is the
    product of the others, made of products before and after it (no
    division: right at zeros too)."""
    no_options("numpy.prod", dict(kwargs, dtype=dtype))
    inner = inner_of(a)
    value = np.prod(inner, axis=axis, keepdims=keepdims)
    if not isinstance(a, Adjoint):
        return into(out, value)
    shape = a.shape
    if a.size == 0:
        return into(out, new(value, a.tape, ((a.node, lambda g: zeros(shape, inner)),)))
    if axis is None:
        lines, axis_ = np.reshape(inner, (-1,)), 0
    elif isinstance(axis, numbers.Integral):
        lines, axis_ = inner, normalize_axis_tuple(axis, len(shape))[0]
    else:
        raise refused("numpy.prod(axis=%r)" % (axis,), "one axis or all")
    moved = np.moveaxis(lines, axis_, -1)
    ones = np.ones(np.shape(moved)[:-1] + (1,))
    before = np.concatenate([ones, np.cumprod(moved, axis=-1)[..., :-1]], axis=-1)
    after = np.flip(np.concatenate([ones, np.cumprod(np.flip(moved, -1), axis=-1)[..., :-1]],
                                   axis=-1), -1)
    others = np.moveaxis(before * after, -1, axis_)
    kept = tuple(1 if axis is None or i == axis_ else n for i, n in enumerate(np.shape(lines)))

    def vjp(g):
        return np.reshape(np.reshape(g, kept) * others, shape)
    return into(out, new(value, a.tape, ((a.node, vjp),)))


def _selection(argfunction, function):
    """``np.max`` / ``np.min``: each result the first element reaching it (as
    ``np.argmax`` finds it), a movement of the elements."""
    name = "numpy." + function.__name__

    def reduction(a, axis=None, out=None, keepdims=False, **kwargs):
        no_options(name, kwargs)
        inner = inner_of(a)
        value = function(inner, axis=axis, keepdims=keepdims)
        if not isinstance(a, Adjoint):
            return into(out, value)
        shape, size = a.shape, a.size
        axes = (tuple(range(len(shape))) if axis is None
                else normalize_axis_tuple(axis, len(shape)))
        plain = np.asarray(getattr(inner, "value", inner))
        positions = np.arange(1, size + 1, dtype=np.int64).reshape(shape)
        ends = tuple(range(-len(axes), 0))
        lines = np.moveaxis(plain, axes, ends).reshape(
            np.moveaxis(plain, axes, ends).shape[:len(shape) - len(axes)] + (-1,))
        chosen = argfunction(lines, axis=-1)[..., None]
        moved = np.moveaxis(positions, axes, ends).reshape(lines.shape)
        where = np.take_along_axis(moved, chosen, -1).reshape(-1)
        vjp = _gathered_back(where, 1, size, shape, inner)
        return into(out, new(value, a.tape, ((a.node, lambda g: vjp(np.reshape(g, -1))),)))
    return reduction


def _plain_result(function):
    """A numpy function whose result carries no derivative (indices, truth
    values), of the arrays' values."""
    def plain(*args, **kwargs):
        return function(*inner_of(list(args)), **{k: inner_of(v) for k, v in kwargs.items()})
    return plain


def _dot(a, b, out=None):
    if np.ndim(inner_of(a)) == 0 or np.ndim(inner_of(b)) == 0:
        return into(out, a * b)
    return into(out, apply_ufunc(np.matmul, (a, b), product=np.dot))


def _where(condition, *branches):
    if not branches:
        return np.nonzero(inner_of(condition))
    a, b = branches
    condition = kept(condition)
    value = np.where(condition, inner_of(a), inner_of(b))
    tape = tape_of((a, b))
    if tape is None:
        return value
    parents = []
    if isinstance(a, Adjoint):
        parents.append((a.node, masked(condition, a.shape)))
    if isinstance(b, Adjoint):
        parents.append((b.node, masked(np.logical_not(condition), b.shape)))
    return new(value, tape, parents)


def _clip(a, a_min=None, a_max=None, out=None, **kwargs):
    no_options("numpy.clip", kwargs)
    if isinstance(a_min, Adjoint) or isinstance(a_max, Adjoint):
        raise refused("numpy.clip with bounds depending on x", "write np.minimum and "
                       "np.maximum")
    inner = inner_of(a)
    value = np.clip(inner, inner_of(a_min), inner_of(a_max))
    if not isinstance(a, Adjoint):
        return into(out, value)
    return into(out, new(value, a.tape, ((a.node, masked(value == inner, a.shape)),)))


def _copy(a, *args, **kwargs):
    if not isinstance(a, Adjoint):
        return np.copy(a, *args, **kwargs)
    return new(a.inner.copy(), a.tape, ((a.node, identity),))


def _like(make):
    """``np.zeros_like`` and friends: a constant array of the forward kind,
    ready for writes (``empty_like`` gives zeros)."""
    def like(prototype, *args, **kwargs):
        return new(make(inner_of(prototype), *args, **kwargs), prototype.tape, array=True)
    return like


def _diff(a, n=1, axis=-1, prepend=None, append=None):
    if prepend is not None or append is not None:
        # (numpy's: a number becomes one slice along the axis)
        shape = list(np.shape(inner_of(a)))
        axis = normalize_axis_tuple(axis, len(shape))[0]
        shape[axis] = 1
        ends = [e if e is None or np.ndim(inner_of(e)) else np.broadcast_to(e, shape)
                for e in (prepend, append)]
        a = np.concatenate([e for e in (ends[0], a, ends[1]) if e is not None], axis=axis)
    for _ in range(n):
        ndim = np.ndim(inner_of(a))
        axis_ = axis % ndim
        upper = tuple(slice(1, None) if i == axis_ else slice(None) for i in range(ndim))
        lower = tuple(slice(None, -1) if i == axis_ else slice(None) for i in range(ndim))
        a = a[upper] - a[lower]
    return a


def _norm(x, ord=None, axis=None, keepdims=False):
    if ord not in (None, 2, "fro") or (ord == 2 and axis is None and np.ndim(inner_of(x)) > 1):
        raise refused("numpy.linalg.norm(ord=%r)" % (ord,), "the 2-norm of vectors and the "
                       "Frobenius norm only")
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))


def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    no_options("numpy.trace", {"dtype": dtype})
    return into(out, np.sum(np.diagonal(a, offset, axis1, axis2), axis=-1))


def _vdot(a, b):
    return np.sum(np.ravel(a) * np.ravel(b))


def _outer(a, b, out=None):
    return into(out, np.reshape(np.ravel(a), (-1, 1)) * np.reshape(np.ravel(b), (1, -1)))


def _einsum(subscripts, *operands, out=None, optimize=False, **kwargs):
    """``np.einsum`` in its subscripts form, each operand's subscripts without
    repeats (no diagonals) and no ellipsis: the transpose for an operand is
    the einsum of the adjoint with the others, broadcast along the letters
    only that operand sums over."""
    no_options("numpy.einsum", kwargs)
    if not isinstance(subscripts, str) or "." in subscripts:
        raise refused("numpy.einsum of this form", "subscripts as a string, without "
                      "ellipsis")
    spec = subscripts.replace(" ", "")
    terms, arrow, output = spec.partition("->")
    terms = terms.split(",")
    if not arrow:
        letters = "".join(terms)
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if len(terms) != len(operands) or any(len(set(t)) != len(t) for t in terms + [output]):
        raise refused("numpy.einsum(%r)" % subscripts, "a letter repeated in one operand's "
                      "or the output's subscripts (a diagonal)")
    inner = [inner_of(o) for o in operands]
    value = np.einsum(subscripts, *inner, optimize=optimize)
    tape = tape_of(operands)
    if tape is None:
        return into(out, value)
    parents = []
    for k, operand in enumerate(operands):
        if isinstance(operand, Adjoint):
            parents.append((operand.node, _einsum_transpose(k, terms, output, inner)))
    if len(operands) == 1 and isinstance(operands[0], Adjoint) and set(output) == set(terms[0]):
        # (numpy's einsum of one operand without a sum is a view of it: writes
        # through it, or into the operand while it lives, are refused)
        return into(out, new(value, tape, parents, base=operands[0], array=True))
    return into(out, new(value, tape, parents))


def _einsum_transpose(k, terms, output, inner):
    others = [t for j, t in enumerate(terms) if j != k]
    arrays = [a for j, a in enumerate(inner) if j != k]
    mine, shape = terms[k], np.shape(inner[k])
    kept = "".join(c for c in mine if c in output or any(c in t for t in others))
    spec = ",".join([output] + others) + "->" + kept
    expanded = tuple(n if c in kept else 1 for c, n in zip(mine, shape))

    def vjp(g):
        part = np.einsum(spec, g, *arrays)
        if kept == mine:
            return part
        return np.broadcast_to(np.reshape(part, expanded), shape)
    return vjp


# Data movements: each element of the result is one element of the arrays
# given (or a constant); transposed by the positions ``func`` moves.  Those
# numpy returns as views are marked so, for the write rules.
VIEWS = {np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis, np.squeeze,
          np.expand_dims, np.flip, np.fliplr, np.flipud, np.rot90, np.diagonal,
          np.broadcast_to, np.atleast_1d, np.atleast_2d, np.atleast_3d,
          np.diag}       # (a view of a 2-d array's diagonal; taken as one for 1-d too)
MOVEMENTS = VIEWS | {np.roll, np.tile, np.repeat, np.take, np.take_along_axis, np.pad,
                       np.triu, np.tril, np.concatenate, np.stack, np.hstack, np.vstack,
                       np.dstack, np.column_stack, np.append, np.delete, np.resize}


def _moved(func, args, kwargs):
    """``func(*args, **kwargs)`` of a data movement, and its transpose."""
    tape = tape_of(list(args) + list(kwargs.values()))
    inner_args, inner_kwargs = inner_of(list(args)), {k: inner_of(v) for k, v in kwargs.items()}
    value = func(*inner_args, **inner_kwargs)
    sources = []
    offset = [1]

    def positions(a):
        if isinstance(a, Adjoint):
            size = a.size
            sources.append((a, offset[0]))
            p = np.arange(offset[0], offset[0] + size, dtype=np.int64).reshape(a.shape)
            offset[0] += size
            return p
        if type(a) in (list, tuple):
            return type(a)(positions(b) for b in a)
        if isinstance(a, np.ndarray) or isinstance(a, numbers.Number):
            return np.zeros(np.shape(a), dtype=np.int64)
        return a
    # (the arrays moved are the first argument: a sequence of them for the stacks)
    moved_args = [positions(args[0])] + list(inner_args[1:])
    moved_kwargs = dict(inner_kwargs)
    if func is np.pad:
        moved_kwargs.pop("constant_values", None)
        mode = moved_kwargs.get("mode", args[2] if len(args) > 2 else "constant")
        if mode not in ("constant", "edge", "wrap", "reflect", "symmetric", "empty"):
            raise refused("numpy.pad(mode=%r)" % (mode,), "modes that copy values only")
        if mode == "empty":
            raise refused("numpy.pad(mode='empty')", "the padding is undefined")
    if func is np.append:
        moved_args = [positions(args[0]), positions(args[1])] + list(inner_args[2:])
    where = np.asarray(func(*moved_args, **moved_kwargs))
    if where.shape != np.shape(value) or where.dtype != np.int64:
        raise refused("numpy." + func.__name__ + " of these arguments",
                       "its result is not a movement of the arrays' elements")
    base = args[0] if func in VIEWS and isinstance(args[0], Adjoint) else None
    if tape is None:
        return value
    flat = where.reshape(-1)
    parents = [(a.node, _gathered_back(flat, start, a.size, a.shape, a.inner))
               for a, start in sources]
    # (``positions`` calls itself, a reference cycle that holds ``sources``
    # until the garbage collector runs: emptied, it holds no array alive, and
    # whether a view lives, which decides whether a write is refused, does
    # not depend on when the collector runs)
    sources.clear()
    return new(value, tape, parents, base=base, array=base is not None)


def _gathered_back(flat, start, size, shape, like):
    """The transpose of a movement for the array at positions ``start ..``."""
    mine = (flat >= start) & (flat < start + size)
    places = np.flatnonzero(mine)
    taken = flat[places] - start
    most = int(np.bincount(taken, minlength=size).max(initial=0))
    if taken.size == size and most == 1:
        order = np.empty(size, dtype=np.int64)
        order[taken] = places
        if len(flat) == size and np.array_equal(order, np.arange(size)):
            return lambda g: np.reshape(g, shape)     # (a reshape)
        return lambda g: np.reshape(np.reshape(g, -1)[order], shape)
    unique = most <= 1

    def vjp(g):
        z = zeros(size, like)
        if unique:
            z[taken] = np.reshape(g, -1)[places]
        else:
            np.add.at(z, taken, np.reshape(g, -1)[places])
        return np.reshape(z, shape)
    return vjp


FUNCTIONS.update({f: _plain_result(f) for f in (
    np.argmax, np.argmin, np.argsort, np.any, np.all, np.nonzero, np.count_nonzero,
    np.isclose, np.allclose, np.array_equal, np.searchsorted, np.flatnonzero, np.shape,
    np.ndim, np.size)})
FUNCTIONS.update({
    np.sum: _sum_function, np.mean: _mean, np.cumsum: _cumsum, np.dot: _dot,
    np.matmul: lambda a, b, **kw: into(kw.pop("out", None), apply_ufunc(np.matmul, (a, b))),
    np.where: _where, np.clip: _clip, np.copy: _copy, np.diff: _diff,
    np.prod: _prod, np.einsum: _einsum, np.linalg.norm: _norm, np.trace: _trace,
    np.vdot: _vdot, np.inner: _vdot, np.outer: _outer,
    np.zeros_like: _like(np.zeros_like), np.ones_like: _like(np.ones_like),
    np.empty_like: _like(np.zeros_like), np.full_like: _like(np.full_like),
    np.max: _selection(np.argmax, np.max), np.amax: _selection(np.argmax, np.max),
    np.min: _selection(np.argmin, np.min), np.amin: _selection(np.argmin, np.min),
})


def _movement(func):
    def rule(*args, **kwargs):
        return _moved(func, args, kwargs)
    rule.__name__ = "movement"
    return rule


FUNCTIONS.update({func: _movement(func) for func in MOVEMENTS})
