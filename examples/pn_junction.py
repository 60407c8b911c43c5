"""A silicon p-n junction in equilibrium, solved by Newton's method with sparsegrad.

The electrostatic potential ``psi`` of an abrupt, symmetric silicon p-n
junction in thermal equilibrium obeys the nonlinear Poisson-Boltzmann equation.
In scaled units (potential in thermal voltages kT/q, carrier densities in
units of the intrinsic density n_i, length in intrinsic Debye lengths) it reads

    psi'' = exp(psi) - exp(-psi) - D(x),      D(x) = -N for x < 0, +N for x > 0,

where ``exp(psi)`` and ``exp(-psi)`` are the electron and hole densities and
``D`` is the net doping (acceptors on the left, donors on the right).  At the
ohmic contacts the semiconductor is charge neutral, ``exp(psi) - exp(-psi) = D``,
which gives the Dirichlet values ``psi = asinh(D / 2)``.

The residual below is ordinary numpy code (slices, ``np.exp``, slice
assignment into ``np.zeros(n, like=psi)``).  Calling it on
``forward.seed(psi)`` instead of ``psi`` returns the exact sparse Jacobian,
which Newton's method uses with ``scipy.sparse.linalg.spsolve``.

Checks printed by the demo:

* the built-in potential, read off the solution in the middle of the two
  neutral regions, against the analytic ``2 asinh(N / 2)``;
* the sparsegrad Jacobian against central finite differences, both in random
  directions on the full problem and column by column on a small copy;
* the cost of one value+Jacobian evaluation relative to the plain residual.

Run ``python examples/pn_junction.py [n]``, or import it and call
``main(n=..., verbose=...)``, which returns a dict of the results.
"""
import sys
import time

import numpy as np
import scipy.sparse.linalg

from sparsegrad import forward

THERMAL_VOLTAGE = 0.025852  # kT/q at 300 K, in volts
INTRINSIC_DENSITY = 1e10    # n_i of silicon at 300 K, in cm^-3 (rounded)


class Junction:
    """The discretised problem: grid, doping and contact values.

    ``n`` nodes on ``[-L, L]`` (``L`` in intrinsic Debye lengths).  The domain is
    many extrinsic Debye lengths ``1/sqrt(N)`` wide on each side, so that the
    middle of each half is charge neutral to far below rounding.
    """

    def __init__(self, n, doping=1e16, half_width=0.05):
        if n < 5:
            raise ValueError("need at least 5 grid points")
        self.n = n
        self.N = doping / INTRINSIC_DENSITY  # scaled doping density
        self.x = np.linspace(-half_width, half_width, n)
        self.h = self.x[1] - self.x[0]
        self.doping = self.N * np.sign(self.x)  # -N (p side), +N (n side); 0 at x == 0
        self.psi_left = np.arcsinh(-self.N / 2)
        self.psi_right = np.arcsinh(self.N / 2)

    def residual(self, psi):
        """Finite-volume residual (each interior row multiplied by h**2).

        Works unchanged for a plain ndarray ``psi`` and for a forward value.
        """
        F = np.zeros(self.n, like=psi)
        F[0] = psi[0] - self.psi_left
        F[-1] = psi[-1] - self.psi_right
        inner = psi[1:-1]
        space_charge = np.exp(inner) - np.exp(-inner) - self.doping[1:-1]
        F[1:-1] = psi[:-2] - 2 * inner + psi[2:] - self.h ** 2 * space_charge
        return F

    def residual_and_jacobian(self, psi):
        F = self.residual(forward.seed(psi))
        return F.value, F.dvalue

    def neutral_guess(self):
        """Charge neutrality everywhere: the usual starting point of device solvers."""
        return np.arcsinh(self.doping / 2)


def newton(problem, psi, max_step=1.0, tol=1e-10, max_iter=60, log=None):
    """Damped Newton: each update is clipped to ``max_step`` thermal voltages.

    Converged when a full (unclipped) step is below ``tol`` everywhere.
    Returns ``(psi, history, converged)``; ``history`` holds ``(||F||_2, max|step|)``.
    """
    history = []
    for iteration in range(1, max_iter + 1):
        F, J = problem.residual_and_jacobian(psi)
        step = scipy.sparse.linalg.spsolve(J.tocsc(), -F)
        largest = float(np.max(np.abs(step)))
        history.append((float(np.linalg.norm(F)), largest))
        if log:
            log("  %3d   %12.4e   %12.4e" % (iteration, history[-1][0], largest))
        psi = psi + np.clip(step, -max_step, max_step)
        if largest < tol:
            return psi, history, True
    return psi, history, False


