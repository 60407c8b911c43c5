"""The ufunc rule table, checked rule by rule against independent oracles.

``CASES`` mirrors ``DERIVATIVES`` and ``SELECTIONS`` of
``sparsegrad._ufunc_rules``: one entry per ufunc with the input domain of each
argument, the dtypes to test and whether the complex step is a valid oracle
(the function is real on the real axis and holomorphic there).  Each rule is
run on forward values of several shapes and argument combinations; values
must equal numpy's exactly and Jacobians must match ``numerical_jacobian``.
"""
import re
import warnings
from typing import Callable, NamedTuple, Optional, Tuple

import numpy as np
import pytest
import scipy.sparse
import scipy.special as sc
from numpy.testing.overrides import get_overridable_numpy_ufuncs

import sparsegrad
from sparsegrad import _ufunc_rules as rules
from sparsegrad import forward
from sparsegrad.gpu._device import fake
from sparsegrad.testing import assert_jacobian_equal, dense_jacobian, numerical_jacobian

from device_check import assert_matches_cpu

F64, F32, C128, LD = np.float64, np.float32, np.complex128, np.longdouble
REAL = (F64, F32, LD)
HOLO = (F64, F32, C128, LD)
SC_REAL = (F64, F32)
SC_HOLO = (F64, F32, C128)
SC_LD = (F64, F32, LD)
INT = "int"  # domain of an integer argument (ldexp's exponent): -3 .. 3


class Case(NamedTuple):
    domains: Tuple  # (lo, hi) per argument, or INT
    dtypes: Tuple
    complex_step: bool = False  # complex step is a valid oracle for real inputs
    signed: bool = False  # domains are magnitudes; signs are random
    second: Optional[Callable] = None  # 2nd argument as a function of the 1st
    tol: float = 1.0  # multiplies the default tolerance


def _case(*domains, dtypes, cs=False, **kw):
    return Case(tuple(domains), dtypes, complex_step=cs, **kw)


CASES = {
    # ---- arithmetic --------------------------------------------------------
    np.add: _case((-2, 2), (-2, 2), dtypes=HOLO, cs=True),
    np.subtract: _case((-2, 2), (-2, 2), dtypes=HOLO, cs=True),
    np.multiply: _case((-2, 2), (-2, 2), dtypes=HOLO, cs=True),
    np.divide: _case((-2, 2), (0.5, 2), dtypes=HOLO, cs=True),
    np.negative: _case((-2, 2), dtypes=HOLO, cs=True),
    np.positive: _case((-2, 2), dtypes=HOLO, cs=True),
    # x / y stays inside (2, 3): no jump of floor(x / y)
    np.remainder: _case((2.3, 2.8), (1.0, 1.1), dtypes=REAL),
    np.fmod: _case((2.3, 2.8), (1.0, 1.1), dtypes=REAL),
    np.nextafter: _case((-2, 2), (-2, 2), dtypes=REAL),
    np.ldexp: _case((-2, 2), INT, dtypes=REAL),
    # ---- powers and roots --------------------------------------------------
    np.power: _case((0.5, 2), (-1.5, 1.5), dtypes=HOLO, cs=True),
    np.float_power: _case((0.5, 2), (-1.5, 1.5), dtypes=HOLO, cs=True),
    np.square: _case((-2, 2), dtypes=HOLO, cs=True),
    np.reciprocal: _case((0.5, 2), dtypes=HOLO, cs=True),
    np.sqrt: _case((0.1, 3), dtypes=HOLO, cs=True),
    np.cbrt: _case((0.1, 3), dtypes=REAL),
    # ---- exponentials and logarithms ---------------------------------------
    np.exp: _case((-2, 2), dtypes=HOLO, cs=True),
    np.exp2: _case((-2, 2), dtypes=HOLO, cs=True),
    np.expm1: _case((-2, 2), dtypes=HOLO, cs=True),
    np.log: _case((0.1, 3), dtypes=HOLO, cs=True),
    np.log2: _case((0.1, 3), dtypes=HOLO, cs=True),
    np.log10: _case((0.1, 3), dtypes=HOLO, cs=True),
    np.log1p: _case((-0.5, 2), dtypes=HOLO, cs=True),
    np.logaddexp: _case((-2, 2), (-2, 2), dtypes=REAL),
    np.logaddexp2: _case((-2, 2), (-2, 2), dtypes=REAL),
    # ---- trigonometric -----------------------------------------------------
    np.sin: _case((-3, 3), dtypes=HOLO, cs=True),
    np.cos: _case((-3, 3), dtypes=HOLO, cs=True),
    np.tan: _case((-1.2, 1.2), dtypes=HOLO, cs=True),
    np.arcsin: _case((-0.9, 0.9), dtypes=HOLO, cs=True),
    np.arccos: _case((-0.9, 0.9), dtypes=HOLO, cs=True),
    np.arctan: _case((-2, 2), dtypes=HOLO, cs=True),
    # x > 0 keeps clear of the jump of arctan2 on the negative x axis
    np.arctan2: _case((-2, 2), (0.5, 2), dtypes=REAL),
    np.hypot: _case((-2, 2), (0.5, 2), dtypes=REAL),
    np.deg2rad: _case((-3, 3), dtypes=REAL),
    np.radians: _case((-3, 3), dtypes=REAL),
    np.rad2deg: _case((-3, 3), dtypes=REAL),
    np.degrees: _case((-3, 3), dtypes=REAL),
    # ---- hyperbolic --------------------------------------------------------
    np.sinh: _case((-2, 2), dtypes=HOLO, cs=True),
    np.cosh: _case((-2, 2), dtypes=HOLO, cs=True),
    np.tanh: _case((-2, 2), dtypes=HOLO, cs=True),
    np.arcsinh: _case((-2, 2), dtypes=HOLO, cs=True),
    np.arccosh: _case((1.1, 3), dtypes=HOLO, cs=True),
    np.arctanh: _case((-0.9, 0.9), dtypes=HOLO, cs=True),
    # ---- absolute value and sign transfer: complex inputs in the complex tests
    np.absolute: _case((0.2, 2), dtypes=REAL, signed=True),
    np.fabs: _case((0.2, 2), dtypes=REAL, signed=True),
    np.conjugate: _case((-2, 2), dtypes=REAL),
    np.copysign: _case((0.2, 2), (0.2, 2), dtypes=REAL, signed=True,
                       second=lambda x: 2 * x),
    # ---- selections (ties and nan in their own tests) ----------------------
    np.maximum: _case((-2, 2), (-2, 2), dtypes=REAL),
    np.minimum: _case((-2, 2), (-2, 2), dtypes=REAL),
    np.fmax: _case((-2, 2), (-2, 2), dtypes=REAL),
    np.fmin: _case((-2, 2), (-2, 2), dtypes=REAL),
    # ---- scipy.special -----------------------------------------------------
    sc.erf: _case((-2, 2), dtypes=SC_HOLO, cs=True),
    sc.erfc: _case((-2, 2), dtypes=SC_HOLO, cs=True),
    sc.erfcx: _case((-1, 2), dtypes=SC_HOLO, cs=True),
    sc.erfinv: _case((-0.9, 0.9), dtypes=SC_REAL),
    sc.erfcinv: _case((0.1, 1.9), dtypes=SC_REAL),
    sc.dawsn: _case((-2, 2), dtypes=SC_HOLO, cs=True),
    sc.expit: _case((-3, 3), dtypes=SC_LD),
    sc.log_expit: _case((-3, 3), dtypes=SC_LD),
    sc.logit: _case((0.1, 0.9), dtypes=SC_LD),
    sc.ndtr: _case((-2, 2), dtypes=SC_HOLO, cs=True),
    sc.log_ndtr: _case((-2, 2), dtypes=SC_HOLO, cs=True),
    sc.xlogy: _case((-2, 2), (0.1, 3), dtypes=SC_HOLO, cs=True),
    sc.xlog1py: _case((-2, 2), (-0.5, 2), dtypes=SC_HOLO, cs=True),
    sc.gammaln: _case((0.5, 4), dtypes=SC_REAL),
    sc.gamma: _case((0.5, 4), dtypes=SC_HOLO, cs=True),
    sc.digamma: _case((0.5, 4), dtypes=SC_REAL),
    sc.entr: _case((0.1, 3), dtypes=SC_REAL),
    sc.i0: _case((-2, 2), dtypes=SC_REAL),
    sc.j0: _case((-3, 3), dtypes=SC_REAL),
    sc.expm1: _case((-2, 2), dtypes=SC_HOLO, cs=True),
    sc.log1p: _case((-0.5, 2), dtypes=SC_HOLO, cs=True),
    sc.exp2: _case((-2, 2), dtypes=SC_REAL),
    sc.exp10: _case((-2, 2), dtypes=SC_REAL),
    sc.cbrt: _case((0.1, 3), dtypes=SC_REAL),
}

