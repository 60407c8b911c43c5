"""Recorded evaluation: a function's operations recorded, its Jacobian replayed.

``sparsegrad.value_and_jacobian(f, trace=True)`` (and ``jacobian``) run ``f``
on light values (:class:`Traced`) that compute only numpy values and append
each operation to a tape.  The tape's structure (the operations, the shapes,
which scalars and index arrays they take) names a *program*, compiled once
per structure from the tape by symbolic forward differentiation
(:mod:`sparsegrad._compile_tape`): every entry of the Jacobian is an
expression of the operations' values, gathered at rows that depend only on
the structure, and the program computes those expressions for blocks of rows
at a time and writes them straight into the result
(``sparsegrad._fast.run_program``, compiled with the kernels).  This module
holds the light values, the tape and the :class:`Recorder` of a function's
programs.  A later
call with the same structure runs ``f`` on light values again (so its Python
control flow and its values are its own) and only runs the program: no
per-operation Jacobian bookkeeping, no intermediate row factors in memory.

What a call checks before it trusts a program: the structure of its tape
(operations, operands, shapes, slices, the exponent of every power, which
reads are by one index array) is the program's, every index array held the
entries the program was compiled with when it was read (compared with kept
copies at every read, as the eager path does: an array written in place,
between calls or between two reads, is caught), and the call's scalars
(``g * eta``, ``dt``: read at every call) choose as the program's guards say.
The program's result is the eager way's, bit for bit.  Anything the recorder
does not take (another numpy function, a reduction, a branch on a value, an
error raised by ``f``, what the compiler refuses) makes the call go the eager
way (``forward.seed``); the function may then run twice in that call.

>>> import numpy as np
>>> recorder = Recorder()
>>> f = lambda x: np.exp(x[1:]) * x[:-1]
>>> value, J = recorder.value_and_jacobian(f, np.array([0.0, 1.0, 2.0]), (), {})
>>> J.toarray()
array([[2.71828183, 0.        , 0.        ],
       [0.        , 7.3890561 , 7.3890561 ]])
>>> _ = recorder.value_and_jacobian(f, np.array([1.0, 1.0, 1.0]), (), {})
>>> recorder.info().hits, recorder.info().misses
(1, 1)
"""
import collections
import logging
import threading
import weakref

import numpy as np
import scipy.sparse
from numpy.lib.mixins import NDArrayOperatorsMixin

from . import _structure
from ._compile_tape import Untraceable, compile_tape, replay, same_index
from ._memory import pooled
from ._ufunc_rules import DERIVATIVES, SELECTIONS
from ._value import array_namespace, object_holder

__all__ = ["Traced", "Untraceable", "Recorder", "RecorderInfo", "compile_tape"]


_FLOAT64 = np.dtype(np.float64)
_BOOL = np.dtype(bool)
_VALUE_DTYPES = (_FLOAT64, _BOOL)
#: ufuncs recorded as masks (bool values without derivative)
_MASKS = frozenset((np.greater, np.greater_equal, np.less, np.less_equal, np.equal,
                    np.not_equal, np.logical_and, np.logical_or, np.logical_xor,
                    np.logical_not, np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert))
#: ufuncs of the eager way's rules that the recorder does not take: an integer
#: argument (ldexp), an exponent of another value (float_power; np.power's
#: is a scalar, recorded with its type)
_NOT_RECORDED = frozenset((np.ldexp, np.float_power, np.power))
#: ufuncs recorded with the eager way's rules
_RECORDED = frozenset(DERIVATIVES) - _NOT_RECORDED - _MASKS
#: programs kept for one structure, each for other choices by scalars
_VARIANTS = 4
#: functions of the shape of a value only
_SHAPE_ONLY = frozenset((np.shape, np.ndim, np.size, np.diag_indices_from,
                         np.tril_indices_from, np.triu_indices_from))
#: integers exact as float64: scalars the recorder takes
_EXACT_INTEGER = 2 ** 53
#: lists of ints read by their numbers, as the eager way's (``f[[0, -1]]``)
_MAX_LIST_KEY = 32


