"""The compiled Python modules (sparsegrad._compiled): compiled in a build, their
source wherever it must run instead, and the same behaviour either way.

The whole suite runs on the compiled modules (a build) and on their sources
(``SPARSEGRAD_PURE_PYTHON=1``, the second run of ``.ci/run``); these tests
check the switch itself.  Under ``CI=true`` a module that did not compile is a
failure, as for the kernels (tests/test_kernels.py).
"""
import importlib
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import sparsegrad
from sparsegrad import _compiled, forward

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _on_ci():
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _import_all():
    for name in _compiled.MODULES:
        importlib.import_module("sparsegrad." + name)


def _run(code, **environment):
    """Output of ``code`` in a fresh interpreter with ``environment`` set."""
    env = dict(os.environ)
    for name in ("SPARSEGRAD_PURE_PYTHON", "SPARSEGRAD_SOURCE_MODULES"):
        env.pop(name, None)
    env.update(environment)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


_COMPILED_NOW = ("import sparsegrad, sparsegrad._compiled as c; "
                 "[__import__('sparsegrad.' + m) for m in c.MODULES]; "
                 "print(','.join(c.compiled_modules()))")


def test_a_build_compiles_every_module():
    _import_all()
    if _compiled._source_wanted():
        assert _compiled.compiled_modules() == []
        return
    compiled = _compiled.compiled_modules()
    if compiled != list(_compiled.MODULES):
        # (no build in place, or a module edited since the build: its source runs)
        message = ("sparsegrad modules running from their source, not compiled: %s "
                   "(python setup.py build_ext --inplace)"
                   % ", ".join(sorted(set(_compiled.MODULES) - set(compiled))))
        if _on_ci():
            pytest.fail("CI=true but " + message)
        pytest.skip(message)
    with open(os.path.join(os.path.dirname(_compiled.__file__), _compiled.MANIFEST)) as f:
        assert sorted(json.load(f)) == sorted(_compiled.MODULES)


@pytest.mark.parametrize("variable", ["SPARSEGRAD_PURE_PYTHON", "SPARSEGRAD_SOURCE_MODULES"])
def test_the_environment_asks_for_the_sources(variable):
    assert _run(_COMPILED_NOW, **{variable: "1"}) == ""
    # (0 is off, as for SPARSEGRAD_PURE_PYTHON: what the build gives unasked)
    assert _run(_COMPILED_NOW, **{variable: "0"}) == _run(_COMPILED_NOW)


def test_source_modules_keep_the_compiled_kernels():
    kernels = "import sparsegrad; print(sparsegrad.KERNELS)"
    assert _run(kernels, SPARSEGRAD_SOURCE_MODULES="1") == _run(kernels)


def _package(tmp_path, sources, manifest):
    for name, text in sources.items():
        (tmp_path / (name + ".py")).write_text(text)
    if manifest is not None:
        (tmp_path / _compiled.MANIFEST).write_text(json.dumps(manifest))
    return str(tmp_path)


def test_an_edited_module_is_stale(tmp_path):
    directory = _package(tmp_path, {name: "# %s\n" % name for name in _compiled.MODULES},
                         None)
    manifest = {name: _compiled.source_hash(directory, name) for name in _compiled.MODULES}
    (tmp_path / _compiled.MANIFEST).write_text(json.dumps(manifest))
    assert _compiled._stale(directory) == set()
    (tmp_path / "_jacobian.py").write_text("# _jacobian, edited\n")
    assert _compiled._stale(directory) == {"_jacobian"}


def test_declared_types_are_part_of_the_source(tmp_path):
    directory = _package(tmp_path, {name: "\n" for name in _compiled.MODULES}, None)
    manifest = {name: _compiled.source_hash(directory, name) for name in _compiled.MODULES}
    (tmp_path / _compiled.MANIFEST).write_text(json.dumps(manifest))
    (tmp_path / "_value.pxd").write_text("cdef class value:\n    pass\n")
    assert _compiled._stale(directory) == {"_value"}


def test_without_a_manifest_every_module_is_stale(tmp_path):
    directory = _package(tmp_path, {"_value": "\n"}, None)
    assert _compiled._stale(directory) == set(_compiled.MODULES)
    (tmp_path / _compiled.MANIFEST).write_text("{not json")
    assert _compiled._stale(directory) == set(_compiled.MODULES)
    (tmp_path / _compiled.MANIFEST).write_text("[1, 2]")
    assert _compiled._stale(directory) == set(_compiled.MODULES)


def test_a_module_without_its_source_is_not_stale(tmp_path):
    sources = {name: "\n" for name in _compiled.MODULES if name != "forward"}
    directory = _package(tmp_path, sources, {})
    assert _compiled._stale(directory) == set(_compiled.MODULES) - {"forward"}


def test_the_finder_hands_out_only_the_named_sources(tmp_path):
    directory = _package(tmp_path, {"_jacobian": "X = 1\n"}, None)
    finder = _compiled._SourceFinder({"_jacobian", "_value"}, directory)
    spec = finder.find_spec("sparsegrad._jacobian")
    assert spec.origin == os.path.join(directory, "_jacobian.py")
    assert finder.find_spec("sparsegrad._value") is None        # (no source there)
    assert finder.find_spec("sparsegrad._ufuncs") is None       # (not named)
    assert finder.find_spec("other._jacobian") is None          # (not the package)
    assert finder.find_spec("sparsegrad._fast._jacobian") is None


def test_an_edited_source_runs_instead_of_its_compiled_module(tmp_path):
    # a copy of the package whose _deferred.py differs from the manifest's hash
    import shutil
    copy = tmp_path / "sparsegrad"
    shutil.copytree(os.path.dirname(sparsegrad.__file__), copy)
    with open(copy / "_deferred.py", "a") as stream:
        stream.write("\nEDITED = True\n")
    code = ("import sys; sys.path.insert(0, %r); import sparsegrad, sparsegrad._deferred as d; "
            "print(d.__file__.endswith('.py'), getattr(d, 'EDITED', False), "
            "sparsegrad.__file__.startswith(%r))" % (str(tmp_path), str(tmp_path)))
    assert _run(code) == "True True True"


def _complex_cast_warning():
    x = forward.seed(np.ones(3)) * (1 + 1j)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x.astype(float)  # the line the warning must name
    return caught[0]


def test_a_warning_names_the_callers_line():
    warning = _complex_cast_warning()
    assert issubclass(warning.category, np.exceptions.ComplexWarning)
    assert warning.filename == __file__
    assert warning.lineno == _complex_cast_warning.__code__.co_firstlineno + 4


def test_a_warning_names_the_callers_line_from_source():
    code = ("import sys; sys.path.insert(0, %r); import test_compiled as t; "
            "w = t._complex_cast_warning(); print(w.filename == t.__file__, "
            "w.lineno - t._complex_cast_warning.__code__.co_firstlineno)"
            % os.path.join(ROOT, "tests"))
    assert _run(code, SPARSEGRAD_SOURCE_MODULES="1") == "True 4"
    assert _run(code) == "True 4"


def test_a_module_no_longer_compiled_runs_from_source(tmp_path):
    import importlib.machinery
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    directory = _package(tmp_path, {"_functions": "\n", "_jacobian": "\n"}, None)
    for name in ("_functions", "_jacobian", "_gone"):
        with open(os.path.join(directory, name + suffix), "wb"):
            pass
    # _jacobian is compiled by the build; _gone has no source to run instead
    assert _compiled._no_longer_compiled(directory) == {"_functions"}
