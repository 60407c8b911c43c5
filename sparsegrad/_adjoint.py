"""Reverse accumulation over numpy: the gradient of a scalar function, computed
by numpy operations on the arrays the function's own operations held.

:func:`gradient_and_value` runs ``f`` on :class:`Adjoint` arrays, which wrap
the arrays ``f`` would see (their ``inner``: ndarrays, forward values or the
recorder's light values) and record each operation with its vector-Jacobian
products; a sweep back over the record sums the products into the gradient.
Every product is numpy code on the inner arrays, so when they are forward
values the gradient is a forward value, and its Jacobian is the Hessian
(forward over reverse).  The ufuncs' partial derivatives are the ones of
:mod:`sparsegrad._ufunc_rules`, the table the Jacobians use; data movements
(reshapes, transposes, flips, rolls, pads, stacks...) are transposed by the
positions they move, found by running the same numpy function on integers.

Writes follow numpy where they can be reproduced exactly: into an array made
by ``np.zeros(..., like=x)`` and friends, by ``a[key] = b``, ``np.add.at``
and in-place operators; a write into a view, or into an array while a view of
it is alive, raises :class:`~sparsegrad.UnsupportedOperationError` instead of
diverging from numpy.
"""
import numbers
import weakref

import numpy as np
import scipy.sparse
from numpy.lib.array_utils import normalize_axis_tuple
from numpy.lib.mixins import NDArrayOperatorsMixin

from . import _ufunc_rules as rules
from ._errors import UnsupportedOperationError
from ._value import object_holder, value as _forward_value

__all__ = ["Adjoint", "AdjointArray", "gradient_and_value"]

_WHERE = "sparsegrad.hessian"


def refused(what, why):
    return UnsupportedOperationError("%s is not supported in functions differentiated twice "
                                     "(%s): %s" % (what, _WHERE, why))


class Tape:
    """The operations of one run: ``parents[node]`` holds ``(parent, vjp)``
    pairs, ``vjp(g)`` the contribution of the node's adjoint ``g`` to the
    parent's.  Nodes are numbered in the order they are made, so a parent's
    number is below its children's."""

    __slots__ = ("parents", "deferring")

    def __init__(self, deferring=False):
        self.parents = []
        # (True where the arrays carry derivatives, forward values: linear
        # operations and sums are then computed when something asks for them)
        self.deferring = deferring

    def add(self, parents):
        self.parents.append(tuple(parents))
        return len(self.parents) - 1

    def adjoint(self, output, seed, leaf):
        """The adjoint of node ``leaf`` of the scalar node ``output`` (None
        where the output does not depend on it), ``seed`` the output's."""
        adjoints = {output: seed}
        for node in range(output, leaf, -1):
            g = adjoints.pop(node, None)
            if g is None:
                continue
            for parent, vjp in self.parents[node]:
                contribution = vjp(g)
                previous = adjoints.get(parent)
                adjoints[parent] = (contribution if previous is None
                                    else previous + contribution)
        return adjoints.get(leaf)


class _Deferred:
    """A value computed once, when first asked for."""

    __slots__ = ("make", "value")

    def __init__(self, make):
        self.make = make
        self.value = None

    def __call__(self):
        if self.make is not None:
            self.value = self.make()
            self.make = None
        return self.value


def source(a):
    """A function giving ``a``'s inner array as it is now (a later in-place
    operation on ``a`` does not change what it gives)."""
    if a._pending is not None:
        return a._pending
    inner = a._inner
    return lambda: inner


def _snapshot(constant):
    """A constant as a deferred computation may read it later: the caller's
    arrays copied (they may change after the operation)."""
    return constant.copy() if type(constant) is np.ndarray and constant.ndim else constant


def inner_of(a):
    if isinstance(a, Adjoint):
        return a.inner
    if type(a) in (list, tuple):
        return type(a)(inner_of(b) for b in a)
    return a


def kept(key):
    """``key`` (an index or a mask) with its plain arrays copied: the sweep
    reads it after ``f`` returns, when the caller may have changed them."""
    if type(key) is tuple:
        return tuple(kept(k) for k in key)
    if type(key) is list:
        return np.array(key)
    if type(key) is np.ndarray:
        return key.copy()
    return inner_of(key)


def tape_of(items):
    tape = None
    for a in items:
        if type(a) in (list, tuple):
            found = tape_of(a)
        else:
            found = a.tape if isinstance(a, Adjoint) else None
        if found is not None:
            if tape is not None and found is not tape:
                raise ValueError("%s: arrays of two different evaluations were combined"
                                 % _WHERE)
            tape = found
    return tape


