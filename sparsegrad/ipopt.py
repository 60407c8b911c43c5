"""Ipopt through cyipopt, with exact sparse derivatives from sparsegrad.

Ipopt solves

    min f(x)   subject to   cl <= c(x) <= cu,   lb <= x <= ub

and asks for the gradient of ``f``, the Jacobian of ``c`` and the Hessian of
the Lagrangian ``obj_factor * f(x) + lagrange @ c(x)``, the two matrices as
values in an order fixed once by their structures.  sparsegrad gives all
three exactly from the numpy code of ``f`` and ``c``; their patterns depend on
the program only (stored zeros are kept), so the structures computed at ``x0``
hold at every later point, and every later matrix is checked against them.

:func:`ipopt_problem` builds the ``cyipopt.Problem``; :class:`IpoptCallbacks`
is the object holding the callbacks it is built on, which needs no cyipopt:

>>> import numpy as np
>>> from sparsegrad.ipopt import IpoptCallbacks
>>> callbacks = IpoptCallbacks(lambda x: np.sum(x[1:] * x[:-1] ** 2), np.ones(3),
...                            constraints=lambda x: x[1:] - x[:-1])
>>> callbacks.hessianstructure()                  # the lower triangle, row by row
(array([0, 1, 1, 2]), array([0, 0, 1, 1]))
>>> callbacks.hessian(np.array([1.0, 2.0, 3.0]), np.zeros(2), 1.0)
array([4., 2., 6., 4.])
>>> callbacks.jacobianstructure()
(array([0, 0, 1, 1]), array([0, 1, 1, 2]))
"""
import numpy as np
import scipy.sparse

from . import _api
from . import _hessian

__all__ = ["ipopt_problem", "IpoptCallbacks"]


def _import_cyipopt():
    try:
        import cyipopt
    except ImportError as error:
        raise ImportError(
            "sparsegrad.ipopt needs cyipopt and the Ipopt library it is built on: install "
            "Ipopt (Debian and Ubuntu: apt-get install coinor-libipopt-dev; conda: conda "
            "install -c conda-forge cyipopt), then `pip install cyipopt` (or `pip install "
            "sparsegrad[ipopt]`)") from error
    return cyipopt


class _Structure:
    """The entries of a sparse matrix, in the order of its pattern at the first
    call (its lower triangle with ``lower``): ``rows``, ``cols`` and
    ``values(matrix)``."""

    def __init__(self, matrix, lower, what):
        matrix = scipy.sparse.csr_matrix(matrix, copy=True)
        matrix.sort_indices()
        self.what = what
        self.shape = matrix.shape
        self.indptr = np.array(matrix.indptr, dtype=np.int64)
        self.indices = np.array(matrix.indices, dtype=np.int64)
        rows = np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))
        self.keep = rows >= self.indices if lower else np.ones(rows.size, dtype=bool)
        self.rows, self.cols = rows[self.keep], self.indices[self.keep]
        # row-major keys of the whole pattern, sorted: where a later matrix's
        # entries land when its pattern is another (a part of this one)
        self.keys = rows * self.shape[1] + self.indices

    def values(self, matrix):
        if (matrix.shape == self.shape and np.array_equal(matrix.indptr, self.indptr)
                and np.array_equal(matrix.indices, self.indices)):
            return np.array(matrix.data[self.keep], dtype=np.float64)
        coo = scipy.sparse.coo_matrix(matrix)
        keys = coo.row.astype(np.int64) * self.shape[1] + coo.col
        places = np.minimum(np.searchsorted(self.keys, keys), max(self.keys.size - 1, 0))
        outside = (self.keys[places] != keys) if self.keys.size else np.ones(keys.size, bool)
        if matrix.shape != self.shape or np.any(outside):
            first = np.flatnonzero(outside)[:1]
            where = (" (entry (%d, %d), for one)" % (coo.row[first[0]], coo.col[first[0]])
                     if first.size else "")
            raise ValueError(
                "sparsegrad.ipopt: the %s at this point has entries outside the structure "
                "given to Ipopt from the first point%s. Its pattern follows the program, so "
                "the program changed: a Python branch on the values, or arrays read by "
                "indices that changed. Write the branch with np.where, so that one program "
                "covers every point." % (self.what, where))
        data = np.zeros(self.keys.size)
        np.add.at(data, places, coo.data)
        return data[self.keep]


