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

from .aggregate import Aggregate, Field, field_of

M = TypeVar("M")
WV = TypeVar("WV")

__all__ = ["Windows", "Window", "Triggers", "Trigger", "CountTrigger", "TimeSinceFirstMessageTrigger",
           "TimeSinceLastMessageTrigger", "AnyTrigger", "RepeatTrigger", "AccumulationMode",
           "FiringType", "WindowKey", "WindowPane", "to_ms", "Aggregate", "Field"]


class AccumulationMode(enum.Enum):
    """ACCUMULATING keeps a pane's state across firings; DISCARDING clears it after each firing.

    Set it with ``Window.accumulation``; ACCUMULATING is the default.

    Example:
        >>> from datetime import timedelta
        >>> w = Windows.tumbling(timedelta(seconds=10)).accumulation(AccumulationMode.DISCARDING)
        >>> w.mode.value
        'discarding'
    """

    ACCUMULATING = "accumulating"
    DISCARDING = "discarding"


class FiringType(enum.Enum):
    """Why a pane was emitted.

    Attributes:
        EARLY: The window's early trigger fired before the pane closed.
        DEFAULT: The pane closed (its end passed, or the input ended).
        LATE: The window's late trigger fired for late messages within the allowed lateness.

    Example:
        >>> from datetime import timedelta
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> from samza_dsl.testing import TestRunner
        >>> w = (Windows.tumbling(timedelta(seconds=10), event_time=float, init=lambda: 0,
        ...                       fold=lambda m, n: n + 1)
        ...      .early_trigger(Triggers.repeat(Triggers.count(2))))
        >>> app, mem = StreamApplication("fire"), MemorySystem()
        >>> nums = mem.input("n")
        >>> (app.input(nums).window(w, name="w").map(lambda pane: (pane.firing.name, pane.message))
        ...  .send_to(app.output(mem.output("out"))))
        >>> TestRunner(app).add_input(nums, [1.0, 2.0, 3.0]).run().messages("out")
        [('EARLY', 2), ('DEFAULT', 3)]
    """

    EARLY = "early"
    DEFAULT = "default"
    LATE = "late"


class WindowKey(msgspec.Struct, frozen=True, gc=False):
    """A pane's key: the window key (None for global windows) and the pane id (window start in ms,
    as a string, as in Samza).

    Attributes:
        key: The window key, ``key_fn(m)``; None for ``Windows.tumbling``.
        pane_id: The pane's start in ms, as a string (for a session, the session's start).

    Example:
        >>> WindowKey("user-1", "10000")
        WindowKey(key='user-1', pane_id='10000')
    """

    key: Any
    pane_id: str


class WindowPane(msgspec.Struct, frozen=True, gc=False):
    """A result of a window: its key, its value (the fold result, or the list of messages), why it
    fired and the accumulation mode.

    Attributes:
        key: The pane's ``WindowKey``.
        message: The pane's value: the fold result with ``init``/``fold``, else the list of its
            messages.
        firing: Why it was emitted, a ``FiringType``.
        mode: The window's ``AccumulationMode``.

    Example:
        >>> pane = WindowPane(WindowKey("u1", "0"), 3, FiringType.DEFAULT,
        ...                   AccumulationMode.ACCUMULATING)
        >>> pane.key.key, pane.message, pane.firing.name
        ('u1', 3, 'DEFAULT')
    """

    key: WindowKey
    message: Any
    firing: FiringType
    mode: AccumulationMode


def to_ms(value: timedelta | float | int, what: str) -> int:
    """A duration in whole milliseconds (a number is taken as seconds); must be positive.

    Args:
        value: A ``timedelta``, or a number of seconds.
        what: What the duration is, for error messages (e.g. ``"Windows.tumbling size"``).

    Returns:
        The duration in ms, rounded to a whole number.

    Raises:
        TypeError: ``value`` is neither a ``timedelta`` nor a number.
        ValueError: ``value`` is not positive and finite, or is under 1 ms once rounded.

    Example:
        >>> to_ms(timedelta(seconds=1.5), "gap"), to_ms(2, "size")
        (1500, 2000)
        >>> to_ms(timedelta(0), "size")
        Traceback (most recent call last):
        ...
        ValueError: size must be positive and finite, got datetime.timedelta(0)
    """
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
    """Base of trigger specs. Make them with ``Triggers``; the window operator runs them.

    Example:
        >>> from datetime import timedelta
        >>> t = Triggers.repeat(Triggers.any(Triggers.count(100),
        ...                                  Triggers.time_since_first_message(timedelta(seconds=5))))
        >>> isinstance(t, Trigger), t.describe()
        (True, 'repeat(any(count(100), time_since_first_message(5000ms)))')
        >>> t.durations_ms(), Triggers.count(2).durations_ms()  # time triggers set task.window.ms
        ([5000], [])
    """

    def durations_ms(self) -> list[int]:
        """The time durations this trigger waits on (they set ``task.window.ms``).

        Returns:
            The durations in ms, one per time trigger inside (none for a count trigger).
        """
        return []

    def describe(self) -> str:
        """A short description, as plans show it.

        Returns:
            The trigger as text, e.g. ``"repeat(count(2))"``.
        """
        return type(self).__name__


