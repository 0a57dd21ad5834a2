"""The task assignor in a real consumer group (tansu on 127.0.0.1, aiokafka consumers): two
members split a plan's tasks as whole tasks, the one left gets all of them, and a member running
another plan is refused with one line naming both members and both plans."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka_apps import assignor_app as plan_app
from kafka_apps import assignor_job as job_of
from kafka_helpers import create_topic, run

from runtime.kafka.assignor import AssignmentRefused, TaskAssignor, consumer_generation

#: tansu takes about half the session timeout to complete a join
SESSION_MS = 3000


def member(servers: str, group: str, job: Any, job_name: str, container: str
           ) -> tuple[AIOKafkaConsumer, TaskAssignor]:
    assignor = TaskAssignor(job, job_name, host="127.0.0.1", container=container,
                            standby_replicas=1)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=servers, group_id=group, enable_auto_commit=False,
        partition_assignment_strategy=(assignor,), session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=300, rebalance_timeout_ms=SESSION_MS, max_poll_interval_ms=60_000)
    assignor.attach(consumer)
    return consumer, assignor


async def settle(consumers: list[AIOKafkaConsumer], done: Any, what: str,
                 timeout: float = 40.0) -> None:
    """Poll every consumer (so each takes part in rebalances) until ``done()``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"the group did not settle: {what}"
        await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))


def partitions_of(job: Any, names: list[str]) -> set[TopicPartition]:
    return {TopicPartition(job.plan.streams[s.stream_id].physical_name, s.partition)
            for t in job.tasks if t.name in names for s in t.ssps}


def test_two_members_split_whole_tasks_the_last_gets_all_and_another_plan_is_refused(
        kafka_bootstrap: str) -> None:
    tag = uuid.uuid4().hex[:8]
    job_name = f"assign-{tag}-1"
    job = job_of(plan_app(tag))
    everything = [t.name for t in job.tasks]
    group = job_name

    async def scenario() -> None:
        probe = TaskAssignor(job, job_name)
        for topic in probe.topics():
            await create_topic(kafka_bootstrap, topic, 1 if "rules" in topic else 4)
        a, sa = member(kafka_bootstrap, group, job, job_name, "0")
        b, sb = member(kafka_bootstrap, group, job, job_name, "1")
        started: list[AIOKafkaConsumer] = []
        try:
            for consumer, assignor in ((a, sa), (b, sb)):
                await consumer.start()
                started.append(consumer)
                consumer.subscribe(assignor.topics())

            def split() -> bool:
                ta, tb = sa.current, sb.current
                return (ta is not None and tb is not None and ta.generation == tb.generation
                        and len(ta.active) == len(tb.active) == len(everything) // 2)
            await settle([a, b], split, "two members, four tasks each")
            ta, tb = sa.current, sb.current
            assert ta is not None and tb is not None
            assert sorted(ta.active + tb.active) == sorted(everything)
            # the group's own generation (tansu counts from 0)
            assert ta.generation == tb.generation == consumer_generation(a) >= 0
            assert ta.owners == tb.owners
            # whole tasks: each member reads exactly the partitions of its tasks
            assert a.assignment() == partitions_of(job, ta.active)
            assert b.assignment() == partitions_of(job, tb.active)
            # the standby of each task sits with the other member
            assert sorted(ta.standby) == sorted(tb.active)
            assert sorted(tb.standby) == sorted(ta.active)

            await b.stop()
            started.remove(b)
            first = ta.generation

            def alone() -> bool:
                t = sa.current
                return t is not None and t.generation > first and \
                    len(t.active) == len(everything)
            await settle([a], alone, "the member left holds every task")
            assert a.assignment() == partitions_of(job, everything)
            mine = sa.current
            assert mine is not None and mine.standby == []  # no other member to hold one

            odd_job = job_of(plan_app(tag, factor=4))
            c, sc = member(kafka_bootstrap, group, odd_job, job_name, "2")
            await c.start()
            started.append(c)
            c.subscribe(sc.topics())
            await settle([a, c], lambda: sc.refusal is not None, "the odd member is answered")
            with pytest.raises(AssignmentRefused) as info:
                sc.tasks()
            msg = str(info.value)
            assert "\n" not in msg
            for part in (sc.fingerprint, sa.fingerprint, "(127.0.0.1/2)", "(127.0.0.1/0)",
                         "runs a different plan from the group leader",
                         "run the same application and config on every member"):
                assert part in msg, (part, msg)
            assert c.assignment() == set()
            kept = sa.tasks()
            assert kept is not None and sorted(kept.active) == sorted(everything)
            assert a.assignment() == partitions_of(job, everything)
        finally:
            for consumer in started:
                await consumer.stop()

    run(scenario())
