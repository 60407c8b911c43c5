"""Value+Jacobian / residual ratios and the other speed targets (and the
repeated-evaluation target), without asv.

Run from the repository root::

    python -m asv_benchmarks.ratios                       # every problem, every size
    python -m asv_benchmarks.ratios --problems sw,pb --quick
    python -m asv_benchmarks.ratios --json docs/performance.json
    python -m asv_benchmarks.ratios --size sw=20,40 --quick   # other sizes
    python -m asv_benchmarks.ratios --large                   # 10^6 -> 10^7 unknowns
    python -m asv_benchmarks.ratios --keep-freed-memory      # glibc keeps freed heap memory
    python -m asv_benchmarks.ratios --no-pool                # without sparsegrad's memory pool
    python -m asv_benchmarks.ratios --residual-in-pool       # residual fault-free too
    python -m asv_benchmarks.ratios --threads 1              # merges in one thread
    python -m asv_benchmarks.ratios --hessians               # Hessians of the energies

For each problem and size it prints, all measured in this one process:

* ``residual``: the plain numpy residual time (median of repeats);
* ``jacobian``: ``F(forward.seed(x)).dvalue``, value and Jacobian (median);
* ``ratio``: jacobian / residual, the median of the per-repeat ratios (residual
  and Jacobian are timed alternately, so slow drifts of the machine cancel);
* ``first``: one evaluation timed before the repeats, with sparsegrad's memory
  pool emptied first (the cost of a single Jacobian; the repeats reuse the pool);
* ``sparsity/seed``: ``F(forward.seed_sparsity(x)).dvalue`` time over the
  jacobian time (median of per-repeat ratios);
* ``nnz`` of the Jacobian;
* ``mem/J``: the peak of numpy allocations during one repeated Jacobian
  evaluation (``tracemalloc``: peak minus the level before the call) beyond the
  residual's own peak, divided by the bytes of the final Jacobian (``data +
  indices + indptr``); below the table, the same for the default engine and for
  the first call from emptied caches, and the free blocks the memory pool holds
  after the evaluations;

then, for consecutive sizes of a problem, the linear-scaling check: the time
ratio divided by the nonzero ratio, shown as the time growth per 4x the
nonzeros (target: 4x within a factor 1.3, i.e. 3.08 to 5.2; the time ratio
measured side by side, samples of the two sizes alternating, as the other
ratios are, so that a slow spell of the machine does not fall on one size
only), the figures of
the peers beside ours, the default engine (``value_and_jacobian(F)``, recorded)
against the residual and beside ``forward.seed`` for every case, both repeated
and on sparsegrad's memory pool, and the repeated-evaluation target for a repeated
evaluation (shallow water 200x200 <= 4x; the Jacobian samples above all follow a
first evaluation, so their structure comes from the structure cache; judged
against the residual timed on sparsegrad's memory pool as well, in the same
rounds, since the Jacobian allocates from the pool: numpy's own allocator pays
page faults for its temporaries or not depending on what ran before in the
process, 0.87 or 1.57 ms for the shallow-water 200x200 residual), and, for
information, the shallow-water value+Jacobian against the same residual with
the Jacobian derived by hand with numpy (``asv_benchmarks.hand_coded``: what a
user writes without sparsegrad), all on sparsegrad's memory pool.
Each target is marked PASS or FAIL.  Last, for information, the fixed cost of
an evaluation of each problem (value+Jacobian on its smallest grid, where the
arrays cost nothing: what the Python of every operation costs, and what makes
time grow less than the nonzeros between small sizes), with the number of
sparsegrad's Python modules that ran compiled (``sparsegrad._compiled``;
``SPARSEGRAD_SOURCE_MODULES=1`` runs their sources, for a comparison), and the
same by the default engine (target: shallow water 5x5 <= 0.2 ms); and the first
call of the default engine (light values, compile, program) over the first call
of ``forward.seed``, both of a new function from emptied caches (target <= 1.5x).
``--strict`` makes the exit status 1 when any target fails.

Timing follows ``timeit``: the garbage collector is off inside a sample, each
sample loops until it lasts at least ``--min-time`` seconds.
"""
import argparse
import functools
import gc
import json
import platform
import statistics
import sys
import time
import tracemalloc

import numpy as np

from . import hand_coded as _hand_coded
from . import problems as _problems

__all__ = ["TARGETS", "REPEATED_TARGETS", "SPARSITY_TARGET", "MEMORY_TARGET", "SCALING_TOLERANCE",
           "SCALING_TARGETS", "LARGE_SIZES", "PEERS",
           "PEER_NAMES", "measure", "measure_times", "memory_ratio", "memory_figures",
           "residual_peak",
           "scaling", "scaling_steps",
           "measure_growth", "FIXED_COST_SIZES", "measure_fixed_cost", "FIRST_CALL_TARGET",
           "RECORDED_FIXED_COST_TARGET", "ENGINE_TARGETS", "measure_first_call",
           "measure_floor", "interleaved", "HESSIAN_TARGET", "measure_hessian",
           "report_hessians", "run", "main"]

# ---------------------------------------------------------------- speed targets

#: value, gradient and Hessian / energy, repeated calls, for every energy and size
HESSIAN_TARGET = 4.0

#: value+Jacobian / residual targets, by (problem key, size)
TARGETS = {
    ("sw", 200): 8.0,
    ("sw", 400): 8.0,
    ("pb", 10 ** 6): 3.0,
    ("bratu", 1000): 3.0,
}
#: repeated value+Jacobian / residual targets (structure found in the
#: cache: what the ratio column measures, every sample after the first evaluation)
REPEATED_TARGETS = {("sw", 200): 4.0}
#: repeated value+Jacobian by the default engine (value_and_jacobian(F),
#: recorded) / the residual, both on sparsegrad's memory pool
ENGINE_TARGETS = {("sw", 200): 2.5, ("sw", 400): 2.5, ("bratu", 1000): 2.5,
                  ("pb", 10 ** 6): 2.5, ("dd", 10 ** 5): 2.5}
