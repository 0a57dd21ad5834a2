"""Jobs on Kafka (tansu on 127.0.0.1): bounded inputs end, a second run resumes after its
checkpoint, partition_by goes through a real intermediate topic, and a broker that is not
there gives a clear error in bounded time."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_helpers import (
    consume_all,
    create_topic,
    free_port,
    keyed,
    produce_batched,
    produce_each,
    run,
)

from operators.hashing import partition_for
from runtime import LocalRunner
from runtime.kafka.admin import describe_topics
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import SamzaError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


def _names() -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"app-{tag}", f"words-{tag}", f"lengths-{tag}"


def _length_app(name: str, bootstrap: str, words: str, lengths: str) -> StreamApplication:
    app = StreamApplication(name, config={"task.commit.ms": 200})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    inp = app.input(kafka.input("words", serde=SERDE, physical_name=words))
    out = app.output(kafka.output("lengths", serde=SERDE, physical_name=lengths, partitions=2))
    inp.map(lambda kv: KV(kv.key, len(kv.value["w"])), name="length").send_to(out)
    return app


def _words(start: int, n: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"k{i % 7}", {"w": "x" * (i % 5 + 1)}) for i in range(start, start + n)), 2)


def test_bounded_kafka_input_ends_and_the_next_run_resumes(kafka_bootstrap: str,
                                                         tmp_path: Path) -> None:
    name, words, lengths = _names()
    run(create_topic(kafka_bootstrap, words, 2))
    run(produce_each(kafka_bootstrap, words, _words(0, 30)))
    app = _length_app(name, kafka_bootstrap, words, lengths)
    config = {"job.dir": str(tmp_path / "job")}

    first = LocalRunner(app, config).run()
    got = sorted((m.key, m.value) for m in first.messages("lengths"))
    assert got == sorted((k.decode(), json.loads(v)["w"].__len__()) for _, k, v in _words(0, 30))
    # the output topic was created with the planned count, keyed records in their key's partition
    assert run(describe_topics(kafka_bootstrap, [lengths])) == {lengths: 2}
    for p, records in run(consume_all(kafka_bootstrap, lengths, 2)).items():
        assert all(partition_for(k, 2) == p for _, k, _ in records)

    second = LocalRunner(app, config).run()
    assert second.messages("lengths") == []

    run(produce_each(kafka_bootstrap, words, _words(30, 10)))
    third = LocalRunner(app, config).run()
    assert len(third.messages("lengths")) == 10


def test_partition_by_through_a_real_intermediate_topic(kafka_bootstrap: str,
                                                        tmp_path: Path) -> None:
    name, words, lengths = _names()
    run(create_topic(kafka_bootstrap, words, 2))
    run(produce_each(kafka_bootstrap, words, _words(0, 40)))
    app = StreamApplication(name)
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    inp = app.input(kafka.input("words", serde=SERDE, physical_name=words))
    out = app.output(kafka.output("lengths", serde=SERDE, physical_name=lengths))

    def by_length(kv: KV[str, Any]) -> str:
        return str(len(kv.value["w"]))

    (inp.partition_by(by_length, lambda kv: kv.value["w"], serde=SERDE, name="by-length")
        .map(lambda kv: KV(kv.key, 1), name="one")
        .send_to(out))
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job"),
                               "job.intermediate.stream.partitions": 3}).run()
    counts: dict[str, int] = {}
    for m in runner.messages("lengths"):
        counts[m.key] = counts.get(m.key, 0) + m.value
    assert counts == {str(n): 8 for n in range(1, 6)}
    intermediate = f"{name}-1-partition_by-by-length"
    assert run(describe_topics(kafka_bootstrap, [intermediate])) == {intermediate: 3}


def test_an_unreachable_broker_is_a_clear_error_after_the_unavailable_timeout(
        tmp_path: Path) -> None:
    name, words, lengths = _names()
    app = _length_app(name, f"127.0.0.1:{free_port()}", words, lengths)
    started = time.monotonic()
    with pytest.raises(SamzaError) as err:
        LocalRunner(app, {"job.dir": str(tmp_path / "job"),
                          "job.kafka.unavailable.timeout.ms": 2000}).run()
    assert 2 <= time.monotonic() - started < 15
    assert "127.0.0.1" in str(err.value) and "bootstrap_servers" in str(err.value)
    assert "job.kafka.unavailable.timeout.ms=2000" in str(err.value)


def test_a_missing_input_topic_is_named(kafka_bootstrap: str, tmp_path: Path) -> None:
    name, words, lengths = _names()
    app = _length_app(name, kafka_bootstrap, words, lengths)
    with pytest.raises(SamzaError, match=words):
        LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()


def test_a_mistyped_input_topic_gets_the_closest_topic(kafka_bootstrap: str,
                                                       tmp_path: Path) -> None:
    name, words, lengths = _names()
    run(create_topic(kafka_bootstrap, words, 2))
    typo = words.replace("words", "wrods")
    app = _length_app(name, kafka_bootstrap, typo, lengths)
    with pytest.raises(SamzaError) as err:
        LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    assert f"topic {typo!r} does not exist" in str(err.value)
    assert f"(did you mean {words!r}?)" in str(err.value)


def test_a_bounded_input_written_in_batches_is_read_to_its_last_record(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    name, words, lengths = _names()
    run(create_topic(kafka_bootstrap, words, 2))
    run(produce_batched(kafka_bootstrap, words, _words(0, 50)))
    app = _length_app(name, kafka_bootstrap, words, lengths)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    assert len(runner.messages("lengths")) == 50
