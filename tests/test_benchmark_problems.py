"""The benchmark problems, the asv suites and the ratios script, at tiny sizes.

The residuals in ``asv_benchmarks/problems.py`` are what every published ratio
is measured on, so they are checked here like user code: they run on plain
arrays and on forward values, the values agree, and the Jacobian matches
central differences.  The asv classes and ``python -m asv_benchmarks.ratios``
are run on tiny configurations so that they cannot rot.
"""
import json
import os
import re
import sys

import numpy as np
import pytest

import sparsegrad
from sparsegrad import forward
from sparsegrad.testing import numerical_jacobian

from device_check import assert_matches_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:   # asv_benchmarks is not installed; pytest may start elsewhere
    sys.path.insert(0, ROOT)

from asv_benchmarks import benchmarks, hand_coded, problems, ratios  # noqa: E402

# tiny sizes: a few dozen unknowns each
TINY = {"sw": 5, "pb": 12, "bratu": 4, "dd": 9}


@pytest.fixture(params=sorted(TINY))
def problem(request):
    return problems.get(request.param)


def test_default_sizes():
    assert problems.get("sw").sizes == (50, 100, 200, 400)
    assert problems.get("pb").sizes == (10 ** 4, 10 ** 5, 10 ** 6)
    assert problems.get("bratu").sizes == (100, 300, 1000)
    assert problems.get("dd").sizes == (10 ** 4, 10 ** 5)
    with pytest.raises(KeyError, match="known"):
        problems.get("nope")


def test_residual_on_arrays_and_forward_values(problem):
    n = TINY[problem.key]
    residual, x0 = problem.setup(n)
    assert x0.shape == (problem.unknowns(n),)
    plain = residual(x0)
    assert isinstance(plain, np.ndarray) and plain.shape == x0.shape
    assert np.all(np.isfinite(plain))

    y = residual(forward.seed(x0))
    scale = np.max(np.abs(plain))
    np.testing.assert_allclose(y.value, plain, rtol=1e-13, atol=1e-13 * scale)
    J = y.dvalue
    assert J.shape == (x0.size, x0.size)
    reference = numerical_jacobian(residual, x0, method="central")
    np.testing.assert_allclose(J.toarray(), reference, rtol=1e-5,
                               atol=1e-6 * np.max(np.abs(reference)))
    # square, nonsingular systems: every row and column has an entry
    assert np.all(np.diff(J.indptr) > 0)
    assert np.unique(J.indices).size == x0.size

    pattern = residual(forward.seed_sparsity(x0)).dvalue
    assert pattern.shape == J.shape
    assert np.array_equal(pattern.indptr, J.indptr)
    assert np.array_equal(pattern.indices, J.indices)


def test_residual_on_a_device(problem, device):
    # setup(n, xp) puts x0 and every constant on the device: the residual runs
    # there unchanged, plain and seeded, and gives the CPU's numbers
    n = TINY[problem.key]
    residual, x0 = problem.setup(n)
    residual_device, x0_device = problem.setup(n, xp=device)
    assert isinstance(x0_device, device.ndarray)
    plain = residual_device(x0_device)
    assert isinstance(plain, device.ndarray)
    np.testing.assert_allclose(device.asnumpy(plain), residual(x0), rtol=1e-13, atol=1e-12)
    assert_matches_cpu(residual_device(forward.seed(x0_device)), residual(forward.seed(x0)),
                       rtol=1e-13, atol=1e-12, value_rtol=1e-13, value_atol=1e-12,
                       device=device)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_pending_products_reach_the_merge_unchanged(problem, monkeypatch, dtype):
    # row factors scaled by vectors stay pairs (d, c) that the merge kernel
    # multiplies (shallow water's (...) / eta): bit for bit the eager products
    from sparsegrad import _jacobian
    residual, x0 = problem.setup(TINY[problem.key])
    x0 = x0.astype(dtype)
    pending = residual(forward.seed(x0)).dvalue
    monkeypatch.setattr(_jacobian, "PENDING_PRODUCTS", False)
    eager = residual(forward.seed(x0)).dvalue
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(pending, name), getattr(eager, name))


def test_shallow_water_nonzeros():
    # 32 nonzeros per 3 rows: deta 8, du 12, dv 12
    residual, x0 = problems.get("sw").setup(6)
    J = residual(forward.seed(x0)).dvalue
    counts = np.diff(J.indptr).reshape(3, -1)
    assert set(counts[0]) == {8} and set(counts[1]) == {12} and set(counts[2]) == {12}