@dataclass(frozen=True)
class CountTrigger(Trigger):
    """Fires on a pane's ``count``-th message (since it started or last fired); from
    ``Triggers.count``.

    Attributes:
        count: The number of messages, at least 1.
    """

    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < 1:
            raise ValueError(f"Triggers.count(n) needs an int n >= 1, got {self.count!r}")

    def describe(self) -> str:
        return f"count({self.count})"


@dataclass(frozen=True)
class TimeSinceFirstMessageTrigger(Trigger):
    """Fires at the first window tick at least ``duration_ms`` (processing time) after the
    pane's first message; from ``Triggers.time_since_first_message``.

    Attributes:
        duration_ms: The duration in ms.
    """

    duration_ms: int

    def durations_ms(self) -> list[int]:
        return [self.duration_ms]

    def describe(self) -> str:
        return f"time_since_first_message({self.duration_ms}ms)"


@dataclass(frozen=True)
class TimeSinceLastMessageTrigger(Trigger):
    """Fires at the first window tick at least ``duration_ms`` (processing time) after the
    pane's last message; from ``Triggers.time_since_last_message``.

    Attributes:
        duration_ms: The duration in ms.
    """

    duration_ms: int

    def durations_ms(self) -> list[int]:
        return [self.duration_ms]

    def describe(self) -> str:
        return f"time_since_last_message({self.duration_ms}ms)"


@dataclass(frozen=True)
class AnyTrigger(Trigger):
    """Fires when the first of its triggers fires (and cancels the others); from
    ``Triggers.any``.

    Attributes:
        triggers: The triggers, at least one.
    """

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
    """Starts ``trigger`` afresh after each of its firings, so that it fires again; from
    ``Triggers.repeat``.

    Attributes:
        trigger: The repeated trigger (not itself a ``RepeatTrigger``).
    """

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
    """Factories for trigger specs, as Samza's ``Triggers``.

    A window's early trigger (``Window.early_trigger``) and late trigger
    (``Window.late_trigger``) are made of these. A trigger that is not a top-level ``repeat``
    fires once per pane. Time triggers count processing time, also in event-time windows, and
    fire at window ticks (``task.window.ms``, which the planner derives from their durations).

    Example:
        >>> from datetime import timedelta
        >>> w = Windows.tumbling(timedelta(minutes=1), init=lambda: 0, fold=lambda m, n: n + 1)
        >>> early = Triggers.repeat(Triggers.any(Triggers.count(1000),
        ...                                      Triggers.time_since_first_message(timedelta(seconds=10))))
        >>> w.early_trigger(early).early.describe()
        'repeat(any(count(1000), time_since_first_message(10000ms)))'
    """

    @staticmethod
    def count(n: int) -> CountTrigger:
        """Fire on the ``n``-th message of a pane.

        Args:
            n: The number of messages, an int of at least 1.

        Returns:
            The trigger spec.

        Raises:
            ValueError: ``n`` is not an int of at least 1.

        Example:
            >>> Triggers.count(100).describe()
            'count(100)'
        """
        return CountTrigger(n)

    @staticmethod
    def time_since_first_message(duration: timedelta) -> TimeSinceFirstMessageTrigger:
        """Fire ``duration`` after a pane's first message (processing time, at the first window
        tick from then on).

        Args:
            duration: A ``timedelta`` (a number is taken as seconds).

        Returns:
            The trigger spec.

        Raises:
            TypeError: ``duration`` is neither a ``timedelta`` nor a number.
            ValueError: ``duration`` is not positive and finite, or is under 1 ms.

        Example:
            >>> Triggers.time_since_first_message(timedelta(seconds=5)).describe()
            'time_since_first_message(5000ms)'
        """
        return TimeSinceFirstMessageTrigger(to_ms(duration, "Triggers.time_since_first_message duration"))

    @staticmethod
    def time_since_last_message(duration: timedelta) -> TimeSinceLastMessageTrigger:
        """Fire once a pane has had no message for ``duration`` (processing time, at the first
        window tick from then on).

        Args:
            duration: A ``timedelta`` (a number is taken as seconds).

        Returns:
            The trigger spec.

        Raises:
            TypeError: ``duration`` is neither a ``timedelta`` nor a number.
            ValueError: ``duration`` is not positive and finite, or is under 1 ms.

        Example:
            >>> Triggers.time_since_last_message(timedelta(milliseconds=250)).durations_ms()
            [250]
        """
        return TimeSinceLastMessageTrigger(to_ms(duration, "Triggers.time_since_last_message duration"))

    @staticmethod
    def any(*triggers: Trigger) -> AnyTrigger:
        """Fire when the first of ``triggers`` fires; the others are then cancelled.

        Args:
            *triggers: At least one trigger.

        Returns:
            The trigger spec.

        Raises:
            ValueError: No trigger is given.
            TypeError: An argument is not a ``Trigger``.

        Example:
            >>> Triggers.any(Triggers.count(10),
            ...              Triggers.time_since_first_message(timedelta(seconds=1))).describe()
            'any(count(10), time_since_first_message(1000ms))'
        """
        return AnyTrigger(tuple(triggers))

    @staticmethod
    def repeat(trigger: Trigger) -> RepeatTrigger:
        """Fire every time ``trigger`` fires: it starts afresh after each firing.

        Args:
            trigger: The trigger to repeat.

        Returns:
            The trigger spec.

        Raises:
            TypeError: ``trigger`` is not a ``Trigger``.
            ValueError: ``trigger`` is already a ``repeat``.

        Example:
            >>> Triggers.repeat(Triggers.count(2)).describe()
            'repeat(count(2))'
        """
        return RepeatTrigger(trigger)


