"""The compiler of recorded evaluation: a tape's Jacobian as a program.

:func:`compile_tape` turns the tape of a call on light values
(:class:`sparsegrad._trace.Tape`: the operations' structure, the lengths of
their results, the index arrays they gathered by) into a :class:`Program` of
``sparsegrad._fast.run_program`` whose result is the eager way's Jacobian bit
for bit.  Every operation is differentiated by the eager way's own rule
(``sparsegrad._ufunc_rules.DERIVATIVES``, called on symbolic values: a partial
is the expression numpy evaluates there, in its order), and the partials are
combined as the eager Jacobian algebra (``sparsegrad._jacobian``) combines
them: a value's Jacobian is a sum of terms ``s * diag(d) * M`` (a scalar, a
row factor, a selection named as the eager way's caches name its matrices),
scaled, gathered, masked, summed and finally merged by the same rules, in the
same order.  Every entry of the result is then an expression of the
operations' values at rows that depend only on the structure; the output's
rows are cut into segments of the same terms, each segment's expressions are
emitted as instructions on buffers of a block of rows, and the pattern gives
the place each term's entry takes.  What the program cannot reproduce raises
:class:`Untraceable` (the call then goes the eager way): a mask of a matrix
the eager way merged (it chooses by the finiteness of the merged values), a
merge of terms that start and stop meeting at more than :data:`_MAX_CUTS`
rows, more reads of one value than the eager way's caches keep, a rule that
needs more than arithmetic and ufuncs.

>>> import numpy as np
>>> from sparsegrad._trace import Tape, Traced
>>> tape = Tape(np.array([1.0, 2.0, 3.0]))
>>> y = np.exp(Traced(tape.values[0], 0, tape)[1:]) * 2.0
>>> program = compile_tape(tape, y.node)
>>> program.shape, len(program.indices)
((2, 3), 2)
>>> np.round(program.run(tape, program.scalars(tape)), 3)
array([14.778, 40.171])
"""
import collections
import itertools
import operator

import numpy as np

from . import _fast
from . import _jacobian
from ._indexing import Assembly, broadcast_rows, row_index, slice_key
from ._jacobian import _index_dtype
from ._ufunc_rules import DERIVATIVES

__all__ = ["Untraceable", "Program", "compile_tape", "replay", "same_index"]


class Untraceable(Exception):
    """What the recorder does not take: the call goes the eager way."""


_FLOAT64 = np.dtype(np.float64)


# ---------------------------------------------------------------- expressions

class _Expressions:
    """Expressions of the Jacobian's entries, hash-consed (one id per form, so
    that an expression met twice is computed once per block).

    Scalars (the same for every row) are ``("lit", type, repr)`` (a number of
    the rules or the algebra, kept with its type in ``literals``), ``("param",
    k)`` (scalar ``k`` of the call, the eager way's ``np.float64`` or
    ``np.int64``) and operations on them (``_SCALAR_OPS``, ``sneg``,
    ``sfloat``, ``sufunc``): computed once per call, with numpy's scalar
    arithmetic.  Vectors are ``("leaf", node, map)`` (a node's values at mapped
    rows: a map ``(array, start, step, offset)`` sends row ``j`` of a term to
    row ``arrays[array][start + step * j] + offset`` of the node, or ``start +
    step * j + offset`` for ``array`` -1; ``node`` ``("aux", k)`` is the k-th
    value numpy computes at every call, ``aux``), the binary ops of
    ``run_program`` (a scalar operand of ``divide`` or ``keep`` is a buffer
    filled with it), ``("scale", x, s)``, ``("shift", x, s)``, ``("rdivide",
    x, s)`` (``x * s``, ``x + s``, ``s / x``), ``negative`` and ``sqrt``.

    The builders rewrite nothing that would round otherwise: ``x - c`` is
    ``x + (-c)`` and ``c - x`` is ``(-x) + c`` (IEEE subtraction adds the
    negated operand), ``x * 1`` is ``x``, operands of ``+`` and ``*`` are
    ordered (both commute exactly); everything else is computed as written.
    """

    def __init__(self, params):
        self.ids = {}
        self.forms = []
        self.literals = {}     # id of a "lit" -> the number
        self.values = {}       # node -> the expression of its value, where inlined
        self.array = _Arrays()   # maps' materialised row numbers
        self.arrays = self.array.arrays
        self.aux = []          # (ufunc, operands, rows) of the values numpy computes
        self._aux_ids = {}
        self._composed = {}
        self._params = params  # (the compiled call's scalars: the values of guards)
        self._scalar_values = {}
        self.rows = 0          # the rows of the rule being evaluated (aux values)
        self._unique = itertools.count()

    def make(self, form):
        i = self.ids.get(form)
        if i is None:
            i = self.ids[form] = len(self.forms)
            self.forms.append(form)
        return i

    def scalar(self, e):
        return self.forms[e][0] in _SCALAR_KINDS

    def unique(self):
        """A number for a key of its own."""
        return next(self._unique)

    def lit(self, c):
        # (the type and repr name a number: 2 and 2.0, 0.0 and -0.0 differ)
        i = self.make(("lit", type(c).__name__, repr(c)))
        self.literals[i] = c
        return i

    def is_one(self, e):
        return self.forms[e][0] == "lit" and self.literals[e] == 1

    def leaf(self, node):
        return self.make(("leaf", node, _IDENTITY))

    def value(self, node):
        """The value of ``node``: an expression of other nodes' values where
        that is a few cheap operations (so that a program reads fewer
        arrays: ``eta * u`` gathered is ``eta`` and ``u`` gathered,
        multiplied), else a leaf."""
        e = self.values.get(node)
        return self.leaf(node) if e is None else e

    def scalar_value(self, e):
        """The value of scalar ``e`` at the compiled call."""
        known = self._scalar_values.get(e)
        if known is None:
            form = self.forms[e]
            if form[0] == "lit":
                known = self.literals[e]
            elif form[0] == "param":
                known = self._params[form[1]]
            else:
                with np.errstate(all="ignore"):
                    known = _scalar_result(form[0], _scalar_function(form), [
                        self.scalar_value(a) for a in _scalar_operands(form)])
            self._scalar_values[e] = known
        return known

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
            stack.extend(_children(form))
        return count

    # ---- builders
    def scalar_op(self, kind, operands, function=None):
        """A scalar operation (``function``: the ufunc of ``sufunc``), folded
        when every operand is a number."""
        if all(self.forms[a][0] == "lit" for a in operands):
            try:
                with np.errstate(all="ignore"):
                    return self.lit(_scalar_result(kind, function, [
                        self.literals[a] for a in operands]))
            except Exception as exc:
                raise Untraceable("a scalar of the rules that raises %s"
                                  % type(exc).__name__) from None
        head = (kind, function) if kind == "sufunc" else (kind,)
        return self.make(head + tuple(operands))

    def arith(self, op, a, b):
        """``a op b`` for ``op`` one of add, subtract, multiply, divide."""
        sa, sb = self.scalar(a), self.scalar(b)
        if sa and sb:
            return self.scalar_op(_SCALAR_OF[op], (a, b))
        if op == "add":
            if sa:
                a, b = b, a
            if sb:
                return self.make(("shift", a, b))
            return self.make(("add",) + tuple(sorted((a, b))))
        if op == "subtract":
            if sb:
                return self.make(("shift", a, self.scalar_op("sneg", (b,))))
            if sa:
                return self.make(("shift", self.negative(b), a))
            return self.make(("subtract", a, b))
        if op == "multiply":
            if sa:
                a, b = b, a
            if sb:
                return a if self.is_one(b) else self.make(("scale", a, b))
            return self.make(("multiply",) + tuple(sorted((a, b))))
        if sa:
            return self.make(("rdivide", b, a))
        if sb and self.is_one(b):
            return a
        return self.make(("divide", a, b))

    def negative(self, a):
        if self.scalar(a):
            return self.scalar_op("sneg", (a,))
        return self.make(("negative", a))

    def keep(self, a, mask):
        """``a`` where ``mask`` is not 0, else 0.0 (``np.where(mask, a, 0)``)."""
        return self.make(("keep", a, mask))

    def apply(self, ufunc, operands):
        """``ufunc(*operands)`` in a rule: arithmetic and ``sqrt`` (exactly
        rounded, as numpy's) as program operations; any other ufunc of vectors
        a value numpy computes at every call (``aux``), as the eager way does
        (the program's own ``exp``, ``sin``, ``pow`` may round otherwise)."""
        name = _ARITHMETIC.get(ufunc)
        if name is not None and len(operands) == 2:
            return self.arith(name, *operands)
        if ufunc is np.negative:
            return self.negative(operands[0])
        if ufunc is np.positive:
            return operands[0]
        if all(self.scalar(a) for a in operands):
            return self.scalar_op("sufunc", tuple(operands), ufunc)
        if ufunc is np.sqrt:
            return self.make(("sqrt", operands[0]))
        trial = [self.scalar_value(a) if self.scalar(a) else np.ones(1) for a in operands]
        with np.errstate(all="ignore"):
            result = ufunc(*trial)
        if type(result) is not np.ndarray or result.dtype != _FLOAT64:
            raise Untraceable("%s of another dtype than float64 in a rule" % ufunc.__name__)
        key = (ufunc, tuple(operands), self.rows)
        k = self._aux_ids.get(key)
        if k is None:
            k = self._aux_ids[key] = len(self.aux)
            self.aux.append(key)
        return self.leaf(("aux", k))

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
        """Expression ``e`` read at rows ``g(j)``, ``j < length`` (elementwise
        operations commute with reading their operands elsewhere)."""
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


