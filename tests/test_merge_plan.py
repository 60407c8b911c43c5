"""Merge plans: ``merge_plan`` and ``fill_scaled`` on both kernel implementations.

A plan says where each entry of ``merge_scaled``'s terms lands in its result;
``fill_scaled`` then writes the values of a later merge of terms with the same
patterns and any values.  It returns fresh copies of the pattern and data
that must be, bit for bit and in the same dtype, what ``merge_scaled`` of
those terms returns: every form of term (4-, 5- and 6-tuples, selections by
their columns with empty rows, pairs of row scales, broadcast scales, blocks
at row offsets, terms that overlap and sum), every dtype (the compiled fill
writes float64 and hands other dtypes to the reference), in one thread or
several.  The last tests go through the public API: repeated evaluations
filled by kept plans, the cache's limit, changed branches and index arrays,
and products with constant scipy matrices kept between evaluations.
"""
import numpy as np
import pytest

import sparsegrad
from sparsegrad import _jacobian as jacobian_rules, forward
from sparsegrad._fast import _reference
from sparsegrad.testing import numerical_jacobian
# (the kernel fixtures of test_kernels: the reference, and the compiled module in
# one thread and with every merge and fill split in three)
from test_kernels import (I64, _compiled_module, _restore, _threaded, call,  # noqa: F401
                          compiled, kernels, random_csr)

FORMS = (4, 5, 6)
DTYPES = ["float64", "float32", "complex128", "mixed"]


# ---------------------------------------------------------------------------
# random terms: patterns first, then values for them (as often as wanted)
# ---------------------------------------------------------------------------

def _skeletons(rng, n_rows, n_cols, n_terms=None):
    """Random term patterns ``(form, indptr, indices, first_row, m)``: ``form``
    is the tuple length (4: all rows from row 0), ``indptr`` None for a
    selection by its columns (``-1`` holes).  Some patterns come twice, the
    second time with the same arrays (duplicates summed in term order), and
    blocks overlap."""
    if n_terms is None:
        n_terms = int(rng.integers(1, 7))
    out = []
    while len(out) < n_terms:
        form = int(rng.choice(FORMS))
        if form == 4:
            m, first = n_rows, 0
        else:
            m = int(rng.integers(0, n_rows + 1))
            first = int(rng.integers(0, n_rows - m + 1))
        if rng.random() < 0.4:  # a selection by its columns
            indptr = None
            if n_cols:
                indices = rng.integers(0, n_cols, m).astype(I64)
                indices[rng.random(m) < 0.25] = -1
            else:
                indices = np.full(m, -1, dtype=I64)
        else:
            indptr, indices, _ = random_csr(rng, m, n_cols, rng.random())
        out.append((form, indptr, indices, first, m))
        if rng.random() < 0.3:  # the same matrix again: its entries summed twice
            out.append(out[-1])
    return out[:n_terms]


def _array_dtype(rng, dtype):
    if dtype == "mixed":
        return [np.float32, np.float64][rng.integers(2)]
    return np.dtype(dtype).type


def _draw(rng, n, dtype):
    """``n`` values of magnitudes from 1e-6 to 1e6 (so that the order of a sum
    shows in its rounding), some zero."""
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, n)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, n)
    values[rng.random(n) < 0.1] = 0
    return values.astype(dtype)


def _scale(rng, m, dtype, choice):
    """A row scale of ``m`` rows: None, a vector, a broadcast (stride-0) value,
    a strided view, or a pair ``(d, c)`` (contiguous or strided ``c``)."""
    if choice == "none":
        return None
    if choice == "vector":
        return _draw(rng, m, _array_dtype(rng, dtype))
    if choice == "broadcast":
        return np.broadcast_to(_draw(rng, 1, _array_dtype(rng, dtype))[0], (m,))
    if choice == "strided":
        return _draw(rng, 2 * m, _array_dtype(rng, dtype))[::2]
    d = _draw(rng, m, _array_dtype(rng, dtype))
    c = _draw(rng, 2 * m, _array_dtype(rng, dtype))
    return (d, c[::2] if choice == "pair, strided" else c[:m])


SCALES = ["none", "vector", "broadcast", "strided", "pair", "pair, strided"]


def _term(rng, skeleton, dtype, factors=(float, int, np.float64, np.float32)):
    """A merge term for ``skeleton`` with fresh values of ``dtype``: new data
    (or None: ones), a new row scale of a random kind, a new factor."""
    form, indptr, indices, first, m = skeleton
    data = None
    if indptr is not None and rng.random() < 0.75:
        data = _draw(rng, len(indices), _array_dtype(rng, dtype))
    scale = _scale(rng, m, dtype, SCALES[rng.integers(len(SCALES))])
    term = (indptr, indices, data, scale)
    if form == 4:
        return term
    if form == 5:
        return term + (first,)
    if scale is None:
        factor = 1.0
    else:
        kind = factors[rng.integers(len(factors))]
        factor = kind(rng.integers(-3, 4)) if kind is int else kind(rng.standard_normal() * 4)
    return term + (first, factor)


def _patterns(terms):
    """The terms as merge_plan takes them: ``(indptr, indices, first_row)``."""
    return [(t[0], t[1], t[4] if len(t) > 4 else 0) for t in terms]


def _assert_identical(actual, expected):
    """Same dtype, same shape, the same values bit for bit (NaNs included)."""
    assert isinstance(actual, np.ndarray)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual.view(np.uint8), expected.view(np.uint8))


def _assert_same_merge(actual, expected):
    """Two ``indptr, indices, data`` triples: identical index arrays (dtype and
    values) and identical data."""
    assert isinstance(actual, tuple) and len(actual) == 3
    for a, e in zip(actual[:2], expected[:2]):
        assert isinstance(a, np.ndarray) and a.dtype == e.dtype
        np.testing.assert_array_equal(a, e)
    _assert_identical(actual[2], expected[2])


