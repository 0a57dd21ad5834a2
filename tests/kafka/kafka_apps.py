"""Applications the Kafka tests run, in processes of their own too: ``samza-dsl run
tests/kafka/kafka_apps.py:app`` builds ``regroup_app`` from the environment
(``SAMZA_TEST_BOOTSTRAP``, ``SAMZA_TEST_TAG``, ``SAMZA_TEST_DELAY``,
``SAMZA_TEST_PROGRESS``)."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from runtime.engine.job import JobModel, build_job_model
from samza_dsl import KV, Context, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem, MemorySystem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))

from eos_app import Count  # noqa: E402

SERDE = KVSerde(StringSerde(), JsonSerde())


class Regroup:
    """KV(str(i % 5), [pid, i, task]) for an event {"i": i}, after an optional delay."""

    def __init__(self, delay: float = 0.0, progress: str | None = None) -> None:
        self.delay = delay
        self.progress = progress  # a directory: the count so far goes to the file <pid>
        self.count = 0

    def init(self, ctx: Context) -> None:
        self.task = ctx.task_name

    def __call__(self, kv: KV[Any, Any]) -> KV[str, Any]:
        if self.delay:
            time.sleep(self.delay)
        self.count += 1
        if self.progress and self.count % 10 == 0:
            with open(os.path.join(self.progress, str(os.getpid())), "w") as f:
                f.write(str(self.count))
        i = kv.value["i"]
        return KV(str(i % 5), [os.getpid(), i, self.task])


def regroup_app(bootstrap: str, tag: str, *, delay: float = 0.0, progress: str | None = None,
                **config: Any) -> StreamApplication:
    """events (4 partitions) -> partition_by(i % 7) -> map -> out (3 partitions)."""
    app = StreamApplication(f"regroup-{tag}", config={"task.commit.ms": 100, **config})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    events = app.input(kafka.input("events", serde=SERDE, physical_name=f"events-{tag}"))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"out-{tag}", partitions=3))
    events.partition_by(lambda kv: kv.value["i"] % 7, lambda kv: kv.value,
                        name="by-group").map(Regroup(delay, progress), name="regroup").send_to(out)
    return app


class Tag:
    """Emits KV(key, [task name, value]): which (virtual) task saw the message."""

    def init(self, ctx: Context) -> None:
        self.task = ctx.task_name

    def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
        return KV(kv.key, [self.task, kv.value])


def tag_app(bootstrap: str, tag: str, factor: int) -> StreamApplication:
    app = StreamApplication(f"tag-{tag}", config={"job.elasticity.factor": factor,
                                                  "task.commit.ms": 100})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    inp = app.input(kafka.input("in", serde=SERDE, physical_name=f"in-{tag}"))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"out-{tag}", partitions=2))
    inp.map(Tag(), name="tag").send_to(out)
    return app


class CountInTable:
    """Counts each key in the table ``counts``."""

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("counts")

    def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, n)


def assignor_app(tag: str = "t", factor: int = 2, parts: int = 4) -> StreamApplication:
    """Clicks (4 partitions) enriched from a table filled by a side input, counted in a table
    with a changelog, and rules read by every task through a broadcast stream."""
    app = StreamApplication(f"assign-{tag}", config={"job.elasticity.factor": factor})
    mem = MemorySystem()
    users = app.table("users", serde=SERDE, processor=lambda m: [m], side_inputs=[
        mem.input("user-updates", serde=SERDE, partitions=parts, physical_name=f"updates-{tag}")])
    app.table("counts", serde=SERDE)
    out = app.output(mem.output("out", serde=SERDE, partitions=2, physical_name=f"out-{tag}"))
    (app.input(mem.input("clicks", serde=SERDE, partitions=parts, physical_name=f"clicks-{tag}"))
     .join_table(users, combine=lambda m, u: m, name="enrich")
     .map(CountInTable(), name="count").send_to(out))
    rules = app.input(mem.input("rules", serde=SERDE, partitions=1, physical_name=f"rules-{tag}"))
    rules.broadcast(name="all-rules").sink(lambda m: None, name="drop")
    return app


def assignor_job(app: StreamApplication) -> JobModel:
    """The job model of ``app`` (a stream without a count has 4 partitions)."""
    plan = app.plan()
    counts = {sid: s.partitions or 4 for sid, s in plan.streams.items()}
    return build_job_model(plan, counts, app.config["job.elasticity.factor"])


class CountWithPid:
    """Counts each key in the table ``counts``: KV(key, [count, pid, i]), after an optional
    delay per message."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("counts")

    def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
        if self.delay:
            time.sleep(self.delay)
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, [n, os.getpid(), kv.value["i"]])


