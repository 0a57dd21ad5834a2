"""Shipping an application's code to Spark's executors (``SparkRunner``): the modules of its
functions, by value or as zips on the executors' path, so that hosts that do not share the
driver's file system can import them."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import fields, is_dataclass
from typing import Any

__all__ = ["ship_user_code", "OUR_PACKAGES"]

#: this project's packages: installed on the executors as on the driver, never shipped
OUR_PACKAGES = ("samza_dsl", "planner", "operators", "runtime")


def _user_modules(plan: Any) -> set[str]:
    """Modules of the functions an application's operators and inputs call."""
    found: set[str] = set()
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if depth > 4 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, tuple | list):
            for x in obj:
                visit(x, depth + 1)
            return
        if is_dataclass(obj) and not isinstance(obj, type):
            for f in fields(obj):
                # any dataclass the spec reaches (a user's too), read field by field
                visit(getattr(obj, f.name, None), depth + 1)  # foreign: a user's dataclass
            return
        if callable(obj):
            mod = (getattr(obj, "__module__", None)  # foreign: a user's callable
                   or getattr(type(obj), "__module__", None))  # foreign: a user's class
            if mod:
                found.add(mod)
            closure = getattr(obj, "__closure__", None) or ()  # foreign: a user's function
            for cell in closure:
                with contextlib.suppress(ValueError):
                    visit(cell.cell_contents, depth + 1)

    for spec in plan.app.operators.values() if isinstance(plan.app.operators, dict) \
            else plan.app.operators:
        visit(spec, 0)
    for d in plan.app.inputs.values():
        visit(d.event_time, 0)
    return found


def _importable_by_name(module: Any) -> bool:
    """Whether ``module`` is found by its name on the driver's ``sys.path`` (a module loaded
    from a file under a made-up name is not)."""
    name = module.__name__
    path = getattr(module, "__file__", None)  # foreign: a Python module
    if path is None or name == "__main__":
        return path is None and name != "__main__"
    # look the name up afresh on the path (importlib.util.find_spec would answer from
    # sys.modules, where a module loaded from a file under a made-up name also sits)
    from importlib.machinery import PathFinder

    parent, _, leaf = name.rpartition(".")
    if parent:
        package = sys.modules.get(parent)
        search = getattr(package, "__path__", None)  # foreign: a Python package
        if search is None:
            return False
        spec = PathFinder.find_spec(name, list(search))
    else:
        spec = PathFinder.find_spec(leaf, sys.path)
    origin = getattr(spec, "origin", None)  # foreign: importlib's ModuleSpec
    return origin is not None and os.path.realpath(origin) == os.path.realpath(path)


def _installed(path: str) -> bool:
    """Whether ``path`` lies in the standard library or a site-packages directory: part of an
    installed distribution, which executors have as the driver has (the extras installed)."""
    import site
    import sysconfig

    roots = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib",
                                                       "platlib")}
    roots.update(site.getsitepackages())
    roots.add(site.getusersitepackages())
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(r) + os.sep) for r in roots if r)


_zips: dict[str, str] = {}  # digest -> the zip of those files, made once per driver process


def _module_zip(top: Any) -> str | None:
    """A zip of top-level module or package ``top`` (its ``.py`` files, under its name), for
    executors to import; None when it has no Python source to ship."""
    import hashlib
    import tempfile
    import zipfile

    name = top.__name__
    if hasattr(top, "__path__"):  # foreign: a Python module or package
        files: list[tuple[str, str]] = []
        for root in list(top.__path__)[:1]:
            for here, dirs, names in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
                for f in sorted(names):
                    if f.endswith(".py"):
                        full = os.path.join(here, f)
                        files.append((full, os.path.join(name, os.path.relpath(full, root))))
    else:
        path = getattr(top, "__file__", None)  # foreign: a Python module
        if not path or not path.endswith(".py"):
            return None
        files = [(path, name + ".py")]
    if not files:
        return None
    digest = hashlib.sha1(name.encode())
    for full, arc in files:
        st = os.stat(full)
        digest.update(f"{arc}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    key = digest.hexdigest()[:16]
    made = _zips.get(key)
    if made is not None and os.path.exists(made):
        return made
    target = os.path.join(tempfile.mkdtemp(prefix="samza-dsl-pyfiles-"), f"{name}-{key}.zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for full, arc in files:
            z.write(full, arc)
    _zips[key] = target
    return target


def _add_py_file(sc: Any, path: str) -> None:
    """``sc.addPyFile(path)`` once per context, without putting it on the driver's own path."""
    shipped = sc.__dict__.setdefault("_samza_dsl_pyfiles", set())
    if path in shipped:
        return
    includes = getattr(sc, "_python_includes", None)  # foreign: Spark's SparkContext
    if isinstance(includes, list):
        sc.addFile(path)
        includes.append(os.path.basename(path))
    else:  # pragma: no cover - another PySpark layout
        sc.addPyFile(path)
    shipped.add(path)


def ship_user_code(spark: Any, plan: Any) -> None:
    """Executors get the driver's ``sys.path`` (where hosts share the driver's file system) and
    the modules of the application's functions:

    - a module that cannot be imported by name (a script, a notebook's ``__main__``, a test
      file loaded under a made-up name) goes by value;
    - a module imported by name that is not part of an installed distribution (a package on
      ``PYTHONPATH``, a module next to the working directory found through ``''``) goes as a
      zip of its top-level package, which Spark puts on the executors' path
      (``spark.submit.pyFiles``, ``sc.addPyFile``);
    - our packages, the standard library and installed distributions are imported as they
      are: install the same extras on the executors.

    (A ``msgspec.Struct`` class defined in a module sent by value cannot be rebuilt in an
    executor: define message types in an importable module.)"""
    from pyspark import cloudpickle

    sc = spark.sparkContext
    path = os.pathsep.join(p for p in sys.path if p)
    if sc.environment.get("PYTHONPATH") != path:
        sc.environment["PYTHONPATH"] = path
    for name in sorted(_user_modules(plan)):
        module = sys.modules.get(name)
        top_name = name.split(".")[0]
        if module is None or name == "__main__" or top_name in OUR_PACKAGES \
                or top_name in sys.stdlib_module_names or top_name == "builtins":
            continue
        if not _importable_by_name(module):
            with contextlib.suppress(ValueError):
                cloudpickle.register_pickle_by_value(module)
            continue
        file = getattr(module, "__file__", None)  # foreign: a Python module
        top = sys.modules.get(top_name)
        if file is None or top is None or _installed(file):
            continue
        zipped = _module_zip(top)
        if zipped is not None:
            _add_py_file(sc, zipped)
