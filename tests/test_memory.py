"""The opt-in allocator setting: applied on glibc, harmless elsewhere, checked arguments."""
import sys

import numpy as np
import pytest

import sparsegrad
from sparsegrad import forward


def test_keep_freed_memory_applies_on_glibc_linux():
    applied = sparsegrad.keep_freed_memory(32 * 2 ** 20)
    assert isinstance(applied, bool)
    if not sys.platform.startswith("linux"):
        assert applied is False
    try:
        x = forward.seed(np.linspace(0.0, 1.0, 7))
        J = (np.exp(x) * x[::-1]).dvalue.toarray()
        x0 = np.linspace(0.0, 1.0, 7)
        expected = np.diag(np.exp(x0) * x0[::-1]) + np.exp(x0)[:, None] * np.eye(7)[::-1]
        np.testing.assert_allclose(J, expected, rtol=1e-15)
    finally:
        sparsegrad.keep_freed_memory(0)


@pytest.mark.parametrize("nbytes", [-1, 2 ** 31])
def test_keep_freed_memory_refuses_out_of_range(nbytes):
    with pytest.raises(ValueError, match="nbytes"):
        sparsegrad.keep_freed_memory(nbytes)


# ---------------------------------------------------------------- the memory pool

from sparsegrad import _memory  # noqa: E402
from sparsegrad._fast import KERNELS, pool  # noqa: E402

needs_pool = pytest.mark.skipif(pool is None, reason="no compiled memory pool "
                                "(reference kernels)")
get_handler_name = np._core.multiarray.get_handler_name
POOLED = 64 * 2 ** 10  # requests of at least this many bytes are pooled


def test_pool_comes_with_the_compiled_kernels():
    assert (pool is not None) == (KERNELS == "compiled")
    info = sparsegrad.memory_pool_info()
    assert info.enabled == (pool is not None and info.limit > 0)
    if pool is None:
        assert info == (False, 0, 0, 0, 0)


@needs_pool
def test_arrays_of_forward_operations_come_from_the_pool_and_user_arrays_do_not():
    x0 = np.linspace(0.0, 1.0, 20000)
    y = np.exp(forward.seed(x0)) * 2.0
    assert get_handler_name(y.value) == "sparsegrad_pool"
    data = y.dvalue.data
    while isinstance(data.base, np.ndarray):  # (the data may be a view)
        data = data.base
    assert get_handler_name(data) == "sparsegrad_pool"
    # outside sparsegrad's operations numpy's own allocator is back
    assert get_handler_name(np.empty(20000)) == "default_allocator"
    assert get_handler_name(x0 * 2.0) == "default_allocator"


@needs_pool
def test_repeated_evaluations_reuse_freed_blocks_and_stay_exact():
    x0 = np.linspace(0.0, 1.0, 30000)

    def F(x):
        return np.exp(-x ** 2) - x[::-1] * x

    first = F(forward.seed(x0)).dvalue
    before = sparsegrad.memory_pool_info().reused
    for _ in range(3):
        again = F(forward.seed(x0)).dvalue
        assert (again != first).nnz == 0
        assert np.array_equal(again.indices, first.indices)
    assert sparsegrad.memory_pool_info().reused > before


@needs_pool
def test_pool_limit_and_release():
    previous = sparsegrad.memory_pool_limit()
    try:
        assert sparsegrad.memory_pool_limit(0) == 0
        assert sparsegrad.memory_pool_info().held_bytes == 0
        assert not sparsegrad.memory_pool_info().enabled
        x = forward.seed(np.ones(50000))
        del x
        assert sparsegrad.memory_pool_info().held_bytes == 0  # nothing kept at limit 0
        sparsegrad.memory_pool_limit(16 * 2 ** 20)
        values = [(forward.seed(np.ones(50000)) * k).value for k in range(4)]
        del values
        info = sparsegrad.memory_pool_info()
        assert 0 < info.held_bytes <= 16 * 2 ** 20
        sparsegrad.release_memory_pool()
        assert sparsegrad.memory_pool_info().held_bytes == 0
    finally:
        sparsegrad.memory_pool_limit(previous)
    with pytest.raises(ValueError, match="nbytes"):
        sparsegrad.memory_pool_limit(-1)


