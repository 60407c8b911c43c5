"""Newton's method for large sparse nonlinear systems, with exact Jacobians.

:func:`newton` solves ``F(x) = 0`` for a square system written in plain numpy.
Each iteration evaluates ``F`` and its exact sparse Jacobian in one forward
pass (:func:`sparsegrad.value_and_jacobian`), solves the Newton system with a
sparse direct solver or a preconditioned Krylov method, and damps the step by
backtracking on the residual norm.  Failures (divergence, singular Jacobian,
non-finite residual, iteration limit) are reported in the result, never
raised and never hung on.  :func:`minimize` minimises a scalar function by
Newton's method with its exact sparse Hessian (``sparsegrad._minimize``).

>>> import numpy as np
>>> from sparsegrad.optimize import newton
>>> result = newton(lambda x: x ** 2 - np.array([4.0, 9.0]), np.ones(2))
>>> result.success, result.x
(True, array([2., 3.]))
"""
import inspect
import operator
import time
import warnings

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import scipy.sparse.linalg
from scipy.optimize import OptimizeResult

from . import _backend
from ._api import _value_and_jacobian, extra_arguments
from ._minimize import minimize
from ._progress import Progress, interval as progress_interval
from ._value import is_forward as _is_forward

__all__ = ["newton", "minimize", "OptimizeResult", "direct_solvers"]

#: ``result.status`` values and their meaning
STATUS = {
    1: "converged: residual norm below tol (or rtol times the initial norm)",
    2: "converged: Newton step below xtol",
    0: "stopped by the callback",
    -1: "maximum number of iterations reached",
    -2: "linear solve failed (singular, ill-conditioned or non-finite Jacobian)",
    -3: "residual is not finite",
    -4: "line search failed: no step length reduces the residual norm",
    -5: "diverged: residual norm grew beyond divtol times the initial norm",
    -6: "no sensitivity: the Jacobian F_x is singular at the solution, so dx/dp is "
        "not defined",
}


class _LinearSolveError(Exception):
    """The Newton system could not be solved; the message says why."""


def direct_solvers():
    """Names of the sparse direct solvers that can be used here, best first.

    ``"pardiso"`` (the pypardiso package) and ``"umfpack"`` (scikit-umfpack)
    are listed only when importable; ``"splu"`` (SuperLU, part of SciPy) is
    always available.

    Examples
    --------
    >>> "splu" in direct_solvers()
    True
    """
    names = []
    try:
        import pypardiso  # noqa: F401
        names.append("pardiso")
    except ImportError:
        pass
    try:
        import scikits.umfpack  # noqa: F401
        names.append("umfpack")
    except ImportError:
        pass
    names.append("splu")
    return names


def _solve_direct(kind, J, b):
    if kind == "pardiso":
        import pypardiso
        return pypardiso.spsolve(J.tocsr(), b)
    if kind == "umfpack":
        import scikits.umfpack
        return scikits.umfpack.spsolve(J.tocsc(), b)
    return scipy.sparse.linalg.splu(J.tocsc()).solve(b)


#: the keys of ``linear_options``; all of them are settings of the Krylov methods
_KRYLOV_OPTIONS = ("rtol", "maxiter", "restart", "preconditioner", "reuse", "drop_tol",
                   "fill_factor", "permc_spec")
#: the keys that set the ILU preconditioner (``scipy.sparse.linalg.spilu``)
_ILU_OPTIONS = ("drop_tol", "fill_factor", "permc_spec")
#: SuperLU's column orderings, for ``linear_options["permc_spec"]``
_ORDERINGS = ("COLAMD", "MMD_AT_PLUS_A", "MMD_ATA", "NATURAL")
#: Krylov iterations a solve may take by default: enough for any preconditioner that
#: works, and a bounded wait for one that does not
_DEFAULT_KRYLOV_ITERATIONS = 1000
#: the Eisenstat-Walker forcing term (their "choice 2"):
#: eta = GAMMA (|F_k| / |F_k-1|)^ALPHA, ETA_0 at the first step, within [ETA_MIN, ETA_MAX]
_EW_GAMMA, _EW_ALPHA, _EW_ETA_0, _EW_ETA_MAX, _EW_ETA_MIN = 0.9, 2.0, 0.1, 0.9, 1e-10


def _amg_available():
    try:
        import pyamg  # noqa: F401
    except ImportError:
        return False
    return True


def _pattern(J):
    """The stored entries of the CSR matrix ``J`` as ones (stored zeros included)."""
    return scipy.sparse.csr_matrix((np.ones(J.nnz), J.indices, J.indptr), shape=J.shape)


def _symmetric_pattern(J, threshold=0.9):
    """Whether at least ``threshold`` of the stored entries of the CSR matrix ``J`` have
    their mirror entry stored too."""
    P = _pattern(J)
    return P.multiply(P.T).nnz >= threshold * P.nnz


