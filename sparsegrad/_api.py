"""Function-level API: Jacobians, Jacobian-vector products and patterns of functions.

These wrap :func:`sparsegrad.forward.seed` for code that wants a Jacobian
*function*, as SciPy's solvers do (``jac=`` of ``least_squares``, ``root``,
``solve_ivp``).  The function ``f`` is ordinary numpy code; the arguments being
differentiated are seeded, every other argument is passed through unchanged.

>>> import numpy as np
>>> import sparsegrad
>>> def f(x, c):
...     return c * x[1:] * x[:-1]
>>> sparsegrad.jacobian(f)(np.array([1.0, 2.0, 3.0]), 2.0).toarray()
array([[4., 2., 0.],
       [0., 6., 4.]])
"""
import numbers

import numpy as np
import scipy.sparse

from . import _backend
from . import _jacobian
from . import _trace
from . import forward
from ._value import value as _forward_value, make as _make, coerce, held_types, object_holder

__all__ = ["jacobian", "value_and_jacobian", "jvp", "sparsity", "gradient", "value_and_gradient"]

_FORMATS = ("matrix", "array", "dense")


def _check_format(format):
    if format not in _FORMATS:
        raise ValueError("format must be one of %s, not %r"
                         % (", ".join(repr(f) for f in _FORMATS), format))
    return format


def _normalize_argnums(argnums):
    """``(tuple_of_ints, single)``: the argument positions and whether one int was given."""
    single = isinstance(argnums, numbers.Integral) and not isinstance(argnums, bool)
    positions = (argnums,) if single else argnums
    try:
        positions = tuple(positions)
    except TypeError:
        raise TypeError("argnums must be an int or a tuple of ints, not %r" % (argnums,))
    if not positions:
        raise ValueError("argnums must name at least one argument")
    for position in positions:
        if not isinstance(position, numbers.Integral) or isinstance(position, bool):
            raise TypeError("argnums must be an int or a tuple of ints, not %r" % (argnums,))
    return tuple(int(p) for p in positions), single


def _resolve_argnums(positions, n_args):
    resolved = []
    for position in positions:
        if not -n_args <= position < n_args:
            raise ValueError("argnums %d is out of range for a call with %d positional "
                             "argument(s)" % (position, n_args))
        resolved.append(position % n_args)
    if len(set(resolved)) != len(resolved):
        raise ValueError("argnums %r names the same argument twice" % (positions,))
    return resolved


def _output(result, name):
    """The value array and the factored Jacobian (None: independent of the seed) of ``result``."""
    if type(result) in (list, tuple, np.ndarray):
        # (``np.array([x[1] - x[0] ** 2, 1 - x[0]])``, a list of them: what the
        # function means is their stack)
        result = coerce(result)
    if isinstance(result, _forward_value):
        return result.value, result._jacobian
    array = _backend.asarray(result)
    if array.dtype == object:
        held = (" holding %s" % held_types(result)) if type(result) is np.ndarray else ""
        raise TypeError("%s: the function must return one array (a forward value, an "
                        "ndarray or a number, or a list or an object array of those), "
                        "not %s%s; stack several outputs with np.concatenate or np.stack"
                        % (name, type(result).__name__, held))
    if array.dtype.kind not in "biufc":
        # a string, date or record result has no derivative: a zero Jacobian for it
        # would be a Jacobian of something the function did not compute
        raise TypeError("%s: the function returned an array of dtype %s; it must return "
                        "numbers (bool, integer, floating or complex)"
                        % (name, array.dtype))
    return array, None


def extra_arguments(args):
    """``args`` as the tuple of extra arguments: a tuple as it is, anything else as
    one argument (as ``scipy.optimize`` takes ``args``: ``args=p`` is ``args=(p,)``).

    >>> extra_arguments(2.0), extra_arguments((1, 2)), len(extra_arguments([1, 2]))
    ((2.0,), (1, 2), 1)
    """
    return args if isinstance(args, tuple) else (args,)


def _to_matrix(array, J, seed, dtype):
    """``J`` (None: zero) as a 2-d ``csr_matrix`` of shape ``(array.size, seed.size)``."""
    if J is None:
        return scipy.sparse.csr_matrix((array.size, seed.size), dtype=dtype)
    return _jacobian.to_scipy(J, dtype)


