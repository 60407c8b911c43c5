"""Applying a ufunc (or one of its methods) to forward values via the rule tables.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.array([0.0, 1.0]))
>>> np.maximum(x, 0.5).dvalue.toarray()
array([[0., 0.],
       [0., 1.]])
"""
import contextlib

import numpy as np
import scipy.sparse

from . import _backend
from . import _jacobian as jac
from . import _ufunc_rules as rules
from ._errors import unsupported
from ._deferred import Deferred, compute, in_c_order
from ._indexing import broadcast_rows, row_index
from . import _value
from ._value import (value, nvalue, number, plain, coerce, make, broadcast_jacobian, cast_input,
                     cast_is_constant, check_real_axis, _device_keys,
                     _replay, written)

__all__ = ["apply", "call"]

_REDUCTIONS = {np.add: np.sum, np.multiply: np.prod, np.maximum: np.max,
               np.minimum: np.min}
_ACCUMULATIONS = {np.add: np.cumsum, np.multiply: np.cumprod}
_CALL_KEYWORDS = frozenset(["dtype", "casting", "order", "subok", "signature"])
# keywords a linear-algebra ufunc's own implementation takes (and differentiates)
_LINEAR_KEYWORDS = {np.vecdot: ("axis",)} if hasattr(np, "vecdot") else {}


def apply(ufunc, method, inputs, kwargs):
    """Result of ``getattr(ufunc, method)(*inputs, **kwargs)`` with forward inputs."""
    if method == "__call__":
        return _call(ufunc, inputs, kwargs)
    name = rules.rule_name(ufunc)
    if method == "reduce" and ufunc in _REDUCTIONS:
        x = coerce(inputs[0])
        axis = kwargs.pop("axis", 0)
        _refuse_keywords(name + ".reduce", kwargs, ("dtype", "keepdims"))
        if np.ndim(plain(x)) == 0 and isinstance(axis, int) and axis in (0, -1):
            axis = None  # (numpy lets the one axis of a 0-d array be named so)
        # numpy casts the input to dtype= first (the real parts of complex
        # values for a real dtype: a product of real parts; np.max takes no dtype=)
        x = cast_input(x, kwargs.pop("dtype", None), name + ".reduce")
        return _REDUCTIONS[ufunc](x, axis=axis, **kwargs)
    if method == "accumulate" and ufunc in _ACCUMULATIONS:
        x = coerce(inputs[0])
        axis = _accumulation_axis(name, np.ndim(plain(x)), kwargs.pop("axis", 0))
        _refuse_keywords(name + ".accumulate", kwargs, ("dtype",))
        x = cast_input(x, kwargs.pop("dtype", None), name + ".accumulate")
        return _ACCUMULATIONS[ufunc](x, axis=axis, **kwargs)
    if method == "at" and ufunc in (np.add, np.subtract):
        target, indices = inputs[0], inputs[1]
        increment = inputs[2] if len(inputs) > 2 else None
        if not isinstance(target, value):
            raise TypeError("%s.at: the target is a plain array but the increment is a "
                            "forward value; create the target with np.zeros(shape, like=x)"
                            % name)
        if increment is None:
            raise unsupported(name + ".at", "an increment is required")
        if ufunc is np.subtract:
            increment = -increment
        _scatter_add(target, indices, increment)
        return None
    if method == "at" and ufunc in (np.multiply, np.maximum, np.minimum):
        if not isinstance(inputs[0], value):
            raise TypeError("%s.at: the target is a plain array but the operand is a "
                            "forward value; create the target with np.zeros(shape, like=x)"
                            % name)
        if len(inputs) < 3:
            raise unsupported(name + ".at", "an operand is required")
        _scatter_combine(ufunc, *inputs[:3])
        return None
    raise unsupported("%s.%s" % (name, method), "this ufunc method has no derivative rule")


def call(ufunc, inputs):
    """``ufunc(*inputs)`` with forward inputs and no keywords (the common call)."""
    return _call(ufunc, inputs, {})


