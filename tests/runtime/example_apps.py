"""The example applications (``examples/*.py``) as modules, for the tests that run them.

(Not named conftest: test modules import it.)"""

from __future__ import annotations

import doctest
import importlib.util
import sys
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> Any:
    """``examples/<name>.py``, imported as the module ``example_<name>``."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def docstring_failures(module: Any) -> int:
    """How many of the module's docstring examples fail."""
    return doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed
