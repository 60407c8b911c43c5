"""Random numpy programs drawn from an integer seed, as readable source.

A program is the source of a function ``f(x)`` of one 1-d array, with its
module-level constants (index arrays, masks, dense and scipy.sparse matrices)
and the points it is called at.  Statements are drawn one at a time and run
at once on plain numpy arrays at every point: a statement numpy refuses, or
one that warns, leaves the domain (``log`` of a negative number) or comes
near a kink (``abs`` near zero, ties of ``maximum``) at the first point, is
drawn again.  What is kept is therefore valid numpy whose Jacobian the
finite differences can check, and its source is what a failure prints.

Families (drawn from the seed):

``general``
    any of the operations below on 0-3-d values of one dtype (float32,
    float64, longdouble or complex128), one point.
``recorded``
    the float64 operations that ``value_and_jacobian(trace=True)`` records,
    valid at every point of a sequence of points of different shapes and
    values, so that masks, branches and lengths change between calls.
    About half are of 1-d values; the others of n-d values too: the
    argument 1-d (its length a multiple of the axes it is reshaped to), 2-d
    or 3-d, one axis whose length changes; reshape and ravel, reads by
    ints, slices, None and Ellipsis, np.pad by zeros, operands broadcast
    between shapes, np.where of n-d masks, n-d results.  Both kinds write:
    values made by ``np.zeros(like=x)``, copies and results, written by
    basic keys (1-d ones by lists too).
``unsupported``
    a short prefix and one operation sparsegrad must refuse with a
    ``TypeError`` (``UnsupportedOperationError``).

Constructs of open bug classes are switched off by :data:`KNOWN_OPEN`; a
seed gives the same program for the same set of switched-off constructs.
"""
import re
import warnings

import numpy as np
import scipy.sparse as sp
import scipy.special as special

#: switchable constructs, by name: what the programs that have one do
FEATURES = {
    "temporary_view_write": "a write through a temporary view of a target "
                            "(R.reshape(2, 3)[1:] = ..., R.ravel()[:] = ..., R[1:][:2] = ..., "
                            "R.T[0] = ..., np.add(R[:2], R[2:4], out=R[:2]))",
    "view_variable_write": "a write into a variable that shares memory with another one "
                           "(v = R[1:]; v[0] = ..., or R[...] = ... while v = R[1:] lives)",
    "stale_view_read": "a read of a variable after a write through another variable "
                       "changed its memory (numpy's views see the write)",
    "negative_index_reuse": "one index array with negative entries applied to axes of "
                            "different lengths (in one call, or in calls of different "
                            "lengths)",
    "duplicate_index_write": "R[I] = ... or R[I] += ... with repeated indices (numpy: "
                             "the last write wins, += adds once)",
    "complex_intermediate": "a real seed through complex values, back by abs, real, "
                            "imag or sign",
    "einsum_view_write": "a write into a view np.einsum made (np.einsum('ii->i', A), "
                         "np.einsum('ij->ji', A)), or into its base while the view lives",
    "diag_view_write": "a write into the base of the view np.diag(A) made of a 2-d A "
                       "while the view lives",
    "complex_0d_arithmetic": "complex 0-d values in arithmetic: numpy computes numpy "
                             "scalars by its scalar math and 0-d arrays by its loops, "
                             "which round complex products otherwise",
    "complex_inplace_element": "R[k] *= c (+=, -=) writing one complex element, which "
                               "numpy rounds otherwise than R[k] * c",
    "empty_cumulative": "np.cumsum or np.cumprod of an empty array",
    "complex_real_axis": "a complex seed whose imaginary parts are zero, through abs or "
                         "sign (the derivative of their analytic continuation)",
    "scalar_view_write": "a write into an array made from a numpy scalar by reshape, "
                         "ravel or None (s = x[0]; a = s.reshape(1); a[0] = ...): numpy's "
                         "array is new, s and its other arrays keep their values",
    "power_fast_path": "a ** 2, a ** 0.5, a ** -1 where numpy's operator (square, sqrt, "
                       "reciprocal) rounds otherwise than np.power (complex, longdouble)",
    "where_broadcast_branch": "recorded programs: np.where with a branch broadcast to "
                              "the result's shape (length 1, or n-d: (n, 1) into (n, k))",
    "power_zero": "recorded programs: u ** 0",
    "where_same_branches": "recorded programs: np.where(m, v, v), one value in both "
                           "branches",
    "value_branch": "recorded programs: a Python branch on a value (the eager way)",
}

#: constructs of bug classes not fixed yet: the generator leaves them out.
#: Remove a name when its fix lands; ``python -m tests.fuzz --all`` draws them all.
KNOWN_OPEN = frozenset()

#: the names a program's source uses
NAMESPACE = {"np": np, "sp": sp, "special": special}

FAMILIES = ("general", "recorded", "unsupported")
_FAMILY_WEIGHTS = (0.6, 0.3, 0.1)
DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.longdouble),
          np.dtype(np.complex128))
_DTYPE_WEIGHTS = (0.45, 0.2, 0.1, 0.25)
_DTYPE_NAMES = {np.dtype(np.float64): "np.float64", np.dtype(np.float32): "np.float32",
                np.dtype(np.longdouble): "np.longdouble",
                np.dtype(np.complex128): "np.complex128"}

MAX_SIZE = 96          # elements of any value (the finite differences cost x.size calls)
MAX_VALUE = 1e4
KINK = 1e-3            # distance kept from kinks at the first point, relative


def _literal(array):
    """Source of ``array``'s values: a (nested) list."""
    return repr(np.asarray(array).tolist())


def _dtype_source(dtype):
    dtype = np.dtype(dtype)
    return _DTYPE_NAMES.get(dtype, "np.%s" % dtype.name if dtype != bool else "bool")


def _array_source(array, dtype=None):
    """Source making ``array`` (of ``dtype``, when given)."""
    array = np.asarray(array)
    if array.size == 0:
        # (a list literal loses the shape of an empty array)
        return "np.zeros(%r, dtype=%s)" % (array.shape, _dtype_source(dtype or array.dtype))
    if dtype is None:
        return "np.array(%s)" % _literal(array)
    return "np.array(%s, dtype=%s)" % (_literal(array), _dtype_source(dtype))


class Program:
    """A drawn program: constants, body, result and points.

    Parameters
    ----------
    seed : int
    family : str
        One of :data:`FAMILIES`.
    dtype : numpy.dtype
        The dtype of the points.
    constants : dict
        Name to source, in order of creation.
    body : list of (str, frozenset)
        The statements of ``f`` and the tags (features) of each.
    result : str
        The name ``f`` returns.
    points : list of ndarray
        Where ``f`` is called, in order (``general``: one point).
    """

    def __init__(self, seed, family, dtype, constants, body, result, points):
        self.seed = seed
        self.family = family
        self.dtype = np.dtype(dtype)
        self.constants = dict(constants)
        self.body = list(body)
        self.result = result
        self.points = list(points)
        self._function = None

    @property
    def tags(self):
        """Every feature and tag of the statements."""
        return frozenset().union(*(tags for _, tags in self.body))

    def replace(self, body=None, result=None, points=None):
        """A copy with another body, result or points (for shrinking)."""
        return Program(self.seed, self.family, self.dtype, self.constants,
                       self.body if body is None else body,
                       self.result if result is None else result,
                       self.points if points is None else points)

    def _used_constants(self):
        text = "\n".join(line for line, _ in self.body) + "\n" + self.result
        return [name for name in self.constants if re.search(r"\b%s\b" % name, text)]

    def function_source(self):
        """The constants and ``def f(x)``."""
        lines = ["%s = %s" % (name, self.constants[name]) for name in self._used_constants()]
        lines.append("def f(x):")
        lines += ["    " + line for line, _ in self.body]
        lines.append("    return %s" % self.result)
        return "\n".join(lines) + "\n"

    def source(self):
        """A runnable listing: imports, constants, ``f`` and the points."""
        head = ["import numpy as np", "import scipy.sparse as sp",
                "import scipy.special as special", ""]
        # (points of every dtype are made from double precision numbers: their
        # literals are those numbers)
        wide = np.complex128 if self.dtype.kind == "c" else np.float64
        points = ["x%d = %s" % (k, _array_source(p.astype(wide), self.dtype))
                  for k, p in enumerate(self.points)]
        return "\n".join(head) + "\n" + self.function_source() + "\n" + "\n".join(points) + "\n"

    def finite_at(self, x):
        """Whether every value ``f`` computes at ``x`` is finite."""
        namespace = dict(NAMESPACE)
        source = self.function_source().replace("    return %s\n" % self.result,
                                                "    return locals()\n")
        exec(source, namespace)
        with quiet():
            values = namespace["f"](x.copy())
        return all(np.all(np.isfinite(v)) for v in values.values()
                   if isinstance(v, (np.ndarray, np.generic)) and v.dtype.kind in "fc")

    def function(self):
        """``f``, made once per program: the same object, with the same constants,
        at every call (caches keyed by them meet them again)."""
        if self._function is None:
            namespace = dict(NAMESPACE)
            exec(compile(self.function_source(), "<program %d>" % self.seed, "exec"),
                 namespace)
            self._function = namespace["f"]
        return self._function

    def __repr__(self):
        return "Program(seed=%d, %s, %s, %d statements)" % (
            self.seed, self.family, self.dtype, len(self.body))


class _Floating:
    """numpy's floating-point errors and warnings raised (``"raise"``) or ignored."""

    def __init__(self, action):
        self.action = action

    def __enter__(self):
        self._err = np.seterr(all=self.action)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("error" if self.action == "raise" else "ignore")

    def __exit__(self, *exc):
        self._warnings.__exit__(*exc)
        np.seterr(**self._err)


def strict():
    """The first point must stay clean: numpy's warnings are errors."""
    return _Floating("raise")


def quiet():
    """Values are compared, not warnings (later points may leave the domain:
    nan on both engines)."""
    return _Floating("ignore")


def _clear_of_kinks(distance, ties=True):
    """Every distance to a kink is farther than :data:`KINK`, relative to the
    values' scale, or (``ties``) exactly zero: a tie of equal expressions, as
    ``maximum(v, v)``, which moves with ``x`` and stays one.  A tie with a
    constant is no such thing (and the complex step would break it by the
    imaginary part), hence ``ties=False`` for thresholds."""
    distance = np.abs(np.asarray(distance, dtype=np.float64))
    if distance.size == 0:
        return True
    scale = max(1.0, float(np.max(distance)))
    return bool(np.all((distance == 0) & ties | (distance > KINK * scale)))


