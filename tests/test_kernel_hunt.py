"""Regression tests from a bug hunt of the compiled kernels against their
reference twins (each failed before its fix).

Every test runs on the reference kernels and, when built, on the compiled
kernels (merge_scaled also with its rows split over three threads).
"""
import importlib

import numpy as np
import pytest

from sparsegrad._fast import _reference

I64 = np.int64


def _compiled():
    try:
        return importlib.import_module("sparsegrad._fast._kernels")
    except ImportError as exc:  # pragma: no cover - the extension is not built
        pytest.skip("compiled kernels not built: %s" % exc)


@pytest.fixture(params=["reference", "compiled", "compiled, 3 threads"])
def kernels(request):
    """The kernel module under test (compiled: also with every merge split
    into three parts run by worker threads)."""
    if request.param == "reference":
        yield _reference
        return
    module = _compiled()
    threads = module.get_threads()
    split = "threads" in request.param
    module.set_threads(3 if split else 1)
    module._set_parallel_entries(1 if split else None)
    yield module
    module.set_threads(threads)
    module._set_parallel_entries(None)


# ---------------------------------------------------------------------------
# merge_scaled: a column out of range in a short row (keys path)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("index_dtype", [None, np.int32])
@pytest.mark.parametrize("n", [2, 100, 250])
def test_merge_refuses_out_of_range_columns_before_writing_them(kernels, index_dtype, n):
    # two terms with one row of n distinct columns, all but one past n_cols=1:
    # the compiled keys path wrote the whole row (n entries into an output
    # of room min(2 n, 1 * 1) = 1) before checking its largest column, and
    # crashed the interpreter (heap overflow)
    indices = np.concatenate([[0], np.arange(5, 4 + n)]).astype(I64)
    indptr = np.array([0, n], dtype=I64)
    term = (indptr, indices, None, None)
    with pytest.raises(ValueError):
        kernels.merge_scaled(1, 1, [term, term], index_dtype=index_dtype)


_OVERFLOW_SCRIPT = """
import numpy as np
from sparsegrad._fast import _kernels
for n in (20, 60, 100, 200, 250):
    indices = np.concatenate([[0], np.arange(5, 4 + n)]).astype(np.int64)
    term = (np.array([0, n]), indices, None, None)
    for _ in range(200):
        try:
            _kernels.merge_scaled(1, 1, [term, term])
        except ValueError:
            pass
        else:
            raise SystemExit("accepted")
kept = [np.ones(1000) for _ in range(100)]
print("survived")
"""


def test_compiled_merge_of_out_of_range_columns_leaves_the_heap_intact():
    # the heap overflow above, repeated in a child process: before the fix it
    # died of a segmentation fault or a glibc abort (at the latest on exit)
    import os
    import subprocess
    import sys
    _compiled()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", _OVERFLOW_SCRIPT], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "survived"


@pytest.mark.parametrize("column", [2 ** 31, 2 ** 32, 2 ** 32 + 1, 2 ** 40, 2 ** 54])
def test_merge_int32_output_refuses_columns_that_int32_truncates(kernels, column):
    # the compiled kernel checked the largest column after writing it to the
    # int32 output, where 2**40 had become 0: the result was accepted
    indptr = np.array([0, 3, 6, 9], dtype=I64)
    indices = np.array([column, 1, 2, 0, 1, 2, 0, 1, 2], dtype=I64)
    for terms in ([(indptr, indices, None, None)],
                  [(indptr, indices, np.arange(9.0), None, 0)],
                  [(indptr, indices, None, None), (indptr, indices, None, None)]):
        with pytest.raises(ValueError):
            kernels.merge_scaled(3, 3, terms, index_dtype=np.int32)


def test_merge_refuses_random_out_of_range_columns(kernels):
    # one bad column somewhere in stencil-like terms, on every merge path
    rng = np.random.default_rng(7)
    for _ in range(60):
        n_rows = int(rng.integers(1, 120))
        n_cols = int(rng.choice([1, 5, 64, 300]))
        terms = []
        for _ in range(int(rng.choice([1, 2, 3, 9, 20]))):
            width = int(rng.integers(0, 4))
            cols = [np.arange(i - width, i + width + 1) for i in range(n_rows)]
            cols = [c[(c >= 0) & (c < n_cols)] for c in cols]
            indptr = np.zeros(n_rows + 1, dtype=I64)
            np.cumsum([len(c) for c in cols], out=indptr[1:])
            terms.append([indptr, np.concatenate(cols).astype(I64), None, None])
        filled = [t for t in terms if len(t[1])]
        if not filled:
            continue
        bad = filled[rng.integers(len(filled))]
        bad[1][rng.integers(len(bad[1]))] = rng.choice(
            [n_cols, n_cols + 7, 2 ** 32, 2 ** 40, -2])
        for index_dtype in (None, np.int32):
            with pytest.raises(ValueError):
                kernels.merge_scaled(n_rows, n_cols, [tuple(t) for t in terms],
                                     index_dtype=index_dtype)


@pytest.mark.parametrize("term", [(), (None,)])
def test_merge_refuses_a_tuple_too_short_to_be_a_term(kernels, term):
    # the compiled kernel raised IndexError (tuple index out of range)
    with pytest.raises(ValueError, match="indptr, indices, data, row_scale"):
        kernels.merge_scaled(2, 2, [term])


