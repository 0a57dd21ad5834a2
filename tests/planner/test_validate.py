"""Validation of the spec graph (docs/semantics.md rule 3): each error names the culprit."""

from __future__ import annotations

import dataclasses
import re

import pytest

from planner import plan
from planner.validate import validate
from samza_dsl import PlanError, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

MEM = MemorySystem()
KV_JSON = KVSerde(StringSerde(), JsonSerde())


def test_a_valid_graph_passes():
    app = StreamApplication("v")
    app.input(MEM.input("in")).map(str).send_to(app.output(MEM.output("out")))
    validate(app.spec())


def test_input_with_no_consumer_raises_naming_it():
    app = StreamApplication("v")
    app.input(MEM.input("used")).sink(print)
    app.input(MEM.input("unused"))
    with pytest.raises(PlanError, match="input stream 'unused' has no consumer"):
        app.plan()


def test_output_with_no_producer_raises_naming_it():
    app = StreamApplication("v")
    app.input(MEM.input("in")).sink(print)
    app.output(MEM.output("lonely"))
    with pytest.raises(PlanError, match="output stream 'lonely' has no producer"):
        app.plan()


@pytest.mark.parametrize("opcode", ["partition_by", "broadcast"])
def test_intermediate_stream_with_no_consumer_raises_naming_it(opcode):
    app = StreamApplication("v")
    s = app.input(MEM.input("in"))
    if opcode == "partition_by":
        s.partition_by(str, name="dangling")
    else:
        s.broadcast(name="dangling")
    with pytest.raises(PlanError, match=re.escape(f"'v-1-{opcode}-dangling' written by operator")):
        app.plan()


def test_application_without_operators_raises_naming_the_job():
    with pytest.raises(PlanError, match="'empty-1' has no operators"):
        StreamApplication("empty").plan()


def test_an_operator_without_a_consumer_is_fine():
    app = StreamApplication("v")
    s = app.input(MEM.input("in"))
    s.map(str)  # its result is never used: not an error
    s.sink(print)
    assert len(app.plan().stages) == 1


# -- specs that the DSL cannot build, but a hand-made ApplicationSpec can --------------------

def _spec():
    app = StreamApplication("v")
    t = app.table("t", serde=KV_JSON)
    s = app.input(MEM.input("in", serde=KV_JSON))
    s.join_table(t, combine=max, name="jt").send_to(app.output(MEM.output("out")))
    s.send_to(t)
    s.partition_by(str, name="p").sink(print)
    return app.spec()


def test_reading_an_unregistered_stream_raises():
    spec = _spec()
    with pytest.raises(PlanError, match="reads stream 'in', which is not an input"):
        plan(dataclasses.replace(spec, inputs={}))


def test_sending_to_an_unregistered_output_raises():
    spec = _spec()
    with pytest.raises(PlanError, match="'v-1-send_to-1' sends to 'out'"):
        plan(dataclasses.replace(spec, outputs={}))


def test_unknown_tables_raise():
    spec = _spec()
    with pytest.raises(PlanError, match="'v-1-join_table-jt' joins unknown table 't'"):
        plan(dataclasses.replace(spec, tables={}))


def test_reading_an_unknown_operator_raises():
    spec = _spec()
    ops = tuple(op for op in spec.operators if op.op_id != "v-1-join_table-jt")
    with pytest.raises(PlanError, match="reads from unknown operator 'v-1-join_table-jt'"):
        plan(dataclasses.replace(spec, operators=ops))


def test_partition_by_without_its_stream_raises():
    spec = _spec()
    with pytest.raises(PlanError, match="'v-1-partition_by-p' has no intermediate stream"):
        plan(dataclasses.replace(spec, intermediates={}))
