"""What the messages in flight wait for: the operator, the remote table with its call and key,
and the application's own function that waits, for the errors of a callback timeout
(``task.callback.timeout.ms``) and of a stop that ran out of ``task.shutdown.ms``.

Nothing is recorded while messages run: when such an error is made, the await chain of each
message's coroutine is read (the coroutine a task completes it on, ``TaskInstance._finish``),
as a debugger would, and the remote-table calls the task tied to the message."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from operators.base import Operator
from operators.join_table import JoinTableOperator
from runtime.engine.handout import Handout
from runtime.state.remote import RemoteCall, RemoteTableClient

__all__ = ["blocked_in", "held_back_lines", "Wait", "wait_of", "message_coroutines", "coroutine_wait", "in_flight_lines",
           "cancel_messages"]

#: a Wait's key when none is known
NO_KEY: Any = object()
#: the call a frame of ``RemoteTableClient`` makes, by its function's name
_CALLS = {"read": "read", "fetch": "read", "_fetch_one": "read", "read_many": "get_all",
          "write": "write", "write_many": "put_all", "_send": "batch"}


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass
class Wait:
    """What a message waits for; any part may be unknown (None, or ``NO_KEY``)."""

    op_id: str | None = None
    table: str | None = None
    call: str | None = None
    key: Any = NO_KEY
    where: str | None = None

    def text(self) -> str:
        """``operator 'o' waits on remote table 't' (read of key 'k')``, or ``... waits in
        f() at app.py:12``: as much as is known."""
        who = f"operator {self.op_id!r}" if self.op_id is not None else "an operator"
        if self.table is not None:
            if self.key is NO_KEY:
                of = ""
            elif isinstance(self.key, list):
                of = f" of keys {_short(self.key)} ({len(self.key)} keys)"
            else:
                of = f" of key {_short(self.key)}"
            return f"{who} waits on remote table {self.table!r} ({self.call or 'call'}{of})"
        if self.where is not None:
            return f"{who} waits in {self.where}"
        return f"{who} has not completed it"

    def _take_call(self, call: RemoteCall) -> None:
        if self.table is None:
            self.table, self.call, self.key = call.table, call.what, call.key


def _library_dirs() -> tuple[str, ...]:
    import operators
    import runtime
    import samza_dsl

    return tuple(os.path.dirname(m.__file__ or "") + os.sep
                 for m in (asyncio, operators, runtime, samza_dsl))


def _frame_of(obj: Any) -> Any:
    # foreign: Python's coroutines, async generators and generators
    return (getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)  # foreign
            or getattr(obj, "gi_frame", None))  # foreign


def _next_of(obj: Any) -> Any:
    nxt = (getattr(obj, "cr_await", None) or getattr(obj, "ag_await", None)  # foreign
           or getattr(obj, "gi_yieldfrom", None))  # foreign: Python's generators
    if isinstance(nxt, asyncio.Task):
        return nxt.get_coro()
    return nxt


def _read_frame(frame: Any, wait: Wait, library: tuple[str, ...]) -> list[Any] | None:
    """What one frame of the chain tells; the awaitables it waits for all at once, if any."""
    code = frame.f_code
    names = frame.f_locals
    owner = names.get("self")
    if code.co_name == "continue_outputs" and "op_id" in names:
        wait.op_id = names["op_id"]
    if isinstance(owner, Operator):
        wait.op_id = owner.op_id
        if isinstance(owner, JoinTableOperator) and owner.remote is not None and "key" in names:
            wait.table, wait.call, wait.key = owner.table_id, "read", names["key"]
    elif isinstance(owner, RemoteTableClient):
        wait.table = owner.name
        wait.call = names.get("what") or _CALLS.get(code.co_name, wait.call)
        for local in ("keys", "key"):
            if local in names:
                wait.key = names[local]
                break
    if code.co_name == "settle_calls":
        for call in names.get("calls") or ():
            if isinstance(call, RemoteCall) and not call.task.done():
                wait._take_call(call)
                break
    if wait.where is None and not code.co_filename.startswith(library):
        wait.where = f"{code.co_qualname}() at {code.co_filename}:{frame.f_lineno}"
    if code.co_name == "gather_pending":
        return list(names.get("pending") or ())
    return None


def coroutine_wait(awaitables: Iterable[Any], wait: Wait | None = None) -> Wait:
    """What the first awaitable of ``awaitables`` that has not completed waits for, along its
    await chain: the innermost operator, the remote table, its call and key, and the outermost
    function of the application's own code (not of the runtime, the operators or asyncio)."""
    wait = wait if wait is not None else Wait()
    library = _library_dirs()
    todo = list(awaitables)
    seen = 0
    while todo and seen < 200:
        obj = todo.pop(0)
        seen += 1
        frame = _frame_of(obj)
        if frame is None:
            continue  # done, or not a coroutine: nothing to read
        branches = _read_frame(frame, wait, library)
        if branches is not None:
            todo = branches + todo
            continue
        nxt = _next_of(obj)
        if nxt is not None:
            todo.insert(0, nxt)
        else:
            break  # the chain ends in a future: its head is what it waits for
    return wait


