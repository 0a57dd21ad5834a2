"""The side-input example (examples/currency_conversion.py): every payment is converted with the
latest rate of its currency, on the test runner, the local system and Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from example_apps import docstring_failures, load_example

from runtime import LocalRunner
from runtime.spark import SparkRunner
from samza_dsl.testing import TestRunner

example = load_example("currency_conversion")
INPUTS = example.sample_input(300, seed=2)
# gold (XAU) was withdrawn: its payments have no rate
WANT = sorted((p.key, p.value["id"], None if p.key == "XAU"
               else round(p.value["amount"] / example.RATES[p.key], 2))
              for p in INPUTS["payments"])


def rows(out: list[Any]) -> list[Any]:
    return sorted((m.key, m.value["id"], m.value["eur"]) for m in out)


def test_the_examples_docstring() -> None:
    assert docstring_failures(example) == 0


def test_every_payment_is_converted_in_memory_and_on_the_local_system(tmp_path: Path) -> None:
    runner = TestRunner(example.app)
    for sid, msgs in INPUTS.items():
        runner.add_input(sid, msgs)
    assert rows(runner.run().messages("payments-eur")) == WANT
    local = LocalRunner(example.app, {"job.dir": str(tmp_path)}, inputs=INPUTS).run()
    try:
        assert rows(local.messages("payments-eur")) == WANT
    finally:
        local.close()


def test_every_payment_is_converted_on_spark(spark: Any) -> None:
    result = SparkRunner(spark).reprocess(example.app, INPUTS)
    assert rows(result.messages("payments-eur")) == WANT
