"""The kernel interface: compiled Cython kernels, or their pure-numpy twins.

``kernels`` is the module every other part of sparsegrad calls; ``KERNELS`` says
which implementation it is (``"compiled"`` or ``"reference"``).  The reference
implementation is used when the extension is not built (a warning is issued
once) or when the environment variable ``SPARSEGRAD_PURE_PYTHON=1`` asks for it.

>>> from sparsegrad._fast import KERNELS
>>> KERNELS in ("compiled", "reference")
True
"""
import os
import warnings

from . import _reference as reference

__all__ = ["kernels", "reference", "compiled", "KERNELS", "pool", "run_program"]

compiled = None
if os.environ.get("SPARSEGRAD_PURE_PYTHON", "") not in ("", "0"):
    kernels = reference
    KERNELS = "reference"
else:
    try:
        from . import _kernels as compiled
    except ImportError as exc:  # extension not built: stay correct, say it is slow
        warnings.warn(
            "sparsegrad: the compiled kernels are not available (%s); using the "
            "pure-numpy reference kernels, which are slower. Reinstall with "
            "'pip install .' to build them." % exc,
            RuntimeWarning,
            stacklevel=2,
        )
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
