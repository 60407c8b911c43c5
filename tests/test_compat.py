"""The 0.0.15 compatibility contract (/work/shared/COMPATIBILITY.md), row by row.

Sections follow the contract: import paths, forward values, functions, and
the 0.0.15 bugs that must stay fixed.  Values and Jacobians are compared with
dense references written out here or with finite differences
(:func:`sparsegrad.testing.check_jacobian`).
"""
import doctest
import operator
import warnings

import numpy as np
import pytest
import scipy.sparse

import sparsegrad
from sparsegrad import forward, functions, base
from sparsegrad import sparsevec as sparsevec_module
from sparsegrad.functions import (where, dot, hstack, stack, branch, apply,
                                  asdifferentiable)
from sparsegrad.sparsevec import sparsevec, sparsesum, sparsesum_bare
from sparsegrad.testing import assert_jacobian_equal, check_jacobian, numerical_jacobian

ELEMENTWISE = ["exp", "log", "sqrt", "abs", "sign", "reciprocal", "square", "sin", "cos",
               "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh",
               "arccosh", "arctanh", "expm1", "log1p"]
FUNCTION_NAMES = ["where", "dot", "sum", "hstack", "stack", "branch", "apply",
                  "asdifferentiable"]
X0 = np.array([0.5, 1.25, 2.0, 3.0])


def star_import(module):
    namespace = {}
    exec("from %s import *" % module, namespace)
    return namespace


def dense(J):
    return np.asarray(J.toarray())


# ==== import paths ====================================================================
def test_version_is_a_string():
    assert isinstance(sparsegrad.version, str) and sparsegrad.version


def test_star_import_of_the_package():
    namespace = star_import("sparsegrad")
    assert namespace["forward"] is forward
    for name in FUNCTION_NAMES:
        assert namespace[name] is getattr(functions, name), name
    assert namespace["sparsesum"] is sparsesum
    assert namespace["sparsesum_bare"] is sparsesum_bare
    assert namespace["version"] == sparsegrad.version
    # the 0.0.15 top-level name sparsevec builds a sparse vector ...
    v = namespace["sparsevec"](3, [0, 2], [1.0, 2.0])
    assert isinstance(v, sparsevec)
    np.testing.assert_array_equal(v.todense(), [1.0, 0.0, 2.0])


def test_sparsevec_module_stays_a_module():
    # ... while the submodule path keeps working in every import form
    import sparsegrad.sparsevec as sv
    assert sv is sparsevec_module
    assert sparsegrad.sparsevec.sparsesum_bare is sparsesum_bare
    assert sv.sparsevec is sparsevec


@pytest.mark.parametrize("how", ["from", "import"])
def test_forward_module_names(how):
    if how == "from":
        from sparsegrad import forward as module
    else:
        import sparsegrad.forward
        module = sparsegrad.forward
    assert module.seed_sparse_gradient is module.seed
    x = module.seed(np.array([1.0, 2.0]))
    assert isinstance(x, module.value)
    assert isinstance(x[0] * 2, module.value)
    assert isinstance(module.seed(1.0), module.value)
    assert isinstance(module.seed_sparsity(np.ones(2)), module.value)
    np.testing.assert_array_equal(module.nvalue(x), [1.0, 2.0])


# The start of 0.0.15's shallow-water tutorial notebook: two star imports, then
# ``forward.seed``, ``dot`` and ``stack`` by their bare names.
SHALLOW_WATER_TUTORIAL = """
from sparsegrad.base import *
from sparsegrad.forward import *
import numpy as np

n = 6
grid_spacing = 1.0 / n
ndof = n * n
idx = np.zeros((n, n), dtype=int)
idx.ravel()[:] = np.arange(ndof)

def deriv_op(axis, p=1, m=-1):
    idx_p1 = np.roll(idx, -p, axis).flatten()
    idx_m1 = np.roll(idx, -m, axis).flatten()
    adx = forward.seed(np.zeros_like(idx.flatten()))
    return ((adx[idx_p1] - adx[idx_m1]) / ((p - m) * grid_spacing)).dvalue

d_dx_mat, d_dy_mat = deriv_op(0), deriv_op(1)
d_dx = lambda x: dot(d_dx_mat, x)
d_dy = lambda x: dot(d_dy_mat, x)
g = 1

def residuals(x, xt):
    eta, u, v = x[:ndof], x[ndof:2 * ndof], x[2 * ndof:]
    deta_dt = -d_dx(eta * u) - d_dy(eta * v)
    du_dt = (deta_dt * u - d_dx(eta * u**2 + 1. / 2 * g * eta**2) - d_dy(eta * u * v)) / eta
    dv_dt = (deta_dt * v - d_dx(eta * u * v) - d_dy(eta * v**2 + 1. / 2 * g * eta**2)) / eta
    return xt - stack(deta_dt, du_dt, dv_dt)
"""


def test_forward_star_import_binds_forward():
    # 0.0.15's sparsegrad.forward was a package with a submodule of the same name
    namespace = star_import("sparsegrad.forward")
    assert namespace["forward"] is forward
    for name in ["seed", "seed_sparse_gradient", "seed_sparsity", "value", "nvalue"]:
        assert namespace[name] is getattr(forward, name), name


def test_shallow_water_tutorial_runs_unchanged():
    namespace = {}
    exec(SHALLOW_WATER_TUTORIAL, namespace)
    residuals, ndof = namespace["residuals"], namespace["ndof"]
    rng = np.random.default_rng(3)
    xold = np.concatenate([1.0 + 0.1 * rng.random(ndof), 0.1 * rng.random(2 * ndof)])
    x = xold + 0.01 * rng.random(3 * ndof)
    dt = 0.005

    def plain(x):
        return residuals(x, (x - xold) / dt)

    adx = forward.seed(x)
    adf = residuals(adx, (adx - xold) / dt)
    np.testing.assert_array_equal(adf.value, plain(x))
    J = dense(adf.dvalue)
    h = 1e-6
    columns = [(plain(x + h * e) - plain(x - h * e)) / (2 * h) for e in np.eye(x.size)]
    np.testing.assert_allclose(J, np.array(columns).T, rtol=1e-6, atol=1e-4)


