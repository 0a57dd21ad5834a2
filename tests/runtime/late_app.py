"""A job whose late messages are known from its input: ``events`` (4 partitions, one task each)
counted per key in 1-second tumbling windows of event time. ``sample_input`` puts 25 messages
in each partition, in event-time order but for ``LATE[p]`` of them, a minute behind the rest:
late, and dropped. Partition 3 has none."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication, WindowPane, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

PARTITIONS = 4
PER_PARTITION = 25
#: late messages per input partition
LATE = {0: 3, 1: 5, 2: 2, 3: 0}


def _serde() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


def keys_of(partition: int) -> list[str]:
    """Keys that the local system puts in ``partition`` (murmur2, as Kafka's partitioner)."""
    from operators.hashing import KeyPartitioner

    part = KeyPartitioner(PARTITIONS, StringSerde().serialize)
    return [k for k in (f"user-{i}" for i in range(200)) if part(k) == partition][:3]


def sample_input(n: int = PARTITIONS * PER_PARTITION) -> list[KV[str, dict[str, Any]]]:
    out = []
    for p in range(PARTITIONS):
        keys = keys_of(p)
        late = LATE[p]
        for i in range(PER_PARTITION):
            on_time = PER_PARTITION - late
            ts = 1_700_000_000.0 + (i * 0.1 if i < on_time else -60.0 - i)
            out.append(KV(keys[i % len(keys)], {"ts": ts, "i": i}))
    return out[:n]


def event_time(message: KV[str, dict[str, Any]]) -> float:
    return float(message.value["ts"])


def record(pane: WindowPane) -> KV[str, dict[str, Any]]:
    return KV(pane.key.key, {"start_ms": int(pane.key.pane_id), "n": pane.message})


system = LocalSystem("local")
app = StreamApplication("latecount", config={"job.default.system": "local"})
events = app.input(system.input("events", serde=_serde(), partitions=PARTITIONS))
out = app.output(system.output("counts", serde=_serde(), partitions=PARTITIONS))
(
    events.window(Windows.keyed_tumbling(lambda m: m.key, timedelta(seconds=1), init=lambda: 0,
                                         fold=lambda _m, n: n + 1, event_time=event_time),
                  name="per-key")
    .map(record, name="record")
    .send_to(out)
)
