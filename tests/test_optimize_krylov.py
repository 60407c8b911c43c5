"""newton with Krylov solvers: preconditioners, their reuse, the forcing term, and the
progress line."""
import re
import sys

import numpy as np
import pytest
import scipy.sparse

from sparsegrad import optimize
from sparsegrad.optimize import newton

needs_pyamg = pytest.mark.skipif(not optimize._amg_available(),
                                 reason="pyamg is not installed")


def bratu_2d(u_flat, n, lam=3.0):
    """-Laplace(u) = lam exp(u) on the unit square, u = 0 on the boundary, n x n nodes."""
    h = 1.0 / (n + 1)
    u = u_flat.reshape(n, n)
    padded = np.pad(u, 1)
    laplace = (padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2]
               + padded[1:-1, 2:] - 4 * u) / h ** 2
    return (-laplace - lam * np.exp(u)).ravel()


def bratu_1d(u, lam=3.0):
    h = 1.0 / (u.size + 1)
    padded = np.concatenate([[0.0], u, [0.0]])
    return -(padded[:-2] - 2 * padded[1:-1] + padded[2:]) / (h * h) - lam * np.exp(u)


N = 40


@pytest.fixture(scope="module")
def direct():
    result = newton(bratu_2d, np.zeros(N * N), args=(N,))
    assert result.success
    return result


# (Newton iterations, Krylov iterations in all) at most, with room above what they take
@pytest.mark.parametrize("solver, preconditioner, most", [
    ("gmres", "ilu", (5, 40)),
    ("bicgstab", "ilu", (5, 20)),
    pytest.param("gmres", "amg", (5, 40), marks=needs_pyamg),
    pytest.param("bicgstab", "amg", (5, 20), marks=needs_pyamg),
    ("gmres", None, (6, 600)),
    ("bicgstab", None, (6, 400)),
])
def test_krylov_solves_2d_bratu_as_the_direct_solver(direct, solver, preconditioner, most):
    result = newton(bratu_2d, np.zeros(N * N), args=(N,), linear_solver=solver,
                    linear_options={"preconditioner": preconditioner})
    assert result.success, result.message
    assert result.nit <= most[0] and result.linear_iterations <= most[1]
    assert result.preconditioner_setups == (preconditioner is not None)
    assert np.max(np.abs(result.fun)) <= 1e-10
    np.testing.assert_allclose(result.x, direct.x, rtol=0, atol=1e-10)


@pytest.mark.parametrize("solver", ["gmres", "bicgstab"])
def test_preconditioner_is_reused_unless_asked_not_to(solver):
    kept = newton(bratu_2d, np.zeros(N * N), args=(N,), linear_solver=solver)
    rebuilt = newton(bratu_2d, np.zeros(N * N), args=(N,), linear_solver=solver,
                     linear_options={"reuse": False})
    assert kept.success and rebuilt.success
    assert kept.preconditioner_setups == 1 < kept.nit
    assert rebuilt.preconditioner_setups == rebuilt.nit
    np.testing.assert_allclose(kept.x, rebuilt.x, rtol=0, atol=1e-10)


def test_a_preconditioner_that_no_longer_serves_is_rebuilt():
    # from a far start the Jacobian changes much: solves with the first ILU (of a
    # dropped, poor factor) grow long, and the preconditioner is built again
    result = newton(bratu_2d, np.full(N * N, 2.0), args=(N,), linear_solver="gmres",
                    linear_options={"drop_tol": 0.05, "fill_factor": 1})
    assert result.success, result.message
    assert 1 < result.preconditioner_setups <= result.nit


def test_a_solve_that_fails_with_a_kept_preconditioner_is_repeated_with_a_new_one():
    n = 100
    line = scipy.sparse.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    other = line + scipy.sparse.diags(np.linspace(1.0, 1e3, n), format="csr")
    b = np.ones(n)
    solve = optimize._KrylovSolve("gmres", {"rtol": 1e-10, "restart": 5, "maxiter": 1})
    np.testing.assert_allclose(line @ solve(line, b), b, rtol=1e-8)
    assert solve.setups == 1
    # the ILU of a tridiagonal matrix is exact: five iterations preconditioned by the
    # other matrix's do not reach 1e-10, one with its own does
    np.testing.assert_allclose(other @ solve(other, b), b, rtol=1e-8)
    assert solve.setups == 2 and solve.solves == 2 and solve.last_iterations > 5


