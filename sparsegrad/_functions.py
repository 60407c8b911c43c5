"""The ``__array_function__`` table: numpy functions on forward values.

Values always come from numpy's own function applied to the plain values, so
they equal numpy's exactly; only the Jacobian is built here, by one of four
mechanisms:

* **data movement** (reshape, transpose, concatenate, pad, take, ...): the same
  function is applied to the array of Jacobian row numbers, and the Jacobian
  rows are gathered accordingly (:func:`_move`);
* **linear maps** written as an einsum (sum, mean, trace, dot, matmul, inner,
  outer, tensordot, einsum, cumsum): the sparse coefficient matrix of the map is
  built from the einsum subscripts and multiplies the Jacobian
  (:func:`_einsum_jacobian`);
* **selection** (where, max, min, clip): rows of the selected operand, with the
  union pattern of all candidates kept as structural zeros;
* **composition** of other forward operations (diff, gradient, norm, prod).

Functions outside the table raise ``TypeError`` naming the function.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.arange(4.0))
>>> np.sum(x.reshape(2, 2), axis=1).dvalue.toarray()
array([[1., 1., 0., 0.],
       [0., 0., 1., 1.]])
"""
import math
import numbers
import string

import numpy as np
import scipy.sparse

from . import _backend, _structure
from . import _jacobian as jac
from ._errors import unsupported
from ._indexing import row_index
from ._deferred import Deferred, compute, c_contiguous, in_c_order
from ._value import (value, nvalue, number, plain, coerce, make, broadcast_jacobian,
                     cast_input, check_real_axis, view_of, _View, zero_d_array, real_part,
                     imaginary_part, no_part)

INDEX_DTYPE = np.int64

__all__ = ["FUNCTIONS", "PASS_THROUGH", "CREATION", "REFUSED", "implements"]

FUNCTIONS = {}

#: why some numpy functions without a rule are reached, and what to use instead
REFUSED = {
    # scipy.sparse's constructors (diags, csr_matrix((data, ...)), bmat of values)
    # ask it of their data: they hold numbers only
    np.common_type: "scipy.sparse's constructors hold numbers, not forward values; "
                    "sparsegrad.sparse.diags(x) makes the diagonal matrix of a forward "
                    "value, and A @ x with a constant sparse A multiplies one",
}


def implements(*functions):
    """Register the decorated function as the forward version of ``functions``."""
    def register(implementation):
        for function in functions:
            if function is not None:  # absent from older numpy releases
                FUNCTIONS[function] = implementation
        return implementation
    return register


def _forwards(operands):
    return [o for o in operands if isinstance(o, value)]


def _refuse(name, **arguments):
    """Raise for arguments that are given (not None / not numpy's no-value marker)."""
    for key, given in arguments.items():
        if given is not None and given is not np._NoValue:
            raise unsupported("numpy." + name, "the %s= argument" % key)


# ---- values only ---------------------------------------------------------------
PASS_THROUGH = [
    np.shape, np.ndim, np.size, np.argmax, np.argmin, np.argsort, np.argpartition,
    np.nonzero, np.flatnonzero, np.argwhere, np.count_nonzero, np.isclose, np.allclose,
    np.array_equal, np.array_equiv, np.iscomplexobj, np.isrealobj, np.iscomplex,
    np.isreal, np.searchsorted, np.result_type, np.can_cast, np.any, np.all,
    np.shares_memory, np.may_share_memory, np.array_repr, np.array_str, np.sort_complex,
    np.digitize, np.zeros_like, np.ones_like, np.empty_like, np.full_like, np.isin,
    np.diag_indices_from, np.tril_indices_from, np.triu_indices_from,
]
PASS_THROUGH.remove(np.sort_complex)  # sorting a forward value is not a value query


# value queries that take an ``out=`` array (and its position after ``a``, ``axis``)
_OUT_POSITION = {np.argmax: 2, np.argmin: 2, np.any: 2, np.all: 2}


def _values_only(function):
    out_position = _OUT_POSITION.get(function)

    def plain(*args, **kwargs):
        if out_position is not None:
            out = args[out_position] if len(args) > out_position else kwargs.get("out")
            if isinstance(out, value):
                # (writing into its value would leave its Jacobian as it was)
                raise unsupported("numpy." + function.__name__, "out= a forward value "
                                  "(the result is a plain array of indices or truth "
                                  "values: assign it with F[...] = result instead)")
        args = [nvalue(a) if isinstance(a, value) else a for a in args]
        kwargs = {k: nvalue(v) if isinstance(v, value) else v for k, v in kwargs.items()}
        return function(*args, **kwargs)
    plain.__name__ = function.__name__
    return plain


for _function in PASS_THROUGH:
    FUNCTIONS[_function] = _values_only(_function)
_full_like_values = FUNCTIONS[np.full_like]


@implements(np.full_like)
def _full_like(a, fill_value, *args, **kwargs):
    """``np.full_like`` is a value query unless the fill value is a forward value:
    then its Jacobian is broadcast (dropping it would be silently wrong)."""
    fill = coerce(fill_value)
    if not isinstance(fill, value):
        return _full_like_values(a, fill_value, *args, **kwargs)
    # numpy's checks of the arguments, and the shape, dtype and layout of its result
    template = np.empty_like(nvalue(a), *args, **kwargs)
    fortran = template.ndim > 1 and not template.flags.c_contiguous  # (order "K", "A", "F")
    return _filled(fill, template.shape, template.dtype, "F" if fortran else "C")


def _filled(fill, shape, dtype, order):
    """A fresh forward value of ``shape``, ``dtype`` and memory ``order``, ``fill``
    broadcast into it.  (The layout matters: ``order="K"`` or ``"A"`` in a later
    reshape follows it, and ``astype`` of the broadcast view alone would keep the
    view's strides, Fortran-like for a column.)"""
    result = np.copy(np.broadcast_to(fill, shape), order=order)
    if dtype is not None and result.dtype != dtype:
        result = result.astype(dtype)  # (keeps the layout of a contiguous array)
    result._owns = True  # (a fresh array: writes may go into it)
    return result


# ---- creation with like= ---------------------------------------------------------
CREATION = (np.zeros, np.ones, np.full, np.empty)


def create(function, like, args, kwargs):
    """``np.zeros(shape, like=x)`` and friends: an assignable forward value, zero Jacobian.

    ``np.empty`` gives zeros: an uninitialised Jacobian cannot be represented.
    """
    if function is np.empty:
        function = np.zeros
    if function is np.full:
        fill = coerce(kwargs.get("fill_value", args[1] if len(args) > 1 else None))
        if isinstance(fill, value):  # a forward fill: its Jacobian, broadcast
            return _full_of_forward(args, kwargs, fill)
    xp = like._jacobian.seed.backend.xp
    if xp is not np:  # created on the seed's device, by its namespace's function
        # (numpy passes device=None on, which CuPy's creation functions do not take)
        kwargs = {k: v for k, v in kwargs.items()
                  if k != "like" and not (k == "device" and v is None)}
        function = getattr(xp, function.__name__)
    array = function(*args, **kwargs)
    if not np.issubdtype(array.dtype, np.inexact):
        array = array.astype(np.result_type(array.dtype, like.dtype, np.float64))
    result = make(array, jac.zero(like._jacobian.seed, array.size))
    if not array.ndim:
        result = zero_d_array(result._raw, result._jac)
    result._owns = True
    return result


def _full_of_forward(args, kwargs, fill):
    """``np.full(shape, fill)`` for a forward ``fill``: its value and Jacobian broadcast."""
    shape = kwargs.get("shape", args[0] if args else None)
    extra = {k for k, v in kwargs.items()
             if k not in ("shape", "fill_value", "dtype", "like", "order") and v is not None}
    if extra or len(args) > 3 or kwargs.get("order", "C") != "C":
        raise unsupported("numpy.full", "a forward fill value with arguments other than "
                          "shape, fill_value and dtype")
    dtype = kwargs.get("dtype", args[2] if len(args) > 2 else None)
    return _filled(fill, shape, None if dtype is None else np.dtype(dtype), "C")


def _beside(indices, array):
    """User index arrays on the device of ``array`` (host index lists moved there)."""
    return _backend.to_device(indices, _backend.of(array))


def _host(indices):
    """User index arrays as the host row bookkeeping needs them."""
    return _backend.to_host(indices) if hasattr(indices, "shape") else indices


# ---- data movement -----------------------------------------------------------------
_DEFERRABLE = (np.ndarray, Deferred)


def _holds_arrays(args, kwargs):
    """Whether arguments of a call hold an array or a list (the caller may change it
    before a deferred value is computed: that call is computed now)."""
    def mutable(v):
        if isinstance(v, tuple):
            return any(mutable(item) for item in v)
        return isinstance(v, (np.ndarray, list, dict, value))
    return any(mutable(v) for v in list(args) + list(kwargs.values()))


