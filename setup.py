"""Build the Cython kernels and the compiled Python modules; all package metadata
lives in pyproject.toml."""
import glob
import hashlib
import importlib.util
import json
import os
import sys
import threading

import numpy
import Cython
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -ffp-contract=off: never fuse a * b + c into one FMA, so the compiled kernels
# round exactly as the pure-numpy reference kernels do (GCC contracts by
# default on targets with FMA, e.g. aarch64).  The kernels' and the program
# runner's loops take -O3 (its vectorizer: the shallow-water 400x400 program ran
# 1.5x slower at -O2); the memory pool -O2, and the compiled Python
# modules, mostly calls into Python's C API, -O1: -O3 took two to three times as
# long to compile them for 1-4% fewer instructions per evaluation
# (docs/performance.md, "Build").  Without debug information (gcc spends about
# a quarter of the build writing it) unless CFLAGS asks for it.
if sys.platform == "win32":
    KERNEL_ARGS = POOL_ARGS = MODULE_ARGS = []
else:
    _DEBUG = any(flag.startswith("-g") and flag != "-g0"
                 for flag in os.environ.get("CFLAGS", "").split())
    _COMMON = ["-ffp-contract=off"] + ([] if _DEBUG else ["-g0"])
    KERNEL_ARGS = ["-O3"] + _COMMON
    POOL_ARGS = ["-O2"] + _COMMON
    MODULE_ARGS = ["-O1"] + _COMMON


