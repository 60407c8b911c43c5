"""Build the Cython kernels; all package metadata lives in pyproject.toml."""
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

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
    for name in ("_kernels", "_pool")
]

# boundscheck/wraparound are switched off per function in the .pyx, only on
# the loops whose indices the def wrappers have checked.
setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": 3}))
