"""The PostgreSQL output exactly once under SIGKILL while the job runs at least once towards
Kafka (``job.processing.guarantee=at-least-once``): the job of ``pg_kafka_app.py`` reads a
topic of 4 partitions, inserts the kept inputs into table ``events`` and upserts every input,
repartitioned by key through an intermediate stream, into table ``latest``. It runs as a
process (``samza-dsl run --follow``) while a thread of the test appends input to the topic,
and is killed 20 times: at every commit point of a task with sinks (``runtime.engine.faults``; the
database's commit is the prepare of ``commit.sinks-prepared``, so a kill there leaves the
database ahead of the checkpoint and the restart replays what the database holds), after
batches and at seeded random times. A last run drains the input. Then every kept input is a
row of ``events`` exactly once, each key's row of ``latest`` holds its last input, and the
positions table holds each input partition's last offset.

With the output's skip of replayed positions switched off (``TEST_PG_NO_SKIP=1``, see
``pg_kafka_app.py``) the same check finds rows written twice: the check can fail.

Inserts stay exactly once only where the sink's task reads the input itself: under at least
once, a kill replays the messages an upstream task already sent to an intermediate stream, and
the copies are new messages there (new offsets) whose rows the positions cannot tell apart.
That is why the rows that go through ``partition_by`` are upserted by key.

While ``runtime/kafka/job.py`` refuses a Kafka job with an output written by a sink ("mixes
systems (kafka, pg)"), both tests end as expected failures at their first run, naming the
refusal; once it runs such jobs, they run in full.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from kafka_helpers import create_topic, run
from pg_kafka_app import PARTITIONS, kept

from operators.hashing import partition_for
from runtime.engine.faults import SINK_POINTS
from runtime.kafka.admin import describe_topics
from samza_dsl.testing.postgres import PostgresServer
from tests.proc_helpers import finish
from tests.sink_crash_helpers import REACHED

ROOT = Path(__file__).resolve().parents[2]
APP = f"{Path(__file__).resolve().parent / 'pg_kafka_app.py'}:app"
KILLS = int(os.environ.get("SAMZA_DSL_PG_KILLS", "20"))
SEED = int(os.environ.get("SAMZA_DSL_PG_SEED", "20260414"))
KEYS = 40


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


class Job:
    """The job of one test: its topic, database and runs, and what was appended."""

    def __init__(self, bootstrap: str, server: PostgresServer, tmp: Path) -> None:
        self.bootstrap = bootstrap
        self.tag = uuid.uuid4().hex[:8]
        self.dir = tmp / f"job-{self.tag}"
        self.topic = f"pgk-events-{self.tag}"
        self.conninfo = server.create_database(f"pgk_{self.tag}")
        self.execute("CREATE TABLE events (id bigint, k text)")
        self.execute("CREATE TABLE latest (k text PRIMARY KEY, n bigint, id bigint)")
        run(create_topic(bootstrap, self.topic, PARTITIONS))
        #: per key, its inputs' ids in order
        self.by_key: dict[str, list[int]] = collections.defaultdict(list)
        self.loaded = 0

    def execute(self, query: str) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            cur = conn.execute(query.encode())
            return list(cur.fetchall()) if cur.description is not None else []

    async def append(self, producer: AIOKafkaProducer, n: int, rng: random.Random) -> None:
        """``n`` more inputs, each record sent and acknowledged before the next (each its own
        batch, so that tansu's end offsets are the logs' ends for the last, bounded run)."""
        for _ in range(n):
            key = f"k{rng.randrange(KEYS)}"
            ids = self.by_key[key]
            value = {"id": self.loaded, "n": len(ids) + 1}
            await producer.send_and_wait(self.topic, json.dumps(value).encode(),
                                         key=key.encode(),
                                         partition=partition_for(key.encode(), PARTITIONS))
            ids.append(self.loaded)
            self.loaded += 1

    def load(self, n: int, rng: random.Random) -> None:
        async def go() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap,
                                        request_timeout_ms=10_000)
            await producer.start()
            try:
                await self.append(producer, n, rng)
            finally:
                await producer.stop()
        run(go())

    def run(self, crash_at: str | None, kill_after: float | None, follow: bool,
            no_skip: bool = False, *extra: str) -> tuple[int, str]:
        env = {**os.environ, "TEST_KAFKA": self.bootstrap, "TEST_TAG": self.tag,
               "TEST_PG": self.conninfo, "PYTHONFAULTHANDLER": "1"}
        env.pop("SAMZA_DSL_CRASH_AT", None)
        env.pop("TEST_PG_NO_SKIP", None)
        if crash_at:
            env["SAMZA_DSL_CRASH_AT"] = crash_at
        if no_skip:
            env["TEST_PG_NO_SKIP"] = "1"
        cmd = [sys.executable, "-m", "runtime.ops.cli", "run", APP, "-c", f"job.dir={self.dir}",
               "-c", "job.processing.guarantee=at-least-once", "-c", "job.coordinator=static",
               "-c", "job.bounded.stall.ms=60000", "-q", "--show", "0", *extra] + \
            (["--follow"] if follow else [])
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        # a crash point is reached within seconds; a run that has not died by then is killed
        code, err = finish(proc, kill_after if kill_after is not None else 15.0 if follow
                           else None, 120)
        return code, err

    def check(self) -> tuple[dict[int, int], list[str]]:
        """Each kept input's rows in ``events`` (id -> count), and what is wrong beside rows
        written twice: inputs never written, wrong values of ``latest``, positions off."""
        counts = dict(self.execute("SELECT id, count(*) FROM events GROUP BY id"))
        wanted = {i for i in range(self.loaded) if kept(i)}
        wrong = []
        missing = wanted - set(counts)
        if missing:
            wrong.append(f"ids {sorted(missing)[:10]} never written ({len(missing)} in all)")
        if set(counts) - wanted:
            wrong.append(f"ids not kept written: {sorted(set(counts) - wanted)[:10]}")
        latest = {k: (n, i) for k, n, i in self.execute("SELECT k, n, id FROM latest")}
        truth = {k: (len(ids), ids[-1]) for k, ids in self.by_key.items()}
        if latest != truth:
            off = {k: (latest.get(k), v) for k, v in truth.items() if latest.get(k) != v}
            wrong.append(f"latest rows off (got, wanted): {dict(list(off.items())[:5])}")
        ends = self.execute("SELECT part, max(last_offset) FROM samza_dsl_positions "
                            "WHERE output = 'event-rows' AND stream = 'events' GROUP BY part")
        if sum(o + 1 for _, o in ends) != self.loaded:
            wrong.append(f"positions of the input {sorted(ends)} do not reach its "
                         f"{self.loaded} records")
        return counts, wrong


class Appender(threading.Thread):
    """Appends inputs to the job's topic while it runs."""

    def __init__(self, job: Job, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.job, self.rng = job, rng
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._append())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    async def _append(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.job.bootstrap,
                                    request_timeout_ms=10_000)
        await producer.start()
        try:
            while not self.stop.is_set():
                await self.job.append(producer, 8, self.rng)
                await asyncio.sleep(0.05)
        finally:
            await producer.stop()

    def __enter__(self) -> Appender:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(30)
        assert not self.is_alive(), "the appender did not stop"
        assert self.error is None, f"appending failed: {self.error!r}"


