"""Differential tests of the factored Jacobian algebra under stress.

Random programs build sums of many differently-indexed reads (more than
``MAX_TERMS`` terms merge mid-program), stacked blocks (concatenate/stack, then
elementwise operations, reads across block boundaries and of whole blocks,
writes and ``np.add.at`` into stacks, selections, constant sparse products),
products of products (pending row-factor pairs scaled again) and constants.
Each Jacobian is compared with complex-step differences, and the same program
is run with pending products off, other ``MAX_TERMS``, other thread counts and
the reference kernels: bit for bit where the docs promise it, to rounding
otherwise.  Index arrays are kept alive for the whole program, so that which
terms share a selection matrix (the id-keyed gather cache) is the same in
every run.
"""
import numpy as np
import pytest
import scipy.sparse as sp

import sparsegrad
from sparsegrad import _backend, _jacobian, forward
from sparsegrad._fast import reference
from sparsegrad.testing import numerical_jacobian

UNARY = [np.sin, np.tanh, lambda v: v / (1.0 + v * v), lambda v: np.exp(np.tanh(v))]


def _program(seed):
    """A random program ``f(x) -> 1-d array`` and its point ``x0``."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    L = int(rng.integers(1, 9))
    steps = []
    for k in range(int(rng.integers(3, 10))):
        a, b, c = (int(rng.integers(0, k + 2)) for _ in range(3))
        kind = int(rng.integers(0, 9))
        if kind == 0:  # many reads
            K = int(rng.integers(1, 26))
            ids = [rng.integers(0, 2 * L, L) for _ in range(int(rng.integers(1, 5)))]
            steps.append((kind, a, b, c, [ids[int(rng.integers(0, len(ids)))] for _ in range(K)],
                          rng.normal(size=K), rng.random() < 0.5))
        elif kind == 4:  # stacked value, post-op, read back
            pieces = [(int(rng.integers(0, 4)), int(rng.integers(0, k + 2)),
                       *sorted(rng.integers(0, L + 1, 2)), rng.normal(size=int(rng.integers(0, 3))))
                      for _ in range(int(rng.integers(1, 5)))]
            steps.append((kind, a, b, c, pieces, int(rng.integers(0, 4)), int(rng.integers(1 << 30))))
        elif kind == 6:
            steps.append((kind, a, b, c, sp.random(L, 2 * L, density=0.4,
                                                   random_state=int(rng.integers(1000)),
                                                   format="csr")))
        else:
            steps.append((kind, a, b, c, rng.integers(0, L, int(rng.integers(0, 2 * L))),
                          rng.random(L) < 0.5, rng.normal(size=L), int(rng.integers(0, L))))
    outs = [int(rng.integers(0, len(steps) + 2)) for _ in range(int(rng.integers(1, 4)))]

    def f(x):
        pool = [x[np.arange(L) % n] * 1.0, np.sin(x[np.arange(L) * 3 % n])]
        keep = []
        for step in steps:
            kind, a, b, c = step[:4]
            if kind == 0:
                _, _, _, _, ids, coefs, stacked = step
                src = np.concatenate([pool[a], pool[b]]) if stacked else pool[a]
                total = 0
                for i, coef in zip(ids, coefs):
                    i = i % src.shape[0]
                    keep.append(i)
                    total = total + coef * src[i]
                new = total
            elif kind == 1:
                new = UNARY[c % len(UNARY)](pool[a]) * pool[b]
            elif kind == 2:  # products of products
                p = np.sin(pool[a]) * pool[b]
                q = p * np.cos(pool[c])
                new = q * p + (q * q)[::-1] - p * pool[a] * 0.5
            elif kind == 3:
                new = 2.5 * pool[a] - pool[b] + pool[a] * pool[c] + pool[a] * pool[b]
            elif kind == 4:
                _, _, _, _, pieces, post, s = step
                parts = []
                for t, p, lo, hi, const in pieces:
                    parts.append([pool[p][lo:hi], const, pool[p][lo:lo], x[:1] * pool[p][hi:]][t])
                S = np.concatenate(parts)
                r = np.random.default_rng(s)
                S = [np.sin(S) * S, np.maximum(S, np.cos(S)),
                     np.where(r.random(S.shape[0]) < 0.5, S, S * S),
                     S * 2.0 - S[::-1] * S][post]
                if S.shape[0] == 0:
                    new = pool[a] * 3.0
                else:
                    i = r.integers(0, S.shape[0], L)
                    new = S[i] + S[i[::-1]] * pool[a]
            elif kind == 5:
                T = np.stack([pool[a], pool[b], pool[c]])
                new = T[c % 3] * T[1] + T.T.ravel()[:L] + (T * T).sum(axis=0)
            elif kind == 6:
                new = step[4] @ np.concatenate([pool[a] * pool[b], pool[c]])
            elif kind == 7:
                _, _, _, _, i, mask, const, lo = step
                S = np.concatenate([pool[a] * 1.0, pool[b] * pool[c]])
                S[i] = pool[a][i] * 3.0
                np.add.at(S, i[::-1] + L, pool[b][i])
                S[lo:L] = const[lo:]
                new = np.where(mask, S[:L], S[L:] * S[:L]) + np.maximum(pool[a], pool[b])
            else:
                new = pool[a] * pool[b].sum() + pool[b][c % L] + (np.zeros(L) + step[6])
            pool.append(new)
        return np.concatenate([pool[o] for o in outs])

    return f, rng.normal(size=n)


def _jac(f, x0, dtype=np.float64):
    return f(forward.seed(np.asarray(x0, dtype))).dvalue


def _bits(J):
    return J.indptr.tobytes(), J.indices.tobytes(), J.data.tobytes(), J.data.dtype


@pytest.fixture
def restore():
    pending, max_terms, threads = (_jacobian.PENDING_PRODUCTS, _jacobian.MAX_TERMS,
                                   sparsegrad.get_num_threads())
    kernels = _backend.CPU.kernels
    yield
    _jacobian.PENDING_PRODUCTS, _jacobian.MAX_TERMS = pending, max_terms
    sparsegrad.set_num_threads(threads)
    _backend.CPU.kernels = kernels


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("block", range(2))
def test_random_programs_agree_across_settings(block, restore):
    for seed in range(block * 12, block * 12 + 12):
        f, x0 = _program(seed)
        J = _jac(f, x0)
        expected = numerical_jacobian(f, x0, method="complex")
        size = 1.0 + np.abs(expected).max()
        np.testing.assert_allclose(J.toarray(), expected, rtol=1e-9, atol=1e-11 * size)

        _jacobian.PENDING_PRODUCTS = False  # products at once: bit for bit
        for dtype in (np.float64, np.float32, np.complex128):
            eager = _jac(f, x0, dtype)
            _jacobian.PENDING_PRODUCTS = True
            assert _bits(eager) == _bits(_jac(f, x0, dtype)), (seed, dtype)
            _jacobian.PENDING_PRODUCTS = False
        _jacobian.PENDING_PRODUCTS = True

        for max_terms in (1, 2, 100):  # merged earlier or later: to rounding
            _jacobian.MAX_TERMS = max_terms
            other = _jac(f, x0)
            np.testing.assert_array_equal(other.indptr, J.indptr)
            np.testing.assert_array_equal(other.indices, J.indices)
            np.testing.assert_allclose(other.data, J.data, rtol=1e-12, atol=1e-13 * size)
        _jacobian.MAX_TERMS = 16

        for threads in (1, 3):
            sparsegrad.set_num_threads(threads)
            assert _bits(_jac(f, x0)) == _bits(J)

        kernels = _backend.CPU.kernels
        for dtype in (np.float64, np.float32, np.complex128):
            _backend.CPU.kernels = reference  # the specification: the same bits
            spec = _jac(f, x0, dtype)
            _backend.CPU.kernels = kernels
            assert _bits(spec) == _bits(_jac(f, x0, dtype)), (seed, dtype)

        c = _jac(f, x0, np.complex128)  # a real-analytic program: the same derivative
        np.testing.assert_allclose(c.toarray(), expected, rtol=1e-9, atol=1e-11 * size)


def test_stacked_selections_and_writes_exact(restore):
    x0 = np.array([0.3, -1.2, 0.7, 2.1, -0.4])
    A = sp.random(4, 10, density=0.5, random_state=3, format="csr")

    def f(z):
        S = np.concatenate([z * z, np.sin(z) * z])
        S[np.array([1, 6, 9])] = z[np.array([0, 0, 4])] * 3.0
        np.add.at(S, np.array([1, 1, 9, 5]), z[np.array([0, 0, 4, 2])] * z[:4])
        T = np.maximum(S, np.concatenate([np.cos(z) * z, z]))
        return np.concatenate([T[5:10] * z, T[np.array([9, 0, 5, 4, 4])], A @ S,
                               np.where(z > 0, (z * z) * np.sin(z), z)])

    J = _jac(f, x0)
    np.testing.assert_allclose(J.toarray(), numerical_jacobian(f, x0), rtol=1e-12, atol=1e-14)
