"""Differential fuzzer: random numpy programs checked against independent oracles.

``programs`` draws a program (Python source of a function ``f(x)``) from an
integer seed, ``oracles`` checks sparsegrad on it against numpy, finite
differences, the complex step, the pattern-only and Jacobian-vector-product
modes and the recorded engine, ``runner`` runs consecutive seeds and shrinks
the programs that fail.  ``python -m tests.fuzz --help`` runs it from the
command line; ``test_fuzz.py`` runs it for a fixed time under pytest.
"""
