"""Micro-benchmarks of the CSR kernels: nanoseconds per entry, compiled vs reference.

Run ``python asv_benchmarks/kernel_micro.py`` (add ``--quick`` for fewer
repeats, ``--no-reference`` to skip the slow pure-numpy kernels, ``--against
package.module`` to time another build of the kernels beside ours, e.g. one of
an older commit built under another name).  The figure is the median wall time
of a call divided by the number of input entries (merge: the entries of all
terms; gather: the entries copied).  The implementations are timed in turns,
call by call, so that a slow spell of the machine hits them alike.

The column ``alloc`` is the floor no kernel can beat in this process: the time
numpy needs to allocate arrays of the result's sizes and write them once.  On
Linux, large fresh arrays are page-faulted in on first write, and glibc hands
freed memory of a few MB back to the kernel, so every call pays the faults
again; on a virtual machine that is 1-3 ns per output entry.

This file is a plain script, not an asv benchmark module: it defines no
``time_*`` functions, and its work runs only under ``__main__``.
"""
import argparse
import importlib
import sys
import time

import numpy as np

from sparsegrad._fast import _reference

try:
    from sparsegrad._fast import _kernels as _compiled
except ImportError:  # not built
    _compiled = None

I64 = np.int64


def selection(n, offset):
    """n x n matrix with one stored one per row, at column (i + offset) mod n."""
    indptr = np.arange(n + 1, dtype=I64)
    indices = (np.arange(n, dtype=I64) + offset) % n
    return indptr, indices, None


def banded(n, offsets, rng, with_data=True):
    """n x n matrix with the diagonals ``offsets`` (clipped at the borders)."""
    offsets = np.sort(np.asarray(offsets, dtype=I64))
    cols = np.arange(n, dtype=I64)[:, None] + offsets[None, :]
    keep = (cols >= 0) & (cols < n)
    indptr = np.zeros(n + 1, dtype=I64)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    indices = cols[keep]
    data = rng.standard_normal(len(indices)) if with_data else None
    return indptr, indices, data


def timeit(functions, repeat, min_time=0.3):
    """Median seconds of one call of each of ``functions``, called in turns."""
    for function in functions:
        function()  # warm up
    times = [[] for _ in functions]
    start = time.perf_counter()
    while len(times[0]) < repeat or (time.perf_counter() - start < min_time
                                     and len(times[0]) < 51):
        for function, spent in zip(functions, times):
            t0 = time.perf_counter()
            function()
            spent.append(time.perf_counter() - t0)
    return [float(np.median(spent)) for spent in times]


def alloc_floor(result):
    """A function allocating and writing arrays like those of ``result``."""
    shapes = [(a.shape, a.dtype) for a in result if a is not None]

    def run():
        for shape, dtype in shapes:
            np.empty(shape, dtype).fill(1)
    return run