def test_functions_star_import():
    namespace = star_import("sparsegrad.functions")
    for name in FUNCTION_NAMES + ELEMENTWISE:
        assert namespace[name] is getattr(functions, name), name


def test_sparsevec_star_import():
    namespace = star_import("sparsegrad.sparsevec")
    assert namespace["sparsevec"] is sparsevec
    assert namespace["sparsesum"] is sparsesum
    assert namespace["sparsesum_bare"] is sparsesum_bare


def test_base_star_import():
    namespace = star_import("sparsegrad.base")
    for name in ["exp", "log", "sqrt", "where", "dot", "sum", "stack", "branch"]:
        assert namespace[name] is getattr(functions, name), name
    assert callable(namespace["expr"].wrapped_func)
    assert callable(namespace["func"].custom_func)


def test_impl_scipy_is_the_scipy_package():
    from sparsegrad.impl import scipy as imported
    import scipy
    assert imported is scipy
    assert imported.sparse.csr_matrix is scipy.sparse.csr_matrix
    assert imported.sparse.linalg.spsolve is not None


@pytest.mark.parametrize("module", [functions, sparsevec_module, base, sparsegrad])
def test_docstring_examples(module):
    failures, attempted = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert attempted > 0 and failures == 0


# ==== forward values ==================================================================
def test_seed_takes_asarray_and_is_the_identity():
    x = forward.seed([1.0, 2.0, 3.0])
    assert isinstance(x.value, np.ndarray)
    np.testing.assert_array_equal(x.value, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(dense(x.dvalue), np.eye(3))


def test_zero_d_seed_is_a_scalar_seed():
    s = forward.seed(np.float64(2.0))
    assert s.value.shape == ()
    J = (s * 3.0).dvalue
    assert isinstance(J, np.ndarray) and J.shape == () and J == 3.0


def test_dvalue_gradient_sparsity_are_the_jacobian():
    y = forward.seed(X0) ** 2
    for J in (y.dvalue, y.gradient, y.sparsity):
        np.testing.assert_array_equal(dense(J), np.diag(2 * X0))


VECTOR_SEED = forward.seed(X0)
SCALAR_SEED = forward.seed(2.0)


@pytest.mark.parametrize("result, shape", [
    (VECTOR_SEED[1:] * 3.0, (3, 4)),           # vector value, vector seed
    (np.sum(VECTOR_SEED), (1, 4)),             # scalar value, vector seed
    (SCALAR_SEED * np.arange(3.0), (3, 1)),    # vector value, scalar seed
], ids=["vector-vector", "scalar-vector", "vector-scalar"])
def test_jacobian_is_a_csr_matrix(result, shape):
    J = result.dvalue
    assert type(J) is scipy.sparse.csr_matrix
    assert J.shape == shape
    # the matrix class: * is a matrix product, todense().A1 flattens
    product = J * np.ones(shape[1])
    np.testing.assert_allclose(np.asarray(product).ravel(), dense(J).sum(axis=1))
    np.testing.assert_array_equal(J.todense().A1, dense(J).ravel())


def test_jacobian_of_scalar_value_and_scalar_seed_is_0d_array():
    J = (SCALAR_SEED * SCALAR_SEED).dvalue
    assert type(J) is np.ndarray and J.shape == () and J == 4.0


def test_jacobian_vector_seed_values():
    np.testing.assert_array_equal(dense(np.sum(VECTOR_SEED).dvalue), [[1, 1, 1, 1]])
    np.testing.assert_array_equal(dense((SCALAR_SEED * np.arange(3.0)).dvalue),
                                  [[0.0], [1.0], [2.0]])


DTYPES = [np.float32, np.float64, np.longdouble, np.complex128, np.clongdouble]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_jacobian_dtype_follows_value(dtype):
    x0 = np.array([0.5, 1.0, 1.5], dtype=dtype)
    if np.dtype(dtype).kind == "c":
        x0 = x0 + np.array([0.25j, -0.5j, 1j], dtype=dtype)
    x = forward.seed(x0)
    y = x * x[::-1] + np.exp(x)
    assert y.value.dtype == np.dtype(dtype)
    assert y.dvalue.dtype == np.dtype(dtype)
    expected = np.diag(x0[::-1] + np.exp(x0)) + np.diag(x0)[:, ::-1]
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(dense(y.dvalue), expected, rtol=8 * eps)
    s = forward.seed(x0[0])
    assert (s * s).dvalue.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.longdouble, np.int64])
def test_pure_indexing_keeps_a_floating_jacobian(dtype):
    x = forward.seed(np.arange(4).astype(dtype))
    for y in (x[1:], x[np.array([0, 0, 3])], x[2], x[np.array([True, False, True, True])]):
        J = y.dvalue
        expected = np.dtype(dtype) if np.dtype(dtype).kind == "f" else np.dtype(np.float64)
        assert J.dtype == expected
        assert J.dtype.kind == "f"
        np.testing.assert_array_equal(J.data, np.ones(J.nnz))


def test_seed_sparsity_indices_and_indptr():
    x = forward.seed_sparsity(np.ones(4))
    J = (x[1:] * x[:-1]).sparsity
    assert type(J) is scipy.sparse.csr_matrix
    np.testing.assert_array_equal(J.indptr, [0, 2, 4, 6])
    np.testing.assert_array_equal(J.indices, [0, 1, 1, 2, 2, 3])


def test_seed_sparsity_pattern_contains_true_pattern():
    def f(x):
        return np.sin(x[1:]) * x[:-1] + x[0] * x[3] + dot(np.eye(3), x[:3])

    true = dense(f(forward.seed(X0)).dvalue)
    assert_jacobian_equal(f(forward.seed_sparsity(X0)), true, sparsity=True)


# ---- operators ----------------------------------------------------------------------
OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul,
             "/": operator.truediv, "**": operator.pow}
OPERANDS = {
    "int": lambda x: 3,
    "float": lambda x: 1.5,
    "np.float64": lambda x: np.float64(1.5),
    "np.float32": lambda x: np.float32(0.75),
    "0-d array": lambda x: np.array(1.25),
    "array": lambda x: np.linspace(1.0, 2.0, 4),
    "forward": lambda x: 2 + x[::-1],
    "0-d forward": lambda x: np.sum(x) / 4,
}