def test_forcing_term_saves_linear_iterations():
    adaptive = newton(bratu_2d, np.zeros(N * N), args=(N,), linear_solver="gmres")
    fixed = newton(bratu_2d, np.zeros(N * N), args=(N,), linear_solver="gmres",
                   linear_options={"rtol": 1e-10})
    assert adaptive.success and fixed.success
    assert adaptive.linear_iterations < fixed.linear_iterations
    assert adaptive.nit <= fixed.nit + 1
    np.testing.assert_allclose(adaptive.x, fixed.x, rtol=0, atol=1e-10)


def test_forcing_term():
    eta0 = optimize._forcing_term(None, 10.0, None, 0.0)
    assert eta0 == optimize._EW_ETA_0
    # the residual fell tenfold: eta = 0.9 * 0.1^2, or the safeguard 0.9 * eta0^2 if
    # that is above 0.1 (it is not)
    assert optimize._forcing_term(0.1, 1.0, 10.0, 0.0) == pytest.approx(0.009)
    # after a loose step the safeguard keeps the next one loose
    assert optimize._forcing_term(0.9, 1e-3, 10.0, 0.0) == pytest.approx(0.9 * 0.81)
    # never above the maximum, never below what reaches tol
    assert optimize._forcing_term(0.5, 10.0, 1.0, 0.0) == optimize._EW_ETA_MAX
    assert optimize._forcing_term(0.1, 1e-6, 1.0, 1e-8) == pytest.approx(0.005)
    assert optimize._forcing_term(0.1, 1e-9, 1.0, 0.0) == optimize._EW_ETA_MIN


def test_ilu_copes_with_rows_of_very_different_sizes():
    # as in drift-diffusion: without scaling the rows, the dropped factor of this
    # Jacobian had a zero pivot ("Factor is exactly singular")
    scales = 10.0 ** np.random.default_rng(0).uniform(-6, 9, 200)
    expected = newton(bratu_1d, np.zeros(200)).x
    for solver in ("gmres", "bicgstab"):
        result = newton(lambda u: scales * bratu_1d(u), np.zeros(200), tol=0.0,
                        rtol=1e-12, linear_solver=solver)
        assert result.success, result.message
        np.testing.assert_allclose(result.x, expected, rtol=0, atol=1e-8)


@pytest.mark.parametrize("ordering", optimize._ORDERINGS)
def test_every_ilu_ordering_is_taken(ordering):
    result = newton(bratu_2d, np.zeros(100), args=(10,), linear_solver="gmres",
                    linear_options={"permc_spec": ordering})
    assert result.success, result.message


def test_ilu_ordering_follows_the_pattern():
    J = scipy.sparse.random(50, 50, density=0.1, random_state=2, format="csr") \
        + scipy.sparse.eye(50) * 10
    assert not optimize._symmetric_pattern(J.tocsr())
    assert optimize._symmetric_pattern((J + J.T).tocsr())
    assert "COLAMD" in optimize._ilu(J, {})[1]
    assert "MMD_AT_PLUS_A" in optimize._ilu(J + J.T, {})[1]


