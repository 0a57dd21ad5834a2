"""Tracing through the OpenTelemetry SDK (``runtime.host.tracing``, docs/tracing.md): a span per
batch a task is given and one per sampled message, sampled by input position at the configured
ratio, sent to the SDK's in-memory exporter; off, nothing is traced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import opentelemetry.sdk  # noqa: F401  (the otel extra: missing, this fails)
import pytest

from runtime import LocalRunner  # noqa: E402
from runtime.host.tracing import memory_exporter, message_ids, sampled, threshold  # noqa: E402
from samza_dsl import KV, CacheSpec, StreamApplication  # noqa: E402
from samza_dsl.errors import ConfigError  # noqa: E402
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde  # noqa: E402
from samza_dsl.systems import LocalSystem  # noqa: E402
from samza_dsl.testing.kv_service import HttpKV, KVService  # noqa: E402

SERDE = KVSerde(StringSerde(), JsonSerde())
INPUT = {0: [KV(f"k{i % 5}", i) for i in range(300)], 1: [KV(f"j{i % 7}", i) for i in range(200)]}


def app_for() -> StreamApplication:
    system = LocalSystem("local")
    app = StreamApplication("traced")
    (app.input(system.input("in", serde=SERDE, partitions=2))
        .partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=SERDE, name="by-key")
        .map(lambda kv: KV(kv.key, kv.value + 1), name="plus")
        .send_to(app.output(system.output("out", serde=SERDE, partitions=2))))
    return app


def run(config: dict[str, Any]) -> list[Any]:
    memory = memory_exporter()
    memory.clear()
    with tempfile.TemporaryDirectory() as tmp:
        got = LocalRunner(app_for(), {"job.dir": tmp, **config}, inputs={"in": INPUT}).run()
        try:
            outs = got.partitions("out")
        finally:
            got.close()
    assert sorted(kv.value for kvs in outs.values() for kv in kvs) == sorted(
        kv.value + 1 for kvs in INPUT.values() for kv in kvs)
    return list(memory.get_finished_spans())


def test_a_span_per_batch_names_task_stream_partition_and_offsets() -> None:
    spans = run({"tracing.enabled": True, "tracing.exporter": "memory",
                 "tracing.sample.ratio": 0})
    batches = [s for s in spans if s.name == "samza.batch"]
    assert batches and all(s.name == "samza.batch" for s in spans)
    read: dict[tuple[str, int], int] = {}
    for s in batches:
        a = s.attributes
        assert a["samza.offset.last"] - a["samza.offset.first"] + 1 == a["samza.count"]
        assert a["samza.task"].startswith("Partition ")
        key = (a["samza.stream"], a["samza.partition"])
        read[key] = read.get(key, 0) + a["samza.count"]
    # every input message came in one batch span, and so did every intermediate record
    assert read[("in", 0)] >= 300 and read[("in", 1)] >= 200
    assert sum(n for (stream, _), n in read.items() if stream != "in") >= 500


def test_messages_are_sampled_by_their_input_position_at_the_ratio() -> None:
    spans = run({"tracing.enabled": True, "tracing.exporter": "memory",
                 "tracing.sample.ratio": "0.1"})
    messages = [s for s in spans if s.name == "samza.message"]
    inputs = {(s.attributes["samza.partition"], s.attributes["samza.offset"])
              for s in messages if s.attributes["samza.stream"] == "in"}
    bound = threshold(0.1)
    want = {(p, o) for p, kvs in INPUT.items() for o in range(len(kvs))
            if sampled("in", p, o, bound)}
    assert inputs == want
    assert 25 <= len(want) <= 75  # a tenth of 500, give or take
    by_id = {s.context.span_id: s for s in spans}
    for s in messages:  # each one links to its batch's span
        (link,) = s.links
        batch = by_id[link.context.span_id]
        assert batch.name == "samza.batch"
        a = batch.attributes
        assert a["samza.offset.first"] <= s.attributes["samza.offset"] <= a["samza.offset.last"]


def test_one_trace_goes_from_an_input_message_through_partition_by() -> None:
    spans = run({"tracing.enabled": True, "tracing.exporter": "memory",
                 "tracing.sample.ratio": "0.05"})
    messages = [s for s in spans if s.name == "samza.message"]
    bound = threshold(0.05)
    sampled_inputs = [(p, o) for p, kvs in INPUT.items() for o in range(len(kvs))
                      if sampled("in", p, o, bound)]
    assert sampled_inputs
    for p, o in sampled_inputs:
        trace_id, span_id = message_ids("in", p, o)
        trace = [s for s in messages if s.context.trace_id == trace_id]
        (root,) = [s for s in trace if s.parent is None]
        assert (root.attributes["samza.stream"], root.attributes["samza.partition"],
                root.attributes["samza.offset"], root.context.span_id) == ("in", p, o, span_id)
        # the record partition_by wrote for it, read by the task of its key's partition
        (hop,) = [s for s in trace if s.parent is not None]
        assert hop.parent.span_id == span_id
        assert hop.attributes["samza.stream"] != "in"


def test_tracing_off_makes_no_spans() -> None:
    assert run({"tracing.exporter": "memory", "tracing.sample.ratio": 1}) == []


def test_a_ratio_out_of_range_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"tracing.sample.ratio='1.5' is not allowed: it must "
                                          r"be a number from 0 to 1"):
        run({"tracing.enabled": True, "tracing.sample.ratio": "1.5"})


def test_spans_and_metrics_reach_a_real_otlp_http_collector_process(tmp_path: Any) -> None:
    got = tmp_path / "received.jsonl"
    receiver = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "otlp_receiver.py"), str(got)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        run({"tracing.enabled": True, "tracing.exporter": "otlp",
             "tracing.otlp.endpoint": f"http://127.0.0.1:{port}", "tracing.sample.ratio": "0.05",
             "metrics.reporters": "otel"})
    finally:
        receiver.terminate()
        receiver.wait(timeout=30)
    rows = [json.loads(line) for line in got.read_text().splitlines()]
    spans = [r for r in rows if r["kind"] == "span"]
    assert {r["name"] for r in spans} == {"samza.batch", "samza.message"}
    # the otel metrics reporter sent the registry's numbers too
    names = {r["name"] for r in rows if r["kind"] == "metric"}
    assert {"samza.task.messages-actually-processed", "samza.container.process-envelopes",
            "samza.task.lag"} <= names, sorted(names)
    bound = threshold(0.05)
    for p, kvs in INPUT.items():  # each sampled input message's trace, and its hop
        for o in range(len(kvs)):
            if sampled("in", p, o, bound):
                trace_id, span_id = message_ids("in", p, o)
                trace = [r for r in spans if r["trace_id"] == f"{trace_id:032x}"]
                assert sorted(r["parent"] for r in trace) == ["", f"{span_id:016x}"]


def test_an_inputs_end_is_no_message_and_is_never_sampled() -> None:
    # at ratio 1 every message is sampled: the spans of the input are its messages' positions,
    # not the end record after them
    spans = run({"tracing.enabled": True, "tracing.exporter": "memory",
                 "tracing.sample.ratio": 1})
    inputs = sorted((s.attributes["samza.partition"], s.attributes["samza.offset"])
                    for s in spans if s.name == "samza.message"
                    and s.attributes["samza.stream"] == "in")
    assert inputs == [(p, o) for p, kvs in INPUT.items() for o in range(len(kvs))]


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_one_trace_goes_on_through_two_partition_by_hops(guarantee: str) -> None:
    system = LocalSystem("local")
    app = StreamApplication("traced2")
    (app.input(system.input("in", serde=SERDE, partitions=2))
        .partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=SERDE, name="by-key")
        .partition_by(lambda kv: f"v{kv.value % 3}", lambda kv: kv.value, serde=SERDE,
                      name="by-value")
        .send_to(app.output(system.output("out", serde=SERDE, partitions=2))))
    memory = memory_exporter()
    memory.clear()
    with tempfile.TemporaryDirectory() as tmp:
        LocalRunner(app, {"job.dir": tmp, "tracing.enabled": True, "tracing.exporter": "memory",
                          "tracing.sample.ratio": "0.05", "job.processing.guarantee": guarantee},
                    inputs={"in": INPUT}).run().close()
    messages = [s for s in memory.get_finished_spans() if s.name == "samza.message"]
    bound = threshold(0.05)
    wanted = [(p, o) for p, kvs in INPUT.items() for o in range(len(kvs))
              if sampled("in", p, o, bound)]
    assert wanted
    for p, o in wanted:
        trace_id, span_id = message_ids("in", p, o)
        trace = [s for s in messages if s.context.trace_id == trace_id]
        (root,) = [s for s in trace if s.parent is None]
        assert root.context.span_id == span_id
        (hop1,) = [s for s in trace if s.parent is not None and s.parent.span_id == span_id]
        assert "by-key" in hop1.attributes["samza.stream"]
        # the record the first hop's record wrote into the second: a child of the first's span
        (hop2,) = [s for s in trace if s.parent is not None
                   and s.parent.span_id == hop1.context.span_id]
        assert "by-value" in hop2.attributes["samza.stream"]
        assert len(trace) == 3


def test_an_async_call_and_its_remote_table_calls_are_spans_of_their_sampled_message() -> None:
    with KVService({f"k{i}": f"name{i}" for i in range(5)}) as service:
        kv = HttpKV(service.url)
        system = LocalSystem("local")
        app = StreamApplication("traced-async")
        app.remote_table("names", read=kv.read)

        class Lookup:
            def init(self, ctx: Any) -> None:
                self.names = ctx.table("names")

            async def __call__(self, kv: KV[str, int]) -> KV[str, Any]:
                return KV(kv.key, await self.names.get(kv.key))

        (app.input(system.input("in", serde=SERDE, partitions=2))
            .async_map(Lookup(), name="lookup")
            .send_to(app.output(system.output("out", serde=SERDE, partitions=2))))
        memory = memory_exporter()
        memory.clear()
        small = {p: kvs[:60] for p, kvs in INPUT.items()}
        with tempfile.TemporaryDirectory() as tmp:
            got = LocalRunner(app, {"job.dir": tmp, "tracing.enabled": True,
                                    "tracing.exporter": "memory", "tracing.sample.ratio": "0.1"},
                              inputs={"in": small}).run()
            try:
                outs = got.partitions("out")
            finally:
                got.close()
    assert sorted(str(kv.value) for kvs in outs.values() for kv in kvs) == sorted(
        f"name{kv.key[1:]}" if kv.key.startswith("k") else "None"
        for kvs in small.values() for kv in kvs)
    spans = memory.get_finished_spans()
    bound = threshold(0.1)
    wanted = [(p, o) for p, kvs in small.items() for o in range(len(kvs))
              if sampled("in", p, o, bound)]
    assert wanted
    for p, o in wanted:
        trace_id, span_id = message_ids("in", p, o)
        children = sorted((s.name, s.attributes.get("samza.call"), s.attributes.get("samza.key"))
                          for s in spans if s.context.trace_id == trace_id
                          and s.parent is not None and s.parent.span_id == span_id)
        key = small[p][o].key
        assert children == [("samza.async", None, None), ("samza.remote", "get", repr(key))]
    # the messages not sampled have none
    assert sum(s.name == "samza.async" for s in spans) == len(wanted)
    assert sum(s.name == "samza.remote" for s in spans) == len(wanted)


def test_a_join_table_lookup_on_a_remote_table_is_a_span_of_its_sampled_message() -> None:
    with KVService({f"k{i}": f"name{i}" for i in range(5)}) as service:
        system = LocalSystem("local")
        app = StreamApplication("traced-join")
        names = app.remote_table("names", read=HttpKV(service.url).read,
                                 cache=CacheSpec(ttl=600, size=100))
        (app.input(system.input("in", serde=SERDE, partitions=2))
            .join_table(names, combine=lambda m, r: KV(m.key, r.value if r else None),
                        name="names")
            .send_to(app.output(system.output("out", serde=SERDE, partitions=2))))
        memory = memory_exporter()
        memory.clear()
        small = {p: kvs[:60] for p, kvs in INPUT.items()}
        with tempfile.TemporaryDirectory() as tmp:
            got = LocalRunner(app, {"job.dir": tmp, "tracing.enabled": True,
                                    "tracing.exporter": "memory", "tracing.sample.ratio": "0.1",
                                    "task.max.concurrency": 1},
                              inputs={"in": small}).run()
            try:
                outs = got.partitions("out")
            finally:
                got.close()
    assert sorted(str(kv.value) for kvs in outs.values() for kv in kvs) == sorted(
        f"name{kv.key[1:]}" if kv.key.startswith("k") else "None"
        for kvs in small.values() for kv in kvs)
    spans = memory.get_finished_spans()
    bound = threshold(0.1)
    wanted = [(p, o) for p, kvs in small.items() for o in range(len(kvs))
              if sampled("in", p, o, bound)]
    assert wanted
    for p, o in wanted:
        trace_id, span_id = message_ids("in", p, o)
        children = [s for s in spans if s.context.trace_id == trace_id
                    and s.parent is not None and s.parent.span_id == span_id]
        (lookup,) = children
        key = small[p][o].key
        # the task's cache holds a name its lookups read before (a key with none is not kept)
        cached = key.startswith("k") and any(kv.key == key for kv in small[p][:o])
        assert (lookup.name, dict(lookup.attributes)) == ("samza.remote", {
            "samza.table": "names", "samza.call": "join_table",
            "samza.operator": "traced-join-1-join_table-names",
            "samza.key": repr(key), "samza.cache": "hit" if cached else "miss"})
        assert lookup.end_time >= lookup.start_time
    # the messages not sampled have none
    assert sum(s.name == "samza.remote" for s in spans) == len(wanted)
    assert {s.attributes["samza.cache"] for s in spans if s.name == "samza.remote"} == {
        "hit", "miss"}
