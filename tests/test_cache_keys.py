"""Every cache states its key: each test changes one thing a cached result
depends on, alone, and checks that the result follows.

References are numpy's values and complex-step Jacobians (exact to rounding
for these functions; chosen so that a stale entry gives another matrix), and
for other dtypes the same evaluations with nothing kept between them.
"""
import gc
import threading

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import sparsegrad
from sparsegrad import forward
from sparsegrad.testing import numerical_jacobian

pytestmark = pytest.mark.usefixtures("fresh_structure_cache")


def _reference(f, x0):
    return f(x0), numerical_jacobian(f, x0, method="complex")


def _check(f, x0, seeding=forward.seed):
    """``f`` at a seed of ``x0``: its value and Jacobian (in sparsity mode its
    pattern: these functions have no entry that cancels) as numpy's."""
    value, expected = _reference(f, x0)
    y = f(seeding(x0))
    if seeding is forward.seed_sparsity:
        assert_array_equal(y.dvalue.toarray(), expected != 0)
    else:
        assert_array_equal(y.value, value)
        assert_allclose(y.dvalue.toarray(), expected, rtol=1e-14, atol=1e-300)


def _check_all_ways(f, x0):
    """``f`` through every entry point that reads index arrays: eager values,
    sparsity, ``jvp``, ``jacobian`` and ``value_and_jacobian`` (eager and
    recorded)."""
    value, expected = _reference(f, x0)
    _check(f, x0)
    _check(f, x0, forward.seed_sparsity)
    direction = np.linspace(1.0, 2.0, x0.size)
    v, product = sparsegrad.jvp(f, x0, direction)
    assert_array_equal(v, value)
    assert_allclose(product, expected @ direction, rtol=1e-14)
    assert_allclose(sparsegrad.jacobian(f)(x0).toarray(), expected, rtol=1e-14)
    for trace in (False, True):
        v, J = sparsegrad.value_and_jacobian(f, trace=trace)(x0)
        assert_array_equal(v, value)
        assert_allclose(J.toarray(), expected, rtol=1e-14)


SEEDINGS = [forward.seed, forward.seed_sparsity]


# ---- index copies (Structure.index_rows): id, length read, contents ----------

def test_one_negative_index_array_read_from_values_of_two_lengths():
    # the rows of a[-1] are 2 for a 3-vector, 3 for a 4-vector: the same
    # array object read from both in one evaluation
    last = np.array([-1])

    def f(u):
        flux = u[1:] - u[:-1]
        return np.concatenate([flux[last], u[last]])
    _check_all_ways(f, np.array([1.0, 2.0, 4.0, 8.0]))


def test_the_length_read_alone_changes_with_nothing_kept_too():
    last = np.array([-1, 0, -2])
    f = lambda u: (u[1:] * u[:-1])[last] + u[last]
    x0 = np.linspace(1.0, 2.0, 6)
    sparsegrad.structure_cache_limit(0)
    _check_all_ways(f, x0)


def test_a_length_changed_by_a_mask_between_calls():
    index = np.array([-1, -2])
    x0 = np.linspace(1.0, 2.0, 8)
    for mask in (x0 > 1.2, x0 > 1.6, x0 > 1.2, x0 > 0.0):
        f = lambda u: u[mask][index] * u[mask][0]
        _check_all_ways(f, x0)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_an_out_of_range_read_after_another_length_is_numpy_s_index_error(seeding):
    index = np.array([-3])
    x = seeding(np.linspace(1.0, 2.0, 5))
    x[index]
    with pytest.raises(IndexError, match="index -3 is out of bounds for axis 0 with size 2"):
        (x[3:] * 2)[index]


def test_the_runs_of_a_negative_index_array_follow_the_length():
    # arange(n) - 1 is two runs, [-1] and 0..n-2, whose rows depend on the
    # length: n - 1 first for n values, n for n + 1 values
    n = 40
    west = np.arange(n) - 1
    x0 = np.linspace(1.0, 2.0, n + 1)
    f = lambda u: u[:n][west] * u[:n] + (u * u)[west] + u[1:][west]
    for seeding in SEEDINGS:
        _check(f, x0, seeding)
        _check(f, x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_an_index_array_written_in_place_between_calls(seeding):
    index = np.array([3, 0, 2, -1])
    f = lambda u: u[index] * u[::-1] + (2 * u)[index]
    x0 = np.linspace(1.0, 2.0, 4)
    _check(f, x0, seeding)
    index[:] = [1, -4, 0, 2]                         # same object, same id
    _check(f, x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_new_index_arrays_at_a_reused_id(seeding):
    x0 = np.linspace(1.0, 2.0, 9)
    rng = np.random.default_rng(1)
    ids = set()
    for _ in range(40):
        index = rng.integers(-9, 9, 9)
        ids.add(id(index))
        f = lambda u: u[index] * u + (u * u)[index]
        _check(f, x0, seeding)
        del index, f
        gc.collect()
    assert len(ids) < 40                              # (ids did come back)


def test_index_arrays_of_other_integer_dtypes_read_the_same_rows():
    x0 = np.linspace(1.0, 2.0, 6)
    numbers = [5, -1, 0, 2, -6, 3]
    for dtype in (np.int64, np.int32, np.int16, np.uint8, np.int64):
        if np.dtype(dtype).kind == "u":
            numbers = [n % 6 for n in numbers]
        index = np.array(numbers, dtype=dtype)
        for seeding in SEEDINGS:
            _check(lambda u: u[index] * u, x0, seeding)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.float32])
def test_one_index_array_on_values_of_other_dtypes(dtype):
    index = np.array([2, -1, 0])
    x0 = np.array([1.0, 2.0, 3.0, 5.0], dtype=dtype)
    y = forward.seed(x0)
    z = y[index] * y[:3]
    assert z.dtype == dtype and z.dvalue.dtype == dtype
    assert_array_equal(z.value, x0[index] * x0[:3])
    expected = np.zeros((3, 4), dtype)
    expected[np.arange(3), [2, 3, 0]] += x0[:3]
    expected[np.arange(3), [0, 1, 2]] += x0[index]
    assert_array_equal(z.dvalue.toarray(), expected)


def test_each_thread_reads_with_its_own_structure():
    # a seed's structure is its thread's: reads of one index array from values
    # of other lengths in other threads never meet
    index = np.array([-1, 0, -2])
    results, errors = {}, []

    def work(n):
        try:
            x0 = np.linspace(1.0, 2.0, n)
            f = lambda u: u[index] * u[1] + u[:-1][index]
            for _ in range(5):
                y = f(forward.seed(x0))
                assert_allclose(y.dvalue.toarray(), numerical_jacobian(f, x0), rtol=1e-14)
            results[n] = y._jacobian.seed.structure
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(8,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    main = forward.seed(np.zeros(8))._jacobian.seed.structure
    assert results[8] is not main
