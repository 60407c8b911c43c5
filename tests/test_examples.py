"""The demo in examples/ runs, converges and passes its own numerical checks."""
import importlib.util
import pathlib

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location("example_" + name, EXAMPLES / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pn_junction():
    return _load("pn_junction")


@pytest.fixture(scope="module")
def pn_result(pn_junction):
    return pn_junction.main(n=2000, verbose=False)


def test_pn_junction_converges(pn_result):
    assert pn_result["converged"]
    assert pn_result["iterations"] < 40
    assert pn_result["residual_norms"][-1] < 1e-9 * pn_result["residual_norms"][0]


def test_pn_junction_built_in_potential(pn_result):
    expected = 2 * np.arcsinh(1e16 / 1e10 / 2)
    assert pn_result["built_in_exact"] == pytest.approx(expected, rel=1e-15)
    assert pn_result["built_in"] == pytest.approx(expected, rel=1e-6)
    assert pn_result["built_in_rel_error"] < 1e-6


def test_pn_junction_solution_is_physical(pn_result):
    psi, x = pn_result["psi"], pn_result["x"]
    assert np.all(np.diff(psi) >= 0)  # monotone from the p side to the n side
    assert np.max(np.abs(psi + psi[::-1])) < 1e-6  # odd symmetry of the symmetric junction


def test_pn_junction_jacobian_matches_finite_differences(pn_result):
    assert pn_result["fd_directions_rel_error"] < 1e-6
    assert pn_result["fd_columns_rel_error"] < 1e-6


def test_pn_junction_timings_are_reported(pn_result):
    assert pn_result["residual_time"] > 0 and pn_result["jacobian_time"] > 0
    assert pn_result["time_ratio"] == pytest.approx(
        pn_result["jacobian_time"] / pn_result["residual_time"])


def test_pn_junction_residual_is_plain_numpy_on_plain_input(pn_junction):
    problem = pn_junction.Junction(11)
    F = problem.residual(problem.neutral_guess())
    assert type(F) is np.ndarray and F.shape == (11,)
    value, J = problem.residual_and_jacobian(problem.neutral_guess())
    np.testing.assert_array_equal(value, F)
    assert J.shape == (11, 11) and J.nnz == 2 + 3 * 9  # tridiagonal, identity boundary rows