# --- Windows ------------------------------------------------------------------------------------

WINDOW_KINDS = ("tumbling", "keyed_tumbling", "keyed_session", "hopping", "keyed_hopping")


@dataclass(frozen=True)
class Window(Generic[M, WV]):
    """An immutable window spec. Each builder method returns a new Window.

    Make one with ``Windows``; pass it to ``MessageStream.window``.

    Attributes:
        kind: ``"tumbling"``, ``"keyed_tumbling"``, ``"keyed_session"``, ``"hopping"`` or
            ``"keyed_hopping"``.
        size_ms: The pane size (tumbling or hopping), or the session gap, in ms.
        key_fn: ``key_fn(m)`` gives a message's window key (None for ``"tumbling"`` and
            ``"hopping"``).
        init: ``init()`` gives a pane's initial value (None: panes collect lists).
        fold: ``fold(m, value)`` gives a pane's next value (None: panes collect lists).
        event_time: ``event_time(m)`` gives a message's event time in seconds (None:
            processing time).
        early: The early trigger, or None.
        late: The late trigger, or None.
        mode: The ``AccumulationMode``.
        allowed_lateness_ms: How long after its end a closed pane still takes late messages
            (event time, with a late trigger).
        max_out_of_orderness_ms: Event time only: how far behind the largest event time seen a
            message may come without being late.
        hop_ms: Hopping windows only: how far apart panes start, in ms (``size_ms`` is a
            multiple of it); 0 for the other kinds.
        combine: Hopping windows only: ``combine(a, b)`` merges two accumulators (of an earlier
            and a later hop), or None.
        aggregate: The declared ``Aggregate`` (its ``init``, ``fold`` and ``combine`` are the
            window's, and a pane's value is ``aggregate.finish`` of the accumulator), or None.

    Raises:
        ValueError: ``kind`` is unknown, only one of ``init`` and ``fold`` is given, an
            out-of-orderness bound is given without ``event_time``, a hopping window's size is
            not a multiple of its hop, or ``combine`` is given without ``init``/``fold`` or to
            a window that does not hop.
        TypeError: ``init``, ``fold``, ``combine`` or ``event_time`` is not callable, or a
            keyed window has no callable ``key_fn``.

    Example:
        >>> w = Windows.keyed_session(lambda m: m["user"], timedelta(minutes=30))
        >>> w = w.early_trigger(Triggers.repeat(Triggers.count(100)))
        >>> w.describe()
        {'kind': 'keyed_session', 'gap_ms': 1800000, 'time': 'processing',
         'mode': 'accumulating', 'early_trigger': 'repeat(count(100))'}
    """

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
    #: hopping windows only: the distance between pane starts, in ms
    hop_ms: int = 0
    #: hopping windows only: merges the accumulators of two hops (earlier first)
    combine: Callable[[WV, WV], WV] | None = None
    #: a declared aggregation: init, fold and combine are its own, panes hold its finish
    aggregate: Aggregate | None = None

    def __post_init__(self) -> None:
        if self.kind not in WINDOW_KINDS:
            raise ValueError(f"unknown window kind {self.kind!r}; one of {WINDOW_KINDS}")
        if self.aggregate is not None and not isinstance(self.aggregate, Aggregate):
            raise TypeError(f"aggregate= takes an Aggregate (Aggregate.count(), .sum(field), "
                            f".min(field), .max(field), .mean(field)), got "
                            f"{type(self.aggregate).__name__} {self.aggregate!r}")
        if (self.init is None) != (self.fold is None):
            raise ValueError("a window needs both init and fold, or neither (then a pane's value "
                             "is the list of its messages)")
        for what, fn in (("init", self.init), ("fold", self.fold), ("event_time", self.event_time),
                         ("combine", self.combine)):
            if fn is not None and not callable(fn):
                raise TypeError(f"window {what} must be callable, got {type(fn).__name__}")
        if self.max_out_of_orderness_ms and self.event_time is None:
            raise ValueError("max_out_of_orderness applies to event-time windows only: give the "
                             "window event_time=fn(message) -> seconds")
        if self.kind not in ("tumbling", "hopping") and not callable(self.key_fn):
            raise TypeError(f"Windows.{self.kind} needs a callable key_fn (or a field name), got "
                            f"{self.key_fn!r}")
        if self.is_hopping:
            if self.hop_ms < 1 or self.size_ms % self.hop_ms:
                raise ValueError(f"Windows.{self.kind}: the size ({self.size_ms} ms) must be a "
                                 f"whole multiple of the hop ({self.hop_ms} ms), so that each "
                                 f"message belongs to size / hop panes; pick a hop that divides "
                                 f"the size")
        elif self.hop_ms:
            raise ValueError(f"Windows.{self.kind} has no hop; use Windows.hopping or "
                             f"Windows.keyed_hopping")
        if self.combine is not None:
            if not self.is_hopping:
                raise ValueError(f"combine applies to hopping windows only, not to "
                                 f"Windows.{self.kind}")
            if self.fold is None:
                raise ValueError("combine merges fold accumulators: give the window init and "
                                 "fold too")

    @property
    def keyed(self) -> bool:
        """Whether panes are per key (every kind but ``"tumbling"`` and ``"hopping"``)."""
        return self.kind not in ("tumbling", "hopping")

    @property
    def is_session(self) -> bool:
        """Whether this is a session window (``"keyed_session"``)."""
        return self.kind == "keyed_session"

    @property
    def is_hopping(self) -> bool:
        """Whether panes overlap (``"hopping"`` or ``"keyed_hopping"``): a pane of ``size_ms``
        starts every ``hop_ms``."""
        return self.kind in ("hopping", "keyed_hopping")

    @property
    def panes_per_message(self) -> int:
        """How many panes each message belongs to: ``size_ms / hop_ms`` for a hopping window,
        else 1."""
        return self.size_ms // self.hop_ms if self.is_hopping else 1

    def early_trigger(self, trigger: Trigger) -> Window[M, WV]:
        """Emit panes before they close, when ``trigger`` fires (``FiringType.EARLY``).

        The trigger starts on a pane's first message; without ``Triggers.repeat`` it fires once
        per pane.

        Args:
            trigger: A trigger spec from ``Triggers``.

        Returns:
            A new Window with that early trigger.

        Raises:
            TypeError: ``trigger`` is not a ``Trigger``.

        Example:
            >>> w = Windows.tumbling(timedelta(minutes=1))
            >>> w.early_trigger(Triggers.repeat(Triggers.count(2))).early.describe()
            'repeat(count(2))'
        """
        if not isinstance(trigger, Trigger):
            raise TypeError(f"early_trigger takes a Trigger, got {type(trigger).__name__}")
        return replace(self, early=trigger)

    def late_trigger(self, trigger: Trigger) -> Window[M, WV]:
        """Emit closed panes again for late messages, when ``trigger`` fires
        (``FiringType.LATE``).

        It applies to event-time windows with ``allowed_lateness``: a late message within the
        allowed lateness is folded into its closed pane, whose late trigger starts on its first
        late message (``count(1)`` fires once per pane, ``repeat(count(1))`` once per late
        message).

        Args:
            trigger: A trigger spec from ``Triggers``.

        Returns:
            A new Window with that late trigger.

        Raises:
            TypeError: ``trigger`` is not a ``Trigger``.

        Example:
            >>> w = Windows.tumbling(timedelta(minutes=1), event_time=lambda m: m["ts"])
            >>> w = w.allowed_lateness(timedelta(minutes=5)).late_trigger(Triggers.count(1))
            >>> w.allowed_lateness_ms, w.late.describe()
            (300000, 'count(1)')
        """
        if not isinstance(trigger, Trigger):
            raise TypeError(f"late_trigger takes a Trigger, got {type(trigger).__name__}")
        return replace(self, late=trigger)

    def accumulation(self, mode: AccumulationMode) -> Window[M, WV]:
        """Whether a pane keeps its state across firings (default ACCUMULATING) or clears it
        after each firing (DISCARDING).

        Args:
            mode: An ``AccumulationMode``.

        Returns:
            A new Window with that mode.

        Raises:
            TypeError: ``mode`` is not an ``AccumulationMode``.

        Example:
            >>> w = Windows.tumbling(timedelta(minutes=1))
            >>> w.accumulation(AccumulationMode.DISCARDING).mode
            <AccumulationMode.DISCARDING: 'discarding'>
        """
        if not isinstance(mode, AccumulationMode):
            raise TypeError(f"accumulation takes an AccumulationMode, got {mode!r}")
        return replace(self, mode=mode)

    def allowed_lateness(self, lateness: timedelta) -> Window[M, WV]:
        """Keep closed panes for late messages for ``lateness`` after their end (event time
        only); with a ``late_trigger``, such messages are folded in and emitted as LATE panes.

        Args:
            lateness: A ``timedelta`` (a number is taken as seconds); ``timedelta(0)`` keeps
                none.

        Returns:
            A new Window with that allowed lateness.

        Raises:
            ValueError: The window has no ``event_time``, or ``lateness`` is negative, not
                finite, or under 1 ms.
            TypeError: ``lateness`` is neither a ``timedelta`` nor a number.

        Example:
            >>> w = Windows.tumbling(timedelta(minutes=1), event_time=lambda m: m["ts"])
            >>> w.allowed_lateness(timedelta(seconds=30)).allowed_lateness_ms
            30000
        """
        if self.event_time is None:
            raise ValueError("allowed_lateness applies to event-time windows only: give the window "
                             "event_time=fn(message) -> seconds")
        if isinstance(lateness, timedelta) and lateness.total_seconds() == 0:
            return replace(self, allowed_lateness_ms=0)
        return replace(self, allowed_lateness_ms=to_ms(lateness, "allowed_lateness"))

    def durations_ms(self) -> list[int]:
        """Trigger durations that set ``task.window.ms``: the window size (processing time only,
        where the pane closes on a timer) and every time trigger.

        Returns:
            The durations in ms; the planner sets ``task.window.ms`` to their GCD.

        Example:
            >>> early = Triggers.time_since_first_message(timedelta(seconds=4))
            >>> Windows.tumbling(timedelta(seconds=10)).early_trigger(early).durations_ms()
            [10000, 4000]
        """
        out: list[int] = []
        if self.event_time is None:
            out.append(self.size_ms)
            if self.hop_ms:  # a hopping pane closes every hop
                out.append(self.hop_ms)
        for trig in (self.early, self.late):
            if trig is not None:
                out.extend(trig.durations_ms())
        return out

    def describe(self) -> dict[str, Any]:
        """The window's settings, as plans show them.

        Returns:
            A dict with ``kind``, ``size_ms`` (``gap_ms`` for a session), ``hop_ms`` (hopping
            windows), ``time`` (``"event"`` or ``"processing"``) and ``mode``, and the
            triggers, allowed lateness, out-of-orderness bound and ``combine`` where set.

        Example:
            >>> Windows.tumbling(timedelta(seconds=10), event_time=lambda m: m[1]).describe()
            {'kind': 'tumbling', 'size_ms': 10000, 'time': 'event', 'mode': 'accumulating'}
        """
        what = "gap_ms" if self.is_session else "size_ms"
        out: dict[str, Any] = {"kind": self.kind, what: self.size_ms}
        if self.is_hopping:
            out["hop_ms"] = self.hop_ms
        out |= {"time": "event" if self.event_time else "processing", "mode": self.mode.value}
        if self.combine is not None and self.aggregate is None:
            out["combine"] = True
        if self.aggregate is not None:
            out["aggregate"] = self.aggregate.describe()
        for what, fn in (("key", self.key_fn), ("event_time", self.event_time)):
            if isinstance(fn, Field):
                out[f"{what}_field"] = fn.name
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
    """Factories for window specs, as Samza's ``Windows``.

    Every factory takes the same optional arguments:

    - ``init`` and ``fold`` (both or neither): a pane's value starts as ``init()`` and each
      message makes it ``fold(m, value)``; without them a pane's value is the list of its
      messages.
    - ``event_time``: ``event_time(m)`` gives a message's event time in seconds (rounded to
      whole ms). Without it windows run on processing time, as in Samza; with it they run on
      event time and close on the task's watermark, so replaying the same input gives the same
      panes.
    - ``max_out_of_orderness`` (event time only): how far behind the largest event time seen
      a message may come without being late; the window's watermark is the task's less this.
    - ``aggregate`` (in place of ``init``/``fold``): a declared ``Aggregate``, count, sum,
      min, max or mean of a named field; a pane's value is defined alike on every runner, and
      ``SparkRunner`` may run it in Spark SQL.

    A key or event time may be a field name: ``key="country"`` is ``Field("country")``, which
    reads ``m["country"]`` of a dict, the attribute of a Struct, the field of a KV's value.

    Sizes, hops and gaps are ``timedelta`` (a number is taken as seconds).

    Example:
        >>> w = Windows.keyed_hopping(lambda m: m[0], timedelta(seconds=10),
        ...                           timedelta(seconds=5))
        >>> w.kind, w.size_ms, w.hop_ms
        ('keyed_hopping', 10000, 5000)
        >>> Windows.keyed_tumbling(key="country", size=timedelta(seconds=10), event_time="ts",
        ...                        aggregate=Aggregate.count()).describe()
        {'kind': 'keyed_tumbling', 'size_ms': 10000, 'time': 'event', 'mode': 'accumulating',
         'aggregate': 'count()', 'key_field': 'country', 'event_time_field': 'ts'}
    """

    @staticmethod
    def tumbling(size: timedelta, *, init: Callable[[], Any] | None = None,
                 fold: Callable[[Any, Any], Any] | None = None,
                 event_time: Callable[[Any], float] | str | None = None,
                 max_out_of_orderness: timedelta | None = None,
                 aggregate: Aggregate | None = None) -> Window[Any, Any]:
        """A tumbling window over the whole stream (per task): fixed, non-overlapping panes of
        ``size``, with no key (``WindowKey.key`` is None).

        Args:
            size: The pane length.
            init: ``init()`` gives a pane's initial value; goes with ``fold``.
            fold: ``fold(m, value)`` gives the pane's next value; goes with ``init``.
            event_time: ``event_time(m)`` gives a message's event time in seconds (a string
                names a field holding it); without it the window runs on processing time.
            max_out_of_orderness: With ``event_time``, how far out of order messages may
                come without being late.
            aggregate: A declared ``Aggregate`` (``Aggregate.count()``, ``.sum(field)``...)
                in place of ``init``/``fold``: a pane's value is that aggregate.

        Returns:
            The window spec.

        Raises:
            TypeError: A duration is neither a ``timedelta`` nor a number, or a function is
                not callable.
            ValueError: A duration is not positive (or under 1 ms), only one of ``init`` and
                ``fold`` is given, or ``max_out_of_orderness`` is given without
                ``event_time``.

        Example:
            >>> w = Windows.tumbling(timedelta(seconds=10), init=lambda: 0,
            ...                      fold=lambda m, total: total + m)
            >>> w.kind, w.size_ms, w.keyed
            ('tumbling', 10000, False)
        """
        return _bounded(_window("tumbling", None, to_ms(size, "Windows.tumbling size"), init, fold,
                                event_time, aggregate), max_out_of_orderness)

    @staticmethod
    def keyed_tumbling(key_fn: Callable[[Any], Any] | str | None = None,
                       size: timedelta | None = None, *,
                       key: Callable[[Any], Any] | str | None = None,
                       init: Callable[[], Any] | None = None,
                       fold: Callable[[Any, Any], Any] | None = None,
                       event_time: Callable[[Any], float] | str | None = None,
                       max_out_of_orderness: timedelta | None = None,
                       aggregate: Aggregate | None = None) -> Window[Any, Any]:
        """A tumbling window per key: fixed, non-overlapping panes of ``size`` for each
        ``key_fn(m)``.

        Args:
            key_fn: ``key_fn(m)`` gives a message's window key; a string names a field of the
                message (``Field``).
            key: The same as ``key_fn``, by keyword (``key="country"``); give one of the two.
            size: The pane length.
            init: ``init()`` gives a pane's initial value; goes with ``fold``.
            fold: ``fold(m, value)`` gives the pane's next value; goes with ``init``.
            event_time: ``event_time(m)`` gives a message's event time in seconds (a string
                names a field holding it); without it the window runs on processing time.
            max_out_of_orderness: With ``event_time``, how far out of order messages may
                come without being late.
            aggregate: A declared ``Aggregate`` (``Aggregate.count()``, ``.sum(field)``...)
                in place of ``init``/``fold``: a pane's value is that aggregate.

        Returns:
            The window spec.

        Raises:
            TypeError: A duration is neither a ``timedelta`` nor a number, or a function is
                not callable.
            ValueError: A duration is not positive (or under 1 ms), only one of ``init`` and
                ``fold`` is given, or ``max_out_of_orderness`` is given without
                ``event_time``.

        Example:
            >>> w = Windows.keyed_tumbling(lambda m: m["user"], timedelta(minutes=1),
            ...                            event_time=lambda m: m["ts"],
            ...                            max_out_of_orderness=timedelta(seconds=5))
            >>> w.kind, w.size_ms, w.max_out_of_orderness_ms
            ('keyed_tumbling', 60000, 5000)
        """
        key = _key_arg("keyed_tumbling", key_fn, key)
        size = _needed("keyed_tumbling", "size", size)
        return _bounded(_window("keyed_tumbling", key, to_ms(size, "Windows.keyed_tumbling size"),
                                init, fold, event_time, aggregate), max_out_of_orderness)

    @staticmethod
    def keyed_session(key_fn: Callable[[Any], Any] | str | None = None,
                      gap: timedelta | None = None, *,
                      key: Callable[[Any], Any] | str | None = None,
                      init: Callable[[], Any] | None = None,
                      fold: Callable[[Any, Any], Any] | None = None,
                      event_time: Callable[[Any], float] | str | None = None,
                      max_out_of_orderness: timedelta | None = None,
                      aggregate: Aggregate | None = None) -> Window[Any, Any]:
        """A session window per key: a pane starts at a key's first message and closes once
        ``gap`` has passed since its last one. The pane id is the session's start.

        Args:
            key_fn: ``key_fn(m)`` gives a message's window key; a string names a field of the
                message (``Field``).
            key: The same as ``key_fn``, by keyword (``key="country"``); give one of the two.
            gap: The inactivity gap that ends a session.
            init: ``init()`` gives a pane's initial value; goes with ``fold``.
            fold: ``fold(m, value)`` gives the pane's next value; goes with ``init``.
            event_time: ``event_time(m)`` gives a message's event time in seconds (a string
                names a field holding it); without it the window runs on processing time.
            max_out_of_orderness: With ``event_time``, how far out of order messages may
                come without being late.
            aggregate: A declared ``Aggregate`` (``Aggregate.count()``, ``.sum(field)``...)
                in place of ``init``/``fold``: a pane's value is that aggregate.

        Returns:
            The window spec.

        Raises:
            TypeError: A duration is neither a ``timedelta`` nor a number, or a function is
                not callable.
            ValueError: A duration is not positive (or under 1 ms), only one of ``init`` and
                ``fold`` is given, or ``max_out_of_orderness`` is given without
                ``event_time``.

        Example:
            >>> w = Windows.keyed_session(lambda m: m["user"], timedelta(minutes=30))
            >>> w.kind, w.size_ms, w.is_session
            ('keyed_session', 1800000, True)
        """
        key = _key_arg("keyed_session", key_fn, key)
        gap = _needed("keyed_session", "gap", gap)
        return _bounded(_window("keyed_session", key, to_ms(gap, "Windows.keyed_session gap"),
                                init, fold, event_time, aggregate), max_out_of_orderness)

    @staticmethod
    def hopping(size: timedelta, hop: timedelta, *, init: Callable[[], Any] | None = None,
                fold: Callable[[Any, Any], Any] | None = None,
                combine: Callable[[Any, Any], Any] | None = None,
                event_time: Callable[[Any], float] | str | None = None,
                max_out_of_orderness: timedelta | None = None,
                aggregate: Aggregate | None = None) -> Window[Any, Any]:
        """A hopping (sliding) window over the whole stream (per task): panes of ``size`` that
        start every ``hop``, with no key (``WindowKey.key`` is None). A message at ``t`` belongs
        to the ``size / hop`` panes ``[s, s + size)`` with ``s`` a multiple of ``hop`` and
        ``s <= t < s + size``; the pane id is ``s``.

        The state is kept once per hop, not per pane: each hop keeps its messages or, with
        ``combine``, one partial accumulator (``fold`` over that hop's messages from ``init()``);
        a firing merges the hops of the pane (``combine`` from ``init()``, earlier hops first).
        Without ``combine`` a hop keeps its messages and a firing folds the pane's messages
        (in arrival order) from ``init()``, so each firing costs as many ``fold`` calls as the
        pane has messages.

        Args:
            size: The pane length, a whole multiple of ``hop``.
            hop: How far apart panes start.
            init: ``init()`` gives an empty accumulator; goes with ``fold``.
            fold: ``fold(m, value)`` gives the next accumulator; goes with ``init``.
            combine: ``combine(a, b)`` merges the accumulators of two hops (``a`` of the
                earlier); with ``init``/``fold``. It must be associative, with ``init()`` as
                its identity, and agree with ``fold`` (a sum, a count, a max, a set union...);
                it should return a new value rather than change ``a`` or ``b``.
            event_time: As in ``Windows.tumbling``.
            max_out_of_orderness: As in ``Windows.tumbling``.
            aggregate: As in ``Windows.tumbling`` (it gives ``combine`` too).

        Returns:
            The window spec.

        Raises:
            TypeError: As ``Windows.tumbling``.
            ValueError: As ``Windows.tumbling``, or ``size`` is not a whole multiple of
                ``hop``, or ``combine`` is given without ``init`` and ``fold``.

        Example:
            >>> w = Windows.hopping(timedelta(minutes=1), timedelta(seconds=10),
            ...                     init=lambda: 0, fold=lambda m, n: n + 1,
            ...                     combine=lambda a, b: a + b)
            >>> w.kind, w.size_ms, w.hop_ms, w.panes_per_message
            ('hopping', 60000, 10000, 6)
        """
        return _hopping("hopping", None, size, hop, init, fold, combine, event_time,
                        max_out_of_orderness, aggregate)

    @staticmethod
    def keyed_hopping(key_fn: Callable[[Any], Any] | str | None = None,
                      size: timedelta | None = None, hop: timedelta | None = None, *,
                      key: Callable[[Any], Any] | str | None = None,
                      init: Callable[[], Any] | None = None,
                      fold: Callable[[Any, Any], Any] | None = None,
                      combine: Callable[[Any, Any], Any] | None = None,
                      event_time: Callable[[Any], float] | str | None = None,
                      max_out_of_orderness: timedelta | None = None,
                      aggregate: Aggregate | None = None) -> Window[Any, Any]:
        """A hopping (sliding) window per key: for each ``key_fn(m)``, panes of ``size`` that
        start every ``hop``; a message belongs to ``size / hop`` of them. Every other argument,
        the state kept per hop and the errors are as in ``Windows.hopping``.

        Args:
            key_fn: ``key_fn(m)`` gives a message's window key; a string names a field of the
                message (``Field``).
            key: The same as ``key_fn``, by keyword (``key="country"``); give one of the two.
            size: The pane length, a whole multiple of ``hop``.
            hop: How far apart panes start.
            init: See ``Windows.hopping``.
            fold: See ``Windows.hopping``.
            combine: See ``Windows.hopping``.
            event_time: See ``Windows.hopping``.
            max_out_of_orderness: See ``Windows.hopping``.
            aggregate: See ``Windows.hopping``.

        Returns:
            The window spec.

        Raises:
            TypeError: As ``Windows.hopping``, or ``key_fn`` is not callable.
            ValueError: As ``Windows.hopping``.

        Example:
            >>> w = Windows.keyed_hopping(lambda m: m["user"], timedelta(minutes=5),
            ...                           timedelta(minutes=1), event_time=lambda m: m["ts"])
            >>> w.describe()
            {'kind': 'keyed_hopping', 'size_ms': 300000, 'hop_ms': 60000, 'time': 'event',
             'mode': 'accumulating'}
            >>> Windows.keyed_hopping(lambda m: m, timedelta(seconds=10), timedelta(seconds=3))
            Traceback (most recent call last):
            ...
            ValueError: Windows.keyed_hopping: the size (10000 ms) must be a whole multiple of the hop (3000 ms), so that each message belongs to size / hop panes; pick a hop that divides the size
        """
        key = _key_arg("keyed_hopping", key_fn, key)
        size = _needed("keyed_hopping", "size", size)
        hop = _needed("keyed_hopping", "hop", hop)
        return _hopping("keyed_hopping", key, size, hop, init, fold, combine, event_time,
                        max_out_of_orderness, aggregate)


