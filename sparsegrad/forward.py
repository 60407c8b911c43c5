"""Forward-mode values: seeding, the value class and ``nvalue``.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.linspace(0, 1, 3))
>>> (x ** 2).dvalue.toarray()
array([[0., 0., 0.],
       [0., 1., 0.],
       [0., 0., 2.]])
"""
import sys

import numpy as np

from . import _backend
from . import _jacobian
from ._value import value, nvalue, make
from ._memory import pooled

__all__ = ["seed", "seed_sparse_gradient", "seed_sparsity", "value", "nvalue", "forward"]

# 0.0.15's ``sparsegrad.forward`` was a package holding a submodule ``forward``, so
# ``from sparsegrad.forward import *`` also bound ``forward`` and published code
# goes on to call ``forward.seed(x)``
forward = sys.modules[__name__]


def _refuse_forward(x, what, name):
    """Raise for a forward value given as a point to differentiate at.

    Seeding would keep only its value and drop its derivative, so a Jacobian
    taken inside a function that is itself being differentiated (nested
    differentiation, which sparsegrad does not do) would be silently wrong.
    ``what`` and ``name`` say which argument of which function it was.
    """
    if isinstance(x, value):
        raise TypeError("%s: %s is a forward value; nested differentiation (a Jacobian "
                        "inside a function being differentiated) is not supported; pass "
                        "its .value to differentiate at that point" % (name, what))


def _seed_array(x, name="sparsegrad.forward.seed"):
    """A private floating-point copy of ``x`` to seed (``name``: the function that
    seeds it, for the error about a forward value)."""
    _refuse_forward(x, "x", name)
    # a private copy: later changes to the user's array cannot reach the forward value
    # (a device array is copied on its device)
    array = np.array(x, copy=True) if _backend.of(x) is _backend.CPU else x.copy()
    if array.dtype.kind in "biu":
        array = array.astype(np.float64)
    elif array.dtype.kind not in "fc":
        raise TypeError("sparsegrad.forward.seed: cannot differentiate with respect to an "
                        "array of dtype %s; use a floating or complex dtype" % array.dtype)
    return array


@pooled
def _seed(arrays, pattern_only, name):
    if not arrays:
        raise TypeError("sparsegrad.forward.%s needs at least one array" % name)
    arrays = [_seed_array(x) for x in arrays]
    backends = [_backend.of(array) for array in arrays]
    backend = backends[0]
    if any(other is not backend for other in backends[1:]):
        raise TypeError("sparsegrad.forward.%s: the arrays live on different devices "
                        "(%s); seed arrays of one device together"
                        % (name, ", ".join(b.name for b in backends)))
    if len(arrays) == 1:
        array, = arrays
        seed = _jacobian.Seed(array.size, scalar=array.ndim == 0,
                              complex=np.iscomplexobj(array), pattern_only=pattern_only,
                              backend=backend)
        return make(array, _jacobian.identity(seed))
    # several arrays: one seed whose columns are the arrays' elements one after the
    # other, so that values of different arrays combine; each array's Jacobian
    # selects its own block of columns
    sizes = [array.size for array in arrays]
    seed = _jacobian.Seed(sum(sizes), scalar=False,
                          complex=any(np.iscomplexobj(array) for array in arrays),
                          pattern_only=pattern_only, backend=backend)
    offsets = np.cumsum([0] + sizes)
    values = []
    for array, first in zip(arrays, offsets[:-1].tolist()):
        columns = backend.xp.arange(first, first + array.size, dtype=_jacobian.INDEX_DTYPE)
        matrix = _jacobian._selection(seed.size, columns, owned=True)
        values.append(make(array, _jacobian.Jacobian(seed, array.size, matrix=matrix)))
    return tuple(values)


def seed(*x):
    """A forward value of ``x`` whose Jacobian is the identity.

    Parameters
    ----------
    *x : array_like
        One or more arrays, any shape; the Jacobian of later results is taken
        with respect to ``x.ravel()`` (C order).  Integer and bool input is
        promoted to float64.  Jacobians have the dtype of the result's value,
        except that float16 values have a float32 Jacobian (scipy.sparse has
        no float16); the values stay float16.  The arrays are copied.  With several arrays the
        Jacobian is taken with respect to all of them together: its columns
        are the elements of the first array, then those of the second, ...

    Returns
    -------
    value or tuple of value
        Use it in place of ``x`` in numpy code; ``.dvalue`` of a result is its
        Jacobian as ``scipy.sparse.csr_matrix``.  One array gives one value;
        several arrays give a tuple with one value per array, whose Jacobians
        are the column blocks of one combined Jacobian.

    Examples
    --------
    >>> import numpy as np
    >>> x = seed(np.array([1.0, 2.0]))
    >>> np.sum(x * x).dvalue.toarray()
    array([[2., 4.]])
    >>> a, b = seed(np.array([1.0, 2.0]), np.array(3.0))
    >>> (a * b).dvalue.toarray()
    array([[3., 0., 1.],
           [0., 3., 2.]])
    """
    return _seed(x, pattern_only=False, name="seed")


seed_sparse_gradient = seed


def seed_sparsity(*x):
    """Like :func:`seed`, but propagate only the sparsity pattern of the Jacobian.

    ``.sparsity`` (= ``.dvalue``) of a result is a boolean ``csr_matrix`` whose
    stored pattern contains every entry that can be nonzero; no floating-point
    derivative arithmetic is done, which makes it cheaper than :func:`seed`.
    Several arrays give a tuple of values, as for :func:`seed`.

    Examples
    --------
    >>> import numpy as np
    >>> x = seed_sparsity(np.ones(3))
    >>> (x[1:] * x[:-1]).sparsity.toarray()
    array([[ True,  True, False],
           [False,  True,  True]])
    """
    return _seed(x, pattern_only=True, name="seed_sparsity")
