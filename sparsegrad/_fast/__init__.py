"""The kernel interface: compiled Cython kernels, or their pure-numpy twins.

``kernels`` is the module every other part of sparsegrad calls; ``KERNELS`` says
which implementation it is (``"compiled"`` or ``"reference"``).  The reference
implementation is used when the extension is not built (a warning is issued
once) or when the environment variable ``SPARSEGRAD_PURE_PYTHON=1`` asks for it.

>>> from sparsegrad._fast import KERNELS
>>> KERNELS in ("compiled", "reference")
True
"""
import importlib.machinery
import os
import warnings

from . import _reference as reference

__all__ = ["kernels", "reference", "compiled", "KERNELS", "pool", "run_program",
           "unavailable_message"]

_SLOWER = "the pure-numpy reference kernels run instead, which are slower"


def _installed_elsewhere(package):
    """Where an installed sparsegrad other than the one in ``package`` lives, if any."""
    import importlib.metadata  # only on this path: it costs milliseconds to import
    for distribution in importlib.metadata.distributions(name="sparsegrad"):
        location = os.path.abspath(str(distribution.locate_file("sparsegrad")))
        if os.path.isdir(location) and not os.path.samefile(location, package):
            return location
    return None


def unavailable_message(here, error):
    """The warning given when the compiled kernels in directory ``here`` (this
    package's) fail to import with ``error``: which copy of sparsegrad was imported,
    why it has no kernels, and what to run."""
    package = os.path.dirname(here)
    built = any(os.path.exists(os.path.join(here, "_kernels" + suffix))
                for suffix in importlib.machinery.EXTENSION_SUFFIXES)
    if built:
        return ("sparsegrad: the compiled kernels in %s fail to load (%s), so %s; they "
                "were built for another Python or numpy: build them again with "
                "'python -m pip install .' (or 'python -m pip install -e .' in a source "
                "checkout)" % (here, error, _SLOWER))
    if not os.path.exists(os.path.join(here, "_kernels.pyx")):
        return ("sparsegrad: the compiled kernels are not installed in %s, so %s; "
                "install sparsegrad again with 'python -m pip install .' from its source "
                "checkout" % (here, _SLOWER))
    installed = _installed_elsewhere(package)
    if installed is not None:
        return ("sparsegrad: imported from the source tree %s, whose compiled kernels "
                "are not built, so %s. It shadows the sparsegrad installed in %s because "
                "Python looks in the current directory first: run from another "
                "directory, or install with 'python -m pip install -e .', which builds "
                "the kernels into the source tree" % (package, _SLOWER, installed))
    return ("sparsegrad: imported from the source tree %s, whose compiled kernels are "
            "not built, so %s; build them with 'python -m pip install -e .' (or "
            "'python setup.py build_ext --inplace')" % (package, _SLOWER))


compiled = None
if os.environ.get("SPARSEGRAD_PURE_PYTHON", "") not in ("", "0"):
    kernels = reference
    KERNELS = "reference"
else:
    try:
        from . import _kernels as compiled
    except ImportError as exc:  # not built: stay correct, say it is slow and why
        warnings.warn(unavailable_message(os.path.dirname(os.path.abspath(__file__)), exc),
                      RuntimeWarning, stacklevel=2)
        kernels = reference
        KERNELS = "reference"
    else:
        kernels = compiled
        KERNELS = "compiled"

# the memory pool (sparsegrad._memory) comes with the compiled kernels; the
# reference path keeps numpy's own allocator
pool = None
if compiled is not None:
    try:
        from . import _pool as pool
    except ImportError:  # an extension built before the pool existed: no pool
        pass

# the program runner of sparsegrad._trace, compiled with the kernels (its own
# extension module: it uses the kernels' worker threads)
run_program = reference.run_program
if compiled is not None:
    try:
        from ._program import run_program
    except ImportError:  # an extension built before programs existed: the reference
        pass
