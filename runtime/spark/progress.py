"""``StageProgress``: a progress bar per running Spark stage, and a record of every stage.

>>> with StageProgress(spark.sparkContext) as progress:           # doctest: +SKIP
...     result = SparkRunner(spark).reprocess(app, inputs)
[stage 3: samza-dsl page-view-counts-1: window views-per-window] ######......  6/16 tasks
>>> print(progress.table())                                      # doctest: +SKIP

A daemon thread polls ``sc.statusTracker()`` every ``interval`` seconds. On a terminal each active
stage has one line, redrawn in place (carriage return, and ANSI cursor movement when there are
several); on anything else (a file, a pipe, a notebook) each stage gets a plain line when its
progress changed, at most once a second while it runs, and one last line when it ends. With
``stream=None`` nothing is drawn and the stages are only recorded.

A stage is named by the name the runner gave it (a shuffle's map side: ``"samza-dsl <job>:
stage-0: page-views -> <intermediate stream>"``), else by the description of its job (the
runner's ``"samza-dsl <job>: write <stream> to <path>"``, read from Spark's status store), else by
Spark's call site (``"collect at app.py:12"``): the stages of one job get distinct names.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = ["StageProgress", "StageRecord", "STAGE_PREFIX"]

#: how the names the runner gives stages begin
STAGE_PREFIX = "samza-dsl "

BAR_WIDTH = 24
_ENDED = frozenset({"COMPLETE", "FAILED", "SKIPPED"})
PLAIN_LINE_EVERY_S = 1.0
_NAME_MAX = 60


@dataclass
class StageRecord:
    """One Spark stage seen while a ``StageProgress`` was open."""

    id: int
    name: str
    tasks: int
    completed_tasks: int = 0
    failed_tasks: int = 0
    running_tasks: int = 0
    seconds: float = 0.0
    status: str = "ACTIVE"
    callsite: str = ""
    # monotonic times this process saw the stage running; the fallback for `seconds`
    _first_seen: float = field(default=0.0, repr=False, compare=False)
    _last_seen: float = field(default=0.0, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "tasks": self.tasks,
                "completed_tasks": self.completed_tasks, "failed_tasks": self.failed_tasks,
                "seconds": round(self.seconds, 3), "status": self.status,
                "callsite": self.callsite}


def _shorten(text: str, n: int) -> str:
    return text if len(text) <= n else text[:max(n - 3, 1)] + "..."


def bar_line(stage_id: int, name: str, done: int, total: int, running: int = 0,
             failed: int = 0, width: int = BAR_WIDTH) -> str:
    """``[stage 3: NAME] ######......  6/16 tasks``, with running and failed counts if any.

    >>> bar_line(3, "samza-dsl job: read page-views", 12, 16, width=8)
    '[stage 3: samza-dsl job: read page-views] ######..  12/16 tasks'
    >>> bar_line(0, "count at x.py:3", 1, 4, running=2, failed=1, width=4)
    '[stage 0: count at x.py:3] #...  1/4 tasks (2 running, 1 failed)'
    """
    filled = width if total <= 0 else min(width, done * width // total)
    extra = [f"{running} running"] if running else []
    if failed:
        extra.append(f"{failed} failed")
    tail = f" ({', '.join(extra)})" if extra else ""
    return (f"[stage {stage_id}: {name}] {'#' * filled}{'.' * (width - filled)}  "
            f"{done}/{total} tasks{tail}")


class StageProgress:
    """Context manager: draws Spark's active stages on ``stream`` and records them in ``stages``.

    ``spark_context`` is a ``SparkContext`` (a ``SparkSession`` is accepted too). Stages of jobs
    that started before ``__enter__`` are not recorded; stages that ran between two polls are
    picked up when the context closes, so ``stages`` lists every stage that ran inside it."""

    def __init__(self, spark_context: Any, stream: TextIO | None = sys.stderr,
                 interval: float = 0.2) -> None:
        # a SparkContext, or a SparkSession (Spark's objects)
        sc = getattr(spark_context, "sparkContext", spark_context)  # foreign: Spark's
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.sc = sc
        self.stream = stream
        self.interval = interval
        self._tracker = sc.statusTracker()
        self._records: dict[int, StageRecord] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tty = bool(stream is not None and _isatty(stream))
        self._drawn_lines = 0           # lines of the TTY display now on screen
        self._drawn: list[str] = []
        self._printed: dict[int, tuple[float, str]] = {}  # plain mode: last line per stage
        self._ended: set[int] = set()   # stages whose final plain line is out
        self._first_stage = 0
        self._jobs: set[int] = set()
        self._jobs_before: set[int] = set()
        self.error: BaseException | None = None  # what stopped the poller, if anything did
        self.started = 0.0
        self.seconds = 0.0

    # -- the record ------------------------------------------------------------------------------

    @property
    def stages(self) -> list[StageRecord]:
        """Every stage seen, by id."""
        with self._lock:
            return [self._records[k] for k in sorted(self._records)]

    def table(self) -> str:
        """The stages as a text table: id, status, tasks, seconds, name."""
        rows = self.stages
        if not rows:
            return "no Spark stage ran"
        lines = [f"{'stage':>5}  {'status':<8}  {'tasks':>11}  {'seconds':>7}  name"]
        for r in rows:
            tasks = f"{r.completed_tasks}/{r.tasks}"
            if r.failed_tasks:
                tasks += f" !{r.failed_tasks}"
            lines.append(f"{r.id:>5}  {r.status:<8}  {tasks:>11}  {r.seconds:>7.2f}  {r.name}")
        lines.append(f"{len(rows)} stage(s), {sum(r.completed_tasks for r in rows)} task(s) in "
                     f"{self.seconds:.1f} s")
        return "\n".join(lines)

    # -- context manager ---------------------------------------------------------------------------

    def __enter__(self) -> StageProgress:
        self.started = time.monotonic()
        with contextlib.suppress(Exception):
            self._jobs_before = set(self._tracker.getJobIdsForGroup(None))
            self._jobs_before.update(self._tracker.getActiveJobsIds())
            self._first_stage = self._next_stage_id(self._jobs_before)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="samza-dsl-stage-progress",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop polling, record the stages that ran since the last poll, and clear the bars."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        try:
            self._poll()
            self._sweep()
        except Exception as exc:  # the JVM may be gone (sc.stop() inside the block)
            self.error = self.error or exc
        self.seconds = time.monotonic() - self.started
        if self._tty:
            self._draw_tty([])
        else:
            self._draw_plain(final=True)

    # -- polling ---------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._poll()
            except Exception as exc:  # never take the job down with us
                self.error = exc
                return
            if self._tty:
                self._draw_tty(self._active_lines())
            else:
                self._draw_plain()

    def _poll(self) -> None:
        now = time.monotonic()
        tracker = self._tracker
        active = set(tracker.getActiveStageIds())
        for jid in tracker.getActiveJobsIds():
            if jid not in self._jobs_before:
                self._jobs.add(jid)
        with self._lock:
            was_active = {s for s, r in self._records.items() if r.status not in _ENDED}
        for sid in sorted(active | was_active):
            if sid < self._first_stage:
                continue
            self._update(sid, now, running=sid in active)

    def _update(self, sid: int, now: float, running: bool) -> StageRecord | None:
        info = self._tracker.getStageInfo(sid)
        if info is None:
            return None
        details = _stage_details(self.sc, sid)
        with self._lock:
            rec = self._records.get(sid)
            if rec is None:
                rec = StageRecord(id=sid, name=info.name, tasks=info.numTasks,
                                  callsite=info.name, _first_seen=now, _last_seen=now)
                self._records[sid] = rec
            rec.tasks = info.numTasks
            rec.completed_tasks = info.numCompletedTasks
            rec.failed_tasks = info.numFailedTasks
            if running:
                rec._last_seen = now
            if info.name.startswith(STAGE_PREFIX):
                rec.name = info.name  # a stage the runner named (a shuffle's map side)
            elif details.get("description"):
                rec.name = str(details["description"])
            status = details.get("status")
            if running and status not in _ENDED:
                rec.status = "ACTIVE"  # the tracker's word, over a store a moment behind
            elif status:
                rec.status = str(status)
            elif not running:
                rec.status = "COMPLETE" if rec.completed_tasks >= rec.tasks else "FAILED"
            rec.running_tasks = info.numActiveTasks if rec.status == "ACTIVE" else 0
            if details.get("seconds") is not None:
                rec.seconds = float(details["seconds"])
            else:
                rec.seconds = rec._last_seen - rec._first_seen
        return rec

    def _sweep(self) -> None:
        """Stages that started and ended between two polls: those of the jobs seen, of the jobs
        without a group that are new since ``__enter__``, and the ids after the last one seen."""
        tracker = self._tracker
        candidates: set[int] = set()
        with contextlib.suppress(Exception):
            self._jobs.update(j for j in tracker.getJobIdsForGroup(None)
                              if j not in self._jobs_before)
        for jid in self._jobs:
            job = tracker.getJobInfo(jid)
            if job is not None:
                candidates.update(int(s) for s in job.stageIds)
        # stage ids are handed out in order: probe past the highest one known
        nxt = max([self._first_stage - 1, *candidates, *self._records]) + 1
        while tracker.getStageInfo(nxt) is not None:
            candidates.add(nxt)
            nxt += 1
        now = time.monotonic()
        for sid in sorted(candidates):
            if sid < self._first_stage:
                continue
            with self._lock:
                seen = sid in self._records
            if seen:
                self._update(sid, now, running=False)
                continue
            info = tracker.getStageInfo(sid)
            if info is None or info.numCompletedTasks + info.numFailedTasks == 0:
                continue  # skipped (its shuffle output was reused) or never ran
            rec = self._update(sid, now, running=False)
            if rec is not None and rec.status in ("SKIPPED", "PENDING"):
                with self._lock:
                    del self._records[sid]

    def _next_stage_id(self, jobs: set[int]) -> int:
        ids: list[int] = []
        for jid in jobs:
            job = self._tracker.getJobInfo(jid)
            if job is not None:
                ids.extend(int(s) for s in job.stageIds)
        nxt = max(ids, default=-1) + 1
        while self._tracker.getStageInfo(nxt) is not None:  # jobs in a group, or concurrent
            nxt += 1
        return nxt

    # -- drawing ---------------------------------------------------------------------------------

    def _line(self, rec: StageRecord, columns: int | None = None) -> str:
        """The stage's bar; within ``columns`` characters the name gives way first, then the
        bar, so the task count stays."""
        name = _shorten(rec.name, _NAME_MAX)
        width = BAR_WIDTH

        def draw() -> str:
            return bar_line(rec.id, name, rec.completed_tasks, rec.tasks,
                            running=rec.running_tasks, failed=rec.failed_tasks, width=width)

        line = draw()
        if columns is not None and len(line) > columns:
            name = _shorten(name, max(len(name) - (len(line) - columns), 12))
            line = draw()
            if len(line) > columns:
                width = max(width - (len(line) - columns), 4)
                line = draw()[:columns]  # a line that wraps cannot be redrawn in place
        return line

    def _active_lines(self) -> list[str]:
        columns = shutil.get_terminal_size((100, 24)).columns - 1
        return [self._line(r, columns) for r in self.stages if r.status not in _ENDED]

    def _draw_tty(self, lines: list[str]) -> None:
        stream = self.stream
        if stream is None or lines == self._drawn:
            return
        # back to the start of the first line drawn last time, erasing as we go
        out = "\r\x1b[K" + "\x1b[F\x1b[K" * max(self._drawn_lines - 1, 0)
        out += "\n".join(lines)
        self._drawn_lines = len(lines)
        self._drawn = lines
        with contextlib.suppress(Exception):
            stream.write(out)
            stream.flush()

    def _draw_plain(self, final: bool = False) -> None:
        stream = self.stream
        if stream is None:
            return
        now = time.monotonic()
        out: list[str] = []
        for rec in self.stages:
            if rec.id in self._ended:
                continue
            ended = rec.status in _ENDED
            if ended:
                text = self._line(rec) + f" {rec.status.lower()} in {rec.seconds:.1f} s"
            else:
                text = self._line(rec)
            last = self._printed.get(rec.id)
            if last is not None and last[1] == text:
                continue
            # a running stage: at most a line a second; its last line goes out when it ends
            if not ended and last is not None and now - last[0] < PLAIN_LINE_EVERY_S:
                continue
            if ended and not final and last is not None and now - last[0] < PLAIN_LINE_EVERY_S:
                continue
            self._printed[rec.id] = (now, text)
            if ended:
                self._ended.add(rec.id)
            out.append(text + "\n")
        if out:
            with contextlib.suppress(Exception):
                stream.write("".join(out))
                stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def _stage_details(sc: Any, stage_id: int) -> dict[str, Any]:
    """Status, job description and run time of a stage from Spark's status store (the data behind
    the web UI, kept with the UI off). A JVM-side API: anything missing gives an empty dict."""
    try:
        data = sc._jsc.sc().statusStore().lastStageAttempt(stage_id)
    except Exception:
        return {}
    out: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        out["status"] = str(data.status().toString())
    with contextlib.suppress(Exception):
        desc = data.description()
        if desc.isDefined():
            out["description"] = str(desc.get())
    with contextlib.suppress(Exception):
        sub = data.submissionTime()
        if sub.isDefined():
            end = data.completionTime()
            end_ms = end.get().getTime() if end.isDefined() else time.time() * 1000.0
            out["seconds"] = max(0.0, (end_ms - sub.get().getTime()) / 1000.0)
    return out