def _accumulation_axis(name, ndim, axis):
    """The one axis of ``ufunc.accumulate`` as numpy reads it (``np.cumsum`` would
    flatten an n-d array for ``axis=None``, where numpy's accumulate refuses)."""
    if ndim == 0:
        raise TypeError("%s.accumulate: cannot accumulate on a scalar" % name)
    if isinstance(axis, tuple):
        if len(axis) != 1:
            raise ValueError("%s.accumulate: accumulate does not allow multiple axes"
                             % name)
        axis = axis[0]
    if axis is None:
        if ndim != 1:
            raise ValueError("%s.accumulate: accumulate does not allow multiple axes"
                             % name)
        axis = 0
    return axis


def _real(x):
    """The real part of a complex operand (forward or plain; a complex seed's on
    the real axis); others unchanged."""
    if isinstance(x, value):
        if x.dtype.kind != "c":
            return x
        return make(np.real(x._value), real_part(x._jacobian))
    return x.real if np.iscomplexobj(x) else x


def _refuse_keywords(name, kwargs, allowed):
    for key in kwargs:
        if key not in allowed:
            raise unsupported(name, "the %s= argument" % key)


def _call(ufunc, inputs, kwargs):
    if kwargs:
        _refuse_keywords(rules.rule_name(ufunc), kwargs,
                         _CALL_KEYWORDS.union(_LINEAR_KEYWORDS.get(ufunc, ())))
    else:
        common = _common_operands(ufunc, inputs)
        if common is not None:
            # (sparsity mode's result comes whole: a deferred value and the union)
            return common if type(common) is not tuple else _differentiate(ufunc, *common)
    if ufunc in (np.multiply, np.power) and any(isinstance(i, np.matrix) for i in inputs):
        # (numpy hands x * M to np.matrix, a matrix product: an elementwise
        # product here would silently differ from numpy's result)
        raise unsupported(rules.rule_name(ufunc), "np.matrix operands (numpy's "
                          "deprecated matrix class, whose * and ** are matrix "
                          "operations); convert with np.asarray and use @")
    if ufunc is np.multiply and any(scipy.sparse.issparse(i) for i in inputs):
        return _sparse_times(inputs)
    category = rules.classify(ufunc)
    inputs = [coerce(i) for i in inputs]
    # (0-d host arrays as numpy scalars, which CuPy takes beside its arrays; numpy
    # treats the two alike)
    values = [number(plain(i)) for i in inputs]
    if category == "predicate":
        return ufunc(*values, **kwargs)
    if category == "linear_algebra":
        from ._functions import FUNCTIONS
        return FUNCTIONS[ufunc](*inputs, **kwargs)
    if category in ("unsupported", "unclassified"):
        raise unsupported(rules.rule_name(ufunc),
                          rules.UNSUPPORTED.get(ufunc, "no derivative rule"))
    if any(scipy.sparse.issparse(v) for v in values):
        # (numpy would make an object array of sparse matrices)
        raise unsupported(rules.rule_name(ufunc), "a scipy sparse operand; use A @ x "
                          "for a matrix product, or A.toarray() for elementwise "
                          "arithmetic")
    forwards = [(i, x) for i, x in enumerate(inputs) if isinstance(x, value)]
    out = _backend.asarray(ufunc(*values, **kwargs))
    if not forwards:  # only an out= target is a forward value
        return out
    seed = jac.common_seed([x._jacobian for _, x in forwards])
    kind = out.dtype.kind
    if kind not in "biufc":
        # (an object operand: numpy calls the method of each element, and the
        # derivative of what it computes is unknown)
        raise unsupported(rules.rule_name(ufunc), "a result of dtype %s (an operand "
                          "of object dtype?)" % out.dtype)
    if kind == "f" and ufunc is not np.absolute and any(np.iscomplexobj(v)
                                                        for v in values):
        # a real loop of complex inputs (dtype=float, casting="unsafe"): numpy took
        # their real parts, whose Jacobians are the real parts of theirs
        check_real_axis(rules.rule_name(ufunc) + " to a real dtype",
                        [x for _, x in forwards])
        return _call(ufunc, [_real(x) for x in inputs], kwargs)
    if ufunc in rules.NON_HOLOMORPHIC and kind in "fc" and np.iscomplexobj(values[0]):
        return _non_holomorphic(ufunc, rules.rule_name(ufunc), inputs[0], out)
    if category == "piecewise_constant" or ((kind not in "fc" or seed.complex) and (
            cast_is_constant(rules.rule_name(ufunc), seed, kind,
                             [x for _, x in forwards]))):
        return make(out, jac.zero(seed, out.size))
    partials = rules.DERIVATIVES.get(ufunc)
    for i, _ in forwards:
        if partials is not None and partials[i] is None:
            raise unsupported(rules.rule_name(ufunc), "argument %d is an integer and "
                              "cannot depend on the seed" % (i + 1))
    if seed.pattern_only:
        return _pattern_union(forwards, out)
    # plain arrays of the caller: a partial that is one of them (``x * c`` has the
    # partial ``c``) is copied, or writing into ``c`` later would change the Jacobian
    constants = [v for v, x in zip(values, inputs)
                 if not isinstance(x, value) and getattr(v, "ndim", 0)]
    values = _at_precision(values, out.dtype, partials)
    if category == "selection":
        if ufunc in rules.SELECTIONS:
            first = np.broadcast_to(rules.SELECTIONS[ufunc](*values, out), out.shape).ravel()
            masks = (first, ~first)
        else:  # (the second argument where the mask holds, a constant elsewhere)
            masks = (None, np.broadcast_to(rules.SECOND_WHERE[ufunc](*values, out),
                                           out.shape).ravel())
        terms = [jac.mask_rows(broadcast_jacobian(x, out.shape), masks[i])
                 for i, x in forwards if masks[i] is not None]
        return make(out, jac.add(terms) if terms else jac.zero(seed, out.size))
    return _differentiate(ufunc, forwards, values, out, constants)