class Tape:
    """The operations of one call: ``entries`` (the structure, hashable),
    ``values`` (one ndarray per node: node 0 is the seed; None for a node
    not in ``keep``, when given), ``lengths`` (of every node), ``params``
    (the scalars, in order of use) and ``indexes`` (the index arrays
    gathered by).

    Only the values a program reads are kept (``keep``): the others are
    freed as the function goes on, as its own temporaries would be, and
    their memory is reused while it is still in the cache.
    """

    __slots__ = ("entries", "values", "lengths", "shapes", "params", "scalars", "indexes",
                 "keep", "_index_ids", "_known_indexes")

    def __init__(self, x, keep=None, known_indexes=()):
        self.entries = [("seed", x.shape)]
        self.values = [x.reshape(-1)]
        self.lengths = [x.size]
        self.shapes = [x.shape]
        self.params = []
        self.scalars = {}
        self.indexes = []
        self.keep = keep
        self._index_ids = {}
        self._known_indexes = known_indexes   # (the last program's copies, by number)

    @property
    def size(self):
        """The length of the seed (node 0)."""
        return self.lengths[0]

    def _node(self, entry, value):
        node = len(self.entries)
        self.entries.append(entry)
        # (a program reads a node's values in C order: an n-d value's as one
        # vector, a view of it where numpy made it contiguous)
        self.values.append((value if value.ndim == 1 else value.reshape(-1))
                           if self.keep is None or node in self.keep else None)
        self.lengths.append(value.size)
        self.shapes.append(value.shape)
        return node

    def add(self, entry, value, dtype=_FLOAT64):
        """A node of a value of ``dtype`` (float64, or bool for a mask, not 0-d).

        A 0-d value is a number to the eager way (numpy's scalar, its partials
        scalars): its value is also a scalar of the call, ``scalars[node]``
        the number of its ``params`` entry, read at every call."""
        if value.dtype != dtype or (value.ndim == 0 and dtype is not _FLOAT64):
            raise Untraceable("a result of dtype %s and shape %s" % (value.dtype, value.shape))
        node = self._node(entry, value)
        if value.ndim == 0:
            value = np.float64(value)
            self.scalars[node] = len(self.params)
            self.params.append(value)
        return Traced(value, node, self)

    def constant(self, array):
        """Node of a constant float64 or bool array (its values read at every call)."""
        return self._node(("const", array.shape), array)

    def index(self, array):
        """The number of an index array read now, whose entries as they are now
        ``indexes`` keeps (the last program's equal copy, or a copy).

        Reads by one array object share their matrices in the eager way, by
        two equal ones not; an array written between two reads is another
        (the eager way compares it with its copy at every read, and so does
        this: the Jacobian is that of the entries read)."""
        known = self._index_ids.get(id(array))
        if known is not None and same_index(array, self.indexes[known[1]]):
            return known[1]
        k = len(self.indexes)
        copy = self._known_indexes[k] if k < len(self._known_indexes) else None
        if copy is None or not same_index(array, copy):
            copy = np.array(array, dtype=np.int64)
        # (the array held to the call's end: no other takes its id meanwhile)
        self._index_ids[id(array)] = (array, k)
        self.indexes.append(copy)
        return k

    def holds(self, nodes):
        """Whether the values of ``nodes`` were kept."""
        return all(self.values[node] is not None for node in nodes)

    def structure(self, output):
        return StructureKey((tuple(self.entries), output))


class StructureKey(tuple):
    """The structure of a tape with ``output`` as its result: a tuple hashed once
    (a call looks it up in several dicts; a few microseconds a hash)."""

    def __hash__(self):
        known = self.__dict__.get("hash")
        if known is None:
            known = self.__dict__["hash"] = tuple.__hash__(self)
        return known


def _precise(x):
    """A scalar operand as the eager way computes with it (``np.float64`` or
    ``np.int64``), or None for what the recorder does not take as a scalar
    (other number types, integers past 2**53)."""
    kind = type(x)
    if kind is float or kind is np.float64:
        return np.float64(x)
    if (kind is int or kind is np.int64) and -_EXACT_INTEGER <= x <= _EXACT_INTEGER:
        return np.int64(x)
    return None


def _plain_integer(x):
    """``x`` as a Python int where numpy's data movements take it as one (not a bool)."""
    if type(x) is int or (isinstance(x, np.integer) and not isinstance(x, np.bool_)):
        return int(x)
    return None


def _basic_form(key):
    """``key`` of ints, slices (of ints and None), None and Ellipsis, as a
    hashable tuple that :func:`sparsegrad._compile_tape` turns back into it;
    None for another key."""
    form = []
    for part in key if type(key) is tuple else (key,):
        if part is None or part is Ellipsis:
            form.append(part)
        elif _plain_integer(part) is not None:
            form.append(_plain_integer(part))
        elif type(part) is slice and all(b is None or _plain_integer(b) is not None
                                         for b in (part.start, part.stop, part.step)):
            form.append(("slice",) + tuple(b if b is None else _plain_integer(b)
                                           for b in (part.start, part.stop, part.step)))
        else:
            return None
    return tuple(form)


#: numpy functions that move the data of their first argument (as the eager
#: way's ``_functions._single``), recorded by plain arguments
_MOVES = frozenset((np.transpose, np.moveaxis, np.swapaxes, np.flip, np.fliplr, np.flipud,
                    np.roll, np.repeat, np.tile, np.broadcast_to, np.rot90, np.diagonal,
                    np.matrix_transpose, np.permute_dims))


#: numpy's creation functions that take ``like=`` (the eager way's
#: ``_functions.CREATION``)
_CREATION = frozenset((np.zeros, np.ones, np.full, np.empty))


#: numpy functions that join a sequence of arrays (as the eager way's
#: ``_functions._sequence_function``)
_JOINS = frozenset((np.concatenate, np.stack, np.hstack, np.vstack, np.dstack,
                    np.column_stack))


def _plain_arguments(args, kwargs):
    """``(args, kwargs)`` made of ints, strings, None, bools and tuples and lists
    of them, as a hashable form that :func:`_arguments` turns back into them
    (types kept: what the eager way keys its row numbers by); None otherwise."""
    def plain(v):
        if type(v) is bool:
            return ("bool", v)
        if v is None or type(v) is str:
            return v
        if _plain_integer(v) is not None:
            return _plain_integer(v)
        if type(v) in (tuple, list):
            parts = tuple(plain(part) for part in v)
            if any(part is _NOT_PLAIN for part in parts):
                return _NOT_PLAIN
            return (type(v).__name__,) + parts
        return _NOT_PLAIN
    positional = tuple(plain(v) for v in args)
    keywords = tuple((k, plain(v)) for k, v in sorted(kwargs.items()))
    if any(v is _NOT_PLAIN for v in positional) or any(v is _NOT_PLAIN for _, v in keywords):
        return None
    return positional, keywords


