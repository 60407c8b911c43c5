"""Sparse matrices whose stored values depend on the seed.

A :class:`SparseMatrix` is a constant pattern (canonical CSR ``indptr`` and
``indices``: sorted, unique column indices per row) plus ``data``, the stored
values: a forward value of length ``nnz`` or a plain array.  The pattern never
depends on the values (entries that are, or sum to, zero stay stored), so the
Jacobian of everything computed from the matrix has a pattern fixed by the
program, as everywhere in sparsegrad.

Every operation is written as forward-value operations on ``data`` (gathers,
elementwise products) and products with constant 0/1 scipy matrices (sums of
entries per row, per column or per output entry), so the Jacobians are exactly
the chain rule and nothing is densified.  The rules, with ``dA`` the Jacobian
of the stored values:

- ``d(A y) = dA·y + A dy``: ``(A y)_i = sum_k data_k y[indices_k]`` over the
  entries ``k`` of row ``i``;
- ``d(A B) = dA B + A dB``: one product per pair of entries that meet;
- ``d(A + B) = dA + dB`` on the union pattern; ``d(alpha A) = alpha dA + A dalpha``;
- ``A.T``, ``A.diagonal()``, ``A.sum(axis)``: linear maps of the stored values.

>>> import numpy as np
>>> from sparsegrad import forward, sparse
>>> k = forward.seed(np.array([1.0, 2.0]))
>>> A = sparse.coo_matrix((k[[0, 0, 1]], ([0, 1, 1], [0, 1, 1])), shape=(2, 2))
>>> A.value.toarray()
array([[1., 0.],
       [0., 3.]])
>>> (A @ np.array([1.0, 2.0])).dvalue.toarray()
array([[1., 0.],
       [2., 2.]])
"""
import numbers
import operator

import numpy as np
import scipy.sparse

from ._jacobian import _readonly
from ._value import is_forward as _is_forward, nvalue, object_holder

__all__ = ["SparseMatrix", "csr_matrix", "coo_matrix", "diags", "assemble", "issparse"]

_INDEX = np.int64


def _sum_into(slot, n_out, values):
    """``out[slot[k]] += values[k]`` (along the first axis): a constant 0/1 matrix product.

    Written as ``S @ values`` with a scipy matrix ``S`` holding one one per
    column, so that for a forward ``values`` the Jacobian is ``S @ J``: the
    rows of ``J`` summed, never a dense intermediate.
    """
    if not _is_forward(values) and np.asarray(values).dtype.kind in "biu":
        # integer and bool values are summed in their own dtype, exactly, as scipy
        # does (a float product would round integers beyond 2**53 and turn bools
        # into counts)
        values = np.asarray(values)
        out = np.zeros((n_out,) + values.shape[1:], dtype=values.dtype)
        np.add.at(out, np.asarray(slot, _INDEX), values)
        return out
    dtype = np.result_type(nvalue(values).dtype, np.float32)  # keeps float32 float32
    S = scipy.sparse.csr_matrix(
        (np.ones(len(slot), dtype), (np.asarray(slot, _INDEX), np.arange(len(slot)))),
        shape=(n_out, len(slot)))
    result = S @ values
    return np.asarray(result) if not _is_forward(result) else result