@pytest.mark.parametrize("other", OPERANDS)
@pytest.mark.parametrize("op", OPERATORS)
@pytest.mark.parametrize("side", ["left", "right"])
def test_binary_operator(op, other, side):
    function, make_other = OPERATORS[op], OPERANDS[other]
    if side == "left":
        result = check_jacobian(lambda x: function(x, make_other(x)), X0)
    else:
        result = check_jacobian(lambda x: function(make_other(x), x), X0)
    assert isinstance(result, forward.value)  # also for ndarray (op) forward


@pytest.mark.parametrize("op", OPERATORS)
def test_operators_with_empty_arrays(op):
    function = OPERATORS[op]
    empty = forward.seed(np.zeros(0))
    part = forward.seed(X0)[:0]
    for y, n in ((function(empty, np.zeros(0)), 0), (function(np.zeros(0), empty), 0),
                 (function(part, np.zeros(0)), 4), (function(np.ones(0), part), 4),
                 (function(part, part), 4), (function(part, 2.0), 4)):
        assert isinstance(y, forward.value)
        assert y.value.shape == (0,)
        assert y.dvalue.shape == (0, n) and y.dvalue.nnz == 0


@pytest.mark.parametrize("unary", [operator.neg, operator.pos, abs],
                         ids=["-x", "+x", "abs(x)"])
def test_unary_operator(unary):
    result = check_jacobian(lambda x: unary(x * np.array([1.0, -1.0, 1.0, -1.0])), X0)
    assert isinstance(result, forward.value)