def _positive(value, margin=0.05):
    """Away from the branch cut and the zero of log, sqrt and non-integer powers."""
    value = np.asarray(value)
    real = value.real if value.dtype.kind == "c" else value
    return value.size == 0 or float(np.min(real)) > margin


def _away_from_zero(value, margin=0.05):
    value = np.asarray(value)
    return value.size == 0 or float(np.min(np.abs(value))) > margin


def _slice_text(start, stop, step):
    text = "%s:%s" % ("" if start is None else start, "" if stop is None else stop)
    if step is not None:
        text += ":%d" % step
    return text


def _broadcasts_into(small, shape):
    """``small`` broadcasts against ``shape`` without changing it."""
    return len(small) <= len(shape) and all(
        m in (1, n) for m, n in zip(reversed(small), reversed(shape)))


class _Builder:
    """Draws statements, keeping those numpy runs cleanly at every point."""

    def __init__(self, rng, dtype, points, exclude):
        self.rng = rng
        self.dtype = np.dtype(dtype)
        self.points = points
        self.exclude = exclude
        self.constants = {}
        self.objects = {}
        self.body = []
        self.kinds = {"x": "value"}
        self.changed = set()       # variables a write through another one changed
        self.scalar_views = set()  # arrays numpy made anew from a scalar, by a view's rule
        self.made_by = {}          # variables np.einsum or np.diag made: numpy's may be views
        self.index_lengths = {}    # index array -> the axis lengths it was applied to
        self._pending = []
        self._count = 0
        self.envs = []
        self._replay()

    # ---- bookkeeping --------------------------------------------------------

    def enabled(self, feature):
        return feature not in self.exclude

    def step(self, name):
        """Run the step ``name``; whether a statement was kept."""
        try:
            return bool(getattr(self, name)())
        except Exception:
            # (drawing it evaluated something numpy refuses: nothing was run)
            self._pending = []
            return False

    def _replay(self):
        self.envs = []
        for point in self.points:
            env = dict(NAMESPACE)
            env.update(self.objects)
            env["x"] = point.copy()
            self.envs.append(env)
        for k, env in enumerate(self.envs):
            with strict() if k == 0 else quiet():
                for line, _ in self.body:
                    exec(line, env)

    def name(self, prefix="v"):
        self._count += 1
        return "%s%d" % (prefix, self._count)

    def constant(self, prefix, source):
        """A module-level constant made by ``source`` (made from the source, so
        that the listing is what was run)."""
        name = "%s%d" % (prefix, len(self.constants) + 1)
        obj = eval(source, dict(NAMESPACE))
        self.constants[name] = source
        self.objects[name] = obj
        for env in self.envs:
            env[name] = obj
        return name

    def probe(self, name, k=0):
        return self.envs[k][name]

    def evaluate(self, expression, k=0):
        with quiet():
            return eval(expression, self.envs[k])

    def shape(self, name):
        return np.shape(self.probe(name))

    def readable(self, kinds=("value",), predicate=None):
        names = [n for n, kind in self.kinds.items() if kind in kinds
                 and (n not in self.changed or self.enabled("stale_view_read"))]
        if predicate is not None:
            names = [n for n in names if predicate(n)]
        return names

    def pick(self, kinds=("value",), predicate=None):
        """A variable, the recent ones more likely."""
        names = self.readable(kinds, predicate)
        if not names:
            return None
        weights = np.arange(1, len(names) + 1, dtype=float) ** 1.5
        return names[self.rng.choice(len(names), p=weights / weights.sum())]

    def choice(self, options):
        return options[self.rng.integers(len(options))]

    def use_index(self, name, length):
        """Record that index array ``name`` is applied to an axis of ``length``
        (when the statement is kept); its tags."""
        self._pending.append((name, length))
        lengths = self.index_lengths.get(name, set()) | {
            n for m, n in self._pending if m == name}
        if np.any(self.objects[name] < 0) and len(lengths) > 1:
            return {"negative_index_reuse"}
        return set()

    def index_for(self, lengths, duplicates=True):
        """An index array valid for every axis length of ``lengths`` (one per
        point): one already made when it fits (the same object on other
        lengths), or a new one."""
        low = min(lengths)
        if low == 0:
            return None
        fits = []
        for name, lengths_used in self.index_lengths.items():
            array = self.objects[name]
            if array.size and (array.min() < -low or array.max() >= low):
                continue
            reuse_other_length = bool(lengths_used - set(lengths)) or len(set(lengths)) > 1
            if (np.any(array < 0) and reuse_other_length
                    and not self.enabled("negative_index_reuse")):
                continue
            if not duplicates and len(np.unique(array % low)) != array.size:
                continue
            fits.append(name)
        if fits and self.rng.random() < 0.6:
            return self.choice(fits)
        size = int(self.rng.integers(1, min(5, 2 * low) + 1))
        if duplicates:
            entries = self.rng.integers(0, low, size)
        else:
            entries = self.rng.permutation(low)[:size]
        negative = self.rng.random(size) < 0.5
        if len(set(lengths)) > 1 and not self.enabled("negative_index_reuse"):
            negative[:] = False
        entries = np.where(negative, entries - low, entries).astype(np.int64)
        name = self.constant("I", "np.array(%s)" % _literal(entries))
        self.index_lengths[name] = set()
        return name

    def _accepts(self, name, kind):
        value = self.probe(name)
        if kind == "mask":
            return np.asarray(value).dtype == bool
        value = np.asarray(value)
        if value.dtype.kind not in "fc" or value.size > MAX_SIZE:
            return False
        if not (bool(np.all(np.isfinite(value))) and (
                value.size == 0 or float(np.max(np.abs(value))) <= MAX_VALUE)):
            return False
        # (the other points may meet singularities, where the engines must agree
        # on inf and nan, but no finite value beyond MAX_VALUE: no oracle
        # resolves the derivative of sin of one, which its rounding moves)
        for k in range(1, len(self.envs)):
            other = np.abs(np.asarray(self.probe(name, k)))
            if float(np.max(other[np.isfinite(other)], initial=0.0)) > MAX_VALUE:
                return False
        return True

    def run(self, line, tags=(), name=None, kind="value", writes=None):
        """Run ``line`` at every point; keep it if numpy takes it cleanly.

        ``name``: the variable it defines; ``writes``: the variable it writes
        into (its values are checked, and its aliases marked changed).
        """
        tags = set(tags)
        used = [n for n in self.kinds if re.search(r"\b%s\b" % n, line)]
        if any(n in self.changed for n in used):
            tags.add("stale_view_read")
        if any(np.ndim(self.probe(n)) == 0 and np.asarray(self.probe(n)).dtype.kind == "c"
               for n in used):
            tags.add("complex_0d_arithmetic")
        if writes is not None:
            group = {writes} | set(self.aliases(writes))
            for other in group:
                if other in self.made_by:
                    tags.add(self.made_by[other] + "_view_write")
            if group & self.scalar_views or (
                    isinstance(self.probe(writes), np.generic) and self.scalar_views):
                # (an in-place operation on a numpy scalar makes a new one;
                # on sparsegrad's 0-d value it is a write)
                tags.add("scalar_view_write")
        ok = not tags & self.exclude
        if ok:
            for k, env in enumerate(self.envs):
                try:
                    with strict() if k == 0 else quiet():
                        exec(line, env)
                except Exception:
                    ok = False
                    break
        if ok and name is not None:
            ok = self._accepts(name, kind)
        if ok and writes is not None:
            ok = self._accepts(writes, "value")
        if not ok:
            self._pending = []
            if writes is not None:
                # (a write may have run at some points: start again from the body)
                self._replay()
            elif name is not None:
                for env in self.envs:
                    env.pop(name, None)
            return False
        for index, length in self._pending:
            self.index_lengths.setdefault(index, set()).add(length)
        self._pending = []
        if writes is not None:
            self.changed.update(self.aliases(writes))
        self.body.append((line, frozenset(tags)))
        if name is not None:
            self.kinds[name] = kind
            self._note_views(name, line, used)
        return True

    def _note_views(self, name, line, used):
        """Remember what sparsegrad may make a view that numpy does not: arrays
        made from numpy scalars by a view's rule (numpy's scalars are values,
        sparsegrad's 0-d values are arrays), and np.einsum's results."""
        value = self.probe(name)
        if not isinstance(value, np.ndarray):
            return
        for function in ("einsum", "diag"):
            if "np.%s(" % function in line:
                self.made_by[name] = function
        if any(n in self.scalar_views and np.shares_memory(self.probe(n), value)
               for n in used):
            self.scalar_views.add(name)
            return
        scalars = [n for n in used if isinstance(self.probe(n), np.generic)]
        if not scalars:
            return
        scratch = dict(self.envs[0])
        arrays = {n: np.array(self.probe(n)) for n in scalars}
        scratch.update(arrays)
        try:
            with quiet():
                exec(line, scratch)
        except Exception:
            return
        made = scratch.get(name)
        if isinstance(made, np.ndarray) and any(np.shares_memory(made, a)
                                                for a in arrays.values()):
            self.scalar_views.add(name)

    def aliases(self, name):
        """The other variables sharing memory with ``name`` at the first point."""
        value = self.probe(name)
        if not isinstance(value, np.ndarray):
            return []
        return [other for other in self.kinds if other != name
                and isinstance(self.probe(other), np.ndarray)
                and np.shares_memory(self.probe(other), value)]

    # ---- pieces of statements ------------------------------------------------

    def scalar(self):
        """A scalar literal: mostly Python floats (weak), sometimes numpy scalars
        (strong: they take part in the result's dtype)."""
        value = float(self.rng.integers(1, 9)) / 4 * self.choice([-1.0, 1.0])
        roll = self.rng.random()
        if roll < 0.08:
            return "np.float64(%r)" % value
        if roll < 0.14:
            return "np.float32(%r)" % value
        if roll < 0.2 and self.dtype.kind == "c":
            return "(%r%+rj)" % (value, float(self.rng.integers(-4, 5)) / 4)
        return repr(value)

    def const(self, shape, dtype=None):
        """A dense constant array of ``shape``, values k/4."""
        values = self.rng.integers(1, 9, size=shape) / 4 * self.rng.choice([-1.0, 1.0],
                                                                            size=shape)
        if dtype is None:
            dtype = self.dtype if self.rng.random() < 0.7 else np.dtype(np.float64)
        if np.dtype(dtype).kind == "c" and self.rng.random() < 0.5:
            values = values + 1j * self.rng.integers(-4, 5, size=shape) / 4
        return self.constant("C", _array_source(values, dtype))

    def shape_into(self, shape):
        """A shape that broadcasts against ``shape`` without changing it: some
        axes 1, some leading axes dropped."""
        dims = [n if self.rng.random() < 0.6 else 1 for n in shape]
        return tuple(dims[int(self.rng.integers(len(dims) + 1)):])

    def operand(self, shape, allow_scalar=True):
        """A second operand for a value of ``shape``: a scalar, a constant or a
        variable that broadcasts against it."""
        roll = self.rng.random()
        if allow_scalar and roll < 0.3:
            return self.scalar()
        if roll < 0.6:
            return self.const(self.shape_into(shape))
        other = self.pick(predicate=lambda n: _broadcasts_into(self.shape(n), shape)
                          or _broadcasts_into(shape, self.shape(n))
                          and int(np.prod(np.broadcast_shapes(shape, self.shape(n))))
                          <= MAX_SIZE)
        return other if other is not None else self.scalar()

    def basic_key(self, shape):
        """A basic index of ``shape``: slices (negative steps too), ints,
        ``None`` and ``Ellipsis``."""
        items = []
        for n in shape[:int(self.rng.integers(1, len(shape) + 1))]:
            roll = self.rng.random()
            if roll < 0.25 and n:
                items.append(str(int(self.rng.integers(-n, n))))
            elif roll < 0.35:
                items.append(":")
            else:
                step = self.choice([None, None, 1, 2, -1, -2, 3])
                start = self.choice([None, int(self.rng.integers(-n - 1, n + 1))])
                stop = self.choice([None, int(self.rng.integers(-n - 1, n + 1))])
                items.append(_slice_text(start, stop, step))
        roll = self.rng.random()
        if roll < 0.1:
            items.insert(int(self.rng.integers(len(items) + 1)), "None")
        elif roll < 0.2 and len(items) < len(shape):
            items.insert(0, "...") if self.rng.random() < 0.5 else items.append("...")
        return ", ".join(items)

    def fancy_key(self, shape, duplicates=True):
        """An integer-array index along one axis (negative entries, reused
        arrays), with slices around it: ``(key, tags)``, or None."""
        axis = int(self.rng.integers(len(shape)))
        index = self.index_for([shape[axis]], duplicates)
        if index is None:
            return None
        tags = self.use_index(index, shape[axis])
        entries = self.objects[index] % shape[axis]
        if len(np.unique(entries)) != entries.size:
            tags.add("repeated_index")
        if axis == len(shape) - 1 and axis and self.rng.random() < 0.5:
            items = ["...", index]
        else:
            items = [":"] * axis + [index]
        if axis + 1 < len(shape) and self.rng.random() < 0.3:
            n = shape[axis + 1]
            items.append(_slice_text(int(self.rng.integers(0, n)), None, None))
        return ", ".join(items), tags

    def mask(self, shape):
        """A constant boolean array."""
        return self.constant("M", _array_source(self.rng.random(shape) < 0.5))

    def mask_key(self, shape):
        """A constant boolean mask over the leading axes."""
        return self.mask(shape[:int(self.rng.integers(1, len(shape) + 1))])

    def region(self, base):
        """Some elements of variable ``base`` to write: a key and its tags."""
        shape = self.shape(base)
        roll = self.rng.random()
        if roll < 0.55:
            return self.basic_key(shape), set()
        if roll < 0.8:
            duplicates = self.enabled("duplicate_index_write") and self.rng.random() < 0.5
            fancy = self.fancy_key(shape, duplicates)
            if fancy is None:
                return "...", set()
            key, tags = fancy
            if "repeated_index" in tags:
                tags = tags - {"repeated_index"} | {"duplicate_index_write"}
            return key, tags
        if roll < 0.95:
            return self.mask_key(shape), set()
        return "...", set()

    def source_for(self, shape):
        """An expression of ``shape`` (or broadcasting to it) to write."""
        size = int(np.prod(shape))
        roll = self.rng.random()
        if roll < 0.25 or size == 0:
            return self.scalar()
        if roll < 0.4:
            return self.const(self.shape_into(shape))
        exact = self.readable(predicate=lambda n: _broadcasts_into(self.shape(n), shape)
                              and np.ndim(self.probe(n)) > 0)
        if exact and roll < 0.8:
            name = self.choice(exact)
            return self.choice(["%s", "np.sin(%s)", "2.0 * %s", "%s * %s"]).replace(
                "%s", name)
        larger = self.readable(predicate=lambda n: np.size(self.probe(n)) >= size
                               and np.ndim(self.probe(n)) > 0)
        if larger:
            name = self.choice(larger)
            return "%s.ravel()[:%d].reshape(%s)" % (name, size, tuple(shape))
        return self.scalar()


