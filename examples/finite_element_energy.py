"""A p-Laplacian energy on P1 triangles, minimised by Newton's method with
exact sparse Hessians.

On the unit square, split into ``n x n`` squares of two triangles each, with
``u = 0`` on the boundary, minimise the regularised p-Laplacian energy

    E(u) = sum over triangles T of |T| (eps^2 + |grad u|_T^2)^(p/2) / p  -  b @ u

over the values ``u`` at the interior nodes (``grad u`` is constant on each
triangle).  The energy is written as a finite-element code writes it: the
element energies are computed for all triangles at once from the nodal
values gathered by the triangles' vertex numbers, and assembled into nodal
energies with ``np.add.at``.  ``sparsegrad.value_grad_and_hessian`` gives the
energy, its gradient and its exact sparse Hessian (the tangent stiffness
matrix, 7 entries a row) at once, and Newton's method with
``scipy.sparse.linalg.spsolve`` and a backtracking line search minimises it.

The load ``b`` is *manufactured*: it is the gradient of the stored energy at
``u* = 16 x (1 - x) y (1 - y) (1 + x)``, so ``u*`` is the exact discrete
minimiser (the energy is strictly convex) and Newton must return it.  Checks:

* for ``p = 2`` the Hessian is the P1 stiffness matrix, assembled separately
  from the elements' local matrices with ``scipy.sparse.coo_matrix``;
* the gradient and ``H @ v`` against central differences of the energy and of
  the gradient, along random directions;
* Newton's iterates: the energy decreases, the gradient norm falls
  quadratically, and the minimiser is ``u*``.

Run ``python examples/finite_element_energy.py [n] [--p P]`` (``n = 200``
gives about 40 000 unknowns), or import it and call ``main(n=...,
verbose=...)``, which returns a dict of the results.
"""
import argparse
import time

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

import sparsegrad


class Mesh:
    """P1 triangles on ``n x n`` squares of the unit square: ``(n + 1)^2``
    nodes, ``2 n^2`` triangles, unknowns at the ``(n - 1)^2`` interior nodes."""

    def __init__(self, n):
        if n < 2:
            raise ValueError("need n >= 2")
        self.n, self.h = n, 1.0 / n
        s = np.linspace(0.0, 1.0, n + 1)
        X, Y = np.meshgrid(s, s, indexing="ij")
        self.x, self.y = X.ravel(), Y.ravel()
        node = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
        a, b = node[:-1, :-1].ravel(), node[1:, :-1].ravel()
        c, d = node[:-1, 1:].ravel(), node[1:, 1:].ravel()
        self.triangles = np.concatenate([np.stack([a, b, d], 1), np.stack([a, d, c], 1)])
        self.interior = node[1:-1, 1:-1].ravel()
        # gradients of the three hat functions on each triangle: the rows of
        # the inverse of [[1, x_k, y_k]], constant on the triangle
        corners = np.stack([np.ones(self.triangles.shape), self.x[self.triangles],
                            self.y[self.triangles]], axis=2)
        inverse = np.linalg.inv(corners)
        self.gx, self.gy = inverse[:, 1, :], inverse[:, 2, :]
        self.area = 0.5 * np.abs(np.linalg.det(corners))

    def nodal(self, u_interior):
        """All nodal values, zero on the boundary."""
        u = np.zeros(self.x.size, like=u_interior)
        u[self.interior] = u_interior
        return u

    def stiffness(self):
        """The P1 stiffness matrix on the interior nodes, from local matrices."""
        local = self.area[:, None, None] * (self.gx[:, :, None] * self.gx[:, None, :]
                                            + self.gy[:, :, None] * self.gy[:, None, :])
        rows = np.repeat(self.triangles, 3, axis=1).ravel()
        cols = np.tile(self.triangles, (1, 3)).ravel()
        K = scipy.sparse.coo_matrix((local.ravel(), (rows, cols)),
                                    shape=(self.x.size,) * 2).tocsr()
        return K[self.interior][:, self.interior]


class PLaplace:
    """The energy ``E(u) = stored(u) - load @ u`` on a :class:`Mesh`."""

    def __init__(self, mesh, p=3.0, eps=0.1):
        self.mesh, self.p, self.eps = mesh, p, eps
        exact = 16 * mesh.x * (1 - mesh.x) * mesh.y * (1 - mesh.y) * (1 + mesh.x)
        self.exact = exact[mesh.interior]
        self.load = 0.0
        self.load = sparsegrad.gradient(self.stored)(self.exact)

    def nodal_energy(self, u_interior):
        """The element energies, a third of each given to each of its vertices."""
        mesh = self.mesh
        vertices = mesh.nodal(u_interior)[mesh.triangles]          # (triangles, 3)
        gx = np.sum(mesh.gx * vertices, axis=1)
        gy = np.sum(mesh.gy * vertices, axis=1)
        element = mesh.area * (self.eps ** 2 + gx ** 2 + gy ** 2) ** (self.p / 2) / self.p
        nodal = np.zeros(mesh.x.size, like=u_interior)
        for k in range(3):
            np.add.at(nodal, mesh.triangles[:, k], element / 3)
        return nodal

    def stored(self, u):
        return np.sum(self.nodal_energy(u))

    def energy(self, u):
        return self.stored(u) - np.sum(self.load * u)


