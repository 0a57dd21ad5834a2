"""What a container tells of itself: its metrics samples (its tasks' positions and lag, its
commits, its stores' and producer's counts, and how busy its event loop is: ``LoopMeter``),
its status, and what a run that makes no progress waits for. ``Container``
(``runtime.engine.container``) is a ``ContainerStatus``; the metrics reporters, the job page,
``samza-dsl status`` and the stall watch read it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from runtime.engine.commit import Committer
from runtime.engine.elastic import tasks_of
from runtime.engine.job import SSP
from runtime.engine.systems import Consumer, Producer, StateBackend, TaskLifecycle
from runtime.engine.task import TaskInstance
from runtime.host.metrics import Sample
from runtime.host.watchdog import DaemonPool

__all__ = ["ContainerStatus", "LoopMeter"]


def _ssp_labels(ssp: SSP) -> dict[str, str]:
    return {"stream": ssp.stream_id, "partition": str(ssp.partition)}


class LoopMeter:
    """How busy the container's event loop is: the share of time it did not spend waiting in
    its selector for something to do (Samza's event-loop-utilization)."""

    def __init__(self) -> None:
        self.idle_ns = 0
        self._mark = (time.perf_counter_ns(), 0)
        self._value = 0.0
        self._selector: Any = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        # a selector loop's selector; other loops are not metered
        selector = getattr(loop, "_selector", None)  # foreign: asyncio's loop
        if selector is None or not hasattr(selector, "select"):  # foreign: asyncio's selector
            return
        select = selector.select
        clock = time.perf_counter_ns

        def timed_select(timeout: float | None = None) -> Any:
            t = clock()
            try:
                return select(timeout)
            finally:
                self.idle_ns += clock() - t
        selector.select = timed_select
        self._selector = selector
        self._mark = (clock(), self.idle_ns)

    def uninstall(self) -> None:
        if self._selector is not None:
            del self._selector.select  # the class's own again
            self._selector = None

    def utilization(self) -> float:
        """Busy time over wall time since the last reading at least half a second ago."""
        now, idle = time.perf_counter_ns(), self.idle_ns
        then, idle_then = self._mark
        if now - then >= 500_000_000:
            self._value = max(0.0, min(1.0, 1.0 - (idle - idle_then) / (now - then)))
            self._mark = (now, idle)
        return round(self._value, 4)

class ContainerStatus:
    """The metrics samples, status and waits of a container (``Container`` is one), read from
    what it runs."""

    tasks: list[TaskInstance]
    committer: Committer
    consumer: Consumer
    producer: Producer
    state: StateBackend
    executor: DaemonPool | None
    lifecycle: TaskLifecycle | None
    loop_meter: LoopMeter
    started: float
    #: (reader, ssp) per input partition read
    _keys: list[tuple[Any, SSP]]

    @property
    def commits(self) -> int:
        return self.committer.commits
    def progress_mark(self) -> tuple[Any, ...]:
        """Changes whenever the run moves: a task's record handed out, message completed,
        input ended or record read into its inbox (a commit of nothing new is no progress)."""
        return tuple((t.records, t.in_flight, len(t.ended), t.inbox_size) for t in self.tasks)

    def waiting_for(self) -> str:
        """What the tasks not done wait for: each input partition that has not ended (where
        its reader stands, what holds it back), and the messages in flight."""
        from runtime.engine.in_flight import blocked_in, held_back_lines, in_flight_lines

        parts = []
        listed = []
        for reader, ssp in self._keys:
            for task in tasks_of(reader):
                if task.done or ssp in task.ended:
                    continue
                upstream = task.end_waited(ssp)
                parts.append(f"task {task.name!r} stream {ssp.stream_id!r} partition "
                             f"{ssp.partition} ({self.consumer.waiting_for((reader, ssp))}"
                             + (f"; {upstream}" if upstream else "") + ")")
                listed.append(task)
                break
        busy = [t for t in self.tasks if not t.done and t.in_flight]
        parts.extend(in_flight_lines(busy))
        if self.executor is not None:  # where the calls on job.container.thread.pool.size are
            parts.extend(f"thread {name!r} of job.container.thread.pool.size is in "
                         f"{blocked_in(frame) or 'a call'}" for name, frame in self.executor.calling())
        # a task whose inputs all ended is not done while it commits or closes: where it waits
        parts.extend(held_back_lines([t for t in self.tasks if not t.done and not t.in_flight]))
        return "; ".join(parts) or "nothing the tasks name"

    # -- status -----------------------------------------------------------------------------------

    def samples(self) -> list[Sample]:
        """The container's, its tasks', stores' and producer's metrics now (``runtime.host.metrics``
        names them): read where the runtime keeps them, at no cost while nothing asks."""
        tasks = list(self.tasks)
        committer = self.committer
        last = committer.last_commit
        out: list[Sample] = [
            ("container", "process-envelopes", {}, sum(t.processed for t in tasks)),
            ("container", "commit-calls", {}, committer.commits),
            ("container", "commit-ns", {}, committer.commit_ns),
            ("container", "last-commit-ms", {}, None if last is None else int(last * 1000)),
            ("container", "window-calls", {}, sum(t.outputs.window_calls for t in tasks)),
            ("container", "event-loop-utilization", {}, self.loop_meter.utilization()),
        ]
        out += self._position_samples(tasks)
        for t in tasks:  # remote tables: calls, retries and the cache, per task and table
            for client in t.remote_clients:
                labels = {"task": t.name, "store": client.name}
                for name, n in client.counts.items():
                    out.append(("store", f"remote-{name}", labels, n))
        out.extend(self.state.samples())
        counts = self.producer.counts()
        if counts is not None:
            out += [("producer", "sends", {}, counts.sends),
                    ("producer", "bytes", {}, counts.sent_bytes),
                    ("producer", "flush-ns", {}, counts.flush_ns)]
        return out

    def _position_samples(self, tasks: list[TaskInstance]) -> list[Sample]:
        """Per task and input partition where its checkpoint is and where processing is, with
        the one definition of lag ``samza-dsl status`` uses: end less the offset after the
        checkpoint (what a restart would read again), and ``behind``: end less the next offset
        to process (what this run has still to do)."""
        committer = self.committer
        out: list[Sample] = []
        owner: dict[SSP, str] = {}
        done: dict[SSP, int] = {}  # the next offset to complete (virtual tasks: the least)
        saved: dict[SSP, int] = {}  # the offset after the checkpoint (virtual tasks: the least)
        written: dict[SSP, float] = {}
        for t in tasks:
            labels = {"task": t.name}
            out.append(("task", "messages-actually-processed", labels, t.processed))
            out.append(("task", "messages-in-flight", labels, t.in_flight))
            for ssp, offset in list(t.checkpoint.items()):
                done[ssp] = min(done.get(ssp, offset + 1), offset + 1)
            at = committer.written.get(t.name)
            for ssp, offset in list(committer.committed.get(t.name, {}).items()):
                if ssp not in t.ssps:
                    continue
                out.append(("task", "checkpointed-offset", {"task": t.name, **_ssp_labels(ssp)},
                            offset))
                saved[ssp] = min(saved.get(ssp, offset + 1), offset + 1)
                if at is not None:
                    written[ssp] = min(written.get(ssp, at), at)
            for ssp in t.ssps:
                owner.setdefault(ssp, t.name)
        for ssp, began, end in self.consumer.progress():
            # the next offset to process: after the last one completed, or where reading began
            nxt = done.get(ssp, began)
            labels = {"task": owner.get(ssp, ""), **_ssp_labels(ssp)}
            if nxt is not None:
                out.append(("task", "next-offset", labels, nxt))
            if end is not None:
                out.append(("task", "end-offset", labels, end))
            if ssp in written:
                out.append(("task", "checkpoint-written-ms", labels, int(written[ssp] * 1000)))
            if end is None:
                continue
            if nxt is not None:
                out.append(("task", "behind", labels, max(0, end - nxt)))
            after = saved.get(ssp, began)
            if after is not None:
                out.append(("task", "lag", labels, max(0, end - after)))
        return out

    def status(self) -> dict[str, Any]:
        processed = sum(t.processed for t in self.tasks)
        elapsed = max(time.monotonic() - self.started, 1e-9)
        read: dict[str, int] = {}
        for t in self.tasks:
            for sid, n in list(t.read.items()):
                read[sid] = read.get(sid, 0) + n
        out: dict[str, Any] = {
            "processed": processed,
            # user messages (no control records), in all and per stream
            "messages": sum(read.values()),
            "read": read,
            "msgs_per_s": processed / elapsed,
            "in_flight": sum(t.in_flight for t in self.tasks),
            "checkpoints": {t.name: {str(s): o for s, o in sorted(t.checkpoint.items())}
                            for t in self.tasks},
            "commits": self.commits,
            "done": all(t.done for t in self.tasks) if self.tasks else False,
        }
        if self.lifecycle is not None:
            out.update(self.lifecycle.status())
        return out
