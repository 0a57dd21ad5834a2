"""``LocalRunner``: runs an application in this process until its bounded inputs end, or until
SIGINT/SIGTERM, then commits and closes.

An application whose streams are on a ``LocalSystem`` runs on the embedded local log, with LMDB
stores, changelogs and checkpoints (``runtime.local_system``): a second run resumes after the
first one's checkpoint. ``follow=True`` keeps reading its inputs until stopped. Other
applications run in memory. ``inputs=`` (stream id -> messages, or {partition: messages}) feeds
in-memory inputs, or local inputs that are still empty."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from samza_dsl import StreamApplication
from samza_dsl.config import config_value, validate_config
from samza_dsl.errors import SamzaError

from .container import Container, MemoryCheckpoints
from .late import LateCounts, window_ids
from .memory import MemoryBroker
from .metrics import Metrics
from .testing import TestRunner, memory_job

__all__ = ["LocalRunner"]


class LocalRunner(LateCounts):
    """Late messages of the run's windows: ``late_counts`` and ``late(window, stream=...)``
    (``runtime.late``), in the progress line and the summary ``samza-dsl run`` prints. With
    several container processes they are counted in each container (see its progress line)."""

    def __init__(self, app: StreamApplication, config: Mapping[str, Any] | None = None, *,
                 inputs: Mapping[str, Sequence[Any] | Mapping[int, Sequence[Any]]] | None = None,
                 progress: TextIO | None = None, follow: bool = False,
                 skip: Mapping[str, Mapping[int, set[int]]] | None = None) -> None:
        if not isinstance(app, StreamApplication):
            raise TypeError(f"LocalRunner takes a StreamApplication, got {type(app).__name__}")
        self.app = app
        self.config = validate_config(config)
        self._loader = TestRunner(app, self.config)
        for sid, msgs in (inputs or {}).items():
            self._loader.add_input(sid, msgs)  # checks them
        self._inputs = dict(inputs or {})
        self.progress = progress
        self.follow = follow
        #: records to pass over in this run: {input stream: {partition: {offsets}}}
        self.skip = {sid: {p: set(o) for p, o in parts.items()}
                     for sid, parts in (skip or {}).items()}
        from .kafka_job import uses_kafka

        self.kafka = uses_kafka(app)
        self.local = _uses_local_system(app) and not self.kafka
        self.job: Any = None
        self.container: Container | None = None
        self.broker: MemoryBroker | None = None
        self.metrics = Metrics()
        self.checkpoints = MemoryCheckpoints()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stop_requested = False
        self._state = "new"
        self._display: Any = None
        #: a container process of a run of several sends its progress rows to the parent here
        self._report_to: Any = None

    # -- blocking run -----------------------------------------------------------------------------

    def run(self) -> LocalRunner:
        """Run until every bounded input has ended (or SIGINT/SIGTERM), then commit and close.
        With ``job.container.count`` N > 1 (and no ``job.container.id``), the job runs in N
        container processes on this machine."""
        main_thread = threading.current_thread() is threading.main_thread()
        if self.containers > 1:
            self._run_containers(install_signals=main_thread)
        else:
            asyncio.run(self._main(install_signals=main_thread))
        return self

    @property
    def containers(self) -> int:
        """How many container processes ``run`` starts (1: this one)."""
        effective = {**self.app.config, **self.config}
        if config_value(effective, "job.container.id") is not None:
            return 1
        return int(config_value(effective, "job.container.count"))

    def _run_containers(self, install_signals: bool) -> None:
        """Prepare the run, start one process per container and wait for them all. A container
        that fails stops the others (they drain and commit) and the run raises an error naming
        it; SIGINT/SIGTERM are passed on to every container."""
        if not (self.local or self.kafka):
            raise SamzaError(f"job.container.count={self.containers}: the containers of a job "
                             f"share its streams, so its streams must be on Kafka or the local "
                             f"system, not in memory")
        n = self.containers
        if self.kafka:
            from .kafka_job import KafkaJob

            self.job = asyncio.run(KafkaJob.prepare(self.app, self.config))
            self._lock = self.job.lock  # shared with the containers
        else:
            from .job_lock import JobLock
            from .local_system import LocalJob

            self.job = job = LocalJob(self.app, self.config, run=False)
            # exclusive while the run is prepared (checkpoints move), then shared with the
            # containers: no other run or reset of the job meanwhile
            lock = JobLock(job.root, job.job_name)
            try:
                lock.start_containers(n)
                job.prepare(self._inputs)
                lock.share()
            except BaseException:
                lock.release()
                raise
            finally:
                job.close()  # the containers open the log themselves
            self._lock = lock
        self.plan = self.job.plan
        self._state = "running"
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        ctx = multiprocessing.get_context("fork")
        rows = ctx.Queue() if self.progress is not None else None
        procs = [ctx.Process(target=_container_main, name=f"{self.app.name}-container-{i}",
                             args=(self.app, {**self.config, "job.container.id": i},
                                   self.follow, self.skip, rows))
                 for i in range(n)]
        stop = threading.Event()
        previous = {}
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, lambda *_: stop.set())
        self._procs = procs
        try:
            # A container handles SIGTERM once its loop runs: until then the signals stay blocked
            # (a forked child inherits the mask; _run unblocks them), so a stop right after start
            # is a clean stop, never a container killed before it could commit.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
            try:
                for proc in procs:
                    proc.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            failed: list[str] = []
            forwarded = False
            shown = _ContainerRows(self.progress, n, self.plan.config) if rows is not None \
                else None
            while any(p.is_alive() for p in procs):
                if shown is not None:
                    shown.take(rows, procs)
                if (stop.is_set() or self._stop_requested or failed) and not forwarded:
                    forwarded = True
                    for p in procs:
                        if p.is_alive() and p.pid is not None:
                            os.kill(p.pid, signal.SIGTERM)
                for i, p in enumerate(procs):
                    if p.exitcode not in (None, 0) and all(f"container {i}" not in x
                                                           for x in failed):
                        failed.append(f"container {i} (exit code {p.exitcode})")
                multiprocessing.connection.wait([p.sentinel for p in procs if p.is_alive()],
                                                timeout=0.05)  # wakes when one exits
            failed += [f"container {i} (exit code {p.exitcode})" for i, p in enumerate(procs)
                       if p.exitcode != 0 and all(f"container {i} " not in x for x in failed)]
            if shown is not None:
                shown.take(rows, procs, final=True)
            if failed:
                self._state = "failed"
                raise SamzaError(f"job {self.app.name!r}: {', '.join(failed)} of {n} failed "
                                 f"(their errors are above); the others were stopped after a "
                                 f"commit. Fix the cause and run the job again: each container "
                                 f"resumes after its checkpoints")
            self._state = "finished"
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join()
            held = getattr(self, "_lock", None)
            if held is not None:
                held.release()

    async def _main(self, install_signals: bool) -> None:
        if self.kafka:
            from .kafka_job import KafkaJob

            kjob = await KafkaJob.create(self.app, self.config, self.metrics, follow=self.follow)
            self.job, self.plan, container = kjob, kjob.plan, kjob.container
        elif self.local:
            from .local_system import LocalJob

            job = LocalJob(self.app, self.config, follow=self.follow,
                           inputs=self._inputs, metrics=self.metrics)
            self.job, self.plan, container = job, job.plan, job.container
        else:
            if self.skip:
                raise SamzaError(f"skip: job {self.app.name!r} runs in memory, where its inputs "
                                 f"are given whole; leave the record out of the input instead")
            plan, broker, container = memory_job(self.app, self._loader._inputs,
                                                 self._loader._partitions(), self.config,
                                                 checkpoints=self.checkpoints)
            self.plan, self.broker = plan, broker
        self.container = container
        self.metrics = container.metrics
        if self.skip and self.job is not None:
            for sid, parts in self.skip.items():
                self.job.codecs[sid].skip = {p: set(o) for p, o in parts.items()}
        self._loop = asyncio.get_running_loop()
        self._state = "running"
        if install_signals:
            for sig in _STOP_SIGNALS:
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    self._loop.add_signal_handler(sig, self._request_stop)
            # a forked container starts with them blocked (see _run_containers): one sent
            # meanwhile is delivered now, to the handler
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        if self._stop_requested:
            container.request_stop()
        reporter = asyncio.create_task(self._report()) \
            if self.progress or self._report_to is not None else None
        try:
            await container.run()
            self._state = "finished"
        except BaseException:
            self._state = "failed"
            raise
        finally:
            if self.local or self.kafka:
                self.job.release_lock()  # the job stays open for reading its outputs
            if reporter is not None:
                reporter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reporter
                self._print_progress(final=True)


    def _request_stop(self) -> None:
        self._stop_requested = True
        if self.container is not None:
            self.container.request_stop()

    async def _report(self) -> None:
        interval = max(int(self.plan.config.get("task.progress.ms", 1000)), 50) / 1000.0
        while True:
            await asyncio.sleep(interval)
            self._print_progress()

    def _print_progress(self, final: bool = False) -> None:
        """A row of the progress display (``runtime.progress``), or, in a container process of
        a run of several, a row for the parent to show."""
        if self.container is None or (self.progress is None and self._report_to is None):
            return
        from .progress import ProgressDisplay, status_row

        effective = {**self.app.config, **self.config}
        count = int(config_value(effective, "job.container.count"))
        cid = config_value(effective, "job.container.id")
        row = status_row(self.container, self.plan,
                         late=self.late() if window_ids(self.plan) else None,
                         follow=self.follow, containers=count)
        name = "" if cid is None else f"container {cid} of {count}"
        if self._report_to is not None:
            self._report_to.put((name, row))
            return
        if self._display is None:
            self._display = ProgressDisplay(self.progress)  # type: ignore[arg-type]
        self._display.update({name: row}, final=final)

    # -- embedding --------------------------------------------------------------------------------

    def start(self) -> LocalRunner:
        """Run in a background thread; ``stop()`` ends it, ``status()`` reports."""
        if self._thread is not None:
            raise SamzaError("LocalRunner.start(): already started")

        def target() -> None:
            try:
                if self.containers > 1:
                    self._run_containers(install_signals=False)
                else:
                    asyncio.run(self._main(install_signals=False))
            except BaseException as exc:  # reported by stop()/status()
                self._error = exc

        self._thread = threading.Thread(target=target, name=f"samza-{self.app.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Commit and close; re-raises a failure of the job."""
        if self._thread is None:
            raise SamzaError("LocalRunner.stop(): not started")
        deadline = time.monotonic() + timeout
        if self.containers > 1:
            self._stop_requested = True  # passed on to the containers as SIGTERM
        while self._loop is None and self._thread.is_alive() and time.monotonic() < deadline \
                and not self._stop_requested:
            time.sleep(0.01)
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._request_stop)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            raise SamzaError(f"LocalRunner.stop(): {self.app.name!r} did not stop within {timeout}s")
        if self._error is not None:
            raise self._error

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a started job to finish; True if it did."""
        if self._thread is None:
            raise SamzaError("LocalRunner.wait(): not started")
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def status(self) -> dict[str, Any]:
        procs = getattr(self, "_procs", None)
        if procs is not None:  # containers in processes of their own
            return {"state": self._state,
                    "containers": [{"pid": p.pid, "alive": p.is_alive(), "exit_code": p.exitcode}
                                   for p in procs]}
        if self.container is None:
            return {"state": "starting", "processed": 0, "in_flight": 0}
        out = self.container.status()
        out["state"] = "failed" if self._error else self._state
        out["late"] = self.late()  # late messages of the event-time windows so far
        if self._error is not None:
            out["error"] = str(self._error)
        return out

    # -- results ----------------------------------------------------------------------------------

    def _late_snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot()

    def close(self) -> None:
        """Close the local log (after reading the outputs)."""
        if self.job is not None:
            self.job.close()

    def messages(self, stream_id: str) -> list[Any]:
        """An output's messages; on the local system, those this run wrote."""
        if self.local or self.kafka:
            if self.job is None:
                raise KeyError(f"no stream {stream_id!r}: the job has not run")
            return list(self.job.messages(stream_id))
        if self.broker is None or stream_id not in self.broker.streams:
            raise KeyError(f"no stream {stream_id!r} in this run")
        return [m for p in range(len(self.broker.streams[stream_id]))
                for m in self.broker.messages(stream_id, p)]


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