def test_scalar_forward_broadcasts_against_vectors():
    s = forward.seed(2.0)
    y = s * np.arange(3.0) + s
    np.testing.assert_array_equal(y.value, [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(dense(y.dvalue), [[1.0], [2.0], [3.0]])
    check_jacobian(lambda x: np.sum(x) * x - x[2], X0)


COMPARISONS = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq,
               operator.ne]


@pytest.mark.parametrize("other", ["float", "array", "forward", "0-d forward"])
@pytest.mark.parametrize("op", COMPARISONS, ids=lambda o: o.__name__)
def test_comparisons_return_plain_bools(op, other):
    make_other = OPERANDS[other]
    x = forward.seed(X0)
    for result, expected in ((op(x, make_other(x)), op(X0, make_other(X0))),
                             (op(make_other(x), x), op(make_other(X0), X0))):
        assert type(result) is np.ndarray and result.dtype == np.bool_
        np.testing.assert_array_equal(result, expected)
    s = forward.seed(2.0)
    assert type(op(s, 2.0)) is np.bool_ and op(s, 2.0) == op(2.0, 2.0)
    assert type(op(1.0, s)) is np.bool_ and op(1.0, s) == op(1.0, 2.0)


# ---- indexing -----------------------------------------------------------------------
KEYS = {
    "int": 2, "negative int": -1, "most negative int": -5, "slice": slice(1, 4),
    "reversed slice": slice(None, None, -2), "empty slice": slice(4, 1),
    "empty int array": np.array([], dtype=np.int64), "repeated": np.array([1, 1, 3, 1]),
    "negative array": np.array([-1, -5, 0]), "list": [0, -2],
    "bool array": np.array([True, False, True, False, True]),
}


@pytest.mark.parametrize("key", KEYS.values(), ids=KEYS)
@pytest.mark.parametrize("of", ["seed", "intermediate"])
def test_indexing(key, of):
    x0 = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    x = forward.seed(x0)
    factor = np.arange(1.0, 6.0)
    y = x if of == "seed" else x * factor
    result = y[key]
    np.testing.assert_array_equal(result.value, (x0 if of == "seed" else x0 * factor)[key])
    scaled = np.eye(5) if of == "seed" else np.diag(factor)
    assert result.dvalue.shape == (np.size(result.value), 5)
    np.testing.assert_array_equal(dense(result.dvalue), scaled[key].reshape(-1, 5))


def test_nvalue():
    x = forward.seed(X0)
    assert isinstance(forward.nvalue(x), np.ndarray)
    np.testing.assert_array_equal(forward.nvalue(x * 2), 2 * X0)
    array = np.arange(3.0)
    assert forward.nvalue(array) is array
    listed = forward.nvalue([1, 2])
    assert type(listed) is np.ndarray
    np.testing.assert_array_equal(listed, [1, 2])
    number = forward.nvalue(2.5)
    assert type(number) is np.ndarray and number.shape == () and number == 2.5


# ==== functions =========================================================================
DOMAINS = {"log": [0.5, 1.0, 3.0], "sqrt": [0.25, 1.0, 4.0], "abs": [-2.0, -0.5, 1.5],
           "sign": [-2.0, 0.5, 3.0], "reciprocal": [-2.0, 0.5, 4.0],
           "arcsin": [-0.5, 0.0, 0.7], "arccos": [-0.5, 0.0, 0.7],
           "arctanh": [-0.5, 0.0, 0.7], "arccosh": [1.5, 2.0, 4.0],
           "log1p": [-0.5, 0.0, 2.0]}


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_function(name):
    fn = getattr(functions, name)
    assert fn is getattr(np, name)  # numpy's own ufunc
    x0 = np.array(DOMAINS.get(name, [-1.0, 0.25, 1.5]))
    np.testing.assert_array_equal(fn(x0), getattr(np, name)(x0))
    assert fn(x0[1]) == getattr(np, name)(x0[1])
    result = check_jacobian(fn, x0)
    assert isinstance(result, forward.value)


# ---- where --------------------------------------------------------------------------
@pytest.mark.parametrize("cond", [True, False, np.bool_(True), np.bool_(False),
                                  np.array([True, False, False, True])],
                         ids=["True", "False", "np.True_", "np.False_", "array"])
def test_where(cond):
    a0, b0 = np.arange(4.0), -np.ones(4)
    np.testing.assert_array_equal(where(cond, a0, b0), np.where(cond, a0, b0))
    check_jacobian(lambda x: where(cond, x ** 2, 3 * x[::-1]), X0)
    check_jacobian(lambda x: where(cond, x, 1.0), X0)
    check_jacobian(lambda x: where(cond, 1.0, np.sum(x)), X0)


def test_where_condition_from_values():
    check_jacobian(lambda x: where(x > 1.5, np.exp(x), -x), X0)


def test_where_sparsity_is_the_union_of_branches():
    x = forward.seed_sparsity(np.ones(3))
    J = where(np.array([True, False, True]), x, x[::-1]).sparsity
    np.testing.assert_array_equal(dense(J), [[1, 0, 1], [0, 1, 0], [1, 0, 1]])


# ---- dot ----------------------------------------------------------------------------
MATRIX = np.array([[1.0, 0.0, 2.0, 0.0], [0.0, 3.0, 0.0, -1.0], [4.0, 0.0, 0.0, 5.0]])
MATRICES = {"csr_matrix": scipy.sparse.csr_matrix(MATRIX),
            "csc_matrix": scipy.sparse.csc_matrix(MATRIX),
            "csr_array": scipy.sparse.csr_array(MATRIX), "ndarray": MATRIX}


@pytest.mark.parametrize("kind", MATRICES)
def test_dot(kind):
    A = MATRICES[kind]
    numeric = dot(A, X0)
    assert type(numeric) is np.ndarray
    np.testing.assert_allclose(numeric, MATRIX @ X0)
    y = dot(A, forward.seed(X0))
    np.testing.assert_allclose(y.value, MATRIX @ X0)
    assert_jacobian_equal(y, MATRIX)
    z = dot(A, forward.seed(X0) ** 2)
    assert_jacobian_equal(z, MATRIX @ np.diag(2 * X0))


# ---- sum ----------------------------------------------------------------------------
def test_sum():
    assert functions.sum([1.0, 2.5]) == 3.5
    np.testing.assert_array_equal(functions.sum(np.ones((2, 3))), 6.0)
    y = functions.sum(forward.seed(X0) ** 2)
    assert y.value.shape == () and y.value == np.sum(X0 ** 2)
    assert y.dvalue.shape == (1, 4)
    np.testing.assert_allclose(dense(y.dvalue), [2 * X0])
    s = forward.seed(2.0)
    assert functions.sum(s * np.ones(3)).dvalue == 3.0
    check_jacobian(lambda x: functions.sum(np.sin(x) * x[::-1]), X0)


# ---- hstack and stack -------------------------------------------------------------------
def test_hstack_mixes_forward_numeric_scalar_and_empty_pieces():
    x = forward.seed(X0)
    pieces = [x[1], np.zeros(0), 5.0, x[2:], x[:0], np.array([7.0, 8.0]), np.sum(x)]
    y = hstack(pieces)
    np.testing.assert_array_equal(y.value, [1.25, 5.0, 2.0, 3.0, 7.0, 8.0, np.sum(X0)])
    np.testing.assert_array_equal(dense(y.dvalue), [
        [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0],
        [0, 0, 0, 0], [1, 1, 1, 1]])
    z = stack(*pieces)
    np.testing.assert_array_equal(z.value, y.value)
    np.testing.assert_array_equal(dense(z.dvalue), dense(y.dvalue))
    g = hstack(piece for piece in pieces)  # a generator, as 0.0.15 clients pass
    np.testing.assert_array_equal(dense(g.dvalue), dense(y.dvalue))


def test_hstack_jacobian_by_differences():
    check_jacobian(lambda x: hstack([x[::-1] ** 2, 1.0, np.sum(x), x[:0]]), X0)
    check_jacobian(lambda x: stack(x[0] * x[1], x, np.exp(x[2:])), X0)


def test_hstack_of_numbers_is_numpy():
    np.testing.assert_array_equal(hstack([1, np.array([2, 3]), np.zeros(0, int)]),
                                  [1, 2, 3])
    np.testing.assert_array_equal(stack(1.5, np.array([2.0])), [1.5, 2.0])
    assert hstack([]).shape == (0,)
    assert stack().shape == (0,)


def test_hstack_refuses_nd_pieces():
    with pytest.raises(ValueError, match="1-d"):
        hstack([np.ones((2, 2))])


# ---- branch -------------------------------------------------------------------------
@pytest.mark.parametrize("cond, expected", [(True, "t"), (False, "f"),
                                            (np.bool_(True), "t"), (np.array(False), "f")])
def test_branch_scalar_condition_calls_with_none(cond, expected):
    calls = []
    result = branch(cond, lambda arg: calls.append(("t", arg)) or "t",
                    lambda arg: calls.append(("f", arg)) or "f")
    assert result == expected and calls == [(expected, None)]


def test_branch_array_condition_computes_only_selected_elements():
    x0 = np.array([4.0, -1.0, 9.0, -3.0])
    x = forward.seed(x0)
    seen = {}

    def positive(i):
        seen["true"] = i
        return np.sqrt(x[i])

    def negative(i):
        seen["false"] = i
        return 2.0 * x[i]

    with np.errstate(all="raise"):  # sqrt never sees a negative element
        y = branch(x.value > 0, positive, negative)
    np.testing.assert_array_equal(seen["true"], [0, 2])
    np.testing.assert_array_equal(seen["false"], [1, 3])
    np.testing.assert_allclose(y.value, [2.0, -2.0, 3.0, -6.0])
    np.testing.assert_allclose(dense(y.dvalue), np.diag([0.25, 2.0, 1.0 / 6.0, 2.0]))


def test_branch_scalars_broadcast_and_numeric_results():
    x = forward.seed(X0)
    cond = np.array([True, False, True, False])
    y = branch(cond, lambda i: 1.0, lambda i: x[i] * 3.0)
    np.testing.assert_array_equal(y.value, [1.0, 3.75, 1.0, 9.0])
    np.testing.assert_array_equal(dense(y.dvalue), [[0, 0, 0, 0], [0, 3, 0, 0],
                                                    [0, 0, 0, 0], [0, 0, 0, 3]])
    z = branch(cond, lambda i: np.sum(x), lambda i: 0.0)  # a 0-d forward value broadcast
    np.testing.assert_array_equal(dense(z.dvalue), [[1, 1, 1, 1], [0, 0, 0, 0],
                                                    [1, 1, 1, 1], [0, 0, 0, 0]])
    ints = branch(cond, lambda i: 1, lambda i: np.arange(4)[i])
    assert type(ints) is np.ndarray and ints.dtype.kind == "i"
    np.testing.assert_array_equal(ints, [1, 1, 1, 3])
    mixed = branch(cond, lambda i: 0.5, lambda i: 2)
    assert mixed.dtype == np.float64
    np.testing.assert_array_equal(mixed, [0.5, 2.0, 0.5, 2.0])


def test_branch_unselected_function_is_not_called():
    def never(i):
        raise AssertionError("called for an empty selection")
    y = branch(np.ones(3, dtype=bool), lambda i: forward.seed(X0)[i], never)
    np.testing.assert_array_equal(y.value, X0[:3])
    assert branch(np.zeros(0, dtype=bool), never, never).shape == (0,)


def test_branch_nd_condition_passes_index_tuples():
    x0 = np.arange(6.0).reshape(2, 3)
    x = forward.seed(x0)
    cond = x0 % 2 == 0
    y = branch(cond, lambda i: x[i] ** 2, lambda i: -x[i])
    assert y.shape == (2, 3)
    np.testing.assert_array_equal(y.value, np.where(cond, x0 ** 2, -x0))
    np.testing.assert_array_equal(dense(y.dvalue),
                                  np.diag(np.where(cond, 2 * x0, -1.0).ravel()))


def test_branch_jacobian_by_differences():
    check_jacobian(lambda x: branch(x > 1.5, lambda i: np.log(x[i]) * x[0],
                                    lambda i: x[i] ** 3), X0)


# ---- asdifferentiable and apply --------------------------------------------------------
def _product_partials(args, value):
    a, b = args
    return [lambda: b ** 2, lambda: 2 * a * b]


PRODUCT = asdifferentiable(lambda a, b: a * b ** 2, _product_partials)
PRODUCT_F_DF = asdifferentiable(
    f_df=lambda args: (args[0] * args[1] ** 2, _product_partials(args, None)))


@pytest.mark.parametrize("fn", [PRODUCT, PRODUCT_F_DF], ids=["f+deriv", "f_df"])
@pytest.mark.parametrize("arguments", [
    lambda x: (x, x[::-1]),            # two forward arguments
    lambda x: (x, 3.0),                # forward and numeric scalar
    lambda x: (np.linspace(1, 2, 4), x),
    lambda x: (np.sum(x), x),          # 0-d forward broadcast against a vector
    lambda x: (x[1], 2.0),             # 0-d result
], ids=["forward-forward", "forward-scalar", "array-forward", "scalar-forward", "0-d"])
def test_apply(fn, arguments):
    result = check_jacobian(lambda x: apply(fn, arguments(x)), X0)
    assert isinstance(result, forward.value)


def test_apply_numeric_arguments_give_the_plain_value():
    def refuse(args, value):
        raise AssertionError("derivatives requested for numeric arguments")
    fn = asdifferentiable(lambda a, b: a * b ** 2, refuse)
    assert apply(fn, (2.0, 3.0)) == 18.0
    np.testing.assert_array_equal(apply(fn, (np.arange(3.0), 2.0)), [0.0, 4.0, 8.0])
    assert apply(PRODUCT_F_DF, (2.0, 3.0)) == 18.0


def test_apply_calls_only_partials_of_forward_arguments():
    called = []

    def deriv(args, value):
        return [lambda: called.append(0) or 2.0, lambda: called.append(1) or 5.0]
    fn = asdifferentiable(lambda a, b: 2 * a + 5 * b, deriv)
    y = apply(fn, (forward.seed(X0), np.ones(4)))
    assert called == [0]
    np.testing.assert_array_equal(dense(y.dvalue), 2 * np.eye(4))


def test_apply_partials_scalar_or_array():
    scalar = asdifferentiable(lambda a: 3 * a + 1, lambda args, value: [lambda: 3.0])
    array = asdifferentiable(np.exp, lambda args, value: [lambda: value])
    check_jacobian(lambda x: apply(scalar, (x,)), X0)
    check_jacobian(lambda x: apply(array, (x[::-1],)), X0)


def test_apply_checks_the_number_of_partials():
    fn = asdifferentiable(lambda a, b: a + b, lambda args, value: [lambda: 1.0])
    with pytest.raises(ValueError, match="1 partial derivatives for 2 arguments"):
        apply(fn, (forward.seed(X0), 1.0))


def test_expr_wrapped_func_and_func_custom_func():
    fn = base.func.custom_func(lambda a, b: a * b ** 2, _product_partials)
    wrapped = base.expr.wrapped_func(fn)
    assert wrapped(2.0, 3.0) == 18.0
    result = check_jacobian(lambda x: wrapped(x, x[::-1] + 1), X0)
    assert isinstance(result, forward.value)


# ---- sparse vectors -------------------------------------------------------------------
def _terms(x):
    return [(np.array([0, 1, 1]), x[:3] ** 2), (3, x[0]), (np.array([3, 0]), 2.0),
            (np.array([2, -1]), x[1:3] * x[0]), (np.array([], dtype=int), x[:0])]


def test_sparsesum_bare_values():
    F = sparsesum_bare(4, _terms(X0))
    assert type(F) is np.ndarray
    expected = np.zeros(4)
    np.add.at(expected, [0, 1, 1, 3, 3, 0, 2, 3], np.concatenate(
        [X0[:3] ** 2, [X0[0], 2.0, 2.0], X0[1:3] * X0[0]]))
    np.testing.assert_allclose(F, expected)


def test_sparsesum_bare_forward():
    y = check_jacobian(lambda x: sparsesum_bare(4, _terms(x)), X0)
    assert isinstance(y, forward.value)
    x = forward.seed(X0)
    g = sparsesum_bare(5, ((np.array([i, i + 1]), x[i] * np.array([1.0, -1.0]))
                           for i in range(4)))  # a generator of terms
    np.testing.assert_array_equal(dense(g.dvalue), [
        [1, 0, 0, 0], [-1, 1, 0, 0], [0, -1, 1, 0], [0, 0, -1, 1], [0, 0, 0, -1]])


def test_sparsesum_bare_forward_if_any_term_is():
    x = forward.seed(X0)
    y = sparsesum_bare(3, [(0, 1.0), (np.array([1, 2]), np.ones(2)), (2, x[3])])
    assert isinstance(y, forward.value)
    np.testing.assert_array_equal(y.value, [1.0, 1.0, 4.0])
    np.testing.assert_array_equal(dense(y.dvalue), [[0, 0, 0, 0], [0, 0, 0, 0],
                                                    [0, 0, 0, 1]])


def test_sparsesum_bare_without_terms():
    for terms in ([], iter(())):
        F = sparsesum_bare(3, terms)
        assert type(F) is np.ndarray and F.dtype == np.float64
        np.testing.assert_array_equal(F, np.zeros(3))
    idx, v = sparsesum_bare(3, [], return_sparse=True)
    assert idx.shape == (0,) and v.shape == (0,)


def test_sparsesum_bare_return_sparse():
    idx, v = sparsesum_bare(10, [(np.array([7, 2, 7]), np.array([1.0, 2.0, 3.0])),
                                 (-1, 0.5)], return_sparse=True)
    np.testing.assert_array_equal(idx, [2, 7, 9])
    np.testing.assert_array_equal(v, [2.0, 4.0, 0.5])
    x = forward.seed(X0)
    idx, v = sparsesum_bare(10, [(np.array([7, 2, 7]), x[:3]), (9, 1.0)],
                            return_sparse=True)
    np.testing.assert_array_equal(idx, [2, 7, 9])
    np.testing.assert_array_equal(v.value, [1.25, 2.5, 1.0])
    np.testing.assert_array_equal(dense(v.dvalue), [[0, 1, 0, 0], [1, 0, 1, 0],
                                                    [0, 0, 0, 0]])


def test_sparsesum_bare_refuses_bad_indices():
    with pytest.raises(IndexError):
        sparsesum_bare(3, [(np.array([0, 3]), 1.0)])
    with pytest.raises(TypeError):
        sparsesum_bare(3, [(np.array([0.5]), 1.0)])


def test_sparsevec_and_sparsesum():
    x = forward.seed(X0)
    piece = x[1:3]
    v = sparsevec(4, np.array([0, 2]), piece)
    assert v.n == 4 and v.v is piece
    np.testing.assert_array_equal(v.idx, [0, 2])
    total = sparsesum([v, sparsevec(4, 0, 1.0), sparsevec(4, [3, 3], x[:2])])
    np.testing.assert_array_equal(total.value, [2.25, 0.0, 2.0, 1.75])
    np.testing.assert_array_equal(dense(total.dvalue), [[0, 1, 0, 0], [0, 0, 0, 0],
                                                        [0, 0, 1, 0], [1, 1, 0, 0]])
    numeric = sparsesum([sparsevec(3, 0, 1.0), sparsevec(3, [0, 2], [1.0, 5.0])])
    np.testing.assert_array_equal(numeric, [2.0, 0.0, 5.0])
    with pytest.raises(ValueError):
        sparsesum([sparsevec(3, 0, 1.0), sparsevec(4, 0, 1.0)])
    with pytest.raises(ValueError):
        sparsesum([])


@pytest.mark.parametrize("f", [
    lambda x: hstack([x[1] * x[2], 1.0, x[::-1]]),
    lambda x: branch(forward.nvalue(x) > 1.0, lambda i: x[i] * x[0], lambda i: x[i][::-1]),
    lambda x: apply(PRODUCT, (x, x[::-1])),
    lambda x: sparsesum_bare(5, [(np.array([0, 4]), x[:2]), (np.array([4, 1]), x[2:] ** 2)]),
    lambda x: dot(scipy.sparse.csr_matrix(MATRIX), x * x[0]),
    lambda x: functions.sum(x[1:] * x[:-1]),
], ids=["hstack", "branch", "apply", "sparsesum_bare", "dot", "sum"])
def test_sparsity_mode_pattern_contains_the_jacobian(f):
    true = dense(np.atleast_1d(f(forward.seed(X0))).dvalue)  # (1, n) for sum
    assert_jacobian_equal(f(forward.seed_sparsity(X0)), true, sparsity=True)


# ==== complex seeds on the real axis ===================================================
# Real-only functions (abs, sign, conj, the real part, casts to a real dtype...) of a
# complex seed's values on the real axis have the derivative of the real function's
# analytic continuation there, the derivative of the real function itself; off the
# axis they have none and raise, naming the numpy function.
COMPLEX_DTYPES = [np.complex128, np.clongdouble]
#: points on the real axis, none a multiple of pi (the kinks of arccos(cos(x)))
AXIS_POINTS = np.array([0.5, -1.25, 2.0, -3.0, 4.0])

#: 0.0.15's own cases, and their derivatives on the real axis as dense formulas
SIGN_CASES = {
    "abs(x)": (lambda x: abs(x), np.sign),
    "functions.abs(x)": (lambda x: functions.abs(x), np.sign),
    "sqrt(x*x)": (lambda x: functions.sqrt(x * x), np.sign),
    # d arccos(cos x) / dx = sin x / |sin x|
    "arccos(cos(x)) - abs(x)": (lambda x: functions.arccos(functions.cos(x)) - abs(x),
                                lambda x: np.sign(np.sin(x)) - np.sign(x)),
}


def _complex_dtype_id(dtype):
    return np.dtype(dtype).name


def _jacobian_dtype(value_dtype):
    """A complex seed's Jacobian: complex, in the precision of the value."""
    return np.promote_types(value_dtype, np.complex64)


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES, ids=_complex_dtype_id)
@pytest.mark.parametrize("case", SIGN_CASES)
def test_complex_seed_on_the_real_axis_differentiates_abs_as_sign(case, dtype):
    f, derivative = SIGN_CASES[case]
    x0 = AXIS_POINTS.astype(dtype)
    y = f(forward.seed(x0))
    expected_value = f(x0)
    assert y.value.dtype == expected_value.dtype
    np.testing.assert_array_equal(y.value, expected_value)
    J = y.dvalue
    assert type(J) is scipy.sparse.csr_matrix and J.dtype == np.dtype(dtype)
    expected = np.diag(derivative(AXIS_POINTS))
    # (exact to rounding: arccos' = -1/sqrt(1 - c^2) loses digits where |c| is near 1)
    np.testing.assert_allclose(dense(J), expected, rtol=0, atol=100 * np.finfo(dtype).eps)
    # the formula itself, against differences of the real function
    np.testing.assert_allclose(expected, numerical_jacobian(f, AXIS_POINTS, "central"),
                               atol=1e-8)


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES, ids=_complex_dtype_id)
@pytest.mark.parametrize("case", SIGN_CASES)
def test_complex_scalar_seed_on_the_real_axis(case, dtype):
    f, derivative = SIGN_CASES[case]
    for point in AXIS_POINTS:
        x0 = np.array(point, dtype=dtype)
        y = f(forward.seed(x0))
        np.testing.assert_array_equal(y.value, f(x0))
        J = y.dvalue
        assert type(J) is np.ndarray and J.shape == () and J.dtype == np.dtype(dtype)
        np.testing.assert_allclose(J, derivative(point), rtol=0,
                                   atol=100 * np.finfo(dtype).eps)


