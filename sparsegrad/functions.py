"""Functions of the sparsegrad 0.0.15 API, on forward values and plain numbers alike.

Every name is a thin layer over numpy: the elementwise functions *are*
numpy's ufuncs, and ``where``, ``sum``, ``dot`` and ``hstack`` call numpy
functions that forward values implement through numpy's protocols.  With
plain numeric arguments each function behaves exactly like numpy.
:func:`asdifferentiable` and :func:`apply` add user-defined elementwise
functions with hand-written partial derivatives.

Note that ``from sparsegrad.functions import *`` binds ``sum`` and ``abs`` to
the numpy versions, shadowing Python's builtins (as in 0.0.15).

>>> import numpy as np
>>> from sparsegrad import forward
>>> from sparsegrad.functions import exp, where, hstack
>>> x = forward.seed(np.array([-1.0, 2.0]))
>>> y = hstack([where(x > 0, exp(x), 0.0), 1.0])
>>> y.dvalue.toarray().round(3)
array([[0.   , 0.   ],
       [0.   , 7.389],
       [0.   , 0.   ]])
"""
import numpy as np
import scipy.sparse

from . import _backend
from . import _jacobian as jac
from ._value import value, nvalue, make, broadcast_jacobian, coerce, weak_result_type
from .sparse import SparseMatrix

