"""Trigger instances: the per-pane state of an early or late trigger (Samza's ``*TriggerImpl``).

A window creates one instance per pane and trigger kind on the pane's first message for it, and
asks it two questions: ``on_message(now_ms)`` after each message (count triggers fire here) and
``on_time(now_ms)`` at window ticks (time triggers fire here, never on a message, as in Samza).
Both return True when the trigger fires. ``deadline()`` is the earliest tick at which a time
trigger inside could fire (None when nothing is pending), so the window knows when to look.
Times are processing time in ms (``ctx.clock()``), also for event-time windows.

- ``count(n)`` fires on its n-th message.
- ``time_since_first_message(d)`` fires at the first tick at or after first message + d.
- ``time_since_last_message(d)`` fires at the first tick at or after last message + d.
- ``any(...)`` fires when its first child fires and then drops (cancels) the others.
- ``repeat(t)``: the window calls ``restart()`` after each firing, which starts a fresh ``t``.

A trigger that is not a top-level ``repeat`` fires once: the window then retires it, so a
non-repeating early trigger fires once per pane (a ``repeat`` nested in ``any`` restarts only
with its parent, as in Samza).

>>> from samza_dsl.windows import Triggers
>>> from datetime import timedelta
>>> t = make_trigger(Triggers.any(Triggers.count(3), Triggers.time_since_first_message(timedelta(seconds=5))))
>>> t.on_message(1000), t.deadline()
(False, 6000)
>>> t.on_time(5999), t.on_time(6000)
(False, True)
"""

from __future__ import annotations

from typing import Any, cast

from samza_dsl.windows import (
    AnyTrigger,
    CountTrigger,
    RepeatTrigger,
    TimeSinceFirstMessageTrigger,
    TimeSinceLastMessageTrigger,
    Trigger,
)

__all__ = ["TriggerImpl", "CountTriggerImpl", "TimeSinceFirstMessageTriggerImpl",
           "TimeSinceLastMessageTriggerImpl", "AnyTriggerImpl", "RepeatTriggerImpl",
           "make_trigger"]


class TriggerImpl:
    """Base of trigger instances. ``scheduled`` is the window's bookkeeping: the tick time it has
    queued for this instance, if any."""

    __slots__ = ("fired", "scheduled")
    repeating = False

    def __init__(self) -> None:
        self.fired = False
        self.scheduled: int | None = None

    def on_message(self, now_ms: int) -> bool:
        return self.fired

    def on_time(self, now_ms: int) -> bool:
        return self.fired

    def deadline(self) -> int | None:
        return None

    def progress(self) -> list[Any]:
        """What the trigger has seen, as plain values for the window's store (``resume``)."""
        return [self.fired]

    def resume(self, state: list[Any]) -> None:
        """Go on from ``progress()`` of an instance of the same spec."""
        self.fired = bool(state[0])


class CountTriggerImpl(TriggerImpl):
    __slots__ = ("count", "seen")

    def __init__(self, spec: CountTrigger) -> None:
        super().__init__()
        self.count = spec.count
        self.seen = 0

    def on_message(self, now_ms: int) -> bool:
        self.seen += 1
        if self.seen >= self.count:
            self.fired = True
        return self.fired

    def progress(self) -> list[Any]:
        return [self.fired, self.seen]

    def resume(self, state: list[Any]) -> None:
        self.fired, self.seen = bool(state[0]), int(state[1])


class _TimeTriggerImpl(TriggerImpl):
    """Fires once the clock reaches ``at``, which subclasses set from message times."""

    __slots__ = ("duration_ms", "at")

    def __init__(self, spec: TimeSinceFirstMessageTrigger | TimeSinceLastMessageTrigger) -> None:
        super().__init__()
        self.duration_ms = spec.duration_ms
        self.at: int | None = None

    def on_time(self, now_ms: int) -> bool:
        if not self.fired and self.at is not None and now_ms >= self.at:
            self.fired = True
        return self.fired

    def deadline(self) -> int | None:
        return None if self.fired else self.at

    def progress(self) -> list[Any]:
        return [self.fired, self.at]  # ``at``: the clock's ms, which every host shares

    def resume(self, state: list[Any]) -> None:
        self.fired, self.at = bool(state[0]), state[1]


