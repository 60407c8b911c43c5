"""The documentation stays true: generated page up to date, examples run, links resolve."""
import importlib.util
import pathlib
import re

import numpy as np
import pytest

from sparsegrad import _functions, _ufunc_rules as rules

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md"] + sorted(DOCS.glob("*.md"))


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location("generate_supported",
                                                  DOCS / "generate_supported.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def supported():
    return (DOCS / "supported.md").read_text()


def test_supported_page_is_up_to_date(generator, supported):
    assert generator.generate() == supported, (
        "docs/supported.md is out of date: run python docs/generate_supported.py")


def test_generator_check_mode(generator):
    assert generator.main(["--check"]) == 0


@pytest.mark.parametrize("table", ["DERIVATIVES", "SELECTIONS", "PIECEWISE_CONSTANT",
                                   "PREDICATES", "LINEAR_ALGEBRA", "UNSUPPORTED"])
def test_every_ufunc_of_the_rule_tables_is_listed(generator, supported, table):
    for ufunc in getattr(rules, table):
        assert "`%s`" % generator.public_names(ufunc)[0] in supported, ufunc


def test_every_function_of_the_table_is_listed(generator, supported):
    for function in list(_functions.FUNCTIONS) + list(_functions.CREATION):
        names = generator.public_names(function)
        if names[0].startswith("numpy._core"):  # internal ufunc form of numpy.clip
            assert "`numpy.%s`" % function.__name__ in supported
        else:
            assert "`%s`" % names[0] in supported, function


def test_aliases_are_named():
    spec = importlib.util.spec_from_file_location("g", DOCS / "generate_supported.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.public_names(np.absolute) == ["numpy.absolute", "numpy.abs"]
    assert module.public_names(np.linalg.norm) == ["numpy.linalg.norm"]


def _fenced_blocks(text):
    """``(language, body)`` of every fenced code block of a markdown text."""
    blocks, language, body = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if language is None:
                language, body = line[3:].strip(), []
            else:
                blocks.append((language, "\n".join(body) + "\n"))
                language = None
        elif language is not None:
            body.append(line)
    return blocks


def _python_blocks(page):
    return [body for language, body in _fenced_blocks(page.read_text())
            if language == "python"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_examples_in_the_docs_run(page):
    for block in _python_blocks(page):
        exec(compile(block, str(page), "exec"), {})


def test_readme_has_python_examples():
    assert _python_blocks(ROOT / "README.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), "%s links to missing %s" % (page.name, target)


def _commands(page_text):
    return [body.strip() for language, body in _fenced_blocks(page_text) if not language]


def test_readme_gives_the_two_commands():
    commands = _commands((ROOT / "README.md").read_text())
    assert "python -m pip install . && python examples/pn_junction.py" in commands
    assert any("python -m pytest" in command for command in commands)


def test_readme_test_command_is_what_ci_runs():
    ci = ROOT / ".ci" / "run"
    if not ci.exists():
        pytest.skip(".ci/run is not in this checkout")
    script = ci.read_text()
    commands = _commands((ROOT / "README.md").read_text())
    test_command = [c for c in commands if "python -m pytest" in c]
    assert len(test_command) == 1
    assert test_command[0] in script
    assert "SPARSEGRAD_PURE_PYTHON=1" in script


def _modules():
    import pkgutil
    import sparsegrad
    return sorted(info.name for info in pkgutil.walk_packages(sparsegrad.__path__,
                                                               "sparsegrad.")
                  if info.name not in ("sparsegrad._fast._kernels", "sparsegrad._fast._pool"))


@pytest.mark.parametrize("name", _modules())
def test_every_module_docstring_example_runs_as_written(name):
    # exactly as `pytest --doctest-modules sparsegrad` reads them (no whitespace
    # normalisation): the printed results are numpy's own
    import doctest
    import importlib
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, verbose=False, report=True)
    assert failures == 0, name