# ---------------------------------------------------------------------------
# gather_rows and matmul: the same error for the same bad index
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float16, None])
def test_gather_rows_past_the_end_raises_row_index_error(kernels, dtype):
    # the reference raised IndexError, the compiled kernel ValueError
    indptr, indices = np.array([0, 1, 2], dtype=I64), np.array([0, 1], dtype=I64)
    data = None if dtype is None else np.ones(2, dtype=dtype)
    with pytest.raises(_reference.RowIndexError, match="row 2 is out of range"):
        kernels.gather_rows(indptr, indices, data, np.array([0, 2, 1]))
    assert issubclass(_reference.RowIndexError, IndexError)
    assert issubclass(_reference.RowIndexError, ValueError)
    with pytest.raises(ValueError, match=">= -1"):
        kernels.gather_rows(indptr, indices, data, np.array([0, -2]))


def test_matmul_refuses_column_indices_out_of_range(kernels):
    b = (np.array([0, 1, 2], dtype=I64), np.array([0, 0], dtype=I64), None)
    # a column of A past B's rows: IndexError (reference) against ValueError
    with pytest.raises(ValueError):
        kernels.matmul(np.array([0, 1]), np.array([2]), None, *b, 1)
    # a column of B past n_cols in a row that A does not select: accepted by
    # the reference, refused by the compiled kernel
    with pytest.raises(ValueError):
        kernels.matmul(np.array([0, 1]), np.array([0]), None, np.array([0, 1, 2]),
                       np.array([0, 5]), None, 1)


def test_matmul_and_scale_rows_of_byte_swapped_data_give_native_float64(kernels):
    # arrays above numpy's temporary-elision threshold (256 KiB): ``x * temp``
    # reused the byte-swapped temporary in place, and the reference returned
    # '>f8' where the compiled kernel returns float64
    n = 60000
    rows = np.arange(n + 1, dtype=I64)
    cols = np.arange(n, dtype=I64)
    swapped = np.linspace(1.0, 2.0, n).astype(">f8")
    result = kernels.matmul(rows, cols, swapped, rows, cols, None, n)
    assert result[2].dtype == np.dtype(np.float64)
    np.testing.assert_array_equal(result[2], swapped)
    scaled = kernels.scale_rows(rows, np.ones(n), swapped)
    assert scaled.dtype == np.dtype(np.float64)
    np.testing.assert_array_equal(scaled, swapped)


# ---------------------------------------------------------------------------
# inputs the compiled kernels refuse and the reference accepted
# ---------------------------------------------------------------------------

def test_merge_refuses_a_short_indptr_and_data_of_another_length(kernels):
    indptr, indices = np.array([0, 1], dtype=I64), np.array([0], dtype=I64)
    # a 4-tuple is n_rows x n_cols: the reference left the missing rows empty
    with pytest.raises(ValueError, match="indptr"):
        kernels.merge_scaled(3, 2, [(indptr, indices, None, None)])
    # data of length 1 for 2 entries: the reference broadcast it
    full = (np.array([0, 1, 2], dtype=I64), np.array([0, 1], dtype=I64))
    with pytest.raises(ValueError, match="data"):
        kernels.merge_scaled(2, 2, [(*full, np.ones(1), None)])
    # (pattern_only ignores the values altogether)
    result = kernels.merge_scaled(2, 2, [(*full, np.ones(1), None)], pattern_only=True)
    np.testing.assert_array_equal(result[1], [0, 1])


def test_scale_rows_refuses_a_scale_of_another_length(kernels):
    # one row, two scales: np.repeat broadcast the counts
    with pytest.raises(ValueError, match="scale"):
        kernels.scale_rows(np.array([0, 2], dtype=I64), None, np.array([1.0, 2.0]))


@pytest.mark.parametrize("dtype", [np.float64, np.uint64, np.bool_])
def test_index_arrays_of_other_kinds_are_refused(kernels, dtype):
    # the reference truncated floats (and wrapped uint64) without a word
    bad = np.array([0, 1], dtype=dtype)
    indptr = np.array([0, 1, 2], dtype=I64)
    with pytest.raises(TypeError):
        kernels.merge_scaled(2, 2, [(indptr, bad, None, None)])
    with pytest.raises(TypeError):
        kernels.coo_to_csr(2, 2, bad, np.array([0, 1]), None)
    with pytest.raises(TypeError):
        kernels.gather_rows(indptr, np.array([0, 1]), None, bad)
    with pytest.raises(TypeError):
        kernels.selection_csr(bad)


def test_gather_rows_returns_int64_indices_for_other_index_dtypes(kernels):
    # the reference returned the input's index dtype (int32 here)
    result = kernels.gather_rows(np.array([0, 1, 2], dtype=np.int32),
                                 np.array([1, 0], dtype=np.int32), None,
                                 np.array([1, 0], dtype=np.int32))
    assert result[0].dtype == I64 and result[1].dtype == I64
    np.testing.assert_array_equal(result[1], [0, 1])


def test_waiting_for_merge_threads_outlasts_keyboard_interrupt():
    # a worker writes into memory the merge frees when it returns: an interrupt
    # while waiting must wait for every worker first, then propagate
    compiled = _compiled()
    import concurrent.futures
    import threading
    release = threading.Event()
    done = []

    def work():
        release.wait(5)
        done.append(True)

    class Interrupting:
        """A future whose first result() raises KeyboardInterrupt."""
        def __init__(self, future):
            self.future, self.calls = future, 0

        def result(self):
            self.calls += 1
            if self.calls == 1:
                release.set()
                raise KeyboardInterrupt
            return self.future.result()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = Interrupting(pool.submit(work))
        with pytest.raises(KeyboardInterrupt):
            compiled._wait_all([future])
    assert done == [True] and future.calls == 2
