"""An opt-in allocator setting for processes that build many large Jacobians.

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

>>> import sparsegrad
>>> sparsegrad.keep_freed_memory(64 * 2 ** 20) in (True, False)
True
"""
import ctypes
import ctypes.util
import sys

__all__ = ["keep_freed_memory"]

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
    nbytes = int(nbytes)
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