_SCALAR_OPS = {"s+": operator.add, "s-": operator.sub, "s*": operator.mul,
               "s/": operator.truediv}
_SCALAR_OF = {"add": "s+", "subtract": "s-", "multiply": "s*", "divide": "s/"}
_SCALAR_KINDS = frozenset(("lit", "param", "sneg", "sfloat", "sufunc") + tuple(_SCALAR_OPS))
_ARITHMETIC = {np.add: "add", np.subtract: "subtract", np.multiply: "multiply",
               np.divide: "divide"}
_IDENTITY = (-1, 0, 1, 0)
# vector forms whose second field is a scalar
_WITH_SCALAR = frozenset(("scale", "shift", "rdivide"))
_UNARY_OPS = ("negative", "sqrt")


def _scalar_result(kind, function, operands):
    """A scalar operation on numbers (numpy's scalars keep numpy's arithmetic)."""
    if kind in _SCALAR_OPS:
        return _SCALAR_OPS[kind](*operands)
    if kind == "sneg":
        return -operands[0]
    if kind == "sfloat":
        # (the eager way scales a Jacobian by an integer as by a float)
        return float(operands[0]) if isinstance(operands[0], (int, np.integer)) \
            else operands[0]
    return function(*operands)


def _guard(kind, a, b):
    """A choice the eager algebra makes by scalars: ``s == s2 and s != 0``
    (``_combine``'s "same"), ``factor == 1`` (``scale``'s "one")."""
    if kind == "same":
        return bool(a == b and a != 0)
    return bool(a == 1)


def _scalar_operands(form):
    return form[2:] if form[0] == "sufunc" else form[1:]


def _scalar_function(form):
    return form[1] if form[0] == "sufunc" else None


def _children(form):
    """The vector operands of a form (scalars of ``_WITH_SCALAR`` forms are
    parameters of their instruction; those of ``divide`` and ``keep`` are
    buffers)."""
    kind = form[0]
    if kind in _SCALAR_KINDS or kind == "leaf":
        return ()
    if kind in _WITH_SCALAR:
        return (form[1],)
    return form[1:]


# ---------------------------------------------------------------- the eager rules

_NUMBERS = (int, float, np.integer, np.floating)


class _Sym:
    """A value in a derivative rule of the eager way, evaluated symbolically:
    its arithmetic and ufuncs build expressions (:meth:`_Expressions.apply`);
    anything else (``np.where``, a comparison, a branch) raises
    :class:`Untraceable`."""

    __slots__ = ("E", "e")
    __array_priority__ = 1e9
    dtype = _FLOAT64

    def __init__(self, E, e):
        self.E = E
        self.e = e

    @property
    def ndim(self):
        return 0 if self.E.scalar(self.e) else 1

    def _binary(self, op, a, b):
        E = self.E
        return _Sym(E, E.arith(op, _symbolic(E, a), _symbolic(E, b)))

    def __add__(self, other):
        return self._binary("add", self, other)

    def __radd__(self, other):
        return self._binary("add", other, self)

    def __sub__(self, other):
        return self._binary("subtract", self, other)

    def __rsub__(self, other):
        return self._binary("subtract", other, self)

    def __mul__(self, other):
        return self._binary("multiply", self, other)

    def __rmul__(self, other):
        return self._binary("multiply", other, self)

    def __truediv__(self, other):
        return self._binary("divide", self, other)

    def __rtruediv__(self, other):
        return self._binary("divide", other, self)

    def __neg__(self):
        return _Sym(self.E, self.E.negative(self.e))

    def __pos__(self):
        return self

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise Untraceable("%s.%s in a rule" % (ufunc.__name__, method))
        E = self.E
        return _Sym(E, E.apply(ufunc, [_symbolic(E, x) for x in inputs]))

    def __array_function__(self, func, types, args, kwargs):
        raise Untraceable("%s in a rule" % getattr(func, "__name__", func))

    def __array__(self, *args, **kwargs):
        raise Untraceable("a conversion to an array in a rule")

    def __bool__(self):
        raise Untraceable("a branch on a value in a rule")

    def _compared(self, other):
        raise Untraceable("a comparison in a rule")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _compared
    __hash__ = None


def _symbolic(E, x):
    """The expression of an operand of a rule: a :class:`_Sym`'s, or a number's."""
    if type(x) is _Sym:
        return x.e
    if isinstance(x, _NUMBERS) and not isinstance(x, (bool, np.bool_)):
        return E.lit(x)
    raise Untraceable("an operand of type %s in a rule" % type(x).__name__)


# ---------------------------------------------------------------- the eager algebra

class _Matrix:
    """A matrix of the eager way, named by ``key`` as the eager way's caches
    name it (two reads share one matrix object, and so combine their terms,
    exactly where their keys are equal): ``parts`` ``(first row, stop row,
    columns, data)`` of ``rows`` rows, ``columns`` the number of an array of
    each row's column (-1: none there) and ``data`` None (ones: a selection)
    or the expression of the values (a merged matrix); no two parts of a
    merged matrix share a place."""

    __slots__ = ("key", "parts", "rows", "merged", "nnz")

    def __init__(self, key, parts, rows, merged, nnz):
        self.key = key
        self.parts = parts
        self.rows = rows
        self.merged = merged
        self.nnz = nnz

    @property
    def empty(self):
        return not self.nnz

    def max_entries(self):
        """As the eager way's bound: a selection's rows, a merged matrix's entries."""
        return self.nnz if self.merged else self.rows


class _Jacobian:
    """The eager way's Jacobian of a value: ``terms`` ``(s, d, M)`` (scalar
    ``s``, row factor ``d``: None, an expression or a pending pair ``(d,
    c)``, :class:`_Matrix` ``M``), or the ``blocks`` ``(first row,
    _Jacobian)`` of a concatenation.  One object stands for one of the eager
    way's, which its merges change in place."""

    __slots__ = ("n", "terms", "blocks")

    def __init__(self, n, terms=None, blocks=None):
        self.n = n
        self.terms = terms
        self.blocks = blocks


#: the most rows a merge cuts its terms at, where they meet at some of their places
_MAX_CUTS = 64


