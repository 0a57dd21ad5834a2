"""Containers of ``kafka_apps.group_app`` as ``samza-dsl run --follow`` processes that form the
job's consumer group (tansu on 127.0.0.1), and what they wrote."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from kafka_helpers import consume_all, run

from planner.owners import checkpoint_stream
from runtime.engine.checkpoints import offsets_of
from runtime.kafka.admin import describe_topics
from runtime.kafka.system import (
    new_consumer,
    read_checkpoint_topic,
    stop_client,
    true_end_offsets,
)
from tests.proc_helpers import wait_or_dump

APPS = Path(__file__).parent / "kafka_apps.py"
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
#: tansu takes about half the session timeout to complete a join: a short one
SESSION_MS = 3000
GROUP_SETTINGS = ("-c", f"systems.kafka.consumer.session.timeout.ms={SESSION_MS}",
                  "-c", "systems.kafka.consumer.heartbeat.interval.ms=300")
_RUNS = re.compile(r"group generation (\d+): runs (.*?)(?: \(restoring (.*)\))?$")


class Member:
    """One ``samza-dsl run APP:group --follow`` process, with its own job.dir and log."""

    def __init__(self, folder: Path, bootstrap: str, tag: str, *args: str,
                 delay: float = 0.0, app: str = "group", env: dict[str, str] | None = None,
                 quiet: bool = True) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.log = folder / f"run-{time.monotonic_ns()}.log"
        env = {**os.environ, "SAMZA_TEST_BOOTSTRAP": bootstrap, "SAMZA_TEST_TAG": tag,
               "SAMZA_TEST_DELAY": str(delay), **(env or {})}
        self._out = self.log.open("w")
        self.proc = subprocess.Popen(
            [CLI, "run", f"{APPS}:{app}", "--follow", *(["-q"] if quiet else []),
             "-c", f"job.dir={folder / 'job'}",
             *GROUP_SETTINGS, *args],
            env=env, stdout=self._out, stderr=subprocess.STDOUT, text=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def assignment(self) -> tuple[int, list[str]] | None:
        """The generation and active tasks of the last assignment the member logged."""
        found = None
        for line in self.text().splitlines():
            m = _RUNS.search(line)
            if m:
                tasks = [] if m.group(2) == "no task" else m.group(2).split(", ")
                found = (int(m.group(1)), tasks)
        return found

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (SIGCONT first, for a stopped one): drain, commit, leave; its exit code."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"member {self.pid} did not stop in {timeout} s:\n"
                                 f"{self.text()[-3000:]}") from None
        finally:
            self._out.close()

    def wait(self, timeout: float) -> int:
        """Its exit code; if it has not exited ``timeout`` seconds on, its stacks and output in
        an AssertionError (``tests.proc_helpers.wait_or_dump``)."""
        try:
            return wait_or_dump(self.proc, timeout, self.text, f"member {self.pid}")
        finally:
            self._out.close()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)
        self._out.close()


def stop_all(members: list[Member]) -> None:
    """Stop each member still running (SIGTERM: drain, commit, leave); each must exit 0, but
    one that had not joined the group yet (it logged nothing: Python was still importing, on a
    busy machine) may die of the signal, as any process that has not set its handlers does."""
    for m in members:
        if m.alive():
            code = m.stop()
            text = m.text()
            assert code == 0 or (code == -signal.SIGTERM and not text.strip()), \
                f"member {m.pid} exited {code}:\n{text[-3000:]}"


def kill_left(members: list[Member]) -> None:
    """SIGKILL the members still running: a test's last word, whatever it ended with."""
    for m in members:
        if m.alive():
            m.kill()


def wait_for(what: str, check: Callable[[], Any], timeout: float,
             members: list[Member] = ()) -> Any:  # type: ignore[assignment]
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        for m in members:
            assert m.alive(), f"member {m.pid} ended ({m.proc.returncode}):\n{m.text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting until {what}" \
            + "".join(f"\n--- member {m.pid}:\n{m.text()[-2000:]}" for m in members)
        time.sleep(0.2)


