"""Property-based tests: random numpy programs, checked against complex-step differences.

A program is a random composition of 3-8 steps on an input of random shape
(1-d to 3-d, small): smooth bounded unary functions, binary ufuncs with
constants or earlier intermediate results (broadcast-compatible), slicing and
fancy indexing, reshape/transpose/flip/roll, reductions, concatenate/stack,
``np.where`` with a constant mask and ``np.maximum``/``np.minimum``.

Every step is complex-safe (numpy orders complex numbers by their real part
first, so ``maximum`` selects like the real function does), hence the reference
Jacobian comes from complex-step differences: exact to rounding, and exactly
zero where an output does not depend on an input.  That makes the pattern
checks exact too.  Input values come from a numpy generator seeded by
hypothesis, so hypothesis shrinks the program's structure, not the numbers,
and cannot steer values onto the kinks of ``maximum``.
"""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from sparsegrad import _backend, forward
from sparsegrad.testing import numerical_jacobian

from device_check import DEVICES, assert_matches_cpu, namespace, on_host

MAX_SIZE = 32

UNARY = {
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "arctan": np.arctan,
    "negative": np.negative,
    "square": np.square,
    "log1p(v*v)": lambda v: np.log1p(v * v),
    "sqrt(v*v+1)": lambda v: np.sqrt(v * v + 1.0),
    "v/(1+v*v)": lambda v: v / (1.0 + v * v),
    "exp(tanh)": lambda v: np.exp(np.tanh(v)),
}

BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "maximum": np.maximum, "minimum": np.minimum}


class Program:
    """A list of ``(description, step)``; ``step(current, history) -> next``."""

    def __init__(self, x0, steps):
        self.x0 = x0
        self.steps = steps

    def __call__(self, x):
        history = [x]
        current = x
        for _, step in self.steps:
            current = step(current, history)
            history.append(current)
        return current

    def __repr__(self):
        return "Program(shape=%s, steps=[%s])" % (
            self.x0.shape, "; ".join(desc for desc, _ in self.steps))


def _here(obj, like):
    """A host constant (array, or index tuple holding arrays) where ``like`` lives.

    Programs are built on the host; run on a device (the fake device below),
    their constants must be there too, as CuPy code would create them.
    """
    array = like.value if isinstance(like, forward.value) else like
    backend = _backend.of(array)
    if backend is _backend.CPU:
        return obj
    if isinstance(obj, tuple):
        return tuple(_here(item, like) for item in obj)
    if isinstance(obj, np.ndarray) and obj.ndim > 0:
        return backend.xp.asarray(obj)
    return obj


def _const(rng, shape):
    return rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def _fits(small, shape):
    """``small`` broadcasts against ``shape`` giving ``shape``."""
    try:
        return np.broadcast_shapes(small, shape) == tuple(shape)
    except ValueError:
        return False


def _shapes_into(shape):
    """Constant shapes that broadcast against ``shape`` without changing it."""
    out = [shape, ()]
    out += [shape[k:] for k in range(1, len(shape))]
    out += [shape[:j] + (1,) + shape[j + 1:] for j in range(len(shape))]
    return out


# ---- step builders: (draw, rng, current, history) -> (description, step) ------

def _unary(draw, rng, cur, hist):
    name = draw(st.sampled_from(sorted(UNARY)))
    return name, lambda c, h: UNARY[name](c)


def _binary_const(draw, rng, cur, hist):
    name = draw(st.sampled_from(sorted(BINARY) + ["divide"]))
    shape = draw(st.sampled_from(_shapes_into(cur.shape)))
    const = _const(rng, shape)
    if shape == () and draw(st.booleans()):
        const = float(const)
    if name == "divide":
        return "v / const%s" % (shape,), lambda c, h: c / _here(const, c)
    op = BINARY[name]
    if draw(st.booleans()):
        return "%s(const%s, v)" % (name, shape), lambda c, h: op(_here(const, c), c)
    return "%s(v, const%s)" % (name, shape), lambda c, h: op(c, _here(const, c))


