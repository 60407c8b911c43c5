"""Gradients of scalar functions: ``sparsegrad.gradient`` and ``value_and_gradient``."""
import numpy as np
import pytest
import scipy.optimize

import sparsegrad
from sparsegrad.testing import numerical_jacobian


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def membrane_energy(u):
    """A 2-d energy: gradients between neighbours and a nonlinear term."""
    return 0.5 * np.sum(np.diff(u, axis=0) ** 2) + 0.5 * np.sum(np.diff(u, axis=1) ** 2) \
        + np.sum(np.cosh(u)) - u[1, 2] * u[0, 0]


CASES = {
    "rosenbrock": (rosenbrock, np.array([1.3, 0.7, 0.8, 1.9, 1.2])),
    "2-d argument": (membrane_energy, np.linspace(-1.0, 1.0, 12).reshape(3, 4)),
    "0-d argument": (lambda t: np.exp(t) * t, np.array(0.7)),
    "scalar of a product": (lambda x: x @ np.arange(1.0, 5.0) * np.prod(x), np.array(
        [0.5, -1.5, 2.0, 1.25])),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("trace", [False, True])
def test_gradient_is_the_derivative(name, trace):
    f, x = CASES[name]
    value, gradient = sparsegrad.value_and_gradient(f, trace=trace)(x)
    assert value == f(x)
    assert gradient.shape == x.shape and type(gradient) is np.ndarray
    expected = numerical_jacobian(f, x, method="complex").reshape(x.shape)
    np.testing.assert_allclose(gradient, expected, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(sparsegrad.gradient(f, trace=trace)(x), gradient)


def test_several_arguments_and_constants():
    grad_a, grad_b = sparsegrad.gradient(lambda a, b: a * np.sum(b ** 2),
                                         argnums=(0, 1))(2.0, np.array([1.0, 3.0]))
    assert grad_a.shape == () and float(grad_a) == 10.0
    np.testing.assert_array_equal(grad_b, [4.0, 12.0])
    np.testing.assert_array_equal(sparsegrad.gradient(lambda x: 2.0)(np.ones(3)), np.zeros(3))


def test_more_than_one_number_is_refused():
    with pytest.raises(ValueError, match=r"sparsegrad.gradient: f must return one number, "
                                         r"got an array of shape \(3,\)"):
        sparsegrad.gradient(np.sin)(np.ones(3))
    with pytest.raises(ValueError, match="sparsegrad.value_and_gradient"):
        sparsegrad.value_and_gradient(np.sin)(np.ones(3))


def test_scipy_minimize_takes_it():
    x0 = np.array([1.3, 0.7, 0.8, 1.9, 1.2])
    by_jac = scipy.optimize.minimize(rosenbrock, x0, jac=sparsegrad.gradient(rosenbrock),
                                     method="BFGS")
    assert by_jac.success
    np.testing.assert_allclose(by_jac.x, 1.0, rtol=1e-5)
    together = scipy.optimize.minimize(sparsegrad.value_and_gradient(rosenbrock), x0,
                                       jac=True, method="L-BFGS-B")
    assert together.success
    np.testing.assert_allclose(together.x, 1.0, rtol=1e-4)
    np.testing.assert_allclose(sparsegrad.gradient(rosenbrock)(x0),
                               scipy.optimize.rosen_der(x0), rtol=1e-14)
