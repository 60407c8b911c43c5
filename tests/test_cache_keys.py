"""Every cache states its key: each test changes one thing a cached result
depends on, alone, and checks that the result follows.

The caches are listed, with their keys, in docs/architecture.md ("Caches").
References are numpy's values and complex-step Jacobians (exact to rounding
for these functions; chosen so that a stale entry gives another matrix), and
for other dtypes the same evaluations with nothing kept between them.
"""
import gc
import threading

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

import sparsegrad
from sparsegrad import _jacobian as jac
from sparsegrad import forward, linalg
from sparsegrad.gpu._device import fake
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
    ids, reused = set(), 0
    for k in range(400):  # (until ids came back a few times: the allocator decides when)
        index = rng.integers(-9, 9, 9)
        reused += id(index) in ids
        ids.add(id(index))
        f = lambda u: u[index] * u + (u * u)[index]
        _check(f, x0, seeding)
        del index, f
        gc.collect()
        if reused >= 3 and k >= 40:
            break
    assert reused >= 3


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


# ---- the largest row of an index copy (deferred reads, sparsity mode) ---------

def test_the_largest_row_follows_contents_and_length():
    index = np.array([0, 2])
    x = forward.seed_sparsity(np.linspace(1.0, 2.0, 5))
    (x * 2)[index]
    index[1] = 4                                      # past a 4-vector's end now
    (x * 2)[index]
    with pytest.raises(IndexError):
        (x[1:] * 2)[index]
    index[1] = -4
    pattern = (x[1:] * 2)[index].dvalue.toarray()
    assert_array_equal(pattern.nonzero()[1], [1, 1])


# ---- gathers (Structure.selections, CSR.gathers): by the key of the rows ------