def _ilu(J, options):
    """``spilu`` of ``J`` with an ordering chosen for its pattern: (solve, description)."""
    J = J.tocsr()
    # SuperLU's fill_factor bounds the fill of every column, not the total: at its
    # default of 10 the separators of a minimum-degree ordering hit it, and the extra
    # dropping spoiled the factor (2-d Bratu 600 x 600: 66 GMRES iterations against
    # 11 with 20, for the same number of entries)
    settings = {"drop_tol": options.get("drop_tol", 1e-4),
                "fill_factor": options.get("fill_factor", 20)}
    ordering = options.get("permc_spec")
    if ordering is None:
        # COLAMD (SuperLU's default) orders the columns for A^T A; on a grid's
        # Laplacian the incomplete factor it gives is a poor preconditioner (2-d
        # Bratu: several times the Krylov iterations of minimum degree on A + A^T,
        # the ordering for a (nearly) symmetric pattern)
        ordering = "MMD_AT_PLUS_A" if _symmetric_pattern(J) else "COLAMD"
    if ordering == "MMD_AT_PLUS_A":
        settings["options"] = {"SymmetricMode": True}  # (diagonal pivots first)
    # rows scaled to a largest entry of 1: drop_tol is relative to each column, and on
    # rows of very different sizes (drift-diffusion: 1e-6 to 1e9) dropping left a
    # zero pivot, "Factor is exactly singular", where the scaled rows factor well
    largest = abs(J).max(axis=1).toarray().ravel()
    scale = 1.0 / np.where(largest > 0, largest, 1.0)
    ilu = scipy.sparse.linalg.spilu((scipy.sparse.diags(scale) @ J).tocsc(),
                                    permc_spec=ordering, **settings)
    entries = ilu.L.nnz + ilu.U.nnz - J.shape[0]
    text = ("ILU (%s, drop_tol %g, fill_factor %g, rows scaled): %d entries, %.1f per "
            "entry of J" % (ordering, settings["drop_tol"], settings["fill_factor"],
                            entries, entries / max(J.nnz, 1)))
    return (lambda v: ilu.solve(scale * v.reshape(-1))), text


def _amg(J):
    """A V-cycle of pyamg's classical (Ruge-Stueben) AMG for ``J``: (solve, description).

    Classical rather than smoothed aggregation: on the diffusion-dominated systems it
    suits (a Laplacian plus a positive diagonal, as Bratu and Poisson-Boltzmann) it
    set up faster and took about half the Krylov iterations.
    """
    import pyamg
    hierarchy = pyamg.ruge_stuben_solver(J.tocsr())
    text = ("AMG (pyamg Ruge-Stueben): %d levels, operator complexity %.2f"
            % (len(hierarchy.levels), hierarchy.operator_complexity()))
    return hierarchy.aspreconditioner(cycle="V").matvec, text


class _KrylovSolve:
    """``solve(J, b)`` by GMRES or BiCGSTAB, keeping its preconditioner between calls.

    ``newton`` sets ``rtol`` before each call unless the user fixed it (the forcing
    term), and may set ``report(iterations)``, called at every Krylov iteration.
    With ``reuse``, the preconditioner built for one Jacobian serves the next ones
    until a solve needs more than twice the iterations per digit of residual
    reduction of its first solve (then it is rebuilt for the next solve), or fails
    to converge (then it is rebuilt at once and the solve repeated).
    """

    def __init__(self, kind, options):
        self.kind = kind
        self.options = options
        self.adaptive = "rtol" not in options
        self.rtol = options.get("rtol", _EW_ETA_MIN)
        self.preconditioner = options.get("preconditioner", "ilu")
        self.reuse = options.get("reuse", True)
        self.report = None
        self.description = "not built yet"
        self._M = self._shape = self._rate = None
        self._stale = True
        self.solves = self.iterations = self.setups = self.last_iterations = 0
        self.setup_seconds = self.solve_seconds = 0.0

    def _setup(self, J):
        started = time.perf_counter()
        if self.preconditioner == "ilu":
            solve, self.description = _ilu(J, self.options)
        elif self.preconditioner == "amg":
            solve, self.description = _amg(J)
        else:
            solve, self.description = None, "no preconditioner"
        self._M = None if solve is None else scipy.sparse.linalg.LinearOperator(
            J.shape, solve, dtype=J.dtype)
        self._shape, self._stale, self._rate = J.shape, False, None
        if solve is not None:
            self.setups += 1
        self.setup_seconds += time.perf_counter() - started

    def _iterate(self, J, b):
        count = [0]

        def counted(*_):
            count[0] += 1
            if self.report is not None:
                self.report(count[0])

        settings = _krylov_settings(self.kind, self.options, self.rtol)
        if self.kind == "gmres":
            step, info = scipy.sparse.linalg.gmres(
                J, b, M=self._M, callback=counted, callback_type="pr_norm", **settings)
        else:
            step, info = scipy.sparse.linalg.bicgstab(
                J, b, M=self._M, callback=counted, **settings)
        self.iterations += count[0]
        return step, info, count[0]

    def __call__(self, J, b):
        started = time.perf_counter()
        fresh = self._stale or not self.reuse or self._shape != J.shape
        if fresh:
            self._setup(J)
        J = J.tocsr()
        step, info, count = self._iterate(J, b)
        if info != 0 and not fresh and self.preconditioner is not None:
            # built for an earlier Jacobian, it may no longer fit this one
            self._setup(J)
            fresh = True
            step, info, more = self._iterate(J, b)
            count += more
        self.solves += 1
        self.last_iterations = count
        self.solve_seconds += time.perf_counter() - started
        if info != 0:
            raise _LinearSolveError(
                "%s did not converge to rtol=%.1e (info=%d, %d iterations, %s); raise "
                "linear_options['maxiter'], improve the preconditioner or use a direct "
                "solver (linear_solver='direct')"
                % (self.kind, self.rtol, info, count, self.description))
        rate = count / max(1.0, -np.log10(self.rtol))
        if fresh:
            self._rate = rate
        elif rate > 2 * self._rate + 1:
            self._stale = True
        return step