# ---------------------------------------------------------------- general


def _factor(rng, size, ndim):
    """A shape of ``ndim`` axes and ``size`` elements: the prime factors of
    ``size`` dealt to random axes."""
    shape = [1] * ndim
    if size == 0:
        shape[0] = 0
    rest, prime = size, 2
    while rest > 1:
        while rest % prime:
            prime += 1
        shape[rng.integers(ndim)] *= prime
        rest //= prime
    return tuple(shape)


class _General(_Builder):
    """Statements of the ``general`` family."""

    def start(self, shape):
        """``x`` as an array of ``shape``."""
        if shape == (self.points[0].size,) and self.rng.random() < 0.4:
            return "x"
        name = self.name()
        text = "x.reshape(%s)" % (shape,) if self.rng.random() < 0.7 else \
            "np.reshape(x, %s)" % (shape,)
        self.run("%s = %s" % (name, text), name=name)
        return name

    def unary(self):
        a = self.pick()
        value = np.asarray(self.probe(a))
        is_complex = value.dtype.kind == "c"
        options = ["sin", "cos", "tanh", "square", "negative", "exp", "log", "sqrt",
                   "reciprocal", "power", "expm1", "log1p", "arctan", "sinh"]
        tags = set()
        if not is_complex:
            options += ["abs", "maximum", "minimum", "clip", "floor", "sign"]
            if value.dtype in (np.float32, np.float64):
                options += ["special"] * 3
        elif self.dtype.kind != "c":
            # (not complex-differentiable: of complex values of a real seed only)
            options += ["abs", "sign"]
            tags.add("complex_intermediate")
        elif self.enabled("complex_real_axis") and np.all(value.imag == 0):
            # (a complex seed's values on the real axis: the continuation's derivative)
            options += ["abs", "sign"]
            tags.add("complex_real_axis")
        op = self.choice(options)
        positive = _positive(value)
        if op in ("sin", "cos", "tanh", "square", "negative", "arctan"):
            if op == "arctan" and is_complex:
                return False
            text = self.choice(["np.%s(%s)" % (op, a)] + (["-%s" % a] if op == "negative"
                                                          else []))
        elif op in ("exp", "expm1", "sinh"):
            inner = a if float(np.max(value.real, initial=0)) < 4 else "np.tanh(%s)" % a
            text = "np.%s(%s)" % (op, inner)
        elif op in ("log", "sqrt", "log1p"):
            if positive:
                text = "np.%s(%s)" % (op, a)
            elif not is_complex:
                text = "np.%s(1.5 + %s * %s)" % (op, a, a)
            else:
                return False
        elif op == "reciprocal":
            if _away_from_zero(value):
                text = self.choice(["np.reciprocal(%s)", "1.0 / %s", "%s ** -1"]) % a
            elif not is_complex:
                text = "1.0 / (1.0 + %s * %s)" % (a, a)
            else:
                return False
        elif op == "power":
            exponent = self.choice([0, 1, 2, 3, -1, -2, 0.5, 1.5, -0.5, 2.5, 2.0])
            if float(exponent).is_integer():
                if exponent < 0 and not _away_from_zero(value):
                    return False
            elif not positive:
                if is_complex:
                    return False
                a = "(1.5 + %s * %s)" % (a, a)
            text = self.choice(["%s ** %r", "np.power(%s, %r)"]) % (a, exponent)
            if "**" in text:
                base = np.asarray(self.evaluate(a))
                with quiet():
                    if not np.array_equal(base ** exponent, np.power(base, exponent),
                                          equal_nan=True):
                        tags.add("power_fast_path")
        elif op == "special":
            function = self.choice(["erf", "erfc", "expit", "log_expit", "ndtr", "gammaln"])
            if function == "gammaln" and not _positive(value, 0.1):
                text = "special.gammaln(1.5 + %s * %s)" % (a, a)
            else:
                text = "special.%s(%s)" % (function, a)
        elif op in ("abs", "sign"):
            if not _clear_of_kinks(np.abs(value)):
                return False
            tags.add("nonsmooth")
            text = "np.abs(%s)" % a if op == "abs" else "np.sign(%s) * %s" % (a, a)
            if is_complex and op == "sign":
                text = "np.sign(%s)" % a
        elif op in ("maximum", "minimum"):
            other = self.operand(value.shape)
            other_value = np.asarray(self.evaluate(other))
            if other_value.dtype.kind == "c" or not _clear_of_kinks(
                    value - other_value, ties=other in self.kinds):
                return False
            tags.add("nonsmooth")
            text = "np.%s(%s, %s)" % (op, a, other) if self.rng.random() < 0.5 else \
                "np.%s(%s, %s)" % (op, other, a)
        elif op == "clip":
            low, high = sorted(self.rng.integers(-6, 7, 2) / 4)
            if low == high or not _clear_of_kinks(value - low, False) or \
                    not _clear_of_kinks(value - high, False):
                return False
            tags.add("nonsmooth")
            text = "np.clip(%s, %r, %r)" % (a, float(low), float(high))
        else:   # floor: zero derivative, away from the integers
            if not _clear_of_kinks(value - np.round(value)):
                return False
            tags.add("nonsmooth")
            text = "np.floor(%s) + %s" % (a, a)
        name = self.name()
        return self.run("%s = %s" % (name, text), tags, name=name)

    def binary(self):
        a = self.pick()
        value = np.asarray(self.probe(a))
        other = self.operand(value.shape)
        op = self.choice(["+", "-", "*", "/", "np.add", "np.multiply", "np.subtract",
                          "np.divide"])
        first, second = (a, other) if self.rng.random() < 0.6 else (other, a)
        if op in ("/", "np.divide"):
            if not _away_from_zero(self.evaluate(second)):
                if np.asarray(self.evaluate(second)).dtype.kind == "c":
                    return False
                second = "(1.0 + %s * %s)" % (second, second)
        text = ("%s(%s, %s)" % (op, first, second) if op.startswith("np.")
                else "%s %s %s" % (first, op, second))
        name = self.name()
        return self.run("%s = %s" % (name, text), name=name)

    def basic_read(self):
        a = self.pick(predicate=lambda n: np.ndim(self.probe(n)) > 0)
        if a is None:
            return False
        name = self.name()
        return self.run("%s = %s[%s]" % (name, a, self.basic_key(self.shape(a))), name=name)

    def fancy_read(self):
        a = self.pick(predicate=lambda n: np.ndim(self.probe(n)) > 0)
        if a is None:
            return False
        shape = self.shape(a)
        roll = self.rng.random()
        tags = set()
        if roll < 0.5:
            fancy = self.fancy_key(shape)
            if fancy is None:
                return False
            key, tags = fancy
            text = "%s[%s]" % (a, key)
        elif roll < 0.6 and len(shape) >= 2:
            first = self.index_for([shape[0]])
            second = self.index_for([shape[1]])
            if first is None or second is None:
                return False
            if self.objects[first].size != self.objects[second].size:
                return False
            tags = self.use_index(first, shape[0]) | self.use_index(second, shape[1])
            text = "%s[%s, %s]" % (a, first, second)
        elif roll < 0.7:
            index = self.index_for([shape[-1]])
            if index is None:
                return False
            tags = self.use_index(index, shape[-1])
            text = "np.take(%s, %s, axis=%d)" % (a, index, len(shape) - 1)
        elif roll < 0.85:
            text = "%s[%s]" % (a, self.mask_key(shape))
        else:
            value = np.asarray(self.probe(a))
            if value.dtype.kind == "c":
                return False
            threshold = float(self.rng.integers(-4, 5)) / 4
            if not _clear_of_kinks(value - threshold, False):
                return False
            tags = {"nonsmooth", "value_mask_read"}
            text = "%s[%s > %r]" % (a, a, threshold)
        name = self.name()
        return self.run("%s = %s" % (name, text), tags, name=name)

    def reshape(self):
        a = self.pick()
        scalars = self.readable(predicate=lambda n: isinstance(self.probe(n), np.generic))
        if scalars and self.rng.random() < 0.3:
            # (numpy scalars, from integer reads and reductions, are values: an
            # array made from one by a view's rule is new)
            a = self.choice(scalars)
        shape = self.shape(a)
        ndim = len(shape)
        options = ["reshape", "ravel"]
        if ndim >= 2:
            options += ["T", "transpose", "swapaxes", "moveaxis"]
        if 1 in shape:
            options.append("squeeze")
        if ndim < 3:
            options += ["expand_dims", "broadcast_to"]
        if 0 < ndim < 3:
            # (0-d forward values are scalar-like, not subscriptable)
            options.append("none")
        if ndim:
            options.append("flip")
        op = self.choice(options)
        if op == "reshape":
            new = _factor(self.rng, int(np.prod(shape)), int(self.rng.integers(1, 4)))
            if len(new) > 1 and self.rng.random() < 0.3:
                new = (-1,) + new[1:]
            text = self.choice(["%s.reshape(%s)" % (a, new), "np.reshape(%s, %s)" % (a, new)])
        elif op == "ravel":
            text = self.choice(["%s.ravel()" % a, "np.ravel(%s)" % a, "%s.reshape(-1)" % a])
        elif op == "T":
            text = "%s.T" % a
        elif op == "transpose":
            text = "np.transpose(%s, %s)" % (a, tuple(int(p) for p in
                                                       self.rng.permutation(ndim)))
        elif op == "swapaxes":
            i, j = self.rng.integers(-ndim, ndim, 2)
            text = "np.swapaxes(%s, %d, %d)" % (a, i, j)
        elif op == "moveaxis":
            i, j = self.rng.integers(-ndim, ndim, 2)
            text = "np.moveaxis(%s, %d, %d)" % (a, i, j)
        elif op == "squeeze":
            text = self.choice(["np.squeeze(%s)" % a, "%s.squeeze(%d)" % (a, shape.index(1))])
        elif op == "expand_dims":
            text = "np.expand_dims(%s, %d)" % (a, int(self.rng.integers(-ndim - 1, ndim + 1)))
        elif op == "none":
            text = "%s[%s]" % (a, self.choice(["None", "..., None", "None, ..."]))
        elif op == "broadcast_to":
            text = "np.broadcast_to(%s, %s)" % (a, (int(self.rng.integers(2, 4)),) + shape)
        else:
            text = "np.flip(%s, %d)" % (a, int(self.rng.integers(-ndim, ndim)))
        name = self.name()
        return self.run("%s = %s" % (name, text), name=name)

    def movement(self):
        a = self.pick(predicate=lambda n: np.ndim(self.probe(n)) > 0)
        if a is None:
            return False
        shape = self.shape(a)
        ndim = len(shape)
        axis = int(self.rng.integers(-ndim, ndim))
        op = self.choice(["roll", "roll", "pad", "pad", "diff", "repeat", "tile", "cumsum",
                          "cumprod"] + (["diag"] if ndim <= 2 else []))
        tags = set()
        if op == "roll":
            shift = int(self.rng.integers(-3, 4))
            text = self.choice(["np.roll(%s, %d)" % (a, shift),
                                "np.roll(%s, %d, axis=%d)" % (a, shift, axis)])
        elif op == "pad":
            widths = tuple((int(self.rng.integers(0, 3)), int(self.rng.integers(0, 3)))
                           for _ in shape)
            mode = self.choice(["constant", "edge", "wrap", "reflect", "symmetric"])
            extra = ", constant_values=%s" % self.scalar() if mode == "constant" and \
                self.rng.random() < 0.5 else ""
            text = "np.pad(%s, %s, mode=%r%s)" % (a, widths, mode, extra)
        elif op == "diff":
            n = int(self.rng.integers(1, 3))
            text = "np.diff(%s, n=%d, axis=%d)" % (a, n, axis)
            if self.rng.random() < 0.3:
                text = text[:-1] + ", prepend=%s)" % self.scalar()
        elif op == "repeat":
            text = "np.repeat(%s, %d, axis=%d)" % (a, int(self.rng.integers(1, 3)), axis)
        elif op == "tile":
            text = "np.tile(%s, %s)" % (a, tuple(int(self.rng.integers(1, 3))
                                                 for _ in range(ndim)))
        elif op in ("cumsum", "cumprod"):
            text = "np.%s(%s, axis=%d)" % (op, a, axis)
            if np.size(self.probe(a)) == 0:
                tags = {"empty_cumulative"}
        else:
            text = "np.diag(%s)" % a
        name = self.name()
        return self.run("%s = %s" % (name, text), tags, name=name)

    def reduce(self):
        a = self.pick(predicate=lambda n: np.ndim(self.probe(n)) > 0)
        if a is None:
            return False
        value = np.asarray(self.probe(a))
        ndim = value.ndim
        op = self.choice(["sum", "sum", "mean", "prod", "max", "min"])
        axis = self.choice([None, int(self.rng.integers(-ndim, ndim))] +
                           ([(0, ndim - 1)] if ndim >= 2 else []))
        keepdims = bool(self.rng.random() < 0.3)
        tags = set()
        if op in ("max", "min"):
            if value.dtype.kind == "c" or value.size == 0:
                return False
            ordered = np.sort(np.moveaxis(value, axis, -1) if isinstance(axis, int) else
                              value.reshape(-1) if axis is None else
                              np.moveaxis(value, axis, (-2, -1)).reshape(
                                  value.shape[1:-1] + (-1,)), axis=-1)
            if ordered.shape[-1] > 1:
                gap = ordered[..., -1] - ordered[..., -2] if op == "max" else \
                    ordered[..., 1] - ordered[..., 0]
                if not _clear_of_kinks(gap):
                    return False
            tags.add("nonsmooth")
        args = "" if axis is None else ", axis=%s" % (axis,)
        if keepdims:
            args += ", keepdims=True"
        text = ("np.%s(%s%s)" % (op, a, args) if self.rng.random() < 0.7
                else "%s.%s(%s)" % (a, op, args[2:]))
        name = self.name()
        return self.run("%s = %s" % (name, text), tags, name=name)

    def where(self):
        a = self.pick()
        shape = self.shape(a)
        tags = set()
        if self.rng.random() < 0.5 or np.asarray(self.probe(a)).dtype.kind == "c":
            condition = self.mask(self.shape_into(shape))
        else:
            threshold = float(self.rng.integers(-4, 5)) / 4
            if not _clear_of_kinks(np.asarray(self.probe(a)) - threshold, False):
                return False
            condition = "%s > %r" % (a, threshold)
            tags.add("nonsmooth")
        other = self.operand(shape)
        branches = (a, other) if self.rng.random() < 0.5 else (other, a)
        name = self.name()
        return self.run("%s = np.where(%s, %s, %s)" % ((name, condition) + branches), tags,
                        name=name)

    def join(self):
        a = self.pick()
        shape = self.shape(a)
        ndim = len(shape)
        op = self.choice(["concatenate", "stack", "stack_scalars"] if ndim else
                         ["stack", "stack_scalars"])
        if op == "stack_scalars":
            if not ndim or not shape[0]:
                return False
            n = shape[0]
            picks = ", ".join("%s[%d]" % (a, int(self.rng.integers(-n, n)))
                              for _ in range(int(self.rng.integers(2, 4))))
            text = "np.stack([%s])" % picks
        elif op == "stack":
            others = self.readable(predicate=lambda n: self.shape(n) == shape)
            other = self.choice(others) if others and self.rng.random() < 0.6 else \
                self.const(shape)
            axis = int(self.rng.integers(-ndim - 1, ndim + 1))
            parts = [a, other] if self.rng.random() < 0.5 else [other, a]
            text = "np.stack([%s], axis=%d)" % (", ".join(parts), axis)
        else:
            axis = int(self.rng.integers(-ndim, ndim))
            others = self.readable(predicate=lambda n: len(self.shape(n)) == ndim and all(
                m == s for k, (m, s) in enumerate(zip(self.shape(n), shape))
                if k != axis % ndim))
            if others and self.rng.random() < 0.6:
                other = self.choice(others)
            else:
                const_shape = list(shape)
                const_shape[axis] = int(self.rng.integers(1, 3))
                other = self.const(tuple(const_shape))
            parts = [a, other] if self.rng.random() < 0.5 else [other, a]
            if self.rng.random() < 0.3:
                parts.append(a)
            text = "np.concatenate([%s], axis=%d)" % (", ".join(parts), axis)
        name = self.name()
        return self.run("%s = %s" % (name, text), name=name)

    def sparse_constant(self, shape):
        dense = self.rng.integers(1, 9, size=shape) / 4 * (self.rng.random(shape) < 0.5)
        dense *= self.rng.choice([-1.0, 1.0], size=shape)
        kind = self.choice(["csr_matrix", "csc_matrix", "coo_matrix", "csr_array",
                            "csc_array", "bsr_matrix"])
        return self.constant("A", "sp.%s(%s)" % (kind, _array_source(dense)))

    def linear(self):
        a = self.pick(predicate=lambda n: 1 <= np.ndim(self.probe(n)) <= 3)
        if a is None:
            return False
        shape = self.shape(a)
        ndim = len(shape)
        m = int(self.rng.integers(1, 5))
        roll = self.rng.random()
        if ndim == 3:
            c = self.const((shape[-1],))
            text = self.choice(["np.einsum('ijk,k->ij', %s, %s)" % (a, c),
                                "np.einsum('ijk->kji', %s)" % a,
                                "np.einsum('ijk->j', %s)" % a])
        elif roll < 0.3:
            A = self.sparse_constant((m, shape[0]))
            text = "%s @ %s" % (A, a)
        elif ndim == 1:
            options = ["%s @ %s" % (self.const((m, shape[0])), a),
                       "%s @ %s" % (a, self.const((shape[0], m))),
                       "np.dot(%s, %s)" % (self.const((m, shape[0])), a),
                       "np.einsum('ij,j->i', %s, %s)" % (self.const((m, shape[0])), a),
                       "np.outer(%s, %s)" % (a, self.const((m,))),
                       "np.einsum('i,i->', %s, %s)" % (a, a)]
            others = self.readable(predicate=lambda n: self.shape(n) == shape)
            if others:
                options.append("%s @ %s" % (a, self.choice(others)))
            text = self.choice(options)
        else:
            p, q = shape
            options = ["%s @ %s" % (self.const((m, p)), a),
                       "%s @ %s" % (a, self.const((q, m))),
                       "np.einsum('ij,jk->ik', %s, %s)" % (a, self.const((q, m))),
                       "np.einsum('ij->ji', %s)" % a,
                       "np.einsum('ij->', %s)" % a,
                       "np.tensordot(%s, %s, axes=1)" % (a, self.const((q,))),
                       "%s @ %s" % (a, self.sparse_constant((q, m)))]
            if p == q:
                options += ["np.einsum('ii->i', %s)" % a, "np.trace(%s)" % a]
            others = self.readable(predicate=lambda n: self.shape(n) == shape)
            if others:
                options.append("np.einsum('ij,ij->i', %s, %s)" % (a, self.choice(others)))
            text = self.choice(options)
        name = self.name()
        return self.run("%s = %s" % (name, text), name=name)

    def target(self):
        if sum(kind == "target" for kind in self.kinds.values()) >= 3:
            return False
        existing = self.readable(predicate=lambda n: np.ndim(self.probe(n)) > 0)
        if existing and self.rng.random() < 0.5:
            shape = self.shape(self.choice(existing))
        else:
            shape = tuple(int(self.rng.integers(1, 6)) for _ in range(
                int(self.rng.integers(1, 4))))
        if not all(shape) or int(np.prod(shape)) > 40:
            return False
        dtype = ", dtype=x.dtype" if self.dtype != np.float64 or self.rng.random() < 0.2 \
            else ""
        create = self.choice(["np.zeros(%s%s, like=x)", "np.ones(%s%s, like=x)",
                              "np.full(%s, 0.5%s, like=x)"])
        name = self.name("R")
        return self.run("%s = %s" % (name, create % (shape, dtype)), name=name,
                        kind="target")

    def write(self):
        targets = self.readable(("target",))
        candidates = targets if targets and self.rng.random() < 0.8 else \
            self.readable(("value", "target"), lambda n: isinstance(self.probe(n), np.ndarray)
                          and self.probe(n).ndim > 0 and self.probe(n).flags.writeable)
        candidates = [n for n in candidates if n != "x" and (
            self.enabled("view_variable_write") or not self.aliases(n))]
        if not candidates:
            return False
        base = self.choice(candidates)
        tags = set()
        if self.aliases(base):
            tags.add("view_variable_write")
        shape = self.shape(base)
        roll = self.rng.random()
        scalars = self.readable(predicate=lambda n: np.ndim(self.probe(n)) == 0 and n != "x")
        if roll < 0.06 and scalars:
            scalar = self.choice(scalars)
            return self.run("%s %s %s" % (scalar, self.choice(["+=", "*="]), self.scalar()),
                            writes=scalar)
        if roll < 0.12 and self.enabled("temporary_view_write"):
            return self.write_through_temporary(base, tags)
        if roll < 0.2:
            index = self.index_for([shape[0]])
            if index is None:
                return False
            tags |= self.use_index(index, shape[0])
            source = self.source_for((self.objects[index].size,) + shape[1:])
            if self.overlaps(source, base):
                return False
            op = self.choice(["add", "subtract"])
            return self.run("np.%s.at(%s, %s, %s)" % (op, base, index, source), tags,
                            writes=base)
        if roll < 0.27:
            op = self.choice(["+=", "-=", "*="])
            source = self.scalar() if op == "*=" else self.source_for(shape)
            if self.overlaps(source, base):
                return False
            return self.run("%s %s %s" % (base, op, source), tags, writes=base)
        if roll < 0.32 and len(shape) == 1 and shape[0] >= 2:
            shift = self.choice(["%s[1:] = %s[:-1]", "%s[:-1] += %s[1:]", "%s[::-1] = %s"])
            return self.run(shift % (base, base), tags | {"self_overlap"}, writes=base)
        key, key_tags = self.region(base)
        region_shape = np.shape(self.evaluate("%s[%s]" % (base, key)))
        op = self.choice(["=", "=", "+=", "-=", "*="])
        source = self.scalar() if op == "*=" else self.source_for(region_shape)
        if self.overlaps(source, base):
            return False
        if op != "=" and int(np.prod(region_shape)) == 1 and \
                np.asarray(self.probe(base)).dtype.kind == "c":
            tags = tags | {"complex_inplace_element"}
        return self.run("%s[%s] %s %s" % (base, key, op, source), tags | key_tags,
                        writes=base)

    def overlaps(self, source, base):
        """Whether ``source`` reads memory of ``base``: numpy then writes element
        by element in its own order (``a[::2] = a[:3]``, ``a[mask] = a[:4]``),
        which is no semantics to follow (the shifts of ``self_overlap`` are
        drawn on their own: numpy copies for those)."""
        try:
            return np.shares_memory(np.asarray(self.evaluate(source)), self.probe(base))
        except Exception:
            return True

    def write_through_temporary(self, base, tags):
        """Writes into a view numpy makes on the fly: the base sees them."""
        shape = self.shape(base)
        size = int(np.prod(shape))
        forms = ["%s.ravel()" % base, "%s[...]" % base]
        if len(shape) >= 2:
            forms += ["%s.T" % base, "np.moveaxis(%s, 0, -1)" % base]
        new_shape = _factor(self.rng, size, int(self.rng.integers(1, 4)))
        forms.append("%s.reshape%s" % (base, new_shape if len(new_shape) > 1 else
                                       "(%d)" % size))
        if shape[0] >= 3:
            forms.append("%s[1:]" % base)
            forms.append("%s[1:-1]" % base)
        view = self.choice(forms)
        tags = tags | {"temporary_view_write"}
        if len(shape) == 1 and shape[0] >= 4 and self.rng.random() < 0.25:
            n = shape[0] // 2
            return self.run("np.add(%s[:%d], %s[%d:%d], out=%s[:%d])"
                            % (base, n, base, n, 2 * n, base, n), tags, writes=base)
        key = self.basic_key(np.shape(self.evaluate(view))) if self.rng.random() < 0.7 \
            else ":"
        region_shape = np.shape(self.evaluate("%s[%s]" % (view, key)))
        op = self.choice(["=", "=", "+="])
        source = self.source_for(region_shape)
        if self.overlaps(source, base):
            return False
        if op != "=" and int(np.prod(region_shape)) == 1 and \
                np.asarray(self.probe(base)).dtype.kind == "c":
            tags = tags | {"complex_inplace_element"}
        return self.run("%s[%s] %s %s" % (view, key, op, source), tags, writes=base)

    def complex_intermediate(self):
        a = self.pick(predicate=lambda n: np.asarray(self.probe(n)).dtype.kind != "c")
        if a is None:
            return False
        op = self.choice(["into", "into", "abs", "real", "imag", "sign"])
        complex_names = self.readable(predicate=lambda n: np.asarray(self.probe(n)).dtype.kind
                                      == "c")
        if op != "into" and complex_names:
            z = self.choice(complex_names)
            zv = np.asarray(self.probe(z))
            if op in ("abs", "sign") and not _clear_of_kinks(np.abs(zv)):
                return False
            text = "np.%s(%s)" % (op, z)
            if op == "sign":
                text = "np.sign(%s) * %s" % (z, self.scalar())
        else:
            coefficient = "(%r%+rj)" % (float(self.rng.integers(-4, 5)) / 4,
                                        float(self.rng.integers(1, 5)) / 4)
            text = self.choice(["%s * %s" % (a, coefficient), "%s + %s" % (a, coefficient),
                                "%s + 1j * np.sin(%s)" % (a, a)])
        name = self.name()
        return self.run("%s = %s" % (name, text), {"complex_intermediate"}, name=name)

    def collect(self):
        """The result: several variables at once (views read after their base
        changed, among them), or the last one."""
        names = self.readable(("value", "target"))
        if len(names) >= 2 and self.rng.random() < 0.5:
            count = min(len(names), int(self.rng.integers(2, 4)))
            chosen = [names[k] for k in sorted(self.rng.choice(len(names), count,
                                                               replace=False))]
            name = self.name("r")
            if self.run("%s = np.concatenate([%s])" % (
                    name, ", ".join("np.ravel(%s)" % n for n in chosen)), name=name):
                return name
        for name in reversed(list(self.kinds)):
            if name in names and name != "x":
                if name in self.changed:
                    copy = self.name("r")
                    if self.run("%s = np.copy(%s)" % (copy, name), name=copy):
                        return copy
                return name
        return "x"