def newton_minimize(energy, u0, rtol=1e-10, maxiter=30):
    """Newton's method with a backtracking (Armijo) line search, until
    ``max |gradient|`` is ``rtol`` times its first value; returns ``u`` and the
    history of ``(energy, max |gradient|, step length)``."""
    value_grad_and_hessian = sparsegrad.value_grad_and_hessian(energy)
    u, history = u0.copy(), []
    for _ in range(maxiter):
        value, gradient, H = value_grad_and_hessian(u)
        history.append([float(value), float(np.max(np.abs(gradient))), 0.0])
        if history[-1][1] <= rtol * history[0][1]:
            break
        step = scipy.sparse.linalg.spsolve(H.tocsc(), -gradient)
        slope = float(gradient @ step)
        # near the minimum the decrease is below the energy's rounding, which
        # the test must not mistake for an increase
        rounding = 64 * np.finfo(float).eps * abs(value)
        t = 1.0
        while energy(u + t * step) > value + 1e-4 * t * slope + rounding and t > 1e-10:
            t *= 0.5
        history[-1][2] = t
        u = u + t * step
    return u, history


def _directional_errors(problem, u, rng, directions=3, delta=1e-5):
    """Largest relative errors of the gradient and of ``H @ v`` against
    central differences along random directions."""
    _, gradient, H = sparsegrad.value_grad_and_hessian(problem.energy)(u)
    grad = sparsegrad.gradient(problem.energy)
    gradient_error = hessian_error = 0.0
    for _ in range(directions):
        v = rng.standard_normal(u.size)
        v /= np.linalg.norm(v)
        fd = (problem.energy(u + delta * v) - problem.energy(u - delta * v)) / (2 * delta)
        gradient_error = max(gradient_error, abs(fd - gradient @ v) / abs(fd))
        fd = (grad(u + delta * v) - grad(u - delta * v)) / (2 * delta)
        hessian_error = max(hessian_error,
                            np.max(np.abs(fd - H @ v)) / np.max(np.abs(fd)))
    return float(gradient_error), float(hessian_error)


def main(n=16, p=3.0, eps=0.1, verbose=True):
    """Minimise on ``n x n`` squares; returns a dict of the results."""
    log = print if verbose else (lambda *a: None)
    mesh = Mesh(n)
    results = {"n": n, "unknowns": mesh.interior.size, "p": p}
    log("p-Laplacian energy, p = %g, eps = %g, P1 triangles on %d x %d squares "
        "(%d triangles, %d unknowns), manufactured load"
        % (p, eps, n, n, mesh.triangles.shape[0], mesh.interior.size))

    quadratic = PLaplace(mesh, p=2.0, eps=eps)
    H = sparsegrad.hessian(quadratic.energy)(np.zeros(mesh.interior.size))
    K = mesh.stiffness()
    results["stiffness_rel_error"] = float(abs(H - K).max() / abs(K).max())
    results["hessian_nnz"] = H.nnz
    log("  p = 2: Hessian vs the assembled stiffness matrix: rel. error %.1e "
        "(nnz %d, %.1f a row)" % (results["stiffness_rel_error"], H.nnz,
                                 H.nnz / H.shape[0]))

    problem = PLaplace(mesh, p=p, eps=eps)
    start = time.perf_counter()
    u, history = newton_minimize(problem.energy, np.zeros(mesh.interior.size))
    results["time"] = time.perf_counter() - start
    energies, gradients = [h[0] for h in history], [h[1] for h in history]
    results.update(energies=energies, gradient_norms=gradients,
                   iterations=len(history) - 1, u=u,
                   error=float(np.max(np.abs(u - problem.exact))),
                   energy_drop=energies[0] - energies[-1])
    for k, (value, gradient, t) in enumerate(history):
        log("  Newton %2d: E = %+.12e  max|grad E| = %.2e%s"
            % (k, value, gradient, "  step %g" % t if t else ""))
    log("  %d iterations in %.2f s: energy decreased by %.6e; max |u - u*| = %.1e"
        % (results["iterations"], results["time"], results["energy_drop"],
           results["error"]))
    errors = _directional_errors(problem, 0.5 * u, np.random.default_rng(1))
    results["gradient_fd_rel_error"], results["hvp_fd_rel_error"] = errors
    log("  at u*/2, along random directions: gradient vs central differences %.1e, "
        "H @ v vs central differences of the gradient %.1e" % errors)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=32,
                        help="squares per side (default 32; 200 or more for a large "
                             "problem)")
    parser.add_argument("--p", type=float, default=3.0, help="the exponent p (default 3)")
    parser.add_argument("--eps", type=float, default=0.1, help="regularisation (default 0.1)")
    arguments = parser.parse_args()
    main(arguments.n, p=arguments.p, eps=arguments.eps)
