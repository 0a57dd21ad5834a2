"""Tracing on Kafka (docs/tracing.md): a sampled input message's trace goes on through the
``partition_by`` topic, from the origin each intermediate record carries in its headers."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import opentelemetry.sdk  # noqa: F401  (the otel extra: missing, this fails)
from kafka_helpers import consume_all, create_topic, keyed, produce_each, run

from runtime import LocalRunner
from runtime.host.tracing import memory_exporter, message_ids, sampled, threshold  # noqa: E402
from samza_dsl import StreamApplication
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
