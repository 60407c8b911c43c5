"""What sparsegrad must agree with on a drawn program.

``general`` programs: the value is numpy's run of the same source on plain
arrays, bit for bit and of the same dtype; the Jacobian matches the complex
step (programs that are analytic, real dtypes) and central differences
(:mod:`sparsegrad.testing`), with one-sided differences at kinks; the pattern
of ``forward.seed_sparsity`` holds every stored entry and equals the pattern
at other values; ``sparsegrad.jvp`` gives ``J @ v``; the recorded engine
(``trace=True``) gives the eager engine's value and Jacobian bit for bit.

``recorded`` programs: one function object called at points of changing
shapes and values (1-d, or n-d arguments: the Jacobian's columns follow
``x.ravel()``), by both engines, every call checked as above (value, complex
step, recorded against eager).

``unsupported`` programs: every mode raises a ``TypeError``.

Hessians, of a third of the float64 programs of both families (at the first
point): of ``s(x) = sum(y) + sum(y * y) / 2`` for the program's ``y = f(x)``,
``sparsegrad.value_grad_and_hessian`` gives numpy's value of ``s`` bit for
bit, the gradient of ``sparsegrad.gradient`` (forward mode) to rounding, and
a Hessian that matches the complex step and central differences of that
gradient, symmetric bit for bit, inside ``hessian_sparsity``, ``hvp``'s
products, and the same bits by both engines; or it refuses with a
``TypeError`` naming what it does not differentiate twice.
"""
import collections
import re
import traceback

import numpy as np
import scipy.sparse as sp

import sparsegrad
from sparsegrad import forward
from sparsegrad.testing import assert_jacobian_equal, numerical_jacobian

from .programs import ND_TAGS, quiet

#: oracle names, in the order they are checked
ORACLES = ("exception", "value", "jacobian", "pattern", "pattern_values", "jvp", "trace",
           "refusal", "hessian", "harness")

#: tags under which the complex step is not the derivative
NOT_ANALYTIC = frozenset({"complex_intermediate"})

#: tags under which numpy's own values are only right to rounding: numpy
#: multiplies complex scalars by its scalar math, complex 0-d arrays by its
#: loops (fused multiply-adds where the processor has them), and
#: ``np.square`` of one complex128 scalar by either, from one call to the
#: next; sparsegrad's values are 0-d arrays
NUMPY_ROUNDING = frozenset({"complex_0d_arithmetic", "complex_inplace_element"})

#: relative tolerances (complex step, central differences) by dtype of the point
TOLERANCES = {np.dtype(np.float64): (1e-9, 1e-5), np.dtype(np.longdouble): (1e-12, 1e-7),
              np.dtype(np.complex128): (None, 1e-5), np.dtype(np.float32): (2e-3, 2e-3)}


class Mismatch:
    """One disagreement: the oracle, a message and the call (recorded programs)."""

    def __init__(self, oracle, message, call=None):
        self.oracle = oracle
        self.message = message
        self.call = call

    def __repr__(self):
        where = "" if self.call is None else " (call %d)" % self.call
        return "%s%s: %s" % (self.oracle, where, self.message)


class Outcome:
    """The mismatches of one program and the counts of what was checked."""

    def __init__(self):
        self.mismatches = []
        self.counts = collections.Counter()

    def fail(self, oracle, message, call=None):
        self.mismatches.append(Mismatch(oracle, message, call))

    @property
    def ok(self):
        return not self.mismatches


def _short(array):
    return np.array2string(np.asarray(array), precision=6, threshold=12, edgeitems=3,
                           max_line_width=100).replace("\n", "")


