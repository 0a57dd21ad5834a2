"""The errors a task stops with, each naming the task, the stream, the partition and the offset
of the message, and what to do (docs/semantics.md: the checkpoint stays before the message, so a
restart reprocesses it)."""

from __future__ import annotations

import copy
from typing import Any

from operators.base import held_source
from runtime.engine.dag import OperatorFailure
from runtime.engine.handout import Handout
from runtime.engine.in_flight import NO_KEY, wait_of
from runtime.engine.job import SSP
from runtime.engine.origins import origin_text
from runtime.state.remote import RemoteCallFailure
from samza_dsl.connectors import SinkError
from samza_dsl.errors import (
    AccessRefused,
    CallbackTimeout,
    JoinPartitionError,
    SamzaError,
    SerdeError,
    TaskError,
)

__all__ = ["operator_error", "event_time_error", "call_error", "timeout_error", "SKIP_AFTER"]

#: a failing message is suggested for ``--skip`` only after this many went through the task
#: (in this run, or before its checkpoint): then at most 1 in 10 failed. One that fails sooner
#: points at the function
SKIP_AFTER = 9


def call_error(task: Any, f: RemoteCallFailure, ssp: SSP, offset: int) -> TaskError:
    """A remote-table call a function made for a message and did not await failed."""
    err = TaskError(
        f"task {task.name!r}: a call to remote table {f.table!r} made for the message at "
        f"stream {ssp.stream_id!r} partition {ssp.partition} offset {offset} failed and was "
        f"not awaited: {type(f.cause).__name__}: {f.cause}. The checkpoint stays before "
        f"this offset, so a restart reprocesses it", task=task.name, stream=ssp.stream_id,
        partition=ssp.partition, offset=offset)
    err.__cause__ = f.cause
    return err


def operator_error(task: Any, f: OperatorFailure, ssp: SSP, offset: int,
                done: int | None = None) -> SamzaError:
    """The error for operator ``f.op_id`` failing on the message at ``ssp`` ``offset``,
    after ``done`` messages of this run went through the task (default: those counted):
    where in the application's code, and ``--skip`` only for a record that fails alone
    (``SKIP_AFTER`` went through the task before it, in this run or before its checkpoint).
    A system's refusal (``AccessRefused``) and an error a sink raised as its own
    (``SinkError`` with no cause: not a sink's exception the runtime named) are not the
    function's nor the message's: they stand as they are (they name the system or the output
    and what to do)."""
    cause = f.cause
    if isinstance(cause, AccessRefused) or (isinstance(cause, SinkError)
                                            and cause.__cause__ is None):
        own = copy.copy(cause)  # raised from the cause: not its own cause
        own.__cause__ = own.__context__ = own.__traceback__ = None
        return own
    placed = isinstance(cause, JoinPartitionError)  # it says what to do itself
    where = f.where
    at = f" in {where}" if where and not placed else ""
    done = task.processed if done is None else done
    went = max(done, sum(o + 1 for o in task.checkpoint.values()))
    alone = went >= SKIP_AFTER or isinstance(cause, SerdeError)
    if isinstance(cause, SerdeError) or placed:
        advice = ""
    elif not alone:
        first = ("on the first message" if went == 0 else
                 f"after only {went} message(s) went through")
        advice = (f" It failed {first}, so it may fail on many: fix the function or guard "
                  f"against such messages.")
    else:
        advice = " Fix the function or guard against this message."
    held = held_source(cause)
    if held is not None:  # a message the operator held, taken in as this one came
        return _held_error(task, f, ssp, offset, held, f"{f.reason}{at}")
    origin = _origin(task, ssp, offset)
    came = f" (written for the message at {origin_text(origin)})" if origin is not None else ""
    skip = ""
    if alone and not placed:  # an input's record, or an intermediate stream's
        skip = _skip_text(ssp, offset, origin)
    err = TaskError(
        f"operator {f.op_id!r} failed in task {task.name!r} on stream {ssp.stream_id!r} "
        f"partition {ssp.partition} offset {offset}{came}: "
        f"{cause if placed else f.reason}{at}.{advice} "
        f"The checkpoint stays before this offset, so a restart reprocesses it{skip}",
        op_id=f.op_id, task=task.name, stream=ssp.stream_id,
        partition=ssp.partition, offset=offset)
    err.__cause__ = cause
    return err


