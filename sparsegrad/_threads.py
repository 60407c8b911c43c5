"""How many threads the compiled merge kernel may use.

The final merge of a large Jacobian (and any merge of at least half a million
entries) is split into row ranges merged at the same time, one per thread;
the result is the same, bit for bit, whatever the number of threads.  The
default is the ``SPARSEGRAD_NUM_THREADS`` environment variable, else the
number of CPUs this process may run on, at most 4.  The reference kernels
(pure numpy) always use one thread, and so do merges of device arrays (the GPU
backend's kernels are the reference kernels on the device).

>>> import sparsegrad
>>> previous = sparsegrad.get_num_threads()
>>> sparsegrad.set_num_threads(1)
>>> sparsegrad.get_num_threads()
1
>>> sparsegrad.set_num_threads(previous)
"""
import operator
import os

from ._fast import compiled
from ._settings import environment_int

__all__ = ["set_num_threads", "get_num_threads"]

#: the most the merge kernel accepts (a C int)
_MAX_THREADS = 2 ** 31 - 1


def set_num_threads(n):
    """Let the merge kernel use up to ``n`` threads (1: only the calling thread).

    Parameters
    ----------
    n : int
        At least 1.  With the reference kernels this is accepted and has no
        effect.

    Examples
    --------
    >>> previous = get_num_threads()
    >>> set_num_threads(2)
    >>> get_num_threads() in (1, 2)        # 1 with the reference kernels
    True
    >>> set_num_threads(previous)
    """
    n = operator.index(n)
    if n < 1:
        raise ValueError("set_num_threads: n must be >= 1, got %d" % n)
    if n > _MAX_THREADS:
        raise ValueError("set_num_threads: n must be <= %d, got %d" % (_MAX_THREADS, n))
    if compiled is not None:
        compiled.set_threads(n)


def get_num_threads():
    """The number of threads the merge kernel may use (1 for the reference kernels).

    Examples
    --------
    >>> get_num_threads() >= 1
    True
    """
    return 1 if compiled is None else compiled.get_threads()


def _default_threads():
    """``SPARSEGRAD_NUM_THREADS``, else the CPUs this process may run on, at most 4."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on every platform)
        cpus = os.cpu_count() or 1
    return environment_int("SPARSEGRAD_NUM_THREADS", max(1, min(4, cpus)), 1, "threads",
                           _MAX_THREADS)


# (read even without the compiled kernels, so that a bad setting is refused
# whichever kernels are in use)
_DEFAULT_THREADS = _default_threads()
if compiled is not None:
    compiled.set_threads(_DEFAULT_THREADS)
