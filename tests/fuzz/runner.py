"""Consecutive seeds through the oracles, failures shrunk to small programs."""
import collections
import re
import time

import sparsegrad

from . import oracles
from .programs import KNOWN_OPEN, generate

#: failures shrunk per class (oracle and message shape); later ones are only listed
SHRINKS_PER_CLASS = 2


class Failure:
    """A program that failed, its mismatches and the smallest program found
    that still fails the same oracle."""

    def __init__(self, program, outcome, alone):
        self.program = program
        self.mismatches = outcome.mismatches
        self.alone = alone
        self.minimal = None
        self.minimal_mismatches = None

    @property
    def key(self):
        return (self.program.family,) + _kind(self.mismatches[0])

    def report(self):
        program = self.minimal or self.program
        mismatches = self.minimal_mismatches or self.mismatches
        lines = ["seed %d (%s, %s, features: %s)" % (
            self.program.seed, self.program.family, self.program.dtype,
            ", ".join(sorted(program.tags)) or "none")]
        if not self.alone:
            lines.append("  (fails only after the programs before it: cached structure)")
        lines += ["  %r" % m for m in mismatches[:4]]
        if len(mismatches) > 4:
            lines.append("  ... %d more" % (len(mismatches) - 4))
        lines.append("  %s program:" % ("shrunk" if self.minimal else "the"))
        lines += ["    " + line for line in program.source().splitlines()
                  if not line.startswith("import ")]
        return "\n".join(lines)


class Summary:
    """Counts of the programs run and the checks made, and the failures."""

    def __init__(self):
        self.programs = collections.Counter()
        self.features = collections.Counter()
        self.checks = collections.Counter()
        self.failures = []
        self.classes = collections.Counter()
        self.seconds = 0.0
        self.seeds = None
        self.step = 1
        self.interrupted = False

    def add(self, program, outcome):
        self.programs[program.family] += 1
        if program.family == "general":
            self.programs["general %s" % program.dtype] += 1
        elif program.family == "recorded" and program.points[0].ndim > 1:
            self.programs["recorded of an n-d argument"] += 1
        self.features.update(program.tags)
        self.checks.update(outcome.counts)

    def text(self):
        total = sum(n for k, n in self.programs.items() if k in ("general", "recorded",
                                                                  "unsupported"))
        lines = ["%d programs in %.1f s (%.1f per second), seeds %d-%d%s, kernels: %s%s" % (
            total, self.seconds, total / max(self.seconds, 1e-9), self.seeds[0],
            self.seeds[1], " every %d" % self.step if self.step > 1 else "",
            sparsegrad.KERNELS, " (interrupted)" if self.interrupted else "")]
        lines.append("programs: " + ", ".join("%s %d" % kv for kv in sorted(
            self.programs.items())))
        lines.append("features: " + ", ".join("%s %d" % kv for kv in sorted(
            self.features.items())))
        lines.append("checks: " + ", ".join("%s %d" % kv for kv in sorted(
            self.checks.items())))
        lines.append("failures: %d" % len(self.failures))
        for key, n in self.classes.most_common():
            # (the seeds too: ``--show SEED`` prints a failure of a quiet run)
            seeds = [f.program.seed for f in self.failures if f.key == key]
            lines.append("  %4d  %s / %s / %s  (seeds %s)" % ((n,) + key + (
                " ".join(map(str, seeds[:8])) + (" ..." if len(seeds) > 8 else ""),)))
        return "\n".join(lines)

    def failure_report(self):
        return "\n\n".join(f.report() for f in self.failures)


def _kind(mismatch):
    """The oracle and the shape of the message (numbers left out)."""
    shape = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", mismatch.message)
    return mismatch.oracle, re.sub(r"np\.float#\(#\)", "#", shape)[:60]


