"""The docstring examples of samza_dsl's modules run and pass (pytest only collects doctests under
tests/ by default, so this keeps them checked in the normal test run)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import samza_dsl

MODULES = sorted(["samza_dsl"] + [f"samza_dsl.{m.name}"
                                  for m in pkgutil.iter_modules(samza_dsl.__path__)])
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests_pass(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=FLAGS, verbose=False)
    assert result.failed == 0


def test_the_examples_exist():
    attempted = sum(doctest.testmod(importlib.import_module(n), optionflags=FLAGS).attempted
                    for n in MODULES)
    assert attempted >= 20
