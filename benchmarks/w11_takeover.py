"""Benchmark W11 (see docs/benchmarks.md): a takeover, without and with a standby.

Three ``samza-dsl run --follow`` members of one Kafka job (a fresh in-memory tansu broker on
127.0.0.1; consumer group, ``session.timeout.ms`` 3000) count per key in a table with a changelog
(4 partitions); ``keys`` events, one per key, are loaded and counted first. Then, while a feeder
sends an event to each partition every 20 ms, the member running two tasks is SIGKILLed. Timed
from the SIGKILL to the first output of a moved task written by a survivor. The line also gives
the changelog entries the survivors replayed for the moved tasks (``replayed``), the mode of
each restore, and the entries the changelog held (the checkpoints' offsets).

    python benchmarks/w11_takeover.py --keys 100000

One line per replication factor: 1 (no standby: the survivor rebuilds the store from the whole
changelog) and 2 (a standby on another member: only the tail past its position is replayed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402

from benchmarks.brokers import BROKERS, kinds, start_broker, system_of  # noqa: E402
from operators.hashing import partition_for  # noqa: E402
from runtime.kafka.admin import TopicSpec, ensure_topics  # noqa: E402
from samza_dsl import KV, StreamApplication  # noqa: E402
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde  # noqa: E402
from samza_dsl.systems import KafkaSystem  # noqa: E402

PARTITIONS = 4
SERDE = KVSerde(StringSerde(), JsonSerde())
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
_RUNS = re.compile(r"group generation (\d+): runs (.*?)(?: \(restoring .*\))?$")
_RESTORED = re.compile(r"task (.+?): store 'counts' restored \((\S+)\): replayed (\d+) changelog "
                       r"entries, offsets \[(\d+), (\d+)\) of the checkpoint's (\d+)")


class Count:
    """A count per key in the table ``counts``; outputs [count, pid]."""

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("counts")

    def __call__(self, kv: KV) -> KV:
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, [n, os.getpid()])


def w11_app(bootstrap: str, tag: str) -> StreamApplication:
    app = StreamApplication(f"w11-{tag}", config={"task.commit.ms": 200})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    events = app.input(kafka.input("events", serde=SERDE, physical_name=f"w11-events-{tag}"))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"w11-out-{tag}",
                                  partitions=2))
    app.table("counts", serde=SERDE)
    events.map(Count(), name="count").send_to(out)
    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return w11_app(os.environ["W11_BOOTSTRAP"], os.environ["W11_TAG"])
    raise AttributeError(name)


def _key(i: int) -> str:
    return f"k{i}"


async def _produce(bootstrap: str, topic: str, keys: range) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                max_batch_size=1 << 20)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=_key(i).encode(), value=b"1",
                                       partition=partition_for(_key(i).encode(), PARTITIONS))
                   for i in keys]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _output_count(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


async def _first_moved_output(bootstrap: str, topic: str, moved: set[int], dead: int,
                              timeout: float) -> float:
    """Seconds until an output of a moved partition's key written by a survivor is read."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(2)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout:
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for r in records:
                    if r.key is not None and r.value is not None and \
                            partition_for(r.key, PARTITIONS) in moved and \
                            json.loads(r.value)[1] != dead:
                        return time.monotonic()
        raise TimeoutError("no moved task processed a message")
    finally:
        await consumer.stop()


def _feed(bootstrap: str, topic: str, stop: threading.Event) -> None:
    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            # a key of each partition (the outputs tell a task by its key's partition)
            names = (f"feed-{j}".encode() for j in range(1000))
            feed = {partition_for(k, PARTITIONS): k for k in names}
            i = 0
            while not stop.is_set():
                for p in range(PARTITIONS):
                    await producer.send(topic, key=feed[p], value=str(i).encode(), partition=p)
                i += 1
                await asyncio.sleep(0.02)
        finally:
            await producer.stop()
    asyncio.run(go())


