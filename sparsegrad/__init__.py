"""sparsegrad: exact sparse Jacobians of numpy code by forward-mode automatic differentiation.

>>> import numpy as np
>>> from sparsegrad import forward
>>> def F(x): return np.exp(-x**2) - x[::-1]
>>> F(forward.seed(np.linspace(0, 1, 5))).dvalue.shape
(5, 5)
"""
# (first: the modules that must run from their source, not compiled, are found so)
from . import _compiled
_compiled.install()

from . import forward  # noqa: E402
from . import _composite  # noqa: E402,F401  (its functions join the table)
from . import _statistics  # noqa: E402,F401  (registers its numpy functions)
from ._errors import UnsupportedOperationError, DensificationError, SeedMismatchError
from ._fast import KERNELS
from ._api import jacobian, value_and_jacobian, jvp, sparsity, gradient, value_and_gradient
from ._hessian import hessian, value_grad_and_hessian, hvp, hessian_sparsity
from ._memory import (keep_freed_memory, memory_pool_info, memory_pool_limit,
                      release_memory_pool)
from ._structure import structure_cache_info, structure_cache_limit, clear_structure_cache
from ._threads import set_num_threads, get_num_threads
# the 0.0.15 API: ``from sparsegrad import *`` gives forward and these functions;
# ``sparsevec`` is the submodule, callable as the 0.0.15 ``sparsevec(n, idx, v)``
from .functions import where, dot, sum, hstack, stack, branch, apply, asdifferentiable
from . import sparsevec
from . import optimize
from . import sparse, linalg
from .sparsevec import sparsesum, sparsesum_bare
from .testing import run_examples as test
from ._spy import spy

version = __version__ = "0.1.0.dev0"

# (gradient, value_and_gradient and spy stay out of the star import: numpy's
# np.gradient and matplotlib's spy, star-imported beside it, would be shadowed)

__all__ = ["forward", "UnsupportedOperationError", "DensificationError",
           "SeedMismatchError", "KERNELS", "version",
           "jacobian", "value_and_jacobian", "jvp", "sparsity", "keep_freed_memory",
           "memory_pool_info", "memory_pool_limit", "release_memory_pool",
           "structure_cache_info", "structure_cache_limit", "clear_structure_cache",
           "set_num_threads", "get_num_threads",
           "where", "dot", "sum", "hstack", "stack", "branch", "apply", "asdifferentiable",
           "sparsevec", "sparsesum", "sparsesum_bare", "optimize", "sparse", "linalg"]
