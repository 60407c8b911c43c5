"""Sensitivity of a 2-d heat-conduction solution to the conductivities of four regions.

Steady heat conduction on the unit square, ``-div(k grad T) = q`` with ``T = 0``
on the boundary, by finite volumes on an ``n x n`` grid of interior nodes.
The square is made of four quadrants of conductivity ``p[0..3]``, and the
conductivity also grows with the temperature, ``k = p[region] (1 + beta T)``.
The discrete residual is written the way a simulator assembles it:

    F(T, p) = A(T, p) @ T - q

where ``A`` is a sparse matrix assembled from the face conductances (the mean
of the two nodes' ``k``) with :func:`sparsegrad.sparse.coo_matrix`, whose stored
values are forward values when ``T`` or ``p`` are.  The script checks:

1. the Jacobian ``dF/dT`` of the assembled residual equals that of the same
   residual expanded by hand as a 5-point stencil;
2. ``beta = 0`` (linear): ``T = sparsegrad.linalg.spsolve(A(p), q)`` with ``p``
   seeded; ``dT/dp`` matches central differences of the whole solve;
3. ``beta > 0`` (nonlinear): ``sparsegrad.optimize.newton(F, T0, args=(p,),
   sensitivity=True)`` returns ``T`` as a forward value in ``p`` (implicit
   differentiation, ``dT/dp = -F_T^{-1} F_p``); it matches central differences
   of the whole Newton solve.

Run ``python examples/heat_sensitivity.py [n]``, or import it and call
``main(n=..., verbose=...)``, which returns a dict of the results.
"""
import sys
import time

import numpy as np

from sparsegrad import forward, linalg, sparse
from sparsegrad.optimize import newton
from sparsegrad.testing import numerical_jacobian


class Plate:
    """``n x n`` interior nodes; unknowns ``T`` as a 2-d array ``(n, n)``."""

    def __init__(self, n, beta=0.0, source=1.0):
        if n < 2:
            raise ValueError("need n >= 2")
        self.n, self.beta, self.h = n, beta, 1.0 / (n + 1)
        half = np.arange(n) >= n // 2
        self.region = (2 * half[:, None] + half[None, :]).ravel()  # quadrant of each node
        idx = np.arange(n * n).reshape(n, n)
        # the interior faces, as the pairs of nodes they join
        self.a = np.concatenate([idx[:-1, :].ravel(), idx[:, :-1].ravel()])
        self.b = np.concatenate([idx[1:, :].ravel(), idx[:, 1:].ravel()])
        # faces on the boundary (T = 0 beyond them) of each node
        self.boundary_faces = 4 - np.bincount(np.concatenate([self.a, self.b]),
                                              minlength=n * n)
        self.source = np.full(n * n, source)

    def conductivity(self, T, p):
        return p[self.region] * (1 + self.beta * T.reshape(-1))

    def matrix(self, T, p):
        """The finite-volume matrix ``A(T, p)``: face conductances off the diagonal,
        their sums (plus the boundary faces') on it."""
        k = self.conductivity(T, p)
        kf = 0.5 * (k[self.a] + k[self.b]) / self.h ** 2
        size = self.n * self.n
        off = sparse.coo_matrix((np.concatenate([-kf, -kf]),
                                 (np.concatenate([self.a, self.b]),
                                  np.concatenate([self.b, self.a]))), shape=(size, size))
        diagonal = -off.sum(axis=1).reshape(-1) + self.boundary_faces * k / self.h ** 2
        return off + sparse.diags(diagonal)

    def residual(self, T, p):
        """``A(T, p) @ T - q``, shaped like ``T``."""
        return (self.matrix(T, p) @ T.reshape(-1) - self.source).reshape(T.shape)

    def residual_by_hand(self, T, p):
        """The same residual as a 5-point stencil: the sum of the four face fluxes."""
        k = self.conductivity(T, p).reshape(self.n, self.n)
        kp = np.pad(k, 1, mode="edge")  # a boundary face conducts with the node's own k
        Tp = np.pad(T, 1)
        flux = 0
        for shifted in (np.s_[:-2, 1:-1], np.s_[2:, 1:-1], np.s_[1:-1, :-2], np.s_[1:-1, 2:]):
            flux = flux + 0.5 * (k + kp[shifted]) * (T - Tp[shifted])
        return flux / self.h ** 2 - self.source.reshape(self.n, self.n)


def _relative_error(J, reference):
    return float(np.max(np.abs(J - reference)) / np.max(np.abs(reference)))


def main(n=40, verbose=True, beta=0.5):
    p0 = np.array([1.0, 4.0, 0.5, 2.0])
    results = {"n": n, "unknowns": n * n}

    # 1. the assembled residual against the hand-expanded stencil
    plate = Plate(n, beta=beta)
    T_probe = np.random.default_rng(0).uniform(0, 0.2, (n, n))
    J_matrix = plate.residual(forward.seed(T_probe), p0).dvalue
    J_stencil = plate.residual_by_hand(forward.seed(T_probe), p0).dvalue
    results["stencil_jacobian_rel_error"] = _relative_error(J_matrix.toarray(),
                                                            J_stencil.toarray())
    results["jacobian_nnz"] = (J_matrix.nnz, J_stencil.nnz)

    # 2. linear conduction: a differentiable sparse solve
    linear = Plate(n, beta=0.0)

    def linear_solve(p):
        return linalg.spsolve(linear.matrix(np.zeros((n, n)), p), linear.source)

    start = time.perf_counter()
    T_linear = linear_solve(forward.seed(p0))
    results["linear_time"] = time.perf_counter() - start
    fd = numerical_jacobian(linear_solve, p0, method="central")
    results["linear_fd_rel_error"] = _relative_error(T_linear.dvalue.toarray(), fd)

    # 3. nonlinear conduction: Newton with implicit differentiation
    def newton_solve(p, **options):
        return newton(plate.residual, np.zeros((n, n)), args=(p,), tol=1e-12, **options)

    start = time.perf_counter()
    result = newton_solve(forward.seed(p0), sensitivity=True)
    results["newton_time"] = time.perf_counter() - start
    results["newton_converged"] = bool(result.success)
    results["newton_iterations"] = result.nit
    T = result.x
    fd = numerical_jacobian(lambda p: newton_solve(p).x, p0, method="central")
    results["newton_fd_rel_error"] = _relative_error(T.dvalue.toarray(), fd)
    results["mean_temperature"] = float(T.value.mean())
    results["mean_temperature_sensitivity"] = np.asarray(
        T.dvalue.mean(axis=0)).ravel()

    if verbose:
        print("heat conduction on a %dx%d grid (%d unknowns), conductivities %s"
              % (n, n, n * n, p0))
        print("  dF/dT of A(T) @ T - q vs the hand-expanded stencil: rel. error %.1e "
              "(nnz %d vs %d)" % ((results["stencil_jacobian_rel_error"],)
                                  + results["jacobian_nnz"]))
        print("  linear, spsolve:  dT/dp vs central differences: rel. error %.1e (%.3f s)"
              % (results["linear_fd_rel_error"], results["linear_time"]))
        print("  nonlinear, newton(sensitivity=True), %d iterations: dT/dp vs central "
              "differences: rel. error %.1e (%.3f s)"
              % (result.nit, results["newton_fd_rel_error"], results["newton_time"]))
        print("  mean temperature %.5f; d(mean T)/dp = %s"
              % (results["mean_temperature"],
                 np.array2string(results["mean_temperature_sensitivity"], precision=5)))
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