def _hopping(kind: str, key: Callable[[Any], Any] | str | None, size: timedelta,
             hop: timedelta, init: Callable[[], Any] | None, fold: Callable[[Any, Any], Any] | None,
             combine: Callable[[Any, Any], Any] | None,
             event_time: Callable[[Any], float] | str | None,
             bound: timedelta | None, aggregate: Aggregate | None) -> Window[Any, Any]:
    return _bounded(_window(kind, key, to_ms(size, f"Windows.{kind} size"), init, fold,
                            event_time, aggregate, hop_ms=to_ms(hop, f"Windows.{kind} hop"),
                            combine=combine), bound)


def _key_arg(kind: str, key_fn: Callable[[Any], Any] | str | None,
             key: Callable[[Any], Any] | str | None) -> Callable[[Any], Any] | str:
    """The window key of ``Windows.<kind>``: ``key_fn`` or its keyword alias ``key``."""
    if key_fn is not None and key is not None:
        raise TypeError(f"Windows.{kind}: give the key as key_fn or as key=, not both")
    got = key_fn if key_fn is not None else key
    if got is None:
        raise TypeError(f"Windows.{kind} needs a callable key_fn, or the name of a field of "
                        f"the message (key=\"country\"), got None")
    return got


def _needed(kind: str, what: str, value: timedelta | None) -> timedelta:
    if value is None:
        raise TypeError(f"Windows.{kind} needs {what}, a timedelta")
    return value


