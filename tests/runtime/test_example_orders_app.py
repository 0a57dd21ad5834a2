"""The orders example (``examples/orders_to_postgres_and_iceberg/orders.py``) without a broker or
a database: its docstring examples pass, its ``orders.jsonl`` is its ``sample_input(240)``, and
its plan is the one README.md describes (run end to end by
``tests/kafka/test_example_orders.py``)."""

from __future__ import annotations

import doctest
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from samza_dsl import KV

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders_to_postgres_and_iceberg"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("example_orders", EXAMPLE / "orders.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_docstring_examples_pass() -> None:
    result = doctest.testmod(_module(), optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5 and result.failed == 0


def test_the_sample_file_is_the_sample_input() -> None:
    orders = _module()
    lines = (EXAMPLE / "orders.jsonl").read_text().splitlines()
    assert [KV(d["key"], d["value"]) for d in map(json.loads, lines)] == orders.sample_input(240)
    totals = orders.expected_totals(orders.sample_input(240))
    assert len(totals) == 104 and sum(n for n, _ in totals.values()) == 240


def test_the_plan_repartitions_and_windows_exactly_once() -> None:
    app = _module().build_app("127.0.0.1:9092", "dbname=orders", "lake")  # nothing connects
    plan = app.plan()
    assert plan.config["job.processing.guarantee"] == "exactly-once"
    kinds = {sid: s.kind for sid, s in plan.streams.items()}
    assert kinds == {"orders": "input", "totals-postgres": "output",
                     "totals-iceberg": "output",
                     "order-totals-1-partition_by-by-customer": "intermediate"}
    assert len(plan.stages) == 2
