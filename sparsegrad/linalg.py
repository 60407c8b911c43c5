"""Differentiable sparse linear solves.

``x = A^{-1} b`` where the matrix ``A`` (a :class:`sparsegrad.sparse.SparseMatrix`
or a scipy sparse matrix) and/or the right-hand side ``b`` depend on the seed.
Differentiating ``A x = b`` gives ``dA x + A dx = db``, so

    J_x = A^{-1} (J_b - J_A·x)

where ``J_A·x`` is the Jacobian of ``A @ x`` with ``x`` held constant (the
sparse matrix-vector rule of :mod:`sparsegrad.sparse`).  ``A`` is factorised
once (SuperLU, ``scipy.sparse.linalg.splu``); the value is solved with that
factorisation and the Jacobian by one more solve with a block right-hand side,
made of the seed columns that ``J_b - J_A·x`` touches.

The Jacobian of a solve is in general dense in those columns (``A^{-1}``
couples every unknown), so it is allowed only when it is small: when the block
would hold more than :data:`MAX_DENSE_ENTRIES` entries the solve raises
:class:`sparsegrad.DensificationError` before allocating anything.  Seeding a
few parameters, as in a sensitivity study, keeps it small.

>>> import numpy as np
>>> from sparsegrad import forward, sparse, linalg
>>> p = forward.seed(np.array([2.0, 4.0]))
>>> x = linalg.spsolve(sparse.diags(p), np.ones(2))
>>> x.value, x.dvalue.toarray()
(array([0.5 , 0.25]), array([[-0.25  ,  0.    ],
       [ 0.    , -0.0625]]))
"""
import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from . import _jacobian
from . import forward
from ._errors import DensificationError
from ._value import is_forward, jacobian_of, make, nvalue
from .sparse import SparseMatrix, _as_sparse, _dense_operand, _Pattern

__all__ = ["spsolve", "factorized", "splu", "SuperLU", "spsolve_triangular",
           "MAX_DENSE_ENTRIES"]

#: Largest number of entries (rows of ``x`` times seed columns touched) that the
#: dense Jacobian block of a solve may hold; larger ones raise
#: :class:`sparsegrad.DensificationError` before anything is allocated.  Assign
#: ``sparsegrad.linalg.MAX_DENSE_ENTRIES = ...`` to change it (10**7 entries are
#: 80 MB of float64).
MAX_DENSE_ENTRIES = 10 ** 7


class _SingularJacobianError(RuntimeError):
    """``F_x`` is singular at a solution of ``F(x, p) = 0``: ``dx/dp`` is not defined.

    A ``RuntimeError``, as SuperLU's own error for a singular matrix is, so that
    code catching that keeps working; its own class lets
    :func:`sparsegrad.optimize.newton` tell it from errors raised by ``F``.
    """


# ---- the Jacobian of a solution ----------------------------------------------------
def _matrix_of(v):
    """The Jacobian of a forward value as a scipy CSR matrix, always 2-d."""
    J = jacobian_of(v)
    return _jacobian.to_scipy(J, _jacobian.matrix_dtype(J.seed, v.dtype))


def _solution_jacobian(solve, n, rhs, seed, name):
    """The Jacobian ``A^{-1} rhs`` of a solution with ``n`` rows per column.

    ``rhs`` is a scipy sparse matrix with one row per element of ``x`` (C
    order: element ``(i, j)`` of a 2-d ``x`` is row ``i * k + j``) and one
    column per seed element; ``solve(B)`` applies ``A^{-1}`` to an ``(n, m)``
    block.  Only the seed columns that ``rhs`` touches are solved for, all in
    one block; the result stores every row of those columns.
    """
    rhs = scipy.sparse.csr_matrix(rhs)
    n_rows = rhs.shape[0]
    columns = np.unique(rhs.indices).astype(_jacobian.INDEX_DTYPE)
    if len(columns) == 0:
        return _jacobian.zero(seed, n_rows)
    entries = n_rows * len(columns)
    if entries > MAX_DENSE_ENTRIES:
        raise DensificationError(
            "%s: the Jacobian of the solution is dense in the %d seed columns its "
            "right-hand side touches: %d x %d = %d entries, more than "
            "sparsegrad.linalg.MAX_DENSE_ENTRIES = %d; seed fewer parameters, or raise "
            "the limit if the memory is there"
            % (name, len(columns), n_rows, len(columns), entries, MAX_DENSE_ENTRIES))
    if seed.pattern_only:
        data = None
    else:
        k = n_rows // n
        block = rhs[:, columns].toarray()
        # rows (i, j) of a 2-d x: column j of every seed column is one more
        # right-hand side of the same system
        data = np.ascontiguousarray(solve(block.reshape(n, k * len(columns)))).reshape(-1)
    indptr = np.arange(0, entries + 1, len(columns), dtype=_jacobian.INDEX_DTYPE)
    indices = np.tile(columns, n_rows)
    matrix = _jacobian.CSR((n_rows, seed.size), indptr, indices, data)
    return _jacobian.Jacobian(seed, n_rows, matrix=matrix)