def _column_block(matrix, first, stop):
    """Columns ``first:stop`` of a canonical CSR matrix, keeping stored zeros.

    scipy's own column slicing is avoided on purpose: the pattern of a block
    must be that of the full Jacobian, explicit zeros included.
    """
    indices = matrix.indices
    xp = _backend.of(indices).xp     # (a GPU's matrix is cut on the GPU)
    keep = (indices >= first) & (indices < stop)
    counts = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(keep)])
    indptr = counts[matrix.indptr].astype(matrix.indptr.dtype)
    return type(matrix)(
        (matrix.data[keep], (indices[keep] - first).astype(indices.dtype), indptr),
        shape=(matrix.shape[0], stop - first))


_DENSE_REFUSAL = (
    "numpy cannot make an array of this sparse Jacobian without densifying it, which "
    "sparsegrad never does silently. A SciPy method that needs a dense Jacobian (root "
    "or fsolve with method \"hybr\", root with \"lm\", leastsq, least_squares with "
    "\"lm\", solve_ivp with \"LSODA\", the \"jac\" of an SLSQP constraint dict) takes "
    "sparsegrad.jacobian(f, format=\"dense\") or value_and_jacobian(f, format=\"dense\"). "
    "For one matrix J, J.toarray() densifies it; abs(J), J.sqrt() and J.multiply(y) "
    "keep it sparse")


def _refuse_dense(self, dtype=None, copy=None):
    """``__array__`` of a returned sparse Jacobian.

    Without it numpy makes a 0-d object array of a scipy sparse matrix, which
    SciPy's dense methods reject with a message about shapes (MINPACK) or
    sequences (LSODA).  ``dtype=object`` is numpy's own 0-d wrapping, which
    ``scipy.sparse.bmat``, ``hstack`` and ``vstack`` ask for: it is given.
    """
    if dtype is not None and np.dtype(dtype) == object:
        return object_holder(self)
    raise TypeError(_DENSE_REFUSAL)


class csr_matrix(scipy.sparse.csr_matrix):
    """A ``scipy.sparse.csr_matrix`` that ``np.asarray`` refuses (``TypeError``)."""

    __array__ = _refuse_dense


class csr_array(scipy.sparse.csr_array):
    """A ``scipy.sparse.csr_array`` that ``np.asarray`` refuses (``TypeError``)."""

    __array__ = _refuse_dense


# (scipy's classes only: a device's matrices stay as CuPy makes them)
_REFUSING = {scipy.sparse.csr_matrix: csr_matrix, scipy.sparse.csr_array: csr_array}


def _refusing(matrix):
    """``matrix`` itself, made an instance of its class in ``_REFUSING`` (other
    objects, such as dense arrays, as they are)."""
    refusing = _REFUSING.get(type(matrix))
    if refusing is not None:
        # scipy's constructor built and checked this very object, and the
        # subclass adds no state; constructing it again would cost a tenth of
        # a small Jacobian's evaluation
        matrix.__class__ = refusing
    return matrix


def _convert(matrix, format):
    if format == "array":
        return scipy.sparse.csr_array(matrix)
    if format == "dense":
        return matrix.toarray()
    return matrix


def _evaluate(f, argnums, args, kwargs, pattern_only, name):
    """``(value, [Jacobian per argument] , sizes)`` of ``f(*args, **kwargs)``."""
    positions = _resolve_argnums(argnums, len(args))
    seeded = [args[i] for i in positions]
    for i, x in zip(positions, seeded):
        forward._refuse_forward(x, "argument %d" % i, name)
    seeds = (forward.seed_sparsity if pattern_only else forward.seed)(*seeded)
    if len(positions) == 1:
        seeds = (seeds,)
    call = list(args)
    for i, x in zip(positions, seeds):
        call[i] = x
    array, J = _output(f(*call, **kwargs), name)
    seed = _jacobian.common_seed([x._jacobian for x in seeds])
    if J is not None and J.seed is not seed:
        raise ValueError("%s: the result does not come from the seeded arguments "
                         "(was another seed() used inside the function?)" % name)
    matrix = _to_matrix(array, J, seed, _jacobian.matrix_dtype(seed, array.dtype))
    return array, matrix, [x.size for x in seeds]


def _split(matrix, sizes, single, hstack, format):
    if single or hstack:
        return _refusing(_convert(matrix, format))
    offsets = np.cumsum([0] + sizes).tolist()
    return tuple(_refusing(_convert(_column_block(matrix, a, b), format))
                 for a, b in zip(offsets[:-1], offsets[1:]))


