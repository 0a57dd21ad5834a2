"""The progress display of ``samza-dsl run``: one row per container.

A row gives the user messages processed so far (control records are not counted), the rate over
the last ``RATE_WINDOW_S`` seconds (not an average over the whole run, which decays towards 0
under ``--follow``), the messages in flight, the late messages of the job's event-time windows,
and the checkpoint, or, while the container waits, what it waits for: new input (``--follow``),
the rest of an input, or the end of an intermediate stream that tasks in other containers write.

On a terminal it is a ``rich`` table redrawn in place, as wide as the terminal and no wider: what
a container waits for wraps in its status column when it is longer, a checkpoint is cut. On
anything else (CI logs, pipes, files) a container's row is a plain line with no escape codes,
written when its state changes (it starts, goes idle, waits for something else, is done) and,
while it works, every ``PIPE_EVERY_S`` seconds at most: a run under ``--follow`` that waits for
new input says so once, not once a second.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["ProgressDisplay", "status_row", "RATE_WINDOW_S", "PIPE_EVERY_S", "stall_after",
           "stall_lags", "stall_text", "checkpoint_positions"]

RATE_WINDOW_S = 5.0
#: off a terminal, seconds between two lines of a container whose state has not changed
PIPE_EVERY_S = 10.0
_CHECKPOINTS_SHOWN = 6
#: a container silent this long (at least; 5 reporting intervals) while its inputs lag is stalled
STALL_MIN_S = 5.0


def stall_after(interval_s: float) -> float:
    """How long a container may send nothing before it counts as stalled (if its inputs lag)."""
    return max(STALL_MIN_S, 5 * interval_s)


def checkpoint_positions(container: Any) -> list[list[Any]]:
    """``[stream, partition, offset after the checkpoint]`` per partition the container's tasks
    read (where reading began, for one with no checkpoint): what its lag counts from."""
    began = {ssp: start for ssp, start, _ in container.consumer.progress()}
    out: dict[Any, int] = {}
    for t in container.tasks:
        committed = container.committer.committed.get(t.name, {})
        for ssp in t.ssps:
            after = committed[ssp] + 1 if ssp in committed else began.get(ssp)
            if after is not None:
                out[ssp] = min(out.get(ssp, after), after)
    return [[ssp.stream_id, ssp.partition, n] for ssp, n in sorted(out.items())]


def stall_lags(positions: Any, end_of: Any) -> dict[str, int]:
    """``{"stream:partition": lag}`` of the partitions that lag (end offset ``end_of(stream,
    partition)``, None where unknown, less the offset after the checkpoint)."""
    out: dict[str, int] = {}
    for sid, p, after in positions or []:
        end = end_of(sid, int(p))
        if end is not None and end > after:
            out[f"{sid}:{p}"] = end - after
    return out


def stall_text(name: str, pid: int | None, silent_s: float, lags: Mapping[str, int]) -> str:
    """One line: which container stalled, its pid, its partitions and their lag."""
    parts = ", ".join(f"{sp} lag {n:,}" for sp, n in sorted(lags.items()))
    where, resume = (f"{name} (pid {pid})", f"`kill -CONT {pid}` resumes a stopped one, "
                     ) if pid is not None else (name, "")
    return (f"{where} is stalled: no report for {silent_s:.0f} s while its partitions lag "
            f"({parts}; lag = end offset - checkpoint); it may be stopped (SIGSTOP) or stuck: "
            f"{resume}Ctrl-C stops the run")


def _positions(checkpoints: Mapping[str, Mapping[str, int]]) -> str:
    at = [f"{ssp}@{off}" for cps in checkpoints.values() for ssp, off in cps.items()]
    if len(at) > _CHECKPOINTS_SHOWN:
        return ", ".join(at[:_CHECKPOINTS_SHOWN]) + f" +{len(at) - _CHECKPOINTS_SHOWN} more"
    return ", ".join(at) or "-"


def _waits_for(container: Any, plan: Any, follow: bool, containers: int) -> str:
    """What the container's unfinished tasks wait for, from the partitions they have not seen
    end, the main reason first. Under ``--follow`` that is new input: the intermediate streams
    the tasks also read end only when their inputs do, so they are named only when no input is
    open (then data from the tasks that write them is what is awaited)."""
    inputs: list[str] = []
    between: dict[str, int] = {}
    for t in container.tasks:
        if t.done or t.inbox or t.in_flight:
            continue
        for ssp in t.ssps:
            if ssp in t.ended:
                continue
            kind = plan.streams[ssp.stream_id].kind if ssp.stream_id in plan.streams \
                else "input"
            if kind in ("intermediate", "broadcast"):
                between[ssp.stream_id] = between.get(ssp.stream_id, 0) + 1
            elif ssp.stream_id not in inputs:
                inputs.append(ssp.stream_id)
    inputs.sort()
    if follow and inputs:
        return f"new input on {', '.join(inputs)}"
    parts = [f"the rest of {', '.join(inputs)}"] if inputs else []
    for sid, n in sorted(between.items()):
        if follow:
            what = f"data on {sid}"
        else:
            what = f"the end of {sid} ({n} partition(s))"
        where = (f" from other containers of {containers}: are they all running?"
                 if containers > 1 else "")
        parts.append(what + where)
    return "; ".join(parts)


def status_row(container: Any, plan: Any, *, late: int | None, follow: bool,
               containers: int = 1) -> dict[str, Any]:
    """What one container shows: plain data, so a container process can send it to its parent."""
    s = container.status()
    return {"messages": int(s["messages"]), "in_flight": int(s["in_flight"]), "late": late,
            "checkpoint": _positions(s["checkpoints"]), "done": bool(s["done"]),
            "waiting": _waits_for(container, plan, follow, containers),
            "at": time.monotonic(), "started": container.started,
            "positions": checkpoint_positions(container)}


class ProgressDisplay:
    """Draws rows ``{name: status_row(...) or {"state": text}}`` to ``stream``."""

    def __init__(self, stream: TextIO, *, tty: bool | None = None) -> None:
        self.stream = stream
        if tty is None:
            isatty = getattr(stream, "isatty", None)  # foreign: the caller's text stream
            tty = bool(isatty and isatty())
        self.tty = tty
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._live: Any = None
        #: off a terminal: per container, the state of its last line and when it was written
        self._written: dict[str, tuple[Any, float]] = {}

    def rate(self, name: str, row: Mapping[str, Any]) -> float:
        """Messages per second over the last ``RATE_WINDOW_S`` seconds of ``name``'s rows."""
        if "messages" not in row:
            return 0.0
        now = float(row.get("at", time.monotonic()))
        samples = self._samples.get(name)
        if samples is None:  # the rate up to the first row counts from the container's start
            samples = self._samples[name] = deque([(float(row.get("started", now)), 0)])
        if not samples or samples[-1][0] < now:
            samples.append((now, int(row["messages"])))
        while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW_S:
            samples.popleft()
        t0, n0 = samples[0]
        return (samples[-1][1] - n0) / (now - t0) if now > t0 else 0.0

    def _cells(self, name: str, row: Mapping[str, Any]) -> tuple[str, str, str, str, str, str]:
        if "messages" not in row:
            return name, "", "", "", "", str(row.get("state", ""))
        samples = self._samples.get(name)
        # nothing since the last row
        still = samples is not None and len(samples) > 0 and samples[-1][1] == row["messages"]
        rate = self.rate(name, row)
        late = "" if row.get("late") is None else f"{row['late']:,}"
        if row.get("done"):
            status = f"done; checkpoint {row['checkpoint']}"
        elif row.get("waiting") and still and not row["in_flight"]:
            status = f"waiting for {row['waiting']}"
        else:
            status = f"checkpoint {row['checkpoint']}"
        return (name, f"{row['messages']:,}", f"{rate:,.0f}", f"{row['in_flight']:,}", late,
                status)

    def update(self, rows: Mapping[str, Mapping[str, Any]], final: bool = False) -> None:
        if self.tty:
            self._draw(rows, final)
            return
        many = len(rows) > 1 or any(name for name in rows)
        for name, row in rows.items():
            cells = self._cells(name, row)
            if not self._due(name, row, cells, final):
                continue
            prefix = f"{name}: " if many and name else ""
            if "messages" not in row:
                self.stream.write(f"{prefix}{cells[5]}\n")
                continue
            late = f"late {cells[4]:>6}  " if cells[4] else ""
            self.stream.write(f"{prefix}processed {cells[1]:>9}  {cells[2]:>9} msg/s "
                              f"(last {RATE_WINDOW_S:.0f} s)  in flight {cells[3]:>4}  "
                              f"{late}{cells[5]}\n")
        self.stream.flush()

    def _due(self, name: str, row: Mapping[str, Any], cells: tuple[str, ...],
             final: bool) -> bool:
        """Off a terminal: whether ``name``'s row is written now. Its state is what it does (its
        status, but for a checkpoint that moves) and whether it is idle (no messages in the last
        seconds); a row whose state has not changed is written once every ``PIPE_EVERY_S``
        while the container works, never while it waits; the final rows always."""
        status = cells[5]
        if "messages" not in row:
            state: Any = status
        elif row.get("done"):
            state = "done"
        else:
            working = not status.startswith("waiting for")
            state = ("working" if working else status, cells[2] == "0" and not row["in_flight"])
        now = float(row.get("at", time.monotonic()))
        last = self._written.get(name)
        if final or last is None or last[0] != state \
                or (type(state) is tuple and state[0] == "working"
                    and now - last[1] >= PIPE_EVERY_S):
            self._written[name] = (state, now)
            return True
        return False

    def _draw(self, rows: Mapping[str, Mapping[str, Any]], final: bool) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.table import Table
        from rich.text import Text

        if self._live is None:
            self._live = Live(console=Console(file=self.stream), auto_refresh=False,
                              transient=False)
            self._live.start()
        width = self._live.console.width
        headers = ["container", "processed", f"msg/s ({RATE_WINDOW_S:.0f} s)", "in flight",
                   "late", "status"]
        body = [list(self._cells(name, row)) for name, row in rows.items()]
        keep = [i for i in range(6)
                if i == 5 or (i == 0 and any(name for name in rows))
                or (i == 4 and any(r.get("late") is not None for r in rows.values()))
                or i in (1, 2, 3)]
        # every column but the status as wide as its content; the status gets the rest. What a
        # container waits for wraps when it is longer, so it is read in full; a checkpoint (a
        # list of positions, redrawn all the time) ends in an ellipsis instead
        used = sum(max(len(headers[i]), *(len(r[i]) for r in body)) + 2 for i in keep if i != 5)
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for i in keep:
            if i == 5:
                table.add_column(headers[i], overflow="fold", max_width=max(8, width - used))
            else:
                table.add_column(headers[i], no_wrap=True,
                                 justify="left" if i == 0 else "right")
        for r in body:
            status: str | Text = r[5]
            if not r[5].startswith("waiting for"):
                status = Text(r[5], no_wrap=True, overflow="ellipsis")
            table.add_row(*(r[i] for i in keep if i != 5), status)
        self._live.update(table, refresh=True)
        if final:
            self.close()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