def power_by(shortcut, x, exponent):
    """``x ** exponent`` as numpy's operator computes it for an array ``x`` and the
    Python number -1, 2 or 0.5: the value by ``shortcut`` (reciprocal, square or
    sqrt: for complex values a rounding apart from power), the Jacobian by
    power's rule, the same as any other power's (and a recorded program's)."""
    raw = x._raw
    J = x._jacobian
    if type(raw) is Deferred or (J.seed.pattern_only and type(raw) is np.ndarray
                                 and raw.dtype is _FLOAT64):
        # (sparsity mode: computed when read, the pattern x's; x's array is kept)
        x._owns = False
        # (a new array of one dimension is C-contiguous, whatever its operands)
        return make(Deferred(shortcut, (raw,), raw.shape, raw.dtype,
                             raw.ndim < 2 or in_c_order((raw,))), J)
    array = x._value
    out = shortcut(array)
    if array.dtype is _FLOAT64 and type(array) is np.ndarray:
        # (the common case, as :func:`_common_operands` passes it)
        values = [array, np.int64(exponent) if type(exponent) is int else np.float64(exponent)]
    else:
        values = _at_precision([array, exponent], out.dtype, rules.DERIVATIVES[np.power])
    return _differentiate(np.power, [(0, x)], values, out, [])


def _differentiate(ufunc, forwards, values, out, constants):
    """``out`` with the Jacobian of the rule ``DERIVATIVES[ufunc]`` (chain rule).

    ``values`` are the inputs in the precision of ``out``; ``constants`` the
    caller's arrays among them, copied when one is a partial derivative.
    """
    partials = rules.DERIVATIVES[ufunc]
    if forwards[0][1]._jac.seed.pattern_only:  # (an Assembly has a seed too)
        return _pattern_union(forwards, out)
    terms = []
    # numpy already warned about the value; numbers as partials (add, subtract)
    # only scale by scalars, where nothing can warn
    quiet = _NUMBERS_ONLY
    for i, _ in forwards:
        if callable(partials[i]) and type(partials[i]) is not rules.Operand:
            quiet = np.errstate(all="ignore")
            break
    shape = out.shape
    computed = out
    if quiet is not _NUMBERS_ONLY:
        *values, computed = _ascending(list(values) + [out])
    with quiet:
        for i, x in forwards:
            partial = partials[i]
            if callable(partial):
                partial = (values[partial.index] if type(partial) is rules.Operand
                           else partial(*values, computed))
                if constants and any(partial is c for c in constants):
                    partial = partial.copy()
            if getattr(partial, "ndim", 0) > 0:
                if partial.shape != shape:
                    partial = np.broadcast_to(partial, shape)
                partial = partial.ravel()
            elif not isinstance(partial, (int, float)):
                partial = partial[()] if isinstance(partial, np.ndarray) else partial
            terms.append(jac.scale(broadcast_jacobian(x, shape), partial))
    return make(out, terms[0] if len(terms) == 1 else jac.add(terms))