def value_and_jacobian(f, argnums=0, *, format="matrix", hstack=False, trace=True):
    """A function returning ``f``'s value and its exact sparse Jacobian.

    Parameters
    ----------
    f : callable
        ``f(*args, **kwargs)``, ordinary numpy code returning one array (any
        shape, or a scalar).
    argnums : int or tuple of int, optional
        Positional argument(s) to differentiate with respect to (default 0).
        Every other argument, and every keyword argument, is passed to ``f``
        unchanged.
    format : {"matrix", "array", "dense"}, optional
        ``"matrix"`` (default): ``scipy.sparse.csr_matrix``, like ``.dvalue``;
        ``"array"``: ``scipy.sparse.csr_array``; ``"dense"``: a 2-d ndarray,
        for solvers that need dense Jacobians (``scipy.optimize.root`` with
        ``hybr`` or ``lm``, ``least_squares`` with ``lm``, ``solve_ivp`` with
        ``LSODA``).  The sparse matrices are of a subclass whose conversion
        by ``np.asarray`` raises ``TypeError`` naming ``format="dense"``,
        where numpy would make a 0-d object array.
    hstack : bool, optional
        With a tuple ``argnums``: return one matrix whose column blocks are
        the Jacobians with respect to each argument, instead of a tuple.
    trace : bool, optional
        Record ``f``'s operations and compute Jacobians by a compiled program
        (default; see "Recorded evaluation" in ``docs/solving.md``), for a
        function called many times along one path, as a Newton solver calls
        it.  Each call runs ``f`` on light values that compute only its
        values and record its operations; the first call with a new
        structure (operations, shapes, index arrays) compiles a program,
        later ones, of this or any function, run it.  Scalars may change
        between calls; a changed path or index array is detected and
        compiled anew.  Recorded: one differentiated float64 argument (not
        0-d), elementwise ufuncs (``+ - * /``, ``**`` by a constant, ``exp``,
        ``log``, ``sqrt``, ``sin``, ``cos``, ``tanh``, ...), comparisons and
        ``np.where``, ``reshape`` and ``ravel``, reads by slices, ints and
        integer arrays, ``np.pad`` by zeros, transposes and other movements
        of the data (``np.roll``, ``np.flip``...), ``np.concatenate``,
        ``np.stack`` and the like.  A call that uses anything else is computed by
        :func:`sparsegrad.forward.seed` (``f`` may then run twice in that
        call, and later calls go that way at once); ``cache_info().reason``
        says why, and a debug-level message is logged on the
        ``"sparsegrad"`` logger.  The results are ``forward.seed``'s bit for
        bit.  The matrices of one recorded path share their (read-only)
        ``indices`` and ``indptr``; copy a matrix before changing its
        pattern in place.  ``False``: ``forward.seed`` at every call.  The
        returned function has ``cache_info()`` and ``cache_clear()``.

    Returns
    -------
    callable
        ``g(*args, **kwargs) -> (value, J)``.  ``value`` is ``f``'s result as
        an ndarray.  ``J`` has shape ``(value.size, x.size)``: rows follow
        ``value.ravel()``, columns ``x.ravel()`` (C order), always 2-d, also
        for scalars.  For a tuple ``argnums``, ``J`` is a tuple with one such
        matrix per argument (or one ``hstack``-ed matrix).  Stored zeros are
        kept: the pattern never depends on the values of the arguments.

    Raises
    ------
    TypeError
        For ``argnums`` that are not ints, a function returning a list or
        tuple of arrays or non-numeric values (strings, dates), or a forward
        value as a differentiated argument (nested differentiation is not
        supported: pass its ``.value``).
    ValueError
        For ``argnums`` out of range or repeated, or an unknown ``format``.

    Examples
    --------
    >>> import numpy as np
    >>> F = value_and_jacobian(lambda x, y: x * y, argnums=(0, 1))
    >>> v, (Jx, Jy) = F(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    >>> v, Jx.toarray(), Jy.toarray()
    (array([3., 8.]), array([[3., 0.],
           [0., 4.]]), array([[1., 0.],
           [0., 2.]]))
    """
    return _value_and_jacobian(f, argnums, format, hstack, "sparsegrad.value_and_jacobian",
                               trace)


