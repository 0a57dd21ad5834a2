"""The operator contract shared by the streaming runtime and the Spark runner.

An operator turns one input into a list of outputs:

- ``process(message)`` returns a ``list`` of outputs when it finished synchronously, or an
  awaitable that resolves to such a list (async operators: ``async_flat_map``, an async ``sink``).
  The runtime's fast path checks ``type(result) is list`` and never creates a Task for it.
- ``on_timer(now_ms)`` runs at window ticks (``task.window.ms``); ``on_watermark(ms)`` when the
  task's event-time watermark advances; ``on_end_of_stream()`` once when every input has ended.
  Each returns a list of outputs, which the runtime passes downstream like ``process`` outputs.
- Joins have two inputs: ``process_port(port, message)`` with port 0 (left) or 1 (right).

Operators hold no asyncio loop, no Kafka and no Spark. Time comes from ``ctx.clock()``; state from
``ctx.store(name)``. A user function's exception propagates: the runtime names the operator,
task and offset.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from dataclasses import dataclass, field
from operator import length_hint
from typing import Any, ClassVar, Protocol, cast

from samza_dsl.fields import fast_reader
from samza_dsl.kv import KV
from samza_dsl.spec import OpSpec

__all__ = ["IDENTITY", "FailedAt", "held_failure", "held_source", "PassThrough", "Operator", "OperatorContext", "KeyValueState", "MetricsRegistry", "RemoteState", "Result", "resolve_fn", "init_fn",
           "close_fn", "UserContext", "inc_counter", "stopped_at"]

Result = list[Any] | Awaitable[list[Any]]


def IDENTITY(message: Any) -> Any:  # noqa: N802 - a marker, compared by identity
    """The one-to-one function of operators that pass every message on unchanged."""
    return message


class KeyValueState(Protocol):
    """State an operator is given: a sorted key-value store (see ``operators.state``)."""

    #: a remote table's client (``runtime.state.remote``): its reads and writes are calls to
    #: await, not values
    remote: bool
    #: whether it writes in batches (``maybe_flush`` after each processed batch: LMDB)
    batched_writes: bool
    #: whether a value written is kept in the store's read cache too (a store without one
    #: ignores it): off where the operator keeps the values it wrote itself (a window's panes)
    cache_writes: bool
    #: a table's check of a key (``operators.state.table_key_check``): raises where its key
    #: serde cannot serialize the key, as its LMDB store would; None where any key is taken
    check_key: Callable[[Any], None] | None

    def get(self, key: Any) -> Any: ...
    def put(self, key: Any, value: Any) -> None: ...
    def delete(self, key: Any) -> None: ...
    def range(self, start: Any, end: Any) -> Iterator[tuple[Any, Any]]: ...
    def all(self) -> Iterator[tuple[Any, Any]]: ...

    def peek(self, key: Any) -> Any:
        """``get`` that caches nothing it reads."""
        ...

    def maybe_flush(self) -> None:
        """Write out what is pending if enough is (a store that writes in batches: LMDB); a
        no-op for a store that writes at once."""
        ...


class RemoteState(KeyValueState, Protocol):
    """A remote table's client (``remote`` is True): besides its awaitable reads and writes,
    ``write``, a put to await as part of the message's processing."""

    async def write(self, key: Any, value: Any) -> None: ...


class MetricsRegistry(Protocol):
    """The registry operators count in (``OperatorContext.metrics``; the runtime's is
    ``runtime.host.metrics.Metrics``). A plain mutable mapping of counts, or None, does too (unit
    tests)."""

    def counter(self, name: str) -> Any:
        """The counter ``name`` (``.inc(n)``, ``.value``), made at its first use."""
        ...

    def every(self, key: Any, seconds: float) -> bool:
        """True the first time ``key`` is asked for, then once ``seconds`` have passed since
        it last was: a warning given at most that often."""
        ...


