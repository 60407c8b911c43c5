"""A stiff reaction-diffusion system (the 1-d Brusselator) with ``solve_ivp``.

The Brusselator with diffusion (Hairer and Wanner, Solving ODEs II), on
``0 < x < 1`` with Dirichlet ends ``u = A``, ``v = B / A``::

    u_t = A + u^2 v - (B + 1) u + alpha u_xx
    v_t = B u - u^2 v + alpha v_xx

is discretised by the method of lines on ``n`` interior nodes.  With many
nodes the diffusion makes it stiff, so an implicit method (BDF or Radau) needs
the Jacobian of the right-hand side with respect to ``y``.
``sparsegrad.jacobian(rhs, argnums=1)`` gives it for the ``rhs(t, y)``
signature of :func:`scipy.integrate.solve_ivp`: exact and sparse (the
unknowns are interleaved, ``y = [u_1, v_1, u_2, v_2, ...]``, so it is banded).

Checks printed by the demo:

* BDF and Radau with the exact Jacobian agree with each other and with a
  tight-tolerance reference run, to the integration tolerance;
* a run with SciPy's own finite-difference Jacobian, grouped by the exact
  pattern ``jac_sparsity=sparsegrad.sparsity(...)``, agrees as well (SciPy's
  ``nfev`` does not count the evaluations spent on differences);
* the Jacobian against the complex step, and the solution stays positive;
* linear stability of the uniform state ``u = A``, ``v = B / A`` (a steady
  state: the right-hand side vanishes there): the eigenvalues of the exact
  Jacobian there are those of the 2x2 blocks ``[[B - 1 - d_j, A^2], [-B, -A^2 - d_j]]``
  of the sine modes ``j`` of the discrete Laplacian (``d_j = 4 c sin^2(j pi / (2 (n + 1)))``),
  and with ``B > 1 + A^2`` one of them has a positive real part: the uniform
  state is unstable and the solution oscillates.

Run ``python examples/brusselator.py [n]``, or import it and call
``main(n=..., verbose=...)``, which returns a dict of the results.
"""
import sys
import time

import numpy as np
import scipy.integrate

import sparsegrad
from sparsegrad.testing import numerical_jacobian


class Brusselator:
    """``n`` interior nodes; unknowns interleaved ``y = [u_1, v_1, ..., u_n, v_n]``."""

    def __init__(self, n, A=1.0, B=3.0, alpha=0.02):
        if n < 3:
            raise ValueError("need n >= 3")
        self.n, self.A, self.B, self.alpha = n, A, B, alpha
        self.x = np.arange(1, n + 1) / (n + 1)
        self.c = alpha * (n + 1) ** 2  # alpha / h^2

    def rhs(self, t, y):
        u, v = y[0::2], y[1::2]
        u_pad = np.concatenate([[self.A], u, [self.A]])
        v_pad = np.concatenate([[self.B / self.A], v, [self.B / self.A]])
        u2v = u * u * v
        du = self.A + u2v - (self.B + 1) * u + self.c * (u_pad[:-2] - 2 * u + u_pad[2:])
        dv = self.B * u - u2v + self.c * (v_pad[:-2] - 2 * v + v_pad[2:])
        return np.stack([du, dv], axis=1).ravel()

    def uniform(self):
        """The spatially uniform steady state ``u = A``, ``v = B / A``."""
        return np.tile([self.A, self.B / self.A], self.n)

    def mode_eigenvalues(self):
        """Eigenvalues of the linearisation at :meth:`uniform`, mode by mode (theory)."""
        j = np.arange(1, self.n + 1)
        d = 4 * self.c * np.sin(j * np.pi / (2 * (self.n + 1))) ** 2
        A, B = self.A, self.B
        blocks = np.empty((self.n, 2, 2))
        blocks[:, 0, 0] = B - 1 - d
        blocks[:, 0, 1] = A * A
        blocks[:, 1, 0] = -B
        blocks[:, 1, 1] = -A * A - d
        return np.linalg.eigvals(blocks).ravel()

    def initial(self):
        u = 1.0 + np.sin(2 * np.pi * self.x)
        v = np.full(self.n, 3.0)
        return np.stack([u, v], axis=1).ravel()


