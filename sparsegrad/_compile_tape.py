"""The compiler of recorded evaluation: a tape's Jacobian as a program.

:func:`compile_tape` turns the tape of a call on light values
(:class:`sparsegrad._trace.Tape`: the operations' structure, the lengths of
their results, the index arrays they gathered by) into a :class:`Program` of
``sparsegrad._fast.run_program``: symbolic forward differentiation by the
rule table :data:`RULES`, every entry of the Jacobian an expression of the
operations' values at rows that depend only on the structure, the output's
rows cut into segments of the same terms, each segment's expressions
emitted as instructions on buffers of a block of rows, and the pattern with
the place each term's entry takes.  How the expressions are kept small
(scalars folded, signs moved out, cheap values recomputed) is in
``docs/architecture.md``.

>>> import numpy as np
>>> from sparsegrad._trace import Tape, Traced
>>> tape = Tape(np.array([1.0, 2.0, 3.0]))
>>> y = np.exp(Traced(tape.values[0], 0, tape)[1:]) * 2.0
>>> program = compile_tape(tape, y.node)
>>> program.shape, len(program.indices)
((2, 3), 2)
>>> np.round(program.run(tape), 3)
array([14.778, 40.171])
"""
import collections

import numpy as np

from . import _fast
from ._jacobian import _index_dtype

__all__ = ["Untraceable", "RULES", "Program", "compile_tape"]


class Untraceable(Exception):
    """What the recorder does not take: the call goes the eager way."""



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
            stack.extend(_children(form))
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


def _binary(partials):
    return lambda E, z, a, b: partials(E, z, _operand(E, a), _operand(E, b))


