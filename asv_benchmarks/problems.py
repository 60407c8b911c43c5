"""The benchmark problems: the single source of residuals for asv and the ratios script.

Every residual is ordinary numpy code on a flat 1-d state vector.  It runs on a
plain ``ndarray`` (the baseline that sparsegrad is measured against) and,
unchanged, on a forward value from ``sparsegrad.forward.seed`` (value and
Jacobian) or ``seed_sparsity`` (pattern only).  No residual uses assembly into
a preallocated array; pieces are joined with ``np.concatenate``.

A problem is set up once per size, outside any timed region: ``setup(n)``
builds the grid, the index arrays and the constants and returns
``(residual, x0)``.  Only ``residual(x)`` is timed.  ``setup(n, xp=cupy)``
makes ``x0``, the index arrays and the constants on a GPU (any array module
with ``asarray`` does: the tests use the fake device of
``sparsegrad.gpu._device``), so that the same residual runs there.

>>> import numpy as np
>>> from sparsegrad import forward
>>> residual, x0 = PROBLEMS["pb"].setup(20)
>>> y = residual(forward.seed(x0))
>>> bool(np.allclose(y.value, residual(x0))), y.dvalue.shape
(True, (20, 20))

Problems (``PROBLEMS`` maps the short key to the problem):

``sw``     2-d shallow water on an ``n x n`` periodic grid, 3 n^2 unknowns
``pb``     1-d Poisson-Boltzmann with Dirichlet ends, ``n`` unknowns
``bratu``  2-d Bratu on an ``n x n`` interior grid with zero Dirichlet boundary, n^2 unknowns
``dd``     1-d drift-diffusion (Poisson + electron and hole continuity with
           Scharfetter-Gummel fluxes) on ``n`` nodes, 3 n unknowns

Energies (``ENERGIES``), scalar functions whose Hessians are benchmarked,
with the same ``setup(n) -> (energy, x0)``:

``minsurf``  the 2-d minimal-surface (area) functional on an ``n x n`` interior
             grid with a fixed boundary, n^2 unknowns
"""
import numpy as np

__all__ = ["Problem", "PROBLEMS", "ShallowWater", "PoissonBoltzmann", "Bratu",
           "DriftDiffusion", "MinimalSurface", "ENERGIES", "bernoulli", "get"]


class Problem:
    """A benchmark problem: a name, the sizes benchmarked and ``setup(n)``.

    Subclasses set ``key`` (short name used on command lines), ``name``,
    ``sizes`` (the sizes of the speed targets) and ``size_label`` (what ``n`` counts), and
    implement ``setup(n, xp=numpy) -> (residual, x0)`` (``x0``, index arrays and
    constants made by ``xp.asarray``) and ``unknowns(n)``.
    """

    key = None
    name = None
    sizes = ()
    size_label = "n"

    def setup(self, n, xp=np):  # pragma: no cover - abstract
        raise NotImplementedError

    def unknowns(self, n):  # pragma: no cover - abstract
        raise NotImplementedError

    def label(self, n):
        """A short human label for one size, e.g. ``"shallow water 200x200"``."""
        return "%s %s" % (self.name, self.size_text(n))

    def size_text(self, n):
        return "%d" % n

    def __repr__(self):
        return "<problem %s>" % self.key


# ---------------------------------------------------------------- shallow water