@pytest.mark.parametrize("options, match", [
    ({"preconditioner": "jacobi"}, r"'amg', 'ilu' or None, not 'jacobi'"),
    ({"preconditioner": "ILU"}, r"'amg', 'ilu' or None, not 'ILU'"),
    ({"rtol": 0.0}, r"linear_options\['rtol'\] must be a number between 0 and 1"),
    ({"rtol": 1.0}, r"rtol'\] must be a number between 0 and 1"),
    ({"rtol": np.nan}, r"rtol'\] must be"),
    ({"rtol": None}, r"leave it out for the adaptive Eisenstat-Walker"),
    ({"rtol": True}, r"rtol'\] must be"),
    ({"maxiter": 0}, r"maxiter'\] must be a positive int or None, not 0"),
    ({"maxiter": 2.5}, r"maxiter'\] must be a positive int"),
    ({"restart": 0}, r"restart'\] must be a positive int, not 0"),
    ({"reuse": "yes"}, r"reuse'\] must be True or False, not 'yes'"),
    ({"drop_tol": -1e-4}, r"drop_tol'\] must be a number in \[0, 1\)"),
    ({"drop_tol": 1.0}, r"drop_tol'\] must be a number in \[0, 1\)"),
    ({"fill_factor": 0.5}, r"fill_factor'\] must be a finite number >= 1"),
    ({"fill_factor": np.inf}, r"fill_factor'\] must be a finite number >= 1"),
    ({"permc_spec": "AMD"}, r"permc_spec'\] must be one of 'COLAMD', 'MMD_AT_PLUS_A'"),
    ({"preconditioner": None, "drop_tol": 1e-3},
     r"linear_options drop_tol set the ILU preconditioner; preconditioner=None takes none"),
    ({"ilu": True}, r"unknown linear_options for gmres: ilu"),
])
def test_invalid_krylov_options_are_refused(options, match):
    with pytest.raises(ValueError, match=match):
        newton(bratu_1d, np.zeros(10), linear_solver="gmres", linear_options=options)


@needs_pyamg
def test_ilu_options_with_amg_are_refused():
    with pytest.raises(ValueError, match="fill_factor set the ILU preconditioner; "
                                         "preconditioner='amg' takes none"):
        newton(bratu_1d, np.zeros(10), linear_solver="gmres",
               linear_options={"preconditioner": "amg", "fill_factor": 5})


def test_amg_without_pyamg_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyamg", None)  # (import pyamg then fails)
    assert not optimize._amg_available()
    wanted = r"needs pyamg, which is not installed \(pip install pyamg, or the extra " \
             r"sparsegrad\[amg\]\)"
    with pytest.raises(ValueError, match=wanted):
        newton(bratu_1d, np.zeros(10), linear_solver="bicgstab",
               linear_options={"preconditioner": "amg"})
    # everything else works without it
    result = newton(bratu_1d, np.zeros(10), linear_solver="bicgstab")
    assert result.success


def test_krylov_failure_names_the_way_out():
    result = newton(bratu_2d, np.zeros(N * N), args=(N,), linear_solver="gmres",
                    linear_options={"preconditioner": None, "restart": 5, "maxiter": 2})
    assert result.status == -2
    assert "gmres did not converge" in result.message
    assert "linear_solver='direct'" in result.message


# ==== verbose output =====================================================================

def test_verbose_krylov_rows_and_summary(capsys):
    result = newton(bratu_2d, np.zeros(N * N), args=(N,), linear_solver="gmres",
                    verbose=True)
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.strip()[:1].isdigit()]
    assert len(rows) == result.nit + 1
    # iteration, |F|, |dx|, damping, time, Krylov iterations, their rtol
    assert all(len(row) == 7 for row in rows[1:])
    assert sum(int(row[5]) for row in rows[1:]) == result.linear_iterations
    assert float(rows[1][6]) == optimize._EW_ETA_0
    assert any("Eisenstat-Walker" in line for line in lines)
    summary = [line for line in lines if "preconditioner setups: 1" in line]
    assert len(summary) == 1 and "ILU (MMD_AT_PLUS_A" in summary[0]
    assert "converged" in lines[-1]


def test_verbose_fixed_rtol_is_shown(capsys):
    newton(bratu_1d, np.zeros(30), linear_solver="bicgstab", verbose=True,
           linear_options={"rtol": 1e-8})
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert {row[6] for row in rows[1:]} == {"1.0e-08"}
    assert "Krylov rtol 1e-08" in out


