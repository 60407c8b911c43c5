"""Tests of the CSR kernels, run on both implementations.

The ``kernels`` fixture is the pure-numpy reference (``_reference.py``) or the
compiled Cython twin (``_kernels.pyx``).  A missing compiled module skips its
half of the tests, except under ``CI=true``, where it fails them.

Every kernel call goes through :func:`call`, which checks that the inputs are
unchanged and that no output shares memory with an input.  Results are checked
against dense numpy computations (values) and against patterns built by hand
(structural zeros included); the last section compares the two implementations
on random inputs, bit for bit for real dtypes.
"""
import importlib
import itertools
import os

import numpy as np
import pytest

from sparsegrad._fast import _reference

I64 = np.int64
REAL = [np.float32, np.float64]
COMPLEX = [np.complex64, np.complex128]
COMPILED_DTYPES = REAL + COMPLEX
ALL_DTYPES = COMPILED_DTYPES + [np.longdouble, np.clongdouble]


def _in_ci():
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _compiled_module():
    try:
        return importlib.import_module("sparsegrad._fast._kernels")
    except ImportError as exc:
        if _in_ci():
            pytest.fail("CI=true but the compiled kernels cannot be imported: %s" % exc)
        pytest.skip("compiled kernels not built: %s" % exc)


def _threaded(module, threads):
    """``module`` with merge_scaled splitting even tiny merges into ``threads`` parts."""
    module.set_threads(threads)
    module._set_parallel_entries(1 if threads > 1 else None)
    return module


def _restore(module, threads):
    """The module's own settings again: ``threads`` threads, the default split size."""
    module.set_threads(threads)
    module._set_parallel_entries(None)


@pytest.fixture(params=["reference", "compiled", "compiled, 3 threads"])
def kernels(request):
    """The kernel module under test (compiled: also with its merges in threads)."""
    if request.param == "reference":
        yield _reference
        return
    module = _compiled_module()
    threads = module.get_threads()
    yield _threaded(module, 3 if "threads" in request.param else 1)
    _restore(module, threads)


@pytest.fixture(scope="module", params=["1 thread", "3 threads"])
def compiled(request):
    """The compiled kernel module (for comparisons with the reference), with
    merge_scaled in one thread and with every merge split into three parts."""
    module = _compiled_module()
    threads = module.get_threads()
    yield _threaded(module, 3 if request.param == "3 threads" else 1)
    _restore(module, threads)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def _arrays_in(obj):
    if isinstance(obj, np.ndarray):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _arrays_in(item)


def call(function, *args, **kwargs):
    """``function(*args, **kwargs)``, checking inputs unchanged and outputs not aliased."""
    inputs = list(_arrays_in(args))
    before = [a.copy() for a in inputs]
    result = function(*args, **kwargs)
    for a, b in zip(inputs, before):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b, err_msg="an input was modified")
    outputs = [result] if isinstance(result, np.ndarray) else [
        r for r in result if r is not None]
    for k, out in enumerate(outputs):
        assert isinstance(out, np.ndarray)
        for a in inputs + outputs[:k]:
            assert not np.shares_memory(out, a), "an output aliases another array"
    return result


def csr(dense, dtype=None):
    """Canonical int64 CSR of a dense array; entries that are NaN are not stored,
    every other entry (zeros included) is stored when ``dense`` is masked."""
    if isinstance(dense, np.ma.MaskedArray):
        stored = ~np.ma.getmaskarray(dense)
        values = dense.data
    else:
        stored = dense != 0
        values = dense
    rows, cols = np.nonzero(stored)
    indptr = np.zeros(stored.shape[0] + 1, dtype=I64)
    np.cumsum(stored.sum(axis=1), out=indptr[1:])
    data = values[rows, cols]
    return indptr, cols.astype(I64), data if dtype is None else data.astype(dtype)


def random_csr(rng, n_rows, n_cols, density=0.3, dtype=np.float64, zeros=0.1):
    """Random canonical CSR; a fraction ``zeros`` of the stored values are 0."""
    stored = rng.random((n_rows, n_cols)) < density
    values = rng.standard_normal((n_rows, n_cols))
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal((n_rows, n_cols))
    values[rng.random((n_rows, n_cols)) < zeros] = 0
    return csr(np.ma.masked_array(values, mask=~stored), dtype)


def to_dense(indptr, indices, data, shape, dtype=None):
    """Dense array of a CSR matrix (data None: ones); duplicates summed."""
    rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
    values = np.ones(len(indices)) if data is None else data
    out = np.zeros(shape, dtype=dtype or values.dtype)
    np.add.at(out, (rows, indices), values)
    return out


def pattern(indptr, indices, shape):
    """Boolean dense array: which entries are stored."""
    out = np.zeros(shape, dtype=bool)
    out[np.repeat(np.arange(shape[0]), np.diff(indptr)), indices] = True
    return out


def check_canonical(result, shape):
    """``result`` is canonical CSR of ``shape``: int64 indices, sorted unique columns."""
    indptr, indices, data = result
    assert indptr.dtype == I64 and indices.dtype == I64
    assert indptr.shape == (shape[0] + 1,)
    assert indptr[0] == 0 and indptr[-1] == len(indices)
    assert np.all(np.diff(indptr) >= 0)
    if len(indices):
        assert indices.min() >= 0 and indices.max() < shape[1]
    rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
    same_row = rows[1:] == rows[:-1]
    assert np.all(np.diff(indices)[same_row] > 0), "columns not sorted and unique"
    if data is not None:
        assert data.shape == indices.shape


def assert_values(actual, expected, rtol=None):
    """Same dtype and close values (dense comparisons sum in another order);
    ``rtol`` defaults to one for the precision of ``actual``."""
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
        return
    if rtol is None:
        rtol = 1e-5 if np.finfo(actual.dtype).eps > 1e-10 else 1e-12
    np.testing.assert_allclose(actual.astype(np.clongdouble),
                               expected.astype(np.clongdouble), rtol=rtol, atol=rtol)


def assert_same_result(actual, expected):
    """Two kernel results agree: identical indices, identical dtype, and values
    bit for bit for real dtypes (within a few ulps for complex ones, see
    the module docstring of ``_kernels.pyx``)."""
    if isinstance(expected, np.ndarray):
        actual, expected = (None, None, actual), (None, None, expected)
    for a, e in zip(actual[:2], expected[:2]):
        if e is not None:
            assert a.dtype == e.dtype
            np.testing.assert_array_equal(a, e)
    a, e = actual[2], expected[2]
    assert (a is None) == (e is None)
    if e is None:
        return
    assert a.dtype == e.dtype and a.shape == e.shape
    if e.dtype.kind == "c":
        eps = np.finfo(e.dtype).eps
        scale = max(1.0, float(np.abs(e).max(initial=0)))
        np.testing.assert_allclose(a, e, rtol=16 * eps, atol=16 * eps * scale)
    else:
        np.testing.assert_array_equal(a, e)


def readonly(*arrays):
    for a in arrays:
        if a is not None:
            a.setflags(write=False)
    return arrays


# ---------------------------------------------------------------------------
# coo_to_csr
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES + [np.int64])
def test_coo_to_csr_sums_duplicates(kernels, rng, dtype):
    n_rows, n_cols, n = 7, 5, 60
    rows = rng.integers(0, n_rows, n)
    cols = rng.integers(0, n_cols, n)
    values = (rng.standard_normal(n) * 4).astype(dtype)
    result = call(kernels.coo_to_csr, n_rows, n_cols, rows, cols, values)
    check_canonical(result, (n_rows, n_cols))
    expected = np.zeros((n_rows, n_cols), dtype=dtype)
    np.add.at(expected, (rows, cols), values)
    assert_values(to_dense(*result, (n_rows, n_cols)), expected)
    stored = np.zeros((n_rows, n_cols), dtype=bool)
    stored[rows, cols] = True
    np.testing.assert_array_equal(pattern(*result[:2], (n_rows, n_cols)), stored)


def test_coo_to_csr_keeps_entries_that_cancel(kernels):
    result = call(kernels.coo_to_csr, 2, 3, np.array([1, 0, 1]), np.array([2, 0, 2]),
                  np.array([1.5, 2.0, -1.5]))
    np.testing.assert_array_equal(result[0], [0, 1, 2])
    np.testing.assert_array_equal(result[1], [0, 2])
    np.testing.assert_array_equal(result[2], [2.0, 0.0])


def test_coo_to_csr_sums_in_input_order(kernels):
    # ((1e16 + 1) + 1) rounds to 1e16 twice; a pairwise sum would give 1e16 + 2
    values = np.array([1e16, 1.0, 1.0])
    result = call(kernels.coo_to_csr, 1, 1, np.zeros(3, I64), np.zeros(3, I64), values)
    assert result[2][0] == (1e16 + 1.0) + 1.0


def test_coo_to_csr_pattern_only_and_empty(kernels):
    result = call(kernels.coo_to_csr, 3, 4, np.array([2, 0, 2]), np.array([1, 3, 1]), None)
    check_canonical(result, (3, 4))
    assert result[2] is None
    np.testing.assert_array_equal(result[0], [0, 1, 1, 2])
    np.testing.assert_array_equal(result[1], [3, 1])
    for n_rows, n_cols in [(0, 0), (3, 0), (0, 3), (2, 2)]:
        empty = np.zeros(0, I64)
        result = call(kernels.coo_to_csr, n_rows, n_cols, empty, empty, np.zeros(0))
        check_canonical(result, (n_rows, n_cols))
        assert result[2].dtype == np.float64 and len(result[2]) == 0
        assert call(kernels.coo_to_csr, n_rows, n_cols, empty, empty, None)[2] is None


