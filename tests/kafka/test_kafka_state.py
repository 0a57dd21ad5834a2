"""Stores of jobs on Kafka restore from compacted changelog topics (tansu on 127.0.0.1)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

from kafka_helpers import consume_all, create_topic, keyed, produce_each, run

from runtime import LocalRunner
from runtime.kafka_admin import describe_topics
from samza_dsl import KV, Context, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


class Count:
    def init(self, ctx: Context) -> None:
        self.table = ctx.table("counts")

    def __call__(self, kv: KV[str, Any]) -> KV[str, int]:
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, n)


def counter_app(name: str, bootstrap: str, events: str, counts: str) -> StreamApplication:
    app = StreamApplication(name, config={"task.commit.ms": 200})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    inp = app.input(kafka.input("events", serde=SERDE, physical_name=events))
    out = app.output(kafka.output("counts", serde=SERDE, physical_name=counts))
    app.table("counts", serde=SERDE)
    inp.map(Count(), name="count").send_to(out)
    return app


def events(start: int, n: int, ids: int = 5) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"id{i % ids}", {"i": i}) for i in range(start, start + n)), 2)


def test_a_lost_store_is_rebuilt_from_its_changelog_topic(kafka_bootstrap: str,
                                                          tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    name, ev, out = f"counter-{tag}", f"events-{tag}", f"counts-{tag}"
    run(create_topic(kafka_bootstrap, ev, 2))
    run(produce_each(kafka_bootstrap, ev, events(0, 30)))
    app = counter_app(name, kafka_bootstrap, ev, out)
    config = {"job.dir": str(tmp_path / "job")}

    first = LocalRunner(app, config).run()
    assert max(m.value for m in first.messages("counts")) == 6
    job_name = f"{name}-1"
    changelog = f"{job_name}-counts-changelog"
    # the changelog topic was created, compacted, a partition per task, holding the counts
    assert run(describe_topics(kafka_bootstrap, [changelog])) == {changelog: 2}
    entries = run(consume_all(kafka_bootstrap, changelog, 2))
    assert sum(len(r) for r in entries.values()) > 0

    # the local stores are lost: the next run rebuilds them from the topic
    shutil.rmtree(tmp_path / "job" / "stores")
    run(produce_each(kafka_bootstrap, ev, events(30, 10)))
    second = LocalRunner(app, config).run()
    got = sorted((m.key, m.value) for m in second.messages("counts"))
    assert got == sorted((f"id{i}", 7 + j) for i in range(5) for j in range(2))
    restores = second.job.state.restores
    assert {info["mode"] for info in restores.values()} == {"rebuilt"}
    assert sum(info["entries_replayed"] for info in restores.values()) > 0

    # with the local copies kept, a restart replays nothing (host affinity)
    run(produce_each(kafka_bootstrap, ev, events(40, 5)))
    third = LocalRunner(app, config).run()
    assert sorted(m.value for m in third.messages("counts")) == [9] * 5
    assert {info["mode"] for info in third.job.state.restores.values()} == {"host-affinity"}