def message_coroutines(task: Any) -> dict[int, tuple[asyncio.Task[Any], Handout, Any]]:
    """The asyncio tasks that complete ``task``'s messages in flight, by the id of the
    message's handout record: (asyncio task, record, the awaitables it waits for)."""
    out: dict[int, tuple[asyncio.Task[Any], Handout, Any]] = {}
    try:
        running = asyncio.all_tasks()
    except RuntimeError:  # no loop runs here
        return out
    for a in running:
        frame = getattr(a.get_coro(), "cr_frame", None)  # foreign: asyncio's task's coroutine
        if frame is None or frame.f_code.co_name != "_finish":
            continue
        names = frame.f_locals
        rec = names.get("rec")
        if names.get("self") is task and isinstance(rec, Handout):
            out[id(rec)] = (a, rec, names.get("pend"))
    return out


def wait_of(task: Any, rec: Handout,
            coroutines: dict[int, tuple[asyncio.Task[Any], Handout, Any]] | None = None
            ) -> Wait:
    """What the message of handout record ``rec`` of ``task`` (a ``TaskInstance``) waits for."""
    found = (coroutines if coroutines is not None else message_coroutines(task)).get(id(rec))
    wait = Wait()
    try:
        if found is not None and found[2]:
            coroutine_wait(found[2], wait)
        for call in task.calls.of(rec):
            if not call.task.done():
                wait._take_call(call)
                break
    except Exception:  # noqa: BLE001 - a description never fails the error it is for
        pass
    return wait


def _oldest(task: Any) -> tuple[int, Handout | None]:
    n = 0
    oldest = None
    for rec in list(task.pending):
        if not rec.done:
            n += 1
            if oldest is None:
                oldest = rec
    return n, oldest


def _run_wait(task: Any) -> str | None:
    """Where a task with nothing in flight waits (a commit, a window tick...): the innermost
    function of its run's await chain."""
    try:
        running = asyncio.all_tasks()
    except RuntimeError:
        return None
    for a in running:
        frame = getattr(a.get_coro(), "cr_frame", None)  # foreign: asyncio's task's coroutine
        if frame is None or frame.f_code.co_name != "run" or frame.f_locals.get("self") is not task:
            continue
        obj: Any = a.get_coro()
        last = None
        for _ in range(100):
            f = _frame_of(obj)
            if f is None:
                break
            last = f
            obj = _next_of(obj)
        if last is not None and last.f_code.co_name != "run":
            return f"{last.f_code.co_qualname}()"
    return None


