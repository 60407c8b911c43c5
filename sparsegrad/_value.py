"""The forward value: an ndarray value paired with its sparse Jacobian.

Forward values join numpy through its protocols: arithmetic operators come
from ``NDArrayOperatorsMixin`` and go to ``__array_ufunc__``, which looks each
ufunc up in the rule tables of :mod:`sparsegrad._ufunc_rules` (``+ - * / **``
with arrays, numbers and forward values go to those tables directly); other numpy
functions go through ``__array_function__`` to the table in
:mod:`sparsegrad._functions`.  Anything not in a table raises a ``TypeError``
naming the numpy function, so a derivative is never silently dropped.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.array([1.0, 2.0]))
>>> y = np.exp(x) * x[::-1]
>>> y.dvalue.toarray().round(3)
array([[5.437, 2.718],
       [7.389, 7.389]])
"""
import linecache
import numbers
import operator
import re
import sys
import warnings
import weakref

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from . import _backend, _structure
from . import _jacobian as jac
from . import _ufunc_rules as rules
from ._errors import unsupported, UnsupportedOperationError, UnsupportedAttributeError
from ._deferred import Deferred, c_contiguous, IN_C_ORDER
from ._indexing import (Assembly, broadcast_rows, row_index, only_slices as _only_slices,
                        slice_key as _slice_key)
from ._memory import pooled

__all__ = ["value", "nvalue", "is_forward", "make", "jacobian_of", "broadcast_jacobian"]

#: 1 when this module runs from its source, 0 compiled (sparsegrad/_compiled.py):
#: compiled functions have no frame of their own, so a warning's ``stacklevel``
#: counts one frame less to name the caller's line
_OWN_FRAME = 1 if __file__.endswith(".py") else 0

_TO_PLAIN = ("converting a forward value to a plain number or array would drop its "
             "derivative; use .value (or sparsegrad.forward.nvalue) to take the value "
             "explicitly")
_STORE_HINT = ("cannot convert a forward value to a plain number or store it into a plain "
               "numpy array, which would drop its derivative; create the target with "
               "np.zeros(shape, like=x) where x is a forward value, e.g. "
               "F = np.zeros(n, like=x); F[0] = x[0] (or take the value explicitly with .value)")

#: a write into an element or a slice of an array: ``u[1:-1] = ...``, ``u[0] += ...``
_WRITE = re.compile(r"([A-Za-z_][\w.]*)\s*\[.*\]\s*(?:[-+*/%@&|^]|//|\*\*)?=(?!=)")


def _store_error():
    """:data:`_STORE_HINT` as a TypeError, naming the line outside sparsegrad
    that converted; for a write ``u[...] = ...`` there, the fix of that line's
    target (``u = np.zeros(..., like=x)``)."""
    # (from the innermost Python frame: compiled, this module has none)
    frame = sys._getframe(0)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("sparsegrad."):
        frame = frame.f_back
    if frame is None:
        return TypeError(_STORE_HINT)
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    where = "%s, line %d, in %s%s" % (frame.f_code.co_filename, frame.f_lineno,
                                       frame.f_code.co_name, ": " + line if line else "")
    write = _WRITE.match(line)
    if write is None:
        return TypeError("%s\n  %s" % (_STORE_HINT, where))
    target = write.group(1)
    return TypeError("%s is a plain numpy array, and storing a forward value into it would "
                     "drop its derivative; create %s with like= a forward value, e.g. "
                     "%s = np.zeros(n, like=x) instead of np.zeros(n) (or store .value "
                     "explicitly)\n  %s" % (target, target, target, where))