def check_directions(problem, psi, count=4, seed=0):
    """Max relative error of ``J @ v`` against ``(F(psi + e v) - F(psi - e v)) / 2e``."""
    rng = np.random.default_rng(seed)
    _, J = problem.residual_and_jacobian(psi)
    worst = 0.0
    for _ in range(count):
        v = rng.standard_normal(problem.n)
        e = 1e-5
        difference = (problem.residual(psi + e * v) - problem.residual(psi - e * v)) / (2 * e)
        exact = J @ v
        worst = max(worst, np.max(np.abs(exact - difference)) / np.max(np.abs(exact)))
    return worst


def check_columns(psi_small_problem, seed=1):
    """Max relative error of the whole Jacobian against central differences, column by column."""
    problem = psi_small_problem
    rng = np.random.default_rng(seed)
    psi = problem.neutral_guess() + 0.1 * rng.standard_normal(problem.n)
    J = problem.residual_and_jacobian(psi)[1].toarray()
    e = 1e-6
    dense = np.empty((problem.n, problem.n))
    for j in range(problem.n):
        shift = np.zeros(problem.n)
        shift[j] = e
        dense[:, j] = (problem.residual(psi + shift) - problem.residual(psi - shift)) / (2 * e)
    return np.max(np.abs(J - dense)) / np.max(np.abs(J))


def time_side_by_side(problem, psi, repeats=15):
    """Median seconds of one residual and of one value+Jacobian evaluation, interleaved."""
    residual_times, jacobian_times = [], []
    problem.residual_and_jacobian(psi)  # warm up caches and lazy imports
    for _ in range(repeats):
        start = time.perf_counter()
        problem.residual(psi)
        residual_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        problem.residual_and_jacobian(psi)
        jacobian_times.append(time.perf_counter() - start)
    return float(np.median(residual_times)), float(np.median(jacobian_times))


def main(n=100_000, verbose=True, doping=1e16):
    """Solve the junction on ``n`` grid points; return a dict of results and checks."""
    log = print if verbose else None
    problem = Junction(n, doping=doping)
    if log:
        log("Silicon p-n junction in equilibrium (nonlinear Poisson-Boltzmann, 1-d)")
        log("  doping %.1e cm^-3 on both sides (N = %.1e n_i), %d unknowns, h = %.2e L_Di"
            % (doping, problem.N, n, problem.h))
        log("Newton iterations (steps clipped to 1 thermal voltage):")
        log("  it      ||F||_2       max|step|")
    start = time.perf_counter()
    psi, history, converged = newton(problem, problem.neutral_guess(), log=log)
    solve_time = time.perf_counter() - start

    # the middle of each half is neutral: there psi is the local asinh(D / 2)
    left, right = n // 4, n - 1 - n // 4
    built_in = float(psi[right] - psi[left])
    built_in_exact = float(2 * np.arcsinh(problem.N / 2))
    built_in_error = abs(built_in - built_in_exact) / built_in_exact

    fd_directions = check_directions(problem, psi)
    fd_columns = check_columns(Junction(41, doping=doping))
    residual_time, jacobian_time = time_side_by_side(problem, psi)
    ratio = jacobian_time / residual_time

    if log:
        log("Converged: %s after %d iterations (%.2f s including the Jacobians)"
            % (converged, len(history), solve_time))
        log("Built-in potential psi(x=+L/2) - psi(x=-L/2):")
        log("  computed %.12f kT/q = %.6f V" % (built_in, built_in * THERMAL_VOLTAGE))
        log("  analytic %.12f kT/q (2 asinh(N/2)), relative difference %.2e"
            % (built_in_exact, built_in_error))
        log("Jacobian check against central differences:")
        log("  4 random directions, n = %d: max relative error %.2e" % (n, fd_directions))
        log("  every column, small copy n = 41: max relative error %.2e" % fd_columns)
        log("Timing (median of 15, interleaved): residual %.3f ms, residual+Jacobian %.3f ms"
            % (1e3 * residual_time, 1e3 * jacobian_time))
        log("Jacobian time / residual time = %.1f" % ratio)
    return {
        "n": n,
        "converged": converged,
        "iterations": len(history),
        "residual_norms": [r for r, _ in history],
        "psi": psi,
        "x": problem.x,
        "built_in": built_in,
        "built_in_exact": built_in_exact,
        "built_in_rel_error": built_in_error,
        "fd_directions_rel_error": fd_directions,
        "fd_columns_rel_error": fd_columns,
        "residual_time": residual_time,
        "jacobian_time": jacobian_time,
        "time_ratio": ratio,
        "solve_time": solve_time,
    }


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