def main(n=500, t_end=10.0, verbose=True, rtol=1e-6, atol=1e-9):
    """Integrate to ``t_end`` on ``n`` nodes with several Jacobian routes."""
    log = print if verbose else (lambda *a: None)
    problem = Brusselator(n)
    y0 = problem.initial()
    jac = sparsegrad.jacobian(problem.rhs, argnums=1)
    log("1-d Brusselator, %d nodes (%d unknowns), t in [0, %g], rtol %g"
        % (n, 2 * n, t_end, rtol))
    J0 = jac(0.0, y0)
    log("  Jacobian: %s, %d x %d, %d stored entries (bandwidth 2)"
        % (type(J0).__name__, J0.shape[0], J0.shape[1], J0.nnz))
    runs = {}

    def run(name, **options):
        start = time.perf_counter()
        sol = scipy.integrate.solve_ivp(problem.rhs, (0.0, t_end), y0, **options)
        seconds = time.perf_counter() - start
        runs[name] = {"y": sol.y[:, -1], "nfev": sol.nfev, "njev": sol.njev,
                      "nlu": sol.nlu, "success": bool(sol.success), "time": seconds}
        log("  %-28s nfev %5d  njev %3d  nlu %4d  %6.2f s"
            % (name, sol.nfev, sol.njev, sol.nlu, seconds))

    run("BDF, sparsegrad jac", method="BDF", jac=jac, rtol=rtol, atol=atol)
    run("Radau, sparsegrad jac", method="Radau", jac=jac, rtol=rtol, atol=atol)
    run("BDF, jac_sparsity", method="BDF", rtol=rtol, atol=atol,
        jac_sparsity=sparsegrad.sparsity(lambda y: problem.rhs(0.0, y), y0))
    run("reference (Radau, rtol 1e-10)", method="Radau", jac=jac, rtol=1e-10, atol=1e-13)
    reference = runs["reference (Radau, rtol 1e-10)"]["y"]
    scale = np.max(np.abs(reference))
    differences = {name: float(np.max(np.abs(r["y"] - reference)) / scale)
                   for name, r in runs.items()}
    for name in ("BDF, sparsegrad jac", "Radau, sparsegrad jac", "BDF, jac_sparsity"):
        log("  %-28s max relative difference from the reference %.1e"
            % (name, differences[name]))

    small = Brusselator(6)
    y = small.initial() + 0.1
    fd_error = float(np.max(np.abs(
        sparsegrad.jacobian(small.rhs, argnums=1)(0.3, y).toarray()
        - numerical_jacobian(lambda z: small.rhs(0.3, z), y, method="complex"))))
    log("  Jacobian against the complex step (6 nodes): max error %.1e" % fd_error)

    # linear stability of the uniform steady state, against the theory of its modes
    modes = Brusselator(30)
    steady = modes.uniform()
    steady_residual = float(np.max(np.abs(modes.rhs(0.0, steady))))
    eigenvalues = np.linalg.eigvals(sparsegrad.jacobian(modes.rhs, argnums=1)(0.0, steady)
                                    .toarray())
    theory = modes.mode_eigenvalues()
    spectrum_error = float(np.max(np.abs(np.sort_complex(eigenvalues) - np.sort_complex(theory)))
                           / np.max(np.abs(theory)))
    growth = float(np.max(eigenvalues.real))
    log("  uniform state u = A, v = B/A: |rhs| %.1e; Jacobian spectrum vs mode theory %.1e;"
        " largest growth rate %.3f > 0 (B > 1 + A^2: unstable, oscillations)"
        % (steady_residual, spectrum_error, growth))
    return {
        "n": n,
        "runs": runs,
        "differences": differences,
        "jacobian_type": type(J0).__name__,
        "jacobian_nnz": J0.nnz,
        "fd_error": fd_error,
        "steady_residual": steady_residual,
        "spectrum_error": spectrum_error,
        "growth_rate": growth,
        "min_value": float(min(np.min(r["y"]) for r in runs.values())),
    }


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