_NOT_PLAIN = object()


def _is_basic_tuple(key):
    """Whether ``key`` is a tuple, an int, None or Ellipsis (a 1-d value's basic
    read of another form than one slice)."""
    return (type(key) is tuple or key is None or key is Ellipsis
            or _plain_integer(key) is not None)


def _plain_widths(widths):
    """``np.pad``'s widths as ints or nested tuples and lists of ints, else None."""
    if _plain_integer(widths) is not None:
        return _plain_integer(widths)
    if type(widths) in (tuple, list):
        parts = [_plain_widths(w) for w in widths]
        return None if None in parts else parts
    return None


def _hashable(nested):
    """Lists nested in ``nested`` as tuples."""
    return tuple(_hashable(v) for v in nested) if type(nested) is list else nested


def _in_place(ufunc):
    """``x <op>= y`` for :class:`Traced`: ``x[...] = x <op> y``, as numpy's
    ufunc with ``out=x`` (and the eager way's) writes it."""
    def method(self, other):
        self[...] = self._apply(ufunc, (self, other))
        return self
    return method


def _operators(ufunc):
    """The operator and its reflection of a binary ufunc, for :class:`Traced`."""
    def operator(self, other):
        return self._apply(ufunc, (self, other))

    def reflected(self, other):
        return self._apply(ufunc, (other, self))
    return operator, reflected


