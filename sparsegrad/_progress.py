"""Progress lines of long solves, at most one every ``interval`` seconds.

>>> import itertools
>>> ticks = itertools.count(0.0, 1.2)
>>> report = Progress("solve", 1.0, 0.0, clock=lambda: next(ticks))
>>> report.iteration, report.state = 3, "max|F| = 1e-02"
>>> report.update("factorising")
>>> report.update("factorising")
solve: 1.2 s, iteration 3, max|F| = 1e-02: factorising
"""
import numpy as np

__all__ = ["Progress", "interval"]


def interval(progress, verbose, name):
    """Seconds between progress lines, or None for none, from a solver's
    ``progress`` argument (True: every second; None: every second when
    ``verbose``); ValueError naming the solver ``name`` for anything else."""
    if progress is None:
        return 1.0 if verbose else None
    if isinstance(progress, (bool, np.bool_)):
        return 1.0 if progress else None
    if (isinstance(progress, (int, float, np.integer, np.floating))
            and 0 <= progress < np.inf):
        return float(progress)
    raise ValueError("%s: progress must be True, False, None or a number of seconds "
                     ">= 0, not %r" % (name, progress))


class Progress:
    """A line saying where a long solve is, printed at most every ``interval`` seconds.

    The solver keeps ``iteration`` (the one under way) and ``state`` (its
    measures at that iteration's start, as text) up to date, and calls
    ``update(doing)`` where it may wait long.  A line is printed when
    ``interval`` seconds have passed since ``start``, the last progress line
    or the last line of the solver's verbose table (``quiet``); ``interval``
    None prints none.  ``clock`` gives the time in seconds.
    """

    def __init__(self, name, interval, start, clock):
        self.name = name
        self.interval = interval
        self.clock = clock
        self.start = self.last = start
        self.iteration = 0
        self.state = ""

    def quiet(self):
        self.last = self.clock()

    def update(self, doing):
        if self.interval is None:
            return
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            print("%s: %.1f s, iteration %d, %s: %s" % (self.name, now - self.start,
                                                        self.iteration, self.state, doing),
                  flush=True)
