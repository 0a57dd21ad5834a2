"""build_operator: an operator for every opcode, built from a real application's specs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from operators import OPERATORS, build_operator
from operators.base import Operator
from operators.simple import SendToStreamOperator, SendToTableOperator
from operators.window import TumblingWindowOperator
from operators.window_session import SessionWindowOperator
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.spec import OPCODES, MapSpec, OpSpec
from samza_dsl.systems import MemorySystem


def every_opcode_app() -> StreamApplication:
    app = StreamApplication("all")
    mem = MemorySystem()
    kv = KVSerde(StringSerde(), JsonSerde())
    a = app.input(mem.input("a", serde=kv))
    b = app.input(mem.input("b", serde=kv))
    out = app.output(mem.output("out", serde=kv))
    table = app.table("t", serde=kv)

    async def enrich(m: Any) -> list[Any]:
        return [m]

    s = a.map(lambda m: m).filter(lambda m: True).flat_map(lambda m: [m])
    s = s.async_flat_map(enrich).merge(b)
    s = s.partition_by(lambda m: m.key, name="repart")
    s.broadcast(name="bc")
    s.window(Windows.keyed_tumbling(lambda m: m.key, timedelta(seconds=1)), name="tw")
    s.window(Windows.keyed_session(lambda m: m.key, timedelta(seconds=1)), name="sw")
    joined = s.join(b, key=lambda m: m.key, other_key=lambda m: m.key,
                    combine=lambda x, y: KV(x.key, 1), ttl=timedelta(minutes=1), name="j")
    joined.send_to(table)
    b.join_table(table, combine=lambda m, r: m).send_to(out)
    b.sink(print)
    return app


def test_every_opcode_builds_its_operator() -> None:
    assert set(OPERATORS) == set(OPCODES)
    specs = every_opcode_app().spec().operators
    assert {spec.opcode for spec in specs} == set(OPCODES)
    for spec in specs:
        op = build_operator(spec)
        assert isinstance(op, Operator)
        assert op.opcode == spec.opcode and op.op_id == spec.op_id and op.spec is spec
    kinds = {type(build_operator(spec)) for spec in specs}
    assert {TumblingWindowOperator, SessionWindowOperator, SendToStreamOperator,
            SendToTableOperator} <= kinds


def test_every_instance_is_fresh() -> None:
    spec = MapSpec("m", None, ("stream:in",), "", fn=str)
    assert build_operator(spec) is not build_operator(spec)


def test_unknown_opcode_raises() -> None:
    class Odd(OpSpec):
        opcode = "teleport"

    with pytest.raises(ValueError, match="no operator for opcode 'teleport' of 'x'"):
        build_operator(Odd("x", None, (), ""))
