"""``sparsegrad.spy``: the pattern of a Jacobian, as braille text or with matplotlib."""
import numpy as np
import pytest
import scipy.sparse

import sparsegrad
from sparsegrad import forward

BLANK = chr(0x2800)


def test_identity_is_a_diagonal_of_dots():
    picture = sparsegrad.spy(scipy.sparse.eye(8, format="csr"), width=4, show=False)
    assert picture.splitlines() == ["8 x 8, 8 stored entries (12.5%)",
                                    "\u2811\u2884" + BLANK * 2, BLANK * 2 + "\u2811\u2884"]


def test_large_matrices_are_scaled_within_the_bounds():
    n = 1000
    J = scipy.sparse.diags([np.ones(n - 1), np.ones(n), np.ones(n - 1)], [-1, 0, 1],
                           format="csr")
    lines = sparsegrad.spy(J, width=20, max_rows=5, show=False).splitlines()
    assert lines[0] == "1000 x 1000, 2998 stored entries (0.3%)"
    body = lines[1:]
    assert len(body) == 5 and {len(line) for line in body} == {10}
    # (a square matrix in 20 x 20 dots, 50 rows a dot: the band lights the cells on
    # the diagonal, and the next where an off-diagonal entry crosses into it)
    for k, line in enumerate(body):
        lit = {j for j, char in enumerate(line) if char != BLANK}
        assert {2 * k, 2 * k + 1} <= lit <= {2 * k - 1, 2 * k, 2 * k + 1, 2 * k + 2}


def test_forward_values_dense_arrays_and_stored_zeros():
    x = forward.seed(np.array([1.0, 0.0, 2.0]))
    y = x * x[::-1]           # the middle row's entry is a stored zero (2 * 0.0)
    from_value = sparsegrad.spy(y, width=2, show=False)
    assert from_value.splitlines()[0] == "3 x 3, 5 stored entries (55.6%)"
    assert sparsegrad.spy(y.dvalue, width=2, show=False) == from_value
    dense = sparsegrad.spy(np.eye(3), width=2, show=False)
    assert dense.splitlines()[0] == "3 x 3, 3 stored entries (33.3%)"
    assert sparsegrad.spy(scipy.sparse.csr_matrix((0, 4)), show=False) == \
        "0 x 4, 0 stored entries (0%)"


def test_printed_and_refused(capsys):
    sparsegrad.spy(np.eye(2))
    assert capsys.readouterr().out.startswith("2 x 2, 2 stored entries")
    with pytest.raises(TypeError, match="2-d matrix"):
        sparsegrad.spy(np.ones(3))
    with pytest.raises(ValueError, match="width"):
        sparsegrad.spy(np.eye(2), width=0)


def test_drawn_by_matplotlib():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ax = sparsegrad.spy(scipy.sparse.eye(5, format="csr"), plot=True)
    assert ax.get_xlim()[1] > 4
    plt.close(ax.figure)