@pytest.mark.parametrize("n", [3, 4, 7])
def test_shallow_water_jacobian_equals_the_one_derived_by_hand(n):
    # an independent reference: every coefficient derived on paper
    # (asv_benchmarks/hand_coded.py), the pattern canonical and identical
    residual, jacobian, x0 = hand_coded.shallow_water(n)
    rng = np.random.default_rng(n)
    for x in (x0, x0 * (1 + 0.2 * rng.standard_normal(x0.size))):
        by_hand = jacobian(x)
        J = residual(forward.seed(x)).dvalue
        assert by_hand.has_canonical_format and by_hand.nnz == 32 * n * n
        np.testing.assert_array_equal(J.indptr, by_hand.indptr)
        np.testing.assert_array_equal(J.indices, by_hand.indices)
        np.testing.assert_allclose(J.data, by_hand.data, rtol=1e-13,
                                   atol=1e-14 * np.abs(by_hand.data).max())
    # and the hand's own derivation against central differences
    reference = numerical_jacobian(residual, x0, method="central")
    np.testing.assert_allclose(jacobian(x0).toarray(), reference, rtol=1e-5,
                               atol=1e-6 * np.abs(reference).max())


def test_asv_shallow_water_by_hand_callable():
    bench = benchmarks.ShallowWaterByHand()
    assert bench.params == [list(problems.get("sw").sizes)]
    bench.setup(4)
    bench.time_value_and_jacobian(4)
    _Ratios = benchmarks._Ratios
    old = _Ratios.ratio_repeats, _Ratios.ratio_min_time
    _Ratios.ratio_repeats, _Ratios.ratio_min_time = 2, 0.0
    try:
        assert bench.track_ratio_on_pool(4) > 0
    finally:
        _Ratios.ratio_repeats, _Ratios.ratio_min_time = old


def test_bernoulli():
    x = np.array([-50.0, -1.0, -1e-2, -3e-3, -1e-9, 0.0, 1e-9, 3e-3, 1e-2, 1.0, 50.0])
    exact = np.where(x == 0, 1.0, x / np.expm1(np.where(x == 0, 1.0, x)))
    np.testing.assert_allclose(problems.bernoulli(x), exact, rtol=1e-15)
    # both branches of np.where carry exact derivatives: B'(x) = (expm1(x) - x e^x) / expm1(x)^2
    y = problems.bernoulli(forward.seed(x))
    derivative = np.diag(y.dvalue.toarray())
    big = np.abs(x) > 1e-2
    expected = (np.expm1(x[big]) - x[big] * np.exp(x[big])) / np.expm1(x[big]) ** 2
    np.testing.assert_allclose(derivative[big], expected, rtol=1e-12)
    np.testing.assert_allclose(derivative[~big], -0.5 + x[~big] / 6, atol=1e-7)


def test_drift_diffusion_uses_both_bernoulli_branches():
    problem = problems.get("dd")
    residual, x0 = problem.setup(TINY["dd"])
    psi = x0[:TINY["dd"]]
    d = np.diff(psi)
    assert np.any(np.abs(d) < 1e-2) and np.any(np.abs(d) >= 1e-2)


def test_asv_suites_callable():
    suites = [getattr(benchmarks, name) for name in
              ("ShallowWater", "PoissonBoltzmann", "Bratu", "DriftDiffusion")]
    for suite in suites:
        assert suite.params == [list(suite.problem.sizes)]
        bench = suite()
        n = TINY[suite.problem.key]
        bench.setup(n)
        bench.time_residual(n)
        bench.time_value_and_jacobian(n)
        bench.time_sparsity(n)
        bench.peakmem_value_and_jacobian(n)
        bench.time_first_three_evaluations(n)
        bench.time_value_and_jacobian_traced(n)
    bench = benchmarks.PoissonBoltzmannRatios()
    bench.ratio_repeats, bench.ratio_min_time = 2, 0.0
    bench.setup(12)
    assert bench.track_jacobian_ratio(12) > 0
    assert bench.track_jacobian_ratio_on_pool(12) > 0
    assert bench.track_traced_ratio_on_pool(12) > 0
    assert 0 < bench.track_sparsity_ratio(12)
    assert bench.track_memory_ratio(12) > 0


def test_asv_fixed_cost_callable():
    bench = benchmarks.FixedCost()
    for key in benchmarks.FixedCost.params[0]:
        bench.setup(key)
        bench.time_value_and_jacobian(key)


def test_asv_constant_operators_callable():
    bench = benchmarks.ConstantOperators()
    for operator in benchmarks.ConstantOperators.params[0]:
        bench.setup(operator)
        bench.time_residual(operator)
        J = bench.residual(forward.seed(bench.x0)).dvalue
        assert J.shape == (bench.residual(bench.x0).size, bench.x0.size) and J.nnz > 0


def test_asv_conf():
    with open(os.path.join(ROOT, "asv.conf.json")) as f:
        text = re.sub(r"^\s*//.*$", "", f.read(), flags=re.M)
    conf = json.loads(text)
    assert conf["benchmark_dir"] == "asv_benchmarks"
    assert os.path.isdir(os.path.join(ROOT, conf["benchmark_dir"]))