class _Algebra:
    """``sparsegrad._jacobian``'s scale, add, take_rows, mask_rows, vstack and
    merges on :class:`_Jacobian`, rounding as they round: the same products and
    sums of the same row factors, scalars and merged values, in the same
    order, and the same objects returned.  The choices the eager way makes by
    a value (``_combine``'s ``s == s2 and s != 0``, ``scale``'s ``factor ==
    1``, which returns the Jacobian itself) are decided at the compiled call
    and kept as guards, checked at every call."""

    def __init__(self, E):
        self.E = E
        self.cols = _Arrays()
        self.guards = []
        self._matrices = {}
        self._reads = collections.Counter()
        self._own = itertools.count()

    def identity(self, n):
        cols = self.cols(("identity",), lambda: np.arange(n))
        M = _Matrix(("identity",), ((0, n, cols, None),), n, False, n)
        return _Jacobian(n, ((self.E.lit(1), None, M),))

    def is_zero(self, J):
        if J.blocks is not None:
            return all(self.is_zero(block) for _, block in J.blocks)
        return all(M.empty for _, _, M in J.terms)

    def vector(self, d):
        """A row factor as one expression (a pending pair multiplied out)."""
        return self.E.arith("multiply", d[0], d[1]) if type(d) is tuple else d

    def terms(self, J):
        """The terms of ``J``, a concatenation's merged first (as the eager
        way's ``Jacobian.terms``, which keeps the merged term)."""
        if J.blocks is not None:
            self._single(J)
        return J.terms

    def _single(self, J):
        J.terms = ((self.E.lit(1), None, self._merge(J)),)
        J.blocks = None

    def _mutable(self, J):
        """Whether a merge may change ``J`` in place later."""
        return J.blocks is not None or len(J.terms) > 1

    def scale(self, J, factor, vector):
        """``diag(factor) @ J``: ``factor`` an expression, a vector of ``J``'s
        rows or a scalar."""
        E = self.E
        if J is None or self.is_zero(J) or (not vector and E.is_one(factor)):
            return J
        if not vector and E.forms[factor][0] != "lit" and self._mutable(J):
            # (the eager way returns J itself for a factor 1, and a merge of
            # either would then change both)
            one = _guard("one", E.scalar_value(factor), None)
            self.guards.append(("one", factor, factor, one))
            if one:
                return J
        if J.blocks is not None:
            return _Jacobian(J.n, blocks=tuple(
                (first, self.scale(block, E.compose(factor, (-1, first, 1, 0), block.n)
                                   if vector else factor, vector))
                for first, block in J.blocks))
        if vector:
            return _Jacobian(J.n, tuple(
                (s, factor if d is None else (self.vector(d), factor), M)
                for s, d, M in J.terms))
        factor = E.scalar_op("sfloat", (factor,))
        return _Jacobian(J.n, tuple((E.scalar_op("s*", (s, factor)), d, M)
                                    for s, d, M in J.terms))

    def add(self, jacobians):
        if len(jacobians) == 2 and all(J.blocks is None and not self.is_zero(J)
                                       for J in jacobians):
            return self._summed(jacobians)
        live = [J for J in jacobians if not self.is_zero(J)]
        if len(live) <= 1:
            return live[0] if live else jacobians[0]
        if all(J.blocks is not None for J in live):
            layout = [block.n for _, block in live[0].blocks]
            if all([block.n for _, block in J.blocks] == layout for J in live[1:]):
                return _Jacobian(live[0].n, blocks=tuple(
                    (first, self.add([J.blocks[k][1] for J in live]))
                    for k, (first, _) in enumerate(live[0].blocks)))
        return self._summed(live)

    def _summed(self, jacobians):
        combined = {}
        for J in jacobians:
            for term in self.terms(J):
                key = term[2].key
                known = combined.get(key)
                combined[key] = term if known is None else self._combine(known, term)
        result = _Jacobian(jacobians[0].n, tuple(combined.values()))
        if len(combined) > _jacobian.MAX_TERMS:
            self._single(result)
        return result

    def _combine(self, first, second):
        E = self.E
        s, d, M = first
        s2, d2 = second[:2]
        if d is None and d2 is None:
            return (E.scalar_op("s+", (s, s2)), None, M)
        if self._same_nonzero(s, s2):
            one = E.lit(1)
            return (s, E.arith("add", one if d is None else self.vector(d),
                               one if d2 is None else self.vector(d2)), M)
        if (d is None) != (d2 is None):
            vector, times, plus = ((self.vector(d2), s2, s) if d is None
                                   else (self.vector(d), s, s2))
            return (E.lit(1), E.arith("add", E.arith("multiply", vector, times), plus), M)
        return (E.lit(1), E.arith("add", E.arith("multiply", self.vector(d), s),
                                  E.arith("multiply", self.vector(d2), s2)), M)

    def _same_nonzero(self, s, s2):
        E = self.E
        same = _guard("same", E.scalar_value(s), E.scalar_value(s2))
        if E.forms[s][0] != "lit" or E.forms[s2][0] != "lit":
            self.guards.append(("same", s, s2, same))
        return same

    def take_rows(self, J, rows, key, index=None, stride=None):
        """Rows ``rows`` of ``J`` (-1: an empty row), their matrices named
        ``key`` (None: of their own); ``stride`` ``(start, step)`` when the
        rows are ``start + step * j``, else ``index`` the number of the array
        of ``rows`` with -1 read as 0."""
        m = len(rows)
        if J is None:
            return None
        if m == J.n and (m == 0 or np.array_equal(rows, np.arange(m))):
            return J
        if self.is_zero(J):
            return _Jacobian(m, ())
        terms = self.terms(J)
        if len(terms) > 1 and any(M.max_entries() > 2 * J.n for _, _, M in terms):
            self._single(J)
            terms = J.terms
        E = self.E
        reads = _Reads(E, rows, index, stride)
        return _Jacobian(m, tuple(
            (s, None if d is None else E.compose(self.vector(d), reads.whole(), m),
             self._gather(M, reads, key))
            for s, d, M in terms))

    def _gather(self, M, reads, key):
        if key is None:
            key = ("own", next(self._own))
        else:
            # (the eager way keeps a matrix's gathers, and the identity's,
            # least recently used first out: past that many keys a read of
            # an evicted one would make another matrix)
            found = self._matrices.get((M.key, key))
            if found is not None:
                return found
            self._reads[M.key] += 1
            limit = (_jacobian._MAX_SELECTIONS if M.key == ("identity",)
                     else _jacobian._MAX_GATHERS)
            if self._reads[M.key] > limit:
                raise Untraceable("more than %d reads of one value" % limit)
        parts, nnz = [], 0
        for k, (a0, b0, c, data) in enumerate(M.parts):
            read = reads.part(a0, b0)
            if read is None:
                continue
            r0, r1, local = read
            source = self.cols.arrays[c]

            def columns(source=source, local=local, a0=a0, b0=b0):
                inside = (local >= 0) & (local < b0 - a0)
                return np.where(inside, source[np.where(inside, local, 0)], -1)
            cols = self.cols((M.key, key, k), columns)
            count = int(np.count_nonzero(self.cols.arrays[cols] >= 0))
            if not count:
                continue
            nnz += count
            parts.append((r0, r1, cols, None if data is None
                          else self.E.compose(data, reads.map(a0, b0, r0, r1), r1 - r0)))
        found = _Matrix((M.key, key), tuple(parts), reads.m, M.merged, nnz)
        self._matrices[(M.key, key)] = found
        return found

    def _merge(self, J):
        """The eager way's merge of ``J`` (``_jacobian._merge``): a matrix whose
        values are the terms' ``data * s * d``, those of one place summed in the
        terms' order.  Terms that share some of their places are cut at the
        rows where they start or stop sharing them (:meth:`_cut`)."""
        parts = []
        for first, a0, b0, c, e in self._places(J):
            parts.append((first + a0, first + b0, c, e))
        parts = self._cut(parts)
        merged = []
        for part in parts:
            overlaps = [self._overlap(known, part) for known in merged]
            if "some" in overlaps:
                raise Untraceable("a merge of terms that meet at some of their places")
            if "same" in overlaps:
                k = overlaps.index("same")
                merged[k] = merged[k][:3] + (self.E.arith("add", merged[k][3], part[3]),)
            else:
                merged.append(part)
        nnz = sum(int(np.count_nonzero(self.cols.arrays[c] >= 0)) for _, _, c, _ in merged)
        return _Matrix(("merged", next(self._own)), tuple(merged), J.n, True, nnz)

    def _cut(self, parts):
        """``parts`` that meet others cut at every row where two of them start,
        stop, or start or stop meeting (one place at a row: the same column),
        so that two pieces meet at all their rows or at none; refused past
        :data:`_MAX_CUTS` cuts."""
        arrays = self.cols.arrays
        cuts, meeting = set(), set()
        for i, p in enumerate(parts):
            for j in range(i):
                q = parts[j]
                a0, b0 = max(p[0], q[0]), min(p[1], q[1])
                if a0 >= b0:
                    continue
                cp = arrays[p[2]][a0 - p[0]:b0 - p[0]]
                cq = arrays[q[2]][a0 - q[0]:b0 - q[0]]
                met = (cp == cq) & (cp >= 0)
                if not met.any():
                    continue
                meeting.update((i, j))
                cuts.update((p[0], p[1], q[0], q[1]))
                cuts.update((np.flatnonzero(met[1:] != met[:-1]) + 1 + a0).tolist())
        if len(cuts) > _MAX_CUTS:
            raise Untraceable("a merge of terms that meet at some of their places")
        if not meeting:
            return parts
        bounds = sorted(cuts)
        result = []
        for i, (r0, r1, c, e) in enumerate(parts):
            inner = [b for b in bounds if r0 < b < r1] if i in meeting else []
            if not inner:
                result.append((r0, r1, c, e))
                continue
            for s0, s1 in zip([r0] + inner, inner + [r1]):
                cols = self.cols(("cut", c, s0 - r0, s1 - r0),
                                 lambda c=c, a=s0 - r0, b=s1 - r0: arrays[c][a:b])
                result.append((s0, s1, cols, self.E.compose(e, (-1, s0 - r0, 1, 0), s1 - s0)))
        return result

    def _overlap(self, p, q):
        """Whether parts ``p`` and ``q`` share no place (None), all of theirs
        ("same") or some ("some")."""
        a0, b0 = max(p[0], q[0]), min(p[1], q[1])
        if a0 >= b0:
            return None
        cp = self.cols.arrays[p[2]][a0 - p[0]:b0 - p[0]]
        cq = self.cols.arrays[q[2]][a0 - q[0]:b0 - q[0]]
        met = (cp == cq) & (cp >= 0)
        if not met.any():
            return None
        if p[:2] == q[:2] and np.array_equal(cp, cq):
            return "same"
        return "some"

    def _places(self, J):
        """``(first row of the block, first row, stop row, columns, value)`` of
        every part of every term of ``J``, in the order of the eager way's
        merge: a value is the matrix's data times the row scale ``d * s``."""
        E = self.E
        out = []
        for first, block in self.pieces(J):
            for s, d, M in self.terms(block):
                scale = s if d is None else E.arith("multiply", self.vector(d), s)
                for a0, b0, c, data in M.parts:
                    local = E.compose(scale, (-1, a0, 1, 0), b0 - a0)
                    out.append((first, a0, b0, c,
                                local if data is None else E.arith("multiply", data, local)))
        return out

    def mask_rows(self, J, chosen):
        """``J`` with its rows where ``chosen`` is 0 set to 0.0 (not multiplied:
        an inf or nan there never reaches the result)."""
        if J is None or self.is_zero(J):
            return J
        E = self.E
        terms = self.terms(J)
        if any(M.merged for _, _, M in terms):
            # (the eager way masks a merged matrix by its row factor, or its
            # values where one of them is not finite: a choice by values the
            # program would know only after computing them)
            raise Untraceable("np.where of a value whose terms the eager way merged")
        return _Jacobian(J.n, tuple(
            (E.lit(1), E.keep(s if d is None else E.arith("multiply", self.vector(d), s),
                              chosen), M)
            for s, d, M in terms))

    def vstack(self, jacobians):
        if len(jacobians) == 1:
            return jacobians[0]
        blocks, first = [], 0
        for J in jacobians:
            blocks.extend((first + f, block) for f, block in self.pieces(J))
            first += J.n
        return _Jacobian(first, blocks=tuple(blocks))

    def pieces(self, J):
        return J.blocks if J.blocks is not None else ((0, J),)

    def merged(self, J):
        """``(first row, stop row, columns, expression)`` of every part the
        final merge writes, in its order (places met twice are summed in it
        by the program's adds)."""
        return [(first + a0, first + b0, c, e) for first, a0, b0, c, e in self._places(J)
                if np.count_nonzero(self.cols.arrays[c] >= 0)]