def _value_and_jacobian(f, argnums, format, hstack, name, trace=True):
    """:func:`value_and_jacobian`, naming ``name`` in its error messages."""
    positions, single = _normalize_argnums(argnums)
    format = _check_format(format)
    hstack = bool(hstack)
    recorder = _trace.Recorder(getattr(f, "__qualname__", repr(f))) if trace else None

    def value_and_jacobian_of_f(*args, **kwargs):
        if recorder is not None:
            recorded = _recorded(recorder, f, positions, args, kwargs)
            if recorded is not None:
                return recorded[0], _split(recorded[1], [args[positions[0]].size], single,
                                           hstack, format)
        array, matrix, sizes = _evaluate(f, positions, args, kwargs, False, name)
        if recorder is not None:
            recorder.settled()
        return array, _split(matrix, sizes, single, hstack, format)

    _name(value_and_jacobian_of_f, f, "value_and_jacobian")
    if recorder is not None:
        value_and_jacobian_of_f.cache_info = recorder.info
        value_and_jacobian_of_f.cache_clear = recorder.clear
    return value_and_jacobian_of_f


def _recorded(recorder, f, positions, args, kwargs):
    """``(value, matrix)`` of a recorded evaluation, or None for the eager way
    (the reason noted by ``recorder``)."""
    if len(positions) > 1:
        return recorder.fallback("several arguments differentiated (argnums=%r)"
                                 % (positions,))
    position = positions[0]
    if not -len(args) <= position < len(args):
        return None    # (the eager way's error)
    position %= len(args)
    x = args[position]
    if not (type(x) is np.ndarray and x.ndim and x.dtype == np.float64):
        return recorder.fallback("argument %d is a %s, not a float64 ndarray of 1 or more "
                                 "dimensions" % (position, _described(x)), refuse=False)
    rest = args[:position] + args[position + 1:]

    def with_x_first(traced, *others, **kw):
        return f(*others[:position], traced, *others[position:], **kw)

    return recorder.value_and_jacobian(f if position == 0 else with_x_first, x, rest,
                                       kwargs)


def _described(x):
    """``x``'s type, with the dtype and shape of an array."""
    kind = type(x).__name__
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return "%s of dtype %s and shape %s" % (kind, x.dtype, tuple(x.shape))
    return kind


def jacobian(f, argnums=0, *, format="matrix", hstack=False, trace=True):
    """A function returning the exact sparse Jacobian of ``f``.

    Same parameters as :func:`value_and_jacobian`; the returned function
    gives only the Jacobian.  It fits SciPy's ``jac=`` arguments: pass
    ``jacobian(fun)`` to ``scipy.optimize.least_squares`` (``trf``,
    ``dogbox``), and ``jacobian(fun, argnums=1)`` (the Jacobian with
    respect to ``y`` of ``fun(t, y)``) to ``scipy.integrate.solve_ivp``
    (``BDF``, ``Radau``): they keep it sparse.  The methods that need an
    array (``root`` with ``hybr`` or ``lm``, ``least_squares`` with ``lm``,
    ``solve_ivp`` with ``LSODA``) take ``jacobian(fun, format="dense")``;
    given the sparse matrix, they stop at its first evaluation (``TypeError``
    naming that option; ``least_squares`` raises its own ``ValueError``).
    ``docs/solving.md`` lists every method.

    Examples
    --------
    >>> import numpy as np
    >>> J = jacobian(lambda x: np.sin(x) * x[::-1])(np.zeros(2))
    >>> J.toarray()
    array([[0., 0.],
           [0., 0.]])
    >>> J.nnz  # the pattern, stored zeros included
    4
    >>> jacobian(lambda t, y: t * y ** 2, argnums=1)(2.0, np.array([1.0, 3.0])).toarray()
    array([[ 4.,  0.],
           [ 0., 12.]])
    """
    value_and_jac = _value_and_jacobian(f, argnums, format, hstack, "sparsegrad.jacobian",
                                        trace)

    def jacobian_of_f(*args, **kwargs):
        return value_and_jac(*args, **kwargs)[1]

    _name(jacobian_of_f, f, "jacobian", value_and_jac)
    return jacobian_of_f


