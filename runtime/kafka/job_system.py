"""Kafka's ``JobSystem`` (``runtime.engine.systems``): a job's runs on Kafka, and what
``samza-dsl`` does with a job whose streams are Kafka topics (load, dump, status, reset), each
through the brokers, a fetch or a produce at a time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition

from runtime.engine.dump import DumpSource, dump_lines, dump_source, job_dump_sources
from runtime.engine.feeding import mark, plan_feeding, read_marks, write_marks
from runtime.engine.job import SSP
from runtime.engine.status_rows import (
    STATUS_VERSION,
    containers,
    group_status,
    job_model,
    partitions,
    store_rows,
)
from runtime.host.job_lock import lock_dir
from runtime.host.jobdir import job_dir, metrics_stream
from runtime.kafka.admin import describe_topics
from runtime.kafka.group import host_name
from runtime.kafka.job import KafkaJob
from runtime.kafka.load_dump import (
    KafkaStreams,
    TopicReader,
    encode_load,
    kafka_held,
    kafka_load_file,
    kafka_streams,
    produce_load,
)
from runtime.kafka.reset import kafka_reset
from runtime.kafka.security import security_settings
from runtime.kafka.system import offset_bounds, read_checkpoint_topic, true_end_offsets
from samza_dsl.config import validate_config
from samza_dsl.errors import SamzaError

__all__ = ["KafkaJobSystem", "kafka_status", "kafka_dump_sources"]


class KafkaJobSystem:
    """A job whose streams are Kafka topics (``runtime.kafka.job.KafkaJob``)."""

    label = "Kafka"
    #: its metrics reach this machine through each container's Prometheus endpoint only
    metrics_in_log = False
    uncommitted_note = ("samza-dsl dump: --uncommitted: showing the records of open and aborted "
                        "transactions too, which no read_committed reader (nor the job) ever "
                        "reads")

    async def create(self, app: Any, config: Any, metrics: Any, *, follow: bool,
                     inputs: Mapping[str, Any]) -> KafkaJob:
        return await KafkaJob.create(app, config, metrics, follow=follow)

    async def prepare(self, app: Any, config: Any, containers: int, inputs: Mapping[str, Any],
                      check: Callable[[Any], Awaitable[None]]) -> KafkaJob:
        job = await KafkaJob.prepare(app, config)
        try:
            await check(job)
        except BaseException:
            job.lock.release()
            raise
        return job

    async def input_ends(self, job: Any, keys: Iterable[tuple[str, int]]
                         ) -> dict[tuple[str, int], int]:
        tps = {(sid, p): TopicPartition(job.physical[sid], p) for sid, p in keys
               if p < job.counts.get(sid, 0)}
        if not tps:
            return {}
        ends = await true_end_offsets(job.servers, tps.values(), job.consumer_settings,
                                      job.timeout)
        return {key: ends[tp] for key, tp in tps.items()}

    async def abandon(self, job: Any) -> None:
        with contextlib.suppress(Exception):
            await job.producer.close()
        with contextlib.suppress(Exception):
            await job.watch.stop()
        job.release_lock()

    def where(self, job: Any) -> str | None:
        return None

    def feed(self, app: Any, config: Any, given: Mapping[str, Sequence[Any]],
             source: Mapping[str, str], mode: str | None, sample_n: int) -> list[str]:
        return asyncio.run(_feed(app, config, given, source, mode, sample_n))

    def load_file(self, app: Any, config: Any, stream: str, path: str,
                  rows: Callable[[bool], Iterator[tuple[int, Any]]], again: str, *,
                  app_ref: str) -> str:
        async def load() -> tuple[int, str]:
            streams = await kafka_streams(app, config)
            streams.check(stream)
            keyed = streams.codecs[stream].keyed
            # read a line at a time, twice (checked, then sent a chunk at a time): the load's
            # memory does not grow with its file
            n = await kafka_load_file(streams, stream, path, lambda: rows(keyed),
                                      load_command=again)
            return n, streams.physical[stream]

        n, topic = asyncio.run(load())
        return f"loaded {n} message(s) into {stream} (topic {topic})"

    def dump_lines(self, app: Any, config: Any, stream: str, limit: int | None, *,
                   offsets: bool, uncommitted: bool, app_ref: str) -> Iterator[bytes]:
        """``dump_lines`` of a stream of a job on Kafka, as a downstream reader reads it:
        committed records only, whatever the job's guarantee (``uncommitted``: those of open
        and aborted transactions too). A stream whose topic does not exist is an error naming
        the topic and how it comes to be; so is an unknown name, listing the job's streams."""
        streams = asyncio.run(kafka_streams(app, config))
        with TopicReader(streams, committed=not uncommitted) as reader:
            source = dump_source(kafka_dump_sources(streams, reader), stream, streams.job_name)
            if reader.partitions(source.physical) is None:
                raise SamzaError(_missing_topic(streams, stream, source.physical, app_ref))
            yield from dump_lines(source, limit, offsets=offsets)

    def status(self, app: Any, config: Any, app_ref: str) -> dict[str, Any]:
        return asyncio.run(kafka_status(app, config, app_ref=app_ref))

    def reset(self, app: Any, config: Any, *, outputs: bool, app_ref: str
              ) -> tuple[str, list[str]]:
        return asyncio.run(kafka_reset(app, validate_config(dict(config)), outputs=outputs))

    def compact(self, app: Any, config: Any, batch: int, *, app_ref: str
                ) -> tuple[str, list[Any]]:
        raise SamzaError(f"{app_ref}: the job's streams are Kafka topics, which the brokers "
                         f"compact themselves (its changelog topics have cleanup.policy="
                         f"compact); samza-dsl compact works on the embedded local log")

    def open_job(self, app: Any, config: Any, *, app_ref: str) -> Any:
        raise SamzaError(f"{app_ref}: the job runs on Kafka, whose metrics this machine reads "
                         f"from each container's Prometheus endpoint: run `samza-dsl ui "
                         f"{app_ref} --from http://HOST:PORT/metrics` (metrics.reporters="
                         f"prometheus: container i serves on metrics.reporter.prometheus.port "
                         f"+ i)")


