"""Forward values on a device: the whole forward path against an array namespace.

Seeding a device array gives a seed whose backend (``sparsegrad._backend``)
is that device's: values, row factors, selection columns, merges and gathers
stay there, and ``.dvalue`` is built by the device's sparse module.  Here the
device is the strict fake of ``sparsegrad.gpu._device`` (numpy arrays that
refuse to mix with host arrays, as CuPy does), registered with the device
kernels of ``sparsegrad.gpu._kernels``: every program below must run without
touching the host and give the CPU's Jacobian.  The ``cupy`` tests run the
same programs on a real GPU and skip without CuPy and a CUDA device.
"""
import numpy as np
import pytest

import sparsegrad
from sparsegrad import _backend, forward, gpu
from sparsegrad.gpu._device import DeviceArray, fake, fake_backend

from device_check import assert_matches_cpu, on_host


fake_backend()        # DeviceArrays seeded below need it registered


def _fill(x, xp):
    F = np.zeros(x.shape, like=x)
    F[1:] = x[:-1] * x[1:]
    F[0] = x[0] ** 2
    return F


def _roll_stencil(x, xp):
    east = xp.asarray(np.roll(np.arange(x.size), -1))
    return x * x[east] - np.exp(-x)


def _periodic_stencil(x, xp):
    # each index array used twice: the second gather of each is the cached one
    east = xp.asarray(np.roll(np.arange(x.size), -1))
    west = xp.asarray(np.roll(np.arange(x.size), 1))
    flux = x * x
    return (x[east] - 2 * x + x[west]) + (flux[east] - flux[west]) * x[east]


#: programs ``f(x, xp)`` of one array; ``xp`` (numpy or the fake device) makes
#: the constants they need where ``x`` lives
PROGRAMS = {
    "scale": lambda x, xp: 2.0 * x - 1.0,
    "product": lambda x, xp: x * x[::-1],
    "exp_log": lambda x, xp: np.exp(x) + np.log1p(x * x),
    "divide_power": lambda x, xp: 1.0 / (1.0 + x) + x ** 3,
    "slices": lambda x, xp: x[1:] - x[:-1],
    "fancy": lambda x, xp: x[xp.asarray(np.array([3, 1, 0, 3]))] ** 2,
    "roll": lambda x, xp: np.roll(x, 2) * x,
    "stencil": _roll_stencil,
    "periodic_stencil": _periodic_stencil,
    "concatenate": lambda x, xp: np.concatenate([x[:2], x[3:] ** 2]),
    "stack": lambda x, xp: np.stack([x, np.sin(x)]),
    "reshape_sum": lambda x, xp: (x.reshape(2, -1) ** 2).sum(axis=0),
    "where": lambda x, xp: np.where(x > 0.5, x, -x * x),
    "maximum": lambda x, xp: np.maximum(x, 0.5) * x,
    "diff_cumsum": lambda x, xp: np.diff(np.cumsum(x) ** 2),
    "pad": lambda x, xp: np.pad(x, 1) * 2.0,
    "tile": lambda x, xp: np.tile(x, 2),
    "clip": lambda x, xp: np.clip(x, 0.2, 0.8),
    "matvec": lambda x, xp: xp.asarray(np.arange(12.0).reshape(2, 6)) @ x,
    "constant_product": lambda x, xp: xp.asarray(np.arange(6.0)) * x,
    "piecewise_constant": lambda x, xp: np.floor(3 * x),
    "assembly": _fill,
}


def _refuse_host_copy(x):
    if _backend.of(x) is not _backend.CPU:
        raise AssertionError("a device array was copied to the host")
    return np.asarray(x)


def _device_seed(x0, *more, device=fake):
    return forward.seed(device.asarray(x0), *(device.asarray(m) for m in more))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_stays_on_the_device_and_matches_the_cpu(name, device, monkeypatch):
    f = PROGRAMS[name]
    monkeypatch.setattr(_backend, "to_host", _refuse_host_copy)
    x0 = np.linspace(0.1, 1.0, 6)
    x = _device_seed(x0, device=device)
    assert x._jacobian.seed.backend is _backend.of(device.zeros(1))
    y = f(x, device)
    assert_matches_cpu(y, f(forward.seed(x0), np), rtol=1e-14, value_rtol=1e-15,
                       device=device)


#: what the fake-device tables of test_functions.py (every numpy function case) and
#: test_ufunc_rules.py (every ufunc rule) do not cover: iteration, scalar and mask
#: indexing, casts, scatter-adds, sparsegrad's own helpers; values of 12 elements
#: ``f(x, xp)``, as PROGRAMS
FUNCTIONS = {
    "iter": lambda x, xp: sum(v for v in x[:3]),
    "getitem_int": lambda x, xp: x[3] * x,
    "bool_mask": lambda x, xp: x[x > 0.5],
    "astype": lambda x, xp: x.astype(np.float32),
    "real": lambda x, xp: np.real(x) + np.imag(x),
}


