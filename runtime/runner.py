"""``LocalRunner``: runs an application in this process until its bounded inputs end, or until
SIGINT/SIGTERM, then commits and closes.

An application whose streams are on a ``LocalSystem`` runs on the embedded local log, with LMDB
stores, changelogs and checkpoints (``runtime.local.system``): a second run resumes after the
first one's checkpoint. ``follow=True`` keeps reading its inputs until stopped. Other
applications run in memory. ``inputs=`` (stream id -> messages, or {partition: messages}) feeds
in-memory inputs, or local inputs that are still empty."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from runtime import container_rows
from runtime.container_rows import OVERDUE_EXITS, TOTALS, ContainerRows, LogEnds, RowsTo, Totals
from runtime.engine.container import Container, MemoryCheckpoints
from runtime.engine.late import LateCounts, window_ids
from runtime.engine.systems import job_system
from runtime.host.metrics import Metrics
from runtime.host.stacks import stacks_on
from runtime.host.watchdog import ABORT_S, REPEAT_S, LoopWatch, exit_now, leave_stuck_threads
from runtime.memory import MemoryBroker, MemoryInputs, memory_job
from samza_dsl import StreamApplication
from samza_dsl.errors import Interrupted, SamzaError
from samza_dsl.jobconfig import job_config

__all__ = ["LocalRunner"]

_log = logging.getLogger("samza_dsl.run")


class LocalRunner(LateCounts):
    """Runs an application on the streaming runtime in this process: on Kafka when its streams
    are there, on the embedded local system when they are on a ``LocalSystem``, else in memory.

    Args:
        app: the application.
        config: Samza-style config (``task.*``, ``job.*``, ``streams.<id>.*``, ``stores.*``,
            ``systems.*``), checked before anything runs; ``job.container.count`` N > 1 runs
            the job in N container processes.
        inputs: stream id -> messages (or ``{partition: messages}``): the bounded inputs of a
            job in memory, or messages to load into local inputs that are still empty. A list
            is placed as Kafka's producer would: a ``KV`` in its key's partition (in memory,
            anything else in partition 0; on the local system, round-robin).
        progress: where the progress line goes (e.g. ``sys.stderr``); None: no progress.
        follow: keep reading new input until SIGINT/SIGTERM (or ``stop()``), instead of
            ending at the inputs' ends as of the start.
        skip: records to pass over once: {input stream: {partition: {offsets}}}.

    Raises:
        TypeError: ``app`` is not a ``StreamApplication``.
        ConfigError: a config key or value is wrong (the message names it).
        SamzaError: inputs that do not fit the application's inputs.

    Late messages of the run's windows: ``late_counts`` and ``late(window, stream=...)``
    (``runtime.engine.late``), also in the progress line and the summary ``samza-dsl run`` prints.
    With several container processes they are counted in each container.

    Example:
        >>> from samza_dsl import StreamApplication, KV
        >>> from samza_dsl.systems import MemorySystem
        >>> app, mem = StreamApplication("doc"), MemorySystem()
        >>> out = app.output(mem.output("lengths"))
        >>> app.input(mem.input("words")).map(lambda w: KV(w, len(w))).send_to(out)
        >>> runner = LocalRunner(app, inputs={"words": ["a", "bb"]}).run()
        >>> [kv.value for kv in runner.messages("lengths")]
        [1, 2]

        A job on the embedded local system (its state under ``.samza/`` of the working
        directory, here a temporary one), run in a background thread:

        >>> import os, tempfile
        >>> from samza_dsl.serdes import StringSerde
        >>> from samza_dsl.systems import LocalSystem
        >>> tmp, cwd = tempfile.TemporaryDirectory(), os.getcwd()
        >>> os.chdir(tmp.name)
        >>> local, app = LocalSystem("local"), StreamApplication("upper")
        >>> words = app.input(local.input("words", serde=StringSerde()))
        >>> words.map(str.upper).send_to(app.output(local.output("upper", serde=StringSerde())))
        >>> runner = LocalRunner(app, inputs={"words": ["a", "b", "c"]}).start()
        >>> runner.wait(timeout=60)  # True: it finished (stop() would end a --follow run)
        True
        >>> runner.status()["state"], runner.status()["processed"]
        ('finished', 3)
        >>> runner.written(), runner.tail("upper", 2), runner.messages("upper")
        ({'upper': 3}, ['B', 'C'], ['A', 'B', 'C'])
        >>> runner.stop(); runner.close(); os.chdir(cwd); tmp.cleanup()
    """

    def __init__(self, app: StreamApplication, config: Mapping[str, Any] | None = None, *,
                 inputs: Mapping[str, Sequence[Any] | Mapping[int, Sequence[Any]]] | None = None,
                 progress: TextIO | None = None, follow: bool = False,
                 skip: Mapping[str, Mapping[int, set[int]]] | None = None) -> None:
        if not isinstance(app, StreamApplication):
            raise TypeError(f"LocalRunner takes a StreamApplication, got {type(app).__name__}")
        self.app = app
        #: the job's config, built once here and handed to the job it makes
        self.config = job_config(app, config)
        self._given = MemoryInputs(app)
        for sid, msgs in (inputs or {}).items():
            self._given.add(sid, msgs)  # checks them
        self._inputs = dict(inputs or {})
        self.progress = progress
        self.follow = follow
        #: records to pass over in this run: {input stream: {partition: {offsets}}}
        self.skip = {sid: {p: set(o) for p, o in parts.items()}
                     for sid, parts in (skip or {}).items()}
        #: the system the job runs on, from the registry of systems
        self.system = job_system(app)
        #: what runs the job on its system (``runtime.engine.systems.JobSystem``)
        self.jobs = self.system.job_system()
        #: the job's streams outlive the run (the local log, Kafka): it has a job of its own
        self.on_log = self.system.on_log
        self.job: Any = None
        self.container: Container | None = None
        self.broker: MemoryBroker | None = None
        self.metrics = Metrics()
        self.checkpoints = MemoryCheckpoints()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stop_requested = False
        self._kill_requested = False  # stop() ran out of time: kill the container processes
        #: the signal (SIGINT, SIGTERM) that asked the run to stop; when ``task.shutdown.ms``
        #: after the stop runs out, the run stops anyway (``_stop_overdue``)
        self._stop_signal: int | None = None
        #: when it came; a second stop signal that came a while later (a run of several)
        self._stopped_at = 0.0
        self._second_stop: int | None = None
        self._overdue: asyncio.TimerHandle | None = None
        #: the signal that stopped a bounded run before its inputs ended (None: it was not)
        self.interrupted: int | None = None
        self._state = "new"
        #: the run's job lock, while held; the container processes of a run of several
        self._lock: Any = None
        self._procs: Any = None
        self._display: Any = None
        #: a container process of a run of several sends its progress rows to the parent here
        self._report_to: Any = None
        #: this runner runs one container of a run of several, in a process the parent forked
        self._forked = False
        #: a run of several containers: what they read, where they resumed, their counters
        self._totals: Totals | None = None

    # -- blocking run -----------------------------------------------------------------------------

    def run(self) -> LocalRunner:
        """Run until every bounded input has ended (or SIGINT/SIGTERM), then commit and close.
        With ``job.container.count`` N > 1 (and no ``job.container.id``), the job runs in N
        container processes on this machine. Once SIGINT or SIGTERM has stopped a run, the
        process ignores them from then on: the run is done and committed, and the same stop
        sent again (as ``timeout`` does) must not interrupt what follows it. On the main
        thread the process is the run's: a second stop signal while it runs, a stop whose
        ``task.shutdown.ms`` ran out while a call holds the event loop's thread, or a bounded
        run whose loop is held for ``job.bounded.stall.ms``, ends the process (``os._exit``)
        with one line saying what was abandoned (``runtime.host.watchdog``).

        Returns:
            The runner, for ``messages()`` and ``late_counts``.

        Raises:
            TaskError: an operator failed (it names the operator, task, stream, partition and
                offset); the checkpoint stays before the message.
            SerdeError: a record did not decode under the ``fail`` policy.
            SamzaError: any other reason the job could not run (a storage fault, a broker
                that stayed away, a container that failed), in one message that says what to do.
        """
        main_thread = threading.current_thread() is threading.main_thread()
        if self.containers > 1:
            self._run_containers(install_signals=main_thread)
        elif self._forked:
            # a container process: once its loop closes it ignores SIGINT/SIGTERM (a stop that
            # comes while it exits is no failure), see _ContainerLoop
            with asyncio.Runner(loop_factory=_ContainerLoop) as loop_runner:
                loop_runner.run(self._main(install_signals=main_thread))
        else:
            with asyncio.Runner(loop_factory=_Loop) as loop_runner:
                loop_runner.run(self._main(install_signals=main_thread))
        return self

    @property
    def containers(self) -> int:
        """How many container processes ``run`` starts (1: this one)."""
        if self.config.job.container_id is not None:
            return 1
        return self.config.job.container_count

    def _run_containers(self, install_signals: bool) -> None:
        """Prepare the run, start one process per container and wait for them all. A container
        that fails stops the others (they drain and commit) and the run raises an error naming
        it; SIGINT/SIGTERM are passed on to every container."""
        if not self.on_log:
            raise SamzaError(f"job.container.count={self.containers}: the containers of a job "
                             f"share its streams, so its streams must be on Kafka or the local "
                             f"system, not in memory")
        n = self.containers
        stop = threading.Event()
        previous = {}
        def on_stop(signum: int, _frame: Any) -> None:
            now = time.monotonic()
            if self._stop_signal is None:
                self._stop_signal, self._stopped_at = signum, now
            elif now - self._stopped_at >= REPEAT_S and self._second_stop is None:
                self._second_stop = signum  # the same stop sent twice at once is one
            stop.set()

        if install_signals:  # from here on a stop (Ctrl-C) is a clean one, even while preparing
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, on_stop)
        procs: list[Any] = []
        try:
            self._prepare_containers(n)
            self.plan = self.job.plan
            self._warn_plan()
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            ctx = multiprocessing.get_context("fork")
            queue = ctx.Queue()  # progress rows (with a display) and each container's totals
            procs = [ctx.Process(target=_container_main, name=f"{self.app.name}-container-{i}",
                                 args=(self.app, {**self.config, "job.container.id": i},
                                       self.follow, self.skip, queue, self.progress is not None))
                     for i in range(n)]
            self._procs = procs
            self._wait_for_containers(procs, queue, stop)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for p in procs:
                if p.pid is None:
                    continue
                if p.is_alive():
                    p.kill()
                p.join()
            held = self._lock
            if held is not None:
                held.release()

    def _prepare_containers(self, n: int) -> None:
        """A new run of the job (generation, streams, rescaled checkpoints) that its ``n``
        containers join; the --skip records checked against it."""
        from runtime.run_inputs import check_skips

        async def check(job: Any) -> None:
            if not self.skip:
                return
            keys = [(sid, p) for sid, parts in self.skip.items() for p in parts]
            for line in check_skips(self.skip, job, await self.jobs.input_ends(job, keys),
                                    follow=self.follow):
                _log.warning("%s", line)

        self.job = asyncio.run(self.jobs.prepare(self.app, self.config, n, self._inputs, check))
        self._lock = self.job.lock  # shared with the containers

    def _wait_for_containers(self, procs: list[Any], queue: Any, stop: threading.Event) -> None:
        n = len(procs)
        # A container handles SIGTERM once its loop runs: until then the signals stay blocked
        # (a forked child inherits the mask; _main unblocks them), so a stop right after start
        # is a clean stop, never a container killed before it could commit.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            for proc in procs:
                proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        self._state = "running"  # every container process is there
        failed: list[int] = []
        forwarded = again = False  # the stop passed on to the containers; a second stop too
        forwarded_at = 0.0
        ends = LogEnds(self.app, self.config, self.jobs) if self.jobs.metrics_in_log else None
        shown = ContainerRows(self.progress, n, self.plan.config,
                               ends.end_of if ends is not None else None)
        self._totals = shown.totals
        grace = int(self.plan.config.task.shutdown_ms) / 1000.0
        kill_at = float("inf")
        interrupted = False  # a stop came while the containers ran
        killed: dict[int, str] = {}
        while any(p.is_alive() for p in procs):
            shown.take(queue, procs, forwarded)
            if (stop.is_set() or self._stop_requested or failed) and not forwarded:
                forwarded = True
                interrupted = not failed
                # each container stops itself task.shutdown.ms after the stop, saying what it
                # had in flight; one that cannot (its loop blocked) is killed a little later
                kill_at = time.monotonic() + grace + _KILL_MARGIN
                forwarded_at = time.monotonic()
                for p in procs:
                    if p.is_alive() and p.pid is not None:
                        os.kill(p.pid, signal.SIGTERM)
            if self._second_stop is not None and forwarded and not again \
                    and time.monotonic() >= forwarded_at + REPEAT_S + 0.1:
                # a second stop: each container ends itself at once, saying what it abandons
                again = True
                kill_at = min(kill_at, time.monotonic() + ABORT_S + _KILL_MARGIN)
                for p in procs:
                    if p.is_alive() and p.pid is not None:
                        os.kill(p.pid, signal.SIGTERM)
            if time.monotonic() >= kill_at or self._kill_requested:
                why = ("stop() ran out of time" if self._kill_requested else
                       "it did not stop on a second stop" if again else
                       f"it did not stop within task.shutdown.ms={int(grace * 1000)} of the stop")
                stuck = [(i, p) for i, p in enumerate(procs) if p.is_alive() and i not in killed]
                for i, p in stuck:  # where each was stuck, on its stderr, before it is killed
                    print(f"container {i} (pid {p.pid}): {why}; its threads' stacks follow, "
                          f"then it is killed", file=sys.stderr, flush=True)
                    with contextlib.suppress(OSError):
                        os.kill(p.pid, _STACKS_SIGNAL)
                if stuck:
                    multiprocessing.connection.wait([p.sentinel for _, p in stuck], timeout=1.0)
                for i, p in stuck:  # a clean stop takes too long: none lingers on
                    if p.is_alive():
                        killed[i] = why
                        p.kill()
            for i, p in enumerate(procs):
                if i not in failed and container_rows.failed(p.exitcode, forwarded):
                    failed.append(i)
            multiprocessing.connection.wait([p.sentinel for p in procs if p.is_alive()],
                                            timeout=0.05)  # wakes when one exits
        failed += [i for i, p in enumerate(procs) if i not in failed
                   and container_rows.failed(p.exitcode, forwarded)]
        shown.take(queue, procs, forwarded, final=True)
        if ends is not None:
            ends.close()
        for i, p in enumerate(procs):
            if p.exitcode == -signal.SIGTERM and i not in failed:
                # the stop it was sent came before its loop could take it, or after: what it
                # did since its last commit is done again by the next run (at-least-once)
                print(f"container {i}: stopped by SIGTERM before its last commit; the next "
                      f"run resumes after its last checkpoint", file=sys.stderr)
        if failed:
            self._state = "failed"
            names = ", ".join(f"container {i} (" + (f"killed: {killed[i]}" if i in killed else
                                                    f"exit code {procs[i].exitcode}") + ")"
                              for i in failed)
            raise SamzaError(f"job {self.app.name!r}: {names} of {n} failed (their errors are "
                             f"above); the others were stopped after a commit. Fix the cause "
                             f"and run the job again: each container resumes after its "
                             f"checkpoints")
        self._state = "finished"
        overdue = [i for i, p in enumerate(procs) if forwarded and p.exitcode in OVERDUE_EXITS]
        if overdue:
            self._state = "failed"
            how = ("stopped without waiting on a second stop (what each abandoned is above)"
                   if again else f"did not stop within task.shutdown.ms={int(grace * 1000)} of "
                   f"the stop (what each had in flight is above) and stopped without it")
            raise Interrupted(
                f"job {self.app.name!r}: container{'s' if len(overdue) > 1 else ''} "
                f"{', '.join(map(str, overdue))} of {n} {how}; the next run resumes after each "
                f"container's last checkpoint",
                signal=self._stop_signal if self._second_stop is None else self._second_stop)
        if interrupted and self._stop_signal is not None and not self.follow:
            self.interrupted = self._stop_signal

    def _warn_plan(self) -> None:
        """The plan's warnings (a join whose key is not its stream's partition key), at the
        start of the run."""
        for line in self.plan.warnings:
            _log.warning("plan warning: %s", line)

    async def _main(self, install_signals: bool) -> None:
        if self.on_log:
            job = await self.jobs.create(self.app, self.config, self.metrics,
                                         follow=self.follow, inputs=self._inputs)
            self.job, self.plan, container = job, job.plan, job.container
        else:
            if self.skip:
                raise SamzaError(f"skip: job {self.app.name!r} runs in memory, where its inputs "
                                 f"are given whole; leave the record out of the input instead")
            plan, broker, container = memory_job(self.app, self._given,
                                                 self._given.partitions(), self.config,
                                                 checkpoints=self.checkpoints)
            self.plan, self.broker = plan, broker
        if not self._forked:  # (the parent said it)
            self._warn_plan()
        if self.skip and self.job is not None and not self._forked:  # (the parent checked)
            try:
                notes = await self._check_skips()
            except BaseException:
                await self._abandon()
                raise
            for line in notes:
                _log.warning("%s", line)
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
                    self._loop.add_signal_handler(sig, self._request_stop, sig)
            # a forked container starts with them blocked (see _run_containers): one sent
            # meanwhile is delivered now, to the handler
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        if self._stop_requested:
            self._stop_container()
        reporter = asyncio.create_task(self._report()) \
            if self.progress or self._report_to is not None else None
        # the process is the run's: a thread of its own ends it when the loop cannot
        watch = self._watch(container) if install_signals else None
        try:
            await container.run()
            self._state = "finished"
        except BaseException:
            self._state = "failed"
            raise
        finally:
            if watch is not None:
                watch.stop()
            if self._overdue is not None:
                self._overdue.cancel()
            if self.on_log:
                self.job.release_lock()  # the job stays open for reading its outputs
            if reporter is not None:
                reporter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reporter
                self._print_progress(final=True)


    async def _check_skips(self) -> list[str]:
        """The --skip records against the job about to run (``run_inputs.check_skips``)."""
        from runtime.run_inputs import check_skips

        keys = [(sid, p) for sid, parts in self.skip.items() for p in parts]
        ends = await self.jobs.input_ends(self.job, keys)
        return check_skips(self.skip, self.job, ends, follow=self.follow)

    async def _abandon(self) -> None:
        """Let go of a job built for a run that does not start."""
        await self.jobs.abandon(self.job)

    def _request_stop(self, sig: int | None = None) -> None:
        """A stop: by ``sig`` (SIGINT, SIGTERM), or by ``stop()``."""
        self._stop_requested = True
        if sig is not None and isinstance(self._loop, _Loop):
            self._loop.stopped = True  # a repeat of this stop is ignored as the run ends
        if sig is not None and self._stop_signal is None:
            self._stop_signal = sig
            container = self.container
            if not self.follow and not (container is not None and container.tasks
                                        and all(t.done for t in container.tasks)):
                self.interrupted = sig  # a bounded run that had not ended
        if self.container is not None:
            self._stop_container()

    def _stop_container(self) -> None:
        """Ask the container to stop cleanly, and to stop anyway ``task.shutdown.ms`` later."""
        assert self.container is not None
        self.container.request_stop()
        if self._overdue is None and self._loop is not None:
            grace = int(self.plan.config.task.shutdown_ms) / 1000.0
            self._overdue = self._loop.call_later(grace, self._stop_overdue)

    def _stop_overdue(self, second: int | None = None) -> None:
        """``task.shutdown.ms`` after the stop (or on a ``second`` stop signal), the container
        has not stopped: it stops now, without waiting for its messages in flight, with an
        error that names them."""
        from runtime.engine.in_flight import in_flight_lines

        container = self.container
        if container is None or container.closed:
            return
        ms = int(self.plan.config.task.shutdown_ms)
        lines = in_flight_lines(container.tasks)
        shown = "; ".join(lines[:_SHOWN_TASKS]) + (
            f"; and {len(lines) - _SHOWN_TASKS} more task(s)" if len(lines) > _SHOWN_TASKS else "")
        sig = self._stop_signal if second is None else second
        by = signal.Signals(sig).name if sig is not None else "stop()"
        why = (f"did not stop within task.shutdown.ms={ms} of the stop ({by}), so it"
               if second is None else f"was sent a second stop ({by}), so it")
        container.abort(Interrupted(
            f"{self._who()} {why} stopped without waiting: {shown or 'nothing in flight'}. What "
            f"it did since its last commit is done again by the next run, which resumes after "
            f"the last checkpoint", signal=sig))

    def _who(self) -> str:
        cid = self.config.job.container_id
        return f"job {self.app.name!r}" + (f" container {cid}" if cid is not None else "")

    def _watch(self, container: Container) -> LoopWatch:
        """A watch on the loop from a thread of its own (``runtime.host.watchdog``): a second
        stop, a stop past ``task.shutdown.ms``, or, in a bounded run, a loop held for
        ``job.bounded.stall.ms`` by a call that does not return, ends the process."""
        from runtime.engine.in_flight import blocked_in

        stall_ms = container.config.job.bounded_stall_ms
        grace_ms = container.config.task.shutdown_ms
        return LoopWatch(
            asyncio.get_running_loop(), threading.get_ident(),
            stall_s=stall_ms / 1000.0 if container.bounded and stall_ms > 0 else 0.0,
            grace_s=grace_ms / 1000.0,
            armed=lambda: container.phase in ("running", "stopped")
            or container.lifecycle is not None,
            describe=blocked_in, stop_now=self._stop_overdue, give_up=self._give_up,
            error_code=1 if self._forked else 2, who=self._who()).start()

    def _give_up(self, kind: str, text: str, code: int) -> None:
        """The watch ends the process: its one line, as ``samza-dsl run`` (or, in a container
        process of a run of several, as the container) says an interruption or an error."""
        if not self._forked:
            line = f"samza-dsl run: {kind}: {text}"
        else:
            cid = self.config.job.container_id
            line = text if kind == "interrupted" else f"container {cid}: error: {text}"
        exit_now(line, code)

    async def _report(self) -> None:
        interval = max(self.plan.config.task.progress_ms, 50) / 1000.0
        while True:
            await asyncio.sleep(interval)
            self._print_progress()

    def _print_progress(self, final: bool = False) -> None:
        """A row of the progress display (``runtime.progress``), or, in a container process of
        a run of several, a row for the parent to show."""
        if self.container is None or (self.progress is None and self._report_to is None):
            return
        from runtime.progress import ProgressDisplay, status_row

        count = self.config.job.container_count
        cid = self.config.job.container_id
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
        """Run in a background thread; ``stop()`` ends it, ``status()`` reports.

        Returns:
            The runner.

        Raises:
            SamzaError: it was started already.
        """
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
        if self.containers > 1:
            _STARTED.add(self)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Ask a started job to stop: it drains what is in flight, commits and closes.

        Args:
            timeout: seconds to wait for it.

        Raises:
            SamzaError: it was not started, or did not stop in time; a failure of the job is
                raised again here.
        """
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
        if self._thread.is_alive() and self.containers > 1:
            self._kill_requested = True  # no container process outlives the stop
            self._thread.join(10.0)
        if self._thread.is_alive():
            raise SamzaError(f"LocalRunner.stop(): {self.app.name!r} did not stop within {timeout}s")
        if self._kill_requested:
            raise SamzaError(
                f"LocalRunner.stop(): {self.app.name!r} did not stop within {timeout}s, so its "
                f"container processes were killed; each resumes after its last checkpoint when "
                f"the job runs again") from self._error
        if self._error is not None:
            raise self._error

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a started job to finish.

        Args:
            timeout: seconds to wait at most (None: as long as it takes).

        Returns:
            True if it finished.

        Raises:
            SamzaError: it was not started.
        """
        if self._thread is None:
            raise SamzaError("LocalRunner.wait(): not started")
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def status(self) -> dict[str, Any]:
        """A snapshot of the run: its state, and per container the messages processed and in
        flight, the checkpoints, commits and late messages (containers in processes of their
        own: their pids and exit codes)."""
        procs = self._procs
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
        if self._totals is not None:  # several container processes: their counters, added up
            return dict(self._totals.counters)
        return self.metrics.snapshot()

    def _traffic(self) -> tuple[dict[str, int], dict[str, dict[Any, int]], dict[str, Any]] | None:
        """(user messages read per stream, the checkpoint each task resumed from, the counters:
        records skipped, ...) of this run, over all its containers; None before it ran."""
        if self._totals is not None:
            t = self._totals
            return dict(t.read), dict(t.restored), dict(t.counters)
        if self.container is None:
            return None
        return (dict(self.container.status()["read"]), dict(self.container.restored),
                self.metrics.snapshot())

    def written(self) -> dict[str, int] | None:
        """Messages this run wrote per stream, over all its containers, as its producers counted
        them (what retention deleted since included); None where nothing counts (in memory)."""
        if self._totals is not None:
            return dict(self._totals.written)
        counts = self.container.producer.counts() if self.container is not None else None
        return None if counts is None else dict(counts.written)

    def tail(self, stream_id: str, n: int) -> list[Any]:
        """At most the last ``n`` messages of this run's part of an output, read from its end
        on the local system and Kafka: a summary's few, never the whole output."""
        if self.on_log and self.job is not None:
            return list(self.job.tail(stream_id, n)) if n > 0 else []
        return self.messages(stream_id)[-n:] if n > 0 else []

    def close(self) -> None:
        """Close the local log (after reading the outputs)."""
        if self.job is not None:
            self.job.close()

    def partitions(self, stream_id: str) -> dict[int, list[Any]]:
        """An output's messages partition by partition (``{partition: messages}``, each in
        offset order), as ``messages`` gives them; on the local system and in memory.

        Raises:
            KeyError: no such stream, or the job has not run.
            TypeError: the job ran on Kafka (read the topic's partitions there).

        Example:
            >>> from samza_dsl import StreamApplication, KV
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("doc-parts"), MemorySystem()
            >>> out = app.output(mem.output("lengths", partitions=2))
            >>> (app.input(mem.input("words")).map(lambda w: KV(w, len(w)))
            ...     .send_to(out, partition=lambda kv: kv.value % 2))
            >>> runner = LocalRunner(app, inputs={"words": ["a", "bb", "ccc"]}).run()
            >>> {p: [kv.key for kv in ms] for p, ms in runner.partitions("lengths").items()}
            {0: ['bb'], 1: ['a', 'ccc']}
        """
        if self.on_log:
            if self.job is None:
                raise KeyError(f"no stream {stream_id!r}: the job has not run")
            return dict(self.job.partitions(stream_id))
        if self.broker is None or stream_id not in self.broker.streams:
            raise KeyError(f"no stream {stream_id!r} in this run")
        return {p: list(self.broker.messages(stream_id, p))
                for p in range(len(self.broker.streams[stream_id]))}

    def messages(self, stream_id: str) -> list[Any]:
        """An output's messages.

        Args:
            stream_id: the output's stream id.

        Returns:
            Its messages, decoded; on the local system and Kafka, those this run wrote.

        Raises:
            KeyError: no such stream, or the job has not run.
        """
        if self.on_log:
            if self.job is None:
                raise KeyError(f"no stream {stream_id!r}: the job has not run")
            return list(self.job.messages(stream_id))
        if self.broker is None or stream_id not in self.broker.streams:
            raise KeyError(f"no stream {stream_id!r} in this run")
        return [m for p in range(len(self.broker.streams[stream_id]))
                for m in self.broker.messages(stream_id, p)]


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
#: how long after task.shutdown.ms the parent kills a container that did not stop itself
_KILL_MARGIN = 2.0
#: tasks an error of a stop that ran out of time describes, at most
_SHOWN_TASKS = 8
#: a container process prints its threads' stacks on it, even when stuck in C, then its event
#: loop's tasks (runtime.host.stacks)
_STACKS_SIGNAL = signal.SIGUSR1

