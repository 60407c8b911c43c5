"""Hessians of scalar functions: the Jacobian of the gradient.

The gradient is computed by reverse accumulation over numpy
(:mod:`sparsegrad._adjoint`) on forward values, so it is a forward value whose
Jacobian is the Hessian (forward over reverse); that Jacobian is made by the
same engines as every Jacobian (recorded or ``forward.seed``).  The matrix
returned is ``(H + H.T) / 2`` on the union of the two patterns: symmetric to
the last bit (``a + b`` and ``b + a`` round alike), and its pattern, like a
Jacobian's, depends on the program only.

>>> import numpy as np
>>> import sparsegrad
>>> H = sparsegrad.hessian(lambda x: np.sum(x[1:] * x[:-1]))(np.ones(3))
>>> H.toarray()
array([[0., 1., 0.],
       [1., 0., 1.],
       [0., 1., 0.]])
"""
import numpy as np
import scipy.sparse

from . import _adjoint
from . import _adjoint_functions  # noqa: F401  (registers the numpy functions)
from . import _api

__all__ = ["hessian", "value_grad_and_hessian", "hvp", "hessian_sparsity"]


def _single(argnums, name):
    positions, single = _api._normalize_argnums(argnums)
    if not single:
        raise ValueError("%s: argnums must be one int (the Hessian in one argument), not %r"
                         % (name, argnums))
    return positions[0]


def _stacked(f, position):
    """``g(*args, **kwargs)``: the gradient of ``f`` in argument ``position``,
    raveled, followed by ``f``'s value."""
    def gradient_then_value(*args, **kwargs):
        gradient, value = _adjoint.gradient_and_value(f, args, kwargs, position)
        return np.concatenate([np.reshape(gradient, -1), np.reshape(value, 1)])
    gradient_then_value.__qualname__ = "gradient_of_" + getattr(f, "__qualname__", "f")
    return gradient_then_value


def _leading_rows(matrix, n):
    """Rows ``0 .. n - 1`` of a canonical CSR matrix (sharing its arrays)."""
    end = int(matrix.indptr[n])
    return scipy.sparse.csr_matrix((matrix.data[:end], matrix.indices[:end],
                                    matrix.indptr[:n + 1]), shape=(n, matrix.shape[1]))


#: ``(indptr, indices, order)`` of the last symmetric pattern met: ``order``
#: takes each entry (i, j) to the place of (j, i).  Key: the pattern, compared
#: in full (copies of ``indptr`` and ``indices``); the order depends on nothing
#: else.  A Newton or optimisation loop meets one pattern at every call.
_last_order = (None, None, None)


def _transposed_order(indptr, indices, n):
    """The order of the entries of a square CSR pattern's transpose, read in
    the pattern's own order, or None when the pattern is not symmetric."""
    global _last_order
    last_indptr, last_indices, order = _last_order
    if (last_indptr is not None and np.array_equal(last_indptr, indptr)
            and np.array_equal(last_indices, indices)):
        return order
    nnz = len(indices)
    places = scipy.sparse.csr_matrix((np.arange(1, nnz + 1), indices, indptr),
                                     shape=(n, n)).T.tocsr()
    places.sort_indices()
    if not (np.array_equal(places.indptr, indptr) and np.array_equal(places.indices, indices)):
        return None
    order = places.data - 1
    _last_order = (indptr.copy(), indices.copy(), order)
    return order


def symmetric(matrix):
    """``(matrix + matrix.T) / 2`` of a square canonical CSR matrix, on the
    union of both patterns with stored zeros kept (scipy's sum drops them);
    for a boolean matrix, the union of the patterns."""
    n = matrix.shape[0]
    order = _transposed_order(matrix.indptr, matrix.indices, n)
    if order is not None:
        if matrix.dtype == bool:
            return matrix
        data = np.add(matrix.data, matrix.data[order])
        data *= 0.5
        # (the pattern's arrays are shared, as the Jacobians of one recorded
        # path share theirs)
        return scipy.sparse.csr_matrix((data, matrix.indices, matrix.indptr), shape=(n, n))
    coo = matrix.tocoo()
    rows = np.concatenate([coo.row, coo.col])
    columns = np.concatenate([coo.col, coo.row])
    data = np.concatenate([coo.data, coo.data])
    result = scipy.sparse.csr_matrix((data, (rows, columns)), shape=matrix.shape)
    result.sum_duplicates()
    if matrix.dtype == bool:
        result.data[:] = True
    else:
        result.data *= 0.5
    return result


