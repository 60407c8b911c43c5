"""Every ufunc, classified once: the elementwise derivative rule table.

Each numpy ufunc (and each supported ``scipy.special`` ufunc) sits in exactly
one category, kept as data:

``DERIVATIVES``
    ufunc -> tuple with one partial derivative per input.  A partial is either
    a number (linear in that input: only the Jacobian's scale changes) or a
    function ``partial(*inputs, out)`` of the input values and the output value
    (so ``exp``, ``sqrt`` and ``tanh`` reuse the output).  ``None`` marks an
    integer argument that must not depend on the seed.
``SELECTIONS``
    ufunc -> ``mask(x, y, out)``, True where the output is taken from the first
    argument (``maximum`` and friends); differentiated by selection, so an
    inf/nan Jacobian entry of the unselected argument never leaks.
``SECOND_WHERE``
    ufunc -> ``mask(x, y, out)``, True where the output is the second argument
    itself and constant elsewhere (``heaviside``); differentiated by selection.
``PIECEWISE_CONSTANT``
    zero derivative wherever defined (``floor``, ``sign``, ...).
``PREDICATES``
    boolean results; forward values are replaced by their values.
``LINEAR_ALGEBRA``
    ufuncs that are array functions in disguise (``matmul``, ``clip``...);
    handled by the function table.
``UNSUPPORTED``
    ufunc -> reason, for a clear ``TypeError``.

``NON_HOLOMORPHIC`` lists the ufuncs that are not complex-differentiable
functions of complex values.  For a real seed their derivative takes the
conjugate of the Jacobian; for a complex seed ``REAL_AXIS`` gives it where
the values lie on the real axis (the derivative of the analytic continuation
of the real function, the complex-step convention), and elsewhere they are
refused.

>>> import numpy as np
>>> DERIVATIVES[np.exp][0](np.array(0.0), np.array(1.0))
array(1.)
"""
import numpy as np

from . import _backend

__all__ = ["Operand", "DERIVATIVES", "SELECTIONS", "SECOND_WHERE", "PIECEWISE_CONSTANT",
           "PREDICATES", "LINEAR_ALGEBRA", "UNSUPPORTED", "NON_HOLOMORPHIC", "REAL_AXIS",
           "classify", "rule_name"]

_SQRT_PI = np.sqrt(np.pi)


def _log(base, like):
    """``log(base)`` in the precision of ``like`` (longdouble needs more than float64)."""
    return np.log(like.dtype.type(base))   # (a numpy scalar: it mixes with CuPy arrays)


def _power_exponent_partial(x, y, out):
    # d(x**y)/dy = x**y log(x); the limit at x == 0 is 0 for y > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(out == 0, 0, out * np.log(np.where(out == 0, 1, x)))


def _power_base_partial(x, y, out):
    # x**0 is constant: its partial is 0, also at x = 0 (where 0 * 0**-1 is nan)
    if getattr(y, "ndim", 0) == 0:
        if y == 2:  # (x**2, the common case: x**1 is x exactly, one pass fewer)
            return y * x
        return y * np.power(x, y - 1) if y != 0 else 0 * x
    return np.where(y == 0, 0, y * np.power(x, y - 1))


class Operand:
    """A partial derivative that is one of the inputs itself (``x * y`` by ``x``
    is ``y``): called like any partial, but computes nothing, so it can
    neither warn nor need floating-point warnings silenced.

    >>> Operand(1)(2.0, 3.0, 6.0)
    3.0
    """

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __call__(self, *inputs_and_out):
        return inputs_and_out[self.index]

    def __repr__(self):
        return "Operand(%d)" % self.index


