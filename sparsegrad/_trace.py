"""Recorded evaluation: a function's operations recorded, its Jacobian replayed.

``sparsegrad.value_and_jacobian(f, trace=True)`` (and ``jacobian``) run ``f``
on light values (:class:`Traced`) that compute only numpy values and append
each operation to a tape.  The tape's structure (the operations, the shapes,
which scalars and index arrays they take) names a *program*, compiled once
per structure from the tape by symbolic forward differentiation: every entry
of the Jacobian is an expression of the operations' values, gathered at rows
that depend only on the structure, and the program computes those
expressions for blocks of rows at a time and writes them straight into the
result (``sparsegrad._fast.run_program``, compiled with the kernels).  A later
call with the same structure runs ``f`` on light values again (so its Python
control flow and its values are its own) and only runs the program: no
per-operation Jacobian bookkeeping, no intermediate row factors in memory.

What a call checks before it trusts a program: the structure of its tape
(operations, operands, shapes, slices, the exponent of every power) is the
program's, and every index array it gathered by holds the entries the program
was compiled with (compared with kept copies, as the eager path does: an
array written in place between calls is caught).  Scalars (``g * eta``,
``dt``) are read at every call.  Anything the recorder does not take (another
numpy function, a comparison, a 2-d value, a branch on a value, an error
raised by ``f``) makes the call go the eager way (``forward.seed``); the
function may then run twice in that call.

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
import numbers
import threading

import numpy as np
import scipy.sparse
from numpy.lib.mixins import NDArrayOperatorsMixin

from . import _fast, _structure
from ._jacobian import _index_dtype
from ._memory import pooled

__all__ = ["Traced", "Untraceable", "Recorder", "RecorderInfo", "compile_tape", "RULES"]


class Untraceable(Exception):
    """What the recorder does not take: the call goes the eager way."""


_FLOAT64 = np.dtype(np.float64)


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

    __slots__ = ("entries", "values", "lengths", "params", "indexes", "size", "keep")

    def __init__(self, x, keep=None):
        self.entries = [("seed", x.shape[0])]
        self.values = [x]
        self.lengths = [x.shape[0]]
        self.params = []
        self.indexes = []
        self.size = x.shape[0]
        self.keep = keep

    def _node(self, entry, value):
        node = len(self.entries)
        self.entries.append(entry)
        self.values.append(value if self.keep is None or node in self.keep else None)
        self.lengths.append(value.shape[0])
        return node

    def add(self, entry, value):
        if value.dtype != _FLOAT64 or value.ndim != 1:
            raise Untraceable("a result of dtype %s and shape %s" % (value.dtype, value.shape))
        return Traced(value, self._node(entry, value), self)

    def constant(self, array):
        """Node of a constant float64 array (its values read at every call)."""
        return self._node(("const", array.shape[0]), array)

    def holds(self, nodes):
        """Whether the values of ``nodes`` were kept."""
        return all(self.values[node] is not None for node in nodes)

    def structure(self, output):
        return (tuple(self.entries), output)


def _is_scalar(x):
    kind = type(x)
    if kind is float or kind is int or kind is np.float64:
        return True
    return (isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))
            and not isinstance(x, np.ndarray))


def _operators(ufunc):
    """The operator and its reflection of a binary ufunc, for :class:`Traced`."""
    def operator(self, other):
        return self._apply(ufunc, (self, other))

    def reflected(self, other):
        return self._apply(ufunc, (other, self))
    return operator, reflected


class Traced(NDArrayOperatorsMixin):
    """A light value: a 1-d float64 ndarray and its node on a :class:`Tape`.

    Takes elementwise ufuncs of :data:`RULES`, reads by slices and integer
    arrays, ``np.roll`` by an integer and ``np.concatenate``; anything else
    raises :class:`Untraceable`.
    """

    __slots__ = ("value", "node", "tape")

    def __init__(self, value, node, tape):
        self.value = value
        self.node = node
        self.tape = tape

    shape = property(lambda self: self.value.shape)
    size = property(lambda self: self.value.size)
    ndim = property(lambda self: 1)
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
        if _is_scalar(x):
            tape.params.append(float(x))
            return ("p", len(tape.params) - 1), x
        if (type(x) is np.ndarray and x.dtype == _FLOAT64 and x.shape == self.value.shape):
            return ("n", tape.constant(x)), x
        raise Untraceable("an operand of type %s" % type(x).__name__)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise Untraceable("%s.%s" % (ufunc.__name__, method))
        return self._apply(ufunc, inputs)

    def _apply(self, ufunc, inputs):
        """``ufunc(*inputs)``, recorded (one of its inputs is ``self``)."""
        name = ufunc.__name__
        if name not in RULES:
            raise Untraceable(name)
        if name == "power":
            # (the exponent is structure: the rule differs with it)
            base, exponent = inputs
            if type(base) is not Traced or not _is_scalar(exponent):
                raise Untraceable("power of other than a value and a scalar")
            structure, value = self._operand(base)
            exponent = float(exponent)
            return self.tape.add(("power", structure, exponent), ufunc(value, exponent))
        if len(inputs) == 1:
            structure, value = self._operand(inputs[0])
            return self.tape.add((name, (structure,)), ufunc(value))
        (sa, a), (sb, b) = self._operand(inputs[0]), self._operand(inputs[1])
        if type(a) is np.ndarray and type(b) is np.ndarray and a.shape != b.shape:
            raise Untraceable("operands of shapes %s and %s" % (a.shape, b.shape))
        return self.tape.add((name, (sa, sb)), ufunc(a, b))

    # (the common operators straight to the recording, past numpy's dispatch:
    # what np.multiply(self, other) would do with the operands taken here)
    __add__, __radd__ = _operators(np.add)
    __sub__, __rsub__ = _operators(np.subtract)
    __mul__, __rmul__ = _operators(np.multiply)
    __truediv__, __rtruediv__ = _operators(np.divide)
    __pow__, _ = _operators(np.power)

    def __neg__(self):
        return self._apply(np.negative, (self,))

    def __getitem__(self, key):
        n = self.value.shape[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            value = self.value[key]
            return self.tape.add(("slice", self.node, start, step, value.shape[0]), value)
        if isinstance(key, list) and all(type(k) is int for k in key):
            key = np.array(key, dtype=np.int64)
        if type(key) is np.ndarray and key.ndim == 1 and key.dtype.kind in "iu":
            value = self.value[key]      # (numpy's IndexError for an index out of range)
            self.tape.indexes.append(key)
            return self.tape.add(("gather", self.node, len(self.tape.indexes) - 1,
                                  key.shape[0]), value)
        raise Untraceable("a read by %s" % type(key).__name__)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.concatenate and len(args) == 1 and kwargs in ({}, {"axis": 0}):
            parts, values = [], []
            for part in args[0]:
                if type(part) is Traced and part.tape is self.tape:
                    parts.append(part.node)
                    values.append(part.value)
                elif type(part) is np.ndarray and part.dtype == _FLOAT64 and part.ndim == 1:
                    parts.append(self.tape.constant(part))
                    values.append(part)
                else:
                    raise Untraceable("np.concatenate of a %s" % type(part).__name__)
            return self.tape.add(("concatenate", tuple(parts)), np.concatenate(values))
        if func is np.roll and len(args) == 2 and kwargs in ({}, {"axis": None}, {"axis": 0}):
            a, shift = args
            if (type(a) is Traced and a.tape is self.tape and _is_scalar(shift)
                    and float(shift).is_integer()):
                n = a.value.shape[0]
                shift = int(shift) % n if n else 0
                # (a gather by a map the shift decides: structure, no index array)
                return self.tape.add(("roll", a.node, shift, n), np.roll(a.value, shift))
            raise Untraceable("np.roll other than of a value by an integer")
        raise Untraceable(getattr(func, "__name__", str(func)))

    def __getattr__(self, name):
        # (a method of ndarrays the light values do not have -- reshape, sum,
        # astype: the eager way has them; protocol probes get AttributeError)
        if name.startswith("__"):
            raise AttributeError(name)
        raise Untraceable("the attribute %r" % name)

    def __array__(self, *args, **kwargs):
        raise Untraceable("a conversion to an ndarray")

    def __bool__(self):
        raise Untraceable("a branch on a value")

    def __float__(self):
        raise Untraceable("a conversion to float")

    def __iter__(self):
        raise Untraceable("an iteration")

    def __setitem__(self, key, value):
        raise Untraceable("a write")


# ---------------------------------------------------------------- expressions

class _Expressions:
    """Expressions of the Jacobian's entries, hash-consed (one id per form, so
    that an expression met twice is computed once per block).

    Scalars (the same for every row) are ``("lit", c)``, ``("param", k)``
    (scalar ``k`` of the call) and ``(op, a, b)`` for ``op`` in
    ``_SCALAR_OPS``: computed once per call.  Vectors are ``("leaf", node,
    map)`` (a node's values at mapped rows: a map ``(array, start, step)``
    sends row ``j`` of a term to row ``arrays[array][start + step * j]`` of
    the node, or ``start + step * j`` for ``array`` -1; a map ``(array, start,
    step, offset)`` adds ``offset`` to the array's row), the unary and
    binary ops of ``run_program``, ``("scale", x, s)``, ``("shift", x, s)``,
    ``("rdivide", x, s)`` (``x * s``, ``x + s``, ``s / x`` by a scalar ``s``)
    and ``("power", x, c)``.  The builders fold scalars and move signs and
    scalar factors outwards into one scaling (``-(c * (u * -v))`` is ``(u *
    v) scaled by c``), so that a chain of constant factors costs one pass.
    """

    def __init__(self):
        self.ids = {}
        self.forms = []
        self.values = {}       # node -> the expression of its value, where inlined
        self.array = _Arrays()   # maps' materialised row numbers
        self.arrays = self.array.arrays
        self._composed = {}

    def make(self, form):
        i = self.ids.get(form)
        if i is None:
            i = self.ids[form] = len(self.forms)
            self.forms.append(form)
        return i

    def scalar(self, e):
        return self.forms[e][0] in _SCALAR_KINDS

    def lit(self, c):
        return self.make(("lit", float(c)))

    def leaf(self, node):
        return self.make(("leaf", node, _IDENTITY))

    def value(self, node):
        """The value of ``node``: an expression of other nodes' values where
        that is a few cheap operations (so that a program reads fewer
        arrays: ``u ** 2`` gathered is ``u`` gathered, squared), else a leaf."""
        return self.values.get(node) or self.leaf(node)

    def size(self, e):
        """Operations of ``e`` (scalars and leaves are free), shared ones once."""
        seen, stack, count = set(), [e], 0
        while stack:
            f = stack.pop()
            if f in seen:
                continue
            seen.add(f)
            form = self.forms[f]
            if form[0] in _SCALAR_KINDS or form[0] == "leaf":
                continue
            count += 1
            stack.extend(form[1:2] if form[0] in _WITH_SCALAR else form[1:])
        return count

    def _scalar_op(self, op, a, b):
        fa, fb = self.forms[a], self.forms[b]
        if fa[0] == "lit" and fb[0] == "lit":
            return self.lit(_SCALAR_OPS[op](fa[1], fb[1]))
        if op == "s*" and fa == ("lit", 1.0):
            return b
        if op in ("s*", "s/") and fb == ("lit", 1.0):
            return a
        if op == "s*" and a > b:
            a, b = b, a
        return self.make((op, a, b))

    def _unscaled(self, x):
        """``(y, s)`` with ``x = y * s`` (``s`` the literal 1 for no scaling)."""
        form = self.forms[x]
        if form[0] == "scale":
            return form[1], form[2]
        return x, self.lit(1)

    def scale(self, x, s):
        if self.scalar(x):
            return self._scalar_op("s*", x, s)
        y, t = self._unscaled(x)
        s = self._scalar_op("s*", t, s)
        return y if self.forms[s] == ("lit", 1.0) else self.make(("scale", y, s))

    def neg(self, a):
        return self.scale(a, self.lit(-1))

    def mul(self, a, b):
        if self.scalar(a):
            return self.scale(b, a)
        if self.scalar(b):
            return self.scale(a, b)
        (x, s), (y, t) = self._unscaled(a), self._unscaled(b)
        if x > y:
            x, y = y, x
        return self.scale(self.make(("multiply", x, y)), self._scalar_op("s*", s, t))

    def add(self, a, b, sign=1.0):
        """``a + b`` (``a - b`` for ``sign`` -1)."""
        if self.scalar(a) and self.scalar(b):
            return self._scalar_op("s+" if sign > 0 else "s-", a, b)
        if self.scalar(b):
            return self.shift(a, b if sign > 0 else self.neg(b))
        if self.scalar(a):
            return self.shift(self.scale(b, self.lit(sign)), a)
        (x, s), (y, t) = self._unscaled(a), self._unscaled(b)
        if sign < 0:
            t = self._scalar_op("s*", t, self.lit(-1))
        if s == t:
            # (a common factor taken out: s x + s y = s (x + y))
            return self.scale(self.make(("add",) + tuple(sorted((x, y)))), s)
        if self.forms[s] == ("lit", 1.0) and self.forms[t] == ("lit", -1.0):
            return self.make(("subtract", x, y))
        if self.forms[s] == ("lit", -1.0) and self.forms[t] == ("lit", 1.0):
            return self.make(("subtract", y, x))
        if self.forms[t] == ("lit", -1.0):
            return self.make(("subtract", self.scale(x, s), y))
        return self.make(("add",) + tuple(sorted((self.scale(x, s), self.scale(y, t)))))

    def shift(self, x, s):
        if self.forms[s] == ("lit", 0.0):
            return x
        return self.make(("shift", x, s))

    def div(self, a, b):
        if self.scalar(b):
            return self.scale(a, self._scalar_op("s/", self.lit(1), b))
        if self.scalar(a):
            y, t = self._unscaled(b)
            return self.make(("rdivide", y, self._scalar_op("s/", a, t)))
        (x, s), (y, t) = self._unscaled(a), self._unscaled(b)
        return self.scale(self.make(("divide", x, y)), self._scalar_op("s/", s, t))

    def op(self, name, *args):
        return self.make((name,) + args)

    def compose_map(self, f, g, length):
        """The map ``j -> f(g(j))`` for ``length`` rows (``g`` into ``f``'s rows)."""
        fa, fs, ft, fo = f
        ga, gs, gt, go = g
        if ga < 0:
            return (fa, fs + ft * gs, ft * gt, fo)
        if fa < 0 and ft == 1:
            # (a gather of a slice: the gather's array, shifted)
            return (ga, gs, gt, go + fs)

        def rows():
            local = self.arrays[ga][gs + gt * np.arange(length)] + go
            if fa < 0:
                return fs + ft * local
            return self.arrays[fa][fs + ft * local] + fo
        return (self.array(("compose", f, g, length), rows), 0, 1, 0)

    def compose(self, e, g, length):
        """Expression ``e`` read at rows ``g(j)``, ``j < length``."""
        if g == _IDENTITY or self.scalar(e):
            return e
        key = (e, g, length)
        done = self._composed.get(key)
        if done is not None:
            return done
        form = self.forms[e]
        kind = form[0]
        if kind == "leaf":
            done = self.make(("leaf", form[1], self.compose_map(form[2], g, length)))
        elif kind in _WITH_SCALAR:
            done = self.make((kind, self.compose(form[1], g, length), form[2]))
        else:
            done = self.make((kind,) + tuple(self.compose(a, g, length) for a in form[1:]))
        self._composed[key] = done
        return done


_SCALAR_OPS = {"s*": lambda a, b: a * b, "s/": lambda a, b: a / b,
               "s+": lambda a, b: a + b, "s-": lambda a, b: a - b}
_SCALAR_KINDS = frozenset(("lit", "param") + tuple(_SCALAR_OPS))
_IDENTITY = (-1, 0, 1, 0)
# vector forms whose second field is a scalar (or a number: power's exponent)
_WITH_SCALAR = frozenset(("scale", "shift", "rdivide", "power"))


# ---------------------------------------------------------------- derivative rules

def _operand(E, structure):
    kind, k = structure
    return E.value(k) if kind == "n" else E.make(("param", k))


def _one(E):
    return E.lit(1)


def _binary(partials):
    return lambda E, z, a, b: partials(E, z, _operand(E, a), _operand(E, b))


#: ufunc name -> partials: ``rule(E, z, *operands)`` returns one expression per
#: operand, the derivative of the result ``z`` (a leaf) with respect to it
RULES = {
    "add": _binary(lambda E, z, a, b: (E.lit(1), E.lit(1))),
    "subtract": _binary(lambda E, z, a, b: (E.lit(1), E.lit(-1))),
    "multiply": _binary(lambda E, z, a, b: (b, a)),
    "divide": _binary(lambda E, z, a, b: (E.div(_one(E), b), E.neg(E.div(z, b)))),
    "negative": lambda E, z, a: (E.lit(-1),),
    "positive": lambda E, z, a: (E.lit(1),),
    "exp": lambda E, z, a: (z,),
    "expm1": lambda E, z, a: (E.add(z, _one(E)),),
    "log": lambda E, z, a: (E.div(_one(E), _operand(E, a)),),
    "log1p": lambda E, z, a: (E.div(_one(E), E.add(_operand(E, a), _one(E))),),
    "sqrt": lambda E, z, a: (E.div(E.lit(0.5), z),),
    "sin": lambda E, z, a: (E.op("cos", _operand(E, a)),),
    "cos": lambda E, z, a: (E.neg(E.op("sin", _operand(E, a))),),
    "tanh": lambda E, z, a: (E.add(_one(E), E.mul(z, z), -1.0),),
    "square": lambda E, z, a: (E.mul(E.lit(2), _operand(E, a)),),
    "reciprocal": lambda E, z, a: (E.neg(E.mul(z, z)),),
}
RULES["true_divide"] = RULES["divide"]
# (power: a structural exponent, see _power)


def _power(E, z, a, exponent):
    if exponent == 1.0:
        return (E.lit(1),)
    if exponent == 2.0:
        return (E.mul(E.lit(2), _operand(E, a)),)
    return (E.mul(E.lit(exponent), E.make(("power", _operand(E, a), exponent - 1.0))),)


RULES["power"] = _power

_UNARY_OPS = ("negative", "exp", "log", "sqrt", "sin", "cos", "tanh")
_BINARY_OPS = ("add", "subtract", "multiply", "divide")


# ---------------------------------------------------------------- compiling

class Program:
    """What :func:`compile_tape` makes of a tape: the instructions of
    ``run_program``, its leaves (``(node, index, start, step, offset, runs)``), the steps
    of its scalars (from the call's, ``(op, a, b)`` or ``("lit", c, 0)``),
    stores, the pattern and the copies of the index arrays it was made with."""

    __slots__ = ("instructions", "segments", "leaves", "arrays", "scalar_steps", "owners", "adds",
                 "indptr", "indices", "shape", "index_copies", "nbytes", "needed")

    def run(self, tape):
        """The data of the Jacobian at the values of ``tape``."""
        leaves = [(tape.values[leaf[0]],) + leaf[1:] for leaf in self.leaves]
        values = list(tape.params)
        for op, a, b in self.scalar_steps:
            values.append(a if op == "lit" else _SCALAR_OPS[op](values[a], values[b]))
        params = np.array(values, dtype=np.float64)
        return _fast.run_program(self.instructions, self.segments, leaves, params,
                                 self.owners, self.adds, self.indptr)

    def same_indexes(self, tape, same_index):
        """Whether ``tape`` gathered by arrays equal to the ones compiled in."""
        checked = set()
        for array, copy in zip(tape.indexes, self.index_copies):
            key = (id(array), id(copy))
            if key not in checked:
                if not same_index(array, copy):
                    return False
                checked.add(key)
        return True


def _terms_of_ufunc(E, terms, node, entry):
    kind = entry[0]
    operands = entry[1]
    if kind == "power":
        partials = _power(E, E.value(node), operands, entry[2])
        operands = (operands,)
    else:
        partials = RULES[kind](E, E.value(node), *operands)
    out = []
    for structure, partial in zip(operands, partials):
        if structure[0] != "n":
            continue
        for a0, b0, cols, e in terms[structure[1]]:
            out.append((a0, b0, cols, E.mul(E.compose(partial, (-1, a0, 1, 0), b0 - a0), e)))
    return out


def _combine(E, terms):
    """Terms of the same rows and columns added into one."""
    combined = collections.OrderedDict()
    for a0, b0, cols, e in terms:
        key = (a0, b0, cols)
        combined[key] = e if key not in combined else E.add(combined[key], e)
    return [key + (e,) for key, e in combined.items()]


#: ufuncs whose values are recomputed in a program rather than read (the
#: rest -- exp, log, ... -- cost more than a read)
_CHEAP = {"add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
          "true_divide": "divide", "negative": "negative", "positive": "positive",
          "square": "square", "reciprocal": "reciprocal"}
#: the most operations a recomputed value may take
_INLINE_BUDGET = 6


def _index_map(E, tape, source, k):
    """The map of a gather by the tape's ``k``-th index array (negative
    numbers counted from the end of the source)."""
    user = tape.indexes[k]
    n_source = tape.lengths[source]
    return E.array(("gather", id(user), n_source),
                   lambda: np.where(user < 0, user + n_source, user))


def _gathered(E, tape, entry):
    """``(key, rows, map)`` of a gather or a roll: what names its map in the
    keys of derived arrays, its length and the map's array number."""
    if entry[0] == "roll":
        _, source, shift, n = entry
        key = ("roll", shift, n)
        return key, n, E.array(key, lambda: (np.arange(n) - shift) % n if n else
                               np.zeros(0, dtype=np.int64))
    _, source, k, m = entry
    return id(tape.indexes[k]), m, _index_map(E, tape, source, k)


def _inline(E, tape, node, entry):
    """``E.values[node]``: the value of ``node`` as an expression of its
    operands' values, for reads (slices, gathers: a leaf at other rows) and
    cheap elementwise operations within the budget."""
    kind = entry[0]
    if kind == "slice":
        _, source, start, step, m = entry
        E.values[node] = E.compose(E.value(source), (-1, start, step, 0), m)
    elif kind in ("gather", "roll"):
        _, m, index = _gathered(E, tape, entry)
        E.values[node] = E.compose(E.value(entry[1]), (index, 0, 1, 0), m)
    elif kind in _CHEAP or (kind == "power" and entry[2] in (2.0, -1.0)):
        if kind == "power":
            a = _operand(E, entry[1])
            e = E.mul(a, a) if entry[2] == 2.0 else E.div(E.lit(1), a)
        else:
            args = [_operand(E, structure) for structure in entry[1]]
            name = _CHEAP[kind]
            if name == "add":
                e = E.add(*args)
            elif name == "subtract":
                e = E.add(*args, sign=-1.0)
            elif name == "multiply":
                e = E.mul(*args)
            elif name == "divide":
                e = E.div(*args)
            elif name == "negative":
                e = E.neg(*args)
            elif name == "positive":
                e = args[0]
            elif name == "square":
                e = E.mul(args[0], args[0])
            else:
                e = E.div(E.lit(1), args[0])
        if E.size(e) <= _INLINE_BUDGET:
            E.values[node] = e


def _propagate(E, tape, cols):
    """The terms ``(first row, stop row, columns, expression)`` of every node."""
    terms = []
    for node, entry in enumerate(tape.entries):
        kind = entry[0]
        _inline(E, tape, node, entry)
        if kind == "seed":
            n = entry[1]
            terms.append([(0, n, cols(("seed", n), lambda: np.arange(n)), E.lit(1))])
        elif kind == "const":
            terms.append([])
        elif kind == "slice":
            _, source, start, step, m = entry
            rows = start + step * np.arange(m)
            out = []
            for a0, b0, c, e in terms[source]:
                inside = np.flatnonzero((rows >= a0) & (rows < b0))
                if not inside.size:
                    continue
                r0, r1 = int(inside[0]), int(inside[-1]) + 1
                first = start + step * r0 - a0
                new = cols((c, "slice", first, step, r1 - r0),
                           lambda c=c, first=first: cols.arrays[c][first + step * np.arange(r1 - r0)])
                out.append((r0, r1, new, E.compose(e, (-1, first, step, 0), r1 - r0)))
            terms.append(out)
        elif kind in ("gather", "roll"):
            source = entry[1]
            key, m, index = _gathered(E, tape, entry)
            index = (key, E.arrays[index])
            out = []
            for a0, b0, c, e in terms[source]:
                covered = (index[1] >= a0) & (index[1] < b0)
                if not covered.any():
                    continue
                local = E.array(("gather", index[0], a0, b0),
                                lambda: np.where(covered, index[1] - a0, 0))
                new = cols((c, "gather", index[0], a0, b0),
                           lambda c=c: np.where(covered, cols.arrays[c][E.arrays[local]], -1))
                out.append((0, m, new, E.compose(e, (local, 0, 1, 0), m)))
            terms.append(_combine(E, out))
        elif kind == "concatenate":
            out, offset = [], 0
            for part in entry[1]:
                out.extend((a0 + offset, b0 + offset, c, e) for a0, b0, c, e in terms[part])
                offset += tape.lengths[part]
            terms.append(out)
        else:
            terms.append(_combine(E, _terms_of_ufunc(E, terms, node, entry)))
    return terms


class _Arrays:
    """int64 arrays by the keys of their derivations: ``self(key, make)`` is
    the number of the array ``make()`` gives, made once per key (so that terms
    of the same columns, or leaves of the same map, are recognised by it)."""

    def __init__(self):
        self.arrays = []
        self._ids = {}

    def __call__(self, key, make):
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.arrays)
            self.arrays.append(np.ascontiguousarray(make(), dtype=np.int64))
        return i


def _segments(terms, m):
    """``(start, stop, [(columns, offset, expression)])`` of the rows of the
    output covered by the same terms."""
    bounds = sorted({0, m} | {a0 for a0, _, _, _ in terms} | {b0 for _, b0, _, _ in terms})
    segments = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        covering = [(c, start - a0, e) for a0, b0, c, e in terms if a0 <= start and stop <= b0]
        if covering and stop > start:
            segments.append((start, stop, covering))
    return segments


def _children(form):
    """The vector operands of a form (scalars are parameters of the program)."""
    kind = form[0]
    if kind in _SCALAR_KINDS or kind == "leaf":
        return ()
    if kind in _WITH_SCALAR:
        return (form[1],)
    return form[1:]


def _emit(E, roots, leaf_slots, param_slots):
    """Instructions of one segment: each root computed (its inputs first) and
    stored, in the order of ``roots`` (``(expression, store)``); buffers
    reused after their last read.  Returns ``(instructions, buffers)``."""
    order, seen = [], set()
    for root, store in roots:
        stack = [(root, False)]
        while stack:
            e, expanded = stack.pop()
            if e in seen:
                continue
            if expanded:
                seen.add(e)
                order.append(e)
                continue
            stack.append((e, True))
            stack.extend((c, False) for c in reversed(_children(E.forms[e])) if c not in seen)
        order.append(("store", root, store))
    last = {}
    for position, item in enumerate(order):
        reads = (item[1],) if type(item) is tuple else _children(E.forms[item])
        for r in reads:
            last[r] = position
    free, buffer_of, n_buffers, instructions = [], {}, 0, []
    ops = {name: number for number, name in enumerate(_fast.reference.PROGRAM_OPS)}
    for position, item in enumerate(order):
        if type(item) is tuple:
            _, root, store = item
            instructions.append((ops["store"], 0, buffer_of[root], store))
            reads = (root,)
        else:
            form = E.forms[item]
            kind = form[0]
            reads = _children(form)
            read_buffers = [buffer_of[r] for r in reads]
            # (a result never takes an operand's buffer: the loops are compiled
            # for results apart from their operands)
            if free:
                d = free.pop()
            else:
                d, n_buffers = n_buffers, n_buffers + 1
            buffer_of[item] = d
            for r in set(reads):
                if last[r] == position:
                    free.append(buffer_of[r])
            if kind in _SCALAR_KINDS:
                instructions.append((ops["param"], d, param_slots(item), 0))
            elif kind == "leaf":
                instructions.append((ops["load"], d, leaf_slots((form[1],) + form[2]), 0))
            elif kind == "power":
                instructions.append((ops["power"], d, read_buffers[0],
                                     param_slots(E.lit(form[2]))))
            elif kind in _WITH_SCALAR:
                instructions.append((ops[kind], d, read_buffers[0], param_slots(form[2])))
            elif kind in _UNARY_OPS:
                instructions.append((ops[kind], d, read_buffers[0], 0))
            else:
                instructions.append((ops[kind], d, read_buffers[0], read_buffers[1]))
            continue
        for r in reads:
            if last[r] == position:
                free.append(buffer_of[r])
    return instructions, max(n_buffers, 1)


def compile_tape(tape, output):
    """The :class:`Program` of the Jacobian of node ``output`` of ``tape``.

    Raises :class:`Untraceable` for what it does not compile.
    """
    try:
        return _compile(tape, output)
    except RecursionError:
        raise Untraceable("a chain of operations too deep") from None


def _compile(tape, output):
    E = _Expressions()
    cols = _Arrays()
    terms = _propagate(E, tape, cols)[output]
    m, n = tape.lengths[output], tape.size
    leaves, params = {}, {}

    def leaf_slot(spec):
        return leaves.setdefault(spec, len(leaves))

    def param_slot(spec):
        return params.setdefault(spec, len(params))

    pieces, instructions, segments = [], [], []   # pieces: (columns, first row, segment)
    for start, stop, covering in _segments(terms, m):
        combined = collections.OrderedDict()
        for c, offset, e in covering:
            e = E.compose(e, (-1, offset, 1, 0), stop - start)
            key = (c, offset)
            combined[key] = e if key not in combined else E.add(combined[key], e)
        _share_scalings(E, combined)
        roots = []
        for slot, ((c, offset), e) in enumerate(combined.items()):
            roots.append((e, slot))
            pieces.append((cols.arrays[c][offset:offset + stop - start], start, len(segments)))
        if len(roots) > _MAX_SLOTS:
            raise Untraceable("more than %d terms in rows of the result" % _MAX_SLOTS)
        code, n_buffers = _emit(E, roots, leaf_slot, param_slot)
        segments.append((stop - start, len(instructions), len(instructions) + len(code),
                         n_buffers, start, len(roots)))
        instructions.extend(code)
    kernels = _fast.kernels
    index_dtype = _index_dtype(n, sum(len(c) for c, _, _ in pieces))
    selection_terms = [(None, c, None, None, first) for c, first, _ in pieces]
    indptr, indices, _ = kernels.merge_scaled(m, n, selection_terms, pattern_only=True,
                                              index_dtype=index_dtype)
    program = Program()
    program.owners, program.adds = _owners(
        kernels.merge_plan(indptr, indices, [(None, c, first) for c, first, _ in pieces]),
        pieces, segments, len(indices))
    program.instructions = np.array(instructions, dtype=np.int64).reshape(-1, 4)
    program.segments = np.array(segments, dtype=np.int64).reshape(-1, 6)
    # (the params of a call: its scalars, then the scalar expressions' values)
    steps, index_of = [], {}

    def evaluate(e):
        """Where the value of scalar ``e`` lands, its steps appended first."""
        if e in index_of:
            return index_of[e]
        form = E.forms[e]
        if form[0] == "param":
            index_of[e] = form[1]
            return form[1]
        if form[0] == "lit":
            steps.append(("lit", form[1], 0))
        else:
            steps.append((form[0], evaluate(form[1]), evaluate(form[2])))
        index_of[e] = len(tape.params) + len(steps) - 1
        return index_of[e]

    slot_of = {slot: evaluate(e) for e, slot in params.items()}
    if len(program.instructions):
        ins = program.instructions
        for op, field in (("param", 2), ("power", 3), ("scale", 3), ("shift", 3),
                          ("rdivide", 3)):
            rows = ins[:, 0] == _fast.reference.PROGRAM_OPS.index(op)
            ins[rows, field] = [slot_of[slot] for slot in ins[rows, field].tolist()]
    program.scalar_steps = steps
    program.leaves = [None] * len(leaves)
    runs = {}
    for (node, array, start, step, offset), slot in leaves.items():
        if array >= 0 and step == 1 and array not in runs:
            runs[array] = kernels.index_runs(E.arrays[array])
        program.leaves[slot] = (node, None if array < 0 else E.arrays[array], start, step,
                                offset, runs.get(array) if step == 1 else None)
    program.needed = frozenset(leaf[0] for leaf in program.leaves)
    program.arrays = E.arrays + [r for r in runs.values() if r is not None]
    program.indptr, program.indices = indptr, indices
    program.shape = (m, n)
    # (one copy per array the function gathered by, however often: a call
    # compares each of its arrays once)
    copies = {}
    program.index_copies = [copies.setdefault(id(a), np.array(a, dtype=np.int64))
                            for a in tape.indexes]
    arrays = (program.indptr, program.indices, program.instructions, program.segments,
              program.owners, program.adds, *program.arrays, *copies.values())
    for array in arrays:
        array.flags.writeable = False
    program.nbytes = sum(a.nbytes for a in arrays)
    return program


def _share_scalings(E, roots):
    """Roots ``(x * y) * s`` with a factor ``y`` scaled by the same ``s`` in
    other roots too become ``x * (y * s)``: the scaled factor is then
    computed once per block, not one scaling per root (the residual's ``/
    eta`` and its sign, on every entry of a row).  ``roots``: a dict of
    expressions, rewritten in place."""
    uses = collections.Counter()
    for e in roots.values():
        form = E.forms[e]
        if form[0] == "scale" and E.forms[form[1]][0] == "multiply":
            for factor in E.forms[form[1]][1:]:
                uses[(factor, form[2])] += 1
    for key, e in roots.items():
        form = E.forms[e]
        if not (form[0] == "scale" and E.forms[form[1]][0] == "multiply"):
            continue
        a, b = E.forms[form[1]][1:]
        if uses[(a, form[2])] > uses[(b, form[2])]:
            a, b = b, a
        if uses[(b, form[2])] >= 2:
            # (made as they are: the builders would take the scaling out again)
            scaled = E.make(("scale", b, form[2]))
            roots[key] = E.make(("multiply",) + tuple(sorted((a, scaled))))


#: the most terms a segment's rows may have (its slots: a place's owner is a uint16)
_MAX_SLOTS = 65536


def _owners(codes, pieces, segments, nnz):
    """``(owners, adds)`` of ``run_program`` from the codes of ``merge_plan``:
    the slot whose value each place takes first, and the later values added."""
    owners = np.zeros(nnz, dtype=np.uint8 if max(
        [s[5] for s in segments] + [1]) <= 256 else np.uint16)
    stored, adds, slot, previous = 0, [], 0, None
    for code, (_, _, segment) in zip(codes, pieces):
        # (a piece's slot: its number among its segment's pieces, consecutive)
        slot = slot + 1 if segment == previous else 0
        previous = segment
        code = np.asarray(code)
        places = code >> 1
        later = (code & 1).astype(bool) & (code >= 0)
        first = ~later & (code >= 0)
        owners[places[first]] = slot
        stored += np.count_nonzero(first)
        if later.any():
            rows = np.flatnonzero(later)
            adds.append(np.stack([np.full(len(rows), segment), rows, np.full(len(rows), slot),
                                  places[rows]], axis=1))
    if stored != nnz:
        raise Untraceable("a merge plan that leaves places empty")
    adds = np.concatenate(adds) if adds else np.zeros((0, 4), dtype=np.int64)
    adds = adds[np.lexsort((adds[:, 2], adds[:, 1], adds[:, 0]))]
    return owners, np.ascontiguousarray(adds, dtype=np.int64).reshape(-1, 4)


# ---------------------------------------------------------------- recorder

#: hits (a program found and run), misses (a program compiled), fallbacks
#: (calls that went the eager way), programs held and their bytes
RecorderInfo = collections.namedtuple("RecorderInfo",
                                      "hits misses fallbacks programs nbytes")


class Recorder:
    """The programs of one function, at most ``capacity`` and at most
    :func:`sparsegrad.structure_cache_limit` bytes (least recently used
    forgotten first; the newest is kept whatever its size), and its counts.

    ``value_and_jacobian(f, x, args, kwargs)`` returns ``(value, csr_matrix)``
    or None when the call must go the eager way.
    """

    def __init__(self, capacity=4):
        self.capacity = capacity
        self._programs = collections.OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = self._fallbacks = 0
        self._refused = None      # why the function is not recorded (None: it is)
        self._keep = None         # the nodes whose values the last program read
        self._error_seen = None   # an error of the function on light values

    def info(self):
        with self._lock:
            return RecorderInfo(self._hits, self._misses, self._fallbacks,
                                len(self._programs),
                                sum(p.nbytes for p in self._programs.values()))

    def clear(self):
        with self._lock:
            self._programs.clear()
            self._hits = self._misses = self._fallbacks = 0
            self._refused = None
            self._keep = None
            self._error_seen = None

    @property
    def refused(self):
        """Why calls go the eager way (the first operation not recorded), or None."""
        return self._refused

    def _fallback(self, reason):
        with self._lock:
            self._fallbacks += 1
            if self._refused is None:
                self._refused = reason
        return None

    def _trace(self, f, x, args, kwargs, keep):
        """``(tape, result)`` of ``f`` on light values, or a reason (str) why not."""
        tape = Tape(x, keep)
        try:
            result = f(Traced(x, 0, tape), *args, **kwargs)
        except Untraceable as exc:
            return str(exc)
        except Exception as exc:
            # (the eager way raises it again, with its own message; if it does
            # not, the error was the light values': see settled)
            self._error_seen = "%s: %s" % (type(exc).__name__, exc)
            return ""
        if type(result) is not Traced or result.tape is not tape:
            return "a result that is not a 1-d value of the argument"
        return tape, result

    @pooled
    def value_and_jacobian(self, f, x, args, kwargs):
        # (on sparsegrad's memory pool, as the eager way's operations are: the
        # function's values, the result and its pattern's copies are of the
        # same sizes at every call)
        if self._refused is not None:
            return self._fallback(self._refused)
        # (no copy: the light values never write to x, and the program reads it
        # before this call returns)
        x = np.ascontiguousarray(x, dtype=np.float64)
        traced = self._trace(f, x, args, kwargs, self._keep)
        if type(traced) is str:
            return self._fallback(traced) if traced else self._error()
        tape, result = traced
        key = tape.structure(result.node)
        with self._lock:
            program = self._programs.get(key)
            if program is not None:
                self._programs.move_to_end(key)
        if program is None or not program.same_indexes(tape, _fast.kernels.same_index):
            try:
                program = compile_tape(tape, result.node)
            except Untraceable as exc:
                return self._fallback(str(exc))
            with self._lock:
                self._misses += 1
                self._programs[key] = program
                self._programs.move_to_end(key)
                # (at most `capacity` programs, and no more bytes than the
                # structure cache may hold, the newest kept whatever its size)
                limit = _structure.structure_cache_limit()
                while len(self._programs) > 1 and (
                        len(self._programs) > self.capacity
                        or sum(p.nbytes for p in self._programs.values()) > limit):
                    self._programs.popitem(last=False)
        else:
            with self._lock:
                self._hits += 1
        if not tape.holds(program.needed):
            # (another path than the last call's: its values were not all kept;
            # the function runs again, keeping them)
            traced = self._trace(f, x, args, kwargs, program.needed)
            if type(traced) is str or traced[0].structure(traced[1].node) != key:
                return self._fallback(traced) if type(traced) is str and traced else self._error()
            tape, result = traced
        self._keep = program.needed
        # (the pattern's arrays are the program's, read-only, shared by every
        # matrix it makes: copying them cost a tenth of a call)
        matrix = scipy.sparse.csr_matrix((program.run(tape), program.indices, program.indptr),
                                         shape=program.shape, copy=False)
        return result.value, matrix

    def _error(self):
        with self._lock:
            self._fallbacks += 1
        return None

    def settled(self):
        """Called after the eager way computed a call this recorder gave up: an
        error of the function on light values that the eager way did not
        raise refuses the function from then on (it would be run twice at
        every call)."""
        if self._error_seen is not None and self._refused is None:
            self._refused = "an error on light values only (%s)" % self._error_seen
        self._error_seen = None