def group_app(bootstrap: str, tag: str, *, delay: float = 0.0, **config: Any
              ) -> StreamApplication:
    """events (4 partitions) -> a count per key in a table with a changelog -> out: the job the
    consumer group tests start as several `samza-dsl run --follow` processes."""
    app = StreamApplication(f"group-{tag}", config={"task.commit.ms": 200, **config})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    events = app.input(kafka.input("events", serde=SERDE, physical_name=f"gevents-{tag}"))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"gout-{tag}", partitions=2))
    app.table("counts", serde=SERDE)
    events.map(CountWithPid(delay), name="count").send_to(out)
    return app


def window_app(bootstrap: str, tag: str, **config: Any) -> StreamApplication:
    """events ``KV(user, {"user", "ts"})`` (4 partitions, event time ``ts``) -> ``partition_by``
    user -> a 10 s tumbling event-time window counting each user's events -> out:
    ``KV(user, {"start": pane id, "n": count})`` (2 partitions)."""
    app = StreamApplication(f"gwin-{tag}", config={"task.commit.ms": 200, **config})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    events = app.input(kafka.input("events", serde=SERDE, physical_name=f"gwevents-{tag}",
                                   partitions=4, event_time=event_ts))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"gwout-{tag}",
                                  partitions=2))
    (events.partition_by(lambda kv: kv.value["user"], lambda kv: kv.value, name="by-user")
        .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                       fold=lambda kv, n: n + 1, event_time=event_ts),
                name="w")
        .map(lambda pane: KV(pane.key.key, {"start": pane.key.pane_id, "n": pane.message}),
             name="pane")
        .send_to(out))
    return app


def count_app(bootstrap: str, tag: str, **config: Any) -> StreamApplication:
    """events (as ``window_app``'s) -> ``partition_by`` user -> each user's running count in a
    table with a changelog -> out: ``KV(user, n)`` (2 partitions)."""
    app = StreamApplication(f"gcount-{tag}", config={"task.commit.ms": 200, **config})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    events = app.input(kafka.input("events", serde=SERDE, physical_name=f"gwevents-{tag}",
                                   partitions=4))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"gwout-{tag}",
                                  partitions=2))
    app.table("counts", serde=SERDE)
    (events.partition_by(lambda kv: kv.value["user"], lambda kv: kv.value, name="by-user")
        .map(Count(), name="count").send_to(out))
    return app