class value(NDArrayOperatorsMixin):
    """A value and its Jacobian with respect to a seed.

    Do not construct directly: use :func:`sparsegrad.forward.seed`.

    Attributes
    ----------
    value : ndarray
        The value.
    dvalue : scipy.sparse.csr_matrix
        The Jacobian, shape ``(value.size, seed.size)`` (also ``gradient`` and
        ``sparsity``).
    """

    # (_raw: the array, or in sparsity mode a Deferred one, computed when read;
    # _version: counts the writes into this value, which its views compare;
    # _views: weak references to its views not yet stale, or None)
    __slots__ = ("_raw", "_jac", "_owns", "_version", "_views")
    # take precedence over ndarray and scipy.sparse operands in Python operators
    __array_priority__ = 1000

    def __init__(self, array, jacobian):
        self._raw = array
        self._jac = jacobian
        # True only while nothing outside holds _array (no view, no Jacobian that
        # keeps it as a row factor): only then may an index write go into it
        self._owns = False
        self._version = 0
        self._views = None

    # ---- value and Jacobian ------------------------------------------------
    @property
    def _array(self):
        """The array itself, computed first if it was deferred (sparsity mode)."""
        raw = self._raw
        if type(raw) is Deferred:
            raw = self._raw = raw.compute()
        return raw

    @_array.setter
    def _array(self, array):
        self._raw = array

    @property
    def _value(self):
        """The value array for computing with: whoever reads it may keep it (a
        partial derivative of ``x * y`` is the other operand itself), so a later
        index write copies it first instead of writing into it."""
        self._owns = False
        return self._array

    @_value.setter
    def _value(self, array):
        self._array = array

    @property
    def value(self):
        self._owns = False
        return self._array

    @property
    def _jacobian(self):
        """The factored Jacobian (assembling pending index writes first)."""
        if isinstance(self._jac, Assembly):
            self._jac = self._jac.materialize()
        return self._jac

    @property
    @pooled
    def dvalue(self):
        J = self._jacobian
        seed = J.seed
        matrix = jac.to_scipy(J, jac.matrix_dtype(seed, self._raw.dtype))
        if seed.scalar and self._raw.ndim == 0:
            return matrix.toarray().reshape(())
        return matrix

    gradient = dvalue
    sparsity = dvalue

    # ---- array attributes ---------------------------------------------------
    # (known without computing a deferred value)
    shape = property(lambda self: self._raw.shape)
    ndim = property(lambda self: self._raw.ndim)
    size = property(lambda self: self._raw.size)
    dtype = property(lambda self: self._raw.dtype)
    T = property(lambda self: np.transpose(self))
    real = property(lambda self: np.real(self))
    imag = property(lambda self: np.imag(self))
    mT = property(lambda self: np.matrix_transpose(self))
    device = property(lambda self: self._array.device)

    def __array_namespace__(self, *, api_version=None):
        """The array API namespace of forward values, :mod:`sparsegrad.array_api`."""
        return array_namespace(api_version)

    def __repr__(self):
        J = self._jacobian
        return "sparsegrad.forward.value(%r, jacobian %dx%d)" % (
            self._array, J.n_rows, J.seed.size)

    # ---- conversions that would drop the derivative refuse -----------------
    def __array__(self, dtype=None, copy=None):
        # A 0-d object array is numpy's "not an array" answer: scipy.sparse then
        # returns NotImplemented so that ``A @ x`` reaches ``__rmatmul__``, and any
        # numeric conversion reaches __float__ below, which refuses.
        if dtype is not None and np.dtype(dtype) != np.dtype(object):
            raise _store_error()
        return object_holder(self)

    def __float__(self):
        raise _store_error()

    __complex__ = __int__ = __float__

    def __index__(self):
        raise TypeError(_TO_PLAIN)

    def __bool__(self):
        return bool(self._array)

    # ---- methods users reach for -------------------------------------------
    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = shape[0]
        return np.reshape(self, shape, order=order)

    def ravel(self, order="C"):
        return np.ravel(self, order=order)

    def flatten(self, order="C"):
        return np.ravel(self, order=order).copy()

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], numbers.Integral)):
            axes = axes[0]
        return np.transpose(self, axes or None)

    def swapaxes(self, axis1, axis2):
        return np.swapaxes(self, axis1, axis2)

    def squeeze(self, axis=None):
        return np.squeeze(self, axis=axis)

    def sum(self, axis=None, dtype=None, keepdims=False):
        return np.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis=None, dtype=None, keepdims=False):
        return np.mean(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def prod(self, axis=None, dtype=None, keepdims=False):
        return np.prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def cumsum(self, axis=None, dtype=None):
        return np.cumsum(self, axis=axis, dtype=dtype)

    def cumprod(self, axis=None, dtype=None):
        return np.cumprod(self, axis=axis, dtype=dtype)

    def max(self, axis=None, keepdims=False):
        return np.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return np.min(self, axis=axis, keepdims=keepdims)

    # (the ndarray methods below go through the numpy functions of the same name)
    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
        return np.var(self, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims,
                      **kwargs)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
        return np.std(self, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims,
                      **kwargs)

    def clip(self, min=None, max=None, out=None, **kwargs):
        return np.clip(self, min, max, out=out, **kwargs)

    def round(self, decimals=0, out=None):
        return np.round(self, decimals, out=out)

    def any(self, axis=None, out=None, keepdims=False, **kwargs):
        return np.any(self, axis=axis, out=out, keepdims=keepdims, **kwargs)

    def all(self, axis=None, out=None, keepdims=False, **kwargs):
        return np.all(self, axis=axis, out=out, keepdims=keepdims, **kwargs)

    def argmax(self, axis=None, out=None, *, keepdims=False):
        return np.argmax(self, axis=axis, out=out, keepdims=keepdims)

    def argmin(self, axis=None, out=None, *, keepdims=False):
        return np.argmin(self, axis=axis, out=out, keepdims=keepdims)

    def argsort(self, axis=-1, kind=None, order=None, *, stable=None):
        return np.argsort(self, axis=axis, kind=kind, order=order, stable=stable)

    def argpartition(self, kth, axis=-1, kind="introselect", order=None):
        return np.argpartition(self, kth, axis=axis, kind=kind, order=order)

    def nonzero(self):
        return np.nonzero(self)

    def searchsorted(self, v, side="left", sorter=None):
        return np.searchsorted(self, v, side=side, sorter=sorter)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return np.diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        return np.trace(self, offset, axis1, axis2, dtype, out)

    def repeat(self, repeats, axis=None):
        return np.repeat(self, repeats, axis=axis)

    def take(self, indices, axis=None, out=None, mode="raise"):
        return np.take(self, indices, axis=axis, out=out, mode=mode)

    def compress(self, condition, axis=None, out=None):
        return np.compress(condition, self, axis=axis, out=out)

    def fill(self, value):
        """Set every element to ``value`` in place, as ``ndarray.fill``."""
        self[...] = value

    @property
    def itemsize(self):
        return self._array.itemsize

    @property
    def nbytes(self):
        """The bytes of the value's array (not of its Jacobian)."""
        return self._array.nbytes

    def __getattr__(self, name):
        # only reached for names the class lacks: ndarray's members that forward
        # values do not have (memory layout, bytes, in-place partition, put, ...)
        # name themselves and the plain array to use
        if name in _NDARRAY_ONLY:
            raise UnsupportedAttributeError(
                "numpy.ndarray.%s is not supported by sparsegrad on forward values; use "
                ".value, the plain ndarray of its value (without its derivative)" % name)
        raise AttributeError("sparsegrad.forward.value has no attribute %r" % name)

    def item(self, *args):
        """The element of the value as a plain Python number, as ``ndarray.item``:
        a number has no derivative (index the value, ``x[i]``, to keep it)."""
        return self._array.item(*args)

    def tolist(self):
        """The elements as nested lists of 0-d forward values (``x[i]`` of each),
        so that ``np.array(x.tolist())`` holds forward values; a 0-d value itself."""
        if not self.ndim:
            return self
        return [self[i].tolist() for i in range(len(self))]

    def sort(self, axis=-1, kind=None, order=None):
        """Sort in place, as ``ndarray.sort``: the value's array and its Jacobian
        rows reordered, written through a view into the array it views."""
        self[...] = np.sort(self, axis=axis, kind=kind, order=order)

    class _Flat:
        """``x.flat``: reads and writes of the elements of ``x`` in C order."""

        __slots__ = ("base",)

        def __init__(self, base):
            self.base = base

        def __len__(self):
            return self.base.size

        def __iter__(self):
            return iter(np.ravel(self.base))

        def __getitem__(self, key):
            # (a copy, as numpy's: never a view that writes back)
            return np.ravel(self.base)[key].copy()

        def __setitem__(self, key, new):
            positions = np.arange(self.base.size)[_plain_key(key)]
            # (the elements themselves: a raveled copy would not write back)
            elements = (np.unravel_index(positions, self.base.shape) if self.base.ndim
                        else ...)
            # numpy repeats a short sequence of new elements; broadcasting here
            # refuses that instead of writing something else
            self.base[elements] = new

    @property
    def flat(self):
        return value._Flat(self)

    @flat.setter
    def flat(self, new):
        value._Flat(self)[...] = new

    def dot(self, other):
        return np.dot(self, other)

    def conj(self):
        return np.conjugate(self)

    conjugate = conj

    def copy(self):
        return make(self._value.copy(), self._jacobian)

    def astype(self, dtype, copy=True):
        dtype = np.dtype(dtype)
        if not copy and dtype == self.dtype:
            return self  # (numpy returns the array itself)
        if dtype.kind not in "biufc":
            # (an object array of numbers has no derivative rule: not piecewise constant)
            raise unsupported("astype", "dtype=%s" % dtype)
        if np.iscomplexobj(self._value) and dtype.kind == "f":
            # (numpy's own warning: the cast below goes through np.real, which
            # gives none; integer casts are numpy's, which warns itself, and bool
            # is a test for nonzero)
            warnings.warn("Casting complex values to real discards the imaginary part",
                          np.exceptions.ComplexWarning, stacklevel=1 + _OWN_FRAME)
        if np.issubdtype(dtype, np.inexact):
            if np.iscomplexobj(self._value) and not np.issubdtype(dtype, np.complexfloating):
                return np.real(self).astype(dtype)
            return make(self._value.astype(dtype), self._jacobian)
        # integer and bool casts are piecewise constant
        return make(self._value.astype(dtype), jac.zero(self._jacobian.seed, self.size))

    # ---- indexing ------------------------------------------------------------
    @pooled
    def _take(self, key):
        raw = self._raw
        J = self._jac
        if (type(key) is np.ndarray and type(raw) is np.ndarray and type(J) is jac.Jacobian
                and key.ndim == 1 and raw.ndim == 1 and key.dtype == jac.INDEX_DTYPE):
            # (a stencil's read, ``f[east]``, at every evaluation: the general
            # path below without its conversions of keys that this one is not)
            self._owns = False
            structure = J.seed.structure
            # (the seed's copy of the rows first: the gather then copies by its runs)
            rows = jac._readonly(_rows_read(raw.shape, key, np, structure))
            result = _backend.CPU.kernels.take(raw, rows, jac.known_runs(structure, rows))
            return _array_value(result, jac.take_rows(J, rows, ("array", raw.shape, id(key)),
                                                      may_be_empty=False))
        if (type(raw) is np.ndarray and type(J) is jac.Jacobian
                and _only_slices(key, raw.ndim)):
            # (``psi[1:-1]``, ``U[1:-1, 2:]``: the general path below, its key
            # conversions skipped)
            self._owns = False
            return view_of(self, raw[key], jac.take_rows(J, row_index(raw.shape)[key],
                                                         _slice_key(raw.shape, key),
                                                         may_be_empty=False),
                           operator.itemgetter(key))
        exact = None
        if (type(key) is list and 0 < len(key) <= _MAX_LIST_KEY and self.ndim == 1
                and all(type(k) is int for k in key)):
            # (``f[[0, -1]]``: a list made afresh at every call; its numbers are
            # the key under which the read's matrix is kept, not a new array's id)
            exact = ("list", self.shape, tuple(key))
            key = np.array(key, dtype=jac.INDEX_DTYPE)
        if type(raw) is Deferred:
            if _is_basic(key):
                return self._deferred_read(raw, key)
            if (raw.ndim == 1 and type(key) is np.ndarray and key.ndim == 1
                    and key.dtype.kind in "iu"):
                return self._deferred_gather(raw, key, exact)
        assembly = isinstance(self._jac, Assembly)
        # an index array on the value's device: the row numbers are computed there
        # too (no copy of the index to the host); an Assembly's bookkeeping is on
        # the host
        key, row_key, xp = _device_keys(_plain_key(key), self._value,
                                        device_rows=not assembly)
        array = self._value
        if (type(key) is np.ndarray and key.ndim == 1 and key.dtype == jac.INDEX_DTYPE
                and type(array) is np.ndarray and array.ndim == 1):
            result = _backend.CPU.kernels.take(array, key)  # (a stencil's gather)
        else:
            result = array[key]
            if _backend.shares_memory(result, array):
                # (basic indexing: numpy's view of the value, and so ours)
                return view_of(self, result, jac.take_rows(
                    self._jacobian, row_index(self.shape)[row_key],
                    _slice_key(self.shape, row_key), may_be_empty=False),
                    operator.itemgetter(key), operator.itemgetter(row_key))
            result = _backend.asarray(result)
        # (a view of the read-only row numbers, or a fresh array that is ours: made
        # read-only, the gathered selections keep it without a copy; numpy indexing
        # of the row numbers never gives -1)
        rows = jac._readonly(_rows_read(self.shape, row_key, xp, None if assembly or exact
                                        else self._jac.seed.structure))
        if assembly:
            return make(result, self._jac.take_rows(rows))
        return make(result, jac.take_rows(self._jac, rows,
                                          exact or _slice_key(self.shape, row_key),
                                          may_be_empty=False))

    def _deferred_read(self, raw, key):
        """``self[key]`` of a deferred value by a basic key: deferred too (numpy's
        checks of the key, and the shape, from the row numbers it reads)."""
        rows = jac._readonly(row_index(self.shape)[key])  # (numpy checks the key)
        shape = np.shape(rows)  # (a basic key's result has the shape of the rows read)
        J = jac.take_rows(self._jacobian, rows, _slice_key(self.shape, key),
                          may_be_empty=False)
        # (a basic read of a C-contiguous array is in C order, see in_c_order)
        array = Deferred(operator.getitem, (raw, key), shape, raw.dtype,
                         IN_C_ORDER if c_contiguous(raw) else False)
        if shape or Ellipsis in (key if type(key) is tuple else (key,)):
            # (numpy's basic indexing gives a view, a scalar only for a 0-d result
            # without an Ellipsis)
            return view_of(self, array, J, operator.itemgetter(key))
        return make(array, J)

    def _deferred_gather(self, raw, key, exact=None):
        """``self[key]`` of a deferred 1-d value by an integer index array: deferred
        too, gathered by our copy of the row numbers (checked at once).  ``exact``:
        the key of a short list's numbers (see :meth:`_take`)."""
        seed = self._jac.seed
        rows = jac._readonly(_rows_read(self.shape, key, np,
                                        None if exact else seed.structure))
        if _known_copy(seed.structure, key, len(raw)) is rows:
            # (the largest row of the seed's copy of an index array, found once:
            # it depends on the copy's numbers alone, which never change; the
            # entry holds the copy, its key's id, and is read for it only)
            known = seed.structure.index_rows.get(("max", id(rows)))
            if known is None or known[0] is not rows:
                known = (rows, rows.max(initial=-1))
                _structure.store(seed.structure.index_rows, ("max", id(rows)), known,
                                 jac.MAX_INDEX_ROWS)
            largest = known[1]
        else:
            largest = rows.max(initial=-1)
        if largest >= len(raw):
            np.broadcast_to(np.empty((), raw.dtype), raw.shape)[key]  # (numpy's IndexError)
        # (a gather of a 1-d array makes a new 1-d one: C-contiguous)
        return make(Deferred(operator.getitem, (raw, rows), rows.shape, raw.dtype, True),
                    jac.take_rows(self._jacobian, rows, exact or _slice_key(self.shape, key),
                                  may_be_empty=False))

    @pooled
    def __setitem__(self, key, new):
        self._write(key, new)

    def _target(self):
        """``(root, steps, rows)``: the value whose array this one's writes go into,
        the steps from its array to this one's, and this one's rows among the
        root's (a view's; here: itself, no steps, its own rows)."""
        return self, (), row_index(self.shape)

    def _write(self, key, new):
        root, steps, rows = self._target()
        key, row_key, _ = _device_keys(_plain_key(key), root._array)
        new = coerce(new)
        # everything that can fail comes before the value is written, so that a
        # refused write leaves value and Jacobian as they were
        target_rows = rows[row_key]
        if isinstance(new, value):
            # the source's Jacobian before this write (``new`` may be ``self``)
            piece = new._jacobian
            seed = jac.common_seed([root._jac, piece])
            if np.iscomplexobj(new._array) and not np.iscomplexobj(self._array):
                # numpy keeps the real part: for a real seed its Jacobian is the real
                # part of the source's; a complex seed's has one on the real axis only
                check_real_axis("writing complex values into a real array", [new])
                piece = _ufuncs.real_part(piece)
            source_rows = broadcast_rows(new.shape, target_rows.shape)
            new_array = new._value
        else:  # (a number or host constant written into a device array goes there)
            new_array = _backend.to_device(nvalue(new), _backend.of(root._array))
        if not root._owns:  # copy on write: never write into a shared array
            # (in its layout: a view's steps then give numpy's view of it)
            root._array = root._array.copy(order="K")
            root._owns = True
        _replay(steps, root._array)[key] = new_array
        written(root)
        assembly = root._jac
        if not isinstance(assembly, Assembly):
            assembly = root._jac = Assembly(root._jac)
        if isinstance(new, value):
            assembly.write(target_rows.ravel(), piece, source_rows.ravel())
        else:
            assembly.write(target_rows.ravel(), None, None)

    # ---- numpy protocols -----------------------------------------------------
    @pooled
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if not kwargs and method == "__call__":  # (np.exp(x): no out=, where= or keywords)
            return _ufuncs.call(ufunc, inputs)
        out = kwargs.pop("out", None)
        if out is not None:
            if not all(isinstance(o, value) for o in out):
                raise TypeError(
                    "%s: out= must be a forward value when an input is one (writing "
                    "into a plain ndarray would drop the derivative; %s)"
                    % (rules.rule_name(ufunc), "create it with np.zeros(shape, like=x)"))
            if len(out) != 1:
                raise unsupported(rules.rule_name(ufunc), "several outputs")
        where = kwargs.pop("where", True)
        if where is not True:
            raise unsupported(rules.rule_name(ufunc), "the where= argument")
        result = _ufuncs.apply(ufunc, method, inputs, kwargs)
        if out is None:
            return result
        target = out[0]
        casting = kwargs.get("casting", "same_kind")
        if not np.can_cast(nvalue(result).dtype, target.dtype, casting):
            # (numpy refuses such an out= before computing anything)
            raise TypeError("%s: cannot cast the result from %s to the out= array's %s "
                            "with casting=%r" % (rules.rule_name(ufunc), nvalue(result).dtype,
                                                 target.dtype, casting))
        target[...] = result
        return target

    @pooled
    def __array_function__(self, func, types, args, kwargs):
        if _FOREIGN.intersection(types):
            # (numpy then asks the other type: a sparse matrix maps np.dot(x, A)
            # to x @ A, or refuses by name)
            return NotImplemented
        if func in _functions.CREATION:
            return _functions.create(func, self, args, kwargs)
        implementation = _functions.FUNCTIONS.get(func)
        if implementation is None:
            raise unsupported("numpy." + _qualified_name(func), _functions.REFUSED.get(
                func, "no derivative rule for this function"))
        result = implementation(*args, **kwargs)
        if isinstance(result, value):
            seed = result._jac.seed  # (an Assembly has its seed too)
            kind = result.dtype.kind
            if (kind not in "fc" or seed.complex) and cast_is_constant(
                    "numpy." + _qualified_name(func) + " to a real dtype", seed, kind,
                    list(_forwards_in((args, tuple(kwargs.values()))))):
                return make(result._array, jac.zero(seed, result.size))
        return result


def _operator(ufunc, name, reflected=False):
    """The method ``__name__`` of forward values: ``self op other`` (``other op
    self`` when ``reflected``) straight to the rule tables when ``other`` is a
    forward value, an ndarray or a Python number, where numpy's dispatch would
    only call ``__array_ufunc__`` with the same operands (about 0.6 us per
    operator, 7% of an elementwise operation); every other operand through
    ``NDArrayOperatorsMixin``'s method, so that it keeps its say (its own
    ``__array_ufunc__``, or ``None`` to refuse numpy's)."""
    general = getattr(NDArrayOperatorsMixin, "__%s__" % name)
    call = pooled(_ufuncs_call)

    def method(self, other):
        kind = type(other)
        if kind is float or kind is int or kind is np.ndarray or isinstance(other, value):
            return call(ufunc, (other, self) if reflected else (self, other))
        return general(self, other)

    method.__name__ = "__%s__" % name
    method.__qualname__ = "value.__%s__" % name
    return method


def _ufuncs_call(ufunc, inputs):
    # (_ufuncs imports this module: it is read at the call, not at the definition)
    return _ufuncs.call(ufunc, inputs)


for _name, _ufunc in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                      ("truediv", np.divide), ("pow", np.power)):
    setattr(value, "__%s__" % _name, _operator(_ufunc, _name))
    setattr(value, "__r%s__" % _name, _operator(_ufunc, "r" + _name, reflected=True))
