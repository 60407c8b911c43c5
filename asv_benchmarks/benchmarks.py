"""asv benchmarks: every problem of ``problems`` at the sizes of the speed targets.

One class per problem, parametrised over the size; the methods are written once,
in ``_Suite``, and time exactly what their names say:

``time_residual``            the plain numpy residual ``F(x)``
``time_value_and_jacobian``  ``F(forward.seed(x)).dvalue``
``time_value_and_jacobian_traced``  ``value_and_jacobian(F, trace=True)(x)`` after
                             its first call (the recorded evaluation;
                             a problem it does not take goes the eager way)
``time_sparsity``            ``F(forward.seed_sparsity(x)).dvalue``
``peakmem_value_and_jacobian``  peak resident memory of a Jacobian evaluation
``time_first_three_evaluations``  three evaluations from an empty structure cache:
                             the first builds the structure, the second the merge
                             plans, the third goes by them (what a Newton solve
                             pays up front)

``FixedCost.time_value_and_jacobian`` times each problem on its smallest grid
(the fixed cost of an evaluation); and one ``track_`` class per problem whose
benchmarks measure ratios side by side in one process (``ratios.measure_times``:
interleaved repeats, median):

``track_jacobian_ratio``     value+Jacobian time / residual time
``track_traced_ratio_on_pool``  the recorded evaluation's time / the residual's,
                             both on the memory pool (the repeated-evaluation target)
``track_sparsity_ratio``     seed_sparsity time / seed time
``track_memory_ratio``       peak traced extra memory / bytes of the Jacobian

``ShallowWaterByHand`` times the shallow-water Jacobian derived by hand with
numpy (``hand_coded``), the comparison that a user who writes Jacobians makes.

Run from the repository root (``asv.conf.json`` lives there)::

    pip install -e .                       # asv imports the installed sparsegrad
    asv run --python=same --quick          # one sample each, current environment
    asv run --python=same -b ShallowWater  # one problem
"""
import sparsegrad
from sparsegrad import forward

from . import hand_coded, problems
from .ratios import FIXED_COST_SIZES, LARGE_SIZES, measure_hessian, measure_times, memory_ratio


class _Suite:
    """The timing methods, shared by the per-problem classes below."""

    problem = None
    param_names = ["size"]
    timeout = 600
    # the largest sizes take seconds per call: few samples are enough
    repeat = (1, 5, 20.0)
    number = 1

    def setup(self, n):
        self.residual, self.x0 = self.problem.setup(n)
        self.traced = sparsegrad.value_and_jacobian(self.residual, trace=True)
        self.traced(self.x0)            # (compiles the program)

    def time_residual(self, n):
        self.residual(self.x0)

    def time_value_and_jacobian_traced(self, n):
        self.traced(self.x0)

    def time_value_and_jacobian(self, n):
        self.residual(forward.seed(self.x0)).dvalue

    def time_sparsity(self, n):
        self.residual(forward.seed_sparsity(self.x0)).dvalue

    def peakmem_value_and_jacobian(self, n):
        self.residual(forward.seed(self.x0)).dvalue

    def time_first_three_evaluations(self, n):
        sparsegrad.clear_structure_cache()
        for _ in range(3):
            self.residual(forward.seed(self.x0)).dvalue


class _Ratios:
    """Ratios measured side by side in one process (``track_``: reported as numbers)."""

    problem = None
    param_names = ["size"]
    timeout = 1200
    unit = "ratio"
    ratio_repeats = 5       # interleaved residual / Jacobian samples per measurement
    ratio_min_time = 0.02   # seconds per sample, at least

    def setup(self, n):
        self.residual, self.x0 = self.problem.setup(n)

    def track_jacobian_ratio(self, n):
        return measure_times(self.residual, self.x0, repeats=self.ratio_repeats,
                             min_time=self.ratio_min_time, sparsity=False)["ratio"]

    def track_jacobian_ratio_on_pool(self, n):
        # (the residual timed on sparsegrad's memory pool too: no page faults on
        # either side, the measure of the repeated-evaluation target)
        return measure_times(self.residual, self.x0, repeats=self.ratio_repeats,
                             min_time=self.ratio_min_time, sparsity=False,
                             fault_free=True)["ratio_pool"]

    def track_traced_ratio_on_pool(self, n):
        return measure_times(self.residual, self.x0, repeats=self.ratio_repeats,
                             min_time=self.ratio_min_time, sparsity=False,
                             traced=True)["traced_ratio_pool"]

    def track_sparsity_ratio(self, n):
        return measure_times(self.residual, self.x0, repeats=self.ratio_repeats,
                             min_time=self.ratio_min_time)["sparsity_ratio"]

    def track_memory_ratio(self, n):
        return memory_ratio(self.residual, self.x0)[2]


def _suites(base, suffix, sizes=None):
    """One class of ``base`` per problem, at the problem's sizes or at ``sizes[key]``
    (then only for the problems it names)."""
    made = {}
    for key, problem in problems.PROBLEMS.items():
        if sizes is not None and key not in sizes:
            continue
        name = "".join(part.capitalize() for part in problem.name.replace("-", " ").split())
        made[name + suffix] = type(name + suffix, (base,), {
            "problem": problem,
            "params": [list(problem.sizes if sizes is None else sizes[key])],
            "__doc__": "%s (%s)" % (problem.name, problem.size_label),
            "__module__": __name__})
    return made


class _LargeRatios(_Ratios):
    """Slow: 10^6 to 10^7 unknowns (minutes per class and several GiB, as
    ``ratios --large``); the scaling target compares the two sizes of each."""

    timeout = 3600
    ratio_repeats = 3
    ratio_min_time = 0.005