def _add_at(x, xp):
    F = np.zeros(4, like=x)
    np.add.at(F, xp.asarray(np.array([0, 1, 1, 3])), x[:4])
    return F
def _sparsesum(x, xp):
    return sparsegrad.sparsesum_bare(4, [(xp.asarray(np.array([0, 2])), x[:2]),
                                         (xp.asarray(np.array([1, 2])), x[2:4])])
def _branch(x, xp):
    return sparsegrad.branch(x.value > 0.5, lambda i: x[i] ** 2, lambda i: -x[i])
def _setmask(x, xp):
    F = np.zeros(12, like=x)
    m = x > 0.5
    F[m] = x[m] ** 2
    F[~m] += x[~m]
    return F
FUNCTIONS.update(add_at=_add_at, sparsesum=_sparsesum, branch=_branch, setitem_mask=_setmask)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_stays_on_the_device_and_matches_the_cpu(name, device):
    f = FUNCTIONS[name]
    x0 = np.linspace(0.1, 1.0, 12)
    y = f(_device_seed(x0, device=device), device)
    expected = f(forward.seed(x0), np)
    assert isinstance(y.value, device.ndarray)
    J = on_host(y.dvalue)
    np.testing.assert_allclose(J.toarray(), expected.dvalue.toarray(), rtol=1e-13)
    assert (J != 0).nnz <= expected.dvalue.nnz


@pytest.mark.parametrize("name", ["product", "stencil", "where", "assembly"])
def test_sparsity_mode_on_the_device(name, device):
    f = PROGRAMS[name]
    x0 = np.linspace(0.1, 1.0, 6)
    pattern = on_host(f(forward.seed_sparsity(device.asarray(x0)), device).sparsity)
    expected = f(forward.seed_sparsity(x0), np).sparsity
    assert pattern.dtype == np.bool_
    assert (pattern != expected).nnz == 0


def test_complex_and_float32_values_on_the_device(device):
    for dtype in (np.complex128, np.float32):
        x0 = (np.linspace(0.1, 1.0, 6) * (1 + 0.5j if dtype == np.complex128 else 1)
              ).astype(dtype)
        y = PROGRAMS["product"](_device_seed(x0, device=device), device)
        expected = PROGRAMS["product"](forward.seed(x0), np)
        J = on_host(y.dvalue)
        assert y.value.dtype == dtype and J.dtype == dtype
        np.testing.assert_allclose(J.toarray(), expected.dvalue.toarray(), rtol=1e-6)


def test_several_device_arrays_seeded_together(device):
    a, b = _device_seed(np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0]), device=device)
    y = a * b[:2] + b[2]
    assert isinstance(y.value, device.ndarray)
    np.testing.assert_array_equal(on_host(y.dvalue).toarray(),
                                  [[3.0, 0.0, 1.0, 0.0, 1.0], [0.0, 4.0, 0.0, 2.0, 1.0]])


def test_host_and_device_arrays_are_not_seeded_together(device):
    with pytest.raises(TypeError, match="different devices"):
        forward.seed(np.ones(2), device.asarray(np.ones(2)))


def test_host_constants_mixed_with_device_values_are_refused():
    # as on CuPy: a host array next to a device value is an error, not a transfer
    x = _device_seed(np.ones(3))
    with pytest.raises(TypeError, match="host array mixed with device array"):
        x * np.arange(3.0)


def test_seeding_keeps_the_user_array_unchanged_and_private(device):
    x0 = device.asarray(np.linspace(0.0, 1.0, 4))
    x = forward.seed(x0)
    x0[0] = 99.0
    assert device.asnumpy(x.value)[0] == 0.0


def test_function_api_on_the_device(device):
    def f(x, y):
        return x * y[:3] + np.sum(y ** 2)

    a0, b0 = np.array([1.0, -2.0, 0.5]), np.arange(4.0)
    a, b = device.asarray(a0), device.asarray(b0)
    value, (Ja, Jb) = sparsegrad.value_and_jacobian(f, argnums=(0, 1))(a, b)
    expected_value, (Ea, Eb) = sparsegrad.value_and_jacobian(f, argnums=(0, 1))(a0, b0)
    assert isinstance(value, device.ndarray)
    np.testing.assert_array_equal(device.asnumpy(value), expected_value)
    np.testing.assert_array_equal(on_host(Ja).toarray(), Ea.toarray())
    np.testing.assert_array_equal(on_host(Jb).toarray(), Eb.toarray())
    pattern = on_host(sparsegrad.sparsity(lambda x: x[1:] * x[:-1], a))
    assert (pattern != sparsegrad.sparsity(lambda x: x[1:] * x[:-1], a0)).nnz == 0
    _, derivative = sparsegrad.jvp(lambda x: x ** 2 * x[::-1], a, device.asarray(np.ones(3)))
    _, expected = sparsegrad.jvp(lambda x: x ** 2 * x[::-1], a0, np.ones(3))
    np.testing.assert_allclose(device.asnumpy(derivative), expected, rtol=1e-15)


