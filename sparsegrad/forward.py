"""Forward-mode values: seeding, the value class and ``nvalue``.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.linspace(0, 1, 3))
>>> (x ** 2).dvalue.toarray()
array([[0., 0., 0.],
       [0., 1., 0.],
       [0., 0., 2.]])
"""
import numpy as np

from . import _jacobian
from ._value import value, nvalue, make

__all__ = ["seed", "seed_sparse_gradient", "seed_sparsity", "value", "nvalue"]


def _seed_array(x):
    # a private copy: later changes to the user's array cannot reach the forward value
    array = np.array(nvalue(x) if isinstance(x, value) else x, copy=True)
    if array.dtype.kind in "biu":
        array = array.astype(np.float64)
    elif array.dtype.kind not in "fc":
        raise TypeError("sparsegrad.forward.seed: cannot differentiate with respect to an "
                        "array of dtype %s; use a floating or complex dtype" % array.dtype)
    return array


def _seed(x, pattern_only):
    array = _seed_array(x)
    seed = _jacobian.Seed(array.size, scalar=array.ndim == 0,
                          complex=np.iscomplexobj(array), pattern_only=pattern_only)
    return make(array, _jacobian.identity(seed))


def seed(x):
    """A forward value of ``x`` whose Jacobian is the identity.

    Parameters
    ----------
    x : array_like
        Any shape; the Jacobian of later results is taken with respect to
        ``x.ravel()`` (C order).  Integer and bool input is promoted to float64.
        The array is copied.

    Returns
    -------
    value
        Use it in place of ``x`` in numpy code; ``.dvalue`` of a result is its
        Jacobian as ``scipy.sparse.csr_matrix``.

    Examples
    --------
    >>> import numpy as np
    >>> x = seed(np.array([1.0, 2.0]))
    >>> np.sum(x * x).dvalue.toarray()
    array([[2., 4.]])
    """
    return _seed(x, pattern_only=False)


seed_sparse_gradient = seed


def seed_sparsity(x):
    """Like :func:`seed`, but propagate only the sparsity pattern of the Jacobian.

    ``.sparsity`` (= ``.dvalue``) of a result is a boolean ``csr_matrix`` whose
    stored pattern contains every entry that can be nonzero; no floating-point
    derivative arithmetic is done, which makes it cheaper than :func:`seed`.

    Examples
    --------
    >>> import numpy as np
    >>> x = seed_sparsity(np.ones(3))
    >>> (x[1:] * x[:-1]).sparsity.toarray()
    array([[ True,  True, False],
           [False,  True,  True]])
    """
    return _seed(x, pattern_only=True)