def _runs(log: Path) -> list[str]:
    found: list[str] = []
    for line in log.read_text(errors="replace").splitlines():
        m = _RUNS.search(line)
        if m:
            found = [] if m.group(2) == "no task" else m.group(2).split(", ")
    return found


def run_w11(keys: int, replication: int, broker_kind: str = "tansu") -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    topic = f"w11-events-{tag}"
    root = Path(tempfile.mkdtemp(prefix="w11-"))
    broker = start_broker(broker_kind)
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    stop = threading.Event()
    try:
        bootstrap = broker.bootstrap

        asyncio.run(ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS)]))
        env = {**os.environ, "W11_BOOTSTRAP": bootstrap, "W11_TAG": tag,
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent),
                                              os.environ.get("PYTHONPATH", "")])}
        for i in range(3):
            log = root / f"member-{i}.log"
            procs.append((subprocess.Popen(
                [CLI, "run", f"{__file__}:app", "--follow", "-q",
                 "-c", f"job.dir={root / f'job-{i}'}",
                 "-c", "systems.kafka.consumer.session.timeout.ms=3000",
                 "-c", "systems.kafka.consumer.heartbeat.interval.ms=300",
                 "-c", f"job.standbytasks.replication.factor={replication}"],
                env=env, stdout=log.open("w"), stderr=subprocess.STDOUT), log))
        deadline = time.monotonic() + 120
        while sorted(len(_runs(log)) for _, log in procs) != [1, 1, 2]:
            assert time.monotonic() < deadline, "the members did not split the tasks"
            time.sleep(0.2)
        asyncio.run(_produce(bootstrap, topic, range(keys)))
        # tansu's end offset is its last batch's base offset + 1: wait until it stops moving
        deadline, last, still = time.monotonic() + 600, -1, 0
        while still < 3:
            assert time.monotonic() < deadline, "the keys were not counted"
            time.sleep(1)
            now = asyncio.run(_output_count(bootstrap, f"w11-out-{tag}"))
            still = still + 1 if now == last and now > 0 else 0
            last = now
        time.sleep(2)  # the last commits, and the standbys reach them
        feeder = threading.Thread(target=_feed, args=(bootstrap, topic, stop))
        feeder.start()
        time.sleep(1)
        proc, log = next((p, log) for p, log in procs if len(_runs(log)) == 2)
        moved = {int(t.split()[-1]) for t in _runs(log)}
        seen = {str(lg): len(lg.read_text(errors="replace")) for _, lg in procs}
        first: list[float] = []
        watcher = threading.Thread(target=lambda: first.append(asyncio.run(
            _first_moved_output(bootstrap, f"w11-out-{tag}", moved, proc.pid, 120))))
        watcher.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        watcher.join(150)
        secs = first[0] - t0
        time.sleep(1)
        restores = [r.groups() for _, lg in procs if lg != log
                    for r in _RESTORED.finditer(lg.read_text(errors="replace")[seen[str(lg)]:])]
        moved_restores = [x for x in restores if int(x[0].split()[-1]) in moved]
        line = {"workload": "W11", "params": {"keys": keys, "partitions": PARTITIONS,
                                              "replication_factor": replication,
                                              "session_timeout_ms": 3000,
                                              "system": system_of(broker_kind)},
                "seconds": round(secs, 3),
                "replayed": sum(int(x[2]) for x in moved_restores),
                "modes": sorted(x[1] for x in moved_restores),
                "changelog_entries": sum(int(x[5]) for x in moved_restores)}
        print(json.dumps(line), flush=True)
        return line
    finally:
        stop.set()
        for p, _ in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p, _ in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--broker", choices=(*BROKERS, "both"), default="both",
                        help="the broker of each run (both: each, alternating)")
    args = parser.parse_args()
    for _ in range(args.runs):
        for kind in kinds(args.broker):
            for replication in (1, 2):
                run_w11(args.keys, replication, kind)


if __name__ == "__main__":
    main()
