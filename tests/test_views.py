"""numpy's aliasing on forward values: wherever numpy returns a view, writes
through it reach its base and writes into the base are seen through it, in
values and Jacobians; where numpy copies, neither happens.

Every program here runs twice: on plain numpy arrays (the value oracle, and
central differences for the Jacobian) and on forward values.
"""
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import sparsegrad
from sparsegrad import forward, optimize
from sparsegrad._errors import UnsupportedOperationError

X0 = np.array([0.7, -1.3, 2.1, 0.4, -0.9, 1.6])


def zeros(u, shape, dtype=float):
    """Zeros that can hold what is computed from ``u`` (numpy or forward)."""
    if isinstance(u, forward.value):
        return np.zeros(shape, dtype=dtype, like=u)
    return np.zeros(shape, dtype=dtype)


def central_differences(F, x, h=1e-6):
    columns = []
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = h
        columns.append((np.asarray(F(x + e)) - np.asarray(F(x - e))).ravel() / (2 * h))
    return np.array(columns).T


def check(F, x=X0):
    """``F`` on forward values: numpy's value exactly, the Jacobian of central
    differences, and a sparsity pattern that holds every stored entry."""
    expected = F(x.copy())
    result = F(forward.seed(x.copy()))
    assert isinstance(result, forward.value)
    assert result.value.shape == np.shape(expected)
    assert result.value.dtype == np.asarray(expected).dtype
    assert_array_equal(result.value, expected)
    J = result.dvalue
    assert_allclose(J.toarray(), central_differences(F, x), rtol=1e-7, atol=1e-8)
    patterned = F(forward.seed_sparsity(x.copy()))
    assert_array_equal(patterned.value, expected)
    assert_array_equal(patterned.sparsity.toarray()[J.toarray() != 0], True)
    return result


# ---- writes through a view reach the base -----------------------------------

def _reshape_view(u):
    R = zeros(u, 6)
    R.reshape(2, 3)[:] = u.reshape(2, 3) ** 2
    return R


def _interior_of_a_grid(u):
    R = zeros(u, 16)
    R.reshape(4, 4)[1:-1, 1:-1] = (u[:4] * u[2:]).reshape(2, 2)
    return R


def _ravel_view(u):
    R = zeros(u, (2, 3))
    R.ravel()[:] = u * 3.0
    return R


def _slice_of_slice(u):
    R = zeros(u, 6)
    R[1:-1][:] = u[:4] ** 3
    return R


def _transpose_row(u):
    R = zeros(u, (3, 2))
    R.T[0] = u[:3] * u[3:]
    return R


def _named_view(u):
    R = zeros(u, 6)
    v = R[1:]
    v[0] = u[0] * u[1]
    v[2:] += u[2:5]
    return R


def _out_is_a_view(u):
    R = u * 1.0
    np.add(R[:2], R[2:4], out=R[:2])
    return R


def _inplace_through_a_view(u):
    R = u ** 2
    v = R[::2]
    v *= u[1::2]
    v -= 1.0
    return R


def _views_of_views(u):
    R = zeros(u, (2, 3))
    V = R.T[::-1]
    V[0, :] = np.sin(u[:2])
    V[1:][0, 1] = u[5] ** 2
    return R


def _functions_that_return_views(u):
    R = zeros(u, (2, 3))
    np.flip(R)[0, 0] = u[0] ** 2          # R[1, 2]
    np.fliplr(R)[0, 0] = u[1] * 3.0       # R[0, 2]
    np.swapaxes(R, 0, 1)[0, 1] = u[2]     # R[1, 0]
    np.moveaxis(R, 0, -1)[1, 0] = u[3]    # R[0, 1]
    np.transpose(R)[0, 0] = np.exp(u[4])  # R[0, 0]
    np.expand_dims(R, 0)[0, 1, 1] = u[5]  # R[1, 1]
    np.rot90(R)[0, 0] += u[0]             # R[0, 2]
    np.atleast_3d(R)[1, 2, 0] *= u[1]     # R[1, 2]
    np.squeeze(R[None])[1, 0] -= u[2]     # R[1, 0]
    return R