PIECEWISE_CASES = {
    np.floor: _case((-3, 3), dtypes=REAL),
    np.ceil: _case((-3, 3), dtypes=REAL),
    np.trunc: _case((-3, 3), dtypes=REAL),
    np.rint: _case((-3, 3), dtypes=REAL),
    np.sign: _case((-3, 3), dtypes=REAL),
    np.spacing: _case((-3, 3), dtypes=REAL),
    np.floor_divide: _case((-3, 3), (0.5, 2), dtypes=REAL),
}

SHAPES = [(), (5,), (2, 3), (2, 1, 3)]
SCIPY_SPECIAL_REQUIRED = [sc.erf, sc.erfc, sc.erfcx, sc.expit, sc.logit, sc.xlogy,
                          sc.gammaln]
TABLES = {"DERIVATIVES": rules.DERIVATIVES, "SELECTIONS": rules.SELECTIONS,
          "SECOND_WHERE": rules.SECOND_WHERE,
          "PIECEWISE_CONSTANT": rules.PIECEWISE_CONSTANT, "PREDICATES": rules.PREDICATES,
          "LINEAR_ALGEBRA": rules.LINEAR_ALGEBRA, "UNSUPPORTED": rules.UNSUPPORTED}


def _name(ufunc):
    prefix = "np." if getattr(np, ufunc.__name__, None) is ufunc else "sc."
    return prefix + ufunc.__name__


def _shape_id(shape):
    return "0d" if shape == () else "x".join(map(str, shape))


def _dtype_id(dtype):
    return np.dtype(dtype).name


# ---- inputs and the generic check ---------------------------------------------

def _sample(case, i, shape, dtype, rng):
    domain = case.domains[i]
    if domain == INT:
        return np.asarray(rng.integers(-3, 4, shape))
    lo, hi = domain
    x = np.asarray(rng.uniform(lo, hi, shape))
    if case.signed:
        x = x * rng.choice([-1.0, 1.0], shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.uniform(-0.2, 0.2, shape)
    return np.asarray(x, dtype=dtype)


def _scalar(case, i, dtype):
    """A python scalar inside the domain of argument ``i``."""
    domain = case.domains[i]
    if domain == INT:
        return 2
    mid = round((domain[0] + domain[1]) / 2, 3)
    return complex(mid, 0.1) if np.dtype(dtype).kind == "c" else float(mid)


def _second(case):
    """The second argument as a function of the first (both forward)."""
    if case.second is not None:
        return case.second
    (lo1, hi1), (lo2, hi2) = case.domains
    k = (hi2 - lo2) / (hi1 - lo1)
    # reversed, so that ties of maximum & co. stay unlikely
    return lambda x: hi2 - (x - lo1) * k


def _method(case, dtype):
    return "complex" if case.complex_step and np.dtype(dtype).kind != "c" else "central"


def _rtol(method, value_dtype, tol):
    value_dtype = np.dtype(value_dtype)
    eps = float(np.finfo(value_dtype).eps)
    if method == "complex":  # the reference is exact to rounding
        return tol * 100 * eps
    work = np.result_type(value_dtype, np.float64)
    work_eps = float(np.finfo(work).eps)
    return tol * max(1000 * work_eps ** (2 / 3), 100 * eps)


def _assert_same_values(actual, expected):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)


def _check(g, x0, method, tol=1.0, rtol=None):
    """``g(seed(x0))``: value equal to ``g(x0)``, Jacobian equal to the oracle's."""
    result = g(forward.seed(x0))
    assert isinstance(result, forward.value), type(result)
    _assert_same_values(result.value, g(x0))
    expected = numerical_jacobian(g, x0, method=method)
    if rtol is None:
        rtol = _rtol(method, np.asarray(result.value).dtype, tol)
    scale = float(np.max(np.abs(expected), initial=0.0))
    if method == "central":  # differences of O(1) values leave noise in zero entries
        scale = max(scale, 1.0)
    atol = rtol * scale
    assert_jacobian_equal(result, expected, rtol=rtol, atol=atol,
                          scalar_seed=(np.ndim(x0) == 0))
    return result


def _params(cases, nin):
    return [pytest.param(u, dt, id="%s-%s" % (_name(u), _dtype_id(dt)))
            for u, case in cases.items() if u.nin == nin for dt in case.dtypes]


UNARY = _params(CASES, 1)
BINARY = _params(CASES, 2)
BINARY_INT = [p for p in BINARY if INT in CASES[p.values[0]].domains]
BINARY_FLOAT = [p for p in BINARY if INT not in CASES[p.values[0]].domains]


