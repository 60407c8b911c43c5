"""The array API namespace of forward values: what ``x.__array_namespace__()`` returns.

Code written for the array API standard starts with ``xp =
array_namespace(x)`` and calls ``xp.sum``, ``xp.exp``, ``xp.concat``... on
``x``. numpy 2's main namespace implements the standard's names, and its
functions dispatch to sparsegrad's rules when given forward values, so this
namespace is numpy's, except where numpy cannot see a forward value:

* ``asarray`` returns forward values as they are (numpy's would make an
  object array), and stacks lists and object arrays that hold them;
* ``zeros_like``, ``ones_like``, ``full_like`` and ``empty_like`` of a forward
  value make an assembly target, a forward value of constant values that
  writes of forward values go into (numpy's are value queries, plain arrays);
* ``astype`` is the forward value's method.

The other creation functions (``zeros``, ``arange``, ``eye``...) take no array
and make plain arrays: constants, as in numpy. Forward values live on the CPU
(``x.device == "cpu"``); the ``linalg`` extension is numpy's ``linalg`` (its
functions with derivative rules take forward values), ``fft`` is absent, and
``special`` holds ``scipy.special``'s ufuncs.

SciPy consults a forward value's namespace when it is run with the
environment variable ``SCIPY_ARRAY_API=1`` (set before SciPy is imported);
otherwise its array-API functions convert their arguments with numpy.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.array([1.0, 2.0, 3.0]))
>>> xp = x.__array_namespace__()
>>> y = xp.sum(xp.exp(xp.asarray(x)) * 2.0)
>>> print(np.allclose(y.dvalue.toarray(), 2 * np.exp([[1.0, 2.0, 3.0]])))
True
>>> target = xp.zeros_like(x)
>>> target[1:] = x[:-1] ** 2
>>> target.dvalue.toarray()
array([[0., 0., 0.],
       [2., 0., 0.],
       [0., 4., 0.]])
"""
import sys

import numpy as np
import scipy.special as _special

from ._ufunc_rules import SpecialUfuncs as _SpecialUfuncs
from ._value import coerce as _coerce, _holds_forward

__all__ = ["asarray", "astype", "zeros_like", "ones_like", "full_like", "empty_like"]

__array_api_version__ = np.__array_api_version__

#: the names of the standard (2024.12) that numpy's main namespace provides as
#: they are: functions that dispatch on forward values, dtypes and constants
_FROM_NUMPY = (
    # elementwise
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh",
    "bitwise_and", "bitwise_left_shift", "bitwise_invert", "bitwise_or",
    "bitwise_right_shift", "bitwise_xor", "ceil", "clip", "conj", "copysign", "cos",
    "cosh", "divide", "equal", "exp", "expm1", "floor", "floor_divide", "greater",
    "greater_equal", "hypot", "imag", "isfinite", "isinf", "isnan", "less",
    "less_equal", "log", "log1p", "log2", "log10", "logaddexp", "logical_and",
    "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "multiply",
    "negative", "nextafter", "not_equal", "positive", "pow", "real", "reciprocal",
    "remainder", "round", "sign", "signbit", "sin", "sinh", "square", "sqrt",
    "subtract", "tan", "tanh", "trunc",
    # creation without an array argument
    "arange", "empty", "eye", "full", "linspace", "meshgrid", "ones", "tril", "triu",
    "zeros", "from_dlpack",
    # data types
    "can_cast", "finfo", "iinfo", "isdtype", "result_type",
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128",
    # manipulation, searching, sets, sorting, statistics, utilities
    "broadcast_arrays", "broadcast_to", "concat", "expand_dims", "flip", "moveaxis",
    "permute_dims", "repeat", "reshape", "roll", "squeeze", "stack", "tile", "unstack",
    "argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where",
    "unique_all", "unique_counts", "unique_inverse", "unique_values", "argsort", "sort",
    "cumulative_sum", "cumulative_prod", "max", "mean", "min", "prod", "std", "sum",
    "var", "all", "any", "diff",
    # linear algebra, indexing
    "matmul", "matrix_transpose", "tensordot", "vecdot", "take", "take_along_axis",
    "linalg",
    # constants and inspection
    "e", "inf", "nan", "newaxis", "pi", "__array_namespace_info__",
)
globals().update({name: getattr(np, name) for name in _FROM_NUMPY})
_THIS = sys.modules[__name__]

#: ``scipy.special``'s ufuncs (the proposed ``special`` extension of the standard,
#: which SciPy's special functions call on a namespace that has one)
special = _SpecialUfuncs(_special)


def _is_ours(x):
    """Whether ``x`` is a forward value (or a light value of a recording) of this namespace."""
    namespace = getattr(type(x), "__array_namespace__", None)
    return namespace is not None and namespace(x) is _THIS


def _check_device(device, name):
    if device not in (None, "cpu"):
        raise ValueError("sparsegrad.array_api.%s: forward values live on the CPU, "
                         "not on device %r" % (name, device))


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """``obj`` as an array: a forward value as it is (a copy for ``copy=True``,
    converted for ``dtype``); a list, tuple or object array holding forward
    values stacked into one; anything else by ``numpy.asarray``."""
    _check_device(device, "asarray")
    if not _is_ours(obj) and type(obj) in (list, tuple, np.ndarray) and _holds_forward(obj):
        obj, copy = _coerce(obj), False
    if not _is_ours(obj):
        return np.asarray(obj, dtype=dtype, copy=copy)
    if copy is False and dtype is not None and np.dtype(dtype) != obj.dtype:
        raise ValueError("sparsegrad.array_api.asarray: copy=False, but converting to "
                         "%s needs a copy" % np.dtype(dtype))
    if dtype is not None and np.dtype(dtype) != obj.dtype:
        return obj.astype(dtype)
    return obj.copy() if copy else obj


def astype(x, dtype, /, *, copy=True, device=None):
    """``x`` converted to ``dtype`` (the same ``x`` for ``copy=False`` and its dtype)."""
    _check_device(device, "astype")
    if not _is_ours(x):
        return np.astype(x, dtype, copy=copy)
    return x.astype(dtype, copy=copy)


def _like(fill):
    def like(x, /, *args, dtype=None, device=None):
        _check_device(device, like.__name__)
        if not _is_ours(x):
            return getattr(np, like.__name__)(x, *args, dtype=dtype)
        return fill(x.shape, *args, dtype=x.dtype if dtype is None else dtype, like=x)
    return like


zeros_like = _like(np.zeros)
zeros_like.__name__ = "zeros_like"
ones_like = _like(np.ones)
ones_like.__name__ = "ones_like"
full_like = _like(np.full)
full_like.__name__ = "full_like"
empty_like = _like(np.empty)
empty_like.__name__ = "empty_like"
for _function in (zeros_like, ones_like, full_like, empty_like):
    _function.__qualname__ = _function.__name__
    _function.__doc__ = (
        "numpy's ``%s``; of a forward value, an assembly target: a forward value of\n"
        "    that shape and dtype, of constant values, that writes of forward values go "
        "into." % _function.__name__)
del _function