def _unbroadcast(g, shape):
    """``g`` summed over the axes that broadcasting added to ``shape``."""
    shape = tuple(shape)
    g_shape = np.shape(g)
    if g_shape == shape:
        return g
    lead = len(g_shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and g_shape[lead + i] != 1)
    if axes:
        g = np.sum(g, axis=axes)
    return np.reshape(g, shape)


def new(inner, tape, parents=(), base=None, array=False):
    """An :class:`Adjoint` (an :class:`AdjointArray` for n-d ``inner``, or an
    ``array`` made to be written, 0-d too: numpy's 0-d arrays, not scalars)."""
    kind = AdjointArray if array or np.ndim(inner) else Adjoint
    return kind(inner, tape, parents, base)


def dtype_of(a):
    dtype = getattr(a, "dtype", None)
    return dtype if isinstance(dtype, np.dtype) else np.result_type(a)


def zeros(shape, like):
    dtype = np.result_type(dtype_of(like), np.float64)
    return np.zeros(shape, dtype=dtype, like=like)


class Adjoint(NDArrayOperatorsMixin):
    """An array of a function being differentiated in reverse: its ``inner``
    array, and its node of the tape.  ``base``: the array it is a view of
    (writes through it are refused); ``views``: weak references to the views
    taken of it (writes into it are refused while one is alive)."""

    __slots__ = ("_inner", "_pending", "tape", "node", "base", "views", "spot",
                 "__weakref__")
    __array_priority__ = 2000

    def __init__(self, inner, tape, parents=(), base=None):
        self._inner = inner
        self._pending = None
        self.tape = tape
        self.node = tape.add(parents)
        self.base = None
        self.views = None
        self.spot = None
        if base is not None:
            root = base.base if base.base is not None else base
            self.base = root
            if root.views is None:
                root.views = []
            root.views.append(weakref.ref(self))

    @property
    def inner(self):
        """The array ``f`` would have held (computed when first asked for, for a
        reduction made pending)."""
        if self._pending is not None:
            self._inner = self._pending()
            self._pending = None
        return self._inner

    def _deferred(self, make):
        """Compute the inner array by ``make`` when first asked for."""
        self._pending = _Deferred(make)
        return self

    @inner.setter
    def inner(self, inner):
        self._inner = inner
        self._pending = None

    def plain(self):
        """The values, as a plain array (without computing derivatives)."""
        inner = self._inner
        return getattr(inner, "value", inner) if type(inner) is not np.ndarray else inner

    # ---- what numpy asks of an array ---------------------------------------
    shape = property(lambda self: np.shape(self._inner))
    ndim = property(lambda self: len(np.shape(self._inner)))
    size = property(lambda self: int(np.prod(np.shape(self._inner))))
    dtype = property(lambda self: self._inner.dtype)
    T = property(lambda self: np.transpose(self))
    mT = property(lambda self: np.swapaxes(self, -1, -2))
    real = property(lambda self: self)

    @property
    def imag(self):
        return new(zeros(self.shape, self.inner), self.tape)

    def __bool__(self):
        return bool(self.inner)

    def __array__(self, dtype=None, copy=None):
        # (numpy's "not an array" answer: scipy.sparse's ``A @ x`` then hands
        # the product to __rmatmul__, and a conversion to numbers reaches
        # __float__, which refuses)
        if dtype is not None and np.dtype(dtype) != np.dtype(object):
            raise refused("converting to a plain array", "make arrays that receive "
                           "values with np.zeros(shape, like=x)")
        return object_holder(self)

    def __float__(self):
        raise refused("converting to a number", "the value depends on the argument; "
                       "make arrays that receive values with np.zeros(shape, like=x)")

    __int__ = __complex__ = __index__ = __float__

    def __repr__(self):
        return "Adjoint(%r)" % (self.inner,)

    # ---- methods -----------------------------------------------------------
    # (the forward value's: numpy's method signatures onto numpy's functions,
    # which reach __array_function__; other ndarray methods by __getattr__)
    reshape = _forward_value.reshape
    transpose = _forward_value.transpose
    flatten = _forward_value.flatten

    def conj(self):
        return self

    def __getattr__(self, name):
        # (other ndarray methods as their numpy functions: a rule, or a refusal
        # naming the function)
        function = getattr(np, name, None)
        if name.startswith("_") or not hasattr(np.ndarray, name) or not callable(function):
            raise AttributeError("%r object has no attribute %r" % (type(self).__name__, name))
        return lambda *args, **kwargs: function(self, *args, **kwargs)

    conjugate = conj

    def astype(self, dtype, copy=True):
        dtype = np.dtype(dtype)
        if dtype.kind != "f" or dtype.itemsize < self.inner.dtype.itemsize:
            raise refused("astype(%s)" % dtype, "only floating types as wide as the "
                           "value's keep its derivatives")
        return np.copy(self) if copy else self

    # ---- writes --------------------------------------------------------------
    def _writable(self, what, allowed=None):
        if self.base is not None:
            raise refused("%s through a view" % what,
                           "write into the array itself (for example R[1:-1, 1:-1] = ... "
                           "instead of R.reshape(n, n)[1:-1, 1:-1] = ...)")
        if self.views:
            self.views = [ref for ref in self.views if ref() is not None]
        if self.views and any(ref() is not allowed for ref in self.views):
            raise refused("%s into an array while a view of it is alive" % what,
                           "take views after the writes, or copy them")

    def _rebind(self, result):
        """This array now holds ``result``'s values (an in-place operation).

        On a view by basic indexing of an array (``r[1:] += v`` does this on
        ``r[1:]`` before writing it back), the values are written into that
        array, as numpy's are."""
        if np.shape(result.inner) != self.shape:
            raise ValueError("%s: an in-place operation would change the shape %s to %s"
                             % (_WHERE, self.shape, np.shape(result.inner)))
        if self.base is not None and self.spot is not None:
            root = self.base
            root._write(self.spot, result, allowed=self)
            fresh = root[self.spot]
            self.inner, self.node = fresh.inner, fresh.node
            return
        self._writable("an in-place operation")
        self._inner, self._pending = result._inner, result._pending
        self.node = self.tape.add(((result.node, identity),))

    def _write(self, key, new, allowed=None):
        self._writable("a write", allowed)
        inner_key = kept(key)
        if not _basic(key) and _has_duplicates(self.shape, inner_key):
            raise refused("a write by an index with repeated entries",
                           "numpy keeps one of the values written to a place; write "
                           "each place once, or add with np.add.at")
        # (copied: the values of earlier operations stay as they were for the sweep)
        inner = _copied(self.inner)
        inner[inner_key] = inner_of(new)
        parents = [(self.node, lambda g: _cleared(g, inner_key))]
        if isinstance(new, Adjoint):
            new_shape = new.shape
            parents.append((new.node, lambda g: _unbroadcast(g[inner_key], new_shape)))
        self.inner = inner
        self.node = self.tape.add(parents)

    # ---- numpy's protocols ---------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.pop("out", None)
        if method == "at":
            return _ufunc_at(ufunc, *inputs, **kwargs)
        if method == "reduce" and ufunc is np.add:
            axis = kwargs.pop("axis", 0)
            keepdims = kwargs.pop("keepdims", False)
            no_options("numpy.add.reduce", kwargs)
            result = FUNCTIONS[np.sum](inputs[0], axis=axis, keepdims=keepdims)
        elif method != "__call__":
            raise refused("numpy.%s.%s" % (ufunc.__name__, method), "only calls of ufuncs, "
                           "np.add.reduce and np.add.at / np.subtract.at are differentiated")
        else:
            no_options("numpy." + ufunc.__name__, kwargs)
            result = apply_ufunc(ufunc, inputs)
        return into(out, result)

    def __array_function__(self, func, types, args, kwargs):
        if func in CREATION:
            # (``np.zeros(shape, like=x)``: numpy hands ``like`` over as self;
            # ``np.empty`` gives zeros, a write target all the same)
            return new(CREATION[func](*args, like=self.inner, **kwargs), self.tape,
                       array=True)
        rule = FUNCTIONS.get(func)
        if rule is None:
            raise refused("numpy." + func.__name__, "no rule for it yet; the Jacobian "
                          "functions (sparsegrad.jacobian) may support it")
        return rule(*args, **kwargs)

    def __pow__(self, other):
        return apply_ufunc(np.power, (self, other), operator=True)

    def __rpow__(self, other):
        return apply_ufunc(np.power, (other, self), operator=True)

    def __ipow__(self, other):
        if type(self) is Adjoint:
            return self ** other      # (a scalar: a new one, as numpy's)
        self._rebind(self ** other)
        return self



