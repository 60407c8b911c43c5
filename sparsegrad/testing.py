"""Independent reference Jacobians for checking forward-mode results.

The helpers here never look inside sparsegrad: they evaluate the user's
function on plain numpy arrays (finite differences or complex steps) and only
read the public attributes ``.value`` and ``.dvalue`` of forward values.  They
are the oracles of sparsegrad's own test suite and can be used to check user
code in the same way.

``numerical_jacobian``
    dense Jacobian by complex step or central differences.
``dense_jacobian``
    the Jacobian of a forward value as a dense array.
``assert_jacobian_equal``
    checks type, shape, dtype and canonical form of ``.dvalue`` and compares it
    with a dense reference.
``check_jacobian``
    all of the above in one call.
``run_examples``
    the examples of sparsegrad's own docstrings, run as a self-test
    (``sparsegrad.test()``).

>>> import numpy as np
>>> from sparsegrad.testing import numerical_jacobian
>>> numerical_jacobian(lambda x: x ** 2, np.array([1.0, 3.0]))
array([[2., 0.],
       [0., 6.]])
"""
import numpy as np
import scipy.sparse

__all__ = ["numerical_jacobian", "dense_jacobian", "assert_jacobian_equal",
           "check_jacobian", "run_examples"]

_COMPLEX_STEP = 1e-20


