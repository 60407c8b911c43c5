"""Where the arrays of a seed live: array namespace, sparse module and kernels.

sparsegrad's forward logic is written once.  What differs between the CPU and
a GPU is gathered in a :class:`Backend`: the array module (``numpy`` or
``cupy``), the sparse module the Jacobian is handed out in (``scipy.sparse``
or ``cupyx.scipy.sparse``) and the kernel module (``sparsegrad._fast`` or
``sparsegrad.gpu._kernels``).  Every :class:`sparsegrad._jacobian.Seed`
carries its backend, found from the seeded array's type by :func:`of`.

Backends other than the CPU register themselves with :func:`register` when
their package is imported (``sparsegrad.gpu`` for CuPy arrays; the tests'
fake device for its own array type), so nothing here imports CuPy.

>>> import numpy as np
>>> of(np.zeros(3)) is CPU
True
>>> CPU.name
'cpu'
"""
import numpy as np
import scipy.sparse

from ._fast import kernels as _cpu_kernels

__all__ = ["Backend", "CPU", "of", "register", "is_cupy", "asarray", "to_host", "to_device"]


class Backend:
    """The array namespace, sparse module and kernels of one kind of device.

    Parameters
    ----------
    name : str
        Short name (``"cpu"``, ``"cuda"``...), used in error messages.
    xp : module
        The array module: array creation and operations (``numpy``, ``cupy``).
    sparse : module
        Where ``.dvalue`` matrices are made: its ``csr_matrix((data, indices,
        indptr), shape=...)`` is called (``scipy.sparse``,
        ``cupyx.scipy.sparse``).
    kernels : module
        The kernel interface of ``sparsegrad._fast`` for these arrays.

    Examples
    --------
    >>> Backend("cpu-copy", np, scipy.sparse, CPU.kernels).xp is np
    True
    """

    __slots__ = ("name", "xp", "sparse", "kernels")

    def __init__(self, name, xp, sparse, kernels):
        self.name = name
        self.xp = xp
        self.sparse = sparse
        self.kernels = kernels

    @property
    def linalg(self):
        """The sparse linear algebra module (``scipy.sparse.linalg``,
        ``cupyx.scipy.sparse.linalg``): ``spsolve``, ``gmres``..."""
        linalg = getattr(self.sparse, "linalg", None)
        if linalg is None:
            import importlib
            linalg = importlib.import_module(self.sparse.__name__ + ".linalg")
        return linalg

    def __repr__(self):
        return "<sparsegrad backend %s>" % self.name


#: numpy arrays, scipy.sparse matrices, the compiled (or reference) kernels
CPU = Backend("cpu", np, scipy.sparse, _cpu_kernels)

# (ndarrays and Python numbers first: the common case is one dict lookup)
_REGISTRY = {np.ndarray: CPU, float: CPU, int: CPU, complex: CPU, bool: CPU}


def register(array_type, backend):
    """Seeds of arrays of ``array_type`` (an exact type) use ``backend``."""
    if not isinstance(backend, Backend):
        raise TypeError("register: backend must be a Backend, not %r" % (backend,))
    _REGISTRY[array_type] = backend


def of(array):
    """The backend of ``array``: a registered one for its type, else the CPU.

    Anything that is not an array of a registered type (ndarrays, lists,
    scalars) belongs to the CPU; a CuPy array registers the CUDA backend on
    first sight.
    """
    backend = _REGISTRY.get(type(array))
    if backend is not None:
        return backend
    if is_cupy(array):
        from . import gpu
        return gpu.backend()
    return CPU


def is_cupy(array):
    """Whether ``array`` is a CuPy array (told by its type's package: CuPy is not imported)."""
    return type(array).__module__.split(".")[0] == "cupy"


def asarray(x):
    """``x`` as an array on its own device: ``np.asarray`` for host data, unchanged
    for an array of a registered device (where ``np.asarray`` would copy to the
    host, or raise as CuPy does)."""
    if type(x) is np.ndarray:  # (the common case, first)
        return x
    return np.asarray(x) if of(x) is CPU else x


def to_host(x):
    """``x`` as a numpy array: device arrays are copied to the host (``xp.asnumpy``).

    For the row bookkeeping, which lives on the host: an index array the user
    made on the device is brought back to say which rows are gathered.
    """
    backend = of(x)
    return np.asarray(x) if backend is CPU else backend.xp.asnumpy(x)


def to_device(x, backend):
    """``x`` on ``backend``'s device: host data (row numbers, masks, index lists,
    constant matrices built on the host) copied there; unchanged on the CPU or when
    ``x`` is there already."""
    return x if backend is CPU or of(x) is backend else backend.xp.asarray(x)


def shares_memory(result, array):
    """Whether ``result`` (an indexing or reshaping result of ``array``) is a view
    of it: numpy's own answer, an array sharing its memory (a copy never does)."""
    if isinstance(result, np.generic) or not hasattr(result, "shape"):
        return False  # (a numpy scalar: basic indexing of every axis copies)
    if type(result) is np.ndarray or of(result) is CPU:
        return np.may_share_memory(result, array)
    return of(result).xp.may_share_memory(result, array)