class AdjointArray(Adjoint):
    """An :class:`Adjoint` of one or more dimensions: indexed, iterated and
    written.  (A 0-d one has none of these, as a 0-d forward value: numpy
    must not take it for a sequence.)"""

    __slots__ = ()

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # ---- reads ---------------------------------------------------------------
    def __getitem__(self, key):
        inner_key = kept(key)
        result = self.inner[inner_key]
        shape, like = self.shape, self.inner
        if _basic(key):
            widths = _pad_widths(key, shape)
            if widths is not None:
                # (a block of the array: its transpose pads the adjoint with zeros)
                def vjp(g):
                    return np.pad(g, widths)
            else:
                def vjp(g):
                    z = zeros(shape, like)
                    z[inner_key] = g
                    return z
            items = key if type(key) is tuple else (key,)
            if np.ndim(result) == 0 and not any(k is Ellipsis for k in items):
                # (one element: numpy gives a scalar, no view of the array)
                return new(result, self.tape, ((self.node, vjp),))
            view = new(result, self.tape, ((self.node, vjp),), base=self, array=True)
            if self.base is None:
                view.spot = key
            return view

        def vjp(g):
            z = zeros(shape, like)
            np.add.at(z, inner_key, g)
            return z
        return new(result, self.tape, ((self.node, vjp),))

    def __setitem__(self, key, new):
        if (isinstance(new, Adjoint) and new.base is self and new.spot is not None
                and _basic(key) and _same_key(new.spot, key)):
            return     # (the values of a view written back where they are)
        self._write(key, new)