DERIVATIVES = {
    # ---- arithmetic --------------------------------------------------------
    np.add: (1, 1),
    np.subtract: (1, -1),
    np.multiply: (Operand(1), Operand(0)),
    np.divide: (lambda x, y, out: 1 / y, lambda x, y, out: -out / y),
    np.negative: (-1,),
    np.positive: (1,),
    np.remainder: (1, lambda x, y, out: -np.floor_divide(x, y)),
    # (the quotient of the value: trunc(x / y) can round up to the next integer)
    np.fmod: (1, lambda x, y, out: -np.rint((x - out) / y)),
    np.nextafter: (1, 0),
    np.ldexp: (lambda x, i, out: np.ldexp(np.ones_like(x), i), None),
    # ---- powers and roots --------------------------------------------------
    np.power: (_power_base_partial, _power_exponent_partial),
    np.float_power: (_power_base_partial, _power_exponent_partial),
    np.square: (lambda x, out: 2 * x,),
    np.reciprocal: (lambda x, out: -out * out,),
    np.sqrt: (lambda x, out: 0.5 / out,),
    np.cbrt: (lambda x, out: 1 / (3 * out * out),),
    # ---- exponentials and logarithms ---------------------------------------
    np.exp: (lambda x, out: out,),
    np.exp2: (lambda x, out: out * _log(2, out),),
    np.expm1: (lambda x, out: out + 1,),
    np.log: (lambda x, out: 1 / x,),
    np.log2: (lambda x, out: 1 / (x * _log(2, out)),),
    np.log10: (lambda x, out: 1 / (x * _log(10, out)),),
    np.log1p: (lambda x, out: 1 / (1 + x),),
    np.logaddexp: (lambda x, y, out: np.exp(x - out), lambda x, y, out: np.exp(y - out)),
    np.logaddexp2: (lambda x, y, out: np.exp2(x - out),
                    lambda x, y, out: np.exp2(y - out)),
    # ---- trigonometric -----------------------------------------------------
    np.sin: (lambda x, out: np.cos(x),),
    np.cos: (lambda x, out: -np.sin(x),),
    np.tan: (lambda x, out: 1 + out * out,),
    np.arcsin: (lambda x, out: 1 / np.sqrt(1 - x * x),),
    np.arccos: (lambda x, out: -1 / np.sqrt(1 - x * x),),
    np.arctan: (lambda x, out: 1 / (1 + x * x),),
    np.arctan2: (lambda y, x, out: x / (x * x + y * y),
                 lambda y, x, out: -y / (x * x + y * y)),
    np.hypot: (lambda x, y, out: x / out, lambda x, y, out: y / out),
    np.deg2rad: (np.pi / 180,),
    np.radians: (np.pi / 180,),
    np.rad2deg: (180 / np.pi,),
    np.degrees: (180 / np.pi,),
    # ---- hyperbolic --------------------------------------------------------
    np.sinh: (lambda x, out: np.cosh(x),),
    np.cosh: (lambda x, out: np.sinh(x),),
    np.tanh: (lambda x, out: 1 - out * out,),
    np.arcsinh: (lambda x, out: 1 / np.sqrt(x * x + 1),),
    np.arccosh: (lambda x, out: 1 / (np.sqrt(x - 1) * np.sqrt(x + 1)),),
    np.arctanh: (lambda x, out: 1 / (1 - x * x),),
    # ---- absolute value and sign transfer (real arguments) -----------------
    np.absolute: (lambda x, out: np.sign(x),),
    np.fabs: (lambda x, out: np.sign(x),),
    np.conjugate: (1,),
    np.copysign: (lambda x, y, out: np.where(np.signbit(x) == np.signbit(y), 1.0, -1.0),
                  0),
}

NON_HOLOMORPHIC = frozenset([np.absolute, np.conjugate, np.sign])

#: ufunc -> its derivative at complex values ``x`` on the real axis, for a
#: complex seed: that of the real function's analytic continuation there,
#: ``sign(x) x`` for ``|x|``, ``x`` for ``conj(x)``, a constant for ``sign(x)``
#: (a number, or a function of ``x``).  0.0.15 gave ``abs`` of such values the
#: derivative ``sign(x)``, and complex-step users rely on it.
REAL_AXIS = {
    np.absolute: lambda x: np.sign(x.real),
    np.conjugate: 1,
    np.sign: 0,
}

