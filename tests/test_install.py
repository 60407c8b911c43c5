"""What a user sees when the compiled kernels are not the ones running: the warning
names the copy of sparsegrad imported, why it has no kernels, and the command that
fixes it (never Python's generic "circular import" text)."""
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys

import pytest

import sparsegrad
from sparsegrad._fast import unavailable_message

PACKAGE = os.path.dirname(os.path.abspath(sparsegrad.__file__))


def source_tree(root):
    """A copy of sparsegrad's sources under ``root`` without any compiled module."""
    shutil.copytree(PACKAGE, os.path.join(root, "sparsegrad"),
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "*.c", "__pycache__",
                                                  "_compiled_sources.json"))
    return os.path.join(root, "sparsegrad")


def import_warnings(cwd, env_path=()):
    """The warnings of ``import sparsegrad`` run in a new process from ``cwd``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(env_path), PYTHONWARNINGS="always")
    env.pop("SPARSEGRAD_PURE_PYTHON", None)
    # without the finder of an editable install of this checkout, which would hand
    # out this checkout's compiled modules for the copy's missing ones
    code = ("import sys\n"
            "sys.meta_path[:] = [f for f in sys.meta_path\n"
            "                    if not f.__module__.startswith('__editable__')]\n"
            "import sparsegrad._fast as f\n"
            "print(f.KERNELS)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr


def test_source_tree_without_kernels(tmp_path):
    tree = source_tree(str(tmp_path))
    kernels, stderr = import_warnings(str(tmp_path))
    assert kernels == "reference"
    assert "circular" not in stderr
    assert "imported from the source tree %s" % os.path.dirname(tree) in stderr
    assert "python -m pip install -e ." in stderr


def test_source_tree_shadowing_an_installed_copy(tmp_path):
    source = tmp_path / "checkout"
    source.mkdir()
    source_tree(str(source))
    # an installed copy elsewhere on the path, with its distribution metadata
    site = tmp_path / "site-packages"
    (site / "sparsegrad").mkdir(parents=True)
    info = site / "sparsegrad-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sparsegrad\nVersion: 0.1.0\n")
    kernels, stderr = import_warnings(str(source), [str(site)])
    assert kernels == "reference"
    assert "It shadows the sparsegrad installed in %s" % (site / "sparsegrad") in stderr
    assert "run from another directory" in stderr


def test_kernels_that_fail_to_load(tmp_path):
    here = tmp_path / "_fast"
    here.mkdir()
    (here / "_kernels.pyx").write_text("")
    (here / ("_kernels" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"")
    message = unavailable_message(str(here), ImportError("undefined symbol: x"))
    assert "fail to load (undefined symbol: x)" in message
    assert "python -m pip install ." in message


def test_installed_without_kernels(tmp_path):
    message = unavailable_message(str(tmp_path), ImportError("no module"))
    assert "not installed in %s" % tmp_path in message


# ---- the build's reuse of compiled modules ---------------------------------------
SETUP = os.path.join(os.path.dirname(PACKAGE), "setup.py")


@pytest.fixture
def setup_module():
    """setup.py's namespace, read without running the build (the test extra
    installs what it imports)."""
    pytest.importorskip("Cython")
    pytest.importorskip("setuptools")
    import runpy
    return runpy.run_path(SETUP, run_name="sparsegrad_setup")


def test_build_key_changes_with_each_input(setup_module, tmp_path, monkeypatch):
    import types
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sparsegrad").mkdir()
    (tmp_path / "sparsegrad" / "m.py").write_text("x = 1\n")
    (tmp_path / "sparsegrad" / "m.pxd").write_text("cdef int y\n")
    make = setup_module["_extension"]
    key = setup_module["build_key"]

    def extension(args=("-O1",), directives=None):
        return make("sparsegrad.m", "sparsegrad/m.py", list(args), directives or {})

    base = key(extension(), cflags="")
    assert key(extension(), cflags="") == base
    assert key(extension(), cflags="-g") != base                          # C flags
    assert key(extension(["-O3"]), cflags="") != base                     # arguments
    assert key(extension(directives={"binding": True}), cflags="") != base  # directives
    (tmp_path / "sparsegrad" / "m.py").write_text("x = 2\n")
    assert key(extension(), cflags="") != base                            # the source
    (tmp_path / "sparsegrad" / "m.py").write_text("x = 1\n")
    (tmp_path / "sparsegrad" / "m.pxd").write_text("cdef long y\n")
    assert key(extension(), cflags="") != base                            # a .pxd
    (tmp_path / "sparsegrad" / "m.pxd").write_text("cdef int y\n")
    assert key(extension(), cflags="") == base
    namespace = key.__globals__      # (run_path returns a copy of it)
    for name in ("Cython", "numpy"):                                      # versions
        real = namespace[name]
        monkeypatch.setitem(namespace, name, types.SimpleNamespace(
            __version__=real.__version__ + ".other"))
        assert key(extension(), cflags="") != base, name
        monkeypatch.setitem(namespace, name, real)
    monkeypatch.setattr(namespace["sys"], "version", "other")             # Python
    assert key(extension(), cflags="") != base


def test_earlier_build_is_reused_only_when_unchanged(setup_module, tmp_path, monkeypatch):
    from setuptools import Distribution
    monkeypatch.chdir(tmp_path)
    command = setup_module["BuildExtensions"](Distribution())
    command.initialize_options()
    command.finalize_options()
    ext = setup_module["_extension"]("sparsegrad.m", "m.py", [], {})
    filename = command.get_ext_filename("sparsegrad.m")
    built = tmp_path / "build" / "lib.x" / filename
    built.parent.mkdir(parents=True)
    built.write_bytes(b"compiled")
    record = {os.path.relpath(built, tmp_path): ["K", setup_module["_stat"](str(built))]}
    (tmp_path / "build" / "sparsegrad-extensions.json").write_text(json.dumps(record))
    assert command._earlier_build(ext, "K") == os.path.relpath(built, tmp_path)
    assert command._earlier_build(ext, "other key") is None
    built.write_bytes(b"compiled again, by a build that did not record it")
    assert command._earlier_build(ext, "K") is None
