"""Spec graph node keys and opcode tables."""

from __future__ import annotations

from samza_dsl.spec import (
    OPCODES,
    TERMINAL_OPCODES,
    AsyncFlatMapSpec,
    BroadcastSpec,
    FilterSpec,
    FlatMapSpec,
    JoinSpec,
    JoinTableSpec,
    MapSpec,
    MergeSpec,
    PartitionBySpec,
    SendToSpec,
    SinkSpec,
    WindowSpec,
    node_stream_id,
    stream_node,
    table_node,
)

API_OPCODES = ("map", "filter", "flat_map", "async_flat_map", "merge", "partition_by",
               "broadcast", "window", "join", "join_table", "send_to", "sink")


def test_node_keys():
    assert stream_node("in") == "stream:in"
    assert table_node("t") == "table:t"
    assert node_stream_id("stream:a-1-partition_by-p") == "a-1-partition_by-p"
    assert node_stream_id("table:t") is None
    assert node_stream_id("a-1-map-0") is None


def test_opcodes_are_the_api_opcodes():
    assert OPCODES == API_OPCODES
    specs = (MapSpec, FilterSpec, FlatMapSpec, AsyncFlatMapSpec, MergeSpec, PartitionBySpec,
             BroadcastSpec, WindowSpec, JoinSpec, JoinTableSpec, SendToSpec, SinkSpec)
    assert tuple(s.opcode for s in specs) == API_OPCODES
    # partition_by and broadcast are terminal for the sub-DAG above them (docs/semantics.md rule 1)
    assert {"partition_by", "broadcast", "send_to", "sink"} == TERMINAL_OPCODES
