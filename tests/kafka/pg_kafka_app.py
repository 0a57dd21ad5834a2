"""The job of ``test_kafka_postgres_crash.py``: a Kafka input into PostgreSQL, run as a process
of its own. Its input ``events`` (``pgk-events-<tag>``, 4 partitions) holds ``KV(key, {"id":
id, "n": n})``: ``id`` numbers the inputs, ``n`` the inputs of the key (1, 2, ...), each key
in its murmur2 partition.

- ``event-rows``: each kept input (``id % 10 != 9``) a row ``(id, k)`` of table ``events``,
  plain inserts with no key (a row written twice would show);
- ``latest``: every input repartitioned by key through an intermediate stream (3 partitions,
  against the input's 4), then upserted into table ``latest`` by ``k``: ``(k, n, id)``, the
  key's last input winning.

``samza-dsl run tests/kafka/pg_kafka_app.py:app`` builds it from the environment
(``TEST_KAFKA``: the broker, ``TEST_TAG``: the topics' suffix, ``TEST_PG``: the database).
``TEST_PG_NO_SKIP=1`` switches the output's skip of replayed positions off (its ``recover``
still reads the positions, but nothing is skipped): the test's check must then find rows
written twice.
"""

from __future__ import annotations

import os
from typing import Any

from samza_dsl import KV, StreamApplication
from samza_dsl.postgres import PostgresSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

__all__ = ["PARTITIONS", "INTERMEDIATE_PARTITIONS", "app", "pg_app", "kept"]

PARTITIONS = 4
INTERMEDIATE_PARTITIONS = 3
serde = KVSerde(StringSerde(), JsonSerde())


def kept(event_id: int) -> bool:
    """Whether the input of ``event_id`` becomes a row of ``events``."""
    return event_id % 10 != 9


def _by_key(kv: KV[str, Any]) -> str:
    return kv.key


def _value(kv: KV[str, Any]) -> Any:
    return kv.value


def pg_app(bootstrap: str, tag: str, conninfo: str) -> StreamApplication:
    """The job on the broker at ``bootstrap`` and the database ``conninfo``, its topics
    suffixed ``tag``."""
    app = StreamApplication(f"pg-kafka-{tag}", config={
        "task.commit.ms": 50, "job.intermediate.stream.partitions": INTERMEDIATE_PARTITIONS})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    events = app.input(kafka.input("events", serde=serde, physical_name=f"pgk-events-{tag}",
                                   partitions=PARTITIONS))
    pg = PostgresSystem("pg", conninfo=conninfo)
    rows = app.output(pg.output_table("event-rows", table="events",
                                      columns={"id": "id", "k": "key"}, batch_rows=40))
    latest = app.output(pg.output_table("latest", table="latest",
                                        columns={"k": "key", "n": "n", "id": "id"},
                                        key=["k"], upsert=True, batch_rows=40))
    events.filter(lambda kv: kept(kv.value["id"]), name="keep").send_to(rows)
    events.partition_by(_by_key, _value, serde=serde, name="by-key").send_to(latest)
    return app


def _no_skip() -> None:
    """The PostgreSQL output without its skip of the positions the database holds."""
    from runtime.connectors.postgres import PostgresSink
    from samza_dsl.connectors import Replays

    recover = PostgresSink.recover

    def recover_without_skip(self: PostgresSink, committed: Any) -> None:
        recover(self, committed)
        self.replays = Replays()  # the positions read back, but none to skip

    PostgresSink.recover = recover_without_skip  # type: ignore[method-assign]


if os.environ.get("TEST_PG_NO_SKIP") == "1":
    _no_skip()

app = pg_app(os.environ["TEST_KAFKA"], os.environ["TEST_TAG"], os.environ["TEST_PG"]) \
    if "TEST_PG" in os.environ else None
