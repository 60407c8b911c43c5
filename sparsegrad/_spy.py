"""A picture of a sparsity pattern: :func:`spy`.

In the terminal the pattern is drawn with Unicode braille characters, each a
block of 2 x 4 dots; a dot is lit when the block of entries it stands for
holds a stored entry (stored zeros included: the pattern, not the values).
With ``plot=True`` matplotlib draws it instead (``Axes.spy``).

>>> import numpy as np
>>> import scipy.sparse
>>> print(spy(scipy.sparse.eye(8, format="csr"), width=4, show=False))
8 x 8, 8 stored entries (12.5%)
⠑⢄⠀⠀
⠀⠀⠑⢄
"""
import numpy as np
import scipy.sparse

__all__ = ["spy"]

#: the bit of each dot of a braille character, by (row, column) within it
_DOT_BITS = np.array([[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]])
_BRAILLE = 0x2800


def spy(matrix, *, width=64, max_rows=32, show=True, plot=False, ax=None, **plot_options):
    """Draw the pattern of ``matrix``: in the terminal, or with matplotlib.

    Parameters
    ----------
    matrix : scipy.sparse matrix or array, ndarray, or forward value
        A forward value's Jacobian (``.dvalue``) is drawn; a dense array's
        nonzeros are its pattern.
    width : int, optional
        Characters per line of the picture (2 dots each).
    max_rows : int, optional
        At most this many lines (4 dots each); the picture keeps the matrix's
        aspect ratio within ``width`` and ``max_rows``.
    show : bool, optional
        Print the picture (else only return it).
    plot : bool, optional
        Draw with matplotlib's ``Axes.spy`` instead (on ``ax``, or a new
        figure's axes), with ``plot_options`` passed to it.
    ax : matplotlib Axes, optional
        Where to draw; implies ``plot=True``.

    Returns
    -------
    str or matplotlib Axes
        The picture: a first line with the shape and the stored entries, then
        the braille lines; the Axes when drawn by matplotlib.
    """
    if hasattr(matrix, "dvalue") and hasattr(matrix, "value"):
        matrix = matrix.dvalue
    if scipy.sparse.issparse(matrix):
        matrix = scipy.sparse.coo_array(matrix)
    else:
        dense = np.asarray(matrix)
        if dense.ndim != 2 or dense.dtype == object:
            raise TypeError("sparsegrad.spy: needs a 2-d matrix, got %s of shape %s"
                            % (type(matrix).__name__, np.shape(dense)))
        matrix = scipy.sparse.coo_array(dense)
    if plot or ax is not None:
        return _plot(matrix, ax, plot_options)
    if width < 1 or max_rows < 1:
        raise ValueError("sparsegrad.spy: width and max_rows must be at least 1")
    picture = _picture(matrix, int(width), int(max_rows))
    if show:
        print(picture)
    return picture


def _picture(matrix, width, max_rows):
    """The header line and the braille lines of a COO matrix's pattern."""
    m, n = matrix.shape
    stored = matrix.nnz
    density = stored / (m * n) if m * n else 0.0
    header = "%d x %d, %d stored entries (%.3g%%)" % (m, n, stored, 100 * density)
    if not m or not n:
        return header
    # dots across and down: the aspect ratio of the matrix, within the bounds
    dots_x = min(2 * width, n)
    dots_y = min(4 * max_rows, max(1, round(m * dots_x / n)), m)
    if dots_y == 4 * max_rows and m * dots_x > n * dots_y:
        dots_x = min(dots_x, max(1, round(n * dots_y / m)))
    lines, columns = -(-dots_y // 4), -(-dots_x // 2)
    cells = np.zeros((lines, columns), dtype=np.int64)
    if stored:
        y = np.asarray(matrix.row, dtype=np.int64) * dots_y // m
        x = np.asarray(matrix.col, dtype=np.int64) * dots_x // n
        np.bitwise_or.at(cells, (y // 4, x // 2), _DOT_BITS[y % 4, x % 2])
    text = [header]
    for line in cells:
        text.append("".join(map(chr, _BRAILLE + line)))
    return "\n".join(text)


def _plot(matrix, ax, options):
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("sparsegrad.spy(..., plot=True) needs matplotlib, which is "
                          "not installed; without plot=True the pattern is printed "
                          "as text") from exc
    if ax is None:
        _, ax = plt.subplots()
    options.setdefault("markersize", 1)
    ax.spy(matrix, **options)
    return ax