def _working_dtype(matrix_dtype, rhs_dtype):
    """The dtype SuperLU factorises in: the matrix's, raised to the precision of the
    right-hand side (a complex right-hand side of a real matrix is solved as its
    real and imaginary parts); one of the four dtypes SuperLU knows."""
    rhs_dtype = np.dtype(rhs_dtype)
    rhs_real = np.finfo(rhs_dtype).dtype if rhs_dtype.kind in "fc" else np.dtype(np.float64)
    dtype = np.result_type(matrix_dtype, rhs_real, np.float32)
    if dtype not in (np.float32, np.float64, np.complex64, np.complex128):
        dtype = np.dtype(np.complex128 if dtype.kind == "c" else np.float64)
    return dtype


class _Factors:
    """SuperLU factorisations of one matrix, one per working dtype (usually one)."""

    def __init__(self, matrix, options):
        self.matrix = matrix.tocsc()
        self.options = options
        # (a factorisation depends on the matrix, a CSC copy that nobody else
        # holds (both callers pass CSR matrices of their own), the options,
        # fixed here, and the working dtype, the key)
        self.cache = {}

    def get(self, dtype):
        if dtype not in self.cache:
            self.cache[dtype] = scipy.sparse.linalg.splu(self.matrix.astype(dtype),
                                                         **self.options)
        return self.cache[dtype]

    def solver(self, trans="N"):
        """``B -> A^{-1} B`` (or with ``A.T``, ``A^H``), for real or complex ``B``."""
        def solve(b):
            b = np.asarray(b)
            dtype = _working_dtype(self.matrix.dtype, b.dtype)
            lu = self.get(dtype)
            if dtype.kind == "f" and b.dtype.kind == "c":
                return (lu.solve(np.ascontiguousarray(b.real, dtype=dtype), trans)
                        + 1j * lu.solve(np.ascontiguousarray(b.imag, dtype=dtype), trans))
            return lu.solve(np.ascontiguousarray(b, dtype=dtype), trans)
        return solve


def _square(A, name):
    if not isinstance(A, SparseMatrix):
        if not scipy.sparse.issparse(A):
            raise TypeError("sparsegrad.linalg.%s: A must be a sparse matrix "
                            "(sparsegrad.sparse or scipy.sparse), not %s"
                            % (name, type(A).__name__))
        A = _as_sparse(A)
    if A.shape[0] != A.shape[1]:
        raise ValueError("sparsegrad.linalg.%s: A must be square, not %dx%d"
                         % ((name,) + A.shape))
    return A


def _rhs(b, n, name):
    if scipy.sparse.issparse(b) or isinstance(b, SparseMatrix):
        raise TypeError("sparsegrad.linalg.%s: a sparse right-hand side is not "
                        "supported; pass a dense vector or matrix" % name)
    b = _dense_operand(b, "sparsegrad.linalg.%s: right-hand side" % name)
    if nvalue(b).dtype.kind not in "biufc":
        raise TypeError("sparsegrad.linalg.%s: right-hand side of dtype %s; it must hold "
                        "numbers" % (name, nvalue(b).dtype))
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError("sparsegrad.linalg.%s: right-hand side of shape %s for a %dx%d "
                         "matrix" % (name, b.shape, n, n))
    return b


