"""Sparse vectors and their sums, as in sparsegrad 0.0.15.

A sum of scattered contributions ``F[idx_k] += v_k`` is the usual way to
assemble a residual (finite volumes: one flux added to two cells).
:func:`sparsesum_bare` does it in one vectorised ``np.add.at``; the values may
be forward values, arrays or scalars.

This module is callable: ``sparsegrad.sparsevec(n, idx, v)`` (the name the
0.0.15 package exported) builds a :class:`sparsevec`, while
``sparsegrad.sparsevec.sparsesum`` and the other names stay reachable.

>>> import numpy as np
>>> from sparsegrad import forward
>>> x = forward.seed(np.array([1.0, 2.0]))
>>> F = sparsesum_bare(3, [(np.array([0, 1]), x), (np.array([1, 2]), -x)])
>>> F.value
array([ 1.,  1., -2.])
>>> F.dvalue.toarray()
array([[ 1.,  0.],
       [-1.,  1.],
       [ 0., -1.]])
"""
import sys
import types

import numpy as np

from ._value import value, nvalue, coerce, weak_result_type

__all__ = ["sparsevec", "sparsesum", "sparsesum_bare"]


class sparsevec:
    """The length-``n`` vector with values ``v`` at indices ``idx`` and zeros elsewhere.

    Parameters
    ----------
    n : int
        Length.
    idx : int or array_like of int
        Indices (negative ones count from the end; repeated ones are summed).
    v : scalar, array_like or forward value
        Values, one per index (a scalar is broadcast).

    Examples
    --------
    >>> import numpy as np
    >>> sparsevec(4, [1, 3], 2.0).todense()
    array([0., 2., 0., 2.])
    """

    __slots__ = ("n", "idx", "v")

    def __init__(self, n, idx, v):
        self.n = int(n)
        self.idx = idx
        self.v = v

    def __repr__(self):
        return "sparsevec(%d, %r, %r)" % (self.n, self.idx, self.v)

    def todense(self):
        """The dense length-``n`` vector (a forward value if ``v`` is one)."""
        return sparsesum_bare(self.n, [(self.idx, self.v)])


def sparsesum(terms, return_sparse=False):
    """Sum of :class:`sparsevec` terms of one length.

    Parameters
    ----------
    terms : iterable of sparsevec
        At least one term.
    return_sparse : bool
        As in :func:`sparsesum_bare`.

    Examples
    --------
    >>> import numpy as np
    >>> sparsesum([sparsevec(3, 0, 1.0), sparsevec(3, [0, 2], [1.0, 5.0])])
    array([2., 0., 5.])
    """
    terms = list(terms)
    if not terms:
        raise ValueError("sparsesum needs at least one term to know the length; use "
                         "sparsesum_bare(n, []) for a zero vector")
    n = terms[0].n
    if any(t.n != n for t in terms):
        raise ValueError("sparsesum: terms of different lengths %s"
                         % sorted(set(t.n for t in terms)))
    return sparsesum_bare(n, [(t.idx, t.v) for t in terms], return_sparse=return_sparse)


def _flat_terms(n, terms):
    """All indices (checked, in ``[0, n)``) and all values of ``terms`` as two vectors."""
    terms = [(idx, coerce(v)) for idx, v in terms]
    indices, values = [], []
    # (a constant 1.0 added to float32 forward values keeps them float32)
    weak = weak_result_type([v for _, v in terms])
    for idx, v in terms:
        if type(v) in (int, float, complex):
            v = np.asarray(v, dtype=weak)
        idx = np.atleast_1d(nvalue(idx))
        if idx.size == 0:
            idx = idx.astype(np.intp)
        elif idx.dtype.kind not in "iu":
            raise TypeError("sparsesum_bare: indices must be integers, not %s" % idx.dtype)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError("sparsesum_bare: index out of range for length %d" % n)
        if np.shape(v) != idx.shape:
            v = np.broadcast_to(v, idx.shape)
        if idx.ndim != 1:
            idx, v = np.ravel(idx), np.ravel(v)
        indices.append(idx % max(n, 1))
        values.append(v)
    values = np.concatenate(values)
    if nvalue(values).dtype.kind not in "biufc":
        # (np.add.at would "sum" strings or dates without complaint)
        raise TypeError("sparsesum_bare: values must be numbers, not %s"
                        % nvalue(values).dtype)
    return np.concatenate(indices), values


def sparsesum_bare(n, terms, return_sparse=False):
    """``sum_k scatter(idx_k, v_k)`` as a length-``n`` vector, duplicate indices summed.

    Parameters
    ----------
    n : int
        Length of the result.
    terms : iterable of (idx, v)
        A list or generator (possibly empty); ``idx`` an int or int array,
        ``v`` a forward value, array or scalar broadcasting to ``idx``.
    return_sparse : bool
        Return ``(unique_sorted_idx, summed_values)`` instead of the dense vector.

    Returns
    -------
    ndarray or forward value
        A forward value if any ``v`` is one; ``np.zeros(n)`` for no terms.

    Examples
    --------
    >>> import numpy as np
    >>> sparsesum_bare(4, [(np.array([0, 3]), 1.0), (3, 2.0)])
    array([1., 0., 0., 3.])
    >>> sparsesum_bare(4, [(np.array([0, 3]), 1.0), (3, 2.0)], return_sparse=True)
    (array([0, 3]), array([1., 3.]))
    >>> sparsesum_bare(2, [])
    array([0., 0.])
    """
    n = int(n)
    terms = list(terms)
    if not terms:
        if return_sparse:
            return np.zeros(0, dtype=np.intp), np.zeros(0)
        return np.zeros(n)
    indices, values = _flat_terms(n, terms)
    if return_sparse:
        indices, positions = np.unique(indices, return_inverse=True)
        n = len(indices)
    else:
        positions = indices
    if isinstance(values, value):
        target = np.zeros(n, dtype=values.dtype, like=values)
    else:
        target = np.zeros(n, dtype=values.dtype)
    np.add.at(target, positions, values)
    if return_sparse:
        return indices, target
    return target


class _CallableModule(types.ModuleType):
    """This module, callable as :class:`sparsevec` (the 0.0.15 top-level name)."""

    def __call__(self, n, idx, v):
        return sparsevec(n, idx, v)


sys.modules[__name__].__class__ = _CallableModule
