"""The array API namespace of forward values, ``sparsegrad.array_api``.

In this process: the namespace's own functions (``asarray``, the ``*_like``
assembly targets, ``astype``), numpy's functions of the standard's names on
forward values, refusals. In a child process with ``SCIPY_ARRAY_API=1``:
SciPy's array-API code (``rosen``, ``rosen_der``, ``scipy.special``) runs on
forward values unchanged, with Jacobians equal to central differences.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sparsegrad
import sparsegrad.array_api as xp
from sparsegrad import forward
from sparsegrad.testing import numerical_jacobian

X = np.array([0.3, 1.7, 0.9, 2.2])


def test_forward_values_have_the_namespace():
    x = forward.seed(X)
    assert x.__array_namespace__() is xp
    assert x.__array_namespace__(api_version="2023.12") is xp
    assert xp.__array_api_version__ == np.__array_api_version__
    assert x.device == "cpu"
    with pytest.raises(ValueError, match="array API standard"):
        x.__array_namespace__(api_version="2019.01")


def test_asarray_keeps_and_stacks_forward_values():
    x = forward.seed(X)
    assert xp.asarray(x) is x
    copied = xp.asarray(x, copy=True)
    assert copied is not x and np.array_equal(copied.value, X)
    single = xp.asarray(x, dtype=xp.float32)
    assert single.dtype == np.float32
    np.testing.assert_array_equal(single.dvalue.toarray(), np.eye(4, dtype=np.float32))
    with pytest.raises(ValueError, match="copy=False"):
        xp.asarray(x, dtype=xp.float32, copy=False)
    stacked = xp.asarray([x[0] * x[1], 2.0])
    np.testing.assert_array_equal(stacked.value, [X[0] * X[1], 2.0])
    np.testing.assert_array_equal(stacked.dvalue.toarray(),
                                  [[X[1], X[0], 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    plain = xp.asarray([1, 2])
    assert type(plain) is np.ndarray and plain.dtype == np.int64
    with pytest.raises(ValueError, match="CPU"):
        xp.asarray(x, device="gpu")


@pytest.mark.parametrize("name, fill", [("zeros_like", 0.0), ("ones_like", 1.0),
                                        ("full_like", 2.5)])
def test_like_functions_make_assembly_targets(name, fill):
    x = forward.seed(X)
    args = (2.5,) if name == "full_like" else ()
    target = getattr(xp, name)(x, *args)
    np.testing.assert_array_equal(target.value, np.full(4, fill))
    target[1:] = x[:-1] ** 2
    np.testing.assert_array_equal(target.value, [fill, *(X[:-1] ** 2)])
    expected = np.zeros((4, 4))
    expected[[1, 2, 3], [0, 1, 2]] = 2 * X[:-1]
    np.testing.assert_array_equal(target.dvalue.toarray(), expected)
    # (of a plain array, numpy's)
    assert type(getattr(xp, name)(X, *args)) is np.ndarray


def test_astype():
    x = forward.seed(X)
    assert xp.astype(x, xp.float64, copy=False) is x
    assert xp.astype(x, xp.complex128).dtype == np.complex128
    assert xp.astype(X, xp.float32).dtype == np.float32


def _standard_code(x):
    """Array-API code as SciPy writes it: every call through the namespace."""
    space = x.__array_namespace__() if hasattr(x, "__array_namespace__") else np
    x = space.asarray(x)
    y = space.concat([space.exp(x[:2]), space.permute_dims(space.reshape(x, (2, 2)),
                                                           (1, 0))[0]])
    z = space.stack([space.sum(x ** 2), space.max(x), space.mean(space.sin(x))])
    return space.concat([y * space.pow(x, 2.0), z, space.cumulative_sum(x)])


@pytest.mark.parametrize("trace", [False, True])
def test_standard_functions_on_forward_values(trace):
    value, J = sparsegrad.value_and_jacobian(_standard_code, trace=trace)(X)
    np.testing.assert_array_equal(value, _standard_code(X))
    np.testing.assert_allclose(J.toarray(), numerical_jacobian(_standard_code, X),
                               rtol=1e-13, atol=1e-14)


def test_special_holds_scipy_ufuncs():
    import scipy.special
    assert xp.special.xlogy is scipy.special.xlogy or \
        xp.special.xlogy is scipy.special.xlogy.__wrapped__
    assert isinstance(xp.special.entr, np.ufunc)
    assert not hasattr(xp.special, "comb")   # (a Python function, not a ufunc)


_CHILD = textwrap.dedent("""
    import json, os, sys
    os.environ["SCIPY_ARRAY_API"] = "1"
    import numpy as np, scipy.optimize, scipy.special, sparsegrad
    from sparsegrad.testing import numerical_jacobian
    x = np.array([1.3, 0.7, 0.8, 1.9, 1.2])
    functions = {
        "rosen": scipy.optimize.rosen, "rosen_der": scipy.optimize.rosen_der,
        "softmax": scipy.special.softmax, "log_softmax": scipy.special.log_softmax,
        "xlogy": lambda v: scipy.special.xlogy(v, v + 1), "entr": scipy.special.entr,
        "logit": lambda v: scipy.special.logit(v / 3), "expit": scipy.special.expit,
        "logsumexp": scipy.special.logsumexp,
        "logsumexp axis": lambda v: scipy.special.logsumexp(np.stack([v, 2 * v]), axis=0),
    }
    report = {}
    for name, f in functions.items():
        for trace in (False, True):
            J = sparsegrad.jacobian(f, trace=trace)(x).toarray()
            differences = numerical_jacobian(lambda v: np.asarray(f(v)), x, method="central")
            report[name, trace] = float(np.max(np.abs(J - differences.reshape(J.shape))))
    gradient = sparsegrad.gradient(scipy.optimize.rosen)(x)
    report["rosen_der", "hand"] = float(np.max(np.abs(gradient - scipy.optimize.rosen_der(x))))
    solution = scipy.optimize.minimize(scipy.optimize.rosen, x,
                                       jac=sparsegrad.gradient(scipy.optimize.rosen))
    report["minimize", solution.success] = float(np.max(np.abs(solution.x - 1.0)))
    print(json.dumps({"%s %s" % key: error for key, error in report.items()}))
""")


def test_scipy_array_api_code_runs_unchanged():
    environment = dict(os.environ, SCIPY_ARRAY_API="1")
    done = subprocess.run([sys.executable, "-c", _CHILD], env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report) == 22
    assert report["minimize True"] < 1e-4
    for key, error in report.items():
        assert key == "minimize True" or error < 1e-6, (key, error)
    assert report["rosen_der hand"] < 1e-12