def _in_place(ufunc):
    def operator(self, other):
        result = apply_ufunc(ufunc, (self, other))
        if type(self) is Adjoint:
            return result     # (a scalar: numpy makes a new one, the old one unchanged)
        self._rebind(result)
        return self
    operator.__name__ = "__i%s__" % ufunc.__name__
    return operator


Adjoint.__iadd__ = _in_place(np.add)
Adjoint.__isub__ = _in_place(np.subtract)
Adjoint.__imul__ = _in_place(np.multiply)
Adjoint.__itruediv__ = _in_place(np.divide)


def identity(g):
    return g


def _copied(inner):
    """A copy of an array to write into, laid out as it is (numpy writes in
    place: a later reduction runs over the same memory order)."""
    if type(inner) is np.ndarray or isinstance(inner, _forward_value):
        return np.copy(inner, order="K")
    return inner.copy()


def _cleared(g, key):
    g = g.copy()
    g[key] = 0
    return g


def _basic(key):
    """True for keys of numpy's basic indexing (ints, slices, None, Ellipsis)."""
    items = key if type(key) is tuple else (key,)
    return all(k is None or k is Ellipsis or type(k) is slice
               or (isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_)))
               for k in items)


def _pad_widths(key, shape):
    """``np.pad``'s widths that put a block read by ``key`` (slices of step 1,
    one per axis or fewer) back in place, or None for other keys."""
    items = key if type(key) is tuple else (key,)
    if len(items) > len(shape) or any(type(k) is not slice or k.step not in (None, 1)
                                      for k in items):
        return None
    widths = []
    for k, n in zip(items + (slice(None),) * (len(shape) - len(items)), shape):
        start, stop, _ = k.indices(n)
        stop = max(stop, start)
        widths.append((start, n - stop))
    return tuple(widths)


def _same_key(a, b):
    a = a if type(a) is tuple else (a,)
    b = b if type(b) is tuple else (b,)
    return len(a) == len(b) and all(type(p) is type(q) and p == q for p, q in zip(a, b))


def _has_duplicates(shape, key):
    places = np.arange(int(np.prod(shape))).reshape(shape)[key]
    return np.unique(places).size != np.size(places)


def no_options(name, kwargs):
    for option, value in kwargs.items():
        if option == "dtype" and value is None:
            continue
        if option == "casting" and value == "same_kind":
            continue
        raise refused("%s(%s=...)" % (name, option), "the argument is not differentiated")


def into(out, result):
    """``result``, written into ``out`` (a ufunc's ``out=``) when given."""
    if out is None:
        return result
    target = out[0] if type(out) is tuple else out
    if type(out) is tuple and len(out) != 1:
        raise refused("out= of several arrays", "one output only")
    if not isinstance(target, Adjoint):
        if isinstance(result, Adjoint):
            raise refused("out= a plain numpy array", "the result depends on the argument; "
                           "make the array with np.zeros(shape, like=x)")
        target[...] = result
        return target
    if isinstance(result, Adjoint) and target.shape == result.shape:
        target._rebind(result)
    else:
        target[...] = result
    return target


# ---------------------------------------------------------------- ufuncs

