"""Modules that moved into runtime's rooms still import under their old names, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

from runtime import MOVED


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_module_name_gives_the_new_module_with_a_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__ is not None and module.__spec__.name == new


def test_the_local_runner_is_still_importable_from_runtime_local() -> None:
    from runtime.local import LocalRunner
    from runtime.runner import LocalRunner as runner

    assert LocalRunner is runner