# ShallowWater, PoissonBoltzmann, Bratu, DriftDiffusion, their *Ratios twins, and
# *LargeRatios at the sizes of ratios --large (slow: run with -b Large to select them,
# or skip them with -b "^(?!.*Large)")
globals().update(_suites(_Suite, ""))
globals().update(_suites(_Ratios, "Ratios"))
globals().update(_suites(_LargeRatios, "LargeRatios", LARGE_SIZES))


class ConstantOperators:
    """Residuals with products by constant operators, whose conversion the
    structure cache keeps between evaluations: a dense differentiation matrix
    (``D @ u``, a spectral collocation method), a tridiagonal scipy matrix in DIA
    format (``L @ u``, as ``scipy.sparse.diags`` makes it) and a few dense rows
    (``B @ u``, constraints or observations), each plus ``exp(u)``."""

    param_names = ["operator"]
    params = [["dense 1000x1000", "dia 10^6", "dense 3 x 10^5"]]
    timeout = 600
    repeat = (1, 5, 20.0)
    number = 1

    def setup(self, operator):
        import numpy as np
        import scipy.sparse
        rng = np.random.default_rng(0)
        if operator == "dense 1000x1000":
            A, n = rng.standard_normal((1000, 1000)), 1000
        elif operator == "dia 10^6":
            n = 10 ** 6
            A = scipy.sparse.diags([np.ones(n - 1), -2.0 * np.ones(n), np.ones(n - 1)],
                                   [-1, 0, 1])
        else:
            A, n = rng.standard_normal((3, 10 ** 5)), 10 ** 5
        self.x0 = rng.standard_normal(n) * 0.1
        rows = A.shape[0]
        self.residual = lambda u: A @ u + np.exp(u[:rows])

    def time_residual(self, operator):
        self.residual(self.x0)

    def time_value_and_jacobian(self, operator):
        self.residual(forward.seed(self.x0)).dvalue


class ShallowWaterByHand:
    """The shallow-water Jacobian derived by hand with numpy
    (``hand_coded.shallow_water``), what a user writes without sparsegrad:
    ``time_value_and_jacobian`` is the residual and that Jacobian,
    ``track_ratio_on_pool`` their time over the residual's, all on
    sparsegrad's memory pool as ``ShallowWaterRatios.track_jacobian_ratio_on_pool``."""

    param_names = ["size"]
    params = [list(problems.get("sw").sizes)]
    timeout = 600
    unit = "ratio"

    def setup(self, n):
        self.residual, self.jacobian, self.x0 = hand_coded.shallow_water(n)

    def time_value_and_jacobian(self, n):
        self.residual(self.x0)
        self.jacobian(self.x0)

    def track_ratio_on_pool(self, n):
        return measure_times(self.residual, self.x0, repeats=_Ratios.ratio_repeats,
                             min_time=_Ratios.ratio_min_time, sparsity=False,
                             by_hand=self.jacobian)["by_hand_ratio_pool"]


class MinimalSurfaceHessian:
    """The minimal-surface energy's value, gradient and Hessian
    (``sparsegrad.value_grad_and_hessian``, the default engine) beside the
    numpy energy; ``track_hessian_ratio`` is their ratio as the ratios script
    measures it (``python -m asv_benchmarks.ratios --hessians``)."""

    param_names = ["size"]
    params = [list(problems.ENERGIES["minsurf"].sizes)]
    timeout = 600

    def setup(self, n):
        self.energy, self.x0 = problems.ENERGIES["minsurf"].setup(n)
        self.hessian = sparsegrad.value_grad_and_hessian(self.energy)
        self.hessian(self.x0)

    def time_energy(self, n):
        self.energy(self.x0)

    def time_value_grad_and_hessian(self, n):
        self.hessian(self.x0)

    def track_hessian_ratio(self, n):
        return measure_hessian("minsurf", n, repeats=_Ratios.ratio_repeats,
                               min_time=_Ratios.ratio_min_time)["ratio"]

    track_hessian_ratio.unit = "ratio"


class FixedCost:
    """Value+Jacobian of each problem on its smallest grid
    (``ratios.FIXED_COST_SIZES``), where the arrays cost nothing: the fixed cost
    of an evaluation, the Python of every operation (``sparsegrad._compiled``)."""

    param_names = ["problem"]
    params = [sorted(FIXED_COST_SIZES)]

    def setup(self, key):
        self.residual, self.x0 = problems.get(key).setup(FIXED_COST_SIZES[key])

    def time_value_and_jacobian(self, key):
        self.residual(forward.seed(self.x0)).dvalue


class BratuGPU:
    """2-d Bratu on a CUDA device (CuPy): the residual, and value+Jacobian by
    ``sparsegrad.gpu.seed``.  Skipped without CuPy and a device (setup raises
    NotImplementedError, asv's skip).  Every timed call ends with a stream
    synchronisation, so the time is the device's, not the launch's."""

    param_names = ["size"]
    params = [[300, 1000, 2000]]
    timeout = 600

    def setup(self, n):
        from sparsegrad import gpu
        if not gpu.available():
            raise NotImplementedError("no CUDA device")
        import cupy
        self.cupy = cupy
        self.gpu = gpu
        self.residual, self.x0 = problems.get("bratu").setup(n, xp=cupy)
        self.residual(self.gpu.seed(self.x0)).dvalue      # compile and warm up
        cupy.cuda.Stream.null.synchronize()

    def time_residual(self, n):
        self.residual(self.x0)
        self.cupy.cuda.Stream.null.synchronize()

    def time_value_and_jacobian(self, n):
        self.residual(self.gpu.seed(self.x0)).dvalue
        self.cupy.cuda.Stream.null.synchronize()
