"""Stores of jobs on Kafka restore from compacted changelog topics (tansu on 127.0.0.1)."""

from __future__ import annotations

import shutil
import struct
import uuid
from pathlib import Path
from typing import Any

from kafka_helpers import consume_all, create_topic, keyed, produce_each, run

from runtime import LocalRunner
from runtime.kafka.admin import describe_topics
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


def flip_value(data_file: Path, lkey: bytes, value: bytes) -> int:
    """Flips the low bit of the last byte of the LMDB value under ``lkey`` (ending with
    ``value``) in every page of ``data_file`` holding it; returns how many."""
    raw = bytearray(data_file.read_bytes())
    pattern = struct.pack("<H", len(lkey)) + lkey
    n = 0
    i = raw.find(pattern)
    while i >= 0:
        lo, hi, flags = struct.unpack_from("<HHH", raw, i - 6)
        end = i + len(pattern) + (lo | hi << 16)
        if flags == 0 and raw[end - len(value):end] == value:
            raw[end - 1] ^= 1
            n += 1
        i = raw.find(pattern, i + 1)
    data_file.write_bytes(bytes(raw))
    return n


def test_long_keys_and_a_value_changed_on_disk_restore_from_the_topic(kafka_bootstrap: str,
                                                                      tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    name, ev, out = f"counter-{tag}", f"events-{tag}", f"counts-{tag}"
    run(create_topic(kafka_bootstrap, ev, 2))
    long_keys = ["L" * 600, "M" * 5000]
    run(produce_each(kafka_bootstrap, ev, events(0, 30) + keyed(
        [(k, {"i": j}) for j in range(3) for k in long_keys], 2)))
    app = counter_app(name, kafka_bootstrap, ev, out)
    root = tmp_path / "job"
    config = {"job.dir": str(root)}
    first = LocalRunner(app, config).run()
    assert {m.key: m.value for m in first.messages("counts")} == {
        **{f"id{i}": 6 for i in range(5)}, **{k: 3 for k in long_keys}}

    # one bit of id1's count changes on disk: the next run rebuilds that store from the topic
    files = sorted((root / "stores" / "counts").glob("*/data.mdb"))
    assert sum(flip_value(f, b"\x00id1", b"6") > 0 for f in files) == 1
    run(produce_each(kafka_bootstrap, ev, events(30, 10) + keyed(
        [(k, {"i": 9}) for k in long_keys], 2)))
    second = LocalRunner(app, config).run()
    assert {m.key: m.value for m in second.messages("counts")} == {
        **{f"id{i}": 8 for i in range(5)}, **{k: 4 for k in long_keys}}

    # the stores are lost: rebuilt from the topic, long keys included
    shutil.rmtree(root / "stores")
    run(produce_each(kafka_bootstrap, ev, keyed([(k, {"i": 10}) for k in long_keys + ["id1"]],
                                                2)))
    third = LocalRunner(app, config).run()
    assert {m.key: m.value for m in third.messages("counts")} == {
        "id1": 9, **{k: 5 for k in long_keys}}
    assert "rebuilt" in {info["mode"] for info in third.job.state.restores.values()}