def value_grad_and_hessian(f, argnums=0, *, format="matrix", trace=True):
    """A function returning ``f(x)``, its gradient and its exact sparse Hessian.

    Parameters
    ----------
    f : callable
        ``f(x, *args, **kwargs)``, ordinary numpy code returning one real
        number (a 0-d array, an array of one element or a Python float).
    argnums : int, optional
        The positional argument differentiated (default 0); every other
        argument is passed to ``f`` unchanged.
    format : {"matrix", "array", "dense"}, optional
        As in :func:`sparsegrad.value_and_jacobian`.
    trace : bool, optional
        As in :func:`sparsegrad.value_and_jacobian`: the Hessian of the
        gradient's program, recorded where it can be.

    Returns
    -------
    callable
        ``value_grad_and_hessian_of_f(*args, **kwargs) -> (value, gradient,
        H)``: ``value`` a float64 number, ``gradient`` an ndarray of the
        argument's shape, ``H`` of shape ``(x.size, x.size)`` (rows and
        columns follow ``x.ravel()``), symmetric to the last bit, with the
        stored zeros of a pattern that depends on ``f``'s program only.

    Raises
    ------
    sparsegrad.UnsupportedOperationError
        For numpy functions or arguments the reverse sweep has no rule for
        (named in the message), complex values, and writes numpy would make
        through views (see ``docs/hessians.md``).
    ValueError
        When ``f`` returns more than one number.

    Examples
    --------
    >>> import numpy as np
    >>> value, g, H = value_grad_and_hessian(lambda x: np.sum(np.exp(x)))(np.zeros(2))
    >>> float(value), g, H.toarray()
    (2.0, array([1., 1.]), array([[1., 0.],
           [0., 1.]]))
    """
    name = "sparsegrad.value_grad_and_hessian"
    return _value_grad_and_hessian(f, argnums, format, trace, name)


def _value_grad_and_hessian(f, argnums, format, trace, name):
    position = _single(argnums, name)
    format = _api._check_format(format)
    jacobian = _api._value_and_jacobian(_stacked(f, position), position, "matrix", False,
                                        name, trace)

    def value_grad_and_hessian_of_f(*args, **kwargs):
        stacked, J = jacobian(*args, **kwargs)
        n = stacked.size - 1
        shape = np.shape(args[position])
        H = symmetric(_leading_rows(J, n))
        return (stacked[n], stacked[:n].reshape(shape),
                _api._refusing(_api._convert(H, format)))

    _api._name(value_grad_and_hessian_of_f, f, "value_grad_and_hessian", jacobian)
    return value_grad_and_hessian_of_f


def hessian(f, argnums=0, *, format="matrix", trace=True):
    """A function returning the exact sparse Hessian of a scalar function ``f``.

    Same parameters as :func:`value_grad_and_hessian`; the returned function
    gives only the Hessian.  It fits ``scipy.optimize.minimize``'s ``hess=``.

    Examples
    --------
    >>> import numpy as np
    >>> hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 3.0])).toarray()
    array([[6., 2.],
           [2., 0.]])
    """
    inner = _value_grad_and_hessian(f, argnums, format, trace, "sparsegrad.hessian")

    def hessian_of_f(*args, **kwargs):
        return inner(*args, **kwargs)[2]

    _api._name(hessian_of_f, f, "hessian", inner)
    return hessian_of_f


def hvp(f, argnums=0):
    """A function returning Hessian-vector products of ``f``, without forming
    the Hessian.

    Parameters
    ----------
    f : callable
        As for :func:`value_grad_and_hessian`.
    argnums : int, optional
        The argument differentiated (default 0).

    Returns
    -------
    callable
        ``hvp_of_f(x, v, *args, **kwargs) -> H(x) @ v`` (the other
        arguments in order after ``v``): an ndarray of ``x``'s shape, ``v``
        of ``x``'s shape or ``(x.size,)``.  With ``argnums=0`` it fits
        ``scipy.optimize.minimize``'s ``hessp=``.  Right to rounding; not the
        bits of ``hessian(f)(x) @ v``, which sums in another order.

    Examples
    --------
    >>> import numpy as np
    >>> hvp(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([ 6., 12.])
    """
    position = _single(argnums, "sparsegrad.hvp")

    def hvp_of_f(*args, **kwargs):
        if len(args) < 2:
            raise TypeError("sparsegrad.hvp: the function takes the point and the vector, "
                            "then f's other arguments")
        v, args = args[position + 1], args[:position + 1] + args[position + 2:]
        x = args[position]

        def gradient(y):
            call = args[:position] + (y,) + args[position + 1:]
            return _adjoint.gradient_and_value(f, call, kwargs, position)[0]
        return _api.jvp(gradient, x, v)[1]

    _api._name(hvp_of_f, f, "hvp")
    return hvp_of_f


def hessian_sparsity(f, x, args=(), kwargs=None, *, format="matrix"):
    """The sparsity pattern of the Hessian of the scalar ``f`` at ``x``, as a
    symmetric boolean matrix.

    Like :func:`sparsegrad.sparsity`: only the pattern is propagated, and it
    contains every entry that can be nonzero for any ``x``.

    Parameters
    ----------
    f, x, args, kwargs, format
        As in :func:`sparsegrad.sparsity`.

    Returns
    -------
    scipy.sparse.csr_matrix of bool
        Shape ``(x.size, x.size)``, symmetric; every stored entry is True.

    Examples
    --------
    >>> import numpy as np
    >>> hessian_sparsity(lambda x: np.sum(x[1:] * x[:-1]), np.zeros(3)).toarray()
    array([[False,  True, False],
           [ True, False,  True],
           [False,  True, False]])
    """
    pattern = _api.sparsity(_stacked(f, 0), x, args, kwargs)
    n = pattern.shape[0] - 1
    format = _api._check_format(format)
    return _api._refusing(_api._convert(symmetric(_leading_rows(pattern, n)), format))
