"""Partition counts of intermediate streams, docs/semantics.md rule 2:
(a) joined sets (incl. send_to(table) -> join_table(table)) are co-partitioned, propagating known
counts until nothing changes; (b) else job.intermediate.stream.partitions; (c) else the max of
all input and output streams (1 when none is known). Broadcast streams have 1 partition."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from samza_dsl import PlanError, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

MEM = MemorySystem()
KV_JSON = KVSerde(StringSerde(), JsonSerde())


class App:
    """A small builder: inputs, repartitions and joins by short names."""

    def __init__(self, **config):
        self.app = StreamApplication("app", config=config or None)

    def input(self, sid, partitions=None):
        return self.app.input(MEM.input(sid, partitions=partitions))

    def output(self, sid, partitions=None):
        return self.app.output(MEM.output(sid, partitions=partitions))

    def repartition(self, stream, name):
        return stream.partition_by(lambda m: m, name=name)

    @staticmethod
    def join(left, right, name):
        return left.join(right, key=str, other_key=str, combine=lambda a, b: (a, b),
                         ttl=timedelta(seconds=5), name=name)

    def plan(self, **kw):
        return self.app.plan(**kw)


def pb(name):
    return f"app-1-partition_by-{name}"


def counts(plan):
    return {sid.rsplit("-", 1)[-1]: s.partitions for sid, s in plan.intermediate_streams.items()}


# -- (a) joins -----------------------------------------------------------------------------------

@pytest.mark.parametrize("known_side", ["left", "right"])
def test_join_gives_the_known_count_to_an_intermediate_on_either_side(known_side):
    a = App(**{"job.intermediate.stream.partitions": 9})
    known = a.input("known", 4)
    p = a.repartition(a.input("raw", 16), "p")
    left, right = (known, p) if known_side == "left" else (p, known)
    a.join(left, right, "j").sink(print)
    a.output("out", 32)  # not joined: cannot override the join
    a.input("other", 2).send_to(a.output("out", 32))
    assert counts(a.plan()) == {"p": 4}


def test_a_chain_of_joins_propagates_over_several_rounds():
    # p1-p2, p2-p3 and p3-known are joined, registered in the order that needs three rounds
    a = App()
    raw = a.input("raw", 16)
    p1, p2, p3 = (a.repartition(raw.map(str), n) for n in ("p1", "p2", "p3"))
    p4 = a.repartition(raw.filter(bool), "p4")
    a.join(p1, p2, "j12").sink(print)
    a.join(p2, p3, "j23").sink(print)
    a.join(p3, a.input("known", 6), "j3k").sink(print)
    p4.sink(print)
    assert counts(a.plan()) == {"p1": 6, "p2": 6, "p3": 6, "p4": 16}


def test_joined_sets_follow_merges_and_chains_of_operators():
    a = App()
    raw = a.input("raw", 2)
    p1 = a.repartition(raw, "p1")
    p2 = a.repartition(raw, "p2")
    side = p1.map(str).merge(p2.filter(bool)).flat_map(list)
    a.join(a.input("known", 5).map(str), side, "j").sink(print)
    assert counts(a.plan()) == {"p1": 5, "p2": 5}


def test_join_of_two_unknown_intermediates_uses_the_default_for_both():
    a = App(**{"job.intermediate.stream.partitions": 7})
    raw = a.input("raw", 3)
    a.join(a.repartition(raw, "p1"), a.repartition(raw.map(str), "p2"), "j").sink(print)
    assert counts(a.plan()) == {"p1": 7, "p2": 7}
    b = App()
    raw = b.input("raw", 3)
    b.join(b.repartition(raw, "p1"), b.repartition(raw.map(str), "p2"), "j").sink(print)
    assert counts(b.plan()) == {"p1": 3, "p2": 3}


def test_join_of_an_unknown_input_and_an_intermediate_falls_back_to_the_default():
    # an input without a count is told by its system at run time; it gives nothing to infer from
    a = App()
    a.join(a.input("unknown"), a.repartition(a.input("raw", 4), "p"), "j").sink(print)
    assert counts(a.plan()) == {"p": 4}


def test_a_known_count_passes_through_an_input_of_unknown_count():
    # p meets `unknown` at j1, and `unknown` meets `known` (1) at j2: all three are one joined
    # set, so p must have 1 partition, not the default
    a = App(**{"job.intermediate.stream.partitions": 2})
    unknown = a.input("unknown")
    a.join(a.repartition(a.input("raw", 8), "p"), unknown, "j1").sink(print)
    a.join(a.input("known", 1), unknown.map(str), "j2").sink(print)
    plan = a.plan()
    assert counts(plan) == {"p": 1}
    assert plan.input_streams["unknown"].partitions is None  # its system tells at run time


def test_an_input_of_unknown_count_cannot_match_two_counts():
    a = App()
    unknown = a.input("unknown")
    a.join(unknown, a.input("x", 2), "j1").sink(print)
    a.join(unknown.map(str), a.input("y", 4), "j2").sink(print)
    with pytest.raises(PlanError) as info:
        a.plan()
    m = mismatch(info.value)
    assert {m["expected"], m["actual"]} == {"2", "4"}
    assert "'unknown'" in str(info.value) and "inferred" in str(info.value)


def test_count_given_for_an_intermediate_propagates_through_its_joins():
    a = App(**{"job.intermediate.stream.partitions": 9})
    raw = a.input("raw", 1)
    p1, p2 = a.repartition(raw, "p1"), a.repartition(raw.map(str), "p2")
    a.join(p1, p2, "j").sink(print)
    assert counts(a.plan(partitions={pb("p1"): 3})) == {"p1": 3, "p2": 3}


def test_join_propagation_goes_into_an_intermediate_that_is_itself_repartitioned():
    a = App()
    p1 = a.repartition(a.input("raw", 8), "p1")
    p2 = a.repartition(p1.map(str), "p2")  # p2 is read from p1's stage
    a.join(a.input("known", 2), p2, "j").sink(print)
    assert counts(a.plan()) == {"p1": 8, "p2": 2}


# -- (a) tables ----------------------------------------------------------------------------------

@pytest.mark.parametrize("writer_known", [True, False])
def test_table_joins_its_writers_and_readers(writer_known):
    a = App(**{"job.intermediate.stream.partitions": 9})
    t = a.app.table("t", serde=KV_JSON)
    known = a.input("known", 6)
    p = a.repartition(a.input("raw", 12), "p")
    writer, reader = (known, p) if writer_known else (p, known)
    writer.send_to(t)
    reader.join_table(t, combine=lambda m, r: m).sink(print)
    assert counts(a.plan()) == {"p": 6}


def test_table_with_several_writers_and_readers_is_one_joined_set():
    a = App()
    t = a.app.table("t", serde=KV_JSON)
    raw = a.input("raw", 12)
    a.repartition(raw, "w1").send_to(t)
    a.repartition(raw.map(str), "r1").join_table(t, combine=lambda m, r: m).sink(print)
    a.input("known", 3).send_to(t)
    a.repartition(raw.filter(bool), "r2").join_table(t, combine=lambda m, r: m).sink(print)
    assert counts(a.plan()) == {"w1": 3, "r1": 3, "r2": 3}


def test_table_without_readers_joins_nothing():
    a = App()
    t = a.app.table("t", serde=KV_JSON)
    a.input("known", 3).send_to(t)
    a.repartition(a.input("raw", 12), "p").send_to(t)
    assert counts(a.plan()) == {"p": 12}


def test_table_and_stream_joins_chain():
    a = App()
    t = a.app.table("t", serde=KV_JSON)
    raw = a.input("raw", 12)
    p1, p2 = a.repartition(raw, "p1"), a.repartition(raw.map(str), "p2")
    p1.send_to(t)
    a.join(p2.join_table(t, combine=lambda m, r: m), a.input("known", 5), "j").sink(print)
    assert counts(a.plan()) == {"p1": 5, "p2": 5}


# -- (b) config, (c) max of inputs and outputs, 1 ------------------------------------------------

def test_config_default_for_unjoined_intermediates():
    a = App(**{"job.intermediate.stream.partitions": 5})
    a.repartition(a.input("raw", 8), "p").send_to(a.output("out", 16))
    assert counts(a.plan()) == {"p": 5}
    # plan(config=...) too, over the application's config
    assert counts(a.plan(config={"job.intermediate.stream.partitions": "3"})) == {"p": 3}


def test_max_of_inputs_and_outputs():
    a = App()
    a.repartition(a.input("a", 2).merge(a.input("b", 3)), "p").send_to(a.output("out", 7))
    a.input("c").sink(print)  # unknown counts are left out
    assert counts(a.plan()) == {"p": 7}
    b = App()
    b.repartition(b.input("a", 4), "p").send_to(b.output("out"))
    assert counts(b.plan()) == {"p": 4}


def test_counts_given_to_plan_count_towards_the_max():
    a = App()
    a.repartition(a.input("a"), "p").send_to(a.output("out"))
    assert counts(a.plan(partitions={"a": 6, "out": 2})) == {"p": 6}
    assert a.plan(partitions={"a": 6}).input_streams["a"].partitions == 6


def test_one_partition_when_nothing_is_known():
    a = App()
    a.repartition(a.input("a"), "p").send_to(a.output("out"))
    assert counts(a.plan()) == {"p": 1}


# -- broadcast -----------------------------------------------------------------------------------

def test_broadcast_has_one_partition_whatever_the_defaults():
    a = App(**{"job.intermediate.stream.partitions": 8})
    b = a.input("a", 16).broadcast(name="b")
    b.sink(print)
    plan = a.plan()
    assert plan.intermediate_streams["app-1-broadcast-b"].partitions == 1
    assert plan.intermediate_streams["app-1-broadcast-b"].kind == "broadcast"


def test_broadcast_takes_no_part_in_co_partitioning():
    # every task reads the whole broadcast stream, so joining it with 4 partitions is fine
    a = App()
    b = a.input("small", 3).broadcast(name="b")
    a.join(a.input("big", 4), b, "j").sink(print)
    plan = a.plan()
    assert plan.intermediate_streams["app-1-broadcast-b"].partitions == 1


def test_broadcast_with_another_count_raises_naming_it():
    a = App()
    a.input("a", 2).broadcast(name="b").sink(print)
    with pytest.raises(PlanError, match=re.escape("'app-1-broadcast-b'")):
        a.plan(partitions={"app-1-broadcast-b": 2})
    assert a.plan(partitions={"app-1-broadcast-b": 1}).streams["app-1-broadcast-b"].partitions == 1


# -- mismatches ----------------------------------------------------------------------------------

MISMATCH = re.compile(r"Unable to resolve input partitions of stream '(?P<stream>[^']+)' for join "
                      r"(?P<join>.+?)\. Expected (?P<expected>\d+), actual (?P<actual>\d+)")


def mismatch(err: PlanError) -> dict[str, str]:
    found = MISMATCH.search(str(err))
    assert found, str(err)
    return found.groupdict()


def test_join_of_inputs_with_different_counts_raises():
    a = App()
    a.join(a.input("x", 2), a.input("y", 4), "j").sink(print)
    with pytest.raises(PlanError) as info:
        a.plan()
    m = mismatch(info.value)
    assert m["stream"] in ("x", "y")
    assert "'app-1-join-j'" in m["join"]
    assert {m["expected"], m["actual"]} == {"2", "4"}
    assert ("x" if m["stream"] == "y" else "y") in str(info.value)  # names the other stream


def test_mismatch_through_a_chain_of_joins_raises():
    a = App()
    p = a.repartition(a.input("raw", 8), "p")
    a.join(p, a.input("x", 2), "j1").sink(print)
    a.join(p.map(str), a.input("y", 4), "j2").sink(print)
    with pytest.raises(PlanError) as info:
        a.plan()
    m = mismatch(info.value)
    assert {m["expected"], m["actual"]} == {"2", "4"}
    assert "app-1-join-j1" in m["join"] or "app-1-join-j2" in m["join"]


def test_mismatch_with_an_intermediate_count_given_to_plan_raises():
    a = App()
    a.join(a.repartition(a.input("raw", 8), "p"), a.input("y", 4), "j").sink(print)
    with pytest.raises(PlanError) as info:
        a.plan(partitions={pb("p"): 3})
    m = mismatch(info.value)
    assert m["stream"] in (pb("p"), "y") and "app-1-join-j" in m["join"]
    assert {m["expected"], m["actual"]} == {"3", "4"}


def test_mismatch_across_a_table_raises_naming_the_join_table_and_table():
    a = App()
    t = a.app.table("t", serde=KV_JSON)
    a.input("x", 2).send_to(t)
    jt = a.input("y", 4).join_table(t, combine=lambda m, r: m, name="jt")
    jt.sink(print)
    with pytest.raises(PlanError) as info:
        a.plan()
    m = mismatch(info.value)
    assert m["stream"] in ("x", "y")
    assert "app-1-join_table-jt" in m["join"] and "'t'" in m["join"]
    assert {m["expected"], m["actual"]} == {"2", "4"}


# -- plan(partitions=...) errors -----------------------------------------------------------------

def test_partitions_for_an_unknown_stream_raise_naming_it():
    a = App()
    a.input("a").sink(print)
    with pytest.raises(PlanError, match="'nope'"):
        a.plan(partitions={"nope": 2})


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_partitions_must_be_positive_ints(n):
    a = App()
    a.input("a").sink(print)
    with pytest.raises(PlanError, match="'a'"):
        a.plan(partitions={"a": n})


def test_partitions_conflicting_with_the_descriptor_raise():
    a = App()
    a.input("a", 2).sink(print)
    with pytest.raises(PlanError, match="'a'.*2.*3"):
        a.plan(partitions={"a": 3})
    assert a.plan(partitions={"a": 2}).streams["a"].partitions == 2