def settled(members: list[Member], tasks: int) -> bool:
    """Every member logged an assignment of one generation, and together they run ``tasks``
    tasks, each once."""
    seen = [m.assignment() for m in members]
    if any(s is None for s in seen):
        return False
    gens = {s[0] for s in seen if s is not None}
    names = [t for s in seen if s is not None for t in s[1]]
    return len(gens) == 1 and len(names) == tasks == len(set(names)) \
        and all(s is not None and s[1] for s in seen)


def outputs(bootstrap: str, tag: str) -> list[list[Any]]:
    """[key, count, pid, i] of every record of the job's output."""
    topic = f"gout-{tag}"
    if run(describe_topics(bootstrap, [topic]))[topic] is None:
        return []
    got = run(consume_all(bootstrap, topic, 2, timeout=30))
    return [[k.decode(), *json.loads(v)] for records in got.values() for _, k, v in records
            if v and k]


def final_counts(outs: list[list[Any]]) -> dict[str, int]:
    """Per key, the highest count written: the count once every event was processed."""
    out: dict[str, int] = {}
    for key, n, _pid, _i in outs:
        out[key] = max(out.get(key, 0), n)
    return out


def topics_named(bootstrap: str, *words: str) -> list[str]:
    """The broker's topics whose names hold every one of ``words``."""
    async def names() -> list[str]:
        consumer = new_consumer(bootstrap, {}, brief=True)
        try:
            await consumer.start()
            return sorted(t for t in await consumer.topics() if all(w in t for w in words))
        finally:
            await stop_client(consumer)
    return run(names())


def timed_records(bootstrap: str, topic: str) -> list[tuple[int, int, int, bytes | None,
                                                            bytes | None]]:
    """Every record of every partition of ``topic``: (partition, offset, timestamp in ms,
    key, value), in each partition's order."""
    async def read() -> list[tuple[int, int, int, bytes | None, bytes | None]]:
        count = (await describe_topics(bootstrap, [topic]))[topic] or 0
        tps = [TopicPartition(topic, p) for p in range(count)]
        ends = await true_end_offsets(bootstrap, tps, {}, 30.0)
        consumer = new_consumer(bootstrap, {}, brief=True)
        out: list[tuple[int, int, int, bytes | None, bytes | None]] = []
        try:
            await consumer.start()
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            left = {tp for tp in tps if ends[tp] > 0}
            deadline = time.monotonic() + 30
            while left and time.monotonic() < deadline:
                for tp, recs in (await consumer.getmany(*left, timeout_ms=500)).items():
                    out.extend((tp.partition, r.offset, r.timestamp, r.key, r.value)
                               for r in recs)
                    if recs and recs[-1].offset + 1 >= ends[tp]:
                        left.discard(tp)
            assert not left, f"{topic}: partitions {left} not read to their ends {ends}"
        finally:
            await stop_client(consumer)
        return sorted(out, key=lambda r: (r[0], r[1]))
    return run(read())


def checkpoints(bootstrap: str, job: str, stream_id: str) -> tuple[dict[str, dict[int, int]],
                                                                   dict[str, int]]:
    """Per task, the offset of each partition of the input ``stream_id`` its last checkpoint
    holds, and when that checkpoint was written (ms)."""
    topic = checkpoint_stream(job)
    if run(describe_topics(bootstrap, [topic]))[topic] is None:
        return {}, {}
    read = run(read_checkpoint_topic(bootstrap, topic, {}, 10.0))
    offsets: dict[str, dict[int, int]] = {}
    for task, data in read.data.items():
        offsets[task] = {ssp.partition: off for ssp, off in offsets_of(data).items()
                         if ssp.stream_id == stream_id}
    return offsets, dict(read.timestamps)