__all__ = ["where", "dot", "sum", "hstack", "stack", "branch", "apply", "asdifferentiable",
           "exp", "log", "sqrt", "abs", "sign", "reciprocal", "square",
           "sin", "cos", "tan", "arcsin", "arccos", "arctan",
           "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "expm1", "log1p"]

# ---- elementwise: numpy's own ufuncs (forward values implement __array_ufunc__) ----
exp, log, sqrt, abs, sign = np.exp, np.log, np.sqrt, np.abs, np.sign
reciprocal, square = np.reciprocal, np.square
sin, cos, tan, arcsin, arccos, arctan = np.sin, np.cos, np.tan, np.arcsin, np.arccos, np.arctan
sinh, cosh, tanh = np.sinh, np.cosh, np.tanh
arcsinh, arccosh, arctanh = np.arcsinh, np.arccosh, np.arctanh
expm1, log1p = np.expm1, np.log1p


# ---- selection and linear maps ------------------------------------------------------
def where(cond, a, b):
    """Elementwise ``a`` where ``cond`` holds, else ``b`` (:func:`numpy.where`).

    Jacobian rows come from the selected branch only: an ``inf`` or ``nan`` in
    the branch that is not selected never reaches the result.  In sparsity
    mode the pattern is the union of both branches.

    Parameters
    ----------
    cond : bool or array_like of bool
        A Python bool, numpy bool or bool array (a forward value contributes
        its value).
    a, b : array_like or forward value
        The branches; broadcast against ``cond`` and each other.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> x = forward.seed(np.array([1.0, -1.0]))
    >>> where(x > 0, x, -2 * x).dvalue.toarray()
    array([[ 1.,  0.],
           [ 0., -2.]])
    >>> where([True, False], 1.0, 2.0)
    array([1., 2.])
    """
    return np.where(cond, coerce(a), coerce(b))


def sum(x):
    """Sum of all elements of ``x`` (:func:`numpy.sum` with ``axis=None``).

    For a forward value the result is a 0-d forward value whose Jacobian has
    shape ``(1, n)`` (a 0-d array for a scalar seed).

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> sum(forward.seed(np.array([1.0, 2.0])) ** 2).dvalue.toarray()
    array([[2., 4.]])
    >>> sum([1, 2, 3])
    np.int64(6)
    """
    return np.sum(x)


def dot(A, x):
    """Matrix-vector product ``A·x`` with a constant matrix ``A``.

    Parameters
    ----------
    A : scipy.sparse matrix or array, or ndarray
        A constant (not a forward value of the seed).
    x : forward value or array_like
        For a forward value the result has Jacobian ``A·J``; for numeric
        ``x`` the result is ``A.dot(x)``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse
    >>> from sparsegrad import forward
    >>> A = scipy.sparse.csr_matrix([[1.0, 2.0], [0.0, 3.0]])
    >>> dot(A, forward.seed(np.ones(2))).dvalue.toarray()
    array([[1., 2.],
           [0., 3.]])
    >>> dot(A, np.ones(2))
    array([3., 3.])
    """
    x = coerce(x)
    if isinstance(A, SparseMatrix):  # (np.dot would see it as one opaque element)
        return A @ x
    if isinstance(x, value) or isinstance(A, value):
        return np.dot(A, x)
    if scipy.sparse.issparse(A):
        return A.dot(x)
    return np.dot(A, x)


# ---- concatenation ---------------------------------------------------------------
def hstack(arrays):
    """Concatenate 1-d and scalar pieces into one 1-d vector.

    A scalar piece counts as one element; empty pieces are allowed.  Forward
    and numeric pieces may be mixed: numeric pieces get zero Jacobian rows,
    and the result is a forward value if any piece is one.

    Parameters
    ----------
    arrays : iterable
        The pieces (a list, tuple or generator).

    Returns
    -------
    ndarray or forward value
        1-d; an empty float64 array when there are no pieces.

    Raises
    ------
    ValueError
        For a piece with more than one dimension.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> x = forward.seed(np.array([1.0, 2.0]))
    >>> y = hstack([x[1], np.zeros(0), 5.0, x])
    >>> y.value
    array([2., 5., 1., 2.])
    >>> y.dvalue.toarray()
    array([[0., 1.],
           [0., 0.],
           [1., 0.],
           [0., 1.]])
    >>> hstack([1, np.array([2, 3])])
    array([1, 2, 3])
    """
    pieces = [np.atleast_1d(coerce(piece)) for piece in arrays]
    for piece in pieces:
        if np.ndim(piece) != 1:
            raise ValueError("sparsegrad hstack/stack joins 1-d and scalar pieces; got a "
                             "piece of shape %s (use np.concatenate for n-d arrays)"
                             % (np.shape(piece),))
    if not pieces:
        return np.zeros(0)
    return np.concatenate(pieces)


def stack(*arrays):
    """``hstack(arrays)``: the pieces given as separate arguments.

    Examples
    --------
    >>> import numpy as np
    >>> stack(1.0, np.array([2.0, 3.0]))
    array([1., 2., 3.])
    """
    return hstack(arrays)


# ---- branch ------------------------------------------------------------------------
def branch(cond, iftrue, iffalse):
    """Evaluate ``iftrue`` or ``iffalse`` only where each is selected by ``cond``.

    Parameters
    ----------
    cond : bool or array of bool
        A scalar condition selects one of the functions, which is called with
        ``None``.  With an array condition ``iftrue(idx)`` is called with the
        indices of the elements where ``cond`` holds and ``iffalse(idx)``
        with the others (a function is not called when it selects nothing);
        each returns values for just those elements (a scalar is broadcast).
        For a 1-d ``cond`` the indices are an int array, for an n-d ``cond``
        the tuple of index arrays of :func:`numpy.nonzero`.
    iftrue, iffalse : callable

    Returns
    -------
    The merged result, of ``cond``'s shape for an array condition: a forward
    value if either function returned one, else an ndarray of the common
    dtype of both results.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> x = forward.seed(np.array([4.0, -1.0]))
    >>> y = branch(x.value > 0, lambda i: np.sqrt(x[i]), lambda i: 0.0)
    >>> y.value
    array([2., 0.])
    >>> y.dvalue.toarray()
    array([[0.25, 0.  ],
           [0.  , 0.  ]])
    >>> branch(True, lambda _: "yes", lambda _: "no")
    'yes'
    """
    cond = nvalue(cond)
    if cond.ndim == 0:
        return iftrue(None) if cond else iffalse(None)
    selected = cond.astype(bool, copy=False)
    computed = []
    for mask, function in ((selected, iftrue), (~selected, iffalse)):
        if mask.any():
            index = np.nonzero(mask)
            index = index[0] if mask.ndim == 1 else index
            computed.append((index, coerce(function(index))))
    forwards = [v for _, v in computed if isinstance(v, value)]
    # (a branch returning 0.0 keeps float32)
    dtype = weak_result_type([v for _, v in computed]) if computed else np.float64
    if forwards:
        result = np.zeros(cond.shape, dtype=dtype, like=forwards[0])
    else:
        result = np.zeros(cond.shape, dtype=dtype)
    for index, v in computed:
        result[index] = v
    return result


# ---- user-defined elementwise functions ------------------------------------------------
class differentiable:
    """A user-defined elementwise function, made by :func:`asdifferentiable`.

    Calling it, ``fn(*args)``, is ``apply(fn, args)``.

    Attributes
    ----------
    f, deriv, f_df : callable or None
        As given to :func:`asdifferentiable`.
    """

    def __init__(self, f=None, deriv=None, f_df=None):
        if f is None and f_df is None:
            raise TypeError("asdifferentiable needs f (with deriv) or f_df")
        if deriv is not None and f is None:
            raise TypeError("asdifferentiable: deriv given without f")
        self.f, self.deriv, self.f_df = f, deriv, f_df

    def __call__(self, *args):
        return apply(self, args)

    def __repr__(self):
        name = getattr(self.f or self.f_df, "__name__", "function")
        return "sparsegrad.functions.asdifferentiable(%s)" % name

    def value_and_partials(self, args):
        """``(value, partials)`` for plain numeric ``args``; ``partials`` are callables."""
        if self.f_df is not None:
            result, partials = self.f_df(args)
        else:
            result = self.f(*args)
            partials = self.deriv(args, result)
        partials = list(partials)
        if len(partials) != len(args):
            raise ValueError("asdifferentiable: %d partial derivatives for %d arguments"
                             % (len(partials), len(args)))
        return result, partials


def asdifferentiable(f=None, deriv=None, f_df=None):
    """Make a user-defined elementwise function differentiable.

    Parameters
    ----------
    f : callable, optional
        ``f(*args)`` gives the value from plain numeric arguments.
    deriv : callable, optional
        ``deriv(args, value)`` returns an iterable with one zero-argument
        callable per argument, each returning the elementwise partial
        derivative with respect to that argument (a scalar or an array that
        broadcasts to the value's shape).  Only the partials of forward
        arguments are called.
    f_df : callable, optional
        ``f_df(args)`` returns ``(value, partials)`` in one call, instead of
        ``f`` and ``deriv``.

    If only ``f`` is given, it is applied to the arguments as they are, so it
    must itself be written with operations that accept forward values.

    Returns
    -------
    differentiable
        Use with :func:`apply`, or call it directly.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> cube = asdifferentiable(lambda x: x ** 3,
    ...                         lambda args, value: [lambda: 3 * args[0] ** 2])
    >>> apply(cube, (forward.seed(np.array([1.0, 2.0])),)).dvalue.toarray()
    array([[ 3.,  0.],
           [ 0., 12.]])
    >>> cube(2.0)
    8.0
    """
    return differentiable(f, deriv, f_df)


def apply(function, args):
    """Apply a function made by :func:`asdifferentiable` to the tuple ``args``.

    The result is a forward value if any argument is one, with Jacobian
    ``sum_i diag(partial_i) J_i`` (each argument's Jacobian broadcast to the
    value's shape); otherwise it is the function's plain value.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> mul = asdifferentiable(f_df=lambda a: (a[0] * a[1], [lambda: a[1], lambda: a[0]]))
    >>> x = forward.seed(np.array([2.0, 3.0]))
    >>> apply(mul, (x, 10.0)).dvalue.toarray()
    array([[10.,  0.],
           [ 0., 10.]])
    """
    if not isinstance(function, differentiable):
        raise TypeError("apply needs a function made by asdifferentiable, not %s"
                        % type(function).__name__)
    args = tuple(coerce(a) for a in args)
    forwards = [(i, x) for i, x in enumerate(args) if isinstance(x, value)]
    if not forwards:
        if function.f is not None:
            return function.f(*args)
        return function.f_df(args)[0]
    if function.f_df is None and function.deriv is None:
        return function.f(*args)
    result, partials = function.value_and_partials(tuple(nvalue(a) for a in args))
    result = _backend.asarray(result)
    terms = []
    for i, x in forwards:
        partial = _backend.asarray(partials[i]())
        if partial.ndim:
            partial = np.broadcast_to(partial, result.shape).ravel()
        else:
            partial = partial[()]
        terms.append(jac.scale(broadcast_jacobian(x, result.shape), partial))
    return make(result, jac.add(terms))
