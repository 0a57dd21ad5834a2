"""partition_by and broadcast: the records they hand the runtime to produce."""

from __future__ import annotations

from typing import Any

from operators import build_operator
from operators.hashing import KeyPartitioner
from operators.partition_by import BroadcastOperator, PartitionByOperator
from samza_dsl.kv import KV
from samza_dsl.spec import BroadcastSpec, PartitionBySpec


def test_key_and_value_functions() -> None:
    op = build_operator(PartitionBySpec("app-1-partition_by-p", "p", ("stream:in",), "",
                                        key_fn=lambda m: m["country"],
                                        value_fn=lambda m: m["user"]))
    assert isinstance(op, PartitionByOperator) and op.stream_id == "app-1-partition_by-p"
    assert op.process({"country": "NZ", "user": 7}) == [KV("NZ", 7)]


def test_without_a_value_function_the_message_is_the_value() -> None:
    op = build_operator(PartitionBySpec("p", "p", ("stream:in",), "", key_fn=lambda m: m % 3))
    assert op.process(7) == [KV(1, 7)]


def test_falsy_values_and_none_keys_are_kept() -> None:
    op = build_operator(PartitionBySpec("p", "p", ("stream:in",), "", key_fn=lambda m: None,
                                        value_fn=lambda m: 0))
    [record] = op.process("x")
    assert record == KV(None, 0)
    # the runtime sends a None key to partition 0
    assert KeyPartitioner(4, lambda k: str(k).encode())(record.key) == 0


def test_broadcast_passes_messages_on() -> None:
    op = build_operator(BroadcastSpec("app-1-broadcast-b", "b", ("stream:in",), ""))
    assert isinstance(op, BroadcastOperator) and op.stream_id == "app-1-broadcast-b"
    msg: Any = {"rule": 1}
    assert op.process(msg) == [msg]
