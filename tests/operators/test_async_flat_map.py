"""async_flat_map: result shapes, ordering "none" and "key", and per-key bookkeeping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from operators import build_operator
from operators.async_flat_map import AsyncFlatMapOperator
from samza_dsl.kv import KV
from samza_dsl.spec import AsyncFlatMapSpec

TIMEOUT = 2.0


def start(fn: Any, ordering: str = "none", key_fn: Any = None) -> AsyncFlatMapOperator:
    op = build_operator(AsyncFlatMapSpec("a", None, ("stream:in",), "", fn=fn, ordering=ordering,
                                         key_fn=key_fn))
    assert isinstance(op, AsyncFlatMapOperator)
    return op


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(main(), TIMEOUT * 2))


class Gates:
    """One event per name: a test decides when each call may finish."""

    def __init__(self) -> None:
        self.events: dict[Any, asyncio.Event] = {}
        self.started: list[Any] = []
        self.finished: list[Any] = []

    def __getitem__(self, name: Any) -> asyncio.Event:
        return self.events.setdefault(name, asyncio.Event())

    async def call(self, name: Any, out: Any) -> list[Any]:
        self.started.append(name)
        self[("started", name)].set()
        await asyncio.wait_for(self[name].wait(), TIMEOUT)
        self.finished.append(name)
        return [out]


def test_result_shapes() -> None:
    async def coro_list(m: Any) -> list[Any]:
        await asyncio.sleep(0)
        return [m, m]

    async def coro_none(m: Any) -> None:
        return None

    async def coro_tuple(m: Any) -> tuple[Any, ...]:
        return (m,)

    async def agen(m: Any) -> AsyncIterator[Any]:
        for i in range(m):
            await asyncio.sleep(0)
            yield i

    def sync_awaitable(m: Any) -> Awaitable[list[Any]]:
        return coro_list(m)

    async def main() -> list[Any]:
        return [await start(fn).process(3) for fn in
                (coro_list, coro_none, coro_tuple, agen, sync_awaitable, lambda m: range(m))]

    assert run(main) == [[3, 3], [], [3], [0, 1, 2], [3, 3], [0, 1, 2]]


def test_ordering_none_lets_completions_overtake() -> None:
    gates = Gates()
    op = start(lambda m: gates.call(m, m.upper()))

    async def main() -> None:
        first = asyncio.ensure_future(op.process("a"))
        second = asyncio.ensure_future(op.process("b"))
        await gates[("started", "a")].wait()
        await gates[("started", "b")].wait()
        gates["b"].set()
        assert await asyncio.wait_for(second, TIMEOUT) == ["B"]
        assert not first.done()
        gates["a"].set()
        assert await first == ["A"]

    run(main)


def test_ordering_key_keeps_order_per_key_while_calls_overlap() -> None:
    gates = Gates()
    op = start(lambda kv: gates.call(kv.value, kv.value), ordering="key")
    done_order: list[Any] = []

    async def process(kv: KV[str, str]) -> None:
        done_order.append(await op.process(kv))

    async def main() -> None:
        tasks = [asyncio.ensure_future(process(KV(k, v)))
                 for k, v in [("a", "a1"), ("a", "a2"), ("b", "b1")]]
        # every call is in flight at once: same key and different keys alike
        for name in ("a1", "a2", "b1"):
            await asyncio.wait_for(gates[("started", name)].wait(), TIMEOUT)
        gates["a2"].set()
        gates["b1"].set()
        await asyncio.sleep(0.01)
        # b1 overtook the a's; a2's call finished but its outputs wait for a1's
        assert gates.finished == ["a2", "b1"] and done_order == [["b1"]]
        assert op.pending_keys == 1
        gates["a1"].set()
        await asyncio.gather(*tasks)

    run(main)
    assert done_order == [["b1"], ["a1"], ["a2"]]
    assert op.pending_keys == 0  # no per-key bookkeeping is left behind


def test_different_keys_run_concurrently() -> None:
    """Fails if keys were run one at a time: each call waits until the other key's call has
    started."""
    events: dict[str, asyncio.Event] = {}
    in_flight = [0, 0]  # current, max

    async def fn(kv: KV[str, int]) -> list[Any]:
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        events[kv.key].set()
        other = "b" if kv.key == "a" else "a"
        await asyncio.wait_for(events[other].wait(), TIMEOUT)
        in_flight[0] -= 1
        return [kv.key]

    op = start(fn, ordering="key")

    async def main() -> list[Any]:
        for k in ("a", "b"):
            events[k] = asyncio.Event()
        return await asyncio.gather(op.process(KV("a", 1)), op.process(KV("b", 1)))

    assert run(main) == [["a"], ["b"]]
    assert in_flight[1] == 2


def test_key_function_and_non_kv_messages() -> None:
    async def echo(m: Any) -> list[Any]:
        await asyncio.sleep(0.01 if m["n"] == 1 else 0)
        return [m["n"]]

    op = start(echo, ordering="key", key_fn=lambda m: m["user"])

    async def main() -> list[Any]:
        return await asyncio.gather(*(op.process({"user": "u", "n": n}) for n in (1, 2, 3)))

    assert run(main) == [[1], [2], [3]]
    assert op.pending_keys == 0
    with pytest.raises(TypeError, match="needs KV messages or key=fn"):
        start(echo, ordering="key").process({"user": "u"})


def test_a_failed_call_still_releases_its_key() -> None:
    async def fn(kv: KV[str, int]) -> list[Any]:
        await asyncio.sleep(0.01 if kv.value == 1 else 0)
        if kv.value == 1:
            raise RuntimeError("boom")
        return [kv.value]

    op = start(fn, ordering="key")

    async def main() -> list[Any]:
        return await asyncio.gather(op.process(KV("k", 1)), op.process(KV("k", 2)),
                                    return_exceptions=True)

    first, second = run(main)
    assert isinstance(first, RuntimeError) and second == [2]
    assert op.pending_keys == 0


def test_function_object_gets_init_and_close(make_ctx: Any) -> None:
    calls: list[str] = []

    class Lookup:
        def init(self, ctx: Any) -> None:
            calls.append("init")

        async def apply(self, m: Any) -> list[Any]:
            return [m + 1]

        def close(self) -> None:
            calls.append("close")

    op = start(Lookup())
    op.init(make_ctx())
    assert asyncio.run(op.process(1)) == [2]
    op.close()
    assert calls == ["init", "close"]


def test_unknown_ordering_raises() -> None:
    with pytest.raises(ValueError, match="ordering must be"):
        start(lambda m: m, ordering="offset")
