"""Benchmark W7 (see docs/benchmarks.md): W1, the ReadWrite counter, end to end through a Kafka broker
on 127.0.0.1, against aiokafka's own raw consume+produce loop over the same topics.

Each run starts a fresh in-memory tansu broker (``samza_dsl.testing.kafka_broker``), creates the
input topic (4 partitions) and loads ``n`` keyed W1 messages ``{"id": int in [1, 10^4], "pad":
100-byte str}`` into it, each in its key's murmur2 partition, before any clock starts. Then, on
the same input topic, each into an output topic of its own (4 partitions):

- the baseline: one ``AIOKafkaConsumer`` (partitions assigned by hand, ``getmany``) and one
  ``AIOKafkaProducer``: msgspec-decode, count per id in a dict, msgspec-encode the count, append
  it to a record batch of its key's murmur2 partition; the batches go out with ``send_batch``
  after each fetch, and the run ends when the broker has acknowledged every record. Timed from
  the clients' start to the last acknowledgement. Its producer's batches are as large as the
  job's (``KafkaProducer.BATCH_BYTES``); everything else is aiokafka's defaults.
- the job: the W1 application on a ``KafkaSystem`` with default settings (the counter of
  examples/readwrite_counter.py, its table an LMDB store, with a changelog topic when the runtime
  gives stores on Kafka one), run by ``LocalRunner`` until its bounded input ends. Timed end to
  end: planning against the broker, topics, checkpoints, restores, processing and the final
  commit.

Both outputs are read back afterwards and checked: ``n`` records, each in its key's partition,
the last count of every id its true count.

    python benchmarks/run.py W7 --runs 3

The line is workload "W7" with params messages, partitions, store ("lmdb", or "lmdb+changelog"
when the job wrote a changelog topic) and system "kafka (tansu)"; ``baseline_msgs_per_s`` is the
raw loop's rate in the same run (target ratio >= 0.5).

Loading the input: tansu reports the end offset of a partition as the base offset of its last
record batch + 1 (docs/testing.md, "The two test brokers"), and a bounded input ends at that end offset. The loader sends
each partition's records in large batches, then the last record alone in a batch of its own, and
checks that the end offsets the broker reports are the record counts.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from benchmarks.brokers import start_broker, system_of
from benchmarks.common import emit
from examples.readwrite_counter import CountInTable
from operators.hashing import partition_for
from runtime.kafka.admin import TopicSpec, ensure_topics
from runtime.kafka.system import KafkaProducer
from runtime.runner import LocalRunner
from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

__all__ = ["run_w7", "run_w7x", "w7_app"]

PARTITIONS = 4
PAD = "x" * 100
COMMIT_MS = 1000
LOAD_BATCH_BYTES = 1 << 20  # the loader's record batches
# The raw loop's clients: aiokafka's defaults, with the record batches the job's producer uses
# (KafkaProducer.BATCH_BYTES); the job runs with the KafkaSystem's defaults.
RAW_CONSUMER: dict[str, Any] = {}
RAW_PRODUCER: dict[str, Any] = {"max_batch_size": KafkaProducer.BATCH_BYTES}

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


def w7_input(n: int, seed: int = 1) -> list[list[tuple[bytes, bytes]]]:
    """W1's messages as (key, value) bytes, per murmur2 partition of the key."""
    rnd = random.Random(seed)
    parts: list[list[tuple[bytes, bytes]]] = [[] for _ in range(PARTITIONS)]
    for _ in range(n):
        i = rnd.randint(1, 10_000)
        key = str(i).encode()
        parts[partition_for(key, PARTITIONS)].append((key, _enc.encode({"id": i, "pad": PAD})))
    return parts


def w7_app(name: str, bootstrap: str, events: str, counts: str, *,
           consumer: dict[str, Any] | None = None,
           producer: dict[str, Any] | None = None,
           count: CountInTable | None = None) -> StreamApplication:
    """W1 (examples/readwrite_counter.py) with its streams on Kafka topics; ``consumer`` and
    ``producer`` are aiokafka settings of the KafkaSystem; ``count``: the counter (a
    ``CountInTable`` that also notes when it handled some records, say)."""
    app = StreamApplication(name, config={"task.commit.ms": COMMIT_MS})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap, consumer=consumer,
                        producer=producer)
    kv = KVSerde(StringSerde(), JsonSerde())
    inp = app.input(kafka.input("events", serde=kv, physical_name=events))
    out = app.output(kafka.output("counts", serde=kv, physical_name=counts,
                                  partitions=PARTITIONS))
    app.table("counts", serde=KVSerde(StringSerde(), JsonSerde()))
    inp.map(count if count is not None else CountInTable(), name="count").send_to(out)
    return app


# -- the broker's topics ------------------------------------------------------------------------

async def _create_topics(bootstrap: str, names: list[str]) -> None:
    """The topics, each of ``PARTITIONS`` partitions, once their leaders are elected."""
    await ensure_topics(bootstrap, [TopicSpec(t, PARTITIONS) for t in names])