def _solve(A, A_applied, solve, b, name):
    """``x = A^{-1} b``, with the Jacobian ``A^{-1}(J_b - J_A x)`` when either depends
    on the seed.  ``A_applied`` is the matrix whose product with ``x`` is ``b``
    (``A``, ``A.T`` or ``A.conj().T``) as a :class:`SparseMatrix`."""
    n = A.shape[0]
    b = _rhs(b, n, name)
    x = np.asarray(solve(nvalue(b)))
    if not (A.is_forward or is_forward(b)):
        return x
    # the residual b - A x at the constant x: its Jacobian is J_b - J_A x (its
    # value is not used: numpy's warnings about it, where x holds inf or nan after
    # a singular solve, would be about nothing the caller gets)
    with np.errstate(invalid="ignore", over="ignore"):
        residual = b - A_applied @ x
    seed = jacobian_of(residual).seed
    return make(x, _solution_jacobian(solve, n, _matrix_of(residual), seed,
                                      "sparsegrad.linalg." + name))


# ---- the public solvers -----------------------------------------------------------
def spsolve(A, b, permc_spec=None):
    """Solve ``A x = b``, differentiable in ``A`` and ``b``.

    Parameters
    ----------
    A : sparsegrad.sparse.SparseMatrix or scipy sparse matrix
        Square.  Its values may be forward values.
    b : forward value or array, shape ``(n,)`` or ``(n, k)``
        Dense right-hand side(s).
    permc_spec : str, optional
        Column ordering for SuperLU (see ``scipy.sparse.linalg.splu``).

    Returns
    -------
    forward value or ndarray
        ``x``, shaped like ``b``; a forward value when ``A`` or ``b`` is one,
        with Jacobian ``A^{-1}(J_b - J_A x)``, dense in the seed columns that
        ``J_b - J_A x`` touches.

    Raises
    ------
    DensificationError
        When that Jacobian would exceed :data:`MAX_DENSE_ENTRIES` entries
        (raised before allocating it).
    RuntimeError
        From SuperLU, for a singular ``A``.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> b = forward.seed(np.array([1.0, 2.0]))
    >>> A = scipy.sparse.csr_matrix(np.array([[2.0, 0.0], [1.0, 1.0]]))
    >>> spsolve(A, b).dvalue.toarray()
    array([[ 0.5,  0. ],
           [-0.5,  1. ]])
    """
    A = _square(A, "spsolve")
    b = _rhs(b, A.shape[0], "spsolve")  # (checked before the factorisation)
    return splu(A, permc_spec=permc_spec)._solve(b, "N", "spsolve")


class SuperLU:
    """A SuperLU factorisation of a sparse matrix whose values may be forward values.

    Returned by :func:`splu`.  :meth:`solve` gives differentiable solutions;
    the factorisation itself (``value``, and its ``L``, ``U``, ``perm_r``,
    ``perm_c``) holds plain numbers.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward, sparse
    >>> lu = splu(sparse.diags(forward.seed(np.array([2.0, 4.0]))))
    >>> lu.solve(np.array([2.0, 4.0])).dvalue.toarray()
    array([[-0.5 ,  0.  ],
           [ 0.  , -0.25]])
    """

    def __init__(self, A, factors):
        self._A = A
        self._factors = factors
        # factorised now, so that a singular matrix raises here, as in scipy
        self.value = factors.get(_working_dtype(A.dtype, A.dtype))
        self.shape = A.shape
        self.nnz = self.value.nnz

    L = property(lambda self: self.value.L)
    U = property(lambda self: self.value.U)
    perm_r = property(lambda self: self.value.perm_r)
    perm_c = property(lambda self: self.value.perm_c)

    def solve(self, rhs, trans="N"):
        """Solve ``A x = rhs`` (``trans="N"``), ``A.T x = rhs`` (``"T"``) or
        ``A.conj().T x = rhs`` (``"H"``); a forward value when ``A`` or
        ``rhs`` depends on the seed."""
        if trans not in ("N", "T", "H"):
            raise ValueError("sparsegrad.linalg.SuperLU.solve: trans must be 'N', 'T' "
                             "or 'H', not %r" % (trans,))
        return self._solve(rhs, trans, "SuperLU.solve")

    def _solve(self, rhs, trans, name):
        A = self._A
        applied = {"N": lambda: A, "T": lambda: A.T, "H": lambda: A.conj().T}[trans]()
        return _solve(A, applied, self._factors.solver(trans), rhs, name)