class Traced(NDArrayOperatorsMixin):
    """A light value: a float64 (or bool) ndarray, not 0-d, and its node on a
    :class:`Tape` (which holds its values as one C-order vector).

    Takes the elementwise ufuncs of the eager way's rule table
    (``sparsegrad._ufunc_rules.DERIVATIVES``; power by a scalar),
    comparisons and logical operations (bool masks, without derivative) and
    ``np.where`` of a mask, operands broadcast as numpy's, ``reshape`` and
    ``ravel`` in C order, reads by ints, slices, None and Ellipsis, ``np.pad``
    by zeros, transposes and the other movements of :data:`_MOVES` and the
    joins of :data:`_JOINS` by plain arguments, and of 1-d values reads by
    integer arrays and lists; values made by the creation functions of
    :data:`_CREATION` with ``like=``, copies, writes and in-place operators,
    through views too, with numpy's aliasing (see :meth:`__setitem__`);
    anything else raises :class:`Untraceable`.
    """

    # (base: the value whose array this one is a view of, as numpy's view
    # would be, None for its own array; steps: the reads that make this one's
    # array of the base's; views:
    # weak references to the views of this one's array, read again from it
    # after each write into it)
    __slots__ = ("value", "node", "tape", "base", "steps", "views", "__weakref__")

    def __init__(self, value, node, tape):
        self.value = value
        self.node = node
        self.tape = tape
        self.base = self.steps = self.views = None

    def _view(self, result, step):
        """``result``, a view of this value's array made by ``step`` (a form of
        :func:`sparsegrad._compile_tape.replay`), as one: a write into
        the array it views reads it again, a write through it goes there."""
        if self.base is None:
            base, steps = self, ()
        else:
            base, steps = self.base, self.steps
        result.base = base
        result.steps = steps + (step,)
        views = base.views
        if views is None:
            base.views = [weakref.ref(result)]
        else:
            views.append(weakref.ref(result))
            if len(views) & 255 == 0:  # (a loop of temporary views: the dead go)
                base.views = [ref for ref in views if ref() is not None]
        return result

    def _viewed(self, result, step, array):
        """``result``, as a view of this value when numpy made its array
        (``array``: numpy's, a 0-d one too, whose value ``result`` holds as a
        scalar) one."""
        if self.base is not None and type(self.value) is not np.ndarray:
            # (a 0-d view holds its value as a number, numpy's as an array: its
            # reads are views of its base where numpy's would be)
            base = self.base.value
            if np.may_share_memory(replay(self.steps + (step,), base), base):
                return self._view(result, step)
        elif np.may_share_memory(array, self.value):
            return self._view(result, step)
        return result

    shape = property(lambda self: self.value.shape)
    size = property(lambda self: self.value.size)
    ndim = property(lambda self: self.value.ndim)
    dtype = property(lambda self: _FLOAT64)

    def __len__(self):
        return self.value.shape[0]

    def _operand(self, x):
        """``(structure, value)`` of an operand of an operation on this tape."""
        tape = self.tape
        if type(x) is Traced:
            if x.tape is not tape:
                raise Untraceable("a value of another recording")
            return ("n", x.node), x.value
        precise = _precise(x)
        if precise is not None:
            tape.params.append(precise)
            return ("p", len(tape.params) - 1), x
        if type(x) is np.ndarray and x.dtype in _VALUE_DTYPES and x.ndim:
            # (of any shape numpy broadcasts)
            return ("n", tape.constant(x)), x
        raise Untraceable("an operand of type %s" % type(x).__name__)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise Untraceable("%s.%s" % (ufunc.__name__, method))
        return self._apply(ufunc, inputs)

    def _apply(self, ufunc, inputs):
        """``ufunc(*inputs)``, recorded (one of its inputs is ``self``)."""
        if ufunc in _RECORDED and len(inputs) == 2:
            # (the common case, without the generic one's generator and zip)
            s0, v0 = self._operand(inputs[0])
            s1, v1 = self._operand(inputs[1])
            return self.tape.add(("ufunc", ufunc, (s0, s1)), ufunc(v0, v1))
        if ufunc in SELECTIONS and len(inputs) == 2:
            return self._selected(ufunc, inputs)
        if ufunc in _MASKS:
            # (a comparison or a logical operation: a mask, without derivative,
            # for np.where and products)
            structures, values = zip(*(self._operand(x) for x in inputs))
            return self.tape.add(("mask", ufunc.__name__, structures), ufunc(*values), _BOOL)
        if ufunc is np.power:
            return self._power(*inputs)
        if ufunc not in _RECORDED:
            raise Untraceable(ufunc.__name__)
        structures, values = zip(*(self._operand(x) for x in inputs))
        return self.tape.add(("ufunc", ufunc, structures), ufunc(*values))

    def _selected(self, ufunc, inputs):
        """``np.maximum`` and the other selections, as the eager way
        differentiates them: the rows of the first operand where the rule's
        mask holds, of the second elsewhere (a node of the mask, and one of
        the selection, holding the ufunc's value)."""
        (sa, va), (sb, vb) = self._operand(inputs[0]), self._operand(inputs[1])
        out = ufunc(va, vb)
        if np.ndim(out) == 0:
            raise Untraceable("np.%s of numbers" % ufunc.__name__)
        first = np.ascontiguousarray(np.broadcast_to(SELECTIONS[ufunc](va, vb, out), out.shape))
        mask = self.tape.add(("mask", ufunc.__name__, (sa, sb)), first, _BOOL)
        return self.tape.add(("select", ("n", mask.node), sa, sb), out)

    def _power(self, base, exponent, operator=False):
        """``np.power(base, exponent)``, or numpy's operator ``base ** exponent``,
        which computes ``x ** 0.5``, ``x ** -1`` and ``x ** 2`` by sqrt,
        reciprocal and square (the eager way's values too); the exponent is
        structure (the rule differs with it), kept with its type."""
        precise = _precise(exponent)
        if type(base) is not Traced or precise is None:
            raise Untraceable("power of other than a value and a scalar")
        structure, value = self._operand(base)
        kind = "int" if type(precise) is np.int64 else "float"
        if operator and base.base is not None and type(value) is not np.ndarray:
            # (a 0-d view is numpy's 0-d array, whose operator is the ufunc's loop,
            # held here as a number, whose operator is the C library's pow: on
            # AVX-512 a rounding apart)
            value = np.asarray(value)
        return self.tape.add(("power", structure, float(precise), kind),
                             value ** exponent if operator else np.power(value, exponent))

    # (the common operators straight to the recording, past numpy's dispatch:
    # what np.multiply(self, other) would do with the operands taken here)
    __add__, __radd__ = _operators(np.add)
    __sub__, __rsub__ = _operators(np.subtract)
    __mul__, __rmul__ = _operators(np.multiply)
    __truediv__, __rtruediv__ = _operators(np.divide)
    __iadd__ = _in_place(np.add)
    __isub__ = _in_place(np.subtract)
    __imul__ = _in_place(np.multiply)
    __itruediv__ = _in_place(np.divide)

    def __pow__(self, other):
        return self._power(self, other, operator=True)

    def __neg__(self):
        return self._apply(np.negative, (self,))

    def __getitem__(self, key):
        if self.value.ndim != 1 or _is_basic_tuple(key):
            return self._basic(key)
        n = self.value.shape[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            value = self.value[key]
            result = self.tape.add(("slice", self.node, start, stop, step, value.shape[0]),
                                   value)
            # (numpy's view, but for an empty one: a new array, as the eager way holds it)
            return self._view(result, ("range", start, stop, step)) if value.shape[0] else result
        if type(key) is list and all(type(k) is int for k in key):
            # (the eager way names the reads of short lists by their numbers,
            # of longer ones by nothing: each its own matrix)
            name = ("list", (n,), tuple(key)) if 0 < len(key) <= _MAX_LIST_KEY else ("own",)
            key = np.array(key, dtype=np.int64)
        elif type(key) is np.ndarray and key.ndim == 1 and key.dtype.kind in "iu":
            name = None
        else:
            raise Untraceable("a read by %s" % type(key).__name__)
        value = self.value[key]      # (numpy's IndexError for an index out of range)
        return self.tape.add(("gather", self.node, self.tape.index(key), key.shape[0], name),
                             value)

    def _basic(self, key):
        """``self[key]`` by ints, slices, None and Ellipsis: a gather by the
        rows the key reads, which the key and the shape decide."""
        form = _basic_form(key)
        if form is None:
            raise Untraceable("a read of an n-d value by other than ints, slices, None "
                              "and Ellipsis")
        value = self.value[key]  # (numpy's errors)
        return self._viewed(self.tape.add(("basic", self.node, form), value),
                            ("basic", form), value)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return self._reshaped(np.reshape(self.value, shape, order=order), order)

    def ravel(self, order="C"):
        return self._reshaped(np.ravel(self.value, order=order), order)

    def _reshaped(self, value, order):
        """A reshape of this value in C order: its Jacobian as it is, the
        values in the same order."""
        if order != "C":
            raise Untraceable("a reshape in order %r" % (order,))
        return self._viewed(self.tape.add(("reshape", self.node, value.shape), value),
                            ("reshape", value.shape), value)

    T = property(lambda self: self._moved(np.transpose, (self,), {}))

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)):
            axes = axes[0]
        return self._moved(np.transpose, (self, axes or None), {})

    def swapaxes(self, axis1, axis2):
        return self._moved(np.swapaxes, (self, axis1, axis2), {})

    def _moved(self, func, args, kwargs):
        """``func(*args, **kwargs)``, a movement of the data of a value (the
        first argument) by plain arguments: a gather by the rows it moves,
        which ``func``, the arguments and the shape decide."""
        a = args[0] if args else None
        form = _plain_arguments(args[1:], kwargs)
        if type(a) is not Traced or a.tape is not self.tape or form is None:
            raise Untraceable("np.%s other than of a value by ints, strings, None and "
                              "tuples of them" % func.__name__)
        value = func(a.value, *args[1:], **kwargs)
        if type(value) is not np.ndarray:
            raise Untraceable("np.%s giving a %s" % (func.__name__, type(value).__name__))
        return a._viewed(self.tape.add(("move", a.node, func, form), value),
                         ("move", func, form), value)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.reshape or func is np.ravel:
            a, rest = (args[0], args[1:]) if args else (kwargs.get("a"), ())
            keywords = {k: v for k, v in kwargs.items() if k != "a"}
            if type(a) is Traced and a.tape is self.tape:
                if func is np.ravel and set(keywords) <= {"order"}:
                    return a.ravel(*rest, **keywords)
                if func is np.reshape and set(keywords) <= {"order", "shape"}:
                    if "shape" in keywords:
                        rest = (keywords.pop("shape"),) + rest
                    return a.reshape(*rest, **keywords)
            raise Untraceable("np.%s other than of a value" % func.__name__)
        if func in _CREATION:
            return self._created(func, args, kwargs)
        if func in _SHAPE_ONLY:
            # (what the shapes decide, which the structure holds)
            return func(*[a.value if type(a) is Traced else a for a in args], **kwargs)
        if func is np.copy and len(args) == 1 and not kwargs and type(args[0]) is Traced:
            return args[0].copy()
        if func is np.pad:
            return self._pad(*args, **kwargs)
        if func is np.diff:
            return self._diff(*args, **kwargs)
        if func in _MOVES and not (func is np.roll and getattr(args[0] if args else None,
                                                                "ndim", 0) == 1):
            return self._moved(func, args, kwargs)
        if func in _JOINS:
            return self._joined(func, args, kwargs)
        if func is np.where and len(args) == 3 and not kwargs:
            condition, a, b = args
            if not (type(condition) is Traced and condition.value.dtype == _BOOL
                    or type(condition) is np.ndarray and condition.dtype == _BOOL):
                raise Untraceable("np.where of another condition than a mask")
            (sc, c), (sa, va), (sb, vb) = (self._operand(x) for x in (condition, a, b))
            return self.tape.add(("where", sc, sa, sb), np.where(c, va, vb))
        if func is np.roll and len(args) == 2:
            a, shift = args
            shift = _plain_integer(shift)
            axis = kwargs.get("axis", 0)
            if (type(a) is Traced and a.tape is self.tape and shift is not None
                    and a.value.ndim == 1
                    and set(kwargs) <= {"axis"} and (axis is None or _plain_integer(axis) == 0)):
                n = a.value.shape[0]
                # (a gather by a map the shift decides: structure, no index array;
                # named by the arguments as given, as the eager way names it)
                keywords = tuple((k, None if v is None else 0) for k, v in sorted(kwargs.items()))
                return self.tape.add(("roll", a.node, shift, n, keywords),
                                     np.roll(a.value, shift, **kwargs))
            raise Untraceable("np.roll other than of a value by an integer")
        raise Untraceable(getattr(func, "__name__", str(func)))

    def _joined(self, func, args, kwargs):
        """``np.concatenate``, ``np.stack`` and the like of values and constants
        by plain arguments: a gather from the values' Jacobians stacked, by
        the rows the function joins (as the eager way's ``_move``)."""
        if not args or type(args[0]) not in (list, tuple):
            raise Untraceable("np.%s of other than a list or tuple" % func.__name__)
        rest = list(args[1:]) + list(kwargs.values())
        form = _plain_arguments(args[1:], kwargs)
        if form is None or any(isinstance(v, np.integer) for v in rest) \
                or {"dtype", "casting", "out"} & set(kwargs):
            # (a numpy integer axis is another path of the eager way's)
            raise Untraceable("np.%s by other than Python ints, strings, None and tuples"
                              % func.__name__)
        parts, values = [], []
        for part in args[0]:
            if type(part) in (list, tuple) and all(
                    type(v) in (float, int, np.float64) for v in part):
                # ([0.0], [g * h]: numbers, as numpy's float64 array of them)
                part = np.array(part, dtype=np.float64)
            if type(part) is Traced and part.tape is self.tape:
                parts.append(part.node)
                values.append(part.value)
            elif type(part) is np.ndarray and part.dtype == _FLOAT64:
                parts.append(self.tape.constant(part))
                values.append(part)
            else:
                raise Untraceable("np.%s of a %s" % (func.__name__, type(part).__name__))
        return self.tape.add(("join", func, tuple(parts), form),
                             func(values, *args[1:], **kwargs))

    def _diff(self, a, n=1, axis=-1, **kwargs):
        """``np.diff`` of a value, as the eager way differentiates it: ``n``
        differences of reads by slices along ``axis``."""
        if (type(a) is not Traced or a.tape is not self.tape or kwargs
                or type(n) is not int or type(axis) is not int):
            raise Untraceable("np.diff other than of a value by Python ints")
        result = np.diff(a.value, n, axis)   # (numpy's errors)
        if n == 0:
            return a
        if not result.size:
            raise Untraceable("np.diff with an empty result")
        axis = np.lib.array_utils.normalize_axis_index(axis, a.value.ndim)
        x = a
        for _ in range(n):
            upper = [slice(None)] * a.value.ndim
            lower = [slice(None)] * a.value.ndim
            upper[axis] = slice(1, None)
            lower[axis] = slice(None, -1)
            x = x[tuple(upper)] - x[tuple(lower)]
        return x

    def _pad(self, array, pad_width, mode="constant", **kwargs):
        """``np.pad`` by zeros: a gather whose rows the pad widths and the shape
        decide, the zeros added empty rows."""
        if type(array) is not Traced or array.tape is not self.tape or mode != "constant" \
                or kwargs:
            raise Untraceable("np.pad other than of a value by zeros")
        widths = _plain_widths(pad_width)
        if widths is None:
            raise Untraceable("np.pad by widths other than ints")
        value = np.pad(array.value, widths)
        # (the widths as the eager way keys them: numpy's array of them as lists)
        widths = np.asarray(widths).tolist()
        return self.tape.add(("pad", array.node, _hashable(widths)), value)

    def __getattr__(self, name):
        # (a method of ndarrays the light values do not have -- reshape, sum,
        # astype: the eager way has them; protocol probes get AttributeError)
        if name.startswith("__"):
            raise AttributeError(name)
        raise Untraceable("the attribute %r" % name)

    def __array_namespace__(self, *, api_version=None):
        # (the eager way's namespace: its functions dispatch to this class)
        return array_namespace(api_version)

    def __array__(self, dtype=None, copy=None):
        # (the eager way's answer: a 0-d object array holding the value, so
        # that np.array([...]) of values is an object array of them, stacked
        # as the function's result; a numeric conversion is refused)
        if dtype is not None and np.dtype(dtype) != np.dtype(object):
            raise Untraceable("a conversion to an ndarray")
        return object_holder(self)

    def __bool__(self):
        raise Untraceable("a branch on a value")

    def __float__(self):
        raise Untraceable("a conversion to float")

    def __iter__(self):
        raise Untraceable("an iteration")

    def __setitem__(self, key, new):
        """``self[key] = new`` by ints, slices, None and Ellipsis (of a 1-d value,
        by an integer index array or list too), of a value, a number or a
        constant: a new node of the root (this value, or the one it is a view
        of), its array written, as the eager way's write into its copy; the
        root's live views are read from it again."""
        tape = self.tape
        if self.value.ndim == 1 and not _is_basic_tuple(key) and type(key) is not slice:
            if type(key) is list and key and all(type(k) is int for k in key):
                key = np.array(key, dtype=np.int64)
            if not (type(key) is np.ndarray and key.ndim == 1 and key.dtype.kind in "iu"):
                raise Untraceable("a write by %s" % type(key).__name__)
            form = ("index", tape.index(key))
        else:
            form = _basic_form(key)
            if form is None:
                raise Untraceable("a write by other than ints, slices, None and Ellipsis")
            form = ("basic", form)
        source, written = self._operand(new)
        root = self if self.base is None else self.base
        # (in the root's layout, so that the view's reads give numpy's view of it)
        value = root.value.copy(order="K")
        if self.base is None:
            value[key] = written   # (numpy's errors)
        else:
            region = replay(self.steps, value)
            if not np.shares_memory(region, value):
                raise Untraceable("a write through a view numpy would not make again")
            region[key] = written
            form = ("view", self.steps, form)
        views = [view for view in (ref() for ref in root.views or ()) if view is not None]
        result = tape.add(("write", root.node, form, source), value)
        root.value, root.node = result.value, result.node
        # (numpy's views show the write: each is read again from the root,
        # its Jacobian's rows read where the eager way's stale view reads them)
        for view in views:
            again = tape.add(("reread", root.node, view.steps), replay(view.steps, root.value))
            view.value, view.node = again.value, again.node
        root.views = [weakref.ref(view) for view in views] or None

    def copy(self):
        return self.tape.add(("copy", self.node), self.value.copy())

    def _created(self, func, args, kwargs):
        """``np.zeros(shape, like=x)`` and the like, float64: a value of zero
        Jacobian that writes assemble (``np.empty`` gives zeros, as the eager
        way's)."""
        if (set(kwargs) - {"dtype", "order", "device"} or kwargs.get("device") is not None
                or kwargs.get("order", "C") != "C"
                or (func is np.full and type(args[1] if len(args) > 1 else None) is Traced)):
            raise Untraceable("np.%s other than of a shape (and fill) in C order"
                              % func.__name__)
        array = (np.zeros if func is np.empty else func)(*args, **kwargs)
        if array.dtype != _FLOAT64 or not array.ndim:
            raise Untraceable("np.%s of dtype %s and shape %s" % (func.__name__, array.dtype,
                                                                  array.shape))
        return self.tape.add(("created", array.shape), array)