class _Reads:
    """The rows ``rows`` of a read (-1: none), for the parts of a matrix:
    which of its rows a part's rows give, and the maps that read them (by
    ``stride`` ``(start, step)`` where the rows are ``start + step * j``,
    else by ``index``, the number of the array of the rows with -1 read as
    0, or by arrays of their own)."""

    def __init__(self, E, rows, index, stride):
        self.E = E
        self.rows = rows
        self.index = index
        self.stride = stride
        self.m = len(rows)

    def whole(self):
        """The map of every row of the read (a row -1 reads row 0)."""
        if self.stride is not None:
            return (-1, self.stride[0], self.stride[1], 0)
        return (self.index, 0, 1, 0)

    def part(self, a0, b0):
        """``(first, stop, local)``: the rows of the read within a part of rows
        ``a0 .. b0`` (trimmed to the first and last such), and the part's
        rows they read (-1: none); None if none."""
        inside = (self.rows >= a0) & (self.rows < b0)
        if not inside.any():
            return None
        where = np.flatnonzero(inside)
        r0, r1 = int(where[0]), int(where[-1]) + 1
        return r0, r1, np.where(inside[r0:r1], self.rows[r0:r1] - a0, -1)

    def map(self, a0, b0, r0, r1):
        """The map of rows ``r0 .. r1`` of the read into a part of rows ``a0 ..
        b0`` (a row outside it reads the part's first)."""
        if self.stride is not None:
            start, step = self.stride
            return (-1, start + step * r0 - a0, step, 0)
        rows = self.rows[r0:r1]
        if ((rows >= a0) & (rows < b0)).all():
            return (self.index, r0, 1, -a0)
        E = self.E
        return (E.array(("read", E.unique()), lambda: np.where((rows >= a0) & (rows < b0),
                                                               rows - a0, 0)), 0, 1, 0)


# ---------------------------------------------------------------- propagation

def _broadcast_rows(E, shape, out):
    """The number of the array of the rows that numpy's broadcast of a value of
    ``shape`` to ``out`` reads (C order)."""
    def rows():
        size = int(np.prod(shape, dtype=np.int64))
        return np.broadcast_to(np.arange(size).reshape(shape), out).ravel().astype(np.int64)
    return E.array(("broadcast", shape, out), rows)


def _broadcast(E, e, shape, out):
    """Expression ``e`` of a value of ``shape`` read as numpy broadcasts it to
    ``out``."""
    if shape == out or E.scalar(e):
        return e
    size = int(np.prod(out, dtype=np.int64))
    return E.compose(e, (_broadcast_rows(E, shape, out), 0, 1, 0), size)


def _operand(E, tape, structure, shape):
    """The expression of an operand, broadcast to ``shape``."""
    kind, k = structure
    if kind == "p":
        return E.make(("param", k))
    return _broadcast(E, E.value(k), tape.shapes[k], shape)


#: the values recomputed in a program rather than read, by ufunc: numpy's own
#: operations on the operands (the rest cost more than a read, or numpy's
#: rounding of them is its own: exp, power...)
_CHEAP = {
    np.add: lambda E, a, b: E.arith("add", a, b),
    np.subtract: lambda E, a, b: E.arith("subtract", a, b),
    np.multiply: lambda E, a, b: E.arith("multiply", a, b),
    np.divide: lambda E, a, b: E.arith("divide", a, b),
    np.negative: lambda E, a: E.negative(a),
    np.positive: lambda E, a: a,
    np.square: lambda E, a: E.arith("multiply", a, a),
    np.reciprocal: lambda E, a: E.arith("divide", E.lit(1.0), a),
}
#: the most operations a recomputed value may take
_INLINE_BUDGET = 6


def _gathered(E, tape, entry):
    """``(key, rows, map)`` of a gather or a roll: the key of its matrices as
    the eager way names them, the rows it reads (negative ones counted from
    the end) and the number of their array."""
    if entry[0] == "roll":
        _, source, shift, n, keywords = entry
        shift = shift % n if n else 0
        index = E.array(("roll", shift, n), lambda: (np.arange(n) - shift) % n)
        return ("roll", entry[2], keywords, n), index
    _, source, k, m, name = entry
    user, n = tape.indexes[k], tape.lengths[source]
    # (an index array's reads share a matrix, a short list's by its numbers, a
    # longer list's none)
    key = ("array", (n,), k) if name is None else None if name == ("own",) else name
    return key, E.array(("gather", k, n), lambda: np.where(user < 0, user + n, user))


def _inline(E, tape, node, entry):
    """``E.values[node]``: the value of ``node`` as an expression of its
    operands' values, for reads (a leaf at other rows) and cheap elementwise
    operations within the budget; never a scalar expression (an array of a
    0-d value's has vector partials in the eager way, multiplied out in their
    order; a 0-d node's value is its parameter, see :func:`_propagate`)."""
    kind = entry[0]
    e = None
    if kind == "slice":
        _, source, start, stop, step, m = entry
        e = E.compose(E.value(source), (-1, start, step, 0), m)
    elif kind in ("gather", "roll"):
        _, index = _gathered(E, tape, entry)
        e = E.compose(E.value(entry[1]), (index, 0, 1, 0), tape.lengths[node])
    elif kind in ("reshape", "copy"):
        e = E.value(entry[1])
    elif kind in ("basic", "move"):
        index = (_basic_rows if kind == "basic" else _moved_rows)(E, tape, entry)
        e = E.compose(E.value(entry[1]), (index, 0, 1, 0), tape.lengths[node])
    elif kind == "ufunc" and entry[1] in _CHEAP:
        shape = tape.shapes[node]
        e = _CHEAP[entry[1]](E, *(_operand(E, tape, s, shape) for s in entry[2]))
        if E.size(e) > _INLINE_BUDGET:
            e = None
    if e is not None and not E.scalar(e):
        E.values[node] = e


