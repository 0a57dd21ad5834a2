"""A job whose streams are Kafka topics: plans it against the broker, creates the topics it
needs, and builds its container over ``runtime.kafka.system``.

The topics: inputs must exist (their partition counts come from the broker when the descriptor
does not give them); outputs and intermediate streams are created with the planned counts when
missing, with ``streams.<id>.retention.ms``/``retention.bytes`` as their topic configs
``retention.ms``/``retention.bytes`` when the config sets them (else the broker's defaults
apply; consumed intermediate records are not deleted with DeleteRecords, the broker's retention
bounds them); a count that differs from the plan is an error naming the topic and both counts.
Checkpoints go to the compacted topic ``__samza_checkpoint_<job>`` (one partition, keyed by task).

Stores are LMDB files under ``job.dir`` on the container's host, backed by compacted changelog
topics (``<job>-<store>-changelog``, a partition per task; ``runtime.kafka.changelog``): a store
whose local copy is missing or behind the checkpoint is rebuilt from its topic.

Records that fail to deserialize under the ``dead-letter`` policy, and changelog entries that do
not decode as a store is rebuilt, go raw to the topic ``<job>-dead-letter`` (one partition,
created when missing), as on the local system.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import TopicPartition

from planner.owners import checkpoint_stream
from runtime.engine.codec import (
    Record,
    Skipped,
    StreamCodec,
    dead_letter_record,
    serde_error_policy,
    stream_serde,
)
from runtime.engine.commit import warn_at_least_once
from runtime.engine.container import Container
from runtime.engine.elastic import rescale_checkpoints
from runtime.engine.event_time_ahead import ahead_rule
from runtime.engine.job import SSP, TaskModel, build_job_model, job_containers, start_generation
from runtime.engine.records import is_control
from runtime.engine.sinks import sink_outputs
from runtime.engine.systems import SYSTEMS, StateBackend
from runtime.host.job_lock import JobLock
from runtime.host.jobdir import (
    dead_letter_stream,
    job_dir,
    metrics_stream,
    reset_command,
    store_dir,
)
from runtime.host.metrics import Metrics
from runtime.host.reporters import job_reporters, reporter_names
from runtime.kafka.admin import (
    BrokersUnreachable,
    TopicSpec,
    changelog_configs,
    describe_topics,
    ensure_topics,
    retention_configs,
    topic_names,
)
from runtime.kafka.assignor import TaskAssignor
from runtime.kafka.changelog import KafkaChangelog
from runtime.kafka.claim import ContainerClaim
from runtime.kafka.exactly_once import KafkaTransactions, fence_earlier
from runtime.kafka.group import GroupMembership, host_name, member_ids
from runtime.kafka.outage import (
    BrokerWatch,
    lost_checkpoints_error,
    lost_data_error,
    missing_topics_error,
    quiet_aiokafka,
)
from runtime.kafka.partition_watch import watch_partitions
from runtime.kafka.resolved import gapless
from runtime.kafka.security import check_login
from runtime.kafka.settings import kafka_settings
from runtime.kafka.standby import StandbyReplicas
from runtime.kafka.system import (
    KafkaCheckpoints,
    KafkaConsumer,
    KafkaProducer,
    new_consumer,
    offset_bounds,
    stop_client,
    true_end_offsets,
)
from runtime.kafka.tasks import GroupTasks
from runtime.state.backend import StoreBackend
from runtime.state.lmdb_store import local_state
from runtime.state.ttl import processing_ttl_ms
from samza_dsl.config import did_you_mean
from samza_dsl.connectors import CONNECTOR_FACTORY, SinkOutput
from samza_dsl.errors import ConfigError, SamzaError, SerdeError
from samza_dsl.jobconfig import JobConfig

__all__ = ["KafkaJob"]


def _kafka_systems(app: Any) -> tuple[list[Any], list[str]]:
    """The Kafka systems of ``app``'s streams, and the names of all its systems where they
    are not one Kafka system (outputs written by the application's sinks, PostgreSQL, files...,
    are no Kafka topics)."""
    systems = {d.system.name: d.system
               for d in [*app.spec().inputs.values(), *app.spec().outputs.values()]}
    kafka = [s for s in systems.values() if SYSTEMS.get(s.factory) is SYSTEMS["kafka"]]
    others = [s.name for s in systems.values()
              if s not in kafka and s.factory != CONNECTOR_FACTORY]
    return kafka, sorted(systems) if len(kafka) != 1 or others else []


class KafkaJob:
    """Build with ``await KafkaJob.create(app, config)``; then run ``job.container``."""

    def __init__(self, app: Any, config: JobConfig, metrics: Metrics | None = None,
                 *, follow: bool = False, timeout: float = 10.0) -> None:
        """``config`` is the job's, built where the job is made (``JobConfig.of``)."""
        self.app = app
        self.config = config
        self.metrics = metrics or Metrics()
        self.follow = follow
        self.timeout = timeout
        self.job_name = config.job.job_name
        kafka, mixed = _kafka_systems(app)
        if mixed:
            raise SamzaError(f"job {self.job_name!r} mixes systems ({', '.join(mixed)}): a job "
                             f"on Kafka keeps all its streams on one Kafka system")
        self.system = kafka[0]
        #: where the job's brokers are and what its clients are given
        #: (``runtime.kafka.settings``): every client of the job takes these
        self.system_config = config.systems[self.system.name]
        self.settings = kafka_settings(self.system_config, self.system.config, config,
                                       follow=follow)
        self.servers = self.settings.servers
        self.consumer_settings = self.settings.consumer
        self.producer_settings = self.settings.producer
        self.security = self.settings.security
        self.login = self.settings.login
        #: how the job's containers share its tasks (``runtime.kafka.group``)
        self.coordinator = self.settings.coordinator
        #: the brokers' outages while the job runs (``runtime.kafka.outage``)
        self.watch = BrokerWatch(self.servers, self.settings.unavailable_s,
                                 settings=self.consumer_settings)
        self.producer_timeout = self.settings.producer_timeout
        #: where the outputs started, for a job whose containers run in other processes
        self.output_start: dict[TopicPartition, int] | None = None
        #: a static container's claim on its id (``runtime.kafka.claim``)
        self.claim: ContainerClaim | None = None
        self.root = job_dir(self.job_name, config.job)
        self.lock = JobLock(self.root, self.job_name)
        self.checkpoint_topic = checkpoint_stream(self.job_name)
        #: the job's producer, made as the job is set up (``_setup``); None before
        self.producer: KafkaProducer | None = None
        #: the job's container, once built; None before
        self.container: Container | None = None
        #: aiokafka's log lines kept to the job's own words (``_hush``)
        self._hushed: contextlib.AbstractContextManager[Any] | None = None

    @classmethod
    async def create(cls, app: Any, config: JobConfig, metrics: Metrics | None = None,
                     *, follow: bool = False, timeout: float = 10.0) -> KafkaJob:
        job = cls(app, config, metrics, follow=follow, timeout=timeout)
        try:
            await job._build()
        except BaseException:
            job._unclaim()
            job.lock.release()
            await job.watch.stop()
            if job.producer is not None:
                await job.producer.close()
            job._unhush()
            raise
        return job

    @classmethod
    async def prepare(cls, app: Any, config: JobConfig, *,
                      timeout: float = 10.0) -> KafkaJob:
        """Start a run of a job of several containers: create its topics, bump the generation,
        move the checkpoints to a changed elasticity factor, and note where the outputs start
        (``output_start``). Each container then joins the run (``job.container.id``)."""
        job = cls(app, config, timeout=timeout)
        # exclusive while the run is prepared (checkpoints move), then shared with the
        # containers: no other run of the job meanwhile
        count = int(job.config.job.container_count)
        job.lock.start_containers(count)
        try:
            await job._setup()
            job.generation = await job.start_run()
            job.output_start = await job.output_ends()
            job.lock.share()
        except BaseException:
            job.lock.release()
            job._unhush()
            raise
        finally:
            if job.producer is not None:
                await job.producer.close()
        return job

    async def output_ends(self) -> dict[TopicPartition, int]:
        tps = [TopicPartition(self.physical[sid], p) for sid in self.plan.output_streams
               if sid in self.topics for p in range(self.counts[sid])]
        return await true_end_offsets(self.servers, tps, self.consumer_settings, self.timeout)

    async def _setup(self) -> KafkaProducer:
        self._hush()
        app = self.app
        declared = {sid: d for sid, d in {**app.spec().inputs, **app.spec().outputs}.items()
                    if not isinstance(d, SinkOutput)}
        # each stream's topic: streams.<id>.samza.physical.name where the config gives it
        topics = {sid: str(self.config.stream(sid).physical_name
                           or d.physical_name) for sid, d in declared.items()}
        # a broker that refuses the job's login says so now, in one line, and is not waited for
        await check_login(self.servers, self.login, self.security, min(self.timeout, 10.0))
        while True:  # brokers away at the start are waited for, as during a run
            try:
                found = await describe_topics(self.servers, topics.values(),
                                              timeout=self.timeout, **self.login)
                break
            except BrokersUnreachable as exc:
                self.watch.unavailable(str(exc))
                self.watch.check()
                await asyncio.sleep(self.watch.interval)
        self.watch.answered()
        for sid in app.spec().inputs:
            n = found[topics[sid]]
            if n is None:
                names = await topic_names(self.servers, timeout=self.timeout, **self.login)
                user = self.security.username  # brokers list only topics it may describe
                unseen = f" (or user {user!r} may not Describe it)" if user else ""
                grant = f", or grant user {user!r} Describe and Read on it (an ACL)" if user \
                    else ""
                raise SamzaError(f"input {sid!r}: topic {topics[sid]!r} does not exist on "
                                 f"the Kafka brokers at {self.servers}{unseen}"
                                 f"{did_you_mean(topics[sid], names)}; create it, or check the "
                                 f"stream's physical_name{grant}")
        known = {sid: found[topics[sid]] for sid, d in declared.items()
                 if d.partitions is None and found[topics[sid]] is not None}
        plan = app.plan(partitions=known, config=self.config)
        self.plan = plan
        counts = {sid: s.partitions for sid, s in plan.streams.items()}
        widest = max([n for sid, n in counts.items() if n and plan.streams[sid].kind == "input"]
                     or [1])
        self.counts = counts = {sid: (n if n else widest) for sid, n in counts.items()}
        self.physical = {sid: s.physical_name for sid, s in plan.streams.items()}
        #: the streams that are topics: all but the outputs the application's sinks write
        self.topics = [sid for sid in plan.streams if sid not in sink_outputs(plan)]
        job = build_job_model(plan, counts, plan.config.job.elasticity_factor)
        self.job = job
        n_tasks = max((t.index for t in job.tasks), default=0) + 1
        #: store name -> its changelog topic
        self.changelog_topics = {name: store.changelog_stream
                                 for name, store in plan.stores.items()
                                 if store.changelog is not None}
        self.topic_specs = self._topic_specs(plan, counts, n_tasks)
        await ensure_topics(self.servers, self.topic_specs, timeout=self.timeout,
                            replication_factor=self._system_int(
                                "replication.factor", self.system_config.replication_factor),
                            min_insync=self._system_int(
                                "min.insync.replicas", self.system_config.min_insync_replicas),
                            **self.login)
        producer = KafkaProducer(self.servers, self.producer_settings, 0,
                                 timeout=self.producer_timeout, watch=self.watch)
        self.producer = producer
        dead = dead_letter_stream(self.job_name)
        producer.add_stream(dead, dead, 1, None)
        dead_buf = producer.buffer(dead, 0)

        def dead_letter(ssp: SSP, offset: int, record: Record, err: SerdeError) -> None:
            dead_buf.append(dead_letter_record(ssp, offset, record, err))
        self.dead_letter = dead_letter
        self.checkpoints = KafkaCheckpoints(self.servers, self.checkpoint_topic, producer,
                                            self.consumer_settings, timeout=self.timeout)
        if plan.config.job.exactly_once and self.coordinator != "kafka":
            # what an earlier run of this container's tasks left open is aborted first (a
            # member of a group does it for the tasks it is given, runtime.kafka.exactly_once)
            _, mine = job_containers(job, plan.config)
            await self.watch.ride_out(lambda: fence_earlier(
                self.servers, self.producer_settings, self.job_name, [t.name for t in mine],
                self.timeout))
        await self.checkpoints.load()
        await self.check_data(None)
        self.codecs: dict[str, StreamCodec] = {}
        for sid, s in plan.streams.items():
            serde = stream_serde(s.descriptor.serde, keyed=s.keyed,
                                 intermediate=s.kind in ("intermediate", "broadcast"),
                                 types=plan.app.types)
            policy = serde_error_policy(plan.config, sid)
            self.codecs[sid] = StreamCodec(sid, serde, policy=policy, dead_letter=dead_letter,
                                           metrics=self.metrics, ahead=ahead_rule(
                                               sid, s.descriptor, policy, metrics=self.metrics))
            self.codecs[sid].origins = self.codecs[sid].hold = s.kind in ("intermediate",
                                                                          "broadcast")
            producer.add_stream(sid, self.physical[sid], counts[sid], self.codecs[sid].encode,
                                self.codecs[sid])
        return producer

    def _topic_specs(self, plan: Any, counts: Mapping[str, int], n_tasks: int
                     ) -> list[TopicSpec]:
        """The topics the job needs: its streams' (but the sinks'), its stores' changelogs
        (a partition per task), its checkpoints, its dead letters and its metrics."""
        return [
            *(TopicSpec(self.physical[sid], counts[sid],
                        configs=retention_configs(plan.config.stream(sid))) for sid in self.topics),
            *(TopicSpec(t, n_tasks, compacted=True,
                        configs=changelog_configs(processing_ttl_ms(plan, name)))
              for name, t in self.changelog_topics.items()),
            TopicSpec(self.checkpoint_topic, 1, compacted=True),
            TopicSpec(dead_letter_stream(self.job_name), 1),
            *([TopicSpec(metrics_stream(self.job_name), 1)]
              if "snapshot" in reporter_names(plan.config) else [])]

    async def _build(self) -> None:
        producer = await self._setup()
        plan, job = self.plan, self.job
        cfg = plan.config
        group = self.coordinator == "kafka"
        if group:  # the group deals the tasks out
            self.container_id = cfg.job.container_id
            self.tasks: list[TaskModel] = []
            self.lock.member()
            if self.container_id is not None:  # a static member: one process per id
                await self._claim()
        else:
            self.container_id, self.tasks = job_containers(job, cfg)
            self.lock.run(self.container_id, int(cfg.job.container_count))
            await self._claim()
        # a member of a group learns its run's generation with its first tasks (_take_over)
        self.generation = producer.generation = self.checkpoints.generation if group else \
            await self.start_run(join=self.container_id is not None)

        inputs = set(plan.input_streams)
        upcoming = {sid for sid in inputs
                    if plan.streams[sid].descriptor.offset_default == "upcoming"}
        # the job's intermediate streams are never compacted: a gap in their offsets is a
        # record the broker has not made visible yet (runtime.kafka.resolved.gapless)
        gapless(self.physical[sid] for sid in plan.intermediate_streams)
        consumer = KafkaConsumer(self.servers, self.consumer_settings, self.physical,
                                 self.codecs, self.generation,
                                 bounded=set() if self.follow else inputs, upcoming=upcoming,
                                 timeout=self.timeout, watch=self.watch)
        self.consumer = consumer
        #: exactly once: the tasks' transactional producers (``runtime.kafka.exactly_once``)
        self.txns = txns = KafkaTransactions(
            producer, self.checkpoints, self.job_name, self._changelog_positions,
            settles=not group) if cfg.job.exactly_once else None
        if txns is not None:
            warn_at_least_once(plan.app, self.job_name)
        state = StoreBackend(
            self.root, job, cfg, await self._changelogs(producer, self.tasks, txns),
            self.metrics, self.dead_letter)
        # the state backend as the container sees it (runtime.engine.systems)
        self.state: StateBackend = state
        if txns is not None and not group:  # fenced first: what an earlier run left open is
            # aborted before the tasks' stores and inputs are read
            await self.watch.ride_out(lambda: txns.open(self.tasks))
        parts: dict[str, Any] = dict(consumer=consumer, producer=producer,
                                     checkpoints=self.checkpoints, config=cfg,
                                     metrics=self.metrics, state=self.state)
        self.container = container = self._member(parts, consumer, state) if group else Container(
            job, self.tasks, bounded=not self.follow, **parts)
        if txns is not None:  # each task writes in transactions of its own
            container.committer.transactions = txns
            container.env.task_producer = txns.producer_for
        container.reporters = job_reporters(
            self.metrics, cfg, job_name=self.job_name, job_id=str(self.app.app_id),
            container_id=self.container_id, producer=producer, job_dir=self.root,
            create_stream=lambda stream: None)  # its topic is made with the job's

        def fail(exc: SamzaError) -> None:
            for t in container.tasks:
                t.fail(exc)
        self.watch.on_fatal = fail
        self.watch.on_back = self.check_data
        self.partition_watch = watch_partitions(self, container.stop_with)
        container.beside.append(self.partition_watch.run)
        self.watch.topics = [s.name for s in self.topic_specs]  # their partitions' leaders
        self.watch.start()  # stopped when the producer closes

    async def _claim(self) -> None:
        """The container claims its id on the brokers: a second process for it on another host
        is refused as the job.dir lock refuses one on this host (``runtime.kafka.claim``). A job
        in one container (no id) is container 0: a second copy of it is refused too. A static
        member of the job's consumer group claims its id before it joins the group: a second
        process with its ``group_instance_id`` would take its place in the group (Kafka fences
        the first with FENCED_INSTANCE_ID; tansu left its tasks to nobody), so it is refused
        before it joins, and the first goes on."""
        container = 0 if self.container_id is None else self.container_id
        claim = ContainerClaim(self.servers, self.checkpoint_topic, self.consumer_settings,
                               job_name=self.job_name, container=str(container),
                               job_dir=self.root, timeout=self.timeout)
        await asyncio.to_thread(claim.start)
        self.claim = claim
        loop = asyncio.get_running_loop()

        def lost(exc: SamzaError) -> None:
            container = self.container
            lifecycle = container.lifecycle if container is not None else None
            if lifecycle is not None:  # a member of a group: between assignments it has no task
                lifecycle.fail(exc)
                return
            for t in container.tasks if container is not None else []:
                t.fail(exc)
        def on_lost(exc: SamzaError) -> None:  # on the claim's thread
            loop.call_soon_threadsafe(lost, exc)
        claim.on_lost = on_lost

    def _member(self, parts: dict[str, Any], consumer: KafkaConsumer,
                state: StoreBackend) -> Container:
        """The container of a member of the job's consumer group (``job.coordinator=kafka``):
        it holds the task lifecycle the group deals to (``runtime.kafka.tasks.GroupTasks``)."""
        label, instance = member_ids(self.container_id)
        shutdown_s = self.plan.config.task.shutdown_ms / 1000.0
        replicas = int(self.plan.config.job.standby_replicas)

        def membership(tasks: GroupTasks) -> GroupMembership:
            assignor = TaskAssignor(self.job, self.job_name, host=host_name(), container=label,
                                    standby_replicas=replicas - 1,
                                    positions=tasks.store_positions,
                                    saved=None if instance is None else os.path.join(
                                        self.root, "group-subscription"))
            return GroupMembership(tasks, self.servers, self.job_name, assignor,
                                   self.consumer_settings, instance_id=instance,
                                   shutdown_s=shutdown_s)
        standby = StandbyReplicas(
            self.job, self.servers, self.consumer_settings,
            changelog_topics=self.changelog_topics, checkpoint_topic=self.checkpoint_topic,
            open_replica=state.open_replica, metrics=self.metrics,
            label=lambda: f"{label} on {host_name()}") if replicas > 1 else None
        container = Container(self.job, [], **parts)
        container.lifecycle = GroupTasks(
            container, membership=membership, prepare=self._take_over, consumer=consumer,
            checkpoints=self.checkpoints, state=state, transactions=self.txns, standby=standby,
            job_dir=self.root)
        return container

    async def _take_over(self, tasks: list[TaskModel], first: bool) -> None:
        """Before tasks that come to this container start: their checkpoints as the container
        that ran them left them, and their changelogs' ends now. With its ``first`` tasks, the
        container learns its run's generation: a new run when it has every task (no other member
        runs), else the group's current one, so that the members' control records agree. Each task
        is claimed in its checkpoint (``runtime.kafka.fence``). Exactly once, their producers
        take their transactional ids first: the container that ran them is fenced, and what it
        left open is aborted before their checkpoints are read."""
        ends: asyncio.Task[None] | None = None
        txns = self.txns
        if txns is not None:  # what the changelogs hold ends with what this aborts
            await self.watch.ride_out(lambda: txns.open(tasks))
        else:  # at least once, read beside the checkpoints: a takeover waits for the longer
            ends = asyncio.create_task(self._changelog_ends(tasks))
        try:
            await self.checkpoints.load()
            if first:
                alone = len(tasks) == len(self.job.tasks)
                self.generation = await self.start_run(join=not alone)
                assert self.producer is not None  # made by _setup, before the first tasks
                self.producer.generation = self.generation
                self.consumer.generation = self.generation
            # an earlier owner's later checkpoints are ignored from now on
            await self.checkpoints.claim([t.name for t in tasks])
        except BaseException:
            if ends is not None:
                ends.cancel()
                await asyncio.gather(ends, return_exceptions=True)
            raise
        await (ends if ends is not None else self._changelog_ends(tasks))

    async def check_data(self, down_for: float | None) -> None:
        """That the brokers still have the job's topics, with their partition counts, and the
        records its checkpoints reach (``down_for``: after an outage of so many seconds; None:
        at the start). Raises ``KafkaDataLost`` naming what is gone."""
        if down_for is not None:
            found = await describe_topics(self.servers, [s.name for s in self.topic_specs],
                                          timeout=self.timeout, **self.login)
            if self.partition_watch.seen(found) is not None:
                return  # partitions were added: the job stops cleanly (partition_watch)
            problems = [f"topic {spec.name!r} is gone" for spec in self.topic_specs
                        if found[spec.name] is None]
            if problems:
                raise missing_topics_error(self.servers, problems, down_for)
        needed = self._needed_offsets()
        bounds = await offset_bounds(self.servers, {tp: n for tp, (n, _) in needed.items()},
                                     self.consumer_settings, self.timeout,
                                     what="checking the job's checkpoints")
        lost = [(tp, need, bounds[tp][0], bounds[tp][1], what)
                for tp, (need, what) in sorted(needed.items())
                if bounds[tp][1] < need or bounds[tp][0] > need]
        if lost:
            raise lost_data_error(self.servers, lost, self.checkpoint_topic, down_for,
                                  self.reset_command())

    def _needed_offsets(self) -> dict[TopicPartition, tuple[int, str]]:
        """The offset each checkpointed partition must reach: the one after the last message
        processed, the end of a store's changelog; with what reads it."""
        out: dict[TopicPartition, tuple[int, str]] = {}

        def need(tp: TopicPartition, offset: int, what: str) -> None:
            if offset > out.get(tp, (-1, ""))[0]:
                out[tp] = (offset, what)
        index = {t.name: t.index for t in self.job.tasks}
        for task, offsets in self.checkpoints.tasks().items():
            for ssp, offset in offsets.items():
                topic = self.physical.get(ssp.stream_id)
                if topic is not None and ssp.partition < self.counts[ssp.stream_id]:
                    need(TopicPartition(topic, ssp.partition), offset + 1,
                         f"stream {ssp.stream_id!r}, task {task!r}")
            for store, offset in self.checkpoints.read_changelogs(task).items():
                topic = self.changelog_topics.get(store)
                if topic is not None and task in index:
                    need(TopicPartition(topic, index[task]), offset,
                         f"changelog of store {store!r}, task {task!r}")
        return out

    async def start_run(self, join: bool = False) -> int:
        """The run's generation. A new run bumps it and moves the checkpoints to a changed
        ``job.elasticity.factor``; a container that ``join``s a run of several containers takes
        the current one (``runtime.engine.job.start_generation``)."""
        cps = self.checkpoints
        if not join and cps.empty:
            await self.check_local_state()
        generation = start_generation(cps.generation, join)
        for name, offsets in rescale_checkpoints(self.job, cps.elasticity, cps.tasks()).items():
            await cps.write(name, offsets, replace=True)
        factor = self.job.tasks[0].buckets if self.job.tasks else 1
        if generation != cps.generation or factor != cps.elasticity:
            await cps.write_generation(generation, factor)
        return generation

    async def check_local_state(self) -> None:
        """On brokers that hold no checkpoint of the job (before this run records its
        generation there): that ``job.dir`` holds no store an earlier run built. Every run records
        its generation before it opens a store, so such stores belong to checkpoints and
        changelogs the brokers lost; going on would count on top of them (a store without a
        changelog) or drop them in silence (one with a changelog). Raises ``KafkaDataLost``
        naming them and how to start over."""
        held = []
        for name in self.plan.stores:
            for task in self.job.tasks:
                state = local_state(store_dir(self.root, name, task.name))
                if state is not None and (state[0] or state[1]):
                    held.append((name, task.index, task.name, *state))
        if not held:
            return
        tps = [TopicPartition(self.changelog_topics[name], index)
               for name, index, _, offset, _ in held
               if name in self.changelog_topics and offset is not None]
        ends = await true_end_offsets(self.servers, tps, self.consumer_settings, self.timeout)
        found = [self._held_store(*h, ends) for h in held]
        raise lost_checkpoints_error(self.servers, self.job_name, self.checkpoint_topic,
                                     os.path.abspath(os.path.join(self.root, "stores")), found,
                                     self.reset_command())

    def _system_int(self, prop: str, value: Any) -> int | None:
        """``systems.<the job's system>.<prop>``, a whole number of at least 1, or None."""
        key = f"systems.{self.system.name}.{prop}"
        if value is None:
            return None
        try:
            number = int(str(value).strip())
        except ValueError:
            number = 0
        if number < 1:
            raise ConfigError(f"config {key}={value!r} must be a whole number of at least 1")
        return number

    def reset_command(self) -> str:
        """The command that starts the job over (``runtime.kafka.reset``)."""
        return reset_command(self.config.job)

    def _held_store(self, name: str, index: int, task: str, offset: int | None, keys: int,
                    ends: Mapping[TopicPartition, int]) -> str:
        """What a local store holds, for ``check_local_state``."""
        where = f"store {name!r} of task {task!r}"
        if keys < 0:
            return f"{where} has a local copy that cannot be read"
        topic = self.changelog_topics.get(name)
        if topic is None or offset is None:
            return f"{where} holds {keys} keys (it has no changelog)"
        end = ends.get(TopicPartition(topic, index), 0)
        return (f"{where} is at changelog offset {offset}, "
                f"{'but' if end < offset else 'and'} its changelog topic {topic!r} partition "
                f"{index} ends at offset {end}")

    def _changelog_positions(self, task_name: str) -> dict[str, int]:
        """Where the changelogs of a task's stores end now (``KafkaTransactions``)."""
        state = self.state
        return state.changelog_positions(task_name) if isinstance(state, StoreBackend) else {}

    async def _changelogs(self, producer: KafkaProducer, tasks: list[TaskModel],
                          txns: KafkaTransactions | None = None
                          ) -> dict[str, Callable[[int], KafkaChangelog]]:
        """A changelog factory per store, over the partitions of ``tasks`` (and of tasks whose
        ends ``_changelog_ends`` reads later); exactly once, each partition is written by the
        producer of its task."""
        n_tasks = max((t.index for t in self.job.tasks), default=0) + 1
        self._ends: dict[TopicPartition, int] = {}
        await self._changelog_ends(tasks)
        out: dict[str, Callable[[int], KafkaChangelog]] = {}
        for name, topic in self.changelog_topics.items():
            sid = f"__changelog__{name}"
            producer.add_stream(sid, topic, n_tasks, None)

            def make(p: int, sid: str = sid, topic: str = topic) -> KafkaChangelog:
                writer = producer if txns is None else txns.of_index(p)
                return KafkaChangelog(self.servers, self.consumer_settings, writer, sid, topic,
                                      p, self._ends.get(TopicPartition(topic, p), 0),
                                      timeout=max(self.timeout, 30.0, self.watch.timeout),
                                      watch=self.watch)
            out[name] = make
        return out

    async def _changelog_ends(self, tasks: list[TaskModel]) -> None:
        """Where the changelog partitions of ``tasks`` end now."""
        tps = [TopicPartition(topic, t.index) for topic in self.changelog_topics.values()
               for t in tasks]
        if tps:
            self._ends.update(await true_end_offsets(self.servers, tps, self.consumer_settings,
                                                     self.timeout))

    async def messages_async(self, stream_id: str, last: int | None = None) -> list[Any]:
        """An output's messages this job wrote: the offsets its producer had acknowledged (a
        broker's end offsets may be late, as tansu's are). With ``last``, at most the last
        ``last`` messages of each partition, read from its end (control records make a few
        fewer): a summary's few, never the whole stream."""
        if stream_id not in self.plan.output_streams:
            raise KeyError(f"no output stream {stream_id!r} in job {self.job_name!r}")
        topic = self.physical[stream_id]
        if self.output_start is not None:  # a run of several containers: what it appended
            tps = [TopicPartition(topic, p) for p in range(self.counts[stream_id])]
            ends = await true_end_offsets(self.servers, tps, self.consumer_settings, self.timeout)
            ranges = {tp.partition: (self.output_start[tp], ends[tp]) for tp in tps
                      if ends[tp] > self.output_start[tp]}
        else:
            acked = self.producer
            assert acked is not None  # made by _setup, with the plan
            ranges = {p: (acked.first_offsets[(topic, p)], acked.end_offsets[(topic, p)])
                      for p in range(self.counts[stream_id])
                      if (topic, p) in acked.end_offsets}
        if last is not None:
            ranges = {p: (max(start, end - last), end) for p, (start, end) in ranges.items()}
        if not ranges:
            return []
        consumer = new_consumer(self.servers, self.consumer_settings, brief=True)
        out: list[Any] = []
        try:
            await consumer.start()
            for p, (start, end) in ranges.items():
                out.extend(await self._read_range(consumer, stream_id, p, start, end))
        finally:
            await stop_client(consumer)
        return out

    async def _read_range(self, consumer: Any, stream_id: str, p: int, start: int,
                          end: int) -> list[Any]:
        """The messages of an output partition's offsets ``[start, end)``."""
        tp = TopicPartition(self.physical[stream_id], p)
        codec = self.codecs[stream_id]
        consumer.assign([tp])
        consumer.seek(tp, start)
        pos = start
        out: list[Any] = []
        committed_only = self.consumer_settings.get("isolation_level") == "read_committed"
        empty = 0
        while pos < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            records = [r for r in batch.get(tp, []) if r.offset < end]
            if not batch:
                # read committed, the rest may be records of a transaction this run did not
                # commit (aborted as it stopped, during a takeover): acknowledged, never read
                empty += 1
                if committed_only and empty < 3:
                    continue
                if committed_only:
                    break
                raise SamzaError(f"output {stream_id!r} partition {p}: records up to "
                                 f"offset {end} were acknowledged but cannot be read")
            empty = 0
            out.extend(m for m in codec.decode_batch(
                SSP(stream_id, p), records[0].offset if records else pos,
                [(r.key, r.value, tuple(r.headers) or None) for r in records],
                self.generation) if not is_control(m) and type(m) is not Skipped)
            pos = batch[tp][-1].offset + 1
        return out

    def tail(self, stream_id: str, n: int) -> list[Any]:
        """At most the last ``n`` messages this job wrote to an output."""
        return asyncio.run(self.messages_async(stream_id, last=n))[-n:] if n > 0 else []

    def partitions(self, stream_id: str) -> dict[int, list[Any]]:
        raise TypeError(f"output {stream_id!r} is on Kafka: read its partitions from the topic")

    def messages(self, stream_id: str) -> list[Any]:
        return asyncio.run(self.messages_async(stream_id))

    def release_lock(self) -> None:
        """Let another process run this container (its run is over). Where the broker watch
        gave up on the brokers, aiokafka stays hushed until ``close``: a client whose stop was
        given up on (``stop_client``) may still log its lost connections until the loop ends."""
        self._unclaim()
        self.lock.release()
        if self.watch.error is None:
            self._unhush()

    def close(self) -> None:
        self._unclaim()
        self.lock.release()
        self._unhush()

    def _hush(self) -> None:
        """aiokafka's log lines, each once at most and none unless ``SAMZA_DSL_AIOKAFKA_LOG``
        asks for them (``runtime.kafka.outage.quiet_aiokafka``), from the job's first client
        to its last: the broker watch's own window ends with the container's producer, before
        the claim's thread has stopped its client, and begins after the job's topics and
        checkpoints were first read."""
        if self._hushed is None:
            self._hushed = quiet_aiokafka()
            self._hushed.__enter__()

    def _unhush(self) -> None:
        hushed, self._hushed = self._hushed, None
        if hushed is not None:
            hushed.__exit__(None, None, None)

    def _unclaim(self) -> None:
        claim, self.claim = self.claim, None
        if claim is not None:  # at once if the broker watch gave up on the brokers
            claim.stop(lost=self.watch.error is not None)
