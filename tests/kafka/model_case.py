"""A drawn reference-model case (``tests/samza_dsl/test_reference_model.Case``) as JSON, so that
a ``samza-dsl run --follow`` process of the consumer group builds the same application as the
test that drew it: ``samza-dsl run tests/kafka/kafka_apps.py:model`` reads the case from the file
``SAMZA_TEST_CASE`` names (``model_app``)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from samza_dsl import AccumulationMode, StreamApplication
from samza_dsl.systems import KafkaSystem, LocalSystem
from tests.samza_dsl.test_reference_model import Case, build


class Named:
    """A system whose streams get physical names of their own (``<id>-<tag>``), so that runs
    on one broker never share a topic."""

    def __init__(self, system: Any, tag: str) -> None:
        self.system = system
        self.tag = tag

    def input(self, sid: str, **kw: Any) -> Any:
        return self.system.input(sid, physical_name=f"{sid}-{self.tag}", **kw)

    def output(self, sid: str, **kw: Any) -> Any:
        return self.system.output(sid, physical_name=f"{sid}-{self.tag}", **kw)


def _plain(value: Any) -> Any:
    if isinstance(value, AccumulationMode):
        return {"mode": value.name}
    if isinstance(value, dict):
        return {"partitions": {str(p): _plain(v) for p, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _back(value: Any) -> Any:
    if isinstance(value, dict) and "mode" in value:
        return AccumulationMode[value["mode"]]
    if isinstance(value, dict):
        return {int(p): [tuple(m) for m in msgs] for p, msgs in value["partitions"].items()}
    if isinstance(value, list):
        return tuple(value)
    return value


def case_to_json(case: Case) -> str:
    return json.dumps({f.name: _plain(getattr(case, f.name)) for f in dataclasses.fields(case)})


def case_from_json(text: str) -> Case:
    return Case(**{k: _back(v) for k, v in json.loads(text).items()})


def app_name(tag: str) -> str:
    """The application's name: its own topics (changelogs, intermediate streams) are its own."""
    return f"model{tag}"


def model_app(bootstrap: str, tag: str, case: Case) -> StreamApplication:
    """The case's application on Kafka at ``bootstrap``, its streams named ``<id>-<tag>``."""
    return build(case, Named(KafkaSystem("kafka", bootstrap_servers=bootstrap), tag),
                 app_name(tag))


def model_local_app(tag: str, case: Case) -> StreamApplication:
    """The case's application on the embedded local system."""
    return build(case, LocalSystem("local"), app_name(tag))


def model_app_from_env(local: bool = False) -> StreamApplication:
    """The application of the case in ``SAMZA_TEST_CASE``: on Kafka at
    ``SAMZA_TEST_BOOTSTRAP``, or (``local``) on the embedded local system."""
    case = case_from_json(Path(os.environ["SAMZA_TEST_CASE"]).read_text())
    tag = os.environ["SAMZA_TEST_TAG"]
    if local:
        return model_local_app(tag, case)
    return model_app(os.environ["SAMZA_TEST_BOOTSTRAP"], tag, case)
