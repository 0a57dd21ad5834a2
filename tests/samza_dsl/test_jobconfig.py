"""The typed job config: made from the key registry, built once, read by field."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest

from samza_dsl import StreamApplication
from samza_dsl.config import KNOWN_KEYS, STORE_PROPERTIES, STREAM_PROPERTIES, shown_config
from samza_dsl.errors import ConfigError
from samza_dsl.jobconfig import (
    KEY_OF_FIELD,
    HealthConfig,
    JobConfig,
    JobSettings,
    MetricsConfig,
    QueryConfig,
    StoreConfig,
    StreamConfig,
    TaskConfig,
    TracingConfig,
    job_config,
)
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

JOB_PARTS = {"task": TaskConfig, "job": JobSettings, "health": HealthConfig,
             "query": QueryConfig, "metrics": MetricsConfig, "tracing": TracingConfig}


def _keys(cls: type) -> list[str]:
    return [f.metadata[KEY_OF_FIELD] for f in dataclasses.fields(cls)]


def test_every_key_of_the_registry_is_one_field_of_one_part() -> None:
    job_keys = [k for part in JOB_PARTS.values() for k in _keys(part)]
    assert sorted(job_keys) == sorted(KNOWN_KEYS)
    assert sorted(_keys(StoreConfig)) == sorted(STORE_PROPERTIES)
    assert sorted(_keys(StreamConfig)) == sorted(STREAM_PROPERTIES)


@pytest.mark.parametrize("given", [{}, dict.fromkeys(KNOWN_KEYS)])
def test_an_absent_or_none_key_is_the_registry_s_default(given: dict[str, object]) -> None:
    config = JobConfig.validated(given)
    for name, cls in JOB_PARTS.items():
        part = getattr(config, name)
        for f in dataclasses.fields(cls):
            assert getattr(part, f.name) == KNOWN_KEYS[f.metadata[KEY_OF_FIELD]].default, f.name
    store = config.store("counts")
    for f in dataclasses.fields(StoreConfig):
        assert getattr(store, f.name) == STORE_PROPERTIES[f.metadata[KEY_OF_FIELD]].default
    assert config.stream("clicks").serde_error == "fail"
    assert config.stream("clicks").retention_ms == -1


def test_given_values_are_typed_fields() -> None:
    config = JobConfig.validated({
        "task.max.concurrency": "16", "task.async.commit": "yes", "job.container.id": "2",
        "job.processing.guarantee": "Exactly-Once", "metrics.reporters": "json",
        "stores.shop.carts.write.batch.size": "7", "streams.clicks.samza.serde.error": "skip",
        "streams.clicks.partitions": "4"})
    assert config.task.max_concurrency == 16 and config.task.async_commit is True
    assert config.job.container_id == 2 and config.job.exactly_once
    assert config.metrics.reporters == "json"
    assert config.store("shop.carts").write_batch_size == 7
    assert config.store("shop.carts").object_cache_size == 100_000
    assert config.stream("clicks").serde_error == "skip"
    assert config.stream("clicks").partitions == 4


@pytest.mark.parametrize("given, message", [
    ({"task.max.concurrency": "0"},
     "config task.max.concurrency='0' is out of range: it must be an integer >= 1"),
    ({"task.commit.ms": "soon"}, "config task.commit.ms='soon' is not an integer; it must be "
     "-1 (only at end) or a positive number of milliseconds"),
    ({"task.async.commit": "maybe"},
     "config task.async.commit='maybe' is not a boolean: use true or false"),
    ({"stores.counts.write.batch.size": "0"},
     "config stores.counts.write.batch.size='0' is out of range: it must be an integer >= 1"),
])
def test_a_wrong_value_is_refused_with_the_registry_s_message(
        given: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        JobConfig.validated(given)
    assert str(caught.value) == message


def test_it_is_a_read_only_mapping_of_the_given_keys() -> None:
    config = JobConfig.validated({"user.greeting": "hi", "task.commit.ms": 5})
    assert isinstance(config, Mapping)
    assert dict(config) == {"user.greeting": "hi", "task.commit.ms": 5}
    assert config == {"user.greeting": "hi", "task.commit.ms": 5}
    assert config.get("task.window.ms") is None and "task.window.ms" not in config
    with pytest.raises(TypeError):
        config["task.commit.ms"] = 7  # type: ignore[index]
    with pytest.raises(AttributeError, match="read-only"):
        config.task = TaskConfig(*[1] * len(dataclasses.fields(TaskConfig)))  # type: ignore[misc]


def test_a_system_s_security_settings_are_typed_and_its_secrets_not_shown() -> None:
    config = JobConfig.validated({
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.security.protocol": "SASL_SSL",
        "systems.kafka.sasl.username": "app", "systems.kafka.sasl.password": "hunter2",
        "systems.kafka.ssl.check.hostname": "false",
        "systems.kafka.consumer.fetch_max_bytes": 1024})
    kafka = config.system("kafka")
    assert kafka.factory == "kafka" and kafka.consumer == {"fetch_max_bytes": 1024}
    assert kafka.security.protocol == "SASL_SSL" and kafka.security.sasl_username == "app"
    assert kafka.security.sasl_password == "hunter2"
    assert kafka.security.ssl_check_hostname is False
    assert config.system("other").security.protocol == "PLAINTEXT"
    for text in (repr(config), repr(kafka), repr(kafka.security)):
        assert "hunter2" not in text
    assert shown_config(config)["systems.kafka.sasl.password"] == "***"


def test_it_is_built_once_and_handed_down_to_the_plan() -> None:
    app = StreamApplication("once", config={"task.commit.ms": 5, "user.where": "here"})
    local, serde = LocalSystem("local"), KVSerde(StringSerde(), JsonSerde())
    app.input(local.input("in", serde=serde, partitions=1)).send_to(
        app.output(local.output("out", serde=serde, partitions=1)))
    config = job_config(app, {"task.window.ms": "20"})
    assert (config.task.commit_ms, config.task.window_ms) == (5, 20)
    assert job_config(app, config) is config
    plan = app.plan(config=config)
    assert isinstance(plan.config, JobConfig)
    assert plan.config.task.window_ms == 20 and plan.config["user.where"] == "here"
    assert set(plan.generated_config) <= set(plan.config)


def test_a_part_says_which_of_its_keys_the_config_gave() -> None:
    config = JobConfig.validated({"streams.orders.retention.ms": "-1",
                                  "stores.counts.object.cache.size": 100_000,
                                  "metrics.reporter.interval.ms": None})
    orders = config.stream("orders")
    assert orders.given("retention_ms") and not orders.given("retention_bytes")
    assert orders.retention_ms == orders.retention_bytes == -1  # given or not, the same value
    assert config.store("counts").given("object_cache_size")
    assert not config.store("other").given("object_cache_size")
    assert not config.metrics.given("reporter_interval_ms")  # None is not given
    with pytest.raises(AttributeError, match="StreamConfig has no field 'retention.ms'"):
        orders.given("retention.ms")


def test_the_plan_s_job_name_is_its_typed_config_s() -> None:
    app = StreamApplication("named", config={"job.name": "named-eu"})
    local, serde = LocalSystem("local"), KVSerde(StringSerde(), JsonSerde())
    app.input(local.input("in", serde=serde, partitions=1)).send_to(
        app.output(local.output("out", serde=serde, partitions=1)))
    plan = app.plan(config={"job.id": "7"})
    assert plan.job_name == plan.config.job.job_name == "named-eu-7"