def _check_plan(kernels, rng, n_rows, n_cols, skeletons, dtype, index_dtype, refills=3):
    """Merge terms of ``skeletons``, plan the merge, then fill ``refills`` new
    valuations of the same patterns by the plan: each must equal its merge."""
    terms = [_term(rng, s, dtype) for s in skeletons]
    merged = call(kernels.merge_scaled, n_rows, n_cols, terms, index_dtype=index_dtype)
    indptr, indices = merged[:2]
    plan = call(kernels.merge_plan, indptr, indices, _patterns(terms))
    assert isinstance(plan, list) and len(plan) == len(terms)
    for codes, term in zip(plan, terms):
        assert isinstance(codes, np.ndarray) and codes.dtype == np.int32
        assert codes.shape == term[1].shape
    if rng.random() < 0.5:  # (a structure keeps its plans read-only)
        for codes in plan:
            codes.setflags(write=False)
    if rng.random() < 0.5:  # (and the pattern it keeps)
        for array in (indptr, indices):
            array.setflags(write=False)
    # (the compiled fill hands complex values to the reference, whose products
    # may differ from the compiled merge's in the last bit, as the merges do)
    merge = _reference.merge_scaled if dtype == "complex128" else kernels.merge_scaled
    if merge is not kernels.merge_scaled:
        merged = call(merge, n_rows, n_cols, terms, index_dtype=index_dtype)
    _assert_same_merge(call(kernels.fill_scaled, indptr, indices, terms, plan), merged)
    for _ in range(refills):
        new = [_term(rng, s, dtype) for s in skeletons]
        expected = call(merge, n_rows, n_cols, new, index_dtype=index_dtype)
        _assert_same_merge(call(kernels.fill_scaled, indptr, indices, new, plan), expected)
    return indptr, indices, plan


# ---------------------------------------------------------------------------
# 1. fill_scaled by a plan == merge_scaled, on every module
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("index_dtype", [None, np.int32])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_by_plan_equals_merge(kernels, rng, dtype, index_dtype):
    for _ in range(25):
        n_rows, n_cols = (int(x) for x in rng.integers(0, 13, 2))
        skeletons = _skeletons(rng, n_rows, n_cols)
        _check_plan(kernels, rng, n_rows, n_cols, skeletons, dtype, index_dtype)


def test_fill_by_plan_larger_and_banded(kernels, rng):
    # rows past the compiled fill's block of 1024 rows; stencil selections
    # sharing their columns, a dense-ish block, a band of two diagonals
    n = 2500
    cols = np.arange(n, dtype=I64)
    skeletons = [(4, None, cols, 0, n),
                 (6, None, np.where(cols > 0, cols - 1, -1), 0, n),
                 (5, None, (cols + 1) % n, 0, n)]
    band_indptr = np.arange(0, 2 * 600 + 1, 2, dtype=I64)
    band_indices = np.stack([np.arange(600), np.arange(600) + 5], axis=1).ravel()
    skeletons.append((6, band_indptr, band_indices.astype(I64), 1000, 600))
    indptr, indices, _ = random_csr(rng, 40, n, 0.02)
    skeletons += [(5, indptr, indices, 1010, 40), (5, indptr, indices, 1020, 40)]
    for dtype in ("float64", "float32"):
        _check_plan(kernels, rng, n, n, skeletons, dtype, None, refills=2)


def test_plan_example(kernels):
    # two selections by their columns: the second adds where the first stored
    terms = [(None, np.array([1, -1]), None, np.array([2.0, 3.0])),
             (None, np.array([1, 0]), None, None)]
    indptr, indices = np.array([0, 1, 2]), np.array([1, 0])
    plan = kernels.merge_plan(indptr, indices, _patterns(terms))
    assert [c.dtype for c in plan] == [np.int32, np.int32]
    np.testing.assert_array_equal(plan[0], [0, -1])
    np.testing.assert_array_equal(plan[1], [1, 2])
    result = call(kernels.fill_scaled, indptr, indices, terms, plan)
    _assert_same_merge(result, (indptr, indices, np.array([3.0, 1.0])))


def test_plan_sums_in_term_order(kernels):
    # ((1e16 + 1) + 1) rounds to 1e16 twice; any other order gives 1e16 + 2
    one = (np.array([0, 1]), np.array([0], dtype=I64))
    terms = [one + (np.array([1e16]), None), one + (np.array([1.0]), None),
             one + (None, np.array([1.0]), 0, 1.0)]
    merged = kernels.merge_scaled(1, 1, terms)
    plan = kernels.merge_plan(*merged[:2], _patterns(terms))
    np.testing.assert_array_equal(np.concatenate(plan), [0, 1, 1])
    result = kernels.fill_scaled(*merged[:2], terms, plan)
    _assert_same_merge(result, merged)
    assert result[2][0] == (1e16 + 1.0) + 1.0


def test_plan_of_no_terms_and_empty_terms(kernels):
    empty = (np.zeros(1, I64), np.zeros(0, I64), None, None, 0)
    for n_rows, terms in [(3, []), (3, [empty]), (0, [empty, empty])]:
        for index_dtype in (None, np.int32):
            merged = kernels.merge_scaled(n_rows, 2, terms, index_dtype=index_dtype)
            plan = kernels.merge_plan(*merged[:2], _patterns(terms))
            assert len(plan) == len(terms)
            _assert_same_merge(call(kernels.fill_scaled, *merged[:2], terms, plan), merged)


# ---------------------------------------------------------------------------
# 2. the compiled module against the reference
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("index_dtype", [None, np.int32])
def test_compiled_plan_and_fill_match_reference(compiled, rng, index_dtype):
    for _ in range(40):
        n_rows, n_cols = (int(x) for x in rng.integers(0, 13, 2))
        skeletons = _skeletons(rng, n_rows, n_cols)
        terms = [_term(rng, s, "float64") for s in skeletons]
        indptr, indices, _ = _reference.merge_scaled(n_rows, n_cols, terms,
                                                     index_dtype=index_dtype)
        expected = _reference.merge_plan(indptr, indices, _patterns(terms))
        actual = call(compiled.merge_plan, indptr, indices, _patterns(terms))
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert a.dtype == e.dtype
            np.testing.assert_array_equal(a, e)
        for dtype in ("float64", "mixed"):
            new = [_term(rng, s, dtype) for s in skeletons]
            _assert_same_merge(call(compiled.fill_scaled, indptr, indices, new, actual),
                               _reference.fill_scaled(indptr, indices, new, expected))


def test_compiled_fill_writes_float64_itself(compiled, rng, monkeypatch):
    # float64 data, contiguous, strided or broadcast scales, pairs of contiguous
    # vectors and Python float factors: the compiled loop, not the reference
    def refuse(*args):
        raise AssertionError("the compiled fill handed float64 terms to the reference")

    for _ in range(20):
        n_rows, n_cols = (int(x) for x in rng.integers(1, 13, 2))
        skeletons = _skeletons(rng, n_rows, n_cols)
        terms = [_term(rng, s, "float64", factors=(float,)) for s in skeletons]
        terms = [t if not isinstance(t[3], tuple) or t[3][1].flags.c_contiguous
                 else t[:3] + (t[3][0],) + t[4:] for t in terms]
        index_dtype = [None, np.int32][rng.integers(2)]
        expected = compiled.merge_scaled(n_rows, n_cols, terms, index_dtype=index_dtype)
        plan = compiled.merge_plan(*expected[:2], _patterns(terms))
        with monkeypatch.context() as patch:
            patch.setattr(_reference, "fill_scaled", refuse)
            actual = compiled.fill_scaled(*expected[:2], terms, plan)
        _assert_same_merge(actual, expected)