def _binary_hist(draw, rng, cur, hist):
    choices = [j for j, h in enumerate(hist) if _fits(h.shape, cur.shape)]
    j = draw(st.sampled_from(choices))
    name = draw(st.sampled_from(sorted(BINARY)))
    op = BINARY[name]
    if draw(st.booleans()):
        return "%s(h[%d], v)" % (name, j), lambda c, h: op(h[j], c)
    return "%s(v, h[%d])" % (name, j), lambda c, h: op(c, h[j])


def _index(draw, rng, cur, hist):
    kind = draw(st.sampled_from(["slice", "int", "intarray", "mask", "ellipsis-int", "none"]
                                if cur.ndim < 4 else ["slice", "int", "intarray", "mask"]))
    axis = draw(st.integers(0, cur.ndim - 1))
    n = cur.shape[axis]
    lead = (slice(None),) * axis
    if kind == "slice":
        step = draw(st.sampled_from([1, 2, -1, -2]))
        start = draw(st.one_of(st.none(), st.integers(-n - 1, n)))
        stop = draw(st.one_of(st.none(), st.integers(-n - 1, n)))
        s = slice(start, stop, step)
        if len(range(*s.indices(n))) == 0:
            s = slice(None, None, step)
        index = lead + (s,)
    elif kind == "int":
        index = lead + (draw(st.integers(-n, n - 1)),)
    elif kind == "intarray":
        index = lead + (rng.integers(-n, n, size=draw(st.integers(1, 5))),)
    elif kind == "mask":
        mask = rng.random(cur.shape) < 0.6
        mask.flat[rng.integers(cur.size)] = True
        index = mask
    elif kind == "ellipsis-int":
        index = (Ellipsis, draw(st.integers(-cur.shape[-1], cur.shape[-1] - 1)))
    else:
        index = (slice(None),) * draw(st.integers(0, cur.ndim)) + (None,)
    return "v[%r]" % (index,), lambda c, h: c[_here(index, c)]


def _factor_shape(draw, size):
    ndim = draw(st.integers(1, 3))
    dims = []
    rest = size
    for _ in range(ndim - 1):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = draw(st.sampled_from(divisors))
        dims.append(d)
        rest //= d
    return tuple(dims) + (rest,)


def _reshape(draw, rng, cur, hist):
    kind = draw(st.sampled_from(["reshape", "reshape-method", "ravel"]))
    if kind == "ravel":
        return "ravel", lambda c, h: np.ravel(c)
    shape = _factor_shape(draw, cur.size)
    if draw(st.booleans()) and len(shape) > 1:
        shape = (-1,) + shape[1:]
    if kind == "reshape":
        return "np.reshape%s" % (shape,), lambda c, h: np.reshape(c, shape)
    return "v.reshape%s" % (shape,), lambda c, h: c.reshape(shape)


def _permute(draw, rng, cur, hist):
    kind = draw(st.sampled_from(["transpose", "T", "flip", "roll", "moveaxis"]))
    if kind == "transpose":
        perm = tuple(int(p) for p in rng.permutation(cur.ndim))
        return "transpose%s" % (perm,), lambda c, h: np.transpose(c, perm)
    if kind == "T":
        return "v.T", lambda c, h: c.T
    axis = draw(st.integers(-cur.ndim, cur.ndim - 1))
    if kind == "flip":
        return "flip(axis=%d)" % axis, lambda c, h: np.flip(c, axis)
    if kind == "moveaxis":
        dest = draw(st.integers(-cur.ndim, cur.ndim - 1))
        return "moveaxis(%d, %d)" % (axis, dest), lambda c, h: np.moveaxis(c, axis, dest)
    shift = draw(st.integers(-3, 3))
    if draw(st.booleans()):
        return "roll(%d)" % shift, lambda c, h: np.roll(c, shift)
    return "roll(%d, axis=%d)" % (shift, axis), lambda c, h: np.roll(c, shift, axis=axis)


def _reduce(draw, rng, cur, hist):
    name = draw(st.sampled_from(["sum", "mean"]))
    func = getattr(np, name)
    axis = draw(st.one_of(st.none(), st.integers(-cur.ndim, cur.ndim - 1)))
    keepdims = draw(st.booleans())
    return ("%s(axis=%s, keepdims=%s)" % (name, axis, keepdims),
            lambda c, h: func(c, axis=axis, keepdims=keepdims))


