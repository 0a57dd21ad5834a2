"""Loads ``module_or_file.py:attr`` into a ``StreamApplication``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

from samza_dsl import StreamApplication
from samza_dsl.errors import SamzaError

__all__ = ["load_app"]


def load_app(ref: str) -> StreamApplication:
    """``examples/page_view_counts.py:app`` or ``mypkg.jobs:app``. The attribute may be a
    StreamApplication or a function of no arguments that returns one (default attr: ``app``)."""
    target, _, attr = ref.partition(":")
    attr = attr or "app"
    if target.endswith(".py") or os.sep in target or os.path.exists(target):
        path = os.path.abspath(target)
        if not os.path.exists(path):
            raise SamzaError(f"application file {target!r} does not exist")
        name = "_samza_app_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SamzaError(f"cannot import {target!r} as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, os.path.dirname(path))
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(os.path.dirname(path))
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise SamzaError(f"cannot import application module {target!r}: {exc}") from exc
    if not hasattr(module, attr):
        raise SamzaError(f"{target!r} has no attribute {attr!r}; name it as FILE.py:ATTR")
    obj: Any = getattr(module, attr)
    if callable(obj) and not isinstance(obj, StreamApplication):
        obj = obj()
    if not isinstance(obj, StreamApplication):
        raise SamzaError(f"{ref!r} is a {type(obj).__name__}, not a StreamApplication")
    return obj
