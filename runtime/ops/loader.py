"""Loads ``module_or_file.py:attr`` into a ``StreamApplication``.

Errors in the reference itself (no such file, module or attribute; an attribute that is not an
application) are ``SamzaError``s that say what to write instead. Errors raised while the user's
module runs keep their traceback, which points at the user's code.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from typing import Any

from samza_dsl import StreamApplication
from samza_dsl.errors import SamzaError

__all__ = ["load_app"]

_FORM = "write APP as path/to/file.py:ATTR or package.module:ATTR"


def load_app(ref: str) -> StreamApplication:
    """``examples/page_view_counts.py:app`` or ``mypkg.jobs:app``. The attribute may be a
    StreamApplication or a function of no arguments that returns one (default attr: ``app``).
    Modules are looked up from the current directory first, as ``python -m`` would."""
    target, _, attr = ref.partition(":")
    attr = attr or "app"
    if not target:
        raise SamzaError(f"no application in {ref!r}: {_FORM}")
    if target.endswith(".py") or os.sep in target or "/" in target or os.path.exists(target):
        module = _load_file(target)
    else:
        module = _import_module(target)
    if not hasattr(module, attr):  # foreign: the user's module
        apps = sorted(k for k, v in vars(module).items() if isinstance(v, StreamApplication))
        hint = f"; its applications: {', '.join(apps)}" if apps else ""
        raise SamzaError(f"{target!r} has no attribute {attr!r}{hint}; {_FORM}")
    obj: Any = getattr(module, attr)  # foreign: the user's module
    if callable(obj) and not isinstance(obj, StreamApplication):
        try:
            inspect.signature(obj).bind()
        except TypeError:
            raise SamzaError(f"{ref!r} is a function that needs arguments; name a "
                             f"StreamApplication or a function of no arguments") from None
        except ValueError:  # no signature to look at (some builtins): just try the call
            pass
        obj = obj()
    if not isinstance(obj, StreamApplication):
        raise SamzaError(f"{ref!r} is a {type(obj).__name__}, not a StreamApplication")
    return obj


def _load_file(target: str) -> Any:
    path = os.path.abspath(target)
    if os.path.isdir(path):
        raise SamzaError(f"application file {target!r} is a directory; name a .py file in it, "
                         f"e.g. {os.path.join(target, 'app.py')}:app")
    if not os.path.exists(path):
        raise SamzaError(f"application file {target!r} does not exist (looked in {os.getcwd()})")
    name = "_samza_app_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SamzaError(f"cannot import {target!r} as a Python file; {_FORM}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # the file's own directory goes first, so the file can import its neighbours
    directory = os.path.dirname(path)
    sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(directory)
    return module


def _import_module(target: str) -> Any:
    # console scripts do not put the current directory on sys.path; `python -m` does
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is not None and target != exc.name and not target.startswith(exc.name + "."):
            raise  # the application module exists but one of its imports is missing
        raise SamzaError(f"cannot import application module {target!r}: {exc} (looked in "
                         f"{cwd} and the installed packages); {_FORM}") from exc
    finally:
        if added:
            sys.path.remove(cwd)


def load_module(target: str) -> Any:
    """The module an APP reference names (already loaded by ``load_app`` or loaded now)."""
    if target.endswith(".py") or os.sep in target or "/" in target or os.path.exists(target):
        path = os.path.abspath(target)
        name = "_samza_app_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
        loaded = sys.modules.get(name)
        if loaded is not None and os.path.abspath(
                getattr(loaded, "__file__", "")) == path:  # foreign: the user's module
            return loaded
        return _load_file(target)
    return _import_module(target)