def _move(apply, operands, fills=False, defer=False, key=None):
    """Apply a data-movement function to values and to Jacobian row numbers.

    ``apply(arrays, rows)`` is called once with the values (``rows=False``) and
    once with integer arrays holding ``1 + row number`` for forward operands and
    ``0`` for constants (``rows=True``); zeros in the second result (padding,
    constants) become zero Jacobian rows.  ``fills``: ``apply`` fills whatever
    it adds with ``-1`` itself when ``rows`` is true (never with a zero of its
    own making), so the row numbers go in as they are and constants as ``-1``:
    two passes over the rows fewer.  In sparsity mode a float64 result is
    deferred when the caller says ``defer`` (its ``apply`` keeps the dtype of
    float64 values and holds none of the caller's arrays, which could change
    before the value is read), computed when read from the values as they are
    now.  ``key``, when given, is a hashable description of everything besides
    the operands' shapes that decides the row numbers (the function and its
    arguments): they are then kept in the seed's structure for later
    evaluations (:mod:`sparsegrad._structure`), and so are the selections
    gathered by them.
    """
    operands = [coerce(o) for o in operands]
    forwards = _forwards(operands)
    deferred = (defer and forwards and forwards[0]._jacobian.seed.pattern_only
                and all(type(o._raw if isinstance(o, value) else o) in _DEFERRABLE
                        and o.dtype == np.float64 for o in operands))
    if deferred:
        for x in forwards:
            x._owns = False  # (its array is kept)
        values = [o._raw if isinstance(o, value) else o.copy() for o in operands]
        result = None
    else:
        values = [nvalue(o) for o in operands]
        result = apply(values, False)
    for x in forwards:
        x._owns = False  # the result may be a view of its value
    jacobians = [x._jacobian for x in forwards]
    moves = None
    if key is not None and forwards:
        # (the row numbers depend on the function and its plain arguments, the
        # caller's ``key`` (ints, strings, None and tuples or lists of them,
        # never an array, which could be written in place), on whether each
        # operand is a forward value or a constant, on its shape, and on
        # ``fills``: all in the key.  Not on values or dtypes, and the seed's
        # size, device and thread are the structure's)
        moves = jacobians[0].seed.structure.moves
        key = ("move", key, fills, tuple((isinstance(o, value), np.shape(v))
                                         for o, v in zip(operands, values)))
        known = _structure.recall(moves, key)
        _structure.looked_up(known is not None)
    if moves is None or known is None:
        rows = _move_rows(apply, operands, values, fills)
        shape = None if isinstance(rows, list) else rows.shape
        rows = ([_final_rows(r, fills) for r in rows] if isinstance(rows, list)
                else _final_rows(rows, fills))
        if moves is not None:
            _structure.store(moves, key, (rows, shape), jac.MAX_MOVES)
            jacobians[0].seed.structure.keep(*(rows if isinstance(rows, list) else [rows]))
    else:
        rows, shape = known
    if deferred:
        if isinstance(rows, list):  # (several results: computed now)
            result = apply([compute(v) for v in values], False)
        else:
            result = Deferred(lambda *arrays: apply(list(arrays), False), values, shape,
                              np.float64, contiguous=in_c_order(values))
    stacked = jac.vstack(jacobians)

    def pair(v, r, k=0):
        return make(v, jac.take_rows(stacked, r, None if moves is None else key + (k,)))

    if isinstance(result, (list, tuple)):
        return [pair(v, r, k) for k, (v, r) in enumerate(zip(result, rows))]
    return pair(result, rows)


def _move_rows(apply, operands, values, fills):
    """The row numbers of a movement (see :func:`_move`): an array, or a list of them."""
    offset = 0 if fills else 1
    numbers_ = []
    for operand, v in zip(operands, values):
        if isinstance(operand, value):
            numbers_.append(row_index(operand.shape) + offset if offset
                            else row_index(operand.shape))
            offset += operand.size
        else:
            numbers_.append(np.full(np.shape(v), -1 if fills else 0, dtype=INDEX_DTYPE))
    rows = apply(numbers_, True)
    return list(rows) if isinstance(rows, (list, tuple)) else np.asarray(rows)


def _final_rows(rows, fills):
    """Row numbers of a movement's result as ``take_rows`` takes them (``-1``: none)."""
    rows = np.asarray(rows).ravel()
    # (ours, made read-only: a selection keeps these rows without a copy)
    return jac._readonly(rows if fills else rows - 1)


def _movement_key(function, args, kwargs):
    """A hashable key for the row numbers of ``function(a, *args, **kwargs)``, or None.

    Only arguments made of Python ints, strings, ``None`` and lists or tuples
    of them qualify (an array argument could change before the next call);
    numpy integers count as the ints they equal, bools keep their type.

    >>> _movement_key(np.roll, (1,), {"axis": np.int64(0)})[1:]
    (1, ('axis', 0))
    >>> _movement_key(np.roll, (np.array([1]),), {}) is None
    True
    """
    def plain(v):
        if type(v) in (int, str) or v is None:
            return v
        if isinstance(v, np.integer):
            return int(v)
        if type(v) is bool:
            return ("bool", v)
        if type(v) in (list, tuple):
            parts = tuple(plain(part) for part in v)
            return _UNKEYABLE if _UNKEYABLE in parts else (type(v).__name__,) + parts
        return _UNKEYABLE
    parts = tuple(plain(v) for v in args) + tuple((k, plain(v)) for k, v in sorted(kwargs.items()))
    if any(p is _UNKEYABLE or (type(p) is tuple and p[1:] == (_UNKEYABLE,)) for p in parts):
        return None
    return (function,) + parts


_UNKEYABLE = object()


_SPLITS = (np.split, np.array_split, np.hsplit, np.vsplit, np.dsplit)


def _single(function):
    """Register ``function(a, ...)`` moving the data of its first argument."""
    @implements(function)
    def moved(a, *args, **kwargs):
        # a forward value among the other arguments (split points, indices to
        # delete: dispatched on by numpy) goes to numpy as its value, as an index
        # would; passed on as it is it would come back here, without end
        args = [nvalue(v) if isinstance(v, value) else v for v in args]
        kwargs = {k: nvalue(v) if isinstance(v, value) else v for k, v in kwargs.items()}
        # (the row numbers live on the host: device index arguments go there for them)
        host_args = [v if _backend.of(v) is _backend.CPU else _backend.to_host(v)
                     for v in args]
        # (and for the values of a split: CuPy splits only at positions in a list)
        value_args = args if function not in _SPLITS else [
            v.tolist() if isinstance(v, np.ndarray) else v for v in host_args]
        result = _move(lambda arrays, rows: function(arrays[0], *(host_args if rows else
                                                                   value_args), **kwargs),
                       [a], key=_movement_key(function, args, kwargs))
        if not isinstance(a, value):
            return result
        if type(result) is list:  # (a split: numpy's pieces are views)
            return [_viewed(piece, a, _nth(function, value_args, kwargs, k),
                            _nth(function, host_args, kwargs, k))
                    for k, piece in enumerate(result)]
        return _viewed(result, a, _bound(function, value_args, kwargs),
                       _bound(function, host_args, kwargs))
    return moved


def _bound(function, args, kwargs):
    return lambda array: function(array, *args, **kwargs)


def _nth(function, args, kwargs, k):
    return lambda array: function(array, *args, **kwargs)[k]


def _viewed(result, parent, step, rows_step=False):
    """``result`` of a numpy function of forward value ``parent``, made by ``step``
    from its value: a view of ``parent`` where numpy's result is a view of its
    value (writes go through, as numpy's would), else ``result`` itself."""
    if type(result._raw) is Deferred or not _backend.shares_memory(result._raw,
                                                                     parent._raw):
        return result
    return view_of(parent, result._raw, result._jac, step, rows_step)


def _reshaping(function, order_position):
    """Register ``function(a, ...)`` that only changes the shape of ``a``.

    In C order (the default) the elements keep their order, so the result
    shares the Jacobian without gathering any row; other orders move data.
    ``order_position``: where ``order`` may be passed positionally after ``a``.
    """
    @implements(function)
    def reshaped(a, *args, **kwargs):
        order = kwargs.get("order", "C")
        positional = order_position is not None and len(args) > order_position
        if positional:
            order = args[order_position]
        if order in ("A", "K") and isinstance(a, value):
            # the value's memory layout decides; the row numbers are C-ordered,
            # so the layout is resolved to "C" or "F" for both
            order = _layout_order(a._array, order, function.__name__)
            if positional:
                args = args[:order_position] + (order,) + args[order_position + 1:]
            else:
                kwargs = dict(kwargs, order=order)
        if not isinstance(a, value):
            return function(a, *args, **kwargs)
        if order != "C":
            return _viewed(_move(lambda arrays, rows: function(arrays[0], *args, **kwargs),
                                 [a], key=_movement_key(function, args, kwargs)),
                           a, _bound(function, args, kwargs))
        a._owns = False  # the result may be a view of its value
        raw = a._raw
        if (type(raw) is Deferred and not isinstance(a, _View) and c_contiguous(raw)
                and not _holds_arrays(args, kwargs) and "copy" not in kwargs):
            # (sparsity mode: deferred too, in numpy's shape; a view, as numpy's
            # of a C-contiguous array in C order always is, and C-contiguous)
            shape = _reshaped_shape(function, raw.shape, args, kwargs)
            if shape is None:  # (numpy's shape, or its error, from an array of that layout)
                shape = function(np.empty(raw.shape, raw.dtype), *args, **kwargs).shape
            return view_of(a, Deferred(lambda array: function(array, *args, **kwargs), (raw,),
                                       shape, raw.dtype, True),
                           a._jacobian, _bound(function, args, kwargs))
        result = function(a._value, *args, **kwargs)
        if type(raw) is np.ndarray and raw.flags.c_contiguous and "copy" not in kwargs:
            # (numpy's view, always, of a C-contiguous array in C order: no need
            # to ask whether it shares memory)
            return view_of(a, result, a._jacobian, _bound(function, args, kwargs))
        return _viewed(make(result, a._jacobian), a, _bound(function, args, kwargs))
    return reshaped


