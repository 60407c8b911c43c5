"""Whole-number settings read from the environment, with one error message.

>>> import os
>>> os.environ["SPARSEGRAD_EXAMPLE"] = "3"
>>> environment_int("SPARSEGRAD_EXAMPLE", default=1, minimum=1, unit="threads")
3
>>> del os.environ["SPARSEGRAD_EXAMPLE"]
"""
import os

__all__ = ["environment_int"]


def environment_int(name, default, minimum, unit, maximum=None):
    """The integer in environment variable ``name`` (``default`` when unset or empty).

    Raises ``ValueError`` naming the variable when the text is not a whole
    number of ``unit`` (ASCII digits, optional sign and underscores) or lies
    outside ``[minimum, maximum]``.
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        if not text.isascii():
            raise ValueError(text)
        number = int(text)
    except ValueError:
        raise ValueError("%s must be a number of %s, not %r" % (name, unit, text)) from None
    if number < minimum:
        raise ValueError("%s must be >= %d, not %d" % (name, minimum, number))
    if maximum is not None and number > maximum:
        raise ValueError("%s must be <= %d, not %d" % (name, maximum, number))
    return number
