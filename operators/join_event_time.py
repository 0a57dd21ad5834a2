"""Event-time stream-stream join, ``join(..., within=...)`` (docs/semantics.md rule 9, "Beyond
Samza"; as Kafka Streams' ``JoinWindows`` and Flink's interval join).

Each side's event time is the ``event_time`` declared on the input it reads from, applied to
the message as it reaches the join (``JoinSpec.sides``, ``samza_dsl.join_time``), in whole ms.
A left message ``l`` and a right message ``r`` of the same key with ``|t_l - t_r| <= within``
emit ``combine(l, r)`` once, when the second of the two is processed: a message is stored first,
then the other side's stored messages of its key are looked up, in event-time order (ties in
arrival order). A None result is dropped.

Each side keeps every message of a key until the join's watermark passes ``t + within``
(``on_watermark``; the runtime computes it as for event-time windows, or, without
``ctx.external_watermarks`` or where the runtime names it in ``ctx.own_watermarks``, the join
moves its own to the latest event time it saw less the largest ``max_out_of_orderness`` of its
inputs and what event-time joins before it add, ``SideTime.lag_ms``, before it joins the
message that moved it). A message whose event time is below the
watermark is late: not stored or joined, but counted, logged and, with ``late_to``, passed on
as a ``LateMessage`` (``operators.late.LateTracker``; its ``pane_id`` is the side, "left" or
"right"). ``how="left"`` emits ``combine(l, None)`` for a left message that met no right one
when the watermark passes ``t_l + within`` (``"outer"``: ``combine(None, r)`` for right ones
too), in event-time order; at end of stream every remaining unmatched one emits so, in
event-time order, and the state is dropped. Window ticks (``on_timer``) purge nothing.

State: ``<op id>-L`` and ``<op id>-R`` hold ``key -> [[t_ms, seq, message, matched], ...]``
sorted by ``(t_ms, seq)`` (``seq``: arrival order), and ``<op id>-L`` the watermark under
``WATERMARK_KEY`` (with where the end of a bounded run moved it). They are kept in memory and
written, for the keys that changed, at each commit (``flush_state``), so a checkpoint's stores
hold exactly the state as of its offsets; ``init`` reads them back.

A None key fails the message with a ``TaskError``, as in the processing-time join; where the
runtime gives a placement check (``ctx.placement``) a side's key is checked as there.

>>> from samza_dsl.spec import JoinSpec, SideTime
>>> from operators.base import OperatorContext
>>> from operators.state import InMemoryState
>>> side = SideTime("in", lambda m: m[1])
>>> op = EventTimeJoinOperator(JoinSpec("j", "j", ("stream:a", "stream:b"), "",
...     key_fn=lambda m: m[0], other_key_fn=lambda m: m[0], combine=lambda l, r: (l, r),
...     within_ms=10_000, how="left", sides=(side, side)))
>>> op.init(OperatorContext("t0", {}, lambda: 0, {"j-L": InMemoryState(), "j-R": InMemoryState()},
...                         external_watermarks=True))
>>> op.process_port(0, ("k", 100.0)), op.process_port(1, ("k", 105.0))
([], [(('k', 100.0), ('k', 105.0))])
>>> op.process_port(1, ("k", 111.0)), op.process_port(0, ("x", 1.0))
([], [])
>>> op.on_watermark(200_000)
[(('x', 1.0), None)]
"""

from __future__ import annotations

import heapq
import numbers
from bisect import bisect_left, insort
from collections.abc import Callable
from typing import Any

from samza_dsl.errors import TaskError
from samza_dsl.kv import KV
from samza_dsl.spec import JoinSpec, SideTime

from .base import Operator, OperatorContext, UserContext, resolve_fn
from .join import placement_checked
from .late import LateTracker

__all__ = ["EventTimeJoinOperator", "WATERMARK_KEY"]

NO_WATERMARK = -(1 << 62)
#: where the join's watermark is stored, in ``<op id>-L``
WATERMARK_KEY = (None, "join-watermark")
_SIDES = ("left", "right")
T, SEQ, MSG, MATCHED = 0, 1, 2, 3


