"""Memory for repeated Jacobian evaluations: sparsegrad's pool, and a glibc setting.

A Jacobian evaluation allocates and frees arrays of many megabytes.  With
glibc's default settings, memory freed at the top of the heap is handed back to
the operating system soon after, and the next evaluation takes it back page by
page: every page is faulted in and zeroed again.  On virtual machines a page
fault costs microseconds, and for a Jacobian with a million nonzeros that can
be a third of the evaluation time (measured in ``docs/performance.md``).

:func:`keep_freed_memory` asks glibc to keep up to ``nbytes`` of freed memory
at the top of the heap (``mallopt(M_TOP_PAD)``, the setting behind the
``MALLOC_TOP_PAD_`` environment variable).  It changes the whole process, so
sparsegrad never calls it by itself: call it once in a simulation that
evaluates Jacobians repeatedly, or set ``MALLOC_TOP_PAD_`` before starting
Python.  Arrays larger than glibc's mmap threshold (at most 32 MiB) are mapped
separately and are not affected.

Since the compiled kernels have it, sparsegrad also keeps the memory of its
*own* arrays in a pool (:mod:`sparsegrad._fast._pool`, a numpy memory handler
in the manner of CuPy's memory pool): every operation on forward values
allocates through the pool, freed arrays go back to it, and the next
evaluation reuses them without page faults.  Arrays of the user's own code
keep numpy's allocator.  The pool keeps at most :func:`memory_pool_limit`
bytes of freed memory: by default 256 MiB or three times the bytes of the
largest Jacobian made so far, whichever is more (an evaluation frees and
takes again up to about 2.4 times its Jacobian's bytes, measured on
Bratu 3000x3000; a fixed bound made the problems that outgrow it fault their
pages in at every evaluation, 5 times slower there).  A limit set by
:func:`memory_pool_limit` or ``SPARSEGRAD_MEMORY_POOL_BYTES`` in the
environment is fixed (a cap; ``0`` turns the pool off);
:func:`release_memory_pool` gives the memory held back to the C library.

>>> import sparsegrad
>>> sparsegrad.keep_freed_memory(64 * 2 ** 20) in (True, False)
True
>>> sparsegrad.memory_pool_info().limit >= 0
True
"""
import collections
import ctypes
import ctypes.util
import functools
import numbers
import operator
import os
import sys

from ._fast import pool as _pool
from ._settings import environment_int

__all__ = ["keep_freed_memory", "pooled", "memory_pool_info", "memory_pool_limit",
           "release_memory_pool", "PoolInfo", "follow_jacobian"]

_DEFAULT_POOL_BYTES = 256 * 2 ** 20
#: the largest limit the pool can hold (a C size_t)
_MAX_POOL_BYTES = 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1

PoolInfo = collections.namedtuple("PoolInfo", "enabled held_bytes limit reused fresh")
PoolInfo.__doc__ = """State of sparsegrad's memory pool.

enabled : the pool exists (compiled kernels) and its limit is above zero
held_bytes : freed memory the pool holds now
limit : the most freed memory it holds
reused, fresh : pooled allocations served from freed memory, and by the C library
"""


def _initial_limit():
    return environment_int("SPARSEGRAD_MEMORY_POOL_BYTES", _DEFAULT_POOL_BYTES, 0, "bytes",
                           _MAX_POOL_BYTES)


def _whole_bytes(nbytes, where):
    """``nbytes`` as an int: an integer, or a float of integral value (``64e6``)."""
    try:
        return operator.index(nbytes)
    except TypeError:
        pass
    if isinstance(nbytes, numbers.Real) and float(nbytes).is_integer():
        return int(nbytes)
    if isinstance(nbytes, numbers.Real):
        raise ValueError("%s: nbytes must be a whole number of bytes, got %r"
                         % (where, nbytes))
    raise TypeError("%s: nbytes must be a whole number of bytes, not %s"
                    % (where, type(nbytes).__name__))


# (read even without the pool, so that a bad setting is refused whichever
# kernels are in use)
_INITIAL_LIMIT = _initial_limit()
if _pool is not None:
    _pool.set_limit(_INITIAL_LIMIT)

#: bytes of freed memory the pool keeps per byte of the largest Jacobian made
_POOL_PER_JACOBIAN = 3
#: whether the limit follows the Jacobians made (not set explicitly), and the
#: bytes of the largest Jacobian made
_following = {"on": "SPARSEGRAD_MEMORY_POOL_BYTES" not in os.environ, "largest": 0}


