"""The embedded local log's ``JobSystem`` (``runtime.engine.systems``): a job's runs, and what
``samza-dsl`` does with a job whose streams are in the local log (load, dump, status, reset,
compact, the job page's metrics stream), each on a ``LocalJob`` opened for it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from runtime.engine.dump import dump_lines, dump_source, job_dump_sources
from runtime.engine.feeding import mark, plan_feeding, read_marks, write_marks
from runtime.engine.job import SSP
from runtime.engine.status_rows import (
    STATUS_VERSION,
    containers,
    job_model,
    last_metrics,
    partitions,
    store_rows,
)
from runtime.engine.systems import NeverRan
from runtime.host.jobdir import dead_letter_stream, job_dir, metrics_stream
from runtime.local.compaction import changelog_location, compact_job
from runtime.local.system import LocalJob, log_path
from samza_dsl.config import did_you_mean
from samza_dsl.errors import SamzaError
from samza_dsl.jobconfig import JobConfig

__all__ = ["LocalJobSystem", "local_status"]


class LocalJobSystem:
    """A job on the embedded local log (``runtime.local.system.LocalJob``)."""

    label = "the embedded local log"
    #: its metrics snapshots are in its log, which this machine reads (the job page)
    metrics_in_log = True
    uncommitted_note = ("samza-dsl dump: --uncommitted: the embedded local log holds committed "
                        "records only (an exactly-once task writes at its commit), so this shows "
                        "the same")

    async def create(self, app: Any, config: Any, metrics: Any, *, follow: bool,
                     inputs: Mapping[str, Any]) -> LocalJob:
        return LocalJob(app, config, follow=follow, inputs=inputs, metrics=metrics)

    async def prepare(self, app: Any, config: Any, containers: int, inputs: Mapping[str, Any],
                      check: Callable[[Any], Awaitable[None]]) -> LocalJob:
        job = LocalJob(app, config, run=False)
        # exclusive while the run is prepared (checkpoints move), then shared with the
        # containers: no other run or reset of the job meanwhile
        lock = job.job_lock()
        try:
            lock.start_containers(containers)
            job.prepare(inputs)
            await check(job)
            lock.share()
        except BaseException:
            lock.release()
            raise
        finally:
            job.close()  # the containers open the log themselves
        job.lock = lock
        return job

    async def input_ends(self, job: Any, keys: Iterable[tuple[str, int]]
                         ) -> dict[tuple[str, int], int]:
        return _ends(job, keys)

    async def abandon(self, job: Any) -> None:
        job.release_lock()

    def where(self, job: Any) -> str | None:
        return f"job {job.job_name}: state in {job.root}"

    def feed(self, app: Any, config: Any, given: Mapping[str, Sequence[Any]],
             source: Mapping[str, str], mode: str | None, sample_n: int) -> list[str]:
        job = LocalJob(app, JobConfig.of(app, config), run=False)
        try:
            def held_now(sid: str) -> int:
                log = job.log_of(job.stream_system[sid])
                return sum(log.end_offset(job.physical[sid], p) for p in range(job.counts[sid]))

            held = {sid: held_now(sid) for sid in given}
            marks = read_marks(job.root)
            load, notes = plan_feeding(given, source, held, marks, mode, sample_n, job.job_name,
                                        f"in the local log of {job.root}")
            lock = None
            if mode == "replace":
                lock = job.job_lock()
                lock.exclusive("run --replace", f"replace the inputs of job {job.job_name!r}")
            try:
                if mode == "replace":
                    gone = job._reset(outputs=False)
                    for sid in given:
                        log = job.log_of(job.stream_system[sid])
                        log.delete_stream(job.physical[sid])
                        log.create(job.physical[sid], job.counts[sid])
                        gone.append(f"the {held[sid]:,} message(s) of input {sid}")
                    notes.append(f"--replace: job {job.job_name} starts over; removed "
                                 + "; ".join(gone))
                for sid in load:
                    n = job.load(sid, given[sid])
                    notes.append(f"loaded {n:,} message(s) into {sid}"
                                 + (" after the ones it held" if mode == "append" and held[sid]
                                    else ""))
                    mark(marks, sid, source[sid], sample_n, mode, held[sid], held_now(sid))
            finally:
                if lock is not None:
                    lock.release()
            write_marks(job.root, marks)
        finally:
            job.close()
        return notes

    def load_file(self, app: Any, config: Any, stream: str, path: str,
                  rows: Callable[[bool], Iterator[tuple[int, Any]]], again: str, *,
                  app_ref: str) -> str:
        # the stream and the file are checked before the job's log is opened: a load that
        # fails leaves no job behind
        _local_streams(app, "load")
        keyed = _keyed(app, config, stream)
        # The file is read a line at a time, three times over, so its size does not matter:
        # every line decodes (before the job is opened), every message encodes, then they are
        # appended; a bad line loads nothing.
        for _ in rows(keyed):
            pass
        at = [0]

        def messages() -> Iterator[object]:
            for lineno, obj in rows(keyed):
                at[0] = lineno
                yield obj

        with self.opened(app, config, "load", app_ref) as job:
            job.check_load(stream, messages(), where=lambda: f"{path}:{at[0]}")
            n = job.load(stream, messages(),
                         where=lambda: f"the last of them from {path}:{at[0]}; load the lines "
                                       f"after it")
        return f"loaded {n} message(s) into {stream}"

    def dump_lines(self, app: Any, config: Any, stream: str, limit: int | None, *,
                   offsets: bool, uncommitted: bool, app_ref: str) -> Iterator[bytes]:
        with self.opened(app, config, "dump", app_ref, ran=True) as job:
            source = dump_source(dump_sources(job), stream, job.job_name)
            yield from dump_lines(source, limit, offsets=offsets)

    def status(self, app: Any, config: Any, app_ref: str) -> dict[str, Any]:
        with self.opened(app, config, "status", app_ref, ran=True, create=False) as job:
            return local_status(job)

    def reset(self, app: Any, config: Any, *, outputs: bool, app_ref: str
              ) -> tuple[str, list[str]]:
        # a log that lost the job can start over
        with self.opened(app, config, "reset", app_ref, verify_log=False, ran=True) as job:
            return job.job_name, job.reset(outputs=outputs)

    def compact(self, app: Any, config: Any, batch: int, *, app_ref: str
                ) -> tuple[str, list[Any]]:
        with self.opened(app, config, "compact", app_ref, ran=True) as job:
            return job.job_name, compact_job(job, group_records=batch)

    def open_job(self, app: Any, config: Any, *, app_ref: str) -> LocalJob:
        _local_streams(app, "ui")
        return LocalJob(app, JobConfig.of(app, config), run=False)

    @contextlib.contextmanager
    def opened(self, app: Any, config: Any, command: str, app_ref: str, verify_log: bool = True,
               ran: bool = False, create: bool = True) -> Iterator[LocalJob]:
        """The application's job on the embedded local log, opened without running it. With
        ``ran``, a job with no job.dir and no log yet is refused (``NeverRan``) and nothing is
        created; without ``create``, no stream the log lacks is created either."""
        streams = _local_streams(app, command)
        config = JobConfig.of(app, config)
        if ran:
            name = config.job.job_name
            root = job_dir(name, config.job)
            logs = {log_path(d.system.name, d.system.config, name, config)
                    for d in streams if d.system.factory == "local"}
            if not os.path.exists(root) and not any(os.path.exists(p) for p in logs):
                raise NeverRan(f"job {name!r} has not run here: its job.dir {root} does not "
                               f"exist (looked in {os.getcwd()}); run it first with "
                               f"`samza-dsl run {app_ref}`, or give its job.dir with -c job.dir=PATH")
        job = LocalJob(app, config, run=False, verify_log=verify_log, create=create)
        try:
            yield job
        finally:
            job.close()


def _ends(job: Any, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The end offset of each (stream, partition) given, in the job's local log."""
    return {(sid, p): job.log_of(job.stream_system[sid]).end_offset(job.physical[sid], p)
            for sid, p in keys if p < job.counts.get(sid, 0)}