del _name, _ufunc

#: numpy's operator ``a ** p`` of a floating or complex array ``a`` and the Python
#: int -1 or 2 or the Python float 0.5 calls reciprocal, square or sqrt instead
#: of power (for complex values a rounding apart); numpy scalars do not
_POWER_BY = {(int, -1): np.reciprocal, (int, 2): np.square, (float, 0.5): np.sqrt}


def _power_shortcut(x, exponent):
    """The ufunc that numpy's ``x ** exponent`` calls instead of power, or None."""
    if type(exponent) is not int and type(exponent) is not float:
        return None
    if type(x) is value or x.dtype.kind not in "fc":  # (0-d values: scalar-like)
        return None
    return _POWER_BY.get((type(exponent), exponent))


_power, _reflected_power = value.__pow__, value.__rpow__


def _as_number(x):
    """The numpy scalar or Python number that ``x`` stands for, or None."""
    if type(x) is value:  # (0-d: scalar-like)
        raw = x._raw
        return raw[()] if type(raw) is np.ndarray else None
    if type(x) is float or type(x) is int or isinstance(x, (np.floating, np.integer)):
        return x
    return None


def _of_numbers(result, base, exponent):
    """``result`` of ``base ** exponent`` with the value numpy's scalars give.

    Between numpy scalars the operator ``**`` is numpy's scalar arithmetic,
    which calls the C library's ``pow``, not the ufunc's loop (on AVX-512 a
    rounding apart).  The Jacobian is power's, as the ufunc computes it.
    """
    a, b = _as_number(base), _as_number(exponent)
    if a is None or b is None or type(result) is not value or result._raw.dtype.kind != "f":
        return result
    with np.errstate(all="ignore"):  # (the ufunc warned already)
        number = np.asarray(a ** b)
    if number.dtype != result._raw.dtype:
        return result
    return make(number, result._jacobian)