def apply_ufunc(ufunc, inputs, operator=False, product=None):
    """``ufunc(*inputs)`` (by the operator ``**`` for ``operator``; by
    ``product``, np.dot, for a matrix product that is not np.matmul)."""
    tape = tape_of(inputs)
    if tape.deferring and _linear(ufunc, inputs):
        return _linear_deferred(ufunc, inputs, tape)
    inner = [inner_of(a) for a in inputs]
    if operator:
        value = inner[0] ** inner[1]
    elif ufunc is np.matmul:
        sparse = any(scipy.sparse.issparse(a) for a in inner)
        value = (matmul if product is None or sparse else product)(*inner)
    else:
        value = ufunc(*inner)
    kind = dtype_of(value).kind
    if ufunc in rules.PREDICATES or kind in "biu":
        return value
    if kind == "c":
        raise refused("numpy.%s of complex values" % ufunc.__name__,
                       "Hessians are of real functions of real arguments")
    traced = [i for i, a in enumerate(inputs) if isinstance(a, Adjoint)]
    shapes = [np.shape(a) for a in inner]
    inner = [a if isinstance(b, Adjoint) else _at_precision(a, value.dtype)
             for a, b in zip(inner, inputs)]
    parents = []
    if ufunc in rules.PIECEWISE_CONSTANT:
        pass
    elif ufunc in rules.SELECTIONS or ufunc in rules.SECOND_WHERE:
        if ufunc in rules.SELECTIONS:
            first = rules.SELECTIONS[ufunc](*inner, value)
            takes = {0: first, 1: ~np.asarray(first)}
        else:
            takes = {1: rules.SECOND_WHERE[ufunc](*inner, value)}
        for i in traced:
            if i in takes:
                parents.append((inputs[i].node, masked(takes[i], shapes[i])))
    elif ufunc is np.matmul:
        parents = [(inputs[i].node, matmul_transpose(i, inner)) for i in traced]
    elif ufunc in rules.DERIVATIVES:
        parents = _partial_parents(ufunc, inputs, inner, value)
    else:
        reason = rules.UNSUPPORTED.get(ufunc, "no derivative rule")
        raise refused("numpy." + ufunc.__name__, reason)
    return new(value, tape, parents)


def _linear(ufunc, inputs):
    """Whether ``ufunc(*inputs)`` is linear in its arrays that depend on x, with
    constant partial derivatives (which need no derivatives of the inputs)."""
    if ufunc in (np.add, np.subtract, np.negative, np.positive):
        return True
    traced = [isinstance(a, Adjoint) for a in inputs]
    if ufunc is np.multiply:
        return traced.count(True) == 1
    return ufunc is np.divide and traced == [True, False]


def _partial_parents(ufunc, inputs, operands, value):
    """``(node, vjp)`` of each input that is an :class:`Adjoint`: the adjoint
    times the table's partial, evaluated on ``operands`` (the inputs' arrays,
    constants in the result's precision) and ``value``."""
    parents = []
    for i, (partial, a) in enumerate(zip(rules.DERIVATIVES[ufunc], inputs)):
        if not isinstance(a, Adjoint):
            continue
        if partial is None:
            raise refused("numpy.%s with argument %d depending on x" % (ufunc.__name__, i),
                          "an integer argument carries no derivative")
        if callable(partial):
            partial = partial(*operands, value)
            if any(partial is c for c, b in zip(operands, inputs) if not isinstance(b, Adjoint)):
                partial = partial.copy()   # (the caller's array: it may change)
        elif partial == 0:
            continue
        parents.append((a.node, scaled(partial, np.shape(operands[i]))))
    return parents


def _linear_deferred(ufunc, inputs, tape):
    """A linear ufunc of arrays carrying derivatives: its value now, its inner
    array when asked for; the partials by the rules on the values (they are
    constants)."""
    plains = [a.plain() if isinstance(a, Adjoint) else a for a in inputs]
    value = ufunc(*plains)
    if dtype_of(value).kind not in "f":
        raise refused("numpy.%s of %s values" % (ufunc.__name__, dtype_of(value)),
                       "Hessians are of real functions of real arguments")
    plains = [p if isinstance(a, Adjoint) else _at_precision(p, value.dtype)
              for p, a in zip(plains, inputs)]
    parents = _partial_parents(ufunc, inputs, plains, value)
    sources = [source(a) if isinstance(a, Adjoint) else _snapshot(a) for a in inputs]
    deferred = [isinstance(a, Adjoint) for a in inputs]
    result = new(value, tape, parents)
    return result._deferred(lambda: ufunc(*[s() if d else s for s, d in zip(sources, deferred)]))


