"""A p-n junction under forward bias: Poisson and carrier continuity, solved by Newton.

The van Roosbroeck (drift-diffusion) system in one dimension, in scaled units
(potential in thermal voltages kT/q, densities in units of the intrinsic
density, unit mobilities and lifetimes), for the potential ``psi`` and the
electron and hole densities ``n`` and ``p``::

    l^2 psi'' = n - p - D(x)                     (Poisson)
    Jn' =  R,        Jp' = -R                      (continuity)
    R = (n p - 1) / (n + p + 2)                    (Shockley-Read-Hall)

The currents on the edges between nodes ``i`` and ``i + 1`` are the
Scharfetter-Gummel fluxes, exact for a constant field on the edge, with
``d = psi[i+1] - psi[i]`` and the Bernoulli function ``B(d) = d / (exp(d) - 1)``::

    Jn = (n[i+1] B(d) - n[i] B(-d)) / h,     Jp = (p[i] B(d) - p[i+1] B(-d)) / h

The contacts are ohmic: charge neutral, in equilibrium (``n p = 1``), and the
left (p-type) contact is raised by the applied bias ``V``.  Zero bias is
solved first for the potential alone (Poisson-Boltzmann); then the bias is
ramped in small steps, each solved by :func:`sparsegrad.optimize.newton` from
the previous solution with the p side shifted by the bias step, with the exact
sparse Jacobian of the residual below, which is ordinary numpy code.

Checks printed by the demo:

* current continuity: adding the two continuity equations, the total current
  ``Jn + Jp`` is the same on every edge, to the Newton tolerance;
* at zero bias the current vanishes (the Scharfetter-Gummel flux of the
  Boltzmann distribution is zero), to rounding;
* the current grows exponentially with the bias, with an ideality factor
  between 1 (diffusion) and 2 (recombination in the depletion region);
* the Jacobian against central differences, column by column on a small grid.

Run ``python examples/pn_junction_bias.py [nodes]``, or import it and call
``main(n=..., verbose=...)``, which returns a dict of the results.
"""
import sys
import time

import numpy as np

import sparsegrad
from sparsegrad.optimize import newton
from sparsegrad.testing import numerical_jacobian

_SERIES = 1e-2


def bernoulli(d):
    """``B(d) = d / expm1(d)``: a short series near 0, where the quotient is 0/0."""
    small = np.abs(d) < _SERIES
    safe = np.where(small, 1.0, d)          # keeps 0/0 out of the branch not taken
    d2 = d * d
    return np.where(small, 1.0 - d / 2 + d2 / 12 - d2 * d2 / 720, safe / np.expm1(safe))


class Diode:
    """Grid, doping and the residual of the drift-diffusion system.

    ``nodes`` nodes on ``[-1, 1]``; smooth doping ``N tanh(x / w)``: p-type on
    the left, n-type on the right.  Unknowns ``concatenate([psi, n, p])``.
    """

    def __init__(self, nodes, doping=1e3, width=0.02, debye2=1e-4):
        if nodes < 5:
            raise ValueError("need at least 5 nodes")
        self.nodes = nodes
        self.x = np.linspace(-1.0, 1.0, nodes)
        self.h = self.x[1] - self.x[0]
        self.doping = doping * np.tanh(self.x / width)
        self.debye2 = debye2
        # neutral, equilibrium contacts: n - p = D, n p = 1
        self.psi_eq = np.arcsinh(self.doping / 2)

    def unpack(self, w):
        k = self.nodes
        return w[:k], w[k:2 * k], w[2 * k:]

    def currents(self, w):
        """Electron and hole currents on the ``nodes - 1`` edges."""
        psi, n, p = self.unpack(w)
        d = psi[1:] - psi[:-1]
        b_plus = bernoulli(d)
        b_minus = b_plus + d                 # B(-d) = B(d) + d
        jn = (n[1:] * b_plus - n[:-1] * b_minus) / self.h
        jp = (p[:-1] * b_plus - p[1:] * b_minus) / self.h
        return jn, jp

    def residual(self, w, bias):
        psi, n, p = self.unpack(w)
        jn, jp = self.currents(w)
        h = self.h
        n_in, p_in = n[1:-1], p[1:-1]
        recombination = (n_in * p_in - 1.0) / (n_in + p_in + 2.0)
        poisson = self.debye2 * (psi[:-2] - 2 * psi[1:-1] + psi[2:]) / h ** 2 \
            - (n_in - p_in - self.doping[1:-1])
        electrons = (jn[1:] - jn[:-1]) / h - recombination
        holes = (jp[1:] - jp[:-1]) / h + recombination
        psi_contacts = self.psi_eq[[0, -1]] + np.array([bias, 0.0])
        n_contacts = np.exp(self.psi_eq[[0, -1]])
        p_contacts = np.exp(-self.psi_eq[[0, -1]])
        return np.concatenate([psi[[0, -1]] - psi_contacts, poisson,
                               n[[0, -1]] - n_contacts, electrons,
                               p[[0, -1]] - p_contacts, holes])

    def equilibrium_guess(self):
        """Charge neutrality everywhere (no field): a start for :meth:`equilibrium`."""
        return np.concatenate([self.psi_eq, np.exp(self.psi_eq), np.exp(-self.psi_eq)])

    def poisson_boltzmann(self, psi):
        """Poisson's equation with Boltzmann carriers ``n = exp(psi)``, ``p = exp(-psi)``."""
        F = np.zeros(self.nodes, like=psi)
        F[[0, -1]] = psi[[0, -1]] - self.psi_eq[[0, -1]]
        F[1:-1] = self.debye2 * (psi[:-2] - 2 * psi[1:-1] + psi[2:]) / self.h ** 2 \
            - (np.exp(psi[1:-1]) - np.exp(-psi[1:-1]) - self.doping[1:-1])
        return F

    def equilibrium(self, **options):
        """Zero bias: solve for the potential alone, then the carriers are Boltzmann.

        The full system started from charge neutrality is far from its solution
        at the junction; the scalar equilibrium problem is not, and its solution
        is the exact zero-bias solution of the full system.
        """
        result = newton(self.poisson_boltzmann, self.psi_eq, **options)
        psi = result.x
        return np.concatenate([psi, np.exp(psi), np.exp(-psi)]), result


