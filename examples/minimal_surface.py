"""The minimal surface over the unit square, by Newton's method with exact
sparse Hessians.

Minimise the area of the graph of ``u`` over the unit square,

    A(u) = integral of sqrt(1 + |grad u|^2) dx dy,

with ``u`` fixed on the boundary.  The boundary data come from Scherk's
surface ``z = log(cos y / cos x)``, minimal over ``(-pi/2, pi/2)^2``: taken
over ``[-a, a]^2`` (``a = 1.2``, where the slope reaches ``tan a = 2.6``) and
scaled by ``1 / (2 a)`` onto the unit square, which keeps it minimal, it is

    u*(s, t) = log(cos(a (2 t - 1)) / cos(a (2 s - 1))) / (2 a),

the exact solution, against which the discrete one is compared.

Discretisation (that of ``MinimalSurface`` in ``asv_benchmarks/problems.py``):
``n x n`` interior nodes, ``h = 1 / (n + 1)``; on each of the ``(n + 1)^2``
cells the gradient is taken from the cell's four corners and the area is
``h^2 sqrt(1 + |grad u|^2)``.  ``sparsegrad.value_grad_and_hessian`` gives the
area, its gradient and its exact sparse Hessian (9 entries a row) in one
call; Newton's method solves ``H p = -g`` and backtracks along ``p`` until
the area falls enough (Armijo).  The start is the discrete harmonic function
with the same boundary values, one linear solve: from ``u = 0`` inside, the
boundary layer of the start costs twelve iterations at 10^6 unknowns
instead of five.

The linear solver is conjugate gradients preconditioned by smoothed
aggregation AMG (pyamg, ``pip install ".[amg]"``), else SuperLU
(``--solver`` chooses).  ``sparsegrad.optimize.minimize`` runs the same Newton
iteration with a SuperLU factorisation a step: at 10^6 unknowns
(``--n 1000``, on 2 cores) it took 2.5 minutes and 7.4 GB, each
factorisation about 22 s against 0.6 s for the Hessian; this script with AMG
took 1.5 minutes and 2.8 GB, and its solves grow in proportion to the
unknowns, where the factorisations grow faster.

Checks (the script exits with status 1 when one fails):

* the discrete Euler-Lagrange residual, ``max|gradient| / h^2`` (the
  gradient of the area per unit area: the discrete mean curvature operator),
  is below ``1e-9``;
* the area decreases at every Newton iteration;
* the error ``max|u - u*|`` at the nodes, and the area's error against the
  exact surface's (by quadrature), fall as ``h^2``: both are computed at
  ``m`` and ``2 m`` (``m = n`` up to ``n = 100``, else 50) and the observed
  orders must lie in ``[1.8, 2.2]``; at ``n`` itself, each error over
  ``h^2`` must be within 10 % of its value at ``2 m``.

Run ``python examples/minimal_surface.py [--n N] [--solver amg|superlu]``,
or import it and call ``main(n=..., verbose=...)``, which returns a dict of
the results.
"""
import argparse
import sys
import time

import numpy as np
import scipy.integrate
import scipy.sparse.linalg

import sparsegrad

try:
    import pyamg
except ImportError:
    pyamg = None

#: half the side of the square of Scherk's surface that is mapped onto the unit square
HALF_WIDTH = 1.2
#: converged when max|gradient| / h^2 is below this
EULER_LAGRANGE_TOL = 1e-9
#: relative residual of the harmonic start's solve by conjugate gradients
START_RTOL = 1e-6


def scherk(s, t, a=HALF_WIDTH):
    """Scherk's surface over ``[-a, a]^2`` scaled onto the unit square."""
    return np.log(np.cos(a * (2 * t - 1)) / np.cos(a * (2 * s - 1))) / (2 * a)


def exact_area(a=HALF_WIDTH):
    """The area of :func:`scherk` over the unit square, by quadrature."""
    def integrand(t, s):
        return np.sqrt(1 + np.tan(a * (2 * s - 1)) ** 2 + np.tan(a * (2 * t - 1)) ** 2)
    return scipy.integrate.dblquad(integrand, 0, 1, 0, 1, epsabs=1e-13, epsrel=1e-13)[0]


class MinimalSurface:
    """The discrete area on ``n x n`` interior nodes, Scherk's boundary values."""

    def __init__(self, n):
        self.n, self.h = n, 1.0 / (n + 1)
        s = np.linspace(0.0, 1.0, n + 2)
        exact = scherk(s[:, None], s[None, :])
        self.exact = exact[1:-1, 1:-1].ravel()
        self.boundary = exact.copy()
        self.boundary[1:-1, 1:-1] = 0.0

    def cell_gradients(self, u):
        U = np.pad(u.reshape(self.n, self.n), 1) + self.boundary
        east = U[1:, 1:] - U[1:, :-1]
        west = U[:-1, 1:] - U[:-1, :-1]
        north = U[1:, 1:] - U[:-1, 1:]
        south = U[1:, :-1] - U[:-1, :-1]
        return (east + west) / (2 * self.h), (north + south) / (2 * self.h)

    def area(self, u):
        ux, uy = self.cell_gradients(u)
        return self.h ** 2 * np.sum(np.sqrt(1.0 + ux * ux + uy * uy))

    def dirichlet(self, u):
        ux, uy = self.cell_gradients(u)
        return self.h ** 2 * np.sum(ux * ux + uy * uy) / 2

    def sublattices(self):
        """The indicator vectors of the two sublattices ``i + j`` even and odd."""
        i, j = np.meshgrid(np.arange(self.n), np.arange(self.n), indexing="ij")
        even = ((i + j) % 2 == 0).ravel()
        return np.stack([even, ~even], axis=1).astype(float)