def in_flight_lines(tasks: Sequence[Any], now: float | None = None) -> list[str]:
    """One line per task not done: how many messages it has in flight, the oldest (stream,
    partition, offset, for how long) and what it waits for; or where the task waits."""
    now = time.monotonic() if now is None else now
    lines = []
    for t in tasks:
        if t.done:
            continue
        n, rec = _oldest(t)
        if rec is None:
            where = _run_wait(t)
            lines.append(f"task {t.name!r}: no message in flight"
                         + (f"; it waits in {where}" if where else ""))
            continue
        ssp = rec.ssp
        lines.append(
            f"task {t.name!r}: {n} message{'s' if n != 1 else ''} in flight, the oldest at stream "
            f"{ssp.stream_id!r} partition {ssp.partition} offset {rec.offset} for "
            f"{now - rec.started:.1f} s: {wait_of(t, rec).text()}")
    return lines


def held_back_lines(tasks: Sequence[Any]) -> list[str]:
    """One line per task not done: the records it has not handed out yet, what holds them (a
    commit asked for, a window tick, a rebalance's hold) and where its run loop waits."""
    lines = []
    for t in tasks:
        if t.done:
            continue
        flags = [name for name, on in (("a commit asked for", t.commit_requested),
                                       ("a window tick", t.window_requested),
                                       ("a hold for a rebalance", t.held is not None),
                                       ("the stop", t.env.stopping)) if on]
        where = _run_wait(t)
        lines.append(f"task {t.name!r}: {t.inbox_size} record(s) not handed out yet"
                     + (f", behind {' and '.join(flags)}" if flags else "")
                     + (f"; it waits in {where}" if where else "")
                     + f" ({t.in_flight} in flight, {len(t.pending)} pending)")
    return lines


def cancel_messages(task: Any) -> None:
    """Cancel the coroutines that complete ``task``'s messages in flight."""
    for a, _, _ in message_coroutines(task).values():
        a.cancel()


def blocked_in(frame: Any) -> str:
    """Where a thread that does not come back to its event loop is held, read from its
    innermost ``frame`` outwards, as much as is known: the application's innermost function
    with its file and line, the operator, a sink's step, the task and the message it handles
    (``in nap() at app.py:12, operator 'o', task 'Partition 1' stream 'events' partition 1
    offset 4``); "" when no frame of the job's is on it."""
    import sysconfig

    from runtime.engine.batch import run_operator
    from runtime.engine.sinks import TaskSinks

    paths = sysconfig.get_paths()
    library = (*_library_dirs(), *(paths[k] + os.sep for k in ("stdlib", "platstdlib", "purelib",
                                                                "platlib") if k in paths))
    where = op = sink = task = message = None
    run: tuple[Any, int] | None = None  # a batch's loop: its iterator and end
    f = frame
    for _ in range(300):
        if f is None:
            break
        code, names = f.f_code, f.f_locals
        owner = names.get("self")
        if where is None and not code.co_filename.startswith(library) \
                and not code.co_filename.startswith("<"):
            where = f"{code.co_qualname}() at {code.co_filename}:{f.f_lineno}"
        if op is None:
            fn_op = names.get("fn_op")
            op = (owner.op_id if isinstance(owner, Operator) else
                  fn_op if isinstance(fn_op, str) else run_operator(owner))
        if run is None and isinstance(names.get("end"), int) \
                and type(names.get("it")).__name__ == "list_iterator":
            run = (names["it"], names["end"])
        if sink is None and isinstance(owner, TaskSinks) and "sid" in names:
            sink = (f"the {names.get('step', 'close')} of the sink of output {names['sid']!r} "
                    f"of task {owner.task_name!r}")
        if task is None and code.co_name == "_hand_out" and "first" in names:
            task, ssp = owner.name, names["ssp"]
            at = (run[1] - run[0].__length_hint__() - 1) if run is not None else names["i"] - 1
            message = (f"stream {ssp.stream_id!r} partition {ssp.partition} offset "
                       f"{names['first'] + at}")
        f = f.f_back
    del f
    parts = [p for p in (where, f"operator {op!r}" if op else None, sink,
                         f"task {task!r} {message}" if task else None) if p]
    return ", ".join(parts)