#: the first call of the default engine / the first call of forward.seed
FIRST_CALL_TARGET = 1.5
#: seconds of a repeated evaluation of the smallest shallow-water grid by the default engine
RECORDED_FIXED_COST_TARGET = 2e-4
#: seed_sparsity time / seed time, every problem and size
SPARSITY_TARGET = 0.5
#: peak extra memory during a repeated Jacobian evaluation, beyond the residual's own
#: peak, / bytes of the Jacobian
MEMORY_TARGET = 2.0
#: time growth over nonzero growth must lie within [1/1.3, 1.3]
SCALING_TOLERANCE = 1.3
#: the scaling steps that are targets: up to each size with a ratio target (4x the
#: grid for shallow water 200 -> 400); the other steps are printed for information,
#: as small sizes are dominated by fixed per-operation costs
SCALING_TARGETS = {("sw", 100, 200), ("sw", 200, 400), ("pb", 10 ** 5, 10 ** 6),
                   ("bratu", 300, 1000),
                   ("sw", 400, 1800), ("pb", 10 ** 6, 10 ** 7), ("bratu", 1000, 3000)}
#: the sizes of ``--large``: from 10^6 to about 10^7 unknowns (minutes, and
#: several GiB of memory)
LARGE_SIZES = {"sw": (400, 1800), "pb": (10 ** 6, 10 ** 7), "bratu": (1000, 3000)}

# ---------------------------------------------------------------- peers (their published table)

PEER_NAMES = ("sparsegrad 0.0.15", "CasADi SX", "JAX+sparsejac", "coloured FD")
#: value+Jacobian / residual of other tools, measured side by side on a
#: 2-core machine (low, high); CasADi and JAX exclude their build / colouring /
#: compile times (9-49 s and 8-10 s), which are noted in docs/performance.md
PEERS = {
    ("sw", 200): {"sparsegrad 0.0.15": (31, 35), "CasADi SX": (17, 22),
                  "JAX+sparsejac": (59, 72), "coloured FD": (150, 185)},
    ("sw", 400): {"sparsegrad 0.0.15": (33, 33), "CasADi SX": (15, 15),
                  "JAX+sparsejac": (134, 134), "coloured FD": (130, 160)},
    ("pb", 10 ** 6): {"sparsegrad 0.0.15": (9.4, 9.4), "CasADi SX": (3.1, 3.1),
                      "JAX+sparsejac": (4.2, 4.2), "coloured FD": (47, 47)},
    ("bratu", 1000): {"sparsegrad 0.0.15": (13, 13), "CasADi SX": (3.3, 3.3),
                      "JAX+sparsejac": (6.0, 6.0), "coloured FD": (83, 83)},
}

# ---------------------------------------------------------------- measuring