def value_and_gradient(f, argnums=0, *, trace=True):
    """A function returning ``(f(x), gradient)`` of a scalar function ``f``.

    Parameters
    ----------
    f : callable
        ``f(x, *args, **kwargs)``, ordinary numpy code returning one number (a
        0-d array or forward value, a Python float, or an array of one element).
    argnums, trace
        As for :func:`value_and_jacobian`.

    Returns
    -------
    callable
        ``value_and_gradient_of_f(*args, **kwargs) -> (value, gradient)``: the
        value as ``f`` computed it, and the gradient, a dense ndarray of the
        differentiated argument's shape (the Jacobian's one row); a tuple of
        them for several ``argnums``.  It fits ``scipy.optimize.minimize(fun,
        x0, jac=True)`` as ``fun``.

    Raises
    ------
    ValueError
        When ``f`` returns more than one number.

    Examples
    --------
    >>> import numpy as np
    >>> value, gradient = value_and_gradient(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    >>> float(value), gradient
    (9.0, array([ 3., 12.]))
    """
    return _value_and_gradient(f, argnums, trace, "sparsegrad.value_and_gradient")


def _value_and_gradient(f, argnums, trace, name):
    """:func:`value_and_gradient`, naming ``name`` in its error messages."""
    positions, single = _normalize_argnums(argnums)
    value_and_jac = _value_and_jacobian(f, argnums, "matrix", False, name, trace)

    def value_and_gradient_of_f(*args, **kwargs):
        value, matrices = value_and_jac(*args, **kwargs)
        if np.size(value) != 1:
            raise ValueError("%s: f must return one number, got an array of shape %s (for "
                             "the derivative of several outputs, use sparsegrad.jacobian)"
                             % (name, np.shape(value)))
        if single:
            matrices = (matrices,)
        gradients = tuple(matrix.toarray().reshape(np.shape(args[i]))
                          for matrix, i in zip(matrices,
                                               _resolve_argnums(positions, len(args))))
        return value, gradients[0] if single else gradients

    _name(value_and_gradient_of_f, f, "value_and_gradient", value_and_jac)
    return value_and_gradient_of_f


def gradient(f, argnums=0, *, trace=True):
    """A function returning the gradient of a scalar function ``f``.

    Same parameters as :func:`value_and_gradient`; the returned function gives
    only the gradient (a dense ndarray of the argument's shape).  It fits
    ``scipy.optimize.minimize``'s ``jac=``.

    Examples
    --------
    >>> import numpy as np
    >>> gradient(lambda x: x[0] * np.sum(x ** 2))(np.array([1.0, 2.0]))
    array([7., 4.])
    """
    value_and_grad = _value_and_gradient(f, argnums, trace, "sparsegrad.gradient")

    def gradient_of_f(*args, **kwargs):
        return value_and_grad(*args, **kwargs)[1]

    _name(gradient_of_f, f, "gradient", value_and_grad)
    return gradient_of_f


def _name(wrapper, f, kind, inner=None):
    """Name ``wrapper`` after ``f``; it shares the recorder's ``cache_info`` and
    ``cache_clear`` of the ``inner`` function it calls, if that has them."""
    if hasattr(inner, "cache_info"):
        wrapper.cache_info = inner.cache_info
        wrapper.cache_clear = inner.cache_clear
    wrapper.__name__ = "%s_of_%s" % (kind, getattr(f, "__name__", "f"))
    wrapper.__doc__ = "The %s of %r (made by sparsegrad.%s)." % (
        kind.replace("_", " "), f, kind)
    wrapper.__wrapped__ = f


def sparsity(f, x, args=(), kwargs=None, *, format="matrix"):
    """The sparsity pattern of the Jacobian of ``f`` at ``x``, as a boolean matrix.

    Only the pattern is propagated (:func:`sparsegrad.forward.seed_sparsity`),
    with no floating-point derivative arithmetic.  The pattern contains every
    entry that can be nonzero for *any* ``x``: it depends on the program, not
    on the values, so it can be computed once and given to
    ``scipy.optimize.least_squares(jac_sparsity=...)`` or
    ``scipy.integrate.solve_ivp(jac_sparsity=...)``.

    Parameters
    ----------
    f : callable
        ``f(x, *args, **kwargs)``.
    x : array_like
        The point (any shape; columns follow ``x.ravel()``).
    args, kwargs : tuple and dict, optional
        Extra arguments passed to ``f`` unchanged (a non-tuple ``args`` is one
        argument, as in ``scipy.optimize``).
    format : {"matrix", "array", "dense"}, optional
        As in :func:`value_and_jacobian`.

    Returns
    -------
    scipy.sparse.csr_matrix of bool
        Shape ``(f(x).size, x.size)``; every stored entry is True.

    Examples
    --------
    >>> import numpy as np
    >>> sparsity(lambda x: x[1:] - x[:-1], np.zeros(3)).toarray()
    array([[ True,  True, False],
           [False,  True,  True]])
    """
    format = _check_format(format)
    _, matrix, _ = _evaluate(f, (0,), (x,) + extra_arguments(args), dict(kwargs or {}), True,
                             "sparsegrad.sparsity")
    return _convert(matrix, format)