# (comparisons by ufunc call, not operator: a numpy scalar's operator hands the
# ufunc a 0-d host array, which a CuPy array beside it refuses)
SELECTIONS = {
    # nan propagates from whichever argument holds it
    np.maximum: lambda x, y, out: np.greater_equal(x, y) | np.isnan(x),
    np.minimum: lambda x, y, out: np.less_equal(x, y) | np.isnan(x),
    # nan is ignored when the other argument is a number
    np.fmax: lambda x, y, out: np.greater_equal(x, y) | np.isnan(y),
    np.fmin: lambda x, y, out: np.less_equal(x, y) | np.isnan(y),
}

#: ufunc -> mask(x, y, out), True where the output is the second argument itself;
#: elsewhere it is constant (in both arguments).  Differentiated by selection, as
#: ``SELECTIONS``: no inf/nan of the second argument's Jacobian leaks.
SECOND_WHERE = {
    np.heaviside: lambda x, h, out: x == 0,  # 0 for x < 0, h at 0, 1 for x > 0
}

PIECEWISE_CONSTANT = frozenset([
    np.floor, np.ceil, np.trunc, np.rint, np.sign, np.floor_divide, np.spacing,
])

PREDICATES = frozenset([
    np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
    np.logical_and, np.logical_or, np.logical_xor, np.logical_not,
    np.isfinite, np.isinf, np.isnan, np.isnat, np.signbit,
])

LINEAR_ALGEBRA = frozenset(f for f in (np.matmul, np.vecdot, getattr(np, "matvec", None),
                                       getattr(np, "vecmat", None), np._core.umath.clip)
                           if f is not None)

_INTEGER_ONLY = "defined for integers only, which carry no derivative"
_STRINGS = "a string operation"
UNSUPPORTED = {
    np.divmod: "two outputs; use np.floor_divide and np.remainder",
    np.modf: "two outputs; use np.trunc and np.fmod",
    np.frexp: "two outputs (mantissa and exponent)",
    np.gcd: _INTEGER_ONLY, np.lcm: _INTEGER_ONLY, np.bitwise_and: _INTEGER_ONLY,
    np.bitwise_or: _INTEGER_ONLY, np.bitwise_xor: _INTEGER_ONLY,
    np.bitwise_count: _INTEGER_ONLY, np.invert: _INTEGER_ONLY,
    np.left_shift: _INTEGER_ONLY, np.right_shift: _INTEGER_ONLY,
    np._core.umath._ones_like: "an internal numpy helper",
}
for _name in ("_center _expandtabs _expandtabs_length _ljust _lstrip_chars "
              "_lstrip_whitespace _partition _partition_index _replace _rjust "
              "_rpartition _rpartition_index _rstrip_chars _rstrip_whitespace _slice "
              "_strip_chars _strip_whitespace _zfill count endswith find index isalnum "
              "isalpha isdecimal isdigit islower isnumeric isspace istitle isupper "
              "rfind rindex startswith str_len").split():
    UNSUPPORTED[getattr(np._core.umath, _name)] = _STRINGS


# ---- scipy.special ufuncs, dispatched through the same tables ---------------
def _trigamma(x, out):
    import scipy.special as sc
    if np.iscomplexobj(x):  # scipy's polygamma has no complex loop
        from ._errors import unsupported
        raise unsupported("scipy.special.digamma", "no derivative for complex arguments")
    if _backend.of(x) is not _backend.CPU:
        # scipy's polygamma is a Python function of host arrays (and CuPy's fails
        # for a Python int order); polygamma(1, x) is computed as zeta(2, x) by
        # both, and zeta is a ufunc, which device arrays implement (CuPy's under
        # cupyx: it does not map scipy's zeta)
        if _backend.is_cupy(x):
            import cupyx.scipy.special
            return cupyx.scipy.special.zeta(2.0, x)
        return sc.zeta(2.0, x)
    return sc.polygamma(1, x)


class SpecialUfuncs:
    """``scipy.special``'s ufuncs by name (AttributeError for its other names):
    where SciPy's array API support wraps them in Python functions
    (``SCIPY_ARRAY_API=1``), the ufuncs those wrap, which numpy dispatches to
    forward values."""

    def __init__(self, special):
        self._special = special

    def __getattr__(self, name):
        public = getattr(self._special, name)
        ufunc = public if isinstance(public, np.ufunc) else getattr(public, "__wrapped__", None)
        if not isinstance(ufunc, np.ufunc):
            raise AttributeError("scipy.special.%s is not a ufunc" % name)
        return ufunc