def _pow(self, other):
    """``self ** other`` as numpy's operator computes it (see ``_POWER_BY``)."""
    shortcut = _power_shortcut(self, other)
    if shortcut is not None:
        return _ufuncs.power_by(shortcut, self, other)
    return _of_numbers(_power(self, other), self, other)


def _rpow(self, other):
    """``other ** self`` as numpy's operator computes it."""
    return _of_numbers(_reflected_power(self, other), other, self)


_pow.__name__, _pow.__qualname__ = "__pow__", "value.__pow__"
_rpow.__name__, _rpow.__qualname__ = "__rpow__", "value.__rpow__"
value.__pow__, value.__rpow__ = _pow, _rpow


def _in_place(name):
    """The method ``__i<name>__`` of forward values (``x += y``).

    A 0-d forward value is scalar-like: as a numpy scalar's, its in-place
    operators rebind the name to ``x <op> y``, promoted as numpy promotes
    (``np.float32(1) += np.array(2.0)`` gives float64, where a 0-d array would
    stay float32).  Arrays, and views of them (a 0-d view included), are written
    in place, in their own dtype, by the ufunc with ``out=``, as numpy's are.
    """
    general = getattr(NDArrayOperatorsMixin, "__i%s__" % name)
    rebound = getattr(operator, name + "_" if name in ("and", "or") else name)

    def method(self, other):
        if type(self) is value:
            return rebound(self, other)
        if name == "pow":
            shortcut = _power_shortcut(self, other)
            if shortcut is not None:  # (the dtype kept: written as it is)
                self[...] = _ufuncs.power_by(shortcut, self, other)
                return self
        return general(self, other)

    method.__name__ = "__i%s__" % name
    method.__qualname__ = "value.__i%s__" % name
    return method