_GENERAL_STEPS = (("unary", 14), ("binary", 14), ("basic_read", 8), ("fancy_read", 7),
                  ("reshape", 8), ("movement", 7), ("reduce", 5), ("where", 6),
                  ("join", 5), ("linear", 5), ("target", 6), ("write", 16),
                  ("complex_intermediate", 2))


def _draw(builder, steps, weights, count):
    """``count`` statements, each of a step drawn by ``weights`` (tried again
    when numpy refuses it)."""
    for _ in range(count):
        for _attempt in range(12):
            step = steps[builder.rng.choice(len(steps), p=weights)]
            if builder.step(step):
                break


def _general(seed, rng, exclude):
    dtype = DTYPES[rng.choice(len(DTYPES), p=_DTYPE_WEIGHTS)]
    ndim = int(rng.choice(4, p=(0.05, 0.35, 0.4, 0.2)))
    shape = tuple(int(rng.integers(1, 5 if ndim > 1 else 13)) for _ in range(ndim))
    size = int(np.prod(shape))
    point = _point(rng, size, dtype)
    if dtype.kind == "c" and "complex_real_axis" not in exclude and rng.random() < 0.3:
        point = point.real.astype(dtype)
    builder = _General(rng, dtype, [point], exclude)
    builder.start(shape)
    steps = [name for name, _ in _GENERAL_STEPS]
    weights = np.array([w for _, w in _GENERAL_STEPS], dtype=float)
    if dtype.kind == "c" or not builder.enabled("complex_intermediate"):
        weights[steps.index("complex_intermediate")] = 0
    weights /= weights.sum()
    _draw(builder, steps, weights, int(rng.integers(3, 13)))
    result = builder.collect()
    return Program(seed, "general", dtype, builder.constants, builder.body, result, [point])