class ShallowWater(Problem):
    """2-d shallow water equations on an ``n x n`` periodic grid.

    State ``x = concatenate([eta, u, v])`` (height and the two velocities, each
    ``n*n`` values, C order of the grid).  Centred differences use index arrays
    made once per size from ``np.roll`` of the index grid::

        ddx(f) = (f[east] - f[west]) / (2 dx),   ddy(f) = (f[north] - f[south]) / (2 dy)
        deta = -ddx(eta u) - ddy(eta v)
        du   = (deta u - ddx(eta u^2 + g eta^2 / 2) - ddy(eta u v)) / eta
        dv   = (deta v - ddx(eta u v) - ddy(eta v^2 + g eta^2 / 2)) / eta
        residual = xt - concatenate([deta, du, dv])

    ``xt`` is a fixed array (the time derivative the residual is compared to).
    The Jacobian has 32 nonzeros per 3 rows (1.28 M at ``n = 200``).
    """

    key = "sw"
    name = "shallow water"
    sizes = (50, 100, 200, 400)
    size_label = "grid n (n x n, 3 n^2 unknowns)"
    g = 9.81

    def unknowns(self, n):
        return 3 * n * n

    def size_text(self, n):
        return "%dx%d" % (n, n)

    def stencil(self, n, xp=np):
        """``(cells, east, west, north, south, cx, cy)``: the number of grid cells,
        each cell's four neighbours (index arrays, periodic) and the factors of
        the centred differences, ``1 / (2 dx)`` and ``1 / (2 dy)``."""
        if n < 3:
            raise ValueError("shallow water needs n >= 3")
        cells = n * n
        length = 1.0
        dx = dy = length / n
        grid = np.arange(cells).reshape(n, n)          # grid[j, i]: row j (y), column i (x)
        east, west, north, south = (xp.asarray(np.roll(grid, shift, axis=axis).ravel())
                                    for shift, axis in ((-1, 1), (1, 1), (-1, 0), (1, 0)))
        return cells, east, west, north, south, 1.0 / (2.0 * dx), 1.0 / (2.0 * dy)

    def setup(self, n, xp=np):
        g = self.g
        cells, east, west, north, south, cx, cy = self.stencil(n, xp)

        def ddx(f):
            return (f[east] - f[west]) * cx

        def ddy(f):
            return (f[north] - f[south]) * cy

        def rhs(x):
            eta = x[:cells]
            u = x[cells:2 * cells]
            v = x[2 * cells:]
            deta = -ddx(eta * u) - ddy(eta * v)
            du = (deta * u - ddx(eta * u ** 2 + g * eta ** 2 / 2) - ddy(eta * u * v)) / eta
            dv = (deta * v - ddx(eta * u * v) - ddy(eta * v ** 2 + g * eta ** 2 / 2)) / eta
            return np.concatenate([deta, du, dv])

        # a smooth bump of water at rest plus a swirl: every term is nonzero
        s = (np.arange(n) + 0.5) / n
        X, Y = np.meshgrid(s, s)                       # X varies along axis 1 (x)
        eta0 = 1.0 + 0.1 * np.exp(-((X - 0.5) ** 2 + (Y - 0.5) ** 2) / 0.02)
        u0 = 0.1 * np.sin(2 * np.pi * Y)
        v0 = 0.1 * np.cos(2 * np.pi * X)
        x0 = xp.asarray(np.concatenate([eta0.ravel(), u0.ravel(), v0.ravel()]))
        # fixed; any constant will do
        xt = rhs(x0) + xp.asarray(0.01 * np.sin(np.arange(3 * cells)))

        def residual(x):
            return xt - rhs(x)

        return residual, x0


# ---------------------------------------------------------------- Poisson-Boltzmann

class PoissonBoltzmann(Problem):
    """1-d nonlinear Poisson-Boltzmann equation, Dirichlet ends.

    In thermal voltages and intrinsic densities, on ``n`` nodes::

        interior: lap(psi) - (exp(psi) - exp(-psi) - doping)
        ends:     psi - psi_contact          (charge neutral contacts)

    with ``lap(psi) = (psi[:-2] - 2 psi[1:-1] + psi[2:]) / h^2`` and an abrupt
    p-n junction doping ``-N`` / ``+N``.  Tridiagonal Jacobian.
    """

    key = "pb"
    name = "Poisson-Boltzmann"
    sizes = (10 ** 4, 10 ** 5, 10 ** 6)
    size_label = "unknowns"
    doping_density = 1e3

    def unknowns(self, n):
        return n

    def size_text(self, n):
        return "%.0e" % n if n >= 10 ** 4 else "%d" % n

    def setup(self, n, xp=np):
        if n < 3:
            raise ValueError("Poisson-Boltzmann needs n >= 3")
        N = self.doping_density
        x = np.linspace(-1.0, 1.0, n)                  # in units of a few Debye lengths
        h = x[1] - x[0]
        doping = np.where(x < 0, -N, N)
        doping_inner = xp.asarray(doping[1:-1])
        left = xp.asarray(np.arcsinh(doping[:1] / 2))
        right = xp.asarray(np.arcsinh(doping[-1:] / 2))
        inv_h2 = 1.0 / h ** 2

        def residual(psi):
            inner = psi[1:-1]
            lap = (psi[:-2] - 2 * inner + psi[2:]) * inv_h2
            interior = lap - (np.exp(inner) - np.exp(-inner) - doping_inner)
            return np.concatenate([psi[:1] - left, interior, psi[-1:] - right])

        # the charge-neutral guess, smoothed across the junction
        x0 = xp.asarray(np.arcsinh(N * np.tanh(x / 0.05) / 2))
        return residual, x0


