"""A strict fake GPU for tests on the CPU: arrays that refuse to mix with host arrays.

CuPy refuses implicit mixing of device arrays with numpy arrays: a ufunc, a
function or an index that gets both raises ``TypeError``.  Code written
against an array namespace (``xp``) can leak numpy there, by an ``np.`` call
or a host array built and combined with device arrays, and such a leak goes
unnoticed on the CPU, where everything is numpy.  This module lets the GPU
code path run on the CPU with the same refusal:

* :class:`DeviceArray` is a numpy array subclass, "on the device".  A ufunc
  (operators included), a numpy function or an index (``a[i]``, ``a[i] = v``)
  that combines a DeviceArray with a host ndarray raises
  ``TypeError("host array mixed with device array ...")``; 0-d host arrays
  too (CuPy 14 takes Python and numpy scalars, ``np.float64(2.0)``, but not
  ``np.asarray(2.0)``).  Results are DeviceArrays.
* numpy functions called with keywords that CuPy's function of that name does
  not take (:data:`CUPY_LACKS`: ``np.sum(..., initial=)``, ``np.clip(...,
  min=)``, ``np.take(..., mode=)``, the ``device=`` that ``np.zeros(n,
  like=d)`` passes on) raise CuPy's ``TypeError``, and functions CuPy lacks
  (``np.linalg.vector_norm``) raise as numpy does when no implementation
  exists.
* :data:`fake` is a module-like namespace, the ``cupy`` of the fake device:
  the numpy functions sparsegrad's kernels use and every numpy ufunc, which
  refuse host arrays and return DeviceArrays; creation functions; ``asarray``
  and ``asnumpy``, the explicit transfers; and numpy's dtypes, which CuPy uses
  too.  Any other name raises ``AttributeError``: the list of functions says
  what the kernels need of an array module.
* ``DeviceArray.__array_namespace__`` returns :data:`fake`, so that
  ``sparsegrad._fast._reference._namespace`` picks it from the arrays.
* ``fake.counting()`` counts what a block of code asks of the device: copies
  from the host (``asarray`` of host data) and to the host (``asnumpy``, and the
  read-backs ``int(d)``, ``bool(d)``, ``d.item()``... that synchronise a real
  device), with their bytes, and operations (a ufunc, a function, a gather or a
  write by an index: each at least one kernel launch on a GPU).

What the fake cannot catch: numpy functions that unwrap subclasses without
dispatching (``np.asarray(d)`` gives a host array silently, where CuPy
raises), ndarray methods called with host arguments (``d.searchsorted(h)``),
and indexing a host array with a DeviceArray.  It is stricter than CuPy in
one place: CuPy accepts numpy index arrays; the fake does not.

Examples
--------
>>> import numpy as np
>>> d = fake.arange(3)
>>> d + 1
DeviceArray([1, 2, 3])
>>> d + np.ones(3)
Traceback (most recent call last):
    ...
TypeError: host array mixed with device array in numpy.add (move it with fake.asarray)
>>> fake.asnumpy(d * fake.asarray(np.array([2, 2, 2])))
array([0, 2, 4])
"""
import collections
import contextlib

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

__all__ = ["DeviceArray", "FakeDevice", "fake", "fake_backend"]


def _host_arrays(values):
    """Host ndarrays among ``values`` (lists and tuples searched), 0-d ones included:
    CuPy refuses them where it takes numpy scalars."""
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _host_arrays(value)
        elif isinstance(value, np.ndarray) and not isinstance(value, DeviceArray):
            yield value


def _foreign(value):
    """An object of another type that overrides ufuncs (not an ndarray)."""
    return hasattr(type(value), "__array_ufunc__") and not isinstance(value, np.ndarray)


#: numpy functions whose CuPy namesake lacks keywords (CuPy 14.2), and those keywords;
#: ``None``: CuPy has no such function
CUPY_LACKS = {
    np.sum: ("initial", "where"), np.prod: ("initial", "where"),
    np.max: ("initial", "where"), np.min: ("initial", "where"),
    np.clip: ("min", "max"), np.take: ("mode",),
    np.linalg.vector_norm: None,
}


def _refuse_what_cupy_lacks(func, kwargs):
    lacked = CUPY_LACKS.get(func, ())
    if lacked is None:
        raise TypeError("no implementation found for 'numpy.%s' on the fake device "
                        "(CuPy has none)" % func.__name__)
    # numpy passes ``device=`` on when a creation function dispatches on ``like=``;
    # no CuPy function takes it
    for name in tuple(lacked) + ("device",):
        if name in kwargs:
            raise TypeError("%s() got an unexpected keyword argument %r (as CuPy's)"
                            % (func.__name__, name))