# ---------------------------------------------------------------- programs

#: structures whose programs are kept at once, over every function
MAX_STRUCTURES = 32
# (a program depends on its tape's structure, the key: operations, operands,
# lengths (those a negative index counts from among them), slices, exponents,
# shifts; on the contents of the index arrays and on its guards on the
# scalars, both checked at every call; not on the function, its values, its
# scalars or its constants, read at every call.  So a function made anew at
# every step of a time stepper, or every Newton solve's own wrapper, finds the
# programs of the last: a structure -> its programs, each for other choices
# by the scalars, least recently used first)
_programs = collections.OrderedDict()
_programs_lock = threading.Lock()
_programs_state = {"clears": 0}


def _programs_of(key):
    """The programs kept for structure ``key`` (a tuple, maybe empty), made the
    most recently used; all are forgotten after ``clear_structure_cache``."""
    with _programs_lock:
        if _programs_state["clears"] != _structure._state["clears"]:
            _programs_state["clears"] = _structure._state["clears"]
            _programs.clear()
        variants = _programs.get(key, ())
        if variants:
            _programs.move_to_end(key)
        return variants


def _keep_program(key, program, tape):
    """Keep ``program`` first among the programs of ``key`` (with those of the
    same index arrays), within :data:`MAX_STRUCTURES` structures and the bytes
    of :func:`sparsegrad.structure_cache_limit` (least recently used forgotten
    first; the newest is kept whatever its size)."""
    with _programs_lock:
        variants = _programs.get(key, ())
        _programs[key] = (program,) + tuple(
            v for v in variants if v.same_indexes(tape))[:_VARIANTS - 1]
        _programs.move_to_end(key)
        limit = _structure.structure_cache_limit()
        while len(_programs) > 1 and (len(_programs) > MAX_STRUCTURES
                                      or _held(_programs) > limit):
            _programs.popitem(last=False)