def _working_dtype(dtype):
    """The dtype in which differences are taken: at least double precision."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return np.result_type(dtype, np.complex128)
    if dtype.kind == "f":
        return np.result_type(dtype, np.float64)
    return np.dtype(np.float64)


def _evaluate(f, x):
    """``f`` at a private copy of ``x``, as a fresh array of numbers.

    ``f`` gets a copy (a function that writes into its argument must not move
    the point of the next evaluation), and the result is copied (a function
    that returns the same buffer each time must not overwrite an earlier
    result).  A forward value or any other non-numeric result is refused.
    """
    result = f(x.copy())
    if _is_forward(result):
        raise TypeError("numerical_jacobian: f returned a forward value for a plain "
                        "array argument; it must compute with plain numpy arrays only")
    result = np.array(result, copy=True)
    if not (np.issubdtype(result.dtype, np.number) or result.dtype == np.bool_):
        raise TypeError("numerical_jacobian: f returned an array of %s, not numbers"
                        % result.dtype)
    return result


def numerical_jacobian(f, x, method="complex", step=None):
    """Dense Jacobian of ``f`` at ``x`` by complex step or central differences.

    Parameters
    ----------
    f : callable
        Takes an array shaped like ``x`` and returns an array of any shape (or
        a scalar).  It is called with plain numpy arrays only.
    x : array_like
        The point; any shape, including 0-d.  Columns of the result follow
        ``x.ravel()`` (C order).
    method : {"complex", "central"}
        ``"complex"``: the complex step ``Im f(x + i h e_j) / h``, exact to
        rounding for real ``x`` and functions that are *complex-safe* (real on
        the real axis and holomorphic: no ``abs``, ``conj``, comparisons or
        ``np.real`` inside).  ``"central"``: ``(f(x + h e_j) - f(x - h e_j)) /
        2h``, for any function; for complex ``x`` the step is along the real
        axis, which gives the complex derivative of holomorphic functions.
    step : float or array_like, optional
        The step; a scalar or one per element of ``x``.  Default: ``1e-20``
        for the complex step, ``eps**(1/3) * max(1, |x_j|)`` (``eps`` of the
        working precision) for central differences.

    Returns
    -------
    ndarray
        Shape ``(f(x).size, x.size)``.  Differences are taken in at least
        double precision (``float32`` inputs are promoted, ``longdouble`` is
        kept).

    Raises
    ------
    ValueError
        For an unknown method, the complex step with complex ``x`` or a
        complex-valued ``f``, or a step that is zero, not finite, or lost in
        rounding at ``x``.
    TypeError
        When ``f`` returns a forward value or anything but numbers.

    ``f`` is always called with a fresh copy of the point and its result is
    copied, so a function that writes into its argument or returns the same
    buffer each time is differentiated correctly.

    Examples
    --------
    >>> import numpy as np
    >>> J = numerical_jacobian(np.sin, np.zeros(2), method="central")
    >>> np.allclose(J, np.eye(2))
    True
    >>> numerical_jacobian(lambda x: x.sum() * x[0], np.array([1.0, 2.0]))
    array([[4., 1.]])
    """
    x = np.asarray(x)
    work = _working_dtype(x.dtype)
    x = x.astype(work)
    x_flat = x.ravel()
    n = x.size
    if method == "complex":
        if work.kind == "c":
            raise ValueError("the complex step needs a real x; use method='central'")
        f0 = _evaluate(f, x)
        if np.iscomplexobj(f0):
            raise ValueError("the complex step needs a real-valued f; "
                             "use method='central'")
        h = np.broadcast_to(np.asarray(_COMPLEX_STEP if step is None else step,
                                       dtype=work), x.shape).ravel()
        if not np.all(np.isfinite(h) & (h != 0)):
            raise ValueError("numerical_jacobian: the complex step must be finite "
                             "and nonzero")
        ctype = np.result_type(work, 1j)
        jac = np.zeros((f0.size, n), dtype=np.result_type(f0.dtype, work))
        for j in range(n):
            xc = x_flat.astype(ctype)
            xc[j] += 1j * h[j]
            col = _evaluate(f, xc.reshape(x.shape))
            jac[:, j] = np.imag(col).ravel() / h[j]
        return jac
    if method == "central":
        f0 = _evaluate(f, x)
        real = np.finfo(work).dtype
        if step is None:
            h = np.cbrt(np.finfo(real).eps) * np.maximum(1, np.abs(x_flat))
        else:
            h = np.broadcast_to(np.asarray(step), x.shape).ravel()
        h = h.astype(real)
        jac = np.zeros((f0.size, n), dtype=np.result_type(f0.dtype, work))
        for j in range(n):
            xp = x_flat.copy()
            xm = x_flat.copy()
            xp[j] += h[j]
            xm[j] -= h[j]
            # the steps actually taken, exactly representable
            width = (xp[j] - x_flat[j]) + (x_flat[j] - xm[j])
            if not (np.isfinite(width) and width != 0):
                raise ValueError("numerical_jacobian: the step %r is lost in rounding "
                                 "at x[%d] = %r (or overflows)"
                                 % (h[j].item(), j, x_flat[j].item()))
            fp = _evaluate(f, xp.reshape(x.shape))
            fm = _evaluate(f, xm.reshape(x.shape))
            jac[:, j] = (fp.astype(jac.dtype).ravel() - fm.astype(jac.dtype).ravel()) / width
        return jac
    raise ValueError("unknown method %r; use 'complex' or 'central'" % (method,))


def _is_forward(v):
    # duck-typed, so that the oracles stay independent of sparsegrad's classes
    return hasattr(v, "value") and hasattr(v, "dvalue")


def dense_jacobian(fv):
    """The Jacobian of the forward value ``fv`` as a dense array.

    Parameters
    ----------
    fv : sparsegrad.forward.value
        A forward value (from ``forward.seed`` or ``forward.seed_sparsity``);
        any object with ``.value`` and ``.dvalue`` attributes is accepted.

    Returns
    -------
    ndarray
        Shape ``(fv.value.size, seed.size)``; a boolean pattern in sparsity
        mode.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> dense_jacobian(2 * forward.seed(np.ones(2)))
    array([[2., 0.],
           [0., 2.]])
    """
    if not _is_forward(fv):
        raise TypeError("dense_jacobian needs a forward value, not %s"
                        % type(fv).__name__)
    jac = fv.dvalue
    size = np.asarray(fv.value).size
    if scipy.sparse.issparse(jac):
        return np.asarray(jac.toarray())
    return np.asarray(jac).reshape(size, -1)


def _expected_jacobian_dtype(value, complex_seed=False):
    value = np.asarray(value)
    dtype = value.dtype if np.issubdtype(value.dtype, np.inexact) else np.dtype(np.float64)
    return np.promote_types(dtype, np.complex64) if complex_seed else dtype


def _check_canonical(jac):
    """Raise AssertionError unless ``jac`` is a well-formed canonical CSR."""
    nrows, ncols = jac.shape
    indptr = np.asarray(jac.indptr)
    indices = np.asarray(jac.indices)
    data = np.asarray(jac.data)
    assert indptr.shape == (nrows + 1,), "indptr has shape %s, expected (%d,)" % (
        indptr.shape, nrows + 1)
    assert indptr[0] == 0 and np.all(np.diff(indptr) >= 0), "indptr is not monotone"
    nnz = int(indptr[-1])
    assert indices.shape == (nnz,) and data.shape == (nnz,), (
        "indices/data lengths %d/%d differ from indptr[-1] = %d"
        % (indices.size, data.size, nnz))
    if nnz:
        assert indices.min() >= 0 and indices.max() < ncols, "column index out of range"
    # strictly increasing column indices within each row: sorted, no duplicates
    steps = np.diff(indices)
    row_starts = indptr[1:-1]
    within_row = np.ones(max(nnz - 1, 0), dtype=bool)
    starts = row_starts[(row_starts > 0) & (row_starts < nnz)]
    within_row[starts - 1] = False
    bad = within_row & (steps <= 0)
    assert not np.any(bad), "CSR is not canonical: unsorted or duplicate column indices"


def assert_jacobian_equal(forward_result, expected_dense, rtol=1e-7, atol=0.0, *,
                          scalar_seed=None, sparsity=False, complex_seed=False):
    """Check the Jacobian of a forward value against a dense reference.

    Checks that ``forward_result.dvalue`` is a ``scipy.sparse.csr_matrix`` of
    shape ``(value.size, seed.size)`` (a 0-d ndarray for a 0-d value of a
    scalar seed), with the value's dtype (``float64`` for non-inexact values,
    complex for a complex seed, ``bool`` in sparsity mode), in canonical form (sorted column indices, no
    duplicates), numerically close to ``expected_dense``, and that every entry
    of ``expected_dense`` with ``|entry| > atol`` is stored in its pattern.

    Parameters
    ----------
    forward_result : sparsegrad.forward.value
        Or any object with ``.value`` and ``.dvalue`` attributes.
    expected_dense : array_like
        Reference Jacobian, shape ``(value.size, seed.size)``.
    rtol, atol : float
        Tolerances as in :func:`numpy.testing.assert_allclose`.
    scalar_seed : bool, optional
        Whether the seed was 0-d.  If given, the type of ``.dvalue`` for a 0-d
        value is checked strictly (0-d ndarray or ``(1, n)`` csr_matrix);
        by default either is accepted when ``expected_dense`` is ``(1, 1)``.
    sparsity : bool
        ``forward_result`` comes from ``forward.seed_sparsity``: only the
        boolean pattern is checked to contain the nonzeros of the reference.
    complex_seed : bool
        The seed was complex: the Jacobian of a real value (``abs`` of values
        on the real axis) is then complex, in the value's precision.

    Raises
    ------
    AssertionError
        Describing the first property that fails.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsegrad import forward
    >>> y = forward.seed(np.array([1.0, 2.0])) ** 2
    >>> assert_jacobian_equal(y, np.diag([2.0, 4.0]))
    """
    if not _is_forward(forward_result):
        raise AssertionError("expected a forward value, got %s"
                             % type(forward_result).__name__)
    value = np.asarray(forward_result.value)
    expected = np.asarray(expected_dense)
    if expected.ndim != 2 or expected.shape[0] != value.size:
        raise AssertionError("reference Jacobian has shape %s, but the value has %d "
                             "elements" % (expected.shape, value.size))
    jac = forward_result.dvalue
    if isinstance(jac, np.ndarray) and value.ndim == 0 and scalar_seed is not False:
        if expected.shape != (1, 1) or jac.ndim != 0:
            raise AssertionError("a 0-d ndarray Jacobian needs a 0-d value and a scalar "
                                 "seed; got shape %s for a (1, %d) reference"
                                 % (jac.shape, expected.shape[1]))
        dense = jac.reshape(1, 1)
        stored = np.ones((1, 1), dtype=bool)
    else:
        if scalar_seed and value.ndim == 0:
            raise AssertionError("Jacobian of a 0-d value w.r.t. a scalar seed must be a "
                                 "0-d ndarray, got %s" % type(jac).__name__)
        if not isinstance(jac, scipy.sparse.csr_matrix):
            raise AssertionError("Jacobian must be a scipy.sparse.csr_matrix, got %s"
                                 % type(jac).__name__)
        if jac.shape != expected.shape:
            raise AssertionError("Jacobian has shape %s, expected %s"
                                 % (jac.shape, expected.shape))
        _check_canonical(jac)
        dense = np.asarray(jac.toarray())
        stored = np.zeros(jac.shape, dtype=bool)
        rows = np.repeat(np.arange(jac.shape[0]), np.diff(jac.indptr))
        stored[rows, jac.indices] = True
    want_dtype = (np.dtype(bool) if sparsity
                  else _expected_jacobian_dtype(value, complex_seed))
    if jac.dtype != want_dtype:
        raise AssertionError("Jacobian dtype is %s, expected %s"
                             % (jac.dtype, want_dtype))
    if sparsity:
        needed = expected != 0
        pattern = stored
    else:
        np.testing.assert_allclose(dense, expected, rtol=rtol, atol=atol,
                                   err_msg="Jacobian differs from the reference")
        with np.errstate(invalid="ignore"):
            needed = ~(np.abs(expected) <= atol)
        pattern = stored
    missing = needed & ~pattern
    if np.any(missing):
        where = np.argwhere(missing)
        raise AssertionError("%d nonzero(s) of the reference missing from the stored "
                             "pattern, first at %s" % (len(where), tuple(where[0])))


def _default_rtol(method, dtype):
    eps = np.finfo(np.dtype(dtype)).eps if np.issubdtype(dtype, np.inexact) else 0.0
    if method == "complex":
        return max(1e-10, 100 * eps)
    return max(1e-6, 100 * eps)


def check_jacobian(f, x, method="central", rtol=None, atol=None):
    """Seed ``x``, run ``f`` in forward mode and compare with a numerical Jacobian.

    The forward value must equal ``f(x)`` computed on plain arrays (same shape
    and dtype, values to a few ulps) and its Jacobian must match
    :func:`numerical_jacobian` (checked by :func:`assert_jacobian_equal`).

    Parameters
    ----------
    f : callable
        Written with numpy functions, so that it accepts both ndarrays and
        forward values.
    x : array_like
        The point (the seed); any shape.
    method : {"central", "complex"}
        Passed to :func:`numerical_jacobian`.
    rtol, atol : float, optional
        Tolerances for the Jacobian.  Default ``rtol``: ``1e-10`` for the
        complex step, ``1e-6`` for central differences (at least ``100 eps``
        of the value dtype); default ``atol``: ``rtol`` times the largest
        reference entry.

    Returns
    -------
    sparsegrad.forward.value
        ``f(forward.seed(x))``, for further checks.

    Examples
    --------
    >>> import numpy as np
    >>> y = check_jacobian(lambda x: np.exp(x[1:]) * x[:-1], np.array([0.5, 1.0, 2.0]))
    >>> y.dvalue.shape
    (2, 3)
    """
    from . import forward
    x = np.asarray(x)
    # (copies: f may write into its argument, which must not change the user's x
    # nor the point of the reference)
    result = f(forward.seed(x.copy()))
    reference = np.asarray(f(x.copy()))
    value = np.asarray(forward.nvalue(result))
    if value.shape != reference.shape or value.dtype != reference.dtype:
        raise AssertionError("forward value is %s %s, f(x) is %s %s"
                             % (value.dtype, value.shape, reference.dtype,
                                reference.shape))
    value_rtol = (8 * np.finfo(value.dtype).eps
                  if np.issubdtype(value.dtype, np.inexact) else 0)
    np.testing.assert_allclose(value, reference, rtol=value_rtol, atol=0,
                               equal_nan=True, err_msg="forward value differs from f(x)")
    expected = numerical_jacobian(f, x, method=method)
    if rtol is None:
        rtol = _default_rtol(method, value.dtype)
    if atol is None:
        scale = np.max(np.abs(expected)) if expected.size else 0.0
        atol = rtol * float(scale)
    if not _is_forward(result):
        # f does not depend on x: the reference must vanish
        np.testing.assert_allclose(expected, 0, atol=atol,
                                   err_msg="f returned a constant but depends on x")
        return result
    assert_jacobian_equal(result, expected, rtol=rtol, atol=atol,
                          scalar_seed=(x.ndim == 0), complex_seed=np.iscomplexobj(x))
    return result


#: modules without docstring examples of their own (the compiled kernels' twins
#: are the reference kernels, whose examples run)
_WITHOUT_EXAMPLES = ("sparsegrad._fast._kernels", "sparsegrad._fast._pool")


def run_examples(verbose=False):
    """Run the examples in the docstrings of sparsegrad's modules (a self-test
    of the installed package, also ``sparsegrad.test()``).

    Parameters
    ----------
    verbose : bool
        Print every example as it runs (else only failures and a summary).

    Returns
    -------
    bool
        True when every example gave its documented result.
    """
    import doctest
    import importlib
    import pkgutil

    import sparsegrad
    failed = attempted = 0
    for info in sorted(pkgutil.walk_packages(sparsegrad.__path__, "sparsegrad."),
                       key=lambda info: info.name):
        if info.name in _WITHOUT_EXAMPLES:
            continue
        result = doctest.testmod(importlib.import_module(info.name), verbose=verbose)
        failed += result.failed
        attempted += result.attempted
    print("sparsegrad %s (%s kernels): %d examples, %d failed"
          % (sparsegrad.version, sparsegrad.KERNELS, attempted, failed))
    return failed == 0