def _refuse_host(where, *values):
    for _ in _host_arrays(values):
        raise TypeError("host array mixed with device array in %s (move it with "
                        "fake.asarray)" % where)


#: what the fake device was asked for since import (see ``FakeDevice.counting``)
_COUNTS = collections.Counter()


def _operation():
    _COUNTS["operations"] += 1


def _to_host(array):
    """Count a copy of ``array`` to the host."""
    _COUNTS["device_to_host"] += 1
    _COUNTS["device_to_host_bytes"] += array.nbytes


def _plain(value):
    """The host view of a DeviceArray (numpy computes on it); anything else as is."""
    return value.view(np.ndarray) if isinstance(value, DeviceArray) else value


def _plain_all(obj):
    """``obj`` with every DeviceArray in it (lists and tuples searched) as a plain array."""
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain_all(item) for item in obj)
    return _plain(obj)


def _on_device(result):
    """Arrays in ``result`` (tuples and lists searched) as DeviceArrays; numpy
    scalars become 0-d DeviceArrays, as CuPy's reductions and indexing give."""
    if isinstance(result, np.generic):
        return np.asarray(result).view(DeviceArray)
    if isinstance(result, np.ndarray) and not isinstance(result, DeviceArray):
        return result.view(DeviceArray)
    if isinstance(result, (tuple, list)):
        return type(result)(_on_device(r) for r in result)
    return result


class DeviceArray(np.ndarray):
    """A numpy array standing for an array in device memory.

    Make them with :data:`fake` (``fake.asarray(host)``, ``fake.zeros(n)``...);
    get host arrays back with ``fake.asnumpy``.

    Examples
    --------
    >>> d = fake.zeros(2)
    >>> isinstance(d, DeviceArray), d.__array_namespace__() is fake
    (True, True)
    >>> (d + 1.0).sum()
    DeviceArray(2.)
    """

    def __array_namespace__(self, *, api_version=None):
        return fake

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(_foreign(x) for x in inputs + tuple(kwargs.get("out") or ())):
            return NotImplemented  # as CuPy does: an overriding type (a forward value) decides
        out = kwargs.get("out") or ()
        _refuse_host("numpy." + ufunc.__name__, inputs, out)
        if method == "at" and len(inputs) > 1 and isinstance(inputs[1], list):
            # (CuPy's ufunc.at returns NotImplemented for a list of indices)
            return NotImplemented
        if out:
            kwargs["out"] = tuple(_plain(o) for o in out)
        _operation()
        result = getattr(ufunc, method)(*(_plain(x) for x in inputs), **kwargs)
        if out:
            return out[0] if len(out) == 1 else out
        return None if method == "at" else _on_device(result)

    def __array_function__(self, func, types, args, kwargs):
        if any(not issubclass(t, np.ndarray) for t in types):
            return NotImplemented  # an overriding type (a forward value) decides
        _refuse_what_cupy_lacks(func, kwargs)
        _refuse_host("numpy." + func.__name__, args, tuple(kwargs.values()))
        _operation()
        # numpy's implementation runs on plain arrays: what it mixes inside is its own
        # business (CuPy implements these functions natively)
        return _on_device(func(*_plain_all(args),
                               **{k: _plain_all(v) for k, v in kwargs.items()}))

    def __getitem__(self, key):
        _refuse_host("indexing", key)
        if _gathers(key):  # (basic indexing makes a view: no kernel)
            _operation()
        return _on_device(super().__getitem__(key))

    def __setitem__(self, key, value):
        _refuse_host("indexing", key, value)
        _operation()
        super().__setitem__(key, value)

    def astype(self, dtype, *args, **kwargs):
        _operation()
        return super().astype(dtype, *args, **kwargs)

    def copy(self, *args, **kwargs):
        _operation()
        return super().copy(*args, **kwargs)


def _gathers(key):
    """Whether an index reads by arrays (a gather kernel) rather than a view."""
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, (np.ndarray, list)) for k in keys)


def _read_back(name):
    method = getattr(np.ndarray, name)

    def read(self, *args, **kwargs):
        _to_host(self)
        return method(self, *args, **kwargs)

    read.__name__ = read.__qualname__ = name
    read.__doc__ = "numpy's ``%s``, counted as a copy to the host." % name
    return read


