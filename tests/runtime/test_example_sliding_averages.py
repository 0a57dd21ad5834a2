"""The hopping-window example (examples/sliding_averages.py) gives, on the test runner, the
local system and Spark, the panes its definition gives: per sensor, every 10-second-aligned
minute that holds a reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from example_apps import docstring_failures, load_example

from runtime import LocalRunner
from runtime.spark import SparkRunner
from samza_dsl.testing import TestRunner

example = load_example("sliding_averages")
READINGS = example.sample_input(400, seed=3)


def expected() -> list[dict[str, Any]]:
    """The panes from the definition: a reading at t is in each pane [s, s + 60 s) with s a
    multiple of 10 s and s <= t < s + 60 s."""
    size, hop = 60_000, 10_000
    panes: dict[tuple[str, int], list[float]] = {}
    for r in READINGS:
        t = round(r.value["ts"] * 1000)
        for s in range(t - t % hop, t - size, -hop):
            panes.setdefault((r.key, s), []).append(r.value["celsius"])
    return [{"key": k, "window_start_ms": s, "window_end_ms": s + size, "readings": len(cs),
             "mean": round(sum(round(c * 1000) for c in cs) / len(cs) / 1000, 3),
             "min": min(cs), "max": max(cs)} for (k, s), cs in panes.items()]


def rows(messages: list[Any]) -> list[str]:
    out = []
    for m in messages:
        key, value = (m.key, m.value) if hasattr(m, "key") else (m["key"], m["value"])
        out.append(json.dumps({"key": key, **value}, sort_keys=True))
    return sorted(out)


WANT = rows([{"key": e.pop("key"), "value": e} for e in expected()])


def test_the_examples_docstring() -> None:
    assert docstring_failures(example) == 0


def test_every_pane_once_on_the_test_runner_and_the_local_system(tmp_path: Path) -> None:
    # each reading is in size / hop = 6 panes
    assert sum(json.loads(r)["readings"] for r in WANT) == 6 * len(READINGS)
    runner = TestRunner(example.app).add_input("readings", READINGS)
    assert rows(runner.run().messages("sensor-stats")) == WANT
    local = LocalRunner(example.app, {"job.dir": str(tmp_path)},
                        inputs={"readings": READINGS}).run()
    try:
        assert rows(local.messages("sensor-stats")) == WANT
    finally:
        local.close()


def test_every_pane_once_on_spark(spark: Any) -> None:
    result = SparkRunner(spark).reprocess(example.app, {"readings": READINGS})
    assert rows(result.messages("sensor-stats")) == WANT
