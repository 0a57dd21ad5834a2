"""Every public function, class and method of ``samza_dsl`` and the runners has an example (a
``>>>`` line) in its docstring, which ``tests/test_doctests.py`` runs. A method is shown by its
own docstring's example, or by one of its class's that calls it (``>>> ... .name(``).

The public API is what the API reference documents: ``__all__`` of ``samza_dsl`` and of its
modules for systems, serdes and testing (with the hypothesis strategies and the reference model),
``LocalRunner``, ``TestRunner``/``TestResult``, ``runtime.spark`` (``SparkRunner`` and what it
takes and gives) and ``ExecutionPlan``."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import pytest

MODULES = ["samza_dsl", "samza_dsl.systems", "samza_dsl.serdes", "samza_dsl.testing",
           "samza_dsl.testing.strategies", "samza_dsl.testing.model", "runtime.runner",
           "runtime.spark", "planner.plan"]


def _doc(obj: Any) -> str:
    return inspect.getdoc(getattr(obj, "__wrapped__", obj)) or ""


def _has_example(doc: str) -> bool:
    return any(line.lstrip().startswith(">>>") for line in doc.splitlines())


def _public() -> dict[str, Any]:
    """Qualified name -> every public function and class, and each class's public methods
    (functions, class and static methods defined in it) as (class, name, function)."""
    out: dict[str, Any] = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.ismodule(obj):
                continue
            if not (inspect.isclass(obj) or inspect.isfunction(obj) or callable(obj)):
                continue
            qual = f"{name}.{attr}"
            out[qual] = obj
            if not inspect.isclass(obj):
                continue
            for method, member in vars(obj).items():
                fn = member.__func__ if isinstance(member, staticmethod | classmethod) else member
                if method.startswith("_") or not inspect.isfunction(fn):
                    continue
                out[f"{qual}.{method}"] = (obj, method, fn)
    return out


PUBLIC = _public()


def _shown(entry: Any) -> bool:
    if not isinstance(entry, tuple):
        return _has_example(_doc(entry))
    cls, name, fn = entry
    if _has_example(_doc(fn)):
        return True
    calls = re.compile(rf"\.{re.escape(name)}\(")
    return any(line.lstrip().startswith((">>>", "...")) and calls.search(line.split("#")[0])
               for line in _doc(cls).splitlines())


def test_the_public_api_is_enumerated() -> None:
    for name in ("samza_dsl.StreamApplication", "samza_dsl.testing.TestRunner.add_input",
                 "runtime.runner.LocalRunner.run", "runtime.spark.SparkRunner.reprocess",
                 "planner.plan.ExecutionPlan.explain", "samza_dsl.serdes.KVSerde"):
        assert name in PUBLIC
    assert len(PUBLIC) > 150


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_function_class_and_method_has_an_example(name: str) -> None:
    assert _shown(PUBLIC[name]), (
        f"{name} has no example: add an `Example:` section with a short `>>>` session that "
        f"shows what it does (it runs as a doctest)")