def _at_precision(constant, dtype):
    """A constant of a ufunc as its rules take it: numbers and narrower inexact
    or integer arrays in the result's precision (a float32 divisor's partial
    is then a float64 one)."""
    if isinstance(constant, (bool, np.bool_)) or scipy.sparse.issparse(constant):
        return constant
    if isinstance(constant, numbers.Number):
        return dtype.type(constant)
    if isinstance(constant, (np.ndarray, np.generic)) and constant.dtype != dtype and \
            constant.dtype.kind in "biuf" and np.can_cast(constant.dtype, dtype):
        return constant.astype(dtype)
    return constant


def masked(mask, shape):
    return lambda g: _unbroadcast(np.where(mask, g, 0.0), shape)


def scaled(partial, shape):
    if type(partial) in (int, float) and partial == 1:
        return lambda g: _unbroadcast(g, shape)
    return lambda g: _unbroadcast(g * partial, shape)


def matmul(a, b):
    if scipy.sparse.issparse(a) or scipy.sparse.issparse(b):
        return a @ b
    return np.matmul(a, b)


def matmul_transpose(i, inner):
    a, b = inner
    if np.ndim(a) > 2 or np.ndim(b) > 2:
        raise refused("numpy.matmul of stacks of matrices", "1-d and 2-d operands only")
    if i == 0:
        if np.ndim(a) == 1 and np.ndim(b) == 1:
            return lambda g: g * b
        if np.ndim(b) == 1:
            return lambda g: np.reshape(g, (-1, 1)) * np.reshape(b, (1, -1))
        if np.ndim(a) == 1:
            return lambda g: matmul(b, g)
        bt = b.T
        return lambda g: matmul(g, bt)
    if np.ndim(a) == 1 and np.ndim(b) == 1:
        return lambda g: g * a
    if np.ndim(a) == 1:
        return lambda g: np.reshape(a, (-1, 1)) * np.reshape(g, (1, -1))
    at = a.T
    return lambda g: matmul(at, g)


def _ufunc_at(ufunc, target, index, values=None):
    if ufunc not in (np.add, np.subtract):
        raise refused("numpy.%s.at" % ufunc.__name__, "np.add.at and np.subtract.at only")
    if not isinstance(target, Adjoint):
        raise refused("numpy.%s.at into a plain numpy array" % ufunc.__name__,
                       "make the array with np.zeros(shape, like=x)")
    target._writable("numpy.%s.at" % ufunc.__name__)
    inner_key = kept(index)
    inner = _copied(target.inner)
    ufunc.at(inner, inner_key, inner_of(values))
    parents = [(target.node, identity)]
    if isinstance(values, Adjoint):
        shape = values.shape
        sign = 1.0 if ufunc is np.add else -1.0
        parents.append((values.node, lambda g: _unbroadcast(sign * g[inner_key], shape)))
    target.inner = inner
    target.node = target.tape.add(parents)


#: array creation with ``like=``: what each makes
CREATION = {np.zeros: np.zeros, np.ones: np.ones, np.empty: np.zeros, np.full: np.full}

#: numpy function -> its rule, ``rule(*args, **kwargs)`` (an Adjoint, or a
#: plain result); filled by :mod:`sparsegrad._adjoint_functions`
FUNCTIONS = {}

def gradient_and_value(f, args, kwargs, position):
    """``(gradient, value)`` of the scalar ``f`` in its argument ``position``,
    of the kind of that argument (ndarray, forward value, light value).

    Raises ValueError when ``f`` returns more than one number.
    """
    x = args[position]
    tape = Tape(deferring=type(x) is not np.ndarray)
    leaf = new(x, tape)
    args = tuple(args[:position]) + (leaf,) + tuple(args[position + 1:])
    out = f(*args, **kwargs)
    inner = out.plain() if isinstance(out, Adjoint) else out
    if np.size(inner) != 1:
        raise ValueError("%s: f must return one number, got an array of shape %s"
                         % (_WHERE, np.shape(inner)))
    value = np.reshape(inner, ())
    if not isinstance(out, Adjoint):
        return zeros(np.shape(x), x), value
    seed = np.ones(np.shape(inner))
    # (node 0, the argument as it came: a write into x inside f makes x a later node)
    g = tape.adjoint(out.node, seed, 0) if out.node != 0 else seed
    if g is None:
        g = zeros(np.shape(x), x)
    return g, value