#: real-only functions of every kind; their derivatives on the real axis are those
#: of the real functions, found by central differences of these at real points
REAL_ONLY = {
    "sign": lambda x: np.sign(x) + x,
    "conj": lambda x: np.conj(x) * x,
    "real": lambda x: np.real(x) * x,
    ".real": lambda x: x.real ** 3,
    "imag": lambda x: np.imag(x) + 2 * x,
    ".imag": lambda x: x.imag * x + x,
    "abs**3": lambda x: np.abs(x) ** 3,
    "abs*x": lambda x: np.absolute(x) * x,
    "astype(float)": lambda x: x.astype(np.float64) * x,
    "sum(dtype=float)": lambda x: np.sum(x * x, dtype=np.float64),
    "multiply(dtype=float)": lambda x: np.multiply(x, x, dtype=np.float64,
                                                   casting="unsafe"),
    "einsum(dtype=float)": lambda x: np.einsum("i,i->i", x, x, dtype=np.float64,
                                               casting="unsafe"),
    "norm": lambda x: np.linalg.norm(x) * x,
    "vdot": lambda x: np.vdot(x, x[::-1]),
    "hypot(abs)": lambda x: np.hypot(abs(x), 1.5),
    "arctan2(real)": lambda x: np.arctan2(x.real, 2.0),
    "fabs(real)": lambda x: np.fabs(x.real) * x,
    "copysign(real)": lambda x: np.copysign(x.real, -1.0),
    "heaviside(real)": lambda x: np.heaviside(x.real, 0.5) * x,
    # (no jump at the points: central differences are the oracle)
    "floor(abs)": lambda x: np.floor(abs(x) * 1.5 + 0.1) + x,
    "rint": lambda x: np.rint(x * 1.5 + 0.1) + x * x,
    "maximum": lambda x: np.maximum(x, 0.75),
    "fmin(abs)": lambda x: np.fmin(abs(x), 2.5),
    "clip": lambda x: np.clip(x, -2.0, 3.0),
    "max": lambda x: np.max(x * x[::-1]),
    "min": lambda x: np.min(x),
    "where(real > 0)": lambda x: where(x.real > 0, x, -x * x),
}


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES, ids=_complex_dtype_id)
@pytest.mark.parametrize("case", REAL_ONLY)
def test_real_only_functions_of_a_complex_seed_on_the_real_axis(case, dtype):
    f = REAL_ONLY[case]
    x0 = AXIS_POINTS.astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        y = f(forward.seed(x0))
        expected_value = f(x0)
    assert y.value.dtype == expected_value.dtype
    np.testing.assert_array_equal(y.value, expected_value)
    J = np.atleast_1d(y).dvalue
    assert J.dtype == _jacobian_dtype(y.value.dtype)
    np.testing.assert_allclose(dense(J), numerical_jacobian(f, AXIS_POINTS, "central")
                               .reshape(J.shape), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES, ids=_complex_dtype_id)
