"""The demo in examples/ runs, converges and passes its own numerical checks."""
import importlib.util
import pathlib
import sys

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


# ==== solver examples (small sizes; the scripts run the full sizes) ====================
@pytest.fixture(scope="module")
def bias_result():
    return _load("pn_junction_bias").main(n=200, verbose=False, max_bias=6.0, bias_step=1.0)


def test_pn_junction_bias_converges_at_every_bias(bias_result):
    assert bias_result["converged"]
    np.testing.assert_array_equal(bias_result["biases"], np.arange(7.0))
    assert max(bias_result["iterations"]) <= 10


def test_pn_junction_bias_current_is_continuous(bias_result):
    currents, variations = bias_result["currents"], bias_result["current_variations"]
    # adding the continuity equations: the total current is the same on every edge
    assert np.all(variations[1:] <= 1e-6 * np.abs(currents[1:]))
    # no current without bias (the Scharfetter-Gummel flux of equilibrium is zero)
    assert abs(currents[0]) <= 1e-10 * currents[-1]
    assert np.all(np.diff(currents) > 0) and currents[1] > 0


def test_pn_junction_bias_is_a_diode(bias_result):
    assert 0.95 <= bias_result["ideality"] <= 2.0
    psi, n, p = bias_result["solution"]
    assert np.all(n > 0) and np.all(p > 0)
    assert bias_result["fd_columns_rel_error"] < 1e-6


def test_shallow_water_conserves_mass_and_momentum():
    result = _load("shallow_water").main(n=100, steps=8, verbose=False)
    assert result["converged"] and max(result["iterations"]) <= 6
    assert result["mass_rel_error"] < 1e-13
    assert result["momentum_rel_error"] < 1e-13
    assert np.all(np.diff(result["energies"]) < 0)  # backward Euler dissipates
    assert result["min_depth"] > 0.9
    assert result["fd_columns_rel_error"] < 1e-6


def test_bratu_routes_find_the_manufactured_solution():
    result = _load("bratu").main(n=12, verbose=False, dense_n=6)
    assert result["least_squares_jac_type"] in ("csr_matrix", "csr_array")
    assert result["least_squares, sparsegrad jac"]["error"] < 1e-10
    assert result["least_squares, jac_sparsity"]["error"] < 1e-8
    assert result["krylov_success"]
    assert result["root krylov, ILU of the exact J"]["error"] < 1e-8
    assert result["hybr_dense"]["success"] and result["hybr_dense"]["error"] < 1e-10
    assert result["pattern_nnz"] == 5 * 144 - 4 * 12  # 5-point stencil


def test_brusselator_routes_agree():
    result = _load("brusselator").main(n=40, t_end=4.0, verbose=False)
    assert all(run["success"] for run in result["runs"].values())
    assert result["jacobian_type"] == "csr_matrix"
    assert result["jacobian_nnz"] == 8 * 40 - 4  # 4 per row, 2 ends
    for name in ("BDF, sparsegrad jac", "Radau, sparsegrad jac", "BDF, jac_sparsity"):
        assert result["differences"][name] < 1e-4, name
    assert result["runs"]["BDF, sparsegrad jac"]["njev"] >= 1
    assert result["fd_error"] < 1e-12
    assert result["min_value"] > 0
    # the uniform state is steady, and its exact linearisation has the modes' spectrum,
    # with a growing mode (B = 3 > 1 + A^2 = 2)
    assert result["steady_residual"] < 1e-14
    assert result["spectrum_error"] < 1e-10
    assert result["growth_rate"] > 0


def test_heat_sensitivity_matches_finite_differences():
    result = _load("heat_sensitivity").main(n=10, verbose=False)
    # the assembled A(T) @ T - q has the hand-expanded stencil's Jacobian, nothing denser
    assert result["stencil_jacobian_rel_error"] < 1e-13
    assert result["jacobian_nnz"] == (5 * 100 - 4 * 10,) * 2
    assert result["linear_fd_rel_error"] < 1e-7
    assert result["newton_converged"] and result["newton_iterations"] <= 8
    assert result["newton_fd_rel_error"] < 1e-7
    # more conductive material cools the plate everywhere
    assert np.all(result["mean_temperature_sensitivity"] < 0)


def test_optimal_control_matches_the_reduced_solution():
    pytest.importorskip("cyipopt")
    result = _load("optimal_control").main(n=10, verbose=False)
    assert result["status"] == 0 and result["iterations"] <= 3  # a quadratic problem
    assert result["constraint_rel_residual"] < 1e-12
    assert result["kkt_rel_residual"] < 1e-10
    assert result["control_rel_error"] < 1e-10


def test_optimal_control_semilinear_with_control_bounds():
    pytest.importorskip("cyipopt")
    result = _load("optimal_control").main(n=8, kappa=10.0, umax=20.0, verbose=False)
    assert result["status"] == 0
    assert 0 < result["active_bounds"] < 64
    assert np.max(np.abs(result["u"])) <= 20.0 * (1 + 1e-8)
    assert result["constraint_rel_residual"] < 1e-8
    assert result["kkt_rel_residual"] < 1e-9


def test_optimal_control_without_cyipopt_says_so(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cyipopt", None)
    result = _load("optimal_control").main(n=4)
    assert "skipped" in result
    assert "pip install cyipopt" in capsys.readouterr().out


def test_finite_element_energy_newton_finds_the_manufactured_minimiser():
    result = _load("finite_element_energy").main(n=8, verbose=False)
    assert result["stiffness_rel_error"] < 1e-13
    # the 7-point stencil of P1 on 7 x 7 interior nodes: the diagonal, the
    # pairs of neighbours along x, along y and along the triangles' diagonal
    assert result["hessian_nnz"] == 49 + 2 * (42 + 42 + 36)
    energies = result["energies"]
    assert np.all(np.diff(energies) <= 1e-13 * abs(energies[-1]))
    assert result["iterations"] <= 12
    assert result["gradient_norms"][-1] <= 1e-10 * result["gradient_norms"][0]
    assert result["error"] < 1e-11
    assert result["gradient_fd_rel_error"] < 1e-6
    assert result["hvp_fd_rel_error"] < 1e-6


@pytest.mark.parametrize("solver", ["amg", "superlu"])
def test_minimal_surface_matches_scherks_surface(solver):
    if solver == "amg":
        pytest.importorskip("pyamg")
    result = _load("minimal_surface").main(n=40, solver=solver, verbose=False)
    assert result["passed"], result["checks"]
    assert result["iterations"] <= 8
    assert result["euler_lagrange"] <= 1e-9
    assert np.all(np.diff(result["areas"]) <= 1e-14)
    # the discretisation error at the nodes and of the area falls as h^2
    assert 1.8 <= result["order"] <= 2.2 and 1.8 <= result["area_order"] <= 2.2
    assert result["error"] < 1e-4
