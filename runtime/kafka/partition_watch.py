"""Topics whose partition count changes while a job runs (docs/kafka.md, "Partitions added to
a topic").

A job's plan fixes the partition count of each of its topics when it starts: a task reads and
writes the same partition number of each of its streams, and its consumer reads the partitions
the plan names, no others. Partitions added to an input later would never be read, and keys
would go to other partitions than the tasks' state was built from. So, as Samza's
``StreamPartitionCountMonitor`` and Kafka Streams do, a running job reads its topics' partition
counts every ``job.kafka.partition.check.ms`` while its brokers answer, and stops, after
committing what it processed, once one differs from its plan: the error names each changed
topic, both counts and what to do. It does not re-plan itself: a re-plan moves keys between
tasks, which only a new run can do safely.

>>> PlannedTopic("orders", 4, "input stream 'orders'", input=True).changed(8)
"input stream 'orders' (topic 'orders') has 8 partitions now, not the 4 the job was planned with: records in partitions 4 to 7 would never be read"
>>> PlannedTopic("job-counts-changelog", 4, "the changelog of store 'counts'").changed(6)
"the changelog of store 'counts' (topic 'job-counts-changelog') has 6 partitions now, not the 4 the job was planned with"
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaError

from planner.owners import checkpoint_stream
from runtime.kafka.admin import TopicSpec, describe_topics
from samza_dsl.config import config_value
from samza_dsl.errors import SamzaError

__all__ = ["KEY", "PartitionCountChanged", "PartitionWatch", "PlannedTopic", "changed_error",
           "planned_topics", "watch_partitions"]

log = logging.getLogger("samza_dsl.kafka")

KEY = "job.kafka.partition.check.ms"


class PartitionCountChanged(SamzaError):
    """A topic of the job has another partition count than its plan fixed."""


@dataclass(frozen=True)
class PlannedTopic:
    """A topic of the job: its name, the partition count the plan fixed, what it is to the job
    (``input stream 'orders'``, ``the changelog of store 'counts'``...)."""

    name: str
    partitions: int
    what: str
    #: an input: records others write to partitions it adds are never read
    input: bool = False

    def changed(self, now: int) -> str:
        """What a count of ``now`` partitions means, in a phrase."""
        text = (f"{self.what} (topic {self.name!r}) has {now} partitions now, not the "
                f"{self.partitions} the job was planned with")
        if self.input and now > self.partitions:
            first, last = self.partitions, now - 1
            parts = f"partition {first}" if first == last else f"partitions {first} to {last}"
            text += f": records in {parts} would never be read"
        return text


def planned_topics(specs: Iterable[TopicSpec], job_name: str, plan: Any,
                   physical: Mapping[str, str], changelogs: Mapping[str, str]
                   ) -> list[PlannedTopic]:
    """The job's topics (``specs``, with their planned counts), each said as what it is to the
    job: a stream of ``plan`` (``physical``: stream id -> topic), the changelog of a store
    (``changelogs``: store -> topic), its checkpoints, or another topic of its own."""
    said = {checkpoint_stream(job_name): ("the job's checkpoints", False)}
    said |= {topic: (f"the changelog of store {store!r}", False)
             for store, topic in changelogs.items()}
    said |= {physical[sid]: (f"{s.kind} stream {sid!r}", s.kind == "input")
             for sid, s in plan.streams.items() if sid in physical}
    return [PlannedTopic(spec.name, spec.partitions,
                         *said.get(spec.name, ("a topic of the job's own", False)))
            for spec in specs]


def changed_error(job_name: str, changes: list[str], reset: str) -> PartitionCountChanged:
    """The job's one line once ``changes`` (``PlannedTopic.changed`` phrases) were seen."""
    return PartitionCountChanged(
        f"job {job_name!r}: {'; '.join(changes)}. A running job reads and writes only the "
        f"partitions its plan fixed at its start, so it stopped, after committing what it had "
        f"processed. Run it again to plan for the new count: where the job's state, "
        f"intermediate streams or outputs have the old count, that run refuses to start, and "
        f"`{reset}` starts the job over (its state is rebuilt from its inputs; see "
        f"'Partitions added to a topic' in docs/kafka.md)")


class PartitionWatch:
    """Every ``interval`` seconds while ``healthy()`` (the brokers answer), the partition
    counts of ``topics`` from the brokers at ``servers``; ``on_change`` gets the job's error
    once one differs from its plan, and the watch ends. A topic the brokers no longer list is
    left to the broker watch's check of the job's data (``runtime.kafka.outage``), and a
    request that fails to the broker watch's outage handling: neither ends this watch."""

    def __init__(self, servers: str, topics: Iterable[PlannedTopic], interval: float, *,
                 job_name: str, reset: str, on_change: Callable[[SamzaError], None],
                 healthy: Callable[[], bool], timeout: float = 10.0,
                 login: Mapping[str, Any] | None = None) -> None:
        self.servers = servers
        self.topics = {t.name: t for t in topics}
        self.interval = interval
        self.job_name = job_name
        self.reset = reset
        self.on_change = on_change
        self.healthy = healthy
        self.timeout = timeout
        self.login = dict(login or {})
        #: the job's error, once a count changed
        self.error: PartitionCountChanged | None = None

    async def run(self) -> None:
        while self.error is None:
            await asyncio.sleep(self.interval)
            if self.healthy():
                await self.check()

    async def check(self) -> PartitionCountChanged | None:
        """The counts now; the error (also given to ``on_change``) if one changed."""
        try:
            found = await describe_topics(self.servers, list(self.topics),
                                          timeout=self.timeout, **self.login)
        except (SamzaError, KafkaError, OSError, TimeoutError) as exc:
            log.debug("the job's partition counts were not read (%s); checked again in %.1f s",
                      exc, self.interval)
            return None
        return self.seen(found)

    def seen(self, found: Mapping[str, int | None]) -> PartitionCountChanged | None:
        """The counts ``found`` (topic -> count, None for a topic gone), read here or by the
        broker watch's check of the job's topics; the error (also given to ``on_change``) if
        one differs from the plan."""
        changes = [t.changed(n) for name, t in self.topics.items()
                   if (n := found.get(name)) is not None and n != t.partitions]
        if not changes or self.error is not None:
            return self.error
        self.error = changed_error(self.job_name, changes, self.reset)
        self.on_change(self.error)
        return self.error


def watch_partitions(job: Any, stop: Callable[[SamzaError], None]) -> PartitionWatch:
    """The partition watch of a ``runtime.kafka.job.KafkaJob`` whose plan and topics are set
    up, run beside its broker watch while the brokers answer; ``stop`` ends the job cleanly
    with the error (``Container.stop_with``)."""
    topics = planned_topics(job.topic_specs, job.job_name, job.plan, job.physical,
                            job.changelog_topics)
    interval = config_value(job.plan.config, KEY) / 1000.0
    watch = PartitionWatch(job.servers, topics, interval, job_name=job.job_name,
                           reset=job.reset_command(), on_change=stop,
                           healthy=lambda: job.watch.healthy, timeout=job.timeout,
                           login=job.login)
    job.watch.beside.append(watch.run)
    return watch
