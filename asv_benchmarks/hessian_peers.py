"""Value, gradient and sparse Hessian beside CasADi and asdex.

Run from the repository root::

    python -m asv_benchmarks.hessian_peers                  # 300x300 and 1000x1000
    python -m asv_benchmarks.hessian_peers --size 300 --quick
    python -m asv_benchmarks.hessian_peers --peers casadi   # one peer only

The energy is the 2-d minimal surface of ``problems.MinimalSurface``, the
same formula written for each tool: numpy for sparsegrad, CasADi SX
matrices, ``jax.numpy`` for asdex.  Each tool returns the value, the
gradient and the Hessian as a scipy CSR matrix.  For each size it prints
the numpy energy's time and each tool's time over it (repeated calls, the
median of the per-repeat ratios, every tool timed alternately with the
energy in this one process): sparsegrad's default engine and
``trace=False``, CasADi (an SX ``Function`` run by its virtual machine)
and asdex (detection and colouring once, then a jitted Hessian).  CasADi's
symbolic build and asdex's detection, colouring and compilation are
reported apart, in seconds.  Before timing, each peer's value, gradient
and Hessian are checked against sparsegrad's (relative 1e-10).  A peer
that cannot be imported is skipped, and the reason is printed.
"""
import argparse
import statistics
import sys
import time

import numpy as np
import scipy.sparse as sp

from . import problems as _problems
from .ratios import interleaved

__all__ = ["PEERS", "TOLERANCE", "casadi_peer", "asdex_peer", "check", "measure", "report",
           "main"]

#: largest relative difference allowed between a peer's results and sparsegrad's
TOLERANCE = 1e-10


def casadi_peer(n, x0):
    """``(call, build seconds, note)``: CasADi SX value, gradient and CSR Hessian."""
    import casadi as ca
    h, boundary = _problems.MinimalSurface.grid(n)
    start = time.perf_counter()
    x = ca.SX.sym("x", n * n)
    U = ca.SX(ca.DM(boundary))
    # CasADi reshapes column by column: the transpose is numpy's row-major grid
    U[1:n + 1, 1:n + 1] = ca.reshape(x, n, n).T
    f = _problems.MinimalSurface.area(U, h, ca.sqrt, lambda a: ca.sum1(ca.sum2(a)))
    H, g = ca.hessian(f, x)
    F = ca.Function("F", [x], [f, g, H])
    build = time.perf_counter() - start
    # the buffer interface writes into numpy arrays: DM.sparse() would cost
    # more than the evaluation itself
    buf, evaluate = F.buffer()
    xin, value, grad, data = np.empty(n * n), np.empty(1), np.empty(n * n), np.empty(H.nnz())
    buf.set_arg(0, memoryview(xin))
    for i, a in enumerate((value, grad, data)):
        buf.set_res(i, memoryview(a))
    pattern = F.sparsity_out(2)
    # H is symmetric, so its compressed columns are its compressed rows
    indptr, indices = np.array(pattern.colind()), np.array(pattern.row())

    def call(buf=buf):    # the buffer must outlive evaluate, which runs it
        xin[:] = x0
        evaluate()
        return (float(value[0]), grad.copy(),
                sp.csr_matrix((data.copy(), indices, indptr), shape=(n * n, n * n)))
    return call, build, "symbolic build"