def _krylov_settings(kind, options, rtol=1e-10):
    """Tolerances and limits of a Krylov solve: the user's ``linear_options`` over
    the defaults (relative tolerance ``rtol``, GMRES restarted every 50 steps, about
    _DEFAULT_KRYLOV_ITERATIONS iterations at most)."""
    settings = {"rtol": options.get("rtol", rtol), "atol": 0.0}
    if kind == "gmres":
        settings["restart"] = options.get("restart", 50)
        # (SciPy's GMRES counts restart cycles in maxiter)
        default = -(-_DEFAULT_KRYLOV_ITERATIONS // settings["restart"])
    else:
        default = _DEFAULT_KRYLOV_ITERATIONS
    maxiter = options.get("maxiter")
    settings["maxiter"] = default if maxiter is None else maxiter
    return settings


def _forcing_term(eta, norm, previous_norm, tol):
    """The next Krylov relative tolerance, by Eisenstat and Walker's choice 2.

    Loose while the residual falls slowly (far from the solution, where an accurate
    Newton step is wasted), tightening with the square of its rate once it falls
    fast, and never tighter than this step needs to reach ``tol``.  ``norm`` and
    ``previous_norm`` are 2-norms of the residual; ``tol`` bounds its max-norm,
    which the 2-norm bounds.
    """
    if previous_norm is None:
        eta = _EW_ETA_0
    else:
        safeguard = _EW_GAMMA * eta ** _EW_ALPHA
        eta = _EW_GAMMA * (norm / previous_norm) ** _EW_ALPHA
        if safeguard > 0.1:  # (one lucky step does not make the next one easy)
            eta = max(eta, safeguard)
    if norm > 0:
        eta = max(eta, 0.5 * tol / norm)
    return min(max(eta, _EW_ETA_MIN), _EW_ETA_MAX)


def _is_number(value):
    return (isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, (bool, np.bool_)))