def _held(keys):
    """The bytes of the programs kept for ``keys``."""
    return sum(p.nbytes for key in keys for p in _programs.get(key, ()))


def _stacked(result):
    """A list, tuple or object array of light values and numbers, stacked as
    the eager way's ``coerce`` stacks them (anything else unchanged)."""
    if type(result) is np.ndarray:
        if result.dtype != object:
            return result
        items = result.ravel().tolist()
    else:
        items = list(result)
    parts = [_stacked(item) if type(item) in (list, tuple) else item for item in items]
    if not any(type(part) is Traced for part in parts):
        return result
    for k, part in enumerate(parts):
        if type(part) in (float, int, np.float64):
            parts[k] = np.asarray(part, dtype=np.float64)
        elif type(part) is not Traced and not (type(part) is np.ndarray
                                               and part.dtype == _FLOAT64):
            raise Untraceable("a result holding a %s" % type(part).__name__)
    stacked = np.stack(parts)
    if type(result) is np.ndarray:
        stacked = stacked.reshape(result.shape + stacked.shape[1:])
    return stacked


# ---------------------------------------------------------------- recorder

#: hits (a program found and run), misses (a program compiled), fallbacks
#: (calls that went the eager way), the programs kept for the structures the
#: function's calls recorded and their bytes, and why the latest call went
#: the eager way (None: it was recorded)
RecorderInfo = collections.namedtuple("RecorderInfo",
                                      "hits misses fallbacks programs nbytes reason",
                                      defaults=(None,))

