"""W1 and W2 on Quix Streams with its RocksDB state, in its own venv.

    .peer-venvs/quixstreams/bin/python -m benchmarks.peers.run_quixstreams W1 1000000
    .peer-venvs/quixstreams/bin/python -m benchmarks.peers.run_quixstreams W2 1000 100
    .peer-venvs/quixstreams/bin/python -m benchmarks.peers.run_quixstreams W7 HOST:PORT TOPIC N \
        exactly-once       # through a broker (benchmarks/run.py W7X runs it)

Quix Streams reads only from Kafka. To measure its processing and state, not a broker, this
drives Quix's own processing path from memory: the application's ``StreamingDataFrame`` composed
into one function as ``Application.run`` composes it, each message run in a fresh context holding
its ``MessageContext`` (topic, partition, offset), the stateful ``apply`` given Quix's RocksDB
store transaction for the message's partition, and the transactions prepared and flushed to
RocksDB at each commit (Quix's default interval, 5 s) and at the end, as Quix's checkpoint does.
Left out are the Kafka consumer (polling, deserializing into rows) and producer (the output goes
to a list), and the changelog topic: so the figure is an upper bound for Quix on this machine.

W1: ``apply(count, stateful=True)`` with the count in ``state`` (keyed by the message key).
W2: Quix Streams has no async operator: a function awaits its call on an event loop, one
message at a time, so its throughput is ``1 / 0.005`` msgs/s whatever the concurrency asked.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import shutil
import tempfile
import time
from importlib.metadata import version
from typing import Any

import msgspec
from quixstreams import Application
from quixstreams.context import set_message_context
from quixstreams.models import MessageContext, Topic, TopicConfig
from quixstreams.state import State

from benchmarks.peers.workload import W1_PARTITIONS, enrich, run_one

COMMIT_INTERVAL = 5.0  # Application's default commit_interval
CHECK_EVERY = 1_000  # messages between looks at the clock
_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


def count(value: bytes, state: State) -> bytes:
    _dec.decode(value)["id"]  # W1 decodes each message, as the other systems do
    c = state.get("count", 0) + 1
    state.set("count", c)
    return _enc.encode(c)


class _Checkpoint:
    """What the composed dataframe asks of Quix's checkpoint: the store transaction of a
    partition; ``commit`` prepares and flushes them to RocksDB, with the processed offsets."""

    def __init__(self, app: Application, topic: str) -> None:
        self.state_manager = app._state_manager
        self.topic = topic
        self.transactions: dict[tuple[str, int, str], Any] = {}
        self.offsets: dict[int, int] = {}

    def get_store_transaction(self, stream_id: str, partition: int,
                              store_name: str = "default") -> Any:
        tx = self.transactions.get((stream_id, partition, store_name))
        if tx is None:
            store = self.state_manager.get_store(stream_id=stream_id, store_name=store_name)
            tx = self.transactions[(stream_id, partition, store_name)] = \
                store.start_partition_transaction(partition=partition)
        return tx

    def commit(self) -> None:
        for (_, partition, _), tx in self.transactions.items():
            tx.prepare(processed_offsets={self.topic: self.offsets[partition]})
            tx.flush()
        self.transactions.clear()


def _app(state_dir: str, topic_name: str) -> tuple[Application, Topic]:
    logging.getLogger("quixstreams").setLevel(logging.CRITICAL)
    # no broker is reached: the topic's broker configuration is given, not fetched
    app = Application(broker_address="127.0.0.1:9", consumer_group="peers-bench",
                      state_dir=state_dir, use_changelog_topics=False,
                      auto_create_topics=False, loglevel=None)
    config = TopicConfig(num_partitions=W1_PARTITIONS, replication_factor=1,
                         extra_config={"retention.ms": "-1", "retention.bytes": "-1"})
    topic = Topic(topic_name, create_config=config, key_deserializer="str",
                  value_deserializer="bytes")
    topic.broker_config = config
    return app, topic


def _drive(app: Application, composed: Any, topic: str,
           parts: dict[int, list[tuple[str, Any]]], checkpoint: _Checkpoint | None) -> float:
    """Runs every message through the composed dataframe as ``Application`` does; the seconds."""
    t0 = time.perf_counter()
    last_commit = t0
    for partition, msgs in parts.items():
        for offset, (key, value) in enumerate(msgs):
            ctx = contextvars.copy_context()
            ctx.run(set_message_context, MessageContext(
                topic=topic, partition=partition, offset=offset, size=len(value)
                if isinstance(value, bytes) else 0, leader_epoch=None))
            ctx.run(composed, value, key, 0, None)
            if checkpoint is not None:
                checkpoint.offsets[partition] = offset
                if offset % CHECK_EVERY == 0 and time.perf_counter() - last_commit >= \
                        COMMIT_INTERVAL:
                    checkpoint.commit()
                    last_commit = time.perf_counter()
    if checkpoint is not None:
        checkpoint.commit()
    return time.perf_counter() - t0


def w1(parts: dict[int, list[tuple[str, bytes]]]) -> tuple[float, list[Any]]:
    state_dir = tempfile.mkdtemp(prefix="quix-w1-")
    try:
        app, topic = _app(state_dir, "events")
        sdf = app.dataframe(topic).apply(count, stateful=True)
        out: list[tuple[Any, bytes]] = []
        composed = sdf.compose(sink=lambda v, k, _ts, _h: out.append((k, v)))["events"]
        for p in parts:
            app._state_manager.on_partition_assign(sdf.stream_id, p, {})
        checkpoint = _Checkpoint(app, "events")
        app._processing_context._checkpoint = checkpoint
        secs = _drive(app, composed, "events", parts, checkpoint)
        app._state_manager.close()
        return secs, out
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def w2(n: int, c: int) -> tuple[float, list[int]]:
    state_dir = tempfile.mkdtemp(prefix="quix-w2-")
    loop = asyncio.new_event_loop()
    try:
        app, topic = _app(state_dir, "requests")
        sdf = app.dataframe(topic).apply(lambda m: loop.run_until_complete(enrich(m)))
        out: list[int] = []
        composed = sdf.compose(sink=lambda v, _k, _ts, _h: out.append(v))["requests"]
        secs = _drive(app, composed, "requests", {0: [("", m) for m in range(n)]}, None)
        return secs, out
    finally:
        loop.close()
        shutil.rmtree(state_dir, ignore_errors=True)


def w7(bootstrap: str, events: str, n: int, guarantee: str) -> dict[str, Any]:
    """W7 on Quix Streams through the broker at ``bootstrap``: ``events`` (W7's input, already
    loaded, ``n`` records) counted per key with ``apply(count, stateful=True)`` into a new output
    topic, with ``processing_guarantee`` ``guarantee`` and Quix's changelog topics. Timed from
    ``Application.run`` to its return, after the ``n``-th message and the last commit."""
    logging.getLogger("quixstreams").setLevel(logging.WARNING)
    state_dir = tempfile.mkdtemp(prefix="quix-w7-")
    tag = f"{time.time_ns():x}"
    try:
        app = Application(broker_address=bootstrap, consumer_group=f"quix-w7-{tag}",
                          auto_offset_reset="earliest", processing_guarantee=guarantee,
                          state_dir=state_dir, loglevel=None,
                          # the test broker takes about half the session timeout to complete a
                          # join: a short one, so that the figure is not the join
                          consumer_extra_config={"session.timeout.ms": 6000,
                                                 "heartbeat.interval.ms": 500})
        # the topics' broker configuration is given, not fetched: a broker may describe only
        # the settings set explicitly (tansu), where Quix needs retention.ms and the rest
        config = TopicConfig(num_partitions=W1_PARTITIONS, replication_factor=1,
                             extra_config={"retention.ms": "-1", "retention.bytes": "-1"})
        inp = app.topic(events, key_deserializer="str", value_deserializer="bytes",
                        config=config)
        out = app.topic(f"quix-w7-counts-{tag}", key_serializer="str",
                        value_serializer="bytes", config=config)
        inp.broker_config = out.broker_config = config
        seen = [0]

        def counted(value: bytes, state: State) -> bytes:
            encoded = count(value, state)
            seen[0] += 1
            if seen[0] == n:
                app.stop()
            return encoded

        app.dataframe(inp).apply(counted, stateful=True).to_topic(out)
        t0 = time.perf_counter()
        app.run()
        secs = time.perf_counter() - t0
        if seen[0] != n:
            raise RuntimeError(f"Quix W7: {seen[0]} messages processed, not {n}")
        return {"system": "quixstreams", "version": version("quixstreams"), "messages": n,
                "seconds": round(secs, 4), "msgs_per_s": round(n / secs, 1),
                "processing_guarantee": guarantee}
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1:2] == ["W7"]:  # W7 BOOTSTRAP TOPIC N GUARANTEE
        print(json.dumps(w7(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])),
              flush=True)
    else:
        run_one("quixstreams", version("quixstreams"), w1, w2)
