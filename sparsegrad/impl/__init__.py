"""Old 0.0.15 import paths: ``from sparsegrad.impl import scipy`` gives the scipy package.

>>> from sparsegrad.impl import scipy
>>> hasattr(scipy, "sparse")
True
"""
from . import scipy

__all__ = ["scipy"]