def _is_count(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_linear_options(linear_solver, options):
    """Refuse ``linear_options`` that the chosen solver would ignore or cannot take.

    An option that is silently dropped (a misspelt key, ``restart`` for
    BiCGSTAB, any option for a direct solver, ``drop_tol`` without the ILU
    preconditioner) leaves the user believing a tolerance or preconditioner is in
    effect when it is not; a value out of range fails deep inside SciPy, or not at
    all.
    """
    krylov = isinstance(linear_solver, str) and linear_solver in ("gmres", "bicgstab")
    if options and not krylov:
        raise ValueError("sparsegrad.optimize.newton: linear_options (%s) are settings of "
                         "the Krylov solvers 'gmres' and 'bicgstab'; linear_solver=%r "
                         "takes none" % (", ".join(map(str, options)),
                                         getattr(linear_solver, "__name__", linear_solver)))
    unknown = [key for key in options if key not in _KRYLOV_OPTIONS]
    if linear_solver == "bicgstab" and "restart" in options:
        unknown.append("restart (a GMRES setting)")
    if unknown:
        raise ValueError("sparsegrad.optimize.newton: unknown linear_options for %s: %s "
                         "(known: %s)" % (linear_solver, ", ".join(map(str, unknown)),
                                          ", ".join(_KRYLOV_OPTIONS)))

    def refuse(key, wanted):
        raise ValueError("sparsegrad.optimize.newton: linear_options[%r] must be %s, not %r"
                         % (key, wanted, options[key]))

    preconditioner = options.get("preconditioner", "ilu")
    if preconditioner is not None and not (isinstance(preconditioner, str)
                                           and preconditioner in ("ilu", "amg")):
        refuse("preconditioner", "'amg', 'ilu' or None")
    if preconditioner == "amg" and not _amg_available():
        raise ValueError("sparsegrad.optimize.newton: linear_options['preconditioner'] = "
                         "'amg' needs pyamg, which is not installed (pip install pyamg, "
                         "or the extra sparsegrad[amg]); 'ilu' needs nothing more")
    ilu_keys = [key for key in _ILU_OPTIONS if key in options]
    if ilu_keys and preconditioner != "ilu":
        raise ValueError("sparsegrad.optimize.newton: linear_options %s set the ILU "
                         "preconditioner; preconditioner=%r takes none"
                         % (", ".join(ilu_keys), preconditioner))
    valid = {
        "rtol": (lambda v: _is_number(v) and 0 < v < 1,
                 "a number between 0 and 1 (leave it out for the adaptive "
                 "Eisenstat-Walker tolerance)"),
        "maxiter": (lambda v: v is None or _is_count(v) and v >= 1,
                    "a positive int or None"),
        "restart": (lambda v: _is_count(v) and v >= 1, "a positive int"),
        "reuse": (lambda v: isinstance(v, (bool, np.bool_)), "True or False"),
        "drop_tol": (lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)"),
        "fill_factor": (lambda v: _is_number(v) and 1 <= v < np.inf,
                        "a finite number >= 1"),
        "permc_spec": (lambda v: isinstance(v, str) and v in _ORDERINGS,
                       "one of %s" % ", ".join(map(repr, _ORDERINGS))),
    }
    for key, (test, wanted) in valid.items():
        if key in options and not test(options[key]):
            refuse(key, wanted)


def _linear_solver(linear_solver, options):
    """A function ``solve(J, b)`` for the chosen method (not a callable: see newton)."""
    if linear_solver in ("direct", "auto"):
        linear_solver = direct_solvers()[0]
    if linear_solver in ("pardiso", "umfpack", "splu"):
        if linear_solver not in direct_solvers():
            raise ValueError("linear_solver=%r is not available: its package is not "
                             "installed (available: %s)"
                             % (linear_solver, ", ".join(direct_solvers())))
        return (lambda J, b: _solve_direct(linear_solver, J, b)), linear_solver
    if linear_solver in ("gmres", "bicgstab"):
        return _KrylovSolve(linear_solver, options), linear_solver
    raise ValueError("linear_solver must be 'direct', 'splu', 'umfpack', 'pardiso', "
                     "'gmres', 'bicgstab' or a callable, not %r" % (linear_solver,))


def _device_solver(backend, linear_solver, options):
    """``solve(J, b)`` on a device: its sparse direct solver, or its GMRES."""
    linalg = backend.linalg
    if linear_solver in ("direct", "auto", "spsolve"):
        return (lambda J, b: linalg.spsolve(J, b)), "spsolve on %s" % backend.name
    if linear_solver == "gmres":
        unused = [key for key in ("preconditioner", "reuse") + _ILU_OPTIONS
                  if key in options and not (key == "preconditioner"
                                             and options[key] is None)]
        if unused:  # (the host's ILU preconditioner has no device counterpart here)
            raise ValueError("linear_options %s: GMRES on the %s device runs without a "
                             "preconditioner" % (", ".join(unused), backend.name))
        settings = _krylov_settings("gmres", options)
        settings["maxiter"] = options.get("maxiter")  # (None: the device's own limit)
        if "rtol" not in inspect.signature(linalg.gmres).parameters:
            settings["tol"] = settings.pop("rtol")  # (CuPy before 14 named it tol)

        def solve(J, b):
            step, info = linalg.gmres(J, b, **settings)
            if info != 0:
                raise _LinearSolveError("gmres did not converge (info=%d)" % info)
            return step
        return solve, "gmres on %s" % backend.name
    raise ValueError("linear_solver=%r is not available for arrays on the %s device: "
                     "use 'direct' (its spsolve), 'gmres' or a callable"
                     % (linear_solver, backend.name))


def _checked_solve(solve, J, b):
    """``solve(J, b)``, turning every sign of a singular system into _LinearSolveError."""
    data = getattr(J, "data", None)
    if data is not None and not np.all(np.isfinite(data)):
        # an infinite derivative would give a zero (or nan) step: never a solution
        raise _LinearSolveError("the Jacobian has non-finite entries (inf or nan) at x, "
                                "so the Newton step is not defined")
    with warnings.catch_warnings():
        # spsolve and umfpack warn (and return nan) instead of raising
        warnings.simplefilter("error", scipy.sparse.linalg.MatrixRankWarning)
        warnings.simplefilter("error", RuntimeWarning)
        try:
            step = solve(J, b)
        except _LinearSolveError:
            raise
        except (RuntimeError, ValueError, ArithmeticError, np.linalg.LinAlgError,
                scipy.sparse.linalg.MatrixRankWarning, RuntimeWarning) as error:
            raise _LinearSolveError("%s: %s" % (type(error).__name__, error))
    answer = step
    step = _backend.asarray(step)
    if step.dtype.kind not in "biufc":
        raise _LinearSolveError("the linear solver returned %s, not an array of numbers"
                                % type(answer).__name__)
    step = step.reshape(-1)
    if step.size != b.size:
        raise _LinearSolveError("the linear solver returned %d values for %d unknowns"
                                % (step.size, b.size))
    if not np.all(np.isfinite(step)):
        raise _LinearSolveError("the Newton step is not finite")
    return step


#: the clock of verbose times and progress lines (a test may replace it)
_clock = time.perf_counter


#: a band LU with at most this many entries (160 MB) is cheap next to Krylov solves
_SMALL_BAND_LU = 2 * 10 ** 7


def _direct_is_better(J):
    """Why a direct solver suits ``J`` at least as well as a Krylov method, or ``""``.

    Reordered by reverse Cuthill-McKee, ``J`` has bandwidth ``b``; its LU factors,
    row pivoting included, then fit in ``n (3b + 1)`` entries.  Where that is small
    (1-d problems at any size, 2-d ones up to a few 10^4 unknowns), a factorisation
    costs about as much as a few preconditioned Krylov iterations, and it needs no
    preconditioner that may fail.
    """
    J = J.tocsr()
    n = J.shape[0]
    if n == 0:
        return ""
    P = _pattern(J)
    order = scipy.sparse.csgraph.reverse_cuthill_mckee(P, symmetric_mode=False)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    rows = np.repeat(np.arange(n), np.diff(P.indptr))
    bandwidth = int(np.max(np.abs(inverse[rows] - inverse[P.indices]), initial=0))
    entries = n * (3 * bandwidth + 1)
    if entries > _SMALL_BAND_LU:
        return ""
    return ("J has bandwidth %d after reverse Cuthill-McKee ordering (LU factors of at "
            "most %d entries): a direct solver (linear_solver='direct') solves it in "
            "about the time of a few Krylov iterations, and cannot fail to converge"
            % (bandwidth, entries))


def _norm(v):
    return float(np.max(np.abs(v))) if v.size else 0.0


def newton(F, x0, args=(), *, tol=1e-10, rtol=0.0, xtol=1e-12, maxiter=50,
           linear_solver="direct", linear_options=None, line_search=True,
           min_damping=1e-4, divtol=1e8, verbose=False, callback=None,
           sensitivity=False, trace=True, progress=None):
    """Solve ``F(x) = 0`` by Newton's method with the exact sparse Jacobian.

    Parameters
    ----------
    F : callable
        ``F(x, *args)``, ordinary numpy code returning an array with
        ``x0.size`` elements (a square system).  It is called with forward
        values to get the Jacobian (light values when recorded) and
        with plain arrays in the line search.
    x0 : array_like
        Starting point, any shape; ``F`` receives arrays of this shape.
    args : tuple, optional
        Extra arguments of ``F`` (anything but a tuple is one argument, as in
        ``scipy.optimize``).
    tol : float, optional
        Converged when ``max|F(x)| <= tol`` (absolute tolerance).
    rtol : float, optional
        Also converged when ``max|F(x)| <= rtol * max|F(x0)|`` (relative
        tolerance, as SciPy's ``f_rtol``; 0, the default, for ``tol`` alone).
    xtol : float, optional
        Also converged when the Newton step satisfies
        ``max|dx| <= xtol * (1 + max|x|)`` (the step is then taken in full):
        which ends the iteration where rounding keeps the residual above
        ``tol``.  Use 0 to rely on ``tol`` alone.
    maxiter : int, optional
        Maximum number of Newton iterations (Jacobian evaluations).
    linear_solver : str or callable, optional
        ``"direct"`` (default): the best available sparse direct solver,
        pypardiso or scikit-umfpack when importable, else SciPy's SuperLU
        (see :func:`direct_solvers`); ``"splu"``, ``"umfpack"``, ``"pardiso"``
        to choose one; ``"gmres"`` or ``"bicgstab"``: SciPy's Krylov method,
        preconditioned (incomplete LU by default), to the relative tolerance
        of an inexact Newton method; or a callable ``solve(J, b)`` returning
        the solution of ``J dx = b``.  A direct solver is the better choice
        where the preconditioner does not serve (many Krylov iterations, or a
        Jacobian that changes much from one iteration to the next) and for
        a narrow band, where it is about as fast and cannot fail to
        converge; ``verbose`` says so.  For ``x0`` on a GPU (a CuPy array;
        the iteration then stays on the device): ``"direct"`` is
        ``cupyx.scipy.sparse.linalg.spsolve``, ``"gmres"`` its GMRES (no
        preconditioner), or a callable.
    linear_options : dict, optional
        For the Krylov methods:

        - ``rtol``: a fixed relative tolerance of every linear solve; left
          out (the default), the Eisenstat-Walker forcing term (choice 2)
          sets it at each iteration: 0.1 at the first, then
          ``0.9 (|F_k| / |F_k-1|)^2`` within ``[1e-10, 0.9]``, never below
          what reaches ``tol`` in one step.
        - ``maxiter``: SciPy's (restart cycles for gmres); default about 1000
          iterations.  ``restart`` (gmres only): default 50.
        - ``preconditioner``: ``"ilu"`` (default, ``scipy.sparse.linalg.spilu``),
          ``"amg"`` (classical algebraic multigrid of pyamg, an optional
          dependency: ``pip install pyamg``) or ``None``.
        - ``reuse``: keep the preconditioner from one Newton iteration to
          the next while a solve takes at most about twice the iterations
          per digit of its first solve; rebuild it otherwise, and at once when
          a solve fails with it (default ``True``; ``False`` rebuilds it at
          every iteration).
        - ``drop_tol`` (default 1e-4), ``fill_factor`` (default 20) and
          ``permc_spec`` of ``spilu`` (default ``"MMD_AT_PLUS_A"`` for a
          nearly symmetric pattern, ``"COLAMD"`` otherwise), for ``"ilu"``.

        Other keys, values out of range, options of a preconditioner not in
        use, and any option with another ``linear_solver``, raise
        ``ValueError`` rather than being ignored.
    line_search : bool, optional
        Backtracking (default): halve the step length ``a`` until the
        residual decreases enough, ``||F(x + a dx)||_2 <= (1 - 1e-4 a)
        ||F(x)||_2``.  With ``False`` full steps are taken.
    min_damping : float, optional
        Smallest step length tried by the line search before giving up.
    divtol : float, optional
        Give up when the residual norm exceeds ``divtol`` times its initial
        value (only reachable without line search).
    verbose : bool, optional
        Print one line per iteration: residual norm, step norm, damping and
        elapsed time, and for a Krylov method its iterations and relative
        tolerance, with a summary (iterations, preconditioner setups, times)
        and a note where a direct solver is the better choice.
    callback : callable, optional
        ``callback(x, f)`` after every iteration, with the new iterate and its
        residual (both shaped like ``x0``/``F``'s output); returning ``True``
        stops the iteration (status 0).
    sensitivity : bool, optional
        Implicit differentiation: ``args`` may hold forward values (all from
        one ``forward.seed``, the parameters ``p``); the system is solved at
        their values, and on success ``result.x`` is a forward value whose
        Jacobian is ``dx/dp = -F_x^{-1} F_p`` (times the parameters' own
        Jacobian), from one more evaluation of ``F`` at the solution and one
        factorisation of ``F_x`` (SuperLU, whatever ``linear_solver`` is).
        It is dense in the seeded columns it touches, so it is limited by
        ``sparsegrad.linalg.MAX_DENSE_ENTRIES`` (``DensificationError``
        otherwise).  On failure ``result.x`` stays a plain array.  When the
        iteration converges to a point where ``F_x`` is singular (SuperLU
        finds a zero pivot), ``dx/dp`` is not defined there: the result has
        ``success=False``, status -6, and ``x`` is the converged solution as
        a plain array (the message says how it converged).
    trace : bool, optional
        Evaluate the Jacobians by a recorded program (default; as
        :func:`sparsegrad.value_and_jacobian`): for an ``F`` of elementwise
        operations, reshapes, reads, padding and concatenations, each
        Jacobian after the first costs a fraction of ``forward.seed``'s, and
        later solves of the same structure (a time stepper's) reuse the
        program; any other ``F`` is evaluated by ``forward.seed`` (``F`` may
        then run twice at the first evaluation).  ``False``: ``forward.seed``
        at every evaluation.
    progress : bool or float, optional
        Print a progress line while the solve runs: the iteration under way,
        ``max|F|`` at its start, what it is doing (a linear solve, the Krylov
        iteration reached, an evaluation) and the time so far, whenever that
        many seconds (``True``: 1) have passed without output.  ``None`` (the
        default): 1 second with ``verbose``, none without; ``False``: never;
        ``0``: at every step of the solve.

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x`` (shaped like ``x0``), ``success``, ``status`` (see
        :data:`STATUS`), ``message``, ``nit`` (Newton iterations), ``nfev``
        (plain evaluations of ``F``, in the line search), ``njev`` (forward
        evaluations, each giving ``F`` and its Jacobian), ``fun`` (the
        residual at ``x``), ``jac`` (the last Jacobian evaluated: at the
        iterate before the last step when the iteration ended after a step, as
        it usually does; at ``x`` when it ended before taking one) and ``residual_norms``
        (``max|F|`` before the first and after every iteration); with
        ``"gmres"`` or ``"bicgstab"`` also ``linear_iterations`` (all Krylov
        iterations) and ``preconditioner_setups``.

    Raises
    ------
    ValueError
        For a non-finite ``x0``, a residual whose size differs from
        ``x0.size`` or that is complex for a real ``x0``, an unknown or
        unavailable ``linear_solver``, ``linear_options`` it does not take,
        invalid tolerances (``divtol`` included) or ``progress``.
    TypeError
        For forward values in ``args`` without ``sensitivity=True``, a
        non-numeric or forward-value ``x0``, or a residual of bools.

    Examples
    --------
    >>> import numpy as np
    >>> def F(x):
    ...     r = np.zeros(x.size, like=x)
    ...     r[0] = x[0] - 1.0
    ...     r[1:] = x[1:] - x[:-1] ** 2 - 0.1
    ...     return r
    >>> result = newton(F, np.zeros(4))
    >>> result.success, bool(abs(result.fun).max() < 1e-10)
    (True, True)
    >>> result.x
    array([1.    , 1.1   , 1.31  , 1.8161])

    Sensitivity of the solution of ``x**2 = p`` to ``p``:

    >>> from sparsegrad import forward
    >>> p = forward.seed(np.array([4.0, 9.0]))
    >>> result = newton(lambda x, p: x ** 2 - p, np.ones(2), args=(p,), sensitivity=True)
    >>> result.x.value, result.x.dvalue.toarray().round(4)
    (array([2., 3.]), array([[0.25  , 0.    ],
           [0.    , 0.1667]]))
    """
    if _is_forward(x0):
        # (seeding it would drop its derivative: a silently wrong nested derivative)
        raise TypeError("sparsegrad.optimize.newton: x0 is a forward value; the starting "
                        "point is a constant (pass x0.value); for the derivative of the "
                        "solution, pass the parameters in args with sensitivity=True")
    backend = _backend.of(x0)
    if backend is _backend.CPU:
        if np.asarray(x0).dtype.kind not in "biufc":
            raise TypeError("sparsegrad.optimize.newton: x0 has dtype %s; it must be "
                            "numbers" % np.asarray(x0).dtype)
        x = np.array(x0, dtype=np.result_type(np.asarray(x0).dtype, np.float64), copy=True)
    else:  # a device array (CuPy): the iteration stays on the device
        x = backend.xp.asarray(x0).astype(np.result_type(x0.dtype, np.float64), copy=True)
    shape = x.shape
    if not np.all(np.isfinite(x)):
        raise ValueError("sparsegrad.optimize.newton: x0 is not finite")
    if not (tol >= 0 and 0 <= rtol < 1 and xtol >= 0 and 0 < min_damping <= 1
            and maxiter >= 0 and divtol > 0):
        # (nan fails too: a nan divtol never detects divergence)
        raise ValueError("sparsegrad.optimize.newton: need tol >= 0, 0 <= rtol < 1, "
                         "xtol >= 0, 0 < min_damping <= 1, maxiter >= 0 and divtol > 0")
    maxiter = operator.index(maxiter)  # (2.5 iterations: a TypeError, as numpy's own)
    linear_options = dict(linear_options or {})
    if callable(linear_solver):  # (the user's: for any device)
        solve, solver_name = linear_solver, getattr(linear_solver, "__name__", "callable")
    elif backend is _backend.CPU:
        solve, solver_name = _linear_solver(linear_solver, linear_options)
    else:
        solve, solver_name = _device_solver(backend, linear_solver, linear_options)
    _check_linear_options(linear_solver, linear_options)
    args = extra_arguments(args)
    parameter_args = args
    if any(_is_forward(a) for a in args):
        if not sensitivity:
            raise TypeError("sparsegrad.optimize.newton: args hold forward values; pass "
                            "sensitivity=True to get the solution's derivative with "
                            "respect to them, or pass their .value")
        args = tuple(a.value if _is_forward(a) else a for a in args)
    elif sensitivity:
        raise ValueError("sparsegrad.optimize.newton: sensitivity=True needs forward "
                         "values among args (the parameters, from forward.seed)")
    if sensitivity and backend is not _backend.CPU:
        raise NotImplementedError("sparsegrad.optimize.newton: sensitivity=True is not "
                                  "available on the %s device yet (it factorises with "
                                  "SciPy's SuperLU on the host)" % backend.name)
    evaluate = _value_and_jacobian(F, 0, "matrix", False, "sparsegrad.optimize.newton",
                                   trace)
    counts = {"nfev": 0, "njev": 0}

    def residual(x_flat):
        counts["nfev"] += 1
        f = _backend.asarray(F(x_flat.reshape(shape), *args))
        return f

    def residual_and_jacobian(x_flat):
        counts["njev"] += 1
        f, J = evaluate(x_flat.reshape(shape), *args)
        if f.size != x.size:
            raise ValueError("sparsegrad.optimize.newton: F returned %d values for %d "
                             "unknowns; Newton's method needs a square system"
                             % (f.size, x.size))
        if f.dtype.kind == "b":
            raise TypeError("sparsegrad.optimize.newton: F returned bool values; a "
                            "residual is numbers (its Jacobian is zero)")
        if np.iscomplexobj(f) and not np.iscomplexobj(x_flat):
            # n complex equations in n real unknowns: the complex Newton step would
            # silently turn x complex, and F be differentiated at complex points
            raise ValueError("sparsegrad.optimize.newton: F returned complex values for a "
                             "real x0; start from a complex x0 (x0 + 0j) to solve in "
                             "complex numbers, or make F return real values")
        return f, J

    interval = progress_interval(progress, verbose, "sparsegrad.optimize.newton")
    krylov = solve if isinstance(solve, _KrylovSolve) else None
    start = _clock()
    report = Progress("newton", interval, start, _clock)
    report.state = "max|F| = nan"
    x = x.reshape(-1)
    f, J = residual_and_jacobian(x)
    norm = _norm(f)
    norms = [norm]
    if krylov is not None and interval is not None:
        krylov.report = lambda count: report.update(
            "%s iteration %d (rtol %.1e)" % (krylov.kind, count, krylov.rtol))
    if verbose:
        print("newton: %d unknowns, linear solver %s" % (x.size, solver_name))
        if krylov is not None:
            print("newton: %s; Krylov rtol %s" % (
                ("no preconditioner" if krylov.preconditioner is None else
                 "%s preconditioner, %s" % (krylov.preconditioner.upper(),
                                            "reused while it serves" if krylov.reuse
                                            else "rebuilt at every iteration")),
                "by the Eisenstat-Walker forcing term" if krylov.adaptive
                else "%g" % krylov.rtol))
            advice = _direct_is_better(J)
            if advice:
                print("newton: %s" % advice)
        print("  iter   max|F|        max|dx|       damping   time [s]"
              + ("  lin.it  lin.rtol" if krylov is not None else ""))
        print("  %4d   %.4e    %-12s  %-8s  %8.3f"
              % (0, norm, "", "", _clock() - start))
        report.quiet()

    def row(nit, norm, step_norm, damping):
        line = "  %4d   %.4e    %.4e    %-8.3g  %8.3f" % (nit, norm, step_norm, damping,
                                                         _clock() - start)
        if krylov is not None:
            line += "  %6d  %8.1e" % (krylov.last_iterations, krylov.rtol)
        print(line)
        report.quiet()

    def finish(status, detail=""):
        solution = x.reshape(shape)
        if sensitivity and status > 0:
            from .linalg import implicit_solution, _SingularJacobianError
            try:
                solution = implicit_solution(F, solution, parameter_args,
                                             "sparsegrad.optimize.newton")
            except _SingularJacobianError as error:
                # x solves F = 0, but the derivative asked for does not exist there:
                # a failure like a singular Newton step (a result, not an exception),
                # keeping the solution and saying how it was reached
                detail = ("the iteration stopped with \"%s\" and x is that solution, as "
                          "a plain array (SuperLU: %s)"
                          % (STATUS[status] + (": " + detail if detail else ""),
                             error.__cause__))
                status = -6
        message = STATUS[status] + (": " + detail if detail else "")
        if verbose:
            if krylov is not None and krylov.solves:
                print("newton: %s: %d iterations in %d solves (%.3f s); preconditioner "
                      "setups: %d (%.3f s), the last: %s"
                      % (krylov.kind, krylov.iterations, krylov.solves,
                         krylov.solve_seconds - krylov.setup_seconds, krylov.setups,
                         krylov.setup_seconds, krylov.description))
                if krylov.iterations > 50 * krylov.solves:
                    print("newton: %d Krylov iterations per solve: a direct solver "
                          "(linear_solver='direct') is likely faster, unless its factors "
                          "do not fit in memory" % (krylov.iterations // krylov.solves))
            print("newton: %s" % message)
        result = OptimizeResult(
            x=solution, success=status > 0, status=status, message=message,
            nit=nit, nfev=counts["nfev"], njev=counts["njev"], fun=f, jac=J,
            residual_norms=norms)
        if krylov is not None:
            result.linear_iterations = krylov.iterations
            result.preconditioner_setups = krylov.setups
        return result

    nit = 0
    if not np.isfinite(norm):
        return finish(-3, "at x0")
    tol = max(tol, rtol * norm)
    if norm <= tol:
        return finish(1)
    eta = previous_norm2 = None
    while True:
        if nit >= maxiter:
            return finish(-1, "maxiter=%d, max|F| = %.3e" % (maxiter, norm))
        report.iteration, report.state = nit + 1, "max|F| = %.4e" % norm
        if krylov is not None and krylov.adaptive:
            norm2 = float(np.linalg.norm(f))
            eta = krylov.rtol = _forcing_term(eta, norm2, previous_norm2, tol)
            previous_norm2 = norm2
        report.update("solving the linear system (%s)" % solver_name)
        try:
            step = _checked_solve(solve, J, -f.reshape(-1))
        except _LinearSolveError as error:
            return finish(-2, str(error))
        nit += 1
        if _norm(step) <= xtol * (1 + _norm(x)):
            # a negligible full step: converged, also where rounding keeps the
            # residual above tol and no line search could reduce it further
            x = x + step
            f = residual(x)
            norm = _norm(f)
            norms.append(norm)
            if verbose:
                row(nit, norm, _norm(step), 1.0)
            if not np.isfinite(norm):
                return finish(-3, "at iteration %d" % nit)
            if callback is not None:  # (after every iteration; converged either way)
                callback(x.reshape(shape), f)
            return finish(2)
        damping = 1.0
        while True:
            report.update("evaluating F at step length %g" % damping)
            trial = x + damping * step
            f_trial = residual(trial)
            norm_trial = _norm(f_trial)
            if not line_search:
                break
            # sufficient decrease of the 2-norm (Armijo with the usual 1e-4): the
            # Newton direction is a descent direction of ||F||_2, not of max|F|
            if (np.isfinite(norm_trial) and np.linalg.norm(f_trial)
                    <= (1 - 1e-4 * damping) * np.linalg.norm(f)):
                break
            damping /= 2
            if damping < min_damping:
                norms.append(norm)  # (x stays where it was: one norm per iteration)
                return finish(-4, "max|F| = %.3e at iteration %d" % (norm, nit))
        x = trial
        if verbose:
            row(nit, norm_trial, damping * _norm(step), damping)
        if not np.isfinite(norm_trial):
            f, norm = f_trial, norm_trial
            norms.append(norm)
            return finish(-3, "at iteration %d" % nit)
        if norm_trial > divtol * norms[0]:
            f, norm = f_trial, norm_trial
            norms.append(norm)
            return finish(-5, "max|F| = %.3e at iteration %d" % (norm, nit))
        stop = callback is not None and callback(x.reshape(shape), f_trial)
        if norm_trial <= tol:
            f, norm = f_trial, norm_trial
            norms.append(norm)
            return finish(1)
        if stop:
            f, norm = f_trial, norm_trial
            norms.append(norm)
            return finish(0)
        report.iteration, report.state = nit + 1, "max|F| = %.4e" % norm_trial
        report.update("evaluating F and its Jacobian")
        f, J = residual_and_jacobian(x)
        norm = _norm(f)
        norms.append(norm)