def _window(kind: str, key: Callable[[Any], Any] | str | None, size_ms: int,
            init: Callable[[], Any] | None, fold: Callable[[Any, Any], Any] | None,
            event_time: Callable[[Any], float] | str | None, aggregate: Aggregate | None, *,
            hop_ms: int = 0, combine: Callable[[Any, Any], Any] | None = None) -> Window[Any, Any]:
    """A window spec of ``kind``: field names become ``Field``s, and a declared ``aggregate``
    gives the window its ``init``, ``fold`` (and, hopping, ``combine``)."""
    what = f"Windows.{kind}"
    if aggregate is not None:
        if not isinstance(aggregate, Aggregate):
            raise TypeError(f"{what}: aggregate= takes an Aggregate (Aggregate.count(), "
                            f".sum(field), .min(field), .max(field), .mean(field)), got "
                            f"{type(aggregate).__name__} {aggregate!r}")
        if init is not None or fold is not None or combine is not None:
            raise ValueError(f"{what}: give aggregate= or init/fold (and combine), not both")
        init, fold = aggregate.init, aggregate.fold
        if hop_ms:
            combine = aggregate.combine
    return Window(kind, size_ms, field_of(key, f"{what} key"), init, fold,
                  field_of(event_time, f"{what} event_time"), hop_ms=hop_ms, combine=combine,
                  aggregate=aggregate)