# runs of several containers started in the background: stopped at exit if still running, so
# that their processes neither outlive the program nor keep it from exiting (multiprocessing
# waits for its children at exit; this handler, registered after its own, runs first)
_STARTED: weakref.WeakSet[LocalRunner] = weakref.WeakSet()


@atexit.register
def _stop_started() -> None:
    for runner in list(_STARTED):
        if runner._thread is not None and runner._thread.is_alive():
            with contextlib.suppress(Exception):
                runner.stop()


class _Loop(asyncio.SelectorEventLoop):
    """An event loop that lets go of its signal handlers before it closes its wakeup pipe
    (asyncio closes the pipe first: a signal in between is written to a closed descriptor, and
    Python prints that error). Once a stop signal ended the run (``stopped``), its stop signals
    are ignored when it closes rather than given back their defaults: the same stop sent twice
    (``timeout`` sends it to the process and to its group) that comes while the run's summary
    prints must not turn a clean, committed stop into KeyboardInterrupt."""

    stopped = False

    def close(self) -> None:
        for sig in list(getattr(self, "_signal_handlers", {})):  # foreign: asyncio's loop
            self.remove_signal_handler(sig)
        super().close()

    def remove_signal_handler(self, sig: int) -> bool:
        if not self.stopped or sig not in _STOP_SIGNALS:
            return super().remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)  # never the default, not even for a moment
        handlers = self._signal_handlers  # type: ignore[attr-defined]
        if handlers.pop(sig, None) is None:
            return False
        if not handlers:
            signal.set_wakeup_fd(-1)
        return True


