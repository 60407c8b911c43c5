"""The differential fuzzer under pytest: consecutive seeds for a fixed time.

``SPARSEGRAD_FUZZ_SECONDS`` sets the time (default 60 s; 0 skips the run),
``SPARSEGRAD_FUZZ_START`` the first seed (default 0, the same programs at
every run).  Constructs of :data:`programs.KNOWN_OPEN` are left out.

Under pytest-xdist (``pytest -n N``) the fuzzer runs for the time once per
worker: N times the time in all, cut into parts of about 10 s that check
every PARTS-th seed, which the workers share out as they fall free.  (One
fuzzer in one worker shares the machine with the tests in the others and
checks fewer programs than a run in one process; parts of a whole minute
leave a worker idle at the end.)
"""
import os

import numpy as np
import pytest

from . import programs, runner

SECONDS = float(os.environ.get("SPARSEGRAD_FUZZ_SECONDS", "60"))
START = int(os.environ.get("SPARSEGRAD_FUZZ_START", "0"))
# (set by pytest-xdist in its workers, the same in each: they collect alike)
WORKERS = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
PARTS = 1 if WORKERS == 1 else WORKERS * max(1, round(SECONDS / 10))


@pytest.mark.skipif(SECONDS <= 0, reason="SPARSEGRAD_FUZZ_SECONDS=0")
@pytest.mark.parametrize("part", range(PARTS), ids=lambda k: "part %d of %d" % (k + 1, PARTS))
def test_random_programs_agree_with_every_oracle(part):
    summary = runner.run(seconds=SECONDS * WORKERS / PARTS, start=START + part, step=PARTS,
                         out=None)
    assert not summary.failures, "%s\n\n%s" % (summary.text(), summary.failure_report())


def test_a_seed_gives_one_program():
    for seed in range(40):
        first, second = programs.generate(seed), programs.generate(seed)
        assert first.source() == second.source()
        assert [p.tobytes() for p in first.points] == [p.tobytes() for p in second.points]


def test_the_listing_is_what_was_drawn():
    """The source printed for a failure makes the same function and points."""
    for seed in range(40):
        program = programs.generate(seed)
        namespace = {}
        exec(program.source(), namespace)
        for k, point in enumerate(program.points):
            listed = namespace["x%d" % k]
            assert listed.dtype == point.dtype and np.array_equal(listed, point)
            with programs.quiet():
                assert np.array_equal(namespace["f"](listed.copy()),
                                      program.function()(point.copy()), equal_nan=True)


def test_left_out_constructs_are_not_drawn():
    assert programs.KNOWN_OPEN <= set(programs.FEATURES)
    everything = set()
    for seed in range(150):
        tags = programs.generate(seed, exclude=programs.FEATURES).tags
        assert not tags & set(programs.FEATURES), (seed, tags)
        everything |= programs.generate(seed, exclude=()).tags
    # (the generator still draws them when asked)
    assert {"temporary_view_write", "view_variable_write", "stale_view_read",
            "negative_index_reuse", "where_broadcast_branch"} <= everything


def test_a_mismatch_is_reported_with_its_seed_and_shrunk_program(monkeypatch):
    """A wrong derivative of np.sin is caught, and the failure names the seed
    and lists a shrunk program that still calls it."""
    from sparsegrad import _ufunc_rules
    general = next(s for s in range(200) if programs.generate(s).family == "general"
                   and "np.sin(" in programs.generate(s).function_source())
    rules = dict(_ufunc_rules.DERIVATIVES)
    monkeypatch.setitem(_ufunc_rules.DERIVATIVES, np.sin,
                        (lambda x, out: -np.cos(x),) if callable(rules[np.sin][0])
                        else rules[np.sin])
    summary = runner.run(count=1, start=general, out=None)
    if not summary.failures:
        pytest.skip("np.sin's rule is not read from the table at call time")
    report = summary.failure_report()
    assert "seed %d" % general in report and "np.sin(" in report


def test_recorded_programs_draw_nd_values():
    """A good share of the recorded family reshapes, reads by basic keys, pads
    and broadcasts n-d values, some of an n-d argument or to an n-d result."""
    drawn = [programs.generate(seed, family="recorded") for seed in range(120)]
    nd = [p for p in drawn if p.points[0].ndim > 1 or p.tags & programs.ND_TAGS]
    assert len(nd) >= len(drawn) // 3
    assert {"reshape", "basic_read", "pad", "nd_broadcast", "nd_where"} <= set().union(
        *(p.tags for p in nd))
    assert any(p.points[0].ndim == 2 for p in drawn)
    results = []
    for p in nd:
        with programs.quiet():
            results.append(np.ndim(p.function()(p.points[0].copy())))
    assert max(results) > 1
