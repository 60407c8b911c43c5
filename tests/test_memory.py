"""The opt-in allocator setting: applied on glibc, harmless elsewhere, checked arguments."""
import sys

import numpy as np
import pytest

import sparsegrad
from sparsegrad import forward


def test_keep_freed_memory_applies_on_glibc_linux():
    applied = sparsegrad.keep_freed_memory(32 * 2 ** 20)
    assert isinstance(applied, bool)
    if not sys.platform.startswith("linux"):
        assert applied is False
    try:
        x = forward.seed(np.linspace(0.0, 1.0, 7))
        J = (np.exp(x) * x[::-1]).dvalue.toarray()
        x0 = np.linspace(0.0, 1.0, 7)
        expected = np.diag(np.exp(x0) * x0[::-1]) + np.exp(x0)[:, None] * np.eye(7)[::-1]
        np.testing.assert_allclose(J, expected, rtol=1e-15)
    finally:
        sparsegrad.keep_freed_memory(0)


@pytest.mark.parametrize("nbytes", [-1, 2 ** 31])
def test_keep_freed_memory_refuses_out_of_range(nbytes):
    with pytest.raises(ValueError, match="nbytes"):
        sparsegrad.keep_freed_memory(nbytes)
