"""The factored Jacobian ``s * diag(d) * M`` and all the algebra on it.

A forward value's Jacobian has one row per element of its value (C order) and
one column per element of the seed.  It is stored as a scalar ``scale``, an
optional row-scaling vector ``diag`` and an optional shared, immutable CSR
``matrix`` (``None`` means the identity).  Elementwise operations only touch
``scale``/``diag``; sums of terms that share the same ``matrix`` object only
combine their row scalings; only terms with genuinely different matrices are
merged by the kernels.  Object identity of ``matrix`` is the merge key, which is
why :class:`CSR` arrays are read-only.

Structural zeros are kept everywhere: the pattern of a Jacobian never depends
on the values at which it is evaluated.

>>> import numpy as np
>>> seed = Seed(3, scalar=False, complex=False, pattern_only=False)
>>> J = scale(identity(seed), np.array([1.0, 2.0, 3.0]))
>>> materialize(add([J, J])).data
array([2., 4., 6.])
"""
from functools import lru_cache

import numpy as np

from ._fast import kernels
from ._errors import SeedMismatchError

INDEX_DTYPE = np.int64

__all__ = ["Seed", "CSR", "Jacobian", "identity", "zero", "scale", "add", "take_rows",
           "left_multiply", "vstack", "materialize", "conj", "mask_rows",
           "structural_zeros", "common_seed"]


class Seed:
    """What every Jacobian derived from one ``forward.seed`` call shares.

    Attributes
    ----------
    size : int
        Number of columns (elements of the seeded array).
    scalar : bool
        The seed was 0-d (changes the shape of ``.dvalue``).
    complex : bool
        The seed was complex; non-holomorphic functions are then refused.
    pattern_only : bool
        Sparsity mode: only patterns are propagated.
    """

    __slots__ = ("size", "scalar", "complex", "pattern_only", "selections")

    def __init__(self, size, scalar, complex, pattern_only):
        self.size = int(size)
        self.scalar = bool(scalar)
        self.complex = bool(complex)
        self.pattern_only = bool(pattern_only)
        # selection matrices of slices of the seed, by (shape, slices): ``x[1:-1]``
        # written three times in a residual shares one matrix, so its terms
        # combine by row scaling instead of a merge
        self.selections = {}


def _readonly(array):
    array.flags.writeable = False
    return array


class CSR:
    """An immutable canonical CSR matrix (int64 indices; ``data=None``: all ones).

    Never modified after construction, so it can be shared by many Jacobians.
    """

    __slots__ = ("shape", "indptr", "indices", "data", "_finite")

    def __init__(self, shape, indptr, indices, data):
        self.shape = (int(shape[0]), int(shape[1]))
        self.indptr = _readonly(indptr)
        self.indices = _readonly(indices)
        self.data = None if data is None else _readonly(data)
        self._finite = None

    @property
    def nnz(self):
        return int(self.indptr[-1])

    @property
    def finite(self):
        """True when no stored value is inf or nan (cached)."""
        if self._finite is None:
            self._finite = self.data is None or bool(np.isfinite(self.data).all())
        return self._finite

    @classmethod
    def from_scipy(cls, matrix):
        """Copy any scipy sparse matrix or array into canonical form (explicit zeros kept)."""
        import scipy.sparse
        csr = scipy.sparse.csr_matrix(matrix, copy=True)
        csr.sum_duplicates()
        return cls(csr.shape, csr.indptr.astype(INDEX_DTYPE),
                   csr.indices.astype(INDEX_DTYPE), csr.data)

    def to_scipy(self, dtype):
        import scipy.sparse
        data = np.ones(self.nnz, dtype) if self.data is None else self.data.astype(dtype)
        return scipy.sparse.csr_matrix(
            (data, self.indices.copy(), self.indptr.copy()), shape=self.shape)


@lru_cache(maxsize=16)
def _arange(n):
    return _readonly(np.arange(n, dtype=INDEX_DTYPE))


def _identity_csr(n, n_cols):
    return _arange(n + 1), _arange(n)


class Jacobian:
    """``scale * diag(diag) @ matrix`` with ``n_rows`` rows and ``seed.size`` columns.

    ``diag=None`` means ones, ``matrix=None`` means the identity.  In sparsity
    mode (``seed.pattern_only``) ``scale`` and ``diag`` are ignored.
    """

    __slots__ = ("seed", "n_rows", "scale", "diag", "matrix")

    def __init__(self, seed, n_rows, scale=1, diag=None, matrix=None):
        self.seed = seed
        self.n_rows = int(n_rows)
        self.scale = scale
        self.diag = diag
        self.matrix = matrix

    @property
    def shape(self):
        return (self.n_rows, self.seed.size)

    @property
    def is_zero(self):
        """Structurally zero: no stored entry at all."""
        return self.matrix is not None and self.matrix.nnz == 0

    def row_factor(self):
        """``scale * diag`` as a vector, or the scalar ``scale`` when there is no diag."""
        if self.diag is None:
            return self.scale
        return self.diag * self.scale if self.scale != 1 else self.diag


