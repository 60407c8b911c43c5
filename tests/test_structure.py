"""Structure kept between evaluations (sparsegrad._structure): reused, never stale,
bounded, clearable, and without effect on the numbers."""
import concurrent.futures

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import sparsegrad
from sparsegrad import forward
from sparsegrad import _structure
from sparsegrad.gpu._device import fake
from sparsegrad.testing import numerical_jacobian
from asv_benchmarks.problems import PROBLEMS

from device_check import gpu_tolerance, on_host


pytestmark = pytest.mark.usefixtures("fresh_structure_cache")


def _jacobian(f, x0):
    return f(forward.seed(x0)).dvalue


def _same(a, b):
    for name in ("indptr", "indices", "data"):
        assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("name, n", [("sw", 6), ("pb", 20), ("bratu", 5), ("dd", 10)])
def test_a_repeated_evaluation_finds_its_structure_and_the_same_numbers(name, n):
    residual, x0 = PROBLEMS[name].setup(n)
    sparsegrad.structure_cache_limit(0)
    alone = _jacobian(residual, x0)                 # structure of its own evaluation only
    sparsegrad.structure_cache_limit(2 ** 27)
    first = _jacobian(residual, x0)
    before = sparsegrad.structure_cache_info()
    again = _jacobian(residual, x0)
    after = sparsegrad.structure_cache_info()
    assert after.hits > before.hits and after.misses == before.misses
    assert 0 < after.held_bytes <= after.limit and x0.size in after.sizes
    _same(first, alone)
    _same(again, alone)                              # bit for bit: same sums, same order


def test_an_index_array_written_between_calls_is_read_again():
    east = np.array([1, 2, 3, 0])
    f = lambda x: x[east] * x
    x0 = np.arange(1.0, 5.0)
    _jacobian(f, x0)
    east[:] = [3, 0, 1, 2]                           # in place: same object, same id
    J = _jacobian(f, x0)
    assert_array_equal(J.toarray(), numerical_jacobian(f, x0, method="complex"))


def test_index_arrays_of_long_runs_are_gathered_by_their_runs_and_read_again(monkeypatch):
    # a periodic stencil's index arrays (np.roll of a grid's numbers) are a few long
    # runs, which the seed's structure keeps beside its copy of each; written in
    # place between calls, an array is read again, runs and all
    from sparsegrad import _jacobian as jac
    n = 20  # (east: 2 runs per grid line, 40 of 400 rows: few enough)
    grid = np.arange(n * n).reshape(n, n)
    east = np.roll(grid, -1, axis=1).ravel()
    north = np.roll(grid, -1, axis=0).ravel()
    x0 = np.random.default_rng(1).uniform(1, 2, n * n)

    def f(x):
        g = x * x
        return g[east] - g[north] * x + np.exp(x)[east] * x[north]

    from sparsegrad._backend import CPU
    given = []
    for name in ("take", "take_product"):
        kernel = getattr(CPU.kernels, name)
        monkeypatch.setattr(CPU.kernels, name, lambda *args, kernel=kernel: (
            given.append(args[-1]), kernel(*args))[1])
    for _ in range(3):
        given.clear()
        J = _jacobian(f, x0)
        np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, x0, method="complex"),
                                   rtol=1e-12, atol=1e-15)
        structure = _structure.for_seed(x0.size)
        # values and row factors gathered by the kept runs
        assert sum(any(runs is kept_runs for _, kept_runs in (
            entry for key, entry in structure.index_rows.items()
            if type(key) is tuple and key[0] == "runs")) for runs in given) >= 4
        kept = [entry for key, entry in structure.index_rows.items()
                if type(key) is tuple and key[0] == "runs"]
        assert len(kept) == 2
        assert all(jac.known_runs(structure, rows) is runs for rows, runs in kept)
        assert sorted(len(runs) - 1 for _, runs in kept) == [2, 2 * n]
    east[:] = np.roll(grid, 1, axis=1).ravel()       # in place: west now, same object
    north[:] = north[::-1].copy()                     # no runs any more
    J = _jacobian(f, x0)
    np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, x0, method="complex"),
                               rtol=1e-12, atol=1e-15)
    value = f(forward.seed(x0)).value
    assert_array_equal(value, f(x0))


def test_new_index_arrays_that_reuse_an_id_are_read_again():
    rng = np.random.default_rng(0)
    x0 = rng.uniform(1, 2, 7)
    for _ in range(50):                              # dead arrays' ids come back
        index = rng.integers(0, 7, 7)
        f = lambda x: np.exp(x[index]) * x
        J = _jacobian(f, x0)
        np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, x0, method="complex"),
                                   rtol=1e-14)
        del index, f


def test_a_changed_branch_or_movement_is_followed():
    x0 = np.linspace(1.0, 2.0, 6)
    for width, shift, flip in [(1, 1, False), (2, 1, False), (1, -2, True), (1, 1, False)]:
        def f(x):
            y = np.pad(x, width, mode="edge")[width:-width] * np.roll(x, shift)
            return y[::-1] if flip else y
        J = _jacobian(f, x0)
        np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, x0, method="complex"),
                                   rtol=1e-14)


