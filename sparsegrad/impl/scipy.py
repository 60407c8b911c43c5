"""``from sparsegrad.impl import scipy`` gives the real ``scipy`` package.

Published 0.0.15 solvers import scipy this way.  Importing this module
imports ``scipy.sparse`` (and ``scipy.sparse.linalg``) and puts the ``scipy``
package itself in its place, so ``sparsegrad.impl.scipy is scipy``.

>>> from sparsegrad.impl import scipy
>>> scipy.sparse.identity(2, format="csr").nnz
2
"""
import sys

import scipy
import scipy.sparse
import scipy.sparse.linalg

sys.modules[__name__] = scipy
