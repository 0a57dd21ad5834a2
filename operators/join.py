"""Stream-stream join (docs/semantics.md rule 9), as Samza's ``PartialJoinOperatorImpl`` pair.

Each side keeps only its latest message per key with the processing time it arrived
(``ctx.clock()``; a wall clock that steps back reads, for the join, as the latest time it read
until it passes it, so arrivals never go back), in ``ctx.store(f"{op_id}-L")`` and
``ctx.store(f"{op_id}-R")`` as ``key -> (arrival_ms, message)``. A message (``process_port(0, m)`` left, ``process_port(1, m)``
right) is stored first, then the other side is looked up under the same key; when the other entry
is younger than the TTL (``now - its arrival < ttl_ms``, strictly) the output is
``combine(left, right)``, the left message always first. A None result is dropped.

A None key fails the message with a ``TaskError``, as in Samza (whose stores reject null keys);
filter or map such messages before the join. Where the runtime gives a placement check
(``ctx.placement``, ``operators.placement``), a side's key is checked against the task's
partition before the message is stored: every message at first, then a sample. Beyond Samza, ``on_timer(now_ms)`` (window ticks)
deletes entries with ``now - arrival >= ttl_ms`` from both sides, so state stays bounded; the
entries are found through an in-memory index in arrival order, rebuilt from the stores at init.
An int or str key absent from the other side's index is not looked up in its store (it cannot
be there), so a miss costs no encoding.

Each port's work is one closure over its stores and functions (``one_to_one_port``): the
runtime chains it like a map, with no list per message, and runs it over whole batches.

>>> from datetime import timedelta
>>> from samza_dsl.spec import JoinSpec
>>> from operators.base import OperatorContext
>>> from operators.state import InMemoryState
>>> now = [0]
>>> op = JoinOperator(JoinSpec("j", "j", ("stream:a", "stream:b"), "", key_fn=lambda m: m[0],
...                            other_key_fn=lambda m: m[0], combine=lambda l, r: (l[1], r[1]),
...                            ttl_ms=1000))
>>> op.init(OperatorContext("t0", {}, lambda: now[0], {"j-L": InMemoryState(), "j-R": InMemoryState()}))
>>> op.process_port(1, ("k", "click")), op.process_port(0, ("k", "view"))
([], [('view', 'click')])
>>> now[0] = 1000
>>> op.process_port(0, ("k", "view2"))
[]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from samza_dsl.errors import TaskError
from samza_dsl.spec import JoinSpec

from .base import Operator, OperatorContext, UserContext, resolve_fn

__all__ = ["JoinOperator", "placement_checked"]

_SIDES = ("left", "right")

#: key types whose Python equality is their stores' (``encode_key``: equal keys of these types,
#: and only they, have equal bytes), so that a key of one of them absent from a side's index of
#: arrivals is absent from its store too, and the join skips reading it there
_EXACT = frozenset({int, str})


def placement_checked(arrive: Callable[[Any], Any], key_fn: Callable[[Any], Any],
                      check: Callable[[Any], int]) -> Callable[[Any], Any]:
    """``arrive`` with its key's placement checked first, on the messages ``check`` asks for
    (a side that is not checked runs ``arrive`` itself, at no cost)."""
    left = 1  # messages until the next check

    def checked(message: Any) -> Any:
        nonlocal left
        left -= 1
        if not left:
            key = key_fn(message)
            left = 1 if key is None else check(key)  # a None key fails in arrive
        return arrive(message)
    return checked


class JoinOperator(Operator):
    """See the module docstring. Needs stores ``<op id>-L`` and ``<op id>-R``."""

    opcode = "join"

    def __init__(self, spec: JoinSpec) -> None:
        super().__init__(spec)
        self.ttl_ms = spec.ttl_ms
        self.user_fns = (spec.key_fn, spec.other_key_fn, spec.combine)
        self._key_fns = (resolve_fn(spec.key_fn), resolve_fn(spec.other_key_fn))
        self._combine = resolve_fn(spec.combine)
        # per side: key -> arrival ms, ordered by arrival (a key moves to the end when it is
        # replaced), so a purge stops at the first entry that is still young
        self._arrivals: tuple[dict[Any, int], dict[Any, int]] = ({}, {})
        self._ports: tuple[Callable[[Any], Any], ...] = ()

    def init(self, ctx: OperatorContext, user_ctx: UserContext | None = None) -> None:
        super().init(ctx, user_ctx)
        self._stores = (ctx.store(f"{self.op_id}-L"), ctx.store(f"{self.op_id}-R"))
        self._clock = ctx.clock
        self._clock_ns = ctx.clock_ns
        self._placement = ctx.placement
        for store, arrivals in zip(self._stores, self._arrivals, strict=True):
            arrivals.clear()
            entries = sorted((entry[0], i, key) for i, (key, entry) in enumerate(store.all()))
            for ts, _, key in entries:
                arrivals[key] = ts
        self._ports = self._make_ports()

    def _make_ports(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        """The function of each port: the message stored, the other side looked up, the
        output or None."""
        clock, ttl, combine = self._clock, self.ttl_ms, self._combine
        # a wall clock in ms that says what it reads (``ns``) is read in ns, its ms computed
        # once per ms (the messages of one ms share the int); a clock stepped back reads as
        # the latest ms read until it passes it, so arrivals never go back (``_arrivals``
        # stays in time order)
        ns = self._clock_ns
        ms = edge = 0  # the latest ms read, and the first ns after it

        def port_fn(port: int) -> Callable[[Any], Any]:
            key_fn = self._key_fns[port]
            put = self._stores[port].put
            get = self._stores[1 - port].get
            arrivals = self._arrivals[port]
            unlist = arrivals.pop
            # the other side's keys: an int or str key not among them is not in its store
            # (``_EXACT``)
            others = self._arrivals[1 - port]
            op_id, side = self.op_id, _SIDES[port]

            def arrive(message: Any) -> Any:
                nonlocal ms, edge
                key = key_fn(message)
                if key is None:
                    raise TaskError(f"join {op_id!r}: the {side} key of {message!r} is None; a "
                                    f"join needs a key on both sides (as in Samza): filter out "
                                    f"or map such messages before the join", op_id=op_id)
                if ns is None:
                    now = clock()
                else:
                    t = ns()
                    if t >= edge:
                        ms = t // 1_000_000
                        edge = (ms + 1) * 1_000_000
                    now = ms
                unlist(key, None)
                arrivals[key] = now
                put(key, (now, message))
                if key not in others and type(key) in _EXACT:
                    return None
                other = get(key)
                if other is None or now - other[0] >= ttl:
                    return None
                return combine(message, other[1]) if port == 0 else combine(other[1], message)
            check = self._placement(op_id, port) if self._placement is not None else None
            return arrive if check is None else placement_checked(arrive, key_fn, check)
        return port_fn(0), port_fn(1)

    def one_to_one_port(self, port: int) -> Callable[[Any], Any]:
        """Each port gives at most one output (None: no match, or ``combine`` gave None)."""
        return self._ports[port]

    def process(self, message: Any) -> list[Any]:
        return self.process_port(0, message)

    def process_port(self, port: int, message: Any) -> list[Any]:
        result = self._ports[port](message)
        return [] if result is None else [result]

    def on_timer(self, now_ms: int) -> list[Any]:
        horizon = now_ms - self.ttl_ms
        for store, arrivals in zip(self._stores, self._arrivals, strict=True):
            expired = []
            for key, ts in arrivals.items():
                if ts > horizon:
                    break
                expired.append(key)
            for key in expired:
                del arrivals[key]
                store.delete(key)
        return []

    def state_size(self) -> tuple[int, int]:
        """How many keys each side holds (left, right)."""
        return len(self._arrivals[0]), len(self._arrivals[1])
