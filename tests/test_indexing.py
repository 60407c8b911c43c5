"""Indexing forward values: reading, writing (assembly), scatter-add, and the
rule that user arrays are never mutated.

Reading ``x[index]`` is a pure gather, so the reference Jacobian is exact: the
rows of the identity selected by ``np.arange(x.size).reshape(x.shape)[index]``.
Writing is checked against the same program run on plain numpy
(``np.zeros(n, like=x)`` is a plain array when ``x`` is one) and against an
explicit Jacobian or central differences.
"""
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from sparsegrad import forward
from sparsegrad import _jacobian as jac
from sparsegrad.testing import assert_jacobian_equal, numerical_jacobian

from device_check import on_host


def _x(shape, k=0):
    rng = np.random.default_rng(1234 + k)
    return rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)


def _dense(fv):
    d = fv.dvalue
    return d.toarray() if sp.issparse(d) else np.asarray(d).reshape(fv.value.size, -1)


def _gather_reference(shape, index):
    size = int(np.prod(shape, dtype=np.int64))
    rows = np.arange(size).reshape(shape)[index]
    return np.eye(size)[np.asarray(rows).reshape(-1)]


def assert_forward(fv, value, jacobian, rtol=1e-15, atol=0.0):
    """``fv`` is a forward value with exactly ``value`` and Jacobian ``jacobian``."""
    assert isinstance(fv, forward.value), type(fv)
    value = np.asarray(value)
    assert fv.value.shape == value.shape
    assert fv.value.dtype == value.dtype
    assert_array_equal(fv.value, value)
    jacobian = np.asarray(jacobian)
    assert jacobian.ndim == 2
    assert_jacobian_equal(fv, jacobian, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------

M7 = np.array([True, False, True, True, False, False, True])
M45 = (np.arange(20).reshape(4, 5) % 3 == 1)
M4 = np.array([True, False, True, True])
M5 = np.array([False, True, True, False, True])
M345 = (np.arange(60).reshape(3, 4, 5) % 7 < 3)
M34 = (np.arange(12).reshape(3, 4) % 5 < 2)

READ_CASES = {
    (7,): {
        "int": 2, "int-neg": -1, "int-neg-first": -7, "np-int": np.int32(-2),
        "0d-int-array": np.array(3),
        "slice": slice(1, 5), "slice-rev": slice(None, None, -1), "slice-neg-step": slice(5, 1, -2),
        "slice-neg-start": slice(-3, None), "slice-empty": slice(0, 0),
        "slice-step": slice(None, None, 3), "slice-neg-both": slice(-2, -6, -1),
        "slice-beyond": slice(10, None), "slice-clipped": slice(-100, 2),
        "ellipsis": Ellipsis, "none": None, "none-after": (slice(None), None),
        "none-before": (None, slice(2, 4)), "ellipsis-int": (Ellipsis, 3),
        "intarray-repeated-neg": [0, 2, 2, -1], "intarray-2d": np.array([[0, 1], [-1, -2]]),
        "intarray-empty": np.array([], dtype=np.intp), "intarray-neg-wrap": np.array([-7, 6, -3]),
        "intarray-int32": np.array([4, -4], dtype=np.int32),
        "intarray-uint8": np.array([6, 0], dtype=np.uint8),
        "mask": M7, "mask-none": np.zeros(7, bool), "mask-all": np.ones(7, bool),
    },
    (4, 5): {
        "int": 1, "int-neg": -1, "int-pair": (-1, 2), "tuple1": (1,),
        "slices-rev": (slice(None), slice(None, None, -1)),
        "slices-neg-step": (slice(1, None), slice(-2, None, -1)),
        "slice-int": (slice(None, None, 2), 3),
        "ellipsis": (Ellipsis,), "ellipsis-int": (Ellipsis, 0), "int-ellipsis": (0, Ellipsis),
        "none": (None, slice(None), None), "none-int": (slice(None), None, 2),
        "intarray": [0, -1], "intarray-pair": ([0, 1], [2, -1]),
        "intarray-broadcast": (np.array([[0], [1]]), np.array([0, 1, 2])),
        "intarray-slice": ([0, 0, 3], slice(1, None)),
        "slice-intarray": (slice(None), [4, -5, 0]),
        "mask2d": M45, "mask-rows": M4, "mask-cols": (slice(None), M5),
        "mask-int": (M4, 2), "mask-intarray": (np.array([True, False, True, False]), [0, -1]),
    },
    (3, 4, 5): {
        "ints": (1, -2, 3), "int-neg": (-1,),
        "slices": (slice(None, None, 2), slice(1, 3), slice(None, None, -1)),
        "ellipsis-int": (Ellipsis, 1), "int-ellipsis": (0, Ellipsis),
        "ellipsis-none-mask": (Ellipsis, None, M5),
        "intarray-slice-int": ([0, 2], slice(None), 1),
        "slice-intarray-slice": (slice(1, None), [0, 2], slice(None, None, -1)),
        "intarray-slice-intarray": ([0, 1], slice(None), [1, 2]),
        "intarray2d-int-slice": (np.array([[1, 2], [0, -1]]), -1, slice(None)),
        "mask3d": M345, "mask2d-leading": M34, "slice-mask2d": (slice(None), M45),
        "none-ellipsis-none": (None, Ellipsis, None),
    },
    (): {
        "empty-tuple": (), "none": None, "ellipsis": Ellipsis, "none-none": (None, None),
    },
}


def _read_params():
    for shape, cases in READ_CASES.items():
        for name, index in cases.items():
            yield pytest.param(shape, index, id="%s-%s" % ("x".join(map(str, shape)) or "0d",
                                                           name))


@pytest.mark.parametrize("shape,index", list(_read_params()))
def test_read(shape, index):
    x0 = _x(shape)
    if x0.ndim == 0:
        # 0-d forward values are scalar-like and not subscriptable: that is what
        # lets numpy refuse them as sequence elements (F[0] = x[0] into an ndarray)
        with pytest.raises(TypeError, match="not subscriptable"):
            forward.seed(x0)[index]
        return
    y = forward.seed(x0)[index]
    assert_forward(y, x0[index], _gather_reference(shape, index))


@pytest.mark.parametrize("index", [[1, 2], slice(0, 3), [True, True, False, False, True]])
def test_pure_indexing_keeps_float_jacobian(index):
    x = forward.seed(np.arange(5))
    y = x[index]
    assert y.dvalue.dtype == np.float64
    assert_array_equal(y.value, np.arange(5.0)[index])


def test_negative_index_entries_wrap_modulo_indexed_length():
    x0 = np.arange(10.0)
    y = forward.seed(x0)[np.array([-1, 0, -2])]
    assert_array_equal(y.value, [9.0, 0.0, 8.0])
    J = _dense(y)
    assert J[0, 9] == 1.0 and J[2, 8] == 1.0
    assert J[0, 2] == 0.0 and J[2, 1] == 0.0       # not modulo len(index) (0.0.15 bug)


@pytest.mark.parametrize("index", [7, -8, [0, 7], np.array([-8]), (0, 1)],
                         ids=["int", "int-neg", "array", "array-neg", "too-many"])
def test_read_out_of_range_raises_index_error(index):
    x0 = _x(7)
    with pytest.raises(IndexError):
        x0[index]
    with pytest.raises(IndexError):
        forward.seed(x0)[index]


def test_read_bad_mask_raises_index_error():
    x = forward.seed(_x(7))
    with pytest.raises(IndexError):
        x[np.ones(5, bool)]


def test_read_of_intermediate_composes():
    x0 = _x((3, 4))

    def f(x):
        return np.exp(x)[::-1, [0, -1]][:, None, 1] * x[:, 2:3]

    y = f(forward.seed(x0))
    assert_forward(y, f(x0), numerical_jacobian(f, x0, method="complex"), rtol=1e-12,
                   atol=1e-14)


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _check_program(f, x0):
    """Run ``f`` on plain numpy and on a forward value; compare value and Jacobian."""
    expected = f(x0.copy())
    y = f(forward.seed(x0))
    assert isinstance(y, forward.value)
    assert_array_equal(y.value, expected)
    assert y.value.dtype == expected.dtype
    ref = numerical_jacobian(f, x0.copy(), method="central")
    assert_jacobian_equal(y, ref, rtol=1e-6, atol=1e-8)
    return y


def _device_index(index, xp):
    """``index`` with its arrays made on the device ``xp`` (lists and numbers stay)."""
    if isinstance(index, tuple):
        return tuple(_device_index(i, xp) for i in index)
    return xp.asarray(index) if isinstance(index, np.ndarray) and index.ndim else index


@pytest.mark.parametrize("device_index", [False, True], ids=["host-index", "device-index"])
@pytest.mark.parametrize("shape,index", [p for p in _read_params() if p.values[0] != ()])
def test_read_on_the_device(shape, index, device_index, device, monkeypatch):
    """Every read case with the seed on a device (the fake device; CuPy on a GPU),
    its index arrays on the host (CuPy takes them) or on the device: the CPU's value
    and Jacobian, the value on the device.  A device index array is never copied to
    the host (its row numbers are computed on the device)."""
    from sparsegrad import _backend
    x0 = _x(shape)
    key = _device_index(index, device) if device_index else index
    if device_index:
        def refuse(x):
            if _backend.of(x) is not _backend.CPU:
                raise AssertionError("an index array was copied to the host")
            return np.asarray(x)
        monkeypatch.setattr(_backend, "to_host", refuse)
    y = forward.seed(device.asarray(x0))[key]
    assert isinstance(y.value, device.ndarray)
    assert_array_equal(device.asnumpy(y.value), x0[index])
    assert_allclose(on_host(y.dvalue).toarray(), _gather_reference(shape, index),
                    rtol=0, atol=0)


@pytest.mark.parametrize("device_index", [False, True], ids=["host-index", "device-index"])
def test_writes_on_the_device(device_index, device):
    repeated = np.array([0, 2, 2, 5])
    mask = np.array([True, False, True, False, False, True])

    def program(x, xp):
        F = np.zeros(6, like=x)
        F[1:-1] = x[2:] - 2 * x[1:-1] + x[:-2] ** 2
        F[_device_index(repeated, xp)] += x[:4] * 3          # buffered, like numpy
        F[_device_index(mask, xp)] = x[_device_index(mask, xp)] ** 3
        np.add.at(F, _device_index(repeated, xp), x[1:5])
        F[-1] = x[0] * x[-1]
        return F

    x0 = _x(6)
    expected = program(forward.seed(x0), np)
    y = program(forward.seed(device.asarray(x0)), device if device_index else np)
    assert isinstance(y.value, device.ndarray)
    assert_allclose(device.asnumpy(y.value), expected.value, rtol=1e-15)
    J = on_host(y.dvalue)
    assert (J != expected.dvalue).nnz == 0
    assert_array_equal(J.indices, expected.dvalue.indices)


def test_write_residual_1d():
    n = 6

    def residual(x):
        F = np.zeros(n, like=x)
        F[1:-1] = x[2:] - 2 * x[1:-1] + x[:-2] + x[1:-1] ** 2
        F[0] = x[0]
        F[-1] = x[-1] - 1.0
        return F

    x0 = _x(n)
    y = _check_program(residual, x0)
    expected = np.diag(np.r_[1.0, -2.0 + 2 * x0[1:-1], 1.0])
    expected[np.arange(1, n - 1), np.arange(0, n - 2)] = 1.0
    expected[np.arange(1, n - 1), np.arange(2, n)] = 1.0
    assert_jacobian_equal(y, expected, rtol=1e-15, atol=0)


def test_write_repeated_index_last_wins():
    x0 = _x(5)
    x = forward.seed(x0)
    F = np.zeros(5, like=x)
    F[[1, 3, 1]] = x[[0, 1, 2]]
    G = np.zeros(5)
    G[[1, 3, 1]] = x0[[0, 1, 2]]
    expected = np.zeros((5, 5))
    expected[1, 2] = expected[3, 1] = 1.0
    assert_forward(F, G, expected)
    F[np.array([-1, 0, -1])] = 2 * x[:3]
    G[np.array([-1, 0, -1])] = 2 * x0[:3]
    expected[0, 1] = 2.0
    expected[4, 2] = 2.0
    assert_forward(F, G, expected)
    F[[1, 1]] = np.array([5.0, 6.0])       # constants: rows become exactly zero
    G[[1, 1]] = np.array([5.0, 6.0])
    expected[1] = 0.0
    assert_forward(F, G, expected)


def test_write_scalar_broadcast_and_constant_pieces():
    def f(x):
        F = np.zeros(7, like=x)
        F[::2] = x[3]                 # forward scalar broadcast into a slice
        F[1::2] = np.array([1.0, 2.0, 3.0])
        F[3] = x[0] * x[1]
        return F

    _check_program(f, _x(4))


def test_write_mask_augmented():
    mask = np.array([True, False, True, True, False])

    def f(x):
        F = np.zeros(5, like=x)
        F[:] = x
        F[mask] += 2 * x[mask] ** 2
        F[~mask] -= 1.0
        return F

    _check_program(f, _x(5))


def test_write_augmented_repeated_index_is_buffered_like_numpy():
    def f(x):
        F = np.zeros(5, like=x)
        F[:] = x * 3
        F[[0, 0, 2]] += x[[1, 2, 3]]      # numpy: F[0] = F_old[0] + x[2]
        F[1:4] -= x[:3]
        F[::2] *= x[::2]
        F /= 2.0
        return F

    _check_program(f, _x(5))


def test_write_2d():
    def f(x):
        F = np.zeros((3, 4), like=x)
        F[0] = x[:4]
        F[1:, 1:] = x[4:10].reshape(2, 3) * 2
        F[:, 0] = x[10]
        F[[0, 2], [3, 1]] = x[[0, 1]] ** 2
        F[2, -1] += x[5]
        F[np.zeros((3, 4), bool)] = 7.0     # empty mask write
        return F

    _check_program(f, _x(11))


def test_write_2d_forward_seed():
    def f(x):
        F = np.zeros((2, 3, 2), like=x)
        F[..., 0] = x
        F[:, ::-1, 1] = np.sin(x)
        F[1, 1] = x[0, :2][::-1]
        return F

    _check_program(f, _x((2, 3)))


def test_write_constant_zeroes_rows():
    x0 = _x(5)
    x = forward.seed(x0)
    F = x * 2
    F[1:3] = 5.0
    expected = 2.0 * np.eye(5)
    expected[1:3] = 0.0
    assert_forward(F, np.array([2 * x0[0], 5.0, 5.0, 2 * x0[3], 2 * x0[4]]), expected)
    F[...] = 0.0
    assert_forward(F, np.zeros(5), np.zeros((5, 5)))
    F[np.array([True, False, False, False, True])] = np.array([1.0, 2.0])
    assert_forward(F, np.array([1.0, 0, 0, 0, 2.0]), np.zeros((5, 5)))


def test_write_into_seeded_x():
    x0 = _x(5)
    keep = x0.copy()
    x = forward.seed(x0)
    x[0] = x[1] ** 2
    x[2:4] = 3.0
    expected = np.eye(5)
    expected[0] = 0.0
    expected[0, 1] = 2 * x0[1]
    expected[2:4] = 0.0
    assert_forward(x, np.array([x0[1] ** 2, x0[1], 3.0, 3.0, x0[4]]), expected)
    assert_array_equal(x0, keep)


def test_write_loop_of_single_elements():
    n = 2000
    x0 = _x(n)
    x = forward.seed(x0)
    F = np.zeros(n, like=x)
    for i in range(n):
        F[i] = x[i] * (i + 1) - x[(i + 1) % n]
    for i in range(0, n, 2):        # a second pass of slice writes on top
        F[i:i + 2] += x[i:i + 2] ** 2
    i = np.arange(n)
    expected_value = x0 * (i + 1) - np.roll(x0, -1) + x0 ** 2
    assert_allclose(F.value, expected_value, rtol=1e-15, atol=1e-15)
    expected = (sp.diags((i + 1) + 2 * x0) - sp.csr_matrix(
        (np.ones(n), ((i + 1) % n, i)), shape=(n, n)).T).tocsr()
    J = F.dvalue
    assert J.shape == (n, n)
    assert abs(J - expected).max() < 1e-12


def test_loop_of_slice_writes_over_residual():
    n = 1000
    x0 = _x(n)
    x = forward.seed(x0)
    F = np.zeros(n, like=x)
    for i in range(1, n - 1):
        F[i:i + 1] = x[i - 1:i] - 2 * x[i:i + 1] + x[i + 1:i + 2]
    F[0] = x[0]
    F[-1] = x[-1]
    expected = sp.diags([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], [-1, 0, 1]).tolil()
    expected[0, :2] = [1.0, 0.0]
    expected[n - 1, n - 2:] = [0.0, 1.0]
    assert abs(F.dvalue - expected.tocsr()).max() == 0.0


@pytest.mark.parametrize("store", [
    lambda F, x: F.__setitem__(0, x[0]),
    lambda F, x: F.__setitem__(slice(1, 3), x[:2]),
    lambda F, x: F.__setitem__(Ellipsis, x[0]),
    lambda F, x: F.__setitem__([0, 2], x[:2]),
], ids=["int", "slice", "ellipsis", "intarray"])
def test_store_forward_into_plain_ndarray_raises(store):
    x = forward.seed(_x(3))
    F = np.zeros(3)
    with pytest.raises(TypeError) as info:
        store(F, x)
    assert "like=" in str(info.value)
    assert_array_equal(F, np.zeros(3))


def test_conversion_to_float_array_refuses():
    x = forward.seed(_x(3))
    with pytest.raises(TypeError):
        np.asarray(x, dtype=np.float64)
    with pytest.raises(TypeError):
        np.array(x[0], dtype=float)
    try:
        converted = np.asarray(x)
    except TypeError:
        return
    assert converted.dtype == object     # never silently a float array without Jacobian


def test_scatter_add_at():
    x0 = _x(5)
    x = forward.seed(x0)
    idx = [0, 2, 0, -1]
    F = np.zeros(5, like=x)
    np.add.at(F, idx, x[:4])
    G = np.zeros(5)
    np.add.at(G, idx, x0[:4])
    expected = np.zeros((5, 5))
    np.add.at(expected, idx, np.eye(5)[:4])
    assert_forward(F, G, expected)
    np.add.at(F, [1, 1], 2.0)                       # constant
    np.add.at(G, [1, 1], 2.0)
    assert_forward(F, G, expected)
    np.add.at(F, np.array([3, 3, 3]), x[4])         # forward scalar broadcast
    np.add.at(G, np.array([3, 3, 3]), x0[4])
    expected[3, 4] += 3.0
    assert_forward(F, G, expected)


def test_scatter_add_at_2d():
    def f(x):
        F = np.zeros((2, 3), like=x)
        np.add.at(F, ([0, 0, 1], [1, 1, -1]), x ** 2)
        np.add.at(F, (1, slice(None)), x)
        return F

    _check_program(f, _x(3))


def test_scatter_add_at_into_plain_array_raises():
    x = forward.seed(_x(3))
    G = np.zeros(3)
    with pytest.raises(TypeError):
        np.add.at(G, [0, 0], x[:2])


# ---- sparsesum_bare ------------------------------------------------------------

def sparsesum_bare(*args, **kwargs):
    from sparsegrad.sparsevec import sparsesum_bare as function
    return function(*args, **kwargs)


def test_sparsesum_bare_forward_terms():
    x0 = _x(5)
    x = forward.seed(x0)
    terms = [(np.array([0, 1]), x[:2]), (np.array([1, 4]), x[2:4] ** 2), (3, x[4]),
             (np.array([2, 2]), np.array([1.0, 0.5])), (0, 7.0)]
    F = sparsesum_bare(5, terms)
    value = np.array([x0[0] + 7.0, x0[1] + x0[2] ** 2, 1.5, x0[4], x0[3] ** 2])
    expected = np.zeros((5, 5))
    expected[0, 0] = 1.0
    expected[1, 1] = 1.0
    expected[1, 2] = 2 * x0[2]
    expected[3, 4] = 1.0
    expected[4, 3] = 2 * x0[3]
    assert isinstance(F, forward.value)
    assert_allclose(F.value, value, rtol=1e-15)
    assert_jacobian_equal(F, expected, rtol=1e-15, atol=0)


def test_sparsesum_bare_duplicates_and_generator():
    x0 = _x(4)
    x = forward.seed(x0)
    F = sparsesum_bare(3, ((np.array([1, 1]), x[k:k + 2]) for k in range(2)))
    assert_allclose(F.value, [0.0, x0[0] + 2 * x0[1] + x0[2], 0.0], rtol=1e-15)
    expected = np.zeros((3, 4))
    expected[1, :3] = [1.0, 2.0, 1.0]
    assert_jacobian_equal(F, expected, rtol=1e-15, atol=0)


def test_sparsesum_bare_numeric_and_empty():
    empty = sparsesum_bare(4, [])
    assert type(empty) is np.ndarray
    assert_array_equal(empty, np.zeros(4))
    numeric = sparsesum_bare(4, iter([(np.array([0, 3, 3]), np.array([1.0, 2.0, 3.0])),
                                      (1, 4.0)]))
    assert not isinstance(numeric, forward.value)
    assert_array_equal(numeric, [1.0, 4.0, 0.0, 5.0])


def test_sparsesum_bare_return_sparse():
    x0 = _x(3)
    x = forward.seed(x0)
    idx, v = sparsesum_bare(6, [(np.array([4, 1]), x[:2]), (4, x[2])], return_sparse=True)
    assert_array_equal(idx, [1, 4])
    assert_allclose(np.asarray(forward.nvalue(v)), [x0[1], x0[0] + x0[2]], rtol=1e-15)
    assert_jacobian_equal(v, np.array([[0, 1.0, 0], [1.0, 0, 1.0]]), rtol=0, atol=0)


# ---------------------------------------------------------------------------
# user arrays are never mutated, values are never views of each other
# ---------------------------------------------------------------------------

def test_writing_into_forward_leaves_user_array():
    x0 = np.arange(5.0)
    x = forward.seed(x0)
    x[0] = 5.0
    x[1:3] = x[3:5] * 2
    assert_array_equal(x0, np.arange(5.0))


def test_mutating_user_array_after_seed():
    x0 = np.arange(5.0)
    x = forward.seed(x0)
    y = x[1:4] * 2
    x0[1] = 100.0
    assert_array_equal(x.value, np.arange(5.0))
    assert_array_equal(y.value, [2.0, 4.0, 6.0])


def test_constant_written_into_forward_is_copied():
    c = np.array([1.0, 2.0])
    x = forward.seed(np.zeros(4))
    F = np.zeros(4, like=x)
    F[1:3] = c
    c[0] = 99.0
    assert_array_equal(F.value, [0.0, 1.0, 2.0, 0.0])


@pytest.mark.parametrize("view", [
    lambda x: x.reshape(2, 3), lambda x: x[1:4], lambda x: x[::-1], lambda x: x.ravel(),
    lambda x: np.reshape(x, (3, 2)).T, lambda x: x[None], lambda x: x[...]],
    ids=["reshape", "slice", "reverse", "ravel", "reshape-T", "none", "ellipsis"])
@pytest.mark.parametrize("write", ["constant", "forward"])
def test_views_follow_their_base(view, write):
    """numpy's aliasing: a write into the base is seen through a view taken
    before it, and a write through the view reaches the base."""
    x0 = _x(6)
    x = forward.seed(x0)
    y = view(x)
    expected_base, expected_jac = x0.copy(), np.eye(6)
    if write == "constant":
        x[0] = 5.0
        x[1:4] = 0.0
        expected_base[0], expected_base[1:4] = 5.0, 0.0
        expected_jac[:4] = 0.0
    else:
        x[0] = x[5] * 3.0
        x[1:4] = np.exp(x[2:5])
        expected_base[0] = x0[5] * 3.0
        expected_jac[0] = 3.0 * np.eye(6)[5]
        factor = np.exp(expected_base[2:5])
        expected_base[1:4] = factor
        expected_jac[1:4] = factor[:, None] * expected_jac[2:5]
    rows = view(np.arange(6)).reshape(-1)
    assert_forward(y, view(expected_base), expected_jac[rows], rtol=1e-15)
    # and a write through the view reaches x
    y[(0,) * y.ndim] = -1.0
    expected_base[rows[0]] = -1.0
    expected_jac[rows[0]] = 0.0
    assert_forward(x, expected_base, expected_jac, rtol=1e-15)
    assert_forward(y, view(expected_base), expected_jac[rows], rtol=1e-15)
    assert_array_equal(x0, _x(6))  # (the seeded array itself is never written)


def test_read_then_write_intermediate_seen_through_the_view():
    x0 = _x(4)
    x = forward.seed(x0)
    F = np.zeros(4, like=x)
    G = F[1:3]
    F[1] = x[0]
    assert_array_equal(G.value, [x0[0], 0.0])
    assert_array_equal(_dense(G), [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


# ---------------------------------------------------------------------------
# writes never change what was computed before them
# ---------------------------------------------------------------------------

def test_later_writes_leave_earlier_results_unchanged():
    """A value written into, then used as a factor, then written into again: the
    product keeps the factor it was computed with (its Jacobian is not a view of
    the written buffer)."""
    x0 = np.array([0.5, 1.0, 1.5, 2.0])

    def f(x):
        u = x * 1.0
        u[0] = 1.0                 # u owns a fresh buffer now
        flux = u * x               # keeps u's values as the row factor of J_x
        u[-1] = 0.0                # must not write into that factor
        u *= 2.0                   # (in place: the same)
        np.multiply(u, 1.0, out=u)
        return flux + u

    y = f(forward.seed(x0))
    assert_allclose(y.value, f(x0))
    assert_allclose(y.dvalue.toarray(), numerical_jacobian(f, x0, method="central"),
                    rtol=1e-7, atol=1e-9)


def test_writes_into_a_constant_leave_earlier_products_unchanged():
    x = forward.seed(np.array([1.0, 2.0, 3.0]))
    c = np.array([10.0, 20.0, 30.0])
    z, w = x * c, c * np.sin(x)
    c[:] = 0.0
    assert_array_equal(z.dvalue.diagonal(), [10.0, 20.0, 30.0])
    assert_allclose(w.dvalue.diagonal(), [10.0, 20.0, 30.0] * np.cos([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("pending", [False, True], ids=["fresh", "pending-write"])
@pytest.mark.parametrize("key", [slice(None, None, -1), np.array([2, 1, 0])],
                         ids=["reversed", "fancy"])
def test_assigning_a_value_into_itself(key, pending):
    x = forward.seed(np.array([1.0, 2.0, 3.0]))
    y = x * 1.0
    expected = np.eye(3)
    if pending:
        y[0] = 2 * x[0]
        expected = np.diag([2.0, 1.0, 1.0])
    y[key] = y
    assert_array_equal(y.value, np.array([3.0, 2.0, 2.0 if pending else 1.0]))
    assert_array_equal(y.dvalue.toarray(), expected[::-1])


def test_write_with_extra_leading_axes_like_numpy():
    x = forward.seed(np.array([1.0, 2.0, 3.0]))
    F = np.zeros(5, like=x)
    F[0:3] = x.reshape(1, 3) * 2           # numpy drops the leading axis of length 1
    F[3:] = x[1:].reshape(1, 1, 2)
    assert_array_equal(F.value, [2.0, 4.0, 6.0, 2.0, 3.0])
    assert_array_equal(F.dvalue.toarray(), [[2, 0, 0], [0, 2, 0], [0, 0, 2], [0, 1, 0],
                                            [0, 0, 1]])


def test_refused_write_changes_nothing():
    x = forward.seed(np.array([1.0, 2.0, 3.0]))
    F = x * 1.0
    with pytest.raises(ValueError):
        F[0:2] = x             # shapes (2,) and (3,) do not broadcast
    assert_array_equal(F.value, [1.0, 2.0, 3.0])
    assert_array_equal(F.dvalue.toarray(), np.eye(3))


def test_gathers_of_several_terms_see_an_index_array_changed_in_place():
    # the terms of x * y[::-1] cache their gathers under one stored copy of the
    # row numbers, compared once per read: a changed index must still miss
    x0 = np.array([1.0, 2.0, 3.0, 4.0])
    neighbour = np.array([1, 2, 3, 0])

    def f(x):
        return (x * x[::-1] + x[:2].sum())[neighbour]

    jacobians = []
    for stencil in ([1, 2, 3, 0], [3, 3, 0, 1]):
        neighbour[:] = stencil
        result = f(forward.seed(x0))
        expected = numerical_jacobian(f, x0, method="complex")
        assert_allclose(result.dvalue.toarray(), expected, rtol=1e-13, atol=1e-13)
        assert_allclose(result.value, f(x0))
        jacobians.append(result.dvalue.toarray())
    assert not np.array_equal(jacobians[0] != 0, jacobians[1] != 0)


def test_each_cached_gather_is_checked_against_the_current_index():
    # one term's cache refreshed for the new index, the other's still holding the
    # old one: both must be checked, not only the first
    x0 = np.array([1.0, 2.0, 3.0, 4.0])
    neighbour = np.array([1, 2, 3, 0])
    x = forward.seed(x0)
    (x * x[::-1])[neighbour]                   # both terms cache the gather
    neighbour[:] = [3, 3, 0, 1]
    x[neighbour]                               # refreshes the identity's cache only
    y = (x * x[::-1])[neighbour]
    expected = numerical_jacobian(lambda v: (v * v[::-1])[neighbour], x0, method="complex")
    assert_allclose(y.dvalue.toarray(), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("start", [2, 0])
@pytest.mark.parametrize("key", [np.array([4, 0, 0, 2, -1]), np.array([4, 0, 0, 2, 1]),
                                 [3, 1], slice(None, None, -2)])
def test_reads_of_a_slice_of_the_seed(key, start):
    # x[2:7] is a run of the seed's columns: reading it by an index composes by
    # adding the run's first column instead of gathering (_gather); x[0:5] by
    # the row numbers themselves
    x0 = np.arange(1.0, 10.0)

    def f(x):
        part = x[start:start + 5] * x[1:6]
        return part[key] + x[start:start + 5][key] ** 2

    y = f(forward.seed(x0))
    assert_allclose(y.value, f(x0))
    assert_allclose(y.dvalue.toarray(), numerical_jacobian(f, x0, method="complex"),
                    rtol=1e-13, atol=1e-13)
    assert forward.seed(x0)[start:start + 5]._jacobian.matrix.first == start


def test_an_index_array_read_again_shares_its_rows():
    # the seed keeps one read-only copy per index array: a second read of it
    # finds its gathers by identity, and the terms of both reads combine
    x0 = np.arange(1.0, 7.0)
    east = np.array([1, 2, 3, 4, 5, 0])
    x = forward.seed(x0)
    a, b = x[east], (2 * x)[east]
    assert a._jacobian.matrix is b._jacobian.matrix
    assert len((a + b)._jacobian.terms) == 1
    assert_array_equal((a * b).dvalue.toarray(), np.diag(4 * x0[east])[:, np.argsort(east)])
    ref, _, rows = x._jacobian.seed.structure.index_rows[("index", id(east), len(x0))]
    assert ref() is east
    assert not rows.flags.writeable and rows is not east
    assert east.flags.writeable  # the caller's array is left as it was


def test_an_index_array_changed_between_reads_of_one_seed():
    x0 = np.arange(1.0, 7.0)
    east = np.array([1, 2, 3, 4, 5, 0])
    x = forward.seed(x0)
    a = x[east] * x
    east[:] = [5, 0, 1, 2, 3, 4]
    b = x[east] * x
    expected = numerical_jacobian(lambda v: v[[1, 2, 3, 4, 5, 0]] * v + v[east] * v, x0,
                                  method="complex")
    assert_allclose((a + b).dvalue.toarray(), expected, rtol=1e-13, atol=1e-13)


def test_many_index_arrays_read_from_one_seed():
    # the copies a seed keeps are bounded: past the bound they are dropped,
    # reads stay exact
    x0 = np.arange(1.0, 9.0)
    rng = np.random.default_rng(0)
    keys = [rng.permutation(8) for _ in range(jac.MAX_INDEX_ROWS + 10)]

    def f(x):
        return sum(x[k] * (j + 1) for j, k in enumerate(keys)) + x[keys[0]] * x[keys[-1]]

    x = forward.seed(x0)
    y = f(x)
    assert len(x._jacobian.seed.structure.index_rows) <= jac.MAX_INDEX_ROWS
    assert_allclose(y.dvalue.toarray(), numerical_jacobian(f, x0, method="complex"),
                    rtol=1e-12, atol=1e-12)


def test_slice_writes_are_kept_as_runs_until_something_needs_rows():
    # slice and single-row writes paint runs (a later write wins where they
    # overlap); a scattered write, a read of the pending assembly or too many
    # runs make the owner and position arrays, and every way gives the same
    # Jacobian as numpy-style writes into a dense reference
    from sparsegrad._indexing import Assembly, _MAX_RUNS
    n = 12
    x0 = np.linspace(0.5, 1.7, n)

    def program(u, scattered=False, read=False, many=False):
        F = np.zeros(n, dtype=u.dtype, like=u)
        F[2:9] = u[1:8] * 2.0
        F[4:6] = u[:2] ** 2                # (splits the run above in two)
        F[0] = u[-1] * u[0]
        F[8:] = 3.0                        # (a constant: zero rows)
        if read:
            F = F[1:7] * F[3:9]
        if scattered:
            F[[1, 10]] = u[[5, 6]]
        if many:
            for k in range(n):
                F[k:k + 1] = u[(k * 5) % n] * (k + 1.0)
        return F

    for options in [{}, {"scattered": True}, {"read": True}, {"many": True}]:
        y = program(forward.seed(x0), **options)
        runs = y._jac._runs if isinstance(y._jac, Assembly) else None
        if options == {}:
            assert runs is not None and len(runs) == 6   # (F[0], 1, 2:4, 4:6, 6:8, 8:)
        if options in ({"scattered": True}, {"read": True}):
            assert runs is None or options == {"read": True}
        assert_allclose(_dense(y), numerical_jacobian(lambda u: program(u, **options), x0),
                        rtol=1e-9, atol=1e-12)
    # more runs than _MAX_RUNS: the arrays from then on
    m = 2 * _MAX_RUNS + 3
    x1 = np.linspace(0.5, 1.7, m)

    def alternating(u):
        F = np.zeros(m, dtype=u.dtype, like=u)
        for k in range(0, m, 2):
            F[k] = u[m - 1 - k] * (k + 1.0)
        return F

    y = alternating(forward.seed(x1))
    assert isinstance(y._jac, Assembly) and y._jac._runs is None
    assert_allclose(_dense(y), numerical_jacobian(alternating, x1), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("shape", [(4,), (2, 4)], ids=["same-shape", "broadcast"])
@pytest.mark.parametrize("order", ["x*c", "c*x"])
def test_constant_factor_written_after_product(shape, order):
    # the partial of x * c by x is c itself (rules.Operand): kept as a copy, so a
    # later write into the caller's c changes neither the value nor the Jacobian
    c = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
    x = forward.seed(np.ones(4))
    y = x * c if order == "x*c" else c * x
    expected = np.vstack([np.diag(row) for row in c.reshape(-1, 4)])
    c[...] = 99.0
    assert_array_equal(y.value, np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape))
    assert_array_equal(y.dvalue.toarray(), expected)


@pytest.mark.parametrize("key", [slice(1, -1), slice(None, None, -2), (slice(1, 3),),
                                 (slice(1, 3), slice(None, None, 2)), (slice(5, 2), slice(0, 1))],
                         ids=repr)
def test_slice_reads_share_their_gather_under_the_normal_key(key):
    # the quick path of a read by slices keys its gather by slice_key, as the
    # general path does, so every read of the same slices shares one matrix
    from sparsegrad import _indexing
    x = forward.seed(np.arange(24.0))
    v = x.reshape(4, 6) if isinstance(key, tuple) else x
    y = v[key]
    np.testing.assert_array_equal(y.value, v.value[key])
    seed = x._jacobian.seed
    (_, _, matrix), = y._jacobian.terms
    hit = seed.structure.selections.get(_indexing.slice_key(v.shape, key))
    assert hit is not None and hit[1] is matrix
    assert v[key]._jacobian.terms[0][2] is matrix
    expected = np.eye(24)[np.arange(24).reshape(v.shape)[key].ravel()]
    np.testing.assert_array_equal(y.dvalue.toarray(), expected)
    assert v[()]._jacobian is v._jacobian and v[:]._jacobian is v._jacobian  # (all rows)