def check_columns(nodes=12, bias=2.0, seed=3):
    """Max relative error of the Jacobian against central differences, every column."""
    diode = Diode(nodes)
    rng = np.random.default_rng(seed)
    w = diode.equilibrium_guess() * (1 + 0.1 * rng.standard_normal(3 * nodes))
    J = sparsegrad.jacobian(diode.residual)(w, bias).toarray()
    reference = numerical_jacobian(lambda v: diode.residual(v, bias), w, method="central")
    return float(np.max(np.abs(J - reference)) / np.max(np.abs(J)))


def main(n=2000, verbose=True, max_bias=8.0, bias_step=0.5):
    """Ramp the bias from 0 to ``max_bias`` thermal voltages on ``n`` nodes."""
    log = print if verbose else (lambda *a: None)
    diode = Diode(n)
    biases = np.round(np.arange(0.0, max_bias + bias_step / 2, bias_step), 12)
    log("p-n junction under forward bias: Poisson + electron and hole continuity "
        "(Scharfetter-Gummel), %d nodes, %d unknowns" % (n, 3 * n))
    log("  bias [kT/q]   Newton its   total current   max |variation| along the device")
    start = time.perf_counter()
    w, equilibrium = diode.equilibrium(tol=1e-9 * np.max(np.abs(diode.doping)))
    log("  equilibrium potential: %s after %d Newton iterations"
        % (equilibrium.message, equilibrium.nit))
    currents, variations, iterations = [], [], []
    converged = bool(equilibrium.success)
    scale = np.max(np.abs(diode.doping)) / diode.h ** 2  # size of the continuity rows
    previous = 0.0
    for bias in biases:
        # continuation: the p side follows its contact, the carriers stay put
        guess = w.copy()
        guess[:n][diode.x < 0] += bias - previous
        result = newton(diode.residual, guess, args=(bias,), tol=1e-14 * scale, maxiter=50)
        previous = bias
        converged &= bool(result.success)
        if not result.success:
            log("  bias %.2f: %s" % (bias, result.message))
            break
        w = result.x
        jn, jp = diode.currents(w)
        total = jn + jp
        current = float(np.mean(total))
        variation = float(np.max(np.abs(total - current)))
        currents.append(current)
        variations.append(variation)
        iterations.append(result.nit)
        log("  %8.2f      %5d        % .6e   %.2e" % (bias, result.nit, current, variation))
    solve_time = time.perf_counter() - start
    currents = np.array(currents)
    variations = np.array(variations)
    # ideality factor m from J ~ exp(V / m) between two biases in the exponential range
    lo, hi = np.searchsorted(biases, [0.5 * max_bias, 0.75 * max_bias])
    ideality = float((biases[hi] - biases[lo]) / np.log(currents[hi] / currents[lo])) \
        if converged else float("nan")
    fd_error = check_columns()
    log("Converged at every bias: %s (%.2f s)" % (converged, solve_time))
    log("Current at zero bias: %.2e (a forward current at %.1f kT/q is %.2e)"
        % (currents[0], biases[-1], currents[-1]))
    log("Ideality factor between %.2f and %.2f kT/q: %.3f"
        % (biases[lo], biases[hi], ideality))
    log("Jacobian against central differences (12 nodes, every column): "
        "max relative error %.2e" % fd_error)
    return {
        "n": n,
        "converged": converged,
        "biases": biases[:len(currents)],
        "currents": currents,
        "current_variations": variations,
        "iterations": iterations,
        "ideality": ideality,
        "fd_columns_rel_error": fd_error,
        "solution": diode.unpack(w),
        "x": diode.x,
        "solve_time": solve_time,
    }


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
