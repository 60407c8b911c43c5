"""Value+Jacobian / residual on a CUDA device (CuPy): the GPU twin of ``ratios``.

The same problems (``problems.setup(n, xp=cupy)``: state, index arrays and
constants on the device), timed by :func:`ratios.measure_times` with a stream
synchronisation after every call, so the times are the device's work and not
its launches.  Each case is also checked against the CPU: the Jacobian from
``gpu.seed`` must have the CPU's pattern and, to rounding, its values.

    python -m asv_benchmarks.gpu_ratios                 # every case, table on stdout
    python -m asv_benchmarks.gpu_ratios --quick --json gpu.json
    python -m asv_benchmarks.gpu_ratios --profile sw=200   # + where the time goes

Without CuPy or a CUDA device it says so and exits with status 2.
"""
import argparse
import cProfile
import io
import json
import pstats
import sys
import time
import traceback

import numpy as np

from . import problems as _problems
from . import ratios

#: the cases timed by default: the sizes of the speed targets and one larger Bratu
CASES = (("sw", 100), ("sw", 200), ("sw", 400), ("pb", 10 ** 5), ("pb", 10 ** 6),
         ("bratu", 300), ("bratu", 1000), ("bratu", 2000), ("dd", 10 ** 5))


def compare_with_cpu(residual_device, x0_device, key, n, cupy):
    """The largest difference between the device's Jacobian and the CPU's, relative
    to the largest entry, and whether the stored patterns are the same."""
    from sparsegrad import forward
    residual, x0 = _problems.get(key).setup(n)
    J = residual(forward.seed(x0)).dvalue
    J_device = residual_device(forward.seed(x0_device)).dvalue
    J_device = J_device.get() if hasattr(J_device, "get") else J_device   # cupyx -> SciPy
    same_pattern = bool(J.shape == J_device.shape
                        and np.array_equal(J.indptr, J_device.indptr)
                        and np.array_equal(J.indices, J_device.indices))
    if not same_pattern:
        return same_pattern, float("nan")
    scale = max(float(np.max(np.abs(J.data))), 1e-300)
    return same_pattern, float(np.max(np.abs(J.data - J_device.data))) / scale


def measure(key, n, cupy, repeats, min_time):
    """Times, ratios and the CPU check of one case on the device, as a dict."""
    problem = _problems.get(key)
    residual, x0 = problem.setup(n, xp=cupy)
    sync = cupy.cuda.Stream.null.synchronize
    t = ratios.measure_times(residual, x0, repeats=repeats, min_time=min_time, sync=sync)
    same_pattern, difference = compare_with_cpu(residual, x0, key, n, cupy)
    return {"problem": key, "size": int(n), "label": problem.label(n),
            "unknowns": int(problem.unknowns(n)), "residual_s": t["residual"],
            "jacobian_s": t["jacobian"], "sparsity_s": t["sparsity"], "ratio": t["ratio"],
            "sparsity_ratio": t["sparsity_ratio"], "first_jacobian_s": t["first_jacobian"],
            "same_pattern_as_cpu": same_pattern, "max_difference_to_cpu": difference}


def profile(key, n, cupy, lines=25):
    """cProfile of five synchronised evaluations: where the host's time goes."""
    from sparsegrad import forward
    residual, x0 = _problems.get(key).setup(n, xp=cupy)
    sync = cupy.cuda.Stream.null.synchronize
    residual(forward.seed(x0)).dvalue
    sync()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(5):
        residual(forward.seed(x0)).dvalue
        sync()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(lines)
    return text.getvalue()


def environment(cupy):
    """The device and software the figures were measured with."""
    info = ratios.environment()
    properties = cupy.cuda.runtime.getDeviceProperties(0)
    info.update(cupy=cupy.__version__, device=properties["name"].decode(),
                cuda_runtime=cupy.cuda.runtime.runtimeGetVersion())
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m asv_benchmarks.gpu_ratios",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", metavar="KEY=N",
                        help="a case instead of the defaults (repeatable)")
    parser.add_argument("--quick", action="store_true",
                        help="3 repeats of at least 5 ms each (default: 7 of 20 ms)")
    parser.add_argument("--profile", action="append", metavar="KEY=N",
                        help="also print a profile of the host's time for this case")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--no-structure", action="store_true",
                        help="keep no structure between evaluations "
                             "(sparsegrad.structure_cache_limit(0)), to see what it gains")
    args = parser.parse_args(argv)
    import sparsegrad
    if args.no_structure:
        sparsegrad.structure_cache_limit(0)
    from sparsegrad import gpu
    if not gpu.available():
        print("no CUDA device (CuPy missing, or no GPU visible)")
        return 2
    import cupy
    gpu.backend()
    cases = [_parse_case(c) for c in args.case] if args.case else list(CASES)
    repeats, min_time = (3, 0.005) if args.quick else (7, 0.02)
    data = {"environment": environment(cupy), "results": [], "errors": {}, "profiles": {}}
    print("device: %(device)s, CuPy %(cupy)s, numpy %(numpy)s" % data["environment"])
    print("%-28s %10s %10s %10s %8s %8s %9s %s" % (
        "case", "unknowns", "res ms", "jac ms", "jac/res", "spars/j", "first ms",
        "vs CPU"))
    for key, n in cases:
        label = _problems.get(key).label(n)
        try:
            r = measure(key, n, cupy, repeats, min_time)
        except Exception:     # one case failing must not hide the others' figures
            data["errors"][label] = traceback.format_exc()
            print("%-28s FAILED:\n%s" % (label, data["errors"][label]))
            continue
        data["results"].append(r)
        check = ("same pattern, max diff %.1e" % r["max_difference_to_cpu"]
                 if r["same_pattern_as_cpu"] else "PATTERN DIFFERS")
        print("%-28s %10d %10.3f %10.3f %7.2fx %8.2f %9.1f %s" % (
            label, r["unknowns"], 1e3 * r["residual_s"], 1e3 * r["jacobian_s"], r["ratio"],
            r["sparsity_ratio"], 1e3 * r["first_jacobian_s"], check))
        sys.stdout.flush()
    for spec in args.profile or ():
        key, n = _parse_case(spec)
        try:
            text = profile(key, n, cupy)
        except Exception:
            text = traceback.format_exc()
        data["profiles"][spec] = text
        print("\nprofile of %s (5 evaluations, by own time):\n%s" % (spec, text))
    data["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    return 1 if data["errors"] else 0


def _parse_case(spec):
    key, _, size = spec.partition("=")
    _problems.get(key)
    return key, int(float(size))


if __name__ == "__main__":
    sys.exit(main())
