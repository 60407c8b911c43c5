"""Newton's method for minimising a scalar function, with its exact sparse Hessian.

:func:`minimize` evaluates ``f``, its gradient and its Hessian in one pass
(:func:`sparsegrad.value_grad_and_hessian`), solves ``(H + mu I) p = -g`` by a
sparse factorisation, with the smallest shift ``mu`` of its sequence that
makes the matrix positive definite (0 where ``H`` already is), and takes a
step along ``p`` chosen by Armijo backtracking.  It is re-exported as
``sparsegrad.optimize.minimize``.

>>> import numpy as np
>>> from sparsegrad.optimize import minimize
>>> result = minimize(lambda x: np.sum((x - 3.0) ** 4 + x ** 2), np.zeros(2))
>>> result.success, result.x
(True, array([2., 2.]))
"""
import operator
import time
import warnings

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from scipy.optimize import OptimizeResult

from ._api import extra_arguments
from ._hessian import _value_grad_and_hessian
from ._progress import Progress, interval as progress_interval
from ._value import is_forward as _is_forward

__all__ = ["minimize", "STATUS"]

_NAME = "sparsegrad.optimize.minimize"

#: ``result.status`` values and their meaning
STATUS = {
    1: "converged: max|gradient| below gtol",
    2: "converged: Newton step below xtol, at a positive definite Hessian",
    0: "stopped by the callback",
    -1: "maximum number of iterations reached",
    -2: "no shift made the Hessian positive definite",
    -3: "f or its gradient is not finite",
    -4: "line search failed: no step length decreases f enough",
}

#: Armijo's constant: a step length a is taken when f falls by at least this
#: fraction of the decrease a g.p predicted by the gradient
_ARMIJO = 1e-4
#: backtracking ends, unsuccessful, below this step length
_MIN_STEP = 1e-10
#: the first positive shift tried is at least this times the largest |H_ij| more
#: than the least that makes the diagonal positive, ...
_SHIFT_BETA = 1e-4
#: ... and at least the last positive shift over this; each later one is this
#: times the one before
_SHIFT_DECREASE = 3.0
_SHIFT_GROWTH = 8.0


class _NotPositiveDefinite(Exception):
    """No shift of the sequence gave a positive definite factorisation."""


def _positive_definite_factor(H, mu):
    """SuperLU's factors of ``H + mu I`` when they show it positive definite, else None.

    With a symmetric ordering and diagonal pivots only, ``P (H + mu I) P^T = L U``
    is ``L D L^T`` with ``D`` the diagonal of ``U``: by Sylvester's law of inertia
    the matrix is positive definite exactly when every pivot is positive.  An
    off-diagonal pivot (SuperLU's answer to a zero diagonal entry) or a zero
    pivot means it is not.
    """
    n = H.shape[0]
    shifted = (H + mu * scipy.sparse.identity(n, format="csr")) if mu else H
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", scipy.sparse.SparseEfficiencyWarning)
            lu = scipy.sparse.linalg.splu(scipy.sparse.csc_matrix(shifted),
                                          permc_spec="MMD_AT_PLUS_A",
                                          diag_pivot_thresh=0.0,
                                          options={"SymmetricMode": True})
    except RuntimeError:  # ("Factor is exactly singular")
        return None
    if not np.array_equal(lu.perm_r, lu.perm_c) or not np.all(lu.U.diagonal() > 0):
        return None
    return lu


