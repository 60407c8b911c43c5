"""Every SciPy method that takes a Jacobian, fed by sparsegrad.

A method that keeps a Jacobian sparse gets the default sparse matrix; a method
that needs an array gets ``format="dense"``, and refuses the default sparse
matrix with a ``TypeError`` naming that option (numpy's conversion of a sparse
matrix is a 0-d object array, which these methods reject with a message about
shapes).  ``minimize`` gets the dense gradient.  Every problem has a known
solution, and every Jacobian handed to SciPy matches central differences.
"""
import pickle
import re

import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
import scipy.sparse

import sparsegrad
from sparsegrad.testing import numerical_jacobian

NAMES_THE_OPTION = re.escape('format="dense"')


def assert_matches_differences(jac, f, x, *args):
    """``jac(x, *args)``, dense or sparse, against central differences of ``f``."""
    J = jac(x, *args)
    dense = J if isinstance(J, np.ndarray) else J.toarray()
    reference = numerical_jacobian(lambda v: f(v, *args), x, method="central")
    np.testing.assert_allclose(dense.reshape(reference.shape), reference,
                               rtol=1e-7, atol=1e-8)


def _next(x):
    """``x`` shifted up by one, 0 at the end: each row couples to its successor."""
    return np.concatenate([x[1:], [0.0]])


# ==== systems of equations: root, fsolve, leastsq, least_squares ==========================
# Row i of ``residual`` depends on x[i] and x[i + 1] only, and x ** 3 is monotone:
# solved from the last row up, X_STAR is its only real root.
X_STAR = np.linspace(1.0, 2.0, 6)
X0 = np.ones(6)


def residual(x):
    return x ** 3 + 0.5 * _next(x) - (X_STAR ** 3 + 0.5 * _next(X_STAR))


def overdetermined(x):
    """``residual`` and the differences of neighbours: 11 rows, zero at X_STAR."""
    return np.concatenate([residual(x), (x[1:] - x[:-1]) - np.diff(X_STAR)])


@pytest.mark.parametrize("method", ["hybr", "lm"])
def test_root_minpack_methods_take_the_dense_jacobian(method):
    jac = sparsegrad.jacobian(residual, format="dense")
    solution = scipy.optimize.root(residual, X0, jac=jac, method=method, tol=1e-12)
    assert solution.success, solution.message
    np.testing.assert_allclose(solution.x, X_STAR, rtol=1e-10)
    assert type(jac(X0)) is np.ndarray
    assert_matches_differences(jac, residual, X0)


@pytest.mark.parametrize("method", ["hybr", "lm"])
def test_root_minpack_methods_take_value_and_jacobian_as_jac_true(method):
    solution = scipy.optimize.root(sparsegrad.value_and_jacobian(residual, format="dense"),
                                   X0, jac=True, method=method, tol=1e-12)
    assert solution.success, solution.message
    np.testing.assert_allclose(solution.x, X_STAR, rtol=1e-10)


@pytest.mark.parametrize("method", ["hybr", "lm"])
def test_root_minpack_methods_refuse_the_sparse_jacobian_naming_the_option(method):
    with pytest.raises(TypeError, match=NAMES_THE_OPTION):
        scipy.optimize.root(residual, X0, jac=sparsegrad.jacobian(residual), method=method)
    with pytest.raises(TypeError, match=NAMES_THE_OPTION):
        scipy.optimize.root(sparsegrad.value_and_jacobian(residual), X0, jac=True,
                            method=method)


def test_fsolve_and_leastsq_take_the_dense_jacobian_and_refuse_the_sparse_one():
    jac = sparsegrad.jacobian(residual, format="dense")
    np.testing.assert_allclose(scipy.optimize.fsolve(residual, X0, fprime=jac, xtol=1e-12),
                               X_STAR, rtol=1e-10)
    x, status = scipy.optimize.leastsq(residual, X0, Dfun=jac, xtol=1e-12)
    assert status in (1, 2, 3, 4)
    np.testing.assert_allclose(x, X_STAR, rtol=1e-10)
    sparse = sparsegrad.jacobian(residual)
    with pytest.raises(TypeError, match=NAMES_THE_OPTION):
        scipy.optimize.fsolve(residual, X0, fprime=sparse)
    with pytest.raises(TypeError, match=NAMES_THE_OPTION):
        scipy.optimize.leastsq(residual, X0, Dfun=sparse)


@pytest.mark.parametrize("method", ["trf", "dogbox"])
@pytest.mark.parametrize("format", ["matrix", "array", "dense"])
def test_least_squares_trf_and_dogbox_take_either_jacobian(method, format):
    jac = sparsegrad.jacobian(overdetermined, format=format)
    handed = []

    def recorded(x):
        handed.append(jac(x))
        return handed[-1]

    solution = scipy.optimize.least_squares(overdetermined, X0, jac=recorded, method=method,
                                            xtol=1e-12, ftol=1e-12, gtol=1e-12)
    assert solution.success, solution.message
    np.testing.assert_allclose(solution.x, X_STAR, rtol=1e-8)
    # SciPy keeps what it is given: a sparse Jacobian stays sparse (LSMR subproblems)
    sparse = format != "dense"
    assert all(scipy.sparse.issparse(J) == sparse for J in handed)
    assert scipy.sparse.issparse(solution.jac) == sparse
    assert_matches_differences(jac, overdetermined, X0)