class IpoptCallbacks:
    """The callbacks of an Ipopt problem, with exact sparse derivatives.

    An object with the methods ``cyipopt.Problem`` calls (its
    ``problem_obj``).  The structures of the constraints' Jacobian and of the
    Lagrangian's Hessian are computed at ``x0`` by evaluating both there, so
    errors in ``f`` or ``constraints`` show at construction.

    Parameters
    ----------
    f : callable
        The objective ``f(x, *args)``: numpy code returning one real number,
        differentiable by :func:`sparsegrad.value_grad_and_hessian`.  ``x``
        has ``x0``'s shape; Ipopt's vectors are its C-order ravel.
    x0 : array_like
        The starting point (float64), for the shapes and the structures.
    constraints : callable, optional
        ``c(x, *args)``, numpy code returning an array of the ``m``
        constraint values (raveled).  None: no constraints (``m = 0``).
    args : tuple, optional
        Further arguments of ``f`` and ``constraints``, passed unchanged.
    trace : bool, optional
        Record the functions' operations (the default), as in
        :func:`sparsegrad.jacobian`.

    Attributes
    ----------
    n, m : int
        The numbers of variables and of constraints.
    intermediate : callable
        Set only when given to :func:`ipopt_problem`: Ipopt's per-iteration
        callback.

    Raises
    ------
    ValueError
        From ``jacobian`` or ``hessian`` when a matrix has entries outside
        the structure given to Ipopt (the program changed with the point).
    """

    def __init__(self, f, x0, constraints=None, *, args=(), trace=True):
        x0 = np.array(x0, dtype=np.float64)
        self.shape, self.n = x0.shape, x0.size
        self._f, self._c, self._args = f, constraints, tuple(args)
        self._gradient = _api.gradient(f, trace=trace)
        self.m = 0 if constraints is None else np.size(constraints(x0, *self._args))
        if constraints is not None:
            self._jacobian = _api.jacobian(self._raveled, trace=trace)
            self._jacobian_structure = _Structure(
                self._jacobian(x0, *self._args), False, "Jacobian of the constraints")
        self._hessian = _hessian.hessian(self._lagrangian, trace=trace)
        self._hessian_structure = _Structure(
            self._hessian(x0, np.ones(self.m), 1.0, *self._args), True,
            "Hessian of the Lagrangian")

    def _point(self, x):
        return np.reshape(np.asarray(x, dtype=np.float64), self.shape)

    def _raveled(self, x, *args):
        return np.reshape(self._c(x, *args), -1)

    def _lagrangian(self, x, lagrange, obj_factor, *args):
        value = obj_factor * self._f(x, *args)
        if self._c is not None:
            value = value + np.sum(lagrange * self._raveled(x, *args))
        return value

    def objective(self, x):
        """``f(x)``, a float."""
        return float(np.reshape(self._f(self._point(x), *self._args), ()))

    def gradient(self, x):
        """The gradient of ``f`` at ``x``, shape ``(n,)``."""
        return np.reshape(self._gradient(self._point(x), *self._args), -1)

    def constraints(self, x):
        """``c(x)``, shape ``(m,)``."""
        if self._c is None:
            return np.zeros(0)
        return np.array(self._raveled(self._point(x), *self._args), dtype=np.float64)

    def jacobianstructure(self):
        """``(rows, cols)`` of the constraints' Jacobian, row by row."""
        if self._c is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return self._jacobian_structure.rows.copy(), self._jacobian_structure.cols.copy()

    def jacobian(self, x):
        """The values of the constraints' Jacobian, in ``jacobianstructure``'s order."""
        if self._c is None:
            return np.zeros(0)
        return self._jacobian_structure.values(self._jacobian(self._point(x), *self._args))

    def hessianstructure(self):
        """``(rows, cols)`` of the lower triangle (``rows >= cols``) of the
        Hessian of the Lagrangian, row by row."""
        return self._hessian_structure.rows.copy(), self._hessian_structure.cols.copy()

    def hessian(self, x, lagrange, obj_factor):
        """The values of the lower triangle of the Hessian of
        ``obj_factor * f(x) + lagrange @ c(x)``, in ``hessianstructure``'s order."""
        lagrange = np.array(lagrange, dtype=np.float64).reshape(self.m)
        H = self._hessian(self._point(x), lagrange, float(obj_factor), *self._args)
        return self._hessian_structure.values(H)


