"""SciPy's own test problems, differentiated as SciPy wrote them.

SciPy's test suites ship residuals, gradients and constraints with
hand-written derivatives. Their modules are imported at run time (their code
is SciPy's, never copied here) and every function runs unchanged through
``sparsegrad.jacobian``: the Jacobian must equal central differences, and the
hand-written derivative wherever that one is right. Two of SciPy's are not
(``pressure_network_jacobian`` drops the pressure terms; ``aps15_fp`` gives
the slope of the middle piece on the constant pieces): there, sparsegrad's
agrees with the differences.
"""
import importlib

import numpy as np
import pytest

import sparsegrad
from sparsegrad.testing import numerical_jacobian

# (SciPy's test modules use marks of SciPy's own pytest configuration)
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")


def _module(name):
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # (a SciPy installed without its tests)
        pytest.skip("SciPy's %s is not installed: %s" % (name, exc))


def _dense(J):
    return np.asarray(J.toarray() if hasattr(J, "toarray") else J)


def _check(f, x, args=(), hand=None, hand_is_right=True):
    """sparsegrad's Jacobian of ``f`` at ``x`` (both engines alike) against
    central differences, and against ``hand`` where it is right."""
    x = np.asarray(x)
    x = x.astype(complex if x.dtype.kind == "c" else float)
    J = _dense(sparsegrad.jacobian(f)(x, *args))
    eager = _dense(sparsegrad.jacobian(f, trace=False)(x, *args))
    np.testing.assert_array_equal(J, eager)
    differences = numerical_jacobian(lambda v: np.asarray(f(v, *args)), x, method="central")
    np.testing.assert_allclose(J.reshape(differences.shape), differences, rtol=1e-6,
                               atol=1e-6 * max(1.0, np.abs(differences).max()))
    if hand is not None:
        expected = _dense(hand(x, *args)).reshape(J.shape)
        if hand_is_right:
            np.testing.assert_allclose(J, expected, rtol=1e-12, atol=1e-13)
        else:
            assert not np.allclose(J, expected)
    return J


def _least_squares_cases():
    names = ["trivial", "2d_trivial", "rosenbrock", "rosenbrock_cropped", "wrong_dimensions"]
    return [pytest.param(name, id=name) for name in names]


@pytest.mark.parametrize("name", _least_squares_cases())
def test_least_squares_residuals(name):
    ls = _module("scipy.optimize.tests.test_least_squares")
    x = np.array([5.0]) if name == "trivial" else np.array([2.0, 3.0])
    fun, jac = getattr(ls, "fun_" + name), getattr(ls, "jac_" + name)
    # (jac_wrong_dimensions returns a 3-d array on purpose: SciPy tests its refusal)
    _check(fun, x, hand=None if name == "wrong_dimensions" else jac)


def test_least_squares_problem_classes():
    ls = _module("scipy.optimize.tests.test_least_squares")
    broyden = ls.BroydenTridiagonal()
    _check(broyden.fun, broyden.x0, hand=broyden.jac)
    fitting = ls.ExponentialFittingProblem(1, 0.1, 0.1)
    _check(fitting.fun, fitting.p0, hand=fitting.jac)


def test_pressure_network():
    mp = _module("scipy.optimize.tests.test_minpack")
    k = np.array([0.5, 1.0, 1.5, 2.0])
    J = _check(mp.pressure_network, np.full(4, 0.25), (4.0, k),
               hand=mp.pressure_network_jacobian, hand_is_right=False)
    np.testing.assert_array_equal(J[:3], [[-0.25, 0.5, 0.0, 0.0],
                                          [-0.25, 0.0, 0.75, 0.0],
                                          [-0.25, 0.0, 0.0, 1.0]])


def _scalar_cases():
    tu = _module("scipy.optimize._tstutils")
    cases = []
    for collection in ("aps", "complex", "original"):
        for case in tu.get_tests(collection):
            if case.get("fprime") is not None:
                cases.append(case)
    return cases


def test_scalar_root_finding_problems():
    cases = _scalar_cases()
    assert len(cases) >= 150
    for case in cases:
        f, fprime, args, x0 = case["f"], case["fprime"], case.get("args", ()), case["x0"]
        wrong = case["ID"].startswith("aps.15") and not 0 <= x0 <= 2e-3 / (1 + args[0])
        J = _check(f, x0, args, hand=fprime, hand_is_right=not wrong)
        if wrong:
            assert J.ravel().tolist() == [0.0]


def test_constrained_minimisation_problems():
    mc = _module("scipy.optimize.tests.test_minimize_constrained")
    for problem in (mc.Maratos(), mc.HyperbolicIneq(), mc.Elec(n_electrons=6)):
        x0 = np.asarray(problem.x0, dtype=float)
        _check(problem.fun, x0, hand=problem.grad)
        _check(problem.constr.fun, x0, hand=problem.constr.jac)


def test_himmelblau_gradient():
    to = _module("scipy.optimize.tests.test_optimize")
    _check(to.himmelblau, np.array([1.0, 2.0]), hand=to.himmelblau_grad)


def test_initial_value_problems():
    ivp = _module("scipy.integrate._ivp.tests.test_ivp")
    _check(lambda y: ivp.fun_linear(0.0, y), np.array([1.0, 2.0]),
           hand=lambda y: ivp.jac_linear())
    _check(lambda y: ivp.fun_rational(0.5, y), np.array([1 / 3, 2 / 9]),
           hand=lambda y: ivp.jac_rational(0.5, y))
    _check(lambda y: ivp.fun_rational(0.5, y), np.array([1 / 3, 2 / 9]),
           hand=lambda y: ivp.jac_rational_sparse(0.5, y))