def _binary_inputs(ufunc, dtype, variant, shape, rng):
    """``(g, x0)`` for one way of passing forward values to a binary ufunc."""
    case = CASES.get(ufunc) or PIECEWISE_CASES[ufunc]
    if variant == "fwd_fwd_pieces":  # both arguments pieces of one seed
        x0 = np.stack([_sample(case, 0, shape, dtype, rng),
                       _sample(case, 1, shape, dtype, rng)])
        return (lambda s: ufunc(s[0], s[1])), x0
    if variant == "fwd_fwd_affine":  # f(x, a + b x)
        second = _second(case)
        return (lambda s: ufunc(s, second(s))), _sample(case, 0, shape, dtype, rng)
    if variant == "fwd_const":
        b = _sample(case, 1, shape, dtype, rng)
        return (lambda s: ufunc(s, b)), _sample(case, 0, shape, dtype, rng)
    if variant == "const_fwd":
        a = _sample(case, 0, shape, dtype, rng)
        return (lambda s: ufunc(a, s)), _sample(case, 1, shape, dtype, rng)
    if variant == "bcast_fwd_const":  # (3, 1) forward with (4,) constant
        b = _sample(case, 1, (4,), dtype, rng)
        return (lambda s: ufunc(s, b)), _sample(case, 0, (3, 1), dtype, rng)
    if variant == "bcast_const_fwd":
        a = _sample(case, 0, (3, 1), dtype, rng)
        return (lambda s: ufunc(a, s)), _sample(case, 1, (4,), dtype, rng)
    if variant == "bcast_fwd_fwd":  # (3, 1) and (4,) pieces of one seed
        x0 = np.concatenate([_sample(case, 0, (3,), dtype, rng),
                             _sample(case, 1, (4,), dtype, rng)])
        return (lambda s: ufunc(s[:3, np.newaxis], s[3:])), x0
    if variant == "fwd_pyscalar":
        b = _scalar(case, 1, dtype)
        return (lambda s: ufunc(s, b)), _sample(case, 0, (5,), dtype, rng)
    if variant == "pyscalar_fwd":
        a = _scalar(case, 0, dtype)
        return (lambda s: ufunc(a, s)), _sample(case, 1, (5,), dtype, rng)
    raise ValueError(variant)


SHAPED_VARIANTS = ["fwd_fwd_pieces", "fwd_fwd_affine", "fwd_const", "const_fwd"]
OTHER_VARIANTS = ["bcast_fwd_const", "bcast_const_fwd", "bcast_fwd_fwd", "fwd_pyscalar",
                  "pyscalar_fwd"]


# ---- (a) every ufunc classified exactly once ---------------------------------------

@pytest.mark.parametrize("ufunc", sorted(get_overridable_numpy_ufuncs(),
                                         key=lambda u: u.__name__),
                         ids=lambda u: u.__name__)
def test_numpy_ufunc_classified_exactly_once(ufunc):
    homes = [name for name, table in TABLES.items() if ufunc in table]
    assert len(homes) == 1, "%s is in %s" % (ufunc.__name__, homes or "no table")
    assert rules.classify(ufunc) != "unclassified"


@pytest.mark.parametrize("ufunc", SCIPY_SPECIAL_REQUIRED, ids=_name)
def test_required_scipy_special_ufuncs_are_differentiable(ufunc):
    assert ufunc in rules.DERIVATIVES
    assert rules.classify(ufunc) == "differentiable"


def test_scipy_special_ufuncs_classified_exactly_once():
    scipy_ufuncs = {u for table in TABLES.values() for u in table
                    if getattr(np, u.__name__, None) is not u}
    assert scipy_ufuncs, "no scipy.special ufunc in the tables"
    for ufunc in scipy_ufuncs:
        homes = [name for name, table in TABLES.items() if ufunc in table]
        assert len(homes) == 1, (ufunc.__name__, homes)


def test_non_holomorphic_are_rules_with_a_real_axis_derivative():
    assert rules.NON_HOLOMORPHIC <= set(rules.DERIVATIVES) | rules.PIECEWISE_CONSTANT
    assert set(rules.REAL_AXIS) == rules.NON_HOLOMORPHIC


@pytest.mark.parametrize("ufunc", [u for u in CASES if getattr(np, u.__name__, None)
                                   is not u], ids=_name)
def test_rule_name_of_scipy_special_ufunc(ufunc):
    # error messages must name the user's function, also where numpy has a
    # ufunc of the same name (expm1, log1p, exp2, cbrt)
    assert rules.rule_name(ufunc) == "scipy.special." + ufunc.__name__


# ---- (b) the case table mirrors the rule table ---------------------------------------

def test_every_rule_has_a_case():
    missing = (set(rules.DERIVATIVES) | set(rules.SELECTIONS)) - set(CASES)
    assert not missing, sorted(_name(u) for u in missing)
    missing = set(rules.PIECEWISE_CONSTANT) - set(PIECEWISE_CASES)
    assert not missing, sorted(_name(u) for u in missing)


def test_every_case_is_a_rule():
    stale = set(CASES) - (set(rules.DERIVATIVES) | set(rules.SELECTIONS))
    assert not stale, sorted(_name(u) for u in stale)
    stale = set(PIECEWISE_CASES) - set(rules.PIECEWISE_CONSTANT)
    assert not stale, sorted(_name(u) for u in stale)


def test_cases_match_arity_and_holomorphy():
    for ufunc, case in list(CASES.items()) + list(PIECEWISE_CASES.items()):
        assert len(case.domains) == ufunc.nin, _name(ufunc)
        if ufunc in rules.NON_HOLOMORPHIC:
            assert not case.complex_step and C128 not in case.dtypes, _name(ufunc)


@pytest.mark.parametrize("ufunc, dtype", UNARY + BINARY)
def test_case_domain_is_valid(ufunc, dtype, rng):
    # the table itself: finite values in the domain, the dtype has a loop, and
    # the complex step agrees with central differences where it is claimed
    case = CASES[ufunc]
    args = [_sample(case, i, (4,), dtype, rng) for i in range(ufunc.nin)]
    out = ufunc(*args)
    assert np.all(np.isfinite(out))
    if ufunc is not np.float_power:
        assert out.dtype == np.dtype(dtype)
    if case.complex_step and np.dtype(dtype) == F64:
        for i in range(ufunc.nin):
            def g(v, i=i):
                return ufunc(*args[:i], v, *args[i + 1:])
            np.testing.assert_allclose(numerical_jacobian(g, args[i], "complex"),
                                       numerical_jacobian(g, args[i], "central"),
                                       rtol=1e-7, atol=1e-9)


