"""Benchmarks of sparsegrad: asv suites and a plain ratios script.

``problems``
    the single source of the benchmark residuals (shallow water, Poisson-Boltzmann,
    Bratu, drift-diffusion), written in plain numpy.
``benchmarks``
    the asv suites (``asv run --python=same`` from the repository root).
``ratios``
    ``python -m asv_benchmarks.ratios``: value+Jacobian / residual ratios and the
    other speed targets, without asv.
"""