def kafka_dump_sources(streams: KafkaStreams, reader: Any) -> dict[str, DumpSource]:
    """Every stream of a job on Kafka that can be dumped (``job_dump_sources``), read through
    ``reader`` (``runtime.kafka.load_dump.TopicReader``)."""
    return job_dump_sources(
        streams.job_name, streams.plan, {sid: streams.codecs[sid] for sid in streams.physical},
        lambda sid: (reader, streams.physical[sid]), reader, streams.dead_letter,
        {name: (reader, topic) for name, topic in streams.changelogs.items()})


def _missing_topic(streams: Any, stream: str, topic: str, app_ref: str) -> str:
    where = f"topic {topic!r} does not exist on the Kafka brokers at {streams.servers}"
    kind = streams.plan.streams[stream].kind if stream in streams.plan.streams else None
    if kind == "input":
        return (f"input {stream!r}: {where}, so there is nothing to dump; `samza-dsl load "
                f"{app_ref} {stream} FILE.jsonl` creates it ({streams.counts[stream]} "
                f"partition(s)) and loads it, or create it yourself")
    if stream == metrics_stream(streams.job_name):
        return (f"the metrics stream: {where}; the job writes it when it runs with "
                f"metrics.reporters=snapshot")
    what = ("the dead-letter stream" if stream == streams.dead_letter
            else f"{kind} stream {stream!r}" if kind else f"changelog {stream!r}")
    return (f"{what}: {where}, so there is nothing to dump; the job creates it when it runs "
            f"(`samza-dsl run {app_ref}`)")


async def _feed(app: Any, config: Mapping[str, Any], given: Mapping[str, Sequence[Any]],
                source: Mapping[str, str], mode: str | None, sample_n: int) -> list[str]:
    streams = await kafka_streams(app, config)
    if mode == "replace":
        raise SamzaError(f"--replace: the inputs of job {streams.job_name!r} are Kafka topics "
                         f"({', '.join(streams.physical[s] for s in given)}), which are not "
                         f"emptied from here; write the new input to a new topic (the stream's "
                         f"physical_name) and `samza-dsl reset` the job, or use --append")
    held = await kafka_held(streams, list(given))
    root = job_dir(streams.job_name, streams.plan.config.job)
    marks = read_marks(root)
    load, notes = plan_feeding(given, source, held, marks, mode, sample_n, streams.job_name,
                                f"in topics on {streams.servers}")
    # every message of every input is encoded before any is sent: a bad one loads nothing
    encoded = {sid: encode_load(streams, sid, given[sid], label=f"{source[sid]} message")
               for sid in load}
    loaded: list[str] = []
    for sid in load:
        try:
            n = await produce_load(streams, encoded[sid],
                                   load_command=f"samza-dsl load APP {sid}")
        except SamzaError as exc:
            write_marks(root, marks)
            if not loaded:
                raise
            raise SamzaError(f"{'; '.join(loaded)} (all of it); then {exc}") from exc
        loaded.append(f"loaded {n:,} message(s) into {sid} (topic {streams.physical[sid]})")
        notes.append(loaded[-1])
        mark(marks, sid, source[sid], sample_n, mode, held[sid],
              (await kafka_held(streams, [sid]))[sid])
    write_marks(root, marks)
    return notes