def test_the_cache_is_bounded_and_clearable():
    residual, x0 = PROBLEMS["sw"].setup(12)
    _jacobian(residual, x0)
    held = sparsegrad.structure_cache_info().held_bytes
    assert held > 0
    sparsegrad.structure_cache_limit(held // 3)      # below what one evaluation keeps
    assert sparsegrad.structure_cache_info().held_bytes == 0
    for _ in range(3):
        J = _jacobian(residual, x0)
        assert sparsegrad.structure_cache_info().held_bytes <= held // 3
    sparsegrad.structure_cache_limit(0)
    _same(J, _jacobian(residual, x0))
    assert not forward.seed(x0)._jacobian.seed.structure.shared
    sparsegrad.clear_structure_cache()
    info = sparsegrad.structure_cache_info()
    assert (info.held_bytes, info.hits, info.misses) == (0, 0, 0)


def test_limits_are_checked():
    with pytest.raises(ValueError, match="structure_cache_limit"):
        sparsegrad.structure_cache_limit(-1)
    with pytest.raises(TypeError, match="structure_cache_limit"):
        sparsegrad.structure_cache_limit("1 MB")
    assert sparsegrad.structure_cache_limit(1e6) == 10 ** 6


def test_seed_sizes_kept_at_once_are_bounded():
    for n in range(3, 3 + 2 * _structure._MAX_SIZES):
        _jacobian(lambda x: x[1:] * x[:-1], np.ones(n))
    assert len(sparsegrad.structure_cache_info().sizes) == _structure._MAX_SIZES


def test_evaluations_in_threads_share_it_safely():
    residual, x0 = PROBLEMS["sw"].setup(10)
    expected = _jacobian(residual, x0)

    def work(_):
        for _ in range(20):
            _same(_jacobian(residual, x0), expected)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        list(pool.map(work, range(3)))               # (re-raises a thread's failure)


def test_sums_do_not_depend_on_what_earlier_evaluations_left():
    # caches evict their least recently used entries: an evaluation's own entries
    # stay for the rest of it, so its terms share matrices as on a fresh start
    residual, x0 = PROBLEMS["sw"].setup(5)
    x0 = x0.astype(np.float32)
    fresh = _jacobian(residual, x0)
    for k in range(40):                               # stale keys in every cache
        index = np.arange(75)[::-1].copy()
        _jacobian(lambda x: x[index][k % 5:] * x[: 75 - k % 5], x0.astype(np.float64) + k)
    _same(_jacobian(residual, x0), fresh)


def test_device_seeds_share_a_structure_of_their_own(device):
    x = forward.seed(device.asarray(np.ones(4)))
    assert x._jacobian.seed.backend is not sparsegrad._backend.CPU
    assert x._jacobian.seed.structure.shared
    assert forward.seed(device.asarray(np.ones(4)))._jacobian.seed.structure is \
        x._jacobian.seed.structure
    assert forward.seed(np.ones(4))._jacobian.seed.structure is not x._jacobian.seed.structure


@pytest.mark.parametrize("name, n", [("sw", 6), ("pb", 20), ("bratu", 5), ("dd", 10)])
def test_a_repeated_evaluation_on_a_device(name, n, device):
    residual, x0 = PROBLEMS[name].setup(n, xp=device)
    expected = _jacobian(*PROBLEMS[name].setup(n))
    first = on_host(_jacobian(residual, x0))
    before = sparsegrad.structure_cache_info()
    again = on_host(_jacobian(residual, x0))
    after = sparsegrad.structure_cache_info()
    assert after.hits > before.hits and after.misses == before.misses
    _same(again, first)
    assert_array_equal(first.indices, expected.indices)
    rtol, atol = gpu_tolerance(x0.dtype) if device is not fake else (0, 0)
    np.testing.assert_allclose(first.data, expected.data, rtol=rtol, atol=atol)


def test_changed_device_index_arrays_and_branches_are_followed(device):
    east = device.asarray(np.array([1, 2, 3, 0]))
    x0 = np.arange(1.0, 5.0)
    _jacobian(lambda x: x[east] * x, device.asarray(x0))
    east[:] = device.asarray(np.array([3, 0, 1, 2]))  # in place: same object, same id
    J = on_host(_jacobian(lambda x: x[east] * x, device.asarray(x0)))
    expected = _jacobian(lambda x: x[np.array([3, 0, 1, 2])] * x, x0)
    assert_array_equal(J.toarray(), expected.toarray())
    x0 = np.linspace(1.0, 2.0, 6)
    for width, shift, flip in [(1, 1, False), (2, 1, False), (1, -2, True), (1, 1, False)]:
        def f(x):
            y = np.pad(x, width, mode="edge")[width:-width] * np.roll(x, shift)
            return y[::-1] if flip else y
        J = on_host(_jacobian(f, device.asarray(x0)))
        assert_array_equal(J.toarray(), _jacobian(f, x0).toarray())


def test_structure_limit_follows_the_largest_jacobian_unless_set(monkeypatch):
    monkeypatch.setattr(_structure, "_DEFAULT_BYTES", 2 ** 20)
    try:
        assert sparsegrad.structure_cache_limit("auto") == 2 ** 20
        J = sparsegrad.jacobian(lambda x: x ** 2 + x[::-1], trace=False)(np.ones(100000))
        nbytes = J.data.nbytes + J.indices.nbytes + J.indptr.nbytes
        assert sparsegrad.structure_cache_limit() == 2 * nbytes > 2 ** 20
        assert sparsegrad.structure_cache_limit(2 ** 20) == 2 ** 20      # a cap, fixed
        sparsegrad.jacobian(lambda x: x ** 2 + x[::-1], trace=False)(np.ones(200000))
        assert sparsegrad.structure_cache_limit() == 2 ** 20
    finally:
        monkeypatch.undo()
        sparsegrad.structure_cache_limit("auto")
    assert sparsegrad.structure_cache_limit() == _structure._DEFAULT_BYTES
