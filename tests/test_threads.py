"""Merges in several threads: same Jacobians, bit for bit; the settings."""
import numpy as np
import pytest

import sparsegrad
from sparsegrad import forward, _threads
from sparsegrad._fast import compiled

needs_compiled = pytest.mark.skipif(compiled is None, reason="compiled kernels not in use")

#: a state of the shallow-water-like residual below: 3 fields of 5000 cells
X0 = 1.5 + np.sin(np.arange(3 * 5000) * 0.01)


@pytest.fixture
def restore_threads():
    previous = sparsegrad.get_num_threads()
    yield
    sparsegrad.set_num_threads(previous)
    if compiled is not None:
        compiled._set_parallel_entries(None)


def _shallow_water_like(x):
    n = len(x) // 3
    eta, u, v = x[:n], x[n:2 * n], x[2 * n:]
    east = np.roll(np.arange(n), -1)
    west = np.roll(np.arange(n), 1)
    flux = eta * u
    deta = -(flux[east] - flux[west]) - (eta * v)[east[::-1]]
    du = (deta * u - (eta * u ** 2 + 4.9 * eta ** 2)[east]) / eta
    padded = np.pad(v, 2)
    dv = padded[:-4] + padded[4:] - 2 * v * u[west]
    return np.concatenate([deta, du, dv])


@needs_compiled
@pytest.mark.parametrize("threads", [2, 3, 4])
def test_jacobians_in_threads_equal_one_thread(restore_threads, threads):
    x0 = X0
    sparsegrad.set_num_threads(1)
    expected = _shallow_water_like(forward.seed(x0)).dvalue
    expected_pattern = _shallow_water_like(forward.seed_sparsity(x0)).dvalue
    sparsegrad.set_num_threads(threads)
    compiled._set_parallel_entries(1000)      # split even this small merge
    J = _shallow_water_like(forward.seed(x0)).dvalue
    pattern = _shallow_water_like(forward.seed_sparsity(x0)).dvalue
    for got, want in ((J, expected), (pattern, expected_pattern)):
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)
    # and against finite differences of the same function
    direction = np.cos(np.arange(len(x0)))
    h = 1e-6
    fd = (_shallow_water_like(x0 + h * direction)
          - _shallow_water_like(x0 - h * direction)) / (2 * h)
    np.testing.assert_allclose(J @ direction, fd, rtol=1e-6, atol=1e-6)


def test_set_and_get(restore_threads):
    sparsegrad.set_num_threads(3)
    assert sparsegrad.get_num_threads() == (3 if compiled is not None else 1)
    for bad in (0, -2):
        with pytest.raises(ValueError, match="must be >= 1"):
            sparsegrad.set_num_threads(bad)
    with pytest.raises(TypeError):
        sparsegrad.set_num_threads(2.5)


def test_default_from_the_environment(monkeypatch):
    monkeypatch.setenv("SPARSEGRAD_NUM_THREADS", "3")
    assert _threads._default_threads() == 3
    monkeypatch.setenv("SPARSEGRAD_NUM_THREADS", "")
    assert 1 <= _threads._default_threads() <= 4
    for bad in ("many", "0"):
        monkeypatch.setenv("SPARSEGRAD_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="SPARSEGRAD_NUM_THREADS"):
            _threads._default_threads()


def test_docstring_examples():
    import doctest
    from sparsegrad import _settings
    for module in (_threads, _settings):
        failures, attempted = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert attempted > 0 and failures == 0


def _jacobian_in_child(queue):
    compiled._set_parallel_entries(1000)
    x0 = X0
    J = _shallow_water_like(forward.seed(x0)).dvalue
    queue.put((J.nnz, float(abs(J).sum())))


@needs_compiled
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_forked_child_merges_in_threads(restore_threads):
    # the parent's worker threads do not exist in a forked child: it must make
    # its own, not wait for the parent's (a hang here would be the bug)
    import multiprocessing
    sparsegrad.set_num_threads(3)
    compiled._set_parallel_entries(1000)
    x0 = X0
    J = _shallow_water_like(forward.seed(x0)).dvalue     # the parent's pool starts
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_jacobian_in_child, args=(queue,))
    child.start()
    child.join(timeout=120)
    if child.is_alive():  # pragma: no cover - the failure being tested for
        child.kill()
        pytest.fail("a forked child hung merging in threads")
    assert child.exitcode == 0
    nnz, total = queue.get(timeout=10)
    assert nnz == J.nnz and total == pytest.approx(float(abs(J).sum()), rel=1e-15)