class AMGSolver:
    """Conjugate gradients preconditioned by a smoothed-aggregation hierarchy.

    The cell gradient from four corners does not see the checkerboard
    ``(-1)^(i + j)``, so the Hessian nearly splits into the two sublattices
    ``i + j`` even and odd, and the hierarchy must carry a constant on each:
    with the constant alone CG took about 110 iterations at 300 x 300, with
    both 16.  Building the hierarchy takes longer than a Newton step's solve
    with it (12 s at 10^6 unknowns), and from the harmonic start on the
    Hessian changes little, so the one built for the first Hessian serves
    every step.
    """

    name = "CG, smoothed aggregation AMG (pyamg)"

    def __init__(self, candidates):
        self.candidates = candidates
        self.hierarchy = None

    def __call__(self, H, b, rtol):
        if self.hierarchy is None:
            self.hierarchy = pyamg.smoothed_aggregation_solver(
                H.tocsr(), B=self.candidates, symmetry="symmetric", smooth="energy")
        count = [0]

        def counter(_):
            count[0] += 1

        x, info = scipy.sparse.linalg.cg(H, b, rtol=rtol, maxiter=500,
                                         M=self.hierarchy.aspreconditioner(),
                                         callback=counter)
        if info != 0:
            raise RuntimeError("CG did not converge in %d iterations" % count[0])
        return x, count[0]


class SuperLUSolver:
    name = "SuperLU"

    def __init__(self, candidates=None):
        pass

    def __call__(self, H, b, rtol):
        lu = scipy.sparse.linalg.splu(H.tocsc(), permc_spec="MMD_AT_PLUS_A")
        return lu.solve(b), 0


SOLVERS = {"amg": AMGSolver, "superlu": SuperLUSolver}


def default_solver():
    return "amg" if pyamg is not None else "superlu"


def newton(problem, u, solve, log, maxiter=30):
    """Minimise ``problem.area`` from ``u``; returns ``u`` and one row per
    iterate: area, max|gradient|, seconds for the Hessian and for the solve
    (the first solve with AMG includes building the hierarchy), CG
    iterations, step length."""
    value_grad_and_hessian = sparsegrad.value_grad_and_hessian(problem.area)
    gtol = EULER_LAGRANGE_TOL * problem.h ** 2
    history = []
    log("  iter  area                 max|gradient|  Hessian [s]  solve [s]  CG its  step")
    for k in range(maxiter + 1):
        start = time.perf_counter()
        value, gradient, H = value_grad_and_hessian(u)
        hessian_time = time.perf_counter() - start
        row = {"area": float(value), "gradient": float(np.max(np.abs(gradient))),
               "hessian_time": hessian_time, "solve_time": 0.0, "cg": 0, "step": 0.0}
        history.append(row)
        if row["gradient"] <= gtol or k == maxiter:
            log("  %4d  %.15f  %.3e      %8.2f" % (k, value, row["gradient"], hessian_time))
            break
        start = time.perf_counter()
        # an inexact Newton step: a linear residual relative to g as small as g is
        # relative to its first value keeps the convergence quadratic, and the
        # first steps, far from the minimum, take few CG iterations
        rtol = min(1e-2, row["gradient"] / history[0]["gradient"])
        step, row["cg"] = solve(H, -gradient, rtol)
        row["solve_time"] = time.perf_counter() - start
        slope = float(gradient @ step)
        # near the minimum the decrease falls below the area's rounding
        allowance = 64 * np.finfo(float).eps * abs(value)
        t = 1.0
        while problem.area(u + t * step) > value + 1e-4 * t * slope + allowance:
            t *= 0.5
            if t < 1e-10:
                raise RuntimeError("line search failed at iteration %d" % k)
        row["step"] = t
        u = u + t * step
        log("  %4d  %.15f  %.3e      %8.2f   %8.2f  %6s  %g"
            % (k, value, row["gradient"], hessian_time, row["solve_time"],
               row["cg"] if row["cg"] else "", t))
    return u, history


def harmonic_start(problem, solve, log):
    """The minimiser of the Dirichlet energy with the same boundary values."""
    zero = np.zeros(problem.n ** 2)
    start = time.perf_counter()
    # evaluated once: recording a program for later calls would not pay
    _, gradient, H = sparsegrad.value_grad_and_hessian(problem.dirichlet,
                                                       trace=False)(zero)
    hessian_time = time.perf_counter() - start
    u, iterations = solve(H, -gradient, START_RTOL)
    log("  harmonic start: Hessian %.2f s, solve %.2f s%s"
        % (hessian_time, time.perf_counter() - start - hessian_time,
           " (%d CG iterations)" % iterations if iterations else ""))
    return u