def test_least_squares_lm_takes_the_dense_jacobian():
    jac = sparsegrad.jacobian(overdetermined, format="dense")
    solution = scipy.optimize.least_squares(overdetermined, X0, jac=jac, method="lm")
    assert solution.success, solution.message
    np.testing.assert_allclose(solution.x, X_STAR, rtol=1e-10)
    assert_matches_differences(jac, overdetermined, X0)


def test_least_squares_lm_refuses_the_sparse_jacobian():
    # SciPy checks the type itself, before any conversion
    with pytest.raises(ValueError, match="dense"):
        scipy.optimize.least_squares(overdetermined, X0, jac=sparsegrad.jacobian(overdetermined),
                                     method="lm")


# ==== minimize: the gradient, and the Jacobians of constraints ============================
# exp(d) - d is smallest at d = 0 and the coupling term too: C is the minimiser, 5 the
# minimum
C = np.linspace(0.5, 1.5, 5)


def objective(x):
    d = x - C
    return np.sum(np.exp(d) - d) + 0.5 * np.sum((d[1:] - d[:-1]) ** 2)


def products(x):
    """Products of neighbours; zero at C, where the objective is smallest anyway."""
    return x[1:] * x[:-1] - C[1:] * C[:-1]


GRADIENT_METHODS = ["CG", "BFGS", "Newton-CG", "L-BFGS-B", "TNC", "SLSQP", "trust-constr"]

# each method's tolerance that puts it within 1e-6 of C (tighter ones make CG, BFGS and
# the trust-region methods stop on rounding, unsuccessful)
TOLERANCES = {"CG": 1e-8, "BFGS": 1e-8, "Newton-CG": 1e-8, "L-BFGS-B": 1e-10, "TNC": 1e-12,
              "SLSQP": 1e-10, "trust-constr": 1e-8, "trust-ncg": 1e-8, "trust-krylov": None}


def minimize(fun, x0, method, **kwargs):
    return scipy.optimize.minimize(fun, x0, method=method, tol=TOLERANCES[method], **kwargs)


def _assert_minimum(solution):
    assert solution.success, solution.message
    np.testing.assert_allclose(solution.x, C, atol=1e-6)
    np.testing.assert_allclose(solution.fun, 5.0, rtol=1e-9)


@pytest.mark.parametrize("method", GRADIENT_METHODS)
def test_minimize_takes_the_gradient(method):
    jac = sparsegrad.gradient(objective)
    _assert_minimum(minimize(objective, np.ones(5), jac=jac, method=method))
    assert type(jac(np.ones(5))) is np.ndarray
    assert_matches_differences(jac, objective, np.ones(5))


@pytest.mark.parametrize("method", GRADIENT_METHODS)
def test_minimize_takes_value_and_gradient_as_jac_true(method):
    _assert_minimum(minimize(sparsegrad.value_and_gradient(objective), np.ones(5),
                             jac=True, method=method))


@pytest.mark.parametrize("method", ["trust-ncg", "trust-krylov"])
def test_trust_region_methods_take_the_gradient_with_a_differenced_hessian(method):
    # SciPy differences the exact gradient for its Hessian-vector products
    _assert_minimum(minimize(objective, np.ones(5), jac=sparsegrad.gradient(objective),
                             hess="2-point", method=method))


def test_the_hessian_as_jacobian_of_the_gradient_is_refused():
    # derivatives do not nest: dogleg and trust-exact, which need a Hessian callable,
    # get none from sparsegrad
    with pytest.raises(TypeError, match="nested"):
        sparsegrad.jacobian(sparsegrad.gradient(objective))(np.ones(5))


def test_slsqp_constraint_dict_takes_the_dense_jacobian_and_refuses_the_sparse_one():
    jac = sparsegrad.jacobian(products, format="dense")
    constraint = {"type": "eq", "fun": products, "jac": jac}
    _assert_minimum(minimize(objective, np.ones(5), method="SLSQP",
                             jac=sparsegrad.gradient(objective), constraints=[constraint]))
    assert_matches_differences(jac, products, np.ones(5))
    sparse = dict(constraint, jac=sparsegrad.jacobian(products))
    with pytest.raises(TypeError, match=NAMES_THE_OPTION):
        minimize(objective, np.ones(5), method="SLSQP", constraints=[sparse])


@pytest.mark.parametrize("method", ["SLSQP", "trust-constr"])
def test_nonlinear_constraint_takes_the_sparse_jacobian(method):
    # trust-constr keeps it sparse; SLSQP converts a NonlinearConstraint's itself
    jac = sparsegrad.jacobian(products)
    constraint = scipy.optimize.NonlinearConstraint(products, 0.0, 0.0, jac=jac)
    _assert_minimum(minimize(objective, np.ones(5), method=method,
                             jac=sparsegrad.gradient(objective), constraints=[constraint]))
    assert_matches_differences(jac, products, np.ones(5))