def _shifted_factor(H, update, state):
    """``(lu, mu)``: the factors of ``H + mu I`` for the first ``mu`` of the
    sequence ``0, mu_1, 8 mu_1, 64 mu_1, ..., G`` that is positive definite
    (Ipopt's inertia correction, Waechter and Biegler 2006, with a first
    shift relative to ``H``).

    ``mu_1 = max(-min_i H_ii + beta, state["shift"] / 3)``: above the least
    shift that gives a positive diagonal (``beta = 1e-4 max|H_ij|``, 1 for
    ``H = 0``), and near the last positive shift, ``state["shift"]``, which
    this sets (a Hessian changes little between iterations; a shift much
    larger than needed shortens the steps, one too small costs another
    factorisation: a fixed first shift of 1e-3 max|H_ij| took 23 iterations
    on a nonconvex 300 x 300 grid problem, this rule 5).
    ``G = max(0, max_i (sum_{j != i} |H_ij| - H_ii)) + beta``
    makes ``H + G I`` strictly diagonally dominant with a positive diagonal, so
    positive definite (Gershgorin), and ends the sequence.  Each factorisation
    is counted in ``state["factorizations"]``.
    """
    if not np.all(np.isfinite(H.data)):
        raise _NotPositiveDefinite("the Hessian has non-finite entries (inf or nan)")
    magnitude = abs(H)
    largest = float(magnitude.max()) if H.nnz else 0.0
    beta = _SHIFT_BETA * largest if largest > 0 else 1.0
    diagonal = H.diagonal()
    off_diagonal = np.asarray(magnitude.sum(axis=1)).ravel() - np.abs(diagonal)
    gershgorin = max(0.0, float(np.max(off_diagonal - diagonal, initial=0.0))) + beta
    mu = 0.0
    while True:
        update("factorising H + mu I (mu = %.3g)" % mu)
        lu = _positive_definite_factor(H, mu)
        state["factorizations"] += 1
        if lu is not None:
            if mu > 0:
                state["shift"] = mu
            return lu, mu
        if mu >= gershgorin:
            raise _NotPositiveDefinite(
                "H + mu I was not positive definite in its factorisation even at mu = "
                "%.3e, where it is diagonally dominant: the Hessian is too badly scaled "
                "for double precision" % mu)
        if mu == 0.0:
            mu = max(-float(np.min(diagonal, initial=0.0)) + beta,
                     state["shift"] / _SHIFT_DECREASE)
        else:
            mu *= _SHIFT_GROWTH
        mu = min(mu, gershgorin)


#: the clock of verbose times and progress lines (a test may replace it)
_clock = time.perf_counter


def _norm(v):
    return float(np.max(np.abs(v))) if v.size else 0.0


def _backtrack(step_length, slope, value, trial_value):
    """The next step length: the minimiser of the quadratic through ``f`` at 0, its
    slope there and ``f`` at ``step_length``, kept within a tenth and a half of
    ``step_length`` (a half where ``f`` was not finite)."""
    if not np.isfinite(trial_value):
        return 0.5 * step_length
    curvature = trial_value - value - slope * step_length
    if curvature <= 0:
        return 0.5 * step_length
    best = -slope * step_length ** 2 / (2.0 * curvature)
    return min(max(best, 0.1 * step_length), 0.5 * step_length)