def _bounds(value, size, default, name):
    if value is None:
        return np.full(size, default)
    bounds = np.array(value, dtype=np.float64)
    bounds = np.full(size, float(bounds)) if bounds.ndim == 0 else bounds.reshape(-1)
    if bounds.shape != (size,) or np.any(np.isnan(bounds)):
        raise ValueError("sparsegrad.ipopt: %s must be a number or %d numbers, none nan, "
                         "not %r" % (name, size, value))
    return bounds


def ipopt_problem(f, x0, constraints=None, *, lb=None, ub=None, cl=None, cu=None, args=(),
                  options=None, intermediate=None, trace=True):
    """A ``cyipopt.Problem`` for ``f`` and ``constraints``, with exact sparse
    derivatives.

    The problem is ``min f(x)`` subject to ``cl <= c(x) <= cu`` and
    ``lb <= x <= ub``.  Ipopt gets the gradient of ``f``, the Jacobian of
    ``c`` and the lower triangle of the Hessian of its Lagrangian
    ``obj_factor * f(x) + lagrange @ c(x)``, all exact, the two matrices
    sparse in structures computed once at ``x0`` (see
    :class:`IpoptCallbacks`).

    Parameters
    ----------
    f, x0, constraints, args, trace
        As in :class:`IpoptCallbacks`.
    lb, ub : float or array_like, optional
        Bounds on ``x`` (raveled), a number for all; None: unbounded
        (``-inf``, ``inf``).
    cl, cu : float or array_like, optional
        Bounds on ``c(x)``; equal entries make equality constraints.  Both
        None: equality constraints ``c(x) = 0``; one None: that side
        unbounded.
    options : dict, optional
        Ipopt options, ``{name: value}``, given to ``add_option`` (e.g.
        ``{"tol": 1e-10, "print_level": 0}``).
    intermediate : callable, optional
        Ipopt's per-iteration callback, ``intermediate(alg_mod, iter_count,
        obj_value, inf_pr, inf_du, mu, d_norm, regularization_size,
        alpha_du, alpha_pr, ls_trials)``; returning False stops Ipopt.

    Returns
    -------
    cyipopt.Problem
        Solve with ``x, info = problem.solve(x0)``: ``x`` is raveled,
        ``info`` holds ``"status"`` (0: solved), ``"obj_val"``, ``"g"``,
        ``"mult_g"``, ``"mult_x_L"``, ``"mult_x_U"``.

    Raises
    ------
    ImportError
        When cyipopt (or the Ipopt library) is not installed.
    ValueError
        For bounds of the wrong size or holding nan.

    Examples
    --------
    The standard Ipopt example (HS071)::

        def f(x):
            return x[0] * x[3] * np.sum(x[:3]) + x[2]

        def c(x):
            return np.stack([x[0] * x[1] * x[2] * x[3], np.sum(x ** 2)])

        problem = ipopt_problem(f, [1.0, 5.0, 5.0, 1.0], c, lb=1.0, ub=5.0,
                                cl=[25.0, 40.0], cu=[np.inf, 40.0],
                                options={"print_level": 0})
        x, info = problem.solve(np.array([1.0, 5.0, 5.0, 1.0]))
        # x = [1.0, 4.743, 3.8211, 1.37941]
    """
    cyipopt = _import_cyipopt()
    callbacks = IpoptCallbacks(f, x0, constraints, args=args, trace=trace)
    n, m = callbacks.n, callbacks.m
    if cl is None and cu is None:
        cl = cu = 0.0
    bounds = {"lb": _bounds(lb, n, -np.inf, "lb"), "ub": _bounds(ub, n, np.inf, "ub"),
              "cl": _bounds(cl, m, -np.inf, "cl"), "cu": _bounds(cu, m, np.inf, "cu")}
    if intermediate is not None:
        callbacks.intermediate = intermediate
    problem = cyipopt.Problem(n=n, m=m, problem_obj=callbacks, **bounds)
    for name, value in (options or {}).items():
        problem.add_option(name, value)
    return problem