def _pooled_array(make):
    return _memory.pooled(make)()


@needs_pool
def test_pooled_zeros_are_zero_even_in_a_reused_block():
    n = POOLED // 8 * 3
    dirty = _pooled_array(lambda: np.full(n, 7.0))
    del dirty  # its block goes back to the pool...
    zeros = _pooled_array(lambda: np.zeros(n))  # ...and calloc must clear it
    assert get_handler_name(zeros) == "sparsegrad_pool"
    assert not zeros.any()


@needs_pool
@pytest.mark.parametrize("old, new", [(10, POOLED // 8 * 2), (POOLED // 8 * 2, 10),
                                      (POOLED // 8 * 2, POOLED // 8 * 2 + 3),
                                      (POOLED // 8 * 2, POOLED // 8 * 9),
                                      (POOLED // 8 * 9, POOLED // 8 * 2), (5, 9)])
def test_resizing_a_pooled_array_keeps_its_contents(old, new):
    a = _pooled_array(lambda: np.arange(old, dtype=np.float64))
    a.resize(new, refcheck=False)  # numpy reallocates through the array's handler
    keep = min(old, new)
    np.testing.assert_array_equal(a[:keep], np.arange(keep, dtype=np.float64))
    if new > old:
        assert not a[old:].any()  # numpy zero-fills what resize adds


def test_pool_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("SPARSEGRAD_MEMORY_POOL_BYTES", "1234")
    assert _memory._initial_limit() == 1234
    monkeypatch.setenv("SPARSEGRAD_MEMORY_POOL_BYTES", "")
    assert _memory._initial_limit() == _memory._DEFAULT_POOL_BYTES
    for bad in ("lots", "-5"):
        monkeypatch.setenv("SPARSEGRAD_MEMORY_POOL_BYTES", bad)
        with pytest.raises(ValueError, match="SPARSEGRAD_MEMORY_POOL_BYTES"):
            _memory._initial_limit()


@needs_pool
def test_threads_evaluating_jacobians_at_once_stay_exact():
    # the pool's free lists are shared by every thread (a lock guards them);
    # each thread's context installs the handler for its own operations
    import threading
    x0 = np.linspace(0.0, 1.0, 20000)

    def F(x):
        return np.sin(x) * x[::-1] + np.roll(x, 3) ** 2

    expected = F(forward.seed(x0)).dvalue
    errors = []

    def work():
        try:
            for _ in range(5):
                J = F(forward.seed(x0)).dvalue
                assert (J != expected).nnz == 0
                assert np.array_equal(J.indices, expected.indices)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # a thread that never called sparsegrad keeps numpy's allocator
    names = []
    t = threading.Thread(target=lambda: names.append(get_handler_name(np.empty(20000))))
    t.start()
    t.join()
    assert names == ["default_allocator"]


def _jacobian_bytes(J):
    return J.data.nbytes + J.indices.nbytes + J.indptr.nbytes


@needs_pool
def test_pool_limit_follows_the_largest_jacobian_unless_set(monkeypatch):
    monkeypatch.setattr(_memory, "_DEFAULT_POOL_BYTES", 2 ** 20)
    try:
        assert sparsegrad.memory_pool_limit("auto") == 2 ** 20
        J = sparsegrad.jacobian(lambda x: x ** 2 + x[::-1])(np.ones(100000))
        assert sparsegrad.memory_pool_limit() == 3 * _jacobian_bytes(J) > 2 ** 20
        sparsegrad.jacobian(lambda x: x ** 2)(np.ones(1000))   # (a smaller one keeps it)
        assert sparsegrad.memory_pool_limit() == 3 * _jacobian_bytes(J)
        assert sparsegrad.memory_pool_limit(2 ** 20) == 2 ** 20     # a cap, fixed
        sparsegrad.jacobian(lambda x: x ** 2 + x[::-1])(np.ones(200000))
        assert sparsegrad.memory_pool_limit() == 2 ** 20
    finally:
        monkeypatch.undo()
        sparsegrad.memory_pool_limit("auto")
    assert sparsegrad.memory_pool_limit() == _memory._DEFAULT_POOL_BYTES
