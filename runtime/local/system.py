"""The embedded local system: a job's streams, changelogs and checkpoints in an LMDB log on local
disk (``runtime.local.log``), and its stores in LMDB files (``runtime.state.lmdb_store``).

Where things live, for a job ``<job>`` (``<app name>-<app id>``) run from a directory:

- ``job.dir`` (default ``.samza/<job>``) holds ``stores/<store>/<task>/``, one LMDB store per task
  and store;
- a ``LocalSystem(name, path)`` keeps its log in ``path``, by default ``<job.dir>/logs/<name>``;
  inputs, outputs, intermediate streams, changelogs (``<job>-<store>-changelog``, a partition per
  task), the dead-letter stream (``<job>-dead-letter``) and the checkpoints (in the log's metadata,
  under ``checkpoint/<job>/<task>``) all go there.

Inputs are bounded by default: a run processes each input up to its end as it was when the run
started, then ends (``follow=True`` keeps reading until stopped). A second run resumes after the
checkpoint.

Its producer and consumer are ``runtime.local.clients``; its checkpoints, changelogs and the
stores' backend ``runtime.local.state``; here is the job: planned over the log, its container
built, and its streams read, loaded and reset.

A running container holds its lock in ``<job.dir>/locks`` (``runtime.host.job_lock``). ``<job.dir>/log.id``
names the log that holds the job (the same id is in the log's metadata), so a log emptied or
replaced under a job with state is an error, not a silent new start.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from operators.hashing import KeyPartitioner
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
from runtime.engine.job import (
    SSP,
    build_job_model,
    job_containers,
    start_generation,
)
from runtime.engine.origins import ORIGIN_IDS, OriginNames
from runtime.engine.partition_counts import PartitionWatch, planned_streams
from runtime.engine.records import is_control
from runtime.engine.serde_util import default_key_bytes
from runtime.engine.systems import SYSTEMS, Consumer, Producer, StateBackend
from runtime.host.job_lock import JobLock, log_id_lock
from runtime.host.jobdir import dead_letter_stream, job_dir, reset_command, task_dir
from runtime.host.metrics import Metrics
from runtime.host.reporters import job_reporters
from runtime.host.storage import (
    FDS_BASE,
    FDS_PER_ENV,
    StorageError,
    ensure_open_files,
    storage_error,
)
from runtime.local.clients import LocalConsumer, LocalProducer
from runtime.local.exactly_once import LocalTransactions
from runtime.local.log import LocalLog
from runtime.local.retention import LogTrimmer, job_targets, log_max_bytes
from runtime.local.state import LocalCheckpoints, LocalState, LogChangelog
from runtime.state.changelog import Changelog
from samza_dsl.config import did_you_mean
from samza_dsl.errors import ConfigError, SamzaError, SerdeError
from samza_dsl.jobconfig import JobConfig
from samza_dsl.kv import KV
from samza_dsl.serdes import KVSerde

__all__ = ["LocalJob", "job_dir", "log_path", "dead_letter_stream", "task_dir"]

#: the encoded bytes a load appends per transaction: its memory stays about this size however
#: long the input
LOAD_COMMIT_BYTES = 4 << 20
#: seconds between two reads of the job's streams' partition counts (``_partition_watch``)
PARTITION_CHECK_S = 1.0


def log_path(system: str, settings: Mapping[str, Any], job_name: str, config: JobConfig) -> str:
    path = settings.get("path") or config.system(system).path
    return str(path) if path else os.path.join(job_dir(job_name, config.job), "logs", system)


# -- the job ------------------------------------------------------------------------------------

class LocalJob:
    """Plans an application over the local log and builds its container.

    ``follow`` keeps reading inputs past their current end; ``inputs`` (stream id -> messages,
    spread over partitions by key as ``load`` does, or {partition: messages}) are appended to
    inputs that are still empty, as a sample. With ``run`` the container takes its lock
    (``release_lock`` or ``close`` drop it). ``verify_log=False`` opens a job whose log no
    longer holds it (``reset`` does, to start it over). ``create=False`` (with ``run=False``)
    creates no stream the log lacks (``status`` only looks)."""

    def __init__(self, app: Any, config: Mapping[str, Any], *, follow: bool = False,
                 inputs: Mapping[str, Sequence[Any] | Mapping[int, Sequence[Any]]] | None = None,
                 metrics: Metrics | None = None, run: bool = True,
                 verify_log: bool = True, create: bool = True) -> None:
        self.app = app
        self.config = JobConfig.of(app, config)
        self.metrics = metrics or Metrics()
        job_name = self.config.job.job_name
        self.job_name = job_name
        if self.config.job.coordinator == "kafka":
            raise ConfigError(f"job {job_name!r}: job.coordinator=kafka shares a Kafka job's "
                              f"tasks through its consumer group; this job runs on the embedded "
                              f"local system, whose containers are static (--containers N): "
                              f"drop job.coordinator, or run the job on a Kafka system")
        self.root = job_dir(job_name, self.config.job)
        self.logs: dict[str, LocalLog] = {}
        #: each output's partitions' ends when this run started (``messages(since_start=...)``)
        self.output_start: dict[str, list[int]] = {}
        self.lock = JobLock(self.root, job_name)
        self._verify_log = verify_log
        self._create = create or run
        try:
            self._plan(inputs or {})
            if run:
                self._build(follow, inputs or {})
            else:  # open the streams only (load, dump, reset)
                self.generation = 0
                self._codecs(None)
        except BaseException:
            self.close()
            raise

    def job_lock(self) -> JobLock:
        """The job's locks, in ``job.dir`` and in each local log it uses (``runtime.host.job_lock``)."""
        logs = [self.log_of(s).path for s in set(self.stream_system.values())]
        return JobLock(self.root, self.job_name, logs=[*logs, self.checkpoints.log.path])

    def log_of(self, system: str) -> LocalLog:
        log = self.logs.get(system)
        if log is None:
            settings = self._systems.get(system, {})
            cap, cap_key = log_max_bytes(self.config, system)
            log = self.logs[system] = LocalLog(log_path(system, settings, self.job_name,
                                                        self.config),
                                               map_size=cap, cap_key=cap_key)
        return log

    def _plan(self, inputs: Mapping[str, Any]) -> None:
        app = self.app
        spec_streams = {**app.spec().inputs, **app.spec().outputs}
        self._systems: dict[str, dict[str, Any]] = {}
        local_names: list[str] = []
        for d in spec_streams.values():
            if SYSTEMS.get(d.system.factory) is SYSTEMS["kafka"]:
                raise SamzaError(f"stream {d.stream_id!r} is on Kafka system {d.system.name!r}: "
                                 f"this runner runs jobs on the embedded local system only")
            self._systems.setdefault(d.system.name, d.system.config)
            if SYSTEMS.get(d.system.factory) is SYSTEMS["local"] \
                    and d.system.name not in local_names:
                local_names.append(d.system.name)
        main = str(self.config.job.default_system or
                   (local_names[0] if local_names else "local"))
        self.main_system = main

        def system_of(stream_system: str | None) -> str:
            # streams of other systems (memory) run on the main local system too
            return stream_system if stream_system in local_names else main

        # partition counts the log already knows
        known: dict[str, int] = {}
        for sid, d in spec_streams.items():
            if d.partitions is None:
                n = self.log_of(system_of(d.system.name)).partitions(d.physical_name)
                given = inputs.get(sid)
                if n is None and isinstance(given, Mapping) and given:
                    n = max(given) + 1
                if n is not None:
                    known[sid] = n
        plan = app.plan(partitions=known, config=self.config)
        self.plan = plan
        if self._verify_log:
            self._check_log()
        counts = {sid: s.partitions for sid, s in plan.streams.items()}
        widest = max([n for sid, n in counts.items() if n and plan.streams[sid].kind == "input"]
                     or [1])
        counts = {sid: (n if n else widest) for sid, n in counts.items()}
        self.counts = counts
        self.job = build_job_model(plan, counts, plan.config.job.elasticity_factor)
        self.physical = {sid: s.physical_name for sid, s in plan.streams.items()}
        self.stream_system = {sid: system_of(s.system) for sid, s in plan.streams.items()}
        if self._create:
            for sid, n in counts.items():
                self.log_of(self.stream_system[sid]).create(self.physical[sid], n)

    def _codecs(self, dead_letter: Callable[[SSP, int, Record, SerdeError], None] | None) -> None:
        cfg = self.plan.config
        self.codecs = {}
        for sid, s in self.plan.streams.items():
            serde = stream_serde(s.descriptor.serde, keyed=s.keyed,
                                 intermediate=s.kind in ("intermediate", "broadcast"),
                                 types=self.plan.app.types)
            policy = serde_error_policy(cfg, sid)
            self.codecs[sid] = StreamCodec(sid, serde, policy=policy, dead_letter=dead_letter,
                                           metrics=self.metrics, ahead=ahead_rule(
                                               sid, s.descriptor, policy, metrics=self.metrics))
            self.codecs[sid].origins = s.kind in ("intermediate", "broadcast")
            if self.codecs[sid].origins:
                self.codecs[sid].origin_names = self._origin_names(self.stream_system[sid])
            # the tasks reading it decide on a record of it that does not decode (run only)
            self.codecs[sid].hold = self.codecs[sid].origins and dead_letter is not None

    def _origin_names(self, system: str) -> OriginNames:
        """The keys of the compact origins in the log of ``system``, by id."""
        def load() -> dict[int, str]:
            n = len(ORIGIN_IDS)
            return {int(v): k[n:] for k, v in self.log_of(system).meta_items(ORIGIN_IDS).items()}
        return OriginNames(load)

    def _build(self, follow: bool, inputs: Mapping[str, Any]) -> None:
        plan, job, counts = self.plan, self.job, self.counts
        physical, stream_system = self.physical, self.stream_system
        main = self.main_system
        cfg = plan.config

        main_log = self.log_of(main)
        self.container_id, self.tasks = job_containers(job, cfg)
        stores = len(plan.stores)
        ensure_open_files(
            (len(self.tasks) * stores + len(self.logs)) * FDS_PER_ENV + FDS_BASE,
            f"job {self.job_name!r} ({len(self.tasks)} tasks in this process, {stores} "
            f"store(s) each: an LMDB environment per task and store)")
        self.lock = self.job_lock()
        self.lock.run(self.container_id, int(cfg.job.container_count))
        generation = self.generation = self.start_run(join=self.container_id is not None)

        producers: dict[str, LocalProducer] = {}

        def producer_of(system: str) -> LocalProducer:
            p = producers.get(system)
            if p is None:
                p = producers[system] = LocalProducer(self.log_of(system), generation)
            return p

        dead = dead_letter_stream(self.job_name)
        main_log.create(dead, 1)
        dead_producer = producer_of(main)
        dead_producer.add_stream(dead, dead, 1, None)
        dead_buf = dead_producer.buffer(dead, 0)
        txns = self._transactions(dead_producer, dead) if cfg.job.exactly_once else None

        def dead_letter(ssp: SSP, offset: int, record: Record, err: SerdeError) -> None:
            rec = dead_letter_record(ssp, offset, record, err)
            if txns is None or not txns.dead_letter(ssp, offset, rec):
                dead_buf.append(rec)

        self._codecs(dead_letter)
        codecs = self.codecs
        for sid in plan.streams:
            producer_of(stream_system[sid]).add_stream(sid, physical[sid], counts[sid],
                                                      codecs[sid].encode, codecs[sid])

        self.load_sample(inputs)
        changelogs = self._changelogs(producer_of, txns)

        inputs_of_job = set(plan.input_streams)
        upcoming = {sid for sid in inputs_of_job
                    if plan.streams[sid].descriptor.offset_default == "upcoming"}
        consumer_logs = {stream_system[sid] for ssp_task in job.tasks for sid in
                         {ssp.stream_id for ssp in ssp_task.ssps}}
        if len(consumer_logs) > 1 or len(producers) > 1:
            raise SamzaError(f"job {self.job_name!r} uses several local systems "
                             f"({', '.join(sorted(set(consumer_logs) | set(producers)))}); "
                             f"run it with one")
        consumer = LocalConsumer(main_log if not consumer_logs else
                                 self.log_of(next(iter(consumer_logs))),
                                 physical, codecs, generation,
                                 bounded=set() if follow else inputs_of_job, upcoming=upcoming)
        producer = producer_of(main)
        producer.on_write(consumer.notify)
        # the system's classes, as the container sees them (runtime.engine.systems)
        self.producer: Producer = producer
        self.consumer: Consumer = consumer
        self.state: StateBackend = LocalState(self.root, job, cfg, changelogs, self.metrics, dead_letter,
                                self.checkpoints.read_changelogs)
        targets = job_targets(job, cfg, [t.name for t in self.tasks], physical, counts,
                              lambda sid: self.log_of(stream_system[sid]))
        if targets:
            self.state.trimmer = LogTrimmer(targets, self.checkpoints.tasks)
        self.container = Container(job, self.tasks, consumer=consumer, producer=producer,
                                   checkpoints=self.checkpoints, config=cfg,
                                   metrics=self.metrics, state=self.state, bounded=not follow)
        if txns is not None:  # each task writes into its own producer, read at its commit
            self.container.committer.transactions = txns
            self.container.env.task_producer = txns.producer_for
        self.container.reporters = job_reporters(
            self.metrics, cfg, job_name=self.job_name, job_id=str(self.app.app_id),
            container_id=self.container_id, producer=producer, job_dir=self.root,
            create_stream=lambda stream: main_log.create(stream, 1))
        self.partition_watch = self._partition_watch(self.container.stop_with)
        self.container.beside.append(self.partition_watch.run)
        self.output_start = self.output_ends()

    def _partition_watch(self, stop: Callable[[SamzaError], None]) -> PartitionWatch:
        """Every second, the partition counts of the job's streams in their logs: another
        job's `reset --outputs` or `run --replace` may delete a stream of this one, and a later
        run create it again with another count (``runtime.engine.partition_counts``)."""
        sids = list(self.plan.streams)
        streams = planned_streams(((self.physical[sid], self.counts[sid]) for sid in sids),
                                  self.plan, self.physical)

        async def read() -> dict[str, int | None]:
            return {self.physical[sid]: self.log_of(self.stream_system[sid]).partitions(
                self.physical[sid]) for sid in sids}
        return PartitionWatch(read, streams, PARTITION_CHECK_S, job_name=self.job_name,
                              reset=reset_command(self.config.job), on_change=stop, noun="stream")

    def _changelogs(self, producer_of: Callable[[str], LocalProducer],
                    txns: LocalTransactions | None) -> dict[str, Callable[[int], Changelog]]:
        """Each store's changelog in the log, a partition per task, written through its
        system's producer (exactly-once: through the buffers of the task of the partition)."""
        n_tasks = max((t.index for t in self.job.tasks), default=0) + 1
        changelogs: dict[str, Callable[[int], Changelog]] = {}
        for name, store in self.plan.stores.items():
            if store.changelog is None:
                continue
            system = store.changelog_system or self.main_system
            stream = str(store.changelog_stream)
            log = self.log_of(system)
            log.create(stream, n_tasks)
            prod = producer_of(system)
            prod.add_stream(stream, stream, n_tasks, None)
            changelogs[name] = functools.partial(LogChangelog, log, txns or prod, stream)
        return changelogs

    def _transactions(self, producer: LocalProducer, dead: str) -> LocalTransactions:
        """Exactly-once commits of this container's tasks (``runtime.local.exactly_once``); what
        stays at least once is said once, at start."""
        warn_at_least_once(self.plan.app, self.job_name)
        return LocalTransactions(producer, producer.log, producer.written_out, self.checkpoints,
                                 self.tasks, dead, self.state_changelogs)

    def state_changelogs(self, task_name: str) -> dict[str, tuple[str, int]]:
        """Per store of the task with a changelog in the log: its (stream, partition)."""
        state = self.state
        return state.changelog_partitions(task_name) if isinstance(state, LocalState) else {}

    def output_ends(self) -> dict[str, list[int]]:
        """The end offset of each output partition: where a run's outputs start, so a run can
        show just its own."""
        return {sid: [self.log_of(self.stream_system[sid]).end_offset(self.physical[sid], p)
                      for p in range(self.counts[sid])]
                for sid in self.plan.output_streams}

    def load_sample(self, inputs: Mapping[str, Any]) -> None:
        """A sample for inputs that are still empty."""
        for sid, given in inputs.items():
            log = self.log_of(self.stream_system[sid])
            if any(log.end_offset(self.physical[sid], p) for p in range(self.counts[sid])):
                continue
            if isinstance(given, Mapping):
                self._append(sid, {p: list(msgs) for p, msgs in given.items() if msgs})
            else:
                self.load(sid, given)

    def prepare(self, inputs: Mapping[str, Any] | None = None) -> int:
        """Start a run of a job of several containers: load the sample ``inputs``, bump the
        generation, move the checkpoints to a changed elasticity factor, and note where the
        outputs start. Each container then joins the run (``job.container.id``)."""
        self.load_sample(inputs or {})
        self.generation = self.start_run()
        self.output_start = self.output_ends()
        return self.generation

    @property
    def checkpoints(self) -> LocalCheckpoints:
        cps = self.__dict__.get("_checkpoints")
        if cps is None:
            system = str(self.plan.config.task.checkpoint_system or self.main_system)
            cps = self._checkpoints = LocalCheckpoints(self.log_of(system), self.job_name)
        return cps

    def start_run(self, join: bool = False) -> int:
        """The run's generation. A new run bumps it and moves the checkpoints to a changed
        ``job.elasticity.factor``; a container that ``join``s a run of several containers takes
        the current one (``runtime.engine.job.start_generation``)."""
        log = self.checkpoints.log
        gen_key, factor_key = f"generation/{self.job_name}", f"elasticity/{self.job_name}"
        raw, factor = log.get_meta(gen_key), log.get_meta(factor_key)
        generation = start_generation(int(raw) if raw else 0, join)
        previous = int(factor) if factor else 1
        for name, offsets in rescale_checkpoints(self.job, previous,
                                                 self.checkpoints.tasks()).items():
            self.checkpoints.write(name, offsets, replace=True)
        log.put_meta(factor_key, str(self.job.tasks[0].buckets if self.job.tasks else 1).encode())
        log.put_meta(gen_key, str(generation).encode())
        self._mark_log()
        return generation

    # -- which log holds the job -----------------------------------------------------------------

    def _log_id_file(self) -> str:
        return os.path.abspath(os.path.join(self.root, "log.id"))

    def _log_id_key(self) -> str:
        return f"log-id/{self.job_name}"

    def _read_log_id(self) -> str | None:
        path = self._log_id_file()
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise storage_error(e, path, "reading the job's log id") or SamzaError(
                f"cannot read {path}: {e}; check that job.dir {self.root} is readable") from e

    def _check_log(self) -> None:
        """The log must still hold the job when ``job.dir`` says it did: a log file emptied or
        replaced would otherwise start the job over silently, its state and checkpoints lost."""
        log = self.checkpoints.log
        with log_id_lock(self.root, exclusive=False):
            token = self._read_log_id()
            stored = log.get_meta(self._log_id_key())
        if token is not None:
            if stored is not None and stored.decode(errors="replace") == token:
                return
            evidence = (f"{self._log_id_file()} says the job's log is {token!r}, but the log "
                        + ("has no id: it is empty or new" if stored is None else
                           f"is {stored.decode(errors='replace')!r}: another log"))
        else:
            stores = os.path.abspath(os.path.join(self.root, "stores"))
            if (not os.path.isdir(stores) or not os.listdir(stores)
                    or log.get_meta(f"generation/{self.job_name}") is not None):
                return
            evidence = f"{stores} holds the job's stores, but the log has never seen a run of it"
        raise SamzaError(
            f"the local log at {log.path} does not hold job {self.job_name!r}: {evidence}. The "
            f"log was emptied (a file truncated to 0 bytes), deleted or replaced, and the job's "
            f"inputs, checkpoints and changelogs in it with it. Restore the directory {log.path} "
            f"from a backup; or start the job over: `samza-dsl reset APP` (it removes the job's "
            f"stores and this mark, and refuses while the job runs), then load its inputs again")

    def _mark_log(self) -> None:
        """Note, in ``job.dir`` and in the log, that this log holds the job."""
        if self._read_log_id() is not None:
            return  # checked when the job was opened
        with log_id_lock(self.root, exclusive=True):
            if self._read_log_id() is not None:
                return  # another container of the job was first
            log = self.checkpoints.log
            stored = log.get_meta(self._log_id_key())
            token = (stored.decode(errors="replace") if stored is not None
                     else secrets.token_hex(8))
            if stored is None:
                log.put_meta(self._log_id_key(), token.encode())
            path = self._log_id_file()
            try:
                with open(path + ".tmp", "w", encoding="utf-8") as f:
                    f.write(token + "\n")
                os.replace(path + ".tmp", path)
            except OSError as e:
                raise storage_error(e, path, "writing the job's log id") or SamzaError(
                    f"cannot write {path}: {e}; check that job.dir {self.root} is "
                    f"writable") from e

    def messages(self, stream_id: str, *, since_start: bool = True) -> list[Any]:
        """Messages of a stream in the log; of an output, by default only this run's."""
        return [m for ms in self.partitions(stream_id, since_start=since_start).values()
                for m in ms]

    def partitions(self, stream_id: str, *, since_start: bool = True) -> dict[int, list[Any]]:
        """``messages``, partition by partition: ``{partition: messages in offset order}``."""
        if stream_id not in self.physical:
            raise KeyError(f"no stream {stream_id!r} in job {self.job_name!r}")
        log = self.log_of(self.stream_system[stream_id])
        codec = self.codecs[stream_id]
        parts: dict[int, list[Any]] = {}
        starts = self.output_start.get(stream_id) if since_start else None
        for p in range(self.counts[stream_id]):
            out = parts[p] = []
            pos = starts[p] if starts else 0
            while True:
                first, records = log.read(self.physical[stream_id], p, pos, 65536)
                if not records:
                    break
                out.extend(m for m in codec.decode_batch(SSP(stream_id, p), first, records,
                                                         self.generation)
                           if not is_control(m) and type(m) is not Skipped)
                pos = first + len(records)
        return parts

    def tail(self, stream_id: str, n: int) -> list[Any]:
        """At most the last ``n`` messages of this run's part of an output (all partitions'
        last ones, partition by partition), read from the end of each partition: never the
        whole stream, however much the run wrote."""
        log = self.log_of(self.stream_system[stream_id])
        phys, codec = self.physical[stream_id], self.codecs[stream_id]
        starts = self.output_start.get(stream_id)
        out: list[Any] = []
        for p in range(self.counts[stream_id]):
            want = n - len(out)
            if want <= 0:
                break
            start = max(starts[p] if starts else 0, log.start_offset(phys, p))
            end, span = log.end_offset(phys, p), want
            while True:  # control records may sit at the end: look further back for them
                pos = max(start, end - span)
                msgs = self._decoded(log, phys, SSP(stream_id, p), codec, pos, end)
                if len(msgs) >= want or pos == start:
                    break
                span *= 4
            out.extend(msgs[-want:])
        return out

    def _decoded(self, log: LocalLog, phys: str, ssp: SSP, codec: Any, pos: int,
                 end: int) -> list[Any]:
        """The messages of records ``[pos, end)`` of a partition, control records left out."""
        out: list[Any] = []
        while pos < end:
            first, records = log.read(phys, ssp.partition, pos, end - pos)
            if not records:
                break
            out.extend(m for m in codec.decode_batch(ssp, first, records, self.generation)
                       if not is_control(m) and type(m) is not Skipped)
            pos = first + len(records)
        return out

    def _append(self, stream_id: str, parts: Mapping[int, list[Any]], batch: int = 1024) -> None:
        """Messages into given partitions, in log batches of ``batch`` records."""
        log = self.log_of(self.stream_system[stream_id])
        phys, encode = self.physical[stream_id], self.codecs[stream_id].encode
        for p, msgs in parts.items():
            for i in range(0, len(msgs), batch):
                log.append(phys, p, [encode(m) for m in msgs[i:i + batch]])

    def load(self, stream_id: str, messages: Iterable[Any], batch: int = 4096, *,
             commit_bytes: int = LOAD_COMMIT_BYTES, where: Callable[[], str] | None = None
             ) -> int:
        """Append messages to a stream: a ``KV`` to the partition of its key (murmur2, as
        Kafka's default partitioner), other messages round-robin. Returns the count.

        Messages are read from ``messages`` as they come, never all held: they go in segments
        of up to ``batch`` records per partition, one transaction per ``commit_bytes`` of
        encoded records. A load of up to that size is all or nothing (a full disk leaves the
        stream as it was); a larger one that fails part way keeps the messages before the
        failed transaction, which are the first ones given, and the error says how many and
        ``where()`` the last of them came from."""
        if stream_id not in self.physical:
            raise SamzaError(f"{stream_id!r} is not a stream of job {self.job_name!r}"
                             f"{did_you_mean(stream_id, self.physical)}; streams: "
                             f"{', '.join(sorted(self.physical))}")
        log = self.log_of(self.stream_system[stream_id])
        phys = self.physical[stream_id]
        encode = self.codecs[stream_id].encode
        partition_of = self._load_partitioner(stream_id, log)
        segments: list[tuple[str, int, list[Record]]] = []
        bufs: dict[int, list[Record]] = {}
        count = done = size = 0
        last_where = ""
        for m in messages:
            p = partition_of(m)
            buf = bufs.get(p)
            if buf is None:
                buf = bufs[p] = []
            rec = encode(m)
            buf.append(rec)
            count += 1
            size += len(rec[1] or b"") + len(rec[0] or b"")
            if len(buf) >= batch:
                segments.append((phys, p, buf))
                bufs[p] = []
            if size >= commit_bytes:
                # every buffer goes in: what is committed is exactly the first `count` messages
                segments += [(phys, q, b) for q, b in bufs.items() if b]
                bufs.clear()
                self._append_load(log, stream_id, segments, done, count, last_where)
                done, size, segments = count, 0, []
                last_where = where() if where is not None else ""
        segments += [(phys, q, b) for q, b in bufs.items() if b]
        self._append_load(log, stream_id, segments, done, count, last_where)
        self._mark_log()
        return count

    def _load_partitioner(self, stream_id: str, log: LocalLog) -> Callable[[Any], int]:
        """The partition of each message a load appends: a keyed one's by its key, the others
        round-robin from where the stream's partitions end."""
        phys, n = self.physical[stream_id], self.counts[stream_id]
        codec = self.codecs[stream_id]
        key_serde = codec.serde.key_serde if isinstance(codec.serde, KVSerde) else None
        partitioner = KeyPartitioner(n, key_serde.serialize if key_serde is not None
                                     else default_key_bytes)
        rr = sum(log.end_offset(phys, p) for p in range(n))

        def partition_of(m: Any) -> int:
            nonlocal rr
            if type(m) is KV and m.key is not None:
                return int(partitioner(m.key))
            rr += 1
            return (rr - 1) % n

        return partition_of

    def _append_load(self, log: LocalLog, stream_id: str,
                     segments: list[tuple[str, int, list[Record]]], done: int, count: int,
                     last_where: str) -> None:
        try:
            log.append_batches(segments)
        except SamzaError as e:
            if done:
                text = (f"the first {done:,} message(s) were appended to stream {stream_id!r} "
                        f"({last_where or 'a load commits as it goes'}), the {count - done:,} "
                        f"after them not: {e}. Load only the rest once the cause is fixed")
            else:
                text = (f"nothing of the {count} message(s) was appended to stream "
                        f"{stream_id!r} (a load is all or nothing): {e}")
            if isinstance(e, StorageError):
                raise StorageError(text, path=e.path, errno=e.errno) from e
            raise SamzaError(text) from e

    def check_load(self, stream_id: str, messages: Iterable[Any],
                   where: Callable[[], str] | None = None) -> int:
        """Encode each message as ``load`` would, keeping none: a message the stream cannot
        take is an error (prefixed with ``where()`` it came from) before anything is appended.
        Returns the count."""
        if stream_id not in self.physical:
            raise SamzaError(f"{stream_id!r} is not a stream of job {self.job_name!r}"
                             f"{did_you_mean(stream_id, self.physical)}; streams: "
                             f"{', '.join(sorted(self.physical))}")
        encode = self.codecs[stream_id].encode
        count = 0
        for m in messages:
            try:
                encode(m)
            except SamzaError as e:
                if where is None:
                    raise
                raise SamzaError(f"{where()}: {e}") from e
            count += 1
        return count

    def reset(self, *, outputs: bool = False) -> list[str]:
        """Forget the job's progress: checkpoints, stores, intermediate streams, changelogs and
        dead letters (and outputs with ``outputs=True``). Inputs stay. Returns what went.
        Refuses while a container of the job runs (``JobLockedError``)."""
        lock = self.job_lock()
        lock.exclusive("reset", f"reset job {self.job_name!r}")
        try:
            return self._reset(outputs)
        finally:
            lock.release()

    def _reset(self, outputs: bool) -> list[str]:
        gone: list[str] = []
        for log in {id(lg): lg for lg in [self.log_of(s) for s in set(self.stream_system.values())]
                    }.values():
            n = log.delete_meta(f"checkpoint/{self.job_name}/")
            if n:
                gone.append(f"{n} checkpoint(s) in {log.path}")
            names = [self.physical[sid] for sid, s in self.plan.streams.items()
                     if s.kind in ("intermediate", "broadcast") or (outputs and s.kind == "output")]
            names += [st for st in log.streams()
                      if st == dead_letter_stream(self.job_name)
                      or (st.startswith(self.job_name + "-") and st.endswith("-changelog"))]
            for st in names:
                if log.partitions(st) is not None:
                    log.delete_stream(st)
                    gone.append(f"stream {st}")
        stores = os.path.join(self.root, "stores")
        if remove_tree(stores):
            gone.append(f"stores in {stores}")
        if os.path.exists(self._log_id_file()):
            os.remove(self._log_id_file())  # the next run marks the log it finds now
        return gone

    def release_lock(self) -> None:
        """Let another process run this container (its run is over)."""
        self.lock.release()

    def close(self) -> None:
        self.lock.release()
        for log in self.logs.values():
            log.close()
        self.logs.clear()


def remove_tree(path: str) -> bool:
    if os.path.isdir(path):
        shutil.rmtree(path)
        return True
    return False