def _differentiated(E, A, tape, node, entry, J):
    """The Jacobian of a ufunc's node: its forward operands' Jacobians, each
    broadcast and scaled by the partial the eager rule gives (called on
    symbolic values), summed."""
    if entry[0] == "power":
        _, structure, exponent, kind = entry
        ufunc, structures = np.power, (structure,)
        # (the exponent as the eager way holds it: np.int64 or np.float64)
        extra = ((np.int64 if kind == "int" else np.float64)(exponent),)
    else:
        _, ufunc, structures = entry
        extra = ()
    forwards = [i for i, (kind, k) in enumerate(structures) if kind == "n" and J[k] is not None]
    if not forwards:
        return None
    rows, shape = tape.lengths[node], tape.shapes[node]
    E.rows = rows
    operands = [_Sym(E, _operand(E, tape, s, shape)) for s in structures] + list(extra)
    out = _Sym(E, E.value(node))
    partials = DERIVATIVES[ufunc]
    terms = []
    for i in forwards:
        rule = partials[i]
        try:
            partial = rule(*operands, out) if callable(rule) else rule
        except Untraceable:
            raise
        except Exception as exc:
            raise Untraceable("the rule of %s: %s: %s" % (ufunc.__name__, type(exc).__name__,
                                                          exc)) from None
        if type(partial) is _Sym:
            factor = partial.e
        else:
            factor = _symbolic(E, partial)
        operand = _broadcast_jacobian(E, A, tape, J, structures[i][1], shape)
        terms.append(A.scale(operand, factor, not E.scalar(factor)))
    return terms[0] if len(terms) == 1 else A.add(terms)


def _where(E, A, tape, node, entry, J):
    """``np.where``'s Jacobian as the eager way's ``select``: each forward
    branch broadcast, its rows of the other branch masked, summed; and so
    the selections' (``np.maximum``...: entries ``"select"``), except that
    ``np.where`` of one value in both branches keeps its Jacobian."""
    kind, condition, a, b = entry
    shape = tape.shapes[node]
    forwards = [(i, s[1]) for i, s in enumerate((a, b)) if s[0] == "n" and J[s[1]] is not None]
    if not forwards:
        return None
    if a == b and kind == "where":
        return _broadcast_jacobian(E, A, tape, J, a[1], shape)
    chosen = _operand(E, tape, condition, shape)
    # (not chosen: 1 - chosen, 0.0 or 1.0 exactly)
    masks = (chosen, E.arith("subtract", E.lit(1.0), chosen))
    return A.add([A.mask_rows(_broadcast_jacobian(E, A, tape, J, k, shape), masks[i])
                  for i, k in forwards])


def _broadcast_jacobian(E, A, tape, J, k, shape):
    """The Jacobian of node ``k`` broadcast to ``shape`` (as the eager way's
    ``broadcast_jacobian``: the rows numpy's broadcast reads, named by the two
    shapes)."""
    if tape.shapes[k] == shape:
        return J[k]
    index = _broadcast_rows(E, tape.shapes[k], shape)
    return A.take_rows(J[k], E.arrays[index], ("broadcast", tape.shapes[k], shape),
                       index=index)


def _basic_key(form):
    """The key of a read by ints, slices, None and Ellipsis (see
    :func:`sparsegrad._trace._basic_form`)."""
    return tuple(slice(*part[1:]) if type(part) is tuple else part for part in form)


def _basic_rows(E, tape, entry):
    """The number of the array of the rows that a read by a basic key reads."""
    _, source, form = entry
    shape = tape.shapes[source]
    return E.array(("basic", shape, form), lambda: np.arange(
        tape.lengths[source], dtype=np.int64).reshape(shape)[_basic_key(form)].ravel())


def _pad_rows(E, tape, entry):
    """``(rows, index)``: the rows that ``np.pad`` by zeros reads (-1: a zero),
    and the number of their array with -1 read as 0."""
    _, source, widths = entry
    shape = tape.shapes[source]
    rows = np.pad(np.arange(tape.lengths[source], dtype=np.int64).reshape(shape),
                  _lists(widths), constant_values=-1).ravel()
    return rows, E.array(("pad", shape, widths), lambda: np.maximum(rows, 0))


def _arguments(form):
    """The arguments ``(args, kwargs)`` whose form
    :func:`sparsegrad._trace._plain_arguments` made."""
    def value(v):
        if type(v) is not tuple:
            return v
        if v[0] == "bool":
            return v[1]
        parts = [value(part) for part in v[1:]]
        return parts if v[0] == "list" else tuple(parts)
    positional, keywords = form
    return [value(v) for v in positional], {k: value(v) for k, v in keywords}


def _moved_rows(E, tape, entry):
    """The number of the array of the rows a movement of the data reads."""
    _, source, func, form = entry
    shape = tape.shapes[source]

    def rows():
        args, kwargs = _arguments(form)
        numbers = np.arange(tape.lengths[source], dtype=np.int64).reshape(shape)
        return np.ascontiguousarray(func(numbers, *args, **kwargs), dtype=np.int64).ravel()
    return E.array(("move", func, form, shape), rows)


def _lists(nested):
    """Tuples nested in ``nested`` as lists (numpy's form of pad widths)."""
    return [_lists(v) for v in nested] if type(nested) is tuple else nested


class _AssemblyRows:
    """:class:`sparsegrad._indexing.EagerRows` on :class:`_Jacobian`: the
    Jacobian algebra of an :class:`~sparsegrad._indexing.Assembly` of written
    values, which then assembles as the eager way's does (the same pieces,
    runs, gathers and names of matrices)."""

    def __init__(self, E, A):
        self.E = E
        self.A = A
        self._kept = {}   # (the eager way's kept row numbers: key -> (rows, number))

    @staticmethod
    def seed(J):
        return None

    @staticmethod
    def n_rows(J):
        return J.n

    def is_zero(self, J):
        return self.A.is_zero(J)

    @staticmethod
    def check(pieces):
        pass

    @staticmethod
    def zero(seed, n):
        return _Jacobian(n, ())

    def add(self, jacobians):
        return self.A.add(jacobians)

    def vstack(self, jacobians):
        return self.A.vstack(jacobians)

    @staticmethod
    def stacked(seed, blocks):
        firsts = itertools.accumulate((block.n for block in blocks[:-1]), initial=0)
        return _Jacobian(sum(block.n for block in blocks), blocks=tuple(zip(firsts, blocks)))

    def take_rows(self, J, rows):
        index = self.E.array(("assembled", self.E.unique()), lambda: np.maximum(rows, 0))
        return self.A.take_rows(J, rows, None, index=index)

    def slice_rows(self, J, read):
        return self.A.take_rows(J, np.arange(read.start, read.stop), ((J.n,), read.indices(J.n)),
                                stride=(read.start, 1))

    def kept_rows(self, seed, J, key, rows):
        # (the eager way keeps one array of row numbers per key, replaced by
        # other numbers: equal numbers under one key are one array, one name)
        known = self._kept.get(key)
        if known is None or not np.array_equal(known[0], rows):
            known = self._kept[key] = (rows, self.E.unique())
        index = self.E.array(("kept", known[1]), lambda: np.maximum(rows, 0))
        return self.A.take_rows(J, rows, ("array", (J.n,), ("kept", known[1])), index=index)


#: entries whose operand is the node after their kind
_READS_NODE = frozenset(("slice", "gather", "roll", "reshape", "basic", "move", "pad", "copy"))


def _read_nodes(entry):
    """The nodes whose Jacobians an entry reads (a write's: its source's)."""
    kind = entry[0]
    if kind in _READS_NODE:
        return (entry[1],)
    if kind == "join":
        return entry[2]
    if kind == "ufunc":
        structures = entry[2]
    elif kind in ("where", "select"):
        structures = entry[1:4]
    elif kind in ("power", "write"):
        structures = (entry[1] if kind == "power" else entry[3],)
    else:
        return ()
    return [k for s, k in structures if s == "n"]


def _materialize(E, A, J, entry, tape, node):
    """Assemblies that ``entry`` (of ``node``) reads assembled, as the eager
    way's reads do (all but comparisons, gathers by index arrays, reads that
    numpy makes no view for and the target of a write read a value's whole
    Jacobian, which assembles it in place), and views read again after a
    write, read (by all but comparisons)."""
    if entry[0] == "mask":
        return
    gathered = entry[0] == "gather" or _by_rows(entry, tape, node)
    for k in _read_nodes(entry):
        if type(J[k]) is _Reread:
            J[k] = J[k].read(E, A, J)
        if isinstance(J[k], Assembly) and not gathered:
            J[k] = J[k].materialize()


