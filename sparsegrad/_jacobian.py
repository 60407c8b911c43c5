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
import itertools
from functools import lru_cache

import numbers

import numpy as np

from . import _backend, _structure
from ._fast._reference import _repeat
from ._errors import DensificationError, SeedMismatchError

INDEX_DTYPE = np.int64

__all__ = ["Seed", "CSR", "Jacobian", "identity", "zero", "scale", "add", "take_rows",
           "left_multiply", "vstack", "materialize", "to_scipy", "conj", "mask_rows",
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
    backend : sparsegrad._backend.Backend
        Array module, sparse module and kernels of the arrays (the CPU's by
        default).
    """

    __slots__ = ("size", "scalar", "complex", "pattern_only", "structure", "backend")

    def __init__(self, size, scalar, complex, pattern_only, backend=_backend.CPU):
        self.size = int(size)
        # where the arrays of every Jacobian of this seed live (numpy, cupy...)
        self.backend = backend
        self.scalar = bool(scalar)
        self.complex = bool(complex)
        self.pattern_only = bool(pattern_only)
        # structure shared with later seeds of this size (sparsegrad._structure):
        # selection matrices of slices of the seed, by (shape, slices): ``x[1:-1]``
        # written three times in a residual shares one matrix, so its terms
        # combine by row scaling instead of a merge; read-only int64 copies of
        # the integer index arrays read from its values, by the array's id and
        # the length read (see sparsegrad._value._rows_read)
        self.structure = _structure.for_seed(self.size, backend.name)


def _readonly(array):
    # (device arrays have no read-only flag: there immutability is a convention)
    if isinstance(array, np.ndarray):
        array.setflags(write=False)  # (cheaper than through .flags)
    return array


class CSR:
    """An immutable canonical CSR matrix (int64 indices; ``data=None``: all ones).

    Never modified after construction, so it can be shared by many Jacobians.
    ``columns``, when not None, says the matrix is a selection (all ones, at
    most one entry per row) and gives each row's column, ``-1`` for an empty
    row: row gathers of a selection are then a plain numpy gather of
    ``columns``, and its ``indptr``/``indices`` are only built when something
    reads them (:meth:`selection`).
    """

    __slots__ = ("shape", "_indptr", "_indices", "data", "gathers", "columns", "first",
                 "pattern_id")

    def __init__(self, shape, indptr, indices, data, columns=None, first=None):
        self.shape = (int(shape[0]), int(shape[1]))
        self._indptr = None if indptr is None else _readonly(indptr)
        self._indices = None if indices is None else _readonly(indices)
        self.data = None if data is None else _readonly(data)
        self.columns = None if columns is None else _readonly(columns)
        # columns == first + arange(rows) (a run: slices of a seed), or None
        self.first = first
        self.gathers = {}  # row gathers of this matrix, shared (see _gather)
        self.pattern_id = None  # (see _pattern_id)

    @classmethod
    def selection(cls, n_cols, columns, first=None):
        """The selection whose row ``r`` holds a one at column ``columns[r]`` (``-1``: none).

        ``columns`` is kept (made read-only), not copied.  Its CSR arrays are
        built when first read: merges take a selection by its columns.
        ``first``, when not None, says that ``columns`` is the run ``first,
        first + 1, ...``: its gathers are then additions, not gathers.
        """
        return cls((len(columns), n_cols), None, None, None, columns=columns, first=first)

    def _compress(self):
        columns = self.columns
        backend = _backend.of(columns)
        if len(columns) == 0 or columns.min() >= 0:  # every row selects one column
            indptr, indices = _arange(len(columns) + 1, backend.xp), columns
        else:
            indptr, indices = backend.kernels.selection_csr(columns)
        self._indptr = _readonly(indptr)
        self._indices = _readonly(indices)

    @property
    def indptr(self):
        if self._indptr is None:
            self._compress()
        return self._indptr

    @property
    def indices(self):
        if self._indices is None:
            self._compress()
        return self._indices

    @property
    def nnz(self):
        return int(self.indptr[-1])

    @property
    def is_empty(self):
        """No stored entry (for a selection, without building its CSR arrays).

        On a device, only a matrix of no rows is known to be empty: reading its
        arrays would wait for the device (an empty one then takes part in sums
        and gathers, adding nothing).
        """
        arrays = self.columns if self._indptr is None else self._indptr
        if _backend.of(arrays) is not _backend.CPU:
            return self.shape[0] == 0
        if self._indptr is None:
            columns = self.columns
            n = len(columns)
            # (a look at three rows settles it for almost every selection, then
            # one at about 60 rows spread over the matrix: a padded grid's first,
            # middle and last rows are all on its boundary, hence empty)
            if n == 0 or int(columns[0]) >= 0 or int(columns[n // 2]) >= 0 \
                    or int(columns[-1]) >= 0:
                return n == 0
            if int(columns[::max(1, n // 61)].max()) >= 0:
                return False
            return int(columns.max()) < 0
        return self.nnz == 0

    def arrays(self):
        """The arrays it holds now (for counting the bytes a cache keeps)."""
        return (self.columns, self._indptr, self._indices, self.data)

    def max_entries(self):
        """An upper bound of ``nnz`` that builds nothing."""
        return self.shape[0] if self._indptr is None else self.nnz

    @property
    def finite(self):
        """True when no stored value is inf or nan."""
        # (not kept: a matrix is masked about once, and data None is the common case)
        return self.data is None or bool(np.isfinite(self.data).all())

    @classmethod
    def from_scipy(cls, matrix):
        """Copy any scipy sparse matrix or array into canonical form (explicit zeros kept)."""
        import scipy.sparse
        csr = scipy.sparse.csr_matrix(matrix, copy=True)
        csr.sum_duplicates()
        return cls(csr.shape, csr.indptr.astype(INDEX_DTYPE),
                   csr.indices.astype(INDEX_DTYPE), csr.data)

    def to_scipy(self, dtype):
        """A new ``scipy.sparse.csr_matrix`` owning copies of the arrays.

        Indices are handed over as int32 when they fit, as scipy would convert
        them anyway; with ``copy=False`` scipy then keeps our fresh copies.
        """
        import scipy.sparse
        data = np.ones(self.nnz, dtype) if self.data is None else self.data.astype(dtype)
        index = _index_dtype(self.shape[1], self.nnz)
        return scipy.sparse.csr_matrix(
            (data, self.indices.astype(index), self.indptr.astype(index)),
            shape=self.shape, copy=False)


def _index_dtype(n_cols, entries):
    """The index dtype of a CSR matrix for scipy: int32 when the column numbers and
    the count of entries (a bound of it) fit, as scipy would convert them anyway."""
    return np.int32 if max(n_cols, entries) < 2 ** 31 - 1 else INDEX_DTYPE


def _arange(n, xp=np):
    """``xp.arange(n)`` as int64, shared (read-only on the CPU).

    One array per ``(n, xp)`` however it is called: row numbers read by
    slicing are recognised as views of it (``_Rows``) by identity.
    """
    return _shared_arange(int(n), xp)


# (depends on n and xp alone, the key; read-only on the CPU.  Kept for the
# identity more than the time: _Rows recognises row numbers read by slicing as
# views of this very array)
@lru_cache(maxsize=16)
def _shared_arange(n, xp):
    return _readonly(xp.arange(n, dtype=INDEX_DTYPE))


class Jacobian:
    """A sum of row-scaled matrices, ``sum_k s_k * diag(d_k) @ M_k``.

    Each term is ``(s, d, matrix)``: a scalar ``s``, a vector ``d`` with one
    entry per row, ``None`` (all ones) or a pending product ``(d, c)`` of two
    such vectors (read through :func:`_vector`), and ``matrix``, a shared
    :class:`CSR` or ``None`` for the identity.  No two terms share a matrix object.  A
    single term is the factored form ``s * diag(d) * M`` (``scale``, ``diag``
    and ``matrix`` read it).  Multiplying by a scalar only touches ``s``, by a
    vector only ``d``; sums of terms with different matrices stay unmerged
    until the number of terms grows large or a merged matrix is needed, so that
    elementwise operations on a sum only touch row factors and the final merge
    happens once.  In sparsity mode (``seed.pattern_only``) the factors are
    ignored.  An empty sum is structurally zero.
    """

    __slots__ = ("seed", "n_rows", "_terms", "_blocks", "_zero")

    def __init__(self, seed, n_rows, scale=1, diag=None, matrix=None, terms=None):
        self.seed = seed
        self.n_rows = int(n_rows)
        if terms is None:
            diag = None if diag is None else _backend.asarray(diag).reshape(-1)
            terms = ((scale, diag, matrix),)
        self._terms = tuple(terms)
        self._blocks = None
        self._zero = None

    @classmethod
    def stacked(cls, seed, blocks):
        """Jacobians ``blocks`` stacked vertically, merged only when needed.

        The rows of a concatenation are usually only handed to ``.dvalue``:
        one merge of the terms of all blocks (each at its row offset) then
        writes the final matrix, instead of a merge per block and a copy.
        """
        J = cls.__new__(cls)
        J.seed = seed
        J.n_rows = sum(block.n_rows for block in blocks)
        J._terms = None
        J._blocks = tuple(blocks)
        J._zero = None
        return J

    @property
    def terms(self):
        if self._terms is None:
            self.terms = ((1, None, _merged(self)),)
        return self._terms

    @terms.setter
    def terms(self, terms):
        self._terms = tuple(terms)
        self._blocks = None
        self._zero = None

    def pieces(self):
        """``(first_row, Jacobian)`` of the blocks that make up this Jacobian."""
        if self._blocks is None:
            return ((0, self),)
        firsts = itertools.accumulate((block.n_rows for block in self._blocks[:-1]),
                                      initial=0)
        return tuple(zip(firsts, self._blocks))

    @property
    def shape(self):
        return (self.n_rows, self.seed.size)

    @property
    def is_zero(self):
        """Structurally zero: no stored entry at all."""
        if self._zero is None:
            if self._blocks is not None:
                self._zero = all(block.is_zero for block in self._blocks)
            else:
                self._zero = all(M is not None and M.is_empty for _, _, M in self._terms)
        return self._zero

    def _single(self):
        """The one term of this Jacobian, merging the terms first if there are several."""
        if self._terms is None or len(self._terms) != 1:
            self.terms = ((1, None, _merged(self)),)
        return self.terms[0]

    @property
    def matrix(self):
        return self._single()[2]

    @property
    def diag(self):
        return _vector(self._single()[1])

    @property
    def scale(self):
        return self._single()[0]

    def row_factor(self):
        """The row factor ``s * d`` of the single term: a scalar or a vector."""
        return _factor(*self._single()[:2])


def _is_vector(factor):
    # (any array type: numpy, cupy...; numpy scalars and 0-d arrays are scalars)
    return getattr(factor, "ndim", 0) > 0


def _is_one(factor):
    return not _is_vector(factor) and factor == 1


def _factor(s, d):
    """``s * d`` as one scalar or vector (``d`` None: all ones)."""
    if d is None:
        return s
    d = _vector(d)
    return d if _is_one(s) else d * s


def _vector(d):
    """A row factor as one vector: a pending product ``(d, c)`` multiplied out.

    Scaling a term by a vector ``c`` keeps the pair ``(d, c)`` instead of
    forming ``d * c`` (see :func:`scale`): most such products are only read by
    the final merge, whose kernel forms them as it writes.  Everything else
    reads row factors through this function (or :func:`_factor`).
    """
    return d[0] * d[1] if type(d) is tuple else d


def _scalar_keeps_dtype(s, d):
    """Whether ``d * s`` has the dtype of ``d`` for a real scalar ``s`` (so that a
    kernel can apply ``s`` as it reads ``d``)."""
    if type(s) is float or (type(s) is int and -2 ** 24 <= s <= 2 ** 24):
        # (weak Python scalars keep d's precision; ints exact in every float)
        return d.dtype.kind == "f"
    if type(s) is np.float64 and d.dtype == np.float64:  # (the common case, quickly)
        return True
    return (isinstance(s, np.floating) and d.dtype.kind == "f"
            and np.result_type(d.dtype, s.dtype) == d.dtype)


def _times(d, factor):
    """The row factor ``d * factor`` of a term scaled by the vector ``factor``:
    a pending pair when both are float vectors of one dtype (see :func:`_vector`)."""
    if d is None:
        return factor
    d = _vector(d)
    if PENDING_PRODUCTS and d.dtype == factor.dtype and d.dtype.kind == "f":
        return (d, factor)
    return d * factor


#: vector scalings leave pending pairs (False: products at once, which the
#: tests compare against bit for bit)
PENDING_PRODUCTS = True

#: repeated merges of the same matrices go by a plan kept in the seed's structure
#: (False: every merge merges, which the tests compare against bit for bit)
MERGE_PLANS = True

#: entries of a seed's ``structure.index_rows``: copies of index arrays (and, for
#: deferred values, their largest entries; their runs, see keep_runs)
MAX_INDEX_ROWS = 64

#: row numbers of data movements a seed's structure keeps (see sparsegrad._functions._move)
MAX_MOVES = 64

#: terms a sum may hold before they are merged into one matrix
MAX_TERMS = 16


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
    return Jacobian(seed, n_rows, terms=())


def _empty_csr(n_rows, n_cols, xp=np):
    return CSR((n_rows, n_cols), xp.zeros(n_rows + 1, dtype=INDEX_DTYPE),
               xp.zeros(0, dtype=INDEX_DTYPE), None)


def _built(seed, n_rows, terms):
    """A Jacobian of non-zero ``terms`` (a tuple of distinct matrices) made
    without :class:`Jacobian`'s conversions: the elementwise operations' results,
    which are made for every operation of residual code."""
    J = Jacobian.__new__(Jacobian)
    J.seed = seed
    J.n_rows = n_rows
    J._terms = terms
    J._blocks = None
    J._zero = False
    return J


def scale(J, factor):
    """``diag(factor) @ J``; ``factor`` is a scalar or a vector with one entry per row."""
    if J.seed.pattern_only or J.is_zero:
        return J
    kind = type(factor)
    vector = kind is np.ndarray and factor.ndim == 1
    if vector:
        pass  # (the common case: a partial derivative of one row per element)
    elif kind is float or kind is np.float64:
        if factor == 1:
            return J
    elif _is_vector(factor) or isinstance(factor, (list, tuple)):
        factor = _backend.asarray(factor).reshape(-1)
        vector = True
    elif factor == 1:
        return J
    elif isinstance(factor, (int, np.integer)) and not isinstance(factor, bool):
        # an integer partial (x * 2**62, x - y's -1): the terms' scalars are
        # floats, as the Jacobian's values are; an np.int64 scalar would wrap around
        factor = float(factor)
    if J._blocks is not None:  # scale block by block: the stack stays unmerged
        return Jacobian.stacked(J.seed, [
            scale(block, factor[first:first + block.n_rows] if vector else factor)
            for first, block in J.pieces()])
    if vector:
        terms = tuple([(s, _times(d, factor), M) for s, d, M in J._terms])
    else:
        terms = tuple([(s * factor, d, M) for s, d, M in J._terms])
    return _built(J.seed, J.n_rows, terms)  # (the same matrices as J, which is not zero)


def _csr_arrays(n_rows, matrix, xp=np):
    """``(indptr, indices, data)`` of a term's matrix (identity materialised in ``xp``)."""
    if matrix is None:
        return _arange(n_rows + 1, xp), _arange(n_rows, xp), None
    return matrix.indptr, matrix.indices, matrix.data


def _on_host(s):
    """Whether scalar ``s`` is a number or a 0-d array of the host (not a device's)."""
    return isinstance(s, numbers.Number) or type(s) is np.ndarray


def _combine(first, second):
    """The term ``first + second`` of two terms with the same matrix."""
    s, d, M = first
    s2, d2 = second[:2]
    if d is None and d2 is None:
        return (s + s2, None, M)
    if _same_number(s, s2):
        # s (d + d2): one pass (sums of stencil terms share s, a grid factor)
        return (s, _sum_of_factors(d, d2), M)
    if (d is None) != (d2 is None):
        # s2 d2 + s in one pass (a diagonal's constant and its nonlinear part:
        # -4 u / h^2 + lam exp(u)), rounded as the two passes below
        vector, times, plus = (_vector(d2), s2, s) if d is None else (_vector(d), s, s2)
        if _scalar_keeps_dtype(times, vector) and _scalar_keeps_dtype(plus, vector):
            number = vector.dtype.type
            return (1, _backend.of(vector).kernels.multiply_add(vector, number(times),
                                                                 number(plus)), M)
    fused = _fused_sum(s, d, s2, d2)
    return (1, _factor(s, d) + _factor(s2, d2) if fused is None else fused, M)


def _same_number(s, s2):
    """Whether scalars ``s`` and ``s2`` are one nonzero number."""
    if type(s) is not type(s2) and not (_on_host(s) and _on_host(s2)):
        # (a 0-d value's factor left on a device, and a host number: the
        # device refuses the mixture, and they are not one number's type)
        return False
    return bool(s == s2) and bool(s != 0)


def _fused_sum(s, d, s2, d2):
    """``_factor(s, d) + _factor(s2, d2)`` of two vector row factors in one pass
    (``kernels.sum_of_products``, rounded as those passes are), or None where it
    does not apply: a factor of ones, operands of two dtypes, a scalar that
    would change the dtype."""
    if d is None or d2 is None:
        return None
    a, b = d if type(d) is tuple else (d, None)
    c, e = d2 if type(d2) is tuple else (d2, None)
    if a.dtype != c.dtype or not (_scalar_keeps_dtype(s, a) and _scalar_keeps_dtype(s2, c)):
        return None
    number = a.dtype.type
    return _backend.of(a).kernels.sum_of_products(
        a, b, None if _is_one(s) else number(s), c, e, None if _is_one(s2) else number(s2))


def _sum_of_factors(d, d2):
    """``d + d2`` of two row factors (``None``: ones), pending pairs multiplied
    and added in one pass (:func:`_fused_sum`)."""
    if type(d) is tuple or type(d2) is tuple:
        fused = _fused_sum(1, d, 1, d2)
        if fused is not None:
            return fused
    return (1 if d is None else _vector(d)) + (1 if d2 is None else _vector(d2))


def add(terms):
    """Sum of Jacobians with the same seed and number of rows.

    Terms sharing one ``matrix`` object combine their row factors; distinct
    matrices are kept side by side, and merged by the kernels in one pass when
    there are more than :data:`MAX_TERMS` of them.
    """
    if len(terms) == 2:
        first, second = terms
        if (first._terms is not None and second._terms is not None
                and first.seed is second.seed and not first.is_zero and not second.is_zero):
            # (the common case, two non-zero sums of terms: none of the checks below)
            return _summed(first.seed, first.n_rows, terms)
    seed = common_seed(terms)
    n_rows = terms[0].n_rows
    live = [J for J in terms if not J.is_zero]
    if len(live) <= 1:
        return live[0] if live else terms[0]
    if all(J._blocks is not None for J in live):
        rows = [[block.n_rows for block in J._blocks] for J in live]
        if all(r == rows[0] for r in rows[1:]):  # same stacking: add block by block
            return Jacobian.stacked(seed, [add(list(blocks))
                                           for blocks in zip(*(J._blocks for J in live))])
    return _summed(seed, n_rows, live)


def _summed(seed, n_rows, jacobians):
    """The sum of non-zero ``jacobians``: terms of one matrix combined (in sparsity
    mode the first stands for them), merged when there are more than
    :data:`MAX_TERMS`."""
    combined = {}
    for J in jacobians:
        for term in J.terms:
            key = id(term[2])
            known = combined.get(key)
            combined[key] = term if known is None else (
                known if seed.pattern_only else _combine(known, term))
    result = _built(seed, n_rows, tuple(combined.values()))  # (the operands' matrices)
    if len(result._terms) > MAX_TERMS:
        result._single()
    return result


def _merge(J, index_dtype=None, kept=False):
    """``indptr, indices, data`` of ``J`` as one canonical CSR (structural zeros kept).

    The terms of every block of a stacked Jacobian go to the kernel at their
    row offsets, so the whole matrix is written by one merge.  ``index_dtype``
    (int64 when None; ``"fit"``: int32 when every index and entry count fits)
    is the dtype of the returned index arrays; ``kept``: they may be
    read-only arrays the seed's structure keeps (see :func:`_merge_by_plan`),
    for a matrix that only sparsegrad reads.
    """
    seed = J.seed
    xp = seed.backend.xp
    parts = []
    entries = 0  # (a bound of the merged matrix's entries: the terms' entries)
    float64 = True  # (every data array and row factor: what a plan's fill takes)
    for first_row, block in J.pieces():
        n_rows = block.n_rows
        for s, d, M in block.terms:
            # selections (the identity too) go by their columns: the kernel
            # reads no indptr of theirs and nothing is built for them
            if M is None:
                indptr, indices, data = None, _arange(n_rows, xp), None
            elif M.columns is not None:
                indptr, indices, data = None, M.columns, None
            else:
                indptr, indices, data = M.indptr, M.indices, M.data
                float64 = float64 and (data is None or data.dtype is _FLOAT64)
            entries += len(indices)
            if seed.pattern_only:
                parts.append((indptr, indices, data, None, first_row))
                continue
            if d is not None:
                vector = d
                if type(d) is tuple:
                    vector = d[0]
                    float64 = float64 and d[1].dtype is _FLOAT64
                float64 = float64 and vector.dtype is _FLOAT64
            # (a pending pair (d, c): the kernel forms (d * c) * s as it writes)
            if d is not None and _scalar_keeps_dtype(s, vector):
                # s * diag(d): the kernel multiplies as it writes (no product array)
                parts.append((indptr, indices, data, d, first_row, float(s)))
            else:
                factor = _factor(s, d)
                row_scale = None if _is_one(factor) else xp.broadcast_to(
                    xp.asarray(factor), (n_rows,))
                float64 = float64 and (row_scale is None or row_scale.dtype is _FLOAT64)
                parts.append((indptr, indices, data, row_scale, first_row))
    if index_dtype == "fit":
        index_dtype = _index_dtype(seed.size, entries)
    if not parts and xp is not np:
        # (kernels take the device from their arrays: an empty block carries it)
        parts.append((xp.zeros(1, dtype=INDEX_DTYPE), xp.zeros(0, dtype=INDEX_DTYPE), None,
                      None, 0))
    if MERGE_PLANS and seed.structure.shared and not seed.pattern_only and float64:
        return _merge_by_plan(J, parts, index_dtype, kept)
    return seed.backend.kernels.merge_scaled(J.n_rows, seed.size, parts,
                                             pattern_only=seed.pattern_only,
                                             index_dtype=index_dtype)


_FLOAT64 = np.dtype(np.float64)


def _pattern_key(J, index_dtype):
    """``(key, pieces)``: what the merged pattern of ``J`` depends on.

    The terms' patterns by block and the row layout (merges keep structural
    zeros, so their pattern does not depend on any value).  A pattern is
    named by its read-only arrays (a selection's columns, a matrix's indptr
    and indices), so that matrices of other values on one kept pattern (a
    merge by a plan, :func:`_merge_by_plan`) share a key; ``pieces`` holds
    the terms' matrices, which an entry keyed by ``key`` must hold, so that
    the ids cannot be reused while it lives.
    """
    # A merged pattern and a plan depend on the patterns of the terms, their
    # order, each block's first row and length, the rows and columns of the
    # result and the index dtype: all in the key.  No value enters (structural
    # zeros are kept); nor the dtype: a plan is made and used for float64
    # data only (checked at every merge, _merge), patterns in sparsity mode
    # only, and the structure is per seed size, device and thread.  The ids
    # name arrays that never change (read-only, sparsegrad's own) and that the
    # entry holds, through the matrices in ``pieces``.
    pieces = tuple((first, block.n_rows, tuple(M for _, _, M in block.terms))
                   for first, block in J.pieces())
    key = ("pattern", J.n_rows, J.seed.size, np.dtype(index_dtype or INDEX_DTYPE).str,
           tuple((first, n, tuple(map(_pattern_id, matrices)))
                 for first, n, matrices in pieces))
    return key, pieces


def _pattern_id(M):
    """The ids of the arrays that make the pattern of ``M`` (``()``: the identity),
    for the keys of merges, kept on ``M``."""
    if M is None:
        return ()
    # (depends on M alone, which holds the arrays and never changes; every
    # merge reads it for every term: a tenth of a small evaluation's merge)
    if M.pattern_id is None:
        M.pattern_id = tuple(map(id, _pattern_arrays(M)))
    return M.pattern_id


def _pattern_arrays(M):
    """The read-only arrays that make the pattern of ``M``: a selection's columns,
    a matrix's indptr and indices, none for the identity (``None``)."""
    if M is None:
        return ()
    if M.columns is not None:
        return (M.columns,)
    return (M.indptr, M.indices)


def _merge_by_plan(J, parts, index_dtype, kept=False):
    """``merge_scaled`` of the terms ``parts`` of ``J``, by a merge plan when an
    earlier evaluation merged the same patterns.

    A repeated evaluation merges the same patterns with other row factors:
    the seed's structure keeps the merged pattern and where each term's
    entries land in it (``kernels.merge_plan``), made at the second merge of
    one key, so that later merges only write values (``kernels.fill_scaled``,
    equal bit for bit to the merge's, on fresh copies of the pattern).
    ``kept``: return the kept pattern's own (read-only) arrays instead, where
    there are any: a merged matrix that Jacobians keep is then named by the
    same arrays at every evaluation, and so are the merges it takes part in.
    """
    seed = J.seed
    kernels = seed.backend.kernels
    key, pieces = _pattern_key(J, index_dtype)
    plans = seed.structure.plans
    # (a plan costs about a merge and 4-8 bytes per entry: made when a pattern
    # comes back, not for a Jacobian computed once)
    entry = _structure.recall_or_note(plans, key, _MAX_PLANS)
    if entry is not None and entry[1] is not None:
        indptr, indices, codes = entry[1]
        merged = kernels.fill_scaled(indptr, indices, parts, codes)
        return (indptr, indices, merged[2]) if kept else merged
    merged = kernels.merge_scaled(J.n_rows, seed.size, parts, index_dtype=index_dtype)
    if entry is None:
        return merged
    nbytes = merged[0].nbytes + merged[1].nbytes + 8 * sum(len(part[1]) for part in parts)
    if not seed.structure.has_room(nbytes):
        # (kept, it would push the structure past its limit, which forgets
        # everything: merging every time is cheaper than that)
        return merged
    indptr, indices = (_readonly(array.copy()) for array in merged[:2])
    # (kept as the kernels made it: a device's plan carries its fill by levels)
    codes = kernels.merge_plan(indptr, indices,
                               [(part[0], part[1], part[4]) for part in parts])
    for c in codes:
        _readonly(c)
    _structure.store(plans, key, (pieces, (indptr, indices, codes)), _MAX_PLANS)
    seed.structure.keep(indptr, indices, *codes,
                        *(a for level in getattr(codes, "levels", None) or () for a in level))
    return (indptr, indices, merged[2]) if kept else merged


def _merged(J, index_dtype=None):
    """All terms of ``J`` merged into one :class:`CSR`.

    In sparsity mode the result depends only on the terms' patterns and the
    row layout, so the seed's structure keeps it under those (the matrices held
    by the entry, so that their ``id`` cannot be reused while it lives): a
    repeated evaluation, whose matrices the structure has kept too, finds its
    pattern instead of merging it again.  With values, a merge plan keeps the
    pattern (:func:`_merge_by_plan`), whose arrays the matrix then shares.
    """
    seed = J.seed
    if not _keeps_patterns(seed):
        return CSR(J.shape, *_merge(J, index_dtype, kept=True))
    key, pieces = _pattern_key(J, index_dtype)
    patterns = seed.structure.patterns
    hit = _structure.recall(patterns, key)
    _structure.looked_up(hit is not None)
    if hit is not None:
        return hit[1]
    merged = CSR(J.shape, *_merge(J, index_dtype))
    _structure.store(patterns, key, (pieces, merged), _MAX_PATTERNS)
    seed.structure.keep(*merged.arrays())
    return merged


def _keeps_patterns(seed):
    """Whether :func:`_merged` keeps the merged patterns of ``seed`` between evaluations."""
    return seed.pattern_only and seed.structure.shared


#: merged patterns a seed's structure keeps (sparsity mode, see _merged)
_MAX_PATTERNS = 16

#: product patterns (and notes of products made once) a seed's structure keeps
#: (see _kept_product)
_MAX_PRODUCTS = 64

#: merge plans (and notes of patterns merged once) a seed's structure keeps
#: (values, see _merge_by_plan): a residual's merges of one evaluation (the
#: final one and those that products with matrices need) all fit
_MAX_PLANS = 64

#: gathers from the identity a seed's structure keeps, and gathers from one
#: matrix that the matrix keeps (least recently used first out: fewer than the
#: distinct reads of one value per evaluation, as a 9-point stencil's, would
#: evict each at every evaluation and no merge would find its plan)
_MAX_SELECTIONS = 256
_MAX_GATHERS = 16


def _selection(n_cols, rows, owned=False, first=None):
    """The matrix whose row ``r`` is row ``rows[r]`` of the identity (``-1``: empty).

    ``owned``: ``rows`` is a fresh or read-only array that the matrix may keep;
    ``first``: ``rows`` is the run ``first, first + 1, ...`` (see :class:`CSR`).
    """
    if not owned and getattr(rows.flags, "writeable", True):  # (CuPy: no such flag)
        rows = rows.copy()
    return CSR.selection(n_cols, rows, first)


class _Rows:
    """Row numbers to gather: an int array, possibly a strided view of ``arange``.

    ``pick(v)`` is ``v[rows.ravel()]`` for a 1-d array ``v`` with one entry per
    source row.  When ``rows`` was obtained from the row numbers
    ``arange(n).reshape(shape)`` by basic indexing (slices, integers, ``None``),
    it is a strided view of that arange, and the same strides read any other
    contiguous array of length ``n``: a strided copy, with no index array built
    and no random access.  Row numbers computed on a device (reads with a
    device index array) stay there: ``flat`` is then a device array.
    """

    __slots__ = ("shape", "size", "_flat", "_base", "_view", "_contiguous", "_device_flat",
                 "_may_be_empty", "_equal", "runs")

    def __init__(self, rows, n_source, may_be_empty=True):
        self.runs = None  # (the runs kept beside a seed's copy of an index array)
        self._may_be_empty = may_be_empty
        self._equal = []  # stored row numbers found equal to these (see equals)
        self._device_flat = None  # (backend, the row numbers copied there)
        self._base = _arange(n_source)
        self._view = None
        backend = _backend.of(rows)
        if backend is not _backend.CPU:
            self.shape, self.size = tuple(rows.shape), int(rows.size)
            self._flat = rows.astype(INDEX_DTYPE, copy=False).reshape(-1)
            self._device_flat = (backend, self._flat)
            return
        rows = np.asarray(rows)
        self.shape = rows.shape
        self.size = rows.size
        self._flat = None
        if rows.base is self._base and rows.dtype == INDEX_DTYPE:
            item = rows.itemsize
            # (row numbers are their own positions in the arange: the first one,
            # at the view's data pointer, is its offset; ``ctypes`` costs 4 us)
            self._view = (rows.item(0) if rows.size else 0,
                          tuple(step // item for step in rows.strides))
            self._contiguous = rows.flags.c_contiguous
        else:
            # (a 1-d int64 array is kept as the very object: gathers cached under
            # an index array recognise the seed's copy of it by identity)
            flat = rows.astype(INDEX_DTYPE, copy=False)
            self._flat = flat if flat.ndim == 1 else flat.reshape(-1)

    def is_all(self):
        """Whether the rows are ``0, 1, ..., n - 1`` for ``n`` source rows, in order."""
        n = len(self._base)
        if self._view is not None:  # a C-contiguous view of all of arange(n)
            return self._view[0] == 0 and self.size == n and self._contiguous
        if self._device_flat is not None:
            # (reading them would wait for the device: gathered, all rows give J again)
            return False
        rows = self._flat
        return (len(rows) == n and (n == 0 or rows[0] == 0 and rows[-1] == n - 1)
                and _same_rows(rows, _arange(n, _backend.of(rows).xp)))

    def has_empty(self):
        """Whether some row number is ``-1`` (a zero row); views of arange never are."""
        return (self._may_be_empty and self._view is None and self.size > 0
                and self._flat.min() < 0)

    @property
    def flat(self):
        """The row numbers as a 1-d int64 array."""
        if self._flat is None:
            self._flat = self.pick(self._base)
        return self._flat

    def flat_on(self, backend):
        """The row numbers as a 1-d int64 array of ``backend`` (copied there once)."""
        if backend is _backend.CPU:
            return self.flat  # (never device row numbers: they only meet device data)
        if self._device_flat is None or self._device_flat[0] is not backend:
            if self._view is not None:
                # (a strided view of arange is made there from its strides: no host
                # array built, nothing copied, at every evaluation)
                flat = _strided_rows(self._view, self.shape, backend.xp)
            else:
                flat = _backend.to_device(self.flat, backend)
            self._device_flat = (backend, flat)
        return self._device_flat[1]

    def equals(self, stored):
        """Whether these row numbers equal ``stored`` (1-d), each array compared once.

        For device seeds only (the host recognises its index copies by
        identity, see :func:`_gather`).  The terms of one Jacobian cache their
        gathers under the same stored row numbers: a gather of k terms
        compares the rows once, not k times.
        """
        if any(known is stored for known in self._equal):
            return True
        if _same_rows(stored, self.flat):
            self._equal.append(stored)
            return True
        return False

    def run_start(self):
        """``s`` when the rows are ``s, s + 1, ...`` (a C-contiguous view of the row
        numbers), else None."""
        return self._view[0] if self._view is not None and self._contiguous else None

    def gathers_by_index(self):
        """Whether :meth:`pick` gathers by an index array (not by strides, where a
        strided copy of a product costs less than a gather)."""
        return self._view is None

    def pick(self, v):
        """``v[rows]`` as a 1-d array (a view when the rows are a contiguous run)."""
        backend = _backend.of(v)
        if backend is not _backend.CPU:  # a device array: row numbers go there, once
            return v[self.flat_on(backend)]
        if self._view is None or v.ndim != 1 or not v.flags.c_contiguous:
            return backend.kernels.take(v, self.flat, self.runs) if v.ndim == 1 else v[self.flat]
        offset, steps = self._view
        item = v.itemsize
        return np.ndarray(self.shape, v.dtype, buffer=v, offset=offset * item,
                          strides=tuple(step * item for step in steps)).ravel()


def _strided_rows(view, shape, xp):
    """The row numbers of the view ``(offset, steps)`` of ``arange`` with ``shape``,
    made by ``xp`` as one flat int64 array: ``offset + sum_i index_i * steps[i]``.

    >>> _strided_rows((1, (4, 1)), (2, 3), np).tolist()
    [1, 2, 3, 5, 6, 7]
    """
    offset, steps = view
    rows = xp.full(shape, offset, dtype=INDEX_DTYPE)
    for axis, (n, step) in enumerate(zip(shape, steps)):
        if step and n > 1:
            along = [1] * len(shape)
            along[axis] = n
            rows += (xp.arange(n, dtype=INDEX_DTYPE) * step).reshape(along)
    return rows.reshape(-1)


def _same_rows(a, b):
    """Whether two 1-d int arrays hold the same row numbers on the same backend."""
    if a is b:  # (a seed's copy of an index array, read again)
        return True
    backend = _backend.of(a)
    if a.shape != b.shape or _backend.of(b) is not backend:
        return False
    return backend.kernels.same_index(a, b)  # (on a device: one scalar from there)


def _gather(seed, M, rows, key):
    """Rows ``rows`` of ``M`` (``None``: identity), shared between identical gathers.

    Gathers from the identity are cached on the seed, gathers from a matrix on
    the matrix, under ``key`` (a hashable form of the rows, or None: no cache).
    A key that only names an index array (``("array", shape, id(array))``) is
    reused only for the rows it was stored with: on the host the very same
    read-only copy of the array, which the seed's structure hands out only
    while the array is alive and unchanged (``_value._rows_read``), on a
    device row numbers compared equal; so a reused or modified array can
    never return a stale matrix.  Sharing the result lets later sums combine
    row factors instead of merging.
    """
    # The result depends on the source matrix and the row numbers, nothing
    # else: no value, dtype or mode enters a selection (a matrix's own data
    # are its own: the cache lives on it; the identity's on the seed's
    # structure, of one seed size, device and thread).  Exact keys determine
    # the rows: slices and ints normalised with the shape read, a short
    # list's numbers with it, two broadcast shapes, a movement's arguments
    # and operand shapes.  A key naming an index array by ``id`` and shape
    # determines nothing alone: it is trusted only for the very rows stored
    # with it (the entry holds them, so their id is not reused meanwhile).
    cache = None
    if key is not None:
        cache = seed.structure.selections if M is None else M.gathers
        hit = _structure.recall(cache, key)
        # (keys naming an index array: on the host the seed's copy of it, the
        # same object while the array is the same and unchanged, see
        # sparsegrad._value._rows_read; a device's row numbers are compared)
        found = hit is not None and (hit[0] is None or hit[0] is rows.flat or (
            seed.backend is not _backend.CPU and rows.equals(hit[0])))
        _structure.looked_up(found)
        if found:
            return hit[1]
    if M is None:
        result = _selection(seed.size, rows.flat_on(seed.backend), first=rows.run_start())
    elif M.columns is not None:  # a selection of a selection: compose the columns
        first = None
        if M.first is not None and rows.gathers_by_index():
            # (a run of columns, x[a:b] of a seed: composing is adding, no gather)
            columns = rows.flat_on(seed.backend)
            if not (M.first == 0 and not getattr(columns.flags, "writeable", True)
                    and not rows.has_empty()):
                columns = columns + M.first
            # (else the read-only row numbers are the columns of x[:b] as they are)
        else:
            columns = rows.pick(M.columns)
            start = rows.run_start()
            if M.first is not None and start is not None:
                first = M.first + start
        if rows.has_empty():
            columns[_backend.to_device(rows.flat < 0, seed.backend)] = -1
        result = _selection(seed.size, columns, owned=True, first=first)
    else:
        try:
            indptr, indices, data = seed.backend.kernels.gather_rows(
                M.indptr, M.indices, M.data, rows.flat_on(seed.backend))
        except MemoryError as exc:
            raise _too_dense(M, rows) from exc
        result = CSR((rows.size, seed.size), indptr, indices, data)
    if cache is not None:
        stored = copied = None
        if key[0] == "array":  # (our own read-only row numbers need no copy)
            flat = rows.flat
            if getattr(flat.flags, "writeable", True):
                stored = copied = flat.copy()
            else:
                stored = flat  # (the index copy, counted where it was kept)
        _structure.store(cache, key, (stored, result),
                         _MAX_SELECTIONS if M is None else _MAX_GATHERS)
        seed.structure.keep(copied, *result.arrays())
    return result


def keep_runs(structure, rows):
    """Find the runs of consecutive numbers of ``rows`` (the seed's read-only copy
    of an index array, just kept in ``structure.index_rows``) and keep them
    beside it, when there are few enough to gather by (``kernels.index_runs``:
    an index array made by ``np.roll`` of a grid's numbers)."""
    # (the runs depend on the numbers of ``rows`` alone, which never change:
    # the entry holds ``rows``, whose id is its key, and is read only for that
    # very array; the length read is in the rows, see _value._rows_read)
    runs = _backend.CPU.kernels.index_runs(rows)
    if runs is not None:
        _structure.store(structure.index_rows, ("runs", id(rows)), (rows, _readonly(runs)),
                         MAX_INDEX_ROWS)
        structure.keep(runs)


def known_runs(structure, rows):
    """The runs :func:`keep_runs` kept for ``rows`` (the very array), or None."""
    entry = _structure.recall(structure.index_rows, ("runs", id(rows)))
    return entry[1] if entry is not None and entry[0] is rows else None


def _too_dense(M, rows):
    """The error for a gather of ``M``'s rows that memory cannot hold: usually a
    dense row (a sum, a mean, a dot product) broadcast back over many
    elements, whose Jacobian is dense."""
    flat = rows.flat
    lengths = M.indptr[1:] - M.indptr[:-1]
    entries = int(lengths[flat[flat >= 0]].sum())
    return DensificationError(
        "the Jacobian of this broadcast or read would hold %d entries (%d rows of up "
        "to %d entries, %.1f GiB), more than memory allows: it is dense, as a sum or "
        "mean broadcast back over every element makes it (u - np.sum(u)); products "
        "with such a Jacobian need no matrix: sparsegrad.jvp(f, x, v)"
        % (entries, rows.size, int(lengths.max(initial=0)), entries * 16 / 2 ** 30))


def take_rows(J, rows, key=None, may_be_empty=True):
    """Rows ``rows`` of ``J`` (int array; ``-1`` gives a zero row).

    Gathers, broadcasting and every pure data movement (transpose, flip, roll,
    concatenation, padding...) reduce to this.  ``key``, when given, is a
    hashable description of ``rows`` under which identical gathers share their
    matrix.  ``may_be_empty=False``: the caller knows no row number is ``-1``
    (rows made by indexing the row numbers), so nothing looks for one.  A
    read-only ``rows`` array is kept by the matrices built, not copied.
    """
    if type(key) is tuple and type(key[0]) is tuple and J._terms is not None \
            and len(J._terms) == 1 and J._terms[0][1] is None and rows.size != J.n_rows:
        # (a basic read, slices and ints, of an unscaled matrix: its gather found
        # by the key needs no row numbers)
        s, _, M = J._terms[0]
        hit = _structure.recall(J.seed.structure.selections if M is None else M.gathers,
                                key)
        if hit is not None and hit[0] is None:
            _structure.looked_up(True)
            return Jacobian(J.seed, rows.size, terms=((s, None, hit[1]),))
    rows = _Rows(rows, J.n_rows, may_be_empty)
    if rows._flat is not None and rows._device_flat is None:
        rows.runs = known_runs(J.seed.structure, rows._flat)
    n = rows.size
    if n == J.n_rows and (n == 0 or rows.is_all()):
        return J
    if J.is_zero:
        return zero(J.seed, n)
    terms = J.terms
    if len(terms) > 1 and any(M is not None and M.max_entries() > 2 * J.n_rows
                              for _, _, M in terms):
        terms = J._single(),  # dense-ish terms: one gather of the merged matrix is cheaper
    by_index = n and rows.gathers_by_index()
    gathered = []
    for s, d, M in terms:
        if d is None:
            pass
        elif type(d) is tuple and by_index:
            # (a pending pair gathered and multiplied in one pass)
            backend = _backend.of(d[0])
            d = backend.kernels.take_product(d[0], d[1], rows.flat_on(backend),
                                             rows.runs if backend is _backend.CPU else None)
        else:
            d = _vector(d)
            d = rows.pick(d) if n else d[:0]
        gathered.append((s, d, _gather(J.seed, M, rows, key)))
    return Jacobian(J.seed, n, terms=gathered)


def left_multiply(A, J):
    """``A @ J`` for a constant :class:`CSR` ``A`` with ``A.shape[1] == J.n_rows``."""
    n_out = A.shape[0]
    seed = J.seed
    if J.is_zero:
        return zero(seed, n_out)
    factor, M = J.row_factor(), J.matrix
    if seed.backend is not _backend.CPU:  # a constant matrix built on the host
        on_device = [None if a is None else _backend.to_device(a, seed.backend)
                     for a in (A.indptr, A.indices, A.data)]
        A = CSR(A.shape, *on_device)
    a_data = A.data
    xp = seed.backend.xp
    if not seed.pattern_only:
        if not _is_vector(factor):
            if factor != 1:
                a_data = factor * (xp.ones(A.nnz) if a_data is None else a_data)
        else:
            column_factor = factor[A.indices]
            a_data = column_factor if a_data is None else a_data * column_factor
    if M is None:
        matrix = CSR((n_out, seed.size), A.indptr, A.indices,
                     None if seed.pattern_only else a_data)
        return Jacobian(seed, n_out, matrix=matrix)
    indptr, indices, data = seed.backend.kernels.matmul(
        A.indptr, A.indices, a_data, M.indptr, M.indices, M.data, seed.size,
        pattern_only=seed.pattern_only)
    indptr, indices = _kept_product(seed, A, M, indptr, indices)
    return Jacobian(seed, n_out, matrix=CSR((n_out, seed.size), indptr, indices, data))


def _kept_product(seed, A, M, indptr, indices):
    """The pattern ``indptr, indices`` of ``A @ M``, as the arrays an earlier
    evaluation kept for the same patterns of ``A`` and ``M``.

    The product's pattern depends only on theirs (structural, no cancellation),
    so a repeated evaluation hands out the kept arrays in place of its fresh
    equal ones: the product is then named alike at every evaluation, and the
    merges it takes part in find their plans (:func:`_merge_by_plan`).  Kept
    from the second product of one key on (the first only notes it); the
    entry holds the arrays that name ``A`` and ``M``, so that their ids are
    not reused while it lives.
    """
    structure = seed.structure
    if not structure.shared:
        return indptr, indices
    # (a product's pattern depends on the patterns of A and M alone, and their
    # shapes: no cancellation is pruned; the ids name read-only arrays that
    # the entry holds once it keeps a pattern; a note holds nothing, and what
    # is kept at the second lookup is always this product's own pattern)
    held = _pattern_arrays(A) + _pattern_arrays(M)
    key = ("product", A.shape, M.shape) + tuple(map(id, held))
    entry = _structure.recall_or_note(structure.products, key, _MAX_PRODUCTS)
    if entry is None:
        return indptr, indices
    if entry[1] is not None:
        return entry[1]
    kept = (_readonly(indptr), _readonly(indices))
    _structure.store(structure.products, key, (held, kept), _MAX_PRODUCTS)
    structure.keep(*kept)
    return kept


def materialize(J):
    """``J`` as one :class:`CSR` (data ``None`` only in sparsity mode)."""
    if J._blocks is not None:
        J._single()
    backend = J.seed.backend
    if not J.terms:
        return _empty_csr(J.n_rows, J.seed.size, backend.xp)
    factor, M = J.row_factor(), J.matrix
    if M is not None and _is_one(factor) and (M.data is not None or J.seed.pattern_only):
        return M
    indptr, indices, data = _csr_arrays(J.n_rows, M, backend.xp)
    if J.seed.pattern_only:
        return CSR(J.shape, indptr, indices, None)
    if not _is_vector(factor):
        values = backend.xp.full(len(indices), factor) if data is None else data * factor
    else:
        values = backend.kernels.scale_rows(indptr, data, factor)
    return CSR(J.shape, indptr, indices, values)


def vstack(jacobians):
    """Jacobians stacked vertically (all with the same seed), merged when needed."""
    seed = common_seed(jacobians)
    if len(jacobians) == 1:
        return jacobians[0]
    blocks = []
    for J in jacobians:
        blocks.extend(block for _, block in J.pieces())
    return Jacobian.stacked(seed, blocks)


def matrix_dtype(seed, value_dtype):
    """The dtype of the scipy matrix of a Jacobian whose value has ``value_dtype``:
    bool in sparsity mode, else the value's own inexact dtype (float32 stays
    float32) but at least float32 (float16 values give a float32 matrix),
    float64 for integer values; complex in that precision for a complex seed
    (``abs`` of its values on the real axis is real, its derivative complex)."""
    if seed.pattern_only:
        return np.dtype(np.bool_)
    if np.issubdtype(value_dtype, np.inexact):
        # scipy.sparse has no float16: a csr_matrix stores it, but toarray, @ and
        # the solvers refuse it, so float32 is the smallest float it can use
        dtype = np.promote_types(value_dtype, np.float32)
    else:
        dtype = np.dtype(np.float64)
    return np.promote_types(dtype, np.complex64) if seed.complex else dtype


def to_scipy(J, dtype):
    """``J`` as a new ``scipy.sparse.csr_matrix`` of ``dtype`` that owns its arrays.

    The arrays come straight from one merge of all terms (int32 indices when
    they fit, as scipy would convert them anyway), so nothing the Jacobian
    keeps is shared with the matrix the user may modify.
    """
    backend = J.seed.backend
    if _keeps_patterns(J.seed):
        # (rows x columns bounds the entries; the terms' are counted only past it)
        index = _index_dtype(J.seed.size, J.n_rows * J.seed.size)
        if index is not np.int32:
            index = _index_dtype(J.seed.size, sum(
                J.n_rows if M is None else M.max_entries()
                for _, block in J.pieces() for _, _, M in block.terms))
        pattern = _merged(J, index)
        # (a pattern the structure keeps is shared: the matrix gets copies)
        indptr, indices, data = pattern.indptr.copy(), pattern.indices.copy(), None
    else:
        indptr, indices, data = _merge(J, index_dtype="fit")
    if data is None:
        data = backend.xp.ones(len(indices), dtype)
    elif np.iscomplexobj(data) and not np.issubdtype(dtype, np.complexfloating):
        # real results of complex intermediates (abs, .real): imaginary parts are 0
        data = data.real.astype(dtype)
    else:
        data = data.astype(dtype, copy=False)
    matrix = backend.sparse.csr_matrix((data, indices, indptr), shape=J.shape, copy=False)
    if backend is _backend.CPU:
        # canonical by construction: spare scipy's solvers an O(nnz) check of each flag
        matrix.has_sorted_indices = True
        matrix.has_canonical_format = True
    _structure.follow_jacobian(data.nbytes + indices.nbytes + indptr.nbytes)
    return matrix


def conj(J):
    """Complex conjugate of every entry (valid for real seeds only; the caller checks)."""
    if J.seed.pattern_only or J.is_zero:
        return J
    terms = []
    for s, d, M in J.terms:
        if M is not None and M.data is not None and np.iscomplexobj(M.data):
            M = CSR(M.shape, M.indptr, M.indices, np.conj(M.data))
        terms.append((np.conj(s), None if d is None else np.conj(_vector(d)), M))
    return Jacobian(J.seed, J.n_rows, terms=terms)


def mask_rows(J, keep):
    """``J`` with the values of rows where ``keep`` is False set to exactly zero.

    The pattern is unchanged (structural zeros), and inf/nan in the masked rows
    does not leak into the result (selection, not multiplication by zero).
    """
    if J.seed.pattern_only or J.is_zero:
        return J
    xp = J.seed.backend.xp
    keep = xp.asarray(keep, dtype=bool).reshape(-1)
    terms = []
    for s, d, M in J.terms:
        factor = xp.broadcast_to(xp.asarray(_factor(s, d)), (J.n_rows,))
        if M is None or M.finite:
            terms.append((1, xp.where(keep, factor, 0), M))
            continue
        single = materialize(Jacobian(J.seed, J.n_rows, matrix=M, diag=factor))
        entry_keep = _repeat(xp, keep, xp.diff(single.indptr), len(single.indices))
        terms.append((1, None, CSR(single.shape, single.indptr, single.indices,
                                   xp.where(entry_keep, single.data, 0))))
    return Jacobian(J.seed, J.n_rows, terms=terms)


def structural_zeros(J):
    """The pattern of ``J`` with every value zero."""
    return mask_rows(J, J.seed.backend.xp.zeros(J.n_rows, dtype=bool))
