"""A window's late messages on Kafka (tansu on 127.0.0.1): counted, and written through the job's
``late_to`` intermediate topic to an output topic, as on the in-memory runner."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

from kafka_helpers import consume_all, create_topic, produce_each, run

from runtime import LocalRunner
from runtime.kafka.admin import describe_topics
from samza_dsl.systems import KafkaSystem

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from test_late_to import EXPECTED_LATE, INPUT, late_intermediate_app  # noqa: E402


def test_late_to_through_an_intermediate_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    topics = {"in": f"in-{tag}", "counts": f"counts-{tag}", "late": f"late-{tag}"}
    run(create_topic(kafka_bootstrap, topics["in"], 2))
    run(produce_each(kafka_bootstrap, topics["in"],
                     [(p, kv.key.encode(), json.dumps(kv.value).encode())
                      for p, msgs in INPUT.items() for kv in msgs]))
    name = f"late-{tag}"
    app = late_intermediate_app(KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap), name,
                                topics)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    assert sorted(runner.messages("late"), key=lambda kv: (kv.key, kv.value[3])) == EXPECTED_LATE
    assert runner.late_counts == {f"{name}-1-window-w": {"in": 3}}
    # the late messages crossed a real topic, the window's late_to intermediate stream
    late_topic = f"{name}-1-late-late-views"
    assert run(describe_topics(kafka_bootstrap, [late_topic])) == {late_topic: 2}
    records = run(consume_all(kafka_bootstrap, late_topic, 2))
    assert sum(1 for recs in records.values() for _, k, v in recs if v) == 3
    n = run(describe_topics(kafka_bootstrap, [topics["late"]]))[topics["late"]]
    assert sum(len(recs) for recs in run(consume_all(kafka_bootstrap, topics["late"], n)).values()
               ) == 3