@pytest.mark.parametrize("seeding", SEEDINGS)
def test_one_slice_of_values_of_other_shapes(seeding):
    x0 = np.linspace(1.0, 2.0, 12)
    _check(lambda u: u.reshape(3, 4)[1:].ravel() * u[:8] + u[1:9], x0, seeding)
    _check(lambda u: u.reshape(4, 3)[1:].ravel() * u[:9] + u[1:10], x0, seeding)
    # (a selection's own gathers: one slice of matrices of other rows)
    _check(lambda u: u[2:][1:4] * u[::2][1:4] + u[1:][1:4] + u[:6][1:4], x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_one_short_list_on_values_of_other_lengths(seeding):
    x0 = np.linspace(1.0, 2.0, 7)
    _check(lambda u: u[[0, -1]] * u[1:][[0, -1]] + u[:-2][[0, -1]], x0, seeding)
    _check(lambda u: u[[0, -2]] * u[1:][[0, -2]], x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_one_value_broadcast_to_other_shapes(seeding):
    x0 = np.linspace(1.0, 2.0, 6)
    for shape in ((3, 2), (2, 2), (2, 3, 2)):
        _check(lambda u: (np.broadcast_to(u[:2], shape) * u[0]).ravel(), x0, seeding)
        _check(lambda u: (u[:2] * 2 - u.reshape(3, 2)).ravel(), x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_one_index_array_gathered_from_other_matrices(seeding):
    index = np.array([1, 0, 2])
    x0 = np.linspace(1.0, 2.0, 5)
    _check(lambda u: u[1:4][index] + u[2:][index] * u[:3][index], x0, seeding)


# ---- row numbers of data movements (Structure.moves) --------------------------

@pytest.mark.parametrize("seeding", SEEDINGS)
def test_a_movement_s_arguments_alone(seeding):
    x0 = np.linspace(1.0, 2.0, 6)
    for shift in (1, 2, -1, np.int64(2), 1):
        _check(lambda u: np.roll(u, shift) * u, x0, seeding)
    for axis in (0, 1, None, 0):
        _check(lambda u: np.roll(u.reshape(2, 3), 1, axis=axis).ravel() * u, x0, seeding)
    for mode in ("edge", "wrap", "reflect", "symmetric", "constant", "edge"):
        _check(lambda u: np.pad(u, (1, 2), mode=mode) + np.pad(u, 1)[0], x0, seeding)
    for width in ((1, 2), (2, 1), [(1, 2)], (0, 0)):
        _check(lambda u: np.pad(u, width, mode="edge") * u[0], x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_a_movement_s_operand_shapes_alone(seeding):
    x0 = np.linspace(1.0, 2.0, 8)
    for k in (2, 3, 2):
        _check(lambda u: np.stack([u[:k], u[k:2 * k]], axis=1).ravel() * u[0], x0, seeding)
        _check(lambda u: np.concatenate([u[:k], np.ones(k)]) * u[0], x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_a_movement_s_forward_and_constant_operands_alone(seeding):
    # same function, arguments and shapes: a constant gives zero rows
    x0 = np.linspace(1.0, 2.0, 6)
    c = np.full(3, 7.0)
    _check(lambda u: np.stack([u[:3], u[3:]]).ravel() * u[0], x0, seeding)
    _check(lambda u: np.stack([u[:3], c]).ravel() * u[0], x0, seeding)
    _check(lambda u: np.stack([c, u[3:]]).ravel() * u[0], x0, seeding)
    _check(lambda u: np.stack([u[:3], u[3:]]).ravel() * u[0], x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_scattered_writes_by_an_index_array_written_in_place(seeding):
    # an assembly's row numbers are kept by its layout and compared at every
    # evaluation
    index = np.array([0, 3, 5])
    rest = np.array([1, 2, 4])

    def f(u):
        out = np.zeros(6, dtype=u.dtype, like=u)
        out[index] = u[rest] ** 2
        out[rest] = u[index] * 3
        return out
    x0 = np.linspace(1.0, 2.0, 6)
    _check(f, x0, seeding)
    index[:], rest[:] = [5, 1, 2], [0, 3, 4]
    _check(f, x0, seeding)


# ---- merged patterns (sparsity) and merge plans (values) ----------------------

@pytest.mark.parametrize("seeding", SEEDINGS)
def test_a_merge_whose_term_changes_pattern_alone(seeding):
    a, b = np.array([1, 2, 3, 0]), np.array([3, 0, 1, 2])
    f = lambda u: u[a] * u + u[b] * 2
    x0 = np.linspace(1.0, 2.0, 4)
    for _ in range(3):                                # (a plan is made at the second)
        _check(f, x0, seeding)
    b[:] = [2, 3, 0, 1]
    for _ in range(2):
        _check(f, x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_a_merge_whose_row_layout_alone_changes(seeding):
    x0 = np.linspace(1.0, 2.0, 6)
    p = lambda u: u[:3] + u[1:4] * u[2:5]
    q = lambda u: u[3:] * u[:3] + u[2:5]
    for order in ((p, q), (q, p), (p, q), (p, p)):
        for _ in range(2):
            _check(lambda u: np.concatenate([order[0](u), order[1](u)]), x0, seeding)


def test_a_kept_plan_with_other_values():
    f = lambda u: u[1:] * u[:-1] + np.exp(u[:-1]) - u[1:] ** 3
    for x0 in (np.linspace(1.0, 2.0, 7), np.linspace(-1.0, 3.0, 7), np.linspace(1.0, 2.0, 7)):
        _check(f, x0)


@pytest.mark.parametrize("dtypes", [(np.float64, np.float32, np.float64),
                                    (np.float32, np.float64, np.complex128, np.float64)])
def test_merges_of_one_pattern_in_other_dtypes(dtypes):
    # seeds of one size share their structure, whatever their dtype: plans
    # are for float64, and the data of each dtype are its own
    f = lambda u: u[1:] * u[:-1] + u[:-1] * 3 - u[1:] ** 2
    x0 = np.linspace(1.0, 2.0, 7)
    sparsegrad.structure_cache_limit(0)
    alone = {}
    for dtype in set(dtypes):
        alone[dtype] = f(forward.seed(x0.astype(dtype))).dvalue
    sparsegrad.structure_cache_limit(2 ** 27)
    for dtype in dtypes:
        for _ in range(2):
            J = f(forward.seed(x0.astype(dtype))).dvalue
            assert J.dtype == dtype
            assert_array_equal(J.indptr, alone[dtype].indptr)
            assert_array_equal(J.indices, alone[dtype].indices)
            assert_array_equal(J.data, alone[dtype].data)


def test_values_and_patterns_of_one_size_keep_apart():
    # a value seed and a sparsity seed of one size share a structure: merged
    # patterns for the one, plans for the other
    f = lambda u: u[1:] * u[:-1] + np.roll(u, 1)[1:]
    x0 = np.linspace(1.0, 2.0, 6)
    for seeding in SEEDINGS * 3:
        _check(f, x0, seeding)


# ---- constant matrices of A @ x (Structure.matrices) and their products -------

def _laplacian(n):
    return sp.diags([np.ones(n - 1), -2.0 * np.ones(n), np.ones(n - 1)], [-1, 0, 1]).tocsr()


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_a_constant_matrix_written_in_place(seeding):
    A = _laplacian(5)
    f = lambda u: A @ (u * u) + u
    x0 = np.linspace(1.0, 2.0, 5)
    for _ in range(2):
        _check(f, x0, seeding)
    A.data[:] = np.arange(1.0, A.nnz + 1)             # values alone
    for _ in range(2):
        _check(f, x0, seeding)
    A.indices[:3] = [1, 0, 2]                         # pattern alone (same arrays)
    A.has_sorted_indices = False
    for _ in range(2):
        _check(f, x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_constant_matrices_in_other_formats_on_one_memory(seeding):
    # format alone: CSR and CSC on the same three arrays are transposes
    A = _laplacian(4)
    A.data[:] = np.arange(1.0, A.nnz + 1)
    B = sp.csc_matrix((A.data, A.indices, A.indptr), shape=A.shape)
    x0 = np.linspace(1.0, 2.0, 4)
    for M in (A, B, A, B):
        _check(lambda u: M @ u + u * u, x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_constant_matrices_of_other_dtypes_on_one_memory(seeding):
    # dtype alone: the data's address is the same
    memory = np.arange(1.0, 17.0, dtype=np.float32)
    narrow = memory[:4]
    wide = memory.view(np.float64)[:4]
    indptr, indices = np.array([0, 2, 4]), np.array([0, 1, 0, 1])
    x0 = np.array([1.0, 3.0])
    for data in (wide, narrow, wide):
        M = sp.csr_matrix((np.ones(4), indices, indptr), shape=(2, 2))
        M.data = data                                 # (scipy's constructor copies)
        assert M.data.__array_interface__["data"][0] == memory.__array_interface__["data"][0]
        _check(lambda u: M @ u + u * u, x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_constant_matrices_of_other_shapes_on_one_memory(seeding):
    # shape alone: DIA matrices of the same offsets and data
    offsets, data = np.array([0, 1]), np.arange(1.0, 9.0).reshape(2, 4)
    x0 = np.linspace(1.0, 2.0, 4)
    for shape in ((4, 4), (3, 4), (4, 4), (2, 4)):
        M = sp.dia_matrix((data, offsets), shape=shape)
        for _ in range(2):
            _check(lambda u: M @ u + u[:shape[0]] ** 2, x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_a_constant_matrix_s_forms_alone(seeding):
    # one matrix times a vector, from the left and the right, and times 2-d
    # values (Kronecker products with identities)
    A = _laplacian(4)
    A.data[:] = np.arange(1.0, A.nnz + 1)
    x0 = np.linspace(1.0, 2.0, 8)
    for _ in range(2):
        _check(lambda u: A @ u[:4] + u[4:] @ A, x0, seeding)
        _check(lambda u: (A @ u.reshape(4, 2)).ravel() + u, x0, seeding)
        _check(lambda u: (u.reshape(2, 4) @ A).ravel() + u, x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_the_product_pattern_follows_the_jacobian_s_pattern_alone(seeding):
    # A fixed, the Jacobian it multiplies gathered by an index written in place
    A = _laplacian(5)
    index = np.array([1, 2, 3, 4, 0])
    f = lambda u: A @ u[index] + u
    x0 = np.linspace(1.0, 2.0, 5)
    for _ in range(3):
        _check(f, x0, seeding)
    index[:] = [4, 0, 1, 2, 3]
    for _ in range(3):
        _check(f, x0, seeding)


# ---- coefficient matrices of products with dense constants --------------------

@pytest.mark.parametrize("seeding", SEEDINGS)
def test_a_dense_constant_written_in_place(seeding):
    D = np.arange(1.0, 10.0).reshape(3, 3)
    f = lambda u: D @ u + u * u
    x0 = np.linspace(1.0, 2.0, 3)
    for _ in range(2):
        _check(f, x0, seeding)
    D[0, 1] = 0.0                                     # a pattern dropped too
    D[2, 2] = -5.0
    for _ in range(2):
        _check(f, x0, seeding)


@pytest.mark.parametrize("seeding", SEEDINGS)
def test_a_dense_constant_s_strides_and_subscripts_alone(seeding):
    D = np.arange(1.0, 10.0).reshape(3, 3)
    x0 = np.linspace(1.0, 2.0, 3)
    for _ in range(2):
        _check(lambda u: D @ u + u, x0, seeding)
        _check(lambda u: D.T @ u + u, x0, seeding)     # the same memory, transposed
        _check(lambda u: np.einsum("ji,j->i", D, u) + u, x0, seeding)
        _check(lambda u: u @ D + u, x0, seeding)       # the forward operand first


@pytest.mark.parametrize("dtypes", [(np.float64, np.float32, np.float64),
                                    (np.float32, np.complex64, np.float32)])
def test_products_of_values_of_other_dtypes(dtypes):
    # the coefficients of a sum are ones of the value's dtype
    x0 = np.linspace(1.0, 2.0, 4)
    for dtype in dtypes:
        for _ in range(2):
            y = np.sum(forward.seed(x0.astype(dtype)) * 3)
            assert y.dvalue.dtype == dtype
            assert_array_equal(y.dvalue.toarray(), np.full((1, 4), 3, dtype))


# ---- the structure of one seed size, thread and device ------------------------

def test_structures_are_per_size_and_thread():
    # (and device: test_structure.py)
    structure = lambda x: x._jacobian.seed.structure
    a, b = forward.seed(np.zeros(4)), forward.seed(np.zeros(5))
    assert structure(a) is not structure(b)
    assert structure(forward.seed(np.zeros(4))) is structure(a)
    assert structure(forward.seed_sparsity(np.zeros((2, 2)))) is structure(a)
    other = []
    t = threading.Thread(target=lambda: other.append(structure(forward.seed(np.zeros(4)))))
    t.start()
    t.join()
    assert other[0] is not structure(a)


def test_a_seed_of_another_shape_and_size_one_finds_only_its_own_gathers():
    # a 0-d seed and jvp (one column) have seeds of size 1
    x = forward.seed(np.float64(3.0))
    y = np.broadcast_to(x, (3,)) * x
    assert_array_equal(y.dvalue.toarray(), [[6.0]] * 3)
    value, product = sparsegrad.jvp(lambda u: u[np.array([-1, 0])] * u[0],
                                    np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 0.0]))
    assert_array_equal(product, [3.0, 2.0])


# ---- recorded programs (value_and_jacobian(trace=True)) -----------------------

def _check_recorded(g, f, x0):
    value, J = g(x0)
    expected_value, expected = _reference(f, x0)
    assert_array_equal(value, expected_value)
    assert_allclose(J.toarray(), expected, rtol=1e-14, atol=1e-300)


def test_a_program_s_index_array_written_in_place_and_read_at_another_length():
    index = np.array([-1, 0, 2])
    f = lambda u: np.concatenate([(u[1:] * u[:-1])[index], u[index]])
    g = sparsegrad.value_and_jacobian(f, trace=True)
    for n in (5, 5, 6, 5):
        _check_recorded(g, f, np.linspace(1.0, 2.0, n))
    index[:] = [0, -2, 1]
    _check_recorded(g, f, np.linspace(1.0, 2.0, 5))
    assert g.cache_info().fallbacks == 0


def test_a_program_s_scalars_exponents_and_shifts_alone():
    x0 = np.linspace(1.0, 2.0, 6)
    for c, p, shift in ((2.0, 2.0, 1), (3.0, 2.0, 1), (3.0, 3.0, 1), (3.0, 3.0, 2),
                        (2.0, 2.0, 1)):
        f = lambda u: c * u ** p + np.roll(u, shift) * u
        g = sparsegrad.value_and_jacobian(f, trace=True)
        _check_recorded(g, f, x0)
        _check_recorded(g, f, x0)


def test_a_program_s_scalars_change_between_calls_of_one_function():
    # the results of a program's scalar steps are kept for the last call's
    # scalars, by their bits and types
    x0 = np.linspace(1.0, 2.0, 5)
    scalar = [2.0]
    f = lambda u: (u * scalar[0]) * (scalar[0] + 1.0) + u[::-1]
    g = sparsegrad.value_and_jacobian(f, trace=True)
    for c in (2.0, 3.0, 3, 3.0, -0.0, 0.0, -0.0, 2.0):
        scalar[0] = c
        value, J = g(x0)
        expected_value, expected = _reference(f, x0)
        assert_array_equal(value, expected_value)
        assert_allclose(J.toarray(), expected, rtol=1e-14)


def test_a_program_s_constants_of_another_dtype_alone():
    mask = np.array([True, False, True, True])
    f = lambda u: u * c + u[::-1]
    g = sparsegrad.value_and_jacobian(f, trace=True)
    for c in (mask, mask.astype(np.float64), np.array([2.0, 0.5, 1.0, 3.0]), mask):
        _check_recorded(g, f, np.linspace(1.0, 2.0, 4))


# ---- factorisations kept by a SuperLU object, per working dtype ----------------

def test_factorisations_per_dtype_and_a_snapshot_of_the_matrix():
    A = sp.csc_matrix(np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]]))
    lu = linalg.splu(A)
    before = A.toarray()
    A.data[:] = 1.0                                   # after the factorisation
    for b in (np.ones(3), np.ones(3, np.float32), np.array([1j, 2, 3]), np.ones(3)):
        x = lu.solve(b)
        assert_allclose(before @ x, b, rtol=1e-6 if x.dtype.itemsize <= 8 else 1e-13)
        assert x.dtype == np.result_type(b.dtype, before.dtype)


# ---- small memos on immutable objects ----------------------------------------

def test_shared_ranges_per_length_and_array_module():
    assert jac._arange(4) is jac._arange(4) and len(jac._arange(5)) == 5
    assert_array_equal(jac._arange(3), [0, 1, 2])
    assert type(jac._arange(3, fake)) is not np.ndarray


def test_the_pattern_a_key_names_is_held_by_the_entry():
    # merge keys name matrices by the ids of their pattern arrays; the entry
    # holds the matrices, so that no id is reused while it lives
    f = lambda u: u[1:] + u[:-1] * 2
    x0 = np.linspace(1.0, 2.0, 5)
    for _ in range(2):
        f(forward.seed(x0)).dvalue
    structure = forward.seed(x0)._jacobian.seed.structure
    kept = [(key, pieces) for key, (pieces, plan) in structure.plans.items() if plan]
    assert kept
    for key, pieces in kept:
        held = [jac._pattern_id(M) for _, _, block in pieces for M in block]
        assert [ids for _, _, block in key[4] for ids in block] == held


def test_the_pattern_ids_kept_on_a_matrix_are_of_its_own_arrays():
    # (kept on the matrix, which never changes: another matrix, of another
    # pattern or of the same one in new arrays, has its own)
    M = jac.CSR((2, 3), np.array([0, 1, 2]), np.array([0, 2]), np.array([1.0, 2.0]))
    first = jac._pattern_id(M)
    assert first == (id(M.indptr), id(M.indices)) and jac._pattern_id(M) is first
    other = jac.CSR((2, 3), np.array([0, 1, 2]), np.array([1, 2]), np.array([1.0, 2.0]))
    assert jac._pattern_id(other) != first
    again = jac.CSR((2, 3), M.indptr.copy(), M.indices.copy(), M.data)
    assert jac._pattern_id(again) != first
    selection = jac.CSR.selection(3, np.array([2, 0]))
    assert jac._pattern_id(selection) == (id(selection.columns),)
    assert jac._pattern_id(None) == ()