async def kafka_status(app: Any, config: Mapping[str, Any], *, app_ref: str = "APP",
                       timeout: float = 10.0, now: float | None = None) -> dict[str, Any]:
    """The status of a job on Kafka: its checkpoint topic, its topics' offsets, the locks and
    stores under its job.dir on this machine. Errors name the brokers and what to do."""
    # what aiokafka logs on the way (a broker that does not answer) the errors here say once
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        return await _kafka_status(app, config, app_ref, timeout, now)
    finally:
        quiet.setLevel(level)


async def _kafka_status(app: Any, config: Mapping[str, Any], app_ref: str, timeout: float,
                        now: float | None) -> dict[str, Any]:
    streams = await kafka_streams(app, config, timeout=timeout)
    topic = f"__samza_checkpoint_{streams.job_name}"
    login = security_settings(streams.consumer_settings)
    if (await describe_topics(streams.servers, [topic], timeout=timeout, **login))[topic] is None:
        raise SamzaError(f"job {streams.job_name!r} has not run on the Kafka brokers at "
                         f"{streams.servers}: its checkpoint topic {topic!r} does not exist; "
                         f"run it first with `samza-dsl run {app_ref}`")
    cp = await read_checkpoint_topic(streams.servers, topic, streams.consumer_settings, timeout)
    model = job_model(streams.plan, streams.counts, cp.elasticity)
    tps = {TopicPartition(streams.physical[s.stream_id], s.partition)
           for t in model.tasks for s in t.ssps if streams.topics.get(streams.physical[s.stream_id])}
    tps |= {TopicPartition(tp, p) for tp in streams.changelogs.values()
            for p in range(streams.topics.get(tp) or 0)}
    got = await offset_bounds(streams.servers, dict.fromkeys(tps), streams.consumer_settings,
                              timeout, what="reading the offsets of the job's topics")

    def bounds(ssp: SSP) -> tuple[int, int] | None:
        return got.get(TopicPartition(streams.physical[ssp.stream_id], ssp.partition))

    def changelog(store: str) -> tuple[str, int | None] | None:
        name = streams.changelogs.get(store)
        if name is None:
            return None
        n = streams.topics.get(name)
        return name, (None if n is None else
                      sum(got[TopicPartition(name, p)][1] - got[TopicPartition(name, p)][0]
                          for p in range(n)))

    rows = partitions(model, cp.data, bounds, cp.timestamps, now=now)
    group = group_status(streams.job_name, cp.members, rows, cp.data, cp.member_generation)
    last = None if cp.last_write is None else cp.last_write / 1000.0
    common = {
        "version": STATUS_VERSION, "job": streams.job_name, "system": "kafka",
        "bootstrap_servers": streams.servers, "elasticity_factor": cp.elasticity,
        "configured_elasticity_factor": int(streams.plan.config.job.elasticity_factor),
        "checkpoints": {"where": f"topic {topic}", "last_written": last},
        "partitions": rows, "group": group, "metrics": None}
    root = os.path.abspath(job_dir(streams.job_name, streams.plan.config.job))
    if group is not None and group["members"]:
        # a consumer group: its members' own job dirs (those on this machine hold its stores'
        # files and its containers' locks); nothing of a job.dir another run left here
        mine = [m["job_dir"] for m in group["members"]
                if m.get("job_dir") and m["host"] == host_name()]
        conts, locks = containers(root, True, 0, elsewhere=True) if root in mine else ([], [])
        return {**common, "job_dir": None, "generation": cp.generation,
                "containers": conts, "locks": locks,
                "containers_note": f"the job runs as the consumer group {streams.job_name!r}: "
                                   f"its members, on every host, are listed under the group",
                "stores": store_rows(model, mine, changelog)}
    count = int(streams.plan.config.job.container_count)
    conts, locks = containers(root, cp.generation is not None, count, elsewhere=True)
    age = "" if last is None else f" {max(0.0, (now or time.time()) - last):.1f} s ago"
    note = (f"only containers on this machine show running (by their locks in {lock_dir(root)});"
            f" containers on other machines cannot be seen from here, and the brokers do not "
            f"know them either (they read without a consumer group). The checkpoint topic "
            f"{topic!r} was last written{age or ': never'}")
    return {**common, "job_dir": root, "generation": cp.generation,
            "containers": conts, "locks": locks, "containers_note": note,
            "stores": store_rows(model, [root], changelog)}