def test_ratios_script_quick(tmp_path, capsys):
    out = tmp_path / "ratios.json"
    status = ratios.main(["--problems", "sw,pb,bratu,dd", "--size", "sw=4,8", "--size", "pb=10",
                          "--size", "bratu=3", "--size", "dd=5", "--repeats", "1",
                          "--min-time", "0", "--json", str(out)])
    assert status == 0
    printed = capsys.readouterr().out
    assert "jac/res" in printed and "linear scaling" in printed
    data = json.loads(out.read_text())
    assert [(r["problem"], r["size"]) for r in data["results"]] == [
        ("sw", 4), ("sw", 8), ("pb", 10), ("bratu", 3), ("dd", 5)]
    for r in data["results"]:
        assert r["ratio"] > 0 and r["residual_s"] > 0 and r["jacobian_s"] > 0
        assert r["nnz"] > 0 and r["memory_ratio"] > 0
    assert len(data["scaling"]) == 1 and data["scaling"][0]["nnz_growth"] == 4.0
    assert data["scaling"][0]["side_by_side"] and data["scaling"][0]["time_growth"] > 0
    assert data["peer_names"] == list(ratios.PEER_NAMES)
    assert sorted(data["fixed_costs"]) == ["bratu", "dd", "pb", "sw"]
    assert all(seconds > 0 for seconds in data["fixed_costs"].values())
    assert "fixed cost of an evaluation" in printed and "sw 5x5" in printed
    assert sorted(data["recorded_fixed_costs"]) == ["bratu", "dd", "pb", "sw"]
    assert all(seconds > 0 for seconds in data["recorded_fixed_costs"].values())
    assert sorted(data["first_calls"]) == ["bratu-3", "dd-5", "pb-10", "sw-4", "sw-8"]
    assert all(ratio > 0 and recorded > 0 and eager > 0
               for ratio, recorded, eager in data["first_calls"].values())
    assert "first call of the default engine" in printed
    # the shallow-water rows carry the Jacobian derived by hand, for information
    assert "derived by hand" in printed
    for r in data["results"]:
        assert ("by_hand_ratio_pool" in r) == (r["problem"] == "sw")
        if r["problem"] == "sw":
            assert r["by_hand_s"] > 0 and r["by_hand_ratio_pool"] > 0 and r["ratio_pool"] > 0


def test_repeated_target_judged_against_the_residual_on_the_pool(monkeypatch, capsys):
    # the repeated evaluation allocates from the pool: its target is judged like for
    # like, against the residual timed on the pool in the same rounds
    monkeypatch.setitem(ratios.REPEATED_TARGETS, ("sw", 4), 1e9)
    result = ratios.measure("sw", 4, repeats=3, min_time=0, memory=False)
    assert result["residual_pool_s"] > 0 and result["ratio_pool"] > 0
    assert result["traced_s"] > 0 and result["traced_ratio_pool"] > 0
    assert result["repeated_pass"] is True
    monkeypatch.setitem(ratios.REPEATED_TARGETS, ("sw", 4), 1e-9)
    failing = ratios.measure("sw", 4, repeats=3, min_time=0, memory=False)
    assert failing["repeated_pass"] is False
    (failure,) = [f for f in ratios.failures([failing], []) if "repeated" in f]
    assert "%.2fx" % failing["traced_ratio_pool"] in failure
    ratios.report([failing], [], out=print)
    printed = capsys.readouterr().out
    assert "the residual on the pool" in printed and "trace=True" in printed
    # without a repeated target: the default engine against the pool's residual,
    # beside forward.seed's, for every case
    plain = ratios.measure("pb", 10, repeats=1, min_time=0, memory=False)
    assert plain["repeated_pass"] is None
    assert plain["traced_ratio_pool"] > 0 and plain["ratio_pool"] > 0
    ratios.report([plain], [], out=print)
    assert "the default engine" in capsys.readouterr().out
    by_hand = ratios.measure("sw", 8, repeats=1, min_time=0, memory=False)
    assert by_hand["repeated_pass"] is None and by_hand["ratio_pool"] > 0


def test_fixed_cost_is_the_smallest_grid():
    for key, n in ratios.FIXED_COST_SIZES.items():
        residual, x0 = problems.get(key).setup(n)
        assert x0.size <= 100                      # (where the arrays cost nothing)
    assert ratios.measure_fixed_cost("pb", repeats=1, min_time=0) > 0