def _by_rows(entry, tape, node):
    """Whether ``entry`` is a basic read that numpy makes no view for (an empty
    or 0-d result), which the eager way takes from an assembly by its rows."""
    return entry[0] in ("basic", "slice") and (not tape.lengths[node] or not tape.shapes[node])


def replay(steps, array):
    """``array`` read by ``steps``, the forms of the reads that made a view
    (``("basic", form)``, ``("range", start, stop, step)`` as ``slice.indices``
    gives them, ``("reshape", shape)``, ``("move", function, arguments)``):
    the view, of values or of row numbers."""
    for step in steps:
        if step[0] == "basic":
            array = array[_basic_key(step[1])]
        elif step[0] == "range":
            # (a stop of -1 there: past the first element, going down)
            _, start, stop, stride = step
            array = array[start:None if stop < 0 else stop:stride]
        elif step[0] == "reshape":
            array = array.reshape(step[1])
        else:
            args, kwargs = _arguments(step[2])
            array = step[1](array, *args, **kwargs)
    return array


def _target_rows(tape, base, form):
    """The rows of value ``base`` that a write of ``form`` writes (through a
    view: the view's rows, then its key's), shaped as the written region."""
    rows = row_index(tape.shapes[base])
    if form[0] == "view":
        _, steps, form = form
        rows = replay(steps, rows)
    return rows[_basic_key(form[1]) if form[0] == "basic" else tape.indexes[form[1]]]


class _Reread:
    """The Jacobian of a view read again after a write into its root: the
    eager way's stale view reads it (rows ``rows`` of the root's Jacobian,
    assembled first) when an operation first needs it, not before."""

    __slots__ = ("root", "rows")

    def __init__(self, root, rows):
        self.root = root
        self.rows = rows

    def read(self, E, A, J):
        root = J[self.root]
        if isinstance(root, Assembly):
            root = J[self.root] = root.materialize()
        if root is None:
            return None
        rows = self.rows
        index = E.array(("reread", E.unique()), lambda: rows)
        return A.take_rows(root, rows, None, index=index)


def _written(tape, entry, J, rows):
    """The Jacobian of a value after a write: its assembly (``rows``: the
    compiler's :class:`_AssemblyRows`) with the rows written, as the eager
    way's ``value._write`` writes them."""
    _, base, form, (kind, k) = entry
    assembly = J[base]
    forward = kind == "n" and J[k] is not None
    if assembly is None:
        if forward:
            # (the eager way's plain array cannot take it: its error)
            raise Untraceable("a write of a value into a constant")
        return None
    if not isinstance(assembly, Assembly):
        assembly = Assembly(assembly, rows)
    target = _target_rows(tape, base, form)
    if forward:
        source = broadcast_rows(tape.shapes[k], target.shape)
        assembly.write(target.ravel(), J[k], source.ravel())
    else:
        assembly.write(target.ravel(), None, None)
    return assembly


def _propagate(E, A, tape):
    """The eager way's Jacobian (:class:`_Jacobian`) of every node, None for
    the values the eager way holds as plain arrays (constants, masks, what is
    computed from them only)."""
    J = []
    assembling = _AssemblyRows(E, A)
    for node, entry in enumerate(tape.entries):
        kind = entry[0]
        _materialize(E, A, J, entry, tape, node)
        _inline(E, tape, node, entry)
        if node in tape.scalars:
            # (a 0-d value: a number to the eager way, a scalar of the call here)
            E.values[node] = E.make(("param", tape.scalars[node]))
        if kind == "seed":
            J.append(A.identity(tape.lengths[0]))
        elif kind in ("const", "mask"):
            J.append(None)
        elif kind == "created":
            J.append(_Jacobian(tape.lengths[node], ()))
        elif kind == "write":
            J.append(_written(tape, entry, J, assembling))
        elif kind == "reread":
            _, root, steps = entry
            J.append(_Reread(root, np.ascontiguousarray(
                replay(steps, row_index(tape.shapes[root])), dtype=np.int64).ravel()))
        elif kind == "gather" and isinstance(J[entry[1]], Assembly):
            # (the eager way gathers an assembly's rows by index without assembling it)
            _, index = _gathered(E, tape, entry)
            J.append(J[entry[1]].take_rows(E.arrays[index]))
        elif kind in ("basic", "slice") and isinstance(J[entry[1]], Assembly):
            # (and so its reads that numpy makes no view for, see _by_rows)
            rows = (E.arrays[_basic_rows(E, tape, entry)] if kind == "basic"
                    else entry[2] + entry[4] * np.arange(entry[5]))
            J.append(J[entry[1]].take_rows(rows))
        elif kind == "slice":
            _, source, start, stop, step, m = entry
            J.append(A.take_rows(J[source], start + step * np.arange(m),
                                 ((tape.lengths[source],), (start, stop, step)),
                                 stride=(start, step)))
        elif kind in ("gather", "roll"):
            key, index = _gathered(E, tape, entry)
            J.append(A.take_rows(J[entry[1]], E.arrays[index], key, index=index))
        elif kind in ("reshape", "copy"):
            # (the eager way's reshape in C order and copy keep the Jacobian)
            J.append(J[entry[1]])
        elif kind == "basic":
            index = _basic_rows(E, tape, entry)
            source = entry[1]
            # (named as the eager way names the read: None, a matrix of its own,
            # for a key with None or Ellipsis)
            key = slice_key(tape.shapes[source], _basic_key(entry[2]))
            J.append(A.take_rows(J[source], E.arrays[index], key, index=index))
        elif kind == "move":
            index = _moved_rows(E, tape, entry)
            source = entry[1]
            # (named as the eager way names it: by the function, its arguments
            # and the shape)
            key = ("move", entry[2], entry[3], tape.shapes[source])
            J.append(A.take_rows(A.vstack([J[source]]), E.arrays[index], key, index=index))
        elif kind == "pad":
            rows, index = _pad_rows(E, tape, entry)
            source = entry[1]
            key = ("pad", entry[2], tape.shapes[source])
            J.append(A.take_rows(A.vstack([J[source]]), rows, key, index=index))
        elif kind == "join":
            J.append(_joined(E, A, tape, entry, J))
        elif kind in ("where", "select"):
            J.append(_where(E, A, tape, node, entry, J))
        else:
            J.append(_differentiated(E, A, tape, node, entry, J))
    return J


def _joined(E, A, tape, entry, J):
    """The Jacobian of ``np.concatenate``, ``np.stack`` and the like, as the
    eager way's: the parts' Jacobians stacked as they are where the eager way
    joins them in order (``_functions._joined_in_order``), else the forward
    parts' stacked and read at the rows the function joins (-1 for a
    constant's), named by the function, its arguments and the parts."""
    _, func, parts, form = entry
    forwards = [p for p in parts if J[p] is not None]
    if not forwards:
        return None
    args, kwargs = _arguments(form)
    if _in_order(func, [tape.shapes[p] for p in parts], len(forwards) == len(parts),
                 args, kwargs):
        return A.vstack([J[p] for p in parts])
    arrays, offset = [], 0
    for p in parts:
        shape = tape.shapes[p]
        if J[p] is None:
            arrays.append(np.full(shape, -1, dtype=np.int64))
        else:
            arrays.append(offset + np.arange(tape.lengths[p], dtype=np.int64).reshape(shape))
            offset += tape.lengths[p]
    rows = np.ascontiguousarray(func(arrays, *args, **kwargs), dtype=np.int64).ravel()
    key = ("join", func, form, tuple((J[p] is not None, tape.shapes[p]) for p in parts))
    index = E.array(("read", key), lambda: np.maximum(rows, 0))
    return A.take_rows(A.vstack([J[p] for p in forwards]), rows, key, index=index)


def _in_order(func, shapes, all_forward, args, kwargs):
    """Whether the eager way joins parts of ``shapes`` by stacking their
    Jacobians as they are (the conditions of ``_functions._joined_in_order``)."""
    if not all_forward:
        return False
    if func is np.concatenate and len(args) + len(kwargs) <= 1 and set(kwargs) <= {"axis"}:
        axis = args[0] if args else kwargs.get("axis", 0)
    elif func is np.hstack and not args and not kwargs and all(len(s) == 1 for s in shapes):
        axis = 0
    else:
        return False
    if axis is None:
        return True
    return (type(axis) is int and axis == 0
            and all(len(s) >= 1 and s[1:] == shapes[0][1:] for s in shapes))


# ---------------------------------------------------------------- compiling