# ---- (c) values and Jacobians of every rule --------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
@pytest.mark.parametrize("ufunc, dtype", UNARY)
def test_unary_rule(ufunc, dtype, shape, rng):
    case = CASES[ufunc]
    x0 = _sample(case, 0, shape, dtype, rng)
    _check(lambda s: ufunc(s), x0, _method(case, dtype), case.tol)


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
@pytest.mark.parametrize("variant", SHAPED_VARIANTS)
@pytest.mark.parametrize("ufunc, dtype", BINARY_FLOAT)
def test_binary_rule(ufunc, dtype, variant, shape, rng):
    case = CASES[ufunc]
    g, x0 = _binary_inputs(ufunc, dtype, variant, shape, rng)
    _check(g, x0, _method(case, dtype), case.tol)


@pytest.mark.parametrize("variant", OTHER_VARIANTS)
@pytest.mark.parametrize("ufunc, dtype", BINARY_FLOAT)
def test_binary_rule_broadcasting_and_scalars(ufunc, dtype, variant, rng):
    case = CASES[ufunc]
    g, x0 = _binary_inputs(ufunc, dtype, variant, None, rng)
    _check(g, x0, _method(case, dtype), case.tol)


@pytest.mark.parametrize("variant", ["fwd_const", "bcast_fwd_const", "fwd_pyscalar"])
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
@pytest.mark.parametrize("ufunc, dtype", BINARY_INT)
def test_integer_argument_rule(ufunc, dtype, shape, variant, rng):
    case = CASES[ufunc]
    g, x0 = _binary_inputs(ufunc, dtype, variant, shape, rng)
    _check(g, x0, _method(case, dtype), case.tol)


def _on_the_device(device, g, x0, g_device=None):
    """``g_device`` (default ``g``) on a seed on ``device`` (the fake device, or
    CuPy on a GPU) against ``g`` on the CPU seed.  Where CuPy itself lacks the
    function or its loop for the dtype (``scipy.special.dawsn``; complex ``erf``),
    the seed must raise the same ``TypeError``, not compute anything."""
    g_device = g_device or g
    if device is not fake:
        try:
            g_device(device.asarray(x0))
        except TypeError as exc:  # not in CuPy: loud on a seed too
            with pytest.raises(TypeError, match=re.escape(str(exc)[:40])):
                g_device(forward.seed(device.asarray(x0)))
            return
    with np.errstate(all="ignore"):
        expected = g(forward.seed(x0))
        got = g_device(forward.seed(device.asarray(x0)))
    assert_matches_cpu(got, expected, rtol=1e-13, device=device)


DEVICE_DTYPES = (F64, F32, C128)  # (CuPy has no longdouble)


@pytest.mark.parametrize("ufunc, dtype", [p for p in UNARY if p.values[1] in DEVICE_DTYPES])
def test_unary_rule_on_the_device(ufunc, dtype, device, rng):
    x0 = _sample(CASES[ufunc], 0, (2, 3), dtype, rng)
    _on_the_device(device, lambda s: ufunc(s), x0)


@pytest.mark.parametrize("variant", ["fwd_fwd_pieces", "fwd_const", "const_fwd",
                                     "fwd_pyscalar"])
@pytest.mark.parametrize("ufunc, dtype",
                         [p for p in BINARY_FLOAT if p.values[1] in DEVICE_DTYPES])
def test_binary_rule_on_the_device(ufunc, dtype, variant, device, rng):
    g, x0 = _binary_inputs(ufunc, dtype, variant, (2, 3), rng)
    if variant in ("fwd_const", "const_fwd"):  # the constant made on the device too
        constant = [c for c in g.__closure__ if isinstance(c.cell_contents, np.ndarray)]
        value = device.asarray(constant[0].cell_contents)
        h = (lambda s: ufunc(s, value)) if variant == "fwd_const" else \
            (lambda s: ufunc(value, s))
        _on_the_device(device, g, x0, h)
    else:
        _on_the_device(device, g, x0)


def _common_case_params():
    # float64 rules and every way of passing operands the shortcut accepts
    params = []
    for ufunc, case in CASES.items():
        if F64 not in case.dtypes:
            continue
        if ufunc.nin == 1:
            variants = ["unary"]
        elif INT in case.domains:  # (ldexp: the integer exponent is never forward)
            variants = ["fwd_const", "fwd_pyint"]
        else:
            variants = ["fwd_fwd_pieces", "fwd_const", "const_fwd", "fwd_pyscalar",
                        "pyscalar_fwd", "fwd_pyint"]
        params += [pytest.param(ufunc, v, id="%s-%s" % (_name(ufunc), v)) for v in variants]
    return params


@pytest.mark.parametrize("ufunc, variant", _common_case_params())
def test_common_case_equals_the_general_path(ufunc, variant, rng):
    # float64 operands of one shape take a shortcut past the general path's
    # casts and broadcasts (sparsegrad._ufuncs._common_operands); a dtype=
    # keyword forces the general path: both must agree bit for bit
    dtype = F64
    case = CASES[ufunc]
    if variant == "fwd_pyint":  # (2 lies in the domain of every second argument
        # but fmod's and remainder's, where it is still a valid operand)
        g, x0 = (lambda s: ufunc(s, 2)), _sample(case, 0, (5,), dtype, rng)
    elif variant == "unary":
        g, x0 = ufunc, _sample(case, 0, (2, 3), dtype, rng)
    else:
        g, x0 = _binary_inputs(ufunc, dtype, variant, (2, 3), rng)
    common = g(forward.seed(x0))
    general = _general_path(g)(forward.seed(x0))
    _assert_same_values(common.value, general.value)
    a, b = common.dvalue, general.dvalue
    assert_array_equal_sparse(a, b)


def _general_path(g):
    """``g`` with every ufunc call given ``dtype=float64`` (the general path)."""
    def forced(s):
        with _dtype_keyword():
            return g(s)
    return forced


class _dtype_keyword:
    """Within the block, forward values' ufunc calls carry ``dtype=float64``."""

    def __enter__(self):
        from sparsegrad import _value
        self._original = _value.value.__array_ufunc__

        def with_dtype(this, ufunc, method, *inputs, **kwargs):
            if method == "__call__" and "dtype" not in kwargs:
                kwargs["dtype"] = np.float64
            return self._original(this, ufunc, method, *inputs, **kwargs)
        _value.value.__array_ufunc__ = with_dtype

    def __exit__(self, *exc):
        from sparsegrad import _value
        _value.value.__array_ufunc__ = self._original


def assert_array_equal_sparse(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data, b.data)