_LINES = "\0lines"


class _ContainerRows:
    """The parent's progress display of a run of several container processes: a row each, from
    the rows they send."""

    def __init__(self, stream: Any, n: int, config: Mapping[str, Any]) -> None:
        from .progress import ProgressDisplay

        self.display = ProgressDisplay(stream)
        self.rows: dict[str, dict[str, Any]] = {f"container {i} of {n}": {"state": "starting"}
                                                for i in range(n)}
        self.interval = max(int(config.get("task.progress.ms", 1000)), 50) / 1000.0
        self.next = time.monotonic() + self.interval
        self.stream = stream
        self.lines: list[str] = []

    def take(self, queue: Any, procs: Sequence[Any], final: bool = False) -> None:
        import queue as queue_mod

        while True:
            try:
                name, row = queue.get_nowait()
            except (queue_mod.Empty, OSError, EOFError):
                break
            if name == _LINES:
                self.lines += row
            else:
                self.rows[name] = row
        n = len(procs)
        for i, p in enumerate(procs):
            name = f"container {i} of {n}"
            if p.exitcode not in (None, 0):
                self.rows[name] = {"state": f"failed (exit code {p.exitcode})"}
        if final or time.monotonic() >= self.next:
            self.next = time.monotonic() + self.interval
            self.display.update(self.rows, final=final)
        if final:
            self.display.close()
            for line in self.lines:
                self.stream.write(line + "\n")
            self.stream.flush()