class Program:
    """What :func:`compile_tape` makes of a tape: the instructions and segments
    of ``run_program``, its leaves (``(node, index, start, step, offset,
    runs)``; a node ``("aux", k)`` is the k-th value ``aux_steps`` compute),
    the steps of its scalars (from the call's, ``(kind, function, operands)``
    or ``("lit", c, ())``), the guards on them (``(kind, a, b, held)``: the
    choice :func:`_guard` made at the compiled call), the owners and adds of
    the places, the pattern and the copies of the index arrays it was made
    with."""

    __slots__ = ("instructions", "segments", "leaves", "arrays", "scalar_steps", "guards",
                 "aux_steps", "owners", "adds", "indptr", "indices", "shape", "index_copies",
                 "nbytes", "needed", "_known")

    def __init__(self):
        self._known = None

    def scalars(self, tape):
        """The scalars of ``tape``'s call and of the program's steps, or None
        where a guard does not hold (the call needs another program)."""
        params = tape.params
        # (the steps cost a microsecond each: kept for the scalars of the last
        # call, which a solver's calls repeat; by their bits and types)
        key = (np.array(params, dtype=np.float64).tobytes(), tuple(map(type, params)))
        known = self._known
        if known is not None and known[0] == key:
            return known[1]
        values = self._scalars(params)
        if values is not None:
            self._known = (key, values)
        return values

    def _scalars(self, params):
        values = list(params)
        try:
            with np.errstate(all="ignore"):
                for kind, function, operands in self.scalar_steps:
                    values.append(function if kind == "lit" else _scalar_result(
                        kind, function, [values[i] for i in operands]))
        except Exception:
            return None
        for kind, a, b, held in self.guards:
            if _guard(kind, values[a], values[b]) != held:
                return None
        return values

    def run(self, tape, scalars):
        """The data of the Jacobian at the values of ``tape`` (``scalars``: what
        :meth:`scalars` gave)."""
        aux = _run_aux(self.aux_steps, tape, scalars) if self.aux_steps else ()
        # (a mask is read as 0.0 and 1.0)
        # (each value once: several leaves read one value, a copy of it too)
        floats = {}
        for leaf in self.leaves:
            if leaf[0] not in floats:
                floats[leaf[0]] = _as_float(aux[leaf[0][1]] if type(leaf[0]) is tuple
                                            else tape.values[leaf[0]])
        leaves = [(floats[leaf[0]],) + leaf[1:] for leaf in self.leaves]
        return _fast.run_program(self.instructions, self.segments, leaves,
                                 np.array(scalars, dtype=np.float64), self.owners, self.adds,
                                 self.indptr)

    def same_indexes(self, tape):
        """Whether ``tape`` gathered by arrays equal to the ones compiled in (the
        tape's copies are this program's where they were equal when read)."""
        return len(tape.indexes) == len(self.index_copies) and all(
            array is copy or same_index(array, copy)
            for array, copy in zip(tape.indexes, self.index_copies))


def same_index(a, b):
    """Whether index arrays ``a`` and ``b`` have one shape and equal entries."""
    return _fast.kernels.same_index(a, b)


def _as_float(values):
    """A node's values as the compiled runner reads them: float64, contiguous
    (a strided view is copied; the runner takes nothing else)."""
    if values.dtype != np.float64:
        return values.astype(np.float64)
    return values if values.flags.c_contiguous else np.ascontiguousarray(values)


_NUMPY_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
                 "divide": np.divide, "keep": lambda a, b: np.where(b != 0, a, 0.0)}
_NUMPY_SCALAR = {"scale": np.multiply, "shift": np.add,
                 "rdivide": lambda a, c: np.divide(c, a)}


def _run_aux(steps, tape, scalars):
    """The values of a program's ``aux``, by numpy as the eager rules compute
    them (its steps: see :func:`_aux_steps`)."""
    results, aux = [], []
    with np.errstate(all="ignore"):
        for step in steps:
            kind = step[0]
            if kind == "scalar":
                r = scalars[step[1]]
            elif kind == "leaf":
                _, node, index, start, stride, offset, rows = step
                source = aux[node[1]] if type(node) is tuple else _as_float(tape.values[node])
                positions = start + stride * np.arange(rows)
                positions = positions + offset if index is None else index[positions] + offset
                r = source[positions]
            elif kind in _NUMPY_BINARY:
                r = _NUMPY_BINARY[kind](results[step[1]], results[step[2]])
            elif kind in _NUMPY_SCALAR:
                r = _NUMPY_SCALAR[kind](results[step[1]], results[step[2]])
            elif kind == "negative":
                r = np.negative(results[step[1]])
            elif kind == "sqrt":
                r = np.sqrt(results[step[1]])
            else:
                r = step[1](*[results[i] for i in step[2]])
                aux.append(r)
            results.append(r)
    return aux


def _aux_steps(E, param_slot):
    """Steps computing ``E.aux`` in order: ``("scalar", slot)``, ``("leaf",
    node, index, start, step, offset, rows)``, an operation on earlier steps
    or ``("ufunc", ufunc, steps)`` (the next value of ``aux``)."""
    steps, done = [], {}

    def visit(e, rows):
        if E.scalar(e):
            key = (e, None)
        else:
            key = (e, rows)
        known = done.get(key)
        if known is not None:
            return known
        form = E.forms[e]
        kind = form[0]
        if E.scalar(e):
            step = ("scalar", param_slot(e))
        elif kind == "leaf":
            array, start, stride, offset = form[2]
            step = ("leaf", form[1], None if array < 0 else E.arrays[array], start, stride,
                    offset, rows)
        elif kind in _WITH_SCALAR:
            step = (kind, visit(form[1], rows), visit(form[2], rows))
        else:
            step = (kind,) + tuple(visit(a, rows) for a in form[1:])
        steps.append(step)
        done[key] = len(steps) - 1
        return done[key]

    for ufunc, operands, rows in E.aux:
        arguments = tuple(visit(a, rows) for a in operands)
        steps.append(("ufunc", ufunc, arguments))
    return steps