def test_common_case_copies_a_constant_used_as_a_partial():
    x = forward.seed(np.array([1.0, 2.0]))
    c = np.array([3.0, 4.0])
    y = x * c                                       # the partial is c itself
    c[:] = 0.0
    np.testing.assert_array_equal(y.dvalue.toarray(), np.diag([3.0, 4.0]))


def test_ldexp_exponent_must_not_depend_on_the_seed():
    exponent = forward.seed(np.array([1, 2]))
    with pytest.raises(TypeError):
        np.ldexp(np.array([1.5, 2.5]), exponent)


def test_chain_of_rules_matches_complex_step(rng):
    # a composition exercises the merging of factored Jacobians between rules
    def g(s):
        a, b = s[:-1], s[1:]
        return np.exp(np.sin(a) * b) / (1 + np.square(b)) - np.sqrt(np.hypot(a, 1.0) * a * a)

    x0 = rng.uniform(0.5, 1.5, 6)
    _check(g, x0, "central")
    _check(lambda s: np.log(np.cosh(s) + s * s) ** 1.5 - np.arctan(s[::-1]), x0, "complex")


# ---- (d) piecewise-constant rules: values, zero Jacobian -----------------------------------

def _check_zero_jacobian(g, x0):
    result = g(forward.seed(x0))
    assert isinstance(result, forward.value), type(result)
    _assert_same_values(result.value, g(x0))
    size = np.asarray(result.value).size
    assert_jacobian_equal(result, np.zeros((size, np.size(x0))),
                          scalar_seed=(np.ndim(x0) == 0))
    jac = result.dvalue
    if scipy.sparse.issparse(jac):
        assert jac.nnz == 0 or not np.any(jac.data)


def _piecewise_params(nin):
    return [pytest.param(u, dt, id="%s-%s" % (_name(u), _dtype_id(dt)))
            for u, case in PIECEWISE_CASES.items() if u.nin == nin for dt in case.dtypes]


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
@pytest.mark.parametrize("ufunc, dtype", _piecewise_params(1))
def test_piecewise_constant_unary(ufunc, dtype, shape, rng):
    x0 = _sample(PIECEWISE_CASES[ufunc], 0, shape, dtype, rng)
    if x0.ndim:  # integers and zero, where most of them jump
        x0.flat[:3] = np.array([0.0, 2.0, -1.0], dtype=dtype)[:x0.size]
    _check_zero_jacobian(lambda s: ufunc(s), x0)


@pytest.mark.parametrize("variant", ["fwd_fwd_pieces", "fwd_const", "const_fwd",
                                     "bcast_fwd_fwd", "fwd_pyscalar", "pyscalar_fwd"])
@pytest.mark.parametrize("ufunc, dtype", _piecewise_params(2))
def test_piecewise_constant_binary(ufunc, dtype, variant, rng):
    g, x0 = _binary_inputs(ufunc, dtype, variant, (2, 3), rng)
    _check_zero_jacobian(g, x0)


def test_sign_and_heaviside_at_zero():
    x = forward.seed(np.array([-2.0, 0.0, 3.0]))
    y = np.sign(x)
    np.testing.assert_array_equal(y.value, [-1.0, 0.0, 1.0])
    assert not np.any(dense_jacobian(y))
    y = np.heaviside(x, 0.5)
    np.testing.assert_array_equal(y.value, [0.0, 0.5, 1.0])
    assert not np.any(dense_jacobian(y))


# ---- (e) predicates return plain booleans ---------------------------------------------

PRED_A = np.array([0.0, 1.5, -2.0, np.nan, np.inf, -np.inf, 1.5, 0.0, -0.0, 3.0])
PRED_B = np.array([0.0, 2.0, -2.0, np.nan, np.inf, 1.0, np.nan, -0.0, 0.0, -3.0])
PREDICATE_UFUNCS = sorted((u for u in rules.PREDICATES if u is not np.isnat),
                          key=lambda u: u.__name__)


def _assert_plain_result(result, expected):
    assert not isinstance(result, forward.value)
    assert type(result) is type(expected), (type(result), type(expected))
    assert result.dtype == expected.dtype
    np.testing.assert_array_equal(result, expected)


PREDICATE_PARAMS = [
    pytest.param(u, v, id="%s-%s" % (_name(u), v))
    for u in PREDICATE_UFUNCS
    for v in (["fwd", "zero_d"] if u.nin == 1 else
              ["fwd_fwd", "fwd_const", "const_fwd", "fwd_pyscalar", "zero_d"])]


@pytest.mark.parametrize("ufunc, variant", PREDICATE_PARAMS)
def test_predicate_returns_plain_numpy(ufunc, variant):
    a, b = PRED_A, PRED_B
    if ufunc.nin == 1:
        x0 = a[3] if variant == "zero_d" else a
        _assert_plain_result(ufunc(forward.seed(x0)), ufunc(x0))
        return
    with np.errstate(invalid="ignore"):
        if variant == "fwd_fwd":
            s = forward.seed(np.concatenate([a, b]))
            result, expected = ufunc(s[:a.size], s[a.size:]), ufunc(a, b)
        elif variant == "fwd_const":
            result, expected = ufunc(forward.seed(a), b), ufunc(a, b)
        elif variant == "const_fwd":
            result, expected = ufunc(a, forward.seed(b)), ufunc(a, b)
        elif variant == "fwd_pyscalar":
            result, expected = ufunc(forward.seed(a), 1.5), ufunc(a, 1.5)
        else:
            result, expected = ufunc(forward.seed(a[1]), b[1]), ufunc(a[1], b[1])
    _assert_plain_result(result, expected)


def test_comparison_operators_return_plain_numpy():
    a, b = PRED_A[:3], PRED_B[:3]
    x = forward.seed(a)
    for result, expected in [(x < b, a < b), (x <= b, a <= b), (x > b, a > b),
                             (x >= b, a >= b), (x == b, a == b), (x != b, a != b),
                             (b < x, b < a), (x < x, a < a), (x < 1.0, a < 1.0)]:
        _assert_plain_result(result, expected)


def test_isnat_refuses_floats_like_numpy():
    with pytest.raises(TypeError):
        np.isnat(np.ones(2))
    with pytest.raises(TypeError):
        np.isnat(forward.seed(np.ones(2)))


# ---- (f) unsupported ufuncs name themselves ---------------------------------------------

UNSUPPORTED_CALLS = [
    (np.frexp, lambda x: np.frexp(x), False),
    (np.modf, lambda x: np.modf(x), False),
    (np.divmod, lambda x: np.divmod(x, 2.0), False),
    (np.divmod, lambda x: np.divmod(7.0, x), False),
    (np.gcd, lambda x: np.gcd(x, 4), True),
    (np.lcm, lambda x: np.lcm(6, x), True),
    (np.bitwise_and, lambda x: np.bitwise_and(x, 3), True),
    (np.bitwise_or, lambda x: x | 3, True),
    (np.bitwise_xor, lambda x: np.bitwise_xor(x, 3), True),
    (np.invert, lambda x: ~x, True),
    (np.left_shift, lambda x: np.left_shift(x, 1), True),
    (np.right_shift, lambda x: x >> 1, True),
    (np.bitwise_count, lambda x: np.bitwise_count(x), True),
]