def test_coo_to_csr_rejects_out_of_range(kernels):
    with pytest.raises(ValueError):
        kernels.coo_to_csr(2, 2, np.array([0, 2]), np.array([0, 0]), None)
    with pytest.raises(ValueError):
        kernels.coo_to_csr(2, 2, np.array([0, 1]), np.array([0, 2]), np.ones(2))
    with pytest.raises(ValueError):
        kernels.coo_to_csr(2, 2, np.array([0, -1]), np.array([0, 0]), np.ones(2))


# ---------------------------------------------------------------------------
# merge_scaled
# ---------------------------------------------------------------------------

def _expected_merge(terms, shape, dtype):
    total = np.zeros(shape, dtype=dtype)
    stored = np.zeros(shape, dtype=bool)
    for indptr, indices, data, scale in terms:
        block = to_dense(indptr, indices, data, shape, dtype)
        if scale is not None:
            block = block * np.asarray(scale)[:, None]
        total = total + block
        stored |= pattern(indptr, indices, shape)
    return total, stored


@pytest.mark.parametrize("n_terms", [1, 2, 3, 5])
def test_merge_scaled_against_dense(kernels, rng, n_terms):
    n_rows, n_cols = 9, 7
    terms = []
    for k in range(n_terms):
        indptr, indices, data = random_csr(rng, n_rows, n_cols)
        if k % 3 == 1:
            data = None
        scale = None if k % 2 == 0 else rng.standard_normal(n_rows)
        terms.append((indptr, indices, data, scale))
    _check_merge(kernels, n_rows, n_cols, terms, _expected_merge)


def _check_merge(kernels, n_rows, n_cols, terms, expected):
    """merge_scaled of ``terms`` against the dense ``expected(terms, shape, dtype)``,
    and its pattern-only twin against the same pattern."""
    result = call(kernels.merge_scaled, n_rows, n_cols, terms)
    check_canonical(result, (n_rows, n_cols))
    total, stored = expected(terms, (n_rows, n_cols), np.float64)
    np.testing.assert_array_equal(pattern(*result[:2], (n_rows, n_cols)), stored)
    assert_values(to_dense(*result, (n_rows, n_cols)), total)
    only = call(kernels.merge_scaled, n_rows, n_cols, terms, pattern_only=True)
    assert only[2] is None
    np.testing.assert_array_equal(only[0], result[0])
    np.testing.assert_array_equal(only[1], result[1])


def test_merge_scaled_keeps_cancelled_entries(kernels, rng):
    indptr, indices, data = random_csr(rng, 6, 6, zeros=0)
    other = random_csr(rng, 6, 6)
    terms = [(indptr, indices, data, None), other + (np.zeros(6),),
             (indptr, indices, -data, None)]
    result = call(kernels.merge_scaled, 6, 6, terms)
    _, stored = _expected_merge(terms, (6, 6), np.float64)
    np.testing.assert_array_equal(pattern(*result[:2], (6, 6)), stored)
    np.testing.assert_array_equal(result[2], np.zeros(len(result[1])))


def test_merge_scaled_example(kernels):
    indptr, indices = np.array([0, 1, 2]), np.array([0, 1])
    result = call(kernels.merge_scaled, 2, 2, [(indptr, indices, None, np.array([2.0, 3.0])),
                                               (indptr, indices, None, None)])
    np.testing.assert_array_equal(result[2], [3.0, 4.0])


@pytest.mark.parametrize("n_rows,n_cols", [(0, 0), (0, 4), (4, 0), (3, 3)])
def test_merge_scaled_empty(kernels, n_rows, n_cols):
    result = call(kernels.merge_scaled, n_rows, n_cols, [])
    check_canonical(result, (n_rows, n_cols))
    assert result[2].dtype == np.float64 and len(result[2]) == 0
    assert call(kernels.merge_scaled, n_rows, n_cols, [], pattern_only=True)[2] is None
    empty = (np.zeros(n_rows + 1, I64), np.zeros(0, I64), np.zeros(0), np.ones(n_rows))
    result = call(kernels.merge_scaled, n_rows, n_cols, [empty, empty[:3] + (None,)])
    check_canonical(result, (n_rows, n_cols))
    assert len(result[1]) == 0 and result[2].dtype == np.float64


@pytest.mark.parametrize("data_dtype,scale_dtype,none_term,expected", [
    (np.float32, None, False, np.float32),
    (np.float32, np.float32, False, np.float32),
    (np.float32, np.float32, True, np.float64),
    (np.float32, np.float64, False, np.float64),
    (np.complex64, np.float32, False, np.complex64),
    (np.complex64, np.float32, True, np.complex128),
    (np.float64, np.complex128, False, np.complex128),
    (np.complex128, np.complex128, True, np.complex128),
    (np.longdouble, None, True, np.longdouble),
    (np.float64, np.clongdouble, False, np.clongdouble),
])
def test_merge_scaled_dtypes(kernels, rng, data_dtype, scale_dtype, none_term, expected):
    n = 6
    indptr, indices, data = random_csr(rng, n, n, dtype=data_dtype)
    scale = None if scale_dtype is None else (rng.standard_normal(n) + 0.5).astype(scale_dtype)
    terms = [(indptr, indices, data, scale)]
    if none_term:
        terms.append(random_csr(rng, n, n)[:2] + (None, None))
    result = call(kernels.merge_scaled, n, n, terms)
    check_canonical(result, (n, n))
    assert result[2].dtype == expected
    total, stored = _expected_merge(terms, (n, n), expected)
    np.testing.assert_array_equal(pattern(*result[:2], (n, n)), stored)
    single = np.float32 in (data_dtype, scale_dtype) or np.complex64 in (data_dtype, scale_dtype)
    assert_values(to_dense(*result, (n, n)), total, rtol=1e-5 if single else None)


def test_merge_scaled_accepts_readonly_and_broadcast_scales(kernels, rng):
    indptr, indices, data = readonly(*random_csr(rng, 5, 4))
    scale = np.broadcast_to(np.float64(3.0), (5,))
    result = call(kernels.merge_scaled, 5, 4, [(indptr, indices, data, scale),
                                               (indptr, indices, None, None)])
    np.testing.assert_array_equal(result[1], indices)
    np.testing.assert_array_equal(result[2], data * 3.0 + 1.0)


def test_merge_scaled_rejects_columns_out_of_range(kernels):
    term = (np.array([0, 1]), np.array([3]), np.ones(1), None)
    with pytest.raises(ValueError):
        kernels.merge_scaled(1, 3, [term])


# ---------------------------------------------------------------------------
# merge_scaled: terms placed at a first row (stacked blocks), int32 output
# ---------------------------------------------------------------------------

def _random_block_terms(rng, n_rows, n_cols, n_terms, dtype=np.float64, selections=False):
    """Random 5-tuple terms (some 4-tuples): blocks of random heights at random
    first rows, overlapping or not, some empty; scales of the block's height,
    some broadcast."""
    terms = []
    for k in range(n_terms):
        if k % 4 == 3:
            m, first = n_rows, None
        else:
            m = int(rng.integers(0, n_rows + 1))
            first = int(rng.integers(0, n_rows - m + 1))
        if selections and n_cols:
            steps = (rng.random(m) < 0.8).astype(I64)
            indptr = np.zeros(m + 1, dtype=I64)
            np.cumsum(steps, out=indptr[1:])
            indices = rng.integers(0, n_cols, indptr[-1]).astype(I64)
            data = rng.standard_normal(len(indices)).astype(dtype)
        else:
            indptr, indices, data = random_csr(rng, m, n_cols, rng.random(), dtype=dtype)
        if rng.random() < 0.3:
            data = None
        choice = rng.integers(3)
        scale = (None if choice == 0 else rng.standard_normal(m).astype(dtype) if choice == 1
                 else np.broadcast_to(dtype(rng.standard_normal()), (m,)))
        term = (indptr, indices, data, scale)
        terms.append(term if first is None else term + (first,))
    return terms


def _expected_blocks(terms, shape, dtype):
    """Dense sum and stored pattern of (possibly stacked) terms; a selection term
    (indptr None) is built from its columns directly, not by selection_csr."""
    total = np.zeros(shape, dtype=dtype)
    stored = np.zeros(shape, dtype=bool)
    for term in terms:
        indptr, indices, data, scale = term[:4]
        first = term[4] if len(term) == 5 else 0
        if indptr is None:
            m = len(indices)
            block = np.zeros((m, shape[1]), dtype=dtype)
            rows = np.flatnonzero(indices >= 0)
            block[rows, indices[rows]] = 1
            where = block != 0
        else:
            m = len(indptr) - 1
            block = to_dense(indptr, indices, data, (m, shape[1]), dtype)
            where = pattern(indptr, indices, (m, shape[1]))
        if scale is not None:
            block = block * np.asarray(scale)[:, None]
        total[first:first + m] += block
        stored[first:first + m] |= where
    return total, stored


@pytest.mark.parametrize("selections", [False, True])
def test_merge_scaled_stacked_blocks_against_dense(kernels, rng, selections):
    for _ in range(30):
        n_rows, n_cols = (int(x) for x in rng.integers(0, 14, 2))
        terms = _random_block_terms(rng, n_rows, n_cols, int(rng.integers(0, 7)),
                                    selections=selections)
        _check_merge(kernels, n_rows, n_cols, terms, _expected_blocks)


