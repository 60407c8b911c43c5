"""The GPU kernel interface (``sparsegrad.gpu._kernels``) on device arrays.

The kernels are the namespace-generic reference kernels.  Here they run on the
fake device of ``sparsegrad.gpu._device`` (a numpy subclass that refuses to mix
with host arrays, as CuPy does), so the device code path, with its CuPy forms
of numpy idioms, is exercised without a GPU: every result must be made of
DeviceArrays and equal, bit for bit, the results of the same kernels on numpy
arrays.  The tests marked ``gpu`` run the kernels on real CuPy arrays and skip
without CuPy or a CUDA device.
"""
import sys
import types

import numpy as np
import pytest

from sparsegrad._fast import _reference
from sparsegrad.gpu import _kernels as gpu_kernels
from sparsegrad.gpu._device import DeviceArray, fake
from device_check import gpu_tolerance
from test_kernels import (I64, _random_block_terms, _random_terms, assert_same_result,
                          random_csr)

KERNELS = ["merge_scaled", "merge_plan", "fill_scaled", "gather_rows", "matmul", "scale_rows",
           "coo_to_csr", "selection_csr", "multiply_add", "sum_of_products", "take_product",
           "take", "same_index", "index_runs"]
#: a block of no rows: the device's way of merging no terms
EMPTY_BLOCK = (np.zeros(1, I64), np.zeros(0, I64), None, None, 0)
DTYPE_SETS = [[None, np.float64], [None, np.float32, np.float64],
              [None, np.float32, np.float64, np.complex64, np.complex128]]


