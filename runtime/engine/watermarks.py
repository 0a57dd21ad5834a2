"""Event time and watermarks of a task (docs/semantics.md rules 8 and 15, Event time and watermarks).

A task reads *channels*: each input partition it owns, and for an intermediate partition, each
producing task writing into it. A channel's *progress* is how far its event time has got:

- **declared input** (``event_time=`` on the input): the largest event time over the completed
  prefix of the task's handout order (the low watermark of rule 13), less the input's
  ``max_out_of_orderness``;
- **input without declared event time**: the same, per event-time window the input feeds and per
  intermediate stream it writes, in that window's (or stream's) event time: each message records
  the event times its outputs had when they reached the window or the stream (an output is
  attributed to the handed-out message that caused it, also across async steps), and those count
  once every message handed out before it has completed;
- **intermediate partition**: the minimum over its producing tasks of the last watermark each
  sent in-band, applied when the task has completed everything it read before that watermark.

A window's watermark is the minimum over the channels that feed it of their progress, less the
window's own ``max_out_of_orderness``; a channel without progress yet holds it back, an ended
channel (once all it gave has completed) or an idle one does not. A stage sends the minimum over
its channels into every partition of the intermediate streams it writes, after the panes that
watermark closed. A message after the completed prefix of an in-order channel has an event time at
least its progress, so it is never late, whatever the completion order or speed.

Event time of an intermediate stream. A producer of stream S whose inputs declare no event time
measures its progress in the event time of what reads S: the event-time windows reached from S in
the reading stage, through ``merge``, ``map``, ``filter``, ``flat_map`` and ``partition_by`` (whose
functions are applied to the message the producer sends; a ``flat_map`` counts its earliest
output). Several such windows: the earliest of their times. An async step or a join cannot be
traced through: there the window's event time is applied to the message as it goes into that
step (a warning says so at start), and a message it fails on (raises, or gives no int) adds
nothing. A stream whose readers' event time cannot be traced at all (another window, a function
object with ``init(ctx)`` in between) gives no progress: it holds back the watermark of what
reads it until its producers end or go idle (a warning says so at start). Either way the
minimum is over every producer: declare ``event_time`` on the input where that is too coarse.

Virtual tasks (rule 18): a virtual task's progress in an input partition is the partition's.
The messages of the other key buckets reach it as markers (``runtime.engine.elastic.OtherBucket``)
carrying their event time, declared or traced to the task's windows and intermediate streams
(``TaskClock.neighbour_time``), and count at their offsets as its own completed messages do.

Idleness: an input partition with ``idle_timeout`` that has had no data for that long, with
nothing of it queued or in flight and nothing left to read (its reader is at the end of what
the system holds of it: ``Consumer.behind``), is left out of the minimum until data comes
again. A stage all of whose live channels are idle sends an idle watermark, and its readers
leave it out likewise.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import numbers
import time
import weakref
from collections.abc import Callable, Set
from typing import TYPE_CHECKING, Any, cast

from operators import build_operator
from operators.base import OperatorContext, resolve_fn
from runtime.engine.dag import OperatorFailure
from runtime.engine.records import EndOfStream, Watermark
from samza_dsl.spec import JoinSpec, JoinTableSpec, SendToSpec, WindowSpec, stream_node

if TYPE_CHECKING:
    from planner import Stage
    from runtime.engine.job import SSP, JobModel, TaskModel

__all__ = ["JobTime", "TaskClock", "job_time", "event_seconds", "CURRENT", "NO_WATERMARK"]

NO_WATERMARK = -(1 << 62)
log = logging.getLogger("samza_dsl.watermarks")
#: the observation box of the handed-out message whose outputs are being processed
CURRENT: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "samza_current_message", default=None)

DECLARED, INTERMEDIATE, OBSERVED = 0, 1, 2
_COMPOSABLE = frozenset({"map", "filter", "flat_map", "partition_by", "broadcast"})
#: steps whose outputs are no function of the message: a window's event time is taken on the
#: message as it goes in, where it fits
_TENTATIVE = frozenset({"async_flat_map", "join", "join_table"})

Derived = Callable[[Any], "int | None"]


def event_seconds(t: Any) -> float:
    """An input's ``event_time`` result other than a float, an int or None, as seconds: a real
    number (a numpy or Decimal value); anything else is an error saying what came back."""
    if isinstance(t, numbers.Number) and not isinstance(t, bool | complex):
        return float(t)  # type: ignore[arg-type]
    raise TypeError(f"event_time returned {t!r} ({type(t).__name__}): it must return the "
                    f"message's event time in seconds, as a number")


def _min_of(fns: list[Derived]) -> Derived | None:
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]

    def earliest(m: Any) -> int | None:
        best = None
        for f in fns:
            t = f(m)
            if t is not None and (best is None or t < best):
                best = t
        return best
    return earliest


def _max_of(fns: list[Derived]) -> Derived:
    if len(fns) == 1:
        return fns[0]

    def latest(m: Any) -> int | None:
        best = None
        for f in fns:
            t = f(m)
            if t is not None and (best is None or t > best):
                best = t
        return best
    return latest


def _each_output(process: Callable[[Any], Any], after: Derived) -> Derived:
    """``after`` over the outputs of ``process``: the latest of their times (as a box records
    them)."""
    def latest(m: Any) -> int | None:
        best = None
        for o in process(m):
            t = after(o)
            if t is not None and (best is None or t > best):
                best = t
        return best
    return latest


def _guarded(fn: Derived, warn: str | None = None) -> Derived:
    """``fn`` on a message taken as it goes into a step that cannot be traced (an async step, a
    join): it may not fit that message, and then gives no time. ``warn``: logged (with the
    error) the first time that happens."""
    warned = warn is None

    def tentative(m: Any) -> int | None:
        nonlocal warned
        try:
            t = fn(m)
        except Exception as exc:
            if not warned:
                warned = True
                log.warning("%s (%s: %s)", warn, type(exc).__name__, exc)
            return None
        return t if type(t) is int else None
    return tentative


#: ``JobTime._trace``: no path from the node to the domain
_NO_PATH: Any = object()


#: a window's own event time in ms (``_window_time``) -> the window's ``event_time`` in
#: seconds, which ``observing`` calls with no frame in between
_WINDOW_SECONDS: weakref.WeakKeyDictionary[Any, Callable[[Any], float]] = \
    weakref.WeakKeyDictionary()


def _window_time(fn: Callable[[Any], float]) -> Derived:
    def ms(m: Any) -> int:
        return round(fn(m) * 1000.0)
    _WINDOW_SECONDS[ms] = fn
    return ms


class JobTime:
    """What the plan says about event time, worked out once per job."""

    def __init__(self, job: JobModel) -> None:
        plan = self.plan = job.plan
        app = plan.app
        self.job = job
        self.declared: dict[str, tuple[Callable[[Any], float], int]] = {
            sid: (resolve_fn(d.event_time), d.max_out_of_orderness_ms)
            for sid, d in app.inputs.items() if d.event_time is not None}
        self.idle_ms: dict[str, int] = {
            sid: d.idle_timeout_ms for sid, d in app.inputs.items() if d.idle_timeout_ms > 0}
        #: event-time window op id -> its declared out-of-orderness, plus how far behind
        #: event-time joins before it may leave its messages (``join_lag``); an event-time
        #: join (``within``) is one too, with only the latter: its sides read declared inputs
        self.windows: dict[str, int] = {}
        for stage in plan.stages:
            for op_id in stage.operators:
                spec = app.operator(op_id)
                if isinstance(spec, WindowSpec) and spec.window.event_time is not None:
                    self.windows[op_id] = spec.window.max_out_of_orderness_ms + spec.join_lag_ms
                elif isinstance(spec, JoinSpec) and spec.event_time:
                    self.windows[op_id] = max((s.lag_ms for s in spec.sides), default=0)
        self.readers: dict[str, list[Stage]] = {}
        for stage in plan.stages:
            for sid in stage.inputs:
                self.readers.setdefault(sid, []).append(stage)
        self._derived: dict[str, Derived | None] = {}
        self._traces: dict[tuple[str, str, str], Derived | None] = {}
        self._procs: dict[str, Callable[[Any], Any] | None] = {}
        self._untimed: dict[str, bool] = {}
        #: streams being derived (``stream_time``), innermost last
        self._deriving: list[str] = []
        #: stream id -> the async steps and joins its event time is read in front of
        self.tentative: dict[str, set[str]] = {}
        self._noted: set[str] = set()
        self._async = {op.op_id for op in app.operators if op.opcode == "async_flat_map"}
        self._timed: dict[str, bool] = {}
        self.timed = {s.stage_id for s in plan.stages if self._is_timed(s)}

    def intermediate_outputs(self, stage: Stage) -> list[str]:
        return [sid for sid in stage.outputs if sid in self.plan.intermediate_streams]

    def _is_timed(self, stage: Stage) -> bool:
        """A stage needs watermarks: it has an event-time window, or writes a stream read by a
        stage that needs them."""
        known = self._timed.get(stage.stage_id)
        if known is not None:
            return known
        self._timed[stage.stage_id] = False  # the plan is acyclic; this only guards
        timed = any(op in self.windows for op in stage.operators) or any(
            self._is_timed(r) for sid in self.intermediate_outputs(stage)
            for r in self.readers.get(sid, ()) if r is not stage)
        self._timed[stage.stage_id] = timed
        return timed

    # -- the event time of an intermediate stream ---------------------------------------------

    def stream_time(self, sid: str) -> Derived | None:
        """``f(message sent into sid) -> ms or None``, in the event time of what reads ``sid``;
        None when it cannot be traced."""
        if sid in self._derived:
            return self._derived[sid]
        self._derived[sid] = None  # a guard while deriving
        self._deriving.append(sid)
        try:
            fns = [f for stage in self.readers.get(sid, ())
                   if (f := self._from(stream_node(sid), stage)) is not None]
        finally:
            self._deriving.pop()
        out = self._derived[sid] = _min_of(fns)
        return out

    def note_measured(self, sid: str) -> None:
        """A producer measures the progress of ``sid`` with ``stream_time``: say once where
        that time is read in front of an async step or a join."""
        steps = self.tentative.get(sid)
        if not steps or sid in self._noted:
            return
        self._noted.add(sid)
        wins = sorted({op for r in self.readers.get(sid, ()) for op in r.operators
                       if op in self.windows})
        log.warning(
            "the event time of stream %r cannot be traced through %s%s, so its producers "
            "measure their progress by the window's event_time as messages go into that step. "
            "Declare event_time=fn on the inputs that feed the stream to measure it exactly "
            "and not see this again",
            sid, ", ".join(map(repr, sorted(steps))),
            f" to the event-time window(s) {', '.join(map(repr, wins))}" if wins else "")

    def _from(self, node: str, stage: Stage) -> Derived | None:
        fns: list[Derived] = []
        for op_id in self.plan.next_ops(node):
            if op_id not in stage.operators:
                continue
            f = self._through(op_id, stage)
            if f is not None:
                fns.append(f)
        return _min_of(fns)

    def _through(self, op_id: str, stage: Stage) -> Derived | None:
        spec = self.plan.app.operator(op_id)
        if isinstance(spec, WindowSpec):
            et = spec.window.event_time
            return _window_time(resolve_fn(et)) if et is not None else None
        if spec.opcode == "merge":
            return self._from(op_id, stage)
        if spec.opcode in _TENTATIVE:  # not a function of the message: taken as it goes in
            rest = self._from(op_id, stage)
            if rest is None:
                return None
            sid = self._deriving[-1] if self._deriving else None
            if sid is None:
                return _guarded(rest)
            self.tentative.setdefault(sid, set()).add(op_id)
            return _guarded(rest, (
                f"stream {sid!r}: the event time of its readers' windows failed on a message "
                f"sent into it, taken as it goes into {op_id!r}: such a message does not move "
                f"the stream's watermark, and while none does, its readers' windows wait for "
                f"its producers to end or go idle. Declare event_time=fn on the input that "
                f"feeds it"))
        if spec.opcode not in _COMPOSABLE:
            return None  # sinks, tables: not a function of the message
        if spec.opcode in ("partition_by", "broadcast"):
            rest = self.stream_time(spec.stream_id)  # type: ignore[attr-defined]
        else:
            rest = self._from(op_id, stage)
        if rest is None:
            return None
        process = self._process(op_id)
        if process is None:
            return None
        after = rest

        def through(m: Any) -> int | None:
            best = None
            for o in process(m):
                t = after(o)
                if t is not None and (best is None or t < best):
                    best = t
            return best
        return through

    def _process(self, op_id: str) -> Callable[[Any], Any] | None:
        """The ``process`` of a copy of an operator, to apply to messages outside any task; None
        when a user function is an object with ``init(ctx)`` (it may need its task)."""
        if op_id in self._procs:
            return self._procs[op_id]
        op = build_operator(self.plan.app.operator(op_id))
        process: Callable[[Any], Any] | None = None
        if not any(fn is not None and callable(getattr(fn, "init", None))  # foreign: a user's
                   and not inspect.isfunction(fn) for fn in op.user_fns):
            op.init(OperatorContext("event-time", {}, lambda: 0))
            process = op.process
        self._procs[op_id] = process
        return process

    # -- a message's event time in a domain of its own stage ----------------------------------

    def trace(self, node: str, stage: Stage, domain: str) -> Derived | None:
        """``f(message at node) -> ms or None``: the latest event time, in ``domain`` (an
        event-time window, or an intermediate stream by its partition_by / broadcast op id), of
        the outputs the message causes there, as the box of a handed-out message records them.
        Through an async step or a join the message is taken as it goes in. None when a path
        from ``node`` to ``domain`` cannot be followed (another window, a function object with
        ``init``) or there is none."""
        key = (node, stage.stage_id, domain)
        if key not in self._traces:
            f = self._trace(node, stage, domain)
            self._traces[key] = None if f is _NO_PATH else f
        return self._traces[key]

    def _trace(self, node: str, stage: Stage, domain: str) -> Any:
        fns: list[Derived] = []
        for op_id in self.plan.next_ops(node):
            if op_id not in stage.operators:
                continue
            f = self._trace_op(op_id, stage, domain)
            if f is _NO_PATH:
                continue
            if f is None:
                return None
            fns.append(f)
        return _max_of(fns) if fns else _NO_PATH

    def _trace_op(self, op_id: str, stage: Stage, domain: str) -> Any:
        spec = self.plan.app.operator(op_id)
        if op_id == domain:
            if isinstance(spec, WindowSpec):
                return _window_time(resolve_fn(spec.window.event_time))
            if isinstance(spec, JoinSpec):
                return None  # its sides read declared inputs only
            after = self.stream_time(domain)  # what the producer records of what it sends
            process = self._process(op_id)
            return None if after is None or process is None else _each_output(process, after)
        if spec.opcode in ("partition_by", "broadcast", "send_to", "sink"):
            return _NO_PATH  # a terminal of another stream
        rest = self._trace(op_id, stage, domain)
        if rest is _NO_PATH or rest is None:
            return rest
        if isinstance(spec, WindowSpec):
            return None  # the domain is behind another window
        if spec.opcode == "merge":
            return rest
        if spec.opcode in ("map", "filter", "flat_map"):
            process = self._process(op_id)
            return None if process is None else _each_output(process, rest)
        return _guarded(rest)  # an async step, a join: the message as it goes in

    def fixed_order(self, stage: Stage, op_id: str) -> bool:
        """Messages reach ``op_id`` in an order that does not depend on speed: one input
        partition feeds it, through stages that each run in one task, with no async step."""
        graph = self.plan.dag
        if self._async & graph.ancestors(op_id):
            return False
        feeding = [sid for sid in stage.inputs if op_id in graph.descendants(stream_node(sid))]
        if len(feeding) != 1:
            return False
        sid = feeding[0]
        if sid in self.plan.app.inputs:
            return True
        if self.job.producers.get(sid, 1) != 1:
            return False
        producer = next((s for s in self.plan.stages if sid in s.outputs), None)
        return producer is not None and self.fixed_order(producer, sid)

    def inline_to(self, stage: Stage, op_id: str, threaded: Set[str]) -> bool:
        """Every message reaches ``op_id`` in the call that hands it out: no operator before it
        in ``stage`` may give its outputs later (an async step, a join with a remote table, or
        an operator of one of the ``threaded`` opcodes, which the task runs on its thread
        pool), so no message reaches it while an earlier one is still in flight before it."""
        app = self.plan.app
        for op in self.plan.dag.ancestors(op_id):
            if op not in stage.operators:
                continue
            spec = app.operator(op)
            remote = isinstance(spec, JoinTableSpec | SendToSpec) \
                and spec.table_id in app.remote_tables
            if spec.opcode == "async_flat_map" or (spec.opcode == "join_table" and remote) \
                    or (spec.opcode in threaded and not remote):
                return False
        return True

    def bounded(self, op_id: str) -> bool:
        """Messages may reach window ``op_id`` out of event-time order within a declared bound:
        its own ``max_out_of_orderness``, or that of an input feeding it."""
        if self.windows.get(op_id, 0) > 0:
            return True
        inputs = self.plan.app.inputs
        return any(sid in inputs and inputs[sid].max_out_of_orderness_ms > 0
                   and stream_node(sid) in self.plan.dag.ancestors(op_id)
                   for sid in self.declared)

    def untimed(self, sid: str) -> bool:
        """An intermediate stream no producer can measure the progress of: every input of its
        stage that reaches it declares no event time and its event time cannot be traced, or is
        such a stream itself. Its readers leave it out of their watermarks."""
        known = self._untimed.get(sid)
        if known is not None:
            return known
        self._untimed[sid] = True  # a guard; the plan is acyclic
        app = self.plan.app
        producer = next((s for s in self.plan.stages if sid in s.outputs), None)
        timed = False
        if producer is not None:
            for sid_in in producer.inputs:
                if sid not in self.plan.dag.descendants(stream_node(sid_in)):
                    continue
                if sid_in in self.declared:
                    timed = True
                elif sid_in in app.inputs:
                    timed = timed or self.stream_time(sid) is not None
                else:
                    timed = timed or not self.untimed(sid_in)
        self._untimed[sid] = not timed
        if not timed:
            wins = [op for r in self.readers.get(sid, ()) for op in r.operators
                    if op in self.windows]
            if wins:
                log.warning(
                    "the event time of stream %r cannot be traced to the event-time window(s) %s "
                    "(another window, or a function object with init(ctx), is in between): its "
                    "producers cannot measure their progress, so it holds their watermark back "
                    "until its producers end or go idle. Declare event_time=fn on the input "
                    "that feeds it",
                    sid, ", ".join(map(repr, wins)))
        return not timed


def job_time(job: JobModel) -> JobTime:
    jt = job.time
    if jt is None:
        jt = job.time = JobTime(job)
    return cast(JobTime, jt)


class TaskClock:
    """The channel progress of one task and the watermarks of its stages.

    What it needs of its task it is given: the set of the task's partitions that ended
    (``ended``), ``busy(ssp)``, whether the task still has records of a partition queued,
    being handed out or in flight, and the opcodes whose operators it runs on its thread pool
    (``threaded``). The task changes the clock only through its methods."""

    def __init__(self, model: TaskModel, job: JobModel, ended: Set[SSP] = frozenset(),
                 busy: Callable[[SSP], bool] = lambda ssp: False,
                 threaded: Set[str] = frozenset()) -> None:
        jt = self.jt = job_time(job)
        self.job = job
        self.threaded = threaded
        self.name = model.name
        self.ended = ended
        self.busy = busy
        self.stages = [s for s in model.stages if s.stage_id in jt.timed]
        #: stream id -> DECLARED / INTERMEDIATE / OBSERVED, for the streams of timed stages
        self.kinds: dict[str, int] = {}
        #: stream id -> (event time fn, bound), for declared inputs
        self.declared = jt.declared
        #: op id (window) or stream id -> the function whose value an output records
        self.observe: dict[str, Derived] = {}
        #: input partition -> its idle timeout in seconds
        self.idle_ms: dict[SSP, float] = {ssp: jt.idle_ms[ssp.stream_id] / 1000.0
                                          for ssp in model.ssps if ssp.stream_id in jt.idle_ms}
        #: stream id -> the windows that keep their own watermark, decided once here: every
        #: message of the stream's one partition reaches them inline (``own_watermarks``)
        self.local: dict[str, list[str]] = {}
        #: declared input stream id -> the windows it alone feeds in this task, with their bound
        self.single_declared: dict[str, list[tuple[str, int]]] = {}
        #: declared input stream id -> the windows its one partition alone feeds in this task
        #: (its ``single_declared`` ones, or so but for an idle timeout) that each of its
        #: messages reaches inline: they take its event time as it is handed out, whatever is
        #: in flight after them or on the task's other inputs
        self.inline_declared: dict[str, list[tuple[str, int]]] = {}
        #: input stream id without declared event time -> the windows that its one partition
        #: alone feeds in this task and each of its messages reaches inline, where they do not
        #: keep their own watermark (``local``: a bound, an idle timeout): they take the time a
        #: message traces to in them as it is handed out, whatever is in flight after them
        self.inline_observed: dict[str, list[tuple[str, int]]] = {}
        #: intermediate stream id -> the windows of its stage that each of its messages
        #: reaches inline: they take a producer's watermark as it is handed out, whatever is
        #: in flight after them (``handed_out_mark``)
        self.inline_marks: dict[str, set[str]] = {}
        #: window op id -> whether it takes its messages in event-time order below the
        #: watermark (a session window holds those ahead of it): the order they come in may
        #: depend on speed, or they may come out of order within a declared bound
        self.in_time_order: dict[str, bool] = {}
        #: stream id -> its stage, when that stage has event-time windows
        self.window_stage: dict[str, Stage] = {}
        #: stream id -> its stage, when that stage writes intermediate streams: a producer's
        #: watermark it reads goes on at once, in order (docs/semantics.md, "Per message")
        self.hop_stage: dict[str, Stage] = {}
        #: stage id -> its one channel, when one alone feeds a stage that writes intermediate
        #: streams: a message behind that channel's progress is preceded by the watermark
        self.lone: dict[str, SSP] = {}
        #: per stage: (windows with their bound, intermediate outputs, channel ssps, reach)
        self._stage: dict[str, tuple[list[tuple[str, int]], list[str], list[SSP],
                                     dict[str, set[str]]]] = {}
        for stage in self.stages:
            self._take_stage(stage, model)
        self.progress: dict[SSP, int] = {}
        self.observed: dict[SSP, dict[str, int]] = {}
        self.producers: dict[SSP, dict[str | None, tuple[int, bool]]] = {}
        self.quiet: set[SSP] = set()  # intermediate partitions whose producers are all idle
        self.gone: dict[SSP, set[str | None]] = {}  # producers that ended, per partition
        now = time.monotonic()
        self.last_data: dict[SSP, float] = dict.fromkeys(self.idle_ms, now)
        #: ``behind(ssp)``: whether the system holds records of an input partition its reader
        #: has not handed out yet (set by the container): such a partition is never idle
        self.behind: Callable[[SSP], bool] = lambda ssp: False
        self.delivered: dict[str, int] = {}
        self.sent: dict[tuple[str, str], tuple[int, bool]] = {}
        self.dirty = bool(self.stages)

    def neighbour_time(self, stream_id: str) -> Callable[[Any], Any] | None:
        """For a virtual task (rule 18): ``f(message of another key bucket)`` -> what it adds to
        its partition's progress, as if this task had completed it: the declared event time
        (seconds), or a box ``[{domain: ms}]`` of the times it traces to in this task's windows
        and intermediate streams; None where it adds nothing. None when the stream's messages
        count for no watermark here."""
        kind = self.kinds.get(stream_id)
        if kind == DECLARED:
            return self.declared[stream_id][0]
        if kind != OBSERVED:
            return None
        node = stream_node(stream_id)
        fns: list[tuple[str, Derived]] = []
        for stage in self.stages:
            if stream_id not in stage.inputs:
                continue
            reach = self._stage[stage.stage_id][3]
            for domain in sorted(reach[stream_id]):
                if domain in self.observe:
                    f = self.jt.trace(node, stage, domain)
                    if f is not None:
                        fns.append((domain, f))
        if not fns:
            return None

        def box(m: Any) -> list[Any] | None:
            obs: dict[str, int] = {}
            for domain, f in fns:
                try:
                    ms = f(m)
                except Exception:  # its own task reports it, if it fails there too
                    continue
                if ms is not None:
                    obs[domain] = ms
            return [obs] if obs else None
        return box

    def own_watermarks(self) -> frozenset[str]:
        """The windows that keep their own watermark (``local``): given to them when they are
        built (``OperatorContext.own_watermarks``), never changed after."""
        return frozenset(op for ops in self.local.values() for op in ops)

    def _take_stage(self, stage: Stage, model: TaskModel) -> None:
        """What the clock keeps of one timed stage of the task (see the attributes)."""
        jt = self.jt
        app = self.job.plan.app
        graph = self.job.plan.dag
        observed = False
        reach: dict[str, set[str]] = {}
        for sid in stage.inputs:
            if sid in jt.declared:
                self.kinds[sid] = DECLARED
            elif sid in app.inputs:
                self.kinds[sid] = OBSERVED
                observed = True
            else:
                self.kinds[sid] = INTERMEDIATE
            node = stream_node(sid)
            below = graph.descendants(node)
            if self.kinds[sid] == INTERMEDIATE:
                jt.untimed(sid)  # warns where its producers cannot measure it
            # an untimed stream too: its producers hold back what it reaches
            reach[sid] = {n for n in below if n in stage.operators}
        windows = [(op, jt.windows[op]) for op in stage.operators if op in jt.windows]
        outs = jt.intermediate_outputs(stage)
        if observed:
            for op, _ in windows:
                spec = app.operator(op)
                if isinstance(spec, WindowSpec):  # (an event-time join reads declared inputs)
                    self.observe[op] = _window_time(resolve_fn(spec.window.event_time))
            for sid in outs:
                f = jt.stream_time(sid)
                if f is not None:
                    self.observe[sid] = f
                    jt.note_measured(sid)
                # else an input without event time cannot tell this stream's progress: it
                # stays in the minimum without any, and holds the stream's watermark back
        ssps = [ssp for ssp in model.ssps if ssp.stream_id in stage.inputs]
        self._stage[stage.stage_id] = (windows, outs, ssps, reach)
        # one input partition without declared event time, feeding windows without a bound
        # that each of its messages reaches inline, and nothing else to measure: each window's
        # own latest event time is exactly that partition's progress, so the windows keep
        # their own watermark (docs/semantics.md, "Per message"). Where it alone feeds windows
        # otherwise (a bound, an idle timeout), those it reaches inline take each message's
        # time as it is handed out: a message being handed out is no idle partition's
        alone = bool(windows) and len(ssps) == 1 \
            and all(op in reach[ssps[0].stream_id] for op, _ in windows)
        inline = [(op, b) for op, b in windows if jt.inline_to(stage, op, self.threaded)]
        if alone and self.kinds[ssps[0].stream_id] == OBSERVED:
            if ssps[0] not in self.idle_ms and len(inline) == len(windows) \
                    and all(b == 0 for _, b in windows) \
                    and not any(sid in self.observe for sid in outs):
                self.local[ssps[0].stream_id] = [op for op, _ in windows]
            elif inline:  # (a window's own watermark knows no bound)
                self.inline_observed[ssps[0].stream_id] = inline
        if windows:
            for sid in stage.inputs:
                self.window_stage[sid] = stage
            if alone and self.kinds[ssps[0].stream_id] == DECLARED:
                if ssps[0] not in self.idle_ms:
                    self.single_declared[ssps[0].stream_id] = windows
                if inline:
                    self.inline_declared[ssps[0].stream_id] = inline
        for sid in stage.inputs:
            if self.kinds[sid] == INTERMEDIATE:
                ops = {op for op, _ in windows
                       if op in reach[sid] and jt.inline_to(stage, op, self.threaded)}
                if ops:
                    self.inline_marks[sid] = ops
        for op, _ in windows:
            self.in_time_order[op] = not jt.fixed_order(stage, op) or jt.bounded(op)
        if outs:
            for sid in stage.inputs:
                self.hop_stage[sid] = stage
            if len(ssps) == 1:
                self.lone[stage.stage_id] = ssps[0]

    def touch(self) -> None:
        """Something may have moved a watermark: the task recomputes them
        (``dirty``)."""
        self.dirty = True

    def settle(self) -> bool:
        """Whether a watermark may have moved since the last call (``dirty``, then cleared)."""
        dirty, self.dirty = self.dirty, False
        return dirty

    def progress_of(self, ssp: SSP) -> int:
        """How far ``ssp``'s event time has got (``NO_WATERMARK``: nowhere yet)."""
        return self.progress.get(ssp, NO_WATERMARK)

    def raise_progress(self, ssp: SSP, ms: int) -> bool:
        """``ssp``'s progress is at least ``ms``; True when that moved it."""
        if ms > self.progress.get(ssp, NO_WATERMARK):
            self.progress[ssp] = ms
            return True
        return False

    def delivered_at_least(self, op_id: str, ms: int) -> None:
        """Window ``op_id`` has its watermark at ``ms`` at least (it moved it itself)."""
        if ms > self.delivered.get(op_id, NO_WATERMARK):
            self.delivered[op_id] = ms

    def handout(self, stream_id: str) -> int | None:
        return self.kinds.get(stream_id)

    def arrived(self, ssp: SSP) -> None:
        if ssp in self.last_data:
            self.last_data[ssp] = time.monotonic()

    # -- progress across a restore ---------------------------------------------------------------

    def snapshot(self) -> dict[str, Any] | None:
        """The task's event-time progress as of now, for its checkpoint (``restore`` takes it
        back): each input partition's progress (declared event time) or observed times, and
        each producer's watermark or end in its intermediate partitions. None: the task has no
        event time. A partition read to its end before a restart then holds no window back
        after it, as it did not before."""
        if not self.stages:
            return None
        return {
            "p": [[s.stream_id, s.partition, ms] for s, ms in self.progress.items()
                  if self.kinds.get(s.stream_id) == DECLARED],
            "o": [[s.stream_id, s.partition, [[d, ms] for d, ms in obs.items()]]
                  for s, obs in self.observed.items()],
            "w": [[s.stream_id, s.partition, [[p, ms, idle] for p, (ms, idle) in per.items()]]
                  for s, per in self.producers.items()],
            "g": [[s.stream_id, s.partition, list(gone)] for s, gone in self.gone.items()],
        }

    def restore(self, times: Any) -> None:
        """The progress of ``snapshot`` in the task's checkpoint, for the partitions the task
        still reads (nothing for a checkpoint without it, or one this code cannot read)."""
        if not isinstance(times, dict) or not self.stages:
            return
        from runtime.engine.job import SSP

        mine = set(self.kinds)
        try:
            for sid, p, ms in times.get("p", []):
                if sid in mine and self.kinds[sid] == DECLARED:
                    self.progress[SSP(sid, p)] = int(ms)
            for sid, p, obs in times.get("o", []):
                if sid in mine:
                    self.observed[SSP(sid, p)] = {d: int(ms) for d, ms in obs}
            for sid, p, per in times.get("w", []):
                if sid in mine:
                    self.producers[SSP(sid, p)] = {name: (int(ms), bool(idle))
                                                   for name, ms, idle in per}
            for sid, p, gone in times.get("g", []):
                if sid in mine:
                    self.gone[SSP(sid, p)] = set(gone)
        except (TypeError, ValueError):  # not a snapshot of this code: start without it
            self.progress.clear()
            self.observed.clear()
            self.producers.clear()
            self.gone.clear()
            return
        for ssp in {*self.producers, *self.gone}:
            self._recompute(ssp)
        self.dirty = True

    def _still_behind(self, ssp: SSP) -> bool:
        """Whether ``ssp``'s reader has records of it still to hand out: then it is not idle,
        and its idle time starts again (a partition is idle when the job has read all it
        holds and nothing came for ``idle_timeout``, not when its records are slow to come)."""
        if self.behind(ssp):
            self.last_data[ssp] = time.monotonic()
            return True
        return False

    # -- progress ----------------------------------------------------------------------------------

    def apply(self, ssp: SSP, mark: Any) -> None:
        """Count a completed message's event time (seconds, declared), its observations (a box),
        or a control record from a producer."""
        self.dirty = True
        t = type(mark)
        if t is list:
            obs = mark[0]
            if obs:
                mine = self.observed.get(ssp)
                if mine is None:
                    self.observed[ssp] = dict(obs)
                else:
                    for d, ms in obs.items():
                        if ms > mine.get(d, NO_WATERMARK):
                            mine[d] = ms
        elif t is Watermark:
            per = self.producers.setdefault(ssp, {})
            old = per.get(mark.producer)
            ms = mark.ms if old is None else max(mark.ms, old[0])
            per[mark.producer] = (ms, mark.idle)
            self._recompute(ssp)
        elif t is EndOfStream:
            self.gone.setdefault(ssp, set()).add(mark.producer)
            self._recompute(ssp)
        else:
            fn_bound = self.declared[ssp.stream_id]
            ms = round(mark * 1000.0) - fn_bound[1]
            if ms > self.progress.get(ssp, NO_WATERMARK):
                self.progress[ssp] = ms

    def apply_box(self, ssp: SSP, box: list[Any]) -> bool:
        """``apply`` for a message completed inline; True when it may move a window: for some
        window the partition was the furthest behind (or had no progress yet)."""
        self.dirty = True
        obs = box[0]
        mine = self.observed.get(ssp)
        if mine is None:
            self.observed[ssp] = dict(obs)
            return True
        if len(obs) == 1:  # the common case: one window
            for d, ms in obs.items():
                old = mine.get(d)
                if old is not None and ms <= old:
                    return False
                mine[d] = ms
                b = self.jt.windows.get(d)
                return old is None or (b is not None
                                       and old - b <= self.delivered.get(d, NO_WATERMARK))
        hit = False
        bounds = self.jt.windows
        delivered = self.delivered
        for d, ms in obs.items():
            old = mine.get(d)
            if old is None or ms > old:
                mine[d] = ms
                if old is None or (d in bounds
                                   and old - bounds[d] <= delivered.get(d, NO_WATERMARK)):
                    hit = True
        return hit

    def apply_declared(self, ssp: SSP, t: float, stage: Stage) -> bool:
        """``apply`` of a declared event time completed inline; True when it may move a window
        of ``stage``: the partition was the furthest behind for one of them."""
        ms = round(t * 1000.0) - self.declared[ssp.stream_id][1]
        old = self.progress.get(ssp)
        if old is not None and ms <= old:
            return False
        self.progress[ssp] = ms
        self.dirty = True
        if old is None:
            return True
        delivered = self.delivered
        for op_id, bound in self._stage[stage.stage_id][0]:
            if old - bound <= delivered.get(op_id, NO_WATERMARK):
                return True
        return False

    def sync_windows(self, stage: Stage) -> list[tuple[str, int]]:
        """The windows of ``stage`` whose watermark moved, between two messages."""
        if self.idle_ms or self.quiet or self.ended:
            return self.compute(stage, streams=False)[0]
        windows, _, ssps, reach = self._stage[stage.stage_id]
        moved: list[tuple[str, int]] = []
        for op_id, bound in windows:
            v = self._min(ssps, op_id, reach)
            if v is not None and v - bound > self.delivered.get(op_id, NO_WATERMARK):
                self.delivered[op_id] = v - bound
                moved.append((op_id, v - bound))
        return moved

    def _recompute(self, ssp: SSP) -> None:
        per = self.producers.get(ssp, {})
        gone = self.gone.get(ssp, set())
        expected = self.job.producers.get(ssp.stream_id, 1)
        live = [v for p, v in per.items() if p not in gone]
        if len(per) + len([g for g in gone if g not in per]) < expected:
            self.progress.pop(ssp, None)  # a producer not heard from yet holds it back
            self.quiet.discard(ssp)
            return
        active = [ms for ms, idle in live if not idle]
        if live and not active:  # all idle: as far as the furthest of them got (as Flink)
            self.quiet.add(ssp)
            self.progress[ssp] = max(ms for ms, _ in live)
            return
        self.quiet.discard(ssp)
        if active:
            self.progress[ssp] = min(active)

    def handed_out_mark(self, ssp: SSP, mark: Watermark, stage: Stage) -> list[tuple[str, int]]:
        """A producer's watermark handed out while messages read before it are in flight: the
        windows of ``stage`` that each message of ``ssp`` reaches inline have taken those
        messages, so they take it now (docs/semantics.md, "Per message": only messages in
        flight before a window hold its watermark back); the windows that moved, as
        ``compute`` gives them. The progress of ``ssp`` (and so what the stage's intermediate
        streams get) takes the watermark once what came before it has completed."""
        ops = self.inline_marks.get(ssp.stream_id)
        if not ops:
            return []
        per = self.producers.get(ssp)
        saved = (None if per is None else dict(per), self.progress.get(ssp), ssp in self.quiet)
        self.apply(ssp, mark)
        try:
            return self.compute(stage, streams=False, only=ops)[0]
        finally:
            per, progress, quiet = saved
            if per is None:
                self.producers.pop(ssp, None)
            else:
                self.producers[ssp] = per
            if progress is None:
                self.progress.pop(ssp, None)
            else:
                self.progress[ssp] = progress
            if quiet:
                self.quiet.add(ssp)
            else:
                self.quiet.discard(ssp)

    # -- watermarks --------------------------------------------------------------------------------

    def stream_marks(self, stage: Stage) -> list[tuple[str, Watermark]]:
        """The watermarks to send into ``stage``'s intermediate streams now, leaving its
        windows as they are."""
        return self.compute(stage, windows=False)[1]

    def compute(self, stage: Stage, streams: bool = True, windows: bool = True,
                only: Set[str] | None = None
                ) -> tuple[list[tuple[str, int]], list[tuple[str, Watermark]]]:
        """The windows whose watermark moved (op id, watermark) and the watermarks to send into
        the stage's intermediate streams (not with ``streams=False``; no window moves with
        ``windows=False``, and only those named in ``only`` where it is given)."""
        stage_windows, outs, ssps, reach = self._stage[stage.stage_id]
        moving = ([w for w in stage_windows if only is None or w[0] in only] if windows
                  else [])
        name = self.name
        ended = self.ended
        busy = self.busy
        live: list[SSP] = []
        idle: list[SSP] = []
        for ssp in ssps:
            if ssp in ended:
                if busy(ssp):  # what it gave is still being processed
                    live.append(ssp)
            elif ssp in self.quiet or (
                    ssp in self.idle_ms and not busy(ssp)
                    and time.monotonic() - self.last_data[ssp] >= self.idle_ms[ssp]
                    and not self._still_behind(ssp)):
                idle.append(ssp)
            else:
                live.append(ssp)
        moved: list[tuple[str, int]] = []
        marks: list[tuple[str, Watermark]] = []
        if not streams:
            outs = []
        if not live:
            # every channel idle: the windows go as far as the furthest of them got (as Flink
            # does), and readers are told this task is idle
            if idle:
                for op_id, bound in moving:
                    v = self._max(idle, op_id, reach)
                    if v is not None and v - bound > self.delivered.get(op_id, NO_WATERMARK):
                        self.delivered[op_id] = v - bound
                        moved.append((op_id, v - bound))
                for sid in outs:
                    last = self.sent.get((stage.stage_id, sid))
                    v = self._max(idle, sid, reach)
                    ms = max(v if v is not None else NO_WATERMARK,
                             last[0] if last is not None else NO_WATERMARK)
                    if last is None or not last[1] or ms > last[0]:
                        self.sent[(stage.stage_id, sid)] = (ms, True)
                        marks.append((sid, Watermark(name, ms, True)))
            return moved, marks
        for op_id, bound in moving:
            v = self._min(live, op_id, reach)
            if v is None:
                continue
            wm = v - bound
            if wm > self.delivered.get(op_id, NO_WATERMARK):
                self.delivered[op_id] = wm
                moved.append((op_id, wm))
        for sid in outs:
            v = self._min(live, sid, reach)
            if v is None:
                continue
            last = self.sent.get((stage.stage_id, sid))
            if last is None or v > last[0] or last[1]:
                ms = v if last is None else max(v, last[0])
                self.sent[(stage.stage_id, sid)] = (ms, False)
                marks.append((sid, Watermark(name, ms)))
        return moved, marks

    def _max(self, chans: list[SSP], domain: str, reach: dict[str, set[str]]) -> int | None:
        best: int | None = None
        for ssp in chans:
            if domain not in reach[ssp.stream_id]:
                continue
            v = self.observed.get(ssp, {}).get(domain) if self.kinds[ssp.stream_id] == OBSERVED \
                else self.progress.get(ssp)
            if v is not None and (best is None or v > best):
                best = v
        return best

    def _min(self, live: list[SSP], domain: str, reach: dict[str, set[str]]) -> int | None:
        """The minimum progress over the channels that reach ``domain`` (a window op id or a
        stream id, which is also its partition_by's op id); None while one has none."""
        best: int | None = None
        kinds = self.kinds
        for ssp in live:
            sid = ssp.stream_id
            if domain not in reach[sid]:
                continue
            if kinds[sid] == OBSERVED:
                v = self.observed.get(ssp, {}).get(domain)
            else:
                v = self.progress.get(ssp)
            if v is None:
                return None
            if best is None or v < best:
                best = v
        return best