# ---------------------------------------------------------------- Bratu

class Bratu(Problem):
    """2-d Bratu problem ``lap(u) + lambda exp(u) = 0`` on the unit square.

    ``n x n`` interior nodes (``h = 1/(n+1)``), zero Dirichlet boundary (added by
    ``np.pad``), 5-point Laplacian; ``lambda = 6`` (below the fold at 6.81).
    About 5 nonzeros per row.
    """

    key = "bratu"
    name = "Bratu"
    sizes = (100, 300, 1000)
    size_label = "grid n (n x n unknowns)"
    lam = 6.0

    def unknowns(self, n):
        return n * n

    def size_text(self, n):
        return "%dx%d" % (n, n)

    def setup(self, n, xp=np):
        if n < 2:
            raise ValueError("Bratu needs n >= 2")
        lam = self.lam
        h = 1.0 / (n + 1)
        inv_h2 = 1.0 / h ** 2

        def residual(x):
            u = x.reshape(n, n)
            U = np.pad(u, 1)                           # zero Dirichlet boundary
            lap = (U[:-2, 1:-1] + U[2:, 1:-1] + U[1:-1, :-2] + U[1:-1, 2:] - 4 * u) * inv_h2
            return (lap + lam * np.exp(u)).ravel()

        s = np.arange(1, n + 1) * h
        X, Y = np.meshgrid(s, s)
        x0 = xp.asarray((np.sin(np.pi * X) * np.sin(np.pi * Y)).ravel())
        return residual, x0


# ---------------------------------------------------------------- drift-diffusion

_SERIES_LIMIT = 1e-2


def bernoulli(x):
    """The Bernoulli function ``B(x) = x / expm1(x)``, safe at ``x = 0``.

    For ``|x| < 1e-2`` the series ``1 - x/2 + x^2/12 - x^4/720`` (error below
    1e-16) replaces the quotient; elsewhere the quotient is evaluated at a
    shifted argument so that no 0/0 occurs.  Works on forward values:
    comparisons give plain booleans and ``np.where`` selects rows exactly.
    """
    small = (x > -_SERIES_LIMIT) & (x < _SERIES_LIMIT)
    x2 = x * x
    series = 1.0 - x / 2 + x2 / 12 - x2 * x2 / 720
    safe = np.where(small, 1.0, x)
    return np.where(small, series, safe / np.expm1(safe))


class DriftDiffusion(Problem):
    """1-d drift-diffusion (van Roosbroeck) system with Scharfetter-Gummel fluxes.

    Scaled units (potential in thermal voltages, densities in intrinsic density,
    unit mobilities and lifetimes); unknowns ``concatenate([psi, n, p])`` on
    ``N`` nodes.  With ``d = psi[1:] - psi[:-1]`` and ``B`` the Bernoulli function
    (``B(-d) = B(d) + d``) the edge fluxes are::

        Jn = (n[1:] B(d) - n[:-1] B(-d)) / h,    Jp = (p[:-1] B(d) - p[1:] B(-d)) / h

    and the interior equations::

        Poisson:   l2 lap(psi) + p - n + doping
        electrons: (Jn[1:] - Jn[:-1]) / h - R,   holes: (Jp[1:] - Jp[:-1]) / h + R
        R = (n p - 1) / (n + p + 2)               (Shockley-Read-Hall)

    Ends are Dirichlet (ohmic contacts, a forward bias on the left).  Both
    fluxes vanish exactly in equilibrium ``n = exp(psi)``, ``p = exp(-psi)``.
    """

    key = "dd"
    name = "drift-diffusion"
    sizes = (10 ** 4, 10 ** 5)
    size_label = "nodes (3 x nodes unknowns)"
    doping_density = 1e3
    bias = 0.5          # thermal voltages

    def unknowns(self, n):
        return 3 * n

    def size_text(self, n):
        return "%.0e" % n if n >= 10 ** 4 else "%d" % n

    def setup(self, nodes, xp=np):
        if nodes < 3:
            raise ValueError("drift-diffusion needs at least 3 nodes")
        N = self.doping_density
        x = np.linspace(-1.0, 1.0, nodes)
        h = x[1] - x[0]
        inv_h = 1.0 / h
        l2 = 1e-4                                       # squared scaled Debye length
        doping = N * np.tanh(x / 0.02)
        doping_inner = xp.asarray(doping[1:-1])
        psi_eq = np.arcsinh(doping / 2)
        psi_contacts = xp.asarray(psi_eq[[0, -1]] + np.array([self.bias, 0.0]))
        n_contacts = xp.asarray(np.exp(psi_eq[[0, -1]]))
        p_contacts = xp.asarray(np.exp(-psi_eq[[0, -1]]))
        k = nodes

        def ends(f, values):
            return f[[0, -1]] - values

        def residual(w):
            psi = w[:k]
            n = w[k:2 * k]
            p = w[2 * k:]
            d = psi[1:] - psi[:-1]
            b_plus = bernoulli(d)
            b_minus = b_plus + d
            jn = (n[1:] * b_plus - n[:-1] * b_minus) * inv_h
            jp = (p[:-1] * b_plus - p[1:] * b_minus) * inv_h
            n_in = n[1:-1]
            p_in = p[1:-1]
            recombination = (n_in * p_in - 1.0) / (n_in + p_in + 2.0)
            poisson = (l2 * inv_h * inv_h) * (psi[:-2] - 2 * psi[1:-1] + psi[2:]) \
                + p_in - n_in + doping_inner
            electrons = (jn[1:] - jn[:-1]) * inv_h - recombination
            holes = (jp[1:] - jp[:-1]) * inv_h + recombination
            return np.concatenate([ends(psi, psi_contacts), poisson,
                                   ends(n, n_contacts), electrons,
                                   ends(p, p_contacts), holes])

        # equilibrium plus a bias ramp over the p side: nonzero currents there, while
        # the flat n side keeps tiny potential steps (the series branch of B)
        ramp = self.bias * np.maximum(-x, 0.0)
        psi0 = psi_eq + ramp
        x0 = np.concatenate([psi0, np.exp(psi_eq + 0.5 * ramp), np.exp(-psi_eq + 0.5 * ramp)])
        return residual, xp.asarray(x0)