def _split_pieces(u):
    R = zeros(u, 6)
    a, b, c = np.split(R, [2, 3])
    a[:] = u[:2] ** 2
    b += u[2]
    c[...] = u[3:] * 2.0
    left, right = np.hsplit(R.reshape(2, 3), [1])
    right[1] *= 3.0
    return R


def _add_at_a_view(u):
    R = u * 1.0
    np.add.at(R[1:], [0, 0, 3], u[:3] ** 2)
    return R


def _ellipsis_and_none(u):
    R = zeros(u, 6)
    R[None][0, 2:4] = u[:2] ** 2
    s = R[4, ...]                         # a 0-d view
    s[...] = u[5] * 7.0
    R[...][5] = u[0]
    return R


def _einsum_views(u):
    R = u * 1.0
    np.einsum("ij->ji", R.reshape(2, 3))[2, 1] = u[0] ** 2  # R[5]
    np.einsum("ii->i", R[:4].reshape(2, 2))[1] *= u[1]     # R[3]
    return R


def _zero_d_arrays(u):
    R = zeros(u, ())                      # a 0-d array: viewed, written in place
    R.reshape(1)[0] = u[0] * 2.0
    R += u[1]
    s = np.sum(u)                         # a scalar: a reshape of it is a new array
    t = np.reshape(s, (1, 1))
    t[0, 0] = u[2]
    w = np.where(s > 0.0, s, u[0])       # a 0-d array, as numpy's where gives
    e = np.expand_dims(w, 0)
    w *= -1.5
    return np.stack([R, s, t[0, 0], w, e[0]])


WRITES_THROUGH_VIEWS = [_reshape_view, _interior_of_a_grid, _ravel_view, _slice_of_slice,
                        _transpose_row, _named_view, _out_is_a_view, _inplace_through_a_view,
                        _views_of_views, _functions_that_return_views, _split_pieces,
                        _add_at_a_view, _ellipsis_and_none, _einsum_views, _zero_d_arrays]


@pytest.mark.parametrize("F", WRITES_THROUGH_VIEWS)
def test_writes_through_views(F):
    check(F)


# ---- writes into the base are seen through a view taken before --------------

def _view_sees_later_writes(u):
    R = zeros(u, 6)
    grid = R.reshape(2, 3)
    tail = R[3:]
    column = grid[:, 1]
    R[:] = u ** 2
    R[4] = u[0] * u[1]
    return np.concatenate([grid.ravel(), tail, column])


def _views_among_many_temporary_ones_see_later_writes(u):
    R = zeros(u, 6)
    kept = [R[k:k + 2] for k in range(0, 6, 2)]
    for k in range(700):  # (views made and dropped while the kept ones live)
        R[k % 5:]
    R[:] = u * 3.0
    R[1:3] = u[:2] ** 2
    return np.concatenate(kept + [R[2:4]])


def _diagonal_sees_later_writes(u):
    R = u * 1.0
    d = np.diag(R.reshape(2, 3))
    R[4] = u[0] ** 2
    return d * 1.0


def _view_sees_writes_through_another_view(u):
    R = u * 1.0
    a = R[1:4]
    b = R.reshape(2, 3).T
    b[1, 0] = np.cos(u[2])                # R[1]
    return a * u[:3] + R[1]


def _stale_view_after_a_copy_on_write(u):
    R = u * 2.0
    v = R[2:]
    keep = v * u[:4]                      # v's value is kept as a factor
    R[3] = 0.0
    return np.concatenate([keep, v])


WRITES_INTO_BASES = [_view_sees_later_writes, _views_among_many_temporary_ones_see_later_writes,
                     _diagonal_sees_later_writes,
                     _view_sees_writes_through_another_view, _stale_view_after_a_copy_on_write]


@pytest.mark.parametrize("F", WRITES_INTO_BASES)
def test_writes_into_the_base_reach_views(F):
    check(F)


# ---- where numpy copies, there is no aliasing ---------------------------------

def _copies(u):
    R = u * 1.0
    fancy = R[[0, 1]]
    masked = R[np.array([True, False] * 3)]
    flat = R.reshape(2, 3).T.reshape(-1)  # (not contiguous: numpy copies)
    flattened = R.flatten()
    copied = R.copy()
    rolled = np.roll(R, 1)
    for c in (fancy, masked, flat, flattened, copied, rolled):
        c[0] = 100.0
    R[1] = -u[0]
    return np.concatenate([R, fancy, masked, flat, flattened, copied, rolled])