@pytest.mark.parametrize("linear_solver", ["direct", "gmres"])
def test_newton_iterates_on_the_device(linear_solver, device):
    n = 30
    h2 = (1.0 / (n + 1)) ** 2
    source = device.asarray(np.linspace(1.0, 2.0, n))

    def F(u):  # a 1-d Bratu-like problem with its constants on the device
        padded = np.concatenate([np.zeros(1, like=u), u, np.zeros(1, like=u)])
        return (padded[:-2] - 2 * u + padded[2:]) / h2 + source * np.exp(u)

    result = sparsegrad.optimize.newton(F, device.zeros(n), linear_solver=linear_solver)
    assert result.success, result.message
    assert isinstance(result.x, device.ndarray)
    source_host = device.asnumpy(source)

    def F_host(u):
        padded = np.concatenate([[0.0], u, [0.0]])
        return (padded[:-2] - 2 * u + padded[2:]) / h2 + source_host * np.exp(u)

    expected = sparsegrad.optimize.newton(F_host, np.zeros(n))
    np.testing.assert_allclose(device.asnumpy(result.x), expected.x, rtol=1e-9, atol=1e-12)


def test_newton_on_the_device_refuses_host_only_options():
    with pytest.raises(ValueError, match="not available for arrays on the fake device"):
        sparsegrad.optimize.newton(lambda u: u - 1.0, fake.zeros(3), linear_solver="splu")
    p = forward.seed(np.ones(3))
    with pytest.raises(NotImplementedError, match="sensitivity"):
        sparsegrad.optimize.newton(lambda u, p: u - p, fake.zeros(3), args=(p,),
                                   sensitivity=True)


def test_cpu_arrays_keep_the_cpu_backend():
    assert _backend.of(np.ones(2)) is _backend.CPU
    assert _backend.of([1.0, 2.0]) is _backend.CPU
    assert forward.seed(np.ones(2))._jacobian.seed.backend is _backend.CPU


def test_gpu_module_without_a_gpu_says_so():
    if gpu.available():
        pytest.skip("a GPU is available")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        gpu.seed(np.ones(3))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        gpu.seed_sparsity(np.ones(3))


def test_register_refuses_what_is_not_a_backend():
    with pytest.raises(TypeError, match="Backend"):
        _backend.register(DeviceArray, object())


def test_a_0d_value_times_a_host_scalar_stays_on_the_device(device):
    # a numpy scalar or 0-d array partial (the other factor of a product) is a
    # number, never a one-element host vector beside device row factors
    x0 = np.array([0.3, -0.2])
    for const in (np.float64(1.5), np.asarray(1.5), 1.5):
        def f(x):
            return np.multiply(np.arctan(np.sum(x)), const) + np.sum(x) * const
        expected = f(forward.seed(x0))
        y = f(forward.seed(device.asarray(x0)))
        assert_matches_cpu(y, expected, rtol=1e-15, device=device)
        np.testing.assert_allclose(expected.dvalue.toarray(),
                                   np.full((1, 2), 1.5 / (1 + 0.1 ** 2) + 1.5))



def test_a_0d_factor_on_the_device_summed_with_a_host_scalars_term(device):
    # arctan's factor of a 0-d value is a 0-d device array; the other term's
    # is the host's -0.9: summing them compared the two, which the device refuses
    x0 = np.array([0.3])

    def f(x):
        s = np.sum(x)
        return np.maximum(np.arctan(s), s) * -0.9 + np.arctan(s)
    expected = f(forward.seed(x0))
    y = f(forward.seed(device.asarray(x0)))
    assert_matches_cpu(y, expected, rtol=1e-15, device=device)
    np.testing.assert_allclose(expected.dvalue.toarray(), [[-0.9 + 1 / 1.09]], rtol=1e-15)

@pytest.mark.parametrize("key", [np.s_[1:-1, 2:], np.s_[::2, ::-1], np.s_[3], np.s_[:, 1],
                                 np.s_[::-3], np.s_[None, 1:, :2]], ids=str)
def test_strided_reads_make_their_row_numbers_on_the_device(key, device, monkeypatch):
    # a read by slices and integers is a strided view of the row numbers: the device
    # builds it from the strides, no host array crosses (measured: Bratu 1000x1000
    # 15 -> 8-12 ms on an H200, docs/gpu.md)
    x0 = np.arange(1.0, 31.0).reshape(5, 6)
    crossed = []
    to_device = _backend.to_device
    monkeypatch.setattr(_backend, "to_device", lambda x, backend: (
        crossed.append(x) if getattr(x, "dtype", None) == np.int64 else None,
        to_device(x, backend))[1])
    y = (forward.seed(device.asarray(x0)) * 2.0)[key] ** 2
    assert crossed == []
    assert_matches_cpu(y, (forward.seed(x0) * 2.0)[key] ** 2, rtol=0, device=device)