def common_seed(jacobians):
    """The seed shared by ``jacobians``; refuse to mix different seeds."""
    seed = jacobians[0].seed
    for J in jacobians[1:]:
        if J.seed is not seed:
            raise SeedMismatchError(
                "forward values from different seed() calls cannot be combined; "
                "seed all independent variables in one array")
    return seed


def identity(seed):
    return Jacobian(seed, seed.size)


def zero(seed, n_rows):
    """A structurally zero Jacobian (no stored entries)."""
    empty = np.zeros(0, dtype=INDEX_DTYPE)
    matrix = CSR((n_rows, seed.size), np.zeros(n_rows + 1, dtype=INDEX_DTYPE), empty,
                 None)
    return Jacobian(seed, n_rows, matrix=matrix)


def scale(J, factor):
    """``diag(factor) @ J``; ``factor`` is a scalar or a vector with one entry per row."""
    if J.seed.pattern_only or J.is_zero:
        return J
    if np.ndim(factor) == 0:
        return Jacobian(J.seed, J.n_rows, J.scale * factor, J.diag, J.matrix)
    factor = np.asarray(factor).reshape(-1)
    diag = factor if J.diag is None else J.diag * factor
    return Jacobian(J.seed, J.n_rows, J.scale, diag, J.matrix)


def _csr_arrays(J):
    """``(indptr, indices, data)`` of ``J.matrix`` (identity materialised)."""
    if J.matrix is None:
        indptr, indices = _identity_csr(J.n_rows, J.seed.size)
        return indptr, indices, None
    return J.matrix.indptr, J.matrix.indices, J.matrix.data


def add(terms):
    """Sum of Jacobians with the same seed and number of rows.

    Terms sharing one ``matrix`` object only combine their row scalings; the
    kernels merge the remaining distinct matrices in one pass.
    """
    seed = common_seed(terms)
    n_rows = terms[0].n_rows
    live = [J for J in terms if not J.is_zero]
    if not live:
        return terms[0]
    if len(live) == 1:
        return live[0]
    groups = {}
    for J in live:
        groups.setdefault(id(J.matrix), []).append(J)
    combined = []
    for group in groups.values():
        if seed.pattern_only:
            combined.append(group[0])
            continue
        factor = 0
        for J in group:
            factor = factor + J.row_factor()
        combined.append(scale(Jacobian(seed, n_rows, matrix=group[0].matrix), factor))
    if len(combined) == 1:
        return combined[0]
    parts = []
    for J in combined:
        indptr, indices, data = _csr_arrays(J)
        row_scale = None
        if not seed.pattern_only:
            factor = J.row_factor()
            row_scale = (None if np.ndim(factor) == 0 and factor == 1
                         else np.broadcast_to(factor, (n_rows,)))
        parts.append((indptr, indices, data, row_scale))
    indptr, indices, data = kernels.merge_scaled(n_rows, seed.size, parts,
                                                 pattern_only=seed.pattern_only)
    return Jacobian(seed, n_rows, matrix=CSR((n_rows, seed.size), indptr, indices, data))


_MAX_SELECTIONS = 256


def take_rows(J, rows, key=None):
    """Rows ``rows`` of ``J`` (int array; ``-1`` gives a zero row).

    Gathers, broadcasting and every pure data movement (transpose, flip, roll,
    concatenation, padding...) reduce to this.  ``key``, when given, is a
    hashable description of ``rows`` used to share the selection matrix of
    repeated identical gathers from the seed itself.
    """
    if key is not None and J.matrix is None and not J.is_zero:
        cache = J.seed.selections
        matrix = cache.get(key)
        if matrix is None:
            if len(cache) >= _MAX_SELECTIONS:
                cache.clear()
            taken = take_rows(J, rows)
            if taken.matrix is not None:
                cache[key] = taken.matrix
            return taken
        rows = np.asarray(rows, dtype=INDEX_DTYPE).reshape(-1)
        diag = None if J.diag is None else J.diag[rows]
        return Jacobian(J.seed, len(rows), J.scale, diag, matrix)
    rows = np.asarray(rows, dtype=INDEX_DTYPE).reshape(-1)
    n = len(rows)
    if n == J.n_rows and (n == 0 or (rows[0] == 0 and rows[-1] == n - 1
                                     and np.array_equal(rows, _arange(n)))):
        return J
    if J.is_zero:
        return zero(J.seed, n)
    diag = None
    if J.diag is not None:
        diag = J.diag[np.maximum(rows, 0)] if n else J.diag[:0]
    if J.matrix is None:
        valid = rows >= 0
        indptr = np.zeros(n + 1, dtype=INDEX_DTYPE)
        np.cumsum(valid, out=indptr[1:])
        matrix = CSR((n, J.seed.size), indptr, rows[valid], None)
    else:
        indptr, indices, data = kernels.gather_rows(J.matrix.indptr, J.matrix.indices,
                                                    J.matrix.data, rows)
        matrix = CSR((n, J.seed.size), indptr, indices, data)
    return Jacobian(J.seed, n, J.scale, diag, matrix)


