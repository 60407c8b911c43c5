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

import numpy as np

__all__ = ["Deferred", "compute"]

#: ``Deferred(contiguous=...)`` of a result whose strides are in C order, not
#: necessarily C-contiguous (a basic read of a C-contiguous array)
IN_C_ORDER = "in C order"


class Deferred:
    """``function(*args)`` not computed yet; ``args`` may hold other ``Deferred``.

    ``shape`` and ``dtype`` are those of the result, known without computing
    it (numpy's own rules for the operation); :meth:`compute` checks them.
    """

    __slots__ = ("function", "args", "shape", "ndim", "dtype", "contiguous", "_result")

    def __init__(self, function, args, shape, dtype, contiguous=False):
        self.function = function
        # (the result's layout: True, a C-contiguous array; IN_C_ORDER, strides
        # in C order; False, not known.  Each rule that makes a Deferred says it
        # from its operands' layouts, known when they were made (see
        # in_c_order): a reshape asks it of one value, never of the expression
        # below it)
        self.contiguous = contiguous
        self.args = tuple(args)
        self.shape = tuple(shape)
        # (an attribute: asked of every deferred operand, as of an array's)
        self.ndim = len(self.shape)
        self.dtype = np.dtype(dtype)
        self._result = None

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


def c_contiguous(array):
    """Whether ``array``, or a :class:`Deferred` one once computed, is C-contiguous;
    False where it is not known.

    >>> c_contiguous(Deferred(np.exp, (np.ones((2, 3)),), (2, 3), np.float64, True))
    True
    """
    if type(array) is Deferred:
        if array.contiguous is True:
            return True
        array = array._result
        if array is None:
            return False
    return bool(array.flags.c_contiguous)


def in_c_order(arrays):
    """Whether each array among ``arrays`` (numpy arrays and :class:`Deferred`
    ones; numbers are skipped) has its strides in C order; False where that is
    not known.

    A ufunc of operands of one shape, or a data movement or concatenation, of
    arrays in C order gives a C-contiguous array (numpy lays the result out as
    its operands are).

    >>> in_c_order([np.ones((2, 3))[:, 1:], 2.0])
    True
    >>> in_c_order([np.ones((2, 3)).T])
    False
    """
    for array in arrays:
        if type(array) is Deferred:
            if array.contiguous is False:
                result = array._result  # (computed meanwhile: its own strides say)
                if result is None or not _strides_in_c_order(result):
                    return False
        elif type(array) is np.ndarray:
            if array.ndim > 1 and not _strides_in_c_order(array):  # (one stride: in order)
                return False
    return True


def _strides_in_c_order(array):
    # (a slice's step k < n along an axis multiplies its stride by less than the
    # next outer stride is, integers drop axes: a basic read of a C-contiguous
    # array passes; so does a C-contiguous array, asked without making its flags)
    outer = None
    for stride, n in zip(array.strides, array.shape):
        if n > 1:
            stride = abs(stride)
            if outer is not None and stride > outer:
                return False
            outer = stride
    return True