def _point(rng, size, dtype):
    """Values of four decimals, distinct in magnitude and away from zero (ties
    of different expressions would be kinks)."""
    while True:
        values = np.round(rng.uniform(-1.5, 1.5, size), 4)
        magnitudes = np.abs(values)
        if np.all(magnitudes > 0.01) and len(np.unique(magnitudes)) == size:
            break
    if np.dtype(dtype).kind == "c":
        values = values + 1j * np.round(rng.uniform(-0.5, 0.5, size), 4)
    return np.asarray(values, dtype=dtype)


# ---------------------------------------------------------------- recorded


def _joint(*per_point):
    """The broadcast shape at every point of operands whose shapes are
    ``per_point`` (each a tuple of shapes, one per point), or None."""
    try:
        return tuple(np.broadcast_shapes(*shapes) for shapes in zip(*per_point))
    except ValueError:
        return None


def _divisors(n, most=12):
    """The divisors of ``n`` from 2 to ``most``."""
    return [d for d in range(2, min(n, most) + 1) if n % d == 0]


#: tags of the statements that make or take n-d values, or read by a basic key
ND_TAGS = frozenset({"reshape", "basic_read", "pad", "nd_broadcast", "nd_where"})


class _Recorded(_Builder):
    """Statements of the ``recorded`` family: float64 values of any shape but
    0-d, valid at every point (the points' shapes differ along one axis)."""

    def shapes(self, name):
        return tuple(np.shape(env[name]) for env in self.envs)

    def expression_shapes(self, expression):
        return tuple(np.shape(self.evaluate(expression, k)) for k in range(len(self.envs)))

    def lengths(self, name):
        return tuple(len(env[name]) for env in self.envs)

    def flat(self, name):
        """Whether ``name`` is a 1-d value."""
        return self.kinds[name] == "value" and np.ndim(self.probe(name)) == 1

    def fits(self, name, into=False):
        """Whether a variable broadcasts with ``name`` at every point, within
        :data:`MAX_SIZE` (``into``: without changing its shape)."""
        shapes = self.shapes(name)

        def predicate(other):
            joint = _joint(shapes, self.shapes(other))
            if joint is None:
                return False
            return joint == shapes if into else int(np.prod(joint[0])) <= MAX_SIZE
        return predicate

    def broadcast_tags(self, operands):
        """``{"nd_broadcast"}`` when the arrays among ``operands`` (expressions)
        have other shapes than their n-d result at some point."""
        shapes = [self.expression_shapes(operand) for operand in operands]
        arrays = [s for s in shapes if s[0] != ()]
        joint = _joint(*shapes)
        if joint is None or len(joint[0]) < 2:
            return set()
        return {"nd_broadcast"} if any(s != joint for s in arrays) else set()

    def tied(self, left, right):
        """Whether ``left`` equals ``right`` somewhere at some point, unless they
        are one expression: differences of the points' values may be
        multiples of 1/4, as the thresholds are (``x[:, None] - x[None, :]``),
        and the complex step would break such a tie by its imaginary part."""
        if left == right:
            return False
        return any(np.any(np.asarray(self.evaluate(left, k)) == self.evaluate(right, k))
                   for k in range(len(self.envs)))

    def _accepts(self, name, kind):
        # (the recorder takes no 0-d value: a read of one element goes the eager way)
        if any(np.ndim(env[name]) == 0 for env in self.envs):
            return False
        return super()._accepts(name, kind)

    def const_for(self, shapes):
        """A float64 constant that broadcasts with values of ``shapes`` at every
        point: axes of one length kept or 1, others 1, some leading ones
        dropped, axes of length 1 sometimes widened."""
        ndim = len(shapes[0])
        dims = []
        for axis in range(ndim):
            sizes = {s[axis] for s in shapes}
            n = sizes.pop() if len(sizes) == 1 else None
            roll = self.rng.random()
            if n is not None and roll < 0.6:
                dims.append(n)
            elif n == 1 and roll < 0.8:
                dims.append(int(self.rng.integers(2, 4)))
            else:
                dims.append(1)
        dims = dims[int(self.rng.integers(max(ndim, 1))):]
        if not dims or self.rng.random() < 0.1:
            dims.insert(0, int(self.rng.integers(1, 3)))
        return self.const(tuple(dims), np.float64)

    def linspace_like(self, a):
        """A constant of values made at every call, of ``a``'s shape or along
        one of its axes."""
        low, high = (repr(float(self.rng.integers(1, 9)) / 4 * self.choice([-1.0, 1.0]))
                     for _ in range(2))
        ndim = np.ndim(self.probe(a))
        roll = self.rng.random()
        if ndim == 1:
            return "np.linspace(%s, %s, %s.size)" % (low, high, a)
        if roll < 0.4:
            return "np.linspace(%s, %s, %s.size).reshape(%s.shape)" % (low, high, a, a)
        if roll < 0.7:
            return "np.linspace(%s, %s, %s.shape[-1])" % (low, high, a)
        return "np.linspace(%s, %s, %s.shape[0]).reshape(-1%s)" % (low, high, a,
                                                                   ", 1" * (ndim - 1))

    def unary(self):
        a = self.pick()
        value = self.probe(a)
        positive = bool(np.min(value) > 0.05)
        op = self.choice(["exp", "sin", "cos", "tanh", "log", "sqrt", "log1p", "expm1",
                          "square", "reciprocal", "negative", "power", "power"])
        tags = set()
        if op in ("exp", "expm1"):
            inner = a if np.max(value) < 4 else "np.tanh(%s)" % a
            text = "np.%s(%s)" % (op, inner)
        elif op in ("log", "sqrt"):
            text = "np.%s(%s)" % (op, a if positive else "1.0 + %s * %s" % (a, a))
        elif op == "log1p":
            text = "np.log1p(%s * %s)" % (a, a)
        elif op == "reciprocal":
            text = ("np.reciprocal(%s)" % a if _away_from_zero(value)
                    else "1.0 / (1.0 + %s * %s)" % (a, a))
        elif op == "negative":
            text = self.choice(["-%s", "np.negative(%s)", "+%s"]) % a
        elif op == "power":
            exponent = self.choice([0, 1, 2, 3, -1, 0.5, 1.5, -2, 2.5, 2.0, 0.0])
            if exponent == 0:
                tags.add("power_zero")
            base = a
            if not float(exponent).is_integer() and not positive:
                base = "(1.0 + %s * %s)" % (a, a)
            elif exponent < 0 and not _away_from_zero(value):
                base = "(1.0 + %s * %s)" % (a, a)
            text = self.choice(["%s ** %r", "np.power(%s, %r)"]) % (base, exponent)
        else:
            text = "np.%s(%s)" % (op, a)
        name = self.name()
        return self.run("%s = %s" % (name, text), tags, name=name)

    def binary(self):
        a = self.pick()
        op = self.choice(["+", "-", "*", "/"])
        roll = self.rng.random()
        if roll < 0.4:
            b = self.pick(predicate=self.fits(a)) or self.scalar()
        elif roll < 0.48:
            a, b = self.outer(a)
        elif roll < 0.6:
            b = self.linspace_like(a)
        elif roll < 0.75:
            b = self.const_for(self.shapes(a))
        else:
            b = self.scalar()
        first, second = (a, b) if self.rng.random() < 0.6 else (b, a)
        if op == "/" and not _away_from_zero(self.evaluate(second)):
            second = "(1.0 + %s * %s)" % (second, second)
        tags = self.broadcast_tags([first, second])
        name = self.name()
        return self.run("%s = %s %s %s" % (name, first, op, second), tags, name=name)

    def outer(self, a):
        """Two operands of ``a`` that broadcast: reads of ``a`` (and of another
        1-d value) to a larger shape than either, ``(n, 1)`` with ``(1, k)``,
        or ``a`` and a read of it broadcast to its shape."""
        ndim = np.ndim(self.probe(a))
        if ndim == 1:
            b = self.pick(predicate=self.flat) or a
            return "%s[:, None]" % a, self.choice(["%s[None, :]", "%s[None]", "%s"]) % b
        if ndim == 2 and self.rng.random() < 0.6:
            return ("%s[:, %s]" % (a, self.choice([":1", "-1:", "1:2"])),
                    "%s[%s]" % (a, self.choice([":1", "-1:", "None, 0", "1:2, :"])))
        # (a value with a read of itself along one axis, (n, k) with (n, 1))
        return a, "%s[%s]" % (a, self.choice([":1", "-1:", "..., :1", "..., -1:", "None, 0",
                                               "::-1", "..., ::-1"]))

    def read(self):
        """A read of a 1-d value by a slice or an index array."""
        a = self.pick(predicate=self.flat)
        roll = self.rng.random()
        tags = set()
        if roll < 0.55:
            key = self.choice(["1:", ":-1", "1:-1", "::2", "1::2", "::-1", "-3:", ":3",
                               "2:-1", "::-2", "-2::-1", ":%s.size // 2" % a])
        elif roll < 0.9:
            lengths = self.lengths(a)
            key = self.index_for(lengths)
            if key is None:
                return False
            for length in lengths:
                tags |= self.use_index(key, length)
        else:
            n = min(self.lengths(a))
            key = repr([int(k) for k in self.rng.integers(-n, n, int(self.rng.integers(1, 4)))])
        name = self.name()
        return self.run("%s = %s[%s]" % (name, a, key), tags, name=name)

    def basic_read(self):
        """A read by ints, slices (negative steps too), None and Ellipsis, valid
        at every point's shape (ints within the shortest length of an axis);
        a 1-d value's by a tuple."""
        a = self.pick()
        shapes = self.shapes(a)
        low = tuple(min(s[axis] for s in shapes) for axis in range(len(shapes[0])))
        key = self.basic_key(low)
        if len(low) == 1 and "None" not in key and "..." not in key:
            key += ","
        name = self.name()
        return self.run("%s = %s[%s]" % (name, a, key), {"basic_read"}, name=name)

    def reshape(self):
        """A reshape in C order (methods, np.reshape, np.ravel) to a shape valid
        at every point: axes that divide every point's size, -1 for the rest."""
        a = self.pick()
        shapes = self.shapes(a)
        ndim = len(shapes[0])
        g = int(np.gcd.reduce([int(np.prod(s)) for s in shapes]))
        if ndim > 1:
            options = ["{0}.ravel()", "np.ravel({0})", "{0}.reshape(-1)", "np.reshape({0}, -1)",
                       "{0}.reshape({0}.shape[0], -1)", "{0}.reshape(-1, {0}.shape[-1])",
                       "{0}.ravel(order='C')"]
        else:
            options = ["{0}.reshape(1, -1)", "{0}.reshape(-1, 1)", "np.reshape({0}, (1, -1))"]
        options += ["{0}.reshape({0}.shape + (1,))", "{0}.reshape(1, *{0}.shape)"]
        divisors = _divisors(g)
        if divisors:
            d = self.choice(divisors)
            options += [t.replace("D", str(d)) for t in (
                "{0}.reshape(-1, D)", "{0}.reshape(D, -1)", "np.reshape({0}, (-1, D))",
                "{0}.reshape((-1, D))", "{0}.reshape(-1, D, order='C')",
                "np.reshape({0}, shape=(D, -1))", "{0}.reshape(-1, D)", "{0}.reshape(-1, 1, D)")]
            inner = _divisors(d)
            if inner:
                p = self.choice(inner)
                options += ["{0}.reshape(-1, %d, %d)" % (p, d // p),
                            "{0}.reshape(%d, -1, %d)" % (p, d // p),
                            "{0}.reshape(-1, %d, %d)" % (d // p, p)]
        name = self.name()
        return self.run("%s = %s" % (name, self.choice(options).format(a)), {"reshape"},
                        name=name)

    def pad(self):
        """``np.pad`` by zeros: widths as an int, a pair, one pair in a
        sequence or a pair per axis."""
        a = self.pick()
        ndim = np.ndim(self.probe(a))

        def width():
            return int(self.rng.integers(0, 3))
        roll = self.rng.random()
        if roll < 0.2:
            widths = "%d" % width()
        elif roll < 0.4:
            widths = "(%d, %d)" % (width(), width())
        elif roll < 0.5:
            widths = self.choice(["((%d, %d),)", "[(%d, %d)]", "[[%d, %d]]"]) % (width(),
                                                                                width())
        elif roll < 0.55:
            widths = "(%d,)" % width()
        else:
            pairs = ", ".join("(%d, %d)" % (width(), width()) for _ in range(ndim))
            widths = ("(%s,)" if ndim == 1 else "(%s)" if self.rng.random() < 0.7
                      else "[%s]") % pairs
        mode = ", mode='constant'" if self.rng.random() < 0.15 else ""
        name = self.name()
        return self.run("%s = np.pad(%s, %s%s)" % (name, a, widths, mode), {"pad"},
                        name=name)

    def mask(self):
        a = self.pick()
        roll = self.rng.random()
        threshold = self.scalar()
        tags = set()
        if roll < 0.5:
            text = "%s %s %s" % (a, self.choice([">", "<", ">=", "<="]), threshold)
            compared = (a, threshold)
        else:
            b = self.pick(("value", "mask"), predicate=self.fits(a))
            if b is None:
                return False
            tags = self.broadcast_tags([a, b])
            if self.kinds[b] == "mask":
                text = self.choice(["(%s > %s) & %s", "np.logical_or(%s < %s, %s)",
                                    "(%s < %s) ^ %s"]) % (a, threshold, b)
                compared = (a, threshold)
            else:
                text = "%s < %s" % (a, b)
                compared = (a, b)
        if self.tied(*compared):
            return False
        if self.rng.random() < 0.15:
            text = "~(%s)" % text
        name = self.name("m")
        return self.run("%s = %s" % (name, text), tags, name=name, kind="mask")

    def branch_value(self, shapes):
        """A value for a branch of np.where whose condition has ``shapes``: of
        that shape, a scalar, or one broadcast to it (length 1, or n-d)."""
        roll = self.rng.random()
        same = self.pick(predicate=lambda n: self.shapes(n) == shapes)
        if roll < 0.2 and self.enabled("where_broadcast_branch"):
            smaller = self.pick(predicate=lambda n: self.shapes(n) != shapes
                                and _joint(shapes, self.shapes(n)) == shapes)
            if smaller is not None and len(shapes[0]) > 1 and self.rng.random() < 0.6:
                return smaller
            other = self.pick() or "x"
            return self.choice(["%s[:1]", "%s[-1:]"]) % other
        if roll < 0.45:
            return self.scalar()
        if roll < 0.55:
            if same is None:
                return self.scalar()
            return ("np.linspace(0.5, 1.5, %s.size)" % same if len(shapes[0]) == 1
                    else "np.linspace(0.5, 1.5, %s.size).reshape(%s.shape)" % (same, same))
        if roll < 0.65:
            # (a value the condition broadcasts to)
            larger = self.pick(predicate=lambda n: self.shapes(n) != shapes
                               and _joint(shapes, self.shapes(n)) == self.shapes(n))
            return larger or same or self.scalar()
        return same or self.scalar()

    def where(self):
        masks = self.readable(("mask",))
        if masks and self.rng.random() < 0.6:
            condition = self.choice(masks)
        else:
            a = self.pick()
            threshold = self.scalar()
            if self.tied(a, threshold):
                return False
            condition = "%s > %s" % (a, threshold)
        shapes = self.expression_shapes(condition)
        first = self.branch_value(shapes)
        second = self.branch_value(shapes)
        tags = set()
        if first == second and first in self.kinds:
            tags.add("where_same_branches")
        branches = [self.expression_shapes(b) for b in (first, second)]
        result = _joint(shapes, *branches)
        if result is None:
            return False
        if any(s[0] != () and s != result for s in branches):
            tags.add("where_broadcast_branch")
        if len(result[0]) > 1:
            tags.add("nd_where")
        name = self.name()
        return self.run("%s = np.where(%s, %s, %s)" % (name, condition, first, second),
                        tags, name=name)

    def times_mask(self):
        masks = self.readable(("mask",))
        if not masks:
            return False
        m = self.choice(masks)
        a = self.pick(predicate=self.fits(m))
        if a is None:
            return False
        name = self.name()
        return self.run("%s = %s * %s" % (name, a, m), self.broadcast_tags([a, m]),
                        name=name)

    def roll(self):
        a = self.pick(predicate=self.flat)
        name = self.name()
        return self.run("%s = np.roll(%s, %d)" % (name, a, int(self.rng.integers(-3, 4))),
                        name=name)

    def concatenate(self):
        parts = [self.pick(predicate=self.flat) for _ in range(int(self.rng.integers(1, 4)))]
        if None in parts:
            return False
        if self.rng.random() < 0.3:
            parts.insert(int(self.rng.integers(len(parts) + 1)),
                         self.choice(["np.ones(2)", "np.array([0.5])", "np.zeros(3)"]))
        name = self.name()
        return self.run("%s = np.concatenate([%s])" % (name, ", ".join(parts)), name=name)

    def branch(self):
        a = self.pick()
        roll = self.rng.random()
        if roll < 0.7:
            sizes = sorted({env["x"].size for env in self.envs})
            if len(sizes) < 2:
                return False
            threshold = sizes[int(self.rng.integers(len(sizes) - 1))]
            condition, tags = "x.size > %d" % threshold, {"length_branch"}
        elif self.enabled("value_branch"):
            condition, tags = "%s[0] > 0" % a, {"value_branch"}
        else:
            return False
        name = self.name()
        return self.run("%s = np.sin(%s) if %s else %s * 0.5" % (name, a, condition, a),
                        tags, name=name)

    def write(self):
        """A value made to be written (``np.zeros(shape, like=x)``, a copy, a
        result) and a write into it by a basic key (of a 1-d value, a list of
        ints too), of a value, a number or a constant, valid at every point."""
        a = self.pick()
        name = self.name()
        # (a forward value whatever ``a`` is: a write of a value into a plain
        # array is an error of both engines)
        # (of x's dtype: the complex step's complex values are written whole)
        make = self.choice(["np.zeros(%s.shape, dtype=x.dtype, like=x)",
                            "np.ones(%s.shape, dtype=x.dtype, like=x)",
                            "x.copy()", "x * 1.0", "%s + np.zeros(%s.shape, like=x)",
                            "np.exp(%s * 0.25) + np.zeros(%s.shape, like=x)"])
        if not self.run("%s = %s" % (name, make.replace("%s", a)), {"write"}, name=name):
            return False
        for _ in range(int(self.rng.integers(1, 4))):
            shapes = self.shapes(name)
            if len(shapes[0]) == 1 and self.rng.random() < 0.2:
                key = "[0, -1]" if self.rng.random() < 0.5 else "[1, 0]"
            else:
                key = self.basic_key(shapes[0])
            try:
                regions = [np.shape(self.evaluate("%s[%s]" % (name, key), k))
                           for k in range(len(self.envs))]
            except Exception:
                continue
            fitting = self.readable(predicate=lambda n: n != name and all(
                _broadcasts_into(s, r) for s, r in zip(self.shapes(n), regions)))
            roll = self.rng.random()
            if fitting and roll < 0.7:
                source = self.choice(["%s", "np.sin(%s)", "%s * 2.0"]) % self.choice(fitting)
            elif roll < 0.9:
                source = self.scalar()
            else:
                source = "np.linspace(1.0, 2.0, %s[%s].size).reshape(%s[%s].shape)" % (
                    name, key, name, key)
            # (into the value, in place too, or through a view of it)
            target = name
            if self.rng.random() < 0.25:
                target = self.choice(["%s.reshape(-1)", "%s.T", "%s[::-1]"]) % name
            op = self.choice(["=", "=", "+=", "-=", "*="])
            self.run("%s[%s] %s %s" % (target, key, op, source), {"write"}, writes=name)
        return True

    def untraceable(self):
        """An operation the recorder does not take (the call goes the eager way)."""
        a = self.pick()
        ndim = np.ndim(self.probe(a))
        options = ["%s * np.sum(%s)", "%s.T * 1.0", "np.cumsum(%s)"]
        if ndim > 1:
            # (a transpose, np.roll and np.concatenate of n-d values, a read of
            # one element, an index array into an n-d value)
            options += ["np.roll(%s, 1)", "np.concatenate([%s, %s])",
                        "%%s * %%s[%s]" % ", ".join(["0"] * ndim), "%s[np.array([0, -1])]",
                        "np.transpose(%s) * 2.0"]
        text = self.choice(options)
        name = self.name()
        return self.run("%s = %s" % (name, text.replace("%s", a)), {"untraceable"},
                        name=name)


_RECORDED_STEPS = (("unary", 14), ("binary", 14), ("read", 12), ("mask", 6), ("where", 9),
                   ("times_mask", 2), ("roll", 3), ("concatenate", 4), ("branch", 3),
                   ("untraceable", 1), ("basic_read", 2), ("pad", 2), ("write", 4))
#: the steps of programs of n-d values
_ND_STEPS = (("unary", 12), ("binary", 14), ("read", 3), ("basic_read", 12),
             ("reshape", 9), ("pad", 6), ("mask", 6), ("where", 9), ("times_mask", 2),
             ("roll", 2), ("concatenate", 2), ("branch", 2), ("untraceable", 1), ("write", 4))
#: the axes of n-d programs' points other than the one whose length changes
_ND_BLOCKS = ((2,), (3,), (4,), (2, 2), (3, 2), (2, 3), (1,), (5,))

#: (three decimals, the last one 1, distinct magnitudes: no value is a
#: multiple of 1/4, as the thresholds are, nor equal to another, so no
#: comparison is a tie the complex step would break by its imaginary part)
_MAGNITUDES = np.arange(150) / 100 + 0.001


def _recorded_shapes(rng):
    """The shapes of a recorded program's points, and whether its values are
    n-d: two calls of one shape with other values, then other shapes, then
    the first again (masks, branches and lengths change between calls).

    1-d programs: lengths 4 to 10 and others near them.  n-d programs: ``m``
    blocks of fixed axes (``block``), the argument 1-d (``m * size`` long:
    reshapes to the block's axes are valid at every point), 2-d ``(m,
    size)`` or 3-d, ``m`` changing between calls."""
    if rng.random() >= 0.45:
        n = int(rng.integers(4, 11))
        others = [n + int(k) for k in rng.choice([-2, -1, 1, 2, 3, 5],
                                                 int(rng.integers(1, 3)), replace=False)]
        return [(length,) for length in [n, n] + others + [n]], False
    block = _ND_BLOCKS[int(rng.integers(len(_ND_BLOCKS)))]
    size = int(np.prod(block))
    m = int(rng.integers(2, 6))
    others = [m + int(k) for k in rng.choice([-1, 1, 2, 3], int(rng.integers(1, 3)),
                                             replace=False)]
    roll = rng.random()
    if roll < 0.55:
        shape = lambda m: (m * size,)                    # noqa: E731
    elif roll < 0.85 or len(block) == 1 and size == 1:
        shape = lambda m: (m, size)                      # noqa: E731
    else:
        inner = block if len(block) == 2 else (1, size) if rng.random() < 0.5 else (size, 1)
        shape = lambda m: (m,) + inner                   # noqa: E731
    return [shape(k) for k in [m, m] + others + [m]], True


def _recorded(seed, rng, exclude):
    shapes, nd = _recorded_shapes(rng)
    points = []
    for shape in shapes:
        size = int(np.prod(shape))
        points.append((_MAGNITUDES[rng.choice(150, size, replace=False)]
                       * rng.choice([-1.0, 1.0], size)).reshape(shape))
    builder = _Recorded(rng, np.float64, points, exclude)
    table = _ND_STEPS if nd else _RECORDED_STEPS
    steps = [name for name, _ in table]
    weights = np.array([w for _, w in table], dtype=float)
    weights /= weights.sum()
    if nd and points[0].ndim == 1 and rng.random() < 0.7:
        builder.step("reshape")
    _draw(builder, steps, weights, int(rng.integers(3, 11)))
    values = [name for name, kind in builder.kinds.items() if kind == "value"]
    result = values[-1]
    if len(values) >= 3 and rng.random() < 0.4:
        name = builder.name("r")
        chosen = [values[-1], values[int(rng.integers(len(values) - 1))]]
        if all(builder.flat(v) for v in chosen):
            line = "%s = np.concatenate([%s])" % (name, ", ".join(chosen))
            tags = ()
        else:
            # (np.concatenate of n-d values goes the eager way: the result
            # raveled, or a sum of the two where they broadcast)
            text = builder.choice(["%s.ravel()", "%s.reshape(-1, 1)", "%s + %s"])
            line = "%s = %s" % (name, text.replace("%s", chosen[0], 1).replace("%s", chosen[1]))
            tags = builder.broadcast_tags(chosen) if "+" in text else {"reshape"}
        if builder.run(line, tags, name=name):
            result = name
    return Program(seed, "recorded", np.float64, builder.constants, builder.body, result,
                   points)


# ---------------------------------------------------------------- unsupported

#: operations sparsegrad refuses, by the dtypes of their operand
_REFUSED_REAL = ("np.unique(%s)", "np.cov(%s)", "np.corrcoef(%s, %s)",
                 "np.percentile(%s, 50, method='nearest')", "np.add.outer(%s, %s)",
                 "np.maximum.accumulate(%s)", "np.add.reduceat(np.ravel(%s), [0, 1])",
                 "np.fft.fft(%s)", "np.polyval([1.0, 0.5], %s)", "np.nan_to_num(%s)",
                 "np.exp(%s, out=np.ones(np.shape(%s)))", "np.frexp(%s)[0]",
                 "np.modf(%s)[0]", "np.histogram(%s)[0]",
                 "np.sin(%s, where=np.ones(np.shape(%s), bool))")
_REFUSED_COMPLEX = ("np.abs(%s)", "np.sign(%s)", "np.real(%s)", "np.imag(%s)",
                    "np.conj(%s)", "np.angle(%s)", "abs(%s)")


def _unsupported(seed, rng, exclude):
    dtype = DTYPES[0] if rng.random() < 0.7 else DTYPES[3]
    size = int(rng.integers(2, 9))
    point = _point(rng, size, dtype)
    builder = _General(rng, dtype, [point], exclude)
    builder.start((size,))
    _draw(builder, ["unary", "binary", "basic_read"], np.ones(3) / 3,
          int(rng.integers(0, 3)))
    a = builder.pick(predicate=lambda n: np.ndim(builder.probe(n)) == 1
                     and np.size(builder.probe(n)) >= 2)
    a = a or "x"
    off_axis = np.all(np.asarray(builder.probe(a)).imag != 0)
    # (abs, sign and conj of complex values on the real axis are taken by their
    # continuation: only values off it must be refused)
    options = _REFUSED_COMPLEX if dtype.kind == "c" and off_axis and rng.random() < 0.6 \
        else _REFUSED_REAL
    name = builder.name()
    for _attempt in range(12):
        line = "%s = %s" % (name, builder.choice(options).replace("%s", a))
        try:
            with quiet():
                exec(line, dict(builder.envs[0]))
        except Exception:
            continue
        break
    else:
        line = "%s = np.unique(%s)" % (name, a)
    builder.body.append((line, frozenset({"refused"})))
    return Program(seed, "unsupported", dtype, builder.constants, builder.body, name,
                   [point])


def generate(seed, exclude=KNOWN_OPEN, family=None):
    """The program of ``seed``.

    Parameters
    ----------
    seed : int
    exclude : collection of str
        Names of :data:`FEATURES` to leave out (default :data:`KNOWN_OPEN`).
    family : str, optional
        Force one of :data:`FAMILIES` (default: drawn from the seed).

    Returns
    -------
    Program
    """
    rng = np.random.default_rng(seed)
    drawn = FAMILIES[rng.choice(len(FAMILIES), p=_FAMILY_WEIGHTS)]
    family = family or drawn
    make = {"general": _general, "recorded": _recorded, "unsupported": _unsupported}[family]
    return make(seed, rng, frozenset(exclude))
