"""Side inputs on Kafka (tansu on 127.0.0.1): the table is filled from its side-input topic
before any click is processed, and on a restart it is filled again from the topic's oldest
record (docs/semantics.md, "Bootstrap and priority inputs")."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from kafka_helpers import create_topic, keyed, produce_batched, run

from runtime import LocalRunner
from samza_dsl import KV
from samza_dsl.systems import KafkaSystem

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from test_side_inputs import CLICKS, TABLE, UPDATES, USERS, build, expected, rows  # noqa: E402


def _produce(servers: str, topic: str, messages: list) -> None:
    run(produce_batched(servers, topic, keyed(((m.key, m.value) for m in messages), 2)))


def test_a_side_input_topic_fills_the_table_first_on_every_start(kafka_bootstrap: str,
                                                                  tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    for sid in ("user-updates", "clicks", "out"):
        run(create_topic(kafka_bootstrap, f"{sid}-{tag}", 2))
    # the clicks are written first: only the side input's bootstrap enriches them all
    _produce(kafka_bootstrap, f"clicks-{tag}", CLICKS)
    _produce(kafka_bootstrap, f"user-updates-{tag}", UPDATES)
    app = build(KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap), f"-{tag}",
                name=f"side-{tag}")
    first = LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    try:
        assert rows(first.messages("out")) == expected(CLICKS, TABLE)
    finally:
        first.close()
    clicks = [KV(f"u{i}", 100 + i) for i in range(USERS)]  # and u1 moves, while the job is down
    _produce(kafka_bootstrap, f"user-updates-{tag}", [KV("u1", {"country": "SE"})])
    _produce(kafka_bootstrap, f"clicks-{tag}", clicks)
    second = LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    try:
        out = second.messages("out")
        assert rows(out) == expected(clicks, TABLE | {"u1": "SE"})
    finally:
        second.close()