def _compiled_module():
    """sparsegrad._compiled, read on its own (it imports only the standard library)."""
    path = os.path.join("sparsegrad", "_compiled.py")
    spec = importlib.util.spec_from_file_location("_sparsegrad_compiled", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compiled = _compiled_module()


def _extension(name, source, args, directives, **options):
    extension = Extension(name, [source], extra_compile_args=args, **options)
    extension.cython_directives = dict(directives, language_level=3)
    return extension


# the kernels, the memory pool (a numpy memory handler) and the program runner,
# longest first so that the parallel build starts it first.  boundscheck and
# wraparound are switched off per function in the .pyx, only on the loops whose
# indices the def wrappers have checked.
EXTENSIONS = [
    _extension("sparsegrad._fast." + name, "sparsegrad/_fast/%s.pyx" % name, args, {},
               include_dirs=[numpy.get_include()],
               define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
    for name, args in (("_kernels", KERNEL_ARGS), ("_program", KERNEL_ARGS),
                       ("_pool", POOL_ARGS))
] + [
    # the Python modules of every operation's chain, compiled as they are written
    # (sparsegrad/_compiled.py says why and when their source runs instead):
    # binding=True keeps their functions introspectable and bindable as methods,
    # as Python's are; infer_types=False keeps every untyped local a Python
    # object, so that arithmetic keeps Python's semantics (types come only from
    # the .pxd files)
    _extension("sparsegrad." + name, "sparsegrad/%s.py" % name, MODULE_ARGS,
               {"binding": True, "infer_types": False})
    for name in compiled.MODULES
]

#: where the build records what each compiled module it made was made from
BUILD_RECORD = os.path.join("build", "sparsegrad-extensions.json")


def build_key(extension, cflags=None):
    """What a compiled extension depends on, as a SHA-256 in hex: Cython's, numpy's
    and Python's versions, the C flags (``cflags``: default the ``CFLAGS`` variable)
    and the extension's own arguments and directives, and the bytes of its source
    and of every ``.pxd`` in the package.  A compiled module whose recorded key
    equals this one is what compiling again would give."""
    if cflags is None:
        cflags = os.environ.get("CFLAGS", "")
    digest = hashlib.sha256()
    for part in (Cython.__version__, numpy.__version__, sys.version, cflags,
                 json.dumps(extension.extra_compile_args),
                 json.dumps(sorted(extension.cython_directives.items()))):
        digest.update(part.encode() + b"\0")
    for path in extension.sources + sorted(glob.glob(os.path.join("sparsegrad", "**", "*.pxd"),
                                                     recursive=True)):
        with open(path, "rb") as stream:
            digest.update(path.encode() + b"\0" + stream.read() + b"\0")
    return digest.hexdigest()


def _stat(path):
    status = os.stat(path)
    return [status.st_size, status.st_mtime_ns]


class BuildExtensions(build_ext):
    """``build_ext`` that translates each extension with Cython when it compiles
    it, copies instead a compiled module that an earlier build of this checkout
    made from the same inputs (:func:`build_key`), and records which source each
    compiled module was built from (the manifest that sparsegrad._compiled
    checks), beside the modules it built: written only by a build, so that no
    other command can vouch for stale ones."""

    def finalize_options(self):
        super().finalize_options()
        # the extensions compiled side by side (the modules' generated C is
        # long), unless --parallel/-j says otherwise.  Set here rather than by
        # setup(options=...): an editable install (pip install -e) builds with
        # a build_ext that setuptools has reinitialized, which drops the
        # options given to setup(), and so compiled one module at a time.
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1
        # whether to compile is decided by build_key, not by the files' times
        self.force = True
        self._keys = {}
        # Cython's compiler keeps global state: one translation at a time, while
        # the C compiler works on the others
        self._cython_lock = threading.Lock()

    def build_extension(self, ext):
        key = self._keys[ext.name] = build_key(ext)
        target = self.get_ext_fullpath(ext.name)
        earlier = self._earlier_build(ext, key)
        if earlier is not None:
            if os.path.abspath(earlier) != os.path.abspath(target):
                self.mkpath(os.path.dirname(target))
                self.copy_file(earlier, target)
            return
        with self._cython_lock:
            translated, = cythonize([ext], compiler_directives=ext.cython_directives,
                                    quiet=True)
        # the extension itself, compiled from the C file: setuptools keeps its
        # own attributes on the extensions it was given
        ext.sources = list(translated.sources)
        super().build_extension(ext)

    def _earlier_build(self, ext, key):
        """A compiled module for ``ext`` that a build of this checkout made with
        ``key`` and that has not changed since, or None.  A plain install leaves
        its modules in build/lib.*, an editable one beside their sources."""
        filename = os.path.basename(self.get_ext_filename(ext.name))
        for path, (recorded, stat) in _read_record().items():
            if (recorded == key and os.path.basename(path) == filename
                    and os.path.exists(path) and _stat(path) == stat):
                return path
        return None

    def run(self):
        super().run()
        package = "sparsegrad" if self.inplace else os.path.join(self.build_lib, "sparsegrad")
        os.makedirs(package, exist_ok=True)
        with open(os.path.join(package, compiled.MANIFEST), "w") as stream:
            json.dump({name: compiled.source_hash("sparsegrad", name)
                       for name in compiled.MODULES}, stream, indent=1, sort_keys=True)
            stream.write("\n")
        self._record()

    def _record(self):
        """Record the key of every compiled module this build left in the checkout
        (an editable install's copies beside the sources; a plain one's build/lib.*,
        not the temporary directories)."""
        checkout = os.path.abspath(".")
        # (an editable install copies the modules beside their sources after
        # building them in a temporary directory)
        in_place = self.inplace or getattr(self, "editable_mode", False)
        record = _read_record()
        for ext in self.extensions:
            if ext.name not in self._keys:
                continue
            paths = {os.path.abspath(self.get_ext_fullpath(ext.name))}
            if in_place:
                paths.add(os.path.abspath(self.get_ext_filename(ext.name)))
            for path in paths:
                if path.startswith(checkout + os.sep) and os.path.exists(path):
                    record[os.path.relpath(path, checkout)] = [self._keys[ext.name], _stat(path)]
        os.makedirs(os.path.dirname(BUILD_RECORD), exist_ok=True)
        with open(BUILD_RECORD, "w") as stream:
            json.dump(record, stream, indent=1, sort_keys=True)


def _read_record():
    try:
        with open(BUILD_RECORD) as stream:
            return json.load(stream)
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    setup(ext_modules=EXTENSIONS, cmdclass={"build_ext": BuildExtensions})