def test_ratios_targets_and_peers():
    assert ratios.TARGETS[("sw", 400)] == 8.0 and ratios.TARGETS[("pb", 10 ** 6)] == 3.0
    for key, peers in ratios.PEERS.items():
        assert key in ratios.TARGETS
        assert set(peers) == set(ratios.PEER_NAMES)
    fake = [{"problem": "sw", "size": 100, "label": "100x100", "nnz": 100, "jacobian_s": 1.0},
            {"problem": "sw", "size": 200, "label": "200x200", "nnz": 400, "jacobian_s": 6.0}]
    (check,) = ratios.scaling(fake)
    assert check["target"] and not check["pass"] and check["per_4x"] == 6.0
    assert not check["side_by_side"]
    # a time ratio measured side by side takes the place of the table's
    (check,) = ratios.scaling(fake, {("sw", 100, 200): 4.4})
    assert check["side_by_side"] and check["pass"] and check["per_4x"] == pytest.approx(4.4)


def test_growth_measured_side_by_side():
    growth = ratios.measure_growth("pb", 10, 40, repeats=3, min_time=0)
    assert growth > 0
    assert ratios.scaling_steps([{"problem": "pb", "size": n} for n in (40, 10, 20)]) == [
        ("pb", 10, 20), ("pb", 20, 40)]


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "plot_performance", os.path.join(ROOT, "docs", "plot_performance.py"))
    plot_performance = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot_performance)
    data = ratios.run([("sw", 4), ("pb", 10)], repeats=1, min_time=0, out=None)
    # pretend the small cases are the compared ones, so both panels are drawn
    data["results"][0]["peers"] = {k: list(v) for k, v in ratios.PEERS[("sw", 200)].items()}
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data))
    png = tmp_path / "plot.png"
    assert plot_performance.main([str(path), "-o", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_gpu_ratios_on_the_fake_device(capsys, monkeypatch):
    # the GPU script's measuring and checking, run on the fake device with a do-nothing
    # stream synchronisation, so that a device session spends no time on its typos
    from types import SimpleNamespace

    from asv_benchmarks import gpu_ratios
    from sparsegrad.gpu._device import fake, fake_backend
    fake_backend()
    stream = SimpleNamespace(null=SimpleNamespace(synchronize=lambda: None))
    device = SimpleNamespace(asarray=fake.asarray, cuda=SimpleNamespace(Stream=stream))
    result = gpu_ratios.measure("sw", 5, device, repeats=1, min_time=0.0)
    assert result["same_pattern_as_cpu"] and result["max_difference_to_cpu"] < 1e-14
    assert result["ratio"] > 0 and result["label"] == "shallow water 5x5"
    assert "function calls" in gpu_ratios.profile("pb", 10, device)
    monkeypatch.setattr("sparsegrad.gpu.available", lambda: False)
    assert gpu_ratios.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().out


def test_large_asv_classes_run_the_sizes_of_ratios_large():
    for key, sizes in ratios.LARGE_SIZES.items():
        suite = [cls for name, cls in vars(benchmarks).items()
                 if name.endswith("LargeRatios") and getattr(cls, "problem", None)
                 is problems.get(key)]
        assert len(suite) == 1 and suite[0].params == [list(sizes)], key
    # (run at a tiny size here: the large ones take minutes)
    bench = benchmarks.BratuLargeRatios()
    bench.ratio_repeats, bench.ratio_min_time = 2, 0.0
    bench.setup(TINY["bratu"])
    assert bench.track_jacobian_ratio(TINY["bratu"]) > 0


def test_minimal_surface_energy_and_its_hessian_benchmarks():
    problem = problems.ENERGIES["minsurf"]
    energy, x0 = problem.setup(4)
    assert x0.shape == (16,) and problem.sizes == (300, 1000)
    gradient = sparsegrad.gradient(energy, trace=False)
    H = sparsegrad.hessian(energy)(x0)
    np.testing.assert_allclose(H.toarray(), numerical_jacobian(gradient, x0, method="central"),
                               rtol=1e-6, atol=1e-8)
    assert H.nnz == 16 + 2 * (2 * 4 * 3) + 2 * (2 * 3 * 3)     # 9-point stencil
    result = ratios.measure_hessian("minsurf", 4, repeats=1, min_time=0.0)
    assert result["nnz"] == H.nnz and result["ratio"] > 0 and result["eager_ratio"] > 0
    lines = []
    ratios.report_hessians([result], out=lines.append)
    assert lines[2].startswith("minimal surface 4x4")
    bench = benchmarks.MinimalSurfaceHessian()
    bench.setup(4)
    bench.time_energy(4)
    bench.time_value_grad_and_hessian(4)


def test_ratios_script_hessians(tmp_path, capsys):
    path = str(tmp_path / "h.json")
    assert ratios.main(["--hessians", "--quick", "--size", "minsurf=3", "--json", path]) == 0
    assert "minimal surface 3x3" in capsys.readouterr().out
    with open(path) as f:
        data = json.load(f)
    assert [(r["key"], r["n"]) for r in data["hessians"]] == [("minsurf", 3)]