_log = logging.getLogger("sparsegrad")


class Recorder:
    """The recorded evaluation of one function: its counts, why it is not
    recorded (if so), and the structures its calls recorded (their programs
    are kept for every function at once, see :data:`MAX_STRUCTURES`).

    ``value_and_jacobian(f, x, args, kwargs)`` returns ``(value, csr_matrix)``
    or None when the call must go the eager way; :meth:`fallback` counts a
    call that goes the eager way before reaching it, with the reason.
    """

    def __init__(self, name="f"):
        self.name = name
        self._keys = collections.OrderedDict()   # structures recorded, as a set
        self._lock = threading.Lock()
        self._hits = self._misses = self._fallbacks = 0
        self._refused = None      # why the function is not recorded (None: it is)
        self._reason = None       # why the latest call that went the eager way did
        self._keep = None         # the nodes whose values the last program read
        self._indexes = ()        # the copies of the index arrays it read
        self._error_seen = None   # an error of the function on light values
        self._last_key = None     # the structure of the last recorded call

    def info(self):
        with _programs_lock:
            keys = [key for key in self._keys if key in _programs]
            programs = sum(len(_programs[key]) for key in keys)
            nbytes = _held(keys)
        with self._lock:
            return RecorderInfo(self._hits, self._misses, self._fallbacks, programs, nbytes,
                                self._reason)

    def clear(self):
        """Forget the counts, the refusal and the programs of this function's structures."""
        with _programs_lock:
            for key in self._keys:
                _programs.pop(key, None)
        with self._lock:
            self._keys.clear()
            self._hits = self._misses = self._fallbacks = 0
            self._refused = self._reason = None
            self._keep = None
            self._indexes = ()
            self._last_key = None
            self._error_seen = None

    @property
    def refused(self):
        """Why calls go the eager way (the first operation not recorded), or None."""
        return self._refused

    def fallback(self, reason, refuse=True):
        """None (the call goes the eager way, for ``reason``), counted and logged
        (at debug level, logger ``"sparsegrad"``); ``refuse``: later calls go
        the eager way at once."""
        with self._lock:
            self._fallbacks += 1
            self._reason = reason
            if refuse and self._refused is None:
                self._refused = reason
        _log.debug("%s: evaluated by forward.seed, not recorded: %s", self.name, reason)
        return None

    def _fallback(self, reason=""):
        """:meth:`fallback`, refusing the function when ``reason`` says why (an
        empty reason: an error the eager way raises again, see :meth:`settled`)."""
        if reason:
            return self.fallback(reason)
        return self.fallback("an error of the function on light values (%s)"
                             % self._error_seen, refuse=False)

    def _trace(self, f, x, args, kwargs, keep):
        """``(tape, result)`` of ``f`` on light values, or a reason (str) why not."""
        tape = Tape(x, keep, self._indexes)
        try:
            result = f(Traced(x, 0, tape), *args, **kwargs)
        except Untraceable as exc:
            return str(exc)
        except Exception as exc:
            # (the eager way raises it again, with its own message; if it does
            # not, the error was the light values': see settled)
            self._error_seen = "%s: %s" % (type(exc).__name__, exc)
            return ""
        if type(result) in (list, tuple, np.ndarray):
            try:
                result = _stacked(result)
            except Untraceable as exc:
                return str(exc)
        if type(result) is not Traced or result.tape is not tape:
            return "a result that is not a value of the argument"
        return tape, result

    @pooled
    def value_and_jacobian(self, f, x, args, kwargs):
        # (on sparsegrad's memory pool, as the eager way's operations are: the
        # function's values, the result and its pattern's copies are of the
        # same sizes at every call)
        if self._refused is not None:
            return self._fallback(self._refused)
        argument = x
        # (no copy: the light values never write to x, a write copies; the program reads it
        # before this call returns)
        x = np.ascontiguousarray(x, dtype=np.float64)
        if not x.size:
            return self.fallback("an empty argument", refuse=False)
        traced = self._trace(f, x, args, kwargs, self._keep)
        if type(traced) is str:
            return self._fallback(traced)
        tape, result = traced
        # (a program depends on the tape's structure, the key: operations,
        # operands, lengths (those a negative index counts from among them),
        # slices, exponents, shifts; on the contents of the index arrays and
        # on its guards on the scalars, both checked at every call; not on
        # the values, the scalars or the constants, read at every call)
        key = tape.structure(result.node)
        if key == self._last_key:
            # (the stored key itself: the dicts then compare by identity)
            key = self._last_key
        variants = _programs_of(key)
        # (a program's guards on the scalars may not hold where another call's
        # scalars chose another sum: a variant for these is compiled, and kept
        # beside it, so that scalars that alternate find theirs)
        program = scalars = None
        for candidate in variants:
            if candidate.same_indexes(tape):
                scalars = candidate.scalars(tape)
                if scalars is not None:
                    program = candidate
                    break
        if program is None:
            try:
                program = compile_tape(tape, result.node)
            except Untraceable as exc:
                return self._fallback(str(exc))
            except Exception as exc:
                # (a case the compiler does not know: the eager way's answer,
                # not an error of the recorder's)
                return self._fallback("the compiler's %s: %s" % (type(exc).__name__, exc))
            _keep_program(key, program, tape)
            with self._lock:
                self._misses += 1
        else:
            with self._lock:
                self._hits += 1
        with self._lock:
            self._last_key = key
            self._keys[key] = None
            self._keys.move_to_end(key)
            if len(self._keys) > MAX_STRUCTURES:
                self._keys.popitem(last=False)
        if not tape.holds(program.needed):
            # (another path than the last call's: its values were not all kept;
            # the function runs again, keeping them)
            traced = self._trace(f, x, args, kwargs, program.needed)
            if type(traced) is str:
                return self._fallback(traced)
            if traced[0].structure(traced[1].node) != key:
                return self._fallback("a path that changed when run again")
            tape, result = traced
        scalars = program.scalars(tape)
        if scalars is None:
            return self.fallback("scalars whose guards changed when run again", refuse=False)
        try:
            data = program.run(tape, scalars)
        except ValueError as exc:
            # (run_program checks every address it reads and writes: a program
            # that fails them is refused, and the eager way answers)
            return self._fallback("a program that failed its checks: %s" % exc)
        self._reason = None
        self._keep = program.needed
        self._indexes = program.index_copies
        # (the pattern's arrays are the program's, read-only, shared by every
        # matrix it makes: copying them cost a tenth of a call)
        matrix = scipy.sparse.csr_matrix((data, program.indices, program.indptr),
                                         shape=program.shape, copy=False)
        _structure.follow_jacobian(data.nbytes + program.indices.nbytes
                                   + program.indptr.nbytes)
        value = result.value
        if np.may_share_memory(value, argument):
            value = value.copy()   # (a read of x is a view of it: the value is the caller's)
        return value, matrix

    def settled(self):
        """Called after the eager way computed a call this recorder gave up: an
        error of the function on light values that the eager way did not
        raise refuses the function from then on (it would be run twice at
        every call)."""
        if self._error_seen is not None and self._refused is None:
            self._refused = "an error on light values only (%s)" % self._error_seen
        self._error_seen = None