def _add_scipy_special():
    try:
        import scipy.special
    except ImportError:  # scipy is a dependency, but the tables must not need it
        return
    sc = SpecialUfuncs(scipy.special)
    two_over_sqrt_pi = 2 / _SQRT_PI
    inv_sqrt_2pi = 1 / np.sqrt(2 * np.pi)
    DERIVATIVES.update({
        sc.erf: (lambda x, out: two_over_sqrt_pi * np.exp(-x * x),),
        sc.erfc: (lambda x, out: -two_over_sqrt_pi * np.exp(-x * x),),
        sc.erfcx: (lambda x, out: 2 * x * out - two_over_sqrt_pi,),
        sc.erfinv: (lambda x, out: _SQRT_PI / 2 * np.exp(out * out),),
        sc.erfcinv: (lambda x, out: -_SQRT_PI / 2 * np.exp(out * out),),
        sc.dawsn: (lambda x, out: 1 - 2 * x * out,),
        sc.expit: (lambda x, out: out * (1 - out),),
        sc.log_expit: (lambda x, out: sc.expit(-x),),
        sc.logit: (lambda x, out: 1 / (x * (1 - x)),),
        sc.ndtr: (lambda x, out: inv_sqrt_2pi * np.exp(-x * x / 2),),
        sc.log_ndtr: (lambda x, out: inv_sqrt_2pi * np.exp(-x * x / 2 - out),),
        sc.xlogy: (lambda x, y, out: np.log(y), lambda x, y, out: x / y),
        sc.xlog1py: (lambda x, y, out: np.log1p(y), lambda x, y, out: x / (1 + y)),
        sc.gammaln: (lambda x, out: sc.digamma(x),),
        sc.gamma: (lambda x, out: out * sc.digamma(x),),
        sc.digamma: (_trigamma,),
        sc.entr: (lambda x, out: -np.log(x) - 1,),
        sc.i0: (lambda x, out: sc.i1(x),),
        sc.j0: (lambda x, out: -sc.j1(x),),
        sc.expm1: (lambda x, out: out + 1,),
        sc.log1p: (lambda x, out: 1 / (1 + x),),
        sc.exp2: (lambda x, out: out * _log(2, out),),
        sc.exp10: (lambda x, out: out * _log(10, out),),
        sc.cbrt: (lambda x, out: 1 / (3 * out * out),),
    })


_add_scipy_special()


def rule_name(ufunc):
    """``numpy.exp`` / ``scipy.special.erf``: how errors name a ufunc."""
    name = ufunc.__name__
    if getattr(np, name, None) is ufunc:
        return "numpy." + name
    if getattr(np._core.umath, name, None) is ufunc:
        return "numpy._core.umath." + name
    return "scipy.special." + name


def classify(ufunc):
    """The category name of ``ufunc`` (``'unclassified'`` if it is in none)."""
    # (looked up in the tables at every call, a few dict lookups on the
    # general path only: a memo of the answers gained nothing measurable)
    for name, table in (("differentiable", DERIVATIVES), ("selection", SELECTIONS),
                        ("selection", SECOND_WHERE),
                        ("piecewise_constant", PIECEWISE_CONSTANT),
                        ("predicate", PREDICATES), ("linear_algebra", LINEAR_ALGEBRA),
                        ("unsupported", UNSUPPORTED)):
        if ufunc in table:
            return name
    return "unclassified"


def _check_arity():
    for ufunc, partials in DERIVATIVES.items():
        if len(partials) != ufunc.nin:
            raise AssertionError("rule for %s has %d partials, ufunc takes %d inputs"
                                 % (ufunc.__name__, len(partials), ufunc.nin))
    for ufunc in list(SELECTIONS) + list(SECOND_WHERE):
        assert ufunc.nin == 2, ufunc


_check_arity()