def _local_streams(app: Any, command: str) -> list[Any]:
    """The application's input and output descriptors; an error when none is on a LocalSystem."""
    streams = [*app.spec().inputs.values(), *app.spec().outputs.values()]
    if not any(d.system.factory == "local" for d in streams):
        raise SamzaError(f"application {app.name!r} has no stream on a LocalSystem; samza-dsl "
                         f"{command} works on the embedded local log or Kafka topics")
    return streams


def _keyed(app: Any, config: Any, stream: str) -> bool:
    """Whether ``stream`` of the application is keyed (its JSON Lines are key/value pairs); an
    error naming the streams when it has none of that name."""
    d = app.spec().inputs.get(stream) or app.spec().outputs.get(stream)
    if d is not None:
        return bool(d.keyed)
    streams = app.plan(config=JobConfig.of(app, config)).streams
    if stream not in streams:
        raise SamzaError(f"{stream!r} is not a stream of {app.name!r}"
                         f"{did_you_mean(stream, streams)}; streams: {', '.join(sorted(streams))}")
    return bool(streams[stream].keyed)


def dump_sources(job: LocalJob) -> dict[str, Any]:
    """Every stream of a job on the local log that can be dumped (``job_dump_sources``)."""
    changelogs = {}
    for name, store in job.plan.stores.items():
        if store.changelog:
            system, stream = changelog_location(job, store)
            changelogs[name] = (job.log_of(system), stream)
    return job_dump_sources(
        job.job_name, job.plan, {sid: job.codecs[sid] for sid in job.physical},
        lambda sid: (job.log_of(job.stream_system[sid]), job.physical[sid]),
        job.log_of(job.main_system), dead_letter_stream(job.job_name), changelogs)