def asdex_peer(n, x0):
    """``(call, seconds, note)``: asdex value, gradient and CSR Hessian, jitted."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import asdex
    import jax.numpy as jnp
    h, boundary = _problems.MinimalSurface.grid(n)
    boundary = jnp.asarray(boundary)

    def energy(x):
        return _problems.MinimalSurface.area(jnp.pad(x.reshape(n, n), 1) + boundary, h,
                                             jnp.sqrt, jnp.sum)

    start = time.perf_counter()
    coloring = asdex.hessian_coloring(energy, x0)
    detected = time.perf_counter() - start
    hessian = asdex.hessian_from_coloring(energy, coloring)

    @jax.jit
    def evaluate(x):
        value, grad = jax.value_and_grad(energy)(x)
        return value, grad, hessian(x).data

    jax.block_until_ready(evaluate(x0))
    compiled = time.perf_counter() - start - detected
    rows = np.asarray(coloring.sparsity.rows)
    indices = np.asarray(coloring.sparsity.cols)
    order = np.lexsort((indices, rows))
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n * n))))
    indices = indices[order]
    # asdex lists the pattern row by row already: no gather then
    order = None if np.all(order == np.arange(order.size)) else order

    def call():
        value, grad, data = evaluate(x0)
        data = np.asarray(data)
        return (float(value), np.asarray(grad),
                sp.csr_matrix((data if order is None else data[order], indices, indptr),
                              shape=(n * n, n * n)))
    return call, detected + compiled, "%.1f s detection and colouring (%d colours) + %.1f s " \
        "compile" % (detected, coloring.num_colors, compiled)


PEERS = {"casadi": ("CasADi SX", casadi_peer), "asdex": ("asdex", asdex_peer)}


def check(result, reference):
    """Why ``result`` (value, gradient, CSR Hessian) differs from ``reference``, or a
    note on its pattern when it agrees to ``TOLERANCE``."""
    (v, g, H), (v0, g0, H0) = result, reference
    scale = abs(H0).max()
    errors = (abs(v - v0) / abs(v0), abs(g - g0).max() / abs(g0).max(),
              abs(H - H0).max() / scale)
    if max(errors) > TOLERANCE:
        raise AssertionError("differs from sparsegrad: relative errors value %.1e, gradient "
                             "%.1e, Hessian %.1e" % errors)
    ones = [sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
            for A in (H0, H)]
    missing = ((ones[0] - ones[1]) > 0).nnz
    if missing:
        raise AssertionError("pattern lacks %d of sparsegrad's entries" % missing)
    return "same pattern" if H.nnz == H0.nnz else "pattern %+d entries" % (H.nnz - H0.nnz)


def measure(n, peers=tuple(PEERS), repeats=7, min_time=0.02, out=print):
    """Times of every tool at grid ``n``, as a dict (see the module docstring)."""
    import sparsegrad
    energy, x0 = _problems.ENERGIES["minsurf"].setup(n)
    default = sparsegrad.value_grad_and_hessian(energy)
    eager = sparsegrad.value_grad_and_hessian(energy, trace=False)
    reference = default(x0)
    funcs = {"energy": lambda: energy(x0), "sparsegrad": lambda: default(x0),
             "trace=False": lambda: eager(x0)}
    row = {"n": n, "nnz": int(reference[2].nnz), "setup": {}, "skipped": {}, "notes": {}}
    for key in peers:
        name, make = PEERS[key]
        try:
            call, row["setup"][name], note = make(n, x0)
        except ImportError as e:
            row["skipped"][name] = "not importable (%s)" % e
            continue
        row["notes"][name] = "%s; %s" % (note, check(call(), reference))
        out("%dx%d %s: %s" % (n, n, name, row["notes"][name]))
        funcs[name] = call
    samples, _ = interleaved(funcs, repeats, min_time)
    row["energy"] = statistics.median(samples["energy"])
    row["ratios"] = {name: statistics.median(t / e for t, e in zip(s, samples["energy"]))
                     for name, s in samples.items() if name != "energy"}
    return row


def report(rows, out=print):
    """Print the table of :func:`measure`'s rows."""
    names = list(dict.fromkeys(name for r in rows for name in r["ratios"]))
    out("value + gradient + CSR Hessian / numpy energy, repeated calls (one-time "
        "step in brackets)")
    out("%-10s %10s %12s" % ("grid", "nnz(H)", "energy") +
        "".join(" %20s" % name for name in names))
    for r in rows:
        cells = []
        for name in names:
            if name in r["ratios"]:
                setup = r["setup"].get(name)
                cells.append("%.1fx" % r["ratios"][name] +
                             ("" if setup is None else " (%.1f s)" % setup))
            else:
                cells.append("skipped")
        out("%-10s %10d %10.3fms" % ("%dx%d" % (r["n"], r["n"]), r["nnz"], 1e3 * r["energy"]) +
            "".join(" %20s" % c for c in cells))
        for name, note in r["notes"].items():
            out("    %dx%d %s: %s" % (r["n"], r["n"], name, note))
        for name, why in r["skipped"].items():
            out("    %dx%d %s skipped: %s" % (r["n"], r["n"], name, why))


def main(argv=None, out=print):
    parser = argparse.ArgumentParser(prog="python -m asv_benchmarks.hessian_peers",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="300,1000", help="grid sizes n (n x n unknowns)")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="comma-separated: %s (default: all)" % ",".join(PEERS))
    parser.add_argument("--quick", action="store_true",
                        help="3 repeats of at least 5 ms each (default: 7 of 20 ms)")
    args = parser.parse_args(argv)
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in PEERS:
            parser.error("unknown peer %r; known: %s" % (p, ", ".join(PEERS)))
    repeats, min_time = (3, 0.005) if args.quick else (7, 0.02)

    def progress(line):
        # the one-time steps take minutes at 10^6 unknowns
        print(line, file=sys.stderr, flush=True)
    rows = []
    for n in (int(s) for s in args.size.split(",") if s):
        rows.append(measure(n, peers, repeats, min_time, out=progress))
    report(rows, out=out)
    return rows


if __name__ == "__main__":
    main()