def solve(n, solver=None, verbose=True):
    """Minimise the area on ``n x n`` interior nodes; returns a dict."""
    log = print if verbose else (lambda *a: None)
    solver = solver or default_solver()
    problem = MinimalSurface(n)
    linear_solver = SOLVERS[solver](problem.sublattices())
    log("minimal surface, %d x %d interior nodes: %d unknowns; linear solver: %s"
        % (n, n, n * n, linear_solver.name))
    start = time.perf_counter()
    # (its own solver: an AMG hierarchy of the Laplacian is a poor one for the Hessians)
    u0 = harmonic_start(problem, SOLVERS[solver](problem.sublattices()), log)
    harmonic_time = time.perf_counter() - start
    u, history = newton(problem, u0, linear_solver, log)
    total = time.perf_counter() - start
    areas = np.array([row["area"] for row in history])
    result = {
        "n": n, "h": problem.h, "unknowns": n * n, "solver": solver, "u": u,
        "history": history, "iterations": len(history) - 1, "areas": areas,
        "area": float(areas[-1]), "gradient": history[-1]["gradient"],
        "euler_lagrange": history[-1]["gradient"] / problem.h ** 2,
        "monotone": bool(np.all(np.diff(areas) <= 64 * np.finfo(float).eps * areas[0])),
        "error": float(np.max(np.abs(u - problem.exact))),
        "time": total, "harmonic_time": harmonic_time,
    }
    log("  %d Newton iterations; %.2f s in all with the start (Hessians %.2f s, "
        "solves %.2f s)" % (result["iterations"], total,
                            sum(row["hessian_time"] for row in history),
                            sum(row["solve_time"] for row in history)))
    return result


def main(n=40, solver=None, verbose=True):
    """Solve at ``n`` and check the solution; returns a dict with ``passed``."""
    log = print if verbose else (lambda *a: None)
    result = solve(n, solver, verbose)
    area = exact_area()
    result["exact_area"] = area
    log("area %.12f; exact surface %.12f (quadrature), difference %.2e"
        % (result["area"], area, result["area"] - area))
    log("max|gradient| / h^2 = %.2e (discrete Euler-Lagrange residual), area %s"
        % (result["euler_lagrange"],
           "decreasing at every iteration" if result["monotone"] else "NOT monotone"))

    m = n if n <= 100 else 50
    coarse = result if m == n else solve(m, solver, verbose=False)
    fine = solve(2 * m, solver, verbose=False)
    ratio = np.log(coarse["h"] / fine["h"])
    order = np.log(coarse["error"] / fine["error"]) / ratio
    area_order = np.log((coarse["area"] - area) / (fine["area"] - area)) / ratio
    constants = {"error": (result["error"] / result["h"] ** 2,
                           fine["error"] / fine["h"] ** 2),
                 "area": ((result["area"] - area) / result["h"] ** 2,
                          (fine["area"] - area) / fine["h"] ** 2)}
    log("max|u - u*| at the nodes: n = %d: %.3e, n = %d: %.3e: order %.3f"
        % (m, coarse["error"], 2 * m, fine["error"], order))
    log("area - exact area:        n = %d: %.3e, n = %d: %.3e: order %.3f"
        % (m, coarse["area"] - area, 2 * m, fine["area"] - area, area_order))
    if m != n:
        log("at n = %d: max|u - u*| = %.3e = %.4f h^2, area - exact area = %.3e = %.4f h^2 "
            "(at n = %d: %.4f h^2 and %.4f h^2)"
            % (n, result["error"], constants["error"][0], result["area"] - area,
               constants["area"][0], 2 * m, constants["error"][1], constants["area"][1]))
    checks = {
        "converged": result["euler_lagrange"] <= EULER_LAGRANGE_TOL,
        "area decreasing": result["monotone"],
        "second order": all(1.8 <= p <= 2.2 for p in (order, area_order)),
        "errors / h^2 steady": all(abs(at_n / at_2m - 1) <= 0.1
                                   for at_n, at_2m in constants.values()),
    }
    result.update(order=float(order), area_order=float(area_order),
                  error_constants=constants, checks=checks, passed=all(checks.values()),
                  refinement=[(m, coarse["error"], coarse["area"] - area),
                              (2 * m, fine["error"], fine["area"] - area)])
    log("checks: " + ", ".join("%s %s" % (name, "ok" if ok else "FAILED")
                               for name, ok in checks.items()))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=40,
                        help="interior nodes per side (default 40; 1000 for 10^6 unknowns)")
    parser.add_argument("--solver", choices=sorted(SOLVERS), default=default_solver(),
                        help="linear solver (default amg where pyamg is installed)")
    arguments = parser.parse_args()
    sys.exit(0 if main(arguments.n, arguments.solver)["passed"] else 1)
