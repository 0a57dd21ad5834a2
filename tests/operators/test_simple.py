"""map, filter, flat_map, merge, sink and send_to."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from operators import build_operator
from operators.base import OperatorContext, UserContext
from operators.simple import (
    FilterOperator,
    FlatMapOperator,
    MapOperator,
    MergeOperator,
    SendToStreamOperator,
    SendToTableOperator,
    SinkOperator,
)
from operators.state import InMemoryState
from samza_dsl.kv import KV
from samza_dsl.spec import (
    FilterSpec,
    FlatMapSpec,
    MapSpec,
    MergeSpec,
    SendToSpec,
    SinkSpec,
)


def run(op: Any, messages: list[Any]) -> list[Any]:
    out: list[Any] = []
    for m in messages:
        result = op.process(m)
        assert type(result) is list
        out += result
    return out


def test_map_drops_none(make_ctx: Any) -> None:
    op = build_operator(MapSpec("m", None, ("stream:in",), "", fn=lambda x: x * 10 if x else None))
    assert isinstance(op, MapOperator)
    op.init(make_ctx())
    assert run(op, [1, 0, 2, None]) == [10, 20]


def test_filter(make_ctx: Any) -> None:
    op = build_operator(FilterSpec("f", None, ("stream:in",), "", fn=lambda x: x % 2))
    assert isinstance(op, FilterOperator)
    assert run(op, [1, 2, 3, 4]) == [1, 3]


def test_flat_map_takes_any_iterable_and_none(make_ctx: Any) -> None:
    def split(x: Any) -> Any:
        if x is None:
            return None
        return x.split() if " " in x else (c for c in x)

    op = build_operator(FlatMapSpec("fm", None, ("stream:in",), "", fn=split))
    assert isinstance(op, FlatMapOperator)
    assert run(op, ["a b", None, "xy", ""]) == ["a", "b", "x", "y"]


def test_merge_is_identity() -> None:
    op = build_operator(MergeSpec("mg", None, ("stream:a", "stream:b"), ""))
    assert isinstance(op, MergeOperator)
    assert op.process(KV(1, 2)) == [KV(1, 2)]
    assert op.process_port(1, "x") == ["x"]


def test_sync_sink_returns_an_empty_list(make_ctx: Any) -> None:
    seen: list[Any] = []
    op = build_operator(SinkSpec("s", None, ("stream:in",), "", fn=seen.append))
    assert isinstance(op, SinkOperator)
    assert run(op, [1, 2]) == [] and seen == [1, 2]


def test_async_sink_returns_an_awaitable_of_an_empty_list() -> None:
    seen: list[Any] = []

    async def write(m: Any) -> str:
        await asyncio.sleep(0)
        seen.append(m)
        return "ignored"

    op = build_operator(SinkSpec("s", None, ("stream:in",), "", fn=write))
    result = op.process("m")
    assert inspect.isawaitable(result) and seen == []
    assert asyncio.run(result) == [] and seen == ["m"]


def test_send_to_stream_passes_messages_on_for_the_producer() -> None:
    op = build_operator(SendToSpec("st", None, ("stream:in",), "", stream_id="out"))
    assert isinstance(op, SendToStreamOperator) and op.stream_id == "out"
    assert op.process(KV("k", "v")) == [KV("k", "v")] and op.process("plain") == ["plain"]


def test_send_to_table_puts_and_deletes(make_ctx: Any) -> None:
    table = InMemoryState()
    op = build_operator(SendToSpec("st", None, ("stream:in",), "", table_id="counts"))
    assert isinstance(op, SendToTableOperator)
    op.init(make_ctx(stores={"counts": table}))
    assert run(op, [KV("a", 1), KV("b", 2), KV("a", 3), KV("b", None)]) == []
    assert list(table.all()) == [("a", 3)]
    with pytest.raises(TypeError, match="takes KV"):
        op.process(("a", 1))


def test_send_to_table_needs_its_store(make_ctx: Any) -> None:
    op = build_operator(SendToSpec("st", None, ("stream:in",), "", table_id="counts"))
    with pytest.raises(KeyError, match="no store 'counts'"):
        op.init(make_ctx("other"))


class Doubler:
    """A Samza-style function object with ``apply`` and a lifecycle."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.factor = 0

    def init(self, ctx: Any) -> None:
        self.calls.append(f"init {ctx.task_name} {ctx.table('t')!r}")
        self.factor = 2

    def apply(self, m: Any) -> Any:
        return m * self.factor

    def close(self) -> None:
        self.calls.append("close")


class Callable3:
    def __call__(self, m: Any) -> Any:
        return m * 3


@pytest.mark.parametrize("spec_cls", [MapSpec, FlatMapSpec, FilterSpec, SinkSpec])
def test_function_objects_get_init_and_close(spec_cls: Any, make_ctx: Any) -> None:
    fn = Doubler()
    op = build_operator(spec_cls("x", None, ("stream:in",), "", fn=fn))
    op.init(make_ctx(), UserContext("task-0", {}, None, {"t": "table-t"}))
    assert fn.calls == ["init task-0 'table-t'"]
    message = ["a", "b"] if spec_cls is FlatMapSpec else 2  # flat_map: a list of four outputs
    expected = {MapSpec: [4], FlatMapSpec: ["a", "b", "a", "b"], FilterSpec: [2], SinkSpec: []}
    assert op.process(message) == expected[spec_cls]
    op.close()
    assert fn.calls[-1] == "close"


def test_callable_objects_and_plain_functions_need_no_lifecycle(make_ctx: Any) -> None:
    op = build_operator(MapSpec("m", None, ("stream:in",), "", fn=Callable3()))
    op.init(make_ctx())
    assert op.process(2) == [6]
    op.close()
    flat = build_operator(FlatMapSpec("fm", None, ("stream:in",), "",
                                      fn=lambda m: [m] * 2))
    flat.init(make_ctx())
    assert flat.process(1) == [1, 1]
    flat.close()


def test_base_init_without_user_context_gives_functions_a_context(make_ctx: Any) -> None:
    fn = Doubler()
    op = build_operator(MapSpec("m", None, ("stream:in",), "", fn=fn))
    ctx: OperatorContext = make_ctx()
    with pytest.raises(KeyError, match="no table 't'"):
        op.init(ctx)  # Doubler asks for table 't', which a bare context does not have
