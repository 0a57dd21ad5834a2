"""``async_flat_map``: ``process(m)`` returns an awaitable of the outputs of ``fn(m)``; and
``async_map``, the same operator where ``fn(m)`` gives one output (None for none).

``fn`` may be an ``async def`` returning an iterable (or None for no outputs), return an async
iterable (an async generator), or be a plain function returning either an awaitable or an iterable.
How many calls are in flight is the runtime's business (``task.max.concurrency``).

- ``ordering="none"``: each awaitable resolves as soon as its call completes, so completions
  overtake each other.
- ``ordering="key"`` (key = ``KV.key``, or ``key(m)``): calls still run concurrently, for
  different keys and for the same key alike, but a message's outputs are released only after the
  previous same-key message's awaitable resolved, so per key the outputs keep arrival order.
  The per-key bookkeeping is dropped as soon as a key has nothing pending.

The operator owns no event loop: the awaitables run on the runtime's loop.

>>> import asyncio
>>> from samza_dsl.spec import AsyncFlatMapSpec
>>> async def twice(m):
...     await asyncio.sleep(0)
...     return [m, m]
>>> op = AsyncFlatMapOperator(AsyncFlatMapSpec("a", None, ("stream:in",), "", fn=twice))
>>> asyncio.run(op.process("x"))
['x', 'x']
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from samza_dsl.kv import KV
from samza_dsl.spec import AsyncFlatMapSpec

from .base import Operator, as_outputs, resolve_fn

__all__ = ["AsyncFlatMapOperator"]


async def _outputs(result: Any, op_id: str) -> list[Any]:
    if inspect.isawaitable(result):
        result = await result
    if type(result) is list:
        return result
    if hasattr(result, "__aiter__"):  # foreign: what a user's function returned
        return [item async for item in result]
    return as_outputs(result, "async_flat_map", op_id)


async def _output(result: Any, op_id: str) -> list[Any]:
    """``async_map``: the one output of a call (None: none)."""
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return []
    if hasattr(result, "__aiter__"):  # foreign: what a user's function returned
        raise TypeError(f"async_map {op_id!r} returned an async iterable, which would emit "
                        f"the iterable itself as one message: return one value, or use "
                        f"async_flat_map for several")
    return [result]


class _Released:
    """Set once a message's outputs are released; the next same-key message waits for it."""

    __slots__ = ("done", "waiter")

    def __init__(self) -> None:
        self.done = False
        self.waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self.done = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def wait(self) -> None:
        if not self.done:
            if self.waiter is None:
                self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter


class AsyncFlatMapOperator(Operator):
    """See the module docstring."""

    opcode = "async_flat_map"

    def __init__(self, spec: AsyncFlatMapSpec) -> None:
        super().__init__(spec)
        self.kind = "async_map" if spec.one else "async_flat_map"
        if spec.ordering not in ("none", "key"):
            raise ValueError(f"{self.kind} {self.op_id!r}: ordering must be 'none' or 'key', "
                             f"got {spec.ordering!r}")
        self.ordering = spec.ordering
        self.user_fns = (spec.fn, spec.key_fn)
        self._fn = resolve_fn(spec.fn)
        self._outputs = _output if spec.one else _outputs
        self._key_fn = resolve_fn(spec.key_fn) if spec.key_fn is not None else None
        #: per key, the release of its latest message (dropped once that one is released)
        self._tails: dict[Any, _Released] = {}

    def process(self, message: Any) -> Any:
        if self.ordering == "none":
            return self._call(message)
        key = self._key(message)
        previous = self._tails.get(key)
        released = self._tails[key] = _Released()
        return self._call_in_order(message, key, previous, released)

    def _key(self, message: Any) -> Any:
        if self._key_fn is not None:
            return self._key_fn(message)
        if not isinstance(message, KV):
            raise TypeError(f"{self.kind} {self.op_id!r} with ordering='key' needs KV messages "
                            f"or key=fn, got {type(message).__name__}")
        return message.key

    async def _call(self, message: Any) -> list[Any]:
        return await self._outputs(self._fn(message), self.op_id)

    async def _call_in_order(self, message: Any, key: Any, previous: _Released | None,
                             released: _Released) -> list[Any]:
        try:
            outputs = await self._outputs(self._fn(message), self.op_id)
            if previous is not None:
                await previous.wait()
            return outputs
        finally:
            released.set()
            if self._tails.get(key) is released:
                del self._tails[key]

    @property
    def pending_keys(self) -> int:
        """How many keys have a message whose outputs are not released yet."""
        return len(self._tails)
