"""Exceptions raised by sparsegrad.

Every error names the user's numpy operation and why it cannot be
differentiated, so that a failure is never a silent wrong Jacobian.

>>> from sparsegrad._errors import UnsupportedOperationError
>>> issubclass(UnsupportedOperationError, TypeError)
True
"""

__all__ = ["UnsupportedOperationError", "DensificationError", "SeedMismatchError"]


class UnsupportedOperationError(TypeError):
    """A numpy function, ufunc or argument that sparsegrad cannot differentiate."""


class UnsupportedAttributeError(UnsupportedOperationError, AttributeError):
    """An ndarray attribute or method that forward values do not have (also an
    ``AttributeError``, so that ``hasattr`` answers False)."""


class DensificationError(ValueError):
    """An operation whose Jacobian would be dense beyond the allowed size."""


class SeedMismatchError(ValueError):
    """Forward values derived from different seeds were combined."""


def unsupported(name, reason):
    """Build an :class:`UnsupportedOperationError` for the operation ``name``."""
    return UnsupportedOperationError(
        "%s is not supported by sparsegrad on forward values: %s" % (name, reason))
