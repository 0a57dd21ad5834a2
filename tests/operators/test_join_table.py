"""Stream-table join (docs/semantics.md rule 10)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from operators import build_operator
from operators.base import OperatorContext
from operators.join_table import JoinTableOperator
from operators.state import InMemoryState
from samza_dsl.kv import KV
from samza_dsl.spec import JoinTableSpec


def start(make_ctx: Callable[..., OperatorContext], combine: Any,
          key_fn: Callable[[Any], Any] | None = None) -> tuple[JoinTableOperator, InMemoryState]:
    table = InMemoryState()
    table.put("u1", {"name": "Ada"})
    op = build_operator(JoinTableSpec("app-1-join_table-p", "p", ("stream:clicks",), "",
                                      table_id="profiles", combine=combine, key_fn=key_fn))
    assert isinstance(op, JoinTableOperator)
    op.init(make_ctx(stores={"profiles": table}))
    return op, table


def left_join(m: Any, record: Any) -> Any:
    return (m, record)


def test_hit_and_miss(make_ctx: Any) -> None:
    op, _ = start(make_ctx, left_join)
    assert op.process(KV("u1", "click")) == [(KV("u1", "click"), KV("u1", {"name": "Ada"}))]
    assert op.process(KV("u2", "click")) == [(KV("u2", "click"), None)]


def test_sees_table_updates(make_ctx: Any) -> None:
    op, table = start(make_ctx, left_join)
    table.put("u2", {"name": "Bo"})
    table.delete("u1")
    assert op.process(KV("u2", 1)) == [(KV("u2", 1), KV("u2", {"name": "Bo"}))]
    assert op.process(KV("u1", 1)) == [(KV("u1", 1), None)]


def test_key_function_and_none_key_skips_the_lookup(make_ctx: Any) -> None:
    looked_up: list[Any] = []
    op, table = start(make_ctx, left_join, key_fn=lambda m: m.get("user"))
    table.put(None, "never read")  # a None key must not reach the table
    get = op._get
    op._get = lambda k: looked_up.append(k) or get(k)  # type: ignore[method-assign]
    assert op.process({"user": "u1"}) == [({"user": "u1"}, KV("u1", {"name": "Ada"}))]
    assert op.process({"page": "/"}) == [({"page": "/"}, None)]
    assert looked_up == ["u1"]


def test_none_result_is_dropped_for_an_inner_join(make_ctx: Any) -> None:
    op, _ = start(make_ctx, lambda m, r: None if r is None else r.value["name"])
    assert op.process(KV("u1", 1)) == ["Ada"]
    assert op.process(KV("u9", 1)) == []


def test_non_kv_message_without_key_function_raises(make_ctx: Any) -> None:
    op, _ = start(make_ctx, left_join)
    with pytest.raises(TypeError, match="give join_table a key= function"):
        op.process({"user": "u1"})


def test_combine_object_gets_init_and_close(make_ctx: Any) -> None:
    calls: list[str] = []

    class Enrich:
        def init(self, ctx: Any) -> None:
            calls.append(f"init {ctx.task_name}")

        def apply(self, m: Any, record: Any) -> Any:
            return record.value["name"] if record else "?"

        def close(self) -> None:
            calls.append("close")

    op, _ = start(make_ctx, Enrich())
    assert op.process(KV("u1", 0)) == ["Ada"] and op.process(KV("x", 0)) == ["?"]
    op.close()
    assert calls == ["init task-0", "close"]
