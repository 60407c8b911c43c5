"""Bugs found on the device path (fake device of ``sparsegrad.gpu._device``), kept fixed.

Each test failed before its fix.  They run on the CPU through the strict fake
device; the ``gpu`` test at the end runs the same check on real CuPy arrays and
skips without CuPy and a CUDA device.
"""
import numpy as np
import pytest

from sparsegrad import forward
from sparsegrad.gpu import _kernels as gpu_kernels
from sparsegrad.gpu._device import DeviceArray, fake, fake_backend

from device_check import assert_matches_cpu, on_host

fake_backend()
I64 = np.int64


# ---- Jacobians without entries: cupy.bincount raises on an empty array --------------

def test_fake_bincount_refuses_an_empty_array_as_cupy_does():
    # CuPy sizes bincount's result by int(max(x)) + 1 before minlength: an empty x
    # raises there (cupy/cupy#8116), so the fake raises too
    with pytest.raises(ValueError, match="zero-size array"):
        fake.bincount(fake.zeros(0, dtype=I64), minlength=3)
    np.testing.assert_array_equal(fake.asnumpy(fake.bincount(fake.asarray([0, 2, 2]),
                                                             minlength=4)), [1, 0, 2, 0])


@pytest.mark.parametrize("n_rows", [0, 1, 4])
def test_coo_to_csr_without_entries_on_the_device(n_rows):
    empty = fake.zeros(0, dtype=I64)
    for values in (None, fake.zeros(0)):
        indptr, indices, data = gpu_kernels.coo_to_csr(n_rows, 3, empty, empty, values)
        assert type(indptr) is DeviceArray and type(indices) is DeviceArray
        assert fake.asnumpy(indptr).tolist() == [0] * (n_rows + 1)
        assert indices.shape == (0,) and indptr.dtype == I64
        assert (data is None) == (values is None)


def test_coo_to_csr_rows_on_the_device_match_numpy():
    # the device counts its rows by searchsorted, numpy by bincount: same indptr
    rng = np.random.default_rng(7)
    for n_rows, n_cols, n in [(5, 4, 0), (5, 4, 1), (5, 4, 30), (1, 1, 3), (7, 2, 9)]:
        rows, cols = rng.integers(0, n_rows, n), rng.integers(0, n_cols, n)
        values = rng.standard_normal(n)
        expected = gpu_kernels.coo_to_csr(n_rows, n_cols, rows, cols, values)
        got = gpu_kernels.coo_to_csr(n_rows, n_cols, fake.asarray(rows), fake.asarray(cols),
                                     fake.asarray(values))
        for g, e in zip(got, expected):
            assert type(g) is DeviceArray
            np.testing.assert_array_equal(fake.asnumpy(g), e)


def test_merging_an_empty_block_on_the_device():
    # merge_scaled's documented way for a device caller to merge nothing
    block = (fake.zeros(1, dtype=I64), fake.zeros(0, dtype=I64), None, None, 0)
    for pattern_only in (False, True):
        indptr, indices, data = gpu_kernels.merge_scaled(3, 2, [block], pattern_only,
                                                         index_dtype=np.int32)
        assert fake.asnumpy(indptr).tolist() == [0, 0, 0, 0]
        assert indptr.dtype == np.int32 and len(indices) == 0


@pytest.mark.parametrize("name", ["floor", "sign", "empty_slice", "zeros_like"])
def test_jacobians_without_entries_on_the_device(name):
    programs = {
        "floor": lambda x: np.floor(3 * x),
        "sign": lambda x: np.sign(x) * 2.0,
        "empty_slice": lambda x: x[:0] * 2.0,
        "zeros_like": lambda x: x * 0.0 + np.floor(x),
    }
    f = programs[name]
    x0 = np.linspace(0.1, 1.0, 6)
    assert_matches_cpu(f(forward.seed(fake.asarray(x0))), f(forward.seed(x0)), rtol=0)
    pattern = f(forward.seed_sparsity(fake.asarray(x0))).sparsity
    assert (pattern != f(forward.seed_sparsity(x0)).sparsity).nnz == 0


@pytest.mark.gpu
def test_jacobian_without_entries_on_a_real_gpu(cupy):  # pragma: no cover - needs a GPU
    from sparsegrad import gpu
    x0 = np.linspace(0.1, 1.0, 6)
    J = np.floor(3 * gpu.seed(x0)).dvalue
    assert J.shape == (6, 6) and J.nnz == 0
    indptr, indices, _ = gpu_kernels.coo_to_csr(4, 3, cupy.zeros(0, I64),
                                                cupy.zeros(0, I64), None)
    assert indptr.get().tolist() == [0] * 5 and len(indices) == 0


def test_delete_and_split_with_device_indices_on_the_device(device):
    # the row numbers live on the host: the device index goes there for them
    x0 = np.arange(1.0, 7.0)
    x = forward.seed(device.asarray(x0))
    y = np.delete(x * 2.0, device.asarray([0, 3]))
    np.testing.assert_array_equal(device.asnumpy(y.value), np.delete(2.0 * x0, [0, 3]))
    expected = np.delete(2.0 * np.eye(6), [0, 3], axis=0)
    np.testing.assert_array_equal(on_host(y.dvalue).toarray(), expected)
    parts = np.split(x, device.asarray([2, 5]))
    assert [p.shape for p in parts] == [(2,), (3,), (1,)]
    np.testing.assert_array_equal(on_host(parts[1].dvalue).toarray(), np.eye(6)[2:5])


@pytest.mark.parametrize("options", [{"preconditioner": "ilu"}, {"drop_tol": 1e-4},
                                     {"fill_factor": 20}])
def test_device_gmres_refuses_the_host_preconditioner_options(options):
    import sparsegrad.optimize
    with pytest.raises(ValueError, match="without a preconditioner"):
        sparsegrad.optimize.newton(lambda u: u * u - 4.0, fake.ones(3),
                                   linear_solver="gmres", linear_options=options)
    result = sparsegrad.optimize.newton(lambda u: u * u - 4.0, fake.ones(3),
                                        linear_solver="gmres",
                                        linear_options={"preconditioner": None})
    assert result.success
