"""Bugs found in the supporting modules: the testing oracles, the settings, the pool."""
import concurrent.futures
import os
import subprocess
import sys

import numpy as np
import pytest

import sparsegrad
from sparsegrad import forward, _memory, _threads
from sparsegrad._fast import compiled
from sparsegrad.testing import check_jacobian, numerical_jacobian

needs_compiled = pytest.mark.skipif(compiled is None, reason="compiled kernels not in use")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- sparsegrad.testing -------------------------------------------------------

def _doubles_its_argument(x):
    x *= 2.0          # writes into its argument: f(x) = 4 x**2
    return x ** 2


@pytest.mark.parametrize("method", ["complex", "central"])
def test_numerical_jacobian_of_a_function_writing_into_its_argument(method):
    # the first evaluation (f at x) moved the point of every later column:
    # 16 x instead of 8 x
    x0 = np.array([1.0, 2.0, 3.0])
    J = numerical_jacobian(_doubles_its_argument, x0, method=method)
    np.testing.assert_allclose(J, np.diag([8.0, 16.0, 24.0]), rtol=1e-8)
    np.testing.assert_array_equal(x0, [1.0, 2.0, 3.0])


def test_check_jacobian_leaves_the_users_array_alone():
    # check_jacobian called f on the user's own x (doubling it), and then
    # compared with a reference taken at the doubled point
    x0 = np.array([1.0, 2.0, 3.0])
    y = check_jacobian(_doubles_its_argument, x0)
    np.testing.assert_array_equal(x0, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(y.dvalue.toarray(), np.diag([8.0, 16.0, 24.0]), rtol=1e-12)


def test_numerical_jacobian_of_a_function_returning_one_buffer():
    # f(x + h) was overwritten by f(x - h) in the same buffer: a zero Jacobian
    buffer = np.zeros(2)

    def f(x):
        buffer[:] = x ** 2
        return buffer

    J = numerical_jacobian(f, np.array([1.0, 2.0]), method="central")
    np.testing.assert_allclose(J, [[2.0, 0.0], [0.0, 4.0]], rtol=1e-8)


def test_numerical_jacobian_refuses_forward_value_results():
    # a function that closes over a forward value returned one for plain
    # arrays: the reference was a (1, 3) object array of zeros
    y = forward.seed(np.ones(3))
    with pytest.raises(TypeError, match="forward value"):
        numerical_jacobian(lambda x: x * y, np.ones(3))
    with pytest.raises(TypeError, match="not numbers"):
        numerical_jacobian(lambda x: np.array(["a"] * x.size), np.ones(3), "central")


@pytest.mark.parametrize("method, step", [("complex", 0.0), ("complex", np.inf),
                                          ("central", 0.0), ("central", 1e-30)])
def test_numerical_jacobian_refuses_vanishing_steps(method, step):
    # a NaN Jacobian (0 / 0) came back without a word
    with pytest.raises(ValueError, match="step"):
        numerical_jacobian(np.sin, np.array([1.0, 2.0]), method=method, step=step)


# ---- settings: environment and setters ----------------------------------------

@pytest.mark.parametrize("name, read", [
    ("SPARSEGRAD_MEMORY_POOL_BYTES", _memory._initial_limit),
    ("SPARSEGRAD_NUM_THREADS", _threads._default_threads)])
@pytest.mark.parametrize("text, message", [
    ("99999999999999999999999", "must be <="),    # was an OverflowError naming nothing
    ("\u0663", "must be a number")])               # an Arabic-Indic 3 was taken for 3
def test_environment_values_out_of_range_name_the_variable(monkeypatch, name, read, text,
                                                            message):
    monkeypatch.setenv(name, text)
    with pytest.raises(ValueError, match=name + " " + message):
        read()


def test_environment_maximum_is_accepted(monkeypatch):
    monkeypatch.setenv("SPARSEGRAD_MEMORY_POOL_BYTES", str(_memory._MAX_POOL_BYTES))
    assert _memory._initial_limit() == _memory._MAX_POOL_BYTES
    monkeypatch.setenv("SPARSEGRAD_NUM_THREADS", str(2 ** 31 - 1))
    assert _threads._default_threads() == 2 ** 31 - 1


@pytest.mark.parametrize("variable", ["SPARSEGRAD_NUM_THREADS",
                                      "SPARSEGRAD_MEMORY_POOL_BYTES"])
def test_bad_environment_is_refused_with_the_reference_kernels_too(variable):
    # without the compiled kernels the variables were not read at all
    env = dict(os.environ, SPARSEGRAD_PURE_PYTHON="1", **{variable: "four"})
    proc = subprocess.run([sys.executable, "-c", "import sparsegrad"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert variable + " must be a number" in proc.stderr


def test_set_num_threads_beyond_a_c_int_is_refused_clearly():
    previous = sparsegrad.get_num_threads()
    try:
        with pytest.raises(ValueError, match="set_num_threads"):
            sparsegrad.set_num_threads(2 ** 31)
        assert sparsegrad.get_num_threads() == previous
    finally:
        sparsegrad.set_num_threads(previous)


def test_byte_counts_must_be_whole_and_in_range():
    previous = sparsegrad.memory_pool_limit()
    try:
        # 1.5 bytes was truncated to 1, "100" was taken as 100, 2**64 overflowed
        with pytest.raises(ValueError, match="whole number"):
            sparsegrad.memory_pool_limit(1.5)
        with pytest.raises(ValueError, match="whole number"):
            sparsegrad.memory_pool_limit(float("nan"))
        with pytest.raises(TypeError, match="whole number"):
            sparsegrad.memory_pool_limit("100")
        with pytest.raises(ValueError, match="must lie in"):
            sparsegrad.memory_pool_limit(2 ** 64)
        with pytest.raises(ValueError, match="whole number"):
            sparsegrad.keep_freed_memory(1.5)
        assert sparsegrad.memory_pool_limit() == previous
        # an integral float is a byte count
        expected = 64 * 10 ** 6 if _memory._pool is not None else 0
        assert sparsegrad.memory_pool_limit(64e6) == expected
    finally:
        sparsegrad.memory_pool_limit(previous)


# ---- checks that found nothing wrong (kept: they guard what the brief promises) --

def _big_residual(n):
    idx = np.arange(n)
    far, farther = (idx * 7919) % n, (idx * 104729) % n

    def F(x):
        return (x * np.roll(x, 1) + np.sin(x)[::-1] + x[far] * x[farther]
                - 3.0 * np.roll(x, -5))
    return F


@needs_compiled
def test_large_merges_equal_for_one_to_four_threads_and_concurrent_callers():
    # default split threshold: merges of >= 2**19 entries run in threads
    F = _big_residual(120000)
    x0 = np.linspace(0.1, 2.0, 120000)
    previous = sparsegrad.get_num_threads()
    try:
        sparsegrad.set_num_threads(1)
        want = F(forward.seed(x0)).dvalue
        assert want.nnz >= 2 ** 19
        for threads in (2, 3, 4):
            sparsegrad.set_num_threads(threads)
            got = F(forward.seed(x0)).dvalue
            for field in ("indptr", "indices", "data"):
                np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
        failures = []

        def work():
            J = F(forward.seed(x0)).dvalue
            if not all(np.array_equal(getattr(J, f), getattr(want, f))
                       for f in ("indptr", "indices", "data")):
                failures.append(J)

        with concurrent.futures.ThreadPoolExecutor(3) as callers:
            for done in [callers.submit(work) for _ in range(3)]:
                done.result()
        assert not failures
    finally:
        sparsegrad.set_num_threads(previous)


def test_results_survive_the_pool_and_equal_with_it_off():
    F = _big_residual(30000)
    x0 = np.linspace(0.1, 2.0, 30000)
    previous = sparsegrad.memory_pool_limit()
    try:
        y = F(forward.seed(x0))
        value, J = y.value, y.dvalue
        kept = value.copy(), J.data.copy(), J.indices.copy(), J.indptr.copy()
        del y
        sparsegrad.release_memory_pool()
        sparsegrad.memory_pool_limit(0)
        off = F(forward.seed(x0 + 1.0)).dvalue   # reuses whatever was freed
        del off
        off = F(forward.seed(x0)).dvalue
        for got, want in zip((value, J.data, J.indices, J.indptr), kept):
            np.testing.assert_array_equal(got, want)
        for field in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(off, field), getattr(J, field))
    finally:
        sparsegrad.memory_pool_limit(previous)