@pytest.mark.parametrize("ufunc, call, integer_seed", [
    pytest.param(u, c, i, id="%s-%d" % (u.__name__, k))
    for k, (u, c, i) in enumerate(UNSUPPORTED_CALLS)])
def test_unsupported_ufunc_raises_naming_it(ufunc, call, integer_seed):
    # integer-only ufuncs get an integer seed, so numpy itself would not object
    x0 = np.array([3, 5, 6]) if integer_seed else np.array([1.5, -2.25, 3.0])
    call(x0)  # fine on plain numbers
    with pytest.raises(TypeError, match=ufunc.__name__) as excinfo:
        call(forward.seed(x0))
    assert isinstance(excinfo.value, sparsegrad.UnsupportedOperationError)


# ---- (g) ufunc methods ---------------------------------------------------------------

REDUCE_AXES = [0, 1, -1, None, (0, 2)]


@pytest.mark.parametrize("axis", REDUCE_AXES, ids=lambda a: "axis=%s" % (a,))
@pytest.mark.parametrize("ufunc, method", [(np.add, "complex"), (np.multiply, "complex"),
                                           (np.maximum, "central"),
                                           (np.minimum, "central")],
                         ids=lambda u: getattr(u, "__name__", u))
def test_reduce(ufunc, method, axis, rng):
    # distinct values: no ties for maximum/minimum
    x0 = rng.permutation(np.linspace(0.5, 1.5, 12)).reshape(2, 3, 2)
    _check(lambda s: ufunc.reduce(s, axis=axis), x0, method)


@pytest.mark.parametrize("ufunc", [np.add, np.maximum], ids=lambda u: u.__name__)
def test_reduce_keepdims_and_float32(ufunc, rng):
    x0 = rng.permutation(np.linspace(0.5, 1.5, 6)).reshape(2, 3).astype(F32)
    _check(lambda s: ufunc.reduce(s, axis=1, keepdims=True), x0, "central")


@pytest.mark.parametrize("axis", [0, 1, -1], ids=lambda a: "axis=%s" % (a,))
@pytest.mark.parametrize("ufunc", [np.add, np.multiply], ids=lambda u: u.__name__)
def test_accumulate(ufunc, axis, rng):
    x0 = rng.uniform(0.5, 1.5, (3, 4))
    _check(lambda s: ufunc.accumulate(s, axis=axis), x0, "complex")


def test_accumulate_1d(rng):
    x0 = rng.uniform(0.5, 1.5, 5)
    _check(lambda s: np.add.accumulate(s), x0, "complex")
    _check(lambda s: np.multiply.accumulate(s), x0, "complex")


AT_INDEX = np.array([0, 1, 1, 3, 1, -1])


@pytest.mark.parametrize("source", ["forward", "constant", "pyscalar"])
def test_add_at_forward_target_repeated_indices(source, rng):
    const = rng.uniform(-1, 1, AT_INDEX.size)

    def g(s):
        target = s * 1.0  # a copy: np.add.at works in place
        if source == "forward":
            values = s[[2, 2, 4, 0, 1, 3]] ** 2
        elif source == "constant":
            values = const
        else:
            values = 2.5
        np.add.at(target, AT_INDEX, values)
        return target

    x0 = rng.uniform(0.5, 1.5, 5)
    _check(g, x0, "complex")


def test_add_at_forward_values_into_fresh_forward_target(rng):
    def g(s):
        target = np.zeros(4, like=s)
        np.add.at(target, [0, 2, 2, 0, 3], s)
        return target

    # central: the float zeros of the plain target would drop a complex step
    _check(g, rng.uniform(-1, 1, 5), "central")


def test_out_into_forward_target(rng):
    x0 = rng.uniform(0.5, 1.5, 4)
    x = forward.seed(x0)
    target = x * 1.0
    result = np.exp(x, out=target)
    for fv in (result, target):
        _assert_same_values(fv.value, np.exp(x0))
        assert_jacobian_equal(fv, np.diag(np.exp(x0)), rtol=1e-15)
    target = x * 0.0
    np.multiply(x, x, out=(target,))
    assert_jacobian_equal(target, np.diag(2 * x0), rtol=1e-15)
    _assert_same_values(target.value, x0 * x0)


def test_out_into_forward_target_from_constant_input(rng):
    x0 = rng.uniform(0.5, 1.5, 3)
    a = rng.uniform(0.5, 1.5, 3)
    target = forward.seed(x0) * 2.0
    np.sin(a, out=target)
    _assert_same_values(target.value, np.sin(a))
    assert_jacobian_equal(target, np.zeros((3, 3)))


def test_out_into_ndarray_with_forward_input_raises():
    x = forward.seed(np.array([1.0, 2.0]))
    with pytest.raises(TypeError):
        np.exp(x, out=np.empty(2))
    with pytest.raises(TypeError):
        np.add(x, 1.0, out=np.empty(2))
    with pytest.raises(TypeError):
        np.add.reduce(x, out=np.empty(()))


# ---- (h) selections: nan, ties, and no leaking of the unselected Jacobian ------------------

SEL_A = np.array([1.0, np.nan, 3.0, np.nan, 2.0, -1.0])
SEL_B = np.array([np.nan, 2.0, 3.0, np.nan, 5.0, -4.0])
# which argument each output element comes from ("either": tie or both nan)
SEL_SOURCE = {
    np.maximum: ["b", "a", "either", "either", "b", "a"],  # nan propagates
    np.minimum: ["b", "a", "either", "either", "a", "b"],
    np.fmax: ["a", "b", "either", "either", "b", "a"],  # nan is ignored
    np.fmin: ["a", "b", "either", "either", "a", "b"],
}