_NUMBERS_ONLY = contextlib.nullcontext()


def _ascending(arrays):
    """``arrays``, those of a negative stride copied in C order.

    numpy rounds a transcendental function (``exp``, ``cosh``, ``power``...) of
    an operand of negative stride by its scalar loop, and of any other layout
    by its SIMD loop, which on AVX-512 differs in the last bit.  A recorded
    program computes its partials on contiguous gathers; computing the eager
    partials so too gives both engines the same bits on every CPU.
    """
    return [np.ascontiguousarray(a) if type(a) is np.ndarray and a.ndim
            and min(a.strides) < 0 else a for a in arrays]


def _pattern_union(forwards, out):
    """Sparsity mode: the union of the operands' patterns (no partials, no masks)."""
    return make(out, jac.add([broadcast_jacobian(x, out.shape) for _, x in forwards]))


_FLOAT64 = np.dtype(np.float64)
_ARRAYS = (np.ndarray, Deferred)


def _common_operands(ufunc, inputs):
    """``(forwards, values, out, constants)`` for :func:`_differentiate`, computing
    ``out``, when the call is the common case of residual code; in sparsity mode
    the result itself (its value deferred: :mod:`sparsegrad._deferred`, its
    pattern the union of the operands'); else None.

    The common case: a differentiable ufunc of float64 forward values of one
    (non-empty) shape, Python floats and ints (and numpy's float64 and int64
    scalars), and float64 arrays of that shape
    (``eta * u``, ``x - 1.0``, ``xt - f``).  Then none of the general path's
    coercions, broadcasts and dtype rules can apply, and their cost per call
    would exceed numpy's own on arrays of thousands of elements.
    """
    partials = rules.DERIVATIVES.get(ufunc)
    if partials is None:
        return None
    shape = seed = None
    forwards, values, precise, constants, jacobians = [], [], [], [], []
    for i, x in enumerate(inputs):
        kind = type(x)
        if kind is float:
            precise.append(np.float64(x))
        elif kind is int and -2 ** 63 <= x < 2 ** 63:
            precise.append(np.int64(x))
        elif kind is np.float64 or kind is np.int64:
            # (``1 / h**2`` of a grid spacing ``h = x[1] - x[0]``: next to float64
            # values numpy's float64 and int64 scalars give float64, as Python's do)
            precise.append(x)
        elif kind is np.ndarray:
            if x.dtype is not _FLOAT64 or (shape is not None and x.shape != shape):
                return None
            shape = x.shape
            constants.append(x)
            precise.append(x)
        elif isinstance(x, value):
            x._owns = False  # (its array is kept: an input of the result or a partial)
            array = x._raw  # (a Deferred one in sparsity mode: kept so)
            if (type(array) not in _ARRAYS or array.dtype is not _FLOAT64
                    or not array.ndim or (shape is not None and array.shape != shape)
                    or partials[i] is None):
                return None
            shape = array.shape
            J = x._jacobian
            if seed is None:
                seed = J.seed
            elif J.seed is not seed:
                return None  # (the general path names the mistake)
            jacobians.append(J)
            forwards.append((i, x))
            precise.append(array)
            x = array
        else:
            return None
        values.append(x)
    if not forwards or len(inputs) != ufunc.nin:
        return None
    if seed.pattern_only:
        if None not in partials:  # (ldexp's integer exponent: numpy checks it now)
            # sparsity mode: the value when it is read (float64, as below), from
            # the caller's arrays as they are now; the pattern is the union of
            # the operands' (of one shape: no broadcast)
            if constants:
                values = [v.copy() if any(v is c for c in constants) else v
                          for v in values]
            union = jacobians[0]
            for J in jacobians[1:]:
                if J is not union:
                    union = jac.add(jacobians)
                    break
            # (a new array of one dimension is C-contiguous, whatever its operands)
            return make(Deferred(ufunc, values, shape, _FLOAT64,
                                 len(shape) < 2 or in_c_order(values)), union)
        values = [compute(v) for v in values]  # (only sparsity mode defers values)
    out = ufunc(*values)
    if out.dtype is not _FLOAT64:  # (no rule of a float64 ufunc gives another dtype)
        return None
    return forwards, precise, out, constants