def test_complex_seed_of_a_value_moved_onto_the_real_axis(dtype):
    # the values where the function is applied decide, not the seed's
    x0 = np.array([0.5 + 0.25j, -2.0 + 0.25j], dtype=dtype)
    y = abs(forward.seed(x0) - 0.25j)
    np.testing.assert_array_equal(dense(y.dvalue), np.diag([1, -1]))
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="numpy.absolute"):
        abs(forward.seed(x0))


OFF_AXIS = {
    "abs": (lambda x: abs(x), "numpy.absolute"),
    "np.abs": (lambda x: np.abs(x), "numpy.absolute"),
    "functions.abs": (lambda x: functions.abs(x), "numpy.absolute"),
    "sqrt(x*x) - abs(x)": (lambda x: functions.sqrt(x * x) - abs(x), "numpy.absolute"),
    "sign": (lambda x: np.sign(x), "numpy.sign"),
    "conj": (lambda x: np.conj(x), "numpy.conjugate"),
    "real": (lambda x: np.real(x), "numpy.real"),
    ".real": (lambda x: x.real, "numpy.real"),
    "imag": (lambda x: np.imag(x), "numpy.imag"),
    "astype(float)": (lambda x: x.astype(float), "numpy.real"),
    "norm": (lambda x: np.linalg.norm(x), "numpy.absolute"),
    "vdot": (lambda x: np.vdot(x, x), "numpy.conjugate"),
    "sum(dtype=float)": (lambda x: np.sum(x, dtype=float), "numpy.sum"),
    "multiply(dtype=float)": (lambda x: np.multiply(x, 2.0, dtype=float, casting="unsafe"),
                              "numpy.multiply"),
    "einsum(dtype=float)": (lambda x: np.einsum("...->...", x, dtype=float,
                                                casting="unsafe"), "numpy.einsum"),
    "concatenate(dtype=float)": (lambda x: np.concatenate([np.atleast_1d(x)], dtype=float,
                                                          casting="unsafe"),
                                 "numpy.concatenate"),
    "add.at into a real target": (lambda x: np.add.at(np.zeros(2, like=x), [0, 1], x),
                                  "numpy.add.at"),
}


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES, ids=_complex_dtype_id)
@pytest.mark.parametrize("case", OFF_AXIS)
def test_real_only_functions_of_a_complex_seed_off_the_real_axis_raise(case, dtype):
    f, name = OFF_AXIS[case]
    # one value off the axis is enough
    for x0 in (np.array([0.5 + 0.25j, 2.0], dtype=dtype), np.array(1j, dtype=dtype)):
        if x0.ndim == 0 and case == "add.at into a real target":
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            with pytest.raises(sparsegrad.UnsupportedOperationError, match=name):
                f(forward.seed(x0))