@pytest.mark.parametrize("const_b", [False, True], ids=["fwd_fwd", "fwd_const"])
@pytest.mark.parametrize("ufunc", list(SEL_SOURCE), ids=_name)
def test_selection_nan_and_ties(ufunc, const_b):
    n = SEL_A.size
    if const_b:
        s = forward.seed(SEL_A)
        a, b = s, SEL_B
        jac_a, jac_b = np.eye(n), np.zeros((n, n))
    else:
        # scaled, so that the rows of a and b differ even at ties
        s = forward.seed(np.concatenate([SEL_A, SEL_B]))
        a, b = s[:n] * 1.0, s[n:] * 1.0
        jac_a = np.hstack([np.eye(n), np.zeros((n, n))])
        jac_b = np.hstack([np.zeros((n, n)), np.eye(n)])
    result = ufunc(a, b)
    _assert_same_values(result.value, ufunc(SEL_A, SEL_B))
    jac = dense_jacobian(result)
    assert jac.shape == jac_a.shape
    assert not np.any(np.isnan(jac))
    for i, source in enumerate(SEL_SOURCE[ufunc]):
        from_a = np.array_equal(jac[i], jac_a[i])
        from_b = np.array_equal(jac[i], jac_b[i])
        if source == "a":
            assert from_a, (i, jac[i])
        elif source == "b":
            assert from_b, (i, jac[i])
        else:
            assert from_a or from_b, (i, jac[i])


@pytest.mark.parametrize("ufunc", list(SEL_SOURCE), ids=_name)
def test_selection_tie_picks_one_side(ufunc):
    # max(x, 2x - x): equal values, different Jacobian rows
    x0 = np.array([1.0, -2.0])
    s = forward.seed(np.concatenate([x0, x0]))
    result = ufunc(s[:2], 2.0 * s[2:] - s[:2])
    jac = dense_jacobian(result)
    row_a = np.hstack([np.eye(2), np.zeros((2, 2))])
    row_b = np.hstack([-np.eye(2), 2 * np.eye(2)])
    for i in range(2):
        assert np.array_equal(jac[i], row_a[i]) or np.array_equal(jac[i], row_b[i]), jac[i]


INF_LEAK = [
    ("maximum(sqrt(x), 1)", lambda s: np.maximum(np.sqrt(s), 1.0), [[0, 0], [0, 0.25]]),
    ("maximum(1, sqrt(x))", lambda s: np.maximum(1.0, np.sqrt(s)), [[0, 0], [0, 0.25]]),
    ("fmax(sqrt(x), 1)", lambda s: np.fmax(np.sqrt(s), 1.0), [[0, 0], [0, 0.25]]),
    ("minimum(-sqrt(x), -1)", lambda s: np.minimum(-np.sqrt(s), -1.0),
     [[0, 0], [0, -0.25]]),
    ("fmin(-sqrt(x), -1)", lambda s: np.fmin(-np.sqrt(s), -1.0), [[0, 0], [0, -0.25]]),
    ("maximum(sqrt(x), 1 - x)", lambda s: np.maximum(np.sqrt(s), 1.0 - s),
     [[-1, 0], [0, 0.25]]),
]