def _value_difference(got, expected):
    """Why ``got`` is not numpy's ``expected`` bit for bit, or None."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return "%s %s, numpy gives %s %s" % (got.dtype, got.shape, expected.dtype,
                                              expected.shape)
    if not np.array_equal(got, expected, equal_nan=True):
        differ = np.flatnonzero(~((got == expected) | (got != got) & (expected != expected)))
        return "differs at %d of %d elements, first at %d: got %s, numpy %s (got %s, numpy " \
               "%s)" % (differ.size, got.size, differ[0], got.ravel()[differ[0]],
                        expected.ravel()[differ[0]], _short(got), _short(expected))
    return None


def _numpy_difference(program, got, expected):
    """Why ``got`` is not numpy's ``expected``: bit for bit, or to a rounding
    of numpy's scalar math where the program has a tag of :data:`NUMPY_ROUNDING`."""
    why = _value_difference(got, expected)
    if why is None or not program.tags & NUMPY_ROUNDING:
        return why
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return why
    eps = np.finfo(expected.dtype).eps
    finite = np.isfinite(expected)
    scale = float(np.max(np.abs(expected[finite]), initial=1.0))
    close = np.isclose(got, expected, rtol=64 * eps, atol=64 * eps * scale, equal_nan=True)
    return None if np.all(close) else why


def _pattern(matrix):
    """The stored entries of a sparse matrix as a dense boolean array."""
    matrix = sp.csr_matrix(matrix)
    stored = np.zeros(matrix.shape, dtype=bool)
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    stored[rows, matrix.indices] = True
    return stored


def _malformed(matrix):
    """Why ``matrix``, a Jacobian handed out, is not a valid CSR matrix (scipy's
    compiled routines, ``toarray`` among them, would read and write out of
    bounds), or None; checked before any of them sees it."""
    if not sp.issparse(matrix) or matrix.format != "csr":
        return None
    indptr, indices = matrix.indptr, matrix.indices
    if (len(indptr) != matrix.shape[0] + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0)
            or indptr[-1] != len(indices) or len(matrix.data) != len(indices)):
        return "a malformed CSR matrix (indptr %s, %d indices, %d values)" % (
            _short(indptr), len(indices), len(matrix.data))
    if len(indices) and (indices.min() < 0 or indices.max() >= matrix.shape[1]):
        return "a column index out of range: %d to %d of %d columns" % (
            indices.min(), indices.max(), matrix.shape[1])
    return None


def _canonical(matrix):
    matrix = sp.csr_matrix(matrix, copy=True)
    matrix.has_sorted_indices = False
    matrix.sort_indices()
    return matrix