class _Pattern:
    """A constant canonical CSR pattern, with the COO row of every entry.

    Immutable (arrays read-only) so that matrices can share it; the transposed
    pattern and the permutation of entries it needs are cached.
    """

    __slots__ = ("shape", "indptr", "indices", "rows", "_transpose")

    def __init__(self, shape, indptr, indices):
        self.shape = (int(shape[0]), int(shape[1]))
        self.indptr = _readonly(np.asarray(indptr, _INDEX))
        self.indices = _readonly(np.asarray(indices, _INDEX))
        self.rows = _readonly(np.repeat(np.arange(self.shape[0], dtype=_INDEX),
                                        np.diff(self.indptr)))
        # (the transpose depends on the pattern alone, which never changes)
        self._transpose = None

    @property
    def nnz(self):
        return len(self.indices)

    @classmethod
    def from_coo(cls, shape, rows, cols):
        """``(pattern, slot)``: the canonical pattern of the coordinates, and for
        each input entry the stored entry it adds into (duplicates share one)."""
        n_rows, n_cols = shape
        if n_rows * n_cols < 2 ** 62:
            # one int64 key, row-major: several times faster to sort than a lexsort
            key = rows * _INDEX(max(n_cols, 1)) + cols
            if len(key) < 2 or np.all(key[1:] > key[:-1]):  # canonical already
                order = np.arange(len(key), dtype=_INDEX)
            else:
                order = np.argsort(key)
        else:
            order = np.lexsort((cols, rows))
        r, c = rows[order], cols[order]
        new = np.ones(len(r), dtype=bool)
        new[1:] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
        slot = np.empty(len(r), dtype=_INDEX)
        slot[order] = np.cumsum(new) - 1
        counts = np.bincount(r[new], minlength=n_rows)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(_INDEX)
        return cls(shape, indptr, c[new]), slot

    def transpose(self):
        """``(pattern of A.T, perm)`` with ``data_T = data[perm]``."""
        if self._transpose is None:
            perm = np.lexsort((self.rows, self.indices))
            counts = np.bincount(self.indices, minlength=self.shape[1])
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype(_INDEX)
            pattern = _Pattern((self.shape[1], self.shape[0]), indptr, self.rows[perm])
            self._transpose = (pattern, _readonly(perm))
        return self._transpose

    def same_as(self, other):
        return self is other or (self.shape == other.shape
                                 and np.array_equal(self.indptr, other.indptr)
                                 and np.array_equal(self.indices, other.indices))


def _check_coordinates(name, coords, bound, axis):
    coords = np.asarray(coords)
    if coords.dtype.kind not in "iu" and coords.size:
        raise TypeError("sparsegrad.sparse.%s: %s indices must be integers, not %s"
                        % (name, axis, coords.dtype))
    coords = coords.astype(_INDEX).ravel()
    if coords.size and (coords.min() < 0 or coords.max() >= bound):
        raise ValueError("sparsegrad.sparse.%s: %s index out of range [0, %d)"
                         % (name, axis, bound))
    return coords