def _skip_text(ssp: SSP, offset: int, origin: Any) -> str:
    copies = ", and so the copies of it that a replay writes again" if origin is not None else ""
    return (f" (`samza-dsl run APP --skip {ssp.stream_id}:{ssp.partition}:{offset}` passes over "
            f"it once{copies})")


def _held_error(task: Any, f: OperatorFailure, ssp: SSP, offset: int, held: tuple[Any, ...],
                reason: str) -> TaskError:
    """Operator ``f.op_id`` failed on a message it had held (a session window's message ahead
    of the watermark), taking it in as the task processed ``ssp`` ``offset``: the error names the
    held message (``held``: where it was read, ``()`` when it was held before a restore), and
    its ``--skip`` where a rerun reads it again (after the checkpoint)."""
    if held:
        hssp, hoff = SSP(held[0], held[1]), held[2]
        origin = _origin(task, hssp, hoff)
        came = f" (written for the message at {origin_text(origin)})" if origin else ""
        what = (f"the message it held from stream {hssp.stream_id!r} partition "
                f"{hssp.partition} offset {hoff}{came}")
        if hoff is not None and hoff > task.checkpoint.get(hssp, -1):
            todo = (f" Fix the function or guard against this message{_skip_text(hssp, hoff, origin)}"
                    f"; the checkpoint stays before it, so a restart reads it again")
        else:
            todo = (" Fix the function or guard against this message; the checkpoint is past "
                    "it, kept in the operator's store, so only `samza-dsl reset APP` and a rerun "
                    "get past it")
    else:
        what = "a message it held since before the job's last restore (where it was read is not kept)"
        todo = (" Fix the function or guard against such messages; it is kept in the operator's "
                "store, so only `samza-dsl reset APP` and a rerun get past it")
    err = TaskError(
        f"operator {f.op_id!r} failed in task {task.name!r} on {what}, taking it in as the task "
        f"processed stream {ssp.stream_id!r} partition {ssp.partition} offset {offset}: "
        f"{reason}.{todo}", op_id=f.op_id, task=task.name, stream=ssp.stream_id,
        partition=ssp.partition, offset=offset)
    err.__cause__ = f.cause
    return err


def _origin(task: Any, ssp: SSP, offset: int) -> Any:
    """The origin of the record at ``offset`` of an intermediate stream the task reads, where it
    carries one (``runtime.engine.origins``); else None."""
    applied = task.applied
    return None if applied is None else applied.origin_of(ssp, offset)


def event_time_error(task: Any, cause: BaseException, ssp: SSP, offset: int,
                      message: Any) -> TaskError:
    """An input's ``event_time`` failed on a message: the message cannot be placed in event
    time, so the task stops there, as on an operator's failure."""
    text = repr(message)
    if len(text) > 80:
        text = text[:77] + "..."
    err = TaskError(
        f"the event_time of input {ssp.stream_id!r} failed in task {task.name!r} on stream "
        f"{ssp.stream_id!r} partition {ssp.partition} offset {offset}: "
        f"{type(cause).__name__}: {cause} (message {text}). Fix the record, or skip it "
        f"(`samza-dsl run APP --skip {ssp.stream_id}:{ssp.partition}:{offset}` passes over "
        f"it once), or make event_time handle such records. The checkpoint stays before "
        f"this offset, so a restart reprocesses it",
        task=task.name, stream=ssp.stream_id, partition=ssp.partition, offset=offset)
    err.__cause__ = cause
    return err


def timeout_error(task: Any, rec: Handout) -> CallbackTimeout:
    """The error of the message of ``rec`` that ran past the callback timeout, naming what
    it waits for: the operator, and the remote table and key, or the function."""
    ssp = rec.ssp
    wait = wait_of(task, rec)
    if wait.table is not None:
        advice = (f"check the service of remote table {wait.table!r}, give its functions a "
                  f"timeout (a RetryPolicy can retry it), or raise task.callback.timeout.ms")
    else:
        advice = "add a timeout to the call it waits for, or raise task.callback.timeout.ms"
    return CallbackTimeout(
        f"task {task.name!r}: the message at {ssp.stream_id!r} partition {ssp.partition} "
        f"offset {rec.offset} did not complete within task.callback.timeout.ms="
        f"{task.callback_timeout_ms}: {wait.text()}. {advice[0].upper()}{advice[1:]}. The "
        f"checkpoint stays before this offset, so a restart reprocesses it",
        op_id=wait.op_id, task=task.name, stream=ssp.stream_id, partition=ssp.partition,
        offset=rec.offset, table=wait.table, key=None if wait.key is NO_KEY else wait.key)