def minimize(f, x0, args=(), *, gtol=1e-8, xtol=1e-12, maxiter=100, verbose=False,
             callback=None, trace=True, progress=None):
    """Minimise a scalar function by Newton's method with its exact sparse Hessian.

    Each iteration factorises ``H + mu I`` (SciPy's SuperLU, symmetric
    ordering, diagonal pivots), with ``mu`` the first of ``0, mu_1, 8 mu_1,
    64 mu_1, ...`` for which the pivots show the matrix positive definite,
    and steps along ``p = -(H + mu I)^-1 g``, a descent direction.  ``mu = 0``
    (Newton's step) wherever ``H`` is positive definite; elsewhere (nonconvex
    ``f``, where Newton's step may go uphill or towards a maximum)
    ``mu_1 = max(-min_i H_ii + 1e-4 max|H_ij|, mu_last / 3)``, with
    ``mu_last`` the last positive shift used (0 at first), as Ipopt corrects
    inertia; the sequence ends at a shift that makes ``H + mu I`` diagonally
    dominant.  The step length ``a`` is found by Armijo backtracking from 1:
    ``f(x + a p) <= f(x) + 1e-4 a g.p`` (up to ten rounding errors of ``f``),
    else ``a`` shrinks by safeguarded quadratic interpolation, to between a
    tenth and a half, down to 1e-10.  A stationary point that is not a
    minimum (a saddle, or ``x0`` at a maximum) passes the gradient test too:
    ``result.hess`` tells.

    Parameters
    ----------
    f : callable
        ``f(x, *args)``, ordinary numpy code returning one real number.
    x0 : array_like
        Starting point, any shape; ``f`` receives arrays of this shape.
    args : tuple, optional
        Extra arguments of ``f`` (anything but a tuple is one argument, as in
        ``scipy.optimize``).
    gtol : float, optional
        Converged when ``max|g| <= gtol`` (status 1).
    xtol : float, optional
        Also converged when ``mu = 0`` and the Newton step satisfies
        ``max|p| <= xtol * (1 + max|x|)`` (the step is then taken in full;
        status 2): which ends the iteration where rounding keeps the gradient
        above ``gtol``.  0 relies on ``gtol`` alone.
    maxiter : int, optional
        Maximum number of Newton iterations.
    verbose : bool, optional
        Print one line per iteration: ``f``, ``max|g|``, the step's
        ``max|dx|``, the shift ``mu``, the step length and the time.
    callback : callable, optional
        ``callback(x, fun)`` after every iteration, with the new iterate
        (shaped like ``x0``) and ``f`` there; returning ``True`` stops the
        iteration (status 0) unless it has converged.
    trace : bool, optional
        As in :func:`sparsegrad.value_grad_and_hessian`: evaluate by a
        recorded program where ``f`` can be recorded (default), else by
        ``forward.seed`` (``False``: always).
    progress : bool or float, optional
        As in :func:`sparsegrad.optimize.newton`: a line saying where the
        iteration is (a factorisation and its shift, an evaluation) whenever
        that many seconds (``True``: 1) pass without output; ``None``: 1 with
        ``verbose``, none without; ``0``: at every step.

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x`` (shaped like ``x0``), ``fun`` (a float), ``jac`` (the gradient
        at ``x``, shaped like ``x0``), ``hess`` (the Hessian at ``x``, a
        symmetric ``scipy.sparse.csr_matrix``), ``success``, ``status`` (see
        :data:`STATUS`), ``message``, ``nit`` (iterations), ``nfev`` (all
        evaluations of ``f``: with its derivatives and in the line search),
        ``njev`` and ``nhev`` (evaluations of the gradient and Hessian, made
        together) and ``factorizations``.  Failures are reported in the
        result, never raised.

    Raises
    ------
    ValueError
        For a non-finite or complex ``x0``, negative tolerances or
        ``maxiter``, an invalid ``progress``, or an ``f`` returning more than
        one number.
    TypeError
        For a forward value as ``x0`` or in ``args``, or a non-numeric ``x0``.

    Examples
    --------
    >>> import numpy as np
    >>> def rosenbrock(x):
    ...     return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    >>> result = minimize(rosenbrock, np.array([-1.2, 1.0, -1.2, 1.0]))
    >>> result.success, result.x, bool(np.max(np.abs(result.jac)) < 1e-8)
    (True, array([1., 1., 1., 1.]), True)

    A nonconvex ``f``: at ``x0 = 0.1`` Newton's step would go uphill, to the
    maximum at 0; the shift turns it downhill, to the minimum at 1:

    >>> result = minimize(lambda x: np.sum(x ** 4 / 4 - x ** 2 / 2), np.array([0.1]))
    >>> result.x, result.status
    (array([1.]), 1)
    """
    if _is_forward(x0):
        raise TypeError("%s: x0 is a forward value; the starting point is a constant "
                        "(pass x0.value)" % _NAME)
    start_array = np.asarray(x0)
    if start_array.dtype.kind not in "biuf":
        if start_array.dtype.kind == "c":
            raise ValueError("%s: x0 is complex; minimisation is over real numbers" % _NAME)
        raise TypeError("%s: x0 has dtype %s; it must be numbers"
                        % (_NAME, start_array.dtype))
    x = np.array(start_array, dtype=np.float64, copy=True)
    shape = x.shape
    if not np.all(np.isfinite(x)):
        raise ValueError("%s: x0 is not finite" % _NAME)
    if not (gtol >= 0 and xtol >= 0 and maxiter >= 0):
        raise ValueError("%s: need gtol >= 0, xtol >= 0 and maxiter >= 0" % _NAME)
    maxiter = operator.index(maxiter)
    args = extra_arguments(args)
    if any(_is_forward(a) for a in args):
        raise TypeError("%s: args hold forward values; pass their .value" % _NAME)
    evaluate = _value_grad_and_hessian(f, 0, "matrix", trace, _NAME)
    counts = {"nfev": 0, "nhev": 0, "factorizations": 0, "shift": 0.0}

    def value_of(x_flat):
        counts["nfev"] += 1
        value = np.asarray(f(x_flat.reshape(shape), *args))
        if value.size != 1:
            raise ValueError("%s: f returned %d values; it must return one number"
                             % (_NAME, value.size))
        return float(value.reshape(()).real)

    def derivatives(x_flat):
        counts["nfev"] += 1
        counts["nhev"] += 1
        value, gradient, H = evaluate(x_flat.reshape(shape), *args)
        return float(value), np.asarray(gradient, dtype=np.float64).reshape(-1), H

    interval = progress_interval(progress, verbose, _NAME)
    start = _clock()
    report = Progress("minimize", interval, start, _clock)
    report.state = "f = nan, max|g| = nan"
    x = x.reshape(-1)
    value, g, H = derivatives(x)
    gradient_norm = _norm(g)
    if verbose:
        print("minimize: %d unknowns, Newton's method with Armijo backtracking, SuperLU "
              "of H + mu I" % x.size)
        print("  iter   f               max|g|        max|dx|       mu          step"
              "      time [s]")
        print("  %4d   % .8e  %.4e    %-12s  %-10s  %-8s  %8.3f"
              % (0, value, gradient_norm, "", "", "", _clock() - start))
        report.quiet()

    def row(nit, step_norm, mu, step_length):
        print("  %4d   % .8e  %.4e    %.4e    %-10.3g  %-8.3g  %8.3f"
              % (nit, value, gradient_norm, step_norm, mu, step_length, _clock() - start))
        report.quiet()

    def finish(status, detail=""):
        message = STATUS[status] + (": " + detail if detail else "")
        if verbose:
            print("minimize: %s" % message)
        return OptimizeResult(
            x=x.reshape(shape), fun=value, jac=g.reshape(shape), hess=H,
            success=status > 0, status=status, message=message, nit=nit,
            nfev=counts["nfev"], njev=counts["nhev"], nhev=counts["nhev"],
            factorizations=counts["factorizations"])

    def finite():
        return np.isfinite(value) and np.all(np.isfinite(g))

    nit = 0
    if not finite():
        return finish(-3, "at x0")
    if gradient_norm <= gtol:
        return finish(1)
    while True:
        if nit >= maxiter:
            return finish(-1, "maxiter=%d, f = %.6e, max|g| = %.3e"
                          % (maxiter, value, gradient_norm))
        report.iteration = nit + 1
        report.state = "f = %.6e, max|g| = %.4e" % (value, gradient_norm)
        try:
            lu, mu = _shifted_factor(H, report.update, counts)
        except _NotPositiveDefinite as error:
            return finish(-2, "%s, at iteration %d" % (error, nit + 1))
        step = -lu.solve(g)
        nit += 1
        slope = float(g @ step)
        if not (np.all(np.isfinite(step)) and slope < 0):
            # (only rounding: a positive definite factorisation gives g.p < 0 for g != 0)
            return finish(-4, "the step is not a descent direction in floating point "
                          "(g.p = %.3e) at iteration %d" % (slope, nit))
        if mu == 0.0 and _norm(step) <= xtol * (1 + _norm(x)):
            x = x + step
            report.update("evaluating f, its gradient and Hessian")
            value, g, H = derivatives(x)
            gradient_norm = _norm(g)
            if verbose:
                row(nit, _norm(step), mu, 1.0)
            if not finite():
                return finish(-3, "at iteration %d" % nit)
            if callback is not None:
                callback(x.reshape(shape), value)
            return finish(2)
        # f's own rounding: near the minimum the decrease a Newton step makes can be
        # below it, and a strict test would then reject every step length
        allowance = 10 * np.finfo(np.float64).eps * abs(value)
        step_length = 1.0
        while True:
            report.update("evaluating f at step length %.3g" % step_length)
            trial = x + step_length * step
            trial_value = value_of(trial)
            if (np.isfinite(trial_value) and trial_value
                    <= value + _ARMIJO * step_length * slope + allowance):
                break
            step_length = _backtrack(step_length, slope, value, trial_value)
            if step_length < _MIN_STEP:
                return finish(-4, "f = %.6e, max|g| = %.3e at iteration %d"
                              % (value, gradient_norm, nit))
        x = trial
        report.update("evaluating f, its gradient and Hessian")
        value, g, H = derivatives(x)
        gradient_norm = _norm(g)
        if verbose:
            row(nit, step_length * _norm(step), mu, step_length)
        if not finite():
            return finish(-3, "at iteration %d" % nit)
        stop = callback is not None and callback(x.reshape(shape), value)
        if gradient_norm <= gtol:
            return finish(1)
        if stop:
            return finish(0)