def _check_dtype(name, dtype):
    """Refuse a dtype scipy.sparse cannot store (``dtype=`` of a constructor, ``astype``)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc" or dtype == np.float16:
        raise TypeError("sparsegrad.sparse.%s: scipy.sparse does not support dtype %s; "
                        "use a bool, integer, float32/64/longdouble or complex dtype"
                        % (name, dtype))
    return dtype


def _check_data(name, data, n, dtype=None):
    """The values as a 1-d forward value or ndarray of length ``n`` (never the user's array).

    ``dtype`` casts them.  Values scipy.sparse cannot store are refused (strings,
    dates, objects), except float16 ones, which are widened to float32 exactly
    (scipy.sparse has no float16, and float16 forward values already have
    float32 Jacobians), so that ``.value`` is always a usable scipy matrix.
    """
    if _is_forward(data):
        # a copy too: assigning into the user's forward value later (``d[0] = ...``)
        # must not reach the matrix
        data = data.reshape(-1) if data.ndim != 1 else data.copy()
    else:
        data = np.array(data).reshape(-1)  # a copy: the user's array is never shared
        if data.dtype == object:
            raise TypeError("sparsegrad.sparse.%s: data of dtype object (a list holding "
                            "forward values?); stack them with np.stack first" % name)
    if len(data) != n:
        raise ValueError("sparsegrad.sparse.%s: %d values for %d coordinates"
                         % (name, len(data), n))
    if dtype is not None:
        data = data.astype(_check_dtype(name, dtype))
    elif data.dtype == np.float16:
        data = data.astype(np.float32)
    else:
        _check_dtype(name, data.dtype)
    return data


class SparseMatrix:
    """A sparse matrix with a constant pattern and values that may be forward values.

    Build it with :func:`csr_matrix`, :func:`coo_matrix`, :func:`diags` or
    :func:`assemble`, not directly.  It mirrors ``scipy.sparse.csr_matrix`` for
    ``@`` (with vectors, dense matrices and sparse matrices), ``+``, ``-``,
    scalar ``*`` and ``/``, :meth:`multiply`, :attr:`T`, :meth:`diagonal` and
    :meth:`sum`.  ``*`` with anything but a scalar is refused (it would be a
    matrix product for ``csr_matrix`` but elementwise for ``csr_array``): use
    ``@`` or :meth:`multiply`.

    Attributes
    ----------
    value : scipy.sparse.csr_matrix
        The plain matrix: the same pattern (stored zeros kept), the values of
        ``data``.
    data : sparsegrad.forward.value or ndarray
        The stored values, one per entry of the canonical pattern.
    indptr, indices : ndarray
        The canonical CSR pattern (read-only).
    shape, nnz, dtype, ndim
        As for scipy matrices.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> d = forward.seed(np.array([2.0, 3.0]))
    >>> A = diags(d)
    >>> (A @ A).data.dvalue.toarray()
    array([[4., 0.],
           [0., 6.]])
    """

    __slots__ = ("_pattern", "_data")
    # binary operators with ndarrays and forward values come here (rmatmul, radd)
    __array_ufunc__ = None
    __array_priority__ = 2000

    def __init__(self, pattern, data):
        self._pattern = pattern
        self._data = data

    # ---- attributes ----------------------------------------------------------
    shape = property(lambda self: self._pattern.shape)
    nnz = property(lambda self: self._pattern.nnz)
    indptr = property(lambda self: self._pattern.indptr)
    indices = property(lambda self: self._pattern.indices)
    dtype = property(lambda self: nvalue(self._data).dtype)
    ndim = 2
    format = "csr"

    @property
    def data(self):
        return self._data

    @property
    def is_forward(self):
        """True when the stored values are a forward value."""
        return _is_forward(self._data)

    @property
    def value(self):
        p = self._pattern
        return scipy.sparse.csr_matrix(
            (np.array(nvalue(self._data)), p.indices.copy(), p.indptr.copy()),
            shape=p.shape)

    def __repr__(self):
        return "<sparsegrad.sparse.SparseMatrix %dx%d, %d stored entries, %s values>" % (
            self.shape + (self.nnz, "forward" if self.is_forward else "constant"))

    def __array__(self, dtype=None, copy=None):
        # numpy's "not an array" answer, as for forward values: scipy's operators
        # then return NotImplemented and Python calls ours (``S @ A``, ``S + A``)
        if dtype is not None and np.dtype(dtype) != np.dtype(object):
            raise TypeError("converting a sparsegrad.sparse.SparseMatrix to a numpy "
                            "array would drop its derivative; use .toarray() (a forward "
                            "value) or .value (the plain scipy matrix)")
        return object_holder(self)

    def __array_function__(self, func, types, args, kwargs):
        # numpy functions would see the object holder of __array__ and compute with
        # the matrix as one opaque element (np.dot(v, A) an object array of scaled
        # matrices): the few with a meaning are mapped to methods, the rest refused
        if func is np.dot and len(args) == 2 and not kwargs:
            a, b = args
            if _is_scalar(a) or _is_scalar(b):
                return a * b
            return a @ b
        if func is np.transpose and len(args) == 1 and not kwargs:
            return self.transpose()
        if func is np.shape and len(args) == 1 and not kwargs:
            return self.shape
        if func is np.ndim and len(args) == 1 and not kwargs:
            return 2
        raise TypeError("numpy.%s is not supported on a sparsegrad.sparse.SparseMatrix "
                        "(it would treat the matrix as one opaque element); use its "
                        "operators and methods (@, +, .multiply, .sum, .T), or "
                        ".toarray() for the dense matrix" % getattr(func, "__name__", func))

    def __eq__(self, other):
        raise TypeError("sparsegrad.sparse: comparison of sparse matrices is not "
                        "supported; compare A.value (the plain scipy matrix)")

    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __eq__
    __hash__ = None  # (as scipy's matrices)

    def __bool__(self):
        raise ValueError("the truth value of a sparse matrix is ambiguous")

    def _with_data(self, data, pattern=None):
        return SparseMatrix(self._pattern if pattern is None else pattern, data)

    def copy(self):
        data = self._data.copy()
        return self._with_data(data)

    def astype(self, dtype):
        """The matrix with its values cast to ``dtype`` (the same pattern)."""
        return self._with_data(self._data.astype(_check_dtype("astype", dtype)))

    def tocsr(self):
        """The matrix itself (it is stored as CSR)."""
        return self

    def toarray(self):
        """The dense matrix: a forward value (zeros outside the pattern) or an ndarray.

        Only the value is dense; the Jacobian has one row per stored entry.
        """
        if not self.is_forward:
            return self.value.toarray()
        p = self._pattern
        out = np.zeros(p.shape, dtype=self.dtype, like=self._data)
        out[p.rows, p.indices] = self._data
        return out

    todense = toarray

    # ---- linear maps of the stored values -------------------------------------
    @property
    def T(self):
        return self.transpose()

    def transpose(self, axes=None, copy=False):
        """``A.T``: the transposed pattern, the values permuted (a gather)."""
        if axes is not None:
            raise ValueError("sparsegrad.sparse: transpose takes no axes argument")
        pattern, perm = self._pattern.transpose()
        return SparseMatrix(pattern, self._data[perm])

    def conj(self):
        """The complex conjugate (of a real seed's values only, as for forward values)."""
        return self._with_data(np.conjugate(self._data))

    conjugate = conj

    @property
    def real(self):
        return self._with_data(np.real(self._data))

    @property
    def imag(self):
        return self._with_data(np.imag(self._data))

    def diagonal(self, k=0):
        """The ``k``-th diagonal as a 1-d array; entries outside the pattern are 0.

        Examples
        --------
        >>> import numpy as np
        >>> from sparsegrad import forward
        >>> A = coo_matrix((forward.seed(np.array([5.0, 7.0])), ([0, 1], [1, 1])))
        >>> A.diagonal().value, A.diagonal().dvalue.toarray()
        (array([0., 7.]), array([[0., 0.],
               [0., 1.]]))
        """
        k = operator.index(k)
        m, n = self.shape
        length = max(0, min(m + min(k, 0), n - max(k, 0)))
        p = self._pattern
        on = np.flatnonzero(p.indices - p.rows == k)
        # the diagonal's element number: the row for k >= 0, the column below it
        where = p.rows[on] if k >= 0 else p.indices[on]
        return _sum_into(where, length, self._data[on])

    def sum(self, axis=None):
        """Sum of all entries, or per column (``axis=0``, shape ``(1, n)``) or per row
        (``axis=1``, shape ``(m, 1)``), shaped as ``scipy.sparse.csr_matrix.sum``
        (as an ndarray, not ``np.matrix``)."""
        if axis is None:
            return np.sum(self._data)
        axis = operator.index(axis)
        if axis not in (0, 1, -1, -2):
            raise ValueError("sparsegrad.sparse: axis %d out of range for a matrix" % axis)
        p = self._pattern
        data = self._data
        if not self.is_forward and data.dtype.kind in "biu":
            # scipy's accumulator: small integers and bools are summed as np.int_
            # (np.uint for unsigned), as np.sum does
            wide = np.uint if data.dtype.kind == "u" and np.can_cast(data.dtype, np.uint) \
                else np.int_ if np.can_cast(data.dtype, np.int_) else data.dtype
            data = data.astype(wide)
        if axis in (1, -1):
            return _sum_into(p.rows, p.shape[0], data).reshape(p.shape[0], 1)
        return _sum_into(p.indices, p.shape[1], data).reshape(1, p.shape[1])

    # ---- products ---------------------------------------------------------------
    def __matmul__(self, other):
        if _is_scalar(other):
            raise ValueError("sparsegrad.sparse: matmul of a sparse matrix and a scalar; "
                             "use * for scaling")
        if isinstance(other, SparseMatrix) or scipy.sparse.issparse(other):
            return _sparse_product(self, _as_sparse(other))
        return self._apply(other)

    def __rmatmul__(self, other):
        if _is_scalar(other):
            raise ValueError("sparsegrad.sparse: matmul of a scalar and a sparse matrix; "
                             "use * for scaling")
        if scipy.sparse.issparse(other):
            return _sparse_product(_as_sparse(other), self)
        # y @ A = (A.T @ y.T).T
        other = _dense_operand(other)
        if other.ndim == 1:
            return self.T._apply(other)
        return self.T._apply(other.T).T

    dot = __matmul__

    def _apply(self, y):
        """``A @ y`` for a 1-d or 2-d dense ``y``: ``d(A y) = dA·y + A dy``."""
        y = _dense_operand(y)
        m, n = self.shape
        if y.ndim not in (1, 2) or y.shape[0] != n:
            raise ValueError("sparsegrad.sparse: dimension mismatch, %s @ %s"
                             % (self.shape, y.shape))
        if not self.is_forward:
            # constant matrix: scipy computes the value and, for a forward y,
            # sparsegrad's constant-matrix product gives A dy
            return self.value @ y
        p = self._pattern
        # (A y)_i = sum over the entries k of row i of data_k * y[indices_k]: the
        # product rule on the gathered pairs, then a constant row sum
        if y.ndim == 1:
            products = self._data * y[p.indices]
        else:
            products = self._data[:, None] * y[p.indices]
        return _sum_into(p.rows, m, products)

    def multiply(self, other):
        """Elementwise product; the result keeps only this matrix's pattern (intersected
        with ``other``'s when it is sparse).

        ``other`` may be a scalar, a sparse matrix of the same shape, or a dense
        array (or forward value) broadcastable to the shape.
        """
        if _is_scalar(other):
            return self * other
        if isinstance(other, SparseMatrix) or scipy.sparse.issparse(other):
            other = _as_sparse(other)
            _check_same_shape("multiply", self, other)
            a, b = self._pattern, other._pattern
            # the stored entries both matrices share: those whose slots in the union
            # pattern coincide
            union, slot = _Pattern.from_coo(a.shape, np.concatenate([a.rows, b.rows]),
                                            np.concatenate([a.indices, b.indices]))
            entry_of_b = np.full(union.nnz, -1, dtype=_INDEX)
            entry_of_b[slot[a.nnz:]] = np.arange(b.nnz, dtype=_INDEX)
            position = entry_of_b[slot[:a.nnz]]
            found = np.flatnonzero(position >= 0)
            pattern, _ = _Pattern.from_coo(a.shape, a.rows[found], a.indices[found])
            return SparseMatrix(pattern, self._data[found] * other._data[position[found]])
        other = _dense_operand(other)
        m, n = self.shape
        if other.ndim > 2:
            raise ValueError("sparsegrad.sparse: cannot multiply a matrix by a %d-d array"
                             % other.ndim)
        other2 = other.reshape((1,) * (2 - other.ndim) + other.shape)
        if other2.shape[0] not in (1, m) or other2.shape[1] not in (1, n):
            raise ValueError("sparsegrad.sparse: shapes %s and %s do not broadcast"
                             % (self.shape, other.shape))
        p = self._pattern
        rows = p.rows if other2.shape[0] == m else np.zeros_like(p.rows)
        cols = p.indices if other2.shape[1] == n else np.zeros_like(p.indices)
        return self._with_data(self._data * other2[rows, cols])

    # ---- sums and scaling -------------------------------------------------------
    def __add__(self, other):
        if _is_scalar(other):
            if not _is_forward(other) and nvalue(other) == 0:
                return self.copy()  # (a new matrix, as scipy's: a write must not reach A)
            raise TypeError("sparsegrad.sparse: adding a nonzero scalar to a sparse "
                            "matrix would make it dense; use A.toarray() + c explicitly")
        if not (isinstance(other, SparseMatrix) or scipy.sparse.issparse(other)):
            raise TypeError("sparsegrad.sparse: adding a dense %s to a sparse matrix is "
                            "not supported; use A.toarray() + B explicitly"
                            % type(other).__name__)
        other = _as_sparse(other)
        _check_same_shape("add", self, other)
        if self._pattern.same_as(other._pattern):
            return self._with_data(self._data + other._data)
        # the union pattern: both matrices as coordinates, duplicates summed
        a, b = self._pattern, other._pattern
        pattern, slot = _Pattern.from_coo(
            a.shape, np.concatenate([a.rows, b.rows]), np.concatenate([a.indices, b.indices]))
        data = np.concatenate([self._data, other._data])
        return SparseMatrix(pattern, _sum_into(slot, pattern.nnz, data))

    __radd__ = __add__

    def __neg__(self):
        return self._with_data(-self._data)

    def __pos__(self):
        return self.copy()  # (as numpy's +a and scipy's +A: a new array)

    def __sub__(self, other):
        if isinstance(other, SparseMatrix) or scipy.sparse.issparse(other):
            return self + (-_as_sparse(other))
        return self + (-other if _is_scalar(other) else other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if _is_scalar(other):
            return self._with_data(self._data * other)
        raise TypeError("sparsegrad.sparse: '*' with a sparse matrix is only scaling by a "
                        "scalar; use A @ B for the matrix product or A.multiply(B) for "
                        "the elementwise product")

    __rmul__ = __mul__

    def __truediv__(self, other):
        if _is_scalar(other):
            return self._with_data(self._data / other)
        raise TypeError("sparsegrad.sparse: '/' with a sparse matrix is only division "
                        "by a scalar")


def _is_scalar(x):
    if isinstance(x, (SparseMatrix, str)) or scipy.sparse.issparse(x):
        return False
    if isinstance(x, numbers.Number):
        return True
    return np.ndim(nvalue(x)) == 0


def _dense_operand(y, where="sparsegrad.sparse: operand"):
    """``y`` as an ndarray unless it is a forward value; refuse object arrays.

    ``where`` starts the error message (the function and the argument's role).
    """
    if _is_forward(y):
        return y
    y = np.asarray(y)
    if y.dtype == object:
        raise TypeError("%s of dtype object (a list holding forward values?); stack "
                        "them with np.stack first" % where)
    return y


def _check_same_shape(name, a, b):
    if a.shape != b.shape:
        raise ValueError("sparsegrad.sparse.%s: shapes %s and %s differ"
                         % (name, a.shape, b.shape))


def _as_sparse(other):
    """A :class:`SparseMatrix` from one, or from a constant scipy sparse matrix."""
    if isinstance(other, SparseMatrix):
        return other
    csr = scipy.sparse.csr_matrix(other, copy=True)
    csr.sum_duplicates()  # keeps explicit zeros: they are part of the pattern
    return SparseMatrix(_Pattern(csr.shape, csr.indptr, csr.indices), csr.data)


def issparse(x):
    """True for a :class:`SparseMatrix` or a scipy sparse matrix."""
    return isinstance(x, SparseMatrix) or scipy.sparse.issparse(x)


def _sparse_product(a, b):
    """``A @ B`` for two sparse matrices: ``d(A B) = dA B + A dB``.

    Every pair of stored entries ``A[i, k]``, ``B[k, j]`` contributes
    ``a_ik b_kj`` to ``C[i, j]``; the pairs are listed once with numpy, their
    products formed on the stored values (product rule) and summed per output
    entry.  The pattern is the structural product (no cancellation pruning).
    """
    if a.shape[1] != b.shape[0]:
        raise ValueError("sparsegrad.sparse: dimension mismatch, %s @ %s"
                         % (a.shape, b.shape))
    pa, pb = a._pattern, b._pattern
    lengths = np.diff(pb.indptr)[pa.indices]  # entries of B met by each entry of A
    left = np.repeat(np.arange(pa.nnz, dtype=_INDEX), lengths)
    starts = np.repeat(pb.indptr[pa.indices] - (np.cumsum(lengths) - lengths), lengths)
    right = starts + np.arange(len(left), dtype=_INDEX)
    pattern, slot = _Pattern.from_coo((a.shape[0], b.shape[1]), pa.rows[left],
                                      pb.indices[right])
    products = a._data[left] * b._data[right]
    return SparseMatrix(pattern, _sum_into(slot, pattern.nnz, products))


# ---- constructors -------------------------------------------------------------------
def coo_matrix(arg, shape=None, dtype=None):
    """A sparse matrix from coordinates ``(data, (row, col))``; duplicates are summed.

    Parameters
    ----------
    arg : tuple or sparse matrix
        ``(data, (row, col))`` with ``data`` a forward value or array of values
        and ``row``, ``col`` constant integer arrays of the same length; or a
        scipy sparse matrix or :class:`SparseMatrix` (constant pattern and values
        copied).
    shape : tuple of int, optional
        Default: one more than the largest row and column index.
    dtype : dtype, optional
        Cast the values.

    Returns
    -------
    SparseMatrix
        Stored in canonical CSR form; every coordinate given is stored, also
        when its values sum to zero.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> v = forward.seed(np.array([1.0, 2.0, 3.0]))
    >>> A = coo_matrix((v, ([0, 0, 1], [1, 1, 0])), shape=(2, 2))
    >>> A.data.dvalue.toarray()  # entry (0, 1) holds v0 + v1
    array([[1., 1., 0.],
           [0., 0., 1.]])
    """
    return _build("coo_matrix", arg, shape, dtype)


def csr_matrix(arg, shape=None, dtype=None):
    """A sparse matrix from ``(data, indices, indptr)`` or ``(data, (row, col))``.

    Like ``scipy.sparse.csr_matrix``: column indices may be unsorted or
    repeated within a row (repeats are summed).  ``data`` may be a forward
    value; ``indices`` and ``indptr`` are constant.  See :func:`coo_matrix`.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> v = forward.seed(np.array([1.0, 2.0]))
    >>> A = csr_matrix((v, [1, 0], [0, 1, 2]), shape=(2, 2))
    >>> A.value.toarray()
    array([[0., 1.],
           [2., 0.]])
    """
    if isinstance(arg, tuple) and len(arg) == 3:
        data, indices, indptr = arg
        indptr = np.asarray(indptr)
        if indptr.ndim != 1 or len(indptr) == 0 or indptr.dtype.kind not in "iu":
            raise ValueError("sparsegrad.sparse.csr_matrix: indptr must be a non-empty "
                             "1-d integer array")
        counts = np.diff(indptr.astype(_INDEX))
        if indptr[0] != 0 or np.any(counts < 0):
            raise ValueError("sparsegrad.sparse.csr_matrix: indptr must start at 0 and "
                             "not decrease")
        indices = np.asarray(indices)
        if indices.ndim != 1:
            raise ValueError("sparsegrad.sparse.csr_matrix: indices must be a 1-d array, "
                             "not of shape %s" % (indices.shape,))
        if len(indices) != indptr[-1]:
            raise ValueError("sparsegrad.sparse.csr_matrix: indptr[-1] = %d but %d indices"
                             % (indptr[-1], np.size(indices)))
        rows = np.repeat(np.arange(len(counts), dtype=_INDEX), counts)
        if shape is None:
            shape = (len(counts), int(indices.max()) + 1 if len(indices) else 0)
        elif int(shape[0]) != len(counts):
            raise ValueError("sparsegrad.sparse.csr_matrix: indptr has %d rows, shape %s"
                             % (len(counts), tuple(shape)))
        return _build("csr_matrix", (data, (rows, indices)), shape, dtype)
    return _build("csr_matrix", arg, shape, dtype)


def _build(name, arg, shape, dtype):
    if isinstance(arg, SparseMatrix) or scipy.sparse.issparse(arg):
        matrix = _as_sparse(arg)
        if shape is not None and tuple(shape) != matrix.shape:
            raise ValueError("sparsegrad.sparse.%s: shape %s given for a %s matrix"
                             % (name, tuple(shape), matrix.shape))
        matrix = matrix.copy() if matrix is arg else matrix
        return matrix if dtype is None else matrix.astype(dtype)
    if not (isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], tuple)
            and len(arg[1]) == 2):
        raise TypeError("sparsegrad.sparse.%s: expected (data, (row, col)), "
                        "(data, indices, indptr) or a sparse matrix, not %s"
                        % (name, type(arg).__name__))
    data, (rows, cols) = arg
    rows, cols = np.asarray(rows), np.asarray(cols)
    if rows.shape != cols.shape:
        raise ValueError("sparsegrad.sparse.%s: row and col have shapes %s and %s"
                         % (name, rows.shape, cols.shape))
    if shape is None:
        if rows.size == 0:
            raise ValueError("sparsegrad.sparse.%s: cannot infer the shape without "
                             "entries; pass shape=" % name)
        shape = (int(rows.max()) + 1, int(cols.max()) + 1)
    shape = tuple(operator.index(s) for s in shape)
    if len(shape) != 2 or min(shape) < 0:
        raise ValueError("sparsegrad.sparse.%s: shape must be two non-negative ints, "
                         "not %s" % (name, shape))
    rows = _check_coordinates(name, rows, shape[0], "row")
    cols = _check_coordinates(name, cols, shape[1], "column")
    data = _check_data(name, data, len(rows), dtype)
    pattern, slot = _Pattern.from_coo(shape, rows, cols)
    if pattern.nnz == len(rows):  # no duplicates: a permutation, i.e. a gather
        if np.array_equal(slot, np.arange(len(slot))):
            return SparseMatrix(pattern, data)
        order = np.empty_like(slot)
        order[slot] = np.arange(len(slot))
        return SparseMatrix(pattern, data[order])
    return SparseMatrix(pattern, _sum_into(slot, pattern.nnz, data))


def diags(diagonals, offsets=0, shape=None, dtype=None):
    """A sparse matrix from diagonals, like ``scipy.sparse.diags``.

    Parameters
    ----------
    diagonals : array, forward value, or sequence of them
        The values of each diagonal: a 1-d array as long as the diagonal, or a
        scalar (broadcast).
    offsets : int or sequence of int
        ``k > 0`` above the main diagonal, ``k < 0`` below; no repeats.
    shape : tuple of int, optional
        Default: square, just large enough for the first diagonal.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> d = forward.seed(np.array([1.0, 2.0]))
    >>> diags([d, -d[1:]], [0, 1]).value.toarray()
    array([[ 1., -2.],
           [ 0.,  2.]])
    """
    if np.ndim(offsets) == 0:
        offsets = [operator.index(offsets)]
        diagonals = [diagonals]
    else:
        offsets = [operator.index(k) for k in offsets]
        if _is_forward(diagonals) or (isinstance(diagonals, np.ndarray)
                                      and diagonals.ndim == 1):
            diagonals = [diagonals]
        if len(diagonals) != len(offsets):
            raise ValueError("sparsegrad.sparse.diags: %d diagonals for %d offsets"
                             % (len(diagonals), len(offsets)))
    if len(set(offsets)) != len(offsets):
        raise ValueError("sparsegrad.sparse.diags: repeated offset")
    if shape is None:
        first = diagonals[0]
        length = np.size(nvalue(first)) if np.ndim(nvalue(first)) else 1
        n = length + abs(offsets[0])
        shape = (n, n)
    m, n = (operator.index(s) for s in shape)
    rows, cols, values = [], [], []
    for diagonal, k in zip(diagonals, offsets):
        if k < -m or k > n:
            raise ValueError("sparsegrad.sparse.diags: offset %d is outside a %dx%d matrix"
                             % (k, m, n))
        # an offset just past the corner has an empty diagonal, as in scipy (the
        # super- and subdiagonal of a 1x1 matrix, the diagonal of a 0x0 one)
        length = min(m + min(k, 0), n - max(k, 0))
        if not _is_forward(diagonal):
            diagonal = np.asarray(diagonal)
        if diagonal.ndim == 0:
            # (a broadcast, not a product with ones: a float32 value stays float32)
            diagonal = np.broadcast_to(diagonal, (length,))
        elif diagonal.shape != (length,):
            raise ValueError("sparsegrad.sparse.diags: diagonal %d has shape %s, expected "
                             "%d values (a 1-d array or a scalar)"
                             % (k, diagonal.shape, length))
        i = np.arange(length, dtype=_INDEX) + max(-k, 0)
        rows.append(i)
        cols.append(i + k)
        values.append(diagonal)
    data = np.concatenate(values)  # (a forward value among them: its own concatenate)
    return coo_matrix((data, (np.concatenate(rows), np.concatenate(cols))), shape=(m, n),
                      dtype=dtype)


def assemble(elements, blocks, shape):
    """Assemble element matrices into a global sparse matrix (finite-element style).

    Element ``e`` adds ``blocks[e, a, b]`` to the entry
    ``(elements[e, a], elements[e, b])``; contributions to the same entry are
    summed.  This is :func:`coo_matrix` with the coordinates of every block
    entry, so its Jacobian is a constant 0/1 sum of the blocks' Jacobians.

    Parameters
    ----------
    elements : int array ``(n_elements, k)``, or a pair of them
        The global row (and column) numbers of each element's local
        unknowns; a pair ``(row_dofs, col_dofs)`` of shapes
        ``(n_elements, k_r)`` and ``(n_elements, k_c)`` for rectangular blocks.
    blocks : forward value or array, shape ``(n_elements, k_r, k_c)``
        The element matrices.
    shape : tuple of int
        The shape of the global matrix.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> c = forward.seed(np.array([1.0, 2.0]))        # one conductance per element
    >>> local = np.array([[1.0, -1.0], [-1.0, 1.0]])
    >>> K = assemble(np.array([[0, 1], [1, 2]]), c[:, None, None] * local, (3, 3))
    >>> K.value.toarray()
    array([[ 1., -1.,  0.],
           [-1.,  3., -2.],
           [ 0., -2.,  2.]])
    """
    if isinstance(elements, tuple):
        row_dofs, col_dofs = (np.asarray(e) for e in elements)
    else:
        row_dofs = col_dofs = np.asarray(elements)
    if row_dofs.ndim != 2 or col_dofs.ndim != 2 or len(row_dofs) != len(col_dofs):
        raise ValueError("sparsegrad.sparse.assemble: elements must be 2-d integer arrays "
                         "(n_elements, k) with the same number of elements")
    expected = (len(row_dofs), row_dofs.shape[1], col_dofs.shape[1])
    if tuple(np.shape(nvalue(blocks))) != expected:
        raise ValueError("sparsegrad.sparse.assemble: blocks have shape %s, expected %s"
                         % (np.shape(nvalue(blocks)), expected))
    rows = np.broadcast_to(row_dofs[:, :, None], expected)
    cols = np.broadcast_to(col_dofs[:, None, :], expected)
    return coo_matrix((blocks, (rows.ravel(), cols.ravel())), shape=shape)