def _reshapes_of_computed_values(u):
    transposed = u.reshape(2, 3).T * 2.0          # (numpy lays it out in F order)
    flat = transposed.reshape(-1)                 # a copy
    flat[0] = u[1] ** 2
    ordered = np.exp(u.reshape(3, 2)[:, ::-1] * 0.5)
    again = ordered.reshape(-1)                   # a view
    again[1] = u[0] * 3.0
    padded = np.pad(u.reshape(2, 3), 1)
    inner = padded.reshape(-1)                    # a view
    inner[0] = u[5]
    return np.concatenate([transposed.ravel(), flat, ordered.ravel(), padded.ravel()])


@pytest.mark.parametrize("F", [_copies, _reshapes_of_computed_values])
def test_copies_do_not_alias(F):
    check(F)


def test_astype_without_copy_is_the_value_itself():
    x = forward.seed(X0)
    assert x.astype(float, copy=False) is x
    assert x.astype(float) is not x


# ---- read-only views and parts of complex values -------------------------------

@pytest.mark.parametrize("make", [lambda R: np.broadcast_to(R, (2, 6)),
                                  lambda R: np.diagonal(R.reshape(2, 3)),
                                  lambda R: np.diag(R.reshape(2, 3), 1),
                                  lambda R: R.imag])
def test_read_only_views_refuse_writes_as_numpy(make):
    with pytest.raises(ValueError, match="read-only"):
        make(X0.copy())[0] = 1.0
    R = forward.seed(X0) * 1.0
    with pytest.raises((ValueError, UnsupportedOperationError)):
        make(R)[0] = 1.0
    assert_array_equal(R.value, X0)


def test_parts_of_complex_values_follow_the_base():
    x = forward.seed(X0)
    z = x * (1.0 + 2.0j)
    re, im = z.real, z.imag
    z[0] = x[1] * 1j
    assert_array_equal(re.value, (X0 * (1 + 2j)).real * [0, 1, 1, 1, 1, 1])
    assert_array_equal(im.value[0], X0[1])
    expected = np.diag(2.0 * np.ones(6))
    expected[0] = 0.0
    expected[0, 1] = 1.0
    assert_array_equal(im.dvalue.toarray(), expected)


def _write_parts(u):
    z = u * (1.0 + 2.0j)
    z.real[1:3] = u[3:5] ** 2
    z[::2].imag[0] *= u[5]
    return np.concatenate([z.real, z.imag, z.real[::-1] * z.imag])


def test_writes_through_parts_of_complex_values():
    check(_write_parts)


def _add_at_parts(u):
    z = u * (1.0 + 0.5j)
    np.add.at(z.imag, np.array([0, 2, 0]), np.sin(u[:3]))
    np.add.at(z[1:].real, [0, 0], u[4] ** 2)
    np.add.at(z.real, [-1], 3.0)
    return np.concatenate([z.real, z.imag, z.imag[::-1] * u])


def test_add_at_into_parts_of_complex_values():
    # (numpy adds into the real or the imaginary parts of the elements)
    check(_add_at_parts)


def test_parts_off_the_axis_of_a_complex_seed_refuse():
    x = forward.seed(X0.astype(complex))
    re = x.real
    x[0] = x[1] + 1j
    with pytest.raises(UnsupportedOperationError, match="real or imaginary part"):
        re.dvalue


# ---- every engine and entry point ---------------------------------------------

def test_assembly_through_a_view_in_newton():
    """A residual assembled through ``reshape`` views: Newton reaches the root
    instead of reporting success at the starting point."""
    def F(u):
        R = np.zeros(4, like=u)
        R.reshape(2, 2)[:] = u.reshape(2, 2) ** 2 - np.arange(1.0, 5.0).reshape(2, 2)
        return R

    value, J = sparsegrad.value_and_jacobian(F)(np.ones(4))
    assert_array_equal(value, [0.0, -1.0, -2.0, -3.0])
    assert_array_equal(J.toarray(), 2.0 * np.eye(4))
    solution = optimize.newton(F, np.ones(4))
    assert_allclose(solution.x, np.sqrt(np.arange(1.0, 5.0)), rtol=1e-12)


