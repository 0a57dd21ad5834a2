"""Window and trigger specs: immutable descriptions that the operators in ``operators/`` execute.

>>> from datetime import timedelta
>>> w = Windows.keyed_tumbling(lambda m: m["user"], timedelta(seconds=10))
>>> w = w.early_trigger(Triggers.repeat(Triggers.count(2)))
>>> w.kind, w.size_ms, type(w.early).__name__
('keyed_tumbling', 10000, 'RepeatTrigger')
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Generic, TypeVar

import msgspec

M = TypeVar("M")
WV = TypeVar("WV")

__all__ = ["Windows", "Window", "Triggers", "Trigger", "CountTrigger", "TimeSinceFirstMessageTrigger",
           "TimeSinceLastMessageTrigger", "AnyTrigger", "RepeatTrigger", "AccumulationMode",
           "FiringType", "WindowKey", "WindowPane", "to_ms"]


class AccumulationMode(enum.Enum):
    """ACCUMULATING keeps a pane's state across firings; DISCARDING clears it after each firing."""

    ACCUMULATING = "accumulating"
    DISCARDING = "discarding"


class FiringType(enum.Enum):
    """Why a pane was emitted."""

    EARLY = "early"
    DEFAULT = "default"
    LATE = "late"


class WindowKey(msgspec.Struct, frozen=True, gc=False):
    """A pane's key: the window key (None for global windows) and the pane id (window start in ms,
    as a string, as in Samza)."""

    key: Any
    pane_id: str


class WindowPane(msgspec.Struct, frozen=True, gc=False):
    """A result of a window: its key, its value (the fold result, or the list of messages), why it
    fired and the accumulation mode."""

    key: WindowKey
    message: Any
    firing: FiringType
    mode: AccumulationMode


def to_ms(value: timedelta | float | int, what: str) -> int:
    """A duration in whole milliseconds (a number is taken as seconds); must be positive."""
    if isinstance(value, timedelta):
        ms = value.total_seconds() * 1000.0
    elif isinstance(value, int | float) and not isinstance(value, bool):
        ms = float(value) * 1000.0
    else:
        raise TypeError(f"{what} must be a datetime.timedelta, got {type(value).__name__} {value!r}")
    if not 0 < ms < math.inf:  # also rejects NaN
        raise ValueError(f"{what} must be positive and finite, got {value!r}")
    whole = round(ms)
    if whole < 1:
        raise ValueError(f"{what} must be at least 1 millisecond, got {value!r}")
    return int(whole)


