"""The parent's side of a run of several container processes (``LocalRunner`` with
``job.container.count`` > 1): each container's progress row and the totals it sends as it ends,
the stalls of a container that went silent while its partitions lag, and whether an exit was a
failure. The container's side sends them through ``RowsTo``."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from samza_dsl.jobconfig import JobConfig

__all__ = ["ROW", "TOTALS", "OVERDUE_EXITS", "Totals", "LogEnds", "ContainerRows", "RowsTo", "failed"]

ROW, TOTALS = "\0row", "\0totals"
#: the exit codes of a container process that stopped itself when task.shutdown.ms ran out
OVERDUE_EXITS = frozenset(128 + sig for sig in (signal.SIGINT, signal.SIGTERM))


class Totals:
    """What the containers of a run of several report as they end: user messages read per
    stream, the checkpoint each task resumed from, and their counters (late messages, records
    skipped by request), added up."""

    def __init__(self) -> None:
        self.read: dict[str, int] = {}
        self.restored: dict[str, dict[Any, int]] = {}
        self.counters: dict[str, int] = {}
        self.written: dict[str, int] = {}
        self.reported = 0

    def add(self, totals: Mapping[str, Any]) -> None:
        self.reported += 1
        for sid, n in totals["read"].items():
            self.read[sid] = self.read.get(sid, 0) + n
        for sid, n in totals.get("written", {}).items():
            self.written[sid] = self.written.get(sid, 0) + n
        self.restored.update(totals["restored"])
        for name, n in totals["counters"].items():
            self.counters[name] = self.counters.get(name, 0) + n


class LogEnds:
    """End offsets of the job's partitions in its log, opened read-only when first asked (only
    while a container seems stalled), where the system lets this machine read it
    (``JobSystem.metrics_in_log``)."""

    def __init__(self, app: Any, config: Mapping[str, Any], jobs: Any) -> None:
        self.app = app
        self.config = config
        self.jobs = jobs
        self._job: Any = None

    def end_of(self, stream_id: str, partition: int) -> int | None:
        if self._job is None:
            self._job = self.jobs.open_job(self.app, self.config, app_ref=self.app.name)
        job = self._job
        if stream_id not in job.physical:
            return None
        log = job.log_of(job.stream_system[stream_id])
        return int(log.end_offset(job.physical[stream_id], partition))

    def close(self) -> None:
        if self._job is not None:
            self._job.close()
            self._job = None


class ContainerRows:
    """The parent's side of a run of several container processes: their progress rows, one each,
    drawn when there is a display, and the totals each sends as it ends."""

    def __init__(self, stream: Any, n: int, config: JobConfig,
                 end_of: Callable[[str, int], int | None] | None = None) -> None:
        from runtime.progress import ProgressDisplay, stall_after

        self.display = ProgressDisplay(stream) if stream is not None else None
        self.rows: dict[str, dict[str, Any]] = {f"container {i} of {n}": {"state": "starting"}
                                                for i in range(n)}
        self.interval = max(config.task.progress_ms, 50) / 1000.0
        self.next = time.monotonic() + self.interval
        self.totals = Totals()
        #: a partition's end offset now (None: unknown), for the lag of a silent container
        self.end_of = end_of
        self.stall_s = stall_after(self.interval)
        #: when each container's last row came; the containers warned about as stalled
        self.heard: dict[str, float] = {}
        self.stalled: set[str] = set()

    def take(self, queue: Any, procs: Sequence[Any], stopped: bool,
             final: bool = False) -> None:
        import queue as queue_mod

        while True:
            try:
                kind, name, data = queue.get(timeout=0.5) if final and \
                    self.totals.reported < sum(p.exitcode == 0 for p in procs) \
                    else queue.get_nowait()
            except (queue_mod.Empty, OSError, EOFError, ValueError):
                break
            if kind == TOTALS:
                self.totals.add(data)
            else:
                self.rows[name] = data
                self.heard[name] = time.monotonic()
                self.stalled.discard(name)
        shown = self._stalls(procs)
        if self.display is None:
            return
        n = len(procs)
        for i, p in enumerate(procs):
            name = f"container {i} of {n}"
            if failed(p.exitcode, stopped):
                self.rows[name] = {"state": f"failed (exit code {p.exitcode})"}
            elif p.exitcode is not None and p.exitcode < 0:
                self.rows[name] = {"state": f"stopped by signal {-p.exitcode}"}
        if final or time.monotonic() >= self.next:
            self.next = time.monotonic() + self.interval
            self.display.update({**self.rows, **shown}, final=final)
        if final:
            self.display.close()

    def _stalls(self, procs: Sequence[Any]) -> dict[str, dict[str, Any]]:
        """The rows of the containers that are alive but have sent nothing for ``stall_s``
        while their partitions lag: shown as stalled, with a warning once a stall."""
        from runtime.progress import stall_lags, stall_text

        out: dict[str, dict[str, Any]] = {}
        now = time.monotonic()
        n = len(procs)
        for i, p in enumerate(procs):
            name = f"container {i} of {n}"
            heard = self.heard.get(name)
            row = self.rows.get(name, {})
            if self.end_of is None or heard is None or not p.is_alive() or row.get("done") \
                    or now - heard < self.stall_s:
                continue
            lags = stall_lags(row.get("positions"), self.end_of)
            if not lags:
                continue
            text = stall_text(f"container {i}", p.pid, now - heard, lags)
            out[name] = {"state": text}
            if name not in self.stalled:
                self.stalled.add(name)
                print(f"warning: {text}", file=sys.stderr, flush=True)
        return out



def failed(exitcode: int | None, stopped: bool) -> bool:
    """Whether a container process that ended with ``exitcode`` failed. After the parent passed
    a stop on (``stopped``), one that the stop's signal ended has not: what it did since its
    last commit is done again by the next run, as after any crash (at-least-once)."""
    if exitcode in (None, 0):
        return False
    return not (stopped and (exitcode in (-signal.SIGTERM, -signal.SIGINT)
                             or exitcode in OVERDUE_EXITS))


class RowsTo:
    """A container's progress rows, into the parent's queue."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def put(self, item: tuple[str, dict[str, Any]]) -> None:
        self.queue.put((ROW, *item))
