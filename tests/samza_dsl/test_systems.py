"""System and stream descriptors."""

from __future__ import annotations

import dataclasses

import pytest

from samza_dsl.serdes import JsonSerde, KVSerde, NoOpSerde, StringSerde
from samza_dsl.systems import (
    InputDescriptor,
    KafkaSystem,
    LocalSystem,
    MemorySystem,
    OutputDescriptor,
)


def test_kafka_system_config():
    kafka = KafkaSystem("kafka", bootstrap_servers=["h1:9092", "h2:9092"],
                        consumer={"fetch.min.bytes": 1}, producer={"linger.ms": 5}, extra="x")
    assert kafka.name == "kafka" and kafka.factory == "kafka"
    assert kafka.to_config() == {
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.bootstrap.servers": "h1:9092,h2:9092",
        "systems.kafka.consumer.fetch.min.bytes": 1,
        "systems.kafka.producer.linger.ms": 5,
        "systems.kafka.extra": "x",
    }
    assert kafka.config["bootstrap.servers"] == "h1:9092,h2:9092"


@pytest.mark.parametrize("servers", ["", "   ", None, []])
def test_kafka_needs_bootstrap_servers(servers):
    with pytest.raises(ValueError, match="'k'.*bootstrap_servers"):
        KafkaSystem("k", bootstrap_servers=servers)  # type: ignore[arg-type]


def test_local_and_memory_systems():
    assert LocalSystem().name == "local" and LocalSystem().factory == "local"
    assert LocalSystem("l", "/tmp/x").config == {"path": "/tmp/x"}
    assert MemorySystem().name == "memory" and MemorySystem().factory == "memory"


@pytest.mark.parametrize("name", ["", "a.b", "a b", None])
def test_malformed_system_name(name):
    with pytest.raises(ValueError, match="system name") as info:
        MemorySystem(name)  # type: ignore[arg-type]
    assert repr(name) in str(info.value)


def test_input_descriptor_defaults_and_fields():
    mem = MemorySystem()
    d = mem.input("page-views")
    assert isinstance(d, InputDescriptor)
    assert (d.system, d.stream_id, d.serde, d.physical_name, d.partitions, d.offset_default,
            d.event_time) == (mem, "page-views", None, "page-views", None, "oldest", None)
    assert not d.keyed and d.effective_serde == NoOpSerde()

    def et(m):
        return 1.0

    serde = KVSerde(StringSerde(), JsonSerde())
    d2 = mem.input("pv", serde=serde, physical_name="PageViews", partitions=8,
                   offset_default="upcoming", event_time=et)
    assert (d2.serde, d2.physical_name, d2.partitions, d2.offset_default, d2.event_time) == (
        serde, "PageViews", 8, "upcoming", et)
    assert d2.keyed and d2.effective_serde is serde


def test_output_descriptor():
    o = MemorySystem().output("out", serde=JsonSerde(), partitions=2)
    assert isinstance(o, OutputDescriptor)
    assert (o.stream_id, o.physical_name, o.partitions, o.keyed) == ("out", "out", 2, False)


def test_descriptors_are_frozen_values():
    mem = MemorySystem()
    assert mem.input("a", partitions=2) == mem.input("a", partitions=2)
    assert mem.input("a", partitions=2) != mem.input("a", partitions=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        mem.input("a").partitions = 3  # type: ignore[misc]


@pytest.mark.parametrize("partitions", [0, -1, 1.5, True, "4"])
def test_bad_partitions_name_the_stream(partitions):
    with pytest.raises(ValueError, match="'s'.*partitions"):
        MemorySystem().input("s", partitions=partitions)
    with pytest.raises(ValueError, match="'s'.*partitions"):
        MemorySystem().output("s", partitions=partitions)


@pytest.mark.parametrize("sid", ["", "a b", "a/b", None])
def test_malformed_stream_id(sid):
    with pytest.raises(ValueError, match="stream id") as info:
        MemorySystem().input(sid)  # type: ignore[arg-type]
    assert repr(sid) in str(info.value)


def test_descriptor_argument_errors_name_the_stream():
    mem = MemorySystem()
    with pytest.raises(TypeError, match="'s'.*serde"):
        mem.input("s", serde=JsonSerde)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'s'.*offset_default"):
        mem.input("s", offset_default="latest")
    with pytest.raises(TypeError, match="'s'.*event_time"):
        mem.input("s", event_time=3)  # type: ignore[arg-type]