def _sample(func, number):
    """Seconds per call of ``func`` over ``number`` calls, garbage collector off."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            func()
        return (time.perf_counter() - start) / number
    finally:
        if enabled:
            gc.enable()


def _forget_structure():
    """Empty sparsegrad's structure cache, keeping its lookup counts (a zero limit
    forgets every structure; clear_structure_cache would reset the counts)."""
    import sparsegrad
    limit = sparsegrad.structure_cache_limit()
    sparsegrad.structure_cache_limit(0)
    sparsegrad.structure_cache_limit(limit)


def _loops(func, min_time):
    """How many calls make one sample last at least ``min_time`` (like timeit.autorange)."""
    number = 1
    while True:
        elapsed = _sample(func, number) * number
        if elapsed >= min_time or number >= 10 ** 6:
            return number
        # aim a little above min_time, at most x10 per step
        wanted = int(number * 1.2 * min_time / max(elapsed, 1e-9))
        number = max(number + 1, min(number * 10, wanted))


def interleaved(funcs, repeats, min_time):
    """``(samples, loops)``: seconds per call of each of ``funcs`` (a dict of
    name -> function), ``repeats`` samples each, the functions taken in turn
    so that slow drifts of the machine reach all alike; each called once
    first (imports, caches, first touch of memory) and sampled over enough
    calls to last ``min_time``."""
    for f in funcs.values():
        f()
    loops = {name: _loops(f, min_time) for name, f in funcs.items()}
    samples = {name: [] for name in funcs}
    for _ in range(repeats):
        for name, f in funcs.items():
            samples[name].append(_sample(f, loops[name]))
    return samples, loops


def measure_times(residual, x0, repeats=7, min_time=0.02, sparsity=True,
                  residual_in_pool=False, sync=None, fault_free=False, by_hand=None,
                  traced=False):
    """Residual, value+Jacobian and (optionally) sparsity times, interleaved.

    ``residual_in_pool``: run the plain residual with sparsegrad's memory pool
    as numpy's allocator too, so that neither side pays page faults.  ``sync``:
    called after every timed call (a GPU's stream synchronisation, so that the
    time is the device's work, not its launch).  ``fault_free``: also time the
    residual on the pool (``residual_pool``, ``ratio_pool``) beside numpy's own
    allocator, whatever ``residual_in_pool`` says (the like-for-like ratio of a
    repeated evaluation, which runs on the pool, see :func:`measure`).
    ``by_hand``: a function of ``x`` returning the Jacobian derived by hand
    (``asv_benchmarks.hand_coded``): ``residual(x)`` and it are timed on the pool
    too (``by_hand``, ``by_hand_ratio_pool``, against the residual on the pool;
    implies ``fault_free``).  ``traced``: also time
    ``sparsegrad.value_and_jacobian(residual, trace=True)`` after its first
    call (``traced``, ``traced_ratio_pool``, against the residual on the
    pool; implies ``fault_free``).

    Returns a dict: ``residual``, ``jacobian``, ``sparsity`` (median seconds),
    ``ratio`` (median over repeats of jacobian/residual) and ``sparsity_ratio``
    (median of sparsity/jacobian), plus the per-repeat samples.
    """
    from sparsegrad import forward
    from sparsegrad._memory import pooled

    def plain():
        return residual(x0)

    on_pool = pooled(plain)
    if residual_in_pool:
        plain = on_pool

    def jacobian():
        return residual(forward.seed(x0)).dvalue

    def pattern():
        return residual(forward.seed_sparsity(x0)).dvalue

    funcs = {"residual": plain, "jacobian": jacobian}
    fault_free = fault_free or by_hand is not None or traced
    if fault_free:
        funcs["residual_pool"] = on_pool
    if by_hand is not None:
        funcs["by_hand"] = pooled(lambda: (residual(x0), by_hand(x0)))
    if traced:
        import sparsegrad
        funcs["traced"] = functools.partial(sparsegrad.value_and_jacobian(residual, trace=True),
                                            x0)
    if sparsity:
        funcs["sparsity"] = pattern
    if sync is not None:
        funcs = {name: (lambda f=f: (f(), sync())) for name, f in funcs.items()}
    plain()
    # the first evaluation of this case, with sparsegrad's memory pool and structure
    # cache emptied: what a single Jacobian costs, against the repeated ones below
    import sparsegrad
    sparsegrad.release_memory_pool()
    _forget_structure()
    gc.collect()
    start = time.perf_counter()
    funcs["jacobian"]()
    first = time.perf_counter() - start
    samples, loops = interleaved(funcs, repeats, min_time)
    out = {name: statistics.median(s) for name, s in samples.items()}

    def ratio(top, bottom):
        """The median of the per-repeat ratios of two timed functions."""
        return statistics.median(t / b for t, b in zip(samples[top], samples[bottom]))

    out["ratio"] = ratio("jacobian", "residual")
    if fault_free:
        out["ratio_pool"] = ratio("jacobian", "residual_pool")
    if by_hand is not None:
        out["by_hand_ratio_pool"] = ratio("by_hand", "residual_pool")
    if traced:
        out["traced_ratio_pool"] = ratio("traced", "residual_pool")
    if sparsity:
        out["sparsity_ratio"] = ratio("sparsity", "jacobian")
    out["first_jacobian"] = first
    out["samples"] = samples
    out["loops"] = loops
    return out


def jacobian_bytes(J):
    """Bytes of a CSR matrix: data + indices + indptr."""
    return J.data.nbytes + J.indices.nbytes + J.indptr.nbytes


def _peak_extra(call):
    """``(peak, result)``: the peak of traced numpy allocations during ``call()`` above
    the level before it (numpy reports every array's data to ``tracemalloc``, through
    sparsegrad's memory pool too), and what ``call`` returned."""
    gc.collect()
    started = tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not started:
            tracemalloc.stop()
    return peak - before, result


def residual_peak(residual, x0):
    """The residual's own peak of traced allocations above the level before it."""
    return _peak_extra(lambda: residual(x0))[0]


def memory_ratio(residual, x0, own=None):
    """Peak extra traced memory during one repeated value+Jacobian evaluation beyond
    the residual's own peak (``own``: :func:`residual_peak`, measured when None),
    over the Jacobian's bytes.

    Returns ``(peak_extra_bytes, jacobian_bytes, ratio, nnz)``: the evaluation's peak
    above the level before it, less the residual's own (its temporaries, which the
    evaluation has too), over ``data + indices + indptr`` of the Jacobian.
    """
    from sparsegrad import forward

    residual(forward.seed(x0)).dvalue          # warm caches outside the measurement
    if own is None:
        own = residual_peak(residual, x0)
    extra, J = _peak_extra(lambda: residual(forward.seed(x0)).dvalue)
    nbytes = jacobian_bytes(J)
    return extra - own, nbytes, (extra - own) / nbytes, J.nnz


def memory_figures(residual, x0, own):
    """The other memory figures of one case, each over the Jacobian's bytes: the
    default engine's repeated evaluation and the first call of ``forward.seed`` from
    emptied caches (each beyond the residual's own peak ``own``, as
    :func:`memory_ratio`), and the free blocks that sparsegrad's memory pool holds
    after the evaluations."""
    import sparsegrad
    from sparsegrad import forward

    recorded = sparsegrad.value_and_jacobian(residual)
    recorded(x0)
    recorded(x0)
    extra_recorded, (_, J) = _peak_extra(lambda: recorded(x0))
    nbytes = jacobian_bytes(J)
    held = sparsegrad.memory_pool_info().held_bytes
    sparsegrad.clear_structure_cache()
    sparsegrad.release_memory_pool()
    extra_first, _ = _peak_extra(lambda: residual(forward.seed(x0)).dvalue)
    return {"memory_recorded_ratio": (extra_recorded - own) / nbytes,
            "memory_first_ratio": (extra_first - own) / nbytes,
            "pool_held_ratio": held / nbytes}


def measure(problem, n, repeats=7, min_time=0.02, memory=True, residual_in_pool=False):
    """Every figure of one problem at one size, as a dict (see the module docstring)."""
    if isinstance(problem, str):
        problem = _problems.get(problem)
    residual, x0 = problem.setup(n)
    result = {"problem": problem.key, "name": problem.name, "size": int(n),
              "label": problem.size_text(n), "unknowns": int(problem.unknowns(n))}
    repeated = REPEATED_TARGETS.get((problem.key, int(n)))
    by_hand = _hand_coded.HAND_CODED.get(problem.key)
    if by_hand is not None:
        by_hand = by_hand(n)[1]
    t = measure_times(residual, x0, repeats=repeats, min_time=min_time,
                      residual_in_pool=residual_in_pool, by_hand=by_hand, traced=True)
    result.update(residual_s=t["residual"], jacobian_s=t["jacobian"], sparsity_s=t["sparsity"],
                  ratio=t["ratio"], sparsity_ratio=t["sparsity_ratio"], repeats=repeats,
                  loops=t["loops"], first_jacobian_s=t["first_jacobian"],
                  first_ratio=t["first_jacobian"] / t["residual"])
    if memory:
        own = residual_peak(residual, x0)
        extra, nbytes, mem, nnz = memory_ratio(residual, x0, own)
        result.update(peak_extra_bytes=int(extra), jacobian_bytes=int(nbytes),
                      memory_ratio=mem, nnz=int(nnz), **memory_figures(residual, x0, own))
    else:
        from sparsegrad import forward
        J = residual(forward.seed(x0)).dvalue
        result.update(nnz=int(J.nnz), jacobian_bytes=int(jacobian_bytes(J)))
    result["floor_s"] = measure_floor(result["nnz"], repeats=repeats, min_time=min_time)
    target = TARGETS.get((problem.key, int(n)))
    result["target"] = target
    result["ratio_pass"] = None if target is None else bool(result["ratio"] <= target)
    result["repeated_target"] = repeated
    if "ratio_pool" in t:
        result.update(residual_pool_s=t["residual_pool"], ratio_pool=t["ratio_pool"])
    if repeated is not None:
        # judged by the recorded evaluation (value_and_jacobian(trace=True), the
        # design chosen for repeated evaluation: a function object that reuses its earlier
        # calls' work), the plain seed's repeated evaluation beside it; like
        # for like: both allocate from sparsegrad's pool and pay no page
        # faults, so the target is judged against the residual on the pool
        # too (numpy's own allocator faults in fresh pages for each temporary
        # or not, depending on what ran before in the process: glibc's
        # adaptive thresholds moved the ratio between 3.6x and 7x)
        result["repeated_pass"] = bool(t["traced_ratio_pool"] <= repeated)
    else:
        result["repeated_pass"] = None
    # (the default engine, value_and_jacobian(F), for every case: recorded)
    result.update(traced_s=t["traced"], traced_ratio_pool=t["traced_ratio_pool"])
    engine = ENGINE_TARGETS.get((problem.key, int(n)))
    result["engine_target"] = engine
    result["engine_pass"] = None if engine is None else bool(t["traced_ratio_pool"] <= engine)
    if by_hand is not None:
        # (for information: a Jacobian written by hand with numpy, both sides and
        # the residual on the pool)
        result.update(by_hand_s=t["by_hand"], by_hand_ratio_pool=t["by_hand_ratio_pool"])
    result["sparsity_pass"] = bool(result["sparsity_ratio"] <= SPARSITY_TARGET)
    if memory:
        result["memory_pass"] = bool(result["memory_ratio"] <= MEMORY_TARGET)
    peers = PEERS.get((problem.key, int(n)))
    result["peers"] = None if peers is None else {k: list(v) for k, v in peers.items()}
    return result


def scaling_steps(results):
    """``(problem key, smaller size, larger size)`` of consecutive sizes of each problem."""
    sizes = {}
    for r in results:
        sizes.setdefault(r["problem"], []).append(r["size"])
    return [(key, a, b) for key, ns in sizes.items()
            for a, b in zip(sorted(ns), sorted(ns)[1:])]


def measure_growth(key, a, b, repeats=7, min_time=0.02):
    """Value+Jacobian time at size ``b`` over size ``a``, measured side by side.

    Samples of the two sizes alternate and the median of the per-round ratios
    is returned, so that both sizes see the same state of a shared, noisy
    machine (the times of the table are measured one case after another).
    Meanwhile sparsegrad's structure cache and memory pool may hold twice their
    limits: each size then keeps what it keeps when timed alone, as in the
    table (two large cases at once would otherwise push the structure past its
    limit, which forgets it all, at every other sample).
    """
    import sparsegrad

    structure, pool = sparsegrad.structure_cache_limit(), sparsegrad.memory_pool_limit()
    sparsegrad.structure_cache_limit(2 * structure)
    sparsegrad.memory_pool_limit(2 * pool)
    try:
        return _alternated_growth(key, a, b, repeats, min_time)
    finally:
        sparsegrad.structure_cache_limit(structure)
        sparsegrad.memory_pool_limit(pool)


def _alternated_growth(key, a, b, repeats, min_time):
    problem = _problems.get(key)
    funcs = [_repeated_jacobian(*problem.setup(n)) for n in (a, b)]
    loops = [_loops(f, min_time) for f in funcs]
    rounds = []
    for _ in range(repeats):
        small, large = (_sample(f, number) for f, number in zip(funcs, loops))
        rounds.append(large / small)
    return statistics.median(rounds)


def _repeated_jacobian(residual, x0):
    """``residual(forward.seed(x0)).dvalue`` as a function of no arguments, called
    twice first: the second evaluation makes the merge plans, so that the timed
    ones find their structure, as in the table."""
    from sparsegrad import forward

    def jacobian():
        return residual(forward.seed(x0)).dvalue

    jacobian()
    jacobian()
    return jacobian


#: the smallest grid of each problem, where an evaluation costs only its fixed cost
FIXED_COST_SIZES = {"sw": 5, "pb": 10, "bratu": 5, "dd": 10}


def measure_fixed_cost(key, repeats=7, min_time=0.02, recorded=False):
    """Median seconds of one value+Jacobian evaluation of problem ``key`` on its
    smallest grid (:data:`FIXED_COST_SIZES`), after two untimed evaluations:
    by ``forward.seed``, or by the default engine (``recorded``)."""
    residual, x0 = _problems.get(key).setup(FIXED_COST_SIZES[key])
    if recorded:
        import sparsegrad
        evaluate = sparsegrad.value_and_jacobian(residual)
        jacobian = functools.partial(evaluate, x0)
        jacobian()
        jacobian()
    else:
        jacobian = _repeated_jacobian(residual, x0)
    number = _loops(jacobian, min_time)
    return statistics.median(_sample(jacobian, number) for _ in range(repeats))


def measure_floor(nnz, repeats=7, min_time=0.02):
    """Median seconds to write ``nnz`` float64 values once into memory already
    allocated (``ndarray.fill``): the least any Jacobian of ``nnz`` entries
    costs, its data written once, with nothing computed."""
    data = np.empty(max(int(nnz), 1))
    write = functools.partial(data.fill, 0.5)
    number = _loops(write, min_time)
    return statistics.median(_sample(write, number) for _ in range(repeats))


def measure_first_call(key, n, rounds=3):
    """``(ratio, recorded seconds, eager seconds)``: the first call of the default
    engine (``value_and_jacobian(F)``: light values, compile, program) over the
    first call of ``trace=False``, each of a new function from emptied caches
    (``clear_structure_cache``: the structure, kept index copies and recorded
    programs), the two alternated over ``rounds`` rounds; the median ratio, and
    the medians of the times."""
    import sparsegrad
    residual, x0 = _problems.get(key).setup(n)
    times = {True: [], False: []}
    for _ in range(rounds):
        for trace in (False, True):
            sparsegrad.clear_structure_cache()
            evaluate = sparsegrad.value_and_jacobian(lambda x: residual(x), trace=trace)
            gc.collect()
            start = time.perf_counter()
            evaluate(x0)
            times[trace].append(time.perf_counter() - start)
    ratio = statistics.median(r / e for r, e in zip(times[True], times[False]))
    return ratio, statistics.median(times[True]), statistics.median(times[False])


def measure_hessian(key, n, repeats=7, min_time=0.02):
    """Times of ``value_grad_and_hessian`` of energy ``key`` at size ``n``
    against the numpy energy, both engines alternated with it: the medians
    (``energy``, ``recorded``, ``eager``), the medians of the per-repeat
    ratios (``ratio``: the default engine, ``eager_ratio``), the first call
    of a new function from emptied caches (``first``, seconds) and the
    Hessian's ``nnz``."""
    import sparsegrad
    energy, x0 = _problems.ENERGIES[key].setup(n)
    sparsegrad.clear_structure_cache()
    sparsegrad.release_memory_pool()
    gc.collect()
    evaluate = sparsegrad.value_grad_and_hessian(lambda x: energy(x))
    start = time.perf_counter()
    H = evaluate(x0)[2]
    first = time.perf_counter() - start
    funcs = {"energy": lambda: energy(x0), "recorded": lambda: evaluate(x0),
             "eager": functools.partial(sparsegrad.value_grad_and_hessian(energy, trace=False),
                                        x0)}
    samples, _ = interleaved(funcs, repeats, min_time)
    out = {name: statistics.median(v) for name, v in samples.items()}
    out["ratio"] = statistics.median(r / e for r, e in zip(samples["recorded"],
                                                            samples["energy"]))
    out["eager_ratio"] = statistics.median(r / e for r, e in zip(samples["eager"],
                                                                  samples["energy"]))
    out.update(key=key, n=n, first=first, nnz=int(H.nnz),
               reason=evaluate.cache_info().reason)
    return out


def report_hessians(results, out=print):
    """Print the Hessian section of the report."""
    out("Hessians: value, gradient and Hessian / the numpy energy, repeated calls "
        "(target %.1fx)" % HESSIAN_TARGET)
    out("%-28s %10s %9s %9s %9s %10s %10s" % ("energy", "energy", "default", "ratio",
                                              "eager", "first", "nnz(H)"))
    for r in results:
        problem = _problems.ENERGIES[r["key"]]
        out("%-28s %9.2fms %8.2fms %8.2fx %8.2fx %9.3fs %10d  %s" % (
            problem.label(r["n"]), 1e3 * r["energy"], 1e3 * r["recorded"], r["ratio"],
            r["eager_ratio"], r["first"], r["nnz"],
            _mark(r["ratio"] <= HESSIAN_TARGET)))
        if r["reason"]:
            out("    (the default engine computed it by forward.seed: %s)" % r["reason"])


def scaling(results, growths=None):
    """Linear-scaling checks between consecutive sizes of each problem.

    For sizes ``a < b``: ``growth = (t_b / t_a) / (nnz_b / nnz_a)`` with ``t`` the
    value+Jacobian time, ``t_b / t_a`` taken from ``growths`` (``(key, a, b)`` ->
    time ratio measured side by side, :func:`measure_growth`) where given, else
    from the results' own times; ``per_4x = 4 * growth`` is the time growth for 4x
    the nonzeros.  PASS when ``growth`` lies in ``[1/1.3, 1.3]``; ``target`` says
    whether the step is one of ``SCALING_TARGETS`` (only those count as failures).
    """
    growths = growths or {}
    by_size = {(r["problem"], r["size"]): r for r in results}
    checks = []
    for key, n_a, n_b in scaling_steps(results):
        a, b = by_size[key, n_a], by_size[key, n_b]
        nnz_growth = b["nnz"] / a["nnz"]
        side_by_side = (key, n_a, n_b) in growths
        time_growth = (growths[key, n_a, n_b] if side_by_side
                       else b["jacobian_s"] / a["jacobian_s"])
        growth = time_growth / nnz_growth
        checks.append({"problem": key, "from": n_a, "to": n_b,
                       "from_label": a["label"], "to_label": b["label"],
                       "nnz_growth": nnz_growth, "time_growth": time_growth,
                       "side_by_side": side_by_side, "growth": growth, "per_4x": 4 * growth,
                       "pass": bool(1 / SCALING_TOLERANCE <= growth <= SCALING_TOLERANCE),
                       "target": (key, n_a, n_b) in SCALING_TARGETS})
    return checks


# ---------------------------------------------------------------- reporting


def _mark(ok):
    return "" if ok is None else ("PASS" if ok else "FAIL")


def _range(lo_hi):
    lo, hi = lo_hi
    return ("%gx" % lo) if lo == hi else ("%g-%gx" % (lo, hi))


def _print_result(r, out):
    target = r["target"]
    ratio_col = "%7.2fx" % r["ratio"]
    ratio_target = ("<=%gx %s" % (target, _mark(r["ratio_pass"]))) if target else ""
    mem = ("%5.2fx <=%gx %s" % (r["memory_ratio"], MEMORY_TARGET, _mark(r["memory_pass"]))
           if "memory_ratio" in r else "-")
    out("%-24s %9d %9d %10.3f %10.3f %s %-12s %5.2f <=%g %-4s  %s" % (
        r["name"] + " " + r["label"], r["unknowns"], r["nnz"], 1e3 * r["residual_s"],
        1e3 * r["jacobian_s"], ratio_col, ratio_target, r["sparsity_ratio"], SPARSITY_TARGET,
        _mark(r["sparsity_pass"]), mem))


def report(results, checks, out=print, fixed_costs=None, recorded_fixed_costs=None,
           first_calls=None):
    """Print the tables of ``run``'s results (``fixed_costs``: problem key ->
    seconds, :func:`measure_fixed_cost`)."""
    out("%-24s %9s %9s %10s %10s %8s %-12s %-19s %s" % (
        "problem size", "unknowns", "nnz", "resid[ms]", "jac[ms]", "jac/res", "target",
        "sparsity/seed", "mem/J"))
    for r in results:
        _print_result(r, out)
    if any("memory_recorded_ratio" in r for r in results):
        out("")
        out("memory beyond the residual's own peak / Jacobian bytes (tracemalloc): "
            "forward.seed repeated (mem/J above), the default engine repeated, the first "
            "call from emptied caches; and the free blocks the memory pool holds after")
        for r in results:
            if "memory_recorded_ratio" in r:
                out("  %-24s seed %5.2fx   default engine %5.2fx   first call %5.2fx   "
                    "pool holds %5.2fx" % (r["name"] + " " + r["label"], r["memory_ratio"],
                                            r["memory_recorded_ratio"],
                                            r["memory_first_ratio"], r["pool_held_ratio"]))
    if checks:
        out("")
        out("linear scaling (value+Jacobian time growth per 4x the nonzeros, the two "
            "sizes timed side by side; target 4x within %gx: %.2f..%.2f)"
            % (SCALING_TOLERANCE, 4 / SCALING_TOLERANCE, 4 * SCALING_TOLERANCE))
        for c in checks:
            out("  %-18s %9s -> %-9s nnz x%-6.2f time x%-6.2f per 4x nnz: %5.2fx %s%s" % (
                _problems.get(c["problem"]).name, c["from_label"], c["to_label"],
                c["nnz_growth"], c["time_growth"], c["per_4x"],
                _mark(c["pass"]) if c["target"] else "(info)",
                "" if c["side_by_side"] else " (times of the table)"))
    if results and "first_ratio" in results[0]:
        out("")
        out("first evaluation of each case, sparsegrad's memory pool and structure cache "
            "emptied before it (repeated evaluations above reuse both)")
        for r in results:
            out("  %-30s first %9.3f ms  %7.2fx the residual   (repeated %7.2fx)" % (
                r["name"] + " " + r["label"], r["first_jacobian_s"] * 1e3, r["first_ratio"],
                r["ratio"]))
    with_peers = [r for r in results if r["peers"]]
    if with_peers:
        out("")
        out("value+Jacobian / residual beside the peers (their published figures, "
            "their machine)")
        out("  %-30s %9s %s" % ("problem", "ours", " ".join("%17s" % p for p in PEER_NAMES)))
        for r in with_peers:
            out("  %-30s %8.2fx %s" % (r["name"] + " " + r["label"], r["ratio"], " ".join(
                "%17s" % _range(r["peers"][p]) for p in PEER_NAMES)))
    by_hand = [r for r in results if "by_hand_ratio_pool" in r]
    if by_hand:
        out("")
        out("beside a Jacobian derived by hand with numpy (asv_benchmarks/hand_coded.py; "
            "value+Jacobian / residual, all three on sparsegrad's memory pool)")
        for r in by_hand:
            out("  %-30s sparsegrad %7.2fx   by hand %7.2fx" % (
                r["name"] + " " + r["label"], r["ratio_pool"], r["by_hand_ratio_pool"]))
    recorded = [r for r in results if r.get("traced_ratio_pool") is not None]
    if recorded:
        out("")
        out("the default engine: value_and_jacobian(F) (recorded) / residual, beside "
            "forward.seed, both repeated, all on sparsegrad's memory pool")
        for r in recorded:
            engine = r.get("engine_target")
            floor = r.get("floor_s")
            out("  %-30s recorded %7.2fx   forward.seed %7.2fx   recorded/seed %5.2f%s%s" % (
                r["name"] + " " + r["label"], r["traced_ratio_pool"], r["ratio_pool"],
                r["traced_ratio_pool"] / r["ratio_pool"],
                "" if floor is None else "   floor %.2fx, recorded at %.1fx the floor" % (
                    floor / r["residual_pool_s"], r["traced_s"] / floor),
                "" if engine is None else "   target <=%gx %s" % (engine,
                                                                  _mark(r["engine_pass"]))))
    repeated = [r for r in results if r.get("repeated_target")]
    if repeated:
        out("")
        out("repeated evaluation (the structure cache holds the structure of "
            "earlier evaluations)")
        for r in repeated:
            out("  %-30s value_and_jacobian(trace=True) %5.2fx the residual on the pool   "
                "target <=%gx %s   (%.3f against %.3f ms; forward.seed %.2fx)" % (
                    r["name"] + " " + r["label"], r["traced_ratio_pool"],
                    r["repeated_target"], _mark(r["repeated_pass"]), r["traced_s"] * 1e3,
                    r["residual_pool_s"] * 1e3, r["ratio_pool"]))
    failed = failures(results, checks)
    out("")
    import sparsegrad
    if fixed_costs:
        from sparsegrad import _compiled
        out("fixed cost of an evaluation (value+Jacobian on the smallest grid, where the "
            "arrays cost nothing; %d of %d Python modules compiled): %s" % (
                len(_compiled.compiled_modules()), len(_compiled.MODULES), ", ".join(
                    "%s %s %.3f ms" % (key, _problems.get(key).size_text(FIXED_COST_SIZES[key]),
                                       1e3 * seconds) for key, seconds in fixed_costs.items())))
    if recorded_fixed_costs:
        out("fixed cost of the default engine (value_and_jacobian(F), recorded, on the same "
            "grids; target sw <= %.1f ms): %s" % (1e3 * RECORDED_FIXED_COST_TARGET, ", ".join(
                "%s %.3f ms" % (key, 1e3 * seconds)
                for key, seconds in recorded_fixed_costs.items())))
    if first_calls:
        out("first call of the default engine (light values, compile, program) / first call "
            "of forward.seed, each from emptied caches, median of alternated rounds "
            "(target <= %gx):" % FIRST_CALL_TARGET)
        for case, (ratio, recorded, eager) in first_calls.items():
            out("  %-14s %5.2fx   (%.1f against %.1f ms) %s" % (
                case, ratio, 1e3 * recorded, 1e3 * eager, _mark(ratio <= FIRST_CALL_TARGET)))
    pool = sparsegrad.memory_pool_info()
    if pool.enabled:
        out("note: sparsegrad's memory pool is on (%d MiB held, %d allocations reused, %d "
            "fresh); numpy's residual keeps its own allocator and, from arrays of about "
            "128 KiB on, its own page faults: read the ratios with the residual column "
            "(docs/performance.md)" % (pool.held_bytes // 2 ** 20, pool.reused, pool.fresh))
    structure = sparsegrad.structure_cache_info()
    if structure.enabled:
        out("note: repeated evaluations find their structure (selections, index copies, "
            "row numbers of moves, merge plans) in sparsegrad's structure cache: %d hits, "
            "%d misses (emptied before each first evaluation), %d MiB held now "
            "(docs/solving.md, "
            "Repeated evaluation)" % (structure.hits, structure.misses,
                                      structure.held_bytes // 2 ** 20))
    out("note: merges ran in up to %d thread(s) (sparsegrad.set_num_threads, --threads); "
        "numpy's residual runs in one" % sparsegrad.get_num_threads())
    if failed:
        out("FAILED targets (%d): %s" % (len(failed), "; ".join(failed)))
    else:
        out("every measured target met")


def failures(results, checks):
    """Short descriptions of every failed target."""
    failed = []
    for r in results:
        where = "%s %s" % (r["problem"], r["label"])
        if r["ratio_pass"] is False:
            failed.append("%s jac/res %.2fx > %gx" % (where, r["ratio"], r["target"]))
        if r.get("repeated_pass") is False:
            failed.append("%s repeated %.2fx > %gx (repeated evaluation)" % (
                where, r["traced_ratio_pool"], r["repeated_target"]))
        if r.get("engine_pass") is False:
            failed.append("%s default engine %.2fx > %gx" % (
                where, r["traced_ratio_pool"], r["engine_target"]))
        if not r["sparsity_pass"]:
            failed.append("%s sparsity/seed %.2f > %g" % (where, r["sparsity_ratio"],
                                                           SPARSITY_TARGET))
        if r.get("memory_pass") is False:
            failed.append("%s mem/J %.2fx > %gx" % (where, r["memory_ratio"], MEMORY_TARGET))
    for c in checks:
        if c["target"] and not c["pass"]:
            failed.append("%s %s->%s scaling %.2fx per 4x nnz" % (
                c["problem"], c["from_label"], c["to_label"], c["per_4x"]))
    return failed


def environment():
    """The software and machine the figures were measured with."""
    import os
    import scipy
    import sparsegrad
    try:
        import subprocess
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root,
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"commit": commit, "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "sparsegrad": sparsegrad.__version__,
            "kernels": sparsegrad.KERNELS, "machine": platform.machine(),
            "processor": platform.processor(), "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "malloc_top_pad": os.environ.get("MALLOC_TOP_PAD_", "")}


def run(cases, repeats=7, min_time=0.02, memory=True, out=print, residual_in_pool=False):
    """Measure ``cases`` (a list of ``(problem_key, size)``), print the report, return the data."""
    results = []
    for key, n in cases:
        results.append(measure(key, n, repeats=repeats, min_time=min_time, memory=memory,
                               residual_in_pool=residual_in_pool))
    checks = scaling(results, {step: measure_growth(*step, repeats=repeats, min_time=min_time)
                               for step in scaling_steps(results)})
    keys = list(dict.fromkeys(key for key, _ in cases))
    fixed_costs = {key: measure_fixed_cost(key, repeats=repeats, min_time=min_time)
                   for key in keys}
    recorded_fixed_costs = {key: measure_fixed_cost(key, repeats=repeats, min_time=min_time,
                                                    recorded=True) for key in keys}
    # (last: it empties every cache the measurements above filled)
    first_calls = {"%s-%d" % (key, n): measure_first_call(key, n) for key, n in cases}
    if out is not None:
        report(results, checks, out=out, fixed_costs=fixed_costs,
               recorded_fixed_costs=recorded_fixed_costs, first_calls=first_calls)
    return {"environment": environment(), "repeats": repeats, "min_time": min_time,
            "targets": {"ratio": {"%s-%d" % k: v for k, v in TARGETS.items()},
                        "repeated": {"%s-%d" % k: v for k, v in REPEATED_TARGETS.items()},
                        "sparsity": SPARSITY_TARGET, "memory": MEMORY_TARGET,
                        "scaling_tolerance": SCALING_TOLERANCE,
                        "scaling_steps": ["%s-%d-%d" % k for k in sorted(SCALING_TARGETS)]},
            "peer_names": list(PEER_NAMES),
            "results": results, "scaling": checks, "fixed_costs": fixed_costs,
            "recorded_fixed_costs": recorded_fixed_costs,
            "first_calls": {k: list(v) for k, v in first_calls.items()},
            "failures": failures(results, checks)}


def _parse_sizes(specs):
    sizes = {}
    for spec in specs or ():
        key, _, values = spec.partition("=")
        if key not in _problems.ENERGIES:
            _problems.get(key)
        sizes[key] = [int(float(v)) for v in values.split(",") if v]
    return sizes


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m asv_benchmarks.ratios",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default=",".join(_problems.PROBLEMS),
                        help="comma-separated keys: %s (default: all)"
                        % ",".join(_problems.PROBLEMS))
    parser.add_argument("--size", action="append", metavar="KEY=N[,N...]",
                        help="sizes for one problem instead of the default ones (repeatable)")
    parser.add_argument("--large", action="store_true",
                        help="the sizes from 10^6 to 10^7 unknowns instead of the default "
                             "ones: %s (slow: minutes, several GiB)"
                        % ", ".join("%s=%s" % (k, ",".join("%d" % n for n in v))
                                    for k, v in LARGE_SIZES.items()))
    parser.add_argument("--quick", action="store_true",
                        help="3 repeats of at least 5 ms each (default: 7 of 20 ms)")
    parser.add_argument("--repeats", type=int, help="repeats per measurement")
    parser.add_argument("--min-time", type=float, help="seconds per timing sample, at least")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc run")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--strict", action="store_true", help="exit status 1 if a target fails")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="call sparsegrad.keep_freed_memory() first (glibc keeps freed "
                             "heap memory instead of faulting it in again; see "
                             "docs/performance.md); off by default")
    parser.add_argument("--residual-in-pool", action="store_true",
                        help="time the numpy residual with sparsegrad's memory pool as its "
                             "allocator too, so that neither side pays page faults")
    parser.add_argument("--no-pool", action="store_true",
                        help="turn sparsegrad's memory pool off (memory_pool_limit(0)) to "
                             "see what it gains; on by default, as for users")
    parser.add_argument("--hessians", action="store_true",
                        help="only the Hessians of the energies (%s) at sizes %s"
                        % (",".join(_problems.ENERGIES), ",".join(
                            "%s=%s" % (k, ",".join(map(str, p.sizes)))
                            for k, p in _problems.ENERGIES.items())))
    parser.add_argument("--threads", type=int, metavar="N",
                        help="threads for sparsegrad's merges (sparsegrad.set_num_threads; "
                             "default: SPARSEGRAD_NUM_THREADS or min(4, CPUs))")
    args = parser.parse_args(argv)
    import sparsegrad
    if args.threads is not None:
        sparsegrad.set_num_threads(args.threads)
    if args.no_pool:
        sparsegrad.memory_pool_limit(0)
    if args.keep_freed_memory:
        if not sparsegrad.keep_freed_memory():
            print("keep_freed_memory: not glibc, nothing changed")

    sizes = _parse_sizes(args.size)
    if args.hessians:
        repeats = args.repeats or (3 if args.quick else 7)
        min_time = args.min_time if args.min_time is not None else (
            0.005 if args.quick else 0.02)
        results = [measure_hessian(k, n, repeats, min_time) for k, p in
                   _problems.ENERGIES.items() for n in sizes.get(k, p.sizes)]
        report_hessians(results)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"environment": environment(), "hessians": results}, f, indent=1)
                f.write("\n")
        failed = any(r["ratio"] > HESSIAN_TARGET for r in results)
        return 1 if (args.strict and failed) else 0
    keys = [k for k in args.problems.split(",") if k]
    for k in keys:
        _problems.get(k)
    if args.large:
        keys = [k for k in keys if k in LARGE_SIZES]
        sizes = dict(LARGE_SIZES, **sizes)
    cases = [(k, n) for k in keys for n in sizes.get(k, _problems.get(k).sizes)]
    repeats = args.repeats or (3 if args.quick else 7)
    min_time = args.min_time if args.min_time is not None else (0.005 if args.quick else 0.02)
    data = run(cases, repeats=repeats, min_time=min_time, memory=not args.no_memory,
               residual_in_pool=args.residual_in_pool)
    data["keep_freed_memory"] = bool(args.keep_freed_memory)
    data["memory_pool"] = sparsegrad.memory_pool_info()._asdict()
    data["structure_cache"] = sparsegrad.structure_cache_info()._asdict()
    data["residual_in_pool"] = bool(args.residual_in_pool)
    data["threads"] = sparsegrad.get_num_threads()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    return 1 if (args.strict and data["failures"]) else 0


if __name__ == "__main__":
    sys.exit(main())