def _join(draw, rng, cur, hist):
    same = [j for j, h in enumerate(hist) if h.shape == cur.shape]
    kind = draw(st.sampled_from(["concatenate", "stack"] if cur.ndim else ["stack"]))
    use_hist = draw(st.booleans())
    first = draw(st.booleans())
    if kind == "concatenate":
        axis = draw(st.integers(-cur.ndim, cur.ndim - 1))
        if use_hist:
            j = draw(st.sampled_from(same))
            other = lambda h: h[j]                          # noqa: E731
            desc = "h[%d]" % j
        else:
            shape = list(cur.shape)
            shape[axis] = draw(st.integers(1, 3))
            const = _const(rng, tuple(shape))
            other = lambda h: _here(const, h[0])            # noqa: E731
            desc = "const%s" % (tuple(shape),)
        if first:
            return ("concatenate([v, %s], axis=%d)" % (desc, axis),
                    lambda c, h: np.concatenate([c, other(h)], axis=axis))
        return ("concatenate([%s, v], axis=%d)" % (desc, axis),
                lambda c, h: np.concatenate([other(h), c], axis=axis))
    axis = draw(st.integers(-cur.ndim - 1, cur.ndim))
    if use_hist:
        j = draw(st.sampled_from(same))
        other = lambda h: h[j]                              # noqa: E731
        desc = "h[%d]" % j
    else:
        const = _const(rng, cur.shape)
        other = lambda h: _here(const, h[0])                # noqa: E731
        desc = "const"
    pieces = (lambda c, h: [c, other(h)]) if first else (lambda c, h: [other(h), c])
    return "stack(%s, axis=%d)" % (desc, axis), lambda c, h: np.stack(pieces(c, h), axis=axis)


def _where(draw, rng, cur, hist):
    mask_shape = draw(st.sampled_from(_shapes_into(cur.shape)))
    mask = rng.random(mask_shape) < 0.5
    same = [j for j, h in enumerate(hist) if _fits(h.shape, cur.shape)]
    kind = draw(st.sampled_from(["scalar", "const", "hist"]))
    if kind == "scalar":
        value = float(_const(rng, ()))
        other = lambda h: value                             # noqa: E731
    elif kind == "const":
        const = _const(rng, cur.shape)
        other = lambda h: _here(const, h[0])                # noqa: E731
    else:
        j = draw(st.sampled_from(same))
        other = lambda h: h[j]                              # noqa: E731
    if draw(st.booleans()):
        return "where(mask, v, %s)" % kind, lambda c, h: np.where(_here(mask, c), c, other(h))
    return "where(mask, %s, v)" % kind, lambda c, h: np.where(_here(mask, c), other(h), c)


def _write(draw, rng, cur, hist):
    """A residual assembled by index writes: ``w = zeros; w[key] = v[key] * s;
    w[other] = const`` (a slice, an int or an index array along one axis)."""
    axis = draw(st.integers(0, cur.ndim - 1))
    n = cur.shape[axis]
    lead = (slice(None),) * axis
    kind = draw(st.sampled_from(["slice", "int", "intarray"]))
    if kind == "slice":
        start = draw(st.integers(0, n - 1))
        key = lead + (slice(start, draw(st.integers(start + 1, n))),)
    elif kind == "int":
        key = lead + (draw(st.integers(-n, n - 1)),)
    else:
        key = lead + (rng.permutation(n)[:draw(st.integers(1, n))],)
    other = lead + (draw(st.integers(-n, n - 1)),)
    factor = float(_const(rng, ()))

    def step(c, h):
        w = np.zeros(c.shape, dtype=c.dtype, like=c)
        w[_here(key, c)] = c[_here(key, c)] * factor
        w[other] = 0.5
        return w + c * c
    return "w[%r] = v[...] * %.3g; w[%r] = 0.5; w + v*v" % (key, factor, other), step