def cases(rng):
    out = []
    for n in (120_000, 1_000_000):
        for k in (3, 12):
            offsets = rng.choice(n, size=k, replace=False)
            terms = [selection(n, int(o)) + (rng.standard_normal(n),) for o in offsets]
            entries = k * n
            out.append(("merge %2d selection terms, n=%d" % (k, n), entries,
                        lambda m, t=terms, n=n: m.merge_scaled(n, n, t)))
            out.append(("  same, pattern_only", entries,
                        lambda m, t=terms, n=n: m.merge_scaled(n, n, t, pattern_only=True)))
    # the shape of the 5-point Laplacian merge of a 1000 x 1000 Bratu problem:
    # four shifted selections (boundary rows empty) with broadcast scalar
    # scales, and the diagonal with a vector scale
    side = 1000
    n = side * side
    grid = np.arange(n, dtype=I64).reshape(side, side)
    terms = []
    for shift, axis in ((-1, 0), (1, 0), (-1, 1), (1, 1)):
        cols = np.roll(grid, shift, axis=axis)
        keep = np.ones((side, side), dtype=bool)
        if axis == 0:
            keep[0 if shift == -1 else -1, :] = False
        else:
            keep[:, 0 if shift == -1 else -1] = False
        indptr = np.zeros(n + 1, dtype=I64)
        np.cumsum(keep.ravel(), out=indptr[1:])
        terms.append((indptr, cols.ravel()[keep.ravel()], None,
                      np.broadcast_to(np.float64(-1.0), (n,))))
    terms.append(selection(n, 0) + (rng.standard_normal(n),))
    entries = sum(len(t[1]) for t in terms)
    out.append(("merge Bratu-like 5-point stencil, n=1e6", entries,
                lambda m, t=terms: m.merge_scaled(n, n, t)))
    out.append(("  same, pattern_only", entries,
                lambda m, t=terms: m.merge_scaled(n, n, t, pattern_only=True)))
    # the same block stacked between two blocks of one row (5-tuples): the
    # long segment must cost what it costs alone
    ends = [(np.array([0, 1], dtype=I64), np.array([0], dtype=I64), None, np.ones(1), 0),
            (np.array([0, 1], dtype=I64), np.array([5], dtype=I64), None, np.ones(1), n + 1)]
    stacked = ends[:1] + [t + (1,) for t in terms] + ends[1:]
    out.append(("  same, with 1-row blocks at both ends", entries,
                lambda m, t=stacked, n=n: m.merge_scaled(n + 2, n, t)))
    # shallow water on a periodic 200 x 200 grid: 12 selections (4 periodic
    # shifts in each of 3 fields of 40 000 unknowns), each with its own scale
    side = 200
    n = side * side
    grid = np.arange(n, dtype=I64).reshape(side, side)
    shifts = [np.roll(grid, s, axis=a).ravel() for s in (1, -1) for a in (0, 1)]
    # (one indptr for all, as sparsegrad's selections share a cached arange)
    indptr = np.arange(n + 1, dtype=I64)
    terms = [(indptr, shift + n * block, None, rng.standard_normal(n))
             for block in range(3) for shift in shifts]
    entries = sum(len(t[1]) for t in terms)
    out.append(("merge shallow water, 12 selections, n=4e4", entries,
                lambda m, t=terms, n=n: m.merge_scaled(n, 3 * n, t)))
    out.append(("  same, pattern_only", entries,
                lambda m, t=terms, n=n: m.merge_scaled(n, 3 * n, t, pattern_only=True)))
    # the three blocks of rows stacked by one call (5-tuples: first_row),
    # with 8, 12 and 12 terms, int32 output indices
    stacked = ([t + (0,) for t in terms[:8]] + [t + (n,) for t in terms]
               + [t + (2 * n,) for t in terms])
    entries = sum(len(t[1]) for t in stacked)
    out.append(("merge 3 stacked blocks (8/12/12 terms), int32", entries,
                lambda m, t=stacked, n=n: m.merge_scaled(3 * n, 3 * n, t,
                                                         index_dtype=np.int32)))
    # Poisson-Boltzmann 1-d, n = 1e6: interior rows select i, i+1, i+2 and
    # the diagonal (identity-like, i+1) with its own scale
    n = 1_000_000
    rows = n - 2
    base = np.arange(rows, dtype=I64)
    ip = np.arange(rows + 1, dtype=I64)
    terms = [(ip, base, None, np.broadcast_to(np.float64(1.0), (rows,))),
             (ip, base + 1, None, np.broadcast_to(np.float64(-2.0), (rows,))),
             (ip, base + 2, None, np.broadcast_to(np.float64(1.0), (rows,))),
             (ip, base + 1, None, rng.standard_normal(rows))]
    entries = sum(len(t[1]) for t in terms)
    out.append(("merge Poisson-Boltzmann 4 selections, n=1e6", entries,
                lambda m, t=terms, n=n, r=rows: m.merge_scaled(r, n, t)))
    out.append(("  same, pattern_only", entries,
                lambda m, t=terms, n=n, r=rows: m.merge_scaled(r, n, t, pattern_only=True)))
    terms = [banded(n, (-1, 0, 1), rng) + (rng.standard_normal(n),) for _ in range(3)]
    entries = sum(len(t[1]) for t in terms)
    out.append(("merge 3 tridiagonal terms, n=1e6", entries,
                lambda m, t=terms: m.merge_scaled(n, n, t)))
    out.append(("  same, pattern_only", entries,
                lambda m, t=terms: m.merge_scaled(n, n, t, pattern_only=True)))
    terms = [banded(n, (-1, 0, 1), rng)[:2] + (None, None),
             banded(n, (0,), rng) + (rng.standard_normal(n),),
             banded(n, (-2, -1, 0, 1, 2), rng) + (None,)]
    entries = sum(len(t[1]) for t in terms)
    out.append(("merge tri(None)+diag*s+5-band, n=1e6", entries,
                lambda m, t=terms: m.merge_scaled(n, n, t)))
    terms = [banded(n, offs, rng) + (rng.standard_normal(n),)
             for offs in ((-3, -2, -1, 0, 1, 2, 3), (-5, -1, 0, 1, 5), (-10, -4, 0, 4, 10))]
    entries = sum(len(t[1]) for t in terms)
    out.append(("merge 3 banded terms (5-7/row), n=1e6", entries,
                lambda m, t=terms: m.merge_scaled(n, n, t)))
    out.append(("  same, pattern_only", entries,
                lambda m, t=terms: m.merge_scaled(n, n, t, pattern_only=True)))
    src = banded(n, (-2, -1, 0, 1, 2), rng)
    tri = banded(n, (-1, 0, 1), rng)
    entries = int(np.diff(src[0])[tri[1]].sum())
    out.append(("matmul 3-band @ 5-band, n=1e6", entries,
                lambda m: m.matmul(*tri, *src, n)))
    m_in = 5 * n
    rows = rng.integers(0, n, m_in).astype(I64)
    cols = np.clip(rows + rng.integers(-3, 4, m_in), 0, n - 1).astype(I64)
    vals = rng.standard_normal(m_in)
    order = np.argsort(rows, kind="stable")
    out.append(("coo_to_csr 5e6 entries, rows in order", m_in,
                lambda m, r=rows[order], c=cols[order], v=vals[order]:
                m.coo_to_csr(n, n, r, c, v)))
    out.append(("coo_to_csr 5e6 entries, random order", m_in,
                lambda m, r=rows, c=cols, v=vals: m.coo_to_csr(n, n, r, c, v)))
    for label, rows in (("in order", np.arange(n, dtype=I64)),
                        ("reversed", np.arange(n, dtype=I64)[::-1].copy()),
                        ("random", rng.integers(0, n, n).astype(I64))):
        entries = int(np.diff(src[0])[rows].sum())
        out.append(("gather_rows 1e6 rows of 5-band, %s" % label, entries,
                    lambda m, r=rows: m.gather_rows(*src, r)))
        out.append(("  same, data=None", entries,
                    lambda m, r=rows: m.gather_rows(src[0], src[1], None, r)))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference")
    parser.add_argument("--against", metavar="MODULE", action="append", default=[],
                        help="also time this importable kernel module")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    repeat = 5 if args.quick else 15
    rng = np.random.default_rng(0)
    modules = []
    if _compiled is not None:
        modules.append(("compiled", _compiled))
    else:
        print("compiled kernels not built; reference only", file=sys.stderr)
    for name in args.against:
        modules.append((name.rsplit(".", 1)[0][-10:], importlib.import_module(name)))
    header = "%-42s %10s %8s" % ("case (ns per input entry)", "entries", "alloc")
    header += "".join(" %10s" % name for name, _ in modules)
    if not args.no_reference:
        header += " %10s" % "reference"
    print(header)
    last = None
    for name, entries, run in cases(rng):
        if not name.startswith(" "):
            last = name
        if args.filter and args.filter not in last:
            continue
        result = run(modules[0][1] if modules else _reference)
        usable = []
        for _, module in modules:
            try:
                run(module)
            except (TypeError, ValueError):  # an older build without the feature
                usable.append(False)
            else:
                usable.append(True)
        functions = [alloc_floor(result)] + [lambda m=module: run(m)
                                             for (_, module), ok in zip(modules, usable) if ok]
        seconds = timeit(functions, repeat)
        for k, ok in enumerate(usable):
            if not ok:
                seconds.insert(k + 1, float("nan"))
        if not args.no_reference:
            seconds += timeit([lambda: run(_reference)], 1 if args.quick else 3)
        line = "%-42s %10d" % (name, entries)
        line += " %8.2f" % (seconds[0] / max(entries, 1) * 1e9)
        for s in seconds[1:]:
            line += " %10.2f" % (s / max(entries, 1) * 1e9)
        print(line, flush=True)


if __name__ == "__main__":
    main()