def on(xp, obj):
    """``obj`` with every numpy array in it (tuples and lists searched) moved
    to ``xp``; a broadcast (stride-0) array stays a broadcast there."""
    if isinstance(obj, np.ndarray):
        if obj.ndim == 1 and obj.strides == (0,) and len(obj) > 1:
            return xp.broadcast_to(xp.asarray(obj[:1]), obj.shape)
        return xp.asarray(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(on(xp, item) for item in obj)
    return obj


def check_on_device(device, name, *args, **kwargs):
    """Run kernel ``name`` on ``device`` (the fake device, or CuPy) and on numpy; the
    device result is made of the device's arrays and equals the numpy one: exactly
    (values and dtypes) on the fake device; on a GPU, whose compiler fuses
    multiply-adds, indices exactly and values to its rounding."""
    expected = getattr(_reference, name)(*args, **kwargs)
    actual = getattr(gpu_kernels, name)(*on(device, args), **kwargs)
    if type(expected) is bool or expected is None:  # (an answer from the device)
        assert actual is expected
        return actual
    if isinstance(expected, np.ndarray):
        actual, expected = (actual,), (expected,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert (a is None) == (e is None)
        if e is not None:
            assert isinstance(a, device.ndarray), "%s returned a %s" % (name, type(a).__name__)
            assert a.dtype == e.dtype and a.shape == e.shape
            if device is fake or e.dtype.kind not in "fc":
                np.testing.assert_array_equal(device.asnumpy(a), e)
            else:
                rtol, atol = gpu_tolerance(e.dtype)
                np.testing.assert_allclose(device.asnumpy(a), e, rtol=rtol, atol=atol)
    return actual


def random_cases(rng, dtypes, count):
    """(kernel name, args, kwargs) on random inputs, every kernel, both
    ``pattern_only`` settings, ``-1`` rows, duplicates, empty shapes."""
    for _ in range(count):
        n_rows, n_cols = (int(n) for n in rng.integers(0, 12, 2))
        terms = _random_terms(rng, n_rows, n_cols, int(rng.integers(0, 5)), dtypes)
        # no terms, no arrays to find the device from: callers on a device
        # pass an empty block instead (see merge_scaled's docstring)
        merged = terms or [EMPTY_BLOCK]
        if terms and n_rows and rng.random() < 0.5:  # a selection by its columns
            selected = rng.integers(-1, n_cols, n_rows) if n_cols else np.full(n_rows, -1)
            merged = merged + [(None, selected, None, terms[0][3])]
        for pattern_only in (False, True):
            yield "merge_scaled", (n_rows, n_cols, merged, pattern_only), {}
        # the plan of that merge, and the merge again by it with other values
        indptr, indices, _ = _reference.merge_scaled(n_rows, n_cols, merged)
        patterns = [(t[0], t[1], t[4] if len(t) > 4 else 0) for t in merged]
        yield "merge_plan", (indptr, indices, patterns), {}
        again = [t[:3] + (None if t[3] is None else t[3] * 2.0,) + t[4:] for t in merged]
        yield "fill_scaled", (indptr, indices, again,
                              _reference.merge_plan(indptr, indices, patterns)), {}
        if not terms:
            continue
        indptr, indices, data, scale = terms[0]
        rows = rng.integers(-1, n_rows, rng.integers(0, 15)) if n_rows else np.zeros(0, I64)
        yield "gather_rows", (indptr, indices, data, rows), {}
        if scale is not None:
            yield "scale_rows", (indptr, data, scale), {}
        a = _random_terms(rng, int(rng.integers(0, 12)), n_rows, 1, dtypes)[0][:3]
        for pattern_only in (False, True):
            yield "matmul", (*a, indptr, indices, data, n_cols, pattern_only), {}
        if n_rows and n_cols:
            n = int(rng.integers(0, 40))
            values = None if data is None else rng.standard_normal(n).astype(data.dtype)
            yield "coo_to_csr", (n_rows, n_cols, rng.integers(0, n_rows, n),
                                 rng.integers(0, n_cols, n), values), {}
        columns = rng.integers(-1, max(n_cols, 1), n_rows)
        yield "selection_csr", (columns,), {}
        dtype = dtypes[-1]
        a, b, c = (rng.standard_normal(n_rows).astype(dtype) for _ in range(3))
        yield "multiply_add", (a, b, c), {}
        yield "sum_of_products", (a, b, dtype(2.5), c, a, None), {}
        yield "sum_of_products", (a, None, None, c, b, dtype(-1.5)), {}
        yield "take_product", (a, b, rows), {}
        yield "take", (a, rows), {}
        runs = np.concatenate([np.arange(n_rows), np.arange(n_rows // 2)]).astype(I64)
        yield "index_runs", (runs,), {"min_run": 2}
        yield "index_runs", (rows,), {}
        if n_rows:
            yield "take", (a, runs, _reference.index_runs(runs, 2)), {}
            yield "take_product", (a, b, runs, _reference.index_runs(runs, 2)), {}
        yield "same_index", (rows, rows.copy()), {}
        if len(rows):
            yield "same_index", (rows, rows[::-1] + 1), {}


# ---------------------------------------------------------------------------
# every kernel on the fake device
# ---------------------------------------------------------------------------

def test_gpu_module_has_the_kernel_interface():
    assert sorted(gpu_kernels.__all__) == sorted(_reference.__all__) == sorted(KERNELS)
    for name in KERNELS:  # the reference itself, or a wrapper that falls back to it
        if name in ("gather_rows", "scale_rows", "fill_scaled", "merge_plan"):
            assert getattr(gpu_kernels, name) is not getattr(_reference, name)
        else:
            assert getattr(gpu_kernels, name) is getattr(_reference, name)


# ---------------------------------------------------------------- the CUDA kernels

def test_cuda_kernels_are_off_unless_asked_and_only_for_cupy(monkeypatch):
    from sparsegrad.gpu import _cuda
    monkeypatch.delenv("SPARSEGRAD_GPU_RAWKERNELS", raising=False)
    assert not _cuda.enabled(fake.zeros(2))
    monkeypatch.setenv("SPARSEGRAD_GPU_RAWKERNELS", "1")
    assert not _cuda.enabled(fake.zeros(2), np.zeros(2))  # not CuPy arrays


def test_cuda_source_compiles_with_nvcc(tmp_path):
    """Syntax and type errors of the CUDA kernels are caught without a device."""
    import shutil
    import subprocess
    from sparsegrad.gpu import _cuda
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    source = tmp_path / "kernels.cu"
    instances = "".join("template __global__ void %s(const long long*, const %s*, const %s*, "
                        "long long, long long, %s*);\n"
                        % (name, t, t, t) for name, t in
                        [(name, name[name.index("<") + 1:-1]) for name in _cuda.TEMPLATES])
    source.write_text(_cuda.SOURCE + instances)
    done = subprocess.run([nvcc, "--std=c++11", "--ptx", "-o", str(tmp_path / "k.ptx"),
                           str(source)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ptx = (tmp_path / "k.ptx").read_text()
    assert "sg_row_sources" in ptx and "sg_scale_rows" in ptx


@pytest.mark.parametrize("dtypes", DTYPE_SETS)
def test_device_matches_numpy_on_random_inputs(device, rng, dtypes):
    seen = set()
    for name, args, kwargs in random_cases(rng, dtypes, 25):
        check_on_device(device, name, *args, **kwargs)
        seen.add(name)
    assert seen == set(KERNELS)


@pytest.mark.parametrize("index_dtype", [None, np.int32])
@pytest.mark.parametrize("selections", [False, True])
def test_device_merges_stacked_blocks(device, rng, index_dtype, selections):
    for _ in range(15):
        n_rows, n_cols = (int(n) for n in rng.integers(0, 14, 2))
        terms = _random_block_terms(rng, n_rows, n_cols, int(rng.integers(0, 7)),
                                    selections=selections) or [EMPTY_BLOCK]
        for pattern_only in (False, True):
            check_on_device(device, "merge_scaled", n_rows, n_cols, terms, pattern_only,
                          index_dtype=index_dtype)


def test_device_sums_long_runs_of_duplicates_in_input_order(device, rng):
    # runs of about 30 equal coordinates take as many passes on the device
    # path; values of very different sizes make any other order visible
    n = 400
    rows, cols = rng.integers(0, 3, n), rng.integers(0, 4, n)
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, n)
    indptr, indices, data = check_on_device(device, "coo_to_csr", 3, 4, rows, cols, values)
    sums = {}
    for key, value in zip(rows * 4 + cols, values):
        sums[key] = sums[key] + value if key in sums else value
    out_rows = np.repeat(np.arange(3), np.diff(device.asnumpy(indptr)))
    out_keys = out_rows * 4 + device.asnumpy(indices)
    assert device.asnumpy(data).tolist() == [sums[key] for key in out_keys]
    # a dense product: every output entry sums 30 products
    a = random_csr(rng, 5, 30, 1.0)
    b = random_csr(rng, 30, 6, 1.0)
    check_on_device(device, "matmul", *a, *b, 6)


def test_device_edges(device):
    empty = (np.zeros(1, I64), np.zeros(0, I64), np.zeros(0), None)
    check_on_device(device, "merge_scaled", 0, 0, [empty])
    check_on_device(device, "merge_scaled", 3, 2, [EMPTY_BLOCK])
    # with no terms at all the kernels cannot know the device: numpy arrays
    assert all(type(a) is np.ndarray for a in gpu_kernels.merge_scaled(3, 2, []))
    check_on_device(device, "gather_rows", np.zeros(1, I64), np.zeros(0, I64), None,
                  np.array([-1, -1]))
    check_on_device(device, "coo_to_csr", 2, 2, np.zeros(0, I64), np.zeros(0, I64), None)
    check_on_device(device, "selection_csr", np.zeros(0, I64))
    check_on_device(device, "scale_rows", np.array([0, 2, 2, 3]), None, np.array([2.0, 0.5, 4.0]))


def test_device_errors_match_numpy(device):
    indptr, indices = np.array([0, 1, 2]), np.array([0, 1])
    with pytest.raises(ValueError, match=">= -1"):
        gpu_kernels.gather_rows(*on(device, (indptr, indices)), None, device.asarray([0, -2]))
    # CuPy would wrap an index past the end around; the kernel checks it
    with pytest.raises(IndexError):
        gpu_kernels.gather_rows(*on(device, (indptr, indices)), None, device.asarray([2]))
    with pytest.raises(ValueError, match="cols must lie"):
        gpu_kernels.coo_to_csr(2, 2, device.asarray([0, 1]), device.asarray([0, 2]), None)
    with pytest.raises(ValueError, match="rows must lie"):
        gpu_kernels.coo_to_csr(2, 2, device.asarray([0, -1]), device.asarray([0, 1]), None)
    with pytest.raises(ValueError, match="-2 at row 1"):
        gpu_kernels.selection_csr(device.asarray([3, -2, 1]))


# ---------------------------------------------------------------------------
# the fake device itself: host arrays refused, namespaces found
# ---------------------------------------------------------------------------

def test_host_device_mix_raises():
    d = fake.arange(3.0)
    host = np.ones(3)
    mixes = [lambda: d + host, lambda: host * d, lambda: np.concatenate([d, host]),
             lambda: fake.cumsum(host), lambda: d[np.array([0, 1])],
             lambda: d.__setitem__(slice(None), host), lambda: np.add.at(d, [0], host[:1]),
             lambda: np.cumsum(d, out=host), lambda: fake.exp(host),
             lambda: fake.add.at(d, fake.asarray([0]), host[:1])]
    for mix in mixes:
        with pytest.raises(TypeError, match="host array mixed with device array"):
            mix()
    # as in CuPy: numpy and Python scalars mix, 0-d host arrays do not; explicit
    # transfers work
    assert type(d + np.float64(1.0) + 3) is DeviceArray
    with pytest.raises(TypeError, match="host array mixed with device array"):
        d + np.array(2.0)
    assert type(fake.exp(d)) is DeviceArray and type(np.exp(d)) is DeviceArray
    np.testing.assert_array_equal(fake.asnumpy(d + fake.asarray(host)), [1.0, 2.0, 3.0])


def test_kernel_leaking_a_host_array_fails_loudly(rng):
    indptr, indices, data = random_csr(rng, 4, 5)
    # a host data array among device arrays: the kernel's arithmetic refuses it
    with pytest.raises(TypeError, match="host array mixed with device array"):
        gpu_kernels.scale_rows(fake.asarray(indptr), data, fake.ones(4))
    term = (fake.asarray(indptr), indices, fake.asarray(data), None)
    with pytest.raises(TypeError, match="host array mixed with device array"):
        gpu_kernels.merge_scaled(4, 5, [term])


def test_namespace_lookup():
    namespace = _reference._namespace
    assert namespace(np.zeros(2), None, [1], 2.0, np.float64(1.0)) is np
    assert namespace(np.ma.masked_array([1.0])) is np
    assert namespace(np.zeros(2), fake.zeros(2)) is fake
    # a package exporting its array type as ``ndarray`` (as cupy does) is the
    # namespace of its arrays, whatever their __array_namespace__ says
    package = types.ModuleType("sparsegrad_test_arraypkg")
    array_type = type("ndarray", (), {"dtype": np.dtype(float), "__module__": package.__name__,
                                       "__array_namespace__": lambda self: np})
    package.ndarray = array_type
    sys.modules[package.__name__] = package
    try:
        assert namespace(np.zeros(1), array_type()) is package
    finally:
        del sys.modules[package.__name__]


def test_fake_namespace_refuses_unknown_names():
    with pytest.raises(AttributeError, match="no 'linalg'"):
        fake.linalg  # noqa: B018


# ---------------------------------------------------------------------------
# real CuPy arrays (skipped without CuPy and a CUDA device)
# ---------------------------------------------------------------------------

# (the ``cupy`` fixture is in conftest.py)

@pytest.mark.gpu
def test_cuda_kernels_match_the_reference_on_a_gpu(cupy, rng, monkeypatch):  # pragma: no cover
    monkeypatch.setenv("SPARSEGRAD_GPU_RAWKERNELS", "1")
    for _ in range(20):
        indptr, indices, data = random_csr(rng, 30, 20)
        rows = rng.integers(-1, 30, 40)
        scale = rng.standard_normal(30)
        for dtype in (np.float32, np.float64):
            d = None if data is None else data.astype(dtype)
            got = gpu_kernels.scale_rows(cupy.asarray(indptr), None if d is None else
                                         cupy.asarray(d), cupy.asarray(scale.astype(dtype)))
            want = _reference.scale_rows(indptr, d, scale.astype(dtype))
            np.testing.assert_array_equal(cupy.asnumpy(got), want)
        got = gpu_kernels.gather_rows(cupy.asarray(indptr), cupy.asarray(indices),
                                      None if data is None else cupy.asarray(data),
                                      cupy.asarray(rows))
        want = _reference.gather_rows(indptr, indices, data, rows)
        for g, w in zip(got, want):
            if w is None:
                assert g is None
            else:
                np.testing.assert_array_equal(cupy.asnumpy(g), w)