def test_complex_seed_sparsity_mode_on_and_off_the_real_axis():
    y = abs(forward.seed_sparsity(AXIS_POINTS.astype(complex)))
    np.testing.assert_array_equal(y.value, np.abs(AXIS_POINTS))
    np.testing.assert_array_equal(dense(y.sparsity), np.eye(5, dtype=bool))
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="numpy.absolute"):
        abs(forward.seed_sparsity(np.array([1 + 1j, 2.0])))


def test_real_seed_through_complex_values_keeps_the_real_derivative():
    # a real seed: the Jacobian of the real and imaginary parts, also off the axis
    def f(x):
        z = x * (1 + 2j) - 0.5j
        return abs(z) + np.sign(z) + np.conj(z) * 1j + np.real(z) * z.imag

    check_jacobian(f, X0)


# ==== known bugs of 0.0.15, fixed ======================================================
def test_bug_branch_with_array_condition_works():
    x = forward.seed(X0)
    y = branch(X0 > 1.0, lambda i: x[i] * 2.0, lambda i: -x[i])
    np.testing.assert_array_equal(y.value, [-0.5, 2.5, 4.0, 6.0])
    np.testing.assert_array_equal(dense(y.dvalue), np.diag([-1.0, 2.0, 2.0, 2.0]))