def test_merge_scaled_stacked_example(kernels):
    # two blocks stacked, a third overlapping both: rows 0 and 4 stay empty
    upper = (np.array([0, 1, 2]), np.array([0, 1]), None, np.array([2.0, 3.0]), 1)
    lower = (np.array([0, 1]), np.array([2]), np.array([5.0]), None, 3)
    across = (np.array([0, 1, 1, 2]), np.array([1, 2]), None, None, 1)
    indptr, indices, data = call(kernels.merge_scaled, 5, 3, [upper, lower, across])
    np.testing.assert_array_equal(indptr, [0, 0, 2, 3, 4, 4])
    np.testing.assert_array_equal(indices, [0, 1, 1, 2])
    np.testing.assert_array_equal(data, [2.0, 1.0, 3.0, 5.0 + 1.0])


def test_merge_scaled_empty_blocks(kernels):
    empty = (np.zeros(1, I64), np.zeros(0, I64), None, np.zeros(0))
    one = (np.array([0, 1]), np.array([1]), None, None)
    for first in (0, 2, 3):
        result = call(kernels.merge_scaled, 3, 2, [empty + (first,), one + (first % 3,)])
        expected = np.zeros(4, I64)
        expected[first % 3 + 1:] = 1
        np.testing.assert_array_equal(result[0], expected)
        np.testing.assert_array_equal(result[1], [1])
    result = call(kernels.merge_scaled, 0, 2, [empty + (0,)], pattern_only=True)
    np.testing.assert_array_equal(result[0], [0])
    assert len(result[1]) == 0 and result[2] is None


def test_merge_scaled_rejects_blocks_that_do_not_fit(kernels):
    block = (np.array([0, 1, 2]), np.array([0, 1]), None, None)
    for first in (-1, 2, 5, 10 ** 12):
        with pytest.raises(ValueError):
            kernels.merge_scaled(3, 2, [block + (first,)])
    with pytest.raises(ValueError):
        kernels.merge_scaled(3, 2, [(np.zeros(0, I64), np.zeros(0, I64), None, None, 0)])
    with pytest.raises(ValueError):                       # scale of n_rows, not m
        kernels.merge_scaled(3, 2, [block[:3] + (np.ones(3), 0)])
    with pytest.raises(ValueError):
        kernels.merge_scaled(3, 2, [block + (0, 0)])
    with pytest.raises(TypeError):
        kernels.merge_scaled(3, 2, [block + (1.0,)])
    kernels.merge_scaled(3, 2, [block + (0,), block + (1,)])   # both fit


def _factor_terms(rng, n_rows, n_cols, dtype):
    """Terms of every shape the merge paths take, each with a row scale and a
    real factor: stencil selections by their columns (one entry per row, in
    a shared column order), selections with empty rows, random CSR blocks
    and rows long enough for the dense accumulator."""
    terms = []
    for k in range(6):
        m = n_rows if k < 3 else int(rng.integers(1, n_rows + 1))
        first = int(rng.integers(0, n_rows - m + 1))
        if k < 3:  # stencil: shifted columns
            indptr, data = None, None
            indices = (np.arange(m, dtype=I64) + 7 * k) % n_cols
            if k == 2:
                indices[rng.random(m) < 0.2] = -1
        else:
            density = 0.9 if k == 5 else 0.05
            indptr, indices, data = random_csr(rng, m, n_cols, density, dtype=dtype)
        scale = rng.standard_normal(m).astype(dtype)
        if np.dtype(dtype).kind == "c":
            scale = scale + 1j * rng.standard_normal(m)
        factor = [-1.0, 0.5 * rng.standard_normal(), 3, np.float64(-2.5),
                  1.0, np.float32(0.3)][k]
        terms.append((indptr, indices, data, scale, first, factor))
    return terms


def _second_scale(rng, scale, how):
    """A second row scale for ``scale``: same dtype, strided, or float64."""
    c = rng.standard_normal(2 * len(scale))
    if how == "strided":
        return c.astype(scale.dtype)[::2]
    return c[:len(scale)].astype(np.float64 if how == "float64" else scale.dtype)