class TimeSinceFirstMessageTriggerImpl(_TimeTriggerImpl):
    __slots__ = ()

    def on_message(self, now_ms: int) -> bool:
        if self.at is None:
            self.at = now_ms + self.duration_ms
        return self.fired


class TimeSinceLastMessageTriggerImpl(_TimeTriggerImpl):
    __slots__ = ()

    def on_message(self, now_ms: int) -> bool:
        if not self.fired:
            self.at = now_ms + self.duration_ms
        return self.fired


class AnyTriggerImpl(TriggerImpl):
    __slots__ = ("children",)

    def __init__(self, spec: AnyTrigger) -> None:
        super().__init__()
        self.children = [make_trigger(t) for t in spec.triggers]

    def _check(self, fired_child: bool) -> bool:
        if fired_child:
            self.fired = True
            self.children = []  # the first child to fire cancels the others
        return self.fired

    def on_message(self, now_ms: int) -> bool:
        for child in self.children:
            if child.on_message(now_ms):
                return self._check(True)
        return self.fired

    def on_time(self, now_ms: int) -> bool:
        for child in self.children:
            if child.on_time(now_ms):
                return self._check(True)
        return self.fired

    def deadline(self) -> int | None:
        times = [d for c in self.children if (d := c.deadline()) is not None]
        return min(times) if times else None

    def progress(self) -> list[Any]:
        return [self.fired, [c.progress() for c in self.children]]

    def resume(self, state: list[Any]) -> None:
        self.fired = bool(state[0])
        if self.fired:
            self.children = []
        else:
            for child, st in zip(self.children, state[1], strict=True):
                child.resume(st)


class RepeatTriggerImpl(TriggerImpl):
    __slots__ = ("spec", "current")
    repeating = True

    def __init__(self, spec: RepeatTrigger) -> None:
        super().__init__()
        self.spec = spec.trigger
        self.current = make_trigger(spec.trigger)

    def on_message(self, now_ms: int) -> bool:
        self.fired = self.current.on_message(now_ms)
        return self.fired

    def on_time(self, now_ms: int) -> bool:
        self.fired = self.current.on_time(now_ms)
        return self.fired

    def deadline(self) -> int | None:
        return self.current.deadline()

    def progress(self) -> list[Any]:
        return [self.fired, self.current.progress()]

    def resume(self, state: list[Any]) -> None:
        self.fired = bool(state[0])
        self.current.resume(state[1])

    def restart(self) -> None:
        """After a firing: start the repeated trigger afresh (its timers wait for a message)."""
        self.current = make_trigger(self.spec)
        self.fired = False


_IMPLS: dict[type, type] = {
    CountTrigger: CountTriggerImpl,
    TimeSinceFirstMessageTrigger: TimeSinceFirstMessageTriggerImpl,
    TimeSinceLastMessageTrigger: TimeSinceLastMessageTriggerImpl,
    AnyTrigger: AnyTriggerImpl,
    RepeatTrigger: RepeatTriggerImpl,
}


def make_trigger(spec: Trigger) -> TriggerImpl:
    """A fresh trigger instance for a trigger spec."""
    impl = _IMPLS.get(type(spec))
    if impl is None:
        for cls, candidate in _IMPLS.items():
            if isinstance(spec, cls):
                impl = candidate
                break
        else:
            raise TypeError(f"no trigger implementation for {type(spec).__name__}; use Triggers.count, "
                            f"time_since_first_message, time_since_last_message, any or repeat")
    return cast(TriggerImpl, impl(spec))
