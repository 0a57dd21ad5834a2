"""One application on TestRunner and on the embedded local system, for tests that hold the two to
one answer: the same output, or the same one-line error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import LocalRunner
from runtime.testing import TestRunner
from samza_dsl.errors import SamzaError
from samza_dsl.systems import LocalSystem, MemorySystem

#: "test": TestRunner over a MemorySystem; "local": LocalRunner over a LocalSystem
RUNNERS = ["test", "local"]


def run_on(runner: str, build: Any, inputs: dict[str, Any], tmp_path: Path,
           config: dict[str, Any] | None = None) -> list[Any]:
    """The output ``out`` of ``build(system)``'s application on ``runner``, with ``config``."""
    cfg = dict(config or {})
    if runner == "test":
        test = TestRunner(build(MemorySystem()), config=cfg)
        for sid, msgs in inputs.items():
            test.add_input(sid, msgs)
        return test.run(timeout=120).messages("out")
    local = LocalRunner(build(LocalSystem("local")), {"job.dir": str(tmp_path / "job"), **cfg},
                        inputs=inputs)
    try:
        local.run()
        return local.messages("out")
    finally:
        local.close()


def failure_on(runner: str, build: Any, inputs: dict[str, Any], tmp_path: Path,
               config: dict[str, Any] | None = None,
               error: type[SamzaError] = SamzaError) -> Any:
    """The ``error`` the run of ``run_on`` fails with, checked to be one line."""
    with pytest.raises(error) as info:
        run_on(runner, build, inputs, tmp_path, config)
    assert "\n" not in str(info.value)
    return info.value
