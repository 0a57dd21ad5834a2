"""A Kafka job's check of its topics' partition counts while it runs
(``runtime.engine.partition_counts``; docs/kafka.md, "Partitions added to a topic"): every
``job.kafka.partition.check.ms`` while the brokers answer, one all-topics metadata request
(``runtime.kafka.admin.describe_topics``, which never creates a topic). A request that fails is
the broker watch's to report (``runtime.kafka.outage``); the next turn asks again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka.errors import KafkaError

from planner.owners import checkpoint_stream
from runtime.engine.partition_counts import PartitionWatch, planned_streams
from runtime.kafka.admin import describe_topics
from samza_dsl.errors import SamzaError

__all__ = ["KEY", "watch_partitions"]

log = logging.getLogger("samza_dsl.kafka")

KEY = "job.kafka.partition.check.ms"


def watch_partitions(job: Any, stop: Callable[[SamzaError], None]) -> PartitionWatch:
    """The partition watch of a ``runtime.kafka.job.KafkaJob`` whose plan and topics are set up
    (``job.topic_specs``); ``stop`` ends the job cleanly with the error
    (``Container.stop_with``). Its ``run`` goes beside the container's helpers."""
    topics = planned_streams(((s.name, s.partitions) for s in job.topic_specs), job.plan,
                             job.physical, job.changelog_topics,
                             {checkpoint_stream(job.job_name): "the job's checkpoints"})
    interval = job.plan.config.job.kafka_partition_check_ms / 1000.0

    async def read() -> Mapping[str, int | None] | None:
        if not job.watch.healthy:  # the broker watch says what goes on
            return None
        try:
            return await describe_topics(job.servers, [t.name for t in topics],
                                         timeout=job.timeout, **job.login)
        except (SamzaError, KafkaError, OSError, TimeoutError) as exc:
            log.debug("the job's partition counts were not read (%s); asked again in %.1f s",
                      exc, interval)
            return None

    return PartitionWatch(read, topics, interval, job_name=job.job_name,
                          reset=job.reset_command(), on_change=stop)