PROBLEMS = {p.key: p for p in (ShallowWater(), PoissonBoltzmann(), Bratu(), DriftDiffusion())}


# ---------------------------------------------------------------- energies

class MinimalSurface(Problem):
    """The area of the graph of ``u`` over the unit square, ``sum(h^2 sqrt(1 +
    |grad u|^2))`` over the cells, the gradient of each cell from its four
    corners; ``n x n`` interior nodes (``h = 1/(n+1)``), the boundary fixed
    to Scherk-like data ``sin(pi s) cos(pi t)``.  About 9 nonzeros per row
    of the Hessian.
    """

    key = "minsurf"
    name = "minimal surface"
    sizes = (300, 1000)
    size_label = "grid n (n x n unknowns)"

    def unknowns(self, n):
        return n * n

    def size_text(self, n):
        return "%dx%d" % (n, n)

    @staticmethod
    def grid(n):
        """``(h, boundary)``: the spacing and the ``(n + 2) x (n + 2)`` grid of the
        boundary values (zero inside)."""
        h = 1.0 / (n + 1)
        t = np.linspace(0.0, 1.0, n + 2)
        boundary = np.sin(np.pi * t)[:, None] * np.cos(np.pi * t)[None, :]
        boundary[1:-1, 1:-1] = 0.0
        return h, boundary

    @staticmethod
    def area(U, h, sqrt=np.sqrt, total=np.sum):
        """The energy of the full grid ``U`` (boundary included), with the
        square root and the sum given (other tools' versions of them too)."""
        east = U[1:, 1:] - U[1:, :-1]
        west = U[:-1, 1:] - U[:-1, :-1]
        north = U[1:, 1:] - U[:-1, 1:]
        south = U[1:, :-1] - U[:-1, :-1]
        ux = (east + west) / (2 * h)
        uy = (north + south) / (2 * h)
        return h * h * total(sqrt(1.0 + ux * ux + uy * uy))

    def setup(self, n, xp=np):
        h, boundary = self.grid(n)
        boundary = xp.asarray(boundary)
        area = self.area

        def energy(x):
            return area(np.pad(x.reshape(n, n), 1) + boundary, h)

        s = np.arange(1, n + 1) * h
        x0 = xp.asarray((np.sin(np.pi * s)[:, None] * np.cos(np.pi * s)[None, :]).ravel())
        return energy, x0


ENERGIES = {p.key: p for p in (MinimalSurface(),)}


def get(key):
    """The problem with short key ``key`` (``"sw"``, ``"pb"``, ``"bratu"``, ``"dd"``)."""
    try:
        return PROBLEMS[key]
    except KeyError:
        raise KeyError("unknown problem %r; known: %s" % (key, ", ".join(PROBLEMS))) from None