def _same_matrix(a, b):
    """Why two sparse Jacobians are not the same bit for bit (NaN equal to NaN), or None."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return "%s %s against %s %s" % (a.dtype, a.shape, b.dtype, b.shape)
    a, b = _canonical(a), _canonical(b)
    if not np.array_equal(a.indptr, b.indptr) or not np.array_equal(a.indices, b.indices):
        return "patterns differ (%d and %d stored entries)" % (a.nnz, b.nnz)
    if not np.array_equal(a.data, b.data, equal_nan=True):
        k = int(np.flatnonzero(~((a.data == b.data) | (a.data != a.data)
                                 & (b.data != b.data)))[0])
        row = int(np.searchsorted(a.indptr, k, side="right") - 1)
        return "entry (%d, %d): %r against %r" % (row, a.indices[k], a.data[k], b.data[k])
    return None


def _first_difference(dense, reference, rtol, atol):
    with quiet():
        bad = ~(np.abs(dense - reference) <= atol + rtol * np.abs(reference))
    if not bad.any():
        return ""
    row, col = np.argwhere(bad)[0]
    return "; %d entries off, first (%d, %d): sparsegrad %r, reference %r" % (
        bad.sum(), row, col, dense[row, col].item(), reference[row, col].item())


def _one_sided(f, x, step, sign):
    """One-sided differences in double precision (or longdouble), column by column."""
    x = np.asarray(x)
    work = np.result_type(x.dtype, np.float64)
    flat = x.astype(work).ravel()
    f0 = np.asarray(f(flat.reshape(x.shape).copy())).ravel()
    columns = []
    for j in range(flat.size):
        moved = flat.copy()
        h = step * max(1.0, abs(flat[j]))
        moved[j] += sign * h
        width = (moved[j] - flat[j]) * sign
        columns.append((np.asarray(f(moved.reshape(x.shape))).ravel() - f0) / width * 1.0)
    return np.stack(columns, axis=1) if columns else np.zeros((f0.size, 0))


def _kink_explains(f, x, dense, rtol):
    """Whether every entry agrees with the left or the right derivative (a
    kink within the central differences' step)."""
    with quiet():
        right = _one_sided(f, x, 1e-8, 1.0)
        left = _one_sided(f, x, 1e-8, -1.0)
    scale = max(1.0, float(np.max(np.abs(np.concatenate([right, left])), initial=0.0)))
    tol = max(rtol, 1e-4) * scale
    return bool(np.all((np.abs(dense - right) <= tol) | (np.abs(dense - left) <= tol)))


def _check_jacobian(program, f, x, y, outcome, call=None, oracle="jacobian"):
    """``y``'s Jacobian against the complex step and central differences at ``x``."""
    if not program.finite_at(x):
        # (an inf or nan on the way, at a later point of a recorded program: the
        # chain rule's 0 * inf is nan where the differences see a constant)
        outcome.counts["jacobian skipped (not finite)"] += 1
        return
    cs_rtol, fd_rtol = TOLERANCES[program.dtype]
    value = np.asarray(y.value)
    with quiet():
        try:
            central = numerical_jacobian(f, x, method="central")
        except ValueError:
            central = np.full((1, 1), np.nan)     # (a step lost in rounding)
    references = []
    if (cs_rtol is not None and value.dtype.kind != "c"
            and not program.tags & NOT_ANALYTIC):
        with quiet():
            try:
                step = numerical_jacobian(f, x, method="complex")
            except (TypeError, ValueError):
                step = None     # (a scipy.special function without complex loops)
        if step is not None and np.all(np.isfinite(step)):
            references.append((step, cs_rtol, "the complex step"))
    if np.all(np.isfinite(central)):
        references.append((central, fd_rtol, "central differences"))
    if not references:
        outcome.counts["jacobian skipped (not finite)"] += 1
        return
    if call:
        # (later points of recorded programs may meet a derivative's own
        # singularity, sqrt at 0: the chain rule's inf * 0 is nan where the
        # differences see a constant)
        with quiet():
            dense = y.dvalue.toarray()
        if not np.all(np.isfinite(dense)):
            outcome.counts["jacobian skipped (not finite)"] += 1
            return
    # agreeing with one reference is enough: each can be off where the other is
    # not (the complex step breaking a tie of a comparison by its imaginary
    # part, or where the real program takes a nan; central differences across a
    # kink or at the ill-conditioned values of recorded programs' later points)
    failures = []
    for reference, rtol, name in references:
        why = _jacobian_difference(y, reference, rtol, np.iscomplexobj(x))
        if why is None:
            outcome.counts["%s by %s" % (oracle, name)] += 1
            return
        if why.startswith("Jacobian differs"):
            second = _second_look(program, f, x, y, reference, rtol, name)
            if second == "agrees":
                outcome.counts["jacobian by %s, at a second look" % name] += 1
                return
            if second == "unreliable":
                outcome.counts["jacobian: %s unreliable" % name] += 1
                continue
        failures.append("against %s: %s" % (name, why))
    if failures:
        outcome.fail(oracle, "; ".join(failures), call)


def _jacobian_difference(y, reference, rtol, complex_seed):
    """Why ``y``'s Jacobian is not ``reference`` to ``rtol``, or None (a complex
    seed's Jacobians are complex, of real values too)."""
    scale = max(1.0, float(np.max(np.abs(reference), initial=0.0)))
    try:
        with quiet():
            assert_jacobian_equal(y, reference, rtol=rtol, atol=rtol * scale,
                                  complex_seed=complex_seed)
    except AssertionError as exc:
        text = str(exc).strip()
        message = ("Jacobian differs" if "Jacobian differs from the reference" in text
                   else text.replace("\n", " ")[:300])
        dense = y.dvalue.toarray() if sp.issparse(y.dvalue) else None
        if dense is None or dense.shape != reference.shape:
            return message
        return message + _first_difference(dense, reference, rtol, rtol * scale)
    return None


def _second_look(program, f, x, y, reference, rtol, name):
    """``"agrees"``, ``"unreliable"`` (the reference is not to be trusted at
    this point) or None (a real difference), for a Jacobian off ``reference``.

    The complex step is exact, but of the program's complex arithmetic, whose
    real parts round otherwise than the real program's: where the derivative
    is ill-conditioned (``sin`` of a large argument) that moves it, so it is
    taken again in extended precision.  Central differences are taken again
    with a quarter of the step: agreeing with those is enough, and a
    reference that moves with its step is no reference.  At a kink the left
    or the right derivative is the answer.
    """
    dense = y.dvalue.toarray()
    scale = max(1.0, float(np.max(np.abs(reference), initial=0.0)))
    with quiet():
        if name == "the complex step":
            if x.dtype != np.float64:
                return None
            try:
                extended = numerical_jacobian(f, x.astype(np.longdouble), method="complex")
            except (TypeError, ValueError):
                return None
            return "agrees" if np.all(np.abs(dense - extended) <= rtol * (
                np.abs(extended) + scale)) else None
        work = np.result_type(x.dtype, np.float64)
        step = np.cbrt(np.finfo(work).eps) * np.maximum(1, np.abs(x.astype(work)))
        try:
            finer = numerical_jacobian(f, x, method="central", step=step / 4)
        except ValueError:
            return "unreliable"
        if np.all(np.abs(dense - finer) <= rtol * (np.abs(finer) + scale)):
            return "agrees"
        if not np.all(np.abs(finer - reference) <= rtol * (np.abs(reference) + scale)):
            return "unreliable"
    if "nonsmooth" in program.tags and _kink_explains(f, x, dense, rtol):
        return "agrees"
    return None


def _elsewhere(x):
    """Other values at the shape of ``x``: some signs flipped, magnitudes changed."""
    rng = np.random.default_rng(x.size)
    return (x * np.where(rng.random(x.shape) < 0.4, -1.0, 1.0)
            * rng.uniform(0.5, 1.5, x.shape)).astype(x.dtype)


def _check_pattern(program, f, x, y, expected, outcome):
    with quiet():
        s = f(forward.seed_sparsity(x.copy()))
        why = _numpy_difference(program, s.value, expected)
    if why:
        outcome.fail("pattern_values", "seed_sparsity's value " + why)
    why = _malformed(s.sparsity)
    if why:
        outcome.fail("structure", "seed_sparsity's pattern: " + why)
        return
    stored = _pattern(y.dvalue)
    pattern = _pattern(s.sparsity)
    if pattern.shape != stored.shape:
        outcome.fail("pattern", "seed_sparsity's pattern has shape %s, the Jacobian %s"
                     % (pattern.shape, stored.shape))
        return
    missing = stored & ~pattern
    if missing.any():
        row, col = np.argwhere(missing)[0]
        outcome.fail("pattern", "%d stored entries of the Jacobian missing from "
                     "seed_sparsity's pattern, first (%d, %d)" % (missing.sum(), row, col))
    elif (pattern & ~stored).any():
        outcome.fail("pattern", "seed_sparsity's pattern has %d entries the Jacobian does "
                     "not store" % (pattern & ~stored).sum())
    outcome.counts["pattern"] += 1


def _check_pattern_elsewhere(f, x, y, outcome):
    """The pattern does not depend on the values."""
    point = _elsewhere(x)
    with quiet():
        try:
            f(point.copy())
        except Exception:
            return      # (numpy refuses it too: a read by values' mask, another shape)
        other = f(forward.seed(point))
    if not isinstance(other, forward.value) or other.value.shape != y.value.shape:
        return      # (a boolean-mask read by values: another shape)
    if not np.array_equal(_pattern(other.dvalue), _pattern(y.dvalue)):
        outcome.fail("pattern", "the pattern at other values differs (%d and %d entries)"
                     % (_pattern(other.dvalue).sum(), _pattern(y.dvalue).sum()))


def _check_jvp(program, f, x, y, expected, outcome):
    rng = np.random.default_rng(program.seed)
    v = rng.standard_normal(x.shape)
    if x.dtype.kind == "c":
        v = v + 1j * rng.standard_normal(x.shape)
    v = v.astype(x.dtype)
    with quiet():
        value, derivative = sparsegrad.jvp(f, x.copy(), v)
    why = _numpy_difference(program, value, expected)
    if why:
        outcome.fail("jvp", "value " + why)
        return
    J = sp.csr_matrix(y.dvalue)
    with quiet():
        product = np.asarray(J @ v.ravel()).reshape(np.shape(expected))
        bound = np.asarray(abs(J) @ np.abs(v.ravel())).reshape(np.shape(expected))
    derivative = np.asarray(derivative)
    if derivative.shape != product.shape:
        outcome.fail("jvp", "derivative of shape %s, J @ v %s" % (derivative.shape,
                                                                  product.shape))
        return
    # (a float32 seed's derivatives are rounded to float32 where its values are,
    # even when the result is promoted; and both sides round the terms of an
    # entry before they cancel, hence a share of the largest product too)
    eps = max(np.finfo(J.dtype).eps, np.finfo(x.dtype).eps)
    with quiet():
        tol = 64 * eps * (bound + max(1.0, float(np.max(bound, initial=0.0))))
        close = (np.abs(derivative - product) <= tol) | (
            np.isnan(derivative) & np.isnan(product)) | (derivative == product)
    if not close.all():
        k = int(np.flatnonzero(~close.ravel())[0])
        outcome.fail("jvp", "J @ v differs at %d of %d, first at %d: jvp %r, J @ v %r"
                     % ((~close).sum(), close.size, k, derivative.ravel()[k],
                        product.ravel()[k]))
    outcome.counts["jvp"] += 1


def _engines_agree(f, eager, recorded, x, outcome, call=None, first="eager"):
    """The recorded engine's value and Jacobian are the eager engine's, bit for bit."""
    results = {}
    for name in ((first, "recorded") if first == "eager" else ("recorded", "eager")):
        engine = eager if name == "eager" else recorded
        try:
            with quiet():
                results[name] = engine(x.copy())
        except Exception as exc:
            results[name] = exc
    e, r = results["eager"], results["recorded"]
    for name in ("eager", "recorded"):
        why = None if isinstance(results[name], Exception) else _malformed(results[name][1])
        if why:
            outcome.fail("structure", "%s: %s" % (name, why), call)
            results[name] = ValueError(why)
    e, r = results["eager"], results["recorded"]
    if isinstance(e, Exception) or isinstance(r, Exception):
        if type(e) is not type(r):
            outcome.fail("trace", "eager %s, recorded %s" % (
                type(e).__name__ if isinstance(e, Exception) else "returned",
                "%s: %s" % (type(r).__name__, r) if isinstance(r, Exception) else "returned"),
                call)
        return results
    why = _value_difference(r[0], e[0])
    if why is None:
        why = _same_matrix(r[1], e[1])
    if why:
        outcome.fail("trace", "recorded against eager: " + why, call)
    outcome.counts["trace"] += 1
    return results


def _general(program, outcome):
    f = program.function()
    x = program.points[0]
    with quiet():
        expected = f(x.copy())
    try:
        with quiet():
            y = f(forward.seed(x.copy()))
    except Exception as exc:
        outcome.fail("exception", "%s: %s" % (type(exc).__name__, str(exc)[:300]))
        return
    got = y.value if isinstance(y, forward.value) else y
    why = _numpy_difference(program, got, expected)
    if why:
        outcome.fail("value", why)
    outcome.counts["value"] += 1
    if not isinstance(y, forward.value):
        outcome.counts["result without derivative"] += 1
        return
    why = _malformed(y.dvalue)
    if why:
        outcome.fail("structure", why)
        return
    checks = [("jacobian", lambda: _check_jacobian(program, f, x, y, outcome)),
              ("seed_sparsity", lambda: _check_pattern(program, f, x, y, expected, outcome)),
              # (the other values may take abs and sign off the real axis)
              ("seed at other values", lambda: program.tags & {"value_mask_read",
                                                                "complex_real_axis"}
               or _check_pattern_elsewhere(f, x, y, outcome)),
              ("jvp", lambda: _check_jvp(program, f, x, y, expected, outcome))]
    if program.dtype == np.float64:
        checks.append(("value_and_jacobian", lambda: _check_engines(f, x, outcome)))
        checks.append(("hessian", lambda: _check_hessian(program, f, x, outcome)))
    for mode, run in checks:
        try:
            run()
        except Exception as exc:
            outcome.fail("exception", "%s: %s: %s" % (mode, type(exc).__name__,
                                                       str(exc)[:300]))


def _objective(f):
    """The scalar ``s(x)`` whose Hessian is checked: every output of ``f`` enters
    it linearly and squared, so every second derivative of ``f`` shows."""
    def s(x):
        y = f(x)
        return np.sum(y) + np.sum(y * y) / 2
    return s


def _check_hessian(program, f, x, outcome):
    """The Hessian oracles (module docstring) for one float64 point."""
    if program.seed % 3 or not program.finite_at(x):
        return
    s = _objective(f)
    with quiet():
        expected = s(x.copy())
    if np.ndim(expected) != 0 or np.asarray(expected).dtype != np.float64:
        return
    try:
        with quiet():
            value, gradient, H = sparsegrad.value_grad_and_hessian(s, trace=False)(x.copy())
    except TypeError as exc:
        outcome.counts["hessian refused: %s" % re.sub(r"\d+", "#", str(exc))[:60]] += 1
        return
    except Exception as exc:
        outcome.fail("hessian", "%s: %s" % (type(exc).__name__, str(exc)[:300]))
        return
    outcome.counts["hessian"] += 1
    why = _value_difference(value, expected)
    if why:
        outcome.fail("hessian", "the value " + why)
    forward_gradient = sparsegrad.gradient(s, trace=False)
    with quiet():
        reference = forward_gradient(x.copy())
    scale = max(1.0, float(np.max(np.abs(reference), initial=0.0)))
    if not np.all(np.abs(gradient - reference) <= 1e-12 * scale + 1e-12 * np.abs(reference)):
        outcome.fail("hessian", "the gradient differs from forward mode's: %s against %s"
                     % (_short(gradient), _short(reference)))
    _check_jacobian(program, forward_gradient, x, _Evaluated(gradient, H), outcome,
                    oracle="hessian")
    transposed = H.T.tocsr()
    transposed.sort_indices()
    if not (np.array_equal(transposed.indptr, H.indptr)
            and np.array_equal(transposed.indices, H.indices)
            and np.array_equal(transposed.data, H.data, equal_nan=True)):
        outcome.fail("hessian", "not symmetric bit for bit")
    with quiet():
        pattern = sparsegrad.hessian_sparsity(s, x.copy())
        recorded = sparsegrad.hessian(s, trace=True)(x.copy())
        v = np.linspace(-1.0, 1.0, x.size).reshape(x.shape)
        product = sparsegrad.hvp(s)(x.copy(), v)
        dense = H.toarray()
        expected_product = dense @ v.ravel()
    if (_pattern(H) & ~_pattern(pattern)).any():
        outcome.fail("hessian", "hessian_sparsity misses stored entries")
    if not (np.array_equal(recorded.indices, H.indices)
            and np.array_equal(recorded.data, H.data, equal_nan=True)):
        outcome.fail("hessian", "trace=True gives other bits than trace=False")
    size = max(1.0, float(np.max(np.abs(dense), initial=0.0))) * x.size
    if np.all(np.isfinite(dense)) and not np.all(
            np.abs(product.ravel() - expected_product) <= 1e-10 * size):
        outcome.fail("hessian", "hvp gives %s, H @ v %s" % (_short(product),
                                                           _short(expected_product)))


def _check_engines(f, x, outcome):
    eager = sparsegrad.value_and_jacobian(f, trace=False)
    recorded = sparsegrad.value_and_jacobian(f, trace=True)
    for k, point in enumerate((x, _elsewhere(x), x)):
        _engines_agree(f, eager, recorded, point, outcome, k)
    info = recorded.cache_info()
    outcome.counts["recorded calls: compiled or by a program"] += info.misses + info.hits


def _recorded(program, outcome):
    f = program.function()
    eager = sparsegrad.value_and_jacobian(f, trace=False)
    recorded = sparsegrad.value_and_jacobian(f, trace=True)
    first = "recorded" if program.seed % 2 else "eager"
    for k, x in enumerate(program.points):
        with quiet():
            expected = f(x.copy())
        results = _engines_agree(f, eager, recorded, x, outcome, k, first)
        e = results["eager"]
        if isinstance(e, Exception):
            outcome.fail("exception", "%s: %s" % (type(e).__name__, str(e)[:300]), k)
            continue
        why = _numpy_difference(program, e[0], expected)
        if why:
            outcome.fail("value", why, k)
            continue
        if np.all(np.isfinite(expected)):
            y = _Evaluated(e[0], e[1])
            _check_jacobian(program, f, x, y, outcome, k)
    _check_hessian(program, f, program.points[0], outcome)
    info = recorded.cache_info()
    outcome.counts["recorded calls: compiled"] += info.misses
    outcome.counts["recorded calls: by a program"] += info.hits
    outcome.counts["recorded calls: eager"] += info.fallbacks
    if program.points[0].ndim > 1 or program.tags & ND_TAGS:
        # (the programs of n-d values and basic reads, on their own: how many
        # of their calls were recorded)
        outcome.counts["n-d recorded calls: compiled"] += info.misses
        outcome.counts["n-d recorded calls: by a program"] += info.hits
        outcome.counts["n-d recorded calls: eager"] += info.fallbacks
    if info.fallbacks:
        outcome.counts["recorded programs eager by: %s" % re.sub(
            r"\d+", "#", str(info.reason))[:50]] += 1


class _Evaluated:
    """A value and Jacobian in the shape of a forward value, for the oracles."""

    def __init__(self, value, dvalue):
        self.value = value
        self.dvalue = dvalue


def _unsupported(program, outcome):
    f = program.function()
    x = program.points[0]
    modes = {"seed": lambda: f(forward.seed(x.copy())),
             "seed_sparsity": lambda: f(forward.seed_sparsity(x.copy())).value,
             "jvp": lambda: sparsegrad.jvp(f, x.copy(), np.ones_like(x)),
             "trace": lambda: sparsegrad.value_and_jacobian(f, trace=True)(x.copy())}
    for mode, run in modes.items():
        try:
            with quiet():
                run()
        except TypeError:
            outcome.counts["refused"] += 1
        except Exception as exc:
            outcome.fail("refusal", "%s raised %s instead of a TypeError: %s"
                         % (mode, type(exc).__name__, str(exc)[:200]))
        else:
            outcome.fail("refusal", "%s returned instead of raising a TypeError" % mode)


def check(program):
    """Check sparsegrad on ``program`` against every oracle of its family.

    Parameters
    ----------
    program : tests.fuzz.programs.Program

    Returns
    -------
    Outcome
        The mismatches (empty when sparsegrad agrees everywhere) and counts of
        the checks made.
    """
    outcome = Outcome()
    family = {"general": _general, "recorded": _recorded, "unsupported": _unsupported}
    try:
        family[program.family](program, outcome)
    except Exception:
        outcome.fail("harness", traceback.format_exc(limit=4).strip().splitlines()[-1])
    return outcome
