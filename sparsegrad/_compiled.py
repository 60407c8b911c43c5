"""Which of sparsegrad's Python modules run compiled, and when their source runs instead.

Every operation on a forward value passes through a chain of small Python
functions (the ufunc rules, the Jacobian's term algebra, indexing, the
structure cache): 7-10 us per operation from source, which is what a
residual of 10^4 unknowns mostly costs, and a fixed cost of every evaluation
at any size.  The build compiles the modules of that chain (:data:`MODULES`)
with Cython as they are written, as plain Python (types are declared only in
augmenting ``.pxd`` files beside some of them, ``_jacobian.pxd``): the same
code, about a quarter less overhead per operation (``docs/performance.md``).
The ``.py`` files stay the source of truth, and run instead of their compiled
modules

- under ``SPARSEGRAD_PURE_PYTHON=1`` (the reference kernels: no compiled code
  at all, the suite's second run) or ``SPARSEGRAD_SOURCE_MODULES=1`` (only
  these modules, e.g. for ``cProfile``, ``pdb`` or coverage, which do not see
  into compiled functions);
- for a module whose source differs from the one it was compiled from (the
  build records a hash of each source in ``_compiled_sources.json``, with the
  augmenting ``.pxd`` that declares types for the compiled build of some of
  them): an edited module runs as edited until the next build, never a stale
  compiled copy of it;
- for a module outside :data:`MODULES` that an older build compiled (its
  compiled file is still beside its source).

:func:`install` is called first thing by ``sparsegrad/__init__.py``, before
any of these modules is imported: a finder at the front of ``sys.meta_path``
then hands out the source of the modules that must not run compiled.

>>> sorted(MODULES)[:3]
['_backend', '_deferred', '_jacobian']
>>> import sparsegrad
>>> set(compiled_modules()) <= set(MODULES)
True
"""
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys

__all__ = ["MODULES", "MANIFEST", "install", "compiled_modules", "source_hash"]

#: the modules the build compiles (names within the package)
MODULES = ("_backend", "_deferred", "_jacobian", "_memory", "_structure", "_trace",
           "_ufuncs", "_value", "forward")

#: the file, beside this one, with the hash of each module's source at the build
MANIFEST = "_compiled_sources.json"

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = __name__.rpartition(".")[0]


def source_hash(directory, name):
    """The SHA-256, in hex, of module ``name``'s source in ``directory``: its
    ``.py`` file's bytes, then those of the ``.pxd`` beside it, if any (the types
    its compiled build declares); what the build records per module."""
    digest = hashlib.sha256()
    with open(os.path.join(directory, name + ".py"), "rb") as stream:
        digest.update(stream.read())
    declarations = os.path.join(directory, name + ".pxd")
    if os.path.exists(declarations):
        with open(declarations, "rb") as stream:
            digest.update(stream.read())
    return digest.hexdigest()


def _source_wanted():
    """Whether the environment asks for the source of every module."""
    return any(os.environ.get(name, "") not in ("", "0")
               for name in ("SPARSEGRAD_PURE_PYTHON", "SPARSEGRAD_SOURCE_MODULES"))


def _stale(directory):
    """The modules whose source differs from what their compiled module was built
    from (all of them without a readable manifest)."""
    try:
        with open(os.path.join(directory, MANIFEST)) as stream:
            built = json.load(stream)
    except (OSError, ValueError):
        return set(MODULES)
    if not isinstance(built, dict):
        return set(MODULES)
    stale = set()
    for name in MODULES:
        try:
            if built.get(name) != source_hash(directory, name):
                stale.add(name)
        except OSError:  # (no source beside it: only the compiled module exists)
            pass
    return stale


def _no_longer_compiled(directory):
    """Modules outside :data:`MODULES` with a compiled module beside their source:
    left by a build from before they stopped being compiled, and older than it."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = set()
    for filename in os.listdir(directory):
        if filename.endswith(suffixes):
            name = filename.split(".", 1)[0]
            if name not in MODULES and os.path.exists(os.path.join(directory, name + ".py")):
                found.add(name)
    return found


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` source of the package's modules named in ``names``."""

    def __init__(self, names, directory=_HERE):
        self.names = frozenset(names)
        self.directory = directory

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != _PACKAGE or name not in self.names:
            return None
        source = os.path.join(self.directory, name + ".py")
        if not os.path.exists(source):
            return None
        return importlib.util.spec_from_file_location(fullname, source)


_finder = None


def install():
    """Put the finder of the modules that must run from source in front of the
    import system (once); returns it."""
    global _finder
    if _finder is None:
        names = set(MODULES) if _source_wanted() else _stale(_HERE)
        _finder = _SourceFinder(names | _no_longer_compiled(_HERE))
        if _finder.names:
            sys.meta_path.insert(0, _finder)
    return _finder


def compiled_modules():
    """The names of the imported modules of :data:`MODULES` that run compiled.

    Examples
    --------
    >>> import sparsegrad
    >>> all(name in MODULES for name in compiled_modules())
    True
    """
    return [name for name in MODULES
            if not getattr(sys.modules.get(_PACKAGE + "." + name), "__file__", ".py")
            .endswith(".py")]
