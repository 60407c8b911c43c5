"""The 0.0.9/0.0.10 module layout, kept for published code that imports it.

Binds ``exp log sqrt where dot sum stack branch`` (the same objects as in
:mod:`sparsegrad.functions`) and the two namespaces of that era's API for
user-defined elementwise functions: ``func.custom_func(f, deriv)`` makes one
(the protocol of :func:`sparsegrad.functions.asdifferentiable`) and
``expr.wrapped_func(fn)`` turns it into a callable that accepts forward and
numeric arguments.

>>> import numpy as np
>>> from sparsegrad import forward
>>> square = expr.wrapped_func(func.custom_func(
...     lambda x: x * x, lambda args, value: [lambda: 2 * args[0]]))
>>> square(forward.seed(np.array([3.0]))).dvalue.toarray()
array([[6.]])
>>> square(3.0)
9.0
"""
from .functions import (exp, log, sqrt, where, dot, sum, stack, branch, apply,
                        asdifferentiable, differentiable)

__all__ = ["exp", "log", "sqrt", "where", "dot", "sum", "stack", "branch", "expr", "func"]


class func:
    """Namespace holding :meth:`custom_func` (0.0.9 API)."""

    @staticmethod
    def custom_func(f, deriv):
        """A user-defined elementwise function: ``asdifferentiable(f, deriv)``.

        ``f(*args)`` gives the value; ``deriv(args, value)`` returns one
        zero-argument callable per argument, each giving that argument's
        elementwise partial derivative.

        Examples
        --------
        >>> fn = func.custom_func(lambda x: 2 * x, lambda args, value: [lambda: 2.0])
        >>> expr.wrapped_func(fn)(1.5)
        3.0
        """
        return asdifferentiable(f, deriv)


class expr:
    """Namespace holding :meth:`wrapped_func` (0.0.9 API)."""

    @staticmethod
    def wrapped_func(fn):
        """A callable applying ``fn`` (from :meth:`func.custom_func`) to its arguments.

        Forward arguments give a forward result, numeric ones the plain value.

        Examples
        --------
        >>> import numpy as np
        >>> half = expr.wrapped_func(func.custom_func(lambda x: x / 2,
        ...                                           lambda args, value: [lambda: 0.5]))
        >>> half(np.array([2.0, 4.0]))
        array([1., 2.])
        """
        if not isinstance(fn, differentiable):
            raise TypeError("expr.wrapped_func needs a function made by func.custom_func, "
                            "not %s" % type(fn).__name__)

        def wrapped(*args):
            return apply(fn, args)
        wrapped.__doc__ = "%r applied to forward or numeric arguments." % (fn,)
        return wrapped