def left_multiply(A, J):
    """``A @ J`` for a constant :class:`CSR` ``A`` with ``A.shape[1] == J.n_rows``."""
    n_out = A.shape[0]
    seed = J.seed
    if J.is_zero:
        return zero(seed, n_out)
    a_data = A.data
    if not seed.pattern_only:
        factor = J.row_factor()
        if np.ndim(factor) == 0:
            if factor != 1:
                a_data = factor * (np.ones(A.nnz) if a_data is None else a_data)
        else:
            column_factor = factor[A.indices]
            a_data = column_factor if a_data is None else a_data * column_factor
    if J.matrix is None:
        matrix = CSR((n_out, seed.size), A.indptr, A.indices,
                     None if seed.pattern_only else a_data)
        return Jacobian(seed, n_out, matrix=matrix)
    M = J.matrix
    indptr, indices, data = kernels.matmul(A.indptr, A.indices, a_data, M.indptr,
                                           M.indices, M.data, seed.size,
                                           pattern_only=seed.pattern_only)
    return Jacobian(seed, n_out, matrix=CSR((n_out, seed.size), indptr, indices, data))


def materialize(J):
    """``J`` as one :class:`CSR` (data ``None`` only in sparsity mode)."""
    if (J.matrix is not None and J.diag is None and J.scale == 1
            and (J.matrix.data is not None or J.seed.pattern_only)):
        return J.matrix
    indptr, indices, data = _csr_arrays(J)
    if J.seed.pattern_only:
        return CSR(J.shape, indptr, indices, None)
    factor = J.row_factor()
    if np.ndim(factor) == 0:
        values = np.full(len(indices), factor) if data is None else data * factor
    else:
        values = kernels.scale_rows(indptr, data, np.asarray(factor))
    return CSR(J.shape, indptr, indices, values)


def vstack(jacobians):
    """Jacobians stacked vertically (all with the same seed)."""
    seed = common_seed(jacobians)
    if len(jacobians) == 1:
        return jacobians[0]
    parts = [materialize(J) for J in jacobians]
    offsets = np.cumsum([0] + [p.nnz for p in parts])
    indptr = np.concatenate([parts[0].indptr[:1]] + [
        p.indptr[1:] + off for p, off in zip(parts, offsets[:-1])])
    indices = np.concatenate([p.indices for p in parts])
    data = None
    if not seed.pattern_only:
        data = np.concatenate([p.data for p in parts])
    n_rows = sum(J.n_rows for J in jacobians)
    return Jacobian(seed, n_rows,
                    matrix=CSR((n_rows, seed.size), indptr.astype(INDEX_DTYPE), indices,
                               data))


def conj(J):
    """Complex conjugate of every entry (valid for real seeds only; the caller checks)."""
    if J.seed.pattern_only or J.is_zero:
        return J
    M = J.matrix
    if M is not None and M.data is not None and np.iscomplexobj(M.data):
        M = CSR(M.shape, M.indptr, M.indices, np.conj(M.data))
    diag = None if J.diag is None else np.conj(J.diag)
    return Jacobian(J.seed, J.n_rows, np.conj(J.scale), diag, M)


def mask_rows(J, keep):
    """``J`` with the values of rows where ``keep`` is False set to exactly zero.

    The pattern is unchanged (structural zeros), and inf/nan in the masked rows
    does not leak into the result (selection, not multiplication by zero).
    """
    if J.seed.pattern_only or J.is_zero:
        return J
    keep = np.asarray(keep, dtype=bool).reshape(-1)
    factor = np.broadcast_to(J.row_factor(), (J.n_rows,))
    if J.matrix is None or J.matrix.finite:
        return Jacobian(J.seed, J.n_rows, 1, np.where(keep, factor, 0), J.matrix)
    M = materialize(J)
    entry_keep = np.repeat(keep, np.diff(M.indptr))
    return Jacobian(J.seed, J.n_rows, matrix=CSR(
        M.shape, M.indptr, M.indices, np.where(entry_keep, M.data, 0)))


def structural_zeros(J):
    """The pattern of ``J`` with every value zero."""
    return mask_rows(J, np.zeros(J.n_rows, dtype=bool))
