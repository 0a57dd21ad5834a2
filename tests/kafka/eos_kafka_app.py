"""The proof job of exactly once on Kafka (``test_kafka_exactly_once.py``), the one of
``tests/runtime/eos_app.py`` on topics: its input ``events`` (``eos-events-<tag>``, 4
partitions) holds ``KV(key, {"p": partition, "o": offset})``.

- ``seen``: one output per input, ``KV(key, [partition, offset])``;
- ``counts``: the input repartitioned by key through an intermediate stream, then each key's
  running count in the table ``counts`` (an LMDB store with a changelog topic), ``KV(key, count)``.

``samza-dsl run tests/kafka/eos_kafka_app.py:app`` builds it from the environment
(``TEST_KAFKA``: the broker, ``TEST_TAG``: the topics' suffix).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))

from eos_app import Count, Seen, key_of  # noqa: E402

__all__ = ["PARTITIONS", "app", "proof_app"]

PARTITIONS = 4
serde = KVSerde(StringSerde(), JsonSerde())


def proof_app(bootstrap: str, tag: str) -> StreamApplication:
    """The proof job on the broker at ``bootstrap``, its topics suffixed ``tag``."""
    app = StreamApplication(f"eos-proof-{tag}", config={"task.commit.ms": 25})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    events = app.input(kafka.input("events", serde=serde, physical_name=f"eos-events-{tag}",
                                   partitions=PARTITIONS))
    seen = app.output(kafka.output("seen", serde=serde, physical_name=f"eos-seen-{tag}",
                                   partitions=PARTITIONS))
    counts = app.output(kafka.output("counts", serde=serde, physical_name=f"eos-counts-{tag}",
                                     partitions=PARTITIONS))
    app.table("counts", serde=serde)
    events.map(Seen(), name="seen").send_to(seen)
    events.partition_by(key_of, name="by-key").map(Count(), name="count").send_to(counts)
    return app


app = proof_app(os.environ["TEST_KAFKA"], os.environ["TEST_TAG"]) \
    if "TEST_KAFKA" in os.environ else None
