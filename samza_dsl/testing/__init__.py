"""Testing helpers: ``TestRunner`` (in-memory runs) and ``strategies`` (hypothesis strategies)."""

from __future__ import annotations

from typing import Any

__all__ = ["TestRunner", "TestResult", "strategies"]


def __getattr__(name: str) -> Any:
    # samza_dsl is the API layer: the runtime is imported only when asked for
    if name in ("TestRunner", "TestResult"):
        from runtime import testing

        return getattr(testing, name)
    if name == "strategies":
        import importlib

        return importlib.import_module("samza_dsl.testing.strategies")
    raise AttributeError(f"module 'samza_dsl.testing' has no attribute {name!r}")
