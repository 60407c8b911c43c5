"""Adversarial checks of the structure kept between evaluations (sparsegrad._structure):
never stale, and bit for bit as with the cache off, under threads too."""
import sys
import threading

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import sparsegrad
from sparsegrad import forward, _structure
from sparsegrad import _jacobian as jac
from sparsegrad.testing import numerical_jacobian
from asv_benchmarks.problems import PROBLEMS


pytestmark = pytest.mark.usefixtures("fresh_structure_cache")


@pytest.fixture
def eager_thread_switches():
    """Threads switch every microsecond: races show up in a few hundred calls."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def _same(a, b):
    for name in ("indptr", "indices", "data"):
        assert_array_equal(getattr(a, name), getattr(b, name))


def _in_threads(work, n_threads):
    """Run ``work()`` in ``n_threads`` threads started together; their results."""
    barrier = threading.Barrier(n_threads)
    results, errors = [], []

    def run():
        barrier.wait()
        try:
            results.append(work())
        except Exception as error:  # (re-raised in the test's thread)
            errors.append(error)
    threads = [threading.Thread(target=run) for _ in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def _shared_slices(x0):
    # x[1:-1] read twice: its terms share one matrix and are summed by row
    # factors; coefficients over 16 decades make any other order round otherwise
    rng = np.random.default_rng(0)
    a, b, c = (rng.uniform(-1, 1, x0.size - 2) * 10.0 ** rng.integers(-8, 8, x0.size - 2)
               for _ in range(3))

    def f(x):
        t1 = x[1:-1] * a
        t3 = x[1:-1] * c
        return t1 + (x[:-2] * b + x[2:] * b) + t3 + t1 * t3
    return f


def test_first_evaluations_in_threads_at_once_round_as_with_the_cache_off(
        eager_thread_switches):
    # sharing one structure, two first evaluations both missed x[1:-1] and the
    # later store replaced the other's matrix: one evaluation's two reads then
    # held different matrices and its sum was rounded differently (about 1 in
    # 25 results differed in the last bits); each thread now has its own
    x0 = np.random.default_rng(1).uniform(0.1, 1, 50)
    f = _shared_slices(x0)
    sparsegrad.structure_cache_limit(0)
    alone = f(forward.seed(x0)).dvalue
    sparsegrad.structure_cache_limit(2 ** 27)
    for _ in range(60):
        sparsegrad.clear_structure_cache()
        for J in _in_threads(lambda: f(forward.seed(x0)).dvalue, 4):
            _same(J, alone)
    np.testing.assert_allclose(alone.toarray(), numerical_jacobian(f, x0), rtol=1e-13)


def test_an_evaluation_keeps_its_entries_while_another_thread_fills_the_cache(
        eager_thread_switches):
    # another thread's 400 slices of a seed of the same size evicted this
    # evaluation's x[1:-1] between its two reads (its own 202 keys fit the
    # cache): the second read built another matrix, and the sum was rounded
    # differently
    x0 = np.random.default_rng(2).uniform(0.1, 1, 50)
    rng = np.random.default_rng(3)
    a, c = (rng.uniform(-1, 1, 48) * 10.0 ** rng.integers(-8, 8, 48) for _ in range(2))

    def f(x):
        t1 = x[1:-1] * a
        many = sum(x[i:j].sum() for i in range(10) for j in range(30, 50))
        t3 = x[1:-1] * c
        return t1 + x[2:] + t3 + t1 * t3 + 0 * many

    def churn(x):
        return sum(x[i:j].sum() for i in range(20, 40) for j in range(30, 50))
    sparsegrad.structure_cache_limit(0)
    alone = f(forward.seed(x0)).dvalue
    sparsegrad.structure_cache_limit(2 ** 27)
    done = threading.Event()

    def keep_churning():
        while not done.is_set():
            churn(forward.seed(x0))
    other = threading.Thread(target=keep_churning)
    other.start()
    try:
        results = [f(forward.seed(x0)).dvalue for _ in range(12)]
    finally:
        done.set()
        other.join()
    for J in results:
        _same(J, alone)


def test_values_gathered_in_several_threads_at_once_raise_nothing(eager_thread_switches):
    # the gathers of one matrix are one cache, reached here from four threads:
    # two evictions of its least recent entry at once raised KeyError ("dictionary
    # changed size during iteration" while the other deleted it)
    x = forward.seed(np.linspace(1.0, 2.0, 30))
    y = x[1:]
    expected = sum(y[k:k + 10] * (k + 1) for k in range(12)).dvalue.toarray()

    def work():
        for _ in range(150):
            J = sum(y[k:k + 10] * (k + 1) for k in range(12)).dvalue  # (9 keys > 8 kept)
            assert_array_equal(J.toarray(), expected)
        return True
    assert _in_threads(work, 4) == [True] * 4


def test_each_thread_of_a_large_pool_keeps_its_own_structure():
    # one structure per thread: more threads than seed sizes kept per thread
    # (_MAX_SIZES) must not push each other's out, or a pool rebuilds everything
    x0 = np.linspace(1.0, 2.0, 9)
    n_threads = _structure._MAX_SIZES + 4

    def work():
        first = forward.seed(x0)._jacobian.seed.structure
        (forward.seed(x0)[1:] * 2).dvalue                 # (stores an entry)
        return first, forward.seed(x0)._jacobian.seed.structure
    pairs = _in_threads(work, n_threads)
    assert all(first is again and first.shared for first, again in pairs)
    assert len({id(first) for first, _ in pairs}) == n_threads
    assert sparsegrad.structure_cache_info().sizes == (9,)


def test_seeds_of_one_size_and_other_shapes_find_only_their_own_movements():
    # the keys hold the operands' shapes: (6,), (2, 3) and (3, 2) share a structure
    # and the same calls, but not one row number; a base of an index view written
    # between evaluations is read again
    base = np.array([5, 0, 4, 1, 3, 2, 0, 1])
    index = base[1:7]

    def f(x):
        y = x.reshape(-1)[index]
        moved = (np.roll(x, np.int64(1), axis=-1).ravel() + np.flip(x).ravel()
                 + np.pad(x, 1, mode="wrap")[1:, :-1].ravel()[:6] if x.ndim == 2 else
                 np.roll(x, 1) + np.flip(x) + np.pad(x, (1, 0), mode="reflect")[:6])
        return np.sin(y) * moved + np.stack([x, 2 * x], axis=-1).ravel()[::2]
    rng = np.random.default_rng(4)
    points = [rng.uniform(1, 2, shape) for shape in [(6,), (2, 3), (3, 2)]]

    def write():
        base[1:7] = base[1:7][::-1]                       # the view's contents change
    sparsegrad.structure_cache_limit(0)
    alone = [f(forward.seed(x0)).dvalue for x0 in points]
    write()
    alone_written = [f(forward.seed(x0)).dvalue for x0 in points]
    write()
    sparsegrad.structure_cache_limit(2 ** 27)
    for _ in range(2):
        for x0, J in zip(points, alone):
            _same(f(forward.seed(x0)).dvalue, J)
    write()                                               # (what was kept stays)
    for _ in range(2):
        for x0, J in zip(points, alone_written):
            _same(f(forward.seed(x0)).dvalue, J)
    for x0, J in zip(points, alone_written):
        np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, x0), rtol=1e-13,
                                   atol=1e-15)


def test_negative_index_arrays_are_kept_and_shared_like_the_others():
    # x[i - 1] with i = 0 reads the last element, as numpy: the copy holds the
    # row numbers counted from the end, so both reads share one matrix
    n = 50
    west = np.arange(n) - 1
    f = lambda x: x[west] * x - x[west] ** 2
    x0 = np.linspace(0.5, 1.5, n)
    y = f(forward.seed(x0))
    assert len(y._jacobian.terms) == 2
    y.dvalue  # (the merged pattern too is found again below)
    before = sparsegrad.structure_cache_info()
    J = f(forward.seed(x0)).dvalue
    after = sparsegrad.structure_cache_info()
    assert after.misses == before.misses
    np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, x0, method="complex"),
                               rtol=1e-14)
    with pytest.raises(IndexError):
        forward.seed(x0)[np.array([0, -n - 1])]


def test_index_arrays_made_afresh_every_call_do_not_empty_the_cache():
    # every call reads a new index array: its entries are evicted least recently
    # used, so what is held stays bounded while the running count of bytes
    # stored grows past it; the stable entries (x[1:-1]) keep hitting
    n = 400
    x0 = np.linspace(0.5, 1.5, n)
    f = lambda x, k: x[1:-1] * x[(np.arange(n) + k) % n][1:-1]
    for k in range(3 * jac.MAX_INDEX_ROWS):
        before = sparsegrad.structure_cache_info()
        J = f(forward.seed(x0), k).dvalue
        after = sparsegrad.structure_cache_info()
        assert k == 0 or after.hits > before.hits
    assert after.held_bytes < 4 * 2 ** 20             # (far below the running count)
    expected = numerical_jacobian(lambda x: f(x, k), x0, method="complex")
    np.testing.assert_allclose(J.toarray(), expected, rtol=1e-14)


@pytest.mark.parametrize("seeding", [forward.seed, forward.seed_sparsity])
def test_short_lists_of_ints_are_kept_by_their_numbers(seeding):
    # f[[0, -1]] makes a new list, hence a new array, at every call: the read's
    # matrix is kept under the list's numbers
    x0 = np.linspace(0.5, 1.5, 9)
    f = lambda x: np.concatenate([x[[0, -1]] * 2.0, x[1:-1] * x[[2, 3, 4, 5, 6, 7, 8]]])
    J = seeding(x0)
    first = f(J).dvalue
    before = sparsegrad.structure_cache_info()
    again = f(seeding(x0)).dvalue
    after = sparsegrad.structure_cache_info()
    assert after.misses == before.misses and after.hits > before.hits
    for name in ("indptr", "indices", "data"):
        assert_array_equal(getattr(again, name), getattr(first, name))
    if seeding is forward.seed:
        np.testing.assert_allclose(again.toarray(), numerical_jacobian(f, x0, method="complex"),
                                   rtol=1e-14)
        assert_array_equal(f(forward.seed(x0)).value, f(x0))
    for bad in ([0, 9], [-10]):
        with pytest.raises(IndexError):
            seeding(x0)[bad]
    assert_array_equal(seeding(x0)[[True] * 9].value, x0)       # (a mask, not numbers)


def test_kept_patterns_are_not_shared_with_the_matrices_handed_out():
    # sparsity mode keeps merged patterns; .dvalue gets copies the caller may change
    residual, x0 = PROBLEMS["sw"].setup(6)
    first = residual(forward.seed_sparsity(x0)).dvalue
    expected = first.indices.copy()
    first.indices[:] = 0
    again = residual(forward.seed_sparsity(x0)).dvalue
    assert_array_equal(again.indices, expected)
    sparsegrad.structure_cache_limit(0)
    alone = residual(forward.seed_sparsity(x0)).dvalue
    assert_array_equal(alone.indices, expected)
    assert_array_equal(alone.indptr, again.indptr)
