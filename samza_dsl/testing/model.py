"""A reference model of event-time windows and joins: slow, single-threaded, and written from the
rules in docs/semantics.md (rules 7-10 and 15), not from the operators that run them.
Use it to check what a pipeline gives against what the rules say it must give.

The model sees one window (or join) instance: the messages that reach it, in the order they reach
it, and the watermark as it moves. ``interleave`` builds that sequence from channels (input
partitions or producing tasks), each a list of ``(messages reaching the window, progress)`` per
message it handed out; ``run_window`` then gives the panes and the late messages.

>>> from datetime import timedelta
>>> from samza_dsl import KV, Triggers, Windows
>>> w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
...                            event_time=lambda kv: kv.value).early_trigger(Triggers.count(2))
>>> msgs = [KV("a", 1.0), KV("a", 2.0), KV("a", 12.0), KV("a", 3.0)]
>>> steps = interleave({0: [([m], int(m.value * 1000)) for m in msgs]})
>>> result = run_window(w, steps)
>>> [(p.key, p.pane_id, p.firing.name, [m.value for m in p.value]) for p in result.panes]
[('a', '0', 'EARLY', [1.0, 2.0]), ('a', '0', 'DEFAULT', [1.0, 2.0]), ('a', '10000', 'DEFAULT', [12.0])]
>>> result.late_counts
{'-': 1}

An input with ``max_event_time_ahead`` hands out only what ``within_ahead`` keeps: build its
channels from that.

What the model defines, for an event-time window (``event_time=``):

- **Watermark.** ``Advance(ms)`` is the task's watermark; the window's is that less the window's
  ``max_out_of_orderness``. It never goes back. A tumbling or hopping pane
  ``[start, start + size)`` closes when the watermark reaches its end; a session closes when it
  reaches its last message + gap.
- **Panes.** A tumbling window puts a message at ``t`` in the one pane whose start is a multiple
  of the size with ``start <= t < start + size``; a hopping window in each of the ``size / hop``
  panes whose start is a multiple of the hop with ``start <= t < start + size``. Each pane keeps
  its own list of messages (``combine`` plays no part: a pane's value is the fold of its
  messages), and a message goes to its panes earliest first.
- **Late.** A message whose pane is closed is late (for a hopping window, one whose every pane
  is closed and not kept; a pane that is kept still takes it); for a session, one that joins no open
  session of its key and whose own window ``[t, t + gap)`` is closed (as in Flink). With ``allowed_lateness(d)`` *and* a late trigger, a closed pane keeps its state until the
  watermark reaches its end + d, and a late message before then is folded into it and fed to the
  late trigger, which emits LATE panes; any other late message is counted (per stream) and
  dropped. Nothing fires when a kept pane expires.
- **Triggers.** The early trigger starts when a pane opens and sees each message folded into it;
  ``count(n)`` fires on its n-th message, once; ``any`` fires when its first child fires and
  then is done; ``repeat`` restarts its trigger after each firing. A DEFAULT firing cancels the
  early trigger; the late trigger starts when the pane closes.
  ``time_since_first_message`` and ``time_since_last_message`` run on processing time in
  samza-dsl (rule 7: they fire at window ticks), which has no meaning in event time: the model
  lets no processing time pass, so they never fire. A run matches the model only if it ends
  before the shortest such duration; inside ``any`` the other triggers still work.
- **Firing.** A firing emits the pane's value (the fold of its state, or the list of its
  messages) if its state is not empty. DISCARDING clears the state after every firing;
  ACCUMULATING keeps it, but a DEFAULT firing clears it unless the pane is kept for lateness.
- **End of stream.** Every open pane fires DEFAULT, in order of pane start, then key.
- **Order.** Triggers count messages in the order they reach the window (a tumbling pane's, and
  a session's, as they arrive).
- **Sessions** merge as in Beam and Flink: each message has the window ``[t, t + gap)``; a
  message joins (and so merges) every open session of its key it overlaps, whatever order the
  messages come in, so a key's sessions do not depend on arrival order. A session's pane id is
  its earliest message's time; the merged session keeps the early trigger of its earliest part,
  which then sees the other parts' messages.

Joins: ``stream_join`` (rule 9, the processing-time ``ttl=`` join), ``interval_join`` (the
event-time ``within=`` join) and ``table_join`` (rule 10) take the messages in the order they
reach the join instance; ``interval_join`` sees the join's watermark move too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from samza_dsl.kv import KV
from samza_dsl.windows import (
    AccumulationMode,
    AnyTrigger,
    CountTrigger,
    FiringType,
    RepeatTrigger,
    TimeSinceFirstMessageTrigger,
    TimeSinceLastMessageTrigger,
    Trigger,
    Window,
)

__all__ = ["Arrive", "Advance", "ModelPane", "WindowResult", "run_window", "interleave",
           "event_time_ms", "stream_join", "interval_join", "JoinResult", "table_join",
           "within_ahead"]

NEG_INF = -math.inf


@dataclass(frozen=True)
class Arrive:
    """A message reaching the window, from ``stream`` (where it came into the task).

    Example:
        >>> from datetime import timedelta
        >>> from samza_dsl import KV, Windows
        >>> w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
        ...                            event_time=lambda kv: kv.value)
        >>> result = run_window(w, [Arrive(KV("a", 1.0), "clicks"), Advance(15_000),
        ...                         Arrive(KV("a", 2.0), "clicks")])  # after [0, 10 s) closed
        >>> result.late, result.late_counts
        ([(KV(key='a', value=2.0), 'clicks')], {'clicks': 1})
    """

    message: Any
    stream: str = "-"


@dataclass(frozen=True)
class Advance:
    """The task's watermark moves to ``watermark_ms`` (a lower value is ignored).

    Example:
        >>> from datetime import timedelta
        >>> from samza_dsl import KV, Windows
        >>> w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
        ...                            event_time=lambda kv: kv.value)
        >>> steps = [Arrive(KV("a", 1.0)), Advance(10_000), Arrive(KV("a", 12.0))]
        >>> [(p.pane_id, p.firing.name) for p in run_window(w, steps, end_of_stream=False).panes]
        [('0', 'DEFAULT')]
    """

    watermark_ms: float


@dataclass(frozen=True)
class ModelPane:
    """A pane the model emits: ``(key, pane_id, firing)`` as in ``WindowPane``, and its value.

    Example:
        >>> from datetime import timedelta
        >>> from samza_dsl import KV, Windows
        >>> w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
        ...                            event_time=lambda kv: kv.value)
        >>> run_window(w, [Arrive(KV("a", 1.0))]).panes
        [ModelPane(key='a', pane_id='0', firing=<FiringType.DEFAULT: 'default'>, value=[KV(key='a', value=1.0)])]
    """

    key: Any
    pane_id: str
    firing: FiringType
    value: Any


@dataclass
class WindowResult:
    """What ``run_window`` gives: the panes in the order they were emitted, and the late
    messages.

    Example:
        >>> from datetime import timedelta
        >>> from samza_dsl import KV, Windows
        >>> w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
        ...                            event_time=lambda kv: kv.value)
        >>> result = run_window(w, [Arrive(KV("a", 12.0)), Advance(12_000), Arrive(KV("a", 1.0))])
        >>> [p.pane_id for p in result.panes], result.late_counts
        (['10000'], {'-': 1})
    """

    panes: list[ModelPane] = field(default_factory=list)
    #: ``(message, stream)`` of every message dropped as late, in arrival order
    late: list[tuple[Any, str]] = field(default_factory=list)

    @property
    def late_counts(self) -> dict[str, int]:
        """Late messages per stream, as ``TestResult.late_counts[window]``."""
        out: dict[str, int] = {}
        for _, stream in self.late:
            out[stream] = out.get(stream, 0) + 1
        return out


def event_time_ms(window: Window[Any, Any], message: Any) -> int:
    """The message's event time in whole milliseconds, to the nearest (``event_time`` gives
    seconds, and 1.001 s is 1001 ms whatever the float rounding).

    Example:
        >>> from datetime import timedelta
        >>> from samza_dsl import KV, Windows
        >>> w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
        ...                            event_time=lambda kv: kv.value)
        >>> event_time_ms(w, KV("a", 1.001))
        1001
    """
    assert window.event_time is not None, "the model runs event-time windows only"
    return round(float(window.event_time(message)) * 1000.0)


def within_ahead(messages: Sequence[Any], event_time: Callable[[Any], Any],
                 max_ahead_ms: float, now_ms: float) -> tuple[list[Any], list[int]]:
    """An input partition with ``max_event_time_ahead`` (docs/windows.md, "Event times far
    ahead"): the messages it hands out, and the indexes of those its serde error policy takes
    instead (under ``skip`` or ``dead-letter``: they reach no operator and move no time; under
    ``fail`` the first of them stops the job). A message is taken when its event time, in ms,
    is more than ``max_ahead_ms`` after ``now_ms``, the wall clock as it is read; one whose
    ``event_time`` gives no number is handed out (the task then reports it).

    >>> within_ahead([{"ts": 1}, {"ts": 253402300799}, {"ts": 2}], lambda m: m["ts"],
    ...              3_600_000, 1_700_000_000_000)
    ([{'ts': 1}, {'ts': 2}], [1])
    """
    kept: list[Any] = []
    taken: list[int] = []
    for i, m in enumerate(messages):
        try:
            t = float(event_time(m))
        except Exception:
            t = NEG_INF
        if t * 1000.0 - now_ms > max_ahead_ms:
            taken.append(i)
        else:
            kept.append(m)
    return kept, taken


# --- triggers -----------------------------------------------------------------------------------

class _Trig:
    """The state of one trigger spec; ``message()`` says whether it fires on this message."""

    def __init__(self, spec: Trigger) -> None:
        self.spec = spec
        self.done = False
        self.seen = 0
        self.children: list[_Trig] = []
        if isinstance(spec, AnyTrigger):
            self.children = [_Trig(t) for t in spec.triggers]
        elif isinstance(spec, RepeatTrigger):
            self.children = [_Trig(spec.trigger)]
        elif not isinstance(spec, CountTrigger | TimeSinceFirstMessageTrigger
                            | TimeSinceLastMessageTrigger):
            raise TypeError(f"the model does not know the trigger {spec!r}")

    def message(self) -> bool:
        spec = self.spec
        if isinstance(spec, RepeatTrigger):
            if self.children[0].message():
                self.children = [_Trig(spec.trigger)]
                return True
            return False
        if self.done:
            return False
        if isinstance(spec, CountTrigger):
            self.seen += 1
            self.done = self.seen >= spec.count
            return self.done
        if isinstance(spec, AnyTrigger):
            fired = [c.message() for c in self.children]  # every child sees the message
            self.done = any(fired)
            return self.done
        return False  # a processing-time trigger: no processing time passes in the model


# --- windows ------------------------------------------------------------------------------------

@dataclass
class _Pane:
    key: Any
    start: int
    last: int  # sessions: the latest message's time
    msgs: list[Any] = field(default_factory=list)
    early: _Trig | None = None
    late: _Trig | None = None
    closed: bool = False


class _Model:
    def __init__(self, window: Window[Any, Any]) -> None:
        if window.event_time is None:
            raise ValueError("the model runs event-time windows only (give the window event_time=)")
        self.w = window
        self.wm: float = NEG_INF
        self.panes: list[_Pane] = []
        self.out = WindowResult()
        self.keeps = window.allowed_lateness_ms > 0 and window.late is not None

    # pane bounds
    def end(self, p: _Pane) -> int:
        return p.last + self.w.size_ms if self.w.is_session else p.start + self.w.size_ms

    def value(self, msgs: list[Any]) -> Any:
        if self.w.init is None or self.w.fold is None:
            return list(msgs)
        acc = self.w.init()
        for m in msgs:
            acc = self.w.fold(m, acc)
        return acc

    def fire(self, p: _Pane, firing: FiringType) -> None:
        if p.msgs:
            self.out.panes.append(ModelPane(p.key, str(p.start), firing, self.value(p.msgs)))
            if self.w.mode is AccumulationMode.DISCARDING:
                p.msgs = []

    def fold(self, p: _Pane, m: Any, trig: _Trig | None, firing: FiringType) -> None:
        p.msgs.append(m)
        if trig is not None and trig.message():
            self.fire(p, firing)

    def new_pane(self, key: Any, start: int, last: int) -> _Pane:
        p = _Pane(key, start, last)
        p.early = _Trig(self.w.early) if self.w.early is not None else None
        self.panes.append(p)
        return p

    def arrive(self, a: Arrive) -> None:
        w, m = self.w, a.message
        key = w.key_fn(m) if w.keyed and w.key_fn is not None else None
        t = event_time_ms(w, m)
        if w.is_session:
            self.arrive_session(a, key, t)
            return
        taken = False
        for start in self.starts(t):
            pane = next((p for p in self.panes if p.key == key and p.start == start), None)
            if start + w.size_ms > self.wm:  # the pane is open
                pane = pane or self.new_pane(key, start, t)
                self.fold(pane, m, pane.early, FiringType.EARLY)
            elif self.keeps and start + w.size_ms + w.allowed_lateness_ms > self.wm:
                if pane is None:
                    pane = self.new_pane(key, start, t)
                    self.close(pane)
                self.fold(pane, m, pane.late, FiringType.LATE)
            else:
                continue
            taken = True
        if not taken:  # late for every pane it belongs to
            self.out.late.append((m, a.stream))

    def starts(self, t: int) -> list[int]:
        """The starts of the panes ``[s, s + size)`` holding time ``t``, earliest first: ``s``
        is a multiple of the hop (of the size, for a tumbling window) and ``s <= t < s + size``,
        so a hopping window gives ``size / hop`` of them and a tumbling one gives one."""
        w = self.w
        step = w.hop_ms if w.is_hopping else w.size_ms
        latest = t - t % step
        return sorted(s for s in range(latest, t - w.size_ms, -step))

    def arrive_session(self, a: Arrive, key: Any, t: int) -> None:
        w, m, gap = self.w, a.message, self.w.size_ms

        def overlaps(p: _Pane) -> bool:
            return p.key == key and p.start < t + gap and t < p.last + gap

        parts = sorted((p for p in self.panes if not p.closed and overlaps(p)),
                       key=lambda p: p.start)
        if parts or t + gap > self.wm:  # it joins an open session, or its own window is open
            if not parts:
                p = self.new_pane(key, t, t)
                self.fold(p, m, p.early, FiringType.EARLY)
                return
            head = parts[0]
            for other in parts[1:]:
                self.panes.remove(other)
                head.last = max(head.last, other.last)
                for om in other.msgs:
                    self.fold(head, om, head.early, FiringType.EARLY)
            head.start, head.last = min(head.start, t), max(head.last, t)
            self.fold(head, m, head.early, FiringType.EARLY)
            return
        kept = sorted((p for p in self.panes if p.closed and overlaps(p)), key=lambda p: p.start)
        if kept:
            self.fold(kept[0], m, kept[0].late, FiringType.LATE)
        elif self.keeps and t + gap + w.allowed_lateness_ms > self.wm:
            p = self.new_pane(key, t, t)
            self.close(p)
            self.fold(p, m, p.late, FiringType.LATE)
        else:
            self.out.late.append((m, a.stream))

    def close(self, p: _Pane) -> None:
        p.closed = True
        p.early = None
        if self.keeps:
            p.late = _Trig(self.w.late) if self.w.late is not None else None
        else:
            self.panes.remove(p)

    def advance(self, wm: float) -> None:
        wm -= self.w.max_out_of_orderness_ms
        if wm <= self.wm:
            return
        self.wm = wm
        for p in sorted(self.panes, key=lambda p: (self.end(p), p.start, repr(p.key))):
            if not p.closed and self.end(p) <= wm:
                self.fire(p, FiringType.DEFAULT)
                if self.w.mode is AccumulationMode.ACCUMULATING and not self.keeps:
                    p.msgs = []
                self.close(p)
            if p.closed and p in self.panes and self.end(p) + self.w.allowed_lateness_ms <= wm:
                self.panes.remove(p)

    def end_of_stream(self) -> None:
        for p in sorted(self.panes, key=lambda p: (p.start, repr(p.key))):
            if not p.closed:
                self.fire(p, FiringType.DEFAULT)
        self.panes = []


def run_window(window: Window[Any, Any], steps: Iterable[Arrive | Advance], *,
               end_of_stream: bool = True) -> WindowResult:
    """The panes and late messages of one instance of an event-time ``window`` that sees
    ``steps`` in order (then end-of-stream, unless ``end_of_stream=False``).

    Example:
        >>> from datetime import timedelta
        >>> from samza_dsl import KV, Windows
        >>> w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
        ...                            event_time=lambda kv: kv.value)
        >>> steps = [Arrive(KV("a", 1.0)), Arrive(KV("b", 2.0)), Arrive(KV("a", 12.0))]
        >>> [(p.key, p.pane_id, len(p.value)) for p in run_window(w, steps).panes]
        [('a', '0', 1), ('b', '0', 1), ('a', '10000', 1)]
    """
    model = _Model(window)
    for step in steps:
        if isinstance(step, Arrive):
            model.arrive(step)
        elif isinstance(step, Advance):
            model.advance(step.watermark_ms)
        else:
            raise TypeError(f"a step is an Arrive or an Advance, got {step!r}")
    if end_of_stream:
        model.end_of_stream()
    return model.out


Handout = tuple[Sequence[Any], float | None]


def interleave(channels: Mapping[Hashable, Sequence[Handout]],
               order: Sequence[Hashable] | None = None, *,
               stream: str | Callable[[Hashable], str] = "-") -> list[Arrive | Advance]:
    """The steps one window instance sees from its channels (rule 8: its watermark is the
    minimum over the channels feeding it).

    Each channel is a list, per message it handed out in order, of ``(the messages it caused
    that reach the window, the channel's progress in ms after it or None for none yet)``.
    ``order`` lists channel names, one per handout (default: round robin). After each handout
    the watermark is the minimum progress over the channels that have not ended; a channel ends
    after its last handout, and one with none has ended from the start. ``stream`` labels where
    a channel's messages came into the task (late messages are counted by it).

    A ``merge`` of several inputs just interleaves them: its channels are the partitions of
    every merged input that feed the window's task, and the watermark is the minimum over all of
    them. Here ``y@1500`` from ``b`` is late: by then input ``a`` has ended and ``b`` is at 3 s.

    >>> from datetime import timedelta
    >>> from samza_dsl import KV, Windows
    >>> w = Windows.tumbling(timedelta(seconds=1), event_time=lambda kv: kv.value / 1000)
    >>> steps = interleave({("a", 0): [([KV("x", 2000)], 2000), ([KV("x", 2500)], 2500)],
    ...                     ("b", 0): [([KV("y", 3000)], 3000), ([KV("y", 1500)], 3000)]},
    ...                    stream=lambda channel: channel[0])
    >>> run_window(w, steps).late_counts
    {'b': 1}
    """
    names = list(channels)
    if order is None:
        order = []
        depth = max((len(c) for c in channels.values()), default=0)
        for i in range(depth):
            order.extend(n for n in names if i < len(channels[n]))
    pos = {n: 0 for n in names}
    progress: dict[Hashable, float] = {n: NEG_INF for n in names}
    steps: list[Arrive | Advance] = []
    for name in order:
        outputs, prog = channels[name][pos[name]]
        pos[name] += 1
        label = stream(name) if callable(stream) else stream
        steps.extend(Arrive(m, label) for m in outputs)
        if prog is not None:
            progress[name] = max(progress[name], prog)
        live = [progress[n] for n in names if pos[n] < len(channels[n])]
        steps.append(Advance(min(live) if live else math.inf))
    return steps


# --- joins --------------------------------------------------------------------------------------

def stream_join(arrivals: Iterable[tuple[str, Any, float]], *, key: Callable[[Any], Any],
                other_key: Callable[[Any], Any], combine: Callable[[Any, Any], Any],
                ttl_ms: float) -> list[Any]:
    """Rule 9 for one join instance: ``arrivals`` are ``("left" | "right", message, time ms)`` in
    the order they reach it (the time is whatever clock the join's ttl runs on). Each side keeps
    its latest message per key with its time; a message is stored first, then the other side's
    entry for its key is looked up, and ``combine(left, right)`` is emitted if that entry is
    younger than ``ttl_ms`` (strictly); a ``None`` result is dropped, as everywhere. A ``None``
    key is an error.

    Example:
        >>> arrivals = [("left", {"u": 1, "page": "home"}, 0), ("right", {"u": 1, "c": "NL"}, 500),
        ...             ("right", {"u": 2, "c": "DE"}, 600), ("left", {"u": 2, "page": "x"}, 20_000)]
        >>> stream_join(arrivals, key=lambda m: m["u"], other_key=lambda m: m["u"],
        ...             combine=lambda view, login: (view["page"], login["c"]), ttl_ms=10_000)
        [('home', 'NL')]
    """
    stores: dict[str, dict[Any, tuple[Any, float]]] = {"left": {}, "right": {}}
    out: list[Any] = []
    for side, m, t in arrivals:
        if side not in stores:
            raise ValueError(f"a join arrival is on 'left' or 'right', got {side!r}")
        k = key(m) if side == "left" else other_key(m)
        if k is None:
            raise ValueError(f"the {side} key of {m!r} is None: a stream-stream join needs a key")
        stores[side][k] = (m, t)
        other = stores["right" if side == "left" else "left"].get(k)
        if other is not None and t - other[1] < ttl_ms:
            r = combine(m, other[0]) if side == "left" else combine(other[0], m)
            if r is not None:
                out.append(r)
    return out


@dataclass
class JoinResult:
    """What ``interval_join`` gives: the outputs in the order they were emitted, and the late
    messages as ``(side, message)`` in arrival order.

    Example:
        >>> r = JoinResult(outputs=[("a", "x")], late=[("left", "b"), ("right", "y")])
        >>> r.outputs, r.late_counts
        ([('a', 'x')], {'left': 1, 'right': 1})
    """

    outputs: list[Any] = field(default_factory=list)
    late: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def late_counts(self) -> dict[str, int]:
        """Late messages per side."""
        out: dict[str, int] = {}
        for side, _ in self.late:
            out[side] = out.get(side, 0) + 1
        return out


@dataclass
class _Kept:
    t: int
    seq: int  # arrival order
    message: Any
    matched: bool = False


def interval_join(steps: Iterable[tuple[str, Any, float] | Advance], *,
                  key: Callable[[Any], Any], other_key: Callable[[Any], Any],
                  combine: Callable[[Any, Any], Any], within_ms: float, how: str = "inner",
                  end_of_stream: bool = True) -> JoinResult:
    """The event-time join (``join(..., within=)``) of one join instance. ``steps`` are
    ``("left" | "right", message, event time ms)`` in the order messages reach it, and
    ``Advance(ms)``, the join's watermark moving (a lower value is ignored). The rule:

    - a message whose event time is below the watermark is late: kept in ``late``, never joined;
    - otherwise it is joined with every message kept on the other side with the same key whose
      event time is at most ``within_ms`` away, in either direction (``|t_l - t_r| <= within``),
      earliest kept first, ``combine(left, right)`` each; then it is kept. So each pair is emitted
      once, when its second message arrives;
    - a side keeps a message until the watermark passes its time + ``within_ms`` (goes beyond
      it); then, with ``how="left"`` (left messages) or ``"outer"`` (either side), a message
      that met nothing emits ``combine(left, None)`` or ``combine(None, right)``, in order of
      event time, left before right, then arrival;
    - at end of stream every message still kept that met nothing does the same;
    - a ``None`` from ``combine`` is dropped; a ``None`` key is an error.

    Example: within 60 s, a request at 0 s meets acceptances at 30 s and 60 s but not at 61 s
    (which arrives after the watermark passed 60 s, so the request is gone; with
    ``how="left"`` it has met something, so nothing more is emitted for it).

        >>> steps = [("left", ("r1", 0), 0), ("right", ("r1", 30), 30_000),
        ...          ("right", ("r1", 60), 60_000), Advance(60_500), ("right", ("r1", 61), 61_000),
        ...          ("left", ("r2", 70), 70_000), ("right", ("r1", 1), 1_000)]
        >>> result = interval_join(steps, key=lambda m: m[0], other_key=lambda m: m[0],
        ...                        combine=lambda l, r: (l and l[1], r and r[1]),
        ...                        within_ms=60_000, how="left")
        >>> result.outputs
        [(0, 30), (0, 60), (70, None)]
        >>> result.late
        [('right', ('r1', 1))]
    """
    if how not in ("inner", "left", "outer"):
        raise ValueError(f"how is 'inner', 'left' or 'outer', got {how!r}")
    kept: dict[str, dict[Any, list[_Kept]]] = {"left": {}, "right": {}}
    outer = {"left": how in ("left", "outer"), "right": how == "outer"}
    result = JoinResult()
    wm: float = NEG_INF

    def emit(left: Any, right: Any) -> None:
        r = combine(left, right)
        if r is not None:
            result.outputs.append(r)

    def unmatched(gone: list[tuple[str, _Kept]]) -> None:
        for side, e in sorted(gone, key=lambda g: (g[1].t, g[0] != "left", g[1].seq)):
            if not outer[side] or e.matched:
                continue
            if side == "left":
                emit(e.message, None)
            else:
                emit(None, e.message)

    for seq, step in enumerate(steps):
        if isinstance(step, Advance):
            if step.watermark_ms <= wm:
                continue
            wm = step.watermark_ms
            gone: list[tuple[str, _Kept]] = []
            for side, by_key in kept.items():
                for k in list(by_key):
                    gone.extend((side, e) for e in by_key[k] if e.t + within_ms < wm)
                    by_key[k] = [e for e in by_key[k] if e.t + within_ms >= wm]
                    if not by_key[k]:
                        del by_key[k]
            unmatched(gone)
            continue
        side, m, t = step
        if side not in kept:
            raise ValueError(f"a join arrival is on 'left' or 'right', got {side!r}")
        k = key(m) if side == "left" else other_key(m)
        if k is None:
            raise ValueError(f"the {side} key of {m!r} is None: a stream-stream join needs a key")
        if t < wm:
            result.late.append((side, m))
            continue
        mine = _Kept(round(t), seq, m)
        for o in kept["right" if side == "left" else "left"].get(k, []):
            if abs(o.t - mine.t) <= within_ms:
                o.matched = mine.matched = True
                if side == "left":
                    emit(m, o.message)
                else:
                    emit(o.message, m)
        kept[side].setdefault(k, []).append(mine)
    if end_of_stream:
        unmatched([(side, e) for side, by_key in kept.items() for es in by_key.values()
                   for e in es])
    return result


def table_join(arrivals: Iterable[tuple[str, Any]], *, combine: Callable[[Any, Any], Any],
               key: Callable[[Any], Any] | None = None, ttl_ms: int | None = None,
               event_time: Callable[[Any], float] | None = None) -> list[Any]:
    """Rule 10 for one task: ``arrivals`` are ``("put", KV(k, v))`` (a ``None`` value deletes,
    as ``send_to(table)``; a ``None`` key fails, as it does there) and ``("message", m)`` in
    order. A message is looked up by
    ``key(m)`` (default its ``KV.key``); a ``None`` key or a miss gives ``combine(m, None)``,
    a hit ``combine(m, KV(k, v))``; a ``None`` result is dropped.

    A table with ``ttl_ms`` and ``event_time`` (``app.table(ttl=, ttl_event_time=)``): a put's
    write time is ``event_time(v)`` (seconds, to ms), the table's clock the largest write time
    put so far, and an entry with ``write time + ttl_ms <= clock`` is a miss (processing time
    depends on the wall clock, which no model holds).

    Example:
        >>> arrivals = [("message", KV("u1", "home")), ("put", KV("u1", "NL")),
        ...             ("message", KV("u1", "cart")), ("put", KV("u1", None)),
        ...             ("message", KV("u1", "exit"))]
        >>> table_join(arrivals, combine=lambda m, r: (m.value, r.value if r else None))
        [('home', None), ('cart', 'NL'), ('exit', None)]
        >>> puts = [("put", KV("a", 0)), ("put", KV("b", 5)), ("message", KV("a", "x")),
        ...         ("put", KV("c", 10)), ("message", KV("a", "y")), ("message", KV("b", "z"))]
        >>> table_join(puts, combine=lambda m, r: (m.value, r and r.value), ttl_ms=10_000,
        ...            event_time=lambda v: v)
        [('x', 0), ('y', None), ('z', 5)]
    """
    if (ttl_ms is None) != (event_time is None):
        raise ValueError("table_join: ttl_ms and event_time go together")
    table: dict[Any, Any] = {}
    written: dict[Any, int] = {}
    clock = -(1 << 62)
    out: list[Any] = []
    for what, m in arrivals:
        if what == "put":
            if m.key is None:
                raise ValueError(f"the key of {m!r} is None: a table holds no None key")
            if m.value is None:
                table.pop(m.key, None)
            else:
                table[m.key] = m.value
                if event_time is not None:
                    written[m.key] = t = int(round(event_time(m.value) * 1000))
                    clock = max(clock, t)
            continue
        k = key(m) if key is not None else (m.key if isinstance(m, KV) else None)
        live = k is not None and k in table and (ttl_ms is None or written[k] + ttl_ms > clock)
        record = KV(k, table[k]) if live else None
        r = combine(m, record)
        if r is not None:
            out.append(r)
    return out