def observing(domain: str, fn: Derived, emit: Callable[[Any], Any], what: str,
              op_id: str, ahead: Callable[[int], None] | None = None) -> Callable[[Any], Any]:
    """``emit`` preceded by recording the message's event time in ``domain`` for the handed-out
    message that caused it; ``ahead(ms)``, where given, is called first (it may send the
    watermark ahead of a message behind it)."""
    get = CURRENT.get
    seconds = _WINDOW_SECONDS.get(fn)
    if seconds is not None:  # a window's own event time: no frame in between
        def observed_window(m: Any) -> Any:
            box = get()
            if box is not None:
                try:
                    ms = round(seconds(m) * 1000.0)
                except Exception as exc:
                    raise OperatorFailure(op_id, ValueError(
                        f"the event time of {what} failed on {m!r}: {type(exc).__name__}: "
                        f"{exc}")) from exc
                if ahead is not None:
                    ahead(ms)
                obs = box[0]
                if obs is None:
                    box[0] = {domain: ms}
                elif ms > obs.get(domain, NO_WATERMARK):
                    obs[domain] = ms
            return emit(m)
        return observed_window

    def observed(m: Any) -> Any:
        box = get()
        if box is not None:
            try:
                ms = fn(m)
            except Exception as exc:
                raise OperatorFailure(op_id, ValueError(
                    f"the event time of {what} failed on {m!r}: {type(exc).__name__}: {exc}"
                )) from exc
            if ms is not None:
                if ahead is not None:
                    ahead(ms)
                obs = box[0]
                if obs is None:
                    box[0] = {domain: ms}
                elif ms > obs.get(domain, NO_WATERMARK):
                    obs[domain] = ms
        return emit(m)
    return observed
