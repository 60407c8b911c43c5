"""Optimal control of the 2-d Poisson equation, solved by Ipopt with exact
sparse Hessians of the Lagrangian.

On the unit square with ``y = 0`` on the boundary, find the state ``y`` and
the distributed control ``u`` that minimise

    J(y, u) = 1/2 ||y - y_d||^2 + alpha/2 ||u||^2

(a tracking term and Tikhonov regularisation, both in the discrete L2 norm
``h^2 sum``) subject to the PDE

    -Laplace(y) + kappa y^3 = u,   optionally |u| <= umax,

discretised by the 5-point Laplacian on an ``n x n`` grid of interior nodes.
The unknowns of the optimisation are ``[y, u]`` (``2 n^2`` of them) and the
discrete PDE is ``n^2`` equality constraints, all written as ordinary numpy
code; :func:`sparsegrad.ipopt.ipopt_problem` gives Ipopt the objective's
gradient, the constraints' sparse Jacobian and the lower triangle of the
Hessian of the Lagrangian, all exact.

Checks printed (and returned by ``main``):

* the largest constraint residual (also relative to the largest control,
  the PDE's right-hand side), and the KKT residual
  ``max |grad J + J_c^T lambda|`` with Ipopt's multipliers, computed again
  from the solution with :func:`sparsegrad.gradient` and
  :func:`sparsegrad.jacobian` (beside the dual infeasibility Ipopt reports);
* for the linear PDE (``kappa = 0``) without bounds, the control against the solution of
  the reduced problem's optimality system (``u = p / alpha`` with the adjoint
  ``p``), solved directly by ``scipy.sparse.linalg.spsolve``.

Needs cyipopt (``pip install cyipopt``, built on the Ipopt library); without
it the script says so and exits.  Run ``python examples/optimal_control.py
[n] [--kappa K] [--alpha A] [--umax U]`` (``n = 100`` gives 20 000 unknowns), or import
it and call ``main(n=..., verbose=...)``, which returns a dict of the results.
"""
import argparse
import time

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

import sparsegrad


class PoissonControl:
    """``n x n`` interior nodes; the unknowns ``z = [y.ravel(), u.ravel()]``."""

    def __init__(self, n, alpha=1e-4, kappa=0.0):
        if n < 2:
            raise ValueError("need n >= 2")
        self.n, self.alpha, self.kappa = n, alpha, kappa
        self.h = 1.0 / (n + 1)
        s = np.arange(1, n + 1) * self.h
        X, Y = np.meshgrid(s, s, indexing="ij")
        # X * Y does not vanish on the sides x = 1 and y = 1, where every state
        # does: no state reaches the target, and the regularisation matters
        self.target = (np.sin(2 * np.pi * X) * np.sin(np.pi * Y) + X * Y).ravel()

    def split(self, z):
        m = self.n * self.n
        return z[:m].reshape(self.n, self.n), z[m:].reshape(self.n, self.n)

    def objective(self, z):
        y, u = self.split(z)
        misfit = y.reshape(-1) - self.target
        return 0.5 * self.h ** 2 * (np.sum(misfit ** 2) + self.alpha * np.sum(u ** 2))

    def constraints(self, z):
        """The discrete PDE ``-Laplace_h(y) + kappa y^3 - u``, one row per node."""
        y, u = self.split(z)
        padded = np.pad(y, 1)
        laplace = (padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2]
                   + padded[1:-1, 2:] - 4 * y) / self.h ** 2
        return (-laplace + self.kappa * y ** 3 - u).reshape(-1)

    def laplacian(self):
        """``-Laplace_h`` as a scipy matrix, assembled separately for the check."""
        one = scipy.sparse.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(self.n, self.n))
        eye = scipy.sparse.identity(self.n)
        return ((scipy.sparse.kron(one, eye) + scipy.sparse.kron(eye, one))
                / self.h ** 2).tocsc()

    def reduced_solution(self):
        """The control of the linear problem from its optimality system.

        With ``y = A^{-1} u`` the reduced objective is stationary where
        ``A y = u``, ``A p = y_d - y`` and ``alpha u = p``: eliminating ``u``
        leaves ``[[A, -I/alpha], [I, A]] [y, p] = [0, y_d]``.
        """
        A = self.laplacian()
        eye = scipy.sparse.identity(A.shape[0])
        system = scipy.sparse.bmat([[A, -eye / self.alpha], [eye, A]], format="csc")
        rhs = np.concatenate([np.zeros(A.shape[0]), self.target])
        y_and_p = scipy.sparse.linalg.spsolve(system, rhs)
        return y_and_p[A.shape[0]:] / self.alpha