def test_compiled_fill_of_foreign_layouts_equals_reference(compiled, rng):
    # byte-swapped or misaligned patterns and codes: the compiled fill's checks
    # (numpy's C API) send them to the reference, which gives the same values
    n_rows = n_cols = 9
    skeletons = _skeletons(rng, n_rows, n_cols)
    terms = [_term(rng, s, "float64") for s in skeletons]
    indptr, indices, _ = _reference.merge_scaled(n_rows, n_cols, terms, index_dtype=np.int32)
    plan = _reference.merge_plan(indptr, indices, _patterns(terms))

    def misaligned(a):
        buffer = np.empty(a.nbytes + 1, np.uint8)[1:]
        out = buffer.view(a.dtype)
        out[...] = a
        return out

    for change in (lambda a: a.astype(a.dtype.newbyteorder()), misaligned):
        for args in ((change(indptr), indices, plan), (indptr, change(indices), plan),
                     (indptr, indices, [change(c) for c in plan])):
            _assert_same_merge(call(compiled.fill_scaled, args[0], args[1], terms, args[2]),
                               _reference.fill_scaled(args[0], args[1], terms, args[2]))


# ---------------------------------------------------------------------------
# 3. threads: the compiled fill split into parts equals the fill in one
# ---------------------------------------------------------------------------

def test_threaded_fill_equals_one_thread(rng):
    module = _compiled_module()
    threads = module.get_threads()
    try:
        for n_rows in (300, 517):
            n_cols = n_rows
            cols = np.arange(n_rows, dtype=I64)
            skeletons = _skeletons(rng, n_rows, n_cols, 6) + [
                (4, None, cols, 0, n_rows), (5, None, (cols + 3) % n_cols, 0, n_rows),
                (6, None, np.where(cols % 7 == 0, -1, cols), 0, n_rows)]
            terms = [_term(rng, s, "float64") for s in skeletons]
            _threaded(module, 1)
            indptr, indices, _ = module.merge_scaled(n_rows, n_cols, terms)
            plan = module.merge_plan(indptr, indices, _patterns(terms))
            for _ in range(3):
                new = [_term(rng, s, "float64", factors=(float,)) for s in skeletons]
                _restore(module, 1)
                single = module.fill_scaled(indptr, indices, new, plan)
                _assert_same_merge(single, module.merge_scaled(n_rows, n_cols, new))
                module.set_threads(3)
                for entries in (1, 7, 100):
                    module._set_parallel_entries(entries)
                    _assert_same_merge(call(module.fill_scaled, indptr, indices, new, plan),
                                       single)
    finally:
        _restore(module, threads)


def test_threaded_plan_equals_one_thread(rng):
    # merge_plan split into row ranges: every code as in one pass (the first term
    # at a place stores, the later ones add), and a bad entry in any part raises
    module = _compiled_module()
    threads = module.get_threads()
    try:
        for n_rows in (300, 517):
            cols = np.arange(n_rows, dtype=I64)
            skeletons = _skeletons(rng, n_rows, n_rows, 6) + [
                (4, None, cols, 0, n_rows), (5, None, np.where(cols % 7 == 0, -1, cols), 0,
                                             n_rows)]
            terms = [_term(rng, s, "float64") for s in skeletons]
            _restore(module, 1)
            indptr, indices, _ = module.merge_scaled(n_rows, n_rows, terms)
            single = module.merge_plan(indptr, indices, _patterns(terms))
            assert all(np.array_equal(a, b) for a, b in
                       zip(single, _reference.merge_plan(indptr, indices, _patterns(terms))))
            module.set_threads(3)
            for entries in (1, 7, 100):
                module._set_parallel_entries(entries)
                plan = module.merge_plan(indptr, indices, _patterns(terms))
                assert all(a.dtype == b.dtype and np.array_equal(a, b)
                           for a, b in zip(plan, single))
                # an entry outside the pattern in the last row (the last part's)
                last_row = indices[indptr[-2]:indptr[-1]]
                outside = [(None, np.full(n_rows, -1, dtype=I64), 0)]
                outside[0][1][-1] = np.setdiff1d(np.arange(n_rows), last_row)[0]
                with pytest.raises(ValueError, match="outside the merged pattern"):
                    module.merge_plan(indptr, indices, _patterns(terms) + outside)
    finally:
        _restore(module, threads)


# ---------------------------------------------------------------------------
# 4. errors: ValueError, never a crash or a write out of bounds
# ---------------------------------------------------------------------------

def _error_case(dtype):
    """4 x 5 result of a CSR term, a selection with a hole and a 2-row block
    from row 1: ``n_rows, terms, indptr, indices, plan``."""
    dtype = np.dtype(dtype).type
    a = (np.array([0, 2, 3, 3, 5]), np.array([0, 2, 1, 3, 4]),
         np.arange(1, 6).astype(dtype), np.full(4, 2, dtype=dtype))
    s = (None, np.array([2, -1, 0, 4]), None, np.arange(1, 5).astype(dtype))
    b = (np.array([0, 1, 3]), np.array([1, 0, 3]), np.ones(3, dtype=dtype), None, 1)
    terms = [a, s, b]
    indptr, indices, _ = _reference.merge_scaled(4, 5, terms)
    return 4, terms, indptr, indices, _reference.merge_plan(indptr, indices, _patterns(terms))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_error_case_is_valid(kernels, dtype):
    n_rows, terms, indptr, indices, plan = _error_case(dtype)
    np.testing.assert_array_equal(indptr, [0, 2, 3, 5, 7])
    np.testing.assert_array_equal(indices, [0, 2, 1, 0, 3, 3, 4])
    expected = [[0, 2, 4, 10, 12], [3, -1, 6, 13], [5, 7, 8]]
    for codes, e in zip(plan, expected):
        assert codes.dtype == np.int32
        np.testing.assert_array_equal(codes, e)
    for codes, expected in zip(kernels.merge_plan(indptr, indices, _patterns(terms)), plan):
        np.testing.assert_array_equal(codes, expected)
    _assert_same_merge(kernels.fill_scaled(indptr, indices, terms, plan),
                       kernels.merge_scaled(n_rows, 5, terms))