def test_verbose_says_when_the_direct_solver_is_the_better_choice(capsys):
    newton(bratu_1d, np.zeros(200), linear_solver="gmres", verbose=True)
    out = capsys.readouterr().out
    assert re.search(r"J has bandwidth 1 after reverse Cuthill-McKee ordering \(LU "
                     r"factors of at most 800 entries\): a direct solver "
                     r"\(linear_solver='direct'\)", out)
    # many Krylov iterations per solve
    newton(bratu_2d, np.zeros(N * N), args=(N,), linear_solver="gmres", verbose=True,
           linear_options={"preconditioner": None})
    assert "Krylov iterations per solve: a direct solver" in capsys.readouterr().out
    # a direct solver is not advised for a wide band (a 200 x 200 grid's Laplacian)
    n = 200
    line = scipy.sparse.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    laplace = scipy.sparse.kronsum(line, line, format="csr")
    assert optimize._direct_is_better(laplace) == ""
    assert optimize._direct_is_better(laplace[:100 * 100, :100 * 100]) != ""


def test_verbose_with_a_direct_solver_is_unchanged(capsys):
    newton(bratu_1d, np.zeros(20), verbose=True)
    out = capsys.readouterr().out
    assert "Krylov" not in out and "bandwidth" not in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert all(len(row) == 5 for row in rows[1:])


# ==== progress line ======================================================================

PROGRESS = re.compile(r"newton: (\d+\.\d) s, iteration (\d+), max\|F\| = (\S+): (.*)")


def progress_lines(out):
    return [PROGRESS.fullmatch(line).groups() for line in out.splitlines()
            if PROGRESS.fullmatch(line)]


def test_progress_zero_reports_every_step(capsys):
    result = newton(bratu_1d, np.zeros(20), progress=0)
    lines = progress_lines(capsys.readouterr().out)
    solving = [line for line in lines if line[3] == "solving the linear system (splu)"]
    assert [int(line[1]) for line in solving] == list(range(1, result.nit + 1))
    # max|F| at the start of each iteration
    assert [float(line[2]) for line in solving] == pytest.approx(
        result.residual_norms[:result.nit], rel=1e-4)
    assert any(line[3] == "evaluating F and its Jacobian" for line in lines)
    assert any(line[3] == "evaluating F at step length 1" for line in lines)


def test_progress_reports_krylov_iterations(capsys):
    result = newton(bratu_2d, np.zeros(N * N), args=(N,), linear_solver="gmres",
                    progress=0.0)
    lines = progress_lines(capsys.readouterr().out)
    krylov = [line[3] for line in lines if line[3].startswith("gmres iteration")]
    assert len(krylov) == result.linear_iterations
    assert krylov[0] == "gmres iteration 1 (rtol 1.0e-01)"


class SlowClock:
    """A clock that advances ``tick`` seconds at every reading."""

    def __init__(self, tick):
        self.now, self.tick = 0.0, tick

    def __call__(self):
        self.now += self.tick
        return self.now


@pytest.mark.parametrize("interval, seconds", [(True, 1.0), (1.0, 1.0), (2.5, 2.5)])
def test_progress_is_printed_at_most_once_per_interval(capsys, monkeypatch, interval,
                                                       seconds):
    monkeypatch.setattr(optimize, "_clock", SlowClock(0.3 * seconds))
    newton(bratu_1d, np.zeros(50), progress=interval)
    times = [float(line[0]) for line in progress_lines(capsys.readouterr().out)]
    assert len(times) >= 2
    assert times[0] >= seconds - 0.05 and np.all(np.diff(times) >= seconds - 0.05)


def test_progress_default_follows_verbose(capsys, monkeypatch):
    monkeypatch.setattr(optimize, "_clock", SlowClock(0.5))
    newton(bratu_1d, np.zeros(50))
    assert capsys.readouterr().out == ""
    newton(bratu_1d, np.zeros(50), verbose=True, progress=False)
    assert progress_lines(capsys.readouterr().out) == []
    # with verbose, a progress line only where a second passed without a table row
    newton(bratu_1d, np.zeros(50), verbose=True)
    lines = capsys.readouterr().out.splitlines()
    assert progress_lines("\n".join(lines))
    rows = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]
    assert len(rows) >= 3


def test_progress_quiet_when_fast(capsys):
    newton(bratu_1d, np.zeros(50), progress=True)   # far faster than a second
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("progress", [-1.0, np.nan, "yes", [1]])
def test_invalid_progress_is_refused(progress):
    with pytest.raises(ValueError, match="progress must be True, False, None or a number"):
        newton(bratu_1d, np.zeros(5), progress=progress)