def splu(A, permc_spec=None, **options):
    """Factorise ``A`` once with SuperLU; solves with the result are differentiable.

    ``permc_spec`` and further keyword options go to
    ``scipy.sparse.linalg.splu``.  The factorisation keeps a copy of ``A``, so
    later writes into ``A.data`` do not reach it.  See :class:`SuperLU`.
    """
    A = _square(A, "splu")
    if permc_spec is not None:
        options["permc_spec"] = permc_spec
    # a snapshot, as the factorisation is one: the derivative of every later solve
    # uses these values, so a write into the caller's matrix (``A.data[0] = ...``)
    # must not reach them and mix new values with the old factors
    return SuperLU(A.copy(), _Factors(A.value, options))


def factorized(A):
    """Factorise ``A`` once and return ``solve(b)``, differentiable in ``A`` and ``b``.

    Like ``scipy.sparse.linalg.factorized`` (always with SuperLU).

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward, sparse
    >>> solve = factorized(sparse.diags(forward.seed(np.array([2.0, 4.0]))))
    >>> solve(np.array([2.0, 4.0])).value
    array([1., 1.])
    """
    return splu(A).solve


def spsolve_triangular(A, b, lower=True, overwrite_A=False, overwrite_b=False,
                       unit_diagonal=False):
    """Solve a triangular system ``A x = b``, differentiable in ``A`` and ``b``.

    Like ``scipy.sparse.linalg.spsolve_triangular``, except that a stored
    entry on the wrong side of the diagonal raises ``ValueError`` (scipy
    assumes the triangle without checking).  With ``unit_diagonal=True`` the
    stored diagonal is ignored, and so is its derivative.  ``overwrite_A``
    and ``overwrite_b`` are accepted for compatibility; nothing of the
    caller's is overwritten.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward, sparse
    >>> a = forward.seed(np.array([2.0, 1.0, 4.0]))
    >>> L = sparse.coo_matrix((a, ([0, 1, 1], [0, 0, 1])))
    >>> x = spsolve_triangular(L, np.array([2.0, 5.0]))
    >>> x.value
    array([1., 1.])
    >>> x.dvalue.toarray()
    array([[-0.5  ,  0.   ,  0.   ],
           [ 0.125, -0.25 , -0.25 ]])
    """
    A = _square(A, "spsolve_triangular")
    p = A._pattern
    wrong = p.indices > p.rows if lower else p.indices < p.rows
    if np.any(wrong):
        raise ValueError("sparsegrad.linalg.spsolve_triangular: A has stored entries %s "
                         "the diagonal; with lower=%s it must be %s triangular"
                         % ("above" if lower else "below", lower,
                            "lower" if lower else "upper"))
    applied = A
    if unit_diagonal:
        # the stored diagonal plays no part: the matrix applied is the strict
        # triangle (plus the constant identity, whose derivative is zero)
        keep = np.flatnonzero(p.indices != p.rows)
        pattern, _ = _Pattern.from_coo(p.shape, p.rows[keep], p.indices[keep])
        applied = SparseMatrix(pattern, A.data[keep]) + scipy.sparse.identity(
            p.shape[0], dtype=A.dtype, format="csr")
    matrix = A.value

    def solve(rhs):
        rhs = np.asarray(rhs)
        # the dtypes of the other solves (float32 stays float32, longdouble is
        # solved in float64, which SuperLU knows), complex when the rhs is
        dtype = _working_dtype(matrix.dtype, rhs.dtype)
        if rhs.dtype.kind == "c":
            dtype = np.result_type(dtype, np.complex64)
        return scipy.sparse.linalg.spsolve_triangular(
            matrix.astype(dtype), rhs.astype(dtype), lower=lower,
            unit_diagonal=unit_diagonal)

    return _solve(A, applied, solve, b, "spsolve_triangular")