# ==== solve_ivp ===========================================================================
# y = manufactured(t) solves the system, and deviations from it decay at a rate of
# about K: stiff, so that the implicit methods factorise their Jacobians
K = 1000.0
PHASES = np.linspace(0.0, 1.0, 8)


def manufactured(t):
    return np.cos(t + PHASES)


def rhs(t, y, k):
    g = manufactured(t)
    return (-np.sin(t + PHASES) - k * (y - g) - (y ** 3 - g ** 3)
            + 0.5 * (_next(y) - _next(g)))


def _solve(method, jac):
    handed = []

    def recorded(t, y, k):
        handed.append(jac(t, y, k))
        return handed[-1]

    solution = scipy.integrate.solve_ivp(rhs, (0.0, 1.0), manufactured(0.0) + 0.1,
                                         method=method, jac=recorded, args=(K,),
                                         rtol=1e-8, atol=1e-10)
    assert solution.success, solution.message
    assert solution.njev >= 1 and handed
    np.testing.assert_allclose(solution.y[:, -1], manufactured(1.0), rtol=1e-6)
    return handed


@pytest.mark.parametrize("method", ["Radau", "BDF"])
@pytest.mark.parametrize("format", ["matrix", "dense"])
def test_solve_ivp_radau_and_bdf_take_either_jacobian(method, format):
    jac = sparsegrad.jacobian(rhs, argnums=1, format=format)
    handed = _solve(method, jac)
    assert all(scipy.sparse.issparse(J) == (format != "dense") for J in handed)
    y = manufactured(0.3) + 0.05
    assert_matches_differences(lambda v, k: jac(0.3, v, k), lambda v, k: rhs(0.3, v, k), y, K)


def test_solve_ivp_lsoda_takes_the_dense_jacobian_and_refuses_the_sparse_one():
    jac = sparsegrad.jacobian(rhs, argnums=1, format="dense")
    assert all(type(J) is np.ndarray for J in _solve("LSODA", jac))
    y = manufactured(0.3) + 0.05
    assert_matches_differences(lambda v, k: jac(0.3, v, k), lambda v, k: rhs(0.3, v, k), y, K)
    with pytest.raises(TypeError, match=NAMES_THE_OPTION):
        _solve("LSODA", sparsegrad.jacobian(rhs, argnums=1))


# ==== the returned sparse matrices ========================================================
@pytest.mark.parametrize("format, kind", [("matrix", scipy.sparse.csr_matrix),
                                          ("array", scipy.sparse.csr_array)])
def test_sparse_jacobians_refuse_conversion_by_numpy(format, kind):
    J = sparsegrad.jacobian(residual, format=format)(X0)
    assert isinstance(J, kind) and type(J).__name__ == kind.__name__
    for convert in (np.asarray, np.atleast_1d, np.atleast_2d,
                    lambda J: np.array(J, dtype=float)):
        with pytest.raises(TypeError, match=NAMES_THE_OPTION):
            convert(J)
    value, J = sparsegrad.value_and_jacobian(residual, format=format)(X0)
    with pytest.raises(TypeError, match=NAMES_THE_OPTION):
        np.asarray(J)
    Jx, Jy = sparsegrad.jacobian(lambda x, y: x * y, argnums=(0, 1), format=format)(X0, X0)
    with pytest.raises(TypeError, match=NAMES_THE_OPTION):
        np.asarray(Jy)


@pytest.mark.parametrize("format", ["matrix", "array"])
def test_sparse_jacobians_assemble_into_blocks_and_pickle(format):
    J = sparsegrad.jacobian(residual, format=format)(X0)
    dense = J.toarray()
    # bmat, hstack and vstack ask numpy for an object array of the blocks
    wrapped = np.asarray(J, dtype=object)
    assert wrapped.shape == () and wrapped[()] is J
    np.testing.assert_array_equal(scipy.sparse.bmat([[J, None], [None, J]]).toarray(),
                                  np.block([[dense, 0 * dense], [0 * dense, dense]]))
    np.testing.assert_array_equal(scipy.sparse.hstack([J, J]).toarray(), np.hstack([dense] * 2))
    np.testing.assert_array_equal(scipy.sparse.vstack([J, J]).toarray(), np.vstack([dense] * 2))
    np.testing.assert_allclose((J @ J).toarray(), dense @ dense, rtol=1e-15)
    np.testing.assert_allclose(J @ np.ones(6), dense @ np.ones(6), rtol=1e-15)
    copy = pickle.loads(pickle.dumps(J))
    assert type(copy) is type(J)
    np.testing.assert_array_equal(copy.toarray(), dense)
    with pytest.raises(TypeError, match=NAMES_THE_OPTION):
        np.asarray(copy)