@pytest.mark.parametrize("g, expected", [pytest.param(g, e, id=i) for i, g, e in INF_LEAK])
def test_unselected_infinite_derivative_does_not_leak(g, expected):
    x0 = np.array([0.0, 4.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        result = g(forward.seed(x0))
        _assert_same_values(result.value, g(x0))
    jac = result.dvalue
    assert np.all(np.isfinite(jac.data)), jac.toarray()
    assert_jacobian_equal(result, np.array(expected, dtype=float))


# ---- (i) complex values of a real seed -----------------------------------------------

COMPLEX_OF_REAL = [
    ("abs(x*(1+2j))", lambda s: np.abs(s * (1 + 2j))),
    ("abs-operator", lambda s: abs(s * (1 + 2j) - 0.5j)),
    ("conj(x*(1+2j))", lambda s: np.conjugate(s * (1 + 2j))),
    ("conj(z)*z", lambda s: np.conj(np.exp(1j * s) * (2 + s)) * (s + 1j)),
    ("abs(exp(ix)*(2+x))", lambda s: np.absolute(np.exp(1j * s) * (2 + s * s))),
    ("abs(z)**2+conj(iz)", lambda s: np.abs(s * (3 - 1j)) ** 2 + np.conj(s * 1j)),
]


@pytest.mark.parametrize("shape", [(), (4,), (2, 2)], ids=_shape_id)
@pytest.mark.parametrize("g", [pytest.param(g, id=i) for i, g in COMPLEX_OF_REAL])
def test_non_holomorphic_of_real_seed(g, shape, rng):
    x0 = np.asarray(rng.uniform(0.3, 1.5, shape) * rng.choice([-1.0, 1.0], shape))
    _check(g, x0, "central")


@pytest.mark.parametrize("call", [np.abs, np.absolute, np.conjugate, np.conj, abs],
                         ids=["abs", "absolute", "conjugate", "conj", "builtin-abs"])
def test_non_holomorphic_of_complex_seed_raises(call):
    z = forward.seed(np.array([1.0 + 2.0j, -0.5j]))
    with pytest.raises(TypeError):
        call(z)
    with pytest.raises(TypeError):
        call(z * 2.0 + 1.0)


def test_holomorphic_of_complex_seed(rng):
    z0 = rng.uniform(0.5, 1.5, 4) + 1j * rng.uniform(-0.5, 0.5, 4)
    _check(lambda s: np.exp(s) * np.sqrt(s) - np.log(s[::-1]) ** 2, z0, "central")


# ---- sparsity mode ---------------------------------------------------------------

SPARSITY_CASES = [
    ("sin", lambda s: np.sin(s), (5,)),
    ("multiply-pieces", lambda s: np.multiply(s[:3], s[3:][::-1]), (6,)),
    ("power-bcast", lambda s: np.power(s[:2, np.newaxis] + 1.0, s[2:]), (5,)),
    ("maximum", lambda s: np.maximum(s[:3], s[3:]), (6,)),
    ("fmin-nan", lambda s: np.fmin(s, np.array([np.nan, 0.0, 5.0])), (3,)),
    ("floor", lambda s: np.floor(s) + s[0], (4,)),
    ("add.reduce", lambda s: np.add.reduce(s, axis=0), (2, 3)),
    ("erf", lambda s: sc.erf(s), (2, 2)),
]


@pytest.mark.parametrize("g, shape", [pytest.param(g, sh, id=i)
                                      for i, g, sh in SPARSITY_CASES])
def test_sparsity_pattern_contains_true_pattern(g, shape, rng):
    x0 = rng.uniform(0.5, 1.5, shape)
    result = g(forward.seed_sparsity(x0))
    _assert_same_values(result.value, g(x0))
    true = numerical_jacobian(g, x0, method="central")
    assert_jacobian_equal(result, true, sparsity=True)
    assert result.sparsity.dtype == bool


def test_complex_digamma_is_refused():
    z = forward.seed(np.array([1.5 + 0.5j, 2.0 - 0.1j]))
    with pytest.raises(TypeError, match="scipy.special.digamma"):
        sc.digamma(z)


# ---- regressions found by review -------------------------------------------------

@pytest.mark.parametrize("f", [lambda x: x ** 0, lambda x: x ** 0.0,
                               lambda x: np.float_power(x, 0),
                               lambda x: x ** np.array([0, 2, 0]),
                               lambda x: x[:, None] ** np.arange(3)],
                         ids=["int", "float", "float_power", "array", "polynomial"])
def test_power_zero_is_constant_at_zero(f):
    x0 = np.array([0.0, 1.5, -2.0])
    y = f(forward.seed(x0))
    J = y.dvalue.toarray()
    assert np.isfinite(J).all()
    # the exact Jacobian: d x^k / dx = k x^(k-1), 0 for k = 0
    expected = np.column_stack([
        (f(x0 + 1e-7 * e) - f(x0 - 1e-7 * e)).ravel() / 2e-7 for e in np.eye(3)])
    np.testing.assert_allclose(J, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("g", [lambda s: np.sign(s * (1 + 1j) + 1j),
                               lambda s: np.sign(s + 1j * (s - 0.5)),
                               lambda s: np.sign(s * (0.5 - 2j)) * s],
                         ids=["off-axis", "on-axis", "product"])
def test_sign_of_complex_values_of_a_real_seed(g):
    # sign(z) = z / |z| is a differentiable function of a real seed (away from
    # 0), also where z is real but its imaginary part moves
    x0 = np.array([0.5, -2.0, 1.5])
    assert (np.sign(forward.seed(x0)).dvalue != 0).nnz == 0  # real: piecewise constant
    _check(g, x0, "central")


def test_sign_of_complex_values_of_a_complex_seed_off_the_real_axis_is_refused():
    z = forward.seed(np.array([0.5 + 1j, 2.0]))
    with pytest.raises(sparsegrad.UnsupportedOperationError, match="numpy.sign"):
        np.sign(z)
    # on the real axis: piecewise constant
    y = np.sign(forward.seed(np.array([0.5, -2.0], dtype=complex)))
    np.testing.assert_array_equal(y.dvalue.toarray(), np.zeros((2, 2)))


def test_cast_to_an_integer_result_is_piecewise_constant():
    x = forward.seed(np.array([0.6, 1.7]))
    y = np.multiply(x, 3, dtype=np.int64, casting="unsafe")
    assert y.value.dtype == np.int64
    np.testing.assert_array_equal(y.dvalue.toarray(), np.zeros((2, 2)))
    # an integer seed's own arithmetic keeps its derivative
    k = forward.seed(np.arange(3))
    np.testing.assert_array_equal((k * 2).dvalue.toarray(), 2 * np.eye(3))


def test_ufunc_cast_of_complex_to_real_with_a_complex_seed_is_refused():
    z = forward.seed(np.array([1 + 1j, 2.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        with pytest.raises(sparsegrad.UnsupportedOperationError, match="numpy.multiply"):
            np.multiply(z, 2, dtype=float, casting="unsafe")
        # a real seed through complex values: the real part, exactly
        x = forward.seed(np.array([1.0, 2.0]))
        y = np.multiply(x * (1 + 2j), 2, dtype=float, casting="unsafe")
    np.testing.assert_array_equal(y.dvalue.toarray(), 2 * np.eye(2))


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_matrix_class_operands_of_products_are_refused():
    # numpy gives x * M and x ** M of its np.matrix class matrix meanings: an
    # elementwise result would silently differ from numpy's
    x = forward.seed(np.ones((2, 2)))
    M = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    for call in (lambda: x * M, lambda: M * x, lambda: np.multiply(x, M), lambda: x ** M):
        with pytest.raises(TypeError, match="np.matrix"):
            call()
    # elementwise in numpy too: allowed, the same values
    np.testing.assert_array_equal((x + M).value, np.asarray(np.ones((2, 2)) + M))
    np.testing.assert_array_equal((M @ x).value, np.asarray(M @ np.ones((2, 2))))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("exponent", [2, np.int64(2), 2.0])
def test_square_by_power_has_the_partial_2x_exactly(dtype, exponent):
    # x**2's partial is computed as 2 * x (x**1 is x exactly): the same numbers
    # as exponent * x**(exponent - 1), one pass fewer
    from sparsegrad import forward
    x0 = (np.linspace(-3.0, 3.0, 7) * (1 + 1j if dtype is np.complex128 else 1)).astype(dtype)
    J = (forward.seed(x0) ** exponent).dvalue
    expected = exponent * np.power(x0, exponent - 1)
    np.testing.assert_array_equal(J.diagonal(), expected)
    assert J.nnz == len(x0)


# ---------------------------------------------------------------------------
# operators: straight to the rules for arrays, numbers and forward values,
# through numpy's dispatch for everything else
# ---------------------------------------------------------------------------

class _Refuses:
    """An operand that opts out of numpy's ufuncs: Python's reflected operator decides."""
    __array_ufunc__ = None

    def __mul__(self, other):
        return "refused's product"

    __rmul__ = __mul__


class _Overrides:
    """An operand with its own ``__array_ufunc__``: numpy asks it too."""
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return ("overridden", ufunc.__name__)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "truediv", "pow"])
def test_operators_equal_their_ufuncs(name):
    import operator
    x0 = np.array([0.5, 1.5, 2.0])
    op = getattr(operator, name)
    ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.divide,
             "pow": np.power}[name]
    for other in (2.0, 3, np.array([1.0, 2.0, 0.5]), [1.0, 2.0, 0.5]):
        for reflected in (False, True):
            x = forward.seed(x0)
            got = op(other, x) if reflected else op(x, other)
            x = forward.seed(x0)
            expected = ufunc(other, x) if reflected else ufunc(x, other)
            np.testing.assert_array_equal(got.value, expected.value)
            np.testing.assert_array_equal(got.dvalue.toarray(), expected.dvalue.toarray())
    x = forward.seed(x0)
    y = op(x, x[::-1])
    np.testing.assert_array_equal(y.value, op(x0, x0[::-1]))


def test_operators_leave_other_operands_their_say():
    x = forward.seed(np.array([1.0, 2.0]))
    assert x * _Refuses() == "refused's product"
    assert _Refuses() * x == "refused's product"
    assert _Overrides() * x == ("overridden", "multiply")   # (numpy asks it first)
    with pytest.raises(TypeError, match="numpy.multiply"):   # (as np.multiply(x, other))
        x * _Overrides()
    with pytest.warns(PendingDeprecationWarning):
        matrix = np.matrix([[1.0, 2.0]])
    with pytest.raises(TypeError, match="np.matrix"):
        x * matrix
    y = x * True                                    # (a bool: numpy's rules, one times x)
    np.testing.assert_array_equal(y.dvalue.toarray(), np.eye(2))
