"""Tracing under ``TestRunner`` (docs/tracing.md, docs/testing.md): the same spans as the
embedded system makes for the same application and input (batches, sampled messages, async and
remote-table calls and lookups, one trace through a ``partition_by``), and the same ``traceparent`` on the
records of its outputs."""

from __future__ import annotations

import tempfile
from collections import Counter
from typing import Any

import opentelemetry.sdk  # noqa: F401  (the otel extra: missing, this fails)

from runtime import LocalRunner
from runtime.host.tracing import TRACEPARENT, memory_exporter, message_ids, sampled, threshold
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem
from samza_dsl.testing.kv_service import HttpKV, KVService

SERDE = KVSerde(StringSerde(), JsonSerde())
# one input partition: the records the hop writes, and so their offsets, are the same in both
INPUT = {0: [KV(f"k{(i * 7) % 9}", i) for i in range(160)]}
CONFIG = {"tracing.enabled": True, "tracing.exporter": "memory", "tracing.sample.ratio": "0.1",
          "job.intermediate.stream.partitions": 2}


class Named:
    """An async step that reads the key's name from a remote table."""

    def init(self, ctx: Any) -> None:
        self.names = ctx.table("names")

    async def __call__(self, kv: KV[str, int]) -> KV[str, Any]:
        return KV(kv.key, [kv.value, await self.names.get(kv.key)])


def app_for(url: str) -> StreamApplication:
    system = LocalSystem("local")
    app = StreamApplication("traced-runners")
    names = app.remote_table("names", read=HttpKV(url).read)
    (app.input(system.input("in", serde=SERDE, partitions=1))
        .partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=SERDE, name="by-key")
        .async_map(Named(), name="named")
        .join_table(names, combine=lambda m, r: KV(m.key, [*m.value, r.value if r else None]),
                    name="again")
        .send_to(app.output(system.output("out", serde=SERDE, partitions=2))))
    return app


def _described(spans: Any) -> tuple[Counter[Any], dict[tuple[int, int], Any], Counter[Any]]:
    """The span tree of a run, with no ids in it: per span but batches, its name and attributes,
    its parent's, and the root of its trace (whose trace id, made from the input position of a
    sampled message, is the same in every run); the description of each span by (trace id, span
    id); and per (stream, partition) the messages the batch spans hold."""
    by_id = {s.context.span_id: s for s in spans}

    def desc(s: Any) -> tuple[Any, ...]:
        a = dict(s.attributes)
        a.pop("samza.task", None)
        return (s.name, tuple(sorted(a.items())))

    tree: Counter[Any] = Counter()
    names: dict[tuple[int, int], Any] = {}
    batches: Counter[Any] = Counter()
    for s in spans:
        if s.name == "samza.batch":
            a = s.attributes
            batches[(a["samza.stream"], a["samza.partition"])] += a["samza.count"]
            continue
        (link,) = s.links if s.name == "samza.message" else (None,)
        if link is not None:  # a message's span links to the batch it came in
            batch = by_id[link.context.span_id].attributes
            assert batch["samza.offset.first"] <= s.attributes["samza.offset"] \
                <= batch["samza.offset.last"]
        root = s
        while root.parent is not None and root.parent.span_id in by_id:
            root = by_id[root.parent.span_id]
            assert root.context.trace_id == s.context.trace_id  # one trace, root to leaf
        parent = by_id[s.parent.span_id] if s.parent is not None else None
        tree[(desc(s), None if parent is None else desc(parent),
              desc(root), root.context.trace_id)] += 1
        names[(s.context.trace_id, s.context.span_id)] = desc(s)
    return tree, names, batches


def _out_headers(names: dict[tuple[int, int], Any], heads: list[dict[str, bytes]]
                 ) -> Counter[Any]:
    """What the ``traceparent`` of each output record names (a message span of the run), or
    None for a record with none."""
    got: Counter[Any] = Counter()
    for h in heads:
        tp = h.get(TRACEPARENT)
        if tp is None:
            got[None] += 1
            continue
        _, trace_id, span_id, flags = tp.decode().split("-")
        assert flags == "01"
        got[names[(int(trace_id, 16), int(span_id, 16))]] += 1
    return got


def test_test_runner_makes_the_spans_and_traceparents_the_embedded_system_makes() -> None:
    memory = memory_exporter()
    with KVService({f"k{i}": f"name{i}" for i in range(9)}) as service:
        memory.clear()
        result = TestRunner(app_for(service.url), CONFIG).add_input("in", INPUT).run()
        in_memory = list(memory.get_finished_spans())
        memory_heads = [h for hs in result.headers("out").values() for h in hs]
        assert len(memory_heads) == len(result.messages("out")) == 160

        memory.clear()
        with tempfile.TemporaryDirectory() as tmp:
            got = LocalRunner(app_for(service.url), {"job.dir": tmp, **CONFIG},
                              inputs={"in": INPUT}).run()
            try:
                job = got.job
                assert job is not None
                log = job.log_of(job.stream_system["out"])
                log_heads = [dict(r[2] or ()) for p in (0, 1)
                             for r in log.read(job.physical["out"], p, 0, 1000)[1]]
            finally:
                got.close()
        embedded = list(memory.get_finished_spans())

    tree, names, batches = _described(in_memory)
    tree_log, names_log, batches_log = _described(embedded)
    assert tree == tree_log
    assert batches == batches_log and batches[("in", 0)] >= 160
    assert _out_headers(names, memory_heads) == _out_headers(names_log, log_heads)

    # and that tree is the one wanted: each sampled input message's trace goes through the hop,
    # where its record's span has the async call, its remote-table call and its join_table
    # lookup as children
    bound = threshold(0.1)
    wanted = [o for o in range(160) if sampled("in", 0, o, bound)]
    assert wanted
    for o in wanted:
        trace_id, _ = message_ids("in", 0, o)
        kinds = sorted((d[0][0], d[1][0] if d[1] else "")
                       for d in tree if d[3] == trace_id)
        assert kinds == [("samza.async", "samza.message"), ("samza.message", ""),
                         ("samza.message", "samza.message"), ("samza.remote", "samza.message"),
                         ("samza.remote", "samza.message")]
    # each output of a traced record after the hop (and only those) names that record's span
    outs = _out_headers(names, memory_heads)
    hops = Counter(d[0] for d in tree for _ in range(tree[d])
                   if d[0][0] == "samza.message" and dict(d[0][1])["samza.stream"] != "in")
    assert len(hops) >= len(wanted) and outs == {None: 160 - len(hops), **hops}