def _fails(program, kind):
    """The mismatches of ``program`` from an empty structure cache when one of
    them is of ``kind``, else None."""
    try:
        program.function()
    except Exception:
        return None
    sparsegrad.clear_structure_cache()
    mismatches = oracles.check(program).mismatches
    if any(_kind(m)[0] == kind[0] and _kind(m)[1][:30] == kind[1][:30] for m in mismatches):
        return mismatches
    return None


def _defined(line):
    match = re.match(r"(\w+) = ", line)
    return match.group(1) if match else None


def shrink(program, kind, budget=60.0):
    """The smallest program found, by deleting statements, returning earlier
    variables and dropping calls, that still fails the same way (``kind``:
    the oracle and the shape of the message), and its mismatches (None when
    nothing smaller fails)."""
    deadline = time.monotonic() + budget
    best, mismatches = program, None

    def candidates():
        for k, (line, _) in enumerate(best.body):
            name = _defined(line)
            if name and name != best.result:
                yield best.replace(body=best.body[:k + 1], result=name)
        for k in reversed(range(len(best.body))):
            if "refused" not in best.body[k][1]:
                yield best.replace(body=best.body[:k] + best.body[k + 1:])
        if best.family == "recorded" and len(best.points) > 1:
            for k in reversed(range(len(best.points))):
                yield best.replace(points=best.points[:k] + best.points[k + 1:])

    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for candidate in candidates():
            if time.monotonic() > deadline:
                break
            found = _fails(candidate, kind)
            if found is not None:
                best, mismatches, progress = candidate, found, True
                break
    return best, mismatches


def run(seconds=None, count=None, start=0, exclude=KNOWN_OPEN, family=None, shrinking=True,
        out=print, seed_log=None, step=1):
    """Check consecutive seeds from ``start`` for ``seconds`` or ``count`` programs.

    Parameters
    ----------
    seconds, count : float and int, optional
        When to stop (whichever comes first; at least one).
    start : int
        The first seed.
    exclude : collection of str
        Features left out (default :data:`KNOWN_OPEN`).
    family : str, optional
        Only programs of this family.
    shrinking : bool
        Shrink the first failures of each class.
    out : callable or None
        Receives each failure's report as it is found.
    seed_log : str, optional
        A file holding the seed being checked, written before each check: the
        seed that crashed the process (a fault in compiled code) is there.
    step : int
        Check every ``step``-th seed from ``start`` (``step`` runs side by side,
        started at ``start``, ``start + 1``, ..., share consecutive seeds).

    Returns
    -------
    Summary
    """
    if seconds is None and count is None:
        raise ValueError("give seconds or count")
    if step < 1:
        raise ValueError("step must be at least 1")
    summary = Summary()
    began = time.monotonic()
    seed = start
    shrunk = collections.Counter()
    try:
        while (count is None or (seed - start) // step < count) and (
                seconds is None or time.monotonic() - began < seconds):
            if seed_log is not None:
                with open(seed_log, "w") as log:
                    log.write("%d\n" % seed)
            program = generate(seed, exclude, family)
            outcome = oracles.check(program)
            summary.add(program, outcome)
            if not outcome.ok:
                kind = _kind(outcome.mismatches[0])
                alone = kind[0] == "harness" or _fails(program, kind) is not None
                failure = Failure(program, outcome, alone)
                summary.classes[failure.key] += 1
                if shrinking and alone and kind[0] != "harness" \
                        and shrunk[failure.key] < SHRINKS_PER_CLASS:
                    shrunk[failure.key] += 1
                    minimal, mismatches = shrink(program, kind)
                    if mismatches is not None:
                        failure.minimal, failure.minimal_mismatches = minimal, mismatches
                summary.failures.append(failure)
                if out is not None:
                    out(failure.report() + "\n")
            seed += step
    except KeyboardInterrupt:
        # (an interrupted run still says what it found)
        summary.interrupted = True
    summary.seconds = time.monotonic() - began
    summary.seeds = (start, seed - step)
    summary.step = step
    return summary
