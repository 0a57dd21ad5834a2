"""``job.processing.guarantee=exactly-once`` with ``job.coordinator=kafka`` (tasks that move
between containers) is refused at the start of a job on Kafka, in one line, rather than run as
if it held; with static containers it runs (``test_kafka_exactly_once.py``)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kafka_helpers import create_topic, keyed, produce_each, run

from runtime import LocalRunner
from samza_dsl import KV, ConfigError, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


def test_exactly_once_on_kafka_is_refused_at_start(kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    words = f"words-{tag}"
    run(create_topic(kafka_bootstrap, words, 2))
    run(produce_each(kafka_bootstrap, words, keyed(((f"k{i}", {"w": "x"}) for i in range(5)), 2)))
    app = StreamApplication(f"app-{tag}", config={"task.commit.ms": 200})
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    inp = app.input(kafka.input("words", serde=SERDE, physical_name=words))
    out = app.output(kafka.output("lengths", serde=SERDE, physical_name=f"lengths-{tag}",
                                  partitions=2))
    inp.map(lambda kv: KV(kv.key, 1), name="one").send_to(out)
    started = time.monotonic()
    with pytest.raises(ConfigError) as err:
        # --follow: job.coordinator=kafka by default
        LocalRunner(app, {"job.dir": str(tmp_path / "job"),
                          "job.processing.guarantee": "exactly-once"}, follow=True).run()
    assert time.monotonic() - started < 5
    text = str(err.value)
    assert "\n" not in text
    assert "does not run with job.coordinator=kafka" in text and f"app-{tag}" in text
    # at least once, the same job runs
    LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