class EventTimeJoinOperator(Operator):
    """See the module docstring. Needs stores ``<op id>-L`` and ``<op id>-R``."""

    opcode = "join"

    def __init__(self, spec: JoinSpec) -> None:
        super().__init__(spec)
        self.within_ms = spec.within_ms
        self.how = spec.how
        self.late_to = spec.late_to
        self.user_fns = (spec.key_fn, spec.other_key_fn, spec.combine)
        self._key_fns = (resolve_fn(spec.key_fn), resolve_fn(spec.other_key_fn))
        self._combine = resolve_fn(spec.combine)
        self._sides: tuple[SideTime, ...] = spec.sides
        #: how far behind the latest event time seen the join's own watermark stays
        self.bound_ms = max((s.bound_ms + s.lag_ms for s in spec.sides), default=0)
        #: which sides emit their unmatched messages: left (left, outer), right (outer)
        self._unmatched = (spec.how in ("left", "outer"), spec.how == "outer")
        self.late_tracker = LateTracker(self.op_id, 0, 0, late_to=spec.late_to, kind="join")
        self.watermark = NO_WATERMARK
        self._state: tuple[dict[Any, list[list[Any]]], dict[Any, list[list[Any]]]] = ({}, {})
        self._dirty: tuple[set[Any], set[Any]] = (set(), set())
        #: (t + within, seq, side, key) per stored message: the order they expire in
        self._expiry: list[tuple[int, int, int, Any]] = []
        self._seq = 0
        self._latest = NO_WATERMARK
        self._stored_watermark = NO_WATERMARK
        self._ports: tuple[Callable[[Any], list[Any]], ...] = ()

    @property
    def late_dropped(self) -> int:
        """How many late messages this join counted (dropped, or sent to ``late_to``)."""
        return self.late_tracker.total

    def init(self, ctx: OperatorContext, user_ctx: UserContext | None = None) -> None:
        super().init(ctx, user_ctx)
        self.late_tracker.init(ctx)
        self._stores = (ctx.store(f"{self.op_id}-L"), ctx.store(f"{self.op_id}-R"))
        self._placement = ctx.placement
        self.local_watermark = not ctx.external_watermarks or self.op_id in ctx.own_watermarks
        stored = self._stores[0].get(WATERMARK_KEY)  # [watermark, where a run's end moved it]
        if stored is not None:
            self.watermark, self.late_tracker.ended_ms = int(stored[0]), int(stored[1])
        self._stored_watermark = self.watermark
        self._expiry.clear()
        seq = -1
        for port, store in enumerate(self._stores):
            state = self._state[port]
            state.clear()
            self._dirty[port].clear()
            for key, entries in store.all():
                if port == 0 and type(key) is tuple and key == WATERMARK_KEY:
                    continue
                kept = [list(e) for e in entries]
                state[key] = kept
                for e in kept:
                    self._expiry.append((e[T] + self.within_ms, e[SEQ], port, key))
                    seq = max(seq, e[SEQ])
        heapq.heapify(self._expiry)
        self._seq = seq + 1
        self._ports = (self._port(0), self._port(1))

    def _time_fn(self, port: int) -> tuple[Callable[[Any], Any], Callable[[Any], int]]:
        """The side's ``event_time`` as declared, with the ``KV`` values it reads taken off;
        and the message's time in ms the slow way, or its ``TaskError``."""
        side = self._sides[port]
        fn, unwrap = resolve_fn(side.event_time), side.unwrap
        op_id, name, input_id = self.op_id, _SIDES[port], side.input_id

        def unwrapped(message: Any) -> Any:
            m = message
            for _ in range(unwrap):
                m = m.value if type(m) is KV else m
            return fn(m)

        def event_ms(message: Any) -> int:
            try:
                t = unwrapped(message)
                if isinstance(t, bool) or not isinstance(t, numbers.Real):
                    raise TypeError(f"event_time returned {t!r} ({type(t).__name__}), not a "
                                    f"number of seconds")
                return round(float(t) * 1000.0)
            except Exception as exc:
                raise TaskError(
                    f"join {op_id!r}: the event_time declared on input {input_id!r} failed on "
                    f"the {name} message {message!r} as it reaches the join ({type(exc).__name__}: "
                    f"{exc}); the steps between the input and the join must keep what "
                    f"event_time reads", op_id=op_id) from exc
        return (fn if unwrap == 0 else unwrapped), event_ms

    def _port(self, port: int) -> Callable[[Any], list[Any]]:
        key_fn = self._key_fns[port]
        seconds, event_ms = self._time_fn(port)
        own, other = self._state[port], self._state[1 - port]
        dirty, other_dirty = self._dirty[port], self._dirty[1 - port]
        expiry, within, combine = self._expiry, self.within_ms, self._combine
        op_id, side = self.op_id, _SIDES[port]
        tracker = self.late_tracker

        def arrive(message: Any) -> list[Any]:
            key = key_fn(message)
            if key is None:
                raise TaskError(f"join {op_id!r}: the {side} key of {message!r} is None; a "
                                f"join needs a key on both sides (as in Samza): filter out "
                                f"or map such messages before the join", op_id=op_id)
            try:
                t = round(seconds(message) * 1000.0)
            except Exception:  # not a number of seconds, or no number at all
                t = event_ms(message)
            if t < self.watermark:
                return tracker.late(message, key, side, t, self.watermark)
            out: list[Any] = []
            if self.local_watermark and t - self.bound_ms > self._latest:
                # the watermark this message moves goes first: what it expires (unmatched
                # messages it lets go) is older than what the message itself joins, so what
                # reads the join's outputs sees them nearer event-time order; an expired entry
                # could not meet the message anyway (more than ``within`` before it)
                self._latest = t - self.bound_ms
                out = self.on_watermark(self._latest)
            seq = self._seq
            self._seq = seq + 1
            entry = [t, seq, message, 0]
            entries = own.get(key)
            if entries is None:
                own[key] = [entry]
            else:
                insort(entries, entry, key=_order)
            dirty.add(key)
            heapq.heappush(expiry, (t + within, seq, port, key))
            others = other.get(key)
            if others:
                # the first that may be within reach: found by halving where the key holds many
                start = 0 if len(others) < 16 else bisect_left(others, t - within, key=_time)
                for i in range(start, len(others)):
                    e = others[i]
                    dt = e[T] - t
                    if dt < -within:
                        continue
                    if dt > within:
                        break
                    result = combine(message, e[MSG]) if port == 0 else combine(e[MSG], message)
                    if not e[MATCHED]:
                        e[MATCHED] = 1
                        other_dirty.add(key)
                    entry[MATCHED] = 1
                    if result is not None:
                        out.append(result)
            return out
        check = self._placement(op_id, port) if self._placement is not None else None
        return arrive if check is None else placement_checked(arrive, key_fn, check)

    def process(self, message: Any) -> list[Any]:
        return self.process_port(0, message)

    def process_port(self, port: int, message: Any) -> list[Any]:
        return self._ports[port](message)

    def on_watermark(self, watermark_ms: int) -> list[Any]:
        """The watermark moved to ``watermark_ms``: the messages it passed (``t + within <
        watermark``) leave, the unmatched ones of an emitting side as ``combine(l, None)``
        (``combine(None, r)``)."""
        if watermark_ms <= self.watermark:
            return []
        self.watermark = watermark_ms
        expiry = self._expiry
        if not expiry or expiry[0][0] >= watermark_ms:
            return []
        out: list[Any] = []
        state, combine, emits = self._state, self._combine, self._unmatched
        # a key's messages leave in the order its list holds them: the first ``n`` of each
        # list, taken off at once at the end
        gone: dict[tuple[int, Any], int] = {}
        while expiry and expiry[0][0] < watermark_ms:
            _, seq, port, key = heapq.heappop(expiry)
            entries = state[port].get(key)
            j = gone.get((port, key), 0)
            if not entries or j >= len(entries) or entries[j][SEQ] != seq:
                continue  # gone already
            gone[port, key] = j + 1
            e = entries[j]
            if not e[MATCHED] and emits[port]:
                result = combine(e[MSG], None) if port == 0 else combine(None, e[MSG])
                if result is not None:
                    out.append(result)
        for (port, key), n in gone.items():
            entries = state[port][key]
            if n == len(entries):
                del state[port][key]
            else:
                del entries[:n]
            self._dirty[port].add(key)
        return out

    def on_end_of_stream(self) -> list[Any]:
        """Every unmatched message of an emitting side, in event-time order; then the state
        is dropped, and the watermark moves past every message it held (as a window's to the
        end of the panes it closed): a later run's message that could have met one of them
        is late (counted also in ``<op id>.late-after-end``)."""
        end = self.watermark
        unmatched: list[tuple[int, int, int, Any]] = []
        for port, state in enumerate(self._state):
            emits = self._unmatched[port]
            for entries in state.values():
                end = max(end, entries[-1][T] + self.within_ms + 1)
                if emits:
                    unmatched.extend((e[T], e[SEQ], port, e[MSG]) for e in entries
                                     if not e[MATCHED])
            self._dirty[port].update(state)
            state.clear()
        self._expiry.clear()
        self.watermark = self._latest = self.late_tracker.ended_ms = end
        unmatched.sort(key=_first_two)
        combine = self._combine
        return [r for _, _, port, m in unmatched
                if (r := combine(m, None) if port == 0 else combine(None, m)) is not None]

    def flush_state(self) -> None:
        for port, store in enumerate(self._stores):
            dirty, state = self._dirty[port], self._state[port]
            for key in dirty:
                entries = state.get(key)
                if entries is None:
                    store.delete(key)
                else:
                    store.put(key, entries)
            dirty.clear()
        if self.watermark != self._stored_watermark:
            self._stores[0].put(WATERMARK_KEY, [self.watermark, self.late_tracker.ended_ms])
            self._stored_watermark = self.watermark

    def state_size(self) -> tuple[int, int]:
        """How many messages each side holds (left, right)."""
        return (sum(map(len, self._state[0].values())), sum(map(len, self._state[1].values())))


def _order(entry: list[Any]) -> tuple[int, int]:
    return entry[T], entry[SEQ]


def _time(entry: list[Any]) -> int:
    return int(entry[T])


def _first_two(item: tuple[int, int, int, Any]) -> tuple[int, int]:
    return item[0], item[1]
