"""Implicit time stepping of the 1-d shallow water equations with Newton's method.

The conservative shallow water equations on a periodic channel, for the depth
``h`` and the discharge ``q = h u``::

    h_t + q_x = 0,        q_t + (q^2 / h + g h^2 / 2)_x = 0

are discretised by finite volumes with the Rusanov (local Lax-Friedrichs)
flux and stepped in time by the implicit (backward) Euler method, at a time
step several times the explicit CFL limit.  Each step solves the nonlinear
system ``U - U_old + dt/dx (F_{i+1/2} - F_{i-1/2}) = 0`` with
:func:`sparsegrad.optimize.newton`, whose Jacobian comes from the residual
below, ordinary numpy code with ``np.roll``, ``np.abs`` and ``np.maximum``.

Checks printed by the demo:

* mass ``sum(h) dx`` and momentum ``sum(q) dx`` are conserved: the flux
  differences telescope on the periodic grid, so each changes by the sum of
  the Newton residuals only, i.e. to rounding;
* the depth stays positive, and the total energy decreases (backward Euler
  and the Rusanov flux are dissipative);
* the Jacobian against central differences on a small grid.

Run ``python examples/shallow_water.py [cells]``, or import it and call
``main(n=..., verbose=...)``, which returns a dict of the results.
"""
import sys
import time

import numpy as np

import sparsegrad
from sparsegrad.optimize import newton
from sparsegrad.testing import numerical_jacobian

GRAVITY = 9.81


class Channel:
    """``n`` cells on the periodic interval ``[0, 1)``; unknowns ``concatenate([h, q])``."""

    def __init__(self, n, courant=5.0):
        if n < 4:
            raise ValueError("need at least 4 cells")
        self.n = n
        self.dx = 1.0 / n
        self.x = (np.arange(n) + 0.5) * self.dx
        # the time step is `courant` times the explicit limit of the initial state
        h0, q0 = self.initial_state()
        speed = np.max(np.abs(q0 / h0) + np.sqrt(GRAVITY * h0))
        self.dt = courant * self.dx / speed

    def initial_state(self):
        """A Gaussian hump of water at rest on a uniform depth, with a uniform drift."""
        h = 1.0 + 0.5 * np.exp(-((self.x - 0.5) / 0.08) ** 2)
        return h, 0.3 * h

    def fluxes(self, h, q):
        """Rusanov fluxes at the right face of every cell (periodic)."""
        h_right, q_right = np.roll(h, -1), np.roll(q, -1)

        def physical(h, q):
            return q, q * q / h + 0.5 * GRAVITY * h * h

        mass_l, momentum_l = physical(h, q)
        mass_r, momentum_r = physical(h_right, q_right)
        speed = np.maximum(np.abs(q / h) + np.sqrt(GRAVITY * h),
                           np.abs(q_right / h_right) + np.sqrt(GRAVITY * h_right))
        mass = 0.5 * (mass_l + mass_r) - 0.5 * speed * (h_right - h)
        momentum = 0.5 * (momentum_l + momentum_r) - 0.5 * speed * (q_right - q)
        return mass, momentum

    def residual(self, U, U_old):
        n = self.n
        h, q = U[:n], U[n:]
        mass, momentum = self.fluxes(h, q)
        ratio = self.dt / self.dx
        return np.concatenate([h - U_old[:n] + ratio * (mass - np.roll(mass, 1)),
                               q - U_old[n:] + ratio * (momentum - np.roll(momentum, 1))])

    def energy(self, U):
        h, q = U[:self.n], U[self.n:]
        return float(np.sum(0.5 * q * q / h + 0.5 * GRAVITY * h * h) * self.dx)


def check_columns(n=8, seed=5):
    """Max relative error of the Jacobian against central differences, every column."""
    channel = Channel(n)
    rng = np.random.default_rng(seed)
    U_old = np.concatenate(channel.initial_state())
    U = U_old * (1 + 0.05 * rng.standard_normal(2 * n))
    J = sparsegrad.jacobian(channel.residual)(U, U_old).toarray()
    reference = numerical_jacobian(lambda V: channel.residual(V, U_old), U, method="central")
    return float(np.max(np.abs(J - reference)) / np.max(np.abs(J)))


def main(n=2000, steps=40, verbose=True, courant=5.0):
    """Take ``steps`` backward Euler steps on ``n`` cells; return a dict of results."""
    log = print if verbose else (lambda *a: None)
    channel = Channel(n, courant=courant)
    U = np.concatenate(channel.initial_state())
    mass0, momentum0 = np.sum(U[:n]) * channel.dx, np.sum(U[n:]) * channel.dx
    energies = [channel.energy(U)]
    log("1-d shallow water, backward Euler + Rusanov flux: %d cells, %d unknowns, "
        "dt = %.2e (Courant number %.1f), %d steps" % (n, 2 * n, channel.dt, courant, steps))
    iterations, converged = [], True
    start = time.perf_counter()
    for step in range(steps):
        result = newton(channel.residual, U, args=(U,), tol=1e-13, xtol=0.0)
        if not result.success:
            log("  step %d: %s" % (step + 1, result.message))
            converged = False
            break
        U = result.x
        iterations.append(result.nit)
        energies.append(channel.energy(U))
    solve_time = time.perf_counter() - start
    mass_error = abs(np.sum(U[:n]) * channel.dx - mass0) / mass0
    momentum_error = abs(np.sum(U[n:]) * channel.dx - momentum0) / abs(momentum0)
    fd_error = check_columns()
    log("Converged at every step: %s, Newton iterations per step %d..%d (%.2f s)"
        % (converged, min(iterations), max(iterations), solve_time))
    log("Relative change of mass %.1e, of momentum %.1e (conserved to rounding)"
        % (mass_error, momentum_error))
    log("Energy %.6f -> %.6f (dissipated by the scheme); min depth %.4f"
        % (energies[0], energies[-1], np.min(U[:n])))
    log("Jacobian against central differences (8 cells, every column): "
        "max relative error %.2e" % fd_error)
    return {
        "n": n,
        "converged": converged,
        "iterations": iterations,
        "mass_rel_error": float(mass_error),
        "momentum_rel_error": float(momentum_error),
        "energies": np.array(energies),
        "min_depth": float(np.min(U[:n])),
        "h": U[:n],
        "q": U[n:],
        "fd_columns_rel_error": fd_error,
        "solve_time": solve_time,
    }


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
