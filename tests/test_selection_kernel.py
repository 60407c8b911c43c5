"""The selection_csr kernel on both implementations, against a dense reference."""
import numpy as np
import pytest
from numpy.testing import assert_array_equal

from sparsegrad._fast import _reference
from test_kernels import _compiled_module


@pytest.fixture(params=["reference", "compiled"])
def kernels(request):
    return _reference if request.param == "reference" else _compiled_module()


@pytest.mark.parametrize("n,empty_fraction", [(0, 0.0), (1, 0.0), (1, 1.0), (7, 0.3),
                                              (1000, 0.0), (1000, 0.5), (1000, 1.0)])
def test_selection_csr_matches_dense(kernels, n, empty_fraction):
    rng = np.random.default_rng(n)
    n_cols = 13
    columns = rng.integers(0, n_cols, n)
    columns[rng.random(n) < empty_fraction] = -1
    indptr, indices = kernels.selection_csr(columns)
    assert indptr.dtype == np.int64 and indices.dtype == np.int64
    dense = np.zeros((n, n_cols))
    rows = np.repeat(np.arange(n), np.diff(indptr))
    dense[rows, indices] = 1.0
    expected = np.zeros((n, n_cols))
    expected[np.flatnonzero(columns >= 0), columns[columns >= 0]] = 1.0
    assert_array_equal(dense, expected)
    assert indptr[0] == 0 and np.all(np.diff(indptr) <= 1)
    assert not np.shares_memory(indices, columns)


def test_selection_csr_example_and_errors(kernels):
    indptr, indices = kernels.selection_csr(np.array([2, -1, 0]))
    assert_array_equal(indptr, [0, 1, 1, 2])
    assert_array_equal(indices, [2, 0])
    with pytest.raises(ValueError, match="-2 at row 1"):
        kernels.selection_csr(np.array([3, -2, 1]))
    indptr, indices = kernels.selection_csr(np.array([1, 0], dtype=np.int32))
    assert_array_equal(indices, [1, 0])