def test_merge_plan_rejects_entries_outside_the_pattern(kernels):
    _, terms, indptr, indices, _ = _error_case(np.float64)
    patterns = _patterns(terms)
    outside = [
        (np.array([0, 2, 3, 3, 5]), np.array([0, 1, 1, 3, 4]), 0),   # row 0, column 1
        (np.array([0, 2, 3, 4, 5]), np.array([0, 2, 1, 1, 4]), 0),   # row 2, column 1
        (None, np.array([3, -1, 0, 4]), 0),                          # row 0, column 3
        (None, np.array([-1, -1, -1, 1]), 0),                        # row 3, column 1
        (np.array([0, 1, 3]), np.array([1, 0, 3]), 2),               # the block a row down
        (np.array([0, 1]), np.array([7]), 3),                        # past the columns
    ]
    for bad in outside:
        for position in (0, 1, 3):
            trial = patterns[:position] + [bad] + patterns[position:]
            with pytest.raises(ValueError):
                kernels.merge_plan(indptr, indices, trial)
    with pytest.raises(ValueError):  # no entries at all in the result
        kernels.merge_plan(np.zeros(5, I64), np.zeros(0, I64), [patterns[0]])
    with pytest.raises(ValueError):  # one column twice in a row
        kernels.merge_plan(indptr, indices, [(np.array([0, 2]), np.array([2, 2]), 0)])
    kernels.merge_plan(indptr, indices, patterns + patterns[::-1])   # (all of these fit)


def test_merge_plan_rejects_terms_that_do_not_fit(kernels):
    _, terms, indptr, indices, _ = _error_case(np.float64)
    patterns = _patterns(terms)
    block_indptr, block_indices = terms[2][:2]
    for first in (-1, 3, 4, 10 ** 12):
        with pytest.raises(ValueError):
            kernels.merge_plan(indptr, indices, patterns + [(block_indptr, block_indices, first)])
    for bad in [(None, np.array([2, -1, 0, 4, 0]), 0),              # five rows of four
                (None, np.array([0, 0]), 3),
                (np.array([0, 2, 3, 3, 5, 5]), np.array([0, 2, 1, 3, 4]), 0),
                (np.array([0, 2, 3, 3, 5]), np.array([0, 2, 1, 3, 4]), 1)]:
        with pytest.raises(ValueError):
            kernels.merge_plan(indptr, indices, [bad])
    with pytest.raises(ValueError):  # a merged indptr that does not end at its entries
        kernels.merge_plan(np.array([0, 2, 4, 6, 7]), indices, patterns)


def _fill_raises(kernels, pattern, terms, plan):
    with pytest.raises(ValueError):
        kernels.fill_scaled(*pattern, terms, plan)


def _with_code(plan, k, at, code, dtype=None):
    plan = [c.copy() for c in plan]
    if dtype is not None:
        plan[k] = plan[k].astype(dtype)
    plan[k][at] = code
    return plan


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fill_rejects_plans_that_do_not_fit(kernels, dtype):
    _, terms, indptr, indices, plan = _error_case(dtype)
    pattern = (indptr, indices)
    _fill_raises(kernels, pattern, terms, plan[:-1])             # a plan of fewer terms
    _fill_raises(kernels, pattern, terms, plan + [plan[0]])      # of more terms
    _fill_raises(kernels, pattern, terms[:-1], plan)
    for k in range(3):                                          # codes of other lengths
        _fill_raises(kernels, pattern, terms, plan[:k] + [plan[k][:-1]] + plan[k + 1:])
        _fill_raises(kernels, pattern, terms,
                     plan[:k] + [np.append(plan[k], plan[k][:1])] + plan[k + 1:])
    block = terms[2]
    for first in (-1, 3, 10 ** 12):                             # a block that does not fit
        _fill_raises(kernels, pattern, terms[:2] + [block[:4] + (first,)], plan)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fill_rejects_codes_outside_the_result(kernels, dtype):
    _, terms, indptr, indices, plan = _error_case(dtype)
    pattern = (indptr, indices)
    nnz = len(indices)
    codes = [2 * nnz, 2 * nnz + 1, 2 * nnz + 40, 2 ** 31 - 1, -2, -3, -(2 ** 31)]
    for k, at in [(0, 0), (0, 4), (1, 0), (1, 3), (2, 2)]:
        for code in codes:
            _fill_raises(kernels, pattern, terms, _with_code(plan, k, at, code))
        for code in (2 ** 40, 2 ** 62, -(2 ** 40), 2 ** 63 - 1, -(2 ** 63)):
            _fill_raises(kernels, pattern, terms, _with_code(plan, k, at, code, np.int64))
    # a pattern of other lengths than the plan's
    _fill_raises(kernels, (indptr[:-1], indices), terms, plan)
    _fill_raises(kernels, (indptr, indices[:-1]), terms, plan)
    _fill_raises(kernels, (indptr, np.append(indices, 4)), terms, plan)
    _fill_raises(kernels, (indptr[:-1], indices[:5]), terms, plan)   # (fewer rows)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fill_rejects_plans_that_leave_a_place_unwritten(kernels, dtype):
    _, terms, indptr, indices, plan = _error_case(dtype)
    pattern = (indptr, indices)
    _fill_raises(kernels, pattern, terms, [c | 1 for c in plan])   # all adds (-1 stays)
    for k in range(3):                                          # one term's stores as adds
        odd = [np.where(c >= 0, c | 1, c) if j == k else c for j, c in enumerate(plan)]
        _fill_raises(kernels, pattern, terms, odd)
    # a term dropped (with its codes): the places only it stored stay unwritten
    _fill_raises(kernels, pattern, terms[1:], plan[1:])
    _fill_raises(kernels, pattern, terms[:1] + terms[2:], plan[:1] + plan[2:])