for _name in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow",
              "lshift", "rshift", "and", "xor", "or"):
    setattr(value, "__i%s__" % _name, _in_place(_name))
del _name


#: ndarray members that a forward value refuses (its __getattr__)
_NDARRAY_ONLY = frozenset(name for name in dir(np.ndarray) if not name.startswith("_"))


_IN_OBJECT_ARRAY = (
    "numpy.%s reached a forward value held in an object array: the calling code "
    "converted forward values with np.asarray or np.array, which keeps them as Python "
    "objects and drops the derivative rules. SciPy's functions do so unless the "
    "environment variable SCIPY_ARRAY_API=1 is set before SciPy is imported; with it "
    "they take forward values (scipy.special.logsumexp, softmax, ...). Elsewhere, call "
    "numpy's functions on the forward value itself")


def _object_loop(name):
    """The method numpy's object-dtype loop of ufunc ``name`` calls on each element:
    for a forward value it raises, saying how it got into an object array."""
    def method(self, *args, **kwargs):
        raise UnsupportedOperationError(_IN_OBJECT_ARRAY % name)
    method.__name__ = method.__qualname__ = name
    return method


# (numpy's object loops of these ufuncs call the element's method of that name)
for _name in ("arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh", "cbrt", "cos",
              "cosh", "deg2rad", "degrees", "exp", "exp2", "expm1", "fabs", "log", "log10",
              "log1p", "log2", "rad2deg", "radians", "rint", "sin", "sinh", "sqrt", "tan",
              "tanh"):
    setattr(value, _name, _object_loop(_name))
del _name


class _array_value(value):
    """A forward value with at least one dimension: indexable, iterable, has a length.

    0-d forward values are plain :class:`value` objects without ``__getitem__``,
    like numpy scalars: then numpy does not take them for sequences, and storing
    one into a plain ndarray raises our ``TypeError`` instead of numpy's
    "setting an array element with a sequence".
    """

    __slots__ = ()

    __getitem__ = value._take

    def __len__(self):
        return len(self._raw)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


_RAW = value.__dict__["_raw"]
_JAC = value.__dict__["_jac"]


class _View:
    """What a view adds to a forward value: numpy's aliasing.

    A view is made by a numpy function that returns a view of an array
    (basic indexing, ``reshape``, ``transpose``, ``flip``, ``split``,
    ``.real``...).  It keeps its *root* (the value that owns the memory: views
    of views share one), the *steps* that make its array from the root's (each
    a pair: the step on values, and the step on row numbers or None where the
    rows are the same) and *parts* (functions of a Jacobian: the real or
    imaginary part).  Writes into a view go into its root.

    A view holds its value and Jacobian as any value does, as they were when
    it was made, while its root is not written.  The first write into the
    root (or through any of its views) turns the live views of it into
    *stale* ones (:class:`_Stale`), which read their value and Jacobian from
    the root again whenever its ``_version`` has changed since they last did:
    both directions of aliasing hold, in values and Jacobians, and a view of
    a root nobody writes reads as fast as any value.
    """

    __slots__ = ()

    def _target(self):
        rows = self._rows
        if rows is None:
            rows = row_index(self._root.shape)
            for _, rows_step in self._steps:
                if rows_step is not None:
                    rows = rows_step(rows)
            self._rows = rows
        return self._root, self._steps, rows

    def _write(self, key, new):
        if not self._parts:
            return value._write(self, key, new)
        root, steps, rows = self._target()
        if not _replay(steps, root._array).flags.writeable:
            raise ValueError("assignment destination is read-only")  # (numpy's words)
        # a part of complex elements: the elements written whole, the other
        # part kept (the rows of a complex Jacobian are not split by part)
        key, row_key, _ = _device_keys(_plain_key(key), root._array)
        target = rows[row_key]
        elements = np.unravel_index(target, root.shape)
        old = root[elements]
        new = np.broadcast_to(coerce(new), target.shape)
        if np.iscomplexobj(new):
            warnings.warn("Casting complex values to real discards the imaginary part",
                          np.exceptions.ComplexWarning, stacklevel=2 + _OWN_FRAME)
            new = np.real(new)  # (numpy's: the real part, of a part of the value)
        if self._parts[-1] is real_part:
            root[elements] = new + 1j * np.imag(old)
        else:
            root[elements] = np.real(old) + 1j * new