def jvp(f, x, v, args=(), kwargs=None):
    """``f(x)`` and the Jacobian-vector product ``J(x) @ v``, without forming ``J``.

    Every operation of ``f`` propagates one column (the derivative in the
    direction ``v``) instead of the Jacobian, so the cost is a small multiple
    of evaluating ``f``, whatever the sparsity.

    Parameters
    ----------
    f : callable
        ``f(x, *args, **kwargs)``, ordinary numpy code.
    x : array_like
        The point, any shape.
    v : array_like
        The direction: ``x.shape`` or ``(x.size,)``.
    args, kwargs : tuple and dict, optional
        Extra arguments passed to ``f`` unchanged (a non-tuple ``args`` is one
        argument, as in ``scipy.optimize``).

    Returns
    -------
    value : ndarray
        ``f(x)``.
    derivative : ndarray
        ``J(x) @ v.ravel()``, reshaped to the shape of ``value``.

    Raises
    ------
    ValueError
        If ``v`` does not match ``x``.
    TypeError
        For a complex ``v`` with a real ``x`` (take the real and imaginary
        parts of ``v`` separately), a non-numeric ``v``, or a forward value
        as ``x`` (nested differentiation is not supported: pass its
        ``.value``).

    Examples
    --------
    >>> import numpy as np
    >>> value, derivative = jvp(lambda x: x ** 2, np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    >>> derivative
    array([2., 4.])
    """
    array = forward._seed_array(x, "sparsegrad.jvp")
    backend = _backend.of(array)
    xp = backend.xp
    if isinstance(v, _forward_value):
        raise TypeError("sparsegrad.jvp: v is a forward value; the direction is a constant "
                        "(pass v.value)")
    direction = xp.asarray(v)
    if direction.dtype.kind not in "biufc":
        # (astype(float64) would turn None into nan and fail on strings with an
        # unrelated message)
        raise TypeError("sparsegrad.jvp: v has dtype %s; the direction must be numbers"
                        % direction.dtype)
    if direction.shape not in (array.shape, (array.size,)):
        raise ValueError("sparsegrad.jvp: v has shape %s; expected x's shape %s or (%d,)"
                         % (direction.shape, array.shape, array.size))
    if np.iscomplexobj(direction) and not np.iscomplexobj(array):
        raise TypeError("sparsegrad.jvp: complex v with a real x; differentiate in the "
                        "directions v.real and v.imag separately")
    if direction.dtype.kind not in "fc":
        direction = direction.astype(np.float64)
    n = array.size
    # the seed's "Jacobian" is the n x 1 column v instead of the identity: every
    # operation then propagates J @ v
    seed = _jacobian.Seed(1, scalar=False, complex=np.iscomplexobj(array),
                          pattern_only=False, backend=backend)
    column = _jacobian.CSR((n, 1), xp.arange(n + 1, dtype=_jacobian.INDEX_DTYPE),
                           xp.zeros(n, dtype=_jacobian.INDEX_DTYPE),
                           direction.astype(np.result_type(direction.dtype, array.dtype))
                           .reshape(-1))
    x_forward = _make(array, _jacobian.Jacobian(seed, n, matrix=column))
    result, J = _output(f(x_forward, *extra_arguments(args), **dict(kwargs or {})),
                        "sparsegrad.jvp")
    if J is None:
        return result, xp.zeros(result.shape, _jacobian.matrix_dtype(seed, result.dtype))
    if J.seed is not seed:
        raise ValueError("sparsegrad.jvp: the result does not come from x "
                         "(was another seed() used inside the function?)")
    product = _jacobian.to_scipy(J, _jacobian.matrix_dtype(seed, result.dtype)).toarray()
    return result, product.reshape(result.shape)