# ---- implicit differentiation of F(x, p) = 0 ----------------------------------------
def implicit_solution(F, x, args, name="sparsegrad.linalg.implicit_solution"):
    """The solution ``x`` of ``F(x, *args) = 0`` as a forward value w.r.t. the seed of
    the forward values among ``args``.

    Differentiating ``F(x(p), p) = 0`` gives ``F_x dx + F_p dp = 0``, so
    ``J_x = -F_x^{-1} F_p J_p``.  ``F`` is evaluated once at ``x`` with ``x``
    and the values of the forward arguments seeded together (one pass gives
    ``F_x`` and ``F_p``); ``F_x`` is factorised once and the seed columns
    ``F_p J_p`` touches are solved in one block (size limit
    :data:`MAX_DENSE_ENTRIES`).

    Parameters
    ----------
    F : callable
        ``F(x, *args)``, returning ``x.size`` values.
    x : ndarray
        A solution of ``F(x, *args) = 0``.
    args : tuple
        Arguments of ``F``; the forward values among them (all from one seed)
        are the parameters.

    Returns
    -------
    forward value
        A copy of ``x`` (integers as float64), with Jacobian ``-F_x^{-1} F_p J_p``.

    Raises
    ------
    RuntimeError
        When ``F_x`` is singular at ``x`` (SuperLU finds an exactly zero
        pivot) and some ``F_p J_p`` column is nonzero: the implicit function
        theorem does not apply there and ``dx/dp`` is not defined.  The
        message says so and gives SuperLU's.
    DensificationError
        When the Jacobian would exceed :data:`MAX_DENSE_ENTRIES` entries.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> p = forward.seed(np.array([4.0, 9.0]))
    >>> x = implicit_solution(lambda x, p: x ** 2 - p, np.array([2.0, 3.0]), (p,))
    >>> x.dvalue.toarray()  # d sqrt(p) / dp
    array([[0.25      , 0.        ],
           [0.        , 0.16666667]])
    """
    x = np.asarray(x)
    # a copy, in floating point: the result must not share the caller's array (a
    # later write into it would change the solution), and integers would make an
    # integer-valued forward value
    x = np.array(x, dtype=np.float64 if x.dtype.kind in "biu" else None)
    positions = [i for i, a in enumerate(args) if is_forward(a)]
    if not positions:
        raise ValueError("%s: no argument is a forward value; seed the parameters with "
                         "sparsegrad.forward.seed" % name)
    parameters = [args[i] for i in positions]
    user_seed = _jacobian.common_seed([jacobian_of(p) for p in parameters])
    seeded = forward.seed(x, *[nvalue(p) for p in parameters])
    call = list(args)
    for i, s in zip(positions, seeded[1:]):
        call[i] = s
    f = F(seeded[0], *call)
    if not is_forward(f):
        raise ValueError("%s: F did not return a forward value when called with "
                         "forward arguments" % name)
    if f.size != x.size:
        raise ValueError("%s: F returned %d values for %d unknowns" % (name, f.size, x.size))
    J = _matrix_of(f)
    n = x.size
    Fx = J[:, :n]
    # -F_p J_p, summed over the parameter arguments (each its own column block of
    # J), formed as constant-matrix products with the parameters so that the
    # pattern is structural (scipy's own products drop entries that cancel)
    first, rhs = n, 0
    for p in parameters:
        rhs = rhs - J[:, first:first + p.size] @ p.reshape(-1)
        first += p.size
    if user_seed.pattern_only:
        solve = None
    else:
        solve_block = _Factors(Fx, {}).solver()

        def solve(block):
            try:
                return solve_block(block)
            except RuntimeError as error:  # SuperLU: "Factor is exactly singular"
                raise _SingularJacobianError(
                    "%s: the Jacobian F_x of F with respect to x is singular at the "
                    "solution, so the solution's derivative -F_x^{-1} F_p is not "
                    "defined (SuperLU: %s)" % (name, error)) from error
    return make(x, _solution_jacobian(solve, n, _matrix_of(rhs), user_seed, name))