@dataclass
class OperatorContext:
    """What an operator gets at ``init``: its task, the config, a clock in ms, and stores.

    ``stores`` maps store name -> state (window state by op id, join sides ``<op id>-L``/``-R``,
    user tables by table id). ``metrics`` is a ``MetricsRegistry``, a plain mapping of counts,
    or None."""

    task_name: str
    config: Mapping[str, Any]
    clock: Callable[[], int]
    stores: Mapping[str, KeyValueState] = field(default_factory=dict)
    metrics: Any = None
    #: True when the runtime computes event-time windows' watermarks (the streaming runtime
    #: always does, from every producer feeding the task: ``runtime.engine.watermarks``): they then
    #: close on ``on_watermark``; otherwise a window advances its own watermark to the latest
    #: event time it saw (an operator on its own, Spark over event-time-sorted input)
    external_watermarks: bool = False
    #: the event-time windows (op ids) that move their own watermark to the latest event time
    #: they saw although ``external_watermarks`` is on: the streaming runtime names them when
    #: it builds the task, where one input partition alone feeds a window and every message
    #: of it reaches the window inline, so the two are the same (``runtime.engine.watermarks``)
    own_watermarks: Collection[str] = ()
    #: ``() -> (stream id, partition, offset)`` of the message the task is processing now, or
    #: None when the runtime cannot tell (a window tick, a watermark); reports of late messages
    #: name it
    source: Callable[[], tuple[str, int, int | None] | None] | None = None
    #: ``(op id, port) -> check or None``: where the runtime checks that a join's keys belong to
    #: the task's partition (``operators.placement.KeyCheck``); None: nothing is checked
    placement: Callable[[str, int], Callable[[Any], int] | None] | None = None
    #: the same clock in nanoseconds, where the runtime reads one (``clock()`` is then
    #: ``clock_ns() // 1_000_000``): an operator that reads the clock per message calls it
    #: directly, one call less
    clock_ns: Callable[[], int] | None = None

    def store(self, name: str) -> KeyValueState:
        try:
            return self.stores[name]
        except KeyError:
            raise KeyError(f"task {self.task_name!r} has no store {name!r}; stores: "
                           f"{', '.join(sorted(self.stores)) or 'none'}") from None


@dataclass
class UserContext:
    """The ``Context`` user functions get at ``init(ctx)``."""

    task_name: str
    config: Mapping[str, Any]
    metrics: Any
    _tables: Mapping[str, Any]

    def table(self, name: str) -> Any:
        try:
            return self._tables[name]
        except KeyError:
            raise KeyError(f"no table {name!r} in task {self.task_name!r}; declare it with "
                           f"app.table({name!r}, serde=...) or "
                           f"app.remote_table({name!r}, ...)") from None


def resolve_fn(fn: Any) -> Callable[..., Any]:
    """A plain callable, or an object's ``apply`` (Samza style) or ``__call__``. A function
    that only reads one item or attribute of its argument (``lambda m: m["ts"]``) is called as
    the ``operator.itemgetter``/``attrgetter`` that reads it the same way, with no Python frame
    a call (``samza_dsl.fields.fast_reader``)."""
    apply = getattr(fn, "apply", None)  # foreign: a user's function
    if callable(apply) and not inspect.isfunction(fn) and not inspect.ismethod(fn):
        return cast(Callable[..., Any], apply)
    if inspect.isfunction(fn):
        fast = fast_reader(fn)
        if fast is not None:
            return fast
    return cast(Callable[..., Any], fn)


#: what a flat_map must not return: iterating it would emit characters, bytes or keys
_NOT_OUTPUTS = (str, bytes, bytearray, memoryview, Mapping)


