"""What a repeated value + Jacobian asks of a device, counted on the fake device.

A GPU evaluation is bound by its kernel launches and by its read-backs (each
waits for the device); copies of structure from the host would add transfer
time that grows with the problem.  The fake device of
``sparsegrad.gpu._device`` counts all three, so they are measured here on
every machine: the benchmark problems, set up on the device, evaluated a
third time (the structure of the first two kept).
"""
import os
import sys

import pytest

from sparsegrad import forward
from sparsegrad.gpu._device import fake, fake_backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:   # asv_benchmarks is not installed; pytest may start elsewhere
    sys.path.insert(0, ROOT)

from asv_benchmarks import problems  # noqa: E402

#: per problem, two sizes and the most a repeated evaluation may ask at either:
#: copies from the host, read-backs to it, operations (each a launch or more)
#: (shallow water's read-backs compare the row numbers its gathers cached with
#: its device index arrays)
MOST = {
    "sw": ((10, 40), {"host_to_device": 0, "device_to_host": 16, "operations": 366}),
    "pb": ((100, 3000), {"host_to_device": 2, "device_to_host": 0, "operations": 46}),
    "bratu": ((10, 40), {"host_to_device": 4, "device_to_host": 0, "operations": 38}),
    "dd": ((100, 3000), {"host_to_device": 9, "device_to_host": 0, "operations": 258}),
}


def repeated(key, n):
    """The counts of the third value + Jacobian of problem ``key`` at size ``n``."""
    fake_backend()
    residual, x0 = problems.get(key).setup(n, xp=fake)
    for _ in range(2):
        residual(forward.seed(x0)).dvalue
    with fake.counting() as counts:
        residual(forward.seed(x0)).dvalue
    return counts


@pytest.mark.parametrize("key", sorted(MOST))
def test_a_repeated_evaluation_asks_the_same_at_every_size(fresh_structure_cache, key):
    sizes, most = MOST[key]
    small, large = (repeated(key, n) for n in sizes)
    # nothing grows with the problem: launches, read-backs, and the bytes copied
    # from the host (numbers and the residual's own small host arrays, never row
    # numbers or other structure)
    assert small == large
    for name, count in most.items():
        assert large[name] <= count, (name, large[name])


def test_the_counts_count():
    d = fake.asarray([1.0, 2.0])                    # (outside: not counted)
    with fake.counting() as counts:
        e = fake.exp(d)[fake.asarray([1, 0])]       # a copy, two launches
        assert bool(e[0] > 1.0)                     # a launch and a read-back
        fake.asnumpy(e)                             # a read-back
    assert counts == {"host_to_device": 1, "host_to_device_bytes": 16, "operations": 3,
                      "device_to_host": 2, "device_to_host_bytes": 17}
