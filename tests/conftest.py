"""Shared pytest configuration: hypothesis profiles and common fixtures.

Hypothesis profiles (select with ``HYPOTHESIS_PROFILE=name``; under ``CI=true``
the ``ci`` profile is the default):

``default``
    no deadline (first calls compile/cache and would trip it), 50 examples.
``ci``
    no deadline, 20 examples, derandomized: quick and reproducible.
``thorough``
    no deadline, 500 examples, for local bug hunting.
"""
import os

import numpy as np
import pytest

from device_check import DEVICES, namespace

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is a test extra; plain tests still run
    settings = None

if settings is not None:
    settings.register_profile("default", deadline=None, max_examples=50)
    settings.register_profile(
        "ci", deadline=None, max_examples=20, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("thorough", deadline=None, max_examples=500)
    _ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if _ci else "default"))

RNG_SEED = 20240611


@pytest.fixture(scope="session")
def cupy():
    """CuPy with a CUDA device; the test is skipped, saying why, without one."""
    return namespace("cupy")


@pytest.fixture(params=DEVICES)
def device(request):
    """The array module of a device, for the device-path tests: the strict fake of
    ``sparsegrad.gpu._device`` (numpy arrays that refuse host arrays, on every
    machine), then CuPy on a real GPU (skipped, saying why, without one); see
    ``device_check.namespace``."""
    return namespace(request.param)


@pytest.fixture
def fresh_structure_cache():
    """The structure cache emptied before and after the test, its limit restored."""
    import sparsegrad
    limit = sparsegrad.structure_cache_limit()
    sparsegrad.clear_structure_cache()
    yield
    sparsegrad.structure_cache_limit(limit)
    sparsegrad.clear_structure_cache()


@pytest.fixture
def rng():
    """A numpy Generator with a fixed seed, fresh for every test."""
    return np.random.default_rng(RNG_SEED)