class _Stale:
    """A view whose root was written since it was made (see :class:`_View`):
    its value and Jacobian are read from the root again after every write, and
    whoever keeps its array keeps the root's memory (the root, which came to
    own a copy at the write, must copy again before the next)."""

    __slots__ = ()

    @property
    def _value(self):
        self._root._owns = False  # (its array is a view of the root's, held outside)
        return self._array

    @property
    def _owns(self):
        return False  # (the root's memory)

    @_owns.setter
    def _owns(self, owns):
        if not owns:  # (its array is a view of the root's, now held outside)
            self._root._owns = False

    @property
    def _raw(self):
        if self._seen_raw != self._root._version:
            self._seen_raw = self._root._version
            _RAW.__set__(self, _replay(self._steps, self._root._array))
        return _RAW.__get__(self)

    @_raw.setter
    def _raw(self, array):
        _RAW.__set__(self, array)

    @property
    def _jac(self):
        if self._seen_jac != self._root._version:
            self._seen_jac = self._root._version
            root, _, rows = self._target()
            J = jac.take_rows(root._jacobian, rows.ravel())
            if self._parts and J.seed.complex and root.dtype.kind == "c":
                # (as when the part was taken: the values may have left the axis)
                elements = _backend.of(root._array).xp.take(
                    root._array, _backend.to_device(rows, _backend.of(root._array)))
                if _off_real_axis(elements):
                    raise _not_complex_differentiable("the real or imaginary part")
            for part in self._parts:
                J = part(J)
            _JAC.__set__(self, J)
        return _JAC.__get__(self)

    @_jac.setter
    def _jac(self, jacobian):
        _JAC.__set__(self, jacobian)

    # (a view's Jacobian is never an assembly: writes go to its root)
    _jacobian = _jac


class _array_view(_View, _array_value):
    __slots__ = ("_root", "_steps", "_parts", "_rows", "_seen_raw", "_seen_jac",
                 "__weakref__")


class _stale_array_view(_Stale, _array_view):
    __slots__ = ()


def _index_zero_d(self, key):
    """``a[()]`` and ``a[...]`` of a 0-d array-like forward value, as numpy's of a
    0-d array: the value now (later writes into ``a`` do not change it), and ``a``
    itself (it sees them)."""
    if key is Ellipsis:
        return self
    if type(key) is tuple and not key:
        return self.copy()
    raise IndexError("too many indices for a 0-d forward value: only () and ... index "
                     "it, not %r" % (key,))


def _iterate_zero_d(self):
    raise TypeError("iteration over a 0-d forward value")


class zero_d_array(value):
    """A 0-d forward value made as an array (``np.zeros((), like=x)``): written in
    place by its operators, viewed and indexed (``a[()]``, ``a[...]``) as numpy's
    0-d arrays are, where other 0-d values are scalar-like."""
    __slots__ = ()
    __getitem__ = _index_zero_d
    __iter__ = _iterate_zero_d


class _scalar_view(_View, value):
    """A 0-d view (``F[0, ...]``): an array, not a scalar: written through, never
    rebound, indexed as :class:`zero_d_array` is."""
    __slots__ = ("_root", "_steps", "_parts", "_rows", "_seen_raw", "_seen_jac",
                 "__weakref__")
    __getitem__ = _index_zero_d
    __iter__ = _iterate_zero_d


class _stale_scalar_view(_Stale, _scalar_view):
    __slots__ = ()


#: the stale class of each view class
_STALE = {_array_view: _stale_array_view, _scalar_view: _stale_scalar_view}
#: every class of a view
_VIEWS = frozenset(_STALE) | frozenset(_STALE.values())
_new = object.__new__
_weak = weakref.ref


def written(root):
    """Count a write into forward value ``root`` (into its array or its
    Jacobian): its live views turn stale, reading both from it again."""
    seen = root._version
    root._version = seen + 1
    views = root._views
    if views is not None:
        root._views = None
        for ref in views:
            view = ref()
            if view is not None:  # (registered since the last write: not stale yet)
                view.__class__ = _STALE[type(view)]
                view._seen_raw = view._seen_jac = seen  # (what it holds is of then)


def view_of(parent, array, jacobian, step, rows_step=False, part=None):
    """A view of forward value ``parent``: ``array`` (numpy's view of its value, made
    by ``step``) and ``jacobian`` (its rows).  ``rows_step``: the step on row
    numbers (by default ``step``; None: the same rows); ``part``: a function of a
    Jacobian applied after the rows are taken (``.real``)."""
    if type(parent) is value:
        # (a scalar-like 0-d value: numpy's scalars have no views, a reshape of
        # one is a new array)
        return make(array, jacobian)
    if type(parent) in _VIEWS:
        root, steps, parts = parent._root, parent._steps, parent._parts
    else:
        root, steps, parts = parent, (), ()
    # (the view's array is numpy's view of the root's memory: the root never
    # writes into it again, and until it is written its views own nothing)
    root._owns = False
    view = _new(_array_view if array.ndim else _scalar_view)
    # (its _version and _views stay unset: writes and views go to the root)
    view._raw = array
    view._jac = jacobian
    view._owns = False
    view._root = root
    view._steps = steps + ((step, step if rows_step is False else rows_step),)
    view._parts = parts if part is None else parts + (part,)
    view._rows = None
    views = root._views
    if views is None:
        root._views = [_weak(view)]
    else:
        views.append(_weak(view))
        if len(views) & 255 == 0:  # (a loop of temporary views: the dead go)
            root._views = [ref for ref in views if ref() is not None]
    return view


def real_part(J):
    """The Jacobian of the real part of a complex value whose Jacobian is ``J``."""
    return _ufuncs.real_part(J)


def imaginary_part(J):
    """The Jacobian of the imaginary part of a complex value whose Jacobian is ``J``."""
    return _ufuncs.imaginary_part(J)


def no_part(J):
    """The Jacobian of the imaginary part of a real value: zero."""
    return jac.zero(J.seed, J.n_rows)


