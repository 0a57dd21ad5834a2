"""Testing helpers: ``TestRunner`` (in-memory runs), ``strategies`` (hypothesis strategies) and
``model`` (a reference model of event-time windows and joins, docs/semantics.md)."""

from __future__ import annotations

from typing import Any

__all__ = ["TestRunner", "TestResult", "strategies", "model"]


def __getattr__(name: str) -> Any:
    # samza_dsl is the API layer: the runtime is imported only when asked for
    if name in ("TestRunner", "TestResult"):
        from runtime import testing

        return getattr(testing, name)
    if name in ("strategies", "model"):
        import importlib

        return importlib.import_module(f"samza_dsl.testing.{name}")
    raise AttributeError(f"module 'samza_dsl.testing' has no attribute {name!r}")