async def _load(bootstrap: str, topic: str, parts: list[list[tuple[bytes, bytes]]]) -> None:
    """Every partition's records in large awaited batches, its last record in a batch of its
    own (so that tansu's end offset is the record count); checks the end offsets."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=LOAD_BATCH_BYTES,
                                max_request_size=4 * LOAD_BATCH_BYTES, request_timeout_ms=30_000)
    await producer.start()
    try:
        for last in (False, True):
            acks = []
            for p, records in enumerate(parts):
                todo = records[-1:] if last else records[:-1]
                batch = producer.create_batch()
                for key, value in todo:
                    if batch.append(timestamp=None, key=key, value=value, headers=None) is None:
                        acks.append(await producer.send_batch(batch, topic, partition=p))
                        batch = producer.create_batch()
                        batch.append(timestamp=None, key=key, value=value, headers=None)
                if batch.record_count():
                    acks.append(await producer.send_batch(batch, topic, partition=p))
            await asyncio.gather(*acks)
    finally:
        await producer.stop()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    got = [ends[tp] for tp in tps]
    want = [len(records) for records in parts]
    if got != want:
        raise RuntimeError(f"W7: the input's end offsets are {got}, not the record counts {want}")


async def _changelog_topics(bootstrap: str, job_name: str) -> list[str]:
    """The changelog topics of a job's stores (none while stores on Kafka have none)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        topics = await admin.list_topics()
    finally:
        await admin.close()
    return sorted(t for t in topics if t.startswith(job_name) and t.endswith("-changelog"))


async def _read_back(bootstrap: str, topic: str, n: int) -> list[tuple[int, bytes, bytes]]:
    """The first ``n`` records of a topic's partitions, as (partition, key, value); skips
    control records (they carry a ``samza.control`` header)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    out: list[tuple[int, bytes, bytes]] = []
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + 120
        while len(out) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"W7: read only {len(out)} of {n} records of {topic!r}")
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                out.extend((tp.partition, r.key, r.value) for r in records
                           if not r.headers)
    finally:
        await consumer.stop()
    return out


def _check(what: str, records: list[tuple[int, bytes, bytes]], n: int,
           truth: Counter[bytes]) -> None:
    if len(records) != n:
        raise RuntimeError(f"W7 {what}: {len(records)} output records, not {n}")
    last: dict[bytes, int] = {}
    for p, key, value in records:
        if partition_for(key, PARTITIONS) != p:
            raise RuntimeError(f"W7 {what}: key {key!r} in partition {p}")
        c = _dec.decode(value)
        if c > last.get(key, 0):
            last[key] = c
    if last != dict(truth):
        raise RuntimeError(f"W7 {what}: the emitted counts differ from the true counts")


# -- the baseline: aiokafka's raw consume+produce loop --------------------------------------------

async def _raw_loop(bootstrap: str, topic: str, out_topic: str, ends: list[int],
                    consumer_settings: dict[str, Any], producer_settings: dict[str, Any]) -> float:
    """Consume the input to its end offsets, count per id, produce the counts; the seconds from
    the clients' start to the last acknowledgement."""
    t0 = time.perf_counter()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                **consumer_settings)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **producer_settings)
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        remaining = {tp for tp in tps if ends[tp.partition] > 0}
        counts: dict[int, int] = {}
        partition_of: dict[bytes, int] = {}
        decode, encode = _dec.decode, _enc.encode
        acks: list[asyncio.Future[Any]] = []
        while remaining:
            fetched = await consumer.getmany(*remaining, timeout_ms=200)
            batches: list[Any] = [None] * PARTITIONS
            for tp, records in fetched.items():
                end = ends[tp.partition]
                for r in records:
                    if r.offset >= end:
                        break
                    i = decode(r.value)["id"]
                    c = counts.get(i, 0) + 1
                    counts[i] = c
                    key = r.key
                    p = partition_of.get(key)
                    if p is None:
                        p = partition_of[key] = partition_for(key, PARTITIONS)
                    batch = batches[p]
                    if batch is None:
                        batch = batches[p] = producer.create_batch()
                    value = encode(c)
                    if batch.append(timestamp=None, key=key, value=value, headers=None) is None:
                        acks.append(await producer.send_batch(batch, out_topic, partition=p))
                        batch = batches[p] = producer.create_batch()
                        batch.append(timestamp=None, key=key, value=value, headers=None)
                if records and records[-1].offset + 1 >= end:
                    remaining.discard(tp)
            for p, batch in enumerate(batches):
                if batch is not None:
                    acks.append(await producer.send_batch(batch, out_topic, partition=p))
        await asyncio.gather(*acks)
        return time.perf_counter() - t0
    finally:
        await producer.stop()
        await consumer.stop()


# -- one run ----------------------------------------------------------------------------------------