def _at_precision(values, dtype, partials=None):
    """Inputs as arrays for the derivative rules, in the precision of the result.

    Python numbers and lower-precision inexact arrays are cast to ``dtype`` so
    that partial derivatives are as accurate as the value (a Python float next
    to a longdouble array, float32 inputs of float_power).  Integer and bool
    arrays are cast to an inexact ``dtype`` too, as numpy's loop casts them
    (``x * x`` of a uint8 array would wrap around, ``-b`` of a bool array is
    an error, ``log1p`` of a bool is float16), in at least double precision,
    except an integer argument of the rule (``partials[i] is None``: the
    exponent of ``ldexp``).
    """
    if all(type(v) is np.ndarray and v.dtype == dtype for v in values):
        return values  # (the common case: nothing to cast)
    inexact = dtype.kind in "fc"
    cast = []
    for i, v in enumerate(values):
        if isinstance(v, (float, complex)) and inexact:
            # (a numpy scalar, not a 0-d array: CuPy takes only the former beside
            # its arrays)
            v = np.result_type(dtype, type(v)).type(v)
        elif (isinstance(v, (np.ndarray, np.generic)) or _backend.of(v) is not _backend.CPU) \
                and inexact and v.dtype.kind in "fc" \
                and v.dtype != dtype and np.can_cast(v.dtype, dtype, "safe"):
            v = v.astype(dtype)
        else:
            v = _backend.asarray(v)
            if inexact and v.dtype.kind in "biu" and not (
                    partials is not None and partials[i] is None):
                # (at least double: an integer is exact there, also next to float16)
                v = v.astype(np.result_type(dtype, np.float64))
            v = number(v)       # (a 0-d array as a number, as above)
        cast.append(v)
    return cast


def real_part(J):
    """Jacobian of the real part of a complex value: for a real seed, the real
    part of ``J``; for a complex seed, ``J`` itself (the caller has checked that
    the values lie on the real axis, where the real part is the identity)."""
    if J.seed.complex:
        return J
    return jac.add([jac.scale(J, 0.5), jac.scale(jac.conj(J), 0.5)])


def imaginary_part(J):
    """Jacobian of the imaginary part of a complex value, as :func:`real_part`
    (zero for a complex seed: the imaginary part is constant on the real axis)."""
    if J.seed.complex:
        return jac.zero(J.seed, J.n_rows)
    return real_part(jac.scale(J, -1j))