def local_status(job: Any, now: float | None = None) -> dict[str, Any]:
    """The status of a job on the local system, from a ``LocalJob`` opened read-only."""
    cps = job.checkpoints
    log = cps.log
    gen, factor = (log.get_meta(f"{k}/{job.job_name}") for k in ("generation", "elasticity"))
    generation = int(gen) if gen else None
    model = job_model(job.plan, job.counts, int(factor) if factor else None)

    def bounds(ssp: SSP) -> tuple[int, int] | None:
        lg, phys = job.log_of(job.stream_system[ssp.stream_id]), job.physical[ssp.stream_id]
        if lg.partitions(phys) is None:
            return None
        return lg.start_offset(phys, ssp.partition), lg.end_offset(phys, ssp.partition)

    def changelog(store: str) -> tuple[str, int | None] | None:
        spec = job.plan.stores[store]
        if not spec.changelog:
            return None
        system, stream = spec.changelog_system or job.main_system, str(spec.changelog_stream)
        lg = job.log_of(system)
        n = lg.partitions(stream)
        return stream, (None if n is None else
                        sum(lg.end_offset(stream, p) - lg.start_offset(stream, p)
                            for p in range(n)))

    records = cps.records()
    count = int(job.plan.config.job.container_count)
    conts, locks = containers(job.root, generation is not None, count)
    rows = partitions(model, records, bounds, now=now)
    written = [r["checkpoint_written"] for r in rows if r["checkpoint_written"] is not None]
    return {
        "version": STATUS_VERSION, "job": job.job_name, "system": "local",
        "job_dir": os.path.abspath(job.root), "generation": generation,
        "elasticity_factor": int(factor) if factor else None,
        "configured_elasticity_factor": int(job.plan.config.job.elasticity_factor),
        "containers": conts, "locks": locks, "containers_note": None, "group": None,
        "checkpoints": {"where": f"{log.path} (metadata checkpoint/{job.job_name}/<task>)",
                        "last_written": max(written, default=None)},
        "partitions": rows, "stores": store_rows(model, [job.root], changelog),
        "metrics": last_metrics(job.log_of(job.main_system), metrics_stream(job.job_name), now)}