def as_outputs(result: Any, opcode: str, op_id: str) -> list[Any]:
    """The outputs of a ``flat_map``-style function's ``result`` as a list (None: none). A str,
    bytes or mapping is refused, as a mistake: it is one message, not a collection of them."""
    if type(result) is list:
        return result
    if result is None:
        return []
    if type(result) is KV:
        raise TypeError(f"{opcode} {op_id!r} returned a KV ({_short(result)}), which would emit "
                        f"its key and its value as two messages: return a list of messages, "
                        f"e.g. [kv] for one, [] for none")
    if isinstance(result, _NOT_OUTPUTS):
        what = "keys" if isinstance(result, Mapping) else \
            "characters" if isinstance(result, str) else "bytes"
        raise TypeError(f"{opcode} {op_id!r} returned a {type(result).__name__} "
                        f"({_short(result)}), which "
                        f"would emit its {what} one by one: return a list of messages, e.g. "
                        f"[message] for one, [] for none")
    return list(result)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def init_fn(fn: Any, ctx: UserContext) -> None:
    init = getattr(fn, "init", None)  # foreign: a user's function
    if callable(init) and not inspect.isfunction(fn):
        init(ctx)


def close_fn(fn: Any) -> None:
    close = getattr(fn, "close", None)  # foreign: a user's function
    if callable(close) and not inspect.isfunction(fn):
        close()


def inc_counter(metrics: Any, name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name`` of a registry with ``counter(name).inc(n)`` (the runtime's)
    or a plain mutable mapping; ``metrics`` may be None (unit tests)."""
    if metrics is None:
        return
    if isinstance(metrics, MutableMapping):
        metrics[name] = metrics.get(name, 0) + n
    else:
        metrics.counter(name).inc(n)


def stopped_at(it: Iterator[Any], end: int) -> int:
    """The index of the message a batch loop took last, where it stops or fails: the loop
    iterates over the items i..end-1 of a sequence (``iter(payloads[i:end])``,
    ``iter(range(i, end))``), and the iterator tells how many are left. Every batch loop
    (``process_run``'s, ``runtime.engine.batch``'s) takes its index so, off its common path."""
    return end - length_hint(it) - 1


class FailedAt(Exception):
    """A failure of ``Operator.process_run`` at ``index`` of its messages."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(index, cause)
        self.index = index
        self.cause = cause


class Operator:
    """Base of all operators. Subclasses set ``opcode`` and override what they need."""

    opcode: ClassVar[str] = "op"
    #: user functions of the spec, initialised and closed with the operator
    user_fns: tuple[Any, ...] = ()
    #: a terminal writing a stream whose partition the application chooses (``send_to(...,
    #: partition=fn)`` or ``partition_key=fn``, ``SendToStreamOperator``): the function
    partition_fn: Callable[[Any], Any] | None = None
    partition_key_fn: Callable[[Any], Any] | None = None

    def __init__(self, spec: OpSpec) -> None:
        self.spec = spec
        self.op_id = spec.op_id
        self.ctx: OperatorContext | None = None

    def init(self, ctx: OperatorContext, user_ctx: UserContext | None = None) -> None:
        self.ctx = ctx
        if user_ctx is None:
            user_ctx = UserContext(ctx.task_name, ctx.config, ctx.metrics, {})
        for fn in self.user_fns:
            if fn is not None:
                init_fn(fn, user_ctx)

    def process(self, message: Any) -> Result:
        raise NotImplementedError(f"{type(self).__name__} must implement process")

    def one_to_one(self) -> Callable[[Any], Any] | None:
        """For operators that turn a message into at most one output, synchronously: the function
        ``m -> output or None`` (None: no output). The runtime then chains such operators with
        no per-message list. ``IDENTITY`` means the output is the message itself."""
        return None

    def one_to_one_port(self, port: int) -> Callable[[Any], Any] | None:
        """``one_to_one`` for messages arriving on input ``port`` (a join has two)."""
        return self.one_to_one() if port == 0 else None

    #: For operators that can take a run of messages in one call: ``process_run(messages, i,
    #: end, stop_types)`` processes ``messages[i:end]`` in order, as ``process`` would one by
    #: one, and returns the index of the first message it did not process. It stops before a
    #: message of one of ``stop_types`` (a control record) and before any message that would
    #: give outputs, for ``process`` to take it. A failure raises ``FailedAt``. None: no such
    #: method (the runtime calls ``process`` per message).
    process_run: Callable[[list[Any], int, int, Any], int] | None = None
    #: ``process_run`` for records given as columns, where the operator has such a loop (a
    #: keyed event-time window fold): ``process_columns(keys, xs, messages, i, end)`` takes
    #: record j as ``keys[j]`` (what the key function gives), ``xs[j]`` (the event time in
    #: ms, a float) and ``messages[j]``, what ``fold_fn`` gets (``messages`` None: each gets
    #: None, for a fold that never reads its message). ``fold_fn(message, value)`` is the
    #: operator's fold (None: it has none).
    process_columns: Callable[[list[Any], list[float], Sequence[Any] | None, int, int],
                              int] | None = None
    fold_fn: Callable[[Any, Any], Any] | None = None

    #: Event-time windows: the watermark the window is at (ms since the epoch)
    watermark: int = -(1 << 62)
    #: Event-time windows: whether the window moves its own watermark from the messages it
    #: sees (as without runtime watermarks, ``ctx.external_watermarks`` off, or where the
    #: runtime names it in ``ctx.own_watermarks``) rather than taking the runtime's through
    #: ``on_watermark``. Set once at ``init`` from the context, never changed after
    local_watermark: bool = False
    #: Windows that may hold messages ahead of their watermark (a session window): whether
    #: messages may come to it out of event-time order below the watermark (several producers,
    #: an async step, a declared bound); the runtime sets it once the operator is built
    hold_ahead: bool = False

    def keyed_by(self) -> Callable[[Any], Any] | None:
        """For an operator whose one output is ``KV(key_fn(m), m)`` (a ``partition_by`` with no
        value function): ``key_fn``, which the runtime may call itself over a batch. None
        otherwise."""
        return None

    def process_port(self, port: int, message: Any) -> Result:
        return self.process(message)

    def on_timer(self, now_ms: int) -> list[Any]:
        return []

    def on_watermark(self, watermark_ms: int) -> list[Any]:
        return []

    def on_end_of_stream(self) -> list[Any]:
        return []

    def end_of_stream_chunks(self, size: int) -> Iterator[list[Any]]:
        """``on_end_of_stream``'s outputs in lists of about ``size`` (an operator that ends
        with many outputs, a window closing 10^6 panes, makes each list as it is taken, so
        that its outputs need not all be held at once); the streaming runtime passes each
        list downstream before it takes the next."""
        out = self.on_end_of_stream()
        if out:
            yield out

    def flush_state(self) -> None:
        """Write state the operator holds in memory into its stores. The runtime calls it at
        the start of every commit, before the stores are flushed into their changelogs, so a
        checkpoint holds exactly the state as of its offsets."""

    def close(self) -> None:
        for fn in self.user_fns:
            if fn is not None:
                close_fn(fn)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.op_id!r})"