def rides_sessions_app(bootstrap: str, tag: str, conninfo: str) -> StreamApplication:
    """``tests/rides.py``'s sessions of drivers on the topics ``<id>-<tag>``, into the topic
    ``sessions-<tag>`` and, upserted by driver and start, the table ``sessions`` of the
    PostgreSQL database ``conninfo``; late messages into ``late-<tag>``."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from samza_dsl.postgres import PostgresSystem
    from tests.rides import build_sessions

    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    rows = PostgresSystem("pg", conninfo=conninfo).output_table(
        "session-rows", table="sessions", key=["driver", "start_ms"], upsert=True,
        columns={"driver": "driver", "start_ms": "start", "trips": "trips", "fares": "fares",
                 "cut": "cut"})
    return build_sessions(kafka, f"rides-sessions-{tag}", tag, outputs=[rows],
                          late_to=kafka.output("late", serde=SERDE, partitions=1,
                                               physical_name=f"late-{tag}"))


def ttl_app(bootstrap: str, tag: str, **config: Any) -> StreamApplication:
    """events ``KV(key, {"kind": "put" | "get", "ts", "i"})`` (4 partitions): a put goes to the
    table ``sessions`` (a ttl of 10 s of event time ``ts``), a get is joined with it -> out:
    ``KV(key, [i, the ts of the entry found or None, pid])`` (2 partitions)."""
    app = StreamApplication(f"gttl-{tag}", config={"task.commit.ms": 200, **config})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    table = app.table("sessions", serde=SERDE, ttl=timedelta(seconds=10),
                      ttl_event_time=lambda v: v["ts"])
    events = app.input(kafka.input("events", serde=SERDE, physical_name=f"gtevents-{tag}"))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"gtout-{tag}",
                                  partitions=2))
    events.filter(lambda kv: kv.value["kind"] == "put", name="puts").send_to(table)
    (events.filter(lambda kv: kv.value["kind"] == "get", name="gets")
        .join_table(table, combine=lambda m, r: KV(
            m.key, [m.value["i"], r and r.value["ts"], os.getpid()]), name="lookup")
        .send_to(out))
    return app


def event_ts(kv: KV[Any, Any]) -> float:
    return float(kv.value["ts"])


def __getattr__(name: str) -> Any:
    if name == "window":
        return window_app(os.environ["SAMZA_TEST_BOOTSTRAP"], os.environ["SAMZA_TEST_TAG"])
    if name in ("model", "model_local"):  # a drawn reference-model case (SAMZA_TEST_CASE)
        for path in (Path(__file__).resolve().parents[2], Path(__file__).resolve().parent):
            if str(path) not in sys.path:
                sys.path.insert(0, str(path))
        from model_case import model_app_from_env
        return model_app_from_env(local=name == "model_local")
    if name == "rides":  # issue 62's newcomer's case (tests/rides.py)
        root = str(Path(__file__).resolve().parents[2])
        if root not in sys.path:
            sys.path.insert(0, root)
        from tests.rides import build
        tag = os.environ["SAMZA_TEST_TAG"]
        return build(KafkaSystem("kafka", bootstrap_servers=os.environ["SAMZA_TEST_BOOTSTRAP"]),
                     f"rides{tag}", tag)
    if name == "rides_sessions":  # the newcomer's trips into sessions (tests/rides.py)
        return rides_sessions_app(os.environ["SAMZA_TEST_BOOTSTRAP"],
                                  os.environ["SAMZA_TEST_TAG"], os.environ["SAMZA_TEST_PG"])
    if name == "ttl":
        return ttl_app(os.environ["SAMZA_TEST_BOOTSTRAP"], os.environ["SAMZA_TEST_TAG"])
    if name == "count":
        return count_app(os.environ["SAMZA_TEST_BOOTSTRAP"], os.environ["SAMZA_TEST_TAG"])
    if name == "etjoin":  # ride requests joined with acceptances within 60 s of event time
        from etjoin_app import build

        tag = os.environ["SAMZA_TEST_TAG"]
        return build(KafkaSystem("kafka", bootstrap_servers=os.environ["SAMZA_TEST_BOOTSTRAP"]),
                     partitions=4, name=f"etjoin-{tag}", config={"task.commit.ms": 200},
                     topics={s: f"{s}-{tag}" for s in ("requests", "accepts", "matches")})
    if name == "group":
        return group_app(os.environ["SAMZA_TEST_BOOTSTRAP"], os.environ["SAMZA_TEST_TAG"],
                         delay=float(os.environ.get("SAMZA_TEST_DELAY", "0")))
    if name == "app":
        return regroup_app(os.environ["SAMZA_TEST_BOOTSTRAP"], os.environ["SAMZA_TEST_TAG"],
                           delay=float(os.environ.get("SAMZA_TEST_DELAY", "0")),
                           progress=os.environ.get("SAMZA_TEST_PROGRESS"))
    raise AttributeError(name)