def _container_main(app: StreamApplication, config: Mapping[str, Any], follow: bool,
                    skip: Mapping[str, Mapping[int, set[int]]] | None = None,
                    rows: Any = None) -> None:
    """A forked container process: runs its share of the tasks. (A local log it opens is
    opened afresh: ``LocalLog`` never uses handles inherited across a fork.)"""
    runner = LocalRunner(app, config, follow=follow, skip=skip)
    runner._report_to = rows
    runner.run()
    from .summary import traffic_lines

    lines = []
    if runner.container is not None:  # the parent cannot see this process's counters
        lines += [ln for ln in traffic_lines(runner.container.status()["read"], {}, runner.plan,
                                             resumed=False, app_ref=None)
                  if ln.startswith(("in:", "through:"))]
    lines = [f"container {config.get('job.container.id')}: {line}"
             for line in lines + runner.late_summary()]
    if rows is not None:  # the parent prints them below its progress display
        rows.put((_LINES, lines))
        return
    for line in lines:
        print(line, file=sys.stderr)


def _uses_local_system(app: StreamApplication) -> bool:
    return any(d.system.factory == "local" for d in [*app._inputs.values(), *app._outputs.values()])


def print_outputs(runner: LocalRunner, out: TextIO = sys.stdout, limit: int = 10,
                  fmt: Callable[[Any], str] = repr, app_ref: str | None = None) -> None:
    """The run's summary: where it resumed, each output's messages of this run, what came in and
    went out, and the late messages of its windows (how many, where they went, and why)."""
    from .summary import LATE_WHY, resume_lines, traffic_lines

    container = runner.container
    in_process = getattr(runner, "_procs", None) is None and container is not None
    if in_process:
        for line in resume_lines(container.restored, runner.plan):  # type: ignore[union-attr]
            out.write(line + "\n")
    counts: dict[str, int] = {}
    for sid in runner.plan.output_streams:
        msgs = runner.messages(sid)
        counts[sid] = len(msgs)
        out.write(f"{sid}: {len(msgs)} message(s)\n")
        for m in msgs[:limit]:
            out.write(f"  {fmt(m)}\n")
        if len(msgs) > limit:
            out.write(f"  ... {len(msgs) - limit} more\n")
    if in_process:
        resumed = any(container.restored.values())  # type: ignore[union-attr]
        for line in traffic_lines(container.status()["read"], counts,  # type: ignore[union-attr]
                                  runner.plan, resumed=resumed, app_ref=app_ref):
            out.write(line + "\n")
        skipped = runner.metrics.snapshot().get("skipped-by-request", 0)
        if skipped:
            out.write(f"skipped: {skipped} record(s) as --skip asked (not processed; the "
                      f"checkpoint is past them)\n")
    if window_ids(runner.plan) and getattr(runner, "_procs", None) is None:
        lines = runner.late_summary() or ["late: no late messages"]
        if runner.late():
            lines.append(LATE_WHY)
        for line in lines:
            out.write(line + "\n")
