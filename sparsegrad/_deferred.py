"""Values computed when first read: sparsity mode's values.

``forward.seed_sparsity`` propagates patterns, which never depend on values.
Its forward values hold a :class:`Deferred` array where an operation has a
deferred rule (the common case of ufuncs, basic-index reads, data movement):
the numpy call with its inputs, and the shape and dtype it will give.  Reading
the value (``.value``, a comparison, a predicate, ``branch``, a write, any
function without a deferred rule) computes it, and everything it depends on,
once.  A pattern that nobody reads the values of costs no numpy arithmetic.

Inputs are kept as they were at the call: forward values' arrays (their
owners copy before writing into them) and copies of the caller's arrays.

>>> import numpy as np
>>> d = Deferred(np.multiply, (np.arange(3.0), 2.0), (3,), np.dtype(np.float64))
>>> d.shape, d.compute()
((3,), array([0., 2., 4.]))
"""
import math
import operator

import numpy as np

__all__ = ["Deferred", "compute"]

#: ``Deferred(contiguous=...)`` of a result that is C-contiguous when every
#: operand of at least one dimension has its strides in C order
IF_OPERANDS_IN_C_ORDER = "if operands in C order"


class Deferred:
    """``function(*args)`` not computed yet; ``args`` may hold other ``Deferred``.

    ``shape`` and ``dtype`` are those of the result, known without computing
    it (numpy's own rules for the operation); :meth:`compute` checks them.
    """

    __slots__ = ("function", "args", "shape", "dtype", "contiguous", "_result")

    def __init__(self, function, args, shape, dtype, contiguous=False):
        self.function = function
        # (whether the result will be a new C-contiguous array: True, False, or
        # IF_OPERANDS_IN_C_ORDER for data movement and concatenations, which
        # give one when their operands are in C order: asked only when needed,
        # then kept, see c_contiguous)
        self.contiguous = contiguous
        self.args = tuple(args)
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self._result = None

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def compute(self):
        """The array, computed once (and the inputs let go).

        Iterative, not recursive: a loop of many operations in the caller's
        code makes a chain longer than Python's recursion limit.
        """
        stack = [self]
        while stack:
            node = stack[-1]
            # (local copies: another thread reading the same value may finish this
            # node meanwhile and let go of its function and inputs)
            function, args = node.function, node.args
            if node._result is not None or function is None or args is None:
                stack.pop()
                continue
            pending = [a for a in args if type(a) is Deferred and a._result is None]
            if pending:
                stack.extend(pending)
                continue
            result = function(*[a._result if type(a) is Deferred else a for a in args])
            if isinstance(result, np.generic):
                # an integer read of an array gives a numpy scalar: the value is a
                # 0-d array, as computed at once (writable, with array semantics)
                result = np.asarray(result)
            if getattr(result, "shape", None) != node.shape or result.dtype != node.dtype:
                raise RuntimeError(
                    "sparsegrad internal error: a deferred value came out as %s %s, "
                    "expected %s %s" % (getattr(result, "shape", None),
                                        getattr(result, "dtype", type(result)),
                                        node.shape, node.dtype))
            if node._result is None:  # (first come: one array for every reader)
                node._result = result
            node.function = node.args = None
            stack.pop()
        return self._result


def compute(array):
    """``array`` itself, or the array a :class:`Deferred` stands for."""
    return array.compute() if type(array) is Deferred else array


def c_contiguous(array, depth=0):
    """Whether ``array``, or a :class:`Deferred` one once computed, is C-contiguous.

    Known without computing for a result made ``contiguous`` and for a ufunc of operands of its result's shape whose
    strides are in C order (numpy then lays the result out in C order); False
    where it is not known.

    >>> c_contiguous(Deferred(np.exp, (np.ones((2, 3))[:, 1:],), (2, 2), np.float64))
    True
    """
    if type(array) is not Deferred:
        return bool(array.flags.c_contiguous)
    if array._result is not None:
        return bool(array._result.flags.c_contiguous)
    if array.contiguous is True:
        return True
    if array.contiguous is _NOT_KNOWN or depth > 32:
        return False
    # (kept on the value: operands shared by several reads are looked at once.
    # A False may become True once operands are computed; it only sends a
    # reshape to the way that asks numpy, which is always right)
    known = _c_contiguous(array, depth)
    array.contiguous = True if known else _NOT_KNOWN
    return known


#: ``Deferred.contiguous`` once :func:`c_contiguous` found it not known
_NOT_KNOWN = "not known"


def _c_contiguous(array, depth):
    if array.contiguous is IF_OPERANDS_IN_C_ORDER:
        return all(c_ordered(v, depth + 1) for v in array.args if getattr(v, "ndim", 0))
    if not isinstance(array.function, np.ufunc):
        return False
    for operand in array.args:
        if not getattr(operand, "shape", ()):
            continue  # (a scalar)
        if operand.shape != array.shape:
            return False  # (broadcast: numpy's layout of the result is not followed here)
        if not c_ordered(operand, depth + 1):
            return False
    return True


def c_ordered(array, depth=0):
    """Whether the strides of ``array`` (computed or not) are in C order; False
    where it is not known."""
    if type(array) is Deferred and array._result is None:
        if array.function is operator.getitem:
            # (a gather makes a new array; a basic read of a C-contiguous array is
            # in C order: a slice's step k < n along an axis multiplies its
            # stride by less than the next outer stride is, integers drop axes)
            parent, key = array.args
            return type(key) is np.ndarray or c_contiguous(parent, depth)
        return c_contiguous(array, depth)
    elif type(array) is Deferred:
        array = array._result
    if array.flags.c_contiguous:
        return True
    strides = [abs(s) for s, n in zip(array.strides, array.shape) if n > 1]
    return strides == sorted(strides, reverse=True)