def _replay(steps, array):
    """The array that ``steps`` make of ``array`` (a root's: its view's)."""
    for step, _ in steps:
        array = step(array)
    return array


def _qualified_name(func):
    module = getattr(func, "__module__", "") or ""
    if module.startswith("numpy.linalg"):
        return "linalg." + func.__name__
    if module.startswith("numpy.fft"):
        return "fft." + func.__name__
    return func.__name__


def _is_basic(key):
    """Whether ``key`` indexes by Python integers, slices of them, None and
    Ellipsis only (a view; nothing the caller could change later)."""
    parts = key if type(key) is tuple else (key,)
    return all(type(k) is int or k is None or k is Ellipsis
               or (type(k) is slice and all(type(b) is int or b is None
                                            for b in (k.start, k.stop, k.step)))
               for k in parts)


def _plain_key(key):
    """Forward values used as indices contribute their values (indices are constant)."""
    if isinstance(key, tuple):
        return tuple(nvalue(k) if isinstance(k, value) else k for k in key)
    return nvalue(key) if isinstance(key, value) else key


def _device_keys(key, array, device_rows=False):
    """``(key for the value, key for the row numbers, their array module)``.

    The value may live on a device.  Index arrays of the key go to the value's
    device for the value.  The row numbers are made on the host (where
    ``row_index`` and the write bookkeeping live) with the key's device arrays
    copied there; with ``device_rows``, a key holding an index array of the
    value's device keeps its row numbers on the device instead (no copy of the
    index).  On the CPU both keys are ``key``.
    """
    backend = _backend.of(array)
    if backend is _backend.CPU:
        return key, key, np
    parts = key if isinstance(key, tuple) else (key,)
    # (a 0-d host index array as the number it holds: CuPy takes that, and numpy
    # reads the two alike)
    on_device = tuple(_backend.to_device(k, backend) if isinstance(k, np.ndarray) and k.ndim
                      else number(k) for k in parts)
    if device_rows and any(_backend.of(k) is backend for k in parts):
        on_host, xp = on_device, backend.xp
    else:
        on_host = tuple(_backend.to_host(k) if _backend.of(k) is backend else k
                        for k in parts)
        xp = np
    if isinstance(key, tuple):
        return on_device, on_host, xp
    return on_device[0], on_host[0], xp


#: lists of ints read by their numbers (``f[[0, -1]]``), up to this length
_MAX_LIST_KEY = 32


def _rows_read(shape, key, xp, structure=None):
    """The Jacobian rows that ``array[key]`` reads, for an array of ``shape``: a
    view of the row numbers or a fresh (read-only) array.

    The stencil case, an integer index array into a 1-d value, holds the rows
    themselves (negative entries counted from the end, as numpy does; the
    value's own indexing has checked their bounds): a copy is cheaper than
    gathering the row numbers.
    ``structure`` (a seed's :class:`~sparsegrad._structure.Structure`) keeps
    these copies by the index array's ``id`` and the length of the axis read
    (its ``index_rows``): a stencil reads one index array many times, in
    every evaluation, and the copy is returned again while the array is the
    same live object with the same contents, so that every gather cached
    under it recognises it by identity.  (Never for another array that took
    a dead one's ``id``, even with equal contents: whether two reads share a
    matrix, and so how their terms are summed, must not depend on where the
    allocator put a temporary index array.)
    """
    if (type(key) is np.ndarray and len(shape) == 1 and key.ndim == 1
            and key.dtype.kind in "iu"):
        known = None if structure is None else structure.index_rows
        # (the rows depend on the array's contents, which the kept copy is
        # compared with, and on the length read, which a negative entry counts
        # from: ``a[-1]`` is row 2 of a 3-vector, row 3 of a 4-vector.  The
        # array's id alone names nothing: another array may take a dead one's,
        # hence the weak reference; the dtype is not in it, the numbers are
        # compared as numbers; host arrays only, in the seed's own thread,
        # backend and size, as its structure is)
        index = ("index", id(key), shape[0])
        if known is not None:
            entry = _structure.recall(known, index)
            # (an array can be written in place between reads: the contents decide)
            found = (entry is not None and entry[0]() is key
                     and _backend.CPU.kernels.same_index(entry[1], key))
            _structure.looked_up(found)
            if found:
                return entry[2]
        contents = key.astype(jac.INDEX_DTYPE)  # (a copy; checked after it, in cache)
        rows = contents
        if rows.size and rows.min() < 0:  # (x[i - 1] at i = 0: numpy counts from the end)
            rows = rows + np.where(rows < 0, shape[0], 0)
        if rows.size == 0 or rows.min() >= 0:
            if known is not None:
                _structure.store(known, index, (weakref.ref(key), jac._readonly(contents),
                                                  jac._readonly(rows)), jac.MAX_INDEX_ROWS)
                structure.keep(contents, None if rows is contents else rows)
                jac.keep_runs(structure, rows)
            return rows
    return row_index(shape, xp)[key]


def _known_copy(structure, key, length):
    """The rows of index array ``key`` into an axis of ``length`` that
    ``structure`` keeps (see :func:`_rows_read`), or None."""
    entry = structure.index_rows.get(("index", id(key), length))
    return None if entry is None or entry[0]() is not key else entry[2]


def _forwards_in(obj):
    """The forward values in ``obj``, lists, tuples and object arrays searched."""
    if isinstance(obj, value):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _forwards_in(item)
    elif type(obj) is np.ndarray and obj.dtype == object:
        for item in obj.flat:
            yield from _forwards_in(item)


def object_holder(obj):
    """A 0-d object array holding ``obj``: numpy's "not an array" answer to
    ``__array__``, which makes ``np.array([...])`` of such objects an object
    array of them."""
    holder = np.empty((), dtype=object)
    holder[()] = obj
    return holder


def array_namespace(api_version=None):
    """:mod:`sparsegrad.array_api`, for the standard's ``api_version`` (None: the latest)."""
    from . import array_api   # (the namespace is built on this module)
    if api_version not in (None, "2021.12", "2022.12", "2023.12", array_api.__array_api_version__):
        raise ValueError("sparsegrad.array_api implements the array API standard %s, not "
                         "%r" % (array_api.__array_api_version__, api_version))
    return array_api


def _holds_forward(obj):
    return next(_forwards_in(obj), None) is not None


def coerce(obj):
    """A list, tuple or object array holding forward values, stacked into one
    forward value.

    numpy would turn the first two into an object array and drop the
    derivatives; anything else is returned unchanged.  An object array
    (``np.array([x[1] - x[0] ** 2, 1 - x[0]])``) holds forward values and
    numbers of one shape, stacked along its own axes; other objects in it
    raise, see :func:`stack_objects`.
    """
    if isinstance(obj, value) or not _holds_forward(obj):
        return obj
    if type(obj) is np.ndarray:
        return stack_objects(obj)
    return np.stack([coerce(o) if isinstance(o, (list, tuple, value, np.ndarray))
                     else _backend.asarray(o) for o in obj])