# (each one waits for the device and copies its data to the host on CuPy)
for _name in ("__int__", "__float__", "__complex__", "__bool__", "__index__", "item",
              "tolist"):
    setattr(DeviceArray, _name, _read_back(_name))
del _name


class _DeviceUfunc:
    """A numpy ufunc of the fake device: refuses host arrays, returns DeviceArrays."""

    def __init__(self, ufunc):
        self._ufunc = ufunc
        self.__name__ = ufunc.__name__

    def __call__(self, *args, **kwargs):
        _refuse_host("fake." + self.__name__, args, tuple(kwargs.values()))
        if "out" in kwargs:  # (the DeviceArray's __array_ufunc__ counts it)
            return _on_device(self._ufunc(*args, **kwargs))
        _operation()
        return _on_device(self._ufunc(*_plain_all(args), **kwargs))

    # (``at`` and ``reduce`` reach DeviceArray.__array_ufunc__, which counts them
    # and refuses a list of indices as CuPy does)
    def at(self, a, indices, b=None):
        _refuse_host("fake.%s.at" % self.__name__, a, indices, b)
        self._ufunc.at(a, indices, b)

    def reduce(self, array, *args, **kwargs):
        _refuse_host("fake.%s.reduce" % self.__name__, array, args, tuple(kwargs.values()))
        return _on_device(self._ufunc.reduce(array, *args, **kwargs))

    def __repr__(self):
        return "<fake device ufunc %s>" % self.__name__


#: functions of the fake device that launch nothing (views and allocations)
_NO_KERNEL = ("broadcast_to", "empty", "empty_like")


def _device_function(name):
    function = getattr(np, name)
    launches = name not in _NO_KERNEL

    def call(*args, **kwargs):
        _refuse_host("fake." + name, args, tuple(kwargs.values()))
        if launches:
            _operation()
        return _on_device(function(*_plain_all(args),
                                   **{k: _plain_all(v) for k, v in kwargs.items()}))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = "numpy.%s on the fake device (host arrays refused)." % name
    return call


class FakeDevice:
    """The array module of the fake device, the subset of ``cupy`` the kernels use.

    Examples
    --------
    >>> fake.cumsum(fake.asarray([1, 2, 3]))
    DeviceArray([1, 3, 6])
    >>> fake.linalg
    Traceback (most recent call last):
        ...
    AttributeError: the fake device has no 'linalg' (add it to FakeDevice if CuPy has it)
    """

    #: functions of arrays: numpy's, refusing host arrays
    FUNCTIONS = ("argmax", "argsort", "broadcast_to", "concatenate", "cumsum",
                 "diff", "flatnonzero", "nonzero", "repeat", "searchsorted", "sort",
                 "unique", "where")
    #: creation functions: numpy's, results on the device
    CREATION = ("arange", "empty", "full", "ones", "zeros", "empty_like", "ones_like",
                "zeros_like")
    #: dtypes and dtype functions: numpy's own, as in CuPy
    DTYPES = ("bool_", "int32", "int64", "intp", "float32", "float64", "complex64",
              "complex128", "dtype", "iinfo", "finfo", "result_type", "can_cast")

    ndarray = DeviceArray

    def __init__(self):
        for name in self.FUNCTIONS + self.CREATION:
            setattr(self, name, _device_function(name))
        for name in self.DTYPES:
            setattr(self, name, getattr(np, name))

    def __getattr__(self, name):
        # every numpy ufunc, as CuPy has nearly all of them, refusing host arrays
        # (``at`` and ``reduce`` included); made on first use
        if isinstance(getattr(np, name, None), np.ufunc):
            ufunc = _DeviceUfunc(getattr(np, name))
            setattr(self, name, ufunc)
            return ufunc
        raise AttributeError("the fake device has no %r (add it to FakeDevice if CuPy has it)"
                             % name)

    def bincount(self, x, weights=None, minlength=None):
        """numpy.bincount on the fake device, refusing an empty ``x`` as CuPy does.

        CuPy sizes the result by ``int(cupy.max(x)) + 1`` before it looks at
        ``minlength``, so an empty ``x`` raises ``ValueError`` there (cupy/cupy#8116,
        whatever ``minlength`` is) where numpy returns zeros.
        """
        _refuse_host("fake.bincount", x, weights)
        if len(x) == 0:
            raise ValueError("zero-size array to reduction operation maximum which has no "
                             "identity (cupy.bincount of an empty array)")
        _operation()
        return _on_device(np.bincount(_plain(x), weights=_plain(weights),
                                      minlength=minlength or 0))

    def may_share_memory(self, a, b):
        """numpy.may_share_memory of two device arrays, a bool as CuPy's."""
        _refuse_host("fake.may_share_memory", a, b)
        return bool(np.may_share_memory(_plain(a), _plain(b)))

    def asarray(self, a, dtype=None):
        """``a`` on the device, like ``cupy.asarray``: host arrays are copied
        there (an explicit transfer); a DeviceArray of that dtype is returned as is."""
        if isinstance(a, DeviceArray):
            return a if dtype is None or a.dtype == dtype else a.astype(dtype)
        return _from_host(a, dtype)

    def array(self, a, dtype=None):
        """A copy of ``a`` on the device, like ``cupy.array``."""
        if not isinstance(a, DeviceArray):
            return _from_host(a, dtype)
        _operation()
        return np.array(_plain(a), dtype=dtype).view(DeviceArray)

    def asnumpy(self, a):
        """A host copy of ``a``, like ``cupy.asnumpy``."""
        if isinstance(a, DeviceArray):
            _to_host(a)
        return np.array(_plain(a))

    @staticmethod
    @contextlib.contextmanager
    def counting():
        """Count what the block asks of the fake device.

        Yields a :class:`collections.Counter`, filled when the block ends:
        ``host_to_device`` and ``device_to_host`` (copies), their ``_bytes``,
        and ``operations`` (ufuncs, functions, gathers, writes, casts and
        copies on the device: each a kernel launch or more on a GPU).

        >>> with fake.counting() as counts:
        ...     d = fake.asarray(np.arange(3.0))
        ...     total = float((d * 2).sum())
        >>> sorted(counts.items())
        [('device_to_host', 1), ('device_to_host_bytes', 8), ('host_to_device', 1), \
('host_to_device_bytes', 24), ('operations', 2)]
        """
        before = _COUNTS.copy()
        counts = collections.Counter()
        try:
            yield counts
        finally:
            counts.update(_COUNTS - before)

    def __repr__(self):
        return "<sparsegrad fake device namespace>"