class _FillOnTheFakeDevice:
    """The device kernels' own ``fill_scaled`` with its arguments on the fake device."""

    @staticmethod
    def fill_scaled(indptr, indices, terms, plan):
        from sparsegrad.gpu import _kernels as gpu_kernels
        from sparsegrad.gpu._device import fake
        from test_gpu_kernels import on
        return gpu_kernels.fill_scaled(*on(fake, (indptr, indices, terms, plan)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_device_fill_rejects_what_the_others_reject(dtype):
    for check in (test_fill_rejects_plans_that_do_not_fit,
                  test_fill_rejects_codes_outside_the_result,
                  test_fill_rejects_plans_that_leave_a_place_unwritten):
        check(_FillOnTheFakeDevice, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_device_fill_by_levels_equals_the_fill_by_terms(rng, dtype):
    # the device's plan writes each level of places in one gather and one
    # scatter for all terms: the numbers of its fill term by term bit for bit,
    # and for float64 terms (the only ones merges fill by plans) the merge's
    from sparsegrad.gpu import _kernels as gpu_kernels
    from sparsegrad.gpu._device import fake
    from test_gpu_kernels import on
    for _ in range(30):
        n_rows, n_cols = (int(x) for x in rng.integers(0, 13, 2))
        skeletons = _skeletons(rng, n_rows, n_cols)
        terms = [_term(rng, s, dtype) for s in skeletons]
        indptr, indices = (fake.asarray(a) for a in
                           call(_reference.merge_scaled, n_rows, n_cols, terms)[:2])
        plan = gpu_kernels.merge_plan(indptr, indices, on(fake, _patterns(terms)))
        assert plan.levels is not None
        for _ in range(3):
            terms = [_term(rng, s, dtype) for s in skeletons]
            got = gpu_kernels.fill_scaled(indptr, indices, on(fake, terms), plan)
            by_terms = gpu_kernels.fill_scaled(indptr, indices, on(fake, terms), list(plan))
            _assert_same_merge(tuple(fake.asnumpy(a) for a in got),
                               tuple(fake.asnumpy(a) for a in by_terms))
            if dtype == "float64":
                expected = call(_reference.merge_scaled, n_rows, n_cols, terms)
                _assert_same_merge(tuple(fake.asnumpy(a) for a in got), expected)


def test_merge_plan_stores_every_place_once(kernels, rng):
    # what fill_scaled trusts a plan with (it counts the stores, but does not
    # look for a place stored twice): merge_plan's codes store each place of
    # the result exactly once, whatever the overlaps of the terms
    for _ in range(40):
        n_rows, n_cols = (int(x) for x in rng.integers(0, 13, 2))
        terms = [_term(rng, s, "float64") for s in _skeletons(rng, n_rows, n_cols)]
        indptr, indices = call(kernels.merge_scaled, n_rows, n_cols, terms)[:2]
        plan = call(kernels.merge_plan, indptr, indices, _patterns(terms))
        codes = np.concatenate([c.astype(np.int64) for c in plan] + [np.zeros(0, np.int64)])
        codes = codes[codes >= 0]
        stored = np.bincount(codes[codes % 2 == 0] >> 1, minlength=len(indices))
        np.testing.assert_array_equal(stored, np.ones(len(indices), np.int64))
        assert np.all(np.isin(codes[codes % 2 == 1] >> 1, codes[codes % 2 == 0] >> 1))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fill_takes_a_selections_entries_from_its_codes(kernels, dtype):
    # the selection [2, -1, 0, 4]: which rows hold an entry is read from the
    # codes (-1: none), not from the columns (the documented trust in
    # merge_plan's codes); both modules agree on such a plan, and one that
    # stores more values than there are places raises
    _, terms, indptr, indices, plan = _error_case(dtype)
    pattern = (indptr, indices)
    np.testing.assert_array_equal(plan[1], [3, -1, 6, 13])
    at_hole = _with_code(plan, 1, 1, 5)   # (row 1 adds its scale, 2.0, at place 2)
    expected = call(kernels.fill_scaled, *pattern, terms, plan)[2].copy()
    expected[2] += dtype(2.0)
    _assert_identical(call(kernels.fill_scaled, *pattern, terms, at_hole)[2], expected)
    assert call(_reference.fill_scaled, *pattern, terms, at_hole)[2][2] == expected[2]
    _fill_raises(kernels, pattern, terms, _with_code(plan, 1, 1, 8))   # (one store too many)


# ---------------------------------------------------------------------------
# 5. end to end: a repeated evaluation filled by a kept plan
# ---------------------------------------------------------------------------

N = 30
EAST = np.roll(np.arange(N), -1)
WEST = np.roll(np.arange(N), 1)


def _residual(x):
    return x[EAST] * x - np.exp(x[WEST]) + np.concatenate([x[:1], x[1:] ** 2])


def _jacobian(x):
    return _residual(forward.seed(x)).dvalue.tocsr()


def _uncached_jacobian(x):
    limit = sparsegrad.structure_cache_limit()
    try:
        sparsegrad.structure_cache_limit(0)
        return _jacobian(x)
    finally:
        sparsegrad.structure_cache_limit(limit)


@pytest.fixture
def fills(monkeypatch):
    """A list that grows by one at every call of the kernels' ``fill_scaled``."""
    from sparsegrad import _fast
    calls = []
    original = _fast.kernels.fill_scaled
    monkeypatch.setattr(_fast.kernels, "fill_scaled",
                        lambda *args: calls.append(1) or original(*args))
    return calls


def test_repeated_evaluation_filled_by_a_plan(fresh_structure_cache, fills):
    rng = np.random.default_rng(7)
    points = [rng.uniform(-1, 1, N) for _ in range(4)]
    jacobians, held, filled = [], [], []
    for x in points:
        jacobians.append(_jacobian(x))
        held.append(sparsegrad.structure_cache_info().held_bytes)
        filled.append(len(fills))
    # two merges: the stacked concatenation's, needed by the sum, planned at
    # the second evaluation, and the final one, whose key holds the first's
    # kept pattern from then on: planned at the third, both filled at the fourth
    assert filled == [0, 0, 1, 3]
    assert held[2] > held[1] > held[0]  # (the plans: patterns and codes)
    for J1, J2 in zip(jacobians, jacobians[1:]):
        for name in ("indptr", "indices", "data"):
            a, b = getattr(J1, name), getattr(J2, name)
            assert a is not b and not np.shares_memory(a, b)
    # the caller's arrays are the caller's: writing them changes no later result
    J2 = jacobians[1]
    J2.indptr[1:] = 0
    J2.indices[:] = N - 1
    J2.data[:] = np.nan
    again = [_jacobian(x) for x in points[1:3]]
    assert len(fills) == 7
    # (a zero limit empties the cache: the uncached evaluations come last)
    for x, J in zip(points + points[1:3], jacobians + again):
        expected = _uncached_jacobian(x)
        if J is not J2:
            for name in ("indptr", "indices", "data"):
                _assert_identical(getattr(J, name), getattr(expected, name))
        numerical = numerical_jacobian(_residual, x, method="central")
        np.testing.assert_allclose(expected.toarray(), numerical, rtol=1e-6, atol=1e-8)
    assert len(fills) == 7             # (no plan with the cache off)


def test_no_plan_that_would_pass_the_cache_limit(fresh_structure_cache, fills):
    # a limit that holds the structure of the evaluation but not its plan: the
    # merges go on merging, and the structure is not forgotten (a plan kept
    # past the limit would empty the cache at every other evaluation)
    x0 = np.linspace(-1, 1, N)
    _jacobian(x0)                      # (its merge only noted)
    plain = sparsegrad.structure_cache_info().held_bytes
    _jacobian(x0)                      # (its merge planned)
    assert sparsegrad.structure_cache_info().held_bytes > plain + 16
    limit = sparsegrad.structure_cache_limit()
    try:
        sparsegrad.clear_structure_cache()
        sparsegrad.structure_cache_limit(plain + 16)
        fills.clear()
        for k in range(5):
            before = sparsegrad.structure_cache_info()
            J = _jacobian(x0 + 0.1 * k)
            after = sparsegrad.structure_cache_info()
            # (nothing forgotten: the slices and index arrays found every time)
            assert after.held_bytes <= plain + 16
            assert k == 0 or after.hits - before.hits >= 7
            np.testing.assert_allclose(J.toarray(), _jacobian_by_differences(x0 + 0.1 * k),
                                       rtol=1e-6, atol=1e-8)
        assert fills == [] and after.held_bytes <= plain + 16
    finally:
        sparsegrad.structure_cache_limit(limit)


def _jacobian_by_differences(x):
    return numerical_jacobian(_residual, x)


def test_a_changed_branch_or_index_array_never_meets_a_stale_plan(fresh_structure_cache):
    # plans in use (four evaluations), then the program takes the other branch,
    # then an index array is written in place: each Jacobian equals the one
    # computed with the cache off, and the first path's plan still serves it
    east = np.roll(np.arange(N), -1)

    def residual(x):
        if np.real(forward.nvalue(x)[0]) > 0:
            return x[east] * x - np.exp(x)
        return x[east] ** 2 + np.concatenate([x[1:], x[:1]]) * x

    up, down = np.linspace(0.5, 1.5, N), np.linspace(-1.5, -0.5, N)
    for x in [up] * 4 + [down, up, down]:
        _assert_same_merge_as_uncached(residual, x)
    east[:] = np.roll(np.arange(N), 2)
    for x in [up, down, up, up]:
        _assert_same_merge_as_uncached(residual, x)


def _assert_same_as_uncached(residual, x):
    """The Jacobian of ``residual`` at ``x`` equals, array for array and bit for
    bit, the one made with merge plans off; returned."""
    got = residual(forward.seed(x)).dvalue
    jacobian_rules.MERGE_PLANS = False
    try:
        expected = residual(forward.seed(x)).dvalue
    finally:
        jacobian_rules.MERGE_PLANS = True
    for name in ("indptr", "indices", "data"):
        _assert_identical(getattr(got, name), getattr(expected, name))
    return got


def _assert_same_merge_as_uncached(residual, x):
    got = _assert_same_as_uncached(residual, x)
    np.testing.assert_allclose(got.toarray(), numerical_jacobian(residual, x), rtol=1e-6,
                               atol=1e-8)


# ---------------------------------------------------------------------------
# products with constant scipy matrices: kept matrices and product patterns
# ---------------------------------------------------------------------------

def _laplacian(n, fmt="csr"):
    import scipy.sparse
    return scipy.sparse.diags([np.ones(n - 1), -2.0 * np.ones(n), np.ones(n - 1)],
                              [-1, 0, 1], format=fmt)


def _operator_residual(L):
    east = np.roll(np.arange(N), -1)
    return lambda u: L @ (u ** 2) + L @ u[east] + u * u[east] + np.exp(u) @ L


def test_products_with_a_kept_matrix_go_by_plans(fresh_structure_cache, fills):
    # the constant matrix and the product patterns are kept, so the final merge
    # is named alike at every evaluation and goes by a plan from the fourth on
    residual = _operator_residual(_laplacian(N))
    counts = []
    for k in range(5):
        x = np.linspace(0.0, 1.0, N) + k
        _assert_same_merge_as_uncached(residual, x)
        counts.append(len(fills))
    assert counts[2] == 0 and counts[-1] > counts[-2] > counts[2]


def _unsorted_csr(n):
    """A Laplacian in CSR with each row's columns in reverse order (not canonical)."""
    import scipy.sparse
    L = _laplacian(n, "csr")
    order = np.concatenate([np.arange(a, b)[::-1] for a, b in zip(L.indptr[:-1], L.indptr[1:])])
    return scipy.sparse.csr_matrix((L.data[order], L.indices[order], L.indptr), shape=L.shape)


def _write_into(L):
    """Change ``L`` in place through the arrays that define its format: values,
    and where the format allows it, the pattern."""
    L.data *= 3.0
    if L.format == "dia":
        L.offsets[L.offsets == 1] = 2           # (the upper diagonal moves out by one)
    elif L.format == "coo":
        L.col[np.flatnonzero(L.row == 0)[-1]] = 5
    elif L.format in ("csc", "csr"):
        L.indices[L.indptr[1] - 1] = 5          # (the first column's or row's last entry)


@pytest.mark.parametrize("fmt", ["dia", "csc", "coo", "bsr", "unsorted csr"])
def test_a_constant_matrix_of_any_format_is_kept_and_compared(fresh_structure_cache, fmt):
    # DIA (what scipy.sparse.diags makes), CSC, COO, BSR and non-canonical CSR
    # matrices: their conversion is kept between evaluations beside copies of
    # their arrays, found again while the matrix holds the same numbers, and
    # made again once it is written in place
    from sparsegrad import _functions
    L = _unsorted_csr(N) if fmt == "unsorted csr" else _laplacian(N, fmt)
    assert L.format == fmt.split()[-1]
    residual = _operator_residual(L)
    x = np.linspace(0.0, 1.0, N)
    kept = []
    for _ in range(4):
        _assert_same_merge_as_uncached(residual, x)
        seed = forward.seed(x)
        kept.append(_functions._constant_matrix(seed._jacobian.seed, L))
    assert all(K is kept[0] for K in kept)
    np.testing.assert_array_equal(kept[0].to_scipy(np.float64).toarray(), L.toarray())
    _write_into(L)
    for _ in range(4):
        _assert_same_merge_as_uncached(residual, x)
    seed = forward.seed(x)
    again = _functions._constant_matrix(seed._jacobian.seed, L)
    assert again is not kept[0]
    np.testing.assert_array_equal(again.to_scipy(np.float64).toarray(), L.toarray())


def test_products_with_2d_values_and_transposes_keep_their_forms(fresh_structure_cache):
    # D @ U and U @ D.T of a 2-d value (Kronecker products with an identity),
    # and u @ A.T, a new CSC matrix on A's arrays at every call: found again
    # by the arrays, as the same kept matrices, until A is written in place
    from sparsegrad import _functions
    m = 6
    D = _laplacian(m)
    A = _laplacian(m * m)

    def residual(u):
        U = u.reshape(m, m)
        return (D @ U + U @ D.T).ravel() * u + u @ A.T + np.exp(u)

    x = np.linspace(0.0, 1.0, m * m)
    forms = []
    for _ in range(4):
        _assert_same_merge_as_uncached(residual, x)
        seed = forward.seed(x)._jacobian.seed
        forms.append([_functions._constant_matrix(seed, D, ("kron", m)),
                      _functions._constant_matrix(seed, D.T, ("kron transposed", m)),
                      _functions._constant_matrix(seed, A.T, "transposed")])
    assert all(a is b for later in forms[1:] for a, b in zip(later, forms[0]))
    D.data[0] = 5.0
    A.data[-1] = 7.0
    for _ in range(3):
        _assert_same_merge_as_uncached(residual, x)
    seed = forward.seed(x)._jacobian.seed
    again = [_functions._constant_matrix(seed, D, ("kron", m)),
             _functions._constant_matrix(seed, A.T, "transposed")]
    assert again[0] is not forms[0][0] and again[1] is not forms[0][2]
    np.testing.assert_array_equal(again[1].to_scipy(np.float64).toarray(), A.toarray())


@pytest.mark.parametrize("changing", [False, True])
def test_a_new_matrix_at_every_call_is_read_as_it_is(fresh_structure_cache, changing):
    # built inside the function, where the allocator may put it at the
    # addresses of the last call's: found again only with equal contents
    # (``changing``: other values at every call), and the cache stays bounded
    import scipy.sparse
    from sparsegrad import _functions
    calls = [0]

    def residual(u):
        calls[0] += 1
        diagonal = -2.0 - (calls[0] if changing else 0)
        L = scipy.sparse.diags([np.ones(N - 1), np.full(N, diagonal), np.ones(N - 1)],
                               [-1, 0, 1])
        return L @ u + np.exp(u)

    x = np.linspace(0.0, 1.0, N)
    for _ in range(6):
        got = residual(forward.seed(x)).dvalue
        expected = np.diag(np.full(N, -2.0 - (calls[0] if changing else 0)) + np.exp(x)) \
            + np.eye(N, k=1) + np.eye(N, k=-1)
        np.testing.assert_array_equal(got.toarray(), expected)
    structure = forward.seed(x)._jacobian.seed.structure
    assert len(structure.matrices) <= _functions._MAX_MATRICES


def test_a_constant_matrix_with_nan_values_is_found_again(fresh_structure_cache):
    # (NaN equals NaN for the kept copy: the conversion is not made at every call)
    from sparsegrad import _functions
    L = _laplacian(N, "dia")
    L.data[1, 3] = np.nan
    seed = forward.seed(np.zeros(N))._jacobian.seed
    _functions._constant_matrix(seed, L)                    # (noted: not CSR)
    first = _functions._constant_matrix(seed, L)
    assert _functions._constant_matrix(seed, L) is first
    L.data[1, 3] = 0.0
    assert _functions._constant_matrix(seed, L) is not first


@pytest.mark.parametrize("change", ["data", "pattern", "new matrix", "duplicates", "csc"])
def test_a_constant_matrix_written_or_replaced_is_read_again(fresh_structure_cache, change):
    # written in place (values or pattern), replaced by another matrix (which
    # may reuse the id), not canonical or not CSR: each Jacobian is the one of
    # the matrix as it is at the call
    import scipy.sparse
    L = _laplacian(N)
    residual = _operator_residual(L)
    x = np.linspace(0.0, 1.0, N)
    for _ in range(4):
        _assert_same_merge_as_uncached(residual, x)
    if change == "data":
        L.data *= 3.0
    elif change == "pattern":
        L.indices[1] = 2                                           # (row 0: columns 0, 2)
    elif change == "new matrix":
        del L, residual
        L = scipy.sparse.csr_matrix(_laplacian(N) * 2.0 + scipy.sparse.eye(N, k=3))
        residual = _operator_residual(L)
    elif change == "duplicates":
        rows = np.r_[np.arange(N), 0]
        L = scipy.sparse.csr_matrix((np.ones(N + 1), (rows, np.r_[np.arange(N), 0])),
                                    shape=(N, N))
        residual = _operator_residual(L)
    else:
        residual = _operator_residual(_laplacian(N, "csc"))
    for _ in range(4):
        _assert_same_merge_as_uncached(residual, x)


def _dense_residual(D, B):
    """Products with dense constants: ``D @ u``, ``u @ D``, an einsum with two
    constants, and ``B @ u[east]`` (a product with a gathered value)."""
    east = np.roll(np.arange(N), -1)
    return lambda u: (D @ u + u @ D * u + np.einsum("ij,j,j->i", D, u, B[0])
                      + B @ u[east] @ B.T + np.exp(u))


def _dense_constants(rng):
    D = rng.standard_normal((N, N))
    D[rng.random((N, N)) < 0.5] = 0.0                  # (zeros are dropped from patterns)
    return D, rng.standard_normal((N, N))


def _kept_coefficients(residual, x):
    """The coefficient matrices of ``residual``'s products with constants, in order."""
    from sparsegrad import _functions
    made = []
    original = _functions._constant_coefficients

    def spy(*args):
        made.append(original(*args))
        return made[-1]

    _functions._constant_coefficients = spy
    try:
        residual(forward.seed(x)).dvalue
    finally:
        _functions._constant_coefficients = original
    return made


def test_products_with_dense_constants_keep_their_coefficients(fresh_structure_cache, fills):
    # D @ u with a dense constant D: its coefficient matrix is kept from the
    # second product on, the same at every later evaluation, so the final
    # merge goes by a plan; every Jacobian equal to the uncached one
    D, B = _dense_constants(np.random.default_rng(3))
    residual = _dense_residual(D, B)
    x = np.linspace(0.0, 1.0, N)
    kept = []
    for k in range(5):
        _assert_same_merge_as_uncached(residual, x + k)
        kept.append(_kept_coefficients(residual, x + k))
    assert len(kept[0]) == 5
    assert all(a is b for later in kept[2:] for a, b in zip(later, kept[1]))
    assert len(fills) > 0


@pytest.mark.parametrize("change", ["in place", "zero made", "nan", "new array"])
def test_a_dense_constant_written_or_replaced_is_read_again(fresh_structure_cache, change):
    # written in place (a value, a zero that leaves the pattern), NaN (found
    # again, equal to itself), or another array at the call (which may reuse
    # the address): each Jacobian is the one of the constants as they are
    D, B = _dense_constants(np.random.default_rng(4))
    constants = {"D": D}
    residual = _dense_residual(D, B)

    def current(u):
        return _dense_residual(constants["D"], B)(u)

    x = np.linspace(0.0, 1.0, N)
    for _ in range(3):
        _assert_same_merge_as_uncached(residual, x)
    before = _kept_coefficients(current, x)
    if change == "in place":
        D[2, 3] += 1.0
    elif change == "zero made":
        D[np.flatnonzero(D[:, 0])[0], 0] = 0.0
    elif change == "nan":
        D[1, 1] = np.nan
    else:
        constants["D"] = D * 2.0
    for _ in range(3):
        _assert_same_as_uncached(current, x)
    after = _kept_coefficients(current, x)
    assert after[0] is not before[0]
    if change == "nan":
        assert _kept_coefficients(current, x)[0] is after[0]   # (NaN equals its copy)
    else:
        np.testing.assert_allclose(current(forward.seed(x)).dvalue.toarray(),
                                   numerical_jacobian(current, x), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------
# residuals assembled by index writes: the pieces' row numbers kept
# ---------------------------------------------------------------------------

def _assembled_residual(branch):
    """``F[1:-1] = stencil; F[0], F[-1] = boundary``, or (branch[0] true) pieces
    of the same sizes written elsewhere (the same keys, other row numbers)."""
    def residual(u):
        F = np.zeros(N, dtype=u.dtype, like=u)  # (complex for the complex-step reference)
        if branch[0]:
            F[2:] = u[2:] * u[:-2]
            F[0] = np.exp(u[0])
            F[1] = u[1] - u[0]
        else:
            F[1:-1] = u[2:] - 2.0 * u[1:-1] + u[:-2] + u[1:-1] ** 3
            F[0] = u[0] - 1.0
            F[-1] = u[-1] * u[-2]
        return F
    return residual


def test_an_assembled_residual_goes_by_plans_and_sees_a_new_layout(fresh_structure_cache,
                                                                   fills):
    # the same writes at every evaluation: the gathers into place are cached and
    # the final merge is filled by a plan; writes laid out otherwise (a branch)
    # are assembled afresh, never from the kept row numbers
    branch = [False]
    residual = _assembled_residual(branch)
    counts = []
    for k in range(5):
        _assert_same_merge_as_uncached(residual, np.linspace(0.5, 1.5, N) + 0.1 * k)
        counts.append(len(fills))
    assert counts[1] == 0 and counts[-1] > counts[-2] > 0
    for flip in [True, True, False, True, False]:
        branch[0] = flip
        _assert_same_merge_as_uncached(residual, np.linspace(0.5, 1.5, N))


def _fields_by_writes(u, n, overlap=False):
    """Three fields' residuals written into one array, slice by slice (9 pieces),
    ``overlap``: the boundary rows written twice (a later write wins)."""
    F = np.zeros(3 * n, dtype=u.dtype, like=u)
    for k in range(3):
        f, o = u[k * n:(k + 1) * n], k * n
        F[o + 1:o + n - 1] = f[2:] - 2.0 * f[1:-1] + f[:-2] + f[1:-1] ** 2
        if overlap:
            F[o:o + 3] = f[:3] * 2.0
        F[o] = f[0] - 1.0
        F[o + n - 1] = f[-1] * f[-2]
    return F


def _fields_by_concatenate(u, n):
    parts = []
    for k in range(3):
        f = u[k * n:(k + 1) * n]
        parts += [f[:1] - 1.0, f[2:] - 2.0 * f[1:-1] + f[:-2] + f[1:-1] ** 2, f[-1:] * f[-2:-1]]
    return np.concatenate(parts)


@pytest.mark.parametrize("overlap", [False, True])
def test_slice_writes_are_stacked_like_a_concatenation(fresh_structure_cache, overlap,
                                                       fills):
    # an assembly of runs of consecutive rows (slice writes) is stacked from
    # its pieces' rows and merged once, by a plan from the third evaluation:
    # the Jacobian of the same residual written with np.concatenate, bit for bit
    n = 12
    by_writes = lambda u: _fields_by_writes(u, n, overlap)              # noqa: E731
    for k in range(4):
        x = np.linspace(0.5, 1.5, 3 * n) + 0.1 * k
        _assert_same_merge_as_uncached(by_writes, x)
        if not overlap:
            got, expected = (f(forward.seed(x)).dvalue for f in
                             (by_writes, lambda u: _fields_by_concatenate(u, n)))
            for name in ("indptr", "indices", "data"):
                np.testing.assert_array_equal(getattr(got, name), getattr(expected, name))
    assert fills


def test_scattered_writes_are_assembled_by_pieces(fresh_structure_cache):
    # more runs than _MAX_RUNS (every other row from another piece): the
    # gathers of the pieces into place, as before
    from sparsegrad import _indexing
    n = 2 * _indexing._MAX_RUNS + 8

    def residual(u):
        F = np.zeros(n, dtype=u.dtype, like=u)
        F[::2] = u[::2] ** 2
        F[1::2] = np.exp(u[1::2]) * u[::2]
        return F

    for k in range(3):
        _assert_same_merge_as_uncached(residual, np.linspace(0.5, 1.5, n) + 0.1 * k)


@pytest.mark.parametrize("program", ["broadcast", "nine-point"])
def test_broadcasts_and_wide_stencils_keep_their_gathers(fresh_structure_cache, program,
                                                         fills):
    # u - u[0] (a 0-d value broadcast: keyed by the two shapes) and a 9-point
    # stencil on an intermediate value (nine gathers from each of its matrices):
    # the same matrices at every evaluation, so the final merge finds its plan
    n = 40
    weights = [1 / 280, -4 / 105, 1 / 5, -4 / 5, 0.0, 4 / 5, -1 / 5, 4 / 105, -1 / 280]

    def residual(u):
        if program == "broadcast":
            return (u - u[0]) * u + u[-1]
        f = u[1:-1] * u[1:-1]  # (its matrix a selection of u's, gathered from nine times)
        return sum(w * f[k:n - 10 + k] for k, w in enumerate(weights)) + np.exp(u[5:-5])

    counts = []
    for k in range(5):
        _assert_same_merge_as_uncached(residual, np.linspace(0.5, 1.5, n) + 0.1 * k)
        counts.append(len(fills))
    assert counts[-1] > counts[-2] > 0


def test_dense_constants_without_room_are_noted_only(fresh_structure_cache):
    # a structure limit too small for the coefficients: every product builds
    # them as it is, nothing is kept (no copies of the constants either)
    import sparsegrad
    D, B = _dense_constants(np.random.default_rng(5))
    residual = _dense_residual(D, B)
    x = np.linspace(0.0, 1.0, N)
    sparsegrad.structure_cache_limit(2048)
    for _ in range(3):
        _assert_same_merge_as_uncached(residual, x)
    structure = forward.seed(x)._jacobian.seed.structure
    assert all(entry == (None, None) for key, entry in structure.matrices.items()
               if key[0] == "einsum")