def _pick(rng: random.Random) -> tuple[str | None, float | None, str]:
    """A seeded kill: at a random time of a run, or the n-th time it reaches a point."""
    if rng.random() < 0.4:
        after = rng.uniform(1.2, 3.0)
        return None, after, f"after {after:.2f}s"
    point = rng.choice(REACHED)
    point = f"{point}:{rng.randint(1, 3 if point == 'batch' else 12)}"
    return point, None, point


def _kill_rounds(job: Job, planned: list[str], kills: int, rng: random.Random,
                 no_skip: bool = False) -> list[str]:
    """``kills`` runs killed with SIGKILL, at the ``planned`` points first, then at seeded
    ones, while input is appended; then a last, bounded run to the end of the input."""
    where: list[str] = []
    with Appender(job, random.Random(rng.random())):
        while len(where) < kills:
            if planned:
                crash_at, after = planned.pop(0), None
                what = crash_at
            else:
                crash_at, after, what = _pick(rng)
            code, err = job.run(crash_at, after, True, no_skip)
            assert code == -signal.SIGKILL, \
                f"run {len(where) + 1} ({what}) exited with {code}:\n{err[-4000:]}"
            where.append(what)
    code, err = job.run(None, None, False, no_skip)
    assert code == 0, f"the last run exited with {code}:\n{err[-4000:]}"
    return where


def test_sigkill_at_least_once_on_kafka_leaves_each_row_once(
        kafka_bootstrap: str, pg_server: PostgresServer, tmp_path: Path) -> None:
    job = Job(kafka_bootstrap, pg_server, tmp_path)
    rng = random.Random(SEED)
    job.load(300, rng)
    began = time.monotonic()
    # every commit point, the database's commit (commit.sinks-prepared) at its first commit
    # and later ones; then seeded points and times
    planned = [f"{p}:{n}" for p in SINK_POINTS for n in (1, 6)] + [
        "commit.outputs-flushed:4", "commit.start:3", "batch:2", "commit.done:5"]
    kills = _kill_rounds(job, planned, KILLS, rng)
    counts, wrong = job.check()
    twice = {i: n for i, n in counts.items() if n > 1}
    print(f"{len(kills)} kills in {time.monotonic() - began:.1f} s ({', '.join(kills)}); "
          f"{job.loaded} inputs")
    assert not twice, f"ids written more than once: {dict(list(twice.items())[:10])} " \
                      f"({len(twice)} in all; kills: {kills})"
    assert not wrong, f"{'; '.join(wrong)} (kills: {kills})"
    # the outputs the sinks write are no topics of the broker
    found = asyncio.run(describe_topics(kafka_bootstrap, ["event-rows", "latest"]))
    assert found == {"event-rows": None, "latest": None}, found


def test_without_the_skip_the_check_finds_rows_written_twice(
        kafka_bootstrap: str, pg_server: PostgresServer, tmp_path: Path) -> None:
    job = Job(kafka_bootstrap, pg_server, tmp_path)
    rng = random.Random(SEED + 1)
    job.load(300, rng)
    # one kill that must leave rows twice whatever the timing: a bounded run whose only
    # commit is its last, killed once the database committed it and before its checkpoint
    code, err = job.run("commit.sinks-prepared:1", None, False, True,
                        "-c", "task.commit.ms=600000")
    assert code == -signal.SIGKILL, f"exited with {code}, not killed:\n{err[-4000:]}"
    kills = _kill_rounds(job, ["commit.sinks-prepared:3", "commit.checkpointed:2",
                               "commit.sinks-prepared:8"], 3, rng, no_skip=True)
    counts, wrong = job.check()
    twice = {i: n for i, n in counts.items() if n > 1}
    print(f"without the skip: {len(twice)} ids written more than once after "
          f"{1 + len(kills)} kills; {job.loaded} inputs")
    assert twice, "the skip switched off, rows should have been written twice"
    assert not wrong, "; ".join(wrong)  # upserts are right and nothing is lost all the same