def main(n=16, alpha=1e-4, kappa=0.0, umax=None, verbose=True, tol=1e-10):
    """Solve on ``n x n`` nodes, with ``|u| <= umax`` when given; returns a
    dict of the results (or of why not)."""
    log = print if verbose else (lambda *a: None)
    try:
        import cyipopt  # noqa: F401
    except ImportError:
        log("optimal_control.py needs cyipopt, built on the Ipopt library: install "
            "Ipopt (e.g. apt-get install coinor-libipopt-dev), then pip install cyipopt")
        return {"skipped": "cyipopt is not installed"}
    from sparsegrad.ipopt import ipopt_problem

    problem = PoissonControl(n, alpha, kappa)
    z0 = np.zeros(2 * n * n)
    reports = []

    def intermediate(alg_mod, iter_count, obj_value, inf_pr, inf_du, *rest):
        reports.append((iter_count, inf_pr, inf_du))
        return True

    bounds = {}
    if umax is not None:
        free = np.full(n * n, np.inf)
        bounds = {"lb": np.concatenate([-free, np.full(n * n, -umax)]),
                  "ub": np.concatenate([free, np.full(n * n, umax)])}
    start = time.perf_counter()
    ipopt = ipopt_problem(problem.objective, z0, problem.constraints, **bounds,
                          intermediate=intermediate,
                          options={"print_level": 0, "sb": "yes", "tol": tol})
    setup_time = time.perf_counter() - start
    start = time.perf_counter()
    z, info = ipopt.solve(z0)
    solve_time = time.perf_counter() - start
    y, u = problem.split(z)

    # Ipopt's Lagrangian: J + lambda @ c - z_L @ (z - lb) - z_U @ (ub - z)
    gradient = sparsegrad.gradient(problem.objective)(z)
    kkt = (gradient + sparsegrad.jacobian(problem.constraints)(z).T @ info["mult_g"]
           - info["mult_x_L"] + info["mult_x_U"])
    residual = float(np.max(np.abs(problem.constraints(z))))
    message = info["status_msg"]
    message = message.decode() if isinstance(message, bytes) else message
    results = {
        "n": n, "unknowns": z.size, "status": info["status"], "status_msg": message,
        "iterations": reports[-1][0], "objective": info["obj_val"],
        "setup_time": setup_time, "solve_time": solve_time,
        "constraint_residual": residual,
        "constraint_rel_residual": residual / np.max(np.abs(u)),
        "kkt_residual": float(np.max(np.abs(kkt))),
        "kkt_rel_residual": float(np.max(np.abs(kkt)) / np.max(np.abs(gradient))),
        "ipopt_inf_du": reports[-1][2],
        "active_bounds": int(np.sum(np.abs(u) > (1 - 1e-6) * umax)) if umax else 0,
        "tracking_error": float(np.sqrt(np.mean((y.ravel() - problem.target) ** 2))),
        "y": y, "u": u,
    }
    log("optimal control of -Laplace(y) + %g y^3 = u on %d x %d nodes: %d unknowns, "
        "%d equality constraints, alpha = %g" % (kappa, n, n, z.size, n * n, alpha))
    log("  Ipopt status %d (%s)" % (info["status"], message))
    log("  %d iterations in %.2f s (structures and first derivatives %.2f s)"
        % (results["iterations"], solve_time, setup_time))
    log("  objective %.6e, rms |y - y_d| = %.3e"
        % (info["obj_val"], results["tracking_error"]))
    log("  max |c(z)| = %.2e, %.1e of max |u|" % (residual, results["constraint_rel_residual"]))
    log("  KKT: max |grad J + J_c^T lambda - z_L + z_U| = %.2e, %.1e of max |grad J| "
        "(Ipopt's scaled dual infeasibility %.2e)"
        % (results["kkt_residual"], results["kkt_rel_residual"], results["ipopt_inf_du"]))
    if umax is not None:
        log("  |u| <= %g active at %d of %d nodes" % (umax, results["active_bounds"], n * n))
    elif kappa == 0.0:
        reference = problem.reduced_solution()
        results["control_rel_error"] = float(np.max(np.abs(u.ravel() - reference))
                                             / np.max(np.abs(reference)))
        log("  linear PDE: max |u - u_ref| / max |u_ref| = %.2e against the reduced "
            "optimality system solved by spsolve" % results["control_rel_error"])
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=32,
                        help="interior nodes per side (default 32; 100 or more for a "
                             "large problem)")
    parser.add_argument("--alpha", type=float, default=1e-4, help="Tikhonov weight")
    parser.add_argument("--kappa", type=float, default=0.0,
                        help="coefficient of the cubic term (0: the linear PDE)")
    parser.add_argument("--umax", type=float, default=None,
                        help="bound on the control, |u| <= umax (default: none)")
    arguments = parser.parse_args()
    main(arguments.n, alpha=arguments.alpha, kappa=arguments.kappa, umax=arguments.umax)