class _Arrays:
    """int64 arrays by the keys of their derivations: ``self(key, make)`` is
    the number of the array ``make()`` gives, made once per key (so that leaves
    of the same map are recognised by it)."""

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
    output covered by the same terms (in the terms' order)."""
    bounds = sorted({0, m} | {a0 for a0, _, _, _ in terms} | {b0 for _, b0, _, _ in terms})
    segments = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        covering = [(c, start - a0, e) for a0, b0, c, e in terms if a0 <= start and stop <= b0]
        if covering and stop > start:
            segments.append((start, stop, covering))
    return segments


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
            # (a result never takes an operand's buffer, freed only below: the
            # loops are compiled for results apart from their operands)
            if free:
                d = free.pop()
            else:
                d, n_buffers = n_buffers, n_buffers + 1
            buffer_of[item] = d
            if kind in _SCALAR_KINDS:
                instructions.append((ops["param"], d, param_slots(item), 0))
            elif kind == "leaf":
                instructions.append((ops["load"], d, leaf_slots((form[1],) + form[2]), 0))
            elif kind in _WITH_SCALAR:
                instructions.append((ops[kind], d, read_buffers[0], param_slots(form[2])))
            elif kind in _UNARY_OPS:
                instructions.append((ops[kind], d, read_buffers[0], 0))
            else:
                instructions.append((ops[kind], d, read_buffers[0], read_buffers[1]))
        for r in set(reads):
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


def _pieces(A, layout):
    """The pieces of segments ``layout`` (``(start, stop, slots)``, a slot the
    terms ``(columns, offset, expression)`` summed into it in order):
    ``(columns, first row, segment)``, one per slot, in order."""
    for _, _, covering in layout:
        if len(covering) > _MAX_SLOTS:
            raise Untraceable("more than %d terms in rows of the result" % _MAX_SLOTS)
    return [(A.cols.arrays[members[0][0]][members[0][1]:members[0][1] + stop - start],
             start, k)
            for k, (start, stop, covering) in enumerate(layout) for members in covering]


def _emitted(E, layout, leaf_slot, param_slot):
    """``(instructions, segments)`` of ``run_program`` for segments ``layout``
    (see :func:`_pieces`): each slot's root the sum of its terms, in order."""
    instructions, segments = [], []
    for start, stop, covering in layout:
        roots = []
        for slot, members in enumerate(covering):
            root = None
            for _, offset, e in members:
                part = E.compose(e, (-1, offset, 1, 0), stop - start)
                root = part if root is None else E.arith("add", root, part)
            roots.append((root, slot))
        code, n_buffers = _emit(E, roots, leaf_slot, param_slot)
        segments.append((stop - start, len(instructions), len(instructions) + len(code),
                         n_buffers, start, len(roots)))
        instructions.extend(code)
    return instructions, segments


#: the fewest rows of a run whose slots meet alike for them to be summed in
#: the block; the most stretches of rows of other meetings a segment is read
#: in, and the most runs it is cut into
_FUSED_ROWS = 64
_MOST_STRETCHES = 64
_MOST_RUNS = 32


def _fused(layout, owners, later):
    """``layout`` with each run of at least :data:`_FUSED_ROWS` rows of a
    segment whose slots meet the same slots at their places at every row
    split off, those slots summed into the first one's (in slot order: the
    order of the adds they replace); None where there is no such run.
    ``owners`` and ``later``: :func:`_owners`' of the layout's pieces."""
    by_segment = collections.defaultdict(list)
    for segment, slot, rows, places in later:
        by_segment[segment].append((slot, rows, owners[places]))
    result, changed = [], False
    for k, (start, stop, covering) in enumerate(layout):
        runs = (_alike(stop - start, len(covering), by_segment[k])
                if k in by_segment else None)
        if runs is None:
            result.append((start, stop, covering))
            continue
        changed = True
        for r0, r1, meets in runs:
            absorbed = dict(meets)
            slots = []
            for slot, members in enumerate(covering):
                if slot in absorbed:
                    continue
                members = list(members)
                for other in sorted(s for s, o in absorbed.items() if o == slot):
                    members += covering[other]
                slots.append([(c, offset + r0, e) for c, offset, e in members])
            result.append((start + r0, start + r1, slots))
    return result if changed else None


def _alike(n, n_slots, added):
    """The runs ``(first row, stop row, ((slot, owner slot), ...))`` of the
    ``n`` rows of a segment of ``n_slots`` slots, whose slots are added to the
    same owners at every row (``added``: ``(slot, rows, owners)`` of each slot
    added somewhere); runs of fewer than :data:`_FUSED_ROWS` rows, or without
    adds, as one run without.  None where none would be summed or there
    would be too many runs."""
    signature = np.full((n, n_slots), -1, dtype=np.int32)
    for slot, rows, owner in added:
        signature[rows, slot] = owner
    bounds = np.concatenate([[0], np.flatnonzero(
        np.any(signature[1:] != signature[:-1], axis=1)) + 1, [n]])
    if len(bounds) - 1 > _MOST_STRETCHES:
        return None
    runs = []
    for r0, r1 in zip(bounds[:-1], bounds[1:]):
        meets = tuple((slot, int(owner)) for slot, owner in enumerate(signature[r0])
                      if owner >= 0)
        if not meets or r1 - r0 < _FUSED_ROWS:
            meets = ()
        if runs and not meets and not runs[-1][2]:
            runs[-1] = (runs[-1][0], int(r1), ())
        else:
            runs.append((int(r0), int(r1), meets))
    if not any(meets for _, _, meets in runs) or len(runs) > _MOST_RUNS:
        return None
    return runs


def _compile(tape, output):
    E = _Expressions(tape.params)
    A = _Algebra(E)
    Js = _propagate(E, A, tape)
    J = Js[output]
    if type(J) is _Reread:
        J = J.read(E, A, Js)
    if isinstance(J, Assembly):
        J = J.materialize()
    if J is None:
        raise Untraceable("a result that does not depend on the argument")
    terms = A.merged(J)
    m, n = tape.lengths[output], tape.size
    leaves = {}

    def leaf_slot(spec):
        return leaves.setdefault(spec, len(leaves))

    # (the params of a call: its scalars, then the scalar expressions' values,
    # each computed by the steps once per call)
    steps, index_of = [], {}

    def param_slot(e):
        """Where the value of scalar ``e`` lands, its steps appended first."""
        if e in index_of:
            return index_of[e]
        form = E.forms[e]
        if form[0] == "param":
            index_of[e] = form[1]
            return form[1]
        if form[0] == "lit":
            steps.append(("lit", E.literals[e], ()))
        else:
            operands = tuple(param_slot(a) for a in _scalar_operands(form))
            steps.append((form[0], _scalar_function(form), operands))
        index_of[e] = len(tape.params) + len(steps) - 1
        return index_of[e]

    # (a segment's slots: each the terms summed into one root, in the order
    # of the merge)
    layout = [(start, stop, [[entry] for entry in covering])
              for start, stop, covering in _segments(terms, m)]
    pieces = _pieces(A, layout)
    kernels = _fast.kernels
    index_dtype = _index_dtype(n, sum(len(c) for c, _, _ in pieces))
    selection_terms = [(None, c, None, None, first) for c, first, _ in pieces]
    indptr, indices, _ = kernels.merge_scaled(m, n, selection_terms, pattern_only=True,
                                              index_dtype=index_dtype)

    def plan():
        return _owners(kernels.merge_plan(indptr, indices,
                                          [(None, c, first) for c, first, _ in pieces]),
                       pieces, max([len(covering) for _, _, covering in layout] + [1]),
                       len(indices))
    owners, later = plan()
    fused = _fused(layout, owners, later) if later else None
    if fused is not None:
        # (places that terms meet at alike over many rows: summed in the
        # block, as the adds would, instead of one add per place)
        layout = fused
        pieces = _pieces(A, layout)
        owners, later = plan()
    instructions, segments = _emitted(E, layout, leaf_slot, param_slot)
    program = Program()
    program.owners, program.adds = owners, _adds(later)
    program.instructions = np.array(instructions, dtype=np.int64).reshape(-1, 4)
    program.segments = np.array(segments, dtype=np.int64).reshape(-1, 6)
    program.guards = [(kind, param_slot(a), param_slot(b), held) for kind, a, b, held in A.guards]
    program.aux_steps = _aux_steps(E, param_slot)
    program.scalar_steps = steps
    program.leaves = [None] * len(leaves)
    runs = {}
    for (node, array, start, step, offset), slot in leaves.items():
        if array >= 0 and step == 1 and array not in runs:
            runs[array] = kernels.index_runs(E.arrays[array])
        program.leaves[slot] = (node, None if array < 0 else E.arrays[array], start, step,
                                offset, runs.get(array) if step == 1 else None)
    program.needed = frozenset(
        [leaf[0] for leaf in program.leaves if type(leaf[0]) is not tuple]
        + [s[1] for s in program.aux_steps if s[0] == "leaf" and type(s[1]) is not tuple])
    # (what the leaves read: the maps and their runs, not the compiler's other
    # derived arrays)
    program.arrays = [E.arrays[a] for a in sorted({spec[1] for spec in leaves} - {-1})] + [
        r for r in runs.values() if r is not None]
    program.indptr, program.indices = indptr, indices
    program.shape = (m, n)
    # (the tape's copies of the entries read: made read-only, later calls'
    # tapes take them where the arrays are equal)
    program.index_copies = list(tape.indexes)
    arrays = (program.indptr, program.indices, program.instructions, program.segments,
              program.owners, program.adds, *program.arrays, *program.index_copies)
    for array in arrays:
        array.flags.writeable = False
    program.nbytes = sum(a.nbytes for a in arrays)
    return program


#: the most terms a segment's rows may have (its slots: a place's owner is a uint16)
_MAX_SLOTS = 65536


def _owners(codes, pieces, most_slots, nnz):
    """``(owners, later)`` from the codes of ``merge_plan``: the slot whose value
    each place takes first, and for each piece whose values are added to
    places taken before (``(segment, slot, rows, places)``, in the pieces'
    order) the rows and places where they are (see :func:`_adds`)."""
    owners = np.zeros(nnz, dtype=np.uint8 if most_slots <= 256 else np.uint16)
    stored, later, slot, previous = 0, [], 0, None
    for code, (_, _, segment) in zip(codes, pieces):
        # (a piece's slot: its number among its segment's pieces, consecutive)
        slot = slot + 1 if segment == previous else 0
        previous = segment
        code = np.asarray(code)
        places = code >> 1
        added = (code & 1).astype(bool) & (code >= 0)
        first = ~added & (code >= 0)
        owners[places[first]] = slot
        stored += np.count_nonzero(first)
        if added.any():
            rows = np.flatnonzero(added)
            later.append((segment, slot, rows, places[rows]))
    if stored != nnz:
        raise Untraceable("a merge plan that leaves places empty")
    return owners, later


def _adds(later):
    """The adds of ``run_program``, ``(segment, row, slot, place)`` sorted, from
    the ``later`` of :func:`_owners`."""
    if not later:
        return np.zeros((0, 4), dtype=np.int64)
    adds = np.concatenate([np.stack([np.full(len(rows), segment), rows,
                                     np.full(len(rows), slot), places], axis=1)
                           for segment, slot, rows, places in later])
    adds = adds[np.lexsort((adds[:, 2], adds[:, 1], adds[:, 0]))]
    return np.ascontiguousarray(adds, dtype=np.int64).reshape(-1, 4)
