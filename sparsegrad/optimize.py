"""Newton's method for large sparse nonlinear systems, with exact Jacobians.

:func:`newton` solves ``F(x) = 0`` for a square system written in plain numpy.
Each iteration evaluates ``F`` and its exact sparse Jacobian in one forward
pass (:func:`sparsegrad.value_and_jacobian`), solves the Newton system with a
sparse direct solver or a preconditioned Krylov method, and damps the step by
backtracking on the residual norm.  Failures (divergence, singular Jacobian,
non-finite residual, iteration limit) are reported in the result, never
raised and never hung on.

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
import scipy.sparse.linalg
from scipy.optimize import OptimizeResult

from . import _backend
from ._api import _value_and_jacobian, extra_arguments
from ._value import is_forward as _is_forward

__all__ = ["newton", "OptimizeResult", "direct_solvers"]

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


def _solve_krylov(kind, J, b, options):
    J = J.tocsc()
    ilu_options = {key: options[key] for key in ("drop_tol", "fill_factor")
                   if key in options}
    if options.get("preconditioner", "ilu") == "ilu":
        ilu = scipy.sparse.linalg.spilu(J, **ilu_options)
        M = scipy.sparse.linalg.LinearOperator(J.shape, ilu.solve, dtype=J.dtype)
    else:
        M = None
    method = {"gmres": scipy.sparse.linalg.gmres,
              "bicgstab": scipy.sparse.linalg.bicgstab}[kind]
    step, info = method(J, b, M=M, **_krylov_settings(kind, options))
    if info != 0:
        raise _LinearSolveError("%s did not converge (info=%d); raise "
                                "linear_options['maxiter'] or improve the preconditioner"
                                % (kind, info))
    return step


def _krylov_settings(kind, options):
    """Tolerances and limits of a Krylov solve: the user's ``linear_options`` over
    the defaults (relative tolerance 1e-10, GMRES restarted every 50 steps)."""
    settings = {"rtol": options.get("rtol", 1e-10), "atol": 0.0,
                "maxiter": options.get("maxiter")}
    if kind == "gmres":
        settings["restart"] = options.get("restart", 50)
    return settings


#: the keys of ``linear_options``; all of them are settings of the Krylov methods
_KRYLOV_OPTIONS = ("rtol", "maxiter", "restart", "drop_tol", "fill_factor",
                   "preconditioner")


def _check_linear_options(linear_solver, options):
    """Refuse ``linear_options`` that the chosen solver would ignore.

    An option that is silently dropped (a misspelt key, ``restart`` for
    BiCGSTAB, any option for a direct solver) leaves the user believing a
    tolerance or preconditioner is in effect when it is not.
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
    preconditioner = options.get("preconditioner", "ilu")
    if preconditioner is not None and not (isinstance(preconditioner, str)
                                           and preconditioner == "ilu"):
        raise ValueError("sparsegrad.optimize.newton: linear_options['preconditioner'] "
                         "must be 'ilu' or None, not %r" % (preconditioner,))


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
        return (lambda J, b: _solve_krylov(linear_solver, J, b, options)), linear_solver
    raise ValueError("linear_solver must be 'direct', 'splu', 'umfpack', 'pardiso', "
                     "'gmres', 'bicgstab' or a callable, not %r" % (linear_solver,))


def _device_solver(backend, linear_solver, options):
    """``solve(J, b)`` on a device: its sparse direct solver, or its GMRES."""
    linalg = backend.linalg
    if linear_solver in ("direct", "auto", "spsolve"):
        return (lambda J, b: linalg.spsolve(J, b)), "spsolve on %s" % backend.name
    if linear_solver == "gmres":
        unused = [key for key in ("preconditioner", "drop_tol", "fill_factor")
                  if key in options and not (key == "preconditioner"
                                             and options[key] is None)]
        if unused:  # (the host's ILU preconditioner has no device counterpart here)
            raise ValueError("linear_options %s: GMRES on the %s device runs without a "
                             "preconditioner" % (", ".join(unused), backend.name))
        settings = _krylov_settings("gmres", options)
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


def _norm(v):
    return float(np.max(np.abs(v))) if v.size else 0.0


def newton(F, x0, args=(), *, tol=1e-10, rtol=0.0, xtol=1e-12, maxiter=50,
           linear_solver="direct", linear_options=None, line_search=True,
           min_damping=1e-4, divtol=1e8, verbose=False, callback=None,
           sensitivity=False, trace=True):
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
        to choose one; ``"gmres"`` or ``"bicgstab"``: SciPy's Krylov method
        with an incomplete-LU preconditioner (``spilu``); or a callable
        ``solve(J, b)`` returning the solution of ``J dx = b``.  For ``x0``
        on a GPU (a CuPy array; the iteration then stays on the device):
        ``"direct"`` is ``cupyx.scipy.sparse.linalg.spsolve``, ``"gmres"``
        its GMRES (no preconditioner), or a callable.
    linear_options : dict, optional
        For the Krylov methods: ``rtol`` (default 1e-10), ``maxiter``,
        ``restart`` (gmres, default 50), ``drop_tol`` and ``fill_factor``
        (passed to ``spilu``), ``preconditioner`` (``"ilu"`` or ``None``).
        Other keys, and any option with another ``linear_solver``, raise
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
        elapsed time.
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
        (``max|F|`` before the first and after every iteration).

    Raises
    ------
    ValueError
        For a non-finite ``x0``, a residual whose size differs from
        ``x0.size`` or that is complex for a real ``x0``, an unknown or
        unavailable ``linear_solver``, ``linear_options`` it does not take,
        or invalid tolerances (``divtol`` included).
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

    start = time.perf_counter()
    x = x.reshape(-1)
    f, J = residual_and_jacobian(x)
    norm = _norm(f)
    norms = [norm]
    if verbose:
        print("newton: %d unknowns, linear solver %s" % (x.size, solver_name))
        print("  iter   max|F|        max|dx|       damping   time [s]")
        print("  %4d   %.4e    %-12s  %-8s  %8.3f"
              % (0, norm, "", "", time.perf_counter() - start))

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
            print("newton: %s" % message)
        return OptimizeResult(
            x=solution, success=status > 0, status=status, message=message,
            nit=nit, nfev=counts["nfev"], njev=counts["njev"], fun=f, jac=J,
            residual_norms=norms)

    nit = 0
    if not np.isfinite(norm):
        return finish(-3, "at x0")
    tol = max(tol, rtol * norm)
    if norm <= tol:
        return finish(1)
    while True:
        if nit >= maxiter:
            return finish(-1, "maxiter=%d, max|F| = %.3e" % (maxiter, norm))
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
                print("  %4d   %.4e    %.4e    %-8.3g  %8.3f"
                      % (nit, norm, _norm(step), 1.0, time.perf_counter() - start))
            if not np.isfinite(norm):
                return finish(-3, "at iteration %d" % nit)
            if callback is not None:  # (after every iteration; converged either way)
                callback(x.reshape(shape), f)
            return finish(2)
        damping = 1.0
        while True:
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
        step_norm = damping * _norm(step)
        if verbose:
            print("  %4d   %.4e    %.4e    %-8.3g  %8.3f"
                  % (nit, norm_trial, step_norm, damping, time.perf_counter() - start))
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
        f, J = residual_and_jacobian(x)
        norm = _norm(f)
        norms.append(norm)