def _reshaped_shape(function, shape, args, kwargs):
    """The shape of ``function(array, *args, **kwargs)``, C order, for an array
    of ``shape``, as numpy works it out: for ``ravel`` and for ``reshape`` to
    Python ints (one of them -1 at most: the size over the others'); None for
    any other call, whose shape (or error) numpy's own call then gives.

    >>> _reshaped_shape(np.reshape, (4, 3), ((2, -1),), {"order": "C"})
    (2, 6)
    >>> _reshaped_shape(np.reshape, (4, 3), (5,), {}) is None
    True
    """
    if kwargs and (len(kwargs) > 1 or "order" not in kwargs):
        return None
    if function is np.ravel:
        return (math.prod(shape),) if len(args) + len(kwargs) <= 1 else None
    if function is not np.reshape or not 1 <= len(args) <= 2 - len(kwargs):
        return None
    new = args[0]
    if type(new) is int:
        new = (new,)
    elif type(new) is not tuple or not all(type(n) is int and n >= -1 for n in new):
        return None
    if new.count(-1) > 1:
        return None
    size = math.prod(shape)
    known = -math.prod(new) if -1 in new else math.prod(new)
    if -1 in new:
        if known == 0 or size % known:
            return None
        return tuple(size // known if n == -1 else n for n in new)
    return new if known == size else None


def _layout_order(array, order, name):
    """``order="A"`` or ``"K"`` of ``array`` as the equivalent ``"C"`` or ``"F"``."""
    if array.ndim <= 1 or array.flags.c_contiguous:
        return "C"
    if array.flags.f_contiguous:
        return "F"
    if order == "A":
        return "C"  # (numpy: Fortran order only for Fortran-contiguous arrays)
    raise unsupported("numpy." + name, "order='K' of a value that is neither C- nor "
                      "Fortran-contiguous (a strided view); use order='C' or 'F', or copy "
                      "it first")


for _function, _position in ((np.reshape, 1), (np.ravel, 0), (np.squeeze, None),
                             (np.expand_dims, None)):
    _reshaping(_function, _position)

for _function in (np.transpose, np.moveaxis, np.swapaxes,
                  np.broadcast_to, np.flip, np.fliplr,
                  np.flipud, np.roll, np.repeat, np.tile, np.diagonal, np.rot90,
                  np.split, np.array_split, np.hsplit, np.vsplit, np.dsplit, np.delete,
                  np.copy, np.matrix_transpose, np.permute_dims):
    _single(_function)


@implements(np.diag)
def _diag(v, k=0):
    # off-diagonal zeros of a 2-d result become row number 0, i.e. zero rows
    result = _move(lambda arrays, rows: np.diag(arrays[0], k), [v])
    # (of a 2-d array numpy gives its read-only diagonal, a view)
    return _viewed(result, v, lambda array: np.diag(array, k)) if isinstance(v, value) \
        else result


@implements(np.take)
def _take(a, indices, axis=None, out=None, mode="raise"):
    _refuse("take", out=out)
    indices = nvalue(indices)
    # the row numbers are taken on the host with mode= as given, so numpy raises for
    # an index out of bounds there; the values without mode="raise" (CuPy's take
    # has no mode=, and wraps)
    values_mode = {} if mode == "raise" else {"mode": mode}
    return _move(lambda arrays, rows: np.take(
        arrays[0], _host(indices) if rows else _beside(indices, arrays[0]), axis=axis,
        **({"mode": mode} if rows else values_mode)), [a])


@implements(np.take_along_axis)
def _take_along_axis(arr, indices, axis=-1):
    indices = nvalue(indices)
    return _move(lambda arrays, rows: np.take_along_axis(
        arrays[0], _host(indices) if rows else _beside(indices, arrays[0]), axis), [arr])


def _register_atleast():
    for function in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
        def atleast(*arrays, _function=function):
            results = [_viewed(_move(lambda arrs, rows: _function(arrs[0]), [a]), a,
                               _function)
                       if isinstance(a, value) else _function(a) for a in arrays]
            return results[0] if len(results) == 1 else tuple(results)
        FUNCTIONS[function] = atleast


_register_atleast()

_PAD_MODES = ("constant", "edge", "wrap", "reflect", "symmetric")


@implements(np.pad)
def _pad(array, pad_width, mode="constant", **kwargs):
    from ._composite import PAD_MODES, pad_composed  # (it imports this module)
    if isinstance(mode, str) and mode in PAD_MODES:  # (padding computed from the values)
        return pad_composed(array, pad_width, mode, kwargs)
    if mode not in _PAD_MODES:
        raise unsupported("numpy.pad", "mode=%r (supported: %s)"
                          % (mode, ", ".join(_PAD_MODES + PAD_MODES)))
    if kwargs.get("reflect_type", "even") != "even":  # 2 a[edge] - a[i]: not a movement
        raise unsupported("numpy.pad", "reflect_type=%r (supported: 'even')"
                          % kwargs["reflect_type"])
    # (plain Python numbers: numpy and CuPy both take them; a host array would not
    # mix with device values)
    pad_width = _backend.to_host(nvalue(pad_width)).tolist()

    def apply(arrays, rows):
        options = dict(kwargs)
        if rows and mode == "constant":
            options["constant_values"] = -1  # padding is constant: zero rows
        return np.pad(arrays[0], pad_width, mode=mode, **options)
    # (options such as constant_values are checked by numpy's call: made now)
    return _move(apply, [array], fills=True, defer=not kwargs,
                 key=_movement_key(np.pad, (pad_width, mode), kwargs))


def _device_among(arrays):
    """The backend of the first device array among ``arrays``, or None."""
    for array in arrays:
        backend = _backend.of(array)
        if backend is not _backend.CPU:
            return backend
    return None


def _on_one_device(arrays):
    """``arrays`` all where the first device array among them lives: numbers and
    host constants joined to device values go there (CuPy joins only its arrays)."""
    backend = _device_among(arrays)
    return arrays if backend is None else [_backend.to_device(a, backend) for a in arrays]


def _sequence_function(function):
    @implements(function)
    def joined(arrays, *args, **kwargs):
        _refuse(function.__name__, out=kwargs.pop("out", None))
        # dtype= and casting= apply to the values only (the row numbers are integers);
        # either is given to numpy's call on the values as given, even alone
        # (casting="no" refuses mixed dtypes; column_stack takes neither)
        options = {key: kwargs.pop(key) for key in ("dtype", "casting") if key in kwargs}
        arrays = list(arrays)
        if not options:
            joined_in_order = _joined_in_order(function, arrays, args, kwargs)
            if joined_in_order is not None:
                return joined_in_order

        if _real_dtype(options.get("dtype")):
            values = [nvalue(coerce(a)) for a in arrays]
            if any(np.iscomplexobj(v) for v in values):
                # (numpy's call on the values as given checks casting= and warns;
                # then the real parts are joined, as numpy joins them)
                function(_on_one_device(values), *args, **options, **kwargs)
                arrays = _real_parts(arrays, "numpy." + function.__name__)

        def apply(arrs, rows):
            if rows:
                return function(arrs, *args, **kwargs)
            on_device = _on_one_device(arrs)
            if function is np.column_stack and on_device is not arrs:
                # (CuPy stacks no 0-d arrays; numpy makes both a (1, 1) column)
                on_device = [a.reshape(1) if a.ndim == 0 else a for a in on_device]
            return function(on_device, *args, **options, **kwargs)
        # (dtype= may change the values' dtype, and numpy checks casting=: with
        # either, the values are computed now)
        return _move(apply, arrays, defer=not options and not _holds_arrays(args, kwargs),
                     key=_movement_key(function, args, kwargs))
    return joined


def _joined_in_order(function, arrays, args, kwargs):
    """``np.concatenate`` of forward values along axis 0 (or flattened, ``axis=None``)
    and ``np.hstack`` of 1-d ones, or None for any other call.

    Their elements follow one another in C order, so the Jacobian is the
    operands' Jacobians stacked as they are: the general path's row numbers
    (an offset, a concatenation, a subtraction and a comparison with
    ``arange``, each as long as the result) would only find that out.  A
    call whose shapes numpy would refuse goes to the general path, which
    raises numpy's error.
    """
    if not arrays or not all(isinstance(x, value) for x in arrays):
        return None
    if function is np.concatenate and len(args) + len(kwargs) <= 1 and set(kwargs) <= {"axis"}:
        axis = args[0] if args else kwargs.get("axis", 0)
    elif function is np.hstack and not args and not kwargs and all(x.ndim == 1 for x in arrays):
        axis = 0
    else:
        return None
    shapes = [x.shape for x in arrays]
    if axis is None:
        shape = (sum(x.size for x in arrays),)
    elif (type(axis) is int and axis == 0
          and all(len(s) >= 1 and s[1:] == shapes[0][1:] for s in shapes)):
        shape = (sum(s[0] for s in shapes),) + shapes[0][1:]
    else:
        return None
    jacobian = jac.vstack([x._jacobian for x in arrays])
    for x in arrays:
        x._owns = False  # (its array is kept, or read by the deferred value)
    raws = [x._raw for x in arrays]
    if jacobian.seed.pattern_only and all(
            type(raw) in _DEFERRABLE and raw.dtype == np.float64 for raw in raws):
        return make(Deferred(lambda *parts: np.concatenate(parts, axis=axis), raws, shape,
                             np.float64, contiguous=in_c_order(raws)),
                    jacobian)
    return make(np.concatenate([x._value for x in arrays], axis=axis), jacobian)


for _function in (np.concatenate, np.stack, np.hstack, np.vstack, np.dstack,
                  np.column_stack):
    _sequence_function(_function)


@implements(np.append)
def _append(arr, values, axis=None):
    return _move(lambda arrays, rows: np.append(arrays[0], arrays[1], axis=axis),
                 [arr, values])


@implements(np.real)
def _real(val):
    if not isinstance(val, value):
        return np.real(val)
    if not np.iscomplexobj(val._value):
        return val  # (numpy: the array itself)
    check_real_axis("numpy.real", [val])
    return view_of(val, np.real(val._value), real_part(val._jacobian), np.real, None,
                   real_part)


@implements(np.imag)
def _imag(val):
    if not isinstance(val, value):
        return np.imag(val)
    # (of real values numpy gives read-only zeros: a write into them raises)
    part = imaginary_part if np.iscomplexobj(val._value) else no_part
    if part is imaginary_part:
        check_real_axis("numpy.imag", [val])
    return view_of(val, np.imag(val._value), part(val._jacobian), np.imag, None, part)


# ---- linear maps written as einsum ------------------------------------------------
def _einsum_jacobian(in_specs, out_spec, values, k, J):
    """Jacobian of ``einsum(in_specs -> out_spec, *values)`` through operand ``k``.

    The coefficient of input element ``e`` in output element ``o`` is the
    einsum of the other operands over the letters of operand ``k`` and of the
    output; its entries, placed at ``(o, e)``, form a sparse matrix ``L`` and
    the result is ``L @ J``.  When every other operand is constant, exact zeros
    of the coefficients are dropped (the pattern depends on constants only);
    otherwise all are kept (structural zeros).
    """
    x_spec = in_specs[k]
    x_shape = values[k].shape
    sizes = {}
    for spec, v in zip(in_specs, values):
        for letter, size in zip(spec, v.shape):
            if sizes.get(letter, 1) == 1:  # size-1 axes broadcast, size 0 does not
                sizes[letter] = size
    letters = list(dict.fromkeys(x_spec + out_spec))
    others = [(spec, v) for i, (spec, v) in enumerate(zip(in_specs, values)) if i != k]
    shared = [l for l in letters if any(l in spec for spec, _ in others)]
    if others:
        coefficient = np.einsum(",".join(s for s, _ in others) + "->" + "".join(shared),
                                *[v for _, v in others])
    else:
        coefficient = np.ones((), dtype=values[k].dtype)
    shared_sizes = dict(zip(shared, coefficient.shape))
    full_shape = [sizes[l] for l in letters]
    coefficient = np.broadcast_to(
        coefficient.reshape([shared_sizes.get(l, 1) for l in letters]), full_shape)

    def flat_index(spec, shape):
        index = np.zeros([1] * len(letters), dtype=INDEX_DTYPE)
        stride = 1
        for letter, size in zip(reversed(spec), reversed(shape)):
            if size > 1:
                axis = letters.index(letter)
                grid = np.arange(size, dtype=INDEX_DTYPE) * stride
                index = index + grid.reshape([-1 if a == axis else 1
                                              for a in range(len(letters))])
            stride *= size
        return np.broadcast_to(index, full_shape).ravel()

    out_shape = [sizes[l] for l in out_spec]
    rows = flat_index(out_spec, out_shape)
    cols = flat_index(x_spec, x_shape)
    data = coefficient.ravel()
    return rows, cols, data, int(np.prod(out_shape, dtype=np.int64))


def _linear(in_specs, out_spec, operands, result):
    """Forward value of an einsum-shaped multilinear function with value ``result``."""
    operands = [coerce(o) for o in operands]
    values = [nvalue(o) for o in operands]
    forwards = [i for i, o in enumerate(operands) if isinstance(o, value)]
    terms = []
    for k in forwards:
        J = operands[k]._jacobian

        def coefficients(k=k, J=J):
            rows, cols, data, n_out = _einsum_jacobian(in_specs, out_spec, values, k, J)
            # (the matrix is built where its coefficients are: on a device seed's
            # device, with the row and column numbers moved there)
            backend = J.seed.backend
            rows, cols, data = (_backend.to_device(a, backend) for a in (rows, cols, data))
            if len(forwards) == 1:  # (the other operands are constants)
                keep = data != 0
                rows, cols, data = rows[keep], cols[keep], data[keep]
            indptr, indices, entries = backend.kernels.coo_to_csr(
                n_out, values[k].size, rows, cols, data)
            return jac.CSR((n_out, values[k].size), indptr, indices, entries)

        if len(forwards) == 1:
            L = _constant_coefficients(J.seed, in_specs, out_spec, values, k, coefficients)
        else:
            L = coefficients()
        terms.append(jac.left_multiply(L, J))
    result = _backend.asarray(result)
    seed = jac.common_seed([operands[k]._jacobian for k in forwards])
    return make(result, jac.add(terms) if terms else jac.zero(seed, result.size))


_LETTERS = string.ascii_letters


def _parse_einsum(subscripts, ndims):
    """Explicit per-operand letter strings and output letters, ellipses expanded."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        inputs, output = subscripts.split("->")
    else:
        inputs, output = subscripts, None
    inputs = inputs.split(",")
    if len(inputs) != len(ndims):
        raise ValueError("einsum: %d operands for %d subscripts" % (len(ndims), len(inputs)))
    used = set("".join(inputs).replace(".", ""))
    free = [c for c in _LETTERS if c not in used]
    width = max([nd - (len(s) - 3) for s, nd in zip(inputs, ndims) if "..." in s] or [0])
    ellipsis = "".join(free[:width])
    specs = []
    for s, nd in zip(inputs, ndims):
        if "..." in s:
            n = nd - (len(s) - 3)
            s = s.replace("...", ellipsis[width - n:] if n else "")
        specs.append(s)
    if output is None:
        counts = {}
        for c in "".join(specs):
            counts[c] = counts.get(c, 0) + 1
        singles = sorted(c for c in counts if counts[c] == 1 and c not in ellipsis)
        output = ellipsis + "".join(singles)
    else:
        output = output.replace("...", ellipsis)
    return specs, output


@implements(np.einsum)
def _einsum(*operands, out=None, optimize=False, **kwargs):
    _refuse("einsum", out=out)
    if not isinstance(operands[0], str):
        raise unsupported("numpy.einsum", "the sublist form; use a subscripts string")
    subscripts, operands = operands[0], operands[1:]
    result = np.einsum(subscripts, *[nvalue(o) for o in operands], **kwargs)
    if _real_dtype(kwargs.get("dtype")):
        operands = _real_parts(operands, "numpy.einsum")
    specs, output = _parse_einsum(subscripts, [np.ndim(nvalue(o)) for o in operands])
    forward = _linear(specs, output, operands, result)
    if len(operands) == 1 and isinstance(operands[0], value) and isinstance(forward, value):
        # (a transposition or a diagonal: numpy's einsum gives a view)
        return _viewed(forward, operands[0], lambda array: np.einsum(subscripts, array,
                                                                     **kwargs))
    return forward


def _sparse_product(matrix, x, matrix_first):
    """``A @ x`` or ``x @ A`` with a constant scipy sparse ``A``."""
    xv = x._value
    if xv.ndim > 2:
        raise unsupported("numpy.matmul", "a scipy sparse matrix times a >2-d forward value")
    if len(matrix.shape) != 2:
        raise unsupported("numpy.matmul", "a %d-d scipy sparse array; use a 2-d one, "
                          "e.g. A.reshape(1, -1)" % len(matrix.shape))
    if matrix_first:
        result = matrix @ xv
        form = None if xv.ndim == 1 else ("kron", xv.shape[1])
    else:
        result = (matrix.T @ xv.T).T
        form = "transposed" if xv.ndim == 1 else ("kron transposed", xv.shape[0])
    L = _constant_matrix(x._jacobian.seed, matrix, form)
    if isinstance(result, np.matrix):
        result = np.asarray(result)
    return make(_backend.asarray(result), jac.left_multiply(L, x._jacobian))


def _constant_matrix(seed, matrix, form=None):
    """``CSR.from_scipy`` of ``matrix`` or of a ``form`` of it (see :func:`_form`:
    the transpose, for ``x @ A``; the Kronecker products with an identity that
    multiply a 2-d value's rows or columns), kept in the seed's structure
    between evaluations.

    The usual operator (a Laplacian, a mass matrix) is kept under the
    addresses of the arrays that define it (so that ``A.T``, a new matrix
    object on the memory of ``A``'s arrays at every call, is found too), and
    found again only while they hold the same contents (compared on every
    read: the data or pattern may be written between two evaluations, or
    another matrix may have been made where a dead one was); its forms are
    kept with it.  A canonical CSR matrix is kept at once and compared with
    its kept CSR itself; the other formats whose arrays define them (CSC,
    COO, DIA, as ``scipy.sparse.diags`` makes, BSR, and CSR with duplicates
    or unsorted columns) from their second product on, with copies of their
    arrays kept beside it, so that their conversion is not paid again at
    every evaluation.  The kept CSR names the products' patterns alike at
    every evaluation (:func:`sparsegrad._jacobian._kept_product`).
    """
    structure = seed.structure
    names = _DEFINING_ARRAYS.get(matrix.format)
    if not (structure.shared and names):
        return jac.CSR.from_scipy(_form(matrix, form))
    # L depends on the format, the shape and the contents of the defining
    # arrays (their dtypes with them); the form on L and the form's
    # arguments.  The addresses, dtypes, shapes and strides in the key only
    # find the entry; the contents are compared at every read (another
    # matrix may live where a dead one did, and arrays can be written in
    # place), the form is kept on L, so it goes with it
    canonical = matrix.format == "csr" and matrix.has_canonical_format
    arrays = tuple(getattr(matrix, name) for name in names)
    key = ("matrix", matrix.format, matrix.shape) + tuple(
        (a.__array_interface__["data"][0], a.dtype.str, a.shape, a.strides) for a in arrays)
    hit = _structure.recall(structure.matrices, key)
    found = (hit is not None and hit[0] is not None
             and all(map(_same_array, arrays, hit[1] or (hit[0].indptr, hit[0].indices,
                                                        hit[0].data))))
    _structure.looked_up(found)
    if found:
        L = hit[0]
    elif not canonical and hit is None:
        # (a matrix met once, or a new one at every call, as scipy's transpose
        # of a DIA matrix: noted, holding nothing; converted as it is)
        _structure.store(structure.matrices, key, (None, None), _MAX_MATRICES)
        return jac.CSR.from_scipy(_form(matrix, form))
    else:
        L = jac.CSR.from_scipy(matrix)
        # (a canonical CSR's arrays are L's, in L's index dtype; other formats'
        # are copied as they are)
        copies = None if canonical else tuple(a.copy() for a in arrays)
        _structure.store(structure.matrices, key, (L, copies), _MAX_MATRICES)
        structure.keep(*L.arrays(), *(copies or ()))
    if form is None:
        return L
    # (the forms of the matrix as it is now: kept with L, made again with a new L)
    kept = _structure.recall(L.gathers, form)
    if kept is None:
        kept = (None, jac.CSR.from_scipy(_form(matrix, form)))
        _structure.store(L.gathers, form, kept, _MAX_FORMS)
        structure.keep(*kept[1].arrays())
    return kept[1]


def _constant_coefficients(seed, in_specs, out_spec, values, k, build):
    """The coefficient matrix ``build()`` of an einsum-shaped product whose
    operands other than ``values[k]`` are constant arrays (``D @ u`` with a
    dense ``D``, a spectral method's differentiation matrix), kept in the
    seed's structure between evaluations as :func:`_constant_matrix` keeps a
    scipy matrix: under the subscripts and the constants' addresses, found
    again only while they hold the same contents (compared at every product),
    and kept from the second product on, with copies of the constants beside
    it.  The same matrix at every evaluation, the products' merges then go by
    plans, and the coefficients are not gathered again.
    """
    structure = seed.structure
    constants = [v for i, v in enumerate(values) if i != k]
    if not (structure.shared and all(type(v) is np.ndarray for v in constants)):
        return build()
    # (the coefficients depend on the subscripts, which operand is the forward
    # one, its shape and dtype (the coefficients of a lone operand are ones of
    # its dtype) and the constants' contents, dtypes and shapes; the addresses
    # and strides in the key only find the entry, the contents are compared at
    # every product.  Never the values or pattern of the forward operand)
    key = ("einsum", tuple(in_specs), out_spec, k, values[k].shape, values[k].dtype.str) + \
        tuple((v.__array_interface__["data"][0], v.dtype.str, v.shape, v.strides)
              for v in constants)
    hit = _structure.recall(structure.matrices, key)
    found = hit is not None and hit[0] is not None and all(map(_same_array, constants, hit[1]))
    _structure.looked_up(found)
    if found:
        return hit[0]
    L = build()
    if hit is None or not structure.has_room(
            sum(a.nbytes for a in (*L.arrays(), *constants) if a is not None)):
        # (met once so far, or no room: noted, holding nothing)
        _structure.store(structure.matrices, key, (None, None), _MAX_MATRICES)
        return L
    copies = tuple(v.copy() for v in constants)
    _structure.store(structure.matrices, key, (L, copies), _MAX_MATRICES)
    structure.keep(*L.arrays(), *copies)
    return L


def _form(matrix, form):
    """``matrix`` (None), its transpose (``"transposed"``), or the Kronecker
    product ``A ⊗ I_m`` (``("kron", m)``: ``A @ X`` of an ``n x m`` value
    ``X``, row-major) or ``I_m ⊗ A.T`` (``("kron transposed", m)``: ``X @ A``
    of an ``m x n`` value)."""
    if form is None:
        return matrix
    if form == "transposed":
        return matrix.T
    # (format="csr": the default BSR would store the zeros of each identity
    # block, entries no element depends on)
    identity = scipy.sparse.eye(form[1])
    if form[0] == "kron":
        return scipy.sparse.kron(matrix, identity, format="csr")
    return scipy.sparse.kron(identity, matrix.T, format="csr")


#: forms (transpose, Kronecker products) of one constant matrix kept with it
_MAX_FORMS = 4


#: constant matrices of products a seed's structure keeps (see _constant_matrix)
_MAX_MATRICES = 16

#: the arrays that define a scipy matrix of each format, compared with what was
#: kept of it (formats of Python objects, LIL and DOK, convert at every product)
_DEFINING_ARRAYS = {"csr": ("indptr", "indices", "data"), "csc": ("indptr", "indices", "data"),
                    "bsr": ("indptr", "indices", "data"), "coo": ("row", "col", "data"),
                    "dia": ("offsets", "data")}


def _same_array(array, kept):
    """Whether ``array`` holds what ``kept`` was made of: its numbers (index
    arrays, in any integer dtype), or its values of the same dtype (NaN equal
    to NaN)."""
    if array.shape != kept.shape:
        return False
    if array.dtype.kind in "iu" and kept.dtype.kind in "iu":
        return _backend.CPU.kernels.same_index(array, kept)
    # (equal_nan costs ten times a plain comparison: only asked when that fails)
    return array.dtype == kept.dtype and (np.array_equal(array, kept)
                                          or np.array_equal(array, kept, equal_nan=True))


def _with_sparse(a, b):
    if scipy.sparse.issparse(a) and isinstance(b, value):
        return _sparse_product(a, b, True)
    if scipy.sparse.issparse(b) and isinstance(a, value):
        return _sparse_product(b, a, False)
    if scipy.sparse.issparse(a) or scipy.sparse.issparse(b):
        raise unsupported("matmul", "scipy sparse operands with forward values")
    return None


def _matmul_specs(nd_a, nd_b):
    if nd_a == 0 or nd_b == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    a = "ij" if nd_a >= 2 else "j"
    b = "jk" if nd_b >= 2 else "j"
    a = ("..." + a) if nd_a > 2 else a
    b = ("..." + b) if nd_b > 2 else b
    out = ("..." if max(nd_a, nd_b) > 2 else "") + ("i" if nd_a >= 2 else "") + \
        ("k" if nd_b >= 2 else "")
    return a + "," + b + "->" + out


@implements(np.matmul)
def _matmul(x1, x2, out=None, **kwargs):
    _refuse("matmul", out=out)
    sparse = _with_sparse(x1, x2)
    if sparse is not None:
        return sparse
    a, b = nvalue(x1), nvalue(x2)
    result = np.matmul(a, b, **kwargs)
    if _real_dtype(kwargs.get("dtype")):
        x1, x2 = _real_parts([x1, x2], "numpy.matmul")
    subscripts = _matmul_specs(a.ndim, b.ndim)
    specs, output = _parse_einsum(subscripts, [a.ndim, b.ndim])
    return _linear(specs, output, [x1, x2], result)


@implements(np.dot)
def _dot(a, b, out=None):
    _refuse("dot", out=out)
    sparse = _with_sparse(a, b)
    if sparse is not None:
        return sparse
    av, bv = nvalue(a), nvalue(b)
    if av.ndim == 0 or bv.ndim == 0:
        return _scalar_product(a, b, av, bv)
    result = np.dot(av, bv)
    letters = iter(_LETTERS)
    sa = "".join(next(letters) for _ in range(av.ndim))
    sb = [next(letters) for _ in range(bv.ndim)]
    sb[-2 if bv.ndim >= 2 else -1] = sa[-1]
    sb = "".join(sb)
    output = sa[:-1] + sb.replace(sa[-1], "")
    return _linear([sa, sb], output, [a, b], result)


def _scalar_product(a, b, av, bv):
    """``dot`` or ``inner`` with a 0-d operand: the elementwise product, numpy's
    value and dtype.  numpy takes a Python number as a float64 array (no
    weak-scalar promotion), so the product is taken with it as a numpy scalar
    (CuPy's dot takes only arrays, and no 0-d host array beside its own)."""
    return (a if isinstance(a, value) else number(av)) * \
        (b if isinstance(b, value) else number(bv))


@implements(np.inner)
def _inner(a, b):
    av, bv = nvalue(a), nvalue(b)
    if av.ndim == 0 or bv.ndim == 0:
        return _scalar_product(a, b, av, bv)
    result = np.inner(av, bv)
    sa = _LETTERS[:av.ndim - 1] + "z"
    sb = _LETTERS[av.ndim - 1:av.ndim + bv.ndim - 2] + "z"
    return _linear([sa, sb], sa[:-1] + sb[:-1], [a, b], result)


@implements(np.outer)
def _outer(a, b, out=None):
    _refuse("outer", out=out)
    return _linear(["i", "j"], "ij", [np.ravel(a), np.ravel(b)],
                   np.outer(nvalue(a), nvalue(b)))


@implements(np.vdot)
def _vdot(a, b):
    result = np.vdot(nvalue(a), nvalue(b))
    return _linear(["i", "i"], "", [np.ravel(_conj_first(a)), np.ravel(b)], result)


@implements(np.tensordot)
def _tensordot(a, b, axes=2):
    av, bv = nvalue(a), nvalue(b)
    result = np.tensordot(av, bv, axes)
    if isinstance(axes, numbers.Integral):
        axes_a = list(range(av.ndim - axes, av.ndim))
        axes_b = list(range(axes))
    else:
        axes_a, axes_b = axes
        axes_a = [axes_a] if isinstance(axes_a, numbers.Integral) else list(axes_a)
        axes_b = [axes_b] if isinstance(axes_b, numbers.Integral) else list(axes_b)
    axes_a = [ax % av.ndim for ax in axes_a]
    axes_b = [ax % bv.ndim for ax in axes_b]
    sa = list(_LETTERS[:av.ndim])
    sb = list(_LETTERS[av.ndim:av.ndim + bv.ndim])
    for i, j in zip(axes_a, axes_b):
        sb[j] = sa[i]
    output = [c for i, c in enumerate(sa) if i not in axes_a] + \
        [c for j, c in enumerate(sb) if j not in axes_b]
    return _linear(["".join(sa), "".join(sb)], "".join(output), [a, b], result)


def _conj_first(x):
    if isinstance(x, value):
        return np.conjugate(x) if np.iscomplexobj(x._value) else x
    return np.conjugate(nvalue(x))


@implements(np.vecdot)
def _vecdot(x1, x2, axis=-1, **kwargs):
    _refuse("vecdot", out=kwargs.pop("out", None))
    # (numpy's call takes the keywords: dtype=, casting=, ... decide the value)
    result = np.vecdot(nvalue(x1), nvalue(x2), axis=axis, **kwargs)
    if _real_dtype(kwargs.get("dtype")):
        x1, x2 = _real_parts([x1, x2], "numpy.vecdot")
    product = np.multiply(_conj_first(x1), x2)
    return _finish(np.sum(product, axis=axis), result)


@implements(getattr(np, "matvec", None))
def _matvec(x1, x2, **kwargs):
    _refuse("matvec", out=kwargs.pop("out", None))
    result = getattr(np, "matvec")(nvalue(x1), nvalue(x2), **kwargs)
    if _real_dtype(kwargs.get("dtype")):
        x1, x2 = _real_parts([x1, x2], "numpy.matvec")
    specs, output = _parse_einsum("...ij,...j->...i", [np.ndim(nvalue(x1)), np.ndim(nvalue(x2))])
    return _linear(specs, output, [x1, x2], result)


@implements(getattr(np, "vecmat", None))
def _vecmat(x1, x2, **kwargs):
    _refuse("vecmat", out=kwargs.pop("out", None))
    result = getattr(np, "vecmat")(nvalue(x1), nvalue(x2), **kwargs)
    if _real_dtype(kwargs.get("dtype")):
        x1, x2 = _real_parts([x1, x2], "numpy.vecmat")
    a = _conj_first(x1)
    specs, output = _parse_einsum("...j,...ji->...i", [np.ndim(nvalue(a)), np.ndim(nvalue(x2))])
    return _linear(specs, output, [a, x2], result)


def _real_dtype(dtype):
    """Whether a ``dtype=`` argument asks for real floating-point values."""
    return dtype is not None and np.dtype(dtype).kind == "f"


def _real_parts(operands, name):
    """``operands`` with complex values replaced by their real parts, as numpy casts
    the operands of a call with a real ``dtype=`` before computing (whose value
    has been computed: numpy checked casting= and warned)."""
    from ._ufuncs import real_part
    parts = []
    for o in operands:
        o = coerce(o)
        if isinstance(o, value) and o.dtype.kind == "c":
            check_real_axis(name + " to a real dtype", [o])
            o = make(np.real(o._value), real_part(o._jacobian))
        elif not isinstance(o, value) and np.iscomplexobj(nvalue(o)):
            o = np.real(nvalue(o))
        parts.append(o)
    return parts


def _finish(forward, exact_value):
    """``forward`` with its value replaced by numpy's own result (same shape)."""
    if not isinstance(forward, value):
        return exact_value
    return make(_backend.asarray(exact_value), forward._jacobian)


def _axes(axis, ndim, name):
    if axis is None:
        return tuple(range(ndim))
    if ndim == 0 and isinstance(axis, numbers.Integral) and axis in (0, -1):
        return ()  # (numpy's reductions let a 0-d array's one axis be named so)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    return tuple(np.lib.array_utils.normalize_axis_tuple(axes, ndim, name))


def _sum_jacobian(x, axis, keepdims):
    """Jacobian of ``np.sum(x, axis, keepdims)``, and the summed shape."""
    axes = _axes(axis, x.ndim, "axis")
    spec = _LETTERS[:x.ndim]
    out = "".join(c for i, c in enumerate(spec) if i not in axes)
    summed = _linear([spec], out, [x], np.zeros([x.shape[i] for i in range(x.ndim)
                                                  if i not in axes]))
    return summed._jacobian, axes


@implements(np.sum)
def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue,
         where=np._NoValue):
    _refuse("sum", out=out)
    a = cast_input(a, dtype, "numpy.sum")
    # (initial= and where= passed only when given: CuPy's sum has neither keyword)
    given = {k: v for k, v in (("initial", initial), ("where", where))
             if v is not np._NoValue}
    result = np.sum(nvalue(a), axis=axis, dtype=dtype, keepdims=keepdims, **given)
    if not isinstance(a, value):
        return result
    if where is not np._NoValue:  # the elements left out: constant zeros
        a = select(np.broadcast_to(nvalue(where), a.shape), a, 0)
    J, _ = _sum_jacobian(a, axis, keepdims)
    return make(_backend.asarray(result), J)


@implements(np.mean)
def _mean(a, axis=None, dtype=None, out=None, keepdims=False, where=np._NoValue):
    _refuse("mean", out=out)
    a = cast_input(a, dtype, "numpy.mean")
    if where is not np._NoValue:
        result = np.mean(a._value, axis=axis, dtype=dtype, keepdims=keepdims, where=where)
        mask = np.broadcast_to(nvalue(where), a.shape)
        count = np.sum(mask, axis=axis, keepdims=keepdims)
        with np.errstate(divide="ignore", invalid="ignore"):  # (numpy warned already)
            # (a slice without elements: a NaN row, as the mean of an empty axis)
            return _finish(np.sum(a, axis=axis, keepdims=keepdims, where=mask)
                           / count.astype(a.dtype), result)
    result = np.mean(a._value, axis=axis, dtype=dtype, keepdims=keepdims)
    J, axes = _sum_jacobian(a, axis, keepdims)
    count = math.prod(a.shape[i] for i in axes)
    return make(_backend.asarray(result), jac.scale(J, 1.0 / count if count else np.nan))


@implements(np.trace)
def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _refuse("trace", out=out)
    a = cast_input(a, dtype, "numpy.trace")
    result = np.trace(a._value, offset, axis1, axis2, dtype)
    return _finish(np.sum(np.diagonal(a, offset, axis1, axis2), axis=-1), result)


def _line_view(x, axis):
    """``x`` and the index of ``axis`` in it (``axis=None``, or a 0-d ``x``: flattened,
    as numpy treats a 0-d array as one of shape ``(1,)`` there)."""
    if axis is None or np.ndim(nvalue(x)) == 0:
        return np.ravel(x), 0
    return x, np.lib.array_utils.normalize_axis_index(axis, np.ndim(nvalue(x)))


def _cumulative(function, derivative):
    """Register ``function`` (``cumsum`` and friends): the value is numpy's own call
    of that very function (``cumulative_sum`` refuses what ``cumsum`` takes: a
    multi-dimensional array without ``axis``); ``derivative(a, axis, result)``."""
    if function is None:  # absent from older numpy releases
        return
    name = function.__name__

    @implements(function)
    def cumulative(a, axis=None, dtype=None, out=None, **kwargs):
        _refuse(name, out=out)
        a = cast_input(a, dtype, "numpy." + name)
        result = function(a._value, axis=axis, dtype=dtype, **kwargs)
        if kwargs.get("include_initial"):
            raise unsupported("numpy." + name, "include_initial=True")
        return derivative(a, axis, result)
    cumulative.__name__ = "_" + name
    return cumulative


def _cumsum(a, axis, result):
    x, axis = _line_view(a, axis)
    n = x.shape[axis]
    lower = np.tril(np.ones((n, n), dtype=x.dtype))
    spec = _LETTERS[:x.ndim]
    out_spec = spec.replace(spec[axis], "Z")
    return _linear(["Z" + spec[axis], spec], out_spec, [lower, x], result)


@implements(np.prod)
def _prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue,
          where=np._NoValue):
    _refuse("prod", out=out, where=where, initial=initial)
    a = cast_input(a, dtype, "numpy.prod")
    result = np.prod(a._value, axis=axis, dtype=dtype, keepdims=keepdims)
    # d prod = sum_j (prod_{k != j} x_k) dx_j, the products taken without division
    others = _exclusive_products(a._value, _axes(axis, a.ndim, "axis"))
    J, _ = _sum_jacobian(make(a._value, jac.scale(a._jacobian, others.ravel())), axis,
                         keepdims)
    return make(_backend.asarray(result), J)


def _exclusive_products(x, axes):
    """``prod_{k != j} x_k`` over the reduced ``axes`` for every ``j``, without division."""
    moved = np.moveaxis(x, axes, range(-len(axes), 0))
    # (the line length spelt out: -1 cannot be inferred when a kept axis is empty)
    lines = moved.reshape(moved.shape[:moved.ndim - len(axes)]
                          + (math.prod(moved.shape[moved.ndim - len(axes):]),))
    if lines.shape[-1] == 0:
        return np.ones_like(x)
    ones = _backend.of(x).xp.ones(lines.shape[:-1] + (1,), dtype=x.dtype)
    left = np.cumprod(np.concatenate([ones, lines[..., :-1]], axis=-1), axis=-1)
    right = np.cumprod(np.concatenate([ones, lines[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    products = (left * right).reshape(moved.shape)
    return np.moveaxis(products, range(-len(axes), 0), axes)


def _cumprod(a, axis, result):
    x, axis = _line_view(a, axis)
    lines = np.moveaxis(x, axis, -1)
    xv = lines._value
    n = xv.shape[-1]
    # coefficient[..., i, j] = prod_{k <= i, k != j} x_k for j <= i, as
    # (prod_{k < j} x_k) * (prod_{j < k <= i} x_k), without division
    xp = _backend.of(xv).xp       # (the constants made where the values live)
    ones = xp.ones(xv.shape[:-1] + (1,), dtype=xv.dtype)
    before = np.cumprod(np.concatenate([ones, xv[..., :-1]], axis=-1), axis=-1)
    below = np.tril(xp.ones((n, n), dtype=bool), -1)
    after = np.cumprod(np.where(below, xv[..., :, None], 1), axis=-2)
    lower = np.tril(xp.ones((n, n), dtype=bool))
    coefficient = np.where(lower, before[..., None, :] * after, 0)
    batch = _LETTERS[:xv.ndim - 1]
    moved = _structural_linear([batch + "YZ", batch + "Z"], batch + "Y",
                               [coefficient, lines], lower)
    return _finish(np.moveaxis(moved, -1, axis), result)


for _function, _derivative in ((np.cumsum, _cumsum),
                                (getattr(np, "cumulative_sum", None), _cumsum),
                                (np.cumprod, _cumprod),
                                (getattr(np, "cumulative_prod", None), _cumprod)):
    _cumulative(_function, _derivative)


def _structural_linear(specs, out_spec, operands, mask):
    """Linear map ``einsum(specs -> out_spec)`` of the forward ``operands[1]``.

    ``operands[0]`` holds value-dependent coefficients; entries where ``mask``
    (broadcast against them) is False are structurally zero, all others are
    stored even when zero at this point.
    """
    coefficient, x = operands
    values = [coefficient, x._value]
    if coefficient.size == 0 or x.size == 0:
        # (numpy's einsum of an empty operand with a zero stride can write out of
        # bounds: the empty result is made here instead)
        sizes = {}
        for spec, shape in zip(specs, (coefficient.shape, x.shape)):
            for letter, n in zip(spec, shape):
                sizes[letter] = 0 if 0 in (n, sizes.get(letter)) else max(n, sizes.get(letter, 1))
        result = x._jacobian.seed.backend.xp.zeros(
            tuple(sizes[letter] for letter in out_spec), np.result_type(*values))
        return make(result, jac.zero(x._jacobian.seed, result.size))
    rows, cols, data, n_out = _einsum_jacobian(specs, out_spec, values, 1, x._jacobian)
    structure = np.broadcast_to(mask, coefficient.shape).astype(coefficient.dtype)
    keep = _einsum_jacobian(specs, out_spec, [structure, x._value], 1, x._jacobian)[2] != 0
    backend = x._jacobian.seed.backend  # (built on the device: see _linear)
    rows, cols, data, keep = (_backend.to_device(a, backend) for a in (rows, cols, data, keep))
    indptr, indices, entries = backend.kernels.coo_to_csr(n_out, x.size, rows[keep],
                                                          cols[keep], data[keep])
    L = jac.CSR((n_out, x.size), indptr, indices, entries)
    result = np.einsum(",".join(specs) + "->" + out_spec, coefficient, x._value)
    return make(result, jac.left_multiply(L, x._jacobian))


def _select_reduction(a, axis, keepdims, argfunction, function, name, initial, where):
    """``np.max`` or ``np.min``: the Jacobian row of the element ``argfunction``
    picks, the union pattern kept.  An ``initial=`` that wins over every element
    (not a tie) gives a zero row; elements left out by ``where=`` never win."""
    # (initial= and where= passed only when given: CuPy's max has neither keyword)
    given = {k: v for k, v in (("initial", initial), ("where", where))
             if v is not np._NoValue}
    if isinstance(initial, value):
        raise unsupported("numpy." + name, "initial= a forward value")
    result = function(a._value, axis=axis, keepdims=keepdims, **given)
    values = a._value
    if given:
        # the candidates numpy compares: initial in place of the elements where=
        # leaves out (initial itself is compared with the chosen one below)
        fill = initial if initial is not np._NoValue else values
        values = np.where(nvalue(where) if where is not np._NoValue else True, values, fill)
    axes = _axes(axis, a.ndim, "axis")
    moved_values = np.moveaxis(values, axes, range(-len(axes), 0))
    kept = moved_values.shape[:a.ndim - len(axes)]
    # (the line length spelt out: -1 cannot be inferred when a kept axis is empty)
    line = (math.prod(moved_values.shape[a.ndim - len(axes):]),)
    lines = moved_values.reshape(kept + line)
    rows = np.moveaxis(row_index(a.shape), axes, range(-len(axes), 0)).reshape(kept + line)
    union, _ = _sum_jacobian(a, axis, keepdims)
    if not line[0]:  # (an empty line with initial=: its constant)
        return make(_backend.asarray(result), jac.structural_zeros(union))
    chosen = _backend.to_host(argfunction(lines, axis=-1)[..., None])  # (rows: host)
    selected = jac.take_rows(a._jacobian, np.take_along_axis(rows, chosen, -1).ravel())
    if given:
        wins = np.ones(chosen.shape, dtype=bool)
        if where is not np._NoValue:  # (an element left out is only chosen as initial)
            mask = _backend.to_host(np.broadcast_to(nvalue(where), a.shape))
            mask = np.moveaxis(mask, axes, range(-len(axes), 0)).reshape(lines.shape)
            wins &= np.take_along_axis(mask, chosen, -1)
        if initial is not np._NoValue:  # (a tie goes to the element)
            beats = np.greater if argfunction is np.argmax else np.less
            wins &= ~beats(initial, np.take_along_axis(_backend.to_host(lines), chosen, -1))
        selected = jac.mask_rows(selected, wins.ravel())
    return make(_backend.asarray(result), jac.add([selected, jac.structural_zeros(union)]))


@implements(np.max, np.amax)
def _max(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=np._NoValue):
    _refuse("max", out=out)
    return _select_reduction(a, axis, keepdims, np.argmax, np.max, "max", initial, where)


@implements(np.min, np.amin)
def _min(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=np._NoValue):
    _refuse("min", out=out)
    return _select_reduction(a, axis, keepdims, np.argmin, np.min, "min", initial, where)


# ---- selection ---------------------------------------------------------------------
@implements(np.where)
def _where(condition, *branches):
    if not branches:
        return np.where(nvalue(condition))
    if len(branches) != 2:
        raise TypeError("where() takes 1 or 3 arguments")
    result = select(condition, *branches)
    if type(result) is value:
        # (numpy's where gives a 0-d array, not a scalar: viewed and written in place)
        return zero_d_array(result._raw, result._jac)
    return result


def select(condition, a, b):
    """``np.where(condition, a, b)``: rows of the selected branch, union pattern.

    The unselected branch contributes structural zeros only, so an inf or nan in
    its value or Jacobian never reaches the result.
    """
    a, b = coerce(a), coerce(b)
    condition = nvalue(condition)
    backend = _device_among((plain(a), plain(b)))
    if backend is not None:  # (a host condition goes there, where CuPy's where wants it)
        condition = _backend.to_device(condition, backend)
    result = np.where(condition, plain(a), plain(b))
    forwards = _forwards([a, b])
    if not forwards:
        return result
    # (as truth values: ~ of an integer or float condition is no complement)
    if a is b:  # (every row from one value: no masks, which would merge its blocks)
        return make(result, broadcast_jacobian(a, result.shape))
    chosen = np.broadcast_to(condition, result.shape).ravel().astype(bool, copy=False)
    terms = [jac.mask_rows(broadcast_jacobian(x, result.shape),
                           chosen if x is a else ~chosen) for x in forwards]
    return make(result, jac.add(terms))


@implements(np.clip, np._core.umath.clip)
def _clip(a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue,
          max=np._NoValue, **kwargs):
    _refuse("clip", out=out)
    if kwargs.get("where", True) is not True:  # (numpy leaves the other elements unset)
        raise unsupported("numpy.clip", "the where= argument")
    # numpy's call with the arguments as given: it refuses a bound given twice or
    # only one of a_min, a_max, and keeps Python numbers weak (a float32 result
    # for float32 values)
    bounds = [nvalue(b) if isinstance(b, value) else b for b in (a_min, a_max, min, max)]
    # (min=/max= passed only when given: CuPy's clip has neither)
    given = {k: v for k, v in zip(("min", "max"), bounds[2:]) if v is not np._NoValue}
    result = np.clip(nvalue(a), bounds[0], bounds[1], **given, **kwargs)
    low = a_min if a_min is not np._NoValue else min
    high = a_max if a_max is not np._NoValue else max
    low = None if low is np._NoValue else low
    high = None if high is np._NoValue else high
    clipped = a
    if low is not None:
        clipped = np.maximum(clipped, low)
    if high is not None:
        clipped = np.minimum(clipped, high)
    return _finish(clipped, result)


# ---- composition of forward operations -----------------------------------------------
@implements(np.diff)
def _diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    if n == 0:  # numpy's own rule: the input itself, prepend, append and axis unused
        return a
    extras = {k: number(nvalue(v)) for k, v in (("prepend", prepend), ("append", append))
              if v is not np._NoValue}
    result = np.diff(nvalue(a), n, axis, **extras)
    ndim = np.ndim(nvalue(a))
    axis = np.lib.array_utils.normalize_axis_index(axis, ndim)
    pieces = []
    for extra in (prepend, None, append):
        if extra is None:
            pieces.append(a)
        elif extra is not np._NoValue:
            shape = list(np.shape(nvalue(a)))
            shape[axis] = 1
            if np.ndim(nvalue(extra)) == 0:
                if not isinstance(extra, value):  # (a number: made where a lives)
                    extra = _backend.of(nvalue(a)).xp.asarray(extra)
                extra = np.broadcast_to(extra, shape)
            pieces.append(extra)
    x = np.concatenate(pieces, axis=axis) if len(pieces) > 1 else a
    for _ in range(n):
        upper = [slice(None)] * ndim
        lower = [slice(None)] * ndim
        upper[axis] = slice(1, None)
        lower[axis] = slice(None, -1)
        x = x[tuple(upper)] - x[tuple(lower)]
    return _finish(x, result)


@implements(np.gradient)
def _gradient(f, *varargs, axis=None, edge_order=1):
    # the spacings go to numpy as given: nvalue would turn a Python float (a weak
    # scalar, which keeps float32 differences float32) into a 0-d float64 array,
    # and numpy would then divide in float64 and round, 1 ulp off its own result
    result = np.gradient(nvalue(f), *[nvalue(v) if isinstance(v, value) else v
                                      for v in varargs], axis=axis, edge_order=edge_order)
    ndim = np.ndim(nvalue(f))
    axes = _axes(axis, ndim, "axis")
    if len(varargs) == 0:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1:
        spacings = list(varargs) * len(axes)
    else:
        spacings = list(varargs)
    if any(isinstance(h, value) for h in spacings):
        raise unsupported("numpy.gradient", "spacings that depend on the seed")
    derivatives = [_gradient_along(f, ax, nvalue(h), edge_order)
                   for ax, h in zip(axes, spacings)]
    exact = result if isinstance(result, (list, tuple)) else [result]
    derivatives = [_finish(d, e) for d, e in zip(derivatives, exact)]
    return derivatives[0] if len(derivatives) == 1 else tuple(derivatives)


def _gradient_along(f, axis, h, edge_order):
    """Second-order central differences inside, one-sided at the edges (numpy's scheme)."""
    g = np.moveaxis(f, axis, 0)
    n = g.shape[0]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, "
                         "at least (edge_order + 1) elements are required.")
    trailing = (1,) * (g.ndim - 1)
    xp = _backend.of(nvalue(f)).xp  # (the spacings are made where the values live)
    if np.ndim(h) == 0:
        dx = xp.full(n - 1, float(h))
    else:
        dx = np.diff(xp.asarray(h, dtype=float))

    def col(c):
        return c.reshape((-1,) + trailing)

    d1, d2 = dx[:-1], dx[1:]
    if np.ndim(h) == 0:  # uniform spacing: the centre point does not enter
        interior = (g[2:] - g[:-2]) / (2.0 * float(h))
    else:
        interior = (col(-d2 / (d1 * (d1 + d2))) * g[:-2]
                    + col((d2 - d1) / (d1 * d2)) * g[1:-1]
                    + col(d1 / (d2 * (d1 + d2))) * g[2:])
    if edge_order == 1:
        first = (g[1:2] - g[0:1]) / dx[0]
        last = (g[-1:] - g[-2:-1]) / dx[-1]
    else:
        a1, a2 = dx[0], dx[1]
        first = (-(2 * a1 + a2) / (a1 * (a1 + a2)) * g[0:1] + (a1 + a2) / (a1 * a2) * g[1:2]
                 - a1 / (a2 * (a1 + a2)) * g[2:3])
        b1, b2 = dx[-2], dx[-1]
        last = (b2 / (b1 * (b1 + b2)) * g[-3:-2] - (b2 + b1) / (b1 * b2) * g[-2:-1]
                + (2 * b2 + b1) / (b2 * (b1 + b2)) * g[-1:])
    if n == 2:
        result = np.concatenate([first, last], axis=0)
    else:
        result = np.concatenate([first, interior, last], axis=0)
    return np.moveaxis(result, 0, axis)


def _vector_p_norm(x, ord, axis, keepdims, name):
    """The vector ``ord``-norm of ``x`` over ``axis`` (an int, a tuple or None): the
    elements over all the axes named are one vector.  Only the Jacobian matters;
    callers replace the value by numpy's own."""
    magnitude = np.abs(x)
    if ord in (None, 2, "fro"):
        return np.sqrt(np.sum(magnitude * magnitude, axis=axis, keepdims=keepdims))
    if ord == 1:
        return np.sum(magnitude, axis=axis, keepdims=keepdims)
    if ord == np.inf:
        return np.max(magnitude, axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return np.min(magnitude, axis=axis, keepdims=keepdims)
    if isinstance(ord, numbers.Number) and ord != 0:
        return np.sum(magnitude ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)
    raise unsupported(name, "ord=%r" % (ord,))


@implements(np.linalg.norm)
def _norm(x, ord=None, axis=None, keepdims=False):
    result = np.linalg.norm(nvalue(x), ord=ord, axis=axis, keepdims=keepdims)
    xv = nvalue(x)
    if axis is None and xv.ndim == 2 and ord not in (None, "fro"):
        raise unsupported("numpy.linalg.norm", "matrix norm ord=%r" % (ord,))
    if axis is not None and not isinstance(axis, numbers.Integral) and len(axis) == 2 \
            and ord not in (None, "fro"):
        raise unsupported("numpy.linalg.norm", "matrix norm ord=%r" % (ord,))
    if axis is None and xv.ndim > 2 and ord is not None:
        raise ValueError("Improper number of dimensions to norm.")
    # what is left is a vector norm, or the Frobenius norm (the 2-norm of the
    # elements of the matrix taken as one vector)
    return _finish(_vector_p_norm(x, ord, axis, keepdims, "numpy.linalg.norm"), result)


@implements(np.linalg.vector_norm)
def _vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    if _backend.of(nvalue(x)) is not _backend.CPU:
        # (CuPy has no vector_norm: the value is the one computed with the Jacobian)
        return _vector_p_norm(x, ord, axis, keepdims, "numpy.linalg.vector_norm")
    # numpy's call first: it checks the axes and the order, and gives the value
    result = np.linalg.vector_norm(nvalue(x), axis=axis, keepdims=keepdims, ord=ord)
    # always a vector norm: a tuple of axes (or None) takes the elements over them
    # as one vector.  np.linalg.norm would read two axes as a matrix norm and
    # refuse ord=1, 2, inf, ... there, so it is not called.
    return _finish(_vector_p_norm(x, ord, axis, keepdims, "numpy.linalg.vector_norm"),
                   result)