@pytest.mark.parametrize("pairs", [None, "same", "strided", "float64"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_merge_scaled_factor_equals_the_product(kernels, rng, dtype, pairs):
    # a 6-tuple's factor multiplies the row scale as numpy's ``scale * factor``
    # (Python float semantics), after a pair (d, c) of row scales is multiplied
    # as numpy's d * c: bit for bit the 5-tuple with those products
    for n_rows, n_cols in [(40, 40), (300, 600), (9, 3)]:
        terms = _factor_terms(rng, n_rows, n_cols, dtype)
        if pairs:
            terms = [t[:3] + ((t[3], _second_scale(rng, t[3], pairs)),) + t[4:]
                     if k % 3 else t for k, t in enumerate(terms)]
        products = [t[:3] + (_product(t[3]) * float(t[5]), t[4]) for t in terms]
        actual = call(kernels.merge_scaled, n_rows, n_cols, terms)
        expected = call(kernels.merge_scaled, n_rows, n_cols, products)
        assert_same_result(actual, expected)
        check_canonical(actual, (n_rows, n_cols))


def _product(scale):
    return scale[0] * scale[1] if isinstance(scale, tuple) else scale


def test_merge_scaled_factor_needs_a_real_number_and_a_row_scale(kernels):
    one = (np.array([0, 1]), np.array([1]), None)
    with pytest.raises(ValueError, match="factor is a real number"):
        kernels.merge_scaled(1, 2, [one + (np.ones(1), 0, 1j)])
    with pytest.raises(ValueError, match="row_scale, which is None"):
        kernels.merge_scaled(1, 2, [one + (None, 0, 2.0)])
    result = kernels.merge_scaled(1, 2, [one + (None, 0, 1.0)])   # 1: no factor at all
    np.testing.assert_array_equal(result[2], [1.0])
    with pytest.raises(ValueError, match="pair is two 1-d arrays"):
        kernels.merge_scaled(1, 2, [one + ((np.ones(1),), 0)])
    result = kernels.merge_scaled(1, 2, [one + ((np.full(1, 3.0), np.full(1, 0.5)), 0, -2)])
    np.testing.assert_array_equal(result[2], [-3.0])


@pytest.mark.parametrize("pattern_only", [False, True])
def test_merge_scaled_int32_indices(kernels, rng, pattern_only):
    terms = _random_block_terms(rng, 9, 7, 5)
    wide = call(kernels.merge_scaled, 9, 7, terms, pattern_only)
    for index_dtype in (np.int32, "int32", np.dtype(np.int32)):
        narrow = call(kernels.merge_scaled, 9, 7, terms, pattern_only, index_dtype)
        assert narrow[0].dtype == np.int32 and narrow[1].dtype == np.int32
        np.testing.assert_array_equal(narrow[0], wide[0])
        np.testing.assert_array_equal(narrow[1], wide[1])
        assert_same_result((None, None, narrow[2]), (None, None, wide[2]))
    same = call(kernels.merge_scaled, 9, 7, terms, pattern_only, np.int64)
    assert same[0].dtype == I64 and same[1].dtype == I64
    assert call(kernels.merge_scaled, 2, 3, [], index_dtype=np.int32)[0].dtype == np.int32


def test_merge_scaled_int32_limits(kernels):
    empty = (np.zeros(2, I64), np.zeros(0, I64), None, None)
    kernels.merge_scaled(1, 2 ** 31 - 1, [empty], index_dtype=np.int32)
    result = kernels.merge_scaled(1, 2 ** 31 - 1, [empty + (0,)][:0], index_dtype=np.int32)
    assert result[0].dtype == np.int32
    with pytest.raises(ValueError, match="int32"):
        kernels.merge_scaled(1, 2 ** 31, [], index_dtype=np.int32)
    assert kernels.merge_scaled(1, 2 ** 31, [], index_dtype=np.int64)[0].dtype == I64
    for bad in (np.int16, np.float64, np.uint32):
        with pytest.raises(ValueError):
            kernels.merge_scaled(1, 2, [], index_dtype=bad)


# ---------------------------------------------------------------------------
# gather_rows
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES + [np.int64, object, None])
def test_gather_rows(kernels, rng, dtype):
    n_rows, n_cols = 8, 6
    indptr, indices, data = random_csr(rng, n_rows, n_cols)
    data = None if dtype is None else data.astype(dtype)
    rows = np.array([3, -1, 0, 3, 7, 7, -1, 5, 2], dtype=I64)
    result = call(kernels.gather_rows, indptr, indices, data, rows)
    check_canonical(result, (len(rows), n_cols))
    source = pattern(indptr, indices, (n_rows, n_cols))
    expected_pattern = np.where((rows >= 0)[:, None], source[rows], False)
    np.testing.assert_array_equal(pattern(*result[:2], (len(rows), n_cols)), expected_pattern)
    if data is None:
        assert result[2] is None
    else:
        assert result[2].dtype == data.dtype
        dense = to_dense(indptr, indices, data, (n_rows, n_cols))
        expected = np.where((rows >= 0)[:, None], dense[rows], 0).astype(data.dtype)
        np.testing.assert_array_equal(to_dense(*result, (len(rows), n_cols)), expected)


def test_gather_rows_example_and_edges(kernels):
    result = call(kernels.gather_rows, np.array([0, 1, 3]), np.array([0, 0, 1]), None,
                  np.array([1, -1, 0]))
    np.testing.assert_array_equal(result[0], [0, 2, 2, 3])
    np.testing.assert_array_equal(result[1], [0, 1, 0])
    assert result[2] is None
    # no rows, only empty rows, an empty source
    indptr, indices, data = np.array([0, 2, 2]), np.array([0, 3]), np.array([1.0, 0.0])
    result = call(kernels.gather_rows, indptr, indices, data, np.zeros(0, I64))
    np.testing.assert_array_equal(result[0], [0])
    assert len(result[1]) == 0 and result[2].dtype == np.float64
    result = call(kernels.gather_rows, indptr, indices, data, np.array([-1, 1, -1]))
    np.testing.assert_array_equal(result[0], [0, 0, 0, 0])
    result = call(kernels.gather_rows, np.zeros(1, I64), np.zeros(0, I64), None,
                  np.array([-1, -1]))
    np.testing.assert_array_equal(result[0], [0, 0, 0])
    # the stored zero travels with its row
    result = call(kernels.gather_rows, indptr, indices, data, np.array([0, 0]))
    np.testing.assert_array_equal(result[1], [0, 3, 0, 3])
    np.testing.assert_array_equal(result[2], [1.0, 0.0, 1.0, 0.0])


def test_gather_rows_rejects_bad_rows(kernels):
    indptr, indices = np.array([0, 1, 2]), np.array([0, 1])
    with pytest.raises(ValueError):
        kernels.gather_rows(indptr, indices, None, np.array([0, -2]))
    with pytest.raises((ValueError, IndexError)):
        kernels.gather_rows(indptr, indices, None, np.array([2]))


# ---------------------------------------------------------------------------
# matmul
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("a_dtype,b_dtype", [
    (np.float64, np.float64), (None, np.float64), (np.float64, None), (None, None),
    (np.float32, np.float32), (np.float32, None), (np.complex64, np.float32),
    (np.complex128, np.complex128), (np.float32, np.complex64),
    (np.longdouble, np.float64), (np.clongdouble, None)])
def test_matmul_against_dense(kernels, rng, a_dtype, b_dtype):
    n, m, p = 7, 6, 5
    a = random_csr(rng, n, m, dtype=a_dtype or np.float64, density=0.4)
    b = random_csr(rng, m, p, dtype=b_dtype or np.float64, density=0.4)
    a_data = None if a_dtype is None else a[2]
    b_data = None if b_dtype is None else b[2]
    result = call(kernels.matmul, a[0], a[1], a_data, b[0], b[1], b_data, p)
    check_canonical(result, (n, p))
    dtype = np.result_type(a_dtype or np.float64, b_dtype or np.float64)
    dense = to_dense(a[0], a[1], a_data, (n, m), dtype) @ to_dense(b[0], b[1], b_data,
                                                                     (m, p), dtype)
    assert_values(to_dense(*result, (n, p)), dense)
    structural = (pattern(a[0], a[1], (n, m)).astype(int)
                  @ pattern(b[0], b[1], (m, p)).astype(int)) > 0
    np.testing.assert_array_equal(pattern(*result[:2], (n, p)), structural)
    only = call(kernels.matmul, a[0], a[1], a_data, b[0], b[1], b_data, p, pattern_only=True)
    assert only[2] is None
    np.testing.assert_array_equal(only[0], result[0])
    np.testing.assert_array_equal(only[1], result[1])


def test_matmul_keeps_cancelled_products(kernels):
    # [1 1] @ [[1], [-1]] = [0], stored
    result = call(kernels.matmul, np.array([0, 2]), np.array([0, 1]), None,
                  np.array([0, 1, 2]), np.array([0, 0]), np.array([1.0, -1.0]), 1)
    np.testing.assert_array_equal(result[0], [0, 1])
    np.testing.assert_array_equal(result[1], [0])
    np.testing.assert_array_equal(result[2], [0.0])


def test_matmul_edges(kernels, rng):
    b = random_csr(rng, 4, 3)
    # A with no rows, A with empty rows, B with no columns
    result = call(kernels.matmul, np.zeros(1, I64), np.zeros(0, I64), None, *b, 3)
    check_canonical(result, (0, 3))
    result = call(kernels.matmul, np.zeros(3, I64), np.zeros(0, I64), np.zeros(0), *b, 3)
    check_canonical(result, (2, 3))
    assert len(result[1]) == 0 and result[2].dtype == np.float64
    a = random_csr(rng, 3, 4, density=0.6)
    result = call(kernels.matmul, *a, np.zeros(5, I64), np.zeros(0, I64), None, 0)
    check_canonical(result, (3, 0))
    # one long output row, from n rows of B with one entry each (the long-row sort)
    n = 300
    a = (np.array([0, n], I64), np.arange(n, dtype=I64), rng.standard_normal(n))
    b_indices = rng.permutation(2 * n)[:n].astype(I64)
    b = (np.arange(n + 1, dtype=I64), b_indices, rng.standard_normal(n))
    result = call(kernels.matmul, *a, *b, 2 * n)
    check_canonical(result, (1, 2 * n))
    np.testing.assert_array_equal(result[1], np.sort(b_indices))


def test_matmul_rejects_bad_indices(kernels):
    with pytest.raises((ValueError, IndexError)):
        kernels.matmul(np.array([0, 1]), np.array([2]), None,
                       np.array([0, 1, 2]), np.array([0, 0]), None, 1)


# ---------------------------------------------------------------------------
# scale_rows
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("data_dtype,scale_dtype", [
    (np.float64, np.float64), (None, np.float64), (np.float32, np.float32),
    (None, np.float32), (np.float32, np.float64), (np.complex64, np.float32),
    (np.float64, np.complex128), (np.complex128, np.complex128), (None, np.int64),
    (np.longdouble, np.float64), (None, np.clongdouble)])
def test_scale_rows(kernels, rng, data_dtype, scale_dtype):
    indptr, indices, data = random_csr(rng, 6, 5, dtype=data_dtype or np.float64)
    data = None if data_dtype is None else data
    scale = (rng.standard_normal(6) * 3).astype(scale_dtype)
    result = call(kernels.scale_rows, indptr, data, scale)
    expected_dtype = scale.dtype if data is None else np.result_type(data, scale)
    assert result.dtype == expected_dtype and result.shape == indices.shape
    rows = np.repeat(np.arange(6), np.diff(indptr))
    expected = scale[rows] if data is None else data * scale[rows]
    assert_values(result, expected)


def test_scale_rows_example_and_empty(kernels):
    np.testing.assert_array_equal(
        call(kernels.scale_rows, np.array([0, 2, 3]), None, np.array([2.0, 5.0])),
        [2.0, 2.0, 5.0])
    assert call(kernels.scale_rows, np.zeros(1, I64), None, np.zeros(0)).shape == (0,)
    result = call(kernels.scale_rows, np.zeros(4, I64), np.zeros(0, np.float32),
                  np.ones(3, np.float32))
    assert result.shape == (0,) and result.dtype == np.float32


# ---------------------------------------------------------------------------
# the compiled kernels: validation, and identity with the reference
# ---------------------------------------------------------------------------

def test_compiled_validates_csr(compiled):
    good = (np.array([0, 1, 2]), np.array([0, 1]), np.ones(2), None)
    with pytest.raises(ValueError):        # indptr of the wrong length
        compiled.merge_scaled(3, 2, [good])
    with pytest.raises(ValueError):        # decreasing indptr
        compiled.merge_scaled(2, 2, [(np.array([0, 2, 1, 2]), np.array([0, 1]), None, None)])
    with pytest.raises(ValueError):        # indptr not ending at nnz
        compiled.gather_rows(np.array([0, 1, 3]), np.array([0, 1]), None, np.array([0]))
    with pytest.raises(ValueError):        # data of the wrong length
        compiled.merge_scaled(2, 2, [good[:2] + (np.ones(3), None)])
    with pytest.raises(ValueError):        # scale of the wrong length
        compiled.scale_rows(np.array([0, 1, 2]), None, np.ones(3))
    with pytest.raises(TypeError):         # float indices
        compiled.gather_rows(np.array([0.0, 1.0]), np.array([0]), None, np.array([0]))
    with pytest.raises(ValueError):        # 2-d rows
        compiled.gather_rows(np.array([0, 1]), np.array([0]), None, np.zeros((1, 1), I64))
    with pytest.raises(ValueError):
        compiled.coo_to_csr(-1, 2, np.zeros(0, I64), np.zeros(0, I64), None)


def test_compiled_converts_index_dtypes(compiled):
    result = compiled.gather_rows(np.array([0, 1, 2], np.int32), np.array([1, 0], np.uint16),
                                  np.array([1.0, 2.0]), [1, 0])
    for array in result[:2]:
        assert array.dtype == I64
    np.testing.assert_array_equal(result[1], [0, 1])


def _random_terms(rng, n_rows, n_cols, n_terms, dtypes):
    terms = []
    for _ in range(n_terms):
        dtype = dtypes[rng.integers(len(dtypes))]
        indptr, indices, data = random_csr(rng, n_rows, n_cols, rng.random(),
                                           dtype=dtype or np.float64)
        if dtype is None:
            data = None
        scale_dtype = dtypes[rng.integers(len(dtypes))]
        scale = None
        if scale_dtype is not None:
            scale = rng.standard_normal(n_rows).astype(scale_dtype)
        terms.append((indptr, indices, data, scale))
    return terms


@pytest.mark.parametrize("dtypes", [[None, np.float64], [None, np.float32, np.float64],
                                    [None] + COMPILED_DTYPES, [np.float32]])
def test_compiled_matches_reference_on_random_inputs(compiled, rng, dtypes):
    for _ in range(40):
        n_rows, n_cols = rng.integers(0, 12, 2)
        terms = _random_terms(rng, n_rows, n_cols, rng.integers(0, 5), dtypes)
        for pattern_only in (False, True):
            assert_same_result(
                call(compiled.merge_scaled, n_rows, n_cols, terms, pattern_only),
                _reference.merge_scaled(n_rows, n_cols, terms, pattern_only))
        if not terms:
            continue
        indptr, indices, data, scale = terms[0]
        rows = rng.integers(-1, n_rows, rng.integers(0, 15)) if n_rows else np.zeros(0, I64)
        assert_same_result(call(compiled.gather_rows, indptr, indices, data, rows),
                           _reference.gather_rows(indptr, indices, data, rows))
        if scale is not None:
            assert_same_result(call(compiled.scale_rows, indptr, data, scale),
                               _reference.scale_rows(indptr, data, scale))
        n_out = rng.integers(0, 12)
        a = _random_terms(rng, n_out, n_rows, 1, dtypes)[0][:3]
        for pattern_only in (False, True):
            assert_same_result(
                call(compiled.matmul, *a, indptr, indices, data, n_cols, pattern_only),
                _reference.matmul(*a, indptr, indices, data, n_cols, pattern_only))
        if n_rows and n_cols:
            n = rng.integers(0, 40)
            values = None if data is None else rng.standard_normal(n).astype(data.dtype)
            coo = (n_rows, n_cols, rng.integers(0, n_rows, n), rng.integers(0, n_cols, n),
                   values)
            assert_same_result(call(compiled.coo_to_csr, *coo), _reference.coo_to_csr(*coo))


# ---------------------------------------------------------------------------
# the compiled kernels: their internal paths (short rows by sorted keys with
# the previous row's order reused, long rows by a dense marker, row runs in
# gathers), each against the reference, bit for bit
# ---------------------------------------------------------------------------

def _shifted_selection(n, offset, scale=None):
    """Row i selects column (i + offset) mod n: the order of several such
    terms in a row changes where one of them wraps around."""
    return (np.arange(n + 1, dtype=I64), (np.arange(n, dtype=I64) + offset) % n, None,
            scale)


def _banded(rng, n, offsets, dtype=np.float64):
    cols = np.arange(n)[:, None] + np.asarray(offsets)[None, :]
    keep = (cols >= 0) & (cols < n)
    indptr = np.zeros(n + 1, dtype=I64)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    indices = cols[keep].astype(I64)
    return indptr, indices, rng.standard_normal(len(indices)).astype(dtype)


@pytest.mark.parametrize("pattern_only", [False, True])
def test_compiled_merge_selections_and_bands(compiled, rng, pattern_only):
    n = 50
    terms = [_shifted_selection(n, int(o), rng.standard_normal(n))
             for o in rng.choice(n, 12, replace=False)]
    terms += [_shifted_selection(n, 7), _shifted_selection(n, 7, rng.standard_normal(n))]
    terms += [_banded(rng, n, offs) + (rng.standard_normal(n),)
              for offs in ((-1, 0, 1), (-3, 0, 2, 5), (-1, 0, 1))]
    terms += [_banded(rng, n, (-2, 2))[:2] + (None, None)]
    for chosen in (terms[:3], terms[:12], terms[12:], terms):
        result = call(compiled.merge_scaled, n, n, chosen, pattern_only)
        check_canonical(result, (n, n))
        assert_same_result(result, _reference.merge_scaled(n, n, chosen, pattern_only))


@pytest.mark.parametrize("dtype", COMPILED_DTYPES)
def test_compiled_merge_long_and_short_rows(compiled, rng, dtype):
    # rows of more than 256 entries (all terms together) take the dense path;
    # short rows before and after them, sorted or not, are merged by keys
    n_rows, n_cols = 9, 700
    terms = []
    for k in range(3):
        lengths = rng.integers(0, 4, n_rows)
        lengths[2] = 150                      # 450 entries: long
        lengths[5] = 90 if k else 0           # 180 entries: short, sorted keys
        rows = [np.sort(rng.choice(n_cols, size, replace=False)) for size in lengths]
        indptr = np.zeros(n_rows + 1, dtype=I64)
        np.cumsum(lengths, out=indptr[1:])
        indices = np.concatenate(rows).astype(I64)
        data = (rng.standard_normal(len(indices)) + (1j if np.dtype(dtype).kind == "c"
                                                     else 0)).astype(dtype)
        terms.append((indptr, indices, data if k != 1 else None,
                      None if k == 2 else rng.standard_normal(n_rows).astype(dtype)))
    for pattern_only in (False, True):
        result = call(compiled.merge_scaled, n_rows, n_cols, terms, pattern_only)
        check_canonical(result, (n_rows, n_cols))
        assert_same_result(result, _reference.merge_scaled(n_rows, n_cols, terms,
                                                           pattern_only))


def test_compiled_merge_unsorted_and_duplicate_input(compiled):
    # not canonical, yet merged as the reference merges it: duplicates summed
    # in input order, columns sorted
    terms = [(np.array([0, 3, 4]), np.array([2, 0, 2, 1]), np.array([1e16, 1.0, 1.0, 2.0]),
              None),
             (np.array([0, 2, 2]), np.array([2, 2]), np.array([1.0, -1e16]), None)]
    result = call(compiled.merge_scaled, 2, 3, terms)
    assert_same_result(result, _reference.merge_scaled(2, 3, terms))
    np.testing.assert_array_equal(result[1], [0, 2, 1])


def test_compiled_merge_strided_scales(compiled, rng):
    n = 20
    indptr, indices, data = _banded(rng, n, (-1, 0, 1))
    long_scale = rng.standard_normal(3 * n)
    scales = [np.broadcast_to(np.float64(2.5), (n,)), long_scale[::3], long_scale[::-3][:n],
              np.broadcast_to(np.complex128(1 + 2j), (n,)),
              rng.standard_normal(n).astype(np.float32)[::1]]
    for scale in scales:
        for d in (data, None):
            terms = [(indptr, indices, d, scale), (indptr, indices, data, None)]
            assert_same_result(call(compiled.merge_scaled, n, n, terms),
                               _reference.merge_scaled(n, n, terms))


def test_compiled_merge_complex_ones_times_scale(compiled):
    # data None and a complex scale: the reference multiplies by 1 + 0j, which
    # turns an infinite part into nan; a real scale is taken as it is
    indptr, indices = np.array([0, 1, 2]), np.array([0, 1])
    for scale in (np.array([np.inf + 1j, 1 + 1j * np.inf]), np.array([np.inf, -0.0])):
        terms = [(indptr, indices, None, scale),
                 (indptr, indices, np.array([1j, 2.0]), None)]
        with np.errstate(invalid="ignore"):
            result = compiled.merge_scaled(2, 2, terms)
            expected = _reference.merge_scaled(2, 2, terms)
        np.testing.assert_array_equal(result[1], expected[1])
        np.testing.assert_array_equal(result[2], expected[2])


def test_compiled_merge_rejects_bad_entries_anywhere(compiled, rng):
    n = 40
    good = _banded(rng, n, (-1, 0, 1)) + (None,)
    long_row = (np.array([0] + [300] * n), np.arange(300, dtype=I64), None, None)
    for bad_col in (-1, n, 2 ** 60, -2 ** 62):
        for row in (0, n // 2, n - 1):
            indptr, indices, data, scale = good
            indices = indices.copy()
            indices[indptr[row]] = bad_col
            with pytest.raises(ValueError, match="term 1 column indices"):
                compiled.merge_scaled(n, n, [good, (indptr, indices, data, scale)])
        indices = long_row[1].copy()
        indices[-1] = 300 if bad_col == n else bad_col
        with pytest.raises(ValueError, match="column indices"):
            compiled.merge_scaled(n, 300, [good[:2] + (None, None),
                                           (long_row[0], indices, None, None)])
    indptr = good[0].copy()
    indptr[n // 2] = indptr[n // 2 + 1] + 1       # a decrease in the middle
    with pytest.raises(ValueError, match="decreases"):
        compiled.merge_scaled(n, n, [good, (indptr,) + good[1:]])
    indptr = good[0].copy()
    indptr[1] = 10 ** 12                           # beyond the entries, then down
    with pytest.raises(ValueError, match="decreases"):
        compiled.merge_scaled(n, n, [(indptr,) + good[1:]])


# ---------------------------------------------------------------------------
# the compiled merge: stacked segments and the block path (rows where every
# term holds at most one entry), against the reference, bit for bit
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", COMPILED_DTYPES)
@pytest.mark.parametrize("index_dtype", [None, np.int32])
def test_compiled_merge_blocks_match_reference(compiled, rng, dtype, index_dtype):
    for _ in range(40):
        n_rows, n_cols = (int(x) for x in rng.integers(0, 30, 2))
        terms = _random_block_terms(rng, n_rows, n_cols, int(rng.integers(0, 9)), dtype,
                                    selections=bool(rng.integers(2)))
        for pattern_only in (False, True):
            assert_same_result(
                call(compiled.merge_scaled, n_rows, n_cols, terms, pattern_only, index_dtype),
                _reference.merge_scaled(n_rows, n_cols, terms, pattern_only, index_dtype))


@pytest.mark.parametrize("pattern_only", [False, True])
def test_compiled_merge_block_path(compiled, rng, pattern_only):
    # periodic shifts (the order of the terms' columns changes at the wraps),
    # a repeated column (duplicates summed term by term), empty rows, more
    # rows than one block, selections mixed with a band in some rows only
    n = 3000
    terms = [_shifted_selection(n, int(o), rng.standard_normal(n))
             for o in (1, -1, 50, -50, 0)]
    terms.append(_shifted_selection(n, 1, np.broadcast_to(np.float64(1e16), (n,))))
    holes = terms[0][:2]
    keep = rng.random(n) < 0.9
    indptr = np.zeros(n + 1, dtype=I64)
    np.cumsum(keep, out=indptr[1:])
    terms.append((indptr, holes[1][keep], rng.standard_normal(keep.sum()), None))
    banded_rows = _banded(rng, n, (-1, 0, 1))
    for chosen in (terms, terms[:1], terms + [banded_rows + (None,)]):
        for index_dtype in (None, np.int32):
            result = call(compiled.merge_scaled, n, n, chosen, pattern_only, index_dtype)
            assert_same_result(result, _reference.merge_scaled(n, n, chosen, pattern_only,
                                                               index_dtype))
    # a band in a few rows only: the block path backs off, then resumes
    indptr = np.arange(n + 1, dtype=I64)
    indptr[1500:] += 2
    indices = np.arange(n + 2, dtype=I64) % n
    indices[1499:1502] = [1497, 1498, 1499]
    few = (indptr, indices, None, None)
    chosen = terms + [few]
    result = call(compiled.merge_scaled, n, n, chosen, pattern_only)
    assert_same_result(result, _reference.merge_scaled(n, n, chosen, pattern_only))


def test_compiled_merge_shared_indptr(compiled, rng):
    # selections sharing one indptr array (sparsegrad caches the arange):
    # the direct path checks it once; a step of 2 or 0 in it still counts
    n = 2000
    for steps in (None, 300, 1999):
        indptr = np.arange(n + 1, dtype=I64)
        if steps is not None:
            indptr[steps + 1:] += 1               # row `steps` holds two entries
            indptr[-1] = n + 1
        nnz = int(indptr[-1])
        terms = []
        for k, offset in enumerate((1, -1, 40, -40, 1)):
            indices = (np.arange(nnz, dtype=I64) + offset) % n
            if steps is not None:
                indices[steps + 1] = (indices[steps] + 1000) % n
                if indices[steps + 1] < indices[steps]:
                    indices[steps], indices[steps + 1] = indices[steps + 1], indices[steps]
            terms.append((indptr, indices, None if k == 2 else rng.standard_normal(nnz),
                           rng.standard_normal(n)))
        for pattern_only in (False, True):
            assert_same_result(call(compiled.merge_scaled, n, n, terms, pattern_only),
                               _reference.merge_scaled(n, n, terms, pattern_only))
    bad = terms[1][1].copy()
    bad[700] = n
    with pytest.raises(ValueError, match="term 1 column indices"):
        compiled.merge_scaled(n, n, [terms[0], (indptr, bad, None, None)] + terms[2:])


def test_compiled_merge_many_terms_and_segments(compiled, rng):
    # more terms than the block path takes; blocks of one row at the ends of a
    # long block; blocks that overlap
    n = 500
    many = [_shifted_selection(n, int(o), rng.standard_normal(n)) for o in range(140)]
    assert_same_result(call(compiled.merge_scaled, n, n, many),
                       _reference.merge_scaled(n, n, many))
    big = [(t[0], t[1], t[2], t[3], 1) for t in
           [_shifted_selection(n, int(o), rng.standard_normal(n)) for o in (3, 7, 11)]]
    tiny = [(np.array([0, 1]), np.array([k]), None, np.array([2.0]), first)
            for k, first in ((0, 0), (1, n + 1), (5, n + 1))]
    over = [(np.arange(101, dtype=I64), np.arange(100, dtype=I64), None, None, 250)]
    for chosen in (big + tiny, tiny + big + over, over + big):
        for pattern_only in (False, True):
            assert_same_result(
                call(compiled.merge_scaled, n + 2, n, chosen, pattern_only),
                _reference.merge_scaled(n + 2, n, chosen, pattern_only))


def test_compiled_merge_block_path_rejects_bad_input(compiled):
    n = 600
    for bad_col in (-1, n, 2 ** 60):
        for row in (0, 300, n - 1):
            indices = np.arange(n, dtype=I64)
            indices[row] = bad_col
            terms = [_shifted_selection(n, 3), (np.arange(n + 1, dtype=I64), indices, None,
                                                None, 0)]
            with pytest.raises(ValueError, match="term 1 column indices"):
                compiled.merge_scaled(n, n, terms)
    indptr = np.arange(n + 1, dtype=I64)
    indptr[300] = 302                 # a step of 2, then a decrease
    with pytest.raises(ValueError, match="decreases"):
        compiled.merge_scaled(n, n, [_shifted_selection(n, 3),
                                     (indptr, np.arange(n, dtype=I64), None, None)])
    indptr = np.arange(n + 1, dtype=I64)
    indptr[5:] -= 1
    indptr[-1] = n                    # valid: a step of 0, then 2 in the last row
    terms = [(indptr, np.arange(n, dtype=I64), None, None, 0)]
    assert_same_result(call(compiled.merge_scaled, n, n, terms),
                       _reference.merge_scaled(n, n, terms))


@pytest.mark.parametrize("dtype", COMPILED_DTYPES)
def test_compiled_coo_to_csr_paths(compiled, rng, dtype):
    # banded rows (the window), spread rows (sorted keys), a row of 400
    # entries (the dense marker), duplicates everywhere, in random order
    n_rows, n_cols = 40, 1000
    rows = np.concatenate([rng.integers(0, n_rows, 300), np.full(400, 7)]).astype(I64)
    near = np.clip(rows * 20 + rng.integers(-5, 6, len(rows)), 0, n_cols - 1)
    far = rng.integers(0, n_cols, len(rows))
    cols = np.where(rng.random(len(rows)) < 0.7, near, far).astype(I64)
    order = rng.permutation(len(rows))
    rows, cols = rows[order], cols[order]
    values = rng.standard_normal(len(rows)) * 1e8
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(len(rows))
    values = values.astype(dtype)
    for vals in (values, None):
        result = call(compiled.coo_to_csr, n_rows, n_cols, rows, cols, vals)
        check_canonical(result, (n_rows, n_cols))
        assert_same_result(result, _reference.coo_to_csr(n_rows, n_cols, rows, cols, vals))


def test_compiled_gather_rows_runs(compiled, rng):
    n = 30
    indptr, indices, data = _banded(rng, n, (-12, -6, -2, -1, 0, 1, 2, 6, 12))
    rows = np.concatenate([np.arange(5, 20), [-1, -1], np.arange(3, 6), [29, 0, 0, 1],
                           rng.integers(-1, n, 40), np.arange(n)[::-1], [-1]]).astype(I64)
    for d in (data, None, data.astype(np.complex64)):
        result = call(compiled.gather_rows, indptr, indices, d, rows)
        check_canonical(result, (len(rows), n))
        assert_same_result(result, _reference.gather_rows(indptr, indices, d, rows))
    with pytest.raises(ValueError, match="rows"):
        compiled.gather_rows(indptr, indices, data, np.array([0, 1, 2, n]))
    with pytest.raises(ValueError, match="rows"):
        compiled.gather_rows(indptr, indices, data, np.array([3, -2, 0]))
    # a gathered row whose extent runs backwards or out of the entries
    bad = np.array([0, 2, 1, 3])
    for rows in ([1], [0, 1], [2, 1]):
        with pytest.raises(ValueError, match="decreases"):
            compiled.gather_rows(bad, np.arange(3), None, np.array(rows))
    with pytest.raises(ValueError, match="decreases"):
        compiled.gather_rows(np.array([0, 10, 3]), np.arange(3), None, np.array([1]))


try:
    from hypothesis import given, strategies as st
except ImportError:  # hypothesis is a test extra; the tests above still run
    st = None

if st is not None:
    VALUE_DTYPES = [None, np.float32, np.float64, np.complex64, np.complex128]

    @st.composite
    def csr_matrices(draw, n_rows, n_cols, dtype):
        """Canonical CSR, values from a few fixed numbers (ties, zeros, cancellations)."""
        rows = [sorted(draw(st.sets(st.integers(0, n_cols - 1), max_size=n_cols)))
                if n_cols else [] for _ in range(n_rows)]
        indptr = np.zeros(n_rows + 1, I64)
        np.cumsum([len(r) for r in rows], out=indptr[1:])
        indices = np.array([c for r in rows for c in r], dtype=I64)
        if dtype is None:
            return indptr, indices, None
        values = draw(st.lists(st.sampled_from([0.0, -0.0, 1.0, -2.5, 0.1, 3e7, 1e-3]),
                               min_size=len(indices), max_size=len(indices)))
        data = np.array(values, dtype=dtype)
        if np.dtype(dtype).kind == "c":
            data = data + 1j * data[::-1]
        return indptr, indices, data

    @given(st.data())
    def test_hypothesis_compiled_matches_reference(compiled, data):
        draw = data.draw
        n_rows, n_cols, n_inner = (draw(st.integers(0, 6)) for _ in range(3))
        terms = []
        for _ in range(draw(st.integers(0, 4))):
            dtype = draw(st.sampled_from(VALUE_DTYPES))
            indptr, indices, values = draw(csr_matrices(n_rows, n_cols, dtype))
            scale_dtype = draw(st.sampled_from(VALUE_DTYPES))
            scale = None if scale_dtype is None else np.array(
                draw(st.lists(st.sampled_from([1.0, -0.5, 0.0, 1e-8, 3.3]),
                              min_size=n_rows, max_size=n_rows)), dtype=scale_dtype)
            terms.append((indptr, indices, values, scale))
        pattern_only = draw(st.booleans())
        assert_same_result(compiled.merge_scaled(n_rows, n_cols, terms, pattern_only),
                           _reference.merge_scaled(n_rows, n_cols, terms, pattern_only))

        dtype = draw(st.sampled_from(VALUE_DTYPES))
        a = draw(csr_matrices(n_inner, n_rows, dtype))
        b = draw(csr_matrices(n_rows, n_cols, draw(st.sampled_from(VALUE_DTYPES))))
        assert_same_result(compiled.matmul(*a, *b, n_cols, pattern_only),
                           _reference.matmul(*a, *b, n_cols, pattern_only))

        rows = np.array(draw(st.lists(st.integers(-1, n_rows - 1), max_size=8)), dtype=I64)
        assert_same_result(compiled.gather_rows(*b, rows), _reference.gather_rows(*b, rows))

        if a[2] is not None:
            scale = np.arange(n_inner, dtype=draw(st.sampled_from(VALUE_DTYPES[1:]))) - 1.5
            assert_same_result(compiled.scale_rows(a[0], a[2], scale),
                               _reference.scale_rows(a[0], a[2], scale))

        n = draw(st.integers(0, 20)) if n_rows and n_cols else 0
        coo_rows = np.array(draw(st.lists(st.integers(0, max(n_rows - 1, 0)), min_size=n,
                                          max_size=n)), dtype=I64)
        coo_cols = np.array(draw(st.lists(st.integers(0, max(n_cols - 1, 0)), min_size=n,
                                          max_size=n)), dtype=I64)
        coo_values = np.array(draw(st.lists(st.sampled_from([1.0, -1.0, 1e16, 0.5]), min_size=n,
                                            max_size=n)), dtype=draw(st.sampled_from(REAL)))
        for values in (coo_values, None):
            assert_same_result(compiled.coo_to_csr(n_rows, n_cols, coo_rows, coo_cols, values),
                               _reference.coo_to_csr(n_rows, n_cols, coo_rows, coo_cols, values))


# ---------------------------------------------------------------------------
# merge_scaled: selection terms given by their columns (indptr None, -1: an
# empty row), which sparsegrad passes without compressing them
# ---------------------------------------------------------------------------

def _selection_columns(rng, m, n_cols, holes=0.2):
    columns = rng.integers(0, n_cols, m) if n_cols else np.full(m, -1)
    columns[rng.random(m) < holes] = -1
    return columns.astype(I64)


def test_merge_scaled_selection_terms_against_dense(kernels, rng):
    for _ in range(40):
        n_rows, n_cols = (int(x) for x in rng.integers(0, 12, 2))
        terms = []
        for k in range(int(rng.integers(1, 6))):
            scale = rng.standard_normal(n_rows) if rng.random() < 0.6 else None
            if k % 2 == 0:
                terms.append((None, _selection_columns(rng, n_rows, n_cols), None, scale))
            else:
                terms.append(random_csr(rng, n_rows, n_cols) + (scale,))
        if n_rows > 2 and rng.random() < 0.5:  # a block of rows, stacked
            m = int(rng.integers(0, n_rows))
            terms.append((None, _selection_columns(rng, m, n_cols), None, None,
                          int(rng.integers(0, n_rows - m + 1))))
        _check_merge(kernels, n_rows, n_cols, terms, _expected_blocks)


def test_merge_scaled_selection_term_example(kernels):
    columns = np.array([2, -1, 0])                 # row 1 is empty
    result = call(kernels.merge_scaled, 3, 3, [(None, columns, None, np.array([1., 2., 3.]))])
    np.testing.assert_array_equal(result[0], [0, 1, 1, 2])
    np.testing.assert_array_equal(result[1], [2, 0])
    np.testing.assert_array_equal(result[2], [1.0, 3.0])


def test_merge_scaled_selection_terms_rejected(kernels):
    columns = np.array([0, -1, 1])
    with pytest.raises(ValueError, match="has no data"):
        kernels.merge_scaled(3, 2, [(None, columns, np.ones(3), None)])
    with pytest.raises(ValueError, match="one column per row"):
        kernels.merge_scaled(4, 2, [(None, columns, None, None)])
    with pytest.raises(ValueError, match=">= -1|column indices"):
        kernels.merge_scaled(3, 2, [(None, np.array([0, -2, 1]), None, None)])
    with pytest.raises(ValueError, match="cols|column"):
        kernels.merge_scaled(3, 2, [(None, np.array([0, 2, 1]), None, None)])


@pytest.mark.parametrize("pattern_only", [False, True])
def test_compiled_merge_selection_terms_on_every_path(compiled, rng, pattern_only):
    # shifted selections with holes at the ends of grid lines (a padded 2-d
    # stencil: the direct path leaves its template at each hole), holes at
    # random rows, a selection with its holes in the first/last place of the
    # template, and a band in some rows (the general rows); bit for bit
    # against the reference, which compresses the selections first
    n = 4000
    width = 50
    terms = []
    for offset in (-width, -1, 1, width):
        columns = np.arange(n, dtype=I64) + offset
        line = np.arange(n) % width
        columns[(columns < 0) | (columns >= n)] = -1
        if offset == 1:
            columns[line == width - 1] = -1
        if offset == -1:
            columns[line == 0] = -1
        terms.append((None, columns, None, rng.standard_normal(n)))
    terms.append((None, np.arange(n, dtype=I64), None,
                  np.broadcast_to(np.float64(-4.0), (n,))))
    random_holes = (np.arange(n, dtype=I64) + 7) % n
    random_holes[rng.random(n) < 0.05] = -1
    terms.append((None, random_holes, None, None))
    band = _banded(rng, n, (-2, 0, 2))
    indptr = np.arange(n + 1, dtype=I64)          # the band only in rows 1000..1099
    counts = np.diff(band[0])
    per_row = np.ones(n, dtype=I64)
    per_row[1000:1100] = counts[1000:1100]
    np.cumsum(per_row, out=indptr[1:])
    cols = [np.array([r]) if not 1000 <= r < 1100 else band[1][band[0][r]:band[0][r + 1]]
            for r in range(n)]
    few = (indptr, np.concatenate(cols).astype(I64), None, None)
    for chosen in (terms[:5], terms, terms + [few], [terms[5]], terms[::-1]):
        for index_dtype in (None, np.int32):
            result = call(compiled.merge_scaled, n, n, chosen, pattern_only, index_dtype)
            if index_dtype is None:
                check_canonical(result, (n, n))
            assert_same_result(result, _reference.merge_scaled(n, n, chosen, pattern_only,
                                                               index_dtype))
    stacked = [t[:4] + (0,) for t in terms[:3]] + [(None, terms[3][1][:n - 10], None, None, 10)]
    assert_same_result(call(compiled.merge_scaled, n, n, stacked, pattern_only),
                       _reference.merge_scaled(n, n, stacked, pattern_only))


def test_compiled_merge_in_parts_rejects_bad_indptr_at_a_split(compiled):
    # an indptr entry far outside the entries, or decreasing, at the rows where
    # a merge is split: reported as one merge would, never written through
    n = 600
    for bad in (10 ** 9, -5, 100):
        indptr = np.arange(n + 1, dtype=I64)
        indptr[n // 3:2 * n // 3] = bad
        terms = [_shifted_selection(n, 3), (indptr, np.arange(n, dtype=I64), None, None)]
        with pytest.raises(ValueError, match="term 1"):
            compiled.merge_scaled(n, n, terms)


# ---------------------------------------------------------------------------
# multiply_add, take_product: pending row factors (a, b) in one pass
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, "mixed"])
@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_multiply_add_rounds_as_numpy(kernels, rng, dtype, n):
    dtypes = [np.float32, np.float64, np.float64] if dtype == "mixed" else [dtype] * 3
    a, b, c = (rng.standard_normal(n).astype(t) * 10.0 ** rng.integers(-3, 4, n)
               for t in dtypes)
    expected = a * b + c
    got = call(kernels.multiply_add, a, b, c)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    strided = np.repeat(a, 2)[::2]          # (not contiguous: numpy's own product)
    np.testing.assert_array_equal(kernels.multiply_add(strided, b, c), expected)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_multiply_add_of_scalars_rounds_as_numpy(kernels, rng, dtype, n):
    # b, c numpy scalars of a's dtype (a row factor times a number plus a
    # number: two terms of one matrix combined), alone or with a vector
    a, b, c = (rng.standard_normal(n).astype(dtype) * 10.0 ** rng.integers(-3, 4, n)
               for _ in range(3))
    times, plus = np.dtype(dtype).type(-4.0e6 / 3.0), np.dtype(dtype).type(0.1)
    for args in [(a, times, plus), (a, times, c), (a, b, plus)]:
        expected = args[0] * args[1] + args[2]
        got = call(kernels.multiply_add, *args)
        assert got.dtype == expected.dtype and got.shape == (n,)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_sum_of_products_rounds_as_numpy(kernels, rng, dtype, n):
    # (a * b) * s + (c * e) * t with any of b, e, s, t absent: two terms of one
    # matrix with pending row factors, combined in one pass
    a, b, c, e = (rng.standard_normal(n).astype(dtype) * 10.0 ** rng.integers(-3, 4, n)
                  for _ in range(4))
    number = np.dtype(dtype).type
    s, t = number(-4.0e6 / 3.0), number(0.1)
    for b_, s_, e_, t_ in itertools.product((b, None), (s, None), (e, None), (t, None)):
        first = a if b_ is None else a * b_
        second = c if e_ is None else c * e_
        expected = (first if s_ is None else first * s_) + (second if t_ is None else
                                                              second * t_)
        got = call(kernels.sum_of_products, a, b_, s_, c, e_, t_)
        assert got.dtype == expected.dtype and got.shape == (n,)
        np.testing.assert_array_equal(got, expected)


def test_sum_of_products_of_other_layouts_goes_to_numpy(kernels, rng):
    # strided, mixed dtypes, a Python float as a scale: numpy's own arithmetic
    a, b, c = (rng.standard_normal(9) for _ in range(3))
    strided = np.repeat(a, 2)[::2]
    np.testing.assert_array_equal(kernels.sum_of_products(strided, b, None, c, None, None),
                                  a * b + c)
    single = c.astype(np.float32)
    np.testing.assert_array_equal(kernels.sum_of_products(a, b, None, single, None, None),
                                  a * b + single)
    np.testing.assert_array_equal(kernels.sum_of_products(a, None, 2.0, c, b, None),
                                  a * 2.0 + c * b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, "mixed"])
def test_take_product_rounds_and_indexes_as_numpy(kernels, rng, dtype):
    m = 50
    a = rng.standard_normal(m).astype(np.float32 if dtype == "mixed" else dtype)
    b = rng.standard_normal(m).astype(np.float64 if dtype == "mixed" else dtype)
    for rows in (rng.integers(-m, m, 200), np.zeros(0, I64), np.arange(m)[::-1].copy()):
        rows = rows.astype(I64)
        expected = (a * b)[rows]
        got = call(kernels.take_product, a, b, rows)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    for bad in (m, -m - 1):
        with pytest.raises(IndexError, match="out of bounds"):
            kernels.take_product(a, b, np.array([0, bad], dtype=I64))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.complex128, bool])
