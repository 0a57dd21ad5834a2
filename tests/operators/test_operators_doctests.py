"""The docstring examples of operators' modules run and pass (pytest only collects doctests under
tests/ by default, so this keeps them checked in the normal test run)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import operators

MODULES = sorted(["operators"] + [f"operators.{m.name}"
                                  for m in pkgutil.iter_modules(operators.__path__)])
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests_pass(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=FLAGS, verbose=False)
    assert result.failed == 0


def test_every_operator_module_has_an_example() -> None:
    without = [n for n in MODULES if n != "operators.base"
               and doctest.testmod(importlib.import_module(n), optionflags=FLAGS).attempted == 0]
    assert without == []
