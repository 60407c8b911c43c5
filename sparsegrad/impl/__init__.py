"""Old 0.0.15 import path: ``from sparsegrad.impl import scipy`` gives the scipy package.

The name is simply the real ``scipy`` module, with ``scipy.sparse`` and
``scipy.sparse.linalg`` imported, as published solvers expect.

>>> from sparsegrad.impl import scipy
>>> hasattr(scipy, "sparse")
True
"""
import scipy
import scipy.sparse
import scipy.sparse.linalg

__all__ = ["scipy"]
