"""The 2-d Bratu problem with SciPy's solvers and sparsegrad Jacobians.

On the unit square with ``u = 0`` on the boundary, solve

    -Laplace(u) - lam exp(u) = f,

discretised by the 5-point Laplacian on an ``n x n`` grid of interior nodes.
The source ``f`` is *manufactured*: it is the discrete residual of the known
function ``u* = 4 sin(pi x) sin(pi y) x (1 - y)`` with ``f = 0``, so ``u*`` is the exact
solution of the discrete problem, and every solver must return it to its
tolerance.  The residual is ordinary numpy code on a 2-d array.

Routes shown, each checked against ``u*``:

* ``scipy.optimize.least_squares(method="trf")`` with
  ``jac=sparsegrad.jacobian(residual)``: a sparse Jacobian, so the trust
  region subproblems use LSMR;
* the same with ``jac_sparsity=sparsegrad.sparsity(residual, u0)``: SciPy's
  own finite differences, grouped by the exact pattern;
* ``scipy.optimize.root(method="krylov")``: Jacobian-free Newton-Krylov,
  preconditioned by an incomplete LU factorisation of the exact sparse
  Jacobian at the starting point;
* ``scipy.optimize.root(method="hybr", jac=True)`` with
  ``sparsegrad.value_and_jacobian(residual, format="dense")``: MINPACK needs
  a dense Jacobian, so only on a small grid.

Run ``python examples/bratu.py [n]``, or import it and call
``main(n=..., verbose=...)``, which returns a dict of the results.
"""
import sys
import time

import numpy as np
import scipy.optimize
import scipy.sparse.linalg

import sparsegrad


class Bratu:
    """``n x n`` interior nodes of the unit square; unknowns ``u.ravel()``."""

    def __init__(self, n, lam=3.0):
        if n < 3:
            raise ValueError("need n >= 3")
        self.n = n
        self.lam = lam
        self.h = 1.0 / (n + 1)
        s = np.arange(1, n + 1) * self.h
        self.X, self.Y = np.meshgrid(s, s, indexing="ij")
        self.exact = 4 * np.sin(np.pi * self.X) * np.sin(np.pi * self.Y) * self.X * (1 - self.Y)
        self.source = 0.0
        self.source = self.operator(self.exact)  # manufactured: u* solves the discrete problem

    def operator(self, u):
        """``-Laplace_h(u) - lam exp(u)`` for a 2-d ``u`` with zero boundary values."""
        padded = np.pad(u, 1)
        laplace = (padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2]
                   + padded[1:-1, 2:] - 4 * u) / self.h ** 2
        return -laplace - self.lam * np.exp(u)

    def residual(self, u_flat):
        """The residual on the flat vector of unknowns (SciPy's solvers want 1-d)."""
        u = u_flat.reshape(self.n, self.n)
        return (self.operator(u) - self.source).ravel()

    def error(self, u_flat):
        return float(np.max(np.abs(u_flat.reshape(self.n, self.n) - self.exact)))


def ilu_preconditioner(problem, u0):
    """An incomplete-LU preconditioner from the exact sparse Jacobian at ``u0``."""
    J = sparsegrad.jacobian(problem.residual)(u0)
    ilu = scipy.sparse.linalg.spilu(J.tocsc(), drop_tol=1e-5, fill_factor=10)
    return scipy.sparse.linalg.LinearOperator(J.shape, ilu.solve)


def main(n=50, verbose=True, dense_n=12):
    """Solve on ``n x n`` nodes by each route (``hybr`` on ``dense_n x dense_n``)."""
    log = print if verbose else (lambda *a: None)
    problem = Bratu(n)
    u0 = np.zeros(n * n)
    log("2-d Bratu problem, lam = %g, %d x %d interior nodes (%d unknowns), "
        "manufactured discrete solution" % (problem.lam, n, n, n * n))
    results = {"n": n}

    def report(name, solution, seconds, evaluations):
        error = problem.error(solution)
        results[name] = {"error": error, "time": seconds, "evaluations": evaluations}
        log("  %-34s max|u - u*| = %.2e   %6.2f s   %s" % (name, error, seconds, evaluations))

    start = time.perf_counter()
    sol = scipy.optimize.least_squares(problem.residual, u0,
                                       jac=sparsegrad.jacobian(problem.residual),
                                       method="trf", xtol=1e-12, ftol=1e-12, gtol=1e-12)
    report("least_squares, sparsegrad jac", sol.x, time.perf_counter() - start,
           "nfev %d, njev %d" % (sol.nfev, sol.njev))
    results["least_squares_jac_type"] = type(sol.jac).__name__

    start = time.perf_counter()
    pattern = sparsegrad.sparsity(problem.residual, u0)
    sol = scipy.optimize.least_squares(problem.residual, u0, jac_sparsity=pattern,
                                       method="trf", xtol=1e-12, ftol=1e-12, gtol=1e-12)
    report("least_squares, jac_sparsity", sol.x, time.perf_counter() - start,
           "nfev %d (finite differences by groups of columns)" % sol.nfev)
    results["pattern_nnz"] = pattern.nnz

    start = time.perf_counter()
    M = ilu_preconditioner(problem, u0)
    sol = scipy.optimize.root(problem.residual, u0, method="krylov",
                              options={"fatol": 1e-9, "jac_options": {"inner_M": M}})
    report("root krylov, ILU of the exact J", sol.x, time.perf_counter() - start,
           "nit %d" % sol.nit)
    results["krylov_success"] = bool(sol.success)

    small = Bratu(dense_n)
    start = time.perf_counter()
    sol = scipy.optimize.root(sparsegrad.value_and_jacobian(small.residual, format="dense"),
                              np.zeros(dense_n * dense_n), jac=True, method="hybr",
                              options={"xtol": 1e-13})
    seconds = time.perf_counter() - start
    results["hybr_dense"] = {"error": small.error(sol.x), "time": seconds,
                             "success": bool(sol.success)}
    log("  %-34s max|u - u*| = %.2e   %6.2f s   on %d x %d nodes"
        % ("root hybr, dense jac=True", results["hybr_dense"]["error"], seconds,
           dense_n, dense_n))
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