def test_bug_stacking_forward_values_works():
    x = forward.seed(X0)
    y = stack(x[0], x[1:3] * 2, x)
    assert isinstance(y, forward.value) and y.shape == (7,)
    np.testing.assert_array_equal(dense(y.dvalue), np.vstack(
        [np.eye(4)[:1], 2 * np.eye(4)[1:3], np.eye(4)]))


def test_bug_negative_index_array_wraps_modulo_indexed_length():
    x = forward.seed(np.arange(10.0))
    y = x[3:] * 1.0                    # length 7
    picked = y[np.array([-1, -7])]     # an index array of length 2
    np.testing.assert_array_equal(picked.value, [9.0, 3.0])
    np.testing.assert_array_equal(dense(picked.dvalue), np.eye(10)[[9, 3]])


def test_bug_sign_of_forward_has_zero_derivative():
    y = functions.sign(forward.seed(np.array([-2.0, 0.0, 3.0])))
    np.testing.assert_array_equal(y.value, [-1.0, 0.0, 1.0])
    assert y.dvalue.shape == (3, 3)
    np.testing.assert_array_equal(dense(y.dvalue), np.zeros((3, 3)))


def test_bug_where_selects_instead_of_multiplying():
    x = forward.seed(np.array([0.0, 4.0]))
    with np.errstate(all="ignore"):
        y = where(x > 0, np.sqrt(x), 2.0 * x)    # sqrt'(0) = inf unselected
        z = where(x > 0, np.log(x), 1.0)         # log(0) = -inf unselected
        w = where(x.value > 0, x, np.inf * x)    # inf in the unselected value
    np.testing.assert_array_equal(y.value, [0.0, 2.0])
    np.testing.assert_array_equal(dense(y.dvalue), [[2.0, 0.0], [0.0, 0.25]])
    np.testing.assert_array_equal(z.value, [1.0, np.log(4.0)])
    np.testing.assert_array_equal(dense(z.dvalue), [[0.0, 0.0], [0.0, 0.25]])
    np.testing.assert_array_equal(w.value[1], 4.0)
    np.testing.assert_array_equal(dense(w.dvalue)[1], [0.0, 1.0])


def test_bug_float32_seed_gives_float32_jacobian():
    x = forward.seed(np.array([1.0, 2.0], dtype=np.float32))
    y = functions.exp(x) * x[::-1] + functions.sum(x)
    assert y.value.dtype == np.float32 and y.dvalue.dtype == np.float32
    e = np.exp(np.array([1.0, 2.0]))
    expected = np.array([[2 * e[0] + 1, e[0] + 1], [e[1] + 1, e[1] + 1]])
    np.testing.assert_allclose(dense(y.dvalue), expected, rtol=1e-6)


def test_bug_indexing_gives_float_jacobian():
    y = forward.seed(np.array([1.0, 2.0, 3.0]))[np.array([2, 0])]
    assert y.dvalue.dtype == np.float64
    np.testing.assert_array_equal(dense(y.dvalue), [[0, 0, 1], [1, 0, 0]])


def test_bug_two_d_seeds_give_correct_jacobians():
    x0 = np.arange(1.0, 7.0).reshape(2, 3)
    y = check_jacobian(lambda x: where(x > 2.5, x ** 2, np.sin(x)) * x[::-1], x0)
    assert y.dvalue.shape == (6, 6)
    check_jacobian(lambda x: x[1] * x[0, ::-1] + functions.sum(x), x0)
    check_jacobian(lambda x: hstack([x[0], x[1, 1], np.exp(x[:, 2])]), x0)
    check_jacobian(lambda x: dot(scipy.sparse.csr_matrix(MATRIX[:, :3]), x[1] * x[0]), x0)
    row = forward.seed(x0)[1]
    np.testing.assert_array_equal(dense(row.dvalue), np.eye(6)[3:])


def test_sparsegrad_test_runs_the_self_test(capsys):
    assert sparsegrad.test() is True
    assert "examples, 0 failed" in capsys.readouterr().out