#: ufunc name -> partials: ``rule(E, z, *operands)`` returns one expression per
#: operand, the derivative of the result ``z`` (a leaf) with respect to it
RULES = {
    "add": _binary(lambda E, z, a, b: (E.lit(1), E.lit(1))),
    "subtract": _binary(lambda E, z, a, b: (E.lit(1), E.lit(-1))),
    "multiply": _binary(lambda E, z, a, b: (b, a)),
    "divide": _binary(lambda E, z, a, b: (E.div(E.lit(1), b), E.neg(E.div(z, b)))),
    "negative": lambda E, z, a: (E.lit(-1),),
    "positive": lambda E, z, a: (E.lit(1),),
    "exp": lambda E, z, a: (z,),
    "expm1": lambda E, z, a: (E.add(z, E.lit(1)),),
    "log": lambda E, z, a: (E.div(E.lit(1), _operand(E, a)),),
    "log1p": lambda E, z, a: (E.div(E.lit(1), E.add(_operand(E, a), E.lit(1))),),
    "sqrt": lambda E, z, a: (E.div(E.lit(0.5), z),),
    "sin": lambda E, z, a: (E.op("cos", _operand(E, a)),),
    "cos": lambda E, z, a: (E.neg(E.op("sin", _operand(E, a))),),
    "tanh": lambda E, z, a: (E.add(E.lit(1), E.mul(z, z), -1.0),),
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


# ---------------------------------------------------------------- compiling

class Program:
    """What :func:`compile_tape` makes of a tape: the instructions and segments
    of ``run_program``, its leaves (``(node, index, start, step, offset,
    runs)``), the steps of its scalars (from the call's, ``(op, a, b)`` or
    ``("lit", c, 0)``), the owners and adds of the places, the pattern and the
    copies of the index arrays it was made with."""

    __slots__ = ("instructions", "segments", "leaves", "arrays", "scalar_steps", "owners", "adds",
                 "indptr", "indices", "shape", "index_copies", "nbytes", "needed")

    def run(self, tape):
        """The data of the Jacobian at the values of ``tape``."""
        # (a mask is read as 0.0 and 1.0)
        leaves = [(_as_float(tape.values[leaf[0]]),) + leaf[1:] for leaf in self.leaves]
        values = list(tape.params)
        for op, a, b in self.scalar_steps:
            values.append(a if op == "lit" else _SCALAR_OPS[op](values[a], values[b]))
        params = np.array(values, dtype=np.float64)
        return _fast.run_program(self.instructions, self.segments, leaves, params,
                                 self.owners, self.adds, self.indptr)

    def same_indexes(self, tape):
        """Whether ``tape`` gathered by arrays equal to the ones compiled in."""
        checked = set()
        for array, copy in zip(tape.indexes, self.index_copies):
            key = (id(array), id(copy))
            if key not in checked:
                if not _fast.kernels.same_index(array, copy):
                    return False
                checked.add(key)
        return True


def _as_float(values):
    return values if values.dtype == np.float64 else values.astype(np.float64)


def _terms_of_ufunc(E, terms, node, entry):
    kind = entry[0]
    operands = entry[1]
    if kind == "where":
        # (the rows of the selected branch: a term of a is kept where the mask
        # is 1, of b where it is 0, and is 0.0 elsewhere -- not multiplied by
        # the mask, so that an inf or nan of the other branch never reaches
        # the result, as with the eager way's selection)
        mask = _operand(E, entry[1])
        out = []
        for structure, chosen in zip(entry[2:], (mask, E.add(E.lit(1), mask, sign=-1.0))):
            if structure[0] != "n":
                continue
            for a0, b0, cols, e in terms[structure[1]]:
                out.append((a0, b0, cols, E.make(
                    ("keep", e, E.compose(chosen, (-1, a0, 1, 0), b0 - a0)))))
        return out
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


#: the values recomputed in a program rather than read, by ufunc: their
#: expressions of the operands' (the rest -- exp, log, ... -- cost more than
#: a read; power: by its exponent, below)
_CHEAP = {
    "add": lambda E, a, b: E.add(a, b),
    "subtract": lambda E, a, b: E.add(a, b, sign=-1.0),
    "multiply": lambda E, a, b: E.mul(a, b),
    "divide": lambda E, a, b: E.div(a, b),
    "negative": lambda E, a: E.neg(a),
    "positive": lambda E, a: a,
    "square": lambda E, a: E.mul(a, a),
    "reciprocal": lambda E, a: E.div(E.lit(1), a),
}
_CHEAP["true_divide"] = _CHEAP["divide"]
_CHEAP_POWERS = {2.0: _CHEAP["square"], -1.0: _CHEAP["reciprocal"]}
#: the most operations a recomputed value may take
_INLINE_BUDGET = 6


def _gathered(E, tape, entry):
    """``(key, rows, map)`` of a gather or a roll: what names its map in the
    keys of derived arrays, its length and the map's array number (a
    gather's negative numbers counted from the end of its source)."""
    if entry[0] == "roll":
        _, source, shift, n = entry
        key = ("roll", shift, n)
        return key, n, E.array(key, lambda: (np.arange(n) - shift) % n if n else
                               np.zeros(0, dtype=np.int64))
    _, source, k, m = entry
    user, n_source = tape.indexes[k], tape.lengths[source]
    return id(user), m, E.array(("gather", id(user), n_source),
                                lambda: np.where(user < 0, user + n_source, user))


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
    elif kind in _CHEAP:
        e = _CHEAP[kind](E, *(_operand(E, structure) for structure in entry[1]))
        if E.size(e) <= _INLINE_BUDGET:
            E.values[node] = e
    elif kind == "power" and entry[2] in _CHEAP_POWERS:
        e = _CHEAP_POWERS[entry[2]](E, _operand(E, entry[1]))
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
        elif kind in ("const", "mask"):
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
            key, m, read = _gathered(E, tape, entry)
            read = E.arrays[read]
            out = []
            for a0, b0, c, e in terms[source]:
                covered = (read >= a0) & (read < b0)
                if not covered.any():
                    continue
                local = E.array(("gather", key, a0, b0), lambda: np.where(covered, read - a0, 0))
                new = cols((c, "gather", key, a0, b0),
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
            elif kind == "power":
                instructions.append((ops["power"], d, read_buffers[0],
                                     param_slots(E.lit(form[2]))))
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


def _compile(tape, output):
    E = _Expressions()
    cols = _Arrays()
    terms = _propagate(E, tape, cols)[output]
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
            steps.append(("lit", form[1], 0))
        else:
            steps.append((form[0], param_slot(form[1]), param_slot(form[2])))
        index_of[e] = len(tape.params) + len(steps) - 1
        return index_of[e]

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
    program.scalar_steps = steps
    program.leaves = [None] * len(leaves)
    runs = {}
    for (node, array, start, step, offset), slot in leaves.items():
        if array >= 0 and step == 1 and array not in runs:
            runs[array] = kernels.index_runs(E.arrays[array])
        program.leaves[slot] = (node, None if array < 0 else E.arrays[array], start, step,
                                offset, runs.get(array) if step == 1 else None)
    program.needed = frozenset(leaf[0] for leaf in program.leaves)
    # (what the leaves read: the maps and their runs, not the compiler's other
    # derived arrays)
    program.arrays = [E.arrays[a] for a in sorted({spec[1] for spec in leaves} - {-1})] + [
        r for r in runs.values() if r is not None]
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