def run_w7(n: int, broker_kind: str = "tansu") -> dict[str, Any]:
    parts = w7_input(n)
    truth = Counter(key for records in parts for key, _ in records)
    ends = [len(records) for records in parts]
    tag = uuid.uuid4().hex[:8]
    events, raw_out, job_out = f"w7-events-{tag}", f"w7-raw-counts-{tag}", f"w7-counts-{tag}"
    job_dir = tempfile.mkdtemp(prefix="w7-")
    broker = start_broker(broker_kind)
    try:
        bootstrap = broker.bootstrap
        t0 = time.perf_counter()
        asyncio.run(_create_topics(bootstrap, [events, raw_out, job_out]))
        asyncio.run(_load(bootstrap, events, parts))
        load_s = time.perf_counter() - t0
        parts.clear()

        base_s = asyncio.run(_raw_loop(bootstrap, events, raw_out, ends, RAW_CONSUMER,
                                       RAW_PRODUCER))

        app = w7_app(f"w7-{tag}", bootstrap, events, job_out)
        runner = LocalRunner(app, {"job.dir": job_dir})
        t0 = time.perf_counter()
        runner.run()
        secs = time.perf_counter() - t0
        commits = runner.container.commits if runner.container is not None else None

        _check("baseline", asyncio.run(_read_back(bootstrap, raw_out, n)), n, truth)
        _check("job", asyncio.run(_read_back(bootstrap, job_out, n)), n, truth)
        changelogs = asyncio.run(_changelog_topics(bootstrap, app.name))
    finally:
        broker.stop()
        shutil.rmtree(job_dir, ignore_errors=True)
    store = "lmdb+changelog" if changelogs else "lmdb"
    return emit("W7", {"messages": n, "partitions": PARTITIONS, "store": store,
                       "system": system_of(broker_kind)}, n, secs, "aiokafka-raw-loop", n / base_s,
                load_seconds=round(load_s, 3), commits=commits)


# -- W7X: the job exactly once against at least once ------------------------------------------------

def _job_run(bootstrap: str, events: str, tag: str, guarantee: str, n: int,
             truth: Counter[bytes]) -> tuple[float, int | None]:
    """The W7 job under ``guarantee`` into an output topic of its own; its seconds and commits,
    after its output is checked."""
    out = f"w7-counts-{guarantee}-{tag}"
    asyncio.run(_create_topics(bootstrap, [out]))
    job_dir = tempfile.mkdtemp(prefix="w7x-")
    try:
        app = w7_app(f"w7-{guarantee}-{tag}", bootstrap, events, out)
        runner = LocalRunner(app, {"job.dir": job_dir, "job.processing.guarantee": guarantee})
        t0 = time.perf_counter()
        runner.run()
        secs = time.perf_counter() - t0
        commits = runner.container.commits if runner.container is not None else None
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)
    _check(guarantee, asyncio.run(_read_back(bootstrap, out, n)), n, truth)
    return secs, commits


def run_w7x(n: int, eos_first: bool = False, broker_kind: str = "tansu") -> dict[str, Any]:
    """W7's job with ``job.processing.guarantee=exactly-once`` against the same job at least
    once, on one broker and one input in the same run (``eos_first``: which runs first); the
    line's rate is exactly once's, its baseline at least once's (target ratio >= 0.8)."""
    parts = w7_input(n)
    truth = Counter(key for records in parts for key, _ in records)
    tag = uuid.uuid4().hex[:8]
    events = f"w7x-events-{tag}"
    broker = start_broker(broker_kind)
    try:
        bootstrap = broker.bootstrap
        asyncio.run(_create_topics(bootstrap, [events]))
        asyncio.run(_load(bootstrap, events, parts))
        parts.clear()
        order = ("exactly-once", "at-least-once") if eos_first else \
            ("at-least-once", "exactly-once")
        got = {g: _job_run(bootstrap, events, tag, g, n, truth) for g in order}
        quix = _quix_w7(bootstrap, events, n)
    finally:
        broker.stop()
    eos_s, eos_commits = got["exactly-once"]
    alo_s, _ = got["at-least-once"]
    return emit("W7X", {"messages": n, "partitions": PARTITIONS, "system": system_of(broker_kind),
                        "first": order[0]}, n, eos_s, "W7 at-least-once", n / alo_s,
                commits=eos_commits,
                quixstreams_exactly_once_msgs_per_s=quix and quix["msgs_per_s"],
                quixstreams_error=None if quix is None or "error" not in quix
                else quix["error"])


def _quix_w7(bootstrap: str, events: str, n: int) -> dict[str, Any] | None:
    """The peer: Quix Streams with ``processing_guarantee="exactly-once"`` on the same input and
    broker, in its own venv (``benchmarks/peers/install.py quixstreams``); None without it."""
    import json
    import os
    import subprocess
    import sys

    from benchmarks.peers.install import python_of

    python = python_of("quixstreams")
    if not os.path.exists(python):
        print("W7X: no Quix Streams venv (benchmarks/peers/install.py quixstreams): peer "
              "skipped", file=sys.stderr)
        return None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([python, "-m", "benchmarks.peers.run_quixstreams", "W7", bootstrap,
                           events, str(n), "exactly-once"], cwd=root, capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        return {"msgs_per_s": None, "error": proc.stderr.strip().splitlines()[-1:]}
    got: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return got