@pytest.mark.parametrize("trace", [False, True])
def test_views_through_value_and_jacobian(trace):
    value, J = sparsegrad.value_and_jacobian(_interior_of_a_grid, trace=trace)(X0)
    assert_array_equal(value, _interior_of_a_grid(X0))
    assert_allclose(J.toarray(), central_differences(_interior_of_a_grid, X0), atol=1e-8)


@pytest.mark.parametrize("F", WRITES_THROUGH_VIEWS + WRITES_INTO_BASES)
def test_view_programs_on_a_device(F, device):
    from device_check import assert_matches_cpu
    from sparsegrad.gpu._device import fake
    if device is not fake and F is _diagonal_sees_later_writes:
        pytest.skip("CuPy's np.diag of a 2-d array is a copy, and so is sparsegrad's there")
    expected = F(forward.seed(X0.copy()))
    assert_matches_cpu(F(forward.seed(device.asarray(X0))), expected, rtol=1e-15,
                       device=device)


def test_views_on_a_device(device):
    from device_check import on_host
    x = forward.seed(device.asarray(X0))
    R = np.zeros(6, like=x)
    R.reshape(2, 3)[:, 1:] = (x[:4] ** 2).reshape(2, 2)
    tail = R[3:]
    R[3] = x[5]
    expected = np.zeros(6)
    expected.reshape(2, 3)[:, 1:] = (X0[:4] ** 2).reshape(2, 2)
    expected[3] = X0[5]
    assert isinstance(R.value, device.ndarray)
    assert_array_equal(device.asnumpy(R.value), expected)
    assert_array_equal(device.asnumpy(tail.value), expected[3:])
    J = np.zeros((6, 6))
    J[[1, 2, 4, 5], np.arange(4)] = 2.0 * X0[:4]
    J[3, 5] = 1.0
    assert_array_equal(on_host(R.dvalue).toarray(), J)
    assert_array_equal(on_host(tail.dvalue).toarray(), J[3:])


def test_complex_values_written_into_a_real_array_of_a_complex_seed():
    x = forward.seed(X0.astype(complex))
    R = np.zeros(6, dtype=float, like=x)
    with pytest.warns(np.exceptions.ComplexWarning):
        R[1:] = x[:5] * 2.0
    assert_array_equal(R.value, np.r_[0.0, 2.0 * X0[:5]])
    expected = np.zeros((6, 6))
    expected[np.arange(1, 6), np.arange(5)] = 2.0
    assert_array_equal(R.dvalue.toarray(), expected)
    with pytest.raises(UnsupportedOperationError, match="real array"):
        R[0] = x[0] + 1j
    z = np.zeros(6, like=x)
    with pytest.warns(np.exceptions.ComplexWarning):
        z.real[2:] = x[:4] * 3.0          # (the real part of complex values written)
    assert_array_equal(z.value, np.r_[0.0, 0.0, 3.0 * X0[:4]])
    expected = np.zeros((6, 6))
    expected[np.arange(2, 6), np.arange(4)] = 3.0
    assert_array_equal(z.dvalue.toarray(), expected)


def test_zero_d_arrays_index_as_numpys():
    x = forward.seed(np.array([1.0, 2.0]))
    for make in (lambda: np.zeros((), like=x), lambda: np.zeros(2, like=x)[0, ...]):
        a = make()
        a[...] = x[0] * x[1]
        now, alias = a[()], a[...]
        a[...] = 3.0 * x[1]
        # () takes the value as it is (numpy: a scalar), ... the array itself
        assert now.value == 2.0 and alias.value == 6.0
        np.testing.assert_array_equal(now.dvalue.toarray(), [[2.0, 1.0]])
        np.testing.assert_array_equal(alias.dvalue.toarray(), [[0.0, 3.0]])
        with pytest.raises(IndexError, match="only \\(\\) and \\.\\.\\."):
            a[0]
        with pytest.raises(TypeError, match="iteration over a 0-d"):
            list(a)