# --- Triggers -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trigger:
    """Base of trigger specs."""

    def durations_ms(self) -> list[int]:
        """The time durations this trigger waits on (they set ``task.window.ms``)."""
        return []

    def describe(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class CountTrigger(Trigger):
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < 1:
            raise ValueError(f"Triggers.count(n) needs an int n >= 1, got {self.count!r}")

    def describe(self) -> str:
        return f"count({self.count})"


@dataclass(frozen=True)
class TimeSinceFirstMessageTrigger(Trigger):
    duration_ms: int

    def durations_ms(self) -> list[int]:
        return [self.duration_ms]

    def describe(self) -> str:
        return f"time_since_first_message({self.duration_ms}ms)"


@dataclass(frozen=True)
class TimeSinceLastMessageTrigger(Trigger):
    duration_ms: int

    def durations_ms(self) -> list[int]:
        return [self.duration_ms]

    def describe(self) -> str:
        return f"time_since_last_message({self.duration_ms}ms)"


@dataclass(frozen=True)
class AnyTrigger(Trigger):
    triggers: tuple[Trigger, ...]

    def __post_init__(self) -> None:
        if not self.triggers:
            raise ValueError("Triggers.any() needs at least one trigger")
        for t in self.triggers:
            if not isinstance(t, Trigger):
                raise TypeError(f"Triggers.any() takes triggers, got {type(t).__name__}")

    def durations_ms(self) -> list[int]:
        return [d for t in self.triggers for d in t.durations_ms()]

    def describe(self) -> str:
        return "any(" + ", ".join(t.describe() for t in self.triggers) + ")"


@dataclass(frozen=True)
class RepeatTrigger(Trigger):
    trigger: Trigger

    def __post_init__(self) -> None:
        if not isinstance(self.trigger, Trigger):
            raise TypeError(f"Triggers.repeat() takes a trigger, got {type(self.trigger).__name__}")
        if isinstance(self.trigger, RepeatTrigger):
            raise ValueError("Triggers.repeat(Triggers.repeat(...)) is redundant: repeat once")

    def durations_ms(self) -> list[int]:
        return self.trigger.durations_ms()

    def describe(self) -> str:
        return f"repeat({self.trigger.describe()})"


class Triggers:
    """Factories for trigger specs, as Samza's ``Triggers``."""

    @staticmethod
    def count(n: int) -> CountTrigger:
        return CountTrigger(n)

    @staticmethod
    def time_since_first_message(duration: timedelta) -> TimeSinceFirstMessageTrigger:
        return TimeSinceFirstMessageTrigger(to_ms(duration, "Triggers.time_since_first_message duration"))

    @staticmethod
    def time_since_last_message(duration: timedelta) -> TimeSinceLastMessageTrigger:
        return TimeSinceLastMessageTrigger(to_ms(duration, "Triggers.time_since_last_message duration"))

    @staticmethod
    def any(*triggers: Trigger) -> AnyTrigger:
        return AnyTrigger(tuple(triggers))

    @staticmethod
    def repeat(trigger: Trigger) -> RepeatTrigger:
        return RepeatTrigger(trigger)


# --- Windows ------------------------------------------------------------------------------------

WINDOW_KINDS = ("tumbling", "keyed_tumbling", "keyed_session")


@dataclass(frozen=True)
class Window(Generic[M, WV]):
    """An immutable window spec. Each builder method returns a new Window."""

    kind: str
    size_ms: int  # the tumbling size, or the session gap
    key_fn: Callable[[M], Any] | None = None
    init: Callable[[], WV] | None = None
    fold: Callable[[M, WV], WV] | None = None
    event_time: Callable[[M], float] | None = None
    early: Trigger | None = None
    late: Trigger | None = None
    mode: AccumulationMode = AccumulationMode.ACCUMULATING
    allowed_lateness_ms: int = 0
    _checked: bool = field(default=True, repr=False, compare=False)
    #: event time only: how far behind the largest event time seen a message may come without
    #: being late; the window's watermark is the task's watermark less this
    max_out_of_orderness_ms: int = 0

    def __post_init__(self) -> None:
        if self.kind not in WINDOW_KINDS:
            raise ValueError(f"unknown window kind {self.kind!r}; one of {WINDOW_KINDS}")
        if (self.init is None) != (self.fold is None):
            raise ValueError("a window needs both init and fold, or neither (then a pane's value "
                             "is the list of its messages)")
        for what, fn in (("init", self.init), ("fold", self.fold), ("event_time", self.event_time)):
            if fn is not None and not callable(fn):
                raise TypeError(f"window {what} must be callable, got {type(fn).__name__}")
        if self.max_out_of_orderness_ms and self.event_time is None:
            raise ValueError("max_out_of_orderness applies to event-time windows only: give the "
                             "window event_time=fn(message) -> seconds")
        if self.kind != "tumbling" and not callable(self.key_fn):
            raise TypeError(f"Windows.{self.kind} needs a callable key_fn, got {self.key_fn!r}")

    @property
    def keyed(self) -> bool:
        return self.kind != "tumbling"

    @property
    def is_session(self) -> bool:
        return self.kind == "keyed_session"

    def early_trigger(self, trigger: Trigger) -> Window[M, WV]:
        if not isinstance(trigger, Trigger):
            raise TypeError(f"early_trigger takes a Trigger, got {type(trigger).__name__}")
        return replace(self, early=trigger)

    def late_trigger(self, trigger: Trigger) -> Window[M, WV]:
        if not isinstance(trigger, Trigger):
            raise TypeError(f"late_trigger takes a Trigger, got {type(trigger).__name__}")
        return replace(self, late=trigger)

    def accumulation(self, mode: AccumulationMode) -> Window[M, WV]:
        if not isinstance(mode, AccumulationMode):
            raise TypeError(f"accumulation takes an AccumulationMode, got {mode!r}")
        return replace(self, mode=mode)

    def allowed_lateness(self, lateness: timedelta) -> Window[M, WV]:
        if self.event_time is None:
            raise ValueError("allowed_lateness applies to event-time windows only: give the window "
                             "event_time=fn(message) -> seconds")
        if isinstance(lateness, timedelta) and lateness.total_seconds() == 0:
            return replace(self, allowed_lateness_ms=0)
        return replace(self, allowed_lateness_ms=to_ms(lateness, "allowed_lateness"))

    def durations_ms(self) -> list[int]:
        """Trigger durations that set ``task.window.ms``: the window size (processing time only,
        where the pane closes on a timer) and every time trigger."""
        out: list[int] = []
        if self.event_time is None:
            out.append(self.size_ms)
        for trig in (self.early, self.late):
            if trig is not None:
                out.extend(trig.durations_ms())
        return out

    def describe(self) -> dict[str, Any]:
        what = "gap_ms" if self.is_session else "size_ms"
        out: dict[str, Any] = {"kind": self.kind, what: self.size_ms,
                               "time": "event" if self.event_time else "processing",
                               "mode": self.mode.value}
        if self.early is not None:
            out["early_trigger"] = self.early.describe()
        if self.late is not None:
            out["late_trigger"] = self.late.describe()
        if self.allowed_lateness_ms:
            out["allowed_lateness_ms"] = self.allowed_lateness_ms
        if self.max_out_of_orderness_ms:
            out["max_out_of_orderness_ms"] = self.max_out_of_orderness_ms
        return out


def _bounded(window: Window[Any, Any], bound: timedelta | None) -> Window[Any, Any]:
    """``window`` with its declared out-of-orderness (event time only)."""
    if bound is None or (isinstance(bound, timedelta) and not bound):
        return window
    if window.event_time is None:
        raise ValueError("max_out_of_orderness applies to event-time windows only: give the "
                         "window event_time=fn(message) -> seconds")
    return replace(window, max_out_of_orderness_ms=to_ms(bound, "max_out_of_orderness"))


class Windows:
    """Factories for window specs, as Samza's ``Windows``."""

    @staticmethod
    def tumbling(size: timedelta, *, init: Callable[[], Any] | None = None,
                 fold: Callable[[Any, Any], Any] | None = None,
                 event_time: Callable[[Any], float] | None = None,
                 max_out_of_orderness: timedelta | None = None) -> Window[Any, Any]:
        return _bounded(Window("tumbling", to_ms(size, "Windows.tumbling size"), None, init, fold,
                               event_time), max_out_of_orderness)

    @staticmethod
    def keyed_tumbling(key_fn: Callable[[Any], Any], size: timedelta, *,
                       init: Callable[[], Any] | None = None,
                       fold: Callable[[Any, Any], Any] | None = None,
                       event_time: Callable[[Any], float] | None = None,
                       max_out_of_orderness: timedelta | None = None) -> Window[Any, Any]:
        return _bounded(Window("keyed_tumbling", to_ms(size, "Windows.keyed_tumbling size"), key_fn,
                               init, fold, event_time), max_out_of_orderness)

    @staticmethod
    def keyed_session(key_fn: Callable[[Any], Any], gap: timedelta, *,
                      init: Callable[[], Any] | None = None,
                      fold: Callable[[Any, Any], Any] | None = None,
                      event_time: Callable[[Any], float] | None = None,
                      max_out_of_orderness: timedelta | None = None) -> Window[Any, Any]:
        return _bounded(Window("keyed_session", to_ms(gap, "Windows.keyed_session gap"), key_fn,
                               init, fold, event_time), max_out_of_orderness)