def stack_objects(array):
    """The forward value an object array of forward values and numbers holds:
    its elements (of one shape) stacked, of shape ``array.shape +`` theirs.

    Raises
    ------
    TypeError
        For an element that is neither a forward value nor a number (or a
        numeric array), naming the types the array holds.
    """
    items = array.ravel().tolist()
    for item in items:
        if not (isinstance(item, (value, numbers.Number, np.generic))
                or (type(item) is np.ndarray and item.dtype.kind in "biufc")):
            raise TypeError("an object array of forward values holds %s; it may hold only "
                            "forward values and numbers" % held_types(array))
    stacked = np.stack([item if isinstance(item, value) else _backend.asarray(item)
                        for item in items])
    return stacked.reshape(array.shape + stacked.shape[1:])


def held_types(array):
    """The names of the types of an object array's elements, sorted: ``"float, str"``."""
    return ", ".join(sorted({type(item).__name__ for item in array.ravel().tolist()}))


def weak_result_type(values):
    """numpy's result dtype of ``values``: arrays and forward values by their dtype,
    Python numbers weak, as numpy treats them (``0.0`` next to float32 keeps float32)."""
    return np.result_type(*[v if type(v) in (int, float, complex) else nvalue(v)
                            for v in values])


def plain(x):
    """The operand numpy should see: a forward value's array; anything else unchanged.

    Python scalars stay Python scalars so that numpy's weak-scalar promotion
    keeps float32 float32.
    """
    return x._value if isinstance(x, value) else x


def is_forward(x):
    return isinstance(x, value)


def nvalue(x):
    """The value of a forward value; ndarrays unchanged (but an object array of
    forward values: the value of their stack, see :func:`coerce`); anything
    else through ``np.asarray``."""
    if isinstance(x, value):
        return x.value
    if isinstance(x, np.ndarray):  # (subclasses kept, as numpy would see them)
        if x.dtype == object and _holds_forward(x):
            return stack_objects(x).value
        return x
    return _backend.asarray(x)


def number(x):
    """A 0-d numpy array as the numpy scalar it holds; anything else unchanged.

    CuPy mixes numpy scalars with its arrays but refuses 0-d numpy arrays, which
    ``np.asarray(2.0)`` makes of a Python number.

    >>> number(np.asarray(2.0)), number(np.ones(2))
    (np.float64(2.0), array([1., 1.]))
    """
    return x[()] if type(x) is np.ndarray and x.ndim == 0 else x


def make(array, jacobian):
    """A forward value from an array (or a :class:`Deferred` one) and a Jacobian
    (or :class:`Assembly`)."""
    if type(array) is not Deferred:
        array = _backend.asarray(array)  # (device arrays stay on their device)
    return (_array_value if array.ndim else value)(array, jacobian)


def jacobian_of(x):
    return x._jacobian


def broadcast_jacobian(x, shape):
    """Jacobian of ``np.broadcast_to(x, shape)``: a row gather, shared by every
    broadcast of the same shapes (``u - u[0]``: the gather is cached, so
    repeated evaluations name the same matrices and merge by plans)."""
    shape = tuple(shape)
    if x._raw.shape == shape:  # (the common case: no broadcast; a deferred value's shape)
        return x._jacobian
    rows = np.broadcast_to(row_index(x.shape), shape)
    # (the rows are decided by the two shapes: an exact key)
    return jac.take_rows(x._jacobian, rows, ("broadcast", x.shape, shape))


def check_real_axis(name, forwards):
    """Refuse a function without complex derivative (``abs``, ``conj``, the real
    part...) of complex values of a complex seed off the real axis, naming
    ``name``.

    On the real axis such a function has the derivative of the real function's
    analytic continuation (the complex-step convention), which its rule gives;
    a real seed's Jacobians take the conjugate instead and are never refused.
    """
    for x in forwards:
        if x._jacobian.seed.complex and x.dtype.kind == "c" and _off_real_axis(x._value):
            raise _not_complex_differentiable(name)


def _off_real_axis(array):
    # (nan counts as off: it has no side of the axis to continue from)
    return bool((array.imag != 0).any())


def _not_complex_differentiable(name):
    return UnsupportedOperationError(
        "%s of a complex value is not complex-differentiable off the real axis, and "
        "the seed is complex; seed the real and imaginary parts as real numbers "
        "instead" % name)


def cast_input(a, dtype, name):
    """``a`` cast to ``dtype`` first, as numpy's reductions (``sum``, ``prod``,
    ``ufunc.reduce``...) with ``dtype=`` cast their input: the real parts of
    complex values for a real dtype (whose Jacobian is the real part of theirs;
    refused for a complex seed, naming ``name``), none for an integer dtype."""
    if dtype is None:
        return a
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc":
        raise unsupported(name, "dtype=%s" % dtype)
    if not isinstance(a, value):
        return np.asarray(a).astype(dtype)
    if dtype == a.dtype:
        return a
    if a.dtype.kind == "c" and dtype.kind != "c":
        check_real_axis(name + " to a real dtype", [a])
    return a.astype(dtype)


def cast_is_constant(name, seed, result_kind, forwards):
    """Whether a result of dtype kind ``result_kind``, computed from the forward
    values ``forwards`` (a ``dtype=`` cast), is piecewise constant.

    An inexact value cast to an integer or bool result is, as ``astype(int)``.
    A complex value cast to a real result is its real part, which has no
    complex derivative: refused, naming ``name``, when the seed is complex and
    a value lies off the real axis (for a real seed the real part of the
    Jacobian is exact; on the axis the real part is the identity).

    >>> x = make(np.array([0.5]), jac.identity(jac.Seed(1, False, False, False)))
    >>> cast_is_constant("f", x._jacobian.seed, "i", [x])
    True
    """
    if result_kind == "f" and seed.complex:
        check_real_axis(name, forwards)
    return result_kind not in "fc" and any(x.dtype.kind in "fc" for x in forwards)


# the protocol implementations are built on the names above and import this
# module: imported last, once, instead of inside every protocol call
from . import _functions, _ufuncs  # noqa: E402  (circular by design)
from .sparse import SparseMatrix  # noqa: E402

# types with their own __array_function__ that handle numpy functions of a
# forward value and themselves
_FOREIGN = frozenset([SparseMatrix])