def test_take_indexes_as_numpy(kernels, rng, dtype):
    m = 50
    a = (rng.standard_normal(m) * 100).astype(dtype)
    for rows in (rng.integers(-m, m, 200), np.zeros(0, I64), np.arange(m)[::-1].copy()):
        rows = rows.astype(I64)
        got = call(kernels.take, a, rows)
        assert got.dtype == a.dtype and got.base is None
        np.testing.assert_array_equal(got, a[rows])
    np.testing.assert_array_equal(kernels.take(a[::2], rows[:5] // 2), a[::2][rows[:5] // 2])
    for bad in (m, -m - 1):
        with pytest.raises(IndexError, match="index %d is out of bounds for axis 0 with size %d"
                           % (bad, m)):
            kernels.take(a, np.array([0, bad], dtype=I64))


def _rolled_grid(n, shift, axis):
    """A periodic stencil's index array: the neighbours' numbers on an n x n grid."""
    return np.roll(np.arange(n * n).reshape(n, n), shift, axis=axis).ravel().astype(I64)


def test_index_runs_of_stencils_and_of_random_rows(kernels, rng):
    # east and west neighbours: two runs per grid line; north and south: two in all
    assert kernels.index_runs(_rolled_grid(16, -1, 1)).tolist() == sorted(
        [0, 256] + [16 * j + 15 for j in range(16)] + [16 * j for j in range(1, 16)])
    assert kernels.index_runs(_rolled_grid(16, 1, 0)).tolist() == [0, 16, 256]
    assert kernels.index_runs(np.arange(5, 70, dtype=I64)).tolist() == [0, 65]
    # none: empty, a negative row, or runs too short to pay
    assert kernels.index_runs(np.zeros(0, I64)) is None
    assert kernels.index_runs(np.array([-1, 0, 1, 2, 3, 4, 5, 6], I64)) is None
    assert kernels.index_runs(np.arange(20, dtype=I64)[::-1].copy()) is None
    assert kernels.index_runs(np.arange(7, dtype=I64)) is None           # (7 // 8 == 0)
    assert kernels.index_runs(np.arange(7, dtype=I64), min_run=7).tolist() == [0, 7]
    with pytest.raises(ValueError, match="min_run must be >= 1"):
        kernels.index_runs(np.arange(8, dtype=I64), min_run=0)
    big = np.array([0, 2 ** 62, 2 ** 62 + 1, 2 ** 63 - 1], I64)        # (no overflow)
    assert kernels.index_runs(big, min_run=1).tolist() == [0, 1, 3, 4]
    for _ in range(300):
        rows = (np.cumsum(rng.integers(0, 3, int(rng.integers(1, 60))))
                + int(rng.integers(-2, 4))).astype(I64)
        min_run = int(rng.integers(1, 6))
        runs = kernels.index_runs(rows, min_run)
        expected = _reference.index_runs(rows, min_run)
        if rows.min() < 0:
            assert runs is None
        # an independent count: positions that do not follow their predecessor by one
        starts = [0] + [i for i in range(1, len(rows)) if rows[i] != rows[i - 1] + 1]
        if rows.min() >= 0 and len(starts) <= len(rows) // min_run:
            assert runs.dtype == I64 and runs.tolist() == starts + [len(rows)]
        else:
            assert runs is None
        assert (expected is None) == (runs is None)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.complex128])
