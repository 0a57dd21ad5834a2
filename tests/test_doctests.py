"""Every module's docstring examples run and pass, in all four packages."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["samza_dsl", "planner", "operators", "runtime"]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        module = importlib.import_module(pkg)
        out.append(pkg)
        out.extend(m.name for m in pkgutil.walk_packages(module.__path__, prefix=f"{pkg}."))
    return sorted(out)


MODULES = _modules()


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests_pass(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=FLAGS, verbose=False)
    assert result.failed == 0


def test_the_examples_exist():
    # counted, not run again: test_module_doctests_pass runs them (one starts a SparkSession)
    finder = doctest.DocTestFinder()
    examples = sum(len(t.examples) for n in MODULES
                   for t in finder.find(importlib.import_module(n)))
    assert examples >= 30
