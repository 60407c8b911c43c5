"""The shallow-water benchmark's Jacobian derived by hand, written as a user
writes one with numpy: what sparsegrad's value+Jacobian is compared with.

The residual is ``asv_benchmarks.problems.ShallowWater``'s (``xt - rhs(x)``
on an ``n x n`` periodic grid).  Each row of the Jacobian has a fixed set of
columns (the cell and its four neighbours in the fields the equation reads):
8 for the height equation, 12 for each momentum equation.  The pattern, in
canonical CSR order (columns sorted in each row), is made once with the
place each coefficient of each row takes in it; each call computes the 32
coefficient arrays with numpy from the gathered neighbours, stacks them and
gathers them into the canonical order in one pass (numpy's interleave of
columns, ``np.stack(..., axis=1)``, then a permutation would cost twice as
much).  The result shares the pattern's arrays between
calls (a user's hand-written Jacobian would), so this is, if anything, the
favourable side of the comparison.

It doubles as an independent reference for the tests: sparsegrad's Jacobian
of the benchmark residual must equal it to rounding, pattern included.

>>> import numpy as np
>>> from sparsegrad import forward
>>> residual, jacobian, x0 = shallow_water(4)
>>> J = jacobian(x0)
>>> J.shape, J.nnz
((48, 48), 512)
>>> bool(abs(J - residual(forward.seed(x0)).dvalue).max() < 1e-12)
True
"""
import numpy as np
import scipy.sparse

from .problems import ShallowWater

__all__ = ["shallow_water", "HAND_CODED"]


def shallow_water(n):
    """``(residual, jacobian, x0)`` of the shallow-water benchmark on an ``n x n``
    grid, ``jacobian(x)`` derived by hand (a ``scipy.sparse.csr_matrix``, canonical:
    columns sorted in each row, no duplicates)."""
    problem = ShallowWater()
    residual, x0 = problem.setup(n)
    cells, east, west, north, south, cx, cy = problem.stencil(n)
    g = problem.g
    centre = np.arange(cells)
    eta, u, v = 0, cells, 2 * cells            # first column of each field
    # the columns of each equation's rows, in the order of the coefficients below
    columns = (
        (eta + east, eta + west, eta + north, eta + south, u + east, u + west,
         v + north, v + south),
        (eta + centre, eta + east, eta + west, eta + north, eta + south,
         u + centre, u + east, u + west, u + north, u + south, v + north, v + south),
        (eta + centre, eta + east, eta + west, eta + north, eta + south,
         v + centre, u + east, u + west, v + east, v + west, v + north, v + south),
    )
    # every coefficient as it is computed: entry ``i`` of the ``k``-th array at
    # ``k * cells + i`` of the stacked arrays; its row and column
    cols = np.concatenate([np.concatenate(c) for c in columns])
    rows = np.concatenate([np.tile(centre + b * cells, len(c)) for b, c in enumerate(columns)])
    source = np.lexsort((cols, rows))          # canonical place -> stacked place
    per_row = np.repeat([len(c) for c in columns], cells)
    indptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)
    indices = cols[source].astype(np.int32)
    shape = (3 * cells, 3 * cells)

    def jacobian(x):
        h, p, q = x[:cells], x[cells:2 * cells], x[2 * cells:]   # eta, u, v
        hE, hW, hN, hS = h[east], h[west], h[north], h[south]
        pE, pW, pN, pS = p[east], p[west], p[north], p[south]
        qE, qW, qN, qS = q[east], q[west], q[north], q[south]
        r = 1.0 / h
        deta = -cx * (hE * pE - hW * pW) - cy * (hN * qN - hS * qS)
        du = (deta * p - cx * (hE * pE ** 2 + g * hE ** 2 / 2 - hW * pW ** 2 - g * hW ** 2 / 2)
              - cy * (hN * pN * qN - hS * pS * qS)) * r
        dv = (deta * q - cx * (hE * pE * qE - hW * pW * qW)
              - cy * (hN * qN ** 2 + g * hN ** 2 / 2 - hS * qS ** 2 - g * hS ** 2 / 2)) * r
        pcx, pcy, qcx, qcy = p * cx, p * cy, q * cx, q * cy
        nr = -r
        # d residual / d x = -d rhs / d x, one coefficient array per column of
        # ``columns`` (signs folded into the factors: no pass to negate them)
        coefficients = (
            cx * pE, -cx * pW, cy * qN, -cy * qS, cx * hE, -cx * hW, cy * hN, -cy * hS,
            du * r,
            (pcx * pE + cx * (pE ** 2 + g * hE)) * r, (pcx * pW + cx * (pW ** 2 + g * hW)) * nr,
            (pcy * qN + cy * pN * qN) * r, (pcy * qS + cy * pS * qS) * nr,
            deta * nr,
            (pcx * hE + 2 * cx * hE * pE) * r, (pcx * hW + 2 * cx * hW * pW) * nr,
            cy * hN * qN * r, cy * hS * qS * nr,
            (pcy * hN + cy * hN * pN) * r, (pcy * hS + cy * hS * pS) * nr,
            dv * r,
            (qcx * pE + cx * pE * qE) * r, (qcx * pW + cx * pW * qW) * nr,
            (qcy * qN + cy * (qN ** 2 + g * hN)) * r, (qcy * qS + cy * (qS ** 2 + g * hS)) * nr,
            deta * nr,
            (qcx * hE + cx * hE * qE) * r, (qcx * hW + cx * hW * qW) * nr,
            cx * hE * pE * r, cx * hW * pW * nr,
            (qcy * hN + 2 * cy * hN * qN) * r, (qcy * hS + 2 * cy * hS * qS) * nr,
        )
        data = np.stack(coefficients).ravel()[source]
        return scipy.sparse.csr_matrix((data, indices, indptr), shape=shape)

    return residual, jacobian, x0


#: problem key -> the function making its ``(residual, jacobian, x0)`` by hand
HAND_CODED = {"sw": shallow_water}