class _ContainerLoop(_Loop):
    """The event loop of a container process of a run of several: its stop signals are ignored
    when it closes, whatever ended the run: a SIGINT from the terminal or the SIGTERM the parent
    passes on that comes while the process exits, its run done and committed, must not kill it
    (the parent would report a failure) nor raise KeyboardInterrupt."""

    stopped = True


def _container_main(app: StreamApplication, config: Mapping[str, Any], follow: bool,
                    skip: Mapping[str, Mapping[int, set[int]]] | None = None,
                    queue: Any = None, progress: bool = False) -> None:
    """A forked container process: runs its share of the tasks, sends its progress rows to the
    parent (drawn there with ``progress``; without, they still tell it the container lives) and,
    once done, what it read, where it resumed and its counters,
    for the run's summary. (A local log it opens is opened afresh: ``LocalLog`` never uses
    handles inherited across a fork.)"""
    stacks_on(_STACKS_SIGNAL, 2)  # fd 2: whatever is on it
    runner = LocalRunner(app, config, follow=follow, skip=skip)
    runner._forked = True
    if queue is not None:  # with no display too: the parent tells a stalled container by them
        runner._report_to = RowsTo(queue)
    name = f"container {runner.config.job.container_id}"
    try:
        runner.run()
    except Interrupted as exc:  # it did not stop in time: what it had in flight, in one line
        print(exc, file=sys.stderr, flush=True)
        leave_stuck_threads(name, exc.exit_code)
        sys.exit(exc.exit_code)
    except SamzaError as exc:  # one line naming what failed; the parent names the container
        print(f"{name}: error: {exc}", file=sys.stderr, flush=True)
        leave_stuck_threads(name, 1)
        sys.exit(1)
    for sig in _STOP_SIGNALS:  # done: a stop that comes now changes nothing (_ContainerLoop)
        signal.signal(sig, signal.SIG_IGN)
    if runner.container is not None and queue is not None:
        counters = {k: v for k, v in runner.metrics.snapshot().items()
                    if type(v) is int and v}
        queue.put((TOTALS, "", {"read": dict(runner.container.status()["read"]),
                                 "restored": dict(runner.container.restored),
                                 "counters": counters, "written": runner.written() or {}}))
    if queue is not None:  # what it sent reaches the parent before any thread is left behind
        queue.close()
        queue.join_thread()
    leave_stuck_threads(name, 0)