def test_take_by_runs_equals_numpy(kernels, rng, dtype):
    n = 20  # (east: 2 runs per line, 40 of 400 rows, within 400 // 8)
    a = (rng.standard_normal(n * n) * 100).astype(dtype)
    b = (rng.standard_normal(n * n) * 100).astype(dtype)
    for shift, axis in ((-1, 1), (1, 1), (-1, 0), (1, 0), (0, 0)):
        rows = _rolled_grid(n, shift, axis)
        runs = kernels.index_runs(rows)
        assert runs is not None
        got = call(kernels.take, a, rows, runs)
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, a[rows])
        if dtype != np.int64:
            np.testing.assert_array_equal(call(kernels.take_product, a, b, rows, runs),
                                          (a * b)[rows])
    # a run past the end of ``a``: numpy's error, naming the first entry out of range
    rows = np.arange(395, 405, dtype=I64)
    runs = kernels.index_runs(rows, min_run=2)
    for take, args in ((kernels.take, (a,)), (kernels.take_product, (a, b))):
        if dtype == np.int64 and take is kernels.take_product:
            continue
        with pytest.raises(IndexError, match="index 400 is out of bounds for axis 0 with "
                                             "size 400"):
            take(*args, rows, runs)


def test_take_refuses_runs_of_other_rows(kernels):
    a = np.arange(10.0)
    rows = np.array([1, 2, 3, 4, 0, 1, 2, 3], I64)
    for runs in (np.array([0, 8], I64), np.array([0, 3, 8], I64), np.array([1, 4, 8], I64),
                 np.array([0, 4, 7], I64), np.array([0, 4, 4, 8], I64), np.array([0], I64)):
        with pytest.raises(ValueError, match="take: the runs do not fit the rows"):
            kernels.take(a, rows, runs)
        with pytest.raises(ValueError, match="take_product: the runs do not fit"):
            kernels.take_product(a, a, rows, runs)
    np.testing.assert_array_equal(kernels.take(a, rows, np.array([0, 4, 8], I64)), a[rows])


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_same_index_compares_every_entry(kernels, rng, dtype):
    # an index array read again: the copy kept from the last read against it
    for n in (0, 1, 7, 1000):
        a = rng.integers(0, 100, n).astype(dtype)
        before = a.copy()
        assert kernels.same_index(a, a.copy()) is True
        assert kernels.same_index(a, a[:-1]) is (n == 0)
        for position in sorted({0, n // 2, n - 1}) if n else ():
            changed = a.copy()
            changed[position] += 1
            assert kernels.same_index(a, changed) is False
        np.testing.assert_array_equal(a, before)
    a = np.arange(10, dtype=I64)
    assert kernels.same_index(a[::2], np.arange(0, 10, 2))          # (strided: the reference)
    assert kernels.same_index(a, a.astype(np.int32))               # (mixed dtypes: numbers)
    signed = np.array([-1, 5, -2 ** 31, 2 ** 31 - 1], dtype=I64)
    assert kernels.same_index(signed.astype(np.int32), signed)
    for position in range(4):
        changed = signed.copy()
        changed[position] += 2 ** 32                                 # (same low 32 bits)
        assert not kernels.same_index(signed.astype(np.int32), changed)
        assert not kernels.same_index(changed, signed.astype(np.int32))
    assert not kernels.same_index(a, a.reshape(2, 5))              # (shapes differ)
    assert not kernels.same_index(a, np.arange(9, dtype=I64))


def test_jacobians_past_two_to_the_31_columns_index_with_int64():
    # a seed of 2^31 + 5 unknowns of which the value depends on four, without
    # materialising the seed: what a 3-d problem with more than 2^31 columns meets
    import scipy.sparse
    from sparsegrad import _backend, _jacobian, forward
    from sparsegrad._value import make
    columns = np.array([3, 2**31 - 1, 2**31, 2**31 + 4], dtype=np.int64)
    x0 = np.array([1.0, 2.0, 3.0, 4.0])
    A = scipy.sparse.csr_matrix(np.array([[1.0, 2, 0, 0], [0, 1, 0, 3], [0, 0, 0, 1]]))

    def F(x):
        r = np.zeros(5, like=x)
        r[:3] = A @ np.exp(x)
        r[3:] = x[::-1][:2] * x[1:3]
        return np.concatenate([r, np.sum(x ** 2, keepdims=True)]) + x.mean()

    for size, index in ((2**31 + 5, np.int64), (2**31 - 100, np.int32)):
        seed = _jacobian.Seed(size, scalar=False, complex=False, pattern_only=False,
                              backend=_backend.CPU)
        selection = _jacobian._selection(size, columns % size, owned=True)
        x = make(x0.copy(), _jacobian.Jacobian(seed, 4, matrix=selection))
        J = F(x).dvalue
        assert J.shape == (6, size)
        assert J.indices.dtype == index and J.indptr.dtype == index
        small = F(forward.seed(x0)).dvalue.tocoo()
        # (compared entry by entry: scipy's column indexing would allocate per column)
        assert J.has_canonical_format and J.nnz == small.nnz
        got = sorted(zip(np.repeat(np.arange(6), np.diff(J.indptr)).tolist(),
                         J.indices.tolist(), J.data.tolist()))
        expected = sorted(zip(small.row.tolist(), (columns % size)[small.col].tolist(),
                              small.data.tolist()))
        assert got == expected