def _matrix(draw, rng, cur, hist):
    """``A @ v`` or ``v @ A`` with a constant scipy matrix of a drawn format (1-d
    and 2-d values)."""
    fmt = draw(st.sampled_from(["csr", "csc", "coo", "dia", "bsr"]))
    left = draw(st.booleans())
    n = cur.shape[0] if left else cur.shape[-1]
    m = draw(st.integers(1, 5))
    shape = (m, n) if left else (n, m)
    A = sp.random(*shape, density=0.6, random_state=rng, format=fmt,
                  data_rvs=lambda k: _const(rng, k))
    if left:
        return "A%s(%s) @ v" % (shape, fmt), lambda c, h: A @ c
    return "v @ A%s(%s)" % (shape, fmt), lambda c, h: c @ A


@st.composite
def programs(draw, products=False):
    """Random programs; ``products``: with constant scipy matrix products too
    (host only: scipy matrices meet no device values)."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    x0 = rng.uniform(-1.5, 1.5, shape)
    steps = []
    hist = [x0]
    cur = x0
    for _ in range(draw(st.integers(3, 8))):
        builders = [_unary, _binary_const, _binary_hist, _where]
        if cur.ndim:
            builders += [_index, _permute, _reduce, _write]
        if products and 1 <= cur.ndim <= 2:
            builders.append(_matrix)
        if cur.size <= MAX_SIZE and cur.ndim < 4:
            builders.append(_join)
        builders.append(_reshape)
        builder = draw(st.sampled_from(builders))
        desc, step = builder(draw, rng, cur, hist)
        cur = step(cur, hist)
        steps.append((desc, step))
        hist.append(cur)
        if np.abs(cur).max(initial=0.0) > 20.0:        # keep values moderate
            steps.append(("tanh (guard)", lambda c, h: np.tanh(c)))
            cur = np.tanh(cur)
            hist.append(cur)
    return Program(x0, steps)


def _dense(fv):
    d = fv.dvalue
    return d.toarray() if sp.issparse(d) else np.asarray(d).reshape(fv.value.size, -1)


def _stored(fv, attr="dvalue"):
    m = sp.csr_matrix(getattr(fv, attr))
    return m.indptr.tolist(), m.indices.tolist()


def _stored_mask(fv):
    m = sp.csr_matrix(fv.dvalue)
    mask = np.zeros(m.shape, bool)
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    mask[rows, m.indices] = True
    return mask


# deadline and number of examples come from the profiles in conftest.py
SETTINGS = dict(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(**SETTINGS)
@given(programs(products=True))
def test_random_program(program):
    x0 = program.x0
    expected = program(x0.copy())
    y = program(forward.seed(x0))
    assert isinstance(y, forward.value)
    assert y.value.shape == expected.shape
    assert y.value.dtype == expected.dtype
    assert_allclose(y.value, expected, rtol=1e-12, atol=1e-12)
    ref = numerical_jacobian(program, x0.copy(), method="complex")
    J = _dense(y)
    assert J.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    assert_allclose(J, ref, rtol=1e-9, atol=1e-10 * scale)
    # the stored pattern contains every entry that is not exactly zero
    stored = _stored_mask(y)
    assert not np.any((ref != 0) & ~stored)


@settings(**SETTINGS)
@given(programs(), st.integers(0, 2 ** 32 - 1))
def test_random_program_pattern(program, seed):
    """``seed_sparsity`` gives the pattern of ``seed``, and neither depends on the values."""
    x0 = program.x0
    rng = np.random.default_rng(seed)
    pattern = _stored(program(forward.seed(x0)))
    assert _stored(program(forward.seed_sparsity(x0)), "sparsity") == pattern
    x1 = rng.uniform(-1.5, 1.5, x0.shape)
    assert _stored(program(forward.seed(x1))) == pattern
    xz = np.where(rng.random(x0.shape) < 0.5, 0.0, x1)       # products with zero factors
    assert _stored(program(forward.seed(xz))) == pattern
    y = program(forward.seed_sparsity(xz))
    assert_array_equal(y.value, program(xz.copy()))


def test_product_with_zero_factor_stores_entry():
    x0 = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])

    def f(x):
        return x * x[::-1, ::-1] + np.sin(x)[:, :1] * x

    y = f(forward.seed(x0))
    s = f(forward.seed_sparsity(x0))
    ref = numerical_jacobian(f, x0, method="complex")
    assert_allclose(_dense(y), ref, rtol=1e-14, atol=1e-15)
    structural = numerical_jacobian(f, np.arange(1.0, 7.0).reshape(2, 3), method="complex") != 0
    assert np.array_equal(_stored_mask(y), structural)
    assert _stored(s, "sparsity") == _stored(y)


@pytest.mark.parametrize("device_name", DEVICES)
def test_random_program_on_the_device(device_name):
    """The same programs with the seed on a device (the fake device, which refuses
    host arrays as CuPy does, and CuPy on a GPU): the device path of the forward
    logic (``sparsegrad._backend``) gives the CPU's value and Jacobian, and every
    value stays on the device."""
    device = namespace(device_name)

    @settings(**SETTINGS)
    @given(programs())
    def check(program):
        x0 = program.x0
        expected = program(forward.seed(x0))
        y = program(forward.seed(device.asarray(x0)))
        assert_matches_cpu(y, expected, rtol=1e-12, atol=1e-13, value_rtol=1e-13,
                           value_atol=1e-13, device=device)
        pattern = sp.csr_matrix(
            on_host(program(forward.seed_sparsity(device.asarray(x0))).sparsity))
        assert (pattern.indptr.tolist(), pattern.indices.tolist()) == _stored(expected)

    check()


@settings(**SETTINGS)
@given(programs())
def test_random_program_with_merges_in_threads(program):
    """Every merge of the program split into row ranges on three threads: the
    same Jacobian and pattern, bit for bit, as in one thread."""
    from sparsegrad._fast import compiled
    if compiled is None:
        return  # (the reference kernels have no threads)
    x0 = program.x0
    previous = compiled.get_threads()
    compiled.set_threads(1)
    try:
        expected = sp.csr_matrix(program(forward.seed(x0)).dvalue)
        expected_pattern = _stored(program(forward.seed_sparsity(x0)), "sparsity")
        compiled.set_threads(3)
        compiled._set_parallel_entries(1)
        got = sp.csr_matrix(program(forward.seed(x0)).dvalue)
        got_pattern = _stored(program(forward.seed_sparsity(x0)), "sparsity")
    finally:
        compiled.set_threads(previous)
        compiled._set_parallel_entries(None)
    assert got.indptr.tolist() == expected.indptr.tolist()
    assert got.indices.tolist() == expected.indices.tolist()
    assert_array_equal(got.data, expected.data)
    assert got_pattern == expected_pattern


@settings(**SETTINGS)
@given(programs())
def test_random_program_with_pending_products_equals_eager_products(program):
    """Row factors scaled by vectors stay pairs (d, c) until read
    (sparsegrad._jacobian._times): bit for bit the Jacobian of products formed
    at once."""
    from sparsegrad import _jacobian
    x0 = program.x0
    assert _jacobian.PENDING_PRODUCTS
    got = sp.csr_matrix(program(forward.seed(x0)).dvalue)
    _jacobian.PENDING_PRODUCTS = False
    try:
        expected = sp.csr_matrix(program(forward.seed(x0)).dvalue)
    finally:
        _jacobian.PENDING_PRODUCTS = True
    assert got.indptr.tolist() == expected.indptr.tolist()
    assert got.indices.tolist() == expected.indices.tolist()
    assert_array_equal(got.data, expected.data)


@settings(**SETTINGS)
@given(programs(products=True), st.integers(0, 2 ** 32 - 1))
def test_random_program_repeated_by_merge_plans_equals_merges(program, seed):
    """A program evaluated four times at other points: from the third evaluation
    on its merges go by the plans kept in the structure cache
    (sparsegrad._jacobian._merge_by_plan), bit for bit the Jacobians of merges."""
    from sparsegrad import _jacobian
    rng = np.random.default_rng(seed)
    points = [program.x0 + 0.1 * rng.standard_normal(program.x0.shape) for _ in range(4)]
    got = [sp.csr_matrix(program(forward.seed(x)).dvalue) for x in points]
    _jacobian.MERGE_PLANS = False
    try:
        expected = [sp.csr_matrix(program(forward.seed(x)).dvalue) for x in points]
    finally:
        _jacobian.MERGE_PLANS = True
    for g, e in zip(got, expected):
        assert g.indptr.tolist() == e.indptr.tolist()
        assert g.indices.tolist() == e.indices.tolist()
        assert_array_equal(g.data, e.data)