def follow_jacobian(nbytes):
    """Note a Jacobian of ``nbytes`` just made: while the pool's limit follows
    the problem, it is at least :data:`_POOL_PER_JACOBIAN` times the largest."""
    if _pool is None or not _following["on"] or nbytes <= _following["largest"]:
        return
    _following["largest"] = nbytes
    _pool.set_limit(min(max(_DEFAULT_POOL_BYTES, _POOL_PER_JACOBIAN * nbytes),
                        _MAX_POOL_BYTES))


def pooled(operation):
    """Decorate an entry point of sparsegrad: numpy allocates through the pool inside it.

    The pool is numpy's allocator only while ``operation`` runs (a context
    variable, so other threads and the caller's code are unaffected).
    """
    if _pool is None:
        return operation
    install, restore = _pool.install, _pool.restore

    @functools.wraps(operation)
    def with_pool(*args, **kwargs):
        previous = install()
        try:
            return operation(*args, **kwargs)
        finally:
            restore(previous)
    return with_pool


def memory_pool_info():
    """The state of sparsegrad's memory pool, as a :data:`PoolInfo`.

    Examples
    --------
    >>> info = memory_pool_info()
    >>> info.held_bytes <= info.limit
    True
    """
    if _pool is None:
        return PoolInfo(False, 0, 0, 0, 0)
    held, limit, reused, fresh = _pool.info()
    return PoolInfo(limit > 0, held, limit, reused, fresh)


def memory_pool_limit(nbytes=None):
    """The most freed memory the pool keeps (bytes); with ``nbytes``, set it first.

    By default the limit follows the problem: 256 MiB or three times the bytes
    of the largest Jacobian made, whichever is more.  ``nbytes`` fixes it (a
    cap: a lower limit than the memory held releases the pool; ``0`` turns
    pooling off, freed arrays going straight back to the C library);
    ``"auto"`` makes it follow the problem again, from 256 MiB.  Without the
    compiled kernels there is no pool and the limit stays 0.

    Examples
    --------
    >>> previous = memory_pool_limit()
    >>> memory_pool_limit(64 * 2 ** 20) in (0, 64 * 2 ** 20)
    True
    >>> memory_pool_limit(previous) == previous or memory_pool_info().enabled is False
    True
    """
    if isinstance(nbytes, str) and nbytes == "auto":
        _following.update(on=True, largest=0)
        nbytes = _DEFAULT_POOL_BYTES
    elif nbytes is not None:
        _following["on"] = False
    if nbytes is not None:
        nbytes = _whole_bytes(nbytes, "memory_pool_limit")
        if not 0 <= nbytes <= _MAX_POOL_BYTES:
            raise ValueError("memory_pool_limit: nbytes must lie in [0, %d], got %d"
                             % (_MAX_POOL_BYTES, nbytes))
        if _pool is not None:
            _pool.set_limit(nbytes)
    return memory_pool_info().limit


def release_memory_pool():
    """Give every freed block the pool holds back to the C library.

    Examples
    --------
    >>> release_memory_pool()
    >>> memory_pool_info().held_bytes
    0
    """
    if _pool is not None:
        _pool.release_all()

#: glibc's parameter number of M_TOP_PAD in mallopt(3)
_M_TOP_PAD = -2


def keep_freed_memory(nbytes=256 * 2 ** 20):
    """Let the C allocator keep up to ``nbytes`` of freed memory for reuse.

    Parameters
    ----------
    nbytes : int
        Bytes of free memory glibc may keep at the top of the heap (default
        256 MiB).  ``0`` restores a minimal padding.

    Returns
    -------
    bool
        True when the setting was applied; False where the C library is not
        glibc (macOS, Windows, musl), on which nothing is changed.

    Examples
    --------
    >>> keep_freed_memory(0) in (True, False)
    True
    """
    nbytes = _whole_bytes(nbytes, "keep_freed_memory")
    if nbytes < 0 or nbytes >= 2 ** 31:
        raise ValueError("keep_freed_memory: nbytes must lie in [0, 2**31), got %d" % nbytes)
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: musl has mallopt as a no-op stub
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(_M_TOP_PAD, nbytes) == 1