def _from_host(a, dtype):
    array = np.array(a, dtype=dtype)
    _COUNTS["host_to_device"] += 1
    _COUNTS["host_to_device_bytes"] += array.nbytes
    return array.view(DeviceArray)


#: the namespace of :class:`DeviceArray` arrays
fake = FakeDevice()


# ---- the fake device as a sparsegrad backend ------------------------------------

class _FakeSparse:
    """The fake device's ``cupyx.scipy.sparse``: matrices are built on the host."""

    @staticmethod
    def csr_matrix(arrays, shape=None, copy=False):
        # (stands for CuPy's matrix on the device: not counted as a copy to the host)
        return scipy.sparse.csr_matrix(tuple(np.array(_plain(a)) for a in arrays),
                                       shape=shape, copy=copy)


class _FakeLinalg:
    """The fake device's ``cupyx.scipy.sparse.linalg``, by SciPy on the host."""

    @staticmethod
    def spsolve(J, b):
        return fake.asarray(scipy.sparse.linalg.spsolve(J.tocsc(), fake.asnumpy(b)))

    @staticmethod
    def gmres(J, b, rtol, atol, restart, maxiter):
        step, info = scipy.sparse.linalg.gmres(J, fake.asnumpy(b), rtol=rtol, atol=atol,
                                               restart=restart, maxiter=maxiter)
        return fake.asarray(step), info


_FakeSparse.linalg = _FakeLinalg
_BACKEND = None


def fake_backend():
    """The fake device as a sparsegrad backend, registered for :class:`DeviceArray`.

    Its kernels are the device kernels (:mod:`sparsegrad.gpu._kernels`); its
    sparse module builds ``.dvalue`` as a SciPy matrix on the host and solves
    with SciPy (the fake's ``cupyx.scipy.sparse``).  Seeding a DeviceArray
    then runs sparsegrad's device path on the CPU.

    >>> from sparsegrad import forward
    >>> b = fake_backend()
    >>> forward.seed(fake.asarray([1.0, 2.0]))._jacobian.seed.backend is b
    True
    """
    global _BACKEND
    if _BACKEND is None:
        from .. import _backend
        from . import _kernels
        _BACKEND = _backend.Backend("fake", fake, _FakeSparse, _kernels)
        _backend.register(DeviceArray, _BACKEND)
    return _BACKEND
