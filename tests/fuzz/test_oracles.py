"""The fuzzer's own checks: what it reports, before scipy reads a matrix."""
import numpy as np
import scipy.sparse as sp

from . import oracles, runner


def test_a_malformed_jacobian_is_reported_before_scipy_reads_it():
    assert oracles._malformed(sp.csr_matrix(np.eye(3))) is None
    out_of_range = sp.csr_matrix((np.ones(3), np.array([0, 1, 5]), np.array([0, 1, 2, 3])),
                                 shape=(3, 3))
    assert "out of range" in oracles._malformed(out_of_range)
    shuffled = sp.csr_matrix(np.eye(3))
    shuffled.indptr = np.array([0, 2, 1, 3], dtype=shuffled.indptr.dtype)
    assert "malformed" in oracles._malformed(shuffled)


def test_the_summary_names_the_seeds_of_each_class():
    summary = runner.Summary()
    summary.seeds, summary.seconds = (5, 9), 1.0

    class Program:
        seed, family, dtype = 7, "general", np.dtype(np.float64)

    class Failure:
        program, key = Program(), ("general", "trace", "entry #")

    summary.failures = [Failure()]
    summary.classes[Failure.key] = 1
    assert summary.text().splitlines()[-1].endswith("(seeds 7)")