class PassThrough(Operator):
    """An operator whose output is its input: merge, broadcast, send_to a stream (the runtime
    produces what these return)."""

    def process(self, message: Any) -> list[Any]:
        return [message]

    def one_to_one(self) -> Callable[[Any], Any]:
        return IDENTITY


#: the attribute of an exception raised on a message an operator held (``held_failure``)
_HELD_FROM = "samza_held_from"


def held_failure(exc: BaseException, source: tuple[str, int, int | None] | None) -> None:
    """Marks ``exc`` as raised on a message the operator had held (a session window's message
    ahead of the watermark, taken in later): ``source`` is where that message was read
    (``OperatorContext.source`` then), None when it was held before a restore. The runtime's
    error then names it, not the message the task has in hand."""
    # an exception with no attributes of its own stays unmarked: the message in hand's
    with contextlib.suppress(TypeError):
        vars(exc)[_HELD_FROM] = source if source is not None else ()


def held_source(exc: BaseException) -> tuple[Any, ...] | None:
    """What ``held_failure`` marked: the held message's ``(stream, partition, offset)``, ``()``
    for one held before a restore (where it was read is not kept), None for no held message."""
    try:
        return vars(exc).get(_HELD_FROM)
    except TypeError:  # no attributes of its own: never marked
        return None
