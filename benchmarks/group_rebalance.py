"""Rebalance pause (issue 40, point 10): how long the members of a job's consumer group stop
when a member joins.

A fresh in-memory tansu broker on 127.0.0.1; a job counting events per key in a table with a
changelog, 4 input partitions; events flow at about 400 a second all along. Two members run
(``samza-dsl run benchmarks/group_rebalance.py:app --follow``, each with a job.dir of its own);
a third joins. Per survivor, two numbers:

- ``rebalance_s``: from its revocation to its new assignment, as it records it for
  ``samza-dsl status`` (the group's members records in the checkpoint topic);
- ``gap_s``: the longest time between two of its outputs (their record timestamps) from a second
  before the join until its new assignment plus two seconds: how long it wrote nothing.

tansu answers a join after about half of ``session.timeout.ms`` (docs/testing.md, "The two test brokers"): the session
timeout here is 3 s, as in the tests. 2 cores, shared: the numbers are this machine's.

    python benchmarks/group_rebalance.py --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from operators.hashing import partition_for
from runtime.kafka.admin import TopicSpec, ensure_topics
from runtime.kafka.system import new_consumer, read_checkpoint_topic, stop_client
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem
from samza_dsl.testing.kafka_broker import TansuBroker

SERDE = KVSerde(StringSerde(), JsonSerde())
SESSION_MS = 3000
_RUNS = re.compile(r"group generation (\d+): runs")


class _Count:
    def init(self, ctx: Any) -> None:
        self.table = ctx.table("counts")

    def __call__(self, kv: Any) -> Any:
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, [n, os.getpid()])


def _app() -> StreamApplication:
    tag = os.environ["BENCH_TAG"]
    app = StreamApplication(f"rebalance-{tag}", config={"task.commit.ms": 500})
    kafka = KafkaSystem("kafka", bootstrap_servers=os.environ["BENCH_BOOTSTRAP"])
    events = app.input(kafka.input("events", serde=SERDE, physical_name=f"rb-in-{tag}"))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"rb-out-{tag}",
                                  partitions=2))
    app.table("counts", serde=SERDE)
    events.map(_Count(), name="count").send_to(out)
    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _app()
    raise AttributeError(name)


class _Member:
    def __init__(self, folder: Path, bootstrap: str, tag: str) -> None:
        folder.mkdir(parents=True)
        self.log = folder / "run.log"
        self._out = self.log.open("w")
        cli = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
        env = {**os.environ, "BENCH_BOOTSTRAP": bootstrap, "BENCH_TAG": tag}
        self.proc = subprocess.Popen(
            [cli, "run", f"{__file__}:app", "--follow", "-q", "-c", f"job.dir={folder / 'job'}",
             "-c", f"systems.kafka.consumer.session.timeout.ms={SESSION_MS}",
             "-c", "systems.kafka.consumer.heartbeat.interval.ms=300"],
            env=env, stdout=self._out, stderr=subprocess.STDOUT)

    def generations(self) -> list[int]:
        return [int(m.group(1)) for m in _RUNS.finditer(self.log.read_text(errors="replace"))]


def _wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting until {what}")
        time.sleep(0.1)


def _feed(bootstrap: str, topic: str, stop: threading.Event) -> None:
    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        i = 0
        try:
            while not stop.is_set():
                for _ in range(40):
                    key = f"k{i % 200}".encode()
                    await producer.send(topic, json.dumps({"i": i}).encode(), key=key,
                                        partition=partition_for(key, 4))
                    i += 1
                await producer.flush()
                await asyncio.sleep(0.1)
        finally:
            await producer.stop()
    asyncio.run(go())


async def _outputs(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """(timestamp ms, pid) of every output record."""
    consumer = new_consumer(bootstrap, {}, brief=True)
    out: list[tuple[int, int]] = []
    try:
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        ends = await consumer.end_offsets(tps)
        while True:
            if all([await consumer.position(tp) >= ends[tp] for tp in tps]):
                break
            got = await consumer.getmany(timeout_ms=500)
            if not got:
                break
            out += [(r.timestamp, json.loads(r.value)[1]) for rs in got.values() for r in rs]
    finally:
        await stop_client(consumer)
    return out


def run_once(root: Path) -> dict[str, Any]:
    broker = TansuBroker(root / "tansu.log").start()
    tag = uuid.uuid4().hex[:8]
    b = broker.bootstrap
    stop = threading.Event()
    members: list[_Member] = []
    try:
        asyncio.run(ensure_topics(b, [TopicSpec(f"rb-in-{tag}", 4)]))
        feeder = threading.Thread(target=_feed, args=(b, f"rb-in-{tag}", stop))
        feeder.start()
        members = [_Member(root / f"m{i}", b, tag) for i in range(2)]
        _wait("two members run", lambda: all(m.generations() for m in members)
              and len({m.generations()[-1] for m in members}) == 1, 90)
        time.sleep(3)
        joined = time.time()
        members.append(_Member(root / "m2", b, tag))
        _wait("three members run", lambda: all(m.generations() for m in members)
              and len({m.generations()[-1] for m in members}) == 1, 90)
        settled = time.time()
        time.sleep(3)
        outs = asyncio.run(_outputs(b, f"rb-out-{tag}"))
        cps = asyncio.run(read_checkpoint_topic(b, f"__samza_checkpoint_rebalance-{tag}-1",
                                                {}, 30))
        survivors = {m.proc.pid for m in members[:2]}
        gaps = []
        for pid in survivors:
            ts = sorted(t / 1000 for t, p in outs if p == pid
                        and joined - 1 <= t / 1000 <= settled + 2)
            gaps.append(max((b2 - a for a, b2 in zip(ts, ts[1:], strict=False)), default=0.0))
        took = [float(m["rebalance_s"]) for m in cps.members.values()
                if m.get("pid") in survivors and m.get("rebalance_s") is not None]
        return {"gap_s": max(gaps), "rebalance_s": max(took) if took else None,
                "join_to_settled_s": settled - joined}
    finally:
        stop.set()
        for m in members:
            m.proc.terminate()
        for m in members:
            m.proc.wait(120)
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            results.append(run_once(Path(d)))
            print(json.dumps(results[-1]), flush=True)
    med = {k: statistics.median(r[k] for r in results if r[k] is not None)
           for k in ("gap_s", "rebalance_s", "join_to_settled_s")}
    print(json.dumps({"workload": "rebalance-pause", "runs": args.runs,
                      "median": {k: round(v, 3) for k, v in med.items()}}))


if __name__ == "__main__":
    main()
