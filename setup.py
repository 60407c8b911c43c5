"""Build the Cython kernels and the compiled Python modules; all package metadata
lives in pyproject.toml."""
import importlib.util
import json
import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -ffp-contract=off: never fuse a * b + c into one FMA, so the compiled kernels
# round exactly as the pure-numpy reference kernels do (GCC contracts by
# default on targets with FMA, e.g. aarch64).
COMPILE_ARGS = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"]

# the kernels, and the memory pool (a numpy memory handler)
extensions = [
    Extension(
        "sparsegrad._fast." + name,
        ["sparsegrad/_fast/%s.pyx" % name],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=COMPILE_ARGS,
    )
    for name in ("_kernels", "_pool", "_program")
]

# boundscheck/wraparound are switched off per function in the .pyx, only on
# the loops whose indices the def wrappers have checked.
kernels = cythonize(extensions, compiler_directives={"language_level": 3})


def _compiled_module():
    """sparsegrad._compiled, read on its own (it imports only the standard library)."""
    path = os.path.join("sparsegrad", "_compiled.py")
    spec = importlib.util.spec_from_file_location("_sparsegrad_compiled", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the Python modules of every operation's chain, compiled as they are written
# (sparsegrad/_compiled.py says why and when their source runs instead):
# binding=True keeps their functions introspectable and bindable as methods, as
# Python's are; infer_types=False keeps every untyped local a Python object, so
# that arithmetic keeps Python's semantics (types come only from the .pxd files)
compiled = _compiled_module()
modules = cythonize(
    [Extension("sparsegrad." + name, ["sparsegrad/%s.py" % name],
               extra_compile_args=COMPILE_ARGS) for name in compiled.MODULES],
    compiler_directives={"language_level": 3, "binding": True, "infer_types": False})


class BuildExtensions(build_ext):
    """``build_ext`` that records which source each compiled module was built from
    (the manifest that sparsegrad._compiled checks), beside the modules it built:
    written only by a build, so that no other command can vouch for stale ones."""

    def finalize_options(self):
        super().finalize_options()
        # the extensions compiled side by side (the modules' generated C is
        # long), unless --parallel/-j says otherwise.  Set here rather than by
        # setup(options=...): an editable install (pip install -e) builds with
        # a build_ext that setuptools has reinitialized, which drops the
        # options given to setup(), and so compiled one module at a time.
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self):
        super().run()
        package = "sparsegrad" if self.inplace else os.path.join(self.build_lib, "sparsegrad")
        os.makedirs(package, exist_ok=True)
        with open(os.path.join(package, compiled.MANIFEST), "w") as stream:
            json.dump({name: compiled.source_hash("sparsegrad", name)
                       for name in compiled.MODULES}, stream, indent=1, sort_keys=True)
            stream.write("\n")


setup(ext_modules=kernels + modules, cmdclass={"build_ext": BuildExtensions})
