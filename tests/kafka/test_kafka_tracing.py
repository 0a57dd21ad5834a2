"""Tracing on Kafka (docs/tracing.md): a sampled input message's trace goes on through the
``partition_by`` topic, from the origin each intermediate record carries in its headers."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import opentelemetry.sdk  # noqa: F401  (the otel extra: missing, this fails)
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka_helpers import consume_all, create_topic, keyed, produce_each, run

from runtime import LocalRunner
from runtime.host.tracing import memory_exporter, message_ids, sampled, threshold  # noqa: E402
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


def test_a_sampled_message_has_one_trace_through_the_partition_by_topic(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    words, out_topic = f"tr-words-{tag}", f"tr-out-{tag}"
    run(create_topic(kafka_bootstrap, words, 2))
    items = [(f"k{i % 5}", {"n": i}) for i in range(200)]
    placed = keyed(items, 2)
    run(produce_each(kafka_bootstrap, words, placed))
    app = StreamApplication(f"tr-{tag}", config={"task.commit.ms": 100})
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    out = app.output(kafka.output("out", serde=SERDE, physical_name=out_topic, partitions=2))
    (app.input(kafka.input("words", serde=SERDE, physical_name=words))
        .partition_by(lambda kv: f"g{kv.value['n'] % 4}", lambda kv: kv.value["n"],
                      serde=SERDE, name="by-group")
        .send_to(out))
    memory = memory_exporter()
    memory.clear()
    LocalRunner(app, {"job.dir": str(tmp_path / "job"), "job.intermediate.stream.partitions": 2,
                      "tracing.enabled": True, "tracing.exporter": "memory",
                      "tracing.sample.ratio": "0.1"}).run()
    got = run(consume_all(kafka_bootstrap, out_topic, 2))
    assert sorted(json.loads(v) for recs in got.values() for _, _, v in recs) == list(range(200))

    spans = [s for s in memory.get_finished_spans() if s.name == "samza.message"]
    counts = {p: sum(1 for q, *_ in placed if q == p) for p in (0, 1)}
    bound = threshold(0.1)
    wanted = [(p, o) for p, n in counts.items() for o in range(n) if sampled("words", p, o, bound)]
    assert wanted
    for p, o in wanted:
        trace_id, span_id = message_ids("words", p, o)
        trace = [s for s in spans if s.context.trace_id == trace_id]
        (root,) = [s for s in trace if s.parent is None]
        assert root.attributes["samza.offset"] == o and root.context.span_id == span_id
        (hop,) = [s for s in trace if s.parent is not None]
        assert hop.parent.span_id == span_id and hop.attributes["samza.stream"] != "words"


async def _produce_with_headers(bootstrap: str, topic: str,
                                records: list[tuple[int, bytes, bytes, list[Any]]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await producer.start()
    try:
        for partition, key, value, headers in records:
            await producer.send_and_wait(topic, value=value, key=key, partition=partition,
                                         headers=headers)
    finally:
        await producer.stop()


async def _headers_of(bootstrap: str, topic: str, n: int) -> dict[int, list[Any]]:
    """value (an int) -> the headers of its record, for the ``n`` records of ``topic``."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", isolation_level="read_committed")
    await consumer.start()
    got: dict[int, list[Any]] = {}
    try:
        async with asyncio.timeout(20):
            while len(got) < n:
                for recs in (await consumer.getmany(timeout_ms=500)).values():
                    for r in recs:
                        got[json.loads(r.value)] = list(r.headers)
    finally:
        await consumer.stop()
    return got


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_outputs_carry_the_traceparent_and_a_traceparent_read_is_continued(
        kafka_bootstrap: str, tmp_path: Path, guarantee: str) -> None:
    tag = uuid.uuid4().hex[:8]
    words, out_topic = f"tp-words-{tag}", f"tp-out-{tag}"
    run(create_topic(kafka_bootstrap, words, 1))
    # a consumer upstream traced record 7 (sampled), and record 8 (not sampled: flags 00)
    upstream = (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)
    header = f"00-{upstream[0]:032x}-{upstream[1]:016x}-01".encode()
    records = [(0, f"k{i}".encode(), json.dumps({"n": i}).encode(),
                [("traceparent", header if i == 7 else header[:-2] + b"00")] if i in (7, 8)
                else []) for i in range(60)]
    run(_produce_with_headers(kafka_bootstrap, words, records))
    app = StreamApplication(f"tp-{tag}", config={"task.commit.ms": 100})
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    out = app.output(kafka.output("out", serde=SERDE, physical_name=out_topic, partitions=1))
    (app.input(kafka.input("words", serde=SERDE, physical_name=words))
        .map(lambda kv: KV(kv.key, kv.value["n"]), name="n")
        .send_to(out))
    memory = memory_exporter()
    memory.clear()
    LocalRunner(app, {"job.dir": str(tmp_path / "job"), "job.processing.guarantee": guarantee,
                      "tracing.enabled": True, "tracing.exporter": "memory",
                      "tracing.sample.ratio": "0.1"}).run()
    heads = run(_headers_of(kafka_bootstrap, out_topic, 60))
    spans = {(s.attributes["samza.offset"]): s for s in memory.get_finished_spans()
             if s.name == "samza.message"}
    bound = threshold(0.1)
    wanted = {o for o in range(60) if sampled("words", 0, o, bound)} - {7, 8}
    assert wanted and set(spans) == wanted | {7}
    # record 7 continues the upstream trace: its span is a child of the upstream span
    seven = spans[7]
    assert (seven.context.trace_id, seven.parent.span_id) == upstream
    for o in range(60):
        tps = [v for k, v in heads[o] if k == "traceparent"]
        if o in spans:  # the output of a traced message names the message's span
            ctx = spans[o].context
            assert tps == [f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01".encode()]
        else:  # no header on the records of the others
            assert tps == [], o