def _non_holomorphic(ufunc, name, x, out):
    """``ufunc(x)`` of complex values ``x`` for a ufunc of ``NON_HOLOMORPHIC``.

    For a real seed, the derivative of the real and imaginary parts of the
    result (through the conjugate of ``J``); for a complex seed, on the real
    axis, the derivative of the real function's analytic continuation there
    (``REAL_AXIS``); off it there is none, and the call is refused.
    """
    J = x._jacobian
    seed = J.seed
    if seed.complex:
        check_real_axis(name, [x])
        factor = rules.REAL_AXIS[ufunc]
        if not callable(factor):
            return make(out, J if factor == 1 else jac.zero(seed, out.size))
        if seed.pattern_only:
            return make(out, J)
        return make(out, jac.scale(J, np.broadcast_to(factor(x._value), out.shape).ravel()))
    if ufunc is np.conjugate:
        return make(out, jac.conj(J))
    if seed.pattern_only:
        return make(out, J)
    z = x._value
    with np.errstate(all="ignore"):
        if ufunc is np.absolute:
            # |z|' = Re(conj(z) / |z| * z')
            factor = np.where(out == 0, 0, np.conj(z) / np.where(out == 0, 1, out))
            return make(out, real_part(jac.scale(J, factor.ravel())))
        # sign(z) = z / |z|: sign' = (z' - sign(z) Re(conj(sign(z)) z')) / |z|, and
        # 0 at z = 0, where sign is discontinuous (as the real rule gives there)
        magnitude = np.abs(z)
        inverse = np.where(magnitude == 0, 0, 1 / np.where(magnitude == 0, 1, magnitude))
        along = real_part(jac.scale(J, np.conj(out).ravel()))
        return make(out, jac.add([jac.scale(J, inverse.ravel()),
                                  jac.scale(along, (-out * inverse).ravel())]))


def _sparse_times(inputs):
    """``A * x`` with a scipy sparse ``A``: a matrix product for the matrix classes."""
    a, b = inputs
    matrix = a if scipy.sparse.issparse(a) else b
    if not isinstance(matrix, scipy.sparse.spmatrix):
        raise unsupported("numpy.multiply", "elementwise product of a scipy sparse array "
                          "and a forward value; use A @ x for a matrix product")
    return np.matmul(a, b)


def _scatter_add(target, indices, increment):
    """``np.add.at(target, indices, increment)`` on a forward target (a view's
    root takes the sum, as numpy's)."""
    increment = coerce(increment)  # (a list holding forward values)
    root, steps, positions = target._target()
    # (into ``z.imag``: numpy adds to the imaginary parts, so the root's rows
    # take ``1j`` times the increment's; into ``z.real`` the increment's)
    unit = 1j if _value.imaginary_part in (getattr(target, "_parts", None) or ()) else None
    indices = plain(indices)
    if type(indices) is list and _backend.of(root._array) is not _backend.CPU:
        indices = np.asarray(indices)  # (CuPy's add.at takes arrays, not lists)
    indices, row_indices, _ = _device_keys(indices, root._array)
    rows = positions[row_indices]
    J_inc = None
    if isinstance(increment, value):  # (checked before anything is written)
        source = broadcast_rows(increment.shape, rows.shape).ravel()
        jac.common_seed([root._jac, increment._jacobian])
        if increment.dtype.kind == "c" and target.dtype.kind != "c":
            check_real_axis(rules.rule_name(np.add) + ".at into a real target",
                            [increment])
        # (its rows before the write: ``increment`` may be a view of the root)
        J_inc = jac.take_rows(increment._jacobian, source)
    increment_array = nvalue(increment)  # (before the copy: ``increment`` may be ``target``)
    if not root._owns:  # copy on write, as in value.__setitem__
        root._array = root._array.copy(order="K")
        root._owns = True
    np.add.at(_replay(steps, root._array), indices, increment_array)
    written(root)
    kind = target.dtype.kind
    if J_inc is None or kind not in "fc":
        # (a constant increment, or an integer target: piecewise constant, as
        # astype(int))
        return
    if kind == "f" and increment.dtype.kind == "c" and not J_inc.seed.pattern_only:
        J_inc = real_part(J_inc)  # (numpy adds the real part)
    if unit is not None:
        J_inc = jac.scale(J_inc, unit)
    scatter = jac.CSR((root.size, len(source)), *_scatter_pattern(rows.ravel(), root.size))
    root._jac = jac.add([root._jacobian, jac.left_multiply(scatter, J_inc)])


