"""The runtime: everything that touches time, I/O and processes.

``from runtime import LocalRunner`` runs an application in this process."""

from __future__ import annotations

from typing import Any

__all__ = ["LocalRunner", "TestRunner"]


def __getattr__(name: str) -> Any:
    import importlib

    if name == "LocalRunner":
        return importlib.import_module("runtime.local").LocalRunner
    if name == "TestRunner":
        return importlib.import_module("runtime.testing").TestRunner
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