def _scatter_combine(ufunc, target, indices, operand):
    """``np.multiply.at``, ``np.maximum.at`` or ``np.minimum.at`` on a forward
    target: numpy's value, and the Jacobian of the elements combined in
    numpy's order (the indexed positions in C order), repeated indices exact.

    ``multiply``: ``d(t_p prod_k b_k) = prod_k b_k dt_p + t_p sum_k
    (prod_{l != k} b_l) db_k``, the products taken without division.
    ``maximum``/``minimum``: the row of the element numpy keeps (a tie or a
    NaN goes to the earlier one, the target first, as ``np.maximum(t, b)``),
    the union pattern of all candidates kept as structural zeros.
    """
    name = rules.rule_name(ufunc) + ".at"
    operand = coerce(operand)
    tv, bv = nvalue(target), nvalue(operand)
    if np.iscomplexobj(bv) and not np.iscomplexobj(tv):
        raise unsupported(name, "complex operands into a real target")
    if ufunc is not np.multiply and np.iscomplexobj(tv):
        raise unsupported(name, "complex values (ordered lexicographically by numpy)")
    indices = plain(indices)
    if _backend.of(tv) is not _backend.CPU:
        raise unsupported(name, "a target on a device")
    new = tv.copy()
    ufunc.at(new, indices, bv)  # (numpy's value, and its errors, before any write)
    positions = np.arange(tv.size).reshape(tv.shape)[indices]
    pos = positions.ravel()
    b = np.ravel(np.broadcast_to(operand, positions.shape))
    b_values = np.ravel(np.broadcast_to(bv, positions.shape))
    flat = np.ravel(target)
    if ufunc is np.multiply:
        others, totals = _grouped_products(pos, b_values, tv.size)
        combined = flat * totals
        if isinstance(operand, value):
            spread = np.zeros(tv.size, dtype=new.dtype, like=flat)
            np.add.at(spread, pos, (tv.ravel()[pos] * others) * b)
            combined = combined + spread
        J = combined._jacobian
    else:
        def hit(candidates, kept):
            return (candidates == kept) | (np.isnan(candidates) & np.isnan(kept))
        kept = new.ravel()
        target_wins = hit(tv.ravel(), kept)
        occurrences = np.flatnonzero(hit(b_values, kept[pos]) & ~target_wins[pos])
        _, first = np.unique(pos[occurrences], return_index=True)
        winners = occurrences[first]
        source = np.arange(tv.size)
        source[pos[winners]] = tv.size + winners
        chosen = np.concatenate([flat, b])[source]
        union = flat * 1
        if isinstance(operand, value):
            np.add.at(union, pos, b)
        J = jac.add([chosen._jacobian, jac.structural_zeros(union._jacobian)])
    target[...] = make(new, J)


def _grouped_products(keys, values, n_keys):
    """For every element of ``values``, the product of the other elements with
    the same key, and for every key in ``range(n_keys)`` the product of all
    (1 for none); no division, ``log2`` of the largest group steps."""
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    n = len(k)
    index = np.arange(n)
    starts = np.r_[True, k[1:] != k[:-1]] if n else np.zeros(0, dtype=bool)
    first = np.maximum.accumulate(np.where(starts, index, 0)) if n else index
    ends = np.r_[k[1:] != k[:-1], True] if n else starts
    last = np.minimum.accumulate(np.where(ends, index, n - 1)[::-1])[::-1] if n else index

    def scan(items, reach, direction):
        """Inclusive products within the groups, by doubling steps."""
        step = 1
        while step < n:
            other = index - direction * step
            inside = (other >= reach) if direction > 0 else (other <= reach)
            items = items * np.where(inside, items[np.clip(other, 0, n - 1)], 1)
            step *= 2
        return items

    before, after = scan(v, first, 1), scan(v, last, -1)
    ones = np.ones_like(v)
    exclusive = (np.where(index > first, before[np.maximum(index - 1, 0)], ones)
                 * np.where(index < last, after[np.minimum(index + 1, n - 1)], ones))
    others = np.empty_like(exclusive)
    others[order] = exclusive
    totals = np.ones(n_keys, dtype=np.result_type(values, 1.0))
    totals[k[ends]] = before[ends]
    return others, totals


def _scatter_pattern(rows, n_rows):
    from ._fast import kernels
    cols = np.arange(len(rows), dtype=np.int64)
    return kernels.coo_to_csr(n_rows, len(rows), rows, cols, None)
